#!/usr/bin/env bash
#
# run_gpu_tests.sh - the CUDA backend on a GPU: every sample and test
# program through its --main driver, compared tensor by tensor with
# `sgc run`, also under compute-sanitizer, and replayed as a CUDA graph.
#
#   tests/gpu/run_gpu_tests.sh build [DIR]     here (no GPU needed)
#   tests/gpu/run_gpu_tests.sh compile [DIR]   here: nvcc for every driver
#   tests/gpu/run_gpu_tests.sh pack [DIR] FILE here: what `run` needs, in FILE
#   tests/gpu/run_gpu_tests.sh run [DIR]       on the GPU machine
#
# DIR defaults to build-gpu (git-ignored; carry it to the GPU machine).
#
# build: configures and builds sgc and libsgrt in DIR/build (libsgrt also
# without NCCL in DIR/build-nonccl, for a machine without libnccl), then
# for every graph of samples/*.sg and tests/golden/{ok,bw,st,cg,off}_*.sg that
# `sgc check` accepts: random inputs (make_inputs.py), the interpreter's
# --out after 1, 2 and 3 steps, and the CUDA C of three drivers, built
# with nvcc -arch=sm_90 against libsgrt.so:
#     O0      -O0                   run with --steps 1
#     O2      -O2                   run with --steps 2
#     graph   -O2 --cuda-graph      run with --steps 3 (eager, capture, replay)
# The drivers link libsgrt and cudart dynamically, so DIR stays small;
# they are compiled by `run` (the GPU machine has many cores), or here too
# with COMPILE=1 or by `compile` (nvcc 13.0 as on the GPU machine; the
# binaries then travel in DIR, about 1 MB xz-compressed for a driver with
# attention, and `run` spends no device time on nvcc).  `pack` writes
# what `run` needs into one .tar.xz for the device tool's carry (64 MiB):
# the libraries (not the build folders), the inputs and expectations, and
# each driver as its executable, or as its .cu where it has none; the
# executables in order of size and one xz stream with a dictionary as
# large as they are, since drivers share most of their kernels (576
# drivers, 309 MB, pack into about 64 MB; with the working tree that is
# more than one call carries, so docs/codegen.md, "GPU results", sends it
# in two halves).  On the GPU machine: `tar -xJf FILE`, then `run DIR`.
#
# The gelu programs (tests/golden/*gelu_epilogue*.sg) also run their O2
# driver with SGRT_NO_EPILOGUE=1 (variant noepi): every matmul epilogue
# then runs as libsgrt's fallback (the plain product and its kernel).
#
# run: runs every driver and compares its --out with the interpreter's
# (compare.py: tolerances by dtype), runs the O2 and graph drivers under
# compute-sanitizer memcheck, racecheck and synccheck, benches a few
# programs, and writes DIR/report.txt (also to $OUT when set).  Exit 0 when
# everything passed.
# (Not initcheck: it does not see what cuBLASLt's and cuDNN's sm90 kernels
# store, and reports every read of their outputs; docs/performance.md,
# "compute-sanitizer initcheck and the libraries' stores".)
#
# Environment: SGC_BUILD=DIR reuses a configured build directory for sgc
# and libsgrt; JOBS (default: the CPU count) bounds parallel work;
# SANITIZE=0 skips the sanitizers; DEADLINE (default 270) is the seconds
# `run` may take: the sanitizers get what is left; SAN_SHARD=i/n runs
# only the i-th of n interleaved parts of the sanitizer list; SAN_FIRST=RE
# runs those of the programs whose id matches RE first; ONLY=RE (build)
# prepares only the programs whose id matches RE (a quick check of a
# change; the report then covers those alone); EXTRA=DIR (build) adds
# DIR/*.sg (programs written by fuzz/programs_of.sh, say) to the list.

