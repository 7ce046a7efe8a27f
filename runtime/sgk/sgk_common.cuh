/*
 * sgk_common.cuh - what every file of the kernel library shares: element
 * types and their conversions to and from the accumulation type, aligned
 * register vectors for 16-byte loads and stores, warp and block
 * reductions, and the launch-error check of the host launchers.
 *
 * Every other file of the library includes it, so `#include
 * "sgk/sgk_rows.cuh"` works on its own.  Device code compiles under NVRTC
 * (__CUDACC_RTC__): host launchers are left out there.  Everything is
 * named sgk_* (device) or sg_* (host launchers), so nothing clashes with
 * sgk_device.cuh or a generated file's names.
 */
#ifndef SGK_COMMON_CUH
#define SGK_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef __CUDACC_RTC__
#include <cuda_runtime.h>
#endif

#define SGK_DEV static __device__ __forceinline__
#define SGK_INF __int_as_float(0x7f800000)
#define SGK_LOG2E 1.4426950408889634f
#define SGK_LN2 0.6931471805599453f

typedef long long sgk_i64;

/* The accumulation type of an element type: float, or double for f64. */
template <class T> struct sgk_acc { typedef float type; };
template <> struct sgk_acc<double> { typedef double type; };

/* Element to accumulator. */
SGK_DEV float sgk_tof(float x) { return x; }
SGK_DEV float sgk_tof(__half x) { return __half2float(x); }
SGK_DEV float sgk_tof(__nv_bfloat16 x) { return __bfloat162float(x); }
SGK_DEV double sgk_tof(double x) { return x; }

/* Accumulator to element, rounding to nearest even. */
template <class T> SGK_DEV T sgk_cvt(float x);
template <> __device__ __forceinline__ float sgk_cvt<float>(float x) { return x; }
template <> __device__ __forceinline__ double sgk_cvt<double>(float x) { return x; }
template <> __device__ __forceinline__ __half sgk_cvt<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 sgk_cvt<__nv_bfloat16>(float x)
{
	return __float2bfloat16_rn(x);
}
template <class T> SGK_DEV T sgk_cvt(double x) { return sgk_cvt<T>((float)x); }
template <> __device__ __forceinline__ double sgk_cvt<double>(double x) { return x; }

/* Math in the accumulation type. */
SGK_DEV float sgk_exp(float x) { return expf(x); }
SGK_DEV double sgk_exp(double x) { return exp(x); }
SGK_DEV float sgk_log(float x) { return logf(x); }
SGK_DEV double sgk_log(double x) { return log(x); }
SGK_DEV float sgk_sqrt(float x) { return sqrtf(x); }
SGK_DEV double sgk_sqrt(double x) { return sqrt(x); }
SGK_DEV float sgk_max(float a, float b) { return fmaxf(a, b); }
SGK_DEV double sgk_max(double a, double b) { return fmax(a, b); }

/* Asynchronous copies, global to shared memory (sm_80 and later). */

/* The shared-memory address of a generic pointer into shared memory. */
SGK_DEV unsigned sgk_smem_addr(const void *p)
{
	return (unsigned)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronously; src_bytes 0 writes zeros. */
SGK_DEV void sgk_cp_async16(void *dst, const void *src, int src_bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sgk_smem_addr(dst)),
	             "l"(src), "r"(src_bytes)
	             : "memory");
}

/* 4 bytes global -> shared, asynchronously; src_bytes 0 writes zeros. */
SGK_DEV void sgk_cp_async4(void *dst, const void *src, int src_bytes)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sgk_smem_addr(dst)),
	             "l"(src), "r"(src_bytes)
	             : "memory");
}

/* Closes the group of this thread's cp.async copies issued so far. */
SGK_DEV void sgk_cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's groups are still in flight. */
template <int N>
SGK_DEV void sgk_cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* V elements of T in registers, aligned so that a load or store of the
 * whole is one instruction when it spans 16 bytes or fewer (V and
 * sizeof(T) powers of two). */
template <int V, class T>
struct alignas(V * sizeof(T) < 16 ? V * sizeof(T) : 16) sgk_reg {
	T v[V];
};

/* Loads V consecutive elements at p (aligned to the vector). */
template <int V, class T>
SGK_DEV sgk_reg<V, T> sgk_ldv(const T *p)
{
	return *reinterpret_cast<const sgk_reg<V, T> *>(p);
}

/* Stores V consecutive elements at p (aligned to the vector). */
template <int V, class T>
SGK_DEV void sgk_stv(T *p, const sgk_reg<V, T> &r)
{
	*reinterpret_cast<sgk_reg<V, T> *>(p) = r;
}

/* Whether p is aligned to `bytes` (a power of two). */
SGK_DEV bool sgk_aligned(const void *p, unsigned bytes)
{
	return ((unsigned long long)p & (bytes - 1)) == 0;
}

/* Sum, max: over the W lanes of a group (W a power of two up to 32, the
 * groups aligned within the warp).  Every lane of the group gets it. */
template <int W, class A>
SGK_DEV A sgk_group_sum(A v)
{
#pragma unroll
	for (int o = W / 2; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
template <int W, class A>
SGK_DEV A sgk_group_max(A v)
{
#pragma unroll
	for (int o = W / 2; o > 0; o >>= 1)
		v = sgk_max(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Sum or max over the TPR threads that share a row: a group of lanes
 * (TPR <= 32), or the whole block (TPR == blockDim.x, a multiple of 32 up
 * to 1024).  All threads of the block must call it together when TPR >
 * 32.  `part` is __shared__ scratch of 32 slots; the leading barrier lets
 * a previous call's readers finish first. */
template <int TPR, class A>
SGK_DEV A sgk_row_sum(A v, A *part)
{
	v = sgk_group_sum<(TPR < 32 ? TPR : 32)>(v);
	if (TPR <= 32)
		return v;
	const int lane = threadIdx.x & 31, nw = TPR / 32;
	__syncthreads();
	if (lane == 0)
		part[threadIdx.x >> 5] = v;
	__syncthreads();
	v = lane < nw ? part[lane] : (A)0;
	return sgk_group_sum<32>(v);
}
template <int TPR, class A>
SGK_DEV A sgk_row_max(A v, A *part)
{
	v = sgk_group_max<(TPR < 32 ? TPR : 32)>(v);
	if (TPR <= 32)
		return v;
	const int lane = threadIdx.x & 31, nw = TPR / 32;
	__syncthreads();
	if (lane == 0)
		part[threadIdx.x >> 5] = v;
	__syncthreads();
	v = lane < nw ? part[lane] : (A)-SGK_INF;
	return sgk_group_max<32>(v);
}

#ifndef __CUDACC_RTC__
/* The error of the launch just made (and of nothing before it that
 * cudaGetLastError had not reported yet). */
static inline cudaError_t sgk_launched(void)
{
	return cudaGetLastError();
}

/* Multiprocessors of the current device (for grid sizes). */
static inline int sgk_num_sms(void)
{
	int dev = 0, n = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
		n = 132;
	return n;
}

/* Whether host pointer value p is aligned to `bytes`. */
static inline bool sgk_host_aligned(const void *p, unsigned bytes)
{
	return ((unsigned long long)p & (bytes - 1)) == 0;
}
#endif

#endif /* SGK_COMMON_CUH */
