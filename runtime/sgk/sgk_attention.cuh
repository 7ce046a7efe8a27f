/*
 * sgk_attention.cuh - scaled_dot_product_attention, forward and backward,
 * flash style: softmax(q k^T * scale + causal mask) v computed tile by
 * tile with an online softmax, never holding a T x T matrix in memory.
 * The forward saves the row log-sum-exp for the backward.
 *
 * Shapes: q [nb0, nb1, L, D], k [nb0, nb1, S, D], v [nb0, nb1, S, Dv],
 * o [nb0, nb1, L, Dv], each through its own element strides (s0, s1: the
 * two batch dims, sr: a row; the last dim is contiguous), so batch dims
 * may broadcast (stride 0) and [B, T, H, D] tensors may be read as
 * [B, H, T, D] without a copy.  More batch dims: collapse them into two,
 * or copy.  Causal masking is PyTorch's: query i sees keys j <= i
 * (top-left aligned when L != S).  The scale defaults to 1/sqrt(D) when
 * SgFlashParams.scale is 0 or less.
 *
 * Two paths:
 *   - __half and __nv_bfloat16 with D, Dv <= 128: tensor cores
 *     (mma.sync m16n8k16, f32 accumulation, ldmatrix from padded shared
 *     memory, cp.async double buffering), FlashAttention-2's schedule:
 *     forward 128 queries a block (32 a warp) against 64-key tiles for
 *     head dims over 64 (SgkFaFwdTile has the shapes);
 *     backward as two kernels, dK/dV over key blocks (S^T = K Q^T, so no
 *     transposes in registers) and dQ over query blocks, deterministic
 *     (no atomics).
 *   - everything else (float, double, D up to 256): SIMT kernels in the
 *     accumulation type, one warp a query (or key) row, tiles of 32
 *     rows in shared memory.  Correct, slower.
 *
 *   void sg_flash_params_init(SgFlashParams *p, int nb0, int nb1, int L,
 *                             int S, int D, int Dv, float scale, int causal)
 *       zeroes p and sets sizes and contiguous strides for every tensor;
 *       set the pointers (and any strides that differ) after.
 *   size_t sg_flash_bwd_workspace(const SgFlashParams *p)   bytes for p->delta
 *   cudaError_t sg_launch_flash_fwd<T>(const SgFlashParams *p, cudaStream_t)
 *       reads q, k, v; writes o and lse (f32 [nb0 * nb1, L], natural log;
 *       +inf for a row that sees no key, whose o is 0).
 *   cudaError_t sg_launch_flash_bwd<T>(const SgFlashParams *p, cudaStream_t)
 *       reads q, k, v, o, dout (strides do_*), lse; writes dq, dk, dv (their
 *       own strides); p->delta: sg_flash_bwd_workspace bytes of scratch.
 *       With broadcast batch dims in k or v, give dk/dv full-size buffers
 *       and sum over the broadcast dims after.
 *   size_t sg_flash_dropout_mask_bytes<T>(long long nb, int L, int S, int D, int Dv)
 *       bytes for p->dmask (attention with dropout, below).
 * Grouped-query attention: with kv_group > 1, k and v (and dk, dv) have
 * nb1 / kv_group heads, head b1 / kv_group serving query head b1 (no
 * repeated copy); the backward sums dk, dv over each group in the kernel.
 * Attention dropout (training's dropout_p): with drop_thresh nonzero,
 * weight (b, i, j) (b = b0 * nb1 + b1, b1 the query head) draws as element
 * (b * L + i) * S + j of a dropout with the op's salt on the device's
 * generator state rng (sgk_random.h): kept when its 16-bit draw >=
 * drop_thresh (sgk_dropout_threshold(p)), times drop_scale, else times 0.  The
 * forward's softmax statistics (lse) are those of the undropped weights;
 * the backward applies the same mask (dV from the dropped weights, dS from
 * dP times the mask's factor).  drop_thresh 0: no dropout, no draws.
 * On the tensor-core path the forward also stores the mask as keep bits
 * in dmask, sg_flash_dropout_mask_bytes<T>(nb, L, S, D, Dv) bytes ([nb0 *
 * nb1, L] rows of (S + 31) / 32 words, bit j % 32 of word j / 32 for key
 * j), and the backward reads them instead of drawing again (a draw costs
 * as much as the tile's products at head dim 64): give the backward the
 * dmask its forward wrote (the bits of every weight a causal row sees,
 * so a backward of any tiles finds its own); the size is 0 on the SIMT
 * path, whose backward draws.
 * Each kernel has a dropout instance (template flag DROP), so that the
 * kernels without dropout stay as they were; SGK_FA_NO_DROPOUT defined
 * leaves those out (launches with dropout fail, cudaErrorNotSupported).
 */
#ifndef SGK_ATTENTION_CUH
#define SGK_ATTENTION_CUH
#include "sgk_common.cuh"
#include "sgk_random.cuh"
/* nvcc remarks on the helpers a program leaves unused: off here */
#pragma nv_diag_suppress 177

/* Everything a flash kernel needs, passed by value. */
struct SgFlashParams {
	const void *q, *k, *v;
	void *o;
	float *lse;                      /* [nb0 * nb1, L] */
	const void *dout;                /* backward */
	void *dq, *dk, *dv;              /* backward */
	float *delta;                    /* backward scratch [nb0 * nb1, L] */
	sgk_i64 q_s0, q_s1, q_sr;        /* element strides: batch 0, batch 1, row */
	sgk_i64 k_s0, k_s1, k_sr;
	sgk_i64 v_s0, v_s1, v_sr;
	sgk_i64 o_s0, o_s1, o_sr;
	sgk_i64 do_s0, do_s1, do_sr;
	sgk_i64 dq_s0, dq_s1, dq_sr;
	sgk_i64 dk_s0, dk_s1, dk_sr;
	sgk_i64 dv_s0, dv_s1, dv_sr;
	int nb0, nb1, L, S, D, Dv;
	float scale;
	int causal;
	int kv_group;                    /* grouped-query attention: k, v (dk, dv) head b1 / kv_group
	                                    serves query head b1 (0 or 1: one each) */
	int vec;                         /* set by the launchers: 16-byte loads allowed */
	/* Dropout (last: the fields before keep their places, and the kernels
	 * without dropout their code). */
	const sgk_i64 *rng;              /* dropout: the model's generator state on the device (opt.rng: seed, offset) */
	unsigned salt;                   /* dropout: the op's salt */
	unsigned long long drop_thresh;  /* dropout: sgk_dropout_threshold(p), a draw below it drops; 0: no dropout */
	float drop_scale;                /* dropout: (float)sgk_dropout_scale(p) */
	unsigned *dmask;                 /* dropout, tensor-core path: the forward's keep bits, which
	                                    the backward reads (sg_flash_dropout_mask_bytes) */
};

/* ------------------------------------------------------------------ PTX wrappers */

/* Four 8x8 b16 matrices from shared memory; lane l gives the address of
 * row l % 8 of matrix l / 8. */
SGK_DEV void sgk_ldsm4(unsigned (&r)[4], const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(sgk_smem_addr(p)));
}

/* The same, each matrix transposed. */
SGK_DEV void sgk_ldsm4t(unsigned (&r)[4], const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(sgk_smem_addr(p)));
}

/* c += a * b on a 16x8x16 tile, f32 accumulators. */
SGK_DEV void sgk_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, __half)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
	    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
SGK_DEV void sgk_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1,
                     __nv_bfloat16)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
	    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as a packed pair of T (lo in the low half). */
SGK_DEV unsigned sgk_pack2(float lo, float hi, __half)
{
	__half2 h = __floats2half2_rn(lo, hi);
	return *reinterpret_cast<unsigned *>(&h);
}
SGK_DEV unsigned sgk_pack2(float lo, float hi, __nv_bfloat16)
{
	__nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
	return *reinterpret_cast<unsigned *>(&h);
}

/* ------------------------------------------------------------------ tiles */

/* Loads rows [r0, r0 + ROWS) of a matrix with n rows of d elements (row
 * stride rs) into a shared tile of ROWS x DP (row stride DP + 8), zeros
 * past n rows or d columns.  vec: cp.async in 16-byte pieces (d a
 * multiple of 8, everything aligned); else plain element copies. */
template <class T, int ROWS, int DP, int NT>
SGK_DEV void sgk_fa_load(T *sm, const T *g, sgk_i64 rs, int r0, int n, int d, bool vec)
{
	constexpr int CPR = DP / 8, LD = DP + 8;
	const int tid = threadIdx.x;
	if (vec) {
#pragma unroll
		for (int c = tid; c < ROWS * CPR; c += NT) {
			const int r = c / CPR, col = (c % CPR) * 8;
			const bool ok = r0 + r < n && col < d;
			sgk_cp_async16(sm + r * LD + col, ok ? g + (sgk_i64)(r0 + r) * rs + col : g,
			               ok ? 16 : 0);
		}
	} else {
		for (int c = tid; c < ROWS * DP; c += NT) {
			const int r = c / DP, col = c % DP;
			const bool ok = r0 + r < n && col < d;
			sm[r * LD + col] = ok ? g[(sgk_i64)(r0 + r) * rs + col] : sgk_cvt<T>(0.f);
		}
	}
}

/* Loads n0..n0+ROWS of an f32 vector (zeros past n) into shared memory. */
template <int ROWS, int NT>
SGK_DEV void sgk_fa_load_vec(float *sm, const float *g, int n0, int n)
{
	for (int i = threadIdx.x; i < ROWS; i += NT) {
		const bool ok = n0 + i < n;
		sgk_cp_async4(sm + i, ok ? g + n0 + i : g, ok ? 4 : 0);
	}
}

/* A fragments of the 16 x 16 block at (row0, col0) of a shared tile with
 * row stride LD: a0 = rows 0-7 cols 0-7, a1 = rows 8-15, a2 = cols 8-15,
 * a3 = both. */
template <int LD, class T>
SGK_DEV void sgk_frag_a(unsigned (&a)[4], const T *sm, int row0, int col0)
{
	const int lane = threadIdx.x & 31;
	sgk_ldsm4(a, sm + (row0 + (lane & 15)) * LD + col0 + ((lane >> 4) << 3));
}

/* B fragments for two 8-wide n tiles from a shared tile stored [n][k]
 * (rows n0..n0+15, cols k0..k0+15): b[0], b[1] for n tile 0 and b[2],
 * b[3] for n tile 1. */
template <int LD, class T>
SGK_DEV void sgk_frag_b_nk(unsigned (&b)[4], const T *sm, int n0, int k0)
{
	const int lane = threadIdx.x & 31;
	sgk_ldsm4(b, sm + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LD + k0 + (((lane >> 3) & 1) << 3));
}

