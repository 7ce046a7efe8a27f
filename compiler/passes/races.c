/*
 * races.c - happens-before over streams and events, and the race verifier
 * (rule 2 of the language's stream rules).
 *
 * The model is the one CUDA gives: the host issues nodes in program order;
 * each stream runs its nodes in that order; record_event(E) on S captures
 * the work issued on S so far; wait_event(E) on T makes T's later work wait
 * for the last record of E issued before it; wait_stream(S) on T waits for
 * all work issued on S so far; synchronize() waits for every stream.  A
 * vector clock per stream (the last position of each stream known complete)
 * follows this in one walk in program order.  Rule 0: inputs, params and
 * consts are ready on `default` when the call starts (position 0).
 *
 * races_walk follows every storage class (a value and its control_deps
 * aliases): its last write and, per stream, its last read since; an access
 * whose earlier conflicting access is not complete in the accessing
 * stream's clock is a race.  The verifier (pass `races`, re-run after every
 * later pass) reports races at user nodes as errors (warnings with
 * --allow-races) and races at compiler-made nodes as internal errors: the
 * compiler never leaves a race of its own.
 */
#include <string.h>

#include "passes.h"

/* ------------------------------------------------------------------ clocks */

/* Clocks at the call start: default knows position 0, nothing else is known. */
void
hb_init(Hb *h, const Graph *g)
{
	memset(h, 0, sizeof *h);
	h->g = g;
	h->ns = g->streams.n;
	h->ne = g->events.n;
	h->nn = g->nodes.n;
	size_t ss = (size_t)h->ns * h->ns;
	h->cur = xmalloc((ss + 1) * sizeof *h->cur);
	h->init = xmalloc((ss + 1) * sizeof *h->init);
	h->ev = xmalloc(((size_t)h->ne * h->ns + 1) * sizeof *h->ev);
	h->recorded = xmalloc(h->ne + 1);
	h->after = xmalloc(((size_t)h->nn * h->ns + 1) * sizeof *h->after);
	h->prevon = xmalloc((h->nn + 1) * sizeof *h->prevon);
	h->laston = xmalloc((h->ns + 1) * sizeof *h->laston);
	for (size_t i = 0; i < ss; i++)
		h->init[i] = -1;
	h->init[0] = 0; /* default knows the call start */
	memcpy(h->cur, h->init, ss * sizeof *h->cur);
	memset(h->recorded, 0, h->ne + 1);
	for (uint32_t s = 0; s < h->ns; s++)
		h->laston[s] = NONE;
	for (uint32_t i = 0; i < h->nn; i++)
		h->prevon[i] = NONE;
}

/* Frees the clocks. */
void
hb_free(Hb *h)
{
	free(h->cur);
	free(h->init);
	free(h->ev);
	free(h->recorded);
	free(h->after);
	free(h->prevon);
	free(h->laston);
	memset(h, 0, sizeof *h);
}

/* Entrywise maximum: what both clocks know. */
void
hb_join(const Hb *h, int32_t *dst, const int32_t *src)
{
	for (uint32_t t = 0; t < h->ns; t++)
		if (src[t] > dst[t])
			dst[t] = src[t];
}

/* Stream s's clock as the walk stands. */
int32_t *
hb_clock(Hb *h, uint32_t s)
{
	return h->cur + (size_t)s * h->ns;
}

/* Node i's stream's clock just before i: its previous node's, or the start. */
const int32_t *
hb_before(const Hb *h, NodeId i)
{
	uint32_t s = h->g->nodes.v[i].stream;
	if (h->prevon[i] == NONE)
		return h->init + (size_t)s * h->ns;
	return h->after + (size_t)h->prevon[i] * h->ns;
}


