/*
 * layout.c - pass `layout` (-O2): convolution chains stored channels
 * last.
 *
 * cuDNN's f16 and bf16 convolutions run on tensor cores over NHWC data;
 * given NCHW they transpose on the way in and out (resnet18's 20
 * convolutions at B=128 on an H200: 7.9 ms NCHW, 4.4 ms channels last,
 * bench/conv_layout.py).  torch.compile switches such models to channels
 * last (Inductor's layout optimisation); this pass does the same ahead of
 * time.  A value's layout (Value.layout, sgc.h) is physical only: shapes,
 * the interpreter and autograd see the same tensors.
 *
 * The ops that take channels-last values ("layout-aware", layout_role):
 * conv2d and its two backward ops (activations and weights), batch_norm
 * and its backward, the 2-D pools and theirs, a var_mean that a training
 * batch_norm computes (layout_bn_stats), pointwise ops whose tensor
 * operands are all of the result's rank-4 shape (or scalars), and the
 * host copies to_host/to_device.  Their activation operands and results
 * are joined into components (union-find over values); a component that
 * holds an f16 or bf16 convolution's activations and no value written in
 * place is laid out channels last: every layout-aware node in it reads and
 * writes channels last (a convolution's weight operand too, its weight
 * gradient likewise).  Where a value crosses the border:
 *
 *   - written channels last, read by anything else (or returned): its
 *     writer writes %v.cl and `%v = to_layout(%v.cl, layout="row")` follows
 *     at once, on the writer's stream, so every other reader and the
 *     return keep the name;
 *   - written in row order, read channels last (the graph's input, a
 *     param, a conv weight): `%v.cl = to_layout(%v, layout="channels_last")`
 *     right before the first such reader on each stream, in forward and
 *     again in backward (a conv's weight and input are read by both;
 *     converting them twice costs a pass over them, keeping the forward's
 *     copies for backward would hold them at the peak).
 *
 * Both conversions sit where their reader or writer was, after its waits
 * and before its records, so the streams' order is unchanged.  One walk
 * over the nodes and one over the uses: linear in the graph.  A graph with
 * to_layout nodes already (a printed dump compiled again) is left alone.
 */
#include <string.h>

#include "passes.h"

/* The var_mean a training batch_norm at node b computes in its own pass
 * over x (kernel_choice's bn_stats): the live node right before it (dead
 * nodes and `del`s skipped), on its stream, over the same operand, dims
 * [0, 2, 3] of a rank-4 float x, not keeping dims, its results of x's
 * dtype; functionalize writes it there.  NONE when there is none. */
NodeId
layout_bn_stats(const Graph *g, NodeId b)
{
	const Node *n = &g->nodes.v[b];
	if (n->op != OP_BATCH_NORM || (n->flags & NF_DEAD) || !ir_attr_int(n, "training", 0) ||
	    n->opnd[0].kind != OK_VAL)
		return NONE;
	NodeId i = b;
	while (i > 0 && ((g->nodes.v[i - 1].flags & NF_DEAD) || g->nodes.v[i - 1].op == OP_DEL))
		i--;
	if (i == 0)
		return NONE;
	const Node *v = &g->nodes.v[i - 1];
	if (v->op != OP_VAR_MEAN || v->stream != n->stream || v->opnd[0].kind != OK_VAL ||
	    v->opnd[0].v != n->opnd[0].v || ir_attr_int(v, "keepdim", 0) || v->nres != 2)
		return NONE;
	const Type *x = &g->vals.v[n->opnd[0].v].type;
	if (x->rank != 4 || !dtype_is_float((DType)x->dt))
		return NONE;
	int red[SG_MAXRANK];
	shape_reduced_dims(v, x->rank, red);
	if (!red[0] || red[1] || !red[2] || !red[3])
		return NONE;
	for (int k = 0; k < 2; k++)
		if (g->vals.v[v->res[k]].type.dt != x->dt)
			return NONE;
	return i - 1;
}

static int
rank4(const Graph *g, ValId v)
{
	return g->vals.v[v].type.rank == 4;
}

/* 1 when pointwise node n may run channels last: every tensor operand
 * of its result's rank-4 shape or a scalar, not in place. */
