#!/usr/bin/env bash
#
# offload_views.sh - --offload=auto takes the saved views of one source as
# one unit (compiler/passes/offload.c, auto_units): in
# tests/golden/off_auto_views.sg, attention's %q, %k and %v (views of
# %qkv) go to the host together at --offload-budget=0, after the values
# that are no views; a view of a param and a view of a returned value do
# not; the budget of the transformer's 60% row is reached; and the
# interpreter computes the same bytes with and without the copies.
source "$(dirname "$0")/common.bash"

g=$root/tests/golden/off_auto_views.sg
"$SGC" check "$g" --offload=auto --offload-budget=0 --dump-after=offload 2>dump.txt
check "exit 0" test $? -eq 0
for v in q k v att3 y; do
	check "%$v offloaded" grep -q "^    %$v.host = to_host(%$v)$" dump.txt
done
check "five values in all" grep -q "^# offload: graph 'off_views': 5 values (5120 bytes) to the host" dump.txt
check "a param's view stays" bash -c '! grep -q "to_host(%wt)" dump.txt'
check "a returned value's view stays" bash -c '! grep -q "to_host(%e" dump.txt'

# 1024 bytes over the budget: %y (1024 bytes, no view) rather than %att3
# (a view of as many bytes): units with views come last
"$SGC" check "$g" --offload=auto --offload-budget=72704 --dump-after=offload 2>one.txt
check "no view where a value will do" test "$(grep -o 'to_host(%[a-z0-9]*' one.txt | tr '\n' ' ')" = "to_host(%y "
# 2048 bytes over after %y: the unit of three views (3072 bytes), not two
# single views of which one would be of %qkv
"$SGC" check "$g" --offload=auto --offload-budget=70656 --dump-after=offload 2>gap.txt
n=$(grep -c '= to_host(%[qkv])$' gap.txt)
check "q, k, v together ($n)" test "$n" = 3

python3 - <<'PY'
import json, struct
n = 2 * 8 * 16
x = struct.pack("<%df" % n, *[((i * 37) % 101 - 50) / 64 for i in range(n)])
h = json.dumps({"x": {"dtype": "F32", "shape": [2, 8, 16], "data_offsets": [0, len(x)]}}).encode()
h += b" " * (-len(h) % 8)
open("in.st", "wb").write(struct.pack("<Q", len(h)) + h + x)
PY
"$SGC" run "$g" --inputs in.st --out plain.st --seed 1 --steps 2
check "run: exit 0" test $? -eq 0
"$SGC" run "$g" --offload=auto --offload-budget=0 --inputs in.st --out off.st --seed 1 --steps 2
check "run offloaded: exit 0" test $? -eq 0
check "the same outputs, params and state" cmp -s plain.st off.st

# the transformer: the budget of the 60% row is reached (it was not before
# views were taken: 3.36 GB at best), and a budget of 0 offloads whatever
# lowers the peak: every value backward reads but six of the last block's
# (%l7.q, %l7.k, %l7.v, %l7.att3, %l7.h2, and %l7.g, which remat keeps
# from forward) and the loss's %yf, which backward reads first
"$SGC" check "$root/bench/transformer.sg" --offload-budget=2200000000 2>t.txt
check "transformer at 2.2 GB: no warning" test ! -s t.txt
"$SGC" check "$root/bench/transformer.sg" --offload-budget=0 --dump-after=offload 2>t0.txt
check "transformer at 0: 66 values to the host" \
	grep -q "^# offload: graph 'transformer': 66 values (6039797760 bytes) to the host" t0.txt

echo "$fails failed"
[ "$fails" -eq 0 ]
