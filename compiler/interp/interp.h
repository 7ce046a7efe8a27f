/*
 * interp.h - the reference interpreter (`sgc run`): its options, tensors
 * and kernels.  Stage `interp` (compiler/README.md): reads the IR (sgc.h)
 * only.
 */
#ifndef INTERP_H
#define INTERP_H

#include "safetensors.h"
#include "sgc.h"

/* ------------------------------------------------------------------ interp.c, interp_*.c
 * The CPU reference interpreter (`sgc run`).  interp.c loads the files,
 * binds a tensor to every value, runs the nodes (in program order, or in a
 * random stream interleaving with --interleave) and writes the results;
 * interp_*.c hold the kernels named in ops.def and their helpers.
 */

typedef struct {
	const char *params, *out;           /* file paths or NULL */
	const char *inputs[SGRT_MAX_INPUT_FILES]; /* --inputs, in order given:
	                                             read together, the later
	                                             file's tensor winning */
	int ninputs;
	int steps;                          /* default 1 */
	uint64_t seed;                      /* default 0 */
	int interleave;                     /* --interleave=SEED given */
	uint64_t interleave_seed;
	int seed_inputs;    /* fuzzing: inputs missing from --inputs are
	                       initialised from --seed as params are */
	FILE *print;        /* returned values without --out: NULL, stdout */
	int allow_extra;    /* --allow-extra: ignore tensors of the files that
	                       match no name */
} RunOptions;
/* Runs graph g (checked, after all passes) on the CPU; returns the exit
 * status (0 ok, 1 mismatch between files and the graph, 3 I/O error),
 * having reported errors on stderr. */
int interp_run(Module *m, Graph *g, const RunOptions *ro);

/* A dense row-major tensor.  Control_deps results share their operand's
 * tensor (refs counts the values holding it). */
typedef struct Tensor {
	uint8_t dt;       /* DType */
	uint8_t rank;
	uint8_t keep;     /* input, param, const or returned: never freed */
	int32_t refs;     /* values that still hold it in this call */
	int64_t shape[SG_MAXRANK];
	int64_t numel;
	void *data;       /* numel * dtype_size(dt) bytes; NULL once freed */
} Tensor;

typedef struct Interp {
	Module *m;
	Graph *g;
	Tensor **val;     /* per ValId: its tensor in the current call */
	int interleave;   /* poison freed buffers instead of freeing them */
	VEC(Tensor *) owned; /* tensors allocated in the current call */
	struct OptimState *optim; /* interp_optim.c: optimizer state */
	struct InterpBlas *blas;  /* interp_linalg.c: OpenBLAS, once loaded */
} Interp;
/* Unloads what the first matrix product loaded (interp_linalg.c). */
void interp_blas_free(Interp *I);

/* Kernels (ops.def column 7) return 0, or 1 after reporting an error
 * (bad index...) through interp_fail.  out[j] is preallocated from the
 * result types; in[i] is NULL for a scalar literal operand. */
