// Pointwise kernels' grids (bench/kernels/README.md): erf GELU forward and
// backward at the transformer's [16384, 8192] bf16, then ew_chain's kernel
// (y = gelu(x * a + b) * c, f32, 2^28 elements) and an f32 copy, each at
// several grid sizes: a grid-stride loop at 4096 blocks against a thread
// for each 16-byte vector.
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
struct __align__(16) V8 { __nv_bfloat16 v[8]; };
__device__ __forceinline__ float rb(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float gelu(float a) { return 0.5f * a * (1.f + erff(a * 0.70710678118654752440f)); }
__device__ __forceinline__ float gelu_bwd(float g, float x) {
	const float cdf = 0.5f * (1.f + erff(x * 0.70710678118654752440f));
	return g * (cdf + x * expf(-0.5f * x * x) * 0.39894228040143267794f);
}
__device__ __forceinline__ float gelu_bwd_fast(float g, float x) {
	const float cdf = 0.5f * (1.f + erff(x * 0.70710678118654752440f));
	return g * (cdf + x * __expf(-0.5f * x * x) * 0.39894228040143267794f);
}
template <int U, int OP>
__global__ void __launch_bounds__(256) fwd(const __nv_bfloat16 *x, __nv_bfloat16 *y, int nv) {
	for (int w = (blockIdx.x * blockDim.x + threadIdx.x) * U; w < nv; w += gridDim.x * blockDim.x * U) {
		V8 a[U], o[U];
#pragma unroll
		for (int u = 0; u < U; u++) a[u] = ((const V8 *)x)[w + u];
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int j = 0; j < 8; j++) {
				float r = __bfloat162float(a[u].v[j]);
				o[u].v[j] = __float2bfloat16_rn(OP ? gelu(r) : r);
			}
#pragma unroll
		for (int u = 0; u < U; u++) ((V8 *)y)[w + u] = o[u];
	}
}
template <int U, int OP>
__global__ void __launch_bounds__(256) bwd(const __nv_bfloat16 *x, __nv_bfloat16 *g_re, const __nv_bfloat16 *dg, __nv_bfloat16 *dx, int nv) {
	for (int w = (blockIdx.x * blockDim.x + threadIdx.x) * U; w < nv; w += gridDim.x * blockDim.x * U) {
		V8 a[U], d[U], o1[U], o2[U];
#pragma unroll
		for (int u = 0; u < U; u++) { a[u] = ((const V8 *)x)[w + u]; d[u] = ((const V8 *)dg)[w + u]; }
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int j = 0; j < 8; j++) {
				float r = __bfloat162float(a[u].v[j]), q = __bfloat162float(d[u].v[j]);
				o1[u].v[j] = __float2bfloat16_rn(OP ? gelu(r) : r);
				o2[u].v[j] = __float2bfloat16_rn(OP == 0 ? q : OP == 1 ? gelu_bwd(q, r) : gelu_bwd_fast(q, r));
			}
#pragma unroll
		for (int u = 0; u < U; u++) { ((V8 *)g_re)[w + u] = o1[u]; ((V8 *)dx)[w + u] = o2[u]; }
	}
}
struct __align__(16) V4 { float v[4]; };
template <int U>
__global__ void __launch_bounds__(256) ew(const float *x, const float *a, const float *b, const float *c, float *y, int nv) {
	for (int w = (blockIdx.x * blockDim.x + threadIdx.x) * U; w < nv; w += gridDim.x * blockDim.x * U) {
		V4 X[U], A[U], B[U], C[U], Y[U];
#pragma unroll
		for (int u = 0; u < U; u++) { X[u] = ((const V4 *)x)[w + u]; A[u] = ((const V4 *)a)[w + u]; B[u] = ((const V4 *)b)[w + u]; C[u] = ((const V4 *)c)[w + u]; }
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int j = 0; j < 4; j++) Y[u].v[j] = gelu(X[u].v[j] * A[u].v[j] + B[u].v[j]) * C[u].v[j];
#pragma unroll
		for (int u = 0; u < U; u++) ((V4 *)y)[w + u] = Y[u];
	}
}
template <int U>
__global__ void __launch_bounds__(256) cp(const float *x, float *y, int nv) {
	for (int w = (blockIdx.x * blockDim.x + threadIdx.x) * U; w < nv; w += gridDim.x * blockDim.x * U) {
		V4 X[U];
#pragma unroll
		for (int u = 0; u < U; u++) X[u] = ((const V4 *)x)[w + u];
#pragma unroll
		for (int u = 0; u < U; u++) ((V4 *)y)[w + u] = X[u];
	}
}
__global__ void fill(__nv_bfloat16 *p, size_t n, unsigned seed) {
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned x = (unsigned)i * 2654435761u ^ seed; x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
		p[i] = __float2bfloat16(((x & 0xffff) / 16384.0f - 2.0f));
	}
}
template <class F> float timeit(F f) {
	cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
	for (int i = 0; i < 3; i++) f();
	cudaEventRecord(e0);
	for (int i = 0; i < 20; i++) f();
	cudaEventRecord(e1); cudaEventSynchronize(e1);
	float ms; cudaEventElapsedTime(&ms, e0, e1);
	return ms / 20;
}
static void ew_chain_grids() {
	const size_t n = (size_t)1 << 28; const int nv = (int)(n / 4);
	float *x, *a, *b, *c, *y;
	cudaMalloc(&x, n * 4); cudaMalloc(&a, n * 4); cudaMalloc(&b, n * 4); cudaMalloc(&c, n * 4); cudaMalloc(&y, n * 4);
	cudaMemset(x, 0, n * 4); cudaMemset(a, 0, n * 4); cudaMemset(b, 0, n * 4); cudaMemset(c, 0, n * 4);
	int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
	int grids[] = {4096, sms * 8, sms * 32, 16384, 65536, nv / 256};
	float tm = timeit([&] { cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice); });
	printf("cudaMemcpy D2D %.4f ms %.0f GB/s\n", tm, 2.0 * n * 4 / tm / 1e6);
	for (int gi = 0; gi < 6; gi++) {
		int G = grids[gi];
		float t1 = timeit([&] { ew<1><<<G, 256>>>(x, a, b, c, y, nv); });
		float t2 = timeit([&] { ew<2><<<G < nv / 256 ? G : G / 2, 256>>>(x, a, b, c, y, nv); });
		float c1 = timeit([&] { cp<1><<<G, 256>>>(x, y, nv); });
		printf("grid %7d: ew U=1 %.4f ms %.0f GB/s, U=2 %.4f ms %.0f GB/s; copy %.4f ms %.0f GB/s\n", G, t1, 5.0 * n * 4 / t1 / 1e6, t2, 5.0 * n * 4 / t2 / 1e6, c1, 2.0 * n * 4 / c1 / 1e6);
	}
	cudaFree(x); cudaFree(a); cudaFree(b); cudaFree(c); cudaFree(y);
}
int main() {
	const size_t n = (size_t)16384 * 8192; const int nv = (int)(n / 8);
	__nv_bfloat16 *x, *y, *dg, *dx;
	cudaMalloc(&x, n * 2); cudaMalloc(&y, n * 2); cudaMalloc(&dg, n * 2); cudaMalloc(&dx, n * 2);
	fill<<<1024, 256>>>(x, n, 1); fill<<<1024, 256>>>(dg, n, 5); cudaDeviceSynchronize();
	int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
	double fb = 2.0 * n * 2, bb = 4.0 * n * 2;
	int grids[] = {4096, sms * 8, sms * 16, nv / 256};
	for (int gi = 0; gi < 4; gi++) {
		int G = grids[gi];
#define F(U, OP) { float t = timeit([&] { fwd<U, OP><<<(U == 1 || G < nv / 256) ? G : G / U, 256>>>(x, y, nv); }); \
		printf("fwd grid %6d U=%d %-5s %.4f ms %.0f GB/s\n", G, U, OP ? "gelu" : "copy", t, fb / t / 1e6); }
		F(1, 0) F(1, 1) F(2, 0) F(2, 1) F(4, 1)
#define B(U, OP) { float t = timeit([&] { bwd<U, OP><<<(U == 1 || G < nv / 256) ? G : G / U, 256>>>(x, y, dg, dx, nv); }); \
		printf("bwd grid %6d U=%d %-5s %.4f ms %.0f GB/s\n", G, U, OP == 0 ? "copy" : OP == 1 ? "gelu" : "fast", t, bb / t / 1e6); }
		B(1, 0) B(1, 1) B(1, 2) B(2, 0) B(2, 1) B(2, 2) B(4, 1)
	}
	cudaFree(x); cudaFree(y); cudaFree(dg); cudaFree(dx);
	ew_chain_grids();
	cudaError_t e = cudaDeviceSynchronize(); printf("%s\n", cudaGetErrorString(e));
	return 0;
}
