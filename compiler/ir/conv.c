/*
 * conv.c - the geometry and the shape rules of conv2d, the 2-D pools and
 * batch_norm (NCHW), and of their backward ops:
 *
 *   conv2d(x [N, C, H, W], w [K, C/groups, R, S], b [K]?, stride=,
 *          padding=, dilation=, groups=)               -> [N, K, OH, OW]
 *   max_pool2d / avg_pool2d(x, kernel_size=, stride=kernel_size,
 *          padding=0)                                  -> [N, C, OH, OW]
 *   adaptive_avg_pool2d(x, output_size=)               -> [N, C, oh, ow]
 *   batch_norm(x [N, C, ...], mean [C], var [C], w [C]?, b [C]?,
 *          training=, momentum=, eps=)                 -> x's type
 *
 * with OH = (H + 2 * pad - dil * (R - 1) - 1) / stride + 1 as PyTorch
 * (floor; pools have dil 1).  stride, padding and dilation are an INT or
 * [h, w].  Errors as PyTorch's, at the attribute or operand that is wrong.
 * The backward ops (made by grad_conv.c) name the shape they give back:
 *
 *   conv2d_backward_input(g, w, shape=x's)             -> dx
 *   conv2d_backward_weight(g, x, shape=w's)            -> dw
 *   max_pool2d_backward(g, x, kernel_size=...)         -> dx (x's type)
 *   avg_pool2d_backward(g, shape=x's, kernel_size=...) -> dx
 *   adaptive_avg_pool2d_backward(g, shape=x's)         -> dx
 *   %dx, %dw, %db = batch_norm_backward(g, x, w?, training=true, eps=)
 *   %dx, %dw, %db = batch_norm_backward(g, x, w, mean, var, eps=)
 *                                                      -> x's, [C], [C]
 *          (training: the batch statistics; eval: the running ones)
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "sgc.h"

/* "'%x' (f32[2, 3, 4, 4])" for value operand i. */
static const char *
desc(char *buf, size_t len, const Graph *g, const Node *n, int i)
{
	const Value *v = &g->vals.v[n->opnd[i].v];
	int k = snprintf(buf, len, "'%%%.100s' (%s[", v->name ? v->name : "?",
	                 dtype_name((DType)v->type.dt));
	for (int j = 0; j < v->type.rank && k > 0 && (size_t)k + 24 < len; j++)
		k += snprintf(buf + k, len - (size_t)k, "%s%" PRId64, j ? ", " : "", v->type.d[j]);
	if (k > 0 && (size_t)k + 3 < len)
		snprintf(buf + k, len - (size_t)k, "])");
	return buf;
}

static const Type *
ot(const Graph *g, const Node *n, int i)
{
	return &g->vals.v[n->opnd[i].v].type;
}

/* The attribute `name` of n, NULL when the op has none or it is unset. */
static const Attr *
aset(const Node *n, const char *name)
{
	int i = op_attr_index(n->op, name);
	if (i < 0 || (uint32_t)i >= n->nattr || !n->attr[i].set)
		return NULL;
	return &n->attr[i];
}

static Loc
aloc(const Node *n, const char *name)
{
	const Attr *a = aset(n, name);
	Loc none = {0};
	return a ? a->loc : none;
}

int
conv_pair(const Node *n, const char *name, int64_t dflt, int64_t out[2])
{
	const Attr *a = aset(n, name);
	out[0] = out[1] = dflt;
	if (!a)
		return 1;
	if (a->nints != 1 && a->nints != 2)
		return 0;
	out[0] = a->ints[0];
	out[1] = a->ints[a->nints - 1];
	return 1;
}

void
conv_geom(const Node *n, const int64_t *x, const int64_t *w, ConvGeom *cg)
{
	memset(cg, 0, sizeof *cg);
	cg->n = x[0];
	cg->c = x[1];
	cg->h = x[2];
	cg->w = x[3];
	int64_t ks[2] = {1, 1};
	if (w) {
		cg->k = w[0];
		ks[0] = w[2];
		ks[1] = w[3];
		cg->groups = ir_attr_int(n, "groups", 1);
	} else {
		cg->k = cg->c;
		conv_pair(n, "kernel_size", 1, ks);
		cg->groups = cg->c;
	}
	cg->r = ks[0];
	cg->s = ks[1];
	conv_pair(n, "stride", 0, cg->stride);
	if (cg->stride[0] == 0 && !w)
		conv_pair(n, "kernel_size", 1, cg->stride);
	else if (cg->stride[0] == 0)
		cg->stride[0] = cg->stride[1] = 1;
	conv_pair(n, "padding", 0, cg->pad);
	conv_pair(n, "dilation", 1, cg->dil);
	for (int i = 0; i < 2; i++) {
		int64_t in = i ? cg->w : cg->h, k = i ? cg->s : cg->r;
		int64_t span = in + 2 * cg->pad[i] - cg->dil[i] * (k - 1) - 1;
		int64_t o = span < 0 || cg->stride[i] <= 0 ? 0 : span / cg->stride[i] + 1;
		if (i)
			cg->ow = o;
		else
			cg->oh = o;
	}
}

