/*
 * interp_conv.c - interpreter kernels for conv2d (im2col and OpenBLAS's
 * sgemm, dgemm for f64), the 2-D pools and batch_norm, and their backward
 * ops (conv.c has the shape rules and the geometry).
 *
 * f16 and bf16 are widened to float, products accumulate in f32 (f64 in
 * f64) and each result is rounded once to the tensor's dtype, as on the
 * GPU; pools and batch_norm's statistics accumulate in double.  The
 * running-statistics update of a training batch_norm is not here: the
 * functionalize pass writes it as ops of its own (functionalize.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"

/* A float (or, f64, double) work array. */
static void *
work(int f64, int64_t count)
{
	return xmalloc((size_t)(count + 1) * (f64 ? sizeof(double) : sizeof(float)));
}

static double
rd(const void *p, int f64, int64_t i)
{
	return f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

static void
wr(void *p, int f64, int64_t i, double v)
{
	if (f64)
		((double *)p)[i] = v;
	else
		((float *)p)[i] = (float)v;
}

/* t's elements as a work array. */
static void *
load(const Tensor *t, int f64)
{
	void *p = work(f64, t->numel);
	for (int64_t i = 0; i < t->numel; i++)
		wr(p, f64, i, interp_getf(t, i));
	return p;
}

/* The im2col matrix of image nb, channels [c0, c0 + cols): row (c * R +
 * r) * S + s, column p holds x at output position p's window tap (r, s),
 * 0 in the padding.  Without dx, col gets it from x; with dx (col2im),
 * each element of col is added into dx where it was read. */
static void
im2col(const ConvGeom *g, const void *x, int f64, int64_t nb, int64_t c0, int64_t cols,
       void *col, double *dx)
{
	int64_t P = g->oh * g->ow;
	for (int64_t c = 0; c < cols; c++)
		for (int64_t r = 0; r < g->r; r++)
			for (int64_t s = 0; s < g->s; s++) {
				int64_t row = ((c * g->r) + r) * g->s + s;
				for (int64_t oh = 0; oh < g->oh; oh++) {
					int64_t ih = oh * g->stride[0] - g->pad[0] + r * g->dil[0];
					for (int64_t ow = 0; ow < g->ow; ow++) {
						int64_t iw = ow * g->stride[1] - g->pad[1] + s * g->dil[1];
						int64_t at = row * P + oh * g->ow + ow;
						int in = ih >= 0 && ih < g->h && iw >= 0 && iw < g->w;
						int64_t xi = ((nb * g->c + c0 + c) * g->h + ih) * g->w + iw;
						if (dx && in)
							dx[xi] += rd(col, f64, at);
						else if (!dx)
							wr(col, f64, at, in ? rd(x, f64, xi) : 0);
					}
				}
			}
}

/* conv2d(x, w, b?): per image and group, W_g [Kg, Cg*R*S] @ im2col. */
int
interp_conv2d(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *x = in[0], *w = in[1], *b = n->nopnd > 2 ? in[2] : NULL, *y = out[0];
	int f64 = y->dt == DT_F64;
	ConvGeom g;
	conv_geom(n, x->shape, w->shape, &g);
	int64_t cg = g.c / g.groups, kg = g.k / g.groups, P = g.oh * g.ow;
	int64_t kk = cg * g.r * g.s;
	void *xs = load(x, f64), *ws = load(w, f64);
	void *col = work(f64, kk * P), *acc = work(f64, kg * P);
	int ok = 1;
	for (int64_t nb = 0; nb < g.n && ok; nb++)
		for (int64_t gi = 0; gi < g.groups && ok; gi++) {
			im2col(&g, xs, f64, nb, gi * cg, cg, col, NULL);
			const char *wg = (const char *)ws + (size_t)(gi * kg * kk) * (f64 ? 8 : 4);
			ok = interp_gemm(I, n, f64, kg, P, kk, wg, col, 0, acc);
			for (int64_t k = 0; k < kg && ok; k++) {
				int64_t ko = gi * kg + k;
				double bias = b ? interp_getf(b, ko) : 0;
				for (int64_t p = 0; p < P; p++) {
					double v = rd(acc, f64, k * P + p);
					/* the bias added to the rounded product, as cuDNN's
					 * epilogue and PyTorch's CPU kernel do */
					interp_setf(y, (nb * g.k + ko) * P + p,
					            b ? interp_opmath((DType)y->dt, v) + bias : v);
				}
			}
		}
	free(xs);
	free(ws);
	free(col);
	free(acc);
	return ok ? 0 : 1;
}

/* conv2d_backward_input(g, w): col2im(W_g^T @ g_g);
 * conv2d_backward_weight(g, x): sum over images of g_g @ im2col(x)^T. */
int
interp_conv2d_backward(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *gy = in[0], *r = out[0];
	int f64 = r->dt == DT_F64, dinput = n->op == OP_CONV2D_BACKWARD_INPUT;
	const int64_t *xs = dinput ? r->shape : in[1]->shape;
	const int64_t *wsh = dinput ? in[1]->shape : r->shape;
	ConvGeom g;
	conv_geom(n, xs, wsh, &g);
	int64_t cg = g.c / g.groups, kg = g.k / g.groups, P = g.oh * g.ow;
	int64_t kk = cg * g.r * g.s;
	size_t es = f64 ? 8 : 4;
	void *gs = load(gy, f64), *other = load(in[1], f64);
	void *col = work(f64, kk * P), *tmp = work(f64, dinput ? kk * kg : kg * kk);
	double *acc = calloc((size_t)r->numel + 1, sizeof *acc);
	if (!acc)
		out_of_memory(0);
	int ok = 1;
	if (dinput) {
		/* tmp: W^T per group, [kk, kg] */
		void *wt = work(f64, g.k * kk);
		for (int64_t gi = 0; gi < g.groups; gi++)
			for (int64_t k = 0; k < kg; k++)
				for (int64_t j = 0; j < kk; j++)
					wr(wt, f64, gi * kk * kg + j * kg + k,
					   rd(other, f64, (gi * kg + k) * kk + j));
		for (int64_t nb = 0; nb < g.n && ok; nb++)
			for (int64_t gi = 0; gi < g.groups && ok; gi++) {
				const char *gg = (const char *)gs + (size_t)((nb * g.k + gi * kg) * P) * es;
				ok = interp_gemm(I, n, f64, kk, P, kg, (const char *)wt +
				                 (size_t)(gi * kk * kg) * es, gg, 0, col);
				if (ok)
					im2col(&g, NULL, f64, nb, gi * cg, cg, col, acc);
			}
		free(wt);
	} else {
		for (int64_t nb = 0; nb < g.n && ok; nb++)
			for (int64_t gi = 0; gi < g.groups && ok; gi++) {
				im2col(&g, other, f64, nb, gi * cg, cg, col, NULL);
				const char *gg = (const char *)gs + (size_t)((nb * g.k + gi * kg) * P) * es;
				ok = interp_gemm(I, n, f64, kg, kk, P, gg, col, 1, tmp);
				for (int64_t j = 0; j < kg * kk && ok; j++)
					acc[gi * kg * kk + j] += rd(tmp, f64, j);
			}
	}
	for (int64_t i = 0; i < r->numel && ok; i++)
		interp_setf(r, i, acc[i]);
	free(gs);
	free(other);
	free(col);
	free(tmp);
	free(acc);
	return ok ? 0 : 1;
}

/* ------------------------------------------------------------------ pools */

/* The pool window of output (oh, ow): rows [*h0, *h1), cols [*w0, *w1)
 * clipped to the input; *count the divisor (avg: the whole kernel, as
 * PyTorch's count_include_pad=True; adaptive: the window). */
static void
window(const Node *n, const ConvGeom *g, int64_t oh, int64_t ow, int64_t *h0,
       int64_t *h1, int64_t *w0, int64_t *w1, int64_t *count)
{
	if (n->op == OP_ADAPTIVE_AVG_POOL2D || n->op == OP_ADAPTIVE_AVG_POOL2D_BACKWARD) {
		*h0 = conv_adaptive_start(oh, g->oh, g->h);
		*h1 = conv_adaptive_end(oh, g->oh, g->h);
		*w0 = conv_adaptive_start(ow, g->ow, g->w);
		*w1 = conv_adaptive_end(ow, g->ow, g->w);
		*count = (*h1 - *h0) * (*w1 - *w0);
		return;
	}
	int64_t hs = oh * g->stride[0] - g->pad[0], ws = ow * g->stride[1] - g->pad[1];
	*count = g->r * g->s;
	*h0 = hs < 0 ? 0 : hs;
	*w0 = ws < 0 ? 0 : ws;
	*h1 = hs + g->r < g->h ? hs + g->r : g->h;
	*w1 = ws + g->s < g->w ? ws + g->s : g->w;
}

/* The pool geometry of n for input shape x and output shape y. */
static void
pool_geom(const Node *n, const int64_t *x, const int64_t *y, ConvGeom *g)
{
	if (n->op == OP_ADAPTIVE_AVG_POOL2D || n->op == OP_ADAPTIVE_AVG_POOL2D_BACKWARD) {
		memset(g, 0, sizeof *g);
		g->n = x[0];
		g->c = g->k = x[1];
		g->h = x[2];
		g->w = x[3];
		g->oh = y[2];
		g->ow = y[3];
		return;
	}
	conv_geom(n, x, NULL, g);
}

/* The flat index in plane `plane` of the window's maximum: the first one,
 * or the last NaN (PyTorch's CPU rule: `val > max || isnan(val)`). */
static int64_t
argmax(const Tensor *x, int64_t plane, int64_t W, int64_t h0, int64_t h1,
       int64_t w0, int64_t w1)
{
	int64_t best = -1;
	double m = -INFINITY;
	for (int64_t h = h0; h < h1; h++)
		for (int64_t w = w0; w < w1; w++) {
			double v = interp_getf(x, plane + h * W + w);
			if (best < 0 || v > m || isnan(v)) {
				m = v;
				best = h * W + w;
			}
		}
	return best;
}

/* max_pool2d, avg_pool2d, adaptive_avg_pool2d. */
int
interp_pool2d(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	Tensor *x = in[0], *y = out[0];
	ConvGeom g;
	pool_geom(n, x->shape, y->shape, &g);
	for (int64_t pl = 0; pl < g.n * g.c; pl++)
		for (int64_t oh = 0; oh < g.oh; oh++)
			for (int64_t ow = 0; ow < g.ow; ow++) {
				int64_t h0, h1, w0, w1, cnt, o = (pl * g.oh + oh) * g.ow + ow;
				int64_t plane = pl * g.h * g.w;
				window(n, &g, oh, ow, &h0, &h1, &w0, &w1, &cnt);
				if (n->op == OP_MAX_POOL2D) {
					int64_t k = argmax(x, plane, g.w, h0, h1, w0, w1);
					interp_setf(y, o, k < 0 ? -INFINITY : interp_getf(x, plane + k));
					continue;
				}
				double s = 0;
				for (int64_t h = h0; h < h1; h++)
					for (int64_t w = w0; w < w1; w++)
						s += interp_getf(x, plane + h * g.w + w);
				interp_setf(y, o, s / (double)cnt);
			}
	return 0;
}

/* max_pool2d_backward(g, x): g to each window's maximum;
 * avg_pool2d_backward, adaptive_avg_pool2d_backward(g, shape=): g / count
 * to each element of the window. */
int
interp_pool2d_backward(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	Tensor *gy = in[0], *dx = out[0];
	ConvGeom g;
	pool_geom(n, dx->shape, gy->shape, &g);
	double *acc = calloc((size_t)dx->numel + 1, sizeof *acc);
	if (!acc)
		out_of_memory(0);
	for (int64_t pl = 0; pl < g.n * g.c; pl++)
		for (int64_t oh = 0; oh < g.oh; oh++)
			for (int64_t ow = 0; ow < g.ow; ow++) {
				int64_t h0, h1, w0, w1, cnt, o = (pl * g.oh + oh) * g.ow + ow;
				int64_t plane = pl * g.h * g.w;
				double gv = interp_getf(gy, o);
				window(n, &g, oh, ow, &h0, &h1, &w0, &w1, &cnt);
				if (n->op == OP_MAX_POOL2D_BACKWARD) {
					int64_t k = argmax(in[1], plane, g.w, h0, h1, w0, w1);
					if (k >= 0)
						acc[plane + k] += gv;
					continue;
				}
				for (int64_t h = h0; h < h1; h++)
					for (int64_t w = w0; w < w1; w++)
						acc[plane + h * g.w + w] += gv / (double)cnt;
			}
	for (int64_t i = 0; i < dx->numel; i++)
		interp_setf(dx, i, acc[i]);
	free(acc);
	return 0;
}

/* ------------------------------------------------------------------ batch_norm */

/* Channel c's mean and biased variance over x [N, C, inner...]. */
static void
channel_stats(const Tensor *x, int64_t c, double *mean, double *var)
{
	int64_t C = x->shape[1], inner = x->numel / (x->shape[0] * C), m = x->shape[0] * inner;
	double s = 0, q = 0;
	for (int64_t nb = 0; nb < x->shape[0]; nb++)
		for (int64_t j = 0; j < inner; j++)
			s += interp_getf(x, (nb * C + c) * inner + j);
	*mean = m ? s / (double)m : 0;
	for (int64_t nb = 0; nb < x->shape[0]; nb++)
		for (int64_t j = 0; j < inner; j++) {
			double dv = interp_getf(x, (nb * C + c) * inner + j) - *mean;
			q += dv * dv;
		}
	*var = m ? q / (double)m : 0;
}

/* The mean and rstd batch_norm normalises channel c by: the batch's
 * (training) or the running statistics. */
static void
bn_stats(const Node *n, const Tensor *x, const Tensor *rm, const Tensor *rv, int64_t c,
         double *mean, double *rstd)
{
	double var, eps = ir_attr_float(n, "eps", 1e-5);
	if (ir_attr_int(n, "training", 0)) {
		channel_stats(x, c, mean, &var);
	} else {
		*mean = interp_getf(rm, c);
		var = interp_getf(rv, c);
	}
	*rstd = 1.0 / sqrt(var + eps);
}

/* batch_norm(x, mean, var, w?, b?): (x - mean) * rstd * w + b per channel. */
int
interp_batch_norm(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	Tensor *x = in[0], *y = out[0];
	Tensor *w = n->nopnd > 3 ? in[3] : NULL, *b = n->nopnd > 4 ? in[4] : NULL;
	int64_t C = x->shape[1], inner = x->numel ? x->numel / (x->shape[0] * C) : 0;
	for (int64_t c = 0; c < C; c++) {
		double mean, rstd;
		bn_stats(n, x, in[1], in[2], c, &mean, &rstd);
		double sc = w ? interp_getf(w, c) : 1, sh = b ? interp_getf(b, c) : 0;
		for (int64_t nb = 0; nb < x->shape[0]; nb++)
			for (int64_t j = 0; j < inner; j++) {
				int64_t i = (nb * C + c) * inner + j;
				interp_setf(y, i, (interp_getf(x, i) - mean) * rstd * sc + sh);
			}
	}
	return 0;
}

/* %dx, %dw, %db = batch_norm_backward(g, x, w?) (training) or (g, x, w,
 * mean, var) (eval): with xh the
 * normalised x, dw = sum(g * xh), db = sum(g) per channel, and dx =
 * w * rstd * (g - db / M - xh * dw / M) in training (the batch statistics
 * depend on x), w * rstd * g in eval. */
int
interp_batch_norm_backward(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	Tensor *gy = in[0], *x = in[1], *w = n->nopnd > 2 ? in[2] : NULL;
	Tensor *rm = n->nopnd > 3 ? in[3] : NULL, *rv = n->nopnd > 4 ? in[4] : NULL;
	int64_t C = x->shape[1], inner = x->numel ? x->numel / (x->shape[0] * C) : 0;
	int64_t m = x->shape[0] * inner;
	int training = ir_attr_int(n, "training", 0) != 0;
	for (int64_t c = 0; c < C; c++) {
		double mean, rstd, dw = 0, db = 0;
		bn_stats(n, x, rm, rv, c, &mean, &rstd);
		for (int64_t nb = 0; nb < x->shape[0]; nb++)
			for (int64_t j = 0; j < inner; j++) {
				int64_t i = (nb * C + c) * inner + j;
				double gv = interp_getf(gy, i);
				db += gv;
				dw += gv * (interp_getf(x, i) - mean) * rstd;
			}
		double sc = (w ? interp_getf(w, c) : 1) * rstd;
		for (int64_t nb = 0; nb < x->shape[0]; nb++)
			for (int64_t j = 0; j < inner; j++) {
				int64_t i = (nb * C + c) * inner + j;
				double gv = interp_getf(gy, i), v = gv;
				if (training && m)
					v = gv - db / (double)m - (interp_getf(x, i) - mean) * rstd * dw / (double)m;
				interp_setf(out[0], i, sc * v);
			}
		interp_setf(out[1], c, dw);
		interp_setf(out[2], c, db);
	}
	return 0;
}
