/*
 * test_conv_layout.cu - the channels-last paths (cl = 1) of the conv
 * library (runtime/sgk/sgk_conv.cuh) against its NCHW ones (cl = 0), the
 * inputs and outputs transposed on the host:
 *
 *   direct conv2d forward, data and weight gradients (stride 2, padding,
 *   dilation, groups 2, 1 x 1): equal bit for bit (the same sums in the
 *   same order), and the NCHW ones near a reference in double;
 *   the pools (max 3 x 3 stride 2 padding 1 forward and backward through
 *   the argmax bytes, with ties and NaNs; 2 x 2 and 3 x 3 unpadded and
 *   4 x 4, stride 2, odd sizes, one row; max with a 16 x 16 window, which
 *   finds the argmax again; avg; adaptive avg to 1 x 1 and 3 x 3): equal
 *   bit for bit, vectorised channels and not (odd c, misaligned
 *   pointers, misaligned argmax scratch);
 *   batch norm forward (training: y, the batch mean and unbiased variance
 *   into mean_out and var_out; eval) and backward (dx, dw, db): near a
 *   reference in double, and cl 1 near cl 0 (training: the sums' order
 *   differs, so within the tolerances below; eval: y and dx equal bit for
 *   bit, the per-channel scale and shift being the same);
 *   sg_launch_maxpool2d_bwd_relu (the backward through a relu): equal
 *   to where(x <= 0, 0, the plain backward) bit for bit, either layout,
 *   with zeros, negatives and NaNs in x;
 *   sg_launch_batch_norm_fwd_relu (the epilogue, with and without a
 *   residual): equal to the plain forward's y then add and relu; with
 *   SgBnRunning (2-byte T): the running statistics equal to mul, mul,
 *   add of the batch statistics it wrote, rounded as the ops round;
 *   sg_launch_batch_norm_bwd with SgBnSgd (2-byte T, dw and db not
 *   stored): dx equal to the plain backward's, w and b equal to the
 *   sgd_update_ kernel's arithmetic on its gradients;
 *   sg_launch_to_layout both ways: equal to the host's transpose, and the
 *   round trip to the input, at odd sizes, few channels or positions
 *   (one: a copy) and n > 65535.
 *
 * Tolerances (relative error norms, ||out - ref|| / ||ref||): f32 2e-5
 * (4e-5 for the gradients), bf16 1e-2 (2e-2), f64 1e-12; the batch mean
 * and variance element by element within 2e-5 (f32) or 2^-8 (bf16)
 * relative of the reference.  cl 1 against cl 0 in training: the same
 * tolerances (each is also checked against the reference).
 *
 * Then (not with --quick or --sanitize) timings, the median of 20 runs
 * after 3, at resnet18's shapes in bf16 (B = 128), cl 0 next to cl 1:
 * batch norm forward (training) and backward, max_pool2d 3 x 3 s2 p1
 * forward and backward, and the layout conversion both ways.  Printed as
 * PERF lines, not checked.
 *
 *   test_conv_layout [--quick] [--sanitize] [--reps N]   (N timed runs, 20)
 */
#include "ktest.h"
#include "sgk_conv.cuh"

template <class T> static double tol()
{
	return sizeof(T) == 8 ? 1e-12 : sizeof(T) == 4 ? 2e-5 : 1e-2;
}

/* ------------------------------------------------------------------ host arrays */

template <class T>
static std::vector<T> rnd_normal(size_t n, double scale, double shift)
{
	std::vector<T> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = kt_dt<T>::from(kt_normal() * scale + shift);
	return v;
}

/* Small integers in [0, k): many ties in a window. */
template <class T>
static std::vector<T> rnd_int(size_t n, int k)
{
	std::vector<T> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = kt_dt<T>::from(floor(kt_unif(0, k)));
	return v;
}

template <class T>
static std::vector<double> to_double(const std::vector<T> &a)
{
	std::vector<double> d(a.size());
	for (size_t i = 0; i < a.size(); i++)
		d[i] = kt_dt<T>::to(a[i]);
	return d;
}

/* [a0, C, H, W] -> [a0, H, W, C] (to_cl 1), or back (to_cl 0). */
template <class T>
static std::vector<T> perm(const std::vector<T> &a, long long a0, long long C, long long H,
                           long long W, int to_cl)
{
	std::vector<T> b(a.size());
	for (long long i = 0; i < a0; i++)
		for (long long c = 0; c < C; c++)
			for (long long h = 0; h < H; h++)
				for (long long w = 0; w < W; w++) {
					const size_t nc = ((i * C + c) * H + h) * W + w;
					const size_t cl = ((i * H + h) * W + w) * C + c;
					if (to_cl)
						b[cl] = a[nc];
					else
						b[nc] = a[cl];
				}
	return b;
}

/* ------------------------------------------------------------------ device arrays */

static std::vector<void *> kt_allocs;

/* n T on the device, `off` elements past an aligned allocation. */
template <class T>
static T *dev(size_t n, int off = 0)
{
	void *p;
	KT_CUDA(cudaMalloc(&p, (n + off + 1) * sizeof(T)));
	KT_CUDA(cudaMemset(p, 0xff, (n + off + 1) * sizeof(T)));   /* NaN: unwritten shows */
	kt_allocs.push_back(p);
	return (T *)p + off;
}

template <class T>
static T *dev_up(const std::vector<T> &h, int off = 0)
{
	T *d = dev<T>(h.size(), off);
	KT_CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
	return d;
}

