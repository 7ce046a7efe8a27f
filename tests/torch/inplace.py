"""inplace.py - `sgc run` against PyTorch: in-place ops (add_ sub_ mul_ div_
copy_ zero_ fill_) on inputs, params and intermediate values, --steps
carrying mutated inputs across calls, stream and event ops, control_deps,
sync_dealloc, del, offload, and collectives with WORLD = 1."""
import torch

from _common import (BF16, BOOL, F16, F32, F64, FLOATS, I32, I64, SG, Suite,
                     half_ref, lit, program, rand)

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
steps_cases()
stream_cases()
collective_cases()
S.finish()
