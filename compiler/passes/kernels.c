/*
 * kernels.c - the pass `kernel_choice` (at -O2, after fusion): which
 * library kernel computes a node and in what layout, stored on the graph
 * (g->sched->fold, schedule.c) for the backend (codegen_gemm.c,
 * codegen_kernels.c) to emit as decided.
 *
 *   - Folded views.  A `transpose` of the last two dims (or a `permute`
 *     swapping only them) whose every use is an operand of a product on
 *     its stream is not materialised: the product reads the view's source
 *     with cuBLASLt's transA/transB (batched when the strides allow).  A
 *     `reshape`, `squeeze` or `unsqueeze` whose uses are such products (or
 *     folded transposes) is the same bytes: the product reads its source.
 *     Autograd's weight gradients, matmul(transpose(reshape(g)),
 *     reshape(x)), so copy nothing.  The folded value has no memory
 *     (Sched.reg) and its source must stay unchanged (no in-place write,
 *     no sync_dealloc) until the last product reading it, which the plan
 *     (sched_kernel_graph) and the release points (StoreClass.release)
 *     account for.  A view with any other use, or used on another stream,
 *     keeps its copy, unless plain kernels read it (a second sweep, after
 *     the attention layouts took theirs): a view keeping the bytes read by
 *     kernels (their own or a fused group's, no collective, no in-place
 *     write: reads_bytes) is its source's pointer (codegen_host.c), the
 *     memory plan reading the source there (schedule.c's fold_plan; a
 *     group fused into a later consumer reads it there).  torch.export's
 *     view of a product read by a pointwise op (gpt2's gelu) so copies
 *     nothing.
 *   - Epilogues.  relu(p) or gelu(p, approximate="tanh") of a product p
 *     that nothing else uses, right after it on its stream, is computed
 *     by cuBLASLt's RELU(_BIAS) / GELU(_BIAS) epilogue: the product writes
 *     the activation's result and p gets no memory.  When other nodes read
 *     p too (backward's gelu_backward(dg, p), the recomputed gelu(p)), the
 *     tanh gelu right after it is GELU_AUX(_BIAS): the product writes the
 *     gelu's result and p both.  In backward, gelu_backward(dg, f,
 *     approximate="tanh") right after the product dg that nothing else
 *     uses is DGELU with f as the aux matrix: the product writes the
 *     gradient and dg gets no memory.  Both only for products whose rows
 *     are flattened into one matrix (aux has no batch) of f16, bf16 or
 *     f32; the rest of cuBLASLt's rules (aux row stride a multiple of 8)
 *     and its heuristic are libsgrt's to check at run time, which falls
 *     back to the plain product and a kernel of its own.  cuBLASLt's GELU
 *     is the tanh form, so the exact (erf) gelu stays a kernel of its own
 *     (remat.c fuses its recomputation with its derivative instead).
 *   - Residual adds.  x1 = add(p, c) (or add(c, p)) right after a
 *     product p that nothing else reads, on its stream, with c, p and x1
 *     of one shape, dtype and layout in memory (c defined before p, in
 *     memory of its own or a view keeping its source's bytes), is
 *     computed by the product: cuBLASLt's D = A @ B + C with
 *     beta 1, C = c and D = x1 (SgrtGemm.c_in), the add's kernel gone
 *     and p given no memory (fold_add; XLA's GEMM rewriter does the
 *     same).  A pre-LN block's x + proj(...) and x + fc2(...) so reach
 *     their norm as one tensor: the norm's kernel reads x1 and writes
 *     its result, where with the add folded into it (below) it read c
 *     and p and wrote x1 too.  Backward's accumulation of a gradient's
 *     two parts, add(g1, matmul(...)), is the same.  An add of a 1-D
 *     bias of p's last dim (torch.export's addmm: mm, then add) is
 *     cuBLASLt's bias epilogue the same way, for a matmul or a linear
 *     without its own bias.  One rounding (of acc + c) for the add's
 *     two (of acc, then of the sum), as the SGD updates below.
 *   - Small products.  A matmul that fusion gave a pointwise group as its
 *     epilogue (kernel_small_product: f32, at most 64 tiles of 32 x 64
 *     outputs, K at most 2048, tiles x K at most 32768; a target with
 *     thread block clusters) runs as the kernel library's sgk_gemm_small,
 *     the group computed where it stores each element (one launch instead
 *     of cuBLASLt's product and a kernel): its split of K over a cluster
 *     is recorded (Sched.gemm_split), and it reads no folded transpose.
 *   - SGD updates.  sgd_update_(w, g) with momentum and weight_decay 0
 *     of a product's result g that nothing else reads is computed by the
 *     product, run at the update's place as an accumulation into w:
 *     cuBLASLt's D = alpha * A @ B + beta * C with C = D = w, alpha = -lr
 *     and beta = 1 (fold_update).  g gets no memory, the update no kernel
 *     (w + (-lr) * g with g in f32, not rounded to w's dtype first).
 *     Autograd's weight gradients qualify: the input gradient's product,
 *     which reads w, runs between (so the write waits for the update's
 *     place).  Only with nothing but that stream's work between (at most
 *     UPD_GAP nodes), the product's operands unchanged until the update,
 *     w unwritten before it and no operand of the product.  Running the
 *     product later keeps its operands (often a saved activation, larger
 *     than the gradient) alive until the update, so the choices are kept
 *     only where the memory plan's peak does not rise (keep_updates).
 *   - Norms with their residual add.  x1 = add(a, b) right before a
 *     layer_norm or rms_norm of x1 that the library's row kernel computes
 *     (a pre-LN block's residual), a, b and x1 of one shape and dtype in
 *     memory, is computed by the norm's kernel as it loads its rows: it
 *     stores x1 (rounded as the add would) and normalises it, a pass over
 *     x1 saved (norm_add_of, sg_launch_layer_norm_fwd_add).  Kept only
 *     where the memory plan's peak does not rise (x1 no longer takes a
 *     dying operand's bytes, as the add's kernel may): keep_norm_adds.
 *   - Batch norm's epilogue.  relu(y), or relu(add(y, r)) (a residual
 *     block's end), of a batch_norm's result y that nothing else reads is
 *     applied by the library's batch norm kernel as it stores y: it
 *     writes the relu's result, and y (and the sum) get no memory, a
 *     pass over the tensor saved each (fold_bn_epilogue).  The sum is
 *     rounded as the add would round y first, so the result is the same.
 *   - The max pool's backward through a relu.  g = max_pool2d_backward(dy,
 *     x) read only by relu's backward, where(le(x, 0), 0, g), with the
 *     same x (ResNet's stem: relu, then the pool): the pool's kernel
 *     applies the mask as it records each window's argmax (a window whose
 *     maximum is <= 0 passes no gradient, that maximum being the x where
 *     it lands) and writes the where's result; g and the mask get no
 *     memory and the le and where no kernel, a pass over three tensors of
 *     x's size saved (fold_pool_relu, sg_launch_maxpool2d_bwd_relu).
 *   - A batch norm's running statistics.  functionalize writes each
 *     update as mul(stat, m), mul(r, 1 - m), add, copy_ into r, which
 *     fusion makes one small kernel storing into r.  With 2-byte
 *     statistics, the training batch_norm's own kernel makes it as it
 *     finishes each channel's statistics (SgBnRunning), rounding as the
 *     three ops would; the group has no kernel and the statistics no
 *     memory (fold_bn_running).  (A float group may contract the
 *     multiply into the add, so f32 keeps its kernels.)
 *   - SGD in a batch norm's backward.  sgd_update_(w, dw) and
 *     sgd_update_(b, db) of a 2-byte batch_norm_backward's weight and
 *     bias gradients, momentum and weight decay 0, right after it, are
 *     made by its kernel as it finishes the sums (SgBnSgd), rounding as
 *     the sgd_update_ kernel would; the gradients get no memory and the
 *     updates no kernel.  Its dx pass reads w * rstd saved by that
 *     kernel, so w may change first (fold_bn_sgd).
 *   - Layout conversions that move nothing.  A to_layout of a 4-D value
 *     with one channel or one position (a 1 x 1 filter, its gradient, a
 *     pooled [n, c, 1, 1]) has the same bytes in both layouts: a folded
 *     view keeping the bytes, read through its source's pointer
 *     (same_bytes).
 *   - Attention layouts (docs/codegen.md, "-O2: attention").  A transpose
 *     or permute keeping the last dim whose uses are q, k, v (dout)
 *     operands of attention nodes is read by the flash kernels through
 *     strides (trans 2); a chain of single-use views after an attention
 *     result (transpose back, reshape) is written by the kernel through
 *     strides (out, outview); each checked with kernel_flash.  An
 *     attention backward is paired with its forward (pair) and reads its
 *     o and log-sum-exp instead of running it again.
 *   - Slices.  A chunk or split whose every part reaches only q, k, v
 *     (dout) operands of attention nodes through such views
 *     (reshape, squeeze, transpose, permute keeping the last dim) is not
 *     copied: each part is a strided slice of its source at an offset
 *     (trans 3), e.g. the q, k and v of a fused qkv linear; a part sliced
 *     along the last dim may also be read by a product (directly or
 *     through a folded reshape) as a matrix with a row stride (cuBLASLt's
 *     ld, takes_slice).  The other way,
 *     a cat whose operands are the results of one attention backward (dq,
 *     dk, dv through their views) is not copied either: the kernel writes
 *     each into its slice of the cat's result (out; the cat is an outview),
 *     which the memory plan allocates at the attention node.  A reshape
 *     of a strided value is a view when its strides allow (shape_view_strides).
 */
#include <math.h>
#include <string.h>

#include "passes.h"
#include "sgk/sgk_gemm_small.h"

/* The pass's state: the graph, its schedule (the fields of which it
 * reads and writes under the names the decisions use) and indexes built
 * once, so that no decision scans the graph. */
typedef struct {
	Graph *g;
	Sched *s;
	Arena *tmp;       /* the indexes below, freed after the pass */
	KernelFold *fold;
	ValId *root;
	StoreClass **cls;
	int *group, *prologue, *epilogue;
	uint8_t *ingroup_only; /* Sched.reg: no memory */
	uint32_t *uat;    /* per value: its uses (live nodes, del included), */
	NodeId *unode;    /* in program order, are unode[uat[v] .. uat[v+1]) */
	uint16_t *uk;     /*   with the operand index uk[] */
	uint32_t *wat;    /* per class root: the nodes writing it in place or */
	NodeId *wnode;    /*   releasing it, wnode[wat[r] .. wat[r+1]) */
	NodeId *lastfwd;  /* per value: the last attention forward reading it
	                     as q (while walking the graph), or NONE */
	uint8_t *attn_only; /* per value: a folded view whose uses are, through
	                     folded views, only attention operands */
	int plain;        /* fold_view's second sweep: views keeping the bytes
	                     may be read by any kernel (reads_bytes) */
} Kc;

static const Type *
vtype(const Graph *g, ValId v)
{
	return &g->vals.v[v].type;
}

static const Type *
otype(const Graph *g, const Node *n, int k)
{
	return vtype(g, n->opnd[k].v);
}

static int same_bytes(const Graph *g, const Node *n);
static int view_perm(const Graph *g, const Node *n, int *perm);

int
kernel_batch_bcast(const Type **ops, int nop, int64_t *shape, int64_t st[][SG_MAXRANK])
{
	int rank[4];
	const int64_t *d[4];
	for (int k = 0; k < nop && k < 4; k++) {
		rank[k] = ops[k]->rank;
		d[k] = ops[k]->d;
	}
	return shape_batch_bcast(nop, rank, d, shape, st);
}

