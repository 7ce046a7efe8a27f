// Microbenchmark (bench/kernels/README.md): what issuing resnet18's
// convolutions costs the host.  Each of the step's 20 convolutions (B = 128,
// 224 x 224, bf16, channels last, as bench/resnet18.sg runs them) in its
// three directions (forward, data gradient but for the stem, filter
// gradient), through cuDNN's two APIs:
//   legacy   cudnnConvolutionForward / BackwardData / BackwardFilter with the
//            descriptors made once and the first deterministic algorithm of
//            the _v7 heuristics, as libsgrt's sgrt_conv_cudnn.c calls them
//   graph    the operation graph of one convolution node, its execution plan
//            (heuristic mode A's first configuration that makes one) built
//            once, and per call a variant pack and cudnnBackendExecute, as
//            libsgrt's attention is called (sgrt_attn_cudnn.c)
// Per shape and direction: the host's time to issue one call (median of 50
// calls issued behind a long kernel, so that the GPU never waits), and the
// GPU's time of one call (50 back to back between two events).  Then a
// step's totals, each shape counted as often as resnet18 has it: when the
// host's issue of a step's convolutions outlasts their GPU time, the step
// waits on the host.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <chrono>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("cuda %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)
#define DN(x) do { cudnnStatus_t e_ = (x); if (e_) { printf("cudnn %s line %d\n", cudnnGetErrorString(e_), __LINE__); exit(1); } } while (0)

struct Shape {
	const char *name;
	int c, k, hw, r, stride, pad, count, data; // input channels, output, input size, filter, ...
};
// resnet18 at B = 128: each distinct convolution, how often a step has it,
// and whether its data gradient is computed (not for the stem's image)
static const Shape shapes[] = {
	{"stem 3->64 7x7 /2 at 224", 3, 64, 224, 7, 2, 3, 1, 0},
	{"64->64 3x3 at 56", 64, 64, 56, 3, 1, 1, 4, 1},
	{"64->128 3x3 /2 at 56", 64, 128, 56, 3, 2, 1, 1, 1},
	{"64->128 1x1 /2 at 56", 64, 128, 56, 1, 2, 0, 1, 1},
	{"128->128 3x3 at 28", 128, 128, 28, 3, 1, 1, 3, 1},
	{"128->256 3x3 /2 at 28", 128, 256, 28, 3, 2, 1, 1, 1},
	{"128->256 1x1 /2 at 28", 128, 256, 28, 1, 2, 0, 1, 1},
	{"256->256 3x3 at 14", 256, 256, 14, 3, 1, 1, 3, 1},
	{"256->512 3x3 /2 at 14", 256, 512, 14, 3, 2, 1, 1, 1},
	{"256->512 1x1 /2 at 14", 256, 512, 14, 1, 2, 0, 1, 1},
	{"512->512 3x3 at 7", 512, 512, 7, 3, 1, 1, 3, 1},
};
static const int B = 128, CALLS = 50;
enum { FWD, DATA, FILTER };
static const char *dirname[] = {"forward", "data", "filter"};

__global__ void spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
}

// One convolution in one direction: its operands and both APIs' state.
struct Conv {
	const Shape *s;
	int dir, oh;
	void *x, *w, *y, *ws = nullptr;
	size_t ws_bytes = 0;
	// legacy
	cudnnTensorDescriptor_t xd, yd;
	cudnnFilterDescriptor_t wd;
	cudnnConvolutionDescriptor_t cd;
	int algo = -1;
	// graph
	cudnnBackendDescriptor_t plan = nullptr;
	size_t gws_bytes = 0;
	void *gws = nullptr;
};

// The descriptors made while building plans, destroyed once the plans are.
static std::vector<cudnnBackendDescriptor_t> made;

static cudnnBackendDescriptor_t mk(cudnnBackendDescriptorType_t t)
{
	cudnnBackendDescriptor_t d;
	DN(cudnnBackendCreateDescriptor(t, &d));
	made.push_back(d);
	return d;
}

