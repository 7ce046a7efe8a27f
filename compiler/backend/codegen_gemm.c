/*
 * codegen_gemm.c - matrix products: matmul (1-d operands, broadcast batch
 * dims, as torch.matmul) and linear (x @ w^T + b) through cuBLASLt
 * (sgrt_gemm in runtime/sgrt_blas.c), with the bias as an epilogue.
 *
 * At -O2 (cg_gemm_fold, after fusion and before the memory plan):
 *   - Folded views.  A `transpose` of the last two dims (or a `permute`
 *     swapping only them) whose every use is an operand of a product on
 *     its stream is not materialised: the product reads the view's source
 *     with cuBLASLt's transA/transB (batched when the strides allow).  A
 *     `reshape`, `squeeze` or `unsqueeze` whose uses are such products (or
 *     folded transposes) is the same bytes: the product reads its source.
 *     Autograd's weight gradients, matmul(transpose(reshape(g)),
 *     reshape(x)), so copy nothing.  The folded value has no memory
 *     (ingroup_only) and its source must stay unchanged (no in-place
 *     write, no sync_dealloc) until the last product reading it, which
 *     the plan (cg_gemm_plan) and the fallback release points account
 *     for.  A view with any other use, or used on another stream, keeps
 *     its copy.
 *   - Epilogues.  relu(p) or gelu(p, approximate="tanh") of a product p
 *     that nothing else uses, right after it on its stream, is computed
 *     by cuBLASLt's RELU(_BIAS) / GELU(_BIAS) epilogue: the product writes
 *     the activation's result and p gets no memory.  cuBLASLt's GELU is
 *     the tanh form, so the exact (erf) gelu stays a kernel of its own.
 *   - Attention layouts (docs/codegen.md, "-O2: attention").  A transpose
 *     or permute keeping the last dim whose uses are q, k, v (dout)
 *     operands of attention nodes is read by the flash kernels through
 *     strides (trans 2); a chain of single-use views after an attention
 *     result (transpose back, reshape) is written by the kernel through
 *     strides (out, outview); each checked with cg_flash_fits.  An
 *     attention backward is paired with its forward (pair) and reads its
 *     o and log-sum-exp instead of running it again.
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
	int rank[4];
	const int64_t *d[4];
	for (int k = 0; k < nop && k < 4; k++) {
		rank[k] = ops[k]->rank;
		d[k] = ops[k]->d;
	}
	return shape_batch_bcast(nop, rank, d, shape, st);
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

/* What cg_gemm_fold decided. */
typedef struct CgFold CgFold;
struct CgFold {
	ValId *src;       /* per value: a folded view's source, or NONE */
	uint8_t *trans;   /* per value: the view swaps src's last two dims */
	NodeId *last;     /* per value: the last product reading a folded view */
	uint8_t *view;    /* per node: a folded view (emits nothing) */
	NodeId *act;      /* per node: the activation a product runs as its
	                     epilogue, or NONE */
	NodeId *prod;     /* per node: the product an activation is the
	                     epilogue of, or NONE */
	ValId *out;       /* per value: an attention result (or a view of
	                     one) written through the view making out[v], or
	                     NONE */
	uint8_t *outview; /* per node: such a view (emits nothing) */
	NodeId *pair;     /* per node: the attention backward that reuses
	                     this forward's o and log-sum-exp, and back; NONE */
	const char **lse; /* per such forward: its log-sum-exp's variable */
	/* Indexes built once, so that no decision scans the graph: */
	uint32_t *uat;    /* per value: its uses (live nodes, del included), */
	NodeId *unode;    /* in program order, are unode[uat[v] .. uat[v+1]) */
	uint16_t *uk;     /*   with the operand index uk[] */
	uint32_t *wat;    /* per class root: the nodes writing it in place or */
	NodeId *wnode;    /*   releasing it, wnode[wat[r] .. wat[r+1]) */
	NodeId *lastfwd;  /* per value: the last attention forward reading it
	                     as q (while walking the graph), or NONE */
};

/* One product as sgrt_gemm takes it (row-major, see runtime/sgrt.h). */
typedef struct {
	DType dt;
	int ta, tb, epi;
	int64_t m, n, k, batch, sa, sb;
	const char *bias, *a, *b, *out;
} Gemm;

/* One sgrt_gemm statement. */
static void
gemm(CgGraph *G, const Node *n, const char *kname, const Gemm *q)
{
	Cg *c = G->c;
	static const char *epi[] = {"", "SGRT_EPI_RELU", "SGRT_EPI_GELU"};
	CG_EMIT(G->body, "host.cu:gemm", {"dtype", cg_sgrt_dtype(q->dt)},
	        {"trans_a", q->ta ? "1" : ""}, {"trans_b", q->tb ? "1" : "0"},
	        {"m", cg_num(c, q->m)}, {"n", cg_num(c, q->n)}, {"k", cg_num(c, q->k)},
	        {"ldb", ""}, {"batch", q->batch > 1 ? cg_num(c, q->batch) : ""},
	        {"stride_a", cg_num(c, q->sa)}, {"stride_b", cg_num(c, q->sb)},
	        {"bias", q->bias ? q->bias : ""}, {"epilogue", epi[q->epi]},
	        {"s", cg_num(c, cg_stream(n))}, {"a", q->a}, {"b", q->b}, {"c", q->out},
	        {"kname", kname}, {"line", cg_num(c, n->loc.line)});
}

