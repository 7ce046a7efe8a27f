/*
 * test_sgrt.cu - libsgrt on a GPU: streams and events, the arena and the
 * memory accounting, cuBLASLt products against a CPU reference, the
 * trace, the error paths (a failing call, a bad launch, a fault inside a
 * kernel with SGRT_SYNC=1), NCCL with one rank, and the driver
 * (sgrt_main) on a small hand-written "generated" graph.
 *
 * Built as generated code is: nvcc -arch=sm_90 test_sgrt.cu -lsgrt ...
 * Prints "N passed, M failed"; exits 0 when nothing failed, 1 otherwise,
 * 77 (skipped) when there is no GPU.
 *
 * Started once per GPU with WORLD_SIZE > 1 (and RANK, LOCAL_RANK), it
 * checks the collectives across ranks instead:
 *   for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r ./test_sgrt_gpu &
 *   done; wait
 */
#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cjson/cJSON.h>

#include "sgrt.h"
extern "C" {
#include "init.h"
}

static int npass, nfail;

#define CHECK(cond)                                                           \
	do {                                                                  \
		if (cond) {                                                   \
			npass++;                                              \
		} else {                                                      \
			nfail++;                                              \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__,         \
			        __LINE__, #cond);                             \
		}                                                             \
	} while (0)
#define CHECK_OK(expr, m)                                                     \
	do {                                                                  \
		int rc_ = (expr);                                             \
		if (rc_ != SGRT_OK)                                           \
			fprintf(stderr, "  rc %d: %s\n", rc_,                 \
			        (m) ? sgrt_last_error(m) : "");               \
		CHECK(rc_ == SGRT_OK);                                        \
	} while (0)

/* ------------------------------------------------------------------ kernels */

__global__ void
k_fill(float *x, float v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] = v;
}

/* y = x + v */
__global__ void
k_add(float *y, const float *x, float v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = x[i] + v;
}

/* Busy for about `ns` nanoseconds: makes an unordered read observable. */
__global__ void
k_spin(long long ns)
{
	long long t0 = clock64();
	/* clock64 ticks at about 1.7-2 GHz on an H200; 2 ticks per ns. */
	while (clock64() - t0 < 2 * ns)
		;
}

__global__ void
k_fault(float *p)
{
	p[threadIdx.x] = 1.0f;
}

static const char *const stream_names[] = { "side", "comm" };
static const int stream_prios[] = { -1, 0 };
static const char *const event_names[] = { "e0", "e1" };

/* A model with streams side (priority -1) and comm, events e0 and e1, and
 * a 4 MiB arena. */
static SgrtModel *
new_model(const char *sgfile)
{
	SgrtConfig cfg;
	SgrtModel *m = NULL;

	memset(&cfg, 0, sizeof cfg);
	cfg.graph = "g";
	cfg.sgfile = sgfile;
	cfg.device = 0;
	cfg.nstreams = 2;
	cfg.stream_names = stream_names;
	cfg.stream_priorities = stream_prios;
	cfg.nevents = 2;
	cfg.event_names = event_names;
	cfg.arena_bytes = 4 << 20;
	if (sgrt_create(&m, &cfg) != SGRT_OK) {
		fprintf(stderr, "sgrt_create: %s\n", sgrt_last_error(m));
		exit(1);
	}
	return m;
}

static void
to_host(void *dst, const void *src, size_t n)
{
	cudaDeviceSynchronize();
	cudaMemcpy(dst, src, n, cudaMemcpyDefault);
}

/* ------------------------------------------------------------------ streams and events */

/* Work on `side` and `comm` that `default` reads after record/wait and
 * wait_stream; the spins make a missing order show as wrong values. */
static int
ordered_call(SgrtModel *m, cudaStream_t cs, int n)
{
	float *a = (float *)SGRT_AT(m, 0), *b = (float *)SGRT_AT(m, 1 << 20);
	float *c = (float *)SGRT_AT(m, 2 << 20), *d = (float *)SGRT_AT(m, 3 << 20);

	SGRT_TRY(sgrt_call_begin(m, cs));
	SGRT_KERNEL(m, 1, "spin", 3, k_spin<<<1, 1, 0, sgrt_stream(m, 1)>>>(2000000));
	SGRT_KERNEL(m, 1, "fill a", 4,
	            k_fill<<<(n + 255) / 256, 256, 0, sgrt_stream(m, 1)>>>(a, 3, n));
	SGRT_TRY(sgrt_record(m, 0, 1, 5));
	SGRT_TRY(sgrt_wait(m, 0, 0, 6));
	SGRT_KERNEL(m, 0, "b = a + 1", 7,
	            k_add<<<(n + 255) / 256, 256, 0, sgrt_stream(m, 0)>>>(b, a, 1, n));
	SGRT_KERNEL(m, 2, "spin", 8, k_spin<<<1, 1, 0, sgrt_stream(m, 2)>>>(2000000));
	SGRT_KERNEL(m, 2, "fill c", 9,
	            k_fill<<<(n + 255) / 256, 256, 0, sgrt_stream(m, 2)>>>(c, 7, n));
	SGRT_TRY(sgrt_wait_stream(m, 0, 2, 10));
	SGRT_KERNEL(m, 0, "d = c + 1", 11,
	            k_add<<<(n + 255) / 256, 256, 0, sgrt_stream(m, 0)>>>(d, c, 1, n));
	SGRT_TRY(sgrt_join_all(m, 12));
	return sgrt_call_end(m);
}

static void
test_streams(void)
{
	SgrtModel *m = new_model("streams.sg");
	cudaStream_t cs;
	unsigned flags = 0;
	int least, greatest, prio = 99, n = 1 << 18, i, bad = 0;
	float *b = (float *)malloc(n * 4), *d = (float *)malloc(n * 4);
	cudaEvent_t ext;

	cudaStreamCreate(&cs);
	CHECK(sgrt_nstreams(m) == 3);
	CHECK(!strcmp(sgrt_stream_name(m, 0), "default"));
	CHECK(!strcmp(sgrt_stream_name(m, 1), "side"));
	CHECK(sgrt_stream(m, 3) == NULL && sgrt_event(m, 2) == NULL);
	cudaDeviceGetStreamPriorityRange(&least, &greatest);
	cudaStreamGetPriority(sgrt_stream(m, 1), &prio);
	CHECK(prio == (-1 < greatest ? greatest : -1));
	cudaStreamGetFlags(sgrt_stream(m, 2), &flags);
	CHECK(flags & cudaStreamNonBlocking);

	CHECK_OK(ordered_call(m, cs, n), m);
	CHECK(sgrt_stream(m, 0) == cs);
	CHECK(sgrt_kernel_count(m) == 6);
	cudaStreamSynchronize(cs);
	to_host(b, SGRT_AT(m, 1 << 20), n * 4);
	to_host(d, SGRT_AT(m, 3 << 20), n * 4);
	for (i = 0; i < n; i++)
		bad += b[i] != 4 || d[i] != 8;
	CHECK(bad == 0);

	/* An extern event recorded on side completes with side's work. */
	cudaEventCreateWithFlags(&ext, cudaEventDisableTiming);
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK_OK(sgrt_record_ext(m, ext, 1, 20), m);
	CHECK_OK(sgrt_wait_ext(m, ext, 0, 21), m);
	CHECK_OK(sgrt_call_end(m), m);
	CHECK(cudaEventSynchronize(ext) == cudaSuccess);
	CHECK_OK(sgrt_synchronize(m, 22), m);

	/* Bad indices are refused with the line. */
	CHECK(sgrt_record(m, 5, 0, 30) == SGRT_EUSAGE);
	CHECK(strstr(sgrt_last_error(m), "streams.sg:30: no event 5") != NULL);
	sgrt_clear_error(m);
	CHECK(sgrt_wait_stream(m, 0, 9, 31) == SGRT_EUSAGE);
	cudaEventDestroy(ext);
	cudaStreamDestroy(cs);
	sgrt_destroy(m);
	free(b);
	free(d);
}

/* ------------------------------------------------------------------ memory */

