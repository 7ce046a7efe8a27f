/*
 * grad_rules.c - the derivative rule of every differentiable op (the
 * `grad` column of ops.def), written as IR built from other ops, as
 * PyTorch's derivatives.yaml writes them (torch 1.13 / 2.x formulas, in
 * the same order of operations, so that rounding agrees).
 *
 * A rule gets the forward node n, gout[j] (the gradient of result j, or
 * NONE) and need[k] (operand k wants a gradient); it sets gin[k].  The
 * pass reduces each gin[k] to the operand's shape (broadcasting) and casts
 * it to the operand's dtype, so pointwise rules work at the result's
 * shape.  Forward values are read through grad_in/grad_out/grad_arg (they
 * may be snapshots).  Ops with their own backward kernels (gelu,
 * layer_norm, rms_norm, attention, embedding, gather, cross_entropy) use
 * the compiler-only ops of ops.def whose shape rules are in grad_ops.c.
 */
#include <math.h>
#include <string.h>

#include "passes.h"

#define V(x) grad_v(x)
#define LF(x) grad_lf(x)
#define GRAD_RULE_DEF(f) int f(Grad *G, const Node *n, const ValId *gout, \
                               ValId *gin, const uint8_t *need)

/* Type of forward operand k: a copy, as making values may move the
 * graph's value array. */
static Type
in_type(Grad *G, const Node *n, int k)
{
	return grad_graph(G)->vals.v[n->opnd[k].v].type;
}

/* Type of forward result j (a copy). */
static Type
res_type(Grad *G, const Node *n, int j)
{
	return grad_graph(G)->vals.v[n->res[j]].type;
}

/* A num attribute (clamp's bounds) as a literal operand. */
static Opnd
num_opnd(const Attr *a)
{
	Opnd o = {.kind = a->num_kind, .i = a->i, .f = a->f};
	if (a->num_kind == OK_BOOL || a->num_kind == OK_INT)
		o.f = (double)a->i;
	return o;
}

/* ------------------------------------------------------------------ pointwise */

/* One-operand pointwise ops, each with PyTorch's formula, and dropout. */
GRAD_RULE_DEF(grad_unary)
{
	(void)need;
	ValId g = gout[0], x, y, t, u;
	switch (n->op) {
	case OP_NEG:
		gin[0] = grad_op1(G, OP_NEG, V(g));
		break;
	case OP_ABS: /* grad * self.sgn() */
		t = grad_op1(G, OP_SIGN, V(grad_in(G, 0)));
		gin[0] = grad_op2(G, OP_MUL, V(g), V(t));
		break;
	case OP_EXP: /* grad * result */
		gin[0] = grad_op2(G, OP_MUL, V(g), V(grad_out(G, 0)));
		break;
	case OP_LOG: /* grad / self */
		gin[0] = grad_op2(G, OP_DIV, V(g), V(grad_in(G, 0)));
		break;
	case OP_LOG1P: /* grad / (self + 1) */
		t = grad_op2(G, OP_ADD, V(grad_in(G, 0)), LF(1.0));
		gin[0] = grad_op2(G, OP_DIV, V(g), V(t));
		break;
	case OP_SQRT: /* grad / (2 * result) */
		t = grad_op2(G, OP_MUL, V(grad_out(G, 0)), LF(2.0));
		gin[0] = grad_op2(G, OP_DIV, V(g), V(t));
		break;
	case OP_RSQRT: /* -0.5 * grad * result.pow(3) */
		t = grad_op2(G, OP_MUL, V(g), LF(-0.5));
		u = grad_op2(G, OP_POW, V(grad_out(G, 0)), LF(3.0));
		gin[0] = grad_op2(G, OP_MUL, V(t), V(u));
		break;
	case OP_RECIPROCAL: /* -grad * (result * result) */
		y = grad_out(G, 0);
		t = grad_op2(G, OP_MUL, V(y), V(y));
		u = grad_op1(G, OP_NEG, V(g));
		gin[0] = grad_op2(G, OP_MUL, V(u), V(t));
		break;
	case OP_SQUARE: /* pow(self, 2): grad * (2 * self) */
		t = grad_op2(G, OP_MUL, V(grad_in(G, 0)), LF(2.0));
		gin[0] = grad_op2(G, OP_MUL, V(g), V(t));
		break;
	case OP_SIN: /* grad * self.cos() */
		t = grad_op1(G, OP_COS, V(grad_in(G, 0)));
		gin[0] = grad_op2(G, OP_MUL, V(g), V(t));
		break;
	case OP_COS: /* grad * -self.sin() */
		t = grad_op1(G, OP_SIN, V(grad_in(G, 0)));
		u = grad_op1(G, OP_NEG, V(t));
		gin[0] = grad_op2(G, OP_MUL, V(g), V(u));
		break;
	case OP_TANH: /* grad * (1 - result * result) */
		y = grad_out(G, 0);
		t = grad_op2(G, OP_MUL, V(y), V(y));
		u = grad_op2(G, OP_SUB, LF(1.0), V(t));
		gin[0] = grad_op2(G, OP_MUL, V(g), V(u));
		break;
	case OP_SIGMOID: /* grad * (1 - result) * result */
		y = grad_out(G, 0);
		t = grad_op2(G, OP_SUB, LF(1.0), V(y));
		u = grad_op2(G, OP_MUL, V(g), V(t));
		gin[0] = grad_op2(G, OP_MUL, V(u), V(y));
		break;
	case OP_RELU: /* threshold_backward(grad, result, 0) */
		t = grad_op2(G, OP_LE, V(grad_out(G, 0)), LF(0.0));
		gin[0] = grad_op3(G, OP_WHERE, V(t), LF(0.0), V(g));
		break;
	case OP_DROPOUT: { /* the same mask (p, salt) on grad: grad * mask * scale */
		Opnd o[1] = {V(g)};
		Node *m = grad_node(G, OP_DROPOUT, o, 1);
		grad_copyattr(m, "p", ir_attr(n, "p"));
		grad_copyattr(m, "salt", ir_attr(n, "salt"));
		gin[0] = grad_end(G, m, 1);
		break;
	}
	case OP_GELU: {
		Opnd o[2] = {V(g), V(grad_in(G, 0))};
		Node *m = grad_node(G, OP_GELU_BACKWARD, o, 2);
		grad_copyattr(m, "approximate", ir_attr(n, "approximate"));
		gin[0] = grad_end(G, m, 1);
		break;
	}
	case OP_SILU: { /* grad * s * (1 + x * (1 - s)), s = sigmoid(x) */
		x = grad_in(G, 0);
		ValId s = grad_op1(G, OP_SIGMOID, V(x));
		t = grad_op2(G, OP_SUB, LF(1.0), V(s));
		u = grad_op2(G, OP_MUL, V(x), V(t));
		t = grad_op2(G, OP_ADD, LF(1.0), V(u));
		u = grad_op2(G, OP_MUL, V(s), V(t));
		gin[0] = grad_op2(G, OP_MUL, V(g), V(u));
		break;
	}
	case OP_ERF: /* 2 / sqrt(pi) * exp(-self.pow(2)) * grad */
		t = grad_op1(G, OP_SQUARE, V(grad_in(G, 0)));
		u = grad_op1(G, OP_NEG, V(t));
		t = grad_op1(G, OP_EXP, V(u));
		u = grad_op2(G, OP_MUL, V(t), LF(1.1283791670955126));
		gin[0] = grad_op2(G, OP_MUL, V(u), V(g));
		break;
	case OP_SIGN:
	case OP_FLOOR: /* zeros_like(grad) */
		{
			Type t0 = in_type(G, n, 0);
			gin[0] = grad_zeros(G, &t0);
		}
		break;
	default:
		ICE("grad_unary: %s", op_name(n->op));
	}
	return 1;
}

