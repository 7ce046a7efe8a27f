/*
 * memplan.c - the static memory plan (rule 7) and its independent checker.
 *
 * Each storage class (a value and its control_deps aliases) made by a node
 * is one buffer, written first by that node on its stream.  Inputs, params
 * and consts are the caller's and the model's; returned values are
 * separate outputs (they outlive the call); host values (to_host) go to a
 * pinned host arena, the rest to the device arena.
 *
 * Offsets are given first-fit in program order of allocation.  A new
 * buffer B may take memory of an earlier buffer A only when every access
 * of A (its producer, reads, in-place writes, on any stream) happens
 * before B's producer starts, in the happens-before order of races.c.  On
 * A's own stream that is stream order once A's uses elsewhere are ordered
 * (which is what sync_dealloc, rule 8, gives); on another stream it takes
 * an event path after every use: rule 7.  -O0 reuses nothing.
 *
 * One exception, in place: B's producer is an elementwise kernel (each
 * element of B made from the elements of its same-shaped operands at the
 * same index; or the kernel library's cross_entropy backward, whose
 * gradient element i is made from logit i and the row's saved lse) whose
 * operand A, of B's type and stream, dies there (every other access
 * happens before it).  B then takes A's bytes (MemBuf
 * .inplace), as PyTorch's in-place ops and XLA's buffer donation do: the
 * kernel reads each element of A before it writes the same element of B.
 *
 * memplan_verify checks a plan without the vector clocks: it builds the
 * happens-before relation as explicit reachability (an ancestor bitset per
 * node over program-order, event, wait_stream and synchronize edges) and
 * requires, for every two buffers whose bytes overlap, that every access
 * of the earlier one is an ancestor of the later one's producer.
 */
#include <inttypes.h>
#include <string.h>

#include "passes.h"

enum { ALIGN = 256, VERIFY_MAX = MEMPLAN_VERIFY_MAX };

typedef struct {
	Graph *g;
	const NodeId *def; /* per value: its defining node, or NULL: g's */
	const uint8_t *ew; /* per node: an elementwise kernel, or NULL: none */
	uint8_t *taken;    /* per buffer: a later buffer took its bytes in place */
	MemPlan *mp;
	Hb h;
	ValId *root;
	int32_t *maxacc;  /* nbuf x ns: last access position per stream */
	uint64_t *by_alloc; /* alloc << 32 | b, ascending: the buffers in program
	                       order of their allocation (values made by later
	                       passes last in value order) */
} Build;

uint64_t
memplan_buf_size(const Type *t)
{
	uint64_t n = (uint64_t)type_numel(t) * (uint64_t)dtype_size((DType)t->dt);
	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* One buffer per class made by a live node. */
static void
make_buffers(Build *B)
{
	Graph *g = B->g;
	MemPlan *mp = B->mp;
	uint8_t *kept = calloc(g->vals.n + 1, 1);
	if (!kept)
		out_of_memory(0);
	for (uint32_t i = 0; i < g->rets.n; i++)
		kept[B->root[g->rets.v[i]]] = 1;
	for (ValId v = 0; v < g->vals.n; v++) {
		mp->bufof[v] = NONE;
		const Value *val = &g->vals.v[v];
		NodeId d = B->def ? B->def[v] : val->def;
		if (B->root[v] != v || val->kind != VK_NODE || d == NONE ||
		    d >= g->nodes.n || (g->nodes.v[d].flags & NF_DEAD))
			continue;
		MemBuf b = {.v = v, .stream = g->nodes.v[d].stream,
		            .alloc = d, .last = d, .release = NONE, .inplace = NONE,
		            .size = memplan_buf_size(&val->type)};
		b.where = kept[v] ? MEM_OUTPUT : val->type.host ? MEM_HOST : MEM_DEVICE;
		mp->bufof[v] = mp->nbuf;
		mp->buf[mp->nbuf++] = b;
	}
	for (ValId v = 0; v < g->vals.n; v++)
		mp->bufof[v] = mp->bufof[B->root[v]];
	free(kept);
}

/* Last accesses per buffer and stream, and the release points. */
static void
find_accesses(Build *B)
{
	Graph *g = B->g;
	MemPlan *mp = B->mp;
	uint32_t ns = g->streams.n;
	for (size_t i = 0; i < (size_t)mp->nbuf * ns; i++)
		B->maxacc[i] = -1;
	for (uint32_t b = 0; b < mp->nbuf; b++)
		B->maxacc[(size_t)b * ns + mp->buf[b].stream] = (int32_t)mp->buf[b].alloc + 1;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_SYNC_DEALLOC && mp->bufof[n->opnd[0].v] != NONE)
			mp->buf[mp->bufof[n->opnd[0].v]].release = i;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			uint32_t b = ir_access(n, k) == RACC_NONE ? NONE : mp->bufof[n->opnd[k].v];
			if (b == NONE)
				continue;
			B->maxacc[(size_t)b * ns + n->stream] = (int32_t)i + 1;
			mp->buf[b].last = i;
		}
	}
	for (uint32_t b = 0; b < mp->nbuf; b++)
		if (mp->buf[b].release == NONE)
			mp->buf[b].release = mp->buf[b].last;
}

