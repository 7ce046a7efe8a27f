#!/usr/bin/env python3
"""bench/ncu_summary.py CSV - one step's kernels from an ncu run.

Reads what `ncu --csv --print-units base --metrics gpu__time_duration.sum`
printed over a driver making at least three calls (run_bench.sh kernels
runs it so), finds the step as the period of the kernels' names at the
end (the last two calls launch the same kernels; the first also tunes),
and prints the step's kernel time: in all, by kernel name (templates and
arguments cut), and the kernels under 10 us (launch-bound work).
"""
import csv
import re
import sys


def short(name):
    """A kernel's name without its template arguments and parameters."""
    depth, out = 0, []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    s = re.sub(r"^(void|static)\s+", "", s)
    return s or name[:60]


def rows(path):
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        yield r["Kernel Name"], float(r["Metric Value"].replace(",", ""))


def period(names):
    """The length k of the repeating tail, names[-k:] == names[-2k:-k]:
    the longest such (a step may repeat a run of kernels inside it; with
    three calls, a tail twice a step's length is longer than half of
    them)."""
    for k in range(len(names) // 2, 0, -1):
        if names[-k:] == names[-2 * k:-k]:
            return k
    return len(names)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_summary.py NCU_CSV")
    ks = list(rows(sys.argv[1]))
    if not ks:
        sys.exit("ncu_summary.py: no gpu__time_duration rows in " + sys.argv[1])
    k = period([n for n, _ in ks])
    step = ks[-k:]
    total = sum(t for _, t in step)
    print(f"one step: {k} kernels, {total / 1e6:.3f} ms of kernel time "
          f"({len(ks)} kernels profiled)")
    agg = {}
    for n, t in step:
        a = agg.setdefault(short(n), [0, 0.0])
        a[0] += 1
        a[1] += t
    small = [(n, t) for n, t in step if t < 10e3]
    print(f"under 10 us: {len(small)} kernels, "
          f"{sum(t for _, t in small) / 1e6:.3f} ms")
    print(f"{'ms':>8} {'share':>6} {'n':>4}  kernel")
    for name, (cnt, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"{t / 1e6:8.3f} {100 * t / total:5.1f}% {cnt:4d}  {name[:110]}")


if __name__ == "__main__":
    main()
