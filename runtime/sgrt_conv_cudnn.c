/*
 * sgrt_conv_cudnn.c - conv2d forward, data gradient and filter gradient
 * through cuDNN's convolution API (cudnnConvolutionForward,
 * cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter), from C.
 *
 * The library and handle are the ones sgrt_attn_cudnn.c loads (dlopen of
 * libcudnn.so.9 or SGRT_CUDNN_LIB, on first use); when they are missing
 * the functions say so (SGRT_CONV_UNAVAILABLE) and the generated code runs
 * sgk_conv.cuh's direct kernels instead; a shape cuDNN has no algorithm
 * for is SGRT_CONV_DECLINED, likewise.  Neither is an error.
 *
 * Each distinct (direction, dtype, sizes, layout) gets a plan, made on
 * first use and kept by the model: the descriptors (NCHW, or NHWC with a
 * KRSC filter for channels last) and the algorithms cuDNN's heuristics
 * offer, in their order, the deterministic ones only (all of them when none
 * is), f32 without TF32 (PyTorch's numerics with allow_tf32 off; f16 and
 * bf16 on tensor cores, accumulating in f32).  The first is the plan's
 * algorithm.  Under SGRT_CONV_TUNE=1 the first eager call times them
 * instead (as sgrt_blas.c does cuBLASLt's, and cuDNN's benchmark mode in
 * PyTorch): each candidate whose workspace fits what the stream's buffer
 * holds, or the first's need when that is more, runs once and then three
 * times between two events on the call's own operands, and the fastest is
 * kept unless it is within 1% of the first.  The runs write the output,
 * which the call then writes again.  Not the default: timed alone, on
 * operands the runs leave in L2, the choice was not shown faster in a
 * step (docs/performance.md, 2026-12-04).  The workspace is
 * the model's, one buffer per stream, grown when a plan is made (never
 * while the stream is being captured into a CUDA graph: declined then,
 * and not timed then either: the next eager call times it).
 *
 * f16 and bf16 convolutions of one group are issued through cuDNN's
 * graph API (SGRT_CONV_API=legacy: through the calls above): per plan an
 * operation graph of the one convolution and the execution plan of
 * heuristic mode A's first deterministic engine configuration whose
 * workspace is at most the legacy algorithm's or 16 MB (so that the
 * peak grows by 16 MB at most), built once with the descriptors, and a
 * variant pack kept while the call's addresses stay the same (a step's
 * do), so that a call is cudnnBackendExecute alone, as libsgrt's
 * attention is called.  The legacy calls plan each call again on the
 * host: 3.6 ms of host time for resnet18's 59 against 0.76 through the
 * graph API (docs/performance.md, 2026-12-07).  A call whose operands
 * are not 16-byte aligned (the plan's assumption), a shape with no such
 * configuration, f32 and f64 (whose graph engines may take TF32) and
 * SGRT_CONV_TUNE take the legacy call.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sgrt_impl.h"

#if SGRT_HAVE_CUDNN_H && defined(__has_include)
#if __has_include(<cudnn_cnn.h>)
#define SGRT_CONV_CUDNN 1
#endif
#endif

#if SGRT_CONV_CUDNN
#include <cudnn_cnn.h>

#include "sgrt_cudnn_graph.h"

/* The legacy API's functions used, looked up in the library
 * sgrt_attn_cudnn.c loaded (the backend API's: SgrtCudnnApi). */
