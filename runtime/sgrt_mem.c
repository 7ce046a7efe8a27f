/*
 * sgrt_mem.c - device and pinned memory, and the peak accounting.
 *
 * The compiler plans each call's memory statically: one arena of the
 * plan's size, allocated once at sgrt_create, with every value at an
 * offset the plan chose (and the per-stream reuse rule kept by the plan).
 * Besides it a model owns buffers that outlive calls (params, consts,
 * optimizer state), pinned host buffers (to_host, offload) and, where a
 * size is only known late, stream-ordered scratch.  Every device byte is
 * counted in `live` and the largest `live` seen is the peak that
 * `--bench` reports.  The maps remember each buffer's size for the
 * accounting and free whatever is left at destruction.
 */
#include <stdlib.h>
#include <string.h>

#include "sgrt_impl.h"

/* ------------------------------------------------------------------ pointer map */

/* Fibonacci hash of an address into [0, cap). */
static size_t
slot_of(uintptr_t k, size_t cap)
{
	return (size_t)((k >> 4) * 0x9e3779b97f4a7c15ull) & (cap - 1);
}

/* Doubles the table (from 16). */
static int
grow(SgrtPtrMap *pm)
{
	size_t cap = pm->cap ? pm->cap * 2 : 16, i;
	uintptr_t *key = calloc(cap, sizeof *key);
	size_t *val = calloc(cap, sizeof *val);

	if (!key || !val) {
		free(key);
		free(val);
		return SGRT_ENOMEM;
	}
	for (i = 0; i < pm->cap; i++) {
		size_t j;
		if (!pm->key[i])
			continue;
		for (j = slot_of(pm->key[i], cap); key[j]; j = (j + 1) & (cap - 1))
			;
		key[j] = pm->key[i];
		val[j] = pm->val[i];
	}
	free(pm->key);
	free(pm->val);
	pm->key = key;
	pm->val = val;
	pm->cap = cap;
	return SGRT_OK;
}

int
sgrt_ptrmap_put(SgrtPtrMap *pm, const void *p, size_t size)
{
	uintptr_t k = (uintptr_t)p;
	size_t j;

	if (!k)
		return SGRT_EUSAGE;
	if ((pm->n + 1) * 2 > pm->cap && grow(pm))
		return SGRT_ENOMEM;
	for (j = slot_of(k, pm->cap); pm->key[j] && pm->key[j] != k;
	     j = (j + 1) & (pm->cap - 1))
		;
	if (!pm->key[j])
		pm->n++;
	pm->key[j] = k;
	pm->val[j] = size;
	return SGRT_OK;
}

int
sgrt_ptrmap_take(SgrtPtrMap *pm, const void *p, size_t *size)
{
	uintptr_t k = (uintptr_t)p;
	size_t j, i, mask = pm->cap - 1;

	if (!pm->cap || !k)
		return 0;
	for (j = slot_of(k, pm->cap); pm->key[j] != k; j = (j + 1) & mask)
		if (!pm->key[j])
			return 0;
	*size = pm->val[j];
	pm->key[j] = 0;
	pm->n--;
	/* Backward-shift deletion: move later members of the probe run
	 * into the hole when their home slot does not lie after it. */
	for (i = (j + 1) & mask; pm->key[i]; i = (i + 1) & mask) {
		size_t home = slot_of(pm->key[i], pm->cap);
		if (((i - home) & mask) >= ((i - j) & mask)) {
			pm->key[j] = pm->key[i];
			pm->val[j] = pm->val[i];
			pm->key[i] = 0;
			j = i;
		}
	}
	return 1;
}

void
sgrt_ptrmap_free(SgrtPtrMap *pm)
{
	free(pm->key);
	free(pm->val);
	memset(pm, 0, sizeof *pm);
}

/* ------------------------------------------------------------------ accounting */

void
sgrt_mem_account(SgrtModel *m, long long delta)
{
	if (delta < 0 && (size_t)-delta > m->live)
		m->live = 0;
	else
		m->live += delta;
	if (m->live > m->peak)
		m->peak = m->live;
}

size_t
sgrt_live_bytes(const SgrtModel *m)
{
	return m->live;
}

size_t
sgrt_peak_bytes(const SgrtModel *m)
{
	return m->peak;
}

void
sgrt_reset_peak(SgrtModel *m)
{
	m->peak = m->live;
}

void *
sgrt_arena(const SgrtModel *m)
{
	return m->arena;
}

size_t
sgrt_arena_bytes(const SgrtModel *m)
{
	return m->arena_bytes;
}

/* ------------------------------------------------------------------ allocation */

int
sgrt_device_alloc(SgrtModel *m, void **p, size_t bytes, const char *what,
                  int sgline)
{
	cudaError_t e;

	*p = NULL;
	e = cudaMalloc(p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return sgrt_fail(m, SGRT_ECUDA, sgline,
		                 "cudaMalloc failed: %s (%s) for %zu bytes of %s",
		                 cudaGetErrorString(e), cudaGetErrorName(e), bytes,
		                 what ? what : "memory");
	}
	if (sgrt_ptrmap_put(&m->owned, *p, bytes)) {
		(void)cudaFree(*p);
		*p = NULL;
		return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of memory");
	}
	sgrt_mem_account(m, (long long)bytes);
	return SGRT_OK;
}

