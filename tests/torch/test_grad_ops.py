"""test_grad_ops.py - the derivative of every differentiable op, checked
two ways on `sgc run` (the CPU interpreter) in f64:

  1. against torch.autograd on the same inputs (the main oracle), for
     every op, several shapes and broadcasting cases;
  2. against central finite differences computed by running `sgc run`
     again with a param perturbed by +-eps (a few elements per param),
     which checks the derivation without trusting PyTorch.

Each case is a small graph: params (f64), inputs, a body ending in %o, then
`%loss = sum(mul(%o, %r))` with a random weight %r (so every element of the
gradient matters), `backward(%loss)` and `return %loss`.  Without an
optimizer sgc returns `grad.NAME` for every param.  A few cases also run in
f32 (compared at f32 tolerance), f16 and bf16 (the gradient's dtype, and
values within a few percent) to check the dtype handling.  Then errors:
ops without a derivative, and zero gradients off the path.

Usage: test_grad_ops.py PATH/TO/sgc
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
from _common import F64, F32, I64  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

S = C.Suite("grad ops")
GEN = torch.Generator().manual_seed(4)


def R(*shape, lo=-2.0, hi=2.0):
    return (torch.rand(shape, generator=GEN, dtype=F64) * (hi - lo) + lo)


def pos(*shape):
    return R(*shape, lo=0.5, hi=2.0)


def idx(shape, n):
    return torch.randint(0, n, shape, generator=GEN)


CASES = []


def case(label, params, body, ref, inputs=None, fd=True, f32=False):
    """params, inputs: name -> tensor; body: .sg lines ending in %o; ref:
    function of a dict of tensors giving o."""
    CASES.append(dict(label=label, params=params, inputs=inputs or {},
                      body=body, ref=ref, fd=fd, f32=f32))


# ---------------------------------------------------------------- pointwise, one operand
UNARY = [
    ("neg", R(2, 3), torch.neg), ("abs", R(2, 3), torch.abs),
    ("exp", R(2, 3), torch.exp), ("log", pos(2, 3), torch.log),
    ("log1p", pos(2, 3), torch.log1p), ("sqrt", pos(2, 3), torch.sqrt),
    ("rsqrt", pos(3), torch.rsqrt), ("reciprocal", pos(2, 2), torch.reciprocal),
    ("square", R(2, 3), torch.square), ("sin", R(4), torch.sin),
    ("cos", R(4), torch.cos), ("tanh", R(2, 3), torch.tanh),
    ("sigmoid", R(2, 3), torch.sigmoid), ("relu", R(3, 4), torch.relu),
    ("gelu", R(3, 4), F.gelu), ("silu", R(3, 4), F.silu),
    ("erf", R(2, 3), torch.erf), ("sign", R(2, 3), torch.sign),
    ("floor", R(2, 3), torch.floor),
]
for name, x, fn in UNARY:
    case(name, {"x": x}, "%%o = %s(%%x)" % name, lambda P, fn=fn: fn(P["x"]),
         f32=name in ("exp", "tanh", "gelu"))
case("gelu tanh", {"x": R(3, 4)}, '%o = gelu(%x, approximate="tanh")',
     lambda P: F.gelu(P["x"], approximate="tanh"), f32=True)
case("unary 0-d", {"x": R()}, "%o = exp(%x)", lambda P: torch.exp(P["x"]))

# ---------------------------------------------------------------- pointwise, two operands
BIN = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
       "maximum": torch.maximum, "minimum": torch.minimum}
SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((4, 1, 3), (2, 1)),
          ((), (2, 2))]
for name, fn in BIN.items():
    for sa, sb in SHAPES:
        b = pos(*sb) if name == "div" else R(*sb)
        case("%s %s %s" % (name, list(sa), list(sb)), {"a": R(*sa), "b": b},
             "%%o = %s(%%a, %%b)" % name, lambda P, fn=fn: fn(P["a"], P["b"]),
             f32=sa == (2, 3) and sb == (3,))
case("pow tensor", {"a": pos(2, 3), "b": R(3)}, "%o = pow(%a, %b)",
     lambda P: torch.pow(P["a"], P["b"]))
case("pow scalar exponent", {"a": R(2, 3)}, "%o = pow(%a, 3)",
     lambda P: torch.pow(P["a"], 3))
case("pow float exponent", {"a": pos(2, 3)}, "%o = pow(%a, 2.5)",
     lambda P: torch.pow(P["a"], 2.5))
case("pow zero exponent", {"a": R(2, 3)}, "%o = pow(%a, 0)",
     lambda P: torch.pow(P["a"], 0))
case("pow scalar base", {"b": R(2, 3)}, "%o = pow(2.0, %b)",
     lambda P: torch.pow(2.0, P["b"]))
case("pow zero base", {"a": torch.tensor([0.0, 1.5, 0.0], dtype=F64),
                       "b": torch.tensor([2.0, 1.5, -1.5], dtype=F64)},
     "%o = pow(%a, %b)", lambda P: torch.pow(P["a"], P["b"]), fd=False)
case("scalar operands", {"x": R(2, 3)},
     "%t = sub(1.0, %x)\n%u = mul(%t, 0.5)\n%v = div(3, %u)\n%o = add(%v, %x)",
     lambda P: 3 / ((1.0 - P["x"]) * 0.5) + P["x"])
case("same operand twice", {"x": R(3)}, "%o = mul(%x, %x)", lambda P: P["x"] * P["x"])
ta = torch.tensor([1.0, 2.0, -1.0, 0.5], dtype=F64)
tb = torch.tensor([1.0, 3.0, -1.0, 0.0], dtype=F64)
case("maximum ties", {"a": ta.clone(), "b": tb.clone()}, "%o = maximum(%a, %b)",
     lambda P: torch.maximum(P["a"], P["b"]), fd=False)
case("minimum ties", {"a": ta.clone(), "b": tb.clone()}, "%o = minimum(%a, %b)",
     lambda P: torch.minimum(P["a"], P["b"]), fd=False)
cond = torch.rand(2, 3, generator=GEN) < 0.5
case("where", {"a": R(2, 3), "b": R(3)}, "%o = where(%c, %a, %b)",
     lambda P: torch.where(P["c"], P["a"], P["b"]), inputs={"c": cond})
case("where scalar", {"a": R(2, 3)}, "%o = where(%c, %a, 0.0)",
     lambda P: torch.where(P["c"], P["a"], torch.tensor(0.0, dtype=F64)),
     inputs={"c": cond})
case("clamp min max", {"x": R(3, 4)}, "%o = clamp(%x, min=-0.5, max=1)",
     lambda P: torch.clamp(P["x"], min=-0.5, max=1))
case("clamp min", {"x": R(3, 4)}, "%o = clamp(%x, min=0.25)",
     lambda P: torch.clamp(P["x"], min=0.25))
case("clamp max", {"x": R(3, 4)}, "%o = clamp(%x, max=0.25)",
     lambda P: torch.clamp(P["x"], max=0.25))
case("cast round trip", {"x": R(2, 3)},
     "%c = cast(%x, dtype=f32)\n%d = mul(%c, %c)\n%o = cast(%d, dtype=f64)",
     lambda P: (P["x"].float() * P["x"].float()).double(), fd=False)
case("mixed dtypes", {"x": R(2, 3), "y": R(3).float()}, "%o = mul(%x, %y)",
     lambda P: P["x"] * P["y"], fd=False)
case("comparison cuts the path", {"x": R(2, 3)},
     "%m = gt(%x, 0.0)\n%n = cast(%m, dtype=f64)\n%o = mul(%n, %x)",
     lambda P: (P["x"] > 0).double() * P["x"])
# detach: no gradient through its result (finite differences see its
# values change with x, so only autograd is the oracle)
case("detach cuts the path", {"x": R(2, 3)}, "%d = detach(%x)\n%o = mul(%d, %x)",
     lambda P: P["x"].detach() * P["x"], fd=False, f32=True)
case("detach straight-through", {"x": R(2, 3), "w": R(3)},
     "%h = mul(%x, %w)\n%d = detach(%h)\n%q = floor(%d)\n%s = sub(%q, %d)\n"
     "%t = detach(%s)\n%o = add(%h, %t)",
     lambda P: P["x"] * P["w"] + (torch.floor(P["x"] * P["w"]) - P["x"] * P["w"]).detach(),
     fd=False)

# ---------------------------------------------------------------- reductions
X = R(2, 3, 4)
RED = [("", {}), ("dims=[1]", {"dim": [1]}), ("dims=[0, 2], keepdim=true",
       {"dim": [0, 2], "keepdim": True}), ("dims=[-1]", {"dim": [-1]})]
for op, fn in (("sum", torch.sum), ("mean", torch.mean), ("amax", torch.amax),
               ("amin", torch.amin)):
    for attrs, kw in RED:
        sep = ", " if attrs else ""
        def ref(P, fn=fn, kw=kw):
            if not kw:
                return fn(P["x"]) if fn in (torch.sum, torch.mean) else fn(P["x"], dim=list(range(3)))
            return fn(P["x"], **kw)
        case("%s(%s)" % (op, attrs), {"x": X.clone()}, "%%o = %s(%%x%s%s)" % (op, sep, attrs),
             ref, f32=op == "mean" and attrs == "dims=[1]")
for attrs, kw in RED:
    sep = ", " if attrs else ""
    kw2 = dict(kw)
    kw2.setdefault("dim", [0, 1, 2])
    case("var(%s)" % attrs, {"x": X.clone()}, "%%o = var(%%x%s%s)" % (sep, attrs),
         lambda P, kw2=kw2: torch.var(P["x"], **kw2))
case("var_mean", {"x": R(3, 5)},
     "%v, %m = var_mean(%x, dims=[1])\n%o = add(%v, %m)",
     lambda P: sum(torch.var_mean(P["x"], dim=[1])))
case("var_mean mean only", {"x": R(3, 5)},
     "%v, %m = var_mean(%x, dims=[0])\n%o = mul(%m, 2.0)",
     lambda P: torch.var_mean(P["x"], dim=[0])[1] * 2)
ties = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, -1.0]], dtype=F64)
case("amax ties", {"x": ties.clone()}, "%o = amax(%x, dims=[1])",
     lambda P: torch.amax(P["x"], dim=[1]), fd=False)
case("amin ties all", {"x": ties.clone()}, "%o = amin(%x)",
     lambda P: torch.amin(P["x"], dim=[0, 1]), fd=False)
case("sum 0-d", {"x": R()}, "%o = sum(%x)", lambda P: torch.sum(P["x"]))

# ---------------------------------------------------------------- normalisation
for d in (-1, 0, 1):
    case("softmax dim=%d" % d, {"x": R(3, 4)}, "%%o = softmax(%%x, dim=%d)" % d,
         lambda P, d=d: torch.softmax(P["x"], d), f32=d == -1)
    case("log_softmax dim=%d" % d, {"x": R(3, 4)}, "%%o = log_softmax(%%x, dim=%d)" % d,
         lambda P, d=d: torch.log_softmax(P["x"], d), f32=d == 1)
case("layer_norm", {"x": R(2, 3, 5), "w": R(5), "b": R(5)},
     "%o = layer_norm(%x, %w, %b)",
     lambda P: F.layer_norm(P["x"], (5,), P["w"], P["b"]), f32=True)
case("layer_norm no affine eps", {"x": R(4, 6)}, "%o = layer_norm(%x, eps=0.01)",
     lambda P: F.layer_norm(P["x"], (6,), eps=0.01))
case("layer_norm weight only", {"x": R(4, 6), "w": R(6)}, "%o = layer_norm(%x, %w)",
     lambda P: F.layer_norm(P["x"], (6,), P["w"]))


def rms(x, w=None, eps=1e-6):
    y = x * torch.rsqrt(torch.mean(x * x, -1, keepdim=True) + eps)
    return y * w if w is not None else y


case("rms_norm", {"x": R(3, 5), "w": R(5)}, "%o = rms_norm(%x, %w)",
     lambda P: rms(P["x"], P["w"]), f32=True)
case("rms_norm no weight", {"x": R(2, 2, 4)}, "%o = rms_norm(%x, eps=0.001)",
     lambda P: rms(P["x"], eps=0.001))
# the weight's and bias's gradients come from the norm's backward op
# itself (one op for dx, dw, db): with x an input (no dx wanted), 3-d, and
# after a residual add whose sum another norm reads too
case("layer_norm affine of an input", {"w": R(7), "b": R(7)},
     "%o = layer_norm(%x, %w, %b, eps=0.001)",
     lambda P: F.layer_norm(P["x"], (7,), P["w"], P["b"], eps=0.001),
     inputs={"x": R(2, 3, 7)}, f32=True)
case("rms_norm weight of an input", {"w": R(7)}, "%o = rms_norm(%x, %w)",
     lambda P: rms(P["x"], P["w"]), inputs={"x": R(3, 2, 7)}, f32=True)
case("layer_norm after residual", {"x": R(2, 3, 6), "p": R(2, 3, 6), "w": R(6), "b": R(6),
                                   "v": R(6)},
     "%x1 = add(%x, %p)\n%h = layer_norm(%x1, %w, %b)\n%h2 = rms_norm(%x1, %v)\n"
     "%o = add(%h, %h2)",
     lambda P: F.layer_norm(P["x"] + P["p"], (6,), P["w"], P["b"]) +
     rms(P["x"] + P["p"], P["v"]), f32=True)

# ---------------------------------------------------------------- linear algebra
MM = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
      ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
      ((4,), (2, 4, 3)), ((2, 3, 4), (4,))]
for sa, sb in MM:
    case("matmul %s @ %s" % (list(sa), list(sb)), {"a": R(*sa), "b": R(*sb)},
         "%o = matmul(%a, %b)", lambda P: torch.matmul(P["a"], P["b"]),
         f32=sa == (2, 3, 4) and sb == (4, 5))
case("linear", {"x": R(3, 4), "w": R(5, 4), "b": R(5)}, "%o = linear(%x, %w, %b)",
     lambda P: F.linear(P["x"], P["w"], P["b"]), f32=True)
case("linear no bias 3-d", {"x": R(2, 3, 4), "w": R(5, 4)}, "%o = linear(%x, %w)",
     lambda P: F.linear(P["x"], P["w"]))
case("linear 1-d", {"x": R(4), "w": R(2, 4), "b": R(2)}, "%o = linear(%x, %w, %b)",
     lambda P: F.linear(P["x"], P["w"], P["b"]))


def sdpa(q, k, v, causal=False, scale=None, mask=None, gqa=False):
    scale = scale if scale is not None else 1.0 / q.shape[-1] ** 0.5
    if gqa:  # PyTorch's enable_gqa: each k/v head serves a group of q heads
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        L, Sn = q.shape[-2], k.shape[-2]
        s = s.masked_fill(~torch.ones(L, Sn, dtype=torch.bool).tril(), float("-inf"))
    if mask is not None and mask.dtype == torch.bool:
        s = s.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        s = s + mask
    p = torch.softmax(s, -1)  # a row with no key left: zeros, as PyTorch 2.5+
    return torch.where(torch.isnan(p), torch.zeros_like(p), p) @ v


case("attention", {"q": R(2, 3, 4), "k": R(2, 5, 4), "v": R(2, 5, 6)},
     "%o = scaled_dot_product_attention(%q, %k, %v)",
     lambda P: sdpa(P["q"], P["k"], P["v"]), f32=True)
case("attention causal", {"q": R(2, 2, 4, 4), "k": R(2, 2, 4, 4), "v": R(2, 2, 4, 3)},
     "%o = scaled_dot_product_attention(%q, %k, %v, causal=true)",
     lambda P: sdpa(P["q"], P["k"], P["v"], causal=True))
case("attention causal scale broadcast", {"q": R(2, 1, 3, 4), "k": R(1, 2, 5, 4),
                                          "v": R(5, 2)},
     "%o = scaled_dot_product_attention(%q, %k, %v, causal=true, scale=0.3)",
     lambda P: sdpa(P["q"], P["k"], P["v"], causal=True, scale=0.3))

case("attention gqa 4/2", {"q": R(2, 4, 3, 4), "k": R(2, 2, 5, 4), "v": R(2, 2, 5, 3)},
     "%o = scaled_dot_product_attention(%q, %k, %v, enable_gqa=true)",
     lambda P: sdpa(P["q"], P["k"], P["v"], gqa=True), f32=True)
case("attention gqa mqa causal", {"q": R(1, 3, 4, 4), "k": R(1, 1, 4, 4), "v": R(1, 1, 4, 2)},
     "%o = scaled_dot_product_attention(%q, %k, %v, causal=true, enable_gqa=true)",
     lambda P: sdpa(P["q"], P["k"], P["v"], causal=True, gqa=True))
case("attention gqa broadcast batch", {"q": R(2, 4, 3, 4), "k": R(1, 2, 5, 4), "v": R(2, 2, 5, 3)},
     "%o = scaled_dot_product_attention(%q, %k, %v, scale=0.4, enable_gqa=true)",
     lambda P: sdpa(P["q"], P["k"], P["v"], scale=0.4, gqa=True))
BMASK = torch.tensor([[1, 0, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 1, 0, 0]], dtype=torch.bool)
case("attention bool mask [T, S]", {"q": R(2, 2, 3, 4), "k": R(2, 2, 5, 4), "v": R(2, 2, 5, 3)},
     "%o = scaled_dot_product_attention(%q, %k, %v, %m)",
     lambda P: sdpa(P["q"], P["k"], P["v"], mask=P["m"]), inputs={"m": BMASK}, f32=True)
case("attention float mask [B, 1, T, S] gqa", {"q": R(2, 4, 3, 4), "k": R(2, 2, 5, 4),
                                               "v": R(2, 2, 5, 3)},
     "%o = scaled_dot_product_attention(%q, %k, %v, %m, enable_gqa=true)",
     lambda P: sdpa(P["q"], P["k"], P["v"], mask=P["m"], gqa=True),
     inputs={"m": R(2, 1, 3, 5)})
case("attention bool mask [B, 1, 1, S]", {"q": R(2, 2, 3, 4), "k": R(2, 2, 5, 4), "v": R(2, 2, 5, 3)},
     "%o = scaled_dot_product_attention(%q, %k, %v, %m)",
     lambda P: sdpa(P["q"], P["k"], P["v"], mask=P["m"]),
     inputs={"m": torch.tensor([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1]],
                               dtype=torch.bool).reshape(2, 1, 1, 5)})
case("attention bool mask, a fully masked row", {"q": R(2, 3, 4), "k": R(2, 5, 4), "v": R(2, 5, 3)},
     "%o = scaled_dot_product_attention(%q, %k, %v, %m)",
     lambda P: sdpa(P["q"], P["k"], P["v"], mask=P["m"]),
     inputs={"m": torch.tensor([[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [0, 0, 1, 0, 0]],
                               dtype=torch.bool)})

# a float mask the loss depends on (a learned bias, as ALiBi's or relative
# positions'): its gradient is the scores' (PyTorch differentiates it)
case("attention float mask param [T, S]", {"q": R(2, 2, 3, 4), "k": R(2, 2, 5, 4),
                                           "v": R(2, 2, 5, 3), "m": R(3, 5)},
     "%o = scaled_dot_product_attention(%q, %k, %v, %m)",
     lambda P: sdpa(P["q"], P["k"], P["v"], mask=P["m"]), f32=True)
case("attention float mask param [B, 1, T, S] gqa scale", {"q": R(2, 4, 3, 4),
                                                          "k": R(2, 2, 5, 4),
                                                          "v": R(2, 2, 5, 3),
                                                          "m": R(2, 1, 3, 5)},
     "%o = scaled_dot_product_attention(%q, %k, %v, %m, scale=0.7, enable_gqa=true)",
     lambda P: sdpa(P["q"], P["k"], P["v"], scale=0.7, mask=P["m"], gqa=True))
case("attention float mask, the only param", {"m": R(1, 3, 5)},
     "%o = scaled_dot_product_attention(%q, %k, %v, %m)",
     lambda P: sdpa(P["q"], P["k"], P["v"], mask=P["m"]),
     inputs={"q": R(2, 3, 4), "k": R(2, 5, 4), "v": R(2, 5, 3)}, f32=True)

# ---------------------------------------------------------------- shape ops
case("reshape", {"x": R(2, 6)}, "%t = reshape(%x, shape=[3, -1])\n%o = mul(%t, %t)",
     lambda P: P["x"].reshape(3, -1) ** 2)
case("transpose", {"x": R(2, 3, 4)}, "%o = transpose(%x, dim0=0, dim1=-1)",
     lambda P: P["x"].transpose(0, -1))
case("permute", {"x": R(2, 3, 4)}, "%o = permute(%x, dims=[2, 0, 1])",
     lambda P: P["x"].permute(2, 0, 1))
case("expand", {"x": R(3, 1)}, "%o = expand(%x, shape=[2, 3, 4])",
     lambda P: P["x"].expand(2, 3, 4))
case("expand -1", {"x": R(1, 4)}, "%o = expand(%x, shape=[3, -1])",
     lambda P: P["x"].expand(3, -1))
case("slice", {"x": R(4, 6)}, "%o = slice(%x, dim=1, start=1, end=4)",
     lambda P: P["x"][:, 1:4])
case("slice negative", {"x": R(5, 3)}, "%o = slice(%x, dim=0, start=-3)",
     lambda P: P["x"][-3:])
case("slice empty", {"x": R(5, 3)}, "%o = slice(%x, dim=0, start=4, end=2)",
     lambda P: P["x"][4:2], fd=False)
case("cat", {"a": R(2, 3), "b": R(2, 1), "c": R(2, 2)}, "%o = cat(%a, %b, %c, dim=1)",
     lambda P: torch.cat([P["a"], P["b"], P["c"]], 1))
case("cat one", {"a": R(2, 3)}, "%o = cat(%a, dim=-1)", lambda P: torch.cat([P["a"]], -1))
case("chunk", {"x": R(5, 2)},
     "%p, %q, %s = chunk(%x, chunks=3)\n%t = mul(%p, 2.0)\n%o = cat(%s, %t)",
     lambda P: torch.cat([P["x"].chunk(3)[2], P["x"].chunk(3)[0] * 2]))
case("split unused part", {"x": R(2, 7)},
     "%p, %q = split(%x, sizes=[3, 4], dim=1)\n%o = exp(%q)",
     lambda P: torch.exp(P["x"].split([3, 4], 1)[1]))
case("squeeze unsqueeze", {"x": R(3, 1)},
     "%t = squeeze(%x, dim=1)\n%u = unsqueeze(%t, dim=0)\n%o = contiguous(%u)",
     lambda P: P["x"].squeeze(1).unsqueeze(0))

# ---------------------------------------------------------------- indexing, losses
case("embedding", {"t": R(5, 3)}, "%o = embedding(%i, %t)",
     lambda P: F.embedding(P["i"], P["t"]),
     inputs={"i": torch.tensor([[0, 2, 2], [4, 0, 2]])}, f32=True)
case("gather", {"x": R(3, 4)}, "%o = gather(%x, %i, dim=1)",
     lambda P: torch.gather(P["x"], 1, P["i"]),
     inputs={"i": torch.tensor([[0, 0, 3], [1, 2, 1], [3, 3, 3]])})
case("gather dim 0 smaller", {"x": R(4, 3)}, "%o = gather(%x, %i, dim=0)",
     lambda P: torch.gather(P["x"], 0, P["i"]), inputs={"i": idx((2, 2), 4)})
case("mse_loss", {"a": R(3, 4), "b": R(3, 4)}, "%o = mse_loss(%a, %b)",
     lambda P: F.mse_loss(P["a"], P["b"]), f32=True)
case("mse_loss broadcast", {"a": R(3, 4), "b": R(4)}, "%o = mse_loss(%a, %b)",
     lambda P: F.mse_loss(*torch.broadcast_tensors(P["a"], P["b"])))
case("cross_entropy", {"x": R(4, 5)}, "%o = cross_entropy(%x, %t)",
     lambda P: F.cross_entropy(P["x"], P["t"]), inputs={"t": idx((4,), 5)}, f32=True)
case("cross_entropy 3-d ignore", {"x": R(2, 3, 4)}, "%o = cross_entropy(%x, %t)",
     lambda P: F.cross_entropy(P["x"], P["t"]),
     inputs={"t": torch.tensor([[0, 2, -100, 1], [2, -100, 1, 0]])})
case("cross_entropy 1-d", {"x": R(6)}, "%o = cross_entropy(%x, %t)",
     lambda P: F.cross_entropy(P["x"], P["t"]), inputs={"t": torch.tensor(3)})

# ---------------------------------------------------------------- memory, in place, collectives
case("to_host to_device", {"x": R(2, 3)},
     "%h = to_host(%x)\n%d = to_device(%h)\n%o = mul(%d, %x)",
     lambda P: P["x"] * P["x"])
case("add_ sub_ on an activation", {"w": R(2, 3), "v": R(3)},
     "%h = mul(%w, 2.0)\nadd_(%h, %v)\nsub_(%h, %w)\n%o = mul(%h, %h)",
     lambda P: (P["w"] * 2 + P["v"] - P["w"]) ** 2)
case("mul_ div_ (saved old value)", {"w": R(2, 3), "v": pos(2, 3)},
     "%h = exp(%w)\nmul_(%h, %v)\ndiv_(%h, %v)\nmul_(%h, %w)\n%o = add(%h, 0.0)",
     lambda P: torch.exp(P["w"]) * P["v"] / P["v"] * P["w"])
case("in-place after a saved use", {"w": R(3), "v": R(3)},
     "%h = mul(%w, 1.5)\n%y = mul(%h, %v)\nadd_(%h, 1.0)\n%o = mul(%y, %h)",
     lambda P: (P["w"] * 1.5 * P["v"]) * (P["w"] * 1.5 + 1))
case("copy_", {"w": R(2, 3), "v": R(3)},
     "%h = exp(%w)\ncopy_(%h, %v)\n%o = mul(%h, %w)",
     lambda P: P["v"].expand(2, 3) * P["w"])
case("input mutated by a param", {"w": R(2, 3)},
     "add_(%x, %w)\n%o = mul(%x, %x)",
     lambda P: (P["x"] + P["w"]) ** 2, inputs={"x": R(2, 3)})
case("all_reduce", {"x": R(2, 3)},
     '%a = all_reduce(%x, op="avg")\n%b = mul(%a, %x)\nall_reduce(%b)\n%o = add(%b, 0.0)',
     lambda P: P["x"] * P["x"])
case("all_gather reduce_scatter all_to_all", {"x": R(4, 2)},
     "%a = all_gather(%x)\n%b = reduce_scatter(%a, dim=1)\n%c = all_to_all(%b)\n%o = exp(%c)",
     lambda P: torch.exp(P["x"]))
case("control_deps", {"x": R(3)},
     "%a = exp(%x)\n%a1, %x1 = control_deps(%a, %x, sync=synchronize)\n%o = mul(%a1, %x1)",
     lambda P: torch.exp(P["x"]) * P["x"])
case("accumulation", {"w": R(2, 2), "b": R(2)},
     "%h = matmul(%w, %w)\n%s = add(%h, %w)\n%t = add(%s, %b)\n%u = mul(%t, %b)\n%o = tanh(%u)",
     lambda P: torch.tanh((P["w"] @ P["w"] + P["w"] + P["b"]) * P["b"]))


# ---------------------------------------------------------------- convolution, pooling, batch_norm
case("conv2d", {"x": R(2, 3, 6, 5), "w": R(4, 3, 3, 3), "b": R(4)},
     "%o = conv2d(%x, %w, %b)",
     lambda P: F.conv2d(P["x"], P["w"], P["b"]), f32=True)
case("conv2d stride padding dilation", {"x": R(2, 2, 7, 8), "w": R(3, 2, 3, 2)},
     "%o = conv2d(%x, %w, stride=[2, 1], padding=[1, 2], dilation=[2, 1])",
     lambda P: F.conv2d(P["x"], P["w"], stride=(2, 1), padding=(1, 2), dilation=(2, 1)))
case("conv2d groups", {"x": R(1, 4, 5, 5), "w": R(6, 2, 3, 3), "b": R(6)},
     "%o = conv2d(%x, %w, %b, padding=1, groups=2)",
     lambda P: F.conv2d(P["x"], P["w"], P["b"], padding=1, groups=2))
case("conv2d depthwise", {"x": R(2, 3, 4, 4), "w": R(3, 1, 3, 3)},
     "%o = conv2d(%x, %w, stride=2, padding=1, groups=3)",
     lambda P: F.conv2d(P["x"], P["w"], stride=2, padding=1, groups=3))
case("max_pool2d", {"x": R(2, 3, 7, 6)},
     "%o = max_pool2d(%x, kernel_size=3, stride=2, padding=1)",
     lambda P: F.max_pool2d(P["x"], 3, 2, 1), f32=True)
case("max_pool2d default stride", {"x": R(1, 2, 4, 6)},
     "%o = max_pool2d(%x, kernel_size=[2, 3])",
     lambda P: F.max_pool2d(P["x"], (2, 3)))
case("avg_pool2d", {"x": R(2, 3, 7, 6)},
     "%o = avg_pool2d(%x, kernel_size=3, stride=2, padding=1)",
     lambda P: F.avg_pool2d(P["x"], 3, 2, 1), f32=True)
case("adaptive_avg_pool2d", {"x": R(2, 3, 7, 5)},
     "%o = adaptive_avg_pool2d(%x, output_size=[3, 2])",
     lambda P: F.adaptive_avg_pool2d(P["x"], (3, 2)), f32=True)
case("batch_norm training", {"x": R(4, 3, 2, 3), "w": R(3), "b": R(3)},
     "%o = batch_norm(%x, %rm, %rv, %w, %b, training=true, eps=0.001)",
     lambda P: F.batch_norm(P["x"], P["rm"], P["rv"], P["w"], P["b"], True, 0.1, 0.001),
     inputs={"rm": R(3), "rv": pos(3)}, f32=True)
case("batch_norm training no affine 1-d", {"x": R(5, 4)},
     "%o = batch_norm(%x, %rm, %rv, training=true, momentum=0.3)",
     lambda P: F.batch_norm(P["x"], P["rm"], P["rv"], None, None, True, 0.3),
     inputs={"rm": R(4), "rv": pos(4)})
case("batch_norm eval", {"x": R(2, 3, 2, 2), "w": R(3), "b": R(3)},
     "%o = batch_norm(%x, %rm, %rv, %w, %b)",
     lambda P: F.batch_norm(P["x"], P["rm"], P["rv"], P["w"], P["b"], False),
     inputs={"rm": R(3), "rv": pos(3)}, f32=True)
case("batch_norm eval no affine", {"x": R(2, 3, 2, 2)},
     "%o = batch_norm(%x, %rm, %rv)",
     lambda P: F.batch_norm(P["x"], P["rm"], P["rv"], None, None, False),
     inputs={"rm": R(3), "rv": pos(3)})


# ---------------------------------------------------------------- the runner

def program(c, params, inputs, r):
    decls = ["  param %%%s : %s" % (n, C.sgtype(t)) for n, t in params.items()]
    decls += ["  input %%%s : %s" % (n, C.sgtype(t)) for n, t in inputs.items()]
    decls.append("  input %%r : %s" % C.sgtype(r))
    body = ["  " + line for line in c["body"].strip().splitlines()]
    tail = ["  %rw = mul(%o, %r)", "  %loss = sum(%rw)", "  backward(%loss)",
            "  return %loss"]
    return "graph g {\n" + "\n".join(decls + body + tail) + "\n}\n"


def cast_case(c, dtype):
    def conv(d):
        return {n: (t.to(dtype) if t.dtype == F64 else t) for n, t in d.items()}
    return conv(c["params"]), conv(c["inputs"])


def torch_grads(c, params, inputs, r):
    leaves = {n: t.clone().requires_grad_() for n, t in params.items()}
    env = dict(inputs)
    env.update(leaves)
    env = {n: (t.clone() if n in inputs else t) for n, t in env.items()}
    o = c["ref"](env)
    loss = (o * r).sum()
    gs = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return {n: (g if g is not None else torch.zeros_like(leaves[n]))
            for n, g in zip(leaves, gs)}, loss.detach()


def run_case(c, dtype):
    params, inputs = cast_case(c, dtype)
    with torch.no_grad():
        env = dict(inputs)
        env.update(params)
        out = c["ref"]({n: t.clone() for n, t in env.items()})
    r = R(*out.shape).to(out.dtype)
    label = c["label"] + (" (f32)" if dtype == F32 else "")
    src = program(c, params, inputs, r)
    ins = dict(inputs)
    ins["r"] = r
    rc, res, err, _ = S.run(src, ins, params)
    if rc != 0 or res is None:
        S.report(label, "sgc run exited %d: %s\n--- program:\n%s" % (rc, err.strip()[:1500], src))
        return None
    want, loss = torch_grads(c, params, inputs, r)
    tol = {} if dtype == F32 else {"rtol": 1e-8, "atol": 1e-10}
    for n, w in want.items():
        got = res.get("grad." + n)
        if got is None:
            S.report(label, "grad.%s missing from --out" % n)
            return None
        why = C.compare(got, w, **tol)
        if why:
            S.report(label, "grad.%s: %s\n--- program:\n%s" % (n, why, src))
            return None
    why = C.compare(res["loss"], loss.to(res["loss"].dtype), **tol)
    S.report(label, why and "loss: " + why)
    return src, ins, params, res


def loss_at(src, ins, params):
    rc, res, err, _ = S.run(src, ins, params)
    if rc != 0:
        raise RuntimeError(err)
    return float(res["loss"])


def fd_check(c, src, ins, params, res):
    """Central differences of the loss at up to two elements per param."""
    bad = []
    for n, p in params.items():
        g = res["grad." + n].reshape(-1)
        flat = p.reshape(-1)
        picks = torch.randperm(flat.numel(), generator=GEN)[:2].tolist()
        for k in picks:
            eps = 1e-6 * max(1.0, abs(float(flat[k])))
            vals = []
            for sgn in (1, -1):
                q = flat.clone()
                q[k] += sgn * eps
                pp = dict(params)
                pp[n] = q.reshape(p.shape)
                vals.append(loss_at(src, ins, pp))
            fd = (vals[0] - vals[1]) / (2 * eps)
            if abs(fd - float(g[k])) > 1e-6 * (1 + abs(fd)):
                bad.append("%s[%d]: finite difference %.10g, grad %.10g" %
                           (n, k, fd, float(g[k])))
    S.report(c["label"] + " (finite differences)", "; ".join(bad) or None)


def gradient_name_cases():
    """%grad.NAME read after backward(%loss): the param's final gradient
    (zeros for a param the loss does not reach); with a fused optimizer it
    outlives its update."""
    x, w, u = R(4, 3), R(3, 2), R(2)
    wt = w.clone().requires_grad_(True)
    (x @ wt).sum().backward()
    g = wt.grad
    body = "%y = matmul(%x, %w)\n%l = sum(%y)\nbackward(%l)\n"
    S.case("grad.w and grad.u read after backward",
           body + "%n = sum(%grad.w)\n%h = mul(%grad.w, %grad.w)",
           {"x": x}, {"n": g.sum(), "h": g * g, "grad.w": g, "grad.u": torch.zeros(2, dtype=F64)},
           params={"w": w, "u": u})
    S.case("grad.w read after a fused sgd update",
           body + "optimizer sgd(lr=0.1)\n%n = sum(%grad.w)\nmul_(%grad.w, 0.5)\n%m = sum(%grad.w)",
           {"x": x}, {"n": g.sum(), "m": g.sum() / 2, "w": w - 0.1 * g}, params={"w": w, "u": u})
    S.expect_error("error: grad.w before backward",
                   "graph g {\n  param %w : f64[3]\n  %n = sum(%grad.w)\n  %l = sum(%w)\n"
                   "  backward(%l)\n  return %n\n}\n", 1, "use of undefined value '%grad.w'")


def param_view_cases():
    """A view of a param taken before backward and read after the
    optimizer's step sees the updated param, as PyTorch's views do after
    opt.step(): transpose, reshape and slice, read by a product and
    returned, with fused and unfused SGD and with AdamW."""
    x, w = R(4, 3), R(3, 2)
    wt = w.clone().requires_grad_(True)
    (x @ wt).sum().backward()
    g = wt.grad
    sgd = w - 0.1 * g
    wd, b1, b2, eps, lr = 0.01, 0.9, 0.999, 1e-8, 0.1
    m, v = (1 - b1) * g, (1 - b2) * g * g
    adamw = w * (1 - lr * wd) - lr * (m / (1 - b1)) / ((v / (1 - b2)).sqrt() + eps)
    body = ("%t = transpose(%w, dim0=0, dim1=1)\n%r = reshape(%w, shape=[6])\n"
            "%s = slice(%w, dim=0, start=1, end=3)\n"
            "%y = matmul(%x, %w)\n%l = sum(%y)\nbackward(%l)\n")
    after = "\n%p = matmul(%t, %q)"
    q = R(3, 5)
    for label, opt, new in (("sgd", "optimizer sgd(lr=0.1)", sgd),
                            ("sgd, unfused", "optimizer sgd(lr=0.1, fused=false)", sgd),
                            ("adamw", "optimizer adamw(lr=0.1, beta1=0.9, beta2=0.999, "
                             "eps=1e-8, weight_decay=0.01)", adamw)):
        S.case("a param's views read after its %s update" % label, body + opt + after,
               {"x": x, "q": q}, {"t": new.t(), "r": new.reshape(6), "s": new[1:3],
                                  "p": new.t() @ q, "w": new}, params={"w": w})


def extreme_value_cases():
    """div's gradient for its denominator as PyTorch computes it,
    -g * ((a / b) / b): b * b overflows or underflows where the quotients
    do not (f32, f64 and f16 for a plain |b| of 400; div_ in place)."""
    for dt, a, b in ((F32, [1e-25, 1e20, 3.0], [1e-25, 1e20, -7.0]),
                     (F64, [1e-200, 1e200], [1e-200, 1e200]),
                     (C.F16, [300.0, 1.0, 2.0], [300.0, 400.0, 1000.0])):
        pa, pb = torch.tensor(a, dtype=dt), torch.tensor(b, dtype=dt)
        for tag, fwd, body in (("", lambda x, y: x / y, "%q = div(%a, %b)"),
                               (" in place", lambda x, y: (x * 1.0).div_(y),
                                "%q = mul(%a, 1.0)\ndiv_(%q, %b)")):
            at, bt = pa.clone().requires_grad_(True), pb.clone().requires_grad_(True)
            fwd(at, bt).sum().backward()
            want = {"grad.a": at.grad, "grad.b": bt.grad}
            S.case("div%s: the denominator's gradient at extreme values (%s)" % (tag, C.SG[dt]),
                   body + "\n%l = sum(%q)\nbackward(%l)", {}, want, params={"a": pa, "b": pb})


def error_cases():
    S.expect_error("error: in-place on a param before backward",
                   "graph g {\n  param %w : f64[3]\n  mul_(%w, 2.0)\n"
                   "  %l = sum(%w)\n  backward(%l)\n  return %l\n}\n",
                   1, "in place")
    S.expect_error("error: no derivative (reduce_scatter min)",
                   "graph g {\n  param %w : f64[3]\n  %b = reduce_scatter(%w, op=\"min\")\n"
                   "  %l = sum(%b)\n  backward(%l)\n  return %l\n}\n",
                   1, "'reduce_scatter' with op=\"min\" has no derivative")
    S.expect_error("error: all_reduce max has no derivative",
                   'graph g {\n  param %w : f64[3]\n  %b = all_reduce(%w, op="max")\n'
                   "  %l = sum(%b)\n  backward(%l)\n  return %l\n}\n",
                   1, 'op="max" has no derivative')
    # a param the loss does not depend on gets zeros; integer paths cut
    src = ("graph g {\n  param %w : f64[2, 2]\n  param %u : f64[3]\n"
           "  %i = cast(%w, dtype=i64)\n  %f = cast(%i, dtype=f64)\n"
           "  %l = sum(%f)\n  backward(%l)\n  return %l\n}\n")
    rc, res, err, _ = S.run(src, None, {"w": R(2, 2), "u": R(3)})
    ok = rc == 0 and torch.equal(res["grad.w"], torch.zeros(2, 2, dtype=F64)) and \
        torch.equal(res["grad.u"], torch.zeros(3, dtype=F64))
    S.report("params off the path get zero gradients", None if ok else "exit %d %s %s" % (rc, err, res))


def run_half(c, dtype):
    """The case in f16 or bf16: each gradient has the param's dtype and is
    within a few percent (of the largest element) of the f64 derivative at
    the same, rounded, inputs: the derived ops round to the dtype one by
    one, as PyTorch's autograd does in that dtype."""
    params, inputs = cast_case(c, dtype)
    with torch.no_grad():
        env = dict(inputs)
        env.update(params)
        out = c["ref"]({n: C.widen(t.clone()) for n, t in env.items()})
    r = R(*out.shape).to(dtype)
    label = "%s (%s)" % (c["label"], C.SG[dtype])
    src = program(c, params, inputs, r)
    ins = dict(inputs)
    ins["r"] = r
    rc, res, err, _ = S.run(src, ins, params)
    if rc != 0 or res is None:
        S.report(label, "sgc run exited %d: %s" % (rc, err.strip()[:1500]))
        return
    wide = {n: (t.double() if t.is_floating_point() else t) for n, t in params.items()}
    win = {n: (t.double() if t.is_floating_point() else t) for n, t in inputs.items()}
    want, _ = torch_grads(c, wide, win, r.double())
    for n, w in want.items():
        got = res.get("grad." + n)
        if got is None or got.dtype != dtype:
            S.report(label, "grad.%s: missing or not %s" % (n, C.SG[dtype]))
            return
        tol = 0.03 * float(w.abs().max()) + 1e-3
        why = C.compare(got.double(), w, atol=tol, rtol=0.03)
        if why:
            S.report(label, "grad.%s: %s" % (n, why))
            return
    S.report(label, None)


def main():
    for c in CASES:
        got = run_case(c, F64)
        if got and c["fd"]:
            fd_check(c, *got)
        if c["f32"]:
            run_case(c, F32)
            run_half(c, C.BF16)
            run_half(c, C.F16)
    gradient_name_cases()
    param_view_cases()
    extreme_value_cases()
    error_cases()
    S.finish()


main()
