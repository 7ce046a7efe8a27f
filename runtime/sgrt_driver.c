/*
 * sgrt_driver.c - what the generated main() runs (interface.md, "The
 * driver"): the command line, tensors in and out of safetensors files,
 * --steps, --trace and --bench.
 *
 * The generated code describes its graph as an SgrtProgram (a tensor
 * table and five entry points) and calls sgrt_main.  The order of work:
 *   1. parse the command line; read RANK / WORLD_SIZE / LOCAL_RANK;
 *   2. create the model on --device, else LOCAL_RANK;
 *   3. allocate inputs and outputs; load params, consts and optimizer
 *      state from --params (missing ones from --seed, or zeros), inputs
 *      from --inputs (a missing input is an error);
 *   4. run --steps calls (default 1, or 0 with --bench) on one stream,
 *      each followed by a wait on every extern event; trace the last;
 *   5. --bench N: SGRT_BENCH_WARMUP (default 3) calls, then N calls each
 *      timed with CUDA events; print the JSON line;
 *   6. write --out after the last call.
 * With several ranks, "{rank}" in a path is replaced by the rank; a path
 * without it is read by every rank but written (--out, --trace) by rank 0
 * only, and only rank 0 prints the bench line.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "init.h"
#include "sgrt_impl.h"

/* ------------------------------------------------------------------ command line */

void
sgrt_usage(FILE *f, const char *prog)
{
	fprintf(f,
	    "usage: %s [--params P.safetensors] [--inputs I.safetensors]... "
	    "[--out O.safetensors]\n"
	    "       [--steps N] [--bench N] [--seed S] [--trace T.json] "
	    "[--device K] [--allow-extra]\n", prog);
}

/* Parses a decimal integer in [lo, hi]. */
static int
parse_int(const char *s, long long lo, unsigned long long hi,
          unsigned long long *out)
{
	char *end;
	unsigned long long v;

	if (s[0] < '0' || s[0] > '9')
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < (unsigned long long)lo || v > hi)
		return 0;
	*out = v;
	return 1;
}

/* Stores the value of option `name` into a; SGRT_EUSAGE (with a message)
 * for an unknown option or a bad value. */
static int
set_option(SgrtArgs *a, const char *name, const char *val, char *err,
           size_t errlen)
{
	unsigned long long v = 0;

	if (!strcmp(name, "params")) a->params = val;
	else if (!strcmp(name, "inputs")) {
		if (a->ninputs == SGRT_MAX_INPUT_FILES) {
			snprintf(err, errlen, "at most %d --inputs files",
			         SGRT_MAX_INPUT_FILES);
			return SGRT_EUSAGE;
		}
		a->inputs[a->ninputs++] = val;
	}
	else if (!strcmp(name, "out")) a->out = val;
	else if (!strcmp(name, "trace")) a->trace = val;
	else if (!strcmp(name, "steps") || !strcmp(name, "bench") ||
	         !strcmp(name, "device")) {
		int bench = !strcmp(name, "bench");
		if (!parse_int(val, bench, name[0] == 'd' ? 1 << 16 : 1L << 40,
		               &v)) {
			snprintf(err, errlen, "--%s wants %s integer, not '%s'",
			         name, bench ? "a positive" : "a non-negative",
			         val);
			return SGRT_EUSAGE;
		}
		if (bench)
			a->bench = (long)v;
		else if (name[0] == 's')
			a->steps = (long)v;
		else
			a->device = (int)v;
	} else if (!strcmp(name, "seed")) {
		if (!parse_int(val, 0, UINT64_MAX, &v)) {
			snprintf(err, errlen, "--seed wants a non-negative "
			         "integer, not '%s'", val);
			return SGRT_EUSAGE;
		}
		a->seed = v;
	} else {
		snprintf(err, errlen, "unknown option '--%s'", name);
		return SGRT_EUSAGE;
	}
	return SGRT_OK;
}

/* Whether `name` is one of the options set_option takes a value for. */
static int
valued_option(const char *name)
{
	static const char *const names[] = {
		"params", "inputs", "out", "trace", "steps", "bench", "device", "seed",
	};
	for (size_t k = 0; k < sizeof names / sizeof *names; k++)
		if (!strcmp(name, names[k]))
			return 1;
	return 0;
}

