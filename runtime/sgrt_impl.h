/*
 * sgrt_impl.h - libsgrt's private header: the model object and what the
 * sgrt_*.c files share.  A section per file, as in compiler/ir/sgc.h.  Not
 * installed; the unit test includes it for the host-only helpers.
 */
#ifndef SGRT_IMPL_H
#define SGRT_IMPL_H

#include "sgrt.h"
#include "sgrt_out.h"
#include "sgrt_table.h"

/* ------------------------------------------------------------------ sgrt.c */

/* The function name at the start of a call's text: "cudaMalloc(&p, n)"
 * gives "cudaMalloc" (at most len-1 characters). */
void sgrt_call_name(const char *call, char *buf, size_t len);

/* ------------------------------------------------------------------ sgrt_mem.c */

/* Address -> size map (open addressing, linear probing, no tombstones). */
typedef struct {
	uintptr_t *key;   /* 0: empty */
	size_t *val;
	size_t n, cap;    /* cap: 0 or a power of two */
} SgrtPtrMap;

int sgrt_ptrmap_put(SgrtPtrMap *pm, const void *p, size_t size);
/* Removes p; 1 and *size when it was there, 0 otherwise. */
int sgrt_ptrmap_take(SgrtPtrMap *pm, const void *p, size_t *size);
void sgrt_ptrmap_free(SgrtPtrMap *pm);

/* Device bytes the model gained (or, negative, gave back). */
void sgrt_mem_account(SgrtModel *m, long long delta);
/* Stream s's buffer *buf of *have bytes grown to `need` (nothing when it
 * has that much): what ran on the stream is waited for, the old buffer
 * freed, a new one made, both counted.  Not during a CUDA-graph capture:
 * the callers decline or plan within what they have then. */
int sgrt_grow_stream_buffer(SgrtModel *m, int s, void **buf, size_t *have, size_t need,
                            int sgline);
/* Frees every buffer the model still owns (at sgrt_destroy). */
void sgrt_mem_release(SgrtModel *m);

/* ------------------------------------------------------------------ sgrt_trace.c */

/* One traced op while tracing is on. */
typedef struct {
	int stream;
	int kind;          /* SGRT_OP_* */
	char *name;        /* owned */
	int sgline;
	cudaEvent_t start, end;
} SgrtSlice;

/* A slice resolved to times, ready to write. */
typedef struct {
	const char *name;
	const char *cat;   /* "kernel", "copy", "collective", "other" */
	int tid;           /* stream index: streams[tid] is its name */
	int sgline;
	double ts, dur;    /* microseconds */
} SgrtTraceEvent;

/* Writes events as a Chrome trace: a JSON array of one "thread_name"
 * metadata event ("ph": "M") per stream, naming the integer tid, then the
 * "ph": "X" slices. */
int sgrt_trace_json(FILE *f, const char *graph, const char *sgfile, int pid,
                    char *const *streams, int nstreams,
                    const SgrtTraceEvent *ev, int n);
/* Writes s as a JSON string literal, quotes included. */
void sgrt_json_string(FILE *f, const char *s);
const char *sgrt_op_kind_name(int kind);
/* Drops the slices of the last traced call (keeps the event pool). */
void sgrt_trace_reset(SgrtModel *m);
void sgrt_trace_release(SgrtModel *m);

/* ------------------------------------------------------------------ sgrt_blas.c */

void sgrt_blas_release(SgrtModel *m);

/* ------------------------------------------------------------------ sgrt_attn_cudnn.c */

/* Unloads cuDNN and frees the plans and workspaces (at sgrt_destroy). */
void sgrt_cudnn_release(SgrtModel *m);
/* The dlopen'ed cuDNN library and the model's cudnnHandle_t (*handle),
 * loaded on first use; NULL when unavailable. */
void *sgrt_cudnn_lib(SgrtModel *m, void **handle);
/* One entry point of a dlopen'ed library and where its pointer goes in a
 * table of function pointers. */
typedef struct {
	const char *name;
	size_t off;
} SgrtSym;
/* Looks the n symbols up in lib, each stored at table + its off; 0 when
 * one is missing. */
int sgrt_dlsyms(void *lib, const SgrtSym *sym, size_t n, void *table);

/* ------------------------------------------------------------------ sgrt_conv_cudnn.c */

/* Frees the convolution plans and workspaces (before sgrt_cudnn_release). */
void sgrt_conv_release(SgrtModel *m);

/* ------------------------------------------------------------------ sgrt_codegen.c */

/* *yes: 1 when stream s is being captured into a CUDA graph. */
int sgrt_capturing(SgrtModel *m, int s, int *yes, int sgline);

/* ------------------------------------------------------------------ sgrt_nccl.c */

/* The file that carries rank 0's NCCL unique id to the others. */
int sgrt_idfile_path(char *buf, size_t len);
/* Rank 0: writes magic, world and the id to path.tmp.PID and renames it. */
int sgrt_idfile_write(const char *path, const void *id, size_t idlen,
                      int world, char *err, size_t errlen);
/* Other ranks: polls path every 10 ms for a file for this world that is
 * not older than max_age seconds, up to timeout seconds. */
int sgrt_idfile_read(const char *path, void *id, size_t idlen, int world,
                     double timeout, double max_age, char *err,
                     size_t errlen);
/* Checks for asynchronous NCCL errors (at sgrt_call_end). */
int sgrt_nccl_poll(SgrtModel *m);
void sgrt_nccl_release(SgrtModel *m);
/* Element size of a collective dtype; 0 when unknown. */
size_t sgrt_coll_dtype_size(int dtype);

