/*
 * sgrt_symm.c - collectives over symmetric memory: the one-shot
 * all-reduce of algo="oneshot" and the copy-engine all-gather of
 * algo="ce", and their fallback to the plain collectives of sgrt_nccl.c.
 * sgrt_symm_dev.cu holds what needs nvcc (the kernels and NCCL's device
 * API); this file decides when it runs and owns the memory.
 *
 * A model's symmetric memory is set up at its first ONESHOT or CE
 * collective (or sgrt_symm_reserve): a device communicator with
 * SGRT_SYMM_CTAS LSA barriers per stream, then, per stream, a buffer from
 * ncclMemAlloc registered as a symmetric window
 * (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC), grown when a larger
 * collective comes.  A stream's collectives are ordered on it, so one
 * buffer and one range of barriers per stream is enough; two streams
 * never share either.  Every step that ranks must take together is
 * followed by an agreement (an all-reduce of "it worked here" with MIN on
 * a private stream), so that all ranks fall back together or none does.
 *
 * The fallback is the plain collective, taken with one rank, with
 * SGRT_SYMM=0, inside an NCCL group, for a dtype or op the kernel does not
 * do, while a CUDA graph is being captured before anything was set up,
 * and when the device API, the LSA team or a window is unavailable.
 * SGRT_SYMM_DEBUG=1 prints each kind of fallback once per model;
 * sgrt_symm_active says the model-wide reason.  SGRT_SYMM=force sets
 * symmetric memory up even with one rank (to test it on one GPU).
 */
#include <stdlib.h>
#include <string.h>

#ifdef SGRT_HAVE_NCCL
#include <nccl.h>
#endif

#include "sgrt_impl.h"

#if defined(SGRT_HAVE_NCCL) && defined(SGRT_HAVE_SYMM_DEV)
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define SYMM 1
#endif
#endif

enum { SYMM_UNTRIED, SYMM_ON, SYMM_OFF };

/* Kinds of fallback, each said once per model under SGRT_SYMM_DEBUG. */
enum {
	SAY_OFF_AR = 1,     /* symmetric memory is off: an all_reduce */
	SAY_OFF_AG = 2,     /* ... an all_gather */
	SAY_CALL_AR = 4,    /* this all_reduce cannot (dtype, op, group) */
	SAY_CALL_AG = 8,    /* this all_gather cannot */
	SAY_ON = 16,        /* symmetric memory came up */
};

/* One stream's symmetric buffer. */
typedef struct {
	void *buf;          /* ncclMemAlloc'd; NULL: none yet */
	size_t bytes;
	void *win;          /* its ncclWindow_t */
	void **peer;        /* [world]: each rank's buf, mapped here */
} SymmBuf;

typedef struct {
	int state;          /* SYMM_* */
	char why[256];      /* SYMM_OFF: why */
	int said;           /* SAY_* bits */
	void *devcomm;      /* ncclDevComm (sgrt_symm_dev.cu) */
	SymmBuf *buf;       /* [nstreams], once on */
	cudaStream_t setup; /* agreements and peer look-ups */
	int *flag;          /* device int of the agreements */
} SgrtSymm;

/* ------------------------------------------------------------------ common */

int
sgrt_algo_from_name(const char *name)
{
	static const char *const names[] = { "auto", "ring", "oneshot", "ce" };
	int i;

	for (i = 0; name && i < 4; i++)
		if (strcmp(name, names[i]) == 0)
			return i;
	return -1;
}

/* The model's state, made on first use; NULL when out of memory. */
static SgrtSymm *
symm_of(SgrtModel *m)
{
	if (!m->symm)
		m->symm = calloc(1, sizeof(SgrtSymm));
	return m->symm;
}

/* Turns symmetric memory off for the model, saying why. */
static void
symm_off(SgrtSymm *sy, const char *why)
{
	sy->state = SYMM_OFF;
	snprintf(sy->why, sizeof sy->why, "%s", why);
}

/* Says `what` on stderr once per model and kind, under SGRT_SYMM_DEBUG. */
static void
say_once(SgrtModel *m, SgrtSymm *sy, int kind, const char *what)
{
	const char *v = getenv("SGRT_SYMM_DEBUG");

	if (sy->said & kind)
		return;
	sy->said |= kind;
	if (v && v[0] && strcmp(v, "0") != 0)
		fprintf(stderr, "sgrt: rank %d: %s\n", m->rank, what);
}

