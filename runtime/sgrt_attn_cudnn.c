/*
 * sgrt_attn_cudnn.c - scaled dot-product attention through cuDNN's fused
 * flash attention (the backend descriptor API, from C).
 *
 * libcudnn.so.9 is not linked: it is dlopen'ed on a model's first
 * attention (SGRT_CUDNN_LIB names the file; else the loader's search:
 * LD_LIBRARY_PATH, the cache).  When it is missing, or cuDNN declines a
 * shape, the functions say so (SGRT_SDPA_UNAVAILABLE, SGRT_SDPA_DECLINED)
 * and the caller runs its own kernels; nothing is recorded as an error.
 *
 * The operation graphs are the ones cudnn-frontend's composite sdpa and
 * sdpa_backward nodes build, which cuDNN's runtime-fusion engines match:
 *   forward:  S = Q K^T (f32), S *= scale, causal: S = row >= col ? S :
 *             -inf, softmax with stats (max, sub, exp, sum, log, add:
 *             stats = max + log sum exp, natural log, f32 [b, h, l, 1]),
 *             O = P V;
 *   backward: sum = rowsum(dO * O); S again from Q, K, stats; P =
 *             exp(S - stats); dV = P^T dO; dS = P (dO V^T - sum) scale;
 *             dK = dS^T Q; dQ = dS K (accumulated in f32, then copied;
 *             with SGRT_SDPA_DQ=direct written by the product itself).
 * The stats are the log-sum-exp that sgk_attention.cuh's kernels write
 * and read ([b * h, l], natural log), so a forward by one and a backward
 * by the other agree.  K^T and V^T are K and V with their last two dims
 * and strides swapped; the backward's f32 row sums and dQ accumulator
 * sit at the start of its workspace, cuDNN's own workspace after them.
 *
 * Each distinct (direction, dtype, causal, sizes, strides) gets a plan
 * (cuDNN's heuristic's first configuration unless the environment's knobs,
 * Opts, say otherwise), made on first use and kept by the model; the workspace is the model's,
 * one buffer per stream, grown when a plan needs more (at the plan's
 * making, never per call).  A plan is not made while the stream is being
 * captured into a CUDA graph (SGRT_SDPA_DECLINED then).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sgrt_impl.h"

#if SGRT_HAVE_CUDNN_H
#include "sgrt_cudnn_graph.h"

/* The cuDNN functions used besides the backend API's (SgrtCudnnApi),
 * looked up in the dlopen'ed library. */
typedef struct {
	size_t (*GetVersion)(void);
	cudnnStatus_t (*Create)(cudnnHandle_t *);
	cudnnStatus_t (*Destroy)(cudnnHandle_t);
	cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
	const char *(*GetErrorString)(cudnnStatus_t);
} Fns;

/* What makes two attentions the same plan (memcmp; zeroed first). */
typedef struct {
	int bwd, dtype, causal;
	int direct;            /* backward: dQ written by the product itself */
	int64_t b, h, h_kv, l, s, d, dv;
	int64_t st[8][4];      /* q k v o do dq dk dv: [b, h, rows, dim] */
} Key;

/* The by-value scalars a variant pack points to: apart from the plan,
 * whose address moves when the plans' table grows. */
typedef struct {
	float scale, neginf, one;
} Scalars;

typedef struct {
	Key key;
	cudnnBackendDescriptor_t plan;
	size_t pre;            /* backward: row sums and dQ accumulator bytes */
	size_t ws;             /* cuDNN's workspace */
	SgrtCudnnPack pack;    /* the last variant pack */
	Scalars *sc;           /* the scalars it points to */
} Plan;

/* What the environment asks of plans (docs/runtime.md), read at load:
 * SGRT_CUDNN_DEBUG (1: declines and each plan made; 2: also the
 * engines' knobs), SGRT_SDPA_DQ=direct (the backward's dQ without the f32
 * accumulator), SGRT_SDPA_HEUR=a|b|fallback, and per direction
 * SGRT_SDPA_{FWD,BWD}_CFG=n (the heuristic's n-th configuration that
 * makes a plan) and SGRT_SDPA_{FWD,BWD}_KNOBS=T=V,... (knob choices set
 * on it: cuDNN's knob type numbers). */
enum { MAXKNOB = 8 };
typedef struct {
	int debug, direct;
	cudnnBackendHeurMode_t heur;
	int pick[2];
	int nknob[2];
	int64_t ktype[2][MAXKNOB], kval[2][MAXKNOB];
} Opts;

typedef struct {
	void *lib;
	Fns f;
	SgrtCudnnApi api;
	Opts o;
	cudnnHandle_t h;
	SgrtTable plans;       /* Plan by Key */
	void **ws;             /* [nstreams] */
	size_t *ws_bytes;
} Cudnn;

/* Tensor ids: the variant pack's.  Virtual tensors count up from V0. */
enum {
	U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV,
	U_SCALE, U_NEGINF, U_ONE, U_SUM, U_DQACC, V0 = 100,
};

/* ------------------------------------------------------------------ loading */

int
sgrt_dlsyms(void *lib, const SgrtSym *sym, size_t n, void *table)
{
	for (size_t i = 0; i < n; i++) {
		void *p = dlsym(lib, sym[i].name);
		if (!p)
			return 0;
		memcpy((char *)table + sym[i].off, &p, sizeof p);
	}
	return 1;
}

