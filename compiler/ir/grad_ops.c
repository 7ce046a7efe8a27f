/*
 * grad_ops.c - shape rules of the ops autograd makes (ops.def's
 * "derivatives" and "optimizer updates" groups).  A user may write them
 * too (they print in --emit=ir and parse back), so they check their
 * operands as any rule does:
 *
 *   gelu_backward(%g, %x, approximate=)        -> x's type
 *   %dx[, %dw[, %db]] = layer_norm_backward(%g, %x, %w?, %r?, eps=,
 *                   residual=)
 *   %dx[, %dw] = rms_norm_backward(%g, %x, %w?, %r?, eps=, residual=)
 *                                              -> dx of x's type (plus %r,
 *                                              there with residual=true);
 *                                              dw, db (with %w) of w's
 *   %dq, %dk, %dv = scaled_dot_product_attention_backward(%g, %q, %k, %v,
 *                   causal=, scale=)           -> at the broadcast batch shape
 *   embedding_backward(%g, %idx, rows=V)       -> [V, D]
 *   gather_backward(%g, %idx, dim=, shape=)    -> shape
 *   cross_entropy_backward(%g, %logits, %target) -> logits' type
 *   sgd_update_(%p, %g, ...), adamw_update_(%p, %g, ...): no result; %p a
 *                   param, %g of its type
 */
#include <string.h>

#include "sgc.h"

/* The type of value operand i. */
static const Type *
ot(Graph *g, const Node *n, int i)
{
	return &g->vals.v[n->opnd[i].v].type;
}

/* Result i of n gets shape d[rank] and dtype dt. */
static int
result(Graph *g, Node *n, Diag *d, uint32_t i, DType dt, const int64_t *dims,
       int rank)
{
	if (i >= n->nres)
		return shape_fail(g, n, d, n->loc, "gives %u results, but the statement names %u",
		                  i + 1, n->nres);
	Type t;
	memset(&t, 0, sizeof t);
	t.dt = (uint8_t)dt;
	t.rank = (uint8_t)rank;
	for (int k = 0; k < SG_MAXRANK; k++)
		t.sym[k] = -1;
	for (int k = 0; k < rank; k++)
		t.d[k] = dims[k];
	g->vals.v[n->res[i]].type = t;
	return 1;
}

/* Same dtype and shape. */
static int
same_type(const Type *a, const Type *b)
{
	return a->dt == b->dt && type_same_shape(a, b);
}

/* Operand i is a floating tensor with x's type. */
static int
like(Graph *g, Node *n, Diag *d, int i, int x, const char *what)
{
	if (!dtype_is_float((DType)ot(g, n, x)->dt))
		return shape_fail(g, n, d, n->loc, "expects floating-point tensors");
	if (!same_type(ot(g, n, i), ot(g, n, x)))
		return shape_fail(g, n, d, n->loc,
		                  "the %s must have the type of operand %d", what, x + 1);
	return 1;
}

/* gelu_backward(g, x): g and x of one floating type. */
int
shape_gelu_backward(Graph *g, Node *n, Diag *d)
{
	if (!like(g, n, d, 0, 1, "gradient"))
		return 0;
	const Type *t = ot(g, n, 1);
	return result(g, n, d, 0, (DType)t->dt, t->d, t->rank);
}

/* layer_norm_backward, rms_norm_backward: g and x of one type, w [D], with
 * residual=true a last operand of x's type summed into dx; dx, and with w
 * the weight's gradient (sum of g * xhat over the rows) and for
 * layer_norm the bias's (sum of g), as many as the statement names. */
