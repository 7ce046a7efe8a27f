/*
 * sgrt_nccl.c - connecting the ranks, and the collective wrappers.
 *
 * The launcher (torchrun, or anything that sets the same variables)
 * starts one process per GPU with RANK, WORLD_SIZE and LOCAL_RANK.  NCCL
 * needs one unique id shared by all ranks; rank 0 makes it and passes it
 * through a file, which needs no network code of ours:
 *   - the path is $SGRT_NCCL_ID_FILE, else /tmp/sgrt-nccl-id-JOBID where
 *     JOBID is $SGRT_JOB_ID, $TORCHELASTIC_RUN_ID, $SLURM_JOB_ID or
 *     "u" and the user id, the first that is set;
 *   - rank 0 writes "SGRTNCCL", the world size and the id to a mkstemp file
 *     and renames it to PATH (so a reader never sees half a file), and
 *     removes PATH once every rank has joined;
 *   - the others poll PATH every 10 ms for up to $SGRT_NCCL_TIMEOUT
 *     seconds (default 300), ignoring a file for another world size or
 *     one older than $SGRT_NCCL_ID_MAX_AGE seconds (default 120: a file
 *     left by a crashed run).
 * With WORLD_SIZE=1 there is no file.
 *
 * Without NCCL (meson -Dnccl=disabled, or no NCCL found) one rank still
 * works: every collective over one rank is a copy (or nothing when in
 * place).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef SGRT_HAVE_NCCL
#include <nccl.h>
#endif

#include "half.h"
#include "sgrt_impl.h"

#define MAGIC "SGRTNCCL"
#define MAGICLEN 8

/* ------------------------------------------------------------------ environment */

/* An integer environment variable, or def when unset; -1 when malformed. */
static long
env_long(const char *name, long def)
{
	const char *v = getenv(name);
	char *end;
	long x;

	if (!v || !v[0])
		return def;
	errno = 0;
	x = strtol(v, &end, 10);
	if (errno || *end || x < 0 || x > 1 << 20)
		return -1;
	return x;
}

int
sgrt_env_ranks(int *rank, int *world, int *local_rank, char *err,
               size_t errlen)
{
	long r = env_long("RANK", 0), w = env_long("WORLD_SIZE", 1);
	long l = env_long("LOCAL_RANK", r);

	if (r < 0 || w < 1 || l < 0 || r >= w) {
		snprintf(err, errlen, "bad RANK, WORLD_SIZE or LOCAL_RANK in the "
		         "environment (RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s)",
		         getenv("RANK") ? getenv("RANK") : "",
		         getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "",
		         getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "");
		return SGRT_EUSAGE;
	}
	*rank = (int)r;
	*world = (int)w;
	*local_rank = (int)l;
	return SGRT_OK;
}

#ifdef SGRT_HAVE_NCCL
/* A float environment variable (seconds), or def. */
static double
env_seconds(const char *name, double def)
{
	const char *v = getenv(name);
	char *end;
	double x;

	if (!v || !v[0])
		return def;
	x = strtod(v, &end);
	return *end || !(x >= 0) ? def : x;
}
#endif

/* ------------------------------------------------------------------ the id file */

int
sgrt_idfile_path(char *buf, size_t len)
{
	static const char *const jobvars[] = {
		"SGRT_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
	};
	const char *p = getenv("SGRT_NCCL_ID_FILE");
	size_t i;
	int n;

	if (p && p[0])
		n = snprintf(buf, len, "%s", p);
	else {
		const char *job = NULL;
		for (i = 0; i < sizeof jobvars / sizeof *jobvars && !job; i++)
			if (getenv(jobvars[i]) && getenv(jobvars[i])[0])
				job = getenv(jobvars[i]);
		if (job)
			n = snprintf(buf, len, "/tmp/sgrt-nccl-id-%s", job);
		else
			n = snprintf(buf, len, "/tmp/sgrt-nccl-id-u%ld",
			             (long)getuid());
	}
	return n < 0 || (size_t)n >= len ? SGRT_EUSAGE : SGRT_OK;
}

