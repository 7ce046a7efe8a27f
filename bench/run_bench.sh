#!/usr/bin/env bash
#
# bench/run_bench.sh [prepare|run|check|all|ab ...] - sgc against PyTorch on the
# workloads of ../shared/anchors.md (bench/README.md).
#
#   prepare   here (flex, bison and cJSON installed; nvcc optional):
#             builds sgc and libsgrt (NCCL off) in build-bench/, checks
#             every bench program against PyTorch with `sgc run` at small
#             dims, compiles each program with sgc (timing it: the
#             compile-time column), builds the drivers with nvcc when it
#             is here, and puts everything the GPU machine needs into
#             build-bench/gpu/ (libcjson from `apt-get download`).
#   run       on the GPU machine, from the repository root, with
#             build-bench/gpu carried: builds any driver missing there,
#             checks each driver at small dims against `sgc run`'s output,
#             writes random inputs, runs each driver with --bench, runs
#             PyTorch (bench/torch_ref.py) in the same run, and prints the
#             table.  Files go to $OUT (the device tool's folder), else
#             build-bench/gpu/out.
#   all       prepare, then run (one machine with everything).
#   check     on the GPU machine: only run's small-dims checks (each
#             prepared program's driver against `sgc run`'s output).
#   ab        PROGRAM 'ENV A' 'ENV B' [ROUNDS] [ITERS] [DRIVER B]: an A/B
#             of one program's driver under two environments, or against
#             another binary (see ab() below), on the GPU machine.
#   kernels   PROGRAM ['ENV']: one step's kernels under ncu, by kernel
#             (see kernels() below), on the GPU machine.
#
# Environment: PYTHON (an interpreter with torch; default: the first of
# python3 and /usr/bin/python3 that imports it), NVCC, BENCH_BUDGET_S
# (seconds the whole run may take, default 520: PyTorch's share is what
# is left after sgc's), BENCH_ONLY (space-separated programs),
# BENCH_NO_BIN=1 (prepare: do not keep driver binaries, to carry less),
# BENCH_PACK=1 (prepare: keep them and the .cu files as gpu/bin.txz, a
# sixth of the size; run unpacks it),
# BENCH_TORCH_VARIANTS (run: comma-separated PyTorch variants, e.g.
# eager,eager_opt_in_bwd,eager_save_on_cpu; default all), BENCH_BUILD
# (the build directory, default build-bench; carry BENCH_BUILD/gpu).

set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
B=${BENCH_BUILD:-build-bench}
G=$B/gpu
t_start=$SECONDS

die() {
	echo "run_bench.sh: $*" >&2
	exit 1
}

find_python() {
	local p
	for p in ${PYTHON:-} python3 /usr/bin/python3; do
		if "$p" -c 'import torch, numpy' >/dev/null 2>&1; then
			echo "$p"
			return
		fi
	done
	die "no python3 with torch and numpy (set PYTHON)"
}

find_nvcc() {
	local p
	for p in ${NVCC:-} nvcc /usr/local/cuda/bin/nvcc; do
		if command -v "$p" >/dev/null 2>&1; then
			echo "$p"
			return
		fi
	done
}

# The programs: NAME SGFILE ITERS [SGC FLAGS...] (torch_ref.py's list),
# restricted to $BENCH_ONLY when given.
programs() {
	"$PY" bench/torch_ref.py --programs | while read -r name rest; do
		if [ -z "${BENCH_ONLY:-}" ] || [[ " $BENCH_ONLY " == *" $name "* ]]; then
			echo "$name $rest"
		fi
	done
}

# Median of the arguments (numbers).
median() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
		print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Milliseconds `sgc ARGS...` takes, 5 runs: the median wall time, the
