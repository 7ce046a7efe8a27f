/*
 * test_attention.cu - flash attention forward and backward
 * (runtime/sgk/sgk_attention.cuh) against a plain reference
 * in double on the GPU: o, lse, dq, dk, dv on random inputs for many
 * shapes, dtypes, masks and layouts, every output poisoned first; then the
 * H200 figures (B=8, H=16, T=2048, D=128, bf16, causal and not) in TFLOP/s
 * with the algorithmic count (forward 4*L*S*D a head, halved by the
 * causal mask as far as it masks; backward 2.5 times the forward).
 *
 *   test_attention [--dump DIR] [--quick] [--sanitize] [--bench-gpt2]
 *                  [--bench-shape B,H,T,D,CAUSAL] [--profile-gpt2]
 *
 * --dump writes a few small cases for torch_check.py; --quick skips the
 * timings; --sanitize runs a few small cases only (for compute-sanitizer);
 * --bench-gpt2 only times GPT-2 small's shape (B=8, H=12, T=1024, D=64,
 * causal, bf16); --bench-shape the same at another shape (bf16, D 64 or
 * 128: the variants' head dims); --profile-gpt2 runs the launchers at
 * GPT-2's shape once each, without and with dropout, unchecked (for ncu).
 * Prints "N passed, M failed".
 *
 * Dropout (SgFlashParams.drop_thresh): the reference draws each weight's
 * keep bit as sgk_random.h says (sgk_draws, 16 bits of block idx / 8,
 * idx = (b L + i) S + j), written out here; cases at p = 0.1, 0.5 and 1 (o and the
 * gradients exactly 0), a CUDA graph replayed at two generator offsets,
 * and mask checks with every weight 1 / S and one-hot v, k, dout, where
 * o, dv and dq show each keep bit: equal to the reference's, and the kept
 * fraction within 5 sigma of 1 - p.  On the tensor-core path the keep bits
 * the forward stores for the backward (dmask) are checked one by one too.
 */
#include "ktest.h"
#include "sgk_attention.cuh"

/* ------------------------------------------------------------------ reference */

/* Element (b, r, c) of a strided [nb0, nb1 / g, rows, cols] tensor, b a
 * query batch (head b % nb1 / g: g the kv_group of k and v, else 1). */
template <class T>
__device__ double at(const void *base, const SgFlashParams &p, sgk_i64 s0, sgk_i64 s1, sgk_i64 sr,
                     int b, int r, int c, int g = 1)
{
	const T *t = (const T *)base;
	return sgk_tof(t[(b / p.nb1) * s0 + (b % p.nb1) / g * s1 + r * sr + c]);
}

/* Query heads a k, v head serves. */
__host__ __device__ int kvg(const SgFlashParams &p)
{
	return p.kv_group > 1 ? p.kv_group : 1;
}

/* The dropout factor of weight (b, i, j): drop_scale when its draw (the
 * low or high half, idx % 2, of word idx % 8 / 2 of block idx / 8, idx =
 * (b L + i) S + j) keeps it, else 0; 1 without dropout. */
__device__ double dropf(const SgFlashParams &p, int b, int i, int j)
{
	if (!p.drop_thresh)
		return 1;
	const sgk_i64 idx = ((sgk_i64)b * p.L + i) * p.S + j;
	const uint4 u = sgk_draws(sgk_draws_init(p.rng, p.salt), idx / 8);
	const unsigned w[4] = {u.x, u.y, u.z, u.w}, x = w[idx % 8 / 2];
	return (idx % 2 ? x >> 16 : x & 0xffff) >= p.drop_thresh ? (double)p.drop_scale : 0.0;
}

/* Counts the weights that query i sees whose keep bit in the forward's
 * dmask differs from the draw (a thread a (b, i) row). */
__global__ void check_dmask(SgFlashParams p, const unsigned *dmask, unsigned long long *bad)
{
	const int b = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= p.L)
		return;
	const int nw = (p.S + 31) / 32;
	unsigned long long n = 0;
	for (int j = 0; j < p.S && !(p.causal && j > i); j++) {
		const unsigned bit = dmask[((sgk_i64)b * p.L + i) * nw + j / 32] >> (j % 32) & 1;
		n += bit != (unsigned)(dropf(p, b, i, j) != 0.0);
	}
	if (n)
		atomicAdd(bad, n);
}

/* Whether query i sees key j. */
__device__ bool visible(const SgFlashParams &p, int i, int j)
{
	return j < p.S && i < p.L && !(p.causal && j > i);
}

/* A thread a query row of batches 0, bstride, 2 bstride...: o, lse, and
 * delta = dout . o, all in double into [nb, L, *] arrays (o with the
 * dropped weights, lse the undropped ones'). */
template <class T>
__global__ void ref_fwd(SgFlashParams p, int bstride, double *o, double *lse, double *delta)
{
	const int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y * bstride;
	if (i >= p.L || b >= p.nb0 * p.nb1)
		return;
	double m = -INFINITY, acc[256], l = 0;
	for (int j = 0; j < p.S; j++) {
		if (!visible(p, i, j))
			continue;
		double s = 0;
		for (int c = 0; c < p.D; c++)
			s += at<T>(p.q, p, p.q_s0, p.q_s1, p.q_sr, b, i, c) *
			     at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c, kvg(p));
		m = fmax(m, s * (double)p.scale);
	}
	for (int c = 0; c < p.Dv; c++)
		acc[c] = 0;
	for (int j = 0; j < p.S; j++) {
		if (!visible(p, i, j))
			continue;
		double s = 0;
		for (int c = 0; c < p.D; c++)
			s += at<T>(p.q, p, p.q_s0, p.q_s1, p.q_sr, b, i, c) *
			     at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c, kvg(p));
		const double e = exp(s * (double)p.scale - m), ed = e * dropf(p, b, i, j);
		l += e;
		for (int c = 0; c < p.Dv; c++)
			acc[c] += ed * at<T>(p.v, p, p.v_s0, p.v_s1, p.v_sr, b, j, c, kvg(p));
	}
	const sgk_i64 row = (sgk_i64)b * p.L + i;
	double dl = 0;
	for (int c = 0; c < p.Dv; c++) {
		const double oc = l > 0 ? acc[c] / l : 0;
		o[row * p.Dv + c] = oc;
		if (p.dout)
			dl += oc * at<T>(p.dout, p, p.do_s0, p.do_s1, p.do_sr, b, i, c);
	}
	lse[row] = l > 0 ? m + log(l) : INFINITY;
	delta[row] = dl;
}

/* dq for a thread's query row, from the reference lse and delta. */
template <class T>
__global__ void ref_bwd_q(SgFlashParams p, int bstride, const double *lse, const double *delta,
                          double *dq)
{
	const int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y * bstride;
	if (i >= p.L || b >= p.nb0 * p.nb1)
		return;
	const sgk_i64 row = (sgk_i64)b * p.L + i;
	double acc[256];
	for (int c = 0; c < p.D; c++)
		acc[c] = 0;
	for (int j = 0; j < p.S; j++) {
		if (!visible(p, i, j))
			continue;
		double s = 0, dp = 0;
		for (int c = 0; c < p.D; c++)
			s += at<T>(p.q, p, p.q_s0, p.q_s1, p.q_sr, b, i, c) *
			     at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c, kvg(p));
		for (int c = 0; c < p.Dv; c++)
			dp += at<T>(p.dout, p, p.do_s0, p.do_s1, p.do_sr, b, i, c) *
			      at<T>(p.v, p, p.v_s0, p.v_s1, p.v_sr, b, j, c, kvg(p));
		const double pr = exp(s * (double)p.scale - lse[row]);
		const double ds = pr * (dp * dropf(p, b, i, j) - delta[row]);
		for (int c = 0; c < p.D; c++)
			acc[c] += ds * at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c, kvg(p));
	}
	for (int c = 0; c < p.D; c++)
		dq[row * p.D + c] = acc[c] * (double)p.scale;
}