// A channels-last bf16 tensor [n, c, h, w] (logical sizes, NHWC strides).
static cudnnBackendDescriptor_t tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w)
{
	cudnnBackendDescriptor_t t = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	int64_t dim[4] = {n, c, h, w}, str[4] = {h * w * c, 1, w * c, c}, align = 16;
	cudnnDataType_t dt = CUDNN_DATA_BFLOAT16;
	DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
	DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim));
	DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
	DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
	DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
	DN(cudnnBackendFinalize(t));
	return t;
}

enum { UX = 1, UW, UY };

static void make_graph_plan(cudnnHandle_t h, Conv &v)
{
	const Shape &s = *v.s;
	cudnnBackendDescriptor_t xt = tensor(UX, B, s.c, s.hw, s.hw);
	cudnnBackendDescriptor_t wt = tensor(UW, s.k, s.c, s.r, s.r);
	cudnnBackendDescriptor_t yt = tensor(UY, B, s.k, v.oh, v.oh);
	cudnnBackendDescriptor_t cd = mk(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
	int64_t sp = 2, pad[2] = {s.pad, s.pad}, str[2] = {s.stride, s.stride}, dil[2] = {1, 1};
	cudnnDataType_t comp = CUDNN_DATA_FLOAT;
	cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
	DN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
	DN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
	DN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sp));
	DN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
	DN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
	DN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
	DN(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
	DN(cudnnBackendFinalize(cd));
	float alpha = 1.0f, beta = 0.0f;
	// per direction: the operation, then its x, w, y, conv, alpha, beta
	static const cudnnBackendDescriptorType_t optype[3] = {
		CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
		CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
		CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
	};
	static const cudnnBackendAttributeName_t at[3][6] = {
		{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
		{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
		{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
		 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
	};
	cudnnBackendDescriptor_t op = mk(optype[v.dir]);
	const cudnnBackendDescriptor_t desc[4] = {xt, wt, yt, cd};
	for (int i = 0; i < 4; i++)
		DN(cudnnBackendSetAttribute(op, at[v.dir][i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc[i]));
	DN(cudnnBackendSetAttribute(op, at[v.dir][4], CUDNN_TYPE_FLOAT, 1, &alpha));
	DN(cudnnBackendSetAttribute(op, at[v.dir][5], CUDNN_TYPE_FLOAT, 1, &beta));
	DN(cudnnBackendFinalize(op));
	cudnnBackendDescriptor_t g = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	DN(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
	DN(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
	DN(cudnnBackendFinalize(g));
	cudnnBackendDescriptor_t heur = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
	cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
	DN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
	DN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
	DN(cudnnBackendFinalize(heur));
	cudnnBackendDescriptor_t cfg[8];
	for (int i = 0; i < 8; i++)
		cfg[i] = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	int64_t n = 0;
	DN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 8, &n, cfg));
	for (int64_t i = 0; i < n && !v.plan; i++) {
		cudnnBackendDescriptor_t p;
		DN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p));
		int64_t ws = 0;
		if (cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) == 0 &&
		    cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]) == 0 &&
		    cudnnBackendFinalize(p) == 0 &&
		    cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, nullptr, &ws) == 0) {
			v.plan = p;
			v.gws_bytes = (size_t)ws;
		} else {
			cudnnBackendDestroyDescriptor(p);
		}
	}
	if (!v.plan) {
		printf("%s %s: no execution plan among %lld configurations\n", s.name, dirname[v.dir], (long long)n);
		exit(1);
	}
	if (v.gws_bytes)
		CK(cudaMalloc(&v.gws, v.gws_bytes));
	for (cudnnBackendDescriptor_t d : made)
		cudnnBackendDestroyDescriptor(d);
	made.clear();
}

