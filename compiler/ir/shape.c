/*
 * shape.c - the shape and dtype rule of every op (the `shape` column of
 * ops.def), with PyTorch's semantics (torch 2.x):
 *
 *   - type promotion as c10's result_type: operands fall in three priority
 *     classes (dimensioned tensors > zero-dim tensors > Python scalars, which
 *     our scalar literals are), and a lower class only decides the dtype
 *     when it is of a higher category (bool < integer < float);
 *   - broadcasting as NumPy's;
 *   - each op's own checks as ATen makes them (sub of bool, integer mean,
 *     matmul's inner dims, chunk's result count, ...).
 *
 * A rule reads the operand types and attributes of a node and writes the
 * type of each result.  On a problem it reports "op: message" at the
 * operand or attribute that is wrong (the statement when that has no
 * location), marks every result DT_ERR so that later statements stay
 * quiet, and returns 0.  Sema has already checked operand kinds and
 * attribute types and filled defaults (see sgc.h).
 *
 * Documented choices where PyTorch is more permissive than sgc:
 *   - matmul, linear and attention take floating operands of one dtype
 *     (PyTorch's CPU matmul also takes integers; cuBLAS does not);
 *   - linear's weight is [out, in] and its bias [out]; layer_norm's and
 *     rms_norm's weight and bias are [D] with the input's dtype;
 *   - cross_entropy takes class indices (i64), not class probabilities;
 *   - where's condition may be the literal true or false.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "sgc.h"

/* The largest tensor, in bytes. */
#define MAX_BYTES ((int64_t)1 << 62)

/* ------------------------------------------------------------------ text */

/* A buffer for one piece of message text. */
typedef struct {
	char s[512];
} Text;

/* "[2, 3]": n sizes (or dims) as a list. */
static const char *
ints_text(Text *b, const int64_t *v, int n)
{
	size_t len = 1;
	b->s[0] = '[';
	for (int i = 0; i < n && len + 24 < sizeof b->s; i++)
		len += (size_t)snprintf(b->s + len, sizeof b->s - len,
		                        "%s%" PRId64, i ? ", " : "", v[i]);
	b->s[len++] = ']';
	b->s[len] = '\0';
	return b->s;
}

/* "f32[64, 1024]": a type as messages show it. */
static const char *
type_text(Text *b, const Type *t)
{
	Text dims;
	snprintf(b->s, sizeof b->s, "%s%s", dtype_name((DType)t->dt),
	         ints_text(&dims, t->d, t->rank));
	return b->s;
}

/* "'%x'" for a value operand, the literal itself for a scalar. */
static const char *
opnd_text(Text *b, const Graph *g, const Opnd *o)
{
	const char *name;
	switch (o->kind) {
	case OK_VAL:
		name = g->vals.v[o->v].name;
		snprintf(b->s, sizeof b->s, "'%%%.200s'", name ? name : "?");
		break;
	case OK_INT:
		snprintf(b->s, sizeof b->s, "%" PRId64, o->i);
		break;
	case OK_FLOAT:
		fmt_double(b->s, o->f);
		break;
	case OK_BOOL:
		strcpy(b->s, o->i ? "true" : "false");
		break;
	default:
		strcpy(b->s, "?");
	}
	return b->s;
}

/* "'%x' (f32[2, 3])": operand i of n with its type, for messages. */
static const char *
opnd_desc(Text *b, const Graph *g, const Node *n, int i)
{
	Text name, ty;
	const Opnd *o = &n->opnd[i];
	if (o->kind != OK_VAL)
		return opnd_text(b, g, o);
	snprintf(b->s, sizeof b->s, "%.240s (%.240s)", opnd_text(&name, g, o),
	         type_text(&ty, &g->vals.v[o->v].type));
	return b->s;
}

/* ------------------------------------------------------------------ reporting */

/* Reports "op: message" at `at` (the statement when `at` has no line) and
 * marks every result of n as DT_ERR: a failed statement defines its
 * results, but nothing is checked against them again.  Returns 0, so
 * rules end with `return shape_fail(...)`. */
int
shape_fail(Graph *g, Node *n, Diag *d, Loc at, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	diag_error(d, at.line ? at : n->loc, "%s: %s", op_name(n->op), msg);
	for (uint32_t i = 0; i < n->nres; i++) {
		Type *t = &g->vals.v[n->res[i]].type;
		memset(t, 0, sizeof *t);
		t->dt = DT_ERR;
	}
	return 0;
}

/* Location of operand i (shape_fail() points at the statement when it has
 * none). */
static Loc
oloc(const Node *n, int i)
{
	return n->opnd[i].loc;
}

/* Attribute `name` of n.  Sema fills every attribute of the spec in spec
 * order, so only an optional one may be unset (check ->set). */
static const Attr *
attr(const Node *n, const char *name)
{
	int i = op_attr_index(n->op, name);
	if (i < 0 || (uint32_t)i >= n->nattr)
		ICE("%s has no attribute %s", op_name(n->op), name);
	return &n->attr[i];
}

/* ------------------------------------------------------------------ sizes */

/* a * b for sizes (both >= 0); 0 when it overflows int64. */
static int
mul_ok(int64_t a, int64_t b, int64_t *out)
{
	if (a < 0 || b < 0 || (a && b > INT64_MAX / a))
		return 0;
	*out = a * b;
	return 1;
}

/* a + b for sizes (both >= 0); 0 when it overflows int64. */
static int
add_ok(int64_t a, int64_t b, int64_t *out)
{
	if (a < 0 || b < 0 || b > INT64_MAX - a)
		return 0;
	*out = a + b;
	return 1;
}

/* The element count of t; -1 when it overflows int64. */
static int64_t
numel_checked(const Type *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		if (!mul_ok(n, t->d[i], &n))
			return -1;
	return n;
}

/* The type of operand o: its value's, or a 0-d tensor of the literal's
 * dtype (the dtype of a Python scalar in PyTorch, default float f32). */
static Type
opnd_type(const Graph *g, const Opnd *o)
{
	Type t;
	if (o->kind == OK_VAL)
		return g->vals.v[o->v].type;
	memset(&t, 0, sizeof t);
	t.dt = o->kind == OK_INT ? DT_I64 : o->kind == OK_BOOL ? DT_BOOL : DT_F32;
	return t;
}

/* The type of value operand i of n. */
static const Type *
otype(const Graph *g, const Node *n, int i)
{
	if (n->opnd[i].kind != OK_VAL)
		ICE("operand %d of %s is not a value", i, op_name(n->op));
	return &g->vals.v[n->opnd[i].v].type;
}

/* A type of dtype dt and the given sizes, in device memory. */
static Type
make_type(DType dt, const int64_t *d, int rank)
{
	Type t;
	memset(&t, 0, sizeof t);
	t.dt = (uint8_t)dt;
	t.rank = (uint8_t)rank;
	for (int i = 0; i < rank; i++)
		t.d[i] = d[i];
	return t;
}

/* Sets result i of n to t (dim names dropped) after checking that it is
 * not too large: numel times the element size at most 2^62 bytes. */
static int
set_result(Graph *g, Node *n, Diag *d, uint32_t i, const Type *t)
{
	Text ty;
	Type r = *t;
	for (int k = 0; k < SG_MAXRANK; k++) {
		r.sym[k] = -1;
		if (k >= r.rank)
			r.d[k] = 0;
	}
	int64_t ne = numel_checked(&r), sz = dtype_size((DType)r.dt);
	if (ne < 0 || (sz && ne > MAX_BYTES / sz))
		return shape_fail(g, n, d, n->loc, "result %s is too large (over 2^62 bytes)",
		                  type_text(&ty, &r));
	if (i >= n->nres)
		return shape_fail(g, n, d, n->loc, "gives a result, but the statement names %u",
		                  n->nres);
	g->vals.v[n->res[i]].type = r;
	return 1;
}

/* Checks that a result of `rank` dims fits in a Type. */
static int
rank_ok(Graph *g, Node *n, Diag *d, Loc at, int64_t rank)
{
	if (rank <= SG_MAXRANK)
		return 1;
	return shape_fail(g, n, d, at,
	                  "the result would have %" PRId64 " dims; at most %d are supported",
	                  rank, SG_MAXRANK);
}

/* Checks that the statement names `want` results, for the ops whose count
 * the rule decides. */
static int
want_results(Graph *g, Node *n, Diag *d, int64_t want)
{
	if (n->nres == want)
		return 1;
	return shape_fail(g, n, d, n->loc, "gives %" PRId64 " result%s, but the statement names %u",
	                  want, want == 1 ? "" : "s", n->nres);
}

/* ------------------------------------------------------------------ dims */

/* dim in [-rank, rank - 1] -> [0, rank - 1]; -1 when out of range. */
int
shape_norm_dim(int64_t dim, int rank)
{
	if (dim < -(int64_t)rank || dim >= rank)
		return -1;
	return (int)(dim < 0 ? dim + rank : dim);
}