/* The file's bytes: magic, world (4 bytes, little-endian), id. */
static size_t
idfile_bytes(unsigned char *buf, const void *id, size_t idlen, int world)
{
	memcpy(buf, MAGIC, MAGICLEN);
	buf[8] = world & 0xff;
	buf[9] = (world >> 8) & 0xff;
	buf[10] = (world >> 16) & 0xff;
	buf[11] = (world >> 24) & 0xff;
	memcpy(buf + 12, id, idlen);
	return 12 + idlen;
}

/* Writes all n bytes to fd. */
static int
write_all(int fd, const unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int
sgrt_idfile_write(const char *path, const void *id, size_t idlen, int world,
                  char *err, size_t errlen)
{
	unsigned char buf[512];
	char tmp[4096];
	size_t n;
	int fd, bad;

	if (idlen > sizeof buf - 12)
		return SGRT_EUSAGE;
	n = idfile_bytes(buf, id, idlen, world);
	/* mkstemp: O_EXCL, mode 0600, so that nothing planted in /tmp under
	 * the name is followed (issue #15). */
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= sizeof tmp)
		return SGRT_EUSAGE;
	fd = mkstemp(tmp);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot write the NCCL id: %s", tmp,
		         strerror(errno));
		return SGRT_EIO;
	}
	bad = write_all(fd, buf, n) != 0;
	bad |= fsync(fd) != 0;
	bad |= close(fd) != 0;
	if (bad || rename(tmp, path) != 0) {
		snprintf(err, errlen, "%s: cannot write the NCCL id: %s", path,
		         strerror(errno));
		unlink(tmp);
		return SGRT_EIO;
	}
	return SGRT_OK;
}

/* One attempt: 1 when path holds a fresh id for world (copied to id). */
static int
try_read(const char *path, void *id, size_t idlen, int world, double max_age)
{
	unsigned char buf[512], want[512];
	struct stat st;
	ssize_t k;
	int fd;

	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) != 0 ||
	    difftime(time(NULL), st.st_mtime) > max_age) {
		close(fd);
		return 0;
	}
	k = read(fd, buf, sizeof buf);
	close(fd);
	idfile_bytes(want, id, idlen, world);
	if (k != (ssize_t)(12 + idlen) || memcmp(buf, want, 12) != 0)
		return 0;
	memcpy(id, buf + 12, idlen);
	return 1;
}

int
sgrt_idfile_read(const char *path, void *id, size_t idlen, int world,
                 double timeout, double max_age, char *err, size_t errlen)
{
	struct timespec start, now, nap = { 0, 10 * 1000 * 1000 };

	if (idlen > 500)
		return SGRT_EUSAGE;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		if (try_read(path, id, idlen, world, max_age))
			return SGRT_OK;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((double)(now.tv_sec - start.tv_sec) +
		    (now.tv_nsec - start.tv_nsec) * 1e-9 >= timeout)
			break;
		nanosleep(&nap, NULL);
	}
	snprintf(err, errlen, "%s: no NCCL id from rank 0 after %g s (is rank 0 "
	         "running, with the same SGRT_NCCL_ID_FILE or job id?)", path,
	         timeout);
	return SGRT_ENCCL;
}

/* ------------------------------------------------------------------ dtypes and ops */

size_t
sgrt_coll_dtype_size(int dtype)
{
	switch (dtype) {
	case SGRT_I8: case SGRT_U8: case SGRT_F8E4M3: case SGRT_F8E5M2:
		return 1;
	case SGRT_U32:
		return 4;
	case SGRT_U64:
		return 8;
	default:
		if (dtype >= 0 && dtype < SGRT_DTYPE_COUNT)
			return (size_t)sgrt_dtype_size(dtype);
		return 0;
	}
}

int
sgrt_rank(const SgrtModel *m)
{
	return m->rank;
}

int
sgrt_world(const SgrtModel *m)
{
	return m->world;
}

/* The check every wrapper starts with. */
static int
coll_check(SgrtModel *m, int s, int dtype, int sgline)
{
	if (s < 0 || s >= m->nstreams)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
	if (!sgrt_coll_dtype_size(dtype))
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "no collective for dtype %d", dtype);
	return SGRT_OK;
}

#ifdef SGRT_HAVE_NCCL

int
sgrt_has_nccl(void)
{
	return 1;
}

