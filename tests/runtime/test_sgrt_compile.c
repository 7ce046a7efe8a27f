/*
 * test_sgrt_compile.c - libsgrt on a machine without a GPU: the whole API
 * links (a table takes every public function's address), and the parts
 * that need no device work: the command line, error messages, the trace
 * and bench JSON, the NCCL id file, the address map, model creation
 * failing cleanly.  tests/gpu/test_sgrt.cu covers the device side.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "init.h"
#include "sgrt_impl.h"

/* Every public function, so that the link fails if one is missing. */
static void (*const api[])(void) = {
	(void (*)(void))sgrt_create, (void (*)(void))sgrt_destroy,
	(void (*)(void))sgrt_device, (void (*)(void))sgrt_graph_name,
	(void (*)(void))sgrt_call_begin, (void (*)(void))sgrt_call_end,
	(void (*)(void))sgrt_stream, (void (*)(void))sgrt_event,
	(void (*)(void))sgrt_nstreams, (void (*)(void))sgrt_stream_name,
	(void (*)(void))sgrt_record, (void (*)(void))sgrt_wait,
	(void (*)(void))sgrt_record_ext, (void (*)(void))sgrt_wait_ext,
	(void (*)(void))sgrt_wait_stream, (void (*)(void))sgrt_join_all,
	(void (*)(void))sgrt_synchronize, (void (*)(void))sgrt_last_error,
	(void (*)(void))sgrt_status, (void (*)(void))sgrt_clear_error,
	(void (*)(void))sgrt_fail, (void (*)(void))sgrt_check_cuda,
	(void (*)(void))sgrt_check_cublas, (void (*)(void))sgrt_check_nccl,
	(void (*)(void))sgrt_check_launch, (void (*)(void))sgrt_arena,
	(void (*)(void))sgrt_arena_bytes, (void (*)(void))sgrt_device_alloc,
	(void (*)(void))sgrt_device_free, (void (*)(void))sgrt_host_alloc,
	(void (*)(void))sgrt_host_free, (void (*)(void))sgrt_alloc_async,
	(void (*)(void))sgrt_free_async, (void (*)(void))sgrt_live_bytes,
	(void (*)(void))sgrt_peak_bytes, (void (*)(void))sgrt_reset_peak,
	(void (*)(void))sgrt_copy, (void (*)(void))sgrt_memset,
	(void (*)(void))sgrt_op_begin, (void (*)(void))sgrt_op_end,
	(void (*)(void))sgrt_kernel_count, (void (*)(void))sgrt_trace_enable,
	(void (*)(void))sgrt_trace_write, (void (*)(void))sgrt_gemm,
	(void (*)(void))sgrt_env_ranks, (void (*)(void))sgrt_nccl_init,
	(void (*)(void))sgrt_rank, (void (*)(void))sgrt_world,
	(void (*)(void))sgrt_has_nccl, (void (*)(void))sgrt_all_reduce,
	(void (*)(void))sgrt_all_reduce_scaled, (void (*)(void))sgrt_reduce,
	(void (*)(void))sgrt_broadcast, (void (*)(void))sgrt_all_gather,
	(void (*)(void))sgrt_reduce_scatter, (void (*)(void))sgrt_all_to_all,
	(void (*)(void))sgrt_gather, (void (*)(void))sgrt_scatter,
	(void (*)(void))sgrt_send, (void (*)(void))sgrt_recv,
	(void (*)(void))sgrt_group_start, (void (*)(void))sgrt_group_end,
	(void (*)(void))sgrt_args_parse, (void (*)(void))sgrt_usage,
	(void (*)(void))sgrt_tensor_bytes, (void (*)(void))sgrt_load_tensors,
	(void (*)(void))sgrt_save_tensors, (void (*)(void))sgrt_main,
	(void (*)(void))sgrt_bench_line, (void (*)(void))sgrt_st_read,
	(void (*)(void))sgrt_st_write, (void (*)(void))sgrt_init_tensor,
	(void (*)(void))sgrt_sdpa_workspace_size, (void (*)(void))sgrt_sdpa_exec,
	(void (*)(void))sgrt_sdpa,
};

