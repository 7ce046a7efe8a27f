/*
 * autograd.c - the `autograd` pass: reverse-mode differentiation of
 * `backward(%loss)` into a derived block, and the builder that the
 * derivative rules (grad_rules.c) and the optimizer (optim.c) emit IR with.
 *
 * The pass, for a graph whose backward is not derived yet:
 *
 *   1. Versions.  Walking the forward part (the nodes before `backward`),
 *      every value version gets a slot: a declaration or a result is
 *      version 0, an in-place op (add_, mul_, an all_reduce without result,
 *      ...) ends the version of its first operand and starts a new one.
 *      A slot requires grad when it is a param, or a floating result of a
 *      differentiable op with an operand that requires grad.
 *   2. Needed.  Backwards from the loss: a slot is needed when it requires
 *      grad and feeds a node with a needed result.  Such a node is on the
 *      path from a param to the loss; it must have a derivative rule (the
 *      `grad` column of ops.def), or the statement is an error.
 *   3. Derivation.  The nodes on the path, in reverse program order, each
 *      run their rule on the gradients of their results; the rule's
 *      gradients for the operands are reduced to each operand's shape and
 *      dtype (broadcasting, promotion) and accumulated into the operand's
 *      slot with `add` (in the order backward produces them, on the stream
 *      rule 4 chooses: that of the version's maker, whose derivative reads
 *      the sum, unless default; else that of the first contribution made
 *      on another stream; else default).  Every derived node runs
 *      on the stream of the forward node it derives from.  When the last
 *      contribution to a param has arrived its gradient is final: with
 *      grad_sync it is averaged with all_reduce on a dedicated stream, and
 *      with a fused optimizer its update (optim.c) follows right there,
 *      then `del` of the gradient.
 *   4. Snapshots.  A rule that reads a version that a later in-place op
 *      overwrote gets a copy (`zeros` + `copy_`) made in forward right
 *      before that op.
 *   5. Clean-up.  Dead derived work is removed (and the values it made),
 *      a forward `del` of a value backward still reads moves to after its
 *      last use in backward, the derived values get their names
 *      (`grad.NAME` for param NAME, `grad.h`, `grad.h.1`... for the rest),
 *      and the node list is rebuilt: forward (with snapshots), the
 *      backward node, the derived block, `}` and the rest.
 *
 * Without an optimizer every param's gradient is appended to the graph's
 * outputs as `grad.NAME` (zeros when the loss does not depend on it).
 * Values that backward reads from forward are marked `saved` (also for a
 * backward block written out already).  See docs/autograd.md.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* One version of one value. */
typedef struct {
	ValId val;         /* the value */
	NodeId def;        /* node that makes this version; NONE: declared */
	NodeId end;        /* in-place node that ends this version; NONE: it
	                      is the version backward sees */
	uint8_t req;       /* depends on a param through differentiable ops */
	uint8_t needed;    /* the loss depends on it (and req) */
	uint8_t acc_fixed; /* acc_stream is chosen (rule 4) */
	uint32_t uses;     /* contributions still to come */
	uint32_t acc_stream; /* stream its contributions are summed on */
	uint32_t npend;    /* sums made on default before acc_stream was
	                      chosen: the last npend links of grad's chain */
	ValId grad;        /* the gradient so far; NONE */
	ValId snap;        /* a copy of this version for backward; NONE */
} Slot;

/* What the pass knows of each value it makes. */
enum { NV_TEMP, NV_GRAD, NV_SNAP };

typedef struct {
	ValId base;      /* forward value it belongs to (naming) */
	uint32_t stream; /* stream of its defining node */
	uint8_t kind;    /* NV_* */
	NodeId before;   /* NV_SNAP: the forward node it is copied before */
	uint32_t at;     /* others: index in Grad.out of the node making it */
} NewVal;

struct Grad {
	Graph *g;
	Diag *d;
	Arena *a;
	NodeId bw;            /* the backward node */
	uint32_t bwstream;
	VEC(Slot) slots;
	uint32_t *cur;        /* per forward value: its current slot */
	uint32_t **in, **res; /* per forward node: slot of each operand, result */
	uint8_t *onpath;      /* per forward node */
	ValId first_new;      /* values from here on are the pass's */
	VEC(NewVal) nv;
	VEC(Node) out;        /* the derived nodes, in order */
	ValId *pgrad;         /* per param (index into g->params): final grad */
	uint8_t *final;       /* per param: finalize ran */
	uint8_t *named;       /* per param: %grad.NAME read after the backward
	                         (its memory is not freed after the update) */
	uint32_t *pindex;     /* per forward value: its index in g->params, or NONE */
	uint32_t comm;        /* grad_sync's stream; 0 when none */
	/* the rule running */
	NodeId node;
	uint32_t stream;
	Loc loc;
	ValId base;
	/* shape rules report into this; a failure is an internal fault */
	Diag scratch;
	char *scratch_text;
	size_t scratch_len;
};

/* ------------------------------------------------------------------ builder
 * The functions of the builder that rules use are described in sgc.h. */

Opnd
grad_v(ValId v)
{
	Opnd o = {.kind = OK_VAL, .v = v};
	return o;
}

Opnd
grad_lf(double f)
{
	Opnd o = {.kind = OK_FLOAT, .f = f};
	return o;
}

Opnd
grad_li(int64_t i)
{
	Opnd o = {.kind = OK_INT, .i = i, .f = (double)i};
	return o;
}

Graph *
grad_graph(Grad *G)
{
	return G->g;
}

const Type *
grad_type(Grad *G, ValId v)
{
	return &G->g->vals.v[v].type;
}

Node *
grad_node(Grad *G, int op, const Opnd *ops, int nops)
{
	Node *n = arena_alloc(G->a, sizeof *n);
	n->op = (uint16_t)op;
	n->stream = G->stream;
	n->loc = G->loc;
	n->flags = NF_BACKWARD;
	n->nopnd = (uint16_t)nops;
	n->opnd = arena_alloc(G->a, ((size_t)nops + 1) * sizeof *n->opnd);
	for (int i = 0; i < nops; i++)
		n->opnd[i] = ops[i];
	if (op < OP__N) {
		const OpInfo *oi = &op_table[op];
		n->nattr = (uint16_t)oi->nattr;
		n->attr = arena_alloc(G->a, ((size_t)oi->nattr + 1) * sizeof *n->attr);
		for (uint32_t i = 0; i < oi->nattr; i++)
			attr_default(G->a, &oi->attr[i], &n->attr[i]);
	}
	return n;
}

