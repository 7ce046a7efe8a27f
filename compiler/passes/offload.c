/*
 * offload.c - pass `offload`: activation offloading, and the cost model
 * that places its copies (bucket.c uses it too).
 *
 * `offload %v` (Value.offload, set by sema) and --offload=auto (saved
 * activations picked by size under --offload-budget) keep an activation in
 * pinned host memory between forward and backward:
 *
 *   %v = OP(...)                        the producer, on stream S
 *   with stream(copy) {                 right after it, on the copy stream
 *     %v.host = to_host(%v)             (backward_syncs adds the event)
 *   }
 *   ...forward uses of %v...
 *   del %v                              where the copy should be done
 *   backward(%loss) {                   (sync_dealloc turns the del into
 *     ...                               the cross-stream free, rule 8)
 *     record_event(prefetchN)           the gate, on the stream of the first
 *     with stream(copy) {               backward use: the copy starts no
 *       wait_event(prefetchN)           earlier than here
 *       %v.dev = to_device(%v.host)
 *     }
 *     ...backward uses read %v.dev...   (backward_syncs adds their waits)
 *
 * Where the copies go comes from an estimate of time: each node's compute
 * time (FLOPs at the tensor-core rate for products, attention at a
 * fraction of it, else bytes moved at HBM bandwidth, at least a launch;
 * views such as reshape and transpose nothing) summed in program order,
 * against transfers at PCIe speed (OFF_PCIE) on one copy stream that does
 * one transfer at a time.  Memory comes first: the tightest schedule (each
 * device copy let go right after its last forward use, each prefetch right
 * before its first backward use) fixes the peak, and time is bought within
 * it.  Out: the copy starts right after the producer; the device copy is
 * let go at the first point by which the copy should be done (in backward,
 * before its first use there, if the forward ends first), so that the
 * free does not make compute wait, unless holding it that long would raise
 * the peak.  Back: as late as the transfer still hides (the latest
 * prefetches first, each ending before its first use and before the next
 * one starts), but no earlier than the peak allows.  --dump-after=offload
 * prints the estimates.
 *
 * --offload=auto considers every saved activation in device memory, the
 * saved views of one source as one unit (a view frees its source's bytes
 * only when all of them go), in two orders (largest first; the latest
 * backward use first), and offloads each when that lowers the estimated peak,
 * until the peak fits the budget, the last takes by best fit; the plan
 * of less estimated time is kept.  The estimate is a liveness sum in
 * program order over the values nodes make (the device arena of
 * memplan.c, without its fragmentation), with the schedule above.  It
 * applies only to a backward derived in this compilation: a written
 * `backward(...) { }` block (as --emit=ir prints) is taken as it is, so
 * printed IR compiles to itself.
 *
 * Nothing here synchronises the host; the passes after it make the
 * events (backward_syncs, sync_dealloc) and the race verifier checks them.
 */
#include <string.h>

#include "passes.h"

/* The machine the estimate thinks of: an H200, as measured there (bench/
 * torch_ref.py's limits: 765 TFLOP/s for a bf16 product, 55 GB/s each way
 * over the host link). */
#define OFF_MM_16   7.5e14 /* FLOP/s: bf16/f16 products, dense */
#define OFF_MM_32   5.0e13 /* FLOP/s: f32 products */
#define OFF_MM_64   3.0e13 /* FLOP/s: f64 products */
/* Attention at this fraction of the product rate: cuDNN's, forward and
 * backward (2.5 times the forward's FLOPs), at the transformer's shape. */
#define OFF_ATTN_FWD 0.60
#define OFF_ATTN_BWD 0.46
#define OFF_HBM     3.5e12 /* B/s: device memory */
#define OFF_LAUNCH  3.0e-6 /* s: the least a kernel takes */
#define OFF_PCIE    5.5e10 /* B/s: pinned host <-> device, one direction */
#define OFF_NVLINK  1.5e11 /* B/s: a collective's bus bandwidth */
#define OFF_COLL    2.0e-5 /* s: a collective's latency */
/* A device copy is let go where the estimate has run this much longer
 * than its copy's end: compute that runs faster than estimated (5% on the
 * transformer's forward) would otherwise reach the free before the copy
 * is done and wait for it. */
#define OFF_FREE_SLACK 1.1

enum { AUTO_MAX = 512 };

/* ------------------------------------------------------------------ cost model */

static uint64_t
type_bytes(const Type *t)
{
	return (uint64_t)type_numel(t) * (uint64_t)dtype_size((DType)t->dt);
}

/* Throughput of products in dtype dt. */
static double
mm_rate(int dt)
{
	return dt == DT_F64 ? OFF_MM_64 : dt == DT_F32 ? OFF_MM_32 : OFF_MM_16;
}

