/*
 * build.c - the IR builder the passes share: which sync a node performs,
 * storage classes, fresh events and values, new nodes, and inserting
 * nodes into a graph's program order (one rebuild for any number of
 * insertions).  Moved out of the race checker, whose walks use the first
 * two as every pass does.
 */
#include <stdlib.h>
#include <string.h>

#include "sgc.h"

/* ------------------------------------------------------------------ syncs */

/* The sync op called name (control_deps' sync=), else -1: the names of
 * the four compared directly, as this runs for every node of every walk
 * (control_deps made by the compiler hold op_name's own string). */
static int
sync_op(const char *name)
{
	static const int ops[] = {OP_RECORD_EVENT, OP_WAIT_EVENT, OP_WAIT_STREAM,
	                          OP_SYNCHRONIZE};
	for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
		if (name == op_name(ops[i]) || strcmp(name, op_name(ops[i])) == 0)
			return ops[i];
	return -1;
}

/* ir_attr(n, name) for the attribute first in n's op spec (sync_dealloc's
 * event=, control_deps' sync=), read by its index, without comparing names. */
static inline const Attr *
ir_attr0(const Node *n, const char *name)
{
	if (n->nattr > 0)
		return n->attr[0].set ? &n->attr[0] : NULL;
	return ir_attr(n, name);
}

/* Decodes the sync a node performs (see sgc.h). */
int
ir_sync_of(const Node *n, uint32_t *target)
{
	*target = NONE;
	if (n->flags & NF_DEAD)
		return -1;
	switch (n->op) {
	case OP_RECORD_EVENT:
	case OP_WAIT_EVENT:
	case OP_WAIT_STREAM:
		*target = n->opnd[0].v;
		return n->op;
	case OP_SYNCHRONIZE:
		return n->op;
	case OP_SYNC_DEALLOC: {
		const Attr *a = ir_attr0(n, "event");
		if (!a)
			return -1;
		*target = (uint32_t)a->i;
		return OP_WAIT_EVENT;
	}
	case OP_CONTROL_DEPS: {
		const Attr *a = ir_attr0(n, "sync");
		int op = a && a->s ? sync_op(a->s) : -1;
		const Attr *t = NULL;
		if (op == OP_RECORD_EVENT || op == OP_WAIT_EVENT)
			t = ir_attr(n, "event");
		else if (op == OP_WAIT_STREAM)
			t = ir_attr(n, "other");
		else if (op != OP_SYNCHRONIZE)
			return -1;
		if (op != OP_SYNCHRONIZE && !t)
			return -1;
		if (t)
			*target = (uint32_t)t->i;
		return op;
	}
	}
	return -1;
}

/* The ordering edges (see sgc.h). */
void
ir_order_edges(const Graph *g, IrOrderEdge edge, void *ctx)
{
	uint32_t ns = g->streams.n, ne = g->events.n;
	NodeId *last = xmalloc((ns + 1) * sizeof *last); /* per stream */
	NodeId *rec = xmalloc((ne + 1) * sizeof *rec);   /* per event */
	NodeId barrier = NONE;
	for (uint32_t s = 0; s < ns; s++)
		last[s] = NONE;
	for (uint32_t e = 0; e < ne; e++)
		rec[e] = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		uint32_t s = n->stream, t;
		int op = ir_sync_of(n, &t);
		if (last[s] != NONE)
			edge(ctx, last[s], i, IR_AFTER_STREAM, s);
		if (barrier != NONE)
			edge(ctx, barrier, i, IR_AFTER_BARRIER, NONE);
		if (op == OP_WAIT_EVENT && t < ne && rec[t] != NONE)
			edge(ctx, rec[t], i, IR_AFTER_EVENT, t);
		else if (op == OP_WAIT_STREAM && t < ns && last[t] != NONE)
			edge(ctx, last[t], i, IR_AFTER_WAIT_STREAM, t);
		else if (op == OP_SYNCHRONIZE) {
			for (uint32_t k = 0; k < ns; k++)
				if (last[k] != NONE)
					edge(ctx, last[k], i, IR_AFTER_SYNCHRONIZE, k);
			barrier = i;
		} else if (op == OP_RECORD_EVENT && t < ne)
			rec[t] = i;
		last[s] = i;
	}
	free(last);
	free(rec);
}

/* ------------------------------------------------------------------ storage */

/* Storage classes: each control_deps result joins its operand's class. */
void
ir_alias_roots(const Graph *g, ValId *root)
{
	ir_view_roots(g, NULL, root);
}