static void
unload(Cudnn *c)
{
	if (c->h)
		(void)c->f.Destroy(c->h);
	for (int i = 0; i < c->plans.n; i++) {
		Plan *p = sgrt_table_at(&c->plans, i);
		sgrt_cudnn_pack_free(&c->api, &p->pack);
		if (p->plan)
			(void)c->api.Destroy(p->plan);
		free(p->sc);
	}
	if (c->lib)
		dlclose(c->lib);
	sgrt_table_free(&c->plans);
	free(c->ws);
	free(c->ws_bytes);
	free(c);
}

static int
env_int(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : dflt;
}

static void
read_opts(Opts *o)
{
	const char *v;
	memset(o, 0, sizeof *o);
	/* on for any value not starting with 0 (as before it had levels); 2
	 * and up: the knobs too */
	v = getenv("SGRT_CUDNN_DEBUG");
	o->debug = v && *v && *v != '0' ? (atoi(v) > 1 ? atoi(v) : 1) : 0;
	o->direct = (v = getenv("SGRT_SDPA_DQ")) && !strcmp(v, "direct");
	o->heur = CUDNN_HEUR_MODE_A;
	if ((v = getenv("SGRT_SDPA_HEUR")) && !strcmp(v, "b"))
		o->heur = CUDNN_HEUR_MODE_B;
	else if (v && !strcmp(v, "fallback"))
		o->heur = CUDNN_HEUR_MODE_FALLBACK;
	for (int bwd = 0; bwd < 2; bwd++) {
		o->pick[bwd] = env_int(bwd ? "SGRT_SDPA_BWD_CFG" : "SGRT_SDPA_FWD_CFG", 0);
		v = getenv(bwd ? "SGRT_SDPA_BWD_KNOBS" : "SGRT_SDPA_FWD_KNOBS");
		for (int n = 0; v && *v && n < MAXKNOB; n++) {
			char *e;
			long t = strtol(v, &e, 10), x;
			if (*e != '=')
				break;
			x = strtol(e + 1, &e, 10);
			o->ktype[bwd][n] = t;
			o->kval[bwd][n] = x;
			o->nknob[bwd] = n + 1;
			v = *e == ',' ? e + 1 : NULL;
		}
	}
}

/* The model's cuDNN state, loaded on first use; NULL when unavailable
 * (m->cudnn_state says which: 1 loaded, -1 unavailable). */
