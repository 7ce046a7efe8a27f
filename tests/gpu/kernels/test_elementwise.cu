/*
 * test_elementwise.cu - the pointwise skeleton
 * (runtime/sgk/sgk_elementwise.cuh) with bodies written as
 * the backend would emit them: the anchor chain y = gelu(x * a + b) * c
 * over 2^28 f32 (bandwidth against a device copy, target 95%), broadcast
 * operands (a bias row, a [3,1,5,7] x [1,4,5,1] product, a scalar), a
 * transposed operand, mixed dtypes, two outputs, a scalar tail, a
 * misaligned pointer, and a shape past 2^31 elements (64-bit indices).
 * Outputs are poisoned first and compared with host arithmetic.
 *
 *   test_elementwise [--quick]
 */
#include "ktest.h"
#include "sgk_elementwise.cuh"

/* ------------------------------------------------------------------ bodies */

/* y = gelu(x * a + b) * c, all f32. */
struct GeluChain {
	const float *x, *a, *b, *c;
	float *y;
	template <int V>
	__device__ void run(const long long *off, const unsigned char *bc) const
	{
		sgk_reg<V, float> xv = sgk_ld<V>(x, off[0], bc[0]), av = sgk_ld<V>(a, off[1], bc[1]);
		sgk_reg<V, float> bv = sgk_ld<V>(b, off[2], bc[2]), cv = sgk_ld<V>(c, off[3], bc[3]), yv;
#pragma unroll
		for (int e = 0; e < V; e++) {
			const float t = xv.v[e] * av.v[e] + bv.v[e];
			yv.v[e] = 0.5f * t * (1.f + erff(t * 0.70710678118654752f)) * cv.v[e];
		}
		sgk_st<V>(y, off[4], yv);
	}
};

/* z = x (bf16) + b (f32), f32 result. */
struct AddBias {
	const __nv_bfloat16 *x;
	const float *b;
	float *z;
	template <int V>
	__device__ void run(const long long *off, const unsigned char *bc) const
	{
		sgk_reg<V, __nv_bfloat16> xv = sgk_ld<V>(x, off[0], bc[0]);
		sgk_reg<V, float> bv = sgk_ld<V>(b, off[1], bc[1]), zv;
#pragma unroll
		for (int e = 0; e < V; e++)
			zv.v[e] = __bfloat162float(xv.v[e]) + bv.v[e];
		sgk_st<V>(z, off[2], zv);
	}
};

/* z = x * y, f32. */
struct Mul {
	const float *x, *y;
	float *z;
	template <int V>
	__device__ void run(const long long *off, const unsigned char *bc) const
	{
		sgk_reg<V, float> xv = sgk_ld<V>(x, off[0], bc[0]), yv = sgk_ld<V>(y, off[1], bc[1]), zv;
#pragma unroll
		for (int e = 0; e < V; e++)
			zv.v[e] = xv.v[e] * yv.v[e];
		sgk_st<V>(z, off[2], zv);
	}
};

/* y1 = x + 1, y2 = x * 2: two outputs. */
struct TwoOut {
	const float *x;
	float *y1, *y2;
	template <int V>
	__device__ void run(const long long *off, const unsigned char *bc) const
	{
		sgk_reg<V, float> xv = sgk_ld<V>(x, off[0], bc[0]), a, b;
#pragma unroll
		for (int e = 0; e < V; e++) {
			a.v[e] = xv.v[e] + 1.f;
			b.v[e] = xv.v[e] * 2.f;
		}
		sgk_st<V>(y1, off[1], a);
		sgk_st<V>(y2, off[2], b);
	}
};

/* y = x + 1 on bytes (for the 64-bit index path). */
struct IncByte {
	const unsigned char *x;
	unsigned char *y;
	template <int V>
	__device__ void run(const long long *off, const unsigned char *bc) const
	{
		sgk_reg<V, unsigned char> xv = sgk_ld<V>(x, off[0], bc[0]);
#pragma unroll
		for (int e = 0; e < V; e++)
			xv.v[e] = (unsigned char)(xv.v[e] + 1);
		sgk_st<V>(y, off[1], xv);
	}
};