set -u
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
mode=${1:-}
dir=${2:-build-gpu}
case $dir in /*) ;; *) dir=$root/$dir ;; esac
jobs=${JOBS:-$(nproc)}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
py=${PYTHON:-/usr/bin/python3}

die() {
	echo "run_gpu_tests.sh: $*" >&2
	exit 2
}

# ------------------------------------------------------------------ build

# The graphs of a file, one per line.
graphs_of() {
	"$sgc" "$1" --emit=ir -o - "${@:2}" 2>/dev/null | sed -n 's/^graph \([A-Za-z_][A-Za-z0-9_]*\) {$/\1/p'
}

# -D, --allow-races, --offload, --offload-budget and --bucket-bytes options
# from a golden test's NAME.args.
args_of() {
	local f=${1%.sg}.args
	[ -f "$f" ] || return 0
	grep -v '^#' "$f" | tr ' ' '\n' | awk '
		/^-D$/ { getline v; print "-D"; print v; next }
		/^-D/ || /^--allow-races$/ || /^--offload(-budget)?=/ || /^--bucket-bytes=/ { print }'
}

# -D NAME=64 for every dim of the printed IR above 64 (what shrinks a
# large sample to a size whose files can travel).
shrink_dims() {
	sed -n 's/^dim \([A-Za-z_][A-Za-z0-9_]*\) = \([0-9]*\)$/\1 \2/p' "$1" |
		while read -r name n; do
			[ "$name" != WORLD ] && [ "$n" -gt 64 ] && printf -- '-D\n%s=64\n' "$name"
		done
}

# Prepares one (file, graph): inputs, expected outputs, three .cu files;
# a graph whose tensors are large is prepared again with its dims shrunk.
prepare_one() {
	prepare_sized "$@" || return 1
	local t=$dir/t/$3
	if [ "$(du -sk "$t" | cut -f1)" -gt 4096 ]; then
		mapfile -t small < <(shrink_dims "$t/ir.sg")
		rm -rf "$t"
		prepare_sized "$@" "${small[@]+"${small[@]}"}" || return 1
		echo "${small[*]}" >"$t/shrunk"
	fi
}

prepare_sized() {
	local file=$1 graph=$2 id=$3
	local t=$dir/t/$id
	mkdir -p "$t"
	mapfile -t extra < <(args_of "$file")
	local g=(--graph "$graph" "${extra[@]+"${extra[@]}"}" "${@:4}")
	"$sgc" "$file" "${g[@]}" --emit=ir -o "$t/ir.sg" 2>"$t/sgc.err" || return 1
	if grep -Eq '^dim WORLD = ([2-9]|[1-9][0-9]+)$' "$t/ir.sg"; then
		echo "compiled for more than one rank" >>"$t/sgc.err"
		return 1
	fi
	(cd "$root/tests/gpu" && "$py" make_inputs.py "$t/ir.sg" "$t/inputs.safetensors") ||
		return 1
	for s in 1 2 3; do
		"$sgc" run "$file" "${g[@]}" --inputs "$t/inputs.safetensors" \
			--out "$t/expected$s.safetensors" --steps $s 2>>"$t/sgc.err" >/dev/null ||
			return 1
	done
	# The O0 driver keeps dead statements, as `sgc run -O0` does: inputs
	# that only a dead statement rejects (an index out of range) are bad
	# inputs there, not a mismatch.
	"$sgc" run "$file" "${g[@]}" -O0 --inputs "$t/inputs.safetensors" 2>>"$t/sgc.err" \
		>/dev/null || return 1
	"$sgc" "$file" "${g[@]}" -O0 --main -o "$t/O0.cu" 2>>"$t/sgc.err" &&
		"$sgc" "$file" "${g[@]}" -O2 --main -o "$t/O2.cu" 2>>"$t/sgc.err" &&
		"$sgc" "$file" "${g[@]}" -O2 --cuda-graph --main -o "$t/graph.cu" 2>>"$t/sgc.err"
}

# nvcc for one .cu file (args: the .cu path).
compile_one() {
	local cu=$1
	"$nvcc" -arch=sm_90 -std=c++17 -O2 -cudart shared -I"$root/runtime" "$cu" \
		-o "${cu%.cu}" -L"$dir/lib" -lsgrt >"${cu%.cu}.nvcc" 2>&1 ||
		echo "nvcc failed: $cu" >&2
}

build() {
	local b=${SGC_BUILD:-$dir/build}
	mkdir -p "$dir"
	if [ ! -f "$b/build.ninja" ]; then
		meson setup "$b" >/dev/null || die "meson setup $b failed"
	fi
	ninja -C "$b" compiler/sgc runtime/libsgrt.so >/dev/null || die "build failed"
	if [ ! -f "$dir/build-nonccl/build.ninja" ]; then
		meson setup "$dir/build-nonccl" -Dnccl=disabled -Dtests=disabled >/dev/null ||
			die "meson setup (no NCCL) failed"
	fi
	ninja -C "$dir/build-nonccl" runtime/libsgrt.so >/dev/null || die "build (no NCCL) failed"
	sgc=$b/compiler/sgc
	rm -rf "$dir/t" "$dir/lib" "$dir/lib-nonccl"
	mkdir -p "$dir/lib" "$dir/lib-nonccl"
	cp "$b/runtime/libsgrt.so" "$dir/lib/"
	cp "$dir/build-nonccl/runtime/libsgrt.so" "$dir/lib-nonccl/"
	for l in /lib/x86_64-linux-gnu/libcjson.so.1 /usr/lib/x86_64-linux-gnu/libcjson.so.1; do
		[ -f "$l" ] && { cp -L "$l" "$dir/lib/"; cp -L "$l" "$dir/lib-nonccl/"; break; }
	done
	: >"$dir/programs"
	local n=0 file graph
	for file in samples/*.sg tests/golden/ok_*.sg tests/golden/bw_*.sg \
	            tests/golden/st_*.sg tests/golden/cg_*.sg tests/golden/off_*.sg \
	            ${EXTRA:+"$EXTRA"/*.sg}; do
		[ -f "$file" ] || continue
		mapfile -t extra < <(args_of "$file")
		case " ${extra[*]+"${extra[*]}"} " in
		*" --allow-races "*) continue ;; # racy on purpose: no one answer
		esac
		"$sgc" check "$file" "${extra[@]+"${extra[@]}"}" >/dev/null 2>&1 || continue
		for graph in $(graphs_of "$file" "${extra[@]+"${extra[@]}"}"); do
			local id
			id=$(basename "$file" .sg)-$graph
			[[ -z ${ONLY:-} || $id =~ $ONLY ]] || continue
			if prepare_one "$file" "$graph" "$id"; then
				echo "$id $file $graph" >>"$dir/programs"
				n=$((n + 1))
			else
				echo "skip $id: the interpreter or sgc failed ($(head -c 200 "$dir/t/$id/sgc.err" | tr '\n' ' '))"
				rm -rf "${dir:?}/t/$id"
			fi
		done
	done
	echo "prepared $n graphs"
	# The C API from C: samples/classifier_app.c over the generated code.
	if [ -f samples/classifier_app.c ] && [ -f samples/classifier.sg ]; then
		mkdir -p "$dir/api"
		"$sgc" samples/classifier.sg -o "$dir/api/classifier_api.cu" \
			--header "$dir/api/classifier.h" && cp samples/classifier_app.c "$dir/api/"
	fi
	# An index out of range must stop the driver with the .sg line.
	if [ -d "$dir/t/cg_shape-shape" ]; then
		(cd "$root/tests/gpu" && "$py" - "$dir/t/cg_shape-shape" <<'PY'
import sys
import numpy as np
import sgtensors
t = sgtensors.read(sys.argv[1] + "/inputs.safetensors")
t["idx"] = ("I64", np.full(t["idx"][1].shape, 99, dtype=np.int64))
sgtensors.write(sys.argv[1] + "/bad_inputs.safetensors", t)
PY
		)
	fi
	if [ "${COMPILE:-0}" = 1 ]; then
		compile_all
	fi
	du -sh "$dir/t" "$dir/lib"
}

# nvcc for every .cu file without its executable, $jobs at a time.
compile_all() {
	local todo
	todo=$(find "$dir/t" -name '*.cu' | sort | while read -r cu; do
		[ -x "${cu%.cu}" ] || echo "$cu"
	done)
	[ -n "$todo" ] || return 0
	echo "compiling $(echo "$todo" | wc -l) drivers with $jobs jobs"
	export -f compile_one
	export nvcc root dir
	echo "$todo" | xargs -P "$jobs" -I{} bash -c 'compile_one "$1"' _ {}
}

# ------------------------------------------------------------------ run

# Runs one driver variant; leaves got$steps.safetensors and the log.
# Variant noepi is the O2 driver with SGRT_NO_EPILOGUE=1.
run_one() {
	local t=$1 v=$2 steps=$3 bin=$2 noepi=0
	[ "$v" = noepi ] && bin=O2 noepi=1
	SGRT_NO_EPILOGUE=$noepi timeout 120 "$t/$bin" --inputs "$t/inputs.safetensors" \
		--out "$t/got-$v.safetensors" --steps "$steps" >"$t/$v.log" 2>&1
	echo $? >"$t/$v.rc"
}

# The variants (name:steps) program id runs.
variants_of() {
	case $1 in
	*gelu_epilogue*) echo O0:1 O2:2 graph:3 noepi:2 ;;
	*) echo O0:1 O2:2 graph:3 ;;
	esac
}

# One compute-sanitizer tool on one driver.
sanitize_one() {
	local t=$1 v=$2 tool=$3 steps=$4 cudnn=
	# racecheck and synccheck check sgc's own kernels: cuDNN's Hopper
	# attention kernels (wgmma, mbarriers) are outside their model
	# (racecheck reports shared-memory hazards inside
	# cudnn_generated_fort_native_sdpa_*, synccheck overflows its tracked
	# cuda::barriers and the run then fails), so those two run the
	# kernel library's attention; memcheck runs cuDNN's.
	[ "$tool" = memcheck ] || cudnn=/nonexistent/libcudnn.so.9
	# --report-api-errors no: NCCL's set-up probes its kernels for other
	# architectures and gets errors it expects; the drivers check every
	# call of their own and exit non-zero on one.
	SGRT_CUDNN_LIB=${cudnn:-${SGRT_CUDNN_LIB:-}} \
	timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 --report-api-errors no \
		"$t/$v" --inputs "$t/inputs.safetensors" --out "$t/san-$v-$tool.safetensors" \
		--steps "$steps" >"$t/san-$v-$tool.log" 2>&1
	echo $? >"$t/san-$v-$tool.rc"
}

run() {
	[ -f "$dir/programs" ] || die "no $dir/programs: run '$0 build' first"
	local libdir=$dir/lib nccl=""
	nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
	if [ -z "$nccl" ] || [ ! -e "$nccl/libnccl.so.2" ]; then
		nccl=$(dirname "$(ldconfig -p | awk '/libnccl.so.2/ {print $NF; exit}')" 2>/dev/null)
	fi
	if [ -z "$nccl" ] || [ ! -e "$nccl/libnccl.so.2" ]; then
		libdir=$dir/lib-nonccl
		nccl="(none: libsgrt without NCCL)"
	fi
	export LD_LIBRARY_PATH=$libdir:${nccl#(*}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
	export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
	[ -x "$nvcc" ] || nvcc=$(command -v nvcc)
	local deadline=$((SECONDS + ${DEADLINE:-270}))
	compile_all
	local report=$dir/report.txt
	{
		echo "GPU test of the CUDA backend, $(date -u '+%Y-%m-%d %H:%M UTC')"
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
		echo "NCCL: $nccl"
	} >"$report"
	export -f run_one sanitize_one variants_of
	local id file graph list=$dir/compare.list
	: >"$list"
	while read -r id file graph; do
		for vs in $(variants_of "$id"); do
			echo "$dir/t/$id ${vs%:*} ${vs#*:}"
		done
	done <"$dir/programs" | xargs -P "$jobs" -L 1 bash -c 'run_one "$1" "$2" "$3"' _
	local runfail=0
	while read -r id file graph; do
		for vs in $(variants_of "$id"); do
			local v=${vs%:*} s=${vs#*:} t=$dir/t/$id
			if [ ! -x "$t/${v/noepi/O2}" ]; then
				echo "FAIL $id/$v: not built ($(head -c 300 "$t/$v.nvcc" 2>/dev/null))"
				runfail=$((runfail + 1))
			elif [ "$(cat "$t/$v.rc")" != 0 ]; then
				echo "FAIL $id/$v: exit $(cat "$t/$v.rc"): $(tail -n 5 "$t/$v.log" | tr '\n' ' ')"
				runfail=$((runfail + 1))
			else
				echo "$id/$v $t/expected$s.safetensors $t/got-$v.safetensors $t/ir.sg" >>"$list"
			fi
		done
	done <"$dir/programs" >>"$report"
	# Chained runs (interface.md, --steps): two runs of --steps 1 through
	# --out, the second reading --inputs twice (the graph writes %x, not
	# %c), equal the interpreter's --steps 2.
	local ch=$dir/t/bw_chain_inputs-chain
	if [ -x "$ch/O2" ] && [ -f "$ch/expected2.safetensors" ]; then
		"$ch/O2" --inputs "$ch/inputs.safetensors" --out "$ch/chain1.safetensors" \
			>"$ch/chain.log" 2>&1 &&
			"$ch/O2" --params "$ch/chain1.safetensors" --inputs "$ch/inputs.safetensors" \
				--inputs "$ch/chain1.safetensors" --out "$ch/chain2.safetensors" \
				>>"$ch/chain.log" 2>&1
		echo "bw_chain_inputs-chain/chained $ch/expected2.safetensors $ch/chain2.safetensors $ch/ir.sg" >>"$list"
		# --steps 0 runs no call: --out holds the param and the written
		# input as loaded, and no returned %loss (zeros before).
		local st="python3 $root/tests/cli/st.py read" want got
		"$ch/O2" --steps 0 --params "$ch/chain1.safetensors" --inputs "$ch/inputs.safetensors" \
			--out "$ch/steps0.safetensors" >>"$ch/chain.log" 2>&1
		want=$({ $st "$ch/chain1.safetensors" | grep '^w '; $st "$ch/inputs.safetensors" | grep '^x '; } | sort)
		got=$($st "$ch/steps0.safetensors" 2>&1 | sort)
		if [ -n "$want" ] && [ "$want" = "$got" ]; then
			echo "ok driver --steps 0: --out holds w and x as loaded, no loss" >>"$report"
		else
			echo "FAIL driver --steps 0: got '$(echo "$got" | head -c 300)', want '$(echo "$want" | head -c 300)'" >>"$report"
		fi
	fi
	(cd "$root/tests/gpu" && python3 compare.py "$list") >>"$report"
	local npass nfail
	npass=$(grep -c '^ok ' "$report")
	nfail=$(grep -c '^FAIL ' "$report")
	echo "runs: $npass matched the interpreter, $nfail failed" >>"$report"
	if [ -f "$dir/api/classifier_app.c" ]; then
		if "$nvcc" -arch=sm_90 -std=c++17 -cudart shared -I"$root/runtime" -I"$dir/api" \
			"$dir/api/classifier_api.cu" "$dir/api/classifier_app.c" -o "$dir/api/app" \
			-L"$libdir" -lsgrt >"$dir/api/build.log" 2>&1 &&
			"$dir/api/app" >"$dir/api/run.log" 2>&1; then
			echo "ok C API: classifier_app ($(tail -n 1 "$dir/api/run.log"))" >>"$report"
		else
			echo "FAIL C API: classifier_app: $(tail -n 5 "$dir/api/build.log" "$dir/api/run.log" | tr '\n' ' ')" >>"$report"
		fi
	fi
	local bad=$dir/t/cg_shape-shape
	if [ -x "$bad/O2" ] && [ -f "$bad/bad_inputs.safetensors" ]; then
		"$bad/O2" --inputs "$bad/bad_inputs.safetensors" >"$bad/bad.log" 2>&1
		local rc=$?
		if [ $rc -ne 0 ] && grep -q 'cg_shape.sg' "$bad/bad.log"; then
			echo "ok bad index: exit $rc, $(grep -m 1 'cg_shape.sg' "$bad/bad.log" | head -c 200)" >>"$report"
		else
			echo "FAIL bad index: exit $rc: $(head -c 400 "$bad/bad.log")" >>"$report"
		fi
	fi
	for id in mlp-mlp train_attention-train_attention train_mlp-train_mlp cg_fused-fused; do
		[ -x "$dir/t/$id/O2" ] || continue
		for v in O0 O2 graph; do
			echo "bench $id/$v: $("$dir/t/$id/$v" --inputs "$dir/t/$id/inputs.safetensors" --bench 50 2>&1 | tail -n 1)" >>"$report"
		done
	done
	if [ -x "$dir/t/mlp-mlp/O2" ]; then
		"$dir/t/mlp-mlp/O2" --inputs "$dir/t/mlp-mlp/inputs.safetensors" --trace "$dir/trace.json" >/dev/null 2>&1
		python3 -c "import json,sys; t=json.load(open(sys.argv[1])); n={e['tid']: e['args']['name'] for e in t if e['ph'] == 'M'}; x=[e for e in t if e['ph'] == 'X']; print('trace: %d slices on %s' % (len(x), sorted(set(n[e['tid']] for e in x))))" "$dir/trace.json" >>"$report" 2>&1
	fi
	local left=$((deadline - SECONDS))
	if [ "${SANITIZE:-1}" != 0 ] && command -v compute-sanitizer >/dev/null && [ $left -gt 20 ]; then
		echo "sanitizers: $left s left" >>"$report"
		while read -r id file graph; do
			echo "$dir/t/$id O2 memcheck 2"
			echo "$dir/t/$id graph memcheck 3"
		done <"$dir/programs" >"$dir/san.list"
		while read -r id file graph; do
			echo "$dir/t/$id O2 racecheck 2"
			echo "$dir/t/$id O2 synccheck 2"
		done <"$dir/programs" >>"$dir/san.list"
		# SAN_SHARD=i/n: the i-th of n interleaved parts of the list (the
		# sanitizers over several calls when one has not the time).
		if [ -n "${SAN_SHARD:-}" ]; then
			awk -v i="${SAN_SHARD%/*}" -v n="${SAN_SHARD#*/}" '(NR - 1) % n == i - 1' \
				"$dir/san.list" >"$dir/san.part" && mv "$dir/san.part" "$dir/san.list"
			echo "sanitizers: shard $SAN_SHARD, $(wc -l <"$dir/san.list") runs" >>"$report"
		fi
		# SAN_FIRST=REGEX: the runs of the programs whose id matches it
		# first (those a change touched, when the time may not suffice).
		if [ -n "${SAN_FIRST:-}" ]; then
			{ grep -E "/t/($SAN_FIRST)" "$dir/san.list"
			  grep -vE "/t/($SAN_FIRST)" "$dir/san.list"; } >"$dir/san.part"
			mv "$dir/san.part" "$dir/san.list"
		fi
		# The counts and the failures' logs below are this call's: a
		# directory run before (another shard, say) keeps its results'
		# files, whose logs would read as failures without their .rc.
		rm -f "$dir"/t/*/san-*.rc "$dir"/t/*/san-*.log
		timeout $((left - 10)) xargs -P "$jobs" -L 1 bash -c 'sanitize_one "$1" "$2" "$3" "$4"' _ <"$dir/san.list"
		local sok=0 sbad=0
		for rc in "$dir"/t/*/san-*.rc; do
			[ -f "$rc" ] || continue
			if [ "$(cat "$rc")" = 0 ]; then
				sok=$((sok + 1))
			else
				sbad=$((sbad + 1))
				local log=${rc%.rc}.log
				echo "SANITIZER FAIL ${rc#"$dir"/t/} (exit $(cat "$rc")): $(grep -m 3 -E 'ERROR|Error|error' "$log" | tr '\n' ' ' | head -c 400)" >>"$report"
			fi
		done
		echo "sanitizers: $sok clean, $sbad failed, $(( $(wc -l <"$dir/san.list") - sok - sbad )) not run (time)" >>"$report"
	else
		echo "sanitizers: skipped" >>"$report"
	fi
	if [ -n "${OUT:-}" ]; then
		cp "$report" "$OUT/report.txt"
		# The logs of what failed, for reading back here.
		for f in "$dir"/t/*/*.nvcc "$dir"/t/*/*.log; do
			[ -s "$f" ] || continue
			case $f in
			*/san-*.log) [ "$(cat "${f%.log}.rc" 2>/dev/null)" = 0 ] && continue ;;
			*.log) [ "$(cat "${f%.log}.rc" 2>/dev/null)" = 0 ] && continue ;;
			esac
			echo "==== ${f#"$dir"/t/}"
			head -c 3000 "$f"
			echo
		done >"$OUT/failures.txt" 2>/dev/null
	fi
	grep -E '^(runs|sanitizers):|^(ok|FAIL) (C API|bad index)' "$report"
	! grep -Eq '^(FAIL|SANITIZER FAIL) ' "$report"
}

