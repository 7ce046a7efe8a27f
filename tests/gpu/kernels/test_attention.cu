/*
 * test_attention.cu - flash attention forward and backward
 * (runtime/sgk/sgk_attention.cuh) against a plain reference
 * in double on the GPU: o, lse, dq, dk, dv on random inputs for many
 * shapes, dtypes, masks and layouts, every output poisoned first; then the
 * H200 figures (B=8, H=16, T=2048, D=128, bf16, causal and not) in TFLOP/s
 * with the algorithmic count (forward 4*L*S*D a head, halved by the
 * causal mask as far as it masks; backward 2.5 times the forward).
 *
 *   test_attention [--dump DIR] [--quick] [--sanitize]
 *
 * --dump writes a few small cases for torch_check.py; --quick skips the
 * timings; --sanitize runs four small cases only (for compute-sanitizer).  Prints "N passed, M failed".
 */
#include "ktest.h"
#include "sgk_attention.cuh"

/* ------------------------------------------------------------------ reference */

/* Element (b, r, c) of a strided [nb0, nb1, rows, cols] tensor. */
template <class T>
__device__ double at(const void *base, const SgFlashParams &p, sgk_i64 s0, sgk_i64 s1, sgk_i64 sr,
                     int b, int r, int c)
{
	const T *t = (const T *)base;
	return sgk_tof(t[(b / p.nb1) * s0 + (b % p.nb1) * s1 + r * sr + c]);
}

/* Whether query i sees key j. */
__device__ bool visible(const SgFlashParams &p, int i, int j)
{
	return j < p.S && i < p.L && !(p.causal && j > i);
}

/* A thread a query row of batches 0, bstride, 2 bstride...: o, lse, and
 * delta = dout . o, all in double into [nb, L, *] arrays. */
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
			     at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c);
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
			     at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c);
		const double e = exp(s * (double)p.scale - m);
		l += e;
		for (int c = 0; c < p.Dv; c++)
			acc[c] += e * at<T>(p.v, p, p.v_s0, p.v_s1, p.v_sr, b, j, c);
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
			     at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c);
		for (int c = 0; c < p.Dv; c++)
			dp += at<T>(p.dout, p, p.do_s0, p.do_s1, p.do_sr, b, i, c) *
			      at<T>(p.v, p, p.v_s0, p.v_s1, p.v_sr, b, j, c);
		const double pr = exp(s * (double)p.scale - lse[row]), ds = pr * (dp - delta[row]);
		for (int c = 0; c < p.D; c++)
			acc[c] += ds * at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c);
	}
	for (int c = 0; c < p.D; c++)
		dq[row * p.D + c] = acc[c] * (double)p.scale;
}

/* dk and dv for a thread's key row. */
template <class T>
__global__ void ref_bwd_kv(SgFlashParams p, int bstride, const double *lse, const double *delta,
                           double *dk, double *dv)
{
	const int j = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y * bstride;
	if (j >= p.S || b >= p.nb0 * p.nb1)
		return;
	double ak[256], av[256];
	for (int c = 0; c < 256; c++)
		ak[c] = av[c] = 0;
	for (int i = 0; i < p.L; i++) {
		if (!visible(p, i, j))
			continue;
		const sgk_i64 row = (sgk_i64)b * p.L + i;
		double s = 0, dp = 0;
		for (int c = 0; c < p.D; c++)
			s += at<T>(p.q, p, p.q_s0, p.q_s1, p.q_sr, b, i, c) *
			     at<T>(p.k, p, p.k_s0, p.k_s1, p.k_sr, b, j, c);
		for (int c = 0; c < p.Dv; c++)
			dp += at<T>(p.dout, p, p.do_s0, p.do_s1, p.do_sr, b, i, c) *
			      at<T>(p.v, p, p.v_s0, p.v_s1, p.v_sr, b, j, c);
		const double pr = exp(s * (double)p.scale - lse[row]), ds = pr * (dp - delta[row]);
		for (int c = 0; c < p.Dv; c++)
			av[c] += pr * at<T>(p.dout, p, p.do_s0, p.do_s1, p.do_sr, b, i, c);
		for (int c = 0; c < p.D; c++)
			ak[c] += ds * at<T>(p.q, p, p.q_s0, p.q_s1, p.q_sr, b, i, c);
	}
	const sgk_i64 row = (sgk_i64)b * p.S + j;
	for (int c = 0; c < p.D; c++)
		dk[row * p.D + c] = ak[c] * (double)p.scale;
	for (int c = 0; c < p.Dv; c++)
		dv[row * p.Dv + c] = av[c];
}