typedef struct {
	cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
	cudnnStatus_t (*CreateTensor)(cudnnTensorDescriptor_t *);
	cudnnStatus_t (*SetTensor4d)(cudnnTensorDescriptor_t, cudnnTensorFormat_t,
	                             cudnnDataType_t, int, int, int, int);
	cudnnStatus_t (*DestroyTensor)(cudnnTensorDescriptor_t);
	cudnnStatus_t (*CreateFilter)(cudnnFilterDescriptor_t *);
	cudnnStatus_t (*SetFilter4d)(cudnnFilterDescriptor_t, cudnnDataType_t,
	                             cudnnTensorFormat_t, int, int, int, int);
	cudnnStatus_t (*DestroyFilter)(cudnnFilterDescriptor_t);
	cudnnStatus_t (*CreateConv)(cudnnConvolutionDescriptor_t *);
	cudnnStatus_t (*SetConv2d)(cudnnConvolutionDescriptor_t, int, int, int, int, int, int,
	                           cudnnConvolutionMode_t, cudnnDataType_t);
	cudnnStatus_t (*SetGroups)(cudnnConvolutionDescriptor_t, int);
	cudnnStatus_t (*SetMath)(cudnnConvolutionDescriptor_t, cudnnMathType_t);
	cudnnStatus_t (*DestroyConv)(cudnnConvolutionDescriptor_t);
	cudnnStatus_t (*FwdAlgo)(cudnnHandle_t, const cudnnTensorDescriptor_t,
	                         const cudnnFilterDescriptor_t, const cudnnConvolutionDescriptor_t,
	                         const cudnnTensorDescriptor_t, const int, int *,
	                         cudnnConvolutionFwdAlgoPerf_t *);
	cudnnStatus_t (*DataAlgo)(cudnnHandle_t, const cudnnFilterDescriptor_t,
	                          const cudnnTensorDescriptor_t, const cudnnConvolutionDescriptor_t,
	                          const cudnnTensorDescriptor_t, const int, int *,
	                          cudnnConvolutionBwdDataAlgoPerf_t *);
	cudnnStatus_t (*FilterAlgo)(cudnnHandle_t, const cudnnTensorDescriptor_t,
	                            const cudnnTensorDescriptor_t,
	                            const cudnnConvolutionDescriptor_t,
	                            const cudnnFilterDescriptor_t, const int, int *,
	                            cudnnConvolutionBwdFilterAlgoPerf_t *);
	cudnnStatus_t (*Fwd)(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t,
	                     const void *, const cudnnFilterDescriptor_t, const void *,
	                     const cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t, void *,
	                     size_t, const void *, const cudnnTensorDescriptor_t, void *);
	cudnnStatus_t (*Data)(cudnnHandle_t, const void *, const cudnnFilterDescriptor_t,
	                      const void *, const cudnnTensorDescriptor_t, const void *,
	                      const cudnnConvolutionDescriptor_t, cudnnConvolutionBwdDataAlgo_t,
	                      void *, size_t, const void *, const cudnnTensorDescriptor_t, void *);
	cudnnStatus_t (*Filter)(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t,
	                        const void *, const cudnnTensorDescriptor_t, const void *,
	                        const cudnnConvolutionDescriptor_t,
	                        cudnnConvolutionBwdFilterAlgo_t, void *, size_t, const void *,
	                        const cudnnFilterDescriptor_t, void *);
	cudnnStatus_t (*AddTensor)(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t,
	                           const void *, const void *, const cudnnTensorDescriptor_t,
	                           void *);
	const char *(*ErrorString)(cudnnStatus_t);
} Fns;

/* What makes two convolutions the same plan. */
typedef struct {
	int dir, dtype;
	long long g[SGRT_CONV_GEOM];
} Key;

enum { MAXALGO = 16 };

/* The places in a Key's g (sgrt_conv2d's geometry, SgConvGeom's order). */
enum { N, C, H, W, K, R, S, OH, OW, GROUPS, SH, SW, PH, PW, DH, DW, CL };

typedef struct {
	Key key;
	int ok;                          /* 0: declined, remembered */
	int tuned;                       /* the candidates timed (or not to be) */
	cudnnTensorDescriptor_t x, y, bias;
	cudnnFilterDescriptor_t w;
	cudnnConvolutionDescriptor_t conv;
	int algo;                        /* the candidate chosen, as the next three */
	size_t ws;
	cudnnMathType_t math;
	cudnnMathType_t set_math;        /* the math type conv holds now */
	int ncand;                       /* the heuristic's candidates, its order */
	int cand_algo[MAXALGO];
	size_t cand_ws[MAXALGO];
	cudnnMathType_t cand_math[MAXALGO];
	/* the graph API's execution plan (NULL: the legacy call), its
	 * engine and workspace, and the last variant pack */
	cudnnBackendDescriptor_t gplan;
	long long engine;
	size_t gws;
	SgrtCudnnPack pack;
} Plan;

typedef struct {
	Fns f;
	SgrtCudnnApi api;
	cudnnHandle_t h;
	int tune;                        /* time the candidates (SGRT_CONV_TUNE=1) */
	int debug;                       /* SGRT_CUDNN_DEBUG: say what timing chose */
	int graph;                       /* f16, bf16 through the graph API */
	SgrtTable plans;                 /* Plan by Key */
	void **ws;                       /* [nstreams] */
	size_t *ws_bytes;
} Conv;

