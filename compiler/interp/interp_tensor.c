/*
 * interp_tensor.c - the interpreter's tensors: allocation, poisoning,
 * element access with PyTorch's conversions, scalar operands and
 * broadcasting iteration.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "interp.h"

int
interp_fail(Interp *I, const Node *n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (I->m && I->m->diag) {
		diag_vreport(I->m->diag, "error", n->loc, fmt, ap);
		I->m->diag->nerrors++;
	} else {
		fputs("sgc: error: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
	return 1;
}

/* A new tensor of zeros, owned by I's current call (freed when it ends);
 * I may be NULL for a tensor the caller frees. */
Tensor *
interp_tensor_new(Interp *I, DType dt, int rank, const int64_t *shape)
{
	Tensor *t = xmalloc(sizeof *t);
	memset(t, 0, sizeof *t);
	t->dt = (uint8_t)dt;
	t->rank = (uint8_t)rank;
	t->numel = 1;
	for (int i = 0; i < rank; i++) {
		t->shape[i] = shape[i];
		t->numel *= shape[i];
	}
	size_t bytes = (size_t)t->numel * (size_t)dtype_size(dt);
	t->data = calloc(bytes ? bytes : 1, 1);
	if (!t->data) {
		fprintf(stderr, "sgc run: error: out of memory for a tensor of %s[",
		        dtype_name(dt));
		for (int i = 0; i < rank; i++)
			fprintf(stderr, "%s%lld", i ? ", " : "", (long long)shape[i]);
		fprintf(stderr, "] (%zu bytes)\n", bytes);
		out_of_memory(bytes);
	}
	if (I)
		vec_push(&I->owned, t);
	return t;
}

void
interp_tensor_free(Tensor *t)
{
	if (!t)
		return;
	free(t->data);
	free(t);
}

/* Fills t with the value a read of a buffer nobody wrote gives: NaN for
 * floats, the minimum for integers, 0xA5 bytes for bool. */
void
interp_poison(Tensor *t)
{
	if (!t->data)
		return;
	switch (t->dt) {
	case DT_I64:
		for (int64_t i = 0; i < t->numel; i++)
			((int64_t *)t->data)[i] = INT64_MIN;
		break;
	case DT_I32:
		for (int64_t i = 0; i < t->numel; i++)
			((int32_t *)t->data)[i] = INT32_MIN;
		break;
	case DT_BOOL:
		memset(t->data, 0xa5, (size_t)t->numel);
		break;
	default:
		for (int64_t i = 0; i < t->numel; i++)
			interp_setf(t, i, NAN);
	}
}

double
interp_getf(const Tensor *t, int64_t i)
{
	switch (t->dt) {
	case DT_F64: return ((const double *)t->data)[i];
	case DT_F32: return ((const float *)t->data)[i];
	case DT_F16: return half_f16_to_f32(((const uint16_t *)t->data)[i]);
	case DT_BF16: return half_bf16_to_f32(((const uint16_t *)t->data)[i]);
	case DT_I64: return (double)((const int64_t *)t->data)[i];
	case DT_I32: return ((const int32_t *)t->data)[i];
	case DT_BOOL: return ((const uint8_t *)t->data)[i] != 0;
	}
	ICE("bad dtype %d", t->dt);
}

/* A double truncated toward zero into [lo, hi]; NaN and out of range give
 * lo, as x86's conversion instructions (and so PyTorch on CPU) do. */
static int64_t
trunc_int(double v, double lo, double hi)
{
	if (!(v >= lo && v < hi))
		return (int64_t)lo;
	return (int64_t)v;
}

int64_t
interp_geti(const Tensor *t, int64_t i)
{
	switch (t->dt) {
	case DT_I64: return ((const int64_t *)t->data)[i];
	case DT_I32: return ((const int32_t *)t->data)[i];
	case DT_BOOL: return ((const uint8_t *)t->data)[i] != 0;
	default:
		return trunc_int(interp_getf(t, i), -0x1p63, 0x1p63);
	}
}

void
interp_setf(Tensor *t, int64_t i, double v)
{
	switch (t->dt) {
	case DT_F64: ((double *)t->data)[i] = v; break;
	case DT_F32: ((float *)t->data)[i] = (float)v; break;
	case DT_F16: ((uint16_t *)t->data)[i] = half_f32_to_f16((float)v); break;
	case DT_BF16: ((uint16_t *)t->data)[i] = half_f32_to_bf16((float)v); break;
	case DT_I64: ((int64_t *)t->data)[i] = trunc_int(v, -0x1p63, 0x1p63); break;
	case DT_I32: ((int32_t *)t->data)[i] = (int32_t)trunc_int(v, -0x1p31, 0x1p31); break;
	case DT_BOOL: ((uint8_t *)t->data)[i] = v != 0; break;
	}
}

