/*
 * bucket.c - pass `grad_buckets`: gradient buckets for
 * `backward(%loss, grad_sync=all_reduce)`.
 *
 * autograd averages each param's gradient as soon as it is final,
 * `%grad.w = all_reduce(%grad.w.1, op="avg")` on the grad_sync stream,
 * and puts the update right after it.  This pass gathers gradients that
 * become final close together into buckets of at most --bucket-bytes
 * (default 25 MiB, DDP's bucket_cap_mb), one bucket per gradient stream
 * and dtype, filled in the order the gradients become final.  A bucket
 * is all-reduced as one collective as soon as it is full, or final (its
 * last gradient is):
 *
 *   %grad.w2.1.flat = reshape(%grad.w2.1, shape=[N2])   on the gradients'
 *   %grad.bucket = cat(%grad.b2.1, %grad.w2.1.flat)     stream, right after
 *   with stream(grad_sync) {                            the last of them
 *     %grad.bucket.avg = all_reduce(%grad.bucket, op="avg")
 *   }
 *   ...more backward...
 *   %grad.b2, %grad.w2.flat = split(%grad.bucket.avg, sizes=[M, N2])
 *   %grad.w2 = reshape(%grad.w2.flat, shape=[H, O])
 *   sgd_update_(%w2, %grad.w2, lr=0.1)                 the updates, moved
 *   del %grad.w2                                        here
 *   del %grad.bucket
 *
 * The split and the updates of a bucket (each on its gradient's stream,
 * as autograd placed them) wait for that bucket only: they go to the
 * first point of backward by which the collective should be done
 * (offload.c's estimate of compute time, against the collective's time
 * on the grad_sync stream, one collective after the other), else to the
 * end of backward, so that the stream does not stop for it.  For the same
 * reason the memory the collective reads is let go there (`del`), not
 * right after the collective.  A bucket of one gradient keeps autograd's
 * all_reduce; only its update moves.
 *
 * Only autograd's own all_reduces (compiler-made, in a block derived in
 * this compilation) are bucketed, so a printed program compiles to itself.
 */
#include <string.h>

#include "passes.h"

enum { DEFAULT_BUCKET = 25 << 20 };

typedef struct {
	NodeId ar;        /* autograd's all_reduce */
	ValId raw, avg;   /* its operand and its result (the final gradient) */
	uint64_t bytes;
} Member;

typedef struct {
	uint32_t stream;  /* the gradients' stream */
	uint32_t comm;    /* the collective's */
	uint8_t dt;
	uint8_t open;
	VEC(uint32_t) mem;/* indices into members, in order */
	uint64_t bytes;
	NodeId flush;     /* slot after its last gradient */
	NodeId use;       /* slot of the split and the updates */
} Bucket;

typedef struct {
	Graph *g;
	Diag *d;
	NodeId bw, end;
	VEC(Member) members;
	VEC(Bucket) buckets;
	NodeInsVec ins;
} Bk;

/* A node of op on stream s, attributes at their defaults (as sema fills
 * them), operands and results left to the caller. */
static Node
new_node(Graph *g, int op, uint32_t nopnd, uint32_t nres, uint32_t s, Loc loc)
{
	Node n = ir_node_make(g, op, nopnd, nres, s, 0, loc);
	const OpInfo *oi = &op_table[op];
	for (uint32_t i = 0; i < oi->nattr; i++) {
		const char *t = oi->attr[i].deflt;
		Attr *a = &n.attr[i];
		if (!t)
			continue;
		a->set = 1;
		if (a->type == AT_STR)
			a->s = arena_strndup(g->mod->arena, t + 1, strlen(t) - 2);
		else if (a->type == AT_INT)
			a->i = strtoll(t, NULL, 10);
		else if (a->type == AT_BOOL)
			a->i = strcmp(t, "true") == 0;
		else
			ICE("grad_buckets: a default of '%s' it does not know", oi->name);
	}
	return n;
}

static void
set_ints(Graph *g, Node *n, const char *name, const int64_t *v, uint32_t nv)
{
	Attr *a = ir_attr_set(n, name);
	a->ints = arena_alloc(g->mod->arena, ((size_t)nv + 1) * sizeof *a->ints);
	memcpy(a->ints, v, nv * sizeof *v);
	a->nints = nv;
}

