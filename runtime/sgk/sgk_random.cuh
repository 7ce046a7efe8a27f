/*
 * sgk_random.cuh - the random ops on the GPU, dropout and rand, with the
 * draws the interpreter makes (sgk_random.h says how: the counter, the
 * threshold, the scale, the uniform values).
 *
 *   sg_launch_rng_advance(state, stream)
 *       state: the device's opt.rng (i64 [2]: seed, offset); offset += 1.
 *       A generated call that draws launches it first, on `default` before
 *       the other streams fork from it, so every draw of the call reads
 *       the new offset, under a CUDA graph's replays too.
 *   sg_launch_rand<T>(y, n, state, salt, stream)
 *       y[i] uniform in [0, 1) (sgk_uniform of the element's draw) for the
 *       n elements (T: float, __half, __nv_bfloat16, double); one thread
 *       computes a Philox block's four elements, with CUDA's
 *       curand_Philox4x32_10, reading the state on the device.
 *   sgk_dropout_f(x, sgk_draw(state, salt, q, lane), thresh, scale)
 *   (device; _d in double)
 *       a dropout's element: x * scale when the draw, 16-bit half `lane`
 *       (0..7) of block q, reaches thresh, else x * 0.  The generated
 *       pointwise kernels compute dropout this way, fused with the ops
 *       around it; a vector kernel's unrolled elements of one block share
 *       its draw.
 *   sgk_keep(sgk_draws_init(state, salt), i, thresh)   (device)
 *       whether a dropout keeps element i: for kernels that visit the
 *       elements one by one (the generated attention kernels).
 */
#ifndef SGK_RANDOM_CUH
#define SGK_RANDOM_CUH
#include <curand_philox4x32_x.h>
#include "sgk_common.cuh"
#include "sgk_random.h"
/* nvcc remarks on the helpers a program leaves unused: off here */
#pragma nv_diag_suppress 177

/* Whether T is bf16 (rand's bits, sgk_uniform_bits). */
template <class T> struct sgk_is_bf16 { static const bool value = false; };
template <> struct sgk_is_bf16<__nv_bfloat16> { static const bool value = true; };

static __global__ void sgk_rng_advance(sgk_i64 *state)
{
	state[1] += 1;
}

/* The generator state and salt of a random op, read once a thread. */
struct SgkDraws {
	uint2 key;
	unsigned salt, offset;
};

static __device__ __forceinline__ SgkDraws sgk_draws_init(const sgk_i64 *state, unsigned salt)
{
	const unsigned long long seed = (unsigned long long)state[0];
	SgkDraws d = {make_uint2((unsigned)seed, (unsigned)(seed >> 32)), salt,
	              (unsigned)state[1]};
	return d;
}

/* The draws of elements 4q .. 4q + 3. */
static __device__ __forceinline__ uint4 sgk_draws(const SgkDraws &d, sgk_i64 q)
{
	return curand_Philox4x32_10(
	        make_uint4((unsigned)q, (unsigned)((unsigned long long)q >> 32), d.salt, d.offset),
	        d.key);
}

/* Word j (0..3) of a block's draws. */
static __device__ __forceinline__ unsigned sgk_word(const uint4 &u, int j)
{
	return j == 0 ? u.x : j == 1 ? u.y : j == 2 ? u.z : u.w;
}

/* Dropout's 16-bit draw `lane` (0..7) of block u (sgk_random.h). */
static __device__ __forceinline__ unsigned sgk_half(const uint4 &u, int lane)
{
	return sgk_dropout_half(sgk_word(u, lane >> 1), lane & 1);
}

/* Whether a dropout with these draws keeps element i (its own block:
 * for kernels that visit elements one by one, attention's weights). */
static __device__ __forceinline__ bool sgk_keep(const SgkDraws &d, sgk_i64 i,
                                                unsigned long long thresh)
{
	return sgk_half(sgk_draws(d, i >> 3), (int)(i & 7)) >= thresh;
}

