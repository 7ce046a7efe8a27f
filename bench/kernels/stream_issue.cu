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
// same with empty kernels for the products and tanh: the launches alone;
// and with libsgrt's small product (runtime/sgk/sgk_gemm.cuh) instead of
// cuBLASLt's, followed by the tanh kernel, or with the tanh in its
// epilogue (one launch a layer).  Then the GPU's time of a call without the
// host's issue: each order captured into a CUDA graph, replayed.  First,
// the small product against cuBLASLt's on random operands.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <chrono>
#include <vector>
#include <math.h>

#include "sgk/sgk_gemm.cuh"
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

// y = tanh(acc), as the generated functor of tanh(matmul(x, w)) stores it.
struct EpiTanh {
	float *y;
	__device__ void operator()(float acc, sgk_i64 row, sgk_i64 col) const
	{
		y[row * D + col] = tanhf(acc);
	}
};

// How a layer is issued.
enum Kind { LT, EMPTY, OWN, FUSED, NKINDS };
static const char *const kind_name[] = {
	"cuBLASLt product and tanh kernel (2 launches a layer)",
	"empty kernels (2 launches a layer)",
	"sgk_gemm_small and tanh kernel (2 launches a layer)",
	"sgk_gemm_small with tanh in its epilogue (1 launch a layer)",
};

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
	int split;
};

// One layer of chain c on stream st: y = tanh(x @ w), or two empty kernels.
static void layer(Ctx &C, int c, int l, cudaStream_t st, Kind kind)
{
	if (kind == EMPTY) {
		empty_k<<<1, 32, 0, st>>>();
		empty_k<<<1, 32, 0, st>>>();
		return;
	}
	const float one = 1, zero = 0;
	const float *in = l ? C.y[c][l - 1] : C.x[c];
	if (kind == FUSED) {
		CK(sg_launch_gemm_small(in, D, C.w[l], D, B, D, D, C.split, EpiTanh{C.y[c][l]}, st));
		return;
	}
	if (kind == OWN) {
		CK(sg_launch_gemm_small(in, D, C.w[l], D, B, D, D, C.split,
		                        SgkGemmStore{C.h[c][l], D}, st));
	} else {
		// row-major y[B, D] = x[B, D] w[D, D] as column-major y^T = w^T x^T
		LT(cublasLtMatmul(C.lt, C.op, &one, C.w[l], C.lb, in, C.la, &zero, C.h[c][l],
		                  C.lc, C.h[c][l], C.lc, &C.algo, C.ws[st == C.s[1]], C.wsz, st));
	}
	tanh_k<<<B * D / 256, 256, 0, st>>>(C.h[c][l], C.y[c][l], B * D);
}

// One call in order g (0: one stream; else groups of g layers per chain).
static void call(Ctx &C, int g, Kind empty)
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

static void fill(float *d, size_t n, float scale, unsigned seed)
{
	std::vector<float> h(n);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		h[i] = scale * ((float)(seed >> 8) / 16777216.0f * 2 - 1);
	}
	CK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

// The GPU's time of one call of order g, captured as a graph: median of
// CALLS replays, each waited for.
static double replay_ms(Ctx &C, int g, Kind kind)
{
	cudaGraph_t gr;
	cudaGraphExec_t ex;
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaStreamBeginCapture(C.s[0], cudaStreamCaptureModeThreadLocal));
	call(C, g, kind);
	CK(cudaStreamEndCapture(C.s[0], &gr));
	CK(cudaGraphInstantiate(&ex, gr, 0));
	std::vector<double> t;
	for (int k = 0; k < 20 + CALLS; k++) {
		CK(cudaEventRecord(e0, C.s[0]));
		CK(cudaGraphLaunch(ex, C.s[0]));
		CK(cudaEventRecord(e1, C.s[0]));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (k >= 20)
			t.push_back(ms);
	}
	CK(cudaGraphExecDestroy(ex));
	CK(cudaGraphDestroy(gr));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	std::sort(t.begin(), t.end());
	return t[t.size() / 2];
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
		fill(C.w[l], (size_t)D * D, 1.5f / 32, 7 + l);
	}
	for (int c = 0; c < 2; c++) {
		CK(cudaMalloc(&C.x[c], sizeof(float) * B * D));
		fill(C.x[c], (size_t)B * D, 1.0f, 100 + c);
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
	// The small product against cuBLASLt's: one call of each, 1s order.
	{
		std::vector<float> a((size_t)2 * L * B * D), b(a.size());
		call(C, 0, LT);
		CK(cudaDeviceSynchronize());
		for (int c = 0; c < 2; c++)
			for (int l = 0; l < L; l++)
				CK(cudaMemcpy(&a[((size_t)c * L + l) * B * D], C.y[c][l],
				              sizeof(float) * B * D, cudaMemcpyDeviceToHost));
		double worst[NKINDS] = {};
		for (int k = OWN; k <= FUSED; k++) {
			for (int split = 1; split <= 16; split *= 2) {
				C.split = split;
				call(C, 0, (Kind)k);
				CK(cudaDeviceSynchronize());
				for (int c = 0; c < 2; c++)
					for (int l = 0; l < L; l++)
						CK(cudaMemcpy(&b[((size_t)c * L + l) * B * D], C.y[c][l],
						              sizeof(float) * B * D, cudaMemcpyDeviceToHost));
				for (size_t i = 0; i < a.size(); i++)
					worst[k] = std::max(worst[k], (double)fabsf(a[i] - b[i]));
			}
		}
		double mean = 0;
		for (size_t i = 0; i < a.size(); i++)
			mean += fabsf(a[i]);
		printf("check: the 32 layers' outputs (mean |y| %.3f), largest difference from "
		       "cuBLASLt's: %.3g (product + tanh), %.3g (fused), splits 1-16\n",
		       mean / a.size(), worst[OWN], worst[FUSED]);
		if (worst[OWN] > 1e-4 || worst[FUSED] > 1e-4 || !(mean > 0.05)) {
			printf("FAILED\n");
			return 1;
		}
	}
	C.split = sg_gemm_small_split(B, D, D);
	printf("split %d (sg_gemm_small_split)\n", C.split);
	printf("GPU time of a call, captured and replayed (ms), by split:\n");
	for (int split = 1; split <= 16; split *= 2) {
		int keep = C.split;
		C.split = split;
		printf("  split %d: own+tanh 1s %.3f 2s/1 %.3f; fused 1s %.3f 2s/1 %.3f 2s/2 %.3f\n",
		       split, replay_ms(C, 0, OWN), replay_ms(C, 1, OWN), replay_ms(C, 0, FUSED),
		       replay_ms(C, 1, FUSED), replay_ms(C, 2, FUSED));
		C.split = keep;
	}
	printf("  cuBLASLt+tanh: 1s %.3f 2s/1 %.3f 2s/2 %.3f\n", replay_ms(C, 0, LT),
	       replay_ms(C, 1, LT), replay_ms(C, 2, LT));
	const int orders[] = {0, 1, 2, 4, 16};
	for (int kind = 0; kind < NKINDS; kind++) {
		printf("%s\n", kind_name[kind]);
		int launches = kind == FUSED ? 32 : 64;
		printf("  %-6s %10s %10s %12s\n", "order", "issue ms", "call ms", "us/launch");
		for (int g : orders) {
			std::vector<double> issue, total;
			for (int k = 0; k < 20 + CALLS; k++) {
				auto t0 = std::chrono::steady_clock::now();
				call(C, g, (Kind)kind);
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
			       1000 * median(issue) / launches);
		}
	}
	return 0;
}
