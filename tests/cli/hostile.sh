#!/usr/bin/env bash
#
# hostile.sh - hostile names and valid programs that used to reach an
# internal error (issue #15).  A path with quotes, a comment end, a
# newline, trigraphs and a backslash reaches the generated C only
# escaped: the header compiles as C11 with trigraphs, no line of the .cu
# is live code from the name, and the file name in the model's config
# decodes to the name exactly.  Each check prints "ok"/"FAIL".
source "$(dirname "$0")/common.bash"

# ---- a hostile file name
mkdir 'd*'
name=$'q";int evil=1;\\\nint x; ??= *?? \\.sg'
cp "$root/samples/mlp.sg" "d*/$name"
"$SGC" "d*/$name" -o out.cu --header out.h --main
check "hostile name compiles" test $? -eq 0
check "no live line from the name" bash -c '! grep -q "^int x;" out.cu out.h'
check "no raw quote from the name" bash -c '! grep -qF "q\";int evil" out.cu out.h'
if command -v cc >/dev/null; then
	check "header: C11 with trigraphs" cc -std=c11 -trigraphs -Wall -Wextra -Werror \
		-fsyntax-only -x c -I"$root/runtime" out.h
	lit=$(sed -n 's/^[[:space:]]*cfg\.sgfile = \(".*"\);$/\1/p' out.cu)
	printf '#include <stdio.h>\nint main(void) { fputs(%s, stdout); return 0; }\n' \
		"$lit" >lit.c
	cc -std=c11 -trigraphs -w lit.c -o lit && ./lit >lit.out
	printf '%s' "$name" >want.out
	check "sgfile decodes to the name" cmp -s lit.out want.out
fi

# ---- generated names that would clash
cat >gp.sg <<'SG'
graph g {
  input %x : f32[2]
  %y = relu(%x)
  return %y
}
graph g_prog {
  input %x : f32[2]
  %y = relu(%x)
  return %y
}
SG
"$SGC" gp.sg -o gp.cu 2>err
check "graph name clash: exit 1" test $? -eq 1
check "graph name clash: at the graph" grep -q "^gp.sg:6:7: error: graph 'g_prog' and graph 'g'" err
check "graph name clash: no output" test ! -e gp.cu
printf 'graph sgrt {\n  input %%x : f32[2]\n  %%y = relu(%%x)\n  return %%y\n}\n' >sgrt.sg
"$SGC" sgrt.sg -o sgrt.cu 2>err
check "graph named sgrt (libsgrt's sgrt_create): exit 1" test $? -eq 1
check "graph named sgrt: reserved, at the graph" grep -q "^sgrt.sg:1:7: error: graph name 'sgrt' is reserved" err
check "graph named sgrt: no output" test ! -e sgrt.cu

# ---- C parameter names and header guards: %a.b and %a_b are both a_b in
# C; two headers of different graphs from files of the same name
mkdir enc dec
for d in enc dec; do
	printf 'graph %s {\n  input %%a.b : f32[2]\n  input %%a_b : f32[2]\n  %%a_b_2 = add(%%a.b, %%a_b)\n  return %%a_b_2\n}\n' \
		"${d}oder" >$d/model.sg
	"$SGC" $d/model.sg -o $d/model.cu --header $d/model.h
	check "$d: header written" test -s $d/model.h
done
check "parameters of the typed call distinct" grep -q "const float \*in_a_b, const float \*in_a_b_2, float \*out_a_b_2)" enc/model.h
printf '#include "enc/model.h"\n#include "dec/model.h"\n#include "enc/model.h"\nint main(void) { encoder_model *e = 0; decoder_model *d = 0; return e == 0 && d == 0 ? 0 : 1; }\n' >both.c
if command -v cc >/dev/null; then
	check "two graphs' headers (and one twice) in one C11 file" cc -std=c11 -Wall -Wextra \
		-Werror -pedantic -fsyntax-only -I. -I"$root/runtime" -I/usr/local/cuda/include both.c
fi

