"""gen.py - the collective programs of run_multi_gpu.sh, each rank's
inputs, and what each rank must get, computed here with numpy from all
ranks' inputs (not by sgc: the interpreter runs one rank).

    gen.py coll DIR DTYPE WORLD     DIR/prog.sg, DIR/in{r}.safetensors,
                                    DIR/expected{r}.safetensors
    gen.py check DIR WORLD          compares DIR/out{r}.safetensors with
                                    DIR/expected{r}.safetensors (exactly:
                                    every input is a small integer, so
                                    every result is exact in every dtype)
    gen.py dp DIR WORLD             DIR/in{r}.safetensors (rank r's
                                    microbatch), DIR/full.safetensors (the
                                    concatenated batch), DIR/params.safetensors
    gen.py dpcheck DIR WORLD        compares every rank's params and
                                    optimizer state after the steps with
                                    the one-rank interpreter's (DIR/ref)
    gen.py overlap_inputs DIR B D WORLD   inputs of microbatch_overlap.sg
    gen.py overlap TRACE...         the overlap of collectives and compute

Exit status 0 when everything matched.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import sgtensors  # noqa: E402  (tests/gpu/sgtensors.py)

N, M = 64, 130          # the collective tensors' shape (M even: dim 1 splits)
SG = {"f32": "F32", "bf16": "BF16", "f16": "F16", "i32": "I32"}


def coll_program(dt):
    """The .sg text: every collective, and oneshot/ce on two streams."""
    ops = [("ar_sum", 'all_reduce(%x, op="sum")'),
           ("ar_avg", 'all_reduce(%x, op="avg")'),
           ("ar_max", 'all_reduce(%x, op="max")'),
           ("ar_min", 'all_reduce(%x, op="min")'),
           ("ag0", "all_gather(%x, dim=0)"),
           ("ag1", "all_gather(%x, dim=1)"),
           ("rs0", 'reduce_scatter(%x, op="sum", dim=0)'),
           ("rs1", 'reduce_scatter(%x, op="max", dim=1)'),
           ("bc", "broadcast(%x, root=1)"),
           ("a2a0", "all_to_all(%x, dim=0)"),
           ("a2a1", "all_to_all(%x, dim=1)"),
           ("os_sum", 'all_reduce(%x, op="sum", algo="oneshot")'),
           ("os_avg", 'all_reduce(%x, op="avg", algo="oneshot")'),
           ("os_max", 'all_reduce(%x, op="max", algo="oneshot")'),
           ("os_min", 'all_reduce(%x, op="min", algo="oneshot")'),
           ("ce0", 'all_gather(%x, dim=0, algo="ce")'),
           ("ce1", 'all_gather(%x, dim=1, algo="ce")')]
    lines = ["# every collective over WORLD ranks in %s (run_multi_gpu.sh)" % dt,
             "dim N = %d" % N, "dim M = %d" % M, "", "graph coll {",
             "  input %%x : %s[N, M]" % dt, "  input %%y : %s[N, M]" % dt,
             "  stream comm (priority=-1)", "  event ready", ""]
    lines += ["  %%%s = %s" % (n, e) for n, e in ops]
    lines += ["  record_event(ready)", "  with stream(comm) {",
              "    wait_event(ready)",
              '    %cs_sum = all_reduce(%y, op="sum", algo="oneshot")',
              '    %cs_ce = all_gather(%y, dim=0, algo="ce")',
              '    %cs_plain = all_reduce(%y, op="max")', "  }",
              "  wait_stream(comm)"]
    names = [n for n, _ in ops] + ["cs_sum", "cs_ce", "cs_plain"]
    lines += ["  return " + ", ".join("%" + n for n in names), "}", ""]
    return "\n".join(lines), names


def rank_input(r, salt):
    """Rank r's tensor: integers in [-8, 8], different on every rank."""
    i = np.arange(N * M, dtype=np.int64).reshape(N, M)
    return ((i * 7 + r * 13 + salt * 5) % 17 - 8).astype(np.float64)


def split(a, world, r, dim):
    """Block r of `world` blocks of a along dim."""
    return np.split(a, world, axis=dim)[r]


def expected(xs, ys, r, world, dt):
    """Rank r's results, from every rank's inputs."""
    s = sum(xs)
    avg = np.trunc(s / world) if dt == "i32" else s / world
    mx, mn = np.maximum.reduce(xs), np.minimum.reduce(xs)
    e = {"ar_sum": s, "ar_avg": avg, "ar_max": mx, "ar_min": mn,
         "ag0": np.concatenate(xs, 0), "ag1": np.concatenate(xs, 1),
         "rs0": split(s, world, r, 0), "rs1": split(mx, world, r, 1),
         "bc": xs[1 % world],
         "a2a0": np.concatenate([split(x, world, r, 0) for x in xs], 0),
         "a2a1": np.concatenate([split(x, world, r, 1) for x in xs], 1)}
    e.update({"os_sum": s, "os_avg": avg, "os_max": mx, "os_min": mn,
              "ce0": e["ag0"], "ce1": e["ag1"], "cs_sum": sum(ys),
              "cs_ce": np.concatenate(ys, 0),
              "cs_plain": np.maximum.reduce(ys)})
    return e


def gen_coll(d, dt, world):
    text, _ = coll_program(dt)
    with open(d + "/prog.sg", "w") as f:
        f.write(text)
    xs = [rank_input(r, 0) for r in range(world)]
    ys = [rank_input(r, 3) for r in range(world)]
    k = SG[dt]
    for r in range(world):
        sgtensors.write("%s/in%d.safetensors" % (d, r),
                        {"x": (k, xs[r]), "y": (k, ys[r])})
        sgtensors.write("%s/expected%d.safetensors" % (d, r),
                        {n: (k, v) for n, v in expected(xs, ys, r, world, dt).items()})


