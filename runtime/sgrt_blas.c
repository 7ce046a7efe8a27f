/*
 * sgrt_blas.c - matrix products through cuBLASLt.
 *
 * sgc's tensors are row-major and cuBLAS is column-major.  A row-major
 * m x n matrix with row stride ld is, read column-major, its n x m
 * transpose with the same ld.  So D = op(A) op(B) becomes
 * D^T = op(B)^T op(A)^T: cuBLAS's "A" is our B, its "B" is our A, and its
 * m and n are our n and m; the transpose flags carry over unchanged.
 *
 * Each distinct product (shape, strides, dtype, transposes, pointer
 * alignments, bias, epilogue) gets a plan: the descriptors and the
 * algorithm that cuBLASLt's heuristic picked, made on first use and reused
 * by every later call; for a large product the fastest of the heuristic's
 * best NCAND, timed on its first eager call (tune_plan).
 *
 * Concurrent streams must not share a workspace, so each stream gets its
 * own: the heuristic may use up to ws_bytes (32 MiB unless the model's
 * configuration says otherwise), and a stream's workspace is grown to
 * what its products' algorithms need, no more (most need none).  Growing
 * is a stream synchronisation and a cudaMalloc, so during a CUDA-graph
 * capture it cannot happen: a product whose algorithm needs more than
 * the stream has then gets a plan of its own limited to what the stream
 * has (GemmKey.ws_limit).
 *
 * Activation epilogues (SGRT_EPI_*) that cuBLASLt declines, whether its
 * rules forbid them (an aux row stride that is no multiple of 8), its
 * heuristic finds no algorithm, or SGRT_NO_EPILOGUE=1 says so, run as a
 * plan without them (the bias kept) followed by sgrt_blas_dev.cu's
 * kernel: the plan remembers the decision (GemmPlan.by_kernel).
 */
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "sgrt_impl.h"

/* What makes two products the same plan.  Compared with memcmp: always
 * zeroed before it is filled. */
typedef struct {
	int dtype, trans_a, trans_b, bias, epilogue, tf32;
	uint64_t ws_limit; /* 0: ws_bytes; else this (a plan made while capturing) */
	int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c, ldaux;
	uint32_t align_a, align_b, align_c, align_bias, align_aux;
} GemmKey;

/* The heuristic's candidates a plan keeps for timing (GemmPlan.cand). */
#define NCAND 8

typedef struct {
	GemmKey key;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc; /* cuBLAS's A (our B), B (our A), C */
	cublasLtMatmulAlgo_t algo;
	size_t ws_need;   /* the workspace the algorithm needs */
	int by_kernel;    /* the epilogue declined: run by libsgrt's kernel */
	/* The heuristic's best NCAND, its first in algo until timed (tuned). */
	cublasLtMatmulAlgo_t cand[NCAND];
	size_t cand_ws[NCAND];
	int ncand, tuned;
} GemmPlan;

/* (sgrt_blas_dev.cu, which is C++, knows these values by number) */
_Static_assert(SGRT_F32 == 1 && SGRT_F16 == 2 && SGRT_BF16 == 3, "dtypes");
_Static_assert(SGRT_EPI_RELU == 1 && SGRT_EPI_GELU == 2 && SGRT_EPI_GELU_AUX == 3 &&
               SGRT_EPI_DGELU == 4, "epilogues");

/* 1 for the epilogues with an aux matrix. */
static int
has_aux(int epilogue)
{
	return epilogue == SGRT_EPI_GELU_AUX || epilogue == SGRT_EPI_DGELU;
}

int
sgrt_check_cublas(SgrtModel *m, int status, const char *call, int sgline)
{
	char fn[128];

	if (status == CUBLAS_STATUS_SUCCESS)
		return SGRT_OK;
	sgrt_call_name(call, fn, sizeof fn);
	return sgrt_fail(m, SGRT_ECUBLAS, sgline, "%s failed: %s (%s)", fn,
	                 cublasLtGetStatusString((cublasStatus_t)status),
	                 cublasLtGetStatusName((cublasStatus_t)status));
}

#define CHECK_LT(m, call, sgline) SGRT_CHECK_CUBLAS(m, call, sgline)

