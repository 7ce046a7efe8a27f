/*
 * schedule.c - the backend's decisions as records on the graph (g->sched):
 * storage classes, fused groups, folded kernels and the memory plan, made
 * by the passes fusion (fusion.c), kernel_choice (kernels.c) and memplan
 * (memplan.c); here too the program as its kernels run it (the graph the
 * plan is made over), the verifier's checks of the records, and their
 * printing for --dump-after.
 *
 * Storage.  Values form alias classes (a control_deps result shares its
 * operand's memory).  A class holding an input, param or const uses that
 * tensor's memory; a class whose value is returned (and holds no input,
 * param or const) is computed straight into the caller's output buffer; a
 * to_host result lives in a pinned host buffer the model owns; any other
 * class is a temporary in the device arena.
 */
#include <inttypes.h>
#include <string.h>

#include "passes.h"

/* ------------------------------------------------------------------ storage */

/* 1 when node n writes its first operand in place. */
static int
writes_first(const Node *n)
{
	if (n->op >= OP__N)
		return 0;
	uint32_t f = op_table[n->op].flags;
	return (f & OPF_INPLACE) || ((f & OPF_COLLECTIVE) && n->nres == 0);
}

/* Alias classes: result j of control_deps joins its j-th value operand. */
static void
find_classes(Graph *g, Sched *s)
{
	Arena *a = s->a;
	uint32_t ns = g->streams.n;
	s->root = arena_alloc(a, (g->vals.n + 1) * sizeof *s->root);
	s->cls = arena_alloc(a, (g->vals.n + 1) * sizeof *s->cls);
	ir_alias_roots(g, s->root);
	for (ValId v = 0; v < g->vals.n; v++) {
		ValId r = s->root[v];
		if (!s->cls[r]) {
			StoreClass *cl = arena_alloc(a, sizeof *cl);
			const Value *val = &g->vals.v[r];
			cl->root = r;
			cl->release = val->kind == VK_NODE ? val->def : NONE;
			cl->kind = val->kind == VK_INPUT ? ST_INPUT
			         : val->kind == VK_NODE ? (val->type.host ? ST_HOST : ST_TEMP)
			         : ST_PARAM;
			cl->last_on = arena_alloc(a, (ns + 1) * sizeof *cl->last_on);
			for (uint32_t t = 0; t < ns; t++)
				cl->last_on[t] = NONE;
			s->cls[r] = cl;
		}
		s->cls[v] = s->cls[r];
	}
}

/* Node i names class cl (as operand or result) on its stream. */
static void
use_class(StoreClass *cl, NodeId i, const Node *n)
{
	uint32_t t = n->stream;
	if (t < 32)
		cl->streams |= 1u << t;
	cl->last_on[t] = i;
	if (cl->release == NONE || cl->release < i)
		cl->release = i;
}

/* Uses, release points, mutation, sync_dealloc; returned temporaries
 * become outputs. */
static void
find_uses(Graph *g, Sched *s)
{
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL)
				use_class(s->cls[n->opnd[k].v], i, n);
		for (uint32_t j = 0; j < n->nres; j++)
			use_class(s->cls[n->res[j]], i, n);
		if (writes_first(n) && n->nopnd && n->opnd[0].kind == OK_VAL)
			s->cls[n->opnd[0].v]->mutated = 1;
		if (n->op == OP_SYNC_DEALLOC && n->opnd[0].kind == OK_VAL)
			s->cls[n->opnd[0].v]->dealloc = 1;
	}
	for (uint32_t i = 0; i < g->rets.n; i++) {
		StoreClass *cl = s->cls[g->rets.v[i]];
		if (cl->kind == ST_TEMP || cl->kind == ST_HOST)
			cl->kind = ST_OUTPUT;
	}
}

Sched *
sched_get(Graph *g, int opt_level)
{
	if (g->sched)
		return g->sched;
	/* The module's arena (freed with the rest of the IR): an arena per
	 * graph would cost a block each, in files of many small graphs. */
	Arena *a = g->mod->arena;
	Sched *s = arena_alloc(a, sizeof *s);
	s->a = a;
	s->opt_level = opt_level;
	s->group = arena_alloc(a, (g->nodes.n + 1) * sizeof *s->group);
	s->prologue = arena_alloc(a, (g->nodes.n + 1) * sizeof *s->prologue);
	s->epilogue = arena_alloc(a, (g->nodes.n + 1) * sizeof *s->epilogue);
	for (NodeId i = 0; i < g->nodes.n; i++)
		s->group[i] = s->prologue[i] = s->epilogue[i] = -1;
	s->reg = arena_alloc(a, g->vals.n + 1);
	s->softmax_bwd = arena_alloc(a, (g->nodes.n + 1) * sizeof *s->softmax_bwd);
	s->flash = arena_alloc(a, g->nodes.n + 1);
	s->rows_lib = arena_alloc(a, g->nodes.n + 1);
	s->gemm_split = arena_alloc(a, g->nodes.n + 1);
	s->bn_stats = arena_alloc(a, (g->nodes.n + 1) * sizeof *s->bn_stats);
	for (NodeId i = 0; i < g->nodes.n; i++)
		s->bn_stats[i] = NONE;
	find_classes(g, s);
	find_uses(g, s);
	g->sched = s;
	g->sched_free = sched_free;
	return s;
}

void
sched_free(Graph *g)
{
	Sched *s = g->sched;
	if (!s)
		return;
	vec_free(&s->groups);
	if (s->planned)
		memplan_free(&s->plan);
	g->sched = NULL;
}

ValId
sched_operand_root(const Sched *s, ValId v)
{
	while (s->fold && s->fold->src[v] != NONE)
		v = s->fold->src[v];
	return v;
}

ValId
sched_bytes_root(const KernelFold *F, ValId v)
{
	while (F->src[v] != NONE && F->trans[v] == 0)
		v = F->src[v];
	return v;
}

const Opnd *
sched_add_other(const Node *a, ValId p_res)
{
	return &a->opnd[a->opnd[0].v == p_res ? 1 : 0];
}

