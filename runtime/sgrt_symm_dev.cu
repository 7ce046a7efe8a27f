/*
 * sgrt_symm_dev.cu - the device half of libsgrt's symmetric-memory
 * collectives: what needs NCCL's device API (nccl_device.h, NCCL 2.28)
 * and therefore nvcc.  sgrt_symm.c, the host half, decides when these
 * run and owns the buffers; docs/runtime.md, "Symmetric memory", says
 * how the two fit.
 *
 *   - the device communicator (ncclDevCommCreate) with LSA barriers;
 *   - the peers' addresses of a registered window (ncclGetLsaPointer,
 *     read once by a small kernel, so that the host can give them to the
 *     copy engine);
 *   - a one-CTA LSA barrier kernel, which orders the copy-engine
 *     all-gather;
 *   - the one-shot all-reduce kernel.
 *
 * Only API present since NCCL 2.28.0 is used (the device API was new in
 * 2.28, and its structures changed between 2.28 releases): ncclDevComm's
 * rank/nRanks/lsaRank/lsaSize/lsaBarrier, ncclDevCommRequirements'
 * lsaBarrierCount (the rest zeroed), ncclLsaBarrierSession over
 * ncclCoopCta with ncclTeamTagLsa, and ncclGetLsaPointer.  A program must
 * run with the NCCL it was built against; sgrt_symm.c checks that.
 * Against an NCCL older than 2.28 this file builds to stubs that say the
 * device API is missing.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

/* (SGRT_SYMM_NO_DEVAPI builds the stubs anyway: tests/runtime/symm_api.sh
 * compiles them so.) */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0) && \
    !defined(SGRT_SYMM_NO_DEVAPI)
#define HAVE_DEVAPI 1
/* (NCCL's device headers are not -Wextra clean.) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <nccl_device.h>
#pragma GCC diagnostic pop
#endif

extern "C" {
#include "sgrt_impl.h"
}

/* Threads of a one-shot CTA. */
#define THREADS 512
/* Bytes of one vector load or store. */
#define PACK_BYTES 16

#ifdef HAVE_DEVAPI

/* ------------------------------------------------------------------ element types */

/* Elements are combined in f32 and rounded once into T. */
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* a op b; AVG sums (the division comes at the end). */
template <int OP>
__device__ __forceinline__ float
combine(float a, float b)
{
	switch (OP) {
	case SGRT_RED_MAX: return fmaxf(a, b);
	case SGRT_RED_MIN: return fminf(a, b);
	default: return a + b;
	}
}

/* The final value of an element combined over n ranks. */
template <int OP>
__device__ __forceinline__ float
finish(float acc, int n)
{
	return OP == SGRT_RED_AVG ? acc / (float)n : acc;
}

/* ------------------------------------------------------------------ the one-shot all-reduce */

/*
 * Reduces this CTA's chunk [lo, hi) of every rank's window into recv.
 * Every rank combines the peers in the same order (LSA rank 0 first), so
 * every rank gets the same bits.  Element-wise, or 16 bytes at a time
 * when vec (send, recv and lo are then 16-byte aligned; windows are).
 */
template <typename T, int OP>
__device__ void
reduce_chunk(ncclWindow_t win, int n, T *recv, size_t lo, size_t hi, int vec)
{
	const int per = PACK_BYTES / sizeof(T);
	size_t i = lo + (size_t)threadIdx.x * (vec ? per : 1);
	size_t step = (size_t)blockDim.x * (vec ? per : 1);
	int p, k;

	if (vec) {
		for (; i + per <= hi; i += step) {
			float acc[PACK_BYTES / sizeof(T)];
			for (p = 0; p < n; p++) {
				const T *src = (const T *)ncclGetLsaPointer(win,
				                i * sizeof(T), p);
				uint4 raw = *(const uint4 *)src;
				const T *v = (const T *)&raw;
#pragma unroll
				for (k = 0; k < per; k++)
					acc[k] = p ? combine<OP>(acc[k], to_f32(v[k]))
					           : to_f32(v[k]);
			}
			uint4 out;
			T *o = (T *)&out;
#pragma unroll
			for (k = 0; k < per; k++)
				o[k] = from_f32<T>(finish<OP>(acc[k], n));
			*(uint4 *)(recv + i) = out;
		}
		/* hi - lo is a whole number of packs but for the last chunk:
		 * its tail goes element-wise below. */
		i = hi - (hi - lo) % per + threadIdx.x;
		step = blockDim.x;
	}
	for (; i < hi; i += step) {
		float acc = 0.0f;
		for (p = 0; p < n; p++) {
			const T *src = (const T *)ncclGetLsaPointer(win,
			                i * sizeof(T), p);
			acc = p ? combine<OP>(acc, to_f32(*src)) : to_f32(*src);
		}
		recv[i] = from_f32<T>(finish<OP>(acc, n));
	}
}

