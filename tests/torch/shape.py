"""shape.py - `sgc run` against PyTorch: shape ops (reshape transpose
permute expand slice cat chunk split squeeze unsqueeze contiguous), creation
(zeros ones full arange), indexing (embedding gather) and memory copies
(to_host to_device)."""
import torch
import torch.nn.functional as F

from _common import (ALL, BOOL, BF16, F16, F32, F64, FLOATS, I32, I64, INTS,
                     SG, Suite, ints, lit, program, rand)

S = Suite("shape")


def one(label, body, x, ref):
    S.case(label, body, {"x": x}, {"r": ref})


def view_cases():
    for dt in ALL:
        x = rand([2, 3, 4], dt)
        t = SG[dt]
        one("reshape %s" % t, "%r = reshape(%x, shape=[4, 6])", x, x.reshape(4, 6))
        one("reshape %s to 1-D" % t, "%r = reshape(%x, shape=[24])", x, x.reshape(24))
        one("transpose %s 0 2" % t, "%r = transpose(%x, dim0=0, dim1=2)", x, x.transpose(0, 2))
        one("transpose %s -1 -2" % t, "%r = transpose(%x, dim0=-1, dim1=-2)", x, x.transpose(-1, -2))
        one("permute %s" % t, "%r = permute(%x, dims=[1, 2, 0])", x, x.permute(1, 2, 0))
        one("permute %s negative" % t, "%r = permute(%x, dims=[-1, 0, -2])", x, x.permute(-1, 0, -2))
        one("slice %s" % t, "%r = slice(%x, dim=2, start=1, end=3)", x, x[:, :, 1:3])
        one("slice %s contiguous" % t, "%r = contiguous(%x)", x, x.contiguous())
    x = rand([2, 3, 4], F32)
    one("slice default start/end", "%r = slice(%x, dim=1)", x, x[:, 0:])
    one("slice negative start", "%r = slice(%x, dim=-1, start=-3)", x, x[..., -3:])
    one("slice negative end", "%r = slice(%x, dim=0, start=0, end=-1)", x, x[:-1])
    one("slice end past size", "%r = slice(%x, dim=1, start=1, end=100)", x, x[:, 1:100])
    one("slice empty", "%r = slice(%x, dim=1, start=2, end=2)", x, x[:, 2:2])
    one("reshape with -1", "%r = reshape(%x, shape=[-1, 4])", x, x.reshape(-1, 4))
    one("reshape to scalar", "%r = reshape(%x, shape=[])", torch.tensor([5.0]),
        torch.tensor([5.0]).reshape([]))
    y = rand([3, 1, 4], I32)
    S.case("expand", "%r = expand(%x, shape=[2, 3, 5, 4])", {"x": y},
           {"r": y.expand(2, 3, 5, 4)})
    S.case("expand with -1", "%r = expand(%x, shape=[3, 2, 4])", {"x": y},
           {"r": y.expand(3, 2, 4)})
    S.case("squeeze dim of 1", "%r = squeeze(%x, dim=1)", {"x": y}, {"r": y.squeeze(1)})
    S.case("squeeze dim not 1 is a no-op", "%r = squeeze(%x, dim=0)", {"x": y},
           {"r": y.squeeze(0)})
    S.case("squeeze negative dim", "%r = squeeze(%x, dim=-2)", {"x": y}, {"r": y.squeeze(-2)})
    for d in (0, 2, -1, 3):
        S.case("unsqueeze dim=%d" % d, "%%r = unsqueeze(%%x, dim=%d)" % d, {"x": y},
               {"r": y.unsqueeze(d)})
    z = rand([0, 3], BF16)
    one("transpose empty", "%r = transpose(%x, dim0=0, dim1=1)", z, z.t())


def cat_split_cases():
    for dt in ALL:
        a, b, c = rand([2, 3], dt), rand([4, 3], dt), rand([1, 3], dt)
        S.case("cat %s dim 0" % SG[dt], "%r = cat(%a, %b, %c)", {"a": a, "b": b, "c": c},
               {"r": torch.cat([a, b, c])})
    a, b = rand([2, 3, 2], F32), rand([2, 3, 5], F32)
    S.case("cat dim=-1", "%r = cat(%a, %b, dim=-1)", {"a": a, "b": b},
           {"r": torch.cat([a, b], -1)})
    a, b = rand([2, 1, 2], F32), rand([2, 4, 2], F32)
    S.case("cat dim=1", "%r = cat(%a, %b, dim=1)", {"a": a, "b": b},
           {"r": torch.cat([a, b], 1)})
    S.case("cat one operand", "%r = cat(%a)", {"a": a}, {"r": torch.cat([a])})
    e = torch.zeros(0, 3)
    S.case("cat with empty", "%r = cat(%a, %b)", {"a": e, "b": torch.ones(2, 3)},
           {"r": torch.cat([e, torch.ones(2, 3)])})
    x = rand([5, 4], F32)
    for chunks, dim in ((2, 0), (3, 0), (5, 0), (2, 1), (4, -1), (3, 1)):
        parts = torch.chunk(x, chunks, dim)
        names = ["c%d" % i for i in range(len(parts))]
        S.case("chunk %d dim=%d (%d results)" % (chunks, dim, len(parts)),
               "%s = chunk(%%x, chunks=%d, dim=%d)" % (", ".join("%" + n for n in names), chunks, dim),
               {"x": x}, dict(zip(names, parts)))
    for sizes, dim in (([2, 3], 0), ([1, 1, 2], 1), ([4], 1), ([0, 5], 0)):
        parts = torch.split(x, sizes, dim)
        names = ["s%d" % i for i in range(len(parts))]
        S.case("split %s dim=%d" % (sizes, dim),
               "%s = split(%%x, sizes=%s, dim=%d)" % (", ".join("%" + n for n in names), ints(sizes), dim),
               {"x": x}, dict(zip(names, parts)))
    # an integer is PyTorch's split size: pieces of it, the last smaller
    for size, dim in ((2, 0), (3, 1), (4, 1), (7, 0)):
        parts = torch.split(x, size, dim)
        names = ["s%d" % i for i in range(len(parts))]
        S.case("split size %d dim=%d (%d results)" % (size, dim, len(parts)),
               "%s = split(%%x, sizes=%d, dim=%d)" % (", ".join("%" + n for n in names), size, dim),
               {"x": x}, dict(zip(names, parts)))
    # cat skips a 1-D empty operand whatever the others' rank (PyTorch's
    # legacy rule)
    e = torch.zeros(0)
    for dim in (0, 1):
        S.case("cat a 1-D empty operand dim=%d" % dim, "%%r = cat(%%e, %%x, %%e, dim=%d)" % dim,
               {"e": e, "x": x}, {"r": torch.cat([e, x, e], dim)})


