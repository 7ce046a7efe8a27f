/*
 * codegen_kernels.c - the kernels of each op and the host statements that
 * launch them.
 *
 * Pointwise ops (and the in-place ones) go through one emitter that builds
 * a kernel from a group of nodes: each external operand is loaded once
 * into a register (with its broadcast index), each node becomes one line
 * computing its result in the op's compute type (float or double math,
 * wrapping int64), converted to its dtype as Tensor.to does, and the
 * values needed outside the group are stored.  The expressions come from
 * codegen_templates/pointwise.tbl; the dtype rules are the interpreter's
 * (compiler/interp_ops.c), so both compute the same numbers.
 *
 * Other ops have one template each in kernels.cu (reductions, softmax,
 * norms, losses, attention, indexing, copies, creation), or go to
 * cuBLASLt (matmul, linear), cudaMemcpyAsync (flat copies, to_host,
 * to_device) or NCCL (collectives) through libsgrt.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"

enum { D_FLOAT, D_DOUBLE, D_INT }; /* compute domains */

/* An integer as text. */
static char *
num(Cg *c, int64_t v)
{
	return cg_fmt(c, "%lld", (long long)v);
}

/* ------------------------------------------------------------------ index expressions */

char *
cg_index(Cg *c, const char *var, int rank, const int64_t *size,
         const int64_t *stride, int64_t base)
{
	int64_t sz[SG_MAXRANK + 1], st[SG_MAXRANK + 1];
	int r = 0;
	/* Drop size-1 dims, merge contiguous neighbours. */
	for (int d = 0; d < rank; d++) {
		if (size[d] == 1)
			continue;
		if (r > 0 && st[r - 1] == size[d] * stride[d]) {
			sz[r - 1] *= size[d];
			st[r - 1] = stride[d];
			continue;
		}
		sz[r] = size[d];
		st[r] = stride[d];
		r++;
	}
	char *e = base ? num(c, base) : NULL;
	int64_t inner = 1;
	for (int d = r - 1; d >= 0; d--) {
		if (st[d] != 0) {
			char *t = inner == 1 ? cg_fmt(c, "%s", var)
			                     : cg_fmt(c, "%s / %" PRId64, var, inner);
			if (d > 0)
				t = cg_fmt(c, "%s%s%s %% %" PRId64, inner == 1 ? "" : "(", t,
				           inner == 1 ? "" : ")", sz[d]);
			if (st[d] != 1)
				t = cg_fmt(c, strchr(t, ' ') ? "(%s) * %" PRId64 : "%s * %" PRId64,
				           t, st[d]);
			e = e ? cg_fmt(c, "%s + %s", t, e) : t;
		}
		inner *= sz[d];
	}
	return e ? e : "0";
}

int64_t
cg_grid(int64_t n, int block)
{
	int64_t g = (n + block - 1) / block;
	return g < 1 ? 1 : g > 4096 ? 4096 : g;
}

/* Row-major strides of a shape. */
void
cg_strides(const Type *t, int64_t *st)
{
	int64_t s = 1;
	for (int d = t->rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= t->d[d];
	}
}

/* The index type for n elements. */
const char *
cg_index_type(int64_t n)
{
	return n < ((int64_t)1 << 31) - 4096 * 256 ? "int" : "sg_i64";
}

/* The type of value v, and of operand k of node n. */
static const Type *
vtype(CgGraph *G, ValId v)
{
	return &G->g->vals.v[v].type;
}

static const Type *
otype(CgGraph *G, const Node *n, int k)
{
	return vtype(G, n->opnd[k].v);
}

/* "// FILE.sg:LINE: statement" for one node. */
char *
cg_comment(CgGraph *G, const Node *n)
{
	return cg_fmt(G->c, "// %s: %s", cg_where(G->c, n),
	              cg_node_text(G->c, G->g, n));
}

/* One launch statement. */
void
cg_launch(CgGraph *G, const Node *n, const char *kname, int64_t grid, int block,
       int64_t smem, const char *args)
{
	Cg *c = G->c;
	CG_EMIT(G->body, "host.cu:launch", {"s", num(c, cg_stream(n))},
	        {"kname", kname}, {"line", num(c, n->loc.line)},
	        {"grid", num(c, grid)}, {"block", num(c, block)},
	        {"smem", num(c, smem)}, {"args", args});
}

/* A temporary for a kernel's scratch: declared, allocated, and the name
 * returned; free_tmp releases it. */
char *
cg_alloc_tmp(CgGraph *G, const Node *n, const char *type, int64_t bytes, const char *what)
{
	Cg *c = G->c;
	char *base = cg_fmt(c, "tmp_%s_%u", what, n->loc.line), *var = base;
	for (int k = 2; map_get(&G->kernames, var, strlen(var)); k++)
		var = cg_fmt(c, "%s_%d", base, k);
	map_put(&G->kernames, var, strlen(var), 1);
	fprintf(G->body, "\t%s *%s = NULL;\n", type, var);
	CG_EMIT(G->body, "host.cu:alloc", {"var", var}, {"bytes", num(c, bytes)},
	        {"s", num(c, cg_stream(n))}, {"line", num(c, n->loc.line)});
	return var;
}

void
cg_free_tmp(CgGraph *G, const Node *n, const char *var)
{
	CG_EMIT(G->body, "host.cu:free", {"var", var}, {"s", num(G->c, cg_stream(n))},
	        {"line", num(G->c, n->loc.line)});
}

/* ------------------------------------------------------------------ pointwise table */

/* The FLOAT (col 1) or INTEGER (col 2) expression of pointwise.tbl for op
 * name, or NULL. */
static const char *
table_expr(Cg *c, const char *name, int col)
{
	const char *t = cg_section("pointwise.tbl:ops");
	size_t nl = strlen(name);
	while (*t && strncmp(t, "//@ ", 4) != 0) {
		const char *eol = strchr(t, '\n');
		size_t len = eol ? (size_t)(eol - t) : strlen(t);
		if (len > nl && strncmp(t, name, nl) == 0 && (t[nl] == ' ' || t[nl] == '|')) {
			const char *p = t;
			for (int k = 0; k < col; k++)
				p = memchr(p, '|', len - (size_t)(p - t)) + 1;
			const char *q = memchr(p, '|', len - (size_t)(p - t));
			const char *e = q ? q : t + len;
			while (*p == ' ')
				p++;
			while (e > p && e[-1] == ' ')
				e--;
			char *s = arena_strndup(c->a, p, (size_t)(e - p));
			return strcmp(s, "-") == 0 ? NULL : s;
		}
		t = eol ? eol + 1 : t + len;
	}
	return NULL;
}

int
cg_is_pointwise(const Graph *g, const Node *n)
{
	(void)g;
	if (n->op >= OP__N)
		return 0;
	if (op_table[n->op].flags & OPF_POINTWISE)
		return 1;
	return n->op == OP_ADD_ || n->op == OP_SUB_ || n->op == OP_MUL_ ||
	       n->op == OP_DIV_ || n->op == OP_COPY_ || n->op == OP_FILL_;
}

/* ------------------------------------------------------------------ pointwise groups */

/* The state of one pointwise kernel being built. */
typedef struct {
	CgGraph *G;
	Cg *c;
	const CgGroup *grp;
	Type shape;         /* every node's output shape */
	int64_t n;
	int vec;            /* > 1: vectorised variant */
	int inplace;        /* the group writes an operand (no __restrict__) */
	const char *ind;    /* indentation of the body's lines */
	FILE *body;
	char *btext;
	size_t blen;
	VEC(ValId) params;  /* external operands and stored results */
	uint8_t *param_out; /* per param: written */
	uint8_t *have;      /* per value: its register exists */
} Pw;

/* Index of value v among the kernel's params, added when new. */
static uint32_t
pw_param(Pw *p, ValId v, int out)
{
	for (uint32_t k = 0; k < p->params.n; k++)
		if (p->params.v[k] == v) {
			p->param_out[k] |= (uint8_t)out;
			return k;
		}
	vec_push(&p->params, v);
	p->param_out = xrealloc(p->param_out, p->params.n);
	p->param_out[p->params.n - 1] = (uint8_t)out;
	return p->params.n - 1;
}

/* The register name of value v ("r_x"). */
static char *
reg(Pw *p, ValId v)
{
	return cg_fmt(p->c, "r_%s", p->G->vname[v] + 2);
}

/* The element of external value v that output index i reads. */
static char *
elem_index(Pw *p, ValId v)
{
	const Type *t = vtype(p->G, v);
	int64_t st[SG_MAXRANK], bst[SG_MAXRANK];
	if (type_numel(t) == 1)
		return "0";
	if (type_same_shape(t, &p->shape))
		return p->vec > 1 ? "w" : "i";
	cg_strides(t, st);
	for (int d = 0; d < p->shape.rank; d++) {
		int td = d - (p->shape.rank - t->rank);
		bst[d] = td >= 0 && t->d[td] != 1 ? st[td] : 0;
	}
	return cg_index(p->c, "i", p->shape.rank, p->shape.d, bst, 0);
}

/* Loads external value v into its register (once). */
static void
load(Pw *p, ValId v)
{
	if (p->have[v])
		return;
	p->have[v] = 1;
	pw_param(p, v, 0);
	const Type *t = vtype(p->G, v);
	const char *ix = elem_index(p, v), *src;
	if (p->vec > 1 && strcmp(ix, "w") == 0)
		src = cg_fmt(p->c, "%s_v.v[j]", p->G->vname[v]);
	else
		src = cg_fmt(p->c, "%s[%s]", p->G->vname[v], ix);
	fprintf(p->body, "%s%sconst %s %s = sg_ld(%s);\n", p->ind, p->vec > 1 ? "\t" : "",
	        cg_regtype((DType)t->dt), reg(p, v), src);
}

/* The domain of compute dtype dt. */
static int
domain(DType dt)
{
	return dt == DT_F64 ? D_DOUBLE : dtype_is_float(dt) ? D_FLOAT : D_INT;
}