ValId
sched_add_operand(const Graph *g, const KernelFold *F, NodeId P)
{
	return sched_add_other(&g->nodes.v[F->act[P]], g->nodes.v[P].res[0])->v;
}

ValId
sched_out_end(const Sched *s, ValId v)
{
	while (s->fold && s->fold->out[v] != NONE)
		v = s->fold->out[v];
	return v;
}

/* ------------------------------------------------------------------ the kernels' program */

/* 1 when value v is the result of a member of grp. */
static int
made_in(const Graph *g, const FuseGroup *grp, ValId v)
{
	for (uint32_t k = 0; k < grp->n; k++)
		if (g->nodes.v[grp->nodes[k]].res[0] == v)
			return 1;
	return 0;
}

/* The values group grp reads from memory (made outside it), appended to
 * *ops (k of them so far); returns the new count. */
static uint32_t
group_inputs(const Graph *g, const FuseGroup *grp, Opnd *ops, uint32_t k)
{
	for (uint32_t j = 0; j < grp->n; j++) {
		const Node *m = &g->nodes.v[grp->nodes[j]];
		for (uint32_t q = 0; q < m->nopnd; q++) {
			const Opnd *o = &m->opnd[q];
			if (o->kind != OK_VAL || made_in(g, grp, o->v))
				continue;
			uint32_t d = 0;
			while (d < k && !(ops[d].kind == OK_VAL && ops[d].v == o->v))
				d++;
			if (d == k)
				ops[k++] = *o;
		}
	}
	return k;
}

/* The members of group grp become node `at` of the copy f, reading
 * ops[0..nops) and writing res[0..nres) and the members' stored results:
 * the values kept in registers get no buffer, the other members are dead. */
static void
group_place(const Graph *g, const Sched *s, Graph *f, NodeId *def, const FuseGroup *grp,
            NodeId at, Opnd *ops, uint32_t nops, ValId *res, uint32_t nres)
{
	for (uint32_t j = 0; j < grp->n; j++) {
		NodeId m = grp->nodes[j];
		ValId v = g->nodes.v[m].res[0];
		if (s->reg[v])
			def[v] = NONE; /* a register: no buffer */
		else
			res[nres++] = v, def[v] = at;
		if (m != at)
			f->nodes.v[m].flags |= NF_DEAD;
	}
	Node *h = &f->nodes.v[at];
	h->opnd = ops;
	h->nopnd = (uint16_t)nops;
	h->res = res;
	h->nres = (uint16_t)nres;
}

/* Group grp, fused after node grp->after, in the copy f of the graph:
 * that node reads what it read and the group's inputs (less its own
 * result), and writes its result (unless kept in a register) and the
 * group's stored results. */
static void
epilogue_plan(const Graph *g, const Sched *s, Arena *a, Graph *f, NodeId *def,
              const FuseGroup *grp)
{
	NodeId at = grp->after;
	const Node *h = &f->nodes.v[at];
	ValId r = g->nodes.v[at].res[0];
	uint32_t cap = h->nopnd, nres = 0, nops = 0;
	for (uint32_t j = 0; j < grp->n; j++)
		cap += g->nodes.v[grp->nodes[j]].nopnd;
	Opnd *ops = arena_alloc(a, (cap + 1) * sizeof *ops);
	ValId *res = arena_alloc(a, (grp->n + h->nres + 1) * sizeof *res);
	for (uint32_t q = 0; q < h->nopnd; q++)
		ops[nops++] = h->opnd[q];
	for (uint32_t j = 0; j < h->nres; j++)
		if (!s->reg[h->res[j]])
			res[nres++] = h->res[j];
	if (s->reg[r])
		def[r] = NONE;
	uint32_t before = nops;
	nops = group_inputs(g, grp, ops, nops);
	for (uint32_t q = before; q < nops; q++)
		if (ops[q].kind == OK_VAL && ops[q].v == r)
			ops[q] = ops[--nops], q--;
	group_place(g, s, f, def, grp, at, ops, nops, res, nres);
}

/* Group grp in the copy f: one node at its place (its first member, or
 * the consumer it is computed in). */
static void
group_plan(const Graph *g, const Sched *s, Arena *a, Graph *f, NodeId *def,
           const FuseGroup *grp)
{
	NodeId at = grp->into != NONE ? grp->into : grp->nodes[0];
	const Node *h = &f->nodes.v[at];
	uint32_t cap = 0, nres = 0;
	for (uint32_t j = 0; j < grp->n; j++)
		cap += g->nodes.v[grp->nodes[j]].nopnd;
	Opnd *ops = arena_alloc(a, (cap + h->nopnd + 1) * sizeof *ops);
	ValId *res = arena_alloc(a, (grp->n + h->nres + 1) * sizeof *res);
	uint32_t nops = 0;
	if (grp->into != NONE) { /* the consumer reads the group's inputs */
		for (uint32_t q = 1; q < h->nopnd; q++)
			ops[nops++] = h->opnd[q];
		for (uint32_t j = 0; j < h->nres; j++)
			res[nres++] = h->res[j];
	}
	nops = group_inputs(g, grp, ops, nops);
	group_place(g, s, f, def, grp, at, ops, nops, res, nres);
}

/* Node p of the copy reads the sources of its folded operands (an arena
 * copy of its operands). */
static void
plan_operands(const Sched *s, Arena *a, Node *p)
{
	Opnd *ops = arena_alloc(a, (p->nopnd + 1) * sizeof *ops);
	memcpy(ops, p->opnd, p->nopnd * sizeof *ops);
	for (uint32_t k = 0; k < p->nopnd; k++)
		if (ops[k].kind == OK_VAL)
			ops[k].v = sched_operand_root(s, ops[k].v);
	p->opnd = ops;
}

/* Node h of the copy reads operand o too (its source, when folded): a
 * product's epilogue's other operand. */
