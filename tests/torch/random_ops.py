"""random_ops.py - the random ops, dropout and rand: their draws, dropout's
scale and gradient, and the generator state in `sgc run`, against an
independent Philox4x32-10 in Python (_common.py's).

runtime/sgk/sgk_random.h fixes how element i of a dropout draws: 16 bits,
half i % 2 (the low one for even i) of word i % 8 / 2 of Philox4x32-10 with
key (seed lo, seed hi) and counter (i / 8 lo, i / 8 hi, salt, offset), kept
when they are >= floor(p * 2^16), a kept x becoming x * (1 / (1 - p)) in
the dtype's opmath and a dropped one x * 0; rand's element i is word i % 4
of block i / 4.
The model's generator state opt.rng = (seed, offset) starts as (--seed, 0)
and every call advances the offset by 1 before it draws.  The checks:

1. the Philox here reproduces Random123's known answers;
2. f32, f64, f16, bf16 at p = 0, 0.3, 0.5, 1, sizes not a multiple of 8:
   every element exactly the reference's, NaN and -0 as PyTorch's
   mask * x * scale gives them;
3. the gradient is the same mask on the incoming gradient, and two
   dropouts of one program draw different masks (salt=), an explicit salt
   the same as the one the front end gives;
4. the state: saved to --out, `--steps 2` equal to two chained `--steps 1`,
   --seed and a loaded opt.rng honoured, a new mask each step;
5. a large tensor drops p of its elements (within 5 sigma);
6. rand: every float dtype exactly (the top 24, 11, 8 or 32 bits of the
   draw times 2^-bits), in [0, 1) with mean 1/2 over many, numbered with
   the dropouts (one salt counter), no gradient of its own;
7. errors: p outside [0, 1], an integer operand, a negative salt, an
   integer rand, an attention's dropout_p outside [0, 1];
8. attention's dropout_p (scaled_dot_product_attention): the weights
   dropped as a dropout of the [..., L, S] weights with the op's salt
   would (causal and not, L != S, S not a multiple of 8, grouped-query
   heads, p = 1), output and the gradients of q, k and v against PyTorch
   in f64 with those masks; the same program written op by op (softmax,
   dropout, matmul) with the same salt gives the same result, and -O2's
   attention pass makes it the op; the op takes its place in the salt
   count.
"""
import math

import torch

from _common import Suite, dropout_keep as keep_mask, philox, philox_words, sgtype

S = Suite("random_ops")
def reference(x, p, salt, seed, offset):
    """What dropout gives for x: in the dtype's opmath, rounded once."""
    keep = keep_mask(x.numel(), p, salt, seed, offset).reshape(x.shape)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    scale = torch.tensor(0.0 if p >= 1 else 1.0 / (1.0 - p), dtype=torch.float64).to(acc)
    xa = x.to(acc)
    return torch.where(keep, xa * scale, xa * 0.0).to(x.dtype), keep


def same(got, exp):
    """Exact equality, NaN where NaN, the sign of zeros too."""
    if got.dtype != exp.dtype or got.shape != exp.shape:
        return "dtype/shape %s %s, expected %s %s" % (got.dtype, list(got.shape),
                                                      exp.dtype, list(exp.shape))
    g, e = got.double(), exp.double()
    bad = ~((g == e) & (torch.signbit(g) == torch.signbit(e)) | (g.isnan() & e.isnan()))
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        return "element %d: %r, expected %r (%d differ)" % (
            i, g.flatten()[i].item(), e.flatten()[i].item(), int(bad.sum()))
    return None


def prog(body, decls, rets):
    return "graph g {\n%s\n%s\n  return %s\n}\n" % (decls, body, ", ".join("%" + r for r in rets))


def check(label, why):
    S.report(label, why)


# 1. Random123's known answers (kat_vectors, philox4x32 10 rounds)
check("philox known answers",
      None if philox((0, 0, 0, 0), (0, 0)) == (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8) and
      philox((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0)) ==
      (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1) else "the Python Philox is wrong")