static void
test_memory(void)
{
	SgrtModel *m = new_model("mem.sg");
	size_t live0 = sgrt_live_bytes(m), peak0;
	void *p = NULL, *q = NULL, *h = NULL;
	cudaStream_t cs;
	float *hf;
	int i, bad = 0;

	cudaStreamCreate(&cs);
	CHECK(live0 == (size_t)4 << 20);
	CHECK(sgrt_arena(m) != NULL && sgrt_arena_bytes(m) == (size_t)4 << 20);
	CHECK(((uintptr_t)sgrt_arena(m) & 255) == 0);
	CHECK_OK(sgrt_device_alloc(m, &p, 1 << 20, "w", 1), m);
	CHECK(sgrt_live_bytes(m) == live0 + (1 << 20));
	peak0 = sgrt_peak_bytes(m);
	CHECK(peak0 == live0 + (1 << 20));
	CHECK_OK(sgrt_device_free(m, p), m);
	CHECK(sgrt_live_bytes(m) == live0 && sgrt_peak_bytes(m) == peak0);
	sgrt_reset_peak(m);
	CHECK(sgrt_peak_bytes(m) == live0);

	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK_OK(sgrt_alloc_async(m, &q, 2 << 20, 1, 2), m);
	CHECK(sgrt_live_bytes(m) == live0 + (2 << 20));
	CHECK_OK(sgrt_memset(m, 1, q, 0, 2 << 20, NULL, 3), m);
	CHECK_OK(sgrt_free_async(m, q, 1, 4), m);
	CHECK(sgrt_live_bytes(m) == live0);
	CHECK(sgrt_peak_bytes(m) == live0 + (2 << 20));

	/* Pinned memory: a device -> host copy and a memset. */
	CHECK_OK(sgrt_host_alloc(m, &h, 4096, 5), m);
	hf = (float *)h;
	k_fill<<<4, 256, 0, cs>>>((float *)sgrt_arena(m), 2.5f, 1024);
	CHECK_OK(sgrt_copy(m, 0, h, sgrt_arena(m), 4096, "to_host %x", 6), m);
	CHECK_OK(sgrt_call_end(m), m);
	cudaStreamSynchronize(cs);
	for (i = 0; i < 1024; i++)
		bad += hf[i] != 2.5f;
	CHECK(bad == 0);
	CHECK(sgrt_live_bytes(m) == live0); /* pinned memory is not counted */
	CHECK_OK(sgrt_host_free(m, h), m);

	CHECK(sgrt_device_free(m, (void *)0x1000) == SGRT_EUSAGE);
	sgrt_clear_error(m);
	/* An allocation too large for the device fails with the bytes named. */
	CHECK(sgrt_device_alloc(m, &p, (size_t)1 << 50, "huge", 9) == SGRT_ECUDA);
	CHECK(strstr(sgrt_last_error(m), "mem.sg:9: cudaMalloc failed: ") != NULL);
	CHECK(strstr(sgrt_last_error(m), "of huge") != NULL);
	CHECK(p == NULL);
	/* Buffers still owned at destruction are freed by it. */
	CHECK_OK(sgrt_device_alloc(m, &p, 1 << 20, "left", 1), m);
	cudaStreamDestroy(cs);
	sgrt_destroy(m);
}

/* ------------------------------------------------------------------ cuBLASLt */

/* Element (i, j) of a row-major matrix with row stride ld. */
static double
at(const double *x, int64_t ld, int64_t i, int64_t j)
{
	return x[i * ld + j];
}

/* Rounds v to dtype, as the device holds it. */
static double
round_to(int dtype, double v)
{
	if (dtype == SGRT_F16)
		return __half2float(__float2half_rn((float)v));
	if (dtype == SGRT_BF16)
		return __bfloat162float(__float2bfloat16_rn((float)v));
	if (dtype == SGRT_F32)
		return (float)v;
	return v;
}

/* Host values into device bytes of dtype. */
static void
upload_as(int dtype, void *dev, const double *x, size_t n)
{
	size_t es = dtype == SGRT_F64 ? 8 : dtype == SGRT_F32 ? 4 : 2, i;
	unsigned char *buf = (unsigned char *)malloc(n * es);

	for (i = 0; i < n; i++) {
		if (dtype == SGRT_F64)
			memcpy(buf + i * 8, &x[i], 8);
		else if (dtype == SGRT_F32) {
			float f = (float)x[i];
			memcpy(buf + i * 4, &f, 4);
		} else if (dtype == SGRT_F16) {
			__half h = __float2half_rn((float)x[i]);
			memcpy(buf + i * 2, &h, 2);
		} else {
			__nv_bfloat16 h = __float2bfloat16_rn((float)x[i]);
			memcpy(buf + i * 2, &h, 2);
		}
	}
	cudaMemcpy(dev, buf, n * es, cudaMemcpyHostToDevice);
	free(buf);
}

static void
download_as(int dtype, double *x, const void *dev, size_t n)
{
	size_t es = dtype == SGRT_F64 ? 8 : dtype == SGRT_F32 ? 4 : 2, i;
	unsigned char *buf = (unsigned char *)malloc(n * es);

	cudaDeviceSynchronize();
	cudaMemcpy(buf, dev, n * es, cudaMemcpyDeviceToHost);
	for (i = 0; i < n; i++) {
		if (dtype == SGRT_F64)
			memcpy(&x[i], buf + i * 8, 8);
		else if (dtype == SGRT_F32) {
			float f;
			memcpy(&f, buf + i * 4, 4);
			x[i] = f;
		} else if (dtype == SGRT_F16) {
			__half h;
			memcpy(&h, buf + i * 2, 2);
			x[i] = __half2float(h);
		} else {
			__nv_bfloat16 h;
			memcpy(&h, buf + i * 2, 2);
			x[i] = __bfloat162float(h);
		}
	}
	free(buf);
}

/* One product checked against a double-precision reference on the
 * rounded inputs.  `offset` misaligns A by that many bytes; `cin` 1 reads
 * C from a buffer of its own (SgrtGemm.c_in, a residual), D's holding
 * NaNs before; 2 gives c_in as D itself. */
static void
gemm_case(SgrtModel *m, int dtype, int ta, int tb, int64_t M, int64_t N,
          int64_t K, int64_t batch, int bcast_a, int bias, double beta,
          size_t offset, int cin)
{
	int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
	int64_t sa = bcast_a ? 0 : M * K, sb = K * N, sc = M * N;
	int64_t nb = batch > 1 ? batch : 1;
	size_t na = (size_t)(bcast_a ? 1 : nb) * M * K, nbb = (size_t)nb * K * N;
	size_t nc = (size_t)nb * M * N, i;
	double *A = (double *)malloc(na * 8), *B = (double *)malloc(nbb * 8);
	double *C = (double *)malloc(nc * 8), *D = (double *)malloc(nc * 8);
	double *bv = (double *)malloc(N * 8), maxerr = 0, tol;
	char *dev = (char *)sgrt_arena(m);
	void *da = dev + offset, *db = dev + (1 << 20), *dc = dev + (2 << 20);
	void *dbias = dev + (3 << 20), *dcin = dev + (3 << 20) + (512 << 10);
	SgrtGemm g;
	int64_t bt, r, c, k;

	srand(1234);
	for (i = 0; i < na; i++)
		A[i] = round_to(dtype, rand() / (double)RAND_MAX - 0.5);
	for (i = 0; i < nbb; i++)
		B[i] = round_to(dtype, rand() / (double)RAND_MAX - 0.5);
	for (i = 0; i < nc; i++)
		C[i] = round_to(dtype, rand() / (double)RAND_MAX - 0.5);
	for (i = 0; i < (size_t)N; i++)
		bv[i] = round_to(dtype, rand() / (double)RAND_MAX - 0.5);
	upload_as(dtype, da, A, na);
	upload_as(dtype, db, B, nbb);
	upload_as(dtype, cin == 1 ? dcin : dc, C, nc);
	if (cin == 1) /* (every byte 0xff: a NaN in each float type) */
		cudaMemset(dc, 0xff, nc * (dtype == SGRT_F64 ? 8 : dtype == SGRT_F32 ? 4 : 2));
	upload_as(dtype, dbias, bv, N);

	memset(&g, 0, sizeof g);
	g.dtype = dtype;
	g.trans_a = ta;
	g.trans_b = tb;
	g.m = M;
	g.n = N;
	g.k = K;
	g.batch = batch;
	g.stride_a = sa;
	g.stride_b = sb;
	g.stride_c = sc;
	g.alpha = beta != 0 ? 1 : 0; /* 0 and 0 means alpha 1 */
	g.beta = beta;
	g.bias = bias ? dbias : NULL;
	g.c_in = cin == 1 ? dcin : cin == 2 ? dc : NULL;
	CHECK_OK(sgrt_gemm(m, 0, &g, da, db, dc, NULL, 40), m);
	download_as(dtype, D, dc, nc);
	for (bt = 0; bt < nb; bt++)
		for (r = 0; r < M; r++)
			for (c = 0; c < N; c++) {
				const double *a = A + bt * sa, *b = B + bt * sb;
				double s = 0;
				for (k = 0; k < K; k++)
					s += (ta ? at(a, lda, k, r) : at(a, lda, r, k)) *
					     (tb ? at(b, ldb, c, k) : at(b, ldb, k, c));
				s += beta * C[bt * sc + r * ldc + c];
				if (bias)
					s += bv[c];
				double e = fabs(D[bt * sc + r * ldc + c] - s);
				maxerr = e > maxerr ? e : maxerr;
			}
	tol = dtype == SGRT_F64 ? 1e-12 : dtype == SGRT_F32 ? 1e-4 : 2e-2;
	if (maxerr > tol)
		fprintf(stderr, "  gemm dtype %d ta %d tb %d %lldx%lldx%lld batch "
		        "%lld: max error %g\n", dtype, ta, tb, (long long)M,
		        (long long)N, (long long)K, (long long)batch, maxerr);
	CHECK(maxerr <= tol);
	free(A);
	free(B);
	free(C);
	free(D);
	free(bv);
}

