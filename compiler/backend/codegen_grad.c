/*
 * codegen_grad.c - kernels of the ops autograd makes (norm, attention,
 * embedding, gather and cross_entropy backward) and of the optimizer
 * updates (sgd_update_, adamw_update_), following the interpreter's
 * formulas (compiler/interp/interp_grad.c, compiler/interp/interp_optim.c).
 * gelu_backward is pointwise (codegen_kernels.c, runtime/sgk/sgk_pointwise.h).
 *
 * Optimizer state (opt.NAME.momentum_buffer, exp_avg, exp_avg_sq, step)
 * lives in model-owned buffers saved with the params (codegen_host.c
 * finds them); state missing at load is zero, which is exactly a fresh
 * optimizer's (a zero momentum buffer times momentum plus d is d, and
 * AdamW starts from zero moments at step 0).
 */
#include <math.h>
#include <string.h>

#include "codegen.h"

/* The C variable of operand k of node n. */
static const char *
var(CgGraph *G, const Node *n, int k)
{
	return G->vname[n->opnd[k].v];
}

/* layer_norm_backward, rms_norm_backward (g, x, w?, r?): dx (plus r). */
static void
norm_backward(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 1);
	DType dt = (DType)x->dt;
	int64_t len = x->d[x->rank - 1], nout = len ? type_numel(x) / len : 0;
	if (nout == 0)
		return;
	int wi = ir_norm_bwd_weight(n), ri = ir_norm_bwd_residual(n), hw = wi > 0;
	if (n->nres > 1)
		ICE("norm_backward: the weight's gradient outside the kernel library");
	const char *ct = cg_ctype(dt), *acc = cg_acc_type(dt), *opc = cg_acc_conv(dt);
	char *params = cg_fmt(c, "const %s *__restrict__ g, const %s *__restrict__ x, ", ct, ct);
	char *args = cg_fmt(c, "%s, %s, ", var(G, n, 0), var(G, n, 1));
	if (hw) {
		params = cg_fmt(c, "%sconst %s *__restrict__ w, ", params, ct);
		args = cg_fmt(c, "%s%s, ", args, var(G, n, wi));
	}
	if (ri > 0) {
		params = cg_fmt(c, "%sconst %s *__restrict__ res, ", params, ct);
		args = cg_fmt(c, "%s%s, ", args, var(G, n, ri));
	}
	params = cg_fmt(c, "%s%s *__restrict__ out", params, ct);
	args = cg_fmt(c, "%s%s", args, G->vname[n->res[0]]);
	CgRows rg = cg_rows(nout, len);
	int layer = n->op == OP_LAYER_NORM_BACKWARD;
	double eps = ir_attr_float(n, "eps", layer ? 1e-5 : 1e-6);
	const char *kname = cg_kernel_name(G, n, op_name(n->op));
	kname = CG_KERNEL(G, "kernels.cu:norm_backward", {"comment", cg_comment(G, n)},
	        {"what", layer ? "layer_norm" : "rms_norm"}, {"name", kname},
	        {"params", params}, {"block", cg_num(c, rg.block)}, {"rows", cg_num(c, rg.rows)},
	        {"tpr", cg_num(c, rg.tpr)}, {"nout", cg_num(c, nout)}, {"len", cg_num(c, len)},
	        {"acc", acc}, {"opc", opc}, {"layer", layer ? "1" : ""},
	        {"eps", cg_lit_float(c, dt == DT_F64 ? eps : (double)(float)eps, dt != DT_F64)},
	        {"wmul", hw ? cg_fmt(c, " * %s(sg_ld(w[r]))", opc) : ""},
	        {"store", cg_store(c, dt, ri > 0 ? cg_fmt(c, "rstd * (gh - mg - xh * mgx) + "
	                                                 "%s(sg_ld(res[base + r]))", opc)
	                                         : "rstd * (gh - mg - xh * mgx)")});
	cg_launch(G, n, kname, rg.grid, rg.block, 0, args);
}

/* scaled_dot_product_attention_backward(g, q, k, v, [mask]) -> dq, dk,
 * dv: the softmax statistics per query row, then dq per query row and dk,
 * dv per key row (with enable_gqa summed over the head's group of query
 * heads; no L x S matrix stored, no atomics). */