/* FLOPs of a product or attention node, 0 for anything else. */
static double
node_flops(const Graph *g, const Node *n)
{
	const Type *a = ir_type(g, &n->opnd[0]), *r;
	switch (n->op) {
	case OP_MATMUL:
	case OP_LINEAR:
		r = &g->vals.v[n->res[0]].type;
		return 2.0 * (double)type_numel(r) * (double)(a->rank ? a->d[a->rank - 1] : 1);
	case OP_SDPA:
	case OP_SDPA_BACKWARD: {
		const Type *q = ir_type(g, &n->opnd[n->op == OP_SDPA ? 0 : 1]);
		const Type *k = ir_type(g, &n->opnd[n->op == OP_SDPA ? 1 : 2]);
		if (q->rank < 2 || k->rank < 2)
			return 0;
		double tq = (double)q->d[q->rank - 2], tk = (double)k->d[k->rank - 2];
		double f = 4.0 * ((double)type_numel(q) / tq) * tq * tk;
		if (ir_attr_int(n, "causal", 0))
			f /= 2;
		return n->op == OP_SDPA ? f : 2.5 * f;
	}
	}
	return 0;
}

/* Whether op is a reshape, transpose, slice, split or the like: a view of
 * its operand wherever the layout lets it be (as in PyTorch). */
static int
view_op(int op)
{
	uint8_t em = op_table[op].emit;
	return em == EM_STRIDED || em == EM_SPLIT || (em == EM_FLAT_COPY && op != OP_CONTIGUOUS &&
	                                               op != OP_TO_HOST && op != OP_TO_DEVICE);
}

/* Estimated seconds of node n on its stream: FLOPs or bytes, at least a
 * launch.  Syncs, statements and transfers (on their own engines) take no
 * compute time. */
double
offload_node_seconds(const Graph *g, const Node *n)
{
	if ((n->flags & NF_DEAD) || n->op >= OP__N || n->op == OP_CONTROL_DEPS ||
	    n->op == OP_SYNC_DEALLOC || n->op == OP_TO_HOST || n->op == OP_TO_DEVICE)
		return 0;
	uint32_t f = op_table[n->op].flags;
	if (f & (OPF_SYNC | OPF_COLLECTIVE))
		return 0;
	if (view_op(n->op))
		return 0;
	double bytes = 0;
	for (uint32_t k = 0; k < n->nopnd; k++)
		if (n->opnd[k].kind == OK_VAL)
			bytes += (double)type_bytes(&g->vals.v[n->opnd[k].v].type);
	for (uint32_t j = 0; j < n->nres; j++)
		bytes += (double)type_bytes(&g->vals.v[n->res[j]].type);
	double t = bytes / OFF_HBM;
	double fl = node_flops(g, n);
	if (fl > 0) {
		double rate = mm_rate(g->vals.v[n->res[0]].type.dt);
		if (n->op == OP_SDPA || n->op == OP_SDPA_BACKWARD)
			rate *= n->op == OP_SDPA ? OFF_ATTN_FWD : OFF_ATTN_BWD;
		double tf = fl / rate;
		t = tf > t ? tf : t;
	}
	return t > OFF_LAUNCH ? t : OFF_LAUNCH;
}

double
offload_copy_seconds(uint64_t bytes)
{
	return (double)bytes / OFF_PCIE;
}

double
offload_collective_seconds(const Graph *g, uint64_t bytes)
{
	double world = (double)ir_world(g->mod);
	double factor = world > 1 ? 2 * (world - 1) / world : 0;
	return OFF_COLL + (double)bytes * factor / OFF_NVLINK + (double)bytes / OFF_HBM;
}

/* t[i]: the estimated start of node i, t[nn] the end: compute times
 * summed in program order. */
double *
offload_timeline(const Graph *g)
{
	double *t = xmalloc(((size_t)g->nodes.n + 1) * sizeof *t);
	t[0] = 0;
	for (NodeId i = 0; i < g->nodes.n; i++)
		t[i + 1] = t[i] + offload_node_seconds(g, &g->nodes.v[i]);
	return t;
}

/* ------------------------------------------------------------------ the pass */

/* What the pass knows of a value it may offload. */
typedef struct {
	ValId v;
	uint32_t stream;   /* allocating stream (the producer's) */
	NodeId def;        /* the producer */
	NodeId lastf;      /* last forward access; def when none */
	NodeId firstb;     /* first read after the backward statement */
	NodeId lastb;      /* last access after it */
	uint32_t bstream;  /* stream of firstb */
	uint64_t bytes;
	double xfer;       /* seconds each way */
	uint8_t marked;    /* `offload %v` */
	uint8_t chosen;
	/* --offload=auto takes the views of one source together (auto_units):
	 * the unit's next member, and on its first member the unit's bytes,
	 * earliest backward use and whether a view is in it */
	uint32_t next;
	uint64_t gbytes;
	NodeId gfirstb;
	uint8_t gview;
	Loc loc;           /* the offload statement, else the producer */
	/* the schedule */
	NodeId del;        /* slot of the forward del */
	NodeId gate;       /* slot of the prefetch */
} Cand;

