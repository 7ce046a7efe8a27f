/*
 * sgrt_trace.c - op bracketing, kernel counting and the Chrome trace.
 *
 * The generated code brackets every kernel, copy and collective with
 * sgrt_op_begin / sgrt_op_end.  Normally that only counts kernels.  While
 * tracing, begin and end record a pair of timing events on the op's
 * stream, taken from a pool that lives as long as the model; after the
 * call sgrt_trace_write resolves each pair against the event recorded on
 * `default` at sgrt_call_begin and writes one "ph": "X" slice per op, on
 * the track of its stream: "tid" is the stream's index, named by a
 * "thread_name" metadata event, as the Chrome trace format has it.  Timing events
 * exist only in trace mode; the graph's own events never time.
 *
 * With SGRT_SYNC=1 sgrt_op_end waits for the op's stream and checks it,
 * so that a fault inside a kernel is reported at that kernel's .sg line
 * instead of at some later call (as CUDA_LAUNCH_BLOCKING does).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sgrt_impl.h"

const char *
sgrt_op_kind_name(int kind)
{
	switch (kind) {
	case SGRT_OP_KERNEL: return "kernel";
	case SGRT_OP_COPY: return "copy";
	case SGRT_OP_COLLECTIVE: return "collective";
	default: return "other";
	}
}

/* ------------------------------------------------------------------ bracketing */

/* The next unused timing event of the pool, created when the pool is
 * exhausted; NULL (with the error recorded) on failure. */
static cudaEvent_t
pool_event(SgrtModel *m)
{
	if (m->tpool_used == m->ntpool) {
		if (m->ntpool == m->captpool) {
			int cap = m->captpool ? m->captpool * 2 : 64;
			cudaEvent_t *p = realloc(m->tpool, cap * sizeof *p);
			if (!p) {
				sgrt_fail(m, SGRT_ENOMEM, 0, "out of memory");
				return NULL;
			}
			m->tpool = p;
			m->captpool = cap;
		}
		if (sgrt_check_cuda(m, cudaEventCreate(&m->tpool[m->ntpool]),
		                    "cudaEventCreate", 0))
			return NULL;
		m->ntpool++;
	}
	return m->tpool[m->tpool_used++];
}

/* A new slice for op `name` on stream s, its start event recorded;
 * its index, or -1 on failure. */
static int
open_slice(SgrtModel *m, int s, int kind, const char *name, int sgline)
{
	SgrtSlice *sl;

	if (m->nslices == m->capslices) {
		int cap = m->capslices ? m->capslices * 2 : 64;
		SgrtSlice *p = realloc(m->slice, cap * sizeof *p);
		if (!p) {
			sgrt_fail(m, SGRT_ENOMEM, sgline, "out of memory");
			return -1;
		}
		m->slice = p;
		m->capslices = cap;
	}
	sl = &m->slice[m->nslices];
	memset(sl, 0, sizeof *sl);
	sl->stream = s;
	sl->kind = kind;
	sl->sgline = sgline;
	sl->name = malloc(strlen(name) + 1);
	sl->start = pool_event(m);
	sl->end = pool_event(m);
	if (!sl->name || !sl->start || !sl->end) {
		free(sl->name);
		sgrt_fail(m, SGRT_ENOMEM, sgline, "out of memory");
		return -1;
	}
	strcpy(sl->name, name);
	if (sgrt_check_cuda(m, cudaEventRecord(sl->start, m->stream[s]),
	                    "cudaEventRecord", sgline)) {
		free(sl->name);
		return -1;
	}
	return m->nslices++;
}

int
sgrt_op_begin(SgrtModel *m, int s, int kind, const char *name, int sgline)
{
	int slot;

	if (s < 0 || s >= m->nstreams) {
		sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
		s = 0;
	}
	if (!name)
		name = sgrt_op_kind_name(kind);
	if (kind == SGRT_OP_KERNEL)
		m->nkernels++;
	m->cur_line = sgline;
	m->cur_name = name;
	/* Inside an NCCL group the work is issued at the group's end: there
	 * is nothing to time around each member. */
	if (!m->tracing || !m->traced || m->group_depth > 0)
		return -1 - s;
	slot = open_slice(m, s, kind, name, sgline);
	return slot >= 0 ? slot : -1 - s;
}

int
sgrt_op_end(SgrtModel *m, int handle)
{
	int s;

	if (handle >= 0) {
		SgrtSlice *sl = &m->slice[handle];
		s = sl->stream;
		SGRT_CHECK_CUDA(m, cudaEventRecord(sl->end, m->stream[s]),
		                sl->sgline);
	} else {
		s = -1 - handle;
	}
	if (!m->sync_ops || s >= m->nstreams)
		return SGRT_OK;
	return sgrt_check_cuda(m, cudaStreamSynchronize(m->stream[s]),
	                       m->cur_name ? m->cur_name : "op", m->cur_line);
}

int
sgrt_kernel_count(const SgrtModel *m)
{
	return m->last_kernels;
}

/* ------------------------------------------------------------------ trace mode */

int
sgrt_trace_enable(SgrtModel *m, int on)
{
	m->tracing = on != 0;
	return SGRT_OK;
}

