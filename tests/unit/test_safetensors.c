/*
 * test_safetensors.c - libsgrt's safetensors reader and writer.
 *
 * The expected bytes of files "as PyTorch writes them" were produced by
 * the Python safetensors library (0.8.0, safetensors.torch.save) and are
 * written out here as literals.
 */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "safetensors.h"

#define LIT(s) s, sizeof(s) - 1

/* Per-test scratch directory. */
typedef struct {
	char dir[256];
} Scratch;

static int
setup_dir(void **state)
{
	Scratch *s = calloc(1, sizeof *s);
	const char *tmp = getenv("TMPDIR");

	snprintf(s->dir, sizeof s->dir, "%s/sgrt_st_XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(s->dir))
		return -1;
	*state = s;
	return 0;
}

/* Removes the scratch directory and everything in it (one level). */
static int
teardown_dir(void **state)
{
	Scratch *s = *state;
	char p[600];
	struct dirent *de;
	DIR *d = opendir(s->dir);

	while (d && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof p, "%s/%s", s->dir, de->d_name);
		if (unlink(p) < 0)
			rmdir(p);
	}
	if (d)
		closedir(d);
	rmdir(s->dir);
	free(s);
	return 0;
}

/* Number of entries in dir, and whether one's name contains ".tmp.". */
static int
count_entries(const char *dir, int *tmps)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	*tmps = 0;
	assert_non_null(d);
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		n++;
		if (strstr(de->d_name, ".tmp."))
			(*tmps)++;
	}
	closedir(d);
	return n;
}

static unsigned char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)n + 1);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

static void
spit(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	fclose(f);
}

/*
 * A file from a header: the 8-byte length of json, json, then datalen
 * bytes counting up from 0.
 */
static unsigned char *
mkfile(const char *json, size_t datalen, size_t *len)
{
	size_t h = strlen(json), i;
	unsigned char *b = malloc(8 + h + datalen + 1);

	for (i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)h >> (8 * i));
	memcpy(b + 8, json, h);
	for (i = 0; i < datalen; i++)
		b[8 + h + i] = (unsigned char)i;
	*len = 8 + h + datalen;
	return b;
}

/* Parses bytes and expects failure with a message holding want. */
static void
expect_bad_bytes(const void *bytes, size_t len, const char *want)
{
	SgrtSafetensors f;
	char err[512] = "";
	int rc;

	memset(&f, 0xab, sizeof f);
	rc = sgrt_st_parse("bad.safetensors", bytes, len, &f, err, sizeof err);
	if (rc != SGRT_EIO || !strstr(err, want))
		fail_msg("want SGRT_EIO and \"%s\", got rc %d and \"%s\"", want,
		         rc, err);
	assert_true(strncmp(err, "bad.safetensors: ", 17) == 0);
	assert_null(f.t);
	assert_null(f.buf);
	assert_int_equal(f.n, 0);
	sgrt_st_free(&f);
}

/* The same for a header followed by datalen data bytes. */
static void
expect_bad(const char *json, size_t datalen, const char *want)
{
	size_t len;
	unsigned char *b = mkfile(json, datalen, &len);

	expect_bad_bytes(b, len, want);
	free(b);
}

static void
test_dtype_table(void **state)
{
	static const char *names[] = {"F64", "F32", "F16", "BF16", "I64", "I32",
	                              "BOOL"};
	static const int sizes[] = {8, 4, 2, 2, 8, 4, 1};
	int i;

	(void)state;
	for (i = 0; i < SGRT_DTYPE_COUNT; i++) {
		assert_string_equal(sgrt_dtype_name(i), names[i]);
		assert_int_equal(sgrt_dtype_size(i), sizes[i]);
		assert_int_equal(sgrt_dtype_parse(names[i]), i);
	}
	assert_int_equal(sgrt_dtype_parse("U8"), -1);
	assert_int_equal(sgrt_dtype_parse("f32"), -1);
	assert_int_equal(sgrt_dtype_size(SGRT_DTYPE_COUNT), 0);
}

