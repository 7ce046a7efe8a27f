/*
 * remat.c - pass `remat`: cheap activations recomputed in backward instead
 * of kept from forward, as torch.compile's min-cut partitioner does for
 * pointwise ops.  On at -O2 (`--no-remat` turns it off), off at -O0.
 *
 * Backward reads activations from forward; each one it reads is kept in
 * device memory from its forward definition to its last backward use.
 * A value v made by a pointwise node P in forward is recomputed when P's
 * value operands are kept anyway: each is an input or a const (the
 * caller's, alive the whole call) or a value backward reads itself, in
 * device memory, and never written in place (a param is: the fused
 * optimizer updates it inside backward; so is anything an in-place op or
 * a write-back writes) or passed through control_deps.  Then, for
 *
 *   %h = matmul(%x, %w1)
 *   %a = gelu(%h)                      backward reads %h (gelu's derivative)
 *   %o = matmul(%a, %w2)               and %a (the derivative of %w2)
 *
 * backward gets, right before its first read of %a and on that node's
 * stream, `%a.re = gelu(%h)`, and its reads of %a read %a.re: %a now
 * lives until its last forward use only, %a.re from there to its last
 * backward use.  v itself must not be returned, in host memory, marked
 * `offload` (the user's choice wins), or made by a node with more than
 * one result.
 *
 * A value v that is a reshape, squeeze, unsqueeze, transpose or permute
 * of such a P's value (what torch.export's graphs save: `%y = gelu(%x)`,
 * then `%v = reshape(%y, ...)` read by backward) is recomputed the same
 * way, P's copy and then the view's, when backward reads P's value only
 * through v: the view's storage is P's value, kept until v's last read.
 *
 * A value recomputed this way is no operand of another (one level: the
 * copies read only what forward keeps).  The rewrite is made only when it
 * lowers the estimated device peak: values made by nodes, each live from
 * its definition to its last access (the memory plan of memplan.c without
 * its fragmentation), the copies' operands kept until the copies run.
 * Then each recomputation that does not lower it is left out (`trim`,
 * below): a copy costs time, and the last layer's can sit at the peak
 * itself.  With --remat-budget, more are left out, the values read first
 * in backward first, as long as the estimate stays within the budget
 * (`fit_budget`, below).  Like offload, it applies only to a backward
 * derived in this compilation: a written `backward(...) { }` block (as
 * --emit=ir prints it, with the recomputations) is taken as it is.
 * --dump-after=remat lists what was recomputed, what was kept from
 * forward, and the two peaks.
 *
 * A copy gets company when backward has a pointwise node B of the copy's
 * shape reading one of its operands on the copy's stream a little later
 * (gelu's derivative: `%grad.h = gelu_backward(%grad.a, %h)` beside
 * `%a.re = gelu(%h)`): B moves to right after the copy, and the node D
 * making B's other operand (`%grad.a = matmul(%grad.o, %w2)`) to right
 * before it, so that fusion makes the copy and B one kernel reading %h
 * once.  Only when nothing in between is a sync op or work of another
 * stream, nothing B passes writes in place what B reads, nothing D passes
 * what D reads, D reads only values made before the copy and not %a, and
 * neither reads a value recomputed too, whose copy goes where its first
 * backward reader is (the moves then change no value).  --dump-after=remat names B beside the value.
 */
#include <inttypes.h>
#include <string.h>

#include "passes.h"

/* One recomputation: v (made by node def, or by node view from def's
 * value; read last in forward by node lastf) is read first in backward by
 * node first, last by node lastb; its copy goes before first.  beside:
 * the backward pointwise node moved to right after the copy (NONE: none),
 * with hoist, the node making its other operand, moved to right before it
 * (NONE: none), and before hoist feed, the node making hoist's operand
 * when hoist is a view of it (NONE: none). */
typedef struct {
	ValId v;
	NodeId def, view, lastf, first, lastb;
	NodeId beside, hoist, feed;
} Remat;

typedef VEC(Remat) RematVec;

/* What the pass looks at: per value its class root, whether the class
 * is written in place, and its last access. */
