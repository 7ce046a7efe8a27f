/*
 * codegen_gemm.c - matrix products: matmul (1-d operands, broadcast batch
 * dims, as torch.matmul) and linear (x @ w^T + b) through cuBLASLt
 * (sgrt_gemm in runtime/sgrt_blas.c), with the bias as an epilogue.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"

/* ------------------------------------------------------------------ matrix products */

/* The batch dims of the operands (all but their last two; 1-d operands
 * have none), broadcast: the batch shape and, per operand, each batch
 * dim's element stride (0 where it broadcasts).  Returns the batch rank. */
int
cg_batch_bcast(const Type **ops, int nop, int64_t *shape, int64_t st[][SG_MAXRANK])
{
	int rank = 0;
	for (int k = 0; k < nop; k++)
		if (ops[k]->rank - 2 > rank)
			rank = ops[k]->rank - 2;
	for (int d = 0; d < rank; d++)
		shape[d] = 1;
	for (int k = 0; k < nop; k++) {
		int br = ops[k]->rank > 2 ? ops[k]->rank - 2 : 0;
		for (int d = 0; d < br; d++)
			if (ops[k]->d[d] != 1)
				shape[rank - br + d] = ops[k]->d[d];
	}
	for (int k = 0; k < nop; k++) {
		const Type *t = ops[k];
		int br = t->rank > 2 ? t->rank - 2 : 0;
		int64_t s = t->rank >= 2 ? t->d[t->rank - 1] * t->d[t->rank - 2] : type_numel(t);
		for (int d = rank - 1; d >= 0; d--) {
			int td = d - (rank - br);
			st[k][d] = td >= 0 && t->d[td] != 1 ? s : 0;
			if (td >= 0)
				s *= t->d[td];
		}
	}
	return rank;
}

/* The number of batch items of t (product of all but its last two dims). */
static int64_t
batch_numel(const Type *t)
{
	int64_t n = 1;
	for (int d = 0; d + 2 < t->rank; d++)
		n *= t->d[d];
	return n;
}

/* Materialises operand t (pointer var) broadcast over the batch shape:
 * returns the temporary holding nb copies of its matrix. */
static char *
expand_batch(CgGraph *G, const Node *n, const char *var, const Type *t, int brank,
             const int64_t *bshape, const int64_t *st, const char *what)
{
	Cg *c = G->c;
	int64_t sz[SG_MAXRANK + 1], str[SG_MAXRANK + 1], nb = 1;
	int64_t mat = t->d[t->rank - 1] * t->d[t->rank - 2];
	for (int d = 0; d < brank; d++) {
		sz[d] = bshape[d];
		str[d] = st[d];
		nb *= bshape[d];
	}
	sz[brank] = mat;
	str[brank] = 1;
	char *tmp = cg_alloc_tmp(G, n, cg_ctype((DType)t->dt), nb * mat * dtype_size((DType)t->dt),
	                      what);
	cg_copy_kernel(G, n, cg_fmt(c, "expand_%s", what), var, (DType)t->dt, tmp,
	            (DType)t->dt, nb * mat, cg_index(c, "i", brank + 1, sz, str, 0), "i");
	return tmp;
}

/* One sgrt_gemm statement. */
static void
gemm(CgGraph *G, const Node *n, DType dt, int trans_b, int64_t m, int64_t nn, int64_t k,
     int64_t batch, int64_t sa, int64_t sb, const char *bias, const char *a,
     const char *b, const char *out)
{
	Cg *c = G->c;
	CG_EMIT(G->body, "host.cu:gemm", {"dtype", cg_sgrt_dtype(dt)},
	        {"trans_b", trans_b ? "1" : "0"}, {"m", cg_num(c, m)}, {"n", cg_num(c, nn)},
	        {"k", cg_num(c, k)}, {"ldb", ""}, {"batch", batch > 1 ? cg_num(c, batch) : ""},
	        {"stride_a", cg_num(c, sa)}, {"stride_b", cg_num(c, sb)},
	        {"bias", bias ? bias : ""}, {"s", cg_num(c, cg_stream(n))}, {"a", a},
	        {"b", b}, {"c", out}, {"kname", cg_kernel_name(G, n, op_name(n->op))},
	        {"line", cg_num(c, n->loc.line)});
}