/* B fragments for two n tiles from a shared tile stored [k][n] (rows
 * k0..k0+15, cols n0..n0+15), through transposing loads. */
template <int LD, class T>
SGK_DEV void sgk_frag_b_kn(unsigned (&b)[4], const T *sm, int k0, int n0)
{
	const int lane = threadIdx.x & 31;
	sgk_ldsm4t(b, sm + (k0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * LD + n0 + ((lane >> 4) << 3));
}

/* The A fragment of k step kk from accumulator tiles c (16 x 8 each, two
 * per k step of 16), rounded to T. */
template <class T, int N>
SGK_DEV void sgk_acc_to_a(unsigned (&a)[4], const float (&c)[N][4], int kk)
{
	a[0] = sgk_pack2(c[2 * kk][0], c[2 * kk][1], T());
	a[1] = sgk_pack2(c[2 * kk][2], c[2 * kk][3], T());
	a[2] = sgk_pack2(c[2 * kk + 1][0], c[2 * kk + 1][1], T());
	a[3] = sgk_pack2(c[2 * kk + 1][2], c[2 * kk + 1][3], T());
}

/* Stores a warp's 16 x (8 * NT8) accumulator rows r0.. as T into a
 * matrix with n rows, d columns and row stride rs, times mul. */
template <class T, int NT8>
SGK_DEV void sgk_fa_store(T *g, sgk_i64 rs, const float (&c)[NT8][4], int r0, int n, int d,
                          float mul, bool vec)
{
	const int lane = threadIdx.x & 31, gi = lane >> 2, tig = lane & 3;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int r = r0 + gi + 8 * h;
		if (r >= n)
			continue;
		T *row = g + (sgk_i64)r * rs;
#pragma unroll
		for (int t = 0; t < NT8; t++) {
			const int col = t * 8 + tig * 2;
			const float x0 = c[t][2 * h] * mul, x1 = c[t][2 * h + 1] * mul;
			if (vec && col < d) {
				*reinterpret_cast<unsigned *>(row + col) = sgk_pack2(x0, x1, T());
			} else {
				if (col < d)
					row[col] = sgk_cvt<T>(x0);
				if (col + 1 < d)
					row[col + 1] = sgk_cvt<T>(x1);
			}
		}
	}
}

/* ------------------------------------------------------------------ dropout */

/* A kernel's dropout draws, the generator state read once a thread
 * (DROP: the kernel's dropout instance; without, nothing read). */
template <bool DROP>
SGK_DEV SgkDraws sgk_fa_draws(const SgFlashParams &p)
{
	SgkDraws d = {};
	if (DROP)
		d = sgk_draws_init(p.rng, p.salt);
	return d;
}

/* Keep bits of Philox block q's eight elements (bit k: element 8q + k). */
SGK_DEV unsigned sgk_fa_keep8(const SgkDraws &d, unsigned long long thresh, sgk_i64 q)
{
	const uint4 u = sgk_draws(d, q);
	unsigned k = 0;
#pragma unroll
	for (int e = 0; e < 8; e++)
		k |= (unsigned)(sgk_half(u, e) >= thresh) << e;
	return k;
}

/* Keep bits of elements idx and idx + 1 (bits 0, 1): one block, or two
 * when idx ends one. */
SGK_DEV unsigned sgk_fa_keep2(const SgkDraws &d, unsigned long long thresh, sgk_i64 idx)
{
	const int r = (int)(idx & 7);
	unsigned k = sgk_fa_keep8(d, thresh, idx >> 3) >> r;
	if (r == 7)
		k |= (sgk_fa_keep8(d, thresh, (idx >> 3) + 1) & 1) << 1;
	return k & 3;
}

/* The dropout factor of keep bit `bit` of km: scale or 0. */
SGK_DEV float sgk_fa_kf(unsigned km, int bit, float scale)
{
	return (km >> bit) & 1 ? scale : 0.f;
}

/* Keep bits of a warp's 16 x (8 NT8) accumulator tile with query rows
 * row0 (= a multiple of 8 + gi) and row0 + 8, keys col0 + t * 8 +
 * tig * 2 (+ 1) (col0 a multiple of 8): bit 4 t + e for c[t][e] (the
 * forward's layout).  ALIGNED (S % 8 == 0): a row's 8 keys of a tile are
 * one Philox block, and the four lanes of a row group draw the blocks of
 * two tiles (lane tig: row row0 + 8 (tig & 1), tile tig >> 1) and gather
 * the four bytes of keep bits through two shuffles, unrolled (no branch:
 * the caller's products overlap the draws); else a block (two at a
 * block's end) a pair of keys. */
