"""torch_check.py - the kernel library against PyTorch on the GPU machine.

    python3 torch_check.py DUMPDIR     compare the cases the harnesses dumped
                                       (test_* --dump DUMPDIR) with PyTorch
    python3 torch_check.py --bench     time PyTorch on the harnesses' shapes

Each dumped case is a folder with meta.txt ("kind K", "dtype D", "tensor
NAME d0 d1 ...", "itensor NAME ...", other "key value" lines) and raw
little-endian NAME.f32 / NAME.i64 files.  The inputs were drawn in the
case's dtype, so converting them back is exact; PyTorch then recomputes
the outputs (in float64 where PyTorch's own low-precision result would
just add its rounding, else in the dtype) and the kernels' outputs must
match within the harness's tolerances.  Prints "N passed, M failed".
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
# Relative L2 tolerances (forward, backward), as the harnesses use.
TOL = {"f32": (1e-5, 2e-5), "f64": (1e-12, 1e-12), "f16": (3e-3, 6e-3), "bf16": (1.5e-2, 3e-2)}
npass = nfail = 0


def check(ok, msg):
    global npass, nfail
    if ok:
        npass += 1
    else:
        nfail += 1
    print(("ok   " if ok else "FAIL ") + msg)


def rel(out, ref):
    out, ref = out.double().flatten(), ref.double().flatten()
    if torch.isnan(out).any() and not torch.isnan(ref).any():
        return math.inf
    return ((out - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def load(path):
    meta, tens = {}, {}
    for line in open(os.path.join(path, "meta.txt")):
        w = line.split()
        if not w:
            continue
        if w[0] in ("tensor", "itensor"):
            shape = [int(x) for x in w[2:]]
            ext, dt = (".f32", np.float32) if w[0] == "tensor" else (".i64", np.int64)
            a = np.fromfile(os.path.join(path, w[1] + ext), dtype=dt).reshape(shape)
            tens[w[1]] = torch.from_numpy(a).to(DEV)
        else:
            meta[w[0]] = w[1]
    return meta, tens


def attention(name, m, t):
    dt = m["dtype"]
    causal, scale = float(m["causal"]) != 0, float(m["scale"])
    scale = scale if scale > 0 else None
    q, k, v, do = (t[x].double().requires_grad_(x != "dout") for x in ("q", "k", "v", "dout"))
    s = (q @ k.transpose(-1, -2)) * (scale or 1 / math.sqrt(q.shape[-1]))
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    lse = torch.logsumexp(s, -1).detach()
    if hasattr(F, "scaled_dot_product_attention"):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    else:  # an old PyTorch: the same in plain operations
        o = torch.softmax(s, -1) @ v
    o.backward(do)
    tf, tb = TOL[dt]
    # PyTorch's own flash kernel in the dtype, for scale.
    extra = ""
    if dt in ("bf16", "f16") and DEV == "cuda":
        qq, kk, vv = (t[x].to(DT[dt]).requires_grad_() for x in ("q", "k", "v"))
        oo = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, scale=scale)
        oo.backward(t["dout"].to(DT[dt]))
        extra = " (PyTorch %s: o %.1e dq %.1e dk %.1e dv %.1e)" % (
            dt, rel(oo, o), rel(qq.grad, q.grad), rel(kk.grad, k.grad), rel(vv.grad, v.grad))
    r = [rel(t["o"], o), rel(t["dq"], q.grad), rel(t["dk"], k.grad), rel(t["dv"], v.grad)]
    el = (t["lse"].double() - lse).abs().max().item()
    check(r[0] <= tf and max(r[1:]) <= tb and el <= 1e-3 * max(1, lse.abs().max().item()),
          "%s: o %.1e dq %.1e dk %.1e dv %.1e lse %.1e%s" % (name, *r, el, extra))


def rownorm(name, m, t):
    dt, kind = DT[m["dtype"]], m["kind"]
    tf, tb = TOL[m["dtype"]]
    x = t["x"].to(dt).requires_grad_()
    if kind in ("softmax", "log_softmax"):
        y = (F.softmax if kind == "softmax" else F.log_softmax)(x, -1)
        y.backward(t["dy"].to(dt))
        r = [rel(t["y"], y), rel(t["dx"], x.grad)]
    elif kind == "cross_entropy":
        y = F.cross_entropy(x, t["target"])
        y.backward(t["dloss"].to(dt))
        r = [rel(t["loss"], y), rel(t["dx"], x.grad)]
    else:
        w = t["w"].to(dt).requires_grad_()
        eps = float(m["eps"])
        if kind == "rms_norm":
            y = F.rms_norm(x, (x.shape[-1],), w, eps)
            y.backward(t["dy"].to(dt))
            r = [rel(t["y"], y), rel(t["dx"], x.grad), rel(t["dw"], w.grad)]
        else:
            b = t["b"].to(dt).requires_grad_()
            y = F.layer_norm(x, (x.shape[-1],), w, b, eps)
            y.backward(t["dy"].to(dt))
            r = [rel(t["y"], y), rel(t["dx"], x.grad), rel(t["dw"], w.grad), rel(t["db"], b.grad)]
    # Both sides round to the dtype: allow twice the harness's tolerance.
    check(r[0] <= 2 * tf and max(r[1:]) <= 2 * tb,
          "%s: %s" % (name, " ".join("%.1e" % x for x in r)))


def adamw(name, m, t):
    dt = DT[m["dtype"]]
    n, steps = int(float(m["ntensors"])), int(float(m["steps"]))
    ps = [t["p%d" % i].to(dt).clone().requires_grad_() for i in range(n)]
    opt = torch.optim.AdamW(ps, lr=float(m["lr"]), betas=(float(m["beta1"]), float(m["beta2"])),
                            eps=float(m["eps"]), weight_decay=float(m["weight_decay"]))
    for s in range(steps):
        for i, p in enumerate(ps):
            p.grad = t["g%d_%d" % (s, i)].to(dt)
        opt.step()
    tol = 1e-6 if dt == torch.float32 else 1e-2
    worst = 0.0
    for i, p in enumerate(ps):
        st = opt.state[p]
        worst = max(worst, rel(t["out_p%d" % i], p.detach()), rel(t["out_m%d" % i], st["exp_avg"]),
                    rel(t["out_v%d" % i], st["exp_avg_sq"]))
    check(worst <= tol, "%s: worst rel %.2e against torch.optim.AdamW" % (name, worst))


def compare(d):
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if not os.path.isfile(os.path.join(path, "meta.txt")):
            continue
        m, t = load(path)
        k = m["kind"]
        if k == "attention":
            attention(name, m, t)
        elif k == "adamw":
            adamw(name, m, t)
        else:
            rownorm(name, m, t)


def timed(fn, warm=3, reps=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def bench():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    print("torch", torch.__version__, torch.cuda.get_device_name())
    for B, H, T, D, causal, dt in ((8, 16, 2048, 128, True, torch.bfloat16),
                                   (8, 16, 2048, 128, False, torch.bfloat16),
                                   (8, 16, 2048, 128, True, torch.float16),
                                   (8, 32, 2048, 64, True, torch.bfloat16)):
        q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=dt) for _ in range(4))
        pairs = T * (T + 1) / 2 if causal else T * T
        flop = 4 * B * H * pairs * D
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            try:
                with sdpa_kernel(backend):
                    fw = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                    qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))

                    def fb():
                        o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                        o.backward(do)
                    tot = timed(fb, 2, 10)
                bw = tot - fw
                print("PERF torch attention %s %s B=%d H=%d T=%d D=%d causal=%d: fwd %.3f ms %.1f "
                      "TFLOP/s | bwd %.3f ms %.1f TFLOP/s" % (
                          backend.name, str(dt).split(".")[-1], B, H, T, D, causal, fw,
                          flop / fw / 1e9, bw, 2.5 * flop / bw / 1e9))
            except RuntimeError as e:
                print("torch attention %s: not available (%s)" % (backend.name, str(e)[:80]))
        del q, k, v, do
    # Row ops at the harness's sizes.
    for R, C, dt in ((16384, 4096, torch.bfloat16), (16384, 4096, torch.float32),
                     (8192, 50257, torch.bfloat16)):
        x = torch.randn(R, C, device="cuda", dtype=dt)
        w = torch.randn(C, device="cuda", dtype=dt)
        b = torch.randn(C, device="cuda", dtype=dt)
        gb = x.numel() * x.element_size() / 1e9
        print("PERF torch softmax fwd %s [%d, %d]: %.4f ms" % (
            str(dt).split(".")[-1], R, C, timed(lambda: torch.softmax(x, -1))))
        print("PERF torch layer_norm fwd %s [%d, %d]: %.4f ms" % (
            str(dt).split(".")[-1], R, C, timed(lambda: F.layer_norm(x, (C,), w, b))))
        xg, wg, bg = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()
        y = F.layer_norm(xg, (C,), wg, bg)
        dy = torch.randn_like(y)
        print("PERF torch layer_norm bwd %s [%d, %d]: %.4f ms" % (
            str(dt).split(".")[-1], R, C, timed(lambda: torch.autograd.grad(y, (xg, wg, bg), dy,
                                                                            retain_graph=True))))
        if C == 50257:
            tg = torch.randint(0, C, (R,), device="cuda")
            print("PERF torch cross_entropy fwd %s [%d, %d]: %.4f ms" % (
                str(dt).split(".")[-1], R, C, timed(lambda: F.cross_entropy(x, tg))))
            l = F.cross_entropy(xg, tg)
            print("PERF torch cross_entropy bwd %s [%d, %d]: %.4f ms" % (
                str(dt).split(".")[-1], R, C,
                timed(lambda: torch.autograd.grad(l, xg, retain_graph=True))))
        del x, xg, y, dy
    # AdamW over 8 x 8192 x 8192 bf16.
    ps = [torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
          for _ in range(8)]
    for p in ps:
        p.grad = torch.randn_like(p)
    for fused in (False, True):
        opt = torch.optim.AdamW(ps, lr=1e-3, fused=fused)
        print("PERF torch adamw %s bf16 8 x 8192^2: %.3f ms" % (
            "fused" if fused else "foreach", timed(opt.step, 2, 10)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--bench":
        bench()
    elif len(sys.argv) > 1:
        compare(sys.argv[1])
        print("%d passed, %d failed" % (npass, nfail))
        sys.exit(1 if nfail else 0)
    else:
        print(__doc__)
        sys.exit(2)
