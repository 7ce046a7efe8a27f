/*
 * sgrt.c - the model object: creation and destruction, the error slot and
 * the checks that fill it, streams and events, call boundaries.
 *
 * Streams are created once, non-blocking (so that the legacy default
 * stream never orders them behind the caller's back: the compiler orders
 * them with explicit events) and with the graph's priorities clamped to
 * the device's range.  Events are created once with timing disabled, the
 * cheapest kind; wait_stream uses one more such event per stream.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sgrt_impl.h"

/* A heap copy of s ("" for NULL); NULL when memory runs out. */
static char *
dupstr(const char *s)
{
	size_t n;
	char *p;

	if (!s)
		s = "";
	n = strlen(s) + 1;
	p = malloc(n);
	if (p)
		memcpy(p, s, n);
	return p;
}

/* ------------------------------------------------------------------ errors */

/* Stores msg as the model's error unless one is recorded; returns code. */
static int
set_error(SgrtModel *m, int code, const char *prefix, const char *msg)
{
	if (!m || m->status != SGRT_OK)
		return code;
	m->status = code;
	snprintf(m->err, sizeof m->err, "%s%s", prefix, msg);
	return code;
}

/* "SGFILE:LINE: ", "SGFILE: " or "" into buf. */
static void
location(const SgrtModel *m, int sgline, char *buf, size_t len)
{
	const char *file = m->sgfile[0] ? m->sgfile : m->graph;

	if (sgline < 0 || !file[0])
		buf[0] = 0;
	else if (sgline == 0)
		snprintf(buf, len, "%s: ", file);
	else
		snprintf(buf, len, "%s:%d: ", file, sgline);
}

int
sgrt_fail(SgrtModel *m, int code, int sgline, const char *fmt, ...)
{
	char where[256], msg[SGRT_ERRLEN];
	va_list ap;

	if (!m || m->status != SGRT_OK)
		return code;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	location(m, sgline, where, sizeof where);
	return set_error(m, code, where, msg);
}

void
sgrt_call_name(const char *call, char *buf, size_t len)
{
	size_t i = 0;

	while (*call == ' ' || *call == '(')
		call++;
	while (i + 1 < len && call[i] && call[i] != '(' && call[i] != ' ')
		i++;
	memcpy(buf, call, i);
	buf[i] = 0;
}

int
sgrt_check_cuda(SgrtModel *m, cudaError_t e, const char *call, int sgline)
{
	char fn[128];

	if (e == cudaSuccess)
		return SGRT_OK;
	/* The runtime also keeps e as its "last error"; clear it so that a
	 * later launch check does not blame the next kernel. */
	(void)cudaGetLastError();
	sgrt_call_name(call, fn, sizeof fn);
	return sgrt_fail(m, SGRT_ECUDA, sgline, "%s failed: %s (%s)", fn,
	                 cudaGetErrorString(e), cudaGetErrorName(e));
}

int
sgrt_check_launch(SgrtModel *m, const char *kernel, int sgline)
{
	cudaError_t e = cudaGetLastError();

	if (e == cudaSuccess)
		return SGRT_OK;
	return sgrt_fail(m, SGRT_ECUDA, sgline, "launch of %s failed: %s (%s)",
	                 kernel ? kernel : "kernel", cudaGetErrorString(e),
	                 cudaGetErrorName(e));
}

const char *
sgrt_last_error(const SgrtModel *m)
{
	return m ? m->err : "out of memory";
}

int
sgrt_status(const SgrtModel *m)
{
	return m ? m->status : SGRT_ENOMEM;
}

void
sgrt_clear_error(SgrtModel *m)
{
	m->status = SGRT_OK;
	m->err[0] = 0;
}

/* ------------------------------------------------------------------ creation */

/* Priority p clamped to the device's range (numerically lower runs
 * first; [greatest, least] is e.g. [-5, 0]). */
static int
clamp_priority(int p, int least, int greatest)
{
	if (p < greatest)
		return greatest;
	if (p > least)
		return least;
	return p;
}

/* The graph's streams, each with its join event. */
static int
make_streams(SgrtModel *m, const SgrtConfig *cfg)
{
	int least = 0, greatest = 0, i;

	SGRT_CHECK_CUDA(m, cudaDeviceGetStreamPriorityRange(&least, &greatest), 0);
	for (i = 0; i < m->nstreams; i++) {
		const char *name = i ? cfg->stream_names[i - 1] : "default";
		m->stream_name[i] = dupstr(name);
		if (!m->stream_name[i])
			return sgrt_fail(m, SGRT_ENOMEM, 0, "out of memory");
		SGRT_CHECK_CUDA(m, cudaEventCreateWithFlags(&m->join[i],
		    cudaEventDisableTiming), 0);
		if (i == 0)
			continue;
		int p = cfg->stream_priorities ? cfg->stream_priorities[i - 1] : 0;
		SGRT_CHECK_CUDA(m, cudaStreamCreateWithPriority(&m->stream[i],
		    cudaStreamNonBlocking, clamp_priority(p, least, greatest)), 0);
	}
	return SGRT_OK;
}

