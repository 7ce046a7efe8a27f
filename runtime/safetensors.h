/*
 * safetensors.h - reading and writing safetensors files (libsgrt; shared by
 * `sgc run` and the generated code's driver).
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON mapping
 * tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * relative to the byte after the header; an optional "__metadata__" object
 * of strings), then the data.
 */
#ifndef SGRT_SAFETENSORS_H
#define SGRT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define SGRT_MAXRANK 8
/* At most this many --inputs files, read together (the later file's
 * tensor wins where two hold one name). */
#define SGRT_MAX_INPUT_FILES 8
/* The largest tensor file read (64 GiB; docs/runtime.md): a bigger one,
 * or an endless stream such as /dev/zero, is refused with a message. */
#define SGRT_ST_MAX_FILE ((unsigned long long)64 << 30)

/* Same order as the compiler's DType. */
typedef enum {
	SGRT_F64, SGRT_F32, SGRT_F16, SGRT_BF16, SGRT_I64, SGRT_I32, SGRT_BOOL,
	SGRT_DTYPE_COUNT
} SgrtDType;

/* Result codes: SGRT_OK, or the exit status a command reports. */
enum {
	SGRT_OK = 0,
	SGRT_EMISMATCH = 1, /* well-formed, but not what the graph declares */
	SGRT_EIO = 3,       /* cannot read/write, or not a valid file */
};

typedef struct {
	char *name;          /* NUL-terminated */
	int dtype;           /* SgrtDType */
	int rank;
	int64_t shape[SGRT_MAXRANK];
	void *data;          /* nbytes bytes (owned by the file object when read) */
	size_t nbytes;
} SgrtTensor;

typedef struct {
	SgrtTensor *t;       /* sorted by name */
	uint32_t n;
	void *buf;           /* the file's bytes */
	size_t buflen;
} SgrtSafetensors;

const char *sgrt_dtype_name(int dtype);     /* "F32" */
int sgrt_dtype_size(int dtype);
int sgrt_dtype_parse(const char *s);        /* -1 when unknown */

/* Reads and validates the whole file (the checks are listed at the top of
 * safetensors.c).  On failure returns SGRT_EIO, leaves *out empty (safe to
 * free) and writes a message naming the file (and the tensor, when one is
 * at fault) into err.  Tensor data point into out->buf, unaligned in
 * general: copy them out with memcpy. */
int sgrt_st_read(const char *path, SgrtSafetensors *out, char *err, size_t errlen);
/* The same from bytes in memory (path is used in messages only). */
int sgrt_st_parse(const char *path, const void *bytes, size_t len,
                  SgrtSafetensors *out, char *err, size_t errlen);
const SgrtTensor *sgrt_st_find(const SgrtSafetensors *f, const char *name);
void sgrt_st_free(SgrtSafetensors *f);

/* Writes n tensors (any order) in the bytes the Python safetensors library
 * writes for them: sorted by dtype (I64 F64 F32 I32 BF16 F16 BOOL) then by
 * name, data contiguous (so each tensor is aligned to its element size),
 * header padded with spaces to a multiple of 8.  Writes to PATH.tmp.PID and
 * renames it, so no partial file is left on failure.  Names must be unique
 * UTF-8; nbytes must match dtype and shape. */
int sgrt_st_write(const char *path, const SgrtTensor *t, uint32_t n,
                  char *err, size_t errlen);
/* The same bytes into a malloc'd buffer (*bytes, *len; free() it); path is
 * used in messages only. */
int sgrt_st_serialize(const char *path, const SgrtTensor *t, uint32_t n,
                      void **bytes, size_t *len, char *err, size_t errlen);

/* Checks that a tensor matches a declaration; on mismatch returns
 * SGRT_EMISMATCH with a message naming file and tensor. */
int sgrt_st_check(const char *path, const SgrtTensor *t, int dtype, int rank,
                  const int64_t *shape, char *err, size_t errlen);

/* Names for a message into buf (len bytes): 'a', 'b', 'c', cut with
 * ", ... (N in all)" when they do not fit.  Returns buf. */
char *sgrt_names_text(char *buf, size_t len, const char *const *names,
                      size_t n);

/* Checks that every tensor of f has one of the names known[0..nknown) (the
 * names of the graph).  Otherwise returns SGRT_EMISMATCH with a message
 * naming the file, the tensors that match nothing and expect[0..nexpect)
 * (the names the file is read for), then hint (may be NULL), e.g. "use
 * --allow-extra to ignore them". */
int sgrt_st_check_extra(const char *path, const SgrtSafetensors *f,
                        const char *const *known, size_t nknown,
                        const char *const *expect, size_t nexpect,
                        const char *hint, char *err, size_t errlen);

/* Optimizer state names[0..n) (opt.PARAM.what, each param's next to each
 * other): each param's must be in f all or none, since a partial state
 * (the moments without the step count) has no meaning; PyTorch refuses
 * it.  Otherwise returns SGRT_EMISMATCH with a message naming one present
 * and one missing tensor. */
int sgrt_st_check_state(const char *path, const SgrtSafetensors *f,
                        const char *const *names, size_t n, char *err, size_t errlen);

/* Prints to stderr "PROG: warning: PATH lacks 'a', 'b', which start from
 * --seed S" (nothing when n is 0): params and consts a file lacks. */
void sgrt_warn_missing(const char *prog, const char *path,
                       const char *const *names, size_t n, uint64_t seed);

#endif
