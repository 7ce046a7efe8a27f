#!/usr/bin/env bash
#
# run_models.sh - real models exported by tools/fx2sg, trained by sgc on
# the CPU interpreter and in generated CUDA, against PyTorch eager.
#
#   tests/gpu/run_models.sh build [DIR]   here (no GPU needed)
#   tests/gpu/run_models.sh run [DIR]     on the GPU machine
#
# DIR defaults to build-models (git-ignored; carry it).  build: sgc and
# libsgrt (without NCCL) in DIR/build, and the shared libraries they need
# that the GPU machine lacks (OpenBLAS for `sgc run`, cJSON) in DIR/lib.
# run (needs nvcc, torch 2.x with transformers): each tests/gpu/models_*.py
# script, each printing PASS/FAIL lines with the largest errors per model:
#   models_llama.py   Hugging Face Llama, Mistral, Qwen2 (tiny configs):
#                     fx2sg --trace=export, 3 AdamW steps in `sgc run` and
#                     in the generated CUDA against torch.optim.AdamW
# Output: DIR/report.txt (and $OUT/report.txt); exit 0 when all passed.
set -u
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
mode=${1:-}
dir=${2:-build-models}
case $mode in
build)
	. tests/gpu/build_lib.sh
	gpu_build "$dir" blas || exit 1
	du -sh "$dir"
	echo "built $dir/build and $dir/lib (carry $dir)"
	;;
run)
	[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
	b=$(cd "$dir/build" && pwd)
	lib=$(cd "$dir/lib" && pwd)
	export LD_LIBRARY_PATH=$lib:$b/runtime${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	cuda_lib=$(dirname "$(dirname "$(command -v nvcc)")")/lib64
	export SGC=$b/compiler/sgc NVCC=${NVCC:-nvcc}
	export SGRT_FLAGS="-I$root/runtime -L$b/runtime -lsgrt -L$cuda_lib -lcublasLt -Xlinker -rpath=$b/runtime:$lib:$cuda_lib"
	report=$dir/report.txt
	: >"$report"
	rc=0
	for s in tests/gpu/models_*.py; do
		echo "== $s" | tee -a "$report"
		timeout 560 python3 "$s" "$dir/work" 2>&1 | tee -a "$report"
		[ "${PIPESTATUS[0]}" -eq 0 ] || { rc=1; echo "FAILED: $s" | tee -a "$report"; }
	done
	[ -n "${OUT:-}" ] && cp "$report" "$OUT/report.txt"
	exit $rc
	;;
*)
	sed -n '3,9s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
