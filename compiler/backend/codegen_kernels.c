/*
 * codegen_kernels.c - the kernels of each op and the host statements that
 * launch them.
 *
 * Pointwise ops (and the in-place ones) go through one emitter that builds
 * a kernel from a group of nodes: each external operand is loaded once
 * into a register (with its broadcast index), each node becomes one line
 * computing its result in the op's compute type (float or double math,
 * wrapping int64), converted to its dtype as Tensor.to does, and the
 * values needed outside the group are stored.  Each op's formula is a
 * call of the function the op table names (runtime/sgk/sgk_pointwise.h,
 * which the interpreter calls too); the dtype rules are the interpreter's
 * (compiler/interp/interp_ops.c), so both compute the same numbers.
 *
 * Other ops have one template each in kernels.cu (attention, indexing,
 * copies, creation) or go to cudaMemcpyAsync (flat copies, to_host,
 * to_device) through libsgrt; reductions and row kernels are in
 * codegen_rows.c, matrix products (cuBLASLt) in codegen_gemm.c,
 * collectives (NCCL) in codegen_coll.c.  cg_op, at the end, dispatches.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"
#include "sgk/sgk_random.h"

enum { D_FLOAT, D_DOUBLE, D_INT }; /* compute domains */

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
	char *e = base ? cg_num(c, base) : NULL;
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

/* The grid of a pointwise group over n items: a thread for each
 * (FuseGroup.spread), or cg_grid's walk. */
static int64_t
group_grid(const CgGroup *grp, int64_t n, int block)
{
	int64_t g = (n + block - 1) / block;
	return !grp->spread ? cg_grid(n, block) : g < 1 ? 1 : g;
}

/* The index type for n elements. */
const char *
cg_index_type(int64_t n)
{
	return n < ((int64_t)1 << 31) - 4096 * 256 ? "int" : "sg_i64";
}

/* "// FILE.sg:LINE: statement" for one node, and its cg_line_mark. */
char *
cg_comment(CgGraph *G, const Node *n)
{
	const char *mark = cg_line_mark(G->c, n->loc.line);
	return cg_fmt(G->c, "// %s: %s%s%s", cg_where(G->c, n),
	              cg_stmt_text(G->c, G->g, n), *mark ? "\n" : "", mark);
}

/* One launch statement. */
void
cg_launch(CgGraph *G, const Node *n, const char *kname, int64_t grid, int block,
       int64_t smem, const char *args)
{
	Cg *c = G->c;
	CG_EMIT(G->body, "host.cu:launch", {"s", cg_num(c, cg_stream(n))},
	        {"kname", kname}, {"line", cg_num(c, n->loc.line)},
	        {"grid", cg_num(c, grid)}, {"block", cg_num(c, block)},
	        {"smem", cg_num(c, smem)}, {"args", args});
}

void
cg_lib_call(CgGraph *G, const Node *n, const char *kname, const char *call)
{
	Cg *c = G->c;
	CG_EMIT(G->body, "host.cu:lib_call", {"s", cg_num(c, cg_stream(n))},
	        {"kname", cg_kernel_name(G, n, kname)}, {"line", cg_num(c, n->loc.line)},
	        {"call", call});
}

/* A temporary for a kernel's scratch: declared, allocated, and the name
 * returned; free_tmp releases it. */
char *
cg_alloc_tmp_expr(CgGraph *G, const Node *n, const char *type, const char *bytes,
                  const char *what)
{
	Cg *c = G->c;
	char *base = cg_fmt(c, "tmp_%s_%u", what, n->loc.line), *var = base;
	for (int k = 2; map_get(&G->kernames, var, strlen(var)); k++)
		var = cg_fmt(c, "%s_%d", base, k);
	map_put(&G->kernames, var, strlen(var), 1);
	fprintf(G->body, "\t%s *%s = NULL;\n", type, var);
	CG_EMIT(G->body, "host.cu:alloc", {"var", var}, {"bytes", bytes},
	        {"s", cg_num(c, cg_stream(n))}, {"line", cg_num(c, n->loc.line)});
	return var;
}

char *
cg_alloc_tmp(CgGraph *G, const Node *n, const char *type, int64_t bytes, const char *what)
{
	return cg_alloc_tmp_expr(G, n, type, cg_num(G->c, bytes), what);
}

void
cg_free_tmp(CgGraph *G, const Node *n, const char *var)
{
	CG_EMIT(G->body, "host.cu:free", {"var", var}, {"s", cg_num(G->c, cg_stream(n))},
	        {"line", cg_num(G->c, n->loc.line)});
}

/* ------------------------------------------------------------------ pointwise ops */

/* ------------------------------------------------------------------ pointwise groups */

/* The state of one pointwise kernel being built.  Its text names
 * values by position (params x0, x1, ..., registers r0, r1, ...), so
 * that two groups computing the same thing on other tensors give the same
 * kernel text, and one kernel serves both (cg_pointwise). */
typedef struct {
	CgGraph *G;
	Cg *c;
	const CgGroup *grp;
	Type shape;         /* every node's output shape */
	int64_t n;
	int vec;            /* > 1: vectorised variant */
	const char *ind;    /* indentation of the body's lines */
	FILE *body;
	char *btext;
	size_t blen;
	VEC(ValId) params;  /* external operands and stored results */
	uint8_t *param_out; /* per param: written */
	VEC(ValId) touched; /* values with a register (G->pw_reg) */
	uint32_t nreg;
	ValId given1;       /* 1 + a value whose register is a parameter (the
	                       result an epilogue consumes), 0: none */
	int by_name;        /* params named as the host names the values: the
	                       element functions fused into another kernel,
	                       whose params join that kernel's */
	CgStr salts;        /* the dropouts' salts, params s0, s1, ... after
	                       the tensors' (with `rng`, the generator state) */
	uint32_t nsalt;
} Pw;

/* Index of value v among the kernel's params, added when new.  Params
 * named by their values (by_name) are one per name: a view keeping its
 * source's bytes has the source's (codegen_host.c's name_values), and a
 * group reading both reads one pointer. */
static uint32_t
pw_param(Pw *p, ValId v, int out)
{
	for (uint32_t k = 0; k < p->params.n; k++)
		if (p->params.v[k] == v ||
		    (p->by_name && p->G->vname[p->params.v[k]] == p->G->vname[v])) {
			p->param_out[k] |= (uint8_t)out;
			return k;
		}
	vec_push(&p->params, v);
	p->param_out = xrealloc(p->param_out, p->params.n);
	p->param_out[p->params.n - 1] = (uint8_t)out;
	return p->params.n - 1;
}

