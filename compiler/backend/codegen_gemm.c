/*
 * codegen_gemm.c - matrix products: matmul (1-d operands, broadcast batch
 * dims, as torch.matmul) and linear (x @ w^T + b) through cuBLASLt
 * (sgrt_gemm in runtime/sgrt_blas.c), with the bias as an epilogue.
 *
 * At -O2 the pass kernel_choice (kernels.c) decides which views the
 * products read through cuBLASLt's operand layouts and which activations
 * run as cuBLASLt epilogues (g->sched->fold), and which small f32
 * products run as the kernel library's sgk_gemm_small with the pointwise
 * group after them in their epilogue (Sched.gemm_split); this file emits
 * that.
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
	return kernel_batch_bcast(ops, nop, shape, st);
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

/* One product as sgrt_gemm takes it (row-major, see runtime/sgrt.h). */
typedef struct {
	DType dt;
	int ta, tb, epi;
	int64_t m, n, k, batch, sa, sb, lda, ldb; /* ld 0: packed */
	const char *bias, *a, *b, *out, *aux;
	const char *alpha;    /* NULL, or alpha with beta 1: out += alpha * a @ b */
	const char *c_in;     /* NULL, or a residual: out = a @ b (+ bias) + c_in */
} Gemm;

/* One sgrt_gemm statement. */
static void
gemm(CgGraph *G, const Node *n, const char *kname, const Gemm *q)
{
	Cg *c = G->c;
	static const char *epi[] = {"", "SGRT_EPI_RELU", "SGRT_EPI_GELU", "SGRT_EPI_GELU_AUX",
	                            "SGRT_EPI_DGELU"};
	CG_EMIT(G->body, "host.cu:gemm", {"dtype", cg_sgrt_dtype(q->dt)},
	        {"trans_a", q->ta ? "1" : ""}, {"trans_b", q->tb ? "1" : "0"},
	        {"m", cg_num(c, q->m)}, {"n", cg_num(c, q->n)}, {"k", cg_num(c, q->k)},
	        {"lda", q->lda ? cg_num(c, q->lda) : ""}, {"ldb", q->ldb ? cg_num(c, q->ldb) : ""},
	        {"batch", q->batch > 1 ? cg_num(c, q->batch) : ""},
	        {"stride_a", cg_num(c, q->sa)}, {"stride_b", cg_num(c, q->sb)},
	        {"bias", q->bias ? q->bias : ""}, {"epilogue", epi[q->epi]},
	        {"aux", q->aux ? q->aux : ""}, {"alpha", q->alpha ? q->alpha : ""},
	        {"c_in", q->c_in ? q->c_in : ""},
	        {"s", cg_num(c, cg_stream(n))}, {"a", q->a}, {"b", q->b}, {"c", q->out},
	        {"kname", kname}, {"line", cg_num(c, n->loc.line)});
}

/* An operand as the product reads it: the variable holding its bytes (at
 * an offset for a slice), whether they hold it with its last two dims
 * swapped (a folded view) and its row stride (a slice, else 0). */
typedef struct {
	const char *var;
	int trans;
	int64_t ld;
} Operand;

static Operand
operand(CgGraph *G, ValId v)
{
	int t = 0, slice = 0;
	ValId x = v;
	while (G->fold && G->fold->src[v] != NONE) {
		if (G->fold->trans[v] == 3)
			slice = 1;
		else
			t ^= G->fold->trans[v];
		v = G->fold->src[v];
	}
	Operand o = {G->vname[v], t, 0};
	if (slice) { /* kernel_choice's takes_slice: rows of one stride */
		int64_t st[SG_MAXRANK], off;
		const Type *xt = cg_vtype(G, x);
		if (t || !sched_fold_strides(G->g, G->fold, x, st, &off) || st[xt->rank - 1] != 1)
			ICE("a product reads a slice it cannot take");
		o.var = cg_fmt(G->c, "%s + %lld", o.var, (long long)off);
		o.ld = st[xt->rank - 2];
	}
	return o;
}

/* The variable of the add's other operand when product n runs with the
 * add as epilogue epi (KEPI_ADD: the residual, C; KEPI_BIAS: the bias),
 * else NULL. */
static const char *
added(CgGraph *G, const Node *n, int epi, int which)
{
	NodeId P = (NodeId)(n - G->g->nodes.v);
	if (epi != which || !G->fold || G->fold->act[P] == NONE)
		return NULL;
	return G->vname[sched_add_operand(G->g, G->fold, P)];
}