static void
test_links(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof api / sizeof *api; i++)
		assert_non_null(api[i]);
}

/* ------------------------------------------------------------------ command line */

/* Parses a NULL-terminated argument list (argv[0] = "model"). */
static int
parse(SgrtArgs *a, char *err, ...)
{
	char *argv[32];
	int argc = 1;
	va_list ap;

	argv[0] = "model";
	va_start(ap, err);
	while ((argv[argc] = va_arg(ap, char *)) != NULL)
		argc++;
	va_end(ap);
	err[0] = 0;
	return sgrt_args_parse(a, argc, argv, err, 256);
}

static void
test_args_defaults(void **state)
{
	SgrtArgs a;
	char err[256];

	(void)state;
	assert_int_equal(parse(&a, err, NULL), SGRT_OK);
	assert_null(a.params);
	assert_int_equal(a.ninputs, 0);
	assert_null(a.out);
	assert_null(a.trace);
	assert_int_equal(a.steps, -1);
	assert_int_equal(a.bench, 0);
	assert_int_equal(a.device, -1);
	assert_true(a.seed == 0);
	assert_int_equal(a.help, 0);
}

static void
test_args_all(void **state)
{
	SgrtArgs a;
	char err[256];

	(void)state;
	assert_int_equal(parse(&a, err, "--params", "p.st", "--inputs=i.st",
	                       "--out", "o.st", "--steps", "3", "--bench=7",
	                       "--seed", "18446744073709551615", "--trace",
	                       "t.json", "--device=2", NULL), SGRT_OK);
	assert_string_equal(a.params, "p.st");
	assert_int_equal(a.ninputs, 1);
	assert_string_equal(a.inputs[0], "i.st");
	assert_string_equal(a.out, "o.st");
	assert_string_equal(a.trace, "t.json");
	assert_int_equal(a.steps, 3);
	assert_int_equal(a.bench, 7);
	assert_true(a.seed == UINT64_MAX);
	assert_int_equal(a.device, 2);
	/* The last of a repeated option wins; --steps 0 is allowed. */
	assert_int_equal(parse(&a, err, "--steps", "4", "--steps=0", NULL),
	                 SGRT_OK);
	assert_int_equal(a.steps, 0);
	/* --inputs repeats: every file, in order (read together) */
	assert_int_equal(parse(&a, err, "--inputs", "a.st", "--inputs=b.st",
	                       NULL), SGRT_OK);
	assert_int_equal(a.ninputs, 2);
	assert_string_equal(a.inputs[0], "a.st");
	assert_string_equal(a.inputs[1], "b.st");
	assert_int_equal(parse(&a, err, "--help", NULL), SGRT_OK);
	assert_int_equal(a.help, 1);
}

static void
test_args_errors(void **state)
{
	SgrtArgs a;
	char err[256];

	(void)state;
	assert_int_equal(parse(&a, err, "--frobnicate", "1", NULL), SGRT_EUSAGE);
	assert_non_null(strstr(err, "--frobnicate"));
	/* unknown as the last argument: unknown, not "needs a value" */
	assert_int_equal(parse(&a, err, "--version", NULL), SGRT_EUSAGE);
	assert_non_null(strstr(err, "unknown option '--version'"));
	assert_int_equal(parse(&a, err, "--steps", NULL), SGRT_EUSAGE);
	assert_non_null(strstr(err, "needs a value"));
	assert_int_equal(parse(&a, err, "--steps", "-1", NULL), SGRT_EUSAGE);
	assert_int_equal(parse(&a, err, "--steps", "two", NULL), SGRT_EUSAGE);
	assert_int_equal(parse(&a, err, "--bench", "0", NULL), SGRT_EUSAGE);
	assert_int_equal(parse(&a, err, "--device", "1x", NULL), SGRT_EUSAGE);
	assert_int_equal(parse(&a, err, "--seed", "", NULL), SGRT_EUSAGE);
	assert_int_equal(parse(&a, err, "--seed", "18446744073709551616", NULL),
	                 SGRT_EUSAGE);
	assert_int_equal(parse(&a, err, "model.safetensors", NULL), SGRT_EUSAGE);
	assert_non_null(strstr(err, "model.safetensors"));
	assert_int_equal(parse(&a, err, "-x", NULL), SGRT_EUSAGE);
	assert_int_equal(parse(&a, err, "--inputs", "1", "--inputs", "2",
	                       "--inputs", "3", "--inputs", "4", "--inputs", "5",
	                       "--inputs", "6", "--inputs", "7", "--inputs", "8",
	                       "--inputs", "9", NULL), SGRT_EUSAGE);
	assert_non_null(strstr(err, "at most 8 --inputs files"));
}

