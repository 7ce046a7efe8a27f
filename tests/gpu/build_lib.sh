# build_lib.sh - sourced by the build steps of the GPU scripts
# (run_models.sh, run_attention.sh, run_python_gpu.sh).
#
# gpu_build DIR [blas]: sgc and libsgrt (without NCCL) in DIR/build, and in
# DIR/lib the shared libraries they need that the GPU machine lacks:
# cJSON, and with `blas` OpenBLAS (dlopen'ed by `sgc run`, so listed by
# name, not linked) with its Fortran runtime (about 40 MB).

gpu_build() {
	local dir=$1 pat=cjson blas=
	mkdir -p "$dir"
	[ -f "$dir/build/build.ninja" ] || meson setup "$dir/build" -Dtests=disabled -Dnccl=disabled \
		--buildtype=debugoptimized >/dev/null || return 1
	ninja -C "$dir/build" compiler/sgc runtime/libsgrt.so >/dev/null || return 1
	rm -rf "$dir/lib"
	mkdir -p "$dir/lib"
	if [ "${2:-}" = blas ]; then
		pat='openblas|gfortran|quadmath|cjson'
		blas=$(ldconfig -p | sed -n 's/.*libopenblas\.so\.0 .*=> //p' | head -n 1)
	fi
	ldd "$dir/build/compiler/sgc" "$dir/build/runtime/libsgrt.so" ${blas:+"$blas"} |
		awk -v p="($pat)" '$0 ~ p && $3 ~ /^\// { print $3 }' | sort -u |
		while read -r l; do cp -L "$l" "$dir/lib/"; done
	[ -z "$blas" ] || cp -L "$blas" "$dir/lib/libopenblas.so.0"
}
