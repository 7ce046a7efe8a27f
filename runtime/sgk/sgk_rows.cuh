/*
 * sgk_rows.cuh - reductions along the last dim of a [rows, C] row-major
 * tensor, each as one kernel that reads a row once where it can:
 *
 *   softmax, log_softmax           forward and backward
 *   layer_norm, rms_norm           forward (mean and rstd saved) and
 *                                  backward (dx; dw, db by columns)
 *   cross_entropy                  forward (mean over rows; the row
 *                                  logsumexp saved) and backward
 *
 * Elements are T (float, __half, __nv_bfloat16, double); arithmetic is in
 * A = sgk_acc<T>::type (float, or double for double).  A row is handled
 * by a group of TPR threads: 8 or 32 lanes of a warp for short rows, a
 * block of 128..1024 threads for long ones; each thread keeps NV vectors
 * of the row in registers, or (NV == 0, rows too long for registers)
 * walks the row in global memory again for each pass.  Loads and stores
 * are 16 bytes wide when C is a multiple of the vector and every pointer
 * aligned; otherwise one element at a time.
 *
 * Host launchers (all return the launch's cudaError_t; rows may be 0):
 *
 *   sg_launch_softmax_fwd<T>(x, y, rows, C, log, stream)
 *       y = softmax(x) (log = 0) or log_softmax(x) (log = 1) over rows.
 *   sg_launch_softmax_bwd<T>(y, dy, dx, rows, C, log, stream)
 *       y is the forward's output: dx = y * (dy - sum(dy * y)), or for
 *       log_softmax dx = dy - exp(y) * sum(dy).
 *   sg_launch_layer_norm_fwd<T>(x, w, b, y, mean, rstd, rows, C, eps, rms, stream)
 *       w, b may be NULL (no affine / no bias); mean, rstd (A[rows]) may
 *       be NULL when not saved.  rms = 1: rms_norm, y = x * rstd * w,
 *       rstd = 1 / sqrt(mean(x^2) + eps), b and mean unused.
 *   sg_launch_layer_norm_fwd_add<T>(x, res, sum, w, b, y, mean, rstd, rows, C,
 *                                   eps, rms, stream)
 *       the same over x + res (a residual add, rounded to T as the add
 *       would store it), which it also stores to sum: one pass.
 *   sg_layer_norm_bwd_workspace(rows, C)  bytes of workspace for:
 *   sg_launch_layer_norm_bwd<T>(dy, x, w, mean, rstd, dx, dw, db, work,
 *                               rows, C, rms, stream)
 *       dx (may be NULL), dw and db (NULL when not wanted; db ignored for
 *       rms) from the saved mean and rstd.  work:
 *       sg_layer_norm_bwd_workspace bytes, needed when dw or db is wanted.
 *   sg_launch_layer_norm_bwd_x<T>(dy, x, w, dx, rows, C, eps, rms, stream)
 *       dx alone, with mean and rstd computed again from x (as the forward
 *       does, with eps): for a backward that has no saved statistics.
 *   sg_layer_norm_bwd_fused_workspace<T>(rows, C)  bytes of workspace for:
 *   sg_launch_layer_norm_bwd_fused<T>(dy, x, w, add, dx, dw, db, work,
 *                                     rows, C, eps, rms, stream)
 *       dx (plus add, when not NULL), dw and db (either may be NULL) in
 *       one pass over dy and x, the statistics again from x.
 *       All three are one kernel (sgk_norm_bwd_k): a fixed count of row
 *       groups, each taking every P-th row and summing its columns of
 *       dy * xhat and dy, written once into work; a second kernel sums
 *       the groups in a fixed order.
 *   sg_launch_cross_entropy_fwd<T>(x, target, lse, loss, rows, C, stream)
 *       x [rows, C] logits, target int64 [rows] class indices (-100 is
 *       ignored, as PyTorch's ignore_index); lse: A[rows + 1], gets the
 *       row logsumexps and, at lse[rows], the count of targets not
 *       ignored; loss: one T, the mean over those rows (NaN if none, or
 *       if a target is out of range).
 *   sg_launch_cross_entropy_lse<T>(x, lse, rows, C, stream)
 *       lse[r] = logsumexp(x[r, :]) alone (the forward's first kernel), for
 *       a caller that computes the loss or the count lse[rows] itself.
 *   sg_launch_cross_entropy_bwd<T>(x, target, lse, dloss, dx, rows, C, stream)
 *       dx = (softmax(x) - onehot(target)) * dloss / count, zero rows
 *       for ignored targets; dloss: one T on the device.
 */
#ifndef SGK_ROWS_CUH
#define SGK_ROWS_CUH
#include <cuda_pipeline.h>

#include "sgk_common.cuh"
/* nvcc remarks on the helpers a program leaves unused: off here */
#pragma nv_diag_suppress 177

/* Loads VEC elements at p as A (a vector load when VEC > 1). */
template <int VEC, class T, class A>
SGK_DEV void sgk_ldrow(const T *p, A *f)
{
	if (VEC == 1) {
		f[0] = sgk_tof(p[0]);
	} else {
		sgk_reg<VEC, T> r = sgk_ldv<VEC>(p);
#pragma unroll
		for (int e = 0; e < VEC; e++)
			f[e] = sgk_tof(r.v[e]);
	}
}

/* Stores VEC values as T at p. */
template <int VEC, class T, class A>
SGK_DEV void sgk_strow(T *p, const A *f)
{
	if (VEC == 1) {
		p[0] = sgk_cvt<T>(f[0]);
	} else {
		sgk_reg<VEC, T> r;
#pragma unroll
		for (int e = 0; e < VEC; e++)
			r.v[e] = sgk_cvt<T>(f[e]);
		sgk_stv<VEC>(p, r);
	}
}

/* Loads VEC weights at p, or ones when p is NULL. */
template <int VEC, class T, class A>
SGK_DEV void sgk_ldw(const T *p, A *f, A dflt)
{
	if (p) {
		sgk_ldrow<VEC>(p, f);
	} else {
#pragma unroll
		for (int e = 0; e < VEC; e++)
			f[e] = dflt;
	}
}

/* The row this thread works on and its index within the row's group.
 * Groups narrower than a warp past the last row work on the last row
 * again (their lanes must stay for the shuffles) with *live = false, and
 * store nothing; whole warps or blocks past the end just return. */
template <int TPR>
SGK_DEV sgk_i64 sgk_row_of(int *t, sgk_i64 rows, bool *live)
{
	sgk_i64 r;
	if (TPR > 32) {
		*t = threadIdx.x;
		r = blockIdx.x;
	} else {
		*t = threadIdx.x % TPR;
		r = (sgk_i64)blockIdx.x * (blockDim.x / TPR) + threadIdx.x / TPR;
	}
	*live = r < rows;
	if (TPR < 32 && r >= rows) {
		const sgk_i64 warp0 = r - (threadIdx.x & 31) / TPR;
		if (warp0 < rows)
			r = rows - 1;
	}
	return r;
}

/* Leaves a row kernel for rows past the end, unless the thread's lanes
 * are needed by a live group of its warp (see sgk_row_of). */
#define SGK_ROW_BEGIN(TPR, t, r, live, rows)                                 \
	bool live;                                                            \
	const sgk_i64 r = sgk_row_of<TPR>(&t, rows, &live);                   \
	if (r >= rows)                                                        \
		return

/* Threads per block of a row kernel. */
#define SGK_ROW_THREADS(TPR) ((TPR) > 32 ? (TPR) : 128)

/* Online max and sum of exponentials: adds x to (m, s). */
template <class A>
SGK_DEV void sgk_online_add(A &m, A &s, A x)
{
	A mn = sgk_max(m, x);
	if (mn == (A)-SGK_INF)
		return;
	s = s * sgk_exp(m - mn) + sgk_exp(x - mn);
	m = mn;
}

