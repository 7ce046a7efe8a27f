#!/usr/bin/env bash
#
# copy_then_write.sh - a copy of an input keeps the input's old values when
# the input is written afterwards (tests/golden/ok_copy_then_write.sg):
# `sgc run`, -O0, a random stream interleaving and the printed IR compiled
# again give PyTorch's values (computed by hand below).
source "$(dirname "$0")/common.bash"
st() { python3 "$here/st.py" "$@"; }
g=$root/tests/golden/ok_copy_then_write.sg
st write in.st x=4:1,2,3,4 z=4:10,20,30,40 y=4:5,6,7,8 w=4:-1,-2,-3,-4
# a = 2 x = 2 4 6 8; b = 3 y (2x2) = 15 18 21 24; c = sum(w + 1) = -6;
# --out also holds x = z and y = w + 1.
want="a 2.0 4.0 6.0 8.0
b 15.0 18.0 21.0 24.0
c -6.0
x 10.0 20.0 30.0 40.0
y 0.0 -1.0 -2.0 -3.0"
for opt in -O2 -O0 --interleave=7; do
	"$SGC" run "$g" $opt --inputs in.st --out out.st
	check "sgc run $opt: exit 0" test $? -eq 0
	check "sgc run $opt: PyTorch's values" test "$(st read out.st)" = "$want"
done
# A copy of a param, read after the step (tests/golden/bw_copy_param.sg):
# l = sum(x w) = 300, r = w as it was, w = w - 0.5 x (PyTorch's values).
st write px.st x=4:1,2,3,4
st write pw.st w=4:10,20,30,40
"$SGC" run "$root/tests/golden/bw_copy_param.sg" --inputs px.st --params pw.st --out pout.st
check "copy of a param: exit 0" test $? -eq 0
check "copy of a param: its values before the step, the step's gradient through it" \
	test "$(st read pout.st)" = "l 300.0
r 10.0 20.0 30.0 40.0
w 9.5 19.0 28.5 38.0"

"$SGC" "$g" --emit=ir -o printed.sg
"$SGC" run printed.sg --inputs in.st --out out2.st
check "the printed IR: PyTorch's values" test "$(st read out2.st)" = "$want"
"$SGC" printed.sg --emit=ir -o printed2.sg
check "the printed IR prints again the same" cmp -s printed.sg printed2.sg

echo "$fails failed"
[ "$fails" -eq 0 ]