/* dk and dv for a thread's key row of key batches 0, bstride, ...
 * (nb0 * nb1 / kv_group of them), summed over the query heads the key
 * head serves. */
template <class T>
__global__ void ref_bwd_kv(SgFlashParams p, int bstride, const double *lse, const double *delta,
                           double *dk, double *dv)
{
	const int G = kvg(p), nkv = p.nb1 / G;
	const int j = blockIdx.x * blockDim.x + threadIdx.x, bk = blockIdx.y * bstride;
	if (j >= p.S || bk >= p.nb0 * nkv)
		return;
	double ak[256], av[256];
	for (int c = 0; c < 256; c++)
		ak[c] = av[c] = 0;
	const int bq0 = bk / nkv * p.nb1 + bk % nkv * G;
	for (int b = bq0; b < bq0 + G; b++) {
		for (int i = 0; i < p.L; i++) {
			if (!visible(p, i, j))
				continue;
			const sgk_i64 row = (sgk_i64)b * p.L + i;
			double s = 0, dp = 0;
			for (int c = 0; c < p.D; c++)
				s += at<T>(p.q, p, p.q_s0, p.q_s1, p.q_sr, b, i, c) *
				     at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c, kvg(p));
			for (int c = 0; c < p.Dv; c++)
				dp += at<T>(p.dout, p, p.do_s0, p.do_s1, p.do_sr, b, i, c) *
				      at<T>(p.v, p, p.v_s0, p.v_s1, p.v_sr, b, j, c, kvg(p));
			const double f = dropf(p, b, i, j), pr = exp(s * (double)p.scale - lse[row]);
			const double ds = pr * (dp * f - delta[row]);
			for (int c = 0; c < p.Dv; c++)
				av[c] += pr * f * at<T>(p.dout, p, p.do_s0, p.do_s1, p.do_sr, b, i, c);
			for (int c = 0; c < p.D; c++)
				ak[c] += ds * at<T>(p.q, p, p.q_s0, p.q_s1, p.q_sr, b, i, c);
		}
	}
	const sgk_i64 row = (sgk_i64)bk * p.S + j;
	for (int c = 0; c < p.D; c++)
		dk[row * p.D + c] = ak[c] * (double)p.scale;
	for (int c = 0; c < p.Dv; c++)
		dv[row * p.Dv + c] = av[c];
}

/* ------------------------------------------------------------------ cases */

/* LAY_BTHD_OC: what sgc's folded backward passes: q, k, v, dout, dq, dk,
 * dv in the [B, T, H, D] layout, o (recomputed) contiguous. */
enum { LAY_CONTIG, LAY_BTHD, LAY_KV_BCAST, LAY_MISALIGNED, LAY_BTHD_OC };

/* The inputs of a case: random, or those of a dropout mask check (q = 0,
 * so every weight is 1 / S; v and k one-hot, v[j] = k[j] = e_j; dout
 * one-hot, dout[i] = e_i, where o[i][j] and dv[j][i] show weight (i, j)'s
 * factor (FILL_ONEHOT_DO), or dout[i] = 1 over the first S columns, where
 * dq[i][j] does (FILL_ONES_DO)). */
enum { FILL_RANDOM, FILL_ONEHOT_DO, FILL_ONES_DO };

struct Case {
	int nb0, nb1, L, S, D, Dv, causal;
	float scale;
	int layout, bstride;
	int kv_group; /* grouped-query heads (0 or 1: none; contiguous layout only) */
	double drop;  /* dropout_p (0: none) */
	int fill;
};

/* The dropout cases' generator state (seed, offset) and salt. */
static const long long drop_seed = 0x123456789ll, drop_offset = 7;
static const unsigned drop_salt = 3;

/* Elements a strided tensor of `heads` heads (nb1 when 0) spans. */
static size_t span(const SgFlashParams &p, sgk_i64 s0, sgk_i64 s1, sgk_i64 sr, int rows, int cols,
                   int heads = 0)
{
	return (size_t)((p.nb0 - 1) * s0 + ((heads ? heads : p.nb1) - 1) * s1 + (rows - 1) * sr + cols);
}

/* Gathers a strided tensor's host mirror (`heads` heads, nb1 when 0) into
 * [nb, rows, cols]. */
static std::vector<double> gather(const std::vector<double> &h, const SgFlashParams &p, sgk_i64 s0,
                                  sgk_i64 s1, sgk_i64 sr, int rows, int cols, size_t off,
                                  int heads = 0)
{
	if (!heads)
		heads = p.nb1;
	std::vector<double> r((size_t)p.nb0 * heads * rows * cols);
	size_t k = 0;
	for (int b0 = 0; b0 < p.nb0; b0++)
		for (int b1 = 0; b1 < heads; b1++)
			for (int i = 0; i < rows; i++)
				for (int c = 0; c < cols; c++)
					r[k++] = h[off + b0 * s0 + b1 * s1 + i * sr + c];
	return r;
}

/* Which [nb, rows, cols] elements the reference computed (its batches;
 * nb: nb0 * nb1 when 0). */
static std::vector<unsigned char> used(const SgFlashParams &p, int bstride, int rows, int cols,
                                       int nb = 0)
{
	if (!nb)
		nb = p.nb0 * p.nb1;
	std::vector<unsigned char> u((size_t)nb * rows * cols);
	for (int b = 0; b < nb; b++)
		if (b % bstride == 0)
			std::fill(u.begin() + (size_t)b * rows * cols, u.begin() + (size_t)(b + 1) * rows * cols,
			          1);
	return u;
}

/* Sets the strides of a layout. */
static void layout(SgFlashParams *p, int lay)
{
	if (lay == LAY_BTHD || lay == LAY_BTHD_OC) {
		/* [nb0, L, nb1, D] memory read as [nb0, nb1, L, D]. */
		const int H = p->nb1;
		p->q_s0 = p->dq_s0 = (sgk_i64)p->L * H * p->D;
		p->q_s1 = p->dq_s1 = p->D;
		p->q_sr = p->dq_sr = (sgk_i64)H * p->D;
		p->k_s0 = p->dk_s0 = (sgk_i64)p->S * H * p->D;
		p->k_s1 = p->dk_s1 = p->D;
		p->k_sr = p->dk_sr = (sgk_i64)H * p->D;
		p->v_s0 = p->dv_s0 = (sgk_i64)p->S * H * p->Dv;
		p->v_s1 = p->dv_s1 = p->Dv;
		p->v_sr = p->dv_sr = (sgk_i64)H * p->Dv;
		p->o_s0 = p->do_s0 = (sgk_i64)p->L * H * p->Dv;
		p->o_s1 = p->do_s1 = p->Dv;
		p->o_sr = p->do_sr = (sgk_i64)H * p->Dv;
		if (lay == LAY_BTHD_OC) {
			p->o_s0 = (sgk_i64)H * p->L * p->Dv;
			p->o_s1 = (sgk_i64)p->L * p->Dv;
			p->o_sr = p->Dv;
		}
	} else if (lay == LAY_KV_BCAST) {
		/* k and v shared by the nb1 heads; dk, dv stay full. */
		p->k_s1 = p->v_s1 = 0;
		p->k_s0 = (sgk_i64)p->S * p->D;
		p->v_s0 = (sgk_i64)p->S * p->Dv;
	}
}

/* Uniform with mean 0 and variance 1. */
static double unit_unif(void)
{
	return kt_unif(-1.7320508075688772, 1.7320508075688772);
}

