"""reduce.py - `sgc run` against PyTorch: reductions (sum mean amax amin var
var_mean), softmax and log_softmax, layer_norm and rms_norm, and the losses
(mse_loss, cross_entropy)."""
import torch
import torch.nn.functional as F

from _common import (BOOL, BF16, F16, F32, F64, FLOATS, HALF, I32, I64, INTS,
                     SG, Suite, half_ref, ints, lit, rand)

S = Suite("reduce")

DIMS = [None, [0], [-1], [0, 2], [1, -1], [0, 1, 2]]


def attrs(dims, keepdim):
    a = []
    if dims is not None:
        a.append("dims=" + ints(dims))
    if keepdim:
        a.append("keepdim=true")
    return "".join(", " + x for x in a)


def torch_reduce(name, x, dims, keepdim):
    d = dims if dims is not None else list(range(x.dim()))
    if name == "sum":
        return torch.sum(x, dim=d, keepdim=keepdim) if d else torch.sum(x)
    if name == "mean":
        return torch.mean(x, dim=d, keepdim=keepdim) if d else torch.mean(x)
    if name == "amax":
        return torch.amax(x, dim=d, keepdim=keepdim)
    if name == "amin":
        return torch.amin(x, dim=d, keepdim=keepdim)
    if name == "var":
        return torch.var(x, dim=d, keepdim=keepdim)
    raise ValueError(name)


def ref(name, x, dims, keepdim):
    fn = lambda t: torch_reduce(name, t, dims, keepdim)
    if x.dtype in HALF:
        return half_ref(fn, x, out_dtype=x.dtype)
    return fn(x)


def reduce_cases():
    for name in ("sum", "mean", "amax", "amin", "var"):
        dtypes = FLOATS + (INTS + [BOOL] if name in ("sum", "amax", "amin") else [])
        for dt in dtypes:
            x = rand([3, 4, 5], dt)
            for dims in DIMS:
                for keepdim in (False, True):
                    S.case("%s %s dims=%s keepdim=%s" % (name, SG[dt], dims, keepdim),
                           "%%r = %s(%%x%s)" % (name, attrs(dims, keepdim)),
                           {"x": x}, {"r": ref(name, x, dims, keepdim)})
        x = rand([6], F32)
        S.case("%s f32 1-D" % name, "%%r = %s(%%x)" % name, {"x": x},
               {"r": ref(name, x, None, False)})
        x = torch.tensor(2.5)
        if name != "var":
            S.case("%s f32 scalar" % name, "%%r = %s(%%x)" % name, {"x": x},
                   {"r": ref(name, x, None, False)})
    # empty reductions where PyTorch defines them
    e = torch.zeros(0, 3)
    S.case("sum over empty dim", "%r = sum(%x, dims=[0])", {"x": e}, {"r": e.sum(0)})
    S.case("mean over empty dim", "%r = mean(%x, dims=[0])", {"x": e}, {"r": e.mean(0)})
    S.case("amax over nonempty dim of empty", "%r = amax(%x, dims=[1])", {"x": e},
           {"r": torch.amax(e, 1)})
    # NaN and infinities
    x = torch.tensor([[1.0, float("nan"), 3.0], [float("-inf"), -2.0, float("inf")],
                      [float("-inf"), float("-inf"), float("-inf")]])
    for name in ("sum", "mean", "amax", "amin", "var"):
        S.case("%s nan/inf rows" % name, "%%r = %s(%%x, dims=[1])" % name, {"x": x},
               {"r": ref(name, x, [1], False)})
    # sum of integers accumulates in i64; bool sum counts
    big = torch.tensor([2 ** 31 - 1, 2 ** 31 - 1, 5], dtype=I32)
    S.case("sum i32 -> i64 no overflow", "%r = sum(%x)", {"x": big}, {"r": big.sum()})
    # var of one element: NaN as PyTorch
    one = torch.tensor([[1.5], [2.0]])
    S.case("var of one element", "%r = var(%x, dims=[1])", {"x": one},
           {"r": torch.var(one, 1)})
    # and of none: NaN too (0 / max(0, N - 1)), not 0 / -1
    none = torch.zeros([3, 0])
    S.case("var and var_mean of no elements", "%r = var(%x, dims=[1])\n"
           "%v, %m = var_mean(%x, dims=[1], keepdim=true)", {"x": none},
           {"r": torch.var(none, 1), "v": torch.var_mean(none, 1, keepdim=True)[0],
            "m": torch.var_mean(none, 1, keepdim=True)[1]})
    for dt in FLOATS:
        x = rand([4, 6], dt)
        for dims, keep in ((None, False), ([1], False), ([0], True)):
            d = dims if dims is not None else [0, 1]
            fn = lambda t: torch.var_mean(t, dim=d, keepdim=keep)
            v, m = fn(x.float() if dt in HALF else x)
            S.case("var_mean %s dims=%s keepdim=%s" % (SG[dt], dims, keep),
                   "%%v, %%m = var_mean(%%x%s)" % attrs(dims, keep), {"x": x},
                   {"v": v.to(dt), "m": m.to(dt)})