/* div's gradient for its denominator b, -g * ((a / b) / b) as PyTorch's
 * div_tensor_other_backward computes it: b * b would overflow (or
 * underflow) where the quotients do not. */
static ValId
div_other_grad(Grad *G, ValId g, Opnd a, Opnd b)
{
	ValId q = grad_op2(G, OP_DIV, a, b);
	q = grad_op2(G, OP_DIV, V(q), b);
	ValId t = grad_op1(G, OP_NEG, V(g));
	return grad_op2(G, OP_MUL, V(t), V(q));
}

/* pow's gradients, as pow_backward_self / pow_backward_exponent. */
static void
pow_rule(Grad *G, const Node *n, ValId g, ValId *gin, const uint8_t *need)
{
	Opnd a = grad_arg(G, n, 0), b = grad_arg(G, n, 1);
	ValId t, u;
	if (need[0]) {
		grad_target(G, n, 0);
		if (b.kind != OK_VAL && b.f == 0) {
			Type r = res_type(G, n, 0);
			gin[0] = grad_zeros(G, &r);
		} else if (b.kind != OK_VAL) {
			/* grad * (exponent * self.pow(exponent - 1)) */
			Opnd e1 = b.kind == OK_INT ? grad_li(b.i - 1) : LF(b.f - 1.0);
			t = grad_op2(G, OP_POW, a, e1);
			u = grad_op2(G, OP_MUL, b, V(t));
			gin[0] = grad_op2(G, OP_MUL, V(g), V(u));
		} else {
			/* where(exponent == 0, 0, grad * (exponent * pow(self, exponent - 1))) */
			t = grad_op2(G, OP_SUB, b, LF(1.0));
			u = grad_op2(G, OP_POW, a, V(t));
			t = grad_op2(G, OP_MUL, b, V(u));
			u = grad_op2(G, OP_MUL, V(g), V(t));
			t = grad_op2(G, OP_EQ, b, LF(0.0));
			gin[0] = grad_op3(G, OP_WHERE, V(t), LF(0.0), V(u));
		}
	}
	if (need[1]) {
		/* grad * where(self == 0 & exponent >= 0, 0, result * log(self)) */
		grad_target(G, n, 1);
		ValId y = grad_out(G, 0), c;
		if (a.kind != OK_VAL) {
			double base = a.kind == OK_FLOAT ? a.f : (double)a.i;
			t = grad_op2(G, OP_MUL, V(y), LF(log(base)));
			if (base == 0) {
				c = grad_op2(G, OP_GE, b, LF(0.0));
				t = grad_op3(G, OP_WHERE, V(c), LF(0.0), V(t));
			}
		} else {
			u = grad_op1(G, OP_LOG, a);
			t = grad_op2(G, OP_MUL, V(y), V(u));
			c = grad_op2(G, OP_EQ, a, LF(0.0));
			u = grad_op2(G, OP_GE, b, LF(0.0));
			c = grad_op2(G, OP_MUL, V(c), V(u));
			t = grad_op3(G, OP_WHERE, V(c), LF(0.0), V(t));
		}
		gin[1] = grad_op2(G, OP_MUL, V(g), V(t));
	}
}

/* maximum/minimum: ties share the gradient equally, the other side gets
 * none: where(a == b, grad / 2, grad).masked_fill_(a < b, 0) for maximum's
 * a. */