int
sgrt_args_parse(SgrtArgs *a, int argc, char **argv, char *err, size_t errlen)
{
	int i;

	memset(a, 0, sizeof *a);
	a->steps = -1;
	a->device = -1;
	for (i = 1; i < argc; i++) {
		const char *arg = argv[i], *eq, *val;
		char name[32];
		size_t n;

		if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
			a->help = 1;
			continue;
		}
		if (!strcmp(arg, "--allow-extra")) {
			a->allow_extra = 1;
			continue;
		}
		if (strncmp(arg, "--", 2) != 0 || !arg[2]) {
			snprintf(err, errlen, "unexpected argument '%s'", arg);
			return SGRT_EUSAGE;
		}
		arg += 2;
		eq = strchr(arg, '=');
		n = eq ? (size_t)(eq - arg) : strlen(arg);
		if (n >= sizeof name) {
			snprintf(err, errlen, "unknown option '--%s'", arg);
			return SGRT_EUSAGE;
		}
		memcpy(name, arg, n);
		name[n] = 0;
		if (!valued_option(name)) { /* before wanting its value */
			snprintf(err, errlen, "unknown option '--%s'", name);
			return SGRT_EUSAGE;
		}
		if (eq)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else {
			snprintf(err, errlen, "option '--%s' needs a value", name);
			return SGRT_EUSAGE;
		}
		if (set_option(a, name, val, err, errlen))
			return SGRT_EUSAGE;
	}
	return SGRT_OK;
}

/* ------------------------------------------------------------------ tensors */

size_t
sgrt_tensor_bytes(const SgrtTensorDesc *t)
{
	size_t n = (size_t)sgrt_dtype_size(t->dtype);
	int i;

	for (i = 0; i < t->rank; i++)
		n *= (size_t)t->shape[i];
	return n;
}

/* Copies bytes from the host to tensor memory (device or pinned). */
static int
upload(SgrtModel *m, void *dst, const void *src, size_t bytes)
{
	if (bytes)
		SGRT_CHECK_CUDA(m, cudaMemcpy(dst, src, bytes, cudaMemcpyDefault),
		                0);
	return SGRT_OK;
}

/* Tensor t, absent from the npaths files (path: the last): initialised,
 * zeroed or an error. */
static int
load_missing(SgrtModel *m, const char *path, int npaths,
             const SgrtTensorDesc *t, void *dst, uint64_t seed)
{
	size_t bytes = sgrt_tensor_bytes(t);
	void *host;
	int rc;

	switch (t->role) {
	case SGRT_ROLE_INPUT:
		if (!path)
			return sgrt_fail(m, SGRT_EMISMATCH, -1, "missing input "
			                 "'%s' (no --inputs file)", t->name);
		if (npaths > 1)
			return sgrt_fail(m, SGRT_EMISMATCH, -1, "missing input "
			                 "'%s' (in none of the %d --inputs files)",
			                 t->name, npaths);
		return sgrt_fail(m, SGRT_EMISMATCH, -1, "%s: missing input '%s'",
		                 path, t->name);
	case SGRT_ROLE_STATE:
		if (strcmp(t->name, SGRT_RNG_STATE) == 0 && bytes == 2 * sizeof(int64_t)) {
			int64_t rng[2];
			sgrt_init_rng(seed, rng);
			return upload(m, dst, rng, bytes);
		}
		if (bytes)
			SGRT_CHECK_CUDA(m, cudaMemset(dst, 0, bytes), 0);
		return SGRT_OK;
	default:
		host = malloc(bytes ? bytes : 1);
		if (!host)
			return sgrt_fail(m, SGRT_ENOMEM, 0, "out of memory");
		sgrt_init_tensor(t->name, seed, t->dtype, t->rank, t->shape, host);
		rc = upload(m, dst, host, bytes);
		free(host);
		return rc;
	}
}

int
sgrt_load_tensors(SgrtModel *m, const char *path, const SgrtTensorDesc *t,
                  int n, void *const *ptr, int roles, uint64_t seed)
{
	return sgrt_load_tensors_from(m, &path, path ? 1 : 0, t, n, ptr, roles,
	                              seed);
}

