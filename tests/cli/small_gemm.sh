#!/usr/bin/env bash
#
# small_gemm.sh - kernel_choice's small products (compiler/passes/kernels.c,
# runtime/sgk/sgk_gemm.cuh): at -O2 for sm_90, the f32 matmuls of
# tests/golden/ok_small_gemm.sg within the bounds get the pointwise group
# after them as epilogue and one sg_launch_gemm_small each; the product
# reading a transpose stays cuBLASLt's.  -O0, and --arch=sm_80 (no thread
# block clusters), keep every product on cuBLASLt.
source "$(dirname "$0")/common.bash"

g=$root/tests/golden/ok_small_gemm.sg
"$SGC" check "$g" --dump-after=kernel_choice 2>dump.txt
check "four small products" test "$(grep -c 'sgk_gemm_small (K split' dump.txt)" = 4
check "their splits: 16, 4, 16, 8" test "$(grep -o 'K split [0-9]*' dump.txt | tr -d 'K split' | tr '\n' ' ')" = "16 4 16 8 "
check "the product of a transpose stays cuBLASLt's" grep -q '^  %h5 = matmul(%x3, %t5)$' dump.txt
check "its group an epilogue" grep -q '^  %a1 = tanh(%s1)  # group 0 (vec 1) after %h1$' dump.txt
"$SGC" "$g" -O2 -o o2.cu
check "-O2: four launches" test "$(grep -c 'sg_launch_gemm_small(' o2.cu)" = 4
check "-O2: the library header included" grep -q '#include "sgk/sgk_gemm.cuh"' o2.cu
"$SGC" "$g" -O0 -o o0.cu
check "-O0: none" test "$(grep -c 'sg_launch_gemm_small\|sgk_gemm.cuh' o0.cu)" = 0
"$SGC" "$g" -O2 --arch=sm_80 -o o80.cu
check "sm_80: none" test "$(grep -c 'sg_launch_gemm_small\|sgk_gemm.cuh' o80.cu)" = 0
"$SGC" check "$g" --arch=sm_80 --dump-after=kernel_choice 2>dump80.txt
check "sm_80: no epilogue groups after products" test "$(grep -c 'after %h' dump80.txt)" = 0

echo "$fails failed"
[ "$fails" -eq 0 ]