/* One tensor of every dtype, written, read back and compared. */
static void
test_roundtrip_all_dtypes(void **state)
{
	Scratch *s = *state;
	SgrtTensor t[SGRT_DTYPE_COUNT];
	unsigned char data[SGRT_DTYPE_COUNT][8 * 6];
	static const char *names[] = {"w.f64", "w.f32", "h.f16", "h.bf16",
	                              "idx", "count", "mask"};
	SgrtSafetensors f;
	const SgrtTensor *g;
	char path[400], err[512] = "";
	int i, j;

	for (i = 0; i < SGRT_DTYPE_COUNT; i++) {
		memset(&t[i], 0, sizeof t[i]);
		t[i].name = (char *)names[i];
		t[i].dtype = i;
		t[i].rank = 2;
		t[i].shape[0] = 2;
		t[i].shape[1] = 3;
		t[i].nbytes = (size_t)(6 * sgrt_dtype_size(i));
		for (j = 0; j < (int)t[i].nbytes; j++)
			data[i][j] = (unsigned char)(i * 31 + j * 7 + 1);
		t[i].data = data[i];
	}
	snprintf(path, sizeof path, "%s/all.safetensors", s->dir);
	assert_int_equal(sgrt_st_write(path, t, SGRT_DTYPE_COUNT, err,
	                               sizeof err), SGRT_OK);
	assert_int_equal(sgrt_st_read(path, &f, err, sizeof err), SGRT_OK);
	assert_int_equal(f.n, SGRT_DTYPE_COUNT);
	for (i = 1; i < (int)f.n; i++)
		assert_true(strcmp(f.t[i - 1].name, f.t[i].name) < 0);
	for (i = 0; i < SGRT_DTYPE_COUNT; i++) {
		g = sgrt_st_find(&f, names[i]);
		assert_non_null(g);
		assert_string_equal(g->name, names[i]);
		assert_int_equal(g->dtype, i);
		assert_int_equal(g->rank, 2);
		assert_int_equal(g->shape[0], 2);
		assert_int_equal(g->shape[1], 3);
		assert_int_equal(g->nbytes, t[i].nbytes);
		assert_memory_equal(g->data, data[i], t[i].nbytes);
	}
	assert_null(sgrt_st_find(&f, "nope"));
	assert_null(sgrt_st_find(&f, ""));
	sgrt_st_free(&f);
	sgrt_st_free(&f); /* a freed object is empty, and freeing it is safe */
}

/* Scalars (shape []), empty tensors and a file with no tensors. */
static void
test_scalars_and_empty(void **state)
{
	Scratch *s = *state;
	double one = 1.0;
	int64_t seven = 7;
	SgrtTensor t[4] = {
		{.name = "s", .dtype = SGRT_F64, .rank = 0, .data = &one,
		 .nbytes = 8},
		{.name = "i", .dtype = SGRT_I64, .rank = 0, .data = &seven,
		 .nbytes = 8},
		{.name = "e", .dtype = SGRT_F32, .rank = 2, .shape = {0, 3},
		 .data = NULL, .nbytes = 0},
		{.name = "b", .dtype = SGRT_BOOL, .rank = 1, .shape = {0},
		 .data = NULL, .nbytes = 0},
	};
	SgrtSafetensors f;
	const SgrtTensor *g;
	char path[400], err[512] = "";
	size_t len;
	unsigned char *bytes;

	snprintf(path, sizeof path, "%s/small.safetensors", s->dir);
	assert_int_equal(sgrt_st_write(path, t, 4, err, sizeof err), SGRT_OK);
	assert_int_equal(sgrt_st_read(path, &f, err, sizeof err), SGRT_OK);
	assert_int_equal(f.n, 4);
	g = sgrt_st_find(&f, "s");
	assert_int_equal(g->rank, 0);
	assert_int_equal(g->nbytes, 8);
	assert_memory_equal(g->data, &one, 8);
	g = sgrt_st_find(&f, "i");
	assert_int_equal(g->rank, 0);
	assert_memory_equal(g->data, &seven, 8);
	g = sgrt_st_find(&f, "e");
	assert_int_equal(g->rank, 2);
	assert_int_equal(g->shape[0], 0);
	assert_int_equal(g->shape[1], 3);
	assert_int_equal(g->nbytes, 0);
	g = sgrt_st_find(&f, "b");
	assert_int_equal(g->rank, 1);
	assert_int_equal(g->nbytes, 0);
	sgrt_st_free(&f);

	/* No tensors at all: "{}" padded to 8, as the library writes it. */
	snprintf(path, sizeof path, "%s/none.safetensors", s->dir);
	assert_int_equal(sgrt_st_write(path, NULL, 0, err, sizeof err),
	                 SGRT_OK);
	bytes = slurp(path, &len);
	assert_int_equal(len, 16);
	assert_memory_equal(bytes, "\x08\0\0\0\0\0\0\0{}      ", 16);
	free(bytes);
	assert_int_equal(sgrt_st_read(path, &f, err, sizeof err), SGRT_OK);
	assert_int_equal(f.n, 0);
	assert_null(sgrt_st_find(&f, "x"));
	sgrt_st_free(&f);
}

/* safetensors.torch.save({"weight": torch.arange(6.).reshape(2, 3)}) */
static const char weight_file[] =
	"\x40\0\0\0\0\0\0\0"
	"{\"weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}"
	"  "
	"\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40"
	"\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40";

/* save({"b": f32[1.5], "a": bool[T, F], "c": i64[-2], "d": f16 scalar 1.0,
 *       "e": f64[0.5], "f": i32[7], "g": bf16[1.0], "empty": f32[0, 3]}) */
static const char multi_file[] =
	"\xc0\x01\0\0\0\0\0\0"
	"{\"c\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
	"\"e\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]},"
	"\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]},"
	"\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[20,20]},"
	"\"f\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[20,24]},"
	"\"g\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[24,26]},"
	"\"d\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[26,28]},"
	"\"a\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[28,30]}}"
	"   "
	"\xfe\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\xe0\x3f"
	"\x00\x00\xc0\x3f\x07\x00\x00\x00\x80\x3f\x00\x3c\x01\x00";

