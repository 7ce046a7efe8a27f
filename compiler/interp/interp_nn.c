/*
 * interp_nn.c - interpreter kernels for reductions, softmax, normalisation,
 * losses and indexing.
 *
 * Floating-point work accumulates in double and rounds once to the result
 * dtype (more accurate than PyTorch's f32 accumulation; the difference is
 * within a rounding of the result for the sizes tests use).  Integer sums
 * accumulate in int64, wrapping.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"

/* ------------------------------------------------------------------ reductions */

/* An iterator over x whose off[0] is the index of the output element each
 * input element reduces into; *nout gets the number of outputs. */
static void
reduce_iter(BcastIter *it, const Tensor *x, const int *red, int64_t *nout)
{
	interp_iter_init(it, x->rank, x->shape, NULL, 0);
	it->nop = 1;
	int64_t s = 1;
	for (int d = x->rank - 1; d >= 0; d--) {
		it->stride[0][d] = red[d] ? 0 : s;
		if (!red[d])
			s *= x->shape[d];
	}
	*nout = s;
}

/* The reduction of x by op's combine step (ops.def's RED) into acc[nout],
 * in double. */
static void
reduce_f(int op, const Tensor *x, const int *red, double *acc, int64_t nout)
{
	BcastIter it;
	int64_t no;
	reduce_iter(&it, x, red, &no);
	const OpInfo *o = &op_table[op];
	double init = o->ident == RED_LOWEST ? -INFINITY : o->ident == RED_HIGHEST ? INFINITY
	            : o->ident == RED_ONE ? 1.0 : 0.0;
	for (int64_t oi = 0; oi < nout; oi++)
		acc[oi] = init;
	for (int64_t i = 0; i < x->numel; i++, interp_iter_next(&it)) {
		double *a = &acc[it.off[0]];
		*a = o->combine.d2(*a, interp_getf(x, i));
	}
}

static void
reduce_i(int op, const Tensor *x, const int *red, int64_t *acc, int64_t nout)
{
	BcastIter it;
	int64_t no;
	reduce_iter(&it, x, red, &no);
	const OpInfo *o = &op_table[op];
	int64_t init = o->ident == RED_LOWEST ? INT64_MIN : o->ident == RED_HIGHEST ? INT64_MAX
	             : o->ident == RED_ONE ? 1 : 0;
	for (int64_t oi = 0; oi < nout; oi++)
		acc[oi] = init;
	for (int64_t i = 0; i < x->numel; i++, interp_iter_next(&it)) {
		int64_t *a = &acc[it.off[0]];
		*a = o->combine.i2(*a, interp_geti(x, i));
	}
}

/* Unbiased variance into var[] given the means. */
static void
reduce_var(const Tensor *x, const int *red, const double *mean, double *var,
           int64_t nout, int64_t count)
{
	BcastIter it;
	int64_t no;
	reduce_iter(&it, x, red, &no);
	for (int64_t o = 0; o < nout; o++)
		var[o] = 0;
	for (int64_t i = 0; i < x->numel; i++, interp_iter_next(&it)) {
		double dv = interp_getf(x, i) - mean[it.off[0]];
		var[it.off[0]] += dv * dv;
	}
	/* PyTorch divides by max(0, N - 1): the variance of one element or
	 * of none is 0 / 0, NaN (not 0 / -1). */
	for (int64_t o = 0; o < nout; o++)
		var[o] /= (double)(count > 1 ? count - 1 : 0);
}

int
interp_reduce(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *x = in[0], *r = out[0];
	int red[SG_MAXRANK];
	BcastIter it;
	int64_t nout;
	shape_reduced_dims(n, x->rank, red);
	reduce_iter(&it, x, red, &nout);
	if (nout != r->numel)
		return interp_fail(I, n, "internal: reduction gives %lld elements, "
		                   "result type has %lld", (long long)nout,
		                   (long long)r->numel);
	int64_t count = nout ? x->numel / nout : 0;
	if (!dtype_is_float(x->dt) && !dtype_is_float(r->dt)) {
		int64_t *acc = xmalloc((size_t)nout * sizeof *acc);
		reduce_i(n->op, x, red, acc, nout);
		for (int64_t o = 0; o < nout; o++)
			interp_seti(r, o, acc[o]);
		free(acc);
		return 0;
	}
	double *acc = xmalloc((size_t)nout * 2 * sizeof *acc);
	int finish = op_table[n->op].finish;
	reduce_f(n->op, x, red, acc, nout);
	if (finish != FIN_NONE)
		for (int64_t o = 0; o < nout; o++)
			acc[o] /= (double)count;
	if (finish == FIN_VAR) {
		reduce_var(x, red, acc, acc + nout, nout, count);
		for (int64_t o = 0; o < nout; o++)
			interp_setf(r, o, acc[nout + o]);
		if (n->nres == 2) /* var_mean */
			for (int64_t o = 0; o < nout; o++)
				interp_setf(out[1], o, acc[o]);
	} else {
		for (int64_t o = 0; o < nout; o++)
			interp_setf(r, o, acc[o]);
	}
	free(acc);
	return 0;
}