/* Reduces (m, s) over a row: the row max M and sum(exp(x - M)). */
template <int TPR, class A>
SGK_DEV A sgk_online_row(A m, A s, A *part, A *mrow)
{
	A M = sgk_row_max<TPR>(m, part);
	s = m == (A)-SGK_INF ? (A)0 : s * sgk_exp(m - M);
	*mrow = M;
	return sgk_row_sum<TPR>(s, part);
}

/* ------------------------------------------------------------------ softmax */

/* y = softmax(x) or log_softmax(x) over each row. */
template <class T, int VEC, int TPR, int NV, bool LOG>
__global__ void __launch_bounds__(SGK_ROW_THREADS(TPR))
sgk_softmax_fwd_k(const T *__restrict__ x, T *__restrict__ y, sgk_i64 rows, int C)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ A part[32];
	int t;
	SGK_ROW_BEGIN(TPR, t, r, live, rows);
	const T *xr = x + r * C;
	T *yr = y + r * C;
	A m = -SGK_INF, s = 0;
	if constexpr (NV > 0) {
		A v[NV > 0 ? NV : 1][VEC];
#pragma unroll
		for (int k = 0; k < NV; k++) {
			const int c = (t + k * TPR) * VEC;
			if (c < C)
				sgk_ldrow<VEC>(xr + c, v[k]);
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				if (c >= C)
					v[k][e] = -SGK_INF;
				m = sgk_max(m, v[k][e]);
			}
		}
		m = sgk_row_max<TPR>(m, part);
#pragma unroll
		for (int k = 0; k < NV; k++)
#pragma unroll
			for (int e = 0; e < VEC; e++)
				s += (t + k * TPR) * VEC < C ? sgk_exp(v[k][e] - m) : (A)0;
		s = sgk_row_sum<TPR>(s, part);
		const A ls = sgk_log(s);
#pragma unroll
		for (int k = 0; k < NV; k++) {
			const int c = (t + k * TPR) * VEC;
			if (c >= C)
				continue;
#pragma unroll
			for (int e = 0; e < VEC; e++)
				v[k][e] = LOG ? v[k][e] - m - ls : sgk_exp(v[k][e] - m) / s;
			if (live)
				sgk_strow<VEC>(yr + c, v[k]);
		}
	} else {
		for (int c = t * VEC; c < C; c += TPR * VEC) {
			A f[VEC];
			sgk_ldrow<VEC>(xr + c, f);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				sgk_online_add(m, s, f[e]);
		}
		s = sgk_online_row<TPR>(m, s, part, &m);
		const A ls = sgk_log(s);
		for (int c = t * VEC; c < C; c += TPR * VEC) {
			A f[VEC];
			sgk_ldrow<VEC>(xr + c, f);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				f[e] = LOG ? f[e] - m - ls : sgk_exp(f[e] - m) / s;
			if (live)
				sgk_strow<VEC>(yr + c, f);
		}
	}
}

/* Backward of softmax (dx = y * (dy - sum(dy * y))) or log_softmax
 * (dx = dy - exp(y) * sum(dy)) from the forward output y. */
template <class T, int VEC, int TPR, int NV, bool LOG>
__global__ void __launch_bounds__(SGK_ROW_THREADS(TPR))
sgk_softmax_bwd_k(const T *__restrict__ y, const T *__restrict__ dy, T *__restrict__ dx,
                  sgk_i64 rows, int C)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ A part[32];
	int t;
	SGK_ROW_BEGIN(TPR, t, r, live, rows);
	const sgk_i64 base = r * C;
	A s = 0;
	if constexpr (NV > 0) {
		A yv[NV > 0 ? NV : 1][VEC], gv[NV > 0 ? NV : 1][VEC];
#pragma unroll
		for (int k = 0; k < NV; k++) {
			const int c = (t + k * TPR) * VEC;
			if (c >= C)
				continue;
			sgk_ldrow<VEC>(y + base + c, yv[k]);
			sgk_ldrow<VEC>(dy + base + c, gv[k]);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				s += LOG ? gv[k][e] : gv[k][e] * yv[k][e];
		}
		s = sgk_row_sum<TPR>(s, part);
#pragma unroll
		for (int k = 0; k < NV; k++) {
			const int c = (t + k * TPR) * VEC;
			if (c >= C)
				continue;
#pragma unroll
			for (int e = 0; e < VEC; e++)
				gv[k][e] = LOG ? gv[k][e] - sgk_exp(yv[k][e]) * s : yv[k][e] * (gv[k][e] - s);
			if (live)
				sgk_strow<VEC>(dx + base + c, gv[k]);
		}
	} else {
		for (int c = t * VEC; c < C; c += TPR * VEC) {
			A yf[VEC], gf[VEC];
			sgk_ldrow<VEC>(y + base + c, yf);
			sgk_ldrow<VEC>(dy + base + c, gf);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				s += LOG ? gf[e] : gf[e] * yf[e];
		}
		s = sgk_row_sum<TPR>(s, part);
		for (int c = t * VEC; c < C; c += TPR * VEC) {
			A yf[VEC], gf[VEC];
			sgk_ldrow<VEC>(y + base + c, yf);
			sgk_ldrow<VEC>(dy + base + c, gf);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				gf[e] = LOG ? gf[e] - sgk_exp(yf[e]) * s : yf[e] * (gf[e] - s);
			if (live)
				sgk_strow<VEC>(dx + base + c, gf);
		}
	}
}

/* ------------------------------------------------------------------ layer_norm, rms_norm */

/* VEC values of the norm's input at column c of row r: x's, or, with a
 * residual res, x + res rounded to T (as the add would store it), stored
 * to sum when st. */
template <int VEC, class T, class A>
SGK_DEV void sgk_norm_in(const T *__restrict__ x, const T *__restrict__ res, T *__restrict__ sum,
                         sgk_i64 i, bool st, A *f)
{
	sgk_ldrow<VEC>(x + i, f);
	if (!res)
		return;
	A g[VEC];
	sgk_ldrow<VEC>(res + i, g);
#pragma unroll
	for (int e = 0; e < VEC; e++)
		f[e] = sgk_tof(sgk_cvt<T>(f[e] + g[e]));
	if (st)
		sgk_strow<VEC>(sum + i, f);
}

/* y = (x - mean) * rstd * w + b (RMS: x * rstd * w); saves mean, rstd.
 * With res not NULL the input is x + res (a residual add), which the
 * kernel also stores to sum. */
template <class T, int VEC, int TPR, int NV, bool RMS>
__global__ void __launch_bounds__(SGK_ROW_THREADS(TPR))
sgk_norm_fwd_k(const T *__restrict__ x, const T *__restrict__ res, T *__restrict__ sum,
               const T *__restrict__ w, const T *__restrict__ b,
               T *__restrict__ y, typename sgk_acc<T>::type *__restrict__ mean,
               typename sgk_acc<T>::type *__restrict__ rstd, sgk_i64 rows, int C, float eps)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ A part[32];
	int t;
	SGK_ROW_BEGIN(TPR, t, r, live, rows);
	const sgk_i64 base = r * C;
	T *yr = y + r * C;
	A mu = 0, var = 0;
	A v[NV > 0 ? NV : 1][VEC];
	if constexpr (NV > 0) {
		A s = 0;
#pragma unroll
		for (int k = 0; k < NV; k++) {
			const int c = (t + k * TPR) * VEC;
			if (c >= C)
				continue;
			sgk_norm_in<VEC>(x, res, sum, base + c, live, v[k]);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				s += RMS ? v[k][e] * v[k][e] : v[k][e];
		}
		s = sgk_row_sum<TPR>(s, part);
		if (RMS) {
			var = s / C;
		} else {
			mu = s / C;
#pragma unroll
			for (int k = 0; k < NV; k++) {
				if ((t + k * TPR) * VEC >= C)
					continue;
#pragma unroll
				for (int e = 0; e < VEC; e++)
					var += (v[k][e] - mu) * (v[k][e] - mu);
			}
			var = sgk_row_sum<TPR>(var, part) / C;
		}
	} else { /* (the sum stored by the first pass, computed again by the others) */
		A s = 0;
		for (int c = t * VEC; c < C; c += TPR * VEC) {
			A f[VEC];
			sgk_norm_in<VEC>(x, res, sum, base + c, live, f);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				s += RMS ? f[e] * f[e] : f[e];
		}
		s = sgk_row_sum<TPR>(s, part);
		if (RMS) {
			var = s / C;
		} else {
			mu = s / C;
			for (int c = t * VEC; c < C; c += TPR * VEC) {
				A f[VEC];
				sgk_norm_in<VEC>(x, res, sum, base + c, false, f);
#pragma unroll
				for (int e = 0; e < VEC; e++)
					var += (f[e] - mu) * (f[e] - mu);
			}
			var = sgk_row_sum<TPR>(var, part) / C;
		}
	}
	const A rs = (A)1 / sgk_sqrt(var + (A)eps);
	if (t == 0 && live) {
		if (mean)
			mean[r] = mu;
		if (rstd)
			rstd[r] = rs;
	}
	const int nk = NV > 0 ? NV : (C + TPR * VEC - 1) / (TPR * VEC);