template <class T>
static std::vector<T> down(const T *d, size_t n)
{
	KT_CUDA(cudaDeviceSynchronize());
	std::vector<T> h(n);
	KT_CUDA(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
	return h;
}

static void dev_free_all()
{
	for (void *p : kt_allocs)
		cudaFree(p);
	kt_allocs.clear();
}

/* ------------------------------------------------------------------ checks */

static void launched(cudaError_t e, const char *what)
{
	KT_CHECK(e == cudaSuccess, "%s: launch: %s", what, cudaGetErrorString(e));
}

/* got and want equal bit for bit. */
template <class T>
static void check_same(const char *what, const std::vector<T> &got, const std::vector<T> &want)
{
	if (got.size() != want.size()) {
		KT_CHECK(false, "%s %s: %zu values, not %zu", kt_dt<T>::name(), what, got.size(),
		         want.size());
		return;
	}
	size_t at = 0;
	while (at < got.size() && memcmp(&got[at], &want[at], sizeof(T)) == 0)
		at++;
	const bool ok = at == got.size();
	KT_CHECK(ok, "%s %s: cl 1 differs from cl 0 at %zu of %zu: %.9g vs %.9g", kt_dt<T>::name(),
	         what, at, want.size(), at < got.size() ? kt_dt<T>::to(got[at]) : 0.0,
	         at < want.size() ? kt_dt<T>::to(want[at]) : 0.0);
}

/* got near ref: relative error norm at most t. */
template <class T>
static void check_close(const char *what, const std::vector<T> &got,
                        const std::vector<double> &ref, double t)
{
	const std::vector<double> g = to_double(got);
	const KtErr e = kt_err(g.data(), ref.data(), g.size());
	KT_CHECK(e.nan == 0 && e.rel <= t,
	         "%s %s: rel error %.3e > %.1e (NaN %zu, worst at %zu: %.9g vs %.9g)",
	         kt_dt<T>::name(), what, e.rel, t, e.nan, e.at, g[e.at], ref[e.at]);
}

/* ------------------------------------------------------------------ conv2d */

static SgConvGeom conv_geom(long long n, long long c, long long h, long long w, long long k,
                            long long r, long long s, long long st, long long pd, long long dl,
                            long long groups)
{
	SgConvGeom g;
	memset(&g, 0, sizeof g);
	g.n = n;
	g.c = c;
	g.h = h;
	g.w = w;
	g.k = k;
	g.r = r;
	g.s = s;
	g.sh = g.sw = st;
	g.ph = g.pw = pd;
	g.dh = g.dw = dl;
	g.groups = groups;
	g.oh = (h + 2 * pd - dl * (r - 1) - 1) / st + 1;
	g.ow = (w + 2 * pd - dl * (s - 1) - 1) / st + 1;
	return g;
}

/* The reference in double: y, dx, dw of NCHW arrays. */
static void ref_conv(const SgConvGeom &g, const std::vector<double> &x,
                     const std::vector<double> &w, const std::vector<double> &b,
                     const std::vector<double> &dy, std::vector<double> &y,
                     std::vector<double> &dx, std::vector<double> &dw)
{
	const long long cg = g.c / g.groups, kg = g.k / g.groups;
	y.assign(g.n * g.k * g.oh * g.ow, 0);
	dx.assign(g.n * g.c * g.h * g.w, 0);
	dw.assign(g.k * cg * g.r * g.s, 0);
	for (long long n = 0; n < g.n; n++)
		for (long long k = 0; k < g.k; k++)
			for (long long oh = 0; oh < g.oh; oh++)
				for (long long ow = 0; ow < g.ow; ow++) {
					const size_t yi = ((n * g.k + k) * g.oh + oh) * g.ow + ow;
					double acc = b.empty() ? 0 : b[k];
					for (long long c = 0; c < cg; c++)
						for (long long r = 0; r < g.r; r++)
							for (long long s = 0; s < g.s; s++) {
								const long long ih = oh * g.sh - g.ph + r * g.dh;
								const long long iw = ow * g.sw - g.pw + s * g.dw;
								if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w)
									continue;
								const long long xc = k / kg * cg + c;
								const size_t xi = ((n * g.c + xc) * g.h + ih) * g.w + iw;
								const size_t wi = ((k * cg + c) * g.r + r) * g.s + s;
								acc += x[xi] * w[wi];
								dx[xi] += dy[yi] * w[wi];
								dw[wi] += dy[yi] * x[xi];
							}
					y[yi] = acc;
				}
}

template <class T>
static void run_conv(long long n, long long c, long long h, long long w, long long k,
                     long long r, long long s, long long st, long long pd, long long dl,
                     long long groups)
{
	char what[160];
	snprintf(what, sizeof what, "conv2d n%lld c%lld %lldx%lld k%lld %lldx%lld s%lld p%lld d%lld g%lld",
	         n, c, h, w, k, r, s, st, pd, dl, groups);
	const SgConvGeom g0 = conv_geom(n, c, h, w, k, r, s, st, pd, dl, groups);
	SgConvGeom g1 = g0;
	g1.cl = 1;
	const long long cg = c / groups;
	const size_t nx = n * c * h * w, ny = n * k * g0.oh * g0.ow, nw = k * cg * r * s;
	const std::vector<T> x = rnd_normal<T>(nx, 1, 0), wt = rnd_normal<T>(nw, 0.3, 0);
	const std::vector<T> b = rnd_normal<T>(k, 1, 0), dy = rnd_normal<T>(ny, 1, 0);
	T *db = dev_up(b);

	/* NCHW */
	T *dx0 = dev_up(x), *dw0 = dev_up(wt), *ddy0 = dev_up(dy);
	T *y0 = dev<T>(ny), *gx0 = dev<T>(nx), *gw0 = dev<T>(nw);
	launched(sg_launch_conv2d_fwd<T>(dx0, dw0, db, y0, g0, 0), what);
	launched(sg_launch_conv2d_bwd_input<T>(ddy0, dw0, gx0, g0, 0), what);
	launched(sg_launch_conv2d_bwd_weight<T>(ddy0, dx0, gw0, g0, 0), what);
	const std::vector<T> hy0 = down(y0, ny), hgx0 = down(gx0, nx), hgw0 = down(gw0, nw);

	/* channels last */
	T *dx1 = dev_up(perm(x, n, c, h, w, 1)), *dw1 = dev_up(perm(wt, k, cg, r, s, 1));
	T *ddy1 = dev_up(perm(dy, n, k, g0.oh, g0.ow, 1));
	T *y1 = dev<T>(ny), *gx1 = dev<T>(nx), *gw1 = dev<T>(nw);
	launched(sg_launch_conv2d_fwd<T>(dx1, dw1, db, y1, g1, 0), what);
	launched(sg_launch_conv2d_bwd_input<T>(ddy1, dw1, gx1, g1, 0), what);
	launched(sg_launch_conv2d_bwd_weight<T>(ddy1, dx1, gw1, g1, 0), what);
	char w2[200];
	snprintf(w2, sizeof w2, "%s fwd", what);
	check_same(w2, perm(down(y1, ny), n, k, g0.oh, g0.ow, 0), hy0);
	snprintf(w2, sizeof w2, "%s bwd_input", what);
	check_same(w2, perm(down(gx1, nx), n, c, h, w, 0), hgx0);
	snprintf(w2, sizeof w2, "%s bwd_weight", what);
	check_same(w2, perm(down(gw1, nw), k, cg, r, s, 0), hgw0);

	/* NCHW near the reference */
	std::vector<double> ry, rgx, rgw;
	ref_conv(g0, to_double(x), to_double(wt), to_double(b), to_double(dy), ry, rgx, rgw);
	snprintf(w2, sizeof w2, "%s fwd (cl 0, reference)", what);
	check_close(w2, hy0, ry, tol<T>());
	snprintf(w2, sizeof w2, "%s bwd_input (cl 0, reference)", what);
	check_close(w2, hgx0, rgx, 2 * tol<T>());
	snprintf(w2, sizeof w2, "%s bwd_weight (cl 0, reference)", what);
	check_close(w2, hgw0, rgw, 2 * tol<T>());
	dev_free_all();
}

/* ------------------------------------------------------------------ pools */

/* The reference pools in double over NCHW, as sgk_conv.cuh defines them
 * (max: the window's first maximum, the last NaN when there is one). */