static void
extremum_rule(Grad *G, const Node *n, ValId g, ValId *gin, const uint8_t *need)
{
	Opnd a = grad_arg(G, n, 0), b = grad_arg(G, n, 1);
	int lose_a = n->op == OP_MAXIMUM ? OP_LT : OP_GT;
	int lose_b = n->op == OP_MAXIMUM ? OP_GT : OP_LT;
	ValId h = grad_op2(G, OP_DIV, V(g), LF(2.0));
	ValId e = grad_op2(G, OP_EQ, a, b);
	ValId w = grad_op3(G, OP_WHERE, V(e), V(h), V(g));
	for (int k = 0; k < 2; k++) {
		if (!need[k])
			continue;
		grad_target(G, n, k);
		ValId c = grad_op2(G, k ? lose_b : lose_a, a, b);
		gin[k] = grad_op3(G, OP_WHERE, V(c), LF(0.0), V(w));
	}
}

/* add sub mul div pow maximum minimum (broadcast: the pass sums). */
GRAD_RULE_DEF(grad_binary)
{
	ValId g = gout[0];
	Opnd a, b;
	switch (n->op) {
	case OP_ADD:
		gin[0] = gin[1] = g;
		break;
	case OP_SUB:
		gin[0] = g;
		if (need[1]) {
			grad_target(G, n, 1);
			gin[1] = grad_op1(G, OP_NEG, V(g));
		}
		break;
	case OP_MUL: /* grad * other, grad * self */
		if (need[0]) {
			grad_target(G, n, 0);
			gin[0] = grad_op2(G, OP_MUL, V(g), grad_arg(G, n, 1));
		}
		if (need[1]) {
			grad_target(G, n, 1);
			gin[1] = grad_op2(G, OP_MUL, V(g), grad_arg(G, n, 0));
		}
		break;
	case OP_DIV: /* grad / other, -grad * ((self / other) / other) */
		a = grad_arg(G, n, 0);
		b = grad_arg(G, n, 1);
		if (need[0]) {
			grad_target(G, n, 0);
			gin[0] = grad_op2(G, OP_DIV, V(g), b);
		}
		if (need[1]) {
			grad_target(G, n, 1);
			gin[1] = div_other_grad(G, g, a, b);
		}
		break;
	case OP_POW:
		pow_rule(G, n, g, gin, need);
		break;
	case OP_MAXIMUM:
	case OP_MINIMUM:
		extremum_rule(G, n, g, gin, need);
		break;
	default:
		ICE("grad_binary: %s", op_name(n->op));
	}
	return 1;
}

/* where(c, a, b): where(c, grad, 0) and where(c, 0, grad). */
GRAD_RULE_DEF(grad_where)
{
	Opnd c = grad_arg(G, n, 0);
	for (int k = 1; k < 3; k++) {
		if (!need[k])
			continue;
		grad_target(G, n, k);
		gin[k] = k == 1 ? grad_op3(G, OP_WHERE, c, V(gout[0]), LF(0.0))
		                : grad_op3(G, OP_WHERE, c, LF(0.0), V(gout[0]));
	}
	return 1;
}

/* clamp: the gradient where min <= x <= max (NaN gets none). */
GRAD_RULE_DEF(grad_clamp)
{
	(void)need;
	const Attr *lo = ir_attr(n, "min"), *hi = ir_attr(n, "max");
	Opnd x = grad_arg(G, n, 0);
	ValId c = NONE;
	if (lo)
		c = grad_op2(G, OP_GE, x, num_opnd(lo));
	if (hi) {
		ValId h = grad_op2(G, OP_LE, x, num_opnd(hi));
		c = c == NONE ? h : grad_op2(G, OP_MUL, V(c), V(h));
	}
	gin[0] = grad_op3(G, OP_WHERE, V(c), V(gout[0]), LF(0.0));
	return 1;
}

/* cast and expand: the output's gradient as it is; the pass casts it back
 * to the source dtype (cast) or sums it back to x's shape (expand). */
GRAD_RULE_DEF(grad_pass_through)
{
	(void)G;
	(void)n;
	(void)need;
	gin[0] = gout[0];
	return 1;
}

/* ------------------------------------------------------------------ reductions */

/* The dims a reduction of a rank-r value reduces, as a bit mask. */
static uint32_t
reduced_mask(const Node *n, int rank)
{
	const Attr *a = ir_attr(n, "dims");
	uint32_t all = (1u << rank) - 1, mask = 0;
	if (!a || a->nints == 0)
		return all;
	for (uint32_t j = 0; j < a->nints; j++) {
		int k = shape_norm_dim(a->ints[j], rank ? rank : 1);
		if (k >= 0)
			mask |= 1u << k;
	}
	return mask & all;
}

/* x's shape with the reduced dims kept as 1. */
static Type
kept_type(const Type *x, uint32_t mask)
{
	Type t = *x;
	for (int i = 0; i < t.rank; i++)
		if (mask >> i & 1)
			t.d[i] = 1;
	return t;
}

/* v (a reduction's result or gradient) with the reduced dims as 1. */
static ValId
unreduce(Grad *G, ValId v, const Type *kept)
{
	return grad_reshape(G, v, kept->d, kept->rank);
}

/* sum_backward: the gradient expanded over the reduced dims. */
static ValId
sum_back(Grad *G, ValId g, const Type *x, const Type *kept)
{
	return grad_expand(G, unreduce(G, g, kept), x);
}