/* The graph's local events. */
static int
make_events(SgrtModel *m)
{
	int i;

	for (i = 0; i < m->nevents; i++)
		SGRT_CHECK_CUDA(m, cudaEventCreateWithFlags(&m->event[i],
		    cudaEventDisableTiming), 0);
	return SGRT_OK;
}

/* 1 when the environment variable is set to something other than "0". */
static int
env_flag(const char *name)
{
	const char *v = getenv(name);
	return v && v[0] && strcmp(v, "0") != 0;
}

/* 1 when environment variable name is set to value. */
static int
env_is(const char *name, const char *value)
{
	const char *v = getenv(name);
	return v && strcmp(v, value) == 0;
}

/* Everything sgrt_create does once the object exists. */
static int
setup(SgrtModel *m, const SgrtConfig *cfg)
{
	if (cfg->nstreams < 0 || cfg->nevents < 0 ||
	    (cfg->nstreams > 0 && !cfg->stream_names))
		return sgrt_fail(m, SGRT_EUSAGE, 0, "bad stream or event count");
	m->stream = calloc(cfg->nstreams + 1, sizeof *m->stream);
	m->stream_name = calloc(cfg->nstreams + 1, sizeof *m->stream_name);
	m->join = calloc(cfg->nstreams + 1, sizeof *m->join);
	m->ws = calloc(cfg->nstreams + 1, sizeof *m->ws);
	m->ws_have = calloc(cfg->nstreams + 1, sizeof *m->ws_have);
	m->event = calloc(cfg->nevents ? cfg->nevents : 1, sizeof *m->event);
	if (!m->stream || !m->stream_name || !m->join || !m->ws || !m->ws_have || !m->event)
		return sgrt_fail(m, SGRT_ENOMEM, 0, "out of memory");
	/* Counted only now, so that sgrt_destroy never walks a NULL array. */
	m->nstreams = cfg->nstreams + 1;
	m->nevents = cfg->nevents;
	if (cfg->device >= 0)
		SGRT_CHECK_CUDA(m, cudaSetDevice(cfg->device), 0);
	SGRT_CHECK_CUDA(m, cudaGetDevice(&m->device), 0);
	SGRT_TRY(make_streams(m, cfg));
	SGRT_TRY(make_events(m));
	m->arena_bytes = cfg->arena_bytes;
	if (m->arena_bytes) {
		SGRT_CHECK_CUDA(m, cudaMalloc(&m->arena, m->arena_bytes), 0);
		sgrt_mem_account(m, (long long)m->arena_bytes);
	}
	m->ws_bytes = cfg->workspace_bytes ? cfg->workspace_bytes
	                                   : SGRT_DEFAULT_WORKSPACE;
	m->sync_ops = env_flag("SGRT_SYNC");
	m->allow_tf32 = env_flag("SGRT_ALLOW_TF32");
	m->no_epilogue = env_flag("SGRT_NO_EPILOGUE");
	m->gemm_tune = !env_is("SGRT_GEMM_TUNE", "0");
	m->world = 1;
	return SGRT_OK;
}

int
sgrt_create(SgrtModel **out, const SgrtConfig *cfg)
{
	SgrtModel *m = calloc(1, sizeof *m);

	*out = m;
	if (!m)
		return SGRT_ENOMEM;
	m->device = -1;
	m->graph = dupstr(cfg ? cfg->graph : NULL);
	m->sgfile = dupstr(cfg ? cfg->sgfile : NULL);
	if (!m->graph || !m->sgfile) {
		sgrt_destroy(m);
		*out = NULL;
		return SGRT_ENOMEM;
	}
	if (!cfg)
		return sgrt_fail(m, SGRT_EUSAGE, 0, "no configuration");
	return setup(m, cfg);
}

/* Waits for the model's own streams (not the caller's), ignoring errors:
 * at destruction there is nobody left to report them to. */
static void
drain(SgrtModel *m)
{
	int i;

	for (i = 1; i < m->nstreams; i++)
		if (m->stream[i])
			(void)cudaStreamSynchronize(m->stream[i]);
}

void
sgrt_destroy(SgrtModel *m)
{
	int i;

	if (!m)
		return;
	if (m->device >= 0)
		(void)cudaSetDevice(m->device);
	if (m->stream)
		drain(m);
	sgrt_symm_release(m);
	sgrt_nccl_release(m);
	sgrt_blas_release(m);
	sgrt_conv_release(m);
	sgrt_cudnn_release(m);
	sgrt_trace_release(m);
	sgrt_mem_release(m);
	for (i = 0; i < m->nstreams; i++) {
		if (i > 0 && m->stream[i])
			(void)cudaStreamDestroy(m->stream[i]);
		if (m->join && m->join[i])
			(void)cudaEventDestroy(m->join[i]);
		if (m->stream_name)
			free(m->stream_name[i]);
	}
	for (i = 0; i < m->nevents; i++)
		if (m->event[i])
			(void)cudaEventDestroy(m->event[i]);
	free(m->stream);
	free(m->stream_name);
	free(m->join);
	free(m->ws);
	free(m->ws_have);
	free(m->event);
	free(m->graph);
	free(m->sgfile);
	free(m);
}

