/*
 * test_optim.cu - the multi-tensor optimizer updates
 * (runtime/sgk/sgk_optim.cuh) against torch.optim's update
 * rules written out in double on the host (each stored value rounded to
 * its dtype after every step): SGD with and without momentum, with weight
 * decay and Nesterov; AdamW with bias correction from a device f32 step,
 * fresh and resumed state, both branches of PyTorch's lerp.  Forty-odd
 * tensors of awkward sizes (more than one launch table, a tensor spanning
 * tables, a misaligned one), three steps each.  Then bandwidth on the
 * H200: AdamW over 8 x 8192 x 8192 bf16 (the anchor's model).
 *
 *   test_optim [--dump DIR] [--quick]
 */
#include "ktest.h"
#include "sgk_optim.cuh"

struct Tensors {
	std::vector<long long> numel;
	std::vector<size_t> off;   /* element offset of each tensor's start (misalignment) */
};

/* The tensor sizes of the tests: awkward ones, then one spanning tables. */
static Tensors sizes(bool big)
{
	Tensors t;
	const long long base[] = {1, 7, 8, 64, 1000, 65535, 65536, 65537, 131073, 300001};
	for (int i = 0; i < 42; i++) {
		t.numel.push_back(base[i % 10] + (i / 10));
		t.off.push_back(i == 5 ? 1 : 0);
	}
	if (big)
		t.numel.push_back(21 * 1000 * 1000 + 17), t.off.push_back(0);
	return t;
}

/* Device copies of n tensors with host mirrors. */
template <class T>
struct Set {
	std::vector<KtBuf<T>> b;
	std::vector<T *> p;   /* pointers after the offsets */

	void alloc(const Tensors &t)
	{
		b.resize(t.numel.size());
		p.resize(t.numel.size());
		for (size_t i = 0; i < b.size(); i++) {
			b[i].alloc(t.numel[i] + t.off[i]);
			p[i] = b[i].d + t.off[i];
		}
	}
	template <class F> void fill(F f)
	{
		for (auto &x : b)
			x.fill(f);
	}
	void get()
	{
		for (auto &x : b)
			x.get();
	}
	void release()
	{
		for (auto &x : b)
			x.release();
	}
};

/* The largest relative error of a set against its reference, in order. */
template <class T>
static KtErr set_err(const Set<T> &s, const std::vector<std::vector<double>> &ref, const Tensors &t)
{
	std::vector<double> o, r;
	for (size_t i = 0; i < ref.size(); i++) {
		o.insert(o.end(), s.b[i].h.begin() + t.off[i], s.b[i].h.begin() + t.off[i] + t.numel[i]);
		r.insert(r.end(), ref[i].begin(), ref[i].end());
	}
	return kt_err(o.data(), r.data(), o.size());
}

template <class T> static double tol() { return sizeof(T) == 4 ? 1e-6 : 1e-2; }

/* ------------------------------------------------------------------ SGD */

