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
 * are the graph's output names).  Through a view, the write goes to the
 * memory the view shares with the value it views ("Views", below).  A
 * mutated input, param or const, and a mutated value the graph returns,
 * is then written back with
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

/* A view's strides and element offset in its root's memory, as PyTorch
 * lays them out (the root dense, row-major). */
typedef struct {
	int64_t st[SG_MAXRANK];
	int64_t off;
} VStrides;

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
	NodeId *firstref; /* per value: the first node naming it */
	NodeId *lastwrite;/* per root: the last node writing its memory (a
	                     param's: the end of backward, with an optimizer) */
	uint8_t *wbok;    /* per node: a copy_ whose target is named next only by
	                     a full overwrite (copy_, zero_, fill_), or never */
	NodeId backward;  /* the backward statement, NONE when none */
	NodeInsVec ins;
	int errors;
	/* Views (see "Views" below). */
	ValId *root;      /* per value: the value whose memory it views, itself
	                     when it views none */
	VStrides *vst;    /* per value: its strides and offset in root's memory */
	uint32_t *gver;   /* per root: the mutations of its memory so far */
	uint32_t *seen;   /* per view: the root's gver that cur[] reflects */
	uint32_t *vstream;/* per view: the stream of the compiler's node that
	                     made cur[] again (fresh_view), NONE for the user's */
	ValId *vpar;      /* per view: the value it views, as written */
	uint32_t nv;      /* values before the pass: those the arrays cover */
	VEC(ValId) chain;
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

/* ------------------------------------------------------------------ views
 *
 * PyTorch's view ops (transpose, permute, slice, chunk, split, expand,
 * squeeze, unsqueeze; reshape and contiguous where the strides allow it, as
 * PyTorch decides; a cast to the same dtype) give tensors that share their
 * operand's memory.  So an in-place op on a view changes the value it
 * views, and every other view of that memory, and one on a value changes
 * its views: `copy_` into a slice of a cache updates the cache.  This pass
 * keeps that meaning as PyTorch's functionalisation does:
 *
 *     %s = slice(%c, dim=0, start=2, end=3)
 *     copy_(%s, %n)        %c.1 = cat(slice(%c, dim=0, end=2), %n,
 *                                     slice(%c, dim=0, start=3), dim=0)
 *
 * The mutated view's new version goes back through each view op to the
 * root (the value whose memory it views): transposed or permuted back,
 * reshaped back, a slice set between the untouched parts with cat.  Later
 * uses of the root read its new version.  A view read after a mutation of
 * its root's memory is made again from the root's new version, right
 * before the read and on the reader's stream; a returned view is made
 * again at the end, and that node takes its name.  Each view records how
 * many mutations of its root its version reflects, so it is made again
 * only when read, once per mutation.  An in-place op through an expand that
 * broadcast (several elements sharing one location) is an error, as
 * PyTorch's is, but for fill_ and zero_ of all of it, which PyTorch takes.
 */

/* Dim attribute `name` of n normalised against rank. */
static int
dim_of(const Node *n, const char *name, int rank)
{
	return shape_norm_dim(ir_attr_int(n, name, 0), rank);
}

/* Where result k of slice, chunk or split node n starts along its dim d. */
static int64_t
part_start(const Graph *g, const Node *n, uint32_t k, int d)
{
	if (n->op != OP_SLICE)
		return shape_part_start(g, n, n->res[k], &d);
	return shape_clamp_index(ir_attr_int(n, "start", 0), g->vals.v[n->opnd[0].v].type.d[d]);
}

/* Whether result k of forward node n views its operand's memory; if so,
 * its strides and offset into r. */