int
sgrt_load_tensors_from(SgrtModel *m, const char *const *paths, int npaths,
                       const SgrtTensorDesc *t, int n, void *const *ptr,
                       int roles, uint64_t seed)
{
	SgrtSafetensors f[SGRT_MAX_INPUT_FILES];
	char err[SGRT_ERRLEN];
	const char **known = calloc(n ? n : 1, sizeof *known);
	const char **want = calloc(n ? n : 1, sizeof *want);
	const char **lack = calloc(n ? n : 1, sizeof *lack);
	const char *path = npaths ? paths[npaths - 1] : NULL; /* the last */
	size_t nwant = 0, nlack = 0, nstate = 0;
	int i, j, nread = 0, rc = SGRT_OK;

	memset(f, 0, sizeof f);
	if (npaths < 0 || npaths > SGRT_MAX_INPUT_FILES)
		rc = sgrt_fail(m, SGRT_EUSAGE, -1, "at most %d files",
		               SGRT_MAX_INPUT_FILES);
	else if (!known || !want || !lack)
		rc = sgrt_fail(m, SGRT_ENOMEM, 0, "out of memory");
	for (; nread < npaths && rc == SGRT_OK; nread++)
		if ((rc = sgrt_st_read(paths[nread], &f[nread], err, sizeof err)))
			rc = sgrt_fail(m, rc, -1, "%s", err);
	for (i = 0; i < n && rc == SGRT_OK; i++) {
		known[i] = t[i].name;
		if (ptr[i] && roles & (1 << t[i].role))
			want[nwant++] = t[i].name;
		/* the optimizer state, into lack[] until the files are checked */
		if (ptr[i] && t[i].role == SGRT_ROLE_STATE &&
		    (roles & (1 << SGRT_ROLE_STATE)))
			lack[nstate++] = t[i].name;
	}
	for (j = 0; j < npaths && rc == SGRT_OK; j++) {
		if (!(roles & SGRT_LOAD_ALLOW_EXTRA) &&
		    (rc = sgrt_st_check_extra(paths[j], &f[j], known, (size_t)n,
		                              want, nwant,
		                              "--allow-extra ignores them", err,
		                              sizeof err)))
			rc = sgrt_fail(m, rc, -1, "%s", err);
		if (rc == SGRT_OK && nstate &&
		    (rc = sgrt_st_check_state(paths[j], &f[j], lack, nstate,
		                              err, sizeof err)))
			rc = sgrt_fail(m, rc, -1, "%s", err);
	}
	for (i = 0; i < n && rc == SGRT_OK; i++) {
		const SgrtTensor *ft = NULL;
		if (!ptr[i] || !(roles & (1 << t[i].role)))
			continue;
		for (j = npaths - 1; j >= 0 && !ft; j--)
			ft = sgrt_st_find(&f[j], t[i].name);
		if (!ft && path && (t[i].role == SGRT_ROLE_PARAM ||
		                    t[i].role == SGRT_ROLE_CONST))
			lack[nlack++] = t[i].name;
		if (!ft)
			rc = load_missing(m, path, npaths, &t[i], ptr[i], seed);
		else if ((rc = sgrt_st_check(paths[j + 1], ft, t[i].dtype,
		                             t[i].rank, t[i].shape, err,
		                             sizeof err)))
			rc = sgrt_fail(m, rc, -1, "%s", err);
		else
			rc = upload(m, ptr[i], ft->data, ft->nbytes);
	}
	if (rc == SGRT_OK)
		sgrt_warn_missing("sgrt", path, lack, nlack, seed);
	for (j = 0; j < nread; j++)
		sgrt_st_free(&f[j]);
	free(known);
	free(want);
	free(lack);
	/* A pageable upload may still be in flight when cudaMemcpy returns,
	 * and the model's streams do not wait for the legacy stream. */
	if (rc == SGRT_OK)
		SGRT_CHECK_CUDA(m, cudaDeviceSynchronize(), 0);
	return rc;
}

/* 1 when tensor i is of a saved role: with memory, and not an input the
 * graph only reads. */
static int
savable(const SgrtTensorDesc *t, int i, void *const *ptr)
{
	return ptr[i] && (t[i].role != SGRT_ROLE_INPUT ||
	                  (t[i].flags & SGRT_TF_MUTATED));
}

typedef struct {
	const char *name;
	int i;
} NamedIndex;

/* qsort order: by name, then by index. */
static int
cmp_named_index(const void *a, const void *b)
{
	const NamedIndex *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->i > y->i) - (x->i < y->i);
}