static void
read_also(const Sched *s, Arena *a, Node *h, Opnd o)
{
	Opnd *ops = arena_alloc(a, (h->nopnd + 2) * sizeof *ops);
	memcpy(ops, h->opnd, h->nopnd * sizeof *ops);
	ops[h->nopnd] = o;
	ops[h->nopnd].v = sched_operand_root(s, o.v);
	h->nopnd++;
	h->opnd = ops;
}

/* Attention node P of the copy f reads the sources of its folded operands
 * and writes the values its results are written through (a paired
 * backward also reads its forward's o). */
static void
plan_attention(const Graph *g, const Sched *s, Arena *a, Graph *f, NodeId *def,
               NodeId P)
{
	Node *p = &f->nodes.v[P];
	ValId *res = arena_alloc(a, (p->nres + 1) * sizeof *res);
	plan_operands(s, a, p);
	if (p->op == OP_SDPA_BACKWARD && s->fold->pair[P] != NONE) { /* reads o */
		Opnd *ops = arena_alloc(a, (p->nopnd + 2) * sizeof *ops);
		memcpy(ops, p->opnd, p->nopnd * sizeof *ops);
		ops[p->nopnd] = ops[0];
		ops[p->nopnd++].v = sched_out_end(s, g->nodes.v[s->fold->pair[P]].res[0]);
		p->opnd = ops;
	}
	uint32_t nres = 0;
	for (uint32_t j = 0; j < p->nres; j++) {
		ValId v = p->res[j];
		while (s->fold->out[v] != NONE) {
			def[v] = NONE;
			v = s->fold->out[v];
		}
		uint32_t k = 0;
		while (k < nres && res[k] != v)
			k++;
		if (k == nres) /* (a cat's slices: its result once) */
			res[nres++] = v;
		def[v] = P;
	}
	p->res = res;
	p->nres = nres;
}

/* A batch_norm P with an epilogue (KernelFold.bn_act) writes its relu's
 * result at P, reading the residual there too; its own result and the
 * add's have no buffer, the add and the relu no kernel. */
static void
bn_plan(const Graph *g, const Sched *s, Arena *a, Graph *f, NodeId *def, NodeId P)
{
	const KernelFold *F = s->fold;
	Node *p = &f->nodes.v[P];
	const Node *act = &g->nodes.v[F->bn_act[P]];
	def[p->res[0]] = NONE;
	p->res = act->res;
	def[act->res[0]] = P;
	f->nodes.v[F->bn_act[P]].flags |= NF_DEAD;
	NodeId add = F->bn_add[P];
	if (add == NONE)
		return;
	const Node *ad = &g->nodes.v[add];
	Opnd *ops = arena_alloc(a, (p->nopnd + 1) * sizeof *ops);
	memcpy(ops, p->opnd, p->nopnd * sizeof *ops);
	ops[p->nopnd] = *sched_add_other(ad, g->nodes.v[P].res[0]);
	p->opnd = ops;
	p->nopnd++;
	def[ad->res[0]] = NONE;
	f->nodes.v[add].flags |= NF_DEAD;
}

/* A max pool's backward P through a relu (KernelFold.pool_relu) writes
 * the where's result at P; its own result and the le's have no buffer,
 * the le and the where no kernel. */
static void
pool_relu_plan(const Graph *g, const Sched *s, Graph *f, NodeId *def, NodeId P)
{
	Node *p = &f->nodes.v[P];
	const Node *w = &g->nodes.v[s->fold->pool_relu[P]];
	NodeId L = g->vals.v[w->opnd[0].v].def;
	def[p->res[0]] = NONE;
	def[w->opnd[0].v] = NONE;
	p->res = w->res;
	def[w->res[0]] = P;
	f->nodes.v[s->fold->pool_relu[P]].flags |= NF_DEAD;
	f->nodes.v[L].flags |= NF_DEAD;
}

/* A norm N with its residual add (KernelFold.norm_add) computes the add
 * at N: it reads the add's operands and writes its sum there too; the
 * add has no kernel. */
static void
norm_add_plan(const Graph *g, const Sched *s, Arena *a, Graph *f, NodeId *def, NodeId N)
{
	Node *p = &f->nodes.v[N];
	NodeId X = s->fold->norm_add[N];
	const Node *ad = &g->nodes.v[X];
	Opnd *ops = arena_alloc(a, (p->nopnd + 3) * sizeof *ops);
	memcpy(ops, p->opnd, p->nopnd * sizeof *ops);
	ops[p->nopnd] = ad->opnd[0];
	ops[p->nopnd + 1] = ad->opnd[1];
	ValId *res = arena_alloc(a, (p->nres + 2) * sizeof *res);
	memcpy(res, p->res, p->nres * sizeof *res);
	res[p->nres] = ad->res[0];
	p->opnd = ops;
	p->nopnd += 2;
	p->res = res;
	p->nres++;
	def[ad->res[0]] = N;
	f->nodes.v[X].flags |= NF_DEAD;
}

/* The copy f for kernel_choice's decisions: folded views make no buffer
 * and products read their sources; a product with an epilogue runs at its
 * activation's place, writing the activation's result. */