typedef struct {
	Graph *g;
	NodeId bw, end;
	ValId *root;
	uint8_t *written, *bad, *cand;
	NodeId *first, *lastf, *last;
	RematVec r;
} Rm;
/* Whether operand value u of a recomputed node stays valid until
 * backward: kept anyway, in device memory, never written. */
static int
operand_kept(const Graph *g, ValId u, const ValId *root, const uint8_t *written)
{
	const Value *val = &g->vals.v[u];
	if (val->type.host || written[root[u]])
		return 0;
	return val->kind == VK_INPUT || val->kind == VK_CONST ||
	       (val->kind == VK_NODE && val->saved);
}

/* Whether op makes a view of its operand that remat may recompute with
 * the pointwise node making the operand: the same elements, reshaped or
 * reordered. */
static int
view_op(int op)
{
	return op == OP_RESHAPE || op == OP_SQUEEZE || op == OP_UNSQUEEZE ||
	       op == OP_TRANSPOSE || op == OP_PERMUTE;
}

/* Whether value v may be dropped after its last forward read: not
 * returned, offloaded, in host memory or written in place. */
static int
droppable(const Rm *R, ValId v)
{
	const Value *val = &R->g->vals.v[v];
	return !val->offload && !val->type.host && !R->bad[v] && !R->written[R->root[v]];
}

/* Accesses of every value and the candidates, in program order of
 * their definitions. */
static void
find(Rm *R)
{
	Graph *g = R->g;
	uint32_t nv = g->vals.n;
	R->root = xmalloc(((size_t)nv + 1) * sizeof *R->root);
	R->written = calloc((size_t)nv + 1, 1);
	R->bad = calloc((size_t)nv + 1, 1);
	R->cand = calloc((size_t)nv + 1, 1);
	R->first = xmalloc(((size_t)nv + 1) * sizeof *R->first);
	R->lastf = xmalloc(((size_t)nv + 1) * sizeof *R->lastf);
	R->last = xmalloc(((size_t)nv + 1) * sizeof *R->last);
	if (!R->written || !R->bad || !R->cand)
		out_of_memory(0);
	ir_alias_roots(g, R->root);
	for (ValId v = 0; v < nv; v++) {
		R->first[v] = NONE;
		R->lastf[v] = R->last[v] = g->vals.v[v].kind == VK_NODE ? g->vals.v[v].def : NONE;
	}
	for (uint32_t i = 0; i < g->rets.n; i++) {
		R->bad[g->rets.v[i]] = 1;
		R->last[g->rets.v[i]] = g->nodes.n; /* to the end of the call */
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (n->opnd[k].kind != OK_VAL)
				continue;
			ValId u = n->opnd[k].v;
			if (n->op == OP_CONTROL_DEPS)
				R->written[R->root[u]] = R->bad[u] = 1; /* aliased: left alone */
			int acc = ir_access(n, k);
			if (acc == RACC_NONE)
				continue;
			if (acc == RACC_WRITE)
				R->written[R->root[u]] = 1;
			if (R->last[u] != g->nodes.n)
				R->last[u] = i;
			if (i < R->bw)
				R->lastf[u] = i;
			else if (i > R->bw && i < R->end && R->first[u] == NONE)
				R->first[u] = i;
		}
	}
	/* how many saved views each value has: a view is recomputed only
	 * when it is the one way backward reads its operand */
	uint32_t *nview = calloc((size_t)nv + 1, sizeof *nview);
	if (!nview)
		out_of_memory(0);
	for (NodeId i = 0; i < R->bw; i++) {
		const Node *n = &g->nodes.v[i];
		if (!(n->flags & NF_DEAD) && view_op(n->op) && n->nres == 1 && n->nopnd == 1 &&
		    n->opnd[0].kind == OK_VAL && g->vals.v[n->res[0]].saved)
			nview[n->opnd[0].v]++;
	}
	for (NodeId i = 0; i < R->bw; i++) {
		const Node *n = &g->nodes.v[i];
		if ((n->flags & NF_DEAD) || n->op >= OP__N || n->nres != 1)
			continue;
		ValId v = n->res[0];
		NodeId def = i, view = NONE;
		if (nview[v])
			continue; /* a saved view keeps v's storage alive anyway */
		if (view_op(n->op)) {
			if (n->nopnd != 1 || n->opnd[0].kind != OK_VAL)
				continue;
			ValId u = n->opnd[0].v;
			if (g->vals.v[u].kind != VK_NODE || g->vals.v[u].saved || nview[u] != 1 ||
			    !droppable(R, u))
				continue;
			def = g->vals.v[u].def;
			view = i;
		}
		const Node *p = &g->nodes.v[def];
		if ((p->flags & NF_DEAD) || p->op >= OP__N || p->nres != 1 ||
		    !(op_table[p->op].flags & OPF_POINTWISE) || !g->vals.v[v].saved ||
		    !droppable(R, v) || R->first[v] == NONE)
			continue;
		int ok = 1;
		for (uint32_t k = 0; k < p->nopnd && ok; k++)
			if (p->opnd[k].kind == OK_VAL)
				ok = operand_kept(g, p->opnd[k].v, R->root, R->written) &&
				     !R->cand[p->opnd[k].v];
		if (ok) {
			Remat r = {v, def, view, R->lastf[v], R->first[v], R->last[v], NONE, NONE, NONE};
			vec_push(&R->r, r);
			R->cand[v] = R->cand[p->res[0]] = 1;
		}
	}
	free(nview);
}