void
ir_view_roots(const Graph *g, const ValId *vpar, ValId *root)
{
	for (ValId v = 0; v < g->vals.n; v++)
		root[v] = v;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_CONTROL_DEPS) {
			uint32_t j = 0;
			for (uint32_t k = 0; k < n->nopnd && j < n->nres; k++)
				if (n->opnd[k].kind == OK_VAL)
					root[n->res[j++]] = root[n->opnd[k].v];
		} else if (vpar) {
			for (uint32_t j = 0; j < n->nres; j++)
				if (vpar[n->res[j]] != NONE)
					root[n->res[j]] = root[vpar[n->res[j]]];
		}
	}
}

/* Work the compiler made (or derived): rule 3 applies to it. */
int
ir_compiler_made(const Node *n)
{
	return (n->flags & NF_BACKWARD) || !(n->flags & NF_USER);
}

int
ir_backward_block(const Graph *g, NodeId *bw, NodeId *end)
{
	*bw = *end = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_BACKWARD && (n->flags & NF_BACKWARD))
			*bw = i;
		else if (n->op == OP_BACKWARD_END && *bw != NONE && *end == NONE)
			*end = i;
	}
	if (*end == NONE)
		*bw = NONE;
	return *bw != NONE;
}

int
ir_block_derived(const Graph *g, NodeId bw, NodeId end)
{
	for (NodeId i = bw + 1; i < end; i++)
		if (!(g->nodes.v[i].flags & (NF_DEAD | NF_USER)))
			return 1;
	return 0;
}

/* ------------------------------------------------------------------ building */

/* A fresh local event; the printer declares it with the others. */
uint32_t
ir_event_new(Graph *g, const char *base)
{
	Arena *a = g->mod->arena;
	size_t bl = strlen(base);
	uint32_t *memo = map_get(&g->freshev, base, bl);
	for (uint32_t k = memo ? *memo : 0;; k++) {
		char *name = arena_numbered(a, base, bl, 0, k);
		if (map_get(&g->eventmap, name, strlen(name)))
			continue;
		if (memo)
			*memo = k + 1;
		else
			map_put(&g->freshev, arena_strdup(a, base), bl, k + 1);
		Event e = {.name = name};
		map_put(&g->eventmap, name, strlen(name), g->events.n);
		vec_push(&g->events, e);
		return g->events.n - 1;
	}
}

/* A new stream called base, or base_1, base_2, ... when that name is
 * taken (a stream a pass adds: grad_sync's, the offload copies'). */
uint32_t
ir_stream_new(Graph *g, const char *base)
{
	Arena *a = g->mod->arena;
	size_t bl = strlen(base);
	char *name = arena_strdup(a, base);
	for (uint32_t i = 1; map_get(&g->streammap, name, strlen(name)); i++)
		name = arena_numbered(a, base, bl, '_', i);
	Stream s = {.name = name};
	map_put(&g->streammap, s.name, strlen(s.name), g->streams.n);
	vec_push(&g->streams, s);
	return g->streams.n - 1;
}

/* A fresh value name for compiler-made values (see sgc.h). */
ValId
ir_value_derived(Graph *g, const char *base, int in_block, Loc loc)
{
	size_t n = strlen(base);
	/* Strip ".N" suffixes: h.2 -> h, so that versions read h.1, h.2... */
	for (;;) {
		size_t j = n;
		while (j > 0 && base[j - 1] >= '0' && base[j - 1] <= '9')
			j--;
		if (j == n || j < 2 || base[j - 1] != '.')
			break;
		n = j - 1;
	}
	char *b = arena_strndup(g->mod->arena, base, n);
	if (!in_block && (strncmp(b, "grad.", 5) == 0 || strncmp(b, "opt.", 4) == 0))
		*strchr(b, '.') = '_';
	return ir_value_fresh(g, b, loc);
}

/* A node with arena arrays and op's attributes unset. */
Node
ir_node_make(Graph *g, int op, uint32_t nopnd, uint32_t nres, uint32_t stream,
           uint32_t flags, Loc loc)
{
	Arena *a = g->mod->arena;
	Node n = {.op = (uint16_t)op, .stream = stream, .flags = flags, .loc = loc,
	          .nopnd = (uint16_t)nopnd, .nres = (uint16_t)nres};
	n.opnd = arena_alloc(a, (nopnd + 1) * sizeof *n.opnd);
	n.res = arena_alloc(a, (nres + 1) * sizeof *n.res);
	if (op < OP__N) {
		const OpInfo *oi = &op_table[op];
		n.nattr = (uint16_t)oi->nattr;
		n.attr = arena_alloc(a, (oi->nattr + 1) * sizeof *n.attr);
		for (uint32_t i = 0; i < oi->nattr; i++)
			n.attr[i].type = oi->attr[i].type;
	}
	return n;
}