/* The kernel's name of param value v ("x2"), added when new. */
static char *
pname(Pw *p, ValId v, int out)
{
	uint32_t k = pw_param(p, v, out);
	return p->by_name ? (char *)p->G->vname[v] : cg_fmt(p->c, "x%u", k);
}

/* 1 when value v has its register in the kernel. */
static int
have(Pw *p, ValId v)
{
	return p->G->pw_reg[v] != 0;
}

/* The register name of value v ("r3"), numbered when new. */
static char *
reg(Pw *p, ValId v)
{
	uint32_t *r = &p->G->pw_reg[v];
	if (*r == 0) {
		*r = ++p->nreg;
		vec_push(&p->touched, v);
	}
	return cg_fmt(p->c, "r%u", *r - 1);
}

/* Forgets the registers (before a kernel body is built again, and at the
 * end): only the values touched are cleared, so a kernel costs its own
 * size, not the graph's. */
static void
pw_forget(Pw *p)
{
	for (uint32_t k = 0; k < p->touched.n; k++)
		p->G->pw_reg[p->touched.v[k]] = 0;
	p->touched.n = 0;
	p->nreg = 0;
}

/* The element of external value v that output index i reads. */
static char *
elem_index(Pw *p, ValId v)
{
	const Type *t = cg_vtype(p->G, v);
	int64_t st[SG_MAXRANK], bst[SG_MAXRANK];
	if (type_numel(t) == 1)
		return "0";
	if (type_same_shape(t, &p->shape))
		return p->vec > 1 ? "w" : "i";
	shape_row_strides(t, st);
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
	if (have(p, v))
		return;
	const char *x = pname(p, v, 0);
	const Type *t = cg_vtype(p->G, v);
	const char *ix = elem_index(p, v), *src;
	if (p->vec > 1 && strcmp(ix, "w") == 0)
		src = cg_fmt(p->c, "%s_v.v[j]", x);
	else
		src = cg_fmt(p->c, "%s[%s]", x, ix);
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
	DType dt = (DType)cg_vtype(p->G, o->v)->dt;
	char *r = reg(p, o->v);
	if (dom == D_FLOAT && domain(dt) != D_FLOAT)
		return cg_fmt(p->c, "sg_opf(%s)", r);
	if (dom == D_DOUBLE && dt != DT_F64)
		return cg_fmt(p->c, "sg_opd(%s)", r);
	return r;
}

/* A num attribute as an argument of sg_to_DT: a double or an sg_i64. */
static char *
num_value(Cg *c, const Attr *a)
{
	if (a->num_kind == OK_FLOAT)
		return cg_lit_float(c, a->f, 0);
	return cg_fmt(c, "(sg_i64)%s", cg_lit_int(c, attr_num_i(a)));
}

static int
is_compare(int op)
{
	return op_table[op].flags & OPF_COMPARE;
}

/* The call of formula f (runtime/sgk/sgk_pointwise.h) in domain dom with
 * operands a, b. */
static char *
call(Pw *p, const Node *n, const PwFormula *f, int dom, const char *a, const char *b)
{
	if (dom == D_INT && !f->i1 && !f->i2)
		ICE("%s has no integer form", op_name(n->op));
	const char *sfx = dom == D_INT ? "i" : dom == D_FLOAT ? "f" : "d";
	if (b)
		return cg_fmt(p->c, "sgk_%s_%s(%s, %s)", f->name, sfx, a, b);
	return cg_fmt(p->c, "sgk_%s_%s(%s)", f->name, sfx, a);
}

/* Operand k of n in compute dtype cdt, converted to it as PyTorch's
 * kernels load every tensor operand: a 0-d f32 operand of a bf16 op is
 * rounded to bf16, an i64 one of an i32 op wraps.  A scalar literal stays
 * in opmath precision (float for f16 and bf16) except in comparisons (cmp),
 * which compare in cdt itself; an integer literal wraps into i32 too. */
static char *
in_compute(Pw *p, const Node *n, int k, DType cdt, int cmp)
{
	const Opnd *o = &n->opnd[k];
	char *e = operand(p, n, k, domain(cdt));
	DType dt = o->kind == OK_VAL ? (DType)cg_vtype(p->G, o->v)->dt : DT_ERR;
	int conv = 0;
	if (cdt == DT_F16 || cdt == DT_BF16)
		conv = o->kind == OK_VAL ? dt != cdt && dt != DT_BOOL : cmp;
	else if (cdt == DT_I32)
		conv = o->kind == OK_VAL ? dt == DT_I64
		                         : o->kind == OK_FLOAT || o->i != (int32_t)o->i;
	return conv ? cg_fmt(p->c, "sg_to_%s(%s)", cg_dtname(cdt), e) : e;
}

/* Binary ops (and their in-place forms): the expression converted to
 * dtype rdt; cdt is the compute dtype. */
static char *
binary(Pw *p, const Node *n, int op, DType cdt)
{
	const PwFormula *f = op == n->op ? op_formula(n) : &op_table[op].pw;
	if (!dtype_is_float(cdt) && !f->i2)
		cdt = DT_F32; /* no integer form: div, true division */
	int dom = domain(cdt);
	char *a = in_compute(p, n, 0, cdt, is_compare(op));
	char *b = in_compute(p, n, 1, cdt, is_compare(op));
	return call(p, n, f, dom, a, b);
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
			e = cg_fmt(p->c, "sgk_maximum_i(%s, %s)", e, cg_lit_int(p->c, attr_num_i(lo)));
		if (hi)
			e = cg_fmt(p->c, "sgk_minimum_i(%s, %s)", e, cg_lit_int(p->c, attr_num_i(hi)));
		return e;
	}
	int f = dom == D_FLOAT;
	if (lo)
		e = cg_fmt(p->c, "sgk_clamp_lo_%s(%s, %s)", f ? "f" : "d", e,
		           cg_lit_float(p->c, f ? (double)(float)attr_num_f(lo) : attr_num_f(lo), f));
	if (hi)
		e = cg_fmt(p->c, "sgk_clamp_hi_%s(%s, %s)", f ? "f" : "d", e,
		           cg_lit_float(p->c, f ? (double)(float)attr_num_f(hi) : attr_num_f(hi), f));
	return e;
}

/* The literals of dropout probability p's threshold and scale
 * (sgk_random.h), the scale in float (f) or double. */
static char *
drop_thresh(Cg *c, double p)
{
	return cg_fmt(c, "%lluull", (unsigned long long)sgk_dropout_threshold(p));
}

static char *
drop_scale(Cg *c, double p, int f)
{
	double s = sgk_dropout_scale(p);
	return cg_lit_float(c, f ? (double)(float)s : s, f);
}