int
sgrt_check_nccl(SgrtModel *m, int result, const char *call, int sgline)
{
	const char *detail;
	char fn[128];

	if (result == ncclSuccess)
		return SGRT_OK;
	/* ncclGetLastError ignores its argument (NULL is allowed). */
	detail = ncclGetLastError(NULL);
	sgrt_call_name(call, fn, sizeof fn);
	return sgrt_fail(m, SGRT_ENCCL, sgline, "%s failed: %s%s%s", fn,
	                 ncclGetErrorString((ncclResult_t)result),
	                 detail && detail[0] ? ": " : "", detail ? detail : "");
}

#define CHECK_NCCL(m, call, sgline) SGRT_CHECK_NCCL(m, call, sgline)

/* NCCL's type for dtype. */
static int
nccl_type(SgrtModel *m, int dtype, ncclDataType_t *t, int sgline)
{
	switch (dtype) {
	case SGRT_F64: *t = ncclFloat64; break;
	case SGRT_F32: *t = ncclFloat32; break;
	case SGRT_F16: *t = ncclFloat16; break;
	case SGRT_BF16: *t = ncclBfloat16; break;
	case SGRT_I64: *t = ncclInt64; break;
	case SGRT_I32: *t = ncclInt32; break;
	case SGRT_BOOL: *t = ncclUint8; break;
	case SGRT_I8: *t = ncclInt8; break;
	case SGRT_U8: *t = ncclUint8; break;
	case SGRT_U32: *t = ncclUint32; break;
	case SGRT_U64: *t = ncclUint64; break;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
	case SGRT_F8E4M3: *t = ncclFloat8e4m3; break;
	case SGRT_F8E5M2: *t = ncclFloat8e5m2; break;
#endif
	default:
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "this NCCL has no type for dtype %d", dtype);
	}
	return SGRT_OK;
}

/* NCCL's op for op on dtype (bool sums are ors, products ands). */
static int
nccl_op(SgrtModel *m, int op, int dtype, ncclRedOp_t *o, int sgline)
{
	static const ncclRedOp_t ops[] = { ncclSum, ncclProd, ncclMax, ncclMin,
	                                   ncclAvg };

	if (op < 0 || op > SGRT_RED_AVG)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no reduction op %d", op);
	if (dtype == SGRT_BOOL && op == SGRT_RED_AVG)
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "avg of bool tensors is not supported");
	if (dtype == SGRT_BOOL && op == SGRT_RED_SUM)
		op = SGRT_RED_MAX;
	if (dtype == SGRT_BOOL && op == SGRT_RED_PROD)
		op = SGRT_RED_MIN;
	*o = ops[op];
	return SGRT_OK;
}

/* The communicator, or SGRT_EUSAGE when sgrt_nccl_init did not run. */
static int
need_comm(SgrtModel *m, int sgline)
{
	if (!m->comm)
		return sgrt_fail(m, SGRT_EUSAGE, sgline,
		                 "collective before sgrt_nccl_init");
	return SGRT_OK;
}

/* What every collective checks first: the stream, the dtype, the
 * communicator; *t gets NCCL's type for dtype. */
static int
coll_begin(SgrtModel *m, int s, int dtype, ncclDataType_t *t, int sgline)
{
	SGRT_TRY(coll_check(m, s, dtype, sgline));
	SGRT_TRY(need_comm(m, sgline));
	return nccl_type(m, dtype, t, sgline);
}

/* Rank 0 makes the id and publishes it; the others read it. */
static int
share_id(SgrtModel *m, ncclUniqueId *id, const char *path, int sgline)
{
	char err[SGRT_ERRLEN];
	int rc;

	if (m->rank == 0) {
		CHECK_NCCL(m, ncclGetUniqueId(id), sgline);
		if (m->world == 1)
			return SGRT_OK;
		rc = sgrt_idfile_write(path, id, sizeof *id, m->world, err,
		                       sizeof err);
	} else {
		rc = sgrt_idfile_read(path, id, sizeof *id, m->world,
		                      env_seconds("SGRT_NCCL_TIMEOUT", 300),
		                      env_seconds("SGRT_NCCL_ID_MAX_AGE", 120),
		                      err, sizeof err);
	}
	if (rc)
		return sgrt_fail(m, rc, -1, "%s", err);
	return SGRT_OK;
}

