#!/usr/bin/env bash
#
# run_python_gpu.sh - the GPU half of issue 19: the Python package on torch
# CUDA tensors, its overhead over the bare C API, and #line directives
# under compute-sanitizer and cuda-gdb.
#
#   tests/gpu/run_python_gpu.sh build [DIR]   here (no GPU needed)
#   tests/gpu/run_python_gpu.sh run [DIR]     on the GPU machine
#
# DIR defaults to build-pygpu (git-ignored; carry it).  build: sgc and
# libsgrt (without NCCL) in DIR/build, the shared libraries they need that
# the GPU machine lacks in DIR/lib.  run (needs nvcc, torch with CUDA,
# compute-sanitizer; cuda-gdb when present):
#   1. tests/gpu/test_python.py   sgc.compile_file / graph / call / save /
#                                 load against the --main driver's --out,
#                                 and sgc.compile(module) against torch
#   2. bench/python_overhead.py   time per call: the package, ctypes on the
#                                 bare C API, the driver's --bench
#   3. tests/gpu/line_check.sh    compute-sanitizer names cg_line.sg:15 for
#                                 an out-of-range embedding index (cg_line.cu
#                                 with --no-line, the control); a cuda-gdb
#                                 breakpoint at cg_line.sg:15 stops there
# Output: DIR/report.txt (and $OUT/report.txt); exit 0 when all passed.
set -u
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
mode=${1:-}
dir=${2:-build-pygpu}
case $mode in
build)
	# The GPU machine lacks the libraries sgc and libsgrt load: DIR/lib.
	. tests/gpu/build_lib.sh
	gpu_build "$dir" blas || exit 1
	du -sh "$dir"
	echo "built $dir/build and $dir/lib (carry $dir)"
	;;
run)
	[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
	b=$(cd "$dir/build" && pwd)
	export LD_LIBRARY_PATH=$(cd "$dir/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	cuda_lib=$(dirname "$(dirname "$(command -v nvcc)")")/lib64
	export SGC=$b/compiler/sgc SGC_SOURCE_ROOT=$root
	export SGC_SGRT_FLAGS="-I$root/runtime -L$b/runtime -lsgrt -L$cuda_lib -lcudart -lcublasLt -Xlinker -rpath=$b/runtime:$cuda_lib"
	export SGC_CACHE_DIR=$dir/cache FX2SG=$root/tools/fx2sg
	report=$dir/report.txt
	: >"$report"
	rc=0
	# line_check.sh (nvcc builds, then the tools) beside the package test;
	# the benchmark alone at the end.
	bash tests/gpu/line_check.sh "$dir/line" >"$dir/line.txt" 2>&1 &
	line_pid=$!
	for step in "python3 tests/gpu/test_python.py" "wait $line_pid" \
		"python3 bench/python_overhead.py"; do
		echo "== $step" | tee -a "$report"
		if [ "${step%% *}" = wait ]; then
			wait "$line_pid"
			st=$?
			echo "(tests/gpu/line_check.sh)" | tee -a "$report"
			tee -a "$report" <"$dir/line.txt"
		else
			$step 2>&1 | tee -a "$report"
			st=${PIPESTATUS[0]}
		fi
		[ "$st" -eq 0 ] || { rc=1; echo "FAILED: $step" | tee -a "$report"; }
	done
	[ -n "${OUT:-}" ] && cp "$report" "$OUT/report.txt"
	exit $rc
	;;
*)
	sed -n '3,9s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