#pragma unroll
	for (int k = 0; k < (NV > 0 ? NV : 1); k++) {
		for (int kk = NV > 0 ? k : 0; kk < (NV > 0 ? k + 1 : nk); kk++) {
			const int c = (t + kk * TPR) * VEC;
			if (c >= C)
				continue;
			A f[VEC], wf[VEC], bf[VEC];
			if constexpr (NV > 0) {
#pragma unroll
				for (int e = 0; e < VEC; e++)
					f[e] = v[k][e];
			} else {
				sgk_norm_in<VEC>(x, res, sum, base + c, false, f);
			}
			sgk_ldw<VEC>(w ? w + c : w, wf, (A)1);
			sgk_ldw<VEC>(RMS || !b ? (const T *)0 : b + c, bf, (A)0);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				f[e] = (f[e] - mu) * rs * wf[e] + bf[e];
			if (live)
				sgk_strow<VEC>(yr + c, f);
		}
	}
}

/* The mean (0 for RMS) and rstd of a row of x at xr, as the forward
 * computes them: the mean, then the mean square about it, plus eps. */
template <int VEC, int TPR, bool RMS, class T, class A>
SGK_DEV void sgk_norm_stats(const T *xr, int C, int t, float eps, A *part, A *mu, A *rs)
{
	A s = 0, var = 0;
	if (!RMS) {
		for (int c = t * VEC; c < C; c += TPR * VEC) {
			A f[VEC];
			sgk_ldrow<VEC>(xr + c, f);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				s += f[e];
		}
		s = sgk_row_sum<TPR>(s, part) / C;
	}
	for (int c = t * VEC; c < C; c += TPR * VEC) {
		A f[VEC];
		sgk_ldrow<VEC>(xr + c, f);
#pragma unroll
		for (int e = 0; e < VEC; e++)
			var += (f[e] - s) * (f[e] - s);
	}
	var = sgk_row_sum<TPR>(var, part) / C;
	*mu = s;
	*rs = (A)1 / sgk_sqrt(var + (A)eps);
}

/* Sums the N values v over the TPR threads of a row, every thread
 * getting the sums: the lanes of a warp (TPR <= 32), or the block through
 * sh, __shared__ slots that no thread may still be reading (the callers
 * alternate between two, so one barrier a sum is enough). */
template <int TPR, int N, class A>
SGK_DEV void sgk_norm_sum(A (&v)[N], A (*sh)[N])
{
#pragma unroll
	for (int i = 0; i < N; i++)
		v[i] = sgk_group_sum<(TPR < 32 ? TPR : 32)>(v[i]);
	if (TPR <= 32)
		return;
	const int lane = threadIdx.x & 31;
	if (lane == 0)
#pragma unroll
		for (int i = 0; i < N; i++)
			sh[threadIdx.x >> 5][i] = v[i];
	__syncthreads();
#pragma unroll
	for (int i = 0; i < N; i++)
		v[i] = sgk_group_sum<32>(lane < TPR / 32 ? sh[lane][i] : (A)0);
}

/* Elements of A in one 16-byte unit of a VEC-vector's column sums (the
 * whole vector when it is shorter), and the units of a vector. */
template <int VEC, class A> struct sgk_norm_unit {
	enum { U = VEC * sizeof(A) >= 16 ? 16 / sizeof(A) : VEC, NU = VEC / U };
};

/* A row's sums for its norm backward, the thread's NV vectors of the row
 * in xr and dy in gr (w in wr): the mean unless saved (*mu as given, as
 * *rs) or RMS (0), then the variance about it, sum g and sum g * (x -
 * mean) in one block sum (g = dy * w), through sh1[*q] and sh3[*q]
 * (alternating: *q flips).  *rs = 1 / sqrt(variance + eps) unless saved;
 * *s1 = mean(g) (0 for RMS), *s2 = rstd * mean(g * (x - mean)). */
template <int VEC, int TPR, int NV, bool RMS, class T, class A>
SGK_DEV void sgk_norm_bwd_sums(const sgk_reg<VEC, T> (&xr)[NV], const sgk_reg<VEC, T> (&gr)[NV],
                               const sgk_reg<VEC, T> (&wr)[NV], bool saved, int C, int t,
                               float eps, A (*sh1)[32][1], A (*sh3)[32][3], int *q, A *mu,
                               A *rs, A *s1, A *s2)
{
	if (!RMS && !saved) {
		A m[1] = {0};
#pragma unroll
		for (int k = 0; k < NV; k++) {
			if ((t + k * TPR) * VEC >= C)
				continue;
#pragma unroll
			for (int e = 0; e < VEC; e++)
				m[0] += sgk_tof(xr[k].v[e]);
		}
		sgk_norm_sum<TPR>(m, sh1[*q]);
		*mu = m[0] / C;
	}
	A v[3] = {0, 0, 0};
#pragma unroll
	for (int k = 0; k < NV; k++) {
		if ((t + k * TPR) * VEC >= C)
			continue;
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			const A d = sgk_tof(xr[k].v[e]) - *mu;
			const A g = sgk_tof(gr[k].v[e]) * sgk_tof(wr[k].v[e]);
			v[0] += d * d;
			v[1] += g;
			v[2] += g * d;
		}
	}
	sgk_norm_sum<TPR>(v, sh3[*q]);
	*q ^= 1;
	if (!saved)
		*rs = (A)1 / sgk_sqrt(v[0] / C + (A)eps);
	*s1 = RMS ? (A)0 : v[1] / C;
	*s2 = *rs * v[2] / C;
}

/* The norm backward of the rows p, p + P, ... with each row in registers
 * (NV vectors a thread, kept as loaded): w stays in registers and the
 * thread's columns' sums of dy * xhat and dy in its own shared memory
 * slots (16 bytes a load; registers would not leave room for the rest)
 * across the rows.  With PF the next row's x, dy and add (and saved
 * statistics) are loaded while this one is worked on; without, the
 * kernel runs twice the threads an SM instead (SGK_NORM_MINB), which
 * hides the loads better where a thread has one vector of the row.  A
 * row takes two sums (one with saved statistics; one for RMS): the mean
 * unless saved, then the variance about it, sum g and sum g * (x - mean)
 * together (g = dy * w; sum g * xhat is rstd times the last), then the
 * column sums and dx. */
