"""pointwise.py - `sgc run` against PyTorch: one- and two-operand pointwise
ops, where, clamp and cast, over every dtype each accepts, broadcasting,
scalar operands, empty tensors and special values."""
import math

import torch
import torch.nn.functional as F

from _common import (ALL, BOOL, BF16, F16, F32, F64, FLOATS, HALF, I32, I64,
                     INTS, SG, Suite, half_ref, lit, rand)

S = Suite("pointwise")

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
    "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal, "square": torch.square, "sin": torch.sin,
    "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "erf": torch.erf,
    "sign": torch.sign, "floor": torch.floor, "detach": torch.detach,
}
# Ops whose result keeps an integer dtype, and ops that also take integers
# (giving f32); gelu and silu take floats only.
INT_SAME = {"neg", "abs", "square", "relu", "sign", "floor", "detach"}
INT_TO_FLOAT = {"exp", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "sin",
                "cos", "tanh", "sigmoid", "erf"}
POSITIVE = {"log", "log1p", "sqrt", "rsqrt"}
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, float("inf"), float("-inf"),
           float("nan"), 1e-3, 20.0, -20.0]


def unary_ref(name, x, fn):
    if x.dtype in HALF:
        return half_ref(fn, x)
    if x.dtype in INTS and name in INT_TO_FLOAT:
        return fn(x.float())
    return fn(x)


def unary_cases():
    for name, fn in UNARY.items():
        for dt in FLOATS:
            for shape in ([2, 3], [4], []):
                lo = 0.01 if name in POSITIVE else -4.0
                x = rand(shape, dt, lo, 4.0)
                S.case("%s %s%s" % (name, SG[dt], shape), "%%r = %s(%%x)" % name,
                       {"x": x}, {"r": unary_ref(name, x, fn)})
        x = torch.tensor(SPECIAL, dtype=F32)
        S.case("%s f32 special values" % name, "%%r = %s(%%x)" % name,
               {"x": x}, {"r": fn(x)})
        S.case("%s f32 empty" % name, "%%r = %s(%%x)" % name,
               {"x": torch.zeros(0, 3)}, {"r": fn(torch.zeros(0, 3))})
        if name in INT_SAME or name in INT_TO_FLOAT:
            for dt in INTS:
                lo = 1 if name in POSITIVE else -5
                x = rand([3, 4], dt, lo, 5)
                S.case("%s %s" % (name, SG[dt]), "%%r = %s(%%x)" % name,
                       {"x": x}, {"r": unary_ref(name, x, fn)})
    x = rand([3, 5], F32, -4, 4)
    for dt in FLOATS:
        xd = x.to(dt)
        fn = lambda t: F.gelu(t, approximate="tanh")
        S.case("gelu tanh %s" % SG[dt], '%r = gelu(%x, approximate="tanh")',
               {"x": xd}, {"r": half_ref(fn, xd) if dt in HALF else fn(xd)})
        S.case("gelu none %s" % SG[dt], '%r = gelu(%x, approximate="none")',
               {"x": xd}, {"r": half_ref(F.gelu, xd) if dt in HALF else F.gelu(xd)})


# Python operators, so that a scalar may stand on either side.
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b, "maximum": torch.maximum,
    "minimum": torch.minimum, "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}


def binary_ref(name, fn, a, b):
    """PyTorch's result; halves computed in f32 (comparisons directly, as
    their operands are converted to the compute dtype, not widened)."""
    tensors = [t for t in (a, b) if isinstance(t, torch.Tensor)]
    if name in ("maximum", "minimum") and len(tensors) == 1:
        # these take no Python scalar: wrap it without changing the
        # result dtype PyTorch's promotion gives the scalar form
        rt = torch.result_type(a, b)
        wrap = lambda v: v if isinstance(v, torch.Tensor) else torch.tensor(
            v, dtype=F64 if isinstance(v, float) else I64)
        return binary_ref(name, lambda x, y: fn(x, y).to(rt), wrap(a), wrap(b))
    if name not in COMPARE and any(t.dtype in HALF for t in tensors):
        return half_ref(fn, a, b)
    try:
        return fn(a, b)
    except RuntimeError:
        return half_ref(fn, a, b)


def operand_text(name, v):
    return "%" + name if isinstance(v, torch.Tensor) else lit(v)


def binary_case(name, a, b, label):
    fn = BINARY[name]
    inputs = {}
    if isinstance(a, torch.Tensor):
        inputs["a"] = a
    if isinstance(b, torch.Tensor):
        inputs["b"] = b
    body = "%%r = %s(%s, %s)" % (name, operand_text("a", a), operand_text("b", b))
    try:
        ref = binary_ref(name, fn, a, b)
    except RuntimeError:
        return  # PyTorch does not define it (bool - bool...)
    S.case("%s %s" % (name, label), body, inputs, {"r": ref})


