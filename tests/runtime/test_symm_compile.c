/*
 * test_symm_compile.c - libsgrt's symmetric-memory collectives
 * (sgrt_symm.c) on a machine without a GPU: the API links, algo names,
 * and the fallback decisions that need no device: a bad algo, the
 * reasons sgrt_symm_active gives, a fallback that reaches the plain
 * collective (and its error), each kind of fallback said once under
 * SGRT_SYMM_DEBUG, and sgrt_symm_reserve's argument checks.  The model is
 * a bare SgrtModel (sgrt_impl.h), so that nothing touches CUDA.
 * tests/gpu/test_symm.cu runs the collectives themselves.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sgrt_impl.h"

/* The symmetric-memory API, so that the link fails if one is missing. */
static void (*const api[])(void) = {
	(void (*)(void))sgrt_algo_from_name,
	(void (*)(void))sgrt_all_reduce_algo,
	(void (*)(void))sgrt_all_gather_algo,
	(void (*)(void))sgrt_symm_reserve,
	(void (*)(void))sgrt_symm_active,
	(void (*)(void))sgrt_symm_release,
};

/* A model with one stream (`default`) and no device, no communicator:
 * rank 0 of world ranks. */
static SgrtModel *
bare_model(int world)
{
	SgrtModel *m = calloc(1, sizeof *m);

	assert_non_null(m);
	m->graph = (char *)"g";
	m->sgfile = (char *)"symm.sg";
	m->nstreams = 1;
	m->world = world;
	m->device = -1;
	return m;
}

static void
free_model(SgrtModel *m)
{
	sgrt_symm_release(m);
	assert_null(m->symm);
	free(m);
}

/* Sends stderr to a fresh file until end_capture; returns the file. */
static int
begin_capture(int *saved)
{
	char path[] = "/tmp/sgrt-symm-test-XXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	unlink(path);
	fflush(stderr);
	*saved = dup(2);
	assert_true(*saved >= 0);
	dup2(fd, 2);
	return fd;
}

