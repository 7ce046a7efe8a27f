// Microbenchmark (bench/kernels/README.md): a weight gradient's product
// (cuBLASLt) and a memory-bound backward kernel that does not depend on it,
// one after the other on one stream against the two on two streams at
// once, the product on all SMs or told to target fewer (cuBLASLt's
// CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET) and the kernel's grid cut to the
// SMs left.  Two pairs at the transformer bench's shapes:
//   wgrad fc2 (8192 x 2048, K 16384, beta 1) beside the GELU backward with
//   the forward again (bf16 [16384, 8192]: reads f and dg, writes df, g);
//   wgrad qkv (2048 x 6144, K 16384, beta 1) beside the layer norm's
//   backward (sgk_norm_bwd_k, [16384, 2048] with the residual's gradient;
//   the 128-thread configuration with loads ahead the library ran at 09:42,
//   which since 15c2c8f takes two block sums a row instead of three and is
//   no longer the library's choice for this row length).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <functional>
#include "sgk_rows.cuh"
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1);} } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_) { printf("cublas %d line %d\n", (int)s_, __LINE__); exit(1);} } while (0)
typedef __nv_bfloat16 T;

__global__ void fill(T *p, size_t n, unsigned seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned x = (unsigned)i * 2654435761u ^ seed; x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
		p[i] = __float2bfloat16(((x & 0xffff) / 32768.0f - 1.0f));
	}
}

// The generated GELU backward's shape: 16-byte vectors, a grid-stride loop;
// erff's formula, as the generated kernels had before commit 82d26f4.
__global__ void __launch_bounds__(256) gelu_bwd(const uint4 *f, const uint4 *dg, uint4 *df, uint4 *g, size_t nv)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nv; i += (size_t)gridDim.x * blockDim.x) {
		uint4 a = f[i], b = dg[i], o, q;
		const T *pa = (const T *)&a, *pb = (const T *)&b;
		T *po = (T *)&o, *pq = (T *)&q;
#pragma unroll
		for (int e = 0; e < 8; e++) {
			const float x = __bfloat162float(pa[e]), d = __bfloat162float(pb[e]);
			const float cdf = 0.5f * (1.0f + erff(x * 0.70710678f));
			pq[e] = __float2bfloat16(x * cdf);
			po[e] = __float2bfloat16(d * (cdf + x * expf(-0.5f * x * x) * 0.39894228f));
		}
		df[i] = o;
		g[i] = q;
	}
}

struct Gemm {
	cublasLtHandle_t h;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
	void *A, *B, *C, *ws;
	size_t wsb;
	Gemm(cublasLtHandle_t h_, int m, int n, int k, int sms, void *A_, void *B_, void *C_, void *ws_, size_t wsb_)
	    : h(h_), A(A_), B(B_), C(C_), ws(ws_), wsb(wsb_)
	{
		LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
		int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_T;
		LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
		LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
		if (sms > 0)
			LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof sms));
		LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m));
		LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, k, n));
		LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m));
		cublasLtMatmulPreference_t pref;
		LT(cublasLtMatmulPreferenceCreate(&pref));
		LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
		cublasLtMatmulHeuristicResult_t res[1];
		int nres = 0;
		LT(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, res, &nres));
		if (!nres) { printf("no algorithm\n"); exit(1); }
		algo = res[0].algo;
		cublasLtMatmulPreferenceDestroy(pref);
	}
	void run(cudaStream_t s)
	{
		float alpha = 1, beta = 1;
		LT(cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &algo, ws, wsb, s));
	}
};

static cudaStream_t s0, s1;
static cudaEvent_t ea, eb, fork, join;

// Mean ms of reps calls of f after 3 warm-ups.
static float timed(const std::function<void()> &f, int reps = 20)
{
	for (int i = 0; i < 3; i++) f();
	CK(cudaStreamSynchronize(s0));
	CK(cudaEventRecord(ea, s0));
	for (int i = 0; i < reps; i++) f();
	CK(cudaEventRecord(eb, s0));
	CK(cudaEventSynchronize(eb));
	float ms;
	CK(cudaEventElapsedTime(&ms, ea, eb));
	CK(cudaGetLastError());
	return ms / reps;
}

// g on s1 and k on s0 at once (first launched first), joined on s0.
static void both(Gemm &g, const std::function<void(cudaStream_t)> &k, bool gemm_first)
{
	CK(cudaEventRecord(fork, s0));
	CK(cudaStreamWaitEvent(s1, fork, 0));
	if (gemm_first) { g.run(s1); k(s0); } else { k(s0); g.run(s1); }
	CK(cudaEventRecord(join, s1));
	CK(cudaStreamWaitEvent(s0, join, 0));
}