static void
sdpa_backward(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	DType dt = (DType)cg_otype(G, n, 1)->dt;
	CgSdpa s;
	cg_sdpa_simt(G, n, 1, dt, &s);
	int64_t L = s.L, E = s.E, S = s.S, Ev = s.Ev, nb = s.nb;
	if (nb * L == 0 || nb * S == 0 || E == 0)
		return;
	int tile = CG_SDPA_TILE, es = dt != DT_F64 ? 4 : 8;
	char *stats = cg_alloc_tmp(G, n, cg_acc_type(dt), nb * L * 3 * es, "stats");
	const char *k1 = cg_kernel_name(G, n, "sdpa_bwd_stats");
	const char *k2 = cg_kernel_name(G, n, "sdpa_bwd_dq");
	const char *k3 = cg_kernel_name(G, n, "sdpa_bwd_dkdv");
	enum { NAME = CG_SDPA_NBIND + 3 };
	CgBind b[NAME + 2];
	memcpy(b, s.b, sizeof s.b);
	b[CG_SDPA_NBIND] = (CgBind){"store_dq", cg_store(c, dt, "acc[e]")};
	b[CG_SDPA_NBIND + 1] = (CgBind){"store_dk", cg_store(c, dt, "dka[e]")};
	b[CG_SDPA_NBIND + 2] = (CgBind){"store_dv", cg_store(c, dt, "dva[e]")};
	b[NAME] = (CgBind){"name", k1};
	b[NAME + 1] = (CgBind){NULL, NULL};
	cg_emit(c->kern, "kernels.cu:sdpa_bwd_stats", b);
	cg_emit(c->kern, "kernels.cu:sdpa_row", b);
	cg_emit(c->kern, "kernels.cu:sdpa_bwd_stats_out", b);
	b[NAME].val = k2;
	cg_emit(c->kern, "kernels.cu:sdpa_bwd_dq", b);
	b[NAME].val = k3;
	cg_emit(c->kern, "kernels.cu:sdpa_bwd_dkdv", b);
	int64_t sm1 = (E + tile + Ev) * es, sm2 = (2 * E + Ev + tile) * es;
	int64_t sm3 = (2 * E + 2 * Ev + 2 * tile) * es;
	const char *kn[3] = {k1, k2, k3};
	int64_t sm[3] = {sm1, sm2, sm3};
	for (int i = 0; i < 3; i++)
		if (sm[i] > 48 * 1024)
			CG_EMIT(G->body, "host.cu:smem_attr", {"kname", kn[i]},
			        {"smem", cg_num(c, sm[i])}, {"line", cg_num(c, n->loc.line)});
	char *in = cg_fmt(c, "%s, %s, %s, %s", var(G, n, 1), var(G, n, 2), var(G, n, 3),
	                  var(G, n, 0));
	if (n->nopnd > 4)
		in = cg_fmt(c, "%s, %s", in, var(G, n, 4));
	in = cg_fmt(c, "%s%s", in, cg_sdpa_rng(G, n));
	cg_launch(G, n, k1, nb * L, 128, sm1, cg_fmt(c, "%s, %s", in, stats));
	cg_launch(G, n, k2, nb * L, 128, sm2,
	          cg_fmt(c, "%s, %s, %s", in, stats, G->vname[n->res[0]]));
	cg_launch(G, n, k3, nb / s.group * S, 128, sm3,
	          cg_fmt(c, "%s, %s, %s, %s", in, stats, G->vname[n->res[1]],
	                 G->vname[n->res[2]]));
	cg_free_tmp(G, n, stats);
}

/* acc[dst(i)] += g[i] over g's elements, then the result from acc:
 * embedding_backward (dst: the index's table row) and gather_backward
 * (dst: the position with the index in dim). */