static void
test_path_for_rank(void **state)
{
	char buf[64];

	(void)state;
	assert_int_equal(sgrt_path_for_rank(buf, sizeof buf, "o{rank}.st", 3),
	                 SGRT_OK);
	assert_string_equal(buf, "o3.st");
	assert_int_equal(sgrt_path_for_rank(buf, sizeof buf, "o.st", 3), SGRT_OK);
	assert_string_equal(buf, "o.st");
	assert_int_equal(sgrt_path_for_rank(buf, 4, "o{rank}.st", 12),
	                 SGRT_EUSAGE);
}

/* ------------------------------------------------------------------ JSON output */

static void
test_median(void **state)
{
	float odd[] = { 5, 1, 3 }, even[] = { 4, 1, 3, 2 };
	double med, min;

	(void)state;
	sgrt_median_min(odd, 3, &med, &min);
	assert_true(med == 3 && min == 1);
	sgrt_median_min(even, 4, &med, &min);
	assert_true(med == 2.5 && min == 1);
}

static void
test_bench_line(void **state)
{
	float ms[] = { 2.0f, 0.5f, 1.0f, 4.0f };
	char line[512];
	cJSON *j;

	(void)state;
	assert_int_equal(sgrt_bench_line(line, sizeof line, "mlp", ms, 4,
	                                 123456789012ull, 17), SGRT_OK);
	j = cJSON_Parse(line);
	assert_non_null(j);
	assert_int_equal(cJSON_GetArraySize(j), 5);
	assert_string_equal(cJSON_GetObjectItem(j, "graph")->valuestring, "mlp");
	assert_true(cJSON_GetObjectItem(j, "ms_median")->valuedouble == 1.5);
	assert_true(cJSON_GetObjectItem(j, "ms_min")->valuedouble == 0.5);
	assert_true(cJSON_GetObjectItem(j, "peak_bytes")->valuedouble ==
	            123456789012.0);
	assert_int_equal(cJSON_GetObjectItem(j, "kernels")->valueint, 17);
	/* The keys in the order interface.md gives them. */
	assert_string_equal(j->child->string, "graph");
	assert_string_equal(j->child->next->next->next->next->string, "kernels");
	cJSON_Delete(j);
	assert_int_equal(sgrt_bench_line(line, sizeof line, "g", ms, 0, 0, 0),
	                 SGRT_EUSAGE);
}

