#!/usr/bin/env bash
#
# line_check.sh WORKDIR - #line directives on a GPU (run_python_gpu.sh runs
# it with SGC set): tests/golden/cg_line.sg with an embedding index out of
# range.  With its device check taken out (so that the read itself is out
# of range), compute-sanitizer memcheck must report the invalid read at
# cg_line.sg:15 (the embedding statement), and with --no-line at
# the .cu file (nocheck_noline.cu), not at the .sg; with the check, the assertion fails at
# cg_line.sg:15.  cuda-gdb (when installed), on a -G build: `break
# cg_line.sg:15` stops in the embedding kernel at cg_line.sg:15.
set -u
w=$1
mkdir -p "$w"
w=$(cd "$w" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
fail=0
cp "$root/tests/golden/cg_line.sg" "$w/"
cd "$w" || exit 2
# Inputs: tok has 10**12 in a table of 16 rows (far past any allocation).
python3 - <<'PY'
import json, struct
tok = [0, 1, 2, 10**12, 3, 4, 5, 6]
b = struct.pack("<8q", *tok)
h = json.dumps({"tok": {"dtype": "I64", "shape": [8], "data_offsets": [0, len(b)]}}).encode()
h += b" " * (-len(h) % 8)
open("in.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b)
PY
flags=$SGC_SGRT_FLAGS
build() { # NAME SGC-OPTIONS... : NAME.cu and the program NAME (-lineinfo)
	local name=$1
	shift
	"$SGC" cg_line.sg --main -o "$name.cu" "$@" || return 1
	case $name in *nocheck*) sed -i '/embedding: index out of range/d' "$name.cu" ;; esac
	nvcc -arch=sm_90 -std=c++17 -lineinfo "$name.cu" -o "$name" $flags
}
build nocheck & p1=$!
build nocheck_noline --no-line & p2=$!
build checked & p3=$!
"$SGC" cg_line.sg --main -o gdb.cu && nvcc -arch=sm_90 -std=c++17 -G -g gdb.cu -o gdb $flags & p4=$!
wait $p1 && wait $p2 && wait $p3 || exit 1
wait $p4
compute-sanitizer --tool memcheck ./nocheck --inputs in.safetensors >san.txt 2>&1
compute-sanitizer --tool memcheck ./nocheck_noline --inputs in.safetensors >san_noline.txt 2>&1
compute-sanitizer --tool memcheck ./checked --inputs in.safetensors >san_checked.txt 2>&1
show() { echo "--- $1"; grep -E "Invalid|at .* in |Assert|cg_line" "$1" | head -n 12; }
show san.txt
show san_noline.txt
show san_checked.txt
if grep -q "Invalid __global__ read" san.txt && grep -Eq "^=+ +at .* in (.*/)?cg_line\.sg:15$" san.txt; then
	echo "ok compute-sanitizer: the out-of-range read is at cg_line.sg:15"
else
	echo "FAIL compute-sanitizer does not name cg_line.sg:15"
	fail=1
fi
if grep -Eq "in (.*/)?nocheck_noline\.cu:[0-9]+$" san_noline.txt && ! grep -q "cg_line\.sg:15$" san_noline.txt; then
	echo "ok --no-line: compute-sanitizer names the .cu file (nocheck_noline.cu)"
else
	echo "FAIL --no-line: expected nocheck_noline.cu lines"
	fail=1
fi
if grep -q "cg_line.sg:15" san_checked.txt && grep -qi "assert" san_checked.txt; then
	echo "ok the checked build's assertion names cg_line.sg:15"
else
	echo "FAIL the checked build's assertion"
	fail=1
fi
if command -v cuda-gdb >/dev/null; then
	timeout 120 cuda-gdb -batch -ex "set breakpoint pending on" -ex "break cg_line.sg:15" \
		-ex run -ex "info cuda kernels" -ex bt --args ./gdb --inputs in.safetensors >gdb.txt 2>&1
	grep -E "Breakpoint|cg_line|embedding" gdb.txt | head -n 12
	if grep -Eq "Breakpoint 1.*cg_line\.sg:15|at cg_line\.sg:15" gdb.txt; then
		echo "ok cuda-gdb stops at cg_line.sg:15"
	else
		echo "FAIL cuda-gdb: no stop at cg_line.sg:15"
		tail -n 20 gdb.txt
		fail=1
	fi
else
	echo "FAIL cuda-gdb is not installed"
	fail=1
fi
exit $fail
