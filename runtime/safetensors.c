/*
 * safetensors.c - reading, validating and writing safetensors files.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON,
 * then the data section.  The JSON maps each tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
 * data section), plus an optional "__metadata__" object of strings.
 *
 * Reading mirrors the checks of the reference implementation (the Rust
 * `safetensors` crate that PyTorch's `safetensors` package uses), so that a
 * file sgc accepts is one PyTorch accepts too:
 *   - header length at most 100,000,000 bytes and within the file;
 *   - the header is valid UTF-8 and one JSON object, followed only by JSON
 *     whitespace (the writer pads with spaces);
 *   - every tensor entry has a known dtype, a shape of non-negative
 *     integers and two integer data_offsets with begin <= end, whose
 *     length is exactly numel * element size;
 *   - the tensors cover the data section exactly: no overlaps, no holes,
 *     no trailing bytes.  The format's specification forbids holes (they
 *     allow polyglot files) and the reference rejects them, so we do too.
 * Beyond the reference: duplicate names are an error (JSON parsers differ
 * on which duplicate wins), a rank above SGRT_MAXRANK is an error, and a
 * header holding an escaped NUL (\u0000) is refused (C strings cannot hold
 * it).  Shape entries and offsets must be integers up to 2^53, the range
 * cJSON's doubles hold exactly; cJSON accepts "2.0" where serde wants "2".
 *
 * Writing produces the bytes the Python library produces for the same
 * tensors (with no metadata): tensors ordered by dtype, largest element
 * first in the library's dtype order (I64 F64 F32 I32 BF16 F16 BOOL), then
 * by name; data contiguous, so each tensor is aligned to its element size;
 * keys dtype, shape, data_offsets with no spaces; header padded with spaces
 * to a multiple of 8.  Files are written through runtime/sgrt_out.h.
 *
 * Big-endian hosts are out of scope: tensor bytes are used as they lie.
 * No global state of ours; cJSON records its last parse error in a global
 * (cJSON_GetErrorPtr, unused here), so parallel reads race on that only.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "safetensors.h"
#include "sgrt_out.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "libsgrt's safetensors I/O assumes a little-endian host"
#endif

#define MAX_HEADER 100000000u
#define MAX_EXACT 9007199254740992.0 /* 2^53 */
#define SHOWN_NAME 160               /* bytes of a name shown in messages */

static const struct {
	const char *name;
	int size;
	int wrank; /* position in the writer's order (the Python library's) */
} dtinfo[SGRT_DTYPE_COUNT] = {
	[SGRT_F64] = {"F64", 8, 1},
	[SGRT_F32] = {"F32", 4, 2},
	[SGRT_F16] = {"F16", 2, 5},
	[SGRT_BF16] = {"BF16", 2, 4},
	[SGRT_I64] = {"I64", 8, 0},
	[SGRT_I32] = {"I32", 4, 3},
	[SGRT_BOOL] = {"BOOL", 1, 6},
};

/* safetensors dtypes that are valid in the format but not in sgc. */
static const char *const foreign_dtypes[] = {
	"U8", "I8", "U16", "I16", "U32", "U64", "F8_E5M2", "F8_E4M3",
	"F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", NULL,
};

#define SUPPORTED "F64 F32 F16 BF16 I64 I32 BOOL"

/* One tensor entry while parsing. */
typedef struct {
	const char *name;   /* cJSON's copy */
	int dtype, rank;
	int64_t shape[SGRT_MAXRANK];
	uint64_t begin, end;
} Entry;

/* A growable byte buffer (the writer's header). */
typedef struct {
	char *p;
	size_t n, cap;
	int oom;
} Buf;

const char *
sgrt_dtype_name(int dtype)
{
	if (dtype < 0 || dtype >= SGRT_DTYPE_COUNT)
		return "?";
	return dtinfo[dtype].name;
}

int
sgrt_dtype_size(int dtype)
{
	if (dtype < 0 || dtype >= SGRT_DTYPE_COUNT)
		return 0;
	return dtinfo[dtype].size;
}

int
sgrt_dtype_parse(const char *s)
{
	int i;

	for (i = 0; i < SGRT_DTYPE_COUNT; i++)
		if (strcmp(s, dtinfo[i].name) == 0)
			return i;
	return -1;
}

/*
 * Writes "PATH: message" into err (when there is one) and returns
 * SGRT_EIO, so that failures read `return fail(...)`.
 */
static int
fail(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (!err || errlen == 0)
		return SGRT_EIO;
	k = snprintf(err, errlen, "%s: ", path ? path : "(memory)");
	if (k < 0 || (size_t)k >= errlen)
		return SGRT_EIO;
	va_start(ap, fmt);
	vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
	va_end(ap);
	return SGRT_EIO;
}

/*
 * Copies a tensor name into out (SHOWN_NAME + 8 bytes) for a message:
 * control bytes and quotes escaped, long names cut at a character
 * boundary and ended with "...".
 */
