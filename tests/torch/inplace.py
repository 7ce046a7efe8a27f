"""inplace.py - `sgc run` against PyTorch: in-place ops (add_ sub_ mul_ div_
copy_ zero_ fill_) on inputs, params and intermediate values, and on views
of them (the write shows in the viewed value and its other views, as
PyTorch's views share memory), --steps carrying mutated inputs across
calls, stream and event ops, control_deps, sync_dealloc, del, offload, and
collectives with WORLD = 1."""
import torch

from _common import (BF16, BOOL, F16, F32, F64, FLOATS, I32, I64, SG, Suite,
                     compare, half_ref, lit, program, rand)

S = Suite("inplace")

OPS = {"add_": torch.Tensor.add_, "sub_": torch.Tensor.sub_,
       "mul_": torch.Tensor.mul_, "div_": torch.Tensor.div_}


def ref_inplace(name, x, y):
    """x op= y in PyTorch; halves computed in f32 and rounded to x's dtype."""
    x = x.clone()
    if x.dtype in (F16, BF16) or (isinstance(y, torch.Tensor) and y.dtype in (F16, BF16)):
        yy = y.float() if isinstance(y, torch.Tensor) and y.dtype in (F16, BF16) else y
        r = OPS[name](x.float(), yy)
        return r.to(x.dtype)
    return OPS[name](x, y)


def inplace_cases():
    for name in OPS:
        for dt, ydt in ((F32, F32), (F64, F32), (BF16, BF16), (F16, F16),
                        (BF16, F32), (F32, I64), (I64, I64), (I32, I64)):
            if name == "div_" and dt in (I64, I32):
                continue  # PyTorch cannot store true division in an integer
            x = rand([3, 4], dt)
            y = rand([4], ydt, 1, 3) if name == "div_" else rand([4], ydt)
            # on an input: the mutated input is in --out
            S.case("%s input %s, %s" % (name, SG[dt], SG[ydt]),
                   "%s(%%x, %%y)\n%%r = mul(%%x, 2)" % name,
                   {"x": x, "y": y}, {"r": ref_inplace(name, x, y) * 2,
                                      "x": ref_inplace(name, x, y)})
        for dt, s in ((F32, 0.5), (BF16, 0.1), (I64, 3), (F16, -2)):
            if name == "div_" and dt == I64:
                continue
            x = rand([2, 3], dt)
            S.case("%s %s scalar %s" % (name, SG[dt], s), "%s(%%x, %s)" % (name, lit(s)),
                   {"x": x}, {"x": ref_inplace(name, x, s)})
    # on an intermediate value: later uses see the new value
    x = rand([2, 3], F32)
    S.case("add_ on an intermediate", "%t = exp(%x)\nadd_(%t, 1.0)\n%r = mul(%t, %x)",
           {"x": x}, {"r": (torch.exp(x) + 1) * x})
    for dt in (F32, BF16, I64, BOOL):
        x = rand([3, 2], dt)
        src = rand([2], F32)
        S.case("copy_ %s from f32 broadcast" % SG[dt], "copy_(%x, %s)",
               {"x": x, "s": src}, {"x": x.clone().copy_(src)})
        S.case("zero_ %s" % SG[dt], "zero_(%x)", {"x": x}, {"x": torch.zeros_like(x)})
    for dt, v in ((F32, 1.5), (BF16, 0.1), (I32, -4), (BOOL, True), (F64, float("inf"))):
        x = rand([2, 2], dt)
        S.case("fill_ %s %s" % (SG[dt], v), "fill_(%%x, value=%s)" % lit(v),
               {"x": x}, {"x": torch.full_like(x, v)})
    # a param mutated in place is saved updated
    w = rand([3], F32)
    x = rand([3], F32)
    S.case("add_ on a param", "add_(%w, %x)\n%r = sum(%w)", {"x": x},
           {"r": (w + x).sum(), "w": w + x}, params={"w": w})