/* An operand as the product reads it: the variable holding its bytes and
 * whether they hold it with its last two dims swapped (a folded view). */
typedef struct {
	const char *var;
	int trans;
} Operand;

static Operand
operand(CgGraph *G, ValId v)
{
	int t = 0;
	while (G->fold && G->fold->src[v] != NONE) {
		t ^= G->fold->trans[v];
		v = G->fold->src[v];
	}
	return (Operand){G->vname[v], t};
}

/* The value whose memory a product reads for operand value v. */
static ValId
operand_root(CgGraph *G, ValId v)
{
	while (G->fold && G->fold->src[v] != NONE)
		v = G->fold->src[v];
	return v;
}

/* The batch shape of a matmul: its rank, item count and per operand
 * element strides (see cg_batch_bcast). */
static int64_t
matmul_batch(const Type *a, const Type *b, int *brank, int64_t *bshape,
             int64_t st[][SG_MAXRANK])
{
	const Type *ops[2] = {a, b};
	int64_t nb = 1;
	*brank = cg_batch_bcast(ops, 2, bshape, st);
	for (int d = 0; d < *brank; d++)
		nb *= bshape[d];
	return nb;
}

/* matmul n into value out (its result, or the activation of epilogue
 * epi), named kname. */
static int
matmul_into(CgGraph *G, const Node *n, ValId out, int epi, const char *kname)
{
	const Type *a = cg_otype(G, n, 0), *b = cg_otype(G, n, 1), *r = cg_vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t m = a->rank >= 2 ? a->d[a->rank - 2] : 1, k = a->d[a->rank - 1];
	int64_t nn = b->rank >= 2 ? b->d[b->rank - 1] : 1;
	Operand oa = operand(G, n->opnd[0].v), ob = operand(G, n->opnd[1].v);
	const char *rv = G->vname[out];
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK];
	int brank;
	int64_t nb = matmul_batch(a, b, &brank, bshape, st);
	Gemm q = {.dt = dt, .ta = oa.trans, .tb = ob.trans, .epi = epi, .m = m, .n = nn,
	          .k = k, .a = oa.var, .b = ob.var, .out = rv};
	if (type_numel(r) == 0)
		return 1;
	if (k == 0) {
		cg_zero(G, n, rv, type_numel(r) * dtype_size(dt));
		return 1;
	}
	if (nb == 1 || (b->rank <= 2 && !oa.trans)) {
		q.m = m * nb; /* a's batch dims flattened into its rows */
		gemm(G, n, kname, &q);
		return 1;
	}
	int64_t na = batch_numel(a), nbb = batch_numel(b);
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