/* The largest power of two up to 256 that divides the address. */
static uint32_t
alignment(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	uint32_t al = 256;

	if (!a)
		return 256;
	while (al > 1 && (a & (al - 1)))
		al >>= 1;
	return al;
}

/* The CUDA type of an SgrtDType matmuls support; 0 when none. */
static int
cuda_type(int dtype, cudaDataType_t *t, int *size)
{
	switch (dtype) {
	case SGRT_F32: *t = CUDA_R_32F; *size = 4; return 1;
	case SGRT_F16: *t = CUDA_R_16F; *size = 2; return 1;
	case SGRT_BF16: *t = CUDA_R_16BF; *size = 2; return 1;
	case SGRT_F64: *t = CUDA_R_64F; *size = 8; return 1;
	default: return 0;
	}
}

/* The key of product g on these pointers, cin the C it reads (packed
 * strides filled in). */
static void
make_key(const SgrtModel *m, const SgrtGemm *g, const void *a, const void *b,
         const void *cin, const void *c, GemmKey *k)
{
	memset(k, 0, sizeof *k);
	k->dtype = g->dtype;
	k->trans_a = g->trans_a != 0;
	k->trans_b = g->trans_b != 0;
	k->bias = g->bias != NULL;
	k->epilogue = g->epilogue;
	k->tf32 = g->dtype == SGRT_F32 && m->allow_tf32;
	k->m = g->m;
	k->n = g->n;
	k->k = g->k;
	k->lda = g->lda ? g->lda : (k->trans_a ? g->m : g->k);
	k->ldb = g->ldb ? g->ldb : (k->trans_b ? g->k : g->n);
	k->ldc = g->ldc ? g->ldc : g->n;
	k->batch = g->batch > 1 ? g->batch : 1;
	if (k->batch > 1) {
		k->stride_a = g->stride_a;
		k->stride_b = g->stride_b;
		k->stride_c = g->stride_c ? g->stride_c : g->m * k->ldc;
	}
	k->align_a = alignment(a);
	k->align_b = alignment(b);
	k->align_c = alignment(c);
	if (alignment(cin) < k->align_c)
		k->align_c = alignment(cin); /* (C's and D's, one preference) */
	k->align_bias = g->bias ? alignment(g->bias) : 0;
	if (has_aux(g->epilogue)) {
		k->ldaux = g->ldaux ? g->ldaux : g->n;
		k->align_aux = alignment(g->aux);
	}
}

/* A column-major rows x cols layout with leading dimension ld, batched
 * as the key says. */
static int
layout(SgrtModel *m, cublasLtMatrixLayout_t *l, cudaDataType_t t,
       int64_t rows, int64_t cols, int64_t ld, const GemmKey *k,
       int64_t stride, int sgline)
{
	int32_t batch = (int32_t)k->batch;

	CHECK_LT(m, cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows,
	         (uint64_t)cols, ld), sgline);
	if (batch <= 1)
		return SGRT_OK;
	CHECK_LT(m, cublasLtMatrixLayoutSetAttribute(*l,
	         CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), sgline);
	CHECK_LT(m, cublasLtMatrixLayoutSetAttribute(*l,
	         CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
	         sizeof stride), sgline);
	return SGRT_OK;
}

/* cuBLASLt's epilogue for a bias (0/1) and an SGRT_EPI_* activation. */
static int32_t
epilogue_of(int bias, int act)
{
	switch (act) {
	case SGRT_EPI_RELU:
		return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
	case SGRT_EPI_GELU:
		return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
	case SGRT_EPI_GELU_AUX:
		return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
	case SGRT_EPI_DGELU:
		return CUBLASLT_EPILOGUE_DGELU;
	default:
		return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	}
}

/* The operation descriptor: compute type, transposes, the epilogue (bias,
 * activation unless by_kernel, aux). */