/* matmul n into value out (its result, or the activation of epilogue
 * epi with aux matrix aux, or, alpha not NULL, a param its SGD update
 * accumulates into: out += alpha * product; or, KEPI_ADD, the residual
 * add's result), named kname. */
static int
matmul_into(CgGraph *G, const Node *n, ValId out, int epi, const char *aux, const char *alpha,
            const char *kname)
{
	const char *cin = added(G, n, epi, KEPI_ADD), *cbias = added(G, n, epi, KEPI_BIAS);
	epi = epi >= KEPI_ADD ? KEPI_NONE : epi;
	const Type *a = cg_otype(G, n, 0), *b = cg_otype(G, n, 1), *r = cg_vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t m = a->rank >= 2 ? a->d[a->rank - 2] : 1, k = a->d[a->rank - 1];
	int64_t nn = b->rank >= 2 ? b->d[b->rank - 1] : 1;
	Operand oa = operand(G, n->opnd[0].v), ob = operand(G, n->opnd[1].v);
	const char *rv = G->vname[out];
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK];
	int brank;
	int64_t nb = kernel_matmul_batch(a, b, &brank, bshape, st);
	Gemm q = {.dt = dt, .ta = oa.trans, .tb = ob.trans, .epi = epi, .m = m, .n = nn,
	          .k = k, .lda = oa.ld, .ldb = ob.ld, .a = oa.var, .b = ob.var, .out = rv,
	          .aux = aux, .alpha = alpha, .c_in = cin, .bias = cbias};
	if (type_numel(r) == 0)
		return 1;
	if (k == 0 && (alpha || cin || cbias)) /* (kernel_choice takes no such product) */
		ICE("an empty product accumulating into a param or adding a residual or bias");
	if (k == 0) {
		cg_zero(G, n, rv, type_numel(r) * dtype_size(dt));
		return 1;
	}
	if (alpha && (nb != 1 || epi || aux))
		ICE("a product accumulating into a param is not one plain matrix");
	if (nb == 1 || (b->rank <= 2 && !oa.trans)) {
		q.m = m * nb; /* a's batch dims flattened into its rows */
		gemm(G, n, kname, &q);
		return 1;
	}
	int64_t na = kernel_batch_numel(a), nbb = kernel_batch_numel(b);
	if (oa.ld || ob.ld)
		ICE("a batched product reads a slice");
	if (na != nb && na != 1) {
		if (oa.trans)
			ICE("a folded transpose needs its batch expanded");
		q.a = expand_batch(G, n, oa.var, a, brank, bshape, st[0], "a");
	}
	if (nbb != nb && nbb != 1) {
		if (ob.trans)
			ICE("a folded transpose needs its batch expanded");
		q.b = expand_batch(G, n, ob.var, b, brank, bshape, st[1], "b");
	}
	if (aux || cin || cbias)
		ICE("an aux, residual or bias epilogue on a batched product");
	q.batch = nb;
	q.sa = na == 1 ? 0 : m * k;
	q.sb = nbb == 1 ? 0 : k * nn;
	gemm(G, n, kname, &q);
	if (q.a != oa.var)
		cg_free_tmp(G, n, q.a);
	if (q.b != ob.var)
		cg_free_tmp(G, n, q.b);
	return 1;
}

/* matmul n as the kernel library's small product (sgk_gemm_small) with
 * the group after it as its epilogue, K split over `split` CTAs
 * (kernel_choice's Sched.gemm_split): one launch. */
static int
small_matmul(CgGraph *G, const Node *n, int split)
{
	Cg *c = G->c;
	int64_t m, nn, k;
	Operand oa = operand(G, n->opnd[0].v), ob = operand(G, n->opnd[1].v);
	ValId r = n->res[0];
	int e = cg_epilogue(G, (NodeId)(n - G->g->nodes.v));
	if (!kernel_small_dims(G->g, n, &m, &nn, &k) || oa.trans || ob.trans || e < 0 || k < 1)
		ICE("a small product that sgk_gemm_small cannot take");
	char *args;
	const char *epi = cg_gemm_epi(G, &G->groups->v[e], r, !G->ingroup_only[r], nn, &args);
	const char *s = cg_num(c, cg_stream(n));
	cg_use_library(G, "sgk_gemm.cuh");
	CG_EMIT(G->body, "host.cu:lib_call", {"s", s},
	        {"kname", cg_kernel_name(G, n, "matmul_epi")}, {"line", cg_num(c, n->loc.line)},
	        {"call", cg_fmt(c, "sg_launch_gemm_small(%s, %lld, %s, %lld, %lld, %lld, %lld, %d, "
	                        "%s{%s}, sgrt_stream(rt, %s))", oa.var,
	                        (long long)(oa.ld ? oa.ld : k), ob.var,
	                        (long long)(ob.ld ? ob.ld : nn), (long long)m, (long long)nn,
	                        (long long)k, split, epi, args, s)});
	return 1;
}

