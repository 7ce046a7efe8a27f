/*
 * sgk_gemm_small.h - the small f32 product's tiles and its split of K
 * (sgk_gemm.cuh), once.  Valid as C11 and as CUDA C++ (nvcc and NVRTC),
 * as sgk_pointwise.h is: sgc's kernel_choice (compiler/passes/kernels.c)
 * decides which products the kernel takes and their split with the
 * numbers the kernel runs with.
 */
#ifndef SGK_GEMM_SMALL_H
#define SGK_GEMM_SMALL_H

enum { SGK_GEMM_BM = 32, SGK_GEMM_BN = 64, SGK_GEMM_BK = 32, SGK_GEMM_THREADS = 128 };

#ifdef __CUDACC__
#define SGK_GEMM_FN static __host__ __device__ __forceinline__ __attribute__((unused))
#else
#define SGK_GEMM_FN static inline
#endif

/* The tiles of SGK_GEMM_BM x SGK_GEMM_BN outputs of an M x N product. */
SGK_GEMM_FN long long
sg_gemm_small_tiles(long long M, long long N)
{
	return ((M + SGK_GEMM_BM - 1) / SGK_GEMM_BM) * ((N + SGK_GEMM_BN - 1) / SGK_GEMM_BN);
}

/* The split of K (CTAs a cluster) for an M x N product summing K: as many
 * CTAs as keep each part of K at least half a step long, at most 8, or 16
 * for a product of at most 32 tiles (a cluster of 16 is sm_90's
 * non-portable size).  The fastest split, or within 3% of it, at every
 * shape of bench/kernels/gemm_small.cu on the H200 (2026-12-05,
 * docs/performance.md, "The small product's copies in flight"). */
SGK_GEMM_FN int
sg_gemm_small_split(long long M, long long N, long long K)
{
	int cap = sg_gemm_small_tiles(M, N) <= 32 ? 16 : 8, split = 1;
	while (split < cap && K / (split * 2) >= SGK_GEMM_BK / 2)
		split *= 2;
	return split;
}

#undef SGK_GEMM_FN

#endif