static int
op_desc(SgrtModel *m, GemmPlan *p, const void *bias, const void *aux, int sgline)
{
	const GemmKey *k = &p->key;
	cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
	cudaDataType_t st = CUDA_R_32F;
	int32_t ta = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
	int32_t tb = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;

	if (k->dtype == SGRT_F64) {
		ct = CUBLAS_COMPUTE_64F;
		st = CUDA_R_64F;
	} else if (k->tf32) {
		ct = CUBLAS_COMPUTE_32F_FAST_TF32;
	}
	CHECK_LT(m, cublasLtMatmulDescCreate(&p->op, ct, st), sgline);
	CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
	         CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), sgline);
	CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
	         CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), sgline);
	int act = p->by_kernel ? SGRT_EPI_NONE : k->epilogue;
	if (k->bias || act) {
		int32_t epi = epilogue_of(k->bias, act);
		CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
		         CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), sgline);
	}
	if (has_aux(act)) {
		CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
		         CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
		         sgline);
		CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
		         CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &k->ldaux,
		         sizeof k->ldaux), sgline);
	}
	if (k->bias)
		CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
		         CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
		         sgline);
	return SGRT_OK;
}

/* Asks the heuristic for its best algorithms within the workspace (the
 * first in p->algo, up to NCAND in p->cand for tune_plan);
 * *declined: it has none, or rejects the description, for a plan with an
 * activation epilogue (declined NULL: an error instead). */
static int
pick_algo(SgrtModel *m, GemmPlan *p, int *declined, int sgline)
{
	const GemmKey *k = &p->key;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res[NCAND];
	uint64_t ws = k->ws_limit ? k->ws_limit : m->ws_bytes;
	int nres = 0, rc;

	memset(res, 0, sizeof res);
	CHECK_LT(m, cublasLtMatmulPreferenceCreate(&pref), sgline);
	/* cuBLAS's A is our B, its B our A. */
	rc = sgrt_check_cublas(m, cublasLtMatmulPreferenceSetAttribute(pref,
	    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
	    "cublasLtMatmulPreferenceSetAttribute", sgline);
	if (!rc)
		rc = sgrt_check_cublas(m, cublasLtMatmulPreferenceSetAttribute(
		    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align_b,
		    sizeof k->align_b), "cublasLtMatmulPreferenceSetAttribute",
		    sgline);
	if (!rc)
		rc = sgrt_check_cublas(m, cublasLtMatmulPreferenceSetAttribute(
		    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align_a,
		    sizeof k->align_a), "cublasLtMatmulPreferenceSetAttribute",
		    sgline);
	if (!rc)
		rc = sgrt_check_cublas(m, cublasLtMatmulPreferenceSetAttribute(
		    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align_c,
		    sizeof k->align_c), "cublasLtMatmulPreferenceSetAttribute",
		    sgline);
	if (!rc)
		rc = sgrt_check_cublas(m, cublasLtMatmulPreferenceSetAttribute(
		    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align_c,
		    sizeof k->align_c), "cublasLtMatmulPreferenceSetAttribute",
		    sgline);
	if (!rc) {
		cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
		    (cublasLtHandle_t)m->lt, p->op, p->la, p->lb, p->lc, p->lc,
		    pref, NCAND, res, &nres);
		if (declined && st == CUBLAS_STATUS_NOT_SUPPORTED)
			nres = 0; /* (the epilogue's description rejected) */
		else
			rc = sgrt_check_cublas(m, st, "cublasLtMatmulAlgoGetHeuristic",
			                       sgline);
	}
	cublasLtMatmulPreferenceDestroy(pref);
	if (rc)
		return rc;
	if (nres < 1 && declined) {
		*declined = 1;
		return SGRT_OK;
	}
	if (nres < 1)
		return sgrt_fail(m, SGRT_ECUBLAS, sgline,
		                 "cuBLASLt has no algorithm for a %lldx%lldx%lld "
		                 "matmul", (long long)k->m, (long long)k->n,
		                 (long long)k->k);
	p->algo = res[0].algo;
	p->ws_need = res[0].workspaceSize;
	p->ncand = 0;
	for (int i = 0; i < nres && i < NCAND; i++)
		if (res[i].state == CUBLAS_STATUS_SUCCESS) {
			p->cand[p->ncand] = res[i].algo;
			p->cand_ws[p->ncand++] = res[i].workspaceSize;
		}
	return SGRT_OK;
}

/* Destroys what a plan holds. */
static void
plan_free(GemmPlan *p)
{
	if (p->la)
		cublasLtMatrixLayoutDestroy(p->la);
	if (p->lb)
		cublasLtMatrixLayoutDestroy(p->lb);
	if (p->lc)
		cublasLtMatrixLayoutDestroy(p->lc);
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
}

