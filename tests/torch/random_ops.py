"""random_ops.py - the random ops, dropout and rand: their draws, dropout's
scale and gradient, and the generator state in `sgc run`, against an
independent Philox4x32-10 in Python (_common.py's).

runtime/sgk/sgk_random.h fixes how element i of a dropout draws: word i % 4
of Philox4x32-10 with key (seed lo, seed hi) and counter (i / 4 lo, i / 4
hi, salt, offset), kept when the word is >= floor(p * 2^32), a kept x
becoming x * (1 / (1 - p)) in the dtype's opmath and a dropped one x * 0.
The model's generator state opt.rng = (seed, offset) starts as (--seed, 0)
and every call advances the offset by 1 before it draws.  The checks:

1. the Philox here reproduces Random123's known answers;
2. f32, f64, f16, bf16 at p = 0, 0.3, 0.5, 1, sizes not a multiple of 4:
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
   integer rand.
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

S.finish()