/* ------------------------------------------------------------------ free space */

/*
 * The spans that may be live with a new buffer on one stream, as a treap
 * over their ends: a key counts the spans starting and ending there.  The
 * coverage of a point (how many spans hold it) is the sum of starts - ends
 * of the keys up to it, so the free runs go from a key of prefix sum 0 to
 * the next key (the last key's run is endless).  First fit is [0, first
 * key) when long enough, else the first such run long enough: one descent,
 * with each subtree's least prefix sum (relative to its start) and the
 * longest run among its keys of that sum.  This is the offset the scan of
 * the spans sorted by offset gives, in O(log n) per change and query.
 */
#define TR_INF UINT64_MAX

typedef struct {
	uint64_t key, gap, best; /* gap: to the next key; best: see above */
	uint32_t prio, l, r, nstart, nend;
	int32_t sum, minp;       /* of the subtree: starts - ends, least prefix */
} TrNode;

typedef struct {
	TrNode *t;               /* t[0] stands for the empty tree */
	uint32_t n, cap, freel, root, seed;
	uint32_t fix;            /* a node whose gap changes to fixgap */
	uint64_t fixgap;
} Treap;

/* A subtree's sums from its children's and its own key's. */
static void
tr_pull(TrNode *t, uint32_t x)
{
	TrNode *p = &t[x];
	int32_t ls = p->l ? t[p->l].sum : 0;
	int32_t here = ls + (int32_t)p->nstart - (int32_t)p->nend;
	int32_t m = here;
	uint64_t best = p->gap;
	if (p->l && t[p->l].minp <= m) {
		best = t[p->l].minp < m || t[p->l].best > best ? t[p->l].best : best;
		m = t[p->l].minp;
	}
	if (p->r && here + t[p->r].minp <= m) {
		best = here + t[p->r].minp < m || t[p->r].best > best ? t[p->r].best : best;
		m = here + t[p->r].minp;
	}
	p->sum = here + (p->r ? t[p->r].sum : 0);
	p->minp = m;
	p->best = best;
}

/* A new key with no spans yet, its gap up to succ (0: none). */
static uint32_t
tr_node(Treap *T, uint64_t key, uint32_t succ)
{
	uint32_t x = T->freel;
	if (x)
		T->freel = T->t[x].l;
	else {
		if (T->n >= T->cap) {
			T->cap = T->cap ? 2 * T->cap : 64;
			T->t = xrealloc(T->t, T->cap * sizeof *T->t);
			memset(&T->t[0], 0, sizeof *T->t);
		}
		x = T->n++;
	}
	T->seed ^= T->seed << 13;
	T->seed ^= T->seed >> 17;
	T->seed ^= T->seed << 5;
	TrNode *p = &T->t[x];
	memset(p, 0, sizeof *p);
	p->key = key;
	p->prio = T->seed;
	p->gap = succ ? T->t[succ].key - key : TR_INF;
	return x;
}

/* Rotates x's left (right: dir 1) child up; returns it. */
static uint32_t
tr_rotate(TrNode *t, uint32_t x, int dir)
{
	uint32_t y;
	if (dir == 0) {
		y = t[x].l;
		t[x].l = t[y].r;
		t[y].r = x;
	} else {
		y = t[x].r;
		t[x].r = t[y].l;
		t[y].l = x;
	}
	tr_pull(t, x);
	tr_pull(t, y);
	return y;
}

/* The gap fix of a path node, then its sums. */
static void
tr_up(Treap *T, uint32_t x)
{
	if (x == T->fix)
		T->t[x].gap = T->fixgap;
	tr_pull(T->t, x);
}

/* Removes key (at x, rotated down to a leaf) from subtree x; pred and succ
 * are the nearest keys below and above on the path (0: none). */
static uint32_t
tr_erase(Treap *T, uint32_t x, uint32_t pred, uint32_t succ)
{
	TrNode *t = T->t;
	if (!t[x].l && !t[x].r) {
		if (pred) {
			T->fix = pred;
			T->fixgap = succ ? t[succ].key - t[pred].key : TR_INF;
		}
		t[x].l = T->freel;
		T->freel = x;
		return 0;
	}
	uint32_t y;
	if (!t[x].r || (t[x].l && t[t[x].l].prio > t[t[x].r].prio)) {
		y = t[x].l;
		t[x].l = t[y].r;
		t[y].r = x;
		t[y].r = tr_erase(T, x, y, succ);
	} else {
		y = t[x].r;
		t[x].r = t[y].l;
		t[y].l = x;
		t[y].l = tr_erase(T, x, pred, y);
	}
	tr_up(T, y);
	return y;
}

/* Adds ds starts and de ends (either negative: removes) at key in subtree
 * x; the key is made or dropped as needed.  Returns the new subtree. */