/* A scalar literal operand in domain dom. */
static char *
literal(Cg *c, const Opnd *o, int dom)
{
	switch (o->kind) {
	case OK_FLOAT:
		if (dom == D_INT)
			return cg_lit_int(c, !(o->f >= -0x1p63 && o->f < 0x1p63) ? INT64_MIN
			                                                      : (int64_t)o->f);
		return cg_lit_float(c, o->f, dom == D_FLOAT);
	case OK_INT:
	case OK_BOOL: {
		int64_t v = o->kind == OK_BOOL ? o->i != 0 : o->i;
		if (dom == D_INT)
			return cg_lit_int(c, v);
		return cg_fmt(c, "(%s)%s", dom == D_FLOAT ? "float" : "double", cg_lit_int(c, v));
	}
	}
	ICE("operand is not a literal");
}

/* Operand k of node n as a value of domain dom (loaded if external). */
static char *
operand(Pw *p, const Node *n, int k, int dom)
{
	const Opnd *o = &n->opnd[k];
	if (o->kind != OK_VAL)
		return literal(p->c, o, dom);
	load(p, o->v);
	DType dt = (DType)vtype(p->G, o->v)->dt;
	char *r = reg(p, o->v);
	if (dom == D_FLOAT && domain(dt) != D_FLOAT)
		return cg_fmt(p->c, "sg_opf(%s)", r);
	if (dom == D_DOUBLE && dt != DT_F64)
		return cg_fmt(p->c, "sg_opd(%s)", r);
	return r;
}

/* num attributes (fill_ value, clamp bounds) as the interpreter reads
 * them: as a double, or as an int64. */
static double
num_f(const Attr *a)
{
	if (a->num_kind == OK_FLOAT)
		return a->f;
	return a->i ? (double)a->i : a->f;
}

static int64_t
num_i(const Attr *a)
{
	if (a->num_kind == OK_FLOAT)
		return isnan(a->f) ? INT64_MIN : (int64_t)a->f;
	return a->i ? a->i : (int64_t)a->f;
}

/* A num attribute as an argument of sg_to_DT: a double or an sg_i64. */
static char *
num_value(Cg *c, const Attr *a)
{
	if (a->num_kind == OK_FLOAT)
		return cg_lit_float(c, a->f, 0);
	return cg_fmt(c, "(sg_i64)%s", cg_lit_int(c, num_i(a)));
}

/* The arithmetic op an in-place op performs. */
static int
base_op(int op)
{
	switch (op) {
	case OP_ADD_: return OP_ADD;
	case OP_SUB_: return OP_SUB;
	case OP_MUL_: return OP_MUL;
	case OP_DIV_: return OP_DIV;
	default: return op;
	}
}

static int
is_compare(int op)
{
	return op == OP_EQ || op == OP_NE || op == OP_LT || op == OP_LE ||
	       op == OP_GT || op == OP_GE;
}

/* The table expression of op in domain dom with operands a, b. */
static char *
table(Pw *p, const Node *n, int op, int dom, const char *a, const char *b)
{
	const char *name = op_table[op].name;
	if (op == OP_GELU || op == OP_GELU_BACKWARD) {
		const Attr *ap = ir_attr(n, "approximate");
		if (ap && ap->s && strcmp(ap->s, "tanh") == 0)
			name = op == OP_GELU ? "gelu_tanh" : "gelu_tanh_backward";
	}
	const char *e = table_expr(p->c, name, dom == D_INT ? 2 : 1);
	if (!e)
		ICE("pointwise.tbl has no %s form of %s", dom == D_INT ? "integer" : "float",
		    name);
	return CG_SUBST(p->c, e, {"a", a}, {"b", b ? b : "?"});
}

/* Binary ops (and their in-place forms): the expression converted to
 * dtype rdt; cdt is the compute dtype. */
static char *
binary(Pw *p, const Node *n, int op, DType cdt)
{
	if (op == OP_DIV && !dtype_is_float(cdt))
		cdt = DT_F32; /* true division */
	int dom = domain(cdt);
	char *a = operand(p, n, 0, dom), *b = operand(p, n, 1, dom);
	if (is_compare(op) && (cdt == DT_F16 || cdt == DT_BF16)) {
		a = cg_fmt(p->c, "sg_to_%s(%s)", cg_dtname(cdt), a);
		b = cg_fmt(p->c, "sg_to_%s(%s)", cg_dtname(cdt), b);
	}
	return table(p, n, op, dom, a, b);
}

/* where(c, a, b) in the result's domain. */
static char *
where(Pw *p, const Node *n, DType rdt)
{
	int dom = domain(rdt);
	const Opnd *o = &n->opnd[0];
	char *cond;
	if (o->kind == OK_VAL)
		cond = cg_fmt(p->c, "sg_to_i64(%s) != 0", operand(p, n, 0, D_INT));
	else
		cond = (o->kind == OK_FLOAT ? o->f != 0 : o->i != 0) ? "1" : "0";
	return cg_fmt(p->c, "(%s ? %s : %s)", cond, operand(p, n, 1, dom),
	              operand(p, n, 2, dom));
}

/* clamp(x, min=, max=) in the result's domain. */
static char *
clamp(Pw *p, const Node *n, DType rdt)
{
	const Attr *lo = ir_attr(n, "min"), *hi = ir_attr(n, "max");
	int dom = domain(rdt);
	char *e = operand(p, n, 0, dom);
	if (dom == D_INT) {
		if (lo)
			e = cg_fmt(p->c, "sg_imax(%s, %s)", e, cg_lit_int(p->c, num_i(lo)));
		if (hi)
			e = cg_fmt(p->c, "sg_imin(%s, %s)", e, cg_lit_int(p->c, num_i(hi)));
		return e;
	}
	int f = dom == D_FLOAT;
	if (lo)
		e = cg_fmt(p->c, "sg_clamp_lo(%s, %s)", e,
		           cg_lit_float(p->c, f ? (double)(float)num_f(lo) : num_f(lo), f));
	if (hi)
		e = cg_fmt(p->c, "sg_clamp_hi(%s, %s)", e,
		           cg_lit_float(p->c, f ? (double)(float)num_f(hi) : num_f(hi), f));
	return e;
}

/* The value node n computes, before conversion to its result dtype, and
 * that dtype. */
static char *
node_expr(Pw *p, const Node *n, DType *rdt)
{
	Graph *g = p->G->g;
	int op = n->op;
	if (op_table[op].flags & OPF_INPLACE) {
		*rdt = (DType)otype(p->G, n, 0)->dt;
		switch (op) {
		case OP_COPY_:
			return operand(p, n, 1, domain((DType)otype(p->G, n, 1)->dt));
		case OP_FILL_:
			return num_value(p->c, ir_attr(n, "value"));
		default:
			return binary(p, n, base_op(op), shape_result_type(g, n, 0, 2));
		}
	}
	*rdt = (DType)vtype(p->G, n->res[0])->dt;
	switch (op) {
	case OP_WHERE: return where(p, n, *rdt);
	case OP_CLAMP: return clamp(p, n, *rdt);
	case OP_CAST: return operand(p, n, 0, domain((DType)otype(p->G, n, 0)->dt));
	}
	if (is_compare(op))
		return binary(p, n, op, shape_result_type(g, n, 0, 2));
	if (n->nopnd == 2)
		return binary(p, n, op, *rdt);
	int dom = domain(*rdt);
	return table(p, n, op, dom, operand(p, n, 0, dom), NULL);
}

/* 1 when value v, made in the group, must be stored. */
static int
stored(Pw *p, ValId v)
{
	return !p->G->ingroup_only[v];
}

/* One node of the group: its register and, when needed, its store. */
static void
pw_node(Pw *p, const Node *n)
{
	DType rdt;
	char *e = node_expr(p, n, &rdt);
	const char *ind = p->vec > 1 ? "\t\t\t" : p->ind;
	const char *at = "i";
	if (op_table[n->op].flags & OPF_INPLACE) {
		ValId x = n->opnd[0].v;
		uint32_t k = pw_param(p, x, 1);
		(void)k;
		fprintf(p->body, "%s%s[%s] = sg_st_%s(sg_to_%s(%s));\n", ind, p->G->vname[x],
		        at, cg_dtname(rdt), cg_dtname(rdt), e);
		return;
	}
	ValId r = n->res[0];
	p->have[r] = 1;
	fprintf(p->body, "%sconst %s %s = sg_to_%s(%s);\n", ind, cg_regtype(rdt), reg(p, r),
	        cg_dtname(rdt), e);
	if (!stored(p, r))
		return;
	pw_param(p, r, 1);
	if (p->vec > 1)
		fprintf(p->body, "%s%s_v.v[j] = sg_st_%s(%s);\n", ind, p->G->vname[r],
		        cg_dtname(rdt), reg(p, r));
	else
		fprintf(p->body, "%s%s[i] = sg_st_%s(%s);\n", ind, p->G->vname[r],
		        cg_dtname(rdt), reg(p, r));
}

/* The kernel's parameter list and the launch's argument list. */
static void
pw_signature(Pw *p, char **params, char **args)
{
	Cg *c = p->c;
	*params = "";
	*args = "";
	for (uint32_t k = 0; k < p->params.n; k++) {
		ValId v = p->params.v[k];
		const char *ct = cg_ctype((DType)vtype(p->G, v)->dt);
		const char *restrict_ = p->inplace ? "" : "__restrict__ ";
		*params = cg_fmt(c, "%s%s%s%s *%s%s", *params, k ? ", " : "",
		                 p->param_out[k] ? "" : "const ", ct, restrict_,
		                 p->G->vname[v]);
		*args = cg_fmt(c, "%s%s%s", *args, k ? ", " : "", p->G->vname[v]);
	}
}

/* The comment lines of the group's nodes. */
static char *
group_comment(CgGraph *G, const CgGroup *grp)
{
	char *s = "";
	for (uint32_t k = 0; k < grp->n; k++)
		s = cg_fmt(G->c, "%s%s%s", s, k ? "\n" : "",
		           cg_comment(G, &G->g->nodes.v[grp->nodes[k]]));
	return s;
}

/* The group's output shape: its first node's result (or in-place
 * operand). */
static Type
group_shape(CgGraph *G, const CgGroup *grp)
{
	const Node *n = &G->g->nodes.v[grp->nodes[0]];
	if (op_table[n->op].flags & OPF_INPLACE)
		return *otype(G, n, 0);
	return *vtype(G, n->res[0]);
}

