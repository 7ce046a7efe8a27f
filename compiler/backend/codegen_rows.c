/*
 * codegen_rows.c - reductions and row kernels: sum/mean/amax/amin/var,
 * softmax and log_softmax, layer_norm and rms_norm, cross_entropy and
 * mse_loss, and the backward row ops (layer_norm/rms_norm, cross_entropy,
 * and autograd's softmax backward as the fusion finds it).  Rows whose
 * input is in memory in f16, bf16 or f32 go to the kernel library
 * (runtime/sgk/sgk_rows.cuh); the rest to the templates of
 * kernels.cu, whose kernels store their result through a put statement
 * that also computes a pointwise consumer fused in at -O2 (an epilogue:
 * RowOut, row_put).
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"

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

/* ------------------------------------------------------------------ results */

/* How a reduction or row kernel writes its result: its output parameters
 * and their launch arguments, and, with a pointwise consumer fused in at
 * -O2 (an epilogue, CgGroup.after), the call computing it. */
typedef struct {
	char *params, *args;
	DType dt;
	int keep;      /* the result itself goes to memory */
	CgInput ep;    /* ep.fmt: the epilogue's call, or NULL */
} RowOut;

/* The next item of a ", "-separated list at *s (advanced), or NULL. */
static char *
next_item(Cg *c, const char **s)
{
	if (!*s || !**s)
		return NULL;
	const char *e = strstr(*s, ", ");
	size_t n = e ? (size_t)(e - *s) : strlen(*s);
	char *item = cg_fmt(c, "%.*s", (int)n, *s);
	*s = e ? e + 2 : *s + n;
	return item;
}

/* 1 when the ", "-separated list has item. */
static int
has_item(Cg *c, const char *list, const char *item)
{
	for (char *x; (x = next_item(c, &list)) != NULL;)
		if (strcmp(x, item) == 0)
			return 1;
	return 0;
}

/* The output of node n's kernel (whose input parameters are inparams,
 * which an epilogue's parameters must not repeat); the epilogue function
 * is emitted here. */
static RowOut
row_out(CgGraph *G, const Node *n, const char *inparams)
{
	Cg *c = G->c;
	ValId r = n->res[0];
	RowOut o = {.dt = (DType)cg_vtype(G, r)->dt, .keep = 1};
	o.params = cg_fmt(c, "%s *__restrict__ out", cg_ctype(o.dt));
	o.args = G->vname[r];
	int e = cg_epilogue(G, (NodeId)(n - G->g->nodes.v));
	if (e < 0)
		return o;
	o.keep = !G->ingroup_only[r];
	cg_ep_fn(G, &G->groups->v[e], r, &o.ep);
	if (!o.keep)
		o.params = o.args = "";
	const char *ps = o.ep.params, *as = o.ep.args;
	for (char *p, *a; (p = next_item(c, &ps)) != NULL && (a = next_item(c, &as)) != NULL;) {
		if (has_item(c, inparams, p))
			continue;
		o.params = cg_fmt(c, "%s%s%s", o.params, *o.params ? ", " : "", p);
		o.args = cg_fmt(c, "%s%s%s", o.args, *o.args ? ", " : "", a);
	}
	return o;
}

/* The statement storing val (an expression in the accumulator) as the
 * result's element idx, and computing the epilogue there. */
static char *
row_put(Cg *c, const RowOut *o, const char *idx, const char *val)
{
	if (!o->ep.fmt)
		return cg_fmt(c, "out[%s] = %s;", idx, cg_store(c, o->dt, val));
	const char *dn = cg_dtname(o->dt);
	return cg_fmt(c, "{ const %s r_ = sg_to_%s(%s);%s %s; }", cg_regtype(o->dt), dn, val,
	              o->keep ? cg_fmt(c, " out[%s] = sg_st_%s(r_);", idx, dn) : "",
	              cg_fmt(c, o->ep.fmt, idx, "r_"));
}

/* Splits x's dims into kept and reduced ones: sizes, strides, counts. */
static void
split_dims(const Type *x, const int *red, int64_t *ks, int64_t *kst, int *nk,
           int64_t *rs, int64_t *rst, int *nr, int64_t *nout, int64_t *nred)
{
	int64_t st[SG_MAXRANK];
	shape_row_strides(x, st);
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
                 const char *finish, const RowOut *ro)
{
	Cg *c = G->c;
	int64_t nparts = cg_grid(nred, 256);
	if (nparts > 1024)
		nparts = 1024;
	char *tmp = cg_alloc_tmp(G, n, acc, nparts * (int64_t)(strcmp(acc, "float") ? 8 : 4),
	                      "part");
	const char *k1 = cg_kernel_name(G, n, cg_fmt(c, "%s_part", what));
	const char *k2 = cg_kernel_name(G, n, cg_fmt(c, "%s_final", what));
	k1 = CG_KERNEL(G, "kernels.cu:reduce_partial", {"comment", cg_comment(G, n)},
	        {"what", what}, {"name", k1},
	        {"params", cg_fmt(c, "%s, %s *__restrict__ part", params, acc)},
	        {"acc", acc}, {"init", init}, {"nred", cg_num(c, nred)}, {"op", op},
	        {"load", loadexpr});
	k2 = CG_KERNEL(G, "kernels.cu:reduce_final", {"what", what}, {"name", k2},
	        {"acc", acc}, {"oparams", ro->params}, {"init", init},
	        {"nparts", cg_num(c, nparts)}, {"op", op},
	        {"put", row_put(c, ro, "0", finish)});
	cg_launch(G, n, k1, nparts, 256, 0, cg_fmt(c, "%s, %s", args, tmp));
	cg_launch(G, n, k2, 1, 256, 0, cg_fmt(c, "%s, %s", tmp, ro->args));
	cg_free_tmp(G, n, tmp);
}