/* The device peak of values made by nodes, each live from its definition
 * to its last access (the memory plan without its fragmentation), with
 * the recomputations (with = 1) or without. */
static uint64_t
estimate(Rm *R, int with)
{
	Graph *g = R->g;
	uint32_t nn = g->nodes.n;
	int64_t *diff = calloc((size_t)nn + 2, sizeof *diff);
	NodeId *last = xmalloc(((size_t)g->vals.n + 1) * sizeof *last);
	if (!diff)
		out_of_memory(0);
	NodeId *at = xmalloc(((size_t)nn + 1) * sizeof *at); /* where each node runs */
	memcpy(last, R->last, g->vals.n * sizeof *last);
	for (NodeId i = 0; i < nn; i++)
		at[i] = i;
	if (with)
		for (uint32_t j = 0; j < R->r.n; j++) {
			const Remat *r = &R->r.v[j];
			if (r->hoist != NONE)
				at[r->hoist] = r->first;
			if (r->feed != NONE)
				at[r->feed] = r->first;
			if (r->beside != NONE)
				at[r->beside] = r->first;
			const Node *p = &g->nodes.v[r->def];
			last[r->v] = r->lastf; /* the copy's life is added below */
			int64_t sz = (int64_t)memplan_buf_size(&g->vals.v[r->v].type);
			diff[r->first] += sz;
			diff[r->lastb + 1] -= sz;
			for (uint32_t k = 0; k < p->nopnd; k++) {
				ValId u = p->opnd[k].v;
				if (p->opnd[k].kind == OK_VAL && g->vals.v[u].kind == VK_NODE &&
				    last[u] < r->first)
					last[u] = r->first;
			}
		}
	for (ValId v = 0; v < g->vals.n; v++) {
		const Value *val = &g->vals.v[v];
		if (val->kind != VK_NODE || val->def == NONE || val->type.host)
			continue;
		int64_t sz = (int64_t)memplan_buf_size(&val->type);
		diff[at[val->def]] += sz;
		diff[(last[v] < nn ? last[v] : nn) + 1] -= sz;
	}
	int64_t cur = 0, peak = 0;
	for (NodeId i = 0; i <= nn; i++) {
		cur += diff[i];
		if (cur > peak)
			peak = cur;
	}
	free(diff);
	free(last);
	free(at);
	return (uint64_t)peak;
}

/* ------------------------------------------------------------------ trim */

/* How many recomputations, the first in backward first, `trim` tries to
 * leave out: each try is one estimate, a walk over the graph. */
enum { TRIM_TRIES = 4 };

/* The recomputations of R->r copied aside, and their ranks in the order
 * backward reads their values first (the last layers' first): what trim
 * and fit_budget leave out is a prefix of that order, and what is left
 * keeps its order in R->r. */
typedef struct {
	Remat *all;
	uint32_t *rank;
	uint32_t n;
} ByFirst;