def creation_cases():
    for dt in ALL:
        t = SG[dt]
        S.case("zeros %s" % t, "%%r = zeros(shape=[2, 3], dtype=%s)" % t, {},
               {"r": torch.zeros(2, 3, dtype=dt)})
        S.case("ones %s" % t, "%%r = ones(shape=[4], dtype=%s)" % t, {},
               {"r": torch.ones(4, dtype=dt)})
    S.case("zeros default f32", "%r = zeros(shape=[3, 1])", {}, {"r": torch.zeros(3, 1)})
    S.case("ones scalar", "%r = ones(shape=[])", {}, {"r": torch.ones([])})
    for dt, v in ((F32, 2.5), (BF16, 0.1), (F16, -3), (I64, 7), (I32, -2), (BOOL, True),
                  (F64, 1e-300), (F32, float("-inf")), (F32, float("nan"))):
        S.case("full %s %s" % (SG[dt], v), "%%r = full(shape=[2, 2], value=%s, dtype=%s)" % (lit(v), SG[dt]),
               {}, {"r": torch.full((2, 2), v, dtype=dt)})
    S.case("full default dtype", "%r = full(shape=[3], value=1.5)", {},
           {"r": torch.full((3,), 1.5)})
    S.case("arange default i64", "%r = arange(end=6)", {}, {"r": torch.arange(6)})
    for dt in (F32, BF16, I32, F64):
        S.case("arange %s" % SG[dt], "%%r = arange(end=5, dtype=%s)" % SG[dt], {},
               {"r": torch.arange(5, dtype=dt)})
    S.case("arange empty", "%r = arange(end=0)", {}, {"r": torch.arange(0)})


def index_cases():
    for dt in (F32, BF16, F64, I64):
        tab = rand([10, 4], dt)
        for ishape in ([3], [2, 5], []):
            idx = torch.randint(0, 10, ishape)
            S.case("embedding %s idx %s" % (SG[dt], ishape), "%r = embedding(%i, %t)",
                   {"i": idx, "t": tab}, {"r": F.embedding(idx, tab)})
    tab = rand([6, 3], F32)
    idx = torch.tensor([0, 5, 2], dtype=I32)
    S.case("embedding i32 indices", "%r = embedding(%i, %t)", {"i": idx, "t": tab},
           {"r": F.embedding(idx.long(), tab)})
    S.expect_error("embedding index out of range",
                   program({"i": torch.tensor([1, 6]), "t": tab}, "%r = embedding(%i, %t)", ["r"]),
                   1, "out of range", inputs={"i": torch.tensor([1, 6]), "t": tab})
    for dt in (F32, I64, BF16):
        x = rand([3, 4, 5], dt)
        for dim in (0, 1, 2, -1):
            size = x.shape[dim]
            ishape = [2, 3, 4]
            idx = torch.randint(0, size, ishape)
            S.case("gather %s dim=%d" % (SG[dt], dim), "%%r = gather(%%x, %%i, dim=%d)" % dim,
                   {"x": x, "i": idx}, {"r": torch.gather(x, dim, idx)})
    x = rand([4, 3], F32)
    S.expect_error("gather index out of range",
                   program({"x": x, "i": torch.tensor([[0], [3]])}, "%r = gather(%x, %i, dim=1)", ["r"]),
                   1, "out of bounds", inputs={"x": x, "i": torch.tensor([[0], [3]])})


def memory_cases():
    for dt in (F32, BF16, I64, BOOL):
        x = rand([3, 2], dt)
        one("to_host %s" % SG[dt], "%r = to_host(%x)", x, x.clone())
        S.case("to_host then to_device %s" % SG[dt], "%h = to_host(%x)\n%r = to_device(%h)",
               {"x": x}, {"r": x.clone()})


view_cases()
cat_split_cases()
creation_cases()
index_cases()
memory_cases()
S.finish()
