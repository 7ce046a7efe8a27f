#!/usr/bin/env bash
#
# run_cg_golden.sh - golden tests of the CUDA backend: cg_NAME.sg beside
# the CUDA C that sgc must write for it, cg_NAME.cu.
#
#   run_cg_golden.sh SGC FILE.sg...             check each file
#   run_cg_golden.sh --update SGC FILE.sg...    rewrite the expectations
#
# The command, run in the file's directory so that the output names the
# file as NAME.sg, is
#
#   SGC NAME.sg --emit=cu -o - ARGS
#
# with ARGS the words of NAME.cgargs when it exists (e.g. `-O2 --main`),
# else -O0, and --no-line except for cg_line*.sg, the goldens of the #line
# directives (so that the others show the code without them).  It must
# exit 0 with nothing on stderr and print NAME.cu.
#
# Exit status: 0 all passed, 1 a test failed, 2 usage.

set -u
export NO_COLOR=1 LC_ALL=C
update=0
if [ "${1:-}" = --update ]; then
	update=1
	shift
fi
if [ $# -lt 2 ]; then
	sed -n '3,16s/^# \{0,1\}//p' "$0" >&2
	exit 2
fi
sgc=$1
shift
case $sgc in /*) ;; *) sgc=$PWD/$sgc ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cggolden.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
rc=0
for file in "$@"; do
	dir=$(dirname "$file")
	base=$(basename "$file")
	stem=$dir/${base%.sg}
	args=(-O0)
	if [ -f "$stem.cgargs" ]; then
		# shellcheck disable=SC2207
		args=($(grep -v '^#' "$stem.cgargs"))
	fi
	case $base in cg_line*) ;; *) args+=(--no-line) ;; esac
	(cd "$dir" && "$sgc" "$base" --emit=cu -o - "${args[@]}") >"$tmp/out" 2>"$tmp/err"
	status=$?
	if [ $status -ne 0 ] || [ -s "$tmp/err" ]; then
		echo "FAIL $file: exit $status"
		sed 's/^/    /' "$tmp/err" | head -n 40
		rc=1
		continue
	fi
	if [ $update -eq 1 ]; then
		cp "$tmp/out" "$stem.cu"
		echo "updated $file"
	elif ! cmp -s "$stem.cu" "$tmp/out"; then
		echo "FAIL $file: the CUDA output differs from ${stem##*/}.cu"
		diff -u --label "expected: $stem.cu" --label actual "$stem.cu" "$tmp/out" | head -n 200
		rc=1
	else
		echo "ok $file"
	fi
done
exit $rc
