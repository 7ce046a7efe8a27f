/*
 * codegen_host.c - the host side of one graph's call: where every value
 * lives, when temporaries are allocated and released, and the statements
 * of the call in program order (stream and event ops, allocations, frees,
 * and the kernels and library calls of each node).
 *
 * Storage.  The alias classes and where each lives are the fusion pass's
 * (compiler/passes/schedule.c): a class holding an input, param or const uses that
 * tensor's memory; a returned class is computed straight into the
 * caller's output buffer; a to_host result lives in a pinned host buffer
 * the model owns; any other class is a temporary in the device arena at
 * the offset the memplan pass gave (compiler/passes/memplan.c: no reuse at -O0,
 * reuse across event paths at -O2), where a `sync_dealloc(%v, event=E,
 * stream=S)` becomes the wait of S for E that makes the reuse safe.
 *
 * A temporary the plan does not place (none today; kept as the fallback)
 * is allocated with cudaMallocAsync on its producer's stream before its
 * first definition and freed after the last node naming it (its `del`,
 * when the user wrote one); when streams other than the releasing one used
 * it, each records a model event after its last use and the releasing
 * stream waits for them before the free (language rule 8).
 *
 * Streams.  The call forks every stream from `default` at its start and
 * joins them into it at its end.  A wait_stream that orders nothing new
 * (its stream already waited for the other with nothing issued there
 * since, as a user's wait right after the fork) is written as a comment
 * only, and so is the final join when `default` has already waited for
 * every stream: each would cost an event record and a wait per call.
 *
 * The interpreter (compiler/interp/interp.c) uses the same classes and release
 * points, so both agree on what a program means.
 */
#include <string.h>

#include "codegen.h"
#include "init.h"

int
cg_stream(const Node *n)
{
	return (int)n->stream;
}

/* 1 when node n is live (not removed by a pass). */
static int
live(const Node *n)
{
	return !(n->flags & NF_DEAD);
}

const char *
cg_ptr(CgGraph *G, ValId v)
{
	return cg_fmt(G->c, "%s *", cg_ctype((DType)G->g->vals.v[v].type.dt));
}

const char *
cg_kernel_name(CgGraph *G, const Node *n, const char *what)
{
	Cg *c = G->c;
	char *base = cg_fmt(c, "k_%s_%u_%s", G->name, n->loc.line, what);
	if (n->nres)
		base = cg_fmt(c, "%s_%s", base, G->vname[n->res[0]] + 2);
	char *name = base;
	for (int k = 2; map_get(&G->kernames, name, strlen(name)); k++)
		name = cg_fmt(c, "%s_%d", base, k);
	map_put(&G->kernames, name, strlen(name), 1);
	return name;
}

/* ------------------------------------------------------------------ analysis */

/* C names for every value, unique within the graph. */
static void
name_values(CgGraph *G)
{
	Graph *g = G->g;
	Map used;
	map_init(&used);
	G->vname = arena_alloc(G->c->a, (g->vals.n + 1) * sizeof *G->vname);
	for (ValId v = 0; v < g->vals.n; v++)
		G->vname[v] = cg_unique_ident(G->c, &used, "v_", g->vals.v[v].name);
	map_free(&used);
	/* A folded view keeping its source's bytes (kernel_choice: reshape,
	 * squeeze, unsqueeze) is its source's pointer. */
	for (ValId v = 0; G->fold && v < g->vals.n; v++) {
		ValId r = sched_bytes_root(G->fold, v);
		if (r != v && G->fold->src[r] == NONE)
			G->vname[v] = G->vname[r];
	}
}

/* The classes of the passes' storage analysis (StoreClass), each with
 * the backend's io slot, host buffer and free events. */
static void
find_classes(CgGraph *G)
{
	Graph *g = G->g;
	Arena *a = G->c->a;
	uint32_t ns = g->streams.n;
	G->root = G->s->root;
	G->cls = arena_alloc(a, (g->vals.n + 1) * sizeof *G->cls);
	for (ValId v = 0; v < g->vals.n; v++) {
		ValId r = G->root[v];
		if (!G->cls[r]) {
			const StoreClass *sc = G->s->cls[r];
			CgClass *cl = arena_alloc(a, sizeof *cl);
			*cl = (CgClass){.root = r, .kind = sc->kind, .mutated = sc->mutated,
			                .dealloc = sc->dealloc, .slot = -1, .hostbuf = -1,
			                .release = sc->release, .streams = sc->streams,
			                .last_on = sc->last_on};
			cl->free_event = arena_alloc(a, (ns + 1) * sizeof *cl->free_event);
			for (uint32_t t = 0; t < ns; t++)
				cl->free_event[t] = -1;
			G->cls[r] = cl;
		}
		G->cls[v] = G->cls[r];
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (live(n) && n->op < OP__N && (op_table[n->op].flags & OPF_COLLECTIVE))
			G->has_collectives = 1;
	}
}