/* Builds the body of the group's kernel (vec: the vectorised form). */
static void
pw_build(Pw *p, int vec)
{
	Graph *g = p->G->g;
	p->vec = vec;
	p->params.n = 0;
	memset(p->have, 0, g->vals.n + 1);
	p->body = open_memstream(&p->btext, &p->blen);
	for (uint32_t k = 0; k < p->grp->n; k++)
		pw_node(p, &g->nodes.v[p->grp->nodes[k]]);
	fclose(p->body);
}

/* The vectorised kernel's loads and stores around the element loop. */
static void
vec_moves(Pw *p, char **loads, char **stores)
{
	Cg *c = p->c;
	*loads = "";
	*stores = "";
	for (uint32_t k = 0; k < p->params.n; k++) {
		ValId v = p->params.v[k];
		const char *ct = cg_ctype((DType)vtype(p->G, v)->dt), *nm = p->G->vname[v];
		if (!type_same_shape(vtype(p->G, v), &p->shape))
			continue; /* broadcast: read element by element */
		char *vt = cg_fmt(c, "sg_vec<%s, %d>", ct, p->vec);
		if (p->param_out[k]) {
			*loads = cg_fmt(c, "%s\t\t%s %s_v;\n", *loads, vt, nm);
			*stores = cg_fmt(c, "%s\t\t*(%s *)(%s + w * %d) = %s_v;\n", *stores, vt, nm,
			                 p->vec, nm);
		} else {
			*loads = cg_fmt(c, "%s\t\tconst %s %s_v = *(const %s *)(%s + w * %d);\n",
			                *loads, vt, nm, vt, nm, p->vec);
		}
	}
	size_t n = strlen(*loads);
	if (n)
		(*loads)[n - 1] = 0;
	n = strlen(*stores);
	if (n)
		(*stores)[n - 1] = 0;
}

/* The alignment test of the vectorised launch. */
static char *
vec_cond(Pw *p)
{
	char *s = "";
	for (uint32_t k = 0; k < p->params.n; k++) {
		ValId v = p->params.v[k];
		if (!type_same_shape(vtype(p->G, v), &p->shape))
			continue;
		s = cg_fmt(p->c, "%s%s((uintptr_t)%s %% %d) == 0", s, *s ? " && " : "",
		           p->G->vname[v], dtype_size((DType)vtype(p->G, v)->dt) * p->vec);
	}
	return *s ? s : "1";
}

void
cg_pointwise(CgGraph *G, const CgGroup *grp)
{
	Cg *c = G->c;
	Graph *g = G->g;
	const Node *n0 = &g->nodes.v[grp->nodes[0]];
	Pw p = {.G = G, .c = c, .grp = grp, .ind = "\t\t"};
	p.shape = group_shape(G, grp);
	p.n = type_numel(&p.shape);
	p.inplace = (op_table[n0->op].flags & OPF_INPLACE) != 0;
	p.have = xmalloc(g->vals.n + 1);
	if (p.n == 0) {
		free(p.have);
		return;
	}
	const char *kname = cg_kernel_name(G, n0, op_name(n0->op));
	char *params, *args, *cmt = group_comment(G, grp);
	pw_build(&p, 1);
	pw_signature(&p, &params, &args);
	if (p.blen && p.btext[p.blen - 1] == '\n')
		p.btext[p.blen - 1] = 0;
	CG_EMIT(c->kern, "kernels.cu:pointwise", {"comment", cmt}, {"name", kname},
	        {"params", params}, {"idx", cg_index_type(p.n)}, {"n", num(c, p.n)},
	        {"body", p.btext});
	free(p.btext);
	if (grp->vec <= 1) {
		cg_launch(G, n0, kname, cg_grid(p.n, 256), 256, 0, args);
	} else {
		const char *vname = cg_fmt(c, "%s_vec", kname);
		char *loads, *stores;
		pw_build(&p, grp->vec);
		vec_moves(&p, &loads, &stores);
		if (p.blen && p.btext[p.blen - 1] == '\n')
			p.btext[p.blen - 1] = 0;
		CG_EMIT(c->kern, "kernels.cu:pointwise_vec", {"comment", cmt}, {"name", vname},
		        {"scalar", kname}, {"params", params}, {"idx", cg_index_type(p.n)},
		        {"nvec", num(c, p.n / grp->vec)}, {"vec", num(c, grp->vec)},
		        {"loads", loads}, {"stores", stores}, {"body", p.btext});
		free(p.btext);
		CG_EMIT(G->body, "host.cu:launch_if_aligned", {"cond", vec_cond(&p)},
		        {"s", num(c, cg_stream(n0))}, {"kname", vname},
		        {"line", num(c, n0->loc.line)},
		        {"grid", num(c, cg_grid(p.n / grp->vec, 256))}, {"block", "256"},
		        {"args", args}, {"kname2", kname}, {"grid2", num(c, cg_grid(p.n, 256))});
	}
	vec_free(&p.params);
	free(p.param_out);
	free(p.have);
}

/* The element function of group grp (fused into a consumer): emitted,
 * and its parameters, arguments and name returned through in. */
static void
elem_fn(CgGraph *G, const CgGroup *grp, CgInput *in)
{
	Cg *c = G->c;
	Graph *g = G->g;
	const Node *last = &g->nodes.v[grp->nodes[grp->n - 1]];
	ValId v = last->res[0];
	Pw p = {.G = G, .c = c, .grp = grp, .ind = "\t"};
	p.shape = group_shape(G, grp);
	p.n = type_numel(&p.shape);
	p.have = xmalloc(g->vals.n + 1);
	const char *name = cg_kernel_name(G, &g->nodes.v[grp->nodes[0]], "elem");
	char *params, *args;
	pw_build(&p, 1);
	pw_signature(&p, &params, &args);
	if (p.blen && p.btext[p.blen - 1] == '\n')
		p.btext[p.blen - 1] = 0;
	CG_EMIT(c->kern, "kernels.cu:elem_fn", {"comment", group_comment(G, grp)},
	        {"what", g->vals.v[v].name}, {"rtype", cg_regtype((DType)vtype(G, v)->dt)},
	        {"name", name}, {"params", params}, {"body", p.btext}, {"ret", reg(&p, v)});
	free(p.btext);
	in->params = params;
	in->args = args;
	in->fmt = cg_fmt(c, "%s(%s, %%s)", name, args);
	vec_free(&p.params);
	free(p.param_out);
	free(p.have);
}

CgInput
cg_input(CgGraph *G, const Node *n)
{
	CgInput in;
	NodeId i = (NodeId)(n - G->g->nodes.v);
	if (G->prologue && G->prologue[i] >= 0) {
		elem_fn(G, &G->groups->v[G->prologue[i]], &in);
		return in;
	}
	const Type *t = otype(G, n, 0);
	in.params = cg_fmt(G->c, "const %s *__restrict__ x", cg_ctype((DType)t->dt));
	in.args = G->vname[n->opnd[0].v];
	in.fmt = "sg_ld(x[%s])";
	return in;
}

/* ------------------------------------------------------------------ row kernels */

/* How the threads of a row kernel split: ${tpr} threads a row (a warp
 * when rows are short or many, else a block), ${rows} rows a block. */
CgRows
cg_rows(int64_t nout, int64_t len)
{
	CgRows r;
	r.tpr = len <= 256 || nout >= 4096 ? 32 : len >= 16384 ? 1024 : 256;
	r.block = r.tpr == 32 ? 256 : r.tpr;
	r.rows = r.block / r.tpr;
	r.grid = (nout + r.rows - 1) / r.rows;
	if (r.grid < 1)
		r.grid = 1;
	return r;
}

/* The accumulator type for floating work on dtype dt, and the conversion
 * of a loaded register into it. */
const char *
cg_acc_type(DType dt)
{
	return dt == DT_F64 ? "double" : "float";
}

const char *
cg_acc_conv(DType dt)
{
	return dt == DT_F64 ? "sg_opd" : "sg_opf";
}

/* sg_st_DT(sg_to_DT(v)). */
char *
cg_store(Cg *c, DType dt, const char *v)
{
	return cg_fmt(c, "sg_st_%s(sg_to_%s(%s))", cg_dtname(dt), cg_dtname(dt), v);
}

/* The dims a reduction reduces (its dims=, or all when absent or empty). */
static void
reduced_dims(const Node *n, const Type *x, int *red)
{
	const Attr *a = ir_attr(n, "dims");
	int all = !a || a->nints == 0;
	for (int d = 0; d < x->rank; d++)
		red[d] = all;
	if (all)
		return;
	for (uint32_t k = 0; k < a->nints; k++) {
		int d = shape_norm_dim(a->ints[k], x->rank);
		if (d >= 0)
			red[d] = 1;
	}
}

/* Splits x's dims into kept and reduced ones: sizes, strides, counts. */
static void
split_dims(const Type *x, const int *red, int64_t *ks, int64_t *kst, int *nk,
           int64_t *rs, int64_t *rst, int *nr, int64_t *nout, int64_t *nred)
{
	int64_t st[SG_MAXRANK];
	cg_strides(x, st);
	*nk = *nr = 0;
	*nout = *nred = 1;
	for (int d = 0; d < x->rank; d++) {
		if (red[d]) {
			rs[*nr] = x->d[d];
			rst[(*nr)++] = st[d];
			*nred *= x->d[d];
		} else {
			ks[*nk] = x->d[d];
			kst[(*nk)++] = st[d];
			*nout *= x->d[d];
		}
	}
}

/* A reduction whose single output covers many elements: two kernels
 * (a part per block, then one block over the parts). */
