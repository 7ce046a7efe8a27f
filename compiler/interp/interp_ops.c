/*
 * interp_ops.c - interpreter kernels for pointwise ops, casts, creation
 * and in-place ops.
 *
 * Every kernel computes in the op's compute dtype as PyTorch does: floats
 * in "opmath" (double for f64; float for f32, f16 and bf16: operands are
 * rounded to float, the operation is done in double and rounded to float,
 * which for + - * / sqrt is exactly float arithmetic), then the result is
 * rounded to the result dtype; integers in int64 with two's complement
 * wrap-around (i32 wraps when stored); bool as 0/1 integers.
 */
#include <math.h>
#include <string.h>

#include "interp.h"
#include "sgk/sgk_pointwise.h"

/* ------------------------------------------------------------------ unary */

/* The formulas are runtime/sgk/sgk_pointwise.h's (the op table names each
 * op's, op_formula): the double form for every float dtype, the int64
 * form for integers and bools. */

/* The formula of op as node n computes it (op: n's own, or the base of
 * n's in-place op). */
static const PwFormula *
formula(const Node *n, int op)
{
	const PwFormula *f = op == n->op ? op_formula(n) : &op_table[op].pw;
	if (!f || !f->name)
		ICE("%s has no pointwise formula", op_name(op));
	return f;
}

int
interp_unary(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	Tensor *x = in[0], *r = out[0];
	const PwFormula *f = formula(n, n->op);
	if (dtype_is_float(r->dt)) {
		for (int64_t i = 0; i < r->numel; i++)
			interp_setf(r, i, f->d1(interp_opndf(n, 0, x, i, r->dt)));
	} else {
		if (!f->i1)
			ICE("%s has no integer form", op_name(n->op));
		for (int64_t i = 0; i < r->numel; i++)
			interp_seti(r, i, f->i1(interp_geti(x, i)));
	}
	return 0;
}

/* ------------------------------------------------------------------ binary */

/* r = op(a, b) over r's shape, operands 0 and 1 of n broadcast, computed
 * in dtype cdt and stored converted to r's dtype.  Comparisons convert a
 * scalar to cdt itself (bf16 == 0.1 compares with bf16(0.1), as PyTorch
 * does); arithmetic keeps it in opmath precision. */
static void
binary(const Node *n, int op, DType cdt, Tensor *a, Tensor *b, Tensor *r)
{
	Tensor *ops[2] = {a, b};
	BcastIter it;
	interp_iter_init(&it, r->rank, r->shape, ops, 2);
	const PwFormula *f = formula(n, op);
	if (!dtype_is_float(cdt) && !f->i2)
		cdt = DT_F32; /* no integer form: div, true division */
	int fl = dtype_is_float(cdt), cmp = op_table[op].flags & OPF_COMPARE;
	for (int64_t i = 0; i < r->numel; i++, interp_iter_next(&it)) {
		if (fl) {
			double x = interp_opndf(n, 0, a, it.off[0], cdt);
			double y = interp_opndf(n, 1, b, it.off[1], cdt);
			if (cmp) {
				x = interp_round(cdt, x);
				y = interp_round(cdt, y);
			}
			interp_setf(r, i, f->d2(x, y));
		} else {
			int64_t x = interp_opndi(n, 0, a, it.off[0], cdt);
			int64_t y = interp_opndi(n, 1, b, it.off[1], cdt);
			interp_seti(r, i, f->i2(x, y));
		}
	}
}

int
interp_binary(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	DType cdt = (DType)out[0]->dt;
	if (op_table[n->op].flags & OPF_COMPARE)
		cdt = shape_result_type(I->g, n, 0, 2);
	binary(n, n->op, cdt, in[0], in[1], out[0]);
	return 0;
}

int
interp_where(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	Tensor *r = out[0];
	BcastIter it;
	interp_iter_init(&it, r->rank, r->shape, in, 3);
	int fl = dtype_is_float(r->dt);
	for (int64_t i = 0; i < r->numel; i++, interp_iter_next(&it)) {
		int c = interp_opndi(n, 0, in[0], it.off[0], DT_I64) != 0;
		int k = c ? 1 : 2;
		if (fl)
			interp_setf(r, i, interp_opndf(n, k, in[k], it.off[k], r->dt));
		else
			interp_seti(r, i, interp_opndi(n, k, in[k], it.off[k], (DType)r->dt));
	}
	return 0;
}

