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

/* The split of K (CTAs a cluster) for a sum of length K: 8, or fewer
 * where a part would be shorter than a step of K.  At every shape of
 * bench/kernels/gemm_small.cu the split of 8 was the fastest (2026-12-04,
 * docs/performance.md). */
SGK_GEMM_FN int
sg_gemm_small_split(long long K)
{
	int split = 1;
	while (split < 8 && K / (split * 2) >= SGK_GEMM_BK)
		split *= 2;
	return split;
}

#undef SGK_GEMM_FN

#endif
