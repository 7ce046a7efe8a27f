/*
 * attention.c - pass `attention` (-O2): the attention that models write
 * out by hand,
 *
 *     %kt = transpose(%k, dim0=-2, dim1=-1)      (or permute of the last two)
 *     %s  = matmul(%q, %kt)
 *     %s2 = mul(%s, c) or div(%s, c)             (optional: the scale)
 *     %s3 = add(%s2, %mask) or where(%keep, %s2, -inf)   (optional)
 *     %p  = softmax(%s3, dim=-1)
 *     %pd = dropout(%p, p=P)                     (optional: training)
 *     %o  = matmul(%pd, %v)
 *
 * becomes %o = scaled_dot_product_attention(%q, %k, %v, [%mask],
 * scale=c or 1/c, [dropout_p=P, salt= the dropout's]): the fused kernels,
 * which never store the T x S scores (and draw the dropout's mask).
 * It runs before autograd, so the backward is the attention's own.  Only
 * a chain whose intermediate values have no other reader (nor a return,
 * del or offload) on one stream is rewritten; the ops' shapes must be
 * what the attention op computes (its shape rule's result equals %o's
 * type), so the rewrite cannot change a value anyone sees.  An
 * attention's bool mask that is the causal pattern built from aranges,
 * ge(unsqueeze(arange(end=T), dim=1), arange(end=S)), becomes causal=true
 * (the causal flash path; a constant mask that torch.export folds is
 * recognised by tools/fx2sg), and the mask's nodes that nothing else
 * reads are dropped.  A key and value repeated along the heads
 * (Hugging Face's repeat_kv: unsqueeze, expand, reshape) are read
 * unrepeated with enable_gqa=true, the copies gone.  One walk over the
 * nodes: linear in the graph.
 *
 * The one value that changes: a query row whose scores are all -inf (its
 * every key masked out) gives NaN through softmax as written and zeros
 * through the attention op, as PyTorch's scaled_dot_product_attention
 * has given since 2.5 (its math path's _safe_softmax) and as Inductor's
 * fuse_attention rewrite of the same chain does.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct {
	Graph *g;
	uint32_t *uses; /* readers of each value: operands and returns */
} Att;

/* The node defining operand o when it is a value of one reader, made by
 * op on stream s and not yet removed; else NULL. */
static Node *
single_def(const Att *A, const Opnd *o, int op, uint32_t s)
{
	return ir_sole_def(A->g, A->uses, o, op, s);
}

/* Whether add node a has the scores first (else second): the operand
 * made by the scale or the product. */
static int
scores_first(const Att *A, const Node *a)
{
	const Value *v = &A->g->vals.v[a->opnd[1].v];
	if (v->kind != VK_NODE)
		return 1;
	int op = A->g->nodes.v[v->def].op;
	return !(op == OP_MUL || op == OP_DIV || op == OP_MATMUL);
}

/* Whether node t (transpose or permute) swaps the last two dims of its
 * operand and nothing else. */
static int
swaps_last_two(const Graph *g, const Node *t)
{
	int r = ir_type(g, &t->opnd[0])->rank;
	if (r < 2)
		return 0;
	if (t->op == OP_TRANSPOSE) {
		int a = shape_norm_dim(ir_attr_int(t, "dim0", 0), r);
		int b = shape_norm_dim(ir_attr_int(t, "dim1", 0), r);
		return (a == r - 2 && b == r - 1) || (a == r - 1 && b == r - 2);
	}
	const Attr *p = ir_attr(t, "dims");
	if (!p || p->nints != (uint32_t)r)
		return 0;
	for (int j = 0; j < r; j++) {
		int want = j == r - 2 ? r - 1 : j == r - 1 ? r - 2 : j;
		if (shape_norm_dim(p->ints[j], r) != want)
			return 0;
	}
	return 1;
}

/* Whether attention over q, k, v (and mask m, or NULL) gives type r, the
 * scores having type st: the shape rule's checks, without its messages. */
