/*
 * test_rows.cu - the row reductions (runtime/sgk/sgk_rows.cuh)
 * against a reference in double on the host: softmax and log_softmax
 * forward and backward, layer_norm and rms_norm forward (y, mean, rstd)
 * and backward (dx, dw, db), cross_entropy forward (row logsumexp, count,
 * mean loss with ignored targets) and backward.  Row sizes cover every
 * kernel configuration (sub-warp, warp, block with the row in registers,
 * block walking the row), vectorised and not (odd sizes, misaligned
 * pointers), in f32, bf16, f16 and f64; outputs are poisoned first.  The
 * norm backward also alone, every launcher and configuration, at the
 * transformer's shape (16384 x 2048 bf16, not with --quick) and odd ones,
 * checked row by row.  Then bandwidth figures on the H200 against a
 * device copy (the norm backward at 16384 x 2048 bf16 first).
 *
 *   test_rows [--dump DIR] [--quick] [--sanitize]
 */
#include <string>

#include "ktest.h"
#include "sgk_rows.cuh"

template <class T> static double tol()
{
	return sizeof(T) == 8 ? 1e-12 : sizeof(T) == 4 ? 1e-5 : kt_dt<T>::name()[0] == 'b' ? 1e-2 : 2e-3;
}

/* The reference as the kernel must store it: rounded to T. */
template <class T>
static std::vector<double> stored(std::vector<double> r)
{
	for (double &x : r)
		x = kt_round<T>(x);
	return r;
}

static void report(const char *what, const char *name, const KtErr &e, double t)
{
	KT_CHECK(e.nan == 0 && e.rel <= t, "%s %s: rel error %.3e > %.1e (unwritten/NaN %zu, worst at %zu)",
	         name, what, e.rel, t, e.nan, e.at);
}

/* ------------------------------------------------------------------ references */

static void ref_softmax(const std::vector<double> &x, std::vector<double> &y, long rows, int C,
                        bool log_)
{
	for (long r = 0; r < rows; r++) {
		const double *xr = &x[r * C];
		double m = -INFINITY, s = 0;
		for (int c = 0; c < C; c++)
			m = std::max(m, xr[c]);
		for (int c = 0; c < C; c++)
			s += exp(xr[c] - m);
		for (int c = 0; c < C; c++)
			y[r * C + c] = log_ ? xr[c] - m - log(s) : exp(xr[c] - m) / s;
	}
}

static void ref_softmax_bwd(const std::vector<double> &y, const std::vector<double> &dy,
                            std::vector<double> &dx, long rows, int C, bool log_)
{
	for (long r = 0; r < rows; r++) {
		double s = 0;
		for (int c = 0; c < C; c++)
			s += log_ ? dy[r * C + c] : dy[r * C + c] * y[r * C + c];
		for (int c = 0; c < C; c++) {
			const long i = r * C + c;
			dx[i] = log_ ? dy[i] - exp(y[i]) * s : y[i] * (dy[i] - s);
		}
	}
}

/* layer_norm / rms_norm forward: y, mean, rstd. */
static void ref_norm(const std::vector<double> &x, const std::vector<double> &w,
                     const std::vector<double> &b, std::vector<double> &y, std::vector<double> &mean,
                     std::vector<double> &rstd, long rows, int C, double eps, bool rms)
{
	for (long r = 0; r < rows; r++) {
		double mu = 0, var = 0;
		for (int c = 0; c < C; c++)
			mu += x[r * C + c];
		mu = rms ? 0 : mu / C;
		for (int c = 0; c < C; c++)
			var += (x[r * C + c] - mu) * (x[r * C + c] - mu);
		const double rs = 1 / sqrt(var / C + eps);
		mean[r] = mu;
		rstd[r] = rs;
		for (int c = 0; c < C; c++)
			y[r * C + c] = (x[r * C + c] - mu) * rs * (w.empty() ? 1 : w[c]) +
			               (b.empty() || rms ? 0 : b[c]);
	}
}

/* The backward by the chain rule written out directly:
 * dx_c = sum_k dy_k w_k d(xhat_k)/d(x_c). */
static void ref_norm_bwd(const std::vector<double> &x, const std::vector<double> &w,
                         const std::vector<double> &dy, std::vector<double> &dx,
                         std::vector<double> &dw, std::vector<double> &db, long rows, int C,
                         double eps, bool rms)
{
	std::fill(dw.begin(), dw.end(), 0.0);
	std::fill(db.begin(), db.end(), 0.0);
	for (long r = 0; r < rows; r++) {
		const double *xr = &x[r * C];
		double mu = 0, var = 0;
		for (int c = 0; c < C; c++)
			mu += xr[c];
		mu = rms ? 0 : mu / C;
		for (int c = 0; c < C; c++)
			var += (xr[c] - mu) * (xr[c] - mu);
		var /= C;
		const double rs = 1 / sqrt(var + eps);
		/* g = dy * w; dxhat/dx: rs * (delta - 1/C [layer] - xhat_k xhat_c / C). */
		double sg = 0, sgx = 0;
		for (int c = 0; c < C; c++) {
			const double g = dy[r * C + c] * (w.empty() ? 1 : w[c]), xh = (xr[c] - mu) * rs;
			sg += g;
			sgx += g * xh;
			dw[c] += dy[r * C + c] * xh;
			db[c] += dy[r * C + c];
		}
		for (int c = 0; c < C; c++) {
			const double g = dy[r * C + c] * (w.empty() ? 1 : w[c]), xh = (xr[c] - mu) * rs;
			dx[r * C + c] = rs * (g - (rms ? 0 : sg / C) - xh * sgx / C);
		}
	}
}

