/*
 * functionalize.c - pass `functionalize` (rule 9): in-place ops out of
 * place, and the write-back into the caller's tensors.
 *
 * It runs right after sema, before autograd, as PyTorch functionalises
 * before it differentiates: every later pass sees each value written once
 * (SSA), so that "the stream that produced %h" is well defined and no pass
 * has to worry about a move across a mutation.  Each in-place op of the
 * forward program becomes its out-of-place op with a fresh value:
 *
 *     add_(%x, %y)      %x.1 = add(%x, %y)         (cast back when the
 *     copy_(%x, %y)     %y itself, or expand/cast of it       dtype promotes)
 *     zero_(%x)         %x.1 = zeros(shape=..., dtype=...)
 *     fill_(%x, value=v)  %x.1 = full(shape=..., value=v, dtype=...)
 *     all_reduce(%x)    %x.1 = all_reduce(%x)
 *
 * and later uses of %x read %x.1 (returned values keep their names: they
 * are the graph's output names).  A mutated input, param or const, and a
 * mutated value the graph returns, is then written back with
 * `copy_(%x, %x.N)` at the end of the graph, on the stream of its last
 * mutation.  For an input, param or const the write-back comes earlier
 * when an `extern` event is recorded after the mutation, on any stream
 * with an event path from the mutation to the record (the happens-before
 * clocks of races.c): then it goes right after the mutation, on its
 * stream, where the in-place op wrote, so that it is ordered before that
 * record and every later one the mutation is, and a caller waiting on
 * such an event sees the new value.  Of several mutations not written
 * back, the latest one ordered before the record is.  (PyTorch rejects
 * such programs; we compile them.)
 *
 * A copy_ into an input, param, const or returned value that nothing reads
 * afterwards already is a write-back and stays; so do the in-place ops of
 * a derived backward block and the optimizer's update ops.  So printing and
 * compiling the result again changes nothing.
 *
 * Before rewriting, the user's in-place ops are checked for
 * write-after-read races across streams (races.c): once functionalised
 * they would no longer show.  An in-place op on a param before `backward`
 * is an error, as in PyTorch (a leaf that requires grad).
 *
 * First, a training batch_norm with a momentum gets its running-statistics
 * update written out, as PyTorch computes it, and its momentum set to 0
 * (so that printing and compiling again adds nothing): the statistics
 * just before it (so that the batch_norm's kernel can compute them in its
 * own pass over %x: kernel_choice's bn_stats), the updates after it:
 *
 *     %v, %m = var_mean(%x, dims=[0, 2, ...])          (unbiased var)
 *     copy_(%mean, add(mul(%m, momentum), mul(%mean, 1 - momentum)))
 *     copy_(%var, add(mul(%v, momentum), mul(%var, 1 - momentum)))
 *
 * which the rewrite below then treats as the user's in-place ops.  The
 * var_mean is NF_NOGRAD: PyTorch updates the running statistics inside
 * its batch norm kernel, out of autograd's sight, so they never require
 * grad, and an eval batch_norm reading them later (the same module in
 * train then eval mode, or a second model sharing them) gives them none.
 */
#include <string.h>

#include "passes.h"

typedef struct {
	Graph *g;
	Diag *d;
	ValId *cur;       /* per value as written: the version later uses read */
	NodeId *mlast;    /* per caller-visible value: its last mutation not
	                     written back, NONE */
	NodeId *mprev;    /* per mutation node: the one before it of the same
	                     value not written back, NONE */
	ValId *mval;      /* per mutation node of a visible value: the version
	                     it makes */
	VEC(ValId) pendx; /* inputs, params, consts that may have an mlast */
	Hb hb;            /* clocks, stepped when an extern event exists */
	int any_extern;
	uint8_t *visible; /* input, param, const or returned */
	NodeId *lastref;  /* per value: the last node naming it */
	uint8_t *wbok;    /* per node: a copy_ whose target is named next only by
	                     a full overwrite (copy_, zero_, fill_), or never */
	NodeId backward;  /* the backward statement, NONE when none */
	NodeInsVec ins;
	int errors;
} Fn;