/* dropout(x, p=, salt=) in the result's domain: element i kept (x times
 * the scale) when its draw, 16-bit half i % 8 of Philox block i / 8
 * (sgk_random.h), reaches the threshold, else x * 0.  The salt is a
 * parameter of the kernel (one kernel serves every layer's dropout).  In
 * the vector kernel (w: the vector, j: its element) the block of element
 * j is w * (vec / 8) + j / 8 with a whole number of blocks a vector, else
 * w / (8 / vec) and its half (w % (8 / vec)) * vec + j: once the loop is
 * unrolled, the elements of a block share one draw. */
static char *
dropout(Pw *p, const Node *n, DType rdt)
{
	Cg *c = p->c;
	double pr = ir_attr_float(n, "p", 0);
	int f = domain(rdt) == D_FLOAT;
	if (p->G->rng_slot < 0)
		ICE("dropout without the generator state");
	cg_use_library(p->G, "sgk_random.cuh");
	cg_str_itemf(&p->salts, ", ", "%uu", (unsigned)ir_attr_int(n, "salt", 0));
	const char *q = "i >> 3", *lane = "(int)(i & 7)";
	if (p->vec == 8) {
		q = "(sg_i64)w";
		lane = "j";
	} else if (p->vec > 1 && p->vec % 8 == 0) {
		q = cg_fmt(c, "(sg_i64)w * %d + (j >> 3)", p->vec / 8);
		lane = "j & 7";
	} else if (p->vec > 1 && 8 % p->vec == 0) {
		int per = 8 / p->vec; /* vectors a block: 2 or 4 */
		q = cg_fmt(c, "((sg_i64)w >> %d)", per == 2 ? 1 : 2);
		lane = cg_fmt(c, "(int)(w & %d) * %d + j", per - 1, p->vec);
	}
	return cg_fmt(c, "sgk_dropout_%s(%s, sgk_draw(rng, s%u, %s, %s), %s, %s)", f ? "f" : "d",
	              operand(p, n, 0, domain(rdt)), p->nsalt++, q, lane, drop_thresh(c, pr),
	              drop_scale(c, pr, f));
}

/* The value node n computes, before conversion to its result dtype, and
 * that dtype. */
static char *
node_expr(Pw *p, const Node *n, DType *rdt)
{
	Graph *g = p->G->g;
	int op = n->op;
	if (op_table[op].flags & OPF_INPLACE) {
		*rdt = (DType)cg_otype(p->G, n, 0)->dt;
		switch (op) {
		case OP_COPY_:
			return operand(p, n, 1, domain((DType)cg_otype(p->G, n, 1)->dt));
		case OP_FILL_:
			return num_value(p->c, ir_attr(n, "value"));
		default:
			return binary(p, n, op_inplace_base(op), shape_result_type(g, n, 0, 2));
		}
	}
	*rdt = (DType)cg_vtype(p->G, n->res[0])->dt;
	switch (op) {
	case OP_WHERE: return where(p, n, *rdt);
	case OP_CLAMP: return clamp(p, n, *rdt);
	case OP_CAST: return operand(p, n, 0, domain((DType)cg_otype(p->G, n, 0)->dt));
	case OP_DROPOUT: return dropout(p, n, *rdt);
	}
	if (is_compare(op))
		return binary(p, n, op, shape_result_type(g, n, 0, 2));
	if (n->nopnd == 2)
		return binary(p, n, op, *rdt);
	int dom = domain(*rdt);
	return call(p, n, op_formula(n), dom, operand(p, n, 0, dom), NULL);
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
		fprintf(p->body, "%s%s[%s] = sg_st_%s(sg_to_%s(%s));\n", ind,
		        pname(p, n->opnd[0].v, 1), at, cg_dtname(rdt), cg_dtname(rdt), e);
		return;
	}
	ValId r = n->res[0];
	fprintf(p->body, "%sconst %s %s = sg_to_%s(%s);\n", ind, cg_regtype(rdt), reg(p, r),
	        cg_dtname(rdt), e);
	if (!stored(p, r))
		return;
	fprintf(p->body, p->vec > 1 ? "%s%s_v.v[j] = sg_st_%s(%s);\n" : "%s%s[i] = sg_st_%s(%s);\n",
	        ind, pname(p, r, 1), cg_dtname(rdt), reg(p, r));
}

/* The kernel's parameter list and the launch's argument list.  No
 * __restrict__: a result may be written over an operand, by an in-place
 * op or where the memory plan gives it a dying operand's bytes (MemBuf
 * .inplace); each thread reads an element before it writes it. */
static void
pw_signature(Pw *p, char **params, char **args)
{
	Cg *c = p->c;
	CgStr ps = {0}, as = {0};
	for (uint32_t k = 0; k < p->params.n; k++) {
		ValId v = p->params.v[k];
		const char *ct = cg_ctype((DType)cg_vtype(p->G, v)->dt);
		cg_str_itemf(&ps, ", ", "%s%s *%s", p->param_out[k] ? "" : "const ", ct,
		             pname(p, v, 0));
		cg_str_itemf(&as, ", ", "%s", p->G->vname[v]);
	}
	if (p->nsalt) {
		cg_str_itemf(&ps, ", ", "const sgk_i64 *__restrict__ rng");
		cg_str_itemf(&as, ", ", "(const sgk_i64 *)io[%d]", p->G->rng_slot);
		for (uint32_t k = 0; k < p->nsalt; k++)
			cg_str_itemf(&ps, ", ", "unsigned s%u", k);
		cg_str_itemf(&as, ", ", "%s", cg_str_done(c, &p->salts));
	}
	*params = cg_str_done(c, &ps);
	*args = cg_str_done(c, &as);
}

/* The comment lines of the group's nodes. */
static char *
group_comment(CgGraph *G, const CgGroup *grp)
{
	CgStr s = {0};
	for (uint32_t k = 0; k < grp->n; k++)
		cg_str_itemf(&s, "\n", "%s", cg_comment(G, &G->g->nodes.v[grp->nodes[k]]));
	return cg_str_done(G->c, &s);
}

/* The comment of p's kernel: its group's lines, then which value each
 * param x0, x1, ... is, here (the kernel's text names none, so that one
 * kernel serves every group computing the same thing). */
static char *
params_comment(Pw *p)
{
	CgStr ps = {0};
	for (uint32_t k = 0; k < p->params.n; k++)
		cg_str_itemf(&ps, ", ", "x%u = %%%s", k, p->G->g->vals.v[p->params.v[k]].name);
	return cg_fmt(p->c, "%s\n// (%s)", group_comment(p->G, p->grp), cg_str_done(p->c, &ps));
}

/* The group's output shape: its first node's result (or in-place
 * operand). */