template <int VEC, int TPR, int NV, bool RMS, bool PF, class T, class A>
SGK_DEV void sgk_norm_bwd_regs(const T *__restrict__ dy, const T *__restrict__ x,
                               const T *__restrict__ w, const T *__restrict__ add,
                               const A *__restrict__ mean, const A *__restrict__ rstd,
                               T *__restrict__ dx, A *__restrict__ part, sgk_i64 rows, int C,
                               float eps, sgk_i64 P, sgk_i64 p, int t)
{
	enum { U = sgk_norm_unit<VEC, A>::U, NU = sgk_norm_unit<VEC, A>::NU };
	enum { NT = SGK_ROW_THREADS(TPR) };
	typedef sgk_reg<U, A> AU;
	extern __shared__ __align__(16) unsigned char sgk_norm_smem[];
	/* acc[j][k][u][thread]: j 0 for dw, 1 for db */
	AU *acc = reinterpret_cast<AU *>(sgk_norm_smem) + threadIdx.x;
	__shared__ A sh1[2][32][1], sh3[2][32][3];
	int q = 0;
	A nmu = 0, nrs = 0;
	sgk_reg<VEC, T> wr[NV], nx[NV], ng[NV], na[NV];
#pragma unroll
	for (int k = 0; k < NV; k++) {
		const int c = (t + k * TPR) * VEC;
		if (w && c < C)
			wr[k] = sgk_ldv<VEC>(w + c);
		else
#pragma unroll
			for (int e = 0; e < VEC; e++)
				wr[k].v[e] = sgk_cvt<T>(1.0f);
#pragma unroll
		for (int j = 0; j < 2 * NU; j++)
#pragma unroll
			for (int i = 0; i < U; i++)
				acc[((j / NU * NV + k) * NU + j % NU) * NT].v[i] = 0;
	}
	/* Row r's vectors into nx, ng, na (and its statistics when saved). */
	auto load = [&](sgk_i64 r) {
#pragma unroll
		for (int k = 0; k < NV; k++) {
			const int c = (t + k * TPR) * VEC;
			if (c >= C)
				continue;
			nx[k] = sgk_ldv<VEC>(x + r * C + c);
			ng[k] = sgk_ldv<VEC>(dy + r * C + c);
			if (add)
				na[k] = sgk_ldv<VEC>(add + r * C + c);
		}
		if (rstd) {
			nmu = RMS ? (A)0 : mean[r];
			nrs = rstd[r];
		}
	};
	if (PF && p < rows)
		load(p);
	for (sgk_i64 r = p; r < rows; r += P) {
		if (!PF)
			load(r);
		sgk_reg<VEC, T> xr[NV], gr[NV], ar[NV];
		A mu = nmu, rs = nrs;
#pragma unroll
		for (int k = 0; k < NV; k++) {
			xr[k] = nx[k];
			gr[k] = ng[k];
			ar[k] = na[k];
		}
		if (PF && r + P < rows)
			load(r + P);
		A s1, s2;
		sgk_norm_bwd_sums<VEC, TPR, NV, RMS>(xr, gr, wr, rstd != 0, C, t, eps, sh1, sh3, &q, &mu,
		                                     &rs, &s1, &s2);
		/* the column sums of dy * xhat and dy; dx */
#pragma unroll
		for (int k = 0; k < NV; k++) {
			const int c = (t + k * TPR) * VEC;
			if (c >= C)
				continue;
			A o[VEC];
#pragma unroll
			for (int u = 0; u < NU; u++) {
				AU aw = acc[(k * NU + u) * NT], ab = acc[((NV + k) * NU + u) * NT];
#pragma unroll
				for (int i = 0; i < U; i++) {
					const int e = u * U + i;
					const A f = (sgk_tof(xr[k].v[e]) - mu) * rs, d = sgk_tof(gr[k].v[e]);
					aw.v[i] += d * f;
					ab.v[i] += d;
					o[e] = rs * (d * sgk_tof(wr[k].v[e]) - s1 - f * s2) +
					       (add ? sgk_tof(ar[k].v[e]) : (A)0);
				}
				acc[(k * NU + u) * NT] = aw;
				acc[((NV + k) * NU + u) * NT] = ab;
			}
			if (dx)
				sgk_strow<VEC>(dx + r * C + c, o);
		}
	}
	if (!part)
		return;
#pragma unroll
	for (int k = 0; k < NV; k++) {
		const int c = (t + k * TPR) * VEC;
		if (c >= C)
			continue;
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			part[p * C + c + e] = acc[(k * NU + e / U) * NT].v[e % U];
			part[(P + p) * C + c + e] = acc[((NV + k) * NU + e / U) * NT].v[e % U];
		}
	}
}

/* The norm backward of the rows p, p + P, ... as sgk_norm_bwd_regs (the
 * same sums in the same order), with each row's x, dy and add staged
 * through shared memory by asynchronous copies (cp.async, 16 bytes each:
 * VEC elements of T) into ST stages, and the column sums in registers.
 * Copies in flight hold no registers, so a group has ST - 1 rows coming
 * while it sums and writes one, where the registers' loads ahead allow
 * one.  Each thread reads back only what it copied itself, and refills a
 * stage only after its values are used. */
template <int VEC, int TPR, int NV, int ST, bool RMS, class T, class A>
SGK_DEV void sgk_norm_bwd_staged(const T *__restrict__ dy, const T *__restrict__ x,
                                 const T *__restrict__ w, const T *__restrict__ add,
                                 const A *__restrict__ mean, const A *__restrict__ rstd,
                                 T *__restrict__ dx, A *__restrict__ part, sgk_i64 rows, int C,
                                 float eps, sgk_i64 P, sgk_i64 p, int t)
{
	static_assert(VEC * sizeof(T) == 16, "cp.async copies 16 bytes");
	enum { NT = SGK_ROW_THREADS(TPR) };
	typedef sgk_reg<VEC, T> R;
	extern __shared__ __align__(16) unsigned char sgk_norm_smem[];
	/* stage[s][j][k][thread]: j 0 x, 1 dy, 2 add */
	R *stage = reinterpret_cast<R *>(sgk_norm_smem) + threadIdx.x;
	__shared__ A sh1[2][32][1], sh3[2][32][3];
	int q = 0, s = 0;
	R wr[NV];
	A aw[NV][VEC], ab[NV][VEC];
#pragma unroll
	for (int k = 0; k < NV; k++) {
		const int c = (t + k * TPR) * VEC;
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			wr[k].v[e] = sgk_cvt<T>(1.0f);
			aw[k][e] = ab[k][e] = 0;
		}
		if (w && c < C)
			wr[k] = sgk_ldv<VEC>(w + c);
	}
	/* Row r's vectors into stage st (one commit group even when r is past
	 * the end, so that the wait below counts rows). */
	auto issue = [&](sgk_i64 r, int st) {
		if (r < rows)
#pragma unroll
			for (int k = 0; k < NV; k++) {
				const int c = (t + k * TPR) * VEC;
				if (c >= C)
					continue;
				__pipeline_memcpy_async(&stage[((st * 3 + 0) * NV + k) * NT], x + r * C + c, 16);
				__pipeline_memcpy_async(&stage[((st * 3 + 1) * NV + k) * NT], dy + r * C + c, 16);
				if (add)
					__pipeline_memcpy_async(&stage[((st * 3 + 2) * NV + k) * NT],
					                        add + r * C + c, 16);
			}
		__pipeline_commit();
	};
#pragma unroll
	for (int i = 0; i < ST; i++)
		issue(p + i * P, i);
	for (sgk_i64 r = p; r < rows; r += P) {
		__pipeline_wait_prior(ST - 1);
		R xr[NV], gr[NV], ar[NV];
#pragma unroll
		for (int k = 0; k < NV; k++) {
			xr[k] = stage[((s * 3 + 0) * NV + k) * NT];
			gr[k] = stage[((s * 3 + 1) * NV + k) * NT];
			if (add)
				ar[k] = stage[((s * 3 + 2) * NV + k) * NT];
		}
		A mu = 0, rs = 0, s1, s2;
		if (rstd) {
			mu = RMS ? (A)0 : mean[r];
			rs = rstd[r];
		}
		sgk_norm_bwd_sums<VEC, TPR, NV, RMS>(xr, gr, wr, rstd != 0, C, t, eps, sh1, sh3, &q, &mu,
		                                     &rs, &s1, &s2);
		/* the column sums of dy * xhat and dy; dx */
#pragma unroll
		for (int k = 0; k < NV; k++) {
			const int c = (t + k * TPR) * VEC;
			if (c >= C)
				continue;
			A o[VEC];
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				const A f = (sgk_tof(xr[k].v[e]) - mu) * rs, d = sgk_tof(gr[k].v[e]);
				aw[k][e] += d * f;
				ab[k][e] += d;
				o[e] = rs * (d * sgk_tof(wr[k].v[e]) - s1 - f * s2) +
				       (add ? sgk_tof(ar[k].v[e]) : (A)0);
			}
			if (dx)
				sgk_strow<VEC>(dx + r * C + c, o);
		}
		/* stage s again, now that its values are used */
		issue(r + ST * P, s);
		s = s + 1 == ST ? 0 : s + 1;
	}
	__pipeline_wait_prior(0);
	if (!part)
		return;