/* Says that coll with algo runs as the plain collective, and why (nothing
 * when coll is NULL). */
static void
say_fallback(SgrtModel *m, SgrtSymm *sy, int kind, const char *coll,
             const char *algo, const char *why)
{
	char msg[512];

	if (!coll)
		return;
	snprintf(msg, sizeof msg, "%s algo=\"%s\" runs as the plain %s: %s",
	         coll, algo, coll, why);
	say_once(m, sy, kind, msg);
}

int
sgrt_symm_active(const SgrtModel *m, const char **why)
{
	const SgrtSymm *sy = m ? m->symm : NULL;
	const char *w;

	if (!sy || sy->state == SYMM_UNTRIED)
		w = "not set up yet (no oneshot or ce collective so far)";
	else if (sy->state == SYMM_OFF)
		w = sy->why;
	else
		w = "";
	if (why)
		*why = w;
	return sy && sy->state == SYMM_ON;
}

#ifdef SYMM

/* ------------------------------------------------------------------ set-up */

/* SGRT_SYMM: 0 (off), 1 (default), 2 (force, even with one rank). */
static int
symm_mode(void)
{
	const char *v = getenv("SGRT_SYMM");

	if (!v || !v[0])
		return 1;
	if (strcmp(v, "0") == 0 || strcmp(v, "off") == 0)
		return 0;
	return strcmp(v, "force") == 0 ? 2 : 1;
}

/* *all: whether ok held on every rank (MIN over ranks, on the private
 * stream; the host waits). */
static int
agree(SgrtModel *m, SgrtSymm *sy, int ok, int *all, int sgline)
{
	int v = ok != 0;

	SGRT_CHECK_CUDA(m, cudaMemcpyAsync(sy->flag, &v, sizeof v,
	                cudaMemcpyHostToDevice, sy->setup), sgline);
	SGRT_CHECK_NCCL(m, ncclAllReduce(sy->flag, sy->flag, 1, ncclInt32,
	                ncclMin, (ncclComm_t)m->comm, sy->setup), sgline);
	SGRT_CHECK_CUDA(m, cudaMemcpyAsync(&v, sy->flag, sizeof v,
	                cudaMemcpyDeviceToHost, sy->setup), sgline);
	SGRT_CHECK_CUDA(m, cudaStreamSynchronize(sy->setup), sgline);
	*all = v;
	return SGRT_OK;
}

/* 1 when the libnccl loaded is one the device code may run with: the one
 * it was built against (2.28's device structures changed from release to
 * release), or a newer one from 2.29 on; else 0 and why. */
static int
nccl_matches(char *why, size_t len)
{
	int rt = 0, hdr = sgrt_symm_dev_version();

	if (ncclGetVersion(&rt) != ncclSuccess)
		rt = 0;
	if (rt == hdr || (hdr >= NCCL_VERSION(2, 29, 0) && rt >= hdr))
		return 1;
	snprintf(why, len, "libnccl %d.%d.%d is not the NCCL %d.%d.%d that "
	         "libsgrt's device code was built against", rt / 10000,
	         rt / 100 % 100, rt % 100, hdr / 10000, hdr / 100 % 100,
	         hdr % 100);
	return 0;
}

/* 1 when stream s is being captured into a CUDA graph (nothing may wait
 * for the device then). */
static int
capturing(SgrtModel *m, int s)
{
	enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;

	if (!m->stream[s])
		return 0;
	(void)cudaStreamIsCapturing(m->stream[s], &st);
	return st != cudaStreamCaptureStatusNone;
}

/* What keeps this rank from symmetric memory before anything collective
 * is tried (NULL: nothing). */
static const char *
local_obstacle(char *buf, size_t len)
{
	if (symm_mode() == 0)
		return "SGRT_SYMM=0";
	if (sgrt_symm_dev_version() == 0)
		return "the NCCL libsgrt was built against has no device API "
		       "(NCCL >= 2.28)";
	if (!nccl_matches(buf, len))
		return buf;
	return NULL;
}

/* The device communicator, once every rank may try: its LSA team must
 * hold every rank.  Sets sy->state. */