static void
fold_plan(const Graph *g, const Sched *s, Arena *a, Graph *f, NodeId *def)
{
	const KernelFold *F = s->fold;
	for (NodeId i = 0; i < f->nodes.n; i++) {
		Node *n = &f->nodes.v[i];
		if (F->view[i]) { /* no buffer, no access */
			n->flags |= NF_DEAD;
			for (uint32_t j = 0; j < n->nres; j++)
				def[n->res[j]] = NONE;
			continue;
		}
		if (F->outview[i]) { /* written by its attention node */
			n->flags |= NF_DEAD;
			continue;
		}
		if (!(n->flags & NF_DEAD) && (n->op == OP_SDPA || n->op == OP_SDPA_BACKWARD)) {
			plan_attention(g, s, a, f, def, i);
			continue;
		}
		if (n->flags & NF_DEAD || F->prod[i] != NONE ||
		    (F->upd[i] != NONE && g->nodes.v[i].op != OP_MATMUL))
			continue; /* (a product placed here: planned at the product) */
		if (n->op == OP_BATCH_NORM && F->bn_act[i] != NONE) {
			bn_plan(g, s, a, f, def, i);
			continue;
		}
		if (n->op == OP_MAX_POOL2D_BACKWARD && F->pool_relu[i] != NONE) {
			pool_relu_plan(g, s, f, def, i);
			continue;
		}
		if ((F->bn_rm[i] != NONE || F->bn_rv[i] != NONE) && n->op != OP_BATCH_NORM) {
			n->flags |= NF_DEAD; /* a running statistic's update: at its batch_norm */
			continue;
		}
		if ((F->bn_sgdw[i] != NONE || F->bn_sgdb[i] != NONE) &&
		    n->op == OP_SGD_UPDATE_) {
			n->flags |= NF_DEAD; /* made by its batch_norm_backward's kernel */
			continue;
		}
		if (F->norm_add[i] != NONE && n->op != OP_ADD)
			norm_add_plan(g, s, a, f, def, i); /* (then its operands, as any kernel's) */
		if (n->op != OP_MATMUL && n->op != OP_LINEAR) {
			/* a kernel reading a view that keeps its source's bytes
			 * (kernel_choice's reads_bytes) reads the source */
			for (uint32_t k = 0; k < n->nopnd; k++)
				if (n->opnd[k].kind == OK_VAL && F->src[n->opnd[k].v] != NONE) {
					plan_operands(s, a, n);
					break;
				}
			continue;
		}
		plan_operands(s, a, n);
		if (F->upd[i] != NONE) { /* runs at its update, writing the param */
			Node h = *n;
			h.nres = 0;
			def[n->res[0]] = NONE;
			n->flags |= NF_DEAD;
			f->nodes.v[F->upd[i]] = h;
			continue;
		}
		NodeId A = F->act[i];
		if (A == NONE)
			continue;
		/* the product runs at its activation (or residual add),
		 * writing its result (and, GELU_AUX, its own: the
		 * pre-activation; ADD reading the residual); DGELU runs at the
		 * product, writing gelu_backward's result and reading its
		 * pre-activation (operand 1) */
		Node h = *n;
		Node *act = &f->nodes.v[A];
		h.res = act->res;
		h.nres = 1;
		def[n->res[0]] = NONE;
		if (F->epi[i] == KEPI_DGELU) {
			read_also(s, a, &h, act->opnd[1]);
			def[act->res[0]] = i;
			act->flags |= NF_DEAD;
			*n = h;
			continue;
		}
		if (F->epi[i] == KEPI_ADD || F->epi[i] == KEPI_BIAS) /* the add's other operand */
			read_also(s, a, &h, *sched_add_other(act, n->res[0]));
		if (F->epi[i] == KEPI_GELU_AUX) {
			ValId *res = arena_alloc(a, 3 * sizeof *res);
			res[0] = act->res[0];
			res[1] = n->res[0];
			h.res = res;
			h.nres = 2;
			def[n->res[0]] = A;
		}
		n->flags |= NF_DEAD;
		*act = h;
	}
}

NodeId *
sched_kernel_graph(const Graph *g, const Sched *s, Arena *a, Graph *f)
{
	*f = *g; /* (its values are g's, read only: def has their definitions) */
	f->sched = NULL;
	NodeId *def = arena_alloc(a, (g->vals.n + 1) * sizeof *def);
	for (ValId v = 0; v < g->vals.n; v++)
		def[v] = g->vals.v[v].def;
	if (!s->groups.n && !s->fold)
		return def; /* (-O0: the program as it is; f shares g's nodes) */
	f->nodes.v = arena_alloc(a, (g->nodes.n + 1) * sizeof *f->nodes.v);
	if (g->nodes.n) /* (a graph with no statements has no arrays) */
		memcpy(f->nodes.v, g->nodes.v, g->nodes.n * sizeof *f->nodes.v);
	for (uint32_t k = 0; k < s->groups.n; k++) {
		const FuseGroup *grp = &s->groups.v[k];
		if (grp->after != NONE)
			epilogue_plan(g, s, a, f, def, grp);
		else
			group_plan(g, s, a, f, def, grp);
	}
	if (s->fold)
		fold_plan(g, s, a, f, def);
	return def;
}

/* ------------------------------------------------------------------ the verifier's part */

#define FAIL(...) ICE("IR verifier, graph '%s', after pass '%s': " __VA_ARGS__)

/* Groups: members live, pointwise-sized (one result), on one stream and
 * one fusion region, in program order, each node in at most one group;
 * prologue and epilogue links point both ways. */
