#!/usr/bin/env bash
#
# run_golden.sh - golden tests: NAME.sg beside its expected output.
#
#   run_golden.sh SGC FILE.sg...              check each file
#   run_golden.sh --update SGC FILE.sg...     rewrite the expectations
#   run_golden.sh --roundtrip SGC FILE.sg...  check that --emit=ir output
#                                             parses and prints unchanged
#
# For NAME.sg the command is, run in NAME.sg's directory so that
# diagnostics name the file as NAME.sg:
#
#   SGC NAME.sg --emit=ir -o - ARGS
#
# where ARGS are the words of NAME.args when that file exists (e.g.
# `-D B=8 --allow-races`).  Expectations:
#
#   NAME.ir only    exit 0, standard output == NAME.ir, nothing on stderr
#   NAME.err only   exit 1, standard error == NAME.err, nothing on stdout
#   both            exit 0, stdout == NAME.ir, stderr == NAME.err
#                   (a program that compiles with warnings)
#
# --update runs the command and writes NAME.ir (exit 0) or NAME.err
# (exit 1; stderr on exit 0 too), deleting a stale one; any other exit
# status is reported and nothing is written.  Review the diff before
# committing.
#
# --roundtrip prints FILE's IR, feeds that text back to SGC, and requires
# the second print to equal the first.  A file that does not compile
# cleanly (exit 1) is skipped (exit 77, which Meson reports as SKIP).
#
# Exit status: 0 all passed, 1 a test failed, 2 usage, 77 all skipped.

set -u
export NO_COLOR=1 TERM=dumb LC_ALL=C

mode=check
case "${1:-}" in
--update) mode=update; shift ;;
--roundtrip) mode=roundtrip; shift ;;
esac
if [ $# -lt 2 ]; then
	sed -n '3,9s/^# \{0,1\}//p' "$0" >&2
	exit 2
fi
sgc=$1
shift
case "$sgc" in
/*) ;;
*) sgc=$PWD/$sgc ;;
esac
if [ ! -x "$sgc" ]; then
	echo "run_golden.sh: $sgc: not an executable" >&2
	exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/golden.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

# Reads NAME.args into the array `extra`.
read_args() {
	extra=()
	if [ -f "$1" ]; then
		set -f
		# shellcheck disable=SC2207
		extra=($(grep -v '^#' "$1"))
		set +f
	fi
}

# Runs sgc on $dir/$base with $extra; leaves out, err and status.
run_sgc() {
	(cd "$dir" && "$sgc" "$base" --emit=ir -o - "${extra[@]+"${extra[@]}"}") \
		>"$tmp/out" 2>"$tmp/err"
	status=$?
}

# Shows a failure with the command and what sgc wrote to stderr.
fail() {
	echo "FAIL $file: $*"
	echo "  command: (cd $dir && $sgc $base --emit=ir -o - ${extra[*]+"${extra[*]}"})"
	if [ -s "$tmp/err" ]; then
		echo "  stderr:"
		sed 's/^/    /' "$tmp/err" | head -n 60
	fi
	return 1
}

# Compares expected file $1 with actual $2; prints a unified diff.
same() {
	if ! cmp -s "$1" "$2"; then
		diff -u --label "expected: $1" --label "actual" "$1" "$2" | head -n 200
		return 1
	fi
}

check_one() {
	local want=0 ok=0
	if [ ! -f "$stem.ir" ] && [ ! -f "$stem.err" ]; then
		echo "FAIL $file: no $name.ir or $name.err (create one with --update)"
		return 1
	fi
	[ -f "$stem.ir" ] || want=1
	run_sgc
	if [ "$status" -ne "$want" ]; then
		fail "exit status $status, expected $want"
		return 1
	fi
	if [ -f "$stem.ir" ]; then
		same "$stem.ir" "$tmp/out" || { echo "FAIL $file: --emit=ir output differs"; ok=1; }
	elif [ -s "$tmp/out" ]; then
		echo "FAIL $file: wrote to stdout although compilation failed:"
		head -n 20 "$tmp/out"
		ok=1
	fi
	if [ -f "$stem.err" ]; then
		same "$stem.err" "$tmp/err" || { echo "FAIL $file: diagnostics differ"; ok=1; }
	elif [ -s "$tmp/err" ]; then
		fail "unexpected output on stderr"
		ok=1
	fi
	[ $ok -eq 0 ] && echo "ok $file"
	return $ok
}

update_one() {
	run_sgc
	case $status in
	0)
		cp "$tmp/out" "$stem.ir"
		if [ -s "$tmp/err" ]; then cp "$tmp/err" "$stem.err"; else rm -f "$stem.err"; fi
		;;
	1)
		cp "$tmp/err" "$stem.err"
		rm -f "$stem.ir"
		;;
	*)
		fail "exit status $status; expectations left as they were"
		return 1
		;;
	esac
	echo "updated $file (exit $status)"
}

# The -D options of $extra removed: the printed IR already holds the sizes.
strip_dims() {
	local i=0 a
	kept=()
	while [ $i -lt ${#extra[@]} ]; do
		a=${extra[$i]}
		i=$((i + 1))
		case "$a" in
		-D) i=$((i + 1)) ;;
		-D*) ;;
		*) kept+=("$a") ;;
		esac
	done
}

roundtrip_one() {
	run_sgc
	if [ "$status" -eq 1 ]; then
		echo "skip $file: does not compile cleanly"
		return 77
	fi
	if [ "$status" -ne 0 ]; then
		fail "exit status $status"
		return 1
	fi
	mkdir -p "$tmp/rt"
	cp "$tmp/out" "$tmp/rt/first.sg"
	strip_dims
	(cd "$tmp/rt" && "$sgc" first.sg --emit=ir -o - "${kept[@]+"${kept[@]}"}") \
		>"$tmp/rt/second.sg" 2>"$tmp/err"
	status=$?
	if [ "$status" -ne 0 ]; then
		echo "FAIL $file: the printed IR does not compile again (exit $status)"
		sed 's/^/    /' "$tmp/err" | head -n 40
		echo "  printed IR:"
		head -n 80 "$tmp/rt/first.sg" | cat -n
		return 1
	fi
	if ! same "$tmp/rt/first.sg" "$tmp/rt/second.sg"; then
		echo "FAIL $file: printing the printed IR again changes it"
		return 1
	fi
	echo "ok $file (round trip)"
}

rc=0
nskip=0
nfile=0
for file in "$@"; do
	dir=$(dirname "$file")
	base=$(basename "$file")
	name=${base%.sg}
	stem=$dir/$name
	nfile=$((nfile + 1))
	if [ ! -f "$file" ]; then
		echo "FAIL $file: no such file"
		rc=1
		continue
	fi
	read_args "$stem.args"
	case $mode in
	check) check_one || rc=1 ;;
	update) update_one || rc=1 ;;
	roundtrip)
		roundtrip_one
		case $? in
		0) ;;
		77) nskip=$((nskip + 1)) ;;
		*) rc=1 ;;
		esac
		;;
	esac
done
if [ $rc -eq 0 ] && [ $nskip -eq $nfile ]; then
	exit 77
fi
exit $rc