/* gelu(x, approximate="tanh") and its derivative, in double. */
static double
gelu_tanh(double x)
{
	return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double
dgelu_tanh(double x)
{
	double t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
	return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 *
	       (1 + 3 * 0.044715 * x * x);
}

/* One GELU_AUX (dgelu 0: D = gelu(A @ B + bias), aux = A @ B + bias) or
 * DGELU (D = (A @ B) * gelu'(aux)) product, M x N x K, checked against a
 * double reference on the rounded inputs; the epilogue by cuBLASLt or,
 * for an N that is no multiple of 8 or under SGRT_NO_EPILOGUE=1, by
 * libsgrt's kernel: the same results either way. */
static void
gelu_case(SgrtModel *m, int dtype, int dgelu, int64_t M, int64_t N, int64_t K, int bias)
{
	size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N, i;
	double *A = (double *)malloc(na * 8), *B = (double *)malloc(nb * 8);
	double *X = (double *)malloc(nc * 8), *D = (double *)malloc(nc * 8);
	double *P = (double *)malloc(nc * 8), *bv = (double *)malloc(N * 8);
	double errd = 0, erra = 0, tol = dtype == SGRT_F32 ? 1e-4 : 3e-2;
	char *dev = (char *)sgrt_arena(m);
	void *da = dev, *db = dev + (1 << 20), *dc = dev + (2 << 20);
	void *dbias = dev + (3 << 20), *daux = dev + (3 << 20) + (256 << 10);
	SgrtGemm g;
	int64_t r, c, k;

	srand(99);
	for (i = 0; i < na; i++)
		A[i] = round_to(dtype, 2 * (rand() / (double)RAND_MAX - 0.5));
	for (i = 0; i < nb; i++)
		B[i] = round_to(dtype, rand() / (double)RAND_MAX - 0.5);
	for (i = 0; i < nc; i++)
		X[i] = round_to(dtype, 4 * (rand() / (double)RAND_MAX - 0.5));
	for (i = 0; i < (size_t)N; i++)
		bv[i] = round_to(dtype, rand() / (double)RAND_MAX - 0.5);
	upload_as(dtype, da, A, na);
	upload_as(dtype, db, B, nb);
	upload_as(dtype, dbias, bv, N);
	upload_as(dtype, daux, X, nc); /* DGELU's pre-activation; overwritten by GELU_AUX */
	memset(&g, 0, sizeof g);
	g.dtype = dtype;
	g.m = M;
	g.n = N;
	g.k = K;
	g.bias = bias ? dbias : NULL;
	g.epilogue = dgelu ? SGRT_EPI_DGELU : SGRT_EPI_GELU_AUX;
	g.aux = daux;
	CHECK_OK(sgrt_gemm(m, 0, &g, da, db, dc, NULL, 50), m);
	download_as(dtype, D, dc, nc);
	download_as(dtype, P, daux, nc);
	for (r = 0; r < M; r++)
		for (c = 0; c < N; c++) {
			double s = 0;
			for (k = 0; k < K; k++)
				s += A[r * K + k] * B[k * N + c];
			s += bias ? bv[c] : 0;
			double want = dgelu ? s * dgelu_tanh(X[r * N + c]) : gelu_tanh(s);
			double e = fabs(D[r * N + c] - want) / (1 + fabs(want));
			errd = e > errd ? e : errd;
			e = fabs(P[r * N + c] - (dgelu ? X[r * N + c] : s)) / (1 + fabs(s));
			erra = e > erra ? e : erra;
		}
	if (errd > tol || erra > tol)
		fprintf(stderr, "  gelu epilogue dtype %d dgelu %d %lldx%lldx%lld bias %d: "
		        "max error %g (aux %g)\n", dtype, dgelu, (long long)M, (long long)N,
		        (long long)K, bias, errd, erra);
	CHECK(errd <= tol && erra <= tol);
	free(A);
	free(B);
	free(X);
	free(D);
	free(P);
	free(bv);
}

/* The GELU epilogues of training: by cuBLASLt, then (odd N, or
 * SGRT_NO_EPILOGUE=1) by libsgrt's kernel, which is one more kernel. */
static void
test_gemm_gelu(void)
{
	static const int dts[] = { SGRT_F32, SGRT_BF16, SGRT_F16 };
	for (int forced = 0; forced < 2; forced++) {
		if (forced)
			setenv("SGRT_NO_EPILOGUE", "1", 1);
		SgrtModel *m = new_model("gelu.sg");
		cudaStream_t cs;
		cudaStreamCreate(&cs);
		CHECK_OK(sgrt_call_begin(m, cs), m);
		for (int d = 0; d < 3; d++) {
			gelu_case(m, dts[d], 0, 48, 64, 32, 1);
			gelu_case(m, dts[d], 0, 48, 64, 32, 0);
			gelu_case(m, dts[d], 1, 48, 64, 32, 0);
			gelu_case(m, dts[d], 0, 20, 37, 24, 1); /* aux ld 37: the kernel */
			gelu_case(m, dts[d], 1, 20, 37, 24, 0);
		}
		CHECK_OK(sgrt_call_end(m), m);
		/* 15 products, and a kernel for each epilogue cuBLASLt left */
		int k = sgrt_kernel_count(m);
		fprintf(stderr, "  gelu epilogues%s: %d kernels for 15 products\n",
		        forced ? " (SGRT_NO_EPILOGUE=1)" : "", k);
		CHECK(forced ? k == 30 : k >= 21 && k <= 30);
		cudaStreamDestroy(cs);
		sgrt_destroy(m);
		unsetenv("SGRT_NO_EPILOGUE");
	}
	/* DGELU takes no bias, and both need the aux matrix. */
	SgrtModel *m = new_model("gelu.sg");
	SgrtGemm g;
	memset(&g, 0, sizeof g);
	g.dtype = SGRT_BF16;
	g.m = g.n = g.k = 8;
	g.epilogue = SGRT_EPI_DGELU;
	CHECK(sgrt_gemm(m, 0, &g, sgrt_arena(m), sgrt_arena(m), sgrt_arena(m), NULL, 51) ==
	      SGRT_EUSAGE);
	sgrt_destroy(m);
}

static void
test_gemm(void)
{
	SgrtModel *m = new_model("mm.sg");
	cudaStream_t cs;
	SgrtGemm g;
	int ta, tb;

	cudaStreamCreate(&cs);
	CHECK_OK(sgrt_call_begin(m, cs), m);
	for (ta = 0; ta < 2; ta++)
		for (tb = 0; tb < 2; tb++)
			gemm_case(m, SGRT_F32, ta, tb, 37, 29, 53, 1, 0, 0, 0, 0, 0);
	gemm_case(m, SGRT_F32, 0, 0, 64, 48, 32, 3, 0, 0, 0, 0, 0);   /* batched */
	gemm_case(m, SGRT_F32, 0, 1, 16, 24, 8, 4, 1, 0, 0, 0, 0);    /* A broadcast */
	gemm_case(m, SGRT_F32, 0, 1, 33, 40, 17, 1, 0, 1, 0, 0, 0);   /* bias */
	gemm_case(m, SGRT_F32, 0, 0, 20, 30, 10, 1, 0, 0, 1.0, 0, 0); /* beta */
	gemm_case(m, SGRT_F32, 0, 0, 20, 30, 10, 1, 0, 0, 0, 4, 0);   /* unaligned A */
	gemm_case(m, SGRT_F64, 1, 0, 21, 13, 34, 2, 0, 0, 0, 0, 0);
	gemm_case(m, SGRT_F16, 0, 1, 64, 64, 64, 1, 0, 1, 0, 0, 0);
	gemm_case(m, SGRT_BF16, 0, 0, 32, 48, 16, 2, 0, 0, 0, 0, 0);
	/* The same product again reuses its plan. */
	gemm_case(m, SGRT_F32, 0, 0, 37, 29, 53, 1, 0, 0, 0, 0, 0);
	/* C read from a residual of its own (D = A @ B + C): sgc's adds
	 * folded into products; with a bias; a batch; C given as D itself */
	gemm_case(m, SGRT_BF16, 0, 1, 64, 48, 32, 1, 0, 0, 1.0, 0, 1);
	gemm_case(m, SGRT_F16, 0, 0, 33, 40, 17, 1, 0, 1, 1.0, 0, 1);
	gemm_case(m, SGRT_F32, 1, 0, 20, 30, 10, 2, 0, 1, 1.0, 0, 1);
	gemm_case(m, SGRT_F32, 0, 0, 20, 30, 10, 1, 0, 0, 1.0, 0, 2);
	CHECK_OK(sgrt_call_end(m), m);
	CHECK(sgrt_kernel_count(m) == 17);
	/* A C that overlaps D without being it is refused. */
	memset(&g, 0, sizeof g);
	g.dtype = SGRT_F32;
	g.m = g.n = g.k = 4;
	g.beta = 1;
	g.c_in = (char *)sgrt_arena(m) + (2 << 20) + 8;
	CHECK(sgrt_gemm(m, 0, &g, sgrt_arena(m), sgrt_arena(m), (char *)sgrt_arena(m) + (2 << 20),
	                NULL, 45) == SGRT_EUSAGE);
	fprintf(stderr, "  (expected) %s\n", sgrt_last_error(m));
	sgrt_clear_error(m);

	memset(&g, 0, sizeof g);
	g.dtype = SGRT_I32;
	g.m = g.n = g.k = 4;
	CHECK(sgrt_gemm(m, 0, &g, sgrt_arena(m), sgrt_arena(m), sgrt_arena(m),
	                NULL, 41) == SGRT_EUNSUPPORTED);
	sgrt_clear_error(m);
	/* A leading dimension smaller than a row is cuBLASLt's to refuse. */
	g.dtype = SGRT_F32;
	g.lda = 2;
	CHECK(sgrt_gemm(m, 0, &g, sgrt_arena(m), sgrt_arena(m), sgrt_arena(m),
	                NULL, 44) == SGRT_ECUBLAS);
	CHECK(strncmp(sgrt_last_error(m), "mm.sg:44: ", 10) == 0);
	fprintf(stderr, "  (expected) %s\n", sgrt_last_error(m));
	/* Stream 0's workspace, what its algorithms needed, is counted. */
	CHECK(sgrt_live_bytes(m) <= ((size_t)4 << 20) + SGRT_DEFAULT_WORKSPACE);
	cudaStreamDestroy(cs);
	sgrt_destroy(m);
}

/* y[i] = sum of x[i * k ... i * k + k) products with ones: the value a
 * 32 x 32 x k product of A = x and B = ones gives, in double. */
static int
gemm_ws_check(const float *dc, const double *A, int64_t n, int64_t k)
{
	double *got = (double *)malloc(n * n * 8);
	int ok = 1;

	download_as(SGRT_F32, got, dc, n * n);
	for (int64_t r = 0; r < n; r++) {
		double want = 0;
		for (int64_t i = 0; i < k; i++)
			want += A[r * k + i];
		for (int64_t c = 0; c < n; c++)
			ok &= fabs(got[r * n + c] - want) <= 1e-3 * (1 + fabs(want));
	}
	free(got);
	return ok;
}

/* Workspaces grow to what the algorithms need: a deep, narrow product
 * (cuBLASLt's split-K kind) on stream 0, then the same product captured
 * into a CUDA graph on stream 1, which has no workspace yet and cannot
 * grow one while capturing: it gets an algorithm within what it has. */
static void
test_gemm_workspace(void)
{
	SgrtModel *m = new_model("ws.sg");
	enum { N = 32, K = 1 << 18 };
	double *A = (double *)malloc((size_t)N * K * 8), *B = (double *)malloc((size_t)K * N * 8);
	void *da, *db, *dc;
	cudaStream_t cs;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	SgrtGemm g;
	size_t live0 = sgrt_live_bytes(m), grown, during;

	for (size_t i = 0; i < (size_t)N * K; i++) {
		A[i] = (double)((i * 7) % 13) / 8 - 0.75;
		B[i] = 1;
	}
	cudaMalloc(&da, (size_t)N * K * 4);
	cudaMalloc(&db, (size_t)N * K * 4);
	cudaMalloc(&dc, (size_t)N * N * 4);
	upload_as(SGRT_F32, da, A, (size_t)N * K);
	upload_as(SGRT_F32, db, B, (size_t)N * K);
	memset(&g, 0, sizeof g);
	g.dtype = SGRT_F32;
	g.m = g.n = N;
	g.k = K;
	cudaStreamCreate(&cs);
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK_OK(sgrt_gemm(m, 0, &g, da, db, dc, NULL, 60), m);
	CHECK_OK(sgrt_call_end(m), m);
	CHECK(gemm_ws_check((const float *)dc, A, N, K));
	grown = sgrt_live_bytes(m) - live0;
	fprintf(stderr, "  %dx%dx%d f32: a workspace of %zu bytes (at most %zu)\n", N, N, K,
	        grown, (size_t)SGRT_DEFAULT_WORKSPACE);
	CHECK(grown <= SGRT_DEFAULT_WORKSPACE);
	cudaMemset(dc, 0, (size_t)N * N * 4);
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK(cudaStreamBeginCapture(sgrt_stream(m, 1), cudaStreamCaptureModeThreadLocal) ==
	      cudaSuccess);
	CHECK_OK(sgrt_gemm(m, 1, &g, da, db, dc, NULL, 61), m);
	CHECK(cudaStreamEndCapture(sgrt_stream(m, 1), &graph) == cudaSuccess);
	during = sgrt_live_bytes(m) - live0;
	CHECK(during == grown); /* nothing allocated while capturing */
	CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
	CHECK(cudaGraphLaunch(exec, sgrt_stream(m, 1)) == cudaSuccess);
	CHECK(cudaStreamSynchronize(sgrt_stream(m, 1)) == cudaSuccess);
	CHECK(gemm_ws_check((const float *)dc, A, N, K));
	CHECK_OK(sgrt_call_end(m), m);
	cudaGraphExecDestroy(exec);
	cudaGraphDestroy(graph);
	cudaStreamDestroy(cs);
	cudaFree(da);
	cudaFree(db);
	cudaFree(dc);
	free(A);
	free(B);
	sgrt_destroy(m);
}

/* A product big enough to be timed (SGRT_GEMM_TUNE): one model times the
 * heuristic's candidates, one under SGRT_GEMM_TUNE=0 does not; their
 * results agree to bf16 rounding and with a double reference at sampled
 * places.  With beta 1, c is alpha A B + c once (the timing runs' writes
 * undone); the gaps of a strided c (ldc > n) are left alone. */
static void
test_gemm_tune(void)
{
	enum { M = 1024, N = 1024, K = 1024, LDC = 1040 };
	size_t nab = (size_t)M * K, nc = (size_t)M * LDC;
	double *A = (double *)malloc(nab * 8), *B = (double *)malloc(nab * 8);
	double *C = (double *)malloc(nc * 8), *D[2];
	void *da, *db, *dc, *dcin;
	cudaStream_t cs;
	SgrtGemm g;

	srand(77);
	for (size_t i = 0; i < nab; i++) {
		A[i] = round_to(SGRT_BF16, rand() / (double)RAND_MAX - 0.5);
		B[i] = round_to(SGRT_BF16, rand() / (double)RAND_MAX - 0.5);
	}
	for (size_t i = 0; i < nc; i++)
		C[i] = i % LDC < N ? round_to(SGRT_BF16, rand() / (double)RAND_MAX - 0.5) : 7;
	cudaMalloc(&da, nab * 2);
	cudaMalloc(&db, nab * 2);
	cudaMalloc(&dc, nc * 2);
	cudaMalloc(&dcin, nc * 2);
	upload_as(SGRT_BF16, da, A, nab);
	upload_as(SGRT_BF16, db, B, nab);
	cudaStreamCreate(&cs);
	/* mode 0: D = A @ B; 1: D = -0.5 A @ B + D; 2: the same with C read
	 * from a residual of its own (SgrtGemm.c_in), D all 7 before: the
	 * candidates timed write D, which C must not see */
	for (int mode = 0; mode < 3; mode++) {
		int beta = mode > 0;
		for (int tune = 0; tune < 2; tune++) {
			setenv("SGRT_GEMM_TUNE", tune ? "1" : "0", 1);
			SgrtModel *m = new_model("tune.sg");
			upload_as(SGRT_BF16, mode == 2 ? dcin : dc, C, nc);
			if (mode == 2) {
				double *sevens = (double *)malloc(nc * 8);
				for (size_t i = 0; i < nc; i++)
					sevens[i] = 7;
				upload_as(SGRT_BF16, dc, sevens, nc);
				free(sevens);
			}
			memset(&g, 0, sizeof g);
			g.dtype = SGRT_BF16;
			g.trans_b = 1;
			g.m = M;
			g.n = N;
			g.k = K;
			g.ldc = LDC;
			g.alpha = beta ? -0.5 : 1;
			g.beta = beta;
			g.c_in = mode == 2 ? dcin : NULL;
			CHECK_OK(sgrt_call_begin(m, cs), m);
			CHECK_OK(sgrt_gemm(m, 0, &g, da, db, dc, NULL, 70), m);
			CHECK_OK(sgrt_call_end(m), m);
			CHECK(sgrt_gemm_tuned(m) == tune);
			D[tune] = (double *)malloc(nc * 8);
			download_as(SGRT_BF16, D[tune], dc, nc);
			sgrt_destroy(m);
		}
		double worst = 0, ref_worst = 0;
		int gaps_ok = 1;
		for (size_t i = 0; i < nc; i++) {
			if (i % LDC >= N) {
				gaps_ok &= D[1][i] == 7 && D[0][i] == 7;
				continue;
			}
			double e = fabs(D[1][i] - D[0][i]) / (1 + fabs(D[0][i]));
			worst = e > worst ? e : worst;
		}
		for (int t = 0; t < 256; t++) {
			size_t r = (size_t)rand() % M, c = (size_t)rand() % N;
			double s = 0;
			for (size_t k = 0; k < K; k++)
				s += A[r * K + k] * B[c * K + k];
			s = (beta ? -0.5 : 1) * s + beta * C[r * LDC + c];
			double e = fabs(D[1][r * LDC + c] - s) / (1 + fabs(s));
			ref_worst = e > ref_worst ? e : ref_worst;
		}
		fprintf(stderr, "  beta %d%s: tuned against untuned %g, against double %g\n", beta,
		        mode == 2 ? " (c_in)" : "", worst, ref_worst);
		CHECK(gaps_ok);
		CHECK(worst <= 1.0 / 64);
		CHECK(ref_worst <= 1.0 / 64);
		free(D[0]);
		free(D[1]);
	}
	unsetenv("SGRT_GEMM_TUNE");
	cudaStreamDestroy(cs);
	cudaFree(da);
	cudaFree(db);
	cudaFree(dc);
	cudaFree(dcin);
	free(A);
	free(B);
	free(C);
}

/* ------------------------------------------------------------------ errors */

static int
failing_copy(SgrtModel *m)
{
	SGRT_CHECK_CUDA(m, cudaMemcpyAsync(sgrt_arena(m), (void *)16, 1 << 20,
	                cudaMemcpyDeviceToDevice, sgrt_stream(m, 0)), 42);
	return SGRT_OK;
}

static int
bad_launch(SgrtModel *m)
{
	float *a = (float *)sgrt_arena(m);

	SGRT_KERNEL(m, 0, "k_fill", 43,
	            k_fill<<<1, 4096, 0, sgrt_stream(m, 0)>>>(a, 1, 4096));
	return SGRT_OK;
}

static void
test_errors(void)
{
	SgrtModel *m = new_model("model.sg");
	cudaStream_t cs;
	char want[512];

	cudaStreamCreate(&cs);
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK(failing_copy(m) == SGRT_ECUDA);
	CHECK(strncmp(sgrt_last_error(m), "model.sg:42: cudaMemcpyAsync failed: ",
	              37) == 0);
	fprintf(stderr, "  (expected) %s\n", sgrt_last_error(m));
	CHECK(sgrt_call_end(m) == SGRT_ECUDA);
	/* A new call starts clean; a bad launch names the kernel and line. */
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK(sgrt_last_error(m)[0] == 0);
	CHECK(bad_launch(m) == SGRT_ECUDA);
	/* (CUDA 13 says "invalid argument", older ones "invalid
	 * configuration argument".) */
	snprintf(want, sizeof want, "model.sg:43: launch of k_fill failed: ");
	CHECK(strncmp(sgrt_last_error(m), want, strlen(want)) == 0);
	fprintf(stderr, "  (expected) %s\n", sgrt_last_error(m));
	sgrt_call_end(m);
	/* The model still works after non-sticky errors. */
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK_OK(ordered_call(m, cs, 1024), m);
	cudaStreamDestroy(cs);
	sgrt_destroy(m);
}

/* In a child (a fault poisons the CUDA context): with SGRT_SYNC=1 a fault
 * inside a kernel is reported at that kernel's line. */
static int
fault_child(void)
{
	SgrtModel *m;
	cudaStream_t cs;
	int rc, h;
	char want[256];

	setenv("SGRT_SYNC", "1", 1);
	m = new_model("fault.sg");
	cudaStreamCreate(&cs);
	sgrt_call_begin(m, cs);
	SGRT_KERNEL(m, 1, "ok", 76, k_fill<<<1, 32, 0, sgrt_stream(m, 1)>>>(
	            (float *)sgrt_arena(m), 1, 32));
	h = sgrt_op_begin(m, 0, SGRT_OP_KERNEL, "k_fault", 77);
	k_fault<<<1, 32, 0, sgrt_stream(m, 0)>>>((float *)16);
	rc = sgrt_check_launch(m, "k_fault", 77);
	if (rc == SGRT_OK)
		rc = sgrt_op_end(m, h);
	snprintf(want, sizeof want, "fault.sg:77: k_fault failed: %s",
	         cudaGetErrorString(cudaErrorIllegalAddress));
	fprintf(stderr, "  (expected) %s\n", sgrt_last_error(m));
	return rc == SGRT_ECUDA && strncmp(sgrt_last_error(m), want,
	                                   strlen(want)) == 0 ? 0 : 1;
}

static void
test_fault(void)
{
	int status = -1;
	pid_t pid;

	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		int n = 0;
		if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
			_exit(0); /* main skips the whole test */
		_exit(fault_child());
	}
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ------------------------------------------------------------------ NCCL, one rank */

static void
fill_host(float *h, int n, float base)
{
	int i;

	for (i = 0; i < n; i++)
		h[i] = base + i;
}

/* 1 when n floats at device address d equal want[i] * scale. */
static int
equals(const void *d, const float *want, int n, float scale)
{
	float *h = (float *)malloc(n * 4);
	int i, ok = 1;

	to_host(h, d, n * 4);
	for (i = 0; i < n; i++)
		ok &= h[i] == want[i] * scale;
	free(h);
	return ok;
}

static void
test_nccl(void)
{
	SgrtModel *m = new_model("dist.sg"), *m2 = new_model("dist.sg");
	enum { N = 1000 };
	float h[N];
	char *a = (char *)sgrt_arena(m);
	void *x = a, *y = a + (1 << 20), *z = a + (2 << 20);
	cudaStream_t cs;
	unsigned char bools[N], got[N];
	int i, ok;

	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "1", 1);
	setenv("LOCAL_RANK", "0", 1);
	cudaStreamCreate(&cs);
	CHECK_OK(sgrt_nccl_init(m, 1, 50), m);
	CHECK(sgrt_rank(m) == 0 && sgrt_world(m) == 1);
	CHECK(sgrt_nccl_init(m2, 2, 51) == SGRT_EUSAGE);
	CHECK(strstr(sgrt_last_error(m2), "compiled for WORLD=2") != NULL);

	fill_host(h, N, 1);
	cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK_OK(sgrt_all_reduce(m, 2, x, y, N, SGRT_F32, SGRT_RED_SUM, NULL, 52), m);
	CHECK(equals(y, h, N, 1));
	CHECK_OK(sgrt_all_reduce(m, 2, y, y, N, SGRT_F32, SGRT_RED_AVG, NULL, 53), m);
	CHECK(equals(y, h, N, 1));
	if (sgrt_has_nccl()) {
		CHECK_OK(sgrt_all_reduce_scaled(m, 1, x, z, N, SGRT_F32, 0.5, NULL,
		                                54), m);
		CHECK(equals(z, h, N, 0.5f));
	} else {
		CHECK(sgrt_all_reduce_scaled(m, 1, x, z, N, SGRT_F32, 0.5, NULL,
		                             54) == SGRT_EUNSUPPORTED);
		sgrt_clear_error(m);
	}
	CHECK_OK(sgrt_all_gather(m, 0, x, z, N, SGRT_F32, NULL, 55), m);
	CHECK(equals(z, h, N, 1));
	cudaMemset(z, 0, 4 * N);
	CHECK_OK(sgrt_reduce_scatter(m, 0, x, z, N, SGRT_F32, SGRT_RED_MAX, NULL,
	                             56), m);
	CHECK(equals(z, h, N, 1));
	cudaMemset(z, 0, 4 * N);
	CHECK_OK(sgrt_broadcast(m, 0, x, z, N, SGRT_F32, 0, NULL, 57), m);
	CHECK(equals(z, h, N, 1));
	cudaMemset(z, 0, 4 * N);
	CHECK_OK(sgrt_reduce(m, 0, x, z, N, SGRT_F32, SGRT_RED_MIN, 0, NULL, 58), m);
	CHECK(equals(z, h, N, 1));
	cudaMemset(z, 0, 4 * N);
	CHECK_OK(sgrt_all_to_all(m, 0, x, z, N, SGRT_F32, NULL, 59), m);
	CHECK(equals(z, h, N, 1));
	cudaMemset(z, 0, 4 * N);
	CHECK_OK(sgrt_gather(m, 0, x, z, N, SGRT_F32, 0, NULL, 60), m);
	CHECK(equals(z, h, N, 1));
	cudaMemset(z, 0, 4 * N);
	CHECK_OK(sgrt_scatter(m, 0, x, z, N, SGRT_F32, 0, NULL, 61), m);
	CHECK(equals(z, h, N, 1));
	/* A send to oneself and the matching receive, grouped. */
	cudaMemset(z, 0, 4 * N);
	if (sgrt_has_nccl()) {
		CHECK_OK(sgrt_group_start(m, 62), m);
		CHECK_OK(sgrt_send(m, 0, x, N, SGRT_F32, 0, 62), m);
		CHECK_OK(sgrt_recv(m, 0, z, N, SGRT_F32, 0, 62), m);
		CHECK_OK(sgrt_group_end(m, 62), m);
		CHECK(equals(z, h, N, 1));
	} else {
		CHECK(sgrt_send(m, 0, x, N, SGRT_F32, 0, 62) == SGRT_EUNSUPPORTED);
		sgrt_clear_error(m);
	}
	/* Bool sums are ors; other dtypes go through. */
	for (i = 0; i < N; i++)
		bools[i] = i % 3 == 0;
	cudaMemcpy(x, bools, N, cudaMemcpyHostToDevice);
	CHECK_OK(sgrt_all_reduce(m, 0, x, y, N, SGRT_BOOL, SGRT_RED_SUM, NULL, 63), m);
	to_host(got, y, N);
	CHECK(memcmp(got, bools, N) == 0);
	CHECK_OK(sgrt_all_reduce(m, 0, x, y, N / 8, SGRT_I64, SGRT_RED_SUM, NULL,
	                         64), m);
	CHECK_OK(sgrt_all_reduce(m, 0, x, y, N / 2, SGRT_BF16, SGRT_RED_SUM, NULL,
	                         65), m);
	CHECK_OK(sgrt_all_reduce(m, 0, x, y, N, SGRT_U8, SGRT_RED_PROD, NULL, 66), m);
	CHECK_OK(sgrt_call_end(m), m);
	CHECK(sgrt_all_reduce(m, 0, x, y, N, SGRT_BOOL, SGRT_RED_AVG, NULL, 67) ==
	      SGRT_EUNSUPPORTED);
	sgrt_clear_error(m);
	CHECK(sgrt_all_reduce(m, 0, x, y, N, 99, SGRT_RED_SUM, NULL, 68) ==
	      SGRT_EUNSUPPORTED);
	sgrt_clear_error(m);
	ok = sgrt_all_reduce(m2, 0, x, y, N, SGRT_F32, SGRT_RED_SUM, NULL, 69);
	CHECK(sgrt_has_nccl() ? ok == SGRT_EUSAGE : ok == SGRT_OK);
	cudaStreamDestroy(cs);
	sgrt_destroy(m);
	sgrt_destroy(m2);
}