int
sgrt_device(const SgrtModel *m)
{
	return m->device;
}

const char *
sgrt_graph_name(const SgrtModel *m)
{
	return m->graph;
}

/* ------------------------------------------------------------------ calls */

int
sgrt_call_begin(SgrtModel *m, cudaStream_t stream)
{
	sgrt_clear_error(m);
	m->nkernels = 0;
	m->stream[0] = stream;
	SGRT_CHECK_CUDA(m, cudaSetDevice(m->device), 0);
	if (!m->tracing)
		return SGRT_OK;
	sgrt_trace_reset(m);
	if (!m->t0)
		SGRT_CHECK_CUDA(m, cudaEventCreate(&m->t0), 0);
	SGRT_CHECK_CUDA(m, cudaEventRecord(m->t0, stream), 0);
	m->traced = 1;
	return SGRT_OK;
}

int
sgrt_call_end(SgrtModel *m)
{
	m->last_kernels = m->nkernels;
	(void)sgrt_check_launch(m, "a kernel", 0);
	(void)sgrt_nccl_poll(m);
	return m->status;
}

/* ------------------------------------------------------------------ streams and events */

cudaStream_t
sgrt_stream(const SgrtModel *m, int s)
{
	if (s < 0 || s >= m->nstreams)
		return NULL;
	return m->stream[s];
}

cudaEvent_t
sgrt_event(const SgrtModel *m, int e)
{
	if (e < 0 || e >= m->nevents)
		return NULL;
	return m->event[e];
}

int
sgrt_nstreams(const SgrtModel *m)
{
	return m->nstreams;
}

const char *
sgrt_stream_name(const SgrtModel *m, int s)
{
	if (s < 0 || s >= m->nstreams)
		return NULL;
	return m->stream_name[s];
}

/* SGRT_EUSAGE unless s is a stream of m and e an event of m (-1: none). */
static int
bad_index(SgrtModel *m, int s, int e, int sgline)
{
	if (s < 0 || s >= m->nstreams)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
	if (e != -1 && (e < 0 || e >= m->nevents))
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no event %d", e);
	return SGRT_OK;
}

int
sgrt_record(SgrtModel *m, int event, int s, int sgline)
{
	SGRT_TRY(bad_index(m, s, event, sgline));
	SGRT_CHECK_CUDA(m, cudaEventRecord(m->event[event], m->stream[s]),
	                sgline);
	return SGRT_OK;
}

int
sgrt_wait(SgrtModel *m, int event, int s, int sgline)
{
	SGRT_TRY(bad_index(m, s, event, sgline));
	SGRT_CHECK_CUDA(m, cudaStreamWaitEvent(m->stream[s], m->event[event], 0),
	                sgline);
	return SGRT_OK;
}

int
sgrt_record_ext(SgrtModel *m, cudaEvent_t e, int s, int sgline)
{
	SGRT_TRY(bad_index(m, s, -1, sgline));
	SGRT_CHECK_CUDA(m, cudaEventRecord(e, m->stream[s]), sgline);
	return SGRT_OK;
}

int
sgrt_wait_ext(SgrtModel *m, cudaEvent_t e, int s, int sgline)
{
	SGRT_TRY(bad_index(m, s, -1, sgline));
	SGRT_CHECK_CUDA(m, cudaStreamWaitEvent(m->stream[s], e, 0), sgline);
	return SGRT_OK;
}

int
sgrt_wait_stream(SgrtModel *m, int waiter, int waited, int sgline)
{
	SGRT_TRY(bad_index(m, waiter, -1, sgline));
	SGRT_TRY(bad_index(m, waited, -1, sgline));
	if (waiter == waited)
		return SGRT_OK;
	/* cudaStreamWaitEvent takes the event's latest record, so one join
	 * event per stream serves every wait_stream on it. */
	SGRT_CHECK_CUDA(m, cudaEventRecord(m->join[waited], m->stream[waited]),
	                sgline);
	SGRT_CHECK_CUDA(m, cudaStreamWaitEvent(m->stream[waiter],
	                m->join[waited], 0), sgline);
	return SGRT_OK;
}

int
sgrt_join_all(SgrtModel *m, int sgline)
{
	int i;

	for (i = 1; i < m->nstreams; i++)
		SGRT_TRY(sgrt_wait_stream(m, 0, i, sgline));
	return SGRT_OK;
}

int
sgrt_synchronize(SgrtModel *m, int sgline)
{
	int i;

	for (i = 0; i < m->nstreams; i++)
		SGRT_CHECK_CUDA(m, cudaStreamSynchronize(m->stream[i]), sgline);
	return SGRT_OK;
}
