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
 * memory.  Symmetrically, a group right after a reduction, softmax, norm
 * or loss that reads that op's result (and no other result of it) as a
 * full-shaped operand is not a kernel either: it becomes a device function
 * called where the op's kernel stores an element of its result (an
 * epilogue, CgGroup.after), so `mul(mean(%x), 2.0)` is one kernel, and the
 * op's result goes to memory only when something else uses it.
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

/* Who uses each alias class (by its root), from one walk over the graph
 * once the groups are known: the group of every user (or UNSET / MIXED),
 * the number of uses, and the first use (node, operand).  del and
 * offload do not count as uses. */
enum { USE_UNSET = -2, USE_MIXED = -3 };
typedef struct {
	int *group;
	uint32_t *n;
	NodeId *first;
	uint16_t *first_k;
} Uses;

static void
uses_find(CgGraph *G, Uses *u)
{
	Graph *g = G->g;
	size_t nv = (size_t)g->vals.n + 1;
	u->group = xmalloc(nv * sizeof *u->group);
	u->n = xmalloc(nv * sizeof *u->n);
	u->first = xmalloc(nv * sizeof *u->first);
	u->first_k = xmalloc(nv * sizeof *u->first_k);
	for (size_t v = 0; v < nv; v++) {
		u->group[v] = USE_UNSET;
		u->n[v] = 0;
		u->first[v] = NONE;
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD || n->op == OP_DEL || n->op == OP_OFFLOAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (n->opnd[k].kind != OK_VAL)
				continue;
			ValId r = G->root[n->opnd[k].v];
			if (u->group[r] == USE_UNSET)
				u->group[r] = G->group[i];
			else if (u->group[r] != G->group[i])
				u->group[r] = USE_MIXED;
			if (u->n[r]++ == 0) {
				u->first[r] = i;
				u->first_k[r] = (uint16_t)k;
			}
		}
	}
}

static void
uses_free(Uses *u)
{
	free(u->group);
	free(u->n);
	free(u->first);
	free(u->first_k);
}

/* 1 when value v, made by a member of group gi, is used only inside the
 * group (by del/offload at most elsewhere) and is not kept or returned. */