/* Normalises dim against `range` dims (the rank, 1 for a 0-d tensor where
 * PyTorch wraps dims as for one dim, rank + 1 for unsqueeze), reporting it
 * against operand oi when it is out of range.  Returns the dim or -1. */
static int
norm_dim(Graph *g, Node *n, Diag *d, Loc at, int64_t dim, int range, int oi)
{
	Text x;
	int k = shape_norm_dim(dim, range);
	if (k >= 0)
		return k;
	shape_fail(g, n, d, at,
	           "dim %" PRId64 " is out of range for %s: expected a dim in [%d, %d]",
	           dim, opnd_desc(&x, g, n, oi), -range, range - 1);
	return -1;
}

/* The dim attribute `name` of n, normalised against operand oi (0-d
 * tensors wrap as 1-d ones).  Returns -1 after reporting. */
static int
dim_attr(Graph *g, Node *n, Diag *d, const char *name, int oi)
{
	const Attr *a = attr(n, name);
	int rank = otype(g, n, oi)->rank;
	return norm_dim(g, n, d, a->loc, a->i, rank ? rank : 1, oi);
}

/* Reports operand oi when it is 0-d and the op needs a dim to work on. */
static int
need_dims(Graph *g, Node *n, Diag *d, int oi)
{
	Text x;
	if (otype(g, n, oi)->rank > 0)
		return 1;
	return shape_fail(g, n, d, oloc(n, oi),
	                  "expects a tensor with at least one dim, but %s is 0-d",
	                  opnd_desc(&x, g, n, oi));
}

/* ------------------------------------------------------------------ promotion */

/* Categories of dtypes for promotion: bool < integer < floating. */
static int
dtype_cat(DType t)
{
	return t == DT_BOOL ? 0 : dtype_is_int(t) ? 1 : 2;
}

/* PyTorch's promoteTypes, skipping an undefined (DT_ERR) side. */
DType
dtype_promote(DType a, DType b)
{
	if (a >= DT__N)
		return b;
	if (b >= DT__N || a == b)
		return a;
	int ca = dtype_cat(a), cb = dtype_cat(b);
	if (ca != cb)
		return ca > cb ? a : b;
	if (ca == 1)
		return DT_I64;
	if (a == DT_F64 || b == DT_F64)
		return DT_F64;
	return DT_F32; /* f16 with bf16, or either with f32 */
}

/* PyTorch's canCast: no float to integer or bool, no integer to bool. */
static int
can_cast(DType from, DType to)
{
	if (dtype_is_float(from) && !dtype_is_float(to))
		return 0;
	return from == DT_BOOL || to != DT_BOOL;
}

/* c10's ResultTypeState: the promoted dtype of each priority class. */
typedef struct {
	DType dim, zero, wrapped;
} Promo;

/* An empty state: every class undefined. */
static Promo
promo_new(void)
{
	Promo p = {DT_ERR, DT_ERR, DT_ERR};
	return p;
}

/* A scalar literal (or number attribute) of kind OK_INT/OK_FLOAT/OK_BOOL:
 * a Python scalar, whose float dtype is the default dtype, f32. */
static void
promo_scalar(Promo *p, int kind)
{
	DType t = kind == OK_INT ? DT_I64 : kind == OK_BOOL ? DT_BOOL : DT_F32;
	p->wrapped = dtype_promote(p->wrapped, t);
}

/* Operand o: a literal is a Python scalar, a tensor counts in the class
 * of its dimensions. */
static void
promo_opnd(Promo *p, const Graph *g, const Opnd *o)
{
	if (o->kind != OK_VAL) {
		promo_scalar(p, o->kind);
		return;
	}
	const Type *t = &g->vals.v[o->v].type;
	if (t->rank > 0)
		p->dim = dtype_promote(p->dim, (DType)t->dt);
	else
		p->zero = dtype_promote(p->zero, (DType)t->dt);
}

/* c10's combine_categories: the lower class counts only when it is of a
 * higher category (or the higher class is bool). */
static DType
combine(DType higher, DType lower)
{
	if (dtype_is_float(higher))
		return higher;
	if (higher == DT_BOOL || dtype_is_float(lower))
		return dtype_promote(higher, lower);
	return higher != DT_ERR ? higher : lower;
}

/* c10's result_type: dimensioned over zero-dim over scalars. */
static DType
promo_result(const Promo *p)
{
	return combine(p->dim, combine(p->zero, p->wrapped));
}

/* The promoted dtype of operands [first, first + count) of n. */
DType
shape_result_type(Graph *g, const Node *n, int first, int count)
{
	Promo p = promo_new();
	for (int i = first; i < first + count && i < n->nopnd; i++)
		promo_opnd(&p, g, &n->opnd[i]);
	return promo_result(&p);
}

/* ------------------------------------------------------------------ broadcasting */

/* NumPy broadcasting, right-aligned: equal sizes, or one of them 1 (a 0
 * against a 1 gives 0).  out takes a's dtype and may alias a or b. */
int
shape_broadcast(const Type *a, const Type *b, Type *out)
{
	Type r = *a;
	int rank = a->rank > b->rank ? a->rank : b->rank;
	for (int i = 0; i < rank; i++) {
		int64_t da = i < a->rank ? a->d[a->rank - 1 - i] : 1;
		int64_t db = i < b->rank ? b->d[b->rank - 1 - i] : 1;
		if (da != db && da != 1 && db != 1)
			return 0;
		r.d[rank - 1 - i] = da == 1 ? db : da;
	}
	r.rank = (uint8_t)rank;
	for (int i = 0; i < SG_MAXRANK; i++)
		r.sym[i] = -1;
	*out = r;
	return 1;
}

/* Broadcasts the shapes of operands [first, first + count) of n (a scalar
 * literal is 0-d) into *out, reporting the first operand that does not
 * fit.  out->dt is left to the caller. */
static int
broadcast_opnds(Graph *g, Node *n, Diag *d, int first, int count, Type *out)
{
	Text a, b, s;
	Type acc = opnd_type(g, &n->opnd[first]);
	for (int i = first + 1; i < first + count; i++) {
		Type t = opnd_type(g, &n->opnd[i]);
		if (shape_broadcast(&acc, &t, &acc))
			continue;
		if (i == first + 1)
			return shape_fail(g, n, d, oloc(n, i), "shapes don't broadcast: %s and %s",
			                  opnd_desc(&a, g, n, first), opnd_desc(&b, g, n, i));
		return shape_fail(g, n, d, oloc(n, i),
		                  "shapes don't broadcast: %s against %s, the shape of the operands before it",
		                  opnd_desc(&a, g, n, i), ints_text(&s, acc.d, acc.rank));
	}
	*out = acc;
	return 1;
}

/* ------------------------------------------------------------------ pointwise */

/* neg abs square relu sign floor: the operand's dtype.  Bool is an error
 * except for sign, and square of bool is i64 (PyTorch's pow(x, 2)). */
int
shape_unary_same(Graph *g, Node *n, Diag *d)
{
	Text x;
	Type t = *otype(g, n, 0);
	if (t.dt == DT_BOOL) {
		if (n->op == OP_SQUARE)
			t.dt = DT_I64;
		else if (n->op != OP_SIGN)
			return shape_fail(g, n, d, oloc(n, 0),
			                  "bool tensors are not supported, and %s is bool",
			                  opnd_desc(&x, g, n, 0));
	}
	return set_result(g, n, d, 0, &t);
}

/* exp log sqrt sin tanh sigmoid erf ...: integers and bool give f32 (the
 * default dtype), floats keep theirs. */
int
shape_unary_float(Graph *g, Node *n, Diag *d)
{
	Type t = *otype(g, n, 0);
	if (!dtype_is_float((DType)t.dt))
		t.dt = DT_F32;
	return set_result(g, n, d, 0, &t);
}

/* Reports operand i unless it is a floating tensor. */
static int
need_float(Graph *g, Node *n, Diag *d, int i)
{
	Text x;
	if (dtype_is_float((DType)otype(g, n, i)->dt))
		return 1;
	return shape_fail(g, n, d, oloc(n, i), "expects a floating-point tensor, but %s is not",
	                  opnd_desc(&x, g, n, i));
}

/* gelu silu: floating only, as PyTorch has no integer kernels. */
int
shape_unary_floatonly(Graph *g, Node *n, Diag *d)
{
	if (!need_float(g, n, d, 0))
		return 0;
	return set_result(g, n, d, 0, otype(g, n, 0));
}

/* A random op's salt= (when given): a 32-bit Philox counter word. */
static int
salt_ok(Graph *g, Node *n, Diag *d)
{
	const Attr *salt = attr(n, "salt");
	if (salt->set && (salt->i < 0 || salt->i > UINT32_MAX))
		return shape_fail(g, n, d, salt->loc,
		                  "salt=%lld is not in [0, 2^32)", (long long)salt->i);
	return 1;
}

