/*
 * instantiate.cu - instantiates every host launcher of the kernel library
 * (runtime/sgk/) for one element type, so that compiling
 * this file compiles every kernel the launchers reach:
 *
 *   nvcc -arch=sm_90 -std=c++17 -DSGK_TEST_T=__nv_bfloat16 -Iruntime/sgk \
 *        -c tests/gpu/kernels/instantiate.cu
 *
 * SGK_TEST_T: float, double, __half or __nv_bfloat16 (default __nv_bfloat16).
 * SGK_ONLY_ATTENTION, SGK_ONLY_ROWS, SGK_ONLY_OPTIM, SGK_ONLY_ELEMENTWISE,
 * SGK_ONLY_CONV, SGK_ONLY_GEMM: one family (default all; not optim for
 * double; the small product is f32 whatever SGK_TEST_T says).
 * Used by tests/meson.build as a compile-only check where nvcc is found.
 */
#include "sgk_common.cuh"

#ifndef SGK_TEST_T
#define SGK_TEST_T __nv_bfloat16
#endif
#if !defined(SGK_ONLY_ATTENTION) && !defined(SGK_ONLY_ROWS) && !defined(SGK_ONLY_OPTIM) && \
        !defined(SGK_ONLY_ELEMENTWISE) && !defined(SGK_ONLY_CONV) && !defined(SGK_ONLY_GEMM)
#define SGK_ALL 1
#else
#define SGK_ALL 0
#endif

#if defined(SGK_ONLY_ATTENTION) || SGK_ALL
#include "sgk_attention.cuh"
template cudaError_t sg_launch_flash_fwd<SGK_TEST_T>(const SgFlashParams *, cudaStream_t);
template cudaError_t sg_launch_flash_bwd<SGK_TEST_T>(const SgFlashParams *, cudaStream_t);
#endif

#if defined(SGK_ONLY_ROWS) || SGK_ALL
#include "sgk_rows.cuh"
template cudaError_t sg_launch_softmax_fwd<SGK_TEST_T>(const SGK_TEST_T *, SGK_TEST_T *, long long, int, int,
                                                  cudaStream_t);
template cudaError_t sg_launch_softmax_bwd<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, SGK_TEST_T *, long long,
                                                  int, int, cudaStream_t);
template cudaError_t sg_launch_layer_norm_fwd<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, const SGK_TEST_T *,
                                                     SGK_TEST_T *, sgk_acc<SGK_TEST_T>::type *,
                                                     sgk_acc<SGK_TEST_T>::type *, long long, int, float,
                                                     int, cudaStream_t);
template cudaError_t sg_launch_layer_norm_fwd_add<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, SGK_TEST_T *,
                                                         const SGK_TEST_T *, const SGK_TEST_T *, SGK_TEST_T *,
                                                         sgk_acc<SGK_TEST_T>::type *,
                                                         sgk_acc<SGK_TEST_T>::type *, long long, int,
                                                         float, int, cudaStream_t);
template cudaError_t sg_launch_layer_norm_bwd<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, const SGK_TEST_T *,
                                                     const sgk_acc<SGK_TEST_T>::type *,
                                                     const sgk_acc<SGK_TEST_T>::type *, SGK_TEST_T *, SGK_TEST_T *,
                                                     SGK_TEST_T *, void *, long long, int, int,
                                                     cudaStream_t);
template cudaError_t sg_launch_layer_norm_bwd_x<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, const SGK_TEST_T *,
                                                       SGK_TEST_T *, long long, int, float, int,
                                                       cudaStream_t);
template cudaError_t sg_launch_layer_norm_bwd_fused<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *,
                                                           const SGK_TEST_T *, const SGK_TEST_T *, SGK_TEST_T *,
                                                           SGK_TEST_T *, SGK_TEST_T *, void *, long long,
                                                           int, float, int, cudaStream_t);
template cudaError_t sg_launch_cross_entropy_lse<SGK_TEST_T>(const SGK_TEST_T *, sgk_acc<SGK_TEST_T>::type *,
                                                        long long, int, cudaStream_t);
template cudaError_t sg_launch_cross_entropy_fwd<SGK_TEST_T>(const SGK_TEST_T *, const long long *,
                                                        sgk_acc<SGK_TEST_T>::type *, SGK_TEST_T *, long long,
                                                        int, cudaStream_t);
template cudaError_t sg_launch_cross_entropy_bwd<SGK_TEST_T>(const SGK_TEST_T *, const long long *,
                                                        const sgk_acc<SGK_TEST_T>::type *, const SGK_TEST_T *,
                                                        SGK_TEST_T *, long long, int, cudaStream_t);
#endif