def binary_data(name, dt, shape):
    if name == "pow" and dt in INTS:
        return rand(shape, dt, -3, 3), rand(shape, dt, 0, 4)
    if name == "pow" and dt in FLOATS:
        return rand(shape, dt, 0.1, 3), rand(shape, dt, -2, 2)
    if name == "div" and dt in INTS:
        return rand(shape, dt, -9, 9), rand(shape, dt, 1, 5)
    return rand(shape, dt), rand(shape, dt)


def binary_cases():
    for name in BINARY:
        for dt in ALL:
            if dt == BOOL and name not in COMPARE and name not in ("maximum", "minimum", "mul", "add"):
                continue
            a, b = binary_data(name, dt, [3, 4])
            if dt in FLOATS and name in COMPARE:
                b[0] = a[0]  # some equal elements
            binary_case(name, a, b, SG[dt])
        a, b = binary_data(name, F32, [2, 1, 3])
        b2 = binary_data(name, F32, [4, 1])[1]
        binary_case(name, a, b2, "broadcast [2,1,3] [4,1]")
        binary_case(name, a, b[0, 0, 0].clone().reshape([]), "broadcast scalar tensor")
        binary_case(name, torch.zeros(0, 3), torch.ones(3), "empty")
        # mixed dtypes: promotion as PyTorch
        for da, db in ((F32, I64), (BF16, F32), (F16, BF16), (I32, I64),
                       (I64, F64), (BF16, I32), (BOOL, I32), (F16, F64)):
            if name == "pow" and (da == BOOL or db == BOOL):
                continue
            a = binary_data(name, da, [3, 2])[0]
            b = binary_data(name, db, [2])[1]
            binary_case(name, a, b, "%s %s" % (SG[da], SG[db]))
        # Python scalars
        for dt, s in ((F32, 0.5), (BF16, 0.1), (F16, 3), (I64, 2), (I32, 0.5),
                      (I64, -1.25), (F64, 1e-3), (BOOL, 2)):
            if name == "pow" and dt == BOOL:
                continue
            x = binary_data(name, dt, [2, 3])[0]
            binary_case(name, x, s, "%s, scalar %s" % (SG[dt], s))
            if name != "pow" or dt in FLOATS:
                binary_case(name, s, x, "scalar %s, %s" % (s, SG[dt]))
    # special values and integer corner cases
    sp = torch.tensor([0.0, -0.0, 1.0, float("inf"), float("-inf"), float("nan")])
    for name in BINARY:
        a = sp.repeat_interleave(6)
        b = sp.repeat(6)
        binary_case(name, a, b, "f32 special values")
    big = torch.tensor([2 ** 31 - 1, -2 ** 31, 123456789], dtype=I32)
    for name in ("add", "sub", "mul"):
        binary_case(name, big, torch.tensor([7, 3, 99], dtype=I32), "i32 wrap-around")
    binary_case("pow", torch.tensor([2, -1, 3, 1, -1], dtype=I64),
                torch.tensor([-1, -3, 0, -2, 2], dtype=I64), "i64 negative exponents")
    binary_case("div", torch.tensor([7, -7, 1, 0], dtype=I64),
                torch.tensor([2, 2, 0, 0], dtype=I64), "i64 true division by 0")


def zero_dim_cases():
    """A 0-d tensor (or a scalar) of a wider dtype than the op's compute
    dtype is converted to it first, as PyTorch's kernels load every operand
    in the common dtype: a 0-d f32 of a bf16 product rounds to bf16, an i64
    one of an i32 op wraps (PyTorch's own result is the reference)."""
    # (a - b with a = the rounded b: 0 when b is rounded first, as PyTorch
    # does, about 1e-4 when it is not)
    y = torch.tensor(1.0 / 3.0)
    for dt in HALF:
        for b in (y, y.to(F64)):
            a = torch.tensor([1.0, 0.0, -2.0]) * b.to(dt).float()
            a = a.to(dt)
            for name in ("sub", "mul", "maximum"):
                ref = half_ref(BINARY[name], a, b.to(dt))
                S.case("%s %s, 0-d %s" % (name, SG[dt], SG[b.dtype]),
                       "%%r = %s(%%a, %%b)" % name, {"a": a, "b": b}, {"r": ref})
        k = 257 if dt == BF16 else 2049  # rounds to 256 and 2048
        a, b = torch.tensor([k - 1, 0, 5], dtype=dt), torch.tensor(k, dtype=I64)
        S.case("sub %s, 0-d i64 %d" % (SG[dt], k), "%r = sub(%a, %b)", {"a": a, "b": b},
               {"r": half_ref(torch.sub, a, b.to(dt))})
    a = torch.tensor([2049, 70000, 257], dtype=I32)
    e = torch.tensor(2 ** 32 + 1, dtype=I64)
    for name in ("maximum", "minimum", "pow", "eq", "lt"):
        S.case("%s i32, 0-d i64 beyond i32" % name, "%%r = %s(%%a, %%e)" % name,
               {"a": a, "e": e}, {"r": BINARY[name](a, e)})
    big = torch.tensor(-3000000000, dtype=I64)
    S.case("minimum i32, literal beyond i32", "%r = minimum(%a, -3000000000)",
           {"a": a}, {"r": torch.minimum(a, big)})
    S.case("lt i32, literal beyond i32", "%r = lt(%a, 3000000000)", {"a": a},
           {"r": torch.lt(a, 3000000000)})
    b = torch.tensor([-1000.0, 3.0], dtype=BF16)
    i = torch.tensor([1001, 70001], dtype=I32)  # 1000 and 70144 in bf16
    S.case("add i32, bf16", "%r = add(%i, %b)", {"i": i, "b": b},
           {"r": half_ref(torch.add, i.to(BF16), b)})