/* Node i's effect: its sync, then its own position on its stream. */
void
hb_step(Hb *h, NodeId i)
{
	const Node *n = &h->g->nodes.v[i];
	uint32_t ns = h->ns, s = n->stream, t;
	int32_t *row = hb_clock(h, s);
	if (n->flags & NF_DEAD) {
		memcpy(h->after + (size_t)i * ns, row, ns * sizeof *row);
		return;
	}
	int op = n->op == OP_SYNC_DEALLOC && h->no_dealloc ? -1 : ir_sync_of(n, &t);
	switch (op) {
	case OP_WAIT_EVENT:
		if (t < h->ne && h->recorded[t])
			hb_join(h, row, h->ev + (size_t)t * ns);
		break;
	case OP_WAIT_STREAM:
		if (t < ns && t != s)
			hb_join(h, row, hb_clock(h, t));
		break;
	case OP_SYNCHRONIZE:
		for (uint32_t k = 0; k < ns; k++)
			hb_join(h, row, hb_clock(h, k));
		for (uint32_t k = 0; k < ns; k++)
			if (k != s)
				memcpy(hb_clock(h, k), row, ns * sizeof *row);
		break;
	}
	row[s] = (int32_t)i + 1;
	if (op == OP_RECORD_EVENT && t < h->ne) {
		memcpy(h->ev + (size_t)t * ns, row, ns * sizeof *row);
		h->recorded[t] = 1;
	}
	memcpy(h->after + (size_t)i * ns, row, ns * sizeof *row);
	h->prevon[i] = h->laston[s];
	h->laston[s] = i;
}


/* ------------------------------------------------------------------ the walk */

typedef struct {
	Graph *g;
	Hb h;
	ValId *root;
	NodeId *lastw;    /* per root: last write; NONE: the call start */
	uint32_t *wstream;
	uint8_t *defined; /* per root: written (or persistent) */
	uint8_t *wdef;    /* per root: the last write is its definition */
	int32_t *rd;      /* nv x ns: last read position per stream */
	NodeId *freed;    /* per root: its release (sync_dealloc, del) */
	uint32_t *astream;/* per root: the stream that allocated it */
	ValId *wval;      /* per root: the value its last write named */
	const ValId *vpar;/* per value: the value it views (NONE), or NULL */
	NodeId *vmade;    /* with vpar, per view: the node that made it */
	VEC(Race) found;
} Walk;

/* An access to root r at node i on stream s: which earlier accesses are
 * not complete in clock c. */
static void
check_access(Walk *W, const int32_t *c, NodeId i, uint32_t k, ValId v, int acc)
{
	ValId r = W->root[v];
	uint32_t ns = W->h.ns;
	NodeId w = W->lastw[r];
	int32_t wpos = w == NONE ? 0 : (int32_t)w + 1;
	if (W->freed[r] != NONE) {
		Race x = {RACE_AFTER_FREE, 0, k, v, W->freed[r],
		          W->g->nodes.v[W->freed[r]].stream, 0};
		vec_push(&W->found, x);
		return;
	}
	if (W->defined[r] && !HB_DONE(c, W->wstream[r], wpos)) {
		Race x = {RACE_RAW, W->wdef[r], k, v, w, W->wstream[r], 0};
		x.view = W->vpar && W->vpar[v] != NONE && !W->wdef[r] && W->wval[r] != v;
		vec_push(&W->found, x);
	} else if (W->vpar && W->vpar[v] != NONE && W->vmade[v] != NONE) {
		/* A view is a value its statement produced on its stream. */
		NodeId m = W->vmade[v];
		uint32_t ms = W->g->nodes.v[m].stream;
		if (!HB_DONE(c, ms, (int32_t)m + 1)) {
			Race x = {RACE_RAW, 1, k, v, m, ms, 0};
			vec_push(&W->found, x);
		}
	}
	if (acc != RACC_WRITE)
		return;
	for (uint32_t t = 0; t < ns; t++) {
		int32_t p = W->rd[(size_t)r * ns + t];
		if (p > 0 && p != (int32_t)i + 1 && !HB_DONE(c, t, p)) {
			Race x = {RACE_WAR, 0, k, v, (NodeId)p - 1, t, 0};
			vec_push(&W->found, x);
		}
	}
}