int interp_fail(Interp *I, const Node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
Tensor *interp_tensor_new(Interp *I, DType dt, int rank, const int64_t *shape);
void interp_tensor_free(Tensor *t);
void interp_poison(Tensor *t);
/* Element i as a double (exact for every dtype but large i64) or int64
 * (floats truncated toward zero, NaN and out of range give INT64_MIN). */
double interp_getf(const Tensor *t, int64_t i);
/* A collective over the operands of every simulated rank (interp_shape.c). */
int interp_collective_world(Interp *I, Node *n, int world, Tensor **in, Tensor **out);
int64_t interp_geti(const Tensor *t, int64_t i);
/* Store v as element i, converted as Tensor.to(dtype) does: floats round to
 * nearest even (f16/bf16 through float), to integers truncate toward zero
 * (NaN and out of range give the type's minimum), to bool test v != 0. */
void interp_setf(Tensor *t, int64_t i, double v);
void interp_seti(Tensor *t, int64_t i, int64_t v);
/* v rounded to the precision PyTorch computes dtype dt in ("opmath": double
 * for f64, float for f32/f16/bf16); the identity for other dtypes. */
double interp_opmath(DType dt, double v);
/* v converted to float dtype dt and back: Tensor.to(dt) of a double. */
double interp_round(DType dt, double v);
/* Operand k of n as a double in dt's opmath: a tensor element converted to
 * dt first, as PyTorch's kernels load every tensor operand in the compute
 * dtype (a 0-d f32 operand of a bf16 op is rounded to bf16); a scalar
 * literal in opmath precision, as PyTorch's CUDA kernels take it. */
double interp_opndf(const Node *n, int k, Tensor *t, int64_t off, DType dt);
/* Operand k of n as an integer of compute dtype dt: an i64 tensor element
 * or literal wraps into an i32 computation, as PyTorch converts it. */
int64_t interp_opndi(const Node *n, int k, Tensor *t, int64_t off, DType dt);

/* Broadcasting iteration over an output shape: off[k] follows operand k. */
typedef struct {
	int rank, nop;
	int64_t shape[SG_MAXRANK], idx[SG_MAXRANK];
	int64_t stride[4][SG_MAXRANK];
	int64_t off[4];
} BcastIter;
void interp_iter_init(BcastIter *it, int rank, const int64_t *shape,
                      Tensor **ops, int nop);
void interp_iter_next(BcastIter *it);
/* Row-major strides of a shape. */
void interp_strides(int rank, const int64_t *shape, int64_t *stride);

/* Attention's batch loop in the interpreter (interp_grad.c): the batch
 * shape and each tensor's batch strides (q, k, v, the mask, then any
 * given dk, dv: see shape_attn_bcast; NULL where absent), and the mask's
 * row and column strides. */
typedef struct {
	int brank;
	int64_t nb, shape[SG_MAXRANK], st[6][SG_MAXRANK];
	const Tensor *mask;
	int64_t mrs, mcs;
} AttnLoop;
void interp_attn_loop(AttnLoop *a, const Node *n, const Tensor *const t[6]);
/* Each tensor's offset for batch b. */
void interp_attn_offsets(const AttnLoop *a, int64_t b, int64_t *off);
/* What the mask adds to score (i, j) of the batch at mask offset moff: 0,
 * -inf (a false bool) or the float mask's value. */
double interp_attn_bias(const AttnLoop *a, int64_t moff, int64_t i, int64_t j);

/* interp_io.c: fills persist[v] for every input, param and const from the
 * files (or the deterministic initialisation); writes --out (or prints the
 * returned values, rets[i] for g->rets.v[i]).  Return exit statuses. */
/* interp_optim_load first: the optimizer state's names are known names
 * of --params. */
int interp_load(Interp *I, const RunOptions *ro, Tensor **persist);
/* An error of `sgc run` at a place of the source (a diagnostic). */
void interp_report(Interp *I, Loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int interp_save(Interp *I, const RunOptions *ro, Tensor **persist,
                Tensor **rets, const uint8_t *mutated);
void interp_print(FILE *f, const char *name, const Tensor *t);

/* ------------------------------------------------------------------ interp_optim.c */

/* interp_optim.c: optimizer state in the interpreter, keyed by param
 * name ("opt.NAME.exp_avg"...): loaded from --params (missing state starts
 * fresh), kept across --steps, written to --out. */
int interp_optim_load(Interp *I, const RunOptions *ro);
/* The name of the i-th state tensor the graph's updates use, present or
 * not; NULL past the last. */
const char *interp_optim_declared(const Interp *I, uint32_t i);
/* The i-th declared state tensor when it exists (loaded, or made by a
 * step), else NULL. */
const Tensor *interp_optim_present(const Interp *I, uint32_t i);
void interp_optim_free(Interp *I);
/* The generator state of the random ops (opt.rng): advanced by 1 at the
 * start of each call of a graph that draws (nothing without random ops);
 * read by their kernels (interp_random.c). */
void interp_rng_advance(Interp *I);
void interp_rng_state(Interp *I, uint64_t *seed, uint64_t *offset);
/* interp_random.c: attention's dropout (n: attention or its backward with
 * dropout_p > 0): z[j] for the tk scores of weights row `row` (b * L + i
 * of the [..., L, S] weights, row-major): the dropout scale where a
 * dropout(p=dropout_p, salt=) of the weights keeps score j, else 0.  The
 * scale is rounded to the opmath of dt. */
void interp_attn_drop_row(Interp *I, const Node *n, DType dt, int64_t row, int64_t tk,
                          double *z);

/* ------------------------------------------------------------------ interp_conv.c, interp_linalg.c */

/* interp_linalg.c: C[m,n] = A[m,k] * B[k,n] (B[n,k] transposed when bt),
 * row-major, in f64 (dgemm) or f32 (sgemm); 0 after reporting at n when
 * OpenBLAS cannot be loaded. */
int interp_gemm(Interp *I, const Node *n, int f64, int64_t m, int64_t nn, int64_t k,
                const void *a, const void *b, int bt, void *c);

#endif /* INTERP_H */
