/*
 * fusion.c - fusion legality (rule 6) and the pass `fusion`: pointwise
 * groups for the backend.
 *
 * Two nodes may fuse into one kernel only if they run on the same stream
 * and no sync op lies between them in program order: a fused kernel runs
 * where its last part stands, so fusing across a record_event would take
 * work out of what the event captures, and fusing across a wait (or a
 * wait_stream of another stream on this one, or a synchronize) would run
 * work before what it waits for.  Work on different streams is meant to
 * overlap and never fuses.
 *
 * A region is a maximal set of kernel nodes of one stream with no sync op
 * (record_event, wait_event, wait_stream, synchronize, control_deps,
 * sync_dealloc) between any two of them; nodes of other streams in
 * between do not split it.  Nodes that are no kernel (sync ops, del,
 * offload, the backward markers) belong to no region.
 *
 * The pass (at -O2) groups the pointwise nodes and stores the groups on
 * the graph (g->sched, schedule.c), where the verifier checks them and
 * the backend reads them.  Consecutive pointwise nodes of one stream and
 * one output shape become one kernel, in which the values used only
 * inside the group stay in registers (no memory).  A group also gets
 * 128-bit vector loads and stores of its full-shaped operands and results
 * when the element count divides evenly (broadcast operands are read
 * element by element; the launch checks alignment at run time and falls
 * back to the scalar kernel).  A group whose only output feeds, right
 * after it, a reduction, softmax or norm as that op's input is not a
 * kernel at all: it becomes a device function computing one element,
 * called where the consumer's kernel reads its input (a prologue,
 * FuseGroup.into), so the intermediate never goes to memory.
 * Symmetrically, a group right after a reduction, softmax, norm or loss
 * that reads that op's result (and no other result of it) as a
 * full-shaped operand is not a kernel either: it becomes a device
 * function called where the op's kernel stores an element of its result
 * (an epilogue, FuseGroup.after), so `mul(mean(%x), 2.0)` is one kernel,
 * and the op's result goes to memory only when something else uses it.
 * So is a group right after a small f32 matmul (kernel_small_product) when
 * the target has thread block clusters (--arch sm_90 and later): the
 * kernel library's sgk_gemm_small computes the product and the group in
 * one launch, `tanh(matmul(%x, %w))` with no product in memory.
 *
 * dropout joins groups too (its emitter is the pointwise family's): the
 * group's kernel draws element i's 16 bits of the dropout's Philox block
 * i / 8 (runtime/sgk/sgk_random.h), so `add(dropout(%x), %r)` is one pass
 * over memory.  A group with a dropout is never a prologue or epilogue:
 * those compute elements in another kernel's order and have no generator
 * state.
 *
 * A group whose one stored value is only copied, right after it, into an
 * input, param or const (functionalize's write-backs, batch_norm's
 * running statistics) stores it there itself (store_into_copy).
 *
 * A node joins a group only when fusion_legal allows it, it runs on the
 * group's stream, and every node between it and the group in program
 * order is inert (`del`, `offload`): so no sync op, no other stream's
 * work, no in-place write and no non-pointwise consumer lies between the
 * members, and moving a member up to the group's first node (or into its
 * consumer) reorders nothing observable.
 */
#include <string.h>

#include "passes.h"

/* A sync op: nothing fuses across it. */
static int
is_sync(const Node *n)
{
	uint32_t t;
	return n->op == OP_SYNC_DEALLOC || ir_sync_of(n, &t) >= 0;
}

/* A node that runs work on its stream (may join a fused kernel). */
static int
is_kernel(const Node *n)
{
	return !(n->flags & NF_DEAD) && n->op < OP__N && !is_sync(n);
}