static void
set_opnd(Node *n, uint32_t k, ValId v)
{
	n->opnd[k].kind = OK_VAL;
	n->opnd[k].v = v;
}

/* Types n's results by its shape rule (a failure is the pass's fault)
 * and queues it at slot with rank. */
static void
put(Bk *B, Node n, NodeId slot, uint32_t rank)
{
	if (n.op < OP__N && !op_table[n.op].shape(B->g, &n, B->d))
		ICE("grad_buckets: a '%s' fails its shape rule", op_name(n.op));
	NodeIns x = {slot, rank, n};
	vec_push(&B->ins, x);
}

/* `del %v` on stream s at slot. */
static void
put_del(Bk *B, ValId v, uint32_t s, NodeId slot, Loc loc)
{
	Node n = ir_node_make(B->g, OP_DEL, 1, 0, s, 0, loc);
	set_opnd(&n, 0, v);
	put(B, n, slot, 13);
}

/* ------------------------------------------------------------------ finding */

/* The derived block, when this compilation derived it with grad_sync. */
static int
find_block(Bk *B)
{
	Graph *g = B->g;
	B->bw = B->end = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_BACKWARD && (n->flags & NF_BACKWARD) && n->nattr &&
		    n->attr[0].set)
			B->bw = i;
		else if (n->op == OP_BACKWARD_END && B->bw != NONE && B->end == NONE)
			B->end = i;
	}
	return B->bw != NONE && B->end != NONE;
}

static int
by_node(const void *pa, const void *pb)
{
	const Member *a = pa, *b = pb;
	return a->ar < b->ar ? -1 : a->ar > b->ar;
}

/* autograd's averages: %grad.NAME made by a compiler-made all_reduce in
 * the block, for each param NAME; in program order. */
static void
find_members(Bk *B)
{
	Graph *g = B->g;
	for (uint32_t p = 0; p < g->params.n; p++) {
		const char *pn = g->vals.v[g->params.v[p]].name;
		char *name = arena_printf(g->mod->arena, "grad.%s", pn);
		uint32_t *v = map_get(&g->valmap, name, strlen(name));
		if (!v || g->vals.v[*v].kind != VK_NODE)
			continue;
		NodeId i = g->vals.v[*v].def;
		if (i <= B->bw || i >= B->end)
			continue;
		const Node *n = &g->nodes.v[i];
		const Attr *op = ir_attr(n, "op");
		if (n->op != OP_ALL_REDUCE || (n->flags & (NF_USER | NF_DEAD)) ||
		    n->nres != 1 || n->opnd[0].kind != OK_VAL || !op ||
		    strcmp(op->s, "avg") != 0)
			continue;
		const Type *t = &g->vals.v[*v].type;
		Member m = {.ar = i, .raw = n->opnd[0].v, .avg = *v,
		            .bytes = (uint64_t)type_numel(t) * (uint64_t)dtype_size((DType)t->dt)};
		vec_push(&B->members, m);
	}
	if (B->members.n > 1)
		qsort(B->members.v, B->members.n, sizeof *B->members.v, by_node);
}

/* The stream a value is made on (a param's: default). */
static uint32_t
stream_of(const Graph *g, ValId v)
{
	const Value *val = &g->vals.v[v];
	return val->kind == VK_NODE ? g->nodes.v[val->def].stream : 0;
}

/* Fills buckets in the order gradients become final; a bucket closes
 * when it reaches the cap. */
static void
fill(Bk *B, uint64_t cap)
{
	Graph *g = B->g;
	for (uint32_t j = 0; j < B->members.n; j++) {
		const Member *m = &B->members.v[j];
		uint32_t s = stream_of(g, m->raw), c = g->nodes.v[m->ar].stream;
		uint8_t dt = g->vals.v[m->raw].type.dt;
		uint32_t b;
		for (b = 0; b < B->buckets.n; b++) {
			const Bucket *x = &B->buckets.v[b];
			if (x->open && x->stream == s && x->comm == c && x->dt == dt)
				break;
		}
		if (b == B->buckets.n) {
			Bucket nb = {.stream = s, .comm = c, .dt = dt, .open = 1};
			vec_push(&B->buckets, nb);
		}
		Bucket *x = &B->buckets.v[b];
		vec_push(&x->mem, j);
		x->bytes += m->bytes;
		x->flush = m->ar + 1;
		if (x->bytes >= cap)
			x->open = 0;
	}
}