/* ------------------------------------------------------------------ trace */

/* Five traced ops on three streams: kernel, kernel, copy, matmul and
 * all_reduce. */
static int
traced_call(SgrtModel *m, cudaStream_t cs, float *a, const SgrtGemm *g)
{
	SGRT_TRY(sgrt_call_begin(m, cs));
	SGRT_KERNEL(m, 0, "fill %a", 10, k_fill<<<4, 256, 0, sgrt_stream(m, 0)>>>(
	            a, 1, 1024));
	SGRT_TRY(sgrt_record(m, 0, 0, 11));
	SGRT_TRY(sgrt_wait(m, 0, 1, 11));
	SGRT_KERNEL(m, 1, "spin", 12, k_spin<<<1, 1, 0, sgrt_stream(m, 1)>>>(
	            1000000));
	SGRT_TRY(sgrt_copy(m, 2, a + 4096, a, 4096, "copy_ %b", 13));
	SGRT_TRY(sgrt_gemm(m, 0, g, a, a, a + 65536, "matmul %h", 14));
	SGRT_TRY(sgrt_all_reduce(m, 2, a, a + 8192, 256, SGRT_F32, SGRT_RED_SUM,
	                         "all_reduce %g", 15));
	SGRT_TRY(sgrt_join_all(m, 16));
	return sgrt_call_end(m);
}

