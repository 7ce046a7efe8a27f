"""attention_rewrite.py - pass `attention` (-O2) against the ops it
replaces: each graph of tests/golden/ok_attn_unfused.sg (attention written
out by hand: matmul, scale, mask, softmax, matmul) runs under `sgc run -O0`
(the ops as written) and `sgc run` (-O2: one scaled_dot_product_attention,
its backward the attention's own); outputs and gradients must agree, and
--dump-after=attention must show the rewrite (or, for the graph whose
scores are also returned, its absence).  The outputs are also checked
against PyTorch's math, so both runs being wrong the same way fails.  A
causal mask built from aranges must become causal=true, and key/value
heads repeated as Hugging Face's repeat_kv does, enable_gqa=true."""
import math
import os
import re
import subprocess

import torch

from _common import F64, Suite, compare, rand

S = Suite("attention rewrite")
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "golden", "ok_attn_unfused.sg")
B, H, T, SL, E = 2, 4, 6, 5, 8


def reference(g, x):
    q, k, v = x["q"], x["k"], x["v"]
    if g == "repeat_kv":
        k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    s = q @ k.transpose(-2, -1)
    if g == "plain":
        s = s * 0.35355339
    elif g == "float_mask":
        s = x["bias"] + s / 2.8284271
    elif g == "bool_mask":
        s = s.masked_fill(~x["keep"], -math.inf)
    elif g == "repeat_kv":
        s = s * 0.35355339
    elif g == "arange_causal":
        s = s / math.sqrt(E)
        tril = torch.ones(T, T, dtype=torch.bool).tril()
        a = torch.softmax(s.masked_fill(~tril, -math.inf), -1) @ v
        s = (a @ k.transpose(-2, -1) / math.sqrt(E)).masked_fill(~tril.T, -math.inf)
    return torch.softmax(s, -1) @ v


def main():
    text = open(SRC).read()
    keep = torch.rand(T, SL, dtype=F64) < 0.7
    keep[:, 0] = True
    for g in ("plain", "float_mask", "bool_mask", "scores_returned", "arange_causal",
              "repeat_kv"):
        sl = T if g in ("arange_causal", "repeat_kv") else SL
        hk = 2 if g == "repeat_kv" else H
        x = {"q": rand([B, H, T, E], F64, -1, 1)}
        p = {"k": rand([B, hk, sl, E], F64, -1, 1), "v": rand([B, hk, sl, E], F64, -1, 1)}
        if g == "float_mask":
            x["bias"] = rand([B, 1, T, SL], F64, -1, 1)
        if g == "bool_mask":
            x["keep"] = keep
        if g == "scores_returned":
            x.update(p)
            p = None
        # f64 versions of the graph: every f32 type becomes f64.
        src = re.sub(r"\bf32\[", "f64[", text)
        outs = {}
        for opt in ("-O0", "-O2"):
            rc, res, err, _ = S.run(src, x, p, ("--graph", g, opt))
            if rc != 0 or res is None:
                S.report("%s %s" % (g, opt), "sgc run exited %d: %s" % (rc, err[:800]))
                break
            outs[opt] = res
        if len(outs) < 2:
            continue
        why = None
        for name, t in outs["-O0"].items():
            why = why or compare(outs["-O2"].get(name), t, atol=1e-12, rtol=1e-10)
            why = why and "%s: %s" % (name, why)
        S.report("%s: -O2 (rewritten) matches -O0 (as written)" % g, why)
        ref = reference(g, dict(x, **(p or {})))
        S.report("%s: output matches PyTorch" % g, compare(outs["-O2"]["o"], ref, atol=1e-12))
        sg = S.path("dump.sg")
        with open(sg, "w") as f:
            f.write(src)
        for opt in ("-O0", "-O2"):
            pr = subprocess.run([S.sgc, "check", sg, "--graph", g, opt,
                                 "--dump-after=attention"],
                                capture_output=True, text=True, timeout=60)
            fused = ("causal=true" if g == "arange_causal" else
                     "enable_gqa=true" if g == "repeat_kv" else
                     "= scaled_dot_product_attention(") in pr.stderr
            want = g != "scores_returned" and opt == "-O2"
            S.report("%s %s: --dump-after=attention %s the rewrite" %
                     (g, opt, "shows" if want else "lacks"),
                     None if fused == want and pr.returncode == 0 else
                     "exit %d, rewritten: %s\n%s" % (pr.returncode, fused, pr.stderr[:1500]))
    S.finish()


main()
