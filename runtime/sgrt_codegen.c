/*
 * sgrt_codegen.c - helpers for the code sgc generates that the rest of
 * libsgrt has no use for: the fork at a call's start, synchronize() as a
 * device-side barrier, and what --cuda-graph needs to know about the model
 * (whether capture is allowed now, and the kernel count of a replay).
 */
#include "sgrt_codegen.h"
#include "sgrt_impl.h"

int
sgrt_cg_fork(SgrtModel *m, int sgline)
{
	int i;

	for (i = 1; i < m->nstreams; i++)
		SGRT_TRY(sgrt_wait_stream(m, i, 0, sgline));
	return SGRT_OK;
}

int
sgrt_cg_barrier(SgrtModel *m, int sgline)
{
	int i, j;

	for (i = 0; i < m->nstreams; i++)
		SGRT_CHECK_CUDA(m, cudaEventRecord(m->join[i], m->stream[i]), sgline);
	for (i = 0; i < m->nstreams; i++)
		for (j = 0; j < m->nstreams; j++)
			if (i != j)
				SGRT_CHECK_CUDA(m, cudaStreamWaitEvent(m->stream[i],
				                m->join[j], 0), sgline);
	return SGRT_OK;
}

int
sgrt_capturing(SgrtModel *m, int s, int *yes, int sgline)
{
	enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;

	if (s < 0 || s >= m->nstreams)
		return sgrt_fail(m, SGRT_EUSAGE, sgline, "no stream %d", s);
	SGRT_CHECK_CUDA(m, cudaStreamIsCapturing(m->stream[s], &st), sgline);
	*yes = st == cudaStreamCaptureStatusActive;
	return SGRT_OK;
}

int
sgrt_cg_record_ext(SgrtModel *m, cudaEvent_t e, int s, int sgline)
{
	int cap = 0;

	SGRT_TRY(sgrt_capturing(m, s, &cap, sgline));
	if (cap)
		SGRT_CHECK_CUDA(m, cudaEventRecordWithFlags(e, m->stream[s],
		                cudaEventRecordExternal), sgline);
	else
		SGRT_CHECK_CUDA(m, cudaEventRecord(e, m->stream[s]), sgline);
	return SGRT_OK;
}

int
sgrt_cg_wait_ext(SgrtModel *m, cudaEvent_t e, int s, int sgline)
{
	int cap = 0;

	SGRT_TRY(sgrt_capturing(m, s, &cap, sgline));
	SGRT_CHECK_CUDA(m, cudaStreamWaitEvent(m->stream[s], e,
	                cap ? cudaEventWaitExternal : 0), sgline);
	return SGRT_OK;
}

int
sgrt_cg_capturable(const SgrtModel *m)
{
	return !m->tracing && !m->sync_ops;
}

int
sgrt_cg_kernels(const SgrtModel *m)
{
	return m->nkernels;
}

void
sgrt_cg_add_kernels(SgrtModel *m, int n)
{
	m->nkernels += n;
}
