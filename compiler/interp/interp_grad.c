/*
 * interp_grad.c - interpreter kernels of the backward ops autograd makes
 * (gelu_backward, layer_norm_backward, rms_norm_backward,
 * scaled_dot_product_attention_backward, embedding_backward,
 * gather_backward, cross_entropy_backward).
 *
 * Like interp_nn.c they compute in double and round once to the result
 * dtype; the formulas are PyTorch's backward kernels'.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"

/* ------------------------------------------------------------------ gelu */

/* gelu_backward(g, x) = g * gelu'(x) (the op table's formula,
 * runtime/sgk/sgk_pointwise.h). */
int
interp_gelu_backward(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	const PwFormula *f = op_formula(n);
	for (int64_t i = 0; i < out[0]->numel; i++)
		interp_setf(out[0], i, f->d2(interp_getf(in[0], i), interp_getf(in[1], i)));
	return 0;
}

/* ------------------------------------------------------------------ normalisation */

/* dx of layer_norm (mean-centred) or rms_norm over the last dim: with
 * xhat the normalised x and gh = g * w,
 *   layer_norm: rstd * (gh - mean(gh) - xhat * mean(gh * xhat))
 *   rms_norm:   rstd * (gh - xhat * mean(gh * xhat));
 * plus the residual operand (rounded once); with a second and third result, the weight's gradient (the sum of
 * g * xhat over the rows) and the bias's (the sum of g). */
int
interp_norm_backward(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	int wi = ir_norm_bwd_weight(n), ri = ir_norm_bwd_residual(n);
	Tensor *g = in[0], *x = in[1], *w = wi > 0 ? in[wi] : NULL, *res = ri > 0 ? in[ri] : NULL;
	double eps = ir_attr_float(n, "eps", 1e-5);
	int rms = n->op == OP_RMS_NORM_BACKWARD;
	int64_t len = x->shape[x->rank - 1], rows = len ? x->numel / len : 0;
	double *xh = xmalloc((size_t)(len + 1) * sizeof *xh);
	double *gh = xmalloc((size_t)(len + 1) * sizeof *gh);
	double *dw = xmalloc((size_t)(len + 1) * sizeof *dw);
	double *db = xmalloc((size_t)(len + 1) * sizeof *db);
	memset(dw, 0, (size_t)(len + 1) * sizeof *dw);
	memset(db, 0, (size_t)(len + 1) * sizeof *db);
	for (int64_t r = 0; r < rows; r++) {
		int64_t base = r * len;
		double mean = 0, var = 0, mg = 0, mgx = 0;
		for (int64_t j = 0; j < len; j++)
			mean += interp_getf(x, base + j);
		mean = rms ? 0 : mean / (double)len;
		for (int64_t j = 0; j < len; j++) {
			double dv = interp_getf(x, base + j) - mean;
			var += dv * dv;
		}
		double rstd = 1.0 / sqrt(var / (double)len + eps);
		for (int64_t j = 0; j < len; j++) {
			xh[j] = (interp_getf(x, base + j) - mean) * rstd;
			dw[j] += interp_getf(g, base + j) * xh[j];
			db[j] += interp_getf(g, base + j);
			gh[j] = interp_getf(g, base + j) * (w ? interp_getf(w, j) : 1.0);
			mg += gh[j];
			mgx += gh[j] * xh[j];
		}
		mg = rms ? 0 : mg / (double)len;
		mgx /= (double)len;
		for (int64_t j = 0; j < len; j++)
			interp_setf(out[0], base + j, rstd * (gh[j] - mg - xh[j] * mgx) +
			            (res ? interp_getf(res, base + j) : 0.0));
	}
	for (int64_t j = 0; j < len; j++) {
		if (n->nres > 1)
			interp_setf(out[1], j, dw[j]);
		if (n->nres > 2)
			interp_setf(out[2], j, db[j]);
	}
	free(xh);
	free(gh);
	free(dw);
	free(db);
	return 0;
}

