/*
 * half.h - IEEE binary16 (f16) and bfloat16 (bf16) conversions, to and from
 * float, rounding to nearest even as the GPU's conversion instructions and
 * PyTorch's c10::Half / c10::BFloat16 do.  Header-only (static inline), so
 * the interpreter, the runtime (parameter initialisation) and the code
 * generator share one definition.
 *
 * A double is converted by first rounding it to float, as PyTorch does
 * (c10::Half and c10::BFloat16 are built from float).
 */
#ifndef SGC_HALF_H
#define SGC_HALF_H

#include <stdint.h>
#include <string.h>

/* The bits of a float, and back, without aliasing problems. */
static inline uint32_t
half_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float
half_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* bf16 -> float: exact, bf16 is the top half of a float. */
static inline float
half_bf16_to_f32(uint16_t h)
{
	return half_bits_f32((uint32_t)h << 16);
}

/* float -> bf16, round to nearest even; NaN stays a quiet NaN of the same
 * sign. */
static inline uint16_t
half_f32_to_bf16(float f)
{
	uint32_t u = half_f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* f16 -> float: exact (subnormals, infinities and NaN included). */
static inline float
half_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;
	if (exp == 0x1f)
		return half_bits_f32(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {
		/* zero or subnormal: man * 2^-24 is exact in float */
		float v = (float)man * 0x1p-24f;
		return sign ? -v : v;
	}
	return half_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* float -> f16, round to nearest even; overflow gives infinity, NaN a quiet
 * NaN of the same sign. */
static inline uint16_t
half_f32_to_f16(float f)
{
	uint32_t u = half_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* rounds to 65536 or more, or is infinite */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) {
		/* result is subnormal or zero: units of 2^-24, rounded */
		if (a < 0x33000000u) /* below half the smallest subnormal */
			return sign;
		uint32_t exp = a >> 23;
		uint32_t man = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126u - exp; /* 14..24 */
		uint32_t q = man >> shift;
		uint32_t rem = man & ((1u << shift) - 1u);
		uint32_t halfway = 1u << (shift - 1u);
		if (rem > halfway || (rem == halfway && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
	/* normal: rebias the exponent, round the 13 dropped bits */
	uint32_t r = a - 0x38000000u;
	r += 0xfffu + ((r >> 13) & 1u);
	return (uint16_t)(sign | (r >> 13));
}

/* Rounding a float through the narrow type and back. */
static inline float
half_round_bf16(float f)
{
	return half_bf16_to_f32(half_f32_to_bf16(f));
}

static inline float
half_round_f16(float f)
{
	return half_f16_to_f32(half_f32_to_f16(f));
}

#endif
