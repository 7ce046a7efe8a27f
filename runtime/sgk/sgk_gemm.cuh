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
 * computing 4 x 4, K in steps of 32 through shared memory: copied by
 * cp.async with the next step's copies in flight (sgk_gemm_small_async,
 * 16-byte aligned operands), or with the next step's element loads in
 * registers (sgk_gemm_small, any alignment).  K is split over the `split`
 * CTAs of a thread block cluster (1, 2, 4, 8 or 16; more than 1 needs
 * sm_90, 16 its non-portable cluster size): each sums its
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
struct alignas(16) SgkGemmSmem {
	union {
		struct {
			float a[SGK_GEMM_BK][SGK_GEMM_BM + 4];
			float b[SGK_GEMM_BK][SGK_GEMM_BN];
		} s;
		float part[SGK_GEMM_BM][SGK_GEMM_BN];
	};
};

/* p[0..3], element by element: p[j] where `in` and i + j < end, else 0. */
SGK_DEV float4
sgk_gemm_ld4(const float *p, bool in, sgk_i64 i, sgk_i64 end)
{
	float4 v;
	v.x = in && i < end ? p[0] : 0.0f;
	v.y = in && i + 1 < end ? p[1] : 0.0f;
	v.z = in && i + 2 < end ? p[2] : 0.0f;
	v.w = in && i + 3 < end ? p[3] : 0.0f;
	return v;
}

/* One step's loads into registers, element by element (any alignment):
 * the A step is 256 groups of 4 along k (2 a thread), the B step 512
 * along n (4 a thread). */
SGK_DEV void
sgk_gemm_load(const float *A, sgk_i64 lda, const float *B, sgk_i64 ldb, sgk_i64 M, sgk_i64 N,
              sgk_i64 m0, sgk_i64 n0, sgk_i64 kk, sgk_i64 k1, int t, float4 ra[2], float4 rb[4])
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int idx = t + SGK_GEMM_THREADS * r;
		sgk_i64 row = m0 + idx / 8, k = kk + (idx % 8) * 4;
		ra[r] = sgk_gemm_ld4(A + row * lda + k, row < M, k, k1);
	}
#pragma unroll
	for (int r = 0; r < 4; r++) {
		int idx = t + SGK_GEMM_THREADS * r;
		sgk_i64 k = kk + idx / 16, col = n0 + (idx % 16) * 4;
		rb[r] = sgk_gemm_ld4(B + k * ldb + col, k < k1, col, N);
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

/* The end of a product: a thread's 4 x 4 sums (rows m0 + ty * 4 + i,
 * columns n0 + tx * 4 + j) to the epilogue; with K split over a cluster,
 * the parts added first: every CTA puts its part in shared memory (`part`,
 * BM x BN floats, free to reuse), and CTA r adds the parts of rows
 * [r * BM / split, (r + 1) * BM / split) in rank order. */
template <class Epi>
SGK_DEV void
sgk_gemm_finish(float *part, const float (&acc)[4][4], sgk_i64 m0, sgk_i64 n0, sgk_i64 M,
                sgk_i64 N, int t, const Epi &epi)
{
	const int tx = t % 16, ty = t / 16;
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
	const int split = (int)__clusterSizeInBlocks(), rank = (int)__clusterRelativeBlockRank();
#pragma unroll
	for (int i = 0; i < 4; i++)
		*reinterpret_cast<float4 *>(&part[(ty * 4 + i) * SGK_GEMM_BN + tx * 4]) =
			make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
	sgk_cluster_sync();
	const int rows = SGK_GEMM_BM / split;
	for (int e = t; e < rows * SGK_GEMM_BN; e += SGK_GEMM_THREADS) {
		int r = rank * rows + e / SGK_GEMM_BN, c = e % SGK_GEMM_BN;
		float v = 0;
		for (int s = 0; s < split; s++)
			v += static_cast<const float *>(
				__cluster_map_shared_rank(part, (unsigned)s))[r * SGK_GEMM_BN + c];
		sgk_i64 row = m0 + r, col = n0 + c;
		if (row < M && col < N)
			epi(v, row, col);
	}
	sgk_cluster_sync(); /* no CTA leaves while another reads its part */
#endif
}

template <class Epi>
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
		sgk_gemm_load(A, lda, B, ldb, M, N, m0, n0, k0, k1, t, ra, rb);
	for (sgk_i64 kk = k0; kk < k1; kk += SGK_GEMM_BK) {
		sgk_gemm_stash(sm, t, ra, rb);
		__syncthreads();
		if (kk + SGK_GEMM_BK < k1)
			sgk_gemm_load(A, lda, B, ldb, M, N, m0, n0, kk + SGK_GEMM_BK, k1, t, ra, rb);
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

	sgk_gemm_finish(&sm.part[0][0], acc, m0, n0, M, N, t, epi);
}

/* The product with 16-byte loads (K, N, lda, ldb multiples of 4 and A, B
 * 16-byte aligned): each step of K is copied into shared memory by
 * cp.async, the next step's copies in flight while a step is summed, so
 * a CTA issues no load it waits on in registers.  A lands row-major
 * ([BM][BK + 4]: a thread reads 4 k of a row at once, the two rows a warp
 * reads at a time 16 banks apart).  Each output's sum runs over k in the
 * same order as sgk_gemm_small's, so the two kernels give the same bits. */
enum { SGK_GEMM_LDA_S = SGK_GEMM_BK + 4 };

struct alignas(16) SgkGemmStage {
	float a[SGK_GEMM_BM][SGK_GEMM_LDA_S];
	float b[SGK_GEMM_BK][SGK_GEMM_BN];
};

/* Step kk's copies into st (rows past M and k past k1 land as zeros). */
SGK_DEV void
sgk_gemm_copy(SgkGemmStage &st, const float *A, sgk_i64 lda, const float *B, sgk_i64 ldb,
              sgk_i64 M, sgk_i64 N, sgk_i64 m0, sgk_i64 n0, sgk_i64 kk, sgk_i64 k1, int t)
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int idx = t + SGK_GEMM_THREADS * r, row = idx / 8, k = (idx % 8) * 4;
		bool in = m0 + row < M && kk + k < k1;
		sgk_cp_async16(&st.a[row][k], in ? A + (m0 + row) * lda + kk + k : A, in ? 16 : 0);
	}