int64_t
kernel_batch_numel(const Type *t)
{
	int64_t n = 1;
	for (int d = 0; d + 2 < t->rank; d++)
		n *= t->d[d];
	return n;
}

int64_t
kernel_matmul_batch(const Type *a, const Type *b, int *brank, int64_t *bshape,
                    int64_t st[][SG_MAXRANK])
{
	const Type *ops[2] = {a, b};
	int64_t nb = 1;
	*brank = kernel_batch_bcast(ops, 2, bshape, st);
	for (int d = 0; d < *brank; d++)
		nb *= bshape[d];
	return nb;
}

/* ------------------------------------------------------------------ flash attention */

/* The batch dims of the tensors of f as the flash kernels' two,
 * [nb0, nb1], with each tensor's element strides (0 where it
 * broadcasts): size-1 dims dropped, neighbours merged where every tensor
 * allows.  0 when more than two dims remain or a row is not contiguous. */
static int
flash_batch(Flash *f)
{
	const Type *ops[3] = {f->t[0].t, f->t[1].t, f->t[2].t};
	int64_t shape[SG_MAXRANK], bst[3][SG_MAXRANK], sz[SG_MAXRANK], s[8][SG_MAXRANK];
	int brank = kernel_batch_bcast(ops, 3, shape, bst), r = 0;
	for (int k = 0; k < f->nt; k++)
		if (f->t[k].st[f->t[k].t->rank - 1] != 1)
			return 0;
	for (int d = 0; d < brank; d++) {
		if (shape[d] == 1)
			continue;
		int64_t b[8];
		for (int k = 0; k < f->nt; k++) {
			const Type *t = f->t[k].t;
			int td = d - (brank - (t->rank - 2));
			b[k] = td >= 0 && t->d[td] != 1 ? f->t[k].st[td] : 0;
		}
		int merge = r > 0;
		for (int k = 0; k < f->nt && merge; k++)
			merge = s[k][r - 1] == b[k] * shape[d];
		if (!merge)
			sz[r++] = 1;
		sz[r - 1] *= shape[d];
		for (int k = 0; k < f->nt; k++)
			s[k][r - 1] = b[k];
	}
	if (r > 2)
		return 0;
	f->nb[0] = f->nb[1] = 1;
	for (int k = 0; k < f->nt; k++) {
		FlashT *t = &f->t[k];
		t->s[0] = t->s[1] = 0;
		t->sr = t->st[t->t->rank - 2];
		for (int d = 0; d < r; d++)
			t->s[2 - r + d] = s[k][d];
	}
	for (int d = 0; d < r; d++)
		f->nb[2 - r + d] = sz[d];
	return 1;
}

/* flash_batch for grouped-query heads: every tensor [B, heads, rows,
 * dim] (q, o and their gradients with the query's heads, k, v and theirs
 * with group times fewer), no broadcast; the kernels read key head
 * h / group for query head h. */
static int
flash_batch_gqa(Flash *f)
{
	const Type *q = f->t[0].t;
	if (q->rank != 4)
		return 0;
	for (int k = 0; k < f->nt; k++) {
		FlashT *t = &f->t[k];
		if (t->t->rank != 4 || t->t->d[0] != q->d[0] || t->st[3] != 1)
			return 0;
		t->s[0] = q->d[0] > 1 ? t->st[0] : 0;
		t->s[1] = t->st[1];
		t->sr = t->st[2];
	}
	f->nb[0] = q->d[0];
	f->nb[1] = q->d[1];
	return 1;
}

/* Tensor k of f: value v (NONE: a contiguous temporary of type t). */
static int
flash_tensor(const Graph *g, const KernelFold *F, Flash *f, ValId v, const Type *t,
             const char *nm)
{
	FlashT *x = &f->t[f->nt++];
	x->t = v != NONE ? &g->vals.v[v].type : t;
	x->nm = nm;
	x->v = v;
	x->off = 0;
	if (v == NONE) {
		shape_row_strides(t, x->st);
		return 1;
	}
	/* A slice starts 16-byte aligned (cuDNN's and the kernels' loads). */
	return sched_fold_strides(g, F, v, x->st, &x->off) &&
	       x->off * (int64_t)dtype_size((DType)x->t->dt) % 16 == 0;
}

/* The flash call of attention node n (bwd: its backward), checked: 0 when
 * the dtype, shapes or layouts need the fallback kernels. */
int
kernel_flash(const Graph *g, const KernelFold *F, const Node *n, int bwd, Flash *f)
{
	int o = bwd ? 1 : 0;
	const Type *q = otype(g, n, o), *k = otype(g, n, o + 1), *v = otype(g, n, o + 2);
	DType dt = (DType)q->dt;
	memset(f, 0, sizeof *f);
	f->L = q->d[q->rank - 2], f->E = q->d[q->rank - 1];
	f->S = k->d[k->rank - 2], f->Ev = v->d[v->rank - 1];
	if (dt != DT_F16 && dt != DT_BF16 && dt != DT_F32)
		return 0;
	if (k->dt != dt || v->dt != dt)
		return 0;
	/* A mask: the SIMT kernels. */
	if ((int)n->nopnd > o + 3)
		return 0;
	f->group = shape_attn_group(q, k, ir_attr_int(n, "enable_gqa", 0) != 0);
	static const char *nm[8] = {"q", "k", "v", "o", "do", "dq", "dk", "dv"};
	int ok = 1;
	for (int i = 0; i < 3; i++)
		ok &= flash_tensor(g, F, f, n->opnd[o + i].v, NULL, nm[i]);
	NodeId fwd = bwd && F ? F->pair[n - g->nodes.v] : NONE;
	f->ot = g->vals.v[n->res[0]].type;
	f->ot.d[f->ot.rank - 1] = f->Ev;
	ValId ov = !bwd ? n->res[0] : fwd != NONE ? g->nodes.v[fwd].res[0] : NONE;
	ok &= flash_tensor(g, F, f, ov, &f->ot, nm[3]);
	for (int i = 0; bwd && i < 4; i++)
		ok &= flash_tensor(g, F, f, i ? n->res[i - 1] : n->opnd[0].v, NULL, nm[4 + i]);
	if (!ok || !(f->group > 1 ? flash_batch_gqa(f) : flash_batch(f)))
		return 0;
	if (f->L < 1 || f->S < 1 || f->E < 1 || f->Ev < 1 || f->E > 256 || f->Ev > 256 ||
	    f->L > INT32_MAX || f->S > INT32_MAX || f->nb[0] * f->nb[1] < 1 ||
	    f->nb[0] * f->nb[1] > INT32_MAX)
		return 0;
	/* The backward writes dq, dk, dv whole: no broadcast batch dims. */
	const Type *t3[3] = {q, k, v};
	for (int i = 0; bwd && i < 3; i++) {
		if (t3[i]->rank != q->rank)
			return 0;
		for (int d = 0; d < q->rank - 2; d++)
			if (t3[i]->d[d] != q->d[d] && !(f->group > 1 && d == q->rank - 3))
				return 0;
	}
	const Attr *sa = ir_attr(n, "scale");
	double scale = sa ? sa->f : 1.0 / sqrt((double)f->E);
	return (float)scale > 0.0f && !isinf((float)scale);
}

/* ------------------------------------------------------------------ layouts of folded views */

/* 1 for the nodes whose parts are slices of one tensor along a dim. */
static int
is_parts(int op)
{
	return op == OP_CHUNK || op == OP_SPLIT || op == OP_CAT;
}

int
sched_fold_strides(const Graph *g, const KernelFold *F, ValId v, int64_t *st, int64_t *off)
{
	const Type *t = &g->vals.v[v].type;
	ValId s = F ? F->src[v] : NONE, w = F ? F->out[v] : NONE, o = s != NONE ? s : w;
	int64_t ost[SG_MAXRANK];
	int perm[SG_MAXRANK], dim;
	shape_row_strides(t, st);
	*off = 0;
	if (o == NONE)
		return 1;
	const Node *n = &g->nodes.v[g->vals.v[s != NONE ? v : w].def];
	if (!sched_fold_strides(g, F, o, ost, off))
		return 0;
	if (same_bytes(g, n))
		return shape_view_strides(&g->vals.v[o].type, ost, t, st);
	if (is_parts(n->op)) { /* v is a slice of o */
		*off += shape_part_start(g, n, v, &dim) * ost[dim];
		memcpy(st, ost, (size_t)t->rank * sizeof *st);
		return 1;
	}
	view_perm(g, n, perm);
	for (int d = 0; d < t->rank; d++) {
		if (s != NONE)
			st[d] = ost[perm[d]]; /* v = view(s) */
		else
			st[perm[d]] = ost[d]; /* w = view(v) */
	}
	return 1;
}

/* 1 when the flash kernels take attention node n with the layouts folded
 * so far. */
static int
flash_fits(Kc *G, const Node *n, int bwd)
{
	Flash f;
	return kernel_flash(G->g, G->fold, n, bwd, &f);
}

/* ------------------------------------------------------------------ folded views */


/* 1 for matmul and linear. */
static int
is_product(int op)
{
	return op == OP_MATMUL || op == OP_LINEAR;
}

/* ------------------------------------------------------------------ small products */

/* The most tiles (runtime/sgk/sgk_gemm_small.h), the longest sum and the
 * most tile-steps of K (tiles x K) sgk_gemm_small takes: where
 * bench/kernels/gemm_small.cu found it at most 1.02x the GPU time of
 * cuBLASLt's product and a kernel, at the shapes it timed
 * (docs/performance.md, "A small product and its epilogue in one
 * launch"). */
enum { SMALL_TILES = 64, SMALL_KMAX = 2048, SMALL_WORK = 32768 };

int
kernel_small_dims(const Graph *g, const Node *p, int64_t *m, int64_t *n, int64_t *k)
{
	if (p->op != OP_MATMUL || p->nopnd != 2 || p->nres != 1 || p->opnd[0].kind != OK_VAL ||
	    p->opnd[1].kind != OK_VAL)
		return 0;
	const Type *a = otype(g, p, 0), *b = otype(g, p, 1);
	if (a->rank < 1 || b->rank != 2)
		return 0;
	*k = a->d[a->rank - 1];
	*m = *k ? type_numel(a) / *k : 0;
	*n = b->d[1];
	return 1;
}

int
kernel_small_product(const Graph *g, const Node *p)
{
	int64_t m, n, k;
	if (!kernel_small_dims(g, p, &m, &n, &k) || vtype(g, p->res[0])->dt != DT_F32 ||
	    otype(g, p, 0)->dt != DT_F32 || otype(g, p, 1)->dt != DT_F32 || k < 1 ||
	    k > SMALL_KMAX || m < 1 || n < 1)
		return 0;
	int64_t tiles = sg_gemm_small_tiles(m, n);
	if (tiles > SMALL_TILES || tiles * k > SMALL_WORK)
		return 0;
	for (uint32_t q = 0; q < 2; q++) { /* cuBLASLt reads these in place */
		const Value *v = &g->vals.v[p->opnd[q].v];
		if (v->kind == VK_NODE && (g->nodes.v[v->def].op == OP_TRANSPOSE ||
		                           g->nodes.v[v->def].op == OP_PERMUTE))
			return 0;
	}
	return 1;
}

