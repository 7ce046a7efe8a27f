/*
 * interp_linalg.c - interpreter kernels for matmul, linear and
 * scaled_dot_product_attention, through OpenBLAS's CBLAS.
 *
 * f64 goes through dgemm; f32, f16 and bf16 through sgemm (f16 and bf16
 * are widened to float first, the product accumulates in f32 and is
 * rounded once, as on the GPU); integers through a plain int64 loop.
 *
 * OpenBLAS is loaded (dlopen) by the first product an interpreter runs,
 * not linked into sgc: loading it starts its worker threads and brings in
 * libquadmath, whose printf hooks send every printf of the process down
 * glibc's slow path, and the commands that only compile need neither.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"

#include <cblas.h>
#undef I /* OpenBLAS's cblas.h brings in <complex.h>'s I */

/* Which engine a product of dtype dt uses. */
enum { MM_F32, MM_F64, MM_INT };

static int
mm_kind(DType dt)
{
	return dt == DT_F64 ? MM_F64 : dtype_is_float(dt) ? MM_F32 : MM_INT;
}

static size_t
mm_size(int kind)
{
	return kind == MM_F32 ? sizeof(float) : sizeof(double);
}

/* x's elements as a contiguous float, double or int64 array (kind): the
 * data itself when it already is one, else a converted copy (*tmp). */
static void *
mm_operand(const Tensor *x, int kind, void **tmp)
{
	*tmp = NULL;
	if ((kind == MM_F32 && x->dt == DT_F32) ||
	    (kind == MM_F64 && x->dt == DT_F64) ||
	    (kind == MM_INT && x->dt == DT_I64))
		return x->data;
	void *p = xmalloc((size_t)x->numel * mm_size(kind));
	for (int64_t i = 0; i < x->numel; i++) {
		if (kind == MM_F32)
			((float *)p)[i] = (float)interp_getf(x, i);
		else if (kind == MM_F64)
			((double *)p)[i] = interp_getf(x, i);
		else
			((int64_t *)p)[i] = interp_geti(x, i);
	}
	*tmp = p;
	return p;
}

/* OpenBLAS's products, loaded for one interpreter (Interp.blas). */
struct InterpBlas {
	void *lib;
	__typeof__(cblas_sgemm) *sgemm;
	__typeof__(cblas_dgemm) *dgemm;
};

/* The library file: Debian's libopenblas0 (any of its variants). */
#define OPENBLAS_SONAME "libopenblas.so.0"

/* Loads OpenBLAS for I once; 0 after reporting (at node n) why not. */
static int
blas_load(Interp *I, const Node *n)
{
	if (I->blas)
		return 1;
	void *lib = dlopen(OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		interp_fail(I, n, "matrix products need OpenBLAS (%s): %s", OPENBLAS_SONAME,
		            dlerror());
		return 0;
	}
	struct InterpBlas *b = xmalloc(sizeof *b);
	b->lib = lib;
	*(void **)&b->sgemm = dlsym(lib, "cblas_sgemm");
	*(void **)&b->dgemm = dlsym(lib, "cblas_dgemm");
	if (!b->sgemm || !b->dgemm) {
		interp_fail(I, n, "%s has no cblas_sgemm/cblas_dgemm", OPENBLAS_SONAME);
		dlclose(lib);
		free(b);
		return 0;
	}
	I->blas = b;
	return 1;
}

void
interp_blas_free(Interp *I)
{
	if (!I->blas)
		return;
	dlclose(I->blas->lib);
	free(I->blas);
	I->blas = NULL;
}

/* C[m,n] = A[m,k] * op(B) where op(B) is B[k,n], or B[n,k] transposed when
 * bt; all row-major.  OpenBLAS is loaded (blas_load) for float kinds. */
static void
gemm(const Interp *I, int kind, int64_t m, int64_t n, int64_t k, const void *a,
     const void *b, int bt, void *c)
{
	if (m == 0 || n == 0)
		return;
	if (k == 0) {
		memset(c, 0, (size_t)(m * n) * mm_size(kind));
		return;
	}
	enum CBLAS_TRANSPOSE tb = bt ? CblasTrans : CblasNoTrans;
	int ldb = (int)(bt ? k : n);
	if (kind == MM_F32) {
		I->blas->sgemm(CblasRowMajor, CblasNoTrans, tb, (int)m, (int)n, (int)k,
		            1.0f, a, (int)k, b, ldb, 0.0f, c, (int)n);
	} else if (kind == MM_F64) {
		I->blas->dgemm(CblasRowMajor, CblasNoTrans, tb, (int)m, (int)n, (int)k,
		            1.0, a, (int)k, b, ldb, 0.0, c, (int)n);
	} else {
		const int64_t *A = a, *B = b;
		int64_t *C = c;
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				uint64_t s = 0;
				for (int64_t p = 0; p < k; p++)
					s += (uint64_t)A[i * k + p] *
					     (uint64_t)(bt ? B[j * k + p] : B[p * n + j]);
				C[i * n + j] = (int64_t)s;
			}
	}
}