static void
scatter(CgGraph *G, const Node *n, const char *what, const char *iidx,
        const char *dst, int64_t size)
{
	Cg *c = G->c;
	const Type *gt = cg_otype(G, n, 0), *r = cg_vtype(G, n->res[0]);
	DType dt = (DType)r->dt;
	int64_t count = type_numel(gt), total = type_numel(r);
	const char *acc = dt == DT_F64 ? "double" : "float";
	const char *rv = G->vname[n->res[0]], *target = rv;
	int direct = dt == DT_F32 || dt == DT_F64;
	if (total == 0)
		return;
	if (!direct)
		target = cg_alloc_tmp(G, n, acc, total * 4, "acc");
	CG_EMIT(G->body, "host.cu:memset", {"s", cg_num(c, cg_stream(n))}, {"dst", target},
	        {"bytes", cg_num(c, total * (direct ? dtype_size(dt) : 4))},
	        {"name", cg_fmt(c, "zero_%s", what)}, {"line", cg_num(c, n->loc.line)});
	if (count) {
		const char *kname = cg_kernel_name(G, n, what);
		kname = CG_KERNEL(G, "kernels.cu:scatter_add", {"comment", cg_comment(G, n)},
		        {"name", kname}, {"t", cg_ctype((DType)gt->dt)},
		        {"ti", cg_ctype((DType)cg_otype(G, n, 1)->dt)}, {"acc", acc},
		        {"n", cg_num(c, count)}, {"iidx", iidx}, {"dst", dst},
		        {"size", cg_num(c, size)}, {"file", cg_source_name(c)},
		        {"line", cg_num(c, n->loc.line)}, {"what", what});
		cg_launch(G, n, kname, cg_grid(count, 256), 256, 0,
		          cg_fmt(c, "%s, %s, %s", var(G, n, 0), var(G, n, 1), target));
	}
	if (!direct) {
		const char *kname = cg_kernel_name(G, n, cg_fmt(c, "%s_cast", what));
		kname = CG_KERNEL(G, "kernels.cu:copy", {"comment", cg_comment(G, n)},
		        {"name", kname}, {"tin", "float"}, {"tout", cg_ctype(dt)},
		        {"idx", cg_index_type(total)}, {"n", cg_num(c, total)}, {"dst", "i"},
		        {"value", cg_store(c, dt, "x[i]")});
		cg_launch(G, n, kname, cg_grid(total, 256), 256, 0,
		          cg_fmt(c, "%s, %s", target, rv));
		cg_free_tmp(G, n, target);
	}
}

/* embedding_backward(g [..., D], idx [...], rows=V) -> [V, D]. */
static void
embedding_backward(CgGraph *G, const Node *n)
{
	const Type *r = cg_vtype(G, n->res[0]);
	int64_t rows = r->d[0], width = r->d[1];
	Cg *c = G->c;
	scatter(G, n, "embedding_backward", cg_fmt(c, "i / %lld", (long long)width),
	        cg_fmt(c, "k * %lld + i %% %lld", (long long)width, (long long)width), rows);
}

/* gather_backward(g, idx, dim=, shape=): out[p, p[dim] = idx[p]] += g[p]. */
static void
gather_backward(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *gt = cg_otype(G, n, 0), *r = cg_vtype(G, n->res[0]);
	int d = r->rank ? shape_norm_dim(ir_attr_int(n, "dim", 0), r->rank) : 0;
	int64_t rs[SG_MAXRANK], st[SG_MAXRANK];
	shape_row_strides(r, rs);
	for (int j = 0; j < gt->rank; j++)
		st[j] = j == d ? 0 : rs[j];
	char *off = cg_index(c, "i", gt->rank, gt->d, st, 0);
	scatter(G, n, "gather_backward", "i",
	        cg_fmt(c, "%s + k * %lld", off, (long long)(r->rank ? rs[d] : 0)),
	        r->rank ? r->d[d] : 1);
}