static void ref_pool(const SgConvGeom &g, int mode, const std::vector<double> &x,
                     const std::vector<double> &dy, std::vector<double> &y,
                     std::vector<double> &dx)
{
	y.assign(g.n * g.c * g.oh * g.ow, 0);
	dx.assign(g.n * g.c * g.h * g.w, 0);
	for (long long pl = 0; pl < g.n * g.c; pl++)
		for (long long oh = 0; oh < g.oh; oh++)
			for (long long ow = 0; ow < g.ow; ow++) {
				long long h0, h1, w0, w1, cnt;
				if (mode == 2) {
					h0 = oh * g.h / g.oh;
					h1 = ((oh + 1) * g.h + g.oh - 1) / g.oh;
					w0 = ow * g.w / g.ow;
					w1 = ((ow + 1) * g.w + g.ow - 1) / g.ow;
					cnt = (h1 - h0) * (w1 - w0);
				} else {
					const long long hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
					h0 = std::max(hs, 0LL);
					w0 = std::max(ws, 0LL);
					h1 = std::min(hs + g.r, g.h);
					w1 = std::min(ws + g.s, g.w);
					cnt = g.r * g.s;
				}
				const size_t yi = (pl * g.oh + oh) * g.ow + ow;
				const size_t base = pl * g.h * g.w;
				if (mode == 0) {
					long long best = -1;
					double m = -INFINITY;
					for (long long h = h0; h < h1; h++)
						for (long long w = w0; w < w1; w++) {
							const double v = x[base + h * g.w + w];
							if (best < 0 || v > m || v != v) {
								m = v;
								best = h * g.w + w;
							}
						}
					y[yi] = best < 0 ? -INFINITY : x[base + best];
					if (best >= 0)
						dx[base + best] += dy[yi];
					continue;
				}
				double acc = 0;
				for (long long h = h0; h < h1; h++)
					for (long long w = w0; w < w1; w++) {
						acc += x[base + h * g.w + w];
						dx[base + h * g.w + w] += dy[yi] / cnt;
					}
				y[yi] = acc / cnt;
			}
}

/* mode 0 max, 1 avg (kernel r, stride st, padding pd), 2 adaptive avg to
 * oh x ow; off: elements x, y, dy, dx are past alignment; aoff: bytes the
 * argmax scratch is; nans: NaN in about one x in 37. */
template <class T>
static void run_pool(long long n, long long c, long long h, long long w, int mode, long long r,
                     long long st, long long pd, long long oh, long long ow, int off, int aoff,
                     bool nans)
{
	char what[160];
	snprintf(what, sizeof what, "%s n%lld c%lld %lldx%lld r%lld s%lld p%lld -> %lldx%lld off%d/%d%s",
	         mode == 0 ? "max_pool2d" : mode == 1 ? "avg_pool2d" : "adaptive_avg_pool2d", n, c, h,
	         w, r, st, pd, oh, ow, off, aoff, nans ? " NaN" : "");
	SgConvGeom g0;
	if (mode == 2) {
		g0 = conv_geom(n, c, h, w, c, 1, 1, 1, 0, 1, c);
		g0.oh = oh;
		g0.ow = ow;
	} else {
		g0 = conv_geom(n, c, h, w, c, r, r, st, pd, 1, c);
	}
	SgConvGeom g1 = g0;
	g1.cl = 1;
	const size_t nx = n * c * h * w, ny = n * c * g0.oh * g0.ow;
	std::vector<T> x = mode == 0 ? rnd_int<T>(nx, 5) : rnd_normal<T>(nx, 1, 0);
	if (nans)
		for (size_t i = 0; i < nx; i += 37)
			x[i] = kt_dt<T>::from(NAN);
	const std::vector<T> dy = rnd_normal<T>(ny, 1, 0);
	const size_t ws = sg_pool2d_bwd_workspace(g0, mode);
	KT_CHECK(ws == sg_pool2d_bwd_workspace(g1, mode), "%s: workspace differs by layout", what);
	unsigned char *work = ws ? dev<unsigned char>(ws, aoff) : NULL;

	T *x0 = dev_up(x, off), *dy0 = dev_up(dy, off), *y0 = dev<T>(ny, off), *dx0 = dev<T>(nx, off);
	launched(sg_launch_pool2d_fwd<T>(x0, y0, g0, mode, 0), what);
	launched(sg_launch_pool2d_bwd<T>(dy0, x0, dx0, g0, mode, work, 0), what);
	const std::vector<T> hy0 = down(y0, ny), hdx0 = down(dx0, nx);

	T *x1 = dev_up(perm(x, n, c, h, w, 1), off), *dy1 = dev_up(perm(dy, n, c, g0.oh, g0.ow, 1), off);
	T *y1 = dev<T>(ny, off), *dx1 = dev<T>(nx, off);
	if (work)
		KT_CUDA(cudaMemset(work, 0x5a, ws));
	launched(sg_launch_pool2d_fwd<T>(x1, y1, g1, mode, 0), what);
	launched(sg_launch_pool2d_bwd<T>(dy1, x1, dx1, g1, mode, work, 0), what);
	char w2[200];
	snprintf(w2, sizeof w2, "%s fwd", what);
	check_same(w2, perm(down(y1, ny), n, c, g0.oh, g0.ow, 0), hy0);
	snprintf(w2, sizeof w2, "%s bwd", what);
	check_same(w2, perm(down(dx1, nx), n, c, h, w, 0), hdx0);

	std::vector<double> ry, rdx;
	ref_pool(g0, mode, to_double(x), to_double(dy), ry, rdx);
	snprintf(w2, sizeof w2, "%s fwd (cl 0, reference)", what);
	check_close(w2, hy0, ry, tol<T>());
	snprintf(w2, sizeof w2, "%s bwd (cl 0, reference)", what);
	check_close(w2, hdx0, rdx, tol<T>());
	dev_free_all();
}

/* max_pool2d's backward through a relu (sg_launch_maxpool2d_bwd_relu)
 * with kernel r, stride st, padding pd: x from relu-like values (zeros,
 * and negatives where neg, NaN where nans), both layouts equal bit for
 * bit, and equal to where(x <= 0, 0, the plain backward) of each. */