int64_t
conv_adaptive_start(int64_t i, int64_t o, int64_t len)
{
	return o ? i * len / o : 0;
}

int64_t
conv_adaptive_end(int64_t i, int64_t o, int64_t len)
{
	return o ? ((i + 1) * len + o - 1) / o : 0;
}

/* Operand i is a 4-D floating tensor. */
static int
need_nchw(Graph *g, Node *n, Diag *d, int i, const char *what)
{
	char b[256];
	const Type *t = ot(g, n, i);
	if (!dtype_is_float((DType)t->dt))
		return shape_fail(g, n, d, n->opnd[i].loc,
		                  "expects a floating-point %s, but %s is not",
		                  what, desc(b, sizeof b, g, n, i));
	if (t->rank != 4)
		return shape_fail(g, n, d, n->opnd[i].loc,
		                  "expects a 4-D %s [N, C, H, W], but %s is not",
		                  what, desc(b, sizeof b, g, n, i));
	return 1;
}

/* Operand i has operand 0's dtype. */
static int
need_dtype(Graph *g, Node *n, Diag *d, int i, int of)
{
	char a[256], b[256];
	if (ot(g, n, i)->dt == ot(g, n, of)->dt)
		return 1;
	return shape_fail(g, n, d, n->opnd[i].loc, "operands must have the same dtype: %s and %s",
	                  desc(a, sizeof a, g, n, of), desc(b, sizeof b, g, n, i));
}

/* stride, padding, dilation (those n has): an INT or [h, w], strides and
 * dilations positive, paddings not negative. */
static int
check_pairs(Graph *g, Node *n, Diag *d)
{
	static const char *const names[] = {"kernel_size", "stride", "padding", "dilation"};
	for (int i = 0; i < 4; i++) {
		int64_t v[2];
		if (op_attr_index(n->op, names[i]) < 0)
			continue;
		Loc at = aloc(n, names[i]);
		if (!conv_pair(n, names[i], 0, v))
			return shape_fail(g, n, d, at,
			                  "%s must be an integer or a list of two", names[i]);
		if (!aset(n, names[i]))
			continue;
		if (i == 2 && (v[0] < 0 || v[1] < 0))
			return shape_fail(g, n, d, at,
			                  "padding must not be negative, but is [%" PRId64
			                  ", %" PRId64 "]", v[0], v[1]);
		if (i != 2 && (v[0] <= 0 || v[1] <= 0))
			return shape_fail(g, n, d, at,
			                  "%s must be positive, but is [%" PRId64 ", %" PRId64 "]",
			                  names[i], v[0], v[1]);
		if (v[0] > INT32_MAX || v[1] > INT32_MAX)
			return shape_fail(g, n, d, at,
			                  "%s [%" PRId64 ", %" PRId64 "] is too large", names[i],
			                  v[0], v[1]);
	}
	return 1;
}

/* The output size of cg fits: the (dilated) kernel within the padded
 * input; for pools, padding at most half the kernel (PyTorch's rule). */
static int
check_fit(Graph *g, Node *n, Diag *d, const ConvGeom *cg, int pool)
{
	char b[256];
	int64_t k[2] = {cg->r, cg->s}, in[2] = {cg->h, cg->w};
	for (int i = 0; i < 2; i++) {
		if (pool && cg->pad[i] * 2 > k[i])
			return shape_fail(g, n, d, aloc(n, "padding"),
			                  "padding should be at most half of "
			                  "the kernel size, but padding is %" PRId64 " and the kernel %" PRId64,
			                  cg->pad[i], k[i]);
		if (in[i] + 2 * cg->pad[i] < cg->dil[i] * (k[i] - 1) + 1)
			return shape_fail(g, n, d, pool ? aloc(n, "kernel_size") : n->opnd[1].loc,
			                  "the kernel (%" PRId64 "x%" PRId64 ", dilation [%" PRId64 ", %" PRId64
			                  "]) is larger than the padded input %s (%" PRId64 "x%" PRId64 ")",
			                  cg->r, cg->s, cg->dil[0], cg->dil[1], desc(b, sizeof b, g, n, 0),
			                  cg->h + 2 * cg->pad[0], cg->w + 2 * cg->pad[1]);
	}
	return 1;
}

