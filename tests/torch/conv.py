"""conv.py - `sgc run` against PyTorch: conv2d (stride, padding, dilation,
groups, bias), max_pool2d, avg_pool2d, adaptive_avg_pool2d and batch_norm
(eval, and training with the running mean and var updated in place), in
every floating dtype; f16 and bf16 against PyTorch in f32 rounded once, as
the GPU computes them.  (Their gradients are in test_grad_ops.py.)"""
import torch
import torch.nn.functional as F

from _common import (BF16, F16, F32, F64, FLOATS, HALF, SG, Suite,
                     half_ref, rand)

S = Suite("conv")

# sums of up to C*R*S products: the BLAS and PyTorch's kernels sum in
# different orders
ATOL = {F32: 2e-5, F64: 1e-12, F16: 2e-3, BF16: 2e-2}


def pair(v):
    return "[%d, %d]" % tuple(v) if isinstance(v, tuple) else "%d" % v


CONVS = [
    # x, w, bias, stride, padding, dilation, groups
    ([2, 3, 8, 8], [4, 3, 3, 3], True, 1, 0, 1, 1),
    ([2, 3, 9, 7], [5, 3, 3, 2], False, (2, 1), (1, 2), 1, 1),
    ([1, 4, 10, 10], [6, 2, 3, 3], True, 2, 1, (2, 1), 2),
    ([2, 6, 6, 6], [6, 1, 3, 3], True, 1, 1, 1, 6),
    ([3, 2, 5, 5], [4, 2, 1, 1], True, 1, 0, 1, 1),
    ([1, 3, 16, 16], [8, 3, 7, 7], False, 2, 3, 1, 1),
    ([2, 4, 4, 4], [2, 4, 4, 4], True, 1, 0, 1, 1),
]


def conv_cases():
    for dt in FLOATS:
        for sx, sw, bias, st, pad, dil, grp in CONVS:
            x, w = rand(sx, dt, -1, 1), rand(sw, dt, -1, 1)
            b = rand([sw[0]], dt, -1, 1) if bias else None
            f = lambda x_, w_, b_=None: F.conv2d(x_, w_, b_, st, pad, dil, grp)
            args = [x, w] + ([b] if bias else [])
            ref = half_ref(f, *args) if dt in HALF else f(*args)
            body = "%%r = conv2d(%%x, %%w%s, stride=%s, padding=%s, dilation=%s, groups=%d)" % (
                ", %b" if bias else "", pair(st), pair(pad), pair(dil), grp)
            ins = {"x": x, "w": w}
            if bias:
                ins["b"] = b
            S.case("conv2d %s x%s w%s bias=%s stride=%s padding=%s dilation=%s groups=%d"
                   % (SG[dt], sx, sw, bias, st, pad, dil, grp), body, ins, {"r": ref},
                   atol=ATOL[dt])


POOLS = [([2, 3, 8, 8], 2, None, 0), ([2, 3, 7, 9], 3, 2, 1), ([1, 2, 6, 5], (3, 2), (1, 2), (1, 0)),
         ([2, 2, 5, 5], 5, None, 0)]


def pool_cases():
    for dt in FLOATS:
        for sx, k, st, pad in POOLS:
            x = rand(sx, dt)
            for op, fn in (("max_pool2d", F.max_pool2d), ("avg_pool2d", F.avg_pool2d)):
                f = lambda x_: fn(x_, k, st, pad)
                ref = half_ref(f, x) if dt in HALF else f(x)
                body = "%%r = %s(%%x, kernel_size=%s%s, padding=%s)" % (
                    op, pair(k), "" if st is None else ", stride=" + pair(st), pair(pad))
                S.case("%s %s x%s k=%s stride=%s padding=%s" % (op, SG[dt], sx, k, st, pad),
                       body, {"x": x}, {"r": ref}, atol=ATOL[dt])
        for sx, o in (([2, 3, 7, 5], (3, 2)), ([2, 4, 6, 6], 1), ([1, 2, 5, 9], (5, 4))):
            x = rand(sx, dt)
            f = lambda x_: F.adaptive_avg_pool2d(x_, o)
            ref = half_ref(f, x) if dt in HALF else f(x)
            S.case("adaptive_avg_pool2d %s x%s output_size=%s" % (SG[dt], sx, o),
                   "%%r = adaptive_avg_pool2d(%%x, output_size=%s)" % pair(o), {"x": x},
                   {"r": ref}, atol=ATOL[dt])
    # max over a window holding NaN gives NaN, and -inf stays
    x = rand([1, 1, 4, 4], F32)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 2:, 2:] = float("-inf")
    S.case("max_pool2d NaN and -inf", "%r = max_pool2d(%x, kernel_size=2)", {"x": x},
           {"r": F.max_pool2d(x, 2)})