/* Copies this CTA's chunk of send into the local window. */
template <typename T>
__device__ void
publish_chunk(T *mine, const T *send, size_t lo, size_t hi, int vec)
{
	const int per = PACK_BYTES / sizeof(T);
	size_t i = lo + (size_t)threadIdx.x * (vec ? per : 1);
	size_t step = (size_t)blockDim.x * (vec ? per : 1);

	if (vec) {
		for (; i + per <= hi; i += step)
			*(uint4 *)(mine + i) = *(const uint4 *)(send + i);
		i = hi - (hi - lo) % per + threadIdx.x;
		step = blockDim.x;
	}
	for (; i < hi; i += step)
		mine[i] = send[i];
}

/*
 * One-shot all-reduce of count elements.  CTA b owns the chunk
 * [b * chunk, (b + 1) * chunk) on every rank (the grid and the chunks
 * depend on count alone, so they agree across ranks): it copies its
 * chunk of send into the local window, meets CTA b of every peer at LSA
 * barrier bar0 + b (after it, every peer's chunk is in place), reads the
 * chunk from every peer's window and writes the result to recv, and
 * meets them again (after it, nobody reads this rank's window, which the
 * next collective on the stream may overwrite).  send may equal recv.
 */
template <typename T, int OP>
static __global__ void __launch_bounds__(THREADS)
k_oneshot(ncclDevComm dc, ncclWindow_t win, const T *send, T *recv,
          size_t count, size_t chunk, unsigned bar0, int vec)
{
	ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc,
	                                       ncclTeamTagLsa(),
	                                       bar0 + blockIdx.x);
	size_t lo = (size_t)blockIdx.x * chunk;
	size_t hi = lo + chunk < count ? lo + chunk : count;
	T *mine = (T *)ncclGetLsaPointer(win, 0, dc.lsaRank);

	if (lo < hi)
		publish_chunk<T>(mine, send, lo, hi, vec);
	bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
	if (lo < hi)
		reduce_chunk<T, OP>(win, dc.lsaSize, recv, lo, hi, vec);
	bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
}

/* Launches k_oneshot<T, OP> with the grid for count. */
template <typename T, int OP>
static cudaError_t
launch_oneshot(const ncclDevComm *dc, ncclWindow_t win, const void *send,
               void *recv, size_t count, unsigned bar0, cudaStream_t st)
{
	const size_t per = PACK_BYTES / sizeof(T);
	size_t blocks = (count + THREADS * per - 1) / (THREADS * per);
	size_t chunk;
	int vec;

	if (blocks < 1)
		blocks = 1;
	if (blocks > SGRT_SYMM_CTAS)
		blocks = SGRT_SYMM_CTAS;
	/* Chunks of whole packs, so that each starts 16-byte aligned. */
	chunk = (count + blocks - 1) / blocks;
	chunk = (chunk + per - 1) / per * per;
	vec = ((uintptr_t)send % PACK_BYTES) == 0 &&
	      ((uintptr_t)recv % PACK_BYTES) == 0;
	k_oneshot<T, OP><<<(unsigned)blocks, THREADS, 0, st>>>(*dc, win,
	        (const T *)send, (T *)recv, count, chunk, bar0, vec);
	return cudaGetLastError();
}

/* The instance of launch_oneshot for the element type T and op. */
template <typename T>
static cudaError_t
oneshot_op(const ncclDevComm *dc, ncclWindow_t win, const void *send,
           void *recv, size_t count, int op, unsigned bar0, cudaStream_t st)
{
	switch (op) {
	case SGRT_RED_SUM:
		return launch_oneshot<T, SGRT_RED_SUM>(dc, win, send, recv, count, bar0, st);
	case SGRT_RED_AVG:
		return launch_oneshot<T, SGRT_RED_AVG>(dc, win, send, recv, count, bar0, st);
	case SGRT_RED_MAX:
		return launch_oneshot<T, SGRT_RED_MAX>(dc, win, send, recv, count, bar0, st);
	case SGRT_RED_MIN:
		return launch_oneshot<T, SGRT_RED_MIN>(dc, win, send, recv, count, bar0, st);
	default:
		return cudaErrorInvalidValue;
	}
}

/* ------------------------------------------------------------------ barrier and peer pointers */

/* Every rank's CTA meets at LSA barrier `index`. */
static __global__ void
k_barrier(ncclDevComm dc, unsigned index)
{
	ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc,
	                                       ncclTeamTagLsa(), index);

	bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
}

