/*
 * test_symm.cu - libsgrt's symmetric-memory collectives on GPUs:
 * algo="oneshot" all-reduce and algo="ce" all-gather (sgrt_symm.c,
 * sgrt_symm_dev.cu; docs/runtime.md, "Symmetric memory").
 *
 * Every check compares with values computed here from the formula that
 * made each rank's input (integers, so every sum is exact in every
 * dtype): f32, f16 and bf16; sum, avg, max and min; counts from 1 to
 * 300000 (whole 16-byte packs, tails, several CTAs); aligned and
 * misaligned buffers; in place; two streams at once; repeated calls with
 * new data (a stale read or a missing barrier shows); growing buffers;
 * other dtypes and NCCL groups falling back; the trace.
 *
 *   one rank:   the plain fallback (sgrt_symm_active says "one rank", and
 *               SGRT_SYMM_DEBUG says so once); then, with SGRT_SYMM=force,
 *               the device-API path with one rank, which must be active
 *               when SGRT_TEST_SYMM_REQUIRE=1 (libsgrt built against the
 *               libnccl it runs with) and is reported otherwise;
 *   N ranks:    the device-API path, which must be active (unless
 *               SGRT_SYMM=0), and a timing line against plain NCCL:
 *     for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r ./test_symm_gpu &
 *     done; wait
 *
 * Prints "N passed, M failed"; exits 0 when nothing failed, 1 otherwise,
 * 77 (skipped) when there is no GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sgrt.h"

static int npass, nfail;
static int rank, world, local_rank;

#define CHECK(cond)                                                           \
	do {                                                                  \
		if (cond) {                                                   \
			npass++;                                              \
		} else {                                                      \
			nfail++;                                              \
			fprintf(stderr, "rank %d: FAIL %s:%d: %s\n", rank,    \
			        __FILE__, __LINE__, #cond);                   \
		}                                                             \
	} while (0)
#define CHECK_OK(expr, m)                                                     \
	do {                                                                  \
		int rc_ = (expr);                                             \
		if (rc_ != SGRT_OK)                                           \
			fprintf(stderr, "  rc %d: %s\n", rc_,                 \
			        sgrt_last_error(m));                          \
		CHECK(rc_ == SGRT_OK);                                        \
	} while (0)

static const char *const stream_names[] = { "side", "comm" };

/* A model on this rank's GPU with streams side and comm, connected. */
static SgrtModel *
new_model(const char *sgfile)
{
	SgrtConfig cfg;
	SgrtModel *m = NULL;

	memset(&cfg, 0, sizeof cfg);
	cfg.graph = "symm";
	cfg.sgfile = sgfile;
	cfg.device = local_rank;
	cfg.nstreams = 2;
	cfg.stream_names = stream_names;
	cfg.arena_bytes = 1 << 20;
	if (sgrt_create(&m, &cfg) != SGRT_OK ||
	    sgrt_nccl_init(m, 0, 0) != SGRT_OK) {
		fprintf(stderr, "model: %s\n", sgrt_last_error(m));
		exit(1);
	}
	return m;
}

/* ------------------------------------------------------------------ values */

/* Rank r's element i in round `it`: an integer in [-8, 8]. */
static float
value(int r, long i, int it)
{
	return (float)((i * 7 + r * 13 + it * 5) % 17 - 8);
}

static size_t
esize(int dtype)
{
	return dtype == SGRT_F32 || dtype == SGRT_I32 ? 4 : 2;
}

/* x rounded into dtype, stored at p[i]. */
static void
put(void *p, long i, int dtype, float x)
{
	switch (dtype) {
	case SGRT_F32: ((float *)p)[i] = x; break;
	case SGRT_I32: ((int *)p)[i] = (int)x; break;
	case SGRT_F16: ((__half *)p)[i] = __float2half_rn(x); break;
	default: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x); break;
	}
}

static float
get(const void *p, long i, int dtype)
{
	switch (dtype) {
	case SGRT_F32: return ((const float *)p)[i];
	case SGRT_I32: return (float)((const int *)p)[i];
	case SGRT_F16: return __half2float(((const __half *)p)[i]);
	default: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
	}
}