/* save({"w": torch.tensor([1., 2.])}, metadata={"format": "pt"}) */
static const char meta_file[] =
	"\x58\0\0\0\0\0\0\0"
	"{\"__metadata__\":{\"format\":\"pt\"},"
	"\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   "
	"\x00\x00\x80\x3f\x00\x00\x00\x40";

/* save({"q\"b\\c\nd\x01/\u00e9": torch.tensor([1], dtype=torch.int32)}) */
static const char esc_file[] =
	"\x48\0\0\0\0\0\0\0"
	"{\"q\\\"b\\\\c\\nd\\u0001/\xc3\xa9\":{\"dtype\":\"I32\",\"shape\":[1],"
	"\"data_offsets\":[0,4]}}"
	"\x01\x00\x00\x00";

/* save({"\b\f\r\t\x1f\x7f~": torch.tensor([5], dtype=torch.int32)}) */
static const char esc2_file[] =
	"\x48\0\0\0\0\0\0\0"
	"{\"\\b\\f\\r\\t\\u001f\x7f~\":{\"dtype\":\"I32\",\"shape\":[1],"
	"\"data_offsets\":[0,4]}}   "
	"\x05\x00\x00\x00";

/* Files written by PyTorch's safetensors parse, with the right values. */
static void
test_reads_pytorch_files(void **state)
{
	SgrtSafetensors f;
	const SgrtTensor *g;
	char err[512] = "";
	static const char *sorted[] = {"a", "b", "c", "d", "e", "empty", "f",
	                               "g"};
	float w[6];
	int64_t c;
	double e;
	int i;

	(void)state;
	assert_int_equal(sgrt_st_parse("w.safetensors", LIT(weight_file), &f,
	                               err, sizeof err), SGRT_OK);
	assert_int_equal(f.n, 1);
	g = sgrt_st_find(&f, "weight");
	assert_non_null(g);
	assert_int_equal(g->dtype, SGRT_F32);
	assert_int_equal(g->rank, 2);
	assert_int_equal(g->shape[0], 2);
	assert_int_equal(g->shape[1], 3);
	memcpy(w, g->data, sizeof w);
	for (i = 0; i < 6; i++)
		assert_true(w[i] == (float)i);
	sgrt_st_free(&f);

	assert_int_equal(sgrt_st_parse("m.safetensors", LIT(multi_file), &f,
	                               err, sizeof err), SGRT_OK);
	assert_int_equal(f.n, 8);
	for (i = 0; i < 8; i++) /* sorted by name, whatever the file order */
		assert_string_equal(f.t[i].name, sorted[i]);
	memcpy(&c, sgrt_st_find(&f, "c")->data, 8);
	assert_int_equal(c, -2);
	memcpy(&e, sgrt_st_find(&f, "e")->data, 8);
	assert_true(e == 0.5);
	g = sgrt_st_find(&f, "d");
	assert_int_equal(g->dtype, SGRT_F16);
	assert_int_equal(g->rank, 0);
	assert_memory_equal(g->data, "\x00\x3c", 2);
	g = sgrt_st_find(&f, "a");
	assert_int_equal(g->dtype, SGRT_BOOL);
	assert_memory_equal(g->data, "\x01\x00", 2);
	assert_int_equal(sgrt_st_find(&f, "g")->dtype, SGRT_BF16);
	assert_int_equal(sgrt_st_find(&f, "empty")->nbytes, 0);
	sgrt_st_free(&f);

	assert_int_equal(sgrt_st_parse("meta.safetensors", LIT(meta_file), &f,
	                               err, sizeof err), SGRT_OK);
	assert_int_equal(f.n, 1);
	assert_non_null(sgrt_st_find(&f, "w"));
	sgrt_st_free(&f);

	assert_int_equal(sgrt_st_parse("esc.safetensors", LIT(esc_file), &f,
	                               err, sizeof err), SGRT_OK);
	assert_int_equal(f.n, 1);
	assert_string_equal(f.t[0].name, "q\"b\\c\nd\x01/\xc3\xa9");
	sgrt_st_free(&f);

	assert_int_equal(sgrt_st_parse("esc2.safetensors", LIT(esc2_file), &f,
	                               err, sizeof err), SGRT_OK);
	assert_int_equal(f.n, 1);
	assert_string_equal(f.t[0].name, "\b\f\r\t\x1f\x7f~");
	sgrt_st_free(&f);
}

/* Headers need not be padded (older writers), and whitespace is JSON's. */
static void
test_reads_variants(void **state)
{
	static const char unpadded[] =
		"\x3c\0\0\0\0\0\0\0"
		"{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],"
		"\"data_offsets\":[0,16]}}"
		"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
	SgrtSafetensors f;
	char err[512] = "";
	size_t len;
	unsigned char *b;

	(void)state;
	assert_int_equal(sgrt_st_parse("u", LIT(unpadded), &f, err,
	                               sizeof err), SGRT_OK);
	assert_int_equal(f.n, 1);
	sgrt_st_free(&f);

	/* Spaces and newlines anywhere, keys in another order, an extra key,
	 * "__metadata__" null. */
	b = mkfile("\n { \"__metadata__\" : null , \"x\" : { \"data_offsets\" :"
	           " [ 0 , 4 ] , \"extra\" : [1] , \"shape\" : [ ] , \"dtype\" :"
	           " \"F32\" } } \r\n\t ", 4, &len);
	assert_int_equal(sgrt_st_parse("v", b, len, &f, err, sizeof err),
	                 SGRT_OK);
	assert_int_equal(f.n, 1);
	assert_int_equal(f.t[0].rank, 0);
	sgrt_st_free(&f);
	free(b);

	/* Tensors listed out of offset order, and empty ones anywhere. */
	b = mkfile("{\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	           "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]},"
	           "\"m\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
	           "\"n\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[8,8]}}",
	           8, &len);
	assert_int_equal(sgrt_st_parse("o", b, len, &f, err, sizeof err),
	                 SGRT_OK);
	assert_int_equal(f.n, 4);
	assert_memory_equal(sgrt_st_find(&f, "a")->data, "\x04\x05\x06\x07", 4);
	sgrt_st_free(&f);
	free(b);
}