static void
plan_free(Conv *c, Plan *p)
{
	if (p->x)
		(void)c->f.DestroyTensor(p->x);
	if (p->y)
		(void)c->f.DestroyTensor(p->y);
	if (p->bias)
		(void)c->f.DestroyTensor(p->bias);
	if (p->w)
		(void)c->f.DestroyFilter(p->w);
	if (p->conv)
		(void)c->f.DestroyConv(p->conv);
	sgrt_cudnn_pack_free(&c->api, &p->pack);
	if (p->gplan)
		(void)c->api.Destroy(p->gplan);
}

void
sgrt_conv_release(SgrtModel *m)
{
	Conv *c = m->conv;
	if (!c)
		return;
	for (int i = 0; i < c->plans.n; i++)
		plan_free(c, sgrt_table_at(&c->plans, i));
	for (int i = 0; i < m->nstreams; i++)
		if (c->ws[i]) {
			(void)cudaFree(c->ws[i]);
			sgrt_mem_account(m, -(long long)c->ws_bytes[i]);
		}
	sgrt_table_free(&c->plans);
	free(c->ws);
	free(c->ws_bytes);
	free(c);
	m->conv = NULL;
	m->conv_state = 0;
}

/* The model's conv state over sgrt_attn_cudnn.c's library; NULL when
 * cuDNN is unavailable. */
static Conv *
load(SgrtModel *m)
{
	static const SgrtSym sym[] = {
		{"cudnnSetStream", offsetof(Fns, SetStream)},
		{"cudnnCreateTensorDescriptor", offsetof(Fns, CreateTensor)},
		{"cudnnSetTensor4dDescriptor", offsetof(Fns, SetTensor4d)},
		{"cudnnDestroyTensorDescriptor", offsetof(Fns, DestroyTensor)},
		{"cudnnCreateFilterDescriptor", offsetof(Fns, CreateFilter)},
		{"cudnnSetFilter4dDescriptor", offsetof(Fns, SetFilter4d)},
		{"cudnnDestroyFilterDescriptor", offsetof(Fns, DestroyFilter)},
		{"cudnnCreateConvolutionDescriptor", offsetof(Fns, CreateConv)},
		{"cudnnSetConvolution2dDescriptor", offsetof(Fns, SetConv2d)},
		{"cudnnSetConvolutionGroupCount", offsetof(Fns, SetGroups)},
		{"cudnnSetConvolutionMathType", offsetof(Fns, SetMath)},
		{"cudnnDestroyConvolutionDescriptor", offsetof(Fns, DestroyConv)},
		{"cudnnGetConvolutionForwardAlgorithm_v7", offsetof(Fns, FwdAlgo)},
		{"cudnnGetConvolutionBackwardDataAlgorithm_v7", offsetof(Fns, DataAlgo)},
		{"cudnnGetConvolutionBackwardFilterAlgorithm_v7", offsetof(Fns, FilterAlgo)},
		{"cudnnConvolutionForward", offsetof(Fns, Fwd)},
		{"cudnnConvolutionBackwardData", offsetof(Fns, Data)},
		{"cudnnConvolutionBackwardFilter", offsetof(Fns, Filter)},
		{"cudnnAddTensor", offsetof(Fns, AddTensor)},
		{"cudnnGetErrorString", offsetof(Fns, ErrorString)},
	};
	if (m->conv_state)
		return m->conv_state > 0 ? (Conv *)m->conv : NULL;
	m->conv_state = -1;
	void *h = NULL;
	void *lib = sgrt_cudnn_lib(m, &h);
	if (!lib)
		return NULL;
	Conv *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->h = h;
	sgrt_table_init(&c->plans, sizeof(Plan), sizeof(Key));
	const char *tune = getenv("SGRT_CONV_TUNE");
	c->tune = tune && *tune && strcmp(tune, "0") != 0;
	const char *debug = getenv("SGRT_CUDNN_DEBUG");
	c->debug = debug && *debug && *debug != '0';
	const char *api = getenv("SGRT_CONV_API");
	c->graph = !(api && strcmp(api, "legacy") == 0) && !c->tune;
	if (!sgrt_dlsyms(lib, sym, sizeof sym / sizeof sym[0], &c->f) ||
	    !sgrt_cudnn_api(lib, &c->api)) {
		free(c);
		return NULL;
	}
	c->ws = calloc((size_t)m->nstreams, sizeof *c->ws);
	c->ws_bytes = calloc((size_t)m->nstreams, sizeof *c->ws_bytes);
	if (!c->ws || !c->ws_bytes) {
		free(c->ws);
		free(c->ws_bytes);
		free(c);
		return NULL;
	}
	m->conv = c;
	m->conv_state = 1;
	return c;
}