/* var_backward: (2 / (N - 1)) * grad * (x - x.mean(dims, keepdim)). */
static ValId
var_back(Grad *G, ValId g, uint32_t mask, const Type *kept,
         int64_t count)
{
	ValId x = grad_in(G, 0);
	Opnd xo = V(x);
	Node *m = grad_node(G, OP_MEAN, &xo, 1);
	int64_t dims[SG_MAXRANK];
	int nd = 0;
	for (int i = 0; i < grad_type(G, x)->rank; i++)
		if (mask >> i & 1)
			dims[nd++] = i;
	grad_setints(G, m, "dims", dims, nd);
	grad_set(m, "keepdim", 1);
	ValId mu = grad_end(G, m, 1);
	ValId dv = grad_op2(G, OP_SUB, V(x), V(mu));
	ValId s = grad_op2(G, OP_MUL, V(unreduce(G, g, kept)),
	                   LF(2.0 / (double)(count - 1)));
	return grad_op2(G, OP_MUL, V(s), V(dv));
}

/* amax/amin: the gradient split evenly among the elements equal to the
 * result: (grad / mask.sum(dims, keepdim)) * mask. */
static ValId
extreme_back(Grad *G, ValId g, uint32_t mask, const Type *kept)
{
	ValId x = grad_in(G, 0);
	ValId yk = unreduce(G, grad_out(G, 0), kept);
	ValId m = grad_op2(G, OP_EQ, V(x), V(yk));
	ValId cnt = grad_sum(G, m, mask, 1);
	ValId q = grad_op2(G, OP_DIV, V(unreduce(G, g, kept)), V(cnt));
	return grad_op2(G, OP_MUL, V(q), V(m));
}

/* sum mean amax amin var var_mean over dims= (keepdim or not). */
GRAD_RULE_DEF(grad_reduce)
{
	(void)need;
	Type xt = in_type(G, n, 0);
	const Type *x = &xt;
	uint32_t mask = reduced_mask(n, x->rank);
	Type kept = kept_type(x, mask);
	int64_t count = 1;
	for (int i = 0; i < x->rank; i++)
		if (mask >> i & 1)
			count *= x->d[i];
	ValId g = gout[0];
	switch (n->op) {
	case OP_SUM:
		gin[0] = sum_back(G, g, x, &kept);
		break;
	case OP_MEAN:
		gin[0] = grad_op2(G, OP_DIV, V(sum_back(G, g, x, &kept)), grad_li(count));
		break;
	case OP_AMAX:
	case OP_AMIN:
		gin[0] = mask ? extreme_back(G, g, mask, &kept) : g;
		break;
	case OP_VAR:
		gin[0] = var_back(G, g, mask, &kept, count);
		break;
	case OP_VAR_MEAN: {
		ValId v = NONE, m = NONE;
		if (gout[0] != NONE)
			v = var_back(G, gout[0], mask, &kept, count);
		if (gout[1] != NONE)
			m = grad_op2(G, OP_DIV, V(sum_back(G, gout[1], x, &kept)),
			             grad_li(count));
		gin[0] = v == NONE ? m : m == NONE ? v : grad_op2(G, OP_ADD, V(v), V(m));
		break;
	}
	default:
		ICE("grad_reduce: %s", op_name(n->op));
	}
	return 1;
}

/* ------------------------------------------------------------------ normalisation */

/* softmax's backward: y * (g - sum(g * y, dims of mask)), y its result
 * (no dims: a 0-d softmax, whose sum is itself). */
static ValId
softmax_backward(Grad *G, ValId g, ValId y, uint32_t mask)
{
	ValId t = grad_op2(G, OP_MUL, V(g), V(y));
	ValId s = mask ? grad_sum(G, t, mask, 1) : t;
	t = grad_op2(G, OP_SUB, V(g), V(s));
	return grad_op2(G, OP_MUL, V(y), V(t));
}

/* softmax: softmax_backward; log_softmax: grad - exp(y) * sum(grad, dim). */
GRAD_RULE_DEF(grad_softmax)
{
	(void)need;
	int rank = in_type(G, n, 0).rank;
	int d = rank ? shape_norm_dim(ir_attr_int(n, "dim", -1), rank) : 0;
	uint32_t mask = rank ? 1u << d : 0;
	ValId g = gout[0], y = grad_out(G, 0), t, s;
	if (n->op == OP_SOFTMAX) {
		gin[0] = softmax_backward(G, g, y, mask);
	} else {
		s = mask ? grad_sum(G, g, mask, 1) : g;
		t = grad_op1(G, OP_EXP, V(y));
		t = grad_op2(G, OP_MUL, V(t), V(s));
		gin[0] = grad_op2(G, OP_SUB, V(g), V(t));
	}
	return 1;
}

/* layer_norm and rms_norm: x through their backward ops; the weight's
 * gradient is sum(grad * normalised x) over the leading dims, the bias's
 * sum(grad) (both summed by the pass). */
GRAD_RULE_DEF(grad_norm)
{
	Opnd o[3] = {grad_v(gout[0]), grad_arg(G, n, 0)};
	int no = 2;
	if (n->nopnd > 1)
		o[no++] = grad_arg(G, n, 1);
	/* dx, and the weight's and bias's gradients in the same op (one pass
	 * over g and x: sgk_rows.cuh's sg_launch_layer_norm_bwd_fused) */
	uint32_t nres = n->nopnd > 2 && need[2] ? 3 : n->nopnd > 1 && need[1] ? 2 : 1;
	if (!need[0] && nres == 1)
		return 1;
	grad_target(G, n, need[0] ? 0 : 1);
	int back = n->op == OP_LAYER_NORM ? OP_LAYER_NORM_BACKWARD : OP_RMS_NORM_BACKWARD;
	Node *m = grad_node(G, back, o, no);
	grad_copyattr(m, "eps", ir_attr(n, "eps"));
	grad_end(G, m, nres);
	if (need[0])
		gin[0] = m->res[0];
	if (nres > 1 && need[1])
		gin[1] = m->res[1];
	if (nres > 2)
		gin[2] = m->res[2];
	return 1;
}

