#!/usr/bin/env bash
#
# residual_gemm.sh - kernel_choice's adds computed by products
# (compiler/passes/kernels.c, fold_add): at -O2 the adds of
# tests/golden/cg_residual_gemm.sg right after a product become cuBLASLt's
# C with beta 1 (a residual: SgrtGemm.c_in) or its bias epilogue (a 1-D
# bias), shown by --dump-after; the adds that do not qualify keep their
# kernels, and -O0 folds none.
source "$(dirname "$0")/common.bash"

g=$root/tests/golden/cg_residual_gemm.sg
"$SGC" check "$g" --dump-after=kernel_choice 2>dump.txt
check "x + proj(...): C = %x" grep -q '^  %p = linear(%x, %w1)  # runs at %x1 with its add as epilogue (C = %x, beta 1), %p: no memory$' dump.txt
check "the add marked" grep -q '^  %x1 = add(%x, %p)  # epilogue of %p$' dump.txt
check "a linear's own bias and a residual" grep -q '^  %q = linear(%x2, %w2, %bias)  # runs at %x3 with its add as epilogue (C = %x2, beta 1)' dump.txt
check "an exported addmm: the bias epilogue" grep -q '^  %mm = matmul(%x2d, %w3)  # runs at %am with its add as epilogue (bias = %b3), %mm: no memory$' dump.txt
check "backward's accumulation of a gradient" grep -q '^    %grad.w1 = add(%grad.w1.1, %grad.w1.2)  # epilogue of %grad.w1.2$' dump.txt
check "seven residuals, one bias in all" test "$(grep -c 'with its add as epilogue (C = ' dump.txt) $(grep -c 'with its add as epilogue (bias = ' dump.txt)" = "7 1"
for v in y1 y2 y4 y6 y7; do
	check "kept: %$v's add has its kernel" grep -q "^  %$v = add(.*# group" dump.txt
done
"$SGC" "$g" -O2 -o o2.cu
check "-O2: seven products read a C" test "$(grep -c 'g.c_in = ' o2.cu)" = 7
check "-O2: the residual of x1 is x" grep -q 'g.c_in = v_x;' o2.cu
"$SGC" "$g" -O0 -o o0.cu
check "-O0: none" test "$(grep -c 'g.c_in = ' o0.cu)" = 0

echo "$fails failed"
[ "$fails" -eq 0 ]