static void
test_trace_json(void **state)
{
	SgrtTraceEvent ev[3] = {
		{ "matmul %h", "kernel", 0, 14, 0.0, 12.5 },
		{ "all_reduce \"g\"", "collective", 2, 20, 3.25, 100 },
		{ "to_host %a", "copy", 1, 7, 50, 0.001 },
	};
	char *streams[3] = { "default", "side", "co\"mm" };
	int named[3] = { 0, 0, 0 };
	FILE *f = tmpfile();
	char buf[8192];
	size_t n;
	cJSON *j, *e;
	int i = 0, nm = 0;

	(void)state;
	assert_non_null(f);
	assert_int_equal(sgrt_trace_json(f, "mlp", "model.sg", 2, streams, 3,
	                                 ev, 3), SGRT_OK);
	rewind(f);
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	j = cJSON_Parse(buf);
	assert_non_null(j);
	assert_true(cJSON_IsArray(j));
	assert_int_equal(cJSON_GetArraySize(j), 3 + 3);
	/* The Chrome trace format's rules: every event has a name, a phase,
	 * an integer pid and tid; "M" thread_name events name each tid once
	 * (args.name), before the "X" slices, which have numeric ts and dur
	 * and a tid that a thread_name names. */
	cJSON_ArrayForEach(e, j) {
		const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
		cJSON *tid = cJSON_GetObjectItem(e, "tid");
		assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "name")));
		assert_true(cJSON_IsNumber(tid));
		assert_true(cJSON_IsNumber(cJSON_GetObjectItem(e, "pid")));
		assert_int_equal(cJSON_GetObjectItem(e, "pid")->valueint, 2);
		assert_true(tid->valueint >= 0 && tid->valueint < 3);
		if (strcmp(ph, "M") == 0) {
			assert_int_equal(i, 0); /* the metadata first */
			assert_string_equal(cJSON_GetObjectItem(e, "name")->valuestring,
			                    "thread_name");
			assert_int_equal(named[tid->valueint], 0);
			named[tid->valueint] = 1;
			assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(e,
			                    "args"), "name")->valuestring,
			                    streams[tid->valueint]);
			nm++;
			continue;
		}
		assert_string_equal(ph, "X");
		assert_true(named[tid->valueint]);
		assert_int_equal(tid->valueint, ev[i].tid);
		assert_string_equal(cJSON_GetObjectItem(e, "name")->valuestring,
		                    ev[i].name);
		assert_string_equal(cJSON_GetObjectItem(e, "cat")->valuestring,
		                    ev[i].cat);
		assert_true(cJSON_IsNumber(cJSON_GetObjectItem(e, "ts")));
		assert_true(fabs(cJSON_GetObjectItem(e, "ts")->valuedouble -
		                 ev[i].ts) < 1e-3);
		assert_true(fabs(cJSON_GetObjectItem(e, "dur")->valuedouble -
		                 ev[i].dur) < 1e-3);
		assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"),
		                 "line")->valueint, ev[i].sgline);
		i++;
	}
	assert_int_equal(nm, 3);
	assert_int_equal(i, 3);
	cJSON_Delete(j);
	/* No slices: the metadata alone, still valid JSON. */
	f = tmpfile();
	assert_int_equal(sgrt_trace_json(f, "g", "", 0, streams, 1, NULL, 0),
	                 SGRT_OK);
	rewind(f);
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	j = cJSON_Parse(buf);
	assert_true(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 1);
	cJSON_Delete(j);
}

/* ------------------------------------------------------------------ errors */

/* A model object with no device behind it, enough for the error slot. */
static SgrtModel *
fake_model(const char *sgfile)
{
	SgrtModel *m = calloc(1, sizeof *m);

	m->graph = strdup("mlp");
	m->sgfile = strdup(sgfile);
	m->device = -1;
	return m;
}

static void
test_error_messages(void **state)
{
	SgrtModel *m = fake_model("model.sg");
	char want[512];

	(void)state;
	assert_int_equal(sgrt_status(m), SGRT_OK);
	assert_string_equal(sgrt_last_error(m), "");
	assert_int_equal(sgrt_check_cuda(m, cudaSuccess, "cudaFree(p)", 3),
	                 SGRT_OK);
	assert_int_equal(sgrt_check_cuda(m, cudaErrorIllegalAddress,
	                 "cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s)",
	                 42), SGRT_ECUDA);
	snprintf(want, sizeof want,
	         "model.sg:42: cudaMemcpyAsync failed: %s (%s)",
	         cudaGetErrorString(cudaErrorIllegalAddress),
	         cudaGetErrorName(cudaErrorIllegalAddress));
	assert_string_equal(sgrt_last_error(m), want);
	assert_non_null(strstr(sgrt_last_error(m), "illegal memory access"));
	assert_int_equal(sgrt_status(m), SGRT_ECUDA);
	/* The first error of a call is the one kept. */
	assert_int_equal(sgrt_fail(m, SGRT_EIO, 7, "later"), SGRT_EIO);
	assert_string_equal(sgrt_last_error(m), want);
	sgrt_clear_error(m);
	assert_int_equal(sgrt_fail(m, SGRT_EIO, 0, "no line %d", 1), SGRT_EIO);
	assert_string_equal(sgrt_last_error(m), "model.sg: no line 1");
	sgrt_clear_error(m);
	sgrt_fail(m, SGRT_EIO, -1, "as is");
	assert_string_equal(sgrt_last_error(m), "as is");
	sgrt_clear_error(m);
	assert_int_equal(sgrt_check_cublas(m, 0, "cublasLtMatmul(h)", 9), SGRT_OK);
	assert_int_equal(sgrt_check_cublas(m, 7 /* CUBLAS_STATUS_INVALID_VALUE */,
	                 "cublasLtMatmul(h, op)", 9), SGRT_ECUBLAS);
	assert_true(strncmp(sgrt_last_error(m),
	            "model.sg:9: cublasLtMatmul failed: ", 35) == 0);
	assert_non_null(strstr(sgrt_last_error(m), "CUBLAS_STATUS_INVALID_VALUE"));
	sgrt_clear_error(m);
	assert_int_equal(sgrt_check_nccl(m, 0, "ncclAllReduce(a)", 5), SGRT_OK);
	assert_int_equal(sgrt_check_nccl(m, 4 /* ncclInvalidArgument */,
	                 "ncclAllReduce(a, b)", 5), SGRT_ENCCL);
	assert_true(strncmp(sgrt_last_error(m),
	            "model.sg:5: ncclAllReduce failed: ", 34) == 0);
	free(m->graph);
	free(m->sgfile);
	free(m);
}