/* The effect of node i's accesses on the storage state. */
static void
apply_accesses(Walk *W, NodeId i)
{
	Graph *g = W->g;
	Node *n = &g->nodes.v[i];
	uint32_t ns = W->h.ns;
	/* Before functionalize, a view names memory and writes none: its use
	 * of its operand was checked (a read after a write), but it neither
	 * ends the memory's last write nor counts as a read that a later
	 * in-place write must wait for (the view's readers do).  It is a value
	 * made on its stream, though: a read of it on another is checked
	 * against that (check_access). */
	if (W->vpar && n->nres > 0 && W->vpar[n->res[0]] != NONE) {
		for (uint32_t j = 0; j < n->nres; j++)
			W->vmade[n->res[j]] = i;
		return;
	}
	for (uint32_t k = 0; k < n->nopnd; k++) {
		int acc = ir_access(n, k);
		if (acc == RACC_NONE)
			continue;
		ValId r = W->root[n->opnd[k].v];
		int32_t *p = &W->rd[(size_t)r * ns + n->stream];
		if ((int32_t)i + 1 > *p)
			*p = (int32_t)i + 1;
	}
	for (uint32_t k = 0; k < n->nopnd; k++) {
		if (ir_access(n, k) != RACC_WRITE)
			continue;
		ValId r = W->root[n->opnd[k].v];
		W->lastw[r] = i;
		W->wstream[r] = n->stream;
		W->wval[r] = n->opnd[k].v;
		W->wdef[r] = 0;
		W->defined[r] = 1;
		for (uint32_t t = 0; t < ns; t++)
			W->rd[(size_t)r * ns + t] = -1;
	}
	if (n->op == OP_CONTROL_DEPS)
		return;
	for (uint32_t j = 0; j < n->nres; j++) {
		ValId r = W->root[n->res[j]];
		W->lastw[r] = i;
		W->wstream[r] = n->stream;
		W->astream[r] = n->stream;
		W->wdef[r] = 1;
		W->defined[r] = 1;
		W->freed[r] = NONE;
		for (uint32_t t = 0; t < ns; t++)
			W->rd[(size_t)r * ns + t] = -1;
	}
}

/* A release of v's storage (sync_dealloc after its wait, del before):
 * every access must be complete in clock c. */
static void
check_release(Walk *W, const int32_t *c, ValId v)
{
	ValId r = W->root[v];
	uint32_t ns = W->h.ns;
	NodeId w = W->lastw[r];
	if (W->defined[r] && w != NONE && !HB_DONE(c, W->wstream[r], w + 1)) {
		Race x = {RACE_FREE, W->wdef[r], 0, v, w, W->wstream[r], 0};
		vec_push(&W->found, x);
	}
	for (uint32_t t = 0; t < ns; t++) {
		int32_t p = W->rd[(size_t)r * ns + t];
		if (p > 0 && !HB_DONE(c, t, p)) {
			Race x = {RACE_FREE, 0, 0, v, (NodeId)p - 1, t, 0};
			vec_push(&W->found, x);
		}
	}
}

/* Checks node i's accesses (or release), reports, then applies it. */
static void
walk_node(Walk *W, NodeId i, unsigned what, RaceFn fn, void *ctx)
{
	Graph *g = W->g;
	Node *n = &g->nodes.v[i];
	W->found.n = 0;
	if (n->op == OP_SYNC_DEALLOC) {
		hb_step(&W->h, i);
		if (what & WALK_FREES) {
			ValId r = W->root[n->opnd[0].v];
			if (W->freed[r] != NONE) { /* released twice */
				Race x = {RACE_AFTER_FREE, 0, 0, n->opnd[0].v, W->freed[r],
				          g->nodes.v[W->freed[r]].stream, 0};
				vec_push(&W->found, x);
			} else {
				check_release(W, hb_clock(&W->h, n->stream), n->opnd[0].v);
			}
			if (W->found.n)
				fn(ctx, &W->h, i, W->found.v, W->found.n);
			W->freed[W->root[n->opnd[0].v]] = i;
		}
		return;
	}
	if (n->op == OP_DEL && (what & WALK_FREES)) {
		ValId r = W->root[n->opnd[0].v];
		if (g->vals.v[r].kind == VK_NODE) {
			check_release(W, hb_clock(&W->h, W->astream[r]), n->opnd[0].v);
			if (W->found.n)
				fn(ctx, &W->h, i, W->found.v, W->found.n);
			W->freed[r] = i;
		}
		hb_step(&W->h, i);
		return;
	}
	const int32_t *c = hb_clock(&W->h, n->stream);
	for (uint32_t k = 0; k < n->nopnd; k++) {
		int acc = ir_access(n, k);
		if (acc != RACC_NONE)
			check_access(W, c, i, k, n->opnd[k].v, acc);
	}
	if (W->found.n)
		fn(ctx, &W->h, i, W->found.v, W->found.n);
	apply_accesses(W, i);
	hb_step(&W->h, i);
}