static uint32_t
tr_add(Treap *T, uint32_t x, uint64_t key, int ds, int de, uint32_t pred,
       uint32_t succ)
{
	if (!x) {
		x = tr_node(T, key, succ);
		if (pred) {
			T->fix = pred;
			T->fixgap = key - T->t[pred].key;
		}
		T->t[x].nstart = (uint32_t)ds;
		T->t[x].nend = (uint32_t)de;
		tr_pull(T->t, x);
		return x;
	}
	if (key == T->t[x].key) {
		T->t[x].nstart += (uint32_t)ds;
		T->t[x].nend += (uint32_t)de;
		if (!T->t[x].nstart && !T->t[x].nend)
			return tr_erase(T, x, pred, succ);
		tr_pull(T->t, x);
		return x;
	}
	int dir = key > T->t[x].key;
	uint32_t c = dir ? tr_add(T, T->t[x].r, key, ds, de, x, succ)
	                 : tr_add(T, T->t[x].l, key, ds, de, pred, x);
	if (dir)
		T->t[x].r = c;
	else
		T->t[x].l = c;
	tr_up(T, x);
	if (c && T->t[c].prio > T->t[x].prio)
		x = tr_rotate(T->t, x, dir);
	return x;
}

/* Adds (sign 1) or removes (sign -1) the span [off, end). */
static void
tr_span(Treap *T, uint64_t off, uint64_t end, int sign)
{
	T->fix = 0;
	T->root = tr_add(T, T->root, off, sign, 0, 0, 0);
	T->fix = 0;
	T->root = tr_add(T, T->root, end, 0, sign, 0, 0);
}

/* The first offset where size bytes are free of every span. */
static uint64_t
tr_first_fit(const Treap *T, uint64_t size)
{
	const TrNode *t = T->t;
	uint32_t x = T->root, f = x;
	if (!x)
		return 0;
	while (t[f].l)
		f = t[f].l;
	if (t[f].key >= size)
		return 0;
	int32_t pre = 0;
	while (x) {
		const TrNode *p = &t[x];
		if (p->l && pre + t[p->l].minp == 0 && t[p->l].best >= size) {
			x = p->l;
			continue;
		}
		pre += (p->l ? t[p->l].sum : 0) + (int32_t)p->nstart - (int32_t)p->nend;
		if (pre == 0 && p->gap >= size)
			return p->key;
		x = p->r;
	}
	ICE("memory plan: no free run after the last span");
}

/* A min-heap of (position << 32 | buffer). */
typedef struct {
	uint64_t *v;
	uint32_t n, cap;
} Heap;

/* Adds x to the heap. */
static void
heap_push(Heap *h, uint64_t x)
{
	if (h->n == h->cap) {
		h->cap = h->cap ? 2 * h->cap : 16;
		h->v = xrealloc(h->v, h->cap * sizeof *h->v);
	}
	uint32_t i = h->n++;
	while (i && h->v[(i - 1) / 2] > x) {
		h->v[i] = h->v[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->v[i] = x;
}

/* Removes the least entry. */
static void
heap_pop(Heap *h)
{
	uint64_t x = h->v[--h->n];
	uint32_t i = 0;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1] < h->v[c])
			c++;
		if (h->v[c] >= x)
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = x;
}

/* The placed buffers that may still be live with a new buffer on one
 * stream.  `seen` counts the placed buffers looked at so far; each one not
 * yet ordered before waits in wait[t] for the first stream t whose last
 * access of it the stream's clock does not cover yet, keyed by that
 * access; its span is in `tree`. */
typedef struct {
	Heap *wait;
	Treap tree;
	uint32_t seen;
} Cand;

/* The first stream from t on whose accesses of buffer a clock c does not
 * cover yet, or ns when it covers them all (a is ordered before). */
static uint32_t
first_open(Build *B, uint32_t a, const int32_t *c, uint32_t t)
{
	uint32_t ns = B->g->streams.n;
	const int32_t *acc = B->maxacc + (size_t)a * ns;
	while (t < ns && (acc[t] < 0 || HB_DONE(c, t, acc[t])))
		t++;
	return t;
}

/* Buffer a waits on stream t of candidate set c, or leaves it (t == ns). */
static void
cand_wait(Build *B, Cand *c, uint32_t a, uint32_t t)
{
	uint32_t ns = B->g->streams.n;
	const MemBuf *x = &B->mp->buf[a];
	if (t < ns)
		heap_push(&c->wait[t], (uint64_t)B->maxacc[(size_t)a * ns + t] << 32 | a);
	else
		tr_span(&c->tree, x->offset, x->offset + x->size, -1);
}

/* Brings c up to b's producer: the placed buffers not seen yet join it
 * unless ordered before b already; the waiting ones whose accesses b's
 * clock now covers move on to their next stream or leave.  Happens-before
 * grows along a stream, so a buffer ordered before b is ordered before
 * every later producer on b's stream too. */
static void
cand_update(Build *B, uint32_t b, const uint32_t *placed, uint32_t np, Cand *c)
{
	uint32_t ns = B->g->streams.n;
	const int32_t *clk = hb_before(&B->h, B->mp->buf[b].alloc);
	for (; c->seen < np; c->seen++) {
		uint32_t a = placed[c->seen], t = first_open(B, a, clk, 0);
		const MemBuf *x = &B->mp->buf[a];
		if (t == ns)
			continue;
		tr_span(&c->tree, x->offset, x->offset + x->size, 1);
		cand_wait(B, c, a, t);
	}
	for (uint32_t t = 0; t < ns; t++) {
		Heap *h = &c->wait[t];
		while (h->n && HB_DONE(clk, t, (int32_t)(h->v[0] >> 32))) {
			uint32_t a = (uint32_t)h->v[0];
			heap_pop(h);
			cand_wait(B, c, a, first_open(B, a, clk, t + 1));
		}
	}
}