static const char *
show(char *out, const char *name)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, k = 0;
	unsigned char c;

	for (i = 0; name[i]; i++) {
		c = (unsigned char)name[i];
		if (k >= SHOWN_NAME) {
			if ((c & 0xc0) == 0x80) { /* mid-character: drop it */
				while (k > 0 &&
				       ((unsigned char)out[k - 1] & 0xc0) == 0x80)
					k--;
				if (k > 0)
					k--;
			}
			memcpy(out + k, "...", 4);
			return out;
		}
		if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
			out[k++] = '\\';
			out[k++] = 'x';
			out[k++] = hex[c >> 4];
			out[k++] = hex[c & 15];
		} else {
			out[k++] = (char)c;
		}
	}
	out[k] = 0;
	return out;
}

/*
 * Formats DTYPE[d0, d1, ...] into out (at least 256 bytes).
 */
static const char *
show_type(char *out, size_t len, int dtype, int rank, const int64_t *shape)
{
	size_t k;
	int i;

	k = (size_t)snprintf(out, len, "%s[", sgrt_dtype_name(dtype));
	for (i = 0; i < rank && k < len; i++)
		k += (size_t)snprintf(out + k, len - k, "%s%" PRId64,
		                      i ? ", " : "", shape[i]);
	if (k < len)
		snprintf(out + k, len - k, "]");
	return out;
}

/*
 * Length of the valid UTF-8 prefix of s[0..n) (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), as Rust's from_utf8.
 */
static size_t
utf8_valid_prefix(const unsigned char *s, size_t n)
{
	size_t i = 0, k, need;
	uint32_t cp;

	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		if (s[i] >= 0xc2 && s[i] <= 0xdf) {
			need = 1, cp = s[i] & 0x1f;
		} else if (s[i] >= 0xe0 && s[i] <= 0xef) {
			need = 2, cp = s[i] & 0x0f;
		} else if (s[i] >= 0xf0 && s[i] <= 0xf4) {
			need = 3, cp = s[i] & 0x07;
		} else {
			return i;
		}
		if (n - i <= need)
			return i;
		for (k = 1; k <= need; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) ||
		    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			return i;
		i += need + 1;
	}
	return n;
}

static int
json_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/*
 * Checks what cJSON lets through but JSON (and serde_json) does not:
 * control bytes outside strings other than whitespace, raw control bytes
 * inside strings; and refuses an escaped NUL, which a C string cannot
 * hold.  Also requires the header to start with '{'.  Returns 0 or fails.
 */
static int
prescan(const unsigned char *h, size_t n, const char *path, char *err,
        size_t errlen)
{
	size_t i = 0;
	int instr = 0;

	while (i < n && json_space(h[i]))
		i++;
	if (i == n || h[i] != '{')
		return fail(err, errlen, path, "the header is not a JSON object "
		            "(it must start with '{')");
	for (; i < n; i++) {
		if (!instr) {
			if (h[i] == '"')
				instr = 1;
			else if (h[i] < 0x20 && !json_space(h[i]))
				goto ctrl;
			continue;
		}
		if (h[i] == '"') {
			instr = 0;
		} else if (h[i] == '\\') {
			if (n - i > 5 && memcmp(h + i + 1, "u0000", 5) == 0)
				return fail(err, errlen, path, "the header holds "
				            "an escaped NUL character (\\u0000) at "
				            "byte %zu, which sgc does not accept", i);
			i++;
		} else if (h[i] < 0x20) {
			goto ctrl;
		}
	}
	return 0;
ctrl:
	return fail(err, errlen, path, "the header is not valid JSON: control "
	            "character 0x%02x at byte %zu", h[i], i);
}

/*
 * Reads a JSON number that must be an integer in [0, 2^53] into *v.
 */
static int
json_count(const cJSON *j, uint64_t *v)
{
	double d;

	if (!cJSON_IsNumber(j))
		return 0;
	d = j->valuedouble;
	if (!(d >= 0 && d <= MAX_EXACT) || (double)(uint64_t)d != d)
		return 0;
	*v = (uint64_t)d;
	return 1;
}

/*
 * Finds the member `key` of a tensor entry; fails when it is given twice.
 * *out is NULL when absent.
 */
static int
member(const cJSON *obj, const char *key, const cJSON **out, const char *path,
       const char *name, char *err, size_t errlen)
{
	const cJSON *c;
	char nb[SHOWN_NAME + 8];

	*out = NULL;
	for (c = obj->child; c; c = c->next) {
		if (!c->string || strcmp(c->string, key) != 0)
			continue;
		if (*out)
			return fail(err, errlen, path, "tensor '%s': '%s' is "
			            "given twice", show(nb, name), key);
		*out = c;
	}
	if (!*out)
		return fail(err, errlen, path, "tensor '%s': missing '%s'",
		            show(nb, name), key);
	return 0;
}

/*
 * Reads the "dtype" member of a tensor entry.
 */
static int
entry_dtype(const cJSON *j, Entry *e, const char *path, char *err,
            size_t errlen)
{
	char nb[SHOWN_NAME + 8], db[SHOWN_NAME + 8];
	int i;

	if (!cJSON_IsString(j))
		return fail(err, errlen, path, "tensor '%s': 'dtype' is not a "
		            "string", show(nb, e->name));
	e->dtype = sgrt_dtype_parse(j->valuestring);
	if (e->dtype >= 0)
		return 0;
	for (i = 0; foreign_dtypes[i]; i++)
		if (strcmp(j->valuestring, foreign_dtypes[i]) == 0)
			return fail(err, errlen, path, "tensor '%s': unsupported "
			            "dtype '%s' (sgc reads " SUPPORTED ")",
			            show(nb, e->name), foreign_dtypes[i]);
	return fail(err, errlen, path, "tensor '%s': unknown dtype '%s' (sgc "
	            "reads " SUPPORTED ")", show(nb, e->name),
	            show(db, j->valuestring));
}