static cudnnDataType_t
cudnn_dt(int dtype)
{
	switch (dtype) {
	case SGRT_F16: return CUDNN_DATA_HALF;
	case SGRT_BF16: return CUDNN_DATA_BFLOAT16;
	case SGRT_F64: return CUDNN_DATA_DOUBLE;
	default: return CUDNN_DATA_FLOAT;
	}
}

/* The descriptors of k and its algorithm; 0 when cuDNN declines. */
static int
make_plan(Conv *c, const Key *k, Plan *p)
{
	const long long *g = k->g;
	cudnnDataType_t dt = cudnn_dt(k->dtype);
	/* the sizes stay the logical ones; NHWC's filter is KRSC */
	cudnnTensorFormat_t fmt = g[CL] ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
	cudnnDataType_t comp = k->dtype == SGRT_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
	int ok = c->f.CreateTensor(&p->x) == CUDNN_STATUS_SUCCESS &&
	         c->f.CreateTensor(&p->y) == CUDNN_STATUS_SUCCESS &&
	         c->f.CreateTensor(&p->bias) == CUDNN_STATUS_SUCCESS &&
	         c->f.CreateFilter(&p->w) == CUDNN_STATUS_SUCCESS &&
	         c->f.CreateConv(&p->conv) == CUDNN_STATUS_SUCCESS;
	ok = ok && c->f.SetTensor4d(p->x, fmt, dt, (int)g[N], (int)g[C], (int)g[H],
	                            (int)g[W]) == CUDNN_STATUS_SUCCESS;
	ok = ok && c->f.SetTensor4d(p->y, fmt, dt, (int)g[N], (int)g[K], (int)g[OH],
	                            (int)g[OW]) == CUDNN_STATUS_SUCCESS;
	ok = ok && c->f.SetTensor4d(p->bias, fmt, dt, 1, (int)g[K], 1, 1) ==
	                            CUDNN_STATUS_SUCCESS;
	ok = ok && c->f.SetFilter4d(p->w, dt, fmt, (int)g[K], (int)(g[C] / g[GROUPS]),
	                            (int)g[R], (int)g[S]) == CUDNN_STATUS_SUCCESS;
	ok = ok && c->f.SetConv2d(p->conv, (int)g[PH], (int)g[PW], (int)g[SH], (int)g[SW],
	                          (int)g[DH], (int)g[DW], CUDNN_CROSS_CORRELATION, comp) ==
	                          CUDNN_STATUS_SUCCESS;
	ok = ok && c->f.SetGroups(p->conv, (int)g[GROUPS]) == CUDNN_STATUS_SUCCESS;
	cudnnMathType_t math = k->dtype == SGRT_F16 || k->dtype == SGRT_BF16
	                       ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
	ok = ok && c->f.SetMath(p->conv, math) == CUDNN_STATUS_SUCCESS;
	if (!ok)
		return 0;
	/* the deterministic algorithms that work (all that work when none is
	 * deterministic), in the heuristic's order; f32 not on TF32 even when
	 * a heuristic ranks it first */
	int n = 0;
#define CANDIDATES(perf)                                                              \
	do {                                                                          \
		int det = 0;                                                          \
		for (int i = 0; i < n; i++)                                           \
			det |= perf[i].status == CUDNN_STATUS_SUCCESS &&              \
			       perf[i].determinism == CUDNN_DETERMINISTIC;            \
		for (int i = 0; i < n; i++) {                                         \
			if (perf[i].status != CUDNN_STATUS_SUCCESS ||                 \
			    (det && perf[i].determinism != CUDNN_DETERMINISTIC) ||    \
			    (k->dtype == SGRT_F32 && perf[i].mathType != CUDNN_FMA_MATH && \
			     perf[i].mathType != CUDNN_DEFAULT_MATH))                 \
				continue;                                             \
			p->cand_algo[p->ncand] = (int)perf[i].algo;                   \
			p->cand_ws[p->ncand] = perf[i].memory;                        \
			p->cand_math[p->ncand++] = perf[i].mathType;                  \
		}                                                                     \
	} while (0)
	if (k->dir == SGRT_CONV_FWD) {
		cudnnConvolutionFwdAlgoPerf_t perf[MAXALGO];
		if (c->f.FwdAlgo(c->h, p->x, p->w, p->conv, p->y, MAXALGO, &n, perf) !=
		    CUDNN_STATUS_SUCCESS)
			return 0;
		CANDIDATES(perf);
	} else if (k->dir == SGRT_CONV_BWD_DATA) {
		cudnnConvolutionBwdDataAlgoPerf_t perf[MAXALGO];
		if (c->f.DataAlgo(c->h, p->w, p->y, p->conv, p->x, MAXALGO, &n, perf) !=
		    CUDNN_STATUS_SUCCESS)
			return 0;
		CANDIDATES(perf);
	} else {
		cudnnConvolutionBwdFilterAlgoPerf_t perf[MAXALGO];
		if (c->f.FilterAlgo(c->h, p->x, p->y, p->conv, p->w, MAXALGO, &n, perf) !=
		    CUDNN_STATUS_SUCCESS)
			return 0;
		CANDIDATES(perf);
	}
#undef CANDIDATES
	if (p->ncand == 0)
		return 0;
	p->algo = p->cand_algo[0];
	p->ws = p->cand_ws[0];
	p->math = p->set_math = p->cand_math[0];
	p->tuned = !c->tune || p->ncand < 2;
	return c->f.SetMath(p->conv, p->math) == CUDNN_STATUS_SUCCESS;
}