/* Stage 2 of a split reduction (kernels.cu:reduce_parts_final): a thread
 * per output combining its nsplit parts in order, var (FIN_VAR) by Chan's
 * formula over the slices' means and squared deviations, then put (and,
 * for var_mean, the mean).  Its kernel's name. */
static const char *
parts_final(CgGraph *G, const Node *n, const char *acc, const char *op, const char *init,
            const RowOut *ro, int64_t nout, int64_t nred, int64_t nsplit, int64_t chunk,
            int var, const char *put)
{
	Cg *c = G->c;
	int mean = var && n->nres == 2;
	return CG_KERNEL(G, "kernels.cu:reduce_parts_final",
	        {"name", cg_kernel_name(G, n, cg_fmt(c, "%s_final", op_name(n->op)))},
	        {"acc", acc}, {"oparams", mean ? cg_fmt(c, "%s, %s *__restrict__ mean_out",
	                                                ro->params,
	                                                cg_ctype((DType)cg_vtype(G, n->res[1])->dt))
	                                       : ro->params},
	        {"init", init}, {"nout", cg_num(c, nout)}, {"nred", cg_num(c, nred)},
	        {"nsplit", cg_num(c, nsplit)}, {"chunk", cg_num(c, chunk)}, {"op", op},
	        {"var", var ? "1" : ""},
	        {"how", var ? ": the slices' means and squared deviations by Chan's formula" : ""},
	        {"put", put}, {"mean", mean ? "1" : ""},
	        {"store_mean", mean ? cg_store(c, (DType)cg_vtype(G, n->res[1])->dt, "mean") : ""});
}

/* A reduction with too few outputs to fill the GPU over many elements
 * each, whose reduced dims end with the innermost ones (batch norm's
 * statistics and gradients: [N, C, H, W] over [0, 2, 3], 64 outputs of
 * 401408 elements): each output's elements r = q * inner + i (i over the
 * trailing reduced dims, contiguous; q over the others) split into
 * slices of chunk, a block per output and slice writes a part (var: the
 * slice's mean and sum of squared deviations), then one kernel combines
 * each output's parts in a fixed order (a single output: from
 * ONE_OUT_SPLIT elements, as reduce_two_stage).  0, with nothing emitted,
 * when one block per output is enough. */
enum { SPLIT_BLOCKS = 1024, SPLIT_MIN_CHUNK = 4096, ONE_OUT_SPLIT = 32768 };
static int
reduce_split(CgGraph *G, const Node *n, const CgInput *in, const RowOut *ro, const Type *x,
             const int *red, const char *base, const char *acc, const char *op,
             const char *init, const char *cv, int64_t nout, int64_t nred, int var,
             const char *put)
{
	Cg *c = G->c;
	int64_t st[SG_MAXRANK], inner = 1, qs[SG_MAXRANK], qst[SG_MAXRANK];
	int d = x->rank, nq = 0;
	while (d > 0 && red[d - 1])
		inner *= x->d[--d];
	int64_t nsplit = SPLIT_BLOCKS / nout;
	if (nsplit > nred / SPLIT_MIN_CHUNK)
		nsplit = nred / SPLIT_MIN_CHUNK;
	if (inner < 32 || nsplit < 2 || (nout == 1 && nred < ONE_OUT_SPLIT))
		return 0;
	int64_t chunk = (nred + nsplit - 1) / nsplit;
	nsplit = (nred + chunk - 1) / chunk;
	if (chunk + inner >= INT32_MAX)
		return 0;
	shape_row_strides(x, st);
	for (int k = 0; k < d; k++)
		if (red[k]) {
			qs[nq] = x->d[k];
			qst[nq++] = st[k];
		}
	char *qoff = cg_index(c, "q", nq, qs, qst, 0);
	int hasq = strcmp(qoff, "0") != 0;
	char *off = hasq ? cg_fmt(c, "base + %s + i", qoff) : "base + i";
	int64_t width = var ? 2 : 1;
	char *tmp = cg_alloc_tmp(G, n, acc, width * nsplit * nout *
	                         (int64_t)(strcmp(acc, "float") ? 8 : 4), "parts");
	const char *k1 = CG_KERNEL(G, "kernels.cu:reduce_split_part", {"comment", cg_comment(G, n)},
	        {"name", cg_kernel_name(G, n, cg_fmt(c, "%s_part", op_name(n->op)))},
	        {"xparams", in->params}, {"acc", acc}, {"init", init}, {"op", op},
	        {"base", base}, {"inner", cg_num(c, inner)}, {"chunk", cg_num(c, chunk)},
	        {"nred", cg_num(c, nred)}, {"nout", cg_num(c, nout)}, {"q", hasq ? "1" : ""},
	        {"load", cg_fmt(c, "%s(%s)", cv, cg_fmt(c, in->fmt, off))}, {"var", var ? "1" : ""},
	        {"what", var ? "the slice's mean and sum of squared deviations from it (two passes)"
	                     : "its reduction over the slice"});
	const char *k2 = parts_final(G, n, acc, op, init, ro, nout, nred, nsplit, chunk, var, put);
	CG_EMIT(G->body, "host.cu:launch", {"s", cg_num(c, cg_stream(n))},
	        {"kname", k1}, {"line", cg_num(c, n->loc.line)},
	        {"grid", cg_fmt(c, "dim3(%lld, %lld)", (long long)nout, (long long)nsplit)},
	        {"block", "256"}, {"smem", "0"}, {"args", cg_fmt(c, "%s, %s", in->args, tmp)});
	const char *args = cg_fmt(c, "%s, %s", tmp, ro->args);
	if (var && n->nres == 2)
		args = cg_fmt(c, "%s, %s", args, G->vname[n->res[1]]);
	cg_launch(G, n, k2, (nout + 255) / 256, 256, 0, args);
	cg_free_tmp(G, n, tmp);
	return 1;
}