/* The writer's bytes equal the Python library's for the same tensors. */
static void
test_writer_bytes(void **state)
{
	Scratch *s = *state;
	float w[6] = {0, 1, 2, 3, 4, 5};
	float b1 = 1.5f;
	int64_t c = -2;
	double e = 0.5;
	int32_t fi = 7;
	uint16_t d = 0x3c00, g = 0x3f80;
	uint8_t a[2] = {1, 0};
	SgrtTensor one = {.name = "weight", .dtype = SGRT_F32, .rank = 2,
	                  .shape = {2, 3}, .data = w, .nbytes = 24};
	/* given in no particular order */
	SgrtTensor multi[8] = {
		{.name = "g", .dtype = SGRT_BF16, .rank = 1, .shape = {1},
		 .data = &g, .nbytes = 2},
		{.name = "a", .dtype = SGRT_BOOL, .rank = 1, .shape = {2},
		 .data = a, .nbytes = 2},
		{.name = "empty", .dtype = SGRT_F32, .rank = 2, .shape = {0, 3},
		 .data = NULL, .nbytes = 0},
		{.name = "b", .dtype = SGRT_F32, .rank = 1, .shape = {1},
		 .data = &b1, .nbytes = 4},
		{.name = "f", .dtype = SGRT_I32, .rank = 1, .shape = {1},
		 .data = &fi, .nbytes = 4},
		{.name = "c", .dtype = SGRT_I64, .rank = 1, .shape = {1},
		 .data = &c, .nbytes = 8},
		{.name = "e", .dtype = SGRT_F64, .rank = 1, .shape = {1},
		 .data = &e, .nbytes = 8},
		{.name = "d", .dtype = SGRT_F16, .rank = 0, .data = &d,
		 .nbytes = 2},
	};
	int32_t i1 = 1;
	SgrtTensor esc = {.name = "q\"b\\c\nd\x01/\xc3\xa9", .dtype = SGRT_I32,
	                  .rank = 1, .shape = {1}, .data = &i1, .nbytes = 4};
	char path[400], err[512] = "";
	unsigned char *bytes;
	void *mem;
	size_t len, memlen;

	snprintf(path, sizeof path, "%s/w.safetensors", s->dir);
	assert_int_equal(sgrt_st_write(path, &one, 1, err, sizeof err),
	                 SGRT_OK);
	bytes = slurp(path, &len);
	assert_int_equal(len, sizeof weight_file - 1);
	assert_memory_equal(bytes, weight_file, len);
	free(bytes);

	assert_int_equal(sgrt_st_write(path, multi, 8, err, sizeof err),
	                 SGRT_OK);
	bytes = slurp(path, &len);
	assert_int_equal(len, sizeof multi_file - 1);
	assert_memory_equal(bytes, multi_file, len);
	assert_int_equal(sgrt_st_serialize("m", multi, 8, &mem, &memlen, err,
	                                   sizeof err), SGRT_OK);
	assert_int_equal(memlen, len);
	assert_memory_equal(mem, bytes, len);
	free(mem);
	free(bytes);

	assert_int_equal(sgrt_st_write(path, &esc, 1, err, sizeof err),
	                 SGRT_OK);
	bytes = slurp(path, &len);
	assert_int_equal(len, sizeof esc_file - 1);
	assert_memory_equal(bytes, esc_file, len);
	free(bytes);

	esc.name = "\b\f\r\t\x1f\x7f~";
	i1 = 5;
	assert_int_equal(sgrt_st_serialize("e", &esc, 1, &mem, &memlen, err,
	                                   sizeof err), SGRT_OK);
	assert_int_equal(memlen, sizeof esc2_file - 1);
	assert_memory_equal(mem, esc2_file, memlen);
	free(mem);
}