/* conv2d's checks on x [N, C, H, W] and w [K, C/groups, R, S]: weight
 * operand wi, the output into cg. */
static int
conv_check(Graph *g, Node *n, Diag *d, const int64_t *x, const int64_t *w, int wi,
           ConvGeom *cg)
{
	char a[256];
	int64_t groups = ir_attr_int(n, "groups", 1);
	if (!check_pairs(g, n, d))
		return 0;
	if (groups <= 0)
		return shape_fail(g, n, d, aloc(n, "groups"),
		                  "groups must be positive, but is %" PRId64,
		                  groups);
	if (groups > INT32_MAX)
		return shape_fail(g, n, d, aloc(n, "groups"),
		                  "groups=%" PRId64 " is too large", groups);
	if (x[1] % groups)
		return shape_fail(g, n, d, aloc(n, "groups"),
		                  "the input's %" PRId64 " channels are not "
		                  "divisible by groups=%" PRId64, x[1], groups);
	if (w[0] % groups)
		return shape_fail(g, n, d, n->opnd[wi].loc,
		                  "the weight's %" PRId64 " out channels are "
		                  "not divisible by groups=%" PRId64, w[0], groups);
	if (w[1] != x[1] / groups)
		return shape_fail(g, n, d, n->opnd[wi].loc, "the weight %s must be [K, %" PRId64
		                  ", R, S] for %" PRId64 " input channels and groups=%" PRId64,
		                  desc(a, sizeof a, g, n, wi), x[1] / groups, x[1], groups);
	if (w[2] > INT32_MAX || w[3] > INT32_MAX)
		return shape_fail(g, n, d, n->opnd[wi].loc, "the weight %s has a kernel too large",
		                  desc(a, sizeof a, g, n, wi));
	conv_geom(n, x, w, cg);
	return check_fit(g, n, d, cg, 0);
}

/* conv2d(x, w, b?). */
int
shape_conv2d(Graph *g, Node *n, Diag *d)
{
	char a[256];
	if (!need_nchw(g, n, d, 0, "input") || !need_nchw(g, n, d, 1, "weight") ||
	    !need_dtype(g, n, d, 1, 0))
		return 0;
	const Type *x = ot(g, n, 0), *w = ot(g, n, 1);
	ConvGeom cg;
	if (!conv_check(g, n, d, x->d, w->d, 1, &cg))
		return 0;
	if (n->nopnd > 2) {
		const Type *b = ot(g, n, 2);
		if (b->rank != 1 || b->d[0] != w->d[0])
			return shape_fail(g, n, d, n->opnd[2].loc,
			                  "the bias must be [%" PRId64 "], but %s is not",
			                  w->d[0], desc(a, sizeof a, g, n, 2));
		if (!need_dtype(g, n, d, 2, 0))
			return 0;
	}
	int64_t r[4] = {cg.n, cg.k, cg.oh, cg.ow};
	return shape_give(g, n, d, 0, (DType)x->dt, r, 4);
}

/* The pool geometry of n over x [N, C, H, W]. */
static int
pool_check(Graph *g, Node *n, Diag *d, const int64_t *x, ConvGeom *cg)
{
	if (!check_pairs(g, n, d))
		return 0;
	conv_geom(n, x, NULL, cg);
	return check_fit(g, n, d, cg, 1);
}

/* max_pool2d, avg_pool2d. */
int
shape_pool2d(Graph *g, Node *n, Diag *d)
{
	if (!need_nchw(g, n, d, 0, "input"))
		return 0;
	const Type *x = ot(g, n, 0);
	ConvGeom cg;
	if (!pool_check(g, n, d, x->d, &cg))
		return 0;
	int64_t r[4] = {cg.n, cg.c, cg.oh, cg.ow};
	return shape_give(g, n, d, 0, (DType)x->dt, r, 4);
}

