/*
 * codegen_conv.c - CUDA for conv2d, the 2-D pools and batch_norm, and
 * their backward ops, through the kernel library sgk_conv.cuh.
 *
 * A convolution (forward, dgrad, wgrad) first asks the runtime for cuDNN
 * (sgrt_conv2d, runtime/sgrt_conv_cudnn.c: loaded with dlopen, a plan per
 * shape kept by the model); when cuDNN is missing or declines, the
 * library's direct kernel runs, and the trace names which one did
 * (`conv2d.cudnn` / `conv2d.direct`).  Pools and batch_norm are the
 * library's kernels; a batch_norm's statistics (and the parts of its
 * per-channel sums) go to a scratch buffer of the size the library's
 * sg_batch_norm_workspace gives.  Each reads and writes its tensors in
 * the layout the layout pass gave them (SgConvGeom's cl, batch norm's cl
 * argument); to_layout converts between the two.
 */
#include <string.h>

#include "codegen.h"

/* "SgConvGeom{...}": the SgConvGeom of node n over x and weight shapes
 * (w NULL for a pool; adaptive pools take y's size), cl 1 when its
 * tensors are stored channels last (the layout pass). */
static char *
geom_text(Cg *c, const Node *n, const int64_t *x, const int64_t *w, const int64_t *y, int cl)
{
	ConvGeom g;
	if (n->op == OP_ADAPTIVE_AVG_POOL2D || n->op == OP_ADAPTIVE_AVG_POOL2D_BACKWARD) {
		memset(&g, 0, sizeof g);
		g.n = x[0];
		g.c = g.k = g.groups = x[1];
		g.h = x[2];
		g.w = x[3];
		g.oh = y[2];
		g.ow = y[3];
		g.r = g.s = g.stride[0] = g.stride[1] = g.dil[0] = g.dil[1] = 1;
	} else {
		conv_geom(n, x, w, &g);
	}
	return cg_fmt(c, "SgConvGeom{%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
	              "%lld, %lld, %lld, %lld, %lld, %lld, %d}",
	              (long long)g.n, (long long)g.c, (long long)g.h, (long long)g.w,
	              (long long)g.k, (long long)g.r, (long long)g.s, (long long)g.oh,
	              (long long)g.ow, (long long)g.groups, (long long)g.stride[0],
	              (long long)g.stride[1], (long long)g.pad[0], (long long)g.pad[1],
	              (long long)g.dil[0], (long long)g.dil[1], cl);
}

/* 1 when operand k of n is stored channels last. */
static int
opnd_cl(CgGraph *G, const Node *n, int k)
{
	return G->g->vals.v[n->opnd[k].v].layout == LAYOUT_CL;
}

static const char *
var(CgGraph *G, const Node *n, int k)
{
	return G->vname[n->opnd[k].v];
}

/* The SGRT dtype code of dt. */
static const char *
sgrt_dt(DType dt)
{
	switch (dt) {
	case DT_F16: return "SGRT_F16";
	case DT_BF16: return "SGRT_BF16";
	case DT_F64: return "SGRT_F64";
	default: return "SGRT_F32";
	}
}

/* conv2d, conv2d_backward_input, conv2d_backward_weight: cuDNN, else
 * the direct kernel. */