/* y = gelu(x), bf16 in and out. */
struct GeluBf16 {
	const __nv_bfloat16 *x;
	__nv_bfloat16 *y;
	template <int V>
	__device__ void run(const long long *off, const unsigned char *bc) const
	{
		sgk_reg<V, __nv_bfloat16> xv = sgk_ld<V>(x, off[0], bc[0]);
#pragma unroll
		for (int e = 0; e < V; e++) {
			const float t = __bfloat162float(xv.v[e]);
			xv.v[e] = __float2bfloat16_rn(0.5f * t * (1.f + erff(t * 0.70710678118654752f)));
		}
		sgk_st<V>(y, off[1], xv);
	}
};

/* ------------------------------------------------------------------ helpers */

/* Contiguous strides of a shape, with 0 where `bshape` (the operand's own
 * shape, right-aligned, same rank) has size 1 and the output does not. */
static void bstrides(int rank, const long long *out, const long long *own, long long *st)
{
	long long s = 1;
	for (int d = rank - 1; d >= 0; d--) {
		st[d] = own[d] == 1 && out[d] != 1 ? 0 : s;
		s *= own[d];
	}
}

static double gelu(double t)
{
	return 0.5 * t * (1 + erf(t / sqrt(2.0)));
}

/* Checks out against ref elementwise (relative tolerance). */
static void compare(const char *name, const std::vector<double> &out, const std::vector<double> &ref,
                    double tol)
{
	KtErr e = kt_err(out.data(), ref.data(), ref.size());
	printf("%-44s rel %.2e max %.2e\n", name, e.rel, e.maxabs);
	KT_CHECK(e.nan == 0 && e.rel <= tol, "%s: rel %.3e (unwritten %zu at %zu)", name, e.rel, e.nan,
	         e.at);
}

/* ------------------------------------------------------------------ cases */

static void anchor(bool quick, double copy)
{
	const size_t n = quick ? (1u << 22) : (1u << 28);
	KtBuf<float> x, a, b, c, y;
	x.alloc(n), a.alloc(n), b.alloc(n), c.alloc(n), y.alloc(n);
	/* Uniform draws: 2^28 normals would take a while on the host. */
	auto u = [] { return kt_unif(-2, 2); };
	x.fill(u), a.fill(u), b.fill(u), c.fill(u);
	y.poison();
	SgEwShape<5> sh;
	long long size[1] = {(long long)n}, st[5][SGK_EW_MAXR] = {{1}, {1}, {1}, {1}, {1}};
	const void *ptrs[5] = {x.d, a.d, b.d, c.d, y.d};
	const int es[5] = {4, 4, 4, 4, 4};
	sg_ew_shape_init(&sh, 1, size, st, ptrs, es, 4);
	KT_CHECK(sh.vec_ok && sh.rank == 1, "anchor: vectors not chosen");
	GeluChain body = {x.d, a.d, b.d, c.d, y.d};
	KT_CHECK(sg_launch_elementwise<4>(&sh, body, 0) == cudaSuccess, "anchor launch");
	KT_CUDA(cudaDeviceSynchronize());
	y.get();
	std::vector<double> o, r;
	for (size_t i = 0; i < n; i += (i % 3 == 0 ? 1 : 997)) {
		o.push_back(y.h[i]);
		r.push_back(gelu(x.h[i] * a.h[i] + b.h[i]) * c.h[i]);
	}
	o.push_back(y.h[n - 1]);
	r.push_back(gelu(x.h[n - 1] * a.h[n - 1] + b.h[n - 1]) * c.h[n - 1]);
	compare("gelu(x*a+b)*c f32 (sampled)", o, r, 1e-5);
	if (!quick) {
		double ms = kt_time([&] { sg_launch_elementwise<4>(&sh, body, 0); }, 3, 20);
		double gbps = 5.0 * 4 * n / (ms * 1e-3) / 1e9;
		printf("PERF elementwise gelu(x*a+b)*c f32 2^28: %.3f ms, %.0f GB/s = %.1f%% of a device "
		       "copy (%.0f GB/s); target 95%%\n",
		       ms, gbps, 100 * gbps / copy, copy);
	}
	x.release(), a.release(), b.release(), c.release(), y.release();
}

