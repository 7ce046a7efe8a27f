/*
 * passes.h - the middle end's interface: the pipeline and its options,
 * the verifier, the happens-before clocks and the race check, each pass,
 * autograd's builder and rules, and the records of what the passes decide
 * for the backend (schedule.c).  Stage `passes` (compiler/README.md):
 * reads the IR (sgc.h) only.
 */
#ifndef PASSES_H
#define PASSES_H

#include "sgc.h"


/* ------------------------------------------------------------------ verify.c */

/* Checks IR invariants; an invariant broken is an internal fault (ICE)
 * naming the pass that broke it. */
void verify_graph(Graph *g, const char *after_pass);

/* ------------------------------------------------------------------ passes.c */

typedef struct {
	int allow_races;
	int opt_level;
	const char *dump_after; /* NULL, a pass name, or "all" */
	int test_drop_sync;     /* tests only: drop the N-th compiler-made sync
	                           (control_deps pass) and skip the race checks */
	int offload;            /* --offload: OFFLOAD_MARKED (0), _NONE, _AUTO */
	uint64_t offload_budget;/* --offload-budget: device bytes for auto */
	uint64_t bucket_bytes;  /* --bucket-bytes: grad_sync buckets; 0: 25 MiB */
	int no_remat;           /* --no-remat: keep every activation (remat.c) */
	uint64_t remat_budget;  /* --remat-budget: device bytes remat may fill; 0: none */
	int sm;                 /* --arch's compute capability (sm_90: 90); 0: 90 */
} PassOptions;

/* A pass returns 0 when a diagnostic error stops the pipeline, PASS_SAME
 * when it left the graph as it was (reads only, or found nothing to do:
 * the checks after it are skipped, as they passed on this graph already),
 * else 1. */
enum { PASS_SAME = 2 };
/* Runs the pipeline (a straight list, verifier after each) over every
 * graph.  Returns 0 when a diagnostic error stopped it. */
int passes_run(Module *m, const PassOptions *po);
int passes_known(const char *name);
void passes_list(FILE *f); /* the pass names, for --help and errors */
/* 1 when --dump-after names pass (or is "all"). */
int passes_dumps(const PassOptions *po, const char *pass);

/* ------------------------------------------------------------------ races.c
 * Happens-before over streams and events, and the race verifier (rule 2).
 * Positions: node i is at position i + 1; position 0 is the call start on
 * `default` (where inputs, params and consts are ready).  A clock holds,
 * per stream, the last position on it known complete (-1: none).  The
 * other stream passes (syncs.c, ctrldeps.c, dealloc.c, memplan.c,
 * functionalize.c) share these clocks.
 */

typedef struct {
	const Graph *g;
	uint32_t ns, ne, nn;
	int32_t *cur;       /* ns x ns: each stream's clock now */
	int32_t *ev;        /* ne x ns: each event's clock at its last record */
	uint8_t *recorded;  /* per event: recorded earlier in this call */
	int32_t *init;      /* ns x ns: each stream's clock at the call start */
	int32_t *after;     /* nn x ns: node i's stream clock just after i */
	NodeId *prevon;     /* per node: the previous live node on its stream */
	NodeId *laston;     /* per stream: the last node stepped on it */
	int no_dealloc;     /* take sync_dealloc for no sync (control_deps:
	                       only the program's syncs carry dependencies) */
} Hb;

void hb_init(Hb *h, const Graph *g);
void hb_free(Hb *h);
/* Applies node i (nodes are stepped in program order). */
void hb_step(Hb *h, NodeId i);
/* dst = max(dst, src) entrywise over h->ns streams. */
void hb_join(const Hb *h, int32_t *dst, const int32_t *src);
int32_t *hb_clock(Hb *h, uint32_t stream);      /* stream's clock now */
/* The clock of node i's stream just before i (after a full walk). */
const int32_t *hb_before(const Hb *h, NodeId i);
#define HB_DONE(clock, stream, pos) ((clock)[(stream)] >= (int32_t)(pos))