def view_cases():
    """In-place ops through views, against PyTorch doing the same in place."""
    cache, new = rand([4, 3], F32), rand([1, 3], F32)
    c = cache.clone()
    c[2:3].copy_(new)
    S.case("copy_ into a slice of an input (a cache update)",
           "%s = slice(%cache, dim=0, start=2, end=3)\ncopy_(%s, %new)\n%t = sum(%cache)",
           {"cache": cache, "new": new}, {"t": c.sum(), "cache": c})
    x = rand([2, 3], F32)

    def through_transpose(x):
        y = x * 2
        t, s = y.t(), y[:, 1:]
        t.add_(1.0)
        s.mul_(10.0)
        return {"z": y + 0.0, "t": t, "s": s}
    S.case("add_ on a transpose, mul_ on a slice: the base and each view see both",
           "%y = mul(%x, 2.0)\n%t = transpose(%y, dim0=0, dim1=1)\n"
           "%s = slice(%y, dim=1, start=1)\nadd_(%t, 1.0)\nmul_(%s, 10.0)\n%z = add(%y, 0.0)",
           {"x": x}, through_transpose(x))

    def base_then_views(x):
        y = x * 2
        vs = {"t": y.t(), "s": y[:, 1:], "r": y.reshape(6), "u": y.unsqueeze(0),
              "e": y.unsqueeze(0).expand(2, 2, 3), "q": y.unsqueeze(2).squeeze(2),
              "p": y.unsqueeze(0).permute(2, 0, 1)}
        y.mul_(3.0)
        return {k: v.clone() for k, v in vs.items()}
    S.case("mul_ on a value: its views made before see it",
           "%y = mul(%x, 2.0)\n%t = transpose(%y, dim0=0, dim1=1)\n"
           "%s = slice(%y, dim=1, start=1)\n%r = reshape(%y, shape=[6])\n"
           "%u = unsqueeze(%y, dim=0)\n%e = expand(%u, shape=[2, 2, 3])\n"
           "%q0 = unsqueeze(%y, dim=2)\n%q = squeeze(%q0, dim=2)\n"
           "%p = permute(%u, dims=[2, 0, 1])\nmul_(%y, 3.0)",
           {"x": x}, base_then_views(x))
    y4 = rand([2, 4], F32)

    def chunk_piece(x):
        y = x + 0.0
        a, b = y.chunk(2, dim=1)
        b.fill_(0.5)
        a.copy_(b * 2)
        return {"y": y}
    S.case("fill_ and copy_ on chunk pieces", "%y = add(%x, 0.0)\n"
           "%a, %b = chunk(%y, chunks=2, dim=1)\nfill_(%b, value=0.5)\n"
           "%b2 = mul(%b, 2.0)\ncopy_(%a, %b2)", {"x": y4}, chunk_piece(y4))
    z = rand([3, 4], F32)

    def view_of_view(x):
        y = x + 0.0
        y.t()[1:3].mul_(-1.0)
        y.reshape(2, 6)[1].zero_()
        return {"y": y}
    S.case("slice of a transpose, row of a reshape", "%y = add(%x, 0.0)\n"
           "%t = transpose(%y, dim0=0, dim1=1)\n%s = slice(%t, dim=0, start=1, end=3)\n"
           "mul_(%s, -1.0)\n%r = reshape(%y, shape=[2, 6])\n%r1 = slice(%r, dim=0, start=1)\n"
           "zero_(%r1)", {"x": z}, view_of_view(z))

    def copies(x):
        y = x + 0.0
        r = y.t().reshape(12)     # not viewable: a copy
        c = y.t().contiguous()    # a copy
        d = y.contiguous()        # y itself
        f = y.to(torch.float32)   # y itself
        r.add_(1.0)
        c.add_(1.0)
        d.mul_(2.0)
        f.add_(0.25)
        return {"y": y, "r": r, "c": c}
    S.case("reshape and contiguous copy where PyTorch's do, a same-dtype cast does not",
           "%y = add(%x, 0.0)\n%t = transpose(%y, dim0=0, dim1=1)\n%r = reshape(%t, shape=[12])\n"
           "%c = contiguous(%t)\n%d = contiguous(%y)\n%f = cast(%y, dtype=f32)\n"
           "add_(%r, 1.0)\nadd_(%c, 1.0)\nmul_(%d, 2.0)\nadd_(%f, 0.25)",
           {"x": z}, copies(z))
    p13 = rand([1, 3], F32)

    def fill_expand(x):
        p = x * 1.0
        p.expand(2, 3).zero_()
        q = x * 1.0
        q.unsqueeze(0).expand(4, 1, 3).fill_(7.0)
        return {"p": p, "q": q}
    S.case("zero_ and fill_ on all of a broadcasting expand", "%p = mul(%x, 1.0)\n"
           "%e = expand(%p, shape=[2, 3])\nzero_(%e)\n%q = mul(%x, 1.0)\n"
           "%q1 = unsqueeze(%q, dim=0)\n%f = expand(%q1, shape=[4, 1, 3])\nfill_(%f, value=7.0)",
           {"x": p13}, fill_expand(p13))
    S.case("copy_ of a broadcasting expand onto itself: nothing written, as in PyTorch",
           "%p = mul(%x, 1.0)\n%e = expand(%p, shape=[2, 3])\ncopy_(%e, %e)\n%q = add(%e, 0.0)",
           {"x": p13}, {"q": p13.expand(2, 3) * 1.0})
    S.expect_error("add_ on a broadcasting expand: an error, as in PyTorch",
                   program({"x": p13}, "%p = mul(%x, 1.0)\n%e = expand(%p, shape=[2, 3])\n"
                           "add_(%e, 1.0)", ["p"]),
                   1, "several elements share one memory location", inputs={"x": p13})
    S.expect_error("add_ on part of a broadcasting expand: not taken",
                   program({"x": p13}, "%p = mul(%x, 1.0)\n%e = expand(%p, shape=[2, 3])\n"
                           "%s = slice(%e, dim=0, end=1)\nadd_(%s, 1.0)", ["p"]),
                   1, "part of a view made by an 'expand' that broadcast", inputs={"x": p13})
    w = rand([2, 3], F32)
    S.expect_error("add_ on a view of a param before backward: an error, as in PyTorch",
                   program({}, "%t = transpose(%w, dim0=0, dim1=1)\nadd_(%t, 1.0)\n"
                           "%l = sum(%w)\nbackward(%l)", ["l"], params={"w": w}),
                   1, "a view of param '%w'", params={"w": w})
    xa, ya = rand([2, 3], F32), rand([2, 3], F32)
    S.case("a returned view of an input that copy_ overwrites after it",
           "%t = transpose(%x, dim0=0, dim1=1)\ncopy_(%x, %y)", {"x": xa, "y": ya},
           {"t": ya.t(), "x": ya})
    x8 = rand([8], F32)
    S.case("--steps 3: an input written through a slice carries over",
           "%s = slice(%x, dim=0, start=2, end=5)\nadd_(%s, 1.0)\n%r = sum(%x)", {"x": x8},
           {"x": x8 + torch.tensor([0, 0, 3, 3, 3, 0, 0, 0], dtype=F32),
            "r": (x8 + torch.tensor([0, 0, 3, 3, 3, 0, 0, 0], dtype=F32)).sum()},
           args=("--steps", "3"))
    # training through a value changed in place through a view
    w = rand([2, 3], F64)
    r = rand([2, 3], F64)
    wt = w.clone().requires_grad_(True)
    y = wt * 2
    y[:, 1:].mul_(3.0)
    y.t()[0].add_(1.0)
    loss = (y * r).sum()
    loss.backward()
    src = program({"r": r}, "%y = mul(%w, 2.0)\n%s = slice(%y, dim=1, start=1)\nmul_(%s, 3.0)\n"
                  "%t = transpose(%y, dim0=0, dim1=1)\n%t0 = slice(%t, dim=0, end=1)\n"
                  "add_(%t0, 1.0)\n%m = mul(%y, %r)\n%loss = sum(%m)\nbackward(%loss)",
                  ["loss"], params={"w": w})
    rc, out, err, _ = S.run(src, {"r": r}, {"w": w})
    why = "sgc run exited %d: %s" % (rc, err.strip()[:500]) if rc != 0 or out is None else \
        compare(out["grad.w"], wt.grad) or compare(out["loss"], loss.detach())
    S.report("backward through values changed in place through views", why)