static void make_legacy(cudnnHandle_t h, Conv &v)
{
	const Shape &s = *v.s;
	DN(cudnnCreateTensorDescriptor(&v.xd));
	DN(cudnnCreateTensorDescriptor(&v.yd));
	DN(cudnnCreateFilterDescriptor(&v.wd));
	DN(cudnnCreateConvolutionDescriptor(&v.cd));
	DN(cudnnSetTensor4dDescriptor(v.xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, B, s.c, s.hw, s.hw));
	DN(cudnnSetTensor4dDescriptor(v.yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, B, s.k, v.oh, v.oh));
	DN(cudnnSetFilter4dDescriptor(v.wd, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, s.k, s.c, s.r, s.r));
	DN(cudnnSetConvolution2dDescriptor(v.cd, s.pad, s.pad, s.stride, s.stride, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
	DN(cudnnSetConvolutionMathType(v.cd, CUDNN_TENSOR_OP_MATH));
	int n = 0;
	size_t mem = 0;
	// the first deterministic algorithm, as libsgrt takes
#define FIRST(perf)                                                                       \
	for (int i = 0; i < n && v.algo < 0; i++)                                         \
		if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC) { \
			v.algo = (int)perf[i].algo;                                       \
			mem = perf[i].memory;                                             \
			DN(cudnnSetConvolutionMathType(v.cd, perf[i].mathType));          \
		}
	if (v.dir == FWD) {
		cudnnConvolutionFwdAlgoPerf_t perf[16];
		DN(cudnnGetConvolutionForwardAlgorithm_v7(h, v.xd, v.wd, v.cd, v.yd, 16, &n, perf));
		FIRST(perf);
	} else if (v.dir == DATA) {
		cudnnConvolutionBwdDataAlgoPerf_t perf[16];
		DN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, v.wd, v.yd, v.cd, v.xd, 16, &n, perf));
		FIRST(perf);
	} else {
		cudnnConvolutionBwdFilterAlgoPerf_t perf[16];
		DN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, v.xd, v.yd, v.cd, v.wd, 16, &n, perf));
		FIRST(perf);
	}
#undef FIRST
	if (v.algo < 0) {
		printf("%s %s: no deterministic algorithm\n", s.name, dirname[v.dir]);
		exit(1);
	}
	v.ws_bytes = mem;
	if (mem)
		CK(cudaMalloc(&v.ws, mem));
}

static void call_legacy(cudnnHandle_t h, Conv &v)
{
	float one = 1.0f, zero = 0.0f;
	if (v.dir == FWD)
		DN(cudnnConvolutionForward(h, &one, v.xd, v.x, v.wd, v.w, v.cd, (cudnnConvolutionFwdAlgo_t)v.algo, v.ws, v.ws_bytes, &zero, v.yd, v.y));
	else if (v.dir == DATA)
		DN(cudnnConvolutionBackwardData(h, &one, v.wd, v.w, v.yd, v.y, v.cd, (cudnnConvolutionBwdDataAlgo_t)v.algo, v.ws, v.ws_bytes, &zero, v.xd, v.x));
	else
		DN(cudnnConvolutionBackwardFilter(h, &one, v.xd, v.x, v.yd, v.y, v.cd, (cudnnConvolutionBwdFilterAlgo_t)v.algo, v.ws, v.ws_bytes, &zero, v.wd, v.w));
}

// A variant pack per call, as libsgrt's attention makes one.
static void call_graph(cudnnHandle_t h, Conv &v)
{
	int64_t uid[3] = {UX, UW, UY};
	void *ptr[3] = {v.x, v.w, v.y};
	cudnnBackendDescriptor_t vp;
	DN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
	DN(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uid));
	DN(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptr));
	DN(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &v.gws));
	DN(cudnnBackendFinalize(vp));
	DN(cudnnBackendExecute(h, v.plan, vp));
	DN(cudnnBackendDestroyDescriptor(vp));
}