static void bias(bool quick, double copy)
{
	const long long R = quick ? 64 : 65536, C = quick ? 1000 : 4096;
	KtBuf<__nv_bfloat16> x;
	KtBuf<float> b, z;
	x.alloc(R * C), b.alloc(C), z.alloc(R * C);
	x.fill([] { return kt_unif(-3, 3); });
	b.fill(kt_normal);
	z.poison();
	long long size[2] = {R, C}, st[3][SGK_EW_MAXR] = {{C, 1}, {0, 1}, {C, 1}};
	const void *ptrs[3] = {x.d, b.d, z.d};
	const int es[3] = {2, 4, 4};
	SgEwShape<3> sh;
	sg_ew_shape_init(&sh, 2, size, st, ptrs, es, 4);
	KT_CHECK(sh.vec_ok && sh.rank == 2, "bias: vectors not chosen (rank %d)", sh.rank);
	AddBias body = {x.d, b.d, z.d};
	KT_CHECK(sg_launch_elementwise<4>(&sh, body, 0) == cudaSuccess, "bias launch");
	KT_CUDA(cudaDeviceSynchronize());
	z.get();
	std::vector<double> r(R * C);
	for (long long i = 0; i < R * C; i++)
		r[i] = x.h[i] + b.h[i % C];
	compare("x[R,C] bf16 + b[C] f32 -> f32", z.h, r, 2e-7);
	if (!quick) {
		double ms = kt_time([&] { sg_launch_elementwise<4>(&sh, body, 0); }, 3, 20);
		double gbps = (2.0 + 4.0) * R * C / (ms * 1e-3) / 1e9;
		printf("PERF elementwise bias add bf16[65536,4096]+f32[4096] -> f32: %.3f ms, %.0f GB/s = "
		       "%.1f%% of copy\n", ms, gbps, 100 * gbps / copy);
	}
	x.release(), b.release(), z.release();
}

/* x[3,1,5,7] * y[1,4,5,1] -> z[3,4,5,7]: inner size 7, scalar path. */
static void outer_product(void)
{
	const long long out[4] = {3, 4, 5, 7}, sx[4] = {3, 1, 5, 7}, sy[4] = {1, 4, 5, 1};
	KtBuf<float> x, y, z;
	x.alloc(105), y.alloc(20), z.alloc(420);
	x.fill(kt_normal), y.fill(kt_normal);
	z.poison();
	long long st[3][SGK_EW_MAXR];
	bstrides(4, out, sx, st[0]);
	bstrides(4, out, sy, st[1]);
	bstrides(4, out, out, st[2]);
	const void *ptrs[3] = {x.d, y.d, z.d};
	const int es[3] = {4, 4, 4};
	SgEwShape<3> sh;
	sg_ew_shape_init(&sh, 4, out, st, ptrs, es, 4);
	KT_CHECK(!sh.vec_ok, "outer product: vectors chosen for an inner size of 7");
	KT_CHECK(sg_launch_elementwise<4>(&sh, Mul{x.d, y.d, z.d}, 0) == cudaSuccess, "outer launch");
	KT_CUDA(cudaDeviceSynchronize());
	z.get();
	std::vector<double> r(420);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 4; j++)
			for (int k = 0; k < 5; k++)
				for (int l = 0; l < 7; l++)
					r[((i * 4 + j) * 5 + k) * 7 + l] = x.h[(i * 5 + k) * 7 + l] * y.h[j * 5 + k];
	compare("x[3,1,5,7] * y[1,4,5,1]", z.h, r, 2e-7);
	x.release(), y.release(), z.release();
}

/* [64, 96] * y[64, 1] (inner broadcast: one value a vector), and the
 * transpose of x[96, 64] times a scalar tensor. */
