// Microbenchmark: how far past cuBLASLt's heuristic a search of its
// algorithm space gets at the transformer bench's product shapes (bf16).
// For each shape it times, on the same operands:
//   1. the heuristic's best 8 (what libsgrt times, SGRT_GEMM_TUNE);
//   2. every algorithm the heuristic returns for any of the shapes (an
//      algorithm is a configured descriptor; cublasLtMatmulAlgoCheck says
//      whether it runs this shape);
//   3. configurations enumerated from cublasLtMatmulAlgoGetIds: each
//      algorithm id's tiles, stages, swizzle, custom options and cluster
//      shapes (split-K 1; id 66's custom options 0-7 and 7 cluster
//      shapes, other ids' options 0-3) in a fixed shuffled order, as many as fit a
//      per-shape time budget;
// then times the eight fastest again with more runs, and prints them with
// their configuration. Shapes are given as libsgrt builds them (column
// major, cuBLAS's A is the row-major right operand); `row` shapes are the
// same products described in row-major order (CUBLASLT_ORDER_ROW).
//
// Read its figures with care: a candidate timed after idle time (the
// enumeration's configurations that cuBLASLt rejects, checked on the CPU)
// runs at the GPU's higher clocks, and the final runs come one candidate
// after another, each in another thermal state.  The configurations it
// found up to 18% faster than the heuristic's best 8 made the
// transformer's step 2.4% slower when libsgrt timed them beside the
// heuristic's (commit 0dd8986, reverted; docs/performance.md).
//
// With --capped, it times instead what a step at the GPU's power cap gets
// (capped() below): a transformer step holds the H200 at its 700 W cap, so a
// product's time there is not its time at boost clocks.
//
// Usage: gemm_search [budget seconds a shape, default 10]
//        gemm_search --capped [window ms, default 60] [rounds, default 3]
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <chrono>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>
#include <random>

#include "sm_clock.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_) { printf("cublas %d line %d\n", (int)s_, __LINE__); exit(1); } } while (0)

__global__ void fill(__nv_bfloat16 *p, size_t n, unsigned seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned x = (unsigned)i * 2654435761u ^ seed;
		x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
		p[i] = __float2bfloat16(((x & 0xffff) / 32768.0f - 1.0f));
	}
}

struct Shape { const char *name; int m, n, k, ta, tb; float beta; int row; };

// Shape s (column-major, as libsgrt describes it) in its row-major
// description when row is set: the transposed product over the same memory.
static Shape described(const Shape &s, bool row)
{
	return row ? Shape{s.name, s.n, s.m, s.k, s.tb, s.ta, s.beta, 1} : s;
}

struct Problem {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
};

static cublasLtMatrixLayout_t layout(int rows, int cols, int row_order)
{
	cublasLtMatrixLayout_t l;
	LT(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, rows, cols, row_order ? cols : rows));
	if (row_order) {
		int32_t ord = CUBLASLT_ORDER_ROW;
		LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &ord, sizeof ord));
	}
	return l;
}

static Problem problem(const Shape &s)
{
	Problem p;
	LT(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	int32_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
	LT(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
	p.la = s.ta ? layout(s.k, s.m, s.row) : layout(s.m, s.k, s.row);
	p.lb = s.tb ? layout(s.n, s.k, s.row) : layout(s.k, s.n, s.row);
	p.lc = layout(s.m, s.n, s.row);
	return p;
}

static void problem_free(Problem &p)
{
	cublasLtMatrixLayoutDestroy(p.la); cublasLtMatrixLayoutDestroy(p.lb);
	cublasLtMatrixLayoutDestroy(p.lc); cublasLtMatmulDescDestroy(p.op);
}

// An algorithm's configuration, for printing and for telling two apart.
struct Cfg { int id; uint32_t tile, stages, swz, custom, red; int32_t splitk; uint16_t inner, cluster; };

static Cfg cfg_of(const cublasLtMatmulAlgo_t &a)
{
	Cfg c; memset(&c, 0, sizeof c);
	size_t w;
	cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_ID, &c.id, sizeof c.id, &w);
	cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &c.tile, sizeof c.tile, &w);
	cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c.stages, sizeof c.stages, &w);
	cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c.swz, sizeof c.swz, &w);
	cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c.custom, sizeof c.custom, &w);
	cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c.red, sizeof c.red, &w);
	cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c.splitk, sizeof c.splitk, &w);
	cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &c.inner, sizeof c.inner, &w);
	cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c.cluster, sizeof c.cluster, &w);
	return c;
}