static int
inside_only(CgGraph *G, const Uses *u, ValId v, int gi)
{
	CgClass *cl = G->cls[v];
	if (cl->kind != ST_TEMP || G->root[v] != v)
		return 0;
	return u->group[v] == USE_UNSET || u->group[v] == gi;
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
consumer(CgGraph *G, const Uses *u, const CgGroup *grp)
{
	Graph *g = G->g;
	NodeId last = grp->nodes[grp->n - 1];
	ValId v = g->nodes.v[last].res[0];
	for (uint32_t k = 0; k + 1 < grp->n; k++)
		if (!G->ingroup_only[g->nodes.v[grp->nodes[k]].res[0]])
			return NONE;
	if (G->cls[v]->kind != ST_TEMP || G->root[v] != v)
		return NONE;
	if (u->n[v] != 1 || u->first_k[v] != 0)
		return NONE; /* none, or more than one, or not as operand 0 */
	NodeId use = u->first[v];
	const Node *un = &g->nodes.v[use];
	if (un->op >= OP__N || !takes_prologue(un->op) || un->stream != g->nodes.v[last].stream ||
	    !fusion_legal(g, last, use))
		return NONE;
	for (NodeId i = last + 1; i < use; i++)
		if (!inert(&g->nodes.v[i]))
			return NONE;
	return use;
}

/* 1 when op's kernel stores its (single) result through a put statement
 * that can call an epilogue (codegen_rows.c). */
static int
takes_epilogue(const Node *n)
{
	switch (n->op) {
	case OP_SUM: case OP_MEAN: case OP_AMAX: case OP_AMIN: case OP_VAR:
	case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_LAYER_NORM: case OP_RMS_NORM:
	case OP_CROSS_ENTROPY: case OP_MSE_LOSS:
		return n->nres == 1;
	}
	return 0;
}

/* 1 when group grp reads value v as an operand, 0 when not; -1 when it
 * reads another value of v's alias class. */
static int
group_reads(CgGraph *G, const CgGroup *grp, ValId v)
{
	int reads = 0;
	for (uint32_t k = 0; k < grp->n; k++) {
		const Node *m = &G->g->nodes.v[grp->nodes[k]];
		for (uint32_t j = 0; j < m->nopnd; j++) {
			if (m->opnd[j].kind != OK_VAL || G->root[m->opnd[j].v] != G->root[v])
				continue;
			if (m->opnd[j].v != v)
				return -1;
			reads = 1;
		}
	}
	return reads;
}

/* ------------------------------------------------------------------ softmax backward */

/* The value node n reads as operand k, or NONE for a literal. */
static ValId
opv(const Node *n, uint32_t k)
{
	return k < n->nopnd && n->opnd[k].kind == OK_VAL ? n->opnd[k].v : NONE;
}

/* 1 when v is an f32 value of shape t. */
static int
f32_like(CgGraph *G, ValId v, const Type *t)
{
	return v != NONE && G->g->vals.v[v].type.dt == DT_F32 &&
	       type_same_shape(&G->g->vals.v[v].type, t);
}

/* The operand of binary node n besides v (v itself when n reads v
 * twice), or NONE when n does not read v. */
static ValId
other(const Node *n, ValId v)
{
	if (opv(n, 0) == v)
		return opv(n, 1);
	return opv(n, 1) == v ? opv(n, 0) : NONE;
}

/* Autograd's softmax backward, y * (g - sum(g * y, dim=-1, keepdim)), or
 * log_softmax's, g - exp(y) * sum(g, dim=-1, keepdim), in f32: node p the
 * sum (with the group {g * y} fused into its input for softmax), grp the
 * pointwise group right after it.  Fills sb and returns 1 when they match. */
static int
softmax_bwd_match(CgGraph *G, NodeId p, const CgGroup *grp, CgSoftmaxBwd *sb)
{
	Graph *g = G->g;
	const Node *r = &g->nodes.v[p];
	if (r->op != OP_SUM || r->nres != 1 || opv(r, 0) == NONE)
		return 0;
	const Type *x = cg_otype(G, r, 0), *rt = &g->vals.v[r->res[0]].type;
	const Attr *dims = ir_attr(r, "dims");
	if (x->rank < 1 || x->dt != DT_F32 || !dims || dims->nints != 1 ||
	    shape_norm_dim(dims->ints[0], x->rank) != x->rank - 1 || rt->rank != x->rank ||
	    rt->d[x->rank - 1] != 1 || x->d[x->rank - 1] < 1 || x->d[x->rank - 1] > INT32_MAX)
		return 0;
	ValId s = r->res[0];
	int pro = G->prologue[p];
	const Node *m[3] = {NULL, NULL, NULL};
	for (uint32_t k = 0; k < grp->n && k < 3; k++)
		m[k] = &g->nodes.v[grp->nodes[k]];
	if (pro < 0 && grp->n == 3) { /* log_softmax */
		const Node *e = m[0], *t = m[1], *d = m[2];
		ValId gv = opv(r, 0);
		if (e->op != OP_EXP || t->op != OP_MUL || d->op != OP_SUB ||
		    other(t, e->res[0]) != s || opv(d, 0) != gv || opv(d, 1) != t->res[0] ||
		    !f32_like(G, opv(e, 0), x) || !f32_like(G, gv, x))
			return 0;
		*sb = (CgSoftmaxBwd){.g = gv, .y = opv(e, 0), .dx = d->res[0], .log = 1};
	} else if (pro >= 0 && grp->n == 2 && G->groups->v[pro].n == 1) { /* softmax */
		const Node *gy = &g->nodes.v[G->groups->v[pro].nodes[0]];
		const Node *u = m[0], *d = m[1];
		if (gy->op != OP_MUL || u->op != OP_SUB || d->op != OP_MUL || opv(u, 1) != s)
			return 0;
		ValId gv = opv(u, 0), yv = other(gy, gv);
		if (yv == NONE || other(d, u->res[0]) != yv || !f32_like(G, gv, x) ||
		    !f32_like(G, yv, x))
			return 0;
		*sb = (CgSoftmaxBwd){.g = gv, .y = yv, .dx = d->res[0], .log = 0};
	} else {
		return 0;
	}
	for (uint32_t k = 0; k + 1 < grp->n; k++)
		if (!G->ingroup_only[m[k]->res[0]])
			return 0;
	return f32_like(G, sb->dx, x) && !G->ingroup_only[sb->dx];
}

int
cg_softmax_bwd(CgGraph *G, NodeId i, CgSoftmaxBwd *sb)
{
	int e = cg_epilogue(G, i);
	return e >= 0 && G->ingroup_only[G->g->nodes.v[i].res[0]] &&
	       softmax_bwd_match(G, i, &G->groups->v[e], sb);
}

/* ------------------------------------------------------------------ epilogues */

/* The node whose result group grp can be computed from in that node's
 * kernel (an epilogue): the op right before the group on its stream
 * (nothing but del/offload between), whose single result has the group's
 * shape and is read by the group, where fusion_legal agrees.  NONE when
 * there is none.  Also autograd's softmax backward after its sum (gi: the
 * group's index), which one library kernel computes (codegen_rows.c). */
static NodeId
producer(CgGraph *G, const Uses *u, const CgGroup *grp, int gi)
{
	Graph *g = G->g;
	NodeId first = grp->nodes[0], p = first;
	while (p > 0 && inert(&g->nodes.v[p - 1]))
		p--;
	if (p == 0 || grp->into != NONE)
		return NONE;
	p--;
	const Node *r = &g->nodes.v[p], *f = &g->nodes.v[first];
	if (r->op >= OP__N || !takes_epilogue(r) || G->group[p] >= 0 ||
	    r->stream != f->stream || !fusion_legal(g, p, first))
		return NONE;
	ValId v = r->res[0];
	const Type *t = &g->vals.v[v].type;
	CgSoftmaxBwd sb;
	if (!t->host && softmax_bwd_match(G, p, grp, &sb) && inside_only(G, u, v, gi))
		return p;
	if (t->host || !type_same_shape(t, &g->vals.v[f->res[0]].type) ||
	    type_numel(t) == 0 || type_numel(cg_otype(G, r, 0)) == 0)
		return NONE;
	if (group_reads(G, grp, v) != 1)
		return NONE;
	for (uint32_t k = 0; k < grp->n; k++)
		if (!G->ingroup_only[g->nodes.v[grp->nodes[k]].res[0]])
			return p; /* the group stores something */
	return NONE;
}

void
cg_fuse(CgGraph *G, CgGroups *groups)
{
	Graph *g = G->g;
	/* Groups are disjoint runs of nodes: one pool holds them all. */
	NodeId *pool = arena_alloc(G->c->a, ((size_t)g->nodes.n + 1) * sizeof *pool);
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (G->group[i] >= 0 || !fusable(G, n))
			continue;
		int gi = (int)groups->n;
		CgGroup grp = {.nodes = pool, .vec = 1, .into = NONE, .after = NONE};
		const Type *shape = &g->vals.v[n->res[0]].type;
		grp.nodes[grp.n++] = i;
		G->group[i] = gi;
		for (NodeId j = i + 1; j < g->nodes.n && grp.n < CG_GROUP_MAX; j++) {
			Node *m = &g->nodes.v[j];
			if (inert(m))
				continue;
			if (!fusable(G, m) || !fusion_legal(g, i, j) || m->stream != n->stream ||
			    !type_same_shape(&g->vals.v[m->res[0]].type, shape))
				break;
			grp.nodes[grp.n++] = j;
			G->group[j] = gi;
		}
		pool += grp.n;
		vec_push(groups, grp);
	}
	Uses u;
	uses_find(G, &u);
	/* Per group: which values stay in registers, whether it is computed
	 * inside its consumer, its vector width. */
	for (uint32_t k = 0; k < groups->n; k++) {
		CgGroup *grp = &groups->v[k];
		for (uint32_t j = 0; j < grp->n; j++) {
			ValId v = g->nodes.v[grp->nodes[j]].res[0];
			G->ingroup_only[v] = (uint8_t)inside_only(G, &u, v, (int)k);
		}
		grp->into = consumer(G, &u, grp);
		if (grp->into != NONE) {
			G->ingroup_only[g->nodes.v[grp->nodes[grp->n - 1]].res[0]] = 1;
			G->prologue[grp->into] = (int)k;
		}
		const Node *n0 = &g->nodes.v[grp->nodes[0]];
		grp->vec = vec_width(G, grp, &g->vals.v[n0->res[0]].type);
	}
	/* Consumers fused after a reduction or row op (their values known). */
	for (uint32_t k = 0; k < groups->n; k++) {
		CgGroup *grp = &groups->v[k];
		grp->after = producer(G, &u, grp, (int)k);
		if (grp->after == NONE)
			continue;
		if (G->epilogue[grp->after] < 0)
			G->epilogue[grp->after] = (int)k;
		ValId r = g->nodes.v[grp->after].res[0];
		G->ingroup_only[r] = (uint8_t)inside_only(G, &u, r, (int)k);
	}
	uses_free(&u);
}

