/*
 * ctrldeps.c - pass `control_deps` (rule 5): no work moves across a sync.
 *
 * A record_event captures the work issued before it on its stream; a wait
 * makes the work after it on its stream wait.  A later pass that moved a
 * consumer above a wait, or a producer below a record, would break the
 * program silently.  So, as PyTorch's AOT autograd does, each sync op
 * whose boundary values cross gets explicit data dependencies: it becomes
 *
 *     %a1, %b1 = control_deps(%a, %b, sync=wait_event, event=E)
 *
 * which performs the sync and passes %a, %b through; the later uses that
 * the sync orders read %a1, so that ordinary data dependencies keep the
 * order: producer -> record -> wait -> consumer.  A value made (by the node
 * that made its storage: p on stream T) before a sync X on stream S
 * crosses it when:
 *
 *   wait_event/stream T != S; X orders p before S (it was not ordered just
 *                     before X); it is used after X on S
 *   record_event      T = S; a later wait_event on another stream U, for
 *                     this very record, orders p before U as above
 *   synchronize       it is used after X on a stream U != T that was not
 *                     yet ordered after p
 *
 * Names are kept per stream: only the streams X orders (U above) read the
 * aliases afterwards; the others keep their names and depend on no sync
 * they do not need.  For this test sync_dealloc counts as no sync: only
 * the program's syncs carry dependencies.  A sync nothing crosses stays
 * bare.  Inputs, params and consts are never moved and pass through
 * nothing; returned values are not renamed (they are the output names),
 * nor is what an in-place op writes (a write-back's destination is the
 * caller's tensor or the output).
 *
 * ctrldeps_check is the verifier's half: after this pass a bare sync that
 * values cross means that some later pass moved work across it.
 *
 * --test-drop-sync=N (tests only) drops the N-th compiler-made sync here,
 * before the wrapping, so that the interpreter's --interleave mode can be
 * shown to catch the race.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef VEC(ValId) ValVec;

typedef struct {
	Graph *g;
	Hb h;             /* control_deps performs the sync it replaces, so the
	                     clocks hold throughout */
	uint32_t ns, nv;  /* streams; values the tables hold */
	ValVec root;      /* per value: its storage class */
	ValVec cur;       /* per value and stream: the name later uses on that
	                     stream read (cur.v[v * ns + s]) */
	ValVec cross;     /* the names (as written) of the values crossing the
	                     sync at hand, in order of first use after it */
	VEC(uint32_t) mark;
	uint32_t stamp;
	NodeId *laston;   /* per stream: its last node before the one at hand */
	uint32_t *son;    /* nodes by stream, in order (soff[s]..soff[s+1]) */
	uint32_t *soff;
	uint64_t *use;    /* (node << 16 | operand) of the accesses to each
	                     storage class, in order (uoff[r]..uoff[r+1]) */
	uint32_t *uoff;
	VEC(uint64_t) hits; /* (node << 16 | operand) of each crossing root */
	uint32_t *evn;    /* records and waits of each event (sync_dealloc not
	                     counted), in order (evoff[e]..evoff[e+1]) */
	uint32_t *evoff;
} Ctx;

/* The name later uses of v on stream s read now. */
static ValId
resolve(Ctx *C, ValId v, uint32_t s)
{
	while (C->cur.v[(size_t)v * C->ns + s] != v)
		v = C->cur.v[(size_t)v * C->ns + s];
	return v;
}

/* A sync op not yet wrapped in control_deps. */
static int
bare_sync(const Node *n)
{
	if (n->flags & NF_DEAD)
		return 0;
	return n->op == OP_RECORD_EVENT || n->op == OP_WAIT_EVENT ||
	       n->op == OP_WAIT_STREAM || n->op == OP_SYNCHRONIZE;
}

/* Stream u's clock just before sync node i. */
static const int32_t *
clock_before(Ctx *C, uint32_t u, NodeId i)
{
	if (u == C->g->nodes.v[i].stream)
		return hb_before(&C->h, i);
	NodeId l = C->laston[u];
	return l == NONE ? C->h.init + (size_t)u * C->h.ns
	                 : C->h.after + (size_t)l * C->h.ns;
}

/* The node that made v's storage when it is a node before i, else NONE. */
static NodeId
producer(Ctx *C, NodeId i, ValId v)
{
	const Value *val = &C->g->vals.v[C->root.v[v]];
	return val->kind != VK_NODE || val->def >= i ? NONE : val->def;
}