static int
view_of(Fn *F, const Node *n, uint32_t k, VStrides *r)
{
	Graph *g = F->g;
	if (n->nopnd < 1 || n->opnd[0].kind != OK_VAL)
		return 0;
	ValId x = n->opnd[0].v;
	const Type *xt = &g->vals.v[x].type, *rt = &g->vals.v[n->res[k]].type;
	const VStrides *xs = &F->vst[x];
	*r = *xs;
	switch (n->op) {
	case OP_TRANSPOSE: {
		if (xt->rank == 0)
			return 1;
		int a = dim_of(n, "dim0", xt->rank), b = dim_of(n, "dim1", xt->rank);
		r->st[a] = xs->st[b];
		r->st[b] = xs->st[a];
		return 1;
	}
	case OP_PERMUTE: {
		const Attr *p = ir_attr(n, "dims");
		for (int i = 0; i < xt->rank; i++)
			r->st[i] = xs->st[shape_norm_dim(p->ints[i], xt->rank)];
		return 1;
	}
	case OP_SLICE:
	case OP_CHUNK:
	case OP_SPLIT: {
		int d = dim_of(n, "dim", xt->rank);
		r->off += part_start(g, n, k, d) * xs->st[d];
		return 1;
	}
	case OP_EXPAND: {
		int lead = rt->rank - xt->rank;
		for (int i = rt->rank; i-- > 0;) {
			int j = i - lead;
			int64_t size = j >= 0 ? xt->d[j] : 1;
			int64_t st = j >= 0 ? xs->st[j]
			           : i + 1 < rt->rank ? rt->d[i + 1] * r->st[i + 1] : 1;
			r->st[i] = size != rt->d[i] ? 0 : st;
		}
		return 1;
	}
	case OP_SQUEEZE:
		if (rt->rank < xt->rank)
			for (int i = dim_of(n, "dim", xt->rank); i < rt->rank; i++)
				r->st[i] = xs->st[i + 1];
		return 1;
	case OP_UNSQUEEZE: {
		int d = dim_of(n, "dim", rt->rank);
		for (int i = rt->rank - 1; i > d; i--)
			r->st[i] = xs->st[i - 1];
		r->st[d] = d >= xt->rank ? 1 : xt->d[d] * xs->st[d];
		return 1;
	}
	case OP_RESHAPE:
		return shape_view_strides(xt, xs->st, rt, r->st);
	case OP_CONTIGUOUS:
		return shape_row_major(xt, xs->st);
	case OP_CAST:
		return xt->dt == rt->dt;
	default:
		return 0;
	}
}

/* Roots and strides of every forward value (see "Views"). */
static void
find_views(Fn *F)
{
	Graph *g = F->g;
	uint32_t nv = F->nv = g->vals.n;
	F->root = xmalloc((nv + 1) * sizeof *F->root);
	F->vpar = xmalloc((nv + 1) * sizeof *F->vpar);
	F->vst = xmalloc((nv + 1) * sizeof *F->vst);
	F->gver = calloc(nv + 1, sizeof *F->gver);
	F->seen = calloc(nv + 1, sizeof *F->seen);
	F->vstream = xmalloc((nv + 1) * sizeof *F->vstream);
	if (!F->gver || !F->seen)
		out_of_memory(0);
	for (ValId v = 0; v < nv; v++) {
		F->vstream[v] = NONE;
		F->root[v] = v;
		F->vpar[v] = NONE;
		shape_row_strides(&g->vals.v[v].type, F->vst[v].st);
		F->vst[v].off = 0;
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & (NF_DEAD | NF_BACKWARD))
			continue;
		for (uint32_t k = 0; k < n->nres; k++) {
			VStrides r;
			ValId v = n->res[k];
			if (!view_of(F, n, k, &r))
				continue;
			F->root[v] = F->root[n->opnd[0].v];
			F->vpar[v] = n->opnd[0].v;
			F->vst[v] = r;
		}
	}
}

/* Node i's kind of node, made again on operand x: a slice for a part of
 * chunk or split, else a copy of the view op with its attributes. */
static Node
view_again(Fn *F, const Node *dn, uint32_t k, ValId x, uint32_t stream, Loc loc)
{
	Graph *g = F->g;
	int split = dn->op == OP_CHUNK || dn->op == OP_SPLIT;
	Node m = ir_node_make(g, split ? OP_SLICE : dn->op, 1, 1, stream, 0, loc);
	if (split) {
		int rank = g->vals.v[x].type.rank, d = dim_of(dn, "dim", rank);
		int64_t lo = part_start(g, dn, k, d);
		ir_attr_set(&m, "dim")->i = d;
		ir_attr_set(&m, "start")->i = lo;
		ir_attr_set(&m, "end")->i = lo + g->vals.v[dn->res[k]].type.d[d];
	} else {
		memcpy(m.attr, dn->attr, dn->nattr * sizeof *m.attr);
	}
	m.opnd[0].kind = OK_VAL;
	m.opnd[0].v = x;
	m.opnd[0].loc = loc;
	return m;
}

/* View u's version as of now, made again before node `slot` (on stream,
 * at loc) where a mutation of its root's memory came after it.  A view the
 * compiler made again on another stream is made again on this one: a
 * reader on this stream is ordered after the mutation, not after that
 * other stream's view node. */
static ValId
fresh_view(Fn *F, ValId u, NodeId slot, uint32_t stream, Loc loc)
{
	Graph *g = F->g;
	ValId r = F->root[u], top = u;
	F->chain.n = 0;
	while (top != r && (F->seen[top] != F->gver[r] ||
	                    (F->vstream[top] != NONE && F->vstream[top] != stream))) {
		vec_push(&F->chain, top);
		top = F->vpar[top];
	}
	ValId at = F->cur[top];
	for (uint32_t j = F->chain.n; j-- > 0;) {
		ValId m = F->chain.v[j];
		const Value *mv = &g->vals.v[m];
		Node n = view_again(F, &g->nodes.v[mv->def], mv->resno, at, stream, loc);
		at = finish(F, &n, g->vals.v[m].name);
		NodeIns x = {slot, 0, n};
		vec_push(&F->ins, x);
		F->cur[m] = at;
		F->seen[m] = F->gver[r];
		F->vstream[m] = stream;
	}
	return F->cur[u];
}

