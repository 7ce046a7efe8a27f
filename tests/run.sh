#!/usr/bin/env bash
#
# tests/run.sh - builds sgc twice and runs every test:
#
#   1. build-test   a normal build; `meson test` (unit, golden, roundtrip,
#                   torch suites)
#   2. build-asan   AddressSanitizer + UndefinedBehaviorSanitizer; the same
#                   `meson test`
#   3. build-fuzz   libFuzzer smoke runs of each fuzz/fuzz_*.c target (clang,
#                   ASan, UBSan, -Werror): the front end and the structure-
#                   aware generator both drive every pass, codegen and `sgc run`
#   4. downstream   tests/downstream/run.sh: sgc installed and used from
#                   Meson and CMake projects (SGC_SKIP_DOWNSTREAM=1 skips)
#                   (front end, safetensors reader), bounded in time
#
# The last line of output is `N passed, M failed`: the tests of both meson
# runs (from meson-logs/testlog.json; skipped tests are not counted), one
# per fuzz run, and one failure per build that did not build.  The exit
# status is 1 when anything failed.
#
# Environment:
#   SGC_FUZZ_SECONDS   seconds per fuzz target (default 30; 0 skips fuzzing)
#   SGC_SKIP_ASAN=1    skip the sanitizer build (quicker local runs)
#   SGC_TEST_ARGS      extra arguments for `meson test`, e.g. "--suite golden"
#
# Run from anywhere; build directories go to the repository root.

set -u
cd "$(dirname "$0")/.." || exit 2
root=$PWD
fuzz_secs=${SGC_FUZZ_SECONDS:-30}
npass=0
nfail=0
failed=()
start=$SECONDS

# Prints a phase heading with the seconds elapsed so far.
say() {
	printf '\n==> [%4ds] %s\n' $((SECONDS - start)) "$*"
}

# Records one result: name, then 0 (pass) or anything else (fail).
record() {
	if [ "$2" -eq 0 ]; then
		npass=$((npass + 1))
	else
		nfail=$((nfail + 1))
		failed+=("$1")
	fi
}

# Configures (or reconfigures, so that new test files are seen) and builds
# a build directory; on failure prints the log's tail.  Args: dir, options.
build() {
	local dir=$1 log
	shift
	log=$(mktemp)
	if [ -f "$dir/build.ninja" ]; then
		meson setup --reconfigure "$dir" "$@" >"$log" 2>&1
	else
		meson setup "$dir" "$@" >"$log" 2>&1
	fi || {
		tail -n 40 "$log"
		rm -f "$log"
		return 1
	}
	if ! ninja -C "$dir" >"$log" 2>&1; then
		grep -v '^\[[0-9]*/[0-9]*\]' "$log" | head -n 80
		rm -f "$log"
		return 1
	fi
	rm -f "$log"
}

