/*
 * codegen_fuse.c - pointwise fusion at -O2, and the memory plan of the
 * fused program.
 *
 * Consecutive pointwise nodes of one stream and one output shape become
 * one kernel, in which the values used only inside the group stay in
 * registers (no memory).  A group also gets 128-bit vector loads and
 * stores of its full-shaped operands and results when the element count
 * divides evenly (broadcast operands are read element by element; the
 * launch checks alignment at run time and falls back to the scalar
 * kernel).  A group whose only output feeds, right after it, a reduction,
 * softmax or norm as that op's input is not a kernel at all: it becomes a
 * device function computing one element, called where the consumer's
 * kernel reads its input (CgInput), so the intermediate never goes to
 * memory.
 *
 * Legality (language rule 6, fusion stops at streams and syncs): a node
 * joins the group only when fusion_legal (fusion.c) allows it, it runs on
 * the group's stream, and every node between it and the group in program
 * order is inert (`del`, `offload`): so no sync op, no other stream's
 * work, no in-place write and no non-pointwise consumer lies between the
 * members, and moving a member up to the group's first node (or into its
 * consumer) reorders nothing observable.
 *
 * The memory plan (memplan.c) is then built over the program as it runs:
 * a copy of the graph in which each group is one node at its place (its
 * first member, or its consumer), reading the group's inputs and writing
 * its stored results, while the values kept in registers have no buffer.
 * So the plan reserves nothing for them, and never lets a group's results
 * take the bytes of what the same kernel reads.
 */
#include <string.h>

#include "codegen.h"

/* 1 when node n may be a group member. */
static int
fusable(CgGraph *G, const Node *n)
{
	if (n->flags & NF_DEAD || n->op >= OP__N || !cg_is_pointwise(G->g, n))
		return 0;
	if (op_table[n->op].flags & OPF_INPLACE)
		return 0;
	return n->nres == 1 && !G->g->vals.v[n->res[0]].type.host;
}

/* Nodes that order nothing and compute nothing. */
static int
inert(const Node *n)
{
	return n->flags & NF_DEAD || n->op == OP_DEL || n->op == OP_OFFLOAD;
}

/* 1 when value v is the result of a member of grp. */
static int
made_in(CgGraph *G, const CgGroup *grp, ValId v)
{
	for (uint32_t k = 0; k < grp->n; k++)
		if (G->g->nodes.v[grp->nodes[k]].res[0] == v)
			return 1;
	return 0;
}

/* 1 when value v, made by a member of group gi, is used only inside the
 * group (by del/offload at most elsewhere) and is not kept or returned. */
static int
inside_only(CgGraph *G, ValId v, int gi)
{
	Graph *g = G->g;
	CgClass *cl = G->cls[v];
	if (cl->kind != ST_TEMP || G->root[v] != v)
		return 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD || n->op == OP_DEL || n->op == OP_OFFLOAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL && G->root[n->opnd[k].v] == v &&
			    G->group[i] != gi)
				return 0;
	}
	return 1;
}

/* The vector width for a group: 16 bytes over its widest full-shaped
 * operand or result (broadcast operands are loaded one element at a
 * time), or 1 when the count does not divide. */
static int
vec_width(CgGraph *G, const CgGroup *grp, const Type *shape)
{
	Graph *g = G->g;
	int64_t n = type_numel(shape);
	int widest = 1;
	for (uint32_t k = 0; k < grp->n; k++) {
		const Node *m = &g->nodes.v[grp->nodes[k]];
		for (uint32_t j = 0; j < m->nopnd; j++) {
			if (m->opnd[j].kind != OK_VAL)
				continue;
			const Type *t = &g->vals.v[m->opnd[j].v].type;
			if (!type_same_shape(t, shape))
				continue; /* broadcast: loaded element by element */
			if (dtype_size((DType)t->dt) > widest)
				widest = dtype_size((DType)t->dt);
		}
		const Type *r = &g->vals.v[m->res[0]].type;
		if (dtype_size((DType)r->dt) > widest)
			widest = dtype_size((DType)r->dt);
	}
	int vec = 16 / widest;
	if (vec < 2 || n < 1024 || n % vec)
		return 1;
	return vec;
}

/* 1 when op reads its operand 0 only through its kernel's input
 * expression (CgInput), so a pointwise producer can be computed there. */
static int
takes_prologue(int op)
{
	switch (op) {
	case OP_SUM: case OP_MEAN: case OP_AMAX: case OP_AMIN: case OP_VAR:
	case OP_VAR_MEAN: case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_LAYER_NORM:
	case OP_RMS_NORM:
		return 1;
	}
	return 0;
}

/* The node a group can be computed inside of: the one consumer of the
 * group's last value (every other value of the group used only in it),
 * reading it as operand 0 alone, right after the group on its stream.
 * NONE when there is none. */
static NodeId
consumer(CgGraph *G, const CgGroup *grp)
{
	Graph *g = G->g;
	NodeId last = grp->nodes[grp->n - 1], use = NONE;
	ValId v = g->nodes.v[last].res[0];
	for (uint32_t k = 0; k + 1 < grp->n; k++)
		if (!G->ingroup_only[g->nodes.v[grp->nodes[k]].res[0]])
			return NONE;
	if (G->cls[v]->kind != ST_TEMP || G->root[v] != v)
		return NONE;
	for (NodeId i = last + 1; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD || n->op == OP_DEL || n->op == OP_OFFLOAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (n->opnd[k].kind != OK_VAL || G->root[n->opnd[k].v] != v)
				continue;
			if (use != NONE || k != 0)
				return NONE;
			use = i;
		}
	}
	if (use == NONE)
		return NONE;
	const Node *u = &g->nodes.v[use];
	if (u->op >= OP__N || !takes_prologue(u->op) || u->stream != g->nodes.v[last].stream ||
	    !fusion_legal(g, last, use))
		return NONE;
	for (NodeId i = last + 1; i < use; i++)
		if (!inert(&g->nodes.v[i]))
			return NONE;
	return use;
}