static ByFirst
by_first(const Rm *R)
{
	uint32_t n = R->r.n;
	ByFirst b = {.all = xmalloc((size_t)n * sizeof *b.all),
	             .rank = xmalloc((size_t)n * sizeof *b.rank), .n = n};
	uint64_t *key = xmalloc((size_t)n * sizeof *key); /* first << 32 | j */
	memcpy(b.all, R->r.v, (size_t)n * sizeof *b.all);
	for (uint32_t j = 0; j < n; j++)
		key[j] = (uint64_t)b.all[j].first << 32 | j;
	sort_u64(key, n);
	for (uint32_t k = 0; k < n; k++)
		b.rank[(uint32_t)key[k]] = k;
	free(key);
	return b;
}

/* R->r becomes b's recomputations but the first t read in backward; with
 * out, those go there (in their order in R->r). */
static void
without_first(Rm *R, const ByFirst *b, uint32_t t, RematVec *out)
{
	R->r.n = 0;
	for (uint32_t j = 0; j < b->n; j++) {
		if (b->rank[j] >= t)
			R->r.v[R->r.n++] = b->all[j];
		else if (out)
			vec_push(out, b->all[j]);
	}
}

static void
by_first_free(ByFirst *b)
{
	free(b->all);
	free(b->rank);
}

/* Leaves out the recomputations that do not lower the peak.  A copy (and
 * its company) lives in backward beside the gradients made there, so the
 * copy of a value backward reads first (the last layer's) can sit at the
 * peak, where keeping the value from forward would cost nothing more: the
 * transformer's %l7.g, whose copy, the product making its derivative's
 * operand and the derivative's result are live at once, where without
 * the copy the weight gradient reads %l7.g first and frees it.  The
 * values read first in backward are tried first, one at a time, each left
 * out while the estimate with the others stays at or under *peak; the
 * first that would raise it ends the tries, as do TRIM_TRIES of them.  The
 * values left out go to *out, in their order in R->r; *peak becomes the
 * new estimate.  With --offload=auto the offload pass then weighs what is
 * kept like any other saved value (its estimates at each budget come out
 * no worse: docs/offload.md, "The 15% row after remat's trim"). */
static void
trim(Rm *R, uint64_t *peak, RematVec *out)
{
	if (R->r.n < 2)
		return;
	ByFirst b = by_first(R);
	uint32_t t = 0;
	while (t < TRIM_TRIES && t + 1 < b.n) {
		without_first(R, &b, t + 1, NULL);
		uint64_t e = estimate(R, 1);
		if (e > *peak)
			break;
		*peak = e;
		t++;
	}
	without_first(R, &b, t, out);
	by_first_free(&b);
}

/* --remat-budget: the copies left are a trade of time for memory, which
 * the budget says how much of to make (as PyTorch's
 * activation_memory_budget does for torch.compile's partitioner).  Keeps
 * from forward, the values read first in backward first, as many as the
 * estimate allows to stay within budget: the longest such prefix, found
 * by halving (each try one estimate, a walk over the graph).  The caller
 * has checked that the estimate with every copy (*peak) fits and the one
 * with none does not; the values kept go to *out (in their order in
 * R->r), *peak becomes the new estimate. */
static void
fit_budget(Rm *R, uint64_t budget, uint64_t *peak, RematVec *out)
{
	ByFirst b = by_first(R);
	uint32_t lo = 0, hi = b.n; /* lo fits, hi does not */
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		without_first(R, &b, mid, NULL);
		uint64_t e = estimate(R, 1);
		if (e <= budget)
			lo = mid, *peak = e;
		else
			hi = mid;
	}
	without_first(R, &b, lo, out);
	by_first_free(&b);
}

/* ------------------------------------------------------------------ company */

/* How far (in nodes) from a copy its company may be moved. */
enum { BESIDE_MAX = 64 };

/* 1 when value u is there before node `at`: not made by a node, or made
 * before it. */
static int
made_before(const Graph *g, ValId u, NodeId at)
{
	const Value *val = &g->vals.v[u];
	return val->kind != VK_NODE || val->def < at;
}

/* 1 when node n reads value u's class (a root in root[]). */
static int
reads_root(const Rm *R, const Node *n, ValId r)
{
	for (uint32_t k = 0; k < n->nopnd; k++)
		if (n->opnd[k].kind == OK_VAL && R->root[n->opnd[k].v] == r)
			return 1;
	return 0;
}