def where_cases():
    c = rand([3, 4], BOOL)
    for dt in ALL:
        a, b = rand([3, 4], dt), rand([4], dt)
        S.case("where %s" % SG[dt], "%r = where(%c, %a, %b)",
               {"c": c, "a": a, "b": b}, {"r": torch.where(c, a, b)})
    a = rand([2, 1, 4], F32)
    c2 = rand([3, 1], BOOL)
    S.case("where broadcast", "%r = where(%c, %a, -1.5)", {"c": c2, "a": a},
           {"r": torch.where(c2, a, torch.tensor(-1.5))})
    ab = rand([3, 4], BF16)
    S.case("where bf16, scalar", "%r = where(%c, 0.1, %a)", {"c": c, "a": ab},
           {"r": torch.where(c, torch.tensor(0.1, dtype=BF16), ab)})
    ai = rand([3, 4], I64)
    af = rand([3, 4], F32)
    S.case("where i64 and f32 tensors", "%r = where(%c, %a, %b)",
           {"c": c, "a": ai, "b": af}, {"r": torch.where(c, ai.to(F32), af)})


def clamp_cases():
    for dt in FLOATS + INTS:
        x = rand([4, 5], dt, -6, 6)
        for attrs, kw in (("min=-1", dict(min=-1)), ("max=2", dict(max=2)),
                          ("min=-2, max=3", dict(min=-2, max=3)),
                          ("min=3, max=1", dict(min=3, max=1))):
            ref = half_ref(lambda t: torch.clamp(t, **kw), x) if dt in HALF else torch.clamp(x, **kw)
            S.case("clamp %s %s" % (SG[dt], attrs), "%%r = clamp(%%x, %s)" % attrs,
                   {"x": x}, {"r": ref})
    x = torch.tensor([float("nan"), -5.0, 0.25, 7.0])
    S.case("clamp f32 nan and float bounds", "%r = clamp(%x, min=-0.5, max=0.75)",
           {"x": x}, {"r": torch.clamp(x, min=-0.5, max=0.75)})
    xi = rand([6], I64, -5, 5)
    S.case("clamp i64 float bound", "%r = clamp(%x, min=0.5)", {"x": xi},
           {"r": torch.clamp(xi, min=0.5)})


def cast_cases():
    vals = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.7, -0.7, 100.0,
                         -129.0, 65504.0, 1e5, 3e38, 1.00390625, 1.0009765625,
                         float("inf"), float("-inf"), float("nan")], dtype=F64)
    for src in ALL:
        if src in FLOATS:
            x = vals.to(src)
            safe = x[:12] if src != F16 else x[:11]
        elif src == BOOL:
            x = safe = torch.tensor([True, False, True])
        else:
            x = safe = torch.tensor([0, 1, -1, 127, -128, 255, 2 ** 31 - 1, -2 ** 31, 16777217], dtype=src)
        for dst in ALL:
            # float -> integer out of range is undefined in PyTorch: only
            # values in range (and NaN -> i64 minimum, as x86) are compared
            if src in FLOATS and dst in INTS + [I32]:
                x_ = safe
            else:
                x_ = x
            S.case("cast %s -> %s" % (SG[src], SG[dst]), "%%r = cast(%%x, dtype=%s)" % SG[dst],
                   {"x": x_}, {"r": x_.to(dst)})
    x = torch.tensor([float("nan"), 3e9, -3e9])
    S.case("cast f32 nan/out of range -> i64", "%r = cast(%x, dtype=i64)",
           {"x": x[:1]}, {"r": x[:1].to(I64)})


unary_cases()
binary_cases()
zero_dim_cases()
where_cases()
clamp_cases()
cast_cases()
S.finish()