/* Region ids: a stream's run of kernels between two sync ops. */
void
fusion_analyse(const Graph *g, FusionInfo *fi)
{
	uint32_t ns = g->streams.n, epoch = 0;
	uint32_t *id = xmalloc((ns + 1) * sizeof *id);
	uint32_t *at = xmalloc((ns + 1) * sizeof *at);
	for (uint32_t s = 0; s < ns; s++)
		at[s] = NONE;
	fi->region = xmalloc((g->nodes.n + 1) * sizeof *fi->region);
	fi->nregions = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		fi->region[i] = NONE;
		if (n->flags & NF_DEAD)
			continue;
		if (is_sync(n)) {
			epoch++;
			continue;
		}
		if (!is_kernel(n))
			continue;
		if (at[n->stream] != epoch) {
			at[n->stream] = epoch;
			id[n->stream] = fi->nregions++;
		}
		fi->region[i] = id[n->stream];
	}
	free(id);
	free(at);
}

/* Frees the regions. */
void
fusion_free(FusionInfo *fi)
{
	free(fi->region);
	fi->region = NULL;
	fi->nregions = 0;
}

/* Whether a and b may fuse: same stream, kernels, no sync op between. */
int
fusion_legal(const Graph *g, NodeId a, NodeId b)
{
	if (a >= g->nodes.n || b >= g->nodes.n)
		return 0;
	if (a > b) {
		NodeId t = a;
		a = b;
		b = t;
	}
	const Node *x = &g->nodes.v[a], *y = &g->nodes.v[b];
	if (!is_kernel(x) || !is_kernel(y) || x->stream != y->stream)
		return 0;
	for (NodeId i = a + 1; i < b; i++)
		if (!(g->nodes.v[i].flags & NF_DEAD) && is_sync(&g->nodes.v[i]))
			return 0;
	return 1;
}

/* 1 when node n is computed by a pointwise kernel (the backend's
 * cg_pointwise). */
int
fusion_pointwise(const Graph *g, const Node *n)
{
	(void)g;
	return n->op < OP__N && op_table[n->op].emit == EM_POINTWISE;
}

/* ------------------------------------------------------------------ groups */

/* 1 when node n may be a group member. */
static int
fusable(const Graph *g, const Node *n)
{
	if (n->flags & NF_DEAD || n->op >= OP__N || !fusion_pointwise(g, n))
		return 0;
	if (op_table[n->op].flags & OPF_INPLACE)
		return 0;
	return n->nres == 1 && !g->vals.v[n->res[0]].type.host;
}

/* 1 when a member of group grp draws random numbers (dropout). */
static int
group_draws(const Graph *g, const FuseGroup *grp)
{
	for (uint32_t k = 0; k < grp->n; k++)
		if (ir_draws(&g->nodes.v[grp->nodes[k]]))
			return 1;
	return 0;
}