void
interp_seti(Tensor *t, int64_t i, int64_t v)
{
	switch (t->dt) {
	case DT_F64: ((double *)t->data)[i] = (double)v; break;
	case DT_F32: ((float *)t->data)[i] = (float)v; break;
	case DT_F16: ((uint16_t *)t->data)[i] = half_f32_to_f16((float)v); break;
	case DT_BF16: ((uint16_t *)t->data)[i] = half_f32_to_bf16((float)v); break;
	case DT_I64: ((int64_t *)t->data)[i] = v; break;
	case DT_I32: ((int32_t *)t->data)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
	case DT_BOOL: ((uint8_t *)t->data)[i] = v != 0; break;
	}
}

double
interp_opmath(DType dt, double v)
{
	switch (dt) {
	case DT_F32: case DT_F16: case DT_BF16: return (float)v;
	default: return v;
	}
}

double
interp_round(DType dt, double v)
{
	Tensor t = {.dt = (uint8_t)dt, .rank = 0, .numel = 1};
	double buf;
	t.data = &buf;
	interp_setf(&t, 0, v);
	return interp_getf(&t, 0);
}

double
interp_opndf(const Node *n, int k, Tensor *t, int64_t off, DType dt)
{
	if (t) {
		double v = dtype_is_float(t->dt) ? interp_getf(t, off)
		           : dt == DT_F64        ? (double)interp_geti(t, off)
		                                 : (double)(float)interp_geti(t, off);
		return interp_opmath(dt, t->dt == dt ? v : interp_round(dt, v));
	}
	const Opnd *o = &n->opnd[k];
	switch (o->kind) {
	case OK_FLOAT: return interp_opmath(dt, o->f);
	case OK_INT: return dt == DT_F64 ? (double)o->i : (double)(float)o->i;
	case OK_BOOL: return o->i != 0;
	}
	ICE("operand %d of %s is not a number", k, op_name(n->op));
}

int64_t
interp_opndi(const Node *n, int k, Tensor *t, int64_t off, DType dt)
{
	int64_t v;
	if (t) {
		v = interp_geti(t, off);
	} else {
		const Opnd *o = &n->opnd[k];
		switch (o->kind) {
		case OK_FLOAT: v = trunc_int(o->f, -0x1p63, 0x1p63); break;
		case OK_INT: v = o->i; break;
		case OK_BOOL: v = o->i != 0; break;
		default: ICE("operand %d of %s is not a number", k, op_name(n->op));
		}
	}
	return dt == DT_I32 ? (int32_t)(uint32_t)(uint64_t)v : v;
}

void
interp_strides(int rank, const int64_t *shape, int64_t *stride)
{
	int64_t s = 1;
	for (int d = rank - 1; d >= 0; d--) {
		stride[d] = s;
		s *= shape[d];
	}
}

/* Operand k (NULL: a scalar) read at every index of shape: stride 0 along
 * the dims it broadcasts over. */
static void
bcast_strides(const Tensor *t, int rank, int64_t *stride)
{
	for (int d = 0; d < rank; d++)
		stride[d] = 0;
	if (!t)
		return;
	int64_t own[SG_MAXRANK];
	interp_strides(t->rank, t->shape, own);
	for (int d = 0; d < t->rank; d++) {
		int od = rank - t->rank + d;
		if (od >= 0 && t->shape[d] != 1)
			stride[od] = own[d];
	}
}

void
interp_iter_init(BcastIter *it, int rank, const int64_t *shape, Tensor **ops,
                 int nop)
{
	if (nop > 4)
		ICE("broadcast over %d operands", nop);
	memset(it, 0, sizeof *it);
	it->rank = rank;
	it->nop = nop;
	for (int d = 0; d < rank; d++)
		it->shape[d] = shape[d];
	for (int k = 0; k < nop; k++)
		bcast_strides(ops[k], rank, it->stride[k]);
}

/* Advances to the next index in row-major order. */
void
interp_iter_next(BcastIter *it)
{
	for (int d = it->rank - 1; d >= 0; d--) {
		if (++it->idx[d] < it->shape[d]) {
			for (int k = 0; k < it->nop; k++)
				it->off[k] += it->stride[k][d];
			return;
		}
		for (int k = 0; k < it->nop; k++)
			it->off[k] -= it->stride[k][d] * (it->idx[d] - 1);
		it->idx[d] = 0;
	}
}
