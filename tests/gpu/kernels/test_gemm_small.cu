/*
 * test_gemm_small.cu - the small f32 product with an epilogue
 * (runtime/sgk/sgk_gemm.cuh) against the product summed in double on the
 * host: awkward shapes (tiles cut by M, N and K, a sum shorter than a
 * step), every split of K (1, 2, 4, 8, 16, and sg_gemm_small_split's
 * choice), row strides wider than the matrix, operands off 16-byte
 * alignment (the kernel that loads element by element; given the same
 * values as the cp.async kernel, it must give the same bits), and an
 * epilogue that stores the product
 * and tanh of it (as sgc's generated functors do).  Each result also
 * checked to come out bit for bit the same in a second run (the cluster
 * adds the parts in rank order).  Then the time of two_branch's 64 x 1024
 * by 1024 x 1024 product with tanh.
 *
 *   test_gemm_small [--quick] [--sanitize]
 */
#include <map>
#include <string>

#include "ktest.h"
#include "sgk_gemm.cuh"

/* The product and tanh of it, each into its own [M, ldc] matrix. */
struct EpiBoth {
	float *p, *t;
	long long ldc;
	__device__ void operator()(float acc, sgk_i64 row, sgk_i64 col) const
	{
		p[row * ldc + col] = acc;
		t[row * ldc + col] = tanhf(acc);
	}
};

struct Case {
	long long m, n, k, lda, ldb; /* ld 0: packed */
	int off;                      /* elements A and B start off alignment */
};

/* A value in [-1, 1) for element i of operand `which` of case `seed`: the
 * same matrix whatever the offset it starts at. */
static float value_at(uint64_t seed, int which, long long i)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + (uint64_t)which * 0xbf58476d1ce4e5b9ull +
	             (uint64_t)i * 0x94d049bb133111ebull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* The products by case (its dims and row strides) and split, for a case
 * at another offset to match bit for bit. */
static std::map<std::string, std::vector<double>> g_bits;

static void run_case(const Case &c, int split, bool both)
{
	const long long lda = c.lda ? c.lda : c.k, ldb = c.ldb ? c.ldb : c.n, ldc = c.n + 3;
	KtBuf<float> a, b, p, t;
	a.alloc(c.m * lda + c.off);
	b.alloc(c.k * ldb + c.off);
	p.alloc(c.m * ldc);
	t.alloc(c.m * ldc);
	const uint64_t seed = (uint64_t)(c.m * 1000003 + c.n * 1009 + c.k);
	long long ia = -c.off, ib = -c.off;
	a.fill([&] { return value_at(seed, 0, ia++); });
	b.fill([&] { return value_at(seed, 1, ib++); });
	p.poison();
	t.poison();
	const float *A = a.d + c.off, *B = b.d + c.off;
	auto launch = [&] {
		if (both)
			KT_CUDA(sg_launch_gemm_small(A, lda, B, ldb, c.m, c.n, c.k, split,
			                             EpiBoth{p.d, t.d, ldc}, 0));
		else
			KT_CUDA(sg_launch_gemm_small(A, lda, B, ldb, c.m, c.n, c.k, split,
			                             SgkGemmStore{p.d, ldc}, 0));
		KT_CUDA(cudaDeviceSynchronize());
		p.get();
	};
	launch();
	t.get();
	std::vector<double> first = p.h;
	launch(); /* the same call again: the same bits */
	double worst = 0, worst_t = 0, bound = 0;
	size_t diff = 0;
	for (long long i = 0; i < c.m; i++)
		for (long long j = 0; j < c.n; j++) {
			double ref = 0, mag = 0;
			for (long long q = 0; q < c.k; q++) {
				double x = a.h[c.off + i * lda + q], y = b.h[c.off + q * ldb + j];
				ref += x * y;
				mag += fabs(x * y);
			}
			double got = p.h[i * ldc + j];
			/* f32 sums of k terms: a few roundings of the magnitude each */
			double tol = 2.0 * (c.k + 2) * 5.96e-8 * mag + 1e-30;
			worst = std::max(worst, fabs(got - ref) / tol);
			bound = std::max(bound, tol);
			if (both)
				worst_t = std::max(worst_t, fabs(t.h[i * ldc + j] - tanh(got)));
			diff += first[i * ldc + j] != got;
		}
	KT_CHECK(worst <= 1, "%lldx%lldx%lld lda %lld ldb %lld off %d split %d: error %.3g of the "
	         "bound", c.m, c.n, c.k, lda, ldb, c.off, split, worst);
	KT_CHECK(diff == 0, "%lldx%lldx%lld split %d: %zu elements differ between two runs",
	         c.m, c.n, c.k, split, diff);
	char key[120];
	snprintf(key, sizeof key, "%lld %lld %lld %lld %lld %d", c.m, c.n, c.k, lda, ldb, split);
	std::vector<double> &seen = g_bits[key];
	if (seen.empty())
		seen = first;
	else {
		size_t other = 0;
		for (size_t q = 0; q < first.size(); q++)
			other += first[q] != seen[q] && !(first[q] != first[q] && seen[q] != seen[q]);
		KT_CHECK(other == 0, "%lldx%lldx%lld split %d off %d: %zu elements differ from the "
		         "same product at another alignment", c.m, c.n, c.k, split, c.off, other);
	}
	if (both)
		KT_CHECK(worst_t <= 4e-7, "%lldx%lldx%lld split %d: tanh epilogue off by %.3g", c.m,
		         c.n, c.k, split, worst_t);
	/* the padding columns [n, ldc) are untouched (still NaN) */
	size_t pad = 0;
	for (long long i = 0; i < c.m; i++)
		for (long long j = c.n; j < ldc; j++)
			pad += p.h[i * ldc + j] == p.h[i * ldc + j];
	KT_CHECK(pad == 0, "%lldx%lldx%lld split %d: %zu stores outside the result", c.m, c.n,
	         c.k, split, pad);
	a.release();
	b.release();
	p.release();
	t.release();
}