/*
 * Reads the "shape" member of a tensor entry and returns the tensor's byte
 * size in *nbytes.
 */
static int
entry_shape(const cJSON *j, Entry *e, uint64_t *nbytes, const char *path,
            char *err, size_t errlen)
{
	char nb[SHOWN_NAME + 8];
	const cJSON *c;
	uint64_t v, numel = 1;
	int rank;

	if (!cJSON_IsArray(j))
		return fail(err, errlen, path, "tensor '%s': 'shape' is not a "
		            "list", show(nb, e->name));
	rank = cJSON_GetArraySize(j);
	if (rank > SGRT_MAXRANK)
		return fail(err, errlen, path, "tensor '%s': rank %d is above "
		            "sgc's maximum of %d", show(nb, e->name), rank,
		            SGRT_MAXRANK);
	e->rank = 0;
	for (c = j->child; c; c = c->next) {
		if (!json_count(c, &v))
			return fail(err, errlen, path, "tensor '%s': shape entry "
			            "%d is not a non-negative integer",
			            show(nb, e->name), e->rank);
		e->shape[e->rank++] = (int64_t)v;
		if (__builtin_mul_overflow(numel, v, &numel))
			return fail(err, errlen, path, "tensor '%s': the shape's "
			            "element count overflows", show(nb, e->name));
	}
	if (__builtin_mul_overflow(numel, (uint64_t)dtinfo[e->dtype].size,
	                           nbytes))
		return fail(err, errlen, path, "tensor '%s': the shape's byte "
		            "size overflows", show(nb, e->name));
	return 0;
}

/*
 * Reads the "data_offsets" member of a tensor entry and checks them
 * against the tensor's size and the data section's length.
 */
static int
entry_offsets(const cJSON *j, Entry *e, uint64_t nbytes, uint64_t datalen,
              const char *path, char *err, size_t errlen)
{
	char nb[SHOWN_NAME + 8], tb[256];

	if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2 ||
	    !json_count(j->child, &e->begin) ||
	    !json_count(j->child->next, &e->end))
		return fail(err, errlen, path, "tensor '%s': 'data_offsets' must "
		            "be two non-negative integers", show(nb, e->name));
	if (e->begin > e->end)
		return fail(err, errlen, path, "tensor '%s': data_offsets [%" PRIu64
		            ", %" PRIu64 "] begin after they end",
		            show(nb, e->name), e->begin, e->end);
	if (e->end > datalen)
		return fail(err, errlen, path, "tensor '%s': data_offsets [%" PRIu64
		            ", %" PRIu64 "] reach beyond the data section (%" PRIu64
		            " bytes): the file is truncated", show(nb, e->name),
		            e->begin, e->end, datalen);
	if (e->end - e->begin != nbytes)
		return fail(err, errlen, path, "tensor '%s': data_offsets [%" PRIu64
		            ", %" PRIu64 "] hold %" PRIu64 " bytes, but %s needs %"
		            PRIu64, show(nb, e->name), e->begin, e->end,
		            e->end - e->begin,
		            show_type(tb, sizeof tb, e->dtype, e->rank, e->shape),
		            nbytes);
	return 0;
}

/*
 * Checks and reads one tensor entry of the header.
 */
static int
parse_entry(const cJSON *j, Entry *e, uint64_t datalen, const char *path,
            char *err, size_t errlen)
{
	char nb[SHOWN_NAME + 8];
	const cJSON *dt, *sh, *off;
	uint64_t nbytes = 0;
	int rc;

	e->name = j->string;
	if (!cJSON_IsObject(j))
		return fail(err, errlen, path, "tensor '%s': its entry is not an "
		            "object", show(nb, e->name));
	if ((rc = member(j, "dtype", &dt, path, e->name, err, errlen)) ||
	    (rc = member(j, "shape", &sh, path, e->name, err, errlen)) ||
	    (rc = member(j, "data_offsets", &off, path, e->name, err, errlen)))
		return rc;
	if ((rc = entry_dtype(dt, e, path, err, errlen)) ||
	    (rc = entry_shape(sh, e, &nbytes, path, err, errlen)))
		return rc;
	return entry_offsets(off, e, nbytes, datalen, path, err, errlen);
}

/*
 * Checks "__metadata__": an object of strings, or null.  Its contents are
 * not used.
 */
static int
check_metadata(const cJSON *j, const char *path, char *err, size_t errlen)
{
	const cJSON *c;

	if (cJSON_IsNull(j))
		return 0;
	if (!cJSON_IsObject(j))
		return fail(err, errlen, path, "'__metadata__' is not an object "
		            "of strings");
	for (c = j->child; c; c = c->next)
		if (!cJSON_IsString(c))
			return fail(err, errlen, path, "'__metadata__' is not an "
			            "object of strings");
	return 0;
}

static int
cmp_entry_name(const void *a, const void *b)
{
	return strcmp(((const Entry *)a)->name, ((const Entry *)b)->name);
}