/* The version node i (on stream, at loc) reads of value v. */
static ValId
version(Fn *F, ValId v, NodeId i, uint32_t stream, Loc loc)
{
	return F->root[v] == v ? F->cur[v] : fresh_view(F, v, i, stream, loc);
}

/* A node op(opnd...) before node slot, on stream; its fresh result. */
static ValId
node_after(Fn *F, Node *n, NodeId slot, const char *base)
{
	ValId r = finish(F, n, base);
	NodeIns x = {slot, 0, *n};
	vec_push(&F->ins, x);
	return r;
}

/* slice(x, dim=d, start=lo, end=hi) before node slot. */
static ValId
slice_after(Fn *F, ValId x, int d, int64_t lo, int64_t hi, NodeId slot,
            uint32_t stream, Loc loc, const char *base)
{
	Node m = ir_node_make(F->g, OP_SLICE, 1, 1, stream, 0, loc);
	ir_attr_set(&m, "dim")->i = d;
	ir_attr_set(&m, "start")->i = lo;
	ir_attr_set(&m, "end")->i = hi;
	m.opnd[0].kind = OK_VAL;
	m.opnd[0].v = x;
	m.opnd[0].loc = loc;
	return node_after(F, &m, slot, base);
}

/* Whether expand node n broadcast: a dim of size 1 (or a new one) made
 * larger, so that several elements share one memory location. */
static int
broadcasts(const Graph *g, const Node *n)
{
	const Type *x = &g->vals.v[n->opnd[0].v].type, *r = &g->vals.v[n->res[0]].type;
	for (int i = 0, lead = r->rank - x->rank; i < r->rank; i++)
		if (r->d[i] != 1 && (i < lead || x->d[i - lead] == 1))
			return 1;
	return 0;
}

/* The new version of view c's operand p (its version now: pc) when c's
 * new version is cn: the view op undone, before node slot. */
static ValId
scatter(Fn *F, ValId c, ValId pc, ValId cn, NodeId slot, uint32_t stream, Loc loc)
{
	Graph *g = F->g;
	const Value *cv = &g->vals.v[c];
	const Node *dn = &g->nodes.v[cv->def];
	uint32_t k = cv->resno;
	Type pt = g->vals.v[F->vpar[c]].type;
	const char *base = g->vals.v[F->root[c]].name;
	Arena *a = g->mod->arena;
	Node m;
	switch (dn->op) {
	case OP_TRANSPOSE:
		if (pt.rank == 0)
			return cn;
		m = view_again(F, dn, k, cn, stream, loc);
		return node_after(F, &m, slot, base);
	case OP_PERMUTE: {
		const Attr *p = ir_attr(dn, "dims");
		m = ir_node_make(g, OP_PERMUTE, 1, 1, stream, 0, loc);
		Attr *inv = ir_attr_set(&m, "dims");
		inv->nints = (uint32_t)pt.rank;
		inv->ints = arena_alloc(a, ((size_t)pt.rank + 1) * sizeof *inv->ints);
		for (int i = 0; i < pt.rank; i++)
			inv->ints[shape_norm_dim(p->ints[i], pt.rank)] = i;
		m.opnd[0].kind = OK_VAL;
		m.opnd[0].v = cn;
		m.opnd[0].loc = loc;
		return node_after(F, &m, slot, base);
	}
	case OP_SLICE:
	case OP_CHUNK:
	case OP_SPLIT: {
		int d = dim_of(dn, "dim", pt.rank);
		int64_t lo = part_start(g, dn, k, d), hi = lo + g->vals.v[cn].type.d[d];
		if (lo == 0 && hi == pt.d[d])
			return cn;
		m = ir_node_make(g, OP_CAT, 1 + (lo > 0) + (hi < pt.d[d]), 1, stream, 0, loc);
		ir_attr_set(&m, "dim")->i = d;
		uint32_t j = 0;
		if (lo > 0)
			m.opnd[j++].v = slice_after(F, pc, d, 0, lo, slot, stream, loc, base);
		m.opnd[j++].v = cn;
		if (hi < pt.d[d])
			m.opnd[j++].v = slice_after(F, pc, d, hi, pt.d[d], slot, stream, loc, base);
		for (j = 0; j < m.nopnd; j++) {
			m.opnd[j].kind = OK_VAL;
			m.opnd[j].loc = loc;
		}
		return node_after(F, &m, slot, base);
	}
	default: /* reshape, squeeze, unsqueeze, contiguous, cast, expand */
		if (dn->op == OP_EXPAND && broadcasts(g, dn)) {
			/* fill_ or zero_ of all of it: every copy holds the value */
			int lead = g->vals.v[cn].type.rank - pt.rank;
			for (int i = 0; i < g->vals.v[cn].type.rank; i++)
				if (g->vals.v[cn].type.d[i] > 1 && (i < lead || pt.d[i - lead] == 1))
					cn = slice_after(F, cn, i, 0, 1, slot, stream, loc, base);
		}
		if (type_same_shape(&g->vals.v[cn].type, &pt))
			return cn;
		m = ir_node_make(g, OP_RESHAPE, 1, 1, stream, 0, loc);
		set_shape(F, &m, &pt);
		m.opnd[0].kind = OK_VAL;
		m.opnd[0].v = cn;
		m.opnd[0].loc = loc;
		return node_after(F, &m, slot, base);
	}
}