template <class T>
static void run_pool_relu(long long n, long long c, long long h, long long w, long long r,
                          long long st, long long pd, bool neg, bool nans)
{
	char what[160];
	snprintf(what, sizeof what, "max_pool2d relu n%lld c%lld %lldx%lld r%lld s%lld p%lld%s%s", n,
	         c, h, w, r, st, pd, neg ? " neg" : "", nans ? " NaN" : "");
	SgConvGeom g0 = conv_geom(n, c, h, w, c, r, r, st, pd, 1, c), g1 = g0;
	g1.cl = 1;
	const size_t nx = n * c * h * w, ny = n * c * g0.oh * g0.ow;
	std::vector<T> x = rnd_int<T>(nx, 4);
	for (size_t i = 0; i < nx; i++)
		if (neg && i % 3 == 0)
			x[i] = kt_dt<T>::from(-1.0 - (double)(i % 5));
		else if (nans && i % 41 == 0)
			x[i] = kt_dt<T>::from(NAN);
	const std::vector<T> dy = rnd_normal<T>(ny, 1, 0);
	const size_t ws = sg_pool2d_bwd_workspace(g0, 0);
	unsigned char *work = ws ? dev<unsigned char>(ws) : NULL;
	std::vector<T> got[2], plain[2];
	for (int cl = 0; cl < 2; cl++) {
		const SgConvGeom &g = cl ? g1 : g0;
		T *xd = dev_up(cl ? perm(x, n, c, h, w, 1) : x);
		T *dyd = dev_up(cl ? perm(dy, n, c, g0.oh, g0.ow, 1) : dy);
		T *dxr = dev<T>(nx), *dxp = dev<T>(nx);
		launched(sg_launch_maxpool2d_bwd_relu<T>(dyd, xd, dxr, g, work, 0), what);
		launched(sg_launch_pool2d_bwd<T>(dyd, xd, dxp, g, 0, work, 0), what);
		got[cl] = down(dxr, nx);
		plain[cl] = down(dxp, nx);
		if (cl) {
			got[cl] = perm(got[cl], n, c, h, w, 0);
			plain[cl] = perm(plain[cl], n, c, h, w, 0);
		}
	}
	char w2[200];
	snprintf(w2, sizeof w2, "%s (cl 1 against cl 0)", what);
	check_same(w2, got[1], got[0]);
	std::vector<T> want = plain[0];
	for (size_t i = 0; i < nx; i++)
		if (kt_dt<T>::to(x[i]) <= 0)
			want[i] = kt_dt<T>::from(0.0);
	snprintf(w2, sizeof w2, "%s (where(x <= 0, 0, plain backward))", what);
	check_same(w2, got[0], want);
	dev_free_all();
}

/* ------------------------------------------------------------------ batch norm */

/* The reference over NCHW x [n, c, inner] in double: y, each channel's
 * mean and unbiased variance (training) and dx, dw, db.  rm, rv: the
 * running statistics used in eval. */
static void ref_bn(long long n, long long c, long long inner, const std::vector<double> &x,
                   const std::vector<double> &w, const std::vector<double> &b,
                   const std::vector<double> &rm, const std::vector<double> &rv,
                   const std::vector<double> &dy, double eps, bool training,
                   std::vector<double> &y, std::vector<double> &mean, std::vector<double> &uvar,
                   std::vector<double> &dx, std::vector<double> &dw, std::vector<double> &db)
{
	const long long m = n * inner;
	y.assign(x.size(), 0);
	dx.assign(x.size(), 0);
	mean.assign(c, 0);
	uvar.assign(c, 0);
	dw.assign(c, 0);
	db.assign(c, 0);
	for (long long ch = 0; ch < c; ch++) {
		double s = 0, q = 0;
		for (long long i = 0; i < n; i++)
			for (long long j = 0; j < inner; j++)
				s += x[(i * c + ch) * inner + j];
		const double mu = s / m;
		for (long long i = 0; i < n; i++)
			for (long long j = 0; j < inner; j++) {
				const double d = x[(i * c + ch) * inner + j] - mu;
				q += d * d;
			}
		mean[ch] = mu;
		uvar[ch] = q / (m - 1);   /* m = 1: 0 / 0, NaN */
		const double um = training ? mu : rm[ch], var = training ? q / m : rv[ch];
		const double rstd = 1 / sqrt(var + eps), wc = w[ch];
		double sg = 0, sgx = 0;
		for (long long i = 0; i < n; i++)
			for (long long j = 0; j < inner; j++) {
				const size_t e = (i * c + ch) * inner + j;
				const double xh = (x[e] - um) * rstd;
				y[e] = xh * wc + b[ch];
				sg += dy[e];
				sgx += dy[e] * xh;
			}
		db[ch] = sg;
		dw[ch] = sgx;
		for (long long i = 0; i < n; i++)
			for (long long j = 0; j < inner; j++) {
				const size_t e = (i * c + ch) * inner + j;
				const double xh = (x[e] - um) * rstd;
				dx[e] = training ? wc * rstd * (dy[e] - sg / m - xh * sgx / m) : wc * rstd * dy[e];
			}
	}
}

/* Element by element: |got - ref| <= t * (|ref| + scale) (scale: a
 * channel's standard deviation, where not NaN), NaN where ref is. */
template <class T>
static void check_rel(const char *what, const std::vector<T> &got, const std::vector<double> &ref,
                      double t, const std::vector<double> *scale)
{
	for (size_t i = 0; i < got.size(); i++) {
		const double g = kt_dt<T>::to(got[i]), r = ref[i];
		const double sc = scale && (*scale)[i] == (*scale)[i] ? (*scale)[i] : 0;
		const bool ok = r != r ? g != g : fabs(g - r) <= t * (fabs(r) + sc) + 1e-30;
		if (!ok) {
			KT_CHECK(false, "%s %s: at %zu %.9g, reference %.9g (rel tol %.1e)", kt_dt<T>::name(),
			         what, i, g, r, t);
			return;
		}
	}
	KT_CHECK(true, "%s", what);
}

/* The forward with its epilogue (sg_launch_batch_norm_fwd_relu), in the
 * layout cl: equal to the plain forward's y (hy) then add and relu as the
 * generated kernels compute them (in A, rounding the sum to T): relu(y +
 * r) for a random residual r, and relu(y). */
template <class T>
static void bn_epilogue(const char *what, int cl, const std::vector<T> &hy, const T *x,
                        const float *rm, const float *rv, const T *w, const T *b,
                        typename sgk_acc<T>::type *work, long long n, long long c,
                        long long inner, int off, bool training)
{
	typedef typename sgk_acc<T>::type A;
	const size_t nx = n * c * inner;
	const std::vector<T> r = rnd_normal<T>(nx, 1, 0);
	const T *dr = dev_up(r, off);
	T *y2 = dev<T>(nx, off), *y3 = dev<T>(nx, off), *mo = dev<T>(c), *vo = dev<T>(c);
	launched(sg_launch_batch_norm_fwd_relu<T, float>(x, rm, rv, w, b, dr, y2, mo, vo, work, n, c,
	                                                 inner, cl, 1e-5f, training, 0), what);
	launched(sg_launch_batch_norm_fwd_relu<T, float>(x, rm, rv, w, b, (const T *)NULL, y3, mo,
	                                                 vo, work, n, c, inner, cl, 1e-5f, training,
	                                                 0), what);
	std::vector<T> want2(nx), want3(nx);
	for (size_t i = 0; i < nx; i++) {
		const A s = (A)kt_dt<T>::to(hy[i]) + (A)kt_dt<T>::to(r[i]), u = (A)kt_dt<T>::to(hy[i]);
		want2[i] = kt_dt<T>::from(s < (A)0 ? (A)0 : s);
		want3[i] = kt_dt<T>::from(u < (A)0 ? (A)0 : u);
	}
	char w2[200];
	snprintf(w2, sizeof w2, "%s relu(y + res) epilogue (cl %d)", what, cl);
	check_same(w2, down(y2, nx), want2);
	snprintf(w2, sizeof w2, "%s relu(y) epilogue (cl %d)", what, cl);
	check_same(w2, down(y3, nx), want3);
}