template <class T>
static void test_sgd(double lr, double mom, double wd, int nesterov, bool big)
{
	char name[128];
	snprintf(name, sizeof name, "sgd %s lr=%g momentum=%g wd=%g nesterov=%d", kt_dt<T>::name(), lr,
	         mom, wd, nesterov);
	Tensors t = sizes(big);
	const size_t n = t.numel.size();
	Set<T> p, g, buf;
	p.alloc(t), g.alloc(t), buf.alloc(t);
	p.fill(kt_normal);
	for (auto &x : buf.b)
		KT_CUDA(cudaMemset(x.d, 0, x.n * sizeof(T)));
	std::vector<std::vector<double>> rp(n), rb(n);
	for (size_t i = 0; i < n; i++) {
		rp[i].assign(p.b[i].h.begin() + t.off[i], p.b[i].h.end());
		rb[i].assign(t.numel[i], 0.0);
	}
	for (int step = 0; step < 3; step++) {
		g.fill(kt_normal);
		cudaError_t e = sg_launch_sgd<T>((int)n, p.p.data(), (const T *const *)g.p.data(),
		                                 buf.p.data(), t.numel.data(), lr, mom, wd, nesterov, 0);
		KT_CHECK(e == cudaSuccess, "%s: launch %s", name, cudaGetErrorString(e));
		/* torch.optim.SGD (foreach: each step's result stored in T), buf
		 * starting as the first gradient (here: zeros). */
		for (size_t i = 0; i < n; i++)
			for (long long j = 0; j < t.numel[i]; j++) {
				double gr = g.b[i].h[t.off[i] + j];
				if (wd != 0)
					gr = kt_round<T>(gr + wd * rp[i][j]);
				if (mom != 0) {
					rb[i][j] = step == 0 ? gr : kt_round<T>(kt_round<T>(mom * rb[i][j]) + gr);
					gr = nesterov ? kt_round<T>(gr + mom * rb[i][j]) : rb[i][j];
				}
				rp[i][j] = kt_round<T>(rp[i][j] - lr * gr);
			}
	}
	KT_CUDA(cudaDeviceSynchronize());
	p.get();
	KtErr ep = set_err(p, rp, t);
	printf("%-60s param rel %.2e", name, ep.rel);
	KT_CHECK(ep.nan == 0 && ep.rel <= tol<T>(), "%s: param rel %.3e (nan %zu)", name, ep.rel, ep.nan);
	if (mom != 0) {
		buf.get();
		KtErr eb = set_err(buf, rb, t);
		printf(", momentum_buffer rel %.2e", eb.rel);
		KT_CHECK(eb.nan == 0 && eb.rel <= tol<T>(), "%s: buffer rel %.3e", name, eb.rel);
	}
	printf("\n");
	p.release(), g.release(), buf.release();
}

/* ------------------------------------------------------------------ AdamW */