/* Stores an engine array into r, rounding to r's dtype. */
static void
mm_store(Tensor *r, int kind, const void *c)
{
	for (int64_t i = 0; i < r->numel; i++) {
		if (kind == MM_F32)
			interp_setf(r, i, ((const float *)c)[i]);
		else if (kind == MM_F64)
			interp_setf(r, i, ((const double *)c)[i]);
		else
			interp_seti(r, i, ((const int64_t *)c)[i]);
	}
}

/* The batch dims of a and b (all but the last two; 1-D operands have
 * none), broadcast: fills the batch shape and per-batch-dim matrix strides
 * (0 along a broadcast dim); returns the batch rank. */
static int
batch_bcast(const Tensor **ops, int nop, int64_t *shape, int64_t st[][SG_MAXRANK])
{
	int rank[4];
	const int64_t *d[4];
	for (int k = 0; k < nop && k < 4; k++) {
		rank[k] = ops[k]->rank;
		d[k] = ops[k]->shape;
	}
	return shape_batch_bcast(nop, rank, d, shape, st);
}

/* Offsets of batch b's matrices in each operand. */
static void
batch_offsets(int rank, const int64_t *shape, int64_t st[][SG_MAXRANK],
              int nop, int64_t b, int64_t *off)
{
	for (int k = 0; k < nop; k++)
		off[k] = 0;
	for (int d = rank - 1; d >= 0; d--) {
		int64_t i = b % shape[d];
		b /= shape[d];
		for (int k = 0; k < nop; k++)
			off[k] += i * st[k][d];
	}
}

/* torch.matmul: 1-D operands get a dim of 1 prepended (a) or appended (b)
 * and removed from the result; batch dims broadcast. */
int
interp_matmul(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *a = in[0], *b = in[1], *r = out[0];
	int kind = mm_kind((DType)r->dt);
	if (kind != MM_INT && !blas_load(I, n))
		return 1;
	int64_t m = a->rank >= 2 ? a->shape[a->rank - 2] : 1;
	int64_t k = a->rank ? a->shape[a->rank - 1] : 1;
	int64_t nn = b->rank >= 2 ? b->shape[b->rank - 1] : 1;
	int64_t kb = b->rank >= 2 ? b->shape[b->rank - 2] : b->shape[0];
	if (a->rank == 0 || b->rank == 0 || k != kb)
		return interp_fail(I, n, "internal: matmul shapes do not agree");
	const Tensor *ops[2] = {a, b};
	int64_t bshape[SG_MAXRANK], st[2][SG_MAXRANK], off[2];
	int brank = batch_bcast(ops, 2, bshape, st);
	int64_t nb = 1;
	for (int d = 0; d < brank; d++)
		nb *= bshape[d];
	if (nb * m * nn != r->numel)
		return interp_fail(I, n, "internal: matmul result has %lld elements, "
		                   "expected %lld", (long long)r->numel,
		                   (long long)(nb * m * nn));
	void *ta, *tb;
	char *A = mm_operand(a, kind, &ta), *B = mm_operand(b, kind, &tb);
	size_t es = mm_size(kind);
	char *C = xmalloc((size_t)r->numel * es);
	for (int64_t i = 0; i < nb; i++) {
		batch_offsets(brank, bshape, st, 2, i, off);
		gemm(I, kind, m, nn, k, A + (size_t)off[0] * es, B + (size_t)off[1] * es,
		     0, C + (size_t)(i * m * nn) * es);
	}
	mm_store(r, kind, C);
	free(C);
	free(ta);
	free(tb);
	return 0;
}

/* x @ w^T + b over the last dim of x; w is [out, in] (or [in]: one output,
 * the dim dropped). */
int
interp_linear(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *x = in[0], *w = in[1], *bias = n->nopnd > 2 ? in[2] : NULL;
	Tensor *r = out[0];
	int kind = mm_kind((DType)r->dt);
	if (kind != MM_INT && !blas_load(I, n))
		return 1;
	int64_t k = x->rank ? x->shape[x->rank - 1] : 1;
	int64_t nout = w->rank == 2 ? w->shape[0] : 1;
	int64_t rows = 1; /* the leading dims (k may be 0) */
	for (int d = 0; d + 1 < x->rank; d++)
		rows *= x->shape[d];
	if ((w->rank == 2 ? w->shape[1] : w->numel) != k || rows * nout != r->numel)
		return interp_fail(I, n, "internal: linear shapes do not agree");
	void *tx, *tw;
	void *X = mm_operand(x, kind, &tx), *W = mm_operand(w, kind, &tw);
	size_t es = mm_size(kind);
	char *C = xmalloc((size_t)r->numel * es);
	gemm(I, kind, rows, nout, k, X, W, 1, C);
	if (bias) {
		for (int64_t i = 0; i < r->numel; i++) {
			int64_t j = bias->numel == 1 ? 0 : i % nout;
			if (kind == MM_F32)
				((float *)C)[i] += (float)interp_getf(bias, j);
			else if (kind == MM_F64)
				((double *)C)[i] += interp_getf(bias, j);
			else
				((int64_t *)C)[i] += interp_geti(bias, j);
		}
	}
	mm_store(r, kind, C);
	free(C);
	free(tx);
	free(tw);
	return 0;
}