/* Appends a tensor of the call's interface; returns its io slot. */
static int
add_tensor(CgGraph *G, ValId v, int role, int flags)
{
	CgTensor t = {.name = G->g->vals.v[v].name, .role = role, .v = v,
	              .type = G->g->vals.v[v].type, .flags = flags};
	vec_push(&G->tensors, t);
	return (int)G->tensors.n - 1;
}

/* The slot of optimizer state opt.PARAM.what (added once: seen maps the
 * names added to their slots). */
static int
add_state(CgGraph *G, Map *seen, ValId param, const char *what, const Type *t)
{
	char *name = cg_fmt(G->c, "opt.%s.%s", G->g->vals.v[param].name, what);
	uint32_t *at = map_get(seen, name, strlen(name));
	if (at)
		return (int)*at;
	CgTensor s = {.name = name, .role = CG_ROLE_STATE, .v = param, .type = *t};
	vec_push(&G->tensors, s);
	map_put(seen, name, strlen(name), G->tensors.n - 1);
	return (int)G->tensors.n - 1;
}

/* Optimizer state (model-owned, saved with the params) and the scratch
 * each update needs, as interp_optim.c declares them. */
static void
find_state(CgGraph *G)
{
	Graph *g = G->g;
	Type step = {.dt = DT_F32, .rank = 0};
	Map seen;
	map_init(&seen);
	G->rng_slot = -1;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		G->optslot[i] = G->scratch[i] = -1;
		if (live(n) && ir_draws(n) &&
		    G->rng_slot < 0) {
			/* (named at the first random op's line) */
			CgTensor s = {.name = SGRT_RNG_STATE, .role = CG_ROLE_STATE, .v = n->res[0],
			              .type = {.dt = DT_I64, .rank = 1, .d = {2}}};
			vec_push(&G->tensors, s);
			G->rng_slot = (int)G->tensors.n - 1;
		}
		if (!live(n) || (n->op != OP_SGD_UPDATE_ && n->op != OP_ADAMW_UPDATE_))
			continue;
		ValId p = n->opnd[0].v;
		const Type *t = &g->vals.v[p].type;
		if (n->op == OP_SGD_UPDATE_) {
			if (ir_attr_float(n, "momentum", 0) != 0)
				G->optslot[i] = add_state(G, &seen, p, "momentum_buffer", t);
			continue;
		}
		G->optslot[i] = add_state(G, &seen, p, "exp_avg", t);
		add_state(G, &seen, p, "exp_avg_sq", t);
		add_state(G, &seen, p, "step", &step);
		G->scratch[i] = (int)G->scratch_bytes.n;
		vec_push(&G->scratch_bytes, (int64_t)16);
	}
	map_free(&seen);
}

/* The interface: inputs, outputs (returned values), params, consts. */
static void
find_tensors(CgGraph *G)
{
	Graph *g = G->g;
	uint32_t nr = g->rets.n;
	G->ret_slot = arena_alloc(G->c->a, (nr + 1) * sizeof *G->ret_slot);
	for (uint32_t i = 0; i < g->inputs.n; i++) {
		CgClass *cl = G->cls[g->inputs.v[i]];
		cl->slot = add_tensor(G, g->inputs.v[i], CG_ROLE_INPUT,
		                      cl->mutated ? CG_TF_MUTATED : 0);
	}
	for (uint32_t i = 0; i < nr; i++) {
		ValId v = g->rets.v[i];
		CgClass *cl = G->cls[v];
		int flags = g->vals.v[v].type.host ? CG_TF_HOST : 0;
		G->ret_slot[i] = add_tensor(G, v, CG_ROLE_OUTPUT, flags);
		if (cl->kind == ST_OUTPUT && cl->slot < 0) { /* computed into it */
			cl->slot = G->ret_slot[i];
			vec_push(&G->ret_copies, NONE);
		} else {
			vec_push(&G->ret_copies, v);
		}
	}
	for (uint32_t i = 0; i < g->params.n; i++)
		G->cls[g->params.v[i]]->slot = add_tensor(G, g->params.v[i], CG_ROLE_PARAM, 0);
	for (uint32_t i = 0; i < g->consts.n; i++)
		G->cls[g->consts.v[i]]->slot = add_tensor(G, g->consts.v[i], CG_ROLE_CONST, 0);
	find_state(G);
}