template <class T>
static void test_adamw(double lr, double b1, double b2, double eps, double wd, bool big,
                       const char *dump)
{
	char name[160];
	snprintf(name, sizeof name, "adamw %s lr=%g betas=(%g,%g) eps=%g wd=%g", kt_dt<T>::name(), lr,
	         b1, b2, eps, wd);
	Tensors t = sizes(big);
	if (dump) {
		t.numel = {1000, 7, 65537};
		t.off = {0, 0, 0};
	}
	const size_t n = t.numel.size();
	Set<T> p, g, m, v;
	p.alloc(t), g.alloc(t), m.alloc(t), v.alloc(t);
	p.fill(kt_normal);
	std::vector<float> step0(n);
	std::vector<std::vector<double>> rp(n), rm(n), rv(n);
	std::vector<float *> steps(n);
	float *dsteps;
	KT_CUDA(cudaMalloc(&dsteps, n * 4));
	for (size_t i = 0; i < n; i++) {
		steps[i] = dsteps + i;
		/* Tensor 3 resumes from step 5 with state; the rest start fresh. */
		const bool resumed = i == 3 && !dump;
		step0[i] = resumed ? 5.f : 0.f;
		if (resumed) {
			m.b[i].fill([] { return 0.1 * kt_normal(); });
			v.b[i].fill([] { return 0.01 * kt_unif(0, 1); });
		} else {
			m.b[i].fill([] { return 0.0; });
			v.b[i].fill([] { return 0.0; });
		}
		rp[i].assign(p.b[i].h.begin() + t.off[i], p.b[i].h.end());
		rm[i].assign(m.b[i].h.begin() + t.off[i], m.b[i].h.end());
		rv[i].assign(v.b[i].h.begin() + t.off[i], v.b[i].h.end());
	}
	KT_CUDA(cudaMemcpy(dsteps, step0.data(), n * 4, cudaMemcpyHostToDevice));
	KtDump d;
	d.open(dump, kt_dt<T>::name()[0] == 'b' ? "adamw_bf16" : "adamw_f32", "adamw");
	d.attrs("dtype", kt_dt<T>::name());
	d.attr("lr", lr), d.attr("beta1", b1), d.attr("beta2", b2), d.attr("eps", eps);
	d.attr("weight_decay", wd), d.attr("ntensors", n), d.attr("steps", 3);
	for (size_t i = 0; i < n; i++) {
		char k[32];
		snprintf(k, sizeof k, "p%zu", i);
		d.tensor(k, rp[i], {(long)t.numel[i]});
	}
	for (int s = 0; s < 3; s++) {
		g.fill(kt_normal);
		for (size_t i = 0; i < n; i++) {
			char k[32];
			snprintf(k, sizeof k, "g%d_%zu", s, i);
			d.tensor(k, std::vector<double>(g.b[i].h.begin() + t.off[i], g.b[i].h.end()),
			         {(long)t.numel[i]});
		}
		cudaError_t e = sg_launch_adamw<T>((int)n, p.p.data(), (const T *const *)g.p.data(),
		                                   m.p.data(), v.p.data(), steps.data(), t.numel.data(), lr,
		                                   b1, b2, eps, wd, 0);
		KT_CHECK(e == cudaSuccess, "%s: launch %s", name, cudaGetErrorString(e));
		/* torch.optim.AdamW (foreach), in double, rounding to T what each
		 * of its steps stores. */
		for (size_t i = 0; i < n; i++) {
			const double st = step0[i] + s + 1;
			const double bc1 = 1 - pow(b1, st), bc2 = 1 - pow(b2, st);
			for (long long j = 0; j < t.numel[i]; j++) {
				const double gr = g.b[i].h[t.off[i] + j];
				const double pp = kt_round<T>(rp[i][j] * (1 - lr * wd));
				rm[i][j] = kt_round<T>(rm[i][j] + (1 - b1) * (gr - rm[i][j]));
				rv[i][j] = kt_round<T>(kt_round<T>(rv[i][j] * b2) + (1 - b2) * gr * gr);
				double den = kt_round<T>(sqrt(rv[i][j]));
				den = kt_round<T>(den / sqrt(bc2));
				den = kt_round<T>(den + eps);
				rp[i][j] = kt_round<T>(pp - lr / bc1 * (rm[i][j] / den));
			}
		}
	}
	KT_CUDA(cudaDeviceSynchronize());
	p.get(), m.get(), v.get();
	std::vector<float> hs(n);
	KT_CUDA(cudaMemcpy(hs.data(), dsteps, n * 4, cudaMemcpyDeviceToHost));
	int badstep = 0;
	for (size_t i = 0; i < n; i++)
		badstep += hs[i] != step0[i] + 3;
	KtErr ep = set_err(p, rp, t), em = set_err(m, rm, t), ev = set_err(v, rv, t);
	printf("%-60s param rel %.2e, exp_avg %.2e, exp_avg_sq %.2e\n", name, ep.rel, em.rel, ev.rel);
	KT_CHECK(badstep == 0, "%s: %d step counts are not step0 + 3", name, badstep);
	KT_CHECK(ep.nan == 0 && ep.rel <= tol<T>(), "%s: param rel %.3e", name, ep.rel);
	KT_CHECK(em.nan == 0 && em.rel <= tol<T>(), "%s: exp_avg rel %.3e", name, em.rel);
	KT_CHECK(ev.nan == 0 && ev.rel <= tol<T>() * 2, "%s: exp_avg_sq rel %.3e", name, ev.rel);
	for (size_t i = 0; i < n; i++) {
		char k[32];
		snprintf(k, sizeof k, "out_p%zu", i);
		d.tensor(k, std::vector<double>(p.b[i].h.begin() + t.off[i], p.b[i].h.end()),
		         {(long)t.numel[i]});
		snprintf(k, sizeof k, "out_m%zu", i);
		d.tensor(k, std::vector<double>(m.b[i].h.begin() + t.off[i], m.b[i].h.end()),
		         {(long)t.numel[i]});
		snprintf(k, sizeof k, "out_v%zu", i);
		d.tensor(k, std::vector<double>(v.b[i].h.begin() + t.off[i], v.b[i].h.end()),
		         {(long)t.numel[i]});
	}
	d.close();
	cudaFree(dsteps);
	p.release(), g.release(), m.release(), v.release();
}