void
grad_set(Node *n, const char *name, int64_t i)
{
	ir_attr_set(n, name)->i = i;
}

void
grad_setf(Node *n, const char *name, double f)
{
	Attr *a = ir_attr_set(n, name);
	a->f = f;
	a->num_kind = OK_FLOAT;
}

void
grad_sets(Node *n, const char *name, const char *s)
{
	ir_attr_set(n, name)->s = s;
}

void
grad_setints(Grad *G, Node *n, const char *name, const int64_t *v, int nv)
{
	Attr *a = ir_attr_set(n, name);
	a->ints = arena_alloc(G->a, ((size_t)nv + 1) * sizeof *a->ints);
	for (int i = 0; i < nv; i++)
		a->ints[i] = v[i];
	a->nints = (uint32_t)nv;
}

void
grad_copyattr(Node *n, const char *name, const Attr *src)
{
	Attr *a = ir_attr_set(n, name);
	uint8_t type = a->type;
	*a = *src;
	a->type = type;
}

/* A value the pass makes (named at the end). */
static ValId
new_value(Grad *G, uint8_t kind, uint32_t stream)
{
	ValId v = ir_value_new(G->g, NULL, VK_NODE, G->loc);
	NewVal nv = {.base = G->base, .stream = stream, .kind = kind,
	             .before = NONE};
	if (v - G->first_new != G->nv.n)
		ICE("autograd: values made behind its back");
	vec_push(&G->nv, nv);
	return v;
}

/* What the pass knows of v, or NULL for a value it did not make. */
static NewVal *
newval(Grad *G, ValId v)
{
	return v >= G->first_new ? &G->nv.v[v - G->first_new] : NULL;
}

/* Runs n's shape rule into the scratch diagnostics; a derived node that
 * fails it is the compiler's fault. */
static void
check_shape(Grad *G, Node *n)
{
	if (n->op >= OP__N)
		return;
	for (uint32_t i = 0; i < n->nattr; i++)
		if (!n->attr[i].set && op_table[n->op].attr[i].required)
			ICE("autograd: %s made without attribute '%s'", op_name(n->op),
			    op_table[n->op].attr[i].name);
	if (op_table[n->op].shape(G->g, n, &G->scratch))
		return;
	fflush(G->scratch.out);
	ICE("autograd: a derived '%s' fails its shape rule: %.*s", op_name(n->op),
	    (int)G->scratch_len, G->scratch_text ? G->scratch_text : "");
}

/* Gives n nres new results, types them by its shape rule, emits it. */
ValId
grad_end(Grad *G, Node *n, uint32_t nres)
{
	n->nres = (uint16_t)nres;
	n->res = arena_alloc(G->a, ((size_t)nres + 1) * sizeof *n->res);
	for (uint32_t i = 0; i < nres; i++) {
		n->res[i] = new_value(G, NV_TEMP, n->stream);
		newval(G, n->res[i])->at = G->out.n;
	}
	check_shape(G, n);
	vec_push(&G->out, *n);
	return nres ? n->res[0] : NONE;
}

ValId
grad_op1(Grad *G, int op, Opnd a)
{
	return grad_end(G, grad_node(G, op, &a, 1), 1);
}

ValId
grad_op2(Grad *G, int op, Opnd a, Opnd b)
{
	Opnd o[2] = {a, b};
	return grad_end(G, grad_node(G, op, o, 2), 1);
}

ValId
grad_op3(Grad *G, int op, Opnd a, Opnd b, Opnd c)
{
	Opnd o[3] = {a, b, c};
	return grad_end(G, grad_node(G, op, o, 3), 1);
}

/* Dims of a bit mask as a list. */
static int
mask_dims(uint32_t mask, int rank, int64_t *dims)
{
	int n = 0;
	for (int i = 0; i < rank; i++)
		if (mask >> i & 1)
			dims[n++] = i;
	return n;
}

ValId
grad_sum(Grad *G, ValId x, uint32_t mask, int keepdim)
{
	int64_t dims[SG_MAXRANK];
	int nd = mask_dims(mask, grad_type(G, x)->rank, dims);
	Opnd o = grad_v(x);
	Node *n = grad_node(G, OP_SUM, &o, 1);
	grad_setints(G, n, "dims", dims, nd);
	grad_set(n, "keepdim", keepdim);
	return grad_end(G, n, 1);
}

ValId
grad_reshape(Grad *G, ValId x, const int64_t *shape, int rank)
{
	const Type *t = grad_type(G, x);
	if (t->rank == rank && memcmp(t->d, shape, (size_t)rank * sizeof *shape) == 0)
		return x;
	Opnd o = grad_v(x);
	Node *n = grad_node(G, OP_RESHAPE, &o, 1);
	grad_setints(G, n, "shape", shape, rank);
	return grad_end(G, n, 1);
}

ValId
grad_expand(Grad *G, ValId x, const Type *to_)
{
	Type tov = *to_;
	const Type *to = &tov;
	if (type_same_shape(grad_type(G, x), to))
		return x;
	Opnd o = grad_v(x);
	Node *n = grad_node(G, OP_EXPAND, &o, 1);
	grad_setints(G, n, "shape", to->d, to->rank);
	return grad_end(G, n, 1);
}

ValId
grad_transpose(Grad *G, ValId x, int d0, int d1)
{
	Opnd o = grad_v(x);
	Node *n = grad_node(G, OP_TRANSPOSE, &o, 1);
	grad_set(n, "dim0", d0);
	grad_set(n, "dim1", d1);
	return grad_end(G, n, 1);
}