/* 1 when cuBLASLt's rules leave epilogue act of key k to the kernel: an
 * aux row stride that is no multiple of 8 (cublasLt.h), or
 * SGRT_NO_EPILOGUE. */
static int
act_by_kernel(const SgrtModel *m, const GemmKey *k)
{
	if (!k->epilogue)
		return 0;
	return m->no_epilogue || (has_aux(k->epilogue) && k->ldaux % 8 != 0);
}

/* Builds the plan for key k (descriptors and algorithm); an activation
 * epilogue the heuristic declines goes to the kernel (by_kernel). */
static int
plan_build(SgrtModel *m, GemmPlan *p, const void *bias, const void *aux, int sgline)
{
	const GemmKey *k = &p->key;
	cudaDataType_t t = CUDA_R_32F;
	int size, declined = 0;

	cuda_type(k->dtype, &t, &size);
	p->by_kernel = act_by_kernel(m, k);
	/* cuBLAS A = our B: stored k x n (n x k when trans_b) row-major. */
	SGRT_TRY(layout(m, &p->la, t, k->trans_b ? k->k : k->n,
	                k->trans_b ? k->n : k->k, k->ldb, k, k->stride_b, sgline));
	/* cuBLAS B = our A: stored m x k (k x m when trans_a) row-major. */
	SGRT_TRY(layout(m, &p->lb, t, k->trans_a ? k->m : k->k,
	                k->trans_a ? k->k : k->m, k->lda, k, k->stride_a, sgline));
	SGRT_TRY(layout(m, &p->lc, t, k->n, k->m, k->ldc, k, k->stride_c,
	                sgline));
	SGRT_TRY(op_desc(m, p, bias, aux, sgline));
	SGRT_TRY(pick_algo(m, p, k->epilogue && !p->by_kernel ? &declined : NULL, sgline));
	if (!declined)
		return SGRT_OK;
	cublasLtMatmulDescDestroy(p->op); /* again, without the activation */
	p->op = NULL;
	p->by_kernel = 1;
	SGRT_TRY(op_desc(m, p, bias, aux, sgline));
	return pick_algo(m, p, NULL, sgline);
}

/* The plan for key k, made on first use. */
static int
find_plan(SgrtModel *m, const GemmKey *k, const void *bias, const void *aux,
          GemmPlan **out, int sgline)
{
	GemmPlan np, *p = sgrt_table_find(&m->plans, k);
	int rc;

	if (p) {
		*out = p;
		return SGRT_OK;
	}
	memset(&np, 0, sizeof np);
	np.key = *k;
	rc = plan_build(m, &np, bias, aux, sgline);
	if (rc == SGRT_OK && !(p = sgrt_table_add(&m->plans, k)))
		rc = sgrt_fail(m, SGRT_ENOMEM, sgline, "out of memory");
	if (rc) {
		plan_free(&np);
		return rc;
	}
	*p = np;
	*out = p;
	return SGRT_OK;
}

/* The handle and the plans' table, made on first use. */
static int
ready(SgrtModel *m, int sgline)
{
	if (!m->lt) {
		cublasLtHandle_t h;
		CHECK_LT(m, cublasLtCreate(&h), sgline);
		m->lt = h;
		sgrt_table_init(&m->plans, sizeof(GemmPlan), sizeof(GemmKey));
	}
	return SGRT_OK;
}

/* The plan for key k on stream s with the workspace it needs: grown when
 * it needs more than the stream has, or, during a capture, the plan of an
 * algorithm within what the stream has. */
static int
plan_for_stream(SgrtModel *m, int s, GemmKey *k, const void *bias, const void *aux,
                GemmPlan **out, int sgline)
{
	int cap = 0;

	SGRT_TRY(find_plan(m, k, bias, aux, out, sgline));
	if ((*out)->ws_need <= m->ws_have[s])
		return SGRT_OK;
	SGRT_TRY(sgrt_capturing(m, s, &cap, sgline));
	if (!cap)
		return sgrt_grow_stream_buffer(m, s, &m->ws[s], &m->ws_have[s], (*out)->ws_need,
		                               sgline);
	k->ws_limit = m->ws_have[s] ? m->ws_have[s] : 1; /* 1 byte: none */
	return find_plan(m, k, bias, aux, out, sgline);
}

