/*
 * sgk_device.cuh - the device helpers every generated file includes first:
 * sgc's element types, their conversions, the math and the reductions its
 * generated kernels use.  Part of libsgrt's installed headers (with the
 * kernel library of this folder): the generated code says
 * `#include "sgk/sgk_device.cuh"`, found through `-I runtime` in the tree
 * or `pkg-config --cflags sgrt` once installed.
 *
 * Everything here must also compile under NVRTC (__CUDACC_RTC__): no
 * standard headers there, so integer types are spelled with the builtins.
 *
 * Dtype rules (as the interpreter, compiler/interp/interp_tensor.c, applies them):
 *   registers   f64 -> double; f32, f16, bf16 -> float (already rounded to
 *               the dtype); i64, i32, bool -> sg_i64 (i32 wrapped, bool 0/1)
 *   sg_ld(x)    a stored element into its register
 *   sg_to_DT(v) Tensor.to(DT) of a register or computed value: floats round
 *               to nearest even (f16/bf16 through float); to integers
 *               truncate toward zero, NaN and out-of-range giving the
 *               dtype's minimum; to bool, v != 0
 *   sg_st_DT(r) a register of dtype DT into its storage type (exact)
 *   sg_opf/opd  a register into the compute type of float/double math
 */
#ifndef SGK_DEVICE_CUH
#define SGK_DEVICE_CUH

#ifndef __CUDACC_RTC__
#include <assert.h>
#endif
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "sgk/sgk_pointwise.h"

typedef long long sg_i64;
typedef unsigned long long sg_u64;
typedef int sg_i32;
typedef unsigned char sg_bool; /* bool tensors: one byte, 0 or 1 */
typedef __half sg_f16;
typedef __nv_bfloat16 sg_bf16;

#define SG_DEV static __device__ __forceinline__ __attribute__((unused))

/* A failed device-side check (an index out of range): the message names
 * the .sg line; the launch then fails with cudaErrorAssert. */
#ifdef __CUDACC_RTC__
#define SG_CHECK(cond, file, line, msg) do { if (!(cond)) __trap(); } while (0)
#else
#define SG_CHECK(cond, file, line, msg)                                        \
	do {                                                                   \
		if (!(cond))                                                   \
			__assert_fail(msg, file, line, __func__);              \
	} while (0)
#endif

SG_DEV float sg_inff(void) { return __int_as_float(0x7f800000); }
SG_DEV float sg_nanf(void) { return __int_as_float(0x7fc00000); }
SG_DEV double sg_inf(void) { return __longlong_as_double(0x7ff0000000000000LL); }
SG_DEV double sg_nan(void) { return __longlong_as_double(0x7ff8000000000000LL); }

/* Loads: a stored element into its register. */
SG_DEV double sg_ld(double x) { return x; }
SG_DEV float sg_ld(float x) { return x; }
SG_DEV float sg_ld(sg_f16 x) { return __half2float(x); }
SG_DEV float sg_ld(sg_bf16 x) { return __bfloat162float(x); }
SG_DEV sg_i64 sg_ld(sg_i64 x) { return x; }
SG_DEV sg_i64 sg_ld(sg_i32 x) { return x; }
SG_DEV sg_i64 sg_ld(sg_bool x) { return x != 0; }

/* Compute operands: float math (f32, f16, bf16) and double math (f64). */
SG_DEV float sg_opf(float x) { return x; }
SG_DEV float sg_opf(double x) { return (float)x; }
SG_DEV float sg_opf(sg_i64 x) { return (float)x; }
SG_DEV double sg_opd(float x) { return x; }
SG_DEV double sg_opd(double x) { return x; }
SG_DEV double sg_opd(sg_i64 x) { return (double)x; }

