#!/usr/bin/env bash
#
# remat.sh - pass `remat` (-O2 default, compiler/passes/remat.c): the
# recomputation changes no result, bit for bit, and lowers the planned peak
# where it is made; --no-remat and -O0 turn it off.
source "$(dirname "$0")/common.bash"
st() { python3 "$here/st.py" "$@"; }

# The GELU MLP of bench/mlp8_adamw.sg and the small GPT sample: their
# activations are recomputed (the dump says so), and three AdamW steps give
# the same loss, params and optimizer state as without.
"$SGC" check "$root/samples/gpt.sg" --dump-after=remat 2>dump.txt
check "gpt: remat recomputes the GELU outputs" grep -q "^# remat: 2 values .*: done" dump.txt
st write batch.st 'idx=4x16:i64:'"$(seq -s, 0 63 | tr -d '\n')" \
	'target=64:i64:'"$(seq -s, 1 64 | sed 's/64$/0/' | tr -d '\n')"
"$SGC" run "$root/samples/gpt.sg" --params "$root/samples/gpt.safetensors" \
	--inputs batch.st --steps 3 --out on.st --dump-after=remat 2>run.txt
check "gpt with remat: exit 0" test $? -eq 0
check "gpt: sgc run recomputes too" grep -q "^# remat: 2 values .*: done" run.txt
"$SGC" run "$root/samples/gpt.sg" --params "$root/samples/gpt.safetensors" \
	--inputs batch.st --steps 3 --out off.st --no-remat
check "gpt without remat: exit 0" test $? -eq 0
check "gpt: the same bytes with and without remat" cmp -s on.st off.st

# A copy with company (remat.c): tests/golden/remat_mlp.sg moves
# %grad.h1 = gelu_backward(%grad.a1, %h1) and the product making %grad.a1
# next to %a1.re = gelu(%h1), which fusion makes one kernel; three SGD
# steps give the same bytes as without remat.
"$SGC" check "$root/tests/golden/remat_mlp.sg" --dump-after=all 2>dump.txt
check "remat_mlp: %a1.re has company" grep -q "^#   %a1 (with %grad.h1 beside it)" dump.txt
g1=$(sed -n 's/^ *%a1.re = gelu(%h1)  # group \([0-9]*\).*/\1/p' dump.txt | head -n 1)
g2=$(sed -n 's/^ *%grad.h1 = gelu_backward(%grad.a1, %h1)  # group \([0-9]*\).*/\1/p' dump.txt | head -n 1)
check "remat_mlp: gelu and gelu_backward in one group ($g1 = $g2)" test -n "$g1" -a "$g1" = "$g2"
st write x.st "x=64x32:$(python3 -c 'print(",".join(str((i*37%101-50)/40) for i in range(2048)))')"
"$SGC" run "$root/tests/golden/remat_mlp.sg" --inputs x.st --steps 3 --out mon.st
check "remat_mlp with remat: exit 0" test $? -eq 0
"$SGC" run "$root/tests/golden/remat_mlp.sg" --inputs x.st --steps 3 --out moff.st --no-remat
check "remat_mlp without remat: exit 0" test $? -eq 0
check "remat_mlp: the same bytes with and without remat" cmp -s mon.st moff.st
"$SGC" check "$root/bench/transformer.sg" --dump-after=remat 2>dump.txt
check "transformer: every recomputed GELU has its derivative beside it" \
	test "$(grep -c '^#   %l[0-6].g (with %grad.l[0-6].f beside it)$' dump.txt)" = 7
# The last layer's copy would sit at the peak (with the product its
# derivative reads and the derivative's result): %l7.g is kept from
# forward, and the estimate falls further than with all eight.
check "transformer: %l7.g kept from forward" \
	grep -q '^#   %l7.g kept from forward: its copy would not lower the peak$' dump.txt
check "transformer: seven recomputed, the peak estimate 7046430976 bytes" \
	grep -q '^# remat: 7 values .* -> 7046430976 bytes: done$' dump.txt