# What `run` needs of DIR into the .tar.xz $1.
pack() {
	local out=$1 list
	[ -n "$out" ] || die "pack: name the output file"
	case $out in /*) ;; *) out=$root/$out ;; esac
	[ -f "$dir/programs" ] || die "no $dir/programs: run '$0 build' first"
	list=$(mktemp)
	(
		cd "$(dirname "$dir")" || exit 2
		local d
		d=$(basename "$dir")
		find "$d" \( -path "$d/build" -o -path "$d/build-nonccl" \) -prune -o -type f \
			! \( -path "$d/t/*/O0" -o -path "$d/t/*/O2" -o -path "$d/t/*/graph" \) \
			-print | while read -r f; do
			case $f in
			"$d"/t/*.cu) [ -x "${f%.cu}" ] || echo "$f" ;;
			*) echo "$f" ;;
			esac
		done | sort
		find "$d/t" -type f \( -name O0 -o -name O2 -o -name graph \) -printf '%s %p\n' |
			sort -n | awk '{print $2}'
	) >"$list"
	(cd "$(dirname "$dir")" && tar -cf - --no-recursion -T "$list") |
		xz -9e -T1 --lzma2=preset=9e,dict=384MiB >"$out" || die "pack failed"
	rm -f "$list"
	echo "$out: $(du -h "$out" | cut -f1)"
}

case $mode in
build) build ;;
pack) pack "${3:-}" ;;
compile) [ -f "$dir/programs" ] || die "no $dir/programs: run '$0 build' first"
	compile_all ;;
run) run ;;
*) sed -n '3,10s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
