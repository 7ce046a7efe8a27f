/*
 * fuzz_safetensors.c - libFuzzer target for libsgrt's safetensors reader.
 *
 * Any input must parse or fail cleanly (no crash, leak or sanitizer
 * report).  A failure must come with a message naming the file.  A file
 * that parses must hold what the reader promises (names sorted and unique,
 * each tensor's bytes inside the file and matching its dtype and shape),
 * and writing it again must give a file that parses to the same tensors
 * and writes to the same bytes.
 *
 * Build: fuzz/make.sh; run: see fuzz/README.md.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

#define CHECK(c) ((c) ? (void)0 : __builtin_trap())

/* Checks the reader's promises about a parsed file. */
static void
check_file(const SgrtSafetensors *f)
{
	const unsigned char *lo = f->buf, *hi = lo + f->buflen;
	const unsigned char *p;
	uint64_t numel;
	uint32_t i;
	int d;

	for (i = 0; i < f->n; i++) {
		const SgrtTensor *t = &f->t[i];
		CHECK(i == 0 || strcmp(f->t[i - 1].name, t->name) < 0);
		CHECK(sgrt_st_find(f, t->name) == t);
		CHECK(t->dtype >= 0 && t->dtype < SGRT_DTYPE_COUNT);
		CHECK(t->rank >= 0 && t->rank <= SGRT_MAXRANK);
		numel = 1;
		for (d = 0; d < t->rank; d++) {
			CHECK(t->shape[d] >= 0);
			numel *= (uint64_t)t->shape[d];
		}
		CHECK(numel * (uint64_t)sgrt_dtype_size(t->dtype) == t->nbytes);
		p = t->data;
		CHECK(p >= lo + 8 && p <= hi && t->nbytes <= (size_t)(hi - p));
		CHECK(sgrt_st_check("f", t, t->dtype, t->rank, t->shape, NULL,
		                    0) == SGRT_OK);
	}
}

/* Writes f again, parses that, and compares. */
static void
check_rewrite(const SgrtSafetensors *f)
{
	SgrtSafetensors g;
	void *b1, *b2;
	size_t n1, n2;
	char err[256];
	uint32_t i;

	CHECK(sgrt_st_serialize("f", f->t, f->n, &b1, &n1, err,
	                        sizeof err) == SGRT_OK);
	CHECK(sgrt_st_parse("f", b1, n1, &g, err, sizeof err) == SGRT_OK);
	CHECK(g.n == f->n);
	for (i = 0; i < f->n; i++) {
		CHECK(strcmp(g.t[i].name, f->t[i].name) == 0);
		CHECK(g.t[i].dtype == f->t[i].dtype);
		CHECK(g.t[i].rank == f->t[i].rank);
		CHECK(memcmp(g.t[i].shape, f->t[i].shape,
		             sizeof g.t[i].shape) == 0);
		CHECK(g.t[i].nbytes == f->t[i].nbytes);
		CHECK(f->t[i].nbytes == 0 ||
		      memcmp(g.t[i].data, f->t[i].data, f->t[i].nbytes) == 0);
	}
	CHECK(sgrt_st_serialize("f", g.t, g.n, &b2, &n2, err,
	                        sizeof err) == SGRT_OK);
	CHECK(n2 == n1 && memcmp(b1, b2, n1) == 0);
	free(b1);
	free(b2);
	sgrt_st_free(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	SgrtSafetensors f;
	char err[512];

	err[0] = 0;
	if (sgrt_st_parse("fuzz.safetensors", data, size, &f, err,
	                  sizeof err) != SGRT_OK) {
		CHECK(strncmp(err, "fuzz.safetensors: ", 18) == 0);
		CHECK(f.t == NULL && f.buf == NULL && f.n == 0);
		return 0;
	}
	check_file(&f);
	check_rewrite(&f);
	sgrt_st_free(&f);
	return 0;
}
