#!/usr/bin/env python3
"""attn_search.py - cuDNN's attention configurations at the bench shape.

Runs tests/gpu/test_cudnn_attn --bench-only (libsgrt's sgrt_sdpa at B=8,
T=2048, 16 heads of 128, causal, bf16, q k v slices of one [B, T, 3, H, D]
buffer, as the transformer's step calls it) under libsgrt's plan knobs
(docs/runtime.md: SGRT_SDPA_DQ, SGRT_SDPA_HEUR, SGRT_SDPA_{FWD,BWD}_CFG,
SGRT_SDPA_{FWD,BWD}_KNOBS): the heuristic's other configurations, each
knob of the chosen engine one value at a time, and the backward without
its f32 dQ accumulator.  Each variant is timed once; the fastest few are
timed again in interleaved rounds against the default.  With --driver, the
best forward and backward settings are then run in whole steps of that
driver, interleaved with the default (the only measure of a change: a
kernel's time alone is not its time in a step of products at the power
limit).

    python3 bench/kernels/attn_search.py BIN [--driver BIN --inputs FILE]
        [--deadline S]

BIN: build-cudnn-gpu/test_cudnn_attn (tests/gpu/run_cudnn_attention.sh
build).  LD_LIBRARY_PATH must find libcudnn.so.9 and libsgrt's libraries.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

KNOB = re.compile(r"sgrt_sdpa:   knob (\d+): (-?\d+)\.\.(-?\d+) step (-?\d+)")
CFG = re.compile(r"sgrt_sdpa: (forward|backward) d=\d+ config (\d+) of (\d+): engine (-?\d+), "
                 r"knobs([ 0-9=-]*): (.*)")
MS = re.compile(r"BENCH_MS .*cudnn_fwd=(-?[0-9.]+) cudnn_bwd=(-?[0-9.]+)")


def run_bin(binary, env, debug=0):
    e = dict(os.environ, **env)
    if debug:
        e["SGRT_CUDNN_DEBUG"] = str(debug)
    p = subprocess.run([binary, "--bench-only"], env=e, capture_output=True, text=True,
                       timeout=120)
    m = MS.search(p.stdout)
    fwd, bwd = (float(m.group(1)), float(m.group(2))) if m else (-1.0, -1.0)
    return fwd, bwd, p.stderr


def parse(stderr):
    """{direction: {'chosen': (engine, {type: value}), 'knobs': [(t, lo, hi, step)],
    'plans': n}}"""
    out = {"forward": {"knobs": [], "plans": 0, "chosen": None},
           "backward": {"knobs": [], "plans": 0, "chosen": None}}
    cur = None
    for line in stderr.splitlines():
        m = CFG.match(line)
        if m:
            d = out[m.group(1)]
            cur = d
            knobs = dict(tuple(map(int, kv.split("="))) for kv in m.group(5).split())
            if m.group(6).startswith(("chosen", "plan")):
                d["plans"] += 1
            if m.group(6).startswith("chosen"):
                d["chosen"] = (int(m.group(4)), knobs)
            continue
        m = KNOB.match(line)
        if m and cur is not None:
            k = tuple(map(int, m.groups()))
            if k not in cur["knobs"]:
                cur["knobs"].append(k)
    return out


def variants(info):
    v = [("default", {}), ("dq=direct", {"SGRT_SDPA_DQ": "direct"}),
         ("heur=b", {"SGRT_SDPA_HEUR": "b"}), ("heur=fallback", {"SGRT_SDPA_HEUR": "fallback"})]
    for d, key in (("forward", "FWD"), ("backward", "BWD")):
        i = info[d]
        for n in range(1, i["plans"] + 3):
            v.append((f"{key.lower()} cfg {n}", {f"SGRT_SDPA_{key}_CFG": str(n)}))
        chosen = i["chosen"][1] if i["chosen"] else {}
        for t, lo, hi, step in i["knobs"]:
            step = max(step, 1)
            vals = list(range(lo, hi + 1, step))
            if len(vals) > 64:
                vals = vals[:64]
            for x in vals:
                if chosen.get(t) == x:
                    continue
                v.append((f"{key.lower()} knob {t}={x}", {f"SGRT_SDPA_{key}_KNOBS": f"{t}={x}"}))
    return v


def step_ms(driver, inputs, env, n):
    e = dict(os.environ, **env)
    p = subprocess.run([driver, "--inputs", inputs, "--bench", str(n)], env=e,
                       capture_output=True, text=True, timeout=240)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith('{"graph"'):
            return json.loads(line)["ms_median"]
    sys.stderr.write(p.stderr[-500:])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--driver")
    ap.add_argument("--inputs")
    ap.add_argument("--deadline", type=float, default=400.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    t0 = time.time()

    fwd, bwd, err = run_bin(a.bin, {}, debug=2)
    info = parse(err)
    print("cuDNN's choice with no knobs:")
    for line in err.splitlines():
        if line.startswith("sgrt_sdpa:"):
            print("  " + line)
    print(f"default: forward {fwd:.4f} ms, backward {bwd:.4f} ms (a layer)\n", flush=True)

    res = []
    for name, env in variants(info):
        if time.time() - t0 > a.deadline * 0.45:
            print(f"(deadline: variants from {name} on not timed)")
            break
        f, b, e = run_bin(a.bin, env)
        res.append((name, env, f, b))
        print(f"  {name:28s} fwd {f:8.4f}  bwd {b:8.4f}", flush=True)

    # the fastest few again, interleaved with the default
    ok = [r for r in res if r[2] > 0 and r[3] > 0]
    best_b = sorted((r for r in ok if r[0] != "default"), key=lambda r: r[3])[:4]
    best_f = sorted((r for r in ok if r[0] != "default"), key=lambda r: r[2])[:3]
    again = [("default", {})] + [(r[0], r[1]) for r in best_b + best_f]
    seen, again2 = set(), []
    for n, e in again:
        if n not in seen:
            seen.add(n)
            again2.append((n, e))
    times = {n: ([], []) for n, _ in again2}
    for r in range(a.rounds):
        for n, e in again2:
            if time.time() - t0 > a.deadline * 0.7:
                break
            f, b, _ = run_bin(a.bin, e)
            if f > 0:
                times[n][0].append(f)
                times[n][1].append(b)
    print("\nagain, interleaved (median of rounds; a layer):")
    med = {}
    for n, (fs, bs) in times.items():
        if fs:
            med[n] = (statistics.median(fs), statistics.median(bs))
            print(f"  {n:28s} fwd {med[n][0]:8.4f}  bwd {med[n][1]:8.4f}  ({len(fs)} rounds)")
    if "default" not in med or not a.driver:
        return 0
    df, db = med["default"]
    bf = min(med.items(), key=lambda kv: kv[1][0])
    bb = min(med.items(), key=lambda kv: kv[1][1])
    env = {}
    for n, _ in (bf, bb):
        env.update(dict(again2)[n])
    if bf[1][0] > 0.98 * df and bb[1][1] > 0.98 * db:
        print("\nno variant 2% faster than the default: no step A/B")
        return 0
    print(f"\nthe step, default against {env} (driver {a.driver}):", flush=True)
    st = {"default": [], "best": []}
    for r in range(a.rounds):
        for n, e in (("default", {}), ("best", env)):
            if time.time() - t0 > a.deadline:
                break
            ms = step_ms(a.driver, a.inputs, e, 15)
            if ms:
                st[n].append(ms)
                print(f"  round {r} {n:8s} {ms:.3f} ms", flush=True)
    if st["default"] and st["best"]:
        d, b = statistics.median(st["default"]), statistics.median(st["best"])
        print(f"step: default {d:.3f} ms, best {b:.3f} ms ({b / d:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