static Type
group_shape(CgGraph *G, const CgGroup *grp)
{
	const Node *n = &G->g->nodes.v[grp->nodes[0]];
	if (op_table[n->op].flags & OPF_INPLACE)
		return *cg_otype(G, n, 0);
	return *cg_vtype(G, n->res[0]);
}

/* Builds the body of the group's kernel (vec: the vectorised form). */
static void
pw_build(Pw *p, int vec)
{
	Graph *g = p->G->g;
	p->vec = vec;
	p->params.n = 0;
	free(p->salts.p);
	p->salts = (CgStr){0};
	p->nsalt = 0;
	pw_forget(p);
	if (p->given1)
		reg(p, p->given1 - 1); /* r0: the value the epilogue is given */
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
	CgStr ls = {0}, ss = {0};
	for (uint32_t k = 0; k < p->params.n; k++) {
		ValId v = p->params.v[k];
		const char *ct = cg_ctype((DType)cg_vtype(p->G, v)->dt);
		if (!type_same_shape(cg_vtype(p->G, v), &p->shape))
			continue; /* broadcast: read element by element */
		char *vt = cg_fmt(c, "sg_vec<%s, %d>", ct, p->vec);
		if (p->param_out[k]) {
			cg_str_itemf(&ls, "\n", "\t\t%s x%u_v;", vt, k);
			cg_str_itemf(&ss, "\n", "\t\t*(%s *)(x%u + w * %d) = x%u_v;", vt, k, p->vec, k);
		} else {
			cg_str_itemf(&ls, "\n", "\t\tconst %s x%u_v = *(const %s *)(x%u + w * %d);", vt,
			             k, vt, k, p->vec);
		}
	}
	*loads = cg_str_done(c, &ls);
	*stores = cg_str_done(c, &ss);
}

/* The alignment test of the vectorised launch. */
static char *
vec_cond(Pw *p)
{
	CgStr s = {0};
	for (uint32_t k = 0; k < p->params.n; k++) {
		ValId v = p->params.v[k];
		if (!type_same_shape(cg_vtype(p->G, v), &p->shape))
			continue;
		cg_str_itemf(&s, " && ", "((uintptr_t)%s %% %d) == 0", p->G->vname[v],
		             dtype_size((DType)cg_vtype(p->G, v)->dt) * p->vec);
	}
	return s.n ? cg_str_done(p->c, &s) : "1";
}

/* Drops the newline ending a body's text. */
static void
pw_trim(Pw *p)
{
	if (p->blen && p->btext[p->blen - 1] == '\n')
		p->btext[--p->blen] = 0;
}

/* Frees what building p's kernels held. */
static void
pw_free(Pw *p)
{
	pw_forget(p);
	free(p->salts.p);
	vec_free(&p->touched);
	vec_free(&p->params);
	free(p->param_out);
}

void
cg_pointwise(CgGraph *G, const CgGroup *grp)
{
	Cg *c = G->c;
	const Node *n0 = &G->g->nodes.v[grp->nodes[0]];
	Pw p = {.G = G, .c = c, .grp = grp, .ind = "\t\t"};
	p.shape = group_shape(G, grp);
	p.n = type_numel(&p.shape);
	if (p.n == 0)
		return;
	char *params, *args, *body, *loads = "", *stores = "", *vbody = "";
	pw_build(&p, 1);
	pw_signature(&p, &params, &args);
	pw_trim(&p);
	body = arena_strndup(c->a, p.btext, p.blen);
	free(p.btext);
	if (grp->vec > 1) {
		pw_build(&p, grp->vec);
		vec_moves(&p, &loads, &stores);
		pw_trim(&p);
		vbody = arena_strndup(c->a, p.btext, p.blen);
		free(p.btext);
	}
	char *cmt = params_comment(&p);
	const char *kname = CG_KERNEL(G, "kernels.cu:pointwise", {"comment", cmt},
	        {"name", cg_kernel_name(G, n0, op_name(n0->op))}, {"params", params},
	        {"idx", cg_index_type(p.n)}, {"n", cg_num(c, p.n)}, {"body", body});
	const char *vname = NULL;
	if (grp->vec > 1)
		vname = CG_KERNEL(G, "kernels.cu:pointwise_vec", {"comment", cmt},
		          {"name", cg_fmt(c, "%s_vec", kname)}, {"scalar", kname},
		          {"params", params}, {"idx", cg_index_type(p.n)},
		          {"nvec", cg_num(c, p.n / grp->vec)}, {"vec", cg_num(c, grp->vec)},
		          {"loads", loads}, {"stores", stores}, {"body", vbody});
	if (grp->vec <= 1)
		cg_launch(G, n0, kname, group_grid(grp, p.n, 256), 256, 0, args);
	else
		CG_EMIT(G->body, "host.cu:launch_if_aligned", {"cond", vec_cond(&p)},
		        {"s", cg_num(c, cg_stream(n0))}, {"kname", vname},
		        {"line", cg_num(c, n0->loc.line)},
		        {"grid", cg_num(c, group_grid(grp, p.n / grp->vec, 256))}, {"block", "256"},
		        {"args", args}, {"kname2", kname}, {"grid2", cg_num(c, group_grid(grp, p.n, 256))});
	pw_free(&p);
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
	Pw p = {.G = G, .c = c, .grp = grp, .ind = "\t", .by_name = 1};
	p.shape = group_shape(G, grp);
	p.n = type_numel(&p.shape);
	const char *name = cg_kernel_name(G, &g->nodes.v[grp->nodes[0]], "elem");
	char *params, *args;
	pw_build(&p, 1);
	pw_signature(&p, &params, &args);
	pw_trim(&p);
	CG_EMIT(c->kern, "kernels.cu:elem_fn", {"comment", group_comment(G, grp)},
	        {"what", g->vals.v[v].name}, {"rtype", cg_regtype((DType)cg_vtype(G, v)->dt)},
	        {"name", name}, {"params", params}, {"body", p.btext}, {"ret", reg(&p, v)});
	free(p.btext);
	in->params = params;
	in->args = args;
	in->fmt = cg_fmt(c, "%s(%s, %%s)", name, args);
	pw_free(&p);
}

void
cg_ep_fn(CgGraph *G, const CgGroup *grp, ValId r, CgInput *ep)
{
	Cg *c = G->c;
	Graph *g = G->g;
	Pw p = {.G = G, .c = c, .grp = grp, .ind = "\t", .given1 = r + 1, .by_name = 1};
	p.shape = group_shape(G, grp);
	p.n = type_numel(&p.shape);
	const char *name = cg_kernel_name(G, &g->nodes.v[grp->nodes[0]], "ep");
	pw_build(&p, 1);
	pw_signature(&p, &ep->params, &ep->args);
	pw_trim(&p);
	CG_EMIT(c->kern, "kernels.cu:ep_fn", {"comment", group_comment(G, grp)},
	        {"what", g->vals.v[r].name}, {"rtype", cg_regtype((DType)cg_vtype(G, r)->dt)},
	        {"name", name}, {"params", ep->params}, {"body", p.btext}, {"reg", reg(&p, r)});
	free(p.btext);
	ep->fmt = cg_fmt(c, "%s(%s, %%s, %%s)", name, ep->args);
	pw_free(&p);
}