/* The end of the call: returned values and every stream must be complete
 * on default. */
static void
walk_end(Walk *W, RaceFn fn, void *ctx)
{
	Graph *g = W->g;
	int32_t *c = hb_clock(&W->h, 0);
	W->found.n = 0;
	for (uint32_t i = 0; i < g->rets.n; i++) {
		ValId r = W->root[g->rets.v[i]];
		NodeId w = W->lastw[r];
		if (W->defined[r] && w != NONE && !HB_DONE(c, W->wstream[r], w + 1)) {
			Race x = {RACE_RET, W->wdef[r], NONE, g->rets.v[i], w, W->wstream[r], 0};
			vec_push(&W->found, x);
		}
	}
	for (uint32_t t = 1; t < W->h.ns; t++) {
		NodeId last = W->h.laston[t];
		if (last != NONE && !HB_DONE(c, t, last + 1)) {
			Race x = {RACE_JOIN, 0, NONE, NONE, last, t, 0};
			vec_push(&W->found, x);
		}
	}
	if (W->found.n)
		fn(ctx, &W->h, g->nodes.n, W->found.v, W->found.n);
}

/* One walk in program order over clocks and storage; with vpar, a view
 * shares the storage of the value it views. */
static void
walk(Graph *g, const ValId *vpar, unsigned what, RaceFn fn, void *ctx)
{
	Walk W = {.g = g, .vpar = vpar};
	uint32_t nv = g->vals.n;
	hb_init(&W.h, g);
	uint32_t ns = W.h.ns;
	W.root = xmalloc((nv + 1) * sizeof *W.root);
	W.lastw = xmalloc((nv + 1) * sizeof *W.lastw);
	W.wstream = calloc(nv + 1, sizeof *W.wstream);
	W.astream = calloc(nv + 1, sizeof *W.astream);
	W.defined = calloc(nv + 1, 1);
	W.wdef = calloc(nv + 1, 1);
	W.freed = xmalloc((nv + 1) * sizeof *W.freed);
	W.rd = xmalloc(((size_t)nv * ns + 1) * sizeof *W.rd);
	W.wval = xmalloc((nv + 1) * sizeof *W.wval);
	W.vmade = xmalloc((nv + 1) * sizeof *W.vmade);
	if (!W.wstream || !W.astream || !W.defined || !W.wdef)
		out_of_memory(0);
	ir_view_roots(g, vpar, W.root);
	for (ValId v = 0; v < nv; v++) {
		W.lastw[v] = NONE;
		W.wval[v] = NONE;
		W.vmade[v] = NONE;
		W.freed[v] = NONE;
		W.defined[v] = g->vals.v[v].kind != VK_NODE;
	}
	for (size_t i = 0; i < (size_t)nv * ns; i++)
		W.rd[i] = -1;
	for (NodeId i = 0; i < g->nodes.n; i++)
		if (!(g->nodes.v[i].flags & NF_DEAD))
			walk_node(&W, i, what, fn, ctx);
	if (what & WALK_END)
		walk_end(&W, fn, ctx);
	hb_free(&W.h);
	free(W.root);
	free(W.lastw);
	free(W.wstream);
	free(W.astream);
	free(W.defined);
	free(W.wdef);
	free(W.freed);
	free(W.rd);
	free(W.wval);
	free(W.vmade);
	vec_free(&W.found);
}

/* One walk in program order over clocks and storage (see passes.h). */
void
races_walk(Graph *g, unsigned what, RaceFn fn, void *ctx)
{
	walk(g, NULL, what, fn, ctx);
}

/* ------------------------------------------------------------------ reports */

enum { MODE_REPORT, MODE_RECHECK, MODE_WRITES };

typedef struct {
	Graph *g;
	const PassOptions *po;
	Diag *d;
	int mode;
	const char *after;  /* the pass that ran last */
	int errors;
} Report;

/* The text the source has at loc when it is a value name ("%h"), so that
 * a renamed value is named as the user wrote it; else "%NAME". */