static int
fits(const Type *q, const Type *k, const Type *v, const Type *m, const Type *st,
     const Type *r)
{
	if (q->rank < 2 || k->rank < 2 || v->rank < 2 || !dtype_is_float((DType)q->dt) ||
	    k->dt != q->dt || v->dt != q->dt || r->dt != q->dt ||
	    q->d[q->rank - 1] != k->d[k->rank - 1] || k->d[k->rank - 2] != v->d[v->rank - 2])
		return 0;
	Type b, want, x;
	if (!shape_attn_batch(q, k, v, 1, &b))
		return 0;
	want = b;
	want.d[want.rank++] = q->d[q->rank - 2];
	want.d[want.rank++] = k->d[k->rank - 2];
	if (!type_same_shape(st, &want))
		return 0;
	if (m && ((m->dt != DT_BOOL && m->dt != q->dt) || !shape_broadcast(m, &want, &x) ||
	          !type_same_shape(&x, &want)))
		return 0;
	want.d[want.rank - 1] = v->d[v->rank - 1];
	return type_same_shape(r, &want);
}

/* Rewrites the chain ending at node n (the product with v) when it is
 * attention; 1 when it did. */
static int
rewrite(Att *A, Node *n)
{
	Graph *g = A->g;
	uint32_t s = n->stream;
	/* The weights' dropout (training): the attention's dropout_p. */
	Node *dr = single_def(A, &n->opnd[0], OP_DROPOUT, s);
	Node *sm = single_def(A, dr ? &dr->opnd[0] : &n->opnd[0], OP_SOFTMAX, s);
	if (!sm)
		return 0;
	const Type *pt = ir_type(g, &sm->opnd[0]);
	if (pt->rank < 2 || shape_norm_dim(ir_attr_int(sm, "dim", -1), pt->rank) != pt->rank - 1)
		return 0;
	/* The mask: add(scores, mask), or where(keep, scores, -inf). */
	Node *mk = single_def(A, &sm->opnd[0], OP_ADD, s);
	const Opnd *chain = &sm->opnd[0], *mask = NULL;
	double x;
	if (mk && mk->opnd[0].kind == OK_VAL && mk->opnd[1].kind == OK_VAL) {
		int c = scores_first(A, mk) ? 0 : 1;
		chain = &mk->opnd[c];
		mask = &mk->opnd[1 - c];
	} else if ((mk = single_def(A, &sm->opnd[0], OP_WHERE, s)) && mk->opnd[0].kind == OK_VAL &&
	           ir_literal(&mk->opnd[2], &x) && x == -INFINITY) {
		chain = &mk->opnd[1];
		mask = &mk->opnd[0];
	} else {
		mk = NULL;
	}
	/* The scale: mul by a literal (either side) or div by one. */
	double scale = 1.0;
	Node *sc = single_def(A, chain, OP_MUL, s);
	if (sc && ir_literal(&sc->opnd[1], &x) && sc->opnd[0].kind == OK_VAL) {
		chain = &sc->opnd[0];
		scale = x;
	} else if (sc && ir_literal(&sc->opnd[0], &x) && sc->opnd[1].kind == OK_VAL) {
		chain = &sc->opnd[1];
		scale = x;
	} else if ((sc = single_def(A, chain, OP_DIV, s)) && ir_literal(&sc->opnd[1], &x) &&
	           sc->opnd[0].kind == OK_VAL && x != 0) {
		chain = &sc->opnd[0];
		scale = 1.0 / x;
	} else {
		sc = NULL;
	}
	Node *mm = single_def(A, chain, OP_MATMUL, s);
	if (!mm || mm->opnd[0].kind != OK_VAL || !isfinite(scale) || scale <= 0)
		return 0;
	Node *tr = single_def(A, &mm->opnd[1], OP_TRANSPOSE, s);
	if (!tr)
		tr = single_def(A, &mm->opnd[1], OP_PERMUTE, s);
	if (!tr || tr->opnd[0].kind != OK_VAL || !swaps_last_two(g, tr) || n->opnd[1].kind != OK_VAL)
		return 0;
	const Opnd *q = &mm->opnd[0], *k = &tr->opnd[0], *v = &n->opnd[1];
	/* The scores' type before softmax: what the mask must broadcast to. */
	if (!fits(ir_type(g, q), ir_type(g, k), ir_type(g, v), mask ? ir_type(g, mask) : NULL, pt,
	          &g->vals.v[n->res[0]].type))
		return 0;
	/* where's mask keeps (bool); add's is added (the query's dtype). */
	if (mask && (mk->op == OP_WHERE) != (ir_type(g, mask)->dt == DT_BOOL))
		return 0;
	Opnd o[4] = {*q, *k, *v};
	if (mask)
		o[3] = *mask;
	ir_node_become(g, n, OP_SDPA, o, mask ? 4 : 3);
	Attr *sa = ir_attr_set(n, "scale");
	sa->f = scale;
	sa->num_kind = OK_FLOAT;
	if (dr) { /* the same mask: the dropout's p and salt */
		Attr *dp = ir_attr_set(n, "dropout_p");
		dp->f = ir_attr_float(dr, "p", 0);
		dp->num_kind = OK_FLOAT;
		Attr *salt = ir_attr_set(n, "salt");
		salt->i = ir_attr_int(dr, "salt", 0);
	}
	Node *gone[6] = {sm, mk, sc, mm, tr, dr};
	for (int j = 0; j < 6; j++)
		if (gone[j])
			gone[j]->flags |= NF_DEAD;
	return 1;
}