const char *
cg_gemm_epi(CgGraph *G, const CgGroup *grp, ValId r, int keep, int64_t ncols, char **args)
{
	Cg *c = G->c;
	Graph *g = G->g;
	Pw p = {.G = G, .c = c, .grp = grp, .ind = "\t\t", .given1 = r + 1};
	p.shape = group_shape(G, grp);
	p.n = type_numel(&p.shape);
	pw_build(&p, 1);
	pw_trim(&p);
	char *body = p.btext;
	if (keep) /* the product itself is read elsewhere too */
		body = cg_fmt(c, "\t\t%s[i] = sg_st_f32(%s);\n%s", pname(&p, r, 1), reg(&p, r), body);
	CgStr ms = {0}; /* the members: what the group reads and stores */
	for (uint32_t k = 0; k < p.params.n; k++)
		cg_str_itemf(&ms, "\n", "\t%s%s *x%u;", p.param_out[k] ? "" : "const ",
		             cg_ctype((DType)cg_vtype(G, p.params.v[k])->dt), k);
	char *params;
	pw_signature(&p, &params, args);
	const char *name = CG_KERNEL(G, "kernels.cu:gemm_epi", {"comment", params_comment(&p)},
	        {"name", cg_kernel_name(G, &g->nodes.v[grp->nodes[0]], "gemm_epi")},
	        {"members", cg_str_done(c, &ms)}, {"reg", reg(&p, r)},
	        {"ncols", cg_num(c, ncols)}, {"body", body});
	free(p.btext);
	pw_free(&p);
	return name;
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
	const Type *t = cg_otype(G, n, 0);
	in.params = cg_fmt(G->c, "const %s *__restrict__ x", cg_ctype((DType)t->dt));
	in.args = G->vname[n->opnd[0].v];
	in.fmt = "sg_ld(x[%s])";
	return in;
}

/* The statements setting the strides of f's tensors: q, k, v's batch
 * strides always, the others where they differ from
 * sg_flash_params_init's (and matter: a batch dim of size 1 has none). */
static char *
flash_strides(Cg *c, Flash *f)
{
	char *s = "";
	for (int k = 0; k < f->nt; k++) {
		FlashT *t = &f->t[k];
		int64_t rows = k == 1 || k == 2 || k == 6 || k == 7 ? f->S : f->L;
		int64_t dim = k == 2 || k == 3 || k == 4 || k == 7 ? f->Ev : f->E;
		int64_t def[3] = {f->nb[1] * rows * dim, rows * dim, dim};
		int64_t val[3] = {t->s[0], t->s[1], t->sr};
		static const char *sfx[3] = {"s0", "s1", "sr"};
		for (int i = 0; i < 3; i++)
			if ((k < 3 && i < 2) || (val[i] != def[i] && (i == 2 || f->nb[i] > 1)))
				s = cg_fmt(c, "%s\t\tfp.%s_%s = %lld;\n", s, t->nm, sfx[i],
				           (long long)val[i]);
	}
	if (f->group > 1)
		s = cg_fmt(c, "%s\t\tfp.kv_group = %lld;\n", s, (long long)f->group);
	s[strlen(s) - 1] = 0; /* the template's line ends it */
	return s;
}

int
cg_flash_attention(CgGraph *G, const Node *n, int bwd)
{
	Cg *c = G->c;
	Flash f;
	if (!G->s->flash[n - G->g->nodes.v]) /* kernel_choice's choice */
		return 0;
	if (!kernel_flash(G->g, G->fold, n, bwd, &f))
		ICE("attention at line %u does not fit the flash kernels chosen",
		    n->loc.line);
	const char *var[8];
	for (int k = 0; k < f.nt; k++) /* the variables holding their bytes */
		var[k] = f.t[k].v == NONE ? NULL
		         : f.t[k].off ? cg_fmt(c, "%s + %lld", cg_fold_var(G, f.t[k].v),
		                               (long long)f.t[k].off)
		                      : cg_fold_var(G, f.t[k].v);
	const Type *q = f.t[0].t;
	DType dt = (DType)q->dt;
	const Attr *sa = ir_attr(n, "scale");
	double scale = sa ? sa->f : 1.0 / sqrt((double)f.E);
	cg_use_library(G, "sgk_attention.cuh");
	int64_t rows = f.nb[0] * f.nb[1] * f.L;
	NodeId i = (NodeId)(n - G->g->nodes.v), pair = cg_fold_pair(G, i);
	const char *out = var[3], *lse, *dmask = NULL, *delta = NULL;
	/* f16 and bf16 try cuDNN first (sgrt_sdpa, grouped-query heads too),
	 * these kernels the fallback; with dropout_p these kernels alone (they
	 * draw the mask the interpreter draws; cuDNN draws its own, and given
	 * sgc's as a tensor ran slower than these kernels at GPT-2's shape:
	 * docs/performance.md).  With dropout the forward stores its keep
	 * bits (dmask) and the backward reads them instead of drawing again. */
	double p = ir_attr_float(n, "dropout_p", 0);
	int drop = p > 0;
	if (drop && G->rng_slot < 0)
		ICE("attention's dropout without the generator state");
	if (bwd && pair != NONE) {
		const CgAttnKept *kp = cg_fold_kept(G, pair); /* the forward's o, lse, bits */
		lse = kp->lse;
		dmask = kp->dmask;
	} else {
		lse = cg_alloc_tmp(G, n, "float", rows * 4, "lse");
		if (drop && (bwd || pair != NONE))
			dmask = cg_alloc_tmp_expr(
			        G, n, "unsigned",
			        cg_fmt(c, "sg_flash_dropout_mask_bytes<%s>(%lld, %lld, %lld, %lld, %lld)",
			               cg_ctype(dt), (long long)(f.nb[0] * f.nb[1]), (long long)f.L,
			               (long long)f.S, (long long)f.E, (long long)f.Ev),
			        "dmask");
		if (pair != NONE) /* kept for the backward */
			*cg_fold_kept(G, i) = (CgAttnKept){lse, dmask};
	}
	if (bwd && pair == NONE)
		out = cg_alloc_tmp(G, n, cg_ctype(dt), rows * f.Ev * dtype_size(dt), "o");
	if (bwd)
		delta = cg_alloc_tmp(G, n, "float", rows * 4, "delta");
	if (!lse || (bwd && drop && !dmask))
		ICE("attention backward before its paired forward");
	c->attn_dropout |= drop;
	int cd = (dt == DT_F16 || dt == DT_BF16) && !drop, fw = !bwd || pair == NONE;
	CG_EMIT(G->body, "host.cu:flash", {"nb0", cg_num(c, f.nb[0])}, {"nb1", cg_num(c, f.nb[1])},
	        {"l", cg_num(c, f.L)}, {"slen", cg_num(c, f.S)}, {"e", cg_num(c, f.E)},
	        {"ev", cg_num(c, f.Ev)}, {"scale", cg_lit_float(c, (double)(float)scale, 1)},
	        {"causal", ir_attr_int(n, "causal", 0) ? "1" : "0"},
	        {"q", var[0]}, {"k", var[1]}, {"v", var[2]},
	        {"o", out}, {"lse", lse}, {"strides", flash_strides(c, &f)}, {"t", cg_ctype(dt)},
	        {"s", cg_num(c, cg_stream(n))}, {"line", cg_num(c, n->loc.line)},
	        {"cudnn", cd ? "1" : ""}, {"sdt", dt == DT_BF16 ? "SGRT_BF16" : "SGRT_F16"},
	        {"fwd_cd", fw && cd ? "1" : ""}, {"fwd_sgk", fw && !cd ? "1" : ""},
	        {"kname", fw ? cg_kernel_name(G, n, "flash_fwd") : ""},
	        {"bwd", bwd ? "1" : ""}, {"bwd_cd", bwd && cd ? "1" : ""},
	        {"bwd_sgk", bwd && !cd ? "1" : ""},
	        {"g", bwd ? var[4] : ""}, {"dq", bwd ? var[5] : ""},
	        {"dk", bwd ? var[6] : ""}, {"dv", bwd ? var[7] : ""},
	        {"delta", bwd ? delta : ""}, {"dmask", dmask ? dmask : ""},
	        {"kname_bwd", bwd ? cg_kernel_name(G, n, "flash_bwd") : ""},
	        {"drop", drop ? "1" : ""}, {"slot", cg_num(c, G->rng_slot)},
	        {"salt", cg_fmt(c, "%uu", (unsigned)ir_attr_int(n, "salt", 0))},
	        {"thresh", drop_thresh(c, p)}, {"dscale", drop_scale(c, p, 1)});
	if (bwd)
		cg_free_tmp(G, n, delta);
	if (bwd && pair == NONE)
		cg_free_tmp(G, n, out);
	if (bwd || pair == NONE) {
		cg_free_tmp(G, n, lse);
		if (dmask)
			cg_free_tmp(G, n, dmask);
	}
	return 1;
}