typedef struct {
	Graph *g;
	const PassOptions *po;
	Diag *d;
	NodeId bw, end;    /* the backward node, its block's end; NONE */
	double *t;         /* offload_timeline */
	uint32_t *cand;    /* per value: index into cands, or NONE */
	VEC(Cand) cands;   /* in order of their producers */
	NodeId *lastacc;   /* per value: its last access */
	uint8_t *skip;     /* per value: no buffer of the arena */
	uint64_t *diff;    /* nn + 2: the liveness curve's steps */
	uint64_t *cur;     /* nn: the liveness curve */
} Off;

/* Why value v cannot be offloaded, or NULL. */
static const char *
unfit(Off *O, ValId v, const uint8_t *aliased, const uint8_t *ret)
{
	const Value *val = &O->g->vals.v[v];
	if (O->bw == NONE)
		return "the graph has no backward";
	if (val->type.host)
		return "it is in host memory already";
	if (val->def == NONE || val->def >= O->bw)
		return "it is not made before backward";
	if (ret[v])
		return "it is returned";
	if (aliased[v] || O->g->nodes.v[val->def].op == OP_CONTROL_DEPS)
		return "it is passed through control_deps";
	if (!val->saved || O->cand[v] == NONE)
		return "backward does not read it";
	return NULL;
}

/* Accesses of every value: its last one; for values made before
 * backward, the forward and backward ones that a candidate needs. */
static void
scan_accesses(Off *O, uint8_t *aliased)
{
	Graph *g = O->g;
	for (ValId v = 0; v < g->vals.n; v++) {
		O->cand[v] = NONE;
		O->lastacc[v] = g->vals.v[v].kind == VK_NODE ? g->vals.v[v].def : NONE;
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (n->opnd[k].kind != OK_VAL)
				continue;
			ValId v = n->opnd[k].v;
			if (n->op == OP_CONTROL_DEPS)
				aliased[v] = 1;
			if (ir_access(n, k) == RACC_NONE)
				continue;
			O->lastacc[v] = i;
			const Value *val = &g->vals.v[v];
			if (O->bw == NONE || val->kind != VK_NODE || val->def >= O->bw ||
			    val->type.host)
				continue;
			if (O->cand[v] == NONE) {
				Cand c = {.v = v, .def = val->def, .lastf = val->def,
				          .firstb = NONE, .lastb = NONE, .loc = val->loc,
				          .stream = g->nodes.v[val->def].stream};
				O->cand[v] = O->cands.n;
				vec_push(&O->cands, c);
			}
			Cand *c = &O->cands.v[O->cand[v]];
			if (i < O->bw) {
				c->lastf = i;
			} else {
				if (c->firstb == NONE) {
					c->firstb = i;
					c->bstream = n->stream;
				}
				c->lastb = i;
			}
		}
	}
	/* candidates are values backward reads; keep cand[] for them only */
	uint32_t m = 0;
	for (uint32_t j = 0; j < O->cands.n; j++) {
		Cand c = O->cands.v[j];
		O->cand[c.v] = NONE;
		if (c.firstb == NONE || c.firstb >= O->end)
			continue;
		c.bytes = type_bytes(&g->vals.v[c.v].type);
		c.xfer = offload_copy_seconds(c.bytes);
		O->cand[c.v] = m;
		O->cands.v[m++] = c;
	}
	O->cands.n = m;
}

/* The first slot in [lo, hi] whose start time is at least when, else
 * hi. */