/* Whether in-place op `op` may write into view x through the expands on
 * its way to its root that broadcast: only fill_ and zero_ (one value for
 * every element sharing a location), and only into the whole of such an
 * expand's result (no slice between it and x). */
static int
through_expand_ok(Fn *F, ValId x, int op)
{
	Graph *g = F->g;
	int part = 0;
	for (; F->vpar[x] != NONE; x = F->vpar[x]) {
		const Node *n = &g->nodes.v[g->vals.v[x].def];
		if (n->op == OP_EXPAND && broadcasts(g, n) &&
		    ((op != OP_FILL_ && op != OP_ZERO_) || part))
			return 0;
		part |= n->op == OP_SLICE || n->op == OP_CHUNK || n->op == OP_SPLIT;
	}
	return 1;
}

/* Whether view x has elements that share one memory location. */
static int
overlaps(Fn *F, ValId x)
{
	const Type *t = &F->g->vals.v[x].type;
	for (int i = 0; i < t->rank; i++)
		if (F->vst[x].st[i] == 0 && t->d[i] > 1)
			return 1;
	return 0;
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

/* copy_(%x, ...) into a caller-visible %x that nothing names afterwards,
 * nor any view of its memory. */
static int
is_write_back(Fn *F, const Node *n, NodeId i)
{
	ValId x = n->opnd[0].v;
	return n->op == OP_COPY_ && F->visible[x] && F->root[x] == x &&
	       (F->lastref[x] == i || F->wbok[i]);
}

/* copy_(%s, %u) into %s made by `zeros` and not changed since, where %u
 * is an input, param, const or returned value, or a view of one, holding
 * its current value: a copy kept as written (autograd derives it), as autograd's
 * snapshots (`%x.saved`) and copies_memory's are, so that printed IR
 * prints the same again. */
static int
snapshot(Fn *F, const Node *n)
{
	Graph *g = F->g;
	if (n->op != OP_COPY_ || n->opnd[0].kind != OK_VAL || n->opnd[1].kind != OK_VAL)
		return 0;
	ValId s = n->opnd[0].v, u = n->opnd[1].v;
	const Value *sv = &g->vals.v[s];
	if (s >= F->nv || u >= F->nv || F->visible[s] || F->root[s] != s || F->cur[s] != s ||
	    sv->kind != VK_NODE || sv->def == NONE || g->nodes.v[sv->def].op != OP_ZEROS)
		return 0;
	ValId r = F->root[u];
	if (F->cur[r] != r || (r != u && (F->cur[u] != u || F->seen[u] != F->gver[r])))
		return 0; /* changed: its version is another value */
	/* n names %s first: no value's version is %s yet (which the copy
	 * would change) */
	return F->firstref[s] == (NodeId)(n - g->nodes.v) && r != s && F->visible[r];
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
	if (F->mval[m] == x)
		return; /* copy_(%x, %x) left x as it was */
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

/* The value v passes on through control_deps (itself when none). */
static ValId
passed_from(Fn *F, ValId v)
{
	Graph *g = F->g;
	while (v < F->nv && g->vals.v[v].kind == VK_NODE && g->vals.v[v].def != NONE) {
		const Node *d = &g->nodes.v[g->vals.v[v].def];
		if (d->op != OP_CONTROL_DEPS)
			break;
		v = d->opnd[g->vals.v[v].resno].v;
	}
	return v;
}

/* The visible value (input, param, const or returned) whose memory
 * value v (a version: renamed, made before the node being rewritten) may
 * be, views and control_deps followed, or NONE. */
static ValId
memory_of(Fn *F, ValId v)
{
	Graph *g = F->g;
	for (;;) {
		v = passed_from(F, v);
		const Value *val = &g->vals.v[v];
		if (val->kind != VK_NODE || val->def == NONE)
			return val->kind != VK_NODE ? v : NONE;
		const Node *d = &g->nodes.v[val->def];
		switch (d->op) {
		case OP_RESHAPE: case OP_TRANSPOSE: case OP_PERMUTE: case OP_EXPAND:
		case OP_SLICE: case OP_CHUNK: case OP_SPLIT: case OP_SQUEEZE:
		case OP_UNSQUEEZE: case OP_CONTIGUOUS: case OP_CAST:
			if (d->nopnd < 1 || d->opnd[0].kind != OK_VAL)
				return NONE;
			v = d->opnd[0].v; /* may be a view of it (as PyTorch decides) */
			break;
		default:
			return v < F->nv && F->visible[v] ? v : NONE;
		}
	}
}

/* copy_(%x, %y) (node i) into root r's memory, where %y's version is
 * the memory of an input, param, const or returned value other than r, or
 * a view of it, that a later node writes (the optimizer a param's): as
 * that version, %x (or r through the view) would read what the write (or
 * a write-back) puts there, and r's write-back could read it after the
 * write. */
static int
copies_memory(Fn *F, NodeId i, ValId r)
{
	const Node *n = &F->g->nodes.v[i];
	if (n->opnd[1].kind != OK_VAL)
		return 0;
	ValId a = memory_of(F, n->opnd[1].v);
	return a != NONE && a != r && F->visible[a] && F->lastwrite[a] != NONE &&
	       F->lastwrite[a] > i;
}

/* copy_ node i copies its source first: into a fresh `zeros` of its
 * target's type, made right before it by another copy_ (as autograd's
 * snapshots are, which `snapshot` keeps when compiled again), which node i
 * then reads. */
static void
copy_source_first(Fn *F, NodeId i, const char *base)
{
	Graph *g = F->g;
	const Node *n = &g->nodes.v[i];
	Type t = g->vals.v[n->opnd[0].v].type;
	uint32_t stream = n->stream, flags = n->flags;
	Loc loc = n->loc;
	Opnd src = n->opnd[1];
	Node z = ir_node_make(g, OP_ZEROS, 0, 1, stream, flags, loc);
	set_shape(F, &z, &t);
	ir_attr_set(&z, "dtype")->i = t.dt;
	ValId c = finish(F, &z, base);
	Node cp = ir_node_make(g, OP_COPY_, 2, 0, stream, flags, loc);
	cp.opnd[0].kind = OK_VAL;
	cp.opnd[0].v = c;
	cp.opnd[0].loc = loc;
	cp.opnd[1] = src;
	NodeIns zi = {i, 0, z}, ci = {i, 0, cp};
	vec_push(&F->ins, zi);
	vec_push(&F->ins, ci);
	g->nodes.v[i].opnd[1].v = c;
}

/* In-place node i on %x (as written): checks, rewrites, renames.  When %x
 * views another value's memory, the new version goes back to its root
 * ("Views"), whose mutation it then is. */
static void
mutate(Fn *F, NodeId i)
{
	Graph *g = F->g;
	Node *n = &g->nodes.v[i];
	ValId x = n->opnd[0].v, r = F->root[x];
	const Value *rv = &g->vals.v[r];
	if (rv->kind == VK_PARAM && F->backward != NONE && i < F->backward) {
		if (r == x)
			diag_error(F->d, n->opnd[0].loc, "'%s' changes param '%%%s' in place "
			           "before 'backward'; PyTorch forbids that for a tensor that "
			           "requires grad", op_name(n->op), rv->name);
		else
			diag_error(F->d, n->opnd[0].loc, "'%s' changes '%%%s', a view of param "
			           "'%%%s', in place before 'backward'; PyTorch forbids that "
			           "for a tensor that requires grad", op_name(n->op),
			           g->vals.v[x].name, rv->name);
		F->errors++;
		return;
	}
	if (r != x && !through_expand_ok(F, x, n->op)) {
		if (overlaps(F, x) && n->op != OP_FILL_ && n->op != OP_ZERO_)
			diag_error(F->d, n->opnd[0].loc, "'%s' writes into '%%%s', a view in "
			           "which several elements share one memory location (made by "
			           "an 'expand' that broadcast); PyTorch rejects that: write into "
			           "a copy ('contiguous' of it) instead", op_name(n->op),
			           g->vals.v[x].name);
		else
			diag_error(F->d, n->opnd[0].loc, "'%s' writes into '%%%s', part of a "
			           "view made by an 'expand' that broadcast; sgc takes in-place "
			           "ops through such an expand only for 'fill_' and 'zero_' of "
			           "all of it: write into a copy ('contiguous' of it) instead",
			           op_name(n->op), g->vals.v[x].name);
		F->errors++;
		return;
	}
	const char *name = g->vals.v[x].name;
	int decl = rv->kind != VK_NODE; /* rv moves when values are made */
	for (uint32_t k = 0; k < n->nopnd; k++)
		if (n->opnd[k].kind == OK_VAL)
			n->opnd[k].v = version(F, n->opnd[k].v, i, n->stream, n->loc);
	int copy = n->op == OP_COPY_;
	if (copy && copies_memory(F, i, r))
		copy_source_first(F, i, name);
	ValId nx = out_of_place(F, i, name);
	n = &g->nodes.v[i];
	for (ValId c = x; c != r; c = F->vpar[c]) {
		ValId p = F->vpar[c];
		ValId np = scatter(F, c, F->cur[p], nx, i + 1, n->stream, n->loc);
		F->cur[c] = nx;
		nx = np;
	}
	F->cur[r] = nx;
	F->gver[r]++;
	for (ValId c = x; c != r; c = F->vpar[c]) {
		F->seen[c] = F->gver[r];
		F->vstream[c] = NONE;
	}
	if (F->visible[r]) {
		F->mval[i] = nx;
		F->mprev[i] = F->mlast[r];
		if (F->mlast[r] == NONE && decl)
			vec_push(&F->pendx, r);
		F->mlast[r] = i;
	}
}

/* Renames the operands of node i; an offload mark follows its value.  A
 * `del` or `offload` names a view as it is, without making it again. */
static void
rename_uses(Fn *F, NodeId i)
{
	Graph *g = F->g;
	Node *n = &g->nodes.v[i];
	int mark = n->op == OP_DEL || n->op == OP_OFFLOAD;
	for (uint32_t k = 0; k < n->nopnd; k++) {
		if (n->opnd[k].kind != OK_VAL)
			continue;
		ValId was = n->opnd[k].v;
		ValId now = mark ? F->cur[was] : version(F, was, i, n->stream, n->loc);
		if (now == was)
			continue;
		n->opnd[k].v = now;
		if (n->op == OP_OFFLOAD) {
			g->vals.v[was].offload = 0;
			g->vals.v[now].offload = 1;
		}
	}
	for (uint32_t k = 0; k < n->nres; k++) {
		ValId v = n->res[k];
		if (F->root[v] != v) {
			F->seen[v] = F->gver[F->root[v]];
			F->vstream[v] = NONE;
		}
	}
}

/* copy_(%x, %y) where %y is %x's version now, itself or passed on through
 * control_deps: nothing to write. */
static int
copies_itself(Fn *F, const Node *n)
{
	if (n->op != OP_COPY_ || n->opnd[1].kind != OK_VAL)
		return 0;
	ValId x = n->opnd[0].v, y = n->opnd[1].v;
	if (x == y)
		return 1;
	if (F->root[x] != x || F->root[y] != y)
		return 0;
	return passed_from(F, F->cur[y]) == F->cur[x];
}

/* Whether node n ends `backward`: the statement, or its derived block's
 * end where printed IR has one. */
static int
ends_backward(const Node *n)
{
	return n->op == OP_BACKWARD_END ||
	       (n->op == OP_BACKWARD && !(n->flags & NF_BACKWARD));
}

/* The optimizer updates every param in place at the end of `backward`
 * (autograd's optim.c writes the updates into the block), so its views
 * made before then are made again where read after it, as after a user's
 * in-place op: `%t = transpose(%w, ...)` read after an SGD step gives the
 * updated %w transposed, as PyTorch's view of a param does after
 * `opt.step()`.  Every param counts as changed: a view of one that gets
 * no update is made again with the same values. */
static void
params_updated(Fn *F)
{
	Graph *g = F->g;
	if (!g->opt.name)
		return;
	for (uint32_t k = 0; k < g->params.n; k++)
		F->gver[g->params.v[k]]++;
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
			if (ends_backward(n))
				params_updated(F);
			continue;
		}
		if (copies_itself(F, n)) {
			n->flags |= NF_DEAD; /* copy_(%x, %x) writes nothing (PyTorch's too) */
			continue;
		}
		if (snapshot(F, n)) {
			rename_uses(F, i);
			F->gver[n->opnd[0].v]++; /* its views are made again */
			continue;
		}
		if (is_write_back(F, n, i)) {
			ValId x = n->opnd[0].v;
			rename_uses(F, i);
			n->opnd[0].v = x;
			F->mlast[x] = NONE;
			F->cur[x] = x; /* its memory holds its value again */
			if (n->opnd[1].kind == OK_VAL && n->opnd[1].v == x)
				n->flags |= NF_DEAD; /* copy_(%x, %x.N) with %x.N %x itself */
			continue;
		}
		mutate(F, i);
	}
}