/* cg_matmul(a, b) as torch.matmul (1-d operands, broadcast batch dims). */
int
cg_matmul(CgGraph *G, const Node *n)
{
	return matmul_into(G, n, n->res[0], 0, cg_kernel_name(G, n, "matmul"));
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
linear_into(CgGraph *G, const Node *n, ValId out, int epi, const char *kname)
{
	const Type *x = cg_otype(G, n, 0), *w = cg_otype(G, n, 1), *r = cg_vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t k = w->d[1], nout = w->d[0], rows = k ? type_numel(x) / k : 0;
	const char *bias = n->nopnd > 2 ? G->vname[n->opnd[2].v] : NULL;
	const char *rv = G->vname[out];
	Operand ox = operand(G, n->opnd[0].v), ow = operand(G, n->opnd[1].v);
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
	/* w is stored [nout, k]; a folded transpose of [k, nout] is read as is */
	Gemm q = {.dt = dt, .ta = ox.trans, .tb = !ow.trans, .epi = epi, .m = rows,
	          .n = nout, .k = k, .bias = epilogue ? bias : NULL, .a = ox.var,
	          .b = ow.var, .out = rv};
	gemm(G, n, kname, &q);
	if (bias && !epilogue)
		add_bias(G, n, dt, bias, rv, type_numel(r), nout);
	return 1;
}

/* cg_linear(x, w, b?) = x @ w^T + b. */
int
cg_linear(CgGraph *G, const Node *n)
{
	return linear_into(G, n, n->res[0], 0, cg_kernel_name(G, n, "linear"));
}

/* ------------------------------------------------------------------ folding (-O2) */

/* 1 for matmul and linear. */
static int
is_product(int op)
{
	return op == OP_MATMUL || op == OP_LINEAR;
}

/* 1 when view node n swaps the last two dims of its operand and nothing
 * else (transpose, permute). */
static int
swaps_last2(CgGraph *G, const Node *n)
{
	const Type *x = cg_otype(G, n, 0);
	int r = x->rank;
	if (r < 2)
		return 0;
	if (n->op == OP_TRANSPOSE) {
		int d0 = shape_norm_dim(ir_attr_int(n, "dim0", 0), r);
		int d1 = shape_norm_dim(ir_attr_int(n, "dim1", 0), r);
		return (d0 == r - 2 && d1 == r - 1) || (d0 == r - 1 && d1 == r - 2);
	}
	const Attr *a = ir_attr(n, "dims");
	if (n->op != OP_PERMUTE || !a || a->nints != (uint32_t)r)
		return 0;
	for (int d = 0; d < r; d++) {
		int want = d < r - 2 ? d : d == r - 2 ? r - 1 : r - 2;
		if (shape_norm_dim(a->ints[d], r) != want)
			return 0;
	}
	return 1;
}

/* 1 when view node n has the bytes of its operand (reshape and friends). */
static int
same_bytes(const Node *n)
{
	return n->op == OP_RESHAPE || n->op == OP_SQUEEZE || n->op == OP_UNSQUEEZE;
}

/* Counts (pass 0) or places (pass 1) entry x under key into a CSR whose
 * starts are at[]: pass 0 counts into at[key + 1]. */
static void
csr_add(uint32_t *at, int pass, uint32_t key)
{
	at[key + (pass == 0)]++;
}

/* Builds F's use and write indexes over the live nodes of the graph. */
static void
index_uses(CgGraph *G, CgFold *F)
{
	Graph *g = G->g;
	Arena *a = G->c->a;
	size_t nv = (size_t)g->vals.n + 1;
	F->uat = arena_alloc(a, (nv + 1) * sizeof *F->uat);
	F->wat = arena_alloc(a, (nv + 1) * sizeof *F->wat);
	for (int pass = 0; pass < 2; pass++) {
		for (NodeId i = 0; i < g->nodes.n; i++) {
			const Node *n = &g->nodes.v[i];
			if (n->flags & NF_DEAD)
				continue;
			for (uint32_t k = 0; k < n->nopnd; k++) {
				if (n->opnd[k].kind != OK_VAL)
					continue;
				ValId v = n->opnd[k].v, r = G->root[v];
				if (pass == 1) {
					F->unode[F->uat[v]] = i;
					F->uk[F->uat[v]] = (uint16_t)k;
				}
				csr_add(F->uat, pass, v);
				if (n->op == OP_SYNC_DEALLOC || races_access(n, k) == RACC_WRITE) {
					if (pass == 1)
						F->wnode[F->wat[r]] = i;
					csr_add(F->wat, pass, r);
				}
			}
		}
		if (pass == 0) { /* counts to starts */
			for (size_t v = 0; v < nv; v++) {
				F->uat[v + 1] += F->uat[v];
				F->wat[v + 1] += F->wat[v];
			}
			F->unode = arena_alloc(a, ((size_t)F->uat[nv] + 1) * sizeof *F->unode);
			F->uk = arena_alloc(a, ((size_t)F->uat[nv] + 1) * sizeof *F->uk);
			F->wnode = arena_alloc(a, ((size_t)F->wat[nv] + 1) * sizeof *F->wnode);
		} else { /* each start moved to the next key's: shift back */
			memmove(F->uat + 1, F->uat, nv * sizeof *F->uat);
			memmove(F->wat + 1, F->wat, nv * sizeof *F->wat);
			F->uat[0] = F->wat[0] = 0;
		}
	}
}

/* 1 when value v is a temporary of its own: an alias class of one value,
 * neither returned nor written in place nor on the host. */
static int
lone_temp(CgGraph *G, const uint32_t *nclass, ValId v)
{
	const CgClass *cl = G->cls[v];
	return G->root[v] == v && nclass[v] == 1 && cl->kind == ST_TEMP && !cl->mutated &&
	       !G->g->vals.v[v].type.host && !G->ingroup_only[v];
}

/* 1 when product p can read its operand k through a folded view (trans:
 * with its last two dims swapped) without materialising it. */
static int
takes_view(CgGraph *G, const Node *p, uint32_t k, int trans)
{
	if (k > 1)
		return 0; /* linear's bias */
	if (!trans)
		return 1;
	const Type *a = cg_otype(G, p, 0), *b = cg_otype(G, p, 1);
	if (p->op == OP_LINEAR)
		return k == 1 || a->rank == 2;
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK];
	int brank;
	int64_t nb = matmul_batch(a, b, &brank, bshape, st);
	int64_t own = batch_numel(k == 0 ? a : b);
	return nb == 1 || own == nb || own == 1;
}

/* 1 when operand k of node n is one the flash kernels read through
 * strides (q, k, v, and the backward's dout). */
static int
attn_operand(const Node *n, uint32_t k)
{
	return (n->op == OP_SDPA && k < 3) || (n->op == OP_SDPA_BACKWARD && k < 4);
}