/* SGRT_EUSAGE when the product's description cannot be right. */
static int
check_gemm(SgrtModel *m, int s, const SgrtGemm *g, int sgline)
{
	cudaDataType_t t = CUDA_R_32F;
	int size;

	if (s < 0 || s >= m->nstreams)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
	if (!cuda_type(g->dtype, &t, &size))
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "matmul of dtype %s is not supported",
		                 sgrt_dtype_name(g->dtype));
	if (g->m <= 0 || g->n <= 0 || g->k <= 0 || g->batch < 0 ||
	    g->batch > INT32_MAX)
		return sgrt_fail(m, SGRT_EUSAGE, sgline,
		                 "bad matmul shape %lldx%lldx%lld (batch %lld)",
		                 (long long)g->m, (long long)g->n, (long long)g->k,
		                 (long long)g->batch);
	if (g->epilogue < SGRT_EPI_NONE || g->epilogue > SGRT_EPI_DGELU)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "bad matmul epilogue %d",
		                 g->epilogue);
	if (g->epilogue && g->dtype == SGRT_F64)
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "matmul epilogues are not supported for f64");
	if (has_aux(g->epilogue) &&
	    (!g->aux || g->batch > 1 || (g->ldaux && g->ldaux < g->n) ||
	     (g->epilogue == SGRT_EPI_DGELU && g->bias)))
		return sgrt_fail(m, SGRT_EUSAGE, sgline,
		                 "a matmul's GELU epilogue needs an aux matrix of m x n, "
		                 "no batch and, for its backward, no bias");
	return SGRT_OK;
}

/* The declined epilogue of product g (key k, written to c) by libsgrt's
 * kernel, after it on stream s. */
static int
epilogue_kernel(SgrtModel *m, int s, const SgrtGemm *g, const GemmKey *k, void *c,
                int sgline)
{
#ifdef SGRT_HAVE_BLAS_DEV
	if (k->batch > 1 && k->stride_c != k->m * k->ldc)
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "cuBLASLt declined the epilogue of a batched matmul "
		                 "whose batch items are not packed");
	int h = sgrt_op_begin(m, s, SGRT_OP_KERNEL, "sgrt_gemm_epilogue", sgline);
	SGRT_CHECK_CUDA(m, (cudaError_t)sgrt_blas_epilogue(g->dtype, g->epilogue, c,
	                k->ldc, g->aux, k->ldaux, k->m * k->batch, k->n,
	                m->stream[s]), sgline);
	return sgrt_op_end(m, h);
#else
	(void)k;
	(void)c;
	(void)s;
	return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
	                 "cuBLASLt declined a matmul's epilogue %d and libsgrt was "
	                 "built without nvcc (no kernel to run it)", g->epilogue);
#endif
}

/* The bytes from a row-major rows x cols matrix's first element (row
 * stride ld, batch items stride apart) past its last. */
static uint64_t
extent(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
       int size)
{
	return (uint64_t)(((batch - 1) * stride + (rows - 1) * ld + cols) * size);
}

/* 1 when [p, p + np) and [q, q + nq) share a byte. */
static int
overlap(const void *p, uint64_t np, const void *q, uint64_t nq)
{
	uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;

	return p && q && np && nq && a < b + nq && b < a + np;
}

/* Copies product k's output c (its elements, not the gaps between rows,
 * which may be another tensor's) to or from the host buffer h, on stream s,
 * and waits for it. */
static int
copy_c(SgrtModel *m, int s, const GemmKey *k, void *c, void *h, int size,
       int to_host, int sgline)
{
	size_t w = (size_t)k->n * size, pitch = (size_t)k->ldc * size;
	size_t item = (size_t)k->m * w;

	for (int64_t i = 0; i < k->batch; i++) {
		char *d = (char *)c + (size_t)(i * k->stride_c) * size;
		char *hb = (char *)h + (size_t)i * item;
		SGRT_CHECK_CUDA(m, to_host
		    ? cudaMemcpy2DAsync(hb, w, d, pitch, w, (size_t)k->m,
		                        cudaMemcpyDeviceToHost, m->stream[s])
		    : cudaMemcpy2DAsync(d, pitch, hb, w, w, (size_t)k->m,
		                        cudaMemcpyHostToDevice, m->stream[s]), sgline);
	}
	SGRT_CHECK_CUDA(m, cudaStreamSynchronize(m->stream[s]), sgline);
	return SGRT_OK;
}