/* Reports one comparison. */
static void report(const char *what, const char *name, const KtErr &e, double tol)
{
	printf("  %-4s rel %.2e max %.2e (ref max %.2e)%s\n", what, e.rel, e.maxabs, e.refmax,
	       e.nan ? "  UNWRITTEN/NaN" : "");
	KT_CHECK(e.nan == 0 && e.rel <= tol, "%s %s: rel error %.3e > %.1e (nan %zu, worst at %zu)",
	         name, what, e.rel, tol, e.nan, e.at);
}

/* Tolerances of relative L2 error for forward and backward. */
template <class T> static double tol_fwd() { return sizeof(T) == 2 ? (kt_dt<T>::name()[0] == 'b' ? 1.5e-2 : 3e-3) : 1e-5; }
template <class T> static double tol_bwd() { return sizeof(T) == 2 ? (kt_dt<T>::name()[0] == 'b' ? 3e-2 : 6e-3) : 2e-5; }

/* A launcher of the forward or the backward. */
typedef cudaError_t (*Launch)(const SgFlashParams *, cudaStream_t);

/* The forward with other tiles (NW warps of MT m tiles, BN-key tiles, at
 * least MINB blocks an SM) where the tensor-core path applies. */
template <class T, int NW, int MT, int BN, int MINB = 8 / NW>
static cudaError_t fwd_variant(const SgFlashParams *in, cudaStream_t s)
{
	const SgFlashParams p = sgk_fa_prep(in, 0);
	switch (sgk_fa_dp<T>(p)) {
	case 128: return sgk_fa_fwd_tc<T, 128, NW, MT, BN, MINB>(p, p.nb0 * p.nb1, s);
	case 64: return sgk_fa_fwd_tc<T, 64, NW, MT, BN, MINB>(p, p.nb0 * p.nb1, s);
	}
	return sg_launch_flash_fwd<T>(in, s);
}

/* The backward with BQKV-query tiles in the dK/dV kernel and MINB blocks
 * an SM (head dims 64 and 128). */
template <class T, int BQKV, int MINB = 2>
static cudaError_t bwd_variant(const SgFlashParams *in, cudaStream_t s)
{
	const SgFlashParams p = sgk_fa_prep(in, 1);
	const int nb = p.nb0 * p.nb1, dp = sgk_fa_dp<T>(p);
	if (dp != 128 && dp != 64)
		return sg_launch_flash_bwd<T>(in, s);
	sgk_flash_delta<T><<<(unsigned)(((long long)nb * p.L + 7) / 8), 256, 0, s>>>(p);
	return dp == 128 ? sgk_fa_bwd_tc<T, 128, BQKV, MINB>(p, nb, s)
	                 : sgk_fa_bwd_tc<T, 64, BQKV, MINB>(p, nb, s);
}

/* The dropout mask checks of a FILL_ONEHOT_DO or FILL_ONES_DO case (non
 * causal, contiguous, every batch; r: the effective parameters): o, dv or
 * dq against the reference element by element within half the step a
 * kept weight makes (so each weight's keep bit, or for dv each group's
 * count of them, is the reference's), and for FILL_ONEHOT_DO the fraction
 * of kept weights (o[i][j] > 0) within 5 sigma of 1 - p, with the draws'
 * own p = thresh / 2^32: independent of the reference. */
static void mask_checks(const Case &c, const SgFlashParams &r, const std::vector<double> &go,
                        const std::vector<double> &gdq, const std::vector<double> &gdv,
                        const std::vector<double> &ro, const std::vector<double> &rdq,
                        const std::vector<double> &rdv)
{
	const int nb = c.nb0 * c.nb1, nbk = nb / r.kv_group;
	const double step = (double)r.drop_scale / c.S;
	double eo = 0, edq = 0, edv = 0;
	size_t kept = 0, n = 0;
	for (int b = 0; b < nb; b++)
		for (int i = 0; i < c.L; i++)
			for (int j = 0; j < c.S; j++) {
				const size_t at = ((size_t)b * c.L + i) * c.Dv + j;
				eo = std::max(eo, go[at] == go[at] ? fabs(go[at] - ro[at]) : INFINITY);
				kept += go[at] > step / 2;
				n++;
				const size_t aq = ((size_t)b * c.L + i) * c.D + j;
				edq = std::max(edq, gdq[aq] == gdq[aq] ? fabs(gdq[aq] - rdq[aq]) : INFINITY);
			}
	for (int b = 0; b < nbk; b++)
		for (int j = 0; j < c.S; j++)
			for (int i = 0; i < c.L; i++) {
				const size_t at = ((size_t)b * c.S + j) * c.Dv + i;
				edv = std::max(edv, gdv[at] == gdv[at] ? fabs(gdv[at] - rdv[at]) : INFINITY);
			}
	const double pd = (double)r.drop_thresh / 65536.0, frac = (double)kept / n;
	const double sig = sqrt(pd * (1 - pd) / n);
	if (c.fill == FILL_ONEHOT_DO) {
		printf("  mask: o max err %.2e, dv max err %.2e (step %.2e); kept %.5f, expected %.5f "
		       "(sigma %.1e)\n",
		       eo, edv, step, frac, 1 - pd, sig);
		KT_CHECK(eo < step / 2, "mask check: o differs from the reference by %.3e (step %.3e)", eo,
		         step);
		KT_CHECK(edv < step / 2, "mask check: dv differs from the reference by %.3e (step %.3e)",
		         edv, step);
		KT_CHECK(fabs(frac - (1 - pd)) <= 5 * sig + 1e-12,
		         "mask check: kept fraction %.5f, expected %.5f +- 5 x %.1e", frac, 1 - pd, sig);
	} else {
		const double sq = step * r.scale;
		printf("  mask: dq max err %.2e (step %.2e)\n", edq, sq);
		KT_CHECK(edq < sq / 2, "mask check: dq differs from the reference by %.3e (step %.3e)",
		         edq, sq);
	}
}

/* Runs one case: forward and backward, compared with the reference;
 * returns nothing, counts checks.  dump: folder for torch_check.py;
 * fwd, bwd: the launchers under test. */
