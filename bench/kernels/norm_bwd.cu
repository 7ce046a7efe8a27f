// Microbenchmark (bench/kernels/README.md): the layer norm backward (fused, stats recomputed, with add)
// at the transformer's shape under several row configurations.
#include <cstdio>
#include <vector>
#include <cmath>
#include "sgk_rows.cuh"
typedef __nv_bfloat16 T;
typedef float A;
static const long long R = 16384; static const int C = 2048;

template <int VEC, int TPR, int NV>
float run(const T *dy, const T *x, const T *w, const T *add, T *dx, T *dw, T *db, A *work, long long Pmul, int iters, cudaStream_t s, const A *mean = nullptr, const A *rstd = nullptr)
{
	long long P = sgk_norm_bwd_parts(R, TPR) * Pmul;
	const int gpb = SGK_ROW_THREADS(TPR) / TPR;
	P = (P + gpb - 1) / gpb * gpb;
	auto *k = sgk_norm_bwd_k<T, VEC, TPR, NV, false>;
	const int smem = sgk_norm_smem_bytes<A, VEC, TPR, NV>();
	if (smem > 48 * 1024) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
	cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
	auto once = [&]() {
		k<<<(unsigned)(P / gpb), SGK_ROW_THREADS(TPR), smem, s>>>(dy, x, w, add, mean, rstd, dx, work, R, C, 1e-5f);
		sgk_norm_parts_sum_k<T><<<dim3((C + 31) / 32, 2), dim3(32, 16), 0, s>>>(work, (int)P, C, dw, db);
	};
	once(); cudaStreamSynchronize(s);
	cudaEventRecord(a, s);
	for (int i = 0; i < iters; i++) once();
	cudaEventRecord(b, s); cudaEventSynchronize(b);
	float ms; cudaEventElapsedTime(&ms, a, b);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess) printf("error %s\n", cudaGetErrorString(e));
	return ms / iters * 1000.0f;
}

int main()
{
	size_t n = (size_t)R * C;
	std::vector<T> h(n);
	T *dy, *x, *w, *add, *dx, *dw, *db; A *work;
	cudaMalloc(&dy, n * 2); cudaMalloc(&x, n * 2); cudaMalloc(&add, n * 2); cudaMalloc(&dx, n * 2);
	cudaMalloc(&w, C * 2); cudaMalloc(&dw, C * 2); cudaMalloc(&db, C * 2);
	cudaMalloc(&work, (size_t)2 * 65536 * C * 4);
	unsigned s = 1;
	for (size_t i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; h[i] = __float2bfloat16(((s >> 8) & 0xffff) / 32768.0f - 1.0f); }
	cudaMemcpy(x, h.data(), n * 2, cudaMemcpyHostToDevice);
	cudaMemcpy(dy, h.data() + 7, (n - 7) * 2, cudaMemcpyHostToDevice);
	cudaMemcpy(add, h.data() + 13, (n - 13) * 2, cudaMemcpyHostToDevice);
	cudaMemcpy(w, h.data() + 99, C * 2, cudaMemcpyHostToDevice);
	cudaStream_t st; cudaStreamCreate(&st);
	std::vector<T> ref(n), got(n);
	auto check = [&](const char *name, float us) {
		cudaMemcpy(got.data(), dx, n * 2, cudaMemcpyDeviceToHost);
		double md = 0;
		for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)__bfloat162float(got[i]) - (double)__bfloat162float(ref[i])));
		printf("%-28s %8.1f us  %6.0f GB/s  max|dx-ref| %.3g\n", name, us, 4.0 * n * 2 / (us * 1e3), md);
	};
	float us = run<8, 128, 2>(dy, x, w, add, dx, dw, db, work, 1, 20, st);
	cudaMemcpy(ref.data(), dx, n * 2, cudaMemcpyDeviceToHost);
	check("cur <8,128,2> P", us);
	check("cur <8,128,2> P", run<8, 128, 2>(dy, x, w, add, dx, dw, db, work, 1, 20, st));
	A *mean, *rstd; cudaMalloc(&mean, R * 4); cudaMalloc(&rstd, R * 4);
	sg_launch_layer_norm_fwd<T>(x, w, w, dx, mean, rstd, R, C, 1e-5f, 0, st);
	check("saved stats <8,128,2> P", run<8, 128, 2>(dy, x, w, add, dx, dw, db, work, 1, 20, st, mean, rstd));
	check("saved stats <8,256,1> P", run<8, 256, 1>(dy, x, w, add, dx, dw, db, work, 1, 20, st, mean, rstd));
	check("<8,128,2> 2P", run<8, 128, 2>(dy, x, w, add, dx, dw, db, work, 2, 20, st));
	check("<8,256,1> P", run<8, 256, 1>(dy, x, w, add, dx, dw, db, work, 1, 20, st));
	check("<8,256,1> 2P", run<8, 256, 1>(dy, x, w, add, dx, dw, db, work, 2, 20, st));
	check("<8,64,4> P", run<8, 64, 4>(dy, x, w, add, dx, dw, db, work, 1, 20, st));
	check("<8,64,4> 2P", run<8, 64, 4>(dy, x, w, add, dx, dw, db, work, 2, 20, st));
	check("<8,32,8> P", run<8, 32, 8>(dy, x, w, add, dx, dw, db, work, 1, 20, st));
	check("<8,32,8> 2P", run<8, 32, 8>(dy, x, w, add, dx, dw, db, work, 2, 20, st));
	// copy-rate reference
	cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
	cudaEventRecord(a, st);
	for (int i = 0; i < 20; i++) cudaMemcpyAsync(dx, x, n * 2, cudaMemcpyDeviceToDevice, st);
	cudaEventRecord(b, st); cudaEventSynchronize(b);
	float ms; cudaEventElapsedTime(&ms, a, b);
	printf("copy 64 MiB: %.1f us (%.0f GB/s)\n", ms / 20 * 1000, 2.0 * n * 2 / (ms / 20 * 1e6));
	return 0;
}
