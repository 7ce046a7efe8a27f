#!/usr/bin/env bash
#
# chain.sh - `sgc run --steps N` and N runs of --steps 1 chained through
# the files give the same --out (interface.md, "The driver"), for a graph
# that writes only some of its inputs: --out holds the written ones, so
# the next run reads --inputs twice, the first file for the inputs it
# does not write, the --out file for those it does (interpreter.md,
# "Files").
source "$(dirname "$0")/common.bash"
st() { python3 "$here/st.py" "$@"; }
cat > g.sg <<'SG'
graph g {
  input %x : f32[4]
  input %c : f32[4]
  param %w : f32[4]
  %y = mul(%x, %w)
  %z = add(%y, %c)
  copy_(%x, %z)
  %l = sum(%z)
  backward(%l)
  optimizer sgd(lr=0.1)
  return %l
}
SG
st write in.st x=4:1,2,3,4 c=4:0.5,-1,0.25,2
"$SGC" run g.sg --inputs in.st --steps 3 --out three.st
check "--steps 3: exit 0" test $? -eq 0
"$SGC" run g.sg --inputs in.st --out o1.st
"$SGC" run g.sg --params o1.st --inputs in.st --inputs o1.st --out o2.st
check "second run, --inputs twice: exit 0" test $? -eq 0
"$SGC" run g.sg --params o2.st --inputs in.st --inputs o2.st --out o3.st
check "three chained runs give --steps 3's --out" cmp -s three.st o3.st
check "x written, c not: --out has x and no c" \
	test "$(st read o1.st | cut -d' ' -f1 | tr '\n' ' ')" = "l w x "
# The order matters: the later file wins, so in.st last gives x's first value.
"$SGC" run g.sg --params o1.st --inputs o1.st --inputs in.st --out o2b.st
differ() { ! cmp -s "$1" "$2"; }
check "in.st last: its x used (not --steps 2's --out)" differ o2.st o2b.st
"$SGC" run g.sg --inputs in.st --steps 2 --out two.st
check "--steps 2 equals the chained second run" cmp -s two.st o2.st
# Each file is checked: a tensor of the wrong shape in the second file is
# an error naming that file; an input in neither file says so.
st write bad.st x=3:1,2,3
"$SGC" run g.sg --inputs in.st --inputs bad.st --out bad_out.st 2>err.txt
check "wrong shape in the second file: exit 1" test $? -eq 1
check "wrong shape: names bad.st" grep -q "bad.st" err.txt
check "wrong shape: no --out" test ! -e bad_out.st
st write xonly.st x=4:1,2,3,4
"$SGC" run g.sg --inputs xonly.st --inputs xonly.st 2>err.txt
check "c in neither file: exit 1" test $? -eq 1
check "c in neither file: said so" grep -q "input '%c' is in none of the 2 --inputs files" err.txt
st write extra.st x=4:1,2,3,4 y=4:1,2,3,4
"$SGC" run g.sg --inputs in.st --inputs extra.st 2>err.txt
check "an extra name in the second file: exit 1" test $? -eq 1
check "an extra name: named" grep -q "'y'" err.txt
"$SGC" run g.sg --inputs in.st --inputs missing.st 2>err.txt
check "an unreadable second file: exit 3" test $? -eq 3
args=()
for k in 1 2 3 4 5 6 7 8 9; do args+=(--inputs in.st); done
"$SGC" run g.sg "${args[@]}" 2>err.txt
check "nine --inputs: usage error (exit 2)" test $? -eq 2
check "nine --inputs: at most 8" grep -q "at most 8 --inputs files" err.txt
# A returned input is written once: %x as read, %c as written by copy_
# (tests/golden/st_return_input.sg; the driver's table has each twice).
"$SGC" run "$here/../golden/st_return_input.sg" --inputs in.st --params o1.st \
	--allow-extra --out ri.st
check "returned inputs: exit 0" test $? -eq 0
w=$(st read o1.st | grep '^w ' | cut -d' ' -f2-)
check "returned inputs: c, w, x, y once each" \
	test "$(st read ri.st | cut -d' ' -f1 | tr '\n' ' ')" = "c w x y "
check "returned inputs: x as read" test "$(st read ri.st | grep '^x ')" = "x 1.0 2.0 3.0 4.0"
check "returned inputs: c = y = x * w" test "$(st read ri.st | grep '^c ' | cut -d' ' -f2-)" = \
	"$(st read ri.st | grep '^y ' | cut -d' ' -f2-)"
check "returned inputs: w as loaded" test "$(st read ri.st | grep '^w ' | cut -d' ' -f2-)" = "$w"

echo "$fails failed"
[ "$fails" -eq 0 ]