/* The SGRT_CHECK_CUDA statement form returns the code from the caller. */
static int
checked(SgrtModel *m, cudaError_t e, int *reached)
{
	SGRT_CHECK_CUDA(m, e, 12);
	*reached = 1;
	return SGRT_OK;
}

static void
test_check_macro(void **state)
{
	SgrtModel *m = fake_model("");
	int reached = 0;

	(void)state;
	assert_int_equal(checked(m, cudaSuccess, &reached), SGRT_OK);
	assert_int_equal(reached, 1);
	reached = 0;
	assert_int_equal(checked(m, cudaErrorInvalidValue, &reached), SGRT_ECUDA);
	assert_int_equal(reached, 0);
	/* No .sg file: the graph name stands in; the call's text is "e". */
	assert_true(strncmp(sgrt_last_error(m), "mlp:12: e failed: ", 18) == 0);
	free(m->graph);
	free(m->sgfile);
	free(m);
}

/* Without a GPU, creation fails with a message; with one, it works. */
static void
test_create(void **state)
{
	static const char *const names[] = { "side" };
	SgrtConfig cfg = { "mlp", "model.sg", 0, 1, names, NULL, 2, NULL,
	                   1 << 20, 0 };
	SgrtModel *m = NULL;
	int ndev = 0, rc;

	(void)state;
	rc = sgrt_create(&m, &cfg);
	assert_non_null(m);
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		assert_int_equal(rc, SGRT_ECUDA);
		assert_true(strncmp(sgrt_last_error(m), "model.sg: ", 10) == 0);
		assert_non_null(strstr(sgrt_last_error(m), " failed: "));
	} else {
		assert_int_equal(rc, SGRT_OK);
		assert_int_equal(sgrt_nstreams(m), 2);
		assert_string_equal(sgrt_stream_name(m, 1), "side");
		assert_true(sgrt_peak_bytes(m) >= (size_t)1 << 20);
	}
	sgrt_destroy(m);
	/* A bad configuration is refused before any device work. */
	cfg.nstreams = 1;
	cfg.stream_names = NULL;
	assert_int_equal(sgrt_create(&m, &cfg), SGRT_EUSAGE);
	sgrt_destroy(m);
}

/* ------------------------------------------------------------------ pointer map */