/* A column reduction (the outputs the innermost elements) with too few
 * columns to fill the GPU one block per 32 of them, over many rows (a
 * bias's or a norm weight's gradient: 2048 columns of 16384 rows): the
 * rows split into slices, a part per slice and column, then one kernel
 * combining the parts.  0, with nothing emitted, when one block per 32
 * columns is enough. */
enum { COLS_BLOCKS = 1024, COLS_MIN_CHUNK = 256 };
static int
reduce_cols_split(CgGraph *G, const Node *n, const CgInput *in, const RowOut *ro,
                  const char *acc, const char *op, const char *init, const char *cv,
                  int nr, const int64_t *rs, const int64_t *rst, int64_t nout, int64_t nred,
                  const char *finish)
{
	Cg *c = G->c;
	int64_t xblocks = (nout + 31) / 32, nsplit = COLS_BLOCKS / xblocks;
	if (nsplit > nred / COLS_MIN_CHUNK)
		nsplit = nred / COLS_MIN_CHUNK;
	if (nsplit < 2)
		return 0;
	int64_t chunk = (nred + nsplit - 1) / nsplit;
	nsplit = (nred + chunk - 1) / chunk;
	const char *ld[4];
	for (int k = 0; k < 4; k++) { /* rows r, r + 8, r + 16, r + 24 */
		char *off = cg_index(c, k ? cg_fmt(c, "(r + %d)", 8 * k) : "r", nr, rs, rst, 0);
		ld[k] = cg_fmt(c, "%s(%s)", cv, cg_fmt(c, in->fmt, cg_fmt(c, "o + %s", off)));
	}
	char *tmp = cg_alloc_tmp(G, n, acc, nsplit * nout * (int64_t)(strcmp(acc, "float") ? 8 : 4),
	                         "cols");
	const char *k1 = CG_KERNEL(G, "kernels.cu:reduce_cols_part", {"comment", cg_comment(G, n)},
	        {"name", cg_kernel_name(G, n, cg_fmt(c, "%s_part", op_name(n->op)))},
	        {"xparams", in->params}, {"acc", acc}, {"init", init},
	        {"nout", cg_num(c, nout)}, {"nred", cg_num(c, nred)},
	        {"nsplit", cg_num(c, nsplit)}, {"chunk", cg_num(c, chunk)}, {"op", op},
	        {"load0", ld[0]}, {"load1", ld[1]}, {"load2", ld[2]}, {"load3", ld[3]});
	const char *k2 = parts_final(G, n, acc, op, init, ro, nout, nred, nsplit, chunk, 0,
	                             row_put(c, ro, "o", finish));
	CG_EMIT(G->body, "host.cu:launch", {"s", cg_num(c, cg_stream(n))},
	        {"kname", k1}, {"line", cg_num(c, n->loc.line)},
	        {"grid", cg_fmt(c, "dim3(%lld, %lld)", (long long)xblocks, (long long)nsplit)},
	        {"block", "256"}, {"smem", "0"}, {"args", cg_fmt(c, "%s, %s", in->args, tmp)});
	cg_launch(G, n, k2, (nout + 255) / 256, 256, 0, cg_fmt(c, "%s, %s", tmp, ro->args));
	cg_free_tmp(G, n, tmp);
	return 1;
}

/* v / n in type acc ("float" or "double"): a division by a zero count
 * (the mean of nothing, the variance of one element or of none) is NaN, written as
 * such rather than as a constant division by zero. */
static char *
divide(Cg *c, const char *v, const char *acc, int64_t n)
{
	if (n == 0)
		return strcmp(acc, "double") == 0 ? "sg_nan()" : "sg_nanf()";
	return cg_fmt(c, "%s / (%s)%lld", v, acc, (long long)n);
}

/* Autograd's softmax or log_softmax backward, found by the fusion (the sum
 * node n, its producer and consumer): one row kernel of the library. */