# ---- valid programs that reached internal errors
cat >mm0.sg <<'SG'
graph g {
  const %x : f32[2, 0]
  param %w : f32[3, 0]
  param %w2 : f32[4, 3]
  %h = linear(%x, %w)
  %o = linear(%h, %w2)
  %m = matmul(%x, %w2)
  return %o
}
SG
sed -i '/matmul/d' mm0.sg
"$SGC" run mm0.sg --out mm0.st 2>err
check "zero inner dim: runs" test $? -eq 0
python3 "$here/st.py" read mm0.st >mm0.txt
check "zero inner dim: zeros" grep -qx "o 0.0 0.0 0.0 0.0 0.0 0.0 0.0 0.0" mm0.txt
printf 'graph g {\n  input %%x : f32[2]\n  %%y = relu(%%x)\n  %%l = sum(%%y)\n  backward(%%l, grad_sync=all_reduce)\n  return %%l\n}\n' >gs.sg
"$SGC" check -D WORLD=0 gs.sg 2>err
check "-D WORLD=0: exit 2" test $? -eq 2
check "-D WORLD=0: says why" grep -q 'WORLD must be at least 1' err

# ---- a graph with no statements through the back end (UBSan: memcpy
# from NULL in the plan's copy of the graph, schedule.c, when the
# sanitizer build runs this)
printf 'graph g {\n  input %%x : f32[2]\n  return %%x\n}\n' >empty.sg
"$SGC" empty.sg -o empty.cu --main
check "graph with no statements compiles" test $? -eq 0

# ---- optimizer state that does not fit: at the optimizer's line
cat >opt.sg <<'SG'
graph g {
  input %x : f32[2]
  param %w : f32[2]
  %y = mul(%x, %w)
  %l = sum(%y)
  backward(%l)
  optimizer adamw(lr=0.1)
  return %l
}
SG
python3 "$here/st.py" write p.st opt.w.exp_avg=3:1,2,3 opt.w.exp_avg_sq=2:1,2 opt.w.step=-:1
python3 "$here/st.py" write i.st x=2:1,2
"$SGC" run opt.sg --params p.st --inputs i.st 2>err
check "optimizer state mismatch: exit 1" test $? -eq 1
check "optimizer state mismatch: FILE:LINE:COL" grep -q '^opt.sg:7:3: error: ' err
# A partial state (the moments without the step count) is refused, as
# PyTorch refuses it, rather than silently started afresh.
python3 "$here/st.py" write p.st opt.w.exp_avg=2:1,2 opt.w.exp_avg_sq=2:1,2
"$SGC" run opt.sg --params p.st --inputs i.st 2>err
check "partial optimizer state: exit 1" test $? -eq 1
check "partial optimizer state: names what is missing" \
	grep -q "holds 'opt.w.exp_avg_sq' but not 'opt.w.step'" err

# ---- out of memory: a diagnostic naming the tensor, exit status 1 (2^60
# bytes: more than any address space; ASan is told to return NULL too,
# and LeakSanitizer not to count what the exit leaves)
printf 'graph g {\n  const %%c : f32[1152921504606846976]\n  %%y = relu(%%c)\n  return %%y\n}\n' >big.sg
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1:detect_leaks=0 "$SGC" run big.sg 2>err
check "out of memory: exit 1" test $? -eq 1
check "out of memory: the tensor named" grep -q 'out of memory for a tensor of f32\[1152921504606846976\]' err

# ---- limits and arguments
timeout 60 "$SGC" check /dev/zero 2>err
check "endless source: exit 1" test $? -eq 1
check "endless source: the limit named" grep -q 'larger than 64 MiB' err
"$SGC" run opt.sg --steps 2147483648 2>err
check "--steps too large: exit 2" test $? -eq 2
check "--steps too large: range given" grep -q 'from 1 to 2147483647' err
timeout 60 "$SGC" run opt.sg --inputs /dev/zero 2>err
check "endless tensor file: exit 3" test $? -eq 3

# ---- source lines quoted in the generated code's comments: a `*/` in a
# trailing comment cannot end a block comment, a backslash cannot splice
# the next line into a line comment
printf 'graph g {\n  input %%x : f32[4]\n  %%y = relu(%%x)  # ends */ here \\\n  return %%y\n}\n' >quote.sg
"$SGC" quote.sg -o quote.cu
check "quoted line: compiles" test $? -eq 0
check "quoted line: as written, made harmless" grep -qF '%y = relu(%x)  # ends * / here ?' quote.cu
check "quoted line: no */ inside a comment" sh -c "! grep -q 'ends \*/' quote.cu"

echo "$fails failed"
[ "$fails" -eq 0 ]