static int
untraced_call(SgrtModel *m, cudaStream_t cs, float *a)
{
	SGRT_TRY(sgrt_call_begin(m, cs));
	SGRT_KERNEL(m, 0, "other", 20, k_fill<<<1, 32, 0, sgrt_stream(m, 0)>>>(
	            a, 1, 32));
	return sgrt_call_end(m);
}

static void
test_trace(void)
{
	SgrtModel *m = new_model("tr.sg");
	cudaStream_t cs;
	char path[256], *text;
	float *a = (float *)sgrt_arena(m);
	SgrtGemm g;
	FILE *f;
	long len;
	cJSON *j, *e;
	int n = 0, streams = 0, spin_ok = 0;

	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "1", 1);
	cudaStreamCreate(&cs);
	CHECK_OK(sgrt_nccl_init(m, 0, 1), m);
	snprintf(path, sizeof path, "/tmp/sgrt-trace-%ld.json", (long)getpid());
	CHECK(sgrt_trace_write(m, path) == SGRT_EUSAGE); /* nothing traced yet */
	sgrt_clear_error(m);

	memset(&g, 0, sizeof g);
	g.dtype = SGRT_F32;
	g.m = g.n = g.k = 64;
	sgrt_trace_enable(m, 1);
	CHECK_OK(traced_call(m, cs, a, &g), m);
	sgrt_trace_enable(m, 0);
	/* An untraced call after it leaves the trace alone. */
	CHECK_OK(untraced_call(m, cs, a), m);
	CHECK_OK(sgrt_trace_write(m, path), m);

	f = fopen(path, "rb");
	CHECK(f != NULL);
	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	text = (char *)calloc(len + 1, 1);
	CHECK(fread(text, 1, len, f) == (size_t)len);
	fclose(f);
	j = cJSON_Parse(text);
	CHECK(j != NULL && cJSON_IsArray(j));
	/* Each stream's track: "tid" is its index, named by a "thread_name"
	 * metadata event ("ph": "M"); the ops are "X" slices. */
	const char *track[8] = {0};
	cJSON_ArrayForEach(e, j) {
		const cJSON *ph = cJSON_GetObjectItem(e, "ph"), *t = cJSON_GetObjectItem(e, "tid");
		const cJSON *args = cJSON_GetObjectItem(e, "args");
		const cJSON *nm = args ? cJSON_GetObjectItem(args, "name") : NULL;
		CHECK(cJSON_IsString(ph) && cJSON_IsNumber(t));
		if (cJSON_IsString(ph) && !strcmp(ph->valuestring, "M") && cJSON_IsNumber(t) &&
		    t->valueint >= 0 && t->valueint < 8 && cJSON_IsString(nm))
			track[t->valueint] = nm->valuestring;
	}
	cJSON_ArrayForEach(e, j) {
		const cJSON *ph = cJSON_GetObjectItem(e, "ph"), *t = cJSON_GetObjectItem(e, "tid");
		const cJSON *ne = cJSON_GetObjectItem(e, "name"), *ce = cJSON_GetObjectItem(e, "cat");
		const cJSON *te = cJSON_GetObjectItem(e, "ts"), *de = cJSON_GetObjectItem(e, "dur");
		const cJSON *le = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "line");
		if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X"))
			continue;
		CHECK(cJSON_IsString(ne) && cJSON_IsString(ce) && cJSON_IsNumber(te) &&
		      cJSON_IsNumber(de) && cJSON_IsNumber(le) && cJSON_IsNumber(t) &&
		      t->valueint >= 0 && t->valueint < 8 && track[t->valueint]);
		if (!cJSON_IsString(ne) || !cJSON_IsString(ce) || !cJSON_IsNumber(te) ||
		    !cJSON_IsNumber(de) || !cJSON_IsNumber(le) || !cJSON_IsNumber(t) ||
		    t->valueint < 0 || t->valueint >= 8 || !track[t->valueint])
			continue;
		const char *name = ne->valuestring, *tid = track[t->valueint], *cat = ce->valuestring;
		double ts = te->valuedouble, dur = de->valuedouble;
		int line = le->valueint;
		CHECK(ts >= 0 && dur >= 0);
		n++;
		if (!strcmp(name, "spin")) {
			CHECK(!strcmp(tid, "side") && !strcmp(cat, "kernel"));
			CHECK(line == 12);
			spin_ok = dur > 300 && dur < 100000;
			streams |= 1;
		} else if (!strcmp(name, "copy_ %b")) {
			CHECK(!strcmp(tid, "comm") && !strcmp(cat, "copy"));
			streams |= 2;
		} else if (!strcmp(name, "matmul %h")) {
			CHECK(!strcmp(tid, "default") && !strcmp(cat, "kernel"));
			CHECK(line == 14);
			streams |= 4;
		} else if (!strcmp(name, "all_reduce %g")) {
			CHECK(!strcmp(tid, "comm") && !strcmp(cat, "collective"));
			streams |= 8;
		} else if (!strcmp(name, "fill %a")) {
			CHECK(!strcmp(tid, "default"));
			streams |= 16;
		}
	}
	CHECK(n == 5 && streams == 31);
	CHECK(spin_ok);
	cJSON_Delete(j);
	free(text);
	unlink(path);
	cudaStreamDestroy(cs);
	sgrt_destroy(m);
}

