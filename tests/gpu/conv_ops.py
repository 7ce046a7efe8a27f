#!/usr/bin/env python3
"""conv_ops.py - conv2d, the pools and batch_norm in generated CUDA code
against `sgc run` and PyTorch, forward and backward, f32 and bf16, through
cuDNN and through the direct kernels (SGRT_CUDNN_LIB=/nonexistent).

    conv_ops.py build DIR SGC     here: the programs, their inputs, `sgc run`'s
                                  --out and PyTorch's (f64 on the same
                                  rounded values) for every case
    conv_ops.py run DIR SGC NVCC FLAGS...
                                  on the GPU machine: sgc -O2 --main, nvcc,
                                  each driver run twice (cuDNN, then
                                  without), --out compared with both
                                  references, the --trace checked for
                                  which convolution ran

Each case is a small training graph: the op's operands are params (so the
input's gradient is derived too), `%loss = sum(mul(%o, %r))` with a random
%r, backward; the driver returns the loss, %o and grad.NAME of every
param (batch_norm's running statistics are inputs, updated in place in
training, and in --out).  Prints one line per check; exit 1 when any
failed.  tests/gpu/run_models.sh runs it (`conv` step).
"""
import concurrent.futures
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import stio  # noqa: E402

F64, F32, BF16 = torch.float64, torch.float32, torch.bfloat16
SG = {F32: "f32", BF16: "bf16"}


def pair(v):
    return "[%d, %d]" % tuple(v) if isinstance(v, tuple) else str(v)


def conv_case(name, sx, sw, bias, stride=1, padding=0, dilation=1, groups=1):
    attrs = "stride=%s, padding=%s, dilation=%s, groups=%d" % (
        pair(stride), pair(padding), pair(dilation), groups)
    params = {"x": sx, "w": sw}
    if bias:
        params["b"] = [sw[0]]
    body = "%%o = conv2d(%%x, %%w%s, %s)" % (", %b" if bias else "", attrs)
    ref = lambda P: F.conv2d(P["x"], P["w"], P.get("b"), stride, padding, dilation, groups)
    return dict(name=name, params=params, inputs={}, body=body, ref=ref, conv=True)


def pool_case(name, sx, body, ref):
    return dict(name=name, params={"x": sx}, inputs={}, body=body, ref=ref, conv=False)


def bn_case(name, sx, training):
    c = sx[1]
    body = "%%o = batch_norm(%%x, %%rm, %%rv, %%w, %%b, training=%s, momentum=0.1)" % (
        "true" if training else "false")

    def ref(P):
        rm, rv = P["rm"].clone(), P["rv"].clone()
        o = F.batch_norm(P["x"], rm, rv, P["w"], P["b"], training, 0.1)
        return o, ({"rm": rm, "rv": rv} if training else {})   # updated in training
    return dict(name=name, params={"x": sx, "w": [c], "b": [c]},
                inputs={"rm": [c], "rv": [c]}, body=body, ref=ref, conv=False)


CASES = [
    conv_case("conv2d_s2p1_bias", [2, 4, 9, 9], [6, 4, 3, 3], True, 2, 1),
    conv_case("conv2d_groups_dilation", [2, 4, 10, 10], [8, 2, 3, 3], False, 1, 2, 2, 2),
    conv_case("conv2d_1x1", [4, 8, 8, 8], [16, 8, 1, 1], True),
    conv_case("conv2d_depthwise", [2, 8, 8, 8], [8, 1, 3, 3], False, 1, 1, 1, 8),
    conv_case("conv2d_stem_7x7", [2, 3, 32, 32], [16, 3, 7, 7], False, 2, 3),
    conv_case("conv2d_rect", [2, 3, 9, 7], [5, 3, 3, 2], True, (2, 1), (1, 0)),
    pool_case("max_pool2d_k3s2p1", [2, 4, 9, 9],
              "%o = max_pool2d(%x, kernel_size=3, stride=2, padding=1)",
              lambda P: F.max_pool2d(P["x"], 3, 2, 1)),
    pool_case("avg_pool2d_k2", [2, 4, 8, 8], "%o = avg_pool2d(%x, kernel_size=2)",
              lambda P: F.avg_pool2d(P["x"], 2)),
    pool_case("avg_pool2d_k3s1p1", [2, 4, 7, 7],
              "%o = avg_pool2d(%x, kernel_size=3, stride=1, padding=1)",
              lambda P: F.avg_pool2d(P["x"], 3, 1, 1)),
    pool_case("adaptive_avg_pool2d_1", [2, 8, 5, 5], "%o = adaptive_avg_pool2d(%x, output_size=1)",
              lambda P: F.adaptive_avg_pool2d(P["x"], 1)),
    pool_case("adaptive_avg_pool2d_3x2", [2, 4, 7, 5],
              "%o = adaptive_avg_pool2d(%x, output_size=[3, 2])",
              lambda P: F.adaptive_avg_pool2d(P["x"], (3, 2))),
    bn_case("batch_norm_train", [4, 8, 6, 6], True),
    bn_case("batch_norm_eval", [4, 8, 6, 6], False),
]


