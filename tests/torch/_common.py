"""_common.py - shared helpers of the PyTorch comparison tests.

Each test script builds small .sg programs, writes their inputs with
stio.py, runs `sgc run PROG --inputs IN --out OUT` (sgc's path is argv[1])
and compares every tensor of OUT with what PyTorch computes from the same
inputs.  It prints one line per case and a final "N passed, M failed" line,
and exits non-zero when anything failed.

Tolerances by dtype: integers and bool exactly; f64 rtol 1e-9; f32 rtol
1e-5 (atol 1e-6); f16 and bf16 one unit in the last place of the larger of
the two values (plus atol 1e-5).  For f16 and bf16 the reference is the
PyTorch op computed in f32 on the same (exactly widened) inputs and rounded
to the dtype: the GPU's and sgc's semantics (accumulate in f32, round
once).  NaN must match NaN and infinities must match exactly.
"""
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))

import stio  # noqa: E402
import torch  # noqa: E402

F64, F32, F16, BF16 = torch.float64, torch.float32, torch.float16, torch.bfloat16
I64, I32, BOOL = torch.int64, torch.int32, torch.bool
FLOATS = [F32, F64, F16, BF16]
INTS = [I64, I32]
ALL = FLOATS + INTS + [BOOL]
HALF = (F16, BF16)

SG = {F64: "f64", F32: "f32", F16: "f16", BF16: "bf16", I64: "i64",
      I32: "i32", BOOL: "bool"}


def sgtype(t):
    """The .sg type of a tensor: f32[2, 3]."""
    return "%s[%s]" % (SG[t.dtype], ", ".join(str(d) for d in t.shape))