/* The plan's arena buffer of value v (a class root), or NULL. */
static const MemBuf *
arena_buf(CgGraph *G, ValId v)
{
	if (!G->plan || G->plan->bufof[v] == NONE)
		return NULL;
	const MemBuf *b = &G->plan->buf[G->plan->bufof[v]];
	return b->where == MEM_DEVICE ? b : NULL;
}

/* Pinned host buffers, arena placement, and events for cross-stream
 * frees of what is not in the arena. */
static void
find_buffers(CgGraph *G)
{
	Graph *g = G->g;
	for (ValId v = 0; v < g->vals.n; v++) {
		CgClass *cl = G->cls[v];
		if (G->root[v] != v)
			continue;
		if (cl->kind == ST_HOST) {
			cl->hostbuf = G->nhost++;
			vec_push(&G->hostvals, v);
		}
		if (cl->kind == ST_TEMP && arena_buf(G, v))
			cl->planned = 1;
		if (cl->kind != ST_TEMP || cl->planned || cl->dealloc || cl->release == NONE)
			continue;
		uint32_t rs = g->nodes.v[cl->release].stream;
		for (uint32_t s = 0; s < g->streams.n; s++)
			if (s != rs && cl->last_on[s] != NONE)
				cl->free_event[s] = G->nfree_events++;
	}
}

/* Local events and extern events each numbered from 0. */
static void
number_events(CgGraph *G)
{
	Graph *g = G->g;
	int nl = 0, ne = 0;
	G->event_index = arena_alloc(G->c->a, (g->events.n + 1) * sizeof *G->event_index);
	for (uint32_t e = 0; e < g->events.n; e++)
		G->event_index[e] = g->events.v[e].is_extern ? ne++ : nl++;
	G->nlocal_events = nl;
}

/* The size of dim WORLD (1 unless -D WORLD=N). */
static int
world_size(Module *m)
{
	return (int)ir_world(m);
}

int
cg_epilogue(CgGraph *G, NodeId i)
{
	return G->epilogue[i];
}

int
cg_graph_analyse(CgGraph *G, Cg *c, Graph *g)
{
	memset(G, 0, sizeof *G);
	G->c = c;
	G->g = g;
	G->name = cg_ident(c, "", g->name);
	G->world = world_size(c->m);
	G->lastline = g->retloc.line ? (int)g->retloc.line : (int)g->loc.line;
	map_init(&G->kernames);
	/* What the passes decided (fusion, kernel_choice, memplan). */
	const Sched *s = G->s = g->sched;
	if (!s || !s->planned)
		ICE("graph '%s' reached the backend without its schedule", g->name);
	G->group = s->group;
	G->ingroup_only = s->reg;
	G->prologue = s->prologue;
	G->epilogue = s->epilogue;
	G->groups = &s->groups;
	G->fold = s->fold;
	G->plan = &s->plan;
	G->kept = arena_alloc(c->a, (g->nodes.n + 1) * sizeof *G->kept);
	G->optslot = arena_alloc(c->a, (g->nodes.n + 1) * sizeof *G->optslot);
	G->scratch = arena_alloc(c->a, (g->nodes.n + 1) * sizeof *G->scratch);
	G->pw_reg = arena_alloc(c->a, (g->vals.n + 1) * sizeof *G->pw_reg);
	name_values(G);
	find_classes(G);
	find_tensors(G);
	number_events(G);
	return 1;
}

void
cg_graph_free(CgGraph *G)
{
	vec_free(&G->tensors);
	vec_free(&G->ret_copies);
	vec_free(&G->hostvals);
	vec_free(&G->scratch_bytes);
	map_free(&G->kernames);
}

/* ------------------------------------------------------------------ statements */

/* Which values the host code names: operands of nodes that emit code,
 * results that own memory, values copied at the end. */
static void
find_named(CgGraph *G)
{
	Graph *g = G->g;
	G->named = arena_alloc(G->c->a, g->vals.n + 1);
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (!live(n) || n->op == OP_DEL || n->op == OP_OFFLOAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL && n->op != OP_CONTROL_DEPS &&
			    !G->ingroup_only[n->opnd[k].v])
				G->named[n->opnd[k].v] = 1;
		for (uint32_t j = 0; j < n->nres; j++)
			if (G->root[n->res[j]] == n->res[j] && !G->ingroup_only[n->res[j]])
				G->named[n->res[j]] = 1;
	}
	for (uint32_t k = 0; k < g->rets.n; k++)
		if (G->ret_copies.v[k] != NONE)
			G->named[G->ret_copies.v[k]] = 1;
	/* An alias names its class's root. */
	for (ValId v = 0; v < g->vals.n; v++)
		if (G->named[v])
			G->named[G->root[v]] = 1;
}

