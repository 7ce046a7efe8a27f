/*
 * dealloc.c - pass `sync_dealloc` (rule 8): cross-stream frees.
 *
 * Memory belongs to the stream that allocated it: once that stream is done
 * with a buffer, later work on it may reuse the memory.  If the buffer was
 * also used on another stream, that use may still be running.  Streams
 * keep their own order, so what matters is the point where the allocating
 * stream lets the buffer go: the user's `del` when there is one, else just
 * after the last access in program order.  If every access on other
 * streams is ordered before that point (by the user's own events), nothing
 * is needed.  Otherwise the compiler records an event after the last
 * access on each such stream and releases the buffer with
 *
 *     sync_dealloc(%v, event=E, stream=ALLOCATING)
 *
 * at that point, replacing the `del` (when several streams are late, the
 * allocating stream first waits for all but one of their events).  A
 * single-stream program gets none; a value that already has a
 * sync_dealloc is left as it is, so compiling the printed IR again adds
 * nothing.  A sync_dealloc can be the last work of its stream, so the
 * pass ends by joining streams into default again (syncs.c).
 *
 * It runs after the race verifier's first check: its waits would order,
 * and so hide, races of the user's program.
 */
#include <string.h>

#include "passes.h"

typedef struct {
	Graph *g;
	uint32_t ns;
	ValId *root;
	uint8_t *skip;     /* per root: kept, persistent or already released */
	NodeId *last;      /* nv x ns: last access of each root per stream */
	NodeId *lastall;   /* per root: last access in program order */
	ValId *lastname;   /* per root: the name that access used */
	NodeId *del;       /* per root: its del */
	NodeId *point;     /* per root: where the allocating stream lets go */
	NodeInsVec ins;
	Map recs;          /* (slot, stream) as 8 bytes -> event recorded there */
} Dealloc;

/* Fills the per-root tables from one pass over the nodes. */
static void
collect(Dealloc *D)
{
	Graph *g = D->g;
	for (ValId v = 0; v < g->vals.n; v++) {
		ValId r = D->root[v];
		if (g->vals.v[v].kind != VK_NODE)
			D->skip[r] = 1;
	}
	for (uint32_t i = 0; i < g->rets.n; i++)
		D->skip[D->root[g->rets.v[i]]] = 1;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_SYNC_DEALLOC)
			D->skip[D->root[n->opnd[0].v]] = 1;
		if (n->op == OP_DEL)
			D->del[D->root[n->opnd[0].v]] = i;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (ir_access(n, k) == RACC_NONE)
				continue;
			ValId r = D->root[n->opnd[k].v];
			D->last[(size_t)r * D->ns + n->stream] = i;
			D->lastall[r] = i;
			D->lastname[r] = n->opnd[k].v;
		}
	}
	for (ValId r = 0; r < g->vals.n; r++) {
		D->point[r] = NONE;
		if (D->root[r] != r || D->skip[r] || g->vals.v[r].def == NONE)
			continue;
		NodeId p = g->vals.v[r].def;
		if (D->del[r] != NONE)
			D->point[r] = D->del[r];
		else
			D->point[r] = (D->lastall[r] == NONE ? p : D->lastall[r]) + 1;
	}
}

/* The event recorded on stream t right after node l: one per place. */
static uint32_t
record_after(Dealloc *D, NodeId l, uint32_t t)
{
	Graph *g = D->g;
	uint32_t at[2] = {l, t}, *key;
	uint32_t *slot = map_get(&D->recs, (const char *)at, sizeof at);
	if (slot)
		return *slot;
	uint32_t ev = ir_event_new(g, "free");
	NodeIns rec = {l + 1, 0, ir_sync_node(g, OP_RECORD_EVENT, ev, t,
	                                          g->nodes.v[l].loc)};
	vec_push(&D->ins, rec);
	key = arena_alloc(g->mod->arena, sizeof at);
	memcpy(key, at, sizeof at);
	map_put(&D->recs, (const char *)key, sizeof at, ev);
	return ev;
}

/* Root r is let go at slot `at` on stream a, whose clock is c: records
 * after the late accesses and a sync_dealloc there. */