/* out[p]: LSA rank p's address of the window's first byte. */
static __global__ void
k_lsa_ptrs(ncclWindow_t win, int n, void **out)
{
	int p;

	for (p = threadIdx.x; p < n; p += blockDim.x)
		out[p] = ncclGetLsaPointer(win, 0, p);
}

/* ------------------------------------------------------------------ entry points */

int
sgrt_symm_dev_version(void)
{
	return NCCL_VERSION_CODE;
}

int
sgrt_symm_dev_create(void *comm, int nbarriers, void **devcomm,
                     int *lsa_size)
{
	ncclDevCommRequirements reqs;
	ncclDevComm *dc = (ncclDevComm *)calloc(1, sizeof *dc);
	ncclResult_t r;

	*devcomm = NULL;
	if (!dc)
		return ncclSystemError;
	/* Zeroed, then only what every 2.28 release has. */
	memset(&reqs, 0, sizeof reqs);
	reqs.lsaBarrierCount = nbarriers;
	r = ncclDevCommCreate((ncclComm_t)comm, &reqs, dc);
	if (r != ncclSuccess) {
		free(dc);
		return r;
	}
	*devcomm = dc;
	*lsa_size = dc->lsaSize;
	return ncclSuccess;
}

int
sgrt_symm_dev_destroy(void *comm, void *devcomm)
{
	ncclResult_t r = ncclSuccess;

	if (devcomm)
		r = ncclDevCommDestroy((ncclComm_t)comm,
		                       (const ncclDevComm *)devcomm);
	free(devcomm);
	return r;
}

int
sgrt_symm_dev_lsa_ptrs(void *win, int n, void **ptrs, cudaStream_t st)
{
	void **d = NULL;
	cudaError_t e;

	e = cudaMallocAsync((void **)&d, n * sizeof *d, st);
	if (e != cudaSuccess)
		return e;
	k_lsa_ptrs<<<1, 32, 0, st>>>((ncclWindow_t)win, n, d);
	e = cudaGetLastError();
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(ptrs, d, n * sizeof *d,
		                    cudaMemcpyDeviceToHost, st);
	(void)cudaFreeAsync(d, st);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(st);
	return e;
}

int
sgrt_symm_dev_barrier(const void *devcomm, int index, cudaStream_t st)
{
	k_barrier<<<1, 32, 0, st>>>(*(const ncclDevComm *)devcomm,
	                            (unsigned)index);
	return cudaGetLastError();
}

int
sgrt_symm_dev_oneshot(const void *devcomm, void *win, const void *send,
                      void *recv, size_t count, int dtype, int op, int bar0,
                      cudaStream_t st)
{
	const ncclDevComm *dc = (const ncclDevComm *)devcomm;
	ncclWindow_t w = (ncclWindow_t)win;

	switch (dtype) {
	case SGRT_F32:
		return oneshot_op<float>(dc, w, send, recv, count, op, bar0, st);
	case SGRT_F16:
		return oneshot_op<__half>(dc, w, send, recv, count, op, bar0, st);
	case SGRT_BF16:
		return oneshot_op<__nv_bfloat16>(dc, w, send, recv, count, op,
		                                 bar0, st);
	default:
		return cudaErrorInvalidValue;
	}
}

#else /* !HAVE_DEVAPI: this NCCL has no device API */

int
sgrt_symm_dev_version(void)
{
	return 0;
}

int
sgrt_symm_dev_create(void *comm, int nbarriers, void **devcomm,
                     int *lsa_size)
{
	(void)comm; (void)nbarriers; (void)lsa_size;
	*devcomm = NULL;
	return ncclInvalidUsage;
}

int
sgrt_symm_dev_destroy(void *comm, void *devcomm)
{
	(void)comm; (void)devcomm;
	return ncclSuccess;
}

int
sgrt_symm_dev_lsa_ptrs(void *win, int n, void **ptrs, cudaStream_t st)
{
	(void)win; (void)n; (void)ptrs; (void)st;
	return cudaErrorNotSupported;
}

int
sgrt_symm_dev_barrier(const void *devcomm, int index, cudaStream_t st)
{
	(void)devcomm; (void)index; (void)st;
	return cudaErrorNotSupported;
}

int
sgrt_symm_dev_oneshot(const void *devcomm, void *win, const void *send,
                      void *recv, size_t count, int dtype, int op, int bar0,
                      cudaStream_t st)
{
	(void)devcomm; (void)win; (void)send; (void)recv; (void)count;
	(void)dtype; (void)op; (void)bar0; (void)st;
	return cudaErrorNotSupported;
}

#endif /* HAVE_DEVAPI */