/* dropout(x, p=, salt=): floating only; p in [0, 1] (PyTorch's check). */
int
shape_dropout(Graph *g, Node *n, Diag *d)
{
	const Attr *p = attr(n, "p");
	if (!(p->f >= 0 && p->f <= 1))
		return shape_fail(g, n, d, p->loc,
		                  "dropout probability has to be between 0 and 1, but "
		                  "got %g", p->f);
	return salt_ok(g, n, d) && shape_unary_floatonly(g, n, d);
}

/* Index of the first operand of n with dtype bool, or -1. */
static int
bool_opnd(const Graph *g, const Node *n)
{
	for (int i = 0; i < n->nopnd; i++)
		if (opnd_type(g, &n->opnd[i]).dt == DT_BOOL)
			return i;
	return -1;
}

/* The checks PyTorch makes of `op` (the out-of-place arithmetic op) on a
 * promoted dtype dt: sub takes no bool, pow no bool result and no negative
 * integer literal exponent of an integer base. */
static int
arith_checks(Graph *g, Node *n, Diag *d, int op, DType dt)
{
	Text a, b;
	int i;
	if (op == OP_SUB && (i = bool_opnd(g, n)) >= 0)
		return shape_fail(g, n, d, oloc(n, i),
		                  "subtraction with a bool operand is not supported: %s is bool",
		                  opnd_desc(&a, g, n, i));
	if (op != OP_POW)
		return 1;
	if (dt == DT_BOOL)
		return shape_fail(g, n, d, oloc(n, 0), "not supported for bool: %s and %s",
		                  opnd_desc(&a, g, n, 0), opnd_desc(&b, g, n, 1));
	if (!dtype_is_float(opnd_type(g, &n->opnd[0]).dt) &&
	    n->opnd[1].kind == OK_INT && n->opnd[1].i < 0)
		return shape_fail(g, n, d, oloc(n, 1),
		                  "integers to negative integer powers are not allowed: %s to the power %s",
		                  opnd_desc(&a, g, n, 0), opnd_text(&b, g, &n->opnd[1]));
	return 1;
}

/* The result type of the arithmetic op `op` over n's two operands:
 * broadcast shape, promoted dtype, f32 for true division of integers. */
static int
arith_type(Graph *g, Node *n, Diag *d, int op, Type *out)
{
	if (!broadcast_opnds(g, n, d, 0, 2, out))
		return 0;
	DType dt = shape_result_type(g, n, 0, 2);
	if (!arith_checks(g, n, d, op, dt))
		return 0;
	if (op == OP_DIV && !dtype_is_float(dt))
		dt = DT_F32;
	out->dt = (uint8_t)dt;
	return 1;
}

/* add sub mul div pow maximum minimum. */
int
shape_binary(Graph *g, Node *n, Diag *d)
{
	Type r;
	if (!arith_type(g, n, d, n->op, &r))
		return 0;
	return set_result(g, n, d, 0, &r);
}

/* eq ne lt le gt ge: broadcast, bool. */
int
shape_compare(Graph *g, Node *n, Diag *d)
{
	Type r;
	if (!broadcast_opnds(g, n, d, 0, 2, &r))
		return 0;
	r.dt = DT_BOOL;
	return set_result(g, n, d, 0, &r);
}

/* where(cond, a, b): cond bool (a tensor or the literal true/false), the
 * result the promotion of a and b, the shape that of all three. */
int
shape_where(Graph *g, Node *n, Diag *d)
{
	Text c;
	Type r;
	if (opnd_type(g, &n->opnd[0]).dt != DT_BOOL)
		return shape_fail(g, n, d, oloc(n, 0), "the condition must be bool, but %s is not",
		                  opnd_desc(&c, g, n, 0));
	if (!broadcast_opnds(g, n, d, 0, 3, &r))
		return 0;
	r.dt = (uint8_t)shape_result_type(g, n, 1, 2);
	return set_result(g, n, d, 0, &r);
}

/* clamp(x, min=, max=): at least one bound; the bounds promote as Python
 * scalars (i32 clamped to 0.5 is f32); a bool result is an error. */
int
shape_clamp(Graph *g, Node *n, Diag *d)
{
	Text x;
	const Attr *lo = attr(n, "min"), *hi = attr(n, "max");
	if (!lo->set && !hi->set)
		return shape_fail(g, n, d, n->loc, "at least one of min= and max= must be given");
	Promo p = promo_new();
	promo_opnd(&p, g, &n->opnd[0]);
	if (lo->set)
		promo_scalar(&p, lo->num_kind);
	if (hi->set)
		promo_scalar(&p, hi->num_kind);
	Type r = *otype(g, n, 0);
	r.dt = (uint8_t)promo_result(&p);
	if (r.dt == DT_BOOL)
		return shape_fail(g, n, d, oloc(n, 0),
		                  "not supported for bool: %s with bool bounds",
		                  opnd_desc(&x, g, n, 0));
	return set_result(g, n, d, 0, &r);
}

/* cast(x, dtype=): any dtype to any. */
int
shape_cast(Graph *g, Node *n, Diag *d)
{
	Type r = *otype(g, n, 0);
	r.dt = (uint8_t)attr(n, "dtype")->i;
	return set_result(g, n, d, 0, &r);
}

/* ------------------------------------------------------------------ reductions */

/* The dims a reduction reduces, as a bit mask over x's dims: `dims=`
 * (negative dims allowed, duplicates and out of range an error), or all
 * when absent or empty (as PyTorch's dim=[]).  A 0-d x reduces nothing,
 * but its dims are checked as for one dim. */
static int
reduce_mask(Graph *g, Node *n, Diag *d, uint32_t *mask)
{
	Text s;
	const Type *x = otype(g, n, 0);
	const Attr *a = attr(n, "dims");
	uint32_t all = (1u << x->rank) - 1;
	*mask = 0;
	if (!a->set || a->nints == 0) {
		*mask = all;
		return 1;
	}
	for (uint32_t j = 0; j < a->nints; j++) {
		int k = norm_dim(g, n, d, a->loc, a->ints[j], x->rank ? x->rank : 1, 0);
		if (k < 0)
			return 0;
		if (*mask & (1u << k))
			return shape_fail(g, n, d, a->loc,
			                  "dim %d appears more than once in dims %s", k,
			                  ints_text(&s, a->ints, (int)a->nints));
		*mask |= 1u << k;
	}
	*mask &= all;
	return 1;
}

/* The result dtype of a reduction of x (ops.def's RED): a sum (a finite
 * identity) of bool or integers is i64; a mean or a variance needs floats; a reduction whose
 * identity is an infinity (amax, amin) keeps the dtype but rejects
 * reducing a dim of size 0 (PyTorch gives no identity there). */
static int
reduce_dtype(Graph *g, Node *n, Diag *d, uint32_t mask, DType *dt)
{
	Text x;
	const Type *t = otype(g, n, 0);
	const OpInfo *o = &op_table[n->op];
	*dt = (DType)t->dt;
	if (o->finish != FIN_NONE)
		return need_float(g, n, d, 0);
	if (o->ident != RED_LOWEST && o->ident != RED_HIGHEST) {
		if (!dtype_is_float(*dt))
			*dt = DT_I64;
		return 1;
	}
	for (int k = 0; k < t->rank; k++)
		if ((mask >> k & 1) && t->d[k] == 0)
			return shape_fail(g, n, d, oloc(n, 0),
			                  "dim %d of %s has size 0, and the reduction of no elements is undefined",
			                  k, opnd_desc(&x, g, n, 0));
	return 1;
}

/* sum mean amax amin var var_mean (dims=, keepdim=); var_mean gives two
 * results of one type (variance, then mean). */
int
shape_reduce(Graph *g, Node *n, Diag *d)
{
	uint32_t mask;
	DType dt;
	if (!want_results(g, n, d, op_table[n->op].nres) ||
	    !reduce_mask(g, n, d, &mask) || !reduce_dtype(g, n, d, mask, &dt))
		return 0;
	const Type *x = otype(g, n, 0);
	int keep = (int)attr(n, "keepdim")->i;
	Type r = make_type(dt, NULL, 0);
	for (int k = 0; k < x->rank; k++) {
		if (!(mask >> k & 1))
			r.d[r.rank++] = x->d[k];
		else if (keep)
			r.d[r.rank++] = 1;
	}
	for (uint32_t i = 0; i < n->nres; i++)
		if (!set_result(g, n, d, i, &r))
			return 0;
	return 1;
}

/* ------------------------------------------------------------------ normalisation */

/* softmax log_softmax(x, dim=): floating x, any valid dim. */
int
shape_softmax(Graph *g, Node *n, Diag *d)
{
	if (!need_float(g, n, d, 0) || dim_attr(g, n, d, "dim", 0) < 0)
		return 0;
	return set_result(g, n, d, 0, otype(g, n, 0));
}

/* layer_norm(x, w?, b?) rms_norm(x, w?): over the last dim of a floating
 * x; the weight and bias (present when the operand count says so) are
 * [D], D that last dim, of x's dtype. */
