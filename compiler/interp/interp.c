/*
 * interp.c - the CPU reference interpreter (`sgc run`): value lifetimes,
 * execution in program order or in a random stream interleaving, and the
 * run of --steps calls between loading and saving the files (interp_io.c).
 *
 * Every value gets a tensor.  control_deps results share their operand's
 * tensor (an alias class).  A class is freed after the first sync_dealloc
 * naming any of its values, else the first `del` naming one (the whole
 * class: the memory is released, whatever name the later uses go by, as
 * the race verifier sees it); a class with neither is freed when each of
 * its values has been named for the last time.  A class holding an input,
 * param, const or returned value is never freed.
 *
 * --interleave=SEED allocates every result before the call, filled with
 * poison (NaN, integer minimum), and runs the nodes in a random order,
 * drawn from SEED, that keeps each stream's program order and the syncs:
 * a wait_event after the record_event before it in program order, a
 * wait_stream after the last node issued on its stream before it, a
 * synchronize after everything before it and before everything after it,
 * a sync_dealloc after its event's record, control_deps as its sync op.
 * Data dependencies are not followed: a consumer the syncs let run before
 * its producer reads poison, and a released buffer is poisoned rather
 * than freed, so a racy program gives NaN for some seeds.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "sgrt_out.h"

/* What the analysis of a graph gives, and the state of a run. */
typedef struct {
	Interp I;
	const RunOptions *ro;
	ValId *root;        /* per value: the first value of its alias class */
	int32_t *nclass;    /* per root: values in its class */
	uint8_t *keep;      /* per root: class is never freed */
	NodeId *release;    /* per value: node after which it is dropped */
	NodeId *freeat;     /* per root: its sync_dealloc or del, or NONE */
	uint8_t *late;      /* per root: named after freeat (a racy program) */
	VEC(ValId) *drops;  /* per node: values dropped after it runs */
	Tensor **persist;   /* per value: input/param/const tensors */
	uint8_t *mutated;   /* per value: an input some op writes into */
	/* --interleave */
	VEC(NodeId) *deps;  /* per node: nodes that must have run first */
	VEC(NodeId) *queue; /* per stream: its nodes in program order */
	uint8_t *done;
	uint64_t rng;
} Run;

/* splitmix64: the scheduler's random numbers. */
static uint64_t
next_random(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static int
live(const Node *n)
{
	return !(n->flags & NF_DEAD);
}

/* ------------------------------------------------------------------ analysis */

/* Alias classes: result j of control_deps joins the class of its j-th value
 * operand. */
static void
find_aliases(Run *R)
{
	Graph *g = R->I.g;
	ir_alias_roots(g, R->root);
	for (ValId v = 0; v < g->vals.n; v++) {
		R->nclass[R->root[v]]++;
		if (g->vals.v[v].kind != VK_NODE)
			R->keep[R->root[v]] = 1;
	}
	for (uint32_t i = 0; i < g->rets.n; i++)
		R->keep[R->root[g->rets.v[i]]] = 1;
}

/* Where each class is released: at its first sync_dealloc, else its first
 * `del` (freeat, one drop of the root), else each value is dropped after
 * the last node naming it, or its definition.  A class named again after
 * its release (only a racy program, --allow-races) is `late`: poisoned
 * rather than freed, so that the use reads poison.  Inputs written by
 * in-place ops (directly or through an alias) are marked mutated. */
static void
find_releases(Run *R)
{
	Graph *g = R->I.g;
	uint8_t *how = calloc(g->vals.n + 1, 1); /* per root: 2 sync_dealloc, 1 del */
	NodeId *last = xmalloc((g->vals.n + 1) * sizeof *last);
	if (!how)
		out_of_memory(0);
	for (ValId v = 0; v < g->vals.n; v++) {
		R->release[v] = g->vals.v[v].kind == VK_NODE ? g->vals.v[v].def : NONE;
		R->freeat[v] = last[v] = NONE;
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (!live(n))
			continue;
		int rank = n->op == OP_SYNC_DEALLOC ? 2 : n->op == OP_DEL ? 1 : 0;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (n->opnd[k].kind != OK_VAL)
				continue;
			ValId v = n->opnd[k].v, r = R->root[v];
			if (!rank) {
				R->release[v] = last[r] = i;
			} else if (how[r] < rank) {
				R->freeat[r] = i;
				how[r] = (uint8_t)rank;
			}
		}
		int writes = n->op < OP__N &&
		             ((op_table[n->op].flags & OPF_INPLACE) ||
		              ((op_table[n->op].flags & OPF_COLLECTIVE) && n->nres == 0));
		if (writes && n->nopnd && n->opnd[0].kind == OK_VAL)
			R->mutated[R->root[n->opnd[0].v]] = 1;
	}
	for (ValId v = 0; v < g->vals.n; v++) {
		ValId r = R->root[v];
		NodeId at = R->freeat[r] == NONE ? R->release[v] : v == r ? R->freeat[r] : NONE;
		if (at != NONE && at < g->nodes.n)
			vec_push(&R->drops[at], v);
		R->late[v] = R->freeat[v] != NONE && last[v] != NONE && last[v] > R->freeat[v];
	}
	for (ValId v = 0; v < g->vals.n; v++)
		R->mutated[v] = g->vals.v[v].kind == VK_INPUT && R->mutated[R->root[v]];
	free(how);
	free(last);
}