int
sgrt_saved_set(const SgrtTensorDesc *t, int n, void *const *ptr, uint8_t *keep)
{
	NamedIndex *v = malloc((n ? n : 1) * sizeof *v);
	int i, k = 0;

	if (!v)
		return -1;
	memset(keep, 0, (size_t)n);
	for (i = 0; i < n; i++)
		if (savable(t, i, ptr))
			v[k++] = (NamedIndex){ t[i].name, i };
	qsort(v, (size_t)k, sizeof *v, cmp_named_index);
	for (i = 0; i < k; i++)
		keep[v[i].i] = !i || strcmp(v[i - 1].name, v[i].name) != 0;
	free(v);
	return 0;
}

/* Frees the host copies of the first n tensors. */
static void
free_copies(SgrtTensor *out, int n)
{
	int i;

	for (i = 0; i < n; i++)
		free(out[i].data);
	free(out);
}

int
sgrt_save_tensors(SgrtModel *m, const char *path, const SgrtTensorDesc *t,
                  int n, void *const *ptr)
{
	SgrtTensor *out = calloc(n ? n : 1, sizeof *out);
	uint8_t *keep = calloc(n ? n : 1, 1);
	char err[SGRT_ERRLEN];
	int i, k = 0, rc;

	if (!out || !keep || sgrt_saved_set(t, n, ptr, keep)) {
		free(out);
		free(keep);
		return sgrt_fail(m, SGRT_ENOMEM, 0, "out of memory");
	}
	rc = sgrt_check_cuda(m, cudaDeviceSynchronize(), "cudaDeviceSynchronize",
	                     0);
	for (i = 0; i < n && rc == SGRT_OK; i++) {
		SgrtTensor *o = &out[k];
		if (!keep[i])
			continue;
		o->name = (char *)t[i].name;
		o->dtype = t[i].dtype;
		o->rank = t[i].rank;
		memcpy(o->shape, t[i].shape, sizeof o->shape);
		o->nbytes = sgrt_tensor_bytes(&t[i]);
		o->data = malloc(o->nbytes ? o->nbytes : 1);
		k++;
		if (!o->data)
			rc = sgrt_fail(m, SGRT_ENOMEM, 0, "out of memory");
		else if (o->nbytes)
			rc = sgrt_check_cuda(m, cudaMemcpy(o->data, ptr[i], o->nbytes,
			                     cudaMemcpyDefault), "cudaMemcpy", 0);
	}
	if (rc == SGRT_OK &&
	    (rc = sgrt_st_write(path, out, (uint32_t)k, err, sizeof err)))
		rc = sgrt_fail(m, rc, -1, "%s", err);
	free_copies(out, k);
	free(keep);
	return rc;
}

/* ------------------------------------------------------------------ bench */

/* qsort order of floats. */
static int
cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

void
sgrt_median_min(float *ms, int n, double *median, double *min)
{
	qsort(ms, n, sizeof *ms, cmp_float);
	*min = ms[0];
	*median = n % 2 ? ms[n / 2] : 0.5 * ((double)ms[n / 2 - 1] + ms[n / 2]);
}

int
sgrt_bench_line(char *buf, size_t len, const char *graph, float *ms, int n,
                size_t peak_bytes, int kernels)
{
	double median, min;
	char name[512];
	size_t j = 0;
	int w;

	if (n < 1)
		return SGRT_EUSAGE;
	sgrt_median_min(ms, n, &median, &min);
	/* Graph names are identifiers; escape anyway. */
	for (; *graph && j + 3 < sizeof name; graph++) {
		if (*graph == '"' || *graph == '\\')
			name[j++] = '\\';
		name[j++] = (unsigned char)*graph < 0x20 ? '?' : *graph;
	}
	name[j] = 0;
	w = snprintf(buf, len, "{\"graph\": \"%s\", \"ms_median\": %.6f, "
	             "\"ms_min\": %.6f, \"peak_bytes\": %zu, \"kernels\": %d}",
	             name, median, min, peak_bytes, kernels);
	return w < 0 || (size_t)w >= len ? SGRT_EUSAGE : SGRT_OK;
}

/* ------------------------------------------------------------------ the driver */