/* The running statistics' update folded into the training forward
 * (SgBnRunning, 2-byte T: the running statistics in T): equal to
 * add(mul(stat, take), mul(old, keep)) over the batch statistics the same
 * call wrote, each op rounded to T as the generated kernel rounds it. */
template <class T>
static void bn_running(const char *what, int cl, const T *x, const T *w, const T *b,
                       typename sgk_acc<T>::type *work, long long n, long long c,
                       long long inner, int off)
{
	const size_t nx = n * c * inner;
	const std::vector<T> rm0 = rnd_normal<T>(c, 1, 0), rv0 = rnd_normal<T>(c, 1, 1);
	T *drm = dev_up(rm0), *drv = dev_up(rv0);
	T *y = dev<T>(nx, off), *mo = dev<T>(c), *vo = dev<T>(c);
	const SgBnRunning<T> run = {drm, drv, 0.1f, 0.9f, 0.25f, 0.75f};
	launched(sg_launch_batch_norm_fwd_relu<T, T>(x, drm, drv, w, b, (const T *)NULL, y, mo, vo,
	                                             work, n, c, inner, cl, 1e-5f, 1, 0, run), what);
	const std::vector<T> hm = down(mo, c), hv = down(vo, c);
	/* T(x * k) as a float; then the float sum rounded to T */
	auto mul = [](T x, float k) {
		return (float)kt_dt<T>::to(kt_dt<T>::from((float)kt_dt<T>::to(x) * k));
	};
	std::vector<T> wm(c), wv(c);
	for (long long i = 0; i < c; i++) {
		wm[i] = kt_dt<T>::from(mul(hm[i], 0.1f) + mul(rm0[i], 0.9f));
		wv[i] = kt_dt<T>::from(mul(hv[i], 0.25f) + mul(rv0[i], 0.75f));
	}
	char w2[200];
	snprintf(w2, sizeof w2, "%s running mean update (cl %d)", what, cl);
	check_same(w2, down(drm, c), wm);
	snprintf(w2, sizeof w2, "%s running var update (cl %d)", what, cl);
	check_same(w2, down(drv, c), wv);
}

/* The generated sgd_update_ kernel's arithmetic (codegen's sgd_update_one:
 * p + (-lr) * g in float, rounded to T). */
template <class T>
__global__ void kt_sgd_k(T *p, const T *g, float neg_lr, long long n)
{
	const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = sgk_cvt<T>(sgk_tof(p[i]) + neg_lr * sgk_tof(g[i]));
}

/* The SGD updates folded into the backward (SgBnSgd, 2-byte T), dw and db
 * not stored: dx the same as the plain backward's gx, and w, b as the
 * sgd_update_ kernel leaves them after that backward (its gw, gb); w is
 * also the backward's operand, read before its update. */
template <class T>
static void bn_sgd(const char *what, int cl, const T *dy, const T *x, const float *rm,
                   const float *rv, const std::vector<T> &w, const std::vector<T> &b,
                   const T *gx, const T *gw, const T *gb, typename sgk_acc<T>::type *work,
                   long long n, long long c, long long inner, int off, bool training)
{
	const size_t nx = n * c * inner;
	T *w1 = dev_up(w), *b1 = dev_up(b), *w2 = dev_up(w), *b2 = dev_up(b);
	T *gx2 = dev<T>(nx, off);
	const float nl = -0.0625f, nlb = -0.01f;
	kt_sgd_k<T><<<(unsigned)((c + 255) / 256), 256>>>(w1, gw, nl, c);
	kt_sgd_k<T><<<(unsigned)((c + 255) / 256), 256>>>(b1, gb, nlb, c);
	launched(sg_launch_batch_norm_bwd<T, float>(dy, x, rm, rv, w2, gx2, (T *)NULL, (T *)NULL, work,
	                                            n, c, inner, cl, 1e-5f, training, 0,
	                                            SgBnSgd<T>{w2, b2, nl, nlb}), what);
	char w3[200];
	snprintf(w3, sizeof w3, "%s dx with the SGD updates folded in (cl %d)", what, cl);
	check_same(w3, down(gx2, nx), down(gx, nx));
	snprintf(w3, sizeof w3, "%s SGD update of w folded in (cl %d)", what, cl);
	check_same(w3, down(w2, c), down(w1, c));
	snprintf(w3, sizeof w3, "%s SGD update of b folded in (cl %d)", what, cl);
	check_same(w3, down(b2, c), down(b1, c));
}

