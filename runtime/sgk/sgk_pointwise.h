/*
 * sgk_pointwise.h - the element formula of every pointwise op, once.
 *
 * Valid as C11 and as CUDA C++ (nvcc and NVRTC): the interpreter
 * (compiler/interp_ops.c) calls these functions through the op table
 * (compiler/ops.def names each op's formula), and the CUDA code sgc
 * generates includes this header and calls the same functions in its
 * pointwise kernels (compiler/codegen_kernels.c).
 *
 * Each floating-point formula is written once over a scalar type SGK_T
 * (the second part of this file, which includes itself twice) and comes
 * as sgk_OP_f (float) and sgk_OP_d (double): the GPU computes f32, f16 and
 * bf16 in float registers and f64 in double; the interpreter computes
 * every float dtype in double (PyTorch's opmath; its result is then
 * rounded to the dtype).  The exact gelu and its backward have a float
 * form of their own (SGK_FLOAT), as accurate as erff's at half its
 * instructions.  Integer forms, sgk_OP_i, compute in int64 with
 * two's complement wrap-around; an op whose shape rule never lets it
 * compute in integers has none.  Comparisons give 1 or 0.
 *
 * sgk_sgd_step_f and _d are SGD's update of one element (the optimizer's
 * formula, shared the same way).
 *
 * Reductions combine with sgk_add, sgk_mul, sgk_rmax and sgk_rmin (max
 * and min that keep a NaN); under CUDA each has a functor, sgk_OP_op, for
 * the warp and block reductions.
 */
#ifndef SGK_T
#ifndef SGK_POINTWISE_H
#define SGK_POINTWISE_H

#ifdef __CUDACC__
#define SGK_FN static __host__ __device__ __forceinline__ __attribute__((unused))
#else
#include <math.h>
#define SGK_FN static inline
#endif

typedef long long sgk_i64;
typedef unsigned long long sgk_u64;

/* The float forms, then the double forms. */
#define SGK_T float
#define SGK_FLOAT 1
#define SGK_NAME(op) sgk_##op##_f
#define SGK_M(fn) fn##f
#include "sgk_pointwise.h"
#undef SGK_T
#undef SGK_FLOAT
#undef SGK_NAME
#undef SGK_M
#define SGK_T double
#define SGK_FLOAT 0
#define SGK_NAME(op) sgk_##op##_d
#define SGK_M(fn) fn
#include "sgk_pointwise.h"
#undef SGK_T
#undef SGK_FLOAT
#undef SGK_NAME
#undef SGK_M

/* ------------------------------------------------------------------ integers */

SGK_FN sgk_i64 sgk_add_i(sgk_i64 a, sgk_i64 b) { return (sgk_i64)((sgk_u64)a + (sgk_u64)b); }
SGK_FN sgk_i64 sgk_sub_i(sgk_i64 a, sgk_i64 b) { return (sgk_i64)((sgk_u64)a - (sgk_u64)b); }
SGK_FN sgk_i64 sgk_mul_i(sgk_i64 a, sgk_i64 b) { return (sgk_i64)((sgk_u64)a * (sgk_u64)b); }
SGK_FN sgk_i64 sgk_neg_i(sgk_i64 a) { return (sgk_i64)(0 - (sgk_u64)a); }
SGK_FN sgk_i64 sgk_abs_i(sgk_i64 a) { return a < 0 ? sgk_neg_i(a) : a; }
SGK_FN sgk_i64 sgk_square_i(sgk_i64 a) { return sgk_mul_i(a, a); }
SGK_FN sgk_i64 sgk_relu_i(sgk_i64 a) { return a > 0 ? a : 0; }
SGK_FN sgk_i64 sgk_sign_i(sgk_i64 a) { return (a > 0) - (a < 0); }
SGK_FN sgk_i64 sgk_floor_i(sgk_i64 a) { return a; }
SGK_FN sgk_i64 sgk_detach_i(sgk_i64 a) { return a; }
SGK_FN sgk_i64 sgk_maximum_i(sgk_i64 a, sgk_i64 b) { return a > b ? a : b; }
SGK_FN sgk_i64 sgk_minimum_i(sgk_i64 a, sgk_i64 b) { return a < b ? a : b; }
SGK_FN sgk_i64 sgk_rmax_i(sgk_i64 a, sgk_i64 b) { return a > b ? a : b; }
SGK_FN sgk_i64 sgk_rmin_i(sgk_i64 a, sgk_i64 b) { return a < b ? a : b; }
SGK_FN sgk_i64 sgk_eq_i(sgk_i64 a, sgk_i64 b) { return a == b; }
SGK_FN sgk_i64 sgk_ne_i(sgk_i64 a, sgk_i64 b) { return a != b; }
SGK_FN sgk_i64 sgk_lt_i(sgk_i64 a, sgk_i64 b) { return a < b; }
SGK_FN sgk_i64 sgk_le_i(sgk_i64 a, sgk_i64 b) { return a <= b; }
SGK_FN sgk_i64 sgk_gt_i(sgk_i64 a, sgk_i64 b) { return a > b; }
SGK_FN sgk_i64 sgk_ge_i(sgk_i64 a, sgk_i64 b) { return a >= b; }
/* a ** b by squaring; a negative b gives 1 / a^-b truncated (0 unless a
 * is 1 or -1). */
