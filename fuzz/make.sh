#!/usr/bin/env bash
#
# fuzz/make.sh [BUILDDIR] - builds the libFuzzer targets with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer.
#
# Meson configures BUILDDIR (default build-fuzz) with clang and coverage
# instrumentation (-fsanitize=fuzzer-no-link) and builds the compiler's
# static libraries, flex and bison output included; each fuzz/fuzz_*.c is
# then linked against them with -fsanitize=fuzzer into BUILDDIR/fuzz_NAME.
#
# Needs clang and libclang-rt-14-dev (.ci/install-deps installs both).

set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-fuzz}
cc=${CC_FUZZ:-clang}
san=address,undefined
cflags=(-g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=undefined)

if [ ! -f "$out/build.ninja" ]; then
	CC=$cc meson setup "$out" \
		-Dbuildtype=debugoptimized -Dwerror=true -Dtests=disabled \
		-Db_sanitize=$san -Db_lundef=false \
		-Dc_args="-fsanitize=fuzzer-no-link ${cflags[*]}" >"$out.setup.log" 2>&1 ||
		{ cat "$out.setup.log"; exit 1; }
	rm -f "$out.setup.log"
else
	meson configure "$out" -Dwerror=true >/dev/null # (older set-ups had false)
fi
libs=(compiler/libsgc.a grammar/libsgparse.a runtime/libsgrt_host.a)
if ! ninja -C "$out" "${libs[@]}" >"$out/ninja.log" 2>&1; then
	grep -v '^\[[0-9]*/[0-9]*\]' "$out/ninja.log" | head -n 80
	exit 1
fi

# shellcheck disable=SC2207
extlibs=($(pkg-config --libs libcjson 2>/dev/null || echo -lcjson) -ldl -lm -lpthread) # OpenBLAS: dlopened by the interpreter
for src in fuzz/fuzz_*.c; do
	[ -f "$src" ] || continue
	name=$(basename "$src" .c)
	"$cc" "${cflags[@]}" -fsanitize=fuzzer,$san \
		-std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra \
		-Icompiler/ir -Icompiler/ops -Icompiler/passes -Icompiler/interp -Icompiler/backend -Iruntime -I"$out/grammar" \
		"$src" "${libs[@]/#/$out/}" "${extlibs[@]}" -o "$out/$name"
	echo "built $out/$name"
done