static void broadcast_inner_and_transpose(void)
{
	KtBuf<float> x, y, s, z;
	x.alloc(64 * 96), y.alloc(64), s.alloc(1), z.alloc(64 * 96);
	x.fill(kt_normal), y.fill(kt_normal), s.fill(kt_normal);
	{
		z.poison();
		long long size[2] = {64, 96}, st[3][SGK_EW_MAXR] = {{96, 1}, {1, 0}, {96, 1}};
		const void *ptrs[3] = {x.d, y.d, z.d};
		const int es[3] = {4, 4, 4};
		SgEwShape<3> sh;
		sg_ew_shape_init(&sh, 2, size, st, ptrs, es, 4);
		KT_CHECK(sh.vec_ok && sh.bc[1], "inner broadcast: vec %d bc %d", sh.vec_ok, sh.bc[1]);
		KT_CHECK(sg_launch_elementwise<4>(&sh, Mul{x.d, y.d, z.d}, 0) == cudaSuccess, "launch");
		KT_CUDA(cudaDeviceSynchronize());
		z.get();
		std::vector<double> r(64 * 96);
		for (int i = 0; i < 64 * 96; i++)
			r[i] = x.h[i] * y.h[i / 96];
		compare("x[64,96] * y[64,1]", z.h, r, 2e-7);
	}
	{
		/* z[64, 96] = x^T * s where x is [96, 64]: strides (1, 64). */
		z.poison();
		long long size[2] = {64, 96}, st[3][SGK_EW_MAXR] = {{1, 64}, {0, 0}, {96, 1}};
		const void *ptrs[3] = {x.d, s.d, z.d};
		const int es[3] = {4, 4, 4};
		SgEwShape<3> sh;
		sg_ew_shape_init(&sh, 2, size, st, ptrs, es, 4);
		KT_CHECK(!sh.vec_ok, "transpose: vectors chosen");
		KT_CHECK(sg_launch_elementwise<4>(&sh, Mul{x.d, s.d, z.d}, 0) == cudaSuccess, "launch");
		KT_CUDA(cudaDeviceSynchronize());
		z.get();
		std::vector<double> r(64 * 96);
		for (int i = 0; i < 64; i++)
			for (int j = 0; j < 96; j++)
				r[i * 96 + j] = x.h[j * 64 + i] * s.h[0];
		compare("transpose(x[96,64]) * scalar", z.h, r, 2e-7);
	}
	x.release(), y.release(), s.release(), z.release();
}

/* Contiguous with a tail (n not a multiple of 4), then misaligned. */
static void tail_and_misaligned(void)
{
	const long long n = 1000003;
	KtBuf<float> x, y1, y2;
	x.alloc(n + 1), y1.alloc(n + 1), y2.alloc(n + 1);
	x.fill(kt_normal);
	for (int off = 0; off < 2; off++) {
		y1.poison(), y2.poison();
		long long size[1] = {n}, st[3][SGK_EW_MAXR] = {{1}, {1}, {1}};
		const void *ptrs[3] = {x.d + off, y1.d + off, y2.d + off};
		const int es[3] = {4, 4, 4};
		SgEwShape<3> sh;
		sg_ew_shape_init(&sh, 1, size, st, ptrs, es, 4);
		KT_CHECK(sh.vec_ok == !off, "vec_ok %d with offset %d", sh.vec_ok, off);
		TwoOut body = {x.d + off, y1.d + off, y2.d + off};
		KT_CHECK(sg_launch_elementwise<4>(&sh, body, 0) == cudaSuccess, "launch");
		KT_CUDA(cudaDeviceSynchronize());
		y1.get(), y2.get();
		std::vector<double> o1(y1.h.begin() + off, y1.h.begin() + off + n);
		std::vector<double> o2(y2.h.begin() + off, y2.h.begin() + off + n), r1(n), r2(n);
		for (long long i = 0; i < n; i++) {
			r1[i] = (float)(x.h[i + off] + 1);
			r2[i] = x.h[i + off] * 2;
		}
		compare(off ? "two outputs, misaligned" : "two outputs, n % 4 = 3 (tail)", o1, r1, 0);
		compare(off ? "two outputs, misaligned (2nd)" : "two outputs, tail (2nd)", o2, r2, 0);
	}
	x.release(), y1.release(), y2.release();
}