/* Whether node d may move up to right before the copy of r (at r->first):
 * of that node's stream, no sync op, not moved already, reading no value
 * recomputed (re[]) and writing none in place; each value it reads made
 * before the copy's place, except `later` (NONE: none). */
static int
hoistable(const Rm *R, const Remat *r, NodeId d, const uint8_t *moved, const uint8_t *re,
          ValId later)
{
	const Graph *g = R->g;
	const Node *D = &g->nodes.v[d];
	if (D->op >= OP__N || moved[d] || D->stream != g->nodes.v[r->first].stream ||
	    ir_sync_of(D, &(uint32_t){0}) >= 0)
		return 0;
	for (uint32_t k = 0; k < D->nopnd; k++) {
		if (D->opnd[k].kind != OK_VAL)
			continue;
		ValId u = D->opnd[k].v;
		if (u == r->v || re[u] || ir_access(D, k) == RACC_WRITE ||
		    (u != later && !made_before(g, u, r->first)))
			return 0;
	}
	return 1;
}

/* Whether B (node b) can join the copy of r as its company (see the top),
 * with *hoist the node making B's other operand when that comes after the
 * copy's place, and *feed the node making *hoist's operand when *hoist is
 * a view made after the copy's place too (`%grad.a = reshape(%grad.a2)`
 * of the product `%grad.a2 = linear(...)`, as torch.export writes it).
 * Neither B nor those nodes may read a value recomputed too (re[u]): its
 * reads become reads of its copy, which goes before its first reader in
 * backward, and that may be one of them, after the place they would move
 * to. */
static int
company_fits(Rm *R, const Remat *r, NodeId b, const uint8_t *moved, const uint8_t *re,
             NodeId *hoist, NodeId *feed)
{
	Graph *g = R->g;
	const Node *B = &g->nodes.v[b], *F = &g->nodes.v[r->first];
	ValId v = r->v, made = g->nodes.v[r->def].res[0];
	*hoist = *feed = NONE;
	if (B->op >= OP__N || !(op_table[B->op].flags & OPF_POINTWISE) ||
	    (op_table[B->op].flags & OPF_INPLACE) || B->nres != 1 || moved[b] ||
	    B->stream != F->stream || b <= r->first || b - r->first > BESIDE_MAX ||
	    g->vals.v[B->res[0]].type.host ||
	    !type_same_shape(&g->vals.v[B->res[0]].type, &g->vals.v[made].type))
		return 0;
	/* the tanh gelu_backward of a product: cuBLASLt's DGELU epilogue
	 * (kernels.c) computes it with the product instead */
	if (B->opnd[0].kind == OK_VAL && g->vals.v[B->opnd[0].v].kind == VK_NODE &&
	    kernel_dgelu_pair(g, &g->nodes.v[g->vals.v[B->opnd[0].v].def], B))
		return 0;
	for (uint32_t k = 0; k < B->nopnd; k++) {
		if (B->opnd[k].kind != OK_VAL)
			continue;
		ValId u = B->opnd[k].v;
		if (u == v || u == made || re[u])
			return 0;
		if (made_before(g, u, r->first))
			continue;
		NodeId d = g->vals.v[u].def;
		if ((*hoist != NONE && *hoist != d) || moved[d])
			return 0;
		*hoist = d;
	}
	if (*hoist != NONE) {
		const Node *D = &g->nodes.v[*hoist];
		ValId u = D->nopnd == 1 && D->opnd[0].kind == OK_VAL ? D->opnd[0].v : NONE;
		if (u != NONE && view_op(D->op) && !made_before(g, u, r->first) &&
		    g->vals.v[u].kind == VK_NODE) {
			*feed = g->vals.v[u].def;
			if (!hoistable(R, r, *feed, moved, re, NONE) ||
			    !hoistable(R, r, *hoist, moved, re, u))
				return 0;
		} else if (!hoistable(R, r, *hoist, moved, re, NONE)) {
			return 0;
		}
	}
	/* What lies between: same stream, no sync op, no in-place write of
	 * what B reads, nor, before D (and its feed), of what it reads. */
	for (NodeId i = r->first; i < b; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD || i == *hoist || i == *feed)
			continue;
		if (n->stream != F->stream || n->op == OP_SYNC_DEALLOC ||
		    ir_sync_of(n, &(uint32_t){0}) >= 0)
			return 0;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (ir_access(n, k) != RACC_WRITE)
				continue;
			ValId w = R->root[n->opnd[k].v];
			if (reads_root(R, B, w) ||
			    (*hoist != NONE && i < *hoist && reads_root(R, &g->nodes.v[*hoist], w)) ||
			    (*feed != NONE && i < *feed && reads_root(R, &g->nodes.v[*feed], w)))
				return 0;
		}
	}
	return 1;
}