/* Times candidate i of plan p: a first run (which loads its kernel), then
 * three between events e; *ms < 0 when cuBLASLt refuses it. */
static int
time_candidate(SgrtModel *m, int s, GemmPlan *p, int i, const void *a,
               const void *b, const void *cin, void *c, const void *pa, const void *pb,
               cudaEvent_t *e, float *ms, int sgline)
{
	*ms = -1;
	if (p->cand_ws[i] > m->ws_have[s])
		return SGRT_OK;
	for (int r = 0; r < 4; r++) {
		if (r == 1)
			SGRT_CHECK_CUDA(m, cudaEventRecord(e[0], m->stream[s]), sgline);
		if (cublasLtMatmul((cublasLtHandle_t)m->lt, p->op, pa, b, p->la, a,
		                   p->lb, pb, cin, p->lc, c, p->lc, &p->cand[i], m->ws[s],
		                   m->ws_have[s], m->stream[s]) != CUBLAS_STATUS_SUCCESS)
			return SGRT_OK;
	}
	SGRT_CHECK_CUDA(m, cudaEventRecord(e[1], m->stream[s]), sgline);
	SGRT_CHECK_CUDA(m, cudaEventSynchronize(e[1]), sgline);
	SGRT_CHECK_CUDA(m, cudaEventElapsedTime(ms, e[0], e[1]), sgline);
	return SGRT_OK;
}

/* The smallest product worth timing (m n k batch): below it the
 * candidates differ by microseconds. */
#define TUNE_MIN_WORK 1073741824.0

/* Times plan p's candidates on product g's own operands, once, on its
 * first eager call, and keeps the fastest: cuBLASLt's heuristic picks well
 * but not the best for every shape (the transformer's products: up to 13%
 * apart, 3% of their time in all).  The heuristic's choice stays unless
 * another is 1% faster.  The runs write c, which the call then writes
 * again; when the product reads c (beta not 0, no c_in) its elements are
 * copied to the host first and back after.  Not while capturing (the next eager call
 * does it), not when c overlaps an operand or an aux output does, not for
 * small products, not under SGRT_GEMM_TUNE=0: there the heuristic's
 * choice. */
static int
tune_plan(SgrtModel *m, int s, GemmPlan *p, const SgrtGemm *g, const void *a,
          const void *b, const void *cin, void *c, const void *pa, const void *pb,
          int sgline)
{
	const GemmKey *k = &p->key;
	cudaDataType_t t = CUDA_R_32F;
	int size = 4, cap = 0, best = 0, rc = SGRT_OK;
	float ms[NCAND] = {-1};
	void *save = NULL;
	cudaEvent_t e[2] = {NULL, NULL};

	if (!m->gemm_tune || p->ncand < 2 ||
	    (double)k->m * (double)k->n * (double)k->k * (double)k->batch < TUNE_MIN_WORK) {
		p->tuned = 1;
		return SGRT_OK;
	}
	SGRT_TRY(sgrt_capturing(m, s, &cap, sgline));
	if (cap)
		return SGRT_OK;
	p->tuned = 1;
	cuda_type(k->dtype, &t, &size);
	uint64_t na = extent(k->trans_a ? k->k : k->m, k->trans_a ? k->m : k->k,
	                     k->lda, k->batch, k->stride_a, size);
	uint64_t nb = extent(k->trans_b ? k->n : k->k, k->trans_b ? k->k : k->n,
	                     k->ldb, k->batch, k->stride_b, size);
	uint64_t nc = extent(k->m, k->n, k->ldc, k->batch, k->stride_c, size);
	uint64_t nbias = g->bias ? (uint64_t)k->n * 8 : 0; /* (any type) */
	uint64_t naux = has_aux(k->epilogue) ? extent(k->m, k->n, k->ldaux, 1, 0, size) : 0;
	int aux_out = k->epilogue == SGRT_EPI_GELU_AUX && !p->by_kernel;
	if (overlap(c, nc, a, na) || overlap(c, nc, b, nb) ||
	    overlap(c, nc, g->bias, nbias) || overlap(c, nc, g->aux, naux) ||
	    (aux_out && (overlap(g->aux, naux, a, na) || overlap(g->aux, naux, b, nb) ||
	                 overlap(g->aux, naux, g->bias, nbias))))
		return SGRT_OK;
	if (g->beta != 0 && cin == c) {
		save = malloc((size_t)(k->m * k->n * k->batch) * size);
		if (!save)
			return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of memory");
		rc = copy_c(m, s, k, c, save, size, 1, sgline);
	}
	if (!rc)
		rc = sgrt_check_cuda(m, cudaEventCreate(&e[0]), "cudaEventCreate", sgline);
	if (!rc)
		rc = sgrt_check_cuda(m, cudaEventCreate(&e[1]), "cudaEventCreate", sgline);
	for (int i = 0; i < p->ncand && !rc; i++) {
		rc = time_candidate(m, s, p, i, a, b, cin, c, pa, pb, e, &ms[i], sgline);
		if (!rc && ms[i] >= 0 && (ms[best] < 0 || ms[i] < 0.99f * ms[best]))
			best = i;
	}
	if (!rc && save)
		rc = copy_c(m, s, k, c, save, size, 0, sgline);
	for (int i = 0; i < 2; i++)
		if (e[i])
			(void)cudaEventDestroy(e[i]);
	free(save);
	if (!rc && ms[best] >= 0) {
		p->algo = p->cand[best];
		p->ws_need = p->cand_ws[best];
		m->ntuned++;
	}
	return rc;
}