/* One unordered pair of accesses found by races_walk. */
enum {
	RACE_RAW,        /* read or in-place write, the last write not
	                    ordered before it */
	RACE_WAR,        /* in-place write, an earlier read not ordered */
	RACE_FREE,       /* sync_dealloc or del, an access not ordered */
	RACE_AFTER_FREE, /* an access after sync_dealloc or del */
	RACE_RET,        /* a returned value not ordered before the end */
	RACE_JOIN,       /* a stream not joined into default at the end */
};
typedef struct {
	uint8_t kind;
	uint8_t pdef;     /* the earlier access is the value's definition */
	uint32_t k;       /* operand of the node; NONE at the end */
	ValId v;          /* the value accessed (for RACE_JOIN: NONE) */
	NodeId prev;      /* the earlier access; NONE: the call start */
	uint32_t pstream; /* its stream */
	uint8_t view;     /* RACE_RAW: v is a view read after an in-place write
	                     through another alias of its memory */
} Race;
/* Called with the races found at node i (nodes.n: the end of the call),
 * before i is stepped; it may join clocks (a sync it will insert). */
typedef void (*RaceFn)(void *ctx, Hb *h, NodeId i, Race *r, uint32_t nr);
enum { WALK_FREES = 1, WALK_END = 2 };
void races_walk(Graph *g, unsigned what, RaceFn fn, void *ctx);

/* Pass `races`: reports races at user nodes (errors, or warnings with
 * --allow-races); a race at a compiler-made node is an internal error. */
int races_pass(Graph *g, const PassOptions *po, Diag *d);
/* The verifier re-run after each later pass: returns 0 after reporting
 * a race at a user node (none with --allow-races).  ctrl_done: the
 * control_deps pass ran, so no bare sync may have values crossing it. */
int races_recheck(Graph *g, const PassOptions *po, Diag *d, const char *after,
                  int ctrl_done);
/* The races of the user's in-place ops, checked before functionalize
 * rewrites them: write-after-read and write-after-write, and a view read
 * after a write through another alias of its memory; vpar[v] is the value
 * v views (NONE: not a view), so that views share their memory's accesses.
 * Returns 0 on error. */
