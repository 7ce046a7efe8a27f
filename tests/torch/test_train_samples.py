"""test_train_samples.py - multi-step training of the samples
(samples/train_*.sg) with `sgc run`, compared with PyTorch step for step.

For each sample (MLP on two streams, layer-norm classifier, causal
attention block, embedding language model), small dims are set with -D and
the `optimizer` line is replaced by each of:

  SGD plain, SGD with momentum, SGD with momentum and weight decay,
  AdamW with defaults, AdamW with every setting changed

each fused (the default) and with fused=false.  `sgc run --steps 3` on one
batch must give the loss of the third call, every param and the optimizer
state (under PyTorch's state names, opt.NAME.momentum_buffer, exp_avg,
exp_avg_sq, step) of torch.optim.SGD/AdamW after three steps; fused and
unfused must agree bit for bit.  Also checked: `--steps 3` equals three
chained `--steps 1` runs; state given in --params (PyTorch's, after one
step) is taken up; the fused update lowers the planned peak memory
(`sgc check --memory`) on a parameter-heavy MLP; and --interleave gives
the sequential result for the two-stream sample.

Usage: test_train_samples.py PATH/TO/sgc
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
import stio  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

S = C.Suite("train samples")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
GEN = torch.Generator().manual_seed(11)
STEPS = 3


def rn(*shape, scale=1.0):
    return torch.randn(shape, generator=GEN) * scale


def rmsnorm(x, w, eps=1e-6):
    return x * torch.rsqrt(torch.mean(x * x, -1, keepdim=True) + eps) * w


def attention(q, k, v):
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    L = q.shape[-2]
    s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


# name -> (dims, params, inputs, forward(P, I) -> loss)
def mlp_sample():
    B, D, H = 4, 6, 10
    params = {"w1": rn(D, H, scale=0.4), "b1": rn(H, scale=0.1),
              "w2": rn(H, H, scale=0.3), "b2": rn(H, scale=0.1),
              "w3": rn(H, D, scale=0.3)}
    inputs = {"x": rn(B, D), "y": rn(B, D)}

    def fwd(P, I):
        a1 = F.gelu(I["x"] @ P["w1"] + P["b1"])
        a2 = torch.tanh(a1 @ P["w2"] + P["b2"])
        return F.mse_loss(a2 @ P["w3"], I["y"])
    return dict(D=["B=%d" % B, "D=%d" % D, "H=%d" % H]), params, inputs, fwd


def layernorm_sample():
    B, D, H, Cn = 6, 5, 8, 3
    params = {"w1": rn(H, D, scale=0.5), "b1": rn(H, scale=0.1),
              "g": 1 + rn(H, scale=0.1), "be": rn(H, scale=0.1),
              "w2": rn(Cn, H, scale=0.4), "b2": rn(Cn, scale=0.1)}
    inputs = {"x": rn(B, D), "y": torch.randint(0, Cn, (B,), generator=GEN)}

    def fwd(P, I):
        h = F.linear(I["x"], P["w1"], P["b1"])
        a = F.relu(F.layer_norm(h, (H,), P["g"], P["be"]))
        return F.cross_entropy(F.linear(a, P["w2"], P["b2"]), I["y"])
    return dict(D=["B=%d" % B, "D=%d" % D, "H=%d" % H, "C=%d" % Cn]), params, inputs, fwd


def attention_sample():
    B, T, D, NH, HD, O = 2, 5, 8, 2, 4, 3
    params = {n: rn(D, D, scale=0.35) for n in ("wq", "wk", "wv", "wo")}
    params.update({"gn": 1 + rn(D, scale=0.1), "wh": rn(O, D, scale=0.4),
                   "bh": rn(O, scale=0.1)})
    inputs = {"x": rn(B, T, D), "y": rn(B, O)}

    def fwd(P, I):
        x = I["x"]

        def heads(w):
            return F.linear(x, w).reshape(B, T, NH, HD).transpose(1, 2)
        att = attention(heads(P["wq"]), heads(P["wk"]), heads(P["wv"]))
        att = att.transpose(1, 2).reshape(B, T, D)
        n = rmsnorm(x + F.linear(att, P["wo"]), P["gn"])
        return F.mse_loss(F.linear(n.mean(1), P["wh"], P["bh"]), I["y"])
    dims = ["B=%d" % B, "T=%d" % T, "D=%d" % D, "NH=%d" % NH, "HD=%d" % HD, "O=%d" % O]
    return dict(D=dims), params, inputs, fwd


def embedding_sample():
    B, T, V, E = 3, 4, 7, 5
    params = {"emb": rn(V, E, scale=0.5), "w": rn(E, E, scale=0.4),
              "out": rn(V, E, scale=0.4)}
    tok = torch.randint(0, V, (B, T), generator=GEN)
    tok[0, :2] = 3  # repeated tokens: the scatter-add must sum them
    inputs = {"tok": tok, "next": torch.randint(0, V, (B, T), generator=GEN)}

    def fwd(P, I):
        a = F.silu(F.embedding(I["tok"], P["emb"]) @ P["w"])
        return F.cross_entropy(F.linear(a, P["out"]).permute(0, 2, 1), I["next"])
    return dict(D=["B=%d" % B, "T=%d" % T, "V=%d" % V, "E=%d" % E]), params, inputs, fwd


SAMPLES = {"train_mlp": mlp_sample, "train_layernorm": layernorm_sample,
           "train_attention": attention_sample, "train_embedding": embedding_sample}

# .sg optimizer text, torch optimizer factory
OPTIMIZERS = [
    ("sgd(lr=0.05)", lambda p: torch.optim.SGD(p, lr=0.05)),
    ("sgd(lr=0.05, momentum=0.9)", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    ("sgd(lr=0.05, momentum=0.8, weight_decay=0.01)",
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, weight_decay=0.01)),
    ("adamw(lr=0.01)", lambda p: torch.optim.AdamW(p, lr=0.01)),
    ("adamw(lr=0.02, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1)",
     lambda p: torch.optim.AdamW(p, lr=0.02, betas=(0.8, 0.95), eps=1e-6,
                                 weight_decay=0.1)),
]


def source(name, opt, fused):
    with open(os.path.join(ROOT, "samples", name + ".sg")) as f:
        src = f.read()
    if not fused:
        opt = opt[:-1] + ", fused=false)"
    src, n = re.subn(r"(?m)^(\s*)optimizer .*$", r"\1optimizer " + opt, src)
    assert n == 1
    return src


def torch_train(params, inputs, fwd, make_opt, steps, state_after=None):
    """Params and optimizer state (PyTorch's names) after `steps` steps, the
    last loss, and optionally the state_dict after step state_after."""
    P = {n: t.clone().requires_grad_() for n, t in params.items()}
    opt = make_opt(list(P.values()))
    early = None
    for s in range(steps):
        opt.zero_grad()
        loss = fwd(P, inputs)
        loss.backward()
        opt.step()
        if state_after == s + 1:
            early = state_of(P, opt)
    return {n: t.detach() for n, t in P.items()}, state_of(P, opt), loss.detach(), early


def state_of(P, opt):
    out = {}
    for n, t in P.items():
        for k, v in opt.state.get(t, {}).items():
            if torch.is_tensor(v) and k in ("momentum_buffer", "exp_avg", "exp_avg_sq", "step"):
                out["opt.%s.%s" % (n, k)] = v.detach().clone().reshape(v.shape).float() \
                    if k == "step" else v.detach().clone()
    return out


def run_sgc(src, dims, params, inputs, steps, extra=()):
    args = ["--steps", str(steps)] + [a for d in dims for a in ("-D", d)] + list(extra)
    rc, out, err, _ = S.run(src, inputs, params, args)
    return rc, out, err


def check_out(label, out, want_params, want_state, want_loss):
    for n, t in want_params.items():
        why = C.compare(out[n], t, rtol=1e-4, atol=1e-5)
        if why:
            return "param %s: %s" % (n, why)
    names = sorted(k for k in out if k.startswith("opt."))
    if names != sorted(want_state):
        return "optimizer state names %s, expected %s" % (names, sorted(want_state))
    for n, t in want_state.items():
        why = C.compare(out[n], t, rtol=1e-4, atol=1e-5)
        if why:
            return "state %s: %s" % (n, why)
    return C.compare(out["loss"], want_loss, rtol=1e-4, atol=1e-5) and "loss: " + \
        C.compare(out["loss"], want_loss, rtol=1e-4, atol=1e-5)


def train_cases():
    for name, make in SAMPLES.items():
        spec, params, inputs, fwd = make()
        for opt, make_opt in OPTIMIZERS:
            want_p, want_s, want_loss, _ = torch_train(params, inputs, fwd, make_opt, STEPS)
            outs = []
            for fused in (True, False):
                label = "%s %s%s" % (name, opt, "" if fused else " unfused")
                rc, out, err = run_sgc(source(name, opt, fused), spec["D"], params,
                                       inputs, STEPS)
                if rc != 0:
                    S.report(label, "sgc run exited %d: %s" % (rc, err.strip()[:1500]))
                    continue
                S.report(label, check_out(label, out, want_p, want_s, want_loss))
                outs.append(out)
            if len(outs) == 2:
                diff = [n for n in outs[0] if not torch.equal(outs[0][n], outs[1][n])]
                S.report("%s %s: fused == unfused bit for bit" % (name, opt),
                         diff and "differ in %s" % diff or None)


def chain_cases():
    for name, opt in (("train_mlp", OPTIMIZERS[2][0]), ("train_attention", OPTIMIZERS[4][0]),
                      ("train_embedding", OPTIMIZERS[1][0])):
        spec, params, inputs, fwd = SAMPLES[name]()
        src = source(name, opt, True)
        rc, whole, err = run_sgc(src, spec["D"], params, inputs, 3)
        cur = dict(params)
        ok = rc == 0
        for _ in range(3):
            if not ok:
                break
            rc, out, err = run_sgc(src, spec["D"], cur, inputs, 1)
            ok = rc == 0
            cur = {k: v for k, v in (out or {}).items() if k != "loss"}
        why = None if ok else "sgc run failed: %s" % err.strip()[:800]
        if ok:
            diff = [k for k in whole if k not in out or not torch.equal(whole[k], out[k])]
            why = diff and "differ in %s" % diff or None
        S.report("%s: --steps 3 == 3 x --steps 1 chained" % name, why)


def resume_cases():
    """PyTorch's state after one step, given in --params, then two steps."""
    for name, (opt, make_opt) in (("train_layernorm", OPTIMIZERS[3]),
                                  ("train_mlp", OPTIMIZERS[1])):
        spec, params, inputs, fwd = SAMPLES[name]()
        p1, s1, _, _ = torch_train(params, inputs, fwd, make_opt, 1)
        want_p, want_s, want_loss, _ = torch_train(params, inputs, fwd, make_opt, 3)
        start = dict(p1)
        start.update(s1)
        rc, out, err = run_sgc(source(name, opt, True), spec["D"], start, inputs, 2)
        label = "%s %s: resumes from PyTorch's state" % (name, opt)
        if rc != 0:
            S.report(label, "sgc run exited %d: %s" % (rc, err.strip()[:800]))
            continue
        S.report(label, check_out(label, out, want_p, want_s, want_loss))


def peak(src, dims):
    path = S.path("mem.sg")
    with open(path, "w") as f:
        f.write(src)
    cmd = [S.sgc, "check", "--memory", path] + [a for d in dims for a in ("-D", d)]
    pr = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    m = re.search(r"device arena peak: (\d+) bytes", pr.stdout)
    return int(m.group(1)) if pr.returncode == 0 and m else None


def memory_cases():
    """The seed "Compiling updates": on a parameter-heavy MLP (big weights,
    a small batch) the fused update frees each gradient as soon as it is
    used, so the planned peak is lower; how much is printed."""
    dims = ["B=4", "D=256", "H=1024"]
    for opt in (OPTIMIZERS[1][0], OPTIMIZERS[3][0]):
        fused = peak(source("train_mlp", opt, True), dims)
        unfused = peak(source("train_mlp", opt, False), dims)
        label = "train_mlp %s: fused update lowers planned peak memory" % opt
        if fused is None or unfused is None:
            S.report(label, "sgc check --memory failed")
            continue
        print("  %s: peak %d bytes fused, %d unfused (%.1f%% less)" %
              (opt, fused, unfused, 100.0 * (unfused - fused) / unfused))
        S.report(label, None if fused < unfused else "fused %d >= unfused %d" % (fused, unfused))


def interleave_cases():
    spec, params, inputs, fwd = SAMPLES["train_mlp"]()
    src = source("train_mlp", OPTIMIZERS[2][0], True)
    rc, base, err = run_sgc(src, spec["D"], params, inputs, 2)
    for seed in (1, 2, 3):
        rc2, out, err2 = run_sgc(src, spec["D"], params, inputs, 2,
                                 ["--interleave=%d" % seed])
        why = None
        if rc != 0 or rc2 != 0:
            why = "sgc run failed: %s %s" % (err.strip()[:400], err2.strip()[:400])
        else:
            diff = [k for k in base if not torch.equal(base[k], out[k])]
            why = diff and "differ in %s" % diff or None
        S.report("train_mlp --interleave=%d gives the sequential result" % seed, why)


def half_adamw_cases():
    """AdamW on bf16 and f16 params, bit for bit against PyTorch's update as
    its CUDA kernels compute it (the foreach ops, each rounded once to the
    param's dtype from float: addcmul_ and addcdiv_ are one op each; scalars
    stay float).  A loss linear in w, so that the gradient is exact."""
    import math
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-8, 0.1
    f = lambda x: torch.tensor(x, dtype=torch.float32)
    for dt in (torch.bfloat16, torch.float16):
        name = "bf16" if dt == torch.bfloat16 else "f16"
        src = """graph g {
  input %%c : %s[64]
  param %%w : %s[64]
  %%m = mul(%%w, %%c)
  %%loss = sum(%%m)
  backward(%%loss)
  optimizer adamw(lr=%r, weight_decay=%r)
  return %%loss
}
""" % (name, name, lr, wd)
        c = rn(64).to(dt)
        w0 = rn(64).to(dt)
        rc, out, err = run_sgc(src, [], {"w": w0}, {"c": c}, STEPS)
        r = lambda t: t.to(dt).float()
        w, m, v, g = w0.float(), torch.zeros(64), torch.zeros(64), c.float()
        for step in range(1, STEPS + 1):
            w = r(w * f(1 - lr * wd))
            m = r(m + f(1 - b1) * (g - m))
            v = r(r(v * f(b2)) + f(1 - b2) * (g * g))
            den = r(r(r(v.sqrt()) / f(math.sqrt(1 - b2 ** step))) + f(eps))
            w = r(w + f(-(lr / (1 - b1 ** step))) * (m / den))
        why = "sgc run failed: " + err.strip()[:400] if rc else None
        for k, want in (("w", w), ("opt.w.exp_avg", m), ("opt.w.exp_avg_sq", v)):
            if not why and not torch.equal(out[k].float(), want):
                n = int((out[k].float() != want).sum())
                why = "%s: %d of 64 elements differ from PyTorch's update" % (k, n)
        S.report("adamw on %s params: %d steps bit for bit" % (name, STEPS), why)


train_cases()
half_adamw_cases()
chain_cases()
resume_cases()
memory_cases()
interleave_cases()
S.finish()
