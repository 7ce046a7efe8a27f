/*
 * ktest.h - what the kernel-library harnesses share: pass/fail counting,
 * checked CUDA calls, host-side random numbers and dtype rounding, device
 * buffers filled from the host, error norms, event timing, the device-copy
 * bandwidth ceiling, and dumps of small cases for tests/gpu/kernels/
 * torch_check.py (one folder a case: meta.txt and raw little-endian
 * NAME.f32 / NAME.i64 files).
 *
 * Each harness prints its figures, then "N passed, M failed", and exits 0
 * when nothing failed, 1 otherwise, 77 when there is no GPU.
 */
#ifndef KTEST_H
#define KTEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <algorithm>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

static int kt_npass, kt_nfail;

/* Counts one check; prints the failure with a formatted explanation. */
#define KT_CHECK(cond, ...)                                                   \
	do {                                                                  \
		if (cond) {                                                   \
			kt_npass++;                                           \
		} else {                                                      \
			kt_nfail++;                                           \
			fprintf(stdout, "FAIL %s:%d: ", __FILE__, __LINE__);  \
			fprintf(stdout, __VA_ARGS__);                         \
			fprintf(stdout, "\n");                                \
		}                                                             \
	} while (0)

/* A CUDA call that must succeed: a failure is fatal (later results would
 * mean nothing). */
#define KT_CUDA(call)                                                         \
	do {                                                                  \
		cudaError_t e_ = (call);                                      \
		if (e_ != cudaSuccess) {                                      \
			fprintf(stdout, "FATAL %s:%d: %s: %s\n", __FILE__,    \
			        __LINE__, #call, cudaGetErrorString(e_));     \
			kt_nfail++;                                           \
			kt_finish();                                          \
		}                                                             \
	} while (0)

static int kt_finish(void)
{
	printf("%d passed, %d failed\n", kt_npass, kt_nfail);
	fflush(stdout);
	exit(kt_nfail ? 1 : 0);
}

/* Starts a harness: with --probe exits 0 at once (the binary loads and
 * runs on this machine); skips (exit 77) when no GPU is present. */
static void kt_start(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--probe"))
			exit(0);
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("no GPU: skipped\n");
		exit(77);
	}
	cudaDeviceProp pr;
	cudaGetDeviceProperties(&pr, 0);
	printf("device: %s, %d SMs, %.0f GiB\n", pr.name, pr.multiProcessorCount,
	       pr.totalGlobalMem / 1073741824.0);
}

/* ------------------------------------------------------------------ random numbers */

static uint64_t kt_rng_state = 0x853c49e6748fea9bull;

