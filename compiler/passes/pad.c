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
 * It runs before autograd, so the backward's products are padded too:
 * slice's gradient is the padded dy, and the weight's gradient is the
 * first N rows of the padded weight's.  The values are equal to the
 * unpadded product's (the padding multiplies zeros into columns nobody
 * reads); the copies (the weight, the slice, the padded gradient) cost a
 * pass over each, far less than the slow kernels.  One walk over the
 * nodes: linear in the graph.
 */
#include <string.h>

#include "passes.h"

enum { PAD_MIN_N = 256 };
#define PAD_MIN_WORK (1.0 * (1 << 24))

typedef struct {
	Graph *g;
	Diag *d;
	NodeInsVec ins;
} Pad;

/* Attribute `name` of n, marked set. */
static Attr *
attr_set(Node *n, const char *name)
{
	int k = op_attr_index(n->op, name);
	if (k < 0)
		ICE("pad_products: '%s' has no attribute '%s'", op_name(n->op), name);
	n->attr[k].set = 1;
	return &n->attr[k];
}

/* Types node n by its shape rule with a fresh result named after base,
 * and queues it before node slot (after it: rank 1). */
static ValId
put(Pad *P, Node n, const char *base, NodeId slot, uint32_t rank, ValId res)
{
	if (res == NONE)
		res = ir_value_derived(P->g, base, 0, n.loc);
	n.nres = 1;
	n.res[0] = res;
	if (!op_table[n.op].shape(P->g, &n, P->d))
		ICE("pad_products: the shape rule of '%s' failed", op_name(n.op));
	NodeIns x = {slot, rank, n};
	vec_push(&P->ins, x);
	return res;
}

/* v with `pad` zeros appended along dim (a weight or a bias), before
 * node at. */
static ValId
padded(Pad *P, const Node *at, NodeId slot, ValId v, int dim, int64_t pad)
{
	Graph *g = P->g;
	Type t = g->vals.v[v].type;
	const char *name = g->vals.v[v].name;
	Node z = ir_node_make(g, OP_ZEROS, 0, 1, at->stream, 0, at->loc);
	Attr *sh = attr_set(&z, "shape");
	sh->nints = (uint32_t)t.rank;
	sh->ints = arena_alloc(g->mod->arena, ((size_t)t.rank + 1) * sizeof *sh->ints);
	for (int j = 0; j < t.rank; j++)
		sh->ints[j] = j == dim ? pad : t.d[j];
	attr_set(&z, "dtype")->i = t.dt;
	ValId zv = put(P, z, "pad_zeros", slot, 0, NONE);
	Node c = ir_node_make(g, OP_CAT, 2, 1, at->stream, 0, at->loc);
	c.opnd[0] = (Opnd){.kind = OK_VAL, .v = v, .loc = at->loc};
	c.opnd[1] = (Opnd){.kind = OK_VAL, .v = zv, .loc = at->loc};
	attr_set(&c, "dim")->i = dim;
	return put(P, c, arena_printf(g->mod->arena, "%s_padded", name), slot, 0, NONE);
}

/* Pads product node i when its result's rows are misaligned (see the
 * top); 1 when it did. */
static int
pad_product(Pad *P, NodeId i)
{
	Graph *g = P->g;
	Node *n = &g->nodes.v[i];
	if (n->nres != 1 || n->nopnd < 2 || n->opnd[0].kind != OK_VAL || n->opnd[1].kind != OK_VAL)
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
	ValId wp = padded(P, n, i, n->opnd[1].v, lin ? 0 : 1, pad);
	ValId bp = NONE;
	if (lin && n->nopnd > 2) {
		if (n->opnd[2].kind != OK_VAL)
			return 0;
		bp = padded(P, n, i, n->opnd[2].v, 0, pad);
	}
	n = &g->nodes.v[i]; /* (values were added, not nodes: n stays) */
	ValId yv = n->res[0];
	const char *yname = g->vals.v[yv].name;
	n->opnd[1].v = wp;
	if (bp != NONE)
		n->opnd[2].v = bp;
	ValId yp = ir_value_derived(g, arena_printf(g->mod->arena, "%s_padded", yname), 0, n->loc);
	n->res[0] = yp;
	g->vals.v[yp].def = i;
	if (!op_table[n->op].shape(g, n, P->d))
		ICE("pad_products: the padded '%s' fails its shape rule", op_name(n->op));
	Node s = ir_node_make(g, OP_SLICE, 1, 1, n->stream, 0, n->loc);
	s.opnd[0] = (Opnd){.kind = OK_VAL, .v = yp, .loc = n->loc};
	attr_set(&s, "dim")->i = y.rank - 1;
	attr_set(&s, "start")->i = 0;
	attr_set(&s, "end")->i = N;
	put(P, s, yname, i + 1, 0, yv);
	return 1;
}

int
pad_products_pass(Graph *g, const PassOptions *po, Diag *d)
{
	if (po->opt_level < 2)
		return PASS_SAME;
	Pad P = {.g = g, .d = d};
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
	return changed ? 1 : PASS_SAME;
}
