/*
 * interp_random.c - the random ops in the interpreter: dropout and rand,
 * and attention's dropout (dropout_p).
 *
 * The draws come from Random123's Philox4x32-10 (librandom123-dev) with
 * the key and counter runtime/sgk/sgk_random.h lays out; the CUDA backend
 * draws the same bits with CUDA's curand_Philox4x32_10
 * (runtime/sgk/sgk_random.cuh), so a program gives the same draws, and
 * with them the same results, on both.  The generator state (seed,
 * offset) is interp_optim.c's.
 */
#include <Random123/philox.h>

#include "sgk/sgk_random.h"
#include "interp.h"

/* The Philox blocks of a random op (sgk_random.h): rand's element i
 * draws a word, dropout's 16 bits. */
typedef struct {
	philox4x32_key_t key;
	uint32_t salt, offset;
	uint64_t q;            /* the block in u, or UINT64_MAX */
	philox4x32_ctr_t u;
} Draws;

static void
draws_init(Interp *I, const Node *n, Draws *w)
{
	uint64_t seed, offset;
	interp_rng_state(I, &seed, &offset);
	w->key = (philox4x32_key_t){{(uint32_t)seed, (uint32_t)(seed >> 32)}};
	w->salt = (uint32_t)ir_attr_int(n, "salt", 0);
	w->offset = (uint32_t)offset;
	w->q = UINT64_MAX;
}

/* Block q's words. */
static const uint32_t *
block(Draws *w, uint64_t q)
{
	if (q != w->q) {
		philox4x32_ctr_t ctr = {{(uint32_t)q, (uint32_t)(q >> 32), w->salt, w->offset}};
		w->u = philox4x32(ctr, w->key);
		w->q = q;
	}
	return w->u.v;
}

/* rand's element i: word i % 4 of block i / 4. */
static uint32_t
draw32(Draws *w, int64_t i)
{
	return block(w, (uint64_t)i / 4)[i % 4];
}

/* dropout's element i: 16 bits of block i / 8. */
static unsigned
draw16(Draws *w, int64_t i)
{
	return sgk_dropout_half(block(w, (uint64_t)i / 8)[i % 8 / 2], (int)(i & 1));
}

/* dropout(x, p=, salt=): x * scale where the element's draw keeps it, x * 0
 * elsewhere, in the dtype's opmath (sgk_random.h). */
int
interp_dropout(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	Tensor *x = in[0], *r = out[0];
	double p = ir_attr_float(n, "p", 0);
	sgk_u64 thresh = sgk_dropout_threshold(p);
	double scale = interp_opmath((DType)r->dt, sgk_dropout_scale(p));
	Draws w;
	draws_init(I, n, &w);
	for (int64_t i = 0; i < r->numel; i++) {
		double v = interp_opndf(n, 0, x, i, (DType)r->dt);
		v = draw16(&w, i) >= thresh ? v * scale : v * 0;
		interp_setf(r, i, interp_opmath((DType)r->dt, v));
	}
	return 0;
}

void
interp_attn_drop_row(Interp *I, const Node *n, DType dt, int64_t row, int64_t tk, double *z)
{
	double p = ir_attr_float(n, "dropout_p", 0);
	sgk_u64 thresh = sgk_dropout_threshold(p);
	double scale = interp_opmath(dt, sgk_dropout_scale(p));
	Draws w;
	draws_init(I, n, &w);
	for (int64_t j = 0; j < tk; j++)
		z[j] = draw16(&w, row * tk + j) >= thresh ? scale : 0;
}

/* rand(shape=, dtype=, salt=): uniform in [0, 1), exact in the dtype. */
int
interp_rand(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)in;
	Tensor *r = out[0];
	int bits = sgk_uniform_bits(dtype_size((DType)r->dt), r->dt == DT_BF16);
	Draws w;
	draws_init(I, n, &w);
	for (int64_t i = 0; i < r->numel; i++)
		interp_setf(r, i, sgk_uniform(draw32(&w, i), bits));
	return 0;
}