static int
cmp_entry_offsets(const void *a, const void *b)
{
	const Entry *x = *(const Entry *const *)a, *y = *(const Entry *const *)b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return strcmp(x->name, y->name);
}

/*
 * Checks that the tensors (sorted by name) have distinct names and cover
 * the data section exactly, as the reference implementation requires.
 */
static int
check_layout(Entry *e, uint32_t n, uint64_t datalen, const char *path,
             char *err, size_t errlen)
{
	char nb[SHOWN_NAME + 8], nb2[SHOWN_NAME + 8];
	Entry **by;
	uint64_t at = 0;
	uint32_t i;
	int rc = 0;

	for (i = 1; i < n; i++)
		if (strcmp(e[i - 1].name, e[i].name) == 0)
			return fail(err, errlen, path, "tensor '%s' is given "
			            "twice", show(nb, e[i].name));
	by = malloc((n ? n : 1) * sizeof *by);
	if (!by)
		return fail(err, errlen, path, "out of memory");
	for (i = 0; i < n; i++)
		by[i] = &e[i];
	qsort(by, n, sizeof *by, cmp_entry_offsets);
	for (i = 0; i < n && !rc; i++) {
		if (by[i]->begin < at)
			rc = fail(err, errlen, path, "tensors '%s' (bytes %" PRIu64
			          "..%" PRIu64 ") and '%s' (bytes %" PRIu64 "..%"
			          PRIu64 ") overlap", show(nb, by[i - 1]->name),
			          by[i - 1]->begin, by[i - 1]->end,
			          show(nb2, by[i]->name), by[i]->begin, by[i]->end);
		else if (by[i]->begin > at)
			rc = fail(err, errlen, path, "bytes %" PRIu64 "..%" PRIu64
			          " of the data section belong to no tensor (a "
			          "safetensors file may not have holes)", at,
			          by[i]->begin);
		at = by[i]->end;
	}
	free(by);
	if (!rc && at != datalen)
		rc = fail(err, errlen, path, "the last %" PRIu64 " bytes of the "
		          "data section belong to no tensor (a safetensors file "
		          "may not have trailing bytes)", datalen - at);
	return rc;
}

/*
 * Builds the result from checked entries: tensors sorted by name, data
 * pointing into buf.
 */
static int
build(Entry *e, uint32_t n, unsigned char *data, SgrtSafetensors *out,
      const char *path, char *err, size_t errlen)
{
	SgrtTensor *t;
	uint32_t i;

	t = calloc(n ? n : 1, sizeof *t);
	if (!t)
		return fail(err, errlen, path, "out of memory");
	out->t = t;
	for (i = 0; i < n; i++) {
		t[i].name = strdup(e[i].name);
		if (!t[i].name)
			return fail(err, errlen, path, "out of memory");
		out->n = i + 1;
		t[i].dtype = e[i].dtype;
		t[i].rank = e[i].rank;
		memcpy(t[i].shape, e[i].shape, sizeof t[i].shape);
		t[i].data = data + e[i].begin;
		t[i].nbytes = (size_t)(e[i].end - e[i].begin);
	}
	return 0;
}

/*
 * Checks the parsed header (root) and fills out.  data/datalen: the data
 * section.
 */
static int
parse_root(const cJSON *root, unsigned char *data, uint64_t datalen,
           SgrtSafetensors *out, const char *path, char *err, size_t errlen)
{
	const cJSON *c;
	Entry *e;
	uint32_t n = 0;
	int rc = 0, nmeta = 0;

	if (!cJSON_IsObject(root))
		return fail(err, errlen, path, "the header is not a JSON object");
	for (c = root->child; c; c = c->next)
		n++;
	e = calloc(n ? n : 1, sizeof *e);
	if (!e)
		return fail(err, errlen, path, "out of memory");
	n = 0;
	for (c = root->child; c && !rc; c = c->next) {
		if (strcmp(c->string, "__metadata__") == 0) {
			if (nmeta++)
				rc = fail(err, errlen, path, "'__metadata__' is "
				          "given twice");
			else
				rc = check_metadata(c, path, err, errlen);
			continue;
		}
		rc = parse_entry(c, &e[n++], datalen, path, err, errlen);
	}
	if (!rc) {
		qsort(e, n, sizeof *e, cmp_entry_name);
		rc = check_layout(e, n, datalen, path, err, errlen);
	}
	if (!rc)
		rc = build(e, n, data, out, path, err, errlen);
	free(e);
	return rc;
}

/*
 * Parses the file held in buf (which out takes over, also on failure).
 */
