/*
 * sgk_gemm.cuh - a small f32 matrix product with a pointwise epilogue in
 * one launch: epi(A @ B), for the products too small to fill the GPU,
 * where a launch of cuBLASLt costs the host more than the product costs the
 * GPU (two_branch's 64x1024 by 1024x1024 layers; docs/performance.md, "A
 * small product and its epilogue in one launch").
 *
 * Row-major A [M, K] (row stride lda) and B [K, N] (ldb), f32 with f32
 * accumulation: exact f32 FMAs on the CUDA cores, as cuBLAS's
 * f32 product without TF32.  Tiles of 32 x 64 outputs, 128 threads each
 * computing 4 x 4, K in steps of 32 through shared memory with the next
 * step's loads in registers.  K is split over the `split` CTAs of a thread
 * block cluster (1, 2, 4 or 8; more than 1 needs sm_90): each sums its
 * part of K, and the cluster adds the parts through distributed shared
 * memory, in rank order (so the result does not depend on timing), each
 * CTA finishing 1/split of the tile's rows.  No workspace, no atomics.
 *
 * The epilogue is a functor, `void operator()(float acc, sgk_i64 row,
 * sgk_i64 col) const`, given each element's sum and place, which stores
 * what it computes from it: SgkGemmStore stores the product itself into
 * C [M, N] (row stride ldc); a generated file passes one of its own, the
 * pointwise ops fused after the product (codegen_gemm.c).
 */
#ifndef SGK_GEMM_CUH
#define SGK_GEMM_CUH

#include "sgk_common.cuh"
#include "sgk_gemm_small.h" /* the tiles and sg_gemm_small_split */

#pragma nv_diag_suppress 177

struct SgkGemmStore {
	float *c;
	sgk_i64 ldc;
	__device__ void operator()(float acc, sgk_i64 row, sgk_i64 col) const
	{
		c[row * ldc + col] = acc;
	}
};

/* The shared memory of a CTA: the A step transposed (k-major, padded) and
 * the B step; after the loop, the CTA's partial tile for the cluster's sum. */
struct SgkGemmSmem {
	union {
		struct {
			float a[SGK_GEMM_BK][SGK_GEMM_BM + 4];
			float b[SGK_GEMM_BK][SGK_GEMM_BN];
		} s;
		float part[SGK_GEMM_BM][SGK_GEMM_BN];
	};
};

/* One step's loads into registers: the A step is 256 float4 (2 a thread),
 * the B step 512 (4 a thread).  VEC: 16-byte loads (K, N, lda, ldb
 * multiples of 4 and A, B 16-byte aligned); else element by element. */
template <bool VEC>
SGK_DEV void
sgk_gemm_load(const float *A, sgk_i64 lda, const float *B, sgk_i64 ldb, sgk_i64 M,
              sgk_i64 N, sgk_i64 m0, sgk_i64 n0, sgk_i64 kk, sgk_i64 k1, int t,
              float4 ra[2], float4 rb[4])
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int idx = t + SGK_GEMM_THREADS * r;
		sgk_i64 row = m0 + idx / 8, k = kk + (idx % 8) * 4;
		if (VEC) {
			ra[r] = row < M && k < k1 ? *reinterpret_cast<const float4 *>(A + row * lda + k)
			                          : make_float4(0, 0, 0, 0);
		} else {
			const float *p = A + row * lda + k;
			bool in = row < M;
			ra[r].x = in && k < k1 ? p[0] : 0.0f;
			ra[r].y = in && k + 1 < k1 ? p[1] : 0.0f;
			ra[r].z = in && k + 2 < k1 ? p[2] : 0.0f;
			ra[r].w = in && k + 3 < k1 ? p[3] : 0.0f;
		}
	}
#pragma unroll
	for (int r = 0; r < 4; r++) {
		int idx = t + SGK_GEMM_THREADS * r;
		sgk_i64 k = kk + idx / 16, col = n0 + (idx % 16) * 4;
		if (VEC) {
			rb[r] = k < k1 && col < N ? *reinterpret_cast<const float4 *>(B + k * ldb + col)
			                          : make_float4(0, 0, 0, 0);
		} else {
			const float *p = B + k * ldb + col;
			bool in = k < k1;
			rb[r].x = in && col < N ? p[0] : 0.0f;
			rb[r].y = in && col + 1 < N ? p[1] : 0.0f;
			rb[r].z = in && col + 2 < N ? p[2] : 0.0f;
			rb[r].w = in && col + 3 < N ? p[3] : 0.0f;
		}
	}
}

SGK_DEV void
sgk_gemm_stash(SgkGemmSmem &sm, int t, const float4 ra[2], const float4 rb[4])
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int idx = t + SGK_GEMM_THREADS * r, row = idx / 8, k = (idx % 8) * 4;
		sm.s.a[k][row] = ra[r].x;
		sm.s.a[k + 1][row] = ra[r].y;
		sm.s.a[k + 2][row] = ra[r].z;
		sm.s.a[k + 3][row] = ra[r].w;
	}
#pragma unroll
	for (int r = 0; r < 4; r++) {
		int idx = t + SGK_GEMM_THREADS * r;
		*reinterpret_cast<float4 *>(&sm.s.b[idx / 16][(idx % 16) * 4]) = rb[r];
	}
}

/* Every thread of the cluster: its shared memory stores before, the
 * others' after (barrier.cluster's release and acquire). */
SGK_DEV void
sgk_cluster_sync()
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
	__cluster_barrier_arrive();
	__cluster_barrier_wait();
#endif
}