static void
reduce_two_stage(CgGraph *G, const Node *n, const char *what, const char *params,
                 const char *args, const char *acc, const char *op,
                 const char *init, const char *loadexpr, int64_t nred,
                 const char *finish, DType rdt, const char *outvar)
{
	Cg *c = G->c;
	int64_t nparts = cg_grid(nred, 256);
	if (nparts > 1024)
		nparts = 1024;
	char *tmp = cg_alloc_tmp(G, n, acc, nparts * (int64_t)(strcmp(acc, "float") ? 8 : 4),
	                      "part");
	const char *k1 = cg_kernel_name(G, n, cg_fmt(c, "%s_part", what));
	const char *k2 = cg_kernel_name(G, n, cg_fmt(c, "%s_final", what));
	CG_EMIT(c->kern, "kernels.cu:reduce_partial", {"comment", cg_comment(G, n)},
	        {"what", what}, {"name", k1},
	        {"params", cg_fmt(c, "%s, %s *__restrict__ part", params, acc)},
	        {"acc", acc}, {"init", init}, {"nred", num(c, nred)}, {"op", op},
	        {"load", loadexpr});
	CG_EMIT(c->kern, "kernels.cu:reduce_final", {"what", what}, {"name", k2},
	        {"acc", acc}, {"tout", cg_ctype(rdt)}, {"init", init},
	        {"nparts", num(c, nparts)}, {"op", op},
	        {"store", cg_store(c, rdt, finish)});
	cg_launch(G, n, k1, nparts, 256, 0, cg_fmt(c, "%s, %s", args, tmp));
	cg_launch(G, n, k2, 1, 256, 0, cg_fmt(c, "%s, %s", tmp, outvar));
	cg_free_tmp(G, n, tmp);
}

/* v / n in type acc ("float" or "double"): a division by a zero count
 * (the mean of nothing, the variance of one element) is NaN, written as
 * such rather than as a constant division by zero. */
static char *
divide(Cg *c, const char *v, const char *acc, int64_t n)
{
	if (n == 0)
		return strcmp(acc, "double") == 0 ? "sg_nan()" : "sg_nanf()";
	return cg_fmt(c, "%s / (%s)%lld", v, acc, (long long)n);
}

/* sum mean amax amin var var_mean. */
static int
reduce(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = otype(G, n, 0), *r = vtype(G, n->res[0]);
	int red[SG_MAXRANK], nk, nr;
	int64_t ks[SG_MAXRANK], kst[SG_MAXRANK], rs[SG_MAXRANK], rst[SG_MAXRANK];
	int64_t nout, nred;
	reduced_dims(n, x, red);
	split_dims(x, red, ks, kst, &nk, rs, rst, &nr, &nout, &nred);
	if (nout == 0)
		return 1;
	DType rdt = (DType)r->dt;
	int fl = dtype_is_float((DType)x->dt) || dtype_is_float(rdt);
	const char *acc = fl ? cg_acc_type((DType)x->dt) : "sg_i64";
	const char *ov = G->vname[n->res[0]];
	CgInput in = cg_input(G, n);
	const char *xv = in.args;
	const char *cv = fl ? cg_acc_conv((DType)x->dt) : "";
	char *roff = cg_index(c, "r", nr, rs, rst, 0);
	char *loadexpr = cg_fmt(c, "%s(%s)", cv, cg_fmt(c, in.fmt, cg_fmt(c, "base + %s", roff)));
	CgRows rg = cg_rows(nout, nred);
	const char *kname = cg_kernel_name(G, n, op_name(n->op));
	if (n->op == OP_VAR || n->op == OP_VAR_MEAN) {
		int mean = n->op == OP_VAR_MEAN;
		char *params = cg_fmt(c, "%s, %s *__restrict__ out%s%s%s",
		                      in.params, cg_ctype(rdt),
		                      mean ? ", " : "", mean ? cg_ctype(rdt) : "",
		                      mean ? " *__restrict__ mean_out" : "");
		CG_EMIT(c->kern, "kernels.cu:reduce_var", {"comment", cg_comment(G, n)},
		        {"name", kname}, {"params", params}, {"block", num(c, rg.block)},
		        {"rows", num(c, rg.rows)}, {"tpr", num(c, rg.tpr)},
		        {"nout", num(c, nout)}, {"base", cg_index(c, "o", nk, ks, kst, 0)},
		        {"acc", acc}, {"nred", num(c, nred)}, {"load", loadexpr},
		        {"store_var", cg_store(c, rdt, divide(c, "q", acc, nred - 1))},
		        {"mean", mean ? "1" : ""}, {"store_mean", cg_store(c, rdt, "mean")});
		cg_launch(G, n, kname, rg.grid, rg.block, 0,
		       mean ? cg_fmt(c, "%s, %s, %s", xv, ov, G->vname[n->res[1]])
		            : cg_fmt(c, "%s, %s", xv, ov));
		return 1;
	}
	const char *op = n->op == OP_AMAX ? "sg_max_op" : n->op == OP_AMIN ? "sg_min_op"
	                                                                   : "sg_sum_op";
	const char *init = "0";
	if (n->op == OP_AMAX || n->op == OP_AMIN) {
		int mx = n->op == OP_AMAX;
		init = !fl ? (mx ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL")
		     : strcmp(acc, "float") == 0 ? (mx ? "-sg_inff()" : "sg_inff()")
		                                 : (mx ? "-sg_inf()" : "sg_inf()");
	}
	char *finish = n->op == OP_MEAN ? divide(c, "acc", acc, nred)
	                                : "acc";
	if (nout == 1 && nred >= 32768) {
		char *ld = cg_fmt(c, "%s(%s)", cv, cg_fmt(c, in.fmt, "r"));
		reduce_two_stage(G, n, op_name(n->op), in.params, xv, acc, op, init, ld,
		                 nred, finish, rdt, ov);
		return 1;
	}
	char *base = cg_index(c, "o", nk, ks, kst, 0);
	if (strcmp(base, "o") == 0 && nout > 1) {
		/* The outputs are the innermost elements: read them coalesced. */
		char *ld = cg_fmt(c, in.fmt, cg_fmt(c, "o + %s", roff));
		CG_EMIT(c->kern, "kernels.cu:reduce_cols", {"comment", cg_comment(G, n)},
		        {"name", kname}, {"xparams", in.params},
		        {"tout", cg_ctype(rdt)}, {"acc", acc}, {"init", init},
		        {"nout", num(c, nout)}, {"nred", num(c, nred)}, {"op", op},
		        {"load", cg_fmt(c, "%s(%s)", cv, ld)},
		        {"store", cg_store(c, rdt, finish)});
		cg_launch(G, n, kname, (nout + 31) / 32, 256, 0, cg_fmt(c, "%s, %s", xv, ov));
		return 1;
	}
	CG_EMIT(c->kern, "kernels.cu:reduce", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"xparams", in.params}, {"tout", cg_ctype(rdt)},
	        {"block", num(c, rg.block)}, {"rows", num(c, rg.rows)},
	        {"tpr", num(c, rg.tpr)}, {"nout", num(c, nout)},
	        {"base", base}, {"acc", acc},
	        {"init", init}, {"nred", num(c, nred)}, {"op", op}, {"load", loadexpr},
	        {"store", cg_store(c, rdt, finish)});
	cg_launch(G, n, kname, rg.grid, rg.block, 0, cg_fmt(c, "%s, %s", xv, ov));
	return 1;
}

/* x as [outer, len, inner] around dim d. */
void
cg_around(const Type *x, int d, int64_t *outer, int64_t *len, int64_t *inner)
{
	*outer = *len = *inner = 1;
	for (int i = 0; i < x->rank; i++) {
		if (i < d)
			*outer *= x->d[i];
		else if (i == d)
			*len = x->d[i];
		else
			*inner *= x->d[i];
	}
}

/* The offset of row o of an [outer, len, inner] view. */
char *
cg_row_base(Cg *c, int64_t outer, int64_t len, int64_t inner)
{
	int64_t sz[2] = {outer, inner}, st[2] = {len * inner, 1};
	return cg_index(c, "o", 2, sz, st, 0);
}

/* ------------------------------------------------------------------ kernel library */

/* Pastes section `code` of sgk_common.cuh and of the library file `file`
 * (codegen_templates/kernels/) into the kernels, once a graph (the
 * bodies carry include guards, so another graph's copy is harmless). */
static void
use_library(CgGraph *G, const char *file)
{
	const char *files[2] = {"sgk_common.cuh", file};
	char *key = cg_fmt(G->c, "#%s", file);
	if (map_get(&G->kernames, key, strlen(key)))
		return;
	map_put(&G->kernames, key, strlen(key), 1);
	CG_EMIT(G->c->kern, "prelude.cu:library_begin", {"x", ""});
	for (int i = 0; i < 2; i++) {
		key = cg_fmt(G->c, "#%s", files[i]);
		if (i == 0 && map_get(&G->kernames, key, strlen(key)))
			continue;
		map_put(&G->kernames, key, strlen(key), 1);
		CG_EMIT(G->c->kern, cg_fmt(G->c, "%s:code", files[i]), {"x", ""});
	}
	CG_EMIT(G->c->kern, "prelude.cu:library_end", {"x", ""});
}

/* softmax, log_softmax, layer_norm, rms_norm over the last dim through the
 * row kernels of sgk_rows.cuh: f16, bf16, f32 whose input is in memory
 * (no pointwise producer fused in at -O2).  0, with nothing emitted,
 * otherwise. */
static int
rows_library(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = otype(G, n, 0);
	DType dt = (DType)x->dt;
	if (dt != DT_F16 && dt != DT_BF16 && dt != DT_F32)
		return 0;
	if (G->prologue && G->prologue[n - G->g->nodes.v] >= 0)
		return 0;
	if (x->rank < 1 || x->d[x->rank - 1] < 1 || x->d[x->rank - 1] > INT32_MAX)
		return 0;
	int64_t len = x->d[x->rank - 1], rows = type_numel(x) / len;
	int soft = n->op == OP_SOFTMAX || n->op == OP_LOG_SOFTMAX;
	if (soft && shape_norm_dim(ir_attr_int(n, "dim", -1), x->rank) != x->rank - 1)
		return 0;
	use_library(G, "sgk_rows.cuh");
	const char *t = cg_ctype(dt), *rv = G->vname[n->res[0]];
	const char *xv = G->vname[n->opnd[0].v], *s = num(c, cg_stream(n));
	char *call;
	if (soft) {
		call = cg_fmt(c, "sg_launch_softmax_fwd<%s>(%s, %s, %lld, %lld, %d, sgrt_stream(rt, %s))",
		              t, xv, rv, (long long)rows, (long long)len,
		              n->op == OP_LOG_SOFTMAX, s);
	} else {
		int rms = n->op == OP_RMS_NORM;
		double eps = ir_attr_float(n, "eps", rms ? 1e-6 : 1e-5);
		const char *w = n->nopnd > 1 ? G->vname[n->opnd[1].v] : "NULL";
		const char *b = n->nopnd > 2 ? G->vname[n->opnd[2].v] : "NULL";
		call = cg_fmt(c, "sg_launch_layer_norm_fwd<%s>(%s, %s, %s, %s, NULL, NULL, %lld, "
		              "%lld, %s, %d, sgrt_stream(rt, %s))", t, xv, w, b, rv,
		              (long long)rows, (long long)len,
		              cg_lit_float(c, (double)(float)eps, 1), rms, s);
	}
	CG_EMIT(G->body, "host.cu:lib_call", {"s", s},
	        {"kname", cg_kernel_name(G, n, op_name(n->op))}, {"line", num(c, n->loc.line)},
	        {"call", call});
	return 1;
}