static void pair(const char *name, cublasLtHandle_t h, int m, int n, int k, void *A, void *B, void *C, void *ws,
                 size_t wsb, int nsm, const std::function<void(cudaStream_t, int)> &mem, int mem_full_grid)
{
	Gemm full(h, m, n, k, 0, A, B, C, ws, wsb);
	const double flop = 2.0 * m * n * k;
	const float tg = timed([&] { full.run(s0); });
	const float tm = timed([&] { mem(s0, mem_full_grid); });
	const float ser = timed([&] { full.run(s0); mem(s0, mem_full_grid); });
	printf("%s: product %.4f ms (%.0f TFLOP/s), kernel %.4f ms, one stream %.4f ms\n", name, tg, flop / tg / 1e9,
	       tm, ser);
	printf("  two streams, all SMs: product first %.4f ms, kernel first %.4f ms\n",
	       timed([&] { both(full, [&](cudaStream_t s) { mem(s, mem_full_grid); }, true); }),
	       timed([&] { both(full, [&](cudaStream_t s) { mem(s, mem_full_grid); }, false); }));
	const int ks[] = {8, 16, 24, 32, 48};
	for (int left : ks) {
		Gemm part(h, m, n, k, nsm - left, A, B, C, ws, wsb);
		const float tp = timed([&] { part.run(s0); });
		const int grid = left * 8;
		const float tk = timed([&] { mem(s0, grid); });
		const float pf = timed([&] { both(part, [&](cudaStream_t s) { mem(s, grid); }, true); });
		const float kf = timed([&] { both(part, [&](cudaStream_t s) { mem(s, grid); }, false); });
		const float pfull = timed([&] { both(part, [&](cudaStream_t s) { mem(s, mem_full_grid); }, true); });
		printf("  product on %3d SMs %.4f ms, kernel on %2d SMs' grid %.4f ms; together %.4f (product first), "
		       "%.4f (kernel first), %.4f (kernel's full grid): %.1f%% of one stream\n",
		       nsm - left, tp, left, tk, pf, kf, pfull, 100.0 * fminf(pf, fminf(kf, pfull)) / ser);
	}
}

int main()
{
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	const int nsm = prop.multiProcessorCount;
	printf("%s, %d SMs\n", prop.name, nsm);
	cublasLtHandle_t h;
	LT(cublasLtCreate(&h));
	CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	CK(cudaEventCreate(&ea)); CK(cudaEventCreate(&eb));
	CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
	CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
	const size_t big = (size_t)16384 * 8192;
	T *A, *B, *C, *f, *dg, *df, *g;
	void *ws;
	const size_t wsb = 32u << 20;
	CK(cudaMalloc(&A, big * 2)); CK(cudaMalloc(&B, big * 2)); CK(cudaMalloc(&C, big * 2));
	CK(cudaMalloc(&f, big * 2)); CK(cudaMalloc(&dg, big * 2)); CK(cudaMalloc(&df, big * 2)); CK(cudaMalloc(&g, big * 2));
	CK(cudaMalloc(&ws, wsb));
	T *bufs[] = {A, B, C, f, dg, df, g};
	for (int i = 0; i < 7; i++) fill<<<1024, 256>>>(bufs[i], big, 11 * i + 1);
	CK(cudaDeviceSynchronize());

	// wgrad fc2: dW[2048, 8192] += dy^T g, column-major m 8192, n 2048.
	pair("wgrad fc2 + GELU backward", h, 8192, 2048, 16384, A, B, C, ws, wsb, nsm,
	     [&](cudaStream_t s, int grid) {
		     gelu_bwd<<<grid, 256, 0, s>>>((const uint4 *)f, (const uint4 *)dg, (uint4 *)df, (uint4 *)g, big / 8);
	     }, 4096);

	// wgrad qkv beside the norm backward, [16384, 2048] bf16.
	const long long R = 16384;
	const int Cn = 2048;
	typedef float Acc;
	Acc *work;
	CK(cudaMalloc(&work, (size_t)2 * 65536 * Cn * 4));
	T *w = f, *dw = f + Cn, *db = f + 2 * Cn, *x = f + 4096, *dy = dg, *add = df, *dx = g;
	auto norm = [&](cudaStream_t s, int grid) {
		long long P = (long long)grid;
		auto *k = sgk_norm_bwd_k<T, 8, 128, 2, false, true>;
		const int smem = sgk_norm_smem_bytes<Acc, 8, 128, 2>();
		k<<<(unsigned)P, 128, smem, s>>>(dy, x, w, add, nullptr, nullptr, dx, work, R, Cn, 1e-5f);
		sgk_norm_parts_sum_k<T><<<dim3((Cn + 31) / 32, 2), dim3(32, 16), 0, s>>>(work, (int)P, Cn, dw, db);
	};
	pair("wgrad qkv + layer norm backward", h, 2048, 6144, 16384, A, B, C, ws, wsb, nsm, norm,
	     (int)sgk_norm_bwd_parts(R, 128, true));
	return 0;
}
