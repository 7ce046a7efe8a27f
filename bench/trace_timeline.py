"""trace_timeline.py - a Chrome trace of one sgc driver call (--trace) as
an SVG timeline: one track per stream, one box per op, coloured by what
it is (products and other kernels, copies out and back, optimizer
updates, collectives), with a time axis in ms.  Plain Python (json only),
so it runs where matplotlib is not installed.

    python3 bench/trace_timeline.py TRACE.json OUT.svg [--title T]
        [--from MS] [--to MS] [--width PX]
"""
import argparse
import json
import sys

COLOURS = [  # (test on the slice, colour, legend)
    (lambda e: "to_host" in e["name"], "#e8871e", "to_host (copy out)"),
    (lambda e: "to_device" in e["name"], "#2a9d4b", "to_device (prefetch)"),
    (lambda e: "update" in e["name"], "#d62728", "optimizer update"),
    (lambda e: e.get("cat") == "collective", "#8e44ad", "collective"),
    (lambda e: any(k in e["name"] for k in ("linear", "matmul", "gemm")),
     "#1f5fa8", "matrix product"),
    (lambda e: any(k in e["name"] for k in ("attention", "sdpa", "flash")),
     "#17a2b8", "attention"),
    (lambda e: True, "#9aa5b1", "other kernel"),
]


def colour(e):
    """The colour and legend entry of slice e."""
    for test, c, what in COLOURS:
        if test(e):
            return c, what
    return "#000", "?"


def trace_slices(events):
    """The "X" slices of a Chrome trace, each with "tid" replaced by its
    stream's name (the "thread_name" metadata event of the integer tid)."""
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return [dict(e, tid=names.get(e["tid"], str(e["tid"])))
            for e in events if e.get("ph") == "X"]


def esc(t):
    return (str(t).replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;").replace('"', "&quot;"))


def render(ev, title, lo, hi, width):
    """The SVG text of slices ev between lo and hi ms after the first."""
    t0 = min(e["ts"] for e in ev)
    span = (max(e["ts"] + e["dur"] for e in ev) - t0) / 1e3
    hi = span if hi is None else hi
    streams = []
    for e in sorted(ev, key=lambda e: e["ts"]):
        if e["tid"] not in streams:
            streams.append(e["tid"])
    left, track, top = 90, 28, 40
    h = top + track * len(streams) + 70
    sx = (width - left - 20) / max(hi - lo, 1e-9)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (width, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">%s</text>' % (left, esc(title))]
    for i, s in enumerate(streams):
        y = top + i * track
        out.append('<text x="4" y="%d">%s</text>' % (y + 17, esc(s)))
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>'
                   % (left, y + track - 2, width - 20, y + track - 2))
    used = {}
    for e in ev:
        a, b = (e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3
        if b < lo or a > hi:
            continue
        a, b = max(a, lo), min(b, hi)
        c, what = colour(e)
        used[what] = c
        y = top + streams.index(e["tid"]) * track
        out.append('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s">'
                   '<title>%s %.3f ms</title></rect>' % (
                       left + (a - lo) * sx, y + 3, max((b - a) * sx, 0.5),
                       track - 8, c, esc(e["name"]), e["dur"] / 1e3))
    ya = top + track * len(streams) + 4
    step = nice_step((hi - lo) / 8)
    t = (int(lo / step) + (lo % step > 0)) * step
    while t <= hi + 1e-9:
        x = left + (t - lo) * sx
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#888"/>'
                   % (x, ya, x, ya + 5))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%g ms</text>'
                   % (x, ya + 17, round(t, 6)))
        t += step
    x = left
    for what, c in used.items():
        out.append('<rect x="%d" y="%d" width="12" height="10" fill="%s"/>'
                   % (x, ya + 32, c))
        out.append('<text x="%d" y="%d">%s</text>' % (x + 16, ya + 41,
                                                      esc(what)))
        x += 22 + 7 * len(what)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def nice_step(x):
    """1, 2 or 5 times a power of ten, at least x."""
    p = 1e-6
    while True:
        for m in (1, 2, 5):
            if m * p >= x:
                return m * p
        p *= 10


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("svg")
    ap.add_argument("--title", default=None)
    ap.add_argument("--from", dest="lo", type=float, default=0.0)
    ap.add_argument("--to", dest="hi", type=float, default=None)
    ap.add_argument("--width", type=int, default=1100)
    a = ap.parse_args()
    with open(a.trace) as f:
        ev = trace_slices(json.load(f))
    if not ev:
        print("trace_timeline.py: no slices in %s" % a.trace, file=sys.stderr)
        return 1
    with open(a.svg, "w") as f:
        f.write(render(ev, a.title or a.trace, a.lo, a.hi, a.width))
    return 0


if __name__ == "__main__":
    sys.exit(main())