#pragma unroll
	for (int k = 0; k < NV; k++) {
		const int c = (t + k * TPR) * VEC;
		if (c >= C)
			continue;
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			part[p * C + c + e] = aw[k][e];
			part[(P + p) * C + c + e] = ab[k][e];
		}
	}
}

/* The norm backward of the rows p, p + P, ... walking each row in memory
 * (rows too long for registers): the statistics unless saved, then the
 * row sums of g and g * xhat with the column sums kept in the group's
 * rows of part, then dx. */
template <int VEC, int TPR, bool RMS, class T, class A>
SGK_DEV void sgk_norm_bwd_walk(const T *__restrict__ dy, const T *__restrict__ x,
                               const T *__restrict__ w, const T *__restrict__ add,
                               const A *__restrict__ mean, const A *__restrict__ rstd,
                               T *__restrict__ dx, A *__restrict__ part, sgk_i64 rows, int C,
                               float eps, sgk_i64 P, sgk_i64 p, int t)
{
	__shared__ A sh[32];
	A *pw = part ? part + p * C : part, *pb = part ? part + (P + p) * C : part;
	if (part)
		for (int c = t * VEC; c < C; c += TPR * VEC)
#pragma unroll
			for (int e = 0; e < VEC; e++)
				pw[c + e] = pb[c + e] = 0;
	for (sgk_i64 r = p; r < rows; r += P) {
		const T *xr = x + r * C, *gr = dy + r * C;
		A mu = 0, rs;
		if (rstd) {
			mu = RMS ? (A)0 : mean[r];
			rs = rstd[r];
		} else {
			sgk_norm_stats<VEC, TPR, RMS>(xr, C, t, eps, sh, &mu, &rs);
		}
		A s1 = 0, s2 = 0;
		for (int c = t * VEC; c < C; c += TPR * VEC) {
			A f[VEC], g[VEC], wf[VEC];
			sgk_ldrow<VEC>(xr + c, f);
			sgk_ldrow<VEC>(gr + c, g);
			sgk_ldw<VEC>(w ? w + c : w, wf, (A)1);
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				f[e] = (f[e] - mu) * rs;
				if (part) {
					pw[c + e] += g[e] * f[e];
					pb[c + e] += g[e];
				}
				g[e] *= wf[e];
				s1 += g[e];
				s2 += g[e] * f[e];
			}
		}
		if (!RMS)
			s1 = sgk_row_sum<TPR>(s1, sh) / C;
		s2 = sgk_row_sum<TPR>(s2, sh) / C;
		for (int c = t * VEC; dx && c < C; c += TPR * VEC) {
			A f[VEC], g[VEC], wf[VEC], a[VEC];
			sgk_ldrow<VEC>(xr + c, f);
			sgk_ldrow<VEC>(gr + c, g);
			sgk_ldw<VEC>(w ? w + c : w, wf, (A)1);
			sgk_ldw<VEC>(add ? add + r * C + c : add, a, (A)0);
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				f[e] = (f[e] - mu) * rs;
				g[e] = rs * (g[e] * wf[e] - (RMS ? (A)0 : s1) - f[e] * s2) + a[e];
			}
			sgk_strow<VEC>(dx + r * C + c, g);
		}
	}
}

/* Threads an SM must hold of a norm backward kernel: 512 (registers for
 * 128 a thread) with the next row's loads ahead (PF), else 1024 (64). */
#define SGK_NORM_SM_THREADS(PF) ((PF) ? 512 : 1024)

/* Blocks of a norm backward kernel an SM must hold at once. */
#define SGK_NORM_MINB(TPR, PF)                                                \
	(SGK_ROW_THREADS(TPR) >= SGK_NORM_SM_THREADS(PF)                      \
	         ? 1                                                          \
	         : SGK_NORM_SM_THREADS(PF) / SGK_ROW_THREADS(TPR))

/* The norm backward: dx of layer_norm (or RMS) = rstd * (g - mean(g) -
 * xhat * mean(g * xhat)), g = dy * w, plus add when it is not NULL (a
 * gradient summed in before the one rounding), with the saved mean and
 * rstd (rstd not NULL) or the statistics computed again from x (as the
 * forward, with eps); and, when part is not NULL, each of the grid's P
 * row groups' column sums of dy * xhat (for dw) and dy (db) into
 * part[2][P][C].  dx may be NULL (the column sums alone).  A group (TPR
 * threads: a warp, or the block) takes rows p, p + P, ...; PF: rows in
 * registers with the next one's loads ahead (sgk_norm_bwd_regs); ST > 0:
 * rows staged through shared memory in ST stages (sgk_norm_bwd_staged). */
template <class T, int VEC, int TPR, int NV, bool RMS, bool PF, int ST = 0>
__global__ void __launch_bounds__(SGK_ROW_THREADS(TPR), SGK_NORM_MINB(TPR, PF))
sgk_norm_bwd_k(const T *__restrict__ dy, const T *__restrict__ x, const T *__restrict__ w,
               const T *__restrict__ add, const typename sgk_acc<T>::type *__restrict__ mean,
               const typename sgk_acc<T>::type *__restrict__ rstd, T *__restrict__ dx,
               typename sgk_acc<T>::type *__restrict__ part, sgk_i64 rows, int C, float eps)
{
	const int G = SGK_ROW_THREADS(TPR) / TPR, t = threadIdx.x % TPR;
	const sgk_i64 P = (sgk_i64)gridDim.x * G, p = (sgk_i64)blockIdx.x * G + threadIdx.x / TPR;
	if constexpr (ST > 0)
		sgk_norm_bwd_staged<VEC, TPR, NV, ST, RMS>(dy, x, w, add, mean, rstd, dx, part, rows,
		                                           C, eps, P, p, t);
	else if constexpr (NV > 0)
		sgk_norm_bwd_regs<VEC, TPR, NV, RMS, PF>(dy, x, w, add, mean, rstd, dx, part, rows, C,
		                                         eps, P, p, t);
	else
		sgk_norm_bwd_walk<VEC, TPR, RMS>(dy, x, w, add, mean, rstd, dx, part, rows, C, eps, P,
		                                 p, t);
}

/* dw (blockIdx.y 0) or db (1) from the P groups' partial sums part[2][P][C],
 * summed in a fixed order: 32 columns a block, 16 threads down each. */
template <class T>
__global__ void __launch_bounds__(512)
sgk_norm_parts_sum_k(const typename sgk_acc<T>::type *__restrict__ part, int P, int C,
                     T *__restrict__ dw, T *__restrict__ db)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ A sh[16][33];
	T *out = blockIdx.y ? db : dw;
	const int c = blockIdx.x * 32 + threadIdx.x;
	if (!out)
		return;
	const A *src = part + (sgk_i64)blockIdx.y * P * C;
	A s = 0;
	if (c < C)
#pragma unroll 8
		for (int p = threadIdx.y; p < P; p += 16)
			s += src[(sgk_i64)p * C + c];
	sh[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		for (int k = 1; k < 16; k++)
			s += sh[k][threadIdx.x];
		out[c] = sgk_cvt<T>(s);
	}
}

/* ------------------------------------------------------------------ cross_entropy */