/* Finds each copy's company: per value read by a recomputed node, the
 * copy reading it (opof), then one walk over backward.  1 when some copy
 * got company. */
static int
find_company(Rm *R)
{
	int any = 0;
	Graph *g = R->g;
	uint32_t *opof = xmalloc(((size_t)g->vals.n + 1) * sizeof *opof);
	uint8_t *moved = calloc((size_t)g->nodes.n + 1, 1);
	uint8_t *re = calloc((size_t)g->vals.n + 1, 1); /* recomputed values */
	if (!moved || !re)
		out_of_memory(0);
	for (ValId v = 0; v < g->vals.n; v++)
		opof[v] = NONE;
	for (uint32_t j = 0; j < R->r.n; j++) {
		const Node *p = &g->nodes.v[R->r.v[j].def];
		re[R->r.v[j].v] = 1;
		for (uint32_t k = 0; k < p->nopnd; k++)
			if (p->opnd[k].kind == OK_VAL && opof[p->opnd[k].v] == NONE)
				opof[p->opnd[k].v] = j;
	}
	for (NodeId i = R->bw + 1; i < R->end; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (n->opnd[k].kind != OK_VAL || opof[n->opnd[k].v] == NONE)
				continue;
			Remat *r = &R->r.v[opof[n->opnd[k].v]];
			NodeId d, f;
			if (r->beside != NONE || !company_fits(R, r, i, moved, re, &d, &f))
				continue;
			r->beside = i;
			r->hoist = d;
			r->feed = f;
			moved[i] = 1;
			if (d != NONE)
				moved[d] = 1;
			if (f != NONE)
				moved[f] = 1;
			any = 1;
			break;
		}
	}
	free(opof);
	free(moved);
	free(re);
	return any;
}

/* No copy gets company. */
static void
drop_company(Rm *R)
{
	for (uint32_t j = 0; j < R->r.n; j++)
		R->r.v[j].beside = R->r.v[j].hoist = R->r.v[j].feed = NONE;
}

/* Node i moved to before `slot` (its old place dropped). */
static void
move_node(Graph *g, NodeInsVec *ins, NodeId i, NodeId slot)
{
	NodeIns in = {slot, 0, g->nodes.v[i]};
	g->nodes.v[i].flags |= NF_DEAD;
	vec_push(ins, in);
}

/* A copy of node `from` (one result) inserted before node `slot`, on
 * slot's stream, reading `to` where `from` reads u (NONE: reading what it
 * reads); its result is a fresh value named after from's, with ".re". */
static ValId
copy_before(Graph *g, NodeInsVec *ins, NodeId from, NodeId slot, ValId u, ValId to)
{
	const Node *p = &g->nodes.v[from];
	Node n = ir_node_make(g, p->op, p->nopnd, 1, g->nodes.v[slot].stream, 0, p->loc);
	p = &g->nodes.v[from];
	memcpy(n.opnd, p->opnd, p->nopnd * sizeof *n.opnd);
	if (p->nattr)
		memcpy(n.attr, p->attr, p->nattr * sizeof *n.attr);
	for (uint32_t k = 0; k < n.nopnd; k++)
		if (u != NONE && n.opnd[k].kind == OK_VAL && n.opnd[k].v == u)
			n.opnd[k].v = to;
	ValId r = p->res[0];
	ValId c = ir_value_fresh(g, arena_printf(g->mod->arena, "%s.re", g->vals.v[r].name),
	                         g->vals.v[r].loc);
	g->vals.v[c].type = g->vals.v[r].type;
	n.res[0] = c;
	NodeIns in = {slot, 0, n};
	vec_push(ins, in);
	return c;
}