static int
pointwise_role(const Graph *g, const Node *n, LayoutRole *r)
{
	if (n->nres != 1 || (op_table[n->op].flags & OPF_INPLACE))
		return 0;
	const Type *t = &g->vals.v[n->res[0]].type;
	if (t->rank != 4)
		return 0;
	for (uint32_t k = 0; k < n->nopnd; k++) {
		if (n->opnd[k].kind != OK_VAL)
			continue;
		const Type *o = &g->vals.v[n->opnd[k].v].type;
		if (o->rank == 0)
			continue;
		if (o->rank != 4 || memcmp(o->d, t->d, 4 * sizeof *t->d) != 0)
			return 0;
		r->act_ops |= 1u << k;
	}
	r->act_res = 1;
	return 1;
}

int
layout_role(const Graph *g, NodeId i, LayoutRole *r)
{
	const Node *n = &g->nodes.v[i];
	memset(r, 0, sizeof *r);
	r->w_op = r->w_res = -1;
	if ((n->flags & NF_DEAD) || n->op >= OP__N)
		return 0;
	switch (n->op) {
	case OP_CONV2D: case OP_CONV2D_BACKWARD_INPUT:
		r->act_ops = 1, r->act_res = 1, r->w_op = 1, r->conv = 1;
		break;
	case OP_CONV2D_BACKWARD_WEIGHT:
		r->act_ops = 3, r->w_res = 0, r->conv = 1;
		break;
	case OP_BATCH_NORM: case OP_MAX_POOL2D: case OP_AVG_POOL2D: case OP_ADAPTIVE_AVG_POOL2D:
	case OP_AVG_POOL2D_BACKWARD: case OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
	case OP_TO_HOST: case OP_TO_DEVICE:
		r->act_ops = 1, r->act_res = 1;
		break;
	case OP_BATCH_NORM_BACKWARD: case OP_MAX_POOL2D_BACKWARD:
		r->act_ops = 3, r->act_res = 1;
		break;
	case OP_VAR_MEAN:
		if (i + 1 >= g->nodes.n)
			return 0;
		for (NodeId b = i + 1; b < g->nodes.n; b++) {
			const Node *m = &g->nodes.v[b];
			if ((m->flags & NF_DEAD) || m->op == OP_DEL)
				continue;
			if (layout_bn_stats(g, b) != i)
				return 0;
			break;
		}
		r->act_ops = 1;
		break;
	default:
		if (!(op_table[n->op].flags & OPF_POINTWISE))
			return 0;
		return pointwise_role(g, n, r);
	}
	/* every activation of a rank-4 tensor operand */
	for (uint32_t k = 0; k < n->nopnd; k++)
		if (((r->act_ops >> k) & 1) && (n->opnd[k].kind != OK_VAL || !rank4(g, n->opnd[k].v)))
			return 0;
	if (r->act_res && !rank4(g, n->res[0]))
		return 0;
	return 1;
}

typedef struct {
	Graph *g;
	uint32_t *uf;      /* per value: union-find parent */
	uint8_t *cl;       /* per value (a root's entry): 1 seeded, 2 vetoed */
	uint8_t *node_cl;  /* per node: runs channels last */
	uint8_t *aware;    /* per node: layout-aware (layout_role's 1) */
	LayoutRole *role;  /* per node: its layout_role (where aware) */
	uint8_t *made_cl;  /* per value: written channels last */
	uint8_t *row_use;  /* per value: read in row order somewhere */
	NodeInsVec ins;
	Map copies;        /* (value, stream, in backward) -> its channels-last copy */
} Lay;

static uint32_t
find(Lay *L, uint32_t v)
{
	while (L->uf[v] != v) {
		L->uf[v] = L->uf[L->uf[v]];
		v = L->uf[v];
	}
	return v;
}

static void
unite(Lay *L, uint32_t a, uint32_t b)
{
	a = find(L, a);
	b = find(L, b);
	if (a != b)
		L->uf[b] = a;
}

/* The component of node i's activations (i layout-aware). */
static uint32_t
node_comp(Lay *L, NodeId i)
{
	const Node *n = &L->g->nodes.v[i];
	const LayoutRole *r = &L->role[i];
	for (uint32_t k = 0; k < n->nopnd; k++)
		if ((r->act_ops >> k) & 1)
			return find(L, n->opnd[k].v);
	return find(L, n->res[0]);
}