/* softmax, log_softmax. */
static int
softmax(CgGraph *G, const Node *n)
{
	if (type_numel(otype(G, n, 0)) > 0 && rows_library(G, n))
		return 1;
	Cg *c = G->c;
	const Type *x = otype(G, n, 0);
	DType dt = (DType)x->dt;
	int d = x->rank ? shape_norm_dim(ir_attr_int(n, "dim", -1), x->rank) : 0;
	int64_t outer, len, inner;
	cg_around(x, d, &outer, &len, &inner);
	int64_t nout = outer * inner;
	if (nout == 0 || len == 0)
		return 1;
	CgRows rg = cg_rows(nout, len);
	const char *acc = cg_acc_type(dt), *kname = cg_kernel_name(G, n, op_name(n->op));
	char *roff = inner == 1 ? "r" : cg_fmt(c, "r * %lld", (long long)inner);
	CgInput in = cg_input(G, n);
	char *ld = cg_fmt(c, "%s(%s)", cg_acc_conv(dt),
	                  cg_fmt(c, in.fmt, cg_fmt(c, "base + %s", roff)));
	CG_EMIT(c->kern, "kernels.cu:softmax", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"xparams", in.params}, {"t", cg_ctype(dt)}, {"block", num(c, rg.block)},
	        {"rows", num(c, rg.rows)},
	        {"tpr", num(c, rg.tpr)}, {"nout", num(c, nout)},
	        {"base", cg_row_base(c, outer, len, inner)}, {"acc", acc},
	        {"inf", dt == DT_F64 ? "sg_inf()" : "sg_inff()"}, {"len", num(c, len)},
	        {"load", ld}, {"roff", roff},
	        {"store", cg_store(c, dt, n->op == OP_LOG_SOFTMAX ? "v - ls" : "sg_exp(v) / s")});
	cg_launch(G, n, kname, rg.grid, rg.block, 0,
	       cg_fmt(c, "%s, %s", in.args, G->vname[n->res[0]]));
	return 1;
}

/* layer_norm, rms_norm over the last dim. */
static int
norm(CgGraph *G, const Node *n)
{
	if (type_numel(otype(G, n, 0)) > 0 && rows_library(G, n))
		return 1;
	Cg *c = G->c;
	const Type *x = otype(G, n, 0);
	DType dt = (DType)x->dt;
	int64_t len = x->d[x->rank - 1], nout = len ? type_numel(x) / len : 0;
	if (nout == 0)
		return 1;
	int hw = n->nopnd > 1, hb = n->nopnd > 2;
	const char *ct = cg_ctype(dt), *acc = cg_acc_type(dt);
	CgInput in = cg_input(G, n);
	char *params = cg_fmt(c, "%s, ", in.params), *args = in.args;
	if (hw) {
		params = cg_fmt(c, "%sconst %s *__restrict__ w, ", params, ct);
		args = cg_fmt(c, "%s, %s", args, G->vname[n->opnd[1].v]);
	}
	if (hb) {
		params = cg_fmt(c, "%sconst %s *__restrict__ b, ", params, ct);
		args = cg_fmt(c, "%s, %s", args, G->vname[n->opnd[2].v]);
	}
	params = cg_fmt(c, "%s%s *__restrict__ out", params, ct);
	args = cg_fmt(c, "%s, %s", args, G->vname[n->res[0]]);
	CgRows rg = cg_rows(nout, len);
	const char *kname = cg_kernel_name(G, n, op_name(n->op));
	double eps = ir_attr_float(n, "eps", n->op == OP_RMS_NORM ? 1e-6 : 1e-5);
	CG_EMIT(c->kern, "kernels.cu:norm", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"params", params}, {"block", num(c, rg.block)}, {"rows", num(c, rg.rows)},
	        {"tpr", num(c, rg.tpr)}, {"nout", num(c, nout)}, {"len", num(c, len)},
	        {"acc", acc}, {"layer", n->op == OP_LAYER_NORM ? "1" : ""},
	        {"load", cg_fmt(c, "%s(%s)", cg_acc_conv(dt), cg_fmt(c, in.fmt, "base + r"))},
	        {"eps", cg_lit_float(c, dt == DT_F64 ? eps : (double)(float)eps, dt != DT_F64)},
	        {"w", hw ? "1" : ""}, {"b", hb ? "1" : ""}, {"opc", cg_acc_conv(dt)},
	        {"store", cg_store(c, dt, "v")});
	cg_launch(G, n, kname, rg.grid, rg.block, 0, args);
	return 1;
}

/* cross_entropy(logits, target): mean over the rows whose target is not
 * -100 of logsumexp - logit[target]; the class dim is 1 (0 for 1-d). */
static int
cross_entropy(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = otype(G, n, 0), *t = otype(G, n, 1);
	DType dt = (DType)x->dt, rdt = (DType)vtype(G, n->res[0])->dt;
	int64_t outer, len, inner;
	cg_around(x, x->rank >= 2 ? 1 : 0, &outer, &len, &inner);
	int64_t nout = outer * inner;
	const char *acc = cg_acc_type(dt);
	const char *ov = G->vname[n->res[0]];
	if (nout == 0) {
		const char *kname = cg_kernel_name(G, n, "cross_entropy_empty");
		CG_EMIT(c->kern, "kernels.cu:fill", {"comment", cg_comment(G, n)}, {"name", kname},
		        {"t", cg_ctype(rdt)}, {"idx", "int"}, {"n", "1"},
		        {"value", cg_store(c, rdt, dt == DT_F64 ? "sg_nan()" : "sg_nanf()")});
		cg_launch(G, n, kname, 1, 32, 0, ov);
		return 1;
	}
	char *roff = inner == 1 ? "r" : cg_fmt(c, "r * %lld", (long long)inner);
	CgRows rg = cg_rows(nout, len);
	char *tmp = cg_alloc_tmp(G, n, acc, 2 * nout * (dt == DT_F64 ? 8 : 4), "ce");
	const char *k1 = cg_kernel_name(G, n, "cross_entropy_rows");
	const char *k2 = cg_kernel_name(G, n, "cross_entropy_mean");
	CG_EMIT(c->kern, "kernels.cu:ce_rows", {"comment", cg_comment(G, n)}, {"name", k1},
	        {"t", cg_ctype(dt)}, {"tt", cg_ctype((DType)t->dt)}, {"acc", acc},
	        {"block", num(c, rg.block)}, {"rows", num(c, rg.rows)},
	        {"tpr", num(c, rg.tpr)}, {"nout", num(c, nout)}, {"len", num(c, len)},
	        {"file", cg_source_name(c)}, {"line", num(c, n->loc.line)},
	        {"base", cg_row_base(c, outer, len, inner)},
	        {"inf", dt == DT_F64 ? "sg_inf()" : "sg_inff()"},
	        {"load", cg_fmt(c, "%s(sg_ld(x[base + %s]))", cg_acc_conv(dt), roff)});
	CG_EMIT(c->kern, "kernels.cu:ce_mean", {"name", k2}, {"acc", acc},
	        {"t", cg_ctype(rdt)}, {"nout", num(c, nout)}, {"store", cg_store(c, rdt, "s / c")});
	cg_launch(G, n, k1, rg.grid, rg.block, 0,
	       cg_fmt(c, "%s, %s, %s", G->vname[n->opnd[0].v], G->vname[n->opnd[1].v], tmp));
	cg_launch(G, n, k2, 1, 256, 0, cg_fmt(c, "%s, %s", tmp, ov));
	cg_free_tmp(G, n, tmp);
	return 1;
}

/* Strides with which an operand of type t is read at each index of the
 * broadcast shape s (0 along broadcast dims). */
static void
bcast_strides(const Type *t, const Type *s, int64_t *bst)
{
	int64_t st[SG_MAXRANK];
	cg_strides(t, st);
	for (int d = 0; d < s->rank; d++) {
		int td = d - (s->rank - t->rank);
		bst[d] = td >= 0 && t->d[td] != 1 ? st[td] : 0;
	}
}

/* mse_loss(a, b): mean of (a - b)^2 over their broadcast shape. */
static int
mse_loss(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *a = otype(G, n, 0), *b = otype(G, n, 1);
	DType rdt = (DType)vtype(G, n->res[0])->dt;
	Type s;
	shape_broadcast(a, b, &s);
	int64_t N = type_numel(&s), sa[SG_MAXRANK], sb[SG_MAXRANK];
	bcast_strides(a, &s, sa);
	bcast_strides(b, &s, sb);
	const char *acc = cg_acc_type(rdt), *cv = cg_acc_conv(rdt);
	char *ld = cg_fmt(c, "sg_sq(%s(sg_ld(a[%s])) - %s(sg_ld(b[%s])))", cv,
	                  cg_index(c, "r", s.rank, s.d, sa, 0), cv,
	                  cg_index(c, "r", s.rank, s.d, sb, 0));
	char *params = cg_fmt(c, "const %s *__restrict__ a, const %s *__restrict__ b",
	                      cg_ctype((DType)a->dt), cg_ctype((DType)b->dt));
	reduce_two_stage(G, n, "mse_loss", params,
	                 cg_fmt(c, "%s, %s", G->vname[n->opnd[0].v], G->vname[n->opnd[1].v]),
	                 acc, "sg_sum_op", "0", ld, N,
	                 divide(c, "acc", acc, N), rdt,
	                 G->vname[n->res[0]]);
	return 1;
}

/* ------------------------------------------------------------------ matrix products */

/* The batch dims of the operands (all but their last two; 1-d operands
 * have none), broadcast: the batch shape and, per operand, each batch
 * dim's element stride (0 where it broadcasts).  Returns the batch rank. */