/* The writer refuses what would make an invalid file, and writes nothing. */
static void
test_writer_rejects(void **state)
{
	Scratch *s = *state;
	float x[2] = {1, 2};
	SgrtTensor t[2] = {
		{.name = "a", .dtype = SGRT_F32, .rank = 1, .shape = {2},
		 .data = x, .nbytes = 8},
		{.name = "a", .dtype = SGRT_I32, .rank = 1, .shape = {2},
		 .data = x, .nbytes = 8},
	};
	char path[400], err[512] = "";
	int tmps;

	snprintf(path, sizeof path, "%s/r.safetensors", s->dir);
	assert_int_equal(sgrt_st_write(path, t, 2, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "tensor 'a' is given twice"));
	t[1].name = "b";
	t[1].nbytes = 4;
	assert_int_equal(sgrt_st_write(path, t, 2, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "tensor 'b': 4 bytes given for I32[2]"));
	t[1].nbytes = 8;
	t[1].name = "__metadata__";
	assert_int_equal(sgrt_st_write(path, t, 2, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "'__metadata__' cannot name a tensor"));
	t[1].name = "bad\xff";
	assert_int_equal(sgrt_st_write(path, t, 2, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "not valid UTF-8"));
	t[1].name = "b";
	t[1].shape[0] = -2;
	assert_int_equal(sgrt_st_write(path, t, 2, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "tensor 'b': invalid shape"));
	t[1].shape[0] = 2;
	t[1].dtype = 99;
	assert_int_equal(sgrt_st_write(path, t, 2, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "invalid dtype"));
	assert_int_equal(count_entries(s->dir, &tmps), 0);
}

/* A failed write leaves neither a partial file nor a temporary one, and
 * an existing file is untouched. */
static void
test_writer_atomic(void **state)
{
	Scratch *s = *state;
	static unsigned char big[1 << 16];
	SgrtTensor t = {.name = "big", .dtype = SGRT_BOOL, .rank = 1,
	                .shape = {sizeof big}, .data = big,
	                .nbytes = sizeof big};
	struct rlimit old, lim;
	void (*oldsig)(int);
	char path[400], err[512] = "";
	unsigned char *bytes;
	size_t len;
	int tmps, rc;

	/* A directory that does not exist. */
	snprintf(path, sizeof path, "%s/no/such/dir.safetensors", s->dir);
	assert_int_equal(sgrt_st_write(path, &t, 1, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "dir.safetensors: cannot write: "));
	assert_int_equal(count_entries(s->dir, &tmps), 0);

	/* The target is a directory: the rename fails. */
	snprintf(path, sizeof path, "%s/adir", s->dir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(sgrt_st_write(path, &t, 1, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "cannot write"));
	assert_int_equal(count_entries(s->dir, &tmps), 1);
	assert_int_equal(tmps, 0);
	rmdir(path);

	/* The disk "fills up" half-way: file size limit below the file. */
	snprintf(path, sizeof path, "%s/keep.safetensors", s->dir);
	spit(path, "old", 3);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 4096;
	oldsig = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	rc = sgrt_st_write(path, &t, 1, err, sizeof err);
	setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, oldsig);
	assert_int_equal(rc, SGRT_EIO);
	assert_non_null(strstr(err, "keep.safetensors: cannot write: "));
	assert_int_equal(count_entries(s->dir, &tmps), 1);
	assert_int_equal(tmps, 0);
	bytes = slurp(path, &len);
	assert_int_equal(len, 3);
	assert_memory_equal(bytes, "old", 3);
	free(bytes);

	/* And without the limit it replaces the old file. */
	assert_int_equal(sgrt_st_write(path, &t, 1, err, sizeof err), SGRT_OK);
	bytes = slurp(path, &len);
	assert_true(len > sizeof big);
	free(bytes);
	assert_int_equal(count_entries(s->dir, &tmps), 1);
	assert_int_equal(tmps, 0);
}

static void
test_read_errors(void **state)
{
	Scratch *s = *state;
	SgrtSafetensors f;
	char path[400], err[512] = "";

	snprintf(path, sizeof path, "%s/missing.safetensors", s->dir);
	assert_int_equal(sgrt_st_read(path, &f, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "missing.safetensors: cannot open: "));
	assert_null(f.t);
	assert_int_equal(sgrt_st_read(s->dir, &f, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "cannot read: "));
	snprintf(path, sizeof path, "%s/empty.safetensors", s->dir);
	spit(path, "", 0);
	assert_int_equal(sgrt_st_read(path, &f, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "empty.safetensors: the file is empty"));
	snprintf(path, sizeof path, "%s/w.safetensors", s->dir);
	spit(path, weight_file, sizeof weight_file - 1 - 4);
	assert_int_equal(sgrt_st_read(path, &f, err, sizeof err), SGRT_EIO);
	assert_non_null(strstr(err, "tensor 'weight': data_offsets [0, 24] "
	                            "reach beyond the data section (20 bytes)"));
	/* A NULL or empty err buffer is allowed. */
	assert_int_equal(sgrt_st_read(path, &f, NULL, 0), SGRT_EIO);
	assert_int_equal(sgrt_st_read(path, &f, err, 0), SGRT_EIO);
}