/* cg_matmul(a, b) as torch.matmul (1-d operands, broadcast batch dims). */
int
cg_matmul(CgGraph *G, const Node *n)
{
	int split = G->s->gemm_split[n - G->g->nodes.v];
	if (split)
		return small_matmul(G, n, split);
	return matmul_into(G, n, n->res[0], 0, NULL, NULL, cg_kernel_name(G, n, "matmul"));
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
	kname = CG_KERNEL(G, "kernels.cu:copy", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"tin", cg_ctype(dt)}, {"tout", cg_ctype(dt)}, {"idx", cg_index_type(count)},
	        {"n", cg_num(c, count)}, {"dst", "i"}, {"value", v});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0, cg_fmt(c, "%s, %s", bias, out));
}

/* linear n = x @ w^T + b into value out (see matmul_into). */
static int
linear_into(CgGraph *G, const Node *n, ValId out, int epi, const char *aux, const char *kname)
{
	const char *cin = added(G, n, epi, KEPI_ADD), *cbias = added(G, n, epi, KEPI_BIAS);
	epi = epi >= KEPI_ADD ? KEPI_NONE : epi;
	const Type *x = cg_otype(G, n, 0), *w = cg_otype(G, n, 1), *r = cg_vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t k = w->d[1], nout = w->d[0], rows = k ? type_numel(x) / k : 0;
	const char *bias = n->nopnd > 2 ? G->vname[n->opnd[2].v] : cbias;
	const char *rv = G->vname[out];
	Operand ox = operand(G, n->opnd[0].v), ow = operand(G, n->opnd[1].v);
	if (k == 0)
		rows = nout ? type_numel(r) / nout : 0;
	if (type_numel(r) == 0)
		return 1;
	if (k == 0 && (cin || cbias)) /* (kernel_choice takes no such product) */
		ICE("an empty product adding a residual or bias");
	if (k == 0) {
		cg_zero(G, n, rv, type_numel(r) * dtype_size(dt));
		if (bias)
			add_bias(G, n, dt, bias, rv, type_numel(r), nout);
		return 1;
	}
	int epilogue = bias && dt != DT_F64;
	/* w is stored [nout, k]; a folded transpose of [k, nout] is read as is */
	Gemm q = {.dt = dt, .ta = ox.trans, .tb = !ow.trans, .epi = epi, .m = rows,
	          .n = nout, .k = k, .lda = ox.ld, .bias = epilogue ? bias : NULL, .a = ox.var,
	          .b = ow.var, .out = rv, .aux = aux, .c_in = cin};
	gemm(G, n, kname, &q);
	if (bias && !epilogue)
		add_bias(G, n, dt, bias, rv, type_numel(r), nout);
	return 1;
}

/* cg_linear(x, w, b?) = x @ w^T + b. */
int
cg_linear(CgGraph *G, const Node *n)
{
	return linear_into(G, n, n->res[0], 0, NULL, cg_kernel_name(G, n, "linear"));
}

