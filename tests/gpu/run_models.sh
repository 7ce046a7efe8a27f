#!/usr/bin/env bash
#
# run_models.sh - real models on the GPU machine: conv_ops.py (each conv,
# pool and batch_norm op in generated code, cuDNN and the direct kernels)
# and every tests/gpu/models_*.py (a model family exported by fx2sg,
# trained in the generated code and in the interpreter, against PyTorch).
#
#   tests/gpu/run_models.sh build [DIR]   here (no GPU needed)
#   tests/gpu/run_models.sh run [DIR]     on the GPU machine
#
# DIR defaults to build-models (git-ignored; carry it).  build: sgc and
# libsgrt (without NCCL) in DIR/build, the shared libraries the GPU machine
# lacks in DIR/lib (OpenBLAS for `sgc run`, cJSON), conv_ops.py's cases in
# DIR/conv, and each models_*.py's `build DIR/NAME`.  run: conv_ops.py's
# `run`, then each models_*.py's `run DIR/NAME`, with these in the
# environment:
#     SGC          the sgc executable
#     NVCC         nvcc
#     SGRT_FLAGS   nvcc's flags to link a --main driver against libsgrt
#     LD_LIBRARY_PATH  DIR/lib, and cuDNN from PyTorch's nvidia-cudnn wheel
# Output: DIR/report.txt (and $OUT/report.txt); exit 0 when every step
# passed.  STEPS="conv vision" (default: conv and every models_*.py) picks.
set -u
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
mode=${1:-}
dir=${2:-build-models}
case $dir in /*) ;; *) dir=$root/$dir ;; esac
py=${PYTHON:-python3}

models() {
	for f in tests/gpu/models_*.py; do
		[ -e "$f" ] && basename "$f" .py | sed 's/^models_//'
	done
}

case $mode in
build)
	py=${PYTHON:-/usr/bin/python3}
	# sgc and libsgrt in DIR/build, the libraries in DIR/lib: as the
	# Python package's GPU test builds them
	bash tests/gpu/run_python_gpu.sh build "$dir" >/dev/null || exit 1
	rm -rf "$dir/conv"
	"$py" tests/gpu/conv_ops.py build "$dir/conv" "$dir/build/compiler/sgc" || exit 1
	for m in $(models); do
		"$py" "tests/gpu/models_$m.py" build "$dir/$m" || exit 1
	done
	# The libraries (OpenBLAS alone is 36 MB) travel compressed: the
	# device call's carry is 64 MB in all.  run unpacks them.
	XZ_OPT="-T0 -4" tar -C "$dir" -cJf "$dir/lib.tar.xz" lib && rm -rf "$dir/lib" || exit 1
	du -sh "$dir"
	echo "built $dir (carry it)"
	;;
run)
	[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
	if [ ! -d "$dir/lib" ] && [ -f "$dir/lib.tar.xz" ]; then
		"$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
			"$dir/lib.tar.xz" "$dir" || exit 1
	fi
	b=$(cd "$dir/build" && pwd)
	cuda_lib=$(dirname "$(dirname "$(command -v nvcc)")")/lib64
	export SGC=$b/compiler/sgc NVCC=${NVCC:-$(command -v nvcc)}
	export SGRT_FLAGS="-I$root/runtime -L$b/runtime -lsgrt -L$cuda_lib -lcudart -lcublasLt -Xlinker -rpath=$b/runtime:$cuda_lib"
	export LD_LIBRARY_PATH=$(cd "$dir/lib" && pwd):$b/runtime:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	if [ -z "${SGRT_CUDNN_LIB:-}" ]; then
		cd_dir=$("$py" -c 'import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), "lib"))' 2>/dev/null)
		[ -n "$cd_dir" ] && export LD_LIBRARY_PATH=$cd_dir:$LD_LIBRARY_PATH
	fi
	report=$dir/report.txt
	: >"$report"
	{
		nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
		echo "cuDNN from: ${cd_dir:-${SGRT_CUDNN_LIB:-the default loader path}}"
		"$py" -c 'import torch; print("torch", torch.__version__)'
	} | tee -a "$report"
	rc=0
	steps=${STEPS:-"conv $(models | tr '\n' ' ')"}
	for s in $steps; do
		echo "== $s" | tee -a "$report"
		if [ "$s" = conv ]; then
			# shellcheck disable=SC2086
			"$py" tests/gpu/conv_ops.py run "$dir/conv" "$SGC" "$NVCC" $SGRT_FLAGS 2>&1 | tee -a "$report"
		else
			"$py" "tests/gpu/models_$s.py" run "$dir/$s" 2>&1 | tee -a "$report"
		fi
		st=${PIPESTATUS[0]}
		[ "$st" -eq 0 ] || { rc=1; echo "FAILED: $s" | tee -a "$report"; }
	done
	[ -n "${OUT:-}" ] && cp "$report" "$OUT/report.txt"
	exit $rc
	;;
*)
	sed -n '3,22s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