static void
check_groups(Graph *g, const Sched *s, const char *after)
{
	FusionInfo fi;
	fusion_analyse(g, &fi);
	int *seen = xmalloc((g->nodes.n + 1) * sizeof *seen);
	for (NodeId i = 0; i < g->nodes.n; i++)
		seen[i] = -1;
	for (uint32_t k = 0; k < s->groups.n; k++) {
		const FuseGroup *grp = &s->groups.v[k];
		if (grp->n == 0 || grp->n > SCHED_GROUP_MAX)
			FAIL("group %u has %u nodes", g->name, after, k, grp->n);
		NodeId n0 = grp->nodes[0];
		for (uint32_t j = 0; j < grp->n; j++) {
			NodeId i = grp->nodes[j];
			if (i >= g->nodes.n || (g->nodes.v[i].flags & NF_DEAD))
				FAIL("group %u holds a node that is not in the graph", g->name, after, k);
			const Node *n = &g->nodes.v[i];
			if (seen[i] >= 0 || s->group[i] != (int)k)
				FAIL("node %u (line %u) is in group %u and %d", g->name, after, i,
				     n->loc.line, k, seen[i] >= 0 ? seen[i] : s->group[i]);
			seen[i] = (int)k;
			if (j && i <= grp->nodes[j - 1])
				FAIL("group %u is not in program order", g->name, after, k);
			if (n->stream != g->nodes.v[n0].stream)
				FAIL("group %u spans streams '%s' and '%s' (lines %u and %u)", g->name,
				     after, k, g->streams.v[g->nodes.v[n0].stream].name,
				     g->streams.v[n->stream].name, g->nodes.v[n0].loc.line, n->loc.line);
			if (fi.region[i] == NONE || fi.region[i] != fi.region[n0])
				FAIL("group %u spans a sync (lines %u and %u)", g->name, after, k,
				     g->nodes.v[n0].loc.line, n->loc.line);
			if (n->nres != 1)
				FAIL("group %u holds a node of %u results", g->name, after, k, n->nres);
		}
		if (grp->into != NONE && grp->after != NONE)
			FAIL("group %u is both a prologue and an epilogue", g->name, after, k);
		NodeId link = grp->into != NONE ? grp->into : grp->after;
		if (link == NONE)
			continue;
		if (link >= g->nodes.n || s->group[link] >= 0 ||
		    fi.region[link] != fi.region[n0] ||
		    (grp->into != NONE ? s->prologue[link] != (int)k || link < grp->nodes[grp->n - 1]
		                       : s->epilogue[link] < 0 || link > n0))
			FAIL("group %u's %s link to node %u is inconsistent", g->name, after, k,
			     grp->into != NONE ? "prologue" : "epilogue", link);
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		if ((s->group[i] >= 0 && seen[i] != s->group[i]) ||
		    (s->prologue[i] >= 0 && ((uint32_t)s->prologue[i] >= s->groups.n ||
		                             s->groups.v[s->prologue[i]].into != i)) ||
		    (s->epilogue[i] >= 0 && ((uint32_t)s->epilogue[i] >= s->groups.n ||
		                             s->groups.v[s->epilogue[i]].after != i)))
			FAIL("node %u (line %u): its group links are inconsistent", g->name, after,
			     i, g->nodes.v[i].loc.line);
		/* a copy_ onto its own class: the source stored by the last node of
		 * a group in the same region, only inert nodes between
		 * (fusion's store_into_copy), or by a batch_norm's kernel (a
		 * running statistic's update, kernel_choice's bn_rm, bn_rv) */
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD || n->op != OP_COPY_ || n->nopnd != 2 ||
		    n->opnd[1].kind != OK_VAL || s->root[n->opnd[0].v] != s->root[n->opnd[1].v])
			continue;
		NodeId d = g->vals.v[n->opnd[1].v].def, j = i;
		if (s->fold && d != NONE && d < g->nodes.n && g->nodes.v[d].op == OP_ADD &&
		    (s->fold->bn_rm[d] != NONE || s->fold->bn_rv[d] != NONE))
			continue; /* (check_fold checks the update) */
		while (j > 0 && (g->nodes.v[j - 1].flags & NF_DEAD || g->nodes.v[j - 1].op == OP_DEL ||
		                 g->nodes.v[j - 1].op == OP_OFFLOAD))
			j--;
		int gi = d != NONE && d < g->nodes.n ? s->group[d] : -1;
		if (gi < 0 || j == 0 || j - 1 != d || s->groups.v[gi].nodes[s->groups.v[gi].n - 1] != d ||
		    fi.region[d] != fi.region[i] || s->groups.v[gi].into != NONE ||
		    s->groups.v[gi].after != NONE)
			FAIL("node %u (line %u): a copy_ onto its own alias class that no group "
			     "stored", g->name, after, i, n->loc.line);
	}
	free(seen);
	fusion_free(&fi);
}

/* The plan: linearly, every buffer aligned inside its arena with its
 * accesses in order; then memplan_verify over the kernels' program (no
 * two buffers sharing bytes live together unless happens-before orders
 * them), which skips graphs too large for its quadratic reachability. */
static void
check_plan(Graph *g, const Sched *s, const char *after)
{
	const MemPlan *mp = &s->plan;
	for (uint32_t b = 0; b < mp->nbuf; b++) {
		const MemBuf *x = &mp->buf[b];
		uint64_t peak = x->where == MEM_DEVICE ? mp->peak : mp->host_peak;
		if (x->where != MEM_OUTPUT && x->size &&
		    (x->offset % 256 || x->offset + x->size > peak))
			FAIL("'%%%s' lies outside its arena", g->name, after, g->vals.v[x->v].name);
		if (x->alloc > x->last || x->last > x->release || x->release >= g->nodes.n)
			FAIL("'%%%s' has its accesses out of order", g->name, after,
			     g->vals.v[x->v].name);
	}
	if (s->unchecked || g->nodes.n > MEMPLAN_VERIFY_MAX)
		return; /* (the checker would skip it: too large) */
	char why[256];
	Arena *a = arena_new();
	Graph f;
	sched_kernel_graph(g, s, a, &f);
	if (memplan_verify(&f, mp, why) == 0)
		FAIL("the memory plan is wrong: %s", g->name, after, why);
	arena_free(a);
}

/* Kernel choices: a product and its epilogue activation point at each
 * other on one stream, attention pairs too; a folded view has a source
 * and no memory. */