// Host microseconds to issue one call (median of CALLS, issued behind a
// kernel long enough that the GPU never waits for them), and the GPU's
// microseconds a call (CALLS back to back between two events).
template <class F>
static void time_calls(F call, cudaStream_t st, double *host_us, double *gpu_us)
{
	call();
	CK(cudaStreamSynchronize(st));
	std::vector<double> t;
	spin<<<1, 1, 0, st>>>(100000000LL);  // 50-80 ms: outlasts the issue of CALLS calls
	for (int i = 0; i < CALLS; i++) {
		auto a = std::chrono::steady_clock::now();
		call();
		auto b = std::chrono::steady_clock::now();
		t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
	}
	CK(cudaStreamSynchronize(st));
	std::sort(t.begin(), t.end());
	*host_us = t[CALLS / 2];
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaEventRecord(e0, st));
	for (int i = 0; i < CALLS; i++)
		call();
	CK(cudaEventRecord(e1, st));
	CK(cudaEventSynchronize(e1));
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	*gpu_us = ms * 1000.0 / CALLS;
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
}

int main()
{
	cudaStream_t st;
	CK(cudaStreamCreate(&st));
	cudnnHandle_t h;
	DN(cudnnCreate(&h));
	DN(cudnnSetStream(h, st));
	printf("cuDNN %zu; B = %d, bf16, channels last; host us to issue a call (median of %d), GPU us a call\n",
	       cudnnGetVersion(), B, CALLS);
	printf("%-26s %-8s %5s | %9s %9s | %9s %9s\n", "convolution", "dir", "algo", "legacy:host", "gpu",
	       "graph:host", "gpu");
	double tot[4] = {0, 0, 0, 0};  // legacy host, legacy gpu, graph host, graph gpu (a step)
	for (const Shape &s : shapes) {
		const int oh = (s.hw + 2 * s.pad - s.r) / s.stride + 1;
		void *x, *w, *y;
		CK(cudaMalloc(&x, (size_t)B * s.c * s.hw * s.hw * 2));
		CK(cudaMalloc(&w, (size_t)s.k * s.c * s.r * s.r * 2));
		CK(cudaMalloc(&y, (size_t)B * s.k * oh * oh * 2));
		CK(cudaMemset(x, 0x3c, (size_t)B * s.c * s.hw * s.hw * 2));  // small finite bf16 values
		CK(cudaMemset(w, 0x3c, (size_t)s.k * s.c * s.r * s.r * 2));
		CK(cudaMemset(y, 0x3c, (size_t)B * s.k * oh * oh * 2));
		for (int dir = FWD; dir <= FILTER; dir++) {
			if (dir == DATA && !s.data)
				continue;
			Conv v;
			v.s = &s;
			v.dir = dir;
			v.oh = oh;
			v.x = x;
			v.w = w;
			v.y = y;
			make_legacy(h, v);
			make_graph_plan(h, v);
			double lh, lg, gh, gg;
			time_calls([&] { call_legacy(h, v); }, st, &lh, &lg);
			time_calls([&] { call_graph(h, v); }, st, &gh, &gg);
			printf("%-26s %-8s %5d | %9.1f %9.1f | %9.1f %9.1f\n", s.name, dirname[dir], v.algo, lh, lg, gh, gg);
			tot[0] += s.count * lh;
			tot[1] += s.count * lg;
			tot[2] += s.count * gh;
			tot[3] += s.count * gg;
			cudnnDestroyTensorDescriptor(v.xd);
			cudnnDestroyTensorDescriptor(v.yd);
			cudnnDestroyFilterDescriptor(v.wd);
			cudnnDestroyConvolutionDescriptor(v.cd);
			cudnnBackendDestroyDescriptor(v.plan);
			if (v.ws)
				CK(cudaFree(v.ws));
			if (v.gws)
				CK(cudaFree(v.gws));
		}
		CK(cudaFree(x));
		CK(cudaFree(w));
		CK(cudaFree(y));
	}
	printf("a step's %d convolution calls: legacy host %.3f ms, GPU %.3f ms; graph host %.3f ms, GPU %.3f ms\n",
	       20 + 19 + 20, tot[0] / 1000, tot[1] / 1000, tot[2] / 1000, tot[3] / 1000);
	DN(cudnnDestroy(h));
	return 0;
}
