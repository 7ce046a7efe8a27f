/*
 * init.c - deterministic parameter initialisation; see init.h for the
 * scheme.  Counter-based: element k depends only on (seed, name, k), so a
 * GPU kernel computes each element independently and gets the same bits.
 */
#include <math.h>
#include <string.h>

#include "half.h"
#include "init.h"
#include "safetensors.h"

uint64_t
sgrt_fnv1a64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325u;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3u;
	}
	return h;
}

uint64_t
sgrt_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

double
sgrt_init_value(uint64_t seed, uint64_t key, uint64_t k, double bound)
{
	uint64_t h = sgrt_mix64(sgrt_mix64(seed ^ key) +
	                        (k + 1) * 0x9e3779b97f4a7c15u);
	double u = (double)(h >> 11) * 0x1p-53;
	return (2.0 * u - 1.0) * bound;
}

/* Stores v, rounded to dtype, as element k of dst. */
static void
store(void *dst, int dtype, uint64_t k, double v)
{
	switch (dtype) {
	case SGRT_F64: ((double *)dst)[k] = v; break;
	case SGRT_F32: ((float *)dst)[k] = (float)v; break;
	case SGRT_F16: ((uint16_t *)dst)[k] = half_f32_to_f16((float)v); break;
	case SGRT_BF16: ((uint16_t *)dst)[k] = half_f32_to_bf16((float)v); break;
	default: break;
	}
}

void
sgrt_init_tensor(const char *name, uint64_t seed, int dtype, int rank,
                 const int64_t *shape, void *dst)
{
	uint64_t n = 1;
	for (int i = 0; i < rank; i++)
		n *= (uint64_t)shape[i];
	if (dtype != SGRT_F64 && dtype != SGRT_F32 && dtype != SGRT_F16 &&
	    dtype != SGRT_BF16) {
		size_t size = dtype == SGRT_I64 ? 8 : dtype == SGRT_I32 ? 4 : 1;
		memset(dst, 0, n * size);
		return;
	}
	double last = rank > 0 && shape[rank - 1] > 0 ? (double)shape[rank - 1] : 1.0;
	double bound = 1.0 / sqrt(last);
	uint64_t key = sgrt_fnv1a64(name);
	for (uint64_t k = 0; k < n; k++)
		store(dst, dtype, k, sgrt_init_value(seed, key, k, bound));
}

void
sgrt_init_rng(uint64_t seed, int64_t dst[2])
{
	dst[0] = (int64_t)seed;
	dst[1] = 0;
}