int
kernel_small_split(const Graph *g, const Node *p)
{
	int64_t m, n, k;
	return kernel_small_dims(g, p, &m, &n, &k) ? sg_gemm_small_split(m, n, k) : 0;
}

/* 1 when view node n swaps the last two dims of its operand and nothing
 * else (transpose, permute). */
static int
swaps_last2(Kc *G, const Node *n)
{
	const Type *x = otype(G->g, n, 0);
	int r = x->rank;
	if (r < 2)
		return 0;
	if (n->op == OP_TRANSPOSE) {
		int d0 = shape_norm_dim(ir_attr_int(n, "dim0", 0), r);
		int d1 = shape_norm_dim(ir_attr_int(n, "dim1", 0), r);
		return (d0 == r - 2 && d1 == r - 1) || (d0 == r - 1 && d1 == r - 2);
	}
	const Attr *a = ir_attr(n, "dims");
	if (n->op != OP_PERMUTE || !a || a->nints != (uint32_t)r)
		return 0;
	for (int d = 0; d < r; d++) {
		int want = d < r - 2 ? d : d == r - 2 ? r - 1 : r - 2;
		if (shape_norm_dim(a->ints[d], r) != want)
			return 0;
	}
	return 1;
}

/* 1 when view node n has the bytes of its operand: reshape and friends,
 * and a to_layout of a 4-D value with one channel or one position (a
 * 1 x 1 filter, a pooled [n, c, 1, 1]), whose row order and channels
 * last are the same bytes. */
static int
same_bytes(const Graph *g, const Node *n)
{
	if (n->op == OP_TO_LAYOUT && n->nopnd == 1 && n->opnd[0].kind == OK_VAL) {
		const Type *t = &g->vals.v[n->opnd[0].v].type;
		return t->rank == 4 && (t->d[1] == 1 || t->d[2] * t->d[3] == 1);
	}
	return n->op == OP_RESHAPE || n->op == OP_SQUEEZE || n->op == OP_UNSQUEEZE;
}

/* Counts (pass 0) or places (pass 1) entry x under key into a CSR whose
 * starts are at[]: pass 0 counts into at[key + 1]. */
static void
csr_add(uint32_t *at, int pass, uint32_t key)
{
	at[key + (pass == 0)]++;
}

/* Builds F's use and write indexes over the live nodes of the graph. */
static void
index_uses(Kc *G)
{
	Graph *g = G->g;
	Arena *a = G->tmp;
	size_t nv = (size_t)g->vals.n + 1;
	G->uat = arena_alloc(a, (nv + 1) * sizeof *G->uat);
	G->wat = arena_alloc(a, (nv + 1) * sizeof *G->wat);
	for (int pass = 0; pass < 2; pass++) {
		for (NodeId i = 0; i < g->nodes.n; i++) {
			const Node *n = &g->nodes.v[i];
			if (n->flags & NF_DEAD)
				continue;
			for (uint32_t k = 0; k < n->nopnd; k++) {
				if (n->opnd[k].kind != OK_VAL)
					continue;
				ValId v = n->opnd[k].v, r = G->root[v];
				if (pass == 1) {
					G->unode[G->uat[v]] = i;
					G->uk[G->uat[v]] = (uint16_t)k;
				}
				csr_add(G->uat, pass, v);
				if (n->op == OP_SYNC_DEALLOC || ir_access(n, k) == RACC_WRITE) {
					if (pass == 1)
						G->wnode[G->wat[r]] = i;
					csr_add(G->wat, pass, r);
				}
			}
		}
		if (pass == 0) { /* counts to starts */
			for (size_t v = 0; v < nv; v++) {
				G->uat[v + 1] += G->uat[v];
				G->wat[v + 1] += G->wat[v];
			}
			G->unode = arena_alloc(a, ((size_t)G->uat[nv] + 1) * sizeof *G->unode);
			G->uk = arena_alloc(a, ((size_t)G->uat[nv] + 1) * sizeof *G->uk);
			G->wnode = arena_alloc(a, ((size_t)G->wat[nv] + 1) * sizeof *G->wnode);
		} else { /* each start moved to the next key's: shift back */
			memmove(G->uat + 1, G->uat, nv * sizeof *G->uat);
			memmove(G->wat + 1, G->wat, nv * sizeof *G->wat);
			G->uat[0] = G->wat[0] = 0;
		}
	}
}

/* 1 when value v is a temporary of its own: an alias class of one value,
 * neither returned nor written in place nor on the host. */
static int
lone_temp(Kc *G, const uint32_t *nclass, ValId v)
{
	const StoreClass *cl = G->cls[v];
	return G->root[v] == v && nclass[v] == 1 && cl->kind == ST_TEMP && !cl->mutated &&
	       !G->g->vals.v[v].type.host && !G->ingroup_only[v];
}

/* 1 when product p can read its operand k through a folded view (trans:
 * with its last two dims swapped) without materialising it. */
static int
takes_view(Kc *G, const Node *p, uint32_t k, int trans)
{
	if (k > 1)
		return 0; /* linear's bias */
	if (!trans)
		return 1;
	if (p->op == OP_MATMUL && G->epilogue[p - G->g->nodes.v] >= 0)
		return 0; /* sgk_gemm_small reads its operands as stored */
	const Type *a = otype(G->g, p, 0), *b = otype(G->g, p, 1);
	if (p->op == OP_LINEAR)
		return k == 1 || a->rank == 2;
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK];
	int brank;
	int64_t nb = kernel_matmul_batch(a, b, &brank, bshape, st);
	int64_t own = kernel_batch_numel(k == 0 ? a : b);
	return nb == 1 || own == nb || own == 1;
}

/* 1 when product p can read its operand k, value y (part x of chunk or
 * split X, or a reshape of it keeping the last dim), as a slice of X's
 * source: X slices the last dim (the rows keep one stride, cuBLASLt's
 * ld), the product reads the operand's rows as one matrix (linear's x; a
 * matmul's operand of at least two dims with no batch, or a's rows
 * flattened), and the slice and its rows start 16-byte aligned. */
static int
takes_slice(Kc *G, NodeId X, ValId x, ValId y, const Node *p, uint32_t k)
{
	const Graph *g = G->g;
	const Type *t = vtype(g, x), *ty = vtype(g, y), *s = otype(g, &g->nodes.v[X], 0);
	int dim;
	int64_t start = shape_part_start(g, &g->nodes.v[X], x, &dim), es = dtype_size((DType)t->dt);
	if (p->op >= OP__N || !is_product(p->op) || k > 1 || t->rank < 2 || ty->rank < 2 ||
	    dim != t->rank - 1 || ty->d[ty->rank - 1] != t->d[dim] || start * es % 16 ||
	    s->d[dim] * es % 16)
		return 0;
	if (p->op == OP_LINEAR)
		return k == 0;
	const Type *a = otype(g, p, 0), *b = otype(g, p, 1);
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK];
	int brank;
	return a->rank >= 2 && b->rank >= 2 &&
	       (kernel_matmul_batch(a, b, &brank, bshape, st) == 1 || (k == 0 && b->rank == 2));
}

/* 1 when node n reading part x of chunk or split X as its operand k is
 * a product that takes the slice, or a folded reshape whose every use
 * is one (takes_slice). */
static int
reads_slice(Kc *G, NodeId X, ValId x, const Node *n, uint32_t k)
{
	if (!G->fold->view[n - G->g->nodes.v] || !same_bytes(G->g, n))
		return takes_slice(G, X, x, x, n, k);
	ValId y = n->res[0];
	for (uint32_t u = G->uat[y]; u < G->uat[y + 1]; u++) {
		const Node *p = &G->g->nodes.v[G->unode[u]];
		if (p->op != OP_DEL && !takes_slice(G, X, x, y, p, G->uk[u]))
			return 0;
	}
	return 1;
}

/* 1 when operand k of node n is one the flash kernels read through
 * strides (q, k, v, and the backward's dout). */
static int
attn_operand(const Node *n, uint32_t k)
{
	return (n->op == OP_SDPA && k < 3) || (n->op == OP_SDPA_BACKWARD && k < 4);
}

/* The permutation of view node n (transpose, permute): result dim d is
 * operand dim perm[d].  0 for other nodes. */
static int
view_perm(const Graph *g, const Node *n, int *perm)
{
	int r = otype(g, n, 0)->rank;
	const Attr *a = ir_attr(n, "dims");
	for (int d = 0; d < r; d++)
		perm[d] = d;
	if (n->op == OP_TRANSPOSE && r > 0) {
		int d0 = shape_norm_dim(ir_attr_int(n, "dim0", 0), r);
		int d1 = shape_norm_dim(ir_attr_int(n, "dim1", 0), r);
		perm[d0] = d1;
		perm[d1] = d0;
		return 1;
	}
	if (n->op != OP_PERMUTE || !a || a->nints != (uint32_t)r)
		return 0;
	for (int d = 0; d < r; d++)
		perm[d] = shape_norm_dim(a->ints[d], r);
	return 1;
}

/* 1 when view node n permutes dims but keeps the last one in place (the
 * flash kernels' rows stay contiguous), e.g. [B, T, H, D] -> [B, H, T, D]. */
static int
keeps_last(Kc *G, const Node *n)
{
	int perm[SG_MAXRANK], r = otype(G->g, n, 0)->rank;
	return r >= 2 && view_perm(G->g, n, perm) && perm[r - 1] == r - 1;
}

/* The last node reading the results of folded node n (through views). */
static NodeId
view_last(const KernelFold *F, const Node *n)
{
	NodeId last = NONE;
	for (uint32_t j = 0; j < n->nres; j++)
		if (last == NONE || (F->last[n->res[j]] != NONE && F->last[n->res[j]] > last))
			last = F->last[n->res[j]];
	return last;
}

/* 1 when every result of folded node n is read only by attention. */
static int
views_attn(Kc *G, const Node *n)
{
	for (uint32_t j = 0; j < n->nres; j++)
		if (!G->attn_only[n->res[j]])
			return 0;
	return 1;
}

/* 1 when node i reads operand k as memory in a kernel or call of its
 * own, or in its fused group's kernel (no in-place write of it): what a
 * view keeping its source's bytes can give it as the source's pointer,
 * the elements in the same order.  *at: where that kernel reads it, the
 * consumer a group is fused into (a prologue) running after i. */
static int
reads_bytes(Kc *G, NodeId i, uint32_t k, NodeId *at)
{
	const Node *n = &G->g->nodes.v[i];
	int gi = G->group[i];
	*at = gi >= 0 && G->s->groups.v[gi].into != NONE && G->s->groups.v[gi].into > i
	      ? G->s->groups.v[gi].into : i;
	return n->op < OP__N && ir_access(n, k) == RACC_READ && G->prologue[i] < 0 &&
	       G->epilogue[i] < 0 && n->op != OP_OFFLOAD &&
	       !(op_table[n->op].flags & OPF_COLLECTIVE);
}

/* Whether every use of x, the result of view node X, is an operand of a
 * product that takes it (trans 2: of an attention node, or a folded view
 * read only by attention; or, when the view keeps the bytes, the source
 * of a folded view or an attention operand), on X's stream; *last: the
 * last node reading it; *attn: whether only attention reads it. */