/* The node defining operand o (any number of readers), or NULL. */
static const Node *
def_node(const Graph *g, const Opnd *o)
{
	if (o->kind != OK_VAL || g->vals.v[o->v].kind != VK_NODE)
		return NULL;
	const Node *n = &g->nodes.v[g->vals.v[o->v].def];
	return n->flags & NF_DEAD ? NULL : n;
}

/* Whether o is arange(end=len) laid out along dim `along` of a rank-2
 * [rows, cols] index (unsqueezed at the other dim; along 1 may also be
 * the 1-D arange itself). */
static int
index_along(const Graph *g, const Opnd *o, int along, int64_t len)
{
	const Node *n = def_node(g, o);
	if (n && n->op == OP_UNSQUEEZE) {
		int r = ir_type(g, o)->rank;
		if (r != 2 || shape_norm_dim(ir_attr_int(n, "dim", 0), r) != 1 - along)
			return 0;
		n = def_node(g, &n->opnd[0]);
	} else if (along != 1) {
		return 0;
	}
	return n && n->op == OP_ARANGE && ir_attr_int(n, "end", -1) == len;
}

/* Whether mask operand m of attention (T queries, S keys) is the causal
 * pattern: ge(row index, column index) or le(column, row) of aranges,
 * key j kept for query i when j <= i (PyTorch's is_causal). */
static int
causal_mask(const Graph *g, const Opnd *m, int64_t t, int64_t s)
{
	const Node *c = def_node(g, m);
	if (!c || (c->op != OP_GE && c->op != OP_LE))
		return 0;
	const Opnd *row = &c->opnd[c->op == OP_GE ? 0 : 1], *col = &c->opnd[c->op == OP_GE ? 1 : 0];
	return index_along(g, row, 0, t) && index_along(g, col, 1, s);
}

/* Marks dead the node defining operand o of a removed read, then in turn
 * those defining its operands, each once nothing else reads it: a causal
 * mask's comparison, unsqueezes and aranges (pure, without gradients)
 * once causal=true replaces the mask, so that no kernel computes them. */
static void
drop_unread(Att *A, const Opnd *o)
{
	if (o->kind != OK_VAL || --A->uses[o->v] != 0)
		return;
	const Value *v = &A->g->vals.v[o->v];
	if (v->kind != VK_NODE)
		return;
	Node *n = &A->g->nodes.v[v->def];
	if ((n->flags & NF_DEAD) || n->nres != 1 ||
	    (n->op != OP_GE && n->op != OP_LE && n->op != OP_UNSQUEEZE && n->op != OP_ARANGE))
		return;
	n->flags |= NF_DEAD;
	for (uint32_t j = 0; j < n->nopnd; j++)
		drop_unread(A, &n->opnd[j]);
}

/* The key or value that operand o repeats along the heads, as Hugging
 * Face's repeat_kv writes it (unsqueeze(x, dim=-3), expand to [..., Hkv,
 * n, S, D], reshape to [..., Hkv * n, S, D]; a contiguous may follow),
 * each step read only by the next: its nodes in chain[0..3) (NULL where
 * absent) and *n the repeat count; NULL when o is not such a repeat. */