/* The permutation of view node n (transpose, permute): result dim d is
 * operand dim perm[d].  0 for other nodes. */
static int
view_perm(CgGraph *G, const Node *n, int *perm)
{
	int r = cg_otype(G, n, 0)->rank;
	const Attr *a = ir_attr(n, "dims");
	for (int d = 0; d < r; d++)
		perm[d] = d;
	if (n->op == OP_TRANSPOSE && r > 0) {
		int d0 = shape_norm_dim(ir_attr_int(n, "dim0", 0), r);
		int d1 = shape_norm_dim(ir_attr_int(n, "dim1", 0), r);
		perm[d0] = d1;
		perm[d1] = d0;
		return 1;
	}
	if (n->op != OP_PERMUTE || !a || a->nints != (uint32_t)r)
		return 0;
	for (int d = 0; d < r; d++)
		perm[d] = shape_norm_dim(a->ints[d], r);
	return 1;
}

/* 1 when view node n permutes dims but keeps the last one in place (the
 * flash kernels' rows stay contiguous), e.g. [B, T, H, D] -> [B, H, T, D]. */
static int
keeps_last(CgGraph *G, const Node *n)
{
	int perm[SG_MAXRANK], r = cg_otype(G, n, 0)->rank;
	return r >= 2 && view_perm(G, n, perm) && perm[r - 1] == r - 1;
}

/* Whether every use of x, the result of view node X, is an operand of a
 * product that takes it (trans 2: of an attention node; or, when the view
 * keeps the bytes, the source of a folded view), on X's stream; *last:
 * the last node reading it. */
static int
uses_fold(CgGraph *G, NodeId X, ValId x, int trans, NodeId *last)
{
	Graph *g = G->g;
	CgFold *F = G->fold;
	int uses = 0;
	*last = NONE;
	for (uint32_t u = F->uat[x]; u < F->uat[x + 1]; u++) {
		NodeId i = F->unode[u];
		uint32_t k = F->uk[u];
		const Node *n = &g->nodes.v[i];
		if (n->op == OP_DEL || i <= X)
			continue;
		NodeId l = i;
		if (n->stream != g->nodes.v[X].stream)
			return 0;
		if (F->view[i] && !trans)
			l = F->last[n->res[0]];
		else if (trans == 2 ? !attn_operand(n, k)
		                    : n->op >= OP__N || !is_product(n->op) ||
		                      !takes_view(G, n, k, trans))
			return 0;
		uses++;
		if (*last == NONE || l > *last)
			*last = l;
	}
	return uses > 0;
}

/* 1 when nothing in (from, to] writes s's class in place or releases it
 * (sync_dealloc): a view of s read at `to` still sees what `from` saw. */
static int
source_stays(CgGraph *G, ValId s, NodeId from, NodeId to)
{
	CgFold *F = G->fold;
	ValId r = G->root[s];
	for (uint32_t w = F->wat[r]; w < F->wat[r + 1]; w++)
		if (F->wnode[w] > from && F->wnode[w] <= to)
			return 0;
	return 1;
}

/* The class of s is used until node `last` on stream s (the fallback
 * release points, codegen_host.c). */
static void
extend_use(CgGraph *G, ValId s, NodeId last, uint32_t stream)
{
	CgClass *cl = G->cls[s];
	if (cl->release == NONE || cl->release < last)
		cl->release = last;
	if (cl->last_on[stream] == NONE || cl->last_on[stream] < last)
		cl->last_on[stream] = last;
}

/* 1 when every attention node reading x (the result of view node X, now
 * marked folded) still takes the flash kernels. */
static int
attn_fits(CgGraph *G, NodeId X, ValId x)
{
	CgFold *F = G->fold;
	for (uint32_t u = F->uat[x]; u < F->uat[x + 1]; u++) {
		const Node *n = &G->g->nodes.v[F->unode[u]];
		if (F->unode[u] > X && (n->op == OP_SDPA || n->op == OP_SDPA_BACKWARD) &&
		    !cg_flash_fits(G, n, n->op == OP_SDPA_BACKWARD))
			return 0;
	}
	return 1;
}

/* Folds view node X when it qualifies (see the top of the file). */
static void
fold_view(CgGraph *G, const uint32_t *nclass, NodeId X)
{
	Graph *g = G->g;
	CgFold *F = G->fold;
	const Node *n = &g->nodes.v[X];
	int trans;
	NodeId last;
	if (n->flags & NF_DEAD || n->op >= OP__N || n->nres != 1 || n->nopnd < 1 ||
	    n->opnd[0].kind != OK_VAL || G->group[X] >= 0 || G->prologue[X] >= 0)
		return;
	if (same_bytes(n))
		trans = 0;
	else if ((n->op == OP_TRANSPOSE || n->op == OP_PERMUTE) && swaps_last2(G, n))
		trans = 1;
	else if (keeps_last(G, n))
		trans = 2; /* read by attention through strides */
	else
		return;
	ValId x = n->res[0], s = n->opnd[0].v;
	const Type *st = cg_vtype(G, s);
	if (!lone_temp(G, nclass, x) || st->host || st->dt >= DT__N || G->ingroup_only[s] ||
	    st->dt != cg_vtype(G, x)->dt || !uses_fold(G, X, x, trans, &last) ||
	    !source_stays(G, s, X, last))
		return;
	F->view[X] = 1;
	F->src[x] = s;
	F->trans[x] = (uint8_t)trans;
	F->last[x] = last;
	if (trans == 2 && !attn_fits(G, X, x)) {
		F->view[X] = 0;
		F->src[x] = F->last[x] = NONE;
		return;
	}
	G->ingroup_only[x] = 1; /* no memory */
	extend_use(G, s, last, n->stream);
}