SGK_FN sgk_i64 sgk_pow_i(sgk_i64 a, sgk_i64 b)
{
	if (b < 0)
		return a == 1 ? 1 : a == -1 ? (b & 1 ? -1 : 1) : 0;
	sgk_u64 r = 1, x = (sgk_u64)a;
	for (; b; b >>= 1) {
		if (b & 1)
			r *= x;
		x *= x;
	}
	return (sgk_i64)r;
}

#ifdef __CUDACC__
/* The reductions' combine steps as functors (for sg_reduce). */
#define SGK_COMBINE(op)                                                        \
	struct sgk_##op##_op {                                                 \
		__device__ float operator()(float a, float b) const { return sgk_##op##_f(a, b); } \
		__device__ double operator()(double a, double b) const { return sgk_##op##_d(a, b); } \
		__device__ sgk_i64 operator()(sgk_i64 a, sgk_i64 b) const { return sgk_##op##_i(a, b); } \
	};
SGK_COMBINE(add)
SGK_COMBINE(mul)
SGK_COMBINE(rmax)
SGK_COMBINE(rmin)
#undef SGK_COMBINE
#endif

#endif /* SGK_POINTWISE_H */
#else /* SGK_T: the floating-point formulas, once over SGK_T */

SGK_FN SGK_T SGK_NAME(neg)(SGK_T a) { return -a; }
SGK_FN SGK_T SGK_NAME(detach)(SGK_T a) { return a; }
SGK_FN SGK_T SGK_NAME(abs)(SGK_T a) { return SGK_M(fabs)(a); }
SGK_FN SGK_T SGK_NAME(exp)(SGK_T a) { return SGK_M(exp)(a); }
SGK_FN SGK_T SGK_NAME(log)(SGK_T a) { return SGK_M(log)(a); }
SGK_FN SGK_T SGK_NAME(log1p)(SGK_T a) { return SGK_M(log1p)(a); }
SGK_FN SGK_T SGK_NAME(sqrt)(SGK_T a) { return SGK_M(sqrt)(a); }
SGK_FN SGK_T SGK_NAME(rsqrt)(SGK_T a) { return (SGK_T)1 / SGK_M(sqrt)(a); }
SGK_FN SGK_T SGK_NAME(reciprocal)(SGK_T a) { return (SGK_T)1 / a; }
SGK_FN SGK_T SGK_NAME(square)(SGK_T a) { return a * a; }
SGK_FN SGK_T SGK_NAME(sin)(SGK_T a) { return SGK_M(sin)(a); }
SGK_FN SGK_T SGK_NAME(cos)(SGK_T a) { return SGK_M(cos)(a); }
SGK_FN SGK_T SGK_NAME(tanh)(SGK_T a) { return SGK_M(tanh)(a); }
SGK_FN SGK_T SGK_NAME(sigmoid)(SGK_T a) { return (SGK_T)1 / ((SGK_T)1 + SGK_M(exp)(-a)); }
SGK_FN SGK_T SGK_NAME(relu)(SGK_T a) { return a < (SGK_T)0 ? (SGK_T)0 : a; }
/* gelu(a) = a * Phi(a), Phi the normal CDF, (1 + erf(a / sqrt 2)) / 2.
 * Double (the interpreter): through erf.  Float (the GPU's f32, f16 and
 * bf16): Phi(-|a|) = exp(-t p(t)) / 2 with t = |a| / sqrt 2 and p of
 * degree 7, t p(t) fitted to -log(erfc t) on [0, 4] weighted by erfc t
 * (docs/performance.md, "GELU's instructions").  At float precision it
 * stays within 8.2e-8 of the exact Phi (erff's formula: 6.1e-8) and its
 * gelu within 5.4e-8 of the exact one below 0 (erff's: 8.3e-8, since
 * 1 + erf(x) cancels there); past t = 4, t p(t) outgrows -log(erfc t), so
 * the tail falls to 0 sooner (by less than 5e-9) and a NaN stays NaN.
 * One exp2 and no select of coefficients: erff evaluates two polynomials'
 * worth of instructions, and a bf16 gelu kernel was bound by them rather
 * than by memory. */
#if SGK_FLOAT
SGK_FN float sgk_gelu_cdf_f(float a)
{
	const float t = SGK_M(fabs)(a) * 0.70710678118654752f;
	float p = 3.1440053e-05f;
	p = p * t - 3.0880130e-04f;
	p = p * t + 1.0323989e-03f;
	p = p * t + 5.3693779e-04f;
	p = p * t - 1.9583965e-02f;
	p = p * t + 1.0291962e-01f;
	p = p * t + 6.3659775e-01f;
	p = p * t + 1.1283803e+00f;
	const float q = SGK_M(exp2)(p * t * -1.44269504088896341f - 1.0f); /* exp(-p t) / 2 */
	return a >= 0.0f ? 1.0f - q : q;
}
#endif
SGK_FN SGK_T SGK_NAME(gelu)(SGK_T a)
{
#if SGK_FLOAT
	return a * sgk_gelu_cdf_f(a);
#else
	return (SGK_T)0.5 * a * ((SGK_T)1 + SGK_M(erf)(a * (SGK_T)0.70710678118654752440));
#endif
}
/* gelu(a, approximate="tanh"). */
SGK_FN SGK_T SGK_NAME(gelu_tanh)(SGK_T a)
{
	return (SGK_T)0.5 * a *
	       ((SGK_T)1 + SGK_M(tanh)((SGK_T)0.79788456080286535588 * (a + (SGK_T)0.044715 * a * a * a)));
}
SGK_FN SGK_T SGK_NAME(silu)(SGK_T a) { return a / ((SGK_T)1 + SGK_M(exp)(-a)); }
SGK_FN SGK_T SGK_NAME(erf)(SGK_T a) { return SGK_M(erf)(a); }
SGK_FN SGK_T SGK_NAME(sign)(SGK_T a) { return a != a ? (SGK_T)0 : (SGK_T)((a > (SGK_T)0) - (a < (SGK_T)0)); }
SGK_FN SGK_T SGK_NAME(floor)(SGK_T a) { return SGK_M(floor)(a); }

SGK_FN SGK_T SGK_NAME(add)(SGK_T a, SGK_T b) { return a + b; }
SGK_FN SGK_T SGK_NAME(sub)(SGK_T a, SGK_T b) { return a - b; }
SGK_FN SGK_T SGK_NAME(mul)(SGK_T a, SGK_T b) { return a * b; }
SGK_FN SGK_T SGK_NAME(div)(SGK_T a, SGK_T b) { return a / b; }
SGK_FN SGK_T SGK_NAME(pow)(SGK_T a, SGK_T b) { return SGK_M(pow)(a, b); }
/* maximum and minimum propagate NaN. */
SGK_FN SGK_T SGK_NAME(maximum)(SGK_T a, SGK_T b) { return a != a || b != b ? a + b : a > b ? a : b; }
SGK_FN SGK_T SGK_NAME(minimum)(SGK_T a, SGK_T b) { return a != a || b != b ? a + b : a < b ? a : b; }
SGK_FN SGK_T SGK_NAME(eq)(SGK_T a, SGK_T b) { return (SGK_T)(a == b); }
SGK_FN SGK_T SGK_NAME(ne)(SGK_T a, SGK_T b) { return (SGK_T)(a != b); }
SGK_FN SGK_T SGK_NAME(lt)(SGK_T a, SGK_T b) { return (SGK_T)(a < b); }
SGK_FN SGK_T SGK_NAME(le)(SGK_T a, SGK_T b) { return (SGK_T)(a <= b); }
SGK_FN SGK_T SGK_NAME(gt)(SGK_T a, SGK_T b) { return (SGK_T)(a > b); }
SGK_FN SGK_T SGK_NAME(ge)(SGK_T a, SGK_T b) { return (SGK_T)(a >= b); }
/* The combine steps of amax and amin: a NaN, once met, stays. */
SGK_FN SGK_T SGK_NAME(rmax)(SGK_T a, SGK_T b) { return a != a || a > b ? a : b; }
SGK_FN SGK_T SGK_NAME(rmin)(SGK_T a, SGK_T b) { return a != a || a < b ? a : b; }
/* clamp's bounds: a NaN operand stays, a NaN bound is taken. */
SGK_FN SGK_T SGK_NAME(clamp_lo)(SGK_T a, SGK_T lo) { return a != a ? a : a < lo || lo != lo ? lo : a; }
SGK_FN SGK_T SGK_NAME(clamp_hi)(SGK_T a, SGK_T hi) { return a != a ? a : a > hi || hi != hi ? hi : a; }

/* torch.optim.SGD's last step of one element, p - lr * d, computed as
 * PyTorch's kernel does: p + (-lr) * d.  The interpreter, the generated
 * sgd_update_ kernels, the batch-norm backward that makes the update
 * (sgk_conv.cuh's SgBnSgd) and the multi-tensor SGD (sgk_optim.cuh) all
 * call it. */
SGK_FN SGK_T SGK_NAME(sgd_step)(SGK_T p, SGK_T neg_lr, SGK_T d) { return p + neg_lr * d; }

/* gelu_backward(g, x) = g * d gelu(x) / dx, exact and with the tanh
 * approximation. */
SGK_FN SGK_T SGK_NAME(gelu_backward)(SGK_T g, SGK_T x)
{
#if SGK_FLOAT /* Phi as gelu's; exp(-x^2 / 2) as an exp2 */
	return g * (sgk_gelu_cdf_f(x) +
	            x * 0.39894228040143267794f * SGK_M(exp2)(x * x * -0.72134752044448170368f));
#else
	const SGK_T cdf = (SGK_T)0.5 * ((SGK_T)1 + SGK_M(erf)(x * (SGK_T)0.70710678118654752440));
	return g * (cdf + x * SGK_M(exp)((SGK_T)-0.5 * x * x) * (SGK_T)0.39894228040143267794);
#endif
}
SGK_FN SGK_T SGK_NAME(gelu_tanh_backward)(SGK_T g, SGK_T x)
{
	const SGK_T beta = (SGK_T)0.79788456080286535588, kappa = (SGK_T)0.044715;
	const SGK_T t = SGK_M(tanh)(beta * (x + kappa * x * x * x));
	return g * ((SGK_T)0.5 * ((SGK_T)1 + t) +
	            (SGK_T)0.5 * x * ((SGK_T)1 - t * t) * beta * ((SGK_T)1 + (SGK_T)3 * kappa * x * x));
}

#endif /* SGK_T */