/* Declarations of the pointers the call uses, bound to its tensors.  A
 * value of no elements gets no memory, and the work that reads it may all
 * be skipped (a product of zero rows, a transpose it folds); a value only
 * set (an alias through a sync whose readers are all skipped: G->named
 * 2): their pointers are declared [[maybe_unused]], so nvcc does not warn
 * (#177, #550). */
static void
declare_values(CgGraph *G)
{
	Graph *g = G->g;
	for (ValId v = 0; v < g->vals.n; v++) {
		CgClass *cl = G->cls[v];
		const char *type = cg_ctype((DType)g->vals.v[v].type.dt), *init = "NULL";
		if (g->vals.v[v].type.dt >= DT__N || !G->named[v])
			continue;
		if (G->root[v] == v && cl->slot >= 0)
			init = cg_fmt(G->c, "(%s *)io[%d]", type, cl->slot);
		if (type_numel(&g->vals.v[v].type) == 0 || G->named[v] == 2)
			CG_EMIT(G->body, "host.cu:decl_empty", {"type", type},
			        {"var", G->vname[v]}, {"init", init});
		else
			CG_EMIT(G->body, "host.cu:decl", {"type", type}, {"var", G->vname[v]},
			        {"init", init});
	}
}

/* Memory for the results of node i that start a class. */
static void
bind_results(CgGraph *G, NodeId i)
{
	Graph *g = G->g;
	Node *n = &g->nodes.v[i];
	Cg *c = G->c;
	for (uint32_t j = 0; j < n->nres; j++) {
		ValId v = n->res[j];
		CgClass *cl = G->cls[v];
		const Type *t = &g->vals.v[v].type;
		if (G->ingroup_only[v] || !G->named[v] || type_numel(t) == 0)
			continue; /* nothing to hold */
		if (G->root[v] != v) {
			CG_EMIT(G->body, "host.cu:alias", {"var", G->vname[v]},
			        {"from", G->vname[G->root[v]]});
		} else if (cl->planned) {
			CG_EMIT(G->body, "host.cu:arena", {"var", G->vname[v]},
			        {"type", cg_ctype((DType)t->dt)},
			        {"off", cg_num(c, (int64_t)arena_buf(G, v)->offset)},
			        {"bytes", cg_num(c, type_numel(t) * dtype_size((DType)t->dt))});
		} else if (cl->kind == ST_TEMP) {
			CG_EMIT(G->body, "host.cu:alloc", {"var", G->vname[v]},
			        {"bytes", cg_num(c, type_numel(t) * dtype_size((DType)t->dt))},
			        {"s", cg_num(c, cg_stream(n))}, {"line", cg_num(c, n->loc.line)});
		} else if (cl->kind == ST_HOST) {
			CG_EMIT(G->body, "host.cu:hostbuf", {"var", G->vname[v]},
			        {"type", cg_ctype((DType)t->dt)}, {"k", cg_num(c, cl->hostbuf)});
		}
	}
}

/* Per node, the alias classes (their roots, in value order) that
 * release_after may act on after it: temporaries outside the arena whose
 * release or last use on some stream is that node.  CSR arrays, built
 * once, so that no node scans every value. */
static void
find_releases(CgGraph *G)
{
	Graph *g = G->g;
	size_t nn = (size_t)g->nodes.n + 1;
	uint32_t *at = arena_alloc(G->c->a, (nn + 1) * sizeof *at);
	ValId *mark = xmalloc(nn * sizeof *mark);
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < nn; i++)
			mark[i] = NONE;
		for (ValId v = 0; v < g->vals.n; v++) {
			CgClass *cl = G->cls[v];
			if (G->root[v] != v || cl->kind != ST_TEMP || cl->planned ||
			    G->ingroup_only[v])
				continue;
			for (uint32_t s = 0; s <= g->streams.n; s++) {
				NodeId i = s < g->streams.n ? cl->last_on[s] : cl->release;
				if (i == NONE || mark[i] == v)
					continue; /* one entry per node and class */
				mark[i] = v;
				if (pass == 0)
					at[i + 1]++;
				else
					G->rel[at[i]++] = v;
			}
		}
		/* pass 0: counts to starts; pass 1: the fill moved each start
		 * to the next node's, so shift back. */
		if (pass == 0) {
			for (size_t i = 0; i < nn; i++)
				at[i + 1] += at[i];
			G->rel = arena_alloc(G->c->a, ((size_t)at[nn] + 1) * sizeof *G->rel);
		} else {
			memmove(at + 1, at, nn * sizeof *at);
			at[0] = 0;
		}
	}
	free(mark);
	G->rel_at = at;
}