/* cross_entropy_backward(g, logits, target). */
static void
ce_backward(CgGraph *G, const Node *n)
{
	Cg *c = G->c;
	const Type *x = cg_otype(G, n, 1), *t = cg_otype(G, n, 2);
	DType dt = (DType)x->dt;
	int64_t outer, len, inner;
	type_around(x, x->rank >= 2 ? 1 : 0, &outer, &len, &inner);
	int64_t nout = outer * inner;
	if (nout == 0 || len == 0)
		return;
	const char *acc = cg_acc_type(dt), *opc = cg_acc_conv(dt);
	char *w = cg_alloc_tmp(G, n, acc, dt == DT_F64 ? 8 : 4, "w");
	const char *k1 = cg_kernel_name(G, n, "cross_entropy_backward_count");
	const char *k2 = cg_kernel_name(G, n, "cross_entropy_backward_rows");
	char *roff = inner == 1 ? "r" : cg_fmt(c, "r * %lld", (long long)inner);
	CgRows rg = cg_rows(nout, len);
	k1 = CG_KERNEL(G, "kernels.cu:ce_bwd_count", {"comment", cg_comment(G, n)},
	        {"name", k1}, {"t", cg_ctype((DType)cg_otype(G, n, 0)->dt)},
	        {"tt", cg_ctype((DType)t->dt)}, {"acc", acc}, {"nout", cg_num(c, nout)},
	        {"opc", opc});
	k2 = CG_KERNEL(G, "kernels.cu:ce_bwd_rows", {"name", k2}, {"t", cg_ctype(dt)},
	        {"tt", cg_ctype((DType)t->dt)}, {"acc", acc}, {"block", cg_num(c, rg.block)},
	        {"rows", cg_num(c, rg.rows)}, {"tpr", cg_num(c, rg.tpr)}, {"nout", cg_num(c, nout)},
	        {"len", cg_num(c, len)}, {"base", cg_row_base(c, outer, len, inner)},
	        {"file", cg_source_name(c)}, {"line", cg_num(c, n->loc.line)},
	        {"inf", dt == DT_F64 ? "sg_inf()" : "sg_inff()"},
	        {"load", cg_fmt(c, "%s(sg_ld(x[base + %s]))", opc, roff)}, {"roff", roff},
	        {"store", cg_store(c, dt, "v")});
	cg_launch(G, n, k1, 1, 256, 0, cg_fmt(c, "%s, %s, %s", var(G, n, 0), var(G, n, 2), w));
	cg_launch(G, n, k2, rg.grid, rg.block, 0,
	          cg_fmt(c, "%s, %s, %s, %s", var(G, n, 1), var(G, n, 2), w,
	                 G->vname[n->res[0]]));
	cg_free_tmp(G, n, w);
}

/* A double at the precision PyTorch computes dtype dt in. */
static char *
opmath(Cg *c, DType dt, double v)
{
	return cg_lit_float(c, dt == DT_F64 ? v : (double)(float)v, dt != DT_F64);
}

/* Elements of dtype dt in 16 bytes: what one thread of an update moves
 * at a time when every pointer is aligned. */
static int
update_vec(DType dt)
{
	return 16 / dtype_size(dt);
}

/* sgd_update_(p, g, lr=, momentum=, weight_decay=). */
static void
sgd(CgGraph *G, const Node *n, NodeId i)
{
	Cg *c = G->c;
	const Type *p = cg_otype(G, n, 0);
	DType dt = (DType)p->dt;
	int64_t count = type_numel(p);
	double mom = ir_attr_float(n, "momentum", 0), wd = ir_attr_float(n, "weight_decay", 0);
	if (count == 0)
		return;
	const char *kname = cg_kernel_name(G, n, "sgd_update");
	const char *ct = cg_ctype(dt);
	int vec = update_vec(dt);
	kname = CG_KERNEL(G, "kernels.cu:sgd", {"comment", cg_comment(G, n)}, {"name", kname},
	        {"t", ct}, {"c", cg_regtype(dt)}, {"dt", cg_dtname(dt)},
	        {"idx", cg_index_type(count)}, {"vec", cg_num(c, vec)},
	        {"bufparam", mom != 0 ? cg_fmt(c, ", %s *__restrict__ buf", ct) : ""},
	        {"bufref", mom != 0 ? cg_fmt(c, ", %s &b", ct) : ""},
	        {"bufor", mom != 0 ? " | (sg_u64)buf" : ""},
	        {"bufarg", mom != 0 ? ", buf[i]" : ""},
	        {"wd", wd != 0 ? "1" : ""}, {"w", opmath(c, dt, wd)},
	        {"mom", mom != 0 ? "1" : ""}, {"m", opmath(c, dt, mom)},
	        {"lr", opmath(c, dt, -ir_attr_float(n, "lr", 0))},
	        {"fd", dt == DT_F64 ? "d" : "f"});
	char *args = cg_fmt(c, "%s, %s", var(G, n, 0), var(G, n, 1));
	if (mom != 0)
		args = cg_fmt(c, "%s, (%s *)io[%d]", args, ct, G->optslot[i]);
	cg_launch(G, n, kname, cg_grid((count + vec - 1) / vec, 256), 256, 0,
	          cg_fmt(c, "%s, %s", args, cg_lit_int(c, count)));
}