int
shape_norm_backward(Graph *g, Node *n, Diag *d)
{
	if (!like(g, n, d, 0, 1, "gradient"))
		return 0;
	const Type *x = ot(g, n, 1);
	if (x->rank == 0)
		return shape_fail(g, n, d, n->loc, "expects a tensor with at least one dim");
	int r = ir_norm_bwd_residual(n), wi = ir_norm_bwd_weight(n);
	if (r == 1)
		return shape_fail(g, n, d, n->loc,
		                  "residual=true needs the gradient summed into dx "
		                  "as the last operand");
	if (r > 0 && !like(g, n, d, r, 1, "gradient summed into dx"))
		return 0;
	uint32_t most = wi < 0 ? 1 : n->op == OP_RMS_NORM_BACKWARD ? 2 : 3;
	if (n->nres < 1 || n->nres > most)
		return most == 1 ? shape_fail(g, n, d, n->loc,
		                              "gives 1 result without a weight, but the "
		                              "statement names %u", n->nres)
		                 : shape_fail(g, n, d, n->loc,
		                              "gives 1 to %u results, but the statement "
		                              "names %u", most, n->nres);
	if (wi > 0) {
		const Type *w = ot(g, n, wi);
		if (w->rank != 1 || w->d[0] != x->d[x->rank - 1] || w->dt != x->dt)
			return shape_fail(g, n, d, n->loc,
			                  "the weight must be [%lld] of the input's dtype",
			                  (long long)x->d[x->rank - 1]);
		for (uint32_t i = 1; i < n->nres; i++)
			if (!result(g, n, d, i, (DType)w->dt, w->d, 1))
				return 0;
	}
	return result(g, n, d, 0, (DType)x->dt, x->d, x->rank);
}

/* scaled_dot_product_attention_backward(g, q, k, v, [mask]): dq, dk, dv
 * with the broadcast batch dims and q's, k's, v's own last two dims (with
 * enable_gqa, dk and dv keep k's heads: the group's sum). */
int
shape_sdpa_backward(Graph *g, Node *n, Diag *d)
{
	Type bt;
	for (int i = 1; i < 4; i++) {
		const Type *t = ot(g, n, i);
		if (t->rank < 2 || !dtype_is_float((DType)t->dt) || t->dt != ot(g, n, 1)->dt)
			return shape_fail(g, n, d, n->loc,
			                  "query, key and value must be floating tensors "
			                  "of one dtype with at least two dims");
	}
	const Type *q = ot(g, n, 1), *k = ot(g, n, 2), *v = ot(g, n, 3);
	if (q->d[q->rank - 1] != k->d[k->rank - 1] || k->d[k->rank - 2] != v->d[v->rank - 2])
		return shape_fail(g, n, d, n->loc, "query, key and value do not fit together");
	int64_t group = shape_attn_group(q, k, ir_attr_int(n, "enable_gqa", 0) != 0);
	if (group == 0 || (group > 1 && (v->rank < 3 || v->d[v->rank - 3] != k->d[k->rank - 3])))
		return shape_fail(g, n, d, n->loc,
		                  "the key's and value's heads must divide the query's");
	if (!shape_attn_batch(q, k, v, group, &bt))
		return shape_fail(g, n, d, n->loc, "batch dimensions don't broadcast");
	Type go = bt;
	go.d[go.rank++] = q->d[q->rank - 2];
	if (n->nopnd > 4) {
		const Type *m = ot(g, n, 4);
		Type full = go, x;
		full.d[full.rank++] = k->d[k->rank - 2];
		full.dt = m->dt;
		if ((m->dt != DT_BOOL && m->dt != q->dt) || !shape_broadcast(m, &full, &x) ||
		    !type_same_shape(&x, &full))
			return shape_fail(g, n, d, n->loc,
			                  "the mask must be bool or the query's dtype and "
			                  "broadcast to the scores' shape");
	}
	go.d[go.rank++] = v->d[v->rank - 1];
	if (!type_same_shape(ot(g, n, 0), &go) || ot(g, n, 0)->dt != q->dt)
		return shape_fail(g, n, d, n->loc,
		                  "the gradient must have the attention's result type");
	for (int i = 0; i < 3; i++) {
		const Type *t = ot(g, n, i + 1);
		Type r = bt;
		if (i > 0 && group > 1)
			r.d[r.rank - 1] = k->d[k->rank - 3];
		r.d[r.rank++] = t->d[t->rank - 2];
		r.d[r.rank++] = t->d[t->rank - 1];
		if (!result(g, n, d, (uint32_t)i, (DType)t->dt, r.d, r.rank))
			return 0;
	}
	return n->nres == 3 ? 1 : shape_fail(g, n, d, n->loc,
	                                     "gives 3 results, but the statement names %u", n->nres);
}