/* After node i: events for later cross-stream frees, and the frees of the
 * classes it releases. */
static void
release_after(CgGraph *G, NodeId i)
{
	Graph *g = G->g;
	Cg *c = G->c;
	Node *n = &g->nodes.v[i];
	for (uint32_t r = G->rel_at[i]; r < G->rel_at[i + 1]; r++) {
		ValId v = G->rel[r];
		CgClass *cl = G->cls[v];
		for (uint32_t s = 0; s < g->streams.n; s++)
			if (cl->last_on[s] == i && cl->free_event[s] >= 0)
				CG_EMIT(G->body, "host.cu:free_record",
				        {"k", cg_num(c, cl->free_event[s])}, {"s", cg_num(c, s)},
				        {"line", cg_num(c, n->loc.line)});
		if (cl->release != i || cl->dealloc)
			continue;
		for (uint32_t s = 0; s < g->streams.n; s++)
			if (cl->free_event[s] >= 0)
				CG_EMIT(G->body, "host.cu:free_wait",
				        {"k", cg_num(c, cl->free_event[s])},
				        {"s", cg_num(c, cg_stream(n))}, {"line", cg_num(c, n->loc.line)});
		CG_EMIT(G->body, "host.cu:free", {"var", G->vname[v]},
		        {"s", cg_num(c, cg_stream(n))}, {"line", cg_num(c, n->loc.line)});
	}
}

/* An event operand or attribute: local or extern, and its index. */
static void
event_ref(CgGraph *G, int64_t e, int *ext, int *idx)
{
	*ext = G->g->events.v[e].is_extern;
	*idx = G->event_index[e];
}

/* record_event / wait_event of event e on stream s. */
static void
event_op(CgGraph *G, int op, int64_t e, int s, int line)
{
	Cg *c = G->c;
	int ext, idx;
	event_ref(G, e, &ext, &idx);
	const char *sec = op == OP_RECORD_EVENT ? (ext ? "host.cu:record_ext" : "host.cu:record")
	                                        : (ext ? "host.cu:wait_ext" : "host.cu:wait");
	CG_EMIT(G->body, sec, {"e", cg_num(c, idx)}, {"s", cg_num(c, s)}, {"line", cg_num(c, line)});
}

/* synchronize(): the host waits for every stream; inside a CUDA graph a
 * device-side barrier does the same ordering. */
static void
synchronize(CgGraph *G, int line)
{
	CG_EMIT(G->body, G->c->co->cuda_graph ? "host.cu:barrier" : "host.cu:synchronize",
	        {"line", cg_num(G->c, line)});
}

/* The sync a control_deps node performs (its sync= and extra attributes). */
static void
control_sync(CgGraph *G, const Node *n)
{
	const Attr *sa = ir_attr(n, "sync");
	int op = sa && sa->s ? op_lookup(sa->s, strlen(sa->s)) : -1;
	int line = (int)n->loc.line;
	int64_t target = -1;
	for (uint32_t k = 0; k < n->nextra; k++)
		if (strcmp(n->extra[k].key, "stream") != 0)
			target = n->extra[k].a.i;
	switch (op) {
	case OP_RECORD_EVENT:
	case OP_WAIT_EVENT:
		event_op(G, op, target, cg_stream(n), line);
		break;
	case OP_WAIT_STREAM:
		CG_EMIT(G->body, "host.cu:wait_stream", {"s", cg_num(G->c, cg_stream(n))},
		        {"other", cg_num(G->c, target)}, {"line", cg_num(G->c, line)});
		break;
	case OP_SYNCHRONIZE:
		synchronize(G, line);
		break;
	}
}

/* sync_dealloc(%v, event=E, stream=S): S waits for E, then frees. */
static void
sync_dealloc(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Attr *e = ir_attr(n, "event");
	int s = cg_stream(n), line = (int)n->loc.line;
	if (e)
		event_op(G, OP_WAIT_EVENT, e->i, s, line);
	ValId v = n->opnd[0].v;
	if (G->cls[v]->kind == ST_TEMP && !G->cls[v]->planned && !G->ingroup_only[G->root[v]])
		CG_EMIT(G->body, "host.cu:free", {"var", G->vname[G->root[v]]},
		        {"s", cg_num(c, s)}, {"line", cg_num(c, line)});
}

/* A node that kernel_choice folded into node by's kernel: a comment
 * saying so (how: the way it is computed there), and nothing else.
 * Returns 1, as node_stmt. */