/* Nodes that order nothing and compute nothing. */
static int
inert(const Node *n)
{
	return n->flags & NF_DEAD || n->op == OP_DEL || n->op == OP_OFFLOAD;
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
uses_find(const Graph *g, const Sched *s, Uses *u)
{
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
			ValId r = s->root[n->opnd[k].v];
			if (u->group[r] == USE_UNSET)
				u->group[r] = s->group[i];
			else if (u->group[r] != s->group[i])
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
inside_only(const Sched *s, const Uses *u, ValId v, int gi)
{
	const StoreClass *cl = s->cls[v];
	if (cl->kind != ST_TEMP || s->root[v] != v)
		return 0;
	return u->group[v] == USE_UNSET || u->group[v] == gi;
}

/* The vector width for a group: 16 bytes over its widest full-shaped
 * operand or result (broadcast operands are loaded one element at a
 * time), or 1 when the count does not divide. */
static int
vec_width(const Graph *g, const FuseGroup *grp, const Type *shape)
{
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

/* 1 when group grp's kernel (stored values known: s->reg) should launch a
 * thread for each vector rather than at most 4096 blocks that walk the
 * elements.  On the H200 (2026-12-03) the full grid moved memory 4-5% faster
 * for a copy and for ew_chain's mul, add, gelu, mul over f32 (20 bytes an
 * element), while a bf16 gelu (4 bytes an element, an erf each) ran 8%
 * slower than the walk: so every group spreads but one with an OPF_COSTLY
 * op that moves fewer than 12 bytes an element.  Not past 2^29 elements,
 * so that an int index plus the grid's stride cannot overflow (the scalar
 * kernel, the vector kernel's fallback, spreads too). */
static int
spread_grid(const Graph *g, const Sched *s, const FuseGroup *grp, const Type *shape)
{
	int64_t n = type_numel(shape), bytes = 0;
	int costly = 0;
	if (n > ((int64_t)1 << 29))
		return 0;
	for (uint32_t k = 0; k < grp->n; k++) {
		const Node *m = &g->nodes.v[grp->nodes[k]];
		costly |= (op_table[m->op].flags & OPF_COSTLY) != 0;
		for (uint32_t j = 0; j < m->nopnd; j++) {
			if (m->opnd[j].kind != OK_VAL)
				continue;
			ValId v = m->opnd[j].v;
			const Type *t = &g->vals.v[v].type;
			int seen = s->reg[v] || !type_same_shape(t, shape);
			for (uint32_t q = 0; q < k && !seen; q++) {
				const Node *o = &g->nodes.v[grp->nodes[q]];
				seen = o->res[0] == v;
				for (uint32_t r = 0; r < o->nopnd && !seen; r++)
					seen = o->opnd[r].kind == OK_VAL && o->opnd[r].v == v;
			}
			for (uint32_t r = 0; r < j && !seen; r++)
				seen = m->opnd[r].kind == OK_VAL && m->opnd[r].v == v;
			if (!seen)
				bytes += dtype_size((DType)t->dt);
		}
		ValId r = m->res[0];
		if (!s->reg[r] || k == grp->n - 1)
			bytes += dtype_size((DType)g->vals.v[r].type.dt);
	}
	return !costly || bytes >= 12;
}

/* 1 when op reads its operand 0 only through its kernel's input
 * expression (CgInput), so a pointwise producer can be computed there. */
static int
takes_prologue(int op)
{
	return (op_table[op].flags & OPF_PROLOGUE) != 0;
}

/* The node a group can be computed inside of: the one consumer of the
 * group's last value (every other value of the group used only in it),
 * reading it as operand 0 alone, right after the group on its stream.
 * NONE when there is none. */
static NodeId
consumer(const Graph *g, const Sched *s, const Uses *u, const FuseGroup *grp)
{
	NodeId last = grp->nodes[grp->n - 1];
	ValId v = g->nodes.v[last].res[0];
	if (group_draws(g, grp))
		return NONE;
	for (uint32_t k = 0; k + 1 < grp->n; k++)
		if (!s->reg[g->nodes.v[grp->nodes[k]].res[0]])
			return NONE;
	if (s->cls[v]->kind != ST_TEMP || s->root[v] != v)
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
 * that can call an epilogue (codegen_rows.c), or n is a small f32 product
 * that the library's sgk_gemm_small computes with an epilogue
 * (kernel_small_product, codegen_gemm.c). */
static int
takes_epilogue(const Graph *g, const Node *n)
{
	return n->op < OP__N && (((op_table[n->op].flags & OPF_EPILOGUE) && n->nres == 1) ||
	                         (g->sched->clusters && kernel_small_product(g, n)));
}

/* 1 when group grp reads value v as an operand, 0 when not; -1 when it
 * reads another value of v's alias class. */
static int
group_reads(const Graph *g, const Sched *s, const FuseGroup *grp, ValId v)
{
	int reads = 0;
	for (uint32_t k = 0; k < grp->n; k++) {
		const Node *m = &g->nodes.v[grp->nodes[k]];
		for (uint32_t j = 0; j < m->nopnd; j++) {
			if (m->opnd[j].kind != OK_VAL || s->root[m->opnd[j].v] != s->root[v])
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
f32_like(const Graph *g, ValId v, const Type *t)
{
	return v != NONE && g->vals.v[v].type.dt == DT_F32 &&
	       type_same_shape(&g->vals.v[v].type, t);
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
softmax_bwd_match(const Graph *g, const Sched *sd, NodeId p, const FuseGroup *grp,
                  SoftmaxBwd *sb)
{
	const Node *r = &g->nodes.v[p];
	if (r->op != OP_SUM || r->nres != 1 || opv(r, 0) == NONE)
		return 0;
	const Type *x = &g->vals.v[r->opnd[0].v].type, *rt = &g->vals.v[r->res[0]].type;
	const Attr *dims = ir_attr(r, "dims");
	if (x->rank < 1 || x->dt != DT_F32 || !dims || dims->nints != 1 ||
	    shape_norm_dim(dims->ints[0], x->rank) != x->rank - 1 || rt->rank != x->rank ||
	    rt->d[x->rank - 1] != 1 || x->d[x->rank - 1] < 1 || x->d[x->rank - 1] > INT32_MAX)
		return 0;
	ValId s = r->res[0];
	int pro = sd->prologue[p];
	const Node *m[3] = {NULL, NULL, NULL};
	for (uint32_t k = 0; k < grp->n && k < 3; k++)
		m[k] = &g->nodes.v[grp->nodes[k]];
	if (pro < 0 && grp->n == 3) { /* log_softmax */
		const Node *e = m[0], *t = m[1], *d = m[2];
		ValId gv = opv(r, 0);
		if (e->op != OP_EXP || t->op != OP_MUL || d->op != OP_SUB ||
		    other(t, e->res[0]) != s || opv(d, 0) != gv || opv(d, 1) != t->res[0] ||
		    !f32_like(g, opv(e, 0), x) || !f32_like(g, gv, x))
			return 0;
		*sb = (SoftmaxBwd){.g = gv, .y = opv(e, 0), .dx = d->res[0], .log = 1};
	} else if (pro >= 0 && grp->n == 2 && sd->groups.v[pro].n == 1) { /* softmax */
		const Node *gy = &g->nodes.v[sd->groups.v[pro].nodes[0]];
		const Node *u = m[0], *d = m[1];
		if (gy->op != OP_MUL || u->op != OP_SUB || d->op != OP_MUL || opv(u, 1) != s)
			return 0;
		ValId gv = opv(u, 0), yv = other(gy, gv);
		if (yv == NONE || other(d, u->res[0]) != yv || !f32_like(g, gv, x) ||
		    !f32_like(g, yv, x))
			return 0;
		*sb = (SoftmaxBwd){.g = gv, .y = yv, .dx = d->res[0], .log = 0};
	} else {
		return 0;
	}
	for (uint32_t k = 0; k + 1 < grp->n; k++)
		if (!sd->reg[m[k]->res[0]])
			return 0;
	return f32_like(g, sb->dx, x) && !sd->reg[sb->dx];
}


/* ------------------------------------------------------------------ epilogues */

/* The node whose result group grp can be computed from in that node's
 * kernel (an epilogue): the op right before the group on its stream
 * (nothing but del/offload between), whose single result has the group's
 * shape and is read by the group, where fusion_legal agrees.  NONE when
 * there is none.  Also autograd's softmax backward after its sum (gi: the
 * group's index), which one library kernel computes (codegen_rows.c). */
static NodeId
producer(const Graph *g, const Sched *s, const Uses *u, const FuseGroup *grp, int gi)
{
	NodeId first = grp->nodes[0], p = first;
	while (p > 0 && inert(&g->nodes.v[p - 1]))
		p--;
	if (p == 0 || grp->into != NONE || group_draws(g, grp))
		return NONE;
	p--;
	const Node *r = &g->nodes.v[p], *f = &g->nodes.v[first];
	if (r->op >= OP__N || !takes_epilogue(g, r) || s->group[p] >= 0 ||
	    r->stream != f->stream || !fusion_legal(g, p, first))
		return NONE;
	ValId v = r->res[0];
	const Type *t = &g->vals.v[v].type;
	SoftmaxBwd sb;
	if (!t->host && softmax_bwd_match(g, s, p, grp, &sb) && inside_only(s, u, v, gi))
		return p;
	if (t->host || !type_same_shape(t, &g->vals.v[f->res[0]].type) ||
	    type_numel(t) == 0 || type_numel(&g->vals.v[r->opnd[0].v].type) == 0)
		return NONE;
	if (group_reads(g, s, grp, v) != 1)
		return NONE;
	for (uint32_t k = 0; k < grp->n; k++)
		if (!s->reg[g->nodes.v[grp->nodes[k]].res[0]])
			return p; /* the group stores something */
	return NONE;
}

/* Group k's stored value v (its last node's result, every other value in
 * registers) read only by copy_(dst, v) right after the group on its
 * stream, dst an input, param or const of v's shape and dtype that the
 * group reads (if at all) only at full shape: the group's kernel stores
 * v into dst, each element where it read dst's (so `copy_(%rm, add(mul(
 * %m, 0.1), mul(%rm, 0.9)))`, a batch_norm's running mean, is one kernel).
 * v joins dst's alias class, and the copy_ of a class onto itself copies
 * nothing (codegen_host.c). */
static void
store_into_copy(Graph *g, Sched *s, const Uses *u, uint32_t k)
{
	const FuseGroup *grp = &s->groups.v[k];
	if (grp->into != NONE || grp->after != NONE)
		return;
	for (uint32_t j = 0; j + 1 < grp->n; j++)
		if (!s->reg[g->nodes.v[grp->nodes[j]].res[0]])
			return;
	NodeId last = grp->nodes[grp->n - 1];
	ValId v = g->nodes.v[last].res[0];
	if (s->reg[v] || s->root[v] != v || s->cls[v]->kind != ST_TEMP || u->n[v] != 1 ||
	    u->first_k[v] != 1)
		return;
	NodeId c = u->first[v];
	const Node *cn = &g->nodes.v[c];
	if (cn->op != OP_COPY_ || cn->nopnd != 2 || cn->opnd[0].kind != OK_VAL ||
	    cn->stream != g->nodes.v[last].stream || !fusion_legal(g, last, c))
		return;
	for (NodeId i = last + 1; i < c; i++)
		if (!inert(&g->nodes.v[i]))
			return;
	ValId dst = cn->opnd[0].v, rd = s->root[dst];
	const Type *t = &g->vals.v[v].type, *dt = &g->vals.v[dst].type;
	StoreClass *cl = s->cls[rd];
	if ((cl->kind != ST_PARAM && cl->kind != ST_INPUT) || dt->host || dt->dt != t->dt ||
	    !type_same_shape(dt, t) || group_reads(g, s, grp, dst) < 0)
		return;
	for (uint32_t j = 0; j < grp->n; j++) {
		const Node *m = &g->nodes.v[grp->nodes[j]];
		for (uint32_t q = 0; q < m->nopnd; q++)
			if (m->opnd[q].kind == OK_VAL && m->opnd[q].v == dst &&
			    !type_same_shape(&g->vals.v[m->opnd[q].v].type, &g->vals.v[m->res[0]].type))
				return; /* broadcast: reads other elements than it writes */
	}
	StoreClass *old = s->cls[v];
	cl->streams |= old->streams;
	for (uint32_t t2 = 0; t2 < g->streams.n; t2++)
		if (old->last_on[t2] != NONE &&
		    (cl->last_on[t2] == NONE || cl->last_on[t2] < old->last_on[t2]))
			cl->last_on[t2] = old->last_on[t2];
	if (cl->release == NONE || (old->release != NONE && cl->release < old->release))
		cl->release = old->release;
	s->root[v] = rd;
	s->cls[v] = cl;
}

/* At -O2: the groups of fusable pointwise nodes (in program order of
 * their first node), the values they keep in registers, their vector
 * widths, prologues and epilogues. */
static void
fusion_group(Graph *g, Sched *s)
{
	/* Groups are disjoint runs of nodes: one pool holds them all. */
	NodeId *pool = arena_alloc(s->a, ((size_t)g->nodes.n + 1) * sizeof *pool);
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (s->group[i] >= 0 || !fusable(g, n))
			continue;
		int gi = (int)s->groups.n;
		FuseGroup grp = {.nodes = pool, .vec = 1, .into = NONE, .after = NONE};
		const Type *shape = &g->vals.v[n->res[0]].type;
		grp.nodes[grp.n++] = i;
		s->group[i] = gi;
		for (NodeId j = i + 1; j < g->nodes.n && grp.n < SCHED_GROUP_MAX; j++) {
			Node *m = &g->nodes.v[j];
			if (inert(m))
				continue;
			if (!fusable(g, m) || !fusion_legal(g, i, j) || m->stream != n->stream ||
			    !type_same_shape(&g->vals.v[m->res[0]].type, shape))
				break;
			grp.nodes[grp.n++] = j;
			s->group[j] = gi;
		}
		pool += grp.n;
		vec_push(&s->groups, grp);
	}
	Uses u;
	uses_find(g, s, &u);
	/* Per group: which values stay in registers, whether it is computed
	 * inside its consumer, its vector width. */
	for (uint32_t k = 0; k < s->groups.n; k++) {
		FuseGroup *grp = &s->groups.v[k];
		for (uint32_t j = 0; j < grp->n; j++) {
			ValId v = g->nodes.v[grp->nodes[j]].res[0];
			s->reg[v] = (uint8_t)inside_only(s, &u, v, (int)k);
		}
		grp->into = consumer(g, s, &u, grp);
		if (grp->into != NONE) {
			s->reg[g->nodes.v[grp->nodes[grp->n - 1]].res[0]] = 1;
			s->prologue[grp->into] = (int)k;
		}
		const Node *n0 = &g->nodes.v[grp->nodes[0]];
		grp->vec = vec_width(g, grp, &g->vals.v[n0->res[0]].type);
		grp->spread = grp->into == NONE &&
		              spread_grid(g, s, grp, &g->vals.v[n0->res[0]].type);
	}
	/* Consumers fused after a reduction or row op (their values known). */
	for (uint32_t k = 0; k < s->groups.n; k++) {
		FuseGroup *grp = &s->groups.v[k];
		grp->after = producer(g, s, &u, grp, (int)k);
		if (grp->after == NONE)
			continue;
		grp->spread = 0; /* (computed in the row op's kernel) */
		if (s->epilogue[grp->after] < 0)
			s->epilogue[grp->after] = (int)k;
		ValId r = g->nodes.v[grp->after].res[0];
		s->reg[r] = (uint8_t)inside_only(s, &u, r, (int)k);
	}
	for (uint32_t k = 0; k < s->groups.n; k++)
		store_into_copy(g, s, &u, k);
	uses_free(&u);
	/* Autograd's softmax backwards (a sum with its groups), one library
	 * kernel each (codegen_rows.c). */
	for (NodeId i = 0; i < g->nodes.n; i++) {
		int e = s->epilogue[i];
		SoftmaxBwd sb;
		if (e >= 0 && s->reg[g->nodes.v[i].res[0]] &&
		    softmax_bwd_match(g, s, i, &s->groups.v[e], &sb)) {
			s->softmax_bwd[i] = arena_alloc(s->a, sizeof sb);
			*s->softmax_bwd[i] = sb;
		}
	}
}

/* ------------------------------------------------------------------ the pass */

/* The pass finds the storage classes (schedule.c), checks that regions
 * and fusion_legal agree on neighbours of a stream, and at -O2 groups the
 * pointwise nodes: the records on g->sched (the graph itself is left as
 * it was). */
int
fusion_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)d;
	sched_free(g); /* (decided again from the graph as it is now) */
	Sched *s = sched_get(g, po->opt_level);
	s->clusters = !po->sm || po->sm >= 90;
	if (po->opt_level < 2)
		return 1; /* -O0: one kernel per op */
	FusionInfo fi;
	fusion_analyse(g, &fi);
	NodeId *prev = xmalloc((g->streams.n + 1) * sizeof *prev);
	for (uint32_t t = 0; t < g->streams.n; t++)
		prev[t] = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		if (fi.region[i] == NONE)
			continue;
		uint32_t t = g->nodes.v[i].stream;
		if (prev[t] != NONE &&
		    (fi.region[prev[t]] == fi.region[i]) != fusion_legal(g, prev[t], i))
			ICE("fusion regions disagree with fusion_legal at node %u", i);
		prev[t] = i;
	}
	free(prev);
	fusion_free(&fi);
	fusion_group(g, s);
	return 1;
}
