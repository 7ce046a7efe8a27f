/*
 * test_cudnn_pack.c - the variant pack sgrt_cudnn_graph.c keeps from call
 * to call (sgrt_cudnn_pack), on the CPU: the backend API is a table of
 * functions, here stubs that record what they are given.  A pack is made
 * on first use, kept while the pointers and workspace stay, made again
 * (the old one destroyed) when any of them or the count changes, left
 * empty after a failure so that the next call makes it again, and
 * destroyed by sgrt_cudnn_pack_free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sgrt_cudnn_graph.h"

/* What the stubs saw.  A descriptor is a counter's value cast. */
static struct {
	int created, destroyed, finalized, live;
	int fail_finalize;
	int64_t n;
	void *ptr[SGRT_CUDNN_PACK_MAX], *ws;
} seen;

static cudnnStatus_t
stub_create(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *d)
{
	assert_int_equal(t, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
	*d = (cudnnBackendDescriptor_t)(uintptr_t)++seen.created;
	seen.live++;
	return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t
stub_destroy(cudnnBackendDescriptor_t d)
{
	assert_non_null(d);
	seen.destroyed++;
	seen.live--;
	return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t
stub_finalize(cudnnBackendDescriptor_t d)
{
	(void)d;
	seen.finalized++;
	return seen.fail_finalize ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t
stub_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
         cudnnBackendAttributeType_t t, int64_t n, const void *v)
{
	(void)d;
	if (a == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS) {
		assert_int_equal(t, CUDNN_TYPE_VOID_PTR);
		seen.n = n;
		memcpy(seen.ptr, v, (size_t)n * sizeof(void *));
	} else if (a == CUDNN_ATTR_VARIANT_PACK_WORKSPACE) {
		memcpy(&seen.ws, v, sizeof seen.ws);
	}
	return CUDNN_STATUS_SUCCESS;
}

static const SgrtCudnnApi api = {
	.Create = stub_create,
	.Destroy = stub_destroy,
	.Finalize = stub_finalize,
	.Set = stub_set,
};

static void
test_kept_and_made_again(void **state)
{
	(void)state;
	memset(&seen, 0, sizeof seen);
	SgrtCudnnPack kp;
	memset(&kp, 0, sizeof kp);
	char buf[64];
	int64_t uid[3] = {1, 2, 3};
	void *p[3] = {buf, buf + 16, buf + 32}, *ws = buf + 48;

	/* made on first use */
	assert_int_equal(sgrt_cudnn_pack(&api, &kp, 3, uid, p, ws), CUDNN_STATUS_SUCCESS);
	assert_int_equal(seen.created, 1);
	assert_non_null(kp.d);
	assert_int_equal(seen.n, 3);
	assert_memory_equal(seen.ptr, p, sizeof p);
	assert_ptr_equal(seen.ws, ws);
	/* kept while the same */
	for (int i = 0; i < 5; i++)
		assert_int_equal(sgrt_cudnn_pack(&api, &kp, 3, uid, p, ws), CUDNN_STATUS_SUCCESS);
	assert_int_equal(seen.created, 1);
	assert_int_equal(seen.destroyed, 0);
	/* a pointer, the workspace, the count: each makes it again */
	p[2] = buf + 40;
	assert_int_equal(sgrt_cudnn_pack(&api, &kp, 3, uid, p, ws), CUDNN_STATUS_SUCCESS);
	assert_int_equal(seen.created, 2);
	assert_ptr_equal(seen.ptr[2], buf + 40);
	assert_int_equal(sgrt_cudnn_pack(&api, &kp, 3, uid, p, NULL), CUDNN_STATUS_SUCCESS);
	assert_int_equal(seen.created, 3);
	assert_null(seen.ws);
	assert_int_equal(sgrt_cudnn_pack(&api, &kp, 2, uid, p, NULL), CUDNN_STATUS_SUCCESS);
	assert_int_equal(seen.created, 4);
	assert_int_equal(seen.n, 2);
	assert_int_equal(seen.live, 1); /* each old pack destroyed */
	/* a failure leaves none, and the next call makes one */
	seen.fail_finalize = 1;
	assert_int_equal(sgrt_cudnn_pack(&api, &kp, 3, uid, p, ws), CUDNN_STATUS_BAD_PARAM);
	assert_null(kp.d);
	assert_int_equal(seen.live, 0);
	seen.fail_finalize = 0;
	assert_int_equal(sgrt_cudnn_pack(&api, &kp, 3, uid, p, ws), CUDNN_STATUS_SUCCESS);
	assert_non_null(kp.d);
	assert_int_equal(seen.live, 1);
	/* more tensors than a pack holds: refused, nothing made */
	int64_t many[SGRT_CUDNN_PACK_MAX + 1] = {0};
	void *mp[SGRT_CUDNN_PACK_MAX + 1] = {0};
	int made = seen.created;
	assert_int_not_equal(sgrt_cudnn_pack(&api, &kp, SGRT_CUDNN_PACK_MAX + 1, many, mp, ws),
	                     CUDNN_STATUS_SUCCESS);
	assert_int_equal(seen.created, made);
	/* freed */
	assert_int_equal(sgrt_cudnn_pack(&api, &kp, 3, uid, p, ws), CUDNN_STATUS_SUCCESS);
	sgrt_cudnn_pack_free(&api, &kp);
	assert_null(kp.d);
	assert_int_equal(seen.live, 0);
	sgrt_cudnn_pack_free(&api, &kp); /* twice: nothing */
	assert_int_equal(seen.live, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kept_and_made_again),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