/* Under --interleave node `to` waits for `from`, each of its ordering
 * edges but its stream's (the stream's queue keeps that order). */
static void
add_dep(void *ctx, NodeId from, NodeId to, IrAfter kind, uint32_t via)
{
	Run *R = ctx;
	(void)via;
	if (kind != IR_AFTER_STREAM)
		vec_push(&R->deps[to], from);
}

/* The nodes each node waits for under --interleave (see the top), and
 * each stream's queue. */
static void
find_deps(Run *R)
{
	Graph *g = R->I.g;
	for (NodeId i = 0; i < g->nodes.n; i++)
		if (live(&g->nodes.v[i]))
			vec_push(&R->queue[g->nodes.v[i].stream], i);
	ir_order_edges(g, add_dep, R);
}

static void
analyse(Run *R)
{
	Graph *g = R->I.g;
	uint32_t nv = g->vals.n, nn = g->nodes.n, ns = g->streams.n;
	R->root = xmalloc((nv + 1) * sizeof *R->root);
	R->nclass = calloc(nv + 1, sizeof *R->nclass);
	R->keep = calloc(nv + 1, 1);
	R->release = xmalloc((nv + 1) * sizeof *R->release);
	R->freeat = xmalloc((nv + 1) * sizeof *R->freeat);
	R->late = calloc(nv + 1, 1);
	R->mutated = calloc(nv + 1, 1);
	R->persist = calloc(nv + 1, sizeof *R->persist);
	R->I.val = calloc(nv + 1, sizeof *R->I.val);
	R->drops = calloc(nn + 1, sizeof *R->drops);
	R->deps = calloc(nn + 1, sizeof *R->deps);
	R->done = calloc(nn + 1, 1);
	R->queue = calloc(ns + 1, sizeof *R->queue);
	if (!R->nclass || !R->keep || !R->late || !R->mutated || !R->persist || !R->I.val ||
	    !R->drops || !R->deps || !R->done || !R->queue)
		out_of_memory(0);
	find_aliases(R);
	find_releases(R);
	find_deps(R);
}

static void
run_free(Run *R)
{
	Graph *g = R->I.g;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		vec_free(&R->drops[i]);
		vec_free(&R->deps[i]);
	}
	for (uint32_t s = 0; s < g->streams.n; s++)
		vec_free(&R->queue[s]);
	for (ValId v = 0; v < g->vals.n; v++)
		interp_tensor_free(R->persist[v]);
	free(R->root);
	free(R->nclass);
	free(R->keep);
	free(R->release);
	free(R->freeat);
	free(R->late);
	free(R->mutated);
	free(R->persist);
	free(R->I.val);
	free(R->drops);
	free(R->deps);
	free(R->done);
	free(R->queue);
}

/* ------------------------------------------------------------------ execution */

/* Gives the results of n their tensors: control_deps shares its operands',
 * anything else gets a new one of the result's type (poisoned under
 * --interleave). */
static void
bind_results(Run *R, const Node *n)
{
	Graph *g = R->I.g;
	if (n->op == OP_CONTROL_DEPS) {
		uint32_t j = 0;
		for (uint32_t k = 0; k < n->nopnd && j < n->nres; k++)
			if (n->opnd[k].kind == OK_VAL)
				R->I.val[n->res[j++]] = R->I.val[n->opnd[k].v];
		return;
	}
	for (uint32_t j = 0; j < n->nres; j++) {
		ValId v = n->res[j];
		const Type *ty = &g->vals.v[v].type;
		Tensor *t = interp_tensor_new(&R->I, (DType)ty->dt, ty->rank, ty->d);
		t->refs = R->nclass[R->root[v]];
		t->keep = R->keep[R->root[v]];
		if (R->I.interleave)
			interp_poison(t);
		R->I.val[v] = t;
	}
}

/* Value v is done with: its class's tensor goes when no value holds it,
 * or at once when v is the root of a class released by sync_dealloc or
 * del.  Poisoned instead of freed under --interleave or when the class is
 * named again later. */