/* Runs op's shape rule on n, giving it one fresh result named after base. */
static ValId
finish(Fn *F, Node *n, const char *base)
{
	Graph *g = F->g;
	ValId r = ir_value_derived(g, base, (n->flags & NF_BACKWARD) != 0, n->loc);
	n->nres = 1;
	n->res[0] = r;
	if (!op_table[n->op].shape(g, n, F->d))
		ICE("functionalize: the shape rule of '%s' failed", op_name(n->op));
	return r;
}

/* n's `shape=` attribute from type t. */
static void
set_shape(Fn *F, Node *n, const Type *t)
{
	Attr *a = ir_attr_set(n, "shape");
	a->nints = t->rank;
	a->ints = arena_alloc(F->g->mod->arena, (t->rank + 1) * sizeof *a->ints);
	for (int j = 0; j < t->rank; j++)
		a->ints[j] = t->d[j];
}

/* A new node op(v) after node at (slot at+1), on its stream. */
static ValId
unary_after(Fn *F, const Node *at, NodeId i, int op, ValId v, const Type *t,
            const char *base)
{
	Node n = ir_node_make(F->g, op, 1, 1, at->stream, 0, at->loc);
	n.opnd[0].kind = OK_VAL;
	n.opnd[0].v = v;
	n.opnd[0].loc = at->loc;
	if (op == OP_CAST)
		ir_attr_set(&n, "dtype")->i = t->dt;
	else if (op == OP_EXPAND)
		set_shape(F, &n, t);
	ValId r = finish(F, &n, base);
	NodeIns x = {i + 1, 0, n};
	vec_push(&F->ins, x);
	return r;
}

/* v made to have x's type t: expand, then cast, each a node after i. */
static ValId
coerce(Fn *F, const Node *at, NodeId i, ValId v, const Type *t, const char *base)
{
	Graph *g = F->g;
	if (!type_same_shape(&g->vals.v[v].type, t))
		v = unary_after(F, at, i, OP_EXPAND, v, t, base);
	if (g->vals.v[v].type.dt != t->dt)
		v = unary_after(F, at, i, OP_CAST, v, t, base);
	return v;
}

/* The out-of-place node replacing in-place node i; returns the new version
 * of its operand 0 (NONE: node i is dropped and nothing replaces it). */
static ValId
out_of_place(Fn *F, NodeId i, const char *base)
{
	Graph *g = F->g;
	Node *n = &g->nodes.v[i];
	ValId x = n->opnd[0].v;
	Type t = g->vals.v[x].type;
	Node m;
	if (op_table[n->op].has_base) { /* add_ sub_ mul_ div_ */
		m = ir_node_make(g, op_inplace_base(n->op), 2, 1, n->stream, n->flags, n->loc);
		memcpy(m.opnd, n->opnd, 2 * sizeof *m.opnd);
		ValId r = finish(F, &m, base);
		*n = m;
		return g->vals.v[r].type.dt != t.dt
		       ? unary_after(F, n, i, OP_CAST, r, &t, base) : r;
	}
	switch (n->op) {
	case OP_COPY_: {
		ValId src = n->opnd[1].v;
		n->flags |= NF_DEAD;
		return coerce(F, n, i, src, &t, base);
	}
	case OP_ZERO_:
	case OP_FILL_:
		m = ir_node_make(g, n->op == OP_ZERO_ ? OP_ZEROS : OP_FULL, 0, 1, n->stream,
		               n->flags, n->loc);
		set_shape(F, &m, &t);
		ir_attr_set(&m, "dtype")->i = t.dt;
		if (n->op == OP_FILL_)
			*ir_attr_set(&m, "value") = *ir_attr(n, "value");
		break;
	default: /* a collective in place */
		m = ir_node_make(g, n->op, 1, 1, n->stream, n->flags, n->loc);
		m.opnd[0] = n->opnd[0];
		memcpy(m.attr, n->attr, n->nattr * sizeof *m.attr);
		break;
	}
	ValId r = finish(F, &m, base);
	*n = m;
	return r;
}

/* The in-place ops of the language (the optimizer's update ops, which
 * hold state in place, are left as they are). */
static int
inplace(const Node *n)
{
	if (n->op >= OP__N)
		return 0;
	uint32_t f = op_table[n->op].flags;
	if ((f & OPF_INPLACE) && !(f & OPF_COMPILER))
		return 1;
	return (f & OPF_COLLECTIVE) && n->nres == 0;
}