/* A bare sync op on stream s. */
Node
ir_sync_node(Graph *g, int op, uint32_t target, uint32_t s, Loc loc)
{
	Node n = ir_node_make(g, op, op == OP_SYNCHRONIZE ? 0 : 1, 0, s, 0, loc);
	if (op != OP_SYNCHRONIZE) {
		n.opnd[0].kind = op == OP_WAIT_STREAM ? OK_STREAM : OK_EVENT;
		n.opnd[0].v = target;
	}
	return n;
}

/* The order of insertions: slot, then rank. */
static int
ins_less(const NodeIns *a, const NodeIns *b)
{
	return a->slot != b->slot ? a->slot < b->slot : a->rank < b->rank;
}

/* Stable sort by (slot, rank), equal keys in insertion order: a merge
 * sort, as the lists can be long. */
static void
sort_ins(NodeIns *v, NodeIns *tmp, uint32_t n)
{
	if (n < 2)
		return;
	uint32_t h = n / 2, i = 0, j = h, k = 0;
	sort_ins(v, tmp, h);
	sort_ins(v + h, tmp, n - h);
	while (i < h && j < n)
		tmp[k++] = ins_less(&v[j], &v[i]) ? v[j++] : v[i++];
	while (i < h)
		tmp[k++] = v[i++];
	while (j < n)
		tmp[k++] = v[j++];
	memcpy(v, tmp, n * sizeof *v);
}

/* An inserted node takes NF_BACKWARD from where it stands. */
static Node
placed(const Node *n, int in_block)
{
	Node m = *n;
	if (in_block)
		m.flags |= NF_BACKWARD;
	else
		m.flags &= ~(uint32_t)NF_BACKWARD;
	return m;
}

/* The insertions' indexes in order of (slot, rank), equal keys in
 * insertion order.  Lists already in order (the common case) are left as
 * they are; others are ordered by 8-byte keys rather than moving the
 * nodes, unless a rank or the length does not fit a key (then the nodes
 * are sorted in place). */
static uint32_t *
ins_order(NodeIns *v, uint32_t n)
{
	uint32_t *ord = xmalloc((n + 1) * sizeof *ord), sorted = 1, small = n < (1u << 24);
	for (uint32_t k = 0; k < n; k++) {
		ord[k] = k;
		sorted &= k == 0 || !ins_less(&v[k], &v[k - 1]);
		small &= v[k].rank < 256;
	}
	if (sorted)
		return ord;
	if (!small) {
		NodeIns *tmp = xmalloc((n + 1) * sizeof *tmp);
		sort_ins(v, tmp, n);
		free(tmp);
		return ord;
	}
	uint64_t *key = xmalloc((n + 1) * sizeof *key);
	for (uint32_t k = 0; k < n; k++)
		key[k] = (uint64_t)v[k].slot << 32 | (uint64_t)v[k].rank << 24 | k;
	sort_u64(key, n); /* (slot << 32 | rank << 24 | index) */
	for (uint32_t k = 0; k < n; k++)
		ord[k] = (uint32_t)(key[k] & 0xffffff);
	free(key);
	return ord;
}

/* Gives each insertion (in order ord) NF_BACKWARD from where it stands;
 * returns whether the graph has a dead node. */
static int
mark_placed(const Graph *g, NodeIns *v, const uint32_t *ord, uint32_t nins)
{
	uint32_t k = 0, nn = g->nodes.n;
	int in_block = 0, dead = 0;
	for (uint32_t slot = 0; slot <= nn; slot++) {
		for (; k < nins && v[ord[k]].slot == slot; k++)
			v[ord[k]].n = placed(&v[ord[k]].n, in_block);
		if (slot == nn)
			break;
		const Node *n = &g->nodes.v[slot];
		if (n->op == OP_BACKWARD && (n->flags & NF_BACKWARD))
			in_block = !(n->flags & NF_DEAD);
		else if (n->op == OP_BACKWARD_END && !(n->flags & NF_DEAD))
			in_block = 0;
		dead |= (n->flags & NF_DEAD) != 0;
	}
	return dead;
}

/* A new node list: the live nodes with the insertions (in order ord). */
static void
rebuild(Graph *g, const NodeIns *v, const uint32_t *ord, uint32_t nins)
{
	VEC(Node) out = {0};
	vec_grow_((void **)&out.v, &out.cap, g->nodes.n + nins + 1, sizeof *out.v);
	uint32_t k = 0, nn = g->nodes.n;
	for (uint32_t slot = 0; slot <= nn; slot++) {
		for (; k < nins && v[ord[k]].slot == slot; k++)
			vec_push(&out, v[ord[k]].n);
		if (slot < nn && !(g->nodes.v[slot].flags & NF_DEAD))
			vec_push(&out, g->nodes.v[slot]);
		else if (slot < nn) /* dropped: its results have no definition
		                       (unless a live node makes them, set below) */
			for (uint32_t j = 0; j < g->nodes.v[slot].nres; j++)
				g->vals.v[g->nodes.v[slot].res[j]].def = NONE;
	}
	vec_free(&g->nodes);
	g->nodes.v = out.v;
	g->nodes.n = out.n;
	g->nodes.cap = out.cap;
}