/* ------------------------------------------------------------------ timings */

template <class T>
static void bench(int ntensor, long long numel, double copy)
{
	std::vector<T *> p(ntensor), g(ntensor), m(ntensor), v(ntensor);
	std::vector<long long> ne(ntensor, numel);
	std::vector<float *> st(ntensor);
	float *dst;
	KT_CUDA(cudaMalloc(&dst, ntensor * 4));
	KT_CUDA(cudaMemset(dst, 0, ntensor * 4));
	for (int i = 0; i < ntensor; i++) {
		T **all[] = {&p[i], &g[i], &m[i], &v[i]};
		for (T **x : all) {
			KT_CUDA(cudaMalloc(x, numel * sizeof(T)));
			KT_CUDA(cudaMemset(*x, 0x3c, numel * sizeof(T)));
		}
		st[i] = dst + i;
	}
	const double gb = (double)ntensor * numel * sizeof(T) / 1e9;
	double ms = kt_time([&] {
		sg_launch_adamw<T>(ntensor, p.data(), (const T *const *)g.data(), m.data(), v.data(),
		                   st.data(), ne.data(), 1e-3, 0.9, 0.999, 1e-8, 0.01, 0);
	}, 2, 10);
	printf("PERF adamw %s %d x %lld: %.3f ms, %.0f GB/s (7 passes) = %.0f%% of copy\n",
	       kt_dt<T>::name(), ntensor, numel, ms, 7 * gb / (ms * 1e-3), 100 * 7 * gb / (ms * 1e-3) / copy);
	ms = kt_time([&] {
		sg_launch_sgd<T>(ntensor, p.data(), (const T *const *)g.data(), m.data(), ne.data(), 1e-3,
		                 0.9, 1e-4, 0, 0);
	}, 2, 10);
	printf("PERF sgd momentum %s %d x %lld: %.3f ms, %.0f GB/s (5 passes) = %.0f%% of copy\n",
	       kt_dt<T>::name(), ntensor, numel, ms, 5 * gb / (ms * 1e-3), 100 * 5 * gb / (ms * 1e-3) / copy);
	KT_CUDA(cudaGetLastError());
	for (int i = 0; i < ntensor; i++) {
		cudaFree(p[i]);
		cudaFree(g[i]);
		cudaFree(m[i]);
		cudaFree(v[i]);
	}
	cudaFree(dst);
}

int main(int argc, char **argv)
{
	kt_start(argc, argv);
	const char *dump = kt_opt(argc, argv, "--dump");
	const bool quick = kt_flag(argc, argv, "--quick");
	test_sgd<float>(0.01, 0, 0, 0, false);
	test_sgd<float>(0.01, 0.9, 1e-4, 0, !quick);
	test_sgd<float>(0.05, 0.8, 0.01, 1, false);
	test_sgd<__nv_bfloat16>(0.01, 0.9, 1e-4, 0, false);
	test_adamw<float>(1e-3, 0.9, 0.999, 1e-8, 0.01, !quick, 0);
	test_adamw<float>(0.1, 0.6, 0.99, 1e-6, 0.1, false, 0);
	test_adamw<float>(0.1, 0.3, 0.9, 1e-6, 0, false, 0);
	test_adamw<__nv_bfloat16>(1e-3, 0.9, 0.999, 1e-8, 0.01, false, 0);
	test_adamw<__half>(1e-2, 0.9, 0.999, 1e-4, 0.01, false, 0);
	if (dump) {
		test_adamw<float>(1e-2, 0.9, 0.999, 1e-8, 0.01, false, dump);
		test_adamw<__nv_bfloat16>(1e-2, 0.9, 0.999, 1e-8, 0.01, false, dump);
	}
	if (!quick) {
		const double copy = kt_copy_gbps((size_t)1 << 31);
		printf("PERF device copy: %.0f GB/s\n", copy);
		bench<__nv_bfloat16>(8, 8192LL * 8192, copy);
		bench<float>(8, 4096LL * 8192, copy);
	}
	return kt_finish();
}
