/*
 * sgk_optim.cuh - multi-tensor optimizer updates with torch.optim's
 * formulas: SGD (momentum, weight decay, Nesterov) and AdamW (bias
 * correction from a per-tensor f32 `step` on the device).
 *
 * One launch updates up to SGK_MT_TENSORS tensors: the host launcher cuts
 * each tensor into chunks of SGK_MT_CHUNK elements, one block a chunk, and
 * passes the table of pointers and chunks by value (under 4 KB of kernel
 * parameters), launching again when the table is full.  Parameters, grads
 * and states are all T (float, __half, __nv_bfloat16); arithmetic is in
 * f32, as PyTorch's opmath; 16-byte vectors where a tensor's pointers are
 * aligned, one element at a time otherwise.
 *
 *   sg_launch_sgd<T>(n, param, grad, momentum_buf, numel, lr, momentum,
 *                    weight_decay, nesterov, stream)
 *       n tensors; param, grad, momentum_buf, numel: host arrays of n
 *       (momentum_buf ignored, may be NULL, when momentum == 0).  Per
 *       torch.optim.SGD (dampening 0, maximize false):
 *           g = grad + weight_decay * p
 *           buf = momentum * buf + g;  g = nesterov ? g + momentum * buf : buf
 *           p = p - lr * g  (sgk_pointwise.h's sgk_sgd_step_f: p + (-lr) * g)
 *       PyTorch's first step sets buf = g: a buffer that starts as zeros
 *       gives exactly that (momentum * 0 + g), so fresh state is zeros.
 *
 *   sg_launch_adamw<T>(n, param, grad, exp_avg, exp_avg_sq, step, numel,
 *                      lr, beta1, beta2, eps, weight_decay, stream)
 *       step: host array of n device pointers to each tensor's f32 step
 *       count (opt.NAME.step), incremented by this call before the update
 *       (so zeros are a fresh optimizer's state).  Per torch.optim.AdamW
 *       (amsgrad false, maximize false), as its foreach implementation:
 *           p = p * (1 - lr * weight_decay)
 *           m = lerp(m, g, 1 - beta1);  v = v * beta2 + (1 - beta2) * g * g
 *           bc1 = 1 - beta1^step;  bc2 = 1 - beta2^step    (in double)
 *           p = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
 *       The hyper-parameters are doubles as Python's floats are.  As in
 *       PyTorch's foreach path (the default on CUDA), each step's result
 *       is rounded to T before the next step reads it.
 */
#ifndef SGK_OPTIM_CUH
#define SGK_OPTIM_CUH
#include "sgk_common.cuh"
#include "sgk_pointwise.h"
/* nvcc remarks on the helpers a program leaves unused: off here */
#pragma nv_diag_suppress 177

#define SGK_MT_TENSORS 36
#define SGK_MT_BLOCKS 320
#define SGK_MT_CHUNK 65536

/* The tensors and chunks of one launch: DEPTH pointers a tensor. */
template <int DEPTH>
struct SgkMtTable {
	void *ptr[DEPTH][SGK_MT_TENSORS];
	float *step[SGK_MT_TENSORS];       /* AdamW only */
	sgk_i64 numel[SGK_MT_TENSORS];
	unsigned char tensor[SGK_MT_BLOCKS];
	int chunk[SGK_MT_BLOCKS];
};

/* The element range [lo, hi) of this block's chunk; whether every pointer
 * is aligned for vectors of V elements of T. */
template <int DEPTH, class T, int V>
SGK_DEV bool sgk_mt_range(const SgkMtTable<DEPTH> &tab, int *ti, sgk_i64 *lo, sgk_i64 *hi)
{
	const int t = tab.tensor[blockIdx.x];
	*ti = t;
	*lo = (sgk_i64)tab.chunk[blockIdx.x] * SGK_MT_CHUNK;
	const sgk_i64 e = *lo + SGK_MT_CHUNK;
	*hi = e < tab.numel[t] ? e : tab.numel[t];
	bool ok = true;
#pragma unroll
	for (int d = 0; d < DEPTH; d++)
		ok = ok && (!tab.ptr[d][t] || sgk_aligned(tab.ptr[d][t], V * sizeof(T)));
	return ok;
}