int races_check_writes(Graph *g, const ValId *vpar, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ attention.c */

/* Pass `attention` (at -O2): matmul, scale, mask, softmax, matmul written
 * out becomes scaled_dot_product_attention (before autograd). */
int attention_pass(Graph *g, const PassOptions *po, Diag *d);

/* pad.c: pass `pad_products` (-O2): a product whose result rows are
 * misaligned for cuBLASLt (N columns, N no multiple of 16 bytes) computes
 * N + P columns of a zero-padded weight, its result their first N. */
int pad_products_pass(Graph *g, const PassOptions *po, Diag *d);

/* fold_ops.c: pass `fold_ops` (-O2): the tanh GELU (Hugging Face's
 * gelu_new) and RMS norm (LlamaRMSNorm) written out by hand become
 * gelu(approximate="tanh") and rms_norm. */
int fold_ops_pass(Graph *g, const PassOptions *po, Diag *d);

/* dce.c: pass `dead_code` (-O2): statements whose results nothing reads
 * (and whose ops change nothing else) removed. */
int dce_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ syncs.c */

/* Pass `backward_syncs` (rule 3): a compiler-made node that reads (or
 * writes in place) a value whose last access on another stream is not
 * ordered before it gets record_event after that access and wait_event
 * before itself: one fresh event per producer and consuming stream. */
int syncs_pass(Graph *g, const PassOptions *po, Diag *d);
/* Pass `join_streams` (rule 0): wait_stream of every stream with unjoined
 * work into default at the end of the call, and into the backward
 * statement's stream at the end of a derived backward block. */
int syncs_join_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ ctrldeps.c */

/* Pass `control_deps` (rule 5): each bare sync op that values cross (made
 * before it, used after it across streams) becomes a control_deps node
 * passing them through; later uses read the aliases. */
int ctrldeps_pass(Graph *g, const PassOptions *po, Diag *d);
/* The verifier's half: a bare sync op that values cross means a pass
 * moved work across it (an internal error naming `after`). */
void ctrldeps_check(Graph *g, const char *after);

/* ------------------------------------------------------------------ fusion.c */

/* Fusion legality (rule 6): nodes fuse only within one region, a run of
 * one stream between two sync ops.  region[i] is NONE for nodes that are
 * no kernel (sync ops, del, offload, backward markers). */
typedef struct {
	uint32_t *region; /* per node */
	uint32_t nregions;
} FusionInfo;
void fusion_analyse(const Graph *g, FusionInfo *fi);
void fusion_free(FusionInfo *fi);
int fusion_legal(const Graph *g, NodeId a, NodeId b);
int fusion_pass(Graph *g, const PassOptions *po, Diag *d);
/* 1 when node n is computed by a pointwise kernel (a group's member). */
int fusion_pointwise(const Graph *g, const Node *n);

/* ------------------------------------------------------------------ memplan.c */

/* The static memory plan (rule 7): one buffer per storage class, placed in
 * the device arena (or the pinned host arena); a buffer reuses memory of an
 * earlier one only when every access of that one happens before it is
 * written.  Returned values are separate outputs; inputs, params and
 * consts belong to the caller and the model. */
enum { MEM_DEVICE, MEM_HOST, MEM_OUTPUT };
typedef struct {
	ValId v;          /* the class's first value */
	uint8_t where;    /* MEM_* */
	uint32_t stream;  /* allocating stream */
	NodeId alloc;     /* the node writing it first */
	NodeId last;      /* its last access */
	NodeId release;   /* its sync_dealloc, else its last access */
	uint64_t size, offset;
	uint32_t inplace; /* the buffer whose bytes it takes at its producer,
	                     an elementwise kernel reading that buffer for the
	                     last time at the element it writes; NONE: none */
} MemBuf;
typedef struct {
	MemBuf *buf;
	uint32_t nbuf;
	uint32_t *bufof;  /* per value: index into buf, NONE when none */
	uint64_t peak, host_peak, outputs, unshared;
	int opt_level;
} MemPlan;
void memplan_build(Graph *g, int opt_level, MemPlan *mp);
/* Bytes of a buffer of type t in the arena, rounded up to its alignment. */
uint64_t memplan_buf_size(const Type *t);
/* memplan_build with def[v] as value v's defining node (NONE: no buffer)
 * instead of its Value's (sched_kernel_graph), and ew[i] set for the nodes
 * that are elementwise kernels (each result element computed from the
 * operand elements of the same shape at its own index only: a result may
 * take such an operand's bytes where the operand dies; ew NULL: none). */
void memplan_build_at(Graph *g, const NodeId *def, const uint8_t *ew, int opt_level,
                      MemPlan *mp);
void memplan_free(MemPlan *mp);
/* The device peak of the plan the memplan pass would make now (the
 * schedule's groups and kernel choices as they stand). */
uint64_t memplan_sched_peak(Graph *g, int opt_level);
/* The independent checker: explicit happens-before reachability; returns
 * 0 (with a reason in why[256]) if two buffers that may be live at once
 * share memory; -1 when the graph is too large to check (more than
 * MEMPLAN_VERIFY_MAX nodes: its cost is quadratic). */
enum { MEMPLAN_VERIFY_MAX = 20000 };
int memplan_verify(Graph *g, const MemPlan *mp, char *why);
void memplan_report(FILE *f, Graph *g, const MemPlan *mp);
/* `sgc check --memory`: the plan of each graph (or only_graph), checked
 * (an internal error if the checker finds an overlap). */
void memplan_report_module(FILE *f, Module *m, const char *only_graph,
                           int opt_level);
int memplan_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ schedule.c
 * What the passes fusion, kernel_choice and memplan decide for the backend,
 * stored on the graph (g->sched, freed with it): codegen emits what these
 * records say and decides nothing of it.
 *
 *   storage   (fusion)         alias classes and where each lives
 *   groups    (fusion)         pointwise nodes fused into one kernel, the
 *                              values kept in registers
 *   fold      (kernel_choice)  views read through a product's or attention
 *                              kernel's layout, activations run as
 *                              cuBLASLt epilogues, attention pairs
 *   plan      (memplan)        offsets over the program as its kernels run
 *                              it (sched_kernel_graph)
 */

/* Where an alias class's memory comes from. */
enum {
	ST_INPUT,  /* the caller's input buffer */
	ST_OUTPUT, /* the caller's output buffer (a returned value) */
	ST_PARAM,  /* model-owned device buffer (param, const) */
	ST_HOST,   /* model-owned pinned host buffer (to_host results) */
	ST_TEMP,   /* a temporary: the device arena at the plan's offset */
};

/* One alias class of values (control_deps results join their operand's). */
typedef struct {
	ValId root;
	uint8_t kind;         /* ST_* */
	uint8_t mutated;      /* written by an in-place op or collective */
	uint8_t dealloc;      /* released by a sync_dealloc node */
	NodeId release;       /* last node naming the class (or reading it
	                         through a folded view) */
	uint32_t streams;     /* bit s: stream s uses the class (s < 32) */
	NodeId *last_on;      /* [nstreams]: last node on each stream naming it */
} StoreClass;

/* A set of pointwise nodes fused into one kernel; at most SCHED_GROUP_MAX,
 * so that a kernel's size is bounded (a longer chain becomes several). */
enum { SCHED_GROUP_MAX = 64 };
typedef struct {
	NodeId *nodes;
	uint32_t n;
	int vec;              /* elements per thread for vectorised loads, 1: none */
	int spread;           /* 1: its own kernel's grid is a thread for each
	                         vector (memory bound); 0: at most 4096 blocks
	                         walking the elements (fusion.c spread_grid),
	                         or no kernel of its own (into, after) */
	NodeId into;          /* the node whose input it computes in place
	                         (a fused producer, a prologue), or NONE */
	NodeId after;         /* the reduction or row op whose result it takes,
	                         computed where that kernel stores it (a fused
	                         consumer, an epilogue), or NONE */
} FuseGroup;
typedef VEC(FuseGroup) FuseGroups;

/* Autograd's softmax/log_softmax backward (f32), found at -O2 as a sum node
 * with its fused producer and consumer: dx from g and y (the forward's
 * output); one library kernel computes it. */
typedef struct {
	ValId g, y, dx;
	int log;
} SoftmaxBwd;

/* A product's cuBLASLt epilogue (KernelFold.epi; runtime/sgrt.h's
 * SGRT_EPI_* by number up to KEPI_DGELU): relu, gelu (tanh), gelu
 * writing the product's own result too (the pre-activation, which other
 * nodes read), the tanh gelu_backward of the product at a
 * pre-activation; the add of a residual, cuBLASLt's C with beta 1
 * (SgrtGemm.c_in), and the add of a bias (SgrtGemm.bias). */
enum { KEPI_NONE, KEPI_RELU, KEPI_GELU, KEPI_GELU_AUX, KEPI_DGELU, KEPI_ADD, KEPI_BIAS };

/* kernel_choice's decisions (-O2). */
typedef struct {
	ValId *src;       /* per value: a folded view's source, or NONE */
	uint8_t *trans;   /* per value: the view swaps src's last two dims (1),
	                     is read by attention through strides (2) or is a
	                     part of a chunk or split, a slice of src (3) */
	NodeId *last;     /* per value: the last product reading a folded view */
	uint8_t *view;    /* per node: a folded view, or a chunk or split of
	                     folded slices (no buffer, no kernel) */
	NodeId *act;      /* per node: the activation (or add) a product
	                     runs as its epilogue, or NONE */
	NodeId *prod;     /* per node: the product an activation is the
	                     epilogue of, or NONE */
	uint8_t *epi;     /* per product with act: its epilogue, KEPI_* */
	ValId *out;       /* per value: an attention result (or a view of
	                     one) written through the view making out[v] (or
	                     into its slice of out[v], the cat it is part of),
	                     or NONE */
	uint8_t *outview; /* per node: such a view or cat (no kernel) */
	NodeId *pair;     /* per node: the attention backward that reuses
	                     this forward's o and log-sum-exp, and back; NONE */
	NodeId *bn_act;   /* per batch_norm: the relu its kernel applies as it
	                     stores, writing the relu's result; per such relu
	                     (and the add between): the batch_norm; NONE */
	NodeId *bn_add;   /* per batch_norm with bn_act: the add of a residual
	                     (its other operand) before the relu, or NONE */
	NodeId *pool_relu;/* per max_pool2d_backward: the where of the relu's
	                     backward its kernel computes (the mask in its
	                     argmax pass), writing the where's result; per
	                     such where and its le: the pool's backward; NONE */
	NodeId *bn_rm;    /* per training batch_norm: the add of the running
	                     mean's update (functionalize's mul, mul, add,
	                     stored into the running mean) its kernel computes
	                     as it finishes the statistics; per node of that
	                     update: the batch_norm; NONE */
	NodeId *bn_rv;    /* the same for the running variance */
	NodeId *bn_sgdw;  /* per batch_norm_backward: the sgd_update_ of its
	                     weight's gradient that its kernel makes as it
	                     finishes the sums (the gradient no memory); per
	                     such update: the batch_norm_backward; NONE */
	NodeId *bn_sgdb;  /* the same for its bias's gradient */
	NodeId *norm_add; /* per layer_norm or rms_norm of the library: the add
	                     right before it making its input, which its kernel
	                     computes as it loads its rows, storing the sum too;
	                     per such add: the norm; NONE */
	NodeId *upd;      /* per product: the later sgd_update_ of its result
	                     that it computes, run at the update's place as an
	                     accumulation into the param (cuBLASLt's beta 1,
	                     alpha -lr), its result no memory; per such update:
	                     the product; NONE */
} KernelFold;

typedef struct Sched {
	Arena *a;             /* the module's arena: every array below */
	int opt_level;
	int clusters;         /* the target has thread block clusters (sm_90 and
	                         later): sgk_gemm_small may take small products */
	/* storage */
	ValId *root;          /* per value: its class's first value */
	StoreClass **cls;     /* per value: its class (shared by the class) */
	/* fusion */
	FuseGroups groups;
	int *group;           /* per node: its group, -1: none */
	int *prologue;        /* per node: the group fused into its operand 0, or -1 */
	int *epilogue;        /* per node: the group fused after its result, or -1 */
	uint8_t *reg;         /* per value: no memory (a register of its group,
	                         a folded view, a product's pre-activation) */
	SoftmaxBwd **softmax_bwd; /* per node: a sum that is autograd's softmax
	                         backward with its groups, one library kernel;
	                         NULL otherwise */
	/* kernel_choice */
	uint8_t *flash;       /* per node: an attention node the flash kernels
	                         take (else the fallback kernels) */
	uint8_t *rows_lib;    /* per node: a row op (softmax, log_softmax, a
	                         norm, cross_entropy, their backward) the kernel
	                         library's row kernels take (else generated ones) */
	uint8_t *gemm_split;  /* per node: a small f32 matmul that the library's
	                         sgk_gemm_small computes with its fused group as
	                         epilogue (kernel_small_product): its split of K
	                         (1, 2, 4, 8, 16); 0: cuBLASLt (and no epilogue group) */
	NodeId *bn_stats;     /* per node: a training batch_norm's var_mean of
	                         the same x (layout_bn_stats) that its kernel
	                         computes, and for that var_mean the batch_norm
	                         (it emits nothing); NONE otherwise */
	KernelFold *fold;     /* NULL below -O2 */
	/* memplan */
	MemPlan plan;
	int planned;          /* plan was built */
	int unchecked;        /* --test-drop-sync dropped a sync on purpose:
	                         the verifier does not check the plan's reuse */
} Sched;

/* The graph's schedule, made empty (storage classes found) when absent;
 * sched_free drops it (its arrays stay in the module's arena). */
Sched *sched_get(Graph *g, int opt_level);
void sched_free(Graph *g);
/* The program as its kernels run it, for the memory plan: a copy f of g's
 * nodes (arrays in arena a) in which each fused group is one node at its
 * place, folded views and products' pre-activations have no buffer, a
 * product with an epilogue runs at its activation and attention kernels
 * write through their folded views.  f shares g's values (and, with
 * nothing fused or folded, its nodes: not to be written); the returned
 * array gives each value's defining node in f (NONE: no buffer), for
 * memplan_build_at. */
NodeId *sched_kernel_graph(const Graph *g, const Sched *s, Arena *a, Graph *f);
/* The value whose memory a product or attention kernel reads for operand
 * value v (through folded views); the value holding v's bytes when it is
 * written through views. */
ValId sched_operand_root(const Sched *s, ValId v);
/* The value whose memory holds v's bytes: v's source through folded
 * views keeping the bytes (reshape, squeeze, unsqueeze; trans 0), else
 * v. */
ValId sched_bytes_root(const KernelFold *F, ValId v);
/* The operand of add node a that is not a product's result p_res: the
 * residual or bias an epilogue adds. */
const Opnd *sched_add_other(const Node *a, ValId p_res);
/* The residual or bias (the add's other operand) of product P whose
 * epilogue is that add (KEPI_ADD, KEPI_BIAS). */
ValId sched_add_operand(const Graph *g, const KernelFold *F, NodeId P);
ValId sched_out_end(const Sched *s, ValId v);
/* The element strides (st[rank of v]) of v's elements in the memory of
 * its folded source or written value, from element *off of it: row-major
 * from 0 unless v is a folded view or slice or written through one; 0
 * when they cannot be expressed as strides. */
int sched_fold_strides(const Graph *g, const KernelFold *F, ValId v, int64_t *st,
                       int64_t *off);
/* The verifier's part (verify.c): groups on one stream and one fusion
 * region in program order, links consistent, the plan's buffers sharing
 * bytes never live together (an internal error naming `after`). */
void sched_verify(Graph *g, const char *after);
/* --dump-after: g with each node's decisions as a trailing comment. */
void sched_print(FILE *f, Graph *g);

/* kernels.c: the kernel choice. */
int kernel_choice_pass(Graph *g, const PassOptions *po, Diag *d);
/* 1 when b = gelu_backward(p's result, f, approximate="tanh") can be the
 * DGELU epilogue of product p as far as the two nodes go (no bias, one
 * matrix, a dtype cuBLASLt takes); kernel_choice checks the rest. */
int kernel_dgelu_pair(const Graph *g, const Node *p, const Node *b);
/* 1 when matmul p is a small f32 product that the kernel library's
 * sgk_gemm_small computes with the pointwise ops after it in its epilogue
 * (one launch where cuBLASLt's product and a kernel take two): f32
 * operands and result, b a matrix read as stored (no transpose or
 * permute making either operand), at most 64 tiles of 32 x 64 outputs
 * (a's rows flattened), 1 <= K <= 2048 and tiles x K at most 32768 (where
 * it was measured as fast as cuBLASLt).  fusion.c makes the group after
 * it an epilogue; kernel_choice records the split (kernel_small_split). */
int kernel_small_product(const Graph *g, const Node *p);
/* A matmul's rows (a's rows flattened), columns and sum length as
 * sgk_gemm_small computes it; 0 when p is no matmul of a matrix b. */
int kernel_small_dims(const Graph *g, const Node *p, int64_t *m, int64_t *n, int64_t *k);
/* The split of K over a cluster for small product p: the library's own
 * rule, sg_gemm_small_split (runtime/sgk/sgk_gemm_small.h). */
int kernel_small_split(const Graph *g, const Node *p);
/* The batch items of t (the product of all but its last two dims); the
 * broadcast batch of a matmul of a and b: its rank, item count and each
 * operand's element strides (0 where broadcast). */
int64_t kernel_batch_numel(const Type *t);
/* The broadcast batch dims (all but the last two) of nop <= 4 types: the
 * shape and each one's element strides (0 where broadcast); the rank. */
int kernel_batch_bcast(const Type **ops, int nop, int64_t *shape,
                       int64_t st[][SG_MAXRANK]);
int64_t kernel_matmul_batch(const Type *a, const Type *b, int *brank, int64_t *bshape,
                            int64_t st[][SG_MAXRANK]);
/* One tensor of a flash attention call as the kernels read or write it:
 * its type, its value (NONE: a contiguous temporary), its element strides
 * in the memory holding it (sched_fold_strides), the kernels' batch
 * strides and row stride. */
typedef struct {
	const Type *t;
	ValId v;
	const char *nm;
	int64_t st[SG_MAXRANK];
	int64_t off;          /* its first element in that memory */
	int64_t s[2], sr;
} FlashT;
/* A flash call: the batch [nb0, nb1], the sizes and its tensors (q, k, v,
 * o, then for the backward dout, dq, dk, dv). */
typedef struct {
	int64_t nb[2], L, S, E, Ev;
	int64_t group;        /* enable_gqa: query heads a key head serves (1: none) */
	int nt;
	FlashT t[8];
	Type ot;              /* the backward's o: a contiguous temporary */
} Flash;
/* The flash call of attention node n (bwd: its backward) with the layouts
 * of F (NULL: none folded), checked: 0 when the dtype, shapes or layouts
 * need the fallback kernels. */
int kernel_flash(const Graph *g, const KernelFold *F, const Node *n, int bwd, Flash *f);

/* ------------------------------------------------------------------ dealloc.c */

/* Pass `sync_dealloc` (rule 8): a value some access of which, on another
 * stream than its allocation, is not ordered before the point where its
 * allocating stream is done with it (its `del`, else its last access)
 * gets record_event after that access and sync_dealloc there. */
int dealloc_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ offload.c, bucket.c
 * Activation offloading and gradient buckets (docs/offload.md), placed
 * with an estimate of time per node (offload.c's cost model).
 */

enum { OFFLOAD_MARKED, OFFLOAD_NONE, OFFLOAD_AUTO };

/* Pass `offload`: `offload %v` (and --offload=auto) become to_host on a
 * copy stream after the producer, a `del` of the device copy where the
 * copy should be done, and a to_device before the first backward use that
 * backward then reads. */
int offload_pass(Graph *g, const PassOptions *po, Diag *d);
/* ------------------------------------------------------------------ layout.c
 * Pass `layout` (-O2): f16/bf16 convolution chains channels last (see
 * layout.c).  layout_role says which operands and results of node i a
 * layout-aware node reads and writes in its own layout (0: not
 * layout-aware); layout_bn_stats the var_mean a training batch_norm at
 * node b computes in its kernel (NONE: none). */
typedef struct {
	uint32_t act_ops;  /* bit k: operand k, an activation */
	int act_res;       /* result 0 an activation */
	int w_op, w_res;   /* a conv weight operand / result (-1: none) */
	int conv;          /* conv2d or its backward ops */
} LayoutRole;
int layout_pass(Graph *g, const PassOptions *po, Diag *d);
int layout_role(const Graph *g, NodeId i, LayoutRole *r);
NodeId layout_bn_stats(const Graph *g, NodeId b);

/* Pass `grad_buckets`: grad_sync's all_reduces gathered into buckets of
 * --bucket-bytes, each reduced as one collective; updates wait for their
 * own bucket only. */
int buckets_pass(Graph *g, const PassOptions *po, Diag *d);
/* Estimated seconds: a node's compute on its stream, a host transfer of
 * bytes, an all_reduce of bytes over WORLD ranks. */
double offload_node_seconds(const Graph *g, const Node *n);
double offload_copy_seconds(uint64_t bytes);
double offload_collective_seconds(const Graph *g, uint64_t bytes);
/* t[i]: the estimated start of node i in program order, t[nodes.n] the
 * end (malloc'd). */
double *offload_timeline(const Graph *g);

/* ------------------------------------------------------------------ remat.c */

/* Pass `remat`: pointwise activations recomputed in backward from what
 * forward keeps anyway, where that lowers the peak (-O2). */
int remat_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ functionalize.c */

/* Pass `functionalize` (rule 9): in-place ops become out-of-place ops with
 * fresh values; later uses are renamed; a mutated input, param, const or
 * returned value is written back with copy_ before any later extern
 * record_event on the mutating stream, else at the end. */
int functionalize_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ autograd.c, optim.c, grad_*.c
 * Reverse-mode differentiation (the `autograd` pass, docs/autograd.md).
 * A derivative rule (ops.def's `grad` column, grad_rules.c) is given the
 * forward node and the gradients of its results (NONE: no gradient) and
 * sets gin[k] for each operand k with need[k], or leaves it NONE (no
 * contribution).  It builds IR from other ops with the builder below:
 * every node it makes runs on the forward node's stream, is typed by its
 * op's own shape rule and is flagged NF_BACKWARD.  gin[k] may have a
 * broadcast shape or another float dtype: the pass sums and casts it to
 * the operand's type.  A rule returns 0 after reporting an error.
 */
int autograd_run(Graph *g, const PassOptions *po, Diag *d);

Opnd grad_v(ValId v);       /* a value operand */
Opnd grad_lf(double f);     /* a float literal */
Opnd grad_li(int64_t i);    /* an integer literal */
/* Operand k of the forward node as the rule may use it: a literal as it
 * is, a value as it was when the node ran (grad_in). */
Opnd grad_arg(Grad *G, const Node *n, int k);
/* The value of forward operand k or result j as the node saw it (a
 * snapshot when an in-place op changed it before backward). */
ValId grad_in(Grad *G, int k);
ValId grad_out(Grad *G, int j);
/* Names the rule's next temporaries after operand k's value. */
void grad_target(Grad *G, const Node *n, int k);
Graph *grad_graph(Grad *G);
const Type *grad_type(Grad *G, ValId v);
/* An error at the forward node's statement; returns 0. */
int grad_error(Grad *G, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A node of op with operands ops and default attributes; set attributes,
 * then grad_end makes its nres results, types them and emits it. */
Node *grad_node(Grad *G, int op, const Opnd *ops, int nops);
void grad_set(Node *n, const char *name, int64_t i); /* int, bool, dtype */
void grad_setf(Node *n, const char *name, double f);
void grad_sets(Node *n, const char *name, const char *s);
void grad_setints(Grad *G, Node *n, const char *name, const int64_t *v, int nv);
void grad_copyattr(Node *n, const char *name, const Attr *src);
ValId grad_end(Grad *G, Node *n, uint32_t nres); /* the first result */
ValId grad_op1(Grad *G, int op, Opnd a);
ValId grad_op2(Grad *G, int op, Opnd a, Opnd b);
ValId grad_op3(Grad *G, int op, Opnd a, Opnd b, Opnd c);
ValId grad_sum(Grad *G, ValId x, uint32_t dims_mask, int keepdim);
ValId grad_reshape(Grad *G, ValId x, const int64_t *shape, int rank);
ValId grad_expand(Grad *G, ValId x, const Type *to);
ValId grad_transpose(Grad *G, ValId x, int d0, int d1);
ValId grad_zeros(Grad *G, const Type *t);
ValId grad_cast(Grad *G, ValId x, DType dt);
/* x summed over the dims broadcasting added to reach to's shape, and cast
 * to to's dtype. */
ValId grad_fit(Grad *G, ValId x, const Type *to);

/* optim.c: the update of param p from its gradient (sgd_update_ or
 * adamw_update_ with the graph's optimizer's settings), on stream s. */
void optim_update(Grad *G, ValId p, ValId grad, uint32_t s);

/* grad_rules.c: the derivative rules named in ops.def. */
#define GRAD_RULE(f) int f(Grad *G, const Node *n, const ValId *gout, \
                           ValId *gin, const uint8_t *need)
GRAD_RULE(grad_unary);
GRAD_RULE(grad_binary);
GRAD_RULE(grad_where);
GRAD_RULE(grad_clamp);
GRAD_RULE(grad_pass_through);
GRAD_RULE(grad_reduce);
GRAD_RULE(grad_softmax);
GRAD_RULE(grad_norm);
GRAD_RULE(grad_matmul);
GRAD_RULE(grad_linear);
GRAD_RULE(grad_sdpa);
GRAD_RULE(grad_reshape_rule);
GRAD_RULE(grad_transpose_rule);
GRAD_RULE(grad_permute);
GRAD_RULE(grad_slice);
GRAD_RULE(grad_cat);
GRAD_RULE(grad_split);
GRAD_RULE(grad_embedding);
GRAD_RULE(grad_gather);
GRAD_RULE(grad_loss);
GRAD_RULE(grad_memory);
GRAD_RULE(grad_inplace);
GRAD_RULE(grad_collective);
GRAD_RULE(grad_control_deps);
#undef GRAD_RULE

/* ------------------------------------------------------------------ grad_conv.c */

#define GRAD_RULE(f) int f(Grad *G, const Node *n, const ValId *gout, \
                           ValId *gin, const uint8_t *need)
GRAD_RULE(grad_conv2d);
GRAD_RULE(grad_pool2d);
GRAD_RULE(grad_batch_norm);
#undef GRAD_RULE

#endif /* PASSES_H */