/* The view node that is the one use (del aside) of value c, a view that
 * keeps the bytes or permutes all but the last dim, on stream `stream`
 * and not folded or fused otherwise; NONE when there is none. */
static NodeId
sole_view_use(CgGraph *G, ValId c, uint32_t stream)
{
	Graph *g = G->g;
	CgFold *F = G->fold;
	NodeId use = NONE;
	for (uint32_t u = F->uat[c]; u < F->uat[c + 1]; u++) {
		NodeId i = F->unode[u];
		if (g->nodes.v[i].op == OP_DEL || i <= g->vals.v[c].def)
			continue;
		if (use != NONE || F->uk[u] != 0)
			return NONE;
		use = i;
	}
	if (use == NONE)
		return NONE;
	const Node *n = &g->nodes.v[use];
	if (n->stream != stream || n->op >= OP__N || n->nres != 1 || G->group[use] >= 0 ||
	    G->prologue[use] >= 0 || F->view[use] ||
	    cg_vtype(G, n->res[0])->dt != cg_vtype(G, c)->dt)
		return NONE;
	return same_bytes(n) || keeps_last(G, n) ? use : NONE;
}

/* Links (F->out) the values of chain[0..nch) of views from v; clear:
 * unlinks them. */
static void
link_chain(CgGraph *G, ValId v, const NodeId *chain, int nch, int clear)
{
	for (int t = 0; t < nch; t++) {
		ValId y = G->g->nodes.v[chain[t]].res[0];
		G->fold->out[v] = clear ? NONE : y;
		v = y;
	}
}

/* Result j of attention node P written through the longest chain of
 * single-use views after it (transpose back, reshape) that the flash
 * kernels can write with strides: the views make no copy and only the
 * chain's last value gets memory. */
static void
fold_output(CgGraph *G, const uint32_t *nclass, NodeId P, uint32_t j)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	NodeId chain[SG_MAXRANK];
	int nch = 0, bwd = p->op == OP_SDPA_BACKWARD;
	ValId v = p->res[j], c = v;
	if (!lone_temp(G, nclass, c))
		return;
	while (nch < SG_MAXRANK) {
		NodeId Y = sole_view_use(G, c, p->stream);
		if (Y == NONE || !lone_temp(G, nclass, g->nodes.v[Y].res[0]))
			break;
		chain[nch++] = Y;
		c = g->nodes.v[Y].res[0];
	}
	for (; nch > 0; nch--) {
		link_chain(G, v, chain, nch, 0);
		if (cg_flash_fits(G, p, bwd))
			break;
		link_chain(G, v, chain, nch, 1);
	}
	for (int t = 0; t < nch; t++) {
		G->fold->outview[chain[t]] = 1;
		G->ingroup_only[v] = 1; /* no memory */
		v = g->nodes.v[chain[t]].res[0];
	}
}

/* The results of attention node P written through views (fold_output). */
static void
fold_outputs(CgGraph *G, const uint32_t *nclass, NodeId P)
{
	const Node *p = &G->g->nodes.v[P];
	if (p->flags & NF_DEAD || (p->op != OP_SDPA && p->op != OP_SDPA_BACKWARD) ||
	    G->group[P] >= 0 || !cg_flash_fits(G, p, p->op == OP_SDPA_BACKWARD))
		return;
	for (uint32_t j = 0; j < p->nres; j++)
		fold_output(G, nclass, P, j);
}

/* The value holding v's bytes when v is written through views. */
static ValId
out_end(CgGraph *G, ValId v)
{
	while (G->fold->out[v] != NONE)
		v = G->fold->out[v];
	return v;
}

/* 1 when attention nodes a and b take the same causal and scale. */
static int
same_attrs(const Node *a, const Node *b)
{
	const Attr *sa = ir_attr(a, "scale"), *sb = ir_attr(b, "scale");
	return ir_attr_int(a, "causal", 0) == ir_attr_int(b, "causal", 0) &&
	       (sa == NULL) == (sb == NULL) && (!sa || sa->f == sb->f);
}

/* Pairs forward A with backward B when B can read A's o and lse: o's
 * bytes and q, k, v's unchanged from A to B, both on the flash path with
 * o's layout.  o's memory then lives until B. */
