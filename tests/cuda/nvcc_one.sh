#!/usr/bin/env bash
#
# nvcc_one.sh SGC NVCC LIBSGRT.a RUNTIME_DIR FILE.sg - compiles one program
# as a user would: `sgc FILE.sg -O2 --main` and `nvcc -arch=sm_90` into an
# executable linked against libsgrt.  Options from FILE's NAME.args (-D,
# --allow-races) are passed on.  A file `sgc check` rejects fails (meson
# gives no nvcc test to the golden error tests).  Exit 0 when the
# executable was built.

set -u
sgc=$1 nvcc=$2 lib=$3 rtdir=$4 file=$5
args=()
if [ -f "${file%.sg}.args" ]; then
	# shellcheck disable=SC2207
	args=($(grep -v '^#' "${file%.sg}.args" | tr ' ' '\n' |
		awk '/^-D$/ { getline v; print "-D"; print v; next } /^-D/ || /^--allow-races$/ { print }'))
fi
if ! "$sgc" check "$file" "${args[@]+"${args[@]}"}" >/dev/null 2>&1; then
	echo "FAIL $file: sgc check rejects it"
	"$sgc" check "$file" "${args[@]+"${args[@]}"}" 2>&1 | head -n 20
	exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nvcc_one.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
name=$(basename "$file" .sg)
if ! "$sgc" "$file" "${args[@]+"${args[@]}"}" -O2 --main -o "$tmp/$name.cu"; then
	echo "FAIL $file: sgc could not compile it to CUDA"
	exit 1
fi
cudalib=$(dirname "$(dirname "$nvcc")")/lib64
libs=(-lcublasLt -lcjson)
if nm "$lib" 2>/dev/null | grep -q ' U ncclCommInitRank'; then
	libs+=(-lnccl) # libsgrt was built with NCCL
fi
if ! "$nvcc" -arch=sm_90 -std=c++17 -O2 -I"$rtdir" "$tmp/$name.cu" -o "$tmp/$name" \
	"$lib" -L"$cudalib" "${libs[@]}" 2>"$tmp/log"; then
	echo "FAIL $file: nvcc failed"
	head -n 60 "$tmp/log"
	exit 1
fi
if [ -s "$tmp/log" ]; then
	echo "FAIL $file: nvcc warned"
	head -n 60 "$tmp/log"
	exit 1
fi
echo "ok $file -> $name ($(stat -c %s "$tmp/$name") bytes)"
