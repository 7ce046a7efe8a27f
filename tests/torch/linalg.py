"""linalg.py - `sgc run` against PyTorch: matmul (2-D, 1-D, batched with
broadcasting), linear (with and without bias) and
scaled_dot_product_attention (computed here from its definition, which this
PyTorch lacks: softmax(q k^T * scale + causal mask) v)."""
import math

import torch
import torch.nn.functional as F

from _common import (BF16, F16, F32, F64, FLOATS, HALF, SG, Suite,
                     half_ref, lit, rand)

S = Suite("linalg")

# f32 products of k terms: the two BLAS libraries sum in different orders
ATOL = {F32: 1e-5, F64: 1e-12, F16: 1e-3, BF16: 1e-2}

SHAPES = [
    ([3, 4], [4, 5]), ([4], [4]), ([4], [4, 3]), ([3, 4], [4]),
    ([2, 3, 4], [2, 4, 5]), ([2, 3, 4], [4, 5]), ([4], [2, 4, 3]),
    ([2, 1, 3, 4], [5, 4, 2]), ([1, 3, 4], [6, 4, 2]), ([3, 0], [0, 2]),
    ([0, 4], [4, 2]), ([2, 3, 4], [4]),
]


def matmul_cases():
    # integer products are rejected by sgc's shape rule (cuBLAS has none)
    for dt in FLOATS:
        for sa, sb in SHAPES:
            a, b = rand(sa, dt), rand(sb, dt)
            ref = half_ref(torch.matmul, a, b) if dt in HALF else torch.matmul(a, b)
            S.case("matmul %s %s x %s" % (SG[dt], sa, sb), "%r = matmul(%a, %b)",
                   {"a": a, "b": b}, {"r": ref}, atol=ATOL.get(dt))
    a, b = rand([64, 96], F32), rand([96, 48], F32)
    S.case("matmul f32 64x96x48", "%r = matmul(%a, %b)", {"a": a, "b": b},
           {"r": a @ b}, atol=1e-4)


def linear_cases():
    for dt in FLOATS:
        for sx in ([3, 4], [4], [2, 3, 4]):
            x, w, b = rand(sx, dt), rand([5, 4], dt), rand([5], dt)
            f = lambda x_, w_, b_=None: F.linear(x_, w_, b_)
            S.case("linear %s %s bias" % (SG[dt], sx), "%r = linear(%x, %w, %b)",
                   {"x": x, "w": w, "b": b},
                   {"r": half_ref(f, x, w, b) if dt in HALF else f(x, w, b)},
                   atol=ATOL[dt])
            S.case("linear %s %s" % (SG[dt], sx), "%r = linear(%x, %w)",
                   {"x": x, "w": w},
                   {"r": half_ref(f, x, w) if dt in HALF else f(x, w)}, atol=ATOL[dt])


def sdpa(q, k, v, causal=False, scale=None):
    """The math definition, in the operands' dtype (f32 for halves)."""
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    att = q @ k.transpose(-2, -1) * s
    if causal:
        tq, tk = q.shape[-2], k.shape[-2]
        mask = torch.ones(tq, tk, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
    return torch.softmax(att, dim=-1) @ v


def sdpa_cases():
    for dt in FLOATS:
        for (sq, sk, sv) in (([2, 3, 5, 8], [2, 3, 5, 8], [2, 3, 5, 8]),
                             ([4, 6], [7, 6], [7, 3]),
                             ([2, 1, 4, 8], [3, 6, 8], [3, 6, 8])):
            q, k, v = rand(sq, dt, -1, 1), rand(sk, dt, -1, 1), rand(sv, dt, -1, 1)
            for causal in (False, True):
                for scale in (None, 0.3):
                    f = lambda a, b, c: sdpa(a, b, c, causal, scale)
                    attrs = ", causal=true" if causal else ""
                    if scale is not None:
                        attrs += ", scale=%s" % lit(scale)
                    S.case("sdpa %s %s %s causal=%s scale=%s" % (SG[dt], sq, sk, causal, scale),
                           "%%r = scaled_dot_product_attention(%%q, %%k, %%v%s)" % attrs,
                           {"q": q, "k": k, "v": v},
                           {"r": half_ref(f, q, k, v) if dt in HALF else f(q, k, v)},
                           atol=ATOL[dt])


matmul_cases()
linear_cases()
sdpa_cases()
S.finish()