/* Whether the pass has nothing to do on g: no in-place op (so no write
 * to check for races, nothing to rewrite or write back), no optimizer and
 * no dead node (which the rebuild would drop). */
static int
nothing_to_do(const Graph *g)
{
	if (g->opt.name)
		return 0; /* the updates change the params' views (params_updated) */
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

/* The write-backs at the end of the graph, each before the write-back
 * into what its source reads: after copy_(%v5, %v2) (%v5 took %v2's value
 * and kept it), copy_(%v2, %v2.1) would change the %v2 that the first
 * reads.  A source reads the root of the memory it views.  Readers of one
 * value form a forest (a value's latest version can be another only while
 * that one is unchanged), so readers first, depth first, orders them all. */
static void
end_write_backs(Fn *F)
{
	Graph *g = F->g;
	uint32_t nv = F->nv;
	ValId *head = xmalloc((nv + 1) * sizeof *head);  /* first reader */
	ValId *next = xmalloc((nv + 1) * sizeof *next);  /* next reader of the same */
	uint8_t *state = calloc(nv + 1, 1);              /* 1 pending, 2 on the path, 3 done */
	if (!state)
		out_of_memory(0);
	for (ValId x = 0; x < nv; x++) {
		head[x] = NONE;
		state[x] = F->visible[x] && F->mlast[x] != NONE;
	}
	for (ValId x = 0; x < nv; x++) {
		if (state[x] != 1)
			continue;
		ValId src = F->mval[F->mlast[x]];
		ValId y = src < nv ? F->root[src] : NONE;
		if (y != NONE && y != x && state[y] == 1) {
			next[x] = head[y];
			head[y] = x;
		}
	}
	VEC(ValId) stack = {0};
	for (ValId x = 0; x < nv; x++) {
		if (state[x] != 1)
			continue;
		vec_push(&stack, x);
		while (stack.n) {
			ValId y = stack.v[stack.n - 1];
			if (state[y] == 1) { /* its readers first */
				state[y] = 2;
				for (ValId r = head[y]; r != NONE; r = next[r])
					if (state[r] == 1)
						vec_push(&stack, r);
				continue;
			}
			stack.n--;
			if (state[y] == 2) {
				state[y] = 3;
				write_back(F, y, F->mlast[y], g->nodes.n, g->retloc);
			}
		}
	}
	vec_free(&stack);
	free(head);
	free(next);
	free(state);
}

/* Each returned view whose memory changed after it was made: its view op
 * made again at the end, on the default stream, from the final version of
 * what it views, and that node's result takes the view's name (the old
 * one a fresh name), so that the graph returns it.  No copy_ into a view:
 * the printed IR then has no in-place op that compiling it again would
 * take for a write through the view. */
static void
return_views(Fn *F)
{
	Graph *g = F->g;
	uint32_t nn = g->nodes.n;
	for (uint32_t i = 0; i < g->rets.n; i++) {
		ValId x = g->rets.v[i];
		if (x >= F->nv || F->root[x] == x)
			continue; /* made here (a view returned twice), or a root */
		if (F->seen[x] == F->gver[F->root[x]] && F->cur[x] == x)
			continue; /* its memory unchanged since it was made */
		ValId p = version(F, F->vpar[x], nn, 0, g->retloc); /* may move g->vals */
		const Value *xv = &g->vals.v[x];
		Node n = view_again(F, &g->nodes.v[xv->def], xv->resno, p, 0, g->retloc);
		ValId f = finish(F, &n, g->vals.v[x].name);
		NodeIns at = {nn, 1, n};
		vec_push(&F->ins, at);
		const char *old = g->vals.v[x].name, *now = g->vals.v[f].name;
		g->vals.v[x].name = now;
		g->vals.v[f].name = old;
		map_put(&g->valmap, old, strlen(old), f);
		map_put(&g->valmap, now, strlen(now), x);
		for (uint32_t j = i; j < g->rets.n; j++)
			if (g->rets.v[j] == x)
				g->rets.v[j] = f;
	}
}

/* `del %h` drops the name %h, as Python's del does: while a view of %h's
 * memory is still written in place after it, the memory lives on, and the
 * new version of %h that the write makes (to give the other views) reads
 * it.  So such a del goes (the memory is released after its last use). */
static void
keep_deleted_roots(Fn *F)
{
	Graph *g = F->g;
	NodeId *lastvw = xmalloc((F->nv + 1) * sizeof *lastvw); /* per root */
	for (ValId v = 0; v < F->nv; v++)
		lastvw[v] = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (!(n->flags & NF_DEAD) && inplace(n) && n->opnd[0].kind == OK_VAL &&
		    F->root[n->opnd[0].v] != n->opnd[0].v)
			lastvw[F->root[n->opnd[0].v]] = i;
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->op != OP_DEL || (n->flags & NF_DEAD) || n->opnd[0].kind != OK_VAL)
			continue;
		ValId x = n->opnd[0].v;
		if (F->root[x] == x && lastvw[x] != NONE && lastvw[x] > i)
			n->flags |= NF_DEAD;
	}
	free(lastvw);
}

