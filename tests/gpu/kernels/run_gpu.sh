#!/usr/bin/env bash
#
# tests/gpu/kernels/run_gpu.sh [BINDIR] [OUTDIR] - on the GPU machine: runs
# the kernel-library harnesses (built here by build.sh and carried, or
# rebuilt there when they do not start), compares their dumped cases with
# PyTorch, times PyTorch on the same shapes, and runs compute-sanitizer
# (memcheck, racecheck) on small cases.  Logs go to OUTDIR (default $OUT);
# the last lines are the summary: each harness's "N passed, M failed" and
# every PERF line.
#
#   device run:  tests/gpu/kernels/run_gpu.sh build-kernels $OUT
set -u
cd "$(dirname "$0")/../../.." || exit 2
bin=${1:-build-kernels}
out=${2:-${OUT:-/tmp/kernels-out}}
dump=/tmp/sgk-dump
mkdir -p "$out" "$dump"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
	>"$out/gpu.txt" 2>&1
date -u >>"$out/gpu.txt"

# The carried binaries, or a build here when one does not start.
for t in attention rows elementwise optim conv_layout gemm_small; do
	if ! "$bin/test_$t" --probe >/dev/null 2>&1; then
		echo "test_$t does not start here: rebuilding" | tee -a "$out/gpu.txt"
		bin=/tmp/sgk-build
		tests/gpu/kernels/build.sh "$bin" >>"$out/gpu.txt" 2>&1
		break
	fi
done

# Each step gets at most its own limit and what is left of the budget
# (SGK_BUDGET seconds in all, default 330; the sanitizers come last), so the summary always comes.
start=$SECONDS
budget=${SGK_BUDGET:-330}
run() {   # NAME SECONDS COMMAND...
	local name=$1 secs=$2 left
	shift 2
	left=$((budget - (SECONDS - start) - 10))
	[ "$secs" -gt "$left" ] && secs=$left
	if [ "$secs" -lt 10 ]; then
		echo "=== $name: skipped (out of time): $*" >>"$out/$name.log"
		return
	fi
	echo "=== $name: $*" >>"$out/$name.log"
	timeout "$secs" "$@" >>"$out/$name.log" 2>&1
	echo "=== exit $? after $((SECONDS - start)) s" >>"$out/$name.log"
}

# The instructions the flash forward compiled to (tensor cores, ldmatrix,
# cp.async): a quick look without a profiler.
if command -v cuobjdump >/dev/null; then
	cuobjdump --dump-sass "$bin/test_attention" 2>/dev/null |
		awk '/Function :/ { f = $3 } /HMMA|LDSM|LDGSTS|LDL|STL/ { split($0, a, " "); for (i in a) if (a[i] ~ /^(HMMA|LDSM|LDGSTS|LDL|STL)/) n[f " " a[i]]++ }
		     END { for (k in n) if (k ~ /flash_(fwd|bwd)[a-z_]*tc/) print n[k], k }' | sort -k2 >>"$out/gpu.txt"
fi

# SGK_STEPS picks steps (default all): attention torchbench rows optim
# elementwise conv_layout gemm_small torchcheck sanitizer.
steps=${SGK_STEPS:-attention torchbench rows optim elementwise conv_layout gemm_small torchcheck sanitizer}
want() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }

want attention && run attention 120 "$bin/test_attention" --dump "$dump"
want torchbench && run torch 60 python3 tests/gpu/kernels/torch_check.py --bench
want rows && run rows 120 "$bin/test_rows" --dump "$dump"
want optim && run optim 40 "$bin/test_optim" --dump "$dump"
want elementwise && run elementwise 40 "$bin/test_elementwise"
want conv_layout && run conv_layout 90 "$bin/test_conv_layout"
want gemm_small && run gemm_small 40 "$bin/test_gemm_small"
want torchcheck && run torch 40 python3 tests/gpu/kernels/torch_check.py "$dump"
if want sanitizer && command -v compute-sanitizer >/dev/null; then
	for tool in memcheck racecheck; do
		run sanitizer 60 compute-sanitizer --tool $tool --error-exitcode 9 "$bin/test_attention" --sanitize
		want rows && run sanitizer 60 compute-sanitizer --tool $tool --error-exitcode 9 "$bin/test_rows" --sanitize
		want conv_layout && run sanitizer 60 compute-sanitizer --tool $tool --error-exitcode 9 "$bin/test_conv_layout" --sanitize
		want gemm_small && run sanitizer 60 compute-sanitizer --tool $tool --error-exitcode 9 "$bin/test_gemm_small" --sanitize
	done
	want optim && run sanitizer 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/test_optim" --quick
fi

echo "==================== summary"
for f in attention rows optim elementwise conv_layout gemm_small torch sanitizer; do
	[ -f "$out/$f.log" ] || continue
	grep -H -E "passed, [0-9]+ failed|^=== exit|ERROR SUMMARY|^FAIL|FATAL" "$out/$f.log" | head -40
done
grep -h "^PERF" "$out"/*.log