/* 1 when operand k of node i is read channels last. */
static int
reads_cl(Lay *L, NodeId i, uint32_t k)
{
	if (!L->node_cl[i] || !L->aware[i])
		return 0;
	const LayoutRole *r = &L->role[i];
	return ((r->act_ops >> k) & 1) || (int)k == r->w_op;
}

static Node
to_layout(Graph *g, ValId src, ValId dst, int cl, const Node *at)
{
	Node n = ir_node_make(g, OP_TO_LAYOUT, 1, 1, at->stream, 0, at->loc);
	n.opnd[0].kind = OK_VAL;
	n.opnd[0].v = src;
	n.opnd[0].loc = at->loc;
	n.res[0] = dst;
	ir_attr_set(&n, "layout")->s = cl ? "channels_last" : "row";
	return n;
}

/* A fresh value of v's type named v.cl, laid out channels last. */
static ValId
cl_value(Lay *L, ValId v, const Node *at)
{
	Graph *g = L->g;
	const char *name = g->vals.v[v].name;
	size_t len = strlen(name);
	char *base = arena_alloc(g->mod->arena, len + 4);
	memcpy(base, name, len);
	memcpy(base + len, ".cl", 4);
	ValId c = ir_value_derived(g, base, (at->flags & NF_BACKWARD) != 0, at->loc);
	Value *cv = &g->vals.v[c], *sv = &g->vals.v[v];
	cv->type = sv->type;
	cv->kind = VK_NODE;
	cv->saved = sv->saved;
	cv->layout = LAYOUT_CL;
	return c;
}