/* The operand buffer whose bytes buffer b may take in place (see the top),
 * or NONE: b's producer is an elementwise kernel, and the operand is of
 * b's value's type, on its stream, not taken yet, accessed last there and
 * before it on every other stream. */
static uint32_t
inplace_source(Build *B, uint32_t b)
{
	const MemBuf *x = &B->mp->buf[b];
	const Graph *g = B->g;
	if (!B->ew || !B->ew[x->alloc])
		return NONE;
	const Node *n = &g->nodes.v[x->alloc];
	const Type *t = &g->vals.v[x->v].type;
	int xent = n->op == OP_CROSS_ENTROPY_BACKWARD; /* its logits, by flat index */
	if (n->op >= OP__N || (!(op_table[n->op].flags & OPF_POINTWISE) && !xent))
		return NONE;
	const int32_t *clk = hb_before(&B->h, x->alloc);
	uint32_t ns = g->streams.n;
	for (uint32_t k = 0; k < n->nopnd; k++) {
		if (n->opnd[k].kind != OK_VAL)
			continue;
		ValId v = n->opnd[k].v;
		uint32_t a = B->mp->bufof[v];
		if (a == NONE || a == b || B->taken[a] || B->root[v] != v)
			continue;
		const MemBuf *y = &B->mp->buf[a];
		const Type *u = &g->vals.v[v].type;
		if (y->where != x->where || y->stream != x->stream || y->size != x->size ||
		    u->dt != t->dt || (xent ? k != 1 || type_numel(u) != type_numel(t)
		                            : !type_same_shape(u, t)))
			continue;
		const int32_t *acc = B->maxacc + (size_t)a * ns;
		uint32_t s = 0;
		while (s < ns && (s == x->stream ? acc[s] == (int32_t)x->alloc + 1
		                                 : acc[s] < 0 || HB_DONE(clk, s, acc[s])))
			s++;
		if (s == ns)
			return a;
	}
	return NONE;
}

/* First fit of buffer b among the placed buffers of its arena that may be
 * live with it (the plan is the same as comparing b with every placed
 * buffer and scanning their spans in order of offset), or the bytes of
 * the operand it takes in place. */
static void
place(Build *B, uint32_t b, const uint32_t *placed, uint32_t np, Cand *c)
{
	MemBuf *x = &B->mp->buf[b];
	cand_update(B, b, placed, np, c);
	uint32_t a = inplace_source(B, b);
	if (a != NONE) {
		B->taken[a] = 1;
		x->inplace = a;
		x->offset = B->mp->buf[a].offset;
		return;
	}
	x->offset = tr_first_fit(&c->tree, x->size);
}

/* Offsets of the buffers of one arena, first fit in allocation order.
 * Empty buffers sit at 0 and block nothing.  Without reuse (-O0) every
 * placed buffer blocks every later one, so first fit packs them end to
 * end: the offset is the sum of the sizes before. */
static void
place_arena(Build *B, int where, uint64_t *peak)
{
	MemPlan *mp = B->mp;
	uint32_t ns = B->g->streams.n;
	uint32_t *placed = xmalloc((mp->nbuf + 1) * sizeof *placed), np = 0;
	Cand *cand = calloc(ns + 1, sizeof *cand);
	if (!cand)
		out_of_memory(0);
	for (uint32_t s = 0; s < ns; s++) {
		cand[s].wait = calloc(ns, sizeof *cand[s].wait);
		cand[s].tree.seed = 2463534242u;
		cand[s].tree.n = 1; /* t[0]: the empty tree */
		if (!cand[s].wait)
			out_of_memory(0);
	}
	*peak = 0;
	for (uint32_t ob = 0; ob < mp->nbuf; ob++) {
		uint32_t b = (uint32_t)B->by_alloc[ob];
		MemBuf *x = &mp->buf[b];
		if (x->where != where)
			continue;
		if (!x->size)
			x->offset = 0;
		else if (mp->opt_level <= 0)
			x->offset = *peak;
		else
			place(B, b, placed, np, &cand[x->stream]);
		if (x->size)
			placed[np++] = b;
		if (x->offset + x->size > *peak)
			*peak = x->offset + x->size;
	}
	for (uint32_t s = 0; s < ns; s++) {
		for (uint32_t t = 0; t < ns; t++)
			free(cand[s].wait[t].v);
		free(cand[s].wait);
		free(cand[s].tree.t);
	}
	free(cand);
	free(placed);
}

/* ------------------------------------------------------------------ by size */