def program(c, dt, tensors, out_shape):
    lines = ["graph g {"]
    for n, t in tensors.items():
        kind = "param" if n in c["params"] else "input"
        lines.append("  %s %%%s : %s%s" % (kind, n, SG[dt], list(t.shape)))
    lines.append("  input %%r : %s%s" % (SG[dt], list(out_shape)))
    lines += ["  " + c["body"], "  %p = mul(%o, %r)", "  %loss = sum(%p)", "  backward(%loss)",
              "  return %loss, %o", "}"]
    return "\n".join(lines) + "\n"


def reference(c, tensors, r):
    """PyTorch in f64 on the rounded values: the loss, o, the gradients,
    the updated running stats; each in the case's dtype."""
    P = {n: t.double().requires_grad_(n in c["params"]) for n, t in tensors.items()}
    res = c["ref"](P)
    o, extra = (res if isinstance(res, tuple) else (res, {}))
    loss = (o * r.double()).sum()
    loss.backward()
    dt = r.dtype
    out = {"loss": loss.detach().to(dt), "o": o.detach().to(dt)}
    for n in c["params"]:
        out["grad." + n] = P[n].grad.to(dt)
    for n, t in extra.items():
        out[n] = t.detach().to(dt)
    return out


def build(d, sgc):
    gen = torch.Generator().manual_seed(11)
    names = []
    for c in CASES:
        for dt in (F32, BF16):
            name = "%s_%s" % (c["name"], SG[dt])
            cd = os.path.join(d, "cases", name)
            os.makedirs(cd, exist_ok=True)
            tensors = {}
            for n, s in list(c["params"].items()) + list(c["inputs"].items()):
                lo, hi = (0.5, 2.0) if n == "rv" else (-1.0, 1.0)
                tensors[n] = (torch.rand(s, generator=gen, dtype=F64) * (hi - lo) + lo).to(dt)
            with torch.no_grad():
                res = c["ref"]({n: t.double() for n, t in tensors.items()})
            o = res[0] if isinstance(res, tuple) else res
            r = torch.rand(o.shape, generator=gen, dtype=F64).mul(2).sub(1).to(dt)
            with open(os.path.join(cd, "prog.sg"), "w") as f:
                f.write(program(c, dt, tensors, o.shape))
            stio.save(os.path.join(cd, "par.safetensors"),
                      {n: t for n, t in tensors.items() if n in c["params"]})
            ins = {n: t for n, t in tensors.items() if n not in c["params"]}
            ins["r"] = r
            stio.save(os.path.join(cd, "in.safetensors"), ins)
            stio.save(os.path.join(cd, "torch.safetensors"), reference(c, tensors, r))
            pr = subprocess.run([sgc, "run", os.path.join(cd, "prog.sg"), "--params",
                                 os.path.join(cd, "par.safetensors"), "--inputs",
                                 os.path.join(cd, "in.safetensors"), "--out",
                                 os.path.join(cd, "interp.safetensors")],
                                capture_output=True, text=True)
            if pr.returncode != 0:
                sys.exit("sgc run %s failed: %s" % (name, pr.stderr))
            names.append((name, c["conv"]))
    with open(os.path.join(d, "cases.json"), "w") as f:
        json.dump(names, f)
    print("built %d cases in %s" % (len(names), d))


