/*
 * interp_shape.c - interpreter kernels for shape ops (as value copies),
 * cat, chunk/split, memory copies, collectives with WORLD = 1, and the
 * stream ops (whose ordering interp.c's scheduler does).
 */
#include <string.h>

#include "interp.h"

/* r = the elements of x at base + sum idx[d] * st[d] over r's shape. */
static void
strided_copy(const Tensor *x, Tensor *r, int64_t base, const int64_t *st)
{
	size_t es = (size_t)dtype_size(x->dt);
	BcastIter it;
	interp_iter_init(&it, r->rank, r->shape, NULL, 0);
	it.nop = 1;
	it.off[0] = base;
	for (int d = 0; d < r->rank; d++)
		it.stride[0][d] = st[d];
	for (int64_t i = 0; i < r->numel; i++, interp_iter_next(&it))
		memcpy((char *)r->data + (size_t)i * es,
		       (const char *)x->data + (size_t)it.off[0] * es, es);
}

/* The same elements in the same order (reshape, squeeze, copies). */
static int
flat_copy(Interp *I, const Node *n, const Tensor *x, Tensor *r)
{
	if (x->numel != r->numel || x->dt != r->dt)
		return interp_fail(I, n, "internal: %s changes the element count "
		                   "or dtype", op_name(n->op));
	memcpy(r->data, x->data, (size_t)x->numel * (size_t)dtype_size(x->dt));
	return 0;
}

/* x's strides permuted: result dim d reads x's dim perm[d]. */
static void
permute(const Tensor *x, Tensor *r, const int *perm)
{
	int64_t xs[SG_MAXRANK], st[SG_MAXRANK];
	interp_strides(x->rank, x->shape, xs);
	for (int d = 0; d < r->rank; d++)
		st[d] = xs[perm[d]];
	strided_copy(x, r, 0, st);
}

static int
transpose(Interp *I, const Node *n, const Tensor *x, Tensor *r)
{
	int perm[SG_MAXRANK];
	int d0 = shape_norm_dim(ir_attr_int(n, "dim0", 0), x->rank);
	int d1 = shape_norm_dim(ir_attr_int(n, "dim1", 0), x->rank);
	if (x->rank == 0)
		return flat_copy(I, n, x, r);
	if (d0 < 0 || d1 < 0)
		return interp_fail(I, n, "internal: transpose dims out of range");
	for (int d = 0; d < x->rank; d++)
		perm[d] = d == d0 ? d1 : d == d1 ? d0 : d;
	permute(x, r, perm);
	return 0;
}

static int
permute_op(Interp *I, const Node *n, const Tensor *x, Tensor *r)
{
	const Attr *a = ir_attr(n, "dims");
	int perm[SG_MAXRANK];
	if (!a || a->nints != x->rank)
		return interp_fail(I, n, "internal: permute dims do not match rank");
	for (int d = 0; d < x->rank; d++) {
		perm[d] = shape_norm_dim(a->ints[d], x->rank);
		if (perm[d] < 0)
			return interp_fail(I, n, "internal: permute dim out of range");
	}
	permute(x, r, perm);
	return 0;
}

/* x aligned to the right of r's shape, stride 0 where it has size 1. */
static void
expand(const Tensor *x, Tensor *r)
{
	int64_t xs[SG_MAXRANK], st[SG_MAXRANK];
	interp_strides(x->rank, x->shape, xs);
	for (int d = 0; d < r->rank; d++) {
		int xd = d - (r->rank - x->rank);
		st[d] = xd >= 0 && x->shape[xd] != 1 ? xs[xd] : 0;
	}
	strided_copy(x, r, 0, st);
}

/* x[..., start:start + r.shape[dim], ...]; start as PyTorch clamps it. */
static int
slice(Interp *I, const Node *n, const Tensor *x, Tensor *r)
{
	int d = shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank);
	if (d < 0 || r->rank != x->rank)
		return interp_fail(I, n, "internal: slice dim out of range");
	int64_t start = shape_clamp_index(ir_attr_int(n, "start", 0), x->shape[d]);
	int64_t st[SG_MAXRANK];
	interp_strides(x->rank, x->shape, st);
	strided_copy(x, r, start * st[d], st);
	return 0;
}

int
interp_copyview(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *x = in[0], *r = out[0];
	switch (n->op) {
	case OP_TRANSPOSE: return transpose(I, n, x, r);
	case OP_PERMUTE: return permute_op(I, n, x, r);
	case OP_EXPAND: expand(x, r); return 0;
	case OP_SLICE: return slice(I, n, x, r);
	default: return flat_copy(I, n, x, r);
	}
}