/* One run of the driver: what sgrt_main sets up and tears down. */
typedef struct {
	const SgrtProgram *p;
	SgrtArgs a;
	const char *prog;
	int rank, world, local_rank;
	void *model;
	SgrtModel *m;
	cudaStream_t stream;
	cudaEvent_t *ext;
	void **io;
	void **owned;       /* io, with inputs and outputs left NULL */
	float *ms;
} Run;

/* Prints the model's error (or msg) to stderr; returns rc. */
static int
report(Run *r, int rc)
{
	const char *msg = r->m ? sgrt_last_error(r->m) : "";

	if (rc == SGRT_OK)
		return rc;
	fprintf(stderr, "%s: %s\n", r->prog, msg[0] ? msg : "failed");
	if (rc == SGRT_ECUDA && !getenv("SGRT_SYNC"))
		fprintf(stderr, "%s: note: run with SGRT_SYNC=1 to report an "
		        "asynchronous fault at the statement that caused it\n",
		        r->prog);
	return rc;
}

/* Allocates the inputs and outputs (zeroed) and collects every tensor's
 * address into r->io. */
static int
bind(Run *r)
{
	const SgrtProgram *p = r->p;
	int i;

	r->io = calloc(p->ntensors ? p->ntensors : 1, sizeof *r->io);
	r->owned = calloc(p->ntensors ? p->ntensors : 1, sizeof *r->owned);
	if (!r->io || !r->owned)
		return sgrt_fail(r->m, SGRT_ENOMEM, 0, "out of memory");
	for (i = 0; i < p->ntensors; i++) {
		const SgrtTensorDesc *t = &p->tensors[i];
		size_t bytes = sgrt_tensor_bytes(t);
		if (t->role != SGRT_ROLE_INPUT && t->role != SGRT_ROLE_OUTPUT) {
			r->io[i] = r->owned[i] = p->tensor(r->model, i);
			if (!r->io[i])
				return sgrt_fail(r->m, SGRT_EUSAGE, -1, "the model "
				                 "has no memory for '%s'", t->name);
			continue;
		}
		if (t->flags & SGRT_TF_HOST)
			SGRT_TRY(sgrt_check_cuda(r->m, cudaMallocHost(&r->io[i],
			         bytes ? bytes : 1), "cudaMallocHost", 0));
		else
			SGRT_TRY(sgrt_check_cuda(r->m, cudaMalloc(&r->io[i],
			         bytes ? bytes : 1), "cudaMalloc", 0));
		if (t->flags & SGRT_TF_HOST)
			memset(r->io[i], 0, bytes);
		else
			SGRT_TRY(sgrt_check_cuda(r->m, cudaMemset(r->io[i], 0,
			         bytes), "cudaMemset", 0));
	}
	return SGRT_OK;
}

/* Frees what bind allocated. */
static void
unbind(Run *r)
{
	int i;

	for (i = 0; r->io && i < r->p->ntensors; i++) {
		const SgrtTensorDesc *t = &r->p->tensors[i];
		if (!r->io[i] || r->owned[i])
			continue;
		if (t->flags & SGRT_TF_HOST)
			(void)cudaFreeHost(r->io[i]);
		else
			(void)cudaFree(r->io[i]);
	}
	free(r->io);
	free(r->owned);
}

/* 1 when this rank writes files named by path. */
static int
writes(const Run *r, const char *path)
{
	return r->rank == 0 || strstr(path, "{rank}") != NULL;
}

/* Loads params (and friends) and inputs. */
static int
load(Run *r)
{
	const SgrtProgram *p = r->p;
	char path[4096], ipath[SGRT_MAX_INPUT_FILES][4096];
	const char *ip[SGRT_MAX_INPUT_FILES];
	int k, rc;

	if (r->a.params &&
	    sgrt_path_for_rank(path, sizeof path, r->a.params, r->rank))
		return sgrt_fail(r->m, SGRT_EUSAGE, -1, "--params path too long");
	rc = sgrt_load_tensors(r->m, r->a.params ? path : NULL, p->tensors,
	                       p->ntensors, r->owned, SGRT_ROLES_OWNED |
	                       (r->a.allow_extra ? SGRT_LOAD_ALLOW_EXTRA : 0),
	                       r->a.seed);
	if (rc)
		return rc;
	for (k = 0; k < r->a.ninputs; k++) {
		if (sgrt_path_for_rank(ipath[k], sizeof ipath[k], r->a.inputs[k],
		                       r->rank))
			return sgrt_fail(r->m, SGRT_EUSAGE, -1,
			                 "--inputs path too long");
		ip[k] = ipath[k];
	}
	return sgrt_load_tensors_from(r->m, ip, r->a.ninputs, p->tensors,
	                              p->ntensors, r->io, SGRT_ROLES_INPUTS |
	                              (r->a.allow_extra ? SGRT_LOAD_ALLOW_EXTRA :
	                               0), 0);
}

