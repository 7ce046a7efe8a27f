"""compare.py LIST - compares safetensors files pairwise, tensor by tensor.

LIST has lines `NAME EXPECTED GOT`.  Every tensor of EXPECTED must be in
GOT with the same dtype and shape and values within the tolerance of its
dtype: |got - exp| <= atol + rtol * |exp| (NaN matches NaN, infinities
must be equal); integers and bools exactly.  Prints one line per pair,
`ok NAME` or `FAIL NAME: why`, and exits 1 when any pair failed.
"""
import sys

import numpy as np

import sgtensors

TOL = {"F64": (1e-9, 1e-7), "F32": (1e-4, 1e-3), "F16": (2e-3, 4e-3),
       "BF16": (2e-2, 2e-2)}


def compare(exp_path, got_path):
    """None when they match, else why not."""
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
        if len(parts) != 3:
            continue
        why = compare(parts[1], parts[2])
        if why:
            failed += 1
            print("FAIL %s: %s" % (parts[0], why))
        else:
            print("ok %s" % parts[0])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