/* cg_matmul(a, b) as torch.matmul (1-d operands, broadcast batch dims). */
int
cg_matmul(CgGraph *G, const Node *n)
{
	const Type *a = cg_otype(G, n, 0), *b = cg_otype(G, n, 1), *r = cg_vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t m = a->rank >= 2 ? a->d[a->rank - 2] : 1, k = a->d[a->rank - 1];
	int64_t nn = b->rank >= 2 ? b->d[b->rank - 1] : 1;
	const char *av = G->vname[n->opnd[0].v], *bv = G->vname[n->opnd[1].v];
	const char *rv = G->vname[n->res[0]];
	const Type *ops[2] = {a, b};
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK];
	int brank = cg_batch_bcast(ops, 2, bshape, st);
	int64_t nb = 1;
	for (int d = 0; d < brank; d++)
		nb *= bshape[d];
	if (type_numel(r) == 0)
		return 1;
	if (k == 0) {
		cg_zero(G, n, rv, type_numel(r) * dtype_size(dt));
		return 1;
	}
	if (nb == 1 || b->rank <= 2) {
		gemm(G, n, dt, 0, m * nb, nn, k, 0, 0, 0, NULL, av, bv, rv);
		return 1;
	}
	const char *ta = av, *tb = bv;
	int64_t na = batch_numel(a), nbb = batch_numel(b);
	if (na != nb && na != 1)
		ta = expand_batch(G, n, av, a, brank, bshape, st[0], "a");
	if (nbb != nb && nbb != 1)
		tb = expand_batch(G, n, bv, b, brank, bshape, st[1], "b");
	gemm(G, n, dt, 0, m, nn, k, nb, na == 1 ? 0 : m * k, nbb == 1 ? 0 : k * nn, NULL,
	     ta, tb, rv);
	if (ta != av)
		cg_free_tmp(G, n, ta);
	if (tb != bv)
		cg_free_tmp(G, n, tb);
	return 1;
}

/* out += bias broadcast over rows (f64, whose cuBLASLt products take no
 * bias epilogue, and k = 0). */
static void
add_bias(CgGraph *G, const Node *n, DType dt, const char *bias, const char *out,
         int64_t count, int64_t nout)
{
	Cg *c = G->c;
	if (count == 0)
		return;
	const char *kname = cg_kernel_name(G, n, "bias");
	char *v = cg_store(c, dt, cg_fmt(c, "sg_ld(out[i]) + sg_ld(x[i %% %lld])", (long long)nout));
	CG_EMIT(c->kern, "kernels.cu:copy", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"tin", cg_ctype(dt)}, {"tout", cg_ctype(dt)}, {"idx", cg_index_type(count)},
	        {"n", cg_num(c, count)}, {"dst", "i"}, {"value", v});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0, cg_fmt(c, "%s, %s", bias, out));
}

/* cg_linear(x, w, b?) = x @ w^T + b. */
int
cg_linear(CgGraph *G, const Node *n)
{
	const Type *x = cg_otype(G, n, 0), *w = cg_otype(G, n, 1), *r = cg_vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t k = w->d[1], nout = w->d[0], rows = k ? type_numel(x) / k : 0;
	const char *bias = n->nopnd > 2 ? G->vname[n->opnd[2].v] : NULL;
	const char *rv = G->vname[n->res[0]];
	if (k == 0)
		rows = nout ? type_numel(r) / nout : 0;
	if (type_numel(r) == 0)
		return 1;
	if (k == 0) {
		cg_zero(G, n, rv, type_numel(r) * dtype_size(dt));
		if (bias)
			add_bias(G, n, dt, bias, rv, type_numel(r), nout);
		return 1;
	}
	int epilogue = bias && dt != DT_F64;
	gemm(G, n, dt, 1, rows, nout, k, 0, 0, 0, epilogue ? bias : NULL,
	     G->vname[n->opnd[0].v], G->vname[n->opnd[1].v], rv);
	if (bias && !epilogue)
		add_bias(G, n, dt, bias, rv, type_numel(r), nout);
	return 1;
}