template <class T>
static void run_bn(long long n, long long c, long long inner, int off, bool training)
{
	typedef typename sgk_acc<T>::type A;
	char what[160];
	snprintf(what, sizeof what, "batch_norm n%lld c%lld inner%lld off%d %s", n, c, inner, off,
	         training ? "train" : "eval");
	const size_t nx = n * c * inner;
	const double eps = 1e-5;
	const std::vector<T> x = rnd_normal<T>(nx, 2, 0.5), dy = rnd_normal<T>(nx, 1, 0);
	const std::vector<T> w = rnd_normal<T>(c, 1, 0), b = rnd_normal<T>(c, 1, 0);
	std::vector<float> rm(c), rv(c);
	for (long long i = 0; i < c; i++) {
		rm[i] = (float)(kt_normal() * 0.3);
		rv[i] = (float)kt_unif(0.5, 3);
	}
	const float *drm = dev_up(rm), *drv = dev_up(rv);
	const T *dw_ = dev_up(w), *db_ = dev_up(b);
	std::vector<T> hy[2], hmean[2], hvar[2], hdx[2], hdw[2], hdb[2];
	for (int cl = 0; cl < 2; cl++) {
		const T *dx_ = dev_up(cl ? perm(x, n, c, inner, 1, 1) : x, off);
		const T *ddy = dev_up(cl ? perm(dy, n, c, inner, 1, 1) : dy, off);
		T *y = dev<T>(nx, off), *gx = dev<T>(nx, off), *mo = dev<T>(c), *vo = dev<T>(c);
		T *gw = dev<T>(c), *gb = dev<T>(c);
		A *work = (A *)dev<char>(sg_batch_norm_workspace<T>(n, c, inner, cl));
		launched(sg_launch_batch_norm_fwd<T, float>(dx_, drm, drv, dw_, db_, y, mo, vo, work, n, c,
		                                            inner, cl, (float)eps, training, 0), what);
		hy[cl] = down(y, nx);
		bn_epilogue<T>(what, cl, hy[cl], dx_, drm, drv, dw_, db_, work, n, c, inner, off,
		               training);
		if (training && sizeof(T) == 2)
			bn_running<T>(what, cl, dx_, dw_, db_, work, n, c, inner, off);
		if (cl)
			hy[cl] = perm(hy[cl], n, c, inner, 1, 0);
		hmean[cl] = down(mo, c);
		hvar[cl] = down(vo, c);
		launched(sg_launch_batch_norm_bwd<T, float>(ddy, dx_, drm, drv, dw_, gx, gw, gb, work, n, c,
		                                            inner, cl, (float)eps, training, 0), what);
		if (sizeof(T) == 2)
			bn_sgd<T>(what, cl, ddy, dx_, drm, drv, w, b, gx, gw, gb, work, n, c, inner, off,
			          training);
		hdx[cl] = down(gx, nx);
		if (cl)
			hdx[cl] = perm(hdx[cl], n, c, inner, 1, 0);
		hdw[cl] = down(gw, c);
		hdb[cl] = down(gb, c);
	}
	std::vector<double> ry, rmean, ruvar, rdx, rdw, rdb;
	std::vector<double> rmd(rm.begin(), rm.end()), rvd(rv.begin(), rv.end());
	ref_bn(n, c, inner, to_double(x), to_double(w), to_double(b), rmd, rvd, to_double(dy), eps,
	       training, ry, rmean, ruvar, rdx, rdw, rdb);
	/* rounded to T once: within half an ulp of T, plus f32's error */
	const double st = sizeof(T) == 8 ? 1e-12 : sizeof(T) == 4 ? 2e-5 : 1.0 / 256;
	std::vector<double> sd(c);
	for (long long i = 0; i < c; i++)
		sd[i] = sqrt(ruvar[i]);
	char w2[200];
	for (int cl = 0; cl < 2; cl++) {
		const char *cn = cl ? "cl 1" : "cl 0";
		if (training) {
			snprintf(w2, sizeof w2, "%s mean_out (%s)", what, cn);
			check_rel(w2, hmean[cl], rmean, st, &sd);
			snprintf(w2, sizeof w2, "%s var_out (%s)", what, cn);
			check_rel(w2, hvar[cl], ruvar, st, NULL);
		} else {
			snprintf(w2, sizeof w2, "%s mean_out untouched in eval (%s)", what, cn);
			KT_CHECK(kt_dt<T>::to(hmean[cl][0]) != kt_dt<T>::to(hmean[cl][0]), "%s", w2);
		}
		snprintf(w2, sizeof w2, "%s y (%s, reference)", what, cn);
		check_close(w2, hy[cl], ry, tol<T>());
		snprintf(w2, sizeof w2, "%s dx (%s, reference)", what, cn);
		/* one value a channel: dx is dy - dy - 0 * ..., cancelling to 0 */
		if (n * inner > 1)
			check_close(w2, hdx[cl], rdx, 2 * tol<T>());
		snprintf(w2, sizeof w2, "%s dw (%s, reference)", what, cn);
		check_close(w2, hdw[cl], rdw, 2 * tol<T>());
		snprintf(w2, sizeof w2, "%s db (%s, reference)", what, cn);
		check_close(w2, hdb[cl], rdb, 2 * tol<T>());
	}
	if (!training) {
		/* the same scale and shift a channel: equal */
		snprintf(w2, sizeof w2, "%s y", what);
		check_same(w2, hy[1], hy[0]);
		snprintf(w2, sizeof w2, "%s dx", what);
		check_same(w2, hdx[1], hdx[0]);
	} else {
		snprintf(w2, sizeof w2, "%s y (cl 1 against cl 0)", what);
		check_close(w2, hy[1], to_double(hy[0]), tol<T>());
		if (n * inner > 1) {
			snprintf(w2, sizeof w2, "%s dx (cl 1 against cl 0)", what);
			check_close(w2, hdx[1], to_double(hdx[0]), 2 * tol<T>());
		}
	}
	dev_free_all();
}

/* ------------------------------------------------------------------ layout conversion */

template <class T>
static void run_layout(long long n, long long c, long long hw, int off)
{
	char what[160];
	snprintf(what, sizeof what, "to_layout n%lld c%lld hw%lld off%d", n, c, hw, off);
	const size_t nx = n * c * hw;
	const std::vector<T> x = rnd_normal<T>(nx, 1, 0);
	T *dx = dev_up(x, off), *dy = dev<T>(nx, off), *dz = dev<T>(nx, off);
	launched(sg_launch_to_layout<T>(dx, dy, n, c, hw, 1, 0), what);
	launched(sg_launch_to_layout<T>(dy, dz, n, c, hw, 0, 0), what);
	char w2[200];
	snprintf(w2, sizeof w2, "%s to channels last", what);
	check_same(w2, down(dy, nx), perm(x, n, c, hw, 1, 1));
	snprintf(w2, sizeof w2, "%s round trip", what);
	check_same(w2, down(dz, nx), x);
	dev_free_all();
}

/* ------------------------------------------------------------------ the cases */