/* ------------------------------------------------------------------ attention */

void
interp_attn_loop(AttnLoop *a, const Node *n, const Tensor *const t[6])
{
	static const int64_t none[1] = {1};
	int rank[6];
	const int64_t *d[6];
	for (int k = 0; k < 6; k++) {
		rank[k] = t[k] ? t[k]->rank : 0;
		d[k] = t[k] ? t[k]->shape : none;
	}
	const Tensor *q = t[0], *k = t[1];
	int64_t group = 1;
	if (ir_attr_int(n, "enable_gqa", 0) && q->rank >= 3 && k->rank >= 3 &&
	    k->shape[k->rank - 3] > 0 && q->shape[q->rank - 3] != k->shape[k->rank - 3])
		group = q->shape[q->rank - 3] / k->shape[k->rank - 3];
	a->brank = shape_attn_bcast(6, rank, d, group, 1u << 1 | 1u << 2 | 1u << 4 | 1u << 5,
	                            a->shape, a->st);
	a->nb = 1;
	for (int i = 0; i < a->brank; i++)
		a->nb *= a->shape[i];
	const Tensor *m = a->mask = t[3];
	a->mrs = m && m->rank >= 2 && m->shape[m->rank - 2] != 1 ? m->shape[m->rank - 1] : 0;
	a->mcs = m && m->rank >= 1 && m->shape[m->rank - 1] != 1 ? 1 : 0;
}

void
interp_attn_offsets(const AttnLoop *a, int64_t b, int64_t *off)
{
	for (int k = 0; k < 6; k++)
		off[k] = 0;
	for (int d = a->brank - 1; d >= 0; d--) {
		int64_t i = b % a->shape[d];
		b /= a->shape[d];
		for (int k = 0; k < 6; k++)
			off[k] += i * a->st[k][d];
	}
}

double
interp_attn_bias(const AttnLoop *a, int64_t moff, int64_t i, int64_t j)
{
	const Tensor *m = a->mask;
	if (!m)
		return 0;
	double x = interp_getf(m, moff + i * a->mrs + j * a->mcs);
	return m->dt != DT_BOOL ? x : x != 0 ? 0 : -INFINITY;
}

/* Row i of the attention probabilities (scaled, masked softmax of q k^T)
 * into p[tk]. */
static void
attn_row(const AttnLoop *a, const Tensor *q, int64_t qo, const Tensor *k, int64_t ko,
         int64_t mo, int64_t i, int64_t tk, int64_t e, double scale, int causal, double *p)
{
	double m = -INFINITY, s = 0;
	for (int64_t j = 0; j < tk; j++) {
		double v = 0;
		for (int64_t c = 0; c < e; c++)
			v += interp_getf(q, qo + i * e + c) * interp_getf(k, ko + j * e + c);
		p[j] = causal && j > i ? -INFINITY : v * scale + interp_attn_bias(a, mo, i, j);
		m = isnan(p[j]) || p[j] > m ? p[j] : m;
	}
	for (int64_t j = 0; j < tk; j++)
		s += m == -INFINITY ? 0 : exp(p[j] - m);
	for (int64_t j = 0; j < tk; j++)
		p[j] = m == -INFINITY ? 0 : exp(p[j] - m) / s;
}

/* The gradients of softmax(q k^T * scale + mask) v for batch b, added
 * to dq, dk, dv: dv = Pd^T g, dP = (g v^T) * z, dS = P * (dP - rowsum(dP *
 * P)), dq = dS k * scale, dk = dS^T q * scale, where z are the dropout
 * factors of n's dropout_p (Pd = P * z; without dropout z = 1).  off:
 * g's, q's, k's, v's and the mask's offsets. */
