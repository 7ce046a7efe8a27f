/*
 * util.c - arena, growable arrays, string map, number formatting, and the
 * internal-fault exit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sgc.h"

/* An arena is a list of blocks; allocations are bump-pointer. */
typedef struct Block {
	struct Block *next;
	size_t used, size;
	_Alignas(16) unsigned char data[];
} Block;

struct Arena {
	Block *head;
};

/* The input needs more memory than there is: exit status 1 (the input is
 * too large for this machine), docs/sgc.1.  Large tensors of `sgc run`
 * are named first (interp_tensor_new). */
_Noreturn void
out_of_memory(size_t n)
{
	fflush(stdout);
	if (n)
		fprintf(stderr, "sgc: error: out of memory (%zu bytes more needed); "
		        "the input is too large for this machine\n", n);
	else
		fputs("sgc: error: out of memory; the input is too large for this "
		      "machine\n", stderr);
	exit(1);
}

void *
xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		out_of_memory(n);
	return p;
}

void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		out_of_memory(n);
	return p;
}

static int
u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

void
sort_u64(uint64_t *key, size_t n)
{
	if (n > 1)
		qsort(key, n, sizeof *key, u64_cmp);
}

_Noreturn void
sgc_ice(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fprintf(stderr, "sgc: internal compiler error (%s:%d): ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nsgc: please report this with the input that caused it\n", stderr);
	exit(4);
}

Arena *
arena_new(void)
{
	Arena *a = xmalloc(sizeof *a);
	a->head = NULL;
	return a;
}

void *
arena_alloc(Arena *a, size_t n)
{
	Block *b = a->head;
	n = (n + 15) & ~(size_t)15;
	if (!b || b->size - b->used < n) {
		size_t size = n > 65536 ? n : 65536;
		b = xmalloc(sizeof *b + size);
		b->size = size;
		b->used = 0;
		b->next = a->head;
		a->head = b;
	}
	void *p = b->data + b->used;
	b->used += n;
	memset(p, 0, n);
	return p;
}

char *
arena_strndup(Arena *a, const char *s, size_t n)
{
	char *p = arena_alloc(a, n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

char *
arena_strdup(Arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}

char *
text_escape(Arena *a, const char *s)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += *p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\' || *p == '?' ||
		     *p == '*' ? 4 : 1;
	char *r = arena_alloc(a, n + 1), *q = r;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\' || *p == '?' ||
		    *p == '*') {
			*q++ = '\\';
			*q++ = (char)('0' + (*p >> 6));
			*q++ = (char)('0' + ((*p >> 3) & 7));
			*q++ = (char)('0' + (*p & 7));
		} else {
			*q++ = (char)*p;
		}
	}
	*q = 0;
	return r;
}

char *
text_c_string(Arena *a, const char *s)
{
	return arena_printf(a, "\"%s\"", text_escape(a, s));
}

/* x then y, in the arena. */
char *
arena_cat(Arena *a, const char *x, const char *y)
{
	size_t nx = strlen(x), ny = strlen(y);
	char *p = arena_alloc(a, nx + ny + 1);
	memcpy(p, x, nx);
	memcpy(p + nx, y, ny + 1);
	return p;
}

/* The first bl bytes of base, then sep (unless 0), then n in decimal: what
 * arena_printf(a, "%.*s.%u", ...) gives, without parsing a format (fresh
 * names are made by the hundred thousand). */
char *
arena_numbered(Arena *a, const char *base, size_t bl, char sep, uint32_t n)
{
	char digits[10];
	int nd = 0;
	do
		digits[nd++] = (char)('0' + n % 10);
	while (n /= 10);
	char *p = arena_alloc(a, bl + (size_t)nd + 2), *q = p + bl;
	memcpy(p, base, bl);
	if (sep)
		*q++ = sep;
	while (nd)
		*q++ = digits[--nd];
	*q = 0;
	return p;
}

/* GCC's sanitizer builds warn, wrongly, of format truncation in the
 * vsnprintf calls below (clang has no such warning group). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
char *
arena_vprintf(Arena *a, const char *fmt, va_list ap)
{
	char buf[256]; /* most texts fit: one vsnprintf */
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	if (n < 0)
		ICE("vsnprintf failed");
	char *p;
	if ((size_t)n < sizeof buf) {
		p = arena_strndup(a, buf, (size_t)n);
	} else {
		p = arena_alloc(a, (size_t)n + 1);
		vsnprintf(p, (size_t)n + 1, fmt, ap2);
	}
	va_end(ap2);
	return p;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

char *
arena_printf(Arena *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *p = arena_vprintf(a, fmt, ap);
	va_end(ap);
	return p;
}

void
arena_free(Arena *a)
{
	if (!a)
		return;
	for (Block *b = a->head, *next; b; b = next) {
		next = b->next;
		free(b);
	}
	free(a);
}