# 2. every float dtype and p, odd sizes, NaN and signed zeros
gen = torch.Generator().manual_seed(3)
for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    for p in (0.0, 0.3, 0.5, 1.0):
        x = (torch.randn(7, 9, generator=gen) * 3).to(dt)
        x[0, 0], x[1, 1], x[2, 2] = float("nan"), -0.0, float("-inf")
        src = prog("  %%y = dropout(%%x, p=%r)" % p, "  input %%x : %s" % sgtype(x), ["y"])
        rc, out, err, _ = S.run(src, {"x": x})
        label = "values %s p=%g" % (str(dt)[6:], p)
        if rc != 0:
            check(label, "sgc run exited %d: %s" % (rc, err[:500]))
            continue
        exp, _ = reference(x, p, 0, 0, 1)
        check(label, same(out["y"], exp))

# 3. the gradient: the same mask on grad; two dropouts draw two masks
w = torch.randn(1001, generator=gen)
c = torch.randn(1001, generator=gen)
src = prog("""  %d = dropout(%w, p=0.4)
  %e = dropout(%w, p=0.4)
  %f = dropout(%w, p=0.4, salt=0)
  %m = mul(%d, %c)
  %l = sum(%m)
  backward(%l)""", "  input %c : f32[1001]\n  param %w : f32[1001]", ["d", "e", "f", "grad.w"])
rc, out, err, _ = S.run(src, {"c": c}, {"w": w}, args=("--seed", "11"))
if rc != 0:
    check("gradient", "sgc run exited %d: %s" % (rc, err[:500]))
else:
    d0, k0 = reference(w, 0.4, 0, 11, 1)
    e1, k1 = reference(w, 0.4, 1, 11, 1)
    g0, _ = reference(c, 0.4, 0, 11, 1)
    check("gradient: forward mask (--seed 11)", same(out["d"], d0))
    check("gradient: second dropout's own mask (salt 1)", same(out["e"], e1))
    check("gradient: masks differ between salts",
          None if (k0 != k1).any() else "salt 0 and 1 drew the same mask")
    check("gradient: explicit salt=0 equals the first", same(out["f"], d0))
    check("gradient: grad.w is the mask on the gradient", same(out["grad.w"], g0))

# 4. the generator state across calls and files
x = torch.randn(64, generator=gen)
src = prog("  %y = dropout(%x, p=0.5)", "  input %x : f32[64]", ["y"])
rc1, o1, e1, _ = S.run(src, {"x": x}, args=("--seed", "5"))
if rc1 != 0:
    check("state", "sgc run exited %d: %s" % (rc1, e1[:500]))
else:
    check("state: opt.rng saved as (seed, 1)",
          None if o1.get("opt.rng") is not None and o1["opt.rng"].tolist() == [5, 1]
          else "opt.rng is %r" % (o1.get("opt.rng"),))
    check("state: --seed 5 draws from seed 5", same(o1["y"], reference(x, 0.5, 0, 5, 1)[0]))
    rc2, o2, e2, _ = S.run(src, {"x": x}, {"opt.rng": o1["opt.rng"]})
    rc3, o3, e3, _ = S.run(src, {"x": x}, args=("--seed", "5", "--steps", "2"))
    if rc2 or rc3:
        check("state: chained", "sgc run exited %d/%d: %s %s" % (rc2, rc3, e2[:300], e3[:300]))
    else:
        check("state: --steps 2 equals two chained --steps 1",
              same(o2["y"], o3["y"]) or (None if o2["opt.rng"].tolist() == o3["opt.rng"].tolist()
                                         == [5, 2] else "opt.rng %r %r" % (o2["opt.rng"],
                                                                           o3["opt.rng"])))
        check("state: the second call draws a new mask (offset 2)",
              same(o3["y"], reference(x, 0.5, 0, 5, 2)[0]) or
              (None if not torch.equal(o3["y"], o1["y"]) else "the same mask twice"))
    big = torch.tensor([7 + (1 << 40), 41], dtype=torch.int64)
    rc4, o4, e4, _ = S.run(src, {"x": x}, {"opt.rng": big})
    check("state: a loaded opt.rng (a 64-bit seed, offset 41) draws at offset 42",
          "sgc run exited %d: %s" % (rc4, e4[:300]) if rc4 else
          same(o4["y"], reference(x, 0.5, 0, 7 + (1 << 40), 42)[0]))

