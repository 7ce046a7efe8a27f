/*
 * verify.c - IR invariants, checked after every pass.
 *
 * A broken invariant is a fault of the compiler, never of the input, so it
 * is reported as an internal error naming the pass that ran last.
 */
#include <string.h>

#include "passes.h"

#define FAIL(...) verify_fail(g, after, __VA_ARGS__)

static _Noreturn void
verify_fail(Graph *g, const char *after, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static _Noreturn void
verify_fail(Graph *g, const char *after, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	ICE("IR verifier, graph '%s', after pass '%s': %s", g->name, after, msg);
}

static void
check_type(Graph *g, const char *after, const Value *v)
{
	if (v->type.dt >= DT__N)
		FAIL("value '%%%s' has no valid dtype", v->name);
	if (v->type.rank > SG_MAXRANK)
		FAIL("value '%%%s' has rank %u", v->name, v->type.rank);
	for (int i = 0; i < v->type.rank; i++)
		if (v->type.d[i] < 0)
			FAIL("value '%%%s' has a negative size", v->name);
}

static void
check_operands(Graph *g, const char *after, const Node *n, NodeId id,
               uint8_t *defined)
{
	for (uint32_t i = 0; i < n->nopnd; i++) {
		const Opnd *o = &n->opnd[i];
		switch (o->kind) {
		case OK_VAL:
			if (o->v >= g->vals.n)
				FAIL("node %u (%s) has operand %u out of range", id,
				     op_name(n->op), i);
			if (!defined[o->v])
				FAIL("node %u (%s) uses '%%%s' before its definition", id,
				     op_name(n->op), g->vals.v[o->v].name);
			break;
		case OK_STREAM:
			if (o->v >= g->streams.n)
				FAIL("node %u (%s): bad stream operand", id, op_name(n->op));
			break;
		case OK_EVENT:
			if (o->v >= g->events.n)
				FAIL("node %u (%s): bad event operand", id, op_name(n->op));
			break;
		case OK_INT: case OK_FLOAT: case OK_BOOL:
			break;
		default:
			FAIL("node %u (%s): operand %u of unknown kind", id,
			     op_name(n->op), i);
		}
	}
}

/* The layouts (layout.c): channels last only on rank-4 values, read and
 * written only where a layout-aware node takes it, each such node all
 * channels last or all row order.  An operand a node does not read
 * (ir_access: sync_dealloc's, which only lets the value's memory go) may
 * be in either; control_deps' results are in their operands'. */
static void
check_layouts(Graph *g, const char *after)
{
	for (ValId v = 0; v < g->vals.n; v++)
		if (g->vals.v[v].layout != LAYOUT_ROW &&
		    (g->vals.v[v].layout != LAYOUT_CL || g->vals.v[v].type.rank != 4))
			FAIL("'%%%s' has layout %u at rank %d", g->vals.v[v].name, g->vals.v[v].layout,
			     g->vals.v[v].type.rank);
	for (NodeId id = 0; id < g->nodes.n; id++) {
		const Node *n = &g->nodes.v[id];
		if ((n->flags & NF_DEAD) || n->op >= OP__N)
			continue;
		if (n->op == OP_TO_LAYOUT)
			continue; /* either side in either layout (its `layout` says which
			             the pass meant; parsed back, a plain copy) */
		if (n->op == OP_CONTROL_DEPS) { /* passes each value through */
			for (uint32_t j = 0; j < n->nres; j++)
				if (g->vals.v[n->res[j]].layout != g->vals.v[n->opnd[j].v].layout)
					FAIL("node %u (control_deps) passes '%%%s' through in another layout",
					     id, g->vals.v[n->opnd[j].v].name);
			continue;
		}
		LayoutRole r;
		int aware = layout_role(g, id, &r), cl = -1;
		for (uint32_t k = 0; k < n->nopnd + n->nres; k++) {
			int res = k >= n->nopnd;
			uint32_t j = res ? k - n->nopnd : k;
			if (!res && ir_access(n, j) == RACC_NONE)
				continue; /* not a value, or not read (sync_dealloc's) */
			ValId v = res ? n->res[j] : n->opnd[j].v;
			int tied = aware && (res ? ((r.act_res && j == 0) || (int)j == r.w_res)
			                         : (((r.act_ops >> j) & 1) || (int)j == r.w_op));
			int l = g->vals.v[v].layout == LAYOUT_CL;
			if (!tied) {
				if (l)
					FAIL("node %u (%s) %s '%%%s' channels last, which it cannot", id,
					     op_name(n->op), res ? "writes" : "reads", g->vals.v[v].name);
				continue;
			}
			if (cl >= 0 && cl != l)
				FAIL("node %u (%s) mixes channels-last and row-order tensors at '%%%s'", id,
				     op_name(n->op), g->vals.v[v].name);
			cl = l;
		}
	}
}

/* Every value named, and found by its name in the graph's map.  A value
 * found so before keeps being found while its name and valmap's entry for
 * it stay: the name pointer is compared with the one last found, and the
 * entry changes only by a map_put rewriting its key, which valmap counts.
 * Such a name was not empty then either (names are never written after
 * they are made), so it is not read again.  The rest are looked up. */
static void
check_names(Graph *g, const char *after)
{
	uint32_t known = g->valmap.rewrites == g->named_rewrites ? g->nnamed : 0;
	if (known > g->vals.n)
		known = 0;
	for (ValId v = 0; v < g->vals.n; v++) {
		const Value *val = &g->vals.v[v];
		if (v < known && val->name == g->named[v])
			continue; /* a name found before: not empty then */
		if (v < known)
			known = v;
		if (!val->name || !*val->name)
			FAIL("value %u has no name", v);
	}
	for (ValId v = known; v < g->vals.n; v++) {
		const Value *val = &g->vals.v[v];
		uint32_t *slot = map_get(&g->valmap, val->name, strlen(val->name));
		if (!slot || *slot != v)
			FAIL("value '%%%s' is not found by its name", val->name);
	}
	g->named = xrealloc(g->named, (g->vals.n + 1) * sizeof *g->named);
	for (ValId v = known; v < g->vals.n; v++)
		g->named[v] = g->vals.v[v].name;
	g->nnamed = g->vals.n;
	g->named_rewrites = g->valmap.rewrites;
}

void
verify_graph(Graph *g, const char *after)
{
	uint8_t *defined = xmalloc(g->vals.n + 1);
	memset(defined, 0, g->vals.n + 1);
	check_names(g, after);
	for (ValId v = 0; v < g->vals.n; v++) {
		const Value *val = &g->vals.v[v];
		if (val->kind != VK_NODE) {
			check_type(g, after, val);
			defined[v] = 1;
		}
	}
	int in_block = 0;
	for (NodeId id = 0; id < g->nodes.n; id++) {
		const Node *n = &g->nodes.v[id];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op >= OP_TOTAL)
			FAIL("node %u has op %u", id, n->op);
		if (n->stream >= g->streams.n)
			FAIL("node %u (%s) is on stream %u of %u", id, op_name(n->op),
			     n->stream, g->streams.n);
		if (n->op < OP__N && n->nattr != op_table[n->op].nattr)
			FAIL("node %u (%s) has %u attributes, its spec %u", id,
			     op_name(n->op), n->nattr, op_table[n->op].nattr);
		if (n->op == OP_BACKWARD && (n->flags & NF_BACKWARD))
			in_block = 1;
		else if (n->op == OP_BACKWARD_END) {
			if (!in_block)
				FAIL("node %u closes a backward block never opened", id);
			in_block = 0;
		} else if (in_block && !(n->flags & NF_BACKWARD))
			FAIL("node %u (%s) inside a derived block is not marked so",
			     id, op_name(n->op));
		check_operands(g, after, n, id, defined);
		for (uint32_t i = 0; i < n->nres; i++) {
			ValId r = n->res[i];
			if (r >= g->vals.n)
				FAIL("node %u (%s) has result %u out of range", id,
				     op_name(n->op), i);
			const Value *v = &g->vals.v[r];
			if (defined[r])
				FAIL("'%%%s' is defined twice", v->name);
			if (v->kind != VK_NODE || v->def != id || v->resno != i)
				FAIL("'%%%s' does not point back at its definition", v->name);
			check_type(g, after, v);
			defined[r] = 1;
		}
	}
	if (in_block)
		FAIL("derived backward block is never closed");
	/* and no value claims a definition that does not make it (the nodes
	 * a rebuild drops leave their results without one) */
	for (ValId r = 0; r < g->vals.n; r++) {
		const Value *v = &g->vals.v[r];
		if (v->kind != VK_NODE || v->def == NONE || defined[r])
			continue;
		const Node *d = v->def < g->nodes.n ? &g->nodes.v[v->def] : NULL;
		if (!d || !(d->flags & NF_DEAD) || v->resno >= d->nres || d->res[v->resno] != r)
			FAIL("'%%%s' points at node %u, which does not make it", v->name, v->def);
	}
	for (uint32_t i = 0; i < g->rets.n; i++) {
		if (g->rets.v[i] >= g->vals.n || !defined[g->rets.v[i]])
			FAIL("return of an undefined value");
		if (g->vals.v[g->rets.v[i]].layout != LAYOUT_ROW)
			FAIL("'%%%s' is returned channels last", g->vals.v[g->rets.v[i]].name);
	}
	free(defined);
	check_layouts(g, after);
	sched_verify(g, after); /* the backend's decisions, once made */
}