ValId
grad_zeros(Grad *G, const Type *t_)
{
	Type tv = *t_;
	const Type *t = &tv;
	Node *n = grad_node(G, OP_ZEROS, NULL, 0);
	grad_setints(G, n, "shape", t->d, t->rank);
	grad_set(n, "dtype", t->dt);
	return grad_end(G, n, 1);
}

ValId
grad_cast(Grad *G, ValId x, DType dt)
{
	if (grad_type(G, x)->dt == dt)
		return x;
	Opnd o = grad_v(x);
	Node *n = grad_node(G, OP_CAST, &o, 1);
	grad_set(n, "dtype", dt);
	return grad_end(G, n, 1);
}

/* Sums x over the dims it was broadcast along to reach its shape from
 * `to`'s (leading dims, then dims of size 1), then casts it to to's
 * dtype: PyTorch's sum_to_size and the cast to the input's dtype. */
ValId
grad_fit(Grad *G, ValId x, const Type *to_)
{
	Type tov = *to_; /* to_ may point into the value array, which moves */
	const Type *to = &tov;
	const Type *t = grad_type(G, x);
	if (t->rank < to->rank)
		ICE("autograd: gradient of rank %d for a value of rank %d", t->rank,
		    to->rank);
	int lead = t->rank - to->rank;
	if (lead)
		x = grad_sum(G, x, (1u << lead) - 1, 0);
	t = grad_type(G, x);
	uint32_t mask = 0;
	for (int i = 0; i < to->rank; i++)
		if (to->d[i] == 1 && t->d[i] != 1)
			mask |= 1u << i;
	if (mask)
		x = grad_sum(G, x, mask, 1);
	if (!type_same_shape(grad_type(G, x), to))
		ICE("autograd: gradient does not reduce to its value's shape");
	if (to->dt != grad_type(G, x)->dt && dtype_is_float((DType)to->dt))
		x = grad_cast(G, x, (DType)to->dt);
	return x;
}

void
grad_target(Grad *G, const Node *n, int k)
{
	if (k < n->nopnd && n->opnd[k].kind == OK_VAL)
		G->base = n->opnd[k].v;
}

int
grad_error(Grad *G, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (!diag_full(G->d))
		diag_vreport(G->d, "error", G->loc, fmt, ap);
	G->d->nerrors++;
	va_end(ap);
	return 0;
}

/* The value backward reads for slot s: the value itself, or a snapshot
 * when an in-place op overwrote this version before backward. */
static ValId
version_value(Grad *G, uint32_t s)
{
	Slot *sl = &G->slots.v[s];
	if (sl->end == NONE)
		return sl->val;
	if (sl->snap == NONE) {
		ValId save = G->base;
		G->base = sl->val;
		ValId v = new_value(G, NV_SNAP, G->g->nodes.v[sl->end].stream);
		G->base = save;
		G->g->vals.v[v].type = G->g->vals.v[sl->val].type;
		newval(G, v)->before = sl->end;
		G->slots.v[s].snap = v;
	}
	return G->slots.v[s].snap;
}

ValId
grad_in(Grad *G, int k)
{
	uint32_t s = G->in[G->node][k];
	if (s == NONE)
		ICE("autograd: operand %d is not a value", k);
	return version_value(G, s);
}

ValId
grad_out(Grad *G, int j)
{
	return version_value(G, G->res[G->node][j]);
}

Opnd
grad_arg(Grad *G, const Node *n, int k)
{
	Opnd o = n->opnd[k];
	memset(&o.loc, 0, sizeof o.loc);
	if (o.kind == OK_VAL)
		o.v = grad_in(G, k);
	return o;
}

/* ------------------------------------------------------------------ forward analysis */

/* In-place ops, and collectives without a result, change operand 0. */
static int
is_mutation(const Node *n)
{
	if (n->op >= OP__N)
		return 0;
	uint32_t f = op_table[n->op].flags;
	return (f & OPF_INPLACE) || ((f & OPF_COLLECTIVE) && n->nres == 0);
}

/* A new version of v, made by node def, now v's current one. */
static uint32_t
new_slot(Grad *G, ValId v, NodeId def)
{
	Slot s = {.val = v, .def = def, .end = NONE, .grad = NONE, .snap = NONE};
	vec_push(&G->slots, s);
	G->cur[v] = G->slots.n - 1;
	return G->slots.n - 1;
}

/* Whether a node's floating results depend on its operands for autograd. */
static int
propagates(const Node *n)
{
	return n->op < OP__N && !(op_table[n->op].flags & OPF_NOGRAD) && !(n->flags & NF_NOGRAD);
}

/* Slots of every forward node's operands and results, and which require
 * grad.  An in-place op on a param is an error, as in PyTorch. */
static int
find_versions(Grad *G)
{
	Graph *g = G->g;
	for (ValId v = 0; v < g->vals.n; v++)
		if (g->vals.v[v].kind != VK_NODE) {
			uint32_t s = new_slot(G, v, NONE);
			G->slots.v[s].req = g->vals.v[v].kind == VK_PARAM;
		}
	int ok = 1;
	for (NodeId i = 0; i < G->bw; i++) {
		Node *n = &g->nodes.v[i];
		if ((n->flags & NF_DEAD) || n->op >= OP__N)
			continue;
		G->in[i] = arena_alloc(G->a, ((size_t)n->nopnd + 1) * sizeof **G->in);
		int anyreq = 0;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			G->in[i][k] = n->opnd[k].kind == OK_VAL ? G->cur[n->opnd[k].v] : NONE;
			if (G->in[i][k] != NONE)
				anyreq |= G->slots.v[G->in[i][k]].req;
		}
		anyreq &= propagates(n);
		if (is_mutation(n)) {
			ValId v = n->opnd[0].v;
			if (g->vals.v[v].kind == VK_PARAM) {
				diag_error(G->d, n->loc, "param '%%%s' is modified in place "
				           "by '%s' before 'backward'; a param that requires "
				           "grad cannot be changed before its gradient is "
				           "taken", g->vals.v[v].name, op_name(n->op));
				ok = 0;
			}
			G->slots.v[G->in[i][0]].end = i;
			G->res[i] = arena_alloc(G->a, 2 * sizeof **G->res);
			G->res[i][0] = new_slot(G, v, i);
			G->slots.v[G->res[i][0]].req =
			    anyreq && dtype_is_float((DType)g->vals.v[v].type.dt);
			continue;
		}
		G->res[i] = arena_alloc(G->a, ((size_t)n->nres + 1) * sizeof **G->res);
		for (uint32_t j = 0; j < n->nres; j++) {
			ValId r = n->res[j];
			G->res[i][j] = new_slot(G, r, i);
			G->slots.v[G->res[i][j]].req =
			    anyreq && dtype_is_float((DType)g->vals.v[r].type.dt);
		}
	}
	return ok;
}