/*
 * A second plan, for arenas of at most BYSIZE_MAX buffers: greedy by size,
 * the offset calculation of TFLite's planner (Pisarchyk and Lee, "Efficient
 * memory management for deep neural net inference", 2020).  The largest
 * unit goes first; each goes to the smallest gap that holds it among the
 * placed units it may be live with, else right above them.  A unit is a
 * chain of buffers that first fit put in place (each takes the bytes of
 * the one before), placed as one.  Two units may share bytes when every
 * access of the one allocated first happens before the other's producer,
 * the rule first fit keeps.  place_arena keeps whichever plan has the
 * lower peak, first fit on a tie: first fit in program order leaves holes
 * where a value's bytes come free in the middle of long-lived ones (an
 * offloaded activation's, say), and by size packs the long-lived first.
 * Its cost is quadratic in the units, hence the bound.
 */
enum { BYSIZE_MAX = 4096 };

typedef struct {
	uint32_t b;       /* its first buffer */
	uint64_t size, offset;
	int32_t *acc;     /* ns: last access position per stream, all members */
} Unit;

/* Unit u's accesses all happen before unit w's producer (u made first). */
static int
unit_before(Build *B, const Unit *u, const Unit *w)
{
	const int32_t *clk = hb_before(&B->h, B->mp->buf[w->b].alloc);
	uint32_t ns = B->g->streams.n;
	for (uint32_t t = 0; t < ns; t++)
		if (u->acc[t] >= 0 && !HB_DONE(clk, t, u->acc[t]))
			return 0;
	return 1;
}

static int
unit_cmp(const void *pa, const void *pb)
{
	const Unit *a = pa, *b = pb;
	if (a->size != b->size)
		return a->size < b->size ? 1 : -1;
	return a->b < b->b ? -1 : a->b > b->b;
}

/* Greedy by size over the buffers of arena `where`; writes their offsets
 * and returns the peak only when it is below `peak` (first fit's), else
 * leaves them and returns `peak`. */
static uint64_t
place_by_size(Build *B, int where, uint64_t peak)
{
	MemPlan *mp = B->mp;
	uint32_t ns = B->g->streams.n, nu = 0;
	uint32_t *unitof = xmalloc((mp->nbuf + 1) * sizeof *unitof);
	for (uint32_t b = 0; b < mp->nbuf; b++) {
		const MemBuf *x = &mp->buf[b];
		unitof[b] = NONE;
		if (x->where == (uint8_t)where && x->size && x->inplace == NONE)
			unitof[b] = nu++;
	}
	if (nu < 2 || nu > BYSIZE_MAX) {
		free(unitof);
		return peak;
	}
	Unit *u = xmalloc(nu * sizeof *u);
	int32_t *accs = xmalloc((size_t)nu * ns * sizeof *accs);
	for (uint32_t b = 0; b < mp->nbuf; b++)
		if (unitof[b] != NONE) {
			Unit *x = &u[unitof[b]];
			x->b = b;
			x->size = mp->buf[b].size;
			x->acc = accs + (size_t)unitof[b] * ns;
			for (uint32_t t = 0; t < ns; t++)
				x->acc[t] = -1;
		}
	/* chains: a buffer taking another's bytes joins that one's unit (the
	 * one it takes is made first, so its unit is known) */
	uint32_t *bs = xmalloc((mp->nbuf + 1) * sizeof *bs), nb = 0;
	for (uint32_t i = 0; i < mp->nbuf; i++) {
		uint32_t b = (uint32_t)B->by_alloc[i];
		if (mp->buf[b].where == (uint8_t)where && mp->buf[b].size)
			bs[nb++] = b;
	}
	for (uint32_t i = 0; i < nb; i++) {
		uint32_t b = bs[i];
		if (unitof[b] == NONE)
			unitof[b] = unitof[mp->buf[b].inplace];
		int32_t *acc = u[unitof[b]].acc, *m = B->maxacc + (size_t)b * ns;
		for (uint32_t t = 0; t < ns; t++)
			acc[t] = m[t] > acc[t] ? m[t] : acc[t];
	}
	qsort(u, nu, sizeof *u, unit_cmp);
	/* unit_cmp moved the units: renumber */
	for (uint32_t i = 0; i < nu; i++)
		unitof[u[i].b] = i;
	for (uint32_t i = 0; i < nb; i++) {
		uint32_t b = bs[i];
		if (mp->buf[b].inplace != NONE)
			unitof[b] = unitof[mp->buf[b].inplace];
	}
	/* the placed units in order of offset: a walk over them gives the
	 * gaps between those live with the new one, without a sort */
	uint32_t *byoff = xmalloc((nu + 1) * sizeof *byoff), np = 0;
	uint64_t top = 0;
	for (uint32_t i = 0; i < nu; i++) {
		const Unit *c = &u[i];
		uint64_t end = 0, best = UINT64_MAX, at = 0;
		for (uint32_t k = 0; k < np; k++) {
			const Unit *a = &u[byoff[k]];
			int first = mp->buf[a->b].alloc < mp->buf[c->b].alloc ||
			            (mp->buf[a->b].alloc == mp->buf[c->b].alloc && a->b < c->b);
			if (first ? unit_before(B, a, c) : unit_before(B, c, a))
				continue;
			uint64_t gap = a->offset > end ? a->offset - end : 0;
			if (gap >= c->size && gap < best) {
				best = gap;
				at = end;
			}
			end = a->offset + a->size > end ? a->offset + a->size : end;
		}
		u[i].offset = best == UINT64_MAX ? end : at;
		if (u[i].offset + u[i].size > top)
			top = u[i].offset + u[i].size;
		uint32_t k = np++;
		for (; k > 0 && u[byoff[k - 1]].offset > u[i].offset; k--)
			byoff[k] = byoff[k - 1];
		byoff[k] = i;
	}
	if (top < peak)
		for (uint32_t i = 0; i < nb; i++)
			mp->buf[bs[i]].offset = u[unitof[bs[i]]].offset;
	free(byoff);
	free(bs);
	free(accs);
	free(u);
	free(unitof);
	return top < peak ? top : peak;
}

