#!/usr/bin/env bash
# line_directives.sh - the #line directives of generated code (docs/guide.md,
# "Debugging at .sg lines"): none stands among a macro's arguments (ISO C++
# leaves that undefined; the C preprocessor with -Wpedantic rejects it), and
# each `#line N "FILE.cu"` after a mapped region gives the line after it
# its true number in the .cu file.
source "$(dirname "$0")/common.bash"
cuda=${CUDA_HOME:-/usr/local/cuda}
cxx=${CXX:-g++}
for src in samples/mlp.sg samples/gpt.sg bench/transformer.sg tests/golden/cg_attn.sg; do
	name=$(basename "$src" .sg)
	check "$name: sgc -O2" "$SGC" -O2 "$root/$src" -o "$name.cu"
	check "$name: no directive among a macro's arguments (cpp -Wpedantic -Werror)" \
		"$cxx" -E -x c++ -std=c++17 -Wpedantic -Werror -I"$cuda/include" -I"$root/runtime" \
		"$name.cu" -o /dev/null
	check "$name: #line back to the .cu file gives the next line's number" \
		awk -v f="\"$name.cu\"" '$1 == "#line" && $3 == f && $2 != NR + 1 { bad++ } END { exit bad > 0 }' \
		"$name.cu"
	check "$name: every kernel launch and library call is mapped" \
		awk '/SGRT_KERNEL\(/ && prev !~ /^#line [0-9]+ "/ { bad++ } { prev = $0 } END { exit bad > 0 }' \
		"$name.cu"
done
echo "line_directives: $fails failed"
[ "$fails" -eq 0 ]