# least, and the median CPU time (user + system: less disturbed by other
# work on a shared machine).
time_sgc() {
	local ts=() cs=() t TIMEFORMAT='%3R %3U %3S'
	for _ in 1 2 3 4 5; do
		t=$( { time "$B/compiler/sgc" "$@" >/dev/null 2>&1; } 2>&1 ) || return 1
		ts+=("$(awk -v r="${t%% *}" 'BEGIN { printf "%.2f", r * 1000 }')")
		cs+=("$(echo "$t" | awk '{ printf "%.2f", ($2 + $3) * 1000 }')")
	done
	echo "$(median "${ts[@]}") $(printf '%s\n' "${ts[@]}" | sort -g | head -n 1) $(median "${cs[@]}")"
}

# nvcc a generated file into a driver: $1 the .cu, $2 the binary.
build_driver() {
	"$NVCC" -arch=sm_90 -O3 -std=c++17 -Iruntime -I"$G/include" "$1" \
		"$G/lib/libsgrt.a" -L"$G/lib" -lcublasLt -lcjson -o "$2"
}

# ------------------------------------------------------------------ prepare

prepare_build() {
	if [ ! -d "$B" ]; then
		meson setup "$B" -Dnccl=disabled -Dtests=disabled >/dev/null ||
			die "meson setup $B failed"
	fi
	ninja -C "$B" compiler/sgc runtime/libsgrt.a >/dev/null ||
		die "building sgc and libsgrt failed (ninja -C $B)"
	rm -rf "$G"
	mkdir -p "$G/cu" "$G/bin" "$G/lib" "$G/include" "$G/check" "$G/deb"
	cp "$B/runtime/libsgrt.a" "$G/lib/"
}

# libcjson for the GPU machine, which has none: the .so and the header.
prepare_cjson() {
	(cd "$G/deb" && apt-get download libcjson1 libcjson-dev >/dev/null 2>&1) ||
		die "apt-get download libcjson1 libcjson-dev failed"
	local d
	for d in "$G"/deb/*.deb; do
		dpkg -x "$d" "$G/deb/root" || die "dpkg -x $d failed"
	done
	cp -L "$G"/deb/root/usr/lib/*/libcjson.so.1 "$G/lib/libcjson.so.1"
	cp -L "$G"/deb/root/usr/lib/*/libcjson.so.1 "$G/lib/libcjson.so"
	cp -r "$G/deb/root/usr/include/cjson" "$G/include/"
	rm -rf "$G/deb"
}

# sgc on every program: the .cu (timed) and the small-dims variants for
# the GPU's correctness check (the --check files kept in $G/check).
prepare_compile() {
	local name sg iters flags ms what tag dims min cpu
	echo "{" >"$G/compile.json.tmp"
	local first=1
	while read -r name sg iters flags; do
		what=cu
		# shellcheck disable=SC2086
		if ! ms=$(time_sgc "bench/$sg" -o "$G/cu/$name.cu" --main $flags); then
			what=check
			ms=$(time_sgc check "bench/$sg") || ms="null null null"
			# shellcheck disable=SC2086
			"$B/compiler/sgc" "bench/$sg" -o "$G/cu/$name.cu" --main $flags \
				2>&1 | head -n 5 | sed "s/^/  $name: /" >&2
			rm -f "$G/cu/$name.cu"
		fi
		read -r ms min cpu <<<"$ms"
		printf '%-20s sgc (%s): wall median %s ms, least %s ms; CPU median %s ms\n' \
			"$name" "$what" "$ms" "$min" "$cpu"
		# the pinned host memory its plan holds (the bytes it offloads:
		# torch_ref.py's bound for the offloading row)
		local hb
		# shellcheck disable=SC2086
		hb=$("$B/compiler/sgc" check --memory "bench/$sg" $flags 2>/dev/null |
			awk '/host arena peak:/ { print $4; exit }')
		[ $first = 1 ] || echo "," >>"$G/compile.json.tmp"
		first=0
		printf ' "%s": {"ms": %s, "ms_min": %s, "cpu_ms": %s, "what": "%s", "host_bytes": %s}' \
			"$name" "$ms" "$min" "$cpu" "$what" "${hb:-null}" >>"$G/compile.json.tmp"
		dims=$("$PY" bench/torch_ref.py --small-dims "$name")
		# (a budget for full size offloads nothing at small dims:
		# there, offload whatever lowers the peak; a real model's
		# full-size -D flags give way to the small dims)
		local sflags
		sflags=$(echo " $flags" | sed -e 's/ --offload-budget=[0-9]*/ --offload=auto/' \
			-e 's/ -D [A-Za-z_][A-Za-z0-9_]*=[0-9]*//g')
		for tag in native f32; do
			[ -f "$G/check/${sg%.sg}_$tag.sg" ] || continue
			# shellcheck disable=SC2086
			"$B/compiler/sgc" $dims "$G/check/${sg%.sg}_$tag.sg" \
				-o "$G/cu/$name.small_$tag.cu" --main $sflags 2>/dev/null ||
				rm -f "$G/cu/$name.small_$tag.cu"
		done
	done < <(programs)
	echo "}" >>"$G/compile.json.tmp"
	mv "$G/compile.json.tmp" "$G/compile.json"
}