int
cg_gemm_stmt(CgGraph *G, NodeId i)
{
	const KernelFold *F = G->fold;
	Graph *g = G->g;
	static const char *act[] = {"", "relu", "gelu", "gelu", "dgelu", "add", "bias"};
	if (!F)
		return -1;
	NodeId r = F->view[i] ? F->last[g->nodes.v[i].res[0]] : NONE; /* its last reader */
	if (r != NONE && (g->nodes.v[r].op == OP_SDPA || g->nodes.v[r].op == OP_SDPA_BACKWARD)) {
		fprintf(G->body, "\t/* (not copied: the attention kernels read %s through "
		        "their strides) */\n", G->vname[sched_operand_root(G->s, g->nodes.v[i].res[0])]);
		return 1;
	}
	if (F->view[i] && F->trans[g->nodes.v[i].res[0]] == 0 && r != NONE &&
	    g->nodes.v[r].op != OP_MATMUL && g->nodes.v[r].op != OP_LINEAR) {
		fprintf(G->body, "\t/* (not copied: the same bytes as %s, read through its "
		        "pointer) */\n", G->vname[sched_operand_root(G->s, g->nodes.v[i].res[0])]);
		return 1;
	}
	if (F->view[i]) {
		fprintf(G->body, "\t/* (not copied: the products read %s through their "
		        "operand layout) */\n", G->vname[sched_operand_root(G->s, g->nodes.v[i].res[0])]);
		return 1;
	}
	if (F->outview[i]) {
		fprintf(G->body, "\t/* (not copied: the attention kernel wrote %s through "
		        "its strides) */\n", cg_fold_var(G, g->nodes.v[i].res[0]));
		return 1;
	}
	if (F->upd[i] != NONE && g->nodes.v[i].op == OP_MATMUL) {
		const Node *u = &g->nodes.v[F->upd[i]];
		fprintf(G->body, "\t/* (run at line %u, as the SGD update of %%%s: cuBLASLt "
		        "accumulates -lr times the product into it) */\n", u->loc.line,
		        g->vals.v[u->opnd[0].v].name);
		return 1;
	}
	if (F->upd[i] != NONE) { /* the param += -lr * product (beta 1) */
		const Node *p = &g->nodes.v[F->upd[i]], *u = &g->nodes.v[i];
		return matmul_into(G, p, u->opnd[0].v, 0, NULL,
		                   cg_fmt(G->c, "%.17g", -ir_attr_float(u, "lr", 0)),
		                   cg_kernel_name(G, p, "matmul_sgd"));
	}
	/* (DGELU runs at the product, the others at the activation) */
	NodeId P = NONE;
	if (F->act[i] != NONE && F->epi[i] == KEPI_DGELU) {
		P = i;
	} else if (F->act[i] != NONE) {
		const Node *a = &g->nodes.v[F->act[i]];
		fprintf(G->body, "\t/* (run at line %u, with its %s as cuBLASLt's epilogue) */\n",
		        a->loc.line, op_name(a->op));
		return 1;
	} else if (F->prod[i] != NONE && F->epi[F->prod[i]] == KEPI_DGELU) {
		fprintf(G->body, "\t/* (computed by the product of line %u, as cuBLASLt's DGELU "
		        "epilogue) */\n", g->nodes.v[F->prod[i]].loc.line);
		return 1;
	} else {
		P = F->prod[i];
	}
	if (P == NONE)
		return -1;
	const Node *p = &g->nodes.v[P], *a = &g->nodes.v[F->act[P]];
	int epi = F->epi[P];
	const char *kname = cg_kernel_name(G, p, cg_fmt(G->c, "%s_%s", op_name(p->op), act[epi]));
	ValId out = a->res[0];
	/* GELU_AUX: the product's own result is the aux matrix it writes;
	 * DGELU: gelu_backward's pre-activation, read */
	const char *aux = epi == KEPI_GELU_AUX ? G->vname[p->res[0]]
	                  : epi == KEPI_DGELU ? G->vname[a->opnd[1].v] : NULL;
	return p->op == OP_MATMUL ? matmul_into(G, p, out, epi, aux, NULL, kname)
	                          : linear_into(G, p, out, epi, aux, kname);
}

const char *
cg_fold_var(CgGraph *G, ValId v)
{
	return G->vname[sched_out_end(G->s, sched_operand_root(G->s, v))];
}

NodeId
cg_fold_out(CgGraph *G, ValId v)
{
	if (!G->fold || G->fold->out[v] == NONE)
		return NONE;
	while (G->fold->out[v] != NONE)
		v = G->fold->out[v];
	return G->g->vals.v[v].def;
}

int
cg_fold_written(CgGraph *G, NodeId i)
{
	return G->fold && G->fold->outview[i];
}

NodeId
cg_fold_dgelu(CgGraph *G, NodeId i)
{
	const KernelFold *F = G->fold;
	return F && F->act[i] != NONE && F->epi[i] == KEPI_DGELU ? F->act[i] : NONE;
}

int
cg_fold_by_product(CgGraph *G, NodeId i)
{
	const KernelFold *F = G->fold;
	return F && F->prod[i] != NONE && F->epi[F->prod[i]] == KEPI_DGELU;
}

NodeId
cg_fold_pair(CgGraph *G, NodeId i)
{
	return G->fold ? G->fold->pair[i] : NONE;
}

CgAttnKept *
cg_fold_kept(CgGraph *G, NodeId i)
{
	return &G->kept[i];
}