static void
conv(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	DType dt = (DType)cg_vtype(G, n->res[0])->dt;
	const char *ct = cg_ctype(dt), *s = cg_num(c, cg_stream(n));
	const int64_t *x, *w;
	const char *a = var(G, n, 0), *b = var(G, n, 1), *out = G->vname[n->res[0]];
	const char *dir, *fn, *bias = "NULL";
	switch (n->op) {
	case OP_CONV2D:
		x = cg_otype(G, n, 0)->d;
		w = cg_otype(G, n, 1)->d;
		dir = "SGRT_CONV_FWD";
		fn = "sg_launch_conv2d_fwd";
		if (n->nopnd > 2)
			bias = var(G, n, 2);
		break;
	case OP_CONV2D_BACKWARD_INPUT:
		x = cg_vtype(G, n->res[0])->d;
		w = cg_otype(G, n, 1)->d;
		dir = "SGRT_CONV_BWD_DATA";
		fn = "sg_launch_conv2d_bwd_input";
		break;
	default:
		x = cg_otype(G, n, 1)->d;
		w = cg_vtype(G, n->res[0])->d;
		dir = "SGRT_CONV_BWD_FILTER";
		fn = "sg_launch_conv2d_bwd_weight";
		break;
	}
	cg_use_library(G, "sgk_conv.cuh");
	const char *gv = "geom";
	CG_EMIT(G->body, "host.cu:conv_cudnn", {"s", s}, {"line", cg_num(c, n->loc.line)},
	        {"geom", geom_text(c, n, x, w, NULL, opnd_cl(G, n, 0))},
	        {"dir", dir}, {"dt", sgrt_dt(dt)}, {"a", a}, {"b", b}, {"bias", bias},
	        {"out", out}, {"kname", cg_kernel_name(G, n, op_name(n->op))},
	        {"call", n->op == OP_CONV2D
	                 ? cg_fmt(c, "%s<%s>(%s, %s, %s, %s, %s, sgrt_stream(rt, %s))", fn, ct, a, b,
	                          bias, out, gv, s)
	                 : cg_fmt(c, "%s<%s>(%s, %s, %s, %s, sgrt_stream(rt, %s))", fn, ct, a, b,
	                          out, gv, s)});
}

/* The pools and their backward ops. */
static void
pool(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	DType dt = (DType)cg_vtype(G, n->res[0])->dt;
	const char *ct = cg_ctype(dt), *s = cg_num(c, cg_stream(n));
	int bwd = n->op == OP_MAX_POOL2D_BACKWARD || n->op == OP_AVG_POOL2D_BACKWARD ||
	          n->op == OP_ADAPTIVE_AVG_POOL2D_BACKWARD;
	int mode = n->op == OP_MAX_POOL2D || n->op == OP_MAX_POOL2D_BACKWARD ? 0
	           : n->op == OP_AVG_POOL2D || n->op == OP_AVG_POOL2D_BACKWARD ? 1 : 2;
	const int64_t *x = bwd ? cg_vtype(G, n->res[0])->d : cg_otype(G, n, 0)->d;
	const int64_t *y = bwd ? cg_otype(G, n, 0)->d : cg_vtype(G, n->res[0])->d;
	cg_use_library(G, "sgk_conv.cuh");
	char *geom = geom_text(c, n, x, NULL, y, opnd_cl(G, n, 0));
	const char *out = G->vname[n->res[0]];
	if (!bwd) {
		cg_lib_call(G, n, op_name(n->op),
		            cg_fmt(c, "sg_launch_pool2d_fwd<%s>(%s, %s, %s, %d, sgrt_stream(rt, %s))", ct,
		                   var(G, n, 0), out, geom, mode, s));
		return;
	}
	if (mode != 0) { /* the averages' backward reads neither x nor scratch */
		cg_lib_call(G, n, op_name(n->op),
		            cg_fmt(c, "sg_launch_pool2d_bwd<%s>(%s, (const %s *)NULL, %s, %s, %d, NULL, "
		                   "sgrt_stream(rt, %s))", ct, var(G, n, 0), ct, out, geom, mode, s));
		return;
	}
	/* max_pool2d_backward: a byte an output for the windows' argmax; with
	 * the relu's backward after it (kernel_choice's pool_relu) as its
	 * mask, writing the where's result */
	char *work = cg_alloc_tmp_expr(G, n, "void", cg_fmt(c, "sg_pool2d_bwd_workspace(%s, 0)",
	                               geom), "pool");
	NodeId W = G->fold ? G->fold->pool_relu[n - G->g->nodes.v] : NONE;
	if (W != NONE)
		cg_lib_call(G, n, op_name(n->op),
		            cg_fmt(c, "sg_launch_maxpool2d_bwd_relu<%s>(%s, %s, %s, %s, %s, "
		                   "sgrt_stream(rt, %s))", ct, var(G, n, 0), var(G, n, 1),
		                   G->vname[G->g->nodes.v[W].res[0]], geom, work, s));
	else
		cg_lib_call(G, n, op_name(n->op),
		            cg_fmt(c, "sg_launch_pool2d_bwd<%s>(%s, %s, %s, %s, 0, %s, sgrt_stream(rt, %s))",
		                   ct, var(G, n, 0), var(G, n, 1), out, geom, work, s));
	cg_free_tmp(G, n, work);
}