static void
try_pair(CgGraph *G, NodeId A, NodeId B)
{
	Graph *g = G->g;
	CgFold *F = G->fold;
	const Node *a = &g->nodes.v[A], *b = &g->nodes.v[B];
	ValId y = out_end(G, a->res[0]);
	if (G->ingroup_only[y] || cg_vtype(G, y)->host || !source_stays(G, y, A, B))
		return;
	for (uint32_t k = 0; k < 3; k++)
		if (!source_stays(G, operand_root(G, a->opnd[k].v), A, B))
			return;
	F->pair[A] = B;
	F->pair[B] = A;
	if (!cg_flash_fits(G, a, 0) || !cg_flash_fits(G, b, 1)) {
		F->pair[A] = F->pair[B] = NONE;
		return;
	}
	if (G->cls[y]->kind == ST_TEMP)
		extend_use(G, y, B, b->stream);
}

/* The forward of attention backward B (same q, k, v, causal and scale,
 * same stream), paired with it when it qualifies (try_pair). */
static void
pair_attention(CgGraph *G, NodeId B)
{
	Graph *g = G->g;
	CgFold *F = G->fold;
	const Node *b = &g->nodes.v[B];
	if (b->flags & NF_DEAD)
		return;
	if (b->op == OP_SDPA && b->opnd[0].kind == OK_VAL)
		F->lastfwd[b->opnd[0].v] = B;
	if (b->op != OP_SDPA_BACKWARD || b->opnd[1].kind != OK_VAL)
		return;
	NodeId A = F->lastfwd[b->opnd[1].v];
	if (A == NONE)
		return;
	const Node *a = &g->nodes.v[A];
	if (a->stream != b->stream || !same_attrs(a, b) || a->opnd[1].v != b->opnd[2].v ||
	    a->opnd[2].v != b->opnd[3].v || F->pair[A] != NONE)
		return;
	try_pair(G, A, B);
}

/* The activation (relu, gelu tanh) of epilogue code for node a, or 0. */
static int
activation(const Node *a)
{
	if (a->op == OP_RELU)
		return 1;
	const Attr *ap = a->op == OP_GELU ? ir_attr(a, "approximate") : NULL;
	return ap && ap->s && strcmp(ap->s, "tanh") == 0 ? 2 : 0;
}

/* The one node using value v (del aside) when it comes right after node
 * p on its stream with nothing but del/offload between; NONE otherwise. */
static NodeId
next_sole_use(CgGraph *G, NodeId p, ValId v)
{
	Graph *g = G->g;
	CgFold *F = G->fold;
	NodeId use = NONE;
	for (uint32_t u = F->uat[v]; u < F->uat[v + 1]; u++) {
		NodeId i = F->unode[u];
		if (g->nodes.v[i].op == OP_DEL || i <= p)
			continue;
		if (use != NONE)
			return NONE;
		use = i;
	}
	for (NodeId i = p + 1; use != NONE && i < use; i++) {
		const Node *n = &g->nodes.v[i];
		if (!(n->flags & NF_DEAD) && n->op != OP_DEL && n->op != OP_OFFLOAD)
			return NONE; /* something else runs between */
	}
	return use;
}

/* Removes group gi (a single activation absorbed by its product). */
static void
drop_group(CgGraph *G, CgGroups *groups, int gi)
{
	for (uint32_t k = 0; k < groups->v[gi].n; k++)
		G->group[groups->v[gi].nodes[k]] = -1;
	groups->v[gi].n = 0; /* compacted away by drop_empty_groups */
}

/* Removes the groups drop_group emptied, renumbering the others. */
static void
drop_empty_groups(CgGraph *G, CgGroups *groups)
{
	int *to = xmalloc(((size_t)groups->n + 1) * sizeof *to);
	uint32_t n = 0;
	for (uint32_t k = 0; k < groups->n; k++) {
		to[k] = groups->v[k].n ? (int)n : -1;
		if (groups->v[k].n)
			groups->v[n++] = groups->v[k];
	}
	if (n != groups->n) {
		for (NodeId i = 0; i < G->g->nodes.n; i++) {
			if (G->group[i] >= 0)
				G->group[i] = to[G->group[i]];
			if (G->prologue[i] >= 0)
				G->prologue[i] = to[G->prologue[i]];
			if (G->epilogue[i] >= 0)
				G->epilogue[i] = to[G->epilogue[i]];
		}
		groups->n = n;
	}
	free(to);
}

/* Makes the activation right after product P its epilogue when it
 * qualifies (see the top of the file). */