static void cfg_str(const cublasLtMatmulAlgo_t &a, char *buf, size_t n)
{
	Cfg c = cfg_of(a);
	snprintf(buf, n, "id %d tile %u stages %u swz %u custom %u splitk %d red %u inner %u cluster %u",
	         c.id, c.tile, c.stages, c.swz, c.custom, c.splitk, c.red, c.inner, c.cluster);
}

static bool same_cfg(const cublasLtMatmulAlgo_t &a, const cublasLtMatmulAlgo_t &b)
{
	Cfg x = cfg_of(a), y = cfg_of(b);
	return memcmp(&x, &y, sizeof x) == 0;
}

struct Bench {
	cublasLtHandle_t h;
	void *A, *B, *C, *ws;
	size_t wsb;
	cudaStream_t st;
	cudaEvent_t e0, e1;
};

// Milliseconds a call, over reps calls after warm calls; -1 if it fails.
static float time_algo(Bench &b, const Shape &s, Problem &p, const cublasLtMatmulAlgo_t &algo, int warm, int reps)
{
	float alpha = 1, beta = s.beta;
	for (int i = 0; i < warm; i++)
		if (cublasLtMatmul(b.h, p.op, &alpha, b.A, p.la, b.B, p.lb, &beta, b.C, p.lc, b.C, p.lc, &algo, b.ws, b.wsb, b.st))
			return -1;
	CK(cudaEventRecord(b.e0, b.st));
	for (int i = 0; i < reps; i++)
		if (cublasLtMatmul(b.h, p.op, &alpha, b.A, p.la, b.B, p.lb, &beta, b.C, p.lc, b.C, p.lc, &algo, b.ws, b.wsb, b.st))
			return -1;
	CK(cudaEventRecord(b.e1, b.st));
	CK(cudaEventSynchronize(b.e1));
	float ms;
	CK(cudaEventElapsedTime(&ms, b.e0, b.e1));
	return ms / reps;
}

static bool runs(Bench &b, Problem &p, const cublasLtMatmulAlgo_t &algo)
{
	cublasLtMatmulHeuristicResult_t r;
	if (cublasLtMatmulAlgoCheck(b.h, p.op, p.la, p.lb, p.lc, p.lc, &algo, &r) != CUBLAS_STATUS_SUCCESS)
		return false;
	return r.workspaceSize <= b.wsb;
}

static int heuristic(Bench &b, Problem &p, int want, cublasLtMatmulHeuristicResult_t *res)
{
	cublasLtMatmulPreference_t pref;
	LT(cublasLtMatmulPreferenceCreate(&pref));
	LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &b.wsb, sizeof b.wsb));
	int n = 0;
	if (cublasLtMatmulAlgoGetHeuristic(b.h, p.op, p.la, p.lb, p.lc, p.lc, pref, want, res, &n))
		n = 0;
	cublasLtMatmulPreferenceDestroy(pref);
	int k = 0;
	for (int i = 0; i < n; i++)
		if (res[i].state == CUBLAS_STATUS_SUCCESS)
			res[k++] = res[i];
	return k;
}

template <typename T>
static std::vector<T> cap_array(const cublasLtMatmulAlgo_t &a, cublasLtMatmulAlgoCapAttributes_t attr)
{
	size_t bytes = 0;
	cublasLtMatmulAlgoCapGetAttribute(&a, attr, NULL, 0, &bytes);
	std::vector<T> v(bytes / sizeof(T));
	if (!v.empty())
		cublasLtMatmulAlgoCapGetAttribute(&a, attr, v.data(), bytes, &bytes);
	return v;
}