static int
softmax_backward(CgGraph *G, const Node *n, const SoftmaxBwd *sb)
{
	Cg *c = G->c;
	const Type *x = cg_vtype(G, sb->g);
	int64_t len = x->d[x->rank - 1], rows = type_numel(x) / len;
	const char *s = cg_num(c, cg_stream(n));
	cg_use_library(G, "sgk_rows.cuh");
	CG_EMIT(G->body, "host.cu:lib_call", {"s", s},
	        {"kname", cg_kernel_name(G, n, sb->log ? "log_softmax_backward" : "softmax_backward")},
	        {"line", cg_num(c, n->loc.line)},
	        {"call", cg_fmt(c, "sg_launch_softmax_bwd<float>(%s, %s, %s, %lld, %lld, %d, "
	                        "sgrt_stream(rt, %s))", G->vname[sb->y], G->vname[sb->g],
	                        G->vname[sb->dx], (long long)rows, (long long)len, sb->log, s)});
	return 1;
}

/* sum mean amax amin var var_mean. */
int
cg_reduce(CgGraph *G, const Node *n)
{
	const SoftmaxBwd *sb = G->s->softmax_bwd[n - G->g->nodes.v]; /* (fusion.c) */
	if (sb)
		return softmax_backward(G, n, sb);
	if (G->s->bn_stats[n - G->g->nodes.v] != NONE)
		return 1; /* the batch_norm after it writes its results (kernel_choice) */
	if (G->g->vals.v[n->opnd[0].v].layout == LAYOUT_CL)
		ICE("%s of a channels-last value", op_name(n->op));
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 0), *r = cg_vtype(G, n->res[0]);
	int red[SG_MAXRANK], nk, nr;
	int64_t ks[SG_MAXRANK], kst[SG_MAXRANK], rs[SG_MAXRANK], rst[SG_MAXRANK];
	int64_t nout, nred;
	shape_reduced_dims(n, x->rank, red);
	split_dims(x, red, ks, kst, &nk, rs, rst, &nr, &nout, &nred);
	if (nout == 0)
		return 1;
	DType rdt = (DType)r->dt;
	int fl = dtype_is_float((DType)x->dt) || dtype_is_float(rdt);
	const char *acc = fl ? cg_acc_type((DType)x->dt) : "sg_i64";
	const char *ov = G->vname[n->res[0]];
	CgInput in = cg_input(G, n);
	RowOut ro = row_out(G, n, in.params);
	const char *xv = in.args;
	const char *cv = fl ? cg_acc_conv((DType)x->dt) : "";
	char *roff = cg_index(c, "r", nr, rs, rst, 0);
	char *loadexpr = cg_fmt(c, "%s(%s)", cv, cg_fmt(c, in.fmt, cg_fmt(c, "base + %s", roff)));
	CgRows rg = cg_rows(nout, nred);
	const char *kname = cg_kernel_name(G, n, op_name(n->op));
	char *base = cg_index(c, "o", nk, ks, kst, 0);
	if (op_table[n->op].finish == FIN_VAR) {
		char *put = row_put(c, &ro, "o", divide(c, "q", acc, nred > 1 ? nred - 1 : 0));
		if (reduce_split(G, n, &in, &ro, x, red, base, acc, "sg_sum_op", "0", cv, nout, nred,
		                 1, put))
			return 1;
		int mean = n->nres == 2; /* var_mean */
		char *params = cg_fmt(c, "%s, %s%s%s%s",
		                      in.params, ro.params,
		                      mean ? ", " : "", mean ? cg_ctype(rdt) : "",
		                      mean ? " *__restrict__ mean_out" : "");
		kname = CG_KERNEL(G, "kernels.cu:reduce_var", {"comment", cg_comment(G, n)},
		        {"name", kname}, {"params", params}, {"block", cg_num(c, rg.block)},
		        {"rows", cg_num(c, rg.rows)}, {"tpr", cg_num(c, rg.tpr)},
		        {"nout", cg_num(c, nout)}, {"base", base},
		        {"acc", acc}, {"nred", cg_num(c, nred)}, {"load", loadexpr}, {"put", put},
		        {"smean", divide(c, "s", acc, nred)},
		        {"mean", mean ? "1" : ""}, {"store_mean", cg_store(c, rdt, "mean")});
		cg_launch(G, n, kname, rg.grid, rg.block, 0,
		       mean ? cg_fmt(c, "%s, %s, %s", xv, ov, G->vname[n->res[1]])
		            : cg_fmt(c, "%s, %s", xv, ro.args));
		return 1;
	}
	/* The combine step's functor and identity (ops.def's RED). */
	const OpInfo *oi = &op_table[n->op];
	const char *op = cg_fmt(c, "sgk_%s_op", oi->combine.name);
	const char *init = oi->ident == RED_ONE ? "1" : "0";
	if (oi->ident == RED_LOWEST || oi->ident == RED_HIGHEST) {
		int mx = oi->ident == RED_LOWEST;
		init = !fl ? (mx ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL")
		     : strcmp(acc, "float") == 0 ? (mx ? "-sg_inff()" : "sg_inff()")
		                                 : (mx ? "-sg_inf()" : "sg_inf()");
	}
	char *finish = oi->finish == FIN_MEAN ? divide(c, "acc", acc, nred)
	                                      : "acc";
	if (nout == 1 && nred >= ONE_OUT_SPLIT) {
		char *ld = cg_fmt(c, "%s(%s)", cv, cg_fmt(c, in.fmt, "r"));
		reduce_two_stage(G, n, op_name(n->op), in.params, xv, acc, op, init, ld,
		                 nred, finish, &ro);
		return 1;
	}
	if (strcmp(base, "o") == 0 && nout > 1 &&
	    reduce_cols_split(G, n, &in, &ro, acc, op, init, cv, nr, rs, rst, nout, nred, finish))
		return 1;
	if (strcmp(base, "o") == 0 && nout > 1) {
		/* The outputs are the innermost elements: read them coalesced. */
		char *ld = cg_fmt(c, in.fmt, cg_fmt(c, "o + %s", roff));
		kname = CG_KERNEL(G, "kernels.cu:reduce_cols", {"comment", cg_comment(G, n)},
		        {"name", kname}, {"xparams", in.params},
		        {"oparams", ro.params}, {"acc", acc}, {"init", init},
		        {"nout", cg_num(c, nout)}, {"nred", cg_num(c, nred)}, {"op", op},
		        {"load", cg_fmt(c, "%s(%s)", cv, ld)},
		        {"put", row_put(c, &ro, "o", finish)});
		cg_launch(G, n, kname, (nout + 31) / 32, 256, 0, cg_fmt(c, "%s, %s", xv, ro.args));
		return 1;
	}
	if (reduce_split(G, n, &in, &ro, x, red, base, acc, op, init, cv, nout, nred, 0,
	                 row_put(c, &ro, "o", finish)))
		return 1;
	kname = CG_KERNEL(G, "kernels.cu:reduce", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"xparams", in.params}, {"oparams", ro.params},
	        {"block", cg_num(c, rg.block)}, {"rows", cg_num(c, rg.rows)},
	        {"tpr", cg_num(c, rg.tpr)}, {"nout", cg_num(c, nout)},
	        {"base", base}, {"acc", acc},
	        {"init", init}, {"nred", cg_num(c, nred)}, {"op", op}, {"load", loadexpr},
	        {"put", row_put(c, &ro, "o", finish)});
	cg_launch(G, n, kname, rg.grid, rg.block, 0, cg_fmt(c, "%s, %s", xv, ro.args));
	return 1;
}

