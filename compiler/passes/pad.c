/*
 * pad.c - pass `pad_products` (-O2): products whose result rows do not
 * start on 16-byte boundaries get their columns padded, as Inductor's
 * pad_mm does.
 *
 * cuBLASLt's fast kernels read and write matrices whose rows start on
 * 16-byte boundaries; a product whose result has N columns, N no multiple
 * of 16 / (element size), runs on slow ones (a language model's logits:
 * GPT-2's 50257-word vocabulary made its three products 5-7x slower than
 * their aligned size).  For
 *
 *     %y = linear(%x, %w, [%b])      %w: [N, K], %b: [N]
 *     %y = matmul(%x, %w)            %w: [K, N]
 *
 * with N misaligned, N at least PAD_MIN_N and the product at least
 * PAD_MIN_WORK multiply-adds, the weight (and bias) get P zero rows
 * (columns) by `cat` with `zeros`, the product computes N + P columns, and
 * %y is their first N (`slice`):
 *
 *     %w.pad = cat(%w, zeros(shape=[P, K]), dim=0)
 *     %y.pad = linear(%x, %w.pad, ...)
 *     %y     = slice(%y.pad, dim=-1, end=N)
 *
 * When the result reaches nothing but cross_entropy's logits (through a
 * reshape keeping the last dim: a language model's head in a training
 * step that returns the loss), the result keeps its padded columns and a
 * linear's bias gets -inf there (its bias, or zeros, cat -inf): the pad
 * classes' probabilities are exactly 0, so the loss and every gradient
 * equal the unpadded ones, and neither the slice nor its gradient (a cat
 * with zeros) is copied:
 *
 *     %b.pad  = cat(zeros(shape=[N]), full(shape=[P], value=-inf))
 *     %y.pad  = linear(%x, %w.pad, %b.pad)
 *     %r      = reshape(%y.pad, shape=[rows, N + P])
 *     %loss   = cross_entropy(%r, %t)
 *
 * It runs before autograd, so the backward's products are padded too:
 * slice's gradient is the padded dy, and the weight's gradient is the
 * first N rows of the padded weight's.  The values are equal to the
 * unpadded product's (the padding multiplies zeros into columns nobody
 * reads); the copies (the weight, the slice, the padded gradient) cost a
 * pass over each, far less than the slow kernels.  One walk over the
 * nodes: linear in the graph.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

enum { PAD_MIN_N = 256 };
#define PAD_MIN_WORK (1.0 * (1 << 24))

typedef struct {
	Graph *g;
	Diag *d;
	NodeInsVec ins;
	uint32_t *uses; /* readers of each value (ir_use_counts) */
	NodeId *user;   /* a node reading each value (the one, when uses is 1) */
} Pad;

/* Types node n (its results' types) by its op's shape rule: a failure is
 * the pass's fault. */
static void
retype(Pad *P, Node *n)
{
	if (!op_table[n->op].shape(P->g, n, P->d))
		ICE("pad_products: the padded '%s' fails its shape rule", op_name(n->op));
}

/* Types node n with result res (NONE: a fresh value named after base)
 * and queues it before node slot. */
static ValId
put(Pad *P, Node n, const char *base, NodeId slot, ValId res)
{
	if (res == NONE)
		res = ir_value_derived(P->g, base, 0, n.loc);
	n.nres = 1;
	n.res[0] = res;
	retype(P, &n);
	NodeIns x = {slot, 0, n};
	vec_push(&P->ins, x);
	return res;
}

/* A creation node (zeros, or full of value) of shape d[rank], dtype dt,
 * before node at; its value. */
static ValId
creation(Pad *P, const Node *at, NodeId slot, int op, const int64_t *d, int rank, int dt,
         double value, const char *base)
{
	Graph *g = P->g;
	Node z = ir_node_make(g, op, 0, 1, at->stream, 0, at->loc);
	Attr *sh = ir_attr_set(&z, "shape");
	sh->nints = (uint32_t)rank;
	sh->ints = arena_alloc(g->mod->arena, ((size_t)rank + 1) * sizeof *sh->ints);
	memcpy(sh->ints, d, (size_t)rank * sizeof *d);
	ir_attr_set(&z, "dtype")->i = dt;
	if (op == OP_FULL) {
		Attr *v = ir_attr_set(&z, "value");
		v->f = value;
		v->num_kind = OK_FLOAT;
	}
	return put(P, z, base, slot, NONE);
}