static int
computed_by(CgGraph *G, NodeId by, const char *how)
{
	const Node *b = &G->g->nodes.v[by];
	fprintf(G->body, "\t/* (computed by the %s of line %u, %s) */\n", op_name(b->op),
	        b->loc.line, how);
	return 1;
}

/* The statements of node i (its comment first); a wait_stream that
 * orders nothing new (already_ordered) leaves only its comment. */
static int
node_stmt(CgGraph *G, NodeId i, int already_ordered)
{
	Graph *g = G->g;
	Cg *c = G->c;
	Node *n = &g->nodes.v[i];
	int line = (int)n->loc.line;
	CG_EMIT(G->body, "host.cu:comment", {"where", cg_where(c, n)},
	        {"text", cg_stmt_text(c, g, n)}, {"mark", cg_line_mark(c, n->loc.line)});
	NodeId bn = G->fold ? G->fold->bn_act[i] : NONE; /* a batch_norm's epilogue */
	if (bn != NONE && n->op != OP_BATCH_NORM)
		return computed_by(G, bn, "as its kernel's epilogue");
	if (bn != NONE) /* it writes its relu's result */
		bind_results(G, bn);
	NodeId pr = G->fold ? G->fold->pool_relu[i] : NONE; /* a max pool's relu backward */
	if (pr != NONE && n->op != OP_MAX_POOL2D_BACKWARD)
		return computed_by(G, pr, "as its mask");
	if (pr != NONE) /* it writes the where's result */
		bind_results(G, pr);
	for (int j = 0; G->fold && j < 2; j++) { /* an SGD update of a batch norm's */
		NodeId u = (j ? G->fold->bn_sgdb : G->fold->bn_sgdw)[i];
		if (u != NONE && n->op == OP_SGD_UPDATE_)
			return computed_by(G, u, "as it finishes the gradient");
	}
	for (int j = 0; G->fold && j < 2; j++) { /* a running statistic's update */
		NodeId r = (j ? G->fold->bn_rv : G->fold->bn_rm)[i];
		if (r != NONE && n->op != OP_BATCH_NORM)
			return computed_by(G, r, "as it finishes the statistics");
		if (r != NONE) /* it stores the update */
			bind_results(G, r);
	}
	NodeId na = G->fold ? G->fold->norm_add[i] : NONE; /* a norm's residual add */
	if (na != NONE && n->op == OP_ADD)
		return computed_by(G, na, "as its kernel loads its rows");
	if (na != NONE) /* it writes the sum too */
		bind_results(G, na);
	if (!cg_fold_written(G, i) && !cg_fold_by_product(G, i)) /* else bound at its
	                                                             attention node, product */
		bind_results(G, i);
	if (cg_fold_dgelu(G, i) != NONE) /* writes its gelu_backward's result */
		bind_results(G, cg_fold_dgelu(G, i));
	for (uint32_t j = 0; j < n->nres && !cg_fold_written(G, i); j++)
		if (cg_fold_out(G, n->res[j]) != NONE && /* written through views */
		    (j == 0 || cg_fold_out(G, n->res[j]) != cg_fold_out(G, n->res[j - 1])))
			bind_results(G, cg_fold_out(G, n->res[j])); /* (a cat once) */
	int ep = cg_epilogue(G, i); /* a consumer fused in: its kernel writes them */
	for (uint32_t k = 0; ep >= 0 && k < G->groups->v[ep].n; k++)
		bind_results(G, G->groups->v[ep].nodes[k]);
	if (n->op == OP_COPY_ && n->nopnd == 2 && n->opnd[1].kind == OK_VAL &&
	    G->root[n->opnd[0].v] == G->root[n->opnd[1].v]) { /* fusion's store_into_copy */
		fprintf(G->body, "\t/* (no copy: the kernel computing %%%s stored it in %%%s) */\n",
		        g->vals.v[n->opnd[1].v].name, g->vals.v[n->opnd[0].v].name);
		return 1;
	}
	int folded = cg_gemm_stmt(G, i); /* views and epilogues of products */
	if (folded >= 0)
		return folded;
	if (already_ordered) {
		fprintf(G->body, "\t/* (already ordered: nothing was issued on the "
		        "waited stream since this stream last waited for it) */\n");
		return 1;
	}
	switch (n->op) {
	case OP_DEL: case OP_OFFLOAD: case OP_BACKWARD: case OP_BACKWARD_END:
		return 1;
	case OP_CONTROL_DEPS:
		control_sync(G, n);
		return 1;
	case OP_RECORD_EVENT: case OP_WAIT_EVENT:
		event_op(G, n->op, n->opnd[0].v, cg_stream(n), line);
		return 1;
	case OP_WAIT_STREAM:
		CG_EMIT(G->body, "host.cu:wait_stream", {"s", cg_num(c, cg_stream(n))},
		        {"other", cg_num(c, n->opnd[0].v)}, {"line", cg_num(c, line)});
		return 1;
	case OP_SYNCHRONIZE:
		synchronize(G, line);
		return 1;
	case OP_SYNC_DEALLOC:
		sync_dealloc(G, n);
		return 1;
	}
	return cg_op(G, i);
}

