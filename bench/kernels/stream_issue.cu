// Microbenchmark (bench/kernels/README.md): what issuing two_branch's work
// costs the host, by the order of issue.  Two chains of 16 layers, each a
// cuBLASLt product of 64x1024 by 1024x1024 (f32, as bench/two_branch.sg)
// and a tanh kernel, issued
//   1s       on one stream, layer by layer in turn (two_branch_1s.sg)
//   2s/1     on two streams, the chains' layers in turn (two_branch.sg)
//   2s/2     on two streams, two layers of one chain, then two of the other
//   2s/4     the same by four layers
//   2s/16    all of chain a, then all of chain b
// with the side stream waiting for the default one at the start and the
// default one for the side at the end, as the programs do.  Per order: the
// host's time to issue a call (start to the last launch returned) and the
// call's time (start to the end of its work), medians of 200 calls.  The
// same with empty kernels for the products and tanh: the launches alone.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <chrono>
#include <vector>
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1);} } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_) { printf("cublas %d line %d\n", (int)s_, __LINE__); exit(1);} } while (0)

enum { B = 64, D = 1024, L = 16, CALLS = 200 };

__global__ void tanh_k(const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = tanhf(x[i]);
}

__global__ void empty_k() {}

struct Ctx {
	cublasLtHandle_t lt;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
	cudaStream_t s[2];
	cudaEvent_t fork, join;
	void *ws[2];
	size_t wsz;
	float *w[L], *x[2], *h[2][L], *y[2][L];
};

// One layer of chain c on stream st: y = tanh(x @ w), or two empty kernels.
static void layer(Ctx &C, int c, int l, cudaStream_t st, bool empty)
{
	if (empty) {
		empty_k<<<1, 32, 0, st>>>();
		empty_k<<<1, 32, 0, st>>>();
		return;
	}
	const float one = 1, zero = 0;
	const float *in = l ? C.y[c][l - 1] : C.x[c];
	// row-major y[B, D] = x[B, D] w[D, D] as column-major y^T = w^T x^T
	LT(cublasLtMatmul(C.lt, C.op, &one, C.w[l], C.lb, in, C.la, &zero, C.h[c][l], C.lc,
	                  C.h[c][l], C.lc, &C.algo, C.ws[st == C.s[1]], C.wsz, st));
	tanh_k<<<B * D / 256, 256, 0, st>>>(C.h[c][l], C.y[c][l], B * D);
}

// One call in order g (0: one stream; else groups of g layers per chain).
static void call(Ctx &C, int g, bool empty)
{
	if (g == 0) {
		for (int l = 0; l < L; l++)
			for (int c = 0; c < 2; c++)
				layer(C, c, l, C.s[0], empty);
		return;
	}
	CK(cudaEventRecord(C.fork, C.s[0]));
	CK(cudaStreamWaitEvent(C.s[1], C.fork, 0));
	for (int l0 = 0; l0 < L; l0 += g)
		for (int c = 0; c < 2; c++)
			for (int l = l0; l < l0 + g; l++)
				layer(C, c, l, C.s[c], empty);
	CK(cudaEventRecord(C.join, C.s[1]));
	CK(cudaStreamWaitEvent(C.s[0], C.join, 0));
}

static double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

int main()
{
	Ctx C;
	LT(cublasLtCreate(&C.lt));
	CK(cudaStreamCreateWithFlags(&C.s[0], cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&C.s[1], cudaStreamNonBlocking));
	CK(cudaEventCreateWithFlags(&C.fork, cudaEventDisableTiming));
	CK(cudaEventCreateWithFlags(&C.join, cudaEventDisableTiming));
	C.wsz = 32 << 20;
	for (int i = 0; i < 2; i++)
		CK(cudaMalloc(&C.ws[i], C.wsz));
	for (int l = 0; l < L; l++) {
		CK(cudaMalloc(&C.w[l], sizeof(float) * D * D));
		CK(cudaMemset(C.w[l], 0, sizeof(float) * D * D));
	}
	for (int c = 0; c < 2; c++) {
		CK(cudaMalloc(&C.x[c], sizeof(float) * B * D));
		CK(cudaMemset(C.x[c], 0, sizeof(float) * B * D));
		for (int l = 0; l < L; l++) {
			CK(cudaMalloc(&C.h[c][l], sizeof(float) * B * D));
			CK(cudaMalloc(&C.y[c][l], sizeof(float) * B * D));
		}
	}
	LT(cublasLtMatmulDescCreate(&C.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT(cublasLtMatrixLayoutCreate(&C.la, CUDA_R_32F, D, B, D)); // x^T: D x B
	LT(cublasLtMatrixLayoutCreate(&C.lb, CUDA_R_32F, D, D, D)); // w^T: D x D
	LT(cublasLtMatrixLayoutCreate(&C.lc, CUDA_R_32F, D, B, D)); // y^T: D x B
	cublasLtMatmulPreference_t pref;
	LT(cublasLtMatmulPreferenceCreate(&pref));
	LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
	                                        &C.wsz, sizeof C.wsz));
	cublasLtMatmulHeuristicResult_t res;
	int nres = 0;
	LT(cublasLtMatmulAlgoGetHeuristic(C.lt, C.op, C.lb, C.la, C.lc, C.lc, pref, 1, &res, &nres));
	if (!nres) {
		printf("no algorithm\n");
		return 1;
	}
	C.algo = res.algo;
	const int orders[] = {0, 1, 2, 4, 16};
	for (int empty = 0; empty < 2; empty++) {
		printf("%s\n", empty ? "empty kernels (64 launches a call)"
		                     : "products and tanh (64 launches a call)");
		printf("  %-6s %10s %10s %12s\n", "order", "issue ms", "call ms", "us/launch");
		for (int g : orders) {
			std::vector<double> issue, total;
			for (int k = 0; k < 20 + CALLS; k++) {
				auto t0 = std::chrono::steady_clock::now();
				call(C, g, empty);
				auto t1 = std::chrono::steady_clock::now();
				CK(cudaStreamSynchronize(C.s[0]));
				auto t2 = std::chrono::steady_clock::now();
				if (k >= 20) {
					issue.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
					total.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
				}
			}
			char name[16];
			snprintf(name, sizeof name, g ? "2s/%d" : "1s", g);
			printf("  %-6s %10.3f %10.3f %12.2f\n", name, median(issue), median(total),
			       1000 * median(issue) / 64);
		}
	}
	return 0;
}