static int
make_devcomm(SgrtModel *m, SgrtSymm *sy, int sgline)
{
	char buf[256];
	const char *why = NULL;
	int lsa = 0, all, r;

	r = sgrt_symm_dev_create(m->comm, m->nstreams * SGRT_SYMM_CTAS,
	                         &sy->devcomm, &lsa);
	if (r != ncclSuccess) {
		/* NCCL's own words ("Communicator does not support symmetric
		 * memory!"), which it keeps even without NCCL_DEBUG. */
		const char *detail = ncclGetLastError(NULL);
		snprintf(buf, sizeof buf, "ncclDevCommCreate failed: %s%s%s",
		         ncclGetErrorString((ncclResult_t)r),
		         detail && detail[0] ? ": " : "", detail ? detail : "");
		why = buf;
	} else if (lsa != m->world) {
		snprintf(buf, sizeof buf, "only %d of the %d ranks are load/store "
		         "accessible (NCCL's LSA team)", lsa, m->world);
		why = buf;
	}
	SGRT_TRY(agree(m, sy, !why, &all, sgline));
	if (!all) {
		(void)sgrt_symm_dev_destroy(m->comm, sy->devcomm);
		sy->devcomm = NULL;
		symm_off(sy, why ? why : "symmetric memory failed on another rank");
		return SGRT_OK;
	}
	sy->buf = calloc((size_t)m->nstreams, sizeof *sy->buf);
	if (!sy->buf)
		return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of host memory");
	sy->state = SYMM_ON;
	return SGRT_OK;
}

/* Sets symmetric memory up, or decides that it is off (sy->state), at a
 * collective on stream s.  Leaves it untried during a capture. */
static int
symm_setup(SgrtModel *m, SgrtSymm *sy, int s, int sgline)
{
	char buf[256], msg[320];
	const char *why;
	int all;

	if (sy->state != SYMM_UNTRIED)
		return SGRT_OK;
	if (!m->comm) {
		symm_off(sy, "no NCCL communicator (sgrt_nccl_init was not "
		         "called)");
		return SGRT_OK;
	}
	if (m->world == 1 && symm_mode() != 2) {
		symm_off(sy, "one rank (WORLD_SIZE=1)");
		return SGRT_OK;
	}
	if (capturing(m, s))
		return SGRT_OK;
	why = local_obstacle(buf, sizeof buf);
	/* Off for good if a step below fails (its error ends the call). */
	symm_off(sy, "setting symmetric memory up failed");
	SGRT_CHECK_CUDA(m, cudaStreamCreateWithFlags(&sy->setup,
	                cudaStreamNonBlocking), sgline);
	SGRT_CHECK_CUDA(m, cudaMalloc((void **)&sy->flag, sizeof *sy->flag),
	                sgline);
	SGRT_TRY(agree(m, sy, !why, &all, sgline));
	if (!all) {
		symm_off(sy, why ? why : "another rank cannot use symmetric "
		         "memory");
		return SGRT_OK;
	}
	SGRT_TRY(make_devcomm(m, sy, sgline));
	if (sy->state == SYMM_ON) {
		snprintf(msg, sizeof msg, "symmetric memory on: NCCL device API, "
		         "%d load/store accessible ranks", m->world);
		say_once(m, sy, SAY_ON, msg);
	}
	return SGRT_OK;
}

/* ------------------------------------------------------------------ buffers */

/* Deregisters and frees one stream's buffer (nothing may use it). */
static void
drop_buf(SgrtModel *m, SymmBuf *b)
{
	if (!b->buf)
		return;
	(void)ncclCommWindowDeregister((ncclComm_t)m->comm,
	                               (ncclWindow_t)b->win);
	(void)ncclMemFree(b->buf);
	sgrt_mem_account(m, -(long long)b->bytes);
	free(b->peer);
	memset(b, 0, sizeof *b);
}

/* A new buffer of `bytes` for b, registered on every rank, with the
 * peers' addresses; turns symmetric memory off when a rank fails. */