/* One run of plan p with algorithm (algo, math), workspace ws of ws_bytes:
 * a, b the operands as sgrt_conv2d's, out written (beta 0).  The math
 * type is set on the descriptor only when it changes (while timing):
 * with it set on every call, each convolution of a traced ResNet-18 step
 * took at least about 0.1 ms (2026-12-04 00:05, H200), as if cuDNN
 * planned the call again. */
static cudnnStatus_t
run_algo(Conv *c, Plan *p, int algo, cudnnMathType_t math, void *ws, size_t ws_bytes,
         const void *a, const void *b, void *out, const void *alpha, const void *beta)
{
	if (math != p->set_math) {
		cudnnStatus_t e = c->f.SetMath(p->conv, math);
		if (e != CUDNN_STATUS_SUCCESS)
			return e;
		p->set_math = math;
	}
	if (p->key.dir == SGRT_CONV_FWD)
		return c->f.Fwd(c->h, alpha, p->x, a, p->w, b, p->conv, (cudnnConvolutionFwdAlgo_t)algo,
		                ws, ws_bytes, beta, p->y, out);
	if (p->key.dir == SGRT_CONV_BWD_DATA)
		return c->f.Data(c->h, alpha, p->w, b, p->y, a, p->conv,
		                 (cudnnConvolutionBwdDataAlgo_t)algo, ws, ws_bytes, beta, p->x, out);
	return c->f.Filter(c->h, alpha, p->x, b, p->y, a, p->conv,
	                   (cudnnConvolutionBwdFilterAlgo_t)algo, ws, ws_bytes, beta, p->w, out);
}

/* Times plan p's candidates on stream s's buffer (*ms < 0: not run: too
 * much workspace, or cuDNN refused it) and keeps the fastest, as the
 * header says.  The handle is on stream s. */
