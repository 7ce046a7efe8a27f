#!/usr/bin/env bash
#
# fuzz/programs_of.sh OUTDIR N CORPUS... - the .sg programs that
# fuzz_programs generates from the inputs of its corpus directories, for
# running elsewhere (tests/gpu/run_gpu_tests.sh: EXTRA=OUTDIR compares the
# CUDA backend's results with the interpreter's on them).
#
# Writes every program to a scratch directory (fuzz_programs with
# FUZZ_PROGRAMS_DIR set writes instead of checking), keeps those that
# `sgc check` accepts on one rank, and
# copies at most N of them to OUTDIR, each time the one with the most ops
# (and pairs of neighbouring ops) not yet covered, then the most ops: the
# N cover as many as the corpus does.  Needs build-fuzz (fuzz/make.sh)
# and build-dev/compiler/sgc (SGC=... for another).

set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: fuzz/programs_of.sh OUTDIR N CORPUS..." >&2; exit 2; }
out=$1 n=$2
shift 2
sgc=${SGC:-build-dev/compiler/sgc}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/all" "$out"
FUZZ_PROGRAMS_DIR=$scratch/all build-fuzz/fuzz_programs -runs=0 "$@" >/dev/null 2>&1
for f in "$scratch"/all/*.sg; do
	grep -q '^dim WORLD' "$f" && continue
	"$sgc" check "$f" >/dev/null 2>&1 || continue
	# its features: each op, and each pair of ops one after the other
	sed -n 's/^ *%[A-Za-z0-9_.]* = \([a-z_0-9]*\)(.*/\1/p' "$f" |
		awk -v f="$f" 'NR > 1 { print f, p "+" $1 } { print f, $1; p = $1 }'
done >"$scratch/features"
# greedy cover: the program adding the most features not yet covered;
# once none adds any, the largest of the rest
awk -v n="$n" '
	{ has[$1] = has[$1] " " $2; size[$1]++ }
	END {
		for (k = 0; k < n; k++) {
			best = ""; bn = -1
			for (f in has) {
				c = 0; m = split(has[f], a, " ")
				for (i = 1; i <= m; i++)
					if (!(a[i] in seen))
						c++
				key = c * 1000 + size[f]
				if (key > bn || (key == bn && f < best)) { best = f; bn = key }
			}
			if (best == "") break
			m = split(has[best], a, " ")
			for (i = 1; i <= m; i++) seen[a[i]] = 1
			print best
			delete has[best]
		}
	}' "$scratch/features" | while read -r f; do cp "$f" "$out/"; done
echo "$(ls "$out" | wc -l) programs in $out"