static int
by_flush(const void *pa, const void *pb)
{
	const Bucket *a = *(Bucket *const *)pa, *b = *(Bucket *const *)pb;
	return a->flush < b->flush ? -1 : a->flush > b->flush;
}

/* Where each bucket's split and updates go: the first slot by which its
 * collective should be done, the collectives running one after the other
 * on their stream; else the end of the block. */
static void
place_uses(Bk *B)
{
	Graph *g = B->g;
	double *t = offload_timeline(g);
	Bucket **order = xmalloc((B->buckets.n + 1) * sizeof *order);
	for (uint32_t b = 0; b < B->buckets.n; b++)
		order[b] = &B->buckets.v[b];
	qsort(order, B->buckets.n, sizeof *order, by_flush);
	double free_at = 0;
	for (uint32_t b = 0; b < B->buckets.n; b++) {
		Bucket *x = order[b];
		double start = t[x->flush] > free_at ? t[x->flush] : free_at;
		free_at = start + offload_collective_seconds(g, x->bytes);
		NodeId lo = x->flush, hi = B->end;
		while (lo < hi) {
			NodeId mid = lo + (hi - lo) / 2;
			if (t[mid] >= free_at)
				hi = mid;
			else
				lo = mid + 1;
		}
		x->use = lo;
	}
	free(order);
	free(t);
}

/* ------------------------------------------------------------------ rewriting */

/* How many nodes read each value. */
static uint32_t *
count_reads(const Graph *g)
{
	uint32_t *n = calloc((size_t)g->vals.n + 1, sizeof *n);
	if (!n)
		out_of_memory(0);
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *x = &g->nodes.v[i];
		if (x->flags & NF_DEAD)
			continue;
		for (uint32_t k = 0; k < x->nopnd; k++)
			if (x->opnd[k].kind == OK_VAL && x->op != OP_DEL)
				n[x->opnd[k].v]++;
	}
	for (uint32_t i = 0; i < g->rets.n; i++)
		n[g->rets.v[i]]++;
	return n;
}

/* A bucket of one gradient keeps its all_reduce; the gradient's memory
 * is let go where the update goes, when nothing else reads it. */
static void
emit_single(Bk *B, Bucket *x, const uint32_t *reads)
{
	Graph *g = B->g;
	const Member *m = &B->members.v[x->mem.v[0]];
	if (g->vals.v[m->raw].kind == VK_NODE && reads[m->raw] == 1)
		put_del(B, m->raw, x->stream, x->use, g->nodes.v[m->ar].loc);
}

/* Flattens and concatenates the bucket's gradients after its last one,
 * all-reduces it on the collective's stream, and at the use point splits
 * it back into the final gradients (the values autograd's all_reduces
 * made, which are dropped). */
