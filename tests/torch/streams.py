"""streams.py - the stream rules, shown by running programs.

1. Every multi-stream sample (samples/*.sg) and golden test program
   (tests/golden/*.sg that compiles) gives, under `sgc run
   --interleave=SEED` for 20 seeds, exactly the tensors of the run in
   program order: the syncs the user wrote plus the ones the compiler adds
   (rule 3 backward syncs, rule 8 sync_dealloc, rule 0 joins) order every
   read after its write, and no buffer is released while in use (the
   interpreter poisons released buffers and unwritten results).
2. A deliberately wrong schedule: `--test-drop-sync=N` drops the N-th
   compiler-made sync (and skips the race verifier).  The program-order run
   still gives the right result, but some interleaving does not; and the IR
   printed without that sync, compiled again, is rejected by the race
   verifier or (for a sync of the derived backward) gets it back.
3. The memory plan of every sample and program (`sgc check --memory`, at
   -O2 and -O0) passes the independent checker: no two buffers that may be
   live at once share memory; -O0 shares nothing; -O2 needs no more; and
   each graph's peak is the `arena_bytes` the generated code reserves.
4. `--emit=dot` of every sample is a Graphviz graph with one colour per
   stream and dashed sync edges (checked by `dot` itself when installed).

Inputs are random; params are initialised by sgc from --seed.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

import torch

from _common import Suite, stio

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
S = Suite("streams")
SEEDS = range(20)
DT = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
      "bf16": torch.bfloat16, "i64": torch.int64, "i32": torch.int32,
      "bool": torch.bool}
GEN = torch.Generator().manual_seed(7)


def sgc(*args):
    return subprocess.run([S.sgc] + list(args), capture_output=True, text=True,
                          timeout=60)


def extra_args(path):
    """The words of NAME.args beside a golden test, if any."""
    a = path[:-3] + ".args"
    if not os.path.exists(a):
        return []
    with open(a) as f:
        return [w for l in f if not l.startswith("#") for w in l.split()]


def programs():
    """(path, args) of every sample and golden program that compiles."""
    out = []
    files = sorted(glob.glob(os.path.join(ROOT, "samples", "*.sg")))
    files += sorted(glob.glob(os.path.join(ROOT, "tests", "golden", "*.sg")))
    for p in files:
        args = extra_args(p)
        if sgc("check", p, *args).returncode == 0:
            out.append((p, args))
    return out


def graphs(path, args):
    """{graph name: (IR text of it, number of streams, input specs)}."""
    ir = sgc(path, "--emit=ir", "-o", "-", *args).stdout
    dims = {m.group(1): int(m.group(2))
            for m in re.finditer(r"^dim (\w+) = (-?\d+)", ir, re.M)}
    res = {}
    for m in re.finditer(r"^graph (\w+) \{\n(.*?)^\}", ir, re.M | re.S):
        body = m.group(2)
        nstreams = 1 + len(re.findall(r"^  stream ", body, re.M))
        ins = []
        for i in re.finditer(r"^  input %(\S+) : (\w+)\[([^\]]*)\]", body, re.M):
            shape = [dims[d.strip()] if d.strip() in dims else int(d)
                     for d in i.group(3).split(",") if d.strip()]
            ins.append((i.group(1), i.group(2), shape))
        res[m.group(1)] = (body, nstreams, ins)
    return res


def make_inputs(specs):
    t = {}
    for name, dt, shape in specs:
        if dt == "bool":
            t[name] = torch.rand(shape, generator=GEN) < 0.5
        elif dt in ("i64", "i32"):
            t[name] = torch.randint(0, 2, shape, generator=GEN).to(DT[dt])
        else:
            t[name] = (torch.rand(shape, generator=GEN) * 2 - 1).to(DT[dt])
    return t


def run(path, graph, inputs, *args):
    """--out tensors of `sgc run`, or the error text."""
    S.n += 1
    inp = S.path("in%d.safetensors" % S.n)
    out = S.path("out%d.safetensors" % S.n)
    stio.save(inp, inputs)
    pr = sgc("run", path, "--graph", graph, "--inputs", inp, "--out", out, *args)
    if pr.returncode != 0 or not os.path.exists(out):
        return "exit %d: %s" % (pr.returncode, pr.stderr.strip()[:600])
    return stio.load(out)


def same(a, b):
    """None when two --out dicts hold the same tensors bit for bit."""
    if isinstance(a, str) or isinstance(b, str):
        return a if isinstance(a, str) else b
    if sorted(a) != sorted(b):
        return "names differ: %s vs %s" % (sorted(a), sorted(b))
    for k in a:
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            return "%s: dtype or shape differs" % k
        if x.is_floating_point():
            if not torch.equal(torch.isnan(x), torch.isnan(y)):
                return "%s: NaN at different places (poisoned read?)" % k
            x, y = torch.nan_to_num(x), torch.nan_to_num(y)
        if not torch.equal(x, y):
            return "%s differs" % k
    return None


def interleave_cases(progs):
    for path, args in progs:
        rel = os.path.relpath(path, ROOT)
        for g, (_, nstreams, specs) in graphs(path, args).items():
            if nstreams < 2:
                continue
            inputs = make_inputs(specs)
            ref = run(path, g, inputs, *args)
            if isinstance(ref, str):
                S.report("%s %s: runs in program order" % (rel, g), ref)
                continue
            poisoned = [k for k, t in ref.items() if t.is_floating_point() and
                        torch.isnan(t).any()]
            why = None
            for seed in SEEDS:
                why = same(ref, run(path, g, inputs, "--interleave=%d" % seed, *args))
                if why:
                    why = "seed %d: %s" % (seed, why)
                    break
            if "--allow-races" in args:
                # A program the verifier warned about: the race is real.
                S.report("%s %s: racy, some interleaving differs" % (rel, g),
                         None if why else "every seed matched program order")
                continue
            if poisoned and not why:
                why = "the program-order result holds NaN in %s" % poisoned
            S.report("%s %s: 20 interleavings match program order" % (rel, g), why)


def dropped_sync_case(rel, graph):
    """Drops each compiler-made sync in turn; some drop must be caught."""
    path = os.path.join(ROOT, rel)
    specs = graphs(path, [])[graph][2]
    inputs = make_inputs(specs)
    ref = run(path, graph, inputs)
    caught, n = [], 1
    while n < 200:
        if sgc("check", path, "--test-drop-sync=%d" % n).returncode != 0:
            break
        why = same(ref, run(path, graph, inputs, "--test-drop-sync=%d" % n))
        if why:  # the schedule alone may be wrong, not the computation
            S.report("%s: without sync %d, program order still right" % (rel, n), why)
        for seed in SEEDS:
            if same(ref, run(path, graph, inputs, "--interleave=%d" % seed,
                             "--test-drop-sync=%d" % n)):
                caught.append(n)
                break
        n += 1
    S.report("%s: some dropped sync is caught by --interleave (%d syncs, caught: %s)"
             % (rel, n - 1, caught), None if caught else "none caught")
    if not caught:
        return
    # The printed IR without that sync, compiled again: the verifier rejects
    # it (a forward sync), or the backward_syncs pass puts the sync back (a
    # derived block's) and every interleaving is right again.
    ir = sgc(path, "--emit=ir", "-o", "-", "--test-drop-sync=%d" % caught[0]).stdout
    p = S.path("dropped.sg")
    with open(p, "w") as f:
        f.write(ir)
    pr = sgc("check", p)
    if pr.returncode == 1 and "with no event between them" in pr.stderr:
        why = None
    elif pr.returncode != 0:
        why = "exit %d: %s" % (pr.returncode, pr.stderr[:400])
    else:
        why = None
        for seed in SEEDS:
            why = same(ref, run(p, graph, inputs, "--interleave=%d" % seed))
            if why:
                why = "recompiled, seed %d: %s" % (seed, why)
                break
    S.report("%s: the IR without sync %d is rejected or repaired when compiled "
             "again" % (rel, caught[0]), why)


def memplan_cases(progs):
    for path, args in progs:
        rel = os.path.relpath(path, ROOT)
        peaks = {}
        for opt in ("-O2", "-O0"):
            pr = sgc("check", "--memory", path, opt, *args)
            n = len(re.findall(r"^graph \S+: memory plan", pr.stdout, re.M))
            ok = len(re.findall(r"^  check: no two buffers that may be live at once "
                                r"share memory$", pr.stdout, re.M))
            peaks[opt] = [(int(a), int(b)) for a, b in re.findall(
                r"device arena peak: (\d+) bytes \(\d+ buffers, (\d+) bytes without",
                pr.stdout)]
            why = None
            if pr.returncode != 0:
                why = "exit %d: %s" % (pr.returncode, pr.stderr[:400])
            elif n == 0 or ok != n:
                why = "%d graphs, %d checked:\n%s" % (n, ok, pr.stdout[:800])
            else:  # the peak is the arena the generated code reserves
                cu = sgc(path, opt, "--no-line", "-o", "-", *args)
                arenas = [int(a) for a in re.findall(r"cfg\.arena_bytes = (\d+);", cu.stdout)]
                if cu.returncode != 0:
                    why = "sgc -o: exit %d: %s" % (cu.returncode, cu.stderr[:400])
                elif arenas != [p for p, _ in peaks[opt]]:
                    why = "check --memory peaks %s, the generated arena_bytes %s" % (
                        [p for p, _ in peaks[opt]], arenas)
            S.report("%s %s: memory plan checked, equal to the generated arena" % (rel, opt),
                     why)
        if len(peaks["-O2"]) == len(peaks["-O0"]) and peaks["-O0"]:
            why = None
            for (p2, u2), (p0, u0) in zip(peaks["-O2"], peaks["-O0"]):
                if p0 != u0:
                    why = "-O0 peak %d is not the unshared %d" % (p0, u0)
                elif p2 > p0:
                    why = "-O2 peak %d above -O0 peak %d" % (p2, p0)
            S.report("%s: -O0 shares nothing, -O2 needs no more" % rel, why)


def dot_cases(progs):
    dot = shutil.which("dot")
    for path, args in progs:
        if "/samples/" not in path:
            continue
        rel = os.path.relpath(path, ROOT)
        pr = sgc(path, "--emit=dot", "-o", "-", *args)
        text = pr.stdout
        why = None
        gs = graphs(path, args)
        if pr.returncode != 0 or not text.startswith("digraph"):
            why = "exit %d: %s" % (pr.returncode, pr.stderr[:300])
        else:
            for g, (_, nstreams, _) in gs.items():
                legend = re.findall(r"^    s(\d+) \[fillcolor=\"(#\w+)\"", text, re.M)
                if len(set(c for _, c in legend)) < min(nstreams, 8):
                    why = "fewer colours than streams"
            if sum(n for _, n, _ in gs.values()) > len(gs) and "style=dashed" not in text:
                why = "no dashed sync edge"
            # Graphviz's layout (with a cluster per kernel) takes minutes
            # from some 600 edges on: rendered below 300 (every stream
            # program and sample but the exported models)
            if not why and dot and text.count("->") < 300:
                r = subprocess.run([dot, "-Tsvg", "-o", os.devnull], input=text,
                                   capture_output=True, text=True, timeout=60)
                if r.returncode != 0:
                    why = "dot rejects it: %s" % r.stderr[:300]
        S.report("%s: --emit=dot%s" % (rel, "" if text.count("->") < 300 else
                                         " (too large for a Graphviz layout here)"), why)


progs = programs()
S.report("found the samples and stream programs",
         None if len(progs) >= 10 else "only %d" % len(progs))
interleave_cases(progs)
dropped_sync_case(os.path.join("samples", "grad_accum.sg"), "accum")
dropped_sync_case(os.path.join("tests", "golden", "st_backward_syncs.sg"), "g")
memplan_cases(progs)
dot_cases(progs)
S.finish()