/* The versions a node makes: its results, or its operand's new one. */
static uint32_t
nresults(const Grad *G, const Node *n)
{
	(void)G;
	return is_mutation(n) ? 1 : n->nres;
}

/* Needed slots, backwards from the loss; the nodes on the path; each
 * slot's contribution count, and its accumulation stream when rule 4's
 * first branch chooses it: the stream of the node that makes the version
 * (its derivative reads the sum) when that is not default.  A node on the
 * path without a derivative is an error at its statement. */
static int
find_path(Grad *G, uint32_t loss)
{
	Graph *g = G->g;
	int ok = 1;
	G->slots.v[loss].needed = G->slots.v[loss].req;
	for (NodeId i = G->bw; i-- > 0;) {
		Node *n = &g->nodes.v[i];
		if (!G->res[i])
			continue;
		int need = 0;
		for (uint32_t j = 0; j < nresults(G, n); j++)
			need |= G->slots.v[G->res[i][j]].needed;
		if (!need)
			continue;
		G->onpath[i] = 1;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (G->in[i][k] != NONE && G->slots.v[G->in[i][k]].req)
				G->slots.v[G->in[i][k]].needed = 1;
		if (!op_table[n->op].grad) {
			diag_error(G->d, n->loc, "'%s' has no derivative, but the loss "
			           "'%%%s' depends on a param through it",
			           op_name(n->op), g->vals.v[G->slots.v[loss].val].name);
			ok = 0;
		}
	}
	for (NodeId i = 0; i < G->bw; i++) {
		if (!G->onpath[i])
			continue;
		Node *n = &g->nodes.v[i];
		for (uint32_t k = 0; k < n->nopnd; k++) {
			uint32_t s = G->in[i][k];
			if (s == NONE || !G->slots.v[s].needed)
				continue;
			G->slots.v[s].uses++;
		}
		/* rule 4: the accumulations of the versions i makes are read
		 * by i's derivative, their first (and only) user */
		if (n->stream == 0)
			continue;
		for (uint32_t j = 0; j < nresults(G, n); j++) {
			Slot *sl = &G->slots.v[G->res[i][j]];
			sl->acc_stream = n->stream;
			sl->acc_fixed = 1;
		}
	}
	return ok;
}

/* ------------------------------------------------------------------ derivation */

/* The stream a derived value was made on (the backward's for others). */
static uint32_t
stream_of(Grad *G, ValId v)
{
	NewVal *nv = newval(G, v);
	return nv ? nv->stream : G->bwstream;
}

/* Rule 4's second branch: the first contribution made on a stream other
 * than default chooses the accumulation stream; the sums made before it
 * (on default, the last npend links of the chain ending in the slot's
 * gradient, each reading the one before as operand 0) move to it. */
static void
choose_acc_stream(Grad *G, Slot *sl, uint32_t stream)
{
	sl->acc_stream = stream;
	sl->acc_fixed = 1;
	ValId v = sl->grad;
	for (; sl->npend > 0; sl->npend--) {
		NewVal *nv = newval(G, v);
		Node *n = &G->out.v[nv->at];
		nv->stream = stream;
		n->stream = stream;
		v = n->opnd[0].v;
	}
}

/* The layer or RMS norm backward whose dx v is, or NULL. */
static Node *
norm_dx(Grad *G, ValId v)
{
	NewVal *nv = newval(G, v);
	if (!nv)
		return NULL;
	Node *n = &G->out.v[nv->at];
	return (n->op == OP_LAYER_NORM_BACKWARD || n->op == OP_RMS_NORM_BACKWARD) &&
	       n->res[0] == v ? n : NULL;
}

/* Whether contribution v, dx of a norm backward just made, takes the
 * slot's gradient so far as its residual operand (residual=true: the
 * backward adds it to dx in its own kernel, as a pre-norm block's
 * residual stream needs) instead of an add after it.  Only in a graph with
 * the default stream alone: choose_acc_stream moves chains of adds.  Only
 * for a v that the rule just made for this one operand (own): a gradient
 * passed through (add's, sub's) is also another value's gradient, or
 * another operand's, which the residual would change. */
static int
fuse_residual(Grad *G, const Slot *sl, ValId v, int own)
{
	Node *n = own && G->g->streams.n == 1 ? norm_dx(G, v) : NULL;
	if (!n || ir_norm_bwd_residual(n) >= 0)
		return 0;
	Opnd *o = arena_alloc(G->a, ((size_t)n->nopnd + 2) * sizeof *o);
	memcpy(o, n->opnd, n->nopnd * sizeof *o);
	o[n->nopnd++] = grad_v(sl->grad);
	n->opnd = o;
	grad_set(n, "residual", 1);
	check_shape(G, n);
	return 1;
}

/* Adds contribution v to slot s, in the order backward makes them: the
 * first is taken as it is, later ones are summed on the slot's
 * accumulation stream (rule 4; default while none is chosen), by the
 * norm backward that made v when fuse_residual lets it (own: see there). */
