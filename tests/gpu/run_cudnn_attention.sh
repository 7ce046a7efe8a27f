#!/usr/bin/env bash
#
# run_cudnn_attention.sh - libsgrt's cuDNN attention (sgrt_sdpa) on a GPU.
#
#   tests/gpu/run_cudnn_attention.sh build [DIR]   here (no GPU needed)
#   tests/gpu/run_cudnn_attention.sh run [DIR]     on the GPU machine
#
# DIR defaults to build-cudnn-gpu (git-ignored; carry it).  build: libsgrt
# without NCCL (meson, DIR/build) and tests/gpu/test_cudnn_attn.cu with
# nvcc -arch=sm_90 into DIR/test_cudnn_attn, libcjson beside it.  run:
# finds libcudnn.so.9 in PyTorch's nvidia-cudnn wheel (or SGRT_CUDNN_LIB),
# runs the test (cuDNN against the flash kernels: bf16 and f16, causal or
# not, head dims 64/128/256, forward and backward, then times at B=8
# T=2048 H=16 D=128 causal bf16), again with SGRT_SDPA_DQ=direct, then times PyTorch's
# scaled_dot_product_attention at that shape, and prints one table.
# Exit 0 when every case passed.
set -u
cd "$(dirname "$0")/../.." || exit 2
mode=${1:-}
dir=${2:-build-cudnn-gpu}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
py=${PYTHON:-python3}

case $mode in
build)
	if [ ! -f "$dir/build/build.ninja" ]; then
		meson setup "$dir/build" -Dnccl=disabled >/dev/null || exit 1
	fi
	ninja -C "$dir/build" runtime/libsgrt.a >/dev/null || exit 1
	"$nvcc" -arch=sm_90 -O2 -std=c++17 -Iruntime -Iruntime/sgk \
		tests/gpu/test_cudnn_attn.cu -o "$dir/test_cudnn_attn" \
		"$dir/build/runtime/libsgrt.a" -lcublasLt -lcjson -ldl || exit 1
	cj=$(ldconfig -p | sed -n 's/.*libcjson\.so\.1 .*=> //p' | head -1)
	[ -n "$cj" ] && cp -L "$cj" "$dir/"
	echo "built $dir/test_cudnn_attn"
	;;
run)
	[ -x "$dir/test_cudnn_attn" ] || { echo "no $dir/test_cudnn_attn: run 'build' first" >&2; exit 2; }
	if [ -z "${SGRT_CUDNN_LIB:-}" ]; then
		cd_dir=$("$py" -c 'import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), "lib"))' 2>/dev/null)
		[ -n "$cd_dir" ] && export LD_LIBRARY_PATH=$cd_dir:${LD_LIBRARY_PATH:-}
		echo "cuDNN from: ${cd_dir:-the default loader path}"
	fi
	export LD_LIBRARY_PATH=$PWD/$dir:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
	# Why cuDNN declines a graph, if it does: ours and cuDNN's own log.
	log=${OUT:-/tmp}/cudnn_log.txt
	out=$(SGRT_CUDNN_DEBUG=1 CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$log" timeout 180 "$dir/test_cudnn_attn")
	rc=$?
	echo "$out"
	if [ $rc -ne 0 ] && [ -s "$log" ]; then
		echo "--- cuDNN's log (errors and warnings), first 60 lines:"
		grep -v '^\s*$' "$log" | head -60
	fi
	[ -n "${OUT:-}" ] && echo "$out" >"$OUT/cudnn_attention.txt"
	# The backward graph without the f32 dQ accumulator (SGRT_SDPA_DQ,
	# docs/runtime.md): the same checks.
	echo "SGRT_SDPA_DQ=direct:"
	SGRT_SDPA_DQ=direct timeout 180 "$dir/test_cudnn_attn" | tail -n 1
	[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
	echo
	echo "PyTorch scaled_dot_product_attention, same shape (ms per layer):"
	timeout 60 "$py" - <<'EOF'
import torch, torch.nn.functional as F
B, T, H, D = 8, 2048, 16, 128
qkv = torch.randn(B, T, 3, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
def parts():
    q, k, v = qkv.unbind(2)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
g = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
def t(f, n=10):
    for _ in range(3): f()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    r = []
    for _ in range(5):
        s.record()
        for _ in range(n): f()
        e.record(); torch.cuda.synchronize(); r.append(s.elapsed_time(e) / n)
    return sorted(r)[2]
q, k, v = parts()
fwd = t(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
def fb():
    o = F.scaled_dot_product_attention(*parts(), is_causal=True)
    o.backward(g)
both = t(fb)
for be in ("cudnn", "flash"):
    try:
        from torch.nn.attention import sdpa_kernel, SDPBackend
        b = SDPBackend.CUDNN_ATTENTION if be == "cudnn" else SDPBackend.FLASH_ATTENTION
        with sdpa_kernel(b):
            f2 = t(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            fb2 = t(fb)
        print(f"  torch sdpa [{be:5s}]       fwd {f2:7.3f}  bwd {fb2 - f2:7.3f}  fwd+bwd {fb2:7.3f}  8 layers {8 * fb2:7.2f}")
    except Exception as ex:
        print(f"  torch sdpa [{be}]: {type(ex).__name__}: {ex}")
print(f"  torch sdpa [default]      fwd {fwd:7.3f}  bwd {both - fwd:7.3f}  fwd+bwd {both:7.3f}  8 layers {8 * both:7.2f}")
EOF
	exit $rc
	;;
*)
	sed -n '3,16s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