static NodeId
first_after(const Off *O, NodeId lo, NodeId hi, double when)
{
	while (lo < hi) {
		NodeId mid = lo + (hi - lo) / 2;
		if (O->t[mid] >= when)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* The last slot in [lo, hi] whose start time is at most when, else lo. */
static NodeId
last_before(const Off *O, NodeId lo, NodeId hi, double when)
{
	if (O->t[lo] > when)
		return lo;
	while (lo < hi) {
		NodeId mid = hi - (hi - lo) / 2;
		if (O->t[mid] <= when)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

static int
by_firstb(const void *pa, const void *pb)
{
	const Cand *a = *(Cand *const *)pa, *b = *(Cand *const *)pb;
	if (a->firstb != b->firstb)
		return a->firstb < b->firstb ? -1 : 1;
	if (a->def != b->def)
		return a->def < b->def ? -1 : 1;
	return a->v < b->v ? -1 : a->v > b->v;
}

/* The chosen candidates in order of their first backward use. */
static uint32_t
chosen_by_use(Off *O, Cand **out)
{
	uint32_t n = 0;
	for (uint32_t j = 0; j < O->cands.n; j++)
		if (O->cands.v[j].chosen)
			out[n++] = &O->cands.v[j];
	qsort(out, n, sizeof *out, by_firstb);
	return n;
}

/* The tightest schedule: each device copy let go right after its last
 * forward use, each prefetch right before its first backward use.  It
 * gives the least memory; plan() then moves copies to where they hide
 * within that peak. */
static void
plan_tight(Off *O)
{
	for (uint32_t j = 0; j < O->cands.n; j++) {
		Cand *c = &O->cands.v[j];
		c->del = c->lastf + 1;
		c->gate = c->firstb;
	}
}

/* The liveness curve of the device arena (cur[i]: the bytes of values
 * live at node i, in program order) with the chosen candidates as
 * planned; returns its peak. */
static uint64_t
curve(Off *O)
{
	Graph *g = O->g;
	uint32_t nn = g->nodes.n;
	memset(O->diff, 0, ((size_t)nn + 2) * sizeof *O->diff);
	for (ValId v = 0; v < g->vals.n; v++) {
		if (O->skip[v])
			continue;
		uint64_t s = memplan_buf_size(&g->vals.v[v].type);
		NodeId a = g->vals.v[v].def, b = O->lastacc[v];
		uint32_t ci = O->cand[v];
		if (ci != NONE && O->cands.v[ci].chosen) {
			const Cand *c = &O->cands.v[ci];
			b = c->del > a ? c->del - 1 : a;
			O->diff[c->gate] += s;
			O->diff[c->lastb + 1] -= s;
		}
		O->diff[a] += s;
		O->diff[b + 1] -= s;
	}
	uint64_t cur = 0, peak = 0;
	for (uint32_t i = 0; i < nn; i++) {
		cur += O->diff[i];
		O->cur[i] = cur;
		if (cur > peak)
			peak = cur;
	}
	return peak;
}

/* The estimated device peak with the chosen candidates offloaded. */
static uint64_t
estimate(Off *O)
{
	plan_tight(O);
	return curve(O);
}

/* Adds s to the curve over nodes [a, b). */
static void
curve_add(Off *O, NodeId a, NodeId b, uint64_t s)
{
	for (NodeId i = a; i < b; i++)
		O->cur[i] += s;
}

/* Where candidate c's device copy is let go: at want (when its copy
 * should be done), or earlier where keeping it would raise the peak. */
static void
relax_del(Off *O, Cand *c, NodeId want, uint64_t peak)
{
	uint64_t s = memplan_buf_size(&O->g->vals.v[c->v].type);
	NodeId d = c->lastf + 1;
	while (d < want && O->cur[d] + s <= peak)
		d++;
	curve_add(O, c->lastf + 1, d, s);
	c->del = d;
}

/* Where candidate c's prefetch goes: at want (early enough to hide it),
 * or later where it would raise the peak. */
static void
relax_gate(Off *O, Cand *c, NodeId want, uint64_t peak)
{
	uint64_t s = memplan_buf_size(&O->g->vals.v[c->v].type);
	NodeId gt = c->firstb;
	while (gt > want && O->cur[gt - 1] + s <= peak)
		gt--;
	curve_add(O, gt, c->firstb, s);
	c->gate = gt;
}

/* The schedule of the chosen candidates.  The copies out run one after
 * the other from their producers; each device copy is let go once its
 * copy should be done.  The prefetches go as late as they can while
 * still hiding, the last first (each ends before its first use and
 * before the next one starts).  Neither may raise the peak of the tight
 * schedule: where it would, the free comes earlier (compute waits for
 * the copy there) or the prefetch later (its use waits). */
static void
plan(Off *O, Cand **tmp)
{
	uint64_t peak = estimate(O);
	double copy_free = 0;
	for (uint32_t j = 0; j < O->cands.n; j++) {
		Cand *c = &O->cands.v[j];
		if (!c->chosen)
			continue;
		double start = O->t[c->def + 1] > copy_free ? O->t[c->def + 1] : copy_free;
		copy_free = start + c->xfer;
		relax_del(O, c, first_after(O, c->lastf + 1, c->firstb, copy_free * OFF_FREE_SLACK),
		          peak);
	}
	uint32_t n = chosen_by_use(O, tmp);
	double next = O->t[O->end];
	for (uint32_t j = n; j-- > 0;) {
		Cand *c = tmp[j];
		double end = O->t[c->firstb] < next ? O->t[c->firstb] : next;
		next = end - c->xfer;
		relax_gate(O, c, last_before(O, O->bw + 1, c->firstb, next), peak);
	}
}

/* Values that are no buffer of the device arena: persistent, host,
 * returned, control_deps aliases, results of dead nodes. */
static void
find_skip(Off *O, const uint8_t *ret)
{
	Graph *g = O->g;
	for (ValId v = 0; v < g->vals.n; v++) {
		const Value *val = &g->vals.v[v];
		O->skip[v] = val->kind != VK_NODE || val->def == NONE ||
		             val->def >= g->nodes.n || val->type.host || ret[v] ||
		             (g->nodes.v[val->def].flags & NF_DEAD) ||
		             g->nodes.v[val->def].op == OP_CONTROL_DEPS;
	}
}

static int
by_size(const void *pa, const void *pb)
{
	const Cand *a = *(Cand *const *)pa, *b = *(Cand *const *)pb;
	if (a->gview != b->gview)
		return a->gview ? 1 : -1;
	if (a->gbytes != b->gbytes)
		return a->gbytes > b->gbytes ? -1 : 1;
	if (a->def != b->def)
		return a->def < b->def ? -1 : 1;
	return a->v < b->v ? -1 : a->v > b->v; /* (results of one node) */
}

/* Latest first backward use first (the earliest layers of a network),
 * then largest: their copies out start earliest and their prefetches
 * have the most backward compute to hide behind. */
static int
by_late_use(const void *pa, const void *pb)
{
	const Cand *a = *(Cand *const *)pa, *b = *(Cand *const *)pb;
	if (a->gview != b->gview)
		return a->gview ? 1 : -1;
	if (a->gfirstb != b->gfirstb)
		return a->gfirstb > b->gfirstb ? -1 : 1;
	return by_size(pa, pb);
}

static double simulate(Off *O);

/* Chooses (on 1) or drops (0) the unit (auto_units) whose first member is c. */
static void
choose_unit(Off *O, Cand *c, uint8_t on)
{
	for (;;) {
		c->chosen = on;
		if (c->next == NONE)
			return;
		c = &O->cands.v[c->next];
	}
}

/* Takes order[0..n) one by one, each when it lowers the estimated peak,
 * until the peak fits the budget; returns the peak reached.  Before each
 * take, the smallest candidate further on that could close the gap to the
 * budget alone (its bytes at least the gap) is tried, and kept when it
 * does: the last takes do not overshoot the budget by a large value
 * (choice: the fewest bytes over the host link, whose time is what
 * offloading costs). */
static uint64_t
take_in_order(Off *O, Cand **order, uint32_t n)
{
	uint64_t budget = O->po->offload_budget, peak = estimate(O);
	for (uint32_t j = 0; j < n && peak > budget; j++) {
		if (order[j]->chosen)
			continue;
		Cand *fit = NULL;
		for (uint32_t k = j + 1; k < n; k++)
			if (!order[k]->chosen && order[k]->gview <= order[j]->gview &&
			    order[k]->gbytes >= peak - budget && order[k]->gbytes < order[j]->gbytes &&
			    (!fit || order[k]->gbytes < fit->gbytes))
				fit = order[k];
		if (fit) {
			choose_unit(O, fit, 1);
			uint64_t p = estimate(O);
			if (p <= budget)
				return p;
			choose_unit(O, fit, 0);
		}
		choose_unit(O, order[j], 1);
		uint64_t p = estimate(O);
		if (p < peak)
			peak = p;
		else
			choose_unit(O, order[j], 0);
	}
	return peak;
}

/* The choice of one order: its peak and estimated time, the chosen
 * flags left set; with --dump-after=offload, a line saying so. */
static void
try_order(Off *O, Cand **order, uint32_t n, Cand **tmp, const char *what,
          uint64_t *peak, double *secs)
{
	for (uint32_t j = 0; j < n; j++)
		choose_unit(O, order[j], 0);
	*peak = take_in_order(O, order, n);
	plan(O, tmp);
	*secs = simulate(O);
	if (!passes_dumps(O->po, "offload"))
		return;
	uint64_t bytes = 0;
	uint32_t k = 0;
	for (uint32_t j = 0; j < n; j++)
		for (Cand *c = order[j]; c->chosen; c = &O->cands.v[c->next]) {
			bytes += c->bytes;
			k++;
			if (c->next == NONE)
				break;
		}
	fprintf(stderr, "# offload: graph '%s': %s: %u values (%llu bytes), estimated "
	        "device peak %llu bytes, time %.3f ms\n", O->g->name, what, k,
	        (unsigned long long)bytes, (unsigned long long)*peak, *secs * 1e3);
}

/* --offload=auto's units, their first members into order[]: each saved
 * activation, with the other saved views of its bytes.  A view (reshape,
 * transpose, chunk, ...) shares its source's bytes, so taking it to the
 * host frees them only when everything holding them past the forward goes
 * too: a source whose bytes something else holds into backward (a value
 * that cannot be offloaded, one passed through control_deps, a view of a
 * param or an input) makes no unit.  Units with a view come after the
 * others in both orders (choice: a strided view is copied on its stream
 * before it crosses the link, which the estimate does not charge; on the
 * transformer such plans measured 0.07 GB less saving than planned and
 * six more copies a block), so they are taken only where the others do
 * not reach the budget.  Returns the number of units. */
static uint32_t
auto_units(Off *O, const uint8_t *aliased, const uint8_t *ret, Cand **order)
{
	Graph *g = O->g;
	uint32_t nv = g->vals.n, n = 0;
	ValId *root = xmalloc(((size_t)nv + 1) * sizeof *root);
	uint32_t *head = xmalloc(((size_t)nv + 1) * sizeof *head);
	uint32_t *last = xmalloc(((size_t)nv + 1) * sizeof *last);
	uint8_t *held = calloc((size_t)nv + 1, 1);
	if (!held)
		out_of_memory(0);
	for (ValId v = 0; v < nv; v++) {
		root[v] = v;
		head[v] = NONE;
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *nd = &g->nodes.v[i];
		if (!(nd->flags & NF_DEAD) && nd->op < OP__N && view_op(nd->op) && nd->nopnd &&
		    nd->opnd[0].kind == OK_VAL)
			for (uint32_t k = 0; k < nd->nres; k++)
				root[nd->res[k]] = root[nd->opnd[0].v];
	}
	for (ValId v = 0; v < nv; v++) {
		const Value *val = &g->vals.v[v];
		uint32_t ci = O->cand[v];
		if (ci != NONE) {
			const Cand *c = &O->cands.v[ci];
			if (!c->chosen && (c->bytes == 0 || unfit(O, v, aliased, ret)))
				held[root[v]] = 1;
		} else if (val->kind == VK_NODE && val->def < O->bw &&
		           (aliased[v] || (O->lastacc[v] != NONE && O->lastacc[v] >= O->bw))) {
			held[root[v]] = 1; /* read after the block, or through an alias */
		}
		if (root[v] == v && (val->kind != VK_NODE || O->skip[v]))
			held[v] = 1;
	}
	for (uint32_t j = 0; j < O->cands.n; j++) {
		Cand *c = &O->cands.v[j];
		ValId r = root[c->v];
		c->next = NONE;
		if (c->chosen || held[r])
			continue;
		uint8_t view = r != c->v;
		if (head[r] == NONE) {
			head[r] = last[r] = j;
			c->gbytes = c->bytes;
			c->gfirstb = c->firstb;
			c->gview = view;
			order[n++] = c;
			continue;
		}
		Cand *h = &O->cands.v[head[r]];
		O->cands.v[last[r]].next = j;
		last[r] = j;
		h->gbytes += c->bytes;
		h->gview |= view;
		if (c->firstb < h->gfirstb)
			h->gfirstb = c->firstb;
	}
	free(root);
	free(head);
	free(last);
	free(held);
	return n;
}

/* --offload=auto: the units of auto_units (the AUTO_MAX largest at most),
 * each taken when it lowers the estimated peak, until the peak fits the
 * budget.  Two orders are tried, largest first and the latest backward
 * use first (choice: the second hides its copies better on a layered
 * network, its copies out starting with the first layer's; the first
 * needs fewer copies where sizes differ a lot); the one that fits the
 * budget in less estimated time is kept, else the one with the lower
 * peak. */
static void
choose_auto(Off *O, const uint8_t *aliased, const uint8_t *ret, Cand **tmp)
{
	Graph *g = O->g;
	Cand **order = xmalloc((O->cands.n + 1) * sizeof *order);
	uint32_t n = auto_units(O, aliased, ret, order);
	qsort(order, n, sizeof *order, by_size);
	if (n > AUTO_MAX)
		n = AUTO_MAX; /* each try costs a walk of the graph */
	uint64_t p1, p2, budget = O->po->offload_budget;
	double s1, s2;
	try_order(O, order, n, tmp, "largest first", &p1, &s1);
	qsort(order, n, sizeof *order, by_late_use);
	try_order(O, order, n, tmp, "latest backward use first", &p2, &s2);
	int fit1 = p1 <= budget, fit2 = p2 <= budget;
	int second = fit1 != fit2 ? fit2 : fit1 ? s2 < s1 : p2 < p1;
	if (!second) {
		qsort(order, n, sizeof *order, by_size);
		for (uint32_t j = 0; j < n; j++)
			choose_unit(O, order[j], 0);
		take_in_order(O, order, n);
	}
	uint64_t peak = second ? p2 : p1;
	if (budget && peak > budget)
		diag_warning(O->d, g->nodes.v[O->bw].loc, "--offload=auto: the estimated "
		             "device peak of graph '%s' is %llu bytes, above the budget of "
		             "%llu", g->name, (unsigned long long)peak,
		             (unsigned long long)budget);
	free(order);
}

/* A transfer node op (to_host, to_device) from value x into a fresh
 * value called NAME.suffix, typed by the op's shape rule. */
static Node
transfer(Off *O, int op, ValId x, const char *name, const char *suffix,
         uint32_t stream, Loc loc)
{
	Graph *g = O->g;
	ValId r = ir_value_fresh(g, arena_printf(g->mod->arena, "%s.%s", name, suffix), loc);
	Node n = ir_node_make(g, op, 1, 1, stream, 0, loc);
	n.opnd[0].kind = OK_VAL;
	n.opnd[0].v = x;
	n.opnd[0].loc = loc;
	n.res[0] = r;
	if (!op_table[op].shape(g, &n, O->d))
		ICE("offload: %s of '%%%s' fails its shape rule", op_name(op), name);
	return n;
}

/* The event recorded on stream s before slot `slot` for the prefetches
 * there, made once. */
static uint32_t
gate_event(Off *O, NodeInsVec *ins, Map *gates, NodeId slot, uint32_t s, Loc loc)
{
	Graph *g = O->g;
	char *key = arena_printf(g->mod->arena, "%u:%u", slot, s);
	uint32_t *e = map_get(gates, key, strlen(key));
	if (e)
		return *e;
	uint32_t ev = ir_event_new(g, "prefetch");
	NodeIns r = {slot, 2, ir_sync_node(g, OP_RECORD_EVENT, ev, s, loc)};
	vec_push(ins, r);
	map_put(gates, key, strlen(key), ev);
	return ev;
}

/* The copies, the del and the renamed backward uses of candidate c. */
static void
emit_one(Off *O, Cand *c, uint32_t cs, NodeInsVec *ins, Map *gates, ValId *repl)
{
	Graph *g = O->g;
	const char *name = g->vals.v[c->v].name;
	Node out = transfer(O, OP_TO_HOST, c->v, name, "host", cs, c->loc);
	ValId host = out.res[0];
	NodeIns a = {c->def + 1, 0, out};
	vec_push(ins, a);
	Node del = ir_node_make(g, OP_DEL, 1, 0, c->stream, 0, c->loc);
	del.opnd[0].kind = OK_VAL;
	del.opnd[0].v = c->v;
	del.opnd[0].loc = c->loc;
	NodeIns b = {c->del, 1, del};
	vec_push(ins, b);
	if (c->gate > O->bw + 1) {
		uint32_t ev = gate_event(O, ins, gates, c->gate, c->bstream, c->loc);
		NodeIns w = {c->gate, 3, ir_sync_node(g, OP_WAIT_EVENT, ev, cs, c->loc)};
		vec_push(ins, w);
	}
	Node back = transfer(O, OP_TO_DEVICE, host, name, "dev", cs, c->loc);
	NodeIns d = {c->gate, 4, back};
	vec_push(ins, d);
	repl[c->v] = back.res[0];
	g->vals.v[c->v].saved = 0;
	g->vals.v[host].saved = 1;
}

/* One step of simulate() at a node: before it, a wait for candidate j's
 * copy (at its del and its first backward use) or its prefetch's start
 * (at its gate); after it, j's copy out (at its producer). */
typedef struct {
	NodeId at;
	uint32_t j;
	uint8_t kind;
} Step;
enum { ST_WAIT, ST_GATE, ST_OUT };

static int
by_step(const void *pa, const void *pb)
{
	const Step *a = pa, *b = pb;
	if (a->at != b->at)
		return a->at < b->at ? -1 : 1;
	if ((a->kind == ST_OUT) != (b->kind == ST_OUT))
		return a->kind == ST_OUT ? 1 : -1;
	if (a->j != b->j)
		return a->j < b->j ? -1 : 1;
	return (a->kind > b->kind) - (a->kind < b->kind);
}

/* The estimated time of the call with the copies as planned: compute in
 * program order, stopping where a free waits for its copy out or a use
 * for its prefetch; the copies one at a time on their stream. */
static double
simulate(Off *O)
{
	Graph *g = O->g;
	double now = 0, copy_free = 0;
	double *ready = xmalloc((O->cands.n + 1) * sizeof *ready);
	Step *st = xmalloc((4 * (size_t)O->cands.n + 1) * sizeof *st);
	size_t ns = 0;
	for (uint32_t j = 0; j < O->cands.n; j++) {
		const Cand *c = &O->cands.v[j];
		ready[j] = 0;
		if (!c->chosen)
			continue;
		st[ns++] = (Step){c->del, j, ST_WAIT};
		if (c->firstb != c->del)
			st[ns++] = (Step){c->firstb, j, ST_WAIT};
		st[ns++] = (Step){c->gate, j, ST_GATE};
		st[ns++] = (Step){c->def, j, ST_OUT};
	}
	qsort(st, ns, sizeof *st, by_step);
	size_t k = 0;
	for (NodeId i = 0; i <= g->nodes.n; i++) {
		for (; k < ns && st[k].at == i && st[k].kind != ST_OUT; k++) {
			uint32_t j = st[k].j;
			if (st[k].kind == ST_WAIT) {
				if (ready[j] > now)
					now = ready[j];
			} else {
				copy_free = (now > copy_free ? now : copy_free) + O->cands.v[j].xfer;
				ready[j] = copy_free;
			}
		}
		if (i == g->nodes.n)
			break;
		now += offload_node_seconds(g, &g->nodes.v[i]);
		for (; k < ns && st[k].at == i; k++) {
			uint32_t j = st[k].j;
			copy_free = (now > copy_free ? now : copy_free) + O->cands.v[j].xfer;
			ready[j] = copy_free;
		}
	}
	free(st);
	free(ready);
	return now;
}

/* With --dump-after=offload: what the pass decided and its estimates. */
static void
report(Off *O, Cand **tmp, uint64_t before)
{
	if (!passes_dumps(O->po, "offload"))
		return;
	uint64_t bytes = 0, peak = estimate(O);
	uint32_t n = 0;
	for (uint32_t j = 0; j < O->cands.n; j++)
		if (O->cands.v[j].chosen) {
			bytes += O->cands.v[j].bytes;
			n++;
		}
	plan(O, tmp);
	double t0 = O->t[O->g->nodes.n], t1 = simulate(O);
	fprintf(stderr, "# offload: graph '%s': %u values (%llu bytes) to the host; "
	        "estimated device peak %llu bytes (%llu without); estimated time "
	        "%.3f ms (%.3f ms without, +%.1f%%; forward %.3f ms)\n", O->g->name, n,
	        (unsigned long long)bytes, (unsigned long long)peak,
	        (unsigned long long)before, t1 * 1e3, t0 * 1e3,
	        t0 > 0 ? (t1 / t0 - 1) * 100 : 0, O->t[O->bw] * 1e3);
}

/* Places the copies of every chosen candidate. */
static int
emit(Off *O, Cand **tmp, uint64_t before)
{
	Graph *g = O->g;
	report(O, tmp, before);
	plan(O, tmp);
	uint32_t n = chosen_by_use(O, tmp);
	if (!n)
		return 0;
	uint32_t cs = ir_stream_new(g, "copy"); /* not `offload`: a keyword */
	NodeInsVec ins = {0};
	Map gates;
	map_init(&gates);
	uint32_t nv = g->vals.n;
	ValId *repl = xmalloc(((size_t)nv + 1) * sizeof *repl);
	for (ValId v = 0; v < nv; v++)
		repl[v] = NONE;
	for (uint32_t j = 0; j < n; j++)
		emit_one(O, tmp[j], cs, &ins, &gates, repl);
	/* backward reads the prefetched copies */
	for (NodeId i = O->bw + 1; i < g->nodes.n; i++) {
		Node *nd = &g->nodes.v[i];
		for (uint32_t k = 0; k < nd->nopnd; k++)
			if (nd->opnd[k].kind == OK_VAL && nd->opnd[k].v < nv &&
			    repl[nd->opnd[k].v] != NONE)
				nd->opnd[k].v = repl[nd->opnd[k].v];
	}
	free(repl);
	ir_insert(g, &ins);
	vec_free(&ins);
	map_free(&gates);
	return 1;
}

/* The values `offload` names (its statements are dropped here), each
 * kept unless it cannot be offloaded, which is a warning. */
static void
take_marks(Off *O, const uint8_t *aliased, const uint8_t *ret)
{
	Graph *g = O->g;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if ((n->flags & NF_DEAD) || n->op != OP_OFFLOAD)
			continue;
		n->flags |= NF_DEAD;
		ValId v = n->opnd[0].v;
		if (O->po->offload == OFFLOAD_NONE || !g->vals.v[v].offload)
			continue;
		g->vals.v[v].offload = 0;
		const char *why = unfit(O, v, aliased, ret);
		if (why) {
			diag_warning(O->d, n->opnd[0].loc, "'offload %%%s' has no effect: %s",
			             g->vals.v[v].name, why);
			continue;
		}
		Cand *c = &O->cands.v[O->cand[v]];
		if (!c->marked)
			c->loc = n->loc;
		c->marked = c->chosen = 1;
	}
}

static void
off_free(Off *O)
{
	free(O->t);
	free(O->cand);
	free(O->lastacc);
	free(O->skip);
	free(O->diff);
	free(O->cur);
	vec_free(&O->cands);
}

int
offload_pass(Graph *g, const PassOptions *po, Diag *d)
{
	uint32_t nv = g->vals.n, nn = g->nodes.n;
	Off O = {.g = g, .po = po, .d = d};
	int any = 0;
	for (NodeId i = 0; i < nn; i++)
		any |= g->nodes.v[i].op == OP_OFFLOAD && !(g->nodes.v[i].flags & NF_DEAD);
	if (!any && po->offload != OFFLOAD_AUTO)
		return PASS_SAME;
	uint8_t *aliased = calloc((size_t)nv + 1, 1), *ret = calloc((size_t)nv + 1, 1);
	O.cand = xmalloc(((size_t)nv + 1) * sizeof *O.cand);
	O.lastacc = xmalloc(((size_t)nv + 1) * sizeof *O.lastacc);
	O.skip = xmalloc((size_t)nv + 1);
	O.diff = xmalloc(((size_t)nn + 2) * sizeof *O.diff);
	O.cur = xmalloc(((size_t)nn + 1) * sizeof *O.cur);
	Cand **tmp = NULL;
	if (!aliased || !ret)
		out_of_memory(0);
	for (uint32_t i = 0; i < g->rets.n; i++)
		ret[g->rets.v[i]] = 1;
	ir_backward_block(g, &O.bw, &O.end);
	scan_accesses(&O, aliased);
	tmp = xmalloc((O.cands.n + 1) * sizeof *tmp);
	if (O.bw != NONE) {
		O.t = offload_timeline(g);
		find_skip(&O, ret);
	}
	uint64_t before = O.bw != NONE ? estimate(&O) : 0;
	take_marks(&O, aliased, ret);
	int placed = 0;
	if (O.bw != NONE) {
		if (po->offload == OFFLOAD_AUTO && ir_block_derived(g, O.bw, O.end))
			choose_auto(&O, aliased, ret, tmp);
		placed = emit(&O, tmp, before);
	}
	if (any && !placed) {
		NodeInsVec none = {0};
		ir_insert(g, &none); /* drops the offload statements */
	}
	for (ValId v = 0; v < g->vals.n; v++)
		g->vals.v[v].offload = 0;
	free(tmp);
	free(aliased);
	free(ret);
	off_free(&O);
	return 1;
}
