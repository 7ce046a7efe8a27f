#!/usr/bin/env bash
#
# run_attention.sh - attention with masks and grouped-query heads on a GPU:
# generated CUDA against the interpreter, through cuDNN and through the
# kernel library.
#
#   tests/gpu/run_attention.sh build [DIR]   here (no GPU needed)
#   tests/gpu/run_attention.sh run [DIR]     on the GPU machine
#
# DIR defaults to build-attn (git-ignored; carry it).  build: sgc and
# libsgrt (without NCCL) in DIR/build, cJSON in DIR/lib, and the cases of
# tests/gpu/attention_cases.py (bf16 and f16, head dims 64 and 128: GQA
# 16/4 causal, MQA 16/1, a bool mask with GQA, a float mask, a causal
# mask built from aranges that -O2 makes causal=true; q, k, v as strided
# slices of one fused qkv linear through chunk, split or timm's unbind,
# with dq, dk, dv written into the backward cat's buffer; forward and
# backward) with their expected outputs from `sgc run`.  run: `sgc -O2
# --main` and nvcc build each driver, which runs with cuDNN
# (PyTorch's wheel) and with SGRT_CUDNN_LIB=/nonexistent (the kernel
# library), and prints one PASS/FAIL line per case and path with the
# largest error of each output and gradient and the attention kernels the
# trace shows.  Exit 0 when all passed; DIR/report.txt (and $OUT).
set -u
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
mode=${1:-}
dir=${2:-build-attn}
case $dir in /*) ;; *) dir=$root/$dir ;; esac
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
py=${PYTHON:-python3}
case $mode in
build)
	. tests/gpu/build_lib.sh
	gpu_build "$dir" || exit 1
	rm -rf "$dir/t"
	mkdir -p "$dir/t"
	/usr/bin/python3 tests/gpu/attention_cases.py gen "$dir/t" "$dir/build/compiler/sgc" || exit 1
	du -sh "$dir"
	echo "built $dir (carry it)"
	;;
run)
	[ -x "$nvcc" ] || nvcc=$(command -v nvcc)
	b=$dir/build
	cuda_lib=$(dirname "$(dirname "$nvcc")")/lib64
	cd_dir=$("$py" -c 'import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), "lib"))' 2>/dev/null)
	export LD_LIBRARY_PATH=$dir/lib:$b/runtime:$cuda_lib${cd_dir:+:$cd_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	echo "cuDNN from: ${cd_dir:-the default loader path}"
	export nvcc b dir
	# shellcheck disable=SC2016
	xargs -P "$(nproc)" -I{} sh -c '"$b/compiler/sgc" "$dir/t/{}/case.sg" -O2 --main \
		-o "$dir/t/{}/case.cu" >"$dir/t/{}/nvcc.log" 2>&1 && "$nvcc" -arch=sm_90 -std=c++17 -O2 -cudart shared \
		-I"'"$root"'/runtime" "$dir/t/{}/case.cu" -o "$dir/t/{}/case" -L"$b/runtime" -lsgrt \
		-lcublasLt >>"$dir/t/{}/nvcc.log" 2>&1' <"$dir/t/cases"
	report=$dir/report.txt
	: >"$report"
	rc=0
	while read -r c; do
		t=$dir/t/$c
		for v in cudnn library; do
			if [ ! -x "$t/case" ]; then
				echo "FAIL $c $v: not built: $(head -c 400 "$t/nvcc.log")" | tee -a "$report"
				rc=1
				continue
			fi
			lib=${SGRT_CUDNN_LIB:-}
			[ $v = library ] && lib=/nonexistent
			SGRT_CUDNN_LIB=$lib timeout 120 "$t/case" --inputs "$t/inputs.safetensors" \
				--out "$t/got-$v.safetensors" --trace "$t/trace-$v.json" >"$t/$v.log" 2>&1
			"$py" tests/gpu/attention_cases.py check "$dir/t" "$c" "$v" 2>&1 | tee -a "$report"
			[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
		done
	done <"$dir/t/cases"
	echo "attention: $(grep -c '^PASS' "$report") passed, $(grep -c '^FAIL' "$report") failed" |
		tee -a "$report"
	[ -n "${OUT:-}" ] && cp "$report" "$OUT/attention_report.txt"
	exit $rc
	;;
*)
	sed -n '3,9s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