int
cg_batch_bcast(const Type **ops, int nop, int64_t *shape, int64_t st[][SG_MAXRANK])
{
	int rank = 0;
	for (int k = 0; k < nop; k++)
		if (ops[k]->rank - 2 > rank)
			rank = ops[k]->rank - 2;
	for (int d = 0; d < rank; d++)
		shape[d] = 1;
	for (int k = 0; k < nop; k++) {
		int br = ops[k]->rank > 2 ? ops[k]->rank - 2 : 0;
		for (int d = 0; d < br; d++)
			if (ops[k]->d[d] != 1)
				shape[rank - br + d] = ops[k]->d[d];
	}
	for (int k = 0; k < nop; k++) {
		const Type *t = ops[k];
		int br = t->rank > 2 ? t->rank - 2 : 0;
		int64_t s = t->rank >= 2 ? t->d[t->rank - 1] * t->d[t->rank - 2] : type_numel(t);
		for (int d = rank - 1; d >= 0; d--) {
			int td = d - (rank - br);
			st[k][d] = td >= 0 && t->d[td] != 1 ? s : 0;
			if (td >= 0)
				s *= t->d[td];
		}
	}
	return rank;
}

/* The number of batch items of t (product of all but its last two dims). */
static int64_t
batch_numel(const Type *t)
{
	int64_t n = 1;
	for (int d = 0; d + 2 < t->rank; d++)
		n *= t->d[d];
	return n;
}

/* A strided copy kernel: out[dstidx(i)] = x[srcidx(i)] for i < count,
 * converted when the dtypes differ. */
static void
copy_kernel(CgGraph *G, const Node *n, const char *what, const char *src, DType sdt,
            const char *dst, DType ddt, int64_t count, const char *srcidx,
            const char *dstidx)
{
	Cg *c = G->c;
	if (count == 0)
		return;
	const char *kname = cg_kernel_name(G, n, what);
	char *x = cg_fmt(c, "x[%s]", srcidx);
	char *value = sdt == ddt ? x : cg_store(c, ddt, cg_fmt(c, "sg_ld(%s)", x));
	CG_EMIT(c->kern, "kernels.cu:copy", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"tin", cg_ctype(sdt)}, {"tout", cg_ctype(ddt)}, {"idx", cg_index_type(count)},
	        {"n", num(c, count)}, {"dst", dstidx}, {"value", value});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0, cg_fmt(c, "%s, %s", src, dst));
}

/* Materialises operand t (pointer var) broadcast over the batch shape:
 * returns the temporary holding nb copies of its matrix. */
static char *
expand_batch(CgGraph *G, const Node *n, const char *var, const Type *t, int brank,
             const int64_t *bshape, const int64_t *st, const char *what)
{
	Cg *c = G->c;
	int64_t sz[SG_MAXRANK + 1], str[SG_MAXRANK + 1], nb = 1;
	int64_t mat = t->d[t->rank - 1] * t->d[t->rank - 2];
	for (int d = 0; d < brank; d++) {
		sz[d] = bshape[d];
		str[d] = st[d];
		nb *= bshape[d];
	}
	sz[brank] = mat;
	str[brank] = 1;
	char *tmp = cg_alloc_tmp(G, n, cg_ctype((DType)t->dt), nb * mat * dtype_size((DType)t->dt),
	                      what);
	copy_kernel(G, n, cg_fmt(c, "expand_%s", what), var, (DType)t->dt, tmp,
	            (DType)t->dt, nb * mat, cg_index(c, "i", brank + 1, sz, str, 0), "i");
	return tmp;
}

/* One sgrt_gemm statement. */
static void
gemm(CgGraph *G, const Node *n, DType dt, int trans_b, int64_t m, int64_t nn, int64_t k,
     int64_t batch, int64_t sa, int64_t sb, const char *bias, const char *a,
     const char *b, const char *out)
{
	Cg *c = G->c;
	CG_EMIT(G->body, "host.cu:gemm", {"dtype", cg_sgrt_dtype(dt)},
	        {"trans_b", trans_b ? "1" : "0"}, {"m", num(c, m)}, {"n", num(c, nn)},
	        {"k", num(c, k)}, {"ldb", ""}, {"batch", batch > 1 ? num(c, batch) : ""},
	        {"stride_a", num(c, sa)}, {"stride_b", num(c, sb)},
	        {"bias", bias ? bias : ""}, {"s", num(c, cg_stream(n))}, {"a", a},
	        {"b", b}, {"c", out}, {"kname", cg_kernel_name(G, n, op_name(n->op))},
	        {"line", num(c, n->loc.line)});
}

/* out = 0 (bytes of it). */
static void
zero(CgGraph *G, const Node *n, const char *var, int64_t bytes)
{
	if (bytes)
		CG_EMIT(G->body, "host.cu:memset", {"s", num(G->c, cg_stream(n))}, {"dst", var},
		        {"bytes", num(G->c, bytes)}, {"name", cg_fmt(G->c, "zero_%s", var + 2)},
		        {"line", num(G->c, n->loc.line)});
}

/* matmul(a, b) as torch.matmul (1-d operands, broadcast batch dims). */
static int
matmul(CgGraph *G, const Node *n)
{
	const Type *a = otype(G, n, 0), *b = otype(G, n, 1), *r = vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t m = a->rank >= 2 ? a->d[a->rank - 2] : 1, k = a->d[a->rank - 1];
	int64_t nn = b->rank >= 2 ? b->d[b->rank - 1] : 1;
	const char *av = G->vname[n->opnd[0].v], *bv = G->vname[n->opnd[1].v];
	const char *rv = G->vname[n->res[0]];
	const Type *ops[2] = {a, b};
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK];
	int brank = cg_batch_bcast(ops, 2, bshape, st);
	int64_t nb = 1;
	for (int d = 0; d < brank; d++)
		nb *= bshape[d];
	if (type_numel(r) == 0)
		return 1;
	if (k == 0) {
		zero(G, n, rv, type_numel(r) * dtype_size(dt));
		return 1;
	}
	if (nb == 1 || b->rank <= 2) {
		gemm(G, n, dt, 0, m * nb, nn, k, 0, 0, 0, NULL, av, bv, rv);
		return 1;
	}
	const char *ta = av, *tb = bv;
	int64_t na = batch_numel(a), nbb = batch_numel(b);
	if (na != nb && na != 1)
		ta = expand_batch(G, n, av, a, brank, bshape, st[0], "a");
	if (nbb != nb && nbb != 1)
		tb = expand_batch(G, n, bv, b, brank, bshape, st[1], "b");
	gemm(G, n, dt, 0, m, nn, k, nb, na == 1 ? 0 : m * k, nbb == 1 ? 0 : k * nn, NULL,
	     ta, tb, rv);
	if (ta != av)
		cg_free_tmp(G, n, ta);
	if (tb != bv)
		cg_free_tmp(G, n, tb);
	return 1;
}

/* out += bias broadcast over rows (f64, whose cuBLASLt products take no
 * bias epilogue, and k = 0). */
static void
add_bias(CgGraph *G, const Node *n, DType dt, const char *bias, const char *out,
         int64_t count, int64_t nout)
{
	Cg *c = G->c;
	if (count == 0)
		return;
	const char *kname = cg_kernel_name(G, n, "bias");
	char *v = cg_store(c, dt, cg_fmt(c, "sg_ld(out[i]) + sg_ld(x[i %% %lld])", (long long)nout));
	CG_EMIT(c->kern, "kernels.cu:copy", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"tin", cg_ctype(dt)}, {"tout", cg_ctype(dt)}, {"idx", cg_index_type(count)},
	        {"n", num(c, count)}, {"dst", "i"}, {"value", v});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0, cg_fmt(c, "%s, %s", bias, out));
}

/* linear(x, w, b?) = x @ w^T + b. */
static int
linear(CgGraph *G, const Node *n)
{
	const Type *x = otype(G, n, 0), *w = otype(G, n, 1), *r = vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t k = w->d[1], nout = w->d[0], rows = k ? type_numel(x) / k : 0;
	const char *bias = n->nopnd > 2 ? G->vname[n->opnd[2].v] : NULL;
	const char *rv = G->vname[n->res[0]];
	if (k == 0)
		rows = nout ? type_numel(r) / nout : 0;
	if (type_numel(r) == 0)
		return 1;
	if (k == 0) {
		zero(G, n, rv, type_numel(r) * dtype_size(dt));
		if (bias)
			add_bias(G, n, dt, bias, rv, type_numel(r), nout);
		return 1;
	}
	int epilogue = bias && dt != DT_F64;
	gemm(G, n, dt, 1, rows, nout, k, 0, 0, 0, epilogue ? bias : NULL,
	     G->vname[n->opnd[0].v], G->vname[n->opnd[1].v], rv);
	if (bias && !epilogue)
		add_bias(G, n, dt, bias, rv, type_numel(r), nout);
	return 1;
}

/* The batch dims of q, k, v (operands o..o+2 of n) as the flash kernels'
 * two, [nb0, nb1], with each operand's element strides (0 where it
 * broadcasts): size-1 dims dropped, neighbours merged where every operand
 * allows.  0 when more than two dims remain. */
static int
flash_batch(CgGraph *G, const Node *n, int o, int64_t nb[2], int64_t st[3][2])
{
	const Type *ops[3] = {otype(G, n, o), otype(G, n, o + 1), otype(G, n, o + 2)};
	int64_t shape[SG_MAXRANK], bst[3][SG_MAXRANK], sz[SG_MAXRANK], s[3][SG_MAXRANK];
	int brank = cg_batch_bcast(ops, 3, shape, bst), r = 0;
	for (int d = 0; d < brank; d++) {
		if (shape[d] == 1)
			continue;
		int merge = r > 0;
		for (int k = 0; k < 3 && merge; k++)
			merge = s[k][r - 1] == bst[k][d] * shape[d];
		if (merge) {
			sz[r - 1] *= shape[d];
			for (int k = 0; k < 3; k++)
				s[k][r - 1] = bst[k][d];
			continue;
		}
		sz[r] = shape[d];
		for (int k = 0; k < 3; k++)
			s[k][r] = bst[k][d];
		r++;
	}
	if (r > 2)
		return 0;
	nb[0] = nb[1] = 1;
	memset(st, 0, 3 * sizeof st[0]);
	for (int d = 0; d < r; d++) {
		nb[2 - r + d] = sz[d];
		for (int k = 0; k < 3; k++)
			st[k][2 - r + d] = s[k][d];
	}
	return 1;
}