/* lse[r] = logsumexp(x[r, :]). */
template <class T, int VEC, int TPR, int NV>
__global__ void __launch_bounds__(SGK_ROW_THREADS(TPR))
sgk_xent_lse_k(const T *__restrict__ x, typename sgk_acc<T>::type *__restrict__ lse, sgk_i64 rows,
               int C)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ A part[32];
	int t;
	SGK_ROW_BEGIN(TPR, t, r, live, rows);
	const T *xr = x + r * C;
	A m = -SGK_INF, s = 0;
	if constexpr (NV > 0) {
		A v[NV > 0 ? NV : 1][VEC];
#pragma unroll
		for (int k = 0; k < NV; k++) {
			const int c = (t + k * TPR) * VEC;
			if (c < C)
				sgk_ldrow<VEC>(xr + c, v[k]);
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				if (c >= C)
					v[k][e] = -SGK_INF;
				m = sgk_max(m, v[k][e]);
			}
		}
		m = sgk_row_max<TPR>(m, part);
#pragma unroll
		for (int k = 0; k < NV; k++)
#pragma unroll
			for (int e = 0; e < VEC; e++)
				s += (t + k * TPR) * VEC < C ? sgk_exp(v[k][e] - m) : (A)0;
		s = sgk_row_sum<TPR>(s, part);
	} else {
		for (int c = t * VEC; c < C; c += TPR * VEC) {
			A f[VEC];
			sgk_ldrow<VEC>(xr + c, f);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				sgk_online_add(m, s, f[e]);
		}
		s = sgk_online_row<TPR>(m, s, part, &m);
	}
	if (t == 0 && live)
		lse[r] = m + sgk_log(s);
}

/* loss = mean over rows whose target is not -100 of lse - x[target];
 * lse[rows] = that count.  One block of 1024 threads, in a fixed order. */
template <class T>
__global__ void __launch_bounds__(1024)
sgk_xent_loss_k(const T *__restrict__ x, const long long *__restrict__ tgt,
                typename sgk_acc<T>::type *__restrict__ lse, sgk_i64 rows, int C,
                T *__restrict__ loss)
{
	__shared__ double part[32];
	double s = 0, n = 0;
	for (sgk_i64 r = threadIdx.x; r < rows; r += blockDim.x) {
		const long long k = tgt[r];
		if (k == -100)
			continue;
		if (k < 0 || k >= C)
			s += __longlong_as_double(0x7ff8000000000000LL);
		else
			s += (double)lse[r] - (double)sgk_tof(x[r * C + k]);
		n += 1;
	}
	s = sgk_row_sum<1024>(s, part);
	n = sgk_row_sum<1024>(n, part);
	if (threadIdx.x == 0) {
		lse[rows] = (typename sgk_acc<T>::type)n;
		*loss = sgk_cvt<T>(s / n);
	}
}

/* dx = (exp(x - lse) - onehot(target)) * dloss / count per row.  dx may
 * be x (sgc's memory plan puts it there when the logits die here): each
 * thread loads the elements it then stores, so neither is __restrict__. */
template <class T, int VEC, int TPR>
__global__ void __launch_bounds__(SGK_ROW_THREADS(TPR))
sgk_xent_bwd_k(const T *x, const long long *__restrict__ tgt,
               const typename sgk_acc<T>::type *__restrict__ lse, const T *__restrict__ dloss,
               T *dx, sgk_i64 rows, int C)
{
	typedef typename sgk_acc<T>::type A;
	int t;
	SGK_ROW_BEGIN(TPR, t, r, live, rows);
	const long long k = tgt[r];
	const A g = k == -100 ? (A)0 : sgk_tof(*dloss) / lse[rows], l = lse[r];
	for (int c = t * VEC; c < C; c += TPR * VEC) {
		A f[VEC];
		sgk_ldrow<VEC>(x + r * C + c, f);
#pragma unroll
		for (int e = 0; e < VEC; e++)
			f[e] = (sgk_exp(f[e] - l) - (c + e == k ? (A)1 : (A)0)) * g;
		if (live)
			sgk_strow<VEC>(dx + r * C + c, f);
	}
}

#ifndef __CUDACC_RTC__
/* ------------------------------------------------------------------ host side */

/* A kernel configuration as a type: VEC elements a vector, TPR threads a
 * row, NV vectors a thread kept in registers (0: none). */
template <int VEC_, int TPR_, int NV_>
struct SgkRowCfg {
	enum { VEC = VEC_, TPR = TPR_, NV = NV_ };
};

/* Calls f(SgkRowCfg<...>()) with the configuration for rows of C
 * elements, vectors of V elements when vec (else 1).  With cache = 0,
 * never keeps rows in registers. */
template <int V, class F>
static cudaError_t sgk_row_dispatch(int C, bool vec, bool cache, F f)
{
	if (vec && V > 1) {
		const int nv = (C + V - 1) / V;
		if (!cache)
			return nv <= 256 ? f(SgkRowCfg<V, 32, 0>()) : f(SgkRowCfg<V, 512, 0>());
		if (nv <= 8)
			return f(SgkRowCfg<V, 8, 1>());
		if (nv <= 32)
			return f(SgkRowCfg<V, 32, 1>());
		if (nv <= 64)
			return f(SgkRowCfg<V, 32, 2>());
		if (nv <= 128)
			return f(SgkRowCfg<V, 32, 4>());
		if (nv <= 256)
			return f(SgkRowCfg<V, 32, 8>());
		if (nv <= 512)
			return f(SgkRowCfg<V, 128, 4>());
		if (nv <= 1024)
			return f(SgkRowCfg<V, 256, 4>());
		if (nv <= 2048)
			return f(SgkRowCfg<V, 512, 4>());
		if (nv <= 4096)
			return f(SgkRowCfg<V, 512, 8>());
		return f(SgkRowCfg<V, 1024, 0>());
	}
	if (!cache)
		return C <= 256 ? f(SgkRowCfg<1, 32, 0>()) : f(SgkRowCfg<1, 512, 0>());
	if (C <= 32)
		return f(SgkRowCfg<1, 32, 1>());
	if (C <= 128)
		return f(SgkRowCfg<1, 32, 4>());
	if (C <= 1024)
		return f(SgkRowCfg<1, 256, 4>());
	return f(SgkRowCfg<1, 1024, 0>());
}

/* Blocks and threads of a row kernel with TPR threads a row. */
static inline dim3 sgk_row_grid(long long rows, int tpr)
{
	return dim3((unsigned)(tpr > 32 ? rows : (rows + 128 / tpr - 1) / (128 / tpr)));
}

/* The vector width for T: 16 bytes. */
template <class T> struct sgk_vw { enum { V = 16 / sizeof(T) }; };

/* Whether rows of C elements at each of the pointers allow vectors. */
template <class T>
static bool sgk_rows_vec(int C, const void *a, const void *b = 0, const void *c = 0,
                         const void *d = 0)
{
	const unsigned bytes = 16;
	const int V = sgk_vw<T>::V;
	return C % V == 0 && (!a || sgk_host_aligned(a, bytes)) && (!b || sgk_host_aligned(b, bytes)) &&
	       (!c || sgk_host_aligned(c, bytes)) && (!d || sgk_host_aligned(d, bytes));
}

/* y = softmax(x) (log = 0) or log_softmax(x) (log = 1) over each row. */
template <class T>
static cudaError_t sg_launch_softmax_fwd(const T *x, T *y, long long rows, int C, int log,
                                         cudaStream_t stream)
{
	if (rows <= 0 || C <= 0)
		return cudaSuccess;
	return sgk_row_dispatch<sgk_vw<T>::V>(C, sgk_rows_vec<T>(C, x, y), true, [&](auto cfg) {
		typedef decltype(cfg) K;
		dim3 g = sgk_row_grid(rows, K::TPR);
		if (log)
			sgk_softmax_fwd_k<T, K::VEC, K::TPR, K::NV, true>
			        <<<g, SGK_ROW_THREADS(K::TPR), 0, stream>>>(x, y, rows, C);
		else
			sgk_softmax_fwd_k<T, K::VEC, K::TPR, K::NV, false>
			        <<<g, SGK_ROW_THREADS(K::TPR), 0, stream>>>(x, y, rows, C);
		return sgk_launched();
	});
}