/* 2^31 + 13 bytes: the 64-bit index path, vectors of 16 and a tail. */
static void huge(void)
{
	const long long n = (1ll << 31) + 13;
	unsigned char *x, *y;
	KT_CUDA(cudaMalloc(&x, n));
	KT_CUDA(cudaMalloc(&y, n));
	KT_CUDA(cudaMemset(x, 41, n));
	KT_CUDA(cudaMemset(x + n - 5000, 200, 5000));
	KT_CUDA(cudaMemset(y, 0, n));
	long long size[1] = {n}, st[2][SGK_EW_MAXR] = {{1}, {1}};
	const void *ptrs[2] = {x, y};
	const int es[2] = {1, 1};
	SgEwShape<2> sh;
	sg_ew_shape_init(&sh, 1, size, st, ptrs, es, 16);
	KT_CHECK(sg_launch_elementwise<16>(&sh, IncByte{x, y}, 0) == cudaSuccess, "huge launch");
	KT_CUDA(cudaDeviceSynchronize());
	const long long at[] = {0, 1, 12345, (1ll << 31) - 1, 1ll << 31, n - 5001, n - 5000, n - 2, n - 1};
	int bad = 0;
	for (long long i : at) {
		unsigned char v;
		KT_CUDA(cudaMemcpy(&v, y + i, 1, cudaMemcpyDeviceToHost));
		bad += v != (i >= n - 5000 ? 201 : 42);
	}
	printf("%-44s %d wrong of %zu sampled\n", "2^31+13 bytes (64-bit indices)", bad,
	       sizeof at / sizeof at[0]);
	KT_CHECK(bad == 0, "huge: %d sampled bytes wrong", bad);
	cudaFree(x);
	cudaFree(y);
}

static void gelu_bf16(bool quick, double copy)
{
	const size_t n = quick ? 1000000 : (size_t)1 << 28;
	KtBuf<__nv_bfloat16> x, y;
	x.alloc(n), y.alloc(n);
	x.fill([] { return kt_unif(-4, 4); });
	y.poison();
	long long size[1] = {(long long)n}, st[2][SGK_EW_MAXR] = {{1}, {1}};
	const void *ptrs[2] = {x.d, y.d};
	const int es[2] = {2, 2};
	SgEwShape<2> sh;
	sg_ew_shape_init(&sh, 1, size, st, ptrs, es, 8);
	KT_CHECK(sg_launch_elementwise<8>(&sh, GeluBf16{x.d, y.d}, 0) == cudaSuccess, "gelu launch");
	KT_CUDA(cudaDeviceSynchronize());
	y.get();
	std::vector<double> o, r;
	for (size_t i = 0; i < n; i += 7) {
		o.push_back(y.h[i]);
		r.push_back(gelu(x.h[i]));
	}
	compare("gelu bf16 (sampled)", o, r, 1e-2);
	if (!quick) {
		double ms = kt_time([&] { sg_launch_elementwise<8>(&sh, GeluBf16{x.d, y.d}, 0); }, 3, 20);
		double gbps = 2.0 * 2 * n / (ms * 1e-3) / 1e9;
		printf("PERF elementwise gelu bf16 2^28: %.3f ms, %.0f GB/s = %.1f%% of copy\n", ms, gbps,
		       100 * gbps / copy);
	}
	x.release(), y.release();
}

int main(int argc, char **argv)
{
	kt_start(argc, argv);
	const bool quick = kt_flag(argc, argv, "--quick");
	const double copy = quick ? 1 : kt_copy_gbps((size_t)1 << 31);
	if (!quick)
		printf("PERF device copy: %.0f GB/s\n", copy);
	anchor(quick, copy);
	bias(quick, copy);
	outer_product();
	broadcast_inner_and_transpose();
	tail_and_misaligned();
	gelu_bf16(quick, copy);
	huge();
	return kt_finish();
}