static void
emit_bucket(Bk *B, Bucket *x)
{
	Graph *g = B->g;
	Arena *a = g->mod->arena;
	uint32_t k = x->mem.n;
	Loc loc = g->nodes.v[B->members.v[x->mem.v[k - 1]].ar].loc;
	Node cat = new_node(g, OP_CAT, k, 1, x->stream, loc);
	int64_t *sizes = arena_alloc(a, ((size_t)k + 1) * sizeof *sizes);
	for (uint32_t j = 0; j < k; j++) {
		Member *m = &B->members.v[x->mem.v[j]];
		const Type *t = &g->vals.v[m->raw].type;
		sizes[j] = type_numel(t);
		ValId flat = m->raw;
		if (t->rank != 1) {
			flat = ir_value_fresh(g, arena_printf(a, "%s.flat", g->vals.v[m->raw].name), loc);
			Node r = new_node(g, OP_RESHAPE, 1, 1, x->stream, loc);
			set_opnd(&r, 0, m->raw);
			r.res[0] = flat;
			set_ints(g, &r, "shape", &sizes[j], 1);
			put(B, r, x->flush, 0);
		}
		set_opnd(&cat, j, flat);
		g->nodes.v[m->ar].flags |= NF_DEAD;
	}
	ValId bucket = ir_value_derived(g, "grad.bucket", 1, loc);
	cat.res[0] = bucket;
	put(B, cat, x->flush, 1);
	ValId avg = ir_value_fresh(g, arena_printf(a, "%s.avg", g->vals.v[bucket].name), loc);
	Node ar = new_node(g, OP_ALL_REDUCE, 1, 1, x->comm, loc);
	set_opnd(&ar, 0, bucket);
	ar.res[0] = avg;
	ir_attr_set(&ar, "op")->s = "avg";
	put(B, ar, x->flush, 2);
	Node sp = new_node(g, OP_SPLIT, 1, k, x->stream, loc);
	set_opnd(&sp, 0, avg);
	set_ints(g, &sp, "sizes", sizes, k);
	VEC(Node) back = {0};
	for (uint32_t j = 0; j < k; j++) {
		Member *m = &B->members.v[x->mem.v[j]];
		const Type t = g->vals.v[m->avg].type;
		if (t.rank == 1) {
			sp.res[j] = m->avg;
			continue;
		}
		sp.res[j] = ir_value_fresh(g, arena_printf(a, "%s.flat", g->vals.v[m->avg].name), loc);
		Node r = new_node(g, OP_RESHAPE, 1, 1, x->stream, loc);
		set_opnd(&r, 0, sp.res[j]);
		r.res[0] = m->avg;
		set_ints(g, &r, "shape", t.d, t.rank);
		vec_push(&back, r);
	}
	put(B, sp, x->use, 10);
	for (uint32_t j = 0; j < back.n; j++)
		put(B, back.v[j], x->use, 11);
	vec_free(&back);
	put_del(B, bucket, x->stream, x->use, loc);
}

/* Moves every node of the block that reads a bucket's gradient before
 * the bucket's use point there (and what reads their results), keeping
 * their order. */
static void
move_uses(Bk *B)
{
	Graph *g = B->g;
	NodeId *ready = xmalloc(((size_t)g->vals.n + 1) * sizeof *ready);
	for (ValId v = 0; v < g->vals.n; v++)
		ready[v] = NONE;
	for (uint32_t b = 0; b < B->buckets.n; b++) {
		const Bucket *x = &B->buckets.v[b];
		for (uint32_t j = 0; j < x->mem.n; j++)
			ready[B->members.v[x->mem.v[j]].avg] = x->use;
	}
	for (NodeId i = B->bw + 1; i < B->end; i++) {
		Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		NodeId at = NONE;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL && ready[n->opnd[k].v] != NONE &&
			    (at == NONE || ready[n->opnd[k].v] > at))
				at = ready[n->opnd[k].v];
		if (at == NONE || at <= i)
			continue;
		NodeIns x = {at, 12, *n};
		vec_push(&B->ins, x);
		n->flags |= NF_DEAD;
		for (uint32_t j = 0; j < n->nres; j++)
			ready[n->res[j]] = at;
	}
	free(ready);
}

static void
bk_free(Bk *B)
{
	for (uint32_t b = 0; b < B->buckets.n; b++)
		vec_free(&B->buckets.v[b].mem);
	vec_free(&B->buckets);
	vec_free(&B->members);
	vec_free(&B->ins);
}

int
buckets_pass(Graph *g, const PassOptions *po, Diag *d)
{
	Bk B = {.g = g, .d = d};
	if (!find_block(&B)) {
		bk_free(&B);
		return PASS_SAME;
	}
	find_members(&B);
	if (!B.members.n) {
		bk_free(&B);
		return PASS_SAME;
	}
	fill(&B, po->bucket_bytes ? po->bucket_bytes : DEFAULT_BUCKET);
	place_uses(&B);
	uint32_t *reads = count_reads(g);
	move_uses(&B);
	for (uint32_t b = 0; b < B.buckets.n; b++) {
		Bucket *x = &B.buckets.v[b];
		if (x->mem.n == 1)
			emit_single(&B, x, reads);
		else
			emit_bucket(&B, x);
	}
	ir_insert(g, &B.ins);
	free(reads);
	bk_free(&B);
	return 1;
}