/* The insertions (in order ord) spliced into a node list with no dead
 * node, in place: from the end, each node moving up by the insertions at
 * or before it, which never overwrites one not yet moved. */
static void
splice(Graph *g, const NodeIns *v, const uint32_t *ord, uint32_t nins)
{
	uint32_t nn = g->nodes.n, w = nn + nins, k = nins;
	if (!nins)
		return;
	if (w + 1 > g->nodes.cap)
		vec_grow_((void **)&g->nodes.v, &g->nodes.cap, w + 1, sizeof *g->nodes.v);
	Node *out = g->nodes.v;
	for (uint32_t slot = nn + 1; k > 0 && slot-- > 0;) {
		if (slot < nn)
			out[--w] = out[slot];
		for (; k > 0 && v[ord[k - 1]].slot == slot; k--)
			out[--w] = v[ord[k - 1]].n;
	}
	g->nodes.n = nn + nins;
}

/* Rebuilds the node list with the insertions (see sgc.h): in place when
 * no node is dead.  Every result's definition is fixed, not only those of
 * the moved nodes: passes also change results in place and leave their
 * definitions to this. */
void
ir_insert(Graph *g, NodeInsVec *ins)
{
	uint32_t *ord = ins_order(ins->v, ins->n);
	if (ins->n && ins->v[ord[ins->n - 1]].slot > g->nodes.n)
		ICE("node inserted after the end of the graph");
	if (mark_placed(g, ins->v, ord, ins->n))
		rebuild(g, ins->v, ord, ins->n);
	else
		splice(g, ins->v, ord, ins->n);
	free(ord);
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		for (uint32_t j = 0; j < n->nres; j++) {
			g->vals.v[n->res[j]].def = i;
			g->vals.v[n->res[j]].resno = (uint16_t)j;
		}
	}
	ins->n = 0;
}

uint32_t *
ir_use_counts(const Graph *g)
{
	uint32_t *uses = calloc(g->vals.n + 1, sizeof *uses);
	if (!uses)
		out_of_memory(0);
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		for (uint32_t j = 0; j < n->nopnd; j++)
			if (n->opnd[j].kind == OK_VAL)
				uses[n->opnd[j].v]++;
	}
	for (uint32_t i = 0; i < g->rets.n; i++)
		uses[g->rets.v[i]]++;
	return uses;
}

Attr *
ir_attr_set(Node *n, const char *name)
{
	int k = op_attr_index(n->op, name);
	if (k < 0)
		ICE("op '%s' has no attribute '%s'", op_name(n->op), name);
	n->attr[k].set = 1;
	return &n->attr[k];
}

Node *
ir_sole_def(Graph *g, const uint32_t *uses, const Opnd *o, int op, uint32_t s)
{
	if (o->kind != OK_VAL || (uses && uses[o->v] != 1))
		return NULL;
	const Value *v = &g->vals.v[o->v];
	if (v->kind != VK_NODE)
		return NULL;
	Node *n = &g->nodes.v[v->def];
	if (n->op != op || (n->flags & (NF_DEAD | NF_BACKWARD)) || n->stream != s)
		return NULL;
	return n;
}

int
ir_literal(const Opnd *o, double *x)
{
	if (o->kind == OK_FLOAT)
		*x = o->f;
	else if (o->kind == OK_INT)
		*x = (double)o->i;
	else
		return 0;
	return 1;
}

void
ir_node_become(Graph *g, Node *n, int op, const Opnd *ops, uint32_t nops)
{
	Arena *ar = g->mod->arena;
	const OpInfo *oi = &op_table[op];
	Opnd *o = arena_alloc(ar, ((size_t)nops + 1) * sizeof *o);
	memcpy(o, ops, nops * sizeof *o);
	Attr *a = arena_alloc(ar, ((size_t)oi->nattr + 1) * sizeof *a);
	for (uint32_t j = 0; j < oi->nattr; j++)
		attr_default(ar, &oi->attr[j], &a[j]);
	n->op = (uint16_t)op;
	n->opnd = o;
	n->nopnd = (uint16_t)nops;
	n->attr = a;
	n->nattr = (uint16_t)oi->nattr;
}