static void
test_ptrmap(void **state)
{
	enum { N = 2000 };
	static size_t ref[N];
	SgrtPtrMap pm = { 0 };
	unsigned seed = 12345;
	size_t size;
	int i, step, live = 0;

	(void)state;
	for (step = 0; step < 20000; step++) {
		seed = seed * 1103515245u + 12345u;
		i = (int)((seed >> 8) % N);
		/* Addresses 256 apart, as allocations are. */
		void *p = (void *)(uintptr_t)(0x7f0000000000ull + 256ull * (i + 1));
		if (ref[i]) {
			assert_int_equal(sgrt_ptrmap_take(&pm, p, &size), 1);
			assert_true(size == ref[i]);
			ref[i] = 0;
			live--;
			assert_int_equal(sgrt_ptrmap_take(&pm, p, &size), 0);
		} else {
			ref[i] = (size_t)step + 1;
			assert_int_equal(sgrt_ptrmap_put(&pm, p, ref[i]), SGRT_OK);
			live++;
		}
		assert_int_equal((int)pm.n, live);
	}
	for (i = 0; i < N; i++) {
		void *p = (void *)(uintptr_t)(0x7f0000000000ull + 256ull * (i + 1));
		assert_int_equal(sgrt_ptrmap_take(&pm, p, &size), ref[i] != 0);
		if (ref[i])
			assert_true(size == ref[i]);
	}
	assert_int_equal((int)pm.n, 0);
	sgrt_ptrmap_free(&pm);
}

/* ------------------------------------------------------------------ ranks and the NCCL id */

static void
test_env_ranks(void **state)
{
	char err[256];
	int r, w, l;

	(void)state;
	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	unsetenv("LOCAL_RANK");
	assert_int_equal(sgrt_env_ranks(&r, &w, &l, err, sizeof err), SGRT_OK);
	assert_true(r == 0 && w == 1 && l == 0);
	setenv("RANK", "3", 1);
	setenv("WORLD_SIZE", "4", 1);
	assert_int_equal(sgrt_env_ranks(&r, &w, &l, err, sizeof err), SGRT_OK);
	assert_true(r == 3 && w == 4 && l == 3);
	setenv("LOCAL_RANK", "1", 1);
	assert_int_equal(sgrt_env_ranks(&r, &w, &l, err, sizeof err), SGRT_OK);
	assert_true(r == 3 && w == 4 && l == 1);
	setenv("RANK", "4", 1);
	assert_int_equal(sgrt_env_ranks(&r, &w, &l, err, sizeof err),
	                 SGRT_EUSAGE);
	assert_non_null(strstr(err, "RANK=4"));
	setenv("RANK", "x", 1);
	assert_int_equal(sgrt_env_ranks(&r, &w, &l, err, sizeof err),
	                 SGRT_EUSAGE);
	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	unsetenv("LOCAL_RANK");
}

static void
test_idfile(void **state)
{
	unsigned char id[128], got[128];
	char path[256], buf[256], err[512];
	struct utimbuf old;
	int i;

	(void)state;
	snprintf(path, sizeof path, "/tmp/sgrt-test-id-%ld", (long)getpid());
	setenv("SGRT_NCCL_ID_FILE", path, 1);
	assert_int_equal(sgrt_idfile_path(buf, sizeof buf), SGRT_OK);
	assert_string_equal(buf, path);
	unsetenv("SGRT_NCCL_ID_FILE");
	setenv("SGRT_JOB_ID", "job42", 1);
	assert_int_equal(sgrt_idfile_path(buf, sizeof buf), SGRT_OK);
	assert_string_equal(buf, "/tmp/sgrt-nccl-id-job42");
	unsetenv("SGRT_JOB_ID");

	for (i = 0; i < 128; i++)
		id[i] = (unsigned char)(i * 7 + 1);
	unlink(path);
	/* Nothing there: the reader gives up after its timeout. */
	assert_int_equal(sgrt_idfile_read(path, got, 128, 2, 0.05, 120, err,
	                                  sizeof err), SGRT_ENCCL);
	assert_non_null(strstr(err, path));
	assert_int_equal(sgrt_idfile_write(path, id, 128, 2, err, sizeof err),
	                 SGRT_OK);
	memset(got, 0, sizeof got);
	assert_int_equal(sgrt_idfile_read(path, got, 128, 2, 1, 120, err,
	                                  sizeof err), SGRT_OK);
	assert_memory_equal(got, id, 128);
	/* A file for another world size is not ours. */
	assert_int_equal(sgrt_idfile_read(path, got, 128, 3, 0.05, 120, err,
	                                  sizeof err), SGRT_ENCCL);
	/* A stale file (a crashed run's) is ignored. */
	old.actime = old.modtime = time(NULL) - 1000;
	assert_int_equal(utime(path, &old), 0);
	assert_int_equal(sgrt_idfile_read(path, got, 128, 2, 0.05, 120, err,
	                                  sizeof err), SGRT_ENCCL);
	unlink(path);
	/* A reader started before the writer waits for it. */
	pid_t pid = fork();
	if (pid == 0) {
		struct timespec nap = { 0, 100 * 1000 * 1000 };
		nanosleep(&nap, NULL);
		_exit(sgrt_idfile_write(path, id, 128, 2, err, sizeof err));
	}
	memset(got, 0, sizeof got);
	assert_int_equal(sgrt_idfile_read(path, got, 128, 2, 10, 120, err,
	                                  sizeof err), SGRT_OK);
	assert_memory_equal(got, id, 128);
	waitpid(pid, &i, 0);
	assert_true(WIFEXITED(i) && WEXITSTATUS(i) == 0);
	unlink(path);
	/* An unwritable place is an I/O error. */
	assert_int_equal(sgrt_idfile_write("/nonexistent-dir/x", id, 128, 2, err,
	                                   sizeof err), SGRT_EIO);
}