# The drivers, with nvcc when it is here (two at a time).
prepare_drivers() {
	[ -n "$NVCC" ] || {
		echo "no nvcc here: the GPU machine builds the drivers"
		return
	}
	local cu n=0 fails=0
	for cu in "$G"/cu/*.cu; do
		[ -f "$cu" ] || continue
		local bin
		bin=$G/bin/$(basename "$cu" .cu)
		(build_driver "$cu" "$bin" >"$bin.log" 2>&1 && rm -f "$bin.log") &
		n=$((n + 1))
		if [ $((n % 2)) = 0 ]; then wait; fi
	done
	wait
	for cu in "$G"/bin/*.log; do
		[ -f "$cu" ] || continue
		fails=$((fails + 1))
		echo "nvcc failed for $(basename "$cu" .log):" >&2
		grep -m 5 error "$cu" >&2
		rm -f "$cu"
	done
	[ "${BENCH_NO_BIN:-0}" = 1 ] && rm -f "$G"/bin/*
	echo "drivers built: $(ls "$G/bin" | wc -l), failed: $fails"
	# (xz: a sixth of the size of the drivers and sources, half of
	# gzip's, so that 40 drivers stay inside what a device call carries)
	if [ "${BENCH_PACK:-0}" = 1 ]; then
		tar -cJf "$G/bin.txz" -C "$G" bin cu && rm -rf "$G/bin" "$G/cu"
	fi
}

prepare() {
	prepare_build
	echo "prepared $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname) from" \
		"$(git describe --always --dirty 2>/dev/null) (sgc $("$B/compiler/sgc" --version 2>&1 | head -n 1))" \
		>"$G/PREPARED"
	echo "== checking the bench programs with sgc run against PyTorch"
	"$PY" bench/torch_ref.py --check --keep "$G/check" \
		--sgc-bin "$B/compiler/sgc" || die "bench programs disagree with PyTorch"
	echo "== sgc compile times (median of 5), $(uname -m), $(nproc) cores"
	prepare_compile
	prepare_cjson
	echo "== drivers"
	prepare_drivers
	du -sh "$G" | awk -v g="$G" '{ print g ": " $1 " to carry" }'
}

# ------------------------------------------------------------------ run

# A driver for $1 (a name in $G/cu): the carried binary when it runs
# here, else built now.  Prints its path; fails when there is none.
driver() {
	local bin=$G/bin/$1
	if [ -x "$bin" ] && "$bin" --help >/dev/null 2>&1; then
		echo "$bin"
		return
	fi
	[ -f "$G/cu/$1.cu" ] || return 1
	[ -n "$NVCC" ] || return 1
	mkdir -p "$G/bin"
	build_driver "$G/cu/$1.cu" "$bin" >>"$OUTD/log.txt" 2>&1 || return 1
	echo "$bin"
}

# Builds every missing driver in parallel first (nvcc is slow, cores many).
run_build_missing() {
	local cu name
	for cu in "$G"/cu/*.cu; do
		[ -f "$cu" ] || continue
		name=$(basename "$cu" .cu)
		if [ ! -x "$G/bin/$name" ] || ! "$G/bin/$name" --help >/dev/null 2>&1; then
			rm -f "$G/bin/$name"
			(build_driver "$cu" "$G/bin/$name" >"$OUTD/nvcc_$name.txt" 2>&1 &&
				rm -f "$OUTD/nvcc_$name.txt") &
		fi
	done
	wait
	for cu in "$OUTD"/nvcc_*.txt; do
		[ -f "$cu" ] || continue
		{ echo "== $cu"; head -n 20 "$cu"; } >>"$OUTD/log.txt"
		rm -f "$cu"
	done
}

# Small dims: each driver on the --check files, against sgc run's output.
run_small_checks() {
	local name sg iters flags tag bin base d=/tmp/sgbench_small
	rm -rf "$d"
	mkdir -p "$d"
	: >"$d/list"
	while read -r name sg iters flags; do
		for tag in native f32; do
			bin=$(driver "$name.small_$tag") || continue
			base=$G/check/${sg%.sg}_$tag
			local params=()
			[ -f "$base.params.safetensors" ] &&
				params=(--params "$base.params.safetensors")
			if ! timeout 120 "$bin" "${params[@]}" \
				--inputs "$base.inputs.safetensors" \
				--out "$d/$name.$tag.safetensors" >"$d/log" 2>&1; then
				echo "FAIL $name ($tag): the driver failed: $(tail -n 3 "$d/log" | tr '\n' ' ')"
				continue
			fi
			echo "$name ($tag) $d/$name.$tag.safetensors $base.out.safetensors" \
				"$base.params.safetensors" >>"$d/list"
		done
	done < <(programs)
	# one Python for every comparison (importing torch takes seconds)
	"$PY" bench/torch_ref.py --compare-list "$d/list"
}

# Full size: each driver with --bench; one JSON line a program.
run_bench_all() {
	local name sg iters flags bin line
	: >"$OUTD/sgc.jsonl"
	while read -r name sg iters flags; do
		if ! bin=$(driver "$name"); then
			echo "{\"prog\": \"$name\", \"error\": \"no driver (sgc or nvcc failed)\"}" >>"$OUTD/sgc.jsonl"
			continue
		fi
		local t0=$SECONDS trace=()
		# the last warm-up call traced (not under --cuda-graph: no
		# tracing inside a capture)
		[[ " $flags " == *" --cuda-graph "* ]] ||
			trace=(--trace "$TR/$name.json")
		# (a real model's exported consts, when there are any; its
		# params come from --seed)
		local params=()
		[ -f "$IN/$name.params.safetensors" ] &&
			params=(--params "$IN/$name.params.safetensors")
		timeout 240 "$bin" --inputs "$IN/$name.safetensors" "${params[@]}" \
			--bench "$iters" "${trace[@]}" >/tmp/sgbench.out 2>/tmp/sgbench.err
		local rc=$?
		line=$(grep '^{"graph"' /tmp/sgbench.out | tail -n 1)
		if [ $rc = 0 ] && [ -n "$line" ]; then
			echo "{\"prog\": \"$name\", ${line#\{}" >>"$OUTD/sgc.jsonl"
		else
			local err
			err=$(tail -c 300 /tmp/sgbench.err | tr '\n"\\' '   ')
			echo "{\"prog\": \"$name\", \"error\": \"exit $rc: $err\"}" >>"$OUTD/sgc.jsonl"
		fi
		echo "  $name ($((SECONDS - t0)) s): $(tail -n 1 "$OUTD/sgc.jsonl")"
	done < <(programs)
}

# What run and ab need on the GPU machine: $G unpacked, the libraries on
# the loader's path.
run_setup() {
	OUTD=${OUT:-$G/out}
	IN=${BENCH_INPUTS:-/tmp/sgbench_inputs}
	mkdir -p "$OUTD" "$IN"
	[ -d "$G" ] || die "$G is missing: run 'bench/run_bench.sh prepare' first (and carry it)"
	if [ -f "$G/bin.txz" ] && [ ! -d "$G/bin" ]; then
		# (Python's tarfile where tar has no xz)
		tar -xJf "$G/bin.txz" -C "$G" 2>/dev/null ||
			"$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
				"$G/bin.txz" "$G" || die "unpacking $G/bin.txz failed"
	fi
	# libcjson from here; libcublasLt from the CUDA of nvcc, else the
	# one PyTorch's wheels bring
	local cudalib pipcublas
	cudalib=$(dirname "$(dirname "$(command -v "${NVCC:-nvcc}" 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")/lib64
	pipcublas=$("$PY" -c 'import os, nvidia.cublas as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
	export LD_LIBRARY_PATH=$PWD/$G/lib:$cudalib:/usr/local/cuda/lib64${pipcublas:+:$pipcublas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
}

# ab PROGRAM 'ENV A' 'ENV B' [ROUNDS] [ITERS] [DRIVER B]: PROGRAM's
# driver with --bench ITERS under two environments (e.g.
# 'SGRT_CONV_TUNE=0' and ''; DRIVER B, a path: side B runs that binary
# instead, e.g. the program built from another commit), in ROUNDS rounds
# that alternate which goes first, each round's median step and then the
# median of the rounds' medians for each: an A/B on one machine whose
# speed drifts between calls.
ab() {
	[ $# -ge 3 ] || die "usage: bench/run_bench.sh ab PROGRAM 'ENV A' 'ENV B' [ROUNDS] [ITERS] [DRIVER B]"
	local name=$1 rounds=${4:-5} iters=${5:-50} bin binb r side env line ms
	run_setup >/dev/null
	bin=$(driver "$name") || die "no driver for $name"
	binb=${6:-$bin}
	[ -x "$binb" ] || die "$binb is not an executable"
	"$PY" bench/torch_ref.py --make-inputs "$IN" --only "$name" >/dev/null ||
		die "making $name's inputs failed"
	local params=()
	[ -f "$IN/$name.params.safetensors" ] && params=(--params "$IN/$name.params.safetensors")
	local a=() b=()
	for ((r = 1; r <= rounds; r++)); do
		for side in $([ $((r % 2)) = 1 ] && echo "A B" || echo "B A"); do
			local exe=$bin
			[ "$side" = A ] && env=$2 || { env=$3; exe=$binb; }
			# shellcheck disable=SC2086
			line=$(env $env "$exe" --inputs "$IN/$name.safetensors" "${params[@]}" \
				--bench "$iters" 2>"$OUTD/ab.err" | grep '^{"graph"' | tail -n 1)
			ms=$(echo "$line" | sed -n 's/.*"ms_median": *\([0-9.]*\).*/\1/p')
			[ -n "$ms" ] || die "$name ($exe) under '$env' gave no bench line:" \
				"$(tail -c 600 "$OUTD/ab.err")"
			echo "round $r $side ($env): $ms ms"
			[ "$side" = A ] && a+=("$ms") || b+=("$ms")
		done
	done
	echo "$name: A ($2) median of medians $(median "${a[@]}") ms;" \
		"B ($3${6:+, $6}) $(median "${b[@]}") ms"
}