# 5. the fraction dropped
n, p = 200000, 0.3
x = torch.ones(n)
src = prog("  %y = dropout(%x, p=0.3)", "  input %%x : f32[%d]" % n, ["y"])
rc, out, err, _ = S.run(src, {"x": x})
if rc != 0:
    check("fraction", "sgc run exited %d: %s" % (rc, err[:500]))
else:
    y = out["y"]
    dropped = int((y == 0).sum())
    sigma = math.sqrt(n * p * (1 - p))
    scale = torch.tensor(1 / (1 - p), dtype=torch.float64).float()
    check("fraction: %d of %d dropped (expected %.0f +- %.0f)" % (dropped, n, n * p, 5 * sigma),
          None if abs(dropped - n * p) < 5 * sigma else "outside 5 sigma")
    check("fraction: kept elements are 1 / (1 - p)",
          None if torch.all((y == 0) | (y == scale)) else "other values")

# 6. rand
BITS = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8, torch.float64: 32}


def rand_reference(shape, dt, salt, seed=0, offset=1):
    b = BITS[dt]
    vals = [(w >> (32 - b)) / float(1 << b)
            for w in philox_words(math.prod(shape), salt, seed, offset)]
    return torch.tensor(vals, dtype=torch.float64).to(dt).reshape(shape)


body = ["  %u0 = rand(shape=[3, 5])"]
rets = ["u0"]
for k, dt in enumerate((torch.float16, torch.bfloat16, torch.float64), 1):
    body.append("  %%u%d = rand(shape=[7], dtype=%s)" % (k, {torch.float16: "f16",
                torch.bfloat16: "bf16", torch.float64: "f64"}[dt]))
    rets.append("u%d" % k)
body += ["  %y = dropout(%x, p=0.5)", "  %big = rand(shape=[100000])", "  %m = mul(%w, %u0)",
         "  %l = sum(%m)", "  backward(%l)"]
x = torch.randn(9, generator=gen)
w = torch.randn(3, 5, generator=gen)
src = prog("\n".join(body), "  input %x : f32[9]\n  param %w : f32[3, 5]",
           rets + ["y", "big", "grad.w"])
rc, out, err, _ = S.run(src, {"x": x}, {"w": w}, args=("--seed", "3"))
if rc != 0:
    check("rand", "sgc run exited %d: %s" % (rc, err[:500]))
else:
    for k, (shape, dt) in enumerate((((3, 5), torch.float32), ((7,), torch.float16),
                                     ((7,), torch.bfloat16), ((7,), torch.float64))):
        check("rand %s exactly" % str(dt)[6:], same(out["u%d" % k],
                                                   rand_reference(shape, dt, k, seed=3)))
    check("rand and dropout share the salt counter (dropout's is 4)",
          same(out["y"], reference(x, 0.5, 4, 3, 1)[0]))
    big = out["big"].double()
    check("rand: 100000 values in [0, 1), mean %.4f" % big.mean().item(),
          None if big.min() >= 0 and big.max() < 1 and abs(big.mean().item() - 0.5) < 0.005
          else "min %g max %g" % (big.min(), big.max()))
    check("rand: no gradient of its own (grad.w is the draws)", same(out["grad.w"], out["u0"]))

# 7. errors
for label, body, decl, needle in [
        ("p > 1", "  %y = dropout(%x, p=1.5)", "  input %x : f32[4]",
         "dropout probability has to be between 0 and 1, but got 1.5"),
        ("p < 0", "  %y = dropout(%x, p=-0.1)", "  input %x : f32[4]",
         "dropout probability has to be between 0 and 1"),
        ("integer operand", "  %y = dropout(%x, p=0.5)", "  input %x : i64[4]",
         "expects a floating-point tensor"),
        ("negative salt", "  %y = dropout(%x, p=0.5, salt=-1)", "  input %x : f32[4]",
         "salt=-1 is not in [0, 2^32)"),
        ("integer rand", "  %y = rand(shape=[4], dtype=i64)", "  input %x : f32[4]",
         "dtype i64 is not supported")]:
    S.expect_error("error: " + label, prog(body, decl, ["y"]), 1, needle,
                   {"x": torch.zeros(4, dtype=torch.int64 if "i64" in decl else torch.float32)})