int
sgrt_device_free(SgrtModel *m, void *p)
{
	size_t bytes;

	if (!p)
		return SGRT_OK;
	if (!sgrt_ptrmap_take(&m->owned, p, &bytes))
		return sgrt_fail(m, SGRT_EUSAGE, 0,
		                 "sgrt_device_free of memory the model does not own");
	sgrt_mem_account(m, -(long long)bytes);
	SGRT_CHECK_CUDA(m, cudaFree(p), 0);
	return SGRT_OK;
}

int
sgrt_host_alloc(SgrtModel *m, void **p, size_t bytes, int sgline)
{
	*p = NULL;
	SGRT_CHECK_CUDA(m, cudaHostAlloc(p, bytes ? bytes : 1,
	                cudaHostAllocDefault), sgline);
	if (sgrt_ptrmap_put(&m->pinned, *p, bytes)) {
		(void)cudaFreeHost(*p);
		*p = NULL;
		return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of memory");
	}
	return SGRT_OK;
}

int
sgrt_host_free(SgrtModel *m, void *p)
{
	size_t bytes;

	if (!p)
		return SGRT_OK;
	if (!sgrt_ptrmap_take(&m->pinned, p, &bytes))
		return sgrt_fail(m, SGRT_EUSAGE, 0,
		                 "sgrt_host_free of memory the model does not own");
	SGRT_CHECK_CUDA(m, cudaFreeHost(p), 0);
	return SGRT_OK;
}

int
sgrt_alloc_async(SgrtModel *m, void **p, size_t bytes, int s, int sgline)
{
	*p = NULL;
	if (s < 0 || s >= m->nstreams)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
	SGRT_CHECK_CUDA(m, cudaMallocAsync(p, bytes ? bytes : 1, m->stream[s]),
	                sgline);
	if (sgrt_ptrmap_put(&m->scratch, *p, bytes)) {
		(void)cudaFreeAsync(*p, m->stream[s]);
		*p = NULL;
		return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of memory");
	}
	sgrt_mem_account(m, (long long)bytes);
	return SGRT_OK;
}

int
sgrt_free_async(SgrtModel *m, void *p, int s, int sgline)
{
	size_t bytes;

	if (!p)
		return SGRT_OK;
	if (s < 0 || s >= m->nstreams)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
	if (!sgrt_ptrmap_take(&m->scratch, p, &bytes))
		return sgrt_fail(m, SGRT_EUSAGE, sgline,
		                 "sgrt_free_async of memory the model does not own");
	sgrt_mem_account(m, -(long long)bytes);
	SGRT_CHECK_CUDA(m, cudaFreeAsync(p, m->stream[s]), sgline);
	return SGRT_OK;
}

/* Frees every address of pm with fn. */
static void
free_all(SgrtPtrMap *pm, cudaError_t (*fn)(void *))
{
	size_t i;

	for (i = 0; i < pm->cap; i++)
		if (pm->key[i])
			(void)fn((void *)pm->key[i]);
	sgrt_ptrmap_free(pm);
}

void
sgrt_mem_release(SgrtModel *m)
{
	free_all(&m->owned, cudaFree);
	free_all(&m->scratch, cudaFree);
	free_all(&m->pinned, cudaFreeHost);
	if (m->arena)
		(void)cudaFree(m->arena);
	m->arena = NULL;
	m->live = 0;
}

/* ------------------------------------------------------------------ copies */

int
sgrt_copy(SgrtModel *m, int s, void *dst, const void *src, size_t bytes,
          const char *name, int sgline)
{
	int h;

	if (s < 0 || s >= m->nstreams)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
	h = sgrt_op_begin(m, s, SGRT_OP_COPY, name ? name : "copy", sgline);
	SGRT_CHECK_CUDA(m, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
	                m->stream[s]), sgline);
	return sgrt_op_end(m, h);
}

int
sgrt_memset(SgrtModel *m, int s, void *dst, int byte, size_t bytes,
            const char *name, int sgline)
{
	int h;

	if (s < 0 || s >= m->nstreams)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
	h = sgrt_op_begin(m, s, SGRT_OP_COPY, name ? name : "memset", sgline);
	SGRT_CHECK_CUDA(m, cudaMemsetAsync(dst, byte, bytes, m->stream[s]),
	                sgline);
	return sgrt_op_end(m, h);
}

int
sgrt_grow_stream_buffer(SgrtModel *m, int s, void **buf, size_t *have, size_t need, int sgline)
{
	if (need <= *have)
		return SGRT_OK;
	if (*buf) {
		SGRT_CHECK_CUDA(m, cudaStreamSynchronize(m->stream[s]), sgline);
		SGRT_CHECK_CUDA(m, cudaFree(*buf), sgline);
		sgrt_mem_account(m, -(long long)*have);
		*buf = NULL;
		*have = 0;
	}
	SGRT_CHECK_CUDA(m, cudaMalloc(buf, need), sgline);
	sgrt_mem_account(m, (long long)need);
	*have = need;
	return SGRT_OK;
}