/* ------------------------------------------------------------------ cases */

/* LAY_BTHD_OC: what sgc's folded backward passes: q, k, v, dout, dq, dk,
 * dv in the [B, T, H, D] layout, o (recomputed) contiguous. */
enum { LAY_CONTIG, LAY_BTHD, LAY_KV_BCAST, LAY_MISALIGNED, LAY_BTHD_OC };

struct Case {
	int nb0, nb1, L, S, D, Dv, causal;
	float scale;
	int layout, bstride;
};

/* Elements a strided tensor spans. */
static size_t span(const SgFlashParams &p, sgk_i64 s0, sgk_i64 s1, sgk_i64 sr, int rows, int cols)
{
	return (size_t)((p.nb0 - 1) * s0 + (p.nb1 - 1) * s1 + (rows - 1) * sr + cols);
}

/* Gathers a strided tensor's host mirror into [nb, rows, cols]. */
static std::vector<double> gather(const std::vector<double> &h, const SgFlashParams &p, sgk_i64 s0,
                                  sgk_i64 s1, sgk_i64 sr, int rows, int cols, size_t off)
{
	std::vector<double> r((size_t)p.nb0 * p.nb1 * rows * cols);
	size_t k = 0;
	for (int b0 = 0; b0 < p.nb0; b0++)
		for (int b1 = 0; b1 < p.nb1; b1++)
			for (int i = 0; i < rows; i++)
				for (int c = 0; c < cols; c++)
					r[k++] = h[off + b0 * s0 + b1 * s1 + i * sr + c];
	return r;
}