int main(int argc, char **argv)
{
	kt_start(argc, argv);
	const bool quick = kt_flag(argc, argv, "--quick") || kt_flag(argc, argv, "--sanitize");
	const Case cases[] = {
		{64, 1024, 1024, 0, 0, 0}, /* two_branch's layer */
		{1, 1, 1, 0, 0, 0},
		{5, 3, 7, 0, 0, 0},
		{32, 64, 32, 0, 0, 0},
		{33, 65, 33, 0, 0, 0},
		{37, 70, 45, 0, 0, 0},
		{100, 130, 300, 0, 0, 0},
		{8, 64, 4096, 0, 0, 0},
		{64, 256, 260, 300, 264, 0}, /* wider rows, multiples of 4 */
		{64, 256, 260, 300, 264, 1}, /* the same off alignment: the same bits */
		{20, 16, 24, 0, 0, 1},       /* misaligned: element loads */
		{20, 16, 24, 0, 0, 0},
		{48, 96, 128, 131, 0, 0},    /* lda not a multiple of 4 */
		{70, 36, 513, 0, 40, 2},
	};
	const int ncases = quick ? 6 : (int)(sizeof cases / sizeof *cases);
	for (int i = 0; i < ncases; i++) {
		const Case &c = cases[i];
		for (int split = 1; split <= 16; split *= 2)
			run_case(c, split, split == 2 || split == 8);
		if (!quick)
			run_case(c, sg_gemm_small_split(c.m, c.n, c.k), true);
	}
	KT_CHECK(sg_launch_gemm_small((const float *)0, 1, (const float *)0, 1, 4, 4, 4, 3,
	                              SgkGemmStore{0, 4}, 0) == cudaErrorInvalidValue,
	         "a split of 3 is refused");
	KT_CHECK(sg_launch_gemm_small((const float *)0, 1, (const float *)0, 1, 4, 4, 4, 32,
	                              SgkGemmStore{0, 4}, 0) == cudaErrorInvalidValue,
	         "a split of 32 is refused");
	KT_CHECK(sg_launch_gemm_small((const float *)0, 1, (const float *)0, 1, 0, 4, 4, 1,
	                              SgkGemmStore{0, 4}, 0) == cudaSuccess,
	         "an empty product launches nothing");
	if (!quick) {
		KtBuf<float> a, b, p, t;
		a.alloc(64 * 1024);
		b.alloc(1024 * 1024);
		p.alloc(64 * 1024);
		t.alloc(64 * 1024);
		a.fill([] { return kt_unif(-1, 1); });
		b.fill([] { return kt_unif(-1, 1) / 32; });
		int split = sg_gemm_small_split(64, 1024, 1024);
		double ms = kt_time([&] {
			KT_CUDA(sg_launch_gemm_small(a.d, 1024, b.d, 1024, 64, 1024, 1024, split,
			                             EpiBoth{p.d, t.d, 1024}, 0));
		}, 10, 200);
		printf("PERF gemm_small 64x1024x1024 f32 + tanh (split %d): %.2f us, %.1f TFLOP/s\n",
		       split, ms * 1000, 2.0 * 64 * 1024 * 1024 / (ms * 1e-3) / 1e12);
	}
	return kt_finish();
}