/* dx of softmax or log_softmax from the forward's output y and dy. */
template <class T>
static cudaError_t sg_launch_softmax_bwd(const T *y, const T *dy, T *dx, long long rows, int C,
                                         int log, cudaStream_t stream)
{
	if (rows <= 0 || C <= 0)
		return cudaSuccess;
	return sgk_row_dispatch<sgk_vw<T>::V>(C, sgk_rows_vec<T>(C, y, dy, dx), true, [&](auto cfg) {
		typedef decltype(cfg) K;
		dim3 g = sgk_row_grid(rows, K::TPR);
		if (log)
			sgk_softmax_bwd_k<T, K::VEC, K::TPR, K::NV, true>
			        <<<g, SGK_ROW_THREADS(K::TPR), 0, stream>>>(y, dy, dx, rows, C);
		else
			sgk_softmax_bwd_k<T, K::VEC, K::TPR, K::NV, false>
			        <<<g, SGK_ROW_THREADS(K::TPR), 0, stream>>>(y, dy, dx, rows, C);
		return sgk_launched();
	});
}

/* The norm forward's configuration: sgk_row_dispatch's, but for rows of
 * 129 to 256 vectors (C = 2048 in bf16) a block of 128 threads a row, two
 * vectors a thread, rather than a warp with eight: 69.0 us against 83.0
 * with the residual add at 16384 x 2048 bf16 (docs/performance.md,
 * 2026-12-03). */
template <int V, class F>
static cudaError_t sgk_norm_fwd_dispatch(int C, bool vec, F f)
{
	const int nv = (C + V - 1) / V;
	if (vec && V > 1 && nv > 128 && nv <= 256)
		return f(SgkRowCfg<V, 128, 2>());
	return sgk_row_dispatch<V>(C, vec, true, f);
}

/* layer_norm (rms = 0) or rms_norm (rms = 1) over each row of x + res
 * (res NULL: of x), storing x + res to sum; saves mean and rstd where
 * given. */
template <class T>
static cudaError_t sg_launch_layer_norm_fwd_add(const T *x, const T *res, T *sum, const T *w,
                                                const T *b, T *y,
                                                typename sgk_acc<T>::type *mean,
                                                typename sgk_acc<T>::type *rstd, long long rows,
                                                int C, float eps, int rms, cudaStream_t stream)
{
	if (rows <= 0 || C <= 0)
		return cudaSuccess;
	bool vec = sgk_rows_vec<T>(C, x, y, w, b) && sgk_rows_vec<T>(C, res, sum);
	return sgk_norm_fwd_dispatch<sgk_vw<T>::V>(C, vec, [&](auto cfg) {
		typedef decltype(cfg) K;
		dim3 g = sgk_row_grid(rows, K::TPR);
		if (rms)
			sgk_norm_fwd_k<T, K::VEC, K::TPR, K::NV, true><<<g, SGK_ROW_THREADS(K::TPR), 0,
			        stream>>>(x, res, sum, w, b, y, mean, rstd, rows, C, eps);
		else
			sgk_norm_fwd_k<T, K::VEC, K::TPR, K::NV, false><<<g, SGK_ROW_THREADS(K::TPR), 0,
			        stream>>>(x, res, sum, w, b, y, mean, rstd, rows, C, eps);
		return sgk_launched();
	});
}

/* layer_norm (rms = 0) or rms_norm (rms = 1) over each row; saves mean
 * and rstd where given. */
template <class T>
static cudaError_t sg_launch_layer_norm_fwd(const T *x, const T *w, const T *b, T *y,
                                            typename sgk_acc<T>::type *mean,
                                            typename sgk_acc<T>::type *rstd, long long rows, int C,
                                            float eps, int rms, cudaStream_t stream)
{
	return sg_launch_layer_norm_fwd_add<T>(x, (const T *)0, (T *)0, w, b, y, mean, rstd, rows,
	                                       C, eps, rms, stream);
}

/* A norm backward configuration as a type: SgkRowCfg's VEC, TPR and NV,
 * PF, whether a thread loads the next row ahead (sgk_norm_bwd_regs), and
 * ST, the stages of rows staged through shared memory (0: none). */
template <int VEC_, int TPR_, int NV_, bool PF_, int ST_ = 0>
struct SgkNormCfg {
	enum { VEC = VEC_, TPR = TPR_, NV = NV_, PF = PF_, ST = ST_ };
};

/* The norm backward's configuration for rows of C elements: at most two
 * vectors a thread (it also keeps w and their column sums), more threads
 * a row instead; NV = 0 (the row walked in memory) past 1024 vectors.
 * Rows of 129 to 256 vectors (C = 2048 in bf16) are staged through shared
 * memory three rows deep (ST: sgk_norm_bwd_staged), 128 threads a row
 * with two vectors each at 512 threads an SM: 93.5 us against 116.0 for
 * one vector a thread with 1024 threads an SM and nothing staged, at
 * 16384 x 2048 bf16 (docs/performance.md, 2026-12-03 16:43). */
template <int V, class F>
static auto sgk_norm_bwd_dispatch(int C, bool vec, F f)
{
	if (vec && V > 1) {
		const int nv = (C + V - 1) / V;
		if (nv <= 32)
			return f(SgkNormCfg<V, 32, 1, true>());
		if (nv <= 64)
			return f(SgkNormCfg<V, 32, 2, true>());
		if (nv <= 128)
			return f(SgkNormCfg<V, 128, 2, true>());
		if (nv <= 256)
			return f(SgkNormCfg<V, 128, 2, true, 3>());
		if (nv <= 512)
			return f(SgkNormCfg<V, 256, 2, true>());
		if (nv <= 1024)
			return f(SgkNormCfg<V, 512, 2, true>());
		return f(SgkNormCfg<V, 1024, 0, true>());
	}
	if (C <= 32)
		return f(SgkNormCfg<1, 32, 1, true>());
	if (C <= 128)
		return f(SgkNormCfg<1, 32, 4, true>());
	if (C <= 1024)
		return f(SgkNormCfg<1, 256, 4, true>());
	if (C <= 4096)
		return f(SgkNormCfg<1, 1024, 4, true>());
	return f(SgkNormCfg<1, 1024, 0, true>());
}

/* Row groups of the norm backward: as many as an H200 holds at once
 * (SGK_NORM_SM_THREADS(pf) threads on each of 128 SMs: each group runs
 * through its rows in one wave) and at least 128, at most one a row,
 * rounded up to whole blocks of SGK_ROW_THREADS(tpr) / tpr groups; the
 * same for every device, so dw and db are summed in the same order
 * everywhere. */
static inline long long sgk_norm_bwd_parts(long long rows, int tpr, bool pf)
{
	const long long gpb = tpr > 32 ? 1 : 128 / tpr;
	const long long threads = 128LL * SGK_NORM_SM_THREADS(pf);
	long long p = threads / tpr < 128 ? 128 : threads / tpr;
	if (p > rows)
		p = rows > 0 ? rows : 1;
	return (p + gpb - 1) / gpb * gpb;
}

/* The row groups of the norm backward for rows x C. */
template <class T>
static long long sgk_norm_bwd_groups(long long rows, int C, bool vec)
{
	return sgk_norm_bwd_dispatch<sgk_vw<T>::V>(C, vec, [&](auto cfg) {
		typedef decltype(cfg) K;
		return sgk_norm_bwd_parts(rows, K::TPR, K::PF);
	});
}

/* Bytes of workspace sg_launch_layer_norm_bwd_fused needs (the column
 * partial sums of both gradients, any alignment of the pointers). */
