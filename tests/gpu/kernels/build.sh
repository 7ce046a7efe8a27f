#!/usr/bin/env bash
#
# tests/gpu/kernels/build.sh [OUTDIR] - builds the kernel-library harnesses
# (test_attention, test_rows, test_elementwise, test_optim, test_gemm_small,
# test_conv_layout) with nvcc for sm_90, in parallel, into OUTDIR (default
# build-kernels at the repository root), their fatbins compressed (about
# 11 MB in all, to carry to the GPU machine).  Exit status 1 when any
# build failed.
set -u
cd "$(dirname "$0")/../../.." || exit 2
out=${1:-build-kernels}
mkdir -p "$out"
nvcc=${NVCC:-nvcc}
flags="-arch=sm_90 -std=c++17 -O2 -Xfatbin=-compress-all -Iruntime/sgk -Itests/gpu/kernels"
pids=()
for t in attention rows elementwise optim conv_layout gemm_small; do
	$nvcc $flags tests/gpu/kernels/test_$t.cu -o "$out/test_$t" >"$out/build_$t.log" 2>&1 &
	pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=1
done
for t in attention rows elementwise optim conv_layout gemm_small; do
	if [ -s "$out/build_$t.log" ]; then
		echo "== $t"; cat "$out/build_$t.log"
	fi
done
exit $rc
