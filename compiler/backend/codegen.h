/*
 * codegen.h - what the files of the CUDA backend share.
 * The backend's entry point is in sgc.h; this header is theirs alone.
 *
 * The backend emits what the passes decided and stored on the graph
 * (g->sched, schedule.c: storage classes, fused groups, kernel choices,
 * the memory plan); it decides none of it.  Per graph:
 *   1. analysis (codegen_host.c): every value gets a C name and an io
 *      slot of the call or model where its class needs one;
 *   2. emission: kernels (codegen_kernels.c) into the file's kernel part,
 *      host statements into the call's body, the API around them
 *      (codegen_api.c).
 * Text comes from the templates of codegen_templates/ (see its README):
 * cg_emit fills a section's placeholders.  (The files: codegen.c,
 * codegen_host.c, codegen_kernels.c, codegen_rows.c, codegen_gemm.c,
 * codegen_coll.c, codegen_grad.c, codegen_api.c.)
 */
#ifndef CODEGEN_H
#define CODEGEN_H

#include "backend.h"

/* ------------------------------------------------------------------ codegen.c */

/* A placeholder binding; arrays of them end with {NULL, NULL}. */
typedef struct {
	const char *key, *val;
} CgBind;

typedef struct CgGraph CgGraph;

/* The variables a paired attention forward keeps for its backward: the
 * row log-sum-exp, and with dropout_p the keep bits (NULL: none). */
typedef struct {
	const char *lse, *dmask;
} CgAttnKept;

/* A set of pointwise nodes computed by one kernel: a group of the fusion
 * pass (FuseGroup, sgc.h), or a single node at -O0. */
typedef FuseGroup CgGroup;

/* The state of one `sgc` compilation to CUDA. */
typedef struct {
	Module *m;
	const CodegenOptions *co;
	Arena *a;
	FILE *kern;         /* the kernels of every graph, in order */
	FILE *host;         /* host code of every graph, in order */
	FILE *hdr;          /* --header text, or NULL */
	int failed;         /* a diagnostic was reported */
	Map kernels;        /* a kernel's text (cg_kernel) -> kernel_names index */
	VEC(const char *) kernel_names;
	VEC(const char *) libraries; /* kernel-library headers used (cg_use_library) */
	int attn_dropout;            /* a flash attention call draws a dropout */
} Cg;

/* The mark that maps the code after it, to the end of its function (a `}`
 * at column 0), to .sg line `line`: one `#line` before each code line,
 * written by codegen_module (""; with --no-line). */
char *cg_line_mark(Cg *c, uint32_t line);

/* Writes section "FILE:NAME" of the templates with the bindings b
 * (NULL-terminated).  An unknown section or placeholder is an ICE. */
void cg_emit(FILE *f, const char *section, const CgBind *b);
#define CG_EMIT(f, section, ...) \
	cg_emit((f), (section), (const CgBind[]){__VA_ARGS__, {NULL, NULL}})
/* Emits the kernel of template section `section` with the bindings b
 * (NULL-terminated; "name" is the kernel's name, "comment" its comment)
 * and returns its name; when a kernel of the same text but for its name
 * and comment was emitted before (the same computation for other tensors
 * or nodes), emits nothing and returns that kernel's name.  One kernel
 * per distinct computation. */
const char *cg_kernel(CgGraph *G, const char *section, const CgBind *b);
#define CG_KERNEL(G, section, ...) \
	cg_kernel((G), (section), (const CgBind[]){__VA_ARGS__, {NULL, NULL}})
/* text (a template fragment, one line or more) with b's values. */
char *cg_subst(Cg *c, const char *text, const CgBind *b);
#define CG_SUBST(c, text, ...) \
	cg_subst((c), (text), (const CgBind[]){__VA_ARGS__, {NULL, NULL}})

