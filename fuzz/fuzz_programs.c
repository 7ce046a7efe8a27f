/*
 * fuzz_programs.c - structure-aware libFuzzer target: the input bytes are
 * not a program but the choices that build one.  A small generator turns
 * them into a type-correct .sg graph (shapes tracked, operands chosen to
 * fit), with pointwise ops and scalars, matrix products and linear layers
 * on fresh params, reductions, normalisations, shape ops, zero-size dims,
 * casts, 4-D images (conv2d on fresh filters, batch_norm with running
 * statistics, pooling, flatten), the chains -O2 rewrites into one op
 * (attention by hand, the tanh GELU, Llama's RMS norm), a side stream
 * with events, collectives with WORLD 1 or 2, and often a loss with
 * backward (grad_sync too) and an optimizer.  The text
 * then goes through the whole compiler (whole.h): checks, IR round trip,
 * dot, memory plan, code generation and the interpreter, so the passes,
 * the back end and `sgc run` see programs that get past the checks far
 * more often than from mutated text.  Then the differential check
 * (check_outputs): -O0 and -O2 compute the same.
 *
 * Build and run: see fuzz/README.md.
 */
#include <math.h>
#include <stdarg.h>

#include "safetensors.h"
#include "whole.h"

enum { MAXV = 48, MAXPARAMS = 12, NEVENTS = 6 };

typedef struct {
	int rank;
	int d[4];
	int dt;       /* index into dtypes[] */
	int tainted;  /* depends on a param (a loss from it has gradients) */
	int pview;    /* a param or a view of one: not to be written in place */
} GVal;

typedef struct {
	const uint8_t *p;
	size_t n, i;
	GVal v[MAXV];
	int nv;
	int nparams;
	int world;
	int event;    /* next event to use */
	int naux;     /* next %tN: the i64 and bool values of masks */
	unsigned dts; /* the dtypes of its values: bit i for dtypes[i] */
	uint64_t params; /* bit i: %vi is a param */
	int adamw;    /* the optimizer is adamw */
	char *decl, *body;
	size_t decllen, bodylen;
	FILE *fd, *fb; /* declarations, statements */
} Gen;

static const char *const dtypes[] = {"f32", "f16", "bf16", "f64"};
static const char *const unary[] = {"neg", "abs", "exp", "tanh", "sigmoid", "relu",
                                    "gelu", "silu", "square", "sin", "erf", "sign"};