static const Opnd *
repeated_kv(const Att *A, const Opnd *o, uint32_t s, Node *chain[4], int64_t *n)
{
	const Graph *g = A->g;
	memset(chain, 0, 4 * sizeof *chain);
	Node *c = single_def(A, o, OP_CONTIGUOUS, s), *r;
	r = single_def(A, c ? &c->opnd[0] : o, OP_RESHAPE, s);
	Node *e = r ? single_def(A, &r->opnd[0], OP_EXPAND, s) : NULL;
	Node *u = e ? single_def(A, &e->opnd[0], OP_UNSQUEEZE, s) : NULL;
	if (!u || u->opnd[0].kind != OK_VAL)
		return NULL;
	const Type *x = ir_type(g, &u->opnd[0]), *et = ir_type(g, &e->opnd[0] /* u's */);
	const Type *rt = &g->vals.v[r->res[0]].type, *xt = &g->vals.v[e->res[0]].type;
	int k = x->rank;
	if (k < 3 || et->rank != k + 1 || xt->rank != k + 1 || rt->rank != k ||
	    shape_norm_dim(ir_attr_int(u, "dim", 0), k + 1) != k - 2)
		return NULL;
	for (int j = 0; j < k - 2; j++)
		if (xt->d[j] != x->d[j] || rt->d[j] != (j == k - 3 ? x->d[j] * xt->d[k - 2] : x->d[j]))
			return NULL;
	if (xt->d[k - 1] != x->d[k - 2] || xt->d[k] != x->d[k - 1] ||
	    rt->d[k - 2] != x->d[k - 2] || rt->d[k - 1] != x->d[k - 1])
		return NULL;
	chain[0] = c, chain[1] = r, chain[2] = e, chain[3] = u;
	*n = xt->d[k - 2];
	return &u->opnd[0];
}

/* Attention node n whose key and value are both repeated along the heads
 * by the same count: reads them unrepeated with enable_gqa (the flash
 * kernels index head h / n; nothing copied).  1 when it changed. */
static int
ungroup(Att *A, Node *n)
{
	Node *ck[4], *cv[4];
	int64_t nk, nv;
	const Opnd *k = repeated_kv(A, &n->opnd[1], n->stream, ck, &nk);
	const Opnd *v = k ? repeated_kv(A, &n->opnd[2], n->stream, cv, &nv) : NULL;
	if (!v || nk != nv || nk < 2)
		return 0;
	/* q has the repeated head count: the group divides it exactly. */
	const Type *q = ir_type(A->g, &n->opnd[0]), *kr = ir_type(A->g, &n->opnd[1]);
	const Type *kt = ir_type(A->g, k), *vt = ir_type(A->g, v);
	if (q->rank != kr->rank || q->d[q->rank - 3] != kr->d[kr->rank - 3] ||
	    kt->d[kt->rank - 3] != vt->d[vt->rank - 3])
		return 0;
	n->opnd[1] = *k;
	n->opnd[2] = *v;
	n->attr[op_attr_index(OP_SDPA, "enable_gqa")].i = 1;
	for (int j = 0; j < 4; j++) {
		if (ck[j])
			ck[j]->flags |= NF_DEAD;
		if (cv[j])
			cv[j]->flags |= NF_DEAD;
	}
	return 1;
}

int
attention_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)d;
	if (po->opt_level < 2)
		return PASS_SAME;
	Att A = {.g = g, .uses = ir_use_counts(g)};
	int changed = 0;
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->op == OP_MATMUL && !(n->flags & (NF_DEAD | NF_BACKWARD)) && n->nres == 1)
			changed |= rewrite(&A, n);
		/* Repeated key/value heads: enable_gqa on the originals. */
		if (n->op == OP_SDPA && !(n->flags & NF_DEAD) && !ir_attr_int(n, "enable_gqa", 0))
			changed |= ungroup(&A, n);
		/* A causal mask built from aranges: causal=true, no mask. */
		if (n->op == OP_SDPA && n->nopnd == 4 && !(n->flags & NF_DEAD)) {
			const Type *q = ir_type(g, &n->opnd[0]), *k = ir_type(g, &n->opnd[1]);
			if (causal_mask(g, &n->opnd[3], q->d[q->rank - 2], k->d[k->rank - 2])) {
				n->nopnd = 3;
				n->attr[op_attr_index(OP_SDPA, "causal")].i = 1;
				drop_unread(&A, &n->opnd[3]);
				changed = 1;
			}
		}
	}
	free(A.uses);
	return changed ? 1 : PASS_SAME;
}