/* Pass `functionalize`: checks, rewrites, writes back at the end. */
int
functionalize_pass(Graph *g, const PassOptions *po, Diag *d)
{
	int bn = bn_updates(g, d);
	if (!bn && nothing_to_do(g)) /* no in-place op: the races as written */
		return races_check_writes(g, NULL, po, d) ? PASS_SAME : 0;
	uint32_t nv = g->vals.n;
	Fn F = {.g = g, .d = d, .backward = NONE};
	uint32_t nn = g->nodes.n;
	F.cur = xmalloc((nv + 1) * sizeof *F.cur);
	F.mlast = xmalloc((nv + 1) * sizeof *F.mlast);
	F.mprev = xmalloc((nn + 1) * sizeof *F.mprev);
	F.mval = xmalloc((nn + 1) * sizeof *F.mval);
	F.visible = calloc(nv + 1, 1);
	F.lastref = xmalloc((nv + 1) * sizeof *F.lastref);
	F.firstref = xmalloc((nv + 1) * sizeof *F.firstref);
	F.lastwrite = xmalloc((nv + 1) * sizeof *F.lastwrite);
	if (!F.visible)
		out_of_memory(0);
	for (ValId v = 0; v < nv; v++) {
		F.cur[v] = v;
		F.mlast[v] = NONE;
		F.lastref[v] = F.firstref[v] = F.lastwrite[v] = NONE;
		F.visible[v] = g->vals.v[v].kind != VK_NODE;
	}
	for (uint32_t i = 0; i < g->rets.n; i++)
		F.visible[g->rets.v[i]] = 1;
	find_views(&F);
	if (!races_check_writes(g, F.vpar, po, d))
		F.errors++;
	/* Per root: the last node naming it or a view of its memory. */
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_BACKWARD && F.backward == NONE)
			F.backward = i;
		if (g->opt.name && ends_backward(n)) /* the updates (params_updated) */
			for (uint32_t p = 0; p < g->params.n; p++)
				F.lastwrite[g->params.v[p]] = i;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL) {
				F.lastref[F.root[n->opnd[k].v]] = i;
				if (F.firstref[n->opnd[k].v] == NONE)
					F.firstref[n->opnd[k].v] = i;
				if (ir_access(n, k) == RACC_WRITE)
					F.lastwrite[F.root[n->opnd[k].v]] = i;
			}
	}
	keep_deleted_roots(&F);
	/* A copy_ into a visible value that nothing reads (nor a view of its
	 * memory) before the next full overwrite already is a write-back (as
	 * printed IR has it).  A returned view reads its memory at the end. */
	uint8_t *next = calloc(nv + 1, 1); /* per root: 1 overwrite, 2 other */
	F.wbok = calloc(g->nodes.n + 1, 1);
	if (!next || !F.wbok)
		out_of_memory(0);
	for (uint32_t i = 0; i < g->rets.n; i++) {
		ValId r = F.root[g->rets.v[i]];
		if (r != g->rets.v[i]) {
			F.lastref[r] = g->nodes.n;
			next[r] = 2;
		}
	}
	for (NodeId i = g->nodes.n; i-- > 0;) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		int full = n->op == OP_COPY_ || n->op == OP_ZERO_ || n->op == OP_FILL_;
		if (n->op == OP_COPY_ && n->nopnd && n->opnd[0].kind == OK_VAL &&
		    n->opnd[0].v < nv)
			F.wbok[i] = next[F.root[n->opnd[0].v]] != 2;
		/* operand 0 first: a node that also reads the memory it
		 * overwrites (copy_(%z, %v) with %v a view of %z) reads it */
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (n->opnd[k].kind != OK_VAL || n->opnd[k].v >= nv)
				continue;
			ValId v = n->opnd[k].v;
			next[F.root[v]] = full && k == 0 && F.root[v] == v ? 1 : 2;
		}
	}
	free(next);
	for (uint32_t e = 0; e < g->events.n; e++)
		F.any_extern |= g->events.v[e].is_extern;
	if (!F.errors) { /* (after a race, nothing to rewrite) */
		if (F.any_extern)
			hb_init(&F.hb, g);
		rewrite(&F);
		if (F.any_extern)
			hb_free(&F.hb);
		end_write_backs(&F);
	}
	if (!F.errors)
		return_views(&F);
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
	free(F.firstref);
	free(F.lastwrite);
	free(F.root);
	free(F.vpar);
	free(F.vst);
	free(F.gver);
	free(F.seen);
	free(F.vstream);
	vec_free(&F.chain);
	return F.errors == 0;
}