/* The all-reduce of element i over every rank, rounded into dtype as the
 * kernel rounds it (combined in f32, divided by the world for avg). */
static float
reduced(long i, int it, int op, int dtype)
{
	float acc = value(0, i, it);
	unsigned char b[4];
	int r;

	for (r = 1; r < world; r++) {
		float v = value(r, i, it);
		acc = op == SGRT_RED_MAX ? fmaxf(acc, v) :
		      op == SGRT_RED_MIN ? fminf(acc, v) : acc + v;
	}
	if (op == SGRT_RED_AVG)
		acc = acc / (float)world;
	put(b, 0, dtype, acc);
	return get(b, 0, dtype);
}

/* Fills n elements of device buffer d with this rank's values. */
static void
upload(void *d, long n, int it, int dtype)
{
	char *h = (char *)malloc(n * esize(dtype) + 1);
	long i;

	for (i = 0; i < n; i++)
		put(h, i, dtype, value(rank, i, it));
	cudaMemcpy(d, h, n * esize(dtype), cudaMemcpyHostToDevice);
	/* From pageable memory cudaMemcpy may return before the data has
	 * landed, and the collectives run on non-blocking streams. */
	cudaDeviceSynchronize();
	free(h);
}

/* Elements of device buffer d that differ from the all-reduce. */
static long
reduce_errors(const void *d, long n, int it, int op, int dtype)
{
	char *h = (char *)malloc(n * esize(dtype) + 1);
	long i, bad = 0;

	cudaMemcpy(h, d, n * esize(dtype), cudaMemcpyDeviceToHost);
	for (i = 0; i < n; i++)
		bad += get(h, i, dtype) != reduced(i, it, op, dtype);
	free(h);
	return bad;
}

/* Elements of an all-gather result (world blocks of n) that differ. */
static long
gather_errors(const void *d, long n, int it, int dtype)
{
	char *h = (char *)malloc(world * n * esize(dtype) + 1);
	long i, bad = 0;
	int r;

	cudaMemcpy(h, d, world * n * esize(dtype), cudaMemcpyDeviceToHost);
	for (r = 0; r < world; r++)
		for (i = 0; i < n; i++)
			bad += get(h, r * n + i, dtype) != value(r, i, it);
	free(h);
	return bad;
}

/* ------------------------------------------------------------------ one collective per call */

static const int dtypes[] = { SGRT_F32, SGRT_F16, SGRT_BF16 };
static const int ops[] = { SGRT_RED_SUM, SGRT_RED_AVG, SGRT_RED_MAX,
                           SGRT_RED_MIN };
static const long counts[] = { 1, 7, 1000, 4099, 300000 };

/* One all-reduce of n elements from send (at a byte offset) to recv, as
 * one call on cs. */
static int
all_reduce_call(SgrtModel *m, cudaStream_t cs, int s, const void *send,
                void *recv, long n, int dtype, int op, int algo)
{
	SGRT_TRY(sgrt_call_begin(m, cs));
	SGRT_TRY(sgrt_all_reduce_algo(m, s, send, recv, n, dtype, op, algo,
	                              "all_reduce %g", 10));
	SGRT_TRY(sgrt_join_all(m, 11));
	return sgrt_call_end(m);
}

/* Every dtype, op and count, aligned and (offset by one element)
 * misaligned, and in place, against the formula. */