def close(got, exp, dt):
    """None when got is within the dtype's tolerance of exp, else why."""
    if got.shape != exp.shape or got.dtype != exp.dtype:
        return "%s%s, expected %s%s" % (got.dtype, list(got.shape), exp.dtype, list(exp.shape))
    g, e = got.double(), exp.double()
    scale = float(e.abs().max()) if e.numel() else 0.0
    rtol = 3e-2 if dt == "bf16" else 1e-4
    err = (g - e).abs()
    tol = rtol * scale + rtol * e.abs() + 1e-6
    if bool((err <= tol).all()):
        return None
    k = int(torch.argmax(err - tol))
    return "max error %.3g at %d (%.6g vs %.6g)" % (float(err.reshape(-1)[k]), k,
                                                    float(g.reshape(-1)[k]), float(e.reshape(-1)[k]))


def run(d, sgc, nvcc, flags):
    with open(os.path.join(d, "cases.json")) as f:
        names = json.load(f)

    def compile_one(name):
        cd = os.path.join(d, "cases", name)
        cu, exe = os.path.join(cd, "prog.cu"), os.path.join(cd, "prog")
        pr = subprocess.run([sgc, os.path.join(cd, "prog.sg"), "-O2", "--main", "-o", cu],
                            capture_output=True, text=True)
        if pr.returncode == 0:
            pr = subprocess.run([nvcc, "-arch=sm_90", "-std=c++17", "-O2", cu, "-o", exe] + flags,
                                capture_output=True, text=True)
        return name, pr.returncode, pr.stderr
    fails = 0
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 4) as ex:
        built = {n: (rc, err) for n, rc, err in ex.map(compile_one, [n for n, _ in names])}
    for name, is_conv in names:
        cd = os.path.join(d, "cases", name)
        rc, err = built[name]
        if rc != 0:
            print("FAIL %s: build: %s" % (name, err[-1500:]))
            fails += 1
            continue
        exp = {"interp": stio.load(os.path.join(cd, "interp.safetensors")),
               "torch": stio.load(os.path.join(cd, "torch.safetensors"))}
        dt = name.rsplit("_", 1)[1]
        for mode, env in (("cudnn", {}), ("direct", {"SGRT_CUDNN_LIB": "/nonexistent"})):
            out, trace = os.path.join(cd, "out_%s.safetensors" % mode), os.path.join(
                cd, "trace_%s.json" % mode)
            e = dict(os.environ)
            e.update(env)
            pr = subprocess.run([os.path.join(cd, "prog"), "--params",
                                 os.path.join(cd, "par.safetensors"), "--inputs",
                                 os.path.join(cd, "in.safetensors"), "--out", out, "--trace",
                                 trace], capture_output=True, text=True, env=e, timeout=120)
            label = "%s [%s]" % (name, mode)
            if pr.returncode != 0:
                print("FAIL %s: driver exited %d: %s" % (label, pr.returncode, pr.stderr[-1500:]))
                fails += 1
                continue
            got = stio.load(out)
            why = []
            for ref_name, ref in exp.items():
                for t, e_t in ref.items():
                    if t not in got:
                        why.append("%s missing" % t)
                        continue
                    w = close(got[t], e_t, dt)
                    if w:
                        why.append("%s vs %s: %s" % (t, ref_name, w))
            ran = ""
            if is_conv:
                text = open(trace).read()
                ran = " ran: %s" % ", ".join(k for k in ("[cudnn]", "[direct]") if k in text)
                if mode == "direct" and "[cudnn]" in text:
                    why.append("cuDNN ran with SGRT_CUDNN_LIB=/nonexistent")
                if "[direct]" not in text and "[cudnn]" not in text:
                    why.append("the trace names neither [cudnn] nor [direct]")
            print("%s %s%s%s" % ("FAIL" if why else "ok", label, ran,
                                 (": " + "; ".join(why)) if why else ""))
            fails += bool(why)
    print("conv_ops: %d failed" % fails)
    return 1 if fails else 0


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) >= 5 and sys.argv[1] == "run":
        return run(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