/* Whether wait node w (on stream u) orders p before u for the first time. */
static int
wait_orders(Ctx *C, NodeId w, NodeId p)
{
	uint32_t t = C->g->nodes.v[p].stream, u = C->g->nodes.v[w].stream;
	return t != u && !HB_DONE(hb_before(&C->h, w), t, p + 1) &&
	       HB_DONE(C->h.after + (size_t)w * C->h.ns, t, p + 1);
}

/* The node after record node x that waits for x on another stream, from
 * node j on (NONE when none: another record of the event ends the search;
 * sync_dealloc does not count). */
static NodeId
next_waiter(Ctx *C, NodeId x, NodeId j)
{
	Graph *g = C->g;
	uint32_t e, t;
	ir_sync_of(&g->nodes.v[x], &e);
	if (e >= g->events.n)
		return NONE;
	/* The event's own syncs only: the first at or after j, by bisection. */
	uint32_t lo = C->evoff[e], hi = C->evoff[e + 1];
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (C->evn[mid] < j)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (uint32_t k = lo; k < C->evoff[e + 1]; k++) {
		const Node *n = &g->nodes.v[C->evn[k]];
		int op = ir_sync_of(n, &t);
		if (op == OP_RECORD_EVENT && t == e)
			return NONE;
		if (op == OP_WAIT_EVENT && t == e && n->stream != g->nodes.v[x].stream)
			return C->evn[k];
	}
	return NONE;
}

/* Whether sync node i orders stream u after p for the first time (see the
 * table at the top; for a record, through a wait for it on u). */
static int
orders(Ctx *C, NodeId i, NodeId p, uint32_t u)
{
	Graph *g = C->g;
	uint32_t t = g->nodes.v[p].stream, s = g->nodes.v[i].stream;
	switch (g->nodes.v[i].op) {
	case OP_RECORD_EVENT:
		if (t != s)
			return 0;
		for (NodeId w = next_waiter(C, i, i + 1); w != NONE;
		     w = next_waiter(C, i, w + 1))
			if (g->nodes.v[w].stream == u && wait_orders(C, w, p))
				return 1;
		return 0;
	case OP_WAIT_EVENT:
	case OP_WAIT_STREAM:
		return u == s && wait_orders(C, i, p);
	default:
		return u != t && !HB_DONE(clock_before(C, u, i), t, p + 1);
	}
}

/* Whether the use of w (as written) at node j on stream u crosses sync
 * node i.  The names involved must exist before i (an alias the user made
 * after i carries its own dependency). */
static int
crosses(Ctx *C, NodeId i, NodeId j, ValId w, uint32_t u)
{
	Graph *g = C->g;
	NodeId p = producer(C, i, w);
	if (p == NONE || g->vals.v[resolve(C, w, u)].def >= i ||
	    g->vals.v[resolve(C, w, g->nodes.v[i].stream)].def >= i)
		return 0;
	if (g->nodes.v[i].op != OP_RECORD_EVENT)
		return orders(C, i, p, u);
	/* A record: the use must come after a wait for it that orders p. */
	for (NodeId x = next_waiter(C, i, i + 1); x != NONE && x < j;
	     x = next_waiter(C, i, x + 1))
		if (g->nodes.v[x].stream == u && wait_orders(C, x, p))
			return 1;
	return 0;
}

/* The first index in the sorted list a[0..n) (or b's, by node) whose node
 * is >= x. */
static uint32_t
lower(const uint32_t *a, const uint64_t *b, uint32_t n, uint32_t x)
{
	uint32_t lo = 0, hi = n;
	while (lo < hi) {
		uint32_t m = lo + (hi - lo) / 2;
		if ((a ? a[m] : b[m] >> 16) < x)
			lo = m + 1;
		else
			hi = m;
	}
	return lo;
}

/* Root r's first use after sync i that crosses it, as a hit. */
static void
first_use(Ctx *C, NodeId i, ValId r)
{
	Graph *g = C->g;
	uint64_t *u = C->use + C->uoff[r];
	uint32_t n = C->uoff[r + 1] - C->uoff[r];
	for (uint32_t x = lower(NULL, u, n, i + 1); x < n; x++) {
		NodeId j = (NodeId)(u[x] >> 16);
		uint32_t k = u[x] & 0xffff;
		const Node *m = &g->nodes.v[j];
		if ((m->flags & NF_DEAD) || ir_access(m, k) == RACC_NONE)
			continue;
		if (crosses(C, i, j, m->opnd[k].v, m->stream)) {
			vec_push(&C->hits, u[x]);
			return;
		}
	}
}