/* Which [nb, rows, cols] elements the reference computed (its batches). */
static std::vector<unsigned char> used(const SgFlashParams &p, int bstride, int rows, int cols)
{
	const int nb = p.nb0 * p.nb1;
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

/* The forward with other tiles (NW warps of MT m tiles, BN-key tiles)
 * where the tensor-core path applies. */
template <class T, int NW, int MT, int BN>
static cudaError_t fwd_variant(const SgFlashParams *in, cudaStream_t s)
{
	const SgFlashParams p = sgk_fa_prep(in, 0);
	switch (sgk_fa_dp<T>(p)) {
	case 128: return sgk_fa_fwd_tc<T, 128, NW, MT, BN>(p, p.nb0 * p.nb1, s);
	case 64: return sgk_fa_fwd_tc<T, 64, NW, MT, BN>(p, p.nb0 * p.nb1, s);
	}
	return sg_launch_flash_fwd<T>(in, s);
}

/* The backward with BQKV-query tiles in the dK/dV kernel. */
template <class T, int BQKV>
static cudaError_t bwd_variant(const SgFlashParams *in, cudaStream_t s)
{
	const SgFlashParams p = sgk_fa_prep(in, 1);
	const int nb = p.nb0 * p.nb1;
	if (sgk_fa_dp<T>(p) != 128)
		return sg_launch_flash_bwd<T>(in, s);
	sgk_flash_delta<T><<<(unsigned)(((long long)nb * p.L + 7) / 8), 256, 0, s>>>(p);
	return sgk_fa_bwd_tc<T, 128, BQKV>(p, nb, s);
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
	const size_t off = c.layout == LAY_MISALIGNED ? 1 : 0;
	char name[160];
	snprintf(name, sizeof name, "%s nb=%dx%d L=%d S=%d D=%d Dv=%d causal=%d scale=%g lay=%d%s",
	         kt_dt<T>::name(), c.nb0, c.nb1, c.L, c.S, c.D, c.Dv, c.causal, c.scale, c.layout,
	         variant);
	printf("%s\n", name);
	KtBuf<T> q, k, v, o, dO, dq, dk, dv;
	q.alloc(span(p, p.q_s0, p.q_s1, p.q_sr, c.L, c.D) + off);
	k.alloc(span(p, p.k_s0, p.k_s1, p.k_sr, c.S, c.D) + off);
	v.alloc(span(p, p.v_s0, p.v_s1, p.v_sr, c.S, c.Dv) + off);
	o.alloc(span(p, p.o_s0, p.o_s1, p.o_sr, c.L, c.Dv) + off);
	dO.alloc(span(p, p.do_s0, p.do_s1, p.do_sr, c.L, c.Dv) + off);
	dq.alloc(span(p, p.dq_s0, p.dq_s1, p.dq_sr, c.L, c.D) + off);
	dk.alloc(span(p, p.dk_s0, p.dk_s1, p.dk_sr, c.S, c.D) + off);
	dv.alloc(span(p, p.dv_s0, p.dv_s1, p.dv_sr, c.S, c.Dv) + off);
	/* Big cases: uniform with unit variance (quicker to draw). */
	double (*gen)(void) = q.n > (1u << 20) ? unit_unif : kt_normal;
	q.fill(gen);
	k.fill(gen);
	v.fill(gen);
	dO.fill(gen);
	const int nb = c.nb0 * c.nb1;
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
	const size_t nK = (size_t)nb * c.S * c.D, nV = (size_t)nb * c.S * c.Dv;
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
	ref_bwd_kv<T><<<dim3((c.S + 63) / 64, nsel), 64>>>(r, c.bstride, rl, rd, rdk, rdv);
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
	std::vector<double> gdk = gather(dk.h, p, p.dk_s0, p.dk_s1, p.dk_sr, c.S, c.D, off);
	std::vector<double> gdv = gather(dv.h, p, p.dv_s0, p.dv_s1, p.dv_sr, c.S, c.Dv, off);
	std::vector<double> gl(hl.begin(), hl.end());
	report("o", name, kt_err(go.data(), hro.data(), nO, used(p, c.bstride, c.L, c.Dv).data()),
	       tol_fwd<T>());
	KtErr el = kt_err(gl.data(), hrl.data(), gl.size(), used(p, c.bstride, c.L, 1).data());
	printf("  lse max abs err %.2e\n", el.maxabs);
	KT_CHECK(el.nan == 0 && el.maxabs <= 1e-3 * std::max(1.0, el.refmax), "%s lse: max err %.3e",
	         name, el.maxabs);
	report("dq", name, kt_err(gdq.data(), hrdq.data(), nQ, used(p, c.bstride, c.L, c.D).data()),
	       tol_bwd<T>());
	report("dk", name, kt_err(gdk.data(), hrdk.data(), nK, used(p, c.bstride, c.S, c.D).data()),
	       tol_bwd<T>());
	report("dv", name, kt_err(gdv.data(), hrdv.data(), nV, used(p, c.bstride, c.S, c.Dv).data()),
	       tol_bwd<T>());

	if (dump && c.layout == LAY_CONTIG) {
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
 * the eager results bit for bit (the backward has no atomics), twice. */
template <class T>
static void graph_capture(int D)
{
	SgFlashParams p;
	sg_flash_params_init(&p, 2, 3, 200, 200, D, D, 0.f, 1);
	const size_t n = (size_t)6 * 200 * D;
	KtBuf<T> q, k, v, o, dO, dq, dk, dv;
	KtBuf<T> *all[] = {&q, &k, &v, &o, &dO, &dq, &dk, &dv};
	for (KtBuf<T> *t : all)
		t->alloc(n);
	q.fill(kt_normal), k.fill(kt_normal), v.fill(kt_normal), dO.fill(kt_normal);
	float *lse, *delta;
	KT_CUDA(cudaMalloc(&lse, 6 * 200 * 4));
	KT_CUDA(cudaMalloc(&delta, sg_flash_bwd_workspace(&p)));
	p.q = q.d, p.k = k.d, p.v = v.d, p.o = o.d, p.dout = dO.d;
	p.dq = dq.d, p.dk = dk.d, p.dv = dv.d, p.lse = lse, p.delta = delta;
	cudaStream_t st;
	KT_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	KT_CUDA(sg_launch_flash_fwd<T>(&p, st));
	KT_CUDA(sg_launch_flash_bwd<T>(&p, st));
	KT_CUDA(cudaStreamSynchronize(st));
	KtBuf<T> *outs[] = {&o, &dq, &dk, &dv};
	std::vector<std::vector<double>> eager;
	for (KtBuf<T> *t : outs) {
		t->get();
		eager.push_back(t->h);
		t->poison();
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
	for (int rep = 0; rep < 2; rep++) {
		KT_CUDA(cudaGraphLaunch(ge, st));
		KT_CUDA(cudaStreamSynchronize(st));
		for (int i = 0; i < 4; i++) {
			outs[i]->get();
			same &= memcmp(outs[i]->h.data(), eager[i].data(), n * sizeof(double)) == 0;
			outs[i]->poison();
		}
	}
	printf("%s D=%d: graph replay %s the eager results\n", kt_dt<T>::name(), D,
	       same ? "matches" : "DIFFERS FROM");
	KT_CHECK(same, "%s D=%d: graph replay differs from the eager run", kt_dt<T>::name(), D);
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	cudaStreamDestroy(st);
	for (KtBuf<T> *t : all)
		t->release();
	cudaFree(lse);
	cudaFree(delta);
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

/* Times forward and backward at one shape (with the launchers' tiles and
 * the alternatives), after checking sampled batches against the
 * reference. */
template <class T>
static void bench(int B, int H, int Tn, int D, int causal)
{
	Case c = {B, H, Tn, Tn, D, D, causal, 0.f, LAY_CONTIG, 37};
	run_case<T>(c, 0, 0);
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
	double f4 = kt_time([&] { sg_launch_flash_fwd<T>(&p, 0); }, 3, 20);
	double b64 = kt_time([&] { sg_launch_flash_bwd<T>(&p, 0); }, 2, 10);
	KT_CUDA(cudaGetLastError());
	printf("PERF attention %s B=%d H=%d T=%d D=%d causal=%d: fwd %.3f ms %.1f TFLOP/s | bwd %.3f ms "
	       "%.1f TFLOP/s\n",
	       kt_dt<T>::name(), B, H, Tn, D, causal, f4, flop / f4 / 1e9, b64, 2.5 * flop / b64 / 1e9);
	/* The forward's tile variants, and the backward's kernels one by one. */
	struct V {
		const char *name;
		Launch f;
	} fv[] = {
		{"4 warps x 1 m tile, 64 keys", fwd_variant<T, 4, 1, 64>},
		{"4 warps x 2 m tiles, 64 keys", fwd_variant<T, 4, 2, 64>},
		{"4 warps x 2 m tiles, 32 keys", fwd_variant<T, 4, 2, 32>},
		{"8 warps x 1 m tile, 64 keys", fwd_variant<T, 8, 1, 64>},
	};
	for (const V &x : fv) {
		double ms = kt_time([&] { x.f(&p, 0); }, 3, 20);
		printf("PERF   fwd variant %-30s %.3f ms %.1f TFLOP/s\n", x.name, ms, flop / ms / 1e9);
	}
	KT_CUDA(cudaGetLastError());
	const unsigned dblocks = (unsigned)(((long long)nb * Tn + 7) / 8);
	double td = kt_time([&] { sgk_flash_delta<T><<<dblocks, 256>>>(pp); }, 2, 10);
	if (D == 128) {
		typedef SgkFaBwdCfg<128, SGK_FA_BWD_BQKV> K;
		double tkv = kt_time([&] {
			sgk_fa_launch(sgk_flash_bwd_kv_tc<T, 128, SGK_FA_BWD_BQKV>, (Tn + K::BK - 1) / K::BK, nb,
			              128, K::SMEM_KV, pp, 0);
		}, 2, 10);
		double tq = kt_time([&] {
			sgk_fa_launch(sgk_flash_bwd_q_tc<T, 128>, (Tn + K::BQ - 1) / K::BQ, nb, 128, K::SMEM_Q, pp, 0);
		}, 2, 10);
		double b32 = kt_time([&] { bwd_variant<T, 32>(&p, 0); }, 2, 10);
		printf("PERF   bwd kernels: delta %.3f ms, dK/dV %.3f ms (%.1f TFLOP/s of its 4 products), dQ "
		       "%.3f ms (%.1f TFLOP/s of its 3); bwd with 32-query dK/dV tiles %.3f ms\n",
		       td, tkv, 2 * flop / tkv / 1e9, tq, 1.5 * flop / tq / 1e9, b32);
	}
	KT_CUDA(cudaGetLastError());
	for (KtBuf<T> *t : all)
		t->release();
	cudaFree(lse);
	cudaFree(delta);
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
	graph_capture<__nv_bfloat16>(128);
	graph_capture<float>(64);
	/* Every forward tile variant and the other backward tile, on cases
	 * that end mid-tile, causal and not, L != S. */
	const int vc[] = {2, 3, 4, 5, 9};
	for (int i : vc) {
		run_case<__nv_bfloat16>(tc[i], 0, 0, fwd_variant<__nv_bfloat16, 4, 2, 64>,
		                        bwd_variant<__nv_bfloat16, 32>, " [fwd 4x2x64, bwd 32]");
		run_case<__half>(tc[i], 0, 0, fwd_variant<__half, 4, 2, 32>, sg_launch_flash_bwd<__half>,
		                 " [fwd 4x2x32]");
		run_case<__nv_bfloat16>(tc[i], 0, 0, fwd_variant<__nv_bfloat16, 8, 1, 64>,
		                        sg_launch_flash_bwd<__nv_bfloat16>, " [fwd 8x1x64]");
	}
	if (!quick) {
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