/* Puts stderr back; what went to the file (a static buffer). */
static const char *
end_capture(int fd, int saved)
{
	static char buf[4096];
	ssize_t n;

	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	lseek(fd, 0, SEEK_SET);
	n = read(fd, buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
	return buf;
}

/* Runs f(m) with stderr going to a file; returns what it wrote. */
static const char *
stderr_of(void (*f)(SgrtModel *), SgrtModel *m)
{
	int saved, fd = begin_capture(&saved);

	f(m);
	return end_capture(fd, saved);
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

/* ------------------------------------------------------------------ tests */

static void
test_api(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof api / sizeof *api; i++)
		assert_non_null(api[i]);
}

static void
test_algo_names(void **state)
{
	(void)state;
	assert_int_equal(sgrt_algo_from_name("auto"), SGRT_ALGO_AUTO);
	assert_int_equal(sgrt_algo_from_name("ring"), SGRT_ALGO_RING);
	assert_int_equal(sgrt_algo_from_name("oneshot"), SGRT_ALGO_ONESHOT);
	assert_int_equal(sgrt_algo_from_name("ce"), SGRT_ALGO_CE);
	assert_int_equal(sgrt_algo_from_name("twoshot"), -1);
	assert_int_equal(sgrt_algo_from_name("CE"), -1);
	assert_int_equal(sgrt_algo_from_name(NULL), -1);
}

/* An algo out of range is refused with the line, before anything else. */
static void
test_bad_algo(void **state)
{
	SgrtModel *m = bare_model(2);
	int x = 0;

	(void)state;
	assert_int_equal(sgrt_all_reduce_algo(m, 0, &x, &x, 1, SGRT_F32,
	                 SGRT_RED_SUM, 4, NULL, 12), SGRT_EUSAGE);
	assert_string_equal(sgrt_last_error(m), "symm.sg:12: no collective algo 4");
	sgrt_clear_error(m);
	assert_int_equal(sgrt_all_gather_algo(m, 0, &x, &x, 1, SGRT_F32, -1,
	                 NULL, 13), SGRT_EUSAGE);
	assert_null(m->symm);  /* nothing was set up */
	free_model(m);
}

/* Before any collective: off, "not set up yet"; a NULL model too. */
static void
test_active_before(void **state)
{
	SgrtModel *m = bare_model(2);
	const char *why = NULL;

	(void)state;
	assert_int_equal(sgrt_symm_active(m, &why), 0);
	assert_non_null(strstr(why, "not set up yet"));
	assert_int_equal(sgrt_symm_active(NULL, NULL), 0);
	free_model(m);
}

/* A one-shot all-reduce in place, twice, and a CE all-gather, twice. */
static void
twice_each(SgrtModel *m)
{
	float x[4] = { 1, 2, 3, 4 };
	int i, want = sgrt_has_nccl() ? SGRT_EUSAGE : SGRT_OK;

	for (i = 0; i < 2; i++) {
		assert_int_equal(sgrt_all_reduce_algo(m, 0, x, x, 4, SGRT_F32,
		                 SGRT_RED_SUM, SGRT_ALGO_ONESHOT, NULL, 20), want);
		sgrt_clear_error(m);
		assert_int_equal(sgrt_all_gather_algo(m, 0, x, x, 4, SGRT_F32,
		                 SGRT_ALGO_CE, NULL, 21), want);
		sgrt_clear_error(m);
	}
}

/* Without a communicator every algo falls back to the plain collective,
 * whose own error (with NCCL: no sgrt_nccl_init) comes back; with
 * SGRT_SYMM_DEBUG=1 each collective's fallback is said once. */
static void
test_fallback_said_once(void **state)
{
	SgrtModel *m = bare_model(2);
	const char *err, *why = NULL;
	float x = 0;

	(void)state;
	setenv("SGRT_SYMM_DEBUG", "1", 1);
	err = stderr_of(twice_each, m);
	unsetenv("SGRT_SYMM_DEBUG");
	assert_int_equal(count_of(err, "sgrt: rank 0: all_reduce "
	                 "algo=\"oneshot\" runs as the plain all_reduce: "), 1);
	assert_int_equal(count_of(err, "sgrt: rank 0: all_gather algo=\"ce\" "
	                 "runs as the plain all_gather: "), 1);
	assert_int_equal(count_of(err, "sgrt:"), 2);
	assert_int_equal(sgrt_symm_active(m, &why), 0);
	if (sgrt_has_nccl()) {
		assert_non_null(strstr(err, "no NCCL communicator"));
		assert_string_equal(why, "no NCCL communicator (sgrt_nccl_init "
		                    "was not called)");
		/* The plain collective's error, at the call's line. */
		assert_int_equal(sgrt_all_reduce_algo(m, 0, &x, &x, 1, SGRT_F32,
		                 SGRT_RED_SUM, SGRT_ALGO_ONESHOT, NULL, 30),
		                 SGRT_EUSAGE);
		assert_string_equal(sgrt_last_error(m), "symm.sg:30: collective "
		                    "before sgrt_nccl_init");
	} else {
		assert_string_equal(why, "libsgrt was built without NCCL");
	}
	free_model(m);
}

/* Without SGRT_SYMM_DEBUG nothing is said. */
static void
test_quiet(void **state)
{
	SgrtModel *m = bare_model(2);

	(void)state;
	unsetenv("SGRT_SYMM_DEBUG");
	assert_string_equal(stderr_of(twice_each, m), "");
	free_model(m);
}

/* One rank (with a communicator) is off before anything collective: a
 * placeholder communicator is never used. */
static void
test_one_rank(void **state)
{
	SgrtModel *m = bare_model(1);
	const char *why = NULL;

	(void)state;
	if (!sgrt_has_nccl()) {
		free_model(m);
		skip();
	}
	m->comm = (void *)&m;  /* never dereferenced: one rank stops first */
	unsetenv("SGRT_SYMM");
	assert_int_equal(sgrt_symm_reserve(m, 0, 1024, 41), SGRT_OK);
	assert_int_equal(sgrt_symm_active(m, &why), 0);
	assert_string_equal(why, "one rank (WORLD_SIZE=1)");
	m->comm = NULL;
	free_model(m);
}

/* Reasons of the call itself come first: a dtype or op the kernel does
 * not do, an NCCL group, the other collective's algo. */
static void
test_call_reasons(void **state)
{
	SgrtModel *m;
	const char *err;
	struct { int dtype, op, group, algo, ag; const char *want; } c[] = {
		{ SGRT_I32, SGRT_RED_SUM, 0, SGRT_ALGO_ONESHOT, 0,
		  "all_reduce algo=\"oneshot\" runs as the plain all_reduce: the "
		  "one-shot kernel does f32, f16 and bf16 only" },
		{ SGRT_F32, SGRT_RED_PROD, 0, SGRT_ALGO_ONESHOT, 0,
		  "the one-shot kernel does sum, avg, max and min only" },
		{ SGRT_F32, SGRT_RED_SUM, 1, SGRT_ALGO_ONESHOT, 0,
		  "runs as the plain all_reduce: inside an NCCL group" },
		{ SGRT_F32, SGRT_RED_SUM, 0, SGRT_ALGO_CE, 0,
		  "all_reduce algo=\"ce\" runs as the plain all_reduce: ce is an "
		  "all_gather algorithm" },
		{ SGRT_F32, 0, 0, SGRT_ALGO_ONESHOT, 1,
		  "all_gather algo=\"oneshot\" runs as the plain all_gather: "
		  "oneshot is an all_reduce algorithm" },
		{ SGRT_F32, 0, 1, SGRT_ALGO_CE, 1,
		  "all_gather algo=\"ce\" runs as the plain all_gather: inside an "
		  "NCCL group" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof c / sizeof *c; i++) {
		int x = 0, saved, fd;

		m = bare_model(2);
		m->group_depth = c[i].group;
		setenv("SGRT_SYMM_DEBUG", "1", 1);
		fd = begin_capture(&saved);
		if (c[i].ag)
			(void)sgrt_all_gather_algo(m, 0, &x, &x, 1, c[i].dtype,
			                           c[i].algo, NULL, 51);
		else
			(void)sgrt_all_reduce_algo(m, 0, &x, &x, 1, c[i].dtype,
			                           c[i].op, c[i].algo, NULL, 51);
		err = end_capture(fd, saved);
		unsetenv("SGRT_SYMM_DEBUG");
		if (!strstr(err, c[i].want))
			fail_msg("case %zu: said \"%s\"", i, err);
		/* Nothing was set up for a call that could not use it. */
		assert_int_equal(sgrt_symm_active(m, NULL), 0);
		m->group_depth = 0;
		free_model(m);
	}
}

static void
test_reserve_checks(void **state)
{
	SgrtModel *m = bare_model(2);

	(void)state;
	assert_int_equal(sgrt_symm_reserve(m, 3, 1024, 60), SGRT_EUSAGE);
	assert_string_equal(sgrt_last_error(m), "symm.sg:60: no stream 3");
	sgrt_clear_error(m);
	m->group_depth = 1;
	assert_int_equal(sgrt_symm_reserve(m, 0, 1024, 61), SGRT_EUSAGE);
	assert_non_null(strstr(sgrt_last_error(m), "inside an NCCL group"));
	m->group_depth = 0;
	sgrt_clear_error(m);
	/* Without a communicator it decides "off" and succeeds. */
	assert_int_equal(sgrt_symm_reserve(m, 0, 1024, 62), SGRT_OK);
	assert_int_equal(sgrt_symm_active(m, NULL), 0);
	free_model(m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_api),
		cmocka_unit_test(test_algo_names),
		cmocka_unit_test(test_bad_algo),
		cmocka_unit_test(test_active_before),
		cmocka_unit_test(test_fallback_said_once),
		cmocka_unit_test(test_quiet),
		cmocka_unit_test(test_one_rank),
		cmocka_unit_test(test_call_reasons),
		cmocka_unit_test(test_reserve_checks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