/* Copies between big and part, the slab of big along dim d that starts
 * at off: into big when to_big (cat), out of it otherwise (split).  Parts
 * of another dtype are converted (cat promotes). */
static void
copy_part(Tensor *big, Tensor *part, int d, int64_t off, int to_big)
{
	int64_t outer = 1, inner = 1;
	for (int i = 0; i < d; i++)
		outer *= big->shape[i];
	for (int i = d + 1; i < big->rank; i++)
		inner *= big->shape[i];
	int64_t bl = big->shape[d] * inner, pl = part->shape[d] * inner;
	int same = big->dt == part->dt;
	size_t es = (size_t)dtype_size(big->dt);
	for (int64_t o = 0; o < outer; o++) {
		int64_t bo = o * bl + off * inner, po = o * pl;
		if (same && to_big)
			memcpy((char *)big->data + (size_t)bo * es,
			       (char *)part->data + (size_t)po * es, (size_t)pl * es);
		else if (same)
			memcpy((char *)part->data + (size_t)po * es,
			       (char *)big->data + (size_t)bo * es, (size_t)pl * es);
		else if (dtype_is_float(part->dt))
			for (int64_t j = 0; j < pl; j++)
				interp_setf(big, bo + j, interp_getf(part, po + j));
		else
			for (int64_t j = 0; j < pl; j++)
				interp_seti(big, bo + j, interp_geti(part, po + j));
	}
}

/* cat converts each operand to the result dtype (PyTorch promotes) and
 * skips 1-D empty ones, as PyTorch does whatever the others' rank. */
int
interp_cat(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *r = out[0];
	int d = shape_norm_dim(ir_attr_int(n, "dim", 0), r->rank);
	if (d < 0)
		return interp_fail(I, n, "internal: cat dim out of range");
	int64_t off = 0;
	for (uint32_t i = 0; i < n->nopnd; i++) {
		if (in[i]->rank == 1 && in[i]->numel == 0)
			continue; /* PyTorch's legacy empty operand (shape_cat) */
		if (in[i]->rank != r->rank)
			return interp_fail(I, n, "internal: cat operand rank differs");
		copy_part(r, in[i], d, off, 1);
		off += in[i]->shape[d];
	}
	return 0;
}

/* chunk and split: result j is the slice of x along dim at the sum of the
 * sizes before it. */
int
interp_split(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *x = in[0];
	int d = shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank);
	if (d < 0)
		return interp_fail(I, n, "internal: split dim out of range");
	int64_t off = 0;
	for (uint32_t j = 0; j < n->nres; j++) {
		copy_part(x, out[j], d, off, 0);
		off += out[j]->shape[d];
	}
	return 0;
}

/* With WORLD = 1 every collective is the identity; with no result it is in
 * place, so nothing changes. */
int
interp_collective(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	if (n->nres == 0)
		return 0;
	return flat_copy(I, n, in[0], out[0]);
}

/* An element of a collective: float or integer, as its dtype. */
enum { RED_SUM, RED_MAX, RED_MIN, RED_AVG };
typedef struct {
	double f;
	int64_t i;
} Num;

static Num
num_get(const Tensor *t, int64_t e, int fl)
{
	Num v = {0, 0};
	if (fl)
		v.f = interp_getf(t, e);
	else
		v.i = interp_geti(t, e);
	return v;
}

/* Element e reduced over the W ranks' operands: sum (wrapping for
 * integers), max or min (NaN wins), avg (integers: the sum divided,
 * truncated). */
static Num
reduce(Tensor **in, int64_t W, int64_t e, int fl, int how)
{
	Num v = num_get(in[0], e, fl);
	for (int64_t q = 1; q < W; q++) {
		Num u = num_get(in[q], e, fl);
		if (fl) {
			if (how == RED_MAX)
				v.f = u.f > v.f || u.f != u.f ? u.f : v.f;
			else if (how == RED_MIN)
				v.f = u.f < v.f || u.f != u.f ? u.f : v.f;
			else
				v.f += u.f;
		} else {
			if (how == RED_MAX)
				v.i = u.i > v.i ? u.i : v.i;
			else if (how == RED_MIN)
				v.i = u.i < v.i ? u.i : v.i;
			else
				v.i = (int64_t)((uint64_t)v.i + (uint64_t)u.i);
		}
	}
	if (how == RED_AVG) {
		if (fl)
			v.f /= (double)W;
		else
			v.i /= W;
	}
	return v;
}