/* The storage classes made by the nodes on stream t in [lo, hi) before
 * sync i: the candidates, each once. */
static void
candidates(Ctx *C, NodeId i, uint32_t t, int32_t lo, int32_t hi)
{
	Graph *g = C->g;
	if (lo < 0)
		lo = 0;
	if (hi > (int32_t)i)
		hi = (int32_t)i;
	uint32_t *a = C->son + C->soff[t], n = C->soff[t + 1] - C->soff[t];
	for (uint32_t x = lower(a, NULL, n, (uint32_t)lo); x < n && (int32_t)a[x] < hi; x++) {
		const Node *p = &g->nodes.v[a[x]];
		for (uint32_t j = 0; j < p->nres; j++) {
			ValId r = p->res[j];
			if (r >= C->nv || C->root.v[r] != r || C->mark.v[r] == C->stamp ||
			    producer(C, i, r) != a[x])
				continue;
			C->mark.v[r] = C->stamp;
			first_use(C, i, r);
		}
	}
}

/* The values crossing sync node i, each once (by storage), in order of
 * first use after it.  Only a value made in the range of positions that
 * the sync newly orders can cross it (the table at the top), so only
 * those are looked at; each then from its first use after i on. */
static void
crossing(Ctx *C, NodeId i)
{
	Graph *g = C->g;
	const Node *x = &g->nodes.v[i];
	uint32_t s = x->stream, ns = C->ns;
	++C->stamp;
	C->cross.n = 0;
	C->hits.n = 0;
	if (x->op == OP_WAIT_EVENT || x->op == OP_WAIT_STREAM) {
		const int32_t *b = hb_before(&C->h, i), *a = C->h.after + (size_t)i * ns;
		for (uint32_t t = 0; t < ns; t++)
			if (t != s)
				candidates(C, i, t, b[t], a[t]);
	} else if (x->op == OP_RECORD_EVENT) {
		for (NodeId w = next_waiter(C, i, i + 1); w != NONE;
		     w = next_waiter(C, i, w + 1))
			candidates(C, i, s, hb_before(&C->h, w)[s],
			           C->h.after[(size_t)w * ns + s]);
	} else {
		for (uint32_t t = 0; t < ns; t++) {
			int32_t lo = INT32_MAX;
			for (uint32_t u = 0; u < ns; u++)
				if (u != t && clock_before(C, u, i)[t] < lo)
					lo = clock_before(C, u, i)[t];
			if (lo != INT32_MAX)
				candidates(C, i, t, lo, (int32_t)i);
		}
	}
	sort_u64(C->hits.v, C->hits.n); /* by (node, operand) */
	for (uint32_t h = 0; h < C->hits.n; h++) {
		const Node *m = &g->nodes.v[C->hits.v[h] >> 16];
		vec_push(&C->cross, m->opnd[C->hits.v[h] & 0xffff].v);
	}
}

/* The per-stream node lists and the per-class use lists. */
static void
index_uses(Ctx *C)
{
	Graph *g = C->g;
	uint32_t nn = g->nodes.n, ns = C->ns, nv = C->nv;
	C->soff = calloc(ns + 2, sizeof *C->soff);
	C->uoff = calloc(nv + 2, sizeof *C->uoff);
	C->son = xmalloc((nn + 1) * sizeof *C->son);
	if (!C->soff || !C->uoff)
		out_of_memory(0);
	uint32_t nu = 0;
	for (NodeId i = 0; i < nn; i++) {
		const Node *n = &g->nodes.v[i];
		C->soff[n->stream + 2]++;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (ir_access(n, k) != RACC_NONE && n->opnd[k].v < nv) {
				C->uoff[C->root.v[n->opnd[k].v] + 2]++;
				nu++;
			}
	}
	for (uint32_t s = 0; s < ns; s++)
		C->soff[s + 2] += C->soff[s + 1];
	for (uint32_t r = 0; r < nv; r++)
		C->uoff[r + 2] += C->uoff[r + 1];
	C->use = xmalloc((nu + 1) * sizeof *C->use);
	for (NodeId i = 0; i < nn; i++) {
		const Node *n = &g->nodes.v[i];
		C->son[C->soff[n->stream + 1]++] = i;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (ir_access(n, k) != RACC_NONE && n->opnd[k].v < nv)
				C->use[C->uoff[C->root.v[n->opnd[k].v] + 1]++] = (uint64_t)i << 16 | k;
	}
}