def check_coll(d, world):
    bad = 0
    for r in range(world):
        exp = sgtensors.read("%s/expected%d.safetensors" % (d, r))
        try:
            got = sgtensors.read("%s/out%d.safetensors" % (d, r))
        except OSError as e:
            print("FAIL %s rank %d: no --out (%s)" % (d, r, e))
            return 1
        for n, (k, v) in exp.items():
            g = got.get(n)
            if g is None or g[0] != k or g[1].shape != v.shape:
                print("FAIL %s rank %d %s: missing or %s" % (d, r, n, g and (g[0], g[1].shape)))
                bad += 1
            elif not np.array_equal(g[1].astype(np.float64), v.astype(np.float64)):
                w = np.argwhere(g[1].astype(np.float64) != v.astype(np.float64))
                i = tuple(w[0])
                print("FAIL %s rank %d %s: %d elements differ, first at %s: got %r want %r"
                      % (d, r, n, len(w), i, g[1][i], v[i]))
                bad += 1
    print("%s %s: %d ranks x %d tensors" % ("FAIL" if bad else "ok", d, world, len(exp)))
    return 1 if bad else 0


# ------------------------------------------------------------------ data parallel

DP_B, DP_D, DP_H, DP_O = 16, 64, 256, 8   # rows per rank; dp_train.sg's dims


def gen_dp(d, world):
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((DP_B, DP_D)).astype(np.float32) for _ in range(world)]
    ys = [rng.standard_normal((DP_B, DP_O)).astype(np.float32) for _ in range(world)]
    for r in range(world):
        sgtensors.write("%s/in%d.safetensors" % (d, r), {"x": ("F32", xs[r]), "y": ("F32", ys[r])})
    sgtensors.write(d + "/full.safetensors",
                    {"x": ("F32", np.concatenate(xs)), "y": ("F32", np.concatenate(ys))})
    p = {"w1": (DP_D, DP_H), "w2": (DP_H, DP_H), "w3": (DP_H, DP_O)}
    sgtensors.write(d + "/params.safetensors",
                    {n: ("F32", (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32))
                     for n, s in p.items()})


def check_dp(d, world):
    ref = sgtensors.read(d + "/ref.safetensors")
    start = sgtensors.read(d + "/params.safetensors")
    bad, n = 0, 0
    for r in range(world):
        got = sgtensors.read("%s/out%d.safetensors" % (d, r))
        for name, (k, v) in ref.items():
            if name not in start and not name.startswith("opt."):
                continue   # the loss: each rank's own microbatch
            g = got.get(name)
            n += 1
            if g is None or g[1].shape != v.shape:
                print("FAIL dp rank %d %s: missing" % (r, name))
                bad += 1
                continue
            err = np.abs(g[1].astype(np.float64) - v)
            tol = 1e-5 + 1e-4 * np.abs(v)
            moved = name in start and np.abs(v - start[name][1]).max() > 1e-3
            if (err > tol).any() or (name in start and not moved):
                print("FAIL dp rank %d %s: max error %.3g (moved from the start: %s)"
                      % (r, name, err.max(), moved))
                bad += 1
    print("%s dp: %d tensors of %d ranks match the one-rank interpreter on the whole batch"
          % ("FAIL" if bad else "ok", n, world))
    return 1 if bad else 0


# ------------------------------------------------------------------ overlap

def gen_overlap_inputs(d, b, dd, world):
    rng = np.random.default_rng(11)
    for r in range(world):
        sgtensors.write("%s/in%d.safetensors" % (d, r),
                        {"x0": ("F32", rng.standard_normal((b, dd)).astype(np.float32)),
                         "x1": ("F32", rng.standard_normal((b, dd)).astype(np.float32))})


def overlap(paths):
    """Per trace: each collective's time and how much of it other streams
    spent computing (the union of their slices)."""
    for p in paths:
        ev = json.load(open(p))
        colls = [e for e in ev if e["cat"] == "collective"]
        for c in colls:
            a, b = c["ts"], c["ts"] + c["dur"]
            spans = sorted((max(a, e["ts"]), min(b, e["ts"] + e["dur"])) for e in ev
                           if e["tid"] != c["tid"] and e["cat"] != "collective"
                           and e["ts"] < b and e["ts"] + e["dur"] > a)
            cover, end = 0.0, a
            for s, t in spans:
                s = max(s, end)
                if t > s:
                    cover += t - s
                    end = t
            print("%s: %s on %s: %.1f us, %.1f us (%.0f%%) overlapped by compute on other streams"
                  % (p.split("/")[-1], c["name"], c["tid"], c["dur"], cover,
                     100 * cover / c["dur"] if c["dur"] else 0))
        t0 = min(e["ts"] for e in ev)
        t1 = max(e["ts"] + e["dur"] for e in ev)
        print("%s: call span %.1f us, %d slices on %s" % (p.split("/")[-1], t1 - t0, len(ev),
                                                          sorted(set(e["tid"] for e in ev))))
    return 0


def main():
    a = sys.argv[1:]
    if a[0] == "coll":
        gen_coll(a[1], a[2], int(a[3]))
        return 0
    if a[0] == "check":
        return check_coll(a[1], int(a[2]))
    if a[0] == "dp":
        gen_dp(a[1], int(a[2]))
        return 0
    if a[0] == "dpcheck":
        return check_dp(a[1], int(a[2]))
    if a[0] == "overlap_inputs":
        gen_overlap_inputs(a[1], int(a[2]), int(a[3]), int(a[4]))
        return 0
    if a[0] == "overlap":
        return overlap(a[1:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
