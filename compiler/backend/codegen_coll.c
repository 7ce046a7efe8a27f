/*
 * codegen_coll.c - collectives (all_reduce, all_gather, reduce_scatter,
 * broadcast, all_to_all) through NCCL via libsgrt (runtime/sgrt_nccl.c),
 * on the stream they are issued on.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"

/* ------------------------------------------------------------------ collectives */

/* The sgrt reduction of an op="..." attribute. */
static const char *
red_op(const Node *n)
{
	const Attr *a = ir_attr(n, "op");
	const char *s = a && a->s ? a->s : "sum";
	return strcmp(s, "avg") == 0 ? "SGRT_RED_AVG" : strcmp(s, "max") == 0 ? "SGRT_RED_MAX"
	     : strcmp(s, "min") == 0 ? "SGRT_RED_MIN" : "SGRT_RED_SUM";
}

/* The SGRT_ALGO_* constant of a collective's algo="..." when it asks for
 * symmetric memory ("oneshot", "ce"; sgrt_algo_from_name's values), else
 * NULL: "auto" and "ring" are the plain wrappers. */
static const char *
symm_algo(const Node *n)
{
	const Attr *a = ir_attr(n, "algo");
	if (!a || !a->s)
		return NULL;
	if (strcmp(a->s, "oneshot") == 0)
		return "SGRT_ALGO_ONESHOT";
	return strcmp(a->s, "ce") == 0 ? "SGRT_ALGO_CE" : NULL;
}

/* One collective statement of host.cu; `algo` (an SGRT_ALGO_* name, or
 * NULL for the plain wrapper) picks section sec_algo. */
static void
coll(CgGraph *G, const Node *n, const char *sec, const char *send, const char *recv,
     int64_t count, DType dt, const char *extra_key, const char *extra, const char *algo)
{
	Cg *c = G->c;
	CG_EMIT(G->body, algo ? cg_fmt(c, "%s_algo", sec) : sec, {"s", cg_num(c, cg_stream(n))},
	        {"send", send}, {"recv", recv},
	        {"count", cg_num(c, count)}, {"dtype", cg_sgrt_dtype(dt)},
	        {extra_key, extra}, {"algo", algo ? algo : ""},
	        {"name", cg_fmt(c, "%s_%u", op_name(n->op), n->loc.line)},
	        {"line", cg_num(c, n->loc.line)});
}

/* Rearranges [outer, world, sz, inner] blocks (x) into [world, outer, sz,
 * inner] (dst), or back when `back`. */
static void
blocks(CgGraph *G, const Node *n, const char *what, const char *src, const char *dst,
       DType dt, int64_t outer, int64_t world, int64_t sz, int64_t inner, int back)
{
	Cg *c = G->c;
	int64_t total = outer * world * sz * inner;
	int64_t shape[4], st[4];
	if (!back) { /* dst index over [world, outer, sz, inner], read from x */
		int64_t s2[4] = {world, outer, sz, inner};
		int64_t t2[4] = {sz * inner, world * sz * inner, inner, 1};
		memcpy(shape, s2, sizeof s2);
		memcpy(st, t2, sizeof t2);
	} else { /* dst index over [outer, world, sz, inner], read from blocks */
		int64_t s2[4] = {outer, world, sz, inner};
		int64_t t2[4] = {sz * inner, outer * sz * inner, inner, 1};
		memcpy(shape, s2, sizeof s2);
		memcpy(st, t2, sizeof t2);
	}
	cg_copy_kernel(G, n, what, src, dt, dst, dt, total, cg_index(c, "i", 4, shape, st, 0), "i");
}

/* all_reduce broadcast all_gather reduce_scatter all_to_all over WORLD
 * ranks, on the node's stream (0 results: in place). */