#if defined(SGK_ONLY_OPTIM) || SGK_ALL
#include "sgk_optim.cuh"
/* The optimizers take float, __half and __nv_bfloat16 (not double). */
typedef SGK_TEST_T sgk_opt_t;
template cudaError_t sg_launch_sgd<sgk_opt_t>(int, sgk_opt_t *const *, const sgk_opt_t *const *,
                                              sgk_opt_t *const *, const long long *, double, double,
                                              double, int, cudaStream_t);
template cudaError_t sg_launch_adamw<sgk_opt_t>(int, sgk_opt_t *const *, const sgk_opt_t *const *,
                                                sgk_opt_t *const *, sgk_opt_t *const *,
                                                float *const *, const long long *, double, double,
                                                double, double, double, cudaStream_t);
#endif

#if defined(SGK_ONLY_ELEMENTWISE) || SGK_ALL
#include "sgk_elementwise.cuh"
/* A body as the backend writes one: y = x * 2 + b, b broadcast. */
struct SgkCheckBody {
	const SGK_TEST_T *x, *b;
	SGK_TEST_T *y;
	template <int V>
	__device__ void run(const long long *off, const unsigned char *bc) const
	{
		sgk_reg<V, SGK_TEST_T> xv = sgk_ld<V>(x, off[0], bc[0]), bv = sgk_ld<V>(b, off[1], bc[1]), yv;
#pragma unroll
		for (int e = 0; e < V; e++)
			yv.v[e] = sgk_cvt<SGK_TEST_T>(sgk_tof(xv.v[e]) * 2.f + sgk_tof(bv.v[e]));
		sgk_st<V>(y, off[2], yv);
	}
};
template cudaError_t sg_launch_elementwise<16 / sizeof(SGK_TEST_T), 3, SgkCheckBody>(
        const SgEwShape<3> *, const SgkCheckBody &, cudaStream_t);
template void sg_ew_shape_init<3>(SgEwShape<3> *, int, const long long *,
                                  const long long (*)[SGK_EW_MAXR], const void *const *,
                                  const int *, int);
#endif

#if defined(SGK_ONLY_CONV) || SGK_ALL
#include "sgk_conv.cuh"
template cudaError_t sg_launch_conv2d_fwd<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, const SGK_TEST_T *,
                                                 SGK_TEST_T *, SgConvGeom, cudaStream_t);
template cudaError_t sg_launch_conv2d_bwd_input<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, SGK_TEST_T *,
                                                       SgConvGeom, cudaStream_t);
template cudaError_t sg_launch_conv2d_bwd_weight<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, SGK_TEST_T *,
                                                        SgConvGeom, cudaStream_t);
template cudaError_t sg_launch_pool2d_fwd<SGK_TEST_T>(const SGK_TEST_T *, SGK_TEST_T *, SgConvGeom, int,
                                                 cudaStream_t);
template cudaError_t sg_launch_pool2d_bwd<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, SGK_TEST_T *,
                                                 SgConvGeom, int, void *, cudaStream_t);
template cudaError_t sg_launch_maxpool2d_bwd_relu<SGK_TEST_T>(const SGK_TEST_T *, const SGK_TEST_T *, SGK_TEST_T *,
                                                         SgConvGeom, void *, cudaStream_t);
template cudaError_t sg_launch_to_layout<SGK_TEST_T>(const SGK_TEST_T *, SGK_TEST_T *, long long, long long,
                                                long long, int, cudaStream_t);
template size_t sg_batch_norm_workspace<SGK_TEST_T>(long long, long long, long long, int);
/* The running statistics (S) in T, and in float. */
template cudaError_t sg_launch_batch_norm_fwd<SGK_TEST_T, SGK_TEST_T>(
        const SGK_TEST_T *, const SGK_TEST_T *, const SGK_TEST_T *, const SGK_TEST_T *, const SGK_TEST_T *, SGK_TEST_T *,
        SGK_TEST_T *, SGK_TEST_T *, sgk_acc<SGK_TEST_T>::type *, long long, long long, long long, int, float,
        int, cudaStream_t, const SgBnRunning<SGK_TEST_T> &);
template cudaError_t sg_launch_batch_norm_bwd<SGK_TEST_T, float>(
        const SGK_TEST_T *, const SGK_TEST_T *, const float *, const float *, const SGK_TEST_T *, SGK_TEST_T *,
        SGK_TEST_T *, SGK_TEST_T *, sgk_acc<SGK_TEST_T>::type *, long long, long long, long long, int, float,
        int, cudaStream_t, const SgBnSgd<SGK_TEST_T> &);
#endif

#if defined(SGK_ONLY_GEMM) || SGK_ALL
#include "sgk_gemm.cuh"
template cudaError_t sg_launch_gemm_small<SgkGemmStore>(const float *, sgk_i64, const float *,
                                                        sgk_i64, sgk_i64, sgk_i64, sgk_i64, int,
                                                        SgkGemmStore, cudaStream_t);
#endif
