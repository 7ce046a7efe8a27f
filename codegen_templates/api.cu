api.cu - per graph ${g} (the graph's name as a C identifier): the model,
its creation and destruction, params I/O, the call (eager, or replayed as
a CUDA graph), the C API, the driver glue, and the --header text.

The io order of a graph's tensors (${g}_tensors) is: inputs in declaration
order, returned values in `return` order, params, consts.  Params and
consts are model-owned (${g}_tensor gives their addresses); the caller
owns inputs and outputs.  run_top's ${body} is set when the graph has
statements (a graph whose statements are all dead reads no `rt`).
//@ model

// ================================================================ graph ${graph} (${where})

/* The tensors of a call, in io order: inputs, outputs, params, consts. */
static const SgrtTensorDesc ${g}_tensors[${ntensors}] = {
${tensors}
};
${?nstreams}static const char *const ${g}_stream_names[${nstreams}] = {${stream_names}};
${?nstreams}static const int ${g}_stream_priorities[${nstreams}] = {${stream_prios}};
${?nevents}static const char *const ${g}_event_names[${nevents}] = {${event_names}};

struct ${g}_model {
	SgrtModel *rt;
	void *owned[${ntensors}];      /* params and consts; NULL for inputs, outputs */
	void *host[${nhost}];          /* pinned buffers of to_host results */
	cudaEvent_t fev[${nfev}];      /* cross-stream frees */
	void *scratch[${nscratch}];    /* device scratch of optimizer updates */
	int calls;                     /* calls made so far */
	cudaGraphExec_t exec;          /* --cuda-graph: the captured call */
	void *graph_io[${ntensors}];   /* the tensors it was captured with */
	cudaEvent_t graph_ext[${next}];
	int graph_kernels;             /* kernels in it */
};
//@ create_top

/* Creates a model of graph ${graph} on `device` (-1: the current one):
 * streams, events, cuBLASLt and memory for params and consts, whose values
 * ${g}_load then sets.  *out is set even on failure, so that
 * ${g}_last_error can say why; destroy it either way. */
extern "C" int
${g}_create(${g}_model **out, int device)
{
	SgrtConfig cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.graph = "${graph}";
	cfg.sgfile = "${source}";
	cfg.device = device;
	cfg.nstreams = ${nstreams};
	cfg.stream_names = ${stream_names_ptr};
	cfg.stream_priorities = ${stream_prios_ptr};
	cfg.nevents = ${nevents};
	cfg.event_names = ${event_names_ptr};
	cfg.arena_bytes = ${arena_bytes}; /* the static memory plan's peak */
	${g}_model *M = (${g}_model *)calloc(1, sizeof *M);
	*out = M;
	if (!M)
		return SGRT_ENOMEM;
	SGRT_TRY(sgrt_create(&M->rt, &cfg));
//@ create_owned
	SGRT_TRY(sgrt_device_alloc(M->rt, &M->owned[${k}], ${bytes}, "${name}", ${line}));
//@ create_host
	SGRT_TRY(sgrt_host_alloc(M->rt, &M->host[${k}], ${bytes}, ${line}));
//@ create_scratch
	SGRT_TRY(sgrt_device_alloc(M->rt, &M->scratch[${k}], ${bytes}, "scratch", ${line}));
//@ create_event
	SGRT_CHECK_CUDA(M->rt, cudaEventCreateWithFlags(&M->fev[${k}], cudaEventDisableTiming), ${line});
//@ create_nccl
	SGRT_TRY(sgrt_nccl_init(M->rt, ${world}, ${line}));
//@ create_symm
	/* symmetric memory for stream ${s}'s largest oneshot/ce collective */
	SGRT_TRY(sgrt_symm_reserve(M->rt, ${s}, ${bytes}, ${line}));
//@ create_bottom
	return SGRT_OK;
}

/* Frees everything the model owns (after its streams finish). */
extern "C" void
${g}_destroy(${g}_model *M)
{
	if (!M)
		return;
	if (M->exec)
		(void)cudaGraphExecDestroy(M->exec);
	for (int k = 0; k < ${nfev}; k++)
		if (M->fev[k])
			(void)cudaEventDestroy(M->fev[k]);
	sgrt_destroy(M->rt);
	free(M);
}

/* Loads params and consts from a safetensors file (NULL: none); those
 * missing are initialised from `seed` exactly as `sgc run` does. */
extern "C" int
${g}_load(${g}_model *M, const char *path, uint64_t seed)
{
	sgrt_clear_error(M->rt);
	return sgrt_load_tensors(M->rt, path, ${g}_tensors, ${ntensors}, M->owned,
	                         SGRT_ROLES_OWNED, seed);
}

/* Writes the params and consts to a safetensors file. */
extern "C" int
${g}_save(${g}_model *M, const char *path)
{
	sgrt_clear_error(M->rt);
	return sgrt_save_tensors(M->rt, path, ${g}_tensors, ${ntensors}, M->owned);
}

/* The device address of tensor i of ${g}_tensors when the model owns it
 * (a param or const), else NULL. */
extern "C" void *
${g}_tensor(${g}_model *M, int i)
{
	return i >= 0 && i < ${ntensors} ? M->owned[i] : NULL;
}

/* The most device memory the model held at once (arena, params, scratch,
 * cuBLASLt workspaces). */
extern "C" size_t
${g}_peak_bytes(${g}_model *M)
{
	return sgrt_peak_bytes(M->rt);
}

/* What the last failing call reported ("" when none). */
extern "C" const char *
${g}_last_error(${g}_model *M)
{
	return M && M->rt ? sgrt_last_error(M->rt) : "out of memory";
}

extern "C" SgrtModel *
${g}_runtime(${g}_model *M)
{
	return M->rt;
}
//@ run_top

/* One call of graph ${graph}: the statements of ${source} in program order.
 * Returns at the first failure (its message is in the model's error). */
static int
${g}_run(${g}_model *M, void *const *io, const cudaEvent_t *ext)
{
${?body}	SgrtModel *rt = M->rt;
${!body}	(void)M;
	(void)io;
	(void)ext;
//@ run_bottom
	return SGRT_OK;
}
//@ graph_run

/* --cuda-graph.  The first call runs eagerly (making cuBLASLt plans and
 * workspaces); the second captures a whole call, every stream included,
 * into a CUDA graph, and later calls replay it.  A call with other tensor
 * addresses or extern events captures again; a traced call, or one under
 * SGRT_SYNC=1, runs eagerly. */
static int
${g}_capture(${g}_model *M, void *const *io, const cudaEvent_t *ext)
{
	SgrtModel *rt = M->rt;
	cudaStream_t s0 = sgrt_stream(rt, 0);
	cudaGraph_t graph = NULL;
	if (M->exec) {
		(void)cudaGraphExecDestroy(M->exec);
		M->exec = NULL;
	}
	int before = sgrt_cg_kernels(rt);
	SGRT_CHECK_CUDA(rt, cudaStreamBeginCapture(s0, cudaStreamCaptureModeRelaxed), 0);
	int rc = ${g}_run(M, io, ext);
	cudaError_t e = cudaStreamEndCapture(s0, &graph);
	if (rc == SGRT_OK)
		rc = sgrt_check_cuda(rt, e, "cudaStreamEndCapture", 0);
	if (rc == SGRT_OK)
		rc = sgrt_check_cuda(rt, cudaGraphInstantiate(&M->exec, graph, 0),
		                     "cudaGraphInstantiate", 0);
	if (graph)
		(void)cudaGraphDestroy(graph);
	if (rc != SGRT_OK)
		return rc;
	M->graph_kernels = sgrt_cg_kernels(rt) - before;
	sgrt_cg_add_kernels(rt, -M->graph_kernels);
	memcpy(M->graph_io, io, sizeof M->graph_io);
	if (${next_count})
		memcpy(M->graph_ext, ext, ${next_count} * sizeof *ext);
	return SGRT_OK;
}

static int
${g}_graph_run(${g}_model *M, void *const *io, const cudaEvent_t *ext)
{
	SgrtModel *rt = M->rt;
	if (M->calls++ == 0 || !sgrt_cg_capturable(rt))
		return ${g}_run(M, io, ext);
	if (!M->exec || memcmp(M->graph_io, io, sizeof M->graph_io) != 0 ||
	    (${next_count} && memcmp(M->graph_ext, ext, ${next_count} * sizeof *ext) != 0))
		SGRT_TRY(${g}_capture(M, io, ext));
	SGRT_CHECK_CUDA(rt, cudaGraphLaunch(M->exec, sgrt_stream(rt, 0)), 0);
	sgrt_cg_add_kernels(rt, M->graph_kernels);
	return SGRT_OK;
}
//@ call

/* One call on the caller's `stream` (the graph's `default`): io[i] is the
 * address of ${g}_tensors[i] (inputs and outputs the caller's, params and
 * consts from ${g}_tensor), ext[] its ${next_text} extern events.  The call
 * is complete when `stream` reaches its end. */
extern "C" int
${g}_call_io(${g}_model *M, cudaStream_t stream, void *const *io, const cudaEvent_t *ext)
{
	int rc = sgrt_call_begin(M->rt, stream);
	if (rc == SGRT_OK)
		rc = ${runner}(M, io, ext);
	int end = sgrt_call_end(M->rt);
	return rc != SGRT_OK ? rc : end;
}

/* The same with typed arguments (f16 and bf16 as uint16_t): ${typed_doc}. */
extern "C" int
${g}_call(${g}_model *M, cudaStream_t stream${typed_params})
{
	void *io[${ntensors}];
	memcpy(io, M->owned, sizeof io);
${io_fill}
${?next_count}	const cudaEvent_t ext[${next}] = {${ext_list}};
${!next_count}	const cudaEvent_t *ext = NULL;
	return ${g}_call_io(M, stream, io, ext);
}
//@ program

/* Graph ${graph} for the driver (sgrt_main). */
static int
${g}_prog_create(void **model, int device)
{
	${g}_model *M = NULL;
	int rc = ${g}_create(&M, device);
	*model = M;
	return rc;
}

static void
${g}_prog_destroy(void *model)
{
	${g}_destroy((${g}_model *)model);
}

static SgrtModel *
${g}_prog_runtime(void *model)
{
	return model ? ((${g}_model *)model)->rt : NULL;
}

static void *
${g}_prog_tensor(void *model, int i)
{
	return ${g}_tensor((${g}_model *)model, i);
}

static int
${g}_prog_call(void *model, cudaStream_t stream, void *const *io, const cudaEvent_t *ext)
{
	return ${g}_call_io((${g}_model *)model, stream, io, ext);
}

static const SgrtProgram ${g}_program = {
	"${graph}", ${world}, ${g}_tensors, ${ntensors}, ${next_count},
	${g}_prog_create, ${g}_prog_destroy, ${g}_prog_runtime, ${g}_prog_tensor,
	${g}_prog_call,
};
//@ main

/* The driver (interface.md, "The driver") of graph ${graph}:
 *   ./prog [--params P] [--inputs I] [--out O] [--steps N] [--bench N]
 *          [--seed S] [--trace T.json] [--device K] */
int
main(int argc, char **argv)
{
	return sgrt_main(argc, argv, &${g}_program);
}
//@ header_top
/* Generated by sgc ${version} from ${source}: do not edit.
 * The C API of its graphs; the code is in the .cu file sgc wrote with it.
 * Per graph G: G_create, G_load (params and consts from safetensors),
 * G_call (one call on the caller's stream), G_save, G_peak_bytes,
 * G_last_error, G_destroy.  Functions return 0 or an SGRT_E* code
 * (runtime/sgrt.h).  Each graph's declarations have their own guard,
 * SGC_API_G: headers of different graphs may be included together, and
 * the same graph's twice. */
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct SgrtModel SgrtModel;
//@ header_graph

/* graph ${graph} (${where}): ${typed_doc}.
 * ${g}_call_io's io[] holds its ${ntensors} tensors in the .cu's
 * ${g}_tensors order: the inputs and outputs as ${g}_call takes them, then
 * params, consts and optimizer state (their addresses: ${g}_tensor). */
#ifndef SGC_API_${g}
#define SGC_API_${g}
typedef struct ${g}_model ${g}_model;
int ${g}_create(${g}_model **out, int device);
void ${g}_destroy(${g}_model *m);
int ${g}_load(${g}_model *m, const char *params_path, uint64_t seed);
int ${g}_save(${g}_model *m, const char *path);
int ${g}_call(${g}_model *m, cudaStream_t stream${typed_params});
int ${g}_call_io(${g}_model *m, cudaStream_t stream, void *const *io,
        const cudaEvent_t *ext);
void *${g}_tensor(${g}_model *m, int i);
size_t ${g}_peak_bytes(${g}_model *m);
const char *${g}_last_error(${g}_model *m);
SgrtModel *${g}_runtime(${g}_model *m);
#endif
//@ header_bottom

#ifdef __cplusplus
}
#endif