/* ------------------------------------------------------------------ the driver */

/* A stand-in for generated code:
 *   input %x : f32[4, 8]      (mutated: x += 1 after use)
 *   param %w : f32[8]
 *   const %c : i32[3]
 *   state opt.w.step : f32[]  (+= 1 each call)
 *   %y = mul(%x, %w); %h = to_host(slice(flatten(%y), 0, 2))
 *   return %y, %h */
enum { T_X, T_W, T_C, T_STEP, T_Y, T_H, T_N };
static const SgrtTensorDesc drv_tensors[T_N] = {
	{ "x", SGRT_ROLE_INPUT, SGRT_F32, 2, { 4, 8 }, SGRT_TF_MUTATED },
	{ "w", SGRT_ROLE_PARAM, SGRT_F32, 1, { 8 }, 0 },
	{ "c", SGRT_ROLE_CONST, SGRT_I32, 1, { 3 }, 0 },
	{ "opt.w.step", SGRT_ROLE_STATE, SGRT_F32, 0, { 0 }, 0 },
	{ "y", SGRT_ROLE_OUTPUT, SGRT_F32, 2, { 4, 8 }, 0 },
	{ "h", SGRT_ROLE_OUTPUT, SGRT_F32, 1, { 2 }, SGRT_TF_HOST },
};