static int
new_buf(SgrtModel *m, SgrtSymm *sy, SymmBuf *b, size_t bytes, int sgline)
{
	char why[256];
	void *p = NULL;
	ncclWindow_t win = NULL;
	int all, r;

	r = ncclMemAlloc(&p, bytes);
	SGRT_TRY(agree(m, sy, r == ncclSuccess, &all, sgline));
	if (!all) {
		if (r == ncclSuccess)
			(void)ncclMemFree(p);
		snprintf(why, sizeof why, "ncclMemAlloc of %zu bytes failed%s",
		         bytes, r == ncclSuccess ? " on another rank" : "");
		symm_off(sy, why);
		return SGRT_OK;
	}
	r = ncclCommWindowRegister((ncclComm_t)m->comm, p, bytes, &win,
	                           NCCL_WIN_COLL_SYMMETRIC);
	SGRT_TRY(agree(m, sy, r == ncclSuccess, &all, sgline));
	if (!all) {
		if (r == ncclSuccess)
			(void)ncclCommWindowDeregister((ncclComm_t)m->comm, win);
		(void)ncclMemFree(p);
		snprintf(why, sizeof why, "ncclCommWindowRegister failed%s",
		         r == ncclSuccess ? " on another rank" : "");
		symm_off(sy, why);
		return SGRT_OK;
	}
	b->buf = p;
	b->bytes = bytes;
	b->win = win;
	sgrt_mem_account(m, (long long)bytes);
	b->peer = calloc((size_t)m->world, sizeof *b->peer);
	if (!b->peer)
		return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of host memory");
	SGRT_CHECK_CUDA(m, (cudaError_t)sgrt_symm_dev_lsa_ptrs(win, m->world,
	                b->peer, sy->setup), sgline);
	return SGRT_OK;
}

/* Makes stream s's buffer hold at least `bytes`; *ready when it does (not
 * while capturing: growing waits for the device). */