/* File-level damage: length, encoding, JSON. */
static void
test_bad_header(void **state)
{
	static const char big[] = "\x01\xe1\xf5\x05\0\0\0\0{}"; /* 100000001 */
	static const char huge[] = "\xff\xff\xff\xff\xff\xff\xff\xff{}";
	static const char beyond[] = "\x10\0\0\0\0\0\0\0{}      ";

	(void)state;
	expect_bad_bytes("", 0, "the file is empty");
	expect_bad_bytes("\x02\0\0\0\0", 5, "5 bytes long, too short");
	expect_bad_bytes(LIT(big), "header length 100000001 is above the limit");
	expect_bad_bytes(LIT(huge), "is above the limit");
	expect_bad_bytes(LIT(beyond), "header length 16 reaches beyond the end "
	                 "of the file (16 bytes)");
	expect_bad_bytes("\0\0\0\0\0\0\0\0", 8, "not a JSON object");
	expect_bad("{\"a\xff\":1}", 0, "not valid UTF-8 (at byte 3)");
	expect_bad("{\"\xc0\xaf\":1}", 0, "not valid UTF-8"); /* overlong */
	expect_bad("{\"\xed\xa0\x80\":1}", 0, "not valid UTF-8"); /* surrogate */
	expect_bad("{\"a\":", 0, "not valid JSON");
	expect_bad("{\"a\":1,}", 0, "not valid JSON");
	expect_bad("{'a':1}", 0, "not valid JSON");
	expect_bad("[1, 2]", 0, "not a JSON object");
	expect_bad("\"x\"", 0, "not a JSON object");
	expect_bad("\xef\xbb\xbf{}", 0, "must start with '{'"); /* BOM */
	expect_bad("{} {}", 0, "text after its JSON object (at byte 3)");
	expect_bad("{}x", 0, "text after its JSON object (at byte 2)");
	expect_bad("{}\x01", 0, "control character 0x01");
	expect_bad("{\"a\x01\":1}", 0, "control character 0x01");
	expect_bad("{\x0b}", 0, "control character 0x0b");
	expect_bad("{\"a\\u0000b\":{}}", 0, "escaped NUL");
	expect_bad("{\"__metadata__\":{\"k\":\"\\u0000\"}}", 0, "escaped NUL");
	expect_bad("{\"a\\ud800\":1}", 0, "not valid JSON"); /* lone surrogate */
}

/* Damaged tensor entries. */
static void
test_bad_entries(void **state)
{
	(void)state;
	expect_bad("{\"a\":3}", 0, "tensor 'a': its entry is not an object");
	expect_bad("{\"a\":[]}", 0, "tensor 'a': its entry is not an object");
	expect_bad("{\"a\":{\"shape\":[],\"data_offsets\":[0,4]}}", 4,
	           "tensor 'a': missing 'dtype'");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
	           "tensor 'a': missing 'shape'");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[]}}", 4,
	           "tensor 'a': missing 'data_offsets'");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[],"
	           "\"data_offsets\":[0,4]}}", 4,
	           "tensor 'a': 'dtype' is given twice");
	expect_bad("{\"a\":{\"dtype\":32,\"shape\":[],\"data_offsets\":[0,4]}}",
	           4, "tensor 'a': 'dtype' is not a string");
	expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}",
	           1, "tensor 'a': unsupported dtype 'U8'");
	expect_bad("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[],"
	           "\"data_offsets\":[0,1]}}", 1, "unsupported dtype 'F8_E4M3'");
	expect_bad("{\"a\":{\"dtype\":\"f32\",\"shape\":[],\"data_offsets\":[0,4]}}",
	           4, "tensor 'a': unknown dtype 'f32'");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}",
	           8, "tensor 'a': 'shape' is not a list");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}",
	           0, "tensor 'a': shape entry 0 is not a non-negative integer");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,1.5],"
	           "\"data_offsets\":[0,12]}}", 12,
	           "tensor 'a': shape entry 1 is not a non-negative integer");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],"
	           "\"data_offsets\":[0,8]}}", 8, "shape entry 0 is not");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],"
	           "\"data_offsets\":[0,8]}}", 8, "shape entry 0 is not");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
	           "\"data_offsets\":[0,4]}}", 4,
	           "tensor 'a': rank 9 is above sgc's maximum of 8");
	expect_bad("{\"a\":{\"dtype\":\"BOOL\",\"shape\":[4294967296,4294967296],"
	           "\"data_offsets\":[0,0]}}", 0,
	           "tensor 'a': the shape's element count overflows");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],"
	           "\"data_offsets\":[0,0]}}", 0,
	           "tensor 'a': the shape's byte size overflows");
}

/* Damaged offsets and layouts. */
static void
test_bad_offsets(void **state)
{
	(void)state;
#define T(o) "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" o "}}"
	expect_bad(T("[0]"), 8, "tensor 'a': 'data_offsets' must be two "
	           "non-negative integers");
	expect_bad(T("[0,4,8]"), 8, "'data_offsets' must be two");
	expect_bad(T("[-8,0]"), 8, "'data_offsets' must be two");
	expect_bad(T("[0,7.5]"), 8, "'data_offsets' must be two");
	expect_bad(T("{\"b\":0}"), 8, "'data_offsets' must be two");
	expect_bad(T("[8,0]"), 8, "tensor 'a': data_offsets [8, 0] begin after "
	           "they end");
	expect_bad(T("[0,8]"), 7, "tensor 'a': data_offsets [0, 8] reach beyond "
	           "the data section (7 bytes): the file is truncated");
	expect_bad(T("[0,12]"), 12, "tensor 'a': data_offsets [0, 12] hold 12 "
	           "bytes, but F32[2] needs 8");
	expect_bad(T("[0,8]"), 12, "the last 4 bytes of the data section belong "
	           "to no tensor");
	expect_bad(T("[4,12]"), 12, "bytes 0..4 of the data section belong to "
	           "no tensor");
#undef T
	expect_bad("{}", 4, "the last 4 bytes of the data section");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
	           12, "tensors 'a' (bytes 0..8) and 'b' (bytes 4..12) overlap");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
	           8, "overlap");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	           "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
	           8, "overlap");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
	           12, "bytes 4..8 of the data section belong to no tensor (a "
	           "safetensors file may not have holes)");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
	           8, "tensor 'a' is given twice");
}