int
interp_clamp(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	const Attr *lo = ir_attr(n, "min"), *hi = ir_attr(n, "max");
	Tensor *x = in[0], *r = out[0];
	if (dtype_is_float(r->dt)) {
		double l = lo ? interp_opmath(r->dt, attr_num_f(lo)) : 0;
		double h = hi ? interp_opmath(r->dt, attr_num_f(hi)) : 0;
		for (int64_t i = 0; i < r->numel; i++) {
			double v = interp_opndf(n, 0, x, i, r->dt);
			if (lo)
				v = sgk_clamp_lo_d(v, l);
			if (hi)
				v = sgk_clamp_hi_d(v, h);
			interp_setf(r, i, v);
		}
		return 0;
	}
	int64_t l = lo ? attr_num_i(lo) : 0, h = hi ? attr_num_i(hi) : 0;
	for (int64_t i = 0; i < r->numel; i++) {
		int64_t v = interp_geti(x, i);
		if (lo && v < l)
			v = l;
		if (hi && v > h)
			v = h;
		interp_seti(r, i, v);
	}
	return 0;
}

/* ------------------------------------------------------------------ casts */

/* r = src converted to r's dtype (Tensor.to), src broadcast to r's shape. */
static void
convert(Tensor *src, Tensor *r)
{
	if (src->dt == r->dt && src->numel == r->numel) {
		memmove(r->data, src->data, (size_t)r->numel * (size_t)dtype_size(r->dt));
		return;
	}
	BcastIter it;
	interp_iter_init(&it, r->rank, r->shape, &src, 1);
	int fl = dtype_is_float(src->dt);
	for (int64_t i = 0; i < r->numel; i++, interp_iter_next(&it)) {
		if (fl)
			interp_setf(r, i, interp_getf(src, it.off[0]));
		else
			interp_seti(r, i, interp_geti(src, it.off[0]));
	}
}

int
interp_cast(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	(void)n;
	convert(in[0], out[0]);
	return 0;
}

/* ------------------------------------------------------------------ creation */

/* Every element of r set to a num attribute's value. */
static void
fill(Tensor *r, const Attr *v)
{
	for (int64_t i = 0; i < r->numel; i++) {
		if (v->num_kind == OK_FLOAT)
			interp_setf(r, i, v->f);
		else
			interp_seti(r, i, attr_num_i(v));
	}
}

int
interp_creation(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	(void)in;
	Tensor *r = out[0];
	switch (n->op) {
	case OP_ZEROS:
		memset(r->data, 0, (size_t)r->numel * (size_t)dtype_size(r->dt));
		break;
	case OP_ONES:
		for (int64_t i = 0; i < r->numel; i++)
			interp_seti(r, i, 1);
		break;
	case OP_FULL:
		fill(r, ir_attr(n, "value"));
		break;
	case OP_ARANGE:
		for (int64_t i = 0; i < r->numel; i++)
			interp_seti(r, i, i);
		break;
	default:
		ICE("%s is not a creation op", op_name(n->op));
	}
	return 0;
}

/* ------------------------------------------------------------------ in place */

int
interp_inplace(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)out;
	Tensor *x = in[0];
	if (op_table[n->op].has_base) { /* add_ sub_ mul_ div_ */
		binary(n, op_inplace_base(n->op), shape_result_type(I->g, n, 0, 2),
		       x, in[1], x);
		return 0;
	}
	switch (n->op) {
	case OP_COPY_:
		convert(in[1], x);
		break;
	case OP_ZERO_:
		memset(x->data, 0, (size_t)x->numel * (size_t)dtype_size(x->dt));
		break;
	case OP_FILL_:
		fill(x, ir_attr(n, "value"));
		break;
	default:
		ICE("%s is not an in-place op", op_name(n->op));
	}
	return 0;
}
