"""files.py - `sgc run`'s files: safetensors written by PyTorch (stio.py)
load, --out loads back in PyTorch and matches; params missing from --params
are initialised by the documented scheme (recomputed here independently);
wrong files are errors with the documented exit statuses and no --out is
written; --steps N equals N chained runs; without --out, returned values are
printed."""
import math
import os

import torch

from _common import (ALL, BOOL, BF16, F16, F32, F64, I32, I64, SG, Suite,
                     compare, program, rand, sgtype)

import stio

S = Suite("files")


def roundtrip_cases():
    inputs = {"x_%s" % SG[dt]: rand([2, 3], dt) for dt in ALL}
    inputs["scalar"] = torch.tensor(1.25, dtype=F64)
    inputs["empty"] = torch.zeros(0, 4, dtype=BF16)
    inputs["dotted.name"] = rand([5], I32)
    params = {"w": rand([3, 2], BF16), "c": rand([4], I64)}
    body = "\n".join("%%r_%s = contiguous(%%%s)" % (n.replace(".", "_"), n) for n in inputs)
    rets = ["r_" + n.replace(".", "_") for n in inputs]
    src = program(inputs, body, rets, params={"w": params["w"]}, consts={"c": params["c"]})
    rc, out, err, _ = S.run(src, inputs, params)
    if rc != 0:
        S.report("safetensors round trip", "exit %d: %s" % (rc, err))
        return
    for n, t in inputs.items():
        S.report("round trip %s %s" % (n, sgtype(t)), compare(out["r_" + n.replace(".", "_")], t))
    for n in ("w", "c"):
        S.report("param/const %s saved" % n, compare(out[n], params[n]))
    extra = set(out) - set(rets) - {"w", "c"}
    S.report("--out holds nothing else", "extra: %s" % extra if extra else None)