/* Softmax of each row of s[tq, tk] in place (in double), after scaling,
 * the mask (at offset mo) and the causal mask (column j > row i is -inf:
 * top-left aligned tril); a row with no key left gives zeros. */
static void
attn_softmax(int kind, void *s, int64_t tq, int64_t tk, double scale, int causal,
             const AttnLoop *a, int64_t mo)
{
	double *row = xmalloc((size_t)(tk ? tk : 1) * sizeof *row);
	for (int64_t i = 0; i < tq; i++) {
		double m = -INFINITY, sum = 0;
		for (int64_t j = 0; j < tk; j++) {
			double v = kind == MM_F32 ? ((float *)s)[i * tk + j]
			                          : ((double *)s)[i * tk + j];
			row[j] = causal && j > i ? -INFINITY : v * scale + interp_attn_bias(a, mo, i, j);
			m = isnan(row[j]) || row[j] > m ? row[j] : m;
		}
		for (int64_t j = 0; j < tk; j++)
			sum += m == -INFINITY ? 0 : exp(row[j] - m);
		for (int64_t j = 0; j < tk; j++) {
			double p = m == -INFINITY ? 0 : exp(row[j] - m) / sum;
			if (kind == MM_F32)
				((float *)s)[i * tk + j] = (float)p;
			else
				((double *)s)[i * tk + j] = p;
		}
	}
	free(row);
}

/* softmax(q k^T * scale + mask) v over [..., T, head_dim], batch dims
 * broadcast (with enable_gqa, each k and v head serving its group of q
 * heads); with dropout_p the weights dropped first. */
int
interp_sdpa(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *q = in[0], *k = in[1], *v = in[2], *r = out[0];
	if (q->rank < 2 || k->rank < 2 || v->rank < 2)
		return interp_fail(I, n, "internal: attention operands need 2 dims");
	int kind = mm_kind((DType)r->dt) == MM_F64 ? MM_F64 : MM_F32;
	if (kind != MM_INT && !blas_load(I, n))
		return 1;
	int64_t tq = q->shape[q->rank - 2], d = q->shape[q->rank - 1];
	int64_t tk = k->shape[k->rank - 2], dv = v->shape[v->rank - 1];
	const Attr *sa = ir_attr(n, "scale");
	double scale = sa ? sa->f : 1.0 / sqrt((double)d);
	int causal = ir_attr_int(n, "causal", 0) != 0;
	const Tensor *t[6] = {q, k, v, n->nopnd > 3 ? in[3] : NULL, NULL, NULL};
	AttnLoop al;
	interp_attn_loop(&al, n, t);
	if (al.nb * tq * dv != r->numel)
		return interp_fail(I, n, "internal: attention result size disagrees");
	void *tmp[3];
	char *Q = mm_operand(q, kind, &tmp[0]), *K = mm_operand(k, kind, &tmp[1]);
	char *V = mm_operand(v, kind, &tmp[2]);
	size_t es = mm_size(kind);
	char *S = xmalloc((size_t)(tq * tk + 1) * es);
	char *O = xmalloc((size_t)r->numel * es);
	/* dropout_p: the weights times their dropout factors */
	double *z = ir_draws(n) ? xmalloc((size_t)(tk + 1) * sizeof *z) : NULL;
	for (int64_t b = 0; b < al.nb; b++) {
		int64_t off[6];
		interp_attn_offsets(&al, b, off);
		gemm(I, kind, tq, tk, d, Q + (size_t)off[0] * es, K + (size_t)off[1] * es,
		     1, S);
		attn_softmax(kind, S, tq, tk, scale, causal, &al, off[3]);
		for (int64_t i = 0; z && i < tq; i++) {
			interp_attn_drop_row(I, n, (DType)r->dt, b * tq + i, tk, z);
			for (int64_t j = 0; j < tk; j++) {
				if (kind == MM_F32)
					((float *)S)[i * tk + j] *= (float)z[j];
				else
					((double *)S)[i * tk + j] *= z[j];
			}
		}
		gemm(I, kind, tq, dv, tk, S, V + (size_t)off[2] * es, 0,
		     O + (size_t)(b * tq * dv) * es);
	}
	mm_store(r, kind, O);
	free(S);
	free(O);
	free(z);
	for (int i = 0; i < 3; i++)
		free(tmp[i]);
	return 0;
}

/* The product for conv2d's im2col kernels (interp_conv.c). */
int
interp_gemm(Interp *I, const Node *n, int f64, int64_t m, int64_t nn, int64_t k,
            const void *a, const void *b, int bt, void *c)
{
	if (!blas_load(I, n))
		return 0;
	gemm(I, f64 ? MM_F64 : MM_F32, m, nn, k, a, b, bt, c);
	return 1;
}