/* Inserts the copies (with their company) and points backward's reads at
 * them. */
static void
rewrite(Rm *R)
{
	Graph *g = R->g;
	NodeInsVec ins = {0};
	uint32_t nv = g->vals.n;
	ValId *to = xmalloc(((size_t)nv + 1) * sizeof *to);
	for (ValId v = 0; v < nv; v++)
		to[v] = NONE;
	for (uint32_t j = 0; j < R->r.n; j++) {
		const Remat *r = &R->r.v[j];
		if (r->feed != NONE)
			move_node(g, &ins, r->feed, r->first);
		if (r->hoist != NONE)
			move_node(g, &ins, r->hoist, r->first);
		ValId c = copy_before(g, &ins, r->def, r->first, NONE, NONE);
		if (r->beside != NONE)
			move_node(g, &ins, r->beside, r->first);
		if (r->view != NONE)
			c = copy_before(g, &ins, r->view, r->first, g->nodes.v[r->def].res[0], c);
		to[r->v] = c;
		g->vals.v[r->v].saved = 0;
	}
	for (NodeId i = R->bw + 1; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL && n->opnd[k].v < nv && to[n->opnd[k].v] != NONE)
				n->opnd[k].v = to[n->opnd[k].v];
	}
	free(to);
	ir_insert(g, &ins);
	vec_free(&ins);
}

int
remat_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)d;
	Rm R = {.g = g};
	if (po->opt_level < 2 || po->no_remat || !ir_backward_block(g, &R.bw, &R.end) ||
	    !ir_block_derived(g, R.bw, R.end))
		return PASS_SAME;
	find(&R);
	uint64_t before = 0, after = 0;
	int keep = 0;
	if (R.r.n) {
		before = estimate(&R, 0);
		after = estimate(&R, 1);
		keep = after < before;
	}
	if (keep && find_company(&R)) {
		uint64_t with = estimate(&R, 1);
		if (with < before)
			after = with;
		else
			drop_company(&R);
	}
	/* --remat-budget: no copy where the peak fits without one */
	uint64_t budget = po->remat_budget;
	int fits = keep && budget && before <= budget;
	keep = keep && !fits;
	RematVec left = {0}, spared = {0};
	if (keep)
		trim(&R, &after, &left);
	if (keep && budget && after <= budget && R.r.n > 1)
		fit_budget(&R, budget, &after, &spared);
	if (R.r.n && passes_dumps(po, "remat")) {
		fprintf(stderr, "# remat: %u value%s to recompute in backward, estimated device "
		        "peak %" PRIu64 " -> %" PRIu64 " bytes: %s\n", R.r.n, R.r.n == 1 ? "" : "s",
		        before, after, keep ? "done" : fits ? "not done (the peak fits --remat-budget "
		        "without)" : "not done");
		for (uint32_t j = 0; j < R.r.n; j++) {
			const Remat *r = &R.r.v[j];
			fprintf(stderr, "#   %%%s", g->vals.v[r->v].name);
			if (r->view != NONE)
				fprintf(stderr, " (a view of %%%s, recomputed with it)",
				        g->vals.v[g->nodes.v[r->def].res[0]].name);
			if (r->beside != NONE)
				fprintf(stderr, " (with %%%s beside it)",
				        g->vals.v[g->nodes.v[r->beside].res[0]].name);
			fputc('\n', stderr);
		}
		for (uint32_t j = 0; j < left.n; j++)
			fprintf(stderr, "#   %%%s kept from forward: its copy would not lower the peak\n",
			        g->vals.v[left.v[j].v].name);
		for (uint32_t j = 0; j < spared.n; j++)
			fprintf(stderr, "#   %%%s kept from forward: the peak fits --remat-budget with it\n",
			        g->vals.v[spared.v[j].v].name);
	}
	if (keep)
		rewrite(&R);
	free(R.root);
	free(R.written);
	free(R.bad);
	free(R.cand);
	free(R.first);
	free(R.lastf);
	free(R.last);
	vec_free(&R.r);
	vec_free(&left);
	vec_free(&spared);
	return keep ? 1 : PASS_SAME;
}
