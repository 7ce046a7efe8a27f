// Microbenchmark (bench/kernels/README.md): the exact GELU's float formula.
// erff's (0.5 x (1 + erf(x / sqrt 2)), what sgk_pointwise.h had) against
// sgk_pointwise.h's sgk_gelu_f and sgk_gelu_backward_f (one exp2, no
// selected coefficients):
//   accuracy on this GPU against double precision on the host, over every
//   bf16 value and 2^24 + 1 floats in [-12, 12];
//   time of the forward (bf16 [16384, 8192], 4 bytes an element) and of
//   the backward with the forward again (8 bytes an element), in the
//   generated kernels' shape (16-byte vectors, a grid-stride loop at 4096
//   blocks of 256), on values like the transformer's fc1 outputs (about
//   N(0, 1)) and on uniform [-2, 2), beside a copy of the same bytes.
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include "sgk_pointwise.h"
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1);} } while (0)
typedef __nv_bfloat16 T;
struct __align__(16) V8 { T v[8]; };

__device__ __forceinline__ float old_gelu(float a) { return 0.5f * a * (1.f + erff(a * 0.70710678118654752440f)); }
__device__ __forceinline__ float old_gelu_bwd(float g, float x)
{
	const float cdf = 0.5f * (1.f + erff(x * 0.70710678118654752440f));
	return g * (cdf + x * expf(-0.5f * x * x) * 0.39894228040143267794f);
}

// y = gelu(x) (OP 0 copy, 1 old, 2 new)
template <int OP>
__global__ void __launch_bounds__(256) fwd(const T *x, T *y, int nv)
{
	for (int w = blockIdx.x * blockDim.x + threadIdx.x; w < nv; w += gridDim.x * blockDim.x) {
		const V8 a = ((const V8 *)x)[w];
		V8 o;
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const float r = __bfloat162float(a.v[j]);
			o.v[j] = __float2bfloat16_rn(OP == 0 ? r : OP == 1 ? old_gelu(r) : sgk_gelu_f(r));
		}
		((V8 *)y)[w] = o;
	}
}
// g = gelu(x), dx = gelu_backward(dg, x)
template <int OP>
__global__ void __launch_bounds__(256) bwd(const T *x, const T *dg, T *g, T *dx, int nv)
{
	for (int w = blockIdx.x * blockDim.x + threadIdx.x; w < nv; w += gridDim.x * blockDim.x) {
		const V8 a = ((const V8 *)x)[w], d = ((const V8 *)dg)[w];
		V8 o1, o2;
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const float r = __bfloat162float(a.v[j]), q = __bfloat162float(d.v[j]);
			o1.v[j] = __float2bfloat16_rn(OP == 0 ? r : OP == 1 ? old_gelu(r) : sgk_gelu_f(r));
			o2.v[j] = __float2bfloat16_rn(OP == 0 ? q : OP == 1 ? old_gelu_bwd(q, r) : sgk_gelu_backward_f(q, r));
		}
		((V8 *)g)[w] = o1;
		((V8 *)dx)[w] = o2;
	}
}
// out[4][n]: old gelu, new gelu, old gelu', new gelu' of x (f32)
__global__ void values(const float *x, float *out, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
		const float a = x[i];
		out[i] = old_gelu(a);
		out[n + i] = sgk_gelu_f(a);
		out[2 * n + i] = old_gelu_bwd(1.0f, a);
		out[3 * n + i] = sgk_gelu_backward_f(1.0f, a);
	}
}
// normal = 1: about N(0, 1) (a sum of 4 uniforms); 0: uniform [-2, 2)
__global__ void fill(T *p, size_t n, unsigned seed, int normal)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned x = (unsigned)i * 2654435761u ^ seed;
		float s = 0;
		for (int k = 0; k < (normal ? 4 : 1); k++) {
			x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
			s += (x & 0xffff) / 65536.0f - 0.5f;
		}
		p[i] = __float2bfloat16(normal ? s * 1.7320508f : 4.0f * s);
	}
}
template <class F> static float timeit(F f)
{
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
	for (int i = 0; i < 3; i++) f();
	CK(cudaEventRecord(e0));
	for (int i = 0; i < 20; i++) f();
	CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaGetLastError());
	float ms;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	return ms / 20;
}
static float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