def lit(x):
    """A Python scalar as a .sg literal."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def ints(xs):
    return "[" + ", ".join(str(x) for x in xs) + "]"


def rand(shape, dtype, lo=-3.0, hi=3.0, gen=None):
    """Random test data of a dtype: uniform floats (rounded to the dtype),
    integers in [lo, hi], or random bools."""
    gen = gen or GEN
    if dtype == BOOL:
        return torch.rand(shape, generator=gen) < 0.5
    if dtype in INTS:
        return torch.randint(int(lo), int(hi) + 1, shape, generator=gen).to(dtype)
    x = torch.rand(shape, generator=gen, dtype=F64) * (hi - lo) + lo
    return x.to(dtype)


GEN = torch.Generator().manual_seed(1234)


def widen(x):
    """f16/bf16 tensors as f32 (exact), anything else unchanged."""
    if isinstance(x, torch.Tensor) and x.dtype in HALF:
        return x.float()
    return x


def half_ref(fn, *args, out_dtype=None):
    """fn computed in f32 on widened half operands, rounded to out_dtype
    (default: the dtype fn gives on the original operands, found by running
    it, or the first tensor operand's)."""
    if out_dtype is None:
        try:
            out_dtype = fn(*args).dtype
        except RuntimeError:
            out_dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
    r = fn(*[widen(a) for a in args])
    return r.to(out_dtype)


def program(inputs, body, rets, params=None, consts=None, decls="", name="g"):
    """A one-graph .sg program: inputs (and params, consts) declared from
    dicts of tensors, then the body's lines, then `return` of rets."""
    lines = ["graph %s {" % name]
    for kind, d in (("input", inputs), ("param", params), ("const", consts)):
        for n, t in (d or {}).items():
            lines.append("  %s %%%s : %s" % (kind, n, sgtype(t)))
    for l in decls.strip().splitlines():
        lines.append("  " + l.strip())
    for l in body.strip().splitlines():
        lines.append("  " + l.strip())
    if rets:
        lines.append("  return " + ", ".join("%" + r for r in rets))
    lines.append("}")
    return "\n".join(lines) + "\n"


def tolerance(dtype):
    """(rtol, atol, ulp_rel) for a dtype."""
    return {F64: (1e-9, 1e-12, 0), F32: (1e-5, 1e-6, 0),
            F16: (0, 1e-5, 2.0 ** -10), BF16: (0, 1e-5, 2.0 ** -7)}[dtype]


def compare(got, exp, atol=None, rtol=None):
    """None when got matches exp (dtype, shape, values), else why not."""
    if got.dtype != exp.dtype:
        return "dtype %s, expected %s" % (got.dtype, exp.dtype)
    if tuple(got.shape) != tuple(exp.shape):
        return "shape %s, expected %s" % (list(got.shape), list(exp.shape))
    if exp.dtype not in FLOATS:
        if torch.equal(got, exp):
            return None
        bad = (got != exp).nonzero()[0].tolist()
        return "differs at %s: %s vs expected %s" % (
            bad, got[tuple(bad)].item(), exp[tuple(bad)].item())
    g, e = got.double(), exp.double()
    if not torch.equal(torch.isnan(g), torch.isnan(e)):
        return "NaN positions differ: got %s expected %s" % (g.flatten()[:8].tolist(), e.flatten()[:8].tolist())
    inf = torch.isinf(e) | torch.isinf(g)
    if not torch.equal(g[inf], e[inf]):
        return "infinities differ"
    fin = torch.isfinite(e) & torch.isfinite(g)
    g, e = g[fin], e[fin]
    r, a, u = tolerance(exp.dtype)
    r = rtol if rtol is not None else r
    a = atol if atol is not None else a
    tol = a + r * e.abs() + u * torch.maximum(g.abs(), e.abs())
    err = (g - e).abs()
    if bool((err <= tol).all()):
        return None
    k = int(torch.argmax(err - tol))
    return "max error %.3g at flat %d: %r vs expected %r (tol %.3g)" % (
        float(err[k]), k, float(g[k]), float(e[k]), float(tol[k]))


class Suite:
    """Counts cases, runs sgc, prints the summary."""

    def __init__(self, title):
        if len(sys.argv) < 2:
            sys.exit("usage: %s PATH/TO/sgc" % sys.argv[0])
        self.sgc = sys.argv[1]
        self.title = title
        self.passed = self.failed = 0
        self.tmp = tempfile.TemporaryDirectory(prefix="sgc-torch-")
        self.n = 0

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def report(self, label, why):
        if why is None:
            self.passed += 1
            print("PASS %s" % label)
        else:
            self.failed += 1
            print("FAIL %s: %s" % (label, why))
        sys.stdout.flush()

    def run(self, src, inputs=None, params=None, args=(), raw_inputs=None):
        """Runs `sgc run` on src; returns (exit status, --out tensors or
        None, stderr, stdout)."""
        self.n += 1
        sg = self.path("p%d.sg" % self.n)
        with open(sg, "w") as f:
            f.write(src)
        cmd = [self.sgc, "run", sg]
        if inputs is not None or raw_inputs is not None:
            p = self.path("in%d.safetensors" % self.n)
            if raw_inputs is not None:
                with open(p, "wb") as f:
                    f.write(raw_inputs)
            else:
                stio.save(p, inputs)
            cmd += ["--inputs", p]
        if params is not None:
            p = self.path("par%d.safetensors" % self.n)
            stio.save(p, params)
            cmd += ["--params", p]
        out = self.path("out%d.safetensors" % self.n)
        if "--no-out" not in args:
            cmd += ["--out", out]
        cmd += [a for a in args if a != "--no-out"]
        try:
            pr = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return -1, None, "timed out", ""
        res = None
        if pr.returncode == 0 and os.path.exists(out):
            res = stio.load(out)
            os.unlink(out)
        return pr.returncode, res, pr.stderr, pr.stdout

    def case(self, label, body, inputs, expected, params=None, consts=None,
             decls="", args=(), atol=None, rtol=None, run_params=None):
        """Runs a program over inputs and checks every expected tensor (a
        dict name -> tensor) in --out."""
        src = program(inputs, body, list(expected), params=params,
                      consts=consts, decls=decls)
        allp = dict(params or {})
        allp.update(consts or {})
        rc, out, err, _ = self.run(src, inputs, allp if (params or consts) else run_params, args)
        if rc != 0 or out is None:
            self.report(label, "sgc run exited %d: %s\n--- program:\n%s" %
                        (rc, err.strip()[:2000], src))
            return None
        for n, e in expected.items():
            if n not in out:
                self.report(label, "'%s' missing from --out" % n)
                return out
            why = compare(out[n], e, atol=atol, rtol=rtol)
            if why:
                self.report(label, "%s: %s\n--- program:\n%s" % (n, why, src))
                return out
        self.report(label, None)
        return out

    def expect_error(self, label, src, status, needle, inputs=None,
                     params=None, args=(), raw_inputs=None):
        """Checks that sgc run fails with the given exit status and a
        message containing needle."""
        rc, out, err, _ = self.run(src, inputs, params, args, raw_inputs)
        if rc != status:
            self.report(label, "exit %d, expected %d: %s" % (rc, status, err.strip()[:500]))
        elif needle not in err:
            self.report(label, "message lacks %r: %s" % (needle, err.strip()[:500]))
        else:
            self.report(label, None)

    def finish(self):
        print("%s: %d passed, %d failed" % (self.title, self.passed, self.failed))
        sys.exit(1 if self.failed else 0)


# -- dropout's masks, independently of sgc (dropout.py, test_fx2sg.py)

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox(ctr, key):
    """Philox4x32-10 of a counter (4 words) and key (2 words), written
    from the paper (dropout.py checks it against Random123's answers)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & MASK, (p0 >> 32) ^ c3 ^ k1, p0 & MASK)
    return (c0, c1, c2, c3)


def philox_words(n, salt, seed, offset):
    """The first n 32-bit words of a random op's Philox blocks, as
    runtime/sgk/sgk_random.h lays out the counter (rand's element i is
    word i; a dropout's takes half of word i / 2)."""
    words = []
    for q in range((n + 3) // 4):
        words += philox((q & MASK, q >> 32, salt, offset & MASK), (seed & MASK, seed >> 32))
    return words[:n]


def dropout_keep(n, p, salt, seed, offset):
    """Which of n elements sgc's dropout keeps (a bool tensor): element i
    draws 16 bits, half i % 2 (low for even i) of word i % 8 / 2 of block
    i / 8, and is kept when they reach floor(p * 2^16)."""
    thresh = 1 << 16 if p >= 1 else int(math.floor(p * 2.0 ** 16))
    words = philox_words((n + 1) // 2, salt, seed, offset)
    halves = [(words[i // 2] >> (16 * (i % 2))) & 0xffff for i in range(n)]
    return torch.tensor([h >= thresh for h in halves], dtype=torch.bool)