template <int NT8, bool ALIGNED>
SGK_DEV unsigned sgk_fa_keep_rows(const SgkDraws &d, const SgFlashParams &p, int b, int row0,
                                  int col0)
{
	static_assert(NT8 % 2 == 0 && NT8 <= 8, "tiles in pairs, a bit an element");
	const int tig = threadIdx.x & 3;
	const unsigned long long th = p.drop_thresh;
	unsigned km = 0;
	if (ALIGNED) {
		const sgk_i64 q = (((sgk_i64)b * p.L + row0 + 8 * (tig & 1)) * p.S + col0) / 8 + (tig >> 1);
#pragma unroll
		for (int u = 0; u < NT8 / 2; u++) {
			/* byte 2 t + h: row row0 + 8 h, tile 2 u + t */
			unsigned m = sgk_fa_keep8(d, th, q + 2 * u) << (8 * tig);
			m |= __shfl_xor_sync(0xffffffffu, m, 1);
			m |= __shfl_xor_sync(0xffffffffu, m, 2);
#pragma unroll
			for (int t = 0; t < 2; t++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					km |= (m >> (8 * (2 * t + (e >> 1)) + 2 * tig + (e & 1)) & 1)
					      << (4 * (2 * u + t) + e);
		}
	} else {
		const sgk_i64 i0 = ((sgk_i64)b * p.L + row0) * p.S + col0 + 2 * tig;
#pragma unroll 1
		for (int t = 0; t < NT8; t++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				km |= sgk_fa_keep2(d, th, i0 + 8 * h * (sgk_i64)p.S + 8 * t) << (4 * t + 2 * h);
	}
	return km;
}

/* The keep bits the forward stores for the backward (dmask: a row of
 * (S + 31) / 32 words, bit j % 32 of word j / 32 for key j). */
SGK_DEV int sgk_fa_mask_words(const SgFlashParams &p)
{
	return (p.S + 31) >> 5;
}

/* Stores keep bits km of a warp's 16 x (8 NT8) tile (sgk_fa_keep_rows's
 * layout, col0 a multiple of 32): the four lanes of a row group OR their
 * bits into each 32-key word of rows row0 and row0 + 8, and one stores it. */
template <int NT8>
SGK_DEV void sgk_fa_mask_store(const SgFlashParams &p, int b, int row0, int col0, unsigned km)
{
	static_assert(NT8 % 4 == 0 && NT8 <= 8, "whole words, a bit an element");
	const int tig = threadIdx.x & 3, nw = sgk_fa_mask_words(p);
#pragma unroll
	for (int g = 0; g < NT8 / 4; g++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			unsigned w = 0;
#pragma unroll
			for (int t = 0; t < 4; t++)
				w |= (km >> (4 * (4 * g + t) + 2 * h) & 3u) << (8 * t + 2 * tig);
			w |= __shfl_xor_sync(0xffffffffu, w, 1);
			w |= __shfl_xor_sync(0xffffffffu, w, 2);
			const int row = row0 + 8 * h, wd = (col0 >> 5) + g;
			if (tig == ((2 * g + h) & 3) && row < p.L && wd < nw)
				p.dmask[((sgk_i64)b * p.L + row) * nw + wd] = w;
		}
}

/* The stored keep bits of a warp's 16 x (8 NT8) tile in sgk_fa_keep_rows's
 * layout (the dQ kernel's; col0 a multiple of 32). */
template <int NT8>
SGK_DEV unsigned sgk_fa_mask_rows(const SgFlashParams &p, int b, int row0, int col0)
{
	static_assert(NT8 % 4 == 0 && NT8 <= 8, "whole words, a bit an element");
	const int tig = threadIdx.x & 3, nw = sgk_fa_mask_words(p);
	unsigned km = 0;
#pragma unroll
	for (int h = 0; h < 2; h++)
#pragma unroll
		for (int g = 0; g < NT8 / 4; g++) {
			const int row = row0 + 8 * h, wd = (col0 >> 5) + g;
			const unsigned w =
			        row < p.L && wd < nw ? __ldg(p.dmask + ((sgk_i64)b * p.L + row) * nw + wd) : 0u;
#pragma unroll
			for (int t = 0; t < 4; t++)
				km |= (w >> (8 * t + 2 * tig) & 3u) << (4 * (4 * g + t) + 2 * h);
		}
	return km;
}

/* The stored keep bits of a dK/dV warp's tile (transposed: rows are keys),
 * bit 4 t + e for the element of key kb + gi + 8 (e >> 1) (kb: the warp's
 * first key, a multiple of 16) and query qc0 + t * 8 + tig * 2 + (e & 1):
 * a word a query, the warp's 16 keys in one of its halves. */
template <int NT8>
SGK_DEV unsigned sgk_fa_mask_cols(const SgFlashParams &p, int b, int qc0, int kb)
{
	static_assert(NT8 <= 8, "a bit an element");
	const int lane = threadIdx.x & 31, gi = lane >> 2, tig = lane & 3, nw = sgk_fa_mask_words(p);
	const int sh = (kb & 31) + gi;
	const unsigned *m = p.dmask + (sgk_i64)b * p.L * nw + (kb >> 5);
	unsigned km = 0;
	if (kb >= p.S)
		return 0;
#pragma unroll
	for (int t = 0; t < NT8; t++)
#pragma unroll
		for (int c = 0; c < 2; c++) {
			const int qq = qc0 + 8 * t + 2 * tig + c;
			const unsigned w = qq < p.L ? __ldg(m + (sgk_i64)qq * nw) : 0u;
			km |= (w >> sh & 1u) << (4 * t + c);
			km |= (w >> (sh + 8) & 1u) << (4 * t + 2 + c);
		}
	return km;
}

/* c[t][e] times its factor, bit 4 t + e of km. */
template <int NT8>
SGK_DEV void sgk_fa_drop(float (&c)[NT8][4], unsigned km, float scale)
{
#pragma unroll
	for (int t = 0; t < NT8; t++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			c[t][e] *= sgk_fa_kf(km, 4 * t + e, scale);
}

/* sgk_acc_to_a of the tiles times their factors (bit 4 t + e of km). */
template <class T, int N>
SGK_DEV void sgk_acc_to_a_drop(unsigned (&a)[4], const float (&c)[N][4], int kk, unsigned km,
                               float scale)
{
	const int t0 = 2 * kk, t1 = 2 * kk + 1;
	a[0] = sgk_pack2(c[t0][0] * sgk_fa_kf(km, 4 * t0, scale),
	                 c[t0][1] * sgk_fa_kf(km, 4 * t0 + 1, scale), T());
	a[1] = sgk_pack2(c[t0][2] * sgk_fa_kf(km, 4 * t0 + 2, scale),
	                 c[t0][3] * sgk_fa_kf(km, 4 * t0 + 3, scale), T());
	a[2] = sgk_pack2(c[t1][0] * sgk_fa_kf(km, 4 * t1, scale),
	                 c[t1][1] * sgk_fa_kf(km, 4 * t1 + 1, scale), T());
	a[3] = sgk_pack2(c[t1][2] * sgk_fa_kf(km, 4 * t1 + 2, scale),
	                 c[t1][3] * sgk_fa_kf(km, 4 * t1 + 3, scale), T());
}

/* acc (16 x 8 NA) += C B for accumulator tiles c (16 x 8 NC, rounded to
 * T; DROP: times their factors, bit 4 t + e of km, first) and B the
 * shared [k][n] tile sm. */
template <class T, int LD, bool DROP, int NC, int NA>
SGK_DEV void sgk_fa_mma_cb(float (&acc)[NA][4], const float (&c)[NC][4], const T *sm, unsigned km,
                           float scale)
{
#pragma unroll
	for (int kk = 0; kk < NC / 2; kk++) {
		unsigned a[4];
		if (DROP)
			sgk_acc_to_a_drop<T>(a, c, kk, km, scale);
		else
			sgk_acc_to_a<T>(a, c, kk);
#pragma unroll
		for (int dn = 0; dn < NA / 2; dn++) {
			unsigned bf[4];
			sgk_frag_b_kn<LD>(bf, sm, kk * 16, dn * 16);
			sgk_mma(acc[2 * dn], a, bf[0], bf[1], T());
			sgk_mma(acc[2 * dn + 1], a, bf[2], bf[3], T());
		}
	}
}

/* ------------------------------------------------------------------ forward, tensor cores */

/* Forward tiles: NW warps of MT m tiles (16 queries each) against BN-key
 * tiles.  With one m tile a warp keeps its Q fragments in registers;
 * with more it reloads them from shared memory, and each K and V
 * fragment it loads feeds MT products instead of one. */
template <int DP, int NW_, int MT_, int BN_>
struct SgkFaFwdCfg {
	enum { NW = NW_, MT = MT_, BM = 16 * NW_ * MT_, BN = BN_, LD = DP + 8 };
	enum { SMEM = (BM + 4 * BN) * LD * 2 };
};

/* The forward's dropout instances: none, S % 8 == 0 (each row's 8 keys of
 * a tile one Philox block), any S. */
enum { SGK_FA_NODROP = 0, SGK_FA_DROP_ALIGNED = 1, SGK_FA_DROP_ANY = 2 };

template <class T, int DP, int NW, int MT, int BN, int DROP = SGK_FA_NODROP, int MINB = 8 / NW>
__global__ void __launch_bounds__(NW * 32, MINB) sgk_flash_fwd_tc(SgFlashParams p)
{
	typedef SgkFaFwdCfg<DP, NW, MT, BN> K;
	constexpr int BM = K::BM, LD = K::LD, NT = NW * 32;
	constexpr bool QREG = MT == 1;
	extern __shared__ __align__(16) unsigned char sgk_fa_smem[];
	T *sQ = (T *)sgk_fa_smem, *sK = sQ + BM * LD, *sV = sK + 2 * BN * LD;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gi = lane >> 2, tig = lane & 3;
	const int nmb = (p.L + BM - 1) / BM;
	const int mb = p.causal ? nmb - 1 - (int)blockIdx.x : (int)blockIdx.x;
	const int m0 = mb * BM, w0 = warp * 16 * MT; /* the warp's rows: m0 + w0 .. + 16 MT */
	const float sl2 = p.scale * SGK_LOG2E;
	const SgkDraws dr = sgk_fa_draws<DROP>(p);

	for (int b = blockIdx.y; b < p.nb0 * p.nb1; b += gridDim.y) {
		const int b0 = b / p.nb1, b1 = b % p.nb1;
		const T *q = (const T *)p.q + b0 * p.q_s0 + b1 * p.q_s1;
		const T *k = (const T *)p.k + b0 * p.k_s0 + b1 / p.kv_group * p.k_s1;
		const T *v = (const T *)p.v + b0 * p.v_s0 + b1 / p.kv_group * p.v_s1;
		const int kend = p.causal ? min(p.S, m0 + BM) : p.S;
		const int nkb = (kend + BN - 1) / BN;

		__syncthreads(); /* the previous batch is done with shared memory */
		sgk_fa_load<T, BM, DP, NT>(sQ, q, p.q_sr, m0, p.L, p.D, p.vec);
		sgk_cp_commit();
		if (nkb > 0)
			sgk_fa_load<T, BN, DP, NT>(sK, k, p.k_sr, 0, p.S, p.D, p.vec);
		sgk_cp_commit();
		if (nkb > 0)
			sgk_fa_load<T, BN, DP, NT>(sV, v, p.v_sr, 0, p.S, p.Dv, p.vec);
		sgk_cp_commit();
		sgk_cp_wait<1>();
		__syncthreads();
		unsigned qf[QREG ? DP / 16 : 1][4];
		if (QREG) {
#pragma unroll
			for (int kk = 0; kk < DP / 16; kk++)
				sgk_frag_a<LD>(qf[kk], sQ, w0, kk * 16);
		}

		float o[MT][DP / 8][4];
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int t = 0; t < DP / 8; t++)
				o[mt][t][0] = o[mt][t][1] = o[mt][t][2] = o[mt][t][3] = 0.f;
		float mrow[MT][2], lrow[MT][2];
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
			mrow[mt][0] = mrow[mt][1] = -SGK_INF, lrow[mt][0] = lrow[mt][1] = 0.f;

		for (int j = 0; j < nkb; j++) {
			const int st = j & 1, k0 = j * BN;
			sgk_cp_wait<1>();
			__syncthreads();
			if (j + 1 < nkb)
				sgk_fa_load<T, BN, DP, NT>(sK + (st ^ 1) * BN * LD, k, p.k_sr, k0 + BN, p.S,
				                           p.D, p.vec);
			sgk_cp_commit();
			if (j + 1 < nkb)
				sgk_fa_load<T, BN, DP, NT>(sV + (st ^ 1) * BN * LD, v, p.v_sr, k0 + BN, p.S,
				                           p.Dv, p.vec);
			sgk_cp_commit();

			/* Dropout's keep bits, drawn first: they do not depend on the
			 * scores, and the products overlap the draws. */
			unsigned km[MT];
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
				km[mt] = DROP ? sgk_fa_keep_rows<BN / 8, DROP == SGK_FA_DROP_ALIGNED>(
				                        dr, p, b, m0 + w0 + mt * 16 + gi, k0)
				              : 0u;

			/* S = Q K^T for this warp's rows and the tile's BN keys. */
			float s[MT][BN / 8][4];
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int t = 0; t < BN / 8; t++)
					s[mt][t][0] = s[mt][t][1] = s[mt][t][2] = s[mt][t][3] = 0.f;
			const T *kt = sK + st * BN * LD;
			/* (Rolled when Q comes from shared memory: fewer live registers.) */
#pragma unroll(QREG ? DP / 16 : 1)
			for (int kk = 0; kk < DP / 16; kk++) {
				unsigned qa[MT][4];
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					if (QREG) {
#pragma unroll
						for (int e = 0; e < 4; e++)
							qa[mt][e] = qf[QREG ? kk : 0][e];
					} else {
						sgk_frag_a<LD>(qa[mt], sQ, w0 + mt * 16, kk * 16);
					}
				}
#pragma unroll
				for (int nn = 0; nn < BN / 16; nn++) {
					unsigned bf[4];
					sgk_frag_b_nk<LD>(bf, kt, nn * 16, kk * 16);
#pragma unroll
					for (int mt = 0; mt < MT; mt++) {
						sgk_mma(s[mt][2 * nn], qa[mt], bf[0], bf[1], T());
						sgk_mma(s[mt][2 * nn + 1], qa[mt], bf[2], bf[3], T());
					}
				}
			}

			/* Mask, then the online softmax in the log2 domain. */
			const bool mask = k0 + BN > p.S || (p.causal && k0 + BN - 1 > m0 + w0);
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				const int row0 = m0 + w0 + mt * 16 + gi; /* and row0 + 8 */
#pragma unroll
				for (int t = 0; t < BN / 8; t++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						const int col = k0 + t * 8 + tig * 2 + (e & 1), row = row0 + (e >> 1) * 8;
						float x = s[mt][t][e] * sl2;
						if (mask && (col >= p.S || (p.causal && col > row)))
							x = -SGK_INF;
						s[mt][t][e] = x;
					}
				float corr[2];
#pragma unroll
				for (int h = 0; h < 2; h++) {
					float mx = mrow[mt][h];
#pragma unroll
					for (int t = 0; t < BN / 8; t++)
						mx = fmaxf(mx, fmaxf(s[mt][t][2 * h], s[mt][t][2 * h + 1]));
					mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
					mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
					const float base = mx == -SGK_INF ? 0.f : mx;
					corr[h] = exp2f(mrow[mt][h] - base);
					mrow[mt][h] = mx;
					float sum = 0.f;
#pragma unroll
					for (int t = 0; t < BN / 8; t++) {
						s[mt][t][2 * h] = exp2f(s[mt][t][2 * h] - base);
						s[mt][t][2 * h + 1] = exp2f(s[mt][t][2 * h + 1] - base);
						sum += s[mt][t][2 * h] + s[mt][t][2 * h + 1];
					}
					lrow[mt][h] = lrow[mt][h] * corr[h] + sum;
				}
#pragma unroll
				for (int t = 0; t < DP / 8; t++) {
					o[mt][t][0] *= corr[0];
					o[mt][t][1] *= corr[0];
					o[mt][t][2] *= corr[1];
					o[mt][t][3] *= corr[1];
				}
				/* Dropout on P after its sum (l is the undropped one's); the
				 * keep bits stored for the backward. */
				if (DROP) {
					if (p.dmask)
						sgk_fa_mask_store<BN / 8>(p, b, row0, k0, km[mt]);
					sgk_fa_drop<BN / 8>(s[mt], km[mt], p.drop_scale);
				}
			}

			/* O += P V. */
			sgk_cp_wait<2>();
			__syncthreads();
			const T *vt = sV + st * BN * LD;
#pragma unroll
			for (int kk = 0; kk < BN / 16; kk++) {
				unsigned a[MT][4];
#pragma unroll
				for (int mt = 0; mt < MT; mt++)
					sgk_acc_to_a<T>(a[mt], s[mt], kk);
#pragma unroll
				for (int dn = 0; dn < DP / 16; dn++) {
					unsigned bf[4];
					sgk_frag_b_kn<LD>(bf, vt, kk * 16, dn * 16);
#pragma unroll
					for (int mt = 0; mt < MT; mt++) {
						sgk_mma(o[mt][2 * dn], a[mt], bf[0], bf[1], T());
						sgk_mma(o[mt][2 * dn + 1], a[mt], bf[2], bf[3], T());
					}
				}
			}
		}
		sgk_cp_wait<0>();

		/* o / l, and lse = (m + log2 l) * ln 2. */
		T *og = (T *)p.o + b0 * p.o_s0 + b1 * p.o_s1;
#pragma unroll
		for (int mt = 0; mt < MT; mt++) {
			const int row0 = m0 + w0 + mt * 16 + gi;
			float inv[2];
#pragma unroll
			for (int h = 0; h < 2; h++) {
				float l = lrow[mt][h];
				l += __shfl_xor_sync(0xffffffffu, l, 1);
				l += __shfl_xor_sync(0xffffffffu, l, 2);
				inv[h] = l == 0.f ? 0.f : 1.f / l;
				const int row = row0 + 8 * h;
				if (tig == 0 && row < p.L)
					p.lse[(sgk_i64)b * p.L + row] =
					        l == 0.f ? SGK_INF : (mrow[mt][h] + log2f(l)) * SGK_LN2;
			}
#pragma unroll
			for (int t = 0; t < DP / 8; t++) {
				o[mt][t][0] *= inv[0];
				o[mt][t][1] *= inv[0];
				o[mt][t][2] *= inv[1];
				o[mt][t][3] *= inv[1];
			}
			sgk_fa_store<T, DP / 8>(og, p.o_sr, o[mt], m0 + w0 + mt * 16, p.L, p.Dv, 1.f, p.vec);
		}
	}
}