/* ------------------------------------------------------------------ linear algebra */

/* A matmul operand as a matrix: [k] as [1, k] (side 0) or [k, 1] (side 1). */
static ValId
as_matrix(Grad *G, ValId v, int side)
{
	const Type *t = grad_type(G, v);
	if (t->rank != 1)
		return v;
	int64_t s[2] = {side ? t->d[0] : 1, side ? 1 : t->d[0]};
	return grad_reshape(G, v, s, 2);
}

/* torch.matmul: with A, B the operands as matrices and G the gradient with
 * the dims 1-D operands dropped put back, dA = G @ B^T (linear(G, B) when B
 * is a matrix) and dB = A^T @ G, summed over broadcast batch dims and
 * shaped as the operands. */
GRAD_RULE_DEF(grad_matmul)
{
	ValId a = grad_in(G, 0), b = grad_in(G, 1);
	Type ta = in_type(G, n, 0), tb = in_type(G, n, 1);
	ValId A = as_matrix(G, a, 0), B = as_matrix(G, b, 1);
	Type tA = *grad_type(G, A), tB = *grad_type(G, B);
	/* the shape of A @ B: broadcast batch dims, then [m, n] */
	Type r;
	Type ba = tA, bb = tB;
	ba.rank -= 2;
	bb.rank -= 2;
	if (!shape_broadcast(&ba, &bb, &r))
		ICE("grad_matmul: batch dims");
	r.d[r.rank++] = tA.d[tA.rank - 2];
	r.d[r.rank++] = tB.d[tB.rank - 1];
	ValId g = grad_reshape(G, gout[0], r.d, r.rank);
	if (need[1]) {
		grad_target(G, n, 1);
		ValId at = grad_transpose(G, A, -2, -1);
		ValId gb = grad_op2(G, OP_MATMUL, V(at), V(g));
		gb = grad_fit(G, gb, &tB);
		gin[1] = grad_reshape(G, gb, tb.d, tb.rank);
	}
	if (need[0]) {
		/* G @ B^T is linear(G, B) for a matrix B: no transposed copy of
		 * (typically) the weight */
		grad_target(G, n, 0);
		ValId ga;
		if (tB.rank == 2) {
			ga = grad_op2(G, OP_LINEAR, V(g), V(B));
		} else {
			ValId bt = grad_transpose(G, B, -2, -1);
			ga = grad_op2(G, OP_MATMUL, V(g), V(bt));
		}
		ga = grad_fit(G, ga, &tA);
		gin[0] = grad_reshape(G, ga, ta.d, ta.rank);
	}
	return 1;
}

/* linear(x, w, b) = x @ w^T + b: dx = grad @ w, dw = grad2^T @ x2 with the
 * leading dims flattened, db = grad summed over the leading dims.  dw
 * first, so that x (an activation) may die before dx is made. */
GRAD_RULE_DEF(grad_linear)
{
	ValId g = gout[0];
	Type txv = in_type(G, n, 0), twv = in_type(G, n, 1);
	const Type *tx = &txv, *tw = &twv;
	if (need[1]) {
		grad_target(G, n, 1);
		int64_t rows = 1;
		for (int i = 0; i + 1 < tx->rank; i++)
			rows *= tx->d[i];
		int64_t gs[2] = {rows, tw->d[0]}, xs[2] = {rows, tw->d[1]};
		ValId g2 = grad_reshape(G, g, gs, 2);
		ValId x2 = grad_reshape(G, grad_in(G, 0), xs, 2);
		ValId gt = grad_transpose(G, g2, 0, 1);
		gin[1] = grad_op2(G, OP_MATMUL, V(gt), V(x2));
	}
	if (need[0]) {
		grad_target(G, n, 0);
		gin[0] = grad_op2(G, OP_MATMUL, V(g), grad_arg(G, n, 1));
	}
	if (n->nopnd > 2 && need[2])
		gin[2] = g;
	return 1;
}

/* k or v of grouped-query attention with each of its heads (dim -3)
 * repeated for the group of q's heads that reads it, as PyTorch's
 * enable_gqa does (repeat_interleave): [.., Hk, S, E] to [.., Hq, S, E]. */
static ValId
gqa_heads(Grad *G, ValId x, int64_t hq)
{
	Type t = *grad_type(G, x);
	int r = t.rank;
	int64_t hk = t.d[r - 3];
	if (hk == hq)
		return x;
	Opnd o = V(x);
	Node *m = grad_node(G, OP_UNSQUEEZE, &o, 1);
	grad_set(m, "dim", r - 2);
	ValId u = grad_end(G, m, 1);
	Type e = *grad_type(G, u);
	e.d[r - 2] = hq / hk;
	ValId ex = grad_expand(G, u, &e);
	t.d[r - 3] = hq;
	return grad_reshape(G, ex, t.d, r);
}

/* The gradient of attention's float mask: the scores' gradient, ds =
 * softmax_backward(dp, p) = p * (dp - sum(dp * p, -1)) with p =
 * softmax(q k^T * scale + mask) made again and dp = grad v^T (through
 * the weights' dropout with dropout_p: the same mask, the same salt), as
 * PyTorch's math attention differentiates (added to the scores, the mask
 * gets their gradient; the pass sums it to the mask's shape).  A mask
 * never comes with causal=true. */