static int
uses_fold(Kc *G, NodeId X, ValId x, int trans, NodeId *last, int *attn)
{
	Graph *g = G->g;
	KernelFold *F = G->fold;
	int uses = 0;
	*last = NONE;
	*attn = 1;
	for (uint32_t u = G->uat[x]; u < G->uat[x + 1]; u++) {
		NodeId i = G->unode[u];
		uint32_t k = G->uk[u];
		const Node *n = &g->nodes.v[i];
		if (n->op == OP_DEL || i <= X)
			continue;
		NodeId l = i;
		if (n->stream != g->nodes.v[X].stream)
			return 0;
		if (F->view[i] && (!trans || (trans >= 2 && views_attn(G, n)))) {
			l = view_last(F, n);
			*attn &= views_attn(G, n);
		} else if (trans != 1 && attn_operand(n, k)) {
			; /* read through strides */
		} else if (trans == 3 && reads_slice(G, X, x, n, k)) {
			l = F->view[i] ? view_last(F, n) : i;
			*attn = 0;
		} else if (trans == 0 && G->plain && reads_bytes(G, i, k, &l)) {
			*attn = 0; /* the source's bytes, through its pointer */
		} else if (trans >= 2 || n->op >= OP__N || !is_product(n->op) ||
		           !takes_view(G, n, k, trans)) {
			return 0;
		} else {
			*attn = 0;
		}
		uses++;
		if (*last == NONE || l > *last)
			*last = l;
	}
	return uses > 0;
}

/* 1 when nothing in (from, to] writes s's class in place or releases it
 * (sync_dealloc): a view of s read at `to` still sees what `from` saw. */
static int
source_stays(Kc *G, ValId s, NodeId from, NodeId to)
{
	ValId r = G->root[s];
	for (uint32_t w = G->wat[r]; w < G->wat[r + 1]; w++)
		if (G->wnode[w] > from && G->wnode[w] <= to)
			return 0;
	return 1;
}

/* The class of s is used until node `last` on stream s (the fallback
 * release points, codegen_host.c). */
static void
extend_use(Kc *G, ValId s, NodeId last, uint32_t stream)
{
	StoreClass *cl = G->cls[s];
	if (cl->release == NONE || cl->release < last)
		cl->release = last;
	if (cl->last_on[stream] == NONE || cl->last_on[stream] < last)
		cl->last_on[stream] = last;
}

/* 1 when every attention node reading a result of folded node X,
 * directly or through the folded views after it, still takes the flash
 * kernels. */
static int
attn_fits(Kc *G, NodeId X)
{
	const Node *x = &G->g->nodes.v[X];
	for (uint32_t j = 0; j < x->nres; j++) {
		ValId r = x->res[j];
		for (uint32_t u = G->uat[r]; u < G->uat[r + 1]; u++) {
			NodeId i = G->unode[u];
			const Node *n = &G->g->nodes.v[i];
			if (i <= X)
				continue;
			if (G->fold->view[i] ? !attn_fits(G, i)
			                     : (n->op == OP_SDPA || n->op == OP_SDPA_BACKWARD) &&
			                               !flash_fits(G, n, n->op == OP_SDPA_BACKWARD))
				return 0;
		}
	}
	return 1;
}

/* Marks node X folded, its results views of s (trans) read until `last`;
 * undone (0) when an attention node reading them no longer fits. */
static int
mark_view(Kc *G, NodeId X, ValId s, int trans, NodeId last, int attn)
{
	KernelFold *F = G->fold;
	const Node *n = &G->g->nodes.v[X];
	F->view[X] = 1;
	for (uint32_t j = 0; j < n->nres; j++) {
		F->src[n->res[j]] = s;
		F->trans[n->res[j]] = (uint8_t)trans;
		F->last[n->res[j]] = last;
	}
	if (!attn_fits(G, X)) {
		F->view[X] = 0;
		for (uint32_t j = 0; j < n->nres; j++)
			F->src[n->res[j]] = F->last[n->res[j]] = NONE;
		return 0;
	}
	for (uint32_t j = 0; j < n->nres; j++) {
		G->ingroup_only[n->res[j]] = 1; /* no memory */
		G->attn_only[n->res[j]] = (uint8_t)attn;
	}
	extend_use(G, s, last, n->stream);
	return 1;
}

/* Folds view node X when it qualifies (see the top of the file). */
static void
fold_view(Kc *G, const uint32_t *nclass, NodeId X)
{
	Graph *g = G->g;
	const Node *n = &g->nodes.v[X];
	int trans, attn = 0, parts = n->op == OP_CHUNK || n->op == OP_SPLIT;
	NodeId last = NONE, l;
	if (n->flags & NF_DEAD || n->op >= OP__N || (n->nres != 1 && !parts) || n->nopnd < 1 ||
	    n->opnd[0].kind != OK_VAL || G->group[X] >= 0 || G->prologue[X] >= 0)
		return;
	if (parts)
		trans = 3; /* slices read by attention through strides */
	else if (same_bytes(G->g, n))
		trans = 0;
	else if ((n->op == OP_TRANSPOSE || n->op == OP_PERMUTE) && swaps_last2(G, n))
		trans = 1;
	else if (keeps_last(G, n))
		trans = 2; /* read by attention through strides */
	else
		return;
	ValId s = n->opnd[0].v;
	const Type *st = vtype(G->g, s);
	if (st->host || st->dt >= DT__N || G->ingroup_only[s])
		return;
	for (uint32_t j = 0; j < n->nres; j++) {
		ValId x = n->res[j];
		if (!lone_temp(G, nclass, x) || st->dt != vtype(G->g, x)->dt ||
		    !uses_fold(G, X, x, trans, &l, &attn))
			return;
		if (last == NONE || l > last)
			last = l;
	}
	if (source_stays(G, s, X, last))
		mark_view(G, X, s, trans, last, attn);
}

/* The one node using value c (del aside; as its operand *k unless k is
 * NULL), or NONE. */
static NodeId
sole_use(Kc *G, ValId c, uint32_t *k)
{
	NodeId use = NONE;
	for (uint32_t u = G->uat[c]; u < G->uat[c + 1]; u++) {
		NodeId i = G->unode[u];
		if (G->g->nodes.v[i].op == OP_DEL || i <= G->g->vals.v[c].def)
			continue;
		if (use != NONE)
			return NONE;
		use = i;
		if (k)
			*k = G->uk[u];
	}
	return use;
}

/* The view node that is the one use (del aside) of value c, a view that
 * keeps the bytes or permutes all but the last dim, on stream `stream`
 * and not folded or fused otherwise; NONE when there is none. */
static NodeId
sole_view_use(Kc *G, ValId c, uint32_t stream)
{
	Graph *g = G->g;
	KernelFold *F = G->fold;
	uint32_t k;
	NodeId use = sole_use(G, c, &k);
	if (use == NONE || k != 0)
		return NONE;
	const Node *n = &g->nodes.v[use];
	if (n->stream != stream || n->op >= OP__N || n->nres != 1 || G->group[use] >= 0 ||
	    G->prologue[use] >= 0 || F->view[use] ||
	    vtype(G->g, n->res[0])->dt != vtype(G->g, c)->dt)
		return NONE;
	return same_bytes(G->g, n) || keeps_last(G, n) ? use : NONE;
}

/* Links (F->out) the values of chain[0..nch) of views from v; clear:
 * unlinks them. */
static void
link_chain(Kc *G, ValId v, const NodeId *chain, int nch, int clear)
{
	for (int t = 0; t < nch; t++) {
		ValId y = G->g->nodes.v[chain[t]].res[0];
		G->fold->out[v] = clear ? NONE : y;
		v = y;
	}
}

/* Value v, a result of attention node P (or the cat of its results),
 * written through the longest chain of single-use views after it
 * (transpose back, reshape) that the flash kernels can write with
 * strides: the views make no copy and only the chain's last value gets
 * memory; that value (NONE: v is not a temporary of its own). */
static ValId
fold_output(Kc *G, const uint32_t *nclass, NodeId P, ValId v)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	NodeId chain[SG_MAXRANK];
	int nch = 0, bwd = p->op == OP_SDPA_BACKWARD;
	ValId c = v;
	if (!lone_temp(G, nclass, c))
		return NONE;
	while (nch < SG_MAXRANK) {
		NodeId Y = sole_view_use(G, c, p->stream);
		if (Y == NONE || !lone_temp(G, nclass, g->nodes.v[Y].res[0]))
			break;
		chain[nch++] = Y;
		c = g->nodes.v[Y].res[0];
	}
	for (; nch > 0; nch--) {
		link_chain(G, v, chain, nch, 0);
		if (flash_fits(G, p, bwd))
			break;
		link_chain(G, v, chain, nch, 1);
	}
	for (int t = 0; t < nch; t++) {
		G->fold->outview[chain[t]] = 1;
		G->ingroup_only[v] = 1; /* no memory */
		v = g->nodes.v[chain[t]].res[0];
	}
	return v;
}

/* The cat whose operands are ends[0..n) (the values attention node P's
 * results are written as), each once and nothing else, written by P into
 * its slices (see the top of the file). */
static void
fold_cat(Kc *G, const uint32_t *nclass, NodeId P, const ValId *ends, uint32_t n)
{
	Graph *g = G->g;
	KernelFold *F = G->fold;
	const Node *p = &g->nodes.v[P];
	uint32_t k;
	if (n < 2 || ends[0] == NONE)
		return;
	NodeId X = sole_use(G, ends[0], &k);
	const Node *x = X != NONE ? &g->nodes.v[X] : NULL;
	if (!x || x->op != OP_CAT || x->nopnd != n || x->stream != p->stream ||
	    G->group[X] >= 0 || G->prologue[X] >= 0 || !lone_temp(G, nclass, x->res[0]) ||
	    vtype(g, x->res[0])->dt != vtype(g, ends[0])->dt)
		return;
	for (uint32_t j = 0; j < n; j++) {
		ValId e = x->opnd[j].v;
		uint32_t m = 0;
		for (uint32_t i = 0; i < n; i++)
			m += ends[i] == e;
		if (x->opnd[j].kind != OK_VAL || m != 1 || sole_use(G, e, &k) != X ||
		    !lone_temp(G, nclass, e))
			return;
	}
	for (uint32_t j = 0; j < n; j++)
		F->out[ends[j]] = x->res[0];
	if (!flash_fits(G, p, p->op == OP_SDPA_BACKWARD)) {
		for (uint32_t j = 0; j < n; j++)
			F->out[ends[j]] = NONE;
		return;
	}
	F->outview[X] = 1;
	for (uint32_t j = 0; j < n; j++)
		G->ingroup_only[ends[j]] = 1; /* no memory */
	fold_output(G, nclass, P, x->res[0]); /* and on through views of the cat */
}

/* The results of attention node P written through views (fold_output),
 * and into a cat of them (fold_cat). */
static void
fold_outputs(Kc *G, const uint32_t *nclass, NodeId P)
{
	const Node *p = &G->g->nodes.v[P];
	ValId ends[3];
	if (p->flags & NF_DEAD || (p->op != OP_SDPA && p->op != OP_SDPA_BACKWARD) ||
	    p->nres > 3 || G->group[P] >= 0 || !flash_fits(G, p, p->op == OP_SDPA_BACKWARD))
		return;
	for (uint32_t j = 0; j < p->nres; j++)
		ends[j] = fold_output(G, nclass, P, p->res[j]);
	fold_cat(G, nclass, P, ends, p->nres);
}

/* 1 when attention nodes a and b take the same causal and scale. */
static int
same_attrs(const Node *a, const Node *b)
{
	const Attr *sa = ir_attr(a, "scale"), *sb = ir_attr(b, "scale");
	return ir_attr_int(a, "causal", 0) == ir_attr_int(b, "causal", 0) &&
	       (sa == NULL) == (sb == NULL) && (!sa || sa->f == sb->f);
}