static void
check_fold(Graph *g, const Sched *s, const char *after)
{
	const KernelFold *F = s->fold;
	for (NodeId i = 0; F && i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		NodeId a = F->act[i], p = F->pair[i];
		if ((a != NONE && (a >= g->nodes.n || F->prod[a] != i ||
		                   g->nodes.v[a].stream != n->stream || a <= i)) ||
		    (p != NONE && (p >= g->nodes.n || F->pair[p] != i ||
		                   g->nodes.v[p].stream != n->stream)))
			FAIL("node %u (line %u): its epilogue or attention pair is inconsistent",
			     g->name, after, i, n->loc.line);
		if ((s->gemm_split[i] != 0) !=
		    (!(n->flags & NF_DEAD) && n->op == OP_MATMUL && s->epilogue[i] >= 0) ||
		    (s->gemm_split[i] & (s->gemm_split[i] - 1)) || s->gemm_split[i] > 16)
			FAIL("node %u (line %u): its small product and epilogue group are inconsistent",
			     g->name, after, i, n->loc.line);
		NodeId b = F->bn_act[i];
		if (b != NONE && (b >= g->nodes.n || g->nodes.v[b].stream != n->stream ||
		                  (n->op == OP_BATCH_NORM
		                   ? b <= i || g->nodes.v[b].op != OP_RELU || F->bn_act[b] != i ||
		                     !s->reg[n->res[0]] ||
		                     (F->bn_add[i] != NONE && F->bn_act[F->bn_add[i]] != i)
		                   : g->nodes.v[b].op != OP_BATCH_NORM || b >= i ||
		                     (F->bn_act[b] != i && F->bn_add[b] != i) || s->group[i] >= 0)))
			FAIL("node %u (line %u): its batch_norm epilogue is inconsistent", g->name,
			     after, i, n->loc.line);
		NodeId q = F->pool_relu[i];
		if (q != NONE && (q >= g->nodes.n || g->nodes.v[q].stream != n->stream ||
		                  (n->op == OP_MAX_POOL2D_BACKWARD
		                   ? q <= i || g->nodes.v[q].op != OP_WHERE || F->pool_relu[q] != i ||
		                     !s->reg[n->res[0]] || !s->reg[g->nodes.v[q].opnd[0].v] ||
		                     g->nodes.v[q].opnd[2].v != n->res[0]
		                   : (n->op != OP_WHERE && n->op != OP_LE) || q >= i ||
		                     g->nodes.v[q].op != OP_MAX_POOL2D_BACKWARD || s->group[i] >= 0 ||
		                     (n->op == OP_WHERE && F->pool_relu[q] != i))))
			FAIL("node %u (line %u): its max pool's relu backward is inconsistent", g->name,
			     after, i, n->loc.line);
		for (int j = 0; j < 2; j++) {
			const NodeId *R = j ? F->bn_rv : F->bn_rm;
			NodeId r = R[i];
			if (r != NONE && (r >= g->nodes.n || g->nodes.v[r].stream != n->stream ||
			                  (n->op == OP_BATCH_NORM
			                   ? r <= i || g->nodes.v[r].op != OP_ADD || R[r] != i
			                   : (n->op != OP_MUL && n->op != OP_ADD) || r >= i ||
			                     g->nodes.v[r].op != OP_BATCH_NORM || s->group[i] >= 0 ||
			                     (n->op == OP_ADD && R[r] != i))))
				FAIL("node %u (line %u): its batch_norm's running statistics update is "
				     "inconsistent", g->name, after, i, n->loc.line);
			const NodeId *W = j ? F->bn_sgdb : F->bn_sgdw;
			NodeId w = W[i];
			if (w != NONE && (w >= g->nodes.n || W[w] != i || g->nodes.v[w].stream != n->stream ||
			                  (n->op == OP_BATCH_NORM_BACKWARD
			                   ? w <= i || g->nodes.v[w].op != OP_SGD_UPDATE_ ||
			                     g->nodes.v[w].opnd[1].v != n->res[1 + j] ||
			                     !s->reg[n->res[1 + j]]
			                   : n->op != OP_SGD_UPDATE_ || w >= i ||
			                     g->nodes.v[w].op != OP_BATCH_NORM_BACKWARD)))
				FAIL("node %u (line %u): its batch_norm_backward's SGD update is "
				     "inconsistent", g->name, after, i, n->loc.line);
		}
		NodeId x = F->norm_add[i];
		if (x != NONE && (x >= g->nodes.n || F->norm_add[x] != i ||
		                  g->nodes.v[x].stream != n->stream ||
		                  (n->op == OP_ADD
		                   ? x <= i || (g->nodes.v[x].op != OP_LAYER_NORM &&
		                                g->nodes.v[x].op != OP_RMS_NORM) ||
		                     g->nodes.v[x].opnd[0].v != n->res[0] || s->group[i] >= 0
		                   : x >= i || g->nodes.v[x].op != OP_ADD || !s->rows_lib[i])))
			FAIL("node %u (line %u): its norm's residual add is inconsistent", g->name,
			     after, i, n->loc.line);
		NodeId u = F->upd[i];
		if (u != NONE && (u >= g->nodes.n || F->upd[u] != i ||
		                  g->nodes.v[u].stream != n->stream ||
		                  (n->op == OP_MATMUL
		                   ? u <= i || g->nodes.v[u].op != OP_SGD_UPDATE_ ||
		                     g->nodes.v[u].opnd[1].v != n->res[0] || !s->reg[n->res[0]]
		                   : n->op != OP_SGD_UPDATE_ || u >= i ||
		                     g->nodes.v[u].op != OP_MATMUL)))
			FAIL("node %u (line %u): its product's SGD update is inconsistent", g->name,
			     after, i, n->loc.line);
		int parts = n->op == OP_CHUNK || n->op == OP_SPLIT;
		if ((F->view[i] || F->outview[i]) && n->nres != 1 && !(F->view[i] && parts))
			FAIL("node %u (line %u): a folded view without its source", g->name, after,
			     i, n->loc.line);
		for (uint32_t j = 0; F->view[i] && j < n->nres; j++)
			if (F->src[n->res[j]] != n->opnd[0].v || !s->reg[n->res[j]] ||
			    (F->trans[n->res[j]] == 3) != parts)
				FAIL("node %u (line %u): a folded view without its source", g->name,
				     after, i, n->loc.line);
		/* A cat written by attention: each operand written into its slice. */
		for (uint32_t k = 0; F->outview[i] && n->op == OP_CAT && k < n->nopnd; k++)
			if (F->out[n->opnd[k].v] != n->res[0] || !s->reg[n->opnd[k].v])
				FAIL("node %u (line %u): a cat written by attention with an operand "
				     "not written into it", g->name, after, i, n->loc.line);
	}
}

void
sched_verify(Graph *g, const char *after)
{
	Sched *s = g->sched;
	if (!s)
		return;
	check_groups(g, s, after);
	check_fold(g, s, after);
	if (s->planned)
		check_plan(g, s, after);
}

/* ------------------------------------------------------------------ --dump-after */