static void
contribute(Grad *G, uint32_t s, ValId v, int own)
{
	Slot *sl = &G->slots.v[s];
	const Type *want = &G->g->vals.v[sl->val].type, *got = grad_type(G, v);
	if (!type_same_shape(want, got) || want->dt != got->dt)
		ICE("autograd: gradient of '%%%s' has the wrong type",
		    G->g->vals.v[sl->val].name);
	NewVal *nv = newval(G, v);
	if (nv && nv->kind == NV_TEMP) {
		nv->kind = NV_GRAD;
		nv->base = sl->val;
	}
	if (!sl->acc_fixed && stream_of(G, v) != 0)
		choose_acc_stream(G, sl, stream_of(G, v));
	if (sl->grad == NONE || fuse_residual(G, sl, v, own)) {
		sl->grad = v;
		return;
	}
	uint32_t save = G->stream;
	G->stream = sl->acc_stream;
	G->base = sl->val;
	ValId sum = grad_op2(G, OP_ADD, grad_v(sl->grad), grad_v(v));
	G->stream = save;
	newval(G, sum)->kind = NV_GRAD;
	sl = &G->slots.v[s];
	sl->grad = sum;
	sl->npend += !sl->acc_fixed;
}

/* Whether v is still to be read by backward after param number p's
 * gradient became final while node i was derived: a slot whose node is
 * still to be derived holds it, or a param whose gradient is not final
 * yet, or another param has it as its gradient. */
static int
held_elsewhere(Grad *G, ValId v, uint32_t p, NodeId i)
{
	Graph *g = G->g;
	for (uint32_t s = 0; s < G->slots.n; s++) {
		Slot *sl = &G->slots.v[s];
		if (sl->grad != v)
			continue;
		if (sl->def != NONE && sl->def < i && G->onpath[sl->def])
			return 1;
		if (sl->def == NONE && sl->uses > 0)
			return 1;
	}
	for (uint32_t q = 0; q < g->params.n; q++)
		if (q != p && G->pgrad[q] == v)
			return 1;
	return 0;
}

/* `del %v` on stream, in the derived block. */
static void
emit_del(Grad *G, ValId v, uint32_t stream)
{
	Node *n = grad_node(G, OP_DEL, NULL, 0);
	Opnd o = grad_v(v);
	n->nopnd = 1;
	n->opnd[0] = o;
	n->stream = stream;
	vec_push(&G->out, *n);
}

/* Param number p's gradient is final (while node i is derived): averaged
 * across ranks with grad_sync, and updated right here by a fused
 * optimizer, which then frees it. */
static void
finalize(Grad *G, uint32_t p, NodeId i)
{
	Graph *g = G->g;
	ValId pv = g->params.v[p];
	/* a param has one version: in-place ops on it are errors */
	ValId v = G->slots.v[G->cur[pv]].grad;
	if (v == NONE || G->final[p])
		return;
	G->final[p] = 1;
	G->base = pv;
	uint32_t raw_stream = stream_of(G, v);
	if (G->comm) {
		G->stream = G->comm;
		Opnd o = grad_v(v);
		Node *n = grad_node(G, OP_ALL_REDUCE, &o, 1);
		grad_sets(n, "op", "avg");
		v = grad_end(G, n, 1);
	} else if (!g->opt.name) {
		for (uint32_t q = 0; q < g->params.n; q++)
			if (G->pgrad[q] == v) {
				G->stream = raw_stream;
				v = grad_op1(G, OP_CONTIGUOUS, grad_v(v));
				break;
			}
	}
	G->pgrad[p] = v;
	if (g->opt.name && g->opt.fused) {
		optim_update(G, pv, v, raw_stream);
		if (!held_elsewhere(G, v, p, i) && !G->named[p])
			emit_del(G, v, raw_stream);
	}
}

/* Runs the rule of forward node i. */
static int
derive_node(Grad *G, NodeId i)
{
	Graph *g = G->g;
	Node *n = &g->nodes.v[i];
	uint32_t nr = nresults(G, n);
	ValId gout[nr + 1], gin[n->nopnd + 1];
	uint8_t need[n->nopnd + 1];
	int any = 0;
	for (uint32_t j = 0; j < nr; j++) {
		gout[j] = G->slots.v[G->res[i][j]].grad;
		any |= gout[j] != NONE;
	}
	G->node = i;
	G->stream = n->stream;
	G->loc = n->loc;
	G->base = NONE;
	for (uint32_t k = 0; k < n->nopnd; k++) {
		uint32_t s = G->in[i][k];
		need[k] = s != NONE && G->slots.v[s].needed;
		gin[k] = NONE;
		if (need[k] && G->base == NONE)
			G->base = n->opnd[k].v;
	}
	if (any && !op_table[n->op].grad(G, n, gout, gin, need))
		return 0;
	for (uint32_t k = 0; k < n->nopnd; k++) {
		if (!need[k] || gin[k] == NONE)
			continue;
		G->base = n->opnd[k].v;
		G->stream = n->stream;
		int own = norm_dx(G, gin[k]) != NULL;
		for (uint32_t j = 0; own && j < nr; j++)
			own = gin[k] != gout[j];
		for (uint32_t j = 0; own && j < n->nopnd; j++)
			own = j == k || gin[j] != gin[k];
		contribute(G, G->in[i][k],
		           grad_fit(G, gin[k], &g->vals.v[n->opnd[k].v].type), own);
	}
	/* only once every operand has its share: finalize may free one */
	for (uint32_t k = 0; k < n->nopnd; k++) {
		if (!need[k])
			continue;
		Slot *sl = &G->slots.v[G->in[i][k]];
		if (--sl->uses == 0 && G->pindex[sl->val] != NONE)
			finalize(G, G->pindex[sl->val], i);
	}
	return 1;
}

/* The seed, the rules in reverse program order, then what params need at
 * the end: zeros for the ones the loss does not depend on (no optimizer),
 * the unfused updates. */