/* ------------------------------------------------------------------ one size */

/* All the row ops at rows x C in T, pointers offset by `off` elements
 * (misalignment when odd). */
template <class T>
static void run_size(long rows, int C, int off, const char *dump)
{
	typedef typename sgk_acc<T>::type A;
	char name[96];
	snprintf(name, sizeof name, "%s rows=%ld C=%d off=%d", kt_dt<T>::name(), rows, C, off);
	const size_t n = (size_t)rows * C;
	KtBuf<T> x, y, dy, dx, w, b, dw, db;
	x.alloc(n + off);
	y.alloc(n + off);
	dy.alloc(n + off);
	dx.alloc(n + off);
	w.alloc(C + off);
	b.alloc(C + off);
	dw.alloc(C + off);
	db.alloc(C + off);
	x.fill([] { return kt_normal() * 2; });
	dy.fill(kt_normal);
	w.fill([] { return 1 + 0.5 * kt_normal(); });
	b.fill(kt_normal);
	/* Views past the offset. */
	auto hv = [&](const KtBuf<T> &t, size_t cnt) {
		return std::vector<double>(t.h.begin() + off, t.h.begin() + off + cnt);
	};
	std::vector<double> hx = hv(x, n), hdy = hv(dy, n), hw = hv(w, C), hb = hv(b, C);
	std::vector<double> ref(n), ref2(n);
	A *stats;
	KT_CUDA(cudaMalloc(&stats, (2 * rows + 1) * sizeof(A)));
	KtDump d;
	cudaError_t e;

	/* softmax and log_softmax, forward and backward */
	for (int lg = 0; lg < 2; lg++) {
		y.poison();
		e = sg_launch_softmax_fwd<T>(x.d + off, y.d + off, rows, C, lg, 0);
		KT_CHECK(e == cudaSuccess, "%s softmax launch: %s", name, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		y.get();
		std::vector<double> hy = hv(y, n);
		ref_softmax(hx, ref, rows, C, lg);
		report(lg ? "log_softmax" : "softmax", name, kt_err(hy.data(), stored<T>(ref).data(), n),
		       tol<T>());
		dx.poison();
		e = sg_launch_softmax_bwd<T>(y.d + off, dy.d + off, dx.d + off, rows, C, lg, 0);
		KT_CHECK(e == cudaSuccess, "%s softmax bwd launch: %s", name, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		dx.get();
		std::vector<double> hdx = hv(dx, n);
		ref_softmax_bwd(hy, hdy, ref2, rows, C, lg);
		report(lg ? "log_softmax bwd" : "softmax bwd", name, kt_err(hdx.data(), stored<T>(ref2).data(), n),
		       tol<T>() * 2);
		if (dump && off == 0) {
			char dn[96];
			snprintf(dn, sizeof dn, "%s_%s_%d", lg ? "log_softmax" : "softmax", kt_dt<T>::name(), C);
			d.open(dump, dn, lg ? "log_softmax" : "softmax");
			d.attrs("dtype", kt_dt<T>::name());
			d.tensor("x", hx, {rows, C});
			d.tensor("y", hy, {rows, C});
			d.tensor("dy", hdy, {rows, C});
			d.tensor("dx", hdx, {rows, C});
			d.close();
		}
	}

	/* layer_norm (affine and not) and rms_norm */
	for (int kind = 0; kind < 3; kind++) {
		const bool rms = kind == 2, affine = kind != 1;
		const char *kn = kind == 0 ? "layer_norm" : kind == 1 ? "layer_norm(no affine)" : "rms_norm";
		const double eps = rms ? 1e-6 : 1e-5;
		std::vector<double> rw = affine ? hw : std::vector<double>(), rb = affine ? hb : std::vector<double>();
		std::vector<double> mean(rows), rstd(rows);
		y.poison();
		KT_CUDA(cudaMemset(stats, 0xff, 2 * rows * sizeof(A)));
		e = sg_launch_layer_norm_fwd<T>(x.d + off, affine ? w.d + off : 0, affine ? b.d + off : 0,
		                                y.d + off, rms ? 0 : stats, stats + rows, rows, C, (float)eps,
		                                rms, 0);
		KT_CHECK(e == cudaSuccess, "%s %s launch: %s", name, kn, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		y.get();
		std::vector<double> hy = hv(y, n);
		ref_norm(hx, rw, rb, ref, mean, rstd, rows, C, eps, rms);
		report(kn, name, kt_err(hy.data(), stored<T>(ref).data(), n), tol<T>());
		std::vector<A> hs(2 * rows);
		KT_CUDA(cudaMemcpy(hs.data(), stats, 2 * rows * sizeof(A), cudaMemcpyDeviceToHost));
		std::vector<double> gm(hs.begin(), hs.begin() + rows), gr(hs.begin() + rows, hs.end());
		const double st = sizeof(A) == 8 ? 1e-12 : 2e-5;
		if (!rms)
			report("mean", name, kt_err(gm.data(), mean.data(), rows), st);
		report("rstd", name, kt_err(gr.data(), rstd.data(), rows), st);

		/* over x + dy (a residual add): the sum stored as the add rounds
		 * it, y bit for bit the plain kernel's over that sum (y itself
		 * is kept: the fused backward below reads it) */
		{
			KtBuf<T> sum, y2, y3;
			sum.alloc(n + off);
			y2.alloc(n + off);
			y3.alloc(n + off);
			sum.poison();
			y2.poison();
			y3.poison();
			e = sg_launch_layer_norm_fwd_add<T>(x.d + off, dy.d + off, sum.d + off,
			                                    affine ? w.d + off : 0, affine ? b.d + off : 0,
			                                    y2.d + off, 0, 0, rows, C, (float)eps, rms, 0);
			KT_CHECK(e == cudaSuccess, "%s %s+add launch: %s", name, kn, cudaGetErrorString(e));
			KT_CUDA(cudaDeviceSynchronize());
			e = sg_launch_layer_norm_fwd<T>(sum.d + off, affine ? w.d + off : 0,
			                                affine ? b.d + off : 0, y3.d + off, 0, 0, rows, C,
			                                (float)eps, rms, 0);
			KT_CHECK(e == cudaSuccess, "%s %s over the sum launch: %s", name, kn,
			         cudaGetErrorString(e));
			KT_CUDA(cudaDeviceSynchronize());
			sum.get();
			y2.get();
			y3.get();
			std::vector<double> sref(n);
			for (size_t i = 0; i < n; i++)
				sref[i] = hx[i] + hdy[i];
			std::string what = std::string(kn) + "+add";
			report((what + " sum").c_str(), name,
			       kt_err(hv(sum, n).data(), stored<T>(sref).data(), n), 0.0);
			report((what + " y").c_str(), name, kt_err(hv(y2, n).data(), hv(y3, n).data(), n),
			       0.0);
			sum.release();
			y2.release();
			y3.release();
		}

		void *work;
		KT_CUDA(cudaMalloc(&work, sg_layer_norm_bwd_workspace<T>(rows, C)));
		dx.poison();
		dw.poison();
		db.poison();
		e = sg_launch_layer_norm_bwd<T>(dy.d + off, x.d + off, affine ? w.d + off : 0,
		                                rms ? 0 : stats, stats + rows, dx.d + off,
		                                affine ? dw.d + off : 0, affine && !rms ? db.d + off : 0,
		                                work, rows, C, rms, 0);
		KT_CHECK(e == cudaSuccess, "%s %s bwd launch: %s", name, kn, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		cudaFree(work);
		dx.get();
		std::vector<double> hdx = hv(dx, n), rdw(C), rdb(C);
		ref_norm_bwd(hx, rw, hdy, ref2, rdw, rdb, rows, C, eps, rms);
		char what[64];
		snprintf(what, sizeof what, "%s dx", kn);
		/* One element a row: dx = rstd * g * (1 - xhat^2) cancels (xhat^2
		 * is 1 - eps/x^2), in PyTorch's f32 as in ours. */
		const double dxtol = C == 1 ? std::max(tol<T>() * 2, 1e-3) : tol<T>() * 2;
		report(what, name, kt_err(hdx.data(), stored<T>(ref2).data(), n), dxtol);
		/* dx alone, the statistics computed again from x (no saved ones). */
		dx.poison();
		e = sg_launch_layer_norm_bwd_x<T>(dy.d + off, x.d + off, affine ? w.d + off : 0,
		                                  dx.d + off, rows, C, (float)eps, rms, 0);
		KT_CHECK(e == cudaSuccess, "%s %s bwd_x launch: %s", name, kn, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		dx.get();
		std::vector<double> hdx2 = hv(dx, n);
		snprintf(what, sizeof what, "%s dx (stats again)", kn);
		report(what, name, kt_err(hdx2.data(), stored<T>(ref2).data(), n), dxtol);
		std::vector<double> hdw, hdb;
		if (affine) {
			dw.get();
			hdw = hv(dw, C);
			snprintf(what, sizeof what, "%s dw", kn);
			report(what, name, kt_err(hdw.data(), stored<T>(rdw).data(), C), tol<T>() * 2);
			if (!rms) {
				db.get();
				hdb = hv(db, C);
				snprintf(what, sizeof what, "%s db", kn);
				report(what, name, kt_err(hdb.data(), stored<T>(rdb).data(), C), tol<T>() * 2);
			}
		}
		if (dump && off == 0 && kind != 1) {
			char dn[96];
			snprintf(dn, sizeof dn, "%s_%s_%d", kn, kt_dt<T>::name(), C);
			d.open(dump, dn, kn);
			d.attrs("dtype", kt_dt<T>::name());
			d.attr("eps", eps);
			d.tensor("x", hx, {rows, C});
			d.tensor("w", hw, {C});
			if (!rms)
				d.tensor("b", hb, {C});
			d.tensor("y", hy, {rows, C});
			d.tensor("dy", hdy, {rows, C});
			d.tensor("dx", hdx, {rows, C});
			d.tensor("dw", hdw, {C});
			if (!rms)
				d.tensor("db", hdb, {C});
			d.close();
		}

		/* The fused backward: dx plus a residual (y as it), dw and db
		 * from the row groups' column sums, the statistics again from x;
		 * then dx alone through it (no workspace). */
		KtBuf<T> dw2, db2;
		dw2.alloc(C + off);
		db2.alloc(C + off);
		dw2.poison();
		db2.poison();
		dx.poison();
		KT_CUDA(cudaMalloc(&work, sg_layer_norm_bwd_fused_workspace<T>(rows, C)));
		e = sg_launch_layer_norm_bwd_fused<T>(dy.d + off, x.d + off, affine ? w.d + off : 0,
		                                      y.d + off, dx.d + off, dw2.d + off,
		                                      rms ? 0 : db2.d + off, work, rows, C, (float)eps,
		                                      rms, 0);
		KT_CHECK(e == cudaSuccess, "%s %s bwd_fused launch: %s", name, kn, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		cudaFree(work);
		dx.get();
		dw2.get();
		std::vector<double> hdx3 = hv(dx, n), hdw2 = hv(dw2, C), rsum(n);
		for (size_t i = 0; i < n; i++)
			rsum[i] = ref2[i] + hy[i];
		snprintf(what, sizeof what, "%s dx + residual (fused)", kn);
		report(what, name, kt_err(hdx3.data(), stored<T>(rsum).data(), n), dxtol * 2);
		/* dw is the sum of dy * xhat whether or not the norm has a weight */
		snprintf(what, sizeof what, "%s dw (fused)", kn);
		report(what, name, kt_err(hdw2.data(), stored<T>(rdw).data(), C), tol<T>() * 2);
		if (!rms) {
			db2.get();
			std::vector<double> hdb2 = hv(db2, C);
			snprintf(what, sizeof what, "%s db (fused)", kn);
			report(what, name, kt_err(hdb2.data(), stored<T>(rdb).data(), C), tol<T>() * 2);
		}
		dx.poison();
		e = sg_launch_layer_norm_bwd_fused<T>(dy.d + off, x.d + off, affine ? w.d + off : 0,
		                                      (const T *)0, dx.d + off, (T *)0, (T *)0,
		                                      (void *)0, rows, C, (float)eps, rms, 0);
		KT_CHECK(e == cudaSuccess, "%s %s bwd_fused dx launch: %s", name, kn,
		         cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		dx.get();
		std::vector<double> hdx4 = hv(dx, n);
		snprintf(what, sizeof what, "%s dx (fused, alone)", kn);
		report(what, name, kt_err(hdx4.data(), stored<T>(ref2).data(), n), dxtol);
	}

	/* cross_entropy */
	{
		std::vector<long long> tg(rows);
		for (long r = 0; r < rows; r++)
			tg[r] = r % 7 == 3 ? -100 : (long long)(kt_next() % (unsigned long long)C);
		long long *dt;
		KT_CUDA(cudaMalloc(&dt, rows * 8));
		KT_CUDA(cudaMemcpy(dt, tg.data(), rows * 8, cudaMemcpyHostToDevice));
		KtBuf<T> loss, dloss;
		loss.alloc(1);
		dloss.alloc(1);
		dloss.fill([] { return 0.5 + kt_unif(0, 1); });
		loss.poison();
		KT_CUDA(cudaMemset(stats, 0xff, (rows + 1) * sizeof(A)));
		e = sg_launch_cross_entropy_fwd<T>(x.d + off, dt, stats, loss.d, rows, C, 0);
		KT_CHECK(e == cudaSuccess, "%s cross_entropy launch: %s", name, cudaGetErrorString(e));
		dx.poison();
		e = sg_launch_cross_entropy_bwd<T>(x.d + off, dt, stats, dloss.d, dx.d + off, rows, C, 0);
		KT_CHECK(e == cudaSuccess, "%s cross_entropy bwd launch: %s", name, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		loss.get();
		dx.get();
		std::vector<A> hs(rows + 1);
		KT_CUDA(cudaMemcpy(hs.data(), stats, (rows + 1) * sizeof(A), cudaMemcpyDeviceToHost));
		double s = 0, cnt = 0;
		std::vector<double> lse(rows), glse(hs.begin(), hs.begin() + rows);
		for (long r = 0; r < rows; r++) {
			double m = -INFINITY, z = 0;
			for (int c = 0; c < C; c++)
				m = std::max(m, hx[r * C + c]);
			for (int c = 0; c < C; c++)
				z += exp(hx[r * C + c] - m);
			lse[r] = m + log(z);
			if (tg[r] != -100) {
				s += lse[r] - hx[r * C + tg[r]];
				cnt++;
			}
		}
		const double rl = s / cnt, g = dloss.h[0] / cnt;
		for (long r = 0; r < rows; r++)
			for (int c = 0; c < C; c++)
				ref2[r * C + c] = tg[r] == -100 ? 0 : (exp(hx[r * C + c] - lse[r]) - (c == tg[r])) * g;
		report("cross_entropy lse", name, kt_err(glse.data(), lse.data(), rows), 1e-5);
		KT_CHECK(hs[rows] == cnt, "%s cross_entropy count %g, want %g", name, (double)hs[rows], cnt);
		const double lt = std::max(tol<T>(), 1e-6);
		KT_CHECK(fabs(loss.h[0] - rl) <= lt * fabs(rl), "%s cross_entropy loss %.8g, want %.8g", name,
		         loss.h[0], rl);
		std::vector<double> hdx = hv(dx, n);
		report("cross_entropy dx", name, kt_err(hdx.data(), stored<T>(ref2).data(), n), tol<T>() * 2);
		if (dump && off == 0) {
			char dn[96];
			snprintf(dn, sizeof dn, "cross_entropy_%s_%d", kt_dt<T>::name(), C);
			d.open(dump, dn, "cross_entropy");
			d.attrs("dtype", kt_dt<T>::name());
			d.tensor("x", hx, {rows, C});
			d.tensor_i64("target", tg, {rows});
			d.tensor("loss", loss.h, {});
			d.tensor("dloss", dloss.h, {});
			d.tensor("dx", hdx, {rows, C});
			d.close();
		}
		cudaFree(dt);
		loss.release();
		dloss.release();
	}
	cudaFree(stats);
	KtBuf<T> *all[] = {&x, &y, &dy, &dx, &w, &b, &dw, &db};
	for (KtBuf<T> *t : all)
		t->release();
}

/* ------------------------------------------------------------------ the norm backward alone */

/* out against ref, rows of C: the worst row's relative error, and the
 * largest error against the largest reference value, both within t (so
 * that one wrong row or column is not lost in the norm of the whole). */
static void report_rows(const char *what, const char *name, const std::vector<double> &out,
                        const std::vector<double> &ref, long rows, int C, double t)
{
	double worst = 0;
	long at = 0;
	size_t nan = 0;
	for (long r = 0; r < rows; r++) {
		const KtErr e = kt_err(&out[r * C], &ref[r * C], C);
		nan += e.nan;
		if (!(e.rel <= worst)) {
			worst = e.rel;
			at = r;
		}
	}
	const KtErr all = kt_err(out.data(), ref.data(), (size_t)rows * C);
	KT_CHECK(nan == 0 && worst <= t && all.maxabs <= t * all.refmax,
	         "%s %s: worst row %ld rel error %.3e, max abs error %.3e of %.3e (> %.1e; "
	         "unwritten/NaN %zu)", name, what, at, worst, all.maxabs, all.refmax, t, nan);
}

/* Every norm backward launcher at rows x C in T (pointers offset by off
 * elements), for layer_norm and rms_norm with and without w: the fused
 * one with add and the column sums (dw and db, dw alone, db alone), dx
 * alone with and without add, sg_launch_layer_norm_bwd_x, and the column
 * sums alone from saved statistics (no dx); a second run of the column
 * sums must give the same bits. */
template <class T>
static void run_norm_bwd(long rows, int C, int off)
{
	typedef typename sgk_acc<T>::type A;
	char name[96];
	snprintf(name, sizeof name, "%s norm bwd rows=%ld C=%d off=%d", kt_dt<T>::name(), rows, C,
	         off);
	const size_t n = (size_t)rows * C;
	KtBuf<T> x, dy, ad, dx, w, dw, db, dw2, db2;
	KtBuf<T> *rowbufs[] = {&x, &dy, &ad, &dx}, *colbufs[] = {&w, &dw, &db, &dw2, &db2};
	for (KtBuf<T> *b : rowbufs)
		b->alloc(n + off);
	for (KtBuf<T> *b : colbufs)
		b->alloc(C + off);
	/* uniform values (cheap at 33M elements), a mean away from 0 */
	x.fill([] { return kt_unif(-3, 4); });
	dy.fill([] { return kt_unif(-2, 2); });
	ad.fill([] { return kt_unif(-1, 1); });
	w.fill([] { return kt_unif(0.5, 1.5); });
	auto hv = [&](const KtBuf<T> &t, size_t cnt) {
		return std::vector<double>(t.h.begin() + off, t.h.begin() + off + cnt);
	};
	const std::vector<double> hx = hv(x, n), hdy = hv(dy, n), had = hv(ad, n), hw = hv(w, C);
	std::vector<double> rdx(n), rsum(n), rdw(C), rdb(C), mean(rows), rstd(rows), scratch(n);
	A *stats;
	KT_CUDA(cudaMalloc(&stats, 2 * rows * sizeof(A)));
	void *work;
	KT_CUDA(cudaMalloc(&work, sg_layer_norm_bwd_fused_workspace<T>(rows, C)));
	const double t = tol<T>() * 2;
	char what[96];
	cudaError_t e;
	for (int kind = 0; kind < 4; kind++) {
		const bool rms = kind >= 2, affine = kind % 2 == 0;
		const char *kn = kind == 0 ? "layer_norm" : kind == 1 ? "layer_norm(no w)"
		               : kind == 2 ? "rms_norm" : "rms_norm(no w)";
		const double eps = rms ? 1e-6 : 1e-5;
		const T *wp = affine ? w.d + off : 0;
		const std::vector<double> rw = affine ? hw : std::vector<double>();
		ref_norm_bwd(hx, rw, hdy, rdx, rdw, rdb, rows, C, eps, rms);
		for (size_t i = 0; i < n; i++)
			rsum[i] = rdx[i] + had[i];
		const std::vector<double> sdx = stored<T>(rdx), ssum = stored<T>(rsum);
		const std::vector<double> sdw = stored<T>(rdw), sdb = stored<T>(rdb);
		/* dx + add and the column sums: dw and db (layer_norm with w), db
		 * alone (layer_norm without w), dw alone (rms_norm) or none */
		T *dwp = kind == 1 || kind == 3 ? (T *)0 : dw.d + off;
		T *dbp = rms ? (T *)0 : db.d + off;
		dx.poison();
		dw.poison();
		db.poison();
		e = sg_launch_layer_norm_bwd_fused<T>(dy.d + off, x.d + off, wp, ad.d + off, dx.d + off,
		                                      dwp, dbp, work, rows, C, (float)eps, rms, 0);
		KT_CHECK(e == cudaSuccess, "%s %s fused launch: %s", name, kn, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		dx.get();
		snprintf(what, sizeof what, "%s dx + add (fused)", kn);
		report_rows(what, name, hv(dx, n), ssum, rows, C, t);
		if (dwp) {
			dw.get();
			snprintf(what, sizeof what, "%s dw (fused)", kn);
			report_rows(what, name, hv(dw, C), sdw, 1, C, t);
		}
		if (dbp) {
			db.get();
			snprintf(what, sizeof what, "%s db (fused)", kn);
			report_rows(what, name, hv(db, C), sdb, 1, C, t);
		}
		/* the same again: the same bits (a fixed order of summation) */
		if (dwp || dbp) {
			dw2.poison();
			db2.poison();
			e = sg_launch_layer_norm_bwd_fused<T>(dy.d + off, x.d + off, wp, ad.d + off,
			                                      dx.d + off, dwp ? dw2.d + off : 0,
			                                      dbp ? db2.d + off : 0, work, rows, C,
			                                      (float)eps, rms, 0);
			KT_CHECK(e == cudaSuccess, "%s %s fused launch: %s", name, kn, cudaGetErrorString(e));
			KT_CUDA(cudaDeviceSynchronize());
			dw2.get();
			db2.get();
			KT_CHECK((!dwp || hv(dw2, C) == hv(dw, C)) && (!dbp || hv(db2, C) == hv(db, C)),
			         "%s %s: a second run's column sums differ", name, kn);
		}
		/* dx alone through the fused launcher: with add (w), without (no w) */
		dx.poison();
		e = sg_launch_layer_norm_bwd_fused<T>(dy.d + off, x.d + off, wp,
		                                      affine ? ad.d + off : 0, dx.d + off, (T *)0,
		                                      (T *)0, (void *)0, rows, C, (float)eps, rms, 0);
		KT_CHECK(e == cudaSuccess, "%s %s fused dx launch: %s", name, kn, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		dx.get();
		snprintf(what, sizeof what, "%s dx%s (fused, alone)", kn, affine ? " + add" : "");
		report_rows(what, name, hv(dx, n), affine ? ssum : sdx, rows, C, t);
		/* dx alone through sg_launch_layer_norm_bwd_x */
		dx.poison();
		e = sg_launch_layer_norm_bwd_x<T>(dy.d + off, x.d + off, wp, dx.d + off, rows, C,
		                                  (float)eps, rms, 0);
		KT_CHECK(e == cudaSuccess, "%s %s bwd_x launch: %s", name, kn, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		dx.get();
		snprintf(what, sizeof what, "%s dx (bwd_x)", kn);
		report_rows(what, name, hv(dx, n), sdx, rows, C, t);
		/* dw and db alone from the saved statistics (as the forward's) */
		ref_norm(hx, std::vector<double>(), std::vector<double>(), scratch, mean, rstd, rows, C,
		         eps, rms);
		std::vector<A> hs(2 * rows);
		for (long r = 0; r < rows; r++) {
			hs[r] = (A)mean[r];
			hs[rows + r] = (A)rstd[r];
		}
		KT_CUDA(cudaMemcpy(stats, hs.data(), 2 * rows * sizeof(A), cudaMemcpyHostToDevice));
		dw.poison();
		db.poison();
		e = sg_launch_layer_norm_bwd<T>(dy.d + off, x.d + off, wp, rms ? 0 : stats, stats + rows,
		                                (T *)0, dw.d + off, db.d + off, work, rows, C, rms, 0);
		KT_CHECK(e == cudaSuccess, "%s %s bwd launch: %s", name, kn, cudaGetErrorString(e));
		KT_CUDA(cudaDeviceSynchronize());
		dw.get();
		snprintf(what, sizeof what, "%s dw (saved statistics)", kn);
		report_rows(what, name, hv(dw, C), sdw, 1, C, t);
		if (!rms) {
			db.get();
			snprintf(what, sizeof what, "%s db (saved statistics)", kn);
			report_rows(what, name, hv(db, C), sdb, 1, C, t);
		}
	}
	cudaFree(work);
	cudaFree(stats);
	for (KtBuf<T> *b : rowbufs)
		b->release();
	for (KtBuf<T> *b : colbufs)
		b->release();
}

/* Every configuration of the norm backward once, with rows past a
 * multiple of the row groups (a group taking two rows), at the
 * transformer's shape (16384 x 2048 bf16) unless quick. */
static void run_norm_bwd_cases(bool quick)
{
	if (!quick)
		run_norm_bwd<__nv_bfloat16>(16384, 2048, 0);
	run_norm_bwd<__nv_bfloat16>(517, 2048, 0);     /* 128 threads a row, 2 vectors, staged */
	run_norm_bwd<__nv_bfloat16>(3, 2048, 0);       /* fewer rows than groups */
	run_norm_bwd<__nv_bfloat16>(1, 2048, 0);
	run_norm_bwd<__nv_bfloat16>(2051, 256, 0);     /* a warp a row, 4 rows a block */
	run_norm_bwd<__nv_bfloat16>(2053, 512, 0);     /* a warp a row, 2 vectors */
	run_norm_bwd<__nv_bfloat16>(600, 520, 0);      /* second vectors all past C */
	run_norm_bwd<__nv_bfloat16>(300, 2050, 0);     /* C not a multiple of 8 */
	run_norm_bwd<__nv_bfloat16>(300, 2048, 3);     /* misaligned */
	run_norm_bwd<__nv_bfloat16>(77, 7, 0);
	run_norm_bwd<__nv_bfloat16>(130, 6000, 0);     /* 512 threads, 64 KB of column sums */
	run_norm_bwd<__nv_bfloat16>(260, 3000, 0);     /* 256 threads */
	run_norm_bwd<__nv_bfloat16>(200, 12000, 0);    /* the row walked in memory */
	run_norm_bwd<__half>(130, 6000, 0);
	run_norm_bwd<__half>(517, 2048, 0);
	run_norm_bwd<float>(517, 2048, 0);
	run_norm_bwd<float>(130, 4000, 0);
	run_norm_bwd<float>(200, 1001, 1);
	run_norm_bwd<float>(131, 5000, 0);             /* not vectorised, walked */
	run_norm_bwd<double>(300, 2048, 0);
	run_norm_bwd<double>(130, 3000, 1);
	run_norm_bwd<double>(130, 5000, 0);
	printf("norm bwd done: %d passed, %d failed so far\n", kt_npass, kt_nfail);
	fflush(stdout);
}

/* The norm backward at the transformer's shape: GB/s counting x, dy (and
 * add) read and dx written once. */
static void bench_norm_bwd(long rows, int C, double copy_gbps)
{
	typedef __nv_bfloat16 T;
	const size_t n = (size_t)rows * C;
	T *x, *dy, *ad, *dx, *w, *dw, *db;
	void *work;
	KT_CUDA(cudaMalloc(&x, n * sizeof(T)));
	KT_CUDA(cudaMalloc(&dy, n * sizeof(T)));
	KT_CUDA(cudaMalloc(&ad, n * sizeof(T)));
	KT_CUDA(cudaMalloc(&dx, n * sizeof(T)));
	KT_CUDA(cudaMalloc(&w, C * sizeof(T)));
	KT_CUDA(cudaMalloc(&dw, C * sizeof(T)));
	KT_CUDA(cudaMalloc(&db, C * sizeof(T)));
	KT_CUDA(cudaMalloc(&work, sg_layer_norm_bwd_fused_workspace<T>(rows, C)));
	{
		std::vector<T> h(n);
		for (size_t i = 0; i < n; i++)
			h[i] = kt_dt<T>::from((double)((i * 2654435761u) % 1000) / 250.0 - 2.0);
		KT_CUDA(cudaMemcpy(x, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
		KT_CUDA(cudaMemcpy(dy, h.data() + 1, (n - 1) * sizeof(T), cudaMemcpyHostToDevice));
		KT_CUDA(cudaMemcpy(ad, h.data() + 2, (n - 2) * sizeof(T), cudaMemcpyHostToDevice));
		KT_CUDA(cudaMemcpy(w, h.data(), C * sizeof(T), cudaMemcpyHostToDevice));
	}
	auto line = [&](const char *op, int moved, double ms) {
		const double gbps = moved * (double)n * sizeof(T) / (ms * 1e-3) / 1e9;
		printf("PERF norm_bwd %-30s bf16 [%ld, %d]: %.1f us, %.0f GB/s (%.0f%% of copy)\n", op,
		       rows, C, ms * 1e3, gbps, 100 * gbps / copy_gbps);
	};
	line("layer_norm dx+add,dw,db", 4, kt_time([&] {
		sg_launch_layer_norm_bwd_fused<T>(dy, x, w, ad, dx, dw, db, work, rows, C, 1e-5f, 0, 0);
	}, 3, 20));
	line("rms_norm dx+add,dw", 4, kt_time([&] {
		sg_launch_layer_norm_bwd_fused<T>(dy, x, w, ad, dx, dw, 0, work, rows, C, 1e-6f, 1, 0);
	}, 3, 20));
	line("layer_norm dx+add", 4, kt_time([&] {
		sg_launch_layer_norm_bwd_fused<T>(dy, x, w, ad, dx, 0, 0, 0, rows, C, 1e-5f, 0, 0);
	}, 3, 20));
	line("layer_norm dx (bwd_x)", 3, kt_time([&] {
		sg_launch_layer_norm_bwd_x<T>(dy, x, w, dx, rows, C, 1e-5f, 0, 0);
	}, 3, 20));
	KT_CUDA(cudaGetLastError());
	void *ptrs[] = {x, dy, ad, dx, w, dw, db, work};
	for (void *p : ptrs)
		cudaFree(p);
}

/* Rows for a size: a few hundred thousand elements in all. */
static long rows_for(int C)
{
	return std::max(2L, std::min(64L, 300000L / C));
}

/* ------------------------------------------------------------------ timings */

template <class T>
static void bench(long rows, int C, double copy_gbps)
{
	typedef typename sgk_acc<T>::type A;
	const size_t n = (size_t)rows * C, es = sizeof(T);
	T *x, *y, *dy, *dx, *w, *b, *dw, *db;
	A *stats;
	long long *tg;
	void *work;
	KT_CUDA(cudaMalloc(&x, n * es));
	KT_CUDA(cudaMalloc(&y, n * es));
	KT_CUDA(cudaMalloc(&dy, n * es));
	KT_CUDA(cudaMalloc(&dx, n * es));
	KT_CUDA(cudaMalloc(&w, C * es));
	KT_CUDA(cudaMalloc(&b, C * es));
	KT_CUDA(cudaMalloc(&dw, C * es));
	KT_CUDA(cudaMalloc(&db, C * es));
	KT_CUDA(cudaMalloc(&stats, (2 * rows + 1) * sizeof(A)));
	KT_CUDA(cudaMalloc(&tg, rows * 8));
	KT_CUDA(cudaMalloc(&work, sg_layer_norm_bwd_workspace<T>(rows, C)));
	/* Random-ish data: a device-side pattern is enough for timing. */
	{
		std::vector<T> h(n);
		for (size_t i = 0; i < n; i++)
			h[i] = kt_dt<T>::from((double)((i * 2654435761u) % 1000) / 250.0 - 2.0);
		KT_CUDA(cudaMemcpy(x, h.data(), n * es, cudaMemcpyHostToDevice));
		KT_CUDA(cudaMemcpy(dy, h.data(), n * es, cudaMemcpyHostToDevice));
		KT_CUDA(cudaMemcpy(w, h.data(), C * es, cudaMemcpyHostToDevice));
		KT_CUDA(cudaMemcpy(b, h.data() + 1, C * es, cudaMemcpyHostToDevice));
		std::vector<long long> t(rows);
		for (long r = 0; r < rows; r++)
			t[r] = (r * 7919) % C;
		KT_CUDA(cudaMemcpy(tg, t.data(), rows * 8, cudaMemcpyHostToDevice));
	}
	const double gb = n * es / 1e9;
	auto line = [&](const char *op, double ms, double moved) {
		const double gbps = moved * gb / (ms * 1e-3);
		printf("PERF rows %-22s %s [%ld, %d]: %.4f ms, %.0f GB/s (%.0f%% of copy)\n", op,
		       kt_dt<T>::name(), rows, C, ms, gbps, 100 * gbps / copy_gbps);
	};
	line("softmax fwd", kt_time([&] { sg_launch_softmax_fwd<T>(x, y, rows, C, 0, 0); }, 3, 20), 2);
	line("softmax bwd", kt_time([&] { sg_launch_softmax_bwd<T>(y, dy, dx, rows, C, 0, 0); }, 3, 20), 3);
	line("layer_norm fwd", kt_time([&] {
		sg_launch_layer_norm_fwd<T>(x, w, b, y, stats, stats + rows, rows, C, 1e-5f, 0, 0);
	}, 3, 20), 2);
	line("layer_norm bwd dx,dw,db", kt_time([&] {
		sg_launch_layer_norm_bwd<T>(dy, x, w, stats, stats + rows, dx, dw, db, work, rows, C, 0, 0);
	}, 3, 20), 3);
	line("rms_norm fwd", kt_time([&] {
		sg_launch_layer_norm_fwd<T>(x, w, 0, y, 0, stats + rows, rows, C, 1e-6f, 1, 0);
	}, 3, 20), 2);
	line("cross_entropy fwd", kt_time([&] {
		sg_launch_cross_entropy_fwd<T>(x, tg, stats, y, rows, C, 0);
	}, 3, 20), 1);
	line("cross_entropy bwd", kt_time([&] {
		sg_launch_cross_entropy_bwd<T>(x, tg, stats, y, dx, rows, C, 0);
	}, 3, 20), 2);
	KT_CUDA(cudaGetLastError());
	void *ptrs[] = {x, y, dy, dx, w, b, dw, db, stats, tg, work};
	for (void *p : ptrs)
		cudaFree(p);
}

int main(int argc, char **argv)
{
	kt_start(argc, argv);
	const char *dump = kt_opt(argc, argv, "--dump");
	const bool quick = kt_flag(argc, argv, "--quick");
	const int sizes[] = {1,    3,    8,    33,   100,  256,   1000,  1024,  2048,   4096,
	                     5000, 8192, 12288, 16384, 20000, 32768, 50257, 65536, 100000};
	if (kt_flag(argc, argv, "--sanitize")) {
		/* Every kind of configuration once, for compute-sanitizer. */
		const int few[] = {3, 33, 1000, 5000, 65536};
		for (int C : few) {
			run_size<float>(5, C, 0, 0);
			run_size<__nv_bfloat16>(5, C, 0, 0);
		}
		/* the norm backward with groups taking two rows (block sums
		 * through alternating shared slots), registers and walked */
		run_norm_bwd<__nv_bfloat16>(130, 6000, 0);
		run_norm_bwd<__nv_bfloat16>(130, 12000, 0);
		/* rows staged through shared memory (cp.async), more rows than
		 * groups and fewer */
		run_norm_bwd<__nv_bfloat16>(1100, 2048, 0);
		run_norm_bwd<__nv_bfloat16>(3, 2048, 0);
		run_norm_bwd<float>(2051, 96, 0);
		return kt_finish();
	}
	run_norm_bwd_cases(quick);
	for (int C : sizes) {
		const long rows = rows_for(C);
		const bool dmp = C == 1000 || C == 50257;
		run_size<float>(rows, C, 0, dmp ? dump : 0);
		run_size<__nv_bfloat16>(rows, C, 0, dmp ? dump : 0);
		if (C == 1024 || C == 4096 || C == 32768)
			run_size<float>(rows, C, 1, 0);
		if (C == 1024 || C == 4096 || C == 32768)
			run_size<__nv_bfloat16>(rows, C, 3, 0);
		if (C == 33 || C == 1000 || C == 4096 || C == 50257)
			run_size<__half>(rows, C, 0, C == 1000 ? dump : 0);
		if (C == 33 || C == 4096 || C == 20000)
			run_size<double>(rows, C, 0, 0);
		printf("C=%d done: %d passed, %d failed so far\n", C, kt_npass, kt_nfail);
		fflush(stdout);
	}
	if (!quick) {
		const double copy = kt_copy_gbps((size_t)1 << 31);
		printf("PERF device copy: %.0f GB/s\n", copy);
		bench_norm_bwd(16384, 2048, copy);
		bench<__nv_bfloat16>(16384, 4096, copy);
		bench<float>(16384, 4096, copy);
		bench<__nv_bfloat16>(8192, 50257, copy);
		bench<__nv_bfloat16>(65536, 1024, copy);
	}
	return kt_finish();
}