// Every configuration of every algorithm id (split-K 1, a few cluster
// shapes), in groups that differ only in their custom option: a shape
// tries a group's others only when it runs its first (option 0).
typedef std::vector<cublasLtMatmulAlgo_t> Group;

static std::vector<Group> enumerate(Bench &b)
{
	std::vector<Group> out;
	int ids[256], nids = 0;
	LT(cublasLtMatmulAlgoGetIds(b.h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, 256, ids, &nids));
	const uint16_t clusters[] = { CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
	                              CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
	                              CUBLASLT_CLUSTER_SHAPE_1x4x1 };
	for (int i = 0; i < nids; i++) {
		cublasLtMatmulAlgo_t a;
		if (cublasLtMatmulAlgoInit(b.h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, ids[i], &a))
			continue;
		std::vector<uint32_t> tiles = cap_array<uint32_t>(a, CUBLASLT_ALGO_CAP_TILE_IDS);
		std::vector<uint32_t> stages = cap_array<uint32_t>(a, CUBLASLT_ALGO_CAP_STAGES_IDS);
		if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
		if (stages.empty()) stages.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED);
		int32_t swz_ok = 0, custom_max = 0;
		size_t w;
		cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz_ok, sizeof swz_ok, &w);
		cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max, sizeof custom_max, &w);
		// Id 66 (Hopper's nvjet kernels, every winner of the first runs):
		// custom options 0-7 and 7 cluster shapes; other ids options 0-3,
		// the automatic cluster shape.
		bool many = ids[i] == 66;
		printf("algo id %d: %zu tiles, %zu stages, swizzle %d, custom options 0-%d\n", ids[i], tiles.size(), stages.size(), swz_ok, custom_max);
		for (uint32_t t : tiles)
			for (uint32_t sg : stages)
				for (uint32_t swz = 0; swz <= (swz_ok ? 1u : 0u); swz++)
					for (unsigned ci = 0; ci < (many ? sizeof clusters / sizeof clusters[0] : 1); ci++) {
						Group g;
						for (int32_t cu = 0; cu <= std::min(custom_max, many ? 7 : 3); cu++) {
							uint16_t cl = clusters[ci];
							cublasLtMatmulAlgo_t c = a;
							uint32_t cuu = (uint32_t)cu;
							cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_TILE_ID, &t, sizeof t);
							cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_STAGES_ID, &sg, sizeof sg);
							cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz);
							cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &cuu, sizeof cuu);
							cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl);
							g.push_back(c);
						}
						out.push_back(g);
					}
	}
	// A fixed shuffle, so that a shape's time budget samples every id.
	std::shuffle(out.begin(), out.end(), std::mt19937(12345));
	return out;
}

struct Timed { float ms; cublasLtMatmulAlgo_t algo; const char *from; };

// The nine configurations of the Hopper kernels (algorithm 66) that the
// search at boost clocks found fastest at some shape (libsgrt timed them
// in commit 0dd8986).
static const struct { uint32_t tile, custom; uint16_t cluster; const char *name; } SEEDS[] = {
	{CUBLASLT_MATMUL_TILE_256x128, 7, CUBLASLT_CLUSTER_SHAPE_1x2x1, "256x128 option 7 cluster 1x2"},
	{CUBLASLT_MATMUL_TILE_128x256, 4, CUBLASLT_CLUSTER_SHAPE_2x1x1, "128x256 option 4 cluster 2x1"},
	{CUBLASLT_MATMUL_TILE_128x128, 0, CUBLASLT_CLUSTER_SHAPE_2x1x1, "128x128 option 0 cluster 2x1"},
	{CUBLASLT_MATMUL_TILE_128x128, 3, CUBLASLT_CLUSTER_SHAPE_1x2x1, "128x128 option 3 cluster 1x2"},
	{CUBLASLT_MATMUL_TILE_64x256, 1, CUBLASLT_CLUSTER_SHAPE_2x1x1, "64x256 option 1 cluster 2x1"},
	{CUBLASLT_MATMUL_TILE_112x192, 0, CUBLASLT_CLUSTER_SHAPE_2x1x1, "112x192 option 0 cluster 2x1"},
	{CUBLASLT_MATMUL_TILE_128x168, 1, CUBLASLT_CLUSTER_SHAPE_2x1x1, "128x168 option 1 cluster 2x1"},
	{CUBLASLT_MATMUL_TILE_128x176, 1, CUBLASLT_CLUSTER_SHAPE_2x1x1, "128x176 option 1 cluster 2x1"},
	{CUBLASLT_MATMUL_TILE_192x112, 3, CUBLASLT_CLUSTER_SHAPE_1x2x1, "192x112 option 3 cluster 1x2"},
};