static int
derive(Grad *G, uint32_t loss)
{
	Graph *g = G->g;
	G->stream = G->bwstream;
	G->loc = g->nodes.v[G->bw].loc;
	if (G->slots.v[loss].needed) {
		const Type *t = &g->vals.v[G->slots.v[loss].val].type;
		G->base = G->slots.v[loss].val;
		Node *n = grad_node(G, OP_ONES, NULL, 0);
		grad_setints(G, n, "shape", t->d, t->rank);
		grad_set(n, "dtype", t->dt);
		contribute(G, loss, grad_end(G, n, 1), 0);
	}
	for (NodeId i = G->bw; i-- > 0;)
		if (G->onpath[i] && !derive_node(G, i))
			return 0;
	/* a param that is the loss itself has no use to finalize it */
	for (uint32_t p = 0; p < g->params.n; p++)
		finalize(G, p, 0);
	G->stream = G->bwstream;
	G->loc = g->nodes.v[G->bw].loc;
	for (uint32_t p = 0; p < g->params.n; p++) {
		ValId pv = g->params.v[p];
		if (G->pgrad[p] != NONE || g->opt.name)
			continue;
		G->base = pv;
		G->pgrad[p] = grad_zeros(G, &g->vals.v[pv].type);
	}
	if (g->opt.name && !g->opt.fused)
		for (uint32_t p = 0; p < g->params.n; p++)
			if (G->pgrad[p] != NONE)
				optim_update(G, g->params.v[p], G->pgrad[p], G->bwstream);
	if (!g->opt.name)
		for (uint32_t p = 0; p < g->params.n; p++)
			vec_push(&g->rets, G->pgrad[p]);
	return 1;
}

/* ------------------------------------------------------------------ clean-up */

/* Derived nodes kept whether or not their results are read. */
static int
has_effect(const Node *n)
{
	return n->op == OP_DEL || (n->op < OP__N &&
	       (op_table[n->op].flags & OPF_INPLACE));
}

/* Drops derived nodes nothing live reads; used[] then marks every value a
 * live derived node or the outputs read.  A del lives when its value
 * does. */
static void
remove_dead(Grad *G, uint8_t *used, uint8_t *live)
{
	Graph *g = G->g;
	for (uint32_t i = 0; i < g->rets.n; i++)
		used[g->rets.v[i]] = 1;
	for (uint32_t i = G->out.n; i-- > 0;) {
		Node *n = &G->out.v[i];
		if (n->op == OP_DEL)
			continue;
		int l = has_effect(n);
		for (uint32_t j = 0; j < n->nres && !l; j++)
			l = used[n->res[j]];
		live[i] = (uint8_t)l;
		if (!l)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL)
				used[n->opnd[k].v] = 1;
	}
	for (uint32_t i = 0; i < G->out.n; i++)
		if (G->out.v[i].op == OP_DEL)
			live[i] = used[G->out.v[i].opnd[0].v];
}

/* Renumbers the pass's values to drop the dead ones; map[old] = new. */
static void
compact(Grad *G, const uint8_t *used, const uint8_t *live)
{
	Graph *g = G->g;
	uint32_t nnew = g->vals.n - G->first_new;
	ValId *map = xmalloc(((size_t)nnew + 1) * sizeof *map);
	uint8_t *made = calloc((size_t)nnew + 1, 1);
	if (!made)
		out_of_memory(0);
	for (uint32_t j = 0; j < G->out.n; j++)
		if (live[j])
			for (uint32_t r = 0; r < G->out.v[j].nres; r++)
				made[G->out.v[j].res[r] - G->first_new] = 1;
	ValId next = G->first_new;
	for (uint32_t i = 0; i < nnew; i++) {
		ValId v = G->first_new + i;
		int keep = used[v] || made[i];
		map[i] = keep ? next : NONE;
		if (keep) {
			g->vals.v[next] = g->vals.v[v];
			G->nv.v[next - G->first_new] = G->nv.v[i];
			next++;
		}
	}
#define REMAP(x) ((x) >= G->first_new ? map[(x) - G->first_new] : (x))
	for (uint32_t j = 0; j < G->out.n; j++) {
		Node *n = &G->out.v[j];
		if (!live[j])
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL)
				n->opnd[k].v = REMAP(n->opnd[k].v);
		for (uint32_t r = 0; r < n->nres; r++)
			n->res[r] = REMAP(n->res[r]);
	}
	for (uint32_t i = 0; i < g->rets.n; i++)
		g->rets.v[i] = REMAP(g->rets.v[i]);
	for (uint32_t p = 0; p < g->params.n; p++)
		if (G->pgrad[p] != NONE)
			G->pgrad[p] = REMAP(G->pgrad[p]);
	for (uint32_t s = 0; s < G->slots.n; s++) {
		Slot *sl = &G->slots.v[s];
		sl->grad = sl->grad == NONE ? NONE : REMAP(sl->grad);
		sl->snap = sl->snap == NONE ? NONE : REMAP(sl->snap);
	}
#undef REMAP
	g->vals.n = next;
	G->nv.n = next - G->first_new;
	free(map);
	free(made);
}

/* base, base.1, base.2...: the first name nobody has. */
static void
give_name(Graph *g, ValId v, const char *base)
{
	const char *name = ir_name_fresh(g, base);
	g->vals.v[v].name = name;
	map_put(&g->valmap, name, strlen(name), v);
}

/* grad.NAME for each param's gradient, then grad.X for the gradient of
 * each forward value X, then the temporaries, then snapshots (X.saved). */
static void
name_values(Grad *G)
{
	Graph *g = G->g;
	Arena *a = g->mod->arena;
	for (uint32_t p = 0; p < g->params.n; p++) {
		ValId v = G->pgrad[p];
		if (v == NONE || g->vals.v[v].name)
			continue;
		give_name(g, v, arena_cat(a, "grad.", g->vals.v[g->params.v[p]].name));
	}
	for (int pass = 0; pass < 3; pass++)
		for (ValId v = G->first_new; v < g->vals.n; v++) {
			NewVal *nv = newval(G, v);
			if (g->vals.v[v].name)
				continue;
			int want = pass == 0 ? nv->kind == NV_GRAD
			           : pass == 1 ? nv->kind == NV_TEMP : nv->kind == NV_SNAP;
			if (!want)
				continue;
			const char *base = nv->base != NONE ? g->vals.v[nv->base].name : "x";
			give_name(g, v, nv->kind == NV_SNAP ? arena_cat(a, base, ".saved")
			          : arena_cat(a, "grad.", base));
		}
}

/* A node added to the graph being rebuilt.  Its arrays are in the arena
 * and belong to it alone (the old list and the derived nodes are dropped
 * once rebuilt, each node put once), so they are taken, not copied. */