/* "__metadata__" must be an object of strings. */
static void
test_bad_metadata(void **state)
{
	(void)state;
	expect_bad("{\"__metadata__\":\"pt\"}", 0,
	           "'__metadata__' is not an object of strings");
	expect_bad("{\"__metadata__\":{\"n\":1}}", 0,
	           "'__metadata__' is not an object of strings");
	expect_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0,
	           "'__metadata__' is given twice");
}

/* Names in messages are quoted safely and cut when long. */
static void
test_message_names(void **state)
{
	char json[1200];
	char err[512] = "";
	SgrtSafetensors f;
	size_t len;
	unsigned char *b;
	int i;

	(void)state;
	expect_bad("{\"x\\n'y\":3}", 0, "tensor 'x\\x0a\\x27y'");
	strcpy(json, "{\"");
	for (i = 0; i < 1000; i++)
		strcat(json, "n");
	strcat(json, "\":3}");
	b = mkfile(json, 0, &len);
	assert_int_equal(sgrt_st_parse("long", b, len, &f, err, sizeof err),
	                 SGRT_EIO);
	assert_non_null(strstr(err, "nnn...': its entry is not an object"));
	assert_true(strlen(err) < 300);
	free(b);

	/* Cut inside a two-byte character: the message stays valid UTF-8. */
	strcpy(json, "{\"a");
	for (i = 0; i < 400; i++)
		strcat(json, "\xc3\xa9");
	strcat(json, "\":3}");
	b = mkfile(json, 0, &len);
	assert_int_equal(sgrt_st_parse("long", b, len, &f, err, sizeof err),
	                 SGRT_EIO);
	assert_non_null(strstr(err, "\xc3\xa9...': its entry"));
	free(b);
}

/* Tensors that match no name: named, with the names the file is read
 * for; none when every name is known; long lists are cut. */
static void
test_check_extra(void **state)
{
	static const char *const all[] = {"a", "b", "c", "d", "e", "empty",
	                                  "f", "g"};
	static const char *const known[] = {"b", "c", "d", "empty", "f", "g",
	                                    "w"};
	static const char *const want[] = {"w", "b"};
	SgrtSafetensors f;
	char err[512] = "", small[30];

	(void)state;
	assert_int_equal(sgrt_st_parse("m.safetensors", LIT(multi_file), &f,
	                               err, sizeof err), SGRT_OK);
	assert_int_equal(sgrt_st_check_extra("m.safetensors", &f, all, 8, want,
	                                     2, "hint", err, sizeof err),
	                 SGRT_OK);
	assert_int_equal(sgrt_st_check_extra("m.safetensors", &f, known, 7,
	                                     want, 2, "--allow-extra ignores "
	                                     "them", err, sizeof err),
	                 SGRT_EMISMATCH);
	assert_string_equal(err, "m.safetensors: tensors 'a', 'e' match no "
	                    "name of the graph (it reads 'w', 'b' from this "
	                    "file); --allow-extra ignores them");
	assert_int_equal(sgrt_st_check_extra("m.safetensors", &f, all + 1, 7,
	                                     NULL, 0, NULL, err, sizeof err),
	                 SGRT_EMISMATCH);
	assert_string_equal(err, "m.safetensors: tensor 'a' matches no name of "
	                    "the graph (it reads nothing from this file)");
	sgrt_st_free(&f);
	assert_string_equal(sgrt_names_text(small, sizeof small, all, 8),
	                    "'a', 'b', 'c', ... (8 in all)");
	assert_string_equal(sgrt_names_text(small, sizeof small, all, 2),
	                    "'a', 'b'");
}