/* Issues one call (traced or not). */
static int
issue(Run *r, int traced)
{
	int rc;

	sgrt_trace_enable(r->m, traced);
	rc = r->p->call(r->model, r->stream, r->io, r->ext);
	sgrt_trace_enable(r->m, 0);
	return rc;
}

/* The host waits on every extern event, then on the stream. */
static int
finish(Run *r)
{
	int j;

	for (j = 0; j < r->p->nextern_events; j++)
		SGRT_TRY(sgrt_check_cuda(r->m, cudaEventSynchronize(r->ext[j]),
		         "cudaEventSynchronize", 0));
	return sgrt_check_cuda(r->m, cudaStreamSynchronize(r->stream),
	                       "cudaStreamSynchronize", 0);
}

/* Writes the trace of the call just made. */
static int
write_trace(Run *r)
{
	char path[4096];

	if (!writes(r, r->a.trace))
		return SGRT_OK;
	if (sgrt_path_for_rank(path, sizeof path, r->a.trace, r->rank))
		return sgrt_fail(r->m, SGRT_EUSAGE, -1, "--trace path too long");
	return sgrt_trace_write(r->m, path);
}

/* n untimed calls; the last one traced when `traced`. */
static int
calls(Run *r, long n, int traced)
{
	long k;

	for (k = 0; k < n; k++) {
		int t = traced && k == n - 1;
		SGRT_TRY(issue(r, t));
		SGRT_TRY(finish(r));
		if (t)
			SGRT_TRY(write_trace(r));
	}
	return SGRT_OK;
}

/* One call timed by events on the caller's stream. */
static int
timed_call(Run *r, cudaEvent_t *ev, float *ms)
{
	SGRT_TRY(sgrt_check_cuda(r->m, cudaEventRecord(ev[0], r->stream),
	         "cudaEventRecord", 0));
	SGRT_TRY(issue(r, 0));
	SGRT_TRY(sgrt_check_cuda(r->m, cudaEventRecord(ev[1], r->stream),
	         "cudaEventRecord", 0));
	SGRT_TRY(finish(r));
	return sgrt_check_cuda(r->m, cudaEventElapsedTime(ms, ev[0], ev[1]),
	                       "cudaEventElapsedTime", 0);
}

/* --bench: warm-up calls (the last traced when trace_warmup), then
 * r->a.bench timed calls, and the JSON line. */
static int
bench(Run *r, int trace_warmup)
{
	const char *w = getenv("SGRT_BENCH_WARMUP");
	long warm = w && w[0] && atol(w) > 0 ? atol(w) : 3, k;
	cudaEvent_t ev[2] = { NULL, NULL };
	char line[1024];
	int rc;

	SGRT_TRY(calls(r, warm, trace_warmup));
	r->ms = calloc(r->a.bench, sizeof *r->ms);
	if (!r->ms)
		return sgrt_fail(r->m, SGRT_ENOMEM, 0, "out of memory");
	rc = sgrt_check_cuda(r->m, cudaEventCreate(&ev[0]), "cudaEventCreate", 0);
	if (!rc)
		rc = sgrt_check_cuda(r->m, cudaEventCreate(&ev[1]),
		                     "cudaEventCreate", 0);
	for (k = 0; k < r->a.bench && rc == SGRT_OK; k++)
		rc = timed_call(r, ev, &r->ms[k]);
	if (ev[0])
		(void)cudaEventDestroy(ev[0]);
	if (ev[1])
		(void)cudaEventDestroy(ev[1]);
	if (rc)
		return rc;
	sgrt_bench_line(line, sizeof line, r->p->graph, r->ms, (int)r->a.bench,
	                sgrt_peak_bytes(r->m), sgrt_kernel_count(r->m));
	if (r->rank == 0) {
		printf("%s\n", line);
		fflush(stdout);
	}
	return SGRT_OK;
}