static int
parse_owned(const char *path, unsigned char *buf, size_t len,
            SgrtSafetensors *out, char *err, size_t errlen)
{
	const char *end = NULL;
	cJSON *root;
	uint64_t hlen = 0;
	size_t bad, i;
	int rc;

	memset(out, 0, sizeof *out);
	out->buf = buf;
	out->buflen = len;
	if (len == 0)
		return fail(err, errlen, path, "the file is empty");
	if (len < 8)
		return fail(err, errlen, path, "the file is %zu bytes long, too "
		            "short for the 8-byte header length", len);
	for (i = 0; i < 8; i++)
		hlen |= (uint64_t)buf[i] << (8 * i);
	if (hlen > MAX_HEADER)
		return fail(err, errlen, path, "header length %" PRIu64 " is above "
		            "the limit of %u bytes", hlen, MAX_HEADER);
	if (hlen > len - 8)
		return fail(err, errlen, path, "header length %" PRIu64 " reaches "
		            "beyond the end of the file (%zu bytes)", hlen, len);
	if ((bad = utf8_valid_prefix(buf + 8, (size_t)hlen)) != hlen)
		return fail(err, errlen, path, "the header is not valid UTF-8 "
		            "(at byte %zu)", bad);
	if ((rc = prescan(buf + 8, (size_t)hlen, path, err, errlen)))
		return rc;
	root = cJSON_ParseWithLengthOpts((const char *)buf + 8, (size_t)hlen,
	                                 &end, 0);
	if (!root)
		return fail(err, errlen, path, "the header is not valid JSON "
		            "(error at byte %td)",
		            end ? end - (const char *)buf - 8 : (ptrdiff_t)0);
	for (i = (size_t)(end - (const char *)buf); i < 8 + hlen; i++)
		if (!json_space(buf[i]))
			break;
	if (i < 8 + hlen)
		rc = fail(err, errlen, path, "the header has text after its JSON "
		          "object (at byte %zu)", i - 8);
	else
		rc = parse_root(root, buf + 8 + hlen, len - 8 - hlen, out, path,
		                err, errlen);
	cJSON_Delete(root);
	return rc;
}

int
sgrt_st_parse(const char *path, const void *bytes, size_t len,
              SgrtSafetensors *out, char *err, size_t errlen)
{
	unsigned char *buf;
	int rc;

	memset(out, 0, sizeof *out);
	buf = malloc(len ? len : 1);
	if (!buf)
		return fail(err, errlen, path, "out of memory");
	if (len)
		memcpy(buf, bytes, len);
	rc = parse_owned(path, buf, len, out, err, errlen);
	if (rc)
		sgrt_st_free(out);
	return rc;
}

/*
 * Reads the whole of fd into a malloc'd buffer.  Returns 0, or an errno.
 */
/*
 * How many bytes a file whose first len bytes are buf can have, as its
 * header says (8 + header + the end of the last tensor's data), or 0 when
 * that is not known yet.  A header length that cannot be right ends the
 * read at once (the parser then says why): so a stream (a FIFO,
 * /dev/zero) is read no further than its header lets it go.
 */
static size_t
stream_limit(const unsigned char *buf, size_t len)
{
	uint64_t hlen = 0, end = 0;
	cJSON *h, *t, *off;
	int i;

	if (len < 8)
		return 0;
	for (i = 7; i >= 0; i--)
		hlen = hlen << 8 | buf[i];
	if (hlen < 2 || hlen > MAX_HEADER)
		return len;
	if (len < 8 + hlen)
		return 0;
	h = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hlen);
	if (!h)
		return len;
	cJSON_ArrayForEach(t, h) {
		off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
		if (cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2 &&
		    cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) &&
		    cJSON_GetArrayItem(off, 1)->valuedouble > (double)end)
			end = cJSON_GetArrayItem(off, 1)->valuedouble < 1e18
			      ? (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble
			      : (uint64_t)1e18;
	}
	cJSON_Delete(h);
	return end > SGRT_ST_MAX_FILE ? (size_t)SGRT_ST_MAX_FILE + 1
	                              : (size_t)(8 + hlen + end);
}

static int
read_all(int fd, unsigned char **bufp, size_t *lenp)
{
	struct stat st;
	unsigned char *buf = NULL, *nbuf;
	size_t len = 0, cap, limit = 0;
	ssize_t k;

	if (fstat(fd, &st) < 0)
		return errno;
	if (S_ISDIR(st.st_mode))
		return EISDIR;
	if (S_ISREG(st.st_mode) && (unsigned long long)st.st_size > SGRT_ST_MAX_FILE)
		return EFBIG;
	cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1
	                                              : 65536;
	for (;;) {
		if (len > SGRT_ST_MAX_FILE) {
			free(buf);
			return EFBIG;
		}
		if (!S_ISREG(st.st_mode) && (limit || (limit = stream_limit(buf, len))) &&
		    len >= limit)
			break; /* a stream: as far as its header goes */
		if (!buf || len == cap) {
			if (buf)
				cap = cap < SIZE_MAX / 2 ? cap * 2 : SIZE_MAX;
			nbuf = realloc(buf, cap);
			if (!nbuf) {
				free(buf);
				return ENOMEM;
			}
			buf = nbuf;
		}
		k = read(fd, buf + len, cap - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			k = errno;
			free(buf);
			return (int)k;
		}
		if (k == 0)
			break;
		len += (size_t)k;
	}
	*bufp = buf;
	*lenp = len;
	return 0;
}

int
sgrt_st_read(const char *path, SgrtSafetensors *out, char *err, size_t errlen)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	int fd, e, rc;

	memset(out, 0, sizeof *out);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(err, errlen, path, "cannot open: %s", strerror(errno));
	e = read_all(fd, &buf, &len);
	close(fd);
	if (e == EFBIG)
		return fail(err, errlen, path, "larger than %llu GiB, the limit for "
		            "a tensor file", SGRT_ST_MAX_FILE >> 30);
	if (e)
		return fail(err, errlen, path, "cannot read: %s", strerror(e));
	rc = parse_owned(path, buf, len, out, err, errlen);
	if (rc)
		sgrt_st_free(out);
	return rc;
}

