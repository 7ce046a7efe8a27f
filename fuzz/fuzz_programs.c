/*
 * fuzz_programs.c - structure-aware libFuzzer target: the input bytes are
 * not a program but the choices that build one.  A small generator turns
 * them into a type-correct .sg graph (shapes tracked, operands chosen to
 * fit), with pointwise ops and scalars, matrix products and linear layers
 * on fresh params, reductions, normalisations, shape ops, zero-size dims,
 * casts, 4-D images (conv2d on fresh filters, batch_norm with running
 * statistics, pooling, flatten), a side stream with events, collectives
 * with WORLD 1 or 2, and often a loss with backward (grad_sync too) and an optimizer.  The text
 * then goes through the whole compiler (whole.h): checks, IR round trip,
 * dot, memory plan, code generation and the interpreter, so the passes,
 * the back end and `sgc run` see programs that get past the checks far
 * more often than from mutated text.
 *
 * Build and run: see fuzz/README.md.
 */
#include <stdarg.h>

#include "whole.h"

enum { MAXV = 48, MAXPARAMS = 12, NEVENTS = 6 };

typedef struct {
	int rank;
	int d[4];
	int dt;       /* index into dtypes[] */
	int tainted;  /* depends on a param (a loss from it has gradients) */
} GVal;

typedef struct {
	const uint8_t *p;
	size_t n, i;
	GVal v[MAXV];
	int nv;
	int nparams;
	int world;
	int event;    /* next event to use */
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
	v->dt = dt;
	v->rank = rank;
	for (int k = 0; k < rank; k++)
		v->d[k] = d[k];
	v->tainted = tainted;
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

/* One statement built from the next choices. */
static void
statement(Gen *G)
{
	int a = pick(G);
	GVal x = G->v[a];
	int r, d[4], k;
	switch (take(G, 18)) {
	case 0: case 1:
		if ((r = def(G, x.dt, x.rank, x.d, x.tainted)) >= 0)
			fprintf(G->fb, "%s(%%v%d)\n", unary[take(G, sizeof unary / sizeof *unary)], a);
		break;
	case 2: case 3: {
		int b = same_shape(G, a);
		const char *op = binary[take(G, sizeof binary / sizeof *binary)];
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
		if ((r = def(G, x.dt, x.rank, d, 1)) >= 0)
			fprintf(G->fb, "linear(%%v%d, %%v%d)\n", a, k);
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
		if ((r = def(G, x.dt, x.rank, d, 1)) >= 0)
			fprintf(G->fb, "matmul(%%v%d, %%v%d)\n", a, k);
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
			if ((r = def(G, x.dt, x.rank, d, x.tainted)) >= 0)
				fprintf(G->fb, "transpose(%%v%d, dim0=0, dim1=1)\n", a);
			break;
		case 1:
			d[0] = 1;
			for (k = 0; k < x.rank; k++)
				d[0] *= x.d[k];
			if ((r = def(G, x.dt, 1, d, x.tainted)) >= 0)
				fprintf(G->fb, "reshape(%%v%d, shape=[%d])\n", a, d[0]);
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
			if ((r = def(G, x.dt, x.rank + 1, d, x.tainted)) >= 0)
				fprintf(G->fb, "unsqueeze(%%v%d, dim=0)\n", a);
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
		if ((r = def(G, k, x.rank, x.d, x.tainted)) >= 0)
			fprintf(G->fb, "cast(%%v%d, dtype=%s)\n", a, dtypes[k]);
		break;
	case 13: /* slice */
		if (x.rank < 1 || x.d[0] < 1)
			break;
		memcpy(d, x.d, sizeof d);
		d[0] = 1;
		if ((r = def(G, x.dt, x.rank, d, x.tainted)) >= 0)
			fprintf(G->fb, "slice(%%v%d, dim=0, start=0, end=1)\n", a);
		break;
	case 14: /* a scalar literal on the left */
		if ((r = def(G, x.dt, x.rank, x.d, x.tainted)) >= 0)
			fprintf(G->fb, "sub(1.0, %%v%d)\n", a);
		break;
	case 15: case 16: /* convolution, batch norm, pooling (4-D values) */
		image(G, a);
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
			case 1: fputs("  optimizer adamw(lr=0.01)\n", G->fb); break;
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
	whole_check(&whole, text, len, size && (data[size - 1] & 1) ? 0 : 2);
	free(text);
	return 0;
}