/* Pairs forward A with backward B when B can read A's o and lse: o's
 * bytes and q, k, v's unchanged from A to B, both on the flash path with
 * o's layout.  o's memory then lives until B. */
static void
try_pair(Kc *G, NodeId A, NodeId B)
{
	Graph *g = G->g;
	KernelFold *F = G->fold;
	const Node *a = &g->nodes.v[A], *b = &g->nodes.v[B];
	ValId y = sched_out_end(G->s, a->res[0]);
	if (G->ingroup_only[y] || vtype(G->g, y)->host || !source_stays(G, y, A, B))
		return;
	for (uint32_t k = 0; k < 3; k++)
		if (!source_stays(G, sched_operand_root(G->s, a->opnd[k].v), A, B))
			return;
	F->pair[A] = B;
	F->pair[B] = A;
	if (!flash_fits(G, a, 0) || !flash_fits(G, b, 1)) {
		F->pair[A] = F->pair[B] = NONE;
		return;
	}
	if (G->cls[y]->kind == ST_TEMP)
		extend_use(G, y, B, b->stream);
}

/* The forward of attention backward B (same q, k, v, causal and scale,
 * same stream), paired with it when it qualifies (try_pair). */
static void
pair_attention(Kc *G, NodeId B)
{
	Graph *g = G->g;
	KernelFold *F = G->fold;
	const Node *b = &g->nodes.v[B];
	if (b->flags & NF_DEAD)
		return;
	if (b->op == OP_SDPA && b->opnd[0].kind == OK_VAL)
		G->lastfwd[b->opnd[0].v] = B;
	if (b->op != OP_SDPA_BACKWARD || b->opnd[1].kind != OK_VAL)
		return;
	NodeId A = G->lastfwd[b->opnd[1].v];
	if (A == NONE)
		return;
	const Node *a = &g->nodes.v[A];
	if (a->stream != b->stream || !same_attrs(a, b) || a->opnd[1].v != b->opnd[2].v ||
	    a->opnd[2].v != b->opnd[3].v || F->pair[A] != NONE)
		return;
	try_pair(G, A, B);
}

/* The epilogue (KEPI_RELU, KEPI_GELU, KEPI_DGELU) node a can be of a
 * product whose result it reads as operand 0, or KEPI_NONE. */
static int
activation(const Node *a)
{
	if (a->op == OP_RELU)
		return KEPI_RELU;
	if (a->op != OP_GELU && a->op != OP_GELU_BACKWARD)
		return KEPI_NONE;
	const Attr *ap = ir_attr(a, "approximate");
	if (!ap || !ap->s || strcmp(ap->s, "tanh") != 0)
		return KEPI_NONE;
	return a->op == OP_GELU ? KEPI_GELU : KEPI_DGELU;
}

/* 1 when product p runs as one matrix (its batch dims flattened into
 * its rows, as codegen_gemm.c does), of a dtype the aux epilogues take. */
static int
one_matrix(const Graph *g, const Node *p)
{
	DType dt = (DType)g->vals.v[p->res[0]].type.dt;
	if (dt != DT_F16 && dt != DT_BF16 && dt != DT_F32)
		return 0;
	if (p->op == OP_LINEAR)
		return 1;
	const Type *a = otype(g, p, 0), *b = otype(g, p, 1);
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK];
	int brank;
	return kernel_matmul_batch(a, b, &brank, bshape, st) == 1 || b->rank <= 2;
}

/* 1 when matmul p has batch dims and reads a folded transpose as its
 * first operand: codegen_gemm.c then issues it batched, not as one
 * matrix. */
static int
batched_view(Kc *G, const Node *p)
{
	int trans = 0;
	if (p->op != OP_MATMUL || p->opnd[0].kind != OK_VAL)
		return 0;
	for (ValId v = p->opnd[0].v; G->fold->src[v] != NONE; v = G->fold->src[v])
		trans ^= G->fold->trans[v] == 1;
	const Type *a = otype(G->g, p, 0), *b = otype(G->g, p, 1);
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK];
	int brank;
	return trans && kernel_matmul_batch(a, b, &brank, bshape, st) > 1;
}

int
kernel_dgelu_pair(const Graph *g, const Node *p, const Node *b)
{
	return p->op < OP__N && is_product(p->op) && p->nres == 1 && b->nopnd == 2 &&
	       activation(b) == KEPI_DGELU && b->opnd[0].kind == OK_VAL &&
	       b->opnd[0].v == p->res[0] && (p->op != OP_LINEAR || p->nopnd == 2) &&
	       one_matrix(g, p);
}

/* The node right after product p on its stream (nothing but del/offload
 * between) when it reads p's result v as operand 0; NONE otherwise. */
static NodeId
next_reader(Kc *G, NodeId p, ValId v)
{
	Graph *g = G->g;
	for (NodeId i = p + 1; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD || n->op == OP_DEL || n->op == OP_OFFLOAD)
			continue;
		return n->nopnd >= 1 && n->opnd[0].kind == OK_VAL && n->opnd[0].v == v ? i : NONE;
	}
	return NONE;
}

/* 1 when value f (gelu_backward's pre-activation) is in device memory of
 * its own class as the product's result, for the DGELU aux matrix. */
static int
aux_operand(Kc *G, ValId f, const Type *t)
{
	const Type *ft = vtype(G->g, f);
	return !ft->host && !G->ingroup_only[f] && ft->dt == t->dt && type_same_shape(ft, t) &&
	       (G->fold->src[f] == NONE);
}

/* The one node using value v (del aside) when it comes right after node
 * p, v's definition, on its stream with nothing but del/offload between;
 * NONE otherwise. */
static NodeId
next_sole_use(Kc *G, NodeId p, ValId v)
{
	Graph *g = G->g;
	NodeId use = sole_use(G, v, NULL);
	for (NodeId i = p + 1; use != NONE && i < use; i++) {
		const Node *n = &g->nodes.v[i];
		if (!(n->flags & NF_DEAD) && n->op != OP_DEL && n->op != OP_OFFLOAD)
			return NONE; /* something else runs between */
	}
	return use;
}

/* Removes group gi (a single activation absorbed by its product). */
static void
drop_group(Kc *G, FuseGroups *groups, int gi)
{
	for (uint32_t k = 0; k < groups->v[gi].n; k++)
		G->group[groups->v[gi].nodes[k]] = -1;
	groups->v[gi].n = 0; /* compacted away by drop_empty_groups */
}

/* Removes the groups drop_group emptied, renumbering the others. */
static void
drop_empty_groups(Kc *G, FuseGroups *groups)
{
	int *to = xmalloc(((size_t)groups->n + 1) * sizeof *to);
	uint32_t n = 0;
	for (uint32_t k = 0; k < groups->n; k++) {
		to[k] = groups->v[k].n ? (int)n : -1;
		if (groups->v[k].n)
			groups->v[n++] = groups->v[k];
	}
	if (n != groups->n) {
		for (NodeId i = 0; i < G->g->nodes.n; i++) {
			if (G->group[i] >= 0)
				G->group[i] = to[G->group[i]];
			if (G->prologue[i] >= 0)
				G->prologue[i] = to[G->prologue[i]];
			if (G->epilogue[i] >= 0)
				G->epilogue[i] = to[G->epilogue[i]];
		}
		groups->n = n;
	}
	free(to);
}

/* Makes the activation right after product P its epilogue when it
 * qualifies (see the top of the file). */
static void
fold_epilogue(Kc *G, FuseGroups *groups, const uint32_t *nclass, NodeId P)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	if (p->flags & NF_DEAD || p->op >= OP__N || !is_product(p->op))
		return;
	ValId v = p->res[0];
	const Type *t = vtype(G->g, v);
	const Type *k = otype(G->g, p, p->op == OP_LINEAR ? 1 : 0);
	if (t->dt == DT_F64 || type_numel(t) == 0 || k->d[k->rank - 1] == 0)
		return;
	if (!lone_temp(G, nclass, v))
		return;
	NodeId A = sole_use(G, v, NULL), next = next_sole_use(G, P, v);
	int aux = 0;
	if (A == NONE) { /* p read by others too: the aux form, p keeping its memory */
		if (g->vals.v[v].offload || !one_matrix(g, p) || batched_view(G, p))
			return;
		A = next_reader(G, P, v);
		aux = 1;
	}
	if (A == NONE)
		return;
	const Node *a = &g->nodes.v[A];
	int gi = G->group[A], epi = a->op < OP__N ? activation(a) : KEPI_NONE;
	if (aux && epi == KEPI_GELU)
		epi = KEPI_GELU_AUX;
	else if (aux)
		return;
	if (epi == KEPI_DGELU) { /* (runs at p: nothing between need be inert) */
		ValId f = a->opnd[1].kind == OK_VAL ? a->opnd[1].v : NONE;
		if (!kernel_dgelu_pair(g, p, a) || batched_view(G, p) || f == NONE || f == v || !aux_operand(G, f, t) ||
		    (g->vals.v[f].kind == VK_NODE && g->vals.v[f].def > P) ||
		    !source_stays(G, f, P, A))
			return;
	} else if (!aux && A != next) {
		return;
	}
	if (a->op >= OP__N || !epi || a->nopnd != (epi == KEPI_DGELU ? 2u : 1u) ||
	    a->stream != p->stream ||
	    G->ingroup_only[a->res[0]] || vtype(G->g, a->res[0])->host ||
	    vtype(G->g, a->res[0])->dt != t->dt || G->prologue[A] >= 0 ||
	    (gi >= 0 && (groups->v[gi].n != 1 || groups->v[gi].into != NONE ||
	                 groups->v[gi].after != NONE)))
		return;
	if (gi >= 0)
		drop_group(G, groups, gi);
	G->fold->act[P] = A;
	G->fold->prod[A] = P;
	G->fold->epi[P] = (uint8_t)epi;
	if (epi != KEPI_GELU_AUX)
		G->ingroup_only[v] = 1; /* no memory */
	for (uint32_t q = 0; q < p->nopnd && epi != KEPI_DGELU; q++)
		if (p->opnd[q].kind == OK_VAL)
			extend_use(G, sched_operand_root(G->s, p->opnd[q].v), A, p->stream);
}

/* 1 when group gi (-1: none) holds exactly the nodes a[0..na) and is
 * neither a prologue nor an epilogue: the whole group may be absorbed. */
static int
group_is(const FuseGroups *groups, int gi, const NodeId *a, uint32_t na)
{
	if (gi < 0)
		return 1;
	const FuseGroup *grp = &groups->v[gi];
	if (grp->n != na || grp->into != NONE || grp->after != NONE)
		return 0;
	for (uint32_t k = 0; k < na; k++)
		if (grp->nodes[k] != a[k])
			return 0;
	return 1;
}

/* The add right after product P computed by it (see the top of the
 * file): of a residual, cuBLASLt's C with beta 1 (KEPI_ADD), or of a bias
 * along the product's last dim, cuBLASLt's bias epilogue (KEPI_BIAS); the
 * product runs at the add, writing its result. */
