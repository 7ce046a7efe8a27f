/*
 * fold_ops.c - pass `fold_ops` (-O2): ops that exported models write out
 * by hand become the one op sgc has for them.
 *
 * The tanh GELU,
 *
 *     %h = mul(%x, 0.5)
 *     %c = pow(%x, 3.0)                     (or mul(mul(%x, %x), %x))
 *     %d = mul(%c, 0.044715)
 *     %e = add(%x, %d)
 *     %f = mul(%e, 0.7978845608...)         (sqrt(2 / pi))
 *     %t = tanh(%f)
 *     %u = add(%t, 1.0)
 *     %y = mul(%h, %u)
 *
 * (Hugging Face's gelu_new, GPT-2's activation, as torch.export gives it;
 * each mul and add either way round) becomes %y = gelu(%x,
 * approximate="tanh"): one op that autograd differentiates as one
 * (gelu_backward), that remat recomputes beside its derivative instead of
 * saving the tanh and the product, and that a product right before can
 * compute in cuBLASLt's epilogue (kernels.c).  The value computed is the
 * same formula, evaluated in f32 with one rounding instead of a rounding
 * after each of the eight ops (as torch.compile's fused kernel does).
 *
 * RMS norm as Hugging Face's LlamaRMSNorm (Mistral's, Qwen2's) writes it,
 *
 *     %t = cast(%x, dtype=f32)              (none when %x is f32)
 *     %p = pow(%t, 2)                       (or mul(%t, %t))
 *     %m = mean(%p, dims=[-1], keepdim=true)
 *     %a = add(%m, eps)
 *     %r = rsqrt(%a)
 *     %h = mul(%t, %r)
 *     %c = cast(%h, dtype=%x's)             (none when %x is f32)
 *     %y = mul(%w, %c)                      (%w: [C], %x's dtype)
 *
 * with %x f16, bf16 or f32 (an f64 %x cast down computes in f32 on
 * purpose, and stays as written), becomes %y = rms_norm(%x, %w, eps=eps):
 * the kernel library's row kernels forward and backward, saving %x
 * instead of the f32 copy and the normalised rows (the result rounded
 * once, not after the normalisation too).
 *
 * Only a chain whose intermediate values have no other reader (nor a
 * return) on one stream is rewritten.  One walk over the nodes: linear in
 * the graph.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct {
	Graph *g;
	uint32_t *uses;
} Gl;

/* The node defining value operand o when o has one reader, is made by op
 * on stream s and is not removed yet; else NULL. */
static Node *
only(const Gl *G, const Opnd *o, int op, uint32_t s)
{
	return ir_sole_def(G->g, G->uses, o, op, s);
}

/* Whether operand o is the number c (to float precision, as the printed
 * constants of exported graphs are). */
static int
is_num(const Opnd *o, double c)
{
	double x;
	if (!ir_literal(o, &x))
		return 0;
	return fabs(x - c) <= 1e-6 * fabs(c);
}

/* For a binary node b (mul or add) with a number c either side: the other
 * operand, or NULL. */
static const Opnd *
with_num(const Node *b, double c)
{
	if (b->nopnd != 2)
		return NULL;
	if (is_num(&b->opnd[1], c))
		return &b->opnd[0];
	if (is_num(&b->opnd[0], c))
		return &b->opnd[1];
	return NULL;
}

static int
same_val(const Opnd *a, const Opnd *b)
{
	return a->kind == OK_VAL && b->kind == OK_VAL && a->v == b->v;
}

/* x^3 from node operand o (pow(x, 3) or mul(mul(x, x), x) either way
 * round), its nodes into gone[*ng]; NULL when o is neither. */
static const Opnd *
cube(const Gl *G, const Opnd *o, uint32_t s, Node **gone, int *ng)
{
	Node *p = only(G, o, OP_POW, s);
	if (p && p->nopnd == 2 && is_num(&p->opnd[1], 3.0) && p->opnd[0].kind == OK_VAL) {
		gone[(*ng)++] = p;
		return &p->opnd[0];
	}
	Node *m = only(G, o, OP_MUL, s);
	if (!m || m->nopnd != 2)
		return NULL;
	for (int k = 0; k < 2; k++) {
		Node *sq = only(G, &m->opnd[k], OP_MUL, s);
		const Opnd *x = &m->opnd[1 - k];
		if (sq && sq->nopnd == 2 && same_val(&sq->opnd[0], x) && same_val(&sq->opnd[1], x)) {
			gone[(*ng)++] = m;
			gone[(*ng)++] = sq;
			return x;
		}
	}
	return NULL;
}