const char *
cg_sdpa_rng(CgGraph *G, const Node *n)
{
	return ir_attr_float(n, "dropout_p", 0) > 0
	               ? cg_fmt(G->c, ", (const sgk_i64 *)io[%d]", G->rng_slot)
	               : "";
}

void
cg_sdpa_simt(CgGraph *G, const Node *n, int o, DType dt, CgSdpa *s)
{
	Cg *c = G->c;
	const Type *q = cg_otype(G, n, o), *k = cg_otype(G, n, o + 1), *v = cg_otype(G, n, o + 2);
	const Type *m = (int)n->nopnd > o + 3 ? cg_otype(G, n, o + 3) : NULL;
	s->L = q->d[q->rank - 2];
	s->E = q->d[q->rank - 1];
	s->S = k->d[k->rank - 2];
	s->Ev = v->d[v->rank - 1];
	s->group = shape_attn_group(q, k, ir_attr_int(n, "enable_gqa", 0) != 0);
	const Type *ops[4] = {q, k, v, m ? m : q};
	int rank[4];
	const int64_t *dims[4];
	for (int i = 0; i < 4; i++) {
		rank[i] = i < 3 || m ? ops[i]->rank : 0;
		dims[i] = ops[i]->d;
	}
	int64_t bshape[SG_MAXRANK], st[4][SG_MAXRANK];
	int brank = shape_attn_bcast(4, rank, dims, s->group, 1u << 1 | 1u << 2, bshape, st);
	s->nb = 1;
	for (int d = 0; d < brank; d++)
		s->nb *= bshape[d];
	const Attr *sa = ir_attr(n, "scale");
	double scale = sa ? sa->f : 1.0 / sqrt((double)s->E);
	int f = dt != DT_F64;
	double p = ir_attr_float(n, "dropout_p", 0);
	int drop = p > 0;
	if (drop) {
		if (G->rng_slot < 0)
			ICE("attention's dropout without the generator state");
		cg_use_library(G, "sgk_random.cuh");
	}
	const char *bias = "", *mparam = "";
	if (m) {
		int64_t mrs = m->rank >= 2 && m->d[m->rank - 2] != 1 ? m->d[m->rank - 1] : 0;
		int64_t mcs = m->rank >= 1 && m->d[m->rank - 1] != 1 ? 1 : 0;
		const char *at = cg_fmt(c, "mask[moff + i * %lld + jk * %lld]", (long long)mrs,
		                        (long long)mcs);
		mparam = cg_fmt(c, " const %s *__restrict__ mask,", cg_ctype((DType)m->dt));
		bias = m->dt == DT_BOOL ? cg_fmt(c, " + (%s ? (%s)0 : -%s)", at, cg_acc_type(dt),
		                                 f ? "sg_inff()" : "sg_inf()")
		                        : cg_fmt(c, " + %s(sg_ld(%s))", cg_acc_conv(dt), at);
	}
	CgBind b[CG_SDPA_NBIND] = {
		{"comment", cg_comment(G, n)}, {"t", cg_ctype(dt)}, {"acc", cg_acc_type(dt)},
		{"tile", cg_num(c, CG_SDPA_TILE)}, {"e", cg_num(c, s->E)}, {"ev", cg_num(c, s->Ev)},
		{"l", cg_num(c, s->L)}, {"s", cg_num(c, s->S)},
		{"qbase", cg_index(c, "b", brank, bshape, st[0], 0)},
		{"kbase", cg_index(c, "b", brank, bshape, st[1], 0)},
		{"vbase", cg_index(c, "b", brank, bshape, st[2], 0)},
		{"opc", cg_acc_conv(dt)}, {"inf", f ? "sg_inff()" : "sg_inf()"},
		{"causal", ir_attr_int(n, "causal", 0) ? "1" : "0"},
		{"scale", cg_lit_float(c, f ? (double)(float)scale : scale, f)},
		{"mask", m ? "1" : ""}, {"mparam", mparam}, {"bias", bias},
		{"mbase", m ? cg_index(c, "b", brank, bshape, st[3], 0) : ""},
		{"group", s->group > 1 ? cg_num(c, s->group) : ""},
		{"kbase0", cg_index(c, "b0", brank, bshape, st[1], 0)},
		{"vbase0", cg_index(c, "b0", brank, bshape, st[2], 0)},
		{"kvb", s->group > 1 ? "bk" : "b"},
		{"drop", drop ? "1" : ""},
		{"dparam", drop ? " const sgk_i64 *__restrict__ rng," : ""},
		{"salt", cg_fmt(c, "%uu", (unsigned)ir_attr_int(n, "salt", 0))},
		{"thresh", drop_thresh(c, p)}, {"dscale", drop_scale(c, p, f)},
	};
	memcpy(s->b, b, sizeof b);
}