static int
grow(SgrtModel *m, SgrtSymm *sy, int s, size_t bytes, int *ready,
     int sgline)
{
	SymmBuf *b = &sy->buf[s];
	size_t want = b->bytes * 2 > bytes ? b->bytes * 2 : bytes;

	*ready = b->bytes >= bytes;
	if (*ready || capturing(m, s))
		return SGRT_OK;
	/* Whole MiB: fewer sizes, fewer re-registrations. */
	want = (want + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
	if (b->buf) {
		/* Uses of the old buffer may be queued on any stream that was
		 * `default`: wait for the device. */
		SGRT_CHECK_CUDA(m, cudaDeviceSynchronize(), sgline);
		drop_buf(m, b);
	}
	SGRT_TRY(new_buf(m, sy, b, want, sgline));
	*ready = sy->state == SYMM_ON && b->bytes >= bytes;
	return SGRT_OK;
}

/* Whether a symmetric collective of `bytes` runs on stream s now (*on),
 * setting up and growing as needed; `call_why` is the call's own reason
 * not to (NULL: none). */
static int
gate(SgrtModel *m, int s, size_t bytes, const char *coll, const char *algo,
     const char *call_why, int *on, int sgline)
{
	int ag = coll && strcmp(coll, "all_gather") == 0;
	SgrtSymm *sy = symm_of(m);

	*on = 0;
	if (!sy)
		return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of host memory");
	if (s < 0 || s >= m->nstreams || bytes == 0)
		return SGRT_OK;    /* the plain collective reports or skips */
	if (!call_why && m->group_depth > 0)
		call_why = "inside an NCCL group";
	if (call_why) {
		say_fallback(m, sy, ag ? SAY_CALL_AG : SAY_CALL_AR, coll, algo,
		             call_why);
		return SGRT_OK;
	}
	SGRT_TRY(symm_setup(m, sy, s, sgline));
	if (sy->state == SYMM_ON)
		SGRT_TRY(grow(m, sy, s, bytes, on, sgline));
	if (sy->state == SYMM_OFF)
		say_fallback(m, sy, ag ? SAY_OFF_AG : SAY_OFF_AR, coll, algo,
		             sy->why);
	else if (!*on)
		say_fallback(m, sy, ag ? SAY_CALL_AG : SAY_CALL_AR, coll, algo,
		             "a CUDA graph capture came before sgrt_symm_reserve "
		             "had set up a large enough buffer");
	return SGRT_OK;
}

/* ------------------------------------------------------------------ the collectives */

/* The one-shot all-reduce kernel on stream s, traced as a collective. */
static int
oneshot(SgrtModel *m, int s, const void *send, void *recv, size_t count,
        int dtype, int op, const char *name, int sgline)
{
	SgrtSymm *sy = m->symm;
	int h = sgrt_op_begin(m, s, SGRT_OP_COLLECTIVE,
	                      name ? name : "all_reduce", sgline);
	int e = sgrt_symm_dev_oneshot(sy->devcomm, sy->buf[s].win, send, recv,
	                              count, dtype, op, s * SGRT_SYMM_CTAS,
	                              m->stream[s]);

	if (e != cudaSuccess)
		return sgrt_check_cuda(m, (cudaError_t)e, "k_oneshot", sgline);
	return sgrt_op_end(m, h);
}

/* The copy-engine all-gather on stream s: this rank's block into its
 * window; an LSA barrier (every block is in place); each block copied
 * from its rank's window into recv, this rank's first; a barrier (every
 * rank is done reading this one's window before anything rewrites it). */
static int
ce_all_gather(SgrtModel *m, int s, const void *send, void *recv,
              size_t bytes, const char *name, int sgline)
{
	SgrtSymm *sy = m->symm;
	SymmBuf *b = &sy->buf[s];
	cudaStream_t st = m->stream[s];
	int h = sgrt_op_begin(m, s, SGRT_OP_COLLECTIVE,
	                      name ? name : "all_gather", sgline);
	int j;

	SGRT_CHECK_CUDA(m, cudaMemcpyAsync(b->buf, send, bytes,
	                cudaMemcpyDefault, st), sgline);
	SGRT_CHECK_CUDA(m, (cudaError_t)sgrt_symm_dev_barrier(sy->devcomm,
	                s * SGRT_SYMM_CTAS, st), sgline);
	for (j = 0; j < m->world; j++) {
		int p = (m->rank + j) % m->world;
		char *dst = (char *)recv + (size_t)p * bytes;
		const void *src = p == m->rank ? send : b->peer[p];
		if (src != dst)
			SGRT_CHECK_CUDA(m, cudaMemcpyAsync(dst, src, bytes,
			                cudaMemcpyDefault, st), sgline);
	}
	SGRT_CHECK_CUDA(m, (cudaError_t)sgrt_symm_dev_barrier(sy->devcomm,
	                s * SGRT_SYMM_CTAS, st), sgline);
	return sgrt_op_end(m, h);
}

void
sgrt_symm_release(SgrtModel *m)
{
	SgrtSymm *sy = m->symm;
	int i, any = 0;

	if (!sy)
		return;
	for (i = 0; sy->buf && i < m->nstreams; i++)
		any |= sy->buf[i].buf != NULL;
	/* The caller's streams may still be using a buffer. */
	if (any)
		(void)cudaDeviceSynchronize();
	for (i = 0; sy->buf && i < m->nstreams; i++)
		drop_buf(m, &sy->buf[i]);
	if (sy->devcomm)
		(void)sgrt_symm_dev_destroy(m->comm, sy->devcomm);
	if (sy->flag)
		(void)cudaFree(sy->flag);
	if (sy->setup)
		(void)cudaStreamDestroy(sy->setup);
	free(sy->buf);
	free(sy);
	m->symm = NULL;
}

#else /* !SYMM: every collective is the plain one */

/* Decides, once, that symmetric memory is off, and says so. */
static int
gate(SgrtModel *m, int s, size_t bytes, const char *coll, const char *algo,
     const char *call_why, int *on, int sgline)
{
	int ag = coll && strcmp(coll, "all_gather") == 0;
	SgrtSymm *sy = symm_of(m);

	(void)s;
	(void)bytes;
	*on = 0;
	if (!sy)
		return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of host memory");
	if (!call_why && m->group_depth > 0)
		call_why = "inside an NCCL group";
	if (call_why) {
		say_fallback(m, sy, ag ? SAY_CALL_AG : SAY_CALL_AR, coll, algo,
		             call_why);
		return SGRT_OK;
	}
	if (sy->state == SYMM_UNTRIED) {
#ifdef SGRT_HAVE_NCCL
		symm_off(sy, "libsgrt was built without NCCL's device API (it "
		         "needs NCCL >= 2.28 and nvcc)");
#else
		symm_off(sy, "libsgrt was built without NCCL");
#endif
	}
	say_fallback(m, sy, ag ? SAY_OFF_AG : SAY_OFF_AR, coll, algo, sy->why);
	return SGRT_OK;
}

/* Never called: gate never lets a collective through. */
static int
oneshot(SgrtModel *m, int s, const void *send, void *recv, size_t count,
        int dtype, int op, const char *name, int sgline)
{
	return sgrt_all_reduce(m, s, send, recv, count, dtype, op, name,
	                       sgline);
}

/* Never called either. */
static int
ce_all_gather(SgrtModel *m, int s, const void *send, void *recv,
              size_t bytes, const char *name, int sgline)
{
	(void)s; (void)send; (void)recv; (void)bytes; (void)name;
	return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline, "no symmetric memory");
}