/* ------------------------------------------------------------------ softmax */

/* x viewed as [outer, len, inner] around dim d. */
static void
split_at(const Tensor *x, int d, int64_t *outer, int64_t *len, int64_t *inner)
{
	*outer = *inner = *len = 1;
	for (int i = 0; i < x->rank; i++) {
		if (i < d)
			*outer *= x->shape[i];
		else if (i == d)
			*len = x->shape[i];
		else
			*inner *= x->shape[i];
	}
}

/* Softmax (or log-softmax) of one row of len elements, stride apart.  The
 * maximum is subtracted first, so a row of -inf (or one holding +inf or
 * NaN) gives NaN, as in PyTorch. */
static void
softmax_row(const Tensor *x, Tensor *r, int64_t base, int64_t len,
            int64_t stride, int log_form)
{
	double m = -INFINITY, s = 0;
	for (int64_t j = 0; j < len; j++) {
		double v = interp_getf(x, base + j * stride);
		m = isnan(v) || v > m ? v : m;
	}
	for (int64_t j = 0; j < len; j++)
		s += exp(interp_getf(x, base + j * stride) - m);
	for (int64_t j = 0; j < len; j++) {
		double v = interp_getf(x, base + j * stride) - m;
		interp_setf(r, base + j * stride, log_form ? v - log(s) : exp(v) / s);
	}
}

int
interp_softmax(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *x = in[0];
	int64_t outer, len, inner;
	int d = x->rank ? shape_norm_dim(ir_attr_int(n, "dim", -1), x->rank) : 0;
	if (d < 0)
		return interp_fail(I, n, "internal: softmax dim out of range");
	split_at(x, d, &outer, &len, &inner);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t k = 0; k < inner; k++)
			softmax_row(x, out[0], o * len * inner + k, len, inner,
			            n->op == OP_LOG_SOFTMAX);
	return 0;
}

/* ------------------------------------------------------------------ normalisation */

/* layer_norm: (x - mean) / sqrt(var + eps) * w + b with the biased
 * variance; rms_norm: x / sqrt(mean(x^2) + eps) * w.  Over the last dim. */