/* scaled_dot_product_attention(q, k, v, causal=, scale=): the flash
 * kernels where they apply, else one block per query row. */
static int
sdpa(CgGraph *G, const Node *n)
{
	if (type_numel(cg_vtype(G, n->res[0])) > 0 && cg_flash_attention(G, n, 0))
		return 1;
	Cg *c = G->c;
	const Type *r = cg_vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	if (type_numel(r) == 0)
		return 1;
	CgSdpa s;
	cg_sdpa_simt(G, n, 0, dt, &s);
	int64_t smem = (s.E + CG_SDPA_TILE + s.Ev) * (dt != DT_F64 ? 4 : 8);
	const char *kname = cg_kernel_name(G, n, "sdpa");
	CgBind b[CG_SDPA_NBIND + 3];
	memcpy(b, s.b, sizeof s.b);
	b[CG_SDPA_NBIND] = (CgBind){"name", kname};
	b[CG_SDPA_NBIND + 1] = (CgBind){"store", cg_store(c, dt, n->nopnd > 3 ? "l == 0 ? 0 : acc[e] / l"
	                                                                    : "acc[e] / l")};
	b[CG_SDPA_NBIND + 2] = (CgBind){NULL, NULL};
	cg_emit(c->kern, "kernels.cu:sdpa", b);
	cg_emit(c->kern, "kernels.cu:sdpa_row", b);
	cg_emit(c->kern, "kernels.cu:sdpa_out", b);
	if (smem > 48 * 1024)
		CG_EMIT(G->body, "host.cu:smem_attr", {"kname", kname}, {"smem", cg_num(c, smem)},
		        {"line", cg_num(c, n->loc.line)});
	cg_launch(G, n, kname, s.nb * s.L, 128, smem,
	       cg_fmt(c, "%s, %s, %s%s%s, %s", G->vname[n->opnd[0].v], G->vname[n->opnd[1].v],
	              G->vname[n->opnd[2].v],
	              n->nopnd > 3 ? cg_fmt(c, ", %s", G->vname[n->opnd[3].v]) : "",
	              cg_sdpa_rng(G, n), G->vname[n->res[0]]));
	return 1;
}

/* ------------------------------------------------------------------ shape ops */

/* A strided copy kernel: out[dstidx(i)] = x[srcidx(i)] for i < count,
 * converted when the dtypes differ. */
void
cg_copy_kernel(CgGraph *G, const Node *n, const char *what, const char *src, DType sdt,
            const char *dst, DType ddt, int64_t count, const char *srcidx,
            const char *dstidx)
{
	Cg *c = G->c;
	if (count == 0)
		return;
	const char *kname = cg_kernel_name(G, n, what);
	char *x = cg_fmt(c, "x[%s]", srcidx);
	char *value = sdt == ddt ? x : cg_store(c, ddt, cg_fmt(c, "sg_ld(%s)", x));
	kname = CG_KERNEL(G, "kernels.cu:copy", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"tin", cg_ctype(sdt)}, {"tout", cg_ctype(ddt)}, {"idx", cg_index_type(count)},
	        {"n", cg_num(c, count)}, {"dst", dstidx}, {"value", value});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0, cg_fmt(c, "%s, %s", src, dst));
}

/* out = 0 (bytes of it). */
void
cg_zero(CgGraph *G, const Node *n, const char *var, int64_t bytes)
{
	if (bytes)
		CG_EMIT(G->body, "host.cu:memset", {"s", cg_num(G->c, cg_stream(n))}, {"dst", var},
		        {"bytes", cg_num(G->c, bytes)}, {"name", cg_fmt(G->c, "zero_%s", var + 2)},
		        {"line", cg_num(G->c, n->loc.line)});
}


/* A same-bytes copy (reshape, squeeze, unsqueeze, contiguous). */
static void
flat_copy(CgGraph *G, const Node *n, const char *src, const char *dst, int64_t bytes,
          const char *what)
{
	if (bytes)
		CG_EMIT(G->body, "host.cu:copy", {"s", cg_num(G->c, cg_stream(n))}, {"dst", dst},
		        {"src", src}, {"bytes", cg_num(G->c, bytes)}, {"name", what},
		        {"line", cg_num(G->c, n->loc.line)});
}

/* transpose, permute, expand, slice: the result read from x with strides. */
static int
strided(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 0), *r = cg_vtype(G, n->res[0]);
	int64_t xs[SG_MAXRANK], st[SG_MAXRANK], base = 0;
	shape_row_strides(x, xs);
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
		cg_bcast_strides(x, r, st);
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
	cg_copy_kernel(G, n, op_name(n->op), G->vname[n->opnd[0].v], (DType)x->dt,
	            G->vname[n->res[0]], (DType)r->dt, type_numel(r),
	            cg_index(c, "i", r->rank, r->d, st, base), "i");
	return 1;
}