# With --offload=auto too (the row transformer_off85's budget): the
# offload pass then weighs %l7.g like any other saved value.
"$SGC" check "$root/bench/transformer.sg" --offload-budget=5800000000 --dump-after=remat 2>dump.txt
check "transformer, --offload-budget: %l7.g kept from forward" \
	grep -q '^#   %l7.g kept from forward: its copy would not lower the peak$' dump.txt

# tests/golden/remat_trim.sg: %a1 recomputed, %a2 kept from forward (its
# copy would not lower the peak); three SGD steps give the same bytes as
# without remat.
st write x2.st "x=64x32:$(python3 -c 'print(",".join(str((i*29%97-48)/40) for i in range(2048)))')"
"$SGC" run "$root/tests/golden/remat_trim.sg" --inputs x2.st --steps 3 --out ton.st --dump-after=remat 2>dump.txt
check "remat_trim with remat: exit 0" test $? -eq 0
check "remat_trim: %a1 recomputed, %a2 kept" \
	grep -q '^#   %a2 kept from forward' dump.txt
"$SGC" run "$root/tests/golden/remat_trim.sg" --inputs x2.st --steps 3 --out toff.st --no-remat
check "remat_trim without remat: exit 0" test $? -eq 0
check "remat_trim: the same bytes with and without remat" cmp -s ton.st toff.st

# Through views (tests/golden/bw_remat_view.sg): a reshape and a transpose
# of a pointwise value are recomputed with it; a value backward reads
# through two views is kept; three SGD steps give the same bytes.
"$SGC" check "$root/tests/golden/bw_remat_view.sg" --dump-after=remat 2>dump.txt
check "remat_view: the reshape of gelu recomputed, gelu's derivative beside it" \
	grep -q '^#   %a3 (a view of %a, recomputed with it) (with %grad.h.5 beside it)$' dump.txt
check "remat_view: the transpose of silu recomputed" \
	grep -q '^#   %st (a view of %s, recomputed with it)$' dump.txt
check "remat_view: copies in backward" grep -q '^    %a3.re = reshape(%a.re, shape=\[4, 16, 128\])$' dump.txt
# The derivative's operand is a reshape of a product made after the copy's
# place (as torch.export writes it): both move up, and fusion makes the
# copy and the derivative one kernel.
"$SGC" check "$root/tests/golden/bw_remat_view.sg" --dump-after=fusion 2>dump.txt
g1=$(sed -n 's/^ *%a.re = gelu(%h)  # group \([0-9]*\).*/\1/p' dump.txt | head -n 1)
g2=$(sed -n 's/^ *%grad.h.5 = gelu_backward(%grad.a, %h)  # group \([0-9]*\).*/\1/p' dump.txt | head -n 1)
check "remat_view: gelu and gelu_backward in one group ($g1 = $g2)" test -n "$g1" -a "$g1" = "$g2"
"$SGC" check "$root/bench/gpt2.sg" --dump-after=remat 2>dump.txt
check "gpt2 (exported): twelve GELUs, each with its derivative beside it" \
	test "$(grep -c '^#   %view_[0-9]* (a view of %mul_[0-9]*, recomputed with it) (with %grad.view_[0-9]* beside it)$' dump.txt)" = 12
check "remat_view: %m, read through two views, kept" test -z "$(grep -E '^#   %m|%m[.]re' dump.txt)"
check "remat_view: %e, read itself and through a view, kept" test -z "$(grep -E '^#   %e|%e3?[.]re' dump.txt)"
"$SGC" run "$root/tests/golden/bw_remat_view.sg" --inputs x.st --steps 3 --out von.st
check "remat_view with remat: exit 0" test $? -eq 0
"$SGC" run "$root/tests/golden/bw_remat_view.sg" --inputs x.st --steps 3 --out voff.st --no-remat
check "remat_view without remat: exit 0" test $? -eq 0
check "remat_view: the same bytes with and without remat" cmp -s von.st voff.st
gpeak() { "$SGC" check "$root/bench/gpt2.sg" --memory "$@" |
	sed -n 's/.*device arena peak: \([0-9]*\) bytes.*/\1/p' | head -n 1; }