/* cat(a, b, dim) before node at, named after base. */
static ValId
cat2(Pad *P, const Node *at, NodeId slot, ValId a, ValId b, int dim, const char *base)
{
	Node c = ir_node_make(P->g, OP_CAT, 2, 1, at->stream, 0, at->loc);
	c.opnd[0] = (Opnd){.kind = OK_VAL, .v = a, .loc = at->loc};
	c.opnd[1] = (Opnd){.kind = OK_VAL, .v = b, .loc = at->loc};
	ir_attr_set(&c, "dim")->i = dim;
	return put(P, c, base, slot, NONE);
}

/* v with `pad` zeros appended along dim (a weight or a bias), before
 * node at. */
static ValId
padded(Pad *P, const Node *at, NodeId slot, ValId v, int dim, int64_t pad)
{
	Graph *g = P->g;
	Type t = g->vals.v[v].type;
	const char *name = g->vals.v[v].name;
	t.d[dim] = pad;
	ValId z = creation(P, at, slot, OP_ZEROS, t.d, t.rank, t.dt, 0, "pad_zeros");
	return cat2(P, at, slot, v, z, dim, arena_printf(g->mod->arena, "%s_padded", name));
}

/* The cross_entropy node whose logits are the result v of a product with
 * N columns, directly or through one reshape keeping the last dim, each
 * its value's only reader (nor returned), on the product's stream; *view:
 * the reshape or NONE.  NONE when v is read otherwise. */
static NodeId
ce_logits(Pad *P, ValId v, int64_t N, uint32_t s, NodeId *view)
{
	Graph *g = P->g;
	*view = NONE;
	for (int hop = 0; hop < 2; hop++) {
		if (P->uses[v] != 1 || P->user[v] == NONE)
			return NONE;
		NodeId u = P->user[v];
		const Node *n = &g->nodes.v[u];
		if (n->stream != s || n->flags & (NF_DEAD | NF_BACKWARD) || n->opnd[0].kind != OK_VAL ||
		    n->opnd[0].v != v)
			return NONE;
		if (n->op == OP_CROSS_ENTROPY)
			return g->vals.v[v].type.rank == 2 ? u : NONE;
		const Type *r = &g->vals.v[n->res[0]].type;
		if (hop || n->op != OP_RESHAPE || r->rank < 1 || r->d[r->rank - 1] != N)
			return NONE;
		*view = u;
		v = n->res[0];
	}
	return NONE;
}
/* Linear node i whose result reaches only cross_entropy node ce (through
 * reshape node view, or NONE): its weight padded with zero rows, its bias
 * with -inf, its result and the reshape N + pad columns wide. */
static int
pad_logits(Pad *P, NodeId i, NodeId ce, NodeId view, int64_t N, int64_t pad)
{
	Graph *g = P->g;
	Arena *ar = g->mod->arena;
	Node *n = &g->nodes.v[i];
	int dt = g->vals.v[n->res[0]].type.dt;
	ValId wp = padded(P, n, i, n->opnd[1].v, 0, pad);
	ValId b = n->nopnd > 2 ? n->opnd[2].v : NONE;
	if (b == NONE)
		b = creation(P, n, i, OP_ZEROS, &N, 1, dt, 0, "pad_bias");
	ValId inf = creation(P, n, i, OP_FULL, &pad, 1, dt, -INFINITY, "pad_ninf");
	ValId bp = cat2(P, n, i, b, inf, 0, "pad_bias");
	n = &g->nodes.v[i];
	Opnd *o = arena_alloc(ar, 3 * sizeof *o);
	o[0] = n->opnd[0];
	o[1] = (Opnd){.kind = OK_VAL, .v = wp, .loc = n->loc};
	o[2] = (Opnd){.kind = OK_VAL, .v = bp, .loc = n->loc};
	n->opnd = o;
	n->nopnd = 3;
	retype(P, n);
	if (view != NONE) {
		Node *r = &g->nodes.v[view];
		Attr *sh = ir_attr_set(r, "shape");
		int64_t *d = arena_alloc(ar, ((size_t)sh->nints + 1) * sizeof *d);
		memcpy(d, sh->ints, sh->nints * sizeof *d);
		d[sh->nints - 1] = N + pad;
		sh->ints = d;
		retype(P, r);
	}
	retype(P, &g->nodes.v[ce]);
	return 1;
}

