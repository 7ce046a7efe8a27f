/*
 * ir.c - building graphs: values, nodes, attribute look-up.
 */
#include <stdlib.h>
#include <string.h>

#include "sgc.h"

int64_t
ir_world(Module *m)
{
	uint32_t *i = m ? map_get(&m->dimmap, "WORLD", 5) : NULL;
	return i && *i < m->dims.n ? m->dims.v[*i].n : 1;
}

Graph *
ir_graph_new(Module *m, const char *name, Loc loc)
{
	Graph *g = arena_alloc(m->arena, sizeof *g);
	g->name = name;
	g->loc = loc;
	g->mod = m;
	map_init(&g->valmap);
	map_init(&g->streammap);
	map_init(&g->eventmap);
	map_init(&g->freshval);
	map_init(&g->freshev);
	Stream dflt = {.name = "default"};
	vec_push(&g->streams, dflt);
	map_put(&g->streammap, "default", 7, 0);
	vec_push(&m->graphs, g);
	return g;
}

ValId
ir_value_new(Graph *g, const char *name, ValKind k, Loc loc)
{
	Value v = {.name = name, .kind = (uint8_t)k, .def = NONE, .loc = loc};
	v.type.dt = DT_ERR;
	ValId id = g->vals.n;
	vec_push(&g->vals, v);
	if (name)
		map_put(&g->valmap, name, strlen(name), id);
	return id;
}

/* The first of base, base.1, base.2... that no value has.  Names are never
 * freed, so freshval keeps where a base's search ended and the next one
 * starts there; only from the second step on, as most bases are asked for
 * once (a base asked for again costs two more look-ups at most). */
const char *
ir_name_fresh(Graph *g, const char *base)
{
	Arena *a = g->mod->arena;
	size_t bl = strlen(base);
	uint32_t *memo = map_get(&g->freshval, base, bl), i = memo ? *memo : 0;
	const char *name = i ? arena_numbered(a, base, bl, '.', i) : base;
	while (map_get(&g->valmap, name, strlen(name)))
		name = arena_numbered(a, base, bl, '.', ++i);
	if (name == base)
		name = arena_strdup(a, base);
	if (memo)
		*memo = i + 1;
	else if (i > 1)
		map_put(&g->freshval, arena_strdup(a, base), bl, i + 1);
	return name;
}

/* A value with a fresh name from base. */
ValId
ir_value_fresh(Graph *g, const char *base, Loc loc)
{
	return ir_value_new(g, ir_name_fresh(g, base), VK_NODE, loc);
}

NodeId
ir_node_add(Graph *g, const Node *proto)
{
	Arena *a = g->mod->arena;
	Node n = *proto;
	if (n.nopnd) {
		n.opnd = arena_alloc(a, n.nopnd * sizeof *n.opnd);
		memcpy(n.opnd, proto->opnd, n.nopnd * sizeof *n.opnd);
	}
	if (n.nres) {
		n.res = arena_alloc(a, n.nres * sizeof *n.res);
		memcpy(n.res, proto->res, n.nres * sizeof *n.res);
	}
	if (n.nattr) {
		n.attr = arena_alloc(a, n.nattr * sizeof *n.attr);
		memcpy(n.attr, proto->attr, n.nattr * sizeof *n.attr);
	}
	if (n.nextra) {
		n.extra = arena_alloc(a, n.nextra * sizeof *n.extra);
		memcpy(n.extra, proto->extra, n.nextra * sizeof *n.extra);
	}
	NodeId id = g->nodes.n;
	for (uint32_t i = 0; i < n.nres; i++) {
		g->vals.v[n.res[i]].def = id;
		g->vals.v[n.res[i]].resno = (uint16_t)i;
	}
	vec_push(&g->nodes, n);
	return id;
}

const Attr *
ir_attr(const Node *n, const char *name)
{
	if (n->op < OP__N) {
		int i = op_attr_index(n->op, name);
		if (i >= 0 && (uint32_t)i < n->nattr)
			return n->attr[i].set ? &n->attr[i] : NULL;
	}
	for (uint32_t i = 0; i < n->nextra; i++)
		if (strcmp(n->extra[i].key, name) == 0)
			return &n->extra[i].a;
	return NULL;
}

int64_t
ir_attr_int(const Node *n, const char *name, int64_t dflt)
{
	const Attr *a = ir_attr(n, name);
	return a ? a->i : dflt;
}

double
ir_attr_float(const Node *n, const char *name, double dflt)
{
	const Attr *a = ir_attr(n, name);
	return a ? a->f : dflt;
}

int
ir_draws(const Node *n)
{
	if (n->op >= OP__N)
		return 0;
	if (op_table[n->op].flags & OPF_RANDOM)
		return 1;
	return (n->op == OP_SDPA || n->op == OP_SDPA_BACKWARD) &&
	       ir_attr_float(n, "dropout_p", 0) > 0;
}

int
ir_norm_bwd_residual(const Node *n)
{
	return ir_attr_int(n, "residual", 0) ? (int)n->nopnd - 1 : -1;
}

int
ir_norm_bwd_weight(const Node *n)
{
	return (int)n->nopnd - (ir_norm_bwd_residual(n) >= 0) > 2 ? 2 : -1;
}

const Type *
ir_type(const Graph *g, const Opnd *o)
{
	return o->kind == OK_VAL ? &g->vals.v[o->v].type : NULL;
}

/* Frees what a compilation holds outside its arena: the growable arrays
 * and maps of the AST and of each graph.  Nodes, values and strings live
 * in the arena (arena_free). */
void
ast_free(AstFile *f)
{
	for (uint32_t i = 0; i < f->graphs.n; i++)
		vec_free(&f->graphs.v[i].stmts);
	vec_free(&f->graphs);
	vec_free(&f->dims);
}

void
module_free(Module *m)
{
	for (uint32_t i = 0; i < m->graphs.n; i++) {
		Graph *g = m->graphs.v[i];
		if (g->sched_free)
			g->sched_free(g);
		vec_free(&g->vals);
		vec_free(&g->nodes);
		vec_free(&g->streams);
		vec_free(&g->events);
		vec_free(&g->inputs);
		vec_free(&g->params);
		vec_free(&g->consts);
		vec_free(&g->rets);
		map_free(&g->valmap);
		map_free(&g->streammap);
		map_free(&g->eventmap);
		map_free(&g->freshval);
		map_free(&g->freshev);
		free(g->named);
	}
	vec_free(&m->graphs);
	vec_free(&m->dims);
	map_free(&m->dimmap);
}