# 8. attention's dropout_p


def attn_reference(q, k, v, p, salt, seed, causal, gqa):
    """PyTorch's math attention in f64 with sgc's mask on the weights."""
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    kk, vv = k, v
    if gqa:
        kk = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
        vv = v.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    s = q @ kk.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        L, Sn = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, Sn, dtype=torch.bool).triu(1), float("-inf"))
    w = torch.softmax(s, dim=-1)
    keep = keep_mask(w.numel(), p, salt, seed, 1).reshape(w.shape)
    o = (w * keep * (0.0 if p >= 1 else 1.0 / (1.0 - p))) @ vv
    o.backward(torch.ones_like(o) + torch.arange(o.shape[-1], dtype=torch.float64) / 7)
    return o.detach(), q.grad, k.grad, v.grad


def close(got, exp, tol):
    if got.shape != exp.shape:
        return "shape %s, expected %s" % (list(got.shape), list(exp.shape))
    err = float((got.double() - exp).abs().max()) if got.numel() else 0.0
    return None if err <= tol else "max error %g > %g" % (err, tol)


for label, qs, ks, causal, gqa, p in [
        ("L 5, S 6", (2, 3, 5, 8), (2, 3, 6, 8), False, False, 0.3),
        ("causal, S 7", (2, 3, 7, 8), (2, 3, 7, 8), True, False, 0.5),
        ("grouped-query heads", (2, 4, 6, 8), (2, 2, 9, 8), False, True, 0.2),
        ("p = 1", (1, 2, 4, 8), (1, 2, 4, 8), False, False, 1.0)]:
    q = torch.randn(*qs, generator=gen, dtype=torch.float64)
    k = torch.randn(*ks, generator=gen, dtype=torch.float64)
    v = torch.randn(*ks, generator=gen, dtype=torch.float64)
    g = torch.ones(qs[:-1] + (ks[-1],), dtype=torch.float64) + \
        torch.arange(ks[-1], dtype=torch.float64) / 7
    attrs = "dropout_p=%r%s%s" % (p, ", causal=true" if causal else "",
                                  ", enable_gqa=true" if gqa else "")
    src = prog("""  %%d = dropout(%%g, p=0.5)
  %%o = scaled_dot_product_attention(%%q, %%k, %%v, %s)
  %%m = mul(%%o, %%g)
  %%l = sum(%%m)
  backward(%%l)""" % attrs,
               "  input %%g : %s\n  param %%q : %s\n  param %%k : %s\n  param %%v : %s" %
               (sgtype(g), sgtype(q), sgtype(k), sgtype(v)), ["o", "grad.q", "grad.k", "grad.v"])
    rc, out, err, _ = S.run(src, {"g": g}, {"q": q, "k": k, "v": v}, args=("--seed", "9"))
    if rc != 0:
        check("attention dropout: " + label, "sgc run exited %d: %s" % (rc, err[:500]))
        continue
    exp = attn_reference(q, k, v, p, 1, 9, causal, gqa)  # salt 1: after the dropout
    for name, got, e in zip(("output", "grad.q", "grad.k", "grad.v"),
                            (out["o"], out["grad.q"], out["grad.k"], out["grad.v"]), exp):
        check("attention dropout: %s: %s" % (label, name), close(got, e, 1e-10))
    if p >= 1:
        check("attention dropout: p = 1 gives zeros",
              None if torch.all(out["o"] == 0) else "nonzero output")

