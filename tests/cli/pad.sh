#!/usr/bin/env bash
#
# pad.sh - pass `pad_products` (-O2, compiler/passes/pad.c): products
# whose result rows are misaligned compute zero-padded columns and slice
# them off, which changes no result, bit for bit; -O0 does not pad.
source "$(dirname "$0")/common.bash"

g=$root/tests/golden/bw_pad_products.sg
"$SGC" check "$g" --dump-after=pad_products 2>dump.txt
check "bw_pad_products: both products padded to 1008 columns" \
	test "$(grep -c '^  %[yz]_padded = \(linear\|matmul\)' dump.txt)" = 2
"$SGC" check "$g" -O0 --dump-after=pad_products 2>dump0.txt
check "-O0: nothing padded" test "$(grep -c '_padded' dump0.txt)" = 0
# x: bf16 (the top halves of f32s) of shape $1, t: i64 [160]
inputs() {
	python3 - "$1" <<'PY'
import json, struct, sys
shape = [int(d) for d in sys.argv[1].split("x")]
n = 1
for d in shape:
    n *= d
x = b"".join(struct.pack("<f", (i * 37 % 101 - 50) / 64)[2:] for i in range(n))
t = struct.pack("<160q", *[i * 7 % 1001 for i in range(160)])
h = {"t": {"dtype": "I64", "shape": [160], "data_offsets": [0, len(t)]},
     "x": {"dtype": "BF16", "shape": shape, "data_offsets": [len(t), len(t) + len(x)]}}
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open("in.st", "wb").write(struct.pack("<Q", len(hb)) + hb + t + x)
PY
}
inputs 160x128
# Two steps of $g on in.st at -O2 and -O0: the same bytes.
same_bytes() {
	"$SGC" run "$g" --inputs in.st --steps 2 --out o2.st
	check "$1 -O2 run: exit 0" test $? -eq 0
	"$SGC" run -O0 "$g" --inputs in.st --steps 2 --out o0.st
	check "$1 -O0 run: exit 0" test $? -eq 0
	check "$1: the same bytes padded and not (loss, params, gradients)" cmp -s o2.st o0.st
}
same_bytes products

# A language model's head: logits read only by cross_entropy keep their
# padded columns, -inf in the bias, nothing sliced.
g=$root/tests/golden/bw_pad_logits.sg
"$SGC" check "$g" --dump-after=pad_products 2>dump.txt
check "bw_pad_logits: the head is 1008 wide with a -inf bias" \
	grep -q '^  %y = linear(%x, %w_padded, %pad_bias.1)' dump.txt
check "bw_pad_logits: nothing sliced" test "$(grep -c 'slice(' dump.txt)" = 0
inputs 4x40x128
same_bytes head

# GPT-2's tied language-model head (bench/gpt2.sg, 50257 words): padded,
# its gradient products too; the hidden products (768, 2304, 3072
# columns) are aligned and left alone.
"$SGC" check "$root/bench/gpt2.sg" --dump-after=all 2>gpt2.txt
check "gpt2: the head is padded to 50264 words" \
	grep -q '^  %linear = linear(%layer_norm_24, %m.transformer.wte.weight_padded, %pad_bias.1)' gpt2.txt
check "gpt2: one product padded" \
	test "$(sed -n "/^# after pass 'pad_products'/,/^# after pass/p" gpt2.txt | grep -c ' = linear(.*_padded')" = 1

echo "$fails failed"
[ "$fails" -eq 0 ]
