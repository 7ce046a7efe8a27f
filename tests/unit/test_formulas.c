/*
 * test_formulas.c - the float forms of runtime/sgk/sgk_pointwise.h that are
 * formulas of their own (the exact gelu and its backward: one exp2 where
 * the double form calls erf) stay as close to the double forms as erff's
 * formula would.  The header is C11 too, so its float forms run here as
 * they do in the generated kernels; the GPU's own exp2f is checked by
 * bench/kernels/gelu_math.cu (docs/performance.md, "GELU's instructions").
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sgk/sgk_pointwise.h"

/* Over [-12, 12] in steps of 2^-14 (393217 values): gelu within
 * 1e-7 * (1 + |x|) of the double form (its Phi within 1e-7: erff's
 * formula is within 6e-8 at float precision), gelu_backward within 2e-7
 * for an incoming gradient of 1 and 3 (scaled). */
static void
test_gelu_close_to_double(void **state)
{
	(void)state;
	double worst = 0, worst_b = 0;
	for (int i = -12 * 16384; i <= 12 * 16384; i++) {
		const float x = (float)i / 16384.0f;
		const double ef = fabs((double)sgk_gelu_f(x) - sgk_gelu_d(x)) / (1.0 + fabs(x));
		const double eb = fabs((double)sgk_gelu_backward_f(1.0f, x) - sgk_gelu_backward_d(1.0, x));
		const double eb3 = fabs((double)sgk_gelu_backward_f(3.0f, x) - sgk_gelu_backward_d(3.0, x)) / 3.0;
		worst = fmax(worst, ef);
		worst_b = fmax(worst_b, fmax(eb, eb3));
	}
	print_message("gelu: max |f - d| / (1 + |x|) = %.3g; gelu_backward: max |f - d| = %.3g\n", worst,
	              worst_b);
	assert_true(worst <= 1e-7);
	assert_true(worst_b <= 2e-7);
}

/* Below 0: results of the right sign, within 2e-5 of the exact value
 * relatively down to x = -3 and 3e-4 down to -4 (erff's formula: 1.2e-5,
 * 4.7e-4, as 1 + erf(x) cancels); far out 0.  Large inputs give x. */
static void
test_gelu_tails(void **state)
{
	(void)state;
	for (float x = -4.0f; x <= -0.0625f; x += 1.0f / 256) {
		const double d = sgk_gelu_d(x), f = sgk_gelu_f(x);
		assert_true(f < 0);
		assert_true(fabs(f - d) <= (x >= -3.0f ? 2e-5 : 3e-4) * fabs(d));
	}
	const float far[] = {-20.0f, -1e3f, -1e10f, -3e38f};
	for (unsigned k = 0; k < sizeof far / sizeof far[0]; k++) {
		assert_true(sgk_gelu_f(far[k]) == 0.0f);
		assert_true(sgk_gelu_backward_f(1.0f, far[k]) == 0.0f);
	}
	const float big[] = {10.0f, 1e3f, 1e10f, 3e38f};
	for (unsigned k = 0; k < sizeof big / sizeof big[0]; k++) {
		assert_true(sgk_gelu_f(big[k]) == big[k]);
		assert_true(sgk_gelu_backward_f(1.0f, big[k]) == 1.0f);
	}
	assert_true(sgk_gelu_f(0.0f) == 0.0f);
	assert_true(sgk_gelu_backward_f(1.0f, 0.0f) == 0.5f);
}

/* NaN stays NaN; +inf gives +inf and a gradient of g; -inf NaN, as the
 * double form (and erff's: -inf * 0). */
static void
test_gelu_special(void **state)
{
	(void)state;
	assert_true(isnan(sgk_gelu_f(NAN)));
	assert_true(isnan(sgk_gelu_backward_f(1.0f, NAN)));
	assert_true(isnan(sgk_gelu_backward_f(NAN, 1.0f)));
	assert_true(sgk_gelu_f(INFINITY) == INFINITY);
	assert_true(isnan(sgk_gelu_f(-INFINITY)) == isnan(sgk_gelu_d(-INFINITY)));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gelu_close_to_double),
		cmocka_unit_test(test_gelu_tails),
		cmocka_unit_test(test_gelu_special),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