# a float mask with its gradient (the scores made again, the weights'
# gradient through the same dropout)
q = torch.randn(2, 2, 5, 8, generator=gen, dtype=torch.float64)
k = torch.randn(2, 2, 7, 8, generator=gen, dtype=torch.float64)
v = torch.randn(2, 2, 7, 8, generator=gen, dtype=torch.float64)
mk = torch.randn(5, 7, generator=gen, dtype=torch.float64)
src = prog("""  %o = scaled_dot_product_attention(%q, %k, %v, %mk, dropout_p=0.3)
  %l = sum(%o)
  backward(%l)""", "  input %q : f64[2, 2, 5, 8]\n  input %k : f64[2, 2, 7, 8]\n"
           "  input %v : f64[2, 2, 7, 8]\n  param %mk : f64[5, 7]", ["o", "grad.mk"])
rc, out, err, _ = S.run(src, {"q": q, "k": k, "v": v}, {"mk": mk}, args=("--seed", "4"))
if rc:
    check("attention dropout: a float mask's gradient", "sgc run exited %d: %s" % (rc, err[:500]))
else:
    m2 = mk.clone().requires_grad_()
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8) + m2, dim=-1)
    o = (w * keep_mask(w.numel(), 0.3, 0, 4, 1).reshape(w.shape) / 0.7) @ v
    o.sum().backward()
    check("attention dropout: a float mask: output", close(out["o"], o.detach(), 1e-10))
    check("attention dropout: a float mask's gradient", close(out["grad.mk"], m2.grad, 1e-10))

# the same attention op by op (bf16-free f32), one salt
q = torch.randn(2, 3, 6, 8, generator=gen)
k = torch.randn(2, 3, 10, 8, generator=gen)
v = torch.randn(2, 3, 10, 8, generator=gen)
src = prog("""  %o = scaled_dot_product_attention(%q, %k, %v, dropout_p=0.4, salt=5)
  %kt = transpose(%k, dim0=2, dim1=3)
  %s0 = matmul(%q, %kt)
  %s = mul(%s0, 0.35355339059327373)
  %w = softmax(%s, dim=-1)
  %wd = dropout(%w, p=0.4, salt=5)
  %o2 = matmul(%wd, %v)""", "  input %q : f32[2, 3, 6, 8]\n  input %k : f32[2, 3, 10, 8]\n"
           "  input %v : f32[2, 3, 10, 8]", ["o", "o2"])
rc, out, err, _ = S.run(src, {"q": q, "k": k, "v": v}, args=("-O0",))  # -O0: no rewrite
check("attention dropout: op by op with the same salt (-O0)",
      "sgc run exited %d: %s" % (rc, err[:500]) if rc else
      close(out["o"], out["o2"].double(), 1e-5) or
      (None if (out["o"] != 0).any() else "all zero"))
rc, out2, err, _ = S.run(src, {"q": q, "k": k, "v": v}, args=("--dump-after=attention",))
check("attention dropout: -O2 rewrites the op-by-op chain with its dropout into the op",
      "sgc run exited %d: %s" % (rc, err[:500]) if rc else
      ("not rewritten:\n" + err) if err.count("dropout_p=0.4, salt=5") != 2 or
      " dropout(" in err else
      close(out2["o2"], out["o2"].double(), 1e-5))

# dropout_p=0 (the default) is the contract's op: no draw, no generator state
src = prog("  %o = scaled_dot_product_attention(%q, %q, %q, dropout_p=0.0)",
           "  input %q : f32[2, 4, 8]", ["o"])
rc, out, err, _ = S.run(src, {"q": torch.randn(2, 4, 8, generator=gen)})
check("attention dropout: dropout_p=0 draws nothing (no opt.rng)",
      "sgc run exited %d: %s" % (rc, err[:500]) if rc else
      None if "opt.rng" not in out else "opt.rng in --out")

S.expect_error("error: attention dropout_p outside [0, 1]",
               prog("  %y = scaled_dot_product_attention(%x, %x, %x, dropout_p=1.5)",
                    "  input %x : f32[2, 4, 8]", ["y"]), 1,
               "dropout probability has to be between 0 and 1, but got 1.5",
               {"x": torch.zeros(2, 4, 8)})

S.finish()