static void
fold_epilogue(CgGraph *G, CgGroups *groups, const uint32_t *nclass, NodeId P)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	if (p->flags & NF_DEAD || p->op >= OP__N || !is_product(p->op))
		return;
	ValId v = p->res[0];
	const Type *t = cg_vtype(G, v);
	const Type *k = cg_otype(G, p, p->op == OP_LINEAR ? 1 : 0);
	if (t->dt == DT_F64 || type_numel(t) == 0 || k->d[k->rank - 1] == 0 ||
	    !lone_temp(G, nclass, v))
		return;
	NodeId A = next_sole_use(G, P, v);
	if (A == NONE)
		return;
	const Node *a = &g->nodes.v[A];
	int gi = G->group[A];
	if (a->op >= OP__N || !activation(a) || a->nopnd != 1 || a->stream != p->stream ||
	    G->ingroup_only[a->res[0]] || cg_vtype(G, a->res[0])->host ||
	    cg_vtype(G, a->res[0])->dt != t->dt || G->prologue[A] >= 0 ||
	    (gi >= 0 && (groups->v[gi].n != 1 || groups->v[gi].into != NONE ||
	                 groups->v[gi].after != NONE)))
		return;
	if (gi >= 0)
		drop_group(G, groups, gi);
	G->fold->act[P] = A;
	G->fold->prod[A] = P;
	G->ingroup_only[v] = 1; /* no memory */
	for (uint32_t q = 0; q < p->nopnd; q++)
		if (p->opnd[q].kind == OK_VAL)
			extend_use(G, operand_root(G, p->opnd[q].v), A, p->stream);
}

void
cg_gemm_fold(CgGraph *G, CgGroups *groups)
{
	Graph *g = G->g;
	Arena *a = G->c->a;
	if (G->c->co->opt_level < 2)
		return;
	CgFold *F = G->fold = arena_alloc(a, sizeof *F);
	F->src = arena_alloc(a, (g->vals.n + 1) * sizeof *F->src);
	F->trans = arena_alloc(a, g->vals.n + 1);
	F->last = arena_alloc(a, (g->vals.n + 1) * sizeof *F->last);
	F->view = arena_alloc(a, g->nodes.n + 1);
	F->act = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->act);
	F->prod = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->prod);
	F->out = arena_alloc(a, (g->vals.n + 1) * sizeof *F->out);
	F->outview = arena_alloc(a, g->nodes.n + 1);
	F->pair = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->pair);
	F->lse = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->lse);
	F->lastfwd = arena_alloc(a, (g->vals.n + 1) * sizeof *F->lastfwd);
	uint32_t *nclass = arena_alloc(a, (g->vals.n + 1) * sizeof *nclass);
	for (ValId v = 0; v < g->vals.n; v++) {
		F->src[v] = F->last[v] = F->out[v] = F->lastfwd[v] = NONE;
		nclass[G->root[v]]++;
	}
	index_uses(G, F);
	for (NodeId i = 0; i < g->nodes.n; i++)
		F->act[i] = F->prod[i] = F->pair[i] = NONE;
	for (NodeId i = g->nodes.n; i-- > 0;) /* uses before their views */
		fold_view(G, nclass, i);
	for (NodeId i = 0; i < g->nodes.n; i++)
		fold_outputs(G, nclass, i);
	for (NodeId i = 0; i < g->nodes.n; i++)
		pair_attention(G, i);
	for (NodeId i = 0; i < g->nodes.n; i++)
		fold_epilogue(G, groups, nclass, i);
	drop_empty_groups(G, groups);
}

/* Product node P of the plan's graph f reads the sources of its folded
 * operands (an arena copy of its operands). */
static void
plan_operands(CgGraph *G, Node *p)
{
	Opnd *ops = arena_alloc(G->c->a, (p->nopnd + 1) * sizeof *ops);
	memcpy(ops, p->opnd, p->nopnd * sizeof *ops);
	for (uint32_t k = 0; k < p->nopnd; k++)
		if (ops[k].kind == OK_VAL)
			ops[k].v = operand_root(G, ops[k].v);
	p->opnd = ops;
}

/* Attention node P of the plan's graph f reads the sources of its folded
 * operands and writes the values its results are written through (arena
 * copies of its operands and results). */
static void
plan_attention(CgGraph *G, Graph *f, NodeId P)
{
	Node *p = &f->nodes.v[P];
	ValId *res = arena_alloc(G->c->a, (p->nres + 1) * sizeof *res);
	plan_operands(G, p);
	if (p->op == OP_SDPA_BACKWARD && G->fold->pair[P] != NONE) { /* reads o */
		Opnd *ops = arena_alloc(G->c->a, (p->nopnd + 2) * sizeof *ops);
		memcpy(ops, p->opnd, p->nopnd * sizeof *ops);
		ops[p->nopnd] = ops[0];
		ops[p->nopnd++].v = out_end(G, G->g->nodes.v[G->fold->pair[P]].res[0]);
		p->opnd = ops;
	}
	for (uint32_t j = 0; j < p->nres; j++) {
		ValId v = p->res[j];
		while (G->fold->out[v] != NONE) {
			f->vals.v[v].def = NONE;
			v = G->fold->out[v];
		}
		res[j] = v;
		f->vals.v[v].def = P;
	}
	p->res = res;
}

