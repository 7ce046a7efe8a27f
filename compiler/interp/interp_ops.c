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

#include "sgc.h"

/* ------------------------------------------------------------------ unary */

static double
gelu(double x, int tanh_approx)
{
	if (tanh_approx) {
		double k = 0.79788456080286535588; /* sqrt(2 / pi) */
		return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
	}
	return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
}

/* One-operand op in floating point. */
static double
unary_f(const Node *n, double x)
{
	switch (n->op) {
	case OP_NEG: return -x;
	case OP_ABS: return fabs(x);
	case OP_EXP: return exp(x);
	case OP_LOG: return log(x);
	case OP_LOG1P: return log1p(x);
	case OP_SQRT: return sqrt(x);
	case OP_RSQRT: return 1.0 / sqrt(x);
	case OP_RECIPROCAL: return 1.0 / x;
	case OP_SQUARE: return x * x;
	case OP_SIN: return sin(x);
	case OP_COS: return cos(x);
	case OP_TANH: return tanh(x);
	case OP_SIGMOID: return 1.0 / (1.0 + exp(-x));
	case OP_RELU: return x < 0 ? 0.0 : x;
	case OP_GELU: {
		const Attr *a = ir_attr(n, "approximate");
		return gelu(x, a && a->s && strcmp(a->s, "tanh") == 0);
	}
	case OP_SILU: return x / (1.0 + exp(-x));
	case OP_ERF: return erf(x);
	case OP_SIGN: return isnan(x) ? 0.0 : (x > 0) - (x < 0);
	case OP_FLOOR: return floor(x);
	}
	ICE("%s is not a unary op", op_name(n->op));
}

/* One-operand op on integers (and bools, as 0/1). */
static int64_t
unary_i(const Node *n, int64_t x)
{
	uint64_t u = (uint64_t)x;
	switch (n->op) {
	case OP_NEG: return (int64_t)(0 - u);
	case OP_ABS: return x < 0 ? (int64_t)(0 - u) : x;
	case OP_SQUARE: return (int64_t)(u * u);
	case OP_RELU: return x > 0 ? x : 0;
	case OP_SIGN: return (x > 0) - (x < 0);
	case OP_FLOOR: return x;
	default: return x;
	}
}

int
interp_unary(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	Tensor *x = in[0], *r = out[0];
	if (dtype_is_float(r->dt)) {
		for (int64_t i = 0; i < r->numel; i++)
			interp_setf(r, i, unary_f(n, interp_opndf(n, 0, x, i, r->dt)));
	} else {
		for (int64_t i = 0; i < r->numel; i++)
			interp_seti(r, i, unary_i(n, interp_geti(x, i)));
	}
	return 0;
}

/* ------------------------------------------------------------------ binary */

static int
is_compare(int op)
{
	return op == OP_EQ || op == OP_NE || op == OP_LT || op == OP_LE ||
	       op == OP_GT || op == OP_GE;
}

static double
binary_f(int op, double a, double b)
{
	switch (op) {
	case OP_ADD: return a + b;
	case OP_SUB: return a - b;
	case OP_MUL: return a * b;
	case OP_DIV: return a / b;
	case OP_POW: return pow(a, b);
	case OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
	case OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
	case OP_EQ: return a == b;
	case OP_NE: return a != b;
	case OP_LT: return a < b;
	case OP_LE: return a <= b;
	case OP_GT: return a > b;
	case OP_GE: return a >= b;
	}
	ICE("%s is not a binary op", op_name(op));
}

/* Integer power by squaring, wrapping; a negative exponent gives 1 / a^-b
 * truncated (0 unless a is 1 or -1). */
static int64_t
ipow(int64_t a, int64_t b)
{
	if (b < 0)
		return a == 1 ? 1 : a == -1 ? (b & 1 ? -1 : 1) : 0;
	uint64_t r = 1, x = (uint64_t)a;
	while (b) {
		if (b & 1)
			r *= x;
		x *= x;
		b >>= 1;
	}
	return (int64_t)r;
}

static int64_t
binary_i(int op, int64_t a, int64_t b)
{
	uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
	switch (op) {
	case OP_ADD: return (int64_t)(ua + ub);
	case OP_SUB: return (int64_t)(ua - ub);
	case OP_MUL: return (int64_t)(ua * ub);
	case OP_POW: return ipow(a, b);
	case OP_MAXIMUM: return a > b ? a : b;
	case OP_MINIMUM: return a < b ? a : b;
	case OP_EQ: return a == b;
	case OP_NE: return a != b;
	case OP_LT: return a < b;
	case OP_LE: return a <= b;
	case OP_GT: return a > b;
	case OP_GE: return a >= b;
	}
	ICE("%s is not an integer binary op", op_name(op));
}

/* v rounded to dtype dt (a float type). */
static double
round_to(DType dt, double v)
{
	Tensor t = {.dt = (uint8_t)dt, .rank = 0, .numel = 1};
	double buf;
	t.data = &buf;
	interp_setf(&t, 0, v);
	return interp_getf(&t, 0);
}

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
	if (op == OP_DIV && !dtype_is_float(cdt))
		cdt = DT_F32; /* true division */
	int fl = dtype_is_float(cdt), cmp = is_compare(op);
	for (int64_t i = 0; i < r->numel; i++, interp_iter_next(&it)) {
		if (fl) {
			double x = interp_opndf(n, 0, a, it.off[0], cdt);
			double y = interp_opndf(n, 1, b, it.off[1], cdt);
			if (cmp) {
				x = round_to(cdt, x);
				y = round_to(cdt, y);
			}
			interp_setf(r, i, binary_f(op, x, y));
		} else {
			int64_t x = interp_opndi(n, 0, a, it.off[0]);
			int64_t y = interp_opndi(n, 1, b, it.off[1]);
			interp_seti(r, i, binary_i(op, x, y));
		}
	}
}

int
interp_binary(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	DType cdt = (DType)out[0]->dt;
	if (is_compare(n->op))
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
		int c = interp_opndi(n, 0, in[0], it.off[0]) != 0;
		int k = c ? 1 : 2;
		if (fl)
			interp_setf(r, i, interp_opndf(n, k, in[k], it.off[k], r->dt));
		else
			interp_seti(r, i, interp_opndi(n, k, in[k], it.off[k]));
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
			if (!isnan(v)) {
				if (lo && (v < l || isnan(l)))
					v = l;
				if (hi && (v > h || isnan(h)))
					v = h;
			}
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
	switch (n->op) {
	case OP_ADD_: case OP_SUB_: case OP_MUL_: case OP_DIV_:
		binary(n, op_inplace_base(n->op), shape_result_type(I->g, n, 0, 2),
		       x, in[1], x);
		break;
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