/* printf into the compilation's arena. */
char *cg_fmt(Cg *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A C identifier for a .sg name: [A-Za-z0-9_] kept, others as '_'. */
char *cg_ident(Cg *c, const char *prefix, const char *name);
/* cg_ident made unique among the names in used (name_2, name_3... after
 * it), and added to used. */
char *cg_unique_ident(Cg *c, Map *used, const char *prefix, const char *name);
/* A double as a C expression of type float (f = 1) or double. */
char *cg_lit_float(Cg *c, double v, int f);
/* An int64 as a C literal of type sg_i64. */
char *cg_lit_int(Cg *c, int64_t v);
/* One node as .sg text ("%h = matmul(%x, %w1)"). */
char *cg_node_text(Cg *c, Graph *g, const Node *n);
/* The text comments quote for node n: its .sg line as written (blanks
 * around it dropped; a `*` `/` pair, backslashes and unprintable bytes
 * made harmless), and for a node the compiler made from that statement
 * (autograd, the passes) its own text after it, "  [sgc: ...]". */
char *cg_stmt_text(Cg *c, Graph *g, const Node *n);
/* "model.sg:14" for a node; the .sg file's base name. */
char *cg_where(Cg *c, const Node *n);
const char *cg_source_name(Cg *c);
void cg_error(Cg *c, const Node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A string built by appending (amortised growth: a list of n items
 * costs O(n), where cg_fmt("%s%s", acc, item) costs O(n^2)). */
typedef struct {
	char *p;
	size_t n, cap;
} CgStr;
void cg_str_addf(CgStr *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends sep (unless s is empty), then the formatted text. */
void cg_str_itemf(CgStr *s, const char *sep, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The text (in the arena; "" when empty); frees s's buffer. */
char *cg_str_done(Cg *c, CgStr *s);

/* An integer as text (in the arena). */
char *cg_num(Cg *c, int64_t v);

/* Dtype names in generated code. */
const char *cg_ctype(DType t);    /* storage: "float", "sg_bf16" */
const char *cg_regtype(DType t);  /* register: "float", "double", "sg_i64" */
const char *cg_dtname(DType t);   /* suffix of sg_to_/sg_st_: "bf16" */
const char *cg_sgrt_dtype(DType t); /* "SGRT_BF16" */

/* ------------------------------------------------------------------ codegen_host.c */

/* One alias class of values as the backend emits it: the fusion pass's
 * storage class (StoreClass, sgc.h: kind, mutation, release points; an
 * ST_TEMP not in the plan's arena, none today, is cudaMallocAsync'd at its
 * definition and freed after its last use) with the backend's numbering. */
typedef struct {
	ValId root;
	uint8_t kind;         /* ST_* */
	uint8_t mutated;      /* written by an in-place op or collective */
	uint8_t dealloc;      /* released by a sync_dealloc node */
	uint8_t planned;      /* ST_TEMP placed in the arena by the memory plan */
	int slot;             /* io index (ST_INPUT/OUTPUT/PARAM) */
	int hostbuf;          /* ST_HOST: index of the model's pinned buffer */
	NodeId release;       /* last node naming the class */
	uint32_t streams;     /* bit s: stream s uses the class (s < 32) */
	const NodeId *last_on;/* [nstreams]: last node on each stream naming it */
	int *free_event;      /* [nstreams]: model free-event index, or -1 */
} CgClass;

/* A tensor of the call's interface (SgrtTensorDesc). */
typedef struct {
	const char *name;
	int role;             /* CG_ROLE_* (SgrtTensorDesc's roles) */
	ValId v;              /* its value; for optimizer state, the param's */
	Type type;
	int flags;            /* CG_TF_* */
} CgTensor;

enum { CG_ROLE_INPUT, CG_ROLE_PARAM, CG_ROLE_CONST, CG_ROLE_STATE, CG_ROLE_OUTPUT };
enum { CG_TF_MUTATED = 1, CG_TF_HOST = 2 };

struct CgGraph {
	Cg *c;
	Graph *g;
	const char *name;     /* C identifier of the graph */
	char **vname;         /* per value: C variable ("v_h") */
	const Sched *s;       /* the passes' decisions (g->sched) */
	const ValId *root;    /* per value: its class's first value */
	CgClass **cls;        /* per value: its class (shared by the class) */
	const int *group;     /* per node: fused group id, -1: alone */
	const uint8_t *ingroup_only; /* per value: no memory (Sched.reg) */
	uint8_t *named;       /* per value: the host code names it (2: only sets it) */
	const int *epilogue;  /* per node: the group fused after its result
	                         (CgGroup.after), or -1 */
	const int *prologue;  /* per node: the group fused into its operand 0,
	                         or -1 */
	const FuseGroups *groups; /* the pointwise groups (none at -O0) */
	VEC(CgTensor) tensors;
	VEC(ValId) ret_copies;/* per return index: value copied at the end
	                         (NONE when written in place) */
	int *ret_slot;        /* per return index: io slot */
	int nhost;            /* pinned host buffers */
	VEC(ValId) hostvals;  /* value of each pinned host buffer */
	int nfree_events;     /* events for cross-stream frees */
	ValId *rel;           /* release_after's classes: node i's are */
	uint32_t *rel_at;     /* rel[rel_at[i] .. rel_at[i + 1]) */
	int nlocal_events;    /* local (not extern) events */
	int *event_index;     /* per graph event: local index or extern index */
	int *optslot;         /* per node: an optimizer update's first state
	                         slot (sgd: momentum_buffer; adamw: exp_avg,
	                         exp_avg_sq, step), -1 otherwise */
	int *scratch;         /* per node: its model scratch buffer, or -1 */
	VEC(int64_t) scratch_bytes; /* model-owned device scratch buffers */
	int rng_slot;         /* the random ops' generator state opt.rng (i64
	                         [2]: seed, offset), or -1: the graph draws
	                         nothing */
	int has_collectives;
	int world;
	int lastline;         /* the return statement's line */
	Map kernames;         /* kernel names in use */
	uint32_t *pw_reg;     /* per value: 1 + its register number in the
	                         pointwise kernel being built, 0: none */
	const KernelFold *fold; /* -O2: views read by products, epilogues,
	                         attention layouts (kernels.c), or NULL */
	CgAttnKept *kept;     /* per paired attention forward: what it keeps for
	                         its backward (set when emitted) */
	const MemPlan *plan;  /* the static memory plan (memplan.c), or NULL */
	FILE *body;           /* the call's statements, while written */
	char *bodytext;       /* then their text (malloc'd) */
	size_t bodylen;
};

/* Builds the analysis of graph g (names, io slots) over what the passes
 * decided (g->sched); 0 after reporting an error. */
int cg_graph_analyse(CgGraph *G, Cg *c, Graph *g);
/* The group fused as a consumer after node i (CgGroup.after), or -1. */
int cg_epilogue(CgGraph *G, NodeId i);
/* Emits the host body of one call (into G->body) and the kernels. */
int cg_graph_body(CgGraph *G);
void cg_graph_free(CgGraph *G);
/* The storage pointer type of value v ("float *"). */
const char *cg_ptr(CgGraph *G, ValId v);
/* The stream a node runs on, as an integer literal. */
int cg_stream(const Node *n);
/* A new kernel name from parts, unique within the graph. */
const char *cg_kernel_name(CgGraph *G, const Node *n, const char *what);

/* ------------------------------------------------------------------ codegen_kernels.c */


/* Emits the kernel of a pointwise group and its launch into G->body. */
void cg_pointwise(CgGraph *G, const CgGroup *grp);
/* How a kernel reads operand 0 of node n: its parameter list, the launch's
 * arguments, and a printf format turning an element offset (%s) into the
 * element's register: "sg_ld(x[%s])", or the element function of a
 * pointwise group fused into n (emitted here). */
typedef struct {
	char *params, *args, *fmt;
} CgInput;
CgInput cg_input(CgGraph *G, const Node *n);
/* The epilogue function of group grp fused after the op making r (emitted
 * here): its parameters, arguments and a format of the call taking the
 * element offset and r's register (two %s). */
void cg_ep_fn(CgGraph *G, const CgGroup *grp, ValId r, CgInput *ep);
/* The functor type computing group grp fused after the small product
 * making r (sgk_gemm_small's epilogue, emitted once per distinct
 * computation): given r's element (row, col) of a result ncols wide, it
 * stores what the group stores, and r itself when keep.  *args: the
 * values of its members, to initialise it with. */
const char *cg_gemm_epi(CgGraph *G, const CgGroup *grp, ValId r, int keep, int64_t ncols,
                        char **args);
/* The type of value v, and of operand k of node n. */
static inline const Type *
cg_vtype(CgGraph *G, ValId v)
{
	return &G->g->vals.v[v].type;
}

static inline const Type *
cg_otype(CgGraph *G, const Node *n, int k)
{
	return cg_vtype(G, n->opnd[k].v);
}
/* Emits the kernel(s) and launches of any other op; 0 when the backend
 * cannot compile it (after reporting). */
int cg_op(CgGraph *G, NodeId i);
/* An index expression: sum over dims of ((var / inner) % size) * stride,
 * where inner is the product of the sizes after the dim; dims of stride 0
 * drop out and adjacent contiguous dims merge. */
char *cg_index(Cg *c, const char *var, int rank, const int64_t *size,
               const int64_t *stride, int64_t base);
/* Launch geometry for a grid-stride loop over n elements. */
int64_t cg_grid(int64_t n, int block);
/* How a row kernel's threads split: tpr threads a row (a warp for short
 * or many rows, else a block), rows rows a block of `block` threads. */
typedef struct {
	int tpr, block, rows;
	int64_t grid;
} CgRows;
CgRows cg_rows(int64_t nout, int64_t len);
/* scaled_dot_product_attention (bwd 0) or its backward (bwd 1) through
 * the flash kernels of sgk_attention.cuh; 0, with nothing emitted, when
 * kernel_choice chose the fallback kernels (Sched.flash: the dtype or
 * shapes need them). */
int cg_flash_attention(CgGraph *G, const Node *n, int bwd);
/* The SIMT attention kernels' (kernels.cu sdpa, sdpa_bwd_*) sizes and the
 * template bindings they share, for q, k, v (and a mask) at operands
 * o..o+3 of n in dtype dt: comment t acc tile e ev l s qbase kbase vbase
 * opc inf causal scale mask mparam bias mbase group kbase0 vbase0 kvb,
 * and for dropout_p drop dparam salt thresh dscale, in b[0..CG_SDPA_NBIND).
 * With dropout_p the kernels take the generator state after the mask
 * (cg_sdpa_rng: that argument).  nb counts the query's batch (enable_gqa: the
 * heads split as shape_attn_bcast does, group the innermost dim). */
enum { CG_SDPA_NBIND = 28, CG_SDPA_TILE = 64 };
typedef struct {
	int64_t L, E, S, Ev, nb, group;
	CgBind b[CG_SDPA_NBIND];
} CgSdpa;
void cg_sdpa_simt(CgGraph *G, const Node *n, int o, DType dt, CgSdpa *s);
/* ", (const sgk_i64 *)io[slot]" for attention with dropout_p, else "". */
const char *cg_sdpa_rng(CgGraph *G, const Node *n);
/* Helpers the kernel emitters share (codegen_kernels.c). */
char *cg_comment(CgGraph *G, const Node *n);      /* "// f.sg:3: ..." */
void cg_launch(CgGraph *G, const Node *n, const char *kname, int64_t grid,
               int block, int64_t smem, const char *args);
/* One call of a kernel-library launcher (an sg_launch_* of runtime/sgk/)
 * on n's stream, checked and traced as `kname`. */
void cg_lib_call(CgGraph *G, const Node *n, const char *kname, const char *call);
/* A scratch buffer for node n on its stream: declared, allocated; its
 * variable's name.  cg_free_tmp releases it.  cg_alloc_tmp_expr: of the
 * bytes a C expression gives (a library's workspace function). */
char *cg_alloc_tmp(CgGraph *G, const Node *n, const char *type, int64_t bytes,
                   const char *what);
char *cg_alloc_tmp_expr(CgGraph *G, const Node *n, const char *type, const char *bytes,
                        const char *what);
void cg_free_tmp(CgGraph *G, const Node *n, const char *var);
char *cg_store(Cg *c, DType dt, const char *v);   /* sg_st_DT(sg_to_DT(v)) */
const char *cg_acc_type(DType dt);  /* float, or double for f64 */
const char *cg_acc_conv(DType dt);  /* sg_opf, or sg_opd for f64 */
/* The offset of row o of an [outer, len, inner] view (type_around). */
char *cg_row_base(Cg *c, int64_t outer, int64_t len, int64_t inner);
/* Broadcast batch dims (all but the last two) of nop operands: shape and
 * per-operand element strides (0 where broadcast); returns the rank. */
int cg_batch_bcast(const Type **ops, int nop, int64_t *shape,
                   int64_t st[][SG_MAXRANK]);
const char *cg_index_type(int64_t n);             /* "int" or "sg_i64" */
/* A strided copy kernel: dst[dstidx(i)] = src[srcidx(i)] for i < count,
 * converted when the dtypes differ. */
void cg_copy_kernel(CgGraph *G, const Node *n, const char *what, const char *src,
                    DType sdt, const char *dst, DType ddt, int64_t count,
                    const char *srcidx, const char *dstidx);
/* dst = 0 (bytes of it) on n's stream. */
void cg_zero(CgGraph *G, const Node *n, const char *var, int64_t bytes);

/* ------------------------------------------------------------------ codegen_rows.c */

/* Reductions (sum, mean, amax, amin, var, var_mean), softmax and
 * log_softmax, layer_norm and rms_norm, cross_entropy, mse_loss. */
int cg_reduce(CgGraph *G, const Node *n);
int cg_softmax(CgGraph *G, const Node *n);
int cg_norm(CgGraph *G, const Node *n);
int cg_cross_entropy(CgGraph *G, const Node *n);
int cg_mse_loss(CgGraph *G, const Node *n);
/* cross_entropy_backward and layer_norm_backward/rms_norm_backward through
 * the kernel library (sgk_rows.cuh); 0, with nothing emitted, when the
 * dtype or layout needs the kernels of codegen_grad.c. */
int cg_rows_ce_backward(CgGraph *G, const Node *n);
int cg_rows_norm_backward(CgGraph *G, const Node *n);
/* Includes a kernel-library header (runtime/sgk/) in the file, once. */
void cg_use_library(CgGraph *G, const char *file);
/* Strides with which an operand of type t is read at each index of the
 * broadcast shape s (0 along broadcast dims). */
void cg_bcast_strides(const Type *t, const Type *s, int64_t *bst);

/* ------------------------------------------------------------------ codegen_gemm.c */

/* matmul and linear through cuBLASLt. */
int cg_matmul(CgGraph *G, const Node *n);
int cg_linear(CgGraph *G, const Node *n);
/* The statements of node i when folding changed them (nothing for a
 * folded view or a product run later; the product for its activation);
 * -1 when it did not. */
int cg_gemm_stmt(CgGraph *G, NodeId i);
/* The variable holding value v's bytes: v's, a folded view's source's,
 * or the value an attention result is written into through folded views
 * (G->fold). */
const char *cg_fold_var(CgGraph *G, ValId v);
/* The view node whose result an attention kernel writes in place of
 * result v of another node (bound with that node's results), or NONE. */
NodeId cg_fold_out(CgGraph *G, ValId v);
/* 1 when node i is a view whose result an attention kernel writes. */
int cg_fold_written(CgGraph *G, NodeId i);
/* For a product i with the DGELU epilogue, its gelu_backward (whose
 * result it writes); NONE otherwise.  cg_fold_by_product: 1 for that
 * gelu_backward. */
NodeId cg_fold_dgelu(CgGraph *G, NodeId i);
int cg_fold_by_product(CgGraph *G, NodeId i);
/* For an attention forward i, the backward that reads its o and
 * log-sum-exp instead of computing them again; for that backward, the
 * forward; NONE otherwise. */
NodeId cg_fold_pair(CgGraph *G, NodeId i);
/* What paired forward i keeps for its backward (set by the forward). */
CgAttnKept *cg_fold_kept(CgGraph *G, NodeId i);

/* ------------------------------------------------------------------ codegen_coll.c */

/* The collectives through NCCL (libsgrt). */
int cg_collective(CgGraph *G, const Node *n);
/* The model creation's sgrt_symm_reserve of each stream's largest
 * oneshot/ce collective (into f, at .sg line `line`). */
void cg_coll_reserve(CgGraph *G, FILE *f, int line);

/* ------------------------------------------------------------------ codegen_grad.c */

/* The backward ops autograd makes and the optimizer updates: 1 when node
 * i is one (and was emitted), 0 otherwise. */
int cg_grad_op(CgGraph *G, NodeId i);

/* ------------------------------------------------------------------ codegen_api.c */

/* Emits the model struct, creation, destruction, load/save, the call, the
 * C API and the header declarations of one analysed graph. */
void cg_graph_api(CgGraph *G);
/* The driver main() for the file (the graph chosen by --graph or the
 * first). */
void cg_main(Cg *c, CgGraph *G);

/* codegen_conv.c: conv2d, the 2-D pools, batch_norm and their backward
 * ops (ops.def's emitter CONV); 0 for other ops. */
int cg_conv(CgGraph *G, const Node *n);

#endif
