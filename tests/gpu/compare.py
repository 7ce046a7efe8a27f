"""compare.py LIST - compares safetensors files pairwise, tensor by tensor.

LIST has lines `NAME EXPECTED GOT [IR]`.  Every tensor of EXPECTED must be
in GOT with the same dtype and shape and values within the tolerance of its
dtype: |got - exp| <= atol + rtol * |exp| (NaN matches NaN, infinities
must be equal); integers and bools exactly.  With IR (the program's
printed IR), the tolerance is that of the coarsest float dtype among the
program's values when that is coarser: an f64 result computed through an
f32 cast carries f32's rounding.  Prints one line per pair,
`ok NAME` or `FAIL NAME: why`, and exits 1 when any pair failed.
"""
import sys

import numpy as np

import sgtensors

TOL = {"F64": (1e-9, 1e-7), "F32": (1e-4, 1e-3), "F16": (2e-3, 4e-3),
       "BF16": (2e-2, 2e-2)}


def coarsest(ir_path):
    """The float dtype of largest tolerance that the IR's types name."""
    try:
        text = open(ir_path).read().upper()
    except OSError:
        return None
    found = [dt for dt in TOL if dt + "[" in text or "DTYPE=" + dt in text]
    return max(found, key=lambda dt: TOL[dt][1]) if found else None


def compare(exp_path, got_path, floor=None):
    """None when they match, else why not; floor: the coarsest dtype
    whose tolerance applies to every float tensor."""
    try:
        exp, got = sgtensors.read(exp_path), sgtensors.read(got_path)
    except (OSError, ValueError) as e:
        return "cannot read: %s" % e
    bad = []
    for name, (dt, e) in sorted(exp.items()):
        if name not in got:
            bad.append("%s missing" % name)
            continue
        gdt, g = got[name]
        if gdt != dt or g.shape != e.shape:
            bad.append("%s is %s%s, expected %s%s" % (name, gdt, list(g.shape),
                                                      dt, list(e.shape)))
            continue
        if dt not in TOL:
            diff = np.flatnonzero(g.reshape(-1) != e.reshape(-1))
            if diff.size:
                i = diff[0]
                bad.append("%s: %d of %d differ (first at %d: %s, expected %s)" %
                           (name, diff.size, e.size, i, g.reshape(-1)[i],
                            e.reshape(-1)[i]))
            continue
        atol, rtol = TOL[dt]
        if floor and TOL[floor][1] > rtol:
            atol, rtol = TOL[floor]
        e64, g64 = e.astype(np.float64).reshape(-1), g.astype(np.float64).reshape(-1)
        with np.errstate(invalid="ignore"):
            ok = (np.abs(g64 - e64) <= atol + rtol * np.abs(e64)) | \
                 (np.isnan(e64) & np.isnan(g64)) | (e64 == g64)
        if not ok.all():
            i = np.flatnonzero(~ok)[0]
            err = np.abs(g64 - e64)
            err[np.isnan(err)] = np.inf
            bad.append("%s: %d of %d off (first at %d: %.6g, expected %.6g; "
                       "max error %.3g)" % (name, (~ok).sum(), e.size, i, g64[i],
                                           e64[i], err.max()))
    extra = sorted(set(got) - set(exp))
    if extra:
        bad.append("unexpected tensors %s" % ", ".join(extra))
    return "; ".join(bad) if bad else None


def main():
    failed = 0
    for line in open(sys.argv[1]):
        parts = line.split()
        if len(parts) not in (3, 4):
            continue
        why = compare(parts[1], parts[2],
                      coarsest(parts[3]) if len(parts) == 4 else None)
        if why:
            failed += 1
            print("FAIL %s: %s" % (parts[0], why))
        else:
            print("ok %s" % parts[0])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