/* " 64 KiB": bytes in the largest unit that divides them. */
static void
print_bytes(FILE *f, uint64_t n)
{
	static const char *unit[] = {"B", "KiB", "MiB", "GiB"};
	int u = 0;
	while (u < 3 && n >= 1024 && n % 1024 == 0)
		n /= 1024, u++;
	fprintf(f, "%" PRIu64 " %s", n, unit[u]);
}

typedef struct {
	Graph *g;
	ValId *reuses;  /* per buffer: the buffer at its offset before it, or NONE */
} Notes;

/* For each arena buffer, the one that last held its offset before it
 * (in the order they are written): the bytes it reuses. */
static ValId *
find_reuses(const MemPlan *mp)
{
	ValId *reuses = xmalloc((mp->nbuf + 1) * sizeof *reuses);
	uint64_t *order = xmalloc((mp->nbuf + 1) * sizeof *order); /* alloc << 32 | b */
	uint64_t *key = xmalloc((mp->nbuf + 1) * sizeof *key); /* where and offset */
	Map at; /* key -> the buffer last there */
	map_init(&at);
	for (uint32_t b = 0; b < mp->nbuf; b++)
		order[b] = (uint64_t)mp->buf[b].alloc << 32 | b;
	sort_u64(order, mp->nbuf);
	for (uint32_t k = 0; k < mp->nbuf; k++) {
		uint32_t b = (uint32_t)order[k];
		const MemBuf *x = &mp->buf[b];
		key[b] = x->offset * 4 + x->where;
		reuses[b] = NONE;
		if (x->where == MEM_OUTPUT || !x->size)
			continue;
		uint32_t *prev = map_get(&at, (const char *)&key[b], sizeof *key);
		if (prev)
			reuses[b] = mp->buf[*prev].v;
		map_put(&at, (const char *)&key[b], sizeof *key, b);
	}
	map_free(&at);
	free(key);
	free(order);
	return reuses;
}