/* The copies of returned values that live elsewhere (inputs, params, a
 * value returned twice), into their output buffers, after the join. */
static void
return_copies(CgGraph *G)
{
	Graph *g = G->g;
	Cg *c = G->c;
	for (uint32_t k = 0; k < g->rets.n; k++) {
		ValId v = G->ret_copies.v[k];
		if (v == NONE)
			continue;
		const Type *t = &g->vals.v[v].type;
		int64_t bytes = type_numel(t) * dtype_size((DType)t->dt);
		if (!bytes)
			continue;
		CG_EMIT(G->body, "host.cu:copy", {"s", "0"},
		        {"dst", cg_fmt(c, "io[%d]", G->ret_slot[k])},
		        {"src", G->vname[v]}, {"bytes", cg_num(c, bytes)},
		        {"name", cg_fmt(c, "return_%s", g->vals.v[v].name)},
		        {"line", cg_num(c, G->lastline)});
	}
}

static int
ident_char(char ch)
{
	return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9');
}

/* The pointer declarations, then the statements (text); a value no
 * statement names (an op with no elements to compute names nothing; a
 * comment's mention, "not copied: the products read v_x ...", is no use)
 * is not declared, and one only set is declared [[maybe_unused]], so that
 * the generated code compiles without warnings.  The identifiers of text
 * are collected once into a map. */
static char *
with_declarations(CgGraph *G, const char *text, size_t len, size_t *outlen)
{
	char *out = NULL;
	size_t olen = 0;
	Map idents;
	map_init(&idents);
	for (size_t p = 0; p < len;) {
		if (p + 1 < len && text[p] == '/' && text[p + 1] == '*') { /* a comment names */
			const char *e = strstr(text + p + 2, "*/");          /* nothing it uses */
			p = e ? (size_t)(e - text) + 2 : len;
			continue;
		}
		if (!ident_char(text[p])) {
			p++;
			continue;
		}
		size_t q = p;
		while (q < len && ident_char(text[q]))
			q++;
		if (q - p > 2 && text[p] == 'v' && text[p + 1] == '_') { /* value names */
			/* "\tv_x = ...": set there (1), else read (2) */
			int set = p >= 1 && text[p - 1] == '\t' && (p == 1 || text[p - 2] == '\n') &&
			          q + 3 <= len && memcmp(text + q, " = ", 3) == 0;
			uint32_t *seen = map_get(&idents, text + p, q - p);
			if (!seen || (!set && *seen == 1))
				map_put(&idents, text + p, q - p, set ? 1 : 2);
		}
		p = q;
	}
	for (ValId v = 0; v < G->g->vals.n; v++) {
		uint32_t *seen = G->named[v] ? map_get(&idents, G->vname[v], strlen(G->vname[v]))
		                             : NULL;
		G->named[v] = !seen ? 0 : *seen == 1 ? 2 : 1; /* 2: set, never read */
	}
	map_free(&idents);
	FILE *body = G->body = open_memstream(&out, &olen);
	if (!body)
		ICE("open_memstream failed");
	declare_values(G);
	fwrite(text, 1, len, body);
	fclose(body);
	G->body = NULL;
	*outlen = olen;
	return out;
}

/* The stream orderings known to hold at a point of the call: ord[w * n +
 * s] is 1 when stream w has waited for everything issued on stream s so
 * far, so that another wait_stream(s) on w would order nothing new.  Only
 * back-to-back syncs keep an entry: any other statement clears them all. */
typedef struct {
	uint8_t *ord;
	uint32_t n;
} Joins;

/* The orderings right after the fork: every stream has waited for
 * `default`, on which nothing is issued yet. */
static void
joins_init(Joins *j, uint32_t nstreams)
{
	j->n = nstreams;
	j->ord = xmalloc((size_t)nstreams * nstreams + 1);
	memset(j->ord, 0, (size_t)nstreams * nstreams + 1);
	for (uint32_t w = 1; w < nstreams; w++)
		j->ord[w * nstreams] = 1;
}

/* 1 when node n is a wait_stream (the op, or a control_deps performing
 * one) between two streams of j, with *w the waiting stream and *s the
 * waited one. */