static void
put(Graph *g, const Node *n)
{
	NodeId id = g->nodes.n;
	for (uint32_t i = 0; i < n->nres; i++) {
		g->vals.v[n->res[i]].def = id;
		g->vals.v[n->res[i]].resno = (uint16_t)i;
	}
	vec_push(&g->nodes, *n);
}

/* The copy of snapshot v before forward node n (the in-place op that
 * overwrites its version), on n's stream. */
static void
put_snapshot(Grad *G, ValId v, const Node *n)
{
	Graph *g = G->g;
	ValId src = NONE;
	for (uint32_t s = 0; s < G->slots.n; s++)
		if (G->slots.v[s].snap == v)
			src = G->slots.v[s].val;
	const Type *t = &g->vals.v[v].type;
	G->stream = n->stream;
	G->loc = n->loc;
	Node *z = grad_node(G, OP_ZEROS, NULL, 0);
	z->flags = 0;
	grad_setints(G, z, "shape", t->d, t->rank);
	grad_set(z, "dtype", t->dt);
	z->nres = 1;
	z->res = arena_alloc(G->a, sizeof *z->res);
	z->res[0] = v;
	put(g, z);
	Opnd o[2] = {grad_v(v), grad_v(src)};
	Node *c = grad_node(G, OP_COPY_, o, 2);
	c->flags = 0;
	put(g, c);
}

/* The new node list: forward with snapshots, backward (now derived), the
 * live derived nodes with moved dels, the block's end, the rest. */
static void
rebuild(Grad *G, const uint8_t *live)
{
	Graph *g = G->g;
	VEC(Node) old = {g->nodes.v, g->nodes.n, g->nodes.cap};
	g->nodes.v = NULL;
	g->nodes.n = g->nodes.cap = 0;
	/* forward dels of values backward reads move after their last use */
	NodeId *lastuse = xmalloc(((size_t)g->vals.n + 1) * sizeof *lastuse);
	for (ValId v = 0; v < g->vals.n; v++)
		lastuse[v] = NONE;
	for (uint32_t j = 0; j < G->out.n; j++)
		if (live[j])
			for (uint32_t k = 0; k < G->out.v[j].nopnd; k++)
				if (G->out.v[j].opnd[k].kind == OK_VAL)
					lastuse[G->out.v[j].opnd[k].v] = j;
	VEC(Node) moved[1] = {{0}};
	/* the snapshots to copy before each forward node, in value order */
	ValId *snap_at = xmalloc(((size_t)G->bw + 1) * sizeof *snap_at);
	ValId *snap_next = xmalloc(((size_t)g->vals.n + 1) * sizeof *snap_next);
	for (NodeId i = 0; i < G->bw; i++)
		snap_at[i] = NONE;
	for (ValId v = g->vals.n; v-- > G->first_new;) {
		NewVal *nv = newval(G, v);
		if (nv->kind == NV_SNAP && nv->before < G->bw) {
			snap_next[v] = snap_at[nv->before];
			snap_at[nv->before] = v;
		}
	}
	vec_grow_((void **)&g->nodes.v, &g->nodes.cap, old.n + G->out.n + 1,
	          sizeof *g->nodes.v);
	for (NodeId i = 0; i < G->bw; i++) {
		Node *n = &old.v[i];
		for (ValId v = snap_at[i]; v != NONE; v = snap_next[v])
			put_snapshot(G, v, n);
		if (n->op == OP_DEL && !(n->flags & NF_DEAD) &&
		    lastuse[n->opnd[0].v] != NONE) {
			vec_push(moved, *n);
			continue;
		}
		put(g, n);
	}
	Node b = old.v[G->bw];
	b.flags |= NF_BACKWARD;
	put(g, &b);
	for (uint32_t j = 0; j < G->out.n; j++) {
		if (!live[j])
			continue;
		put(g, &G->out.v[j]);
		for (uint32_t m = 0; m < moved->n; m++)
			if (lastuse[moved->v[m].opnd[0].v] == j) {
				Node d = moved->v[m];
				d.flags |= NF_BACKWARD;
				put(g, &d);
			}
	}
	Node end = {.op = OP_BACKWARD_END, .flags = NF_BACKWARD,
	            .stream = old.v[G->bw].stream, .loc = old.v[G->bw].loc};
	put(g, &end);
	for (NodeId i = G->bw + 1; i < old.n; i++)
		put(g, &old.v[i]);
	vec_free(moved);
	free(snap_at);
	free(snap_next);
	free(lastuse);
	free(old.v);
}

/* ------------------------------------------------------------------ entry */

/* Marks the forward values a derived block reads as saved. */
static void
mark_saved(Graph *g)
{
	int in_block = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_BACKWARD && (n->flags & NF_BACKWARD))
			in_block = 1;
		else if (n->op == OP_BACKWARD_END)
			in_block = 0;
		else if (in_block)
			for (uint32_t k = 0; k < n->nopnd; k++) {
				if (n->opnd[k].kind != OK_VAL)
					continue;
				Value *v = &g->vals.v[n->opnd[k].v];
				if (v->kind == VK_NODE && v->def != NONE && v->def < g->nodes.n &&
				    !(g->nodes.v[v->def].flags & NF_BACKWARD))
					v->saved = 1;
			}
	}
}

/* Frees the pass's own tables (the IR lives in the arena). */
static void
grad_free(Grad *G)
{
	vec_free(&G->slots);
	vec_free(&G->nv);
	vec_free(&G->out);
	free(G->cur);
	free(G->in);
	free(G->res);
	free(G->onpath);
	free(G->pgrad);
	free(G->final);
	free(G->named);
	free(G->pindex);
	if (G->scratch.out)
		fclose(G->scratch.out);
	free(G->scratch_text);
	diag_fini(&G->scratch);
}

/* Statements after the backward that name %grad.NAME (sema.c's
 * gradient_use) read a result of the backward node standing for the
 * param's final gradient: the index of that param (result j). */
