/*
 * sgrt_blas_dev.cu - the device half of sgrt_blas.c: the activation
 * epilogues as one kernel, for a product whose epilogue cuBLASLt declines
 * (sgrt_gemm then runs the product without it, into D, and this after
 * it on the same stream).  The formulas are sgk_pointwise.h's, the ones
 * the generated kernels and `sgc run` use; the element is read from D as
 * cuBLASLt wrote it (rounded to the dtype), as an unfused program reads it.
 *
 *   SGRT_EPI_RELU, SGRT_EPI_GELU   D = act(D)
 *   SGRT_EPI_GELU_AUX              aux = D, D = gelu(D)
 *   SGRT_EPI_DGELU                 D = gelu_backward(D, aux)
 */
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "sgk/sgk_pointwise.h"

/* (the values of sgrt.h's SgrtDType and SGRT_EPI_*, which is C: checked
 * against it in sgrt_blas.c) */
enum { F32 = 1, F16 = 2, BF16 = 3 };
enum { RELU = 1, GELU = 2, GELU_AUX = 3, DGELU = 4 };

static __device__ __forceinline__ float ld(float x) { return x; }
static __device__ __forceinline__ float ld(__half x) { return __half2float(x); }
static __device__ __forceinline__ float ld(__nv_bfloat16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ void st(float *p, float x) { *p = x; }
static __device__ __forceinline__ void st(__half *p, float x) { *p = __float2half_rn(x); }
static __device__ __forceinline__ void st(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }

/* The epilogue act over the rows x cols matrix D (row stride ldc) and
 * aux (row stride ldaux). */
template <typename T>
static __global__ void
epilogue(int act, T *d, int64_t ldc, T *aux, int64_t ldaux, int64_t rows, int64_t cols)
{
	int64_t n = rows * cols;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = i / cols, c = i % cols;
		T *pd = d + r * ldc + c;
		float x = ld(*pd);
		switch (act) {
		case RELU: st(pd, sgk_relu_f(x)); break;
		case GELU: st(pd, sgk_gelu_tanh_f(x)); break;
		case GELU_AUX:
			aux[r * ldaux + c] = *pd;
			st(pd, sgk_gelu_tanh_f(x));
			break;
		case DGELU: st(pd, sgk_gelu_tanh_backward_f(x, ld(aux[r * ldaux + c]))); break;
		}
	}
}

template <typename T>
static int
launch(int act, void *d, int64_t ldc, void *aux, int64_t ldaux, int64_t rows, int64_t cols,
       cudaStream_t s)
{
	int64_t n = rows * cols, blocks = (n + 255) / 256;
	if (blocks > 65536)
		blocks = 65536;
	epilogue<T><<<(unsigned)blocks, 256, 0, s>>>(act, (T *)d, ldc, (T *)aux, ldaux, rows, cols);
	return (int)cudaGetLastError();
}

/* Runs epilogue act of dtype over D and aux on stream s; a cudaError_t. */
extern "C" int
sgrt_blas_epilogue(int dtype, int act, void *d, int64_t ldc, void *aux, int64_t ldaux,
                   int64_t rows, int64_t cols, cudaStream_t s)
{
	if (rows <= 0 || cols <= 0)
		return (int)cudaSuccess;
	switch (dtype) {
	case F32: return launch<float>(act, d, ldc, aux, ldaux, rows, cols, s);
	case F16: return launch<__half>(act, d, ldc, aux, ldaux, rows, cols, s);
	case BF16: return launch<__nv_bfloat16>(act, d, ldc, aux, ldaux, rows, cols, s);
	default: return (int)cudaErrorInvalidValue;
	}
}