/* The records and waits of each event, in program order.  The pass turns
 * syncs into control_deps in place, which keeps their positions and
 * events, so the index stays true while it runs.  One decoding walk
 * notes (event, node) of each; a counting sort by event (stable: program
 * order within each) then fills the index. */
static void
index_events(Ctx *C)
{
	Graph *g = C->g;
	uint32_t ne = g->events.n, nn = g->nodes.n, t, m = 0;
	C->evoff = calloc(ne + 2, sizeof *C->evoff);
	C->evn = xmalloc((nn + 1) * sizeof *C->evn);
	uint32_t *pair = xmalloc(((size_t)nn + 1) * 2 * sizeof *pair);
	if (!C->evoff)
		out_of_memory(0);
	for (NodeId i = 0; i < nn; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->op == OP_SYNC_DEALLOC)
			continue;
		int op = ir_sync_of(n, &t);
		if ((op != OP_RECORD_EVENT && op != OP_WAIT_EVENT) || t >= ne)
			continue;
		C->evoff[t + 2]++;
		pair[2 * m] = t;
		pair[2 * m++ + 1] = i;
	}
	for (uint32_t e = 0; e < ne; e++)
		C->evoff[e + 2] += C->evoff[e + 1];
	for (uint32_t k = 0; k < m; k++)
		C->evn[C->evoff[pair[2 * k] + 1]++] = pair[2 * k + 1];
	free(pair);
}

/* Extends the tables to the values made since. */
static void
grow(Ctx *C)
{
	uint32_t nv = C->g->vals.n, need = C->cur.n + (nv - C->nv) * C->ns;
	if (need > C->cur.cap)
		vec_grow_((void **)&C->cur.v, &C->cur.cap, need, sizeof *C->cur.v);
	if (nv > C->root.cap)
		vec_grow_((void **)&C->root.v, &C->root.cap, nv, sizeof *C->root.v);
	if (nv > C->mark.cap)
		vec_grow_((void **)&C->mark.v, &C->mark.cap, nv, sizeof *C->mark.v);
	while (C->nv < nv) {
		ValId v = C->nv++;
		for (uint32_t s = 0; s < C->ns; s++)
			vec_push(&C->cur, v);
		vec_push(&C->root, v);
		vec_push(&C->mark, 0);
	}
}

/* Tables and clocks of graph g (the clocks of the whole graph, at once). */
static void
ctx_init(Ctx *C, Graph *g)
{
	memset(C, 0, sizeof *C);
	C->g = g;
	C->ns = g->streams.n;
	grow(C);
	ir_alias_roots(g, C->root.v);
	hb_init(&C->h, g);
	C->h.no_dealloc = 1;
	for (NodeId i = 0; i < g->nodes.n; i++)
		hb_step(&C->h, i);
	C->laston = xmalloc((g->streams.n + 1) * sizeof *C->laston);
	for (uint32_t s = 0; s < g->streams.n; s++)
		C->laston[s] = NONE;
	index_uses(C);
	index_events(C);
}

/* Frees the tables. */
static void
ctx_free(Ctx *C)
{
	free(C->evn);
	free(C->evoff);
	hb_free(&C->h);
	vec_free(&C->root);
	vec_free(&C->cur);
	vec_free(&C->cross);
	vec_free(&C->mark);
	free(C->laston);
	free(C->son);
	free(C->soff);
	free(C->use);
	free(C->uoff);
	vec_free(&C->hits);
}

/* The control_deps node replacing sync node x, over nv values. */
static Node
cd_node(Graph *g, const Node *x, uint32_t nv)
{
	uint32_t target;
	int op = ir_sync_of(x, &target);
	Node n = ir_node_make(g, OP_CONTROL_DEPS, nv, nv, x->stream, x->flags, x->loc);
	n.attr[0].set = 1;
	n.attr[0].s = op_name(op);
	n.attr[0].loc = x->loc;
	if (op != OP_SYNCHRONIZE) {
		n.nextra = 1;
		n.extra = arena_alloc(g->mod->arena, sizeof *n.extra);
		n.extra[0].key = op == OP_WAIT_STREAM ? "other" : "event";
		n.extra[0].a.set = 1;
		n.extra[0].a.type = op == OP_WAIT_STREAM ? AT_STREAM : AT_EVENT;
		n.extra[0].a.i = target;
		n.extra[0].a.loc = x->loc;
	}
	return n;
}