int
sgrt_gemm(SgrtModel *m, int s, const SgrtGemm *g, const void *a,
          const void *b, void *c, const char *name, int sgline)
{
	GemmKey key;
	GemmPlan *p = NULL;
	double alpha = g->alpha, beta = g->beta;
	float alpha32, beta32;
	const void *pa = &alpha, *pb = &beta;
	int h;

	SGRT_TRY(check_gemm(m, s, g, sgline));
	SGRT_TRY(ready(m, sgline));
	const void *cin = g->c_in && beta != 0 ? g->c_in : c; /* the C read */
	make_key(m, g, a, b, cin, c, &key);
	if (cin != c) {
		int size = 4;
		cudaDataType_t t;
		(void)cuda_type(g->dtype, &t, &size);
		uint64_t nc = extent(key.m, key.n, key.ldc, key.batch, key.stride_c, size);
		if (overlap(c, nc, cin, nc))
			return sgrt_fail(m, SGRT_EUSAGE, sgline,
			                 "a matmul's C (c_in) overlaps its result without being it");
	}
	SGRT_TRY(plan_for_stream(m, s, &key, g->bias, g->aux, &p, sgline));
	if (alpha == 0 && beta == 0)
		alpha = 1;
	if (g->dtype != SGRT_F64) {
		alpha32 = (float)alpha;
		beta32 = (float)beta;
		pa = &alpha32;
		pb = &beta32;
	}
	if (g->bias)
		CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
		         CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
		         sizeof g->bias), sgline);
	if (has_aux(g->epilogue) && !p->by_kernel)
		CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
		         CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
		         sizeof g->aux), sgline);
	if (!p->tuned)
		SGRT_TRY(tune_plan(m, s, p, g, a, b, cin, c, pa, pb, sgline));
	h = sgrt_op_begin(m, s, SGRT_OP_KERNEL, name ? name : "matmul", sgline);
	CHECK_LT(m, cublasLtMatmul((cublasLtHandle_t)m->lt, p->op, pa, b, p->la,
	         a, p->lb, pb, cin, p->lc, c, p->lc, &p->algo, m->ws[s],
	         m->ws_have[s], m->stream[s]), sgline);
	SGRT_TRY(sgrt_op_end(m, h));
	return p->by_kernel ? epilogue_kernel(m, s, g, &key, c, sgline) : SGRT_OK;
}

int
sgrt_gemm_tuned(const SgrtModel *m)
{
	return m->ntuned;
}

void
sgrt_blas_release(SgrtModel *m)
{
	int i;

	for (i = 0; i < m->plans.n; i++)
		plan_free(sgrt_table_at(&m->plans, i));
	sgrt_table_free(&m->plans);
	for (i = 0; m->ws && i < m->nstreams; i++)
		if (m->ws[i])
			(void)cudaFree(m->ws[i]);
	if (m->lt)
		cublasLtDestroy((cublasLtHandle_t)m->lt);
	m->lt = NULL;
}
