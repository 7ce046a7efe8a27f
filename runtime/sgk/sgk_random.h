/*
 * sgk_random.h - how the random ops draw (dropout's mask, rand's values),
 * once for the interpreter and the GPU (valid as C11 and as CUDA C++, like
 * sgk_pointwise.h).
 *
 * The model's generator state opt.rng is i64 [2]: a seed and an offset
 * that every call of a graph drawing random numbers advances by 1 before
 * its first draw (so its first call draws at offset 1).  Element i of a
 * random op's result (row-major, the op's logical order) draws from one
 * Philox4x32-10 block (Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3", SC 2011):
 *
 *     key     = (seed & 0xffffffff, seed >> 32)
 *     counter = (q & 0xffffffff, q >> 32, salt, offset & 0xffffffff)
 *
 * q being the element's block (i / 4 for rand, i / 8 for dropout: below)
 * and salt the op's own (the front end numbers a program's random ops).  The interpreter computes the block with Random123's philox4x32
 * (compiler/interp/interp_random.c), the GPU with CUDA's
 * curand_Philox4x32_10 (sgk_random.cuh): the same function.
 *
 * A dropout (the op, and attention's dropout_p) takes 16 bits an element,
 * eight elements a block: element i draws half i % 2 (the low 16 bits for
 * even i) of word (i % 8) / 2 of block q = i / 8 (sgk_dropout_half), and
 * is kept when that u satisfies u >= sgk_dropout_threshold(p), which
 * happens with probability 1 - floor(p * 2^16) / 2^16 (within 2^-16 of
 * 1 - p; FlashAttention's 8 bits would be 2^-8); a kept x becomes
 * x * scale, a dropped one x * 0 (as PyTorch's mask * x * scale: -0 for a
 * negative x, NaN for NaN), scale = 1 / (1 - p) rounded to the dtype's
 * opmath (float, double for f64).  Half the 32-bit words' Philox blocks:
 * in attention with dropout at head dim 64 the draws cost as much as the
 * products.  rand's element i is word i % 4 of block i / 4 as a uniform value in [0, 1): the top
 * `bits` bits times 2^-bits, exact in the dtype (sgk_uniform_bits: the
 * significand's 24 bits for f32, 11 for f16, 8 for bf16, and 32 for f64).
 */
#ifndef SGK_RANDOM_H
#define SGK_RANDOM_H

#include "sgk_pointwise.h"

/* The least 16-bit draw that keeps an element: floor(p * 2^16) (exact: a
 * product by a power of two), or 2^16 (none kept) for p >= 1. */
SGK_FN sgk_u64 sgk_dropout_threshold(double p)
{
	return p >= 1 ? 65536u : p <= 0 ? 0 : (sgk_u64)(p * 65536.0);
}

/* A dropout element's 16-bit draw from its block's word w: the low half
 * for an even element, the high half for an odd one. */
SGK_FN unsigned sgk_dropout_half(unsigned w, int odd)
{
	return odd ? w >> 16 : w & 0xffffu;
}

/* The scale of the kept elements, 1 / (1 - p) in double (0 for p >= 1,
 * where none is kept). */
SGK_FN double sgk_dropout_scale(double p)
{
	return p >= 1 ? 0 : 1 / (1 - p);
}

/* The bits of a draw a uniform value of a float dtype takes (size: its
 * bytes; bf16: whether it is bf16). */
SGK_FN int sgk_uniform_bits(int size, int bf16)
{
	return size == 8 ? 32 : size == 4 ? 24 : bf16 ? 8 : 11;
}

/* A 32-bit draw as a uniform value in [0, 1) of `bits` bits (exact). */
SGK_FN double sgk_uniform(unsigned w, int bits)
{
	return (double)(w >> (32 - bits)) / (double)(1ull << bits);
}

#endif /* SGK_RANDOM_H */
