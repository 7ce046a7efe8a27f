/*
 * sgrt_cudnn_graph.c - building, planning and running graphs of cuDNN's
 * backend API, for sgrt_attn_cudnn.c and sgrt_conv_cudnn.c
 * (sgrt_cudnn_graph.h says what each function does).
 */
#include <stdbool.h>
#include <string.h>

#include "sgrt_impl.h"

#if SGRT_HAVE_CUDNN_H
#include "sgrt_cudnn_graph.h"

int
sgrt_cudnn_api(void *lib, SgrtCudnnApi *api)
{
	static const SgrtSym sym[] = {
		{"cudnnBackendCreateDescriptor", offsetof(SgrtCudnnApi, Create)},
		{"cudnnBackendDestroyDescriptor", offsetof(SgrtCudnnApi, Destroy)},
		{"cudnnBackendFinalize", offsetof(SgrtCudnnApi, Finalize)},
		{"cudnnBackendSetAttribute", offsetof(SgrtCudnnApi, Set)},
		{"cudnnBackendGetAttribute", offsetof(SgrtCudnnApi, Get)},
		{"cudnnBackendExecute", offsetof(SgrtCudnnApi, Execute)},
	};
	return sgrt_dlsyms(lib, sym, sizeof sym / sizeof sym[0], api);
}

/* ------------------------------------------------------------------ graphs */

void
sgrt_cg_init(SgrtCudnnGraph *b, const SgrtCudnnApi *f, int64_t next_virtual)
{
	b->f = f;
	b->nd = b->nop = 0;
	b->next = next_virtual;
	b->ok = 1;
	b->fail_status = 0;
	b->fail_what = 0;
}

void
sgrt_cg_free(SgrtCudnnGraph *b)
{
	while (b->nd > 0)
		(void)b->f->Destroy(b->d[--b->nd]);
	b->nop = 0;
}

static void
failed(SgrtCudnnGraph *b, cudnnStatus_t st, long what)
{
	if (b->ok) {
		b->ok = 0;
		b->fail_status = (int)st;
		b->fail_what = what;
	}
}

cudnnBackendDescriptor_t
sgrt_cg_new(SgrtCudnnGraph *b, cudnnBackendDescriptorType_t t)
{
	cudnnBackendDescriptor_t d = NULL;
	cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
	if (!b->ok || b->nd == SGRT_CG_MAXDESC ||
	    (st = b->f->Create(t, &d)) != CUDNN_STATUS_SUCCESS) {
		failed(b, st, -(long)t);
		return NULL;
	}
	return b->d[b->nd++] = d;
}

void
sgrt_cg_set(SgrtCudnnGraph *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
            cudnnBackendAttributeType_t t, int64_t n, const void *v)
{
	cudnnStatus_t st;
	if (b->ok && (st = b->f->Set(d, a, t, n, v)) != CUDNN_STATUS_SUCCESS)
		failed(b, st, (long)a);
}