static int
tune_plan(SgrtModel *m, Conv *c, int s, Plan *p, const void *a, const void *b, void *out,
          const void *alpha, const void *beta, int sgline)
{
	float ms[MAXALGO] = {-1};
	cudaEvent_t e[2] = {NULL, NULL};
	int best = 0, rc = SGRT_OK;

	p->tuned = 1;
	rc = sgrt_check_cuda(m, cudaEventCreate(&e[0]), "cudaEventCreate", sgline);
	if (!rc)
		rc = sgrt_check_cuda(m, cudaEventCreate(&e[1]), "cudaEventCreate", sgline);
	for (int i = 0; i < p->ncand && !rc; i++) {
		ms[i] = -1;
		if (p->cand_ws[i] > c->ws_bytes[s])
			continue;
		cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
		for (int r = 0; r < 4 && st == CUDNN_STATUS_SUCCESS && !rc; r++) {
			if (r == 1)
				rc = sgrt_check_cuda(m, cudaEventRecord(e[0], m->stream[s]),
				                     "cudaEventRecord", sgline);
			if (!rc)
				st = run_algo(c, p, p->cand_algo[i], p->cand_math[i], c->ws[s],
				              c->ws_bytes[s], a, b, out, alpha, beta);
		}
		if (rc || st != CUDNN_STATUS_SUCCESS)
			continue;
		rc = sgrt_check_cuda(m, cudaEventRecord(e[1], m->stream[s]), "cudaEventRecord",
		                     sgline);
		if (!rc)
			rc = sgrt_check_cuda(m, cudaEventSynchronize(e[1]), "cudaEventSynchronize",
			                     sgline);
		if (!rc)
			rc = sgrt_check_cuda(m, cudaEventElapsedTime(&ms[i], e[0], e[1]),
			                     "cudaEventElapsedTime", sgline);
		if (!rc && ms[i] >= 0 && (ms[best] < 0 || ms[i] < 0.99f * ms[best]))
			best = i;
	}
	for (int i = 0; i < 2; i++)
		if (e[i])
			(void)cudaEventDestroy(e[i]);
	if (!rc && ms[best] >= 0) {
		p->algo = p->cand_algo[best];
		p->ws = p->cand_ws[best];
		p->math = p->cand_math[best];
	}
	if (!rc && c->debug) {
		const long long *g = p->key.g;
		fprintf(stderr, "sgrt: conv %s x [%lld, %lld, %lld, %lld] w [%lld, %lld, %lld, %lld]"
		        " stride %lld pad %lld%s:", p->key.dir == SGRT_CONV_FWD ? "fwd"
		        : p->key.dir == SGRT_CONV_BWD_DATA ? "data" : "filter", g[N], g[C], g[H],
		        g[W], g[K], g[C] / g[GROUPS], g[R], g[S], g[SH], g[PH], g[CL] ? " cl" : "");
		for (int i = 0; i < p->ncand; i++)
			fprintf(stderr, " %s%d %.4f ms (%zu B)", i == best ? "*" : "", p->cand_algo[i],
			        (double)ms[i], p->cand_ws[i]);
		fprintf(stderr, "\n");
	}
	return rc;
}

/* ------------------------------------------------------------------ the graph API */

/* An operand of logical sizes [d0, d1, d2, d3] (N C H W, or the filter's
 * K C R S), laid out as those (NCHW, KCRS) or channels last (NHWC, KRSC). */
static cudnnBackendDescriptor_t
conv_tensor(SgrtCudnnGraph *b, int64_t uid, cudnnDataType_t dt, const long long *dims, int cl)
{
	const int64_t d1 = dims[1], d2 = dims[2], d3 = dims[3];
	const int64_t dim[4] = {dims[0], d1, d2, d3};
	const int64_t st[4] = {d1 * d2 * d3, cl ? 1 : d2 * d3, cl ? d3 * d1 : d3, cl ? d1 : 1};
	return sgrt_cg_tensor(b, uid, dt, dim, st, 0);
}

/* A graph-API plan may take this much workspace where the legacy
 * algorithm takes less (most of resnet18's want 131 bytes where the
 * legacy algorithm wants none, the largest 8 MB). */
enum { GRAPH_WS_SLACK = 16 << 20 };

/* The variant pack's ids: sgrt_conv2d's a, b and out. */
enum { UA = 1, UB, UOUT };

/* Whether engine configuration cfg is deterministic (its engine's
 * numerical notes do not say otherwise); *engine its global index. */