int
layout_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)d;
	if (po->opt_level < 2)
		return PASS_SAME;
	uint32_t nn = g->nodes.n, nv = g->vals.n;
	int any_conv = 0;
	for (NodeId i = 0; i < nn; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_TO_LAYOUT)
			return PASS_SAME;
		if (n->op == OP_CONV2D || n->op == OP_CONV2D_BACKWARD_INPUT ||
		    n->op == OP_CONV2D_BACKWARD_WEIGHT)
			any_conv = 1;
	}
	if (!any_conv)
		return PASS_SAME;
	Lay L = {.g = g};
	L.uf = xmalloc((nv + 1) * sizeof *L.uf);
	L.cl = xmalloc(nv + 1);
	L.made_cl = xmalloc(nv + 1);
	L.row_use = xmalloc(nv + 1);
	L.node_cl = xmalloc(nn + 1);
	L.aware = xmalloc(nn + 1);
	L.role = xmalloc((nn + 1) * sizeof *L.role);
	memset(L.cl, 0, nv + 1);
	memset(L.made_cl, 0, nv + 1);
	memset(L.row_use, 0, nv + 1);
	memset(L.node_cl, 0, nn + 1);
	map_init(&L.copies);
	for (uint32_t v = 0; v < nv; v++)
		L.uf[v] = v;
	/* each node's role, once: the walks below swap operands and results
	 * only for values of the same type, which leaves every role as it was */
	for (NodeId i = 0; i < nn; i++)
		L.aware[i] = (uint8_t)layout_role(g, i, &L.role[i]);
	/* the components; a control_deps passes each value through (the same
	 * storage: ctrldeps.c), so its result j joins operand j's component,
	 * and a printed graph compiled again decides as the first compile did
	 * (that one ran before control_deps existed) */
	for (NodeId i = 0; i < nn; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->op == OP_CONTROL_DEPS && !(n->flags & NF_DEAD))
			for (uint32_t j = 0; j < n->nres && j < n->nopnd; j++)
				if (n->opnd[j].kind == OK_VAL)
					unite(&L, n->opnd[j].v, n->res[j]);
		if (!L.aware[i])
			continue;
		const LayoutRole *r = &L.role[i];
		uint32_t first = node_comp(&L, i);
		for (uint32_t k = 0; k < n->nopnd; k++)
			if ((r->act_ops >> k) & 1)
				unite(&L, first, n->opnd[k].v);
		if (r->act_res)
			unite(&L, first, n->res[0]);
	}
	/* seeded by f16/bf16 convolutions, vetoed by writes in place */
	for (NodeId i = 0; i < nn; i++) {
		const Node *n = &g->nodes.v[i];
		if (L.aware[i] && L.role[i].conv) {
			DType dt = (DType)g->vals.v[n->opnd[0].v].type.dt;
			if ((dt == DT_F16 || dt == DT_BF16) && L.cl[node_comp(&L, i)] == 0)
				L.cl[node_comp(&L, i)] = 1;
		}
		if (n->flags & NF_DEAD || n->op >= OP__N || !n->nopnd || n->opnd[0].kind != OK_VAL)
			continue;
		uint32_t f = op_table[n->op].flags;
		if ((f & OPF_INPLACE) || ((f & OPF_COLLECTIVE) && n->nres == 0))
			L.cl[find(&L, n->opnd[0].v)] = 2;
	}
	/* the nodes that run channels last, the values they write so */
	int any = 0;
	for (NodeId i = 0; i < nn; i++) {
		if (!L.aware[i] || L.cl[node_comp(&L, i)] != 1)
			continue;
		const Node *n = &g->nodes.v[i];
		const LayoutRole *r = &L.role[i];
		L.node_cl[i] = 1;
		any = 1;
		if (r->act_res)
			L.made_cl[n->res[0]] = 1;
		if (r->w_res >= 0)
			L.made_cl[n->res[r->w_res]] = 1;
	}
	if (any) {
		/* which values something reads in row order */
		for (NodeId i = 0; i < nn; i++) {
			const Node *n = &g->nodes.v[i];
			if ((n->flags & NF_DEAD) || n->op >= OP__N)
				continue; /* del, offload marks, backward: no reads */
			for (uint32_t k = 0; k < n->nopnd; k++)
				if (n->opnd[k].kind == OK_VAL && !reads_cl(&L, i, k))
					L.row_use[n->opnd[k].v] = 1;
		}
		for (uint32_t k = 0; k < g->rets.n; k++)
			L.row_use[g->rets.v[k]] = 1;
		/* the writers: %v.cl and a conversion to %v when read in row order */
		ValId *alias = xmalloc((nv + 1) * sizeof *alias);
		for (uint32_t v = 0; v < nv; v++)
			alias[v] = v;
		for (NodeId i = 0; i < nn; i++) {
			Node *n = &g->nodes.v[i];
			if (!L.node_cl[i])
				continue;
			for (uint32_t j = 0; j < n->nres; j++) {
				ValId v = n->res[j];
				if (!L.made_cl[v])
					continue;
				if (!L.row_use[v]) {
					g->vals.v[v].layout = LAYOUT_CL;
					continue;
				}
				ValId c = cl_value(&L, v, n);
				g->vals.v[c].def = i;
				g->vals.v[c].resno = (uint16_t)j;
				n->res[j] = c;
				alias[v] = c;
				NodeIns x = {i + 1, 0, to_layout(g, c, v, 0, n)};
				vec_push(&L.ins, x);
			}
		}
		/* the readers: through %v.cl, or a copy per stream (and backward) */
		for (NodeId i = 0; i < nn; i++) {
			Node *n = &g->nodes.v[i];
			for (uint32_t k = 0; k < n->nopnd; k++) {
				if (n->opnd[k].kind != OK_VAL || !reads_cl(&L, i, k))
					continue;
				ValId v = n->opnd[k].v;
				if (alias[v] != v || g->vals.v[v].layout == LAYOUT_CL) {
					n->opnd[k].v = alias[v];
					continue;
				}
				struct { uint32_t v, s, bwd; } key = {v, n->stream,
				                                      (n->flags & NF_BACKWARD) != 0};
				uint32_t *c = map_get(&L.copies, (const char *)&key, sizeof key);
				if (!c) {
					ValId cv = cl_value(&L, v, n);
					NodeIns x = {i, 0, to_layout(g, v, cv, 1, n)};
					vec_push(&L.ins, x);
					c = map_put(&L.copies, (const char *)&key, sizeof key, cv);
				}
				n->opnd[k].v = *c;
			}
		}
		free(alias);
		if (L.ins.n)
			ir_insert(g, &L.ins);
	}
	vec_free(&L.ins);
	map_free(&L.copies);
	free(L.uf);
	free(L.cl);
	free(L.made_cl);
	free(L.row_use);
	free(L.node_cl);
	free(L.aware);
	free(L.role);
	return any ? 1 : PASS_SAME;
}