/* adaptive_avg_pool2d(x, output_size=): an INT or [h, w], positive. */
int
shape_adaptive_pool2d(Graph *g, Node *n, Diag *d)
{
	if (!need_nchw(g, n, d, 0, "input"))
		return 0;
	int64_t o[2];
	Loc at = aloc(n, "output_size");
	if (!conv_pair(n, "output_size", 0, o))
		return shape_fail(g, n, d, at, "output_size must be an integer or a list of two");
	if (o[0] <= 0 || o[1] <= 0)
		return shape_fail(g, n, d, at,
		                  "output_size must be positive, but is [%" PRId64 ", %" PRId64
		                  "]", o[0], o[1]);
	if (o[0] > INT32_MAX || o[1] > INT32_MAX)
		return shape_fail(g, n, d, at,
		                  "output_size [%" PRId64 ", %" PRId64 "] is too large", o[0],
		                  o[1]);
	const Type *x = ot(g, n, 0);
	char b[256];
	if (x->d[2] == 0 || x->d[3] == 0)
		return shape_fail(g, n, d, n->opnd[0].loc,
		                  "expects an input with non-zero height and "
		                  "width, but %s has none", desc(b, sizeof b, g, n, 0));
	int64_t r[4] = {x->d[0], x->d[1], o[0], o[1]};
	return shape_give(g, n, d, 0, (DType)x->dt, r, 4);
}

/* batch_norm's per-channel operands [first, nopnd): [C] of x's dtype. */
static int
channel_operands(Graph *g, Node *n, Diag *d, int first, int x)
{
	char a[256];
	static const char *const fwd[] = {"running mean", "running var", "weight", "bias"};
	static const char *const bwd[] = {"weight", "running mean", "running var"};
	const char *const *what = n->op == OP_BATCH_NORM ? fwd : bwd;
	int64_t c = ot(g, n, x)->d[1];
	for (int i = first; i < (int)n->nopnd; i++) {
		const Type *t = ot(g, n, i);
		if (t->rank != 1 || t->d[0] != c)
			return shape_fail(g, n, d, n->opnd[i].loc,
			                  "the %s must be [%" PRId64 "] (the channels, "
			                  "dim 1 of the input), but %s is not", what[i - first], c,
			                  desc(a, sizeof a, g, n, i));
		if (!dtype_is_float((DType)t->dt))
			return shape_fail(g, n, d, n->opnd[i].loc,
			                  "the %s must be floating-point, but %s is not",
			                  what[i - first], desc(a, sizeof a, g, n, i));
		/* the running statistics may be f32 for a bf16 input (autocast) */
		if (strncmp(what[i - first], "running", 7) != 0 && !need_dtype(g, n, d, i, x))
			return 0;
	}
	return 1;
}

/* x [N, C, ...] (2 to 5 dims, as PyTorch's BatchNorm1d/2d/3d), floating,
 * with more than one value per channel in training. */
static int
bn_input(Graph *g, Node *n, Diag *d, int x)
{
	char a[256];
	const Type *t = ot(g, n, x);
	if (!dtype_is_float((DType)t->dt))
		return shape_fail(g, n, d, n->opnd[x].loc,
		                  "expects a floating-point input, but %s is not",
		                  desc(a, sizeof a, g, n, x));
	if (t->rank < 2)
		return shape_fail(g, n, d, n->opnd[x].loc,
		                  "expects an input [N, C, ...] with at least two "
		                  "dims, but %s is not", desc(a, sizeof a, g, n, x));
	return 1;
}

int
shape_batch_norm(Graph *g, Node *n, Diag *d)
{
	if (!bn_input(g, n, d, 0) || !channel_operands(g, n, d, 1, 0))
		return 0;
	const Type *x = ot(g, n, 0);
	int64_t per = 1;
	for (int i = 0; i < x->rank; i++)
		per *= i == 1 ? 1 : x->d[i];
	if (ir_attr_int(n, "training", 0) && per <= 1)
		return shape_fail(g, n, d, n->opnd[0].loc,
		                  "expected more than 1 value per channel when "
		                  "training, got %" PRId64, per);
	double eps = ir_attr_float(n, "eps", 1e-5);
	if (!(eps >= 0))
		return shape_fail(g, n, d, aloc(n, "eps"), "eps must not be negative");
	return shape_give(g, n, d, 0, (DType)x->dt, x->d, x->rank);
}

/* ------------------------------------------------------------------ backward */

/* A `shape=` of 4 non-negative sizes. */
static int
shape_attr(Graph *g, Node *n, Diag *d, int64_t *out)
{
	const Attr *s = aset(n, "shape");
	if (!s || s->nints != 4)
		return shape_fail(g, n, d, aloc(n, "shape"), "shape must have 4 sizes");
	for (int i = 0; i < 4; i++) {
		if (s->ints[i] < 0 || s->ints[i] > INT32_MAX)
			return shape_fail(g, n, d, s->loc,
			                  "shape must have sizes from 0 to 2^31 - 1");
		out[i] = s->ints[i];
	}
	return 1;
}