int
shape_layer_norm(Graph *g, Node *n, Diag *d)
{
	Text x, w;
	if (!need_float(g, n, d, 0) || !need_dims(g, n, d, 0))
		return 0;
	const Type *t = otype(g, n, 0);
	int64_t dim = t->d[t->rank - 1];
	for (int i = 1; i < n->nopnd; i++) {
		const Type *p = otype(g, n, i);
		const char *what = i == 1 ? "weight" : "bias";
		if (p->rank != 1 || p->d[0] != dim)
			return shape_fail(g, n, d, oloc(n, i),
			                  "the %s must have the shape [%" PRId64 "] of the last dim of %s, but %s is not",
			                  what, dim, opnd_desc(&x, g, n, 0), opnd_desc(&w, g, n, i));
		if (p->dt != t->dt)
			return shape_fail(g, n, d, oloc(n, i),
			                  "the %s must have the dtype of %s, but %s does not",
			                  what, opnd_desc(&x, g, n, 0), opnd_desc(&w, g, n, i));
	}
	return set_result(g, n, d, 0, t);
}

/* ------------------------------------------------------------------ linear algebra */

/* Operands [first, first + count) of n must be floating tensors of one
 * dtype: sgc's matrix products are cuBLAS's (integer matmul is rejected). */
static int
same_float(Graph *g, Node *n, Diag *d, int first, int count)
{
	Text a, b;
	for (int i = first; i < first + count; i++) {
		if (!dtype_is_float((DType)otype(g, n, i)->dt))
			return shape_fail(g, n, d, oloc(n, i),
			                  "expects floating-point operands (integer products are not supported), but %s is not",
			                  opnd_desc(&a, g, n, i));
		if (i > first && otype(g, n, i)->dt != otype(g, n, first)->dt)
			return shape_fail(g, n, d, oloc(n, i),
			                  "operands must have the same dtype: %s and %s",
			                  opnd_desc(&a, g, n, first), opnd_desc(&b, g, n, i));
	}
	return 1;
}

/* The batch dims of t: all but its last `keep`. */
static Type
batch_of(const Type *t, int keep)
{
	int rank = t->rank > keep ? t->rank - keep : 0;
	return make_type((DType)t->dt, t->d, rank);
}

/* matmul(a, b) as torch.matmul: a 1-D a is [1, k] and a 1-D b is [k, 1],
 * the added dim dropped from the result; the batch dims broadcast. */
int
shape_matmul(Graph *g, Node *n, Diag *d)
{
	Text x, y, xt, yt;
	if (!same_float(g, n, d, 0, 2))
		return 0;
	const Type *a = otype(g, n, 0), *b = otype(g, n, 1);
	if (a->rank == 0 || b->rank == 0)
		return shape_fail(g, n, d, oloc(n, a->rank ? 1 : 0),
		                  "both operands need at least one dim: %s and %s",
		                  opnd_desc(&x, g, n, 0), opnd_desc(&y, g, n, 1));
	int64_t ka = a->d[a->rank - 1];
	int64_t kb = b->rank == 1 ? b->d[0] : b->d[b->rank - 2];
	if (ka != kb)
		return shape_fail(g, n, d, oloc(n, 1),
		                  "inner dimensions differ: %s is %s and %s is %s",
		                  opnd_text(&x, g, &n->opnd[0]), type_text(&xt, a),
		                  opnd_text(&y, g, &n->opnd[1]), type_text(&yt, b));
	Type ba = batch_of(a, 2), bb = batch_of(b, 2), r;
	if (!shape_broadcast(&ba, &bb, &r))
		return shape_fail(g, n, d, oloc(n, 1),
		                  "batch dimensions don't broadcast: %s and %s",
		                  opnd_desc(&x, g, n, 0), opnd_desc(&y, g, n, 1));
	if (a->rank >= 2)
		r.d[r.rank++] = a->d[a->rank - 2];
	if (b->rank >= 2)
		r.d[r.rank++] = b->d[b->rank - 1];
	r.dt = a->dt;
	return set_result(g, n, d, 0, &r);
}

/* linear(x [..., in], w [out, in], b [out]?) -> [..., out]. */
int
shape_linear(Graph *g, Node *n, Diag *d)
{
	Text x, w;
	if (!same_float(g, n, d, 0, n->nopnd) || !need_dims(g, n, d, 0))
		return 0;
	const Type *xt = otype(g, n, 0), *wt = otype(g, n, 1);
	if (wt->rank != 2)
		return shape_fail(g, n, d, oloc(n, 1),
		                  "the weight must be [out, in], but %s is not",
		                  opnd_desc(&w, g, n, 1));
	if (wt->d[1] != xt->d[xt->rank - 1])
		return shape_fail(g, n, d, oloc(n, 1),
		                  "inner dimensions differ: %s and %s (the weight is [out, in])",
		                  opnd_desc(&x, g, n, 0), opnd_desc(&w, g, n, 1));
	if (n->nopnd > 2) {
		const Type *bt = otype(g, n, 2);
		if (bt->rank != 1 || bt->d[0] != wt->d[0])
			return shape_fail(g, n, d, oloc(n, 2),
			                  "the bias must be [%" PRId64 "] for weight %s, but %s is not",
			                  wt->d[0], opnd_desc(&w, g, n, 1), opnd_desc(&x, g, n, 2));
	}
	Type r = *xt;
	r.d[r.rank - 1] = wt->d[0];
	return set_result(g, n, d, 0, &r);
}

int64_t
shape_attn_group(const Type *q, const Type *k, int gqa)
{
	if (!gqa || q->rank < 3 || k->rank < 3)
		return 1;
	int64_t hq = q->d[q->rank - 3], hk = k->d[k->rank - 3];
	if (hq == hk)
		return 1;
	return hk > 0 && hq % hk == 0 ? hq / hk : 0;
}

int
shape_attn_batch(const Type *q, const Type *k, const Type *v, int64_t group, Type *out)
{
	Type bq = batch_of(q, 2), bk = batch_of(k, 2), bv = batch_of(v, 2);
	if (group > 1 && bk.rank > 0 && bv.rank > 0)
		bk.d[bk.rank - 1] = bv.d[bv.rank - 1] = q->d[q->rank - 3];
	return shape_broadcast(&bq, &bk, out) && shape_broadcast(out, &bv, out);
}

/* scaled_dot_product_attention(q, k, v, [mask], causal=, scale=,
 * enable_gqa=) as PyTorch's: [..., T, E] x [..., S, E] x [..., S, Ev] ->
 * [..., T, Ev], the batch dims broadcast; with enable_gqa the key's and
 * value's heads (dim -3) may divide the query's; the mask (bool, or the
 * query's dtype: added to the scores) broadcasts to [..., T, S]. */
