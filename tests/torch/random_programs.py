"""random_programs.py - random compositions of ops, checked against
PyTorch's autograd on `sgc run` (the CPU interpreter) in f64.

test_grad_ops.py checks each op's derivative alone; the fuzzers hold -O0
and -O2 to each other but not to PyTorch.  This script builds programs
that chain ops: pointwise ops with broadcasting and scalar operands,
reductions (ties in amax and amin included: relu and clamp make them),
norms, softmax, products, attention, views (transpose, permute, reshape,
expand, slice, squeeze, chunk, split, cat), gather, embedding, var_mean,
mse_loss.  Each program ends in `%loss = sum(mul(%o, %r))` with a random
%r, then `backward(%loss)`, and returns the loss and a few intermediates.
The same chain runs in PyTorch as it is generated; the returned values and
every `grad.NAME` (zeros for a param off the path, where PyTorch has none)
must agree with PyTorch's to 1e-8 relative, plus 1e-8 of the tensor's
largest magnitude (at least 0.1: a gradient that is zero but for
rounding, as a layer norm's over one element, is compared absolutely).
Programs with in-place ops (every third) hold sgc's functionalisation to
PyTorch's own in-place semantics, views included: a write into a slice,
transpose, reshape or chunk of a value shows in the value and in its
other views.

Usage: random_programs.py PATH/TO/sgc [COUNT [SEED]]
(default 150 programs from seed 1; each program's seed is printed, so a
failure is reproduced with COUNT 1 and that seed).  With
SGC_RANDOM_PROGRAMS_DIR set, each program is also written there as
randomSEED.sg, for the GPU tests (`EXTRA=DIR tests/gpu/run_gpu_tests.sh`).
"""
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
from _common import F64, I64  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def ints(xs):
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def fmt(x):
    return repr(float(x))