void
sgrt_trace_reset(SgrtModel *m)
{
	int i;

	for (i = 0; i < m->nslices; i++)
		free(m->slice[i].name);
	m->nslices = 0;
	m->tpool_used = 0;
	m->traced = 0;
}

void
sgrt_trace_release(SgrtModel *m)
{
	int i;

	sgrt_trace_reset(m);
	for (i = 0; i < m->ntpool; i++)
		(void)cudaEventDestroy(m->tpool[i]);
	if (m->t0)
		(void)cudaEventDestroy(m->t0);
	free(m->tpool);
	free(m->slice);
	m->tpool = NULL;
	m->slice = NULL;
	m->ntpool = m->captpool = m->capslices = 0;
	m->t0 = NULL;
}

/* ------------------------------------------------------------------ writing */

void
sgrt_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

int
sgrt_trace_json(FILE *f, const char *graph, const char *sgfile, int pid,
                char *const *streams, int nstreams,
                const SgrtTraceEvent *ev, int n)
{
	int i;

	fputs("[\n", f);
	for (i = 0; i < nstreams; i++) {
		fprintf(f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, "
		        "\"tid\": %d, \"args\": {\"name\": ", pid, i);
		sgrt_json_string(f, streams[i]);
		fprintf(f, "}}%s\n", i + 1 < nstreams || n > 0 ? "," : "");
	}
	for (i = 0; i < n; i++) {
		fputs("{\"name\": ", f);
		sgrt_json_string(f, ev[i].name);
		fputs(", \"cat\": ", f);
		sgrt_json_string(f, ev[i].cat);
		fprintf(f, ", \"ph\": \"X\", \"pid\": %d, \"tid\": %d", pid,
		        ev[i].tid);
		fprintf(f, ", \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"graph\": ",
		        ev[i].ts, ev[i].dur);
		sgrt_json_string(f, graph);
		fputs(", \"file\": ", f);
		sgrt_json_string(f, sgfile);
		fprintf(f, ", \"line\": %d}}%s\n", ev[i].sgline,
		        i + 1 < n ? "," : "");
	}
	fputs("]\n", f);
	return ferror(f) ? SGRT_EIO : SGRT_OK;
}

/* Microseconds from a to b, once b is complete. */
static int
elapsed_us(SgrtModel *m, cudaEvent_t a, cudaEvent_t b, double *us)
{
	float ms = 0;

	SGRT_CHECK_CUDA(m, cudaEventSynchronize(b), 0);
	SGRT_CHECK_CUDA(m, cudaEventElapsedTime(&ms, a, b), 0);
	*us = ms * 1000.0;
	return SGRT_OK;
}

/* The traced call's slices as timed events (ev holds nslices). */
static int
resolve(SgrtModel *m, SgrtTraceEvent *ev)
{
	int i;

	SGRT_CHECK_CUDA(m, cudaEventSynchronize(m->t0), 0);
	for (i = 0; i < m->nslices; i++) {
		SgrtSlice *sl = &m->slice[i];
		double end;
		ev[i].name = sl->name;
		ev[i].cat = sgrt_op_kind_name(sl->kind);
		ev[i].tid = sl->stream;
		ev[i].sgline = sl->sgline;
		SGRT_TRY(elapsed_us(m, m->t0, sl->start, &ev[i].ts));
		SGRT_TRY(elapsed_us(m, m->t0, sl->end, &end));
		ev[i].dur = end > ev[i].ts ? end - ev[i].ts : 0;
	}
	return SGRT_OK;
}

/* Writes the events to path (sgrt_out.h: a device in place, a symlink
 * through, else a mkstemp file renamed over it), so that a failed write
 * leaves no partial trace behind. */
static int
write_file(SgrtModel *m, const char *path, const SgrtTraceEvent *ev)
{
	SgrtOut o;
	int rc;

	if (sgrt_out_open(&o, path))
		return sgrt_fail(m, SGRT_EIO, -1, "%s: cannot write the trace",
		                 path);
	rc = sgrt_trace_json(o.f, m->graph, m->sgfile, m->rank, m->stream_name,
	                     m->nstreams, ev, m->nslices);
	if (rc != SGRT_OK) {
		sgrt_out_abort(&o);
		rc = SGRT_EIO;
	} else if (sgrt_out_commit(&o)) {
		rc = SGRT_EIO;
	}
	if (rc != SGRT_OK)
		return sgrt_fail(m, SGRT_EIO, -1, "%s: cannot write the trace",
		                 path);
	return SGRT_OK;
}

int
sgrt_trace_write(SgrtModel *m, const char *path)
{
	SgrtTraceEvent *ev;
	int rc;

	if (!m->traced)
		return sgrt_fail(m, SGRT_EUSAGE, -1,
		                 "%s: no traced call to write", path);
	ev = calloc(m->nslices ? m->nslices : 1, sizeof *ev);
	if (!ev)
		return sgrt_fail(m, SGRT_ENOMEM, 0, "out of memory");
	rc = resolve(m, ev);
	if (rc == SGRT_OK)
		rc = write_file(m, path, ev);
	free(ev);
	return rc;
}