/* ------------------------------------------------------------------ SGD */

/* x rounded to T and back: what PyTorch's foreach kernels store between
 * their steps (nothing for float). */
template <class T>
SGK_DEV float sgk_rnd(float x)
{
	return sgk_tof(sgk_cvt<T>(x));
}

/* One element of SGD; buf unused when momentum is 0.  Each foreach step
 * of torch.optim.SGD stores its result in T: rounded the same way. */
template <class T>
SGK_DEV void sgk_sgd_math(float &p, float g, float &buf, float lr, float mom, float wd,
                          bool nesterov)
{
	if (wd != 0.f)
		g = sgk_rnd<T>(g + wd * p);
	if (mom != 0.f) {
		buf = sgk_rnd<T>(sgk_rnd<T>(buf * mom) + g);
		g = nesterov ? sgk_rnd<T>(g + mom * buf) : buf;
	}
	p = sgk_rnd<T>(sgk_sgd_step_f(p, -lr, g));
}

/* Vectors of V elements: V consecutive elements of each operand. */
template <class T, int V>
SGK_DEV void sgk_sgd_vec(T *p, const T *g, T *b, sgk_i64 i, float lr, float mom, float wd,
                         bool nesterov)
{
	sgk_reg<V, T> pr = sgk_ldv<V>(p + i), gr = sgk_ldv<V>(g + i), br;
	if (mom != 0.f)
		br = sgk_ldv<V>(b + i);
#pragma unroll
	for (int e = 0; e < V; e++) {
		float pf = sgk_tof(pr.v[e]), bf = mom != 0.f ? sgk_tof(br.v[e]) : 0.f;
		sgk_sgd_math<T>(pf, sgk_tof(gr.v[e]), bf, lr, mom, wd, nesterov);
		pr.v[e] = sgk_cvt<T>(pf);
		br.v[e] = sgk_cvt<T>(bf);
	}
	sgk_stv<V>(p + i, pr);
	if (mom != 0.f)
		sgk_stv<V>(b + i, br);
}

/* SGD over one chunk of one tensor a block. */
template <class T>
__global__ void __launch_bounds__(256)
sgk_sgd_k(SgkMtTable<3> tab, float lr, float mom, float wd, int nesterov)
{
	const int V = 16 / sizeof(T);
	int t;
	sgk_i64 lo, hi;
	const bool vec = sgk_mt_range<3, T, V>(tab, &t, &lo, &hi);
	T *p = (T *)tab.ptr[0][t], *b = (T *)tab.ptr[2][t];
	const T *g = (const T *)tab.ptr[1][t];
	sgk_i64 i = lo + (sgk_i64)threadIdx.x * V;
	if (vec)
		for (; i + V <= hi; i += 256 * V)
			sgk_sgd_vec<T, V>(p, g, b, i, lr, mom, wd, nesterov);
	/* The scalar rest: the tail, or everything when misaligned. */
	for (sgk_i64 j = (vec ? lo + (hi - lo) / V * V : lo) + threadIdx.x; j < hi; j += 256)
		sgk_sgd_vec<T, 1>(p, g, b, j, lr, mom, wd, nesterov);
}

/* ------------------------------------------------------------------ AdamW */

/* Scalars of one AdamW step shared by a tensor's elements. */
struct SgkAdamS {
	float decay;      /* 1 - lr * weight_decay */
	float w1;         /* 1 - beta1 (the lerp weight) */
	float beta2, c2;  /* beta2, 1 - beta2 */
	float step_size;  /* lr / bc1 */
	float bc2_sqrt;   /* sqrt(bc2) */
	float eps;
};

/* One element of AdamW, as torch.optim.AdamW's foreach steps compute it,
 * each step's result stored in T (rounded) before the next reads it. */