/* copy_(%x, ...) into a caller-visible %x that nothing names afterwards. */
static int
is_write_back(Fn *F, const Node *n, NodeId i)
{
	ValId x = n->opnd[0].v;
	return n->op == OP_COPY_ && F->visible[x] && (F->lastref[x] == i || F->wbok[i]);
}

/* An `extern` event recorded by node n (bare or through control_deps). */
static int
records_extern(Graph *g, const Node *n)
{
	uint32_t e;
	return ir_sync_of(n, &e) == OP_RECORD_EVENT && n->op != OP_SYNC_DEALLOC &&
	       e < g->events.n && g->events.v[e].is_extern;
}

/* copy_(%x, version mutation node m made) on m's stream at slot. */
static void
write_back(Fn *F, ValId x, NodeId m, uint32_t slot, Loc loc)
{
	Node n = ir_node_make(F->g, OP_COPY_, 2, 0, F->g->nodes.v[m].stream, 0, loc);
	n.opnd[0].kind = n.opnd[1].kind = OK_VAL;
	n.opnd[0].v = x;
	n.opnd[1].v = F->mval[m];
	n.opnd[0].loc = n.opnd[1].loc = loc;
	NodeIns wb = {slot, 1, n};
	vec_push(&F->ins, wb);
}

/* Extern event recorded by node i on stream t, clock t's before i: each
 * pending input, param or const whose latest mutation ordered before i is
 * written back right after that mutation; the mutations after it stay
 * pending. */
static void
write_back_before(Fn *F, const int32_t *clock)
{
	Graph *g = F->g;
	uint32_t kept = 0;
	for (uint32_t j = 0; j < F->pendx.n; j++) {
		ValId x = F->pendx.v[j];
		NodeId m = F->mlast[x], after = NONE;
		while (m != NONE && !HB_DONE(clock, g->nodes.v[m].stream, m + 1)) {
			after = m;
			m = F->mprev[m];
		}
		if (m != NONE) {
			write_back(F, x, m, m + 1, g->nodes.v[m].loc);
			if (after == NONE)
				F->mlast[x] = NONE;
			else
				F->mprev[after] = NONE;
		}
		if (F->mlast[x] != NONE)
			F->pendx.v[kept++] = x;
	}
	F->pendx.n = kept;
}

/* In-place node i on %x (as written): checks, rewrites, renames. */
static void
mutate(Fn *F, NodeId i)
{
	Graph *g = F->g;
	Node *n = &g->nodes.v[i];
	ValId x = n->opnd[0].v;
	const Value *xv = &g->vals.v[x];
	if (xv->kind == VK_PARAM && F->backward != NONE && i < F->backward) {
		diag_error(F->d, n->opnd[0].loc, "'%s' changes param '%%%s' in place "
		           "before 'backward'; PyTorch forbids that for a tensor that "
		           "requires grad", op_name(n->op), xv->name);
		F->errors++;
		return;
	}
	const char *name = xv->name;
	int decl = xv->kind != VK_NODE; /* xv moves when values are made */
	n->opnd[0].v = F->cur[x];
	for (uint32_t k = 1; k < n->nopnd; k++)
		if (n->opnd[k].kind == OK_VAL)
			n->opnd[k].v = F->cur[n->opnd[k].v];
	ValId r = out_of_place(F, i, name);
	F->cur[x] = r;
	if (F->visible[x]) {
		F->mval[i] = r;
		F->mprev[i] = F->mlast[x];
		if (F->mlast[x] == NONE && decl)
			vec_push(&F->pendx, x);
		F->mlast[x] = i;
	}
}

/* Renames the operands of node i; an offload mark follows its value. */
static void
rename_uses(Fn *F, NodeId i)
{
	Graph *g = F->g;
	Node *n = &g->nodes.v[i];
	for (uint32_t k = 0; k < n->nopnd; k++) {
		if (n->opnd[k].kind != OK_VAL || F->cur[n->opnd[k].v] == n->opnd[k].v)
			continue;
		ValId was = n->opnd[k].v, now = F->cur[was];
		n->opnd[k].v = now;
		if (n->op == OP_OFFLOAD) {
			g->vals.v[was].offload = 0;
			g->vals.v[now].offload = 1;
		}
	}
}

