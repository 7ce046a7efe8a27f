"""model.py - `sgc run` against PyTorch on a whole small model: a causal
transformer block (embedding, layer_norm, attention through reshape and
transpose, residuals, rms_norm, an MLP with gelu, cross_entropy) with params
from --params, in f32 and bf16, also under --interleave with a side stream."""
import math

import torch
import torch.nn.functional as F

from _common import BF16, F32, SG, Suite, compare, rand

S = Suite("model")

V, T, D, H = 11, 6, 8, 2

SRC = """dim V = 11
dim T = 6
dim D = 8
dim H = 2
dim HD = 4

graph block {
  input %tok : i64[T]
  input %tgt : i64[T]
  param %emb : DT[V, D]
  param %ln_w : DT[D]
  param %ln_b : DT[D]
  param %wqkv : DT[24, D]
  param %wo : DT[D, D]
  param %w1 : DT[32, D]
  param %b1 : DT[32]
  param %w2 : DT[V, 32]
  stream side
  event qkv_ready, mlp_done

  %x = embedding(%tok, %emb)
  %h = layer_norm(%x, %ln_w, %ln_b)
  %qkv = linear(%h, %wqkv)
  record_event(qkv_ready)
  with stream(side) {
    wait_event(qkv_ready)
    %q, %k, %v = chunk(%qkv, chunks=3, dim=-1)
    %q2 = reshape(%q, shape=[T, H, HD])
    %k2 = reshape(%k, shape=[T, H, HD])
    %v2 = reshape(%v, shape=[T, H, HD])
    %q3 = transpose(%q2, dim0=0, dim1=1)
    %k3 = transpose(%k2, dim0=0, dim1=1)
    %v3 = transpose(%v2, dim0=0, dim1=1)
    %att = scaled_dot_product_attention(%q3, %k3, %v3, causal=true)
    %att2 = transpose(%att, dim0=0, dim1=1)
    %att3 = reshape(%att2, shape=[T, D])
    %o = linear(%att3, %wo)
    record_event(mlp_done)
  }
  wait_event(mlp_done)
  %r = add(%x, %o)
  %n = rms_norm(%r)
  %m = linear(%n, %w1, %b1)
  %g = gelu(%m, approximate="tanh")
  %logits = linear(%g, %w2)
  %loss = cross_entropy(%logits, %tgt)
  return %logits, %loss
}
"""


def reference(tok, tgt, p):
    x = F.embedding(tok, p["emb"])
    h = F.layer_norm(x, (D,), p["ln_w"], p["ln_b"])
    q, k, v = F.linear(h, p["wqkv"]).chunk(3, -1)
    q, k, v = (t.reshape(T, H, D // H).transpose(0, 1) for t in (q, k, v))
    att = q @ k.transpose(-1, -2) / math.sqrt(D // H)
    att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    a = (att.softmax(-1) @ v).transpose(0, 1).reshape(T, D)
    r = x + F.linear(a, p["wo"])
    n = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6)
    g = F.gelu(F.linear(n, p["w1"], p["b1"]), approximate="tanh")
    logits = F.linear(g, p["w2"])
    return logits, F.cross_entropy(logits, tgt)


tok = torch.randint(0, V, (T,))
tgt = torch.randint(0, V, (T,))
shapes = {"emb": [V, D], "ln_w": [D], "ln_b": [D], "wqkv": [24, D], "wo": [D, D],
          "w1": [32, D], "b1": [32], "w2": [V, 32]}
for dt, tol in ((F32, 1e-5), (BF16, 0.05)):
    p = {n: rand(s, dt, -0.5, 0.5) for n, s in shapes.items()}
    logits, loss = reference(tok, tgt, {n: t.float() for n, t in p.items()})
    src = SRC.replace("DT", SG[dt])
    for args in ((), ("--interleave=1",), ("--interleave=2",)):
        rc, out, err, _ = S.run(src, {"tok": tok, "tgt": tgt}, p, args)
        label = "transformer block %s %s" % (SG[dt], " ".join(args))
        if rc != 0:
            S.report(label, "exit %d: %s" % (rc, err))
            continue
        # bf16 rounds every intermediate; compare with an f32 reference
        S.report(label, compare(out["logits"].float(), logits, atol=tol, rtol=tol)
                 or compare(out["loss"].float(), loss, atol=tol, rtol=tol))
S.finish()