template <class T>
static void run_all(bool quick)
{
	/* conv2d: plain, stride 2 and padding, groups 2, 1 x 1, dilation */
	run_conv<T>(2, 4, 9, 7, 6, 3, 3, 1, 1, 1, 1);
	run_conv<T>(2, 3, 10, 10, 8, 3, 3, 2, 1, 1, 1);
	run_conv<T>(2, 4, 8, 9, 6, 3, 3, 1, 1, 1, 2);
	run_conv<T>(3, 8, 5, 5, 16, 1, 1, 1, 0, 1, 1);
	run_conv<T>(2, 8, 11, 11, 4, 1, 1, 2, 0, 1, 1);
	run_conv<T>(1, 4, 9, 9, 4, 3, 3, 1, 2, 2, 2);
	run_conv<T>(2, 6, 15, 13, 10, 7, 7, 2, 3, 1, 1);
	printf("%s conv2d done: %d passed, %d failed so far\n", kt_dt<T>::name(), kt_npass, kt_nfail);
	fflush(stdout);

	/* pools: c a multiple of 16-byte vectors, of 8-byte ones only, odd;
	 * misaligned data; misaligned argmax scratch */
	const long long cs[] = {64, 12, 5};
	for (long long c : cs) {
		run_pool<T>(2, c, 13, 11, 0, 3, 2, 1, 0, 0, 0, 0, false);
		run_pool<T>(2, c, 12, 12, 0, 3, 2, 1, 0, 0, 0, 0, true);
		run_pool<T>(2, c, 9, 10, 0, 2, 1, 0, 0, 0, 0, 0, false);
		run_pool<T>(2, c, 13, 11, 1, 3, 2, 1, 0, 0, 0, 0, false);
		run_pool<T>(2, c, 7, 7, 2, 1, 1, 0, 1, 1, 0, 0, false);
		run_pool<T>(2, c, 8, 7, 2, 1, 1, 0, 3, 3, 0, 0, false);
		run_pool<T>(1, c, 20, 18, 0, 16, 2, 0, 0, 0, 0, 0, false);   /* no scratch */
		/* strides 2: windows 2 x 2 and 3 x 3 unpadded, odd sizes, one
		 * row (channels last, 2 x 2 blocks of inputs); 4 x 4 (an input
		 * at a time) */
		run_pool<T>(2, c, 9, 7, 0, 2, 2, 0, 0, 0, 0, 0, false);
		run_pool<T>(2, c, 10, 9, 0, 3, 2, 0, 0, 0, 0, 0, true);
		run_pool<T>(3, c, 1, 6, 0, 3, 2, 1, 0, 0, 0, 0, false);
		run_pool<T>(2, c, 12, 10, 0, 4, 2, 1, 0, 0, 0, 0, false);
	}
	run_pool<T>(2, 64, 13, 11, 0, 3, 2, 1, 0, 0, 1, 0, false);
	run_pool<T>(2, 64, 13, 11, 0, 3, 2, 1, 0, 0, 0, 1, false);
	run_pool<T>(2, 64, 13, 11, 1, 3, 2, 1, 0, 0, 1, 0, false);
	run_pool<T>(2, 64, 9, 9, 2, 1, 1, 0, 3, 3, 3, 0, false);
	/* through a relu: the argmax bytes (NCHW, and channels last in 2 x 2
	 * blocks and not), and a 16 x 16 window (the mask after) */
	for (long long c : cs) {
		run_pool_relu<T>(2, c, 13, 11, 3, 2, 1, false, false);
		run_pool_relu<T>(2, c, 12, 12, 3, 2, 1, true, true);
		run_pool_relu<T>(2, c, 12, 10, 4, 2, 1, true, false);
		run_pool_relu<T>(1, c, 20, 18, 16, 2, 0, true, false);
	}
	if (!quick)
		run_pool<T>(4, 64, 112, 112, 0, 3, 2, 1, 0, 0, 0, 0, false);
	printf("%s pools done: %d passed, %d failed so far\n", kt_dt<T>::name(), kt_npass, kt_nfail);
	fflush(stdout);

	/* batch norm: vectorised (16- and 8-byte), odd c, one value, a few
	 * values, misaligned, several channel blocks, many slices */
	for (int tr = 1; tr >= 0; tr--) {
		run_bn<T>(2, 64, 196, 0, tr);
		run_bn<T>(2, 12, 33, 0, tr);
		run_bn<T>(3, 5, 7, 0, tr);
		run_bn<T>(2, 3, 5, 0, tr);
		run_bn<T>(1, 3, 1, 0, tr);
		run_bn<T>(7, 5, 1, 0, tr);
		run_bn<T>(2, 64, 49, 1, tr);
		run_bn<T>(2, 100, 9, 0, tr);
		run_bn<T>(4, 512, 49, 0, tr);
		run_bn<T>(8, 256, 196, 0, tr);
		if (!quick) {
			run_bn<T>(8, 64, 3136, 0, tr);
			run_bn<T>(16, 64, 12544, 0, tr);
		}
	}
	printf("%s batch norm done: %d passed, %d failed so far\n", kt_dt<T>::name(), kt_npass,
	       kt_nfail);
	fflush(stdout);

	/* a thread an element below 16 channels (an image's) or 16 positions
	 * (a filter's), else tiles */
	run_layout<T>(3, 5, 7, 0);
	run_layout<T>(2, 3, 50176, 0);
	run_layout<T>(1, 1, 1, 0);
	run_layout<T>(70000, 2, 3, 0);
	run_layout<T>(2, 64, 12544, 0);
	run_layout<T>(2, 33, 65, 1);
	run_layout<T>(3, 8, 9, 0);
	run_layout<T>(2, 130, 70, 0);
	run_layout<T>(70000, 8, 3, 0);   /* n past the grid's z */
	run_layout<T>(64, 64, 9, 0);     /* 3x3 filters */
	run_layout<T>(7, 513, 9, 1);
	run_layout<T>(5, 300, 1, 0);     /* 1x1 */
	run_layout<T>(3, 16, 16, 0);     /* the smallest tiled */
	run_layout<T>(3, 15, 300, 1);    /* the narrow side's widest, two tiles of the other */
	run_layout<T>(2, 300, 15, 0);
	run_layout<T>(4, 1, 37, 1);      /* one channel: a copy */
	run_layout<T>(3, 5, 1, 0);       /* one position: a copy */
	run_layout<T>(1, 257, 9, 0);     /* one past a tile */
	if (!quick)
		run_layout<T>(16, 64, 12544, 0);
	printf("%s to_layout done: %d passed, %d failed so far\n", kt_dt<T>::name(), kt_npass,
	       kt_nfail);
	fflush(stdout);
}

/* ------------------------------------------------------------------ timings */

static int reps = 20;

template <class T>
__global__ void fill_k(T *p, size_t n, unsigned seed, float scale, float shift)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		unsigned h = (unsigned)i * 2654435761u ^ seed;
		h ^= h >> 15;
		h *= 2246822519u;
		h ^= h >> 13;
		p[i] = sgk_cvt<T>(((float)(h & 0xffff) / 32768.0f - 1.0f) * scale + shift);
	}
}

template <class T>
static T *dev_fill(size_t n, unsigned seed, float scale, float shift)
{
	T *p = dev<T>(n);
	fill_k<T><<<1024, 256>>>(p, n, seed, scale, shift);
	KT_CUDA(cudaGetLastError());
	return p;
}

static void perf(const char *op, const char *shape, int cl, double ms, double bytes, double copy)
{
	const double gbps = bytes / (ms * 1e-3) / 1e9;
	printf("PERF conv_layout %-22s %-28s cl%d: %8.1f us, %5.0f GB/s (%3.0f%% of copy)\n", op, shape,
	       cl, ms * 1e3, gbps, 100 * gbps / copy);
}

/* batch norm forward (training, with mean_out, var_out) and backward at
 * x [n, c, inner] bf16: bytes counted as x read twice and y written
 * (forward), x and dy read twice and dx written (backward). */
static void bench_bn(long long n, long long c, long long inner, double copy)
{
	typedef __nv_bfloat16 T;
	typedef sgk_acc<T>::type A;
	const size_t nx = n * c * inner, es = sizeof(T);
	T *x = dev_fill<T>(nx, 1, 2, 0.5f), *dy = dev_fill<T>(nx, 2, 1, 0), *y = dev<T>(nx);
	T *dx = dev<T>(nx), *w = dev_fill<T>(c, 3, 1, 0), *b = dev_fill<T>(c, 4, 1, 0);
	T *mo = dev<T>(c), *vo = dev<T>(c), *dw = dev<T>(c), *db = dev<T>(c);
	const size_t ws = std::max(sg_batch_norm_workspace<T>(n, c, inner, 0),
	                           sg_batch_norm_workspace<T>(n, c, inner, 1));
	A *work = (A *)dev<char>(ws);
	char shape[64];
	snprintf(shape, sizeof shape, "c%lld m%lld", c, n * inner);
	for (int cl = 0; cl < 2; cl++) {
		const double f = kt_time([&] {
			sg_launch_batch_norm_fwd<T, T>(x, (const T *)0, (const T *)0, w, b, y, mo, vo, work,
			                               n, c, inner, cl, 1e-5f, 1, 0);
		}, 3, reps);
		perf("batch_norm fwd train", shape, cl, f, 3.0 * nx * es, copy);
		const double e = kt_time([&] {
			sg_launch_batch_norm_fwd_relu<T, T>(x, (const T *)0, (const T *)0, w, b, dy, y, mo,
			                                    vo, work, n, c, inner, cl, 1e-5f, 1, 0);
		}, 3, reps);
		perf("batch_norm fwd train, add+relu", shape, cl, e, 4.0 * nx * es, copy);
		const double g = kt_time([&] {
			sg_launch_batch_norm_bwd<T, T>(dy, x, (const T *)0, (const T *)0, w, dx, dw, db,
			                               work, n, c, inner, cl, 1e-5f, 1, 0);
		}, 3, reps);
		perf("batch_norm bwd train", shape, cl, g, 5.0 * nx * es, copy);
	}
	KT_CUDA(cudaGetLastError());
	dev_free_all();
}

