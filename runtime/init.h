/*
 * init.h - deterministic parameter initialisation (libsgrt; shared by
 * `sgc run` and the generated code's driver, so that both start a model
 * missing from --params with the same numbers).
 *
 * The scheme, simple to reproduce anywhere (docs/interpreter.md):
 *   key  = fnv1a64(NAME)                      (the .sg name without '%')
 *   h_k  = mix(mix(seed ^ key) + (k + 1) * 0x9e3779b97f4a7c15)
 *   u_k  = (h_k >> 11) * 2^-53                in [0, 1)
 *   x_k  = (2 u_k - 1) * b,  b = 1 / sqrt(last dim) (1 for a scalar)
 * for element k in row-major order, where mix is splitmix64's finaliser,
 * computed in double and rounded to the tensor's dtype (f16 and bf16 through
 * float, to nearest even).  Integer and bool tensors start as zeros.
 */
#ifndef SGRT_INIT_H
#define SGRT_INIT_H

#include <stdint.h>

/* FNV-1a, 64 bits, over the bytes of a NUL-terminated string. */
uint64_t sgrt_fnv1a64(const char *s);
/* splitmix64's output function (a bijective 64-bit mixer). */
uint64_t sgrt_mix64(uint64_t z);
/* The value of element k of tensor `name` before rounding to its dtype. */
double sgrt_init_value(uint64_t seed, uint64_t key, uint64_t k, double bound);
/* Fills a tensor (dtype: SgrtDType of safetensors.h) of the given shape
 * into dst, which holds numel * element size bytes. */
void sgrt_init_tensor(const char *name, uint64_t seed, int dtype, int rank,
                      const int64_t *shape, void *dst);

/* The random ops' generator state (sgk/sgk_random.h says how they draw): a
 * model-owned i64 [2], (seed, offset), saved with the optimizer's state
 * under this name, which the language reserves (opt.) and no param's state
 * can have (opt.PARAM.what).  Missing from --params it starts as
 * (--seed, 0), which sgrt_init_rng writes. */
#define SGRT_RNG_STATE "opt.rng"
void sgrt_init_rng(uint64_t seed, int64_t dst[2]);

#endif