# Counts OK/FAIL results of the last `meson test` in a build directory into
# the totals, and the failing tests' names into `failed`.  Args: dir, exit
# status of `meson test`; a failure that the log does not explain (no log,
# meson itself failed) counts as one failed test.
count_meson() {
	local dir=$1 rc=$2 line before=$nfail
	if [ ! -f "$dir/meson-logs/testlog.json" ]; then
		record "$dir: meson test (exit $rc, no test log)" 1
		return
	fi
	while read -r line; do
		case $line in
		"pass "*) npass=$((npass + ${line#pass })) ;;
		"fail "*) nfail=$((nfail + ${line#fail })) ;;
		"name "*) failed+=("$dir: ${line#name }") ;;
		esac
	done < <(/usr/bin/python3 - "$dir/meson-logs/testlog.json" <<'EOF'
import json, sys
ok = ("OK", "EXPECTEDFAIL")
bad = ("FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS", "INTERRUPT")
npass = nfail = 0
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    t = json.loads(line)
    if t["result"] in ok:
        npass += 1
    elif t["result"] in bad:
        nfail += 1
        print("name", t["name"])
print("pass", npass)
print("fail", nfail)
EOF
)
	if [ "$rc" -ne 0 ] && [ "$nfail" -eq "$before" ]; then
		record "$dir: meson test (exit $rc)" 1
	fi
}

# Builds one directory and runs its meson tests.  Args: timeout
# multiplier, dir, meson options.
build_and_test() {
	local mult=$1 dir=$2
	shift
	say "$dir: build"
	if ! build "$@"; then
		record "$dir: build" 1
		return
	fi
	say "$dir: meson test"
	rm -f "$dir/meson-logs/testlog.json"
	# shellcheck disable=SC2086
	meson test -C "$dir" --no-rebuild --print-errorlogs \
		--timeout-multiplier="$mult" ${SGC_TEST_ARGS:-} |
		grep -v -e '^Ok: ' -e '^Expected Fail: ' -e '^Unexpected Pass: ' \
			-e '^Skipped: ' -e '^Timeout: ' -e '^Fail: ' -e '^$' \
			-e '^Full log written to'
	count_meson "$dir" "${PIPESTATUS[0]}"
}

# Runs one fuzz target for fuzz_secs seconds from its seed corpus
# (fuzz/corpus_NAME/; for the front end also samples/ and tests/golden/)
# and dictionary (fuzz/NAME.dict), when present.  New
# inputs go to a scratch directory, so the repository is not written to;
# crashes go to build-fuzz/artifacts/.
fuzz_one() {
	local bin=$1 name corpus log rc
	name=$(basename "$bin")
	corpus=$(mktemp -d)
	log=$(mktemp)
	mkdir -p build-fuzz/artifacts
	local seeds=fuzz/corpus_${name#fuzz_} dict=fuzz/${name#fuzz_}.dict
	[ -d "$seeds" ] || seeds=
	# The front end also starts from every sample and golden test.
	[ "$name" = fuzz_frontend ] && seeds="$seeds samples tests/golden"
	[ -f "$dict" ] && dict=-dict=$dict || dict=
	# shellcheck disable=SC2086
	"$bin" -max_total_time="$fuzz_secs" -timeout=10 -rss_limit_mb=2048 \
		-max_len=8192 -print_final_stats=1 $dict \
		-artifact_prefix="$root/build-fuzz/artifacts/$name-" \
		"$corpus" $seeds >"$log" 2>&1
	rc=$?
	if [ $rc -eq 0 ]; then
		echo "ok $name: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" |
			awk '{print $2}') runs, $(find "$corpus" -type f | wc -l) new corpus" \
			"files, $(grep -o 'cov: [0-9]*' "$log" | tail -n 1)"
	else
		echo "FAIL $name (exit $rc):"
		# The report from its first line, without libFuzzer's progress.
		grep -v -e '^#[0-9]' -e '^INFO: ' "$log" |
			sed -n '/ERROR\|==[0-9]*==\|internal compiler error\|^fuzz_/,$p' |
			grep -v -e '^    #[0-9]* 0x[0-9a-f]* in fuzzer::' -e 'libc_start' |
			head -n 60 | sed 's/^/    /'
		local art
		art=$(grep -o 'Test unit written to .*' "$log" | sed 's/Test unit written to //')
		if [ -n "$art" ] && [ -f "$art" ]; then
			echo "    input ($art):"
			head -c 2000 "$art" | cat -v | sed 's/^/    | /'
			echo
		fi
	fi
	rm -rf "$corpus" "$log"
	return $rc
}

fuzz_all() {
	local pids=() names=() bin i out
	if [ "$fuzz_secs" -eq 0 ]; then
		say "fuzz: skipped (SGC_FUZZ_SECONDS=0)"
		return
	fi
	say "build-fuzz: build"
	if ! fuzz/make.sh build-fuzz; then
		record "build-fuzz: build" 1
		return
	fi
	say "fuzz: ${fuzz_secs}s per target"
	out=$(mktemp -d)
	# Both cores: the targets run side by side.
	for bin in build-fuzz/fuzz_*; do
		if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then continue; fi
		names+=("$(basename "$bin")")
		fuzz_one "$bin" >"$out/${names[-1]}" 2>&1 &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}"
		record "fuzz: ${names[$i]}" $?
		cat "$out/${names[$i]}"
	done
	rm -rf "$out"
	[ -f fuzz/fuzz_safetensors.c ] || echo "note: fuzz/fuzz_safetensors.c does not exist yet"
}

# sgc installed and used by other build systems (tests/downstream/run.sh:
# Meson, CMake with Ninja and Make, depfiles, a Meson subproject).  Its
# checks count one by one; its last line is `N passed, M failed, K skipped`.
downstream() {
	[ "${SGC_SKIP_DOWNSTREAM:-0}" = 1 ] && { say "downstream: skipped"; return; }
	say "downstream: install sgc, build samples/ as Meson and CMake projects"
	local log last p f
	log=$(mktemp)
	bash tests/downstream/run.sh >"$log" 2>&1
	last=$(tail -n 1 "$log")
	grep -E '^(FAIL|skip) ' "$log" | head -n 40
	if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
		p=${BASH_REMATCH[1]}
		f=${BASH_REMATCH[2]}
		npass=$((npass + p))
		nfail=$((nfail + f))
		[ "$f" -eq 0 ] || { failed+=("downstream: $f checks"); tail -n 60 "$log"; }
		echo "$last"
	else
		tail -n 60 "$log"
		record "downstream: run.sh" 1
	fi
	rm -f "$log"
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_summary=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_summary=1:print_stacktrace=1}

build_and_test 1 build-test
if [ "${SGC_SKIP_ASAN:-0}" != 1 ]; then
	# With -Werror too (issue #15): cg_fmt and arena_printf avoid the
	# -Wformat-truncation GCC gives under -fsanitize=undefined.
	build_and_test 3 build-asan -Db_sanitize=address,undefined -Db_lundef=false \
		-Dwerror=true
fi
fuzz_all
downstream

say "summary ($((SECONDS - start)) s)"
for f in "${failed[@]+"${failed[@]}"}"; do
	echo "FAILED: $f"
done
echo "$npass passed, $nfail failed"
[ "$nfail" -eq 0 ]