def softmax_cases():
    for name, fn in (("softmax", F.softmax), ("log_softmax", F.log_softmax)):
        for dt in FLOATS:
            x = rand([3, 4, 5], dt, -5, 5)
            for dim in (None, -1, 0, 1, -2):
                a = "" if dim is None else ", dim=%d" % dim
                d = -1 if dim is None else dim
                f = lambda t: fn(t, dim=d)
                S.case("%s %s dim=%s" % (name, SG[dt], dim), "%%r = %s(%%x%s)" % (name, a),
                       {"x": x}, {"r": half_ref(f, x, out_dtype=dt) if dt in HALF else f(x)})
        ninf = float("-inf")
        x = torch.tensor([[1.0, ninf, 2.0, ninf], [ninf, ninf, ninf, ninf],
                          [0.5, float("nan"), 1.0, 2.0], [float("inf"), 1.0, 2.0, 3.0],
                          [1000.0, 1000.0, -1000.0, 0.0]])
        S.case("%s -inf/nan/inf rows" % name, "%%r = %s(%%x)" % name, {"x": x},
               {"r": fn(x, dim=-1)})
        x = torch.tensor(3.0)
        S.case("%s scalar" % name, "%%r = %s(%%x)" % name, {"x": x}, {"r": fn(x, dim=-1)})


def norm_cases():
    for dt in FLOATS:
        x = rand([3, 4, 8], dt, -2, 2)
        w, b = rand([8], dt), rand([8], dt)
        for eps in (1e-5, 0.1):
            f = lambda t, w_, b_: F.layer_norm(t, (8,), w_, b_, eps=eps)
            S.case("layer_norm %s eps=%g" % (SG[dt], eps),
                   "%%r = layer_norm(%%x, %%w, %%b, eps=%s)" % lit(eps),
                   {"x": x, "w": w, "b": b},
                   {"r": half_ref(f, x, w, b, out_dtype=dt) if dt in HALF else f(x, w, b)})
        f = lambda t: F.layer_norm(t, (8,))
        S.case("layer_norm %s no affine" % SG[dt], "%r = layer_norm(%x)", {"x": x},
               {"r": half_ref(f, x, out_dtype=dt) if dt in HALF else f(x)})
        f = lambda t, w_: F.layer_norm(t, (8,), w_)
        S.case("layer_norm %s weight only" % SG[dt], "%r = layer_norm(%x, %w)",
               {"x": x, "w": w}, {"r": half_ref(f, x, w, out_dtype=dt) if dt in HALF else f(x, w)})

        # torch.nn.functional.rms_norm (not in this PyTorch): its formula
        def rms(t, w_=None, eps=1e-6):
            r = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)
            return r * w_ if w_ is not None else r
        S.case("rms_norm %s" % SG[dt], "%r = rms_norm(%x, %w)", {"x": x, "w": w},
               {"r": half_ref(rms, x, w, out_dtype=dt) if dt in HALF else rms(x, w)})
        S.case("rms_norm %s no weight eps=0.01" % SG[dt], "%r = rms_norm(%x, eps=0.01)",
               {"x": x}, {"r": (rms(x.float(), None, 0.01) if dt in HALF else rms(x, None, 0.01)).to(dt)})


def loss_cases():
    for dt in FLOATS:
        a, b = rand([4, 5], dt), rand([4, 5], dt)
        f = F.mse_loss
        S.case("mse_loss %s" % SG[dt], "%r = mse_loss(%a, %b)", {"a": a, "b": b},
               {"r": half_ref(f, a, b, out_dtype=dt) if dt in HALF else f(a, b)})
        x = rand([6, 10], dt, -4, 4)
        t = torch.randint(0, 10, (6,))
        f = F.cross_entropy
        S.case("cross_entropy %s" % SG[dt], "%r = cross_entropy(%x, %t)", {"x": x, "t": t},
               {"r": half_ref(f, x, t, out_dtype=dt) if dt in HALF else f(x, t)})
    x = rand([5, 7], F32)
    t = torch.tensor([1, -100, 6, 0, -100])
    S.case("cross_entropy ignore_index -100", "%r = cross_entropy(%x, %t)",
           {"x": x, "t": t}, {"r": F.cross_entropy(x, t)})
    x = rand([2, 4, 3], F32)
    t = torch.randint(0, 4, (2, 3))
    S.case("cross_entropy [N, C, d]", "%r = cross_entropy(%x, %t)", {"x": x, "t": t},
           {"r": F.cross_entropy(x, t)})
    x = rand([4], F32)
    t = torch.tensor(2)
    S.case("cross_entropy unbatched [C]", "%r = cross_entropy(%x, %t)", {"x": x, "t": t},
           {"r": F.cross_entropy(x, t)})
    a = rand([3, 4], F32)
    b = rand([4], F32)
    S.case("mse_loss broadcast", "%r = mse_loss(%a, %b)", {"a": a, "b": b},
           {"r": F.mse_loss(a, b.expand(3, 4))})
    # a bad class index is a run-time error, not a crash
    S.expect_error("cross_entropy target out of range",
                   "graph g {\n input %x : f32[2, 3]\n input %t : i64[2]\n"
                   " %r = cross_entropy(%x, %t)\n return %r\n}\n", 1, "out of range",
                   inputs={"x": rand([2, 3], F32), "t": torch.tensor([0, 3])})


reduce_cases()
softmax_cases()
norm_cases()
loss_cases()
S.finish()