int
shape_sdpa(Graph *g, Node *n, Diag *d)
{
	Text a, b, c;
	if (!same_float(g, n, d, 0, 3))
		return 0;
	const Attr *dp = attr(n, "dropout_p");
	if (dp->set && !(dp->f >= 0 && dp->f <= 1))
		return shape_fail(g, n, d, dp->loc,
		                  "dropout probability has to be between 0 and 1, but "
		                  "got %g", dp->f);
	if (!salt_ok(g, n, d))
		return 0;
	for (int i = 0; i < 3; i++)
		if (otype(g, n, i)->rank < 2)
			return shape_fail(g, n, d, oloc(n, i),
			                  "query, key and value need at least two dims, but %s has %d",
			                  opnd_desc(&a, g, n, i), otype(g, n, i)->rank);
	const Type *q = otype(g, n, 0), *k = otype(g, n, 1), *v = otype(g, n, 2);
	if (q->d[q->rank - 1] != k->d[k->rank - 1])
		return shape_fail(g, n, d, oloc(n, 1),
		                  "the query and key have different head dims: %s and %s",
		                  opnd_desc(&a, g, n, 0), opnd_desc(&b, g, n, 1));
	if (k->d[k->rank - 2] != v->d[v->rank - 2])
		return shape_fail(g, n, d, oloc(n, 2),
		                  "the key and value have different sequence lengths: %s and %s",
		                  opnd_desc(&a, g, n, 1), opnd_desc(&b, g, n, 2));
	int gqa = ir_attr_int(n, "enable_gqa", 0) != 0;
	int64_t group = shape_attn_group(q, k, gqa);
	if (gqa) {
		for (int i = 0; i < 3; i++)
			if (otype(g, n, i)->rank < 3)
				return shape_fail(g, n, d, oloc(n, i),
				                  "enable_gqa needs the heads at dim -3, but %s has %d dims",
				                  opnd_desc(&a, g, n, i), otype(g, n, i)->rank);
		if (k->d[k->rank - 3] != v->d[v->rank - 3])
			return shape_fail(g, n, d, oloc(n, 2),
			                  "the key and value have different head counts (dim -3): %s and %s",
			                  opnd_desc(&a, g, n, 1), opnd_desc(&b, g, n, 2));
		if (group == 0)
			return shape_fail(g, n, d, oloc(n, 1),
			                  "enable_gqa: the query's %lld heads (dim -3) are not a multiple of the key's %lld: %s and %s",
			                  (long long)q->d[q->rank - 3], (long long)k->d[k->rank - 3],
			                  opnd_desc(&a, g, n, 0), opnd_desc(&b, g, n, 1));
	}
	Type r;
	if (!shape_attn_batch(q, k, v, group, &r)) {
		if (!gqa && q->rank >= 3 && k->rank >= 3 && k->d[k->rank - 3] > 1 &&
		    q->d[q->rank - 3] > k->d[k->rank - 3] && q->d[q->rank - 3] % k->d[k->rank - 3] == 0)
			return shape_fail(g, n, d, oloc(n, 1),
			                  "the query has %lld heads (dim -3) and the key %lld: enable_gqa=true lets each key and value head serve a group of query heads",
			                  (long long)q->d[q->rank - 3], (long long)k->d[k->rank - 3]);
		return shape_fail(g, n, d, n->loc,
		                  "batch dimensions don't broadcast: %s, %s and %s",
		                  opnd_desc(&a, g, n, 0), opnd_desc(&b, g, n, 1),
		                  opnd_desc(&c, g, n, 2));
	}
	r.d[r.rank++] = q->d[q->rank - 2];
	if (n->nopnd > 3) {
		const Type *m = otype(g, n, 3);
		Type full = r, x;
		full.d[full.rank++] = k->d[k->rank - 2];
		if (ir_attr_int(n, "causal", 0))
			return shape_fail(g, n, d, oloc(n, 3),
			                  "a mask and causal=true together: give one (as PyTorch, "
			                  "which rejects both)");
		if (m->dt != DT_BOOL && m->dt != q->dt)
			return shape_fail(g, n, d, oloc(n, 3),
			                  "the mask must be bool or the query's dtype %s, but %s is not",
			                  dtype_name((DType)q->dt), opnd_desc(&a, g, n, 3));
		full.dt = m->dt;
		if (!shape_broadcast(m, &full, &x) || !type_same_shape(&x, &full))
			return shape_fail(g, n, d, oloc(n, 3),
			                  "the mask %s does not broadcast to the scores' shape %s",
			                  opnd_desc(&a, g, n, 3), type_text(&b, &full));
	}
	r.d[r.rank++] = v->d[v->rank - 1];
	r.dt = q->dt;
	return set_result(g, n, d, 0, &r);
}

/* ------------------------------------------------------------------ shape ops */

/* reshape(x, shape=[...]): at most one -1, inferred from the element
 * count; other sizes non-negative; the counts must agree. */
int
shape_reshape(Graph *g, Node *n, Diag *d)
{
	Text s, x;
	const Attr *a = attr(n, "shape");
	const Type *t = otype(g, n, 0);
	int infer = -1;
	int64_t known = 1, ne = numel_checked(t);
	if (!rank_ok(g, n, d, a->loc, a->nints))
		return 0;
	ints_text(&s, a->ints, (int)a->nints);
	for (uint32_t j = 0; j < a->nints; j++) {
		if (a->ints[j] == -1 && infer >= 0)
			return shape_fail(g, n, d, a->loc,
			                  "only one dim can be inferred (-1) in shape %s", s.s);
		if (a->ints[j] == -1)
			infer = (int)j;
		else if (a->ints[j] < 0)
			return shape_fail(g, n, d, a->loc,
			                  "invalid size %" PRId64 " in shape %s", a->ints[j], s.s);
		else if (!mul_ok(known, a->ints[j], &known))
			return shape_fail(g, n, d, a->loc, "shape %s is too large", s.s);
	}
	if (infer >= 0 && known == 0)
		return shape_fail(g, n, d, a->loc,
		                  "can't infer the -1 in shape %s for %s: with a size 0 it could be anything",
		                  s.s, opnd_desc(&x, g, n, 0));
	if (infer >= 0 ? ne % known != 0 : ne != known)
		return shape_fail(g, n, d, a->loc,
		                  "shape %s is invalid for %s of %" PRId64 " elements",
		                  s.s, opnd_desc(&x, g, n, 0), ne);
	Type r = make_type((DType)t->dt, a->ints, (int)a->nints);
	if (infer >= 0)
		r.d[infer] = ne / known;
	return set_result(g, n, d, 0, &r);
}

/* transpose(x, dim0=, dim1=). */
int
shape_transpose(Graph *g, Node *n, Diag *d)
{
	int a = dim_attr(g, n, d, "dim0", 0), b;
	if (a < 0 || (b = dim_attr(g, n, d, "dim1", 0)) < 0)
		return 0;
	Type r = *otype(g, n, 0);
	if (r.rank) {
		int64_t tmp = r.d[a];
		r.d[a] = r.d[b];
		r.d[b] = tmp;
	}
	return set_result(g, n, d, 0, &r);
}

/* permute(x, dims=[...]): a permutation of x's dims. */
int
shape_permute(Graph *g, Node *n, Diag *d)
{
	Text s, x;
	const Attr *a = attr(n, "dims");
	const Type *t = otype(g, n, 0);
	uint32_t seen = 0;
	ints_text(&s, a->ints, (int)a->nints);
	if (a->nints != t->rank)
		return shape_fail(g, n, d, a->loc, "dims %s has %u entries, but %s has %d dims",
		                  s.s, a->nints, opnd_desc(&x, g, n, 0), t->rank);
	Type r = *t;
	for (uint32_t j = 0; j < a->nints; j++) {
		int k = norm_dim(g, n, d, a->loc, a->ints[j], t->rank, 0);
		if (k < 0)
			return 0;
		if (seen & (1u << k))
			return shape_fail(g, n, d, a->loc,
			                  "dims %s is not a permutation: dim %d appears twice",
			                  s.s, k);
		seen |= 1u << k;
		r.d[j] = t->d[k];
	}
	return set_result(g, n, d, 0, &r);
}

/* expand(x, shape=[...]): new leading dims allowed (not -1); -1 keeps a
 * size; only dims of size 1 change. */
int
shape_expand(Graph *g, Node *n, Diag *d)
{
	Text s, x;
	const Attr *a = attr(n, "shape");
	const Type *t = otype(g, n, 0);
	ints_text(&s, a->ints, (int)a->nints);
	if (a->nints < t->rank)
		return shape_fail(g, n, d, a->loc, "shape %s has fewer dims than %s",
		                  s.s, opnd_desc(&x, g, n, 0));
	if (!rank_ok(g, n, d, a->loc, a->nints))
		return 0;
	int lead = (int)a->nints - t->rank;
	Type r = make_type((DType)t->dt, a->ints, (int)a->nints);
	for (int j = 0; j < (int)a->nints; j++) {
		int64_t v = a->ints[j], cur = j < lead ? 0 : t->d[j - lead];
		if (j < lead && v < 0)
			return shape_fail(g, n, d, a->loc,
			                  "size %" PRId64 " isn't allowed in the new leading dim %d of shape %s",
			                  v, j, s.s);
		if (j < lead || v == cur || (cur == 1 && v >= 0))
			continue;
		if (v != -1)
			return shape_fail(g, n, d, a->loc,
			                  "size %" PRId64 " at dim %d of shape %s doesn't match size %" PRId64 " of %s; only dims of size 1 expand",
			                  v, j, s.s, cur, opnd_desc(&x, g, n, 0));
		r.d[j] = cur;
	}
	return set_result(g, n, d, 0, &r);
}

/* ------------------------------------------------------------------ layouts of views */

void
shape_row_strides(const Type *t, int64_t *st)
{
	int64_t s = 1;
	for (int d = t->rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= t->d[d];
	}
}

int
shape_row_major(const Type *t, const int64_t *st)
{
	int64_t want[SG_MAXRANK];
	shape_row_strides(t, want);
	for (int d = 0; d < t->rank; d++)
		if (t->d[d] != 1 && st[d] != want[d])
			return 0;
	return 1;
}

int
shape_view_strides(const Type *a, const int64_t *ast, const Type *b, int64_t *bst)
{
	shape_row_strides(b, bst);
	if (shape_row_major(a, ast))
		return 1;
	if (type_numel(a) == 0 || a->rank == 0)
		return 0;
	int vd = b->rank - 1;
	int64_t base = ast[a->rank - 1], tn = 1, vn = 1;
	for (int td = a->rank - 1; td >= 0; td--) {
		tn *= a->d[td];
		if (td > 0 && (a->d[td - 1] == 1 || ast[td - 1] == tn * base))
			continue; /* the run goes on */
		while (vd >= 0 && (vn < tn || b->d[vd] == 1)) {
			bst[vd] = vn * base;
			vn *= b->d[vd--];
		}
		if (vn != tn)
			return 0;
		if (td > 0)
			base = ast[td - 1], tn = vn = 1;
	}
	return vd == -1;
}