static uint64_t kt_next(void)
{
	uint64_t z = (kt_rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static double kt_unif(double lo, double hi)
{
	return lo + (hi - lo) * ((kt_next() >> 11) * (1.0 / 9007199254740992.0));
}

/* Standard normal (Box-Muller). */
static double kt_normal(void)
{
	double u = kt_unif(1e-12, 1.0), v = kt_unif(0.0, 1.0);
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* ------------------------------------------------------------------ dtypes on the host */

template <class T> struct kt_dt;
template <> struct kt_dt<float> {
	static float from(double x) { return (float)x; }
	static double to(float x) { return x; }
	static const char *name() { return "f32"; }
};
template <> struct kt_dt<double> {
	static double from(double x) { return x; }
	static double to(double x) { return x; }
	static const char *name() { return "f64"; }
};
template <> struct kt_dt<__half> {
	static __half from(double x) { return __float2half_rn((float)x); }
	static double to(__half x) { return __half2float(x); }
	static const char *name() { return "f16"; }
};
template <> struct kt_dt<__nv_bfloat16> {
	static __nv_bfloat16 from(double x) { return __float2bfloat16_rn((float)x); }
	static double to(__nv_bfloat16 x) { return __bfloat162float(x); }
	static const char *name() { return "bf16"; }
};

/* Rounds x as T would store it. */
template <class T>
static double kt_round(double x)
{
	return kt_dt<T>::to(kt_dt<T>::from(x));
}

/* ------------------------------------------------------------------ device buffers */

/* A device array of n T with a host mirror in double. */
template <class T>
struct KtBuf {
	T *d = 0;
	size_t n = 0;
	std::vector<double> h;   /* values as stored (rounded to T) */

	void alloc(size_t count)
	{
		n = count;
		h.assign(n, 0.0);
		KT_CUDA(cudaMalloc(&d, (n ? n : 1) * sizeof(T)));
	}
	/* Fills with values from f(), rounded to T, and uploads. */
	template <class F> void fill(F f)
	{
		std::vector<T> t(n);
		for (size_t i = 0; i < n; i++) {
			t[i] = kt_dt<T>::from(f());
			h[i] = kt_dt<T>::to(t[i]);
		}
		KT_CUDA(cudaMemcpy(d, t.data(), n * sizeof(T), cudaMemcpyHostToDevice));
	}
	/* Sets every byte to 0xff: NaN for every float type. */
	void poison() { KT_CUDA(cudaMemset(d, 0xff, n * sizeof(T))); }
	/* Downloads into h. */
	void get()
	{
		std::vector<T> t(n);
		KT_CUDA(cudaMemcpy(t.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < n; i++)
			h[i] = kt_dt<T>::to(t[i]);
	}
	void release()
	{
		cudaFree(d);
		d = 0;
		h.clear();
		h.shrink_to_fit();
	}
};

/* ------------------------------------------------------------------ errors */

/* ||out - ref|| / ||ref|| over the indices where use(i) (all when NULL),
 * the largest absolute error and where it is; NaN in out gives inf. */
struct KtErr {
	double rel, maxabs, refmax;
	size_t at, nan;
};

static KtErr kt_err(const double *out, const double *ref, size_t n, const unsigned char *use = 0)
{
	KtErr e = {0, 0, 0, 0, 0};
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (use && !use[i])
			continue;
		const double d = out[i] - ref[i];
		if (out[i] != out[i]) {
			if (ref[i] == ref[i]) {
				e.nan++;
				if (e.nan == 1)
					e.at = i;
			}
			continue;
		}
		num += d * d;
		den += ref[i] * ref[i];
		if (fabs(d) > e.maxabs) {
			e.maxabs = fabs(d);
			e.at = i;
		}
		e.refmax = std::max(e.refmax, fabs(ref[i]));
	}
	e.rel = e.nan ? INFINITY : den > 0 ? sqrt(num / den) : sqrt(num);
	return e;
}

/* ------------------------------------------------------------------ timing */

/* Median milliseconds of `reps` runs of f after `warm` runs, timed with
 * events around each run. */
template <class F>
static double kt_time(F f, int warm, int reps)
{
	cudaEvent_t a, b;
	KT_CUDA(cudaEventCreate(&a));
	KT_CUDA(cudaEventCreate(&b));
	for (int i = 0; i < warm; i++)
		f();
	std::vector<float> ms;
	for (int i = 0; i < reps; i++) {
		KT_CUDA(cudaEventRecord(a));
		f();
		KT_CUDA(cudaEventRecord(b));
		KT_CUDA(cudaEventSynchronize(b));
		float t;
		KT_CUDA(cudaEventElapsedTime(&t, a, b));
		ms.push_back(t);
	}
	KT_CUDA(cudaGetLastError());
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	std::sort(ms.begin(), ms.end());
	return ms[ms.size() / 2];
}

/* GB/s of a device-to-device copy of `bytes` (read + write counted). */
static double kt_copy_gbps(size_t bytes)
{
	void *a, *b;
	KT_CUDA(cudaMalloc(&a, bytes));
	KT_CUDA(cudaMalloc(&b, bytes));
	KT_CUDA(cudaMemset(a, 1, bytes));
	double ms = kt_time([&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); }, 3, 20);
	cudaFree(a);
	cudaFree(b);
	return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

/* ------------------------------------------------------------------ dumps */

/* A case folder for torch_check.py: DIR/NAME/meta.txt and tensor files.
 * Disabled (all calls do nothing) when dir is NULL. */
struct KtDump {
	FILE *meta = 0;
	char path[512];

	void open(const char *dir, const char *name, const char *kind)
	{
		if (!dir)
			return;
		mkdir(dir, 0777);
		snprintf(path, sizeof path, "%s/%s", dir, name);
		mkdir(path, 0777);
		char m[600];
		snprintf(m, sizeof m, "%s/meta.txt", path);
		meta = fopen(m, "w");
		if (meta)
			fprintf(meta, "kind %s\n", kind);
	}
	void attr(const char *k, double v)
	{
		if (meta)
			fprintf(meta, "%s %.17g\n", k, v);
	}
	void attrs(const char *k, const char *v)
	{
		if (meta)
			fprintf(meta, "%s %s\n", k, v);
	}
	/* A tensor of the given shape from doubles, as f32. */
	void tensor(const char *name, const std::vector<double> &h, std::vector<long> shape)
	{
		if (!meta)
			return;
		fprintf(meta, "tensor %s", name);
		for (long s : shape)
			fprintf(meta, " %ld", s);
		fprintf(meta, "\n");
		char f[700];
		snprintf(f, sizeof f, "%s/%s.f32", path, name);
		FILE *o = fopen(f, "wb");
		if (!o)
			return;
		for (double x : h) {
			float v = (float)x;
			fwrite(&v, 4, 1, o);
		}
		fclose(o);
	}
	void tensor_i64(const char *name, const std::vector<long long> &h, std::vector<long> shape)
	{
		if (!meta)
			return;
		fprintf(meta, "itensor %s", name);
		for (long s : shape)
			fprintf(meta, " %ld", s);
		fprintf(meta, "\n");
		char f[700];
		snprintf(f, sizeof f, "%s/%s.i64", path, name);
		FILE *o = fopen(f, "wb");
		if (!o)
			return;
		fwrite(h.data(), 8, h.size(), o);
		fclose(o);
	}
	void close()
	{
		if (meta)
			fclose(meta);
		meta = 0;
	}
};

/* The value of option `name` (e.g. "--dump") in argv, or NULL. */
static const char *kt_opt(int argc, char **argv, const char *name)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return 0;
}

static bool kt_flag(int argc, char **argv, const char *name)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return true;
	return false;
}

#endif /* KTEST_H */