static void
fold_add(Kc *G, FuseGroups *groups, const uint32_t *nclass, NodeId P)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	if (p->flags & NF_DEAD || p->op >= OP__N || !is_product(p->op) || p->nres != 1 ||
	    G->fold->act[P] != NONE || G->fold->upd[P] != NONE || G->epilogue[P] >= 0 ||
	    !one_matrix(g, p) || batched_view(G, p))
		return;
	ValId v = p->res[0];
	const Value *pv = &g->vals.v[v];
	const Type *k = otype(g, p, p->op == OP_LINEAR ? 1 : 0);
	if (type_numel(&pv->type) == 0 || k->d[k->rank - 1] == 0 || pv->offload ||
	    !lone_temp(G, nclass, v))
		return;
	NodeId A = next_sole_use(G, P, v);
	if (A == NONE)
		return;
	const Node *a = &g->nodes.v[A];
	if (a->op != OP_ADD || a->nopnd != 2 || a->nres != 1 || a->stream != p->stream ||
	    a->opnd[0].kind != OK_VAL || a->opnd[1].kind != OK_VAL ||
	    !group_is(groups, G->group[A], &A, 1) || G->prologue[A] >= 0 || G->epilogue[A] >= 0)
		return;
	ValId c = sched_add_other(a, v)->v, x1 = a->res[0];
	ValId r = sched_bytes_root(G->fold, c); /* a view keeping the bytes: its source's */
	const Value *cv = &g->vals.v[c], *xv = &g->vals.v[x1];
	if (c == v || cv->type.host || xv->type.host || G->ingroup_only[r] || G->ingroup_only[x1] ||
	    G->fold->src[r] != NONE || G->fold->out[r] != NONE || G->fold->src[x1] != NONE ||
	    G->fold->out[x1] != NONE || (cv->kind == VK_NODE && cv->def >= P) ||
	    g->vals.v[r].layout != cv->layout ||
	    xv->type.dt != pv->type.dt || !type_same_shape(&xv->type, &pv->type) ||
	    xv->layout != pv->layout || cv->type.dt != pv->type.dt)
		return;
	int epi = KEPI_NONE;
	if (type_same_shape(&cv->type, &pv->type) && cv->layout == pv->layout)
		epi = KEPI_ADD;
	else if (cv->type.rank == 1 && pv->type.rank >= 1 &&
	         cv->type.d[0] == pv->type.d[pv->type.rank - 1] &&
	         (p->op == OP_MATMUL || p->nopnd == 2))
		epi = KEPI_BIAS; /* (a linear's own bias comes first) */
	if (!epi)
		return;
	if (G->group[A] >= 0)
		drop_group(G, groups, G->group[A]);
	G->fold->act[P] = A;
	G->fold->prod[A] = P;
	G->fold->epi[P] = (uint8_t)epi;
	G->ingroup_only[v] = 1; /* no memory */
	for (uint32_t q = 0; q < p->nopnd; q++)
		if (p->opnd[q].kind == OK_VAL)
			extend_use(G, sched_operand_root(G->s, p->opnd[q].v), A, p->stream);
}

/* 1 when every node strictly between `from` and `to` (dels aside) is an
 * op of from's stream, no sync, collective, control_deps or
 * sync_dealloc: work moved from one to the other crosses no ordering. */
static int
plain_between(const Graph *g, NodeId from, NodeId to)
{
	uint32_t s = g->nodes.v[from].stream;
	for (NodeId i = from + 1; i < to; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD || n->op == OP_DEL)
			continue;
		if (n->stream != s || n->op >= OP__N ||
		    (op_table[n->op].flags & (OPF_SYNC | OPF_COLLECTIVE)) ||
		    n->op == OP_CONTROL_DEPS || n->op == OP_SYNC_DEALLOC)
			return 0;
	}
	return 1;
}

/* The batch_norm epilogue (see the top of the file): relu(y), or
 * relu(add(y, r)), of batch_norm P's result y, applied by its kernel as
 * it stores, which then writes the relu's result; y (and the add's) get
 * no memory.  The kernel still runs at P (its var_mean results are read
 * right after it by the running statistics' updates), so r must be
 * ready there: a temporary defined before P on its stream, not written
 * in place, in y's layout, and no sync or other stream between P and
 * the relu (at most BN_EPI_GAP nodes: the running statistics' updates). */
enum { BN_EPI_GAP = 16 };
static void
fold_bn_epilogue(Kc *G, FuseGroups *groups, const uint32_t *nclass, NodeId P)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	if (p->flags & NF_DEAD || p->op != OP_BATCH_NORM || p->nres != 1)
		return;
	ValId y = p->res[0];
	const Type *t = vtype(g, y);
	if ((t->dt != DT_F16 && t->dt != DT_BF16 && t->dt != DT_F32) || type_numel(t) == 0 ||
	    !lone_temp(G, nclass, y) || g->vals.v[y].offload)
		return;
	NodeId chain[2];
	uint32_t nch = 0, k;
	ValId v = y, r = NONE;
	for (;;) { /* y's single consumers: [add,] relu */
		NodeId A = sole_use(G, v, &k);
		if (A == NONE || nch == 2)
			return;
		const Node *a = &g->nodes.v[A];
		if (a->stream != p->stream || a->nres != 1 || G->prologue[A] >= 0 ||
		    G->epilogue[A] >= 0 || !type_same_shape(vtype(g, a->res[0]), t) ||
		    vtype(g, a->res[0])->dt != t->dt || g->vals.v[a->res[0]].layout != g->vals.v[y].layout)
			return;
		chain[nch++] = A;
		if (a->op == OP_RELU && a->nopnd == 1)
			break;
		if (a->op != OP_ADD || nch != 1 || a->nopnd != 2 || a->opnd[1 - k].kind != OK_VAL ||
		    (!G->ingroup_only[a->res[0]] && !lone_temp(G, nclass, a->res[0])) ||
		    g->vals.v[a->res[0]].offload) /* (a register of its group with the relu) */
			return;
		r = a->opnd[1 - k].v;
		const Value *rv = &g->vals.v[r];
		if (r == y || rv->kind != VK_NODE || rv->def >= P || rv->type.host ||
		    !type_same_shape(&rv->type, t) || rv->type.dt != t->dt || rv->layout != g->vals.v[y].layout ||
		    G->ingroup_only[r] || G->fold->src[r] != NONE || G->cls[r]->mutated ||
		    g->nodes.v[rv->def].stream != p->stream)
			return;
		v = a->res[0];
	}
	NodeId A = chain[nch - 1];
	if (A - P > BN_EPI_GAP || G->ingroup_only[g->nodes.v[A].res[0]] ||
	    vtype(g, g->nodes.v[A].res[0])->host)
		return;
	if (!plain_between(g, P, A))
		return;
	int gi = G->group[chain[0]];
	if (G->group[A] != gi || !group_is(groups, gi, chain, nch))
		return;
	if (gi >= 0)
		drop_group(G, groups, gi);
	KernelFold *F = G->fold;
	F->bn_act[P] = A;
	F->bn_add[P] = nch == 2 ? chain[0] : NONE;
	for (uint32_t j = 0; j < nch; j++)
		F->bn_act[chain[j]] = P;
	G->ingroup_only[y] = 1; /* no memory */
	if (nch == 2)
		G->ingroup_only[g->nodes.v[chain[0]].res[0]] = 1;
}

/* The max pool's backward through a relu (see the top of the file): P =
 * max_pool2d_backward(dy, x) whose result g only W = where(m, 0, g)
 * reads, m = le(x, 0) made by L between them and read by W alone, L and
 * W one fused group and no sync or other stream between P and W (at most
 * BN_EPI_GAP nodes). */
static void
fold_pool_relu(Kc *G, FuseGroups *groups, const uint32_t *nclass, NodeId P)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	double z;
	uint32_t k;
	if (p->flags & NF_DEAD || p->op != OP_MAX_POOL2D_BACKWARD || p->nres != 1 ||
	    p->nopnd < 2 || p->opnd[1].kind != OK_VAL)
		return;
	ValId gr = p->res[0], x = p->opnd[1].v;
	const Type *t = vtype(g, gr);
	if (!dtype_is_float((DType)t->dt) || type_numel(t) == 0 || !lone_temp(G, nclass, gr) ||
	    g->vals.v[gr].offload)
		return;
	NodeId W = sole_use(G, gr, &k);
	if (W == NONE || k != 2 || W - P > BN_EPI_GAP)
		return;
	const Node *w = &g->nodes.v[W];
	if (w->op != OP_WHERE || w->nopnd != 3 || w->nres != 1 || w->stream != p->stream ||
	    w->opnd[0].kind != OK_VAL || !ir_literal(&w->opnd[1], &z) || z != 0 ||
	    G->prologue[W] >= 0 || G->epilogue[W] >= 0)
		return;
	ValId out = w->res[0], m = w->opnd[0].v;
	if (!type_same_shape(vtype(g, out), t) || vtype(g, out)->dt != t->dt ||
	    g->vals.v[out].layout != g->vals.v[gr].layout || vtype(g, out)->host ||
	    G->ingroup_only[out] || g->vals.v[m].kind != VK_NODE)
		return;
	NodeId L = g->vals.v[m].def;
	const Node *l = &g->nodes.v[L];
	if (L <= P || L >= W || l->op != OP_LE || l->nopnd != 2 || l->nres != 1 ||
	    l->stream != p->stream || l->opnd[0].kind != OK_VAL || l->opnd[0].v != x ||
	    !ir_literal(&l->opnd[1], &z) || z != 0 || sole_use(G, m, NULL) != W ||
	    (!G->ingroup_only[m] && !lone_temp(G, nclass, m)) || g->vals.v[m].offload ||
	    !plain_between(g, P, W))
		return;
	const NodeId chain[2] = {L, W};
	int gi = G->group[W];
	if (G->group[L] != gi || !group_is(groups, gi, chain, 2))
		return;
	if (gi >= 0)
		drop_group(G, groups, gi);
	KernelFold *F = G->fold;
	F->pool_relu[P] = W;
	F->pool_relu[L] = F->pool_relu[W] = P;
	G->ingroup_only[gr] = G->ingroup_only[m] = 1; /* no memory */
}

/* 1 when a live node strictly between `from` and `to`, other than
 * `except` (and del), reads value v. */
static int
read_between(Kc *G, ValId v, NodeId from, NodeId to, NodeId except)
{
	for (uint32_t u = G->uat[v]; u < G->uat[v + 1]; u++) {
		NodeId i = G->unode[u];
		if (i > from && i < to && i != except && G->g->nodes.v[i].op != OP_DEL)
			return 1;
	}
	return 0;
}

/* The literal operand of binary node n besides value v (*x), 1 when n
 * reads v and a literal. */
static int
times_literal(const Node *n, ValId v, double *x)
{
	if (n->nopnd != 2 || n->nres != 1)
		return 0;
	for (uint32_t k = 0; k < 2; k++)
		if (n->opnd[k].kind == OK_VAL && n->opnd[k].v == v && ir_literal(&n->opnd[1 - k], x))
			return 1;
	return 0;
}

/* The running statistics' updates of training batch_norm P (see the top
 * of the file): for each statistic st its var_mean V computes in P's
 * kernel (the mean, the unbiased variance), the fused group right after
 * P that alone reads it, {t = mul(st, take), k = mul(r, keep), u = add(t,
 * k)}, u stored by fusion into r (store_into_copy: u joined r's class), r
 * an input, param or const of st's 2-byte dtype and shape that nothing
 * else reads or writes between P and u, no sync or other stream between
 * (at most BN_EPI_GAP nodes).  P's kernel then stores the update into r
 * as it finishes each channel (SgBnRunning); the group has no kernel. */