/* The offset of row o of an [outer, len, inner] view. */
char *
cg_row_base(Cg *c, int64_t outer, int64_t len, int64_t inner)
{
	int64_t sz[2] = {outer, inner}, st[2] = {len * inner, 1};
	return cg_index(c, "o", 2, sz, st, 0);
}

/* ------------------------------------------------------------------ kernel library */

/* Includes the kernel-library header `file` (runtime/sgk/) in the
 * generated file: codegen_module writes one #include per file used, after
 * the device helpers. */
void
cg_use_library(CgGraph *G, const char *file)
{
	Cg *c = G->c;
	for (uint32_t i = 0; i < c->libraries.n; i++)
		if (strcmp(c->libraries.v[i], file) == 0)
			return;
	vec_push(&c->libraries, file);
}

/* softmax, log_softmax, layer_norm, rms_norm over the last dim through the
 * row kernels of sgk_rows.cuh, where kernel_choice chose them (f16, bf16,
 * f32 whose input is in memory: no pointwise producer fused in at -O2).
 * 0, with nothing emitted, otherwise. */
static int
rows_library(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	if (!G->s->rows_lib[n - G->g->nodes.v]) /* kernel_choice's choice */
		return 0;
	const Type *x = cg_otype(G, n, 0);
	DType dt = (DType)x->dt;
	int64_t len = x->d[x->rank - 1], rows = type_numel(x) / len;
	int soft = n->op == OP_SOFTMAX || n->op == OP_LOG_SOFTMAX;
	cg_use_library(G, "sgk_rows.cuh");
	const char *t = cg_ctype(dt), *rv = G->vname[n->res[0]];
	const char *xv = G->vname[n->opnd[0].v], *s = cg_num(c, cg_stream(n));
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
		NodeId X = G->fold ? G->fold->norm_add[n - G->g->nodes.v] : NONE;
		const char *fn = "sg_launch_layer_norm_fwd", *in = xv;
		if (X != NONE) { /* kernel_choice's norm_add: x1 = a + b computed here */
			const Node *a = &G->g->nodes.v[X];
			fn = "sg_launch_layer_norm_fwd_add";
			in = cg_fmt(c, "%s, %s, %s", G->vname[a->opnd[0].v], G->vname[a->opnd[1].v], xv);
		}
		call = cg_fmt(c, "%s<%s>(%s, %s, %s, %s, NULL, NULL, %lld, %lld, %s, %d, "
		              "sgrt_stream(rt, %s))", fn, t, in, w, b, rv, (long long)rows,
		              (long long)len, cg_lit_float(c, (double)(float)eps, 1), rms, s);
	}
	CG_EMIT(G->body, "host.cu:lib_call", {"s", s},
	        {"kname", cg_kernel_name(G, n, op_name(n->op))}, {"line", cg_num(c, n->loc.line)},
	        {"call", call});
	return 1;
}