#pragma unroll
	for (int r = 0; r < 4; r++) {
		int idx = t + SGK_GEMM_THREADS * r, k = idx / 16, col = (idx % 16) * 4;
		bool in = kk + k < k1 && n0 + col < N;
		sgk_cp_async16(&st.b[k][col], in ? B + (kk + k) * ldb + n0 + col : B, in ? 16 : 0);
	}
}

template <class Epi>
__global__ void __launch_bounds__(SGK_GEMM_THREADS)
sgk_gemm_small_async(const float *__restrict__ A, sgk_i64 lda, const float *__restrict__ B,
                     sgk_i64 ldb, sgk_i64 M, sgk_i64 N, sgk_i64 K, sgk_i64 kchunk, Epi epi)
{
	__shared__ union {
		SgkGemmStage stage[2];
		float part[SGK_GEMM_BM][SGK_GEMM_BN];
	} sm;
	const int t = threadIdx.x, tx = t % 16, ty = t / 16;
	const sgk_i64 m0 = (sgk_i64)blockIdx.y * SGK_GEMM_BM, n0 = (sgk_i64)blockIdx.x * SGK_GEMM_BN;
	const sgk_i64 k0 = (sgk_i64)blockIdx.z * kchunk;
	const sgk_i64 k1 = k0 + kchunk < K ? k0 + kchunk : K;
	const int steps = k0 < k1 ? (int)((k1 - k0 + SGK_GEMM_BK - 1) / SGK_GEMM_BK) : 0;
	float acc[4][4] = {};

	if (steps > 0)
		sgk_gemm_copy(sm.stage[0], A, lda, B, ldb, M, N, m0, n0, k0, k1, t);
	sgk_cp_commit();
	for (int s = 0; s < steps; s++) {
		sgk_cp_wait<0>();
		__syncthreads(); /* step s arrived; every thread is done with step s - 1 */
		if (s + 1 < steps)
			sgk_gemm_copy(sm.stage[(s + 1) % 2], A, lda, B, ldb, M, N, m0, n0,
			              k0 + (sgk_i64)(s + 1) * SGK_GEMM_BK, k1, t);
		sgk_cp_commit();
		const SgkGemmStage &sg = sm.stage[s % 2];
#pragma unroll
		for (int k = 0; k < SGK_GEMM_BK; k += 4) {
			float4 a4[4];
#pragma unroll
			for (int i = 0; i < 4; i++)
				a4[i] = *reinterpret_cast<const float4 *>(&sg.a[ty * 4 + i][k]);
#pragma unroll
			for (int kk = 0; kk < 4; kk++) {
				float4 b = *reinterpret_cast<const float4 *>(&sg.b[k + kk][tx * 4]);
				const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const float av = kk == 0 ? a4[i].x : kk == 1 ? a4[i].y
					                               : kk == 2 ? a4[i].z : a4[i].w;
#pragma unroll
					for (int j = 0; j < 4; j++)
						acc[i][j] = fmaf(av, bv[j], acc[i][j]);
				}
			}
		}
	}
	__syncthreads(); /* the stages are free for the parts */
	sgk_gemm_finish(&sm.part[0][0], acc, m0, n0, M, N, t, epi);
}

#ifndef __CUDACC_RTC__
#include <stdint.h>

/* epi(A @ B) on stream st, K split over `split` CTAs (1, 2, 4, 8 or 16;
 * sg_gemm_small_split chooses): sgk_gemm_small_async where 16-byte copies
 * are allowed, else sgk_gemm_small with element loads. */
template <class Epi>
static cudaError_t
sg_launch_gemm_small(const float *A, sgk_i64 lda, const float *B, sgk_i64 ldb, sgk_i64 M,
                     sgk_i64 N, sgk_i64 K, int split, Epi epi, cudaStream_t st)
{
	if (M <= 0 || N <= 0 || K <= 0 || M > 65535 * (sgk_i64)SGK_GEMM_BM)
		return M <= 0 || N <= 0 ? cudaSuccess : cudaErrorInvalidValue;
	if (split != 1 && split != 2 && split != 4 && split != 8 && split != 16)
		return cudaErrorInvalidValue;
	sgk_i64 steps = (K + SGK_GEMM_BK - 1) / SGK_GEMM_BK;
	sgk_i64 kchunk = (steps + split - 1) / split * SGK_GEMM_BK;
	bool vec = K % 4 == 0 && N % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 &&
	           (uintptr_t)A % 16 == 0 && (uintptr_t)B % 16 == 0;
	void (*kern)(const float *, sgk_i64, const float *, sgk_i64, sgk_i64, sgk_i64, sgk_i64,
	             sgk_i64, Epi) = vec ? sgk_gemm_small_async<Epi> : sgk_gemm_small<Epi>;
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
	if (split > 8) {
		/* clusters of 16 CTAs are beyond the portable 8 (sm_90 has them) */
		cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
		if (e != cudaSuccess)
			return e;
	}
	return cudaLaunchKernelEx(&cfg, kern, A, lda, B, ldb, M, N, K, kchunk, epi);
}
#endif

#pragma nv_diag_default 177

#endif
