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

#include "sgc.h"

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
races_attr0(const Node *n, const char *name)
{
	if (n->nattr > 0)
		return n->attr[0].set ? &n->attr[0] : NULL;
	return ir_attr(n, name);
}

/* Decodes the sync a node performs (see sgc.h). */
int
races_sync(const Node *n, uint32_t *target)
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
		const Attr *a = races_attr0(n, "event");
		if (!a)
			return -1;
		*target = (uint32_t)a->i;
		return OP_WAIT_EVENT;
	}
	case OP_CONTROL_DEPS: {
		const Attr *a = races_attr0(n, "sync");
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
	int op = n->op == OP_SYNC_DEALLOC && h->no_dealloc ? -1 : races_sync(n, &t);
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

/* ------------------------------------------------------------------ storage */

/* Storage classes: each control_deps result joins its operand's class. */
void
races_roots(const Graph *g, ValId *root)
{
	for (ValId v = 0; v < g->vals.n; v++)
		root[v] = v;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if ((n->flags & NF_DEAD) || n->op != OP_CONTROL_DEPS)
			continue;
		uint32_t j = 0;
		for (uint32_t k = 0; k < n->nopnd && j < n->nres; k++)
			if (n->opnd[k].kind == OK_VAL)
				root[n->res[j++]] = root[n->opnd[k].v];
	}
}

/* Work the compiler made (or derived): rule 3 applies to it. */
int
races_compiler_made(const Node *n)
{
	return (n->flags & NF_BACKWARD) || !(n->flags & NF_USER);
}

/* ------------------------------------------------------------------ building */

/* A fresh local event; the printer declares it with the others. */
uint32_t
races_event_new(Graph *g, const char *base)
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

/* A fresh value name for compiler-made values (see sgc.h). */
ValId
races_value_new(Graph *g, const char *base, int in_block, Loc loc)
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
races_node(Graph *g, int op, uint32_t nopnd, uint32_t nres, uint32_t stream,
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
races_sync_node(Graph *g, int op, uint32_t target, uint32_t s, Loc loc)
{
	Node n = races_node(g, op, op == OP_SYNCHRONIZE ? 0 : 1, 0, s, 0, loc);
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

/* Orders (slot << 32 | rank << 24 | index) keys. */
static int
key_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
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
	qsort(key, n, sizeof *key, key_cmp);
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
races_insert(Graph *g, NodeInsVec *ins)
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
		          W->g->nodes.v[W->freed[r]].stream};
		vec_push(&W->found, x);
		return;
	}
	if (W->defined[r] && !HB_DONE(c, W->wstream[r], wpos)) {
		Race x = {RACE_RAW, W->wdef[r], k, v, w, W->wstream[r]};
		vec_push(&W->found, x);
	}
	if (acc != RACC_WRITE)
		return;
	for (uint32_t t = 0; t < ns; t++) {
		int32_t p = W->rd[(size_t)r * ns + t];
		if (p > 0 && p != (int32_t)i + 1 && !HB_DONE(c, t, p)) {
			Race x = {RACE_WAR, 0, k, v, (NodeId)p - 1, t};
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
	for (uint32_t k = 0; k < n->nopnd; k++) {
		int acc = races_access(n, k);
		if (acc == RACC_NONE)
			continue;
		ValId r = W->root[n->opnd[k].v];
		int32_t *p = &W->rd[(size_t)r * ns + n->stream];
		if ((int32_t)i + 1 > *p)
			*p = (int32_t)i + 1;
	}
	for (uint32_t k = 0; k < n->nopnd; k++) {
		if (races_access(n, k) != RACC_WRITE)
			continue;
		ValId r = W->root[n->opnd[k].v];
		W->lastw[r] = i;
		W->wstream[r] = n->stream;
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
		Race x = {RACE_FREE, W->wdef[r], 0, v, w, W->wstream[r]};
		vec_push(&W->found, x);
	}
	for (uint32_t t = 0; t < ns; t++) {
		int32_t p = W->rd[(size_t)r * ns + t];
		if (p > 0 && !HB_DONE(c, t, p)) {
			Race x = {RACE_FREE, 0, 0, v, (NodeId)p - 1, t};
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
				          g->nodes.v[W->freed[r]].stream};
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
		int acc = races_access(n, k);
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
			Race x = {RACE_RET, W->wdef[r], NONE, g->rets.v[i], w, W->wstream[r]};
			vec_push(&W->found, x);
		}
	}
	for (uint32_t t = 1; t < W->h.ns; t++) {
		NodeId last = W->h.laston[t];
		if (last != NONE && !HB_DONE(c, t, last + 1)) {
			Race x = {RACE_JOIN, 0, NONE, NONE, last, t};
			vec_push(&W->found, x);
		}
	}
	if (W->found.n)
		fn(ctx, &W->h, g->nodes.n, W->found.v, W->found.n);
}

/* One walk in program order over clocks and storage (see sgc.h). */
void
races_walk(Graph *g, unsigned what, RaceFn fn, void *ctx)
{
	Walk W = {.g = g};
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
	if (!W.wstream || !W.astream || !W.defined || !W.wdef)
		out_of_memory(0);
	races_roots(g, W.root);
	for (ValId v = 0; v < nv; v++) {
		W.lastw[v] = NONE;
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
	vec_free(&W.found);
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
	const Node *p = &g->nodes.v[x->prev];
	if (x->kind == RACE_AFTER_FREE)
		diag_note(R->d, p->loc, "its memory is released here");
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
	const Node *p = &g->nodes.v[x->prev], *n = &g->nodes.v[i];
	const char *ps = stream_name(R, x->pstream), *cs = stream_name(R, n->stream);
	uint32_t e, e2;
	for (NodeId r = x->prev; r-- > 0;) {
		const Node *rec = &g->nodes.v[r];
		if (rec->stream != x->pstream || races_sync(rec, &e) != OP_RECORD_EVENT)
			continue;
		for (NodeId w = r + 1; w < i; w++) {
			const Node *wn = &g->nodes.v[w];
			if (wn->stream == n->stream && races_sync(wn, &e2) == OP_WAIT_EVENT &&
			    e2 == e) {
				const char *en = g->events.v[e].name;
				diag_note(R->d, rec->loc, "'record_event(%s)' on '%s' comes before "
				          "'%s' is %s on line %u; move it after that line, so that "
				          "'wait_event(%s)' on line %u orders them", en, ps, nm,
				          x->pdef ? "produced" : "read", p->loc.line, en,
				          wn->loc.line);
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
		snprintf(buf, cap, "'%s' is used on stream '%s' but produced on '%s' with "
		         "no event between them", nm, s, t);
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
		if (R->mode == MODE_WRITES && x->kind != RACE_WAR)
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

/* Write-after-read races of the user's in-place ops, for functionalize. */
int
races_check_writes(Graph *g, const PassOptions *po, Diag *d)
{
	if (po->test_drop_sync)
		return 1;
	Report R = {.g = g, .po = po, .d = d, .mode = MODE_WRITES, .after = "sema"};
	races_walk(g, 0, report_races, &R);
	return R.errors == 0;
}