/* The gradient (operand 0) has the forward result's shape r. */
static int
grad_fits(Graph *g, Node *n, Diag *d, const int64_t *r)
{
	char a[256];
	const Type *t = ot(g, n, 0);
	if (t->rank == 4 && memcmp(t->d, r, 4 * sizeof *r) == 0)
		return 1;
	return shape_fail(g, n, d, n->opnd[0].loc,
	                  "the gradient must be [%" PRId64 ", %" PRId64 ", %"
	                  PRId64 ", %" PRId64 "] (the forward result), but %s is not", r[0], r[1],
	                  r[2], r[3], desc(a, sizeof a, g, n, 0));
}

/* The gradient (operand 0) has the forward result's shape r: the result
 * is s of its dtype. */
static int
grad_gives(Graph *g, Node *n, Diag *d, const int64_t *r, const int64_t *s)
{
	return grad_fits(g, n, d, r) && shape_give(g, n, d, 0, (DType)ot(g, n, 0)->dt, s, 4);
}

/* conv2d_backward_input(g, w, shape=x), conv2d_backward_weight(g, x,
 * shape=w). */
int
shape_conv2d_backward(Graph *g, Node *n, Diag *d)
{
	int64_t s[4];
	if (!need_nchw(g, n, d, 0, "gradient") || !need_nchw(g, n, d, 1, "operand") ||
	    !need_dtype(g, n, d, 1, 0) || !shape_attr(g, n, d, s))
		return 0;
	int in = n->op == OP_CONV2D_BACKWARD_INPUT;
	const int64_t *x = in ? s : ot(g, n, 1)->d, *w = in ? ot(g, n, 1)->d : s;
	ConvGeom cg;
	if (!conv_check(g, n, d, x, w, in ? 1 : 0, &cg))
		return 0;
	int64_t r[4] = {cg.n, cg.k, cg.oh, cg.ow};
	return grad_gives(g, n, d, r, s);
}

/* max_pool2d_backward(g, x), avg_pool2d_backward(g, shape=),
 * adaptive_avg_pool2d_backward(g, shape=). */
int
shape_pool2d_backward(Graph *g, Node *n, Diag *d)
{
	int64_t s[4];
	if (!need_nchw(g, n, d, 0, "gradient"))
		return 0;
	if (n->op == OP_MAX_POOL2D_BACKWARD) {
		if (!need_nchw(g, n, d, 1, "input") || !need_dtype(g, n, d, 1, 0))
			return 0;
		memcpy(s, ot(g, n, 1)->d, sizeof s);
	} else if (!shape_attr(g, n, d, s)) {
		return 0;
	}
	int64_t r[4] = {s[0], s[1], 0, 0};
	if (n->op == OP_ADAPTIVE_AVG_POOL2D_BACKWARD) {
		const Type *t = ot(g, n, 0);
		r[2] = t->d[2];
		r[3] = t->d[3];
	} else {
		ConvGeom cg;
		if (!pool_check(g, n, d, s, &cg))
			return 0;
		r[2] = cg.oh;
		r[3] = cg.ow;
	}
	return grad_gives(g, n, d, r, s);
}

/* %dx, %dw, %db = batch_norm_backward(g, x, w?) (training),
 * batch_norm_backward(g, x, w, mean, var) (eval). */
int
shape_batch_norm_backward(Graph *g, Node *n, Diag *d)
{
	char a[256];
	if (!bn_input(g, n, d, 1) || !need_dtype(g, n, d, 0, 1) ||
	    !channel_operands(g, n, d, 2, 1))
		return 0;
	int training = ir_attr_int(n, "training", 0) != 0;
	if (training ? n->nopnd > 3 : n->nopnd != 5)
		return shape_fail(g, n, d, n->loc,
		                  "takes (g, x, w?) in training and (g, x, w, mean, "
		                  "var) in eval, not %u operands", n->nopnd);
	const Type *x = ot(g, n, 1), *gt = ot(g, n, 0);
	if (!type_same_shape(x, gt))
		return shape_fail(g, n, d, n->opnd[0].loc,
		                  "the gradient must have the input's shape, "
		                  "but %s does not", desc(a, sizeof a, g, n, 0));
	int64_t c = x->d[1];
	return shape_give(g, n, d, 0, (DType)x->dt, x->d, x->rank) &&
	       shape_give(g, n, d, 1, (DType)x->dt, &c, 1) &&
	       shape_give(g, n, d, 2, (DType)x->dt, &c, 1) &&
	       (n->nres == 3 || shape_fail(g, n, d, n->loc, "gives 3 results, but the statement "
	                                   "names %u", n->nres));
}