// n calls of algo back to back: ms a call, and the mean SM clock sampled
// while they ran; -1 if cuBLASLt refuses it.
static float window(Bench &b, const Shape &s, Problem &p, const cublasLtMatmulAlgo_t &algo, int n, SmClock &clk,
                    double *mhz)
{
	float ms = time_algo(b, s, p, algo, 1, 1); // (loads its kernel)
	if (ms < 0)
		return -1;
	float alpha = 1, beta = s.beta;
	ms = clocked_window([&] {
		cublasLtMatmul(b.h, p.op, &alpha, b.A, p.la, b.B, p.lb, &beta, b.C, p.lc, b.C, p.lc, &algo, b.ws, b.wsb, b.st);
	}, n, b.st, b.e0, b.e1, &clk, mhz);
	if (ms < 0) {
		printf("cuda: timing a window failed\n");
		exit(1);
	}
	return ms;
}

// --capped: each shape's candidates (the heuristic's best 8 in libsgrt's
// column-major description, and the SEEDS in both descriptions) run back to
// back for a window each, in interleaved rounds, after a second of the
// heuristic's first has brought the GPU to its power cap: the time a call
// at the cap (the median of the rounds) and the SM clock while it ran.
static int capped(Bench &b, const Shape *sh, int nsh, double window_ms, int rounds)
{
	SmClock clk;
	if (!clk.dev)
		printf("NVML not found: no clocks\n");
	double tot_first = 0, tot_best = 0;
	for (int si = 0; si < nsh; si++) {
		struct Cand { cublasLtMatmulAlgo_t algo; int row; char what[288]; float est; std::vector<double> ms, mhz; };
		std::vector<Cand> c;
		Problem pr[2] = {problem(described(sh[si], 0)), problem(described(sh[si], 1))};
		cublasLtMatmulHeuristicResult_t res[8];
		int n = heuristic(b, pr[0], 8, res);
		char buf[256];
		for (int i = 0; i < n; i++) {
			cfg_str(res[i].algo, buf, sizeof buf);
			c.push_back(Cand{res[i].algo, 0, "", 0, {}, {}});
			snprintf(c.back().what, sizeof c.back().what, "heuristic #%d: %s", i, buf);
		}
		for (int row = 0; row < 2; row++) {
			cublasLtMatmulAlgo_t base;
			if (cublasLtMatmulAlgoInit(b.h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
			                           CUDA_R_16BF, 66, &base))
				break;
			std::vector<uint32_t> stages = cap_array<uint32_t>(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
			if (!stages.empty())
				cublasLtMatmulAlgoConfigSetAttribute(&base, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[0],
				                                     sizeof stages[0]);
			for (auto &sd : SEEDS) {
				cublasLtMatmulAlgo_t a = base;
				cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &sd.tile, sizeof sd.tile);
				cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &sd.custom,
				                                     sizeof sd.custom);
				cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &sd.cluster,
				                                     sizeof sd.cluster);
				if (!runs(b, pr[row], a))
					continue;
				c.push_back(Cand{a, row, "", 0, {}, {}});
				snprintf(c.back().what, sizeof c.back().what, "%s %s", row ? "row-major" : "column-major", sd.name);
			}
		}
		double mhz;
		if (c.empty())
			continue;
		float first = window(b, sh[si], pr[0], c[0].algo, 5, clk, &mhz);
		window(b, sh[si], pr[0], c[0].algo, (int)(1000 / first) + 1, clk, &mhz); // to the cap
		for (Cand &x : c)
			x.est = window(b, described(sh[si], x.row), pr[x.row], x.algo, 5, clk, &mhz);
		for (int r = 0; r < rounds; r++)
			for (Cand &x : c) {
				if (x.est <= 0)
					continue;
				float ms = window(b, described(sh[si], x.row), pr[x.row], x.algo, (int)(window_ms / x.est) + 1,
				                  clk, &mhz);
				x.ms.push_back(ms), x.mhz.push_back(mhz);
			}
		double flop = 2.0 * sh[si].m * sh[si].n * sh[si].k, best = 1e30;
		printf("%s:\n", sh[si].name);
		for (Cand &x : c) {
			if (x.ms.empty())
				continue;
			std::sort(x.ms.begin(), x.ms.end());
			std::sort(x.mhz.begin(), x.mhz.end());
			double t = x.ms[x.ms.size() / 2];
			printf("   %.4f ms  %6.1f TFLOP/s  %4.0f MHz  %s\n", t, flop / t / 1e9, x.mhz[x.mhz.size() / 2], x.what);
			best = std::min(best, t);
		}
		double h0 = c[0].ms.empty() ? -1 : c[0].ms[c[0].ms.size() / 2];
		printf("%s: heuristic #0 %.4f ms, fastest at the cap %.4f ms (%.1f%% less)\n", sh[si].name, h0, best,
		       100 * (h0 - best) / h0);
		fflush(stdout);
		tot_first += 8 * h0, tot_best += 8 * best;
		problem_free(pr[0]);
		problem_free(pr[1]);
	}
	printf("8 layers' 96 products at the cap: heuristic's first %.2f ms, the fastest of each shape %.2f ms\n",
	       tot_first, tot_best);
	return 0;
}

