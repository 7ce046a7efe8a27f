/*
 * sgrt_attn_dev.cu - the device half of sgrt_attn_cudnn.c: the mask of
 * attention's dropout that cuDNN's fused attention multiplies the weights
 * by.  cuDNN would draw its own mask (its RNG node), which neither the
 * kernel library's flash kernels nor `sgc run` could reproduce; given the
 * mask as a tensor it applies sgc's: element n of the b h l s weights
 * (row-major) is 1 when word n % 4 of Philox block n / 4 of the op's salt
 * reaches the threshold, else 0 (sgk_random.cuh's draws, the ones the
 * flash kernels make in place).
 */
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "sgk/sgk_random.cuh"

/* (the values of sgrt.h's SgrtDType: checked in sgrt_attn_cudnn.c) */
enum { F16 = 2, BF16 = 3 };

/* One thread a Philox block: mask elements 4q .. 4q + 3 of n, one 8-byte
 * store when the four are whole (n % 4 == 0 and the mask aligned: the
 * caller's workspace is). */
template <typename T>
static __global__ void __launch_bounds__(256)
drop_mask(T *mask, int64_t n, const sgk_i64 *state, unsigned salt, unsigned long long thresh)
{
	const SgkDraws d = sgk_draws_init(state, salt);
	const int64_t nq = (n + 3) / 4, stride = (int64_t)gridDim.x * blockDim.x;
	const T one = sgk_cvt<T>(1.0f), zero = sgk_cvt<T>(0.0f);
	for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < nq; q += stride) {
		const uint4 u = sgk_draws(d, q);
		const unsigned w[4] = {u.x, u.y, u.z, u.w};
		sgk_reg<4, T> r;
#pragma unroll
		for (int j = 0; j < 4; j++)
			r.v[j] = w[j] >= thresh ? one : zero;
		if (n % 4 == 0) {
			sgk_stv<4>(mask + 4 * q, r);
			continue;
		}
		for (int j = 0; j < 4 && 4 * q + j < n; j++)
			mask[4 * q + j] = r.v[j];
	}
}

/* The dropout mask of n weights of dtype (f16, bf16) into mask (8-byte
 * aligned) on stream s; a cudaError_t. */
extern "C" int
sgrt_attn_drop_mask(int dtype, void *mask, int64_t n, const long long *state, unsigned salt,
                    unsigned long long thresh, cudaStream_t s)
{
	if (n <= 0)
		return (int)cudaSuccess;
	const unsigned grid = sgk_random_grid(n);
	switch (dtype) {
	case F16:
		drop_mask<__half><<<grid, 256, 0, s>>>((__half *)mask, n, state, salt, thresh);
		break;
	case BF16:
		drop_mask<__nv_bfloat16><<<grid, 256, 0, s>>>((__nv_bfloat16 *)mask, n, state, salt,
		                                              thresh);
		break;
	default:
		return (int)cudaErrorInvalidValue;
	}
	return (int)cudaGetLastError();
}
