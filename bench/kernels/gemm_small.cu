// Microbenchmark (bench/kernels/README.md): the small f32 product with its
// epilogue (runtime/sgk/sgk_gemm.cuh's sgk_gemm_small, what sgc emits for
// `tanh(matmul(%x, %w))` when kernel_small_product holds) against what it
// replaces, cuBLASLt's product (the fastest of its heuristic's best 8, as
// libsgrt's tuning picks) and a tanh kernel, on the GPU alone: each
// variant's 20 calls in a row captured into a CUDA graph, replayed, the
// median of 50 replays over 20; every split of K, sg_gemm_small_split's
// choice against cuBLASLt's, and the fastest split.  Shapes across kernel_small_product's
// range (at most 64 tiles of 32 x 64 outputs, K up to 16384).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "sgk/sgk_gemm.cuh"

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1);} } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_) { printf("cublas %d line %d\n", (int)s_, __LINE__); exit(1);} } while (0)

enum { REPS = 20 };

__global__ void tanh_k(const float *x, float *y, long long n)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = tanhf(x[i]);
}

struct EpiTanh {
	float *y;
	long long n;
	__device__ void operator()(float acc, sgk_i64 row, sgk_i64 col) const
	{
		y[row * n + col] = tanhf(acc);
	}
};

// The median time (ms) of one call of f, REPS calls in a captured graph.
template <class F>
static double graph_ms(cudaStream_t st, F f)
{
	cudaGraph_t g;
	cudaGraphExec_t ex;
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	for (int i = 0; i < REPS; i++)
		f();
	CK(cudaStreamEndCapture(st, &g));
	CK(cudaGraphInstantiate(&ex, g, 0));
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	std::vector<float> t;
	for (int k = 0; k < 70; k++) {
		CK(cudaEventRecord(a, st));
		CK(cudaGraphLaunch(ex, st));
		CK(cudaEventRecord(b, st));
		CK(cudaEventSynchronize(b));
		float ms;
		CK(cudaEventElapsedTime(&ms, a, b));
		if (k >= 20)
			t.push_back(ms / REPS);
	}
	std::sort(t.begin(), t.end());
	CK(cudaGraphExecDestroy(ex));
	CK(cudaGraphDestroy(g));
	return t[t.size() / 2];
}

int main()
{
	const long long shapes[][3] = {
		{64, 1024, 1024}, {37, 70, 300},    {128, 128, 128},  {16, 256, 4096},
		{8, 64, 16384},   {32, 2048, 2048}, {256, 512, 1024}, {512, 256, 256},
		{2048, 64, 512},  {256, 512, 4096},
	};
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	cublasLtHandle_t lt;
	LT(cublasLtCreate(&lt));
	size_t wsz = 32 << 20;
	void *ws;
	CK(cudaMalloc(&ws, wsz));
	printf("%-18s %5s %12s   sgk_gemm_small at splits 1 2 4 8 16 (us a call)\n", "M x N x K",
	       "split", "cuBLASLt+tanh");
	for (auto &s : shapes) {
		long long M = s[0], N = s[1], K = s[2];
		float *a, *b, *h, *y;
		CK(cudaMalloc(&a, M * K * 4));
		CK(cudaMalloc(&b, K * N * 4));
		CK(cudaMalloc(&h, M * N * 4));
		CK(cudaMalloc(&y, M * N * 4));
		CK(cudaMemset(a, 0, M * K * 4));
		CK(cudaMemset(b, 0, K * N * 4));
		cublasLtMatmulDesc_t op;
		cublasLtMatrixLayout_t la, lb, lc;
		LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
		// row-major y[M, N] = a[M, K] b[K, N] as column-major y^T = b^T a^T
		LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, K, M, K));
		LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, N, K, N));
		LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, N));
		cublasLtMatmulPreference_t pref;
		LT(cublasLtMatmulPreferenceCreate(&pref));
		LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
		                                        &wsz, sizeof wsz));
		cublasLtMatmulHeuristicResult_t res[8];
		int nres = 0;
		LT(cublasLtMatmulAlgoGetHeuristic(lt, op, lb, la, lc, lc, pref, 8, res, &nres));
		const float one = 1, zero = 0;
		double best = 1e30;
		for (int r = 0; r < nres; r++) {
			double ms = graph_ms(st, [&] {
				LT(cublasLtMatmul(lt, op, &one, b, lb, a, la, &zero, h, lc, h, lc, &res[r].algo,
				                  ws, wsz, st));
				tanh_k<<<(unsigned)((M * N + 255) / 256), 256, 0, st>>>(h, y, M * N);
			});
			best = std::min(best, ms);
		}
		int split = sg_gemm_small_split(M, N, K), best_split = 1;
		double own = 0, own_best = 1e30;
		char name[40];
		snprintf(name, sizeof name, "%lldx%lldx%lld", M, N, K);
		printf("%-18s %5d %12.2f  ", name, split, best * 1000);
		for (int sp = 1; sp <= 16; sp *= 2) {
			double ms = graph_ms(st, [&] {
				CK(sg_launch_gemm_small(a, K, b, N, M, N, K, sp, EpiTanh{y, N}, st));
			});
			printf(" %.2f", ms * 1000);
			if (sp == split)
				own = ms;
			if (ms < own_best)
				own_best = ms, best_split = sp;
		}
		printf("   chosen %.2f (%.2f of cuBLASLt's; best split %d)\n", own * 1000, own / best,
		       best_split);
		LT(cublasLtMatmulPreferenceDestroy(pref));
		LT(cublasLtMatrixLayoutDestroy(la));
		LT(cublasLtMatrixLayoutDestroy(lb));
		LT(cublasLtMatrixLayoutDestroy(lc));
		LT(cublasLtMatmulDescDestroy(op));
		CK(cudaFree(a));
		CK(cudaFree(b));
		CK(cudaFree(h));
		CK(cudaFree(y));
	}
	return 0;
}
