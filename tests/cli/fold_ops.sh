#!/usr/bin/env bash
#
# fold_ops.sh - pass `fold_ops` (-O2, compiler/passes/fold_ops.c): the
# hand-written RMS norm and tanh GELU of tests/golden/bw_fold_ops.sg become
# rms_norm and gelu (not the f64 chain that computes in f32 on purpose);
# the loss and gradients stay those of the ops as
# written (-O0) to within the roundings the fused ops skip.
source "$(dirname "$0")/common.bash"

g=$root/tests/golden/bw_fold_ops.sg
"$SGC" check "$g" --dump-after=fold_ops 2>dump.txt
check "two RMS norms folded" test "$(grep -c ' = rms_norm(' dump.txt)" = 2
check "one GELU folded" test "$(grep -c ' = gelu(' dump.txt)" = 1
check "the chain with a second reader of its tanh kept" grep -q '^  %t2 = tanh(%f2)$' dump.txt
check "the f64 chain (f32 inside) kept" grep -q '^  %r4 = rsqrt(%a4)$' dump.txt
"$SGC" check "$g" -O0 --dump-after=fold_ops 2>dump0.txt
check "-O0: nothing folded" test "$(grep -c 'rms_norm(\|gelu(' dump0.txt)" = 0
python3 - <<'PY'
import json, struct
def tensor(dt, shape, f):
    n = 1
    for d in shape:
        n *= d
    vals = [f(i) for i in range(n)]
    if dt == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in vals)
    if dt == "F64":
        return struct.pack("<%dd" % n, *vals)
    return struct.pack("<%df" % n, *vals)
x = tensor("BF16", [8, 64], lambda i: ((i * 37) % 101 - 50) / 32)
xf = tensor("F32", [8, 64], lambda i: ((i * 53) % 97 - 48) / 24)
xd = tensor("F64", [8, 64], lambda i: ((i * 29) % 89 - 44) / 16)
h = {"xd": {"dtype": "F64", "shape": [8, 64], "data_offsets": [0, len(xd)]},
     "xf": {"dtype": "F32", "shape": [8, 64], "data_offsets": [len(xd), len(xd) + len(xf)]},
     "x": {"dtype": "BF16", "shape": [8, 64],
           "data_offsets": [len(xd) + len(xf), len(xd) + len(xf) + len(x)]}}
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open("in.st", "wb").write(struct.pack("<Q", len(hb)) + hb + xd + xf + x)
PY
"$SGC" run "$g" --inputs in.st --out o2.st --seed 3
check "-O2 run: exit 0" test $? -eq 0
"$SGC" run -O0 "$g" --inputs in.st --out o0.st --seed 3
check "-O0 run: exit 0" test $? -eq 0
# |a - b| <= 2e-2 |b| + 1e-3 (bf16's rounding, which -O0 does after each op)
close() {
	python3 - "$@" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, t in h.items():
        if k == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        raw = b[8 + n + lo:8 + n + hi]
        if t["dtype"] == "F64":
            out[k] = struct.unpack("<%dd" % (len(raw) // 8), raw)
        elif t["dtype"] == "F32":
            out[k] = struct.unpack("<%df" % (len(raw) // 4), raw)
        elif t["dtype"] == "BF16":
            out[k] = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in b if k not in a or len(a[k]) != len(b[k]) or
       any(abs(p - q) > 2e-2 * abs(q) + 1e-3 for p, q in zip(a[k], b[k]))]
if bad or not b:
    print("differ: %s" % (bad or "nothing compared"))
    sys.exit(1)
print("compared %s" % ", ".join(sorted(b)))
PY
}
check "loss and gradients close to the ops as written" close o2.st o0.st

echo "$fails failed"
[ "$fails" -eq 0 ]