static int
wait_pair(const Joins *j, const Node *n, int64_t *w, int64_t *s)
{
	*w = cg_stream(n);
	*s = -1;
	if (n->op == OP_WAIT_STREAM) {
		*s = n->opnd[0].v;
	} else if (n->op == OP_CONTROL_DEPS) {
		const Attr *sa = ir_attr(n, "sync");
		if (!sa || !sa->s || strcmp(sa->s, "wait_stream") != 0)
			return 0;
		for (uint32_t k = 0; k < n->nextra; k++)
			if (strcmp(n->extra[k].key, "stream") != 0)
				*s = n->extra[k].a.i;
	}
	return *w >= 0 && *s >= 0 && (uint64_t)*w < j->n && (uint64_t)*s < j->n;
}

/* 1 when node n is a wait_stream that would order nothing new. */
static int
joins_redundant(const Joins *j, const Node *n)
{
	int64_t w, s;
	return wait_pair(j, n, &w, &s) && j->ord[w * j->n + s];
}

/* The orderings after node n: a wait_stream(s) on w adds w-after-s and
 * takes away x-after-w (w now also follows s's work); any other node
 * (released: the frees after it emitted something) clears every entry. */
static void
joins_after(Joins *j, const Node *n, int released)
{
	int64_t w, s;
	if (released || !wait_pair(j, n, &w, &s)) {
		memset(j->ord, 0, (size_t)j->n * j->n);
		return;
	}
	if (w == s)
		return;
	for (uint32_t x = 0; x < j->n; x++)
		j->ord[x * j->n + w] = 0;
	j->ord[w * j->n + s] = 1;
}

/* The end of the call: every stream joins `default`, unless `default`
 * has waited for each of them with nothing issued since. */
static void
join_streams(CgGraph *G, const Joins *j)
{
	uint32_t s = 1;
	while (s < j->n && j->ord[s])
		s++;
	if (s < j->n)
		CG_EMIT(G->body, "host.cu:join", {"line", cg_num(G->c, G->lastline)});
	else
		fprintf(G->body, "\t/* Every stream has joined `default` already. */\n");
}

/* release_after, then the orderings after node i. */
static void
release_and_follow(CgGraph *G, NodeId i, Joins *j)
{
	long before = ftell(G->body);
	release_after(G, i);
	joins_after(j, &G->g->nodes.v[i], ftell(G->body) != before);
}

int
cg_graph_body(CgGraph *G)
{
	Graph *g = G->g;
	char *text = NULL;
	size_t len = 0;
	const FuseGroups *groups = G->groups;
	G->body = open_memstream(&text, &len);
	if (!G->body)
		ICE("open_memstream failed");
	find_buffers(G);
	find_releases(G);
	find_named(G);
	if (G->rng_slot >= 0)
		CG_EMIT(G->body, "host.cu:rng_advance", {"slot", cg_num(G->c, G->rng_slot)},
		        {"line", cg_num(G->c, g->loc.line)});
	if (g->streams.n > 1)
		CG_EMIT(G->body, "host.cu:fork", {"line", cg_num(G->c, g->loc.line)});
	Joins joins;
	joins_init(&joins, g->streams.n);
	int ok = 1;
	for (NodeId i = 0; i < g->nodes.n && ok; i++) {
		Node *n = &g->nodes.v[i];
		if (!live(n))
			continue;
		int gi = G->group[i];
		if (gi >= 0 && groups->v[gi].nodes[0] == i) {
			for (uint32_t k = 0; k < groups->v[gi].n; k++) {
				Node *m = &g->nodes.v[groups->v[gi].nodes[k]];
				CG_EMIT(G->body, "host.cu:comment", {"where", cg_where(G->c, m)},
				        {"text", cg_stmt_text(G->c, g, m)},
				        {"mark", cg_line_mark(G->c, m->loc.line)});
				if (groups->v[gi].after == NONE)
					bind_results(G, groups->v[gi].nodes[k]);
			}
			NodeId in = groups->v[gi].into != NONE ? groups->v[gi].into : groups->v[gi].after;
			if (in == NONE)
				cg_pointwise(G, &groups->v[gi]);
			else
				fprintf(G->body, "\t/* (computed inside the kernel of line %u) */\n",
				        g->nodes.v[in].loc.line);
		} else if (gi < 0) {
			ok = node_stmt(G, i, joins_redundant(&joins, n));
		}
		release_and_follow(G, i, &joins);
	}
	if (ok) {
		if (g->streams.n > 1)
			join_streams(G, &joins);
		return_copies(G);
	}
	free(joins.ord);
	fclose(G->body);
	G->body = NULL;
	G->bodytext = with_declarations(G, text, len, &G->bodylen);
	free(text);
	return ok && !G->c->failed;
}