static void
drop(Run *R, ValId v)
{
	Tensor *t = R->I.val[v];
	ValId r = R->root[v];
	if (!t || !t->data || t->keep || R->keep[r])
		return;
	if (R->freeat[r] == NONE && --t->refs > 0)
		return;
	if (R->I.interleave || R->late[r]) {
		interp_poison(t);
	} else {
		free(t->data);
		t->data = NULL;
	}
}

/* Drops the values node i was the last to name. */
static void
drop_after(Run *R, NodeId i)
{
	for (uint32_t k = 0; k < R->drops[i].n; k++)
		drop(R, R->drops[i].v[k]);
}

/* A collective at node i, over every rank at once. */
static int
exec_collective(Run *Rs, int world, NodeId i)
{
	Node *n = &Rs[0].I.g->nodes.v[i];
	Tensor **in = xmalloc(2 * (size_t)world * sizeof *in), **out = in + world;
	int rc = 0;
	for (int r = 0; r < world; r++) {
		if (!Rs[r].I.interleave)
			bind_results(&Rs[r], n);
		in[r] = Rs[r].I.val[n->opnd[0].v];
		out[r] = n->nres ? Rs[r].I.val[n->res[0]] : NULL;
		if (!in[r] || !in[r]->data)
			ICE("'%%%s' read by %s at line %u has no tensor",
			    Rs[r].I.g->vals.v[n->opnd[0].v].name, op_name(n->op), n->loc.line);
	}
	rc = interp_collective_world(&Rs[0].I, n, world, in, out);
	free(in);
	for (int r = 0; !rc && r < world; r++)
		drop_after(&Rs[r], i);
	return rc;
}

/* Runs node i: its kernel over its operands' and results' tensors, then
 * drops the values it was the last to name. */
static int
exec_node(Run *R, NodeId i)
{
	Graph *g = R->I.g;
	Node *n = &g->nodes.v[i];
	if (!R->I.interleave)
		bind_results(R, n);
	if (n->op < OP__N) {
		Tensor *in[n->nopnd + 1], *out[n->nres + 1];
		for (uint32_t k = 0; k < n->nopnd; k++) {
			in[k] = NULL;
			if (n->opnd[k].kind != OK_VAL)
				continue;
			in[k] = R->I.val[n->opnd[k].v];
			if (n->op == OP_SYNC_DEALLOC || n->op == OP_DEL)
				continue; /* names the memory, reads nothing */
			if (!in[k] || !in[k]->data)
				ICE("'%%%s' read by %s at line %u has no tensor",
				    g->vals.v[n->opnd[k].v].name, op_name(n->op), n->loc.line);
		}
		for (uint32_t j = 0; j < n->nres; j++)
			out[j] = R->I.val[n->res[j]];
		if (op_table[n->op].interp(&R->I, n, in, out))
			return 1;
	}
	drop_after(R, i);
	return 0;
}

/* Node i on every rank (the ranks run in lockstep). */
static int
exec_all(Run *Rs, int world, NodeId i)
{
	const Node *n = &Rs[0].I.g->nodes.v[i];
	if (n->op < OP__N && (op_table[n->op].flags & OPF_COLLECTIVE) && n->nopnd &&
	    n->opnd[0].kind == OK_VAL)
		return exec_collective(Rs, world, i);
	for (int r = 0; r < world; r++)
		if (exec_node(&Rs[r], i))
			return 1;
	return 0;
}

/* Program order. */
static int
run_sequential(Run *Rs, int world)
{
	Graph *g = Rs[0].I.g;
	for (NodeId i = 0; i < g->nodes.n; i++)
		if (live(&g->nodes.v[i]) && exec_all(Rs, world, i))
			return 1;
	return 0;
}

static int
ready(const Run *R, NodeId i)
{
	for (uint32_t k = 0; k < R->deps[i].n; k++)
		if (!R->done[R->deps[i].v[k]])
			return 0;
	return 1;
}

/* A random order respecting streams and syncs (deps point backwards in
 * program order, so some stream's next node is always ready). */
static int
run_interleaved(Run *Rs, int world)
{
	Run *R = &Rs[0]; /* the schedule; every rank follows it */
	Graph *g = R->I.g;
	uint32_t ns = g->streams.n, *pos = calloc(ns + 1, sizeof *pos);
	uint32_t *cand = xmalloc((ns + 1) * sizeof *cand);
	memset(R->done, 0, g->nodes.n);
	for (int r = 0; r < world; r++)
		for (NodeId i = 0; i < g->nodes.n; i++)
			if (live(&g->nodes.v[i]))
				bind_results(&Rs[r], &g->nodes.v[i]);
	for (;;) {
		uint32_t nc = 0, left = 0;
		for (uint32_t s = 0; s < ns; s++) {
			if (pos[s] >= R->queue[s].n)
				continue;
			left++;
			if (ready(R, R->queue[s].v[pos[s]]))
				cand[nc++] = s;
		}
		if (!left)
			break;
		if (!nc)
			ICE("interleaving found no ready stream");
		uint32_t s = cand[next_random(&R->rng) % nc];
		NodeId i = R->queue[s].v[pos[s]++];
		if (exec_all(Rs, world, i)) {
			free(pos);
			free(cand);
			return 1;
		}
		R->done[i] = 1;
	}
	free(pos);
	free(cand);
	return 0;
}

