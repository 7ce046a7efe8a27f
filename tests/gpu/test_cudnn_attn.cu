/*
 * test_cudnn_attn.cu - libsgrt's cuDNN attention (sgrt_sdpa) on a GPU
 * against the kernel library (sgk_attention.cuh's flash kernels), forward
 * (o, lse) and backward (dq, dk, dv), for bf16 and f16, causal or not,
 * head dims 64, 128, 256, packed [b, h, t, d] tensors or q, k, v as
 * slices of one [b, t, 3, h, d] buffer; one plan run again with new
 * buffers and with another scale (its kept variant pack made again); then
 * the times of both at the bench shape.  Built by
 * tests/gpu/run_cudnn_attention.sh.  Exit 0 when every case ran through
 * cuDNN and matched.
 */
#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "sgk_attention.cuh"
#include "sgrt.h"
#include "sgrt_codegen.h"

#define CK(x)                                                                        \
	do {                                                                         \
		cudaError_t e_ = (x);                                                \
		if (e_ != cudaSuccess) {                                             \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

template <class T>
__global__ void fill(T *p, size_t n, unsigned seed, float amp)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		unsigned x = (unsigned)i * 2654435761u ^ seed * 0x9e3779b9u;
		x ^= x >> 15, x *= 0x2c1b3c6du, x ^= x >> 12, x *= 0x297a2d39u, x ^= x >> 15;
		p[i] = (T)(((float)(x & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * amp);
	}
}

template <class T>
__global__ void absdiff(const T *a, const T *b, size_t n, float *out)
{
	/* out[0] = max |a - b|, out[1] = max |b| (atomics on float bits, >= 0) */
	float d = 0, m = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float x = (float)a[i], y = (float)b[i];
		float e = fabsf(x - y);
		if (!(e <= d)) /* NaN counts */
			d = isnan(e) ? INFINITY : e;
		m = fmaxf(m, fabsf(y));
	}
	atomicMax((int *)&out[0], __float_as_int(d));
	atomicMax((int *)&out[1], __float_as_int(m));
}

/* max |a - b| / max(max |b|, 1e-3) over n elements. */
template <class T>
static double rel(const T *a, const T *b, size_t n)
{
	float *d, h[2];
	CK(cudaMalloc(&d, 8));
	CK(cudaMemset(d, 0, 8));
	absdiff<T><<<512, 256>>>(a, b, n, d);
	CK(cudaMemcpy(h, d, 8, cudaMemcpyDeviceToHost));
	CK(cudaFree(d));
	return h[0] / fmax(h[1], 1e-3);
}

struct Case {
	int bf16, causal, packed;
	int b, h, l, s, d;
	float scale_mul; /* the scale: 1/sqrt(d) times this (0: 1) */
};

/* Buffers and strides of one case: q,k,v,o,do,dq,dk,dv. */
struct Bufs {
	void *qkv, *o, *dout, *dqkv, *o2, *dqkv2;
	float *lse, *lse2, *delta;
	SgFlashParams fp;
};

template <class T>
static void setup(const Case &c, Bufs &B)
{
	size_t es = sizeof(T);
	size_t nq = (size_t)c.b * c.h * c.l * c.d, nk = (size_t)c.b * c.h * c.s * c.d;
	size_t nqkv = c.packed ? nq + 2 * nk : nq * 3;
	CK(cudaMalloc(&B.qkv, nqkv * es));
	CK(cudaMalloc(&B.dqkv, nqkv * es));
	CK(cudaMalloc(&B.dqkv2, nqkv * es));
	CK(cudaMalloc(&B.o, nq * es));
	CK(cudaMalloc(&B.o2, nq * es));
	CK(cudaMalloc(&B.dout, nq * es));
	CK(cudaMalloc(&B.lse, nq / c.d * 4));
	CK(cudaMalloc(&B.lse2, nq / c.d * 4));
	fill<T><<<1024, 256>>>((T *)B.qkv, nqkv, 1, 1.0f);
	fill<T><<<1024, 256>>>((T *)B.dout, nq, 2, 1.0f);
	SgFlashParams &p = B.fp;
	float mul = c.scale_mul != 0 ? c.scale_mul : 1.0f;
	sg_flash_params_init(&p, c.b, c.h, c.l, c.s, c.d, c.d, mul / sqrtf((float)c.d), c.causal);
	T *q = (T *)B.qkv, *dq = (T *)B.dqkv;
	if (c.packed) { /* [b, h, t, d] each: the defaults */
		p.q = q, p.k = q + nq, p.v = q + nq + nk;
		p.dq = dq, p.dk = dq + nq, p.dv = dq + nq + nk;
	} else { /* slices of [b, t, 3, h, d] (l == s) */
		long long rs = 3LL * c.h * c.d, bs = rs * c.l;
		p.q = q, p.k = q + c.h * c.d, p.v = q + 2 * c.h * c.d;
		p.dq = dq, p.dk = dq + c.h * c.d, p.dv = dq + 2 * c.h * c.d;
		p.q_s0 = p.k_s0 = p.v_s0 = p.dq_s0 = p.dk_s0 = p.dv_s0 = bs;
		p.q_s1 = p.k_s1 = p.v_s1 = p.dq_s1 = p.dk_s1 = p.dv_s1 = c.d;
		p.q_sr = p.k_sr = p.v_sr = p.dq_sr = p.dk_sr = p.dv_sr = rs;
	}
	p.o = B.o, p.lse = B.lse, p.dout = B.dout;
	CK(cudaMalloc(&B.delta, sg_flash_bwd_workspace(&p)));
	p.delta = B.delta;
}

static void release(Bufs &B)
{
	void *p[] = {B.qkv, B.o, B.dout, B.dqkv, B.o2, B.dqkv2, B.lse, B.lse2, B.delta};
	for (void *x : p)
		CK(cudaFree(x));
}

/* sd: the cuDNN form of p with o, lse, dq, dk, dv redirected to the second buffers. */
static void to_cudnn(const Case &c, Bufs &B, SgrtSdpa *sd)
{
	SgFlashParams p = B.fp;
	p.o = B.o2, p.lse = B.lse2;
	p.dq = (char *)B.dqkv2 + ((char *)p.dq - (char *)B.dqkv);
	p.dk = (char *)B.dqkv2 + ((char *)p.dk - (char *)B.dqkv);
	p.dv = (char *)B.dqkv2 + ((char *)p.dv - (char *)B.dqkv);
	SGRT_SDPA_FROM_FLASH(sd, &p, c.bf16 ? SGRT_BF16 : SGRT_F16);
}

static const char *why(int st)
{
	return st == SGRT_SDPA_UNAVAILABLE ? "cuDNN unavailable"
	       : st == SGRT_SDPA_DECLINED  ? "cuDNN declined"
	                                   : "error";
}

template <class T>
static int check(SgrtModel *m, const Case &c)
{
	Bufs B;
	SgrtSdpa sd;
	setup<T>(c, B);
	to_cudnn(c, B, &sd);
	cudaStream_t st = sgrt_stream(m, 0);
	CK(sg_launch_flash_fwd<T>(&B.fp, st));
	int s1 = sgrt_sdpa(m, 0, &sd, 0, "sdpa[cudnn]", 1);
	CK(sg_launch_flash_bwd<T>(&B.fp, st));
	/* cuDNN's backward from cuDNN's o and lse */
	int s2 = s1 == SGRT_OK ? sgrt_sdpa(m, 0, &sd, 1, "sdpa_bwd[cudnn]", 1) : s1;
	CK(cudaStreamSynchronize(st));
	size_t nq = (size_t)c.b * c.h * c.l * c.d;
	size_t nqkv = c.packed ? nq + 2 * (size_t)c.b * c.h * c.s * c.d : 3 * nq;
	printf("%-4s %-6s %-7s %4d %4d %5d %5d %4d%s", c.bf16 ? "bf16" : "f16",
	       c.causal ? "causal" : "full", c.packed ? "bhtd" : "bt3hd", c.b, c.h, c.l, c.s, c.d,
	       c.scale_mul != 0 && c.scale_mul != 1 ? "*" : " ");
	if (s1 != SGRT_OK || s2 != SGRT_OK) {
		printf("  FAIL (%s: %s)\n", why(s1 != SGRT_OK ? s1 : s2), sgrt_last_error(m));
		sgrt_clear_error(m);
		release(B);
		return 1;
	}
	double eo = rel<T>((T *)B.o2, (T *)B.o, nq);
	double el = rel<float>(B.lse2, B.lse, nq / c.d);
	/* dq, dk, dv all at once: the whole qkv-shaped gradient buffer */
	double eg = rel<T>((T *)B.dqkv2, (T *)B.dqkv, nqkv);
	double tol = c.bf16 ? 2.5e-2 : 5e-3;
	int ok = eo < tol && el < 1e-3 && eg < 2 * tol;
	printf(" %9.2e %9.2e %9.2e  %s\n", eo, el, eg, ok ? "ok" : "FAIL");
	release(B);
	return !ok;
}

/* ms per call of f, median of 5 runs of 10. */
template <class F>
static double timeit(cudaStream_t st, F f)
{
	cudaEvent_t a, b;
	std::vector<float> t;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (int i = 0; i < 3; i++)
		f();
	for (int r = 0; r < 5; r++) {
		float ms;
		CK(cudaEventRecord(a, st));
		for (int i = 0; i < 10; i++)
			f();
		CK(cudaEventRecord(b, st));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		t.push_back(ms / 10);
	}
	std::sort(t.begin(), t.end());
	return t[2];
}

static int bench(SgrtModel *m)
{
	Case c = {1, 1, 0, 8, 16, 2048, 2048, 128};
	typedef __nv_bfloat16 T;
	Bufs B;
	SgrtSdpa sd;
	setup<T>(c, B);
	to_cudnn(c, B, &sd);
	cudaStream_t st = sgrt_stream(m, 0);
	int bad = 0;
	double kf = timeit(st, [&] { CK(sg_launch_flash_fwd<T>(&B.fp, st)); });
	double kb = timeit(st, [&] { CK(sg_launch_flash_bwd<T>(&B.fp, st)); });
	double cf = timeit(st, [&] { bad |= sgrt_sdpa(m, 0, &sd, 0, "f", 1); });
	double cb = timeit(st, [&] { bad |= sgrt_sdpa(m, 0, &sd, 1, "b", 1); });
	printf("\nbench: B=8 T=2048 H=16 D=128 causal bf16, q k v slices of [B,T,3,H,D] (ms per layer)\n");
	printf("  %-22s %8s %8s %8s %12s\n", "", "fwd", "bwd", "fwd+bwd", "8 layers");
	printf("  %-22s %8.3f %8.3f %8.3f %12.2f\n", "sgk (kernel library)", kf, kb, kf + kb, 8 * (kf + kb));
	if (bad)
		printf("  cuDNN: FAIL (%s)\n", sgrt_last_error(m));
	else
		printf("  %-22s %8.3f %8.3f %8.3f %12.2f   target <= 12 ms: %s\n", "cuDNN (sgrt_sdpa)", cf,
		       cb, cf + cb, 8 * (cf + cb), 8 * (cf + cb) <= 12.0 ? "met" : "NOT met");
	printf("BENCH_MS sgk_fwd=%.4f sgk_bwd=%.4f cudnn_fwd=%.4f cudnn_bwd=%.4f\n", kf, kb,
	       bad ? -1.0 : cf, bad ? -1.0 : cb);
	release(B);
	return bad != 0;
}

/* Every case against the kernel library: the number that failed. */
static int checks(SgrtModel *m)
{
	int fails = 0;
	printf("cuDNN vs kernel library: max|diff| / max|ref| of o, lse, and d(q,k,v)\n");
	printf("%-4s %-6s %-7s %4s %4s %5s %5s %4s  %9s %9s %9s\n", "dt", "mask", "layout", "B",
	       "H", "Tq", "Tkv", "D", "o", "lse", "dqkv");
	int dims[3] = {64, 128, 256};
	for (int bf = 1; bf >= 0; bf--)
		for (int ca = 1; ca >= 0; ca--)
			for (int di = 0; di < 3; di++) {
				Case c = {bf, ca, di != 1, 2, 4, 384, 384, dims[di]};
				fails += bf ? check<__nv_bfloat16>(m, c) : check<__half>(m, c);
			}
	/* The last three: one plan's variant pack with new buffers and then a
	 * new scale (marked *), which must make it again. */
	Case extra[] = {{1, 0, 1, 1, 8, 128, 512, 128}, {1, 1, 1, 1, 8, 512, 128, 128},
	                {0, 1, 1, 3, 2, 200, 200, 64}, {1, 1, 0, 4, 16, 1024, 1024, 128},
	                {1, 1, 0, 4, 16, 1024, 1024, 128}, {1, 1, 0, 4, 16, 1024, 1024, 128, 0.5f},
	                {1, 1, 0, 4, 16, 1024, 1024, 128, 0.5f}};
	for (const Case &c : extra)
		fails += c.bf16 ? check<__nv_bfloat16>(m, c) : check<__half>(m, c);
	return fails;
}

int main(int argc, char **argv)
{
	/* --bench-only: the timing at the bench shape, no checks (the knobs'
	 * search, bench/kernels/attn_search.py) */
	int bench_only = argc > 1 && !strcmp(argv[1], "--bench-only");
	SgrtConfig cfg;
	SgrtModel *m = NULL;
	cudaStream_t st;
	memset(&cfg, 0, sizeof cfg);
	cfg.graph = "cudnn_attn";
	cfg.sgfile = "";
	cfg.device = -1;
	if (sgrt_create(&m, &cfg) != SGRT_OK) {
		fprintf(stderr, "sgrt_create: %s\n", sgrt_last_error(m));
		return 1;
	}
	CK(cudaStreamCreate(&st));
	sgrt_call_begin(m, st);
	int fails = bench_only ? 0 : checks(m);
	fails += bench(m);
	sgrt_call_end(m);
	printf("\n%s\n", fails ? "FAILURES above" : "all cases passed");
	sgrt_destroy(m);
	return fails ? 1 : 0;
}