static ValId
sdpa_mask_grad(Grad *G, const Node *n, ValId g)
{
	ValId q = grad_in(G, 0), k = grad_in(G, 1), v = grad_in(G, 2);
	int rq = grad_type(G, q)->rank;
	if (ir_attr_int(n, "enable_gqa", 0)) { /* (shape_sdpa: rank 3 or more) */
		int64_t hq = grad_type(G, q)->d[rq - 3];
		k = gqa_heads(G, k, hq);
		v = gqa_heads(G, v, hq);
	}
	const Attr *sc = ir_attr(n, "scale");
	double scale = sc ? sc->f : 1.0 / sqrt((double)grad_type(G, q)->d[rq - 1]);
	int rk = grad_type(G, k)->rank;
	ValId kt = grad_transpose(G, k, rk - 2, rk - 1);
	ValId s = grad_op2(G, OP_MATMUL, V(q), V(kt));
	s = grad_op2(G, OP_MUL, V(s), LF(scale));
	s = grad_op2(G, OP_ADD, V(s), grad_arg(G, n, 3));
	Opnd so = V(s);
	Node *m = grad_node(G, OP_SOFTMAX, &so, 1);
	grad_set(m, "dim", -1);
	ValId p = grad_end(G, m, 1);
	/* a row whose scores are all -inf: zeros, as the forward gives
	 * (PyTorch's _safe_softmax) */
	int rs = grad_type(G, s)->rank;
	m = grad_node(G, OP_AMAX, &so, 1);
	int64_t last = rs - 1;
	grad_setints(G, m, "dims", &last, 1);
	grad_set(m, "keepdim", 1);
	ValId mx = grad_end(G, m, 1);
	ValId none = grad_op2(G, OP_EQ, V(mx), LF(-INFINITY));
	p = grad_op3(G, OP_WHERE, V(none), LF(0.0), V(p));
	int rv = grad_type(G, v)->rank;
	ValId vt = grad_transpose(G, v, rv - 2, rv - 1);
	ValId dp = grad_op2(G, OP_MATMUL, V(g), V(vt));
	if (ir_draws(n)) { /* the weights' dropout, on dp */
		Opnd od = V(dp);
		m = grad_node(G, OP_DROPOUT, &od, 1);
		grad_setf(m, "p", ir_attr_float(n, "dropout_p", 0));
		grad_copyattr(m, "salt", ir_attr(n, "salt"));
		dp = grad_end(G, m, 1);
	}
	return softmax_backward(G, dp, p, 1u << (rs - 1));
}

/* Attention: q's, k's and v's gradients from one backward op (at the
 * broadcast batch shape, with enable_gqa dk and dv summed over each head's
 * group; the pass sums them to each operand's); a float mask's from the
 * scores made again (sdpa_mask_grad). */
GRAD_RULE_DEF(grad_sdpa)
{
	Opnd o[5] = {V(gout[0]), grad_arg(G, n, 0), grad_arg(G, n, 1), grad_arg(G, n, 2)};
	if (n->nopnd > 3)
		o[4] = grad_arg(G, n, 3);
	if (need[0] || need[1] || need[2]) {
		Node *m = grad_node(G, OP_SDPA_BACKWARD, o, n->nopnd > 3 ? 5 : 4);
		grad_copyattr(m, "causal", &n->attr[op_attr_index(n->op, "causal")]);
		grad_copyattr(m, "enable_gqa", &n->attr[op_attr_index(n->op, "enable_gqa")]);
		const Attr *sc = ir_attr(n, "scale");
		if (sc)
			grad_copyattr(m, "scale", sc);
		if (ir_draws(n)) { /* the weights' dropout: the same mask */
			grad_copyattr(m, "dropout_p", ir_attr(n, "dropout_p"));
			grad_copyattr(m, "salt", ir_attr(n, "salt"));
		}
		grad_end(G, m, 3);
		for (int k = 0; k < 3; k++)
			gin[k] = m->res[k];
	}
	if (n->nopnd > 3 && need[3]) {
		grad_target(G, n, 3);
		gin[3] = sdpa_mask_grad(G, n, gout[0]);
	}
	return 1;
}

/* ------------------------------------------------------------------ shape ops */

/* reshape, squeeze, unsqueeze, contiguous: the gradient in x's shape. */
GRAD_RULE_DEF(grad_reshape_rule)
{
	(void)need;
	Type x = in_type(G, n, 0);
	gin[0] = grad_reshape(G, gout[0], x.d, x.rank);
	return 1;
}

/* transpose: transposed back (a 0-d operand passes through). */
GRAD_RULE_DEF(grad_transpose_rule)
{
	(void)need;
	if (in_type(G, n, 0).rank == 0) {
		gin[0] = gout[0];
		return 1;
	}
	gin[0] = grad_transpose(G, gout[0], (int)ir_attr_int(n, "dim0", 0),
	                        (int)ir_attr_int(n, "dim1", 0));
	return 1;
}

/* permute: by the inverse permutation. */
GRAD_RULE_DEF(grad_permute)
{
	(void)need;
	const Attr *a = ir_attr(n, "dims");
	int rank = in_type(G, n, 0).rank;
	int64_t inv[SG_MAXRANK];
	for (int i = 0; i < rank; i++)
		inv[shape_norm_dim(a->ints[i], rank)] = i;
	Opnd o = V(gout[0]);
	Node *m = grad_node(G, OP_PERMUTE, &o, 1);
	grad_setints(G, m, "dims", inv, rank);
	gin[0] = grad_end(G, m, 1);
	return 1;
}

/* x with sizes along dim k changed to len: for the zero padding. */
static Type
with_size(const Type *x, int k, int64_t len)
{
	Type t = *x;
	t.d[k] = len;
	return t;
}