static const char *const binary[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
static const char *const reduce[] = {"sum", "mean", "amax", "amin", "var"};
static const int sizes[] = {1, 2, 3, 4, 8, 5, 0, 2};

/* The next choice in [0, n): the next input byte, 0 once they run out. */
static unsigned
take(Gen *G, unsigned n)
{
	if (n == 0 || G->i >= G->n)
		return 0;
	return G->p[G->i++] % n;
}

static void
put_type(FILE *f, const GVal *v)
{
	fprintf(f, "%s[", dtypes[v->dt]);
	for (int k = 0; k < v->rank; k++)
		fprintf(f, "%s%d", k ? ", " : "", v->d[k]);
	fputc(']', f);
}

/* A new value of the given type; returns its index, or -1 when full. */
static int
new_val(Gen *G, int dt, int rank, const int *d, int tainted)
{
	if (G->nv >= MAXV)
		return -1;
	GVal *v = &G->v[G->nv];
	G->dts |= 1u << dt;
	v->dt = dt;
	v->rank = rank;
	for (int k = 0; k < rank; k++)
		v->d[k] = d[k];
	v->tainted = tainted;
	v->pview = 0;
	return G->nv++;
}

/* A param (a gradient flows to it) or a const (batch norm's running
 * statistics) of the given shape, declared now; its value index or -1. */
static int
declare(Gen *G, const char *kind, int dt, int rank, const int *d)
{
	if (G->nparams >= MAXPARAMS)
		return -1;
	int i = new_val(G, dt, rank, d, strcmp(kind, "param") == 0);
	if (i < 0)
		return -1;
	if (G->v[i].tainted)
		G->params |= 1ull << i;
	G->v[i].pview = G->v[i].tainted;
	G->nparams++;
	fprintf(G->fd, "  %s %%v%d : ", kind, i);
	put_type(G->fd, &G->v[i]);
	fputc('\n', G->fd);
	return i;
}

static int
new_param(Gen *G, int dt, int rank, const int *d)
{
	return declare(G, "param", dt, rank, d);
}

static int
pick(Gen *G)
{
	return (int)take(G, (unsigned)G->nv);
}

/* A value of the same shape as v other than a scalar literal, or -1. */
static int
same_shape(Gen *G, int a)
{
	int start = (int)take(G, (unsigned)G->nv);
	for (int k = 0; k < G->nv; k++) {
		int b = (start + k) % G->nv;
		if (b != a && G->v[b].rank == G->v[a].rank && G->v[b].dt == G->v[a].dt &&
		    memcmp(G->v[b].d, G->v[a].d, sizeof(int) * (size_t)G->v[a].rank) == 0)
			return b;
	}
	return -1;
}

/* Writes "%vN = " for a new value and returns N (or -1: pool full). */
static int
def(Gen *G, int dt, int rank, const int *d, int tainted)
{
	int r = new_val(G, dt, rank, d, tainted);
	if (r >= 0)
		fprintf(G->fb, "  %%v%d = ", r);
	return r;
}

/* "%vN = " and the statement's text (fmt and what follows) for a new
 * value; returns N (or -1: pool full, nothing written). */
static int __attribute__((format(printf, 6, 7)))
emit(Gen *G, int dt, int rank, const int *d, int tainted, const char *fmt, ...)
{
	int r = def(G, dt, rank, d, tainted);
	if (r >= 0) {
		va_list ap;
		va_start(ap, fmt);
		vfprintf(G->fb, fmt, ap);
		va_end(ap);
	}
	return r;
}

/* A window's output size along a dim of n: kernel ks, stride st, padding
 * pad on both sides (conv2d's and the poolings'); 0 when no window fits. */
static int
windows(int n, int ks, int st, int pad)
{
	return n + 2 * pad < ks ? 0 : (n + 2 * pad - ks) / st + 1;
}

/* An image op on a 4-D value x [N, C, H, W]: conv2d with a fresh filter
 * (a bias, stride, padding, groups), a batch_norm with fresh consts for its
 * running statistics (training or not), the three poolings, or the
 * flatten that a classifier's head starts with. */
static void
image(Gen *G, int a)
{
	GVal x = G->v[a];
	int d[4], r, k, b = -1;
	if (x.rank != 4)
		return;
	switch (take(G, 6)) {
	case 0: {
		int ks = take(G, 2) ? 3 : 1, st = 1 + (int)take(G, 2), pad = (int)take(G, 2);
		int groups = x.d[1] > 0 && x.d[1] % 2 == 0 && take(G, 3) == 0 ? 2 : 1;
		int oh = windows(x.d[2], ks, st, pad), ow = windows(x.d[3], ks, st, pad);
		if (!oh || !ow)
			return;
		d[0] = sizes[take(G, 6)] * groups;
		d[1] = x.d[1] / groups;
		d[2] = d[3] = ks;
		if ((k = new_param(G, x.dt, 4, d)) < 0)
			return;
		if (take(G, 3) == 0 && (b = new_param(G, x.dt, 1, d)) < 0)
			return;
		int out[4] = {x.d[0], d[0], oh, ow};
		if ((r = def(G, x.dt, 4, out, 1)) < 0)
			return;
		fprintf(G->fb, "conv2d(%%v%d, %%v%d", a, k);
		if (b >= 0)
			fprintf(G->fb, ", %%v%d", b);
		fprintf(G->fb, ", stride=%d, padding=%d", st, pad);
		if (groups > 1)
			fprintf(G->fb, ", groups=%d", groups);
		fputs(")\n", G->fb);
		return;
	}
	case 1: {
		int v[4];
		d[0] = x.d[1];
		for (k = 0; k < 4; k++)
			if ((v[k] = declare(G, k < 2 ? "const" : "param", x.dt, 1, d)) < 0)
				return;
		if ((r = def(G, x.dt, 4, x.d, 1)) >= 0)
			fprintf(G->fb, "batch_norm(%%v%d, %%v%d, %%v%d, %%v%d, %%v%d, training=%s)\n",
			        a, v[0], v[1], v[2], v[3], take(G, 4) ? "true" : "false");
		return;
	}
	case 2: case 3: {
		int ks = 2 + (int)take(G, 2), st = 1 + (int)take(G, 2), pad = (int)take(G, 2);
		int out[4] = {x.d[0], x.d[1], windows(x.d[2], ks, st, pad),
		              windows(x.d[3], ks, st, pad)};
		if (!out[2] || !out[3])
			return;
		if ((r = def(G, x.dt, 4, out, x.tainted)) >= 0)
			fprintf(G->fb, "%s(%%v%d, kernel_size=%d, stride=%d, padding=%d)\n",
			        take(G, 2) ? "max_pool2d" : "avg_pool2d", a, ks, st, pad);
		return;
	}
	case 4: {
		int o = 1 + (int)take(G, 2), out[4] = {x.d[0], x.d[1], o, o};
		if ((r = def(G, x.dt, 4, out, x.tainted)) >= 0)
			fprintf(G->fb, "adaptive_avg_pool2d(%%v%d, output_size=%d)\n", a, o);
		return;
	}
	default:
		d[0] = x.d[0];
		d[1] = x.d[1] * x.d[2] * x.d[3];
		if ((r = def(G, x.dt, 2, d, x.tainted)) >= 0)
			fprintf(G->fb, "reshape(%%v%d, shape=[%d, %d])\n", a, d[0], d[1]);
		return;
	}
}

/* The causal mask [T, T] of aranges, as Hugging Face's models build it
 * (the attention pass recognises it); returns its %tN number. */
static int
causal_mask(Gen *G, int t)
{
	int n = G->naux;
	G->naux += 4;
	fprintf(G->fb, "  %%t%d = arange(end=%d)\n  %%t%d = unsqueeze(%%t%d, dim=1)\n"
	        "  %%t%d = arange(end=%d)\n  %%t%d = ge(%%t%d, %%t%d)\n",
	        n, t, n + 1, n, n + 2, t, n + 3, n + 1, n + 2);
	return n + 3;
}

/* The chains that exported models write out and the -O2 passes rewrite
 * into one op: attention by hand (transpose, matmul, scale, mask, softmax,
 * matmul: pass attention), the same as scaled_dot_product_attention, the
 * tanh GELU and Llama's RMS norm (pass fold_ops).  Their intermediate
 * values join the pool, so a later statement may read one (which must
 * keep the chain as written). */
static void
written_out(Gen *G, int a)
{
	GVal x = G->v[a];
	int d[4], k, n = x.rank, t = n >= 2 ? x.d[n - 2] : 0;
	int taint = x.tainted;
	if (n < 1)
		return;
	switch (take(G, 4)) {
	case 0: case 1: { /* attention over [..., T, D], by hand or as the op */
		if (n < 2)
			return;
		int kk = take(G, 2) ? same_shape(G, a) : a, v = take(G, 2) ? same_shape(G, a) : a;
		kk = kk < 0 ? a : kk;
		v = v < 0 ? a : v;
		taint = taint || G->v[kk].tainted || G->v[v].tainted;
		/* The queries and keys through tanh: scores of at most the head
		 * dim, so that the scores rounded to f16 or bf16 as written
		 * (-O0) and kept in f32 by the attention op (-O2) give nearly
		 * the same probabilities; of large scores, rounding decides
		 * which key wins. */
		int same = kk == a;
		if ((a = emit(G, x.dt, n, x.d, x.tainted, "tanh(%%v%d)\n", a)) < 0)
			return;
		kk = same ? a : emit(G, x.dt, n, x.d, G->v[kk].tainted, "tanh(%%v%d)\n", kk);
		if (kk < 0)
			return;
		int mask = (int)take(G, 3), m = -1; /* none, causal, a float mask */
		if (mask == 1) {
			m = causal_mask(G, t);
		} else if (mask == 2) {
			d[0] = d[1] = t;
			if ((m = declare(G, "const", x.dt, 2, d)) < 0)
				return;
		}
		const char *pre = mask == 2 ? "%v" : "%t";
		if (take(G, 2)) { /* the op */
			if (emit(G, x.dt, n, x.d, taint, "scaled_dot_product_attention(%%v%d, %%v%d, %%v%d",
			         a, kk, v) < 0)
				return;
			if (m >= 0)
				fprintf(G->fb, ", %s%d", pre, m);
			else if (take(G, 2))
				fputs(", causal=true", G->fb);
			fputs(take(G, 2) ? ", scale=0.5)\n" : ")\n", G->fb);
			return;
		}
		memcpy(d, x.d, sizeof d);
		d[n - 2] = x.d[n - 1];
		d[n - 1] = t;
		int kt = emit(G, x.dt, n, d, G->v[kk].tainted,
		              "transpose(%%v%d, dim0=-2, dim1=-1)\n", kk);
		memcpy(d, x.d, sizeof d);
		d[n - 1] = t; /* the scores' type: [..., T, T] */
#define LIKE_S(...) emit(G, x.dt, n, d, taint, __VA_ARGS__)
		int sc = kt < 0 ? -1 : LIKE_S("matmul(%%v%d, %%v%d)\n", a, kt);
		if (sc < 0)
			return;
		switch (take(G, 3)) {
		case 0: sc = LIKE_S("mul(%%v%d, 0.5)\n", sc); break;
		case 1: sc = LIKE_S("div(%%v%d, 2.0)\n", sc); break;
		default: break;
		}
		const char *in = "%v"; /* the softmax's operand: %v<sc> or %t<sc> */
		if (sc >= 0 && mask == 1) {
			/* -inf scores stay out of the pool: a row of them gives NaN
			 * through softmax and zeros through the attention op
			 * (attention.c), and another op reading them would make such
			 * rows */
			fprintf(G->fb, "  %%t%d = where(%%t%d, %%v%d, -inf)\n", G->naux, m, sc);
			sc = G->naux++;
			in = "%t";
		} else if (sc >= 0 && m >= 0) {
			sc = LIKE_S("add(%%v%d, %%v%d)\n", sc, m);
		}
		if (sc >= 0 && (k = LIKE_S("softmax(%s%d, dim=-1)\n", in, sc)) >= 0)
			emit(G, x.dt, n, x.d, taint, "matmul(%%v%d, %%v%d)\n", k, v);
#undef LIKE_S
		return;
	}
	case 2: { /* GELU, tanh form, as gelu_new: each value of x's type */
		int h, c, e, u;
#define LIKE_X(...) emit(G, x.dt, n, x.d, taint, __VA_ARGS__)
		if ((h = LIKE_X("mul(%%v%d, 0.5)\n", a)) < 0)
			return;
		if (take(G, 2))
			c = LIKE_X("pow(%%v%d, 3.0)\n", a);
		else if ((e = LIKE_X("mul(%%v%d, %%v%d)\n", a, a)) < 0)
			return;
		else
			c = LIKE_X("mul(%%v%d, %%v%d)\n", e, a);
		if (c < 0 || (e = LIKE_X("mul(%%v%d, 0.044715)\n", c)) < 0 ||
		    (c = LIKE_X("add(%%v%d, %%v%d)\n", a, e)) < 0 ||
		    (e = LIKE_X("mul(%%v%d, 0.7978845608028654)\n", c)) < 0 ||
		    (c = LIKE_X("tanh(%%v%d)\n", e)) < 0 ||
		    (u = LIKE_X("add(%%v%d, 1.0)\n", c)) < 0)
			return;
		LIKE_X("mul(%%v%d, %%v%d)\n", h, u);
#undef LIKE_X
		return;
	}
	default: { /* RMS norm as LlamaRMSNorm, in f32 */
		int f32 = 0, tv = a, p, m, q, hh;
		/* Over a short last dim, x / sqrt(mean(x^2) + eps) turns a
		 * rounding difference in an x near sqrt(eps) into a large one
		 * (one element: x / sqrt(x^2 + 1e-6) at x = -7e-4 moves 2% for
		 * an ulp of f16 in x, which the attention pass's f32 scores give
		 * against -O0's rounded ones): no oracle, so no such norm. */
		if (x.d[n - 1] < 8)
			return;
		d[0] = x.d[n - 1];
		if ((k = new_param(G, x.dt, 1, d)) < 0)
			return;
		if (x.dt != f32 && (tv = emit(G, f32, n, x.d, taint, "cast(%%v%d, dtype=f32)\n", a)) < 0)
			return;
		if ((p = def(G, f32, n, x.d, taint)) < 0)
			return;
		if (take(G, 2))
			fprintf(G->fb, "pow(%%v%d, 2)\n", tv);
		else
			fprintf(G->fb, "mul(%%v%d, %%v%d)\n", tv, tv);
		memcpy(d, x.d, sizeof d);
		d[n - 1] = 1;
		if ((m = emit(G, f32, n, d, taint, "mean(%%v%d, dims=[-1], keepdim=true)\n", p)) < 0 ||
		    (q = emit(G, f32, n, d, taint, "add(%%v%d, 1e-06)\n", m)) < 0 ||
		    (m = emit(G, f32, n, d, taint, "rsqrt(%%v%d)\n", q)) < 0 ||
		    (hh = emit(G, f32, n, x.d, taint, "mul(%%v%d, %%v%d)\n", tv, m)) < 0)
			return;
		if (x.dt != f32 &&
		    (hh = emit(G, x.dt, n, x.d, taint, "cast(%%v%d, dtype=%s)\n", hh, dtypes[x.dt])) < 0)
			return;
		emit(G, x.dt, n, x.d, 1, "mul(%%v%d, %%v%d)\n", k, hh);
		return;
	}
	}
}

/* Sometimes an add right after product r: of another value of its shape
 * (a residual) or of a fresh bias along its last dim, which -O2 computes
 * in the product (cuBLASLt's C or bias: kernels.c's fold_add). */
static void
after_product(Gen *G, int r)
{
	GVal y = G->v[r];
	int b, k, d[4];
	switch (take(G, 4)) {
	case 1:
		if ((b = same_shape(G, r)) >= 0)
			emit(G, y.dt, y.rank, y.d, 1, "add(%%v%d, %%v%d)\n", b, r);
		break;
	case 2:
		if (y.rank < 1)
			break;
		d[0] = y.d[y.rank - 1];
		if ((k = new_param(G, y.dt, 1, d)) >= 0)
			emit(G, y.dt, y.rank, y.d, 1, "add(%%v%d, %%v%d)\n", r, k);
		break;
	}
}

/* One statement built from the next choices. */
static void
statement(Gen *G)
{
	int a = pick(G);
	GVal x = G->v[a];
	int r, d[4], k;
	switch (take(G, 21)) {
	case 0: case 1:
		if ((r = def(G, x.dt, x.rank, x.d, x.tainted)) >= 0)
			fprintf(G->fb, "%s(%%v%d)\n", unary[take(G, sizeof unary / sizeof *unary)], a);
		break;
	case 2: case 3: {
		int b = same_shape(G, a);
		const char *op = binary[take(G, sizeof binary / sizeof *binary)];
		if (b >= 0 && strcmp(op, "div") == 0) {
			/* A divisor of 1 + b^2: -O0 and -O2 may round b apart (-O2's
			 * fused attention and GELU compute in f32), and a quotient
			 * by a b near 0 would take that past any tolerance. */
			int t = b;
			if ((b = def(G, x.dt, x.rank, x.d, G->v[t].tainted)) < 0)
				break;
			fprintf(G->fb, "square(%%v%d)\n", t);
			if ((t = def(G, x.dt, x.rank, x.d, G->v[b].tainted)) < 0)
				break;
			fprintf(G->fb, "add(%%v%d, 1.0)\n", b);
			b = t;
		}
		if ((r = def(G, x.dt, x.rank, x.d, x.tainted || (b >= 0 && G->v[b].tainted))) < 0)
			break;
		if (b >= 0)
			fprintf(G->fb, "%s(%%v%d, %%v%d)\n", op, a, b);
		else
			fprintf(G->fb, "%s(%%v%d, %s)\n", op, a, take(G, 2) ? "0.5" : "2");
		break;
	}
	case 4: /* linear on a fresh weight [N, K] */
		if (x.rank < 1)
			break;
		d[0] = sizes[take(G, 8)];
		d[1] = x.d[x.rank - 1];
		if ((k = new_param(G, x.dt, 2, d)) < 0)
			break;
		memcpy(d, x.d, sizeof d);
		d[x.rank - 1] = G->v[k].d[0];
		if ((r = def(G, x.dt, x.rank, d, 1)) >= 0) {
			fprintf(G->fb, "linear(%%v%d, %%v%d)\n", a, k);
			after_product(G, r);
		}
		break;
	case 5: /* matmul with a fresh [K, N] */
		if (x.rank < 2)
			break;
		d[0] = x.d[x.rank - 1];
		d[1] = sizes[take(G, 8)];
		if ((k = new_param(G, x.dt, 2, d)) < 0)
			break;
		memcpy(d, x.d, sizeof d);
		d[x.rank - 1] = G->v[k].d[1];
		if ((r = def(G, x.dt, x.rank, d, 1)) < 0)
			break;
		fprintf(G->fb, "matmul(%%v%d, %%v%d)\n", a, k);
		/* a layer: an activation right after it (a small f32 product
		 * computes it in its epilogue at -O2: kernels.c) */
		if (take(G, 2) && def(G, x.dt, x.rank, d, 1) >= 0)
			fprintf(G->fb, "%s(%%v%d)\n", unary[take(G, sizeof unary / sizeof *unary)], r);
		else
			after_product(G, r);
		break;
	case 6: { /* reduction over one dim, or all */
		const char *op = reduce[take(G, sizeof reduce / sizeof *reduce)];
		if (x.rank == 0 || take(G, 3) == 0) {
			if ((r = def(G, x.dt, 0, d, x.tainted)) >= 0)
				fprintf(G->fb, "%s(%%v%d)\n", op, a);
			break;
		}
		int dim = (int)take(G, (unsigned)x.rank), keep = (int)take(G, 2), n = 0;
		for (k = 0; k < x.rank; k++)
			if (k != dim)
				d[n++] = x.d[k];
			else if (keep)
				d[n++] = 1;
		if ((r = def(G, x.dt, n, d, x.tainted)) >= 0)
			fprintf(G->fb, "%s(%%v%d, dims=[%d], keepdim=%s)\n", op, a, dim,
			        keep ? "true" : "false");
		break;
	}
	case 7:
		if (x.rank < 1)
			break;
		if ((r = def(G, x.dt, x.rank, x.d, x.tainted)) >= 0)
			fprintf(G->fb, "%s(%%v%d, dim=-1)\n", take(G, 2) ? "softmax" : "log_softmax", a);
		break;
	case 8: /* normalisation with a fresh weight */
		if (x.rank < 1)
			break;
		d[0] = x.d[x.rank - 1];
		if ((k = new_param(G, x.dt, 1, d)) < 0)
			break;
		if ((r = def(G, x.dt, x.rank, x.d, 1)) >= 0)
			fprintf(G->fb, "%s(%%v%d, %%v%d)\n", take(G, 2) ? "rms_norm" : "layer_norm", a, k);
		break;
	case 9: /* shape ops */
		switch (take(G, 4)) {
		case 0:
			if (x.rank < 2)
				break;
			memcpy(d, x.d, sizeof d);
			d[0] = x.d[1];
			d[1] = x.d[0];
			if ((r = def(G, x.dt, x.rank, d, x.tainted)) >= 0) {
				fprintf(G->fb, "transpose(%%v%d, dim0=0, dim1=1)\n", a);
				G->v[r].pview = x.pview;
			}
			break;
		case 1:
			d[0] = 1;
			for (k = 0; k < x.rank; k++)
				d[0] *= x.d[k];
			if ((r = def(G, x.dt, 1, d, x.tainted)) >= 0) {
				fprintf(G->fb, "reshape(%%v%d, shape=[%d])\n", a, d[0]);
				G->v[r].pview = x.pview;
			}
			break;
		case 2:
			if (x.rank < 1)
				break;
			memcpy(d, x.d, sizeof d);
			d[0] *= 2;
			if ((r = def(G, x.dt, x.rank, d, x.tainted)) >= 0)
				fprintf(G->fb, "cat(%%v%d, %%v%d, dim=0)\n", a, a);
			break;
		default:
			if (x.rank >= 4)
				break;
			d[0] = 1;
			memcpy(d + 1, x.d, sizeof(int) * (size_t)x.rank);
			if ((r = def(G, x.dt, x.rank + 1, d, x.tainted)) >= 0) {
				fprintf(G->fb, "unsqueeze(%%v%d, dim=0)\n", a);
				G->v[r].pview = x.pview;
			}
			break;
		}
		break;
	case 10: /* work on the side stream, ordered by events */
		if (G->event + 2 > NEVENTS)
			break;
		fprintf(G->fb, "  record_event(e%d)\n  with stream(side) {\n"
		        "    wait_event(e%d)\n  ", G->event, G->event);
		if ((r = def(G, x.dt, x.rank, x.d, x.tainted)) >= 0)
			fprintf(G->fb, "%s(%%v%d)\n", unary[take(G, sizeof unary / sizeof *unary)], a);
		fprintf(G->fb, "    record_event(e%d)\n  }\n  wait_event(e%d)\n",
		        G->event + 1, G->event + 1);
		G->event += 2;
		break;
	case 11: /* collectives */
		switch (take(G, 3)) {
		case 0:
			if ((r = def(G, x.dt, x.rank, x.d, x.tainted)) >= 0)
				fprintf(G->fb, "all_reduce(%%v%d, op=\"%s\")\n", a,
				        take(G, 2) ? "sum" : "avg");
			break;
		case 1:
			if (x.rank < 1)
				break;
			memcpy(d, x.d, sizeof d);
			d[0] *= G->world;
			if ((r = def(G, x.dt, x.rank, d, x.tainted)) >= 0)
				fprintf(G->fb, "all_gather(%%v%d, dim=0)\n", a);
			break;
		default:
			if (x.rank < 1 || x.d[0] % G->world)
				break;
			memcpy(d, x.d, sizeof d);
			d[0] /= G->world;
			if ((r = def(G, x.dt, x.rank, d, x.tainted)) >= 0)
				fprintf(G->fb, "reduce_scatter(%%v%d, dim=0)\n", a);
			break;
		}
		break;
	case 12: /* cast */
		k = (int)take(G, 4);
		if ((r = def(G, k, x.rank, x.d, x.tainted)) >= 0) {
			fprintf(G->fb, "cast(%%v%d, dtype=%s)\n", a, dtypes[k]);
			G->v[r].pview = x.pview && k == x.dt;
		}
		break;
	case 13: /* slice */
		if (x.rank < 1 || x.d[0] < 1)
			break;
		memcpy(d, x.d, sizeof d);
		d[0] = 1;
		if ((r = def(G, x.dt, x.rank, d, x.tainted)) >= 0) {
			fprintf(G->fb, "slice(%%v%d, dim=0, start=0, end=1)\n", a);
			G->v[r].pview = x.pview;
		}
		break;
	case 14: /* a scalar literal on the left */
		if ((r = def(G, x.dt, x.rank, x.d, x.tainted)) >= 0)
			fprintf(G->fb, "sub(1.0, %%v%d)\n", a);
		break;
	case 15: case 16: /* convolution, batch norm, pooling (4-D values) */
		image(G, a);
		break;
	case 17: case 18: /* chains that -O2 rewrites into one op */
		written_out(G, a);
		break;
	case 19: /* in place: on a value, or through a slice of it, or a row
	            of its transpose, so that the write shows in the value */
		if (x.pview)
			break;
		switch (take(G, 3)) {
		case 0:
			fprintf(G->fb, "  mul_(%%v%d, 0.5)\n", a);
			break;
		case 1:
			if (x.rank < 1 || x.d[0] < 1)
				break;
			memcpy(d, x.d, sizeof d);
			d[0] = 1;
			if ((r = def(G, x.dt, x.rank, d, x.tainted)) >= 0)
				fprintf(G->fb, "slice(%%v%d, dim=0, start=%d)\n  add_(%%v%d, 1.0)\n",
				        a, x.d[0] - 1, r);
			break;
		default:
			if (x.rank < 2 || x.d[1] < 1)
				break;
			memcpy(d, x.d, sizeof d);
			d[0] = x.d[1];
			d[1] = x.d[0];
			if ((r = def(G, x.dt, x.rank, d, x.tainted)) < 0)
				break;
			fprintf(G->fb, "transpose(%%v%d, dim0=0, dim1=1)\n", a);
			d[0] = 1;
			if ((k = def(G, x.dt, x.rank, d, x.tainted)) >= 0)
				fprintf(G->fb, "slice(%%v%d, dim=0, end=1)\n  zero_(%%v%d)\n", r, k);
			break;
		}
		break;
	default: /* where on a comparison */
		if ((r = def(G, x.dt, x.rank, x.d, x.tainted)) >= 0)
			fprintf(G->fb, "clamp(%%v%d, min=-1.0, max=1.0)\n", a);
		break;
	}
}

/* Writes the program chosen by the bytes into *text. */
static void
generate(Gen *G, char **text, size_t *len)
{
	FILE *out = open_memstream(text, len);
	G->fd = open_memstream(&G->decl, &G->decllen);
	G->fb = open_memstream(&G->body, &G->bodylen);
	if (!out || !G->fd || !G->fb)
		abort();
	G->world = take(G, 4) == 0 ? 2 : 1;
	int dt = (int)take(G, 8);
	dt = dt < 4 ? 0 : dt - 4;
	int ninputs = 1 + (int)take(G, 3), d[4];
	for (int i = 0; i < ninputs; i++) {
		int rank = 1 + (int)take(G, 4);
		for (int k = 0; k < rank; k++)
			d[k] = sizes[take(G, 8)] * (k == 0 ? G->world : 1);
		int v = new_val(G, dt, rank, d, 0);
		fprintf(G->fd, "  input %%v%d : ", v);
		put_type(G->fd, &G->v[v]);
		fputc('\n', G->fd);
	}
	int nstmt = 1 + (int)take(G, 24);
	for (int s = 0; s < nstmt && G->i < G->n; s++)
		statement(G);
	/* A loss over the last value that depends on a param. */
	int loss = -1, last = G->nv - 1;
	for (int i = G->nv - 1; i >= 0 && loss < 0; i--)
		if (G->v[i].tainted && take(G, 4) != 0)
			loss = i;
	if (loss >= 0) {
		int l = def(G, G->v[loss].dt, 0, d, 1);
		if (l >= 0) {
			fprintf(G->fb, "mean(%%v%d)\n", loss);
			int sync = G->world > 1 && take(G, 2);
			fprintf(G->fb, "  backward(%%v%d%s)\n", l,
			        sync ? ", grad_sync=all_reduce" : "");
			switch (take(G, 3)) {
			case 0: fputs("  optimizer sgd(lr=0.1, momentum=0.9)\n", G->fb); break;
			case 1:
				fputs("  optimizer adamw(lr=0.01)\n", G->fb);
				G->adamw = 1;
				break;
			default: break;
			}
			last = l;
		}
	}
	fprintf(G->fb, "  return %%v%d\n", last);
	fclose(G->fd);
	fclose(G->fb);
	if (G->world > 1)
		fprintf(out, "dim WORLD = %d\n", G->world);
	fputs("graph g {\n", out);
	fputs(G->decl, out);
	fputs("  stream side\n  event e0, e1, e2, e3, e4, e5\n", out);
	fputs(G->body, out);
	fputs("}\n", out);
	fclose(out);
	free(G->decl);
	free(G->body);
}

/* Tensor t of a results file as the interpreter's tensor, so that
 * interp_getf reads its elements (sgrt_st_write lays each tensor out
 * aligned to its element size, in a buffer that malloc aligned). */
static Tensor
as_tensor(const SgrtTensor *t)
{
	Tensor v = {.dt = (uint8_t)t->dtype, .data = t->data}; /* SgrtDType is DType */
	return v;
}

/* How two runs' results are compared (differ): exact, byte for byte; else
 * floats within rel times a tensor's largest magnitude (at least 1), NaN
 * and infinities in the same places, except that with narrow a value the
 * first run overflowed (inf or NaN) may be finite in the second; the
 * tensors that skipped() names aside. */
typedef struct {
	int exact;
	double rel;
	int narrow;
	uint64_t skip;
} Cmp;

/* The comparison of -O0's results (first) with -O2's for a program whose
 * values have the dtypes dts (bits of dtypes[]): a few roundings of the
 * coarsest (over two steps: a bf16 value rounded otherwise changes the
 * f32 ones after it).  With f16 or bf16 values, -O2's fused ops (the
 * attention, the tanh GELU) compute in f32 what the ops as written round
 * to the narrow type after each step, where a score or a cube can
 * overflow: narrow.  skip: the params and optimizer state of an AdamW
 * program (LLVMFuzzerTestOneInput). */
static Cmp
levels_cmp(unsigned dts, uint64_t skip)
{
	Cmp c = {.rel = dts & 4 ? 4e-2 : dts & 2 ? 1e-2 : dts & 1 ? 1e-4 : 1e-9,
	         .narrow = (dts & 6) != 0, .skip = skip};
	return c;
}

/* Why tensors x (first run) and y (second) differ under c, into why; 0
 * when they agree. */
static int
differ(const SgrtTensor *x, const SgrtTensor *y, const Cmp *c, char *why, size_t len)
{
	if (x->dtype != y->dtype || x->rank != y->rank || x->nbytes != y->nbytes ||
	    memcmp(x->shape, y->shape, sizeof x->shape) != 0) {
		snprintf(why, len, "'%s': dtype or shape differs", x->name);
		return 1;
	}
	if (c->exact || !dtype_is_float((DType)x->dtype)) {
		if (memcmp(x->data, y->data, x->nbytes) == 0)
			return 0;
		snprintf(why, len, "'%s': the bytes differ", x->name);
		return 1;
	}
	size_t n = x->nbytes / (size_t)sgrt_dtype_size(x->dtype);
	Tensor tx = as_tensor(x), ty = as_tensor(y);
	double scale = 0;
	for (size_t i = 0; i < n; i++) {
		double a = interp_getf(&tx, (int64_t)i);
		if (isfinite(a) && fabs(a) > scale)
			scale = fabs(a);
	}
	double tol = c->rel * (scale > 1 ? scale : 1);
	for (size_t i = 0; i < n; i++) {
		double a = interp_getf(&tx, (int64_t)i), b = interp_getf(&ty, (int64_t)i);
		int same = isnan(a) ? isnan(b) : isinf(a) ? a == b
		                    : isfinite(b) && fabs(a - b) <= tol;
		if (!same && !(c->narrow && !isfinite(a) && isfinite(b))) {
			snprintf(why, len, "'%s' element %zu: %.9g against %.9g (tolerance %.3g)",
			         x->name, i, a, b, tol);
			return 1;
		}
	}
	return 0;
}

/* Whether tensor name is a param of skip (bit i: %vi) or optimizer
 * state ("opt.NAME...."). */
static int
skipped(const char *name, uint64_t skip)
{
	if (!skip)
		return 0;
	if (strncmp(name, "opt.", 4) == 0)
		return 1;
	char *end;
	long i = name[0] == 'v' ? strtol(name + 1, &end, 10) : -1;
	return i >= 0 && i < 64 && !*end && (skip >> i & 1);
}

/* Why the results in files pa and pb differ under c, into why; 0 when
 * they have the same tensors and each agrees (differ). */
static int
differ_files(const char *pa, const char *pb, const Cmp *c, char *why, size_t len)
{
	SgrtSafetensors a, b;
	char err[256];
	int rc = 1;
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	if (sgrt_st_read(pa, &a, err, sizeof err) || sgrt_st_read(pb, &b, err, sizeof err)) {
		snprintf(why, len, "%s", err);
	} else if (a.n != b.n) {
		snprintf(why, len, "%u tensors against %u", a.n, b.n);
	} else {
		rc = 0;
		for (uint32_t i = 0; i < a.n && !rc; i++) {
			if (strcmp(a.t[i].name, b.t[i].name) != 0) {
				snprintf(why, len, "'%s' against '%s'", a.t[i].name, b.t[i].name);
				rc = 1;
			} else if (!skipped(a.t[i].name, c->skip)) {
				rc = differ(&a.t[i], &b.t[i], c, why, len);
			}
		}
	}
	sgrt_st_free(&a);
	sgrt_st_free(&b);
	return rc;
}

/* Removes the files o's runs wrote (a file per rank). */
static void
remove_outputs(const WholeOut *o, int world)
{
	for (uint32_t g = 0; g < WHOLE_MAX_GRAPHS; g++)
		for (int il = 0; il < 2; il++) {
			char p[256], q[300];
			if (!o->ran[g][il])
				continue;
			whole_out_path(p, sizeof p, o->tag, g, il);
			if (world == 1)
				remove(p);
			else
				for (int r = 0; r < world; r++) {
					snprintf(q, sizeof q, "%s.%d", p, r);
					remove(q);
				}
		}
}

/* Rank 0's file of run (g, il) of tag, into buf. */
static void
output_path(char *buf, size_t len, const char *tag, uint32_t g, int il, int world)
{
	char p[256];
	whole_out_path(p, sizeof p, tag, g, il);
	snprintf(buf, len, world > 1 ? "%s.0" : "%s", p);
}

/*
 * The differential check.  The program compiled at -O0 and at -O2 (where
 * dce, attention, fold_ops, layout, pad and remat rewrite it) must compute
 * the same: each graph's two steps (returned values, params, optimizer
 * state, mutated inputs) agree (levels: a Cmp, levels_cmp), and fail or
 * succeed together; with levels.skip (an AdamW program's params), one
 * step each.  And under each, the interleaved run gives the bytes
 * of the run in program order (freed buffers are poisoned there).  The
 * level whose compilation goes through everything (whole_check) is -O0
 * when full0, else -O2; the other is only run.  With off2, -O2 compiles
 * with --offload=auto (offload.c: every saved activation whose copy
 * lowers the estimated peak goes to the host and back), so the copies,
 * their syncs and the renamed backward reads are checked against -O0
 * without them, and interleaved.  With budget2, -O2 compiles with
 * --remat-budget=budget2 (remat.c's fit_budget keeps some activations
 * from forward that it would otherwise recompute).
 */
static void
check_outputs(const char *text, size_t len, int world, int full0, int off2, uint64_t budget2,
              const Cmp *levels)
{
	WholeOut o0 = {.tag = "O0", .steps = levels->skip ? 1 : 2};
	WholeOut o2 = {.tag = "O2", .steps = levels->skip ? 1 : 2};
	const Cmp same_bytes = {.exact = 1};
	char why[512] = "", pa[300], pb[300];
	const char *what = NULL;
	int ok0, ok2;
	int off = off2 ? OFFLOAD_AUTO : OFFLOAD_MARKED;
	if (full0) {
		ok0 = whole_check(&whole, text, len, 0, &o0);
		whole.offload = off;
		whole.remat_budget = budget2;
		ok2 = whole_compile(&whole, text, len, whole.devnull, 2, WHOLE_RUN, &o2, NULL, NULL);
	} else {
		whole.offload = off;
		whole.remat_budget = budget2;
		ok2 = whole_check(&whole, text, len, 2, &o2);
		whole.offload = OFFLOAD_MARKED;
		whole.remat_budget = 0;
		ok0 = whole_compile(&whole, text, len, whole.devnull, 0, WHOLE_RUN, &o0, NULL, NULL);
	}
	whole.offload = OFFLOAD_MARKED;
	whole.remat_budget = 0;
	if (ok0 != ok2)
		what = "the program compiles at one of -O0 and -O2 only";
	for (uint32_t g = 0; g < WHOLE_MAX_GRAPHS && !what; g++) {
		for (int k = 0; k < 3 && !what; k++) {
			const WholeOut *x = k < 2 ? (k ? &o2 : &o0) : &o0;
			const WholeOut *y = k < 2 ? x : &o2;
			int ix = 0, iy = k < 2 ? 1 : 0;
			if (!x->ran[g][ix] || !y->ran[g][iy])
				continue;
			if ((x->rc[g][ix] == 0) != (y->rc[g][iy] == 0)) {
				snprintf(why, sizeof why, "graph %u: exit status %d against %d",
				         g, x->rc[g][ix], y->rc[g][iy]);
				what = k < 2 ? "an interleaved run fails and the other does not"
				             : "-O0's run fails and -O2's does not, or the reverse";
			} else if (x->rc[g][ix] == 0) {
				output_path(pa, sizeof pa, x->tag, g, ix, world);
				output_path(pb, sizeof pb, y->tag, g, iy, world);
				if (differ_files(pa, pb, k < 2 ? &same_bytes : levels, why, sizeof why))
					what = k < 2 ? "the interleaved run computes other bytes"
					             : "-O0 and -O2 compute different results";
			}
		}
	}
	remove_outputs(&o0, world);
	remove_outputs(&o2, world);
	if (what) {
		fprintf(stderr, "fuzz: %s\n", why);
		whole_bug(what, text, NULL);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Gen G;
	char *text = NULL;
	size_t len = 0;
	memset(&G, 0, sizeof G);
	G.p = data;
	G.n = size;
	generate(&G, &text, &len);
	if (getenv("FUZZ_PROGRAMS_PRINT"))
		fputs(text, stderr);
	const char *dir = getenv("FUZZ_PROGRAMS_DIR");
	if (dir) { /* write the program, check nothing (fuzz/programs_of.sh) */
		uint64_t h = 1469598103934665603ull; /* FNV-1a of the text */
		for (size_t i = 0; i < len; i++)
			h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
		char path[512];
		snprintf(path, sizeof path, "%s/f%016llx.sg", dir, (unsigned long long)h);
		FILE *f = fopen(path, "w");
		if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0)
			abort();
		free(text);
		return 0;
	}
	/* The last byte's low bit: which of -O0 and -O2 goes through
	 * everything (whole_check); the other is only run; its second bit:
	 * whether -O2 offloads; its third: whether -O2 has a remat budget,
	 * 2^(12 + its top four bits) bytes (4 KiB to 128 MiB: the generated
	 * programs' peaks lie in that range). */
	/* AdamW divides each gradient by its own magnitude: a gradient that is
	 * rounding noise (a shift that log_softmax cancels, say) moves its
	 * param by up to lr whatever the noise, so the two levels' params
	 * (and what a second step computes from them) need not agree */
	Cmp levels = levels_cmp(G.dts, G.adamw ? G.params : 0);
	uint8_t last = size ? data[size - 1] : 0;
	check_outputs(text, len, G.world, last & 1, last & 2,
	              last & 4 ? (uint64_t)1 << (12 + (last >> 4)) : 0, &levels);
	free(text);
	return 0;
}