void
vec_grow_(void **v, uint32_t *cap, uint32_t need, size_t elt)
{
	uint32_t c = *cap ? *cap : 8;
	while (c < need) {
		if (c > UINT32_MAX / 2)
			ICE("array too large");
		c *= 2;
	}
	*v = xrealloc(*v, (size_t)c * elt);
	*cap = c;
}

/* ------------------------------------------------------------------ map */

static uint32_t
hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

/* An empty map. */
void
map_init(Map *m)
{
	memset(m, 0, sizeof *m);
}

/* Frees the slots (not the keys). */
void
map_free(Map *m)
{
	free(m->slot);
	memset(m, 0, sizeof *m);
}

/* The slot of key (hash h), or the empty slot where it would go. */
static MapSlot *
map_find(const Map *m, const char *key, size_t len, uint32_t h)
{
	uint32_t mask = m->cap - 1, i = h & mask;
	for (;;) {
		MapSlot *e = &m->slot[i];
		if (!e->key || (e->hash == h && e->keylen == len &&
		                memcmp(e->key, key, len) == 0))
			return e;
		i = (i + 1) & mask;
	}
}

uint32_t *
map_get(Map *m, const char *key, size_t len)
{
	if (!m->cap)
		return NULL;
	MapSlot *e = map_find(m, key, len, hash(key, len));
	return e->key ? &e->val : NULL;
}

/* Twice the slots, every key moved. */
static void
map_grow(Map *m)
{
	Map old = *m;
	m->cap = old.cap ? old.cap * 2 : 16;
	m->rewrites = old.rewrites;
	m->slot = calloc(m->cap, sizeof *m->slot);
	if (!m->slot)
		out_of_memory(0);
	for (uint32_t i = 0; i < old.cap; i++)
		if (old.slot[i].key)
			*map_find(m, old.slot[i].key, old.slot[i].keylen,
			          old.slot[i].hash) = old.slot[i];
	free(old.slot);
}

uint32_t *
map_put(Map *m, const char *key, size_t len, uint32_t val)
{
	if ((m->n + 1) * 2 > m->cap)
		map_grow(m);
	uint32_t h = hash(key, len);
	MapSlot *e = map_find(m, key, len, h);
	if (!e->key) {
		e->key = key;
		e->keylen = (uint32_t)len;
		e->hash = h;
		m->n++;
	} else
		m->rewrites++;
	e->val = val;
	return &e->val;
}

/* ------------------------------------------------------------------ numbers */

const char *
fmt_double(char *buf, double d)
{
	if (isnan(d))
		return strcpy(buf, "nan");
	if (isinf(d))
		return strcpy(buf, d < 0 ? "-inf" : "inf");
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, 32, "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	/* Keep it a float literal: "1" -> "1.0". */
	if (!strpbrk(buf, ".eEn"))
		strcat(buf, ".0");
	return buf;
}

/* ------------------------------------------------------------------ types */

static const struct {
	const char *name, *st;
	int size;
} dtypes[DT__N] = {
	[DT_F64] = {"f64", "F64", 8}, [DT_F32] = {"f32", "F32", 4},
	[DT_F16] = {"f16", "F16", 2}, [DT_BF16] = {"bf16", "BF16", 2},
	[DT_I64] = {"i64", "I64", 8}, [DT_I32] = {"i32", "I32", 4},
	[DT_BOOL] = {"bool", "BOOL", 1},
};

const char *
dtype_name(DType t)
{
	return t < DT__N ? dtypes[t].name : "<error>";
}

const char *
dtype_st_name(DType t)
{
	return t < DT__N ? dtypes[t].st : "<error>";
}

int
dtype_parse(const char *s, DType *out)
{
	for (int i = 0; i < DT__N; i++)
		if (strcmp(s, dtypes[i].name) == 0) {
			*out = (DType)i;
			return 1;
		}
	return 0;
}

int
dtype_size(DType t)
{
	return t < DT__N ? dtypes[t].size : 0;
}

int
dtype_is_float(DType t)
{
	return t == DT_F64 || t == DT_F32 || t == DT_F16 || t == DT_BF16;
}

int
dtype_is_int(DType t)
{
	return t == DT_I64 || t == DT_I32;
}

int64_t
type_numel(const Type *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		n *= t->d[i];
	return n;
}

void
type_around(const Type *t, int d, int64_t *outer, int64_t *len, int64_t *inner)
{
	*outer = *len = *inner = 1;
	for (int i = 0; i < t->rank; i++) {
		if (i < d)
			*outer *= t->d[i];
		else if (i == d)
			*len = t->d[i];
		else
			*inner *= t->d[i];
	}
}

int
type_same_shape(const Type *a, const Type *b)
{
	if (a->rank != b->rank)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (a->d[i] != b->d[i])
			return 0;
	return 1;
}