static int
deterministic(SgrtCudnnGraph *b, cudnnBackendDescriptor_t cfg, long long *engine)
{
	cudnnBackendDescriptor_t eng = sgrt_cg_new(b, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
	cudnnBackendNumericalNote_t note[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
	int64_t n = 0, got = 0, idx = -1;
	if (!eng ||
	    b->f->Get(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
	              &eng) != CUDNN_STATUS_SUCCESS ||
	    b->f->Get(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
	              CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, note) != CUDNN_STATUS_SUCCESS)
		return 0;
	(void)b->f->Get(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &idx);
	*engine = idx;
	for (int64_t i = 0; i < n; i++)
		if (note[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
			return 0;
	return 1;
}

/* k's graph-API plan into p (gplan, gws, engine): the first deterministic
 * configuration whose workspace is at most max_ws bytes; 0 when none. */
static int
make_graph_plan(Conv *c, const Key *k, Plan *p, size_t max_ws)
{
	static const cudnnBackendDescriptorType_t optype[3] = {
		CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
		CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
		CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
	};
	/* per direction the operation's x, w, y, convolution, alpha, beta */
	static const cudnnBackendAttributeName_t at[3][6] = {
		{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
		{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
		{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
	};
	/* per direction which of a, b, out x, w and y are */
	static const int64_t uid[3][3] = {{UA, UB, UOUT}, {UOUT, UB, UA}, {UB, UOUT, UA}};
	const long long *g = k->g;
	const int d = k->dir - SGRT_CONV_FWD;
	const long long xs[4] = {g[N], g[C], g[H], g[W]}, ws[4] = {g[K], g[C], g[R], g[S]},
	                ys[4] = {g[N], g[K], g[OH], g[OW]};
	cudnnDataType_t dt = cudnn_dt(k->dtype), comp = CUDNN_DATA_FLOAT;
	cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
	int64_t two = 2, pad[2] = {g[PH], g[PW]}, str[2] = {g[SH], g[SW]}, dil[2] = {g[DH], g[DW]};
	float alpha = 1.0f, beta = 0.0f;
	SgrtCudnnGraph b;
	sgrt_cg_init(&b, &c->api, 0);

	cudnnBackendDescriptor_t t[4] = {
		conv_tensor(&b, uid[d][0], dt, xs, (int)g[CL]),
		conv_tensor(&b, uid[d][1], dt, ws, (int)g[CL]),
		conv_tensor(&b, uid[d][2], dt, ys, (int)g[CL]),
		sgrt_cg_new(&b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR),
	};
	sgrt_cg_set(&b, t[3], CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
	sgrt_cg_set(&b, t[3], CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1,
	            &mode);
	sgrt_cg_set(&b, t[3], CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two);
	sgrt_cg_set(&b, t[3], CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
	sgrt_cg_set(&b, t[3], CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
	sgrt_cg_set(&b, t[3], CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
	sgrt_cg_set(&b, t[3], CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
	sgrt_cg_fin(&b, t[3]);
	cudnnBackendDescriptor_t op = sgrt_cg_new(&b, optype[d]);
	for (int i = 0; i < 4; i++)
		sgrt_cg_set(&b, op, at[d][i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[i]);
	sgrt_cg_set(&b, op, at[d][4], CUDNN_TYPE_FLOAT, 1, &alpha);
	sgrt_cg_set(&b, op, at[d][5], CUDNN_TYPE_FLOAT, 1, &beta);
	sgrt_cg_op(&b, op);
	cudnnBackendDescriptor_t cfg[16];
	int64_t ncfg = sgrt_cg_configs(&b, c->h, CUDNN_HEUR_MODE_A, cfg, 16);
	for (int64_t i = 0; b.ok && i < ncfg && !p->gplan; i++) {
		size_t bytes = 0;
		cudnnBackendDescriptor_t plan = deterministic(&b, cfg[i], &p->engine)
		                                ? sgrt_cudnn_plan(&c->api, c->h, cfg[i], &bytes) : NULL;
		if (plan && bytes <= max_ws) {
			p->gplan = plan;
			p->gws = bytes;
		} else if (plan) {
			(void)c->api.Destroy(plan);
		}
	}
	if (c->debug)
		fprintf(stderr, "sgrt: conv %s x [%lld, %lld, %lld, %lld] w [%lld, %lld, %lld, %lld]"
		        " stride %lld pad %lld%s: graph API %s engine %lld (%lld configurations),"
		        " workspace %zu B\n", d == 0 ? "fwd" : d == 1 ? "data" : "filter", g[N], g[C],
		        g[H], g[W], g[K], g[C], g[R], g[S], g[SH], g[PH], g[CL] ? " cl" : "",
		        p->gplan ? "plan of" : "declined (none deterministic within the workspace"
		        " bound); last tried", p->engine, (long long)ncfg,
		        p->gplan ? p->gws : max_ws);
	sgrt_cg_free(&b);
	return p->gplan != NULL;
}

/* One run of p's graph-API plan, through its kept variant pack. */
static cudnnStatus_t
run_graph(Conv *c, Plan *p, const void *a, const void *b, void *out, void *ws)
{
	int64_t uid[3] = {UA, UB, UOUT};
	void *ptr[3] = {(void *)a, (void *)b, out};
	cudnnStatus_t e = sgrt_cudnn_pack(&c->api, &p->pack, 3, uid, ptr, ws);
	return e != CUDNN_STATUS_SUCCESS ? e : c->api.Execute(c->h, p->gplan, p->pack.d);
}

/* k's plan, made on first use when make is set (NULL: declined, or
 * not made yet). */
static Plan *
find_plan(Conv *c, const Key *k, int make)
{
	Plan *p = sgrt_table_find(&c->plans, k);
	if (p)
		return p->ok ? p : NULL;
	if (!make || !(p = sgrt_table_add(&c->plans, k)))
		return NULL;
	p->ok = make_plan(c, k, p);
	if (p->ok && c->graph && (k->dtype == SGRT_F16 || k->dtype == SGRT_BF16) &&
	    k->g[GROUPS] == 1)
		(void)make_graph_plan(c, k, p, p->ws > GRAPH_WS_SLACK ? p->ws : GRAPH_WS_SLACK);
	return p->ok ? p : NULL;
}

int
sgrt_conv2d(SgrtModel *m, int s, int dir, int dtype, const long long *g, const void *a,
            const void *b, const void *bias, void *out, const char *name, int sgline)
{
	Conv *c = load(m);
	Key k;
	if (!c)
		return SGRT_CONV_UNAVAILABLE;
	if (s < 0 || s >= m->nstreams || dir < SGRT_CONV_FWD || dir > SGRT_CONV_BWD_FILTER)
		return SGRT_CONV_DECLINED;
	memset(&k, 0, sizeof k);
	k.dir = dir;
	k.dtype = dtype;
	for (int i = 0; i < SGRT_CONV_GEOM; i++) {
		if (g[i] < 0 || g[i] > INT_MAX)
			return SGRT_CONV_DECLINED;
		k.g[i] = g[i];
	}
	if (k.g[SGRT_CONV_GEOM - 1] > 1)
		return SGRT_CONV_DECLINED;   /* the layout, cl: 0 or 1 */
	int cap = 0;
	SGRT_TRY(sgrt_capturing(m, s, &cap, sgline));
	Plan *p = find_plan(c, &k, !cap);   /* no plan making during a capture */
	if (!p)
		return SGRT_CONV_DECLINED;
	/* the graph API's plan assumes 16-byte aligned operands */
	const int graph = p->gplan && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)out) & 15) == 0;
	const size_t need = graph ? p->gws : p->ws;
	if (need > c->ws_bytes[s]) {
		if (cap)
			return SGRT_CONV_DECLINED;
		SGRT_TRY(sgrt_grow_stream_buffer(m, s, &c->ws[s], &c->ws_bytes[s], need, sgline));
	}
	float one = 1.0f, zero = 0.0f;
	double done = 1.0, dzero = 0.0;
	const void *alpha = dtype == SGRT_F64 ? (const void *)&done : (const void *)&one;
	const void *beta = dtype == SGRT_F64 ? (const void *)&dzero : (const void *)&zero;
	cudnnStatus_t e = c->f.SetStream(c->h, m->stream[s]);
	if (e == CUDNN_STATUS_SUCCESS && !p->tuned && !cap)
		SGRT_TRY(tune_plan(m, c, s, p, a, b, out, alpha, beta, sgline));
	int h = sgrt_op_begin(m, s, SGRT_OP_KERNEL, name ? name : "conv2d[cudnn]", sgline);
	if (e == CUDNN_STATUS_SUCCESS)
		e = graph ? run_graph(c, p, a, b, out, c->ws[s])
		          : run_algo(c, p, p->algo, p->math, c->ws[s], p->ws, a, b, out, alpha, beta);
	if (e == CUDNN_STATUS_SUCCESS && dir == SGRT_CONV_FWD && bias)
		e = c->f.AddTensor(c->h, alpha, p->bias, bias, alpha, p->y, out);
	if (e != CUDNN_STATUS_SUCCESS)
		return sgrt_fail(m, SGRT_ECUDNN, sgline, "cuDNN convolution (%s%s) failed: %s",
		                 dir == SGRT_CONV_FWD ? "forward" : dir == SGRT_CONV_BWD_DATA
		                 ? "backward data" : "backward filter",
		                 graph ? ", graph API; SGRT_CONV_API=legacy takes the legacy calls"
		                       : "", c->f.ErrorString(e));
	return sgrt_op_end(m, h);
}

#else /* no cuDNN headers at build time: always the direct kernels */

void
sgrt_conv_release(SgrtModel *m)
{
	(void)m;
}

int
sgrt_conv2d(SgrtModel *m, int s, int dir, int dtype, const long long *g, const void *a,
            const void *b, const void *bias, void *out, const char *name, int sgline)
{
	(void)m, (void)s, (void)dir, (void)dtype, (void)g, (void)a, (void)b, (void)bias;
	(void)out, (void)name, (void)sgline;
	return SGRT_CONV_UNAVAILABLE;
}

#endif