template <bool VEC, class Epi>
__global__ void __launch_bounds__(SGK_GEMM_THREADS)
sgk_gemm_small(const float *__restrict__ A, sgk_i64 lda, const float *__restrict__ B,
               sgk_i64 ldb, sgk_i64 M, sgk_i64 N, sgk_i64 K, sgk_i64 kchunk, Epi epi)
{
	__shared__ SgkGemmSmem sm;
	const int t = threadIdx.x, tx = t % 16, ty = t / 16;
	const sgk_i64 m0 = (sgk_i64)blockIdx.y * SGK_GEMM_BM, n0 = (sgk_i64)blockIdx.x * SGK_GEMM_BN;
	const sgk_i64 k0 = (sgk_i64)blockIdx.z * kchunk;
	const sgk_i64 k1 = k0 + kchunk < K ? k0 + kchunk : K;
	float acc[4][4] = {};
	float4 ra[2], rb[4];

	if (k0 < k1)
		sgk_gemm_load<VEC>(A, lda, B, ldb, M, N, m0, n0, k0, k1, t, ra, rb);
	for (sgk_i64 kk = k0; kk < k1; kk += SGK_GEMM_BK) {
		sgk_gemm_stash(sm, t, ra, rb);
		__syncthreads();
		if (kk + SGK_GEMM_BK < k1)
			sgk_gemm_load<VEC>(A, lda, B, ldb, M, N, m0, n0, kk + SGK_GEMM_BK, k1, t, ra, rb);
#pragma unroll
		for (int k = 0; k < SGK_GEMM_BK; k++) {
			float4 a = *reinterpret_cast<const float4 *>(&sm.s.a[k][ty * 4]);
			float4 b = *reinterpret_cast<const float4 *>(&sm.s.b[k][tx * 4]);
			const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
		}
		__syncthreads();
	}

	if (gridDim.z == 1) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			sgk_i64 row = m0 + ty * 4 + i;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				sgk_i64 col = n0 + tx * 4 + j;
				if (row < M && col < N)
					epi(acc[i][j], row, col);
			}
		}
		return;
	}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
	__trap(); /* (no clusters before sm_90: the launcher takes split 1 only) */
#else
	/* The cluster's sum: every CTA puts its part in shared memory; CTA r
	 * adds the parts of rows [r * BM / split, (r + 1) * BM / split) in rank
	 * order. */
	const int split = (int)__clusterSizeInBlocks(), rank = (int)__clusterRelativeBlockRank();
#pragma unroll
	for (int i = 0; i < 4; i++)
		*reinterpret_cast<float4 *>(&sm.part[ty * 4 + i][tx * 4]) =
			make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
	sgk_cluster_sync();
	const int rows = SGK_GEMM_BM / split;
	for (int e = t; e < rows * SGK_GEMM_BN; e += SGK_GEMM_THREADS) {
		int r = rank * rows + e / SGK_GEMM_BN, c = e % SGK_GEMM_BN;
		float v = 0;
		for (int s = 0; s < split; s++)
			v += static_cast<const float *>(
				__cluster_map_shared_rank(&sm.part[0][0], (unsigned)s))[r * SGK_GEMM_BN + c];
		sgk_i64 row = m0 + r, col = n0 + c;
		if (row < M && col < N)
			epi(v, row, col);
	}
	sgk_cluster_sync(); /* no CTA leaves while another reads its part */
#endif
}

#ifndef __CUDACC_RTC__
#include <stdint.h>

/* epi(A @ B) on stream st, K split over `split` CTAs (1, 2, 4 or 8;
 * sg_gemm_small_split chooses). */
template <class Epi>
static cudaError_t
sg_launch_gemm_small(const float *A, sgk_i64 lda, const float *B, sgk_i64 ldb, sgk_i64 M,
                     sgk_i64 N, sgk_i64 K, int split, Epi epi, cudaStream_t st)
{
	if (M <= 0 || N <= 0 || K <= 0 || M > 65535 * (sgk_i64)SGK_GEMM_BM)
		return M <= 0 || N <= 0 ? cudaSuccess : cudaErrorInvalidValue;
	if (split != 1 && split != 2 && split != 4 && split != 8)
		return cudaErrorInvalidValue;
	sgk_i64 steps = (K + SGK_GEMM_BK - 1) / SGK_GEMM_BK;
	sgk_i64 kchunk = (steps + split - 1) / split * SGK_GEMM_BK;
	bool vec = K % 4 == 0 && N % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 &&
	           (uintptr_t)A % 16 == 0 && (uintptr_t)B % 16 == 0;
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];
	cfg.gridDim = dim3((unsigned)((N + SGK_GEMM_BN - 1) / SGK_GEMM_BN),
	                   (unsigned)((M + SGK_GEMM_BM - 1) / SGK_GEMM_BM), (unsigned)split);
	cfg.blockDim = dim3(SGK_GEMM_THREADS);
	cfg.stream = st;
	attr[0].id = cudaLaunchAttributeClusterDimension;
	attr[0].val.clusterDim.x = 1;
	attr[0].val.clusterDim.y = 1;
	attr[0].val.clusterDim.z = (unsigned)split;
	cfg.attrs = attr;
	cfg.numAttrs = split > 1; /* (split 1 runs without clusters: any GPU) */
	if (vec)
		return cudaLaunchKernelEx(&cfg, sgk_gemm_small<true, Epi>, A, lda, B, ldb, M, N, K,
		                          kchunk, epi);
	return cudaLaunchKernelEx(&cfg, sgk_gemm_small<false, Epi>, A, lda, B, ldb, M, N, K, kchunk,
	                          epi);
}
#endif

#pragma nv_diag_default 177

#endif