/* max_pool2d 3 x 3 s2 p1 forward and backward (through the argmax
 * bytes): bytes counted as x read and y written (forward); x read, the
 * argmax written and read, dy read and dx written (backward).  Channels
 * last, the backward's second phase an input at a time too (the kernel
 * before the 2 x 2 blocks), to set beside it. */
static void bench_maxpool(long long n, long long c, long long h, double copy)
{
	typedef __nv_bfloat16 T;
	SgConvGeom g = conv_geom(n, c, h, h, c, 3, 3, 2, 1, 1, c);
	const size_t nx = n * c * h * h, ny = n * c * g.oh * g.ow, es = sizeof(T);
	T *x = dev_fill<T>(nx, 5, 1, 0), *dy = dev_fill<T>(ny, 6, 1, 0);
	T *y = dev<T>(ny), *dx = dev<T>(nx);
	unsigned char *work = dev<unsigned char>(sg_pool2d_bwd_workspace(g, 0));
	char shape[64];
	snprintf(shape, sizeof shape, "n%lld c%lld %lldx%lld", n, c, h, h);
	for (int cl = 0; cl < 2; cl++) {
		g.cl = cl;
		const double f = kt_time([&] { sg_launch_pool2d_fwd<T>(x, y, g, 0, 0); }, 3, reps);
		perf("max_pool2d fwd", shape, cl, f, (double)(nx + ny) * es, copy);
		const double b = kt_time([&] { sg_launch_pool2d_bwd<T>(dy, x, dx, g, 0, work, 0); }, 3,
		                         reps);
		perf("max_pool2d bwd", shape, cl, b, (double)(2 * nx + ny) * es + 2.0 * ny, copy);
		if (cl) {
			const double a = kt_time([&] {
				sgk_maxpool_bwd_cl<T, SgkBnVec<T>::V16, 0>(dy, x, dx, g, work, 0, 0);
			}, 3, reps);
			perf("max_pool2d bwd 1x1", shape, cl, a, (double)(2 * nx + ny) * es + 2.0 * ny,
			     copy);
		}
	}
	KT_CUDA(cudaGetLastError());
	dev_free_all();
}

/* The layout conversion both ways: bytes read and written. */
static void bench_layout(long long n, long long c, long long hw, double copy)
{
	typedef __nv_bfloat16 T;
	const size_t nx = n * c * hw;
	T *x = dev_fill<T>(nx, 7, 1, 0), *y = dev<T>(nx);
	char shape[64];
	snprintf(shape, sizeof shape, "n%lld c%lld hw%lld", n, c, hw);
	for (int to = 1; to >= 0; to--) {
		const double t = kt_time([&] { sg_launch_to_layout<T>(x, y, n, c, hw, to, 0); }, 3, reps);
		perf(to ? "to_layout NCHW->NHWC" : "to_layout NHWC->NCHW", shape, to, t,
		     2.0 * nx * sizeof(T), copy);
	}
	KT_CUDA(cudaGetLastError());
	dev_free_all();
}

int main(int argc, char **argv)
{
	kt_start(argc, argv);
	if (kt_flag(argc, argv, "--sanitize")) {
		/* Every kernel once, small, for compute-sanitizer. */
		run_conv<__nv_bfloat16>(2, 4, 8, 9, 6, 3, 3, 2, 1, 1, 2);
		run_pool<__nv_bfloat16>(2, 64, 13, 11, 0, 3, 2, 1, 0, 0, 0, 0, false);
		run_pool<__nv_bfloat16>(2, 12, 13, 11, 0, 3, 2, 1, 0, 0, 0, 1, false);
		run_pool<__nv_bfloat16>(2, 64, 8, 7, 2, 1, 1, 0, 3, 3, 0, 0, false);
		run_pool<float>(1, 5, 20, 18, 0, 16, 2, 0, 0, 0, 0, 0, false);
		for (int tr = 1; tr >= 0; tr--) {
			run_bn<__nv_bfloat16>(2, 64, 196, 0, tr);
			run_bn<__nv_bfloat16>(2, 12, 33, 0, tr);
			run_bn<__nv_bfloat16>(3, 5, 7, 1, tr);
			run_bn<float>(4, 512, 49, 0, tr);
		}
		run_layout<__nv_bfloat16>(3, 5, 7, 0);
		run_layout<float>(2, 64, 1000, 0);
		return kt_finish();
	}
	const bool quick = kt_flag(argc, argv, "--quick");
	if (kt_opt(argc, argv, "--reps"))
		reps = std::max(1, atoi(kt_opt(argc, argv, "--reps")));
	run_all<float>(quick);
	run_all<__nv_bfloat16>(quick);
	/* f64 and f16: a few */
	run_conv<double>(2, 4, 8, 9, 6, 3, 3, 2, 1, 1, 2);
	run_pool<double>(2, 6, 13, 11, 0, 3, 2, 1, 0, 0, 0, 0, true);
	run_pool<__half>(2, 64, 13, 11, 0, 3, 2, 1, 0, 0, 0, 0, false);
	run_bn<double>(2, 6, 49, 0, 1);
	run_bn<double>(2, 6, 49, 0, 0);
	run_bn<__half>(2, 64, 196, 0, 1);
	run_layout<double>(3, 5, 7, 0);
	run_layout<__half>(2, 64, 12544, 0);
	printf("checks done: %d passed, %d failed\n", kt_npass, kt_nfail);
	fflush(stdout);
	if (!quick) {
		const double copy = kt_copy_gbps((size_t)1 << 30);
		printf("PERF device copy: %.0f GB/s\n", copy);
		/* resnet18 training, bf16, B = 128 */
		bench_bn(128, 64, 112 * 112, copy);
		bench_bn(128, 64, 56 * 56, copy);
		bench_bn(128, 128, 28 * 28, copy);
		bench_bn(128, 256, 14 * 14, copy);
		bench_bn(128, 512, 7 * 7, copy);
		bench_maxpool(128, 64, 112, copy);
		bench_layout(128, 64, 112 * 112, copy);
		bench_layout(128, 64, 56 * 56, copy);
		bench_layout(128, 128, 28 * 28, copy);
		bench_layout(128, 256, 14 * 14, copy);
		bench_layout(128, 512, 7 * 7, copy);
		bench_layout(128, 3, 224 * 224, copy); /* the image */
		bench_layout(64, 64, 9, copy);         /* 3x3 filters */
		bench_layout(512, 512, 9, copy);
		bench_layout(512, 256, 1, copy);       /* 1x1 */
	}
	return kt_finish();
}