/* ------------------------------------------------------------------ backward, tensor cores */

/* delta[b, i] = sum_d dO[b, i, d] * O[b, i, d], one warp a row. */
template <class T>
__global__ void __launch_bounds__(256) sgk_flash_delta(SgFlashParams p)
{
	const sgk_i64 row = (sgk_i64)blockIdx.x * 8 + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (row >= (sgk_i64)p.nb0 * p.nb1 * p.L)
		return;
	const int b = (int)(row / p.L), i = (int)(row % p.L), b0 = b / p.nb1, b1 = b % p.nb1;
	const T *o = (const T *)p.o + b0 * p.o_s0 + b1 * p.o_s1 + i * p.o_sr;
	const T *d = (const T *)p.dout + b0 * p.do_s0 + b1 * p.do_s1 + i * p.do_sr;
	float s = 0.f;
	for (int c = lane; c < p.Dv; c += 32)
		s += sgk_tof(o[c]) * sgk_tof(d[c]);
	s = sgk_group_sum<32>(s);
	if (lane == 0)
		p.delta[row] = s;
}

/* Backward tiles: 4 warps of 16 rows; the dK/dV kernel walks query
 * tiles of BQKV, the dQ kernel key tiles of BK. */
template <int DP, int BQKV_>
struct SgkFaBwdCfg {
	enum { NW = 4, BQ = 64, BK = 64, BQKV = BQKV_, LD = DP + 8 };
	/* dK/dV kernel: K, V tiles; Q, dO double-buffered; lse, delta. */
	enum { SMEM_KV = (2 * BK + 4 * BQKV) * LD * 2 + 4 * BQKV * 4 };
	/* dQ kernel: Q, dO tiles; K, V double-buffered. */
	enum { SMEM_Q = (2 * BQ + 4 * BK) * LD * 2 };
};

/* dK and dV for BK keys a block (16 a warp), over all query tiles:
 *   S^T = K Q^T, P^T = exp(S^T * scale - lse), dV += P^T dO,
 *   dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q * scale
 * (dropout: the dropped P^T in dV, dP^T times the factors in dS^T). */