on=$(gpeak) off=$(gpeak --no-remat)
check "gpt2 (exported): peak $on with remat < $off without" test "$on" -lt "$off"

# The planned peak (sgc check --memory, the arena the code reserves) is
# lower with the recomputation on the 8-layer transformer.
peak() { "$SGC" check "$root/bench/transformer.sg" --memory "$@" |
	sed -n 's/.*device arena peak: \([0-9]*\) bytes.*/\1/p' | head -n 1; }
on=$(peak) off=$(peak --no-remat) o0=$(peak -O0 --no-remat) o0r=$(peak -O0)
check "transformer: peak $on with remat < $off without" test "$on" -lt "$off"
check "-O0: no remat ($o0r = $o0)" test "$o0r" = "$o0"

# --remat-budget: only as many copies as the estimated peak needs to fit.
# The transformer's eight GELU outputs are 256 MiB each; with a budget
# 2 x 256 MiB above the estimate with all seven copies, the two read first
# in backward after %l7.g (%l6.g, %l5.g) are kept from forward too.
"$SGC" check "$root/bench/transformer.sg" --remat-budget=7600000000 --dump-after=remat 2>dump.txt
check "transformer, --remat-budget=7600000000: five recomputed, estimate 7583301888" \
	grep -q '^# remat: 5 values .* -> 7583301888 bytes: done$' dump.txt
check "transformer, --remat-budget: %l5.g and %l6.g kept" \
	test "$(grep -c '^#   %l[56].g kept from forward: the peak fits --remat-budget with it$' dump.txt)" = 2
bpeak=$(peak --remat-budget=7600000000)
check "transformer: planned peak with the budget ($bpeak) between $on and $off" \
	test "$bpeak" -gt "$on" -a "$bpeak" -lt "$off"
# A budget the peak fits without any copy: none made, the plan as --no-remat's.
"$SGC" check "$root/bench/transformer.sg" --remat-budget=9000000000 --dump-after=remat 2>dump.txt
check "transformer, --remat-budget=9000000000: not done" \
	grep -q '^# remat: .*: not done (the peak fits --remat-budget without)$' dump.txt
check "transformer, a large budget plans as --no-remat" test "$(peak --remat-budget=9000000000)" = "$off"
# Below what every copy reaches: every copy made, as without a budget.
check "transformer, a budget below reach plans as the default" test "$(peak --remat-budget=1)" = "$on"
# tests/golden/remat_budget.sg: %a3 kept by the budget; three SGD steps
# give the same bytes as with every copy and as without remat.
st write x4.st "x=64x32:$(python3 -c 'print(",".join(str((i*31%89-44)/40) for i in range(2048)))')"
n=0
for flags in --remat --remat-budget=3020000 --no-remat; do
	"$SGC" run "$root/tests/golden/remat_budget.sg" --inputs x4.st --steps 3 --out b$n.st $flags
	check "remat_budget $flags: exit 0" test $? -eq 0
	n=$((n + 1))
done
check "remat_budget: the same bytes with the budget as with every copy" cmp -s b0.st b1.st
check "remat_budget: the same bytes as without remat" cmp -s b0.st b2.st
"$SGC" check "$root/tests/golden/remat_budget.sg" --remat-budget=lots 2>err.txt
check "--remat-budget=lots: exit 2" test $? -eq 2
check "--remat-budget=lots: says what it expects" \
	grep -q "remat-budget expects a non-negative integer, not 'lots'" err.txt

"$SGC" check "$root/tests/golden/remat_budget.sg" --remat-budget=3020000 --no-remat 2>err.txt
check "--remat-budget with --no-remat: exit 2" test $? -eq 2
check "--remat-budget with --no-remat: says why" \
	grep -q "remat-budget needs remat, which --no-remat turns off" err.txt
"$SGC" check "$root/tests/golden/remat_budget.sg" --no-remat --remat --remat-budget=3020000
check "--no-remat, then --remat, then --remat-budget: exit 0" test $? -eq 0

echo "$fails failed"
[ "$fails" -eq 0 ]