/* Connects this rank. */
static int
connect_ranks(SgrtModel *m, int sgline)
{
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	char path[4096];
	int rc;

	if (sgrt_idfile_path(path, sizeof path))
		return sgrt_fail(m, SGRT_EUSAGE, -1, "SGRT_NCCL_ID_FILE too long");
	SGRT_TRY(share_id(m, &id, path, sgline));
	SGRT_CHECK_CUDA(m, cudaSetDevice(m->device), sgline);
	rc = sgrt_check_nccl(m, ncclCommInitRank(&comm, m->world, id, m->rank),
	                     "ncclCommInitRank", sgline);
	/* Once the communicator exists every rank has read the id; when it
	 * failed, nobody will. */
	if (m->rank == 0 && m->world > 1)
		unlink(path);
	if (rc == SGRT_OK)
		m->comm = comm;
	return rc;
}

int
sgrt_nccl_poll(SgrtModel *m)
{
	ncclResult_t r = ncclSuccess;

	if (!m->comm)
		return SGRT_OK;
	CHECK_NCCL(m, ncclCommGetAsyncError(m->comm, &r), 0);
	if (r != ncclSuccess && r != ncclInProgress)
		return sgrt_check_nccl(m, r, "NCCL communication", 0);
	return SGRT_OK;
}

void
sgrt_nccl_release(SgrtModel *m)
{
	if (m->comm)
		(void)ncclCommDestroy(m->comm);
	m->comm = NULL;
}

/* Runs one collective call `call` on stream s, traced as `name`. */
#define COLLECTIVE(m, s, name, sgline, call)                                  \
	do {                                                                  \
		int h_ = sgrt_op_begin((m), (s), SGRT_OP_COLLECTIVE, (name),  \
		                       (sgline));                             \
		CHECK_NCCL((m), call, (sgline));                              \
		return sgrt_op_end((m), h_);                                  \
	} while (0)

int
sgrt_all_reduce(SgrtModel *m, int s, const void *send, void *recv,
                size_t count, int dtype, int op, const char *name, int sgline)
{
	ncclDataType_t t;
	ncclRedOp_t o;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
	SGRT_TRY(nccl_op(m, op, dtype, &o, sgline));
	COLLECTIVE(m, s, name ? name : "all_reduce", sgline,
	           ncclAllReduce(send, recv, count, t, o, m->comm, m->stream[s]));
}

/* scalar as a value of dtype, into buf (8 bytes). */
static int
scalar_bytes(SgrtModel *m, int dtype, double x, void *buf, int sgline)
{
	float f = (float)x;
	uint16_t h;

	switch (dtype) {
	case SGRT_F64: memcpy(buf, &x, 8); return SGRT_OK;
	case SGRT_F32: memcpy(buf, &f, 4); return SGRT_OK;
	case SGRT_F16: h = half_f32_to_f16(f); memcpy(buf, &h, 2); return SGRT_OK;
	case SGRT_BF16: h = half_f32_to_bf16(f); memcpy(buf, &h, 2); return SGRT_OK;
	default:
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "scaled all_reduce needs a float dtype");
	}
}

int
sgrt_all_reduce_scaled(SgrtModel *m, int s, const void *send, void *recv,
                       size_t count, int dtype, double scalar,
                       const char *name, int sgline)
{
	ncclDataType_t t;
	ncclRedOp_t o;
	unsigned char sc[8];
	int h, rc;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
	SGRT_TRY(scalar_bytes(m, dtype, scalar, sc, sgline));
	CHECK_NCCL(m, ncclRedOpCreatePreMulSum(&o, sc, t, ncclScalarHostImmediate,
	           m->comm), sgline);
	h = sgrt_op_begin(m, s, SGRT_OP_COLLECTIVE, name ? name : "all_reduce",
	                  sgline);
	rc = sgrt_check_nccl(m, ncclAllReduce(send, recv, count, t, o, m->comm,
	                     m->stream[s]), "ncclAllReduce", sgline);
	/* An op may go as soon as the call that used it has returned. */
	(void)ncclRedOpDestroy(o, m->comm);
	SGRT_TRY(rc);
	return sgrt_op_end(m, h);
}

