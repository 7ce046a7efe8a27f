// Microbenchmark: cuBLASLt's heuristic top-1 algorithm against the fastest
// of its top candidates, at the transformer bench's product shapes (bf16).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1);} } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_) { printf("cublas %d line %d\n", (int)s_, __LINE__); exit(1);} } while (0)
__global__ void fill(__nv_bfloat16 *p, size_t n, unsigned seed) {
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned x = (unsigned)i * 2654435761u ^ seed; x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
		p[i] = __float2bfloat16(((x & 0xffff) / 32768.0f - 1.0f));
	}
}
struct Shape { const char *name; int m, n, k, ta, tb; float beta; };
int main(int argc, char **argv) {
	int ncand = argc > 1 ? atoi(argv[1]) : 16;
	size_t wsb = 32u << 20;
	Shape sh[] = {
		{"fwd qkv  N6144 K2048", 6144, 16384, 2048, 1, 0, 0},
		{"fwd proj N2048 K2048", 2048, 16384, 2048, 1, 0, 0},
		{"fwd fc1  N8192 K2048", 8192, 16384, 2048, 1, 0, 0},
		{"fwd fc2  N2048 K8192", 2048, 16384, 8192, 1, 0, 0},
		{"dgrad qkv K6144", 2048, 16384, 6144, 0, 0, 0},
		{"dgrad proj K2048", 2048, 16384, 2048, 0, 0, 0},
		{"dgrad fc1 K8192", 2048, 16384, 8192, 0, 0, 0},
		{"dgrad fc2 K2048", 8192, 16384, 2048, 0, 0, 0},
		{"wgrad qkv 6144x2048 beta1", 2048, 6144, 16384, 0, 1, 1},
		{"wgrad proj 2048x2048 beta1", 2048, 2048, 16384, 0, 1, 1},
		{"wgrad fc1 8192x2048 beta1", 2048, 8192, 16384, 0, 1, 1},
		{"wgrad fc2 2048x8192 beta1", 8192, 2048, 16384, 0, 1, 1},
		{"attn-like bmm 2048x2048x128 (b128)", 2048, 2048, 128, 1, 0, 0},
	};
	cublasLtHandle_t h; LT(cublasLtCreate(&h));
	void *A, *B, *C, *ws;
	size_t big = (size_t)16384 * 8192 * 2;
	CK(cudaMalloc(&A, big)); CK(cudaMalloc(&B, big)); CK(cudaMalloc(&C, big)); CK(cudaMalloc(&ws, wsb));
	fill<<<1024, 256>>>((__nv_bfloat16 *)A, big / 2, 1); fill<<<1024, 256>>>((__nv_bfloat16 *)B, big / 2, 7); fill<<<1024, 256>>>((__nv_bfloat16 *)C, big / 2, 9); CK(cudaDeviceSynchronize());
	cudaStream_t st; CK(cudaStreamCreate(&st));
	cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
	double tot_top = 0, tot_best = 0;
	for (unsigned si = 0; si < sizeof sh / sizeof sh[0]; si++) {
		Shape s = sh[si];
		if (si == 12) continue;
		cublasLtMatmulDesc_t op; LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
		int32_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
		LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
		LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
		cublasLtMatrixLayout_t la, lb, lc;
		int ar = s.ta ? s.k : s.m, ac = s.ta ? s.m : s.k;
		int br = s.tb ? s.n : s.k, bc = s.tb ? s.k : s.n;
		LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ar, ac, ar));
		LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, br, bc, br));
		LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.m, s.n, s.m));
		cublasLtMatmulPreference_t pref; LT(cublasLtMatmulPreferenceCreate(&pref));
		LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
		cublasLtMatmulHeuristicResult_t res[64]; int nres = 0;
		LT(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, ncand, res, &nres));
		float alpha = 1, beta = s.beta;
		double flop = 2.0 * s.m * s.n * s.k;
		float t_top = 0, t_best = 1e30f; int best = -1;
		for (int i = 0; i < nres; i++) {
			if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > wsb) continue;
			for (int w = 0; w < 3; w++)
				LT(cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &res[i].algo, ws, wsb, st));
			int reps = 20;
			CK(cudaEventRecord(e0, st));
			for (int r = 0; r < reps; r++)
				LT(cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &res[i].algo, ws, wsb, st));
			CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
			float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); ms /= reps;
			if (i == 0) t_top = ms;
			if (ms < t_best) { t_best = ms; best = i; }
			printf("  %-30s cand %2d ws %8zu  %.4f ms  %.1f TFLOP/s\n", s.name, i, res[i].workspaceSize, ms, flop / ms / 1e9);
		}
		printf("%-30s n=%d top1 %.4f ms (%.1f TF/s) best #%d %.4f ms (%.1f TF/s) gain %.2f%%\n", s.name, nres, t_top, flop / t_top / 1e9, best, t_best, flop / t_best / 1e9, 100.0 * (t_top - t_best) / t_top);
		int mult = 8; // each layer appears once per kind; 8 layers
		tot_top += mult * t_top; tot_best += mult * t_best;
		cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(op);
	}
	printf("8 layers: top1 %.3f ms, best %.3f ms\n", tot_top, tot_best);
	return 0;
}