/* Tensor.to(dtype) into a register. */
SG_DEV sg_i64 sg_trunc(double v, double lo, double hi)
{
	return v >= lo && v < hi ? (sg_i64)v : (sg_i64)lo;
}
SG_DEV double sg_to_f64(double v) { return v; }
SG_DEV double sg_to_f64(float v) { return v; }
SG_DEV double sg_to_f64(sg_i64 v) { return (double)v; }
SG_DEV float sg_to_f32(double v) { return (float)v; }
SG_DEV float sg_to_f32(float v) { return v; }
SG_DEV float sg_to_f32(sg_i64 v) { return (float)v; }
SG_DEV float sg_to_f16(float v) { return __half2float(__float2half_rn(v)); }
SG_DEV float sg_to_f16(double v) { return sg_to_f16((float)v); }
SG_DEV float sg_to_f16(sg_i64 v) { return sg_to_f16((float)v); }
SG_DEV float sg_to_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
SG_DEV float sg_to_bf16(double v) { return sg_to_bf16((float)v); }
SG_DEV float sg_to_bf16(sg_i64 v) { return sg_to_bf16((float)v); }
SG_DEV sg_i64 sg_to_i64(double v) { return sg_trunc(v, -9223372036854775808.0, 9223372036854775808.0); }
SG_DEV sg_i64 sg_to_i64(float v) { return sg_to_i64((double)v); }
SG_DEV sg_i64 sg_to_i64(sg_i64 v) { return v; }
SG_DEV sg_i64 sg_to_i32(double v) { return sg_trunc(v, -2147483648.0, 2147483648.0); }
SG_DEV sg_i64 sg_to_i32(float v) { return sg_to_i32((double)v); }
SG_DEV sg_i64 sg_to_i32(sg_i64 v) { return (sg_i32)(unsigned)(sg_u64)v; }
SG_DEV sg_i64 sg_to_bool(double v) { return v != 0; }
SG_DEV sg_i64 sg_to_bool(float v) { return v != 0; }
SG_DEV sg_i64 sg_to_bool(sg_i64 v) { return v != 0; }

/* Stores: a register of the dtype into its storage type. */
SG_DEV double sg_st_f64(double v) { return v; }
SG_DEV float sg_st_f32(float v) { return v; }
SG_DEV sg_f16 sg_st_f16(float v) { return __float2half_rn(v); }
SG_DEV sg_bf16 sg_st_bf16(float v) { return __float2bfloat16_rn(v); }
SG_DEV sg_i64 sg_st_i64(sg_i64 v) { return v; }
SG_DEV sg_i32 sg_st_i32(sg_i64 v) { return (sg_i32)(unsigned)(sg_u64)v; }
SG_DEV sg_bool sg_st_bool(sg_i64 v) { return v != 0; }

/* Math in float and in double for the kernel templates; the pointwise
 * ops' formulas are sgk_pointwise.h's. */
SG_DEV float sg_exp(float x) { return expf(x); }
SG_DEV double sg_exp(double x) { return exp(x); }
SG_DEV float sg_log(float x) { return logf(x); }
SG_DEV double sg_log(double x) { return log(x); }
SG_DEV float sg_sqrt(float x) { return sqrtf(x); }
SG_DEV double sg_sqrt(double x) { return sqrt(x); }
SG_DEV float sg_fabs(float x) { return fabsf(x); }
SG_DEV double sg_fabs(double x) { return fabs(x); }
template <class T> SG_DEV T sg_sq(T x) { return x * x; }
/* torch.lerp(a, b, w) as PyTorch computes it. */
template <class T> SG_DEV T sg_lerp(T a, T b, T w)
{
	return sg_fabs(w) < (T)0.5 ? a + w * (b - a) : b - (b - a) * ((T)1 - w);
}

/* N elements of T moved by one aligned load or store (N * sizeof(T) is at
 * most 16 bytes: a 128-bit access). */
template <class T, int N> struct __align__(sizeof(T) * N) sg_vec {
	T v[N];
};

/* Reduction operators (NaN propagates through max and min). */
typedef sgk_add_op sg_sum_op;
typedef sgk_rmax_op sg_max_op;
typedef sgk_rmin_op sg_min_op;

/* Reduces v over the TPR threads that work on one row: a warp (TPR 32), or
 * the whole block (blockDim.x == TPR, a power of two up to 1024).  Every
 * thread of the group gets the result. */
template <int TPR, class T, class Op>
static __device__ __forceinline__ T sg_reduce(T v, Op op)
{
	for (int o = 16; o > 0; o >>= 1)
		v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
	if (TPR <= 32)
		return v;
	__shared__ T part[32];
	const int lane = threadIdx.x & 31, nw = TPR / 32;
	__syncthreads(); /* part may still be read by the previous call */
	if (lane == 0)
		part[threadIdx.x >> 5] = v;
	__syncthreads();
	v = part[lane % nw];
	for (int o = nw / 2; o > 0; o >>= 1)
		v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

#endif /* SGK_DEVICE_CUH */