/* adamw_update_(p, g, lr=, beta1=, beta2=, eps=, weight_decay=). */
static void
adamw(CgGraph *G, const Node *n, NodeId i)
{
	Cg *c = G->c;
	const Type *p = cg_otype(G, n, 0);
	DType dt = (DType)p->dt;
	int64_t count = type_numel(p);
	double lr = ir_attr_float(n, "lr", 0), wd = ir_attr_float(n, "weight_decay", 0);
	double b1 = ir_attr_float(n, "beta1", 0.9), b2 = ir_attr_float(n, "beta2", 0.999);
	double eps = ir_attr_float(n, "eps", 1e-8);
	const char *ct = cg_ctype(dt), *rt = cg_regtype(dt);
	const char *k1 = cg_kernel_name(G, n, "adamw_step");
	const char *k2 = cg_kernel_name(G, n, "adamw_update");
	int slot = G->optslot[i], vec = update_vec(dt);
	char *sc = cg_fmt(c, "(%s *)M->scratch[%d]", rt, G->scratch[i]);
	k1 = CG_KERNEL(G, "kernels.cu:adamw_step", {"name", k1}, {"c", rt},
	        {"lr", cg_lit_float(c, lr, 0)}, {"b1", cg_lit_float(c, b1, 0)},
	        {"b2", cg_lit_float(c, b2, 0)});
	cg_launch(G, n, k1, 1, 1, 0, cg_fmt(c, "(float *)io[%d], %s", slot + 2, sc));
	if (count == 0)
		return;
	k2 = CG_KERNEL(G, "kernels.cu:adamw", {"comment", cg_comment(G, n)}, {"name", k2},
	        {"t", ct}, {"c", rt}, {"dt", cg_dtname(dt)}, {"idx", cg_index_type(count)},
	        {"vec", cg_num(c, vec)},
	        {"decay", opmath(c, dt, 1 - lr * wd)},
	        {"w1", opmath(c, dt, 1 - b1)}, {"c2", opmath(c, dt, 1 - b2)},
	        {"bb2", opmath(c, dt, b2)}, {"eps", opmath(c, dt, eps)});
	cg_launch(G, n, k2, cg_grid((count + vec - 1) / vec, 256), 256, 0,
	          cg_fmt(c, "%s, %s, (%s *)io[%d], (%s *)io[%d], %s, %s", var(G, n, 0),
	                 var(G, n, 1), ct, slot, ct, slot + 1, sc, cg_lit_int(c, count)));
}

int
cg_grad_op(CgGraph *G, NodeId i)
{
	const Node *n = &G->g->nodes.v[i];
	switch (n->op) {
	case OP_LAYER_NORM_BACKWARD: case OP_RMS_NORM_BACKWARD:
		if (!cg_rows_norm_backward(G, n))
			norm_backward(G, n);
		return 1;
	case OP_SDPA_BACKWARD:
		if (!cg_flash_attention(G, n, 1))
			sdpa_backward(G, n);
		return 1;
	case OP_EMBEDDING_BACKWARD:
		embedding_backward(G, n);
		return 1;
	case OP_GATHER_BACKWARD:
		gather_backward(G, n);
		return 1;
	case OP_CROSS_ENTROPY_BACKWARD:
		if (!cg_rows_ce_backward(G, n))
			ce_backward(G, n);
		return 1;
	case OP_SGD_UPDATE_:
		sgd(G, n, i);
		return 1;
	case OP_ADAMW_UPDATE_:
		adamw(G, n, i);
		return 1;
	}
	return 0;
}