/* Walks the nodes: write-backs before extern records, in-place ops out
 * of place, later uses renamed.  The clocks step each node as written,
 * before it is rewritten (a copy_ that becomes nothing still marks its
 * place on its stream). */
static void
rewrite(Fn *F)
{
	Graph *g = F->g;
	uint32_t nn = g->nodes.n;
	for (NodeId i = 0; i < nn; i++) {
		Node *n = &g->nodes.v[i];
		if (F->any_extern) {
			if (records_extern(g, n))
				write_back_before(F, hb_clock(&F->hb, n->stream));
			hb_step(&F->hb, i);
		}
		if (n->flags & NF_DEAD)
			continue;
		if (!inplace(n) || (n->flags & NF_BACKWARD)) {
			rename_uses(F, i);
			continue;
		}
		if (is_write_back(F, n, i)) {
			ValId x = n->opnd[0].v;
			rename_uses(F, i);
			n->opnd[0].v = x;
			F->mlast[x] = NONE;
			continue;
		}
		mutate(F, i);
	}
}

/* Whether the pass has nothing to do on g: no in-place op (so no write
 * to check for races, nothing to rewrite or write back) and no dead node
 * (which the rebuild would drop). */
static int
nothing_to_do(const Graph *g)
{
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if ((n->flags & NF_DEAD) || inplace(n) ||
		    (n->nopnd && ir_access(n, 0) == RACC_WRITE))
			return 0;
	}
	return 1;
}

/* A node op(a, b) for after node `at` (its stream and line), typed by its
 * shape rule; nres fresh results named after base. */
static Node
bn_node(Graph *g, Diag *d, const Node *at, int op, Opnd a, Opnd b, int nopnd,
        uint32_t nres, const char *base)
{
	Node n = ir_node_make(g, op, (uint32_t)nopnd, nres, at->stream, 0, at->loc);
	n.opnd[0] = a;
	if (nopnd > 1)
		n.opnd[1] = b;
	for (int k = 0; k < nopnd; k++)
		n.opnd[k].loc = at->loc;
	for (uint32_t i = 0; i < nres; i++)
		n.res[i] = ir_value_derived(g, base, 0, at->loc);
	if (op == OP_VAR_MEAN) {
		Type x = g->vals.v[a.v].type;
		Attr *dims = ir_attr_set(&n, "dims");
		dims->ints = arena_alloc(g->mod->arena, (size_t)(x.rank + 1) * sizeof *dims->ints);
		dims->nints = 0;
		for (int k = 0; k < x.rank; k++)
			if (k != 1)
				dims->ints[dims->nints++] = k;
	}
	if (nres && !op_table[op].shape(g, &n, d))
		ICE("functionalize: the shape rule of '%s' failed", op_name(op));
	return n;
}

static Opnd
vopnd(ValId v)
{
	Opnd o = {.kind = OK_VAL, .v = v};
	return o;
}

static Opnd
fopnd(double f)
{
	Opnd o = {.kind = OK_FLOAT, .f = f};
	return o;
}

/* The running-statistics updates of the training batch_norms (see the
 * top); 1 when there were any. */
static int
bn_updates(Graph *g, Diag *d)
{
	NodeInsVec ins = {0};
	uint32_t nn = g->nodes.n;
	for (NodeId i = 0; i < nn; i++) {
		Node *n = &g->nodes.v[i];
		if (n->op != OP_BATCH_NORM || (n->flags & (NF_DEAD | NF_BACKWARD)) ||
		    !ir_attr_int(n, "training", 0) || ir_attr_float(n, "momentum", 0) == 0)
			continue;
		Attr *mo = ir_attr_set(n, "momentum");
		double m = mo->f;
		mo->f = 0;
		Node at = *n;
		Node vm = bn_node(g, d, &at, OP_VAR_MEAN, at.opnd[0], at.opnd[0], 1, 2, "bn_stats");
		vm.flags |= NF_NOGRAD; /* PyTorch updates them inside the kernel */
		NodeIns x = {i, 0, vm};
		vec_push(&ins, x);
		for (int k = 0; k < 2; k++) {
			ValId run = at.opnd[1 + k].v, batch = vm.res[1 - k];
			const char *base = g->vals.v[run].name;
			Node a = bn_node(g, d, &at, OP_MUL, vopnd(batch), fopnd(m), 2, 1, base);
			Node b = bn_node(g, d, &at, OP_MUL, vopnd(run), fopnd(1 - m), 2, 1, base);
			Node s = bn_node(g, d, &at, OP_ADD, vopnd(a.res[0]), vopnd(b.res[0]), 2, 1, base);
			Node c = bn_node(g, d, &at, OP_COPY_, vopnd(run), vopnd(s.res[0]), 2, 0, base);
			NodeIns xs[4] = {{i + 1, 0, a}, {i + 1, 0, b}, {i + 1, 0, s}, {i + 1, 0, c}};
			for (int j = 0; j < 4; j++)
				vec_push(&ins, xs[j]);
		}
	}
	int any = ins.n != 0;
	if (any)
		ir_insert(g, &ins);
	vec_free(&ins);
	return any;
}