/* Buffers, their accesses and clocks, then offsets in each arena. */
void
memplan_build(Graph *g, int opt_level, MemPlan *mp)
{
	memplan_build_at(g, NULL, NULL, opt_level, mp);
}

void
memplan_build_at(Graph *g, const NodeId *def, const uint8_t *ew, int opt_level,
                 MemPlan *mp)
{
	memset(mp, 0, sizeof *mp);
	mp->opt_level = opt_level;
	uint32_t nv = g->vals.n;
	Build B = {.g = g, .def = def, .ew = ew, .mp = mp};
	B.root = xmalloc((nv + 1) * sizeof *B.root);
	mp->buf = xmalloc((nv + 1) * sizeof *mp->buf);
	mp->bufof = xmalloc((nv + 1) * sizeof *mp->bufof);
	ir_alias_roots(g, B.root);
	make_buffers(&B);
	B.maxacc = xmalloc(((size_t)mp->nbuf * g->streams.n + 1) * sizeof *B.maxacc);
	B.taken = calloc(mp->nbuf + 1, 1);
	if (!B.taken)
		out_of_memory(0);
	find_accesses(&B);
	hb_init(&B.h, g);
	for (NodeId i = 0; i < g->nodes.n; i++)
		hb_step(&B.h, i);
	B.by_alloc = xmalloc((mp->nbuf + 1) * sizeof *B.by_alloc);
	for (uint32_t b = 0; b < mp->nbuf; b++)
		B.by_alloc[b] = (uint64_t)mp->buf[b].alloc << 32 | b;
	sort_u64(B.by_alloc, mp->nbuf);
	place_arena(&B, MEM_DEVICE, &mp->peak);
	place_arena(&B, MEM_HOST, &mp->host_peak);
	if (opt_level > 0) {
		mp->peak = place_by_size(&B, MEM_DEVICE, mp->peak);
		mp->host_peak = place_by_size(&B, MEM_HOST, mp->host_peak);
	}
	for (uint32_t b = 0; b < mp->nbuf; b++) {
		if (mp->buf[b].where == MEM_OUTPUT)
			mp->outputs += mp->buf[b].size;
		else if (mp->buf[b].where == MEM_DEVICE)
			mp->unshared += mp->buf[b].size;
	}
	hb_free(&B.h);
	free(B.root);
	free(B.maxacc);
	free(B.taken);
	free(B.by_alloc);
}

/* Frees a plan. */
void
memplan_free(MemPlan *mp)
{
	free(mp->buf);
	free(mp->bufof);
	memset(mp, 0, sizeof *mp);
}

/* ------------------------------------------------------------------ the checker */

typedef struct {
	uint32_t nn, words;
	uint64_t *anc;   /* nn x words: the nodes that happen before node i */
} Reach;

/* p happens before i: i gets p and its ancestors. */
static void
add_pred(Reach *R, NodeId i, NodeId p)
{
	if (p == NONE || p >= i)
		return;
	uint64_t *a = R->anc + (size_t)i * R->words, *b = R->anc + (size_t)p * R->words;
	for (uint32_t w = 0; w < R->words; w++)
		a[w] |= b[w];
	a[p / 64] |= (uint64_t)1 << (p % 64);
}

/* Whether p happens before i. */
static int
reaches(const Reach *R, NodeId p, NodeId i)
{
	return (R->anc[(size_t)i * R->words + p / 64] >> (p % 64)) & 1;
}

/* One ordering edge (ir_order_edges: program order per stream, the last
 * record of an event before a wait, all work on a stream before a
 * wait_stream, everything before and after a synchronize): `to` gets
 * `from` and its ancestors. */
static void
reach_edge(void *ctx, NodeId from, NodeId to, IrAfter kind, uint32_t via)
{
	(void)kind, (void)via;
	add_pred(ctx, to, from);
}