/* Frees the tensors of the last call. */
static void
free_call(Run *R)
{
	for (uint32_t k = 0; k < R->I.owned.n; k++)
		interp_tensor_free(R->I.owned.v[k]);
	R->I.owned.n = 0;
}

/* One call of the graph on every rank. */
static int
run_call(Run *Rs, int world)
{
	Graph *g = Rs[0].I.g;
	for (int r = 0; r < world; r++) {
		free_call(&Rs[r]);
		interp_rng_advance(&Rs[r].I);
		for (ValId v = 0; v < g->vals.n; v++)
			Rs[r].I.val[v] = Rs[r].persist[v];
	}
	return Rs[0].I.interleave ? run_interleaved(Rs, world) : run_sequential(Rs, world);
}

/* ------------------------------------------------------------------ entry */

/* WORLD: the number of ranks `sgc run` simulates. */
static int
world_of(Module *m)
{
	int64_t w = ir_world(m);
	return w < 1 ? 1 : w > INT_MAX ? INT_MAX : (int)w;
}

/* Rank r's file of path ("{rank}" replaced by r), into buf; rank 0's
 * options unchanged when WORLD is 1. */
static int
rank_path(char **buf, const char *path, int r)
{
	size_t n;
	if (!path) {
		*buf = NULL;
		return 0;
	}
	n = strlen(path) + 24;
	*buf = xmalloc(n);
	return sgrt_path_for_rank(*buf, n, path, r);
}

/* With WORLD ranks, `sgc run` runs every rank in this process, in
 * lockstep: each node on rank 0, 1, ... in turn, a collective over all of
 * them at once (interp_collective_world).  Files as the driver names
 * them: "{rank}" in a path is the rank; a path without it is read by
 * every rank and written (or, without --out, the returned values printed)
 * by rank 0 only. */
int
interp_run(Module *m, Graph *g, const RunOptions *ro)
{
	int world = world_of(m), status = 0;
	Run *Rs = calloc((size_t)world, sizeof *Rs);
	RunOptions *ros = calloc((size_t)world, sizeof *ros);
	if (!Rs || !ros) {
		fprintf(stderr, "sgc run: error: out of memory for %d ranks\n", world);
		free(Rs);
		free(ros);
		return 1;
	}
	for (int r = 0; r < world; r++) {
		Run *R = &Rs[r];
		ros[r] = *ro;
		int bad = rank_path((char **)&ros[r].params, ro->params, r);
		bad |= rank_path((char **)&ros[r].out, ro->out, r);
		for (int k = 0; k < ro->ninputs; k++)
			bad |= rank_path((char **)&ros[r].inputs[k], ro->inputs[k], r);
		if (bad) {
			fprintf(stderr, "sgc run: error: a file name for rank %d is too long\n", r);
			status = 2;
		}
		R->I.m = m;
		R->I.g = g;
		R->I.interleave = ro->interleave;
		R->ro = &ros[r];
		R->rng = ro->interleave_seed;
		analyse(R);
	}
	for (int r = 0; !status && r < world; r++) {
		status = interp_optim_load(&Rs[r].I, &ros[r]);
		if (!status)
			status = interp_load(&Rs[r].I, &ros[r], Rs[r].persist);
	}
	for (int step = 0; !status && step < (ro->steps > 0 ? ro->steps : 1); step++)
		status = run_call(Rs, world);
	for (int r = 0; !status && r < world; r++) {
		if (r > 0 && (ro->out ? !strstr(ro->out, "{rank}") : 1))
			break; /* rank 0 writes (prints) alone */
		Tensor **rets = xmalloc((g->rets.n + 1) * sizeof *rets);
		for (uint32_t i = 0; i < g->rets.n; i++)
			rets[i] = Rs[r].I.val[g->rets.v[i]];
		status = interp_save(&Rs[r].I, &ros[r], Rs[r].persist, rets, Rs[r].mutated);
		free(rets);
	}
	for (int r = 0; r < world; r++) {
		free_call(&Rs[r]);
		vec_free(&Rs[r].I.owned);
		interp_optim_free(&Rs[r].I);
		interp_blas_free(&Rs[r].I);
		run_free(&Rs[r]);
		free((char *)ros[r].params);
		for (int k = 0; k < ro->ninputs; k++)
			free((char *)ros[r].inputs[k]);
		free((char *)ros[r].out);
	}
	free(Rs);
	free(ros);
	return status;
}