/* ------------------------------------------------------------------ sgrt_symm.c */

/* Frees the model's symmetric memory (before its communicator goes). */
void sgrt_symm_release(SgrtModel *m);

/* ------------------------------------------------------------------ sgrt_symm_dev.cu */

/* sgrt_blas_dev.cu (built by nvcc; SGRT_HAVE_BLAS_DEV): SgrtGemm epilogue
 * act (SGRT_EPI_*) of dtype (f32, f16, bf16) by a kernel on stream s,
 * over D (rows x cols, row stride ldc) and aux; a cudaError_t. */
int sgrt_blas_epilogue(int dtype, int act, void *d, int64_t ldc, void *aux,
                       int64_t ldaux, int64_t rows, int64_t cols, cudaStream_t s);

/* The device half of symmetric memory, built by nvcc (docs/runtime.md).
 * NCCL results and CUDA errors as int; devcomm is an ncclDevComm, win an
 * ncclWindow_t.  A one-shot launch has at most SGRT_SYMM_CTAS CTAs and
 * uses LSA barriers bar0 .. bar0 + SGRT_SYMM_CTAS - 1. */
#define SGRT_SYMM_CTAS 32
/* The NCCL_VERSION_CODE built against; 0: that NCCL has no device API. */
int sgrt_symm_dev_version(void);
int sgrt_symm_dev_create(void *comm, int nbarriers, void **devcomm,
                         int *lsa_size);
int sgrt_symm_dev_destroy(void *comm, void *devcomm);
/* ptrs[p]: LSA rank p's window base, for p < n (waits on st). */
int sgrt_symm_dev_lsa_ptrs(void *win, int n, void **ptrs, cudaStream_t st);
/* A one-CTA kernel on st that meets every rank at LSA barrier index. */
int sgrt_symm_dev_barrier(const void *devcomm, int index, cudaStream_t st);
/* The one-shot all-reduce kernel: f32/f16/bf16, sum avg max min. */
int sgrt_symm_dev_oneshot(const void *devcomm, void *win, const void *send,
                          void *recv, size_t count, int dtype, int op,
                          int bar0, cudaStream_t st);

/* ------------------------------------------------------------------ sgrt_driver.c */

/* sgrt_path_for_rank: runtime/sgrt_out.h. */
/* Median and minimum of n > 0 values (sorts ms). */
void sgrt_median_min(float *ms, int n, double *median, double *min);
/* What sgrt_save_tensors writes of table t[0..n): keep[i] = 1 for a
 * tensor with memory (ptr[i]), not an input the graph only reads, whose
 * name no earlier such tensor has (a returned input is in the table
 * twice).  n log n.  Returns 0, or -1 out of memory. */
int sgrt_saved_set(const SgrtTensorDesc *t, int n, void *const *ptr,
                   uint8_t *keep);

/* ------------------------------------------------------------------ the model */

#define SGRT_ERRLEN 1024

struct SgrtModel {
	char *graph, *sgfile;      /* owned copies ("" when not given) */
	int device;

	/* Streams: [0] is `default` (the caller's, set per call). */
	int nstreams;
	cudaStream_t *stream;
	char **stream_name;
	cudaEvent_t *join;         /* [nstreams]: wait_stream's events */
	int nevents;
	cudaEvent_t *event;

	/* Errors: the first of the current call. */
	int status;
	char err[SGRT_ERRLEN];

	/* Memory. */
	void *arena;
	size_t arena_bytes;
	SgrtPtrMap owned;          /* sgrt_device_alloc */
	SgrtPtrMap pinned;         /* sgrt_host_alloc */
	SgrtPtrMap scratch;        /* sgrt_alloc_async */
	size_t live, peak;

	/* Ops and trace. */
	int sync_ops;              /* SGRT_SYNC=1 */
	int cur_line;              /* the latest sgrt_op_begin's */
	const char *cur_name;
	int nkernels, last_kernels;
	int tracing;
	int traced;                /* a traced call began (t0 recorded) */
	cudaEvent_t t0;
	SgrtSlice *slice;
	int nslices, capslices;
	cudaEvent_t *tpool;        /* timing events, reused call to call */
	int ntpool, captpool, tpool_used;

	/* cuBLASLt (types of sgrt_blas.c). */
	void *lt;                  /* cublasLtHandle_t */
	void **ws;                 /* [nstreams] workspaces, grown to need */
	size_t *ws_have;           /* [nstreams] their bytes */
	size_t ws_bytes;           /* the most a product's algorithm may use */
	SgrtTable plans;           /* GemmPlan by GemmKey */
	int allow_tf32;
	int gemm_tune;             /* time the heuristic's candidates (not
	                              SGRT_GEMM_TUNE=0) */
	int ntuned;                /* plans whose algorithm timing chose */
	int no_epilogue;           /* SGRT_NO_EPILOGUE: every activation epilogue
	                              by libsgrt's kernel (tests) */

	/* cuDNN (sgrt_attn_cudnn.c): loaded on first use. */
	void *cudnn;               /* its Cudnn, or NULL */
	int cudnn_state;           /* 0 not tried, 1 loaded, -1 unavailable */
	/* cuDNN convolutions (sgrt_conv_cudnn.c): plans over that library. */
	void *conv;                /* its Conv, or NULL */
	int conv_state;            /* 0 not tried, 1 loaded, -1 unavailable */

	/* NCCL. */
	void *comm;                /* ncclComm_t */
	int rank, world, local_rank;
	int group_depth;
	int id_unlinked;
	void *symm;                /* SgrtSymm of sgrt_symm.c, or NULL */
};

#endif