/* Every node accessing each buffer (its producer first). */
static void
buffer_accesses(Graph *g, const MemPlan *mp, NodeId **acc, uint32_t **nacc)
{
	uint32_t *cnt = calloc(mp->nbuf + 1, sizeof *cnt);
	uint32_t *start = xmalloc((mp->nbuf + 2) * sizeof *start);
	if (!cnt)
		out_of_memory(0);
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t b = 0; b < mp->nbuf; b++)
			cnt[b] = 0;
		for (uint32_t b = 0; b < mp->nbuf; b++) {
			if (pass)
				(*acc)[start[b]] = mp->buf[b].alloc;
			cnt[b]++;
		}
		for (NodeId i = 0; i < g->nodes.n; i++) {
			const Node *n = &g->nodes.v[i];
			if (n->flags & NF_DEAD)
				continue;
			for (uint32_t k = 0; k < n->nopnd; k++) {
				uint32_t b = ir_access(n, k) == RACC_NONE ? NONE : mp->bufof[n->opnd[k].v];
				if (b == NONE)
					continue;
				if (pass)
					(*acc)[start[b] + cnt[b]] = i;
				cnt[b]++;
			}
		}
		if (!pass) {
			start[0] = 0;
			for (uint32_t b = 0; b < mp->nbuf; b++)
				start[b + 1] = start[b] + cnt[b];
			*acc = xmalloc((start[mp->nbuf] + 1) * sizeof **acc);
		}
	}
	for (uint32_t b = 0; b <= mp->nbuf; b++)
		cnt[b] = start[b];
	*nacc = cnt;
	free(start);
}

/* Buffers a and b overlap in memory: is every access of the earlier one
 * before the later one's producer? */
static int
pair_ok(Graph *g, const MemPlan *mp, const Reach *R, const NodeId *acc,
        const uint32_t *from, uint32_t a, uint32_t b, char *why)
{
	const MemBuf *x = &mp->buf[a], *y = &mp->buf[b];
	if (x->alloc > y->alloc || (x->alloc == y->alloc && a > b)) {
		const MemBuf *t = x;
		x = y;
		y = t;
		uint32_t u = a;
		a = b;
		b = u;
	}
	/* in place: y's producer reads x there for the last time (it is one
	 * of x's accesses), x of y's size and stream */
	int inplace = y->inplace == a && x->size == y->size && x->offset == y->offset &&
	              x->stream == y->stream;
	for (uint32_t j = from[a]; j < from[a + 1]; j++) {
		if (inplace && acc[j] == y->alloc)
			continue;
		if (!reaches(R, acc[j], y->alloc) || acc[j] == y->alloc) {
			snprintf(why, 256, "'%%%s' [%" PRIu64 ", %" PRIu64 ") and '%%%s' [%"
			         PRIu64 ", %" PRIu64 ") share memory, but '%%%s' is accessed by "
			         "node %u (line %u), which may run after '%%%s' is written",
			         g->vals.v[x->v].name, x->offset, x->offset + x->size,
			         g->vals.v[y->v].name, y->offset, y->offset + y->size,
			         g->vals.v[x->v].name, acc[j], g->nodes.v[acc[j]].loc.line,
			         g->vals.v[y->v].name);
			return 0;
		}
	}
	return 1;
}

/* The checker (see the top): every overlapping pair, every access. */
int
memplan_verify(Graph *g, const MemPlan *mp, char *why)
{
	why[0] = 0;
	if (g->nodes.n > VERIFY_MAX)
		return -1;
	Reach R = {.nn = g->nodes.n, .words = (g->nodes.n + 63) / 64};
	R.anc = calloc((size_t)R.nn * R.words + 1, sizeof *R.anc);
	if (!R.anc)
		out_of_memory(0);
	ir_order_edges(g, reach_edge, &R);
	NodeId *acc = NULL;
	uint32_t *from = NULL;
	buffer_accesses(g, mp, &acc, &from);
	int ok = 1;
	for (uint32_t a = 0; a < mp->nbuf && ok; a++) {
		const MemBuf *x = &mp->buf[a];
		uint64_t peak = x->where == MEM_DEVICE ? mp->peak : mp->host_peak;
		if (x->where == MEM_OUTPUT || !x->size)
			continue;
		if (x->offset % ALIGN || x->offset + x->size > peak) {
			snprintf(why, 256, "'%%%s' lies outside its arena", g->vals.v[x->v].name);
			ok = 0;
			break;
		}
		for (uint32_t b = a + 1; b < mp->nbuf && ok; b++) {
			const MemBuf *y = &mp->buf[b];
			if (y->where != x->where || !y->size || y->offset >= x->offset + x->size ||
			    x->offset >= y->offset + y->size)
				continue;
			ok = pair_ok(g, mp, &R, acc, from, a, b, why);
		}
	}
	free(R.anc);
	free(acc);
	free(from);
	return ok;
}

/* ------------------------------------------------------------------ report */