/* g between zeros along dim k: `before` and `after` elements of zeros of
 * g's other sizes and dtype around it, in one cat. */
static ValId
between_zeros(Grad *G, ValId g, int k, int64_t before, int64_t after)
{
	Type x = *grad_type(G, g);
	Opnd parts[3];
	int np = 0;
	if (before > 0) {
		Type t = with_size(&x, k, before);
		parts[np++] = V(grad_zeros(G, &t));
	}
	parts[np++] = V(g);
	if (after > 0) {
		Type t = with_size(&x, k, after);
		parts[np++] = V(grad_zeros(G, &t));
	}
	Node *m = grad_node(G, OP_CAT, parts, np);
	grad_set(m, "dim", k);
	return grad_end(G, m, 1);
}

/* slice: the gradient put back between zeros. */
GRAD_RULE_DEF(grad_slice)
{
	(void)need;
	Type xt = in_type(G, n, 0);
	const Type *x = &xt;
	int k = shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank);
	int64_t size = x->d[k];
	int64_t start = shape_clamp_index(ir_attr_int(n, "start", 0), size);
	const Attr *e = ir_attr(n, "end");
	int64_t end = e ? shape_clamp_index(e->i, size) : size;
	if (end <= start) {
		gin[0] = grad_zeros(G, x);
		return 1;
	}
	if (start == 0 && end == size) {
		gin[0] = gout[0];
		return 1;
	}
	gin[0] = between_zeros(G, gout[0], k, start, size - end);
	return 1;
}

/* cat: the gradient split back into the operands' sizes. */
GRAD_RULE_DEF(grad_cat)
{
	(void)need;
	Type r = res_type(G, n, 0);
	int k = shape_norm_dim(ir_attr_int(n, "dim", 0), r.rank);
	int64_t sizes[n->nopnd + 1];
	int owner[n->nopnd + 1], ns = 0;
	for (int i = 0; i < n->nopnd; i++) {
		Type t = in_type(G, n, i);
		if (shape_legacy_empty(&t) && r.rank != 1)
			continue;
		owner[ns] = i;
		sizes[ns++] = t.d[k];
	}
	if (ns == 1) {
		gin[owner[0]] = gout[0];
		return 1;
	}
	Opnd o = V(gout[0]);
	Node *m = grad_node(G, OP_SPLIT, &o, 1);
	grad_setints(G, m, "sizes", sizes, ns);
	grad_set(m, "dim", k);
	grad_end(G, m, (uint32_t)ns);
	for (int j = 0; j < ns; j++)
		gin[owner[j]] = m->res[j];
	return 1;
}

/* chunk and split: the results' gradients (zeros for the ones without)
 * concatenated. */
GRAD_RULE_DEF(grad_split)
{
	(void)need;
	int k = shape_norm_dim(ir_attr_int(n, "dim", 0), in_type(G, n, 0).rank);
	Opnd parts[n->nres + 1];
	for (uint32_t j = 0; j < n->nres; j++) {
		Type t = res_type(G, n, (int)j);
		parts[j] = V(gout[j] != NONE ? gout[j] : grad_zeros(G, &t));
	}
	if (n->nres == 1) {
		gin[0] = parts[0].v;
		return 1;
	}
	Node *m = grad_node(G, OP_CAT, parts, n->nres);
	grad_set(m, "dim", k);
	gin[0] = grad_end(G, m, 1);
	return 1;
}

/* ------------------------------------------------------------------ indexing, losses */

/* embedding: the gradient rows added into a zero table (scatter-add). */
GRAD_RULE_DEF(grad_embedding)
{
	(void)need;
	Opnd o[2] = {V(gout[0]), grad_arg(G, n, 0)};
	Node *m = grad_node(G, OP_EMBEDDING_BACKWARD, o, 2);
	grad_set(m, "rows", in_type(G, n, 1).d[0]);
	gin[1] = grad_end(G, m, 1);
	return 1;
}

/* gather: the gradient added into zeros of x's shape at the indices. */
GRAD_RULE_DEF(grad_gather)
{
	(void)need;
	Type x = in_type(G, n, 0);
	Opnd o[2] = {V(gout[0]), grad_arg(G, n, 1)};
	Node *m = grad_node(G, OP_GATHER_BACKWARD, o, 2);
	grad_set(m, "dim", x.rank ? shape_norm_dim(ir_attr_int(n, "dim", 0), x.rank) : 0);
	grad_setints(G, m, "shape", x.d, x.rank);
	gin[0] = grad_end(G, m, 1);
	return 1;
}

/* mse_loss: 2 * (a - b) / N * grad and its negation (N: the elements of
 * the broadcast shape); cross_entropy through its backward op. */
GRAD_RULE_DEF(grad_loss)
{
	ValId g = gout[0];
	if (n->op == OP_CROSS_ENTROPY) {
		Opnd o[3] = {V(g), grad_arg(G, n, 0), grad_arg(G, n, 1)};
		gin[0] = grad_end(G, grad_node(G, OP_CROSS_ENTROPY_BACKWARD, o, 3), 1);
		return 1;
	}
	Type bt, ta = in_type(G, n, 0), tb = in_type(G, n, 1);
	if (!shape_broadcast(&ta, &tb, &bt))
		ICE("grad_loss: shapes");
	int64_t count = type_numel(&bt);
	ValId d = grad_op2(G, OP_SUB, grad_arg(G, n, 0), grad_arg(G, n, 1));
	ValId s = grad_op2(G, OP_MUL, V(d), LF(2.0 / (double)count));
	ValId t = grad_op2(G, OP_MUL, V(s), V(g));
	gin[0] = t;
	if (need[1]) {
		grad_target(G, n, 1);
		gin[1] = grad_op1(G, OP_NEG, V(t));
	}
	return 1;
}