int
sgrt_reduce(SgrtModel *m, int s, const void *send, void *recv, size_t count,
            int dtype, int op, int root, const char *name, int sgline)
{
	ncclDataType_t t;
	ncclRedOp_t o;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
	SGRT_TRY(nccl_op(m, op, dtype, &o, sgline));
	COLLECTIVE(m, s, name ? name : "reduce", sgline,
	           ncclReduce(send, recv, count, t, o, root, m->comm,
	                      m->stream[s]));
}

int
sgrt_broadcast(SgrtModel *m, int s, const void *send, void *recv,
               size_t count, int dtype, int root, const char *name, int sgline)
{
	ncclDataType_t t;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
	COLLECTIVE(m, s, name ? name : "broadcast", sgline,
	           ncclBroadcast(send, recv, count, t, root, m->comm,
	                         m->stream[s]));
}

int
sgrt_all_gather(SgrtModel *m, int s, const void *send, void *recv,
                size_t sendcount, int dtype, const char *name, int sgline)
{
	ncclDataType_t t;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
	COLLECTIVE(m, s, name ? name : "all_gather", sgline,
	           ncclAllGather(send, recv, sendcount, t, m->comm,
	                         m->stream[s]));
}

int
sgrt_reduce_scatter(SgrtModel *m, int s, const void *send, void *recv,
                    size_t recvcount, int dtype, int op, const char *name,
                    int sgline)
{
	ncclDataType_t t;
	ncclRedOp_t o;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
	SGRT_TRY(nccl_op(m, op, dtype, &o, sgline));
	COLLECTIVE(m, s, name ? name : "reduce_scatter", sgline,
	           ncclReduceScatter(send, recv, recvcount, t, o, m->comm,
	                             m->stream[s]));
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define HAVE_NCCL_A2A 1
#else
/* all_to_all, gather and scatter as grouped sends and receives, for
 * NCCLs older than 2.28 (which has them as collectives).  root < 0: all
 * to all; else gather (gather set) or scatter to/from root. */
static ncclResult_t
p2p_blocks(const void *send, void *recv, size_t count, ncclDataType_t t,
           size_t esize, int root, int gather, ncclComm_t comm, int rank,
           int world, cudaStream_t st)
{
	ncclResult_t r = ncclGroupStart(), e;
	size_t blk = count * esize;
	int j;

	for (j = 0; j < world && r == ncclSuccess; j++) {
		const char *sb = (const char *)send + j * blk;
		char *rb = (char *)recv + j * blk;
		if (root < 0) {
			r = ncclSend(sb, count, t, j, comm, st);
			if (r == ncclSuccess)
				r = ncclRecv(rb, count, t, j, comm, st);
		} else if (rank == root) {
			r = gather ? ncclRecv(rb, count, t, j, comm, st)
			           : ncclSend(sb, count, t, j, comm, st);
		}
	}
	if (r == ncclSuccess && root >= 0)
		r = gather ? ncclSend(send, count, t, root, comm, st)
		           : ncclRecv(recv, count, t, root, comm, st);
	e = ncclGroupEnd();
	return r != ncclSuccess ? r : e;
}
#endif

int
sgrt_all_to_all(SgrtModel *m, int s, const void *send, void *recv,
                size_t count, int dtype, const char *name, int sgline)
{
	ncclDataType_t t;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
#ifdef HAVE_NCCL_A2A
	COLLECTIVE(m, s, name ? name : "all_to_all", sgline,
	           ncclAlltoAll(send, recv, count, t, m->comm, m->stream[s]));
#else
	COLLECTIVE(m, s, name ? name : "all_to_all", sgline,
	           p2p_blocks(send, recv, count, t, sgrt_coll_dtype_size(dtype), -1,
	                   0, m->comm, m->rank, m->world, m->stream[s]));
#endif
}

int
sgrt_gather(SgrtModel *m, int s, const void *send, void *recv, size_t count,
            int dtype, int root, const char *name, int sgline)
{
	ncclDataType_t t;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
#ifdef HAVE_NCCL_A2A
	COLLECTIVE(m, s, name ? name : "gather", sgline,
	           ncclGather(send, recv, count, t, root, m->comm, m->stream[s]));
#else
	COLLECTIVE(m, s, name ? name : "gather", sgline,
	           p2p_blocks(send, recv, count, t, sgrt_coll_dtype_size(dtype),
	                   root, 1, m->comm, m->rank, m->world, m->stream[s]));
#endif
}

int
sgrt_scatter(SgrtModel *m, int s, const void *send, void *recv, size_t count,
             int dtype, int root, const char *name, int sgline)
{
	ncclDataType_t t;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
#ifdef HAVE_NCCL_A2A
	COLLECTIVE(m, s, name ? name : "scatter", sgline,
	           ncclScatter(send, recv, count, t, root, m->comm, m->stream[s]));
#else
	COLLECTIVE(m, s, name ? name : "scatter", sgline,
	           p2p_blocks(send, recv, count, t, sgrt_coll_dtype_size(dtype),
	                   root, 0, m->comm, m->rank, m->world, m->stream[s]));
#endif
}

int
sgrt_send(SgrtModel *m, int s, const void *buf, size_t count, int dtype,
          int peer, int sgline)
{
	ncclDataType_t t;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
	COLLECTIVE(m, s, "send", sgline,
	           ncclSend(buf, count, t, peer, m->comm, m->stream[s]));
}

int
sgrt_recv(SgrtModel *m, int s, void *buf, size_t count, int dtype, int peer,
          int sgline)
{
	ncclDataType_t t;

	SGRT_TRY(coll_begin(m, s, dtype, &t, sgline));
	COLLECTIVE(m, s, "recv", sgline,
	           ncclRecv(buf, count, t, peer, m->comm, m->stream[s]));
}

int
sgrt_group_start(SgrtModel *m, int sgline)
{
	CHECK_NCCL(m, ncclGroupStart(), sgline);
	m->group_depth++;
	return SGRT_OK;
}

int
sgrt_group_end(SgrtModel *m, int sgline)
{
	if (m->group_depth > 0)
		m->group_depth--;
	CHECK_NCCL(m, ncclGroupEnd(), sgline);
	return SGRT_OK;
}

#else /* !SGRT_HAVE_NCCL: one rank, collectives are copies */

int
sgrt_has_nccl(void)
{
	return 0;
}

int
sgrt_check_nccl(SgrtModel *m, int result, const char *call, int sgline)
{
	char fn[128];

	if (result == 0)
		return SGRT_OK;
	sgrt_call_name(call, fn, sizeof fn);
	return sgrt_fail(m, SGRT_ENCCL, sgline, "%s failed: NCCL error %d",
	                 fn, result);
}

int
sgrt_nccl_poll(SgrtModel *m)
{
	(void)m;
	return SGRT_OK;
}

void
sgrt_nccl_release(SgrtModel *m)
{
	(void)m;
}

/* Nothing to connect: only one rank can run. */
static int
connect_ranks(SgrtModel *m, int sgline)
{
	if (m->world > 1)
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "WORLD_SIZE=%d, but libsgrt was built without "
		                 "NCCL", m->world);
	return SGRT_OK;
}

