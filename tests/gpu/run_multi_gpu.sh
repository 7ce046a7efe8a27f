#!/usr/bin/env bash
#
# run_multi_gpu.sh - libsgrt's collectives and the generated drivers on
# several GPUs of one host, one process per GPU as torchrun starts them.
#
#   tests/gpu/run_multi_gpu.sh build [DIR]   here (no GPU needed)
#   tests/gpu/run_multi_gpu.sh run [DIR]     on the multi-GPU machine
#
# DIR defaults to build-multi (git-ignored; carry it to the GPU machine).
#
# build: sgc (in DIR/build, or $SGC_BUILD; or the binary $SGC), a libsgrt.so built with
# build_libsgrt below against $NCCL_HOME (include/ and lib/ of an NCCL, e.g.
# an unpacked nvidia-nccl-cu13 wheel of the GPU machine's version; default:
# CUDA's own) in DIR/lib-here (the fallback when the build on the GPU
# machine fails), libcjson and its header (the GPU machine has neither),
# and for WORLD ranks (default 2):
#   coll-DT   (DT f32 bf16 f16 i32) every collective - all_reduce sum avg
#             max min, all_gather and reduce_scatter along dims 0 and 1,
#             broadcast, all_to_all along dims 0 and 1, oneshot all_reduce
#             and ce all_gather on two streams - with different inputs per
#             rank (in{r}.safetensors) and what each rank must get
#             (expected{r}.safetensors), computed by multi/gen.py with numpy
#             from every rank's inputs; the f32 one also with --cuda-graph;
#   dp        multi/dp_train.sg (grad_sync=all_reduce, SGD with momentum,
#             two buckets from --bucket-bytes=70000), each rank on its own
#             microbatch, and the one-rank interpreter's params after the
#             same steps on the concatenated batch (ref.safetensors);
#   overlap   samples/microbatch_overlap.sg at B=2048, D=4096, and
#             multi/microbatch_serial.sg (the same on one stream) to bench;
#   symm      tests/gpu/test_symm.cu;
# every driver compiled here with nvcc against DIR/lib-here/libsgrt.so
# (dynamically: they run with whichever libsgrt.so is found first).
#
# run: builds libsgrt.so again on the GPU machine against its own NCCL
# (the python nvidia.nccl package's, as PyTorch uses; the symmetric path
# needs libsgrt built against the libnccl it runs with) into DIR/lib-there,
# runs everything with WORLD ranks (RANK, WORLD_SIZE, LOCAL_RANK,
# NCCL_NVLS_ENABLE=0), checks each rank's --out, requires symmetric memory
# to be on for the float oneshot/ce collectives (SGRT_SYMM_DEBUG=1 logs),
# traces the overlap sample and summarises, from the trace, how much of
# each collective other streams spent computing.  Writes DIR/report.txt
# (and $OUT/multi_report.txt, $OUT/multi_logs.txt when OUT is set).
# Exit 0 when everything passed.  DEADLINE (default 180) bounds the
# seconds of `run`; RUN_TIMEOUT (default 60) each multi-rank run.