/* Pads product node i when its result's rows are misaligned (see the
 * top); 1 when it did. */
static int
pad_product(Pad *P, NodeId i)
{
	Graph *g = P->g;
	Node *n = &g->nodes.v[i];
	if (n->nres != 1 || n->nopnd < 2 || n->opnd[0].kind != OK_VAL ||
	    n->opnd[1].kind != OK_VAL || (n->nopnd > 2 && n->opnd[2].kind != OK_VAL))
		return 0;
	const Type y = g->vals.v[n->res[0]].type, w = g->vals.v[n->opnd[1].v].type;
	const Type x = g->vals.v[n->opnd[0].v].type;
	if (y.dt != DT_F16 && y.dt != DT_BF16 && y.dt != DT_F32)
		return 0;
	if (y.rank < 2 || w.rank != 2 || x.rank < 1 || w.dt != y.dt || y.host || w.host)
		return 0;
	int64_t align = 16 / dtype_size((DType)y.dt), N = y.d[y.rank - 1];
	int64_t K = x.d[x.rank - 1];
	if (N % align == 0 || N < PAD_MIN_N || K % align != 0)
		return 0;
	if ((double)(type_numel(&y) / N) * (double)N * (double)K < PAD_MIN_WORK)
		return 0;
	int lin = n->op == OP_LINEAR;
	if (lin ? w.d[0] != N : w.d[1] != N)
		return 0;
	int64_t pad = align - N % align;
	NodeId view = NONE;
	NodeId ce = lin ? ce_logits(P, n->res[0], N, n->stream, &view) : NONE;
	if (ce != NONE)
		return pad_logits(P, i, ce, view, N, pad);
	ValId wp = padded(P, n, i, n->opnd[1].v, lin ? 0 : 1, pad);
	ValId bp = lin && n->nopnd > 2 ? padded(P, n, i, n->opnd[2].v, 0, pad) : NONE;
	n = &g->nodes.v[i]; /* (values were added, not nodes: n stays) */
	ValId yv = n->res[0];
	const char *yname = g->vals.v[yv].name;
	n->opnd[1].v = wp;
	if (bp != NONE)
		n->opnd[2].v = bp;
	ValId yp = ir_value_derived(g, arena_printf(g->mod->arena, "%s_padded", yname), 0, n->loc);
	n->res[0] = yp;
	g->vals.v[yp].def = i;
	retype(P, n);
	Node s = ir_node_make(g, OP_SLICE, 1, 1, n->stream, 0, n->loc);
	s.opnd[0] = (Opnd){.kind = OK_VAL, .v = yp, .loc = n->loc};
	ir_attr_set(&s, "dim")->i = y.rank - 1;
	ir_attr_set(&s, "start")->i = 0;
	ir_attr_set(&s, "end")->i = N;
	put(P, s, yname, i + 1, yv);
	return 1;
}

int
pad_products_pass(Graph *g, const PassOptions *po, Diag *d)
{
	if (po->opt_level < 2)
		return PASS_SAME;
	Pad P = {.g = g, .d = d, .uses = ir_use_counts(g),
	         .user = xmalloc(((size_t)g->vals.n + 1) * sizeof *P.user)};
	for (ValId v = 0; v <= g->vals.n; v++)
		P.user[v] = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++)
		for (uint32_t k = 0; k < g->nodes.v[i].nopnd; k++)
			if (!(g->nodes.v[i].flags & NF_DEAD) && g->nodes.v[i].opnd[k].kind == OK_VAL)
				P.user[g->nodes.v[i].opnd[k].v] = i;
	int changed = 0;
	uint32_t nn = g->nodes.n;
	for (NodeId i = 0; i < nn; i++) {
		const Node *n = &g->nodes.v[i];
		if ((n->op == OP_LINEAR || n->op == OP_MATMUL) &&
		    !(n->flags & (NF_DEAD | NF_BACKWARD)))
			changed |= pad_product(&P, i);
	}
	if (changed)
		ir_insert(g, &P.ins);
	vec_free(&P.ins);
	free(P.uses);
	free(P.user);
	return changed ? 1 : PASS_SAME;
}