/* A one-rank collective: recv = send. */
static int
one_rank(SgrtModel *m, int s, const void *send, void *recv, size_t count,
         int dtype, const char *name, int sgline)
{
	int h;

	SGRT_TRY(coll_check(m, s, dtype, sgline));
	h = sgrt_op_begin(m, s, SGRT_OP_COLLECTIVE, name, sgline);
	if (send != recv && count > 0)
		SGRT_CHECK_CUDA(m, cudaMemcpyAsync(recv, send,
		                count * sgrt_coll_dtype_size(dtype),
		                cudaMemcpyDefault, m->stream[s]), sgline);
	return sgrt_op_end(m, h);
}

int
sgrt_all_reduce(SgrtModel *m, int s, const void *send, void *recv,
                size_t count, int dtype, int op, const char *name, int sgline)
{
	if (op < 0 || op > SGRT_RED_AVG)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no reduction op %d", op);
	if (dtype == SGRT_BOOL && op == SGRT_RED_AVG)
		return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
		                 "avg of bool tensors is not supported");
	return one_rank(m, s, send, recv, count, dtype,
	                name ? name : "all_reduce", sgline);
}

int
sgrt_all_reduce_scaled(SgrtModel *m, int s, const void *send, void *recv,
                       size_t count, int dtype, double scalar,
                       const char *name, int sgline)
{
	(void)s; (void)send; (void)recv; (void)count; (void)dtype;
	(void)scalar; (void)name;
	return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
	                 "scaled all_reduce needs NCCL");
}