/* The SgBnSgd<T> argument of batch_norm_backward n's call when its
 * kernel makes the SGD updates of its weight's or bias's gradient
 * (kernel_choice's bn_sgdw, bn_sgdb): the params updated in place and
 * their -lr; NULL when it makes none. */
static const char *
bn_sgd(CgGraph *G, const Node *n, const char *ct)
{
	const Graph *g = G->g;
	NodeId i = (NodeId)(n - g->nodes.v);
	if (!G->fold || (G->fold->bn_sgdw[i] == NONE && G->fold->bn_sgdb[i] == NONE))
		return NULL;
	const char *ptr[2], *lr[2];
	for (int j = 0; j < 2; j++) {
		NodeId U = (j ? G->fold->bn_sgdb : G->fold->bn_sgdw)[i];
		ptr[j] = cg_fmt(G->c, "(%s *)NULL", ct);
		lr[j] = "0.0f";
		if (U == NONE)
			continue;
		const Node *u = &g->nodes.v[U];
		ptr[j] = G->vname[u->opnd[0].v];
		lr[j] = cg_lit_float(G->c, (double)(float)-ir_attr_float(u, "lr", 0), 1);
	}
	return cg_fmt(G->c, "SgBnSgd<%s>{%s, %s, %s, %s}", ct, ptr[0], ptr[1], lr[0], lr[1]);
}

/* The SgBnRunning<S> argument of training batch_norm n's call when its
 * kernel makes running statistics' updates (kernel_choice's bn_rm,
 * bn_rv): each stored into its class (the running statistic), with the
 * update's two mul literals, the statistic's and the old value's; NULL
 * when it makes none. */
static const char *
bn_running(CgGraph *G, const Node *n, const char *st)
{
	const Graph *g = G->g;
	NodeId i = (NodeId)(n - g->nodes.v);
	if (!G->fold || (G->fold->bn_rm[i] == NONE && G->fold->bn_rv[i] == NONE))
		return NULL;
	const char *ptr[2], *lit[2][2];
	for (int j = 0; j < 2; j++) {
		NodeId A = (j ? G->fold->bn_rv : G->fold->bn_rm)[i];
		ptr[j] = cg_fmt(G->c, "(%s *)NULL", st);
		lit[j][0] = lit[j][1] = "0.0f";
		if (A == NONE)
			continue;
		const Node *a = &g->nodes.v[A];
		ptr[j] = G->vname[a->res[0]];
		for (int k = 0; k < 2; k++) { /* the mul of the statistic, of the old value */
			const Node *m = &g->nodes.v[g->vals.v[a->opnd[k].v].def];
			int v = m->opnd[0].kind == OK_VAL ? 0 : 1;
			NodeId d = g->vals.v[m->opnd[v].v].def;
			int stat = d != NONE && d < g->nodes.n && G->s->bn_stats[d] == i;
			double x = 0;
			if (!ir_literal(&m->opnd[1 - v], &x))
				ICE("a running statistic's update without its literal (line %u)",
				    m->loc.line);
			lit[j][!stat] = cg_lit_float(G->c, (double)(float)x, 1);
		}
	}
	return cg_fmt(G->c, "SgBnRunning<%s>{%s, %s, %s, %s, %s, %s}", st, ptr[0], ptr[1],
	              lit[0][0], lit[0][1], lit[1][0], lit[1][1]);
}

