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
 * by every later call.  Concurrent streams must not share a workspace, so
 * each stream gets its own, allocated on its first product.
 */
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "sgrt_impl.h"

/* What makes two products the same plan.  Compared with memcmp: always
 * zeroed before it is filled. */
typedef struct {
	int dtype, trans_a, trans_b, bias, epilogue, tf32;
	int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
	uint32_t align_a, align_b, align_c, align_bias;
} GemmKey;

typedef struct {
	GemmKey key;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc; /* cuBLAS's A (our B), B (our A), C */
	cublasLtMatmulAlgo_t algo;
} GemmPlan;

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

/* The key of product g on these pointers (packed strides filled in). */
static void
make_key(const SgrtModel *m, const SgrtGemm *g, const void *a, const void *b,
         const void *c, GemmKey *k)
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
	k->align_bias = g->bias ? alignment(g->bias) : 0;
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
	default:
		return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	}
}

/* The operation descriptor: compute type, transposes, the epilogue (bias,
 * activation). */
static int
op_desc(SgrtModel *m, GemmPlan *p, const void *bias, int sgline)
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
	if (k->bias || k->epilogue) {
		int32_t epi = epilogue_of(k->bias, k->epilogue);
		CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
		         CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), sgline);
	}
	if (k->bias)
		CHECK_LT(m, cublasLtMatmulDescSetAttribute(p->op,
		         CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
		         sgline);
	return SGRT_OK;
}

/* Asks the heuristic for the best algorithm within the workspace. */
static int
pick_algo(SgrtModel *m, GemmPlan *p, int sgline)
{
	const GemmKey *k = &p->key;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	uint64_t ws = m->ws_bytes;
	int nres = 0, rc;

	memset(&res, 0, sizeof res);
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
	if (!rc)
		rc = sgrt_check_cublas(m, cublasLtMatmulAlgoGetHeuristic(
		    (cublasLtHandle_t)m->lt, p->op, p->la, p->lb, p->lc, p->lc,
		    pref, 1, &res, &nres), "cublasLtMatmulAlgoGetHeuristic",
		    sgline);
	cublasLtMatmulPreferenceDestroy(pref);
	if (rc)
		return rc;
	if (nres < 1)
		return sgrt_fail(m, SGRT_ECUBLAS, sgline,
		                 "cuBLASLt has no algorithm for a %lldx%lldx%lld "
		                 "matmul", (long long)k->m, (long long)k->n,
		                 (long long)k->k);
	p->algo = res.algo;
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

/* Builds the plan for key k (descriptors and algorithm). */
static int
plan_build(SgrtModel *m, GemmPlan *p, const void *bias, int sgline)
{
	const GemmKey *k = &p->key;
	cudaDataType_t t = CUDA_R_32F;
	int size;

	cuda_type(k->dtype, &t, &size);
	/* cuBLAS A = our B: stored k x n (n x k when trans_b) row-major. */
	SGRT_TRY(layout(m, &p->la, t, k->trans_b ? k->k : k->n,
	                k->trans_b ? k->n : k->k, k->ldb, k, k->stride_b, sgline));
	/* cuBLAS B = our A: stored m x k (k x m when trans_a) row-major. */
	SGRT_TRY(layout(m, &p->lb, t, k->trans_a ? k->m : k->k,
	                k->trans_a ? k->k : k->m, k->lda, k, k->stride_a, sgline));
	SGRT_TRY(layout(m, &p->lc, t, k->n, k->m, k->ldc, k, k->stride_c,
	                sgline));
	SGRT_TRY(op_desc(m, p, bias, sgline));
	return pick_algo(m, p, sgline);
}

/* The plan for key k, made on first use. */
static int
find_plan(SgrtModel *m, const GemmKey *k, const void *bias, GemmPlan **out,
          int sgline)
{
	GemmPlan *plans = m->plans;
	int i, rc;

	for (i = 0; i < m->nplans; i++)
		if (memcmp(&plans[i].key, k, sizeof *k) == 0) {
			*out = &plans[i];
			return SGRT_OK;
		}
	if (m->nplans == m->capplans) {
		int cap = m->capplans ? m->capplans * 2 : 16;
		plans = realloc(m->plans, cap * sizeof *plans);
		if (!plans)
			return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of memory");
		m->plans = plans;
		m->capplans = cap;
	}
	memset(&plans[m->nplans], 0, sizeof *plans);
	plans[m->nplans].key = *k;
	rc = plan_build(m, &plans[m->nplans], bias, sgline);
	if (rc) {
		plan_free(&plans[m->nplans]);
		return rc;
	}
	*out = &plans[m->nplans++];
	return SGRT_OK;
}

/* The handle, and stream s's workspace, made on first use. */
static int
ready(SgrtModel *m, int s, int sgline)
{
	if (!m->lt) {
		cublasLtHandle_t h;
		CHECK_LT(m, cublasLtCreate(&h), sgline);
		m->lt = h;
	}
	if (!m->ws[s]) {
		SGRT_CHECK_CUDA(m, cudaMalloc(&m->ws[s], m->ws_bytes), sgline);
		sgrt_mem_account(m, (long long)m->ws_bytes);
	}
	return SGRT_OK;
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
	if (g->epilogue < SGRT_EPI_NONE || g->epilogue > SGRT_EPI_GELU)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "bad matmul epilogue %d",
		                 g->epilogue);
	if (g->epilogue && g->dtype == SGRT_F64)
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "matmul epilogues are not supported for f64");
	return SGRT_OK;
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
	SGRT_TRY(ready(m, s, sgline));
	make_key(m, g, a, b, c, &key);
	SGRT_TRY(find_plan(m, &key, g->bias, &p, sgline));
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
	h = sgrt_op_begin(m, s, SGRT_OP_KERNEL, name ? name : "matmul", sgline);
	CHECK_LT(m, cublasLtMatmul((cublasLtHandle_t)m->lt, p->op, pa, b, p->la,
	         a, p->lb, pb, c, p->lc, c, p->lc, &p->algo, m->ws[s],
	         m->ws_bytes, m->stream[s]), sgline);
	return sgrt_op_end(m, h);
}

void
sgrt_blas_release(SgrtModel *m)
{
	GemmPlan *plans = m->plans;
	int i;

	for (i = 0; i < m->nplans; i++)
		plan_free(&plans[i]);
	free(m->plans);
	m->plans = NULL;
	m->nplans = m->capplans = 0;
	for (i = 0; m->ws && i < m->nstreams; i++)
		if (m->ws[i])
			(void)cudaFree(m->ws[i]);
	if (m->lt)
		cublasLtDestroy((cublasLtHandle_t)m->lt);
	m->lt = NULL;
}