/* to_host and to_device: the gradient goes the other way. */
GRAD_RULE_DEF(grad_memory)
{
	(void)need;
	gin[0] = grad_op1(G, n->op == OP_TO_HOST ? OP_TO_DEVICE : OP_TO_HOST,
	                  V(gout[0]));
	return 1;
}

/* ------------------------------------------------------------------ in place */

/* add_ sub_ mul_ div_ copy_: gout[0] is the gradient of the new version of
 * operand 0, gin[0] goes to its old version. */
GRAD_RULE_DEF(grad_inplace)
{
	ValId g = gout[0];
	Opnd b = grad_arg(G, n, 1);
	switch (n->op) {
	case OP_ADD_:
		gin[0] = gin[1] = g;
		break;
	case OP_SUB_:
		gin[0] = g;
		if (need[1]) {
			grad_target(G, n, 1);
			gin[1] = grad_op1(G, OP_NEG, V(g));
		}
		break;
	case OP_MUL_:
		if (need[0]) {
			grad_target(G, n, 0);
			gin[0] = grad_op2(G, OP_MUL, V(g), b);
		}
		if (need[1]) {
			grad_target(G, n, 1);
			gin[1] = grad_op2(G, OP_MUL, V(g), V(grad_in(G, 0)));
		}
		break;
	case OP_DIV_:
		if (need[0]) {
			grad_target(G, n, 0);
			gin[0] = grad_op2(G, OP_DIV, V(g), b);
		}
		if (need[1]) {
			grad_target(G, n, 1);
			gin[1] = div_other_grad(G, g, V(grad_in(G, 0)), b);
		}
		break;
	case OP_COPY_: /* the old value is gone: only the source gets it */
		gin[1] = g;
		break;
	default:
		ICE("grad_inplace: %s", op_name(n->op));
	}
	return 1;
}

/* ------------------------------------------------------------------ collectives, control_deps */

/* broadcast(x, root=R): every rank's gradient summed onto rank R, zeros on
 * the others (torch.distributed.nn's broadcast).  Each rank puts its g in
 * block R of a tensor of WORLD blocks along dim 0, zeros elsewhere; a
 * reduce_scatter (sum) gives rank r the sum of block r: sum(g) on R. */
static ValId
grad_broadcast(Grad *G, const Node *n, ValId g)
{
	Type x = *grad_type(G, g);
	int64_t W = ir_world(grad_graph(G)->mod), root = ir_attr_int(n, "root", 0);
	int scalar = x.rank == 0;
	if (scalar) {
		int64_t one = 1;
		g = grad_reshape(G, g, &one, 1);
		x = *grad_type(G, g);
	}
	Opnd all = V(between_zeros(G, g, 0, x.d[0] * root, x.d[0] * (W - 1 - root)));
	Node *m = grad_node(G, OP_REDUCE_SCATTER, &all, 1);
	grad_sets(m, "op", "sum");
	grad_set(m, "dim", 0);
	ValId r = grad_end(G, m, 1);
	int64_t none = 0;
	return scalar ? grad_reshape(G, r, &none, 0) : r;
}

/* The adjoint of each collective: all_reduce (sum or avg) is its own,
 * all_gather's is reduce_scatter (sum) and the other way round (avg:
 * divided by WORLD), all_to_all's is all_to_all, broadcast's a sum onto
 * its root. */
GRAD_RULE_DEF(grad_collective)
{
	(void)need;
	ValId g = gout[0];
	Opnd o = V(g);
	const Attr *op = ir_attr(n, "op");
	if (op && (strcmp(op->s, "max") == 0 || strcmp(op->s, "min") == 0))
		return grad_error(G, "'%s' with op=\"%s\" has no derivative, but the "
		                  "loss depends on a param through it", op_name(n->op),
		                  op->s);
	Node *m;
	switch (n->op) {
	case OP_ALL_REDUCE:
		m = grad_node(G, OP_ALL_REDUCE, &o, 1);
		grad_sets(m, "op", op->s);
		gin[0] = grad_end(G, m, 1);
		break;
	case OP_ALL_GATHER:
		m = grad_node(G, OP_REDUCE_SCATTER, &o, 1);
		grad_set(m, "dim", ir_attr_int(n, "dim", 0));
		gin[0] = grad_end(G, m, 1);
		break;
	case OP_REDUCE_SCATTER: {
		m = grad_node(G, OP_ALL_GATHER, &o, 1);
		grad_set(m, "dim", ir_attr_int(n, "dim", 0));
		gin[0] = grad_end(G, m, 1);
		if (strcmp(op->s, "avg") == 0)
			gin[0] = grad_op2(G, OP_DIV, V(gin[0]), grad_li(ir_world(grad_graph(G)->mod)));
		break;
	}
	case OP_BROADCAST:
		gin[0] = grad_broadcast(G, n, g);
		break;
	case OP_ALL_TO_ALL:
		m = grad_node(G, OP_ALL_TO_ALL, &o, 1);
		grad_set(m, "dim", ir_attr_int(n, "dim", 0));
		gin[0] = grad_end(G, m, 1);
		break;
	default:
		ICE("grad_collective: %s", op_name(n->op));
	}
	return 1;
}

/* control_deps passes its values through: result j is value operand j. */
GRAD_RULE_DEF(grad_control_deps)
{
	(void)G;
	(void)need;
	for (uint32_t k = 0, j = 0; k < n->nopnd && j < n->nres; k++)
		if (n->opnd[k].kind == OK_VAL)
			gin[k] = gout[j++];
	return 1;
}