void
sgrt_cg_setd(SgrtCudnnGraph *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
             cudnnBackendDescriptor_t v)
{
	sgrt_cg_set(b, d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

void
sgrt_cg_fin(SgrtCudnnGraph *b, cudnnBackendDescriptor_t d)
{
	cudnnStatus_t st;
	if (b->ok && (st = b->f->Finalize(d)) != CUDNN_STATUS_SUCCESS)
		failed(b, st, 0);
}

void
sgrt_cg_op(SgrtCudnnGraph *b, cudnnBackendDescriptor_t op)
{
	sgrt_cg_fin(b, op);
	if (b->ok && b->nop < SGRT_CG_MAXOP)
		b->op[b->nop++] = op;
	else
		failed(b, CUDNN_STATUS_SUCCESS, 0);
}

cudnnBackendDescriptor_t
sgrt_cg_tensor(SgrtCudnnGraph *b, int64_t uid, cudnnDataType_t dt, const int64_t *dim,
               const int64_t *st, int byvalue)
{
	cudnnBackendDescriptor_t t = sgrt_cg_new(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	int64_t packed[4] = {dim[1] * dim[2] * dim[3], dim[2] * dim[3], dim[3], 1}, align = 16;
	bool virt = uid == 0, val = byvalue != 0;
	if (!uid)
		uid = b->next++;
	sgrt_cg_set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
	sgrt_cg_set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
	sgrt_cg_set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st ? st : packed);
	sgrt_cg_set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
	sgrt_cg_set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
	sgrt_cg_set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
	if (val)
		sgrt_cg_set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &val);
	sgrt_cg_fin(b, t);
	return t;
}

int64_t
sgrt_cg_configs(SgrtCudnnGraph *b, cudnnHandle_t h, cudnnBackendHeurMode_t mode,
                cudnnBackendDescriptor_t *cfg, int max)
{
	int64_t n = 0;
	cudnnStatus_t st;
	cudnnBackendDescriptor_t g = sgrt_cg_new(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	sgrt_cg_set(b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, b->nop,
	            b->op);
	sgrt_cg_set(b, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
	sgrt_cg_fin(b, g);
	cudnnBackendDescriptor_t heur = sgrt_cg_new(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
	sgrt_cg_setd(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g);
	sgrt_cg_set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
	sgrt_cg_fin(b, heur);
	for (int i = 0; i < max; i++)
		cfg[i] = sgrt_cg_new(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	if (b->ok && (st = b->f->Get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
	                             CUDNN_TYPE_BACKEND_DESCRIPTOR, max, &n, cfg)) !=
	                     CUDNN_STATUS_SUCCESS)
		failed(b, st, CUDNN_ATTR_ENGINEHEUR_RESULTS);
	return b->ok ? n : 0;
}

/* ------------------------------------------------------------------ plans and packs */

cudnnBackendDescriptor_t
sgrt_cudnn_plan(const SgrtCudnnApi *f, cudnnHandle_t h, cudnnBackendDescriptor_t cfg,
                size_t *ws)
{
	cudnnBackendDescriptor_t plan = NULL;
	int64_t bytes = -1;
	if (f->Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
		return NULL;
	if (f->Set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ==
	            CUDNN_STATUS_SUCCESS &&
	    f->Set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
	           &cfg) == CUDNN_STATUS_SUCCESS &&
	    f->Finalize(plan) == CUDNN_STATUS_SUCCESS &&
	    f->Get(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, NULL,
	           &bytes) == CUDNN_STATUS_SUCCESS &&
	    bytes >= 0) {
		*ws = (size_t)bytes;
		return plan;
	}
	(void)f->Destroy(plan);
	return NULL;
}

void
sgrt_cudnn_pack_free(const SgrtCudnnApi *f, SgrtCudnnPack *kp)
{
	if (kp->d)
		(void)f->Destroy(kp->d);
	memset(kp, 0, sizeof *kp);
}

cudnnStatus_t
sgrt_cudnn_pack(const SgrtCudnnApi *f, SgrtCudnnPack *kp, int n, const int64_t *uid,
                void *const *ptr, void *ws)
{
	if (kp->d && kp->n == n && kp->ws == ws &&
	    memcmp(kp->ptr, ptr, (size_t)n * sizeof ptr[0]) == 0)
		return CUDNN_STATUS_SUCCESS;
	sgrt_cudnn_pack_free(f, kp);
	if (n > SGRT_CUDNN_PACK_MAX)
		return CUDNN_STATUS_BAD_PARAM;
	cudnnBackendDescriptor_t vp = NULL;
	cudnnStatus_t e = f->Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
	if (e == CUDNN_STATUS_SUCCESS)
		e = f->Set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid);
	if (e == CUDNN_STATUS_SUCCESS)
		e = f->Set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptr);
	if (e == CUDNN_STATUS_SUCCESS)
		e = f->Set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
	if (e == CUDNN_STATUS_SUCCESS)
		e = f->Finalize(vp);
	if (e != CUDNN_STATUS_SUCCESS) {
		if (vp)
			(void)f->Destroy(vp);
		return e;
	}
	kp->d = vp;
	kp->n = n;
	memcpy(kp->ptr, ptr, (size_t)n * sizeof ptr[0]);
	kp->ws = ws;
	return CUDNN_STATUS_SUCCESS;
}

#endif