typedef struct {
	SgrtModel *rt;
	void *w, *c, *step;
} Drv;

__global__ void
k_mul_rows(float *y, const float *x, const float *w, int rows, int cols)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < rows * cols)
		y[i] = x[i] * w[i % cols];
}

static int
drv_create(void **model, int device)
{
	Drv *d = (Drv *)calloc(1, sizeof *d);
	SgrtConfig cfg;
	int rc;

	memset(&cfg, 0, sizeof cfg);
	cfg.graph = "drv";
	cfg.sgfile = "drv.sg";
	cfg.device = device;
	*model = d;
	rc = sgrt_create(&d->rt, &cfg);
	if (!rc)
		rc = sgrt_device_alloc(d->rt, &d->w, 32, "w", 3);
	if (!rc)
		rc = sgrt_device_alloc(d->rt, &d->c, 12, "c", 4);
	if (!rc)
		rc = sgrt_device_alloc(d->rt, &d->step, 4, "opt.w.step", 5);
	return rc;
}

static void
drv_destroy(void *model)
{
	Drv *d = (Drv *)model;

	sgrt_destroy(d->rt);
	free(d);
}

static SgrtModel *
drv_runtime(void *model)
{
	return ((Drv *)model)->rt;
}

static void *
drv_tensor(void *model, int i)
{
	Drv *d = (Drv *)model;

	return i == T_W ? d->w : i == T_C ? d->c : i == T_STEP ? d->step : NULL;
}

static int
drv_call(void *model, cudaStream_t stream, void *const *io,
         const cudaEvent_t *ext)
{
	SgrtModel *m = ((Drv *)model)->rt;
	float *x = (float *)io[T_X], *y = (float *)io[T_Y];

	(void)ext;
	SGRT_TRY(sgrt_call_begin(m, stream));
	SGRT_KERNEL(m, 0, "mul %y", 9, k_mul_rows<<<1, 32, 0, stream>>>(
	            y, x, (const float *)io[T_W], 4, 8));
	SGRT_KERNEL(m, 0, "add_ %x", 10, k_add<<<1, 32, 0, stream>>>(x, x, 1, 32));
	SGRT_KERNEL(m, 0, "add_ step", 11, k_add<<<1, 1, 0, stream>>>(
	            (float *)io[T_STEP], (const float *)io[T_STEP], 1, 1));
	SGRT_TRY(sgrt_copy(m, 0, io[T_H], y, 8, "to_host %h", 12));
	return sgrt_call_end(m);
}

static const SgrtProgram drv_program = {
	"drv", 1, drv_tensors, T_N, 0,
	drv_create, drv_destroy, drv_runtime, drv_tensor, drv_call,
};

/* Runs sgrt_main with a NULL-terminated argument list; stdout to out. */
static int
drive(const char *out, ...)
{
	char *argv[32];
	int argc = 1, rc, fd = -1;
	va_list ap;

	argv[0] = (char *)"drv";
	va_start(ap, out);
	while ((argv[argc] = va_arg(ap, char *)) != NULL)
		argc++;
	va_end(ap);
	fflush(stdout);
	if (out) {
		fd = dup(1);
		if (!freopen(out, "w", stdout))
			return -1;
	}
	rc = sgrt_main(argc, argv, &drv_program);
	fflush(stdout);
	if (out) {
		dup2(fd, 1);
		close(fd);
	}
	return rc;
}

/* The tensor `name` of a safetensors file, as floats (NULL if absent). */
static const float *
tensor_of(const SgrtSafetensors *f, const char *name)
{
	const SgrtTensor *t = sgrt_st_find(f, name);
	return t ? (const float *)t->data : NULL;
}

static void
test_driver(void)
{
	char dir[] = "/tmp/sgrt-drv-XXXXXX", in[300], oa[300], ob[300], tr[300];
	char bad[300], bl[300], err[512], line[1024];
	float x[32], w[8], y[32];
	SgrtTensor t;
	SgrtSafetensors fa, fb;
	const float *p;
	FILE *f;
	cJSON *j;
	int i, ok;

	if (!mkdtemp(dir)) {
		CHECK(0);
		return;
	}
	snprintf(in, sizeof in, "%s/in.safetensors", dir);
	snprintf(oa, sizeof oa, "%s/a.safetensors", dir);
	snprintf(ob, sizeof ob, "%s/b.safetensors", dir);
	snprintf(tr, sizeof tr, "%s/t.json", dir);
	snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
	snprintf(bl, sizeof bl, "%s/bench.txt", dir);
	for (i = 0; i < 32; i++)
		x[i] = (float)i;
	memset(&t, 0, sizeof t);
	t.name = (char *)"x";
	t.dtype = SGRT_F32;
	t.rank = 2;
	t.shape[0] = 4;
	t.shape[1] = 8;
	t.data = x;
	t.nbytes = sizeof x;
	CHECK(sgrt_st_write(in, &t, 1, err, sizeof err) == SGRT_OK);

	/* Two steps from fresh params. */
	CHECK(drive(NULL, "--inputs", in, "--out", oa, "--steps", "2", "--seed",
	            "7", "--trace", tr, "--device", "0", (char *)NULL) == 0);
	memset(&fa, 0, sizeof fa);
	CHECK(sgrt_st_read(oa, &fa, err, sizeof err) == SGRT_OK);
	CHECK(fa.n == 6); /* x, w, c, opt.w.step, y, h */
	sgrt_init_tensor("w", 7, SGRT_F32, 1, drv_tensors[T_W].shape, w);
	p = tensor_of(&fa, "w");
	CHECK(p && memcmp(p, w, sizeof w) == 0);
	p = tensor_of(&fa, "x");
	ok = p != NULL;
	for (i = 0; ok && i < 32; i++)
		ok = p[i] == x[i] + 2;
	CHECK(ok);
	p = tensor_of(&fa, "y");
	ok = p != NULL;
	for (i = 0; ok && i < 32; i++) {
		y[i] = (x[i] + 1) * w[i % 8];
		ok = p[i] == y[i];
	}
	CHECK(ok);
	p = tensor_of(&fa, "h");
	CHECK(p && p[0] == y[0] && p[1] == y[1]);
	p = tensor_of(&fa, "opt.w.step");
	CHECK(p && p[0] == 2);
	CHECK(sgrt_st_find(&fa, "c") && sgrt_st_find(&fa, "c")->dtype == SGRT_I32);
	f = fopen(tr, "r");
	CHECK(f != NULL);
	if (f)
		fclose(f);

	/* Chained through --params / --inputs: one more step. */
	CHECK(drive(NULL, "--params", oa, "--inputs", oa, "--out", ob,
	            (char *)NULL) == 0);
	memset(&fb, 0, sizeof fb);
	CHECK(sgrt_st_read(ob, &fb, err, sizeof err) == SGRT_OK);
	p = tensor_of(&fb, "opt.w.step");
	CHECK(p && p[0] == 3);
	p = tensor_of(&fb, "x");
	CHECK(p && p[5] == x[5] + 3);
	p = tensor_of(&fb, "w");
	CHECK(p && memcmp(p, w, sizeof w) == 0);

	/* --bench prints one JSON line. */
	CHECK(drive(bl, "--inputs", in, "--bench", "5", (char *)NULL) == 0);
	f = fopen(bl, "r");
	line[0] = 0;
	if (f) {
		if (!fgets(line, sizeof line, f))
			line[0] = 0;
		fclose(f);
	}
	j = cJSON_Parse(line);
	CHECK(j != NULL);
	if (j) {
		double med = cJSON_GetObjectItem(j, "ms_median")->valuedouble;
		double mn = cJSON_GetObjectItem(j, "ms_min")->valuedouble;
		CHECK(!strcmp(cJSON_GetObjectItem(j, "graph")->valuestring, "drv"));
		CHECK(med > 0 && mn > 0 && mn <= med);
		CHECK(cJSON_GetObjectItem(j, "peak_bytes")->valuedouble >= 48);
		CHECK(cJSON_GetObjectItem(j, "kernels")->valueint == 3);
		cJSON_Delete(j);
	}

	/* A missing input, a mismatched param, a bad command line. */
	fprintf(stderr, "  (five expected errors follow)\n");
	CHECK(drive(NULL, "--params", in, (char *)NULL) == SGRT_EMISMATCH);
	t.name = (char *)"w";
	t.rank = 1;
	t.shape[0] = 32;
	CHECK(sgrt_st_write(bad, &t, 1, err, sizeof err) == SGRT_OK);
	CHECK(drive(NULL, "--inputs", bad, (char *)NULL) == SGRT_EMISMATCH);
	CHECK(drive(NULL, "--inputs", in, "--params", bad, (char *)NULL) ==
	      SGRT_EMISMATCH);
	CHECK(drive(NULL, "--steps", "x", (char *)NULL) == SGRT_EUSAGE);
	CHECK(drive(NULL, "--inputs", "/nonexistent.safetensors",
	            (char *)NULL) == SGRT_EIO);

	sgrt_st_free(&fa);
	sgrt_st_free(&fb);
	unlink(in);
	unlink(oa);
	unlink(ob);
	unlink(tr);
	unlink(bad);
	unlink(bl);
	rmdir(dir);
}

