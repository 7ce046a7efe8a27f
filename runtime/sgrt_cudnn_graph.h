/*
 * sgrt_cudnn_graph.h - what libsgrt's two users of cuDNN's backend
 * (graph) API share: sgrt_attn_cudnn.c's attention graphs and
 * sgrt_conv_cudnn.c's convolutions.  The API's functions as looked up in
 * the dlopen'ed library; a builder that makes descriptors, collects a
 * graph's operations and destroys what it made once the plan is made; the
 * heuristic's engine configurations of the graph; the execution plan of
 * one configuration; and a variant pack kept from call to call.
 *
 * Included only where cuDNN's headers were found at build time
 * (SGRT_HAVE_CUDNN_H).
 */
#ifndef SGRT_CUDNN_GRAPH_H
#define SGRT_CUDNN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <cudnn_graph.h>

/* The backend API's functions, from the library sgrt_attn_cudnn.c loads. */
typedef struct {
	cudnnStatus_t (*Create)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
	cudnnStatus_t (*Destroy)(cudnnBackendDescriptor_t);
	cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t);
	cudnnStatus_t (*Set)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
	                     cudnnBackendAttributeType_t, int64_t, const void *);
	cudnnStatus_t (*Get)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
	                     cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
	cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} SgrtCudnnApi;

/* Looks the backend API up in lib (a dlopen'ed libcudnn); 0 when a
 * function is missing. */
int sgrt_cudnn_api(void *lib, SgrtCudnnApi *api);

/* One operation graph while its plan is made.  Every descriptor made
 * through it is kept in d and destroyed by sgrt_cg_free (a finalized plan
 * keeps what it needs); ok is 0 after the first failure, which the fail_
 * fields describe, and every call after it does nothing. */
enum { SGRT_CG_MAXDESC = 160, SGRT_CG_MAXOP = 40 };
typedef struct {
	const SgrtCudnnApi *f;
	cudnnBackendDescriptor_t d[SGRT_CG_MAXDESC];
	int nd;
	cudnnBackendDescriptor_t op[SGRT_CG_MAXOP]; /* the graph's operations */
	int nop;
	int64_t next;          /* the next virtual tensor's id */
	int ok;
	int fail_status;       /* the first failure: cuDNN's status, */
	long fail_what;        /* and -(descriptor type) when creating one, the
	                          attribute when setting one, 0 finalizing */
} SgrtCudnnGraph;

/* An empty graph whose virtual tensors get ids from next_virtual on. */
void sgrt_cg_init(SgrtCudnnGraph *b, const SgrtCudnnApi *f, int64_t next_virtual);
/* Destroys every descriptor made through b. */
void sgrt_cg_free(SgrtCudnnGraph *b);

cudnnBackendDescriptor_t sgrt_cg_new(SgrtCudnnGraph *b, cudnnBackendDescriptorType_t t);
void sgrt_cg_set(SgrtCudnnGraph *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                 cudnnBackendAttributeType_t t, int64_t n, const void *v);
/* Attribute a of d: the one descriptor v. */
void sgrt_cg_setd(SgrtCudnnGraph *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                  cudnnBackendDescriptor_t v);
void sgrt_cg_fin(SgrtCudnnGraph *b, cudnnBackendDescriptor_t d);
/* Finalizes operation op and adds it to the graph. */
void sgrt_cg_op(SgrtCudnnGraph *b, cudnnBackendDescriptor_t op);

/* A finalized tensor of 4 dims dim and strides st (NULL: packed), 16-byte
 * aligned; uid 0 makes it virtual, with the next virtual id; byvalue: a
 * scalar passed by value in the variant pack. */
cudnnBackendDescriptor_t sgrt_cg_tensor(SgrtCudnnGraph *b, int64_t uid, cudnnDataType_t dt,
                                        const int64_t *dim, const int64_t *st, int byvalue);

/* The operation graph of b's operations on handle h and the engine
 * configurations heuristic mode offers for it, at most max of them into
 * cfg, in its order: their number (0 with b->ok 0 when cuDNN rejects the
 * graph). */
int64_t sgrt_cg_configs(SgrtCudnnGraph *b, cudnnHandle_t h, cudnnBackendHeurMode_t mode,
                        cudnnBackendDescriptor_t *cfg, int max);

/* The execution plan of configuration cfg on handle h, its workspace in
 * *ws; NULL when cuDNN makes none.  The caller destroys it. */
cudnnBackendDescriptor_t sgrt_cudnn_plan(const SgrtCudnnApi *f, cudnnHandle_t h,
                                         cudnnBackendDescriptor_t cfg, size_t *ws);

/* A plan's variant pack, kept from call to call: made again only when
 * the addresses it holds change (a step's calls reuse theirs), so that a
 * call is cudnnBackendExecute alone.  Zeroed: none yet. */
enum { SGRT_CUDNN_PACK_MAX = 16 };
typedef struct {
	cudnnBackendDescriptor_t d; /* NULL: none, or the last making failed */
	int n;
	void *ptr[SGRT_CUDNN_PACK_MAX];
	void *ws;
} SgrtCudnnPack;

/* kp as the finalized variant pack of the n (at most SGRT_CUDNN_PACK_MAX)
 * tensors uid[i] at ptr[i] and the workspace ws: kept when it holds these
 * pointers, n and ws, else made again; cuDNN's status (kp->d NULL after a
 * failure).  The ids are not compared: a kp serves one plan, whose
 * tensors' ids are the same at every call. */
cudnnStatus_t sgrt_cudnn_pack(const SgrtCudnnApi *f, SgrtCudnnPack *kp, int n,
                              const int64_t *uid, void *const *ptr, void *ws);
/* Destroys kp's pack; kp is empty after. */
void sgrt_cudnn_pack_free(const SgrtCudnnApi *f, SgrtCudnnPack *kp);

#endif