/* embedding_backward(g [..., D], idx [...], rows=V) -> [V, D]. */
int
shape_embedding_backward(Graph *g, Node *n, Diag *d)
{
	const Type *gt = ot(g, n, 0), *idx = ot(g, n, 1);
	int64_t rows = ir_attr_int(n, "rows", 0);
	if (!dtype_is_int((DType)idx->dt))
		return shape_fail(g, n, d, n->loc, "the indices must be i64 or i32");
	if (!dtype_is_float((DType)gt->dt) || gt->rank != idx->rank + 1 ||
	    memcmp(gt->d, idx->d, (size_t)idx->rank * sizeof *gt->d) != 0)
		return shape_fail(g, n, d, n->loc,
		                  "the gradient must have the indices' shape and one "
		                  "more dim");
	if (rows < 0)
		return shape_fail(g, n, d, n->loc, "rows must not be negative");
	int64_t dims[2] = {rows, gt->d[gt->rank - 1]};
	return result(g, n, d, 0, (DType)gt->dt, dims, 2);
}

/* gather_backward(g, idx, dim=, shape=): zeros of `shape` with g added at
 * the indices along dim. */
int
shape_gather_backward(Graph *g, Node *n, Diag *d)
{
	const Type *gt = ot(g, n, 0), *idx = ot(g, n, 1);
	const Attr *s = ir_attr(n, "shape");
	int64_t dim = ir_attr_int(n, "dim", 0);
	if (idx->dt != DT_I64 || !type_same_shape(gt, idx) || !dtype_is_float((DType)gt->dt))
		return shape_fail(g, n, d, n->loc,
		                  "the gradient and the i64 index must have one shape");
	if (!s || s->nints != gt->rank)
		return shape_fail(g, n, d, n->loc, "shape must have the gradient's rank");
	int k = shape_norm_dim(dim, gt->rank ? gt->rank : 1);
	if (k < 0)
		return shape_fail(g, n, d, n->loc, "dim %lld is out of range", (long long)dim);
	for (int j = 0; j < gt->rank; j++)
		if (s->ints[j] < 0 || (j != k && idx->d[j] > s->ints[j]))
			return shape_fail(g, n, d, n->loc, "the index does not fit in shape");
	return result(g, n, d, 0, (DType)gt->dt, s->ints, (int)s->nints);
}

/* cross_entropy_backward(g [], logits, target) -> logits' type. */
int
shape_cross_entropy_backward(Graph *g, Node *n, Diag *d)
{
	const Type *gt = ot(g, n, 0), *x = ot(g, n, 1), *t = ot(g, n, 2);
	if (type_numel(gt) != 1 || gt->dt != x->dt || !dtype_is_float((DType)x->dt))
		return shape_fail(g, n, d, n->loc,
		                  "the gradient must be a scalar of the logits' dtype");
	if (x->rank == 0 || t->dt != DT_I64 || t->rank != (x->rank > 1 ? x->rank - 1 : 0))
		return shape_fail(g, n, d, n->loc,
		                  "expects logits [N, C, ...] or [C] and i64 targets");
	return result(g, n, d, 0, (DType)x->dt, x->d, x->rank);
}

/* sgd_update_(p, g), adamw_update_(p, g): p a floating param (its state
 * is keyed by its name), g its gradient. */
int
shape_optim_update(Graph *g, Node *n, Diag *d)
{
	const Value *p = &g->vals.v[n->opnd[0].v];
	if (p->kind != VK_PARAM)
		return shape_fail(g, n, d, n->loc, "'%%%s' is not a param", p->name);
	if (!like(g, n, d, 1, 0, "gradient"))
		return 0;
	return 1;
}

/* Result i of n gets shape dims[rank] and dtype dt (conv.c's rules). */
int
shape_give(Graph *g, Node *n, Diag *d, uint32_t i, DType dt, const int64_t *dims, int rank)
{
	return result(g, n, d, i, dt, dims, rank);
}