static void
test_all_reduce(SgrtModel *m, cudaStream_t cs, char *dsend, char *drecv)
{
	int d, o, c, mis, it = 0;

	for (d = 0; d < 3; d++)
		for (o = 0; o < 4; o++)
			for (c = 0; c < 5; c++)
				for (mis = 0; mis < 2; mis++) {
					long n = counts[c];
					size_t off = mis ? esize(dtypes[d]) : 0;
					it++;
					upload(dsend + off, n, it, dtypes[d]);
					CHECK_OK(all_reduce_call(m, cs, mis ? 1 : 0,
					         dsend + off, drecv + off, n,
					         dtypes[d], ops[o],
					         SGRT_ALGO_ONESHOT), m);
					cudaStreamSynchronize(cs);
					long bad = reduce_errors(drecv + off, n, it,
					                         ops[o], dtypes[d]);
					if (bad)
						fprintf(stderr, "  dtype %d op %d n %ld "
						        "mis %d: %ld wrong\n", dtypes[d],
						        ops[o], n, mis, bad);
					CHECK(bad == 0);
				}
	/* In place. */
	upload(drecv, 4099, 99, SGRT_BF16);
	CHECK_OK(all_reduce_call(m, cs, 0, drecv, drecv, 4099, SGRT_BF16,
	                         SGRT_RED_SUM, SGRT_ALGO_ONESHOT), m);
	cudaStreamSynchronize(cs);
	CHECK(reduce_errors(drecv, 4099, 99, SGRT_RED_SUM, SGRT_BF16) == 0);
}

/* Repeated calls with new data each time, alternating sizes: a read of
 * the previous call's data, or a rank overwriting its window while a
 * peer still reads it, shows as a wrong element. */
static void
test_repeat(SgrtModel *m, cudaStream_t cs, char *dsend, char *drecv)
{
	long bad = 0;
	int it;

	for (it = 200; it < 240; it++) {
		long n = it % 2 ? 5000 : 70001;
		upload(dsend, n, it, SGRT_F32);
		if (all_reduce_call(m, cs, 2, dsend, drecv, n, SGRT_F32,
		                    SGRT_RED_SUM, SGRT_ALGO_ONESHOT) != SGRT_OK)
			bad++;
		cudaStreamSynchronize(cs);
		bad += reduce_errors(drecv, n, it, SGRT_RED_SUM, SGRT_F32);
	}
	CHECK(bad == 0);
}

/* One-shot all-reduces on side and comm at once (each stream has its own
 * window and barriers). */
static void
test_two_streams(SgrtModel *m, cudaStream_t cs, char *dsend, char *drecv)
{
	long n = 100000;
	char *s2 = dsend + (4 << 20), *r2 = drecv + (4 << 20);

	upload(dsend, n, 300, SGRT_F32);
	upload(s2, n, 301, SGRT_F32);
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK_OK(sgrt_wait_stream(m, 1, 0, 1), m);
	CHECK_OK(sgrt_wait_stream(m, 2, 0, 1), m);
	CHECK_OK(sgrt_all_reduce_algo(m, 1, dsend, drecv, n, SGRT_F32,
	         SGRT_RED_SUM, SGRT_ALGO_ONESHOT, NULL, 2), m);
	CHECK_OK(sgrt_all_reduce_algo(m, 2, s2, r2, n, SGRT_F32, SGRT_RED_MAX,
	         SGRT_ALGO_ONESHOT, NULL, 3), m);
	CHECK_OK(sgrt_join_all(m, 4), m);
	CHECK_OK(sgrt_call_end(m), m);
	cudaStreamSynchronize(cs);
	CHECK(reduce_errors(drecv, n, 300, SGRT_RED_SUM, SGRT_F32) == 0);
	CHECK(reduce_errors(r2, n, 301, SGRT_RED_MAX, SGRT_F32) == 0);
}