static const char *
shown_name(Report *R, Loc at, ValId v, char *buf, size_t cap)
{
	const Diag *d = R->d;
	const char *name = v != NONE ? R->g->vals.v[v].name : "?";
	snprintf(buf, cap, "%%%s", name);
	if (!d || !d->src || at.line == 0 || at.len < 2 || at.len >= cap)
		return buf;
	size_t pos = 0;
	for (uint32_t line = 1; line < at.line && pos < d->srclen; pos++)
		if (d->src[pos] == '\n')
			line++;
	pos += at.col ? at.col - 1 : 0;
	if (pos + at.len > d->srclen || d->src[pos] != '%')
		return buf;
	memcpy(buf, d->src + pos, at.len);
	buf[at.len] = 0;
	return buf;
}

/* The name of stream s. */
static const char *
stream_name(Report *R, uint32_t s)
{
	return R->g->streams.v[s].name;
}

/* Where the earlier access of a race is: the operand of node p that names
 * v's storage, else the statement. */
static Loc
access_loc(Report *R, NodeId p, ValId v)
{
	Graph *g = R->g;
	if (p == NONE)
		return g->vals.v[v].loc;
	const Node *n = &g->nodes.v[p];
	for (uint32_t k = 0; k < n->nopnd; k++)
		if (n->opnd[k].kind == OK_VAL && n->opnd[k].v == v && n->opnd[k].loc.line)
			return n->opnd[k].loc;
	return n->loc;
}

/* The statement the user wrote for node p: the `backward` statement for
 * a node of its derived block (a gradient, an update), else p. */
static NodeId
user_stmt(const Graph *g, NodeId p)
{
	NodeId bw, end;
	if (p != NONE && (g->nodes.v[p].flags & NF_BACKWARD) &&
	    ir_backward_block(g, &bw, &end) && p > bw && p < end)
		return bw;
	return p;
}

/* The note at the earlier access of a race. */
static void
note_prev(Report *R, const Race *x, const char *nm)
{
	Graph *g = R->g;
	if (x->prev == NONE) {
		const Value *val = &g->vals.v[x->v];
		const char *kind = val->kind == VK_INPUT ? "an input" : val->kind ==
		                   VK_PARAM ? "a param" : val->kind == VK_CONST ? "a const"
		                   : "a value";
		diag_note(R->d, val->loc, "'%s' is %s, ready on 'default' when the call "
		          "starts", nm, kind);
		return;
	}
	NodeId st = user_stmt(g, x->prev);
	if (st != x->prev) {
		diag_note(R->d, g->nodes.v[st].loc, "'%s' is %s by this backward", nm,
		          x->kind == RACE_WAR ? "read" : g->vals.v[x->v].kind == VK_PARAM ?
		          "updated" : "written");
		return;
	}
	const Node *p = &g->nodes.v[x->prev];
	int named = 0; /* the earlier access names v (else another view of it) */
	for (uint32_t k = 0; k < p->nopnd; k++)
		named |= p->opnd[k].kind == OK_VAL && p->opnd[k].v == x->v;
	if (x->kind == RACE_AFTER_FREE)
		diag_note(R->d, p->loc, "its memory is released here");
	else if (!named && !x->pdef && (x->kind == RACE_RAW || x->kind == RACE_WAR))
		diag_note(R->d, p->loc, "the memory of '%s' is %s here, through another view of it",
		          nm, x->kind == RACE_RAW ? "written" : "read");
	else if (x->pdef)
		diag_note(R->d, p->loc, "'%s' is produced here", nm);
	else if (x->kind == RACE_RAW)
		diag_note(R->d, access_loc(R, x->prev, x->v), "'%s' is written here", nm);
	else
		diag_note(R->d, access_loc(R, x->prev, x->v), "'%s' is used here", nm);
}

/* A note naming the fix of a race between statements on two streams:
 * which event to record after the earlier access and wait on before node
 * i; or, when a record_event of an event that i's stream waits on stands
 * before the earlier access on its stream (meant to follow it), to move
 * that record_event after it. */
