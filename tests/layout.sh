#!/usr/bin/env bash
#
# layout.sh - the stages of compiler/ read only the stages before them
# (compiler/README.md): every `#include "..."` of a file in a stage folder
# names a header of that stage or of one it may read.  ops/ (the op table,
# which names every stage's function for each op) and main.c read all.
#
#   ir/       sgc.h
#   passes/   sgc.h passes.h
#   interp/   sgc.h interp.h
#   backend/  sgc.h passes.h backend.h codegen.h
#
# (plus half.h and ops.def, and the runtime's host headers, sgrt_out.h,
# init.h, safetensors.h, sgk/sgk_pointwise.h, sgk/sgk_random.h and
# sgk/sgk_gemm_small.h: leaves that include nothing of the compiler).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/compiler" || exit 2
leaf="half.h ops.def sgrt_out.h init.h safetensors.h sgk/sgk_pointwise.h sgk/sgk_random.h sgk/sgk_gemm_small.h"
allowed() {
	case $1 in
	ir) echo "sgc.h $leaf" ;;
	passes) echo "sgc.h passes.h $leaf" ;;
	interp) echo "sgc.h interp.h $leaf" ;;
	backend) echo "sgc.h passes.h backend.h codegen.h $leaf" ;;
	esac
}
fails=0 files=0
for stage in ir passes interp backend; do
	ok=" $(allowed $stage) "
	for f in "$stage"/*.[ch]; do
		files=$((files + 1))
		while IFS= read -r inc; do
			if [[ $ok != *" $inc "* ]]; then
				echo "FAIL $f includes \"$inc\": stage $stage reads only: $(allowed $stage)"
				fails=$((fails + 1))
			fi
		done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
	done
done
# every stage folder present, nothing left at the top but main.c
for f in *.c *.h; do
	[ -e "$f" ] || continue
	[ "$f" = main.c ] && continue
	echo "FAIL compiler/$f: not in a stage folder"
	fails=$((fails + 1))
done
echo "layout: $files files checked, $fails violations"
[ "$fails" -eq 0 ] && [ "$files" -gt 40 ]