/* softmax, log_softmax. */
int
cg_softmax(CgGraph *G, const Node *n)
{
	if (type_numel(cg_otype(G, n, 0)) > 0 && rows_library(G, n))
		return 1;
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 0);
	DType dt = (DType)x->dt;
	int d = x->rank ? shape_norm_dim(ir_attr_int(n, "dim", -1), x->rank) : 0;
	int64_t outer, len, inner;
	type_around(x, d, &outer, &len, &inner);
	int64_t nout = outer * inner;
	if (nout == 0 || len == 0)
		return 1;
	CgRows rg = cg_rows(nout, len);
	const char *acc = cg_acc_type(dt), *kname = cg_kernel_name(G, n, op_name(n->op));
	char *roff = inner == 1 ? "r" : cg_fmt(c, "r * %lld", (long long)inner);
	CgInput in = cg_input(G, n);
	RowOut ro = row_out(G, n, in.params);
	char *ld = cg_fmt(c, "%s(%s)", cg_acc_conv(dt),
	                  cg_fmt(c, in.fmt, cg_fmt(c, "base + %s", roff)));
	kname = CG_KERNEL(G, "kernels.cu:softmax", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"xparams", in.params}, {"oparams", ro.params}, {"block", cg_num(c, rg.block)},
	        {"rows", cg_num(c, rg.rows)},
	        {"tpr", cg_num(c, rg.tpr)}, {"nout", cg_num(c, nout)},
	        {"base", cg_row_base(c, outer, len, inner)}, {"acc", acc},
	        {"inf", dt == DT_F64 ? "sg_inf()" : "sg_inff()"}, {"len", cg_num(c, len)},
	        {"load", ld},
	        {"put", row_put(c, &ro, cg_fmt(c, "base + %s", roff),
	                        n->op == OP_LOG_SOFTMAX ? "v - ls" : "sg_exp(v) / s")});
	cg_launch(G, n, kname, rg.grid, rg.block, 0, cg_fmt(c, "%s, %s", in.args, ro.args));
	return 1;
}

/* layer_norm, rms_norm over the last dim. */
int
cg_norm(CgGraph *G, const Node *n)
{
	if (type_numel(cg_otype(G, n, 0)) > 0 && rows_library(G, n))
		return 1;
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 0);
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
	RowOut ro = row_out(G, n, in.params);
	params = cg_fmt(c, "%s%s", params, ro.params);
	args = cg_fmt(c, "%s, %s", args, ro.args);
	CgRows rg = cg_rows(nout, len);
	const char *kname = cg_kernel_name(G, n, op_name(n->op));
	double eps = ir_attr_float(n, "eps", n->op == OP_RMS_NORM ? 1e-6 : 1e-5);
	kname = CG_KERNEL(G, "kernels.cu:norm", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"params", params}, {"block", cg_num(c, rg.block)}, {"rows", cg_num(c, rg.rows)},
	        {"tpr", cg_num(c, rg.tpr)}, {"nout", cg_num(c, nout)}, {"len", cg_num(c, len)},
	        {"acc", acc}, {"layer", n->op == OP_LAYER_NORM ? "1" : ""},
	        {"load", cg_fmt(c, "%s(%s)", cg_acc_conv(dt), cg_fmt(c, in.fmt, "base + r"))},
	        {"eps", cg_lit_float(c, dt == DT_F64 ? eps : (double)(float)eps, dt != DT_F64)},
	        {"w", hw ? "1" : ""}, {"b", hb ? "1" : ""}, {"opc", cg_acc_conv(dt)},
	        {"put", row_put(c, &ro, "base + r", "v")});
	cg_launch(G, n, kname, rg.grid, rg.block, 0, args);
	return 1;
}

/* cross_entropy (bwd 0) or cross_entropy_backward (bwd 1) through the
 * kernel library: logits of f16, bf16 or f32 whose class dim is the last
 * ([N, C] or [C]) and a result of their dtype.  The row logsumexps from
 * sg_launch_cross_entropy_lse, then one block checks the targets (a trap
 * with the .sg line, as the other kernels), counts them and, forward,
 * writes the mean loss (with a fused consumer); backward,
 * sg_launch_cross_entropy_bwd.  kernel_choice chose it (passes/kernels.c,
 * rows_library); 0, with nothing emitted, otherwise. */
static int
ce_library(CgGraph *G, const Node *n, int bwd)
{
	Cg *c = G->c;
	if (!G->s->rows_lib[n - G->g->nodes.v]) /* kernel_choice's choice */
		return 0;
	const Type *x = cg_otype(G, n, bwd);
	DType dt = (DType)x->dt;
	int64_t outer, len, inner;
	type_around(x, x->rank >= 2 ? 1 : 0, &outer, &len, &inner);
	cg_use_library(G, "sgk_rows.cuh");
	const char *ct = cg_ctype(dt), *s = cg_num(c, cg_stream(n));
	const char *xv = G->vname[n->opnd[bwd].v], *tv = G->vname[n->opnd[bwd + 1].v];
	char *lse = cg_alloc_tmp(G, n, "float", (outer + 1) * 4, "lse");
	CG_EMIT(G->body, "host.cu:lib_call", {"s", s},
	        {"kname", cg_kernel_name(G, n, "cross_entropy_lse")},
	        {"line", cg_num(c, n->loc.line)},
	        {"call", cg_fmt(c, "sg_launch_cross_entropy_lse<%s>(%s, %s, %lld, %lld, "
	                        "sgrt_stream(rt, %s))", ct, xv, lse, (long long)outer,
	                        (long long)len, s)});
	RowOut ro = {.params = "", .args = ""};
	if (!bwd) {
		ro = row_out(G, n, "");
		ro.params = cg_fmt(c, ", %s", ro.params);
		ro.args = cg_fmt(c, ", %s", ro.args);
	}
	const char *k2 = cg_kernel_name(G, n, bwd ? "cross_entropy_count" : "cross_entropy_loss");
	k2 = CG_KERNEL(G, "kernels.cu:ce_lse_loss", {"comment", cg_comment(G, n)}, {"name", k2},
	        {"t", ct}, {"oparams", ro.params}, {"nout", cg_num(c, outer)},
	        {"len", cg_num(c, len)}, {"file", cg_source_name(c)},
	        {"line", cg_num(c, n->loc.line)}, {"what", op_name(n->op)},
	        {"loss", bwd ? "" : "1"}, {"put", bwd ? "" : row_put(c, &ro, "0", "s / c")});
	cg_launch(G, n, k2, 1, 256, 0, cg_fmt(c, "%s, %s, %s%s", xv, tv, lse, ro.args));
	if (bwd)
		CG_EMIT(G->body, "host.cu:lib_call", {"s", s},
		        {"kname", cg_kernel_name(G, n, op_name(n->op))},
		        {"line", cg_num(c, n->loc.line)},
		        {"call", cg_fmt(c, "sg_launch_cross_entropy_bwd<%s>(%s, %s, %s, %s, %s, %lld, "
		                        "%lld, sgrt_stream(rt, %s))", ct, xv, tv, lse,
		                        G->vname[n->opnd[0].v], G->vname[n->res[0]],
		                        (long long)outer, (long long)len, s)});
	cg_free_tmp(G, n, lse);
	return 1;
}