static Cudnn *
load(SgrtModel *m)
{
	static const SgrtSym sym[] = {
		{"cudnnGetVersion", offsetof(Fns, GetVersion)},
		{"cudnnCreate", offsetof(Fns, Create)},
		{"cudnnDestroy", offsetof(Fns, Destroy)},
		{"cudnnSetStream", offsetof(Fns, SetStream)},
		{"cudnnGetErrorString", offsetof(Fns, GetErrorString)},
	};
	if (m->cudnn_state)
		return m->cudnn_state > 0 ? (Cudnn *)m->cudnn : NULL;
	m->cudnn_state = -1;
	const char *path = getenv("SGRT_CUDNN_LIB");
	void *lib = dlopen(path && *path ? path : "libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return NULL;
	Cudnn *c = calloc(1, sizeof *c);
	if (!c) {
		dlclose(lib);
		return NULL;
	}
	c->lib = lib;
	sgrt_table_init(&c->plans, sizeof(Plan), sizeof(Key));
	if (!sgrt_dlsyms(lib, sym, sizeof sym / sizeof sym[0], &c->f) ||
	    !sgrt_cudnn_api(lib, &c->api)) {
		unload(c);
		return NULL;
	}
	c->ws = calloc((size_t)m->nstreams, sizeof *c->ws);
	c->ws_bytes = calloc((size_t)m->nstreams, sizeof *c->ws_bytes);
	/* The graphs as built here (dQ accumulator not zeroed) need 9.6. */
	if (!c->ws || !c->ws_bytes || c->f.GetVersion() < 90600 ||
	    c->f.Create(&c->h) != CUDNN_STATUS_SUCCESS) {
		c->h = NULL;
		unload(c);
		return NULL;
	}
	read_opts(&c->o);
	m->cudnn = c;
	m->cudnn_state = 1;
	return c;
}

void
sgrt_cudnn_release(SgrtModel *m)
{
	Cudnn *c = m->cudnn;

	if (!c)
		return;
	for (int i = 0; i < m->nstreams; i++)
		if (c->ws[i]) {
			(void)cudaFree(c->ws[i]);
			sgrt_mem_account(m, -(long long)c->ws_bytes[i]);
		}
	unload(c);
	m->cudnn = NULL;
	m->cudnn_state = 0;
}

/* ------------------------------------------------------------------ graph building */

/* A virtual tensor of dims dim (packed) and type dt. */
static cudnnBackendDescriptor_t
virt(SgrtCudnnGraph *b, cudnnDataType_t dt, const int64_t *dim)
{
	return sgrt_cg_tensor(b, 0, dt, dim, NULL, 0);
}

/* y = mode(x[, b2[, t]]), computed in cdt. */
static void
pointwise(SgrtCudnnGraph *b, cudnnPointwiseMode_t mode, cudnnDataType_t cdt, int64_t axis,
          cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b2,
          cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t pw = sgrt_cg_new(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
	sgrt_cg_set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
	sgrt_cg_set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &cdt);
	if (mode == CUDNN_POINTWISE_GEN_INDEX)
		sgrt_cg_set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
	sgrt_cg_fin(b, pw);
	cudnnBackendDescriptor_t op = sgrt_cg_new(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
	float one = 1.0f;
	sgrt_cg_setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
	sgrt_cg_setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
	sgrt_cg_setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
	if (b2)
		sgrt_cg_setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b2);
	if (t)
		sgrt_cg_setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
	sgrt_cg_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
	sgrt_cg_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
	sgrt_cg_op(b, op);
}

/* A new virtual f32 tensor: mode(x[, b2]). */
static cudnnBackendDescriptor_t
pw_new(SgrtCudnnGraph *b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
       cudnnBackendDescriptor_t b2, const int64_t *dim)
{
	cudnnBackendDescriptor_t y = virt(b, CUDNN_DATA_FLOAT, dim);
	pointwise(b, mode, CUDNN_DATA_FLOAT, 0, x, b2, NULL, y);
	return y;
}

/* An operation of type t: descriptor d at attribute da, tensors x[i] at
 * attributes at[i], i < n. */
static void
op_of(SgrtCudnnGraph *b, cudnnBackendDescriptorType_t t, cudnnBackendAttributeName_t da,
      cudnnBackendDescriptor_t d, int n, const cudnnBackendAttributeName_t *at,
      const cudnnBackendDescriptor_t *x)
{
	cudnnBackendDescriptor_t op = sgrt_cg_new(b, t);
	sgrt_cg_setd(b, op, da, d);
	for (int i = 0; i < n; i++)
		sgrt_cg_setd(b, op, at[i], x[i]);
	sgrt_cg_op(b, op);
}

/* A finalized descriptor of type t computing in f32 (attribute ca), with
 * attribute xa of type xt set to *xv too when xv is not NULL. */
static cudnnBackendDescriptor_t
f32_desc(SgrtCudnnGraph *b, cudnnBackendDescriptorType_t t, cudnnBackendAttributeName_t ca,
         cudnnBackendAttributeName_t xa, cudnnBackendAttributeType_t xt, const void *xv)
{
	cudnnBackendDescriptor_t d = sgrt_cg_new(b, t);
	cudnnDataType_t f = CUDNN_DATA_FLOAT;
	sgrt_cg_set(b, d, ca, CUDNN_TYPE_DATA_TYPE, 1, &f);
	if (xv)
		sgrt_cg_set(b, d, xa, xt, 1, xv);
	sgrt_cg_fin(b, d);
	return d;
}

static void
matmul(SgrtCudnnGraph *b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bb,
       cudnnBackendDescriptor_t c)
{
	cudnnBackendDescriptor_t mm = f32_desc(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR,
	                                       CUDNN_ATTR_MATMUL_COMP_TYPE, 0, 0, NULL);
	op_of(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, 3,
	      (const cudnnBackendAttributeName_t[3]){CUDNN_ATTR_OPERATION_MATMUL_ADESC,
	                                             CUDNN_ATTR_OPERATION_MATMUL_BDESC,
	                                             CUDNN_ATTR_OPERATION_MATMUL_CDESC},
	      (const cudnnBackendDescriptor_t[3]){a, bb, c});
}

static void
reduction(SgrtCudnnGraph *b, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
          cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t r = f32_desc(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR,
	                                      CUDNN_ATTR_REDUCTION_COMP_TYPE,
	                                      CUDNN_ATTR_REDUCTION_OPERATOR,
	                                      CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode);
	op_of(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
	      r, 2,
	      (const cudnnBackendAttributeName_t[2]){CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
	                                             CUDNN_ATTR_OPERATION_REDUCTION_YDESC},
	      (const cudnnBackendDescriptor_t[2]){x, y});
}

static void
reshape(SgrtCudnnGraph *b, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t op = sgrt_cg_new(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
	sgrt_cg_setd(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
	sgrt_cg_setd(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
	sgrt_cg_op(b, op);
}

/* dim and strides of tensor i of k as [b, h, rows, cols]; t: the last
 * two swapped (K^T, V^T). */
static void
shape(const Key *k, int i, int t, int64_t *dim, int64_t *st)
{
	int kv = i == 1 || i == 2 || i == 6 || i == 7;
	int ev = i == 2 || i == 3 || i == 4 || i == 7;
	int64_t r = kv ? k->s : k->l, c = ev ? k->dv : k->d;
	int64_t d4[4] = {k->b, kv ? k->h_kv : k->h, t ? c : r, t ? r : c};
	memcpy(dim, d4, sizeof d4);
	memcpy(st, k->st[i], 4 * sizeof *st);
	if (t) {
		st[2] = k->st[i][3];
		st[3] = k->st[i][2];
	}
}

/* The masked, scaled scores: S = Q K^T * scale (- stats), causal mask. */
static cudnnBackendDescriptor_t
scores(SgrtCudnnGraph *b, const Key *k, cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t kt,
       cudnnBackendDescriptor_t scale, cudnnBackendDescriptor_t stats,
       cudnnBackendDescriptor_t neginf)
{
	int64_t ls[4] = {k->b, k->h, k->l, k->s};
	cudnnBackendDescriptor_t s = virt(b, CUDNN_DATA_FLOAT, ls);
	matmul(b, q, kt, s);
	s = pw_new(b, CUDNN_POINTWISE_MUL, s, scale, ls);
	if (stats)
		s = pw_new(b, CUDNN_POINTWISE_SUB, s, stats, ls);
	if (!k->causal)
		return s;
	cudnnBackendDescriptor_t row = virt(b, CUDNN_DATA_INT32, ls);
	cudnnBackendDescriptor_t col = virt(b, CUDNN_DATA_INT32, ls);
	cudnnBackendDescriptor_t keep = virt(b, CUDNN_DATA_BOOLEAN, ls);
	cudnnBackendDescriptor_t y = virt(b, CUDNN_DATA_FLOAT, ls);
	pointwise(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, s, NULL, NULL, row);
	pointwise(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, s, NULL, NULL, col);
	pointwise(b, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, 0, row, col, NULL, keep);
	pointwise(b, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, 0, s, neginf, keep, y);
	return y;
}

/* dK or dV (x, of `cols` columns) = p @ y: when every query head has its
 * own key/value head, straight into x; with grouped heads (h = g h_kv)
 * into a virtual [b, h, s, cols] of every query head's share, then summed
 * into x's h_kv heads by a reduction (cuDNN frontend's GQA form). */
static void
kv_grad(SgrtCudnnGraph *b, const Key *k, cudnnBackendDescriptor_t p, cudnnBackendDescriptor_t y,
        cudnnBackendDescriptor_t x, int64_t cols)
{
	if (k->h_kv == k->h) {
		matmul(b, p, y, x);
		return;
	}
	int64_t full[4] = {k->b, k->h, k->s, cols};
	cudnnBackendDescriptor_t per =
	        virt(b, k->dtype == SGRT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF, full);
	matmul(b, p, y, per);
	reduction(b, CUDNN_REDUCE_TENSOR_ADD, per, x);
}

/* The operations of k's graph into b; *pre: the backward's bytes before
 * cuDNN's workspace. */
static void
build_graph(SgrtCudnnGraph *b, const Key *k, size_t *pre)
{
	cudnnDataType_t io = k->dtype == SGRT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
	cudnnDataType_t f = CUDNN_DATA_FLOAT;
	int64_t dim[4], st[4], one4[4] = {1, 1, 1, 1};
	int64_t stat[4] = {k->b, k->h, k->l, 1};
	cudnnBackendDescriptor_t x[8];
	static const int uid[8] = {U_Q, U_K, U_V, U_O, U_DO, U_DQ, U_DK, U_DV};
	int n = k->bwd ? 8 : 4;

	for (int i = 0; i < n; i++) {
		shape(k, i, i == 1 || (i == 2 && k->bwd), dim, st);
		x[i] = sgrt_cg_tensor(b, uid[i], io, dim, st, 0);
	}
	cudnnBackendDescriptor_t scale = sgrt_cg_tensor(b, U_SCALE, f, one4, one4, 1);
	cudnnBackendDescriptor_t neginf = sgrt_cg_tensor(b, U_NEGINF, f, one4, one4, 1);
	cudnnBackendDescriptor_t stats = sgrt_cg_tensor(b, U_STATS, f, stat, NULL, 0);
	int64_t ls[4] = {k->b, k->h, k->l, k->s}, sl[4] = {k->b, k->h, k->s, k->l};
	int64_t slt[4] = {k->h * k->l * k->s, k->l * k->s, 1, k->s};
	*pre = 0;
	if (!k->bwd) {
		cudnnBackendDescriptor_t s = scores(b, k, x[0], x[1], scale, NULL, neginf);
		cudnnBackendDescriptor_t mx = virt(b, f, stat), sum = virt(b, f, stat);
		reduction(b, CUDNN_REDUCE_TENSOR_MAX, s, mx);
		cudnnBackendDescriptor_t e = pw_new(b, CUDNN_POINTWISE_SUB, s, mx, ls);
		e = pw_new(b, CUDNN_POINTWISE_EXP, e, NULL, ls);
		reduction(b, CUDNN_REDUCE_TENSOR_ADD, e, sum);
		cudnnBackendDescriptor_t lg = pw_new(b, CUDNN_POINTWISE_LOG, sum, NULL, stat);
		pointwise(b, CUDNN_POINTWISE_ADD, f, 0, mx, lg, NULL, stats);
		cudnnBackendDescriptor_t p = virt(b, io, ls);
		pointwise(b, CUDNN_POINTWISE_DIV, f, 0, e, sum, NULL, p);
		matmul(b, p, x[2], x[3]);
		return;
	}
	/* sum = rowsum(dO * O), kept (f32, at the workspace's start). */
	int64_t lo[4] = {k->b, k->h, k->l, k->dv};
	cudnnBackendDescriptor_t t = pw_new(b, CUDNN_POINTWISE_MUL, x[4], x[3], lo);
	cudnnBackendDescriptor_t r = virt(b, f, stat);
	reduction(b, CUDNN_REDUCE_TENSOR_ADD, t, r);
	cudnnBackendDescriptor_t onet = sgrt_cg_tensor(b, U_ONE, f, one4, one4, 1);
	cudnnBackendDescriptor_t sum = sgrt_cg_tensor(b, U_SUM, f, stat, NULL, 0);
	pointwise(b, CUDNN_POINTWISE_MUL, f, 0, r, onet, NULL, sum);
	/* P = exp(S - stats); dV = P^T dO. */
	cudnnBackendDescriptor_t s = scores(b, k, x[0], x[1], scale, stats, neginf);
	cudnnBackendDescriptor_t p = pw_new(b, CUDNN_POINTWISE_EXP, s, NULL, ls);
	cudnnBackendDescriptor_t pt = sgrt_cg_tensor(b, 0, io, sl, slt, 0);
	reshape(b, p, pt);
	kv_grad(b, k, pt, x[4], x[7], k->dv);
	/* dS = P (dO V^T - sum) scale; dK = dS^T Q. */
	cudnnBackendDescriptor_t dp = virt(b, f, ls);
	matmul(b, x[4], x[2], dp);
	dp = pw_new(b, CUDNN_POINTWISE_SUB, dp, sum, ls);
	dp = pw_new(b, CUDNN_POINTWISE_MUL, dp, p, ls);
	cudnnBackendDescriptor_t ds = pw_new(b, CUDNN_POINTWISE_MUL, dp, scale, ls);
	cudnnBackendDescriptor_t dst = sgrt_cg_tensor(b, 0, io, sl, slt, 0);
	reshape(b, ds, dst);
	kv_grad(b, k, dst, x[0], x[6], k->d);
	/* dQ = dS K, accumulated in f32 (after the row sums), then copied. */
	shape(k, 1, 0, dim, st);
	cudnnBackendDescriptor_t kk = sgrt_cg_tensor(b, 0, io, dim, st, 0);
	reshape(b, x[1], kk);
	*pre = (size_t)(k->b * k->h * k->l * 4 + 255) / 256 * 256;
	if (k->direct) {
		matmul(b, ds, kk, x[5]);
		return;
	}
	int64_t ld[4] = {k->b, k->h, k->l, k->d};
	cudnnBackendDescriptor_t acc = sgrt_cg_tensor(b, U_DQACC, f, ld, NULL, 0);
	matmul(b, ds, kk, acc);
	pointwise(b, CUDNN_POINTWISE_IDENTITY, f, 0, acc, NULL, NULL, x[5]);
	*pre += (size_t)(k->b * k->h * k->l * k->d * 4 + 255) / 256 * 256;
}

/* ------------------------------------------------------------------ plans */

enum { MAXCHOICE = 32 };

/* Descriptors made while choosing a plan, destroyed after it. */
typedef struct {
	Cudnn *c;
	cudnnBackendDescriptor_t d[4 * MAXCHOICE + 8];
	int n;
} Scratch;

static cudnnBackendDescriptor_t
scratch(Scratch *sc, cudnnBackendDescriptorType_t t)
{
	cudnnBackendDescriptor_t d = NULL;
	if (sc->n == (int)(sizeof sc->d / sizeof sc->d[0]) ||
	    sc->c->api.Create(t, &d) != CUDNN_STATUS_SUCCESS)
		return NULL;
	return sc->d[sc->n++] = d;
}

/* Destroys the descriptors made since sc->n was base. */
static void
scratch_pop(Scratch *sc, int base)
{
	while (sc->n > base)
		(void)sc->c->api.Destroy(sc->d[--sc->n]);
}

/* Configuration cfg's engine (into *eng, a scratch descriptor), its global
 * index (*idx) and knob choices (types t[], values v[]): their number, or
 * -1 when cuDNN does not say. */
static int
cfg_knobs(Scratch *sc, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t *eng,
          int64_t *idx, int64_t *t, int64_t *v)
{
	const SgrtCudnnApi *f = &sc->c->api;
	cudnnBackendDescriptor_t kc[MAXCHOICE];
	int64_t n = 0, got = 0;
	*eng = scratch(sc, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
	if (!*eng ||
	    f->Get(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, eng) !=
	            CUDNN_STATUS_SUCCESS ||
	    f->Get(*eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, idx) !=
	            CUDNN_STATUS_SUCCESS)
		return -1;
	const int base = sc->n;
	for (int i = 0; i < MAXCHOICE; i++)
		if (!(kc[i] = scratch(sc, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR)))
			return -1;
	if (f->Get(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, MAXCHOICE,
	           &n, kc) != CUDNN_STATUS_SUCCESS)
		return -1;
	for (int64_t i = 0; i < n; i++) {
		cudnnBackendKnobType_t kt = CUDNN_KNOB_TYPE_COUNTS;
		if (f->Get(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got,
		           &kt) != CUDNN_STATUS_SUCCESS ||
		    f->Get(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got,
		           &v[i]) != CUDNN_STATUS_SUCCESS)
			return -1;
		t[i] = kt;
	}
	scratch_pop(sc, base); /* the choices' descriptors are not needed any more */
	return (int)n;
}

/* A new configuration of engine eng with knob choices t[i] = v[i]: the
 * engine's own (at most MAXCHOICE) and the environment's (MAXKNOB). */
static cudnnBackendDescriptor_t
cfg_with(Scratch *sc, cudnnBackendDescriptor_t eng, int n, const int64_t *t, const int64_t *v)
{
	const SgrtCudnnApi *f = &sc->c->api;
	cudnnBackendDescriptor_t kc[MAXCHOICE + MAXKNOB];
	cudnnBackendDescriptor_t cfg = scratch(sc, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	if (!cfg || f->Set(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
	                   &eng) != CUDNN_STATUS_SUCCESS)
		return NULL;
	for (int i = 0; i < n; i++) {
		cudnnBackendKnobType_t kt = (cudnnBackendKnobType_t)t[i];
		if (!(kc[i] = scratch(sc, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR)) ||
		    f->Set(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &kt) !=
		            CUDNN_STATUS_SUCCESS ||
		    f->Set(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &v[i]) !=
		            CUDNN_STATUS_SUCCESS ||
		    f->Finalize(kc[i]) != CUDNN_STATUS_SUCCESS)
			return NULL;
	}
	if ((n && f->Set(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, n,
	                 kc) != CUDNN_STATUS_SUCCESS) ||
	    f->Finalize(cfg) != CUDNN_STATUS_SUCCESS)
		return NULL;
	return cfg;
}

/* SGRT_CUDNN_DEBUG=2: the knobs engine eng accepts, on stderr. */
static void
print_knob_info(Scratch *sc, cudnnBackendDescriptor_t eng)
{
	const SgrtCudnnApi *f = &sc->c->api;
	cudnnBackendDescriptor_t ki[MAXCHOICE];
	int64_t n = 0, got;
	int base = sc->n;
	for (int i = 0; i < MAXCHOICE; i++)
		if (!(ki[i] = scratch(sc, CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR)))
			return;
	if (f->Get(eng, CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR, MAXCHOICE, &n,
	           ki) == CUDNN_STATUS_SUCCESS)
		for (int64_t i = 0; i < n; i++) {
			cudnnBackendKnobType_t kt = CUDNN_KNOB_TYPE_COUNTS;
			int64_t lo = 0, hi = 0, step = 0;
			(void)f->Get(ki[i], CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got, &kt);
			(void)f->Get(ki[i], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &got,
			             &lo);
			(void)f->Get(ki[i], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &got,
			             &hi);
			(void)f->Get(ki[i], CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &got, &step);
			fprintf(stderr, "sgrt_sdpa:   knob %d: %lld..%lld step %lld\n", (int)kt,
			        (long long)lo, (long long)hi, (long long)step);
		}
	scratch_pop(sc, base);
}

/* The operation graph of k, then the heuristic's first engine
 * configuration that makes a plan (the environment's knobs: Opts).  0
 * when cuDNN declines. */
static int
make_plan(Cudnn *c, const Key *k, Plan *out)
{
	SgrtCudnnGraph b;
	Scratch sc = {.c = c};
	cudnnBackendDescriptor_t cfg[16] = {0};
	int got = 0, made = 0, dir = k->bwd;
	const Opts *o = &c->o;

	memset(out, 0, sizeof *out);
	out->key = *k;
	sgrt_cg_init(&b, &c->api, V0);
	build_graph(&b, k, &out->pre);
	int64_t ncfg = sgrt_cg_configs(&b, c->h, o->heur, cfg, 16);
	for (int64_t i = 0; b.ok && i < ncfg && !got; i++) {
		cudnnBackendDescriptor_t eng = NULL, use = cfg[i];
		int64_t idx = -1, t[MAXCHOICE + MAXKNOB], v[MAXCHOICE + MAXKNOB];
		int nk = o->debug || o->nknob[dir] ? cfg_knobs(&sc, cfg[i], &eng, &idx, t, v) : 0;
		if (o->nknob[dir] && nk < 0) {
			use = NULL;
		} else if (o->nknob[dir]) {
			for (int j = 0; j < o->nknob[dir]; j++) {
				int at = 0;
				while (at < nk && t[at] != o->ktype[dir][j])
					at++;
				t[at] = o->ktype[dir][j];
				v[at] = o->kval[dir][j];
				nk += at == nk;
			}
			use = cfg_with(&sc, eng, nk, t, v);
		}
		int ok = use && (out->plan = sgrt_cudnn_plan(&c->api, c->h, use, &out->ws)) != NULL;
		got = ok && made++ == o->pick[dir];
		if (ok && !got) {
			(void)c->api.Destroy(out->plan);
			out->plan = NULL;
		}
		if (o->debug) {
			fprintf(stderr, "sgrt_sdpa: %s d=%lld config %lld of %lld: engine %lld, knobs",
			        dir ? "backward" : "forward", (long long)k->d, (long long)i,
			        (long long)ncfg, (long long)idx);
			for (int j = 0; j < nk; j++)
				fprintf(stderr, " %lld=%lld", (long long)t[j], (long long)v[j]);
			fprintf(stderr, ": %s", !use ? "knobs rejected" : !ok ? "no plan" : got ? "chosen" : "plan");
			if (ok)
				fprintf(stderr, ", workspace %zu + %zu bytes", out->pre, (size_t)out->ws);
			fprintf(stderr, "\n");
			if (o->debug >= 2 && eng && (i == 0 || got))
				print_knob_info(&sc, eng);
		}
		scratch_pop(&sc, 0);
	}
	/* SGRT_CUDNN_DEBUG=1: why a graph was declined, on stderr. */
	if (!got && o->debug)
		fprintf(stderr, "sgrt_sdpa: %s %s b=%lld h=%lld h_kv=%lld l=%lld s=%lld d=%lld declined: %s "
		        "(status %d: %s, at %s %ld; %lld engine configs, %d ops)\n",
		        dir ? "backward" : "forward", k->dtype == SGRT_BF16 ? "bf16" : "f16",
		        (long long)k->b, (long long)k->h, (long long)k->h_kv, (long long)k->l, (long long)k->s,
		        (long long)k->d, b.ok ? "no engine config made a plan" : "graph rejected",
		        b.fail_status, c->f.GetErrorString((cudnnStatus_t)b.fail_status),
		        b.fail_what < 0 ? "creating descriptor type" : b.fail_what ? "attribute"
		                                                                    : "finalize",
		        b.fail_what < 0 ? -b.fail_what : b.fail_what, (long long)ncfg, b.nop);
	sgrt_cg_free(&b);
	return got;
}

/* ------------------------------------------------------------------ the calls */

/* The plan key of a; 0 when the arguments are not an attention cuDNN
 * runs here (dtype, head counts). */
static int
make_key(const Cudnn *c, const SgrtSdpa *a, int bwd, Key *k)
{
	const int64_t *st[8] = {a->q_st, a->k_st, a->v_st, a->o_st,
	                        a->do_st, a->dq_st, a->dk_st, a->dv_st};
	memset(k, 0, sizeof *k);
	if ((a->dtype != SGRT_BF16 && a->dtype != SGRT_F16) || a->h_kv < 1 ||
	    a->h % a->h_kv != 0 || a->b < 1 || a->h < 1 || a->l < 1 || a->s < 1 || a->e < 1 ||
	    a->ev < 1)
		return 0;
	k->bwd = bwd;
	k->direct = bwd && c->o.direct;
	k->dtype = a->dtype;
	k->causal = a->causal != 0;
	k->b = a->b, k->h = a->h, k->h_kv = a->h_kv, k->l = a->l, k->s = a->s, k->d = a->e;
	k->dv = a->ev;
	for (int i = 0; i < (bwd ? 8 : 4); i++) {
		int kv = i == 1 || i == 2 || i == 6 || i == 7;
		int64_t rows = kv ? a->s : a->l, heads = kv ? a->h_kv : a->h;
		memcpy(k->st[i], st[i], sizeof k->st[i]);
		if (k->st[i][3] != 1)
			return 0;
		/* A size-1 dim's stride does not matter: make it packed. */
		if (heads == 1)
			k->st[i][1] = rows * k->st[i][2];
		if (a->b == 1)
			k->st[i][0] = heads * k->st[i][1];
		for (int d = 0; d < 3; d++)
			if (k->st[i][d] <= 0)
				return 0;
	}
	return 1;
}

/* The plan for key k, made now when new; NULL when declined. */
static Plan *
find_plan(SgrtModel *m, Cudnn *c, const Key *k, int s, int *status, int sgline)
{
	Plan *p = sgrt_table_find(&c->plans, k);
	if (p)
		return p->plan ? p : NULL;
	int cap = 0;
	if (sgrt_capturing(m, s, &cap, sgline) != SGRT_OK || cap)
		return NULL; /* nothing is made during a capture */
	if (!(p = sgrt_table_add(&c->plans, k))) {
		*status = sgrt_fail(m, SGRT_ENOMEM, sgline, "out of host memory");
		return NULL;
	}
	if (!make_plan(c, k, p))
		p->plan = NULL; /* remembered as declined */
	return p->plan ? p : NULL;
}

int
sgrt_sdpa_workspace_size(SgrtModel *m, const SgrtSdpa *a, int bwd, size_t *bytes)
{
	Cudnn *c = load(m);
	Key k;
	int st = SGRT_OK;

	*bytes = 0;
	if (!c)
		return SGRT_SDPA_UNAVAILABLE;
	if (!make_key(c, a, bwd, &k))
		return SGRT_SDPA_DECLINED;
	Plan *p = find_plan(m, c, &k, 0, &st, 0);
	if (st != SGRT_OK)
		return st;
	if (!p)
		return SGRT_SDPA_DECLINED;
	*bytes = p->pre + p->ws;
	return SGRT_OK;
}

int
sgrt_sdpa_exec(SgrtModel *m, int s, const SgrtSdpa *a, int bwd, void *ws, size_t ws_bytes,
               const char *name, int sgline)
{
	Cudnn *c = load(m);
	Key k;
	int st = SGRT_OK;

	if (!c)
		return SGRT_SDPA_UNAVAILABLE;
	if (s < 0 || s >= m->nstreams || !make_key(c, a, bwd, &k))
		return SGRT_SDPA_DECLINED;
	const void *ptr[14] = {a->q, a->k, a->v, a->o, a->lse, a->dout, a->dq, a->dk, a->dv};
	for (int i = 0; i < (bwd ? 9 : 5); i++)
		if (!ptr[i] || ((uintptr_t)ptr[i] & 15))
			return SGRT_SDPA_DECLINED;
	Plan *p = find_plan(m, c, &k, s, &st, sgline);
	if (st != SGRT_OK)
		return st;
	if (!p || ws_bytes < p->pre + p->ws || (p->pre + p->ws && !ws))
		return SGRT_SDPA_DECLINED;

	if (!p->sc && !(p->sc = calloc(1, sizeof *p->sc)))
		return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of host memory");
	Scalars *sc = p->sc;
	/* at most 7 + 7 tensors: forward's, then backward's */
	int64_t uid[SGRT_CUDNN_PACK_MAX] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF};
	void *dp[SGRT_CUDNN_PACK_MAX] = {(void *)a->q, (void *)a->k, (void *)a->v, a->o, a->lse,
	                                 &sc->scale, &sc->neginf};
	int n = k.causal ? 7 : 6; /* -inf is the causal mask's only: a plan
	                            without it rejects a pack that has it */
	if (bwd) {
		char *w = ws;
		size_t sums = (size_t)(k.b * k.h * k.l * 4 + 255) / 256 * 256;
		int64_t u2[7] = {U_DO, U_DQ, U_DK, U_DV, U_ONE, U_SUM, U_DQACC};
		void *p2[7] = {(void *)a->dout, a->dq, a->dk, a->dv, &sc->one, w, w + sums};
		memcpy(uid + n, u2, sizeof u2);
		memcpy(dp + n, p2, sizeof p2);
		n += k.direct ? 6 : 7; /* no accumulator: U_DQACC last */
	}
	void *cws = p->ws ? (char *)ws + p->pre : NULL;
	int h = sgrt_op_begin(m, s, SGRT_OP_KERNEL, name ? name : "sdpa[cudnn]", sgline);
	/* The kept pack holds the scalars' addresses, not their values: a
	 * new scale makes it again. */
	if (!p->pack.d || sc->scale != a->scale) {
		sgrt_cudnn_pack_free(&c->api, &p->pack);
		*sc = (Scalars){a->scale, -INFINITY, 1.0f};
	}
	cudnnStatus_t e = sgrt_cudnn_pack(&c->api, &p->pack, n, uid, dp, cws);
	if (e == CUDNN_STATUS_SUCCESS)
		e = c->f.SetStream(c->h, m->stream[s]);
	if (e == CUDNN_STATUS_SUCCESS)
		e = c->api.Execute(c->h, p->plan, p->pack.d);
	if (e != CUDNN_STATUS_SUCCESS)
		return sgrt_fail(m, SGRT_ECUDNN, sgline, "cudnnBackendExecute (%s) failed: %s",
		                 bwd ? "sdpa_backward" : "sdpa", c->f.GetErrorString(e));
	return sgrt_op_end(m, h);
}

int
sgrt_sdpa(SgrtModel *m, int s, const SgrtSdpa *a, int bwd, const char *name, int sgline)
{
	size_t need = 0;
	int st = sgrt_sdpa_workspace_size(m, a, bwd, &need);
	Cudnn *c = m->cudnn;

	if (st != SGRT_OK)
		return st;
	if (s < 0 || s >= m->nstreams)
		return SGRT_SDPA_DECLINED;
	if (need > c->ws_bytes[s]) {
		int cap = 0;
		SGRT_TRY(sgrt_capturing(m, s, &cap, sgline));
		if (cap)
			return SGRT_SDPA_DECLINED; /* no allocation during a capture */
		SGRT_TRY(sgrt_grow_stream_buffer(m, s, &c->ws[s], &c->ws_bytes[s], need, sgline));
	}
	return sgrt_sdpa_exec(m, s, a, bwd, c->ws[s], c->ws_bytes[s], name, sgline);
}

void *
sgrt_cudnn_lib(SgrtModel *m, void **handle)
{
	Cudnn *c = load(m);
	if (!c)
		return NULL;
	*handle = c->h;
	return c->lib;
}

#else /* no cudnn_graph.h at build time: always the fallback */

void
sgrt_cudnn_release(SgrtModel *m)
{
	(void)m;
}

void *
sgrt_cudnn_lib(SgrtModel *m, void **handle)
{
	(void)m;
	*handle = NULL;
	return NULL;
}

int
sgrt_sdpa_workspace_size(SgrtModel *m, const SgrtSdpa *a, int bwd, size_t *bytes)
{
	(void)m, (void)a, (void)bwd;
	*bytes = 0;
	return SGRT_SDPA_UNAVAILABLE;
}

int
sgrt_sdpa_exec(SgrtModel *m, int s, const SgrtSdpa *a, int bwd, void *ws, size_t ws_bytes,
               const char *name, int sgline)
{
	(void)m, (void)s, (void)a, (void)bwd, (void)ws, (void)ws_bytes, (void)name, (void)sgline;
	return SGRT_SDPA_UNAVAILABLE;
}

int
sgrt_sdpa(SgrtModel *m, int s, const SgrtSdpa *a, int bwd, const char *name, int sgline)
{
	(void)m, (void)s, (void)a, (void)bwd, (void)name, (void)sgline;
	return SGRT_SDPA_UNAVAILABLE;
}

#endif