/* ------------------------------------------------------------------ NCCL, several ranks */

/* 1 when n floats at device address d equal want. */
static int
same(const void *d, const float *want, int n)
{
	float *h = (float *)malloc(n * 4);
	int i, ok = 1;

	to_host(h, d, n * 4);
	for (i = 0; i < n; i++)
		ok &= h[i] == want[i];
	free(h);
	return ok;
}

/* Run once per GPU with RANK, WORLD_SIZE and LOCAL_RANK set (as torchrun
 * does): the ranks meet through the id file, then every collective is
 * checked against values each rank can compute for itself. */
static void
test_ranks(void)
{
	enum { N = 1024 };
	static float x[4 * N], want[4 * N];
	SgrtConfig cfg;
	SgrtModel *m = NULL;
	cudaStream_t cs;
	char err[256];
	int rank, world, local, i, q;

	CHECK(sgrt_env_ranks(&rank, &world, &local, err, sizeof err) == SGRT_OK);
	memset(&cfg, 0, sizeof cfg);
	cfg.graph = "ranks";
	cfg.sgfile = "ranks.sg";
	cfg.device = local;
	cfg.arena_bytes = 8 << 20;
	CHECK_OK(sgrt_create(&m, &cfg), m);
	CHECK_OK(sgrt_nccl_init(m, world, 1), m);
	CHECK(sgrt_rank(m) == rank && sgrt_world(m) == world);
	if (sgrt_status(m) != SGRT_OK) {
		sgrt_destroy(m);
		return;
	}
	char *a = (char *)sgrt_arena(m);
	void *dx = a, *dy = a + (2 << 20);
	cudaStreamCreate(&cs);
	CHECK_OK(sgrt_call_begin(m, cs), m);

	/* all_reduce sum and avg of rank * 1000 + i. */
	for (i = 0; i < N; i++) {
		x[i] = rank * 1000.0f + i;
		want[i] = 1000.0f * world * (world - 1) / 2 + (float)world * i;
	}
	cudaMemcpy(dx, x, N * 4, cudaMemcpyHostToDevice);
	CHECK_OK(sgrt_all_reduce(m, 0, dx, dy, N, SGRT_F32, SGRT_RED_SUM, NULL, 2), m);
	CHECK(same(dy, want, N));
	CHECK_OK(sgrt_all_reduce_scaled(m, 0, dx, dy, N, SGRT_F32, 0.5, NULL, 3), m);
	for (i = 0; i < N; i++)
		want[i] *= 0.5f;
	CHECK(same(dy, want, N));
	for (i = 0; i < N; i++)
		want[i] = want[i] * 2 / world;
	CHECK_OK(sgrt_all_reduce(m, 0, dx, dy, N, SGRT_F32, SGRT_RED_AVG, NULL, 4), m);
	CHECK(same(dy, want, N));
	/* all_gather: block q holds rank q's x. */
	for (q = 0; q < world; q++)
		for (i = 0; i < N; i++)
			want[q * N + i] = q * 1000.0f + i;
	CHECK_OK(sgrt_all_gather(m, 0, dx, dy, N, SGRT_F32, NULL, 5), m);
	CHECK(same(dy, want, world * N));
	/* reduce_scatter: block b of every rank is rank + 10 b. */
	for (q = 0; q < world; q++)
		for (i = 0; i < N; i++)
			x[q * N + i] = rank + 10.0f * q;
	for (i = 0; i < N; i++)
		want[i] = world * (world - 1) / 2.0f + 10.0f * world * rank;
	cudaMemcpy(dx, x, world * N * 4, cudaMemcpyHostToDevice);
	CHECK_OK(sgrt_reduce_scatter(m, 0, dx, dy, N, SGRT_F32, SGRT_RED_SUM, NULL,
	                             6), m);
	CHECK(same(dy, want, N));
	/* all_to_all: rank r's block j goes to rank j's block r. */
	for (q = 0; q < world; q++)
		for (i = 0; i < N; i++) {
			x[q * N + i] = rank * 100.0f + q;
			want[q * N + i] = q * 100.0f + rank;
		}
	cudaMemcpy(dx, x, world * N * 4, cudaMemcpyHostToDevice);
	CHECK_OK(sgrt_all_to_all(m, 0, dx, dy, N, SGRT_F32, NULL, 7), m);
	CHECK(same(dy, want, world * N));
	/* broadcast from the last rank; the first block of x is rank + 0. */
	for (i = 0; i < N; i++)
		want[i] = (float)(world - 1);
	CHECK_OK(sgrt_broadcast(m, 0, dx, dy, N, SGRT_F32, world - 1, NULL, 8), m);
	CHECK(same(dy, want, N));
	/* A ring of sends: each rank gets its predecessor's first block. */
	for (i = 0; i < N; i++)
		want[i] = (rank + world - 1) % world * 100.0f;
	CHECK_OK(sgrt_group_start(m, 9), m);
	CHECK_OK(sgrt_send(m, 0, dx, N, SGRT_F32, (rank + 1) % world, 9), m);
	CHECK_OK(sgrt_recv(m, 0, dy, N, SGRT_F32, (rank + world - 1) % world, 9), m);
	CHECK_OK(sgrt_group_end(m, 9), m);
	CHECK(same(dy, want, N));
	CHECK_OK(sgrt_call_end(m), m);
	cudaStreamDestroy(cs);
	sgrt_destroy(m);
}

/* A crash names the test it was in and prints the stack (addresses to
 * resolve with addr2line -e test_sgrt_gpu). */
static const char *current_test = "start";

static void
on_crash(int sig)
{
	void *frames[48];
	int n = backtrace(frames, 48);
	fprintf(stderr, "signal %d in %s\n", sig, current_test);
	backtrace_symbols_fd(frames, n, 2);
	_exit(128 + sig);
}

#define RUN(t) (current_test = #t, fprintf(stderr, "-- %s\n", #t), t())

int
main(void)
{
	int ndev = 0;

	signal(SIGSEGV, on_crash);
	signal(SIGABRT, on_crash);

	/* Before this process touches CUDA: the fault test forks. */
	test_fault();
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("no GPU: skipped\n");
		return 77;
	}
	if (getenv("WORLD_SIZE") && atoi(getenv("WORLD_SIZE")) > 1) {
		test_ranks();
		printf("rank %s: %d passed, %d failed\n", getenv("RANK"), npass,
		       nfail);
		return nfail ? 1 : 0;
	}
	RUN(test_streams);
	RUN(test_memory);
	RUN(test_gemm);
	RUN(test_gemm_workspace);
	RUN(test_gemm_tune);
	RUN(test_gemm_gelu);
	RUN(test_errors);
	RUN(test_nccl);
	RUN(test_trace);
	RUN(test_driver);
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
