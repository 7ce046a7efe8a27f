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
 * KRSC filter for channels last) and the algorithm cuDNN's
 * heuristics rank first among the deterministic ones (any one when none
 * is), f32 without TF32 (PyTorch's numerics with allow_tf32 off; f16 and
 * bf16 on tensor cores, accumulating in f32).  The workspace is the
 * model's, one buffer per stream, grown when a plan is made (never while
 * the stream is being captured into a CUDA graph: declined then).
 */
#include <limits.h>
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

/* The functions used, looked up in the library sgrt_attn_cudnn.c loaded. */
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

typedef struct {
	Key key;
	int ok;                          /* 0: declined, remembered */
	cudnnTensorDescriptor_t x, y, bias;
	cudnnFilterDescriptor_t w;
	cudnnConvolutionDescriptor_t conv;
	int algo;
	size_t ws;
} Plan;

typedef struct {
	Fns f;
	cudnnHandle_t h;
	Plan *plan;
	int nplan, capplan;
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
}

void
sgrt_conv_release(SgrtModel *m)
{
	Conv *c = m->conv;
	if (!c)
		return;
	for (int i = 0; i < c->nplan; i++)
		plan_free(c, &c->plan[i]);
	for (int i = 0; i < m->nstreams; i++)
		if (c->ws[i]) {
			(void)cudaFree(c->ws[i]);
			sgrt_mem_account(m, -(long long)c->ws_bytes[i]);
		}
	free(c->plan);
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
	if (!sgrt_dlsyms(lib, sym, sizeof sym / sizeof sym[0], &c->f)) {
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
	enum { N, C, H, W, K, R, S, OH, OW, GROUPS, SH, SW, PH, PW, DH, DW, CL };
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
	/* the first deterministic algorithm that works, else the first */
	int n = 0, best = -1;
	enum { MAXALGO = 16 };
#define CHOOSE(perf)                                                                  \
	do {                                                                          \
		for (int i = n - 1; i >= 0; i--)                                      \
			if (perf[i].status == CUDNN_STATUS_SUCCESS &&                 \
			    (perf[i].determinism == CUDNN_DETERMINISTIC || best < 0 ||   \
			     perf[best].determinism != CUDNN_DETERMINISTIC))           \
				best = i;                                             \
		if (best < 0)                                                         \
			return 0;                                                     \
		p->algo = (int)perf[best].algo;                                       \
		p->ws = perf[best].memory;                                            \
		math = perf[best].mathType;                                           \
	} while (0)
	if (k->dir == SGRT_CONV_FWD) {
		cudnnConvolutionFwdAlgoPerf_t perf[MAXALGO];
		if (c->f.FwdAlgo(c->h, p->x, p->w, p->conv, p->y, MAXALGO, &n, perf) !=
		    CUDNN_STATUS_SUCCESS)
			return 0;
		CHOOSE(perf);
	} else if (k->dir == SGRT_CONV_BWD_DATA) {
		cudnnConvolutionBwdDataAlgoPerf_t perf[MAXALGO];
		if (c->f.DataAlgo(c->h, p->w, p->y, p->conv, p->x, MAXALGO, &n, perf) !=
		    CUDNN_STATUS_SUCCESS)
			return 0;
		CHOOSE(perf);
	} else {
		cudnnConvolutionBwdFilterAlgoPerf_t perf[MAXALGO];
		if (c->f.FilterAlgo(c->h, p->x, p->y, p->conv, p->w, MAXALGO, &n, perf) !=
		    CUDNN_STATUS_SUCCESS)
			return 0;
		CHOOSE(perf);
	}
#undef CHOOSE
	/* f32 stays off TF32 even when a heuristic ranks it first */
	if (k->dtype == SGRT_F32 && math != CUDNN_FMA_MATH && math != CUDNN_DEFAULT_MATH)
		return 0;
	return c->f.SetMath(p->conv, math) == CUDNN_STATUS_SUCCESS;
}

/* k's plan, made on first use (NULL: declined); *st an error code when
 * making it failed. */
static Plan *
find_plan(Conv *c, const Key *k)
{
	for (int i = 0; i < c->nplan; i++)
		if (memcmp(&c->plan[i].key, k, sizeof *k) == 0)
			return c->plan[i].ok ? &c->plan[i] : NULL;
	if (c->nplan == c->capplan) {
		int nc = c->capplan ? 2 * c->capplan : 8;
		Plan *np = realloc(c->plan, (size_t)nc * sizeof *np);
		if (!np)
			return NULL;
		c->plan = np;
		c->capplan = nc;
	}
	Plan *p = &c->plan[c->nplan++];
	memset(p, 0, sizeof *p);
	p->key = *k;
	p->ok = make_plan(c, k, p);
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
	int known = 0;
	for (int i = 0; i < c->nplan && !known; i++)
		known = memcmp(&c->plan[i].key, &k, sizeof k) == 0;
	if (cap && !known)
		return SGRT_CONV_DECLINED;   /* no plan making during a capture */
	Plan *p = find_plan(c, &k);
	if (!p)
		return SGRT_CONV_DECLINED;
	if (p->ws > c->ws_bytes[s]) {
		if (cap)
			return SGRT_CONV_DECLINED;
		SGRT_TRY(sgrt_grow_stream_buffer(m, s, &c->ws[s], &c->ws_bytes[s], p->ws, sgline));
	}
	float one = 1.0f, zero = 0.0f;
	double done = 1.0, dzero = 0.0;
	const void *alpha = dtype == SGRT_F64 ? (const void *)&done : (const void *)&one;
	const void *beta = dtype == SGRT_F64 ? (const void *)&dzero : (const void *)&zero;
	int h = sgrt_op_begin(m, s, SGRT_OP_KERNEL, name ? name : "conv2d[cudnn]", sgline);
	cudnnStatus_t e = c->f.SetStream(c->h, m->stream[s]);
	if (e == CUDNN_STATUS_SUCCESS && dir == SGRT_CONV_FWD) {
		e = c->f.Fwd(c->h, alpha, p->x, a, p->w, b, p->conv, (cudnnConvolutionFwdAlgo_t)p->algo,
		             c->ws[s], p->ws, beta, p->y, out);
		if (e == CUDNN_STATUS_SUCCESS && bias)
			e = c->f.AddTensor(c->h, alpha, p->bias, bias, alpha, p->y, out);
	} else if (e == CUDNN_STATUS_SUCCESS && dir == SGRT_CONV_BWD_DATA) {
		e = c->f.Data(c->h, alpha, p->w, b, p->y, a, p->conv,
		              (cudnnConvolutionBwdDataAlgo_t)p->algo, c->ws[s], p->ws, beta, p->x, out);
	} else if (e == CUDNN_STATUS_SUCCESS) {
		e = c->f.Filter(c->h, alpha, p->x, b, p->y, a, p->conv,
		                (cudnnConvolutionBwdFilterAlgo_t)p->algo, c->ws[s], p->ws, beta, p->w,
		                out);
	}
	if (e != CUDNN_STATUS_SUCCESS)
		return sgrt_fail(m, SGRT_ECUDNN, sgline, "cuDNN convolution (%s) failed: %s",
		                 dir == SGRT_CONV_FWD ? "forward" : dir == SGRT_CONV_BWD_DATA
		                 ? "backward data" : "backward filter", c->f.ErrorString(e));
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