int
cg_epilogue(CgGraph *G, NodeId i)
{
	return G->groups ? G->epilogue[i] : -1;
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

/* Group grp, fused after node grp->after, in the plan's copy f of the
 * graph: that node reads what it read and the group's inputs (less its own
 * result), and writes its result (unless kept in a register) and the
 * group's stored results. */
static void
epilogue_plan(CgGraph *G, Graph *f, const CgGroup *grp)
{
	Graph *g = G->g;
	Arena *a = G->c->a;
	NodeId at = grp->after;
	Node *h = &f->nodes.v[at];
	ValId r = g->nodes.v[at].res[0];
	uint32_t cap = h->nopnd, nres = 0, nops = 0;
	for (uint32_t j = 0; j < grp->n; j++)
		cap += g->nodes.v[grp->nodes[j]].nopnd;
	Opnd *ops = arena_alloc(a, (cap + 1) * sizeof *ops);
	ValId *res = arena_alloc(a, (grp->n + h->nres + 1) * sizeof *res);
	for (uint32_t q = 0; q < h->nopnd; q++)
		ops[nops++] = h->opnd[q];
	for (uint32_t j = 0; j < h->nres; j++)
		if (!G->ingroup_only[h->res[j]])
			res[nres++] = h->res[j];
	if (G->ingroup_only[r])
		f->vals.v[r].def = NONE;
	uint32_t before = nops;
	nops = group_inputs(G, grp, ops, nops);
	for (uint32_t q = before; q < nops; q++)
		if (ops[q].kind == OK_VAL && ops[q].v == r)
			ops[q] = ops[--nops], q--;
	for (uint32_t j = 0; j < grp->n; j++) {
		NodeId m = grp->nodes[j];
		ValId v = g->nodes.v[m].res[0];
		if (G->ingroup_only[v])
			f->vals.v[v].def = NONE;
		else
			res[nres++] = v, f->vals.v[v].def = at;
		f->nodes.v[m].flags |= NF_DEAD;
	}
	h->opnd = ops;
	h->nopnd = (uint16_t)nops;
	h->res = res;
	h->nres = (uint16_t)nres;
}

void
cg_plan(CgGraph *G, const CgGroups *groups)
{
	Graph *g = G->g, f = *g;
	Arena *a = G->c->a;
	f.vals.v = arena_alloc(a, (g->vals.n + 1) * sizeof *f.vals.v);
	f.nodes.v = arena_alloc(a, (g->nodes.n + 1) * sizeof *f.nodes.v);
	if (g->vals.n) /* (a graph with no statements has no arrays) */
		memcpy(f.vals.v, g->vals.v, g->vals.n * sizeof *f.vals.v);
	if (g->nodes.n)
		memcpy(f.nodes.v, g->nodes.v, g->nodes.n * sizeof *f.nodes.v);
	for (uint32_t k = 0; groups && k < groups->n; k++) {
		const CgGroup *grp = &groups->v[k];
		if (grp->after != NONE) {
			epilogue_plan(G, &f, grp);
			continue;
		}
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
	cg_gemm_plan(G, &f); /* views read by products, epilogues */
	memplan_build(&f, G->c->co->opt_level >= 2 ? 2 : 0, &G->plan);
	G->use_plan = 1;
	char why[256];
	if (memplan_verify(&f, &G->plan, why) == 0)
		ICE("the memory plan of graph '%s' after fusion is wrong: %s", g->name, why);
}
