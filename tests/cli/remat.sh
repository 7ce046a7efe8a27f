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

# The planned peak (sgc check --memory, the arena the code reserves) is
# lower with the recomputation on the 8-layer transformer.
peak() { "$SGC" check "$root/bench/transformer.sg" --memory "$@" |
	sed -n 's/.*device arena peak: \([0-9]*\) bytes.*/\1/p' | head -n 1; }
on=$(peak) off=$(peak --no-remat) o0=$(peak -O0 --no-remat) o0r=$(peak -O0)
check "transformer: peak $on with remat < $off without" test "$on" -lt "$off"
check "-O0: no remat ($o0r = $o0)" test "$o0r" = "$o0"

echo "$fails failed"
[ "$fails" -eq 0 ]