def bn_cases():
    for dt in FLOATS:
        for sx in ([4, 3, 5, 5], [6, 4], [2, 3, 4]):
            c = sx[1]
            x, w, b = rand(sx, dt), rand([c], dt), rand([c], dt)
            rm, rv = rand([c], F32, -1, 1), rand([c], F32, 0.5, 2)
            for training in (False, True):
                for mom, eps in ((0.1, 1e-5), (0.3, 1e-3)):
                    # PyTorch's CPU batch_norm takes the stats in the input's
                    # dtype; halves computed in f32 and rounded once
                    m2, v2 = rm.clone(), rv.clone()
                    if dt in HALF:
                        r = F.batch_norm(x.float(), m2, v2, w.float(), b.float(), training,
                                         mom, eps).to(dt)
                    else:
                        m2, v2 = m2.to(dt), v2.to(dt)
                        r = F.batch_norm(x, m2, v2, w, b, training, mom, eps)
                    body = ("%%r = batch_norm(%%x, %%rm, %%rv, %%w, %%b, training=%s, momentum=%s, "
                            "eps=%s)" % ("true" if training else "false", mom, eps))
                    ins = {"x": x, "w": w, "b": b,
                           "rm": rm if dt in HALF else rm.to(dt),
                           "rv": rv if dt in HALF else rv.to(dt)}
                    # the running stats are inputs here: the updated ones are in --out
                    S.case("batch_norm %s x%s training=%s momentum=%s eps=%s" %
                           (SG[dt], sx, training, mom, eps), body, ins,
                           {"r": r, "rm": m2.to(ins["rm"].dtype), "rv": v2.to(ins["rv"].dtype)},
                           atol=ATOL[dt] if dt != BF16 else 4e-2,
                           rtol=None if dt in HALF else 1e-5 if dt == F32 else 1e-9)


def bn_consts():
    """The running statistics as consts (as fx2sg exports them): updated in
    place over three --steps as three PyTorch training steps update them."""
    x = rand([4, 3, 2, 2], F32)
    rm, rv = rand([3], F32, -1, 1), rand([3], F32, 0.5, 2)
    m2, v2 = rm.clone(), rv.clone()
    for _ in range(3):
        F.batch_norm(x, m2, v2, None, None, True, 0.2)
    src = ("graph g {\n  input %x : f32[4, 3, 2, 2]\n  const %rm : f32[3]\n  const %rv : f32[3]\n"
           "  %r = batch_norm(%x, %rm, %rv, training=true, momentum=0.2)\n  return %r\n}\n")
    rc, out, err, _ = S.run(src, {"x": x}, {"rm": rm, "rv": rv}, args=("--steps", "3"))
    if rc != 0 or out is None:
        S.report("batch_norm running stats as consts over 3 steps", "exit %d: %s" % (rc, err))
        return
    from _common import compare
    why = compare(out.get("rm", torch.zeros(0)), m2) or compare(out.get("rv", torch.zeros(0)), v2)
    S.report("batch_norm running stats as consts over 3 steps", why and "%s (--out has %s)" %
             (why, sorted(out)))


def bn_train_then_eval():
    """A training batch_norm updates the running statistics an eval one reads
    next (one module called in train then eval mode), its input made from a
    param: PyTorch updates them out of autograd's sight, so the eval one
    gives them no gradient; the step (loss, the params after SGD, the
    running statistics) equals PyTorch's."""
    x = rand([4, 3, 2, 2], F32)
    s0, w0, b0 = rand([4, 3, 2, 2], F32), rand([3], F32, 0.5, 2), rand([3], F32, -1, 1)
    rm, rv = rand([3], F32, -1, 1), rand([3], F32, 0.5, 2)
    s, w, b = (t.clone().requires_grad_(True) for t in (s0, w0, b0))
    m2, v2 = rm.clone(), rv.clone()
    y = F.batch_norm(x * s, m2, v2, w, b, True, 0.1)
    z = F.batch_norm(y, m2, v2, w, b, False)
    loss = z.mean()
    loss.backward()
    opt = torch.optim.SGD([s, w, b], lr=0.1)
    opt.step()
    src = ("graph g {\n  input %x : f32[4, 3, 2, 2]\n  param %s : f32[4, 3, 2, 2]\n"
           "  param %w : f32[3]\n  param %b : f32[3]\n  const %rm : f32[3]\n"
           "  const %rv : f32[3]\n  %xs = mul(%x, %s)\n"
           "  %y = batch_norm(%xs, %rm, %rv, %w, %b, training=true)\n"
           "  %z = batch_norm(%y, %rm, %rv, %w, %b, training=false)\n"
           "  %loss = mean(%z)\n  backward(%loss)\n  optimizer sgd(lr=0.1)\n"
           "  return %loss\n}\n")
    label = "batch_norm in training, then eval reading the updated running statistics"
    rc, out, err, _ = S.run(src, {"x": x}, {"s": s0, "w": w0, "b": b0, "rm": rm, "rv": rv})
    if rc != 0 or out is None:
        S.report(label, "exit %d: %s" % (rc, err))
        return
    from _common import compare
    exp = {"loss": loss.detach(), "s": s.detach(), "w": w.detach(), "b": b.detach(),
           "rm": m2, "rv": v2}
    for n, e in exp.items():
        why = compare(out[n], e) if n in out else "missing from --out"
        if why:
            S.report(label, "%s: %s" % (n, why))
            return
    S.report(label, None)


conv_cases()
pool_cases()
bn_cases()
bn_consts()
bn_train_then_eval()
S.finish()