/* The plan as a table (`sgc check --memory`). */
void
memplan_report(FILE *f, Graph *g, const MemPlan *mp)
{
	static const char *where[] = {"device", "host", "output"};
	uint32_t ndev = 0;
	for (uint32_t b = 0; b < mp->nbuf; b++)
		ndev += mp->buf[b].where == MEM_DEVICE;
	fprintf(f, "graph %s: memory plan (-O%d)\n", g->name, mp->opt_level);
	fprintf(f, "  device arena peak: %" PRIu64 " bytes (%u buffers, %" PRIu64
	        " bytes without reuse)\n", mp->peak, ndev, mp->unshared);
	fprintf(f, "  host arena peak: %" PRIu64 " bytes\n", mp->host_peak);
	fprintf(f, "  outputs: %" PRIu64 " bytes\n", mp->outputs);
	if (!mp->nbuf)
		return;
	fprintf(f, "  %-20s %-7s %-10s %12s %12s  %s\n", "buffer", "where", "stream",
	        "bytes", "offset", "lines (alloc, last, release)");
	for (uint32_t b = 0; b < mp->nbuf; b++) {
		const MemBuf *x = &mp->buf[b];
		char name[256];
		snprintf(name, sizeof name, "%%%s", g->vals.v[x->v].name);
		fprintf(f, "  %-20s %-7s %-10s %12" PRIu64 " ", name, where[x->where],
		        g->streams.v[x->stream].name, x->size);
		if (x->where == MEM_OUTPUT)
			fprintf(f, "%12s", "-");
		else
			fprintf(f, "%12" PRIu64, x->offset);
		fprintf(f, "  %u, %u, %u\n", g->nodes.v[x->alloc].loc.line,
		        g->nodes.v[x->last].loc.line, g->nodes.v[x->release].loc.line);
	}
}

/* Per node: the node at which a fused group runs (its first member) when
 * the group is a kernel of its own whose members are all elementwise ops
 * with results of one shape, so that each thread reads its operands of
 * that shape at the index it writes (memplan_build_at's ew), and that
 * stores one result: the kernel stores a result where the member making
 * it is computed, and a later member may still load an operand at that
 * element (a gelu recomputed beside its gelu_backward stores both). */
static uint8_t *
elementwise_kernels(const Graph *g, const Sched *s, Arena *a)
{
	uint8_t *ew = arena_alloc(a, g->nodes.n + 1);
	memset(ew, 0, g->nodes.n + 1);
	for (uint32_t k = 0; k < s->groups.n; k++) {
		const FuseGroup *grp = &s->groups.v[k];
		if (grp->into != NONE || grp->after != NONE)
			continue;
		const Type *t0 = &g->vals.v[g->nodes.v[grp->nodes[0]].res[0]].type;
		uint32_t j = 0, stored = 0;
		for (; j < grp->n; j++) {
			const Node *n = &g->nodes.v[grp->nodes[j]];
			const Type *t = &g->vals.v[n->res[0]].type;
			if (n->op >= OP__N || !(op_table[n->op].flags & OPF_POINTWISE) ||
			    !type_same_shape(t, t0))
				break;
			stored += !s->reg[n->res[0]];
		}
		ew[grp->nodes[0]] = j == grp->n && stored == 1;
	}
	/* The library's cross_entropy backward: each thread loads the logits'
	 * elements it then stores the gradient of (from the saved row lse). */
	for (NodeId i = 0; i < g->nodes.n; i++)
		if (g->nodes.v[i].op == OP_CROSS_ENTROPY_BACKWARD && s->rows_lib[i])
			ew[i] = 1;
	return ew;
}

/* The plan over the program as its kernels run it (sched_kernel_graph:
 * each fused group one node, values kept in registers and folded views
 * without memory). */
static void
plan_kernels(Graph *g, int opt_level, MemPlan *mp)
{
	Sched *s = sched_get(g, opt_level);
	Arena *a = arena_new();
	Graph f;
	NodeId *def = sched_kernel_graph(g, s, a, &f);
	uint8_t *ew = elementwise_kernels(g, s, a);
	memplan_build_at(&f, def, ew, opt_level >= 2 ? 2 : 0, mp);
	arena_free(a);
}

uint64_t
memplan_sched_peak(Graph *g, int opt_level)
{
	MemPlan mp;
	plan_kernels(g, opt_level, &mp);
	uint64_t peak = mp.peak;
	memplan_free(&mp);
	return peak;
}

/* Pass `memplan`: the plan over the program as its kernels run it
 * (sched_kernel_graph: each fused group one node, values kept in
 * registers and folded views without memory), stored on g->sched; the
 * verifier checks it (sched_verify).  The graph is left as it was. */
int
memplan_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)d;
	Sched *s = sched_get(g, po->opt_level);
	if (s->planned)
		memplan_free(&s->plan);
	plan_kernels(g, po->opt_level, &s->plan);
	s->planned = 1;
	s->unchecked = po->test_drop_sync != 0;
	return 1;
}

/* Reports and checks the plan of each graph (see sgc.h). */
void
memplan_report_module(FILE *f, Module *m, const char *only_graph, int opt_level)
{
	for (uint32_t i = 0; i < m->graphs.n; i++) {
		Graph *g = m->graphs.v[i];
		MemPlan mp;
		char why[256];
		if (only_graph && strcmp(only_graph, g->name) != 0)
			continue;
		memplan_build(g, opt_level, &mp);
		memplan_report(f, g, &mp);
		int ok = memplan_verify(g, &mp, why);
		if (!ok)
			ICE("memory plan of graph '%s': %s", g->name, why);
		fprintf(f, "  check: %s\n", ok > 0 ? "no two buffers that may be live at "
		        "once share memory" : "skipped (graph too large)");
		memplan_free(&mp);
	}
}