int64_t
shape_part_start(const Graph *g, const Node *n, ValId v, int *dim)
{
	int64_t start = 0;
	int cat = n->op == OP_CAT;
	uint32_t np = cat ? n->nopnd : n->nres;
	const Type *whole = cat ? &g->vals.v[n->res[0]].type : &g->vals.v[n->opnd[0].v].type;
	*dim = shape_norm_dim(ir_attr_int(n, "dim", 0), whole->rank);
	for (uint32_t j = 0; j < np; j++) {
		ValId p = cat ? n->opnd[j].v : n->res[j];
		if (p == v)
			break;
		start += g->vals.v[p].type.d[*dim];
	}
	return start;
}

int64_t
shape_clamp_index(int64_t v, int64_t size)
{
	if (v < 0)
		v += size;
	return v < 0 ? 0 : v > size ? size : v;
}

/* slice(x, dim=, start=0, end=size): step 1, Python's clamping. */
int
shape_slice(Graph *g, Node *n, Diag *d)
{
	int k;
	if (!need_dims(g, n, d, 0) || (k = dim_attr(g, n, d, "dim", 0)) < 0)
		return 0;
	Type r = *otype(g, n, 0);
	const Attr *end = attr(n, "end");
	int64_t size = r.d[k];
	int64_t lo = shape_clamp_index(attr(n, "start")->i, size);
	int64_t hi = end->set ? shape_clamp_index(end->i, size) : size;
	r.d[k] = hi > lo ? hi - lo : 0;
	return set_result(g, n, d, 0, &r);
}

int
shape_legacy_empty(const Type *t)
{
	return t->rank == 1 && t->d[0] == 0;
}

/* Checks operand i of cat against the reference operand ref: same rank,
 * same sizes except at dim k. */
static int
cat_match(Graph *g, Node *n, Diag *d, int i, int ref, int k)
{
	Text a, b;
	const Type *t = otype(g, n, i), *rt = otype(g, n, ref);
	if (t->rank != rt->rank)
		return shape_fail(g, n, d, oloc(n, i),
		                  "tensors must have the same number of dims: %s and %s",
		                  opnd_desc(&a, g, n, ref), opnd_desc(&b, g, n, i));
	for (int j = 0; j < t->rank; j++)
		if (j != k && t->d[j] != rt->d[j])
			return shape_fail(g, n, d, oloc(n, i),
			                  "sizes must match except in dim %d: %s and %s",
			                  k, opnd_desc(&a, g, n, ref), opnd_desc(&b, g, n, i));
	return 1;
}

/* cat(a, b, ..., dim=0): one rank, sizes agree except at dim, dtypes
 * promote; 0-d operands are errors. */
int
shape_cat(Graph *g, Node *n, Diag *d)
{
	Text x;
	DType dt = DT_ERR;
	int ref = -1, k = 0;
	for (int i = 0; i < n->nopnd; i++) {
		const Type *t = otype(g, n, i);
		if (t->rank == 0)
			return shape_fail(g, n, d, oloc(n, i), "0-d %s can't be concatenated",
			                  opnd_desc(&x, g, n, i));
		dt = dtype_promote(dt, (DType)t->dt);
		if (ref < 0 && !shape_legacy_empty(t))
			ref = i;
	}
	if (ref < 0) {
		Type r = *otype(g, n, 0);
		r.dt = (uint8_t)dt;
		return set_result(g, n, d, 0, &r);
	}
	if ((k = norm_dim(g, n, d, attr(n, "dim")->loc, attr(n, "dim")->i,
	                  otype(g, n, ref)->rank, ref)) < 0)
		return 0;
	Type r = *otype(g, n, ref);
	r.d[k] = 0;
	for (int i = 0; i < n->nopnd; i++) {
		if (shape_legacy_empty(otype(g, n, i)))
			continue;
		if (!cat_match(g, n, d, i, ref, k))
			return 0;
		if (!add_ok(r.d[k], otype(g, n, i)->d[k], &r.d[k]))
			return shape_fail(g, n, d, n->loc, "the result is too large");
	}
	r.dt = (uint8_t)dt;
	return set_result(g, n, d, 0, &r);
}

/* chunk(x, chunks=, dim=0) as PyTorch's: chunks of ceil(size / chunks),
 * the last smaller, so there may be fewer than `chunks`; a size of 0 gives
 * `chunks` empty chunks.  The statement names exactly that many results. */
int
shape_chunk(Graph *g, Node *n, Diag *d)
{
	Text x;
	int k;
	const Attr *c = attr(n, "chunks");
	if (!need_dims(g, n, d, 0))
		return 0;
	if (c->i <= 0)
		return shape_fail(g, n, d, c->loc,
		                  "chunks must be greater than 0, but is %" PRId64, c->i);
	if ((k = dim_attr(g, n, d, "dim", 0)) < 0)
		return 0;
	Type r = *otype(g, n, 0);
	int64_t size = r.d[k], csize = size / c->i + (size % c->i != 0);
	int64_t count = size ? size / csize + (size % csize != 0) : c->i;
	if (n->nres != count)
		return shape_fail(g, n, d, n->loc,
		                  "%s splits into %" PRId64 " chunk%s of size %" PRId64 " along dim %d, "
		                  "but the statement names %u result%s",
		                  opnd_desc(&x, g, n, 0), count, count == 1 ? "" : "s", csize, k,
		                  n->nres, n->nres == 1 ? "" : "s");
	for (uint32_t i = 0; i < n->nres; i++) {
		r.d[k] = i + 1 < n->nres ? csize : size - csize * (count - 1);
		if (!set_result(g, n, d, i, &r))
			return 0;
	}
	return 1;
}

/* split(x, sizes=N) as PyTorch's torch.split(x, N): pieces of N along the
 * dim, the last smaller (one piece of 0 for a dim of 0); the attribute
 * becomes that list, as the printed IR shows it. */
static int
split_size(Graph *g, Node *n, Diag *d, Attr *a, int64_t size)
{
	int64_t s = a->ints[0], count = s > 0 && size > 0 ? size / s + (size % s != 0) : 1;
	if (s < 0 || (s == 0 && size != 0))
		return shape_fail(g, n, d, a->loc, "split size %" PRId64 " must be %s", s,
		                  s < 0 ? "non-negative" : "positive for a dim of size above 0");
	if (!want_results(g, n, d, count))
		return 0;
	int64_t *v = arena_alloc(g->mod->arena, (size_t)count * sizeof *v);
	for (int64_t i = 0; i < count; i++)
		v[i] = i + 1 < count ? s : size - s * (count - 1);
	a->ints = v;
	a->nints = (uint32_t)count;
	a->one = 0;
	return 1;
}

/* split(x, sizes=[...], dim=0): non-negative sizes that sum to the dim's
 * size, one result each; split(x, sizes=N) as PyTorch's split size. */
int
shape_split(Graph *g, Node *n, Diag *d)
{
	Text s, x;
	int k;
	int64_t sum = 0;
	Attr *a = &n->attr[op_attr_index(OP_SPLIT, "sizes")];
	if (!need_dims(g, n, d, 0) || (k = dim_attr(g, n, d, "dim", 0)) < 0)
		return 0;
	if (a->one && !split_size(g, n, d, a, otype(g, n, 0)->d[k]))
		return 0;
	ints_text(&s, a->ints, (int)a->nints);
	for (uint32_t j = 0; j < a->nints; j++)
		if (a->ints[j] < 0 || !add_ok(sum, a->ints[j], &sum))
			return shape_fail(g, n, d, a->loc, "sizes %s must be non-negative", s.s);
	Type r = *otype(g, n, 0);
	if (a->nints == 0 || sum != r.d[k])
		return shape_fail(g, n, d, a->loc,
		                  "sizes %s must sum to %" PRId64 ", the size of dim %d of %s",
		                  s.s, r.d[k], k, opnd_desc(&x, g, n, 0));
	if (!want_results(g, n, d, a->nints))
		return 0;
	for (uint32_t i = 0; i < a->nints; i++) {
		r.d[k] = a->ints[i];
		if (!set_result(g, n, d, i, &r))
			return 0;
	}
	return 1;
}

/* squeeze(x, dim=): removes the dim when its size is 1, else leaves x as
 * it is (as PyTorch does). */
int
shape_squeeze(Graph *g, Node *n, Diag *d)
{
	int k = dim_attr(g, n, d, "dim", 0);
	if (k < 0)
		return 0;
	Type r = *otype(g, n, 0);
	if (r.rank && r.d[k] == 1) {
		memmove(&r.d[k], &r.d[k + 1], (size_t)(r.rank - k - 1) * sizeof r.d[0]);
		r.rank--;
	}
	return set_result(g, n, d, 0, &r);
}