static void
fold_bn_running(Kc *G, FuseGroups *groups, NodeId P)
{
	Graph *g = G->g;
	NodeId V = layout_bn_stats(g, P);
	if (V == NONE || G->prologue[V] >= 0 || G->group[V] >= 0 || G->epilogue[V] >= 0)
		return;
	for (int j = 0; j < 2; j++) {
		ValId st = g->nodes.v[V].res[j]; /* var, mean */
		const Type *t = vtype(g, st);
		double x;
		if ((t->dt != DT_F16 && t->dt != DT_BF16) || t->rank != 1 || t->host)
			continue;
		NodeId M1 = sole_use(G, st, NULL);
		int gi = M1 != NONE ? G->group[M1] : -1;
		if (gi < 0 || g->nodes.v[M1].op != OP_MUL || !times_literal(&g->nodes.v[M1], st, &x))
			continue;
		const FuseGroup *grp = &groups->v[gi];
		if (grp->n != 3 || grp->into != NONE || grp->after != NONE)
			continue;
		NodeId A = grp->nodes[2], M2 = grp->nodes[0] == M1 ? grp->nodes[1] : grp->nodes[0];
		const Node *a = &g->nodes.v[A], *m2 = &g->nodes.v[M2], *m1 = &g->nodes.v[M1];
		if (grp->nodes[2] == M1 || a->op != OP_ADD || a->nopnd != 2 || m2->op != OP_MUL ||
		    m2->nopnd != 2 || a->opnd[0].kind != OK_VAL || a->opnd[1].kind != OK_VAL)
			continue;
		ValId t1 = m1->res[0], t2 = m2->res[0];
		if (!((a->opnd[0].v == t1 && a->opnd[1].v == t2) ||
		      (a->opnd[0].v == t2 && a->opnd[1].v == t1)) ||
		    !G->ingroup_only[t1] || !G->ingroup_only[t2])
			continue;
		ValId r = m2->opnd[0].kind == OK_VAL ? m2->opnd[0].v : m2->opnd[1].v;
		if (!times_literal(m2, r, &x)) /* (also when both operands are values) */
			continue;
		const Type *rt = vtype(g, r);
		uint8_t kind = G->cls[r]->kind;
		if ((kind != ST_PARAM && kind != ST_INPUT) || G->root[a->res[0]] != G->root[r] ||
		    rt->dt != t->dt || !type_same_shape(rt, t) || rt->host ||
		    vtype(g, t1)->dt != t->dt || vtype(g, t2)->dt != t->dt ||
		    vtype(g, a->res[0])->dt != t->dt)
			continue;
		if (A <= P || A - P > BN_EPI_GAP || a->stream != g->nodes.v[P].stream ||
		    !plain_between(g, P, A) || !source_stays(G, r, P, A) ||
		    read_between(G, r, P, A, M2))
			continue;
		drop_group(G, groups, gi);
		NodeId *F = j ? G->fold->bn_rm : G->fold->bn_rv;
		F[P] = A;
		F[M1] = F[M2] = F[A] = P;
		G->ingroup_only[st] = 1; /* read by no kernel now: no memory */
	}
}

/* The SGD updates of batch_norm_backward P's weight and bias gradients
 * (see the top of the file): sgd_update_(w, g), momentum and weight decay
 * 0, the only use of g, a 2-byte temporary of x's dtype, at most
 * BN_EPI_GAP nodes after P on its stream with no sync between, w of g's
 * dtype and shape that nothing else reads or writes between P and the
 * update.  P's kernel makes the update as it finishes g (SgBnSgd); g gets
 * no memory and the update no kernel. */
static void
fold_bn_sgd(Kc *G, const uint32_t *nclass, NodeId P)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	if (p->flags & NF_DEAD || p->op != OP_BATCH_NORM_BACKWARD || p->nres != 3 || p->nopnd < 2 ||
	    p->opnd[1].kind != OK_VAL)
		return;
	const DType dt = (DType)otype(g, p, 1)->dt;
	if (dt != DT_F16 && dt != DT_BF16)
		return;
	for (int j = 1; j <= 2; j++) {
		ValId v = p->res[j];
		const Type *t = vtype(g, v);
		uint32_t k;
		if (t->dt != dt || t->host || !lone_temp(G, nclass, v) || g->vals.v[v].offload)
			continue;
		NodeId U = sole_use(G, v, &k);
		if (U == NONE || k != 1 || U <= P || U - P > BN_EPI_GAP)
			continue;
		const Node *u = &g->nodes.v[U];
		if (u->op != OP_SGD_UPDATE_ || u->nopnd != 2 || u->opnd[0].kind != OK_VAL ||
		    u->stream != p->stream || G->group[U] >= 0 || G->prologue[U] >= 0 ||
		    G->epilogue[U] >= 0 || ir_attr_float(u, "momentum", 0) != 0 ||
		    ir_attr_float(u, "weight_decay", 0) != 0)
			continue;
		ValId w = u->opnd[0].v;
		const Type *wt = vtype(g, w);
		if (wt->host || wt->dt != dt || !type_same_shape(wt, t) || G->fold->src[w] != NONE ||
		    G->ingroup_only[w] || !plain_between(g, P, U) || !source_stays(G, w, P, U - 1) ||
		    read_between(G, w, P, U, NONE))
			continue;
		NodeId *F = j == 1 ? G->fold->bn_sgdw : G->fold->bn_sgdb;
		F[P] = U;
		F[U] = P;
		G->ingroup_only[v] = 1; /* no memory */
	}
}

/* The SGD update of product P's result computed by the product
 * (fold_update; see the top of the file), at most UPD_GAP nodes later. */
enum { UPD_GAP = 64 };
static void
fold_update(Kc *G, const uint32_t *nclass, NodeId P)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	if (p->flags & NF_DEAD || p->op != OP_MATMUL || p->nres != 1 || p->nopnd != 2 ||
	    G->fold->act[P] != NONE || G->fold->prod[P] != NONE)
		return;
	ValId v = p->res[0];
	const Type *t = vtype(g, v);
	if (t->rank != 2 || otype(g, p, 0)->rank != 2 || otype(g, p, 1)->rank != 2 ||
	    type_numel(t) == 0 || otype(g, p, 0)->d[1] == 0 ||
	    !lone_temp(G, nclass, v) || g->vals.v[v].offload || batched_view(G, p))
		return;
	NodeId U = sole_use(G, v, NULL);
	if (U == NONE || U <= P || U - P > UPD_GAP)
		return;
	const Node *u = &g->nodes.v[U];
	if (u->op != OP_SGD_UPDATE_ || u->nopnd != 2 || u->opnd[1].kind != OK_VAL ||
	    u->opnd[1].v != v || u->opnd[0].kind != OK_VAL || u->stream != p->stream ||
	    G->group[U] >= 0 || G->prologue[U] >= 0 || G->epilogue[U] >= 0 ||
	    ir_attr_float(u, "momentum", 0) != 0 || ir_attr_float(u, "weight_decay", 0) != 0)
		return;
	ValId w = u->opnd[0].v;
	const Type *wt = vtype(g, w);
	if (wt->host || wt->dt != t->dt || !type_same_shape(wt, t) || G->fold->src[w] != NONE ||
	    G->ingroup_only[w] || g->vals.v[w].layout != g->vals.v[v].layout ||
	    !source_stays(G, w, P, U - 1))
		return;
	for (uint32_t q = 0; q < 2; q++) {
		ValId r = p->opnd[q].kind == OK_VAL ? sched_operand_root(G->s, p->opnd[q].v) : NONE;
		if (r == NONE || G->root[r] == G->root[w] || vtype(g, r)->host ||
		    !source_stays(G, r, P, U))
			return;
	}
	if (!plain_between(g, P, U))
		return;
	G->fold->upd[P] = U;
	G->fold->upd[U] = P;
	G->ingroup_only[v] = 1; /* no memory */
}

/* 1 when nothing between product P and its update U allocates, or the
 * operands of P whose bytes die before U (and would now live until it)
 * are no larger than the gradient the update no longer needs. */
static int
update_fits_locally(Kc *G, NodeId P, NodeId U)
{
	Graph *g = G->g;
	const Node *p = &g->nodes.v[P];
	int allocates = 0;
	for (NodeId i = P + 1; i < U && !allocates; i++) {
		const Node *n = &g->nodes.v[i];
		for (uint32_t j = 0; !(n->flags & NF_DEAD) && j < n->nres; j++)
			allocates |= !G->ingroup_only[n->res[j]] && G->cls[n->res[j]]->kind == ST_TEMP;
	}
	if (!allocates)
		return 1;
	uint64_t cost = 0;
	ValId seen = NONE;
	for (uint32_t q = 0; q < p->nopnd; q++) {
		ValId r = G->root[sched_operand_root(G->s, p->opnd[q].v)];
		const StoreClass *cl = G->cls[r];
		if (r == seen || cl->kind != ST_TEMP || (cl->release != NONE && cl->release >= U))
			continue;
		cost += memplan_buf_size(vtype(g, r));
		seen = r;
	}
	return cost <= memplan_buf_size(vtype(g, p->res[0]));
}

/* Sets the updates of upd[] (fold_update's choices) that `mode` takes:
 * 0 none, 1 those update_fits_locally takes, 2 all. */
static void
set_updates(Kc *G, const NodeId *upd, int mode)
{
	Graph *g = G->g;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		NodeId u = upd[i];
		if (u == NONE || g->nodes.v[i].op != OP_MATMUL)
			continue;
		int take = mode == 2 || (mode == 1 && update_fits_locally(G, i, u));
		G->fold->upd[i] = take ? u : NONE;
		G->fold->upd[u] = take ? i : NONE;
		G->ingroup_only[g->nodes.v[i].res[0]] = (uint8_t)take;
	}
}

/* Keeps fold_update's choices only where they do not raise the memory
 * plan's peak (running a product at its update keeps its operands until
 * there): all of them, else those update_fits_locally takes, else none.
 * The kept products' operands are then used until their updates. */
static void
keep_updates(Kc *G)
{
	Graph *g = G->g;
	NodeId *upd = arena_alloc(G->tmp, (g->nodes.n + 1) * sizeof *upd);
	int any = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		upd[i] = G->fold->upd[i];
		any |= upd[i] != NONE;
	}
	if (!any)
		return;
	uint64_t all = memplan_sched_peak(g, 2);
	set_updates(G, upd, 0);
	uint64_t none = memplan_sched_peak(g, 2);
	if (all <= none) {
		set_updates(G, upd, 2);
	} else {
		set_updates(G, upd, 1);
		if (memplan_sched_peak(g, 2) > none)
			set_updates(G, upd, 0);
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		NodeId u = G->fold->upd[i];
		const Node *p = &g->nodes.v[i];
		for (uint32_t q = 0; u != NONE && p->op == OP_MATMUL && q < p->nopnd; q++)
			extend_use(G, sched_operand_root(G->s, p->opnd[q].v), u, p->stream);
	}
}