int main()
{
	setvbuf(stdout, NULL, _IONBF, 0);
	// Accuracy: every bf16 value (finite), then a dense sweep.
	std::vector<float> xs;
	for (unsigned u = 0; u < 65536; u++) {
		unsigned b = u << 16;
		float f;
		memcpy(&f, &b, 4);
		if (std::isfinite(f)) xs.push_back(f);
	}
	const int nb = (int)xs.size();
	for (int i = 0; i <= (1 << 24); i++) xs.push_back(-12.0f + 24.0f * (float)i / (1 << 24));
	const int n = (int)xs.size();
	float *dx, *dout;
	CK(cudaMalloc(&dx, n * 4)); CK(cudaMalloc(&dout, (size_t)4 * n * 4));
	CK(cudaMemcpy(dx, xs.data(), n * 4, cudaMemcpyHostToDevice));
	values<<<1024, 256>>>(dx, dout, n);
	std::vector<float> out((size_t)4 * n);
	CK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
	double e_abs[4] = {0}, e_rel[4] = {0};
	long bf_diff[2] = {0}, bf_ref[2] = {0}, nan_bad = 0;
	for (int i = 0; i < n; i++) {
		const double a = xs[i], phi = 0.5 * erfc(-a / sqrt(2.0));
		const double ref[2] = {a * phi, phi + a * exp(-0.5 * a * a) / sqrt(2 * M_PI)};
		for (int k = 0; k < 4; k++) {
			const double v = out[(size_t)k * n + i], r = ref[k / 2];
			if (std::isnan(r) || std::isinf(r) || fabs(a) > 1e4) {
				nan_bad += std::isnan(r) != std::isnan(v);
				continue;
			}
			e_abs[k] = fmax(e_abs[k], fabs(v - r));
			if (a > -5) e_rel[k] = fmax(e_rel[k], fabs(v - r) / fmax(fabs(r), 1e-30));
		}
		if (i < nb) {
			bf_diff[0] += bf(out[i]) != bf(out[n + i]);
			bf_diff[1] += bf(out[2 * (size_t)n + i]) != bf(out[3 * (size_t)n + i]);
			bf_ref[0] += bf(out[n + i]) != bf((float)ref[0]) && fabs(a) < 1e4;
			bf_ref[1] += bf(out[3 * (size_t)n + i]) != bf((float)ref[1]) && fabs(a) < 1e4;
		}
	}
	printf("accuracy over %d floats (|x| <= 1e4; the relative error for x > -5):\n", n);
	printf("  gelu      erff's: max abs error %.3g, max rel %.3g;  new: %.3g, %.3g\n", e_abs[0], e_rel[0], e_abs[1], e_rel[1]);
	printf("  gelu'     erff's: max abs error %.3g, max rel %.3g;  new: %.3g, %.3g\n", e_abs[2], e_rel[2], e_abs[3], e_rel[3]);
	printf("  the %d finite bf16 inputs: results rounded to bf16 differing old/new: gelu %ld, gelu' %ld; "
	       "new's differing from the exact value's rounding: %ld, %ld; NaN mismatches %ld\n",
	       nb, bf_diff[0], bf_diff[1], bf_ref[0], bf_ref[1], nan_bad);

	// Time at the transformer's shape.
	const size_t N = (size_t)16384 * 8192;
	const int nv = (int)(N / 8);
	T *x, *dg, *g, *d;
	CK(cudaMalloc(&x, N * 2)); CK(cudaMalloc(&dg, N * 2)); CK(cudaMalloc(&g, N * 2)); CK(cudaMalloc(&d, N * 2));
	for (int normal = 1; normal >= 0; normal--) {
		fill<<<1024, 256>>>(x, N, 1, normal);
		fill<<<1024, 256>>>(dg, N, 7, 1);
		CK(cudaDeviceSynchronize());
		const float c1 = timeit([&] { fwd<0><<<4096, 256>>>(x, g, nv); });
		const float f1 = timeit([&] { fwd<1><<<4096, 256>>>(x, g, nv); });
		const float f2 = timeit([&] { fwd<2><<<4096, 256>>>(x, g, nv); });
		const float c2 = timeit([&] { bwd<0><<<4096, 256>>>(x, dg, g, d, nv); });
		const float b1 = timeit([&] { bwd<1><<<4096, 256>>>(x, dg, g, d, nv); });
		const float b2 = timeit([&] { bwd<2><<<4096, 256>>>(x, dg, g, d, nv); });
		printf("%s values: forward copy %.4f ms, erff's %.4f ms (%.0f GB/s), new %.4f ms (%.0f GB/s); "
		       "backward copy %.4f ms, erff's %.4f ms (%.0f GB/s), new %.4f ms (%.0f GB/s)\n",
		       normal ? "N(0, 1)" : "uniform [-2, 2)", c1, f1, 4.0 * N / f1 / 1e6, f2, 4.0 * N / f2 / 1e6, c2, b1,
		       8.0 * N / b1 / 1e6, b2, 8.0 * N / b2 / 1e6);
	}
	return 0;
}