int
cg_flash_attention(CgGraph *G, const Node *n, int bwd)
{
	Cg *c = G->c;
	int o = bwd ? 1 : 0;
	const Type *q = otype(G, n, o), *k = otype(G, n, o + 1), *v = otype(G, n, o + 2);
	DType dt = (DType)q->dt;
	int64_t L = q->d[q->rank - 2], E = q->d[q->rank - 1];
	int64_t S = k->d[k->rank - 2], Ev = v->d[v->rank - 1];
	int64_t nb[2], st[3][2];
	if (dt != DT_F16 && dt != DT_BF16 && dt != DT_F32)
		return 0;
	if (k->dt != dt || v->dt != dt || !flash_batch(G, n, o, nb, st))
		return 0;
	if (L < 1 || S < 1 || E < 1 || Ev < 1 || E > 256 || Ev > 256 ||
	    L > INT32_MAX || S > INT32_MAX || nb[0] * nb[1] > INT32_MAX)
		return 0;
	/* The backward writes dq, dk, dv whole: no broadcast batch dims. */
	const Type *t3[3] = {q, k, v};
	for (int i = 0; bwd && i < 3; i++) {
		if (t3[i]->rank != q->rank)
			return 0;
		for (int d = 0; d < q->rank - 2; d++)
			if (t3[i]->d[d] != q->d[d])
				return 0;
	}
	const Attr *sa = ir_attr(n, "scale");
	double scale = sa ? sa->f : 1.0 / sqrt((double)E);
	if (!((float)scale > 0.0f) || isinf((float)scale))
		return 0;
	use_library(G, "sgk_attention.cuh");
	int64_t rows = nb[0] * nb[1] * L;
	const char *rv = G->vname[n->res[0]], *out = rv;
	char *lse = cg_alloc_tmp(G, n, "float", rows * 4, "lse"), *delta = NULL;
	if (bwd) {
		out = cg_alloc_tmp(G, n, cg_ctype(dt), rows * Ev * dtype_size(dt), "o");
		delta = cg_alloc_tmp(G, n, "float", rows * 4, "delta");
	}
	const char *nm[3] = {"q", "k", "v"};
	char *strides = "";
	for (int i = 0; i < 3; i++)
		strides = cg_fmt(c, "%s\t\tfp.%s_s0 = %lld;\n\t\tfp.%s_s1 = %lld;\n", strides,
		                 nm[i], (long long)st[i][0], nm[i], (long long)st[i][1]);
	CG_EMIT(G->body, "host.cu:flash", {"nb0", num(c, nb[0])}, {"nb1", num(c, nb[1])},
	        {"l", num(c, L)}, {"slen", num(c, S)}, {"e", num(c, E)}, {"ev", num(c, Ev)},
	        {"scale", cg_lit_float(c, (double)(float)scale, 1)},
	        {"causal", ir_attr_int(n, "causal", 0) ? "1" : "0"},
	        {"q", G->vname[n->opnd[o].v]}, {"k", G->vname[n->opnd[o + 1].v]},
	        {"v", G->vname[n->opnd[o + 2].v]},
	        {"o", out}, {"lse", lse}, {"strides", strides}, {"t", cg_ctype(dt)},
	        {"s", num(c, cg_stream(n))}, {"line", num(c, n->loc.line)},
	        {"kname", cg_kernel_name(G, n, "flash_fwd")}, {"bwd", bwd ? "1" : ""},
	        {"g", bwd ? G->vname[n->opnd[0].v] : ""}, {"dq", bwd ? rv : ""},
	        {"dk", bwd ? G->vname[n->res[1]] : ""}, {"dv", bwd ? G->vname[n->res[2]] : ""},
	        {"delta", bwd ? delta : ""},
	        {"kname_bwd", bwd ? cg_kernel_name(G, n, "flash_bwd") : ""});
	if (bwd) {
		cg_free_tmp(G, n, delta);
		cg_free_tmp(G, n, out);
	}
	cg_free_tmp(G, n, lse);
	return 1;
}

/* scaled_dot_product_attention(q, k, v, causal=, scale=): the flash
 * kernels where they apply, else one block per query row. */
static int
sdpa(CgGraph *G, const Node *n)
{
	if (type_numel(vtype(G, n->res[0])) > 0 && cg_flash_attention(G, n, 0))
		return 1;
	Cg *c = G->c;
	const Type *q = otype(G, n, 0), *k = otype(G, n, 1), *v = otype(G, n, 2);
	const Type *r = vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t L = q->d[q->rank - 2], E = q->d[q->rank - 1];
	int64_t S = k->d[k->rank - 2], Ev = v->d[v->rank - 1];
	const Type *ops[3] = {q, k, v};
	int64_t bshape[SG_MAXRANK], st[3][SG_MAXRANK], nb = 1;
	int brank = cg_batch_bcast(ops, 3, bshape, st);
	for (int d = 0; d < brank; d++)
		nb *= bshape[d];
	if (type_numel(r) == 0)
		return 1;
	const Attr *sa = ir_attr(n, "scale");
	double scale = sa ? sa->f : 1.0 / sqrt((double)E);
	int f = dt != DT_F64, tile = 64;
	int64_t smem = (E + tile + Ev) * (f ? 4 : 8);
	const char *kname = cg_kernel_name(G, n, "sdpa");
	CG_EMIT(c->kern, "kernels.cu:sdpa", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"t", cg_ctype(dt)}, {"acc", cg_acc_type(dt)}, {"tile", num(c, tile)},
	        {"e", num(c, E)}, {"ev", num(c, Ev)}, {"l", num(c, L)}, {"s", num(c, S)},
	        {"qbase", cg_index(c, "b", brank, bshape, st[0], 0)},
	        {"kbase", cg_index(c, "b", brank, bshape, st[1], 0)},
	        {"vbase", cg_index(c, "b", brank, bshape, st[2], 0)},
	        {"opc", cg_acc_conv(dt)}, {"inf", f ? "sg_inff()" : "sg_inf()"},
	        {"causal", ir_attr_int(n, "causal", 0) ? "1" : "0"},
	        {"scale", cg_lit_float(c, f ? (double)(float)scale : scale, f)},
	        {"store", cg_store(c, dt, "acc[e] / l")});
	if (smem > 48 * 1024)
		CG_EMIT(G->body, "host.cu:smem_attr", {"kname", kname}, {"smem", num(c, smem)},
		        {"line", num(c, n->loc.line)});
	cg_launch(G, n, kname, nb * L, 128, smem,
	       cg_fmt(c, "%s, %s, %s, %s", G->vname[n->opnd[0].v], G->vname[n->opnd[1].v],
	              G->vname[n->opnd[2].v], G->vname[n->res[0]]));
	return 1;
}

/* ------------------------------------------------------------------ shape ops */

/* A same-bytes copy (reshape, squeeze, unsqueeze, contiguous). */
static void
flat_copy(CgGraph *G, const Node *n, const char *src, const char *dst, int64_t bytes,
          const char *what)
{
	if (bytes)
		CG_EMIT(G->body, "host.cu:copy", {"s", num(G->c, cg_stream(n))}, {"dst", dst},
		        {"src", src}, {"bytes", num(G->c, bytes)}, {"name", what},
		        {"line", num(G->c, n->loc.line)});
}

/* transpose, permute, expand, slice: the result read from x with strides. */
static int
strided(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = otype(G, n, 0), *r = vtype(G, n->res[0]);
	int64_t xs[SG_MAXRANK], st[SG_MAXRANK], base = 0;
	cg_strides(x, xs);
	int perm[SG_MAXRANK];
	for (int d = 0; d < x->rank; d++)
		perm[d] = d;
	switch (n->op) {
	case OP_TRANSPOSE: {
		int d0 = shape_norm_dim(ir_attr_int(n, "dim0", 0), x->rank);
		int d1 = shape_norm_dim(ir_attr_int(n, "dim1", 0), x->rank);
		if (x->rank && d0 >= 0 && d1 >= 0) {
			perm[d0] = d1;
			perm[d1] = d0;
		}
		break;
	}
	case OP_PERMUTE: {
		const Attr *a = ir_attr(n, "dims");
		for (int d = 0; a && d < x->rank && (uint32_t)d < a->nints; d++)
			perm[d] = shape_norm_dim(a->ints[d], x->rank);
		break;
	}
	case OP_EXPAND:
		bcast_strides(x, r, st);
		break;
	case OP_SLICE: {
		int d = shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank);
		int64_t size = x->d[d], start = ir_attr_int(n, "start", 0);
		if (start < 0)
			start += size;
		start = start < 0 ? 0 : start > size ? size : start;
		base = start * xs[d];
		break;
	}
	}
	if (n->op != OP_EXPAND)
		for (int d = 0; d < r->rank; d++)
			st[d] = n->op == OP_SLICE ? xs[d] : xs[perm[d]];
	copy_kernel(G, n, op_name(n->op), G->vname[n->opnd[0].v], (DType)x->dt,
	            G->vname[n->res[0]], (DType)r->dt, type_numel(r),
	            cg_index(c, "i", r->rank, r->d, st, base), "i");
	return 1;
}

/* cat: each operand copied (and converted) into its part of the result. */
static int
cat(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *r = vtype(G, n->res[0]);
	int d = shape_norm_dim(ir_attr_int(n, "dim", 0), r->rank);
	int64_t rs[SG_MAXRANK], off = 0;
	cg_strides(r, rs);
	for (uint32_t k = 0; k < n->nopnd; k++) {
		const Type *p = otype(G, n, (int)k);
		copy_kernel(G, n, cg_fmt(c, "cat%u", k), G->vname[n->opnd[k].v], (DType)p->dt,
		            G->vname[n->res[0]], (DType)r->dt, type_numel(p), "i",
		            cg_index(c, "i", p->rank, p->d, rs, off * rs[d]));
		off += p->d[d];
	}
	return 1;
}