/* Each param's optimizer state is in a file all or none. */
static void
test_check_state(void **state)
{
	static const char *const names[] = {"opt.a.exp_avg", "opt.a.exp_avg_sq",
	                                    "opt.a.step", "opt.l0.w.exp_avg",
	                                    "opt.l0.w.exp_avg_sq", "opt.l0.w.step",
	                                    "opt.b.momentum_buffer"};
	SgrtSafetensors f;
	char err[512] = "";
	size_t len;
	unsigned char *b = mkfile("{\"opt.a.exp_avg\":{\"dtype\":\"BOOL\",\"shape\":[1],"
	                          "\"data_offsets\":[0,1]},\"opt.a.exp_avg_sq\":{\"dtype\":"
	                          "\"BOOL\",\"shape\":[1],\"data_offsets\":[1,2]},\"opt.a.step\":"
	                          "{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[2,3]},"
	                          "\"opt.l0.w.exp_avg\":{\"dtype\":\"BOOL\",\"shape\":[1],"
	                          "\"data_offsets\":[3,4]}}", 4, &len);

	(void)state;
	assert_int_equal(sgrt_st_parse("s.safetensors", b, len, &f, err, sizeof err), SGRT_OK);
	/* a whole, b (absent) fresh: fine */
	assert_int_equal(sgrt_st_check_state("s.safetensors", &f, names, 3, err, sizeof err),
	                 SGRT_OK);
	assert_int_equal(sgrt_st_check_state("s.safetensors", &f, names + 6, 1, err,
	                                     sizeof err), SGRT_OK);
	/* l0.w's moments without the rest: refused, naming both */
	assert_int_equal(sgrt_st_check_state("s.safetensors", &f, names, 7, err, sizeof err),
	                 SGRT_EMISMATCH);
	assert_string_equal(err, "s.safetensors: holds 'opt.l0.w.exp_avg' but not "
	                    "'opt.l0.w.step': a param's optimizer state is loaded whole "
	                    "or not at all");
	sgrt_st_free(&f);
	free(b);
}

static void
test_check(void **state)
{
	SgrtTensor t = {.name = "x", .dtype = SGRT_F32, .rank = 2,
	                .shape = {64, 512}};
	int64_t same[2] = {64, 512}, other[2] = {64, 1024};
	char err[512] = "";

	(void)state;
	assert_int_equal(sgrt_st_check("in.safetensors", &t, SGRT_F32, 2, same,
	                               err, sizeof err), SGRT_OK);
	assert_int_equal(sgrt_st_check("in.safetensors", &t, SGRT_F32, 2, other,
	                               err, sizeof err), SGRT_EMISMATCH);
	assert_string_equal(err, "in.safetensors: tensor 'x' is F32[64, 512], "
	                    "but the graph declares F32[64, 1024]");
	assert_int_equal(sgrt_st_check("p.safetensors", &t, SGRT_BF16, 2, same,
	                               err, sizeof err), SGRT_EMISMATCH);
	assert_string_equal(err, "p.safetensors: tensor 'x' is F32[64, 512], "
	                    "but the graph declares BF16[64, 512]");
	assert_int_equal(sgrt_st_check("p.safetensors", &t, SGRT_F32, 0, NULL,
	                               err, sizeof err), SGRT_EMISMATCH);
	assert_string_equal(err, "p.safetensors: tensor 'x' is F32[64, 512], "
	                    "but the graph declares F32[]");
	assert_int_equal(sgrt_st_check("p.safetensors", &t, SGRT_F32, 3,
	                               (int64_t[]){64, 512, 1}, err, sizeof err),
	                 SGRT_EMISMATCH);
}

/* Parse -> serialize -> parse keeps every tensor; serialize is stable. */
static void
test_reserialize(void **state)
{
	SgrtSafetensors f, g;
	char err[512] = "";
	void *b1, *b2;
	size_t n1, n2;
	uint32_t i;

	(void)state;
	assert_int_equal(sgrt_st_parse("m", LIT(multi_file), &f, err,
	                               sizeof err), SGRT_OK);
	assert_int_equal(sgrt_st_serialize("m", f.t, f.n, &b1, &n1, err,
	                                   sizeof err), SGRT_OK);
	assert_int_equal(n1, sizeof multi_file - 1);
	assert_memory_equal(b1, multi_file, n1);
	assert_int_equal(sgrt_st_parse("m", b1, n1, &g, err, sizeof err),
	                 SGRT_OK);
	assert_int_equal(g.n, f.n);
	for (i = 0; i < f.n; i++) {
		assert_string_equal(g.t[i].name, f.t[i].name);
		assert_int_equal(g.t[i].nbytes, f.t[i].nbytes);
		assert_memory_equal(g.t[i].data, f.t[i].data, f.t[i].nbytes);
	}
	assert_int_equal(sgrt_st_serialize("m", g.t, g.n, &b2, &n2, err,
	                                   sizeof err), SGRT_OK);
	assert_int_equal(n2, n1);
	assert_memory_equal(b2, b1, n1);
	free(b1);
	free(b2);
	sgrt_st_free(&f);
	sgrt_st_free(&g);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dtype_table),
		cmocka_unit_test_setup_teardown(test_roundtrip_all_dtypes,
		                                setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_scalars_and_empty,
		                                setup_dir, teardown_dir),
		cmocka_unit_test(test_reads_pytorch_files),
		cmocka_unit_test(test_reads_variants),
		cmocka_unit_test_setup_teardown(test_writer_bytes, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_writer_rejects, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_writer_atomic, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_read_errors, setup_dir,
		                                teardown_dir),
		cmocka_unit_test(test_bad_header),
		cmocka_unit_test(test_bad_entries),
		cmocka_unit_test(test_bad_offsets),
		cmocka_unit_test(test_bad_metadata),
		cmocka_unit_test(test_message_names),
		cmocka_unit_test(test_check),
		cmocka_unit_test(test_check_extra),
		cmocka_unit_test(test_check_state),
		cmocka_unit_test(test_reserialize),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