void
cg_gemm_plan(CgGraph *G, Graph *f)
{
	CgFold *F = G->fold;
	if (!F)
		return;
	for (NodeId i = 0; i < f->nodes.n; i++) {
		Node *n = &f->nodes.v[i];
		if (F->view[i]) { /* no buffer, no access */
			n->flags |= NF_DEAD;
			f->vals.v[n->res[0]].def = NONE;
			continue;
		}
		if (F->outview[i]) { /* written by its attention node */
			n->flags |= NF_DEAD;
			continue;
		}
		if (!(n->flags & NF_DEAD) && (n->op == OP_SDPA || n->op == OP_SDPA_BACKWARD)) {
			plan_attention(G, f, i);
			continue;
		}
		if (n->flags & NF_DEAD || F->prod[i] != NONE || n->op >= OP__N ||
		    !is_product(n->op))
			continue;
		plan_operands(G, n);
		NodeId A = F->act[i];
		if (A == NONE)
			continue;
		/* the product runs at its activation, writing its result */
		Node h = *n;
		h.res = f->nodes.v[A].res;
		h.nres = 1;
		f->vals.v[n->res[0]].def = NONE;
		n->flags |= NF_DEAD;
		f->nodes.v[A] = h;
	}
}

int
cg_gemm_stmt(CgGraph *G, NodeId i)
{
	CgFold *F = G->fold;
	Graph *g = G->g;
	static const char *act[] = {"", "relu", "gelu"};
	if (!F)
		return -1;
	NodeId r = F->view[i] ? F->last[g->nodes.v[i].res[0]] : NONE; /* its last reader */
	if (r != NONE && (g->nodes.v[r].op == OP_SDPA || g->nodes.v[r].op == OP_SDPA_BACKWARD)) {
		fprintf(G->body, "\t/* (not copied: the attention kernels read %s through "
		        "their strides) */\n", G->vname[operand_root(G, g->nodes.v[i].res[0])]);
		return 1;
	}
	if (F->view[i]) {
		fprintf(G->body, "\t/* (not copied: the products read %s through their "
		        "operand layout) */\n", G->vname[operand_root(G, g->nodes.v[i].res[0])]);
		return 1;
	}
	if (F->outview[i]) {
		fprintf(G->body, "\t/* (not copied: the attention kernel wrote %s through "
		        "its strides) */\n", cg_fold_var(G, g->nodes.v[i].res[0]));
		return 1;
	}
	if (F->act[i] != NONE) {
		fprintf(G->body, "\t/* (run at line %u, with its %s as cuBLASLt's epilogue) */\n",
		        g->nodes.v[F->act[i]].loc.line, op_name(g->nodes.v[F->act[i]].op));
		return 1;
	}
	NodeId P = F->prod[i];
	if (P == NONE)
		return -1;
	const Node *p = &g->nodes.v[P];
	int epi = activation(&g->nodes.v[i]);
	const char *kname = cg_kernel_name(G, p, cg_fmt(G->c, "%s_%s", op_name(p->op), act[epi]));
	ValId out = g->nodes.v[i].res[0];
	return p->op == OP_MATMUL ? matmul_into(G, p, out, epi, kname)
	                          : linear_into(G, p, out, epi, kname);
}

/* 1 when the nonzero-size dims of strides st are t's row-major ones. */
static int
row_major(const Type *t, const int64_t *st)
{
	int64_t want[SG_MAXRANK];
	cg_strides(t, want);
	for (int d = 0; d < t->rank; d++)
		if (t->d[d] != 1 && st[d] != want[d])
			return 0;
	return 1;
}

int
cg_fold_strides(CgGraph *G, ValId v, int64_t *st)
{
	CgFold *F = G->fold;
	const Type *t = cg_vtype(G, v);
	ValId s = F ? F->src[v] : NONE, w = F ? F->out[v] : NONE, o = s != NONE ? s : w;
	int64_t ost[SG_MAXRANK];
	int perm[SG_MAXRANK];
	cg_strides(t, st);
	if (o == NONE)
		return 1;
	const Node *n = &G->g->nodes.v[G->g->vals.v[s != NONE ? v : w].def];
	if (!cg_fold_strides(G, o, ost))
		return 0;
	if (same_bytes(n))
		return row_major(cg_vtype(G, o), ost);
	view_perm(G, n, perm);
	for (int d = 0; d < t->rank; d++) {
		if (s != NONE)
			st[d] = ost[perm[d]]; /* v = view(s) */
		else
			st[perm[d]] = ost[d]; /* w = view(v) */
	}
	return 1;
}

const char *
cg_fold_var(CgGraph *G, ValId v)
{
	v = operand_root(G, v);
	while (G->fold && G->fold->out[v] != NONE)
		v = G->fold->out[v];
	return G->vname[v];
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
cg_fold_pair(CgGraph *G, NodeId i)
{
	return G->fold ? G->fold->pair[i] : NONE;
}

const char **
cg_fold_lse(CgGraph *G, NodeId i)
{
	return &G->fold->lse[i];
}