template <class T>
static size_t sg_layer_norm_bwd_fused_workspace(long long rows, int C)
{
	const long long p1 = sgk_norm_bwd_groups<T>(rows, C, true);
	const long long p2 = sgk_norm_bwd_groups<T>(rows, C, false);
	return (size_t)2 * (size_t)(p1 > p2 ? p1 : p2) * (size_t)C *
	       sizeof(typename sgk_acc<T>::type);
}

/* Bytes of workspace sg_launch_layer_norm_bwd needs for dw and db. */
template <class T>
static size_t sg_layer_norm_bwd_workspace(long long rows, int C)
{
	return sg_layer_norm_bwd_fused_workspace<T>(rows, C);
}

/* Dynamic shared memory of the norm backward: the column sums of each
 * thread's NV vectors when the row is in registers, or the ST stages of
 * its x, dy and add vectors when staged (16 bytes each). */
template <class A, int VEC, int TPR, int NV, int ST = 0>
static constexpr int sgk_norm_smem_bytes()
{
	return ST > 0  ? SGK_ROW_THREADS(TPR) * ST * 3 * NV * 16
	       : NV > 0 ? 2 * SGK_ROW_THREADS(TPR) * NV * VEC * (int)sizeof(A)
	                : 0;
}

/* Every norm backward: sgk_norm_bwd_k over the rows (dx, and the row
 * groups' column sums into work when dw or db is wanted), then
 * sgk_norm_parts_sum_k summing the groups in a fixed order. */
template <class T>
static cudaError_t sgk_norm_bwd_launch(const T *dy, const T *x, const T *w, const T *add,
                                       const typename sgk_acc<T>::type *mean,
                                       const typename sgk_acc<T>::type *rstd, T *dx, T *dw,
                                       T *db, void *work, long long rows, int C, float eps,
                                       int rms, cudaStream_t stream)
{
	typedef typename sgk_acc<T>::type A;
	if (rows <= 0 || C <= 0 || (!dx && !dw && !db))
		return cudaSuccess;
	const bool vec = sgk_rows_vec<T>(C, dy, x, w, dx) && sgk_rows_vec<T>(C, add);
	long long P = 0;
	cudaError_t e = sgk_norm_bwd_dispatch<sgk_vw<T>::V>(C, vec, [&](auto cfg) {
		typedef decltype(cfg) K;
		P = sgk_norm_bwd_parts(rows, K::TPR, K::PF);
		A *part = dw || db ? (A *)work : (A *)0;
		const dim3 g((unsigned)(P / (SGK_ROW_THREADS(K::TPR) / K::TPR)));
		auto *k = rms ? sgk_norm_bwd_k<T, K::VEC, K::TPR, K::NV, true, K::PF, K::ST>
		              : sgk_norm_bwd_k<T, K::VEC, K::TPR, K::NV, false, K::PF, K::ST>;
		const int smem = sgk_norm_smem_bytes<A, K::VEC, K::TPR, K::NV, K::ST>();
		if (smem > 48 * 1024) {
			const cudaError_t err = cudaFuncSetAttribute(
			        k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
			if (err != cudaSuccess)
				return err;
		}
		k<<<g, SGK_ROW_THREADS(K::TPR), smem, stream>>>(dy, x, w, add, mean, rstd, dx, part,
		                                                rows, C, eps);
		return sgk_launched();
	});
	if (e != cudaSuccess || (!dw && !db))
		return e;
	sgk_norm_parts_sum_k<T><<<dim3((unsigned)((C + 31) / 32), 2), dim3(32, 16), 0, stream>>>(
	        (const A *)work, (int)P, C, dw, db);
	return sgk_launched();
}

/* dx, dw and db (db ignored for rms) of layer_norm or rms_norm from the
 * saved mean and rstd. */
template <class T>
static cudaError_t sg_launch_layer_norm_bwd(const T *dy, const T *x, const T *w,
                                            const typename sgk_acc<T>::type *mean,
                                            const typename sgk_acc<T>::type *rstd, T *dx, T *dw,
                                            T *db, void *work, long long rows, int C, int rms,
                                            cudaStream_t stream)
{
	return sgk_norm_bwd_launch<T>(dy, x, w, (const T *)0, mean, rstd, dx, dw, rms ? (T *)0 : db,
	                              work, rows, C, 0.0f, rms, stream);
}

/* dx alone of layer_norm (rms = 0) or rms_norm (rms = 1), the row
 * statistics computed again from x with eps (nothing saved). */
template <class T>
static cudaError_t sg_launch_layer_norm_bwd_x(const T *dy, const T *x, const T *w, T *dx,
                                              long long rows, int C, float eps, int rms,
                                              cudaStream_t stream)
{
	return sgk_norm_bwd_launch<T>(dy, x, w, (const T *)0, 0, 0, dx, (T *)0, (T *)0, (void *)0,
	                              rows, C, eps, rms, stream);
}

/* dx, dw, db of layer_norm (rms = 0) or rms_norm (rms = 1) in one pass
 * over dy and x (the statistics again from x with eps), then one small
 * kernel summing the row groups' column sums in a fixed order.  w, add,
 * dw, db may be NULL (work too when both are); add (of dx's shape) is
 * summed into dx. */
template <class T>
static cudaError_t sg_launch_layer_norm_bwd_fused(const T *dy, const T *x, const T *w,
                                                  const T *add, T *dx, T *dw, T *db, void *work,
                                                  long long rows, int C, float eps, int rms,
                                                  cudaStream_t stream)
{
	return sgk_norm_bwd_launch<T>(dy, x, w, add, 0, 0, dx, dw, db, work, rows, C, eps, rms,
	                              stream);
}

/* lse[r] = logsumexp of row r, for r < rows. */
template <class T>
static cudaError_t sg_launch_cross_entropy_lse(const T *x, typename sgk_acc<T>::type *lse,
                                               long long rows, int C, cudaStream_t stream)
{
	if (rows <= 0 || C <= 0)
		return cudaSuccess;
	return sgk_row_dispatch<sgk_vw<T>::V>(C, sgk_rows_vec<T>(C, x), true, [&](auto cfg) {
		typedef decltype(cfg) K;
		sgk_xent_lse_k<T, K::VEC, K::TPR, K::NV>
		        <<<sgk_row_grid(rows, K::TPR), SGK_ROW_THREADS(K::TPR), 0, stream>>>(x, lse,
		                                                                          rows, C);
		return sgk_launched();
	});
}

/* The row logsumexps, then the mean loss over targets not ignored. */
template <class T>
static cudaError_t sg_launch_cross_entropy_fwd(const T *x, const long long *target,
                                               typename sgk_acc<T>::type *lse, T *loss,
                                               long long rows, int C, cudaStream_t stream)
{
	cudaError_t e = sg_launch_cross_entropy_lse<T>(x, lse, rows, C, stream);
	if (e != cudaSuccess)
		return e;
	sgk_xent_loss_k<T><<<1, 1024, 0, stream>>>(x, target, lse, rows, C, loss);
	return sgk_launched();
}

/* dlogits = (softmax - onehot) * dloss / count, from the saved lse. */
template <class T>
static cudaError_t sg_launch_cross_entropy_bwd(const T *x, const long long *target,
                                               const typename sgk_acc<T>::type *lse,
                                               const T *dloss, T *dx, long long rows, int C,
                                               cudaStream_t stream)
{
	if (rows <= 0 || C <= 0)
		return cudaSuccess;
	return sgk_row_dispatch<sgk_vw<T>::V>(C, sgk_rows_vec<T>(C, x, dx), false, [&](auto cfg) {
		typedef decltype(cfg) K;
		sgk_xent_bwd_k<T, K::VEC, K::TPR>
		        <<<sgk_row_grid(rows, K::TPR), SGK_ROW_THREADS(K::TPR), 0, stream>>>(
		                x, target, lse, dloss, dx, rows, C);
		return sgk_launched();
	});
}
#endif

#pragma nv_diag_default 177
#endif /* SGK_ROWS_CUH */