/* CE all-gathers of several dtypes and sizes, and in place. */
static void
test_all_gather(SgrtModel *m, cudaStream_t cs, char *dsend, char *drecv)
{
	static const int gd[] = { SGRT_F32, SGRT_BF16, SGRT_I32 };
	static const long gn[] = { 1, 1000, 65537 };
	int d, c, it = 400;

	for (d = 0; d < 3; d++)
		for (c = 0; c < 3; c++) {
			long n = gn[c];
			it++;
			upload(dsend, n, it, gd[d]);
			CHECK_OK(sgrt_call_begin(m, cs), m);
			CHECK_OK(sgrt_all_gather_algo(m, 0, dsend, drecv, n, gd[d],
			         SGRT_ALGO_CE, "all_gather %h", 20), m);
			CHECK_OK(sgrt_call_end(m), m);
			cudaStreamSynchronize(cs);
			CHECK(gather_errors(drecv, n, it, gd[d]) == 0);
		}
	/* In place: this rank's block already sits at rank * n of recv. */
	upload(drecv + rank * 3000 * 4, 3000, 450, SGRT_F32);
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK_OK(sgrt_all_gather_algo(m, 0, drecv + rank * 3000 * 4, drecv,
	         3000, SGRT_F32, SGRT_ALGO_CE, NULL, 21), m);
	CHECK_OK(sgrt_call_end(m), m);
	cudaStreamSynchronize(cs);
	CHECK(gather_errors(drecv, 3000, 450, SGRT_F32) == 0);
}

/* What the one-shot kernel does not do goes to the plain collective, and
 * still gives the right answer: another dtype, an NCCL group, ce asked of
 * an all-reduce, a bad algo. */
static void
test_fallbacks(SgrtModel *m, cudaStream_t cs, char *dsend, char *drecv)
{
	upload(dsend, 1000, 500, SGRT_I32);
	CHECK_OK(all_reduce_call(m, cs, 0, dsend, drecv, 1000, SGRT_I32,
	                         SGRT_RED_SUM, SGRT_ALGO_ONESHOT), m);
	cudaStreamSynchronize(cs);
	CHECK(reduce_errors(drecv, 1000, 500, SGRT_RED_SUM, SGRT_I32) == 0);

	upload(dsend, 1000, 501, SGRT_F32);
	CHECK_OK(sgrt_call_begin(m, cs), m);
	CHECK_OK(sgrt_group_start(m, 30), m);
	CHECK_OK(sgrt_all_reduce_algo(m, 0, dsend, drecv, 1000, SGRT_F32,
	         SGRT_RED_SUM, SGRT_ALGO_ONESHOT, NULL, 31), m);
	CHECK_OK(sgrt_group_end(m, 32), m);
	CHECK_OK(sgrt_call_end(m), m);
	cudaStreamSynchronize(cs);
	CHECK(reduce_errors(drecv, 1000, 501, SGRT_RED_SUM, SGRT_F32) == 0);

	upload(dsend, 1000, 502, SGRT_F16);
	CHECK_OK(all_reduce_call(m, cs, 0, dsend, drecv, 1000, SGRT_F16,
	                         SGRT_RED_MAX, SGRT_ALGO_CE), m);
	CHECK_OK(all_reduce_call(m, cs, 0, dsend, drecv, 1000, SGRT_F16,
	                         SGRT_RED_MAX, SGRT_ALGO_RING), m);
	cudaStreamSynchronize(cs);
	CHECK(reduce_errors(drecv, 1000, 502, SGRT_RED_MAX, SGRT_F16) == 0);

	CHECK(sgrt_all_reduce_algo(m, 0, dsend, drecv, 1, SGRT_F32,
	      SGRT_RED_SUM, 7, NULL, 33) == SGRT_EUSAGE);
	CHECK(strstr(sgrt_last_error(m), "no collective algo 7") != NULL);
	sgrt_clear_error(m);
}

