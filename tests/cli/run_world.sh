#!/usr/bin/env bash
#
# run_world.sh - `sgc run` with WORLD above 1 simulates every rank in one
# process (issue #15): collectives are exact, "{rank}" in a path names each
# rank's file, and a data-parallel step with grad_sync=all_reduce gives
# every rank the mean of the gradients that WORLD=1 runs of each rank's
# input give.
source "$(dirname "$0")/common.bash"
st() { python3 "$here/st.py" "$@"; }

cat >coll.sg <<'SG'
dim WORLD = 2
graph g {
  input %x : f32[4, 2]
  %s = all_reduce(%x, op="sum")
  %a = all_reduce(%x, op="avg")
  %mx = all_reduce(%x, op="max")
  %ga = all_gather(%x, dim=1)
  %rs = reduce_scatter(%x, op="sum", dim=0)
  %aa = all_to_all(%x, dim=0)
  %b = broadcast(%x, root=1)
  return %s, %a, %mx, %ga, %rs, %aa, %b
}
SG
st write in0.st x=4x2:1,2,3,4,5,6,7,8
st write in1.st x=4x2:10,20,30,40,50,60,70,80
"$SGC" run coll.sg --inputs 'in{rank}.st' --out 'out{rank}.st'
check "collectives run: exit 0" test $? -eq 0
st read out0.st >r0
st read out1.st >r1
expect() { # rank file, name, values
	check "rank $1 $2" grep -qx "$2 $3" "r$1"
}
expect 0 s "11.0 22.0 33.0 44.0 55.0 66.0 77.0 88.0"
expect 1 s "11.0 22.0 33.0 44.0 55.0 66.0 77.0 88.0"
expect 0 a "5.5 11.0 16.5 22.0 27.5 33.0 38.5 44.0"
expect 1 mx "10.0 20.0 30.0 40.0 50.0 60.0 70.0 80.0"
expect 0 ga "1.0 2.0 10.0 20.0 3.0 4.0 30.0 40.0 5.0 6.0 50.0 60.0 7.0 8.0 70.0 80.0"
expect 0 rs "11.0 22.0 33.0 44.0"
expect 1 rs "55.0 66.0 77.0 88.0"
expect 0 aa "1.0 2.0 3.0 4.0 10.0 20.0 30.0 40.0"
expect 1 aa "5.0 6.0 7.0 8.0 50.0 60.0 70.0 80.0"
expect 0 b "10.0 20.0 30.0 40.0 50.0 60.0 70.0 80.0"
# Without {rank}, --out is rank 0's alone.
"$SGC" run coll.sg --inputs 'in{rank}.st' --out one.st
st read one.st >r
check "--out without {rank}: rank 0's" cmp -s r r0

# Data parallel: the synchronised gradient is the mean over the ranks.
cat >dp.sg <<'SG'
dim WORLD = 2
graph dp {
  input %x : f32[3, 2]
  param %w : f32[2, 2]
  %h = linear(%x, %w)
  %t = tanh(%h)
  %loss = mean(%t)
  backward(%loss, grad_sync=all_reduce)
  return %loss
}
SG
st write x0.st x=3x2:0.5,-1,2,0.25,-0.75,1.5
st write x1.st x=3x2:-2,1,0.125,3,1,-0.5
"$SGC" run dp.sg --inputs 'x{rank}.st' --out 'dp{rank}.st'
check "data parallel run: exit 0" test $? -eq 0
sed 's/dim WORLD = 2/dim WORLD = 1/; s/, grad_sync=all_reduce//' dp.sg >one.sg
"$SGC" run one.sg --inputs x0.st --out g0.st && "$SGC" run one.sg --inputs x1.st --out g1.st
check "single-rank runs: exit 0" test $? -eq 0
python3 - "$here/st.py" <<'PY'
import subprocess, sys
def grads(f):
    out = subprocess.run([sys.executable, sys.argv[1], "read", f], capture_output=True, text=True).stdout
    return {l.split()[0]: [float(v) for v in l.split()[1:]] for l in out.splitlines()}
g0, g1, d0, d1 = (grads(f)["grad.w"] for f in ("g0.st", "g1.st", "dp0.st", "dp1.st"))
mean = [(a + b) / 2 for a, b in zip(g0, g1)]
ok = d0 == d1 and all(abs(m - d) <= 1e-6 * max(1, abs(m)) for m, d in zip(mean, d0))
print("ok   grad_sync mean of ranks" if ok else "FAIL grad_sync: %s %s %s" % (mean, d0, d1))
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] || fails=$((fails + 1))

# The same under --interleave.
"$SGC" run dp.sg --inputs 'x{rank}.st' --out 'il{rank}.st' --interleave=3
st read il0.st >a
st read dp0.st >b
check "interleaved: same as program order" cmp -s a b

# Integer collectives are exact beyond 2^53 (they went through doubles),
# and a sum wraps as NCCL's does.
cat >coll64.sg <<'SG'
dim WORLD = 2
graph g {
  input %x : i64[2]
  %s = all_reduce(%x, op="sum")
  %m = all_reduce(%x, op="max")
  %b = broadcast(%x, root=0)
  %g = all_gather(%x, dim=0)
  return %s, %m, %b, %g
}
SG
st write i0.st x=2:i64:9007199254740993,9223372036854775807
st write i1.st x=2:i64:2,1
"$SGC" run coll64.sg --inputs 'i{rank}.st' --out 'o64{rank}.st'
check "i64 collectives run: exit 0" test $? -eq 0
st read o641.st >r1
expect 1 s "9007199254740995 -9223372036854775808"
expect 1 m "9007199254740993 9223372036854775807"
expect 1 b "9007199254740993 9223372036854775807"
expect 1 g "9007199254740993 9223372036854775807 2 1"

# broadcast's derivative (torch.distributed.nn's): every rank's gradient
# summed onto the root, zeros on the others; a 0-d operand too.
cat >bgrad.sg <<'SG'
dim WORLD = 3
graph g {
  input %x : f32[2]
  input %s : f32[]
  param %w : f32[2]
  param %u : f32[]
  %y = mul(%x, %w)
  %b = broadcast(%y, root=1)
  %z = mul(%s, %u)
  %c = broadcast(%z, root=2)
  %q = mul(%b, %x)
  %l0 = sum(%q)
  %l = add(%l0, %c)
  backward(%l)
  return %l
}
SG
for r in 0 1 2; do st write bg$r.st x=2:$((r + 1)),$((r + 2)) s=-:$((r + 5)); done
st write bgp.st w=2:0.5,-1.5 u=-:2
"$SGC" run bgrad.sg --inputs 'bg{rank}.st' --params bgp.st --out 'bgo{rank}.st'
check "broadcast's derivative: exit 0" test $? -eq 0
for r in 0 1 2; do st read bgo$r.st >r$r; done
expect 0 grad.w "0.0 0.0"
expect 1 grad.w "12.0 27.0"
expect 2 grad.w "0.0 0.0"
expect 1 grad.u "0.0"
expect 2 grad.u "21.0"

# An all_reduce over 100000 ranks is computed once, not once a rank (that
# took minutes).
cat >wide.sg <<'SG'
graph g {
  input %x : f32[4, 2]
  %c = all_reduce(%x, op="avg")
  return %c
}
SG
timeout 60 "$SGC" run wide.sg -D WORLD=100000 --inputs in0.st --out wide.st
check "WORLD=100000: done within a minute" test $? -eq 0
st read wide.st >r0
expect 0 c "1.0 2.0 3.0 4.0 5.0 6.0 7.0 8.0"

echo "$fails failed"
[ "$fails" -eq 0 ]
