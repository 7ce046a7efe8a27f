#!/bin/bash
# symm_api.sh NVCC CC CUDA_INCLUDE SRCDIR [DEV_OBJECT] - the compile test of libsgrt's
# symmetric-memory collectives (runtime/sgrt_symm.c, sgrt_symm_dev.cu), on
# a machine without a GPU:
#
#  1. sgrt_symm_dev.cu compiles with nvcc -arch=sm_90 -Werror against the
#     NCCL found, and the object holds the 12 one-shot kernels (f32, f16,
#     bf16 x sum, avg, max, min), the barrier and the peer-pointer kernel,
#     and needs no C++ runtime (libsgrt links as C);
#  2. it also compiles as the stubs an NCCL without the device API gets;
#  3. sgrt_symm.c compiles (-Wall -Wextra -Werror, C11) in each of its
#     three configurations: NCCL with the device half, NCCL without it,
#     no NCCL;
#  4. every NCCL name the two files use (comments stripped) is one that
#     NCCL 2.28.0 already had, so that the code builds against every 2.28
#     release (the GPU machine has 2.28.3, this one 2.28.9).  The list
#     below was checked against NVIDIA/nccl's 2.28 sources: nccl.h (window
#     registration and NCCL_WIN_COLL_SYMMETRIC since 2.27, ncclMemAlloc
#     since 2.19, ncclGetLastError since 2.13), nccl_device/core.h (ncclDevComm, ncclDevCommRequirements
#     with lsaBarrierCount, ncclDevCommCreate/Destroy, ncclTeamTagLsa,
#     ncclGetLsaPointer), mem_barrier.h (later lsa_barrier.h:
#     ncclLsaBarrierSession), coop.h (ncclCoopCta) and comm__types.h
#     (ncclDevComm's rank, nRanks, lsaRank, lsaSize, lsaBarrier).  A name
#     added later must come with an NCCL_VERSION_CODE guard and an entry
#     here saying so.
set -u
NVCC=$1 CC=$2 CUDA_INC=$3 SRC=$4
RT=$SRC/runtime
TMP=$(mktemp -d /tmp/symm-api-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail=0

say() { printf '%s\n' "$*"; }
bad() { say "FAIL: $*"; fail=1; }

# 1. The device half against the NCCL found: the object the build made
# (the build compiled it with these flags), else compiled here.
if [ -n "${5:-}" ] && [ -f "$5" ]; then
	cp "$5" "$TMP/dev.o"
fi
if [ -f "$TMP/dev.o" ] || "$NVCC" -arch=sm_90 -O2 -std=c++17 \
    -Werror=all-warnings \
    -Xcompiler=-fPIC,-fno-threadsafe-statics,-fno-exceptions \
    -Xcompiler=-Wall,-Wextra,-Werror -I"$RT" -c "$RT/sgrt_symm_dev.cu" \
    -o "$TMP/dev.o" 2>"$TMP/err"; then
	n=$(nm "$TMP/dev.o" | grep -c ' t _Z9k_oneshotI')
	[ "$n" = 12 ] || bad "expected 12 one-shot kernels, found $n"
	nm "$TMP/dev.o" | grep -q ' t _Z.*k_barrier' || bad "no k_barrier"
	nm "$TMP/dev.o" | grep -q ' t _Z.*k_lsa_ptrs' || bad "no k_lsa_ptrs"
	# Kernels are static: nothing but the entry points is exported.
	nm "$TMP/dev.o" | grep ' T ' | grep -v ' T sgrt_symm_dev_' |
		grep -q . && bad "the object exports more than sgrt_symm_dev_*"
	for f in version create destroy lsa_ptrs barrier oneshot; do
		nm "$TMP/dev.o" | grep -q " T sgrt_symm_dev_$f\$" ||
			bad "sgrt_symm_dev_$f is not defined (with C linkage)"
	done
	if nm -u "$TMP/dev.o" | grep -Eq '__cxa|__gxx|_Zn|_Zd|std::'; then
		bad "the object needs the C++ runtime:"
		nm -u "$TMP/dev.o" | grep -E '__cxa|__gxx|_Zn|_Zd'
	fi
else
	bad "nvcc failed on sgrt_symm_dev.cu"; cat "$TMP/err"
fi

# 2. The stubs of an NCCL without the device API.
"$NVCC" -arch=sm_90 -std=c++17 -Werror=all-warnings \
    -Xcompiler=-Wall,-Wextra,-Werror -DSGRT_SYMM_NO_DEVAPI -I"$RT" \
    -c "$RT/sgrt_symm_dev.cu" -o "$TMP/stub.o" 2>"$TMP/err" ||
	{ bad "nvcc failed on the stubs"; cat "$TMP/err"; }
nm "$TMP/stub.o" | grep -q k_oneshot && bad "the stubs hold kernels"

# 3. The host half in its three configurations.
for defs in "-DSGRT_HAVE_NCCL=1 -DSGRT_HAVE_SYMM_DEV=1" "-DSGRT_HAVE_NCCL=1" ""; do
	# shellcheck disable=SC2086
	"$CC" -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror $defs \
	    -I"$RT" -isystem "$CUDA_INC" -c "$RT/sgrt_symm.c" \
	    -o "$TMP/host.o" 2>"$TMP/err" ||
		{ bad "sgrt_symm.c with '$defs'"; cat "$TMP/err"; }
done

# 4. NCCL names: only those of NCCL 2.28.0.
allowed=" NCCL_VERSION NCCL_VERSION_CODE NCCL_WIN_COLL_SYMMETRIC
 ncclAllReduce ncclComm_t ncclCommWindowDeregister ncclCommWindowRegister
 ncclCoopCta ncclDevComm ncclDevCommCreate ncclDevCommDestroy
 ncclDevCommRequirements ncclGetErrorString ncclGetLastError ncclGetLsaPointer
 ncclGetVersion ncclInt32 ncclInvalidUsage ncclLsaBarrierSession
 ncclMemAlloc ncclMemFree ncclMin ncclResult_t ncclSuccess ncclSystemError
 ncclTeamTagLsa ncclWindow_t "
allowed=" $(echo $allowed) "
fields=" lsaRank lsaSize lsaBarrierCount rank nRanks "
strip() { "$CC" -fpreprocessed -dD -E -x "$1" "$2" 2>/dev/null; }
{ strip c "$RT/sgrt_symm.c"; strip c++ "$RT/sgrt_symm_dev.cu"; } >"$TMP/code"
used=$(grep -oE '\b(nccl[A-Z][A-Za-z0-9_]*|NCCL_[A-Z0-9_]+)\b' "$TMP/code" |
       sort -u)
[ -n "$used" ] || bad "found no NCCL names at all"
for name in $used; do
	case "$allowed" in
	*" $name "*) ;;
	*) bad "$name is not known to be in NCCL 2.28.0 (guard it, list it)";;
	esac
done
# Fields of ncclDevComm (dc) and ncclDevCommRequirements (reqs).
for f in $(grep -oE '\b(dc|reqs)(\.|->)[A-Za-z_]+' "$TMP/code" |
           sed -E 's/.*(\.|->)//' | sort -u); do
	case "$fields" in
	*" $f "*) ;;
	*) bad "field $f is not known to be in NCCL 2.28.0";;
	esac
done

[ $fail = 0 ] && say "symmetric-memory compile checks passed ($(echo $used | wc -w) NCCL names)"
exit $fail