MASK = 2 ** 64 - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def fnv1a(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & MASK
    return h


def init_ref(name, seed, shape, dtype):
    """docs/interpreter.md's initialisation, from its description."""
    n = math.prod(shape)
    if dtype not in (F64, F32, F16, BF16):
        return torch.zeros(shape, dtype=dtype)
    b = 1.0 / math.sqrt(shape[-1]) if shape and shape[-1] > 0 else 1.0
    key = fnv1a(name)
    vals = []
    for k in range(n):
        h = mix((mix(seed ^ key) + (k + 1) * 0x9E3779B97F4A7C15) & MASK)
        u = (h >> 11) * 2.0 ** -53
        vals.append((2 * u - 1) * b)
    t = torch.tensor(vals, dtype=F64).reshape(shape)
    return t if dtype == F64 else t.float().to(dtype)


def init_cases():
    decl = {"w1": torch.zeros(4, 16), "emb.w": torch.zeros(3, 5, dtype=BF16),
            "s": torch.zeros([], dtype=F16), "d": torch.zeros(7, dtype=F64)}
    consts = {"mask": torch.zeros(2, 2, dtype=BOOL), "idx": torch.zeros(3, dtype=I64)}
    for seed in (0, 7, 2 ** 63 + 5):
        src = program({}, "%r = sum(%w1)", ["r"], params=decl, consts=consts)
        rc, out, err, _ = S.run(src, args=("--seed", str(seed)))
        if rc != 0:
            S.report("init seed %d" % seed, "exit %d: %s" % (rc, err))
            continue
        for n, t in list(decl.items()) + list(consts.items()):
            ref = init_ref(n, seed, list(t.shape), t.dtype)
            S.report("init %s %s seed %d" % (n, sgtype(t), seed), compare(out[n], ref, rtol=0, atol=0))
        b = 1 / math.sqrt(16)
        w = out["w1"]
        S.report("init w1 within [-b, b) seed %d" % seed,
                 None if bool(((w >= -b) & (w < b)).all()) and w.std() > 0.1 * b else "out of range")
    # a param given in --params is not re-initialised; the others still are
    w1 = rand([4, 16], F32)
    src = program({}, "%r = sum(%w1)", ["r"], params=decl)
    rc, out, err, _ = S.run(src, params={"w1": w1}, args=("--seed", "3"))
    S.report("given param kept, missing ones initialised",
             (compare(out["w1"], w1) or compare(out["d"], init_ref("d", 3, [7], F64)))
             if rc == 0 else "exit %d: %s" % (rc, err))


def error_cases():
    x = rand([2, 3], F32)
    src = program({"x": x, "y": x}, "%r = add(%x, %y)", ["r"])
    S.expect_error("missing input names it", src, 1, "'%y'", inputs={"x": x})
    S.expect_error("no --inputs at all", src, 1, "'%x'")
    S.expect_error("input dtype mismatch names file and tensor", src, 1, "'y'",
                   inputs={"x": x, "y": x.double()})
    S.expect_error("input shape mismatch names file and tensor", src, 1, "'x'",
                   inputs={"x": rand([3, 2], F32), "y": x})
    src_p = program({}, "%r = neg(%w)", ["r"], params={"w": x})
    S.expect_error("param dtype mismatch", src_p, 1, "'w'", params={"w": x.to(BF16)})
    S.expect_error("param shape mismatch", src_p, 1, "'w'", params={"w": rand([6], F32)})
    # a tensor that matches no name is an error naming it and the names
    # read; --allow-extra ignores it; names of returned values are names of
    # the graph (--out files chain into --params and --inputs)
    S.expect_error("extra param names it", src_p, 1, "'model.w'",
                   params={"model.w": x})
    S.expect_error("extra param lists the expected names", src_p, 1, "reads 'w'",
                   params={"model.w": x})
    S.expect_error("extra input names it", src, 1, "'z'", inputs={"x": x, "y": x, "z": x})
    rc, out, err, _ = S.run(src_p, params={"model.w": x, "w": x, "r": x},
                            args=("--allow-extra",))
    S.report("--allow-extra ignores extra tensors",
             compare(out["r"], -x) if rc == 0 else "exit %d: %s" % (rc, err))
    rc, out, err, _ = S.run(src_p, params={"w": x, "r": x})
    S.report("a returned value's name in --params is no error",
             None if rc == 0 and not err else "exit %d: %s" % (rc, err))
    src_2 = program({}, "%r = add(%w, %v)", ["r"], params={"w": x, "v": x})
    rc, out, err, _ = S.run(src_2, params={"w": x})
    S.report("a param --params lacks: a warning names it",
             None if rc == 0 and "warning" in err and "'v'" in err and "'w'" not in err
             else "exit %d: %r" % (rc, err))
    rc, out, err, _ = S.run(src_2, params={"w": x, "v": x})
    S.report("no warning when --params has every param",
             None if rc == 0 and not err else "exit %d: %r" % (rc, err))
    S.expect_error("malformed inputs file: exit 3", src, 3, "in", raw_inputs=b"\x10\0\0\0\0\0\0\0{not json}     ")
    S.expect_error("truncated inputs file: exit 3", src, 3, "",
                   raw_inputs=stio.dumps({"x": x, "y": x})[:-4])
    S.expect_error("missing --params file: exit 3", src_p, 3, "/nonexistent",
                   args=("--params", "/nonexistent/p.safetensors"))
    # nothing is written when the run fails
    out = S.path("never.safetensors")
    tab = rand([4, 2], F32)
    src_e = program({"i": torch.tensor([9]), "t": tab}, "%r = embedding(%i, %t)", ["r"])
    rc, _, err, _ = S.run(src_e, {"i": torch.tensor([9]), "t": tab}, args=("--no-out", "--out", out))
    S.report("no --out file after a run-time error",
             None if rc == 1 and not os.path.exists(out) else "exit %d, file %s" % (rc, os.path.exists(out)))
    rc, _, err, _ = S.run(src, {"x": x, "y": x}, args=("--no-out", "--out", "/nonexistent/dir/o.st"))
    S.report("unwritable --out: exit 3", None if rc == 3 else "exit %d: %s" % (rc, err))


def steps_cases():
    """--steps 3 gives what three --steps 1 runs chained through files give."""
    x, w, c = rand([4], F32), rand([4], F32), rand([4], F32)
    src = program({"x": x}, "add_(%x, %w)\nmul_(%w, 0.5)\nadd_(%c, 1.0)\n%r = mul(%x, %c)",
                  ["r"], params={"w": w}, consts={"c": c})
    rc, three, err, _ = S.run(src, {"x": x}, {"w": w, "c": c}, args=("--steps", "3"))
    cur_in, cur_p = {"x": x}, {"w": w, "c": c}
    for _ in range(3):
        rc1, o, err1, _ = S.run(src, cur_in, cur_p)
        if rc1 != 0:
            break
        cur_in, cur_p = {"x": o["x"]}, {"w": o["w"], "c": o["c"]}
    if rc or rc1:
        S.report("--steps 3 equals 3 chained runs", "exit %d/%d: %s%s" % (rc, rc1, err, err1))
        return
    why = None
    for n in ("r", "x", "w", "c"):
        why = why or (torch.equal(three[n], o[n]) is False and "%s differs" % n) or None
    S.report("--steps 3 equals 3 chained runs", why)
    # and equals PyTorch doing the same
    xr, wr, cr = x.clone(), w.clone(), c.clone()
    for _ in range(3):
        xr.add_(wr)
        wr.mul_(0.5)
        cr.add_(1.0)
    S.report("--steps 3 matches PyTorch", compare(three["r"], xr * cr) or compare(three["x"], xr))


def print_cases():
    x = torch.tensor([[1.5, -2.25], [0.0, 3.0]])
    src = program({"x": x}, "%y = mul(%x, 2.0)\n%n = sum(%x)\n%b = gt(%x, 0.0)", ["y", "n", "b"])
    rc, _, err, outtxt = S.run(src, {"x": x}, args=("--no-out",))
    ok = rc == 0 and "y: f32[2, 2]" in outtxt and "-4.5000" in outtxt and "n: f32[]" in outtxt \
        and "2.2500" in outtxt and "True" in outtxt and "False" in outtxt
    S.report("without --out: returned values printed", None if ok else "exit %d: %r %s" % (rc, outtxt, err))
    big = rand([40, 50], F32)
    src = program({"x": big}, "%y = neg(%x)", ["y"])
    rc, _, err, outtxt = S.run(src, {"x": big}, args=("--no-out",))
    ok = rc == 0 and "..." in outtxt and len(outtxt) < 2000
    S.report("big tensors printed summarised", None if ok else "exit %d, %d chars" % (rc, len(outtxt)))


roundtrip_cases()
init_cases()
error_cases()
steps_cases()
print_cases()
S.finish()