int main(int argc, char **argv)
{
	bool cap = argc > 1 && !strcmp(argv[1], "--capped");
	double budget_s = !cap && argc > 1 ? atof(argv[1]) : 10;
	const int T = 16384;
	const Shape sh[] = {
		{"fwd qkv   N6144 K2048", 6144, T, 2048, 1, 0, 0, 0},
		{"fwd proj  N2048 K2048", 2048, T, 2048, 1, 0, 0, 0},
		{"fwd fc1   N8192 K2048", 8192, T, 2048, 1, 0, 0, 0},
		{"fwd fc2   N2048 K8192", 2048, T, 8192, 1, 0, 0, 0},
		{"dgrad qkv  K6144", 2048, T, 6144, 0, 0, 0, 0},
		{"dgrad proj K2048", 2048, T, 2048, 0, 0, 0, 0},
		{"dgrad fc1  K8192", 2048, T, 8192, 0, 0, 0, 0},
		{"dgrad fc2  K2048", 8192, T, 2048, 0, 0, 0, 0},
		{"wgrad qkv  beta1", 2048, 6144, T, 0, 1, 1, 0},
		{"wgrad proj beta1", 2048, 2048, T, 0, 1, 1, 0},
		{"wgrad fc1  beta1", 2048, 8192, T, 0, 1, 1, 0},
		{"wgrad fc2  beta1", 8192, 2048, T, 0, 1, 1, 0},
	};
	const int nsh = sizeof sh / sizeof sh[0];
	Bench b;
	b.wsb = 32u << 20;
	LT(cublasLtCreate(&b.h));
	size_t big = (size_t)16384 * 8192 * 2;
	CK(cudaMalloc(&b.A, big)); CK(cudaMalloc(&b.B, big)); CK(cudaMalloc(&b.C, big)); CK(cudaMalloc(&b.ws, b.wsb));
	fill<<<1024, 256>>>((__nv_bfloat16 *)b.A, big / 2, 1);
	fill<<<1024, 256>>>((__nv_bfloat16 *)b.B, big / 2, 7);
	fill<<<1024, 256>>>((__nv_bfloat16 *)b.C, big / 2, 9);
	CK(cudaDeviceSynchronize());
	CK(cudaStreamCreate(&b.st));
	CK(cudaEventCreate(&b.e0)); CK(cudaEventCreate(&b.e1));
	if (cap)
		return capped(b, sh, nsh, argc > 2 ? atof(argv[2]) : 60, argc > 3 ? atoi(argv[3]) : 3);

	// The heuristic's algorithms for every shape, in both orders.
	std::vector<cublasLtMatmulAlgo_t> pool;
	for (int si = 0; si < nsh; si++)
		for (int row = 0; row < 2; row++) {
			Shape s = described(sh[si], row);
			Problem p = problem(s);
			cublasLtMatmulHeuristicResult_t res[32];
			int n = heuristic(b, p, 32, res);
			for (int i = 0; i < n; i++) {
				bool dup = false;
				for (auto &q : pool) dup = dup || same_cfg(q, res[i].algo);
				if (!dup) pool.push_back(res[i].algo);
			}
			problem_free(p);
		}
	printf("heuristic pool: %zu algorithms\n", pool.size());
	std::vector<Group> all = enumerate(b);
	size_t nall = 0;
	for (auto &g : all) nall += g.size();
	printf("enumerated: %zu configurations in %zu groups\n", nall, all.size());

	double tot_top8 = 0, tot_best = 0;
	char buf[256];
	for (int si = 0; si < nsh; si++) {
		double flop = 2.0 * sh[si].m * sh[si].n * sh[si].k;
		float top8 = 1e30f, first = 0;
		std::vector<Timed> found;
		for (int row = 0; row < 2; row++) {
			Shape s = described(sh[si], row);
			Problem p = problem(s);
			const char *tag = row ? "row" : "col";
			cublasLtMatmulHeuristicResult_t res[32];
			int n = heuristic(b, p, 8, res);
			for (int i = 0; i < n; i++) {
				float ms = time_algo(b, s, p, res[i].algo, 3, 10);
				if (ms < 0) continue;
				if (!row && i == 0) first = ms;
				if (!row) top8 = std::min(top8, ms);
				found.push_back({ms, res[i].algo, row ? "row heuristic" : "heuristic"});
			}
			for (auto &a : pool) {
				if (!runs(b, p, a)) continue;
				float ms = time_algo(b, s, p, a, 2, 8);
				if (ms > 0) found.push_back({ms, a, row ? "row pool" : "pool"});
			}
			auto t0 = std::chrono::steady_clock::now();
			int tried = 0, ran = 0;
			for (auto &g : all) {
				if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > budget_s / 2) break;
				if (!runs(b, p, g[0])) { tried++; continue; }
				for (auto &a : g) {
					tried++;
					if (&a != &g[0] && !runs(b, p, a)) continue;
					float ms = time_algo(b, s, p, a, 1, 4);
					if (ms > 0) { ran++; found.push_back({ms, a, row ? "row enumerated" : "enumerated"}); }
				}
			}
			printf("%s %s: heuristic %d, enumerated %d tried, %d ran\n", sh[si].name, tag, n, tried, ran);
			problem_free(p);
		}
		std::sort(found.begin(), found.end(), [](const Timed &x, const Timed &y) { return x.ms < y.ms; });
		// The eight fastest again, with more runs.
		float best = 1e30f;
		printf("%s: heuristic #0 %.4f ms (%.1f TFLOP/s), best of 8 %.4f ms (%.1f)\n", sh[si].name, first, flop / first / 1e9, top8, flop / top8 / 1e9);
		for (size_t i = 0; i < found.size() && i < 8; i++) {
			Shape s = described(sh[si], strncmp(found[i].from, "row", 3) == 0);
			Problem p = problem(s);
			float ms = time_algo(b, s, p, found[i].algo, 3, 30);
			problem_free(p);
			best = std::min(best, ms);
			cfg_str(found[i].algo, buf, sizeof buf);
			printf("   %.4f ms (%.1f TFLOP/s) [%s] %s\n", ms, flop / ms / 1e9, found[i].from, buf);
		}
		printf("%s: best %.4f ms, %.1f%% below the best of 8\n", sh[si].name, best, 100.0 * (top8 - best) / top8);
		tot_top8 += 8 * top8; tot_best += 8 * best;
		fflush(stdout);
	}
	printf("8 layers' 96 products: best of 8 %.3f ms, searched %.3f ms\n", tot_top8, tot_best);
	return 0;
}