int
sgrt_reduce(SgrtModel *m, int s, const void *send, void *recv, size_t count,
            int dtype, int op, int root, const char *name, int sgline)
{
	(void)op;
	(void)root;
	return one_rank(m, s, send, recv, count, dtype,
	                name ? name : "reduce", sgline);
}

int
sgrt_broadcast(SgrtModel *m, int s, const void *send, void *recv,
               size_t count, int dtype, int root, const char *name, int sgline)
{
	(void)root;
	return one_rank(m, s, send, recv, count, dtype,
	                name ? name : "broadcast", sgline);
}

int
sgrt_all_gather(SgrtModel *m, int s, const void *send, void *recv,
                size_t sendcount, int dtype, const char *name, int sgline)
{
	return one_rank(m, s, send, recv, sendcount, dtype,
	                name ? name : "all_gather", sgline);
}

int
sgrt_reduce_scatter(SgrtModel *m, int s, const void *send, void *recv,
                    size_t recvcount, int dtype, int op, const char *name,
                    int sgline)
{
	(void)op;
	return one_rank(m, s, send, recv, recvcount, dtype,
	                name ? name : "reduce_scatter", sgline);
}

int
sgrt_all_to_all(SgrtModel *m, int s, const void *send, void *recv,
                size_t count, int dtype, const char *name, int sgline)
{
	return one_rank(m, s, send, recv, count, dtype,
	                name ? name : "all_to_all", sgline);
}

int
sgrt_gather(SgrtModel *m, int s, const void *send, void *recv, size_t count,
            int dtype, int root, const char *name, int sgline)
{
	(void)root;
	return one_rank(m, s, send, recv, count, dtype,
	                name ? name : "gather", sgline);
}

int
sgrt_scatter(SgrtModel *m, int s, const void *send, void *recv, size_t count,
             int dtype, int root, const char *name, int sgline)
{
	(void)root;
	return one_rank(m, s, send, recv, count, dtype,
	                name ? name : "scatter", sgline);
}

int
sgrt_send(SgrtModel *m, int s, const void *buf, size_t count, int dtype,
          int peer, int sgline)
{
	(void)s; (void)buf; (void)count; (void)dtype;
	return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
	                 "send to rank %d: there is only one rank", peer);
}

int
sgrt_recv(SgrtModel *m, int s, void *buf, size_t count, int dtype, int peer,
          int sgline)
{
	(void)s; (void)buf; (void)count; (void)dtype;
	return sgrt_fail(m, SGRT_EUNSUPPORTED, sgline,
	                 "receive from rank %d: there is only one rank", peer);
}

int
sgrt_group_start(SgrtModel *m, int sgline)
{
	(void)sgline;
	m->group_depth++;
	return SGRT_OK;
}

int
sgrt_group_end(SgrtModel *m, int sgline)
{
	(void)sgline;
	if (m->group_depth > 0)
		m->group_depth--;
	return SGRT_OK;
}

#endif /* SGRT_HAVE_NCCL */

int
sgrt_nccl_init(SgrtModel *m, int expected_world, int sgline)
{
	char err[SGRT_ERRLEN];

	if (m->comm)
		return SGRT_OK;
	if (sgrt_env_ranks(&m->rank, &m->world, &m->local_rank, err, sizeof err))
		return sgrt_fail(m, SGRT_EUSAGE, -1, "%s", err);
	if (expected_world > 0 && m->world != expected_world)
		return sgrt_fail(m, SGRT_EUSAGE, sgline,
		                 "the graph was compiled for WORLD=%d but "
		                 "WORLD_SIZE=%d", expected_world, m->world);
	return connect_ranks(m, sgline);
}