/* Replaces bare sync node i by control_deps over C->cross: each value
 * passes through under the name its stream sees; the streams the sync
 * orders read the alias afterwards. */
static void
wrap(Ctx *C, NodeId i)
{
	Graph *g = C->g;
	Node x = g->nodes.v[i];
	uint32_t nv = C->cross.n;
	Node n = cd_node(g, &x, nv);
	for (uint32_t j = 0; j < nv; j++) {
		ValId w = C->cross.v[j], v = resolve(C, w, x.stream);
		NodeId p = producer(C, i, w);
		ValId r = ir_value_derived(g, g->vals.v[v].name,
		                          (x.flags & NF_BACKWARD) != 0, x.loc);
		g->vals.v[r].type = g->vals.v[v].type;
		g->vals.v[r].layout = g->vals.v[v].layout; /* the same storage */
		g->vals.v[r].def = i;
		g->vals.v[r].resno = (uint16_t)j;
		n.opnd[j].kind = OK_VAL;
		n.opnd[j].v = v;
		n.opnd[j].loc = x.loc;
		n.res[j] = r;
		grow(C);
		C->root.v[r] = C->root.v[v];
		for (uint32_t u = 0; u < C->ns; u++)
			if (orders(C, i, p, u))
				C->cur.v[(size_t)resolve(C, w, u) * C->ns + u] = r;
	}
	g->nodes.v[i] = n;
}

/* --test-drop-sync=N: marks the N-th compiler-made sync dead. */
static int
drop_sync(Graph *g, int which, Diag *d)
{
	int seen = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (!bare_sync(n) || (n->flags & NF_USER))
			continue;
		if (++seen == which) {
			n->flags |= NF_DEAD;
			return 1;
		}
	}
	Loc none = {0};
	diag_error(d, none, "--test-drop-sync=%d: graph '%s' has %d compiler-made "
	           "sync%s", which, g->name, seen, seen == 1 ? "" : "s");
	return 0;
}

/* No bare sync of C's graph has values crossing it (C's clocks, storage
 * classes and indexes are those of the graph as it is; every name is read
 * as written). */
static void
check_syncs(Ctx *C, const char *after)
{
	Graph *g = C->g;
	for (uint32_t s = 0; s < C->ns; s++)
		C->laston[s] = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (bare_sync(n)) {
			crossing(C, i);
			if (C->cross.n)
				ICE("graph '%s', after pass '%s': '%%%s' crosses the %s at line "
				    "%u without control_deps", g->name, after,
				    g->vals.v[C->cross.v[0]].name, op_name(n->op), n->loc.line);
		}
		C->laston[n->stream] = i;
	}
}

/* Pass `control_deps`: wraps each bare sync that values cross, then checks
 * the result as ctrldeps_check would.  The pass keeps its tables for that:
 * each control_deps performs the sync it replaces at its place (the same
 * clocks and event index), its results join their operands' storage
 * classes (as ir_alias_roots gives them), and the uses it renames stay on the
 * same storage (the same use lists); only the names are read as written
 * again. */
int
ctrldeps_pass(Graph *g, const PassOptions *po, Diag *d)
{
	if (po->test_drop_sync > 0 && !drop_sync(g, po->test_drop_sync, d))
		return 0;
	Ctx C;
	ctx_init(&C, g);
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL && ir_access(n, k) != RACC_WRITE)
				n->opnd[k].v = resolve(&C, n->opnd[k].v, n->stream);
		if (bare_sync(n)) {
			crossing(&C, i);
			if (C.cross.n)
				wrap(&C, i);
		}
		C.laston[g->nodes.v[i].stream] = i;
	}
	if (!po->test_drop_sync) {
		for (ValId v = 0; v < C.nv; v++)
			for (uint32_t s = 0; s < C.ns; s++)
				C.cur.v[(size_t)v * C.ns + s] = v;
		check_syncs(&C, "control_deps");
	}
	ctx_free(&C);
	return 1;
}

/* Verifier: no bare sync has values crossing it. */
void
ctrldeps_check(Graph *g, const char *after)
{
	Ctx C;
	ctx_init(&C, g);
	check_syncs(&C, after);
	ctx_free(&C);
}
