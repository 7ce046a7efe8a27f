/*
 * test_interp.c - the interpreter's building blocks: f16/bf16 rounding
 * (half.h) against the compiler's own _Float16 conversions and known
 * ties, PyTorch's conversion rules in interp_setf/interp_geti, and the
 * deterministic initialisation of runtime/init.c.  The ops themselves are
 * compared with PyTorch by tests/torch/.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "half.h"
#include "init.h"
#include "safetensors.h"
#include "sgc.h"
#include "backend.h"
#include "interp.h"
#include "passes.h"

/* Every f16 and bf16 value converts to float and back unchanged. */
static void
test_half_roundtrip(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = half_f16_to_f32((uint16_t)h);
		if (isnan(f))
			assert_true(isnan(half_f16_to_f32(half_f32_to_f16(f))));
		else
			assert_int_equal(half_f32_to_f16(f), h);
		float b = half_bf16_to_f32((uint16_t)h);
		if (isnan(b))
			assert_true(isnan(half_bf16_to_f32(half_f32_to_bf16(b))));
		else
			assert_int_equal(half_f32_to_bf16(b), h);
	}
}

/* Ties go to even; overflow to infinity; subnormals round. */
static void
test_half_ties(void **state)
{
	(void)state;
	assert_true(half_round_f16(1.0f + 0x1p-11f) == 1.0f);
	assert_true(half_round_f16(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
	assert_true(half_round_f16(65519.0f) == 65504.0f);
	assert_true(isinf(half_round_f16(65520.0f)));
	assert_true(half_round_f16(0x1p-25f) == 0.0f);
	assert_true(half_round_f16(3 * 0x1p-26f) == 0x1p-24f);
	assert_true(half_round_f16(-0x1p-24f) == -0x1p-24f);
	assert_true(half_round_bf16(1.0f + 0x1p-8f) == 1.0f);
	assert_true(half_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
	assert_true(isinf(half_round_bf16(3.4028235e38f)));
	assert_true(isnan(half_round_bf16(NAN)));
	assert_true(signbit(half_round_bf16(-0.0f)));
}

#ifdef __FLT16_MAX__
/* float -> f16 agrees with the compiler's conversion on a million random
 * floats and every f16 midpoint. */
static void
test_f16_vs_compiler(void **state)
{
	(void)state;
	uint64_t s = 42;
	for (int i = 0; i < 1000000; i++) {
		s = sgrt_mix64(s + 1);
		uint32_t u = (uint32_t)s;
		/* bias towards the f16 range */
		if (i & 1)
			u = (u & 0x80ffffffu) | ((0x30u + (uint32_t)(s >> 40) % 0x18u) << 24);
		float f;
		memcpy(&f, &u, 4);
		if (isnan(f))
			continue;
		_Float16 h = (_Float16)f;
		uint16_t hb;
		memcpy(&hb, &h, 2);
		assert_int_equal(half_f32_to_f16(f), hb);
	}
	for (uint32_t h = 0; h < 0x7c00; h++) {
		float mid = (half_f16_to_f32((uint16_t)h) + half_f16_to_f32((uint16_t)(h + 1))) / 2;
		_Float16 c = (_Float16)mid;
		uint16_t cb;
		memcpy(&cb, &c, 2);
		assert_int_equal(half_f32_to_f16(mid), cb);
	}
}
#endif

/* Conversions as PyTorch's Tensor.to on x86. */
static void
test_conversions(void **state)
{
	(void)state;
	int64_t shape[1] = {4};
	Tensor *i64 = interp_tensor_new(NULL, DT_I64, 1, shape);
	Tensor *i32 = interp_tensor_new(NULL, DT_I32, 1, shape);
	Tensor *b = interp_tensor_new(NULL, DT_BOOL, 1, shape);
	interp_setf(i64, 0, -2.7);
	interp_setf(i64, 1, NAN);
	interp_setf(i64, 2, 1e30);
	interp_setf(i32, 0, 3e9);
	interp_setf(i32, 1, -2.5);
	interp_setf(b, 0, NAN);
	interp_setf(b, 1, -0.0);
	assert_int_equal(interp_geti(i64, 0), -2);
	assert_true(interp_geti(i64, 1) == INT64_MIN);
	assert_true(interp_geti(i64, 2) == INT64_MIN);
	assert_int_equal(interp_geti(i32, 0), INT32_MIN);
	assert_int_equal(interp_geti(i32, 1), -2);
	assert_int_equal(interp_geti(b, 0), 1);
	assert_int_equal(interp_geti(b, 1), 0);
	interp_poison(i64);
	assert_true(interp_geti(i64, 3) == INT64_MIN);
	interp_tensor_free(i64);
	interp_tensor_free(i32);
	interp_tensor_free(b);
}

/* Initialisation: deterministic, in [-b, b), counter-based (an element
 * does not depend on how many follow it), seed- and name-dependent,
 * integers zero. */
static void
test_init(void **state)
{
	(void)state;
	int64_t s1[2] = {2, 16}, s2[2] = {4, 16};
	float a[32], a2[32], c[64], d[32];
	int64_t z[3] = {7, 7, 7};
	int64_t zs[1] = {3};
	sgrt_init_tensor("w", 5, SGRT_F32, 2, s1, a);
	sgrt_init_tensor("w", 5, SGRT_F32, 2, s1, a2);
	sgrt_init_tensor("w", 5, SGRT_F32, 2, s2, c);
	sgrt_init_tensor("w", 6, SGRT_F32, 2, s1, d);
	assert_memory_equal(a, a2, sizeof a);
	assert_memory_equal(a, c, sizeof a);
	assert_memory_not_equal(a, d, sizeof a);
	for (int i = 0; i < 32; i++)
		assert_true(a[i] >= -0.25f && a[i] < 0.25f);
	sgrt_init_tensor("v", 5, SGRT_F32, 2, s1, d);
	assert_memory_not_equal(a, d, sizeof a);
	sgrt_init_tensor("idx", 5, SGRT_I64, 1, zs, z);
	assert_true(z[0] == 0 && z[1] == 0 && z[2] == 0);
	uint16_t h[32];
	sgrt_init_tensor("w", 5, SGRT_BF16, 2, s1, h);
	for (int i = 0; i < 32; i++)
		assert_true(half_bf16_to_f32(h[i]) == half_round_bf16(a[i]));
	assert_true(sgrt_fnv1a64("") == 0xcbf29ce484222325u);
	assert_true(sgrt_fnv1a64("a") == 0xaf63dc4c8601ec8cu);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_half_roundtrip),
		cmocka_unit_test(test_half_ties),
#ifdef __FLT16_MAX__
		cmocka_unit_test(test_f16_vs_compiler),
#endif
		cmocka_unit_test(test_conversions),
		cmocka_unit_test(test_init),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