/* unsqueeze(x, dim=): dim in [-(rank + 1), rank]. */
int
shape_unsqueeze(Graph *g, Node *n, Diag *d)
{
	const Attr *a = attr(n, "dim");
	Type r = *otype(g, n, 0);
	int k = norm_dim(g, n, d, a->loc, a->i, r.rank + 1, 0);
	if (k < 0 || !rank_ok(g, n, d, a->loc, r.rank + 1))
		return 0;
	memmove(&r.d[k + 1], &r.d[k], (size_t)(r.rank - k) * sizeof r.d[0]);
	r.d[k] = 1;
	r.rank++;
	return set_result(g, n, d, 0, &r);
}

/* contiguous, all_reduce, broadcast: the operand's type (no result: in
 * place). */
int
shape_identity(Graph *g, Node *n, Diag *d)
{
	if (n->nres == 0)
		return 1;
	return set_result(g, n, d, 0, otype(g, n, 0));
}

/* ------------------------------------------------------------------ creation */

/* Whether the number in a (an AT_NUM attribute) converts to dt without
 * overflow, as c10's checked conversion decides: anything fits bool and
 * f64, infinities and NaN fit floats, integers take no NaN. */
static int
num_fits(const Attr *a, DType dt)
{
	double v = a->f, max;
	if (a->num_kind == OK_BOOL || dt == DT_BOOL || dt == DT_F64)
		return 1;
	if (dt == DT_I32 || dt == DT_I64) {
		max = dt == DT_I32 ? 2147483647.0 : 9223372036854775807.0;
		return !isnan(v) && v >= -max - 1 && v <= max;
	}
	if (isinf(v) || isnan(v))
		return 1;
	max = dt == DT_F32 ? FLT_MAX : dt == DT_F16 ? 65504.0 : 3.38953138925153547590e38;
	return fabs(v) <= max;
}

/* Reports the `value` attribute of n unless it fits dt. */
static int
value_fits(Graph *g, Node *n, Diag *d, DType dt)
{
	char buf[32];
	const Attr *a = attr(n, "value");
	if (num_fits(a, dt))
		return 1;
	if (a->num_kind == OK_INT)
		snprintf(buf, sizeof buf, "%.0f", a->f);
	else
		fmt_double(buf, a->f);
	return shape_fail(g, n, d, a->loc, "value %s can't be converted to %s without overflow",
	                  buf, dtype_name(dt));
}

/* zeros ones full(shape=[...], value=, dtype=f32): sizes non-negative;
 * full's value must fit the dtype. */
int
shape_creation(Graph *g, Node *n, Diag *d)
{
	Text s;
	const Attr *a = attr(n, "shape");
	DType dt = (DType)attr(n, "dtype")->i;
	if (!rank_ok(g, n, d, a->loc, a->nints))
		return 0;
	for (uint32_t j = 0; j < a->nints; j++)
		if (a->ints[j] < 0)
			return shape_fail(g, n, d, a->loc, "negative size %" PRId64 " in shape %s",
			                  a->ints[j], ints_text(&s, a->ints, (int)a->nints));
	if (n->op == OP_FULL && !value_fits(g, n, d, dt))
		return 0;
	Type r = make_type(dt, a->ints, (int)a->nints);
	return set_result(g, n, d, 0, &r);
}

/* rand(shape=, dtype=f32, salt=): a creation of a floating dtype. */
int
shape_rand(Graph *g, Node *n, Diag *d)
{
	const Attr *dt = attr(n, "dtype");
	if (!dtype_is_float((DType)dt->i))
		return shape_fail(g, n, d, dt->loc,
		                  "dtype %s is not supported (floating-point dtypes are, "
		                  "as in torch.rand)", dtype_name((DType)dt->i));
	return salt_ok(g, n, d) && shape_creation(g, n, d);
}

/* arange(end=, dtype=i64) -> [end]: end non-negative, not bool. */
int
shape_arange(Graph *g, Node *n, Diag *d)
{
	const Attr *e = attr(n, "end"), *t = attr(n, "dtype");
	if (e->i < 0)
		return shape_fail(g, n, d, e->loc,
		                  "end must not be negative, but is %" PRId64, e->i);
	if (t->i == DT_BOOL)
		return shape_fail(g, n, d, t->loc, "dtype bool is not supported");
	Type r = make_type((DType)t->i, &e->i, 1);
	return set_result(g, n, d, 0, &r);
}

/* ------------------------------------------------------------------ indexing */

/* embedding(idx, table [V, D]) -> idx's shape + [D], table's dtype;
 * idx i32 or i64. */
int
shape_embedding(Graph *g, Node *n, Diag *d)
{
	Text x;
	const Type *idx = otype(g, n, 0), *tab = otype(g, n, 1);
	if (!dtype_is_int((DType)idx->dt))
		return shape_fail(g, n, d, oloc(n, 0),
		                  "the indices must be i64 or i32, but %s is not",
		                  opnd_desc(&x, g, n, 0));
	if (tab->rank != 2)
		return shape_fail(g, n, d, oloc(n, 1),
		                  "the table must be 2-d [V, D], but %s is not",
		                  opnd_desc(&x, g, n, 1));
	if (!rank_ok(g, n, d, oloc(n, 0), idx->rank + 1))
		return 0;
	Type r = make_type((DType)tab->dt, idx->d, idx->rank);
	r.d[r.rank++] = tab->d[1];
	return set_result(g, n, d, 0, &r);
}

/* gather(x, idx, dim=) -> idx's shape, x's dtype: idx i64 of x's rank, no
 * larger than x except at dim. */
int
shape_gather(Graph *g, Node *n, Diag *d)
{
	Text x, y;
	int k;
	const Type *t = otype(g, n, 0), *idx = otype(g, n, 1);
	if (idx->dt != DT_I64)
		return shape_fail(g, n, d, oloc(n, 1), "the index must be i64, but %s is not",
		                  opnd_desc(&y, g, n, 1));
	if (idx->rank != t->rank)
		return shape_fail(g, n, d, oloc(n, 1),
		                  "the index must have as many dims as the input: %s and %s",
		                  opnd_desc(&x, g, n, 0), opnd_desc(&y, g, n, 1));
	if ((k = dim_attr(g, n, d, "dim", 0)) < 0)
		return 0;
	for (int j = 0; j < t->rank; j++)
		if (j != k && idx->d[j] > t->d[j])
			return shape_fail(g, n, d, oloc(n, 1),
			                  "the index must not be larger than the input except in dim %d: %s and %s",
			                  k, opnd_desc(&x, g, n, 0), opnd_desc(&y, g, n, 1));
	Type r = *idx;
	r.dt = t->dt;
	return set_result(g, n, d, 0, &r);
}

/* ------------------------------------------------------------------ losses */

/* mse_loss(a, b) -> [] (the mean): shapes broadcast, the promoted dtype
 * must be floating. */
int
shape_mse_loss(Graph *g, Node *n, Diag *d)
{
	Text a, b;
	Type r;
	if (!broadcast_opnds(g, n, d, 0, 2, &r))
		return 0;
	DType dt = shape_result_type(g, n, 0, 2);
	if (!dtype_is_float(dt))
		return shape_fail(g, n, d, oloc(n, 0),
		                  "expects floating-point operands, but %s and %s are not",
		                  opnd_desc(&a, g, n, 0), opnd_desc(&b, g, n, 1));
	r = make_type(dt, NULL, 0);
	return set_result(g, n, d, 0, &r);
}

/* cross_entropy(logits, target) -> [] (the mean): logits [C] with target
 * [], or [N, C, d1...] with target [N, d1...]; floating logits, i64 class
 * indices. */
int
shape_cross_entropy(Graph *g, Node *n, Diag *d)
{
	Text x, y, s;
	const Type *lg = otype(g, n, 0), *tg = otype(g, n, 1);
	if (!need_float(g, n, d, 0) || !need_dims(g, n, d, 0))
		return 0;
	if (tg->dt != DT_I64)
		return shape_fail(g, n, d, oloc(n, 1),
		                  "expects integer targets (i64 class indices), but %s is not",
		                  opnd_desc(&y, g, n, 1));
	Type want = make_type(DT_I64, lg->d, lg->rank > 1 ? 1 : 0);
	for (int j = 2; j < lg->rank; j++)
		want.d[want.rank++] = lg->d[j];
	if (!type_same_shape(&want, tg))
		return shape_fail(g, n, d, oloc(n, 1),
		                  "the target must have shape %s for logits %s, but %s is not",
		                  ints_text(&s, want.d, want.rank), opnd_desc(&x, g, n, 0),
		                  opnd_desc(&y, g, n, 1));
	Type r = make_type((DType)lg->dt, NULL, 0);
	return set_result(g, n, d, 0, &r);
}

/* ------------------------------------------------------------------ memory */

/* to_host(x): a device value into pinned host memory. */
int
shape_to_host(Graph *g, Node *n, Diag *d)
{
	Text x;
	Type r = *otype(g, n, 0);
	if (r.host)
		return shape_fail(g, n, d, oloc(n, 0),
		                  "%s is already in host memory", opnd_desc(&x, g, n, 0));
	if (!set_result(g, n, d, 0, &r))
		return 0;
	g->vals.v[n->res[0]].type.host = 1;
	return 1;
}