/* Pass `functionalize`: checks, rewrites, writes back at the end. */
int
functionalize_pass(Graph *g, const PassOptions *po, Diag *d)
{
	int bn = bn_updates(g, d);
	if (!bn && nothing_to_do(g))
		return PASS_SAME;
	if (!races_check_writes(g, po, d))
		return 0;
	uint32_t nv = g->vals.n;
	Fn F = {.g = g, .d = d, .backward = NONE};
	uint32_t nn = g->nodes.n;
	F.cur = xmalloc((nv + 1) * sizeof *F.cur);
	F.mlast = xmalloc((nv + 1) * sizeof *F.mlast);
	F.mprev = xmalloc((nn + 1) * sizeof *F.mprev);
	F.mval = xmalloc((nn + 1) * sizeof *F.mval);
	F.visible = calloc(nv + 1, 1);
	F.lastref = xmalloc((nv + 1) * sizeof *F.lastref);
	if (!F.visible)
		out_of_memory(0);
	for (ValId v = 0; v < nv; v++) {
		F.cur[v] = v;
		F.mlast[v] = NONE;
		F.lastref[v] = NONE;
		F.visible[v] = g->vals.v[v].kind != VK_NODE;
	}
	for (uint32_t i = 0; i < g->rets.n; i++)
		F.visible[g->rets.v[i]] = 1;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_BACKWARD && F.backward == NONE)
			F.backward = i;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL)
				F.lastref[n->opnd[k].v] = i;
	}
	/* A copy_ into a visible value that nothing reads before the next full
	 * overwrite already is a write-back (as printed IR has it). */
	uint8_t *next = calloc(nv + 1, 1); /* per value: 1 overwrite, 2 other */
	F.wbok = calloc(g->nodes.n + 1, 1);
	if (!next || !F.wbok)
		out_of_memory(0);
	for (NodeId i = g->nodes.n; i-- > 0;) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		int full = n->op == OP_COPY_ || n->op == OP_ZERO_ || n->op == OP_FILL_;
		if (n->op == OP_COPY_ && n->nopnd && n->opnd[0].kind == OK_VAL &&
		    n->opnd[0].v < nv)
			F.wbok[i] = next[n->opnd[0].v] != 2;
		for (uint32_t k = n->nopnd; k-- > 0;)
			if (n->opnd[k].kind == OK_VAL && n->opnd[k].v < nv)
				next[n->opnd[k].v] = full && k == 0 ? 1 : 2;
	}
	free(next);
	for (uint32_t e = 0; e < g->events.n; e++)
		F.any_extern |= g->events.v[e].is_extern;
	if (F.any_extern)
		hb_init(&F.hb, g);
	rewrite(&F);
	if (F.any_extern)
		hb_free(&F.hb);
	for (ValId x = 0; x < nv; x++)
		if (F.visible[x] && F.mlast[x] != NONE)
			write_back(&F, x, F.mlast[x], g->nodes.n, g->retloc);
	if (!F.errors)
		ir_insert(g, &F.ins);
	vec_free(&F.ins);
	vec_free(&F.pendx);
	free(F.cur);
	free(F.mlast);
	free(F.mprev);
	free(F.mval);
	free(F.visible);
	free(F.wbok);
	free(F.lastref);
	return F.errors == 0;
}