int
interp_layer_norm(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	Tensor *x = in[0], *r = out[0];
	Tensor *w = n->nopnd > 1 ? in[1] : NULL, *b = n->nopnd > 2 ? in[2] : NULL;
	double eps = ir_attr_float(n, "eps", 1e-5);
	int64_t len = x->rank ? x->shape[x->rank - 1] : 1;
	int64_t rows = len ? x->numel / len : 0;
	int rms = n->op == OP_RMS_NORM;
	for (int64_t row = 0; row < rows; row++) {
		int64_t base = row * len;
		double mean = 0, var = 0;
		for (int64_t j = 0; j < len; j++)
			mean += interp_getf(x, base + j);
		mean = rms ? 0 : mean / (double)len;
		for (int64_t j = 0; j < len; j++) {
			double dv = interp_getf(x, base + j) - mean;
			var += dv * dv;
		}
		double rstd = 1.0 / sqrt(var / (double)len + eps);
		for (int64_t j = 0; j < len; j++) {
			double v = (interp_getf(x, base + j) - mean) * rstd;
			if (w)
				v *= interp_getf(w, w->numel == 1 ? 0 : j);
			if (b)
				v += interp_getf(b, b->numel == 1 ? 0 : j);
			interp_setf(r, base + j, v);
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ losses */

/* mean((a - b)^2), a and b broadcast. */
static void
mse_loss(Tensor *a, Tensor *b, Tensor *r)
{
	Tensor *ops[2] = {a, b};
	int64_t shape[SG_MAXRANK] = {0};
	int rank = a->rank > b->rank ? a->rank : b->rank;
	int64_t numel = 1;
	for (int d = 0; d < rank; d++) {
		int da = d - (rank - a->rank), db = d - (rank - b->rank);
		int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
		shape[d] = sa == 1 ? sb : sa;
		numel *= shape[d];
	}
	BcastIter it;
	interp_iter_init(&it, rank, shape, ops, 2);
	double s = 0;
	for (int64_t i = 0; i < numel; i++, interp_iter_next(&it)) {
		double dv = interp_getf(a, it.off[0]) - interp_getf(b, it.off[1]);
		s += dv * dv;
	}
	interp_setf(r, 0, s / (double)numel);
}

/* Mean over the targets that are not ignore_index (-100) of
 * logsumexp(logits) - logits[target], the class dim being 1 (0 for a
 * 1-D input). */
static int
cross_entropy(Interp *I, const Node *n, Tensor *x, Tensor *t, Tensor *r)
{
	int cd = x->rank >= 2 ? 1 : 0;
	int64_t outer, ncls, inner;
	split_at(x, cd, &outer, &ncls, &inner);
	double s = 0;
	int64_t count = 0;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t k = 0; k < inner; k++) {
			int64_t tgt = interp_geti(t, o * inner + k);
			if (tgt == -100)
				continue;
			if (tgt < 0 || tgt >= ncls)
				return interp_fail(I, n, "cross_entropy: target %lld is out "
				                   "of range for %lld classes",
				                   (long long)tgt, (long long)ncls);
			int64_t base = o * ncls * inner + k;
			double m = -INFINITY, e = 0;
			for (int64_t c = 0; c < ncls; c++) {
				double v = interp_getf(x, base + c * inner);
				m = isnan(v) || v > m ? v : m;
			}
			for (int64_t c = 0; c < ncls; c++)
				e += exp(interp_getf(x, base + c * inner) - m);
			s += m + log(e) - interp_getf(x, base + tgt * inner);
			count++;
		}
	interp_setf(r, 0, s / (double)count);
	return 0;
}

int
interp_loss(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	if (n->op == OP_MSE_LOSS) {
		mse_loss(in[0], in[1], out[0]);
		return 0;
	}
	return cross_entropy(I, n, in[0], in[1], out[0]);
}

/* ------------------------------------------------------------------ indexing */

/* out[..., :] = table[idx[...], :]. */
int
interp_embedding(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *idx = in[0], *tab = in[1], *r = out[0];
	int64_t rows = tab->rank ? tab->shape[0] : 1;
	int64_t width = rows ? tab->numel / rows : 0;
	size_t es = (size_t)dtype_size(tab->dt);
	for (int64_t i = 0; i < idx->numel; i++) {
		int64_t k = interp_geti(idx, i);
		if (k < 0 || k >= rows)
			return interp_fail(I, n, "embedding: index %lld is out of range "
			                   "for a table of %lld rows", (long long)k,
			                   (long long)rows);
		memcpy((char *)r->data + (size_t)(i * width) * es,
		       (char *)tab->data + (size_t)(k * width) * es, (size_t)width * es);
	}
	return 0;
}

/* out[p] = x[p with p[dim] = idx[p]]; out has idx's shape. */
int
interp_gather(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *x = in[0], *idx = in[1], *r = out[0];
	int d = x->rank ? shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank) : 0;
	if (d < 0)
		return interp_fail(I, n, "internal: gather dim out of range");
	int64_t xs[SG_MAXRANK];
	interp_strides(x->rank, x->shape, xs);
	BcastIter it;
	interp_iter_init(&it, idx->rank, idx->shape, NULL, 0);
	it.nop = 1;
	for (int k = 0; k < idx->rank; k++)
		it.stride[0][k] = k == d ? 0 : xs[k];
	int64_t size = x->rank ? x->shape[d] : 1;
	size_t es = (size_t)dtype_size(x->dt);
	for (int64_t i = 0; i < idx->numel; i++, interp_iter_next(&it)) {
		int64_t k = interp_geti(idx, i);
		if (k < 0 || k >= size)
			return interp_fail(I, n, "gather: index %lld is out of bounds "
			                   "for size %lld", (long long)k, (long long)size);
		int64_t off = it.off[0] + (x->rank ? k * xs[d] : 0);
		memcpy((char *)r->data + (size_t)i * es,
		       (char *)x->data + (size_t)off * es, es);
	}
	return 0;
}