set -u
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
mode=${1:-}
dir=${2:-build-multi}
case $dir in /*) ;; *) dir=$root/$dir ;; esac
world=${WORLD:-2}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
py=${PYTHON:-/usr/bin/python3}
gen=$root/tests/gpu/multi/gen.py

die() {
	echo "run_multi_gpu.sh: $*" >&2
	exit 2
}

# ------------------------------------------------------------------ libsgrt

# Builds libsgrt.so into $1 against NCCL headers $2 and libnccl.so.2 in $3,
# as runtime/meson.build does (the nvcc-compiled device half of the
# symmetric collectives included), with gcc and nvcc alone: the GPU
# machine has no cJSON, flex or bison for a meson build of the project.
build_libsgrt() {
	local out=$1 inc=$2 lib=$3 rt=$root/runtime
	local cj=$dir/cjson
	mkdir -p "$out/obj"
	{
		echo "NCCL headers $inc: $(printf '#include <nccl.h>\nNCCL_MAJOR.NCCL_MINOR.NCCL_PATCH\n' |
			gcc -E -P -I"$inc" -isystem /usr/local/cuda/include - | tail -n 1 | tr -d " ")"
		"$nvcc" -arch=sm_90 -O2 -std=c++17 \
			-Xcompiler=-fPIC,-fno-threadsafe-statics,-fno-exceptions \
			-Xcompiler=-Wall,-Wextra,-Werror -Werror=all-warnings \
			-I"$rt" -I"$inc" -c "$rt/sgrt_symm_dev.cu" -o "$out/obj/sgrt_symm_dev.o" &
		local f pids=()
		for f in sgrt sgrt_mem sgrt_trace sgrt_blas sgrt_nccl sgrt_driver sgrt_codegen \
		         sgrt_symm safetensors init; do
			gcc -std=c11 -O2 -g -fPIC -Wall -Wextra -Werror -D_FILE_OFFSET_BITS=64 \
				-D_POSIX_C_SOURCE=200809L -DSGRT_HAVE_NCCL=1 -DSGRT_HAVE_SYMM_DEV=1 \
				-I"$rt" -I"$root/compiler/ir" -I"$inc" -isystem /usr/local/cuda/include \
				-I"$cj/include/cjson" -c "$rt/$f.c" -o "$out/obj/$f.o" &
			pids+=($!)
		done
		local bad=0 p
		for p in "${pids[@]}"; do wait "$p" || bad=1; done
		wait || bad=1
		[ $bad = 0 ] &&
			gcc -shared -o "$out/libsgrt.so" "$out"/obj/*.o -Wl,-soname,libsgrt.so \
				-Wl,--no-undefined -L/usr/local/cuda/lib64 -lcudart -lcublasLt \
				"$lib/libnccl.so.2" "$cj/lib/libcjson.so.1" -lm
	} >"$out/build.log" 2>&1
}

# ------------------------------------------------------------------ build

# Compiles one driver ($1.cu) against DIR/lib-here.
compile_one() {
	"$nvcc" -arch=sm_90 -std=c++17 -O2 -cudart shared -I"$root/runtime" "$1.cu" -o "$1" \
		-L"$dir/lib-here" -lsgrt -Xlinker -rpath-link="$nccl_lib" >"$1.nvcc" 2>&1 ||
		echo "nvcc failed: $1 ($(head -c 300 "$1.nvcc"))" >&2
}

build() {
	local b=${SGC_BUILD:-$dir/build} t sgc=${SGC:-}
	mkdir -p "$dir"
	if [ -z "$sgc" ]; then
		if [ ! -f "$b/build.ninja" ]; then
			meson setup "$b" >/dev/null || die "meson setup $b failed"
		fi
		ninja -C "$b" compiler/sgc >/dev/null || die "building sgc failed"
		sgc=$b/compiler/sgc
	fi
	local nh=${NCCL_HOME:-/usr/local/cuda}
	nccl_lib=$nh/lib
	[ -e "$nccl_lib/libnccl.so.2" ] || nccl_lib=$nh/lib64
	rm -rf "$dir/t" "$dir/lib-here" "$dir/cjson"
	mkdir -p "$dir/t" "$dir/lib-here" "$dir/cjson/include/cjson" "$dir/cjson/lib"
	cp /usr/include/cjson/cJSON.h "$dir/cjson/include/cjson/" || die "no cJSON.h"
	cp -L /usr/lib/x86_64-linux-gnu/libcjson.so.1 "$dir/cjson/lib/" || die "no libcjson"
	cp -L "$dir/cjson/lib/libcjson.so.1" "$dir/lib-here/"
	build_libsgrt "$dir/lib-here" "$nh/include" "$nccl_lib" ||
		die "libsgrt: $(tail -n 20 "$dir/lib-here/build.log")"
	head -n 1 "$dir/lib-here/build.log"
	rm -rf "$dir/lib-here/obj"
	local W=(-D "WORLD=$world")
	for dt in f32 bf16 f16 i32; do
		t=$dir/t/coll-$dt
		mkdir -p "$t"
		(cd "$root/tests/gpu" && "$py" "$gen" coll "$t" "$dt" "$world") || die "gen.py coll $dt"
		"$sgc" "$t/prog.sg" "${W[@]}" -O2 --main -o "$t/O2.cu" || die "sgc coll-$dt"
	done
	"$sgc" "$dir/t/coll-f32/prog.sg" "${W[@]}" -O2 --cuda-graph --main \
		-o "$dir/t/coll-f32/graph.cu" || die "sgc coll-f32 --cuda-graph"
	t=$dir/t/dp
	mkdir -p "$t"
	(cd "$root/tests/gpu" && "$py" "$gen" dp "$t" "$world") || die "gen.py dp"
	local dpsg=$root/tests/gpu/multi/dp_train.sg
	"$sgc" "$dpsg" "${W[@]}" --bucket-bytes=70000 -O2 --main -o "$t/O2.cu" || die "sgc dp"
	"$sgc" run "$dpsg" -D B=$((16 * world)) --params "$t/params.safetensors" \
		--inputs "$t/full.safetensors" --out "$t/ref.safetensors" --steps 3 >/dev/null ||
		die "sgc run dp"
	t=$dir/t/overlap
	mkdir -p "$t"
	"$sgc" "$root/samples/microbatch_overlap.sg" "${W[@]}" -D B=2048 -D D=4096 -O2 --main \
		-o "$t/O2.cu" || die "sgc overlap"
	"$sgc" "$root/tests/gpu/multi/microbatch_serial.sg" "${W[@]}" -D B=2048 -D D=4096 -O2 \
		--main -o "$t/serial.cu" || die "sgc serial"
	mkdir -p "$dir/t/symm"
	cp "$root/tests/gpu/test_symm.cu" "$dir/t/symm/test_symm.cu"
	export -f compile_one
	export nvcc root dir nccl_lib
	find "$dir/t" -name '*.cu' | sed 's/\.cu$//' |
		xargs -P "${JOBS:-2}" -I{} bash -c 'compile_one "$1"' _ {}
	local missing
	missing=$(find "$dir/t" -name '*.cu' | while read -r cu; do
		[ -x "${cu%.cu}" ] || echo "$cu"
	done)
	[ -z "$missing" ] || die "not compiled: $missing"
	du -sh "$dir"
}

# ------------------------------------------------------------------ run

# Runs "$@" as every rank in directory $t, logs in $t/$tag.r{r}.log;
# returns 0 when every rank exited 0.  $EXTRA_ENV: more variables.  Each
# run gets at most $RUN_TIMEOUT (60) seconds, and none starts once
# $DEADLINE (180) seconds of `run` have passed (a rank that dies leaves the
# others waiting in NCCL until then).
ranks() {
	local tag=$1 r rc=0 pids=() left=$((deadline - SECONDS)) lim=${RUN_TIMEOUT:-60}
	shift
	if [ $left -lt 10 ]; then
		echo "not run: the deadline has passed" >"$t/$tag.r0.log"
		return 1
	fi
	[ $left -lt "$lim" ] && lim=$left
	rm -f "$t/ncclid"
	for ((r = 0; r < world; r++)); do
		env RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r SGRT_NCCL_ID_FILE="$t/ncclid" \
			SGRT_NCCL_TIMEOUT=30 ${EXTRA_ENV:-} timeout "$lim" "$@" >"$t/$tag.r$r.log" 2>&1 &
		pids+=($!)
	done
	for r in "${pids[@]}"; do wait "$r" || rc=1; done
	return $rc
}

# Appends "ok/FAIL what" and rank 0's log tail to the report.
verdict() {
	local ok=$1 what=$2 tag=$3
	if [ "$ok" = 0 ]; then
		echo "ok $what" >>"$report"
	else
		echo "FAIL $what: $(tail -n 4 "$t/$tag".r*.log 2>/dev/null | tr '\n' ' ' | head -c 600)" >>"$report"
	fi
}

# The coll-DT tests: variant $1 (O2, graph), steps $2, tag $3.
run_coll() {
	local dt=$1 v=$2 steps=$3 tag=$4 sym=$5
	t=$dir/t/coll-$dt
	rm -f "$t"/out*.safetensors
	ranks "$tag" "$t/$v" --inputs "$t/in{rank}.safetensors" --out "$t/out{rank}.safetensors" \
		--steps "$steps"
	local rc=$?
	verdict $rc "coll-$dt/$tag: $world ranks ran" "$tag"
	[ $rc = 0 ] || return
	(cd "$root/tests/gpu" && "$py" "$gen" check "$t" "$world") | sed "s|$dir/t/||; s|$| ($tag)|" >>"$report"
	# What SGRT_SYMM_DEBUG said: on, and no fallback of a float oneshot/ce.
	local fell on
	fell=$(grep -h 'runs as the plain' "$t/$tag".r*.log | sort -u)
	on=$(grep -c 'symmetric memory on' "$t/$tag".r*.log | awk -F: '{s += $NF} END {print s}')
	case $sym in
	on)
		if [ "$on" = "$world" ] && [ -z "$fell" ]; then
			echo "ok coll-$dt/$tag: symmetric memory on in every rank, no oneshot/ce fell back" >>"$report"
		else
			echo "FAIL coll-$dt/$tag: symmetric memory on in $on ranks; fallbacks: $fell" >>"$report"
		fi ;;
	i32)
		if [ "$on" = "$world" ] && [ "$(echo "$fell" | grep -c 'oneshot.*f32, f16 and bf16 only')" -ge 1 ] &&
			! echo "$fell" | grep -q 'all_gather'; then
			echo "ok coll-$dt/$tag: i32 oneshot fell back (f32/f16/bf16 only), ce ran on symmetric memory" >>"$report"
		else
			echo "FAIL coll-$dt/$tag: on in $on ranks; fallbacks: $fell" >>"$report"
		fi ;;
	off)
		if [ "$on" = 0 ] && echo "$fell" | grep -q 'SGRT_SYMM=0'; then
			echo "ok coll-$dt/$tag: SGRT_SYMM=0 fell back to plain NCCL" >>"$report"
		else
			echo "FAIL coll-$dt/$tag: SGRT_SYMM=0 but on in $on ranks; fallbacks: $fell" >>"$report"
		fi ;;
	esac
}

run() {
	[ -d "$dir/t" ] || die "no $dir/t: run '$0 build' first"
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
	py=${PYTHON:-python3}   # (there: the python3 with numpy)
	# (into $OUT as it goes: a run killed at its limit still reports)
	report=${OUT:+$OUT/multi_report.txt}
	report=${report:-$dir/report.txt}
	deadline=$((SECONDS + ${DEADLINE:-180}))
	local nccl_pkg nccl_inc nccl_lib libdir t0=$SECONDS
	nccl_pkg=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
	nccl_inc=$nccl_pkg/include
	nccl_lib=$nccl_pkg/lib
	if [ -z "$nccl_pkg" ] || [ ! -e "$nccl_lib/libnccl.so.2" ]; then
		nccl_lib=$(dirname "$(ldconfig -p | awk '/libnccl.so.2/ {print $NF; exit}')")
		nccl_inc=/usr/local/cuda/include
	fi
	{
		echo "multi-GPU test, $(date -u '+%Y-%m-%d %H:%M UTC'), WORLD=$world"
		nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null
		nvidia-smi topo -m 2>/dev/null | head -n 4
		echo "NCCL: $nccl_lib"
	} >"$report"
	rm -rf "$dir/lib-there"
	if build_libsgrt "$dir/lib-there" "$nccl_inc" "$nccl_lib"; then
		libdir=$dir/lib-there
		cp "$dir/cjson/lib/libcjson.so.1" "$libdir/"
		echo "ok libsgrt built here against $(head -n 1 "$libdir/build.log") in $((SECONDS - t0)) s" >>"$report"
	else
		libdir=$dir/lib-here
		echo "FAIL libsgrt build here (using the carried one): $(tail -n 15 "$dir/lib-there/build.log" | tr '\n' ' ' | head -c 1500)" >>"$report"
	fi
	export LD_LIBRARY_PATH=$libdir:$nccl_lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
	export SGRT_SYMM_DEBUG=1
	local t rc

	# (b) test_symm with WORLD ranks.
	t=$dir/t/symm
	ranks symm "$t/test_symm"
	verdict $? "test_symm: $(grep -h 'passed' "$t"/symm.r*.log | tr '\n' ' ')" symm
	grep -h '^bench\|symmetric memory off' "$t"/symm.r*.log >>"$report"

	# (c) every collective, every dtype.
	run_coll f32 O2 1 O2 on
	run_coll bf16 O2 1 O2 on
	run_coll f16 O2 1 O2 on
	run_coll i32 O2 1 O2 i32
	run_coll f32 graph 3 graph on
	EXTRA_ENV=SGRT_SYMM=0 run_coll f32 O2 1 nosymm off

	# (d) data-parallel training.
	t=$dir/t/dp
	ranks dp "$t/O2" --params "$t/params.safetensors" --inputs "$t/in{rank}.safetensors" \
		--out "$t/out{rank}.safetensors" --steps 3
	rc=$?
	verdict $rc "dp: $world ranks ran 3 steps" dp
	[ $rc = 0 ] && (cd "$root/tests/gpu" && "$py" "$gen" dpcheck "$t" "$world") >>"$report"

	# (e) microbatch overlap, traced.
	t=$dir/t/overlap
	(cd "$root/tests/gpu" && "$py" "$gen" overlap_inputs "$t" 2048 4096 "$world")
	ranks overlap "$t/O2" --inputs "$t/in{rank}.safetensors" --steps 3 --trace "$t/trace{rank}.json"
	rc=$?
	verdict $rc "overlap: $world ranks traced" overlap
	if [ $rc = 0 ]; then
		(cd "$root/tests/gpu" && "$py" "$gen" overlap "$t"/trace*.json) >>"$report" 2>&1
		ranks bench "$t/O2" --inputs "$t/in{rank}.safetensors" --bench 20
		echo "overlap bench (rank 0): $(tail -n 1 "$t/bench.r0.log")" >>"$report"
		ranks serial "$t/serial" --inputs "$t/in{rank}.safetensors" --bench 20
		echo "the same on one stream, multi/microbatch_serial.sg (rank 0): $(tail -n 1 "$t/serial.r0.log")" >>"$report"
	fi
	echo "total $((SECONDS - t0)) s" >>"$report"
	if [ -n "${OUT:-}" ]; then
		cp "$report" "$dir/report.txt"
		for f in "$dir"/t/*/*.log "$dir"/lib-there/build.log; do
			[ -s "$f" ] || continue
			echo "==== ${f#"$dir"/}"
			head -c 4000 "$f"
			echo
		done >"$OUT/multi_logs.txt" 2>/dev/null
		cp "$dir"/t/overlap/trace0.json "$OUT/" 2>/dev/null
	fi
	cat "$report"
	! grep -q '^FAIL' "$report"
}

case $mode in
build) build ;;
run) run ;;
*) sed -n '3,8s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