static void
attn_back(Interp *I, const Node *n, const AttnLoop *a, Tensor **in, int64_t b,
          const int64_t off[5], double *dq, double *dk, double *dv, int64_t tq, int64_t tk,
          int64_t e, int64_t ev, double scale, int causal)
{
	Tensor *g = in[0], *q = in[1], *k = in[2], *v = in[3];
	double *p = xmalloc((size_t)(tk + 1) * sizeof *p);
	double *dp = xmalloc((size_t)(tk + 1) * sizeof *dp);
	double *z = ir_draws(n) ? xmalloc((size_t)(tk + 1) * sizeof *z) : NULL;
	for (int64_t i = 0; i < tq; i++) {
		attn_row(a, q, off[1], k, off[2], off[4], i, tk, e, scale, causal, p);
		if (z)
			interp_attn_drop_row(I, n, (DType)q->dt, b * tq + i, tk, z);
		double dot = 0;
		for (int64_t j = 0; j < tk; j++) {
			double s = 0, pd = z ? p[j] * z[j] : p[j];
			for (int64_t c = 0; c < ev; c++) {
				double gc = interp_getf(g, off[0] + i * ev + c);
				s += gc * interp_getf(v, off[3] + j * ev + c);
				dv[j * ev + c] += pd * gc;
			}
			dp[j] = z ? s * z[j] : s;
			dot += dp[j] * p[j];
		}
		for (int64_t j = 0; j < tk; j++) {
			double ds = p[j] * (dp[j] - dot) * scale;
			if (ds == 0)
				continue;
			for (int64_t c = 0; c < e; c++) {
				dq[i * e + c] += ds * interp_getf(k, off[2] + j * e + c);
				dk[j * e + c] += ds * interp_getf(q, off[1] + i * e + c);
			}
		}
	}
	free(p);
	free(dp);
	free(z);
}

/* dq, dk, dv of each batch (batch dims broadcast, as the forward's; with
 * enable_gqa dk and dv summed over each head's group). */
int
interp_sdpa_backward(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *q = in[1], *k = in[2], *v = in[3];
	int64_t tq = q->shape[q->rank - 2], e = q->shape[q->rank - 1];
	int64_t tk = k->shape[k->rank - 2], ev = v->shape[v->rank - 1];
	const Attr *sa = ir_attr(n, "scale");
	double scale = sa ? sa->f : 1.0 / sqrt((double)e);
	int causal = ir_attr_int(n, "causal", 0) != 0;
	const Tensor *t[6] = {q, k, v, n->nopnd > 4 ? in[4] : NULL, out[1], out[2]};
	AttnLoop al;
	interp_attn_loop(&al, n, t);
	double *acc[3];
	for (int r = 0; r < 3; r++)
		acc[r] = calloc((size_t)out[r]->numel + 1, sizeof **acc);
	if (!acc[0] || !acc[1] || !acc[2])
		out_of_memory(0);
	for (int64_t b = 0; b < al.nb; b++) {
		int64_t o[6];
		interp_attn_offsets(&al, b, o);
		int64_t off[5] = {b * tq * ev, o[0], o[1], o[2], o[3]};
		attn_back(I, n, &al, in, b, off, acc[0] + b * tq * e, acc[1] + o[4], acc[2] + o[5],
		          tq, tk, e, ev, scale, causal);
	}
	for (int r = 0; r < 3; r++) {
		for (int64_t j = 0; j < out[r]->numel; j++)
			interp_setf(out[r], j, acc[r][j]);
		free(acc[r]);
	}
	return 0;
}

/* ------------------------------------------------------------------ indexing */

/* Rounds a double accumulator into r. */
static void
store(Tensor *r, const double *acc)
{
	for (int64_t i = 0; i < r->numel; i++)
		interp_setf(r, i, acc[i]);
}