template <class T>
SGK_DEV void sgk_adamw_math(float &p, float g, float &m, float &v, const SgkAdamS &s)
{
	p = sgk_rnd<T>(p * s.decay);
	m = sgk_rnd<T>(s.w1 < 0.5f ? m + s.w1 * (g - m) : g - (g - m) * (1.f - s.w1));
	v = sgk_rnd<T>(v * s.beta2);
	v = sgk_rnd<T>(v + s.c2 * g * g);
	float denom = sgk_rnd<T>(sqrtf(v));
	denom = sgk_rnd<T>(denom / s.bc2_sqrt);
	denom = sgk_rnd<T>(denom + s.eps);
	p = sgk_rnd<T>(p + -s.step_size * (m / denom));
}

/* AdamW on V consecutive elements of each operand at i. */
template <class T, int V>
SGK_DEV void sgk_adamw_vec(T *p, const T *g, T *m, T *v, sgk_i64 i, const SgkAdamS &s)
{
	sgk_reg<V, T> pr = sgk_ldv<V>(p + i), gr = sgk_ldv<V>(g + i);
	sgk_reg<V, T> mr = sgk_ldv<V>(m + i), vr = sgk_ldv<V>(v + i);
#pragma unroll
	for (int e = 0; e < V; e++) {
		float pf = sgk_tof(pr.v[e]), mf = sgk_tof(mr.v[e]), vf = sgk_tof(vr.v[e]);
		sgk_adamw_math<T>(pf, sgk_tof(gr.v[e]), mf, vf, s);
		pr.v[e] = sgk_cvt<T>(pf);
		mr.v[e] = sgk_cvt<T>(mf);
		vr.v[e] = sgk_cvt<T>(vf);
	}
	sgk_stv<V>(p + i, pr);
	sgk_stv<V>(m + i, mr);
	sgk_stv<V>(v + i, vr);
}

/* Adds one to each step count (before the update reads them). */
__global__ void sgk_step_inc_k(SgkMtTable<4> tab, int n)
{
	if ((int)threadIdx.x < n)
		*tab.step[threadIdx.x] += 1.f;
}

/* AdamW over one chunk of one tensor a block; the bias corrections from
 * the tensor's (already incremented) step, in double as PyTorch does. */
template <class T>
__global__ void __launch_bounds__(256)
sgk_adamw_k(SgkMtTable<4> tab, double lr, double beta1, double beta2, double eps, double wd)
{
	const int V = 16 / sizeof(T);
	int t;
	sgk_i64 lo, hi;
	const bool vec = sgk_mt_range<4, T, V>(tab, &t, &lo, &hi);
	const double step = *tab.step[t];
	const double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
	SgkAdamS s;
	s.decay = (float)(1.0 - lr * wd);
	s.w1 = (float)(1.0 - beta1);
	s.beta2 = (float)beta2;
	s.c2 = (float)(1.0 - beta2);
	s.step_size = (float)(lr / bc1);
	s.bc2_sqrt = (float)sqrt(bc2);
	s.eps = (float)eps;
	T *p = (T *)tab.ptr[0][t], *m = (T *)tab.ptr[2][t], *v = (T *)tab.ptr[3][t];
	const T *g = (const T *)tab.ptr[1][t];
	sgk_i64 i = lo + (sgk_i64)threadIdx.x * V;
	if (vec)
		for (; i + V <= hi; i += 256 * V)
			sgk_adamw_vec<T, V>(p, g, m, v, i, s);
	for (sgk_i64 j = (vec ? lo + (hi - lo) / V * V : lo) + threadIdx.x; j < hi; j += 256)
		sgk_adamw_vec<T, 1>(p, g, m, v, j, s);
}

#ifndef __CUDACC_RTC__
/* Fills tables with the chunks of n tensors (DEPTH pointers each, from
 * the host arrays in ptrs) and calls launch(table, nblocks, ntensors)
 * whenever one is full and at the end. */