def steps_cases():
    x = rand([4], F32)
    for steps in (1, 3):
        S.case("--steps %d: mutated input carries over" % steps,
               "add_(%x, 1.0)\n%r = mul(%x, 2.0)", {"x": x},
               {"r": (x + steps) * 2, "x": x + steps}, args=("--steps", str(steps)))
    w = rand([3], F32)
    S.case("--steps 4: param updated in place each call", "mul_(%w, 0.5)\n%r = sum(%w)",
           {}, {"w": w * 0.0625, "r": (w * 0.0625).sum()}, params={"w": w},
           args=("--steps", "4"))


def stream_cases():
    x = rand([4, 4], F32)
    decls = "stream side\nevent e, f"
    body = """
    %a = exp(%x)
    record_event(e)
    with stream(side) {
      wait_event(e)
      %b = mul(%a, 2.0)
      record_event(f)
    }
    wait_event(f)
    %c = add(%b, %a)
    wait_stream(side)
    synchronize()
    """
    a = torch.exp(x)
    S.case("streams and events", body, {"x": x}, {"c": a * 2 + a}, decls=decls)
    body2 = """
    %a = exp(%x)
    record_event(e, stream=default)
    wait_event(e, stream=side)
    with stream(side) {
      %b = mul(%a, 2.0)
    }
    wait_stream(side)
    %a1, %b1 = control_deps(%a, %b, sync=wait_stream, other=side)
    %c = add(%b1, %a1)
    del %a
    """
    S.case("explicit stream=, control_deps, del", body2, {"x": x}, {"c": a * 2 + a},
           decls=decls)
    body3 = """
    %a = exp(%x)
    with stream(side) {
      wait_stream(default)
      %b = mul(%a, 2.0)
      record_event(f)
    }
    sync_dealloc(%a, event=f, stream=default)
    wait_event(f)
    %c = add(%b, 1.0)
    offload %b
    """
    S.case("sync_dealloc and offload", body3, {"x": x}, {"c": a * 2 + 1}, decls=decls)
    S.case("extern event", "%a = exp(%x)\nrecord_event(ev)", {"x": x}, {"a": a},
           decls="extern event ev")


def collective_cases():
    for dt in (F32, BF16, I64):
        x = rand([4, 2], dt)
        for body in ('%r = all_reduce(%x)', '%r = all_reduce(%x, op="avg")',
                     '%r = all_reduce(%x, op="max", algo="oneshot")',
                     '%r = all_reduce(%x, op="min")', '%r = all_gather(%x, dim=0)',
                     '%r = reduce_scatter(%x, op="sum", dim=1)', '%r = broadcast(%x, root=0)',
                     '%r = all_to_all(%x, dim=0)', '%r = all_gather(%x, algo="ce")'):
            S.case("%s %s (WORLD=1)" % (body[5:], SG[dt]), body, {"x": x}, {"r": x.clone()})
        S.case("all_reduce in place %s" % SG[dt], "all_reduce(%x)\n%r = add(%x, %x)",
               {"x": x}, {"r": x + x})


inplace_cases()
view_cases()
steps_cases()
stream_cases()
collective_cases()
S.finish()