/* out[idx[i], :] += g[i, :] into a zero [rows, D] table. */
int
interp_embedding_backward(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *g = in[0], *idx = in[1], *r = out[0];
	int64_t rows = r->shape[0], width = r->shape[1];
	double *acc = calloc((size_t)r->numel + 1, sizeof *acc);
	if (!acc)
		out_of_memory(0);
	for (int64_t i = 0; i < idx->numel; i++) {
		int64_t k = interp_geti(idx, i);
		if (k < 0 || k >= rows) {
			free(acc);
			return interp_fail(I, n, "embedding_backward: index %lld is out "
			                   "of range for %lld rows", (long long)k,
			                   (long long)rows);
		}
		for (int64_t j = 0; j < width; j++)
			acc[k * width + j] += interp_getf(g, i * width + j);
	}
	store(r, acc);
	free(acc);
	return 0;
}

/* out[p with p[dim] = idx[p]] += g[p] into zeros of the result's shape. */
int
interp_gather_backward(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *g = in[0], *idx = in[1], *r = out[0];
	int d = (int)ir_attr_int(n, "dim", 0);
	int64_t rs[SG_MAXRANK], gs[SG_MAXRANK];
	interp_strides(r->rank, r->shape, rs);
	interp_strides(g->rank, g->shape, gs);
	double *acc = calloc((size_t)r->numel + 1, sizeof *acc);
	if (!acc)
		out_of_memory(0);
	int64_t size = r->rank ? r->shape[d] : 1;
	for (int64_t i = 0; i < g->numel; i++) {
		int64_t k = interp_geti(idx, i), off = 0;
		if (k < 0 || k >= size) {
			free(acc);
			return interp_fail(I, n, "gather_backward: index %lld is out of "
			                   "bounds for size %lld", (long long)k,
			                   (long long)size);
		}
		for (int j = 0; j < g->rank; j++) {
			int64_t pj = (i / gs[j]) % g->shape[j];
			off += (j == d ? k : pj) * rs[j];
		}
		acc[off] += interp_getf(g, i);
	}
	store(r, acc);
	free(acc);
	return 0;
}

/* ------------------------------------------------------------------ losses */

/* d mean cross_entropy / d logits = (softmax - onehot(target)) * g / count
 * over the targets that are not ignore_index (-100), which get 0. */
int
interp_cross_entropy_backward(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *g = in[0], *x = in[1], *t = in[2], *r = out[0];
	int cd = x->rank >= 2 ? 1 : 0;
	int64_t outer = 1, ncls = x->shape[cd], inner = 1, count = 0;
	for (int i = 0; i < cd; i++)
		outer *= x->shape[i];
	for (int i = cd + 1; i < x->rank; i++)
		inner *= x->shape[i];
	for (int64_t i = 0; i < t->numel; i++)
		count += interp_geti(t, i) != -100;
	double w = interp_getf(g, 0) / (double)count;
	double *p = xmalloc((size_t)(ncls + 1) * sizeof *p);
	for (int64_t o = 0; o < outer; o++)
		for (int64_t k = 0; k < inner; k++) {
			int64_t tgt = interp_geti(t, o * inner + k);
			int64_t base = o * ncls * inner + k;
			if (tgt != -100 && (tgt < 0 || tgt >= ncls)) {
				free(p);
				return interp_fail(I, n, "cross_entropy_backward: target %lld "
				                   "is out of range for %lld classes",
				                   (long long)tgt, (long long)ncls);
			}
			double m = -INFINITY, s = 0;
			for (int64_t c = 0; c < ncls; c++) {
				p[c] = interp_getf(x, base + c * inner);
				m = isnan(p[c]) || p[c] > m ? p[c] : m;
			}
			for (int64_t c = 0; c < ncls; c++)
				s += exp(p[c] - m);
			for (int64_t c = 0; c < ncls; c++) {
				double v = tgt == -100 ? 0 : w * (exp(p[c] - m) / s - (c == tgt));
				interp_setf(r, base + c * inner, v);
			}
		}
	free(p);
	return 0;
}