static void
release(Dealloc *D, ValId r, uint32_t a, const int32_t *c, NodeId at)
{
	Graph *g = D->g;
	uint32_t late[D->ns + 1], nl = 0;
	for (uint32_t t = 0; t < D->ns; t++) {
		NodeId l = D->last[(size_t)r * D->ns + t];
		if (t != a && l != NONE && !HB_DONE(c, t, l + 1))
			late[nl++] = t;
	}
	if (!nl)
		return;
	NodeId d = D->del[r];
	Loc loc = d != NONE ? g->nodes.v[d].loc : g->nodes.v[D->lastall[r]].loc;
	uint32_t ev = 0;
	for (uint32_t j = 0; j < nl; j++) {
		NodeId l = D->last[(size_t)r * D->ns + late[j]];
		ev = record_after(D, l, late[j]);
		if (j + 1 < nl) {
			NodeIns w = {at, 1, ir_sync_node(g, OP_WAIT_EVENT, ev, a, loc)};
			vec_push(&D->ins, w);
		}
	}
	Node n = ir_node_make(g, OP_SYNC_DEALLOC, 1, 0, a, 0, loc);
	n.opnd[0].kind = OK_VAL;
	n.opnd[0].v = d != NONE ? g->nodes.v[d].opnd[0].v : D->lastname[r];
	n.opnd[0].loc = loc;
	Attr *e = &n.attr[op_attr_index(OP_SYNC_DEALLOC, "event")];
	Attr *s = &n.attr[op_attr_index(OP_SYNC_DEALLOC, "stream")];
	e->set = s->set = 1;
	e->i = ev;
	s->i = a;
	NodeIns sd = {at, 2, n};
	vec_push(&D->ins, sd);
	if (d != NONE)
		g->nodes.v[d].flags |= NF_DEAD;
}

/* Pass `sync_dealloc`: the points where roots are let go, then one walk
 * deciding each at its point. */
int
dealloc_pass(Graph *g, const PassOptions *po, Diag *d)
{
	uint32_t nv = g->vals.n, nn = g->nodes.n;
	Dealloc D = {.g = g, .ns = g->streams.n};
	D.root = xmalloc((nv + 1) * sizeof *D.root);
	D.skip = calloc(nv + 1, 1);
	D.last = xmalloc(((size_t)nv * D.ns + 1) * sizeof *D.last);
	D.lastall = xmalloc((nv + 1) * sizeof *D.lastall);
	D.lastname = xmalloc((nv + 1) * sizeof *D.lastname);
	D.del = xmalloc((nv + 1) * sizeof *D.del);
	D.point = xmalloc((nv + 1) * sizeof *D.point);
	if (!D.skip)
		out_of_memory(0);
	for (size_t i = 0; i < (size_t)nv * D.ns; i++)
		D.last[i] = NONE;
	for (ValId v = 0; v < nv; v++)
		D.lastall[v] = D.del[v] = D.lastname[v] = NONE;
	ir_alias_roots(g, D.root);
	map_init(&D.recs);
	collect(&D);

	/* The roots let go at each slot, then one walk. */
	uint32_t *head = xmalloc((nn + 2) * sizeof *head);
	uint32_t *next = xmalloc((nv + 1) * sizeof *next);
	for (uint32_t k = 0; k <= nn + 1; k++)
		head[k] = NONE;
	for (ValId r = nv; r-- > 0;)
		if (D.point[r] != NONE) {
			next[r] = head[D.point[r]];
			head[D.point[r]] = r;
		}
	Hb h;
	hb_init(&h, g);
	for (NodeId k = 0; k <= nn; k++) {
		for (ValId r = head[k]; r != NONE; r = next[r]) {
			uint32_t a = g->nodes.v[g->vals.v[r].def].stream;
			release(&D, r, a, hb_clock(&h, a), k);
		}
		if (k < nn)
			hb_step(&h, k);
	}
	hb_free(&h);
	int changed = D.ins.n != 0; /* events are made only with their records */
	if (changed)
		ir_insert(g, &D.ins);
	vec_free(&D.ins);
	map_free(&D.recs);
	/* A sync_dealloc may be the last work of its stream: join it again. */
	changed |= syncs_join_pass(g, po, d) != PASS_SAME;
	free(head);
	free(next);
	free(D.root);
	free(D.skip);
	free(D.last);
	free(D.lastall);
	free(D.lastname);
	free(D.del);
	free(D.point);
	return changed ? 1 : PASS_SAME;
}