/* Writes --out. After no call at all (--steps 0 without --bench) there
 * are no returned values: the file holds the params, consts, optimizer
 * state and inputs as loaded, not the zeros of unwritten buffers. */
static int
save(Run *r, int called)
{
	char path[4096];
	void **io = r->io;
	int i, rc;

	if (!r->a.out || !writes(r, r->a.out))
		return SGRT_OK;
	if (sgrt_path_for_rank(path, sizeof path, r->a.out, r->rank))
		return sgrt_fail(r->m, SGRT_EUSAGE, -1, "--out path too long");
	if (!called) {
		io = calloc(r->p->ntensors ? r->p->ntensors : 1, sizeof *io);
		if (!io)
			return sgrt_fail(r->m, SGRT_ENOMEM, 0, "out of memory");
		for (i = 0; i < r->p->ntensors; i++)
			if (r->p->tensors[i].role != SGRT_ROLE_OUTPUT)
				io[i] = r->io[i];
	}
	rc = sgrt_save_tensors(r->m, path, r->p->tensors, r->p->ntensors, io);
	if (io != r->io)
		free(io);
	return rc;
}

/* The caller's stream and the extern events. */
static int
make_stream(Run *r)
{
	int j, n = r->p->nextern_events;

	SGRT_TRY(sgrt_check_cuda(r->m, cudaStreamCreateWithFlags(&r->stream,
	         cudaStreamNonBlocking), "cudaStreamCreateWithFlags", 0));
	r->ext = calloc(n ? n : 1, sizeof *r->ext);
	if (!r->ext)
		return sgrt_fail(r->m, SGRT_ENOMEM, 0, "out of memory");
	for (j = 0; j < n; j++)
		SGRT_TRY(sgrt_check_cuda(r->m, cudaEventCreateWithFlags(&r->ext[j],
		         cudaEventDisableTiming), "cudaEventCreateWithFlags", 0));
	return SGRT_OK;
}

/* Everything after the model exists. */
static int
run(Run *r)
{
	long nsteps = r->a.steps >= 0 ? r->a.steps : (r->a.bench ? 0 : 1);

	SGRT_TRY(make_stream(r));
	SGRT_TRY(bind(r));
	SGRT_TRY(load(r));
	SGRT_TRY(calls(r, nsteps, r->a.trace != NULL));
	if (r->a.bench)
		SGRT_TRY(bench(r, r->a.trace && nsteps == 0));
	return save(r, nsteps > 0 || r->a.bench > 0);
}

/* Frees what run made, then the model. */
static void
teardown(Run *r)
{
	int j;

	if (r->stream)
		(void)cudaStreamSynchronize(r->stream);
	unbind(r);
	for (j = 0; r->ext && j < r->p->nextern_events; j++)
		if (r->ext[j])
			(void)cudaEventDestroy(r->ext[j]);
	free(r->ext);
	free(r->ms);
	if (r->stream)
		(void)cudaStreamDestroy(r->stream);
	if (r->model)
		r->p->destroy(r->model);
}

int
sgrt_main(int argc, char **argv, const SgrtProgram *p)
{
	char err[SGRT_ERRLEN];
	Run r;
	int rc, device;

	memset(&r, 0, sizeof r);
	r.p = p;
	r.prog = argc > 0 && argv[0] ? argv[0] : p->graph;
	if (sgrt_args_parse(&r.a, argc, argv, err, sizeof err) ||
	    sgrt_env_ranks(&r.rank, &r.world, &r.local_rank, err, sizeof err)) {
		fprintf(stderr, "%s: %s\n", r.prog, err);
		sgrt_usage(stderr, r.prog);
		return SGRT_EUSAGE;
	}
	if (r.a.help) {
		sgrt_usage(stdout, r.prog);
		return SGRT_OK;
	}
	device = r.a.device >= 0 ? r.a.device : r.local_rank;
	rc = p->create(&r.model, device);
	r.m = r.model ? p->runtime(r.model) : NULL;
	if (rc == SGRT_OK && !r.m)
		rc = SGRT_ENOMEM;
	if (rc == SGRT_OK)
		rc = run(&r);
	report(&r, rc);
	teardown(&r);
	return rc;
}