/* Draw `lane` (0..7) of block q: a dropout's element in a generated
 * pointwise kernel (state: a __restrict__ parameter, so that the
 * unrolled elements of a block share its loads and its draw). */
static __device__ __forceinline__ unsigned sgk_draw(const sgk_i64 *__restrict__ state,
                                                    unsigned salt, sgk_i64 q, int lane)
{
	return sgk_half(sgk_draws(sgk_draws_init(state, salt), q), lane);
}

/* A dropout's element x given its draw u (sgk_random.h). */
static __device__ __forceinline__ float sgk_dropout_f(float x, unsigned u,
                                                     unsigned long long thresh, float scale)
{
	return u >= thresh ? x * scale : x * 0.0f;
}

static __device__ __forceinline__ double sgk_dropout_d(double x, unsigned u,
                                                      unsigned long long thresh, double scale)
{
	return u >= thresh ? x * scale : x * 0.0;
}

/* Elements 4q .. 4q + 3 of a rand with this salt: the top `bits` bits of
 * each draw times 2^-bits, exact in T; VEC: the four through one vector
 * store (y aligned to it), the last partial block element by element. */
template <class T, bool VEC>
__global__ void __launch_bounds__(256)
sgk_rand(T *y, sgk_i64 n, const sgk_i64 *state, unsigned salt, int bits)
{
	typedef typename sgk_acc<T>::type A;
	const SgkDraws d = sgk_draws_init(state, salt);
	const A unit = (A)1 / (A)(1ull << bits);
	const sgk_i64 nq = (n + 3) / 4, stride = (sgk_i64)gridDim.x * blockDim.x;
	for (sgk_i64 q = (sgk_i64)blockIdx.x * blockDim.x + threadIdx.x; q < nq; q += stride) {
		const uint4 u = sgk_draws(d, q);
		const unsigned w[4] = {u.x, u.y, u.z, u.w};
		sgk_reg<4, T> r;
#pragma unroll
		for (int j = 0; j < 4; j++)
			r.v[j] = sgk_cvt<T>((A)(w[j] >> (32 - bits)) * unit);
		if (VEC && 4 * q + 4 <= n) {
			sgk_stv<4>(y + 4 * q, r);
			continue;
		}
#pragma unroll
		for (int j = 0; j < 4; j++)
			if (4 * q + j < n)
				y[4 * q + j] = r.v[j];
	}
}

#ifndef __CUDACC_RTC__
static inline cudaError_t sg_launch_rng_advance(sgk_i64 *state, cudaStream_t stream)
{
	sgk_rng_advance<<<1, 1, 0, stream>>>(state);
	return sgk_launched();
}

/* The grid of a random op over n elements: a thread per block of four. */
static inline unsigned sgk_random_grid(sgk_i64 n)
{
	const sgk_i64 blocks = ((n + 3) / 4 + 255) / 256, most = (sgk_i64)sgk_num_sms() * 16;
	return (unsigned)(blocks < most ? blocks : most);
}

template <class T>
static cudaError_t sg_launch_rand(T *y, sgk_i64 n, const sgk_i64 *state, unsigned salt,
                                  cudaStream_t stream)
{
	if (n <= 0)
		return cudaSuccess;
	const unsigned a = sizeof(sgk_reg<4, T>) < 16 ? sizeof(sgk_reg<4, T>) : 16;
	const int bits = sgk_uniform_bits((int)sizeof(T), sgk_is_bf16<T>::value);
	if (sgk_host_aligned(y, a))
		sgk_rand<T, true><<<sgk_random_grid(n), 256, 0, stream>>>(y, n, state, salt, bits);
	else
		sgk_rand<T, false><<<sgk_random_grid(n), 256, 0, stream>>>(y, n, state, salt, bits);
	return sgk_launched();
}
#endif

#endif /* SGK_RANDOM_CUH */