/* ------------------------------------------------------------------ driver pieces */

static void
test_tensor_bytes(void **state)
{
	SgrtTensorDesc t = { "w", SGRT_ROLE_PARAM, SGRT_BF16, 2, { 3, 5 }, 0 };
	SgrtTensorDesc s = { "s", SGRT_ROLE_STATE, SGRT_F32, 0, { 0 }, 0 };

	(void)state;
	assert_int_equal((int)sgrt_tensor_bytes(&t), 30);
	assert_int_equal((int)sgrt_tensor_bytes(&s), 4);
	assert_int_equal((int)sgrt_coll_dtype_size(SGRT_U64), 8);
	assert_int_equal((int)sgrt_coll_dtype_size(SGRT_BOOL), 1);
	assert_int_equal((int)sgrt_coll_dtype_size(99), 0);
}

/* What --out holds of a table (sgrt_saved_set): a returned input once,
 * a written input as written, an input only read not at all, a tensor
 * without memory not at all; and a table of many names in n log n. */
static void
test_saved_set(void **state)
{
	/* As sgc writes it for tests/golden/st_return_input.sg, with an
	 * unbound param after it. */
	const SgrtTensorDesc t[] = {
		{ "x", SGRT_ROLE_INPUT, SGRT_F32, 1, { 4 }, 0 },
		{ "c", SGRT_ROLE_INPUT, SGRT_F32, 1, { 4 }, SGRT_TF_MUTATED },
		{ "y", SGRT_ROLE_OUTPUT, SGRT_F32, 1, { 4 }, 0 },
		{ "x", SGRT_ROLE_OUTPUT, SGRT_F32, 1, { 4 }, 0 },
		{ "c", SGRT_ROLE_OUTPUT, SGRT_F32, 1, { 4 }, 0 },
		{ "w", SGRT_ROLE_PARAM, SGRT_F32, 1, { 4 }, 0 },
		{ "v", SGRT_ROLE_PARAM, SGRT_F32, 1, { 4 }, 0 },
	};
	const uint8_t want[] = { 0, 1, 1, 1, 0, 1, 0 };
	int mem;
	void *const ptr[] = { &mem, &mem, &mem, &mem, &mem, &mem, NULL };
	uint8_t keep[7];
	enum { N = 100000 };
	SgrtTensorDesc *big = calloc(N, sizeof *big);
	void **bptr = calloc(N, sizeof *bptr);
	uint8_t *bkeep = calloc(N, 1);
	char (*names)[16] = calloc(N, sizeof *names);
	int i, kept = 0;

	(void)state;
	memset(keep, 9, sizeof keep);
	assert_int_equal(sgrt_saved_set(t, 7, ptr, keep), 0);
	assert_memory_equal(keep, want, sizeof want);
	/* 100000 tensors, every name twice (i and i + N/2): the first kept. */
	assert_non_null(big);
	assert_non_null(bptr);
	assert_non_null(bkeep);
	assert_non_null(names);
	for (i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "p%d", (N - 1 - i) % (N / 2));
		big[i] = (SgrtTensorDesc){ names[i], SGRT_ROLE_PARAM, SGRT_F32,
		                           0, { 0 }, 0 };
		bptr[i] = &mem;
	}
	assert_int_equal(sgrt_saved_set(big, N, bptr, bkeep), 0);
	for (i = 0; i < N; i++) {
		assert_int_equal(bkeep[i], i < N / 2);
		kept += bkeep[i];
	}
	assert_int_equal(kept, N / 2);
	free(big);
	free(bptr);
	free(bkeep);
	free(names);
}