template <class T>
static void run_case(const Case &c, const char *dump, const char *dname,
                     Launch fwd = sg_launch_flash_fwd<T>, Launch bwd = sg_launch_flash_bwd<T>,
                     const char *variant = "")
{
	SgFlashParams p;
	sg_flash_params_init(&p, c.nb0, c.nb1, c.L, c.S, c.D, c.Dv, c.scale, c.causal);
	layout(&p, c.layout);
	/* Grouped-query heads: k, v, dk, dv with nkv heads. */
	const int G = c.kv_group > 1 ? c.kv_group : 1, nkv = c.nb1 / G;
	p.kv_group = G;
	if (G > 1) {
		p.k_s0 = p.dk_s0 = (sgk_i64)nkv * c.S * c.D;
		p.v_s0 = p.dv_s0 = (sgk_i64)nkv * c.S * c.Dv;
	}
	/* Dropout: the generator state on the device. */
	sgk_i64 *rng = 0;
	if (c.drop > 0) {
		const sgk_i64 st[2] = {drop_seed, drop_offset};
		KT_CUDA(cudaMalloc(&rng, sizeof st));
		KT_CUDA(cudaMemcpy(rng, st, sizeof st, cudaMemcpyHostToDevice));
		p.rng = rng;
		p.salt = drop_salt;
		p.drop_thresh = sgk_dropout_threshold(c.drop);
		p.drop_scale = (float)sgk_dropout_scale(c.drop);
	}
	/* The forward's keep bits for the backward (tensor-core path). */
	const size_t mbytes = c.drop > 0 ? sg_flash_dropout_mask_bytes<T>((long long)c.nb0 * c.nb1,
	                                                                  c.L, c.S, c.D, c.Dv)
	                                 : 0;
	unsigned *dmask = NULL;
	if (mbytes) {
		KT_CUDA(cudaMalloc(&dmask, mbytes));
		KT_CUDA(cudaMemset(dmask, 0xa5, mbytes));
		p.dmask = dmask;
	}
	const size_t off = c.layout == LAY_MISALIGNED ? 1 : 0;
	char name[200];
	snprintf(name, sizeof name,
	         "%s nb=%dx%d L=%d S=%d D=%d Dv=%d causal=%d scale=%g lay=%d kv_group=%d drop=%g%s%s",
	         kt_dt<T>::name(), c.nb0, c.nb1, c.L, c.S, c.D, c.Dv, c.causal, c.scale, c.layout, G,
	         c.drop, c.fill == FILL_ONEHOT_DO ? " [mask: o, dv]" : c.fill == FILL_ONES_DO ? " [mask: dq]" : "",
	         variant);
	printf("%s\n", name);
	KtBuf<T> q, k, v, o, dO, dq, dk, dv;
	q.alloc(span(p, p.q_s0, p.q_s1, p.q_sr, c.L, c.D) + off);
	k.alloc(span(p, p.k_s0, p.k_s1, p.k_sr, c.S, c.D, nkv) + off);
	v.alloc(span(p, p.v_s0, p.v_s1, p.v_sr, c.S, c.Dv, nkv) + off);
	o.alloc(span(p, p.o_s0, p.o_s1, p.o_sr, c.L, c.Dv) + off);
	dO.alloc(span(p, p.do_s0, p.do_s1, p.do_sr, c.L, c.Dv) + off);
	dq.alloc(span(p, p.dq_s0, p.dq_s1, p.dq_sr, c.L, c.D) + off);
	dk.alloc(span(p, p.dk_s0, p.dk_s1, p.dk_sr, c.S, c.D, nkv) + off);
	dv.alloc(span(p, p.dv_s0, p.dv_s1, p.dv_sr, c.S, c.Dv, nkv) + off);
	if (c.fill == FILL_RANDOM) {
		/* Big cases: uniform with unit variance (quicker to draw). */
		double (*gen)(void) = q.n > (1u << 20) ? unit_unif : kt_normal;
		q.fill(gen);
		k.fill(gen);
		v.fill(gen);
		dO.fill(gen);
	} else {
		/* Contiguous, D >= S, Dv >= S, L: element e is (row e / cols % rows, col e % cols). */
		size_t e = 0;
		q.fill([] { return 0.0; });
		k.fill([&] { const size_t x = e++; return x / c.D % c.S == x % c.D ? 1.0 : 0.0; });
		e = 0;
		v.fill([&] { const size_t x = e++; return x / c.Dv % c.S == x % c.Dv ? 1.0 : 0.0; });
		e = 0;
		dO.fill([&] {
			const size_t x = e++, col = x % c.Dv;
			return c.fill == FILL_ONEHOT_DO ? (x / c.Dv % c.L == col ? 1.0 : 0.0)
			                                : (col < (size_t)c.S ? 1.0 : 0.0);
		});
	}
	const int nb = c.nb0 * c.nb1, nbk = c.nb0 * nkv;
	float *lse, *delta;
	KT_CUDA(cudaMalloc(&lse, (size_t)nb * c.L * 4));
	KT_CUDA(cudaMalloc(&delta, sg_flash_bwd_workspace(&p)));
	KT_CUDA(cudaMemset(lse, 0xff, (size_t)nb * c.L * 4));
	o.poison();
	dq.poison();
	dk.poison();
	dv.poison();
	p.q = q.d + off;
	p.k = k.d + off;
	p.v = v.d + off;
	p.o = o.d + off;
	p.dout = dO.d + off;
	p.dq = dq.d + off;
	p.dk = dk.d + off;
	p.dv = dv.d + off;
	p.lse = lse;
	p.delta = delta;
	cudaError_t e = fwd(&p, 0);
	KT_CHECK(e == cudaSuccess, "%s: forward launch: %s", name, cudaGetErrorString(e));
	e = bwd(&p, 0);
	KT_CHECK(e == cudaSuccess, "%s: backward launch: %s", name, cudaGetErrorString(e));
	KT_CUDA(cudaDeviceSynchronize());

	/* The reference, with the effective scale. */
	SgFlashParams r = p;
	if (!(r.scale > 0))
		r.scale = 1.f / sqrtf((float)c.D);
	double *ro, *rl, *rd, *rdq, *rdk, *rdv;
	const size_t nO = (size_t)nb * c.L * c.Dv, nQ = (size_t)nb * c.L * c.D;
	const size_t nK = (size_t)nbk * c.S * c.D, nV = (size_t)nbk * c.S * c.Dv;
	KT_CUDA(cudaMalloc(&ro, nO * 8));
	KT_CUDA(cudaMalloc(&rl, (size_t)nb * c.L * 8));
	KT_CUDA(cudaMalloc(&rd, (size_t)nb * c.L * 8));
	KT_CUDA(cudaMalloc(&rdq, nQ * 8));
	KT_CUDA(cudaMalloc(&rdk, nK * 8));
	KT_CUDA(cudaMalloc(&rdv, nV * 8));
	const int nsel = (nb + c.bstride - 1) / c.bstride;
	ref_fwd<T><<<dim3((c.L + 63) / 64, nsel), 64>>>(r, c.bstride, ro, rl, rd);
	KT_CUDA(cudaGetLastError());
	ref_bwd_q<T><<<dim3((c.L + 63) / 64, nsel), 64>>>(r, c.bstride, rl, rd, rdq);
	KT_CUDA(cudaGetLastError());
	ref_bwd_kv<T><<<dim3((c.S + 63) / 64, (nbk + c.bstride - 1) / c.bstride), 64>>>(r, c.bstride, rl,
	                                                                               rd, rdk, rdv);
	KT_CUDA(cudaGetLastError());
	KT_CUDA(cudaDeviceSynchronize());
	std::vector<double> hro(nO), hrl((size_t)nb * c.L), hrdq(nQ), hrdk(nK), hrdv(nV);
	KT_CUDA(cudaMemcpy(hro.data(), ro, nO * 8, cudaMemcpyDeviceToHost));
	KT_CUDA(cudaMemcpy(hrl.data(), rl, hrl.size() * 8, cudaMemcpyDeviceToHost));
	KT_CUDA(cudaMemcpy(hrdq.data(), rdq, nQ * 8, cudaMemcpyDeviceToHost));
	KT_CUDA(cudaMemcpy(hrdk.data(), rdk, nK * 8, cudaMemcpyDeviceToHost));
	KT_CUDA(cudaMemcpy(hrdv.data(), rdv, nV * 8, cudaMemcpyDeviceToHost));
	std::vector<float> hl((size_t)nb * c.L);
	KT_CUDA(cudaMemcpy(hl.data(), lse, hl.size() * 4, cudaMemcpyDeviceToHost));
	o.get();
	dq.get();
	dk.get();
	dv.get();
	std::vector<double> go = gather(o.h, p, p.o_s0, p.o_s1, p.o_sr, c.L, c.Dv, off);
	std::vector<double> gdq = gather(dq.h, p, p.dq_s0, p.dq_s1, p.dq_sr, c.L, c.D, off);
	std::vector<double> gdk = gather(dk.h, p, p.dk_s0, p.dk_s1, p.dk_sr, c.S, c.D, off, nkv);
	std::vector<double> gdv = gather(dv.h, p, p.dv_s0, p.dv_s1, p.dv_sr, c.S, c.Dv, off, nkv);
	std::vector<double> gl(hl.begin(), hl.end());
	report("o", name, kt_err(go.data(), hro.data(), nO, used(p, c.bstride, c.L, c.Dv).data()),
	       tol_fwd<T>());
	KtErr el = kt_err(gl.data(), hrl.data(), gl.size(), used(p, c.bstride, c.L, 1).data());
	printf("  lse max abs err %.2e\n", el.maxabs);
	KT_CHECK(el.nan == 0 && el.maxabs <= 1e-3 * std::max(1.0, el.refmax), "%s lse: max err %.3e",
	         name, el.maxabs);
	report("dq", name, kt_err(gdq.data(), hrdq.data(), nQ, used(p, c.bstride, c.L, c.D).data()),
	       tol_bwd<T>());
	report("dk", name,
	       kt_err(gdk.data(), hrdk.data(), nK, used(p, c.bstride, c.S, c.D, nbk).data()),
	       tol_bwd<T>());
	report("dv", name,
	       kt_err(gdv.data(), hrdv.data(), nV, used(p, c.bstride, c.S, c.Dv, nbk).data()),
	       tol_bwd<T>());
	if (c.drop >= 1) {
		/* Nothing kept: o and every gradient exactly 0. */
		double mx = 0;
		for (const std::vector<double> *t : {&go, &gdq, &gdk, &gdv})
			for (double x : *t)
				mx = x == x ? std::max(mx, fabs(x)) : INFINITY;
		printf("  p=1: max |o|, |dq|, |dk|, |dv| %.2e\n", mx);
		KT_CHECK(mx == 0, "%s: p = 1 gives nonzero o or gradients (max %.3e)", name, mx);
	}
	if (c.fill != FILL_RANDOM)
		mask_checks(c, r, go, gdq, gdv, hro, hrdq, hrdv);
	if (dmask) {
		/* Every keep bit the forward stored for a weight a query sees. */
		unsigned long long *bad, nbad = 0;
		KT_CUDA(cudaMalloc(&bad, sizeof *bad));
		KT_CUDA(cudaMemset(bad, 0, sizeof *bad));
		check_dmask<<<dim3((c.L + 63) / 64, nb), 64>>>(r, dmask, bad);
		KT_CUDA(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
		cudaFree(bad);
		printf("  dmask: %llu keep bits differ from the draws\n", nbad);
		KT_CHECK(nbad == 0, "%s: %llu of the forward's keep bits differ from the draws", name,
		         nbad);
	}

	if (dump && c.layout == LAY_CONTIG && G == 1 && c.drop == 0) {
		KtDump d;
		d.open(dump, dname, "attention");
		d.attrs("dtype", kt_dt<T>::name());
		d.attr("causal", c.causal);
		d.attr("scale", c.scale);
		std::vector<long> sq = {c.nb0, c.nb1, c.L, c.D}, sk = {c.nb0, c.nb1, c.S, c.D};
		std::vector<long> sv = {c.nb0, c.nb1, c.S, c.Dv}, so = {c.nb0, c.nb1, c.L, c.Dv};
		d.tensor("q", q.h, sq);
		d.tensor("k", k.h, sk);
		d.tensor("v", v.h, sv);
		d.tensor("dout", dO.h, so);
		d.tensor("o", go, so);
		d.tensor("lse", gl, {c.nb0, c.nb1, c.L});
		d.tensor("dq", gdq, sq);
		d.tensor("dk", gdk, sk);
		d.tensor("dv", gdv, sv);
		d.close();
	}
	cudaFree(ro);
	cudaFree(rl);
	cudaFree(rd);
	cudaFree(rdq);
	cudaFree(rdk);
	cudaFree(rdv);
	cudaFree(lse);
	cudaFree(delta);
	cudaFree(rng);
	cudaFree(dmask);
	q.release();
	k.release();
	v.release();
	o.release();
	dO.release();
	dq.release();
	dk.release();
	dv.release();
}

/* ------------------------------------------------------------------ graphs */

/* The forward and backward captured into a CUDA graph and replayed give
 * the eager results bit for bit (the backward has no atomics), twice:
 * graph_replay(D, nb1, L, 0).  With dropout p (drop > 0) the kernels read
 * the generator state on the device when they run, so each replay, after
 * the offset moved (drop_offset, then drop_offset + 1), gives the eager
 * results of its offset, bit for bit, and the two offsets differ. */
template <class T>
static void graph_replay(int D, int nb1, int L, double drop)
{
	SgFlashParams p;
	sg_flash_params_init(&p, 2, nb1, L, L, D, D, 0.f, 1);
	const size_t n = (size_t)2 * nb1 * L * D;
	KtBuf<T> q, k, v, o, dO, dq, dk, dv;
	KtBuf<T> *all[] = {&q, &k, &v, &o, &dO, &dq, &dk, &dv};
	for (KtBuf<T> *t : all)
		t->alloc(n);
	q.fill(kt_normal), k.fill(kt_normal), v.fill(kt_normal), dO.fill(kt_normal);
	float *lse, *delta;
	sgk_i64 *rng = NULL;
	KT_CUDA(cudaMalloc(&lse, (size_t)2 * nb1 * L * 4));
	KT_CUDA(cudaMalloc(&delta, sg_flash_bwd_workspace(&p)));
	p.q = q.d, p.k = k.d, p.v = v.d, p.o = o.d, p.dout = dO.d;
	p.dq = dq.d, p.dk = dk.d, p.dv = dv.d, p.lse = lse, p.delta = delta;
	if (drop > 0) {
		KT_CUDA(cudaMalloc(&rng, 2 * sizeof(sgk_i64)));
		p.rng = rng, p.salt = drop_salt;
		p.drop_thresh = sgk_dropout_threshold(drop);
		p.drop_scale = (float)sgk_dropout_scale(drop);
		const size_t mb = sg_flash_dropout_mask_bytes<T>(2 * nb1, L, L, D, D);
		if (mb)
			KT_CUDA(cudaMalloc(&p.dmask, mb));
	}
	cudaStream_t st;
	KT_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	auto set_offset = [&](sgk_i64 off) {
		const sgk_i64 s[2] = {drop_seed, off};
		if (rng)
			KT_CUDA(cudaMemcpy(rng, s, sizeof s, cudaMemcpyHostToDevice));
	};
	KtBuf<T> *outs[] = {&o, &dq, &dk, &dv};
	std::vector<std::vector<double>> eager[2];
	for (int r = 0; r < 2; r++) {
		set_offset(drop_offset + r);
		KT_CUDA(sg_launch_flash_fwd<T>(&p, st));
		KT_CUDA(sg_launch_flash_bwd<T>(&p, st));
		KT_CUDA(cudaStreamSynchronize(st));
		for (KtBuf<T> *t : outs) {
			t->get();
			eager[r].push_back(t->h);
			t->poison();
		}
	}
	cudaGraph_t g;
	cudaGraphExec_t ge;
	KT_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	cudaError_t e1 = sg_launch_flash_fwd<T>(&p, st), e2 = sg_launch_flash_bwd<T>(&p, st);
	KT_CUDA(cudaStreamEndCapture(st, &g));
	KT_CHECK(e1 == cudaSuccess && e2 == cudaSuccess, "capture: %s / %s", cudaGetErrorString(e1),
	         cudaGetErrorString(e2));
	KT_CUDA(cudaGraphInstantiate(&ge, g, 0));
	int same = 1;
	for (int r = 0; r < 2; r++) {
		set_offset(drop_offset + r);
		KT_CUDA(cudaGraphLaunch(ge, st));
		KT_CUDA(cudaStreamSynchronize(st));
		for (int i = 0; i < 4; i++) {
			outs[i]->get();
			same &= memcmp(outs[i]->h.data(), eager[r][i].data(), n * sizeof(double)) == 0;
			outs[i]->poison();
		}
	}
	if (drop > 0) {
		const int moved = memcmp(eager[0][0].data(), eager[1][0].data(), n * sizeof(double)) != 0;
		printf("%s D=%d dropout: graph replays %s the eager results at each offset; offsets "
		       "%lld and %lld %s\n",
		       kt_dt<T>::name(), D, same ? "match" : "DIFFER FROM", drop_offset, drop_offset + 1,
		       moved ? "differ" : "AGREE");
		KT_CHECK(moved, "%s D=%d: dropout at two offsets gives the same o", kt_dt<T>::name(), D);
	} else {
		printf("%s D=%d: graph replay %s the eager results\n", kt_dt<T>::name(), D,
		       same ? "matches" : "DIFFERS FROM");
	}
	KT_CHECK(same, "%s D=%d%s: graph replay differs from the eager run", kt_dt<T>::name(), D,
	         drop > 0 ? " dropout" : "");
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	cudaStreamDestroy(st);
	for (KtBuf<T> *t : all)
		t->release();
	cudaFree(p.dmask);
	cudaFree(lse);
	cudaFree(delta);
	cudaFree(rng);
}

/* ------------------------------------------------------------------ timings */

/* Score pairs a head computes: L*S, or the visible ones when causal. */
static double pairs(int L, int S, int causal)
{
	if (!causal)
		return (double)L * S;
	double n = 0;
	for (int i = 0; i < L; i++)
		n += std::min(i + 1, S);
	return n;
}

/* The backward's two kernels timed alone with MINB blocks an SM (pp:
 * effective parameters, with dropout when DROP). */
template <class T, int DP, int MINB, bool DROP>
static void bwd_kernel_times(const SgFlashParams &pp, int nb, double flop, double td)
{
	double tkv = kt_time([&] { sgk_fa_bwd_kv_k<T, DP, SGK_FA_BWD_BQKV, DROP, MINB>(pp, nb, 0); }, 2, 10);
	double tq = kt_time([&] { sgk_fa_bwd_q_k<T, DP, SGK_FA_BWD_BQKV, DROP, MINB>(pp, nb, 0); }, 2, 10);
	printf("PERF   bwd kernels%s, %d blocks an SM: delta %.3f ms, dK/dV %.3f ms (%.1f TFLOP/s of its "
	       "4 products), dQ %.3f ms (%.1f TFLOP/s of its 3)\n",
	       DROP ? " with dropout 0.1" : "", MINB, td, tkv, 2 * flop / tkv / 1e9, tq,
	       1.5 * flop / tq / 1e9);
}

/* Times forward and backward at one shape (with the launchers' tiles and
 * the alternatives), after checking sampled batches against the
 * reference.  once: only runs the launchers' forward and backward once
 * each, without and with dropout (for a profiler), and returns. */
template <class T>
static void bench(int B, int H, int Tn, int D, int causal, bool once = false)
{
	Case c = {B, H, Tn, Tn, D, D, causal, 0.f, LAY_CONTIG, 37};
	if (!once)
		run_case<T>(c, 0, 0);
	const int w1 = once ? 0 : 3, r1 = once ? 1 : 20, w2 = once ? 0 : 2, r2 = once ? 1 : 10;
	SgFlashParams p;
	sg_flash_params_init(&p, B, H, Tn, Tn, D, D, 0.f, causal);
	const size_t n = (size_t)B * H * Tn * D;
	KtBuf<T> q, k, v, o, dO, dq, dk, dv;
	KtBuf<T> *all[] = {&q, &k, &v, &o, &dO, &dq, &dk, &dv};
	for (KtBuf<T> *t : all)
		t->alloc(n);
	q.fill(unit_unif);
	k.fill(unit_unif);
	v.fill(unit_unif);
	dO.fill(unit_unif);
	float *lse, *delta;
	KT_CUDA(cudaMalloc(&lse, (size_t)B * H * Tn * 4));
	KT_CUDA(cudaMalloc(&delta, sg_flash_bwd_workspace(&p)));
	p.q = q.d, p.k = k.d, p.v = v.d, p.o = o.d, p.dout = dO.d;
	p.dq = dq.d, p.dk = dk.d, p.dv = dv.d, p.lse = lse, p.delta = delta;
	const double flop = 4.0 * B * H * pairs(Tn, Tn, causal) * D;
	SgFlashParams pp = sgk_fa_prep(&p, 1);
	const int nb = B * H;
	double f4 = kt_time([&] { sg_launch_flash_fwd<T>(&p, 0); }, w1, r1);
	double b64 = kt_time([&] { sg_launch_flash_bwd<T>(&p, 0); }, w2, r2);
	KT_CUDA(cudaGetLastError());
	printf("PERF attention %s B=%d H=%d T=%d D=%d causal=%d: fwd %.3f ms %.1f TFLOP/s | bwd %.3f ms "
	       "%.1f TFLOP/s\n",
	       kt_dt<T>::name(), B, H, Tn, D, causal, f4, flop / f4 / 1e9, b64, 2.5 * flop / b64 / 1e9);
	/* With dropout (p = 0.1): what the draws cost. */
	sgk_i64 *rng;
	const sgk_i64 st[2] = {drop_seed, drop_offset};
	KT_CUDA(cudaMalloc(&rng, sizeof st));
	KT_CUDA(cudaMemcpy(rng, st, sizeof st, cudaMemcpyHostToDevice));
	SgFlashParams pd = p;
	pd.rng = rng, pd.salt = drop_salt;
	pd.drop_thresh = sgk_dropout_threshold(0.1);
	pd.drop_scale = (float)sgk_dropout_scale(0.1);
	double fnm = once ? 0 : kt_time([&] { sg_launch_flash_fwd<T>(&pd, 0); }, 3, 20);
	KT_CUDA(cudaMalloc(&pd.dmask, sg_flash_dropout_mask_bytes<T>(nb, Tn, Tn, D, D)));
	double fd = kt_time([&] { sg_launch_flash_fwd<T>(&pd, 0); }, w1, r1);
	double bd = kt_time([&] { sg_launch_flash_bwd<T>(&pd, 0); }, w2, r2);
	KT_CUDA(cudaGetLastError());
	auto release = [&] {
		cudaFree(pd.dmask);
		cudaFree(rng);
		KT_CUDA(cudaGetLastError());
		for (KtBuf<T> *t : all)
			t->release();
		cudaFree(lse);
		cudaFree(delta);
	};
	if (once) {
		printf("attention %s B=%d H=%d T=%d D=%d causal=%d once: fwd %.3f, bwd %.3f ms; dropout "
		       "0.1: fwd %.3f, bwd %.3f ms\n",
		       kt_dt<T>::name(), B, H, Tn, D, causal, f4, b64, fd, bd);
		release();
		return;
	}
	printf("PERF attention %s B=%d H=%d T=%d D=%d causal=%d dropout 0.1: fwd %.3f ms (x%.2f; "
	       "%.3f without storing the keep bits) | bwd %.3f ms (x%.2f)\n",
	       kt_dt<T>::name(), B, H, Tn, D, causal, fd, fd / f4, fnm, bd, bd / b64);
	/* Without the forward's keep bits the tensor-core backward refuses dropout. */
	SgFlashParams pn = pd;
	pn.dmask = NULL;
	KT_CHECK(sg_launch_flash_bwd<T>(&pn, 0) == cudaErrorInvalidValue,
	         "backward with dropout and no dmask: not refused");
	/* The forward's tile variants (with dropout too), and the backward's
	 * kernels one by one. */
	struct V {
		const char *name;
		Launch f;
	} fv[] = {
		{"4 warps x 1 m tile, 64 keys", fwd_variant<T, 4, 1, 64>},
		{"the same, 3 blocks an SM", fwd_variant<T, 4, 1, 64, 3>},
		{"4 warps x 2 m tiles, 64 keys", fwd_variant<T, 4, 2, 64>},
		{"4 warps x 2 m tiles, 32 keys", fwd_variant<T, 4, 2, 32>},
		{"8 warps x 1 m tile, 64 keys", fwd_variant<T, 8, 1, 64>},
	};
	for (const V &x : fv) {
		double ms = kt_time([&] { x.f(&p, 0); }, 3, 20);
		double msd = kt_time([&] { x.f(&pd, 0); }, 3, 20);
		printf("PERF   fwd variant %-30s %.3f ms %.1f TFLOP/s; dropout 0.1 %.3f ms\n", x.name, ms,
		       flop / ms / 1e9, msd);
	}
	KT_CUDA(cudaGetLastError());
	/* The backward's tiles and register budgets, with dropout too. */
	struct W {
		const char *name;
		Launch f;
	} bv[] = {
		{"64-query dK/dV tiles, 2 blocks an SM", bwd_variant<T, 64, 2>},
		{"64-query dK/dV tiles, 3 blocks an SM", bwd_variant<T, 64, 3>},
		{"64-query dK/dV tiles, 4 blocks an SM", bwd_variant<T, 64, 4>},
		{"32-query dK/dV tiles, 2 blocks an SM", bwd_variant<T, 32, 2>},
		{"32-query dK/dV tiles, 3 blocks an SM", bwd_variant<T, 32, 3>},
	};
	for (const W &x : bv) {
		double ms = kt_time([&] { x.f(&p, 0); }, 2, 10);
		double msd = kt_time([&] { x.f(&pd, 0); }, 2, 10);
		printf("PERF   bwd variant %-38s %.3f ms; dropout 0.1 %.3f ms\n", x.name, ms, msd);
	}
	KT_CUDA(cudaGetLastError());
	const unsigned dblocks = (unsigned)(((long long)nb * Tn + 7) / 8);
	double td = kt_time([&] { sgk_flash_delta<T><<<dblocks, 256>>>(pp); }, 2, 10);
	if (D == 128)
		bwd_kernel_times<T, 128, 2, false>(pp, nb, flop, td);
	if (D == 64) {
		SgFlashParams ppd = sgk_fa_prep(&pd, 1);
		bwd_kernel_times<T, 64, 2, false>(pp, nb, flop, td);
		bwd_kernel_times<T, 64, 3, false>(pp, nb, flop, td);
		bwd_kernel_times<T, 64, 2, true>(ppd, nb, flop, td);
		bwd_kernel_times<T, 64, 3, true>(ppd, nb, flop, td);
	}
	release();
}

int main(int argc, char **argv)
{
	kt_start(argc, argv);
	const char *dump = kt_opt(argc, argv, "--dump");
	const bool quick = kt_flag(argc, argv, "--quick");
	/* nb0, nb1, L, S, D, Dv, causal, scale, layout, bstride */
	const Case tc[] = {
		{2, 3, 200, 200, 64, 64, 0, 0, LAY_CONTIG, 1},
		{2, 3, 200, 200, 64, 64, 1, 0, LAY_CONTIG, 1},
		{2, 3, 130, 130, 128, 128, 1, 0, LAY_CONTIG, 1},
		{1, 2, 257, 257, 128, 128, 0, 0, LAY_CONTIG, 1},
		{2, 2, 77, 300, 128, 128, 1, 0, LAY_CONTIG, 1},
		{2, 2, 300, 77, 64, 64, 1, 0, LAY_CONTIG, 1},
		{2, 2, 300, 77, 32, 32, 0, 0.3f, LAY_CONTIG, 1},
		{1, 3, 1, 1, 64, 64, 1, 0, LAY_CONTIG, 1},
		{1, 1, 64, 64, 128, 128, 1, 0, LAY_CONTIG, 1},
		{2, 3, 150, 150, 96, 96, 1, 0, LAY_CONTIG, 1},
		{2, 3, 150, 150, 80, 48, 0, 0, LAY_CONTIG, 1},
		{2, 3, 100, 120, 36, 36, 1, 0, LAY_CONTIG, 1},
		{2, 4, 190, 190, 64, 64, 1, 0, LAY_BTHD, 1},
		{2, 4, 190, 190, 128, 128, 0, 0, LAY_KV_BCAST, 1},
		{2, 2, 140, 140, 64, 64, 1, 0, LAY_MISALIGNED, 1},
		{1, 2, 100, 100, 160, 160, 1, 0, LAY_CONTIG, 1},
		{1, 2, 70, 90, 256, 200, 0, 0, LAY_CONTIG, 1},
		{2, 3, 130, 130, 64, 64, 1, 0, LAY_BTHD_OC, 1},
		{2, 2, 160, 160, 128, 128, 0, 0, LAY_BTHD_OC, 1},
	};
	const int nt = sizeof tc / sizeof tc[0];
	/* Dropout (seed 0x123456789, offset 7, salt 3): tensor cores at D = 32,
	 * 64, 128, SIMT for f32; causal or not, L != S, S % 8 != 0 (77, 130,
	 * 300) and == 0 (200, 120, 128), grouped-query heads, p = 0.1, 0.5, 1;
	 * and the mask checks
	 * (non causal, every weight 1 / S). */
	const Case dc[] = {
		{2, 2, 200, 200, 64, 64, 0, 0, LAY_CONTIG, 1, 1, 0.1},
		{2, 2, 200, 200, 64, 64, 1, 0, LAY_CONTIG, 1, 1, 0.5},
		{2, 2, 130, 130, 128, 128, 1, 0, LAY_CONTIG, 1, 1, 0.1},
		{1, 2, 257, 257, 128, 128, 0, 0, LAY_CONTIG, 1, 1, 0.5},
		{2, 2, 77, 300, 128, 128, 1, 0, LAY_CONTIG, 1, 1, 0.5},
		{2, 2, 300, 77, 64, 64, 1, 0, LAY_CONTIG, 1, 1, 0.1},
		{2, 2, 300, 77, 32, 32, 0, 0.3f, LAY_CONTIG, 1, 1, 0.5},
		{1, 4, 50, 77, 64, 64, 0, 0, LAY_CONTIG, 1, 2, 0.5},
		{1, 4, 50, 77, 128, 128, 1, 0, LAY_CONTIG, 1, 2, 0.1},
		{2, 4, 120, 120, 64, 64, 1, 0, LAY_CONTIG, 1, 2, 0.5},
		{2, 4, 190, 190, 64, 64, 1, 0, LAY_BTHD, 1, 1, 0.1},
		{2, 2, 140, 140, 64, 64, 1, 0, LAY_MISALIGNED, 1, 1, 0.5},
		{2, 3, 130, 130, 64, 64, 1, 0, LAY_BTHD_OC, 1, 1, 0.1},
		{2, 2, 100, 77, 64, 64, 1, 0, LAY_CONTIG, 1, 2, 1.0},
		{1, 2, 130, 130, 128, 128, 0, 0, LAY_CONTIG, 1, 1, 1.0},
		{1, 2, 50, 77, 80, 80, 0, 0, LAY_CONTIG, 1, 1, 0.5, FILL_ONEHOT_DO},
		{1, 2, 50, 77, 80, 80, 0, 0, LAY_CONTIG, 1, 1, 0.5, FILL_ONES_DO},
		{1, 4, 100, 128, 128, 128, 0, 0, LAY_CONTIG, 1, 2, 0.1, FILL_ONEHOT_DO},
		{1, 4, 100, 128, 128, 128, 0, 0, LAY_CONTIG, 1, 2, 0.1, FILL_ONES_DO},
		{2, 2, 64, 64, 64, 64, 0, 0, LAY_CONTIG, 1, 1, 0.5, FILL_ONEHOT_DO},
		{2, 2, 64, 64, 64, 64, 0, 0, LAY_CONTIG, 1, 1, 0.5, FILL_ONES_DO},
	};
	const int nd = sizeof dc / sizeof dc[0];
	if (kt_flag(argc, argv, "--bench-gpt2")) {
		/* The timings at GPT-2 small's shape alone. */
		bench<__nv_bfloat16>(8, 12, 1024, 64, 1);
		return kt_finish();
	}
	if (const char *shape = kt_opt(argc, argv, "--bench-shape")) {
		int b, h, t, d, causal;
		char end;
		if (sscanf(shape, "%d,%d,%d,%d,%d%c", &b, &h, &t, &d, &causal, &end) != 5 || b < 1 ||
		    h < 1 || t < 1 || (d != 64 && d != 128) || (causal != 0 && causal != 1)) {
			fprintf(stderr, "test_attention: --bench-shape wants B,H,T,D,CAUSAL (D 64 or 128, "
			                "CAUSAL 0 or 1), not '%s'\n", shape);
			return 2;
		}
		bench<__nv_bfloat16>(b, h, t, d, causal);
		return kt_finish();
	}
	if (kt_flag(argc, argv, "--profile-gpt2")) {
		/* GPT-2 small's shape, each launcher once (for ncu). */
		bench<__nv_bfloat16>(8, 12, 1024, 64, 1, true);
		return kt_finish();
	}
	if (kt_flag(argc, argv, "--sanitize")) {
		/* A few small cases for compute-sanitizer: every kernel once. */
		run_case<__nv_bfloat16>(tc[2], 0, 0);
		run_case<__half>(tc[12], 0, 0);
		run_case<__nv_bfloat16>(tc[11], 0, 0);
		run_case<float>(tc[5], 0, 0);
		run_case<__nv_bfloat16>(tc[4], 0, 0, fwd_variant<__nv_bfloat16, 4, 2, 64>,
		                        bwd_variant<__nv_bfloat16, 32>, " [fwd 4x2x64, bwd 32]");
		run_case<__half>(tc[5], 0, 0, fwd_variant<__half, 4, 2, 32>, sg_launch_flash_bwd<__half>,
		                 " [fwd 4x2x32]");
		/* Dropout: S % 4 != 0 and == 0, grouped-query heads, SIMT too. */
		run_case<__nv_bfloat16>(dc[7], 0, 0);
		run_case<__half>(dc[9], 0, 0);
		run_case<float>(dc[7], 0, 0);
		return kt_finish();
	}
	for (int i = 0; i < nt; i++) {
		char dn[64];
		snprintf(dn, sizeof dn, "attn_bf16_%d", i);
		run_case<__nv_bfloat16>(tc[i], i < 3 ? dump : 0, dn);
		snprintf(dn, sizeof dn, "attn_f16_%d", i);
		run_case<__half>(tc[i], i == 1 ? dump : 0, dn);
		if (tc[i].L * tc[i].S <= 40000) {
			snprintf(dn, sizeof dn, "attn_f32_%d", i);
			run_case<float>(tc[i], i == 1 ? dump : 0, dn);
		}
	}
	const Case f64c = {1, 2, 50, 60, 64, 64, 1, 0, LAY_CONTIG, 1};
	run_case<double>(f64c, 0, 0);
	for (int i = 0; i < nd; i++) {
		run_case<__nv_bfloat16>(dc[i], 0, 0);
		run_case<__half>(dc[i], 0, 0);
		if (dc[i].L * dc[i].S <= 40000)
			run_case<float>(dc[i], 0, 0);
	}
	const Case f64d = {1, 4, 50, 77, 64, 64, 1, 0, LAY_CONTIG, 1, 2, 0.5};
	run_case<double>(f64d, 0, 0);
	graph_replay<__nv_bfloat16>(128, 3, 200, 0);
	graph_replay<float>(64, 3, 200, 0);
	graph_replay<__nv_bfloat16>(64, 2, 150, 0.3);
	graph_replay<float>(64, 2, 150, 0.3);
	/* Every forward tile variant and the other backward tile, on cases
	 * that end mid-tile, causal and not, L != S. */
	const int vc[] = {2, 3, 4, 5, 9};
	for (int i : vc) {
		run_case<__nv_bfloat16>(tc[i], 0, 0, fwd_variant<__nv_bfloat16, 4, 2, 64>,
		                        bwd_variant<__nv_bfloat16, 32>, " [fwd 4x2x64, bwd 32]");
		run_case<__half>(tc[i], 0, 0, fwd_variant<__half, 4, 2, 32>, sg_launch_flash_bwd<__half>,
		                 " [fwd 4x2x32]");
		run_case<__nv_bfloat16>(tc[i], 0, 0, fwd_variant<__nv_bfloat16, 8, 1, 64>,
		                        bwd_variant<__nv_bfloat16, 64, 2>, " [fwd 8x1x64, bwd 2 blocks an SM]");
	}
	/* The same with dropout (the mask cases too). */
	const int vd[] = {2, 4, 5, 8, 17, 18};
	for (int i : vd) {
		run_case<__nv_bfloat16>(dc[i], 0, 0, fwd_variant<__nv_bfloat16, 4, 2, 64>,
		                        bwd_variant<__nv_bfloat16, 32>, " [fwd 4x2x64, bwd 32]");
		run_case<__half>(dc[i], 0, 0, fwd_variant<__half, 4, 2, 32>, sg_launch_flash_bwd<__half>,
		                 " [fwd 4x2x32]");
		run_case<__nv_bfloat16>(dc[i], 0, 0, fwd_variant<__nv_bfloat16, 8, 1, 64>,
		                        bwd_variant<__nv_bfloat16, 64, 2>, " [fwd 8x1x64, bwd 2 blocks an SM]");
	}
	if (!quick) {
		bench<__nv_bfloat16>(8, 12, 1024, 64, 1); /* GPT-2 small's */
		bench<__nv_bfloat16>(8, 16, 2048, 128, 1);
		bench<__nv_bfloat16>(8, 16, 2048, 128, 0);
		bench<__half>(8, 16, 2048, 128, 1);
		bench<__nv_bfloat16>(8, 32, 2048, 64, 1);
		const Case f32c = {2, 16, 1024, 1024, 64, 64, 1, 0, LAY_CONTIG, 13};
		run_case<float>(f32c, 0, 0);
		SgFlashParams p;
		sg_flash_params_init(&p, 2, 16, 1024, 1024, 64, 64, 0, 1);
		KtBuf<float> q;
		q.alloc((size_t)2 * 16 * 1024 * 64 * 6);
		q.fill(unit_unif);
		const size_t n = (size_t)2 * 16 * 1024 * 64;
		float *lse, *delta;
		KT_CUDA(cudaMalloc(&lse, 2 * 16 * 1024 * 4));
		KT_CUDA(cudaMalloc(&delta, 2 * 16 * 1024 * 4));
		p.q = q.d, p.k = q.d + n, p.v = q.d + 2 * n, p.o = q.d + 3 * n, p.dout = q.d + 4 * n;
		p.dq = q.d + 5 * n, p.dk = q.d + 3 * n, p.dv = q.d + 4 * n, p.lse = lse, p.delta = delta;
		double ms = kt_time([&] { sg_launch_flash_fwd<float>(&p, 0); }, 2, 5);
		printf("PERF attention f32 (SIMT) B=2 H=16 T=1024 D=64 causal: fwd %.3f ms %.2f TFLOP/s\n",
		       ms, 4.0 * 32 * pairs(1024, 1024, 1) * 64 / ms / 1e9);
		q.release();
		cudaFree(lse);
		cudaFree(delta);
	}
	return kt_finish();
}