/* The trailing comment of node i: its group, fold and buffers. */
static void
note(FILE *f, void *ctx, NodeId i)
{
	const Notes *N = ctx;
	Graph *g = N->g;
	const Sched *s = g->sched;
	const Node *n = &g->nodes.v[i];
	const KernelFold *F = s->fold;
	const char *sep = print_layout_note(f, g, i, "  # ");
	int gi = s->group[i];
	if (gi >= 0) {
		const FuseGroup *grp = &s->groups.v[gi];
		fprintf(f, "%sgroup %d (vec %d%s)", sep, gi, grp->vec, grp->spread ? ", spread" : "");
		if (grp->into != NONE)
			fprintf(f, " into %%%s", g->vals.v[g->nodes.v[grp->into].res[0]].name);
		if (grp->after != NONE)
			fprintf(f, " after %%%s", g->vals.v[g->nodes.v[grp->after].res[0]].name);
		sep = ", ";
	}
	if (F && F->view[i])
		fprintf(f, "%s%s of %%%s%s", sep, F->trans[n->res[0]] == 3 ? "slices" : "view",
		        g->vals.v[F->src[n->res[0]]].name,
		        F->trans[n->res[0]] == 1 ? " (transposed)" :
		        F->trans[n->res[0]] >= 2 ? " (strided)" : ""), sep = ", ";
	if (F && F->outview[i])
		fprintf(f, "%swritten by attention%s", sep, n->op == OP_CAT ? " into its slices" : ""),
		sep = ", ";
	if (F && F->act[i] != NONE && F->epi[i] == KEPI_DGELU)
		fprintf(f, "%swrites %%%s with its gelu_backward as epilogue (DGELU of %%%s)", sep,
		        g->vals.v[g->nodes.v[F->act[i]].res[0]].name,
		        g->vals.v[g->nodes.v[F->act[i]].opnd[1].v].name), sep = ", ";
	else if (F && F->act[i] != NONE && (F->epi[i] == KEPI_ADD || F->epi[i] == KEPI_BIAS))
		fprintf(f, "%sruns at %%%s with its add as epilogue (%s = %%%s%s)", sep,
		        g->vals.v[g->nodes.v[F->act[i]].res[0]].name,
		        F->epi[i] == KEPI_ADD ? "C" : "bias",
		        g->vals.v[sched_add_operand(g, F, i)].name,
		        F->epi[i] == KEPI_ADD ? ", beta 1" : ""), sep = ", ";
	else if (F && F->act[i] != NONE)
		fprintf(f, "%sruns at %%%s with its %s as epilogue%s", sep,
		        g->vals.v[g->nodes.v[F->act[i]].res[0]].name,
		        op_name(g->nodes.v[F->act[i]].op),
		        F->epi[i] == KEPI_GELU_AUX ? " (GELU_AUX: writes this value too)" : ""),
		sep = ", ";
	if (F && F->prod[i] != NONE)
		fprintf(f, "%sepilogue of %%%s", sep,
		        g->vals.v[g->nodes.v[F->prod[i]].res[0]].name), sep = ", ";
	if (F && F->bn_act[i] != NONE && n->op == OP_BATCH_NORM)
		fprintf(f, "%swrites %%%s with its %srelu as epilogue", sep,
		        g->vals.v[g->nodes.v[F->bn_act[i]].res[0]].name,
		        F->bn_add[i] != NONE ? "residual add and " : ""), sep = ", ";
	else if (F && F->bn_act[i] != NONE)
		fprintf(f, "%sepilogue of batch_norm %%%s", sep,
		        g->vals.v[g->nodes.v[F->bn_act[i]].res[0]].name), sep = ", ";
	if (F && F->pool_relu[i] != NONE && n->op == OP_MAX_POOL2D_BACKWARD)
		fprintf(f, "%swrites %%%s with the relu's backward (le, where) as its mask", sep,
		        g->vals.v[g->nodes.v[F->pool_relu[i]].res[0]].name), sep = ", ";
	else if (F && F->pool_relu[i] != NONE)
		fprintf(f, "%scomputed by the max_pool2d_backward making %%%s", sep,
		        g->vals.v[g->nodes.v[F->pool_relu[i]].res[0]].name), sep = ", ";
	for (int j = 0; F && j < 2; j++) {
		const NodeId *W = j ? F->bn_sgdb : F->bn_sgdw;
		if (W[i] != NONE && n->op == OP_BATCH_NORM_BACKWARD)
			fprintf(f, "%supdates %%%s by SGD", sep,
			        g->vals.v[g->nodes.v[W[i]].opnd[0].v].name), sep = ", ";
		else if (W[i] != NONE)
			fprintf(f, "%scomputed by the batch_norm_backward making %%%s", sep,
			        g->vals.v[g->nodes.v[W[i]].res[0]].name), sep = ", ";
	}
	for (int j = 0; F && j < 2; j++) {
		const NodeId *R = j ? F->bn_rv : F->bn_rm;
		if (R[i] != NONE && n->op == OP_BATCH_NORM)
			fprintf(f, "%supdates the running %s %%%s", sep, j ? "variance" : "mean",
			        g->vals.v[s->root[g->nodes.v[R[i]].res[0]]].name), sep = ", ";
		else if (R[i] != NONE)
			fprintf(f, "%scomputed by the batch_norm making %%%s", sep,
			        g->vals.v[g->nodes.v[R[i]].res[0]].name), sep = ", ";
	}
	if (F && F->norm_add[i] != NONE && n->op != OP_ADD)
		fprintf(f, "%scomputes %%%s (the residual add) as it loads its rows", sep,
		        g->vals.v[g->nodes.v[F->norm_add[i]].res[0]].name), sep = ", ";
	else if (F && F->norm_add[i] != NONE)
		fprintf(f, "%scomputed by the %s of %%%s", sep, op_name(g->nodes.v[F->norm_add[i]].op),
		        g->vals.v[g->nodes.v[F->norm_add[i]].res[0]].name), sep = ", ";
	if (F && F->upd[i] != NONE && n->op == OP_MATMUL)
		fprintf(f, "%sruns at the SGD update of %%%s, accumulating into it (beta 1, "
		        "alpha -lr)", sep,
		        g->vals.v[g->nodes.v[F->upd[i]].opnd[0].v].name), sep = ", ";
	else if (F && F->upd[i] != NONE)
		fprintf(f, "%scomputed by the product making %%%s", sep,
		        g->vals.v[n->opnd[1].v].name), sep = ", ";
	if (n->op == OP_COPY_ && n->nopnd == 2 && n->opnd[1].kind == OK_VAL &&
	    s->root[n->opnd[0].v] == s->root[n->opnd[1].v])
		fprintf(f, "%sno copy: stored by the kernel computing %%%s", sep,
		        g->vals.v[n->opnd[1].v].name), sep = ", ";
	if (s->flash[i])
		fprintf(f, "%sflash attention", sep), sep = ", ";
	if (s->rows_lib[i])
		fprintf(f, "%slibrary row kernels", sep), sep = ", ";
	if (s->gemm_split[i])
		fprintf(f, "%ssgk_gemm_small (K split %d) with its epilogue group", sep,
		        s->gemm_split[i]), sep = ", ";
	if (s->bn_stats[i] != NONE && n->op == OP_BATCH_NORM)
		fprintf(f, "%scomputes %%%s, %%%s", sep,
		        g->vals.v[g->nodes.v[s->bn_stats[i]].res[0]].name,
		        g->vals.v[g->nodes.v[s->bn_stats[i]].res[1]].name), sep = ", ";
	else if (s->bn_stats[i] != NONE)
		fprintf(f, "%scomputed by %%%s's kernel", sep,
		        g->vals.v[g->nodes.v[s->bn_stats[i]].res[0]].name), sep = ", ";
	if (s->softmax_bwd[i])
		fprintf(f, "%s%ssoftmax backward kernel", sep, s->softmax_bwd[i]->log ? "log_" : ""),
		sep = ", ";
	if (F && F->pair[i] != NONE)
		fprintf(f, "%spaired with %%%s", sep,
		        g->vals.v[g->nodes.v[F->pair[i]].res[0]].name), sep = ", ";
	for (uint32_t j = 0; j < n->nres; j++) {
		ValId v = n->res[j];
		const char *name = g->vals.v[v].name;
		if (s->root[v] != v)
			continue;
		if (s->reg[v]) {
			fprintf(f, "%s%%%s: no memory", sep, name);
			sep = ", ";
			continue;
		}
		if (!s->planned || s->plan.bufof[v] == NONE)
			continue;
		const MemBuf *b = &s->plan.buf[s->plan.bufof[v]];
		if (b->v != v)
			continue;
		static const char *where[] = {"arena", "host", "output"};
		fprintf(f, "%s%%%s: %s", sep, name, where[b->where]);
		if (b->where != MEM_OUTPUT)
			fprintf(f, " +0x%" PRIx64, b->offset);
		fputs(" (", f);
		print_bytes(f, b->size);
		ValId r = N->reuses[s->plan.bufof[v]];
		if (b->inplace != NONE)
			fprintf(f, ", in place of %%%s", g->vals.v[s->plan.buf[b->inplace].v].name);
		else if (r != NONE)
			fprintf(f, ", reuses %%%s", g->vals.v[r].name);
		fputc(')', f);
		sep = ", ";
	}
}

/* The notes before the backend's decisions: the layouts. */
static void
layout_note(FILE *f, void *ctx, NodeId i)
{
	(void)print_layout_note(f, ctx, i, "  # ");
}

void
sched_print(FILE *f, Graph *g)
{
	if (!g->sched) {
		print_graph_notes(f, g, layout_note, g);
		return;
	}
	const Sched *s = g->sched;
	Notes N = {.g = g, .reuses = s->planned ? find_reuses(&s->plan) : NULL};
	print_graph_notes(f, g, note, &N);
	free(N.reuses);
	if (s->planned)
		fprintf(f, "# plan: device arena %" PRIu64 " bytes, host arena %" PRIu64
		        " bytes, outputs %" PRIu64 " bytes\n", s->plan.peak, s->plan.host_peak,
		        s->plan.outputs);
}