static int created;

static int
never_create(void **model, int device)
{
	(void)model;
	(void)device;
	created = 1;
	return SGRT_ECUDA;
}

/* --help and a bad command line end before any model exists. */
static void
test_main_usage(void **state)
{
	SgrtProgram p;
	char *help[] = { "model", "--help", NULL };
	char *bad[] = { "model", "--steps", "x", NULL };
	FILE *saved_out = stdout, *saved_err = stderr;

	(void)state;
	memset(&p, 0, sizeof p);
	p.graph = "g";
	p.create = never_create;
	stdout = tmpfile();
	stderr = tmpfile();
	assert_int_equal(sgrt_main(2, help, &p), SGRT_OK);
	assert_int_equal(sgrt_main(3, bad, &p), SGRT_EUSAGE);
	fclose(stdout);
	fclose(stderr);
	stdout = saved_out;
	stderr = saved_err;
	assert_int_equal(created, 0);
}

/* cuDNN attention without a loadable libcudnn (a missing file, a library
 * without cuDNN's symbols): SGRT_SDPA_UNAVAILABLE from every entry, no
 * error recorded, nothing touched on the device, and it stays so. */
static void
test_sdpa_unavailable(void **state)
{
	static const char *libs[] = {"/nonexistent/libcudnn.so.9", "libm.so.6"};
	char buf[16];
	SgrtSdpa a;

	(void)state;
	memset(&a, 0, sizeof a);
	a.dtype = SGRT_BF16;
	a.b = 2, a.h = a.h_kv = 4, a.l = a.s = 128, a.e = a.ev = 64;
	a.q = a.k = a.v = a.dout = buf;
	a.o = a.dq = a.dk = a.dv = buf;
	for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
		SgrtModel m;
		size_t bytes = 1;
		memset(&m, 0, sizeof m);
		m.nstreams = 1;
		setenv("SGRT_CUDNN_LIB", libs[i], 1);
		for (int bwd = 0; bwd < 2; bwd++) {
			assert_int_equal(sgrt_sdpa_workspace_size(&m, &a, bwd, &bytes),
			                 SGRT_SDPA_UNAVAILABLE);
			assert_int_equal(bytes, 0);
			assert_int_equal(sgrt_sdpa_exec(&m, 0, &a, bwd, NULL, 0, "x", 1),
			                 SGRT_SDPA_UNAVAILABLE);
			assert_int_equal(sgrt_sdpa(&m, 0, &a, bwd, "x", 1), SGRT_SDPA_UNAVAILABLE);
		}
		assert_int_equal(m.status, SGRT_OK);
		assert_string_equal(m.err, "");
		assert_null(m.cudnn);
		assert_int_equal(m.nkernels, 0);
		sgrt_cudnn_release(&m);
	}
	unsetenv("SGRT_CUDNN_LIB");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_links),
		cmocka_unit_test(test_args_defaults),
		cmocka_unit_test(test_args_all),
		cmocka_unit_test(test_args_errors),
		cmocka_unit_test(test_path_for_rank),
		cmocka_unit_test(test_median),
		cmocka_unit_test(test_bench_line),
		cmocka_unit_test(test_trace_json),
		cmocka_unit_test(test_error_messages),
		cmocka_unit_test(test_check_macro),
		cmocka_unit_test(test_create),
		cmocka_unit_test(test_ptrmap),
		cmocka_unit_test(test_env_ranks),
		cmocka_unit_test(test_idfile),
		cmocka_unit_test(test_tensor_bytes),
		cmocka_unit_test(test_saved_set),
		cmocka_unit_test(test_main_usage),
		cmocka_unit_test(test_sdpa_unavailable),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