/* Rewrites y = mul(h, u) when it ends the chain at the top. */
static int
rewrite(Gl *G, Node *y)
{
	const double k0 = sqrt(2.0 / 3.14159265358979323846), k1 = 0.044715;
	uint32_t s = y->stream;
	if (y->nopnd != 2)
		return 0;
	for (int side = 0; side < 2; side++) {
		Node *gone[10];
		int ng = 0;
		Node *h = only(G, &y->opnd[side], OP_MUL, s);
		Node *u = only(G, &y->opnd[1 - side], OP_ADD, s);
		const Opnd *x = h ? with_num(h, 0.5) : NULL, *to = u ? with_num(u, 1.0) : NULL;
		if (!x || !to || x->kind != OK_VAL)
			continue;
		Node *t = only(G, to, OP_TANH, s);
		Node *f = t ? only(G, &t->opnd[0], OP_MUL, s) : NULL;
		const Opnd *fo = f ? with_num(f, k0) : NULL;
		Node *e = fo ? only(G, fo, OP_ADD, s) : NULL;
		if (!e || e->nopnd != 2)
			continue;
		gone[ng++] = h, gone[ng++] = u, gone[ng++] = t, gone[ng++] = f, gone[ng++] = e;
		int found = 0;
		for (int k = 0; k < 2 && !found; k++) {
			if (!same_val(&e->opnd[k], x))
				continue;
			Node *d = only(G, &e->opnd[1 - k], OP_MUL, s);
			const Opnd *co = d ? with_num(d, k1) : NULL;
			int ng0 = ng;
			const Opnd *cx = co ? cube(G, co, s, gone, &ng) : NULL;
			if (cx && same_val(cx, x)) {
				gone[ng++] = d;
				found = 1;
			} else {
				ng = ng0;
			}
		}
		if (!found)
			continue;
		const Type *xt = ir_type(G->g, x), *yt = &G->g->vals.v[y->res[0]].type;
		if (!dtype_is_float((DType)xt->dt) || xt->dt != yt->dt || !type_same_shape(xt, yt))
			continue;
		ir_node_become(G->g, y, OP_GELU, x, 1);
		ir_attr_set(y, "approximate")->s = "tanh";
		for (int j = 0; j < ng; j++)
			gone[j]->flags |= NF_DEAD;
		return 1;
	}
	return 0;
}

/* Rewrites y = mul(w, c) when it ends an RMS norm chain (see the top). */
static int
rewrite_rms(Gl *G, Node *y)
{
	Graph *g = G->g;
	uint32_t s = y->stream;
	const Type *yt = &g->vals.v[y->res[0]].type;
	if (y->nopnd != 2 || yt->rank < 1)
		return 0;
	int64_t C = yt->d[yt->rank - 1];
	for (int side = 0; side < 2; side++) {
		Node *gone[8];
		int ng = 0;
		const Opnd *w = &y->opnd[side];
		const Type *wt = ir_type(g, w);
		if (!wt || wt->rank != 1 || wt->d[0] != C || wt->dt != yt->dt)
			continue;
		/* c = cast(h) back to x's dtype, or h itself when x is f32 */
		Node *c = only(G, &y->opnd[1 - side], OP_CAST, s);
		Node *h = only(G, c ? &c->opnd[0] : &y->opnd[1 - side], OP_MUL, s);
		if (!h || h->nopnd != 2)
			continue;
		if (c)
			gone[ng++] = c;
		gone[ng++] = h;
		for (int k = 0; k < 2; k++) {
			Node *r = only(G, &h->opnd[1 - k], OP_RSQRT, s);
			Node *a = r ? only(G, &r->opnd[0], OP_ADD, s) : NULL;
			const Opnd *mo = NULL;
			double eps = 0;
			if (a && a->nopnd == 2)
				for (int q = 0; q < 2 && !mo; q++)
					if (a->opnd[1 - q].kind == OK_FLOAT) {
						mo = &a->opnd[q];
						eps = a->opnd[1 - q].f;
					}
			Node *m = mo ? only(G, mo, OP_MEAN, s) : NULL;
			const Opnd *t = &h->opnd[k];
			const Type *tt = ir_type(g, t);
			if (!m || !tt || !ir_attr_int(m, "keepdim", 0) || eps <= 0 || tt->dt != DT_F32)
				continue;
			const Attr *dims = ir_attr(m, "dims");
			if (!dims || dims->nints != 1 ||
			    shape_norm_dim(dims->ints[0], tt->rank) != tt->rank - 1)
				continue;
			Node *p = only(G, &m->opnd[0], OP_POW, s);
			if (p ? p->nopnd != 2 || !is_num(&p->opnd[1], 2.0) || !same_val(&p->opnd[0], t)
			      : !(p = only(G, &m->opnd[0], OP_MUL, s)) || !same_val(&p->opnd[0], t) ||
			            !same_val(&p->opnd[1], t))
				continue;
			/* t: x itself (f32, kept), or cast(x) read by p and h alone */
			Node *tc = ir_sole_def(g, NULL, t, OP_CAST, s); /* (read by p and h) */
			const Opnd *x = t;
			if (tc && G->uses[t->v] == (p->op == OP_MUL ? 3u : 2u) && c)
				x = &tc->opnd[0];
			else if (c)
				continue; /* a cast back needs the cast in */
			const Type *xt = ir_type(g, x);
			if (!xt || xt->dt != yt->dt || !type_same_shape(xt, yt))
				continue;
			if (x != t && xt->dt == DT_F64)
				continue; /* rms_norm of f64 would compute in f64, not f32 */
			if (x != t)
				gone[ng++] = tc;
			gone[ng++] = r, gone[ng++] = a, gone[ng++] = m, gone[ng++] = p;
			Opnd o[2] = {*x, *w};
			ir_node_become(g, y, OP_RMS_NORM, o, 2);
			ir_attr_set(y, "eps")->f = eps;
			for (int j = 0; j < ng; j++)
				gone[j]->flags |= NF_DEAD;
			return 1;
		}
	}
	return 0;
}

int
fold_ops_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)d;
	if (po->opt_level < 2)
		return PASS_SAME;
	Gl G = {.g = g, .uses = ir_use_counts(g)};
	int changed = 0;
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->op == OP_MUL && !(n->flags & (NF_DEAD | NF_BACKWARD)) && n->nres == 1)
			changed |= rewrite(&G, n) || rewrite_rms(&G, n);
	}
	free(G.uses);
	return changed ? 1 : PASS_SAME;
}