/* chunk, split: result j is x's slice at the sum of the sizes before it. */
static int
split(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = otype(G, n, 0);
	int d = shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank);
	int64_t xs[SG_MAXRANK], off = 0;
	cg_strides(x, xs);
	for (uint32_t j = 0; j < n->nres; j++) {
		const Type *r = vtype(G, n->res[j]);
		copy_kernel(G, n, cg_fmt(c, "%s%u", op_name(n->op), j), G->vname[n->opnd[0].v],
		            (DType)x->dt, G->vname[n->res[j]], (DType)r->dt, type_numel(r),
		            cg_index(c, "i", r->rank, r->d, xs, off * xs[d]), "i");
		off += r->d[d];
	}
	return 1;
}

/* ------------------------------------------------------------------ creation, indexing */

/* out[i] = value for i < count. */
static void
fill(CgGraph *G, const Node *n, const char *what, const char *out, DType dt,
     int64_t count, const char *value)
{
	Cg *c = G->c;
	if (count == 0)
		return;
	const char *kname = cg_kernel_name(G, n, what);
	CG_EMIT(c->kern, "kernels.cu:fill", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"t", cg_ctype(dt)}, {"idx", cg_index_type(count)}, {"n", num(c, count)},
	        {"value", value});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0, out);
}

/* zeros ones full arange. */
static int
creation(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *r = vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t count = type_numel(r);
	const char *rv = G->vname[n->res[0]];
	switch (n->op) {
	case OP_ZEROS:
		zero(G, n, rv, count * dtype_size(dt));
		break;
	case OP_ONES:
		fill(G, n, "ones", rv, dt, count, cg_store(c, dt, "(sg_i64)1"));
		break;
	case OP_FULL:
		fill(G, n, "full", rv, dt, count, cg_store(c, dt, num_value(c, ir_attr(n, "value"))));
		break;
	case OP_ARANGE:
		fill(G, n, "arange", rv, dt, count, cg_store(c, dt, "(sg_i64)i"));
		break;
	}
	return 1;
}

/* embedding(idx, table): rows of the table. */
static int
embedding(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *idx = otype(G, n, 0), *tab = otype(G, n, 1), *r = vtype(G, n->res[0]);
	int64_t count = type_numel(r), rows = tab->d[0], width = rows ? type_numel(tab) / rows : 0;
	if (count == 0)
		return 1;
	const char *kname = cg_kernel_name(G, n, "embedding");
	CG_EMIT(c->kern, "kernels.cu:embedding", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"ti", cg_ctype((DType)idx->dt)}, {"t", cg_ctype((DType)tab->dt)},
	        {"n", num(c, count)}, {"width", num(c, width)}, {"rows", num(c, rows)},
	        {"file", cg_source_name(c)}, {"line", num(c, n->loc.line)});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0,
	       cg_fmt(c, "%s, %s, %s", G->vname[n->opnd[0].v], G->vname[n->opnd[1].v],
	              G->vname[n->res[0]]));
	return 1;
}

/* gather(x, idx, dim=): out[p] = x[p with p[dim] = idx[p]]. */
static int
gather(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = otype(G, n, 0), *idx = otype(G, n, 1);
	int64_t count = type_numel(idx), xs[SG_MAXRANK], st[SG_MAXRANK];
	if (count == 0)
		return 1;
	int d = x->rank ? shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank) : 0;
	cg_strides(x, xs);
	for (int k = 0; k < idx->rank; k++)
		st[k] = k == d ? 0 : xs[k];
	const char *kname = cg_kernel_name(G, n, "gather");
	CG_EMIT(c->kern, "kernels.cu:gather", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"t", cg_ctype((DType)x->dt)}, {"ti", cg_ctype((DType)idx->dt)},
	        {"n", num(c, count)}, {"size", num(c, x->rank ? x->d[d] : 1)},
	        {"file", cg_source_name(c)}, {"line", num(c, n->loc.line)},
	        {"xoff", cg_index(c, "i", idx->rank, idx->d, st, 0)},
	        {"dstride", num(c, x->rank ? xs[d] : 0)});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0,
	       cg_fmt(c, "%s, %s, %s", G->vname[n->opnd[0].v], G->vname[n->opnd[1].v],
	              G->vname[n->res[0]]));
	return 1;
}

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

/* One collective statement of host.cu. */
static void
coll(CgGraph *G, const Node *n, const char *sec, const char *send, const char *recv,
     int64_t count, DType dt, const char *extra_key, const char *extra)
{
	Cg *c = G->c;
	CG_EMIT(G->body, sec, {"s", num(c, cg_stream(n))}, {"send", send}, {"recv", recv},
	        {"count", num(c, count)}, {"dtype", cg_sgrt_dtype(dt)},
	        {extra_key, extra}, {"name", cg_fmt(c, "%s_%u", op_name(n->op), n->loc.line)},
	        {"line", num(c, n->loc.line)});
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
	copy_kernel(G, n, what, src, dt, dst, dt, total, cg_index(c, "i", 4, shape, st, 0), "i");
}

/* all_reduce broadcast all_gather reduce_scatter all_to_all over WORLD
 * ranks, on the node's stream (0 results: in place). */
static int
collective(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = otype(G, n, 0);
	DType dt = (DType)x->dt;
	const char *xv = G->vname[n->opnd[0].v];
	const char *rv = n->nres ? G->vname[n->res[0]] : xv;
	int64_t count = type_numel(x), w = G->world;
	int d = x->rank ? shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank) : 0;
	int64_t outer = 1, inner = 1, dsz = x->rank ? x->d[d] : 1;
	for (int k = 0; k < x->rank; k++) {
		if (k < d)
			outer *= x->d[k];
		else if (k > d)
			inner *= x->d[k];
	}
	if (count == 0)
		return 1;
	switch (n->op) {
	case OP_ALL_REDUCE:
		coll(G, n, "host.cu:all_reduce", xv, rv, count, dt, "op", red_op(n));
		return 1;
	case OP_BROADCAST:
		coll(G, n, "host.cu:broadcast", xv, rv, count, dt, "root",
		     num(c, ir_attr_int(n, "root", 0)));
		return 1;
	case OP_ALL_GATHER:
		if (outer == 1) {
			coll(G, n, "host.cu:all_gather", xv, rv, count, dt, "x", "");
		} else {
			char *tmp = cg_alloc_tmp(G, n, cg_ctype(dt), w * count * dtype_size(dt), "gather");
			coll(G, n, "host.cu:all_gather", xv, tmp, count, dt, "x", "");
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
		coll(G, n, "host.cu:reduce_scatter", send, rv, count / w, dt, "op", red_op(n));
		if (send != xv)
			cg_free_tmp(G, n, send);
		return 1;
	}
	case OP_ALL_TO_ALL: {
		if (outer == 1 && n->nres) {
			coll(G, n, "host.cu:all_to_all", xv, rv, count / w, dt, "x", "");
			return 1;
		}
		char *t1 = cg_alloc_tmp(G, n, cg_ctype(dt), count * dtype_size(dt), "a2a_send");
		char *t2 = cg_alloc_tmp(G, n, cg_ctype(dt), count * dtype_size(dt), "a2a_recv");
		blocks(G, n, "all_to_all_blocks", xv, t1, dt, outer, w, dsz / w, inner, 0);
		coll(G, n, "host.cu:all_to_all", t1, t2, count / w, dt, "x", "");
		blocks(G, n, "all_to_all_unblocks", t2, rv, dt, outer, w, dsz / w, inner, 1);
		cg_free_tmp(G, n, t1);
		cg_free_tmp(G, n, t2);
		return 1;
	}
	}
	return 1;
}

/* ------------------------------------------------------------------ dispatch */

int
cg_op(CgGraph *G, NodeId i)
{
	Cg *c = G->c;
	Graph *g = G->g;
	Node *n = &g->nodes.v[i];
	if (n->op >= OP__N)
		return 1;
	if (cg_is_pointwise(g, n)) {
		CgGroup grp = {.nodes = &i, .n = 1, .vec = 1};
		cg_pointwise(G, &grp);
		return 1;
	}
	if (cg_grad_op(G, i))
		return !c->failed;
	const char *xv = n->nopnd && n->opnd[0].kind == OK_VAL ? G->vname[n->opnd[0].v] : NULL;
	const Type *r = n->nres ? vtype(G, n->res[0]) : NULL;
	switch (n->op) {
	case OP_SUM: case OP_MEAN: case OP_AMAX: case OP_AMIN: case OP_VAR: case OP_VAR_MEAN:
		return reduce(G, n);
	case OP_SOFTMAX: case OP_LOG_SOFTMAX:
		return softmax(G, n);
	case OP_LAYER_NORM: case OP_RMS_NORM:
		return norm(G, n);
	case OP_MATMUL:
		return matmul(G, n);
	case OP_LINEAR:
		return linear(G, n);
	case OP_SDPA:
		return sdpa(G, n);
	case OP_RESHAPE: case OP_SQUEEZE: case OP_UNSQUEEZE: case OP_CONTIGUOUS:
	case OP_TO_HOST: case OP_TO_DEVICE:
		flat_copy(G, n, xv, G->vname[n->res[0]], type_numel(r) * dtype_size((DType)r->dt),
		          cg_fmt(c, "%s_%s", op_name(n->op), g->vals.v[n->res[0]].name));
		return 1;
	case OP_TRANSPOSE: case OP_PERMUTE: case OP_EXPAND: case OP_SLICE:
		return strided(G, n);
	case OP_CAT:
		return cat(G, n);
	case OP_CHUNK: case OP_SPLIT:
		return split(G, n);
	case OP_ZEROS: case OP_ONES: case OP_FULL: case OP_ARANGE:
		return creation(G, n);
	case OP_EMBEDDING:
		return embedding(G, n);
	case OP_GATHER:
		return gather(G, n);
	case OP_MSE_LOSS:
		return mse_loss(G, n);
	case OP_CROSS_ENTROPY:
		return cross_entropy(G, n);
	case OP_ZERO_: {
		const Type *t = otype(G, n, 0);
		zero(G, n, xv, type_numel(t) * dtype_size((DType)t->dt));
		return 1;
	}
	case OP_ALL_REDUCE: case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_BROADCAST:
	case OP_ALL_TO_ALL:
		return collective(G, n);
	}
	cg_error(c, n, "the CUDA backend cannot compile '%s' yet", op_name(n->op));
	return 0;
}