void
sgrt_symm_release(SgrtModel *m)
{
	free(m->symm);
	m->symm = NULL;
}

#endif /* SYMM */

/* ------------------------------------------------------------------ entry points */

/* Why the one-shot kernel cannot do this all-reduce (NULL: it can). */
static const char *
oneshot_cannot(int dtype, int op)
{
	if (dtype != SGRT_F32 && dtype != SGRT_F16 && dtype != SGRT_BF16)
		return "the one-shot kernel does f32, f16 and bf16 only";
	if (op != SGRT_RED_SUM && op != SGRT_RED_AVG && op != SGRT_RED_MAX &&
	    op != SGRT_RED_MIN)
		return "the one-shot kernel does sum, avg, max and min only";
	return NULL;
}

int
sgrt_all_reduce_algo(SgrtModel *m, int s, const void *send, void *recv,
                     size_t count, int dtype, int op, int algo,
                     const char *name, int sgline)
{
	int on = 0;

	if (algo < SGRT_ALGO_AUTO || algo > SGRT_ALGO_CE)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no collective algo %d",
		                 algo);
	if (algo == SGRT_ALGO_ONESHOT || algo == SGRT_ALGO_CE)
		SGRT_TRY(gate(m, s, count * sgrt_coll_dtype_size(dtype),
		              "all_reduce", algo == SGRT_ALGO_CE ? "ce" : "oneshot",
		              algo == SGRT_ALGO_CE ?
		                  "ce is an all_gather algorithm" :
		                  oneshot_cannot(dtype, op), &on, sgline));
	if (!on)
		return sgrt_all_reduce(m, s, send, recv, count, dtype, op, name,
		                       sgline);
	return oneshot(m, s, send, recv, count, dtype, op, name, sgline);
}

int
sgrt_all_gather_algo(SgrtModel *m, int s, const void *send, void *recv,
                     size_t sendcount, int dtype, int algo,
                     const char *name, int sgline)
{
	size_t bytes = sendcount * sgrt_coll_dtype_size(dtype);
	int on = 0;

	if (algo < SGRT_ALGO_AUTO || algo > SGRT_ALGO_CE)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no collective algo %d",
		                 algo);
	if (algo == SGRT_ALGO_ONESHOT || algo == SGRT_ALGO_CE)
		SGRT_TRY(gate(m, s, bytes, "all_gather",
		              algo == SGRT_ALGO_CE ? "ce" : "oneshot",
		              algo == SGRT_ALGO_ONESHOT ?
		                  "oneshot is an all_reduce algorithm" : NULL,
		              &on, sgline));
	if (!on)
		return sgrt_all_gather(m, s, send, recv, sendcount, dtype, name,
		                       sgline);
	return ce_all_gather(m, s, send, recv, bytes, name, sgline);
}

int
sgrt_symm_reserve(SgrtModel *m, int s, size_t bytes, int sgline)
{
	SgrtSymm *sy = symm_of(m);
	int on;

	if (!sy)
		return sgrt_fail(m, SGRT_ENOMEM, sgline, "out of host memory");
	if (s < 0 || s >= m->nstreams)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
	if (m->group_depth > 0)
		return sgrt_fail(m, SGRT_EUSAGE, sgline,
		                 "sgrt_symm_reserve inside an NCCL group");
	/* (coll NULL: a reservation says nothing of falling back.) */
	return gate(m, s, bytes ? bytes : 1, NULL, NULL, NULL, &on, sgline);
}