/* to_device(x): a host value (to_host's result) back to the device. */
int
shape_to_device(Graph *g, Node *n, Diag *d)
{
	Text x;
	Type r = *otype(g, n, 0);
	if (!r.host)
		return shape_fail(g, n, d, oloc(n, 0),
		                  "%s is already in device memory", opnd_desc(&x, g, n, 0));
	r.host = 0;
	return set_result(g, n, d, 0, &r);
}

/* copy_(dst, src): any dtypes; src broadcasts to dst's shape. */
static int
copy_check(Graph *g, Node *n, Diag *d)
{
	Text a, b;
	const Type *dst = otype(g, n, 0);
	Type r;
	if (shape_broadcast(otype(g, n, 1), dst, &r) && type_same_shape(&r, dst))
		return 1;
	return shape_fail(g, n, d, oloc(n, 1), "the source %s doesn't broadcast to the shape of %s",
	                  opnd_desc(&a, g, n, 1), opnd_desc(&b, g, n, 0));
}

/* add_ sub_ mul_ div_ copy_ zero_ fill_: no results.  The out-of-place
 * result must have dst's shape exactly and a dtype PyTorch can cast to
 * dst's (no float into integers, nothing but bool into bool); fill_'s
 * value must fit dst's dtype. */
int
shape_inplace(Graph *g, Node *n, Diag *d)
{
	Text x, s;
	const Type *dst = otype(g, n, 0);
	Type r;
	switch (n->op) {
	case OP_ZERO_:
		return 1;
	case OP_FILL_:
		return value_fits(g, n, d, (DType)dst->dt);
	case OP_COPY_:
		return copy_check(g, n, d);
	}
	if (!arith_type(g, n, d, op_inplace_base(n->op), &r))
		return 0;
	if (!type_same_shape(&r, dst))
		return shape_fail(g, n, d, oloc(n, 1),
		                  "output %s doesn't match the broadcast shape %s",
		                  opnd_desc(&x, g, n, 0), ints_text(&s, r.d, r.rank));
	if (!can_cast((DType)r.dt, (DType)dst->dt))
		return shape_fail(g, n, d, oloc(n, 1),
		                  "result type %s can't be cast to the desired output type %s of %s",
		                  dtype_name((DType)r.dt), dtype_name((DType)dst->dt),
		                  opnd_text(&x, g, &n->opnd[0]));
	return 1;
}

/* ------------------------------------------------------------------ streams, collectives */

/* record_event wait_event wait_stream synchronize sync_dealloc: no results. */
int
shape_none(Graph *g, Node *n, Diag *d)
{
	(void)g;
	(void)n;
	(void)d;
	return 1;
}

/* control_deps(%a, %b, ..., sync=OP): its results pass the types of its
 * value operands through, one each. */
int
shape_control_deps(Graph *g, Node *n, Diag *d)
{
	uint32_t nval = 0;
	for (int i = 0; i < n->nopnd; i++)
		nval += n->opnd[i].kind == OK_VAL;
	if (!want_results(g, n, d, nval))
		return 0;
	for (int i = 0, j = 0; i < n->nopnd; i++) {
		if (n->opnd[i].kind != OK_VAL)
			continue;
		if (!set_result(g, n, d, (uint32_t)j++, otype(g, n, i)))
			return 0;
	}
	return 1;
}

/* The number of ranks: the dim WORLD (predeclared as 1, -D may change
 * it).  Returns 0 after reporting a WORLD below 1. */
static int64_t
world_size(Graph *g, Node *n, Diag *d)
{
	int64_t w = ir_world(g->mod);
	if (w < 1)
		shape_fail(g, n, d, n->loc,
		           "WORLD is %" PRId64 ", but there must be at least one rank", w);
	return w < 1 ? 0 : w;
}

/* all_gather(x, dim=0): the dim's size times WORLD. */
int
shape_all_gather(Graph *g, Node *n, Diag *d)
{
	int k;
	int64_t w;
	if (!need_dims(g, n, d, 0) || (k = dim_attr(g, n, d, "dim", 0)) < 0 ||
	    !(w = world_size(g, n, d)))
		return 0;
	Type r = *otype(g, n, 0);
	if (!mul_ok(r.d[k], w, &r.d[k]))
		return shape_fail(g, n, d, n->loc, "the result is too large");
	return set_result(g, n, d, 0, &r);
}

/* broadcast(x, root=0): x's shape; root names a rank (0 <= root < WORLD,
 * as torch.distributed.broadcast's src must). */
int
shape_broadcast_op(Graph *g, Node *n, Diag *d)
{
	int64_t w = world_size(g, n, d), root = ir_attr_int(n, "root", 0);
	if (!w)
		return 0;
	if (root < 0 || root >= w)
		return shape_fail(g, n, d, n->loc,
		                  "root=%" PRId64 " is not a rank: WORLD is %" PRId64
		                  " (ranks 0 to %" PRId64 ")", root, w, w - 1);
	return shape_identity(g, n, d);
}

/* reduce_scatter(x, dim=0) divides the dim by WORLD; all_to_all(x, dim=0)
 * keeps the shape (no result: in place).  Both need the dim's size
 * divisible by WORLD. */
static int
scatter_type(Graph *g, Node *n, Diag *d, Type *r)
{
	Text x;
	int k;
	int64_t w;
	if (!need_dims(g, n, d, 0) || (k = dim_attr(g, n, d, "dim", 0)) < 0 ||
	    !(w = world_size(g, n, d)))
		return 0;
	*r = *otype(g, n, 0);
	if (r->d[k] % w != 0)
		return shape_fail(g, n, d, oloc(n, 0),
		                  "size %" PRId64 " of dim %d of %s is not divisible by WORLD = %" PRId64,
		                  r->d[k], k, opnd_desc(&x, g, n, 0), w);
	if (n->op == OP_REDUCE_SCATTER)
		r->d[k] /= w;
	return 1;
}

/* reduce_scatter(x, op=, dim=0). */
int
shape_reduce_scatter(Graph *g, Node *n, Diag *d)
{
	Type r;
	return scatter_type(g, n, d, &r) && set_result(g, n, d, 0, &r);
}

/* all_to_all(x, dim=0): in place when the statement names no result. */
int
shape_all_to_all(Graph *g, Node *n, Diag *d)
{
	Type r;
	if (!scatter_type(g, n, d, &r))
		return 0;
	return n->nres == 0 || set_result(g, n, d, 0, &r);
}

/* The dims reduction node n reduces over a rank-dim operand. */
void
shape_reduced_dims(const Node *n, int rank, int *red)
{
	const Attr *a = ir_attr(n, "dims");
	int all = !a || a->nints == 0;
	for (int d = 0; d < rank; d++)
		red[d] = all;
	if (all)
		return;
	for (uint32_t k = 0; k < a->nints; k++) {
		int d = shape_norm_dim(a->ints[k], rank);
		if (d >= 0)
			red[d] = 1;
	}
}

/* Batch broadcasting of matrix operands, as torch.matmul does. */
int
shape_batch_bcast(int nop, const int *rank, const int64_t *const *d,
                  int64_t *shape, int64_t st[][SG_MAXRANK])
{
	int brank = 0;
	for (int k = 0; k < nop; k++)
		if (rank[k] - 2 > brank)
			brank = rank[k] - 2;
	for (int i = 0; i < brank; i++)
		shape[i] = 1;
	for (int k = 0; k < nop; k++) {
		int br = rank[k] > 2 ? rank[k] - 2 : 0;
		for (int i = 0; i < br; i++)
			if (d[k][i] != 1)
				shape[brank - br + i] = d[k][i];
	}
	for (int k = 0; k < nop; k++) {
		int br = rank[k] > 2 ? rank[k] - 2 : 0;
		int64_t s = 1;
		for (int i = 0; i < rank[k]; i++)
			s *= i >= br ? d[k][i] : 1;
		for (int i = brank - 1; i >= 0; i--) {
			int td = i - (brank - br);
			st[k][i] = td >= 0 && d[k][td] != 1 ? s : 0;
			if (td >= 0)
				s *= d[k][td];
		}
	}
	return brank;
}

int
shape_attn_bcast(int nop, const int *rank, const int64_t *const *d, int64_t group,
                 unsigned kv, int64_t *shape, int64_t st[][SG_MAXRANK])
{
	int brank = shape_batch_bcast(nop, rank, d, shape, st), h = brank - 1;
	if (group <= 1 || brank < 1)
		return brank;
	shape[h] = d[0][rank[0] - 3] / group;
	shape[h + 1] = group;
	for (int k = 0; k < nop; k++) {
		st[k][h + 1] = kv >> k & 1 ? 0 : st[k][h];
		st[k][h] *= kv >> k & 1 ? 1 : group;
	}
	return brank + 1;
}