/* One rank-combining op over every rank's operand at once (`sgc run`
 * simulates the WORLD ranks in one process; interp.c runs the ranks in
 * lockstep and calls this at a collective).  in[r] is rank r's operand,
 * out[r] its result, or NULL when the op works in place (the results are
 * all computed before any operand is overwritten).  Values combine in
 * double in rank order and are rounded to the dtype once: exact for sums
 * of a few ranks, the same bits on every rank. */
int
interp_collective_world(Interp *I, Node *n, int world, Tensor **in, Tensor **out)
{
	const Tensor *x = in[0];
	const Attr *a = ir_attr(n, "dim");
	int d = a ? (int)a->i : 0;
	if (d < 0)
		d += x->rank;
	if (x->rank == 0)
		d = 0;
	else if (d < 0 || d >= x->rank)
		return interp_fail(I, n, "internal: collective dim out of range");
	int64_t outer = 1, len = x->rank ? x->shape[d] : 1, inner = 1;
	for (int i = 0; i < d; i++)
		outer *= x->shape[i];
	for (int i = d + 1; i < x->rank; i++)
		inner *= x->shape[i];
	a = ir_attr(n, "op");
	const char *op = a && a->s ? a->s : "sum";
	a = ir_attr(n, "root");
	int64_t root = a ? a->i : 0, W = world, N, lc = len / W;
	switch (n->op) {
	case OP_ALL_GATHER: N = x->numel * W; break;
	case OP_REDUCE_SCATTER: N = x->numel / W; break;
	default: N = x->numel; break;
	}
	for (int r = 0; r < world; r++) {
		const Tensor *t = out[r] ? out[r] : in[r];
		if (t->numel != N || in[r]->numel != x->numel)
			return interp_fail(I, n, "internal: %s sizes disagree across ranks",
			                   op_name(n->op));
	}
	if (root < 0 || root >= W)
		return interp_fail(I, n, "internal: broadcast root out of range");
	/* Integers stay integers (exact beyond 2^53; a sum wraps, as NCCL's). */
	int fl = dtype_is_float((DType)x->dt);
	int how = strcmp(op, "max") == 0 ? RED_MAX : strcmp(op, "min") == 0 ? RED_MIN
	          : strcmp(op, "avg") == 0 ? RED_AVG : RED_SUM;
	Num *res = xmalloc(((size_t)N * (size_t)W + 1) * sizeof *res);
	Num *red = NULL; /* all_reduce: the reduction, computed once */
	if (n->op == OP_ALL_REDUCE) {
		red = xmalloc(((size_t)N + 1) * sizeof *red);
		for (int64_t e = 0; e < N; e++)
			red[e] = reduce(in, W, e, fl, how);
	}
	for (int64_t r = 0; r < W; r++) {
		Num *y = res + r * N;
		if (red) {
			memcpy(y, red, (size_t)N * sizeof *y);
			continue;
		}
		for (int64_t o = 0; o < outer; o++)
			for (int64_t i = 0; i < (n->op == OP_ALL_GATHER ? len * W : len); i++)
				for (int64_t j = 0; j < inner; j++) {
					int64_t e = (o * len + i) * inner + j, q;
					switch (n->op) {
					case OP_ALL_GATHER: /* block q of dim d is rank q's x */
						q = i / len;
						y[(o * len * W + i) * inner + j] =
						    num_get(in[q], (o * len + i % len) * inner + j, fl);
						break;
					case OP_BROADCAST:
						y[e] = num_get(in[root], e, fl);
						break;
					case OP_ALL_TO_ALL: /* block q of rank r's result: rank q's block r */
						if (!lc)
							break;
						q = i / lc;
						y[e] = num_get(in[q], (o * len + r * lc + i % lc) * inner + j, fl);
						break;
					case OP_REDUCE_SCATTER: /* rank r keeps block r of the reduction */
						if (i < lc)
							y[(o * lc + i) * inner + j] =
							    reduce(in, W, (o * len + r * lc + i) * inner + j, fl, how);
						break;
					default:
						ICE("%s is not a collective", op_name(n->op));
					}
				}
	}
	for (int r = 0; r < world; r++) {
		Tensor *t = out[r] ? out[r] : in[r];
		for (int64_t e = 0; e < N; e++) {
			if (fl)
				interp_setf(t, e, res[(int64_t)r * N + e].f);
			else
				interp_seti(t, e, res[(int64_t)r * N + e].i);
		}
	}
	free(red);
	free(res);
	return 0;
}

/* Stream and event ops order work, which the scheduler in interp.c does;
 * there is nothing to compute. */
int
interp_sync(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	(void)n;
	(void)in;
	(void)out;
	return 0;
}

/* The results share their operands' tensors (interp.c binds them). */
int
interp_control_deps(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)I;
	(void)n;
	(void)in;
	(void)out;
	return 0;
}