/* batch_norm and batch_norm_backward. */
static void
batch_norm(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	int bwd = n->op == OP_BATCH_NORM_BACKWARD, xi = bwd ? 1 : 0;
	const Type *xt = cg_otype(G, n, xi);
	DType dt = (DType)xt->dt;
	const char *ct = cg_ctype(dt), *acc = cg_acc_type(dt), *s = cg_num(c, cg_stream(n));
	int64_t nb = xt->d[0], ch = xt->d[1], inner = 1;
	for (int i = 2; i < xt->rank; i++)
		inner *= xt->d[i];
	int training = ir_attr_int(n, "training", 0) != 0;
	double eps = ir_attr_float(n, "eps", 1e-5);
	/* the running stats: operands 1, 2 forward; 3, 4 backward in eval */
	int rmi = bwd ? 3 : 1;
	int have_rs = rmi + 1 < (int)n->nopnd;
	const char *st = have_rs ? cg_ctype((DType)cg_otype(G, n, rmi)->dt) : ct;
	const char *rm = have_rs ? var(G, n, rmi) : cg_fmt(c, "(const %s *)NULL", ct);
	const char *rv = have_rs ? var(G, n, rmi + 1) : cg_fmt(c, "(const %s *)NULL", ct);
	int wi = bwd ? 2 : 3, cl = opnd_cl(G, n, xi);
	const char *w = wi < (int)n->nopnd ? var(G, n, wi) : cg_fmt(c, "(const %s *)NULL", ct);
	cg_use_library(G, "sgk_conv.cuh");
	char *work = cg_alloc_tmp_expr(G, n, acc, cg_fmt(c, "sg_batch_norm_workspace<%s>(%lld, %lld, "
	                               "%lld, %d)", ct, (long long)nb, (long long)ch,
	                               (long long)inner, cl), "bn");
	char *call; /* in parentheses: the template's comma inside a macro */
	if (!bwd) {
		const char *b = n->nopnd > 4 ? var(G, n, 4) : cg_fmt(c, "(const %s *)NULL", ct);
		/* the var_mean it computes (kernel_choice's bn_stats): var, mean */
		NodeId vm = G->s->bn_stats[n - G->g->nodes.v];
		const char *var_out = cg_fmt(c, "(%s *)NULL", ct), *mean_out = var_out;
		if (vm != NONE && !G->ingroup_only[G->g->nodes.v[vm].res[0]])
			var_out = G->vname[G->g->nodes.v[vm].res[0]];
		if (vm != NONE && !G->ingroup_only[G->g->nodes.v[vm].res[1]])
			mean_out = G->vname[G->g->nodes.v[vm].res[1]];
		/* the running statistics' updates it makes (kernel_choice's
		 * bn_rm, bn_rv): stored in place, with mul's two literals */
		const char *run = bn_running(G, n, st);
		/* with its epilogue (kernel_choice's bn_act): the relu's result,
		 * the add's residual */
		NodeId i = (NodeId)(n - G->g->nodes.v), A = G->fold ? G->fold->bn_act[i] : NONE;
		const char *y = G->vname[n->res[0]], *res = NULL;
		if (A != NONE) {
			y = G->vname[G->g->nodes.v[A].res[0]];
			NodeId add = G->fold->bn_add[i];
			res = add == NONE ? cg_fmt(c, "(const %s *)NULL", ct)
			      : var(G, &G->g->nodes.v[add], G->g->nodes.v[add].opnd[0].v == n->res[0]);
		}
		call = cg_fmt(c, "(sg_launch_batch_norm_fwd%s<%s, %s>(%s, %s, %s, %s, %s, %s%s%s, %s, %s, "
		              "%s, %lld, %lld, %lld, %d, %s, %d, sgrt_stream(rt, %s)%s%s))",
		              A != NONE ? "_relu" : "", ct, st, var(G, n, 0), rm, rv, w, b,
		              res ? res : "", res ? ", " : "", y, mean_out, var_out, work,
		              (long long)nb, (long long)ch, (long long)inner, cl,
		              cg_lit_float(c, (double)(float)eps, 1), training, s, run ? ", " : "",
		              run ? run : "");
	} else {
		/* the SGD updates of w and b it makes (kernel_choice's bn_sgdw,
		 * bn_sgdb): their gradients not stored */
		const char *sgd = bn_sgd(G, n, ct), *res[2];
		for (int j = 0; j < 2; j++)
			res[j] = G->ingroup_only[n->res[1 + j]] ? cg_fmt(c, "(%s *)NULL", ct)
			         : G->vname[n->res[1 + j]];
		call = cg_fmt(c, "(sg_launch_batch_norm_bwd<%s, %s>(%s, %s, %s, %s, %s, %s, %s, %s, %s, "
		              "%lld, %lld, %lld, %d, %s, %d, sgrt_stream(rt, %s)%s%s))", ct, st,
		              var(G, n, 0), var(G, n, 1), rm, rv, w, G->vname[n->res[0]],
		              res[0], res[1], work, (long long)nb,
		              (long long)ch, (long long)inner, cl,
		              cg_lit_float(c, (double)(float)eps, 1), training, s, sgd ? ", " : "",
		              sgd ? sgd : "");
	}
	cg_lib_call(G, n, op_name(n->op), call);
	cg_free_tmp(G, n, work);
}