static void
fold_all(Kc *G, FuseGroups *groups)
{
	Graph *g = G->g;
	Arena *a = G->s->a;
	KernelFold *F = G->fold = G->s->fold = arena_alloc(a, sizeof *F);
	F->src = arena_alloc(a, (g->vals.n + 1) * sizeof *F->src);
	F->trans = arena_alloc(a, g->vals.n + 1);
	F->last = arena_alloc(a, (g->vals.n + 1) * sizeof *F->last);
	F->view = arena_alloc(a, g->nodes.n + 1);
	F->act = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->act);
	F->prod = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->prod);
	F->epi = arena_alloc(a, g->nodes.n + 1);
	F->out = arena_alloc(a, (g->vals.n + 1) * sizeof *F->out);
	F->outview = arena_alloc(a, g->nodes.n + 1);
	F->pair = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->pair);
	F->bn_act = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->bn_act);
	F->bn_add = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->bn_add);
	F->pool_relu = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->pool_relu);
	F->upd = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->upd);
	F->norm_add = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->norm_add);
	F->bn_rm = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->bn_rm);
	F->bn_rv = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->bn_rv);
	F->bn_sgdw = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->bn_sgdw);
	F->bn_sgdb = arena_alloc(a, (g->nodes.n + 1) * sizeof *F->bn_sgdb);
	G->lastfwd = arena_alloc(G->tmp, (g->vals.n + 1) * sizeof *G->lastfwd);
	G->attn_only = arena_alloc(G->tmp, g->vals.n + 1);
	uint32_t *nclass = arena_alloc(G->tmp, (g->vals.n + 1) * sizeof *nclass);
	for (ValId v = 0; v < g->vals.n; v++) {
		F->src[v] = F->last[v] = F->out[v] = G->lastfwd[v] = NONE;
		nclass[G->root[v]]++;
	}
	index_uses(G);
	for (NodeId i = 0; i < g->nodes.n; i++)
		F->act[i] = F->prod[i] = F->pair[i] = F->bn_act[i] = F->bn_add[i] = F->upd[i] =
		    F->norm_add[i] = F->pool_relu[i] = F->bn_rm[i] = F->bn_rv[i] = F->bn_sgdw[i] =
		    F->bn_sgdb[i] = NONE;
	for (NodeId i = g->nodes.n; i-- > 0;) /* uses before their views */
		fold_view(G, nclass, i);
	for (NodeId i = 0; i < g->nodes.n; i++)
		fold_outputs(G, nclass, i);
	for (NodeId i = 0; i < g->nodes.n; i++)
		pair_attention(G, i);
	/* Then a reshape (squeeze, unsqueeze) that none of the above took,
	 * read by any kernel: its source's pointer (codegen_host.c). */
	G->plain = 1;
	for (NodeId i = g->nodes.n; i-- > 0;)
		if (!F->view[i] && !F->outview[i] && same_bytes(g, &g->nodes.v[i]) &&
		    F->out[g->nodes.v[i].res[0]] == NONE)
			fold_view(G, nclass, i);
	G->plain = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		fold_epilogue(G, groups, nclass, i);
		fold_add(G, groups, nclass, i);
		fold_bn_epilogue(G, groups, nclass, i);
		fold_pool_relu(G, groups, nclass, i);
		fold_bn_running(G, groups, i);
		fold_bn_sgd(G, nclass, i);
		fold_update(G, nclass, i);
	}
	drop_empty_groups(G, groups);
}


/* ------------------------------------------------------------------ the pass */

/* Whether the kernel library's row kernels (sgk_rows.cuh) take row op n:
 * f16, bf16 or f32 along the last dim; softmax, log_softmax and the norms
 * with their input in memory (no pointwise producer or consumer fused
 * in); cross_entropy (and its backward) with the class dim last, i64
 * targets and a result of the logits' dtype; the norms' backward with
 * every operand of x's dtype (f64 too when it gives the weight's
 * gradient: only the library computes that). */
static int
rows_library(const Graph *g, const Sched *s, NodeId i)
{
	const Node *n = &g->nodes.v[i];
	int em = op_table[n->op].emit, bwd = n->op == OP_CROSS_ENTROPY_BACKWARD;
	int nbwd = n->op == OP_LAYER_NORM_BACKWARD || n->op == OP_RMS_NORM_BACKWARD;
	if (em != EM_SOFTMAX && em != EM_NORM && em != EM_CROSS_ENTROPY && !bwd && !nbwd)
		return 0;
	const Type *x = otype(g, n, bwd || nbwd ? 1 : 0);
	DType dt = (DType)x->dt;
	if (dt != DT_F16 && dt != DT_BF16 && dt != DT_F32 && !(nbwd && n->nres > 1 && dt == DT_F64))
		return 0;
	if (nbwd)
		return x->rank >= 1 && x->d[x->rank - 1] >= 1 && x->d[x->rank - 1] <= INT32_MAX &&
		       otype(g, n, 0)->dt == dt && otype(g, n, n->nopnd - 1)->dt == dt &&
		       otype(g, n, 2 < n->nopnd ? 2 : 1)->dt == dt;
	if (em == EM_CROSS_ENTROPY || bwd) {
		const Type *t = otype(g, n, bwd + 1);
		int64_t outer, len, inner;
		type_around(x, x->rank >= 2 ? 1 : 0, &outer, &len, &inner); /* the class dim */
		return inner == 1 && outer >= 1 && len >= 1 && len <= INT32_MAX &&
		       t->dt == DT_I64 && g->vals.v[n->res[0]].type.dt == dt &&
		       (!bwd || otype(g, n, 0)->dt == dt);
	}
	if (type_numel(x) == 0 || s->prologue[i] >= 0 || s->epilogue[i] >= 0)
		return 0;
	if (x->rank < 1 || x->d[x->rank - 1] < 1 || x->d[x->rank - 1] > INT32_MAX)
		return 0;
	return em != EM_SOFTMAX ||
	       shape_norm_dim(ir_attr_int(n, "dim", -1), x->rank) == x->rank - 1;
}

/* The residual add making the input of norm N (a layer_norm or rms_norm
 * the library's kernel computes, rows_lib) that the kernel can compute as
 * it loads its rows (see the top of the file), or NONE: x1 = add(a, b)
 * of two tensors of x1's shape, dtype and layout in memory (or views of
 * such memory keeping its bytes: torch.export's reshape of a product),
 * right before N on its stream (dels between), a fused group of its own. */
static NodeId
norm_add_of(Kc *G, const FuseGroups *groups, NodeId N)
{
	Graph *g = G->g;
	const Node *n = &g->nodes.v[N];
	if (n->flags & NF_DEAD || (n->op != OP_LAYER_NORM && n->op != OP_RMS_NORM) ||
	    !G->s->rows_lib[N] || n->opnd[0].kind != OK_VAL)
		return NONE;
	ValId x1 = n->opnd[0].v;
	const Value *xv = &g->vals.v[x1];
	if (xv->kind != VK_NODE || xv->def >= N || xv->type.host || G->ingroup_only[x1] ||
	    G->fold->src[x1] != NONE || G->fold->out[x1] != NONE)
		return NONE;
	NodeId X = xv->def;
	const Node *a = &g->nodes.v[X];
	int gi = G->group[X];
	if (a->op != OP_ADD || a->nopnd != 2 || a->nres != 1 || a->stream != n->stream ||
	    gi < 0 || !group_is(groups, gi, &X, 1) || G->prologue[X] >= 0 ||
	    G->epilogue[X] >= 0 || next_reader(G, X, x1) != N)
		return NONE;
	for (uint32_t k = 0; k < 2; k++) {
		if (a->opnd[k].kind != OK_VAL)
			return NONE;
		ValId r = sched_bytes_root(G->fold, a->opnd[k].v); /* a view's: its source's */
		const Value *o = &g->vals.v[a->opnd[k].v];
		if (o->type.host || o->type.dt != xv->type.dt || !type_same_shape(&o->type, &xv->type) ||
		    o->layout != xv->layout || G->ingroup_only[r] || G->fold->src[r] != NONE ||
		    g->vals.v[r].layout != xv->layout)
			return NONE;
	}
	return X;
}

/* The norms' residual adds (norm_add_of) computed by the norms' kernels:
 * each add's group goes, its sum keeps its memory, written at the norm,
 * which reads the add's operands.  Kept only where the memory plan's
 * peak does not rise (the sum written by the norm takes no dying
 * operand's bytes, as the add's own kernel may): all of them or none. */
static void
keep_norm_adds(Kc *G, FuseGroups *groups)
{
	Graph *g = G->g;
	NodeId *norm = arena_alloc(G->tmp, (g->nodes.n + 1) * sizeof *norm);
	NodeId *add = arena_alloc(G->tmp, (g->nodes.n + 1) * sizeof *add);
	uint32_t n = 0;
	for (NodeId i = 0; i < g->nodes.n; i++)
		if ((add[n] = norm_add_of(G, groups, i)) != NONE)
			norm[n++] = i;
	if (!n)
		return;
	uint64_t none = memplan_sched_peak(g, 2);
	FuseGroup *saved = arena_alloc(G->tmp, (n + 1) * sizeof *saved);
	for (uint32_t j = 0; j < n; j++) {
		const Node *a = &g->nodes.v[add[j]];
		saved[j] = groups->v[G->group[add[j]]];
		drop_group(G, groups, G->group[add[j]]);
		G->fold->norm_add[norm[j]] = add[j];
		G->fold->norm_add[add[j]] = norm[j];
		for (uint32_t k = 0; k < 2; k++) /* read at the norm now */
			extend_use(G, sched_operand_root(G->s, a->opnd[k].v), norm[j],
			           g->nodes.v[norm[j]].stream);
	}
	drop_empty_groups(G, groups);
	if (memplan_sched_peak(g, 2) <= none)
		return;
	for (uint32_t j = 0; j < n; j++) { /* undo: each add its group again */
		G->fold->norm_add[norm[j]] = G->fold->norm_add[add[j]] = NONE;
		vec_push(groups, saved[j]);
		G->group[add[j]] = (int)groups->n - 1;
	}
}

/* The attention nodes the flash kernels take, with the layouts folded;
 * the row ops the library's row kernels take; batch norms' statistics. */
static void
choose_library(Graph *g, Sched *s)
{
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		Flash f;
		if (!(n->flags & NF_DEAD) && (n->op == OP_SDPA || n->op == OP_SDPA_BACKWARD))
			s->flash[i] = (uint8_t)kernel_flash(g, s->fold, n, n->op == OP_SDPA_BACKWARD, &f);
		else if (!(n->flags & NF_DEAD) && n->op < OP__N)
			s->rows_lib[i] = (uint8_t)rows_library(g, s, i);
		if (!(n->flags & NF_DEAD) && n->op == OP_MATMUL && s->epilogue[i] >= 0)
			s->gemm_split[i] = (uint8_t)kernel_small_split(g, n);
		/* a training batch_norm computes the var_mean right before it
		 * (functionalize's running statistics) in its own pass over x */
		NodeId v = layout_bn_stats(g, i);
		if (v != NONE && s->prologue[v] < 0 && s->group[v] < 0) {
			s->bn_stats[i] = v;
			s->bn_stats[v] = i;
		}
	}
}

int
kernel_choice_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)d;
	Sched *s = sched_get(g, po->opt_level);
	if (po->opt_level < 2) {
		choose_library(g, s);
		return 1;
	}
	Kc G = {.g = g, .s = s, .tmp = arena_new(), .root = s->root, .cls = s->cls,
	        .group = s->group, .prologue = s->prologue, .epilogue = s->epilogue,
	        .ingroup_only = s->reg};
	fold_all(&G, &s->groups);
	choose_library(g, s);
	/* (these plan the memory: after every other choice) */
	keep_norm_adds(&G, &s->groups);
	keep_updates(&G);
	arena_free(G.tmp);
	return 1;
}