static void
note_fix(Report *R, NodeId i, const Race *x, const char *nm)
{
	Graph *g = R->g;
	if (i >= g->nodes.n || x->prev == NONE ||
	    (x->kind != RACE_RAW && x->kind != RACE_WAR))
		return;
	NodeId st = user_stmt(g, x->prev);
	const Node *p = &g->nodes.v[st], *n = &g->nodes.v[i];
	uint32_t pst = st != x->prev ? p->stream : x->pstream;
	const char *ps = stream_name(R, pst);
	const char *cs = stream_name(R, n->stream);
	const char *verb = st != x->prev ? (x->kind == RACE_WAR ? "read by backward" :
	                   "written by backward") : x->pdef ? "produced" :
	                   x->kind == RACE_RAW ? "written" : "read";
	uint32_t e, e2;
	for (NodeId r = st; r-- > 0;) {
		const Node *rec = &g->nodes.v[r];
		if (rec->stream != pst || ir_sync_of(rec, &e) != OP_RECORD_EVENT)
			continue;
		for (NodeId w = r + 1; w < i; w++) {
			const Node *wn = &g->nodes.v[w];
			if (wn->stream == n->stream && ir_sync_of(wn, &e2) == OP_WAIT_EVENT &&
			    e2 == e) {
				const char *en = g->events.v[e].name;
				diag_note(R->d, rec->loc, "'record_event(%s)' on '%s' comes before "
				          "'%s' is %s on line %u; move it after that line, so that "
				          "'wait_event(%s)' on line %u orders them", en, ps, nm,
				          verb, p->loc.line, en, wn->loc.line);
				return;
			}
		}
	}
	/* A new event, named after the value. */
	char ev[64];
	size_t k = 0;
	for (const char *c = nm[0] == '%' ? nm + 1 : nm; *c && k < 40; c++)
		ev[k++] = (char)((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		                 (*c >= '0' && *c <= '9') || *c == '_' ? *c : '_');
	snprintf(ev + k, sizeof ev - k, "_ready");
	diag_note(R->d, p->loc, "to order them, declare 'event %s', add "
	          "'record_event(%s)' on '%s' after line %u and 'wait_event(%s)' on "
	          "'%s' before line %u", ev, ev, ps, p->loc.line, ev, cs, n->loc.line);
}

/* The message of a race at node i. */
static void
race_text(Report *R, NodeId i, const Race *x, const char *nm, char *buf, size_t cap)
{
	Graph *g = R->g;
	const char *s = i < g->nodes.n ? stream_name(R, g->nodes.v[i].stream) : "default";
	const char *t = stream_name(R, x->pstream);
	switch (x->kind) {
	case RACE_RAW:
		if (x->view)
			snprintf(buf, cap, "'%s' is used on stream '%s' but its memory is written "
			         "in place on '%s' with no event between them", nm, s, t);
		else if (i < g->nodes.n && x->k < g->nodes.v[i].nopnd &&
		         ir_access(&g->nodes.v[i], x->k) == RACC_WRITE)
			snprintf(buf, cap, "'%s' is written in place on stream '%s' but produced "
			         "on '%s' with no event between them", nm, s, t);
		else
			snprintf(buf, cap, "'%s' is used on stream '%s' but %s on '%s' with "
			         "no event between them", nm, s,
			         x->pdef || x->prev == NONE ? "produced" : "written", t);
		break;
	case RACE_WAR:
		snprintf(buf, cap, "'%s' is written in place on stream '%s' but read on "
		         "'%s' with no event between them", nm, s, t);
		break;
	case RACE_FREE:
		snprintf(buf, cap, "the memory of '%s' is released on stream '%s' but "
		         "used on '%s' with no event between them", nm,
		         i < g->nodes.n && g->nodes.v[i].op == OP_SYNC_DEALLOC ? s : "its "
		         "allocating stream", t);
		break;
	case RACE_AFTER_FREE:
		snprintf(buf, cap, "'%s' is used after its memory is released", nm);
		break;
	case RACE_RET:
		snprintf(buf, cap, "returned value '%s' is produced on '%s', which is not "
		         "joined into 'default' before the end of the call", nm, t);
		break;
	case RACE_JOIN:
		snprintf(buf, cap, "stream '%s' is not joined into 'default' before the "
		         "end of the call", t);
		break;
	}
}

/* Reports the races of node i: the user's as errors (warnings with
 * --allow-races), the compiler's as an internal error. */
static void
report_races(void *ctx, Hb *h, NodeId i, Race *rs, uint32_t nr)
{
	Report *R = ctx;
	Graph *g = R->g;
	(void)h;
	int end = i >= g->nodes.n;
	const Node *n = end ? NULL : &g->nodes.v[i];
	for (uint32_t j = 0; j < nr; j++) {
		const Race *x = &rs[j];
		int dup = 0;
		for (uint32_t k = 0; k < j; k++)
			dup |= rs[k].v == x->v && rs[k].kind == x->kind;
		if (dup)
			continue;
		/* Before functionalize: in-place writes after an unordered read,
		 * and reads of a view after an unordered in-place write through
		 * another alias of its memory (once functionalised, the view is
		 * made again by the compiler, which would order it itself); and,
		 * but with --allow-races (whose warnings the check after the
		 * passes gives), every other unordered use of a value: a statement
		 * that dead_code removes, or a write that functionalize turns into
		 * a fresh value (zero_, fill_, copy_), is checked as written. */
		if (R->mode == MODE_WRITES && x->kind != RACE_WAR &&
		    !(x->kind == RACE_RAW && (x->view || !R->po->allow_races)))
			continue;
		/* An unsafe del is the compiler's to fix (sync_dealloc, which runs
		 * after the first check). */
		if (n && n->op == OP_DEL && R->mode == MODE_REPORT)
			continue;
		/* Written by the user (a derived block included, as when printed
		 * IR is compiled again): the user's race; else the compiler's. */
		int user = n && (n->flags & NF_USER) && n->op != OP_DEL;
		/* A use after the user's own sync_dealloc is the user's mistake,
		 * even where the use is derived (the backward needs the value). */
		if (x->kind == RACE_AFTER_FREE && x->prev != NONE &&
		    (g->nodes.v[x->prev].flags & NF_USER))
			user = 1;
		if (R->mode == MODE_WRITES && (!user || (n->flags & NF_BACKWARD)))
			continue;
		if (R->mode == MODE_RECHECK && user && R->po->allow_races)
			continue;
		char nb[128], msg[512];
		Loc at = n ? n->loc : g->retloc;
		if (n && x->k != NONE && x->k < n->nopnd)
			at = n->opnd[x->k].loc;
		shown_name(R, at, x->v, nb, sizeof nb);
		race_text(R, i, x, nb, msg, sizeof msg);
		if (!user)
			ICE("race verifier, graph '%s', after pass '%s': %s (node %u, line %u)",
			    g->name, R->after, msg, i, n ? n->loc.line : 0);
		if (R->po->allow_races) {
			diag_warning(R->d, at, "%s", msg);
		} else {
			diag_error(R->d, at, "%s", msg);
			R->errors++;
		}
		note_prev(R, x, nb);
		note_fix(R, i, x, nb);
	}
}

/* Pass `races`: the first check, before sync_dealloc adds its waits. */
int
races_pass(Graph *g, const PassOptions *po, Diag *d)
{
	if (po->test_drop_sync)
		return 1;
	Report R = {.g = g, .po = po, .d = d, .mode = MODE_REPORT, .after = "races"};
	races_walk(g, WALK_FREES | WALK_END, report_races, &R);
	return R.errors == 0 ? PASS_SAME : 0;
}

/* The check after each later pass. */
int
races_recheck(Graph *g, const PassOptions *po, Diag *d, const char *after,
              int ctrl_done)
{
	if (po->test_drop_sync)
		return 1;
	if (ctrl_done)
		ctrldeps_check(g, after);
	Report R = {.g = g, .po = po, .d = d, .mode = MODE_RECHECK, .after = after};
	races_walk(g, WALK_FREES | WALK_END, report_races, &R);
	return R.errors == 0;
}

/* The races of the user's in-place ops, views included, for functionalize. */
int
races_check_writes(Graph *g, const ValId *vpar, const PassOptions *po, Diag *d)
{
	if (po->test_drop_sync)
		return 1;
	Report R = {.g = g, .po = po, .d = d, .mode = MODE_WRITES, .after = "sema"};
	walk(g, vpar, 0, report_races, &R);
	return R.errors == 0;
}