class Gen:
    """One random program: .sg lines and the PyTorch tensors beside them."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.tg = torch.Generator().manual_seed(seed)
        self.lines = []
        self.vals = []          # (name, tensor) of float values, in order
        self.params = {}        # name -> leaf tensor (requires grad)
        self.inputs = {}        # name -> tensor
        self.n = 0

    # ------------------------------------------------------------ helpers
    def rand(self, shape, lo=-2.0, hi=2.0):
        return torch.rand(shape, generator=self.tg, dtype=F64) * (hi - lo) + lo

    def fresh(self):
        self.n += 1
        return "v%d" % self.n

    def param(self, shape, lo=-2.0, hi=2.0):
        name = "p%d" % len(self.params)
        self.params[name] = self.rand(shape, lo, hi).requires_grad_(True)
        return name, self.params[name]

    def emit(self, line, t, keep=True):
        """Appends `%NAME = line`; keeps t as a value unless told not to.
        A result that is no view but has its operand's strides (a pointwise
        op of a transpose) is made dense: sgc takes every op's result as
        dense, and PyTorch's reshape copies what it cannot view (its docs
        say not to depend on which), so a write through a reshape of it
        would reach it in sgc and not in PyTorch."""
        if isinstance(t, torch.Tensor) and t._base is None and not t.is_contiguous():
            t = t.contiguous()
        name = self.fresh()
        self.lines.append("%%%s = %s" % (name, line))
        if keep:
            self.vals.append((name, t))
        return name, t

    def pick(self, cond=lambda t: True, recent=True):
        cands = [v for v in self.vals if cond(v[1])]
        if not cands:
            return None
        if recent and self.rng.random() < 0.6:
            return cands[-1] if self.rng.random() < 0.5 else cands[-min(3, len(cands)):][self.rng.randrange(min(3, len(cands)))]
        return self.rng.choice(cands)

    def shape(self, lo_rank=0, hi_rank=3):
        r = self.rng.randint(lo_rank, hi_rank)
        return tuple(self.rng.randint(1, 4) for _ in range(r))

    def positive(self, x):
        """abs(x) + 0.5, for ops defined on positive numbers."""
        n, t = x
        a = self.emit("abs(%%%s)" % n, t.abs(), keep=False)
        return self.emit("add(%%%s, 0.5)" % a[0], a[1] + 0.5, keep=False)

    def tame(self, x):
        """tanh(x) when x has grown large, so that chains stay finite."""
        n, t = x
        if t.numel() and float(t.detach().abs().max()) > 50:
            return self.emit("tanh(%%%s)" % n, torch.tanh(t))
        return x

    def broadcast_partner(self, t):
        """A shape that broadcasts with t's into t's shape."""
        s = list(t.shape)
        drop = self.rng.randint(0, len(s))
        s = s[drop:]
        return tuple(1 if self.rng.random() < 0.3 else d for d in s)

    # ------------------------------------------------------------ ops
    UNARY = [("neg", torch.neg), ("abs", torch.abs), ("tanh", torch.tanh),
             ("sigmoid", torch.sigmoid), ("relu", torch.relu),
             ("gelu", F.gelu), ("silu", F.silu), ("erf", torch.erf),
             ("sin", torch.sin), ("cos", torch.cos), ("square", torch.square),
             ("sign", torch.sign), ("floor", torch.floor)]
    POSITIVE = [("log", torch.log), ("sqrt", torch.sqrt),
                ("rsqrt", torch.rsqrt), ("reciprocal", torch.reciprocal),
                ("log1p", torch.log1p)]

    def op_unary(self):
        x = self.pick()
        r = self.rng.random()
        if r < 0.55:
            op, fn = self.rng.choice(self.UNARY)
            return self.emit("%s(%%%s)" % (op, x[0]), fn(x[1]))
        if r < 0.65:
            return self.emit('gelu(%%%s, approximate="tanh")' % x[0],
                             F.gelu(x[1], approximate="tanh"))
        if r < 0.75:
            t = self.emit("tanh(%%%s)" % x[0], torch.tanh(x[1]), keep=False)
            return self.emit("exp(%%%s)" % t[0], torch.exp(t[1]))
        op, fn = self.rng.choice(self.POSITIVE)
        p = self.positive(x)
        return self.emit("%s(%%%s)" % (op, p[0]), fn(p[1]))

    BINARY = [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
              ("maximum", torch.maximum), ("minimum", torch.minimum)]

    def op_binary(self):
        a = self.pick()
        r = self.rng.random()
        if r < 0.25:
            # a scalar literal on either side
            s = self.rng.choice([0.5, -1.5, 2.0, 3])
            op, fn = self.rng.choice([("add", torch.add), ("sub", torch.sub),
                                      ("mul", torch.mul)])
            if self.rng.random() < 0.5:
                return self.emit("%s(%%%s, %s)" % (op, a[0], s), fn(a[1], s))
            return self.emit("%s(%s, %%%s)" % (op, s, a[0]), fn(torch.tensor(s, dtype=F64), a[1]))
        # the other operand: a value that broadcasts with a, or a fresh param
        want = self.broadcast_partner(a[1])
        b = self.pick(lambda t: self.broadcasts(t.shape, a[1].shape), recent=False)
        if b is None or self.rng.random() < 0.4:
            b = self.param(want)
        if self.rng.random() < 0.5:
            a, b = b, a
        r = self.rng.random()
        if r < 0.15:
            d = self.positive(b)
            return self.emit("div(%%%s, %%%s)" % (a[0], d[0]), a[1] / d[1])
        if r < 0.22:
            p = self.positive(a)
            e = self.rng.choice([2, 3, 0.5, -1.5, 2.5])
            return self.emit("pow(%%%s, %s)" % (p[0], e), torch.pow(p[1], e))
        if r < 0.32:
            c = self.emit("gt(%%%s, %%%s)" % (a[0], b[0]), a[1] > b[1], keep=False)
            other = self.rng.choice(["0.0", None])
            if other is None:
                return self.emit("where(%%%s, %%%s, %%%s)" % (c[0], a[0], b[0]),
                                 torch.where(c[1], a[1], b[1]))
            return self.emit("where(%%%s, %%%s, 0.0)" % (c[0], a[0]),
                             torch.where(c[1], a[1], torch.tensor(0.0, dtype=F64)))
        op, fn = self.rng.choice(self.BINARY)
        return self.emit("%s(%%%s, %%%s)" % (op, a[0], b[0]), fn(a[1], b[1]))

    @staticmethod
    def broadcasts(s, into):
        """Whether shape s broadcasts with into and leaves it unchanged."""
        if len(s) > len(into):
            return False
        for a, b in zip(reversed(s), reversed(into)):
            if a != b and a != 1:
                return False
        return True

    def op_clamp(self):
        x = self.pick()
        lo, hi = self.rng.choice([(-0.5, 0.5), (None, 0.25), (0.0, None), (-1, 1)])
        attrs = []
        if lo is not None:
            attrs.append("min=%s" % lo)
        if hi is not None:
            attrs.append("max=%s" % hi)
        return self.emit("clamp(%%%s, %s)" % (x[0], ", ".join(attrs)),
                         torch.clamp(x[1], min=lo, max=hi))

    def dims_of(self, rank):
        k = self.rng.randint(1, rank)
        dims = sorted(self.rng.sample(range(rank), k))
        return [d - rank if self.rng.random() < 0.3 else d for d in dims]

    def op_reduce(self):
        x = self.pick(lambda t: t.dim() >= 1)
        if x is None:
            return None
        op = self.rng.choice(["sum", "mean", "amax", "amin", "var", "var_mean"])
        keep = self.rng.random() < 0.4
        alld = self.rng.random() < 0.2
        dims = list(range(x[1].dim())) if alld else self.dims_of(x[1].dim())
        attr = "" if alld and not keep else ", dims=%s" % ints(dims)
        if keep:
            attr += ", keepdim=true"
        t = x[1]
        if op in ("amax", "amin") and any(t.shape[d] == 0 for d in dims):
            return None  # PyTorch and sgc reject it
        if op in ("var", "var_mean") and math.prod(t.shape[d] for d in dims) < 2:
            return None  # NaN (reduce.py checks it), whose gradient PyTorch
            # carries even through a path an in-place fill_ cut
        if op == "var_mean":
            v, m = (u.contiguous() for u in torch.var_mean(t, dim=dims, keepdim=keep))
            nv, nm = self.fresh(), self.fresh()
            self.lines.append("%%%s, %%%s = var_mean(%%%s%s)" % (nv, nm, x[0], attr))
            self.vals.append((nv, v))
            self.vals.append((nm, m))
            return nm, m
        fn = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax,
              "amin": torch.amin, "var": torch.var}[op]
        return self.emit("%s(%%%s%s)" % (op, x[0], attr), fn(t, dim=dims, keepdim=keep))

    def op_norm(self):
        x = self.pick(lambda t: t.dim() >= 1)
        if x is None:
            return None
        t = x[1]
        r = self.rng.random()
        if r < 0.35:
            d = self.rng.randrange(-t.dim(), t.dim())
            if self.rng.random() < 0.5:
                return self.emit("softmax(%%%s, dim=%d)" % (x[0], d), torch.softmax(t, d))
            return self.emit("log_softmax(%%%s, dim=%d)" % (x[0], d), torch.log_softmax(t, d))
        c = t.shape[-1]
        w = self.param((c,), 0.5, 1.5)
        if r < 0.7:
            b = self.param((c,))
            return self.emit("layer_norm(%%%s, %%%s, %%%s)" % (x[0], w[0], b[0]),
                             F.layer_norm(t, (c,), w[1], b[1], eps=1e-5))
        tt = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w[1]
        return self.emit("rms_norm(%%%s, %%%s)" % (x[0], w[0]), tt)

    def op_product(self):
        x = self.pick(lambda t: t.dim() >= 1)
        if x is None:
            return None
        t = x[1]
        k = self.rng.randint(1, 4)
        r = self.rng.random()
        if r < 0.4:
            w = self.param((t.shape[-1], k), -1, 1)
            return self.emit("matmul(%%%s, %%%s)" % (x[0], w[0]), torch.matmul(t, w[1]))
        if r < 0.7:
            w = self.param((k, t.shape[-1]), -1, 1)
            if self.rng.random() < 0.5:
                b = self.param((k,))
                return self.emit("linear(%%%s, %%%s, %%%s)" % (x[0], w[0], b[0]),
                                 F.linear(t, w[1], b[1]))
            return self.emit("linear(%%%s, %%%s)" % (x[0], w[0]), F.linear(t, w[1]))
        # a batched product of two values: x @ y^T over matching shapes
        y = self.pick(lambda u: u.dim() >= 2 and t.dim() >= 2 and u.shape[-1] == t.shape[-1]
                      and self.batch_ok(t.shape[:-2], u.shape[:-2]), recent=False)
        if y is None or t.dim() < 2:
            return None
        yt = self.emit("transpose(%%%s, dim0=-1, dim1=-2)" % y[0], y[1].transpose(-1, -2), keep=False)
        return self.emit("matmul(%%%s, %%%s)" % (x[0], yt[0]), torch.matmul(t, yt[1]))

    @staticmethod
    def batch_ok(a, b):
        for x, y in zip(reversed(a), reversed(b)):
            if x != y and x != 1 and y != 1:
                return False
        return True

    def op_attention(self):
        x = self.pick(lambda t: t.dim() in (3, 4) and t.numel() > 0)
        if x is None:
            return None
        t = x[1]
        d = t.shape[-1]
        wq, wk, wv = (self.param((d, d), -1, 1) for _ in range(3))
        q = self.emit("matmul(%%%s, %%%s)" % (x[0], wq[0]), t @ wq[1], keep=False)
        k = self.emit("matmul(%%%s, %%%s)" % (x[0], wk[0]), t @ wk[1], keep=False)
        v = self.emit("matmul(%%%s, %%%s)" % (x[0], wv[0]), t @ wv[1], keep=False)
        causal = self.rng.random() < 0.5
        attrs = ", causal=true" if causal else ""
        scale = None
        if self.rng.random() < 0.3:
            scale = 0.3
            attrs += ", scale=0.3"
        if self.rng.random() < 0.3 and not causal:
            T = t.shape[-2]
            m = torch.rand((T, T), generator=self.tg) < 0.7
            m[:, 0] = True
            mn = "m%d" % len(self.inputs)
            self.inputs[mn] = m
            o = self.sdpa_ref(q[1], k[1], v[1], m, False, scale)
            return self.emit("scaled_dot_product_attention(%%%s, %%%s, %%%s, %%%s%s)"
                             % (q[0], k[0], v[0], mn, attrs), o)
        o = self.sdpa_ref(q[1], k[1], v[1], None, causal, scale)
        return self.emit("scaled_dot_product_attention(%%%s, %%%s, %%%s%s)"
                         % (q[0], k[0], v[0], attrs), o)

    @staticmethod
    def sdpa_ref(q, k, v, mask, causal, scale):
        s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
        T, S = s.shape[-2], s.shape[-1]
        if causal:
            mask = torch.ones(T, S, dtype=torch.bool).tril()
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, -1) @ v

    def op_view(self):
        x = self.pick()
        t = x[1]
        r = self.rng.random()
        rank = t.dim()
        if r < 0.15 and rank >= 2:
            a, b = self.rng.sample(range(rank), 2)
            return self.emit("transpose(%%%s, dim0=%d, dim1=%d)" % (x[0], a, b), t.transpose(a, b))
        if r < 0.25 and rank >= 2:
            p = list(range(rank))
            self.rng.shuffle(p)
            return self.emit("permute(%%%s, dims=%s)" % (x[0], ints(p)), t.permute(p))
        if r < 0.40:
            n = t.numel()
            if n == 0 or self.rng.random() < 0.5:
                shape = [n]
            else:
                f = [d for d in range(1, n + 1) if n % d == 0]
                a = self.rng.choice(f)
                shape = [a, n // a]
            if self.rng.random() < 0.3 and len(shape) > 1:
                shape[0] = -1
            return self.emit("reshape(%%%s, shape=%s)" % (x[0], ints(shape)), t.reshape(shape))
        if r < 0.50 and rank < 4:
            d = self.rng.randint(-rank - 1, rank)
            return self.emit("unsqueeze(%%%s, dim=%d)" % (x[0], d), t.unsqueeze(d))
        if r < 0.58:
            ones = [i for i in range(rank) if t.shape[i] == 1]
            if ones:
                d = self.rng.choice(ones)
                return self.emit("squeeze(%%%s, dim=%d)" % (x[0], d), t.squeeze(d))
            if rank:
                d = self.rng.randrange(rank)
                return self.emit("squeeze(%%%s, dim=%d)" % (x[0], d), t.squeeze(d))
            return None
        if r < 0.68:
            ones = [i for i in range(rank) if t.shape[i] == 1]
            if not ones:
                return None
            shape = list(t.shape)
            for i in ones:
                shape[i] = self.rng.randint(1, 4)
            if self.rng.random() < 0.3:
                shape = [2] + shape
            spec = list(shape)
            for i in range(len(shape) - rank, len(shape)):
                if shape[i] == t.shape[i - (len(shape) - rank)] and self.rng.random() < 0.3:
                    spec[i] = -1
            return self.emit("expand(%%%s, shape=%s)" % (x[0], ints(spec)), t.expand(spec))
        if r < 0.78 and rank >= 1:
            d = self.rng.randrange(rank)
            n = t.shape[d]
            if n == 0:
                return None
            s = self.rng.randint(-n, n - 1)
            e = self.rng.choice([None, self.rng.randint(-n, n + 2)])
            sp, ep = s if s >= 0 else max(0, s + n), n if e is None else (e if e >= 0 else max(0, e + n))
            ep = min(ep, n)
            if ep <= sp:
                return None
            attrs = "dim=%d, start=%d" % (d, s) + ("" if e is None else ", end=%d" % e)
            return self.emit("slice(%%%s, %s)" % (x[0], attrs), t.narrow(d, sp, ep - sp))
        if r < 0.86 and rank >= 1:
            d = self.rng.randrange(rank)
            y = self.pick(lambda u: u.dim() == rank and all(u.shape[i] == t.shape[i] for i in range(rank) if i != d),
                          recent=False)
            return self.emit("cat(%%%s, %%%s, dim=%d)" % (x[0], y[0], d), torch.cat([t, y[1]], d))
        if r < 0.94 and rank >= 1:
            d = self.rng.randrange(rank)
            n = t.shape[d]
            if self.rng.random() < 0.5:
                c = self.rng.randint(1, 3)
                parts = torch.chunk(t, c, d)
                names = [self.fresh() for _ in parts]
                self.lines.append("%s = chunk(%%%s, chunks=%d, dim=%d)" % (
                    ", ".join("%" + m for m in names), x[0], c, d))
            else:
                cut = self.rng.randint(0, n)
                sizes = [cut, n - cut]
                parts = torch.split(t, sizes, d)
                names = [self.fresh() for _ in parts]
                self.lines.append("%s = split(%%%s, sizes=%s, dim=%d)" % (
                    ", ".join("%" + m for m in names), x[0], ints(sizes), d))
            for m, p in zip(names, parts):
                self.vals.append((m, p))
            return names[-1], parts[-1]
        return self.emit("contiguous(%%%s)" % x[0], t.contiguous())

    def op_index(self):
        x = self.pick(lambda t: t.dim() >= 1)
        if x is None:
            return None
        t = x[1]
        if self.rng.random() < 0.5:
            d = self.rng.randrange(t.dim())
            if t.shape[d] == 0:
                return None
            shape = list(t.shape)
            shape[d] = self.rng.randint(1, 4)
            idx = torch.randint(0, t.shape[d], shape, generator=self.tg)
            name = "i%d" % len(self.inputs)
            self.inputs[name] = idx
            return self.emit("gather(%%%s, %%%s, dim=%d)" % (x[0], name, d), torch.gather(t, d, idx))
        n = self.rng.randint(2, 5)
        table = self.param((n, self.rng.randint(1, 4)))
        idx = torch.randint(0, n, tuple(self.rng.randint(1, 3) for _ in range(self.rng.randint(1, 2))),
                            generator=self.tg)
        name = "i%d" % len(self.inputs)
        self.inputs[name] = idx
        return self.emit("embedding(%%%s, %%%s)" % (name, table[0]), F.embedding(idx, table[1]))

    def op_inplace(self):
        """An in-place op on a value or a view of one: PyTorch's own in-place
        semantics (the write shows through every view of that memory) are
        the reference.  What PyTorch rejects at once (a write into a view
        of a param, or into an expand that broadcast; a source sharing the
        destination's memory) is not generated."""
        if self.rng.random() < 0.5:
            self.op_view()  # often through a view made just for it
        x = self.pick(lambda t: t.is_floating_point() and not self.leafy(t))
        if x is None:
            return None
        t = x[1]
        r = self.rng.random()
        try:
            if r < 0.25:
                op = self.rng.choice(["add_", "sub_", "mul_"])
                s = self.rng.choice([0.5, -1.5, 2.0])
                getattr(t, op)(s)
                self.lines.append("%s(%%%s, %s)" % (op, x[0], s))
            elif r < 0.55:
                b = self.pick(lambda u: self.broadcasts(u.shape, t.shape) and u.is_floating_point(),
                              recent=False)
                if b is None or (b[1] is not t and self.storage(b[1]) == self.storage(t)):
                    return None
                op = self.rng.choice(["add_", "sub_", "mul_", "copy_"])
                getattr(t, op)(b[1])
                self.lines.append("%s(%%%s, %%%s)" % (op, x[0], b[0]))
            elif r < 0.7:
                t.zero_()
                self.lines.append("zero_(%%%s)" % x[0])
            else:
                v = self.rng.choice([1.5, -0.25])
                t.fill_(v)
                self.lines.append("fill_(%%%s, value=%s)" % (x[0], v))
        except RuntimeError:
            return None
        return None

    @staticmethod
    def leafy(t):
        """A param, or a view of one (in-place on it is an error)."""
        base = t._base if t._base is not None else t
        return base.requires_grad and base.is_leaf

    @staticmethod
    def storage(t):
        return t.storage().data_ptr()

    def op_mse(self):
        a = self.pick()
        b = self.param(tuple(a[1].shape))
        return self.emit("mse_loss(%%%s, %%%s)" % (a[0], b[0]), F.mse_loss(a[1], b[1]))

    OPS = [("unary", 5), ("binary", 6), ("clamp", 1), ("reduce", 2), ("norm", 2),
           ("product", 3), ("attention", 1), ("view", 5), ("index", 1), ("mse", 0.3),
           ("inplace", 0)]

    def build(self, steps, inplace=0):
        self.param(self.shape(1, 3))
        if self.rng.random() < 0.5:
            self.param(self.shape(0, 3))
        for name, t in list(self.params.items()):
            self.vals.append((name, t))
        names = [o for o, _ in self.OPS]
        weights = [w if o != "inplace" else inplace for o, w in self.OPS]
        for _ in range(steps):
            op = self.rng.choices(names, weights)[0]
            v = getattr(self, "op_" + op)()
            if v is not None and v[1].is_floating_point():
                self.tame(v)
        o = self.vals[-1]
        r = self.rand(tuple(o[1].shape))
        self.inputs["r"] = r
        self.lines.append("%%ow = mul(%%%s, %%r)" % o[0])
        self.lines.append("%loss = sum(%ow)")
        self.lines.append("backward(%loss)")
        loss = (o[1] * r).sum()
        extra = self.rng.sample(self.vals, min(2, len(self.vals)))
        extra = [e for e in extra if e[0] not in self.params]
        rets = ["loss"] + [e[0] for e in extra]
        self.lines.append("return " + ", ".join("%" + n for n in rets))
        expected = {"loss": loss.detach()}
        for n, t in extra:
            expected[n] = t.detach()
        leaves = list(self.params.values())
        gs = torch.autograd.grad(loss, leaves, allow_unused=True)

        for (n, p), g in zip(self.params.items(), gs):
            expected["grad." + n] = torch.zeros_like(p) if g is None else g
        return expected

    def source(self):
        out = ["graph g {"]
        for n, t in self.inputs.items():
            out.append("  input %%%s : %s" % (n, C.sgtype(t)))
        for n, t in self.params.items():
            out.append("  param %%%s : %s" % (n, C.sgtype(t)))
        out += ["  " + l for l in self.lines]
        out.append("}")
        return "\n".join(out) + "\n"


def check(S, seed):
    """Program number seed: every third one with in-place ops; one that
    PyTorch's autograd rejects (a value it saved, or an output of chunk or
    split, changed in place) is drawn again from the next variant of the
    seed."""
    for variant in range(50):
        g = Gen(seed * 64 + variant)
        try:
            expected = g.build(g.rng.randint(3, 14), inplace=4 if seed % 3 == 0 else 0)
        except RuntimeError:
            expected = None  # PyTorch's autograd refuses a view changed in place
        if expected is not None:
            break
    src = g.source()
    keep = os.environ.get("SGC_RANDOM_PROGRAMS_DIR")
    if keep:  # for tests/gpu/run_gpu_tests.sh's EXTRA=DIR
        with open(os.path.join(keep, "random%d.sg" % seed), "w") as f:
            f.write(src)
    params = {n: p.detach() for n, p in g.params.items()}
    rc, out, err, _ = S.run(src, g.inputs, params)
    label = "seed %d" % seed
    if rc != 0 or out is None:
        S.report(label, "sgc run exited %d: %s\n--- program:\n%s" % (rc, err.strip()[:2000], src))
        return
    for n, e in expected.items():
        if n not in out:
            S.report(label, "'%s' missing from --out\n--- program:\n%s" % (n, src))
            return
        scale = float(e.abs().max()) if e.numel() and e.is_floating_point() and \
            bool(torch.isfinite(e).all()) else 1.0
        why = C.compare(out[n], e, atol=1e-8 * max(scale, 0.1), rtol=1e-8)
        if why:
            S.report(label, "%s: %s\n--- program:\n%s" % (n, why, src))
            return
    S.report(label, None)


def main():
    S = C.Suite("random programs")
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    for seed in range(first, first + count):
        check(S, seed)
    S.finish()


if __name__ == "__main__":
    main()