template <int DEPTH, class F>
static cudaError_t sgk_mt_apply(int n, void *const *const *ptrs, float *const *step,
                                const long long *numel, F launch)
{
	SgkMtTable<DEPTH> tab;
	int nt = 0, nb = 0;
	for (int i = 0; i < n; i++) {
		if (numel[i] <= 0)
			continue;
		for (int d = 0; d < DEPTH; d++)
			tab.ptr[d][nt] = ptrs[d] ? ptrs[d][i] : 0;
		tab.step[nt] = step ? step[i] : 0;
		tab.numel[nt] = numel[i];
		const long long nch = (numel[i] + SGK_MT_CHUNK - 1) / SGK_MT_CHUNK;
		for (long long c = 0; c < nch; c++) {
			tab.tensor[nb] = (unsigned char)nt;
			tab.chunk[nb] = (int)c;
			nb++;
			const bool last = c == nch - 1;
			if (nb == SGK_MT_BLOCKS || (last && nt + 1 == SGK_MT_TENSORS)) {
				cudaError_t e = launch(tab, nb, nt + 1);
				if (e != cudaSuccess)
					return e;
				nb = 0;
				if (!last) {
					/* The tensor goes on in the next table as entry 0. */
					for (int d = 0; d < DEPTH; d++)
						tab.ptr[d][0] = tab.ptr[d][nt];
					tab.step[0] = tab.step[nt];
					tab.numel[0] = tab.numel[nt];
					nt = 0;
				} else {
					nt = -1;
				}
			}
		}
		nt++;
	}
	if (nb > 0)
		return launch(tab, nb, nt);
	return cudaSuccess;
}

/* One torch.optim.SGD step of n tensors (see the file's header). */
template <class T>
static cudaError_t sg_launch_sgd(int n, T *const *param, const T *const *grad,
                                 T *const *momentum_buf, const long long *numel, double lr,
                                 double momentum, double weight_decay, int nesterov,
                                 cudaStream_t stream)
{
	void *const *ptrs[3] = {(void *const *)param, (void *const *)grad,
	                        momentum != 0 ? (void *const *)momentum_buf : 0};
	return sgk_mt_apply<3>(n, ptrs, 0, numel, [&](const SgkMtTable<3> &tab, int nb, int) {
		sgk_sgd_k<T><<<nb, 256, 0, stream>>>(tab, (float)lr, (float)momentum,
		                                    (float)weight_decay, nesterov);
		return sgk_launched();
	});
}

/* One torch.optim.AdamW step of n tensors, their step counts first. */
template <class T>
static cudaError_t sg_launch_adamw(int n, T *const *param, const T *const *grad,
                                   T *const *exp_avg, T *const *exp_avg_sq, float *const *step,
                                   const long long *numel, double lr, double beta1, double beta2,
                                   double eps, double weight_decay, cudaStream_t stream)
{
	/* First every step count, in tables of up to SGK_MT_TENSORS. */
	for (int i = 0; i < n; i += SGK_MT_TENSORS) {
		SgkMtTable<4> tab;
		int k = 0;
		for (; k < SGK_MT_TENSORS && i + k < n; k++)
			tab.step[k] = step[i + k];
		sgk_step_inc_k<<<1, SGK_MT_TENSORS, 0, stream>>>(tab, k);
		cudaError_t e = sgk_launched();
		if (e != cudaSuccess)
			return e;
	}
	void *const *ptrs[4] = {(void *const *)param, (void *const *)grad, (void *const *)exp_avg,
	                        (void *const *)exp_avg_sq};
	return sgk_mt_apply<4>(n, ptrs, step, numel, [&](const SgkMtTable<4> &tab, int nb, int) {
		sgk_adamw_k<T><<<nb, 256, 0, stream>>>(tab, lr, beta1, beta2, eps, weight_decay);
		return sgk_launched();
	});
}
#endif

#pragma nv_diag_default 177
#endif /* SGK_OPTIM_CUH */
