# common.bash - sourced by tests/cli/*.sh (not a test itself: Meson runs
# *.sh): needs $SGC, goes to a scratch directory removed at exit, and
# gives check NAME CMD... (prints ok/FAIL, counts failures in $fails),
# $root (the source tree) and $here (tests/cli).
set -u
: "${SGC:?SGC must name the sgc binary}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${SGC_SOURCE_ROOT:-$(cd "$here/../.." && pwd)}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch" || exit 2
fails=0
check() {
	local name=$1
	shift
	if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