template <class T, int DP, int BQKV, bool DROP = false, int MINB = 2>
__global__ void __launch_bounds__(128, MINB) sgk_flash_bwd_kv_tc(SgFlashParams p)
{
	typedef SgkFaBwdCfg<DP, BQKV> K;
	constexpr int BQ = K::BQKV, BK = K::BK, LD = K::LD, NT = K::NW * 32;
	extern __shared__ __align__(16) unsigned char sgk_fa_smem[];
	T *sK = (T *)sgk_fa_smem, *sV = sK + BK * LD, *sQ = sV + BK * LD, *sO = sQ + 2 * BQ * LD;
	float *sL = (float *)(sO + 2 * BQ * LD), *sD = sL + 2 * BQ;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gi = lane >> 2, tig = lane & 3;
	const int n0 = blockIdx.x * BK;
	const float sl2 = p.scale * SGK_LOG2E;

	/* With grouped-query heads, a block's keys serve kv_group query heads:
	 * dK and dV sum over them (b1: the key head, g: the query head). */
	const int nkv1 = p.nb1 / p.kv_group;
	for (int bk = blockIdx.y; bk < p.nb0 * nkv1; bk += gridDim.y) {
		const int b0 = bk / nkv1, b1 = bk % nkv1;
		const T *k = (const T *)p.k + b0 * p.k_s0 + b1 * p.k_s1;
		const T *v = (const T *)p.v + b0 * p.v_s0 + b1 * p.v_s1;
		const int i_first = p.causal ? n0 / BQ : 0, nqb = (p.L + BQ - 1) / BQ;
		float dk[DP / 8][4], dv[DP / 8][4];
#pragma unroll
		for (int t = 0; t < DP / 8; t++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				dk[t][e] = dv[t][e] = 0.f;
		const int key0 = n0 + warp * 16 + gi; /* and key0 + 8 */

		for (int g = b1 * p.kv_group; g < (b1 + 1) * p.kv_group; g++) {
			const int b = b0 * p.nb1 + g;
			const T *q = (const T *)p.q + b0 * p.q_s0 + g * p.q_s1;
			const T *dO = (const T *)p.dout + b0 * p.do_s0 + g * p.do_s1;
			const float *lse = p.lse + (sgk_i64)b * p.L, *delta = p.delta + (sgk_i64)b * p.L;

			__syncthreads();
			if (g == b1 * p.kv_group) {
				sgk_fa_load<T, BK, DP, NT>(sK, k, p.k_sr, n0, p.S, p.D, p.vec);
				sgk_fa_load<T, BK, DP, NT>(sV, v, p.v_sr, n0, p.S, p.Dv, p.vec);
			}
			if (i_first < nqb) {
				sgk_fa_load<T, BQ, DP, NT>(sQ, q, p.q_sr, i_first * BQ, p.L, p.D, p.vec);
				sgk_fa_load_vec<BQ, NT>(sL, lse, i_first * BQ, p.L);
			}
			sgk_cp_commit();
			if (i_first < nqb) {
				sgk_fa_load<T, BQ, DP, NT>(sO, dO, p.do_sr, i_first * BQ, p.L, p.Dv, p.vec);
				sgk_fa_load_vec<BQ, NT>(sD, delta, i_first * BQ, p.L);
			}
			sgk_cp_commit();

			for (int i = i_first; i < nqb; i++) {
				const int st = (i - i_first) & 1, q0 = i * BQ;
				T *qt = sQ + st * BQ * LD, *ot = sO + st * BQ * LD;
				const float *lt = sL + st * BQ, *dt = sD + st * BQ;
				sgk_cp_wait<1>();
				__syncthreads();
				if (i + 1 < nqb) {
					sgk_fa_load<T, BQ, DP, NT>(sQ + (st ^ 1) * BQ * LD, q, p.q_sr, q0 + BQ, p.L, p.D,
					                           p.vec);
					sgk_fa_load_vec<BQ, NT>(sL + (st ^ 1) * BQ, lse, q0 + BQ, p.L);
				}
				sgk_cp_commit();
				if (i + 1 < nqb) {
					sgk_fa_load<T, BQ, DP, NT>(sO + (st ^ 1) * BQ * LD, dO, p.do_sr, q0 + BQ, p.L,
					                           p.Dv, p.vec);
					sgk_fa_load_vec<BQ, NT>(sD + (st ^ 1) * BQ, delta, q0 + BQ, p.L);
				}
				sgk_cp_commit();

				/* Dropout's keep bits, the forward's (bit 4 t + e for pt[t][e]),
				 * loaded before the products that hide their latency. */
				const unsigned km = DROP ? sgk_fa_mask_cols<BQ / 8>(p, b, q0, n0 + warp * 16) : 0u;

				/* S^T (16 keys x BQ queries) = K_w Q^T. */
				float pt[BQ / 8][4];
#pragma unroll
				for (int t = 0; t < BQ / 8; t++)
					pt[t][0] = pt[t][1] = pt[t][2] = pt[t][3] = 0.f;
#pragma unroll
				for (int kk = 0; kk < DP / 16; kk++) {
					unsigned a[4];
					sgk_frag_a<LD>(a, sK, warp * 16, kk * 16);
#pragma unroll
					for (int nn = 0; nn < BQ / 16; nn++) {
						unsigned bf[4];
						sgk_frag_b_nk<LD>(bf, qt, nn * 16, kk * 16);
						sgk_mma(pt[2 * nn], a, bf[0], bf[1], T());
						sgk_mma(pt[2 * nn + 1], a, bf[2], bf[3], T());
					}
				}
				/* P^T, masked: queries past L, and keys after the query. */
				const bool mask = q0 + BQ > p.L || (p.causal && q0 < n0 + warp * 16 + 16);
#pragma unroll
				for (int t = 0; t < BQ / 8; t++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						const int qc = t * 8 + tig * 2 + (e & 1), key = key0 + (e >> 1) * 8;
						float x = exp2f(pt[t][e] * sl2 - lt[qc] * SGK_LOG2E);
						if (mask && (q0 + qc >= p.L || (p.causal && key > q0 + qc)))
							x = 0.f;
						pt[t][e] = x;
					}

				sgk_cp_wait<2>();
				__syncthreads();
				/* dV += P^T dO (dropped P^T under dropout). */
				if (DROP)
					sgk_fa_mma_cb<T, LD, true>(dv, pt, ot, km, p.drop_scale);
				else
					sgk_fa_mma_cb<T, LD, false>(dv, pt, ot, 0u, 0.f);
				/* dP^T = V_w dO^T, then dS^T = P^T (dP^T - delta). */
				float ds[BQ / 8][4];
#pragma unroll
				for (int t = 0; t < BQ / 8; t++)
					ds[t][0] = ds[t][1] = ds[t][2] = ds[t][3] = 0.f;
#pragma unroll
				for (int kk = 0; kk < DP / 16; kk++) {
					unsigned a[4];
					sgk_frag_a<LD>(a, sV, warp * 16, kk * 16);
#pragma unroll
					for (int nn = 0; nn < BQ / 16; nn++) {
						unsigned bf[4];
						sgk_frag_b_nk<LD>(bf, ot, nn * 16, kk * 16);
						sgk_mma(ds[2 * nn], a, bf[0], bf[1], T());
						sgk_mma(ds[2 * nn + 1], a, bf[2], bf[3], T());
					}
				}
				if (DROP) {
					/* dS^T = P^T (dP^T * factor - delta). */
#pragma unroll
					for (int t = 0; t < BQ / 8; t++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							const float f = sgk_fa_kf(km, 4 * t + e, p.drop_scale);
							ds[t][e] = pt[t][e] * (ds[t][e] * f - dt[t * 8 + tig * 2 + (e & 1)]);
						}
				} else {
#pragma unroll
					for (int t = 0; t < BQ / 8; t++)
#pragma unroll
						for (int e = 0; e < 4; e++)
							ds[t][e] = pt[t][e] * (ds[t][e] - dt[t * 8 + tig * 2 + (e & 1)]);
				}
				/* dK += dS^T Q. */
				sgk_fa_mma_cb<T, LD, false>(dk, ds, qt, 0u, 0.f);
			}
			sgk_cp_wait<0>();
		}
		T *dkg = (T *)p.dk + b0 * p.dk_s0 + b1 * p.dk_s1;
		T *dvg = (T *)p.dv + b0 * p.dv_s0 + b1 * p.dv_s1;
		sgk_fa_store<T, DP / 8>(dkg, p.dk_sr, dk, n0 + warp * 16, p.S, p.D, p.scale, p.vec);
		sgk_fa_store<T, DP / 8>(dvg, p.dv_sr, dv, n0 + warp * 16, p.S, p.Dv, 1.f, p.vec);
	}
}

/* dQ for BQ queries a block (16 a warp), over the key tiles:
 *   S = Q K^T, P = exp(S * scale - lse), dP = dO V^T,
 *   dS = P (dP - delta), dQ += dS K * scale (dropout: dP times the
 *   factors). */
template <class T, int DP, bool DROP = false, int MINB = 2>
__global__ void __launch_bounds__(128, MINB) sgk_flash_bwd_q_tc(SgFlashParams p)
{
	typedef SgkFaBwdCfg<DP, 64> K;
	constexpr int BQ = K::BQ, BK = K::BK, LD = K::LD, NT = K::NW * 32;
	extern __shared__ __align__(16) unsigned char sgk_fa_smem[];
	T *sQ = (T *)sgk_fa_smem, *sO = sQ + BQ * LD, *sK = sO + BQ * LD, *sV = sK + 2 * BK * LD;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gi = lane >> 2, tig = lane & 3;
	const int nmb = (p.L + BQ - 1) / BQ;
	const int mb = p.causal ? nmb - 1 - (int)blockIdx.x : (int)blockIdx.x;
	const int m0 = mb * BQ;
	const float sl2 = p.scale * SGK_LOG2E;

	for (int b = blockIdx.y; b < p.nb0 * p.nb1; b += gridDim.y) {
		const int b0 = b / p.nb1, b1 = b % p.nb1;
		const T *q = (const T *)p.q + b0 * p.q_s0 + b1 * p.q_s1;
		const T *k = (const T *)p.k + b0 * p.k_s0 + b1 / p.kv_group * p.k_s1;
		const T *v = (const T *)p.v + b0 * p.v_s0 + b1 / p.kv_group * p.v_s1;
		const T *dO = (const T *)p.dout + b0 * p.do_s0 + b1 * p.do_s1;
		const int kend = p.causal ? min(p.S, m0 + BQ) : p.S;
		const int nkb = (kend + BK - 1) / BK;

		__syncthreads();
		sgk_fa_load<T, BQ, DP, NT>(sQ, q, p.q_sr, m0, p.L, p.D, p.vec);
		sgk_fa_load<T, BQ, DP, NT>(sO, dO, p.do_sr, m0, p.L, p.Dv, p.vec);
		sgk_cp_commit();
		if (nkb > 0)
			sgk_fa_load<T, BK, DP, NT>(sK, k, p.k_sr, 0, p.S, p.D, p.vec);
		sgk_cp_commit();
		if (nkb > 0)
			sgk_fa_load<T, BK, DP, NT>(sV, v, p.v_sr, 0, p.S, p.Dv, p.vec);
		sgk_cp_commit();

		const int row0 = m0 + warp * 16 + gi;
		float lse2[2], dlt[2];
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int r = row0 + 8 * h;
			lse2[h] = r < p.L ? p.lse[(sgk_i64)b * p.L + r] * SGK_LOG2E : SGK_INF;
			dlt[h] = r < p.L ? p.delta[(sgk_i64)b * p.L + r] : 0.f;
		}
		float dq[DP / 8][4];
#pragma unroll
		for (int t = 0; t < DP / 8; t++)
			dq[t][0] = dq[t][1] = dq[t][2] = dq[t][3] = 0.f;

		for (int j = 0; j < nkb; j++) {
			const int st = j & 1, k0 = j * BK;
			sgk_cp_wait<1>();
			__syncthreads();
			if (j + 1 < nkb)
				sgk_fa_load<T, BK, DP, NT>(sK + (st ^ 1) * BK * LD, k, p.k_sr, k0 + BK, p.S,
				                           p.D, p.vec);
			sgk_cp_commit();
			if (j + 1 < nkb)
				sgk_fa_load<T, BK, DP, NT>(sV + (st ^ 1) * BK * LD, v, p.v_sr, k0 + BK, p.S,
				                           p.Dv, p.vec);
			sgk_cp_commit();
			const T *kt = sK + st * BK * LD, *vt = sV + st * BK * LD;

			/* Dropout's keep bits, the forward's (bit 4 t + e for s[t][e]),
			 * loaded before the products that hide their latency. */
			const unsigned km = DROP ? sgk_fa_mask_rows<BK / 8>(p, b, row0, k0) : 0u;

			/* S = Q_w K^T, P = exp2(S * scale * log2e - lse * log2e), masked. */
			float s[BK / 8][4];
#pragma unroll
			for (int t = 0; t < BK / 8; t++)
				s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.f;
#pragma unroll
			for (int kk = 0; kk < DP / 16; kk++) {
				unsigned a[4];
				sgk_frag_a<LD>(a, sQ, warp * 16, kk * 16);
#pragma unroll
				for (int nn = 0; nn < BK / 16; nn++) {
					unsigned bf[4];
					sgk_frag_b_nk<LD>(bf, kt, nn * 16, kk * 16);
					sgk_mma(s[2 * nn], a, bf[0], bf[1], T());
					sgk_mma(s[2 * nn + 1], a, bf[2], bf[3], T());
				}
			}
			const bool mask = k0 + BK > p.S || (p.causal && k0 + BK - 1 > m0 + warp * 16);
#pragma unroll
			for (int t = 0; t < BK / 8; t++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int col = k0 + t * 8 + tig * 2 + (e & 1), row = row0 + (e >> 1) * 8;
					float x = exp2f(s[t][e] * sl2 - lse2[e >> 1]);
					if (mask && (col >= p.S || (p.causal && col > row)))
						x = 0.f;
					s[t][e] = x;
				}

			sgk_cp_wait<2>();
			__syncthreads();
			/* dP = dO_w V^T; dS = P (dP - delta). */
			float ds[BK / 8][4];
#pragma unroll
			for (int t = 0; t < BK / 8; t++)
				ds[t][0] = ds[t][1] = ds[t][2] = ds[t][3] = 0.f;
#pragma unroll
			for (int kk = 0; kk < DP / 16; kk++) {
				unsigned a[4];
				sgk_frag_a<LD>(a, sO, warp * 16, kk * 16);
#pragma unroll
				for (int nn = 0; nn < BK / 16; nn++) {
					unsigned bf[4];
					sgk_frag_b_nk<LD>(bf, vt, nn * 16, kk * 16);
					sgk_mma(ds[2 * nn], a, bf[0], bf[1], T());
					sgk_mma(ds[2 * nn + 1], a, bf[2], bf[3], T());
				}
			}
			if (DROP) /* dP times the dropout factors */
				sgk_fa_drop<BK / 8>(ds, km, p.drop_scale);
#pragma unroll
			for (int t = 0; t < BK / 8; t++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					ds[t][e] = s[t][e] * (ds[t][e] - dlt[e >> 1]);
			/* dQ += dS K. */
			sgk_fa_mma_cb<T, LD, false>(dq, ds, kt, 0u, 0.f);
		}
		sgk_cp_wait<0>();
		T *dqg = (T *)p.dq + b0 * p.dq_s0 + b1 * p.dq_s1;
		sgk_fa_store<T, DP / 8>(dqg, p.dq_sr, dq, m0 + warp * 16, p.L, p.D, p.scale, p.vec);
	}
}

/* ------------------------------------------------------------------ SIMT path */

/* Rows of a tile in the SIMT kernels, and warps a block. */
#define SGK_FS_TILE 32
#define SGK_FS_NW 8

/* Loads rows [r0, r0 + 32) of an n x d matrix into a shared tile of
 * accumulator type with row stride d + 1 (zeros past n). */
template <class T, class A>
SGK_DEV void sgk_fs_load(A *sm, const T *g, sgk_i64 rs, int r0, int n, int d)
{
	for (int c = threadIdx.x; c < SGK_FS_TILE * d; c += blockDim.x) {
		const int r = c / d, col = c % d;
		sm[r * (d + 1) + col] = r0 + r < n ? sgk_tof(g[(sgk_i64)(r0 + r) * rs + col]) : (A)0;
	}
}

/* Forward: a warp a query row; lanes take keys for the scores and
 * head dims (lane, lane + 32, ...) for the output. */
template <class T, int DMAX, bool DROP = false>
__global__ void __launch_bounds__(SGK_FS_NW * 32) sgk_flash_fwd_simt(SgFlashParams p)
{
	typedef typename sgk_acc<T>::type A;
	extern __shared__ __align__(16) unsigned char sgk_fa_smem[];
	const int D = p.D, Dv = p.Dv, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	A *sK = (A *)sgk_fa_smem, *sV = sK + SGK_FS_TILE * (D + 1);
	A *sq = sV + SGK_FS_TILE * (Dv + 1) + warp * D;
	const int i = blockIdx.x * SGK_FS_NW + warp;
	const A scale = p.scale;
	const SgkDraws dr = sgk_fa_draws<DROP>(p);
	for (int b = blockIdx.y; b < p.nb0 * p.nb1; b += gridDim.y) {
		const int b0 = b / p.nb1, b1 = b % p.nb1;
		const T *q = (const T *)p.q + b0 * p.q_s0 + b1 * p.q_s1;
		const T *k = (const T *)p.k + b0 * p.k_s0 + b1 / p.kv_group * p.k_s1;
		const T *v = (const T *)p.v + b0 * p.v_s0 + b1 / p.kv_group * p.v_s1;
		const int ilast = min(p.L, (int)(blockIdx.x + 1) * SGK_FS_NW) - 1;
		const int kend = p.causal ? min(p.S, ilast + 1) : p.S;
		__syncthreads();
		for (int c = lane; c < D; c += 32)
			sq[c] = i < p.L ? sgk_tof(q[(sgk_i64)i * p.q_sr + c]) : (A)0;
		A o[DMAX / 32], m = -SGK_INF, l = 0;
#pragma unroll
		for (int c = 0; c < DMAX / 32; c++)
			o[c] = 0;
		for (int j0 = 0; j0 < kend; j0 += SGK_FS_TILE) {
			__syncthreads();
			sgk_fs_load(sK, k, p.k_sr, j0, p.S, D);
			sgk_fs_load(sV, v, p.v_sr, j0, p.S, Dv);
			__syncthreads();
			const int j = j0 + lane;
			A s = 0;
			for (int c = 0; c < D; c++)
				s += sq[c] * sK[lane * (D + 1) + c];
			s *= scale;
			const bool live = i < p.L && j < p.S && !(p.causal && j > i);
			if (!live)
				s = -SGK_INF;
			const A mn = sgk_max(m, sgk_group_max<32>(s));
			const A base = mn == (A)-SGK_INF ? (A)0 : mn;
			A pj = live ? sgk_exp(s - base) : (A)0;
			const A corr = sgk_exp(m - base);
			l = l * corr + sgk_group_sum<32>(pj);
			m = mn;
			if (DROP) /* dropout after the sum (l is the undropped P's) */
				pj *= sgk_keep(dr, ((sgk_i64)b * p.L + i) * p.S + j, p.drop_thresh)
				              ? (A)p.drop_scale
				              : (A)0;
#pragma unroll
			for (int c = 0; c < DMAX / 32; c++)
				o[c] *= corr;
			for (int jj = 0; jj < SGK_FS_TILE; jj++) {
				const A pjj = __shfl_sync(0xffffffffu, pj, jj);
#pragma unroll
				for (int c = 0; c < DMAX / 32; c++)
					if (lane + 32 * c < Dv)
						o[c] += pjj * sV[jj * (Dv + 1) + lane + 32 * c];
			}
		}
		if (i < p.L) {
			T *og = (T *)p.o + b0 * p.o_s0 + b1 * p.o_s1 + (sgk_i64)i * p.o_sr;
			const A inv = l == 0 ? (A)0 : (A)1 / l;
#pragma unroll
			for (int c = 0; c < DMAX / 32; c++)
				if (lane + 32 * c < Dv)
					og[lane + 32 * c] = sgk_cvt<T>(o[c] * inv);
			if (lane == 0)
				p.lse[(sgk_i64)b * p.L + i] = l == 0 ? SGK_INF : (float)(m + sgk_log(l));
		}
	}
}

/* Backward, dQ: a warp a query row, lanes over a tile's keys. */
template <class T, int DMAX, bool DROP = false>
__global__ void __launch_bounds__(SGK_FS_NW * 32) sgk_flash_bwd_q_simt(SgFlashParams p)
{
	typedef typename sgk_acc<T>::type A;
	extern __shared__ __align__(16) unsigned char sgk_fa_smem[];
	const int D = p.D, Dv = p.Dv, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	A *sK = (A *)sgk_fa_smem, *sV = sK + SGK_FS_TILE * (D + 1);
	A *sq = sV + SGK_FS_TILE * (Dv + 1) + warp * (D + Dv), *sdo = sq + D;
	const int i = blockIdx.x * SGK_FS_NW + warp;
	const A scale = p.scale;
	const SgkDraws dr = sgk_fa_draws<DROP>(p);
	for (int b = blockIdx.y; b < p.nb0 * p.nb1; b += gridDim.y) {
		const int b0 = b / p.nb1, b1 = b % p.nb1;
		const T *q = (const T *)p.q + b0 * p.q_s0 + b1 * p.q_s1;
		const T *k = (const T *)p.k + b0 * p.k_s0 + b1 / p.kv_group * p.k_s1;
		const T *v = (const T *)p.v + b0 * p.v_s0 + b1 / p.kv_group * p.v_s1;
		const T *dO = (const T *)p.dout + b0 * p.do_s0 + b1 * p.do_s1;
		const int ilast = min(p.L, (int)(blockIdx.x + 1) * SGK_FS_NW) - 1;
		const int kend = p.causal ? min(p.S, ilast + 1) : p.S;
		__syncthreads();
		for (int c = lane; c < D; c += 32)
			sq[c] = i < p.L ? sgk_tof(q[(sgk_i64)i * p.q_sr + c]) : (A)0;
		for (int c = lane; c < Dv; c += 32)
			sdo[c] = i < p.L ? sgk_tof(dO[(sgk_i64)i * p.do_sr + c]) : (A)0;
		const A lse = i < p.L ? (A)p.lse[(sgk_i64)b * p.L + i] : (A)0;
		const A dl = i < p.L ? (A)p.delta[(sgk_i64)b * p.L + i] : (A)0;
		A dq[DMAX / 32];
#pragma unroll
		for (int c = 0; c < DMAX / 32; c++)
			dq[c] = 0;
		for (int j0 = 0; j0 < kend; j0 += SGK_FS_TILE) {
			__syncthreads();
			sgk_fs_load(sK, k, p.k_sr, j0, p.S, D);
			sgk_fs_load(sV, v, p.v_sr, j0, p.S, Dv);
			__syncthreads();
			const int j = j0 + lane;
			A s = 0, dp = 0;
			for (int c = 0; c < D; c++)
				s += sq[c] * sK[lane * (D + 1) + c];
			for (int c = 0; c < Dv; c++)
				dp += sdo[c] * sV[lane * (Dv + 1) + c];
			const bool live = i < p.L && j < p.S && !(p.causal && j > i);
			const A pj = live ? sgk_exp(s * scale - lse) : (A)0;
			if (DROP) /* dP times the dropout factor */
				dp *= sgk_keep(dr, ((sgk_i64)b * p.L + i) * p.S + j, p.drop_thresh)
				              ? (A)p.drop_scale
				              : (A)0;
			const A ds = pj * (dp - dl);
			for (int jj = 0; jj < SGK_FS_TILE; jj++) {
				const A d = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
				for (int c = 0; c < DMAX / 32; c++)
					if (lane + 32 * c < D)
						dq[c] += d * sK[jj * (D + 1) + lane + 32 * c];
			}
		}
		if (i < p.L) {
			T *g = (T *)p.dq + b0 * p.dq_s0 + b1 * p.dq_s1 + (sgk_i64)i * p.dq_sr;
#pragma unroll
			for (int c = 0; c < DMAX / 32; c++)
				if (lane + 32 * c < D)
					g[lane + 32 * c] = sgk_cvt<T>(dq[c] * scale);
		}
	}
}

/* Backward, dK and dV: a warp a key row, lanes over a tile's queries. */
template <class T, int DMAX, bool DROP = false>
__global__ void __launch_bounds__(SGK_FS_NW * 32) sgk_flash_bwd_kv_simt(SgFlashParams p)
{
	typedef typename sgk_acc<T>::type A;
	extern __shared__ __align__(16) unsigned char sgk_fa_smem[];
	const int D = p.D, Dv = p.Dv, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	A *sQ = (A *)sgk_fa_smem, *sO = sQ + SGK_FS_TILE * (D + 1);
	A *sk = sO + SGK_FS_TILE * (Dv + 1) + warp * (D + Dv), *sv = sk + D;
	A *sL = (A *)(sgk_fa_smem) + SGK_FS_TILE * (D + 1 + Dv + 1) + SGK_FS_NW * (D + Dv);
	A *sD = sL + SGK_FS_TILE;
	const int j = blockIdx.x * SGK_FS_NW + warp;
	const A scale = p.scale;
	const SgkDraws dr = sgk_fa_draws<DROP>(p);
	const int nkv1 = p.nb1 / p.kv_group; /* key heads; each serves kv_group query heads */
	for (int bk = blockIdx.y; bk < p.nb0 * nkv1; bk += gridDim.y) {
		const int b0 = bk / nkv1, b1 = bk % nkv1;
		const T *k = (const T *)p.k + b0 * p.k_s0 + b1 * p.k_s1;
		const T *v = (const T *)p.v + b0 * p.v_s0 + b1 * p.v_s1;
		const int istart = p.causal ? (int)(blockIdx.x * SGK_FS_NW) / SGK_FS_TILE * SGK_FS_TILE : 0;
		__syncthreads();
		for (int c = lane; c < D; c += 32)
			sk[c] = j < p.S ? sgk_tof(k[(sgk_i64)j * p.k_sr + c]) : (A)0;
		for (int c = lane; c < Dv; c += 32)
			sv[c] = j < p.S ? sgk_tof(v[(sgk_i64)j * p.v_sr + c]) : (A)0;
		A dk[DMAX / 32], dv[DMAX / 32];
#pragma unroll
		for (int c = 0; c < DMAX / 32; c++)
			dk[c] = dv[c] = 0;
		for (int g = b1 * p.kv_group; g < (b1 + 1) * p.kv_group; g++) {
			const int b = b0 * p.nb1 + g;
			const T *q = (const T *)p.q + b0 * p.q_s0 + g * p.q_s1;
			const T *dO = (const T *)p.dout + b0 * p.do_s0 + g * p.do_s1;
			const float *lse = p.lse + (sgk_i64)b * p.L, *delta = p.delta + (sgk_i64)b * p.L;
			for (int i0 = istart; i0 < p.L; i0 += SGK_FS_TILE) {
				__syncthreads();
				sgk_fs_load(sQ, q, p.q_sr, i0, p.L, D);
				sgk_fs_load(sO, dO, p.do_sr, i0, p.L, Dv);
				for (int c = threadIdx.x; c < SGK_FS_TILE; c += blockDim.x) {
					sL[c] = i0 + c < p.L ? (A)lse[i0 + c] : (A)0;
					sD[c] = i0 + c < p.L ? (A)delta[i0 + c] : (A)0;
				}
				__syncthreads();
				const int i = i0 + lane;
				A s = 0, dp = 0;
				for (int c = 0; c < D; c++)
					s += sk[c] * sQ[lane * (D + 1) + c];
				for (int c = 0; c < Dv; c++)
					dp += sv[c] * sO[lane * (Dv + 1) + c];
				const bool live = j < p.S && i < p.L && !(p.causal && j > i);
				const A pi = live ? sgk_exp(s * scale - sL[lane]) : (A)0;
				A pd = pi; /* dropout: the dropped P in dV, dP times the factor in dS */
				if (DROP) {
					const A f = sgk_keep(dr, ((sgk_i64)b * p.L + i) * p.S + j, p.drop_thresh)
					                    ? (A)p.drop_scale
					                    : (A)0;
					pd = pi * f;
					dp *= f;
				}
				const A ds = pi * (dp - sD[lane]);
				for (int ii = 0; ii < SGK_FS_TILE; ii++) {
					const A pb = __shfl_sync(0xffffffffu, pd, ii);
					const A db = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
					for (int c = 0; c < DMAX / 32; c++) {
						if (lane + 32 * c < Dv)
							dv[c] += pb * sO[ii * (Dv + 1) + lane + 32 * c];
						if (lane + 32 * c < D)
							dk[c] += db * sQ[ii * (D + 1) + lane + 32 * c];
					}
				}
			}
		}
		if (j < p.S) {
			T *gk = (T *)p.dk + b0 * p.dk_s0 + b1 * p.dk_s1 + (sgk_i64)j * p.dk_sr;
			T *gv = (T *)p.dv + b0 * p.dv_s0 + b1 * p.dv_s1 + (sgk_i64)j * p.dv_sr;
#pragma unroll
			for (int c = 0; c < DMAX / 32; c++) {
				if (lane + 32 * c < D)
					gk[lane + 32 * c] = sgk_cvt<T>(dk[c] * scale);
				if (lane + 32 * c < Dv)
					gv[lane + 32 * c] = sgk_cvt<T>(dv[c]);
			}
		}
	}
}

#ifndef __CUDACC_RTC__
/* ------------------------------------------------------------------ host side */

/* Zeroes *p and sets sizes, scale, mask and contiguous strides of every
 * tensor ([nb0, nb1, rows, dim]); the caller sets the pointers. */
static inline void sg_flash_params_init(SgFlashParams *p, int nb0, int nb1, int L, int S, int D,
                                        int Dv, float scale, int causal)
{
	SgFlashParams z = {};
	*p = z;
	p->nb0 = nb0;
	p->nb1 = nb1;
	p->L = L;
	p->S = S;
	p->D = D;
	p->Dv = Dv;
	p->scale = scale;
	p->causal = causal;
	p->kv_group = 1;
	p->q_sr = p->dq_sr = D;
	p->q_s1 = p->dq_s1 = (sgk_i64)L * D;
	p->q_s0 = p->dq_s0 = (sgk_i64)nb1 * L * D;
	p->k_sr = p->dk_sr = D;
	p->k_s1 = p->dk_s1 = (sgk_i64)S * D;
	p->k_s0 = p->dk_s0 = (sgk_i64)nb1 * S * D;
	p->v_sr = p->dv_sr = Dv;
	p->v_s1 = p->dv_s1 = (sgk_i64)S * Dv;
	p->v_s0 = p->dv_s0 = (sgk_i64)nb1 * S * Dv;
	p->o_sr = p->do_sr = Dv;
	p->o_s1 = p->do_s1 = (sgk_i64)L * Dv;
	p->o_s0 = p->do_s0 = (sgk_i64)nb1 * L * Dv;
}

/* Bytes of the backward's scratch p->delta (one f32 a query row). */
static inline size_t sg_flash_bwd_workspace(const SgFlashParams *p)
{
	return (size_t)p->nb0 * p->nb1 * p->L * sizeof(float);
}

/* Whether the tensor-core kernels can use 16-byte loads: 2-byte elements,
 * every head dim, stride and base a multiple of 8 elements. */
static inline int sgk_fa_vec(const SgFlashParams *p, int bwd)
{
	const void *ptr[8] = {p->q, p->k, p->v, p->o, bwd ? p->dout : 0, bwd ? p->dq : 0,
	                      bwd ? p->dk : 0, bwd ? p->dv : 0};
	const sgk_i64 st[] = {p->q_s0, p->q_s1, p->q_sr, p->k_s0, p->k_s1, p->k_sr,
	                      p->v_s0, p->v_s1, p->v_sr, p->o_s0, p->o_s1, p->o_sr,
	                      p->do_s0, p->do_s1, p->do_sr, p->dq_s0, p->dq_s1, p->dq_sr,
	                      p->dk_s0, p->dk_s1, p->dk_sr, p->dv_s0, p->dv_s1, p->dv_sr};
	if (p->D % 8 || p->Dv % 8)
		return 0;
	for (int i = 0; i < 8; i++)
		if (ptr[i] && !sgk_host_aligned(ptr[i], 16))
			return 0;
	for (int i = 0; i < (bwd ? 24 : 12); i++)
		if (st[i] % 8)
			return 0;
	return 1;
}

/* The effective parameters: the default scale, the vector flag. */
static inline SgFlashParams sgk_fa_prep(const SgFlashParams *in, int bwd)
{
	SgFlashParams p = *in;
	if (!(p.scale > 0.f))
		p.scale = 1.f / sqrtf((float)(p.D > 0 ? p.D : 1));
	p.vec = sgk_fa_vec(&p, bwd);
	if (p.kv_group < 1)
		p.kv_group = 1;
	return p;
}

/* Launches kernel f with `smem` dynamic shared bytes over grid (x, batches). */
template <class F>
static cudaError_t sgk_fa_launch(F f, int x, int nb, int threads, int smem, const SgFlashParams &p,
                                 cudaStream_t stream)
{
	if (x <= 0 || nb <= 0)
		return cudaSuccess;
	cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
	if (e != cudaSuccess)
		return e;
	dim3 grid((unsigned)x, (unsigned)(nb < 65535 ? nb : 65535));
	f<<<grid, threads, smem, stream>>>(p);
	return sgk_launched();
}

/* Padded head dim of the tensor-core path for D, Dv (0: use SIMT). */
template <class T>
static int sgk_fa_dp(const SgFlashParams &p)
{
	const int d = p.D > p.Dv ? p.D : p.Dv;
	if (sizeof(T) != 2)
		return 0;
	return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 0;
}

/* Bytes of dmask for attention with dropout over nb batches of L x S
 * weights with head dims D, Dv: the tensor-core path's keep bits, which
 * its forward stores and its backward reads; 0 on the SIMT path. */
template <class T>
static inline size_t sg_flash_dropout_mask_bytes(long long nb, int L, int S, int D, int Dv)
{
	SgFlashParams p;
	sg_flash_params_init(&p, 1, 1, L, S, D, Dv, 0.f, 0);
	return sgk_fa_dp<T>(p) ? (size_t)nb * L * ((S + 31) / 32) * sizeof(unsigned) : 0;
}

/* Bytes of dynamic shared memory of the SIMT kernels. */
template <class T>
static int sgk_fs_smem(const SgFlashParams &p, int kv)
{
	typedef typename sgk_acc<T>::type A;
	return (int)sizeof(A) * (SGK_FS_TILE * (p.D + 1 + p.Dv + 1) + SGK_FS_NW * (p.D + p.Dv) +
	                         (kv ? 2 * SGK_FS_TILE : 0));
}

/* The forward tiles the launcher uses for each padded head dim, and the
 * kernel's least blocks an SM (MINB, its register budget): the fastest
 * among those tests/gpu/kernels/test_attention.cu checks and times.  128:
 * 4 warps of 2 m tiles, 64 keys (on the H200, 2026-11-29, B=8, T=2048,
 * causal, bf16: 0.775 ms against 0.914 with 1 m tile).  64: 4 warps of 1 m
 * tile, 64 keys, 3 blocks an SM (165 registers, no spill), with dropout
 * or not (`--bench-gpt2` and `--bench-shape`, bf16, 2026-12-07).  On an
 * H200 at GPT-2's B=8, H=12, T=1024, causal: 0.112 ms against 0.127 at 2
 * blocks and 0.150 with 2 m tiles of 32 keys, the tile before (dropout's
 * was the 64-key tile at 2 blocks: 0.188 against 0.203 with dropout 0.1,
 * 0.279 with 2 m tiles of 32 keys).  B=8, H=32, T=2048, causal:
 * 0.884 against 1.035, 1.121 (and 0.948 with 2 m tiles of 64 keys).  Not
 * causal, T=1024: 0.169 against 0.196, 0.201 (0.171). */
template <int DP> struct SgkFaFwdTile { enum { NW = 4, MT = 1, BN = 64, MINB = 8 / NW }; };
template <> struct SgkFaFwdTile<64> { enum { NW = 4, MT = 1, BN = 64, MINB = 3 }; };
template <> struct SgkFaFwdTile<128> { enum { NW = 4, MT = 2, BN = 64, MINB = 8 / NW }; };

/* The backward's query tile in the dK/dV kernel (64 beat 32 there). */
#ifndef SGK_FA_BWD_BQKV
#define SGK_FA_BWD_BQKV 64
#endif
/* The backward kernels' least blocks an SM (their register budget): 3 at
 * head dim 64 (on an H100, 2026-12-07, GPT-2's B=8, H=12, T=1024, causal,
 * bf16: 0.367 ms against 0.418 at 2, 0.462 against 0.507 with dropout
 * 0.1; ptxas's 168 registers, the dK/dV kernel spilling 124 bytes with
 * dropout), 2 at the others (at 128 a dK/dV block's 105 KB of shared memory
 * fits an SM twice, and 168 registers would spill 556 bytes; 32 is not
 * measured). SGK_FA_BWD_MINB, where defined, sets it for
 * every head dim (the GPU tests' programs can be built with another). */
template <int DP> struct SgkFaBwdMinB { enum { N = 2 }; };
template <> struct SgkFaBwdMinB<64> { enum { N = 3 }; };
#ifdef SGK_FA_BWD_MINB
#define SGK_FA_BWD_MINB_OF(DP) SGK_FA_BWD_MINB
#else
#define SGK_FA_BWD_MINB_OF(DP) SgkFaBwdMinB<DP>::N
#endif

/* The tensor-core forward for head dims up to DP with these tiles (the
 * instance of dropout mode DROP), at least MINB blocks an SM (the
 * kernel's register budget). */
template <class T, int DP, int NW, int MT, int BN, int DROP, int MINB = 8 / NW>
static cudaError_t sgk_fa_fwd_tc_k(const SgFlashParams &p, int nb, cudaStream_t stream)
{
	typedef SgkFaFwdCfg<DP, NW, MT, BN> K;
	return sgk_fa_launch(sgk_flash_fwd_tc<T, DP, NW, MT, BN, DROP, MINB>, (p.L + K::BM - 1) / K::BM, nb,
	                     K::NW * 32, K::SMEM, p, stream);
}

#ifndef SGK_FA_NO_DROPOUT
/* The same with dropout: the instance for p's S. */
template <class T, int DP, int NW, int MT, int BN, int MINB = 8 / NW>
static cudaError_t sgk_fa_fwd_tc_drop(const SgFlashParams &p, int nb, cudaStream_t stream)
{
	return p.S % 8 == 0 ? sgk_fa_fwd_tc_k<T, DP, NW, MT, BN, SGK_FA_DROP_ALIGNED, MINB>(p, nb, stream)
	                    : sgk_fa_fwd_tc_k<T, DP, NW, MT, BN, SGK_FA_DROP_ANY, MINB>(p, nb, stream);
}
#endif

/* The same, the instance p asks for (tests/gpu/kernels times tiles). */
template <class T, int DP, int NW, int MT, int BN, int MINB = 8 / NW>
static cudaError_t sgk_fa_fwd_tc(const SgFlashParams &p, int nb, cudaStream_t stream)
{
#ifndef SGK_FA_NO_DROPOUT
	if (p.drop_thresh)
		return sgk_fa_fwd_tc_drop<T, DP, NW, MT, BN, MINB>(p, nb, stream);
#endif
	return sgk_fa_fwd_tc_k<T, DP, NW, MT, BN, SGK_FA_NODROP, MINB>(p, nb, stream);
}

/* The launcher's forward: SgkFaFwdTile's tiles. */
template <class T, int DP>
static cudaError_t sgk_fa_fwd(const SgFlashParams &p, int nb, cudaStream_t stream)
{
	typedef SgkFaFwdTile<DP> F;
	return sgk_fa_fwd_tc<T, DP, F::NW, F::MT, F::BN, F::MINB>(p, nb, stream);
}

/* The tensor-core backward's two kernels (after the delta kernel), each
 * launched alone (tests/gpu/kernels times them one by one), DROP: with
 * dropout; MINB: the kernels' least blocks an SM (their register budget). */
template <class T, int DP, int BQKV, bool DROP, int MINB>
static cudaError_t sgk_fa_bwd_kv_k(const SgFlashParams &p, int nb, cudaStream_t stream)
{
	typedef SgkFaBwdCfg<DP, BQKV> K;
	return sgk_fa_launch(sgk_flash_bwd_kv_tc<T, DP, BQKV, DROP, MINB>, (p.S + K::BK - 1) / K::BK,
	                     nb / p.kv_group, K::NW * 32, K::SMEM_KV, p, stream);
}
template <class T, int DP, int BQKV, bool DROP, int MINB>
static cudaError_t sgk_fa_bwd_q_k(const SgFlashParams &p, int nb, cudaStream_t stream)
{
	typedef SgkFaBwdCfg<DP, BQKV> K;
	return sgk_fa_launch(sgk_flash_bwd_q_tc<T, DP, DROP, MINB>, (p.L + K::BQ - 1) / K::BQ, nb,
	                     K::NW * 32, K::SMEM_Q, p, stream);
}
/* Both, dK/dV first. */
template <class T, int DP, int BQKV, bool DROP, int MINB>
static cudaError_t sgk_fa_bwd_tc_k(const SgFlashParams &p, int nb, cudaStream_t stream)
{
	cudaError_t e = sgk_fa_bwd_kv_k<T, DP, BQKV, DROP, MINB>(p, nb, stream);
	if (e != cudaSuccess)
		return e;
	return sgk_fa_bwd_q_k<T, DP, BQKV, DROP, MINB>(p, nb, stream);
}
template <class T, int DP, int BQKV = SGK_FA_BWD_BQKV, int MINB = SGK_FA_BWD_MINB_OF(DP)>
static cudaError_t sgk_fa_bwd_tc(const SgFlashParams &p, int nb, cudaStream_t stream)
{
#ifndef SGK_FA_NO_DROPOUT
	if (p.drop_thresh)
		return sgk_fa_bwd_tc_k<T, DP, BQKV, true, MINB>(p, nb, stream);
#endif
	return sgk_fa_bwd_tc_k<T, DP, BQKV, false, MINB>(p, nb, stream);
}

/* The tensor-core kernels exist for 2-byte types only. */
template <class T, int DP> struct sgk_fa_tc {
	static cudaError_t fwd(const SgFlashParams &, int, cudaStream_t) { return cudaErrorNotSupported; }
	static cudaError_t bwd(const SgFlashParams &, int, cudaStream_t) { return cudaErrorNotSupported; }
};
template <int DP> struct sgk_fa_tc<__half, DP> {
	static cudaError_t fwd(const SgFlashParams &p, int nb, cudaStream_t s) { return sgk_fa_fwd<__half, DP>(p, nb, s); }
	static cudaError_t bwd(const SgFlashParams &p, int nb, cudaStream_t s) { return sgk_fa_bwd_tc<__half, DP>(p, nb, s); }
};
template <int DP> struct sgk_fa_tc<__nv_bfloat16, DP> {
	static cudaError_t fwd(const SgFlashParams &p, int nb, cudaStream_t s) { return sgk_fa_fwd<__nv_bfloat16, DP>(p, nb, s); }
	static cudaError_t bwd(const SgFlashParams &p, int nb, cudaStream_t s) { return sgk_fa_bwd_tc<__nv_bfloat16, DP>(p, nb, s); }
};

template <class T>
static cudaError_t sg_launch_flash_fwd(const SgFlashParams *in, cudaStream_t stream)
{
	const SgFlashParams p = sgk_fa_prep(in, 0);
	const int nb = p.nb0 * p.nb1;
	if (p.D <= 0 || p.Dv <= 0 || p.D > 256 || p.Dv > 256 || p.nb1 % p.kv_group ||
	    (p.drop_thresh && !p.rng))
		return cudaErrorInvalidValue;
#ifdef SGK_FA_NO_DROPOUT
	if (p.drop_thresh)
		return cudaErrorNotSupported;
#endif
	switch (sgk_fa_dp<T>(p)) {
	case 32: return sgk_fa_tc<T, 32>::fwd(p, nb, stream);
	case 64: return sgk_fa_tc<T, 64>::fwd(p, nb, stream);
	case 128: return sgk_fa_tc<T, 128>::fwd(p, nb, stream);
	}
	const int x = (p.L + SGK_FS_NW - 1) / SGK_FS_NW, smem = sgk_fs_smem<T>(p, 0);
	const int big = p.D > 128 || p.Dv > 128;
#ifndef SGK_FA_NO_DROPOUT
	if (p.drop_thresh)
		return sgk_fa_launch(big ? sgk_flash_fwd_simt<T, 256, true> : sgk_flash_fwd_simt<T, 128, true>,
		                     x, nb, SGK_FS_NW * 32, smem, p, stream);
#endif
	return sgk_fa_launch(big ? sgk_flash_fwd_simt<T, 256> : sgk_flash_fwd_simt<T, 128>, x, nb,
	                     SGK_FS_NW * 32, smem, p, stream);
}

/* The SIMT backward (after the delta kernel), DROP: with dropout. */
template <class T, bool DROP>
static cudaError_t sgk_fa_bwd_simt(const SgFlashParams &p, int nb, cudaStream_t stream)
{
	const int big = p.D > 128 || p.Dv > 128;
	cudaError_t e = sgk_fa_launch(big ? sgk_flash_bwd_kv_simt<T, 256, DROP>
	                                  : sgk_flash_bwd_kv_simt<T, 128, DROP>,
	                              (p.S + SGK_FS_NW - 1) / SGK_FS_NW, nb / p.kv_group,
	                              SGK_FS_NW * 32, sgk_fs_smem<T>(p, 1), p, stream);
	if (e != cudaSuccess)
		return e;
	return sgk_fa_launch(big ? sgk_flash_bwd_q_simt<T, 256, DROP> : sgk_flash_bwd_q_simt<T, 128, DROP>,
	                     (p.L + SGK_FS_NW - 1) / SGK_FS_NW, nb, SGK_FS_NW * 32,
	                     sgk_fs_smem<T>(p, 0), p, stream);
}

template <class T>
static cudaError_t sg_launch_flash_bwd(const SgFlashParams *in, cudaStream_t stream)
{
	const SgFlashParams p = sgk_fa_prep(in, 1);
	const int nb = p.nb0 * p.nb1;
	if (p.D <= 0 || p.Dv <= 0 || p.D > 256 || p.Dv > 256 || p.nb1 % p.kv_group ||
	    (p.drop_thresh && !p.rng))
		return cudaErrorInvalidValue;
#ifdef SGK_FA_NO_DROPOUT
	if (p.drop_thresh)
		return cudaErrorNotSupported;
#endif
	if (p.drop_thresh && sgk_fa_dp<T>(p) && !p.dmask)
		return cudaErrorInvalidValue; /* the forward's keep bits */
	if (nb <= 0 || p.L <= 0)
		return cudaSuccess;
	const long long rows = (long long)nb * p.L;
	sgk_flash_delta<T><<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(p);
	cudaError_t e = sgk_launched();
	if (e != cudaSuccess)
		return e;
	switch (sgk_fa_dp<T>(p)) {
	case 32: return sgk_fa_tc<T, 32>::bwd(p, nb, stream);
	case 64: return sgk_fa_tc<T, 64>::bwd(p, nb, stream);
	case 128: return sgk_fa_tc<T, 128>::bwd(p, nb, stream);
	}
#ifndef SGK_FA_NO_DROPOUT
	if (p.drop_thresh)
		return sgk_fa_bwd_simt<T, true>(p, nb, stream);
#endif
	return sgk_fa_bwd_simt<T, false>(p, nb, stream);
}
#endif

#pragma nv_diag_default 177
#endif /* SGK_ATTENTION_CUH */