int
cg_rows_ce_backward(CgGraph *G, const Node *n)
{
	return ce_library(G, n, 1);
}

/* dx (plus the residual operand), dw and (layer_norm) db of a norm
 * backward with the weight's gradient or a residual:
 * sg_launch_layer_norm_bwd_fused, through a workspace of the row groups'
 * column sums when it gives dw; no rows: zero dw and db. */
static void
norm_backward_fused(CgGraph *G, const Node *n, int64_t rows, int64_t len, double eps)
{
	Cg *c = G->c;
	DType dt = (DType)cg_otype(G, n, 1)->dt;
	const char *ct = cg_ctype(dt);
	int wi = ir_norm_bwd_weight(n), ri = ir_norm_bwd_residual(n);
	const char *dw = n->nres > 1 ? G->vname[n->res[1]] : "NULL";
	const char *db = n->nres > 2 ? G->vname[n->res[2]] : "NULL", *work = "NULL";
	if (rows == 0) {
		for (uint32_t i = 1; i < n->nres; i++)
			cg_zero(G, n, G->vname[n->res[i]], len * dtype_size(dt));
		return;
	}
	cg_use_library(G, "sgk_rows.cuh");
	if (n->nres > 1)
		work = cg_alloc_tmp_expr(G, n, "void", cg_fmt(c, "sg_layer_norm_bwd_fused_workspace<%s>"
		                         "(%lld, %lld)", ct, (long long)rows, (long long)len),
		                         "norm_parts");
	CG_EMIT(G->body, "host.cu:lib_call", {"s", cg_num(c, cg_stream(n))},
	        {"kname", cg_kernel_name(G, n, op_name(n->op))}, {"line", cg_num(c, n->loc.line)},
	        {"call", cg_fmt(c, "sg_launch_layer_norm_bwd_fused<%s>(%s, %s, %s, %s, %s, %s, %s, "
	                        "%s, %lld, %lld, %s, %d, sgrt_stream(rt, %d))", ct,
	                        G->vname[n->opnd[0].v], G->vname[n->opnd[1].v],
	                        wi > 0 ? G->vname[n->opnd[wi].v] : "NULL",
	                        ri > 0 ? G->vname[n->opnd[ri].v] : "NULL", G->vname[n->res[0]],
	                        dw, db, work, (long long)rows, (long long)len,
	                        cg_lit_float(c, (double)(float)eps, 1),
	                        n->op == OP_RMS_NORM_BACKWARD, cg_stream(n))});
	if (n->nres > 1)
		cg_free_tmp(G, n, work);
}

/* layer_norm_backward, rms_norm_backward (g, x, w?, r?) through the
 * kernel library for f16, bf16, f32 (and f64 with the weight's gradient):
 * sg_launch_layer_norm_bwd_x for dx alone (the statistics again from x,
 * dx in one row kernel); with dw (and db) or a residual r,
 * sg_launch_layer_norm_bwd_fused (dx plus r, and the row groups' column
 * sums in one pass, then their sum); 0, with nothing emitted, otherwise. */
int
cg_rows_norm_backward(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 1);
	DType dt = (DType)x->dt;
	if (!G->s->rows_lib[n - G->g->nodes.v]) /* kernel_choice's choice */
		return 0;
	int64_t len = x->d[x->rank - 1], rows = type_numel(x) / len;
	int rms = n->op == OP_RMS_NORM_BACKWARD;
	double eps = ir_attr_float(n, "eps", rms ? 1e-6 : 1e-5);
	const char *s = cg_num(c, cg_stream(n)), *ct = cg_ctype(dt);
	if (n->nres > 1 || ir_norm_bwd_residual(n) > 0) {
		norm_backward_fused(G, n, rows, len, eps);
		return 1;
	}
	if (rows == 0)
		return 1;
	cg_use_library(G, "sgk_rows.cuh");
	CG_EMIT(G->body, "host.cu:lib_call", {"s", s},
	        {"kname", cg_kernel_name(G, n, op_name(n->op))}, {"line", cg_num(c, n->loc.line)},
	        {"call", cg_fmt(c, "sg_launch_layer_norm_bwd_x<%s>(%s, %s, %s, %s, %lld, %lld, %s, "
	                        "%d, sgrt_stream(rt, %s))", ct, G->vname[n->opnd[0].v],
	                        G->vname[n->opnd[1].v],
	                        ir_norm_bwd_weight(n) > 0 ? G->vname[n->opnd[2].v] : "NULL",
	                        G->vname[n->res[0]], (long long)rows, (long long)len,
	                        cg_lit_float(c, (double)(float)eps, 1), rms, s)});
	return 1;
}