/* to_layout: a transposing copy between row order and channels last (a
 * plain copy when both sides are stored alike). */
static void
to_layout(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 0);
	const char *s = cg_num(c, cg_stream(n)), *out = G->vname[n->res[0]];
	int from = opnd_cl(G, n, 0), to = G->g->vals.v[n->res[0]].layout == LAYOUT_CL;
	int64_t bytes = type_numel(x) * dtype_size((DType)x->dt);
	if (from == to || !bytes) {
		if (bytes)
			CG_EMIT(G->body, "host.cu:copy", {"s", s}, {"dst", out}, {"src", var(G, n, 0)},
			        {"bytes", cg_num(c, bytes)}, {"name", "to_layout"},
			        {"line", cg_num(c, n->loc.line)});
		return;
	}
	if (x->rank != 4)
		ICE("to_layout of a rank-%d value between layouts", x->rank);
	cg_use_library(G, "sgk_conv.cuh");
	cg_lib_call(G, n, to ? "to_channels_last" : "to_row",
	            cg_fmt(c, "sg_launch_to_layout<%s>(%s, %s, %lld, %lld, %lld, %d, sgrt_stream(rt, "
	                   "%s))", cg_ctype((DType)x->dt), var(G, n, 0), out, (long long)x->d[0],
	                   (long long)x->d[1], (long long)(x->d[2] * x->d[3]), to, s));
}

int
cg_conv(CgGraph *G, const Node *n)
{
	switch (n->op) {
	case OP_TO_LAYOUT:
		to_layout(G, n);
		return 1;
	case OP_CONV2D: case OP_CONV2D_BACKWARD_INPUT: case OP_CONV2D_BACKWARD_WEIGHT:
		conv(G, n);
		return 1;
	case OP_MAX_POOL2D: case OP_AVG_POOL2D: case OP_ADAPTIVE_AVG_POOL2D:
	case OP_MAX_POOL2D_BACKWARD: case OP_AVG_POOL2D_BACKWARD:
	case OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
		pool(G, n);
		return 1;
	case OP_BATCH_NORM: case OP_BATCH_NORM_BACKWARD:
		batch_norm(G, n);
		return 1;
	}
	return 0;
}
