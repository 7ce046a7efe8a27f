#!/usr/bin/env bash
#
# tests/downstream/depfile.sh SGC - sgc's -MD -MF depfiles, quickly (the
# full downstream builds are tests/downstream/run.sh):
#
#   - the rule `OUT: INPUT`, with blanks, '#', '$' and backslashes before
#     blanks escaped as GCC escapes them, checked byte for byte;
#   - Ninja (deps = gcc) and Make read it back to the very file names;
#   - -MD alone writes OUT.d; standard input gives a rule with no input;
#   - a failed compilation, or a depfile that cannot be written, leaves
#     neither the output nor the depfile behind.
#
# Prints one line per check and `N passed, M failed`; exit 1 on failure.

set -u
sgc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2
npass=0
nfail=0

ok() {
	if [ "$2" = 0 ]; then
		echo "ok $1"
		npass=$((npass + 1))
	else
		echo "FAIL $1${3:+: $3}"
		nfail=$((nfail + 1))
	fi
}

graph='graph g {
  input %x : f32[2]
  %y = exp(%x)
  return %y
}'

# A source and an output whose paths hold every character Make and Ninja
# treat specially.
mkdir -p 'src dir' 'out#dir' 'back\ slash'
src='src dir/a b#c$d.sg'
printf '%s\n' "$graph" >"$src"
printf '%s\n' "$graph" >'back\ slash/m.sg'

"$sgc" "$src" --emit=ir -o 'out#dir/o $x.ir' -MD -MF dep.d
ok "compile with -MD -MF" $?
expect='out\#dir/o\ $$x.ir: src\ dir/a\ b\#c$$d.sg'
got=$(cat dep.d)
[ "$got" = "$expect" ]
ok "rule escapes blanks, # and \$" $? "got '$got', expected '$expect'"

"$sgc" 'back\ slash/m.sg' --emit=ir -o m.ir -MD -MF dep2.d
expect='m.ir: back\\\ slash/m.sg'
got=$(cat dep2.d)
[ "$got" = "$expect" ]
ok "a backslash before a blank is doubled" $? "got '$got', expected '$expect'"

printf '%s\n' "$graph" >'q\r.sg'
"$sgc" 'q\r.sg' --emit=ir -o q.ir -MD -MF dep3.d
expect='q.ir: q\r.sg'
got=$(cat dep3.d)
[ "$got" = "$expect" ]
ok "other backslashes stay as they are" $? "got '$got', expected '$expect'"

# Ninja: the depfile's dependency is the source, by its real name.
if command -v ninja >/dev/null; then
	cat >build.ninja <<EOF
rule sgc
  command = "$sgc" \$in --emit=ir -o \$out -MD -MF \$out.d
  depfile = \$out.d
  deps = gcc
build n.ir: sgc src$ dir/a$ b#c$\$d.sg
build q.ir: sgc q\r.sg
EOF
	ninja >/dev/null 2>&1
	ok "ninja builds with the depfile" $?
	ninja -t deps n.ir | grep -qxF "    $src"
	ok "ninja reads back the source's name" $? "$(ninja -t deps n.ir)"
	ninja -n | grep -q "no work to do"
	ok "ninja: nothing to do after a build" $?
	ninja -t deps q.ir | grep -qxF '    q\r.sg'
	ok "ninja reads back a name with a backslash" $? "$(ninja -t deps q.ir)"
	sleep 1.1
	touch "$src"
	ninja -n | grep -q "no work to do"
	[ $? != 0 ]
	ok "ninja: a touched source rebuilds" $?
else
	echo "skip ninja checks (no ninja)"
fi

# Make: the included depfile names the source by its real name.
if command -v make >/dev/null; then
	"$sgc" "$src" --emit=ir -o made.ir -MD -MF made.ir.d
	printf 'made.ir:\n\t@echo REBUILD\n-include made.ir.d\n' >Makefile
	make -s -q made.ir
	ok "make: up to date after a build" $?
	sleep 1.1
	touch "$src"
	out=$(make -s made.ir)
	[ "$out" = REBUILD ]
	ok "make: a touched source rebuilds" $? "make said '$out'"
else
	echo "skip make checks (no make)"
fi

"$sgc" "$src" --emit=ir -o plain.ir -MD
[ "$(cat plain.ir.d 2>/dev/null)" = 'plain.ir: src\ dir/a\ b\#c$$d.sg' ]
ok "-MD alone writes OUT.d" $?

"$sgc" - --emit=ir -o stdin.ir -MD -MF stdin.d <"$src"
[ "$(cat stdin.d 2>/dev/null)" = 'stdin.ir:' ]
ok "standard input: a rule with no input" $?

printf 'graph g {\n  %%y = exp(%%nope)\n  return %%y\n}\n' >bad.sg
"$sgc" bad.sg --emit=ir -o bad.ir -MD -MF bad.d 2>/dev/null
st=$?
[ $st = 1 ] && [ ! -e bad.ir ] && [ ! -e bad.d ]
ok "a failed compilation writes no output and no depfile" $? "exit $st"

"$sgc" "$src" --emit=ir -o lost.ir -MD -MF no/such/dir/lost.d 2>/dev/null
st=$?
[ $st = 3 ] && [ ! -e lost.ir ]
ok "an unwritable depfile: exit 3, no output left" $? "exit $st"

"$sgc" "$src" -o lost.cu --header lost.h -MD -MF no/such/dir/lost.d 2>/dev/null
st=$?
[ $st = 3 ] && [ ! -e lost.cu ] && [ ! -e lost.h ]
ok "an unwritable depfile: no .cu and no header left" $? "exit $st"

echo "$npass passed, $nfail failed"
[ "$nfail" = 0 ]