const SgrtTensor *
sgrt_st_find(const SgrtSafetensors *f, const char *name)
{
	uint32_t lo = 0, hi;
	int c;

	if (!f || !f->t)
		return NULL;
	hi = f->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		c = strcmp(name, f->t[mid].name);
		if (c == 0)
			return &f->t[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

void
sgrt_st_free(SgrtSafetensors *f)
{
	uint32_t i;

	if (!f)
		return;
	for (i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	free(f->buf);
	memset(f, 0, sizeof *f);
}

int
sgrt_st_check(const char *path, const SgrtTensor *t, int dtype, int rank,
              const int64_t *shape, char *err, size_t errlen)
{
	char nb[SHOWN_NAME + 8], have[256], want[256];
	int i, same;

	same = t->dtype == dtype && t->rank == rank;
	for (i = 0; same && i < rank; i++)
		same = t->shape[i] == shape[i];
	if (same)
		return SGRT_OK;
	if (err && errlen)
		snprintf(err, errlen, "%s: tensor '%s' is %s, but the graph "
		         "declares %s", path, show(nb, t->name),
		         show_type(have, sizeof have, t->dtype, t->rank, t->shape),
		         show_type(want, sizeof want, dtype, rank, shape));
	return SGRT_EMISMATCH;
}

char *
sgrt_names_text(char *buf, size_t len, const char *const *names, size_t n)
{
	char nb[SHOWN_NAME + 8], tail[48];
	size_t i, k = 0, need;

	if (!len)
		return buf;
	buf[0] = 0;
	for (i = 0; i < n; i++) {
		show(nb, names[i]);
		snprintf(tail, sizeof tail, ", ... (%zu in all)", n);
		need = strlen(nb) + 4 + (i + 1 < n ? strlen(tail) : 0);
		if (k + need >= len) {
			if (k + strlen(tail) < len)
				snprintf(buf + k, len - k, "%s", i ? tail : tail + 2);
			return buf;
		}
		k += (size_t)snprintf(buf + k, len - k, "%s'%s'", i ? ", " : "", nb);
	}
	return buf;
}

int
sgrt_st_check_extra(const char *path, const SgrtSafetensors *f,
                    const char *const *known, size_t nknown,
                    const char *const *expect, size_t nexpect,
                    const char *hint, char *err, size_t errlen)
{
	const char **extra;
	uint8_t *hit;
	size_t i, n = 0;
	char have[1024], want[1024];

	if (!f || !f->n)
		return SGRT_OK;
	hit = calloc(f->n, 1);
	extra = calloc(f->n, sizeof *extra);
	if (!hit || !extra) {
		free(hit);
		free(extra);
		if (err && errlen)
			snprintf(err, errlen, "%s: out of memory", path);
		return SGRT_EIO;
	}
	for (i = 0; i < nknown; i++) {
		const SgrtTensor *t = sgrt_st_find(f, known[i]);
		if (t)
			hit[t - f->t] = 1;
	}
	for (i = 0; i < f->n; i++)
		if (!hit[i])
			extra[n++] = f->t[i].name;
	if (n && err && errlen)
		snprintf(err, errlen, "%s: %s %s match%s no name of the graph "
		         "(it reads %s from this file)%s%s", path,
		         n == 1 ? "tensor" : "tensors",
		         sgrt_names_text(have, sizeof have, extra, n),
		         n == 1 ? "es" : "",
		         nexpect ? sgrt_names_text(want, sizeof want, expect, nexpect)
		                 : "nothing",
		         hint ? "; " : "", hint ? hint : "");
	free(hit);
	free(extra);
	return n ? SGRT_EMISMATCH : SGRT_OK;
}

/* The length of name's part before its last '.' (opt.PARAM). */
static size_t
state_prefix(const char *name)
{
	const char *dot = strrchr(name, '.');
	return dot ? (size_t)(dot - name) : strlen(name);
}

int
sgrt_st_check_state(const char *path, const SgrtSafetensors *f,
                    const char *const *names, size_t n, char *err, size_t errlen)
{
	size_t i = 0, j;

	while (i < n) {
		size_t len = state_prefix(names[i]);
		const char *have = NULL, *lack = NULL;
		for (j = i; j < n && state_prefix(names[j]) == len &&
		            strncmp(names[j], names[i], len) == 0; j++) {
			if (f && sgrt_st_find(f, names[j]))
				have = names[j];
			else
				lack = names[j];
		}
		if (have && lack) {
			if (err && errlen)
				snprintf(err, errlen, "%s: holds '%s' but not '%s': a param's "
				         "optimizer state is loaded whole or not at all", path,
				         have, lack);
			return SGRT_EMISMATCH;
		}
		i = j;
	}
	return SGRT_OK;
}

void
sgrt_warn_missing(const char *prog, const char *path,
                  const char *const *names, size_t n, uint64_t seed)
{
	char buf[1024];

	if (!n)
		return;
	fprintf(stderr, "%s: warning: %s lacks %s, which start%s from "
	        "--seed %" PRIu64 "\n", prog, path,
	        sgrt_names_text(buf, sizeof buf, names, n), n == 1 ? "s" : "",
	        seed);
}

/* ---------------------------------------------------------------- writer */

static void
buf_put(Buf *b, const char *s, size_t n)
{
	char *p;
	size_t cap;

	if (b->oom || n == 0)
		return;
	if (b->cap - b->n < n) {
		cap = b->cap ? b->cap : 256;
		while (cap - b->n < n && cap < SIZE_MAX / 2)
			cap *= 2;
		if (cap - b->n < n || !(p = realloc(b->p, cap))) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

static void
buf_puts(Buf *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

static void
buf_u64(Buf *b, uint64_t v)
{
	char tmp[24];

	buf_put(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "%" PRIu64, v));
}

/*
 * Appends s as a JSON string, escaped as serde_json escapes it.
 */
static void
buf_json_string(Buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	char esc[7] = "\\u00";
	unsigned char c;

	buf_put(b, "\"", 1);
	for (; (c = (unsigned char)*s); s++) {
		switch (c) {
		case '"': buf_put(b, "\\\"", 2); break;
		case '\\': buf_put(b, "\\\\", 2); break;
		case '\b': buf_put(b, "\\b", 2); break;
		case '\f': buf_put(b, "\\f", 2); break;
		case '\n': buf_put(b, "\\n", 2); break;
		case '\r': buf_put(b, "\\r", 2); break;
		case '\t': buf_put(b, "\\t", 2); break;
		default:
			if (c < 0x20) {
				esc[4] = hex[c >> 4];
				esc[5] = hex[c & 15];
				buf_put(b, esc, 6);
			} else {
				buf_put(b, (const char *)&c, 1);
			}
		}
	}
	buf_put(b, "\"", 1);
}

/*
 * Checks one tensor handed to the writer.
 */
static int
check_out_tensor(const SgrtTensor *t, const char *path, char *err,
                 size_t errlen)
{
	char nb[SHOWN_NAME + 8], tb[256];
	uint64_t numel = 1, nbytes;
	size_t len;
	int i;

	if (!t->name)
		return fail(err, errlen, path, "a tensor has no name");
	len = strlen(t->name);
	if (utf8_valid_prefix((const unsigned char *)t->name, len) != len)
		return fail(err, errlen, path, "tensor '%s': the name is not "
		            "valid UTF-8", show(nb, t->name));
	if (strcmp(t->name, "__metadata__") == 0)
		return fail(err, errlen, path, "'__metadata__' cannot name a "
		            "tensor");
	if (t->dtype < 0 || t->dtype >= SGRT_DTYPE_COUNT)
		return fail(err, errlen, path, "tensor '%s': invalid dtype %d",
		            show(nb, t->name), t->dtype);
	if (t->rank < 0 || t->rank > SGRT_MAXRANK)
		return fail(err, errlen, path, "tensor '%s': invalid rank %d",
		            show(nb, t->name), t->rank);
	for (i = 0; i < t->rank; i++)
		if (t->shape[i] < 0 ||
		    __builtin_mul_overflow(numel, (uint64_t)t->shape[i], &numel))
			return fail(err, errlen, path, "tensor '%s': invalid "
			            "shape", show(nb, t->name));
	if (__builtin_mul_overflow(numel, (uint64_t)dtinfo[t->dtype].size,
	                           &nbytes) || nbytes != t->nbytes)
		return fail(err, errlen, path, "tensor '%s': %zu bytes given for "
		            "%s", show(nb, t->name), t->nbytes,
		            show_type(tb, sizeof tb, t->dtype, t->rank, t->shape));
	if (t->nbytes && !t->data)
		return fail(err, errlen, path, "tensor '%s': no data",
		            show(nb, t->name));
	return 0;
}


static int
cmp_name_ptr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Fails when two tensors handed to the writer share a name.
 */
static int
check_unique(const SgrtTensor *t, uint32_t n, const char *path, char *err,
             size_t errlen)
{
	char nb[SHOWN_NAME + 8];
	const char **names;
	uint32_t i;
	int rc = 0;

	names = malloc((n ? n : 1) * sizeof *names);
	if (!names)
		return fail(err, errlen, path, "out of memory");
	for (i = 0; i < n; i++)
		names[i] = t[i].name;
	qsort(names, n, sizeof *names, cmp_name_ptr);
	for (i = 1; i < n && !rc; i++)
		if (strcmp(names[i - 1], names[i]) == 0)
			rc = fail(err, errlen, path, "tensor '%s' is given twice",
			          show(nb, names[i]));
	free(names);
	return rc;
}

/* The Python library's order: by dtype (I64 F64 F32 I32 BF16 F16 BOOL),
 * then by name. */
static int
cmp_out_order(const void *a, const void *b)
{
	const SgrtTensor *x = *(const SgrtTensor *const *)a;
	const SgrtTensor *y = *(const SgrtTensor *const *)b;

	if (x->dtype != y->dtype)
		return dtinfo[x->dtype].wrank - dtinfo[y->dtype].wrank;
	return strcmp(x->name, y->name);
}

/*
 * Appends the header of tensors order[0..n) (in file order) to b: the
 * JSON, padded with spaces so that the data starts at a multiple of 8.
 */
static void
put_header(Buf *b, const SgrtTensor **order, uint32_t n)
{
	uint64_t at = 0;
	uint32_t i;
	int j;

	buf_put(b, "{", 1);
	for (i = 0; i < n; i++) {
		if (i)
			buf_put(b, ",", 1);
		buf_json_string(b, order[i]->name);
		buf_puts(b, ":{\"dtype\":\"");
		buf_puts(b, dtinfo[order[i]->dtype].name);
		buf_puts(b, "\",\"shape\":[");
		for (j = 0; j < order[i]->rank; j++) {
			if (j)
				buf_put(b, ",", 1);
			buf_u64(b, (uint64_t)order[i]->shape[j]);
		}
		buf_puts(b, "],\"data_offsets\":[");
		buf_u64(b, at);
		buf_put(b, ",", 1);
		at += order[i]->nbytes;
		buf_u64(b, at);
		buf_puts(b, "]}");
	}
	buf_put(b, "}", 1);
	while (!b->oom && (b->n - 8) % 8)
		buf_put(b, " ", 1);
}

/*
 * Checks the tensors and builds the start of the file in b: the 8-byte
 * header length and the padded header.  *orderp receives the tensors in
 * file order (free it), *total the file's size.
 */
static int
prepare(const SgrtTensor *t, uint32_t n, Buf *b, const SgrtTensor ***orderp,
        uint64_t *total, const char *path, char *err, size_t errlen)
{
	const SgrtTensor **order;
	uint64_t hlen, datalen = 0;
	uint32_t i;
	int rc;

	for (i = 0; i < n; i++) {
		if ((rc = check_out_tensor(&t[i], path, err, errlen)))
			return rc;
		if (__builtin_add_overflow(datalen, (uint64_t)t[i].nbytes,
		                           &datalen))
			return fail(err, errlen, path, "the tensors are too "
			            "large");
	}
	if ((rc = check_unique(t, n, path, err, errlen)))
		return rc;
	order = malloc((n ? n : 1) * sizeof *order);
	if (!order)
		return fail(err, errlen, path, "out of memory");
	for (i = 0; i < n; i++)
		order[i] = &t[i];
	qsort(order, n, sizeof *order, cmp_out_order);
	buf_put(b, "\0\0\0\0\0\0\0\0", 8);
	put_header(b, order, n);
	hlen = b->n - 8;
	if (b->oom || hlen > MAX_HEADER) {
		free(order);
		if (b->oom)
			return fail(err, errlen, path, "out of memory");
		return fail(err, errlen, path, "the header would be %" PRIu64
		            " bytes, above the limit of %u", hlen, MAX_HEADER);
	}
	for (i = 0; i < 8; i++)
		b->p[i] = (char)(hlen >> (8 * i));
	*orderp = order;
	*total = 8 + hlen + datalen;
	return 0;
}

int
sgrt_st_serialize(const char *path, const SgrtTensor *t, uint32_t n,
                  void **bytes, size_t *len, char *err, size_t errlen)
{
	const SgrtTensor **order;
	Buf b = {0};
	uint64_t total;
	uint32_t i;
	int rc;

	*bytes = NULL;
	*len = 0;
	if ((rc = prepare(t, n, &b, &order, &total, path, err, errlen))) {
		free(b.p);
		return rc;
	}
	for (i = 0; i < n; i++)
		buf_put(&b, order[i]->data, order[i]->nbytes);
	free(order);
	if (b.oom || b.n != total) {
		free(b.p);
		return fail(err, errlen, path, "out of memory");
	}
	*bytes = b.p;
	*len = b.n;
	return SGRT_OK;
}


/*
 * Writes the header and the data to path (sgrt_out.h: a device in place,
 * a symlink through, else a mkstemp file renamed over it).  Returns 0 or
 * an errno; on failure no partial file is left.
 */
static int
write_file(const char *path, const Buf *head, const SgrtTensor **order,
           uint32_t n)
{
	SgrtOut o;
	uint32_t i;
	int e;

	if ((e = sgrt_out_open(&o, path)))
		return e;
	if (fwrite(head->p, 1, head->n, o.f) != head->n)
		e = errno ? errno : EIO;
	for (i = 0; i < n && !e; i++)
		if (order[i]->nbytes &&
		    fwrite(order[i]->data, 1, order[i]->nbytes, o.f) != order[i]->nbytes)
			e = errno ? errno : EIO;
	if (!e && fflush(o.f) != 0)
		e = errno ? errno : EIO;
	if (!e && o.tmp && fsync(fileno(o.f)) < 0)
		e = errno;
	if (e) {
		sgrt_out_abort(&o);
		return e;
	}
	return sgrt_out_commit(&o);
}

int
sgrt_st_write(const char *path, const SgrtTensor *t, uint32_t n, char *err,
              size_t errlen)
{
	const SgrtTensor **order;
	Buf b = {0};
	uint64_t total;
	int rc, e;

	if ((rc = prepare(t, n, &b, &order, &total, path, err, errlen))) {
		free(b.p);
		return rc;
	}
	e = write_file(path, &b, order, n);
	if (e)
		rc = fail(err, errlen, path, "cannot write: %s", strerror(e));
	free(order);
	free(b.p);
	return rc;
}