/* The one-shot all-reduce is traced as a collective under its name. */
static void
test_trace(SgrtModel *m, cudaStream_t cs, char *dsend, char *drecv)
{
	char path[] = "/tmp/sgrt-symm-trace-XXXXXX", buf[8192];
	int fd = mkstemp(path);
	size_t n = 0;
	FILE *f;

	if (fd < 0) {
		CHECK(0);
		return;
	}
	close(fd);
	CHECK_OK(sgrt_trace_enable(m, 1), m);
	CHECK_OK(all_reduce_call(m, cs, 0, dsend, drecv, 1000, SGRT_F32,
	                         SGRT_RED_SUM, SGRT_ALGO_ONESHOT), m);
	CHECK_OK(sgrt_trace_write(m, path), m);
	CHECK_OK(sgrt_trace_enable(m, 0), m);
	f = fopen(path, "r");
	if (f) {
		n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	CHECK(strstr(buf, "\"name\": \"all_reduce %g\"") != NULL);
	CHECK(strstr(buf, "\"cat\": \"collective\"") != NULL);
	unlink(path);
}

/* Everything above on model m; buffers of 16 MiB (enough for 300000 f32,
 * two streams' worth, and a world of up to 8 gathered 65537 f32). */
static void
run_suite(SgrtModel *m)
{
	char *dsend = NULL, *drecv = NULL;
	cudaStream_t cs;

	cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
	cudaMalloc(&dsend, 16 << 20);
	cudaMalloc(&drecv, 16 << 20);
	test_all_reduce(m, cs, dsend, drecv);
	test_repeat(m, cs, dsend, drecv);
	test_two_streams(m, cs, dsend, drecv);
	test_all_gather(m, cs, dsend, drecv);
	test_fallbacks(m, cs, dsend, drecv);
	test_trace(m, cs, dsend, drecv);
	cudaFree(dsend);
	cudaFree(drecv);
	cudaStreamDestroy(cs);
}

/* ------------------------------------------------------------------ one rank */

/* Runs f(m) with stderr going to a file; returns what it wrote. */
static char *
stderr_of(void (*f)(SgrtModel *), SgrtModel *m)
{
	char path[] = "/tmp/sgrt-symm-err-XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	static char buf[4096];
	ssize_t n;

	fflush(stderr);
	dup2(fd, 2);
	f(m);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	lseek(fd, 0, SEEK_SET);
	n = read(fd, buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
	unlink(path);
	return buf;
}

/* Two one-shot all-reduces and two CE all-gathers that fall back. */
static void
two_of_each(SgrtModel *m)
{
	void *d = NULL;
	int i;

	cudaMalloc(&d, 4096);
	sgrt_call_begin(m, 0);
	for (i = 0; i < 2; i++) {
		sgrt_all_reduce_algo(m, 0, d, d, 16, SGRT_F32, SGRT_RED_SUM,
		                     SGRT_ALGO_ONESHOT, NULL, 1);
		sgrt_all_gather_algo(m, 0, d, d, 16, SGRT_F32, SGRT_ALGO_CE,
		                     NULL, 2);
	}
	sgrt_call_end(m);
	cudaDeviceSynchronize();
	cudaFree(d);
}

static int
count_of(const char *s, const char *sub)
{
	int n = 0;

	while ((s = strstr(s, sub)) != NULL) {
		n++;
		s++;
	}
	return n;
}

/* One rank as launched: the plain fallback, said once per collective. */
static void
test_one_rank(void)
{
	SgrtModel *m = new_model("one.sg");
	const char *why = NULL;
	char *err;

	CHECK(sgrt_symm_active(m, &why) == 0);
	CHECK(why && strstr(why, "not set up yet") != NULL);
	setenv("SGRT_SYMM_DEBUG", "1", 1);
	err = stderr_of(two_of_each, m);
	unsetenv("SGRT_SYMM_DEBUG");
	CHECK(count_of(err, "all_reduce algo=\"oneshot\" runs as the plain "
	               "all_reduce: one rank (WORLD_SIZE=1)") == 1);
	CHECK(count_of(err, "all_gather algo=\"ce\" runs as the plain "
	               "all_gather: one rank") == 1);
	CHECK(sgrt_symm_active(m, &why) == 0);
	CHECK(why && strcmp(why, "one rank (WORLD_SIZE=1)") == 0);
	run_suite(m);
	CHECK(sgrt_symm_active(m, NULL) == 0);
	sgrt_destroy(m);
}

/* One rank with SGRT_SYMM=force: the device-API path itself. */
static void
test_forced(void)
{
	const char *req = getenv("SGRT_TEST_SYMM_REQUIRE");
	SgrtModel *m;
	const char *why = NULL;
	size_t live0;
	int on;

	setenv("SGRT_SYMM", "force", 1);
	m = new_model("forced.sg");
	live0 = sgrt_live_bytes(m);
	CHECK_OK(sgrt_symm_reserve(m, 1, 3 << 20, 40), m);
	on = sgrt_symm_active(m, &why);
	if (on) {
		/* The reservation is device memory of the model. */
		CHECK(sgrt_live_bytes(m) >= live0 + (3 << 20));
		printf("forced one-rank symmetric memory: on\n");
	} else {
		printf("forced one-rank symmetric memory: off: %s\n", why);
	}
	if (req && strcmp(req, "1") == 0)
		CHECK(on);
	run_suite(m);
	CHECK(sgrt_symm_active(m, NULL) == on);
	sgrt_destroy(m);
	unsetenv("SGRT_SYMM");
}

/* ------------------------------------------------------------------ several ranks */

/* Median microseconds of `reps` all-reduces (or all-gathers) on cs. */
static double
time_us(SgrtModel *m, cudaStream_t cs, void *a, void *b, long n, int gather,
        int algo)
{
	cudaEvent_t e0, e1;
	float ms = 0;
	int i, reps = 50;

	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	for (i = -5; i < reps; i++) {
		if (i == 0)
			cudaEventRecord(e0, cs);
		sgrt_call_begin(m, cs);
		if (gather)
			sgrt_all_gather_algo(m, 0, a, b, n, SGRT_F32, algo, NULL, 1);
		else
			sgrt_all_reduce_algo(m, 0, a, b, n, SGRT_F32, SGRT_RED_SUM,
			                     algo, NULL, 1);
		sgrt_call_end(m);
	}
	cudaEventRecord(e1, cs);
	cudaEventSynchronize(e1);
	cudaEventElapsedTime(&ms, e0, e1);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 1000.0 * ms / reps;
}

/* Mean time per collective, symmetric against plain NCCL (printed, not
 * checked: a report for docs/runtime.md). */
static void
bench(SgrtModel *m)
{
	static const long sizes[] = { 1024, 16384, 262144, 4194304 };
	void *a = NULL, *b = NULL;
	cudaStream_t cs;
	int i;

	cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
	cudaMalloc(&a, 16 << 20);
	cudaMalloc(&b, (size_t)world * (16 << 20));
	for (i = 0; i < 4; i++) {
		long n = sizes[i];
		double o = time_us(m, cs, a, b, n, 0, SGRT_ALGO_ONESHOT);
		double p = time_us(m, cs, a, b, n, 0, SGRT_ALGO_AUTO);
		double c = time_us(m, cs, a, b, n, 1, SGRT_ALGO_CE);
		double g = time_us(m, cs, a, b, n, 1, SGRT_ALGO_AUTO);
		if (rank == 0)
			printf("bench world %d, %ld bytes f32: all_reduce oneshot "
			       "%.1f us, nccl %.1f us; all_gather ce %.1f us, "
			       "nccl %.1f us\n", world, n * 4, o, p, c, g);
	}
	cudaFree(a);
	cudaFree(b);
	cudaStreamDestroy(cs);
}

static void
test_ranks(void)
{
	SgrtModel *m = new_model("ranks.sg");
	const char *why = NULL, *mode = getenv("SGRT_SYMM");
	int want = !(mode && strcmp(mode, "0") == 0);

	CHECK(sgrt_rank(m) == rank && sgrt_world(m) == world);
	run_suite(m);
	CHECK(sgrt_symm_active(m, &why) == want);
	if (!sgrt_symm_active(m, NULL))
		printf("rank %d: symmetric memory off: %s\n", rank, why);
	bench(m);
	sgrt_destroy(m);
}

int
main(void)
{
	char err[256];
	int ndev = 0;

	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("no GPU: skipped\n");
		return 77;
	}
	if (sgrt_env_ranks(&rank, &world, &local_rank, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (world > 1) {
		test_ranks();
		printf("rank %d: %d passed, %d failed\n", rank, npass, nfail);
		return nfail ? 1 : 0;
	}
	test_one_rank();
	test_forced();
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
