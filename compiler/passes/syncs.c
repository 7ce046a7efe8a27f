/*
 * syncs.c - the syncs the compiler adds for its own work.
 *
 * Pass `backward_syncs` (rule 3 of the stream rules): the derived backward
 * (and anything else the compiler made: write-backs, accumulations) runs
 * on the streams its forward nodes chose, so it may read a value produced
 * on another stream.  Walking in program order with the happens-before
 * clocks of races.c, each compiler-made node whose access is not ordered
 * after the earlier conflicting access gets, per stream of those accesses,
 * record_event(E) right after the latest of them and wait_event(E) right
 * before itself.  One fresh event serves a producer and a consuming
 * stream: once the consumer's stream has waited, later consumers on it
 * are ordered already.  A user node gets syncs only for offload's reload
 * of a value it reads (%h.dev, read after backward on a side stream that
 * waited for %h): the user ordered %h, and functionalize's check has
 * reported the races of the program as written.  Its other races are the
 * user's (the verifier reports them).
 *
 * Pass `join_streams` (rule 0 and the end of `backward`): at the end of
 * the call every stream with work not yet ordered before default's end
 * gets wait_stream into default; at the end of a derived backward block,
 * every stream with backward work not ordered before it is joined into the
 * stream of the backward statement.  Both passes add nothing to a program
 * that already has the syncs, so printing and compiling again is stable.
 */
#include <string.h>

#include "passes.h"

typedef struct {
	Graph *g;
	NodeInsVec ins;
	NodeId *latest;   /* per stream: the latest unordered access */
	uint8_t *start;   /* per stream: the call start is unordered */
} Fixer;

/* Whether p is offload's reload of a saved value to the device. */
static int
offload_reload(const Node *p)
{
	return p->op == OP_TO_DEVICE && ir_compiler_made(p);
}

/* Records after each unordered access (the latest per stream) and waits
 * before node i; joins the clocks the waits give. */
static void
fix_node(void *ctx, Hb *h, NodeId i, Race *rs, uint32_t nr)
{
	Fixer *F = ctx;
	Graph *g = F->g;
	if (i >= g->nodes.n)
		return;
	const Node *n = &g->nodes.v[i];
	int user = !ir_compiler_made(n);
	uint32_t ns = h->ns, s = n->stream;
	for (uint32_t t = 0; t < ns; t++) {
		F->latest[t] = NONE;
		F->start[t] = 0;
	}
	for (uint32_t j = 0; j < nr; j++) {
		const Race *x = &rs[j];
		if (x->kind != RACE_RAW && x->kind != RACE_WAR)
			continue;
		if (user && (x->kind != RACE_RAW || x->prev == NONE ||
		             !offload_reload(&g->nodes.v[x->prev])))
			continue;
		if (x->prev == NONE)
			F->start[x->pstream] = 1;
		else if (F->latest[x->pstream] == NONE || x->prev > F->latest[x->pstream])
			F->latest[x->pstream] = x->prev;
	}
	int32_t *clock = hb_clock(h, s);
	for (uint32_t t = 0; t < ns; t++) {
		NodeId p = F->latest[t];
		if (p == NONE && !F->start[t])
			continue;
		if (p == NONE && HB_DONE(clock, 0, 0))
			continue;
		if (p != NONE && HB_DONE(clock, t, p + 1))
			continue; /* ordered by an earlier wait of this node */
		uint32_t e = ir_event_new(g, "sync");
		NodeIns rec = {p == NONE ? 0 : p + 1, 0,
		               ir_sync_node(g, OP_RECORD_EVENT, e, t,
		                               p == NONE ? n->loc : g->nodes.v[p].loc)};
		NodeIns wait = {i, 1, ir_sync_node(g, OP_WAIT_EVENT, e, s, n->loc)};
		vec_push(&F->ins, rec);
		vec_push(&F->ins, wait);
		if (p == NONE)
			hb_join(h, clock, h->init);
		else
			hb_join(h, clock, h->after + (size_t)p * ns);
	}
}

/* Pass `backward_syncs`: one walk, then the insertions. */
int
syncs_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)po;
	(void)d;
	Fixer F = {.g = g};
	F.latest = xmalloc((g->streams.n + 1) * sizeof *F.latest);
	F.start = xmalloc(g->streams.n + 1);
	races_walk(g, 0, fix_node, &F);
	int changed = F.ins.n != 0; /* events are made only with their syncs */
	if (changed)
		ir_insert(g, &F.ins);
	vec_free(&F.ins);
	free(F.latest);
	free(F.start);
	return changed ? 1 : PASS_SAME;
}

/* ------------------------------------------------------------------ joins */

/* wait_stream of each stream t != s whose last node since `from` (a
 * position) is not complete in s's clock, inserted at slot. */
static void
join_into(Graph *g, Hb *h, uint32_t s, int32_t from, uint32_t slot,
          NodeInsVec *ins, Loc loc)
{
	int32_t *clock = hb_clock(h, s);
	for (uint32_t t = 0; t < h->ns; t++) {
		NodeId last = h->laston[t];
		if (t == s || last == NONE || (int32_t)last + 1 <= from ||
		    HB_DONE(clock, t, last + 1))
			continue;
		NodeIns w = {slot, 0, ir_sync_node(g, OP_WAIT_STREAM, t, s, loc)};
		vec_push(ins, w);
		hb_join(h, clock, hb_clock(h, t));
	}
}

/* Pass `join_streams`: joins at the end of derived blocks and of the call. */
int
syncs_join_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)po;
	(void)d;
	Hb h;
	NodeInsVec ins = {0};
	hb_init(&h, g);
	uint32_t bstream = 0;
	int32_t bfrom = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_BACKWARD && (n->flags & NF_BACKWARD)) {
			bstream = n->stream;
			bfrom = (int32_t)i + 1;
		} else if (n->op == OP_BACKWARD_END) {
			join_into(g, &h, bstream, bfrom, i, &ins, n->loc);
		}
		hb_step(&h, i);
	}
	join_into(g, &h, 0, 0, g->nodes.n, &ins, g->retloc);
	hb_free(&h);
	int changed = ins.n != 0;
	if (changed)
		ir_insert(g, &ins);
	vec_free(&ins);
	return changed ? 1 : PASS_SAME;
}