# kernels PROGRAM ['ENV']: one step of PROGRAM's driver under ncu (three
# calls, the step the repeating tail: bench/ncu_summary.py), each
# kernel's gpu__time_duration at the clocks it runs at: the step's kernel
# time in all, by kernel, and its kernels under 10 us.
kernels() {
	[ $# -ge 1 ] || die "usage: bench/run_bench.sh kernels PROGRAM ['ENV']"
	local name=$1 bin ncu
	run_setup >/dev/null
	bin=$(driver "$name") || die "no driver for $name"
	ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
	[ -x "$ncu" ] || die "no ncu"
	"$PY" bench/torch_ref.py --make-inputs "$IN" --only "$name" >/dev/null ||
		die "making $name's inputs failed"
	local params=()
	[ -f "$IN/$name.params.safetensors" ] && params=(--params "$IN/$name.params.safetensors")
	# shellcheck disable=SC2086
	env ${2:-} SGRT_BENCH_WARMUP=2 "$ncu" --csv --print-units base --clock-control none \
		--metrics gpu__time_duration.sum "$bin" --inputs "$IN/$name.safetensors" \
		"${params[@]}" --bench 1 >"$OUTD/$name.ncu.csv" 2>"$OUTD/$name.ncu.err" ||
		die "ncu failed: $(tail -c 300 "$OUTD/$name.ncu.err")"
	"$PY" bench/ncu_summary.py "$OUTD/$name.ncu.csv"
}

run() {
	run_setup
	{
		echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname)"
		cat "$G/PREPARED" 2>/dev/null
		nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total \
			--format=csv,noheader 2>&1
		"$PY" -c 'import torch; print("torch", torch.__version__)'
		"$NVCC" --version 2>/dev/null | tail -n 1
	} | tee "$OUTD/log.txt"
	echo "== drivers (building any missing)"
	run_build_missing
	echo "== small-dims check: each driver against sgc run" | tee -a "$OUTD/log.txt"
	run_small_checks | tee "$OUTD/small_check.txt" | tee -a "$OUTD/log.txt"
	echo "== inputs ($((SECONDS - t_start)) s)"
	"$PY" bench/torch_ref.py --make-inputs "$IN" ${BENCH_ONLY:+--only "${BENCH_ONLY// /,}"} \
		2>>"$OUTD/log.txt" ||
		echo "making inputs failed" | tee -a "$OUTD/log.txt"
	echo "== sgc --bench ($((SECONDS - t_start)) s)" | tee -a "$OUTD/log.txt"
	TR=/tmp/sgbench_traces
	rm -rf "$TR"
	mkdir -p "$TR"
	run_bench_all | tee -a "$OUTD/log.txt"
	rm -rf "$IN"
	echo "== where each driver's time goes (one traced call)" | tee -a "$OUTD/log.txt"
	"$PY" bench/torch_ref.py --trace-summary "$TR" | tee "$OUTD/trace_summary.txt" >>"$OUTD/log.txt"
	tar -czf "$OUTD/traces.tar.gz" -C "$TR" . 2>/dev/null
	local left=$(( ${BENCH_BUDGET_S:-520} - (SECONDS - t_start) - 15 ))
	[ $left -gt 30 ] || left=30
	echo "== PyTorch, at most $left s ($((SECONDS - t_start)) s)" | tee -a "$OUTD/log.txt"
	# (--budget-s: a variant that may not finish in what is left is
	# skipped and named; timeout is the backstop)
	PYTHONUNBUFFERED=1 timeout "$left" "$PY" bench/torch_ref.py \
		--budget-s $((left - 10)) \
		${BENCH_ONLY:+--only "${BENCH_ONLY// /,}"} \
		${BENCH_TORCH_VARIANTS:+--variants "$BENCH_TORCH_VARIANTS"} \
		--json "$OUTD/torch.json" >/dev/null 2>>"$OUTD/log.txt" ||
		echo "PyTorch stopped early (exit $?): the table has what it measured" |
		tee -a "$OUTD/log.txt"
	echo "== the table ($((SECONDS - t_start)) s)"
	"$PY" bench/torch_ref.py --table --sgc "$OUTD/sgc.jsonl" \
		--torch "$OUTD/torch.json" --compile "$G/compile.json" \
		--checks "$OUTD/small_check.txt" --traces "$TR" --md "$OUTD/table.md"
	echo
	echo "small-dims check: $(grep -c '^ok' "$OUTD/small_check.txt") ok," \
		"$(grep -c '^FAIL' "$OUTD/small_check.txt") failed"
}

PY=$(find_python)
NVCC=$(find_nvcc)
case "${1:-run}" in
prepare) prepare ;;
run) run ;;
check) run_setup >/dev/null && run_small_checks ;;
ab) shift && ab "$@" ;;
kernels) shift && kernels "$@" ;;
all) prepare && run ;;
*) echo "usage: bench/run_bench.sh [prepare|run|check|all|ab PROGRAM ENV_A ENV_B [ROUNDS] [ITERS]|kernels PROGRAM [ENV]]" >&2; exit 2 ;;
esac