/* cat: each operand copied (and converted) into its part of the result. */
static int
cat(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *r = cg_vtype(G, n->res[0]);
	int d = shape_norm_dim(ir_attr_int(n, "dim", 0), r->rank);
	int64_t rs[SG_MAXRANK], off = 0;
	shape_row_strides(r, rs);
	for (uint32_t k = 0; k < n->nopnd; k++) {
		const Type *p = cg_otype(G, n, (int)k);
		cg_copy_kernel(G, n, cg_fmt(c, "cat%u", k), G->vname[n->opnd[k].v], (DType)p->dt,
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
	const Type *x = cg_otype(G, n, 0);
	int d = shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank);
	int64_t xs[SG_MAXRANK], off = 0;
	shape_row_strides(x, xs);
	for (uint32_t j = 0; j < n->nres; j++) {
		const Type *r = cg_vtype(G, n->res[j]);
		cg_copy_kernel(G, n, cg_fmt(c, "%s%u", op_name(n->op), j), G->vname[n->opnd[0].v],
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
	kname = CG_KERNEL(G, "kernels.cu:fill", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"t", cg_ctype(dt)}, {"idx", cg_index_type(count)}, {"n", cg_num(c, count)},
	        {"value", value});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0, out);
}

/* zeros ones full arange. */
static int
creation(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *r = cg_vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t count = type_numel(r);
	const char *rv = G->vname[n->res[0]];
	switch (n->op) {
	case OP_ZEROS:
		cg_zero(G, n, rv, count * dtype_size(dt));
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
	const Type *idx = cg_otype(G, n, 0), *tab = cg_otype(G, n, 1), *r = cg_vtype(G, n->res[0]);
	int64_t count = type_numel(r), rows = tab->d[0], width = rows ? type_numel(tab) / rows : 0;
	if (count == 0)
		return 1;
	const char *kname = cg_kernel_name(G, n, "embedding");
	kname = CG_KERNEL(G, "kernels.cu:embedding", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"ti", cg_ctype((DType)idx->dt)}, {"t", cg_ctype((DType)tab->dt)},
	        {"n", cg_num(c, count)}, {"width", cg_num(c, width)}, {"rows", cg_num(c, rows)},
	        {"file", cg_source_name(c)}, {"line", cg_num(c, n->loc.line)});
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
	const Type *x = cg_otype(G, n, 0), *idx = cg_otype(G, n, 1);
	int64_t count = type_numel(idx), xs[SG_MAXRANK], st[SG_MAXRANK];
	if (count == 0)
		return 1;
	int d = x->rank ? shape_norm_dim(ir_attr_int(n, "dim", 0), x->rank) : 0;
	shape_row_strides(x, xs);
	for (int k = 0; k < idx->rank; k++)
		st[k] = k == d ? 0 : xs[k];
	const char *kname = cg_kernel_name(G, n, "gather");
	kname = CG_KERNEL(G, "kernels.cu:gather", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"t", cg_ctype((DType)x->dt)}, {"ti", cg_ctype((DType)idx->dt)},
	        {"n", cg_num(c, count)}, {"size", cg_num(c, x->rank ? x->d[d] : 1)},
	        {"file", cg_source_name(c)}, {"line", cg_num(c, n->loc.line)},
	        {"xoff", cg_index(c, "i", idx->rank, idx->d, st, 0)},
	        {"dstride", cg_num(c, x->rank ? xs[d] : 0)});
	cg_launch(G, n, kname, cg_grid(count, 256), 256, 0,
	       cg_fmt(c, "%s, %s, %s", G->vname[n->opnd[0].v], G->vname[n->opnd[1].v],
	              G->vname[n->res[0]]));
	return 1;
}

/* rand(shape=, dtype=, salt=): sgk_random.cuh's kernel, reading the
 * generator state opt.rng on the device (the call advanced its offset
 * first).  dropout is a pointwise kernel's (cg_pointwise). */
static int
random_op(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *t = cg_vtype(G, n->res[0]);
	int64_t count = type_numel(t);
	if (count == 0)
		return 1;
	if (G->rng_slot < 0)
		ICE("%s without the generator state", op_name(n->op));
	cg_use_library(G, "sgk_random.cuh");
	const char *ct = cg_ctype((DType)t->dt), *y = G->vname[n->res[0]];
	char *rng = cg_fmt(c, "(const sgk_i64 *)io[%d], %uu", G->rng_slot,
	                   (unsigned)ir_attr_int(n, "salt", 0));
	char *call = cg_fmt(c, "sg_launch_rand<%s>(%s, %s, %s, sgrt_stream(rt, %d))", ct, y,
	                    cg_lit_int(c, count), rng, cg_stream(n));
	cg_lib_call(G, n, op_name(n->op), call);
	return 1;
}

/* ------------------------------------------------------------------ dispatch */

/* A pointwise op alone (at -O2 most come in groups, passes/fusion.c). */
static int
pointwise_alone(CgGraph *G, const Node *n)
{
	NodeId i = (NodeId)(n - G->g->nodes.v);
	CgGroup grp = {.nodes = &i, .n = 1, .vec = 1};
	cg_pointwise(G, &grp);
	return 1;
}

/* reshape squeeze unsqueeze contiguous to_host to_device: the bytes. */
static int
flat(CgGraph *G, const Node *n)
{
	const Type *r = cg_vtype(G, n->res[0]);
	flat_copy(G, n, G->vname[n->opnd[0].v], G->vname[n->res[0]],
	          type_numel(r) * dtype_size((DType)r->dt),
	          cg_fmt(G->c, "%s_%s", op_name(n->op), G->g->vals.v[n->res[0]].name));
	return 1;
}

static int
zero(CgGraph *G, const Node *n)
{
	const Type *t = cg_otype(G, n, 0);
	cg_zero(G, n, G->vname[n->opnd[0].v], type_numel(t) * dtype_size((DType)t->dt));
	return 1;
}

static int
grad_op(CgGraph *G, const Node *n)
{
	cg_grad_op(G, (NodeId)(n - G->g->nodes.v));
	return !G->c->failed;
}

static int
conv(CgGraph *G, const Node *n)
{
	return cg_conv(G, n) && !G->c->failed;
}

/* The function of each emitter family (ops.def's emitter column); host
 * statements (EM_HOST) are codegen_host.c's and never come here. */
static int (*const emitters[EM__N])(CgGraph *G, const Node *n) = {
	[EM_POINTWISE] = pointwise_alone,
	[EM_REDUCE] = cg_reduce,
	[EM_SOFTMAX] = cg_softmax,
	[EM_NORM] = cg_norm,
	[EM_MSE_LOSS] = cg_mse_loss,
	[EM_CROSS_ENTROPY] = cg_cross_entropy,
	[EM_MATMUL] = cg_matmul,
	[EM_LINEAR] = cg_linear,
	[EM_SDPA] = sdpa,
	[EM_FLAT_COPY] = flat,
	[EM_STRIDED] = strided,
	[EM_CAT] = cat,
	[EM_SPLIT] = split,
	[EM_CREATION] = creation,
	[EM_EMBEDDING] = embedding,
	[EM_GATHER] = gather,
	[EM_RANDOM] = random_op,
	[EM_ZERO] = zero,
	[EM_COLLECTIVE] = cg_collective,
	[EM_CONV] = conv,
	[EM_GRAD] = grad_op,
};

int
cg_op(CgGraph *G, NodeId i)
{
	Node *n = &G->g->nodes.v[i];
	if (n->op >= OP__N)
		return 1;
	int (*emit)(CgGraph *, const Node *) = emitters[op_table[n->op].emit];
	if (emit)
		return emit(G, n);
	cg_error(G->c, n, "the CUDA backend cannot compile '%s' yet", op_name(n->op));
	return 0;
}