void
cg_fuse(CgGraph *G, CgGroups *groups)
{
	Graph *g = G->g;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (G->group[i] >= 0 || !fusable(G, n))
			continue;
		int gi = (int)groups->n;
		CgGroup grp = {.nodes = arena_alloc(G->c->a, (g->nodes.n + 1) * sizeof(NodeId)),
		               .vec = 1, .into = NONE};
		const Type *shape = &g->vals.v[n->res[0]].type;
		grp.nodes[grp.n++] = i;
		G->group[i] = gi;
		for (NodeId j = i + 1; j < g->nodes.n; j++) {
			Node *m = &g->nodes.v[j];
			if (inert(m))
				continue;
			if (!fusable(G, m) || !fusion_legal(g, i, j) || m->stream != n->stream ||
			    !type_same_shape(&g->vals.v[m->res[0]].type, shape))
				break;
			grp.nodes[grp.n++] = j;
			G->group[j] = gi;
		}
		vec_push(groups, grp);
	}
	/* Per group: which values stay in registers, whether it is computed
	 * inside its consumer, its vector width. */
	for (uint32_t k = 0; k < groups->n; k++) {
		CgGroup *grp = &groups->v[k];
		for (uint32_t j = 0; j < grp->n; j++) {
			ValId v = g->nodes.v[grp->nodes[j]].res[0];
			G->ingroup_only[v] = (uint8_t)inside_only(G, v, (int)k);
		}
		grp->into = consumer(G, grp);
		if (grp->into != NONE) {
			G->ingroup_only[g->nodes.v[grp->nodes[grp->n - 1]].res[0]] = 1;
			G->prologue[grp->into] = (int)k;
		}
		const Node *n0 = &g->nodes.v[grp->nodes[0]];
		grp->vec = vec_width(G, grp, &g->vals.v[n0->res[0]].type);
	}
}

/* ------------------------------------------------------------------ the plan */

/* The values group grp reads from memory (made outside it), appended to
 * *ops (k of them so far); returns the new count. */
static uint32_t
group_inputs(CgGraph *G, const CgGroup *grp, Opnd *ops, uint32_t k)
{
	Graph *g = G->g;
	for (uint32_t j = 0; j < grp->n; j++) {
		const Node *m = &g->nodes.v[grp->nodes[j]];
		for (uint32_t q = 0; q < m->nopnd; q++) {
			const Opnd *o = &m->opnd[q];
			if (o->kind != OK_VAL || made_in(G, grp, o->v))
				continue;
			uint32_t d = 0;
			while (d < k && !(ops[d].kind == OK_VAL && ops[d].v == o->v))
				d++;
			if (d == k)
				ops[k++] = *o;
		}
	}
	return k;
}

void
cg_plan(CgGraph *G, const CgGroups *groups)
{
	Graph *g = G->g, f = *g;
	Arena *a = G->c->a;
	f.vals.v = arena_alloc(a, (g->vals.n + 1) * sizeof *f.vals.v);
	f.nodes.v = arena_alloc(a, (g->nodes.n + 1) * sizeof *f.nodes.v);
	memcpy(f.vals.v, g->vals.v, g->vals.n * sizeof *f.vals.v);
	memcpy(f.nodes.v, g->nodes.v, g->nodes.n * sizeof *f.nodes.v);
	for (uint32_t k = 0; groups && k < groups->n; k++) {
		const CgGroup *grp = &groups->v[k];
		NodeId at = grp->into != NONE ? grp->into : grp->nodes[0];
		Node *h = &f.nodes.v[at];
		uint32_t cap = 0, nres = 0;
		for (uint32_t j = 0; j < grp->n; j++)
			cap += g->nodes.v[grp->nodes[j]].nopnd;
		Opnd *ops = arena_alloc(a, (cap + h->nopnd + 1) * sizeof *ops);
		ValId *res = arena_alloc(a, (grp->n + h->nres + 1) * sizeof *res);
		uint32_t nops = 0;
		if (grp->into != NONE) { /* the consumer reads the group's inputs */
			for (uint32_t q = 1; q < h->nopnd; q++)
				ops[nops++] = h->opnd[q];
			for (uint32_t j = 0; j < h->nres; j++)
				res[nres++] = h->res[j];
		}
		nops = group_inputs(G, grp, ops, nops);
		for (uint32_t j = 0; j < grp->n; j++) {
			NodeId m = grp->nodes[j];
			ValId v = g->nodes.v[m].res[0];
			if (G->ingroup_only[v])
				f.vals.v[v].def = NONE; /* a register: no buffer */
			else
				res[nres++] = v, f.vals.v[v].def = at;
			if (m != at)
				f.nodes.v[m].flags |= NF_DEAD;
		}
		h->opnd = ops;
		h->nopnd = (uint16_t)nops;
		h->res = res;
		h->nres = (uint16_t)nres;
	}
	memplan_build(&f, G->c->co->opt_level >= 2 ? 2 : 0, &G->plan);
	G->use_plan = 1;
	char why[256];
	if (memplan_verify(&f, &G->plan, why) == 0)
		ICE("the memory plan of graph '%s' after fusion is wrong: %s", g->name, why);
}