/* cg_cross_entropy(logits, target): mean over the rows whose target is not
 * -100 of logsumexp - logit[target]; the class dim is 1 (0 for 1-d). */
int
cg_cross_entropy(CgGraph *G, const Node *n)
{
	if (ce_library(G, n, 0))
		return 1;
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 0), *t = cg_otype(G, n, 1);
	DType dt = (DType)x->dt, rdt = (DType)cg_vtype(G, n->res[0])->dt;
	int64_t outer, len, inner;
	type_around(x, x->rank >= 2 ? 1 : 0, &outer, &len, &inner);
	int64_t nout = outer * inner;
	const char *acc = cg_acc_type(dt);
	const char *ov = G->vname[n->res[0]];
	if (nout == 0) {
		const char *kname = cg_kernel_name(G, n, "cross_entropy_empty");
		kname = CG_KERNEL(G, "kernels.cu:fill", {"comment", cg_comment(G, n)}, {"name", kname},
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
	k1 = CG_KERNEL(G, "kernels.cu:ce_rows", {"comment", cg_comment(G, n)}, {"name", k1},
	        {"t", cg_ctype(dt)}, {"tt", cg_ctype((DType)t->dt)}, {"acc", acc},
	        {"block", cg_num(c, rg.block)}, {"rows", cg_num(c, rg.rows)},
	        {"tpr", cg_num(c, rg.tpr)}, {"nout", cg_num(c, nout)}, {"len", cg_num(c, len)},
	        {"file", cg_source_name(c)}, {"line", cg_num(c, n->loc.line)},
	        {"base", cg_row_base(c, outer, len, inner)},
	        {"inf", dt == DT_F64 ? "sg_inf()" : "sg_inff()"},
	        {"load", cg_fmt(c, "%s(sg_ld(x[base + %s]))", cg_acc_conv(dt), roff)});
	RowOut ro = row_out(G, n, "");
	k2 = CG_KERNEL(G, "kernels.cu:ce_mean", {"name", k2}, {"acc", acc},
	        {"oparams", ro.params}, {"nout", cg_num(c, nout)},
	        {"put", row_put(c, &ro, "0", "s / c")});
	cg_launch(G, n, k1, rg.grid, rg.block, 0,
	       cg_fmt(c, "%s, %s, %s", G->vname[n->opnd[0].v], G->vname[n->opnd[1].v], tmp));
	cg_launch(G, n, k2, 1, 256, 0, cg_fmt(c, "%s, %s", tmp, ro.args));
	cg_free_tmp(G, n, tmp);
	return 1;
}

/* Strides with which an operand of type t is read at each index of the
 * broadcast shape s (0 along broadcast dims). */
void
cg_bcast_strides(const Type *t, const Type *s, int64_t *bst)
{
	int64_t st[SG_MAXRANK];
	shape_row_strides(t, st);
	for (int d = 0; d < s->rank; d++) {
		int td = d - (s->rank - t->rank);
		bst[d] = td >= 0 && t->d[td] != 1 ? st[td] : 0;
	}
}

/* cg_mse_loss(a, b): mean of (a - b)^2 over their broadcast shape. */
int
cg_mse_loss(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *a = cg_otype(G, n, 0), *b = cg_otype(G, n, 1);
	DType rdt = (DType)cg_vtype(G, n->res[0])->dt;
	Type s;
	shape_broadcast(a, b, &s);
	int64_t N = type_numel(&s), sa[SG_MAXRANK], sb[SG_MAXRANK];
	cg_bcast_strides(a, &s, sa);
	cg_bcast_strides(b, &s, sb);
	const char *acc = cg_acc_type(rdt), *cv = cg_acc_conv(rdt);
	char *ld = cg_fmt(c, "sg_sq(%s(sg_ld(a[%s])) - %s(sg_ld(b[%s])))", cv,
	                  cg_index(c, "r", s.rank, s.d, sa, 0), cv,
	                  cg_index(c, "r", s.rank, s.d, sb, 0));
	char *params = cg_fmt(c, "const %s *__restrict__ a, const %s *__restrict__ b",
	                      cg_ctype((DType)a->dt), cg_ctype((DType)b->dt));
	RowOut ro = row_out(G, n, "");
	reduce_two_stage(G, n, "mse_loss", params,
	                 cg_fmt(c, "%s, %s", G->vname[n->opnd[0].v], G->vname[n->opnd[1].v]),
	                 acc, "sg_sum_op", "0", ld, N,
	                 divide(c, "acc", acc, N), &ro);
	return 1;
}