int
cg_collective(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 0);
	DType dt = (DType)x->dt;
	const char *xv = G->vname[n->opnd[0].v];
	const char *rv = n->nres ? G->vname[n->res[0]] : xv;
	int64_t count = type_numel(x), w = G->world;
	int d = x->rank ? shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank) : 0;
	int64_t outer, dsz, inner;
	type_around(x, d, &outer, &dsz, &inner);
	if (count == 0)
		return 1;
	switch (n->op) {
	case OP_ALL_REDUCE:
		coll(G, n, "host.cu:all_reduce", xv, rv, count, dt, "op", red_op(n), symm_algo(n));
		return 1;
	case OP_BROADCAST:
		coll(G, n, "host.cu:broadcast", xv, rv, count, dt, "root",
		     cg_num(c, ir_attr_int(n, "root", 0)), NULL);
		return 1;
	case OP_ALL_GATHER:
		if (outer == 1) {
			coll(G, n, "host.cu:all_gather", xv, rv, count, dt, "x", "", symm_algo(n));
		} else {
			char *tmp = cg_alloc_tmp(G, n, cg_ctype(dt), w * count * dtype_size(dt), "gather");
			coll(G, n, "host.cu:all_gather", xv, tmp, count, dt, "x", "", symm_algo(n));
			blocks(G, n, "all_gather_blocks", tmp, rv, dt, outer, w, dsz, inner, 1);
			cg_free_tmp(G, n, tmp);
		}
		return 1;
	case OP_REDUCE_SCATTER: {
		const char *send = xv;
		if (outer > 1) {
			send = cg_alloc_tmp(G, n, cg_ctype(dt), count * dtype_size(dt), "scatter");
			blocks(G, n, "reduce_scatter_blocks", xv, send, dt, outer, w, dsz / w, inner, 0);
		}
		coll(G, n, "host.cu:reduce_scatter", send, rv, count / w, dt, "op", red_op(n), NULL);
		if (send != xv)
			cg_free_tmp(G, n, send);
		return 1;
	}
	case OP_ALL_TO_ALL: {
		if (outer == 1 && n->nres) {
			coll(G, n, "host.cu:all_to_all", xv, rv, count / w, dt, "x", "", NULL);
			return 1;
		}
		char *t1 = cg_alloc_tmp(G, n, cg_ctype(dt), count * dtype_size(dt), "a2a_send");
		char *t2 = cg_alloc_tmp(G, n, cg_ctype(dt), count * dtype_size(dt), "a2a_recv");
		blocks(G, n, "all_to_all_blocks", xv, t1, dt, outer, w, dsz / w, inner, 0);
		coll(G, n, "host.cu:all_to_all", t1, t2, count / w, dt, "x", "", NULL);
		blocks(G, n, "all_to_all_unblocks", t2, rv, dt, outer, w, dsz / w, inner, 1);
		cg_free_tmp(G, n, t1);
		cg_free_tmp(G, n, t2);
		return 1;
	}
	}
	return 1;
}


/* The bytes of symmetric memory node n uses on its stream when it runs
 * over it: an algo="oneshot" all_reduce of f32, f16 or bf16 (what the
 * one-shot kernel does) or an algo="ce" all_gather (this rank's block);
 * 0 for anything that runs as the plain collective. */
static int64_t
symm_bytes(CgGraph *G, const Node *n)
{
	const char *algo = symm_algo(n);
	const Type *x;
	if (!algo || n->nopnd < 1 || n->opnd[0].kind != OK_VAL)
		return 0;
	x = cg_otype(G, n, 0);
	if (n->op == OP_ALL_REDUCE && strcmp(algo, "SGRT_ALGO_ONESHOT") == 0 &&
	    (x->dt == DT_F32 || x->dt == DT_F16 || x->dt == DT_BF16))
		return type_numel(x) * dtype_size((DType)x->dt);
	if (n->op == OP_ALL_GATHER && strcmp(algo, "SGRT_ALGO_CE") == 0)
		return type_numel(x) * dtype_size((DType)x->dt);
	return 0;
}

/* The model's creation reserves, for each stream, symmetric memory for
 * its largest oneshot/ce collective (sgrt_symm_reserve), so that the
 * set-up, which waits for the device, happens before any CUDA graph
 * capture; `line` is the graph's .sg line. */
void
cg_coll_reserve(CgGraph *G, FILE *f, int line)
{
	Cg *c = G->c;
	Graph *g = G->g;
	for (uint32_t s = 0; s < g->streams.n; s++) {
		int64_t most = 0;
		for (NodeId i = 0; i < g->nodes.n; i++) {
			const Node *n = &g->nodes.v[i];
			if (!(n->flags & NF_DEAD) && cg_stream(n) == (int)s) {
				int64_t b = symm_bytes(G, n);
				most = b > most ? b : most;
			}
		}
		if (most > 0)
			CG_EMIT(f, "api.cu:create_symm", {"s", cg_num(c, s)},
			        {"bytes", cg_num(c, most)}, {"line", cg_num(c, line)});
	}
}