static uint32_t
named_param(Grad *G, uint32_t j)
{
	Graph *g = G->g;
	const char *name = g->vals.v[g->nodes.v[G->bw].res[j]].name + 5; /* grad. */
	return G->pindex[*map_get(&g->valmap, name, strlen(name))];
}

/* First, each such param's gradient (zeros when the loss does not depend
 * on it) is put at the end of the outputs, so that the clean-up keeps
 * what makes it. */
static void
gradient_uses_begin(Grad *G)
{
	Graph *g = G->g;
	Node *bwn = &g->nodes.v[G->bw];
	for (uint32_t j = 0; j < bwn->nres; j++) {
		uint32_t p = named_param(G, j);
		ValId pv = g->params.v[p];
		if (G->pgrad[p] == NONE) {
			G->stream = G->bwstream;
			G->loc = bwn->loc;
			G->base = pv;
			G->pgrad[p] = grad_zeros(G, &g->vals.v[pv].type);
		}
		vec_push(&g->rets, G->pgrad[p]);
	}
}

/* Then, once the clean-up has renumbered them, each gradient takes the
 * place of the backward's result: the later statements read it, it gets
 * the name %grad.NAME they used, and the backward node has no results. */
static void
gradient_uses_end(Grad *G)
{
	Graph *g = G->g;
	Node *bwn = &g->nodes.v[G->bw];
	uint32_t nref = bwn->nres;
	if (!nref)
		return;
	ValId *to = xmalloc((size_t)g->vals.n * sizeof *to);
	for (ValId v = 0; v < g->vals.n; v++)
		to[v] = v;
	g->rets.n -= nref;
	for (uint32_t j = 0; j < nref; j++) {
		ValId r = bwn->res[j], v = g->rets.v[g->rets.n + j];
		Value *rv = &g->vals.v[r];
		to[r] = v;
		const char *name = rv->name;
		rv->name = ir_name_fresh(g, arena_cat(g->mod->arena, name, ".use")); /* unused now */
		map_put(&g->valmap, rv->name, strlen(rv->name), r);
		if (!g->vals.v[v].name) { /* else a value it is already (the loss...) */
			g->vals.v[v].name = name;
			map_put(&g->valmap, name, strlen(name), v);
		}
		rv->def = NONE;
	}
	bwn->nres = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL)
				n->opnd[k].v = to[n->opnd[k].v];
	}
	/* a gradient the program returns itself is returned once: the
	 * outputs grad.NAME (no optimizer) name it again */
	uint8_t *seen = calloc((size_t)g->vals.n + 1, 1);
	if (!seen)
		out_of_memory(0);
	uint32_t nr = 0;
	for (uint32_t i = 0; i < g->rets.n; i++) {
		ValId v = to[g->rets.v[i]];
		if (!seen[v])
			g->rets.v[nr++] = v;
		seen[v] = 1;
	}
	g->rets.n = nr;
	free(seen);
	free(to);
}

/* The pass on one graph with an underived backward; 0 after errors. */
static int
run(Grad *G)
{
	Graph *g = G->g;
	Node *bwn = &g->nodes.v[G->bw];
	if (!find_versions(G))
		return 0;
	uint32_t loss = G->cur[bwn->opnd[0].v];
	if (!find_path(G, loss))
		return 0;
	if (bwn->nattr && bwn->attr[0].set)
		G->comm = ir_stream_new(g, "grad_sync"); /* its all_reduces */
	if (!derive(G, loss))
		return 0;
	gradient_uses_begin(G);
	uint32_t nv = g->vals.n;
	uint8_t *used = calloc((size_t)nv + 1, 1), *live = calloc((size_t)G->out.n + 1, 1);
	if (!used || !live)
		out_of_memory(0);
	remove_dead(G, used, live);
	compact(G, used, live);
	gradient_uses_end(G);
	name_values(G);
	rebuild(G, live);
	free(used);
	free(live);
	return 1;
}

/* The pass: derive a graph's backward unless it is derived already. */
int
autograd_run(Graph *g, const PassOptions *po, Diag *d)
{
	(void)po;
	NodeId bw = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++)
		if (g->nodes.v[i].op == OP_BACKWARD && !(g->nodes.v[i].flags & NF_DEAD))
			bw = i;
	if (bw == NONE)
		return PASS_SAME; /* no backward: nothing to derive or mark */
	if (g->nodes.v[bw].flags & NF_BACKWARD) {
		mark_saved(g);
		return 1;
	}
	Grad G;
	memset(&G, 0, sizeof G);
	G.g = g;
	G.d = d;
	G.a = g->mod->arena;
	G.bw = bw;
	G.bwstream = g->nodes.v[bw].stream;
	G.first_new = g->vals.n;
	G.cur = xmalloc(((size_t)g->vals.n + 1) * sizeof *G.cur);
	G.in = calloc((size_t)g->nodes.n + 1, sizeof *G.in);
	G.res = calloc((size_t)g->nodes.n + 1, sizeof *G.res);
	G.onpath = calloc((size_t)g->nodes.n + 1, 1);
	G.pgrad = xmalloc(((size_t)g->params.n + 1) * sizeof *G.pgrad);
	G.final = calloc((size_t)g->params.n + 1, 1);
	G.named = calloc((size_t)g->params.n + 1, 1);
	G.pindex = xmalloc(((size_t)g->vals.n + 1) * sizeof *G.pindex);
	if (!G.in || !G.res || !G.onpath || !G.final || !G.named)
		out_of_memory(0);
	for (ValId v = 0; v < g->vals.n; v++)
		G.pindex[v] = NONE;
	for (uint32_t p = 0; p < g->params.n; p++) {
		G.pgrad[p] = NONE;
		G.pindex[g->params.v[p]] = p;
	}
	for (uint32_t j = 0; j < g->nodes.v[bw].nres; j++)
		G.named[named_param(&G, j)] = 1;
	diag_init(&G.scratch, d->path, d->src, d->srclen);
	G.scratch.out = open_memstream(&G.scratch_text, &G.scratch_len);
	if (!G.scratch.out)
		ICE("open_memstream failed");
	int ok = run(&G);
	grad_free(&G);
	if (ok)
		mark_saved(g);
	return ok;
}
