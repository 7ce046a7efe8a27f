#!/usr/bin/env bash
#
# tests/diag/color.sh SGC - -fdiagnostics-color: `always` colours (an SGR
# escape before the kind, the caret in green), `never` does not, `auto`
# colours only on a terminal (script(1) gives sgc one) and never with
# NO_COLOR set; a wrong word is a usage error (exit 2).
set -u
sgc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'graph g {\n  input %%x : f32[4]\n  %%y = exq(%%x)\n  return %%y\n}\n' >"$tmp/bad.sg"
unset NO_COLOR
fail=0
esc=$(printf '\033')
# has_color WHAT FILE: the file has an escape sequence.
has() { grep -q "$esc\[" "$2" || { echo "FAIL: $1: no colour"; cat -v "$2"; fail=1; }; }
hasnt() { ! grep -q "$esc" "$2" || { echo "FAIL: $1: colour"; cat -v "$2"; fail=1; }; }

"$sgc" check "$tmp/bad.sg" -fdiagnostics-color=always 2>"$tmp/always"
grep -q "$esc\[1;31merror: " "$tmp/always" || { echo "FAIL: always: no red 'error:'"; fail=1; }
grep -q "$esc\[1;32m^~~" "$tmp/always" || { echo "FAIL: always: no green caret"; fail=1; }
grep -q "did you mean 'exp'" "$tmp/always" || { echo "FAIL: no suggestion"; fail=1; }
"$sgc" check "$tmp/bad.sg" -fdiagnostics-color=never 2>"$tmp/never"
hasnt never "$tmp/never"
"$sgc" check "$tmp/bad.sg" 2>"$tmp/pipe"
hasnt "auto, not a terminal" "$tmp/pipe"
if command -v script >/dev/null; then
	script -qec "\"$sgc\" check \"$tmp/bad.sg\"" /dev/null >"$tmp/tty" 2>&1
	has "auto on a terminal" "$tmp/tty"
	NO_COLOR=1 script -qec "\"$sgc\" check \"$tmp/bad.sg\" -fdiagnostics-color=auto" /dev/null >"$tmp/nocolor" 2>&1
	hasnt "auto with NO_COLOR" "$tmp/nocolor"
else
	echo "FAIL: script(1) is missing (util-linux)"
	fail=1
fi
"$sgc" check "$tmp/bad.sg" -fdiagnostics-color=sometimes 2>/dev/null
[ $? -eq 2 ] || { echo "FAIL: a wrong word is not a usage error"; fail=1; }
[ $fail -eq 0 ] && echo "ok: -fdiagnostics-color"
exit $fail
