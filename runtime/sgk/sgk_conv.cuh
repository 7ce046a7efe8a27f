/*
 * sgk_conv.cuh - 2-D convolution, pooling and batch norm over NCHW or
 * channels-last (NHWC) tensors, as direct kernels: the fallback the
 * generated code runs when cuDNN is not there (or declines), and the
 * pools, batch_norm and the layout conversion always.
 *
 * Elements are T (float, __half, __nv_bfloat16, double); arithmetic is in
 * A = sgk_acc<T>::type (float, or double for double), each result rounded
 * once.  SgConvGeom holds the sizes: x [n, c, h, w], weight [k, c/groups,
 * r, s], y [n, k, oh, ow], stride (sh, sw), padding (ph, pw), dilation
 * (dh, dw); pools use k = c, groups = c and dilation 1.  cl 1 is channels
 * last: x [n, h, w, c], weight [k, r, s, c/groups] (PyTorch's
 * channels_last weight), y [n, oh, ow, k], the gradients as x and the
 * weight; the sizes stay the logical (NCHW) ones.
 *
 * Host launchers (all return the launch's cudaError_t):
 *
 *   sg_launch_conv2d_fwd<T>(x, w, b, y, g, stream)    b may be NULL
 *   sg_launch_conv2d_bwd_input<T>(dy, w, dx, g, stream)
 *   sg_launch_conv2d_bwd_weight<T>(dy, x, dw, g, stream)
 *       one thread per output element (dx: per input element, gathering
 *       the taps that read it); dw: one block per weight element, summing
 *       over the batch and the output positions in a fixed order.  Either
 *       layout, the same sums in the same order (the same results).
 *   sg_launch_pool2d_fwd<T>(x, y, g, mode, stream)
 *   sg_pool2d_bwd_workspace(g, mode)   bytes of work for:
 *   sg_launch_pool2d_bwd<T>(dy, x, dx, g, mode, work, stream)
 *   sg_launch_maxpool2d_bwd_relu<T>(dy, x, dx, g, work, stream)
 *       the max pool's backward through the relu that made x:
 *       where(x <= 0, 0, dx), in the argmax pass (a window whose maximum
 *       is <= 0 passes no gradient)
 *       mode 0 max (the window's first maximum, NaN wins, as PyTorch's
 *       CPU kernel), 1 avg (divided by the whole kernel: PyTorch's
 *       count_include_pad), 2 adaptive avg (PyTorch's floor/ceil
 *       windows).  Backward gathers per input element (no atomics); max
 *       first records each window's argmax in work, a byte an output
 *       indexed as y (windows up to 15 x 15; larger ones, with no work,
 *       find it again from x per input element).  Channels last: a thread
 *       takes consecutive channels (16 or 8 bytes of them when c and the
 *       pointers allow) of one position, a warp's loads consecutive; the
 *       windows walked as NCHW's, so the results are the same, bit for
 *       bit.
 *   sg_launch_to_layout<T>(x, y, n, c, hw, to_cl, stream)
 *       to_cl 1: x [n, c, hw] -> y [n, hw, c]; 0: x [n, hw, c] ->
 *       y [n, c, hw].  32 x 32 tiles through shared memory (64 x 64 of
 *       2-byte elements, moved in pairs), both sides coalesced; below 16
 *       channels (an image's colours) or positions (a 3x3 filter's) all
 *       of the narrow side and 256 of the other a block; one channel or
 *       position: a copy.
 *   sg_batch_norm_workspace<T>(n, c, inner, cl)   bytes of work for:
 *   sg_launch_batch_norm_fwd<T, S>(x, rm, rv, w, b, y, mean_out, var_out,
 *                                  work, n, c, inner, cl, eps, training,
 *                                  stream)
 *       x [n, c, inner] (cl 1: [n, inner, c]); rm, rv (S: the running
 *       stats' dtype) read in eval; w, b, mean_out, var_out may be NULL.
 *       Training: each channel's n * inner values split into slices
 *       (about 1024 blocks in all, sgk_bn_chunk), a block per channel and
 *       slice computing the slice's mean and sum of squared deviations in
 *       one pass (Welford), then a thread per channel merging its slices
 *       in order (Chan's formula): the mean and the biased variance; and
 *       into mean_out, var_out [c] of T the mean and the unbiased variance
 *       (m2 / (m - 1), var_mean(x, dims=[0, 2, 3])'s).  Then y pointwise:
 *       x read twice in all.  Channels last: the rows m = n * inner of c
 *       channels split into slices of rows (sgk_bn_chunk_cl), a block a
 *       slice and a range of channels, its threads over channels (16 or 8
 *       bytes of consecutive channels a load where c and the pointers
 *       allow) by rows, each thread's moments merged over the block's rows
 *       in a fixed order; then a block a channel merges its slices.
 *   sg_launch_batch_norm_fwd_relu<T, S>(x, rm, rv, w, b, res, y, mean_out,
 *                                  var_out, work, n, c, inner, cl, eps,
 *                                  training, stream)
 *       The same with the epilogue the compiler folds in: y = relu(bn(x)
 *       + res), rounded as batch_norm, add and relu one after the other
 *       would (res NULL: relu(bn(x))); res in y's layout.
 *       Both take a last, optional SgBnRunning<S> run: in training, the
 *       running statistics' update the compiler folds in (functionalize's
 *       rm = mean * take + rm * keep, rv likewise), stored in place as
 *       the channel's statistics are finished, rounded as the three ops
 *       would round (S and T alike).
 *   sg_launch_batch_norm_bwd<T, S>(dy, x, rm, rv, w, dx, dw, db, work, n,
 *                                  c, inner, cl, eps, training, stream)
 *       dw, db [c] of T: one pass over x and dy split the same way gives
 *       the statistics again with sum(dy) and sum(dy * xhat) (dy's mean
 *       and its co-moment with x, merged as the variance is), then dx
 *       pointwise: x and dy read twice in all (channels last: at most 4
 *       channels a thread in the pass, each with 4 moments).  dw, db may
 *       be NULL; the dx pass reads w * rstd from work, not w, so a last,
 *       optional SgBnSgd<T> sgd can update w (and b) by SGD as the sums
 *       are finished (the compiler's fold of sgd_update_(w, dw) and
 *       sgd_update_(b, db)).
 *   The pointwise kernels keep each value's channel as they walk (no
 *   division a value); channels last, a thread keeps its channels' scale
 *   and shift and walks the rows.
 */
#ifndef SGK_CONV_CUH
#define SGK_CONV_CUH
#include "sgk_common.cuh"
#include "sgk_pointwise.h"
/* nvcc remarks on the helpers a program leaves unused: off here */
#pragma nv_diag_suppress 177

typedef struct {
	long long n, c, h, w, k, r, s, oh, ow, groups, sh, sw, ph, pw, dh, dw, cl;
} SgConvGeom;

#define SGK_CONV_LOOP(i, total)                                                    \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (total); \
	     i += (long long)gridDim.x * blockDim.x)

/* Flat index i of a row-major [., B, C, D] array as (a, b, c, d). */
SGK_DEV void sgk_unflat4(long long i, long long B, long long C, long long D, long long &a,
                         long long &b, long long &c, long long &d)
{
	d = i % D;
	i /= D;
	c = i % C;
	i /= C;
	b = i % B;
	a = i / B;
}

/* Flat index i of a [., C, H, W] array (cl 0) or [., H, W, C] (cl 1) as
 * (a, ch, h, w). */
SGK_DEV void sgk_unflat_lay(long long i, long long C, long long H, long long W, long long cl,
                            long long &a, long long &ch, long long &h, long long &w)
{
	if (cl)
		sgk_unflat4(i, H, W, C, a, h, w, ch);
	else
		sgk_unflat4(i, C, H, W, a, ch, h, w);
}

/* The element strides of x [n, c, h, w], y [n, k, oh, ow] and the weight
 * [k, c/groups, r, s] in g's layout (by logical dimension). */
struct SgkConvStrides {
	long long xn, xc, xh, xw, yn, yk, yh, yw, wk, wc, wr, ws;
};

SGK_DEV SgkConvStrides sgk_conv_strides(const SgConvGeom &g)
{
	const long long cg = g.c / g.groups;
	SgkConvStrides t;
	if (g.cl) {
		t.xc = 1;
		t.xw = g.c;
		t.xh = g.w * g.c;
		t.yk = 1;
		t.yw = g.k;
		t.yh = g.ow * g.k;
		t.wc = 1;
		t.ws = cg;
		t.wr = g.s * cg;
		t.wk = g.r * g.s * cg;
	} else {
		t.xw = 1;
		t.xh = g.w;
		t.xc = g.h * g.w;
		t.yw = 1;
		t.yh = g.ow;
		t.yk = g.oh * g.ow;
		t.ws = 1;
		t.wr = g.s;
		t.wc = g.r * g.s;
		t.wk = cg * g.r * g.s;
	}
	t.xn = g.c * g.h * g.w;
	t.yn = g.k * g.oh * g.ow;
	return t;
}

template <class T>
__global__ void __launch_bounds__(256)
sgk_conv2d_fwd_k(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                 T *__restrict__ y, SgConvGeom g)
{
	typedef typename sgk_acc<T>::type A;
	const long long cg = g.c / g.groups, kg = g.k / g.groups;
	const SgkConvStrides t = sgk_conv_strides(g);
	SGK_CONV_LOOP(i, g.n * g.k * g.oh * g.ow) {
		long long nb, k, oh, ow;
		sgk_unflat_lay(i, g.k, g.oh, g.ow, g.cl, nb, k, oh, ow);
		const long long c0 = k / kg * cg;
		A acc = 0;
		for (long long c = 0; c < cg; c++) {
			const T *xp = x + nb * t.xn + (c0 + c) * t.xc;
			const T *wp = w + k * t.wk + c * t.wc;
			for (long long r = 0; r < g.r; r++) {
				long long ih = oh * g.sh - g.ph + r * g.dh;
				if (ih < 0 || ih >= g.h)
					continue;
				for (long long s = 0; s < g.s; s++) {
					long long iw = ow * g.sw - g.pw + s * g.dw;
					if (iw >= 0 && iw < g.w)
						acc += (A)sgk_tof(xp[ih * t.xh + iw * t.xw]) *
						       (A)sgk_tof(wp[r * t.wr + s * t.ws]);
				}
			}
		}
		if (b)
			acc += (A)sgk_tof(b[k]);
		y[i] = sgk_cvt<T>(acc);
	}
}

/* dx[nb, c, ih, iw]: the sum over the taps (k, r, s) of the outputs
 * whose window reads it, of dy * w. */
template <class T>
__global__ void __launch_bounds__(256)
sgk_conv2d_bwd_input_k(const T *__restrict__ dy, const T *__restrict__ w, T *__restrict__ dx,
                       SgConvGeom g)
{
	typedef typename sgk_acc<T>::type A;
	const long long cg = g.c / g.groups, kg = g.k / g.groups;
	const SgkConvStrides t = sgk_conv_strides(g);
	SGK_CONV_LOOP(i, g.n * g.c * g.h * g.w) {
		long long nb, c, ih, iw;
		sgk_unflat_lay(i, g.c, g.h, g.w, g.cl, nb, c, ih, iw);
		const long long gi = c / cg;
		A acc = 0;
		for (long long k = gi * kg; k < (gi + 1) * kg; k++) {
			const T *dyp = dy + nb * t.yn + k * t.yk;
			const T *wp = w + k * t.wk + (c - gi * cg) * t.wc;
			for (long long r = 0; r < g.r; r++) {
				long long th = ih + g.ph - r * g.dh;
				if (th < 0 || th % g.sh || th / g.sh >= g.oh)
					continue;
				for (long long s = 0; s < g.s; s++) {
					long long tw = iw + g.pw - s * g.dw;
					if (tw < 0 || tw % g.sw || tw / g.sw >= g.ow)
						continue;
					acc += (A)sgk_tof(dyp[th / g.sh * t.yh + tw / g.sw * t.yw]) *
					       (A)sgk_tof(wp[r * t.wr + s * t.ws]);
				}
			}
		}
		dx[i] = sgk_cvt<T>(acc);
	}
}

/* dw[k, c, r, s]: one block sums dy * x over the batch and the output
 * positions. */
template <class T>
__global__ void __launch_bounds__(256)
sgk_conv2d_bwd_weight_k(const T *__restrict__ dy, const T *__restrict__ x, T *__restrict__ dw,
                        SgConvGeom g)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ A part[32];
	const long long cg = g.c / g.groups, kg = g.k / g.groups;
	const SgkConvStrides t = sgk_conv_strides(g);
	for (long long e = blockIdx.x; e < g.k * cg * g.r * g.s; e += gridDim.x) {
		long long k, c, r, s;
		sgk_unflat_lay(e, cg, g.r, g.s, g.cl, k, c, r, s);
		const long long xc = k / kg * cg + c;
		A acc = 0;
		for (long long p = threadIdx.x; p < g.n * g.oh * g.ow; p += blockDim.x) {
			long long ow = p % g.ow, q = p / g.ow, oh = q % g.oh, nb = q / g.oh;
			long long ih = oh * g.sh - g.ph + r * g.dh, iw = ow * g.sw - g.pw + s * g.dw;
			if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
				acc += (A)sgk_tof(dy[nb * t.yn + k * t.yk + oh * t.yh + ow * t.yw]) *
				       (A)sgk_tof(x[nb * t.xn + xc * t.xc + ih * t.xh + iw * t.xw]);
		}
		acc = sgk_row_sum<256>(acc, part);
		if (threadIdx.x == 0)
			dw[e] = sgk_cvt<T>(acc);
	}
}

/* The pools' sizes in the index type I: int when every flat index fits,
 * so the per-element divisions are 32-bit ones (a 64-bit division by a
 * value known only at run time costs several times more). */
template <class I>
struct SgkPoolGeom {
	I n, c, h, w, r, s, oh, ow, sh, sw, ph, pw;
};
template <class I>
SGK_DEV SgkPoolGeom<I> sgk_pool_geom(const SgConvGeom &g)
{
	SgkPoolGeom<I> p = {(I)g.n, (I)g.c, (I)g.h, (I)g.w, (I)g.r, (I)g.s, (I)g.oh, (I)g.ow,
	                    (I)g.sh, (I)g.sw, (I)g.ph, (I)g.pw};
	return p;
}

/* The window of pool output (oh, ow): rows [h0, h1), cols [w0, w1) of
 * the input, clipped; cnt the divisor. */
template <class I>
SGK_DEV void sgk_pool_window(const SgkPoolGeom<I> &g, int mode, I oh, I ow, I &h0, I &h1, I &w0,
                             I &w1, I &cnt)
{
	if (mode == 2) {
		h0 = oh * g.h / g.oh;
		h1 = ((oh + 1) * g.h + g.oh - 1) / g.oh;
		w0 = ow * g.w / g.ow;
		w1 = ((ow + 1) * g.w + g.ow - 1) / g.ow;
		cnt = (h1 - h0) * (w1 - w0);
		return;
	}
	I hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
	cnt = g.r * g.s;
	h0 = hs < 0 ? 0 : hs;
	w0 = ws < 0 ? 0 : ws;
	h1 = hs + g.r < g.h ? hs + g.r : g.h;
	w1 = ws + g.s < g.w ? ws + g.s : g.w;
}

/* In one dimension, the pool outputs [lo, hi) whose window (kernel k,
 * stride s, padding p; o outputs) holds input index i: those with
 * o * s - p <= i < o * s - p + k. */
template <class I>
SGK_DEV void sgk_pool_outs(I i, I k, I s, I p, I o, I &lo, I &hi)
{
	const I a = i + p - k + 1;
	lo = a <= 0 ? 0 : (a + s - 1) / s;
	hi = (i + p) / s + 1;
	hi = hi < o ? hi : o;
}

/* VEC accumulators rounded to T, stored together at p. */
template <int VEC, class T, class A>
SGK_DEV void sgk_stv_acc(T *p, const A *acc)
{
	sgk_reg<VEC, T> r;
#pragma unroll
	for (int k = 0; k < VEC; k++)
		r.v[k] = sgk_cvt<T>(acc[k]);
	sgk_stv<VEC>(p, r);
}

/* The flat index in its plane of window's maximum (-1 if empty). */
template <class T, class I>
SGK_DEV I sgk_pool_argmax(const T *plane, I W, I h0, I h1, I w0, I w1)
{
	typedef typename sgk_acc<T>::type A;
	I best = -1;
	A m = -SGK_INF;
	for (I h = h0; h < h1; h++)
		for (I w = w0; w < w1; w++) {
			A v = (A)sgk_tof(plane[h * W + w]);
			if (best < 0 || v > m || v != v) {
				m = v;
				best = h * W + w;
			}
		}
	return best;
}

/* take(h, w) for each place of the window rows [h0, h1), columns [w0,
 * w1), rows first; SMALL (windows of at most 3 x 3, max pools): the walk
 * unrolled, so that the loads take makes are in flight together. */
template <int SMALL, class I, class F>
SGK_DEV void sgk_pool_walk(I h0, I h1, I w0, I w1, F &take)
{
	if (SMALL) {
#pragma unroll
		for (int dh = 0; dh < 3; dh++)
#pragma unroll
			for (int dw = 0; dw < 3; dw++)
				if (h0 + dh < h1 && w0 + dw < w1)
					take(h0 + dh, w0 + dw);
	} else {
		for (I h = h0; h < h1; h++)
			for (I w = w0; w < w1; w++)
				take(h, w);
	}
}

/* A grid-stride loop over [0, total) in the index type I. */
#define SGK_POOL_LOOP(I, i, total)                                             \
	for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < (total);         \
	     i += (I)(gridDim.x * blockDim.x))

template <class T, class I>
__global__ void __launch_bounds__(256)
sgk_pool2d_fwd_k(const T *__restrict__ x, T *__restrict__ y, SgConvGeom geom, int mode)
{
	typedef typename sgk_acc<T>::type A;
	const SgkPoolGeom<I> g = sgk_pool_geom<I>(geom);
	SGK_POOL_LOOP(I, i, g.n * g.c * g.oh * g.ow) {
		I ow = i % g.ow, t = i / g.ow, oh = t % g.oh, pl = t / g.oh;
		I h0, h1, w0, w1, cnt;
		const T *plane = x + (long long)pl * g.h * g.w;
		sgk_pool_window(g, mode, oh, ow, h0, h1, w0, w1, cnt);
		if (mode == 0) {
			I k = sgk_pool_argmax(plane, g.w, h0, h1, w0, w1);
			y[i] = k < 0 ? sgk_cvt<T>(-SGK_INF) : plane[k];
			continue;
		}
		A acc = 0;
		for (I h = h0; h < h1; h++)
			for (I w = w0; w < w1; w++)
				acc += (A)sgk_tof(plane[h * g.w + w]);
		y[i] = sgk_cvt<T>(acc / (A)cnt);
	}
}

/* dx per input element: the outputs whose window holds it (max: whose
 * maximum it is) add their dy (avg: dy / count). */
template <class T, class I>
__global__ void __launch_bounds__(256)
sgk_pool2d_bwd_k(const T *__restrict__ dy, const T *__restrict__ x, T *__restrict__ dx,
                 SgConvGeom geom, int mode)
{
	typedef typename sgk_acc<T>::type A;
	const SgkPoolGeom<I> g = sgk_pool_geom<I>(geom);
	SGK_POOL_LOOP(I, i, g.n * g.c * g.h * g.w) {
		I iw = i % g.w, t = i / g.w, ih = t % g.h, pl = t / g.h;
		I oh0 = 0, oh1 = g.oh, ow0 = 0, ow1 = g.ow;   /* adaptive: every output */
		if (mode != 2) {
			sgk_pool_outs(ih, g.r, g.sh, g.ph, g.oh, oh0, oh1);
			sgk_pool_outs(iw, g.s, g.sw, g.pw, g.ow, ow0, ow1);
		}
		A acc = 0;
		for (I oh = oh0; oh < oh1; oh++)
			for (I ow = ow0; ow < ow1; ow++) {
				I h0, h1, w0, w1, cnt;
				sgk_pool_window(g, mode, oh, ow, h0, h1, w0, w1, cnt);
				if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1)
					continue;
				A gv = (A)sgk_tof(dy[((long long)pl * g.oh + oh) * g.ow + ow]);
				if (mode == 0) {
					if (sgk_pool_argmax(x + (long long)pl * g.h * g.w, g.w, h0, h1, w0,
					                    w1) == ih * g.w + iw)
						acc += gv;
				} else {
					acc += gv / (A)cnt;
				}
			}
		dx[i] = sgk_cvt<T>(acc);
	}
}

/* The rows (plane, row) of [planes, len] a block row takes: threadIdx.y
 * walks them by the grid's block rows, threadIdx.x their columns. */
#define SGK_ROWS_LOOP(row, nrows)                                               \
	for (int row = blockIdx.x * blockDim.y + threadIdx.y; row < (nrows);        \
	     row += gridDim.x * blockDim.y)

/* max_pool2d's backward, phase 1: each output's argmax as kh * 16 + kw,
 * its place in the unclipped window (255: an empty window), one byte an
 * output, so that phase 2 finds it again without the window's loads.  A
 * row of threads takes an output row (plane, oh) at a time; SH and SW the
 * strides when known at compile time (0: g's), so that the divisions by
 * them are shifts.  relu: x is a relu's result and the gradient goes on
 * through the relu's backward, where(x <= 0, 0, g): a window whose
 * maximum is <= 0 records 255 too, as that maximum is the x where its
 * gradient lands (NaN is no <= 0: it passes, as where's le). */
template <class T, int SH, int SW>
__global__ void __launch_bounds__(256)
sgk_maxpool_arg_k(const T *__restrict__ x, unsigned char *__restrict__ arg, SgConvGeom geom,
                  int relu)
{
	typedef typename sgk_acc<T>::type A;
	const SgkPoolGeom<int> g = sgk_pool_geom<int>(geom);
	const int sh = SH ? SH : g.sh, sw = SW ? SW : g.sw;
	SGK_ROWS_LOOP(row, g.n * g.c * g.oh) {
		const int oh = row % g.oh, pl = row / g.oh;
		const T *plane = x + (long long)pl * g.h * g.w;
		const int hs = oh * sh - g.ph, h0 = hs < 0 ? 0 : hs;
		const int h1 = hs + g.r < g.h ? hs + g.r : g.h;
		for (int ow = threadIdx.x; ow < g.ow; ow += blockDim.x) {
			const int ws = ow * sw - g.pw, w0 = ws < 0 ? 0 : ws;
			const int w1 = ws + g.s < g.w ? ws + g.s : g.w;
			int bh = -1, bw = 0;
			A m = -SGK_INF;
			for (int h = h0; h < h1; h++)
				for (int w = w0; w < w1; w++) {
					const A v = (A)sgk_tof(plane[h * g.w + w]);
					if (bh < 0 || v > m || v != v) {
						m = v;
						bh = h;
						bw = w;
					}
				}
			arg[(long long)row * g.ow + ow] =
				bh < 0 || (relu && m <= (A)0) ? (unsigned char)255
				                              : (unsigned char)((bh - hs) * 16 + (bw - ws));
		}
	}
}

/* Phase 2, over the input rows (plane, ih) as phase 1 over the output
 * rows, a thread a column: the dy of the outputs whose recorded argmax it
 * is, added in the same order as sgk_pool2d_bwd_k's. */
template <class T, int SH, int SW>
__global__ void __launch_bounds__(256)
sgk_maxpool_bwd_k(const T *__restrict__ dy, const unsigned char *__restrict__ arg,
                  T *__restrict__ dx, SgConvGeom geom)
{
	typedef typename sgk_acc<T>::type A;
	const SgkPoolGeom<int> g = sgk_pool_geom<int>(geom);
	const int sh = SH ? SH : g.sh, sw = SW ? SW : g.sw;
	SGK_ROWS_LOOP(row, g.n * g.c * g.h) {
		const int ih = row % g.h, pl = row / g.h;
		int oh0, oh1;
		sgk_pool_outs(ih, g.r, sh, g.ph, g.oh, oh0, oh1);
		const long long pbase = (long long)pl * g.oh * g.ow;
		for (int iw = threadIdx.x; iw < g.w; iw += blockDim.x) {
			int ow0, ow1;
			sgk_pool_outs(iw, g.s, sw, g.pw, g.ow, ow0, ow1);
			A acc = 0;
			for (int oh = oh0; oh < oh1; oh++)
				for (int ow = ow0; ow < ow1; ow++) {
					const long long o = pbase + (long long)oh * g.ow + ow;
					const int k = arg[o];
					if (k != 255 && oh * sh - g.ph + (k >> 4) == ih &&
					    ow * sw - g.pw + (k & 15) == iw)
						acc += (A)sgk_tof(dy[o]);
				}
			dx[(long long)row * g.w + iw] = sgk_cvt<T>(acc);
		}
	}
}

/* The pools channels last (x [n, h, w, c], y [n, oh, ow, c]): a thread
 * takes VEC consecutive channels (c a multiple of VEC, the pointers
 * aligned to the vector) of one position (output: forward and argmax;
 * input: backward), consecutive threads the next channels, so that a
 * warp's loads are consecutive.  Each channel's window is walked as the
 * NCHW kernels walk it (rows, then columns; the outputs of an input in
 * (oh, ow) order), so the results are theirs, bit for bit. */

template <class T, class I, int VEC, int SMALL>
__global__ void __launch_bounds__(256)
sgk_pool2d_fwd_cl_k(const T *__restrict__ x, T *__restrict__ y, SgConvGeom geom, int mode)
{
	typedef typename sgk_acc<T>::type A;
	const SgkPoolGeom<I> g = sgk_pool_geom<I>(geom);
	const I cv = g.c / VEC;
	SGK_POOL_LOOP(I, i, g.n * g.oh * g.ow * cv) {
		const I j = i % cv, t = i / cv, ow = t % g.ow, t2 = t / g.ow, oh = t2 % g.oh;
		const I nb = t2 / g.oh;
		I h0, h1, w0, w1, cnt;
		sgk_pool_window(g, mode, oh, ow, h0, h1, w0, w1, cnt);
		const T *img = x + (long long)nb * g.h * g.w * g.c + (long long)j * VEC;
		if (mode == 0) {
			sgk_reg<VEC, T> r;
			A m[VEC];
			bool any = false;
#pragma unroll
			for (int k = 0; k < VEC; k++) {
				m[k] = -SGK_INF;
				r.v[k] = sgk_cvt<T>(-SGK_INF);
			}
			auto take = [&](I h, I w) {
				const sgk_reg<VEC, T> v = sgk_ldv<VEC>(img + (h * g.w + w) * g.c);
#pragma unroll
				for (int k = 0; k < VEC; k++) {
					const A a = (A)sgk_tof(v.v[k]);
					if (!any || a > m[k] || a != a) {
						m[k] = a;
						r.v[k] = v.v[k];
					}
				}
				any = true;
			};
			sgk_pool_walk<SMALL>(h0, h1, w0, w1, take);
			sgk_stv<VEC>(y + (long long)i * VEC, r);
			continue;
		}
		A acc[VEC];
#pragma unroll
		for (int k = 0; k < VEC; k++)
			acc[k] = 0;
		for (I h = h0; h < h1; h++)
			for (I w = w0; w < w1; w++) {
				const sgk_reg<VEC, T> v = sgk_ldv<VEC>(img + (h * g.w + w) * g.c);
#pragma unroll
				for (int k = 0; k < VEC; k++)
					acc[k] += (A)sgk_tof(v.v[k]);
			}
#pragma unroll
		for (int k = 0; k < VEC; k++)
			acc[k] /= (A)cnt;
		sgk_stv_acc<VEC>(y + (long long)i * VEC, acc);
	}
}

/* dx per input element as sgk_pool2d_bwd_k, VEC channels a thread (max:
 * each channel's argmax of each window found again). */
template <class T, class I, int VEC>
__global__ void __launch_bounds__(256)
sgk_pool2d_bwd_cl_k(const T *__restrict__ dy, const T *__restrict__ x, T *__restrict__ dx,
                    SgConvGeom geom, int mode)
{
	typedef typename sgk_acc<T>::type A;
	const SgkPoolGeom<I> g = sgk_pool_geom<I>(geom);
	const I cv = g.c / VEC;
	SGK_POOL_LOOP(I, i, g.n * g.h * g.w * cv) {
		const I j = i % cv, t = i / cv, iw = t % g.w, t2 = t / g.w, ih = t2 % g.h;
		const I nb = t2 / g.h;
		I oh0 = 0, oh1 = g.oh, ow0 = 0, ow1 = g.ow;   /* adaptive: every output */
		if (mode != 2) {
			sgk_pool_outs(ih, g.r, g.sh, g.ph, g.oh, oh0, oh1);
			sgk_pool_outs(iw, g.s, g.sw, g.pw, g.ow, ow0, ow1);
		}
		const T *img = x + (long long)nb * g.h * g.w * g.c + (long long)j * VEC;
		const T *dimg = dy + (long long)nb * g.oh * g.ow * g.c + (long long)j * VEC;
		A acc[VEC];
#pragma unroll
		for (int k = 0; k < VEC; k++)
			acc[k] = 0;
		for (I oh = oh0; oh < oh1; oh++)
			for (I ow = ow0; ow < ow1; ow++) {
				I h0, h1, w0, w1, cnt;
				sgk_pool_window(g, mode, oh, ow, h0, h1, w0, w1, cnt);
				if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1)
					continue;
				const sgk_reg<VEC, T> gv = sgk_ldv<VEC>(dimg + (oh * g.ow + ow) * g.c);
				if (mode != 0) {
#pragma unroll
					for (int k = 0; k < VEC; k++)
						acc[k] += (A)sgk_tof(gv.v[k]) / (A)cnt;
					continue;
				}
				I best[VEC];
				A m[VEC];
#pragma unroll
				for (int k = 0; k < VEC; k++) {
					best[k] = -1;
					m[k] = -SGK_INF;
				}
				for (I h = h0; h < h1; h++)
					for (I w = w0; w < w1; w++) {
						const sgk_reg<VEC, T> v =
							sgk_ldv<VEC>(img + (h * g.w + w) * g.c);
#pragma unroll
						for (int k = 0; k < VEC; k++) {
							const A a = (A)sgk_tof(v.v[k]);
							if (best[k] < 0 || a > m[k] || a != a) {
								m[k] = a;
								best[k] = h * g.w + w;
							}
						}
					}
#pragma unroll
				for (int k = 0; k < VEC; k++)
					if (best[k] == ih * g.w + iw)
						acc[k] += (A)sgk_tof(gv.v[k]);
			}
		sgk_stv_acc<VEC>(dx + (long long)i * VEC, acc);
	}
}

/* max_pool2d's backward channels last, phase 1 (as sgk_maxpool_arg_k):
 * a thread an output position's VEC channels, their argmax bytes stored
 * together (arg aligned to VEC bytes). */
template <class T, int VEC, int SMALL>
__global__ void __launch_bounds__(256)
sgk_maxpool_arg_cl_k(const T *__restrict__ x, unsigned char *__restrict__ arg, SgConvGeom geom,
                     int relu)
{
	typedef typename sgk_acc<T>::type A;
	const SgkPoolGeom<int> g = sgk_pool_geom<int>(geom);
	const int cv = g.c / VEC;
	SGK_POOL_LOOP(int, i, g.n * g.oh * g.ow * cv) {
		const int j = i % cv, t = i / cv, ow = t % g.ow, t2 = t / g.ow, oh = t2 % g.oh;
		const int nb = t2 / g.oh;
		const T *img = x + (long long)nb * g.h * g.w * g.c + (long long)j * VEC;
		const int hs = oh * g.sh - g.ph, h0 = hs < 0 ? 0 : hs;
		const int h1 = hs + g.r < g.h ? hs + g.r : g.h;
		const int ws = ow * g.sw - g.pw, w0 = ws < 0 ? 0 : ws;
		const int w1 = ws + g.s < g.w ? ws + g.s : g.w;
		int bh[VEC], bw[VEC];
		A m[VEC];
#pragma unroll
		for (int k = 0; k < VEC; k++) {
			bh[k] = -1;
			bw[k] = 0;
			m[k] = -SGK_INF;
		}
		auto take = [&](int h, int w) {
			const sgk_reg<VEC, T> v = sgk_ldv<VEC>(img + (h * g.w + w) * g.c);
#pragma unroll
			for (int k = 0; k < VEC; k++) {
				const A a = (A)sgk_tof(v.v[k]);
				if (bh[k] < 0 || a > m[k] || a != a) {
					m[k] = a;
					bh[k] = h;
					bw[k] = w;
				}
			}
		};
		sgk_pool_walk<SMALL>(h0, h1, w0, w1, take);
		sgk_reg<VEC, unsigned char> r;
#pragma unroll
		for (int k = 0; k < VEC; k++)
			r.v[k] = bh[k] < 0 || (relu && m[k] <= (A)0)
			                 ? (unsigned char)255
			                 : (unsigned char)((bh[k] - hs) * 16 + (bw[k] - ws));
		sgk_stv<VEC>(arg + (long long)i * VEC, r);
	}
}

/* Phase 2 channels last (as sgk_maxpool_bwd_k): a thread an input
 * position's VEC channels; dy loaded only where one of them is an
 * output's recorded argmax, each channel's dy added in (oh, ow) order.
 * S2: strides 2 and windows of at most 4 x 4, so that at most 2 x 2
 * outputs hold an input: their argmax bytes loaded together, then the dy
 * they need together, then added. */
template <class T, int VEC, int S2>
__global__ void __launch_bounds__(256)
sgk_maxpool_bwd_cl_k(const T *__restrict__ dy, const unsigned char *__restrict__ arg,
                     T *__restrict__ dx, SgConvGeom geom)
{
	typedef typename sgk_acc<T>::type A;
	const SgkPoolGeom<int> g = sgk_pool_geom<int>(geom);
	const int cv = g.c / VEC, sh = S2 ? 2 : g.sh, sw = S2 ? 2 : g.sw;
	SGK_POOL_LOOP(int, i, g.n * g.h * g.w * cv) {
		const int j = i % cv, t = i / cv, iw = t % g.w, t2 = t / g.w, ih = t2 % g.h;
		const int nb = t2 / g.h;
		int oh0, oh1, ow0, ow1;
		sgk_pool_outs(ih, g.r, sh, g.ph, g.oh, oh0, oh1);
		sgk_pool_outs(iw, g.s, sw, g.pw, g.ow, ow0, ow1);
		const long long base = (long long)nb * g.oh * g.ow * g.c + (long long)j * VEC;
		A acc[VEC];
#pragma unroll
		for (int k = 0; k < VEC; k++)
			acc[k] = 0;
		if (S2) {
			/* want: (dh, dw) in the window as the byte records it (never
			 * 255 here) */
			sgk_reg<VEC, unsigned char> ar[2][2];
			sgk_reg<VEC, T> gv[2][2];
			bool use[2][2];
			int want[2][2];
#pragma unroll
			for (int p = 0; p < 2; p++)
#pragma unroll
				for (int q = 0; q < 2; q++) {
					const int oh = oh0 + p, ow = ow0 + q;
					use[p][q] = oh < oh1 && ow < ow1;
					want[p][q] = (ih - (oh * 2 - g.ph)) * 16 + iw - (ow * 2 - g.pw);
					if (use[p][q])
						ar[p][q] = sgk_ldv<VEC>(arg + base +
						                        (long long)(oh * g.ow + ow) * g.c);
				}
#pragma unroll
			for (int p = 0; p < 2; p++)
#pragma unroll
				for (int q = 0; q < 2; q++) {
					bool any = false;
#pragma unroll
					for (int k = 0; k < VEC; k++)
						any = any || ar[p][q].v[k] == want[p][q];
					use[p][q] = use[p][q] && any;
					if (use[p][q])
						gv[p][q] = sgk_ldv<VEC>(
							dy + base + (long long)((oh0 + p) * g.ow + ow0 + q) * g.c);
				}
#pragma unroll
			for (int p = 0; p < 2; p++)
#pragma unroll
				for (int q = 0; q < 2; q++)
					if (use[p][q])
#pragma unroll
						for (int k = 0; k < VEC; k++)
							if (ar[p][q].v[k] == want[p][q])
								acc[k] += (A)sgk_tof(gv[p][q].v[k]);
		} else {
			for (int oh = oh0; oh < oh1; oh++)
				for (int ow = ow0; ow < ow1; ow++) {
					const long long o = base + (long long)(oh * g.ow + ow) * g.c;
					const sgk_reg<VEC, unsigned char> ar = sgk_ldv<VEC>(arg + o);
					/* (dh, dw) in the window as the byte records it */
					const int want = (ih - (oh * sh - g.ph)) * 16 + iw - (ow * sw - g.pw);
					bool hit[VEC], any = false;
#pragma unroll
					for (int k = 0; k < VEC; k++) {
						hit[k] = ar.v[k] != 255 && ar.v[k] == want;
						any = any || hit[k];
					}
					if (!any)
						continue;
					const sgk_reg<VEC, T> gv = sgk_ldv<VEC>(dy + o);
#pragma unroll
					for (int k = 0; k < VEC; k++)
						if (hit[k])
							acc[k] += (A)sgk_tof(gv.v[k]);
				}
		}
		sgk_stv_acc<VEC>(dx + (long long)i * VEC, acc);
	}
}

/* Phase 2 channels last with strides 2 and windows of at most 3 x 3
 * (ResNet's stem pool): a thread takes a 2 x 2 block of input positions
 * (rows 2a, 2a + 1, columns 2b, 2b + 1) and VEC channels.  The at most
 * 2 x 2 outputs whose windows hold them have their argmax bytes and dy
 * loaded together, and each output's dy is added into the position its
 * byte names, in (oh, ow) order: sgk_maxpool_bwd_cl_k's sums, bit for
 * bit, with a quarter of its threads' index arithmetic and the loads of
 * four positions in flight at once. */
template <class T, int VEC>
__global__ void __launch_bounds__(256)
sgk_maxpool_bwd2_cl_k(const T *__restrict__ dy, const unsigned char *__restrict__ arg,
                      T *__restrict__ dx, SgConvGeom geom)
{
	typedef typename sgk_acc<T>::type A;
	const SgkPoolGeom<int> g = sgk_pool_geom<int>(geom);
	const int cv = g.c / VEC, hb = (g.h + 1) / 2, wb = (g.w + 1) / 2;
	SGK_POOL_LOOP(int, i, g.n * hb * wb * cv) {
		const int j = i % cv, t = i / cv, b = t % wb, t2 = t / wb, a = t2 % hb;
		const int nb = t2 / hb, ih0 = 2 * a, iw0 = 2 * b;
		const int nh = g.h - ih0 < 2 ? 1 : 2, nw = g.w - iw0 < 2 ? 1 : 2;
		int oh0, oh1, ow0, ow1, unused;
		sgk_pool_outs(ih0, g.r, 2, g.ph, g.oh, oh0, unused);
		sgk_pool_outs(ih0 + nh - 1, g.r, 2, g.ph, g.oh, unused, oh1);
		sgk_pool_outs(iw0, g.s, 2, g.pw, g.ow, ow0, unused);
		sgk_pool_outs(iw0 + nw - 1, g.s, 2, g.pw, g.ow, unused, ow1);
		const long long base = (long long)nb * g.oh * g.ow * g.c + (long long)j * VEC;
		sgk_reg<VEC, unsigned char> ar[2][2];
		sgk_reg<VEC, T> gv[2][2];
#pragma unroll
		for (int p = 0; p < 2; p++)
#pragma unroll
			for (int q = 0; q < 2; q++)
				if (oh0 + p < oh1 && ow0 + q < ow1) {
					const long long o = base + (long long)((oh0 + p) * g.ow + ow0 + q) * g.c;
					ar[p][q] = sgk_ldv<VEC>(arg + o);
					gv[p][q] = sgk_ldv<VEC>(dy + o);
				}
		A acc[2][2][VEC];
#pragma unroll
		for (int p = 0; p < 2; p++)
#pragma unroll
			for (int q = 0; q < 2; q++)
#pragma unroll
				for (int k = 0; k < VEC; k++)
					acc[p][q][k] = 0;
#pragma unroll
		for (int p = 0; p < 2; p++)
#pragma unroll
			for (int q = 0; q < 2; q++) {
				if (oh0 + p >= oh1 || ow0 + q >= ow1)
					continue;
				/* the window's maximum at (dh, dw) = (h, w) - (hs, ws)
				 * of this block's (pp, qq) when byte = want[pp][qq] */
				const int hs = (oh0 + p) * 2 - g.ph, ws = (ow0 + q) * 2 - g.pw;
#pragma unroll
				for (int k = 0; k < VEC; k++) {
					const int byte = ar[p][q].v[k];
#pragma unroll
					for (int pp = 0; pp < 2; pp++)
#pragma unroll
						for (int qq = 0; qq < 2; qq++)
							if (byte == (ih0 + pp - hs) * 16 + iw0 + qq - ws)
								acc[pp][qq][k] += (A)sgk_tof(gv[p][q].v[k]);
				}
			}
#pragma unroll
		for (int p = 0; p < 2; p++)
#pragma unroll
			for (int q = 0; q < 2; q++)
				if (p < nh && q < nw)
					sgk_stv_acc<VEC>(dx + (((long long)nb * g.h + ih0 + p) * g.w + iw0 + q) *
					                          g.c + (long long)j * VEC,
					                 acc[p][q]);
	}
}

/* Layout conversion: each of n [rows, cols] matrices into [cols, rows]
 * (to channels last: rows c, cols hw; back: rows hw, cols c), a tile of
 * 32P x 32P at a time through shared memory (P = 2 for 2-byte elements,
 * moved as 4-byte pairs; else 1; the odd row length keeps a warp's reads
 * down a tile's column on distinct banks): 32 x 8 threads read the tile
 * along its rows, P elements a thread (a pair in one load when pld, the
 * rows' length even and x aligned), and write it along the output's rows
 * likewise (pst), both coalesced.  The grid's x, y and z take the tiles
 * of cols, of rows and the matrices, each looping when there are more
 * than it holds. */
template <class T, int P>
__global__ void __launch_bounds__(256)
sgk_transpose_k(const T *__restrict__ x, T *__restrict__ y, long long n, long long rows,
                long long cols, int pld, int pst)
{
	enum { TS = 32 * P };
	__shared__ T tile[TS][TS + 1];
	const long long tr = (rows + TS - 1) / TS, tc = (cols + TS - 1) / TS;
	const int tx = threadIdx.x, ty = threadIdx.y;
	for (long long b = blockIdx.z; b < n; b += gridDim.z)
		for (long long by = blockIdx.y; by < tr; by += gridDim.y)
			for (long long bx = blockIdx.x; bx < tc; bx += gridDim.x) {
				const T *xb = x + b * rows * cols;
				T *yb = y + b * rows * cols;
				const long long r0 = by * TS, c0 = bx * TS, cc = c0 + P * tx;
				for (int k = ty; k < TS && r0 + k < rows; k += 8) {
					const T *xp = xb + (r0 + k) * cols + cc;
					if (P > 1 && pld && cc + P <= cols) {
						const sgk_reg<P, T> v = sgk_ldv<P>(xp);
#pragma unroll
						for (int e = 0; e < P; e++)
							tile[k][P * tx + e] = v.v[e];
					} else {
#pragma unroll
						for (int e = 0; e < P; e++)
							if (cc + e < cols)
								tile[k][P * tx + e] = xp[e];
					}
				}
				__syncthreads();
				const long long rr = r0 + P * tx;
				for (int k = ty; k < TS && c0 + k < cols; k += 8) {
					T *yp = yb + (c0 + k) * rows + rr;
					if (P > 1 && pst && rr + P <= rows) {
						sgk_reg<P, T> v;
#pragma unroll
						for (int e = 0; e < P; e++)
							v.v[e] = tile[P * tx + e][k];
						sgk_stv<P>(yp, v);
					} else {
#pragma unroll
						for (int e = 0; e < P; e++)
							if (rr + e < rows)
								yp[e] = tile[P * tx + e][k];
					}
				}
				__syncthreads();
			}
}

/* The side below which a layout conversion's side is narrow. */
enum { SGK_NARROW = 16 };

/* The layout conversion for a few channels (an image's colours) or a
 * few positions (a filter's): each of n [rows, cols] matrices into
 * [cols, rows] as sgk_transpose_k, with rows or cols (the narrow side,
 * s of them) below SGK_NARROW.  A block takes 256 of the wide side and
 * all s of the narrow one, 256 s values: one run of memory on one side
 * (x's when cols is narrow, y's when rows is) and s runs of 256 on the
 * other, both read or written by consecutive threads through shared
 * memory.  The grid loops over the tiles of all matrices. */
template <class T>
__global__ void __launch_bounds__(256)
sgk_transpose_narrow_k(const T *__restrict__ x, T *__restrict__ y, long long n, int rows,
                       int cols, int cols_narrow)
{
	__shared__ T tile[SGK_NARROW * 256];
	const int s = cols_narrow ? cols : rows;
	const long long wide = cols_narrow ? rows : cols, nt = (wide + 255) / 256;
	const int t = threadIdx.x;
	for (long long bt = blockIdx.x; bt < n * nt; bt += gridDim.x) {
		const long long b = bt / nt, w0 = bt % nt * 256;
		const int wn = (int)(wide - w0 < 256 ? wide - w0 : 256);
		const long long base = b * rows * cols;
		if (cols_narrow) { /* rows w0.. of x, whole: one run; y's s rows */
			const T *xp = x + base + w0 * cols;
			for (int e = t; e < wn * s; e += 256)
				tile[e] = xp[e];
			__syncthreads();
			if (t < wn)
				for (int j = 0; j < s; j++)
					y[base + (long long)j * rows + w0 + t] = tile[t * s + j];
		} else {           /* x's s rows, columns w0..; y's rows w0.., whole */
			if (t < wn)
				for (int i = 0; i < s; i++)
					tile[t * s + i] = x[base + (long long)i * cols + w0 + t];
			__syncthreads();
			T *yp = y + base + w0 * rows;
			for (int e = t; e < wn * s; e += 256)
				yp[e] = tile[e];
		}
		__syncthreads();
	}
}

/* A thread's walk through channel ch's values of x [n, c, inner]: value
 * p = q * inner + i (p from p0 by step) at offset (q * c + ch) * inner + i,
 * kept without a division a step. */
struct SgkChanWalk {
	long long off, i, di, doff, inner, skip;
	__device__ __forceinline__ SgkChanWalk(long long p0, long long step, long long ch, long long c,
	                    long long inner_)
	{
		inner = inner_;
		i = p0 % inner;
		off = (p0 / inner * c + ch) * inner + i;
		di = step % inner;
		doff = di + step / inner * c * inner;
		skip = c * inner - inner;
	}
	__device__ __forceinline__ void next()
	{
		i += di;
		off += doff;
		if (i >= inner) {
			i -= inner;
			off += skip;
		}
	}
};

/* A grid-stride walk through all of x [n, c, inner] (flat index i from
 * the thread's, by the grid's threads) keeping each value's channel
 * without a division a step. */
struct SgkFlatWalk {
	long long i, w, ch, dw, dch, inner, c;
	__device__ __forceinline__ SgkFlatWalk(long long c_, long long inner_)
	{
		const long long step = (long long)gridDim.x * blockDim.x;
		c = c_;
		inner = inner_;
		i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
		w = i % inner;
		ch = i / inner % c;
		dw = step % inner;
		dch = step / inner % c;
	}
	__device__ __forceinline__ void next()
	{
		i += (long long)gridDim.x * blockDim.x;
		w += dw;
		ch += dch;
		if (w >= inner) {
			w -= inner;
			ch++;
		}
		if (ch >= c)
			ch -= c;
	}
};

/* Running moments of a set of pairs (x, y): their count, the means, x's
 * sum of squared deviations m2 and the co-moment cxy = sum((x - mx) *
 * (y - my)) (Welford's update, one pass; merge is Chan's formula, so a
 * block's threads combine in a fixed order).  sum(y * (x - mx)) = cxy. */
template <class A>
struct SgkMoments {
	A n, mx, m2, my, cxy;
	__device__ __forceinline__ void add(A x, A y)
	{
		n += (A)1;
		const A r = (A)1 / n, dx = x - mx;
		mx += dx * r;
		m2 += dx * (x - mx);
		my += (y - my) * r;
		cxy += dx * (y - my);
	}
	__device__ __forceinline__ void merge(const SgkMoments &o)
	{
		const A t = n + o.n;
		if (o.n == (A)0)
			return;
		if (n == (A)0) {
			*this = o;
			return;
		}
		const A f = n * o.n / t, dx = o.mx - mx, dy = o.my - my;
		m2 += o.m2 + dx * dx * f;
		cxy += o.cxy + dx * dy * f;
		mx += dx * (o.n / t);
		my += dy * (o.n / t);
		n = t;
	}
};

/* The block's 256 threads' moments merged (warps by shuffles, then the
 * eight warps in order by warp 0); the result is thread 0's. */
template <class A>
SGK_DEV SgkMoments<A> sgk_block_moments(SgkMoments<A> v, SgkMoments<A> *sh)
{
	for (int o = 1; o < 32; o <<= 1) {
		SgkMoments<A> u;
		u.n = __shfl_down_sync(0xffffffffu, v.n, o);
		u.mx = __shfl_down_sync(0xffffffffu, v.mx, o);
		u.m2 = __shfl_down_sync(0xffffffffu, v.m2, o);
		u.my = __shfl_down_sync(0xffffffffu, v.my, o);
		u.cxy = __shfl_down_sync(0xffffffffu, v.cxy, o);
		if (((threadIdx.x & 31) & (2 * o - 1)) == 0)
			v.merge(u);
	}
	if ((threadIdx.x & 31) == 0)
		sh[threadIdx.x >> 5] = v;
	__syncthreads();
	if (threadIdx.x == 0)
		for (int w = 1; w < 8; w++)
			v.merge(sh[w]);
	return v;
}

/* Stage 1, one pass: block (ch, y) takes channel ch's values p in
 * [y * chunk, (y + 1) * chunk) of its m = n * inner, into part[y][ch]:
 * x's mean and sum of squared deviations, and with dy (backward) dy's
 * mean and sum(dy * (x - mean)).  NPART values a part: 2, or 4 with dy.
 * VEC values at a time (inner and chunk multiples of VEC, x and dy
 * aligned to it): their moments, then merged into the thread's. */
template <class T, int NPART, int VEC>
__global__ void __launch_bounds__(256)
sgk_bn_moments_k(const T *__restrict__ x, const T *__restrict__ dy,
                 typename sgk_acc<T>::type *__restrict__ part, long long n, long long c,
                 long long inner, long long chunk)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ SgkMoments<A> sh[8];
	const long long ch = blockIdx.x, p0 = (long long)blockIdx.y * chunk, m = n * inner;
	const long long len = (p0 + chunk < m ? chunk : m - p0) / VEC;
	SgkMoments<A> v = {0, 0, 0, 0, 0};
	SgkChanWalk a(p0 / VEC + threadIdx.x, 256, ch, c, inner / VEC);
	for (long long p = threadIdx.x; p < len; p += 256, a.next()) {
		if (VEC == 1) {
			v.add((A)sgk_tof(x[a.off]), NPART == 4 ? (A)sgk_tof(dy[a.off]) : (A)0);
			continue;
		}
		const sgk_reg<VEC, T> xr = sgk_ldv<VEC>(x + a.off * VEC);
		sgk_reg<VEC, T> yr;
		if (NPART == 4)
			yr = sgk_ldv<VEC>(dy + a.off * VEC);
		A xs[VEC], ys[VEC], mx = 0, my = 0;
#pragma unroll
		for (int k = 0; k < VEC; k++) {
			xs[k] = (A)sgk_tof(xr.v[k]);
			ys[k] = NPART == 4 ? (A)sgk_tof(yr.v[k]) : (A)0;
			mx += xs[k];
			my += ys[k];
		}
		mx *= (A)1 / (A)VEC;
		my *= (A)1 / (A)VEC;
		SgkMoments<A> u = {(A)VEC, mx, 0, my, 0};
#pragma unroll
		for (int k = 0; k < VEC; k++) {
			const A d = xs[k] - mx;
			u.m2 += d * d;
			u.cxy += d * (ys[k] - my);
		}
		v.merge(u);
	}
	v = sgk_block_moments(v, sh);
	if (threadIdx.x == 0) {
		A *o = part + NPART * ((long long)blockIdx.y * c + ch);
		o[0] = v.mx;
		o[1] = v.m2;
		if (NPART == 4) {
			o[2] = v.my;
			o[3] = v.cxy;
		}
	}
}

/* Stage 1 channels last (x [m, c], dy as x): block (cb, y) takes rows
 * [y * chunk, (y + 1) * chunk) of m and channels from cb * CT * VEC, its
 * 256 threads CT = 2^ctl channel threads (thread t: channels (cb * CT +
 * t % CT) * VEC on, one load a row; c a multiple of VEC, x and dy
 * aligned to it) by RT = 256 / CT row threads (rows t / CT + k * RT of
 * the slice).  Each thread's moments of its channels, a Welford update a
 * row (the count, and so its reciprocal, shared by the channels), rows
 * loaded four at a time; then merged in a fixed order: a warp's row threads
 * by shuffles (neighbours first), then the eight warps' in order by warp
 * 0 through shared memory, into part[y][ch] as sgk_bn_moments_k's. */
template <class T, int NPART, int VEC>
__global__ void __launch_bounds__(256)
sgk_bn_moments_cl_k(const T *__restrict__ x, const T *__restrict__ dy,
                    typename sgk_acc<T>::type *__restrict__ part, long long m, long long c,
                    long long chunk, int ctl)
{
	typedef typename sgk_acc<T>::type A;
	enum { U = 4 };
	__shared__ A sh[8][NPART][32 * VEC];
	__shared__ A shn[8][32];
	const int CT = 1 << ctl, RT = 256 >> ctl, tx = threadIdx.x & (CT - 1);
	const int ty = threadIdx.x >> ctl, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	const long long ch0 = ((long long)blockIdx.x * CT + tx) * VEC, p0 = (long long)blockIdx.y * chunk;
	const long long len = p0 + chunk < m ? chunk : m - p0;
	A mx[VEC], m2[VEC], my[VEC], cxy[VEC], cnt = 0;
#pragma unroll
	for (int k = 0; k < VEC; k++)
		mx[k] = m2[k] = my[k] = cxy[k] = 0;
	if (ch0 < c) {
		const long long step = (long long)RT * c;
		const T *xp = x + (p0 + ty) * c + ch0;
		const T *yp = NPART == 4 ? dy + (p0 + ty) * c + ch0 : dy;
		for (long long r = ty; r < len; r += U * RT, xp += U * step, yp += U * step) {
			sgk_reg<VEC, T> xr[U], yr[U];
#pragma unroll
			for (int u = 0; u < U; u++)
				if (r + u * RT < len) {
					xr[u] = sgk_ldv<VEC>(xp + u * step);
					if (NPART == 4)
						yr[u] = sgk_ldv<VEC>(yp + u * step);
				}
#pragma unroll
			for (int u = 0; u < U; u++) {
				if (r + u * RT >= len)
					break;
				cnt += (A)1;
				const A q = (A)1 / cnt;
#pragma unroll
				for (int k = 0; k < VEC; k++) {
					const A xv = (A)sgk_tof(xr[u].v[k]), d = xv - mx[k];
					mx[k] += d * q;
					m2[k] += d * (xv - mx[k]);
					if (NPART == 4) {
						const A yv = (A)sgk_tof(yr[u].v[k]);
						my[k] += (yv - my[k]) * q;
						cxy[k] += d * (yv - my[k]);
					}
				}
			}
		}
	}
	/* Chan's merge of (nb, b*) into (cnt, *), the counts' ratios shared by
	 * the channels. */
	auto merge = [&](A nb, const A *bmx, const A *bm2, const A *bmy, const A *bcxy) {
		const A t = cnt + nb;
		if (nb == (A)0)
			return;
		if (cnt == (A)0) {
#pragma unroll
			for (int k = 0; k < VEC; k++) {
				mx[k] = bmx[k];
				m2[k] = bm2[k];
				my[k] = bmy[k];
				cxy[k] = bcxy[k];
			}
			cnt = nb;
			return;
		}
		const A f = cnt * nb / t, g = nb / t;
#pragma unroll
		for (int k = 0; k < VEC; k++) {
			const A dx = bmx[k] - mx[k], dd = bmy[k] - my[k];
			m2[k] += bm2[k] + dx * dx * f;
			cxy[k] += bcxy[k] + dx * dd * f;
			mx[k] += dx * g;
			my[k] += dd * g;
		}
		cnt = t;
	};
	/* a warp's row threads: lane l takes lane l + o's */
	for (int o = CT; o < 32; o <<= 1) {
		A bmx[VEC], bm2[VEC], bmy[VEC], bcxy[VEC];
		const A nb = __shfl_down_sync(0xffffffffu, cnt, o);
#pragma unroll
		for (int k = 0; k < VEC; k++) {
			bmx[k] = __shfl_down_sync(0xffffffffu, mx[k], o);
			bm2[k] = __shfl_down_sync(0xffffffffu, m2[k], o);
			bmy[k] = NPART == 4 ? __shfl_down_sync(0xffffffffu, my[k], o) : (A)0;
			bcxy[k] = NPART == 4 ? __shfl_down_sync(0xffffffffu, cxy[k], o) : (A)0;
		}
		if ((lane & (2 * o - 1)) < CT)
			merge(nb, bmx, bm2, bmy, bcxy);
	}
	/* the warps', in order */
	if (lane < CT) {
		shn[wid][lane] = cnt;
#pragma unroll
		for (int k = 0; k < VEC; k++) {
			sh[wid][0][lane * VEC + k] = mx[k];
			sh[wid][1][lane * VEC + k] = m2[k];
			if (NPART == 4) {
				sh[wid][NPART - 2][lane * VEC + k] = my[k];
				sh[wid][NPART - 1][lane * VEC + k] = cxy[k];
			}
		}
	}
	__syncthreads();
	if (wid != 0 || lane >= CT || ch0 >= c)
		return;
	for (int w = 1; w < 8; w++) {
		A bmx[VEC], bm2[VEC], bmy[VEC], bcxy[VEC];
#pragma unroll
		for (int k = 0; k < VEC; k++) {
			bmx[k] = sh[w][0][lane * VEC + k];
			bm2[k] = sh[w][1][lane * VEC + k];
			bmy[k] = NPART == 4 ? sh[w][NPART - 2][lane * VEC + k] : (A)0;
			bcxy[k] = NPART == 4 ? sh[w][NPART - 1][lane * VEC + k] : (A)0;
		}
		merge(shn[w][lane], bmx, bm2, bmy, bcxy);
	}
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		A *o = part + NPART * ((long long)blockIdx.y * c + ch0 + k);
		o[0] = mx[k];
		o[1] = m2[k];
		if (NPART == 4) {
			o[2] = my[k];
			o[3] = cxy[k];
		}
	}
}

/* The running statistics' update a training batch_norm's kernel makes
 * as it finishes a channel (kernels.c's fold_bn_running): rm = add(mul(
 * mean, take_m), mul(rm, keep_m)), and rv so with the unbiased variance,
 * each op's result rounded to S as the three ops one after the other
 * would round it (for 2-byte S: no contraction across the roundings);
 * rm or rv NULL: none. */
template <class S>
struct SgBnRunning {
	S *rm, *rv;
	float take_m, keep_m, take_v, keep_v;
};

template <class S>
SGK_DEV S sgk_bn_running(float stat, S old, float take, float keep)
{
	const float a = sgk_tof(sgk_cvt<S>(stat * take));
	const float b = sgk_tof(sgk_cvt<S>(sgk_tof(old) * keep));
	return sgk_cvt<S>(a + b);
}

/* The SGD updates a batch_norm backward's kernel makes as it finishes a
 * channel's sums (kernels.c's fold_bn_sgd): w -= lr * dw and b -= lr *
 * db, with momentum and weight decay 0, each rounded to T as the
 * generated sgd_update_ kernel rounds (both sgk_sgd_step_f); w or b NULL:
 * none. */
template <class T>
struct SgBnSgd {
	T *w, *b;
	float neg_lr_w, neg_lr_b;   /* -lr of each */
};

/* Stage 2's end for channel ch, given the moments v of its m values
 * (merged from the parts): its mean and rstd into work[ch] and work[c +
 * ch] (in eval the running ones); in training, when given, the batch
 * mean and unbiased variance into mean_out[ch], var_out[ch]; with dy
 * (NPART 4) also sum(dy) and sum(dy * xhat) into work[3c + ch] and
 * work[2c + ch], w[ch] * rstd (w NULL: rstd) into work[4c + ch] for the
 * dx kernels, and db, dw (NULL: not stored) with sgd's updates; in
 * training, run's update (T and S alike). */
template <class T, class S, int NPART>
SGK_DEV void sgk_bn_finish(const SgkMoments<typename sgk_acc<T>::type> &v, long long ch,
                           const S *__restrict__ rm, const S *__restrict__ rv, const T *w,
                           typename sgk_acc<T>::type *__restrict__ work, T *__restrict__ dw,
                           T *__restrict__ db, T *__restrict__ mean_out, T *__restrict__ var_out,
                           long long m, long long c, float eps, int training,
                           const SgBnRunning<S> &run, const SgBnSgd<T> &sgd)
{
	typedef typename sgk_acc<T>::type A;
	A mean = v.mx, var = v.m2 / (A)m;
	const T bmean = sgk_cvt<T>(v.mx), bvar = sgk_cvt<T>(v.m2 / (A)(m - 1));
	if (training && mean_out)
		mean_out[ch] = bmean;
	if (training && var_out)
		var_out[ch] = bvar;
	if (training && run.rm)
		run.rm[ch] = sgk_bn_running<S>(sgk_tof(bmean), run.rm[ch], run.take_m, run.keep_m);
	if (training && run.rv)
		run.rv[ch] = sgk_bn_running<S>(sgk_tof(bvar), run.rv[ch], run.take_v, run.keep_v);
	if (!training) {
		mean = (A)sgk_tof(rm[ch]);
		var = (A)sgk_tof(rv[ch]);
	}
	const A rstd = (A)1 / sgk_sqrt(var + (A)eps);
	work[ch] = mean;
	work[c + ch] = rstd;
	if (NPART == 4) {
		/* sum(dy * (x - mean)) = cxy + (mx - mean) * sum(dy) */
		const A sg = v.my * (A)m, sgx = rstd * (v.cxy + (v.mx - mean) * sg);
		work[2 * c + ch] = sgx;
		work[3 * c + ch] = sg;
		/* (read before sgd's update of w) */
		work[4 * c + ch] = (w ? (A)sgk_tof(w[ch]) : (A)1) * rstd;
		const T gw = sgk_cvt<T>(sgx), gb = sgk_cvt<T>(sg);
		if (dw)
			dw[ch] = gw;
		if (db)
			db[ch] = gb;
		if (sgd.w)
			sgd.w[ch] = sgk_cvt<T>(sgk_sgd_step_f(sgk_tof(sgd.w[ch]), sgd.neg_lr_w, sgk_tof(gw)));
		if (sgd.b)
			sgd.b[ch] = sgk_cvt<T>(sgk_sgd_step_f(sgk_tof(sgd.b[ch]), sgd.neg_lr_b, sgk_tof(gb)));
	}
}

/* Part k of channel ch from stage 1 (NPART values: the count is chunk,
 * the last part's the rest of m), or empty moments past the last part. */
template <int NPART, class A>
SGK_DEV SgkMoments<A> sgk_bn_part(const A *part, int k, int nsplit, long long c, long long ch,
                                  long long chunk, long long m)
{
	const A *q = part + NPART * ((long long)k * c + ch);
	const bool in = k < nsplit;
	return SgkMoments<A>{in ? (A)(k + 1 < nsplit ? chunk : m - (long long)k * chunk) : (A)0,
	                     in ? q[0] : (A)0, in ? q[1] : (A)0,
	                     NPART == 4 && in ? q[2] : (A)0, NPART == 4 && in ? q[3] : (A)0};
}

/* Stage 2, a thread a channel: the nsplit parts (chunk values each, the
 * last the rest) merged in order, then sgk_bn_finish. */
template <class T, class S, int NPART>
__global__ void __launch_bounds__(256)
sgk_bn_stats_final_k(const S *__restrict__ rm, const S *__restrict__ rv, const T *w,
                     const typename sgk_acc<T>::type *__restrict__ part,
                     typename sgk_acc<T>::type *__restrict__ work, T *__restrict__ dw,
                     T *__restrict__ db, T *__restrict__ mean_out, T *__restrict__ var_out,
                     long long m, long long c, long long chunk, int nsplit, float eps,
                     int training, SgBnRunning<S> run, SgBnSgd<T> sgd)
{
	typedef typename sgk_acc<T>::type A;
	const long long ch = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (ch >= c)
		return;
	SgkMoments<A> v = {0, 0, 0, 0, 0};
	for (int k = 0; k < nsplit; k++)
		v.merge(sgk_bn_part<NPART>(part, k, nsplit, c, ch, chunk, m));
	sgk_bn_finish<T, S, NPART>(v, ch, rm, rv, w, work, dw, db, mean_out, var_out, m, c, eps,
	                           training, run, sgd);
}

/* The same with a block a channel, for the many slices of channels
 * last: thread t merges parts t, t + 256, ... in order, the threads then
 * merge as sgk_block_moments does, and thread 0 finishes. */
template <class T, class S, int NPART>
__global__ void __launch_bounds__(256)
sgk_bn_stats_final_block_k(const S *__restrict__ rm, const S *__restrict__ rv, const T *w,
                           const typename sgk_acc<T>::type *__restrict__ part,
                           typename sgk_acc<T>::type *__restrict__ work, T *__restrict__ dw,
                           T *__restrict__ db, T *__restrict__ mean_out, T *__restrict__ var_out,
                           long long m, long long c, long long chunk, int nsplit, float eps,
                           int training, SgBnRunning<S> run, SgBnSgd<T> sgd)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ SgkMoments<A> sh[8];
	const long long ch = blockIdx.x;
	SgkMoments<A> v = {0, 0, 0, 0, 0};
	/* four parts' loads at a time, then their merges */
	for (int k0 = threadIdx.x; k0 < nsplit; k0 += 4 * 256) {
		SgkMoments<A> u[4];
#pragma unroll
		for (int j = 0; j < 4; j++)
			u[j] = sgk_bn_part<NPART>(part, k0 + j * 256, nsplit, c, ch, chunk, m);
#pragma unroll
		for (int j = 0; j < 4; j++)
			v.merge(u[j]);
	}
	v = sgk_block_moments(v, sh);
	if (threadIdx.x == 0)
		sgk_bn_finish<T, S, NPART>(v, ch, rm, rv, w, work, dw, db, mean_out, var_out, m, c,
		                           eps, training, run, sgd);
}

/* Batch norm's output value o as stored, with the epilogue the compiler
 * may fold in (kernels.c's fold_bn_epilogue): res, the residual r added
 * to the stored (rounded) value as add(y, r) would, then relu as relu
 * would; the same values as the three ops one after the other. */
template <class T, class A>
SGK_DEV T sgk_bn_epi(A o, const T *res, T r, int relu)
{
	if (res)
		o = (A)sgk_tof(sgk_cvt<T>(o)) + (A)sgk_tof(r);
	if (relu)
		o = o < (A)0 ? (A)0 : o;
	return sgk_cvt<T>(o);
}

/* y = (x - mean) * rstd * w + b, VEC values at a time (inner a multiple
 * of VEC, x, res and y aligned to it): the walk is over vectors; then
 * the epilogue (res NULL and relu 0: none). */
template <class T, int VEC>
__global__ void __launch_bounds__(256)
sgk_bn_fwd_k(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
             const T *__restrict__ res, T *__restrict__ y,
             const typename sgk_acc<T>::type *__restrict__ work, long long n, long long c,
             long long inner, int relu)
{
	typedef typename sgk_acc<T>::type A;
	for (SgkFlatWalk f(c, inner / VEC); f.i < n * c * inner / VEC; f.next()) {
		const long long ch = f.ch;
		const A sc = work[c + ch] * (w ? (A)sgk_tof(w[ch]) : (A)1), mean = work[ch];
		const A sf = b ? (A)sgk_tof(b[ch]) : (A)0;
		const sgk_reg<VEC, T> xr = sgk_ldv<VEC>(x + f.i * VEC);
		sgk_reg<VEC, T> yr, rr;
		if (res)
			rr = sgk_ldv<VEC>(res + f.i * VEC);
#pragma unroll
		for (int k = 0; k < VEC; k++)
			yr.v[k] = sgk_bn_epi<T, A>(((A)sgk_tof(xr.v[k]) - mean) * sc + sf, res,
			                           res ? rr.v[k] : xr.v[k], relu);
		sgk_stv<VEC>(y + f.i * VEC, yr);
	}
}

/* dx = w * rstd * (dy - db / M - xhat * dw / M) (training: the batch's
 * statistics depend on x), w * rstd * dy in eval, w * rstd from work (the
 * stats kernel's); VEC values at a time as sgk_bn_fwd_k. */
template <class T, int VEC>
__global__ void __launch_bounds__(256)
sgk_bn_bwd_dx_k(const T *__restrict__ dy, const T *__restrict__ x, T *__restrict__ dx,
                const typename sgk_acc<T>::type *__restrict__ work, long long n, long long c,
                long long inner, int training)
{
	typedef typename sgk_acc<T>::type A;
	const A m = (A)(n * inner);
	for (SgkFlatWalk f(c, inner / VEC); f.i < n * c * inner / VEC; f.next()) {
		const long long ch = f.ch;
		const A rstd = work[c + ch], mean = work[ch], sc = work[4 * c + ch];
		const A gm = work[3 * c + ch] / m, xm = work[2 * c + ch] / m;
		const sgk_reg<VEC, T> gr = sgk_ldv<VEC>(dy + f.i * VEC);
		sgk_reg<VEC, T> xr, r;
		if (training)
			xr = sgk_ldv<VEC>(x + f.i * VEC);
#pragma unroll
		for (int k = 0; k < VEC; k++) {
			A v = (A)sgk_tof(gr.v[k]);
			if (training)
				v = v - gm - ((A)sgk_tof(xr.v[k]) - mean) * rstd * xm;
			r.v[k] = sgk_cvt<T>(sc * v);
		}
		sgk_stv<VEC>(dx + f.i * VEC, r);
	}
}

/* The pointwise kernels channels last (x [m, c], c a multiple of VEC
 * and the pointers aligned to it): threads as sgk_bn_moments_cl_k's, a
 * channel thread's VEC channels' scale and shift kept in registers while
 * its row thread walks the rows by the grid's; the values as
 * sgk_bn_fwd_k's and sgk_bn_bwd_dx_k's. */
template <class T, int VEC>
__global__ void __launch_bounds__(256)
sgk_bn_fwd_cl_k(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                const T *__restrict__ res, T *__restrict__ y,
                const typename sgk_acc<T>::type *__restrict__ work, long long m, long long c,
                int ctl, int relu)
{
	typedef typename sgk_acc<T>::type A;
	const int CT = 1 << ctl, RT = 256 >> ctl, tx = threadIdx.x & (CT - 1);
	const long long ch0 = ((long long)blockIdx.x * CT + tx) * VEC;
	if (ch0 >= c)
		return;
	A sc[VEC], mean[VEC], sf[VEC];
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		const long long ch = ch0 + k;
		sc[k] = work[c + ch] * (w ? (A)sgk_tof(w[ch]) : (A)1);
		mean[k] = work[ch];
		sf[k] = b ? (A)sgk_tof(b[ch]) : (A)0;
	}
	const long long step = (long long)gridDim.y * RT;
#pragma unroll 4
	for (long long r = (long long)blockIdx.y * RT + (threadIdx.x >> ctl); r < m; r += step) {
		const sgk_reg<VEC, T> xr = sgk_ldv<VEC>(x + r * c + ch0);
		sgk_reg<VEC, T> yr, rr;
		if (res)
			rr = sgk_ldv<VEC>(res + r * c + ch0);
#pragma unroll
		for (int k = 0; k < VEC; k++)
			yr.v[k] = sgk_bn_epi<T, A>(((A)sgk_tof(xr.v[k]) - mean[k]) * sc[k] + sf[k], res,
			                           res ? rr.v[k] : xr.v[k], relu);
		sgk_stv<VEC>(y + r * c + ch0, yr);
	}
}

template <class T, int VEC>
__global__ void __launch_bounds__(256)
sgk_bn_bwd_dx_cl_k(const T *__restrict__ dy, const T *__restrict__ x, T *__restrict__ dx,
                   const typename sgk_acc<T>::type *__restrict__ work, long long m, long long c,
                   int ctl, int training)
{
	typedef typename sgk_acc<T>::type A;
	const int CT = 1 << ctl, RT = 256 >> ctl, tx = threadIdx.x & (CT - 1);
	const long long ch0 = ((long long)blockIdx.x * CT + tx) * VEC;
	if (ch0 >= c)
		return;
	const A am = (A)m;
	A rstd[VEC], mean[VEC], sc[VEC], gm[VEC], xm[VEC];
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		const long long ch = ch0 + k;
		rstd[k] = work[c + ch];
		mean[k] = work[ch];
		sc[k] = work[4 * c + ch]; /* w * rstd */
		gm[k] = work[3 * c + ch] / am;
		xm[k] = work[2 * c + ch] / am;
	}
	const long long step = (long long)gridDim.y * RT;
#pragma unroll 4
	for (long long r = (long long)blockIdx.y * RT + (threadIdx.x >> ctl); r < m; r += step) {
		const sgk_reg<VEC, T> gr = sgk_ldv<VEC>(dy + r * c + ch0);
		sgk_reg<VEC, T> xr, o;
		if (training)
			xr = sgk_ldv<VEC>(x + r * c + ch0);
#pragma unroll
		for (int k = 0; k < VEC; k++) {
			A v = (A)sgk_tof(gr.v[k]);
			if (training)
				v = v - gm[k] - ((A)sgk_tof(xr.v[k]) - mean[k]) * rstd[k] * xm[k];
			o.v[k] = sgk_cvt<T>(sc[k] * v);
		}
		sgk_stv<VEC>(dx + r * c + ch0, o);
	}
}

#ifndef __CUDACC_RTC__
/* Blocks for a grid-stride loop over count elements. */
static inline unsigned sgk_conv_grid(long long count)
{
	long long b = (count + 255) / 256, cap = (long long)sgk_num_sms() * 16;
	return (unsigned)(b < 1 ? 1 : b < cap ? b : cap);
}

template <class T>
static cudaError_t sg_launch_conv2d_fwd(const T *x, const T *w, const T *b, T *y, SgConvGeom g,
                                        cudaStream_t stream)
{
	long long count = g.n * g.k * g.oh * g.ow;
	if (count <= 0)
		return cudaSuccess;
	sgk_conv2d_fwd_k<T><<<sgk_conv_grid(count), 256, 0, stream>>>(x, w, b, y, g);
	return sgk_launched();
}

template <class T>
static cudaError_t sg_launch_conv2d_bwd_input(const T *dy, const T *w, T *dx, SgConvGeom g,
                                              cudaStream_t stream)
{
	long long count = g.n * g.c * g.h * g.w;
	if (count <= 0)
		return cudaSuccess;
	sgk_conv2d_bwd_input_k<T><<<sgk_conv_grid(count), 256, 0, stream>>>(dy, w, dx, g);
	return sgk_launched();
}

template <class T>
static cudaError_t sg_launch_conv2d_bwd_weight(const T *dy, const T *x, T *dw, SgConvGeom g,
                                               cudaStream_t stream)
{
	long long count = g.k * (g.c / g.groups) * g.r * g.s;
	if (count <= 0)
		return cudaSuccess;
	long long blocks = count < 65535 * 16 ? count : 65535 * 16;
	sgk_conv2d_bwd_weight_k<T><<<(unsigned)blocks, 256, 0, stream>>>(dy, x, dw, g);
	return sgk_launched();
}

/* The widths, in elements, of 16-byte and 8-byte vectors of T (the
 * vectorised kernels' VEC besides 1). */
template <class T>
struct SgkBnVec {
	enum { V16 = 16 / sizeof(T), V8 = 8 / sizeof(T) };
};

/* 1 when a pool's flat indices (input and output, plus a grid's worth of
 * threads) fit an int. */
static inline int sgk_pool_int(const SgConvGeom &g)
{
	const long long lim = (1LL << 31) - (1LL << 24);
	return g.n * g.c * g.h * g.w < lim && g.n * g.c * g.oh * g.ow < lim;
}

/* The channels a thread of the channels-last pools takes: 16 bytes'
 * worth, else 8 bytes', when c is a multiple of them and the pointers
 * (NULL: none) are aligned to them (arg to one byte a channel), else 1. */
template <class T>
static inline int sgk_pool_vec(long long c, const T *a, const T *b, const T *d,
                               const unsigned char *arg)
{
	const unsigned long long al = (unsigned long long)a | (unsigned long long)b |
	                              (unsigned long long)d;
	for (int bytes = 16; bytes >= 8; bytes /= 2) {
		const int v = bytes / (int)sizeof(T);
		if (v > 1 && c % v == 0 && (al & (bytes - 1)) == 0 &&
		    (unsigned long long)arg % (unsigned)v == 0)
			return v;
	}
	return 1;
}

template <class T, class I>
static void sgk_pool2d_fwd_cl(const T *x, T *y, SgConvGeom g, int mode, cudaStream_t stream)
{
	const int v = sgk_pool_vec<T>(g.c, x, y, (const T *)NULL, (const unsigned char *)NULL);
	const unsigned grid = sgk_conv_grid(g.n * g.oh * g.ow * g.c / v);
	if (mode == 0 && g.r <= 3 && g.s <= 3 && v == SgkBnVec<T>::V16)
		sgk_pool2d_fwd_cl_k<T, I, SgkBnVec<T>::V16, 1><<<grid, 256, 0, stream>>>(x, y, g,
		                                                                        mode);
	else if (v == SgkBnVec<T>::V16)
		sgk_pool2d_fwd_cl_k<T, I, SgkBnVec<T>::V16, 0><<<grid, 256, 0, stream>>>(x, y, g,
		                                                                        mode);
	else if (v == SgkBnVec<T>::V8)
		sgk_pool2d_fwd_cl_k<T, I, SgkBnVec<T>::V8, 0><<<grid, 256, 0, stream>>>(x, y, g, mode);
	else
		sgk_pool2d_fwd_cl_k<T, I, 1, 0><<<grid, 256, 0, stream>>>(x, y, g, mode);
}

template <class T>
static cudaError_t sg_launch_pool2d_fwd(const T *x, T *y, SgConvGeom g, int mode,
                                        cudaStream_t stream)
{
	long long count = g.n * g.c * g.oh * g.ow;
	if (count <= 0)
		return cudaSuccess;
	if (g.cl && sgk_pool_int(g))
		sgk_pool2d_fwd_cl<T, int>(x, y, g, mode, stream);
	else if (g.cl)
		sgk_pool2d_fwd_cl<T, long long>(x, y, g, mode, stream);
	else if (sgk_pool_int(g))
		sgk_pool2d_fwd_k<T, int><<<sgk_conv_grid(count), 256, 0, stream>>>(x, y, g, mode);
	else
		sgk_pool2d_fwd_k<T, long long><<<sgk_conv_grid(count), 256, 0, stream>>>(x, y, g, mode);
	return sgk_launched();
}

/* The scratch sg_launch_pool2d_bwd needs: a byte an output for
 * max_pool2d with windows of at most 15 x 15 whose rows fit an int, else
 * none.  Either layout (indexed as y). */
static inline size_t sg_pool2d_bwd_workspace(SgConvGeom g, int mode)
{
	const long long lim = (1LL << 31) - (1LL << 24);
	return mode == 0 && g.r <= 15 && g.s <= 15 && g.n * g.c * g.h < lim &&
	               g.n * g.c * g.oh < lim && g.h * g.w < lim
	               ? (size_t)(g.n * g.c * g.oh * g.ow) : 0;
}

/* A block of 256 threads for rows of len elements: x whole warps over a
 * row's columns (at most 256), y rows at a time; blocks for nrows rows. */
static inline void sgk_rows_launch(long long len, long long nrows, dim3 &grid, dim3 &block)
{
	const unsigned bx = len >= 256 ? 256u : (unsigned)((len + 31) / 32 * 32);
	block = dim3(bx, 256 / bx);
	grid = dim3(sgk_conv_grid((nrows + block.y - 1) / block.y * 256));
}

template <class T, int SH, int SW>
static cudaError_t sgk_maxpool_bwd(const T *dy, const T *x, T *dx, SgConvGeom g,
                                   unsigned char *arg, int relu, cudaStream_t stream)
{
	dim3 grid, block;
	sgk_rows_launch(g.ow, g.n * g.c * g.oh, grid, block);
	sgk_maxpool_arg_k<T, SH, SW><<<grid, block, 0, stream>>>(x, arg, g, relu);
	cudaError_t e = sgk_launched();
	if (e != cudaSuccess)
		return e;
	sgk_rows_launch(g.w, g.n * g.c * g.h, grid, block);
	sgk_maxpool_bwd_k<T, SH, SW><<<grid, block, 0, stream>>>(dy, arg, dx, g);
	return sgk_launched();
}

/* Channels last: phase 1 a thread an output's VEC channels, phase 2 an
 * input's, or (BLOCKED, strides 2, windows of at most 3 x 3) a 2 x 2
 * block of inputs' (flat indices that fit an int).  BLOCKED 0 (the
 * kernels as they were, for the timings of test_conv_layout): phase 1's
 * window loads in a loop, phase 2 an input at a time. */
template <class T, int VEC, int BLOCKED = 1>
static cudaError_t sgk_maxpool_bwd_cl(const T *dy, const T *x, T *dx, SgConvGeom g,
                                      unsigned char *arg, int relu, cudaStream_t stream)
{
	const unsigned agrid = sgk_conv_grid(g.n * g.oh * g.ow * g.c / VEC);
	if (BLOCKED && g.r <= 3 && g.s <= 3)
		sgk_maxpool_arg_cl_k<T, VEC, 1><<<agrid, 256, 0, stream>>>(x, arg, g, relu);
	else
		sgk_maxpool_arg_cl_k<T, VEC, 0><<<agrid, 256, 0, stream>>>(x, arg, g, relu);
	cudaError_t e = sgk_launched();
	if (e != cudaSuccess)
		return e;
	const unsigned grid = sgk_conv_grid(g.n * g.h * g.w * g.c / VEC);
	if (BLOCKED && g.sh == 2 && g.sw == 2 && g.r <= 3 && g.s <= 3)
		sgk_maxpool_bwd2_cl_k<T, VEC><<<sgk_conv_grid(g.n * ((g.h + 1) / 2) *
		                                              ((g.w + 1) / 2) * g.c / VEC),
		                                256, 0, stream>>>(dy, arg, dx, g);
	else if (g.sh == 2 && g.sw == 2 && g.r <= 4 && g.s <= 4)
		sgk_maxpool_bwd_cl_k<T, VEC, 1><<<grid, 256, 0, stream>>>(dy, arg, dx, g);
	else
		sgk_maxpool_bwd_cl_k<T, VEC, 0><<<grid, 256, 0, stream>>>(dy, arg, dx, g);
	return sgk_launched();
}

template <class T, class I>
static void sgk_pool2d_bwd_cl(const T *dy, const T *x, T *dx, SgConvGeom g, int mode,
                              cudaStream_t stream)
{
	const int v = sgk_pool_vec<T>(g.c, dy, x, dx, (const unsigned char *)NULL);
	const unsigned grid = sgk_conv_grid(g.n * g.h * g.w * g.c / v);
	if (v == SgkBnVec<T>::V16)
		sgk_pool2d_bwd_cl_k<T, I, SgkBnVec<T>::V16><<<grid, 256, 0, stream>>>(dy, x, dx, g,
		                                                                     mode);
	else if (v == SgkBnVec<T>::V8)
		sgk_pool2d_bwd_cl_k<T, I, SgkBnVec<T>::V8><<<grid, 256, 0, stream>>>(dy, x, dx, g,
		                                                                    mode);
	else
		sgk_pool2d_bwd_cl_k<T, I, 1><<<grid, 256, 0, stream>>>(dy, x, dx, g, mode);
}

/* dx = where(x <= 0, 0, dx), a thread an element (either layout: x and
 * dx alike). */
template <class T>
__global__ void __launch_bounds__(256)
sgk_relu_mask_k(const T *__restrict__ x, T *__restrict__ dx, long long n)
{
	typedef typename sgk_acc<T>::type A;
	SGK_CONV_LOOP(i, n)
	if ((A)sgk_tof(x[i]) <= (A)0)
		dx[i] = sgk_cvt<T>((A)0);
}

/* The backward with relu (sg_launch_maxpool2d_bwd_relu), else plain. */
template <class T>
static cudaError_t sgk_pool2d_bwd(const T *dy, const T *x, T *dx, SgConvGeom g, int mode,
                                  void *work, int relu, cudaStream_t stream)
{
	long long count = g.n * g.c * g.h * g.w;
	if (count <= 0)
		return cudaSuccess;
	if (sg_pool2d_bwd_workspace(g, mode) > 0 && g.cl && sgk_pool_int(g)) {
		unsigned char *arg = (unsigned char *)work;
		const int v = sgk_pool_vec<T>(g.c, dy, x, dx, arg);
		if (v == SgkBnVec<T>::V16)
			return sgk_maxpool_bwd_cl<T, SgkBnVec<T>::V16>(dy, x, dx, g, arg, relu, stream);
		if (v == SgkBnVec<T>::V8)
			return sgk_maxpool_bwd_cl<T, SgkBnVec<T>::V8>(dy, x, dx, g, arg, relu, stream);
		return sgk_maxpool_bwd_cl<T, 1>(dy, x, dx, g, arg, relu, stream);
	}
	if (sg_pool2d_bwd_workspace(g, mode) > 0 && !g.cl) {
		unsigned char *arg = (unsigned char *)work;
		if (g.sh == 2 && g.sw == 2)
			return sgk_maxpool_bwd<T, 2, 2>(dy, x, dx, g, arg, relu, stream);
		return sgk_maxpool_bwd<T, 0, 0>(dy, x, dx, g, arg, relu, stream);
	}
	if (g.cl && sgk_pool_int(g))
		sgk_pool2d_bwd_cl<T, int>(dy, x, dx, g, mode, stream);
	else if (g.cl)
		sgk_pool2d_bwd_cl<T, long long>(dy, x, dx, g, mode, stream);
	else if (sgk_pool_int(g))
		sgk_pool2d_bwd_k<T, int><<<sgk_conv_grid(count), 256, 0, stream>>>(dy, x, dx, g, mode);
	else
		sgk_pool2d_bwd_k<T, long long><<<sgk_conv_grid(count), 256, 0, stream>>>(dy, x, dx, g,
		                                                                         mode);
	cudaError_t e = sgk_launched();
	if (e != cudaSuccess || !relu)
		return e;
	/* (windows too large for the argmax bytes: the relu's mask after) */
	sgk_relu_mask_k<T><<<sgk_conv_grid(count), 256, 0, stream>>>(x, dx, count);
	return sgk_launched();
}

/* work: sg_pool2d_bwd_workspace(g, mode) bytes (NULL when that is 0). */
template <class T>
static cudaError_t sg_launch_pool2d_bwd(const T *dy, const T *x, T *dx, SgConvGeom g, int mode,
                                        void *work, cudaStream_t stream)
{
	return sgk_pool2d_bwd<T>(dy, x, dx, g, mode, work, 0, stream);
}

/* max_pool2d's backward through the relu that made x: where(x <= 0, 0,
 * max_pool2d_backward(dy, x)), the values of the two one after the
 * other (kernels.c's pool_relu); work as sg_launch_pool2d_bwd's (mode
 * 0). */
template <class T>
static cudaError_t sg_launch_maxpool2d_bwd_relu(const T *dy, const T *x, T *dx, SgConvGeom g,
                                                void *work, cudaStream_t stream)
{
	return sgk_pool2d_bwd<T>(dy, x, dx, g, 0, work, 1, stream);
}

/* to_cl 1: x [n, c, hw] -> y [n, hw, c]; 0: x [n, hw, c] -> y [n, c, hw]
 * (sgk_transpose_k; sgk_transpose_narrow_k with fewer than SGK_NARROW
 * channels, an image's three colours, or positions, a 3x3 filter's: the
 * 64-wide tiles would be mostly empty, a 3x3 filter's [512, 512, 9] took
 * 25 us as tiles, a 16th of the copy's rate; a copy with one channel or
 * one position, a 1x1 filter's, whose two layouts are the same bytes). */
template <class T>
static cudaError_t sg_launch_to_layout(const T *x, T *y, long long n, long long c, long long hw,
                                       int to_cl, cudaStream_t stream)
{
	enum { P = sizeof(T) == 2 ? 2 : 1, TS = 32 * P };
	if (n <= 0 || c <= 0 || hw <= 0)
		return cudaSuccess;
	const long long rows = to_cl ? c : hw, cols = to_cl ? hw : c;
	if (rows == 1 || cols == 1) /* the same bytes both ways */
		return cudaMemcpyAsync(y, x, (size_t)(n * c * hw) * sizeof(T), cudaMemcpyDeviceToDevice,
		                       stream);
	if ((c < SGK_NARROW || hw < SGK_NARROW) && rows <= INT_MAX && cols <= INT_MAX) {
		const long long tiles = n * (((cols < SGK_NARROW ? rows : cols) + 255) / 256);
		const long long most = (long long)sgk_num_sms() * 16;
		sgk_transpose_narrow_k<T><<<(unsigned)(tiles < most ? tiles : most), 256, 0, stream>>>(
			x, y, n, (int)rows, (int)cols, cols < SGK_NARROW);
		return sgk_launched();
	}
	const long long tr = (rows + TS - 1) / TS, tc = (cols + TS - 1) / TS;
	const dim3 grid((unsigned)(tc < 0x7fffffffLL ? tc : 0x7fffffffLL),
	                (unsigned)(tr < 65535 ? tr : 65535), (unsigned)(n < 65535 ? n : 65535));
	const int pld = cols % P == 0 && sgk_host_aligned(x, P * sizeof(T));
	const int pst = rows % P == 0 && sgk_host_aligned(y, P * sizeof(T));
	sgk_transpose_k<T, P><<<grid, dim3(32, 8), 0, stream>>>(x, y, n, rows, cols, pld, pst);
	return sgk_launched();
}

/* The slice of a channel's m = n * inner values a training batch_norm's
 * block reduces: about 1024 blocks in all, at least 4096 values each (a
 * function of the sizes alone, so the sums' order is the same on every
 * GPU). */
static inline long long sgk_bn_chunk(long long n, long long c, long long inner)
{
	long long m = n * inner, ns = c > 0 ? 1024 / c : 1;
	if (ns > m / 4096)
		ns = m / 4096;
	if (ns > 65535)
		ns = 65535;
	if (ns < 1)
		ns = 1;
	/* a multiple of 8: whole vectors of the moments kernel */
	return m > 0 ? ((m + ns - 1) / ns + 7) / 8 * 8 : 8;
}

/* Channels last: the rows of x [m, c] a slice takes, m * c / 32768
 * slices (32768 values each) but at most 1024 (stage 2's threads merging
 * at most 4 parts each) and m; again a function of the sizes alone. */
static inline long long sgk_bn_chunk_cl(long long m, long long c)
{
	long long ns = m * c / 32768;
	if (ns > 1024)
		ns = 1024;
	if (ns > m)
		ns = m;
	if (ns < 1)
		ns = 1;
	return m > 0 ? (m + ns - 1) / ns : 1;
}

/* How many values batch norm's kernels take at a time: 16 bytes' worth,
 * else 8 bytes' (rows, inner: NCHW's, c: channels last's, of whole
 * vectors, the pointers, NULL: none, aligned to them), else 1. */
template <class T>
static inline int sgk_bn_vec(long long inner, const T *a, const T *b, const T *c)
{
	const unsigned long long al = (unsigned long long)a | (unsigned long long)b |
	                              (unsigned long long)c;
	for (int bytes = 16; bytes >= 8; bytes /= 2)
		if (inner % (bytes / (long long)sizeof(T)) == 0 && (al & (bytes - 1)) == 0)
			return bytes / (int)sizeof(T);
	return 1;
}

/* The channel threads (a power of two up to 32) of the channels-last
 * kernels for cv vectors of channels, as their log2. */
static inline int sgk_bn_ctl(long long cv)
{
	int l = 0;
	while (l < 5 && (1LL << l) < cv)
		l++;
	return l;
}

template <class T>
static size_t sg_batch_norm_workspace(long long n, long long c, long long inner, int cl)
{
	const long long m = n * inner;
	const long long chunk = cl ? sgk_bn_chunk_cl(m, c) : sgk_bn_chunk(n, c, inner);
	const long long nsplit = (m + chunk - 1) / chunk;
	return (size_t)(5 + 4 * nsplit) * (size_t)c * sizeof(typename sgk_acc<T>::type);
}

template <class T, int NPART, int VEC>
static void sgk_bn_moments_cl(const T *x, const T *dy, typename sgk_acc<T>::type *part,
                              long long m, long long c, long long chunk, int nsplit,
                              cudaStream_t stream)
{
	const int ctl = sgk_bn_ctl(c / VEC);
	const long long cb = (c / VEC + (1 << ctl) - 1) >> ctl;
	sgk_bn_moments_cl_k<T, NPART, VEC><<<dim3((unsigned)cb, (unsigned)nsplit), 256, 0, stream>>>(
		x, dy, part, m, c, chunk, ctl);
}

/* Each channel's mean and rstd into work[0..2c) (the parts after work[5c]);
 * with dy (NPART 4) also its sums, w * rstd, dw, db and sgd's updates; in
 * training mean_out and var_out when given, and run's update. */
template <class T, class S, int NPART>
static cudaError_t sgk_bn_stats(const T *x, const T *dy, const S *rm, const S *rv, const T *w,
                                typename sgk_acc<T>::type *work, T *dw, T *db, T *mean_out,
                                T *var_out, long long n, long long c, long long inner, int cl,
                                float eps, int training, const SgBnRunning<S> &run,
                                const SgBnSgd<T> &sgd, cudaStream_t stream)
{
	const long long m = n * inner;
	const long long chunk = cl ? sgk_bn_chunk_cl(m, c) : sgk_bn_chunk(n, c, inner);
	const int nsplit = training || NPART == 4 ? (int)((m + chunk - 1) / chunk) : 0;
	typename sgk_acc<T>::type *part = work + 5 * c;
	if (nsplit > 0 && cl) {
		int v = sgk_bn_vec<T>(c, x, dy, (const T *)NULL);
		if (NPART == 4 && v > 4)   /* 4 channels a thread at most: their 16 moments */
			v = SgkBnVec<T>::V8;
		if (v == SgkBnVec<T>::V16)
			sgk_bn_moments_cl<T, NPART, SgkBnVec<T>::V16>(x, dy, part, m, c, chunk, nsplit,
			                                              stream);
		else if (v == SgkBnVec<T>::V8)
			sgk_bn_moments_cl<T, NPART, SgkBnVec<T>::V8>(x, dy, part, m, c, chunk, nsplit,
			                                             stream);
		else
			sgk_bn_moments_cl<T, NPART, 1>(x, dy, part, m, c, chunk, nsplit, stream);
	} else if (nsplit > 0) {
		const dim3 grid((unsigned)c, (unsigned)nsplit);
		const int v = sgk_bn_vec<T>(inner, x, dy, (const T *)NULL);
		if (v == SgkBnVec<T>::V16)
			sgk_bn_moments_k<T, NPART, SgkBnVec<T>::V16><<<grid, 256, 0, stream>>>(
				x, dy, part, n, c, inner, chunk);
		else if (v == SgkBnVec<T>::V8)
			sgk_bn_moments_k<T, NPART, SgkBnVec<T>::V8><<<grid, 256, 0, stream>>>(
				x, dy, part, n, c, inner, chunk);
		else
			sgk_bn_moments_k<T, NPART, 1><<<grid, 256, 0, stream>>>(x, dy, part, n, c,
			                                                         inner, chunk);
	}
	if (nsplit > 0) {
		cudaError_t e = sgk_launched();
		if (e != cudaSuccess)
			return e;
	}
	if (cl && nsplit > 0)
		sgk_bn_stats_final_block_k<T, S, NPART><<<(unsigned)c, 256, 0, stream>>>(
			rm, rv, w, part, work, dw, db, mean_out, var_out, m, c, chunk, nsplit, eps,
			training, run, sgd);
	else
		sgk_bn_stats_final_k<T, S, NPART><<<(unsigned)((c + 255) / 256), 256, 0, stream>>>(
			rm, rv, w, part, work, dw, db, mean_out, var_out, m, c, chunk, nsplit, eps,
			training, run, sgd);
	return sgk_launched();
}

/* The grid of the channels-last pointwise kernels: the channel blocks by
 * row blocks, about 8 blocks a multiprocessor, each row thread taking the
 * same number of rows. */
static inline dim3 sgk_bn_cl_grid(long long m, long long cv, int ctl)
{
	const long long cb = (cv + (1 << ctl) - 1) >> ctl, rt = 256 >> ctl;
	const long long groups = (m + rt - 1) / rt;
	long long rb = (long long)sgk_num_sms() * 8 / cb;
	if (rb < 1)
		rb = 1;
	const long long per = (groups + rb - 1) / rb;
	rb = (groups + per - 1) / per;
	return dim3((unsigned)cb, (unsigned)(rb < 65535 ? rb : 65535));
}

template <class T, class S>
static cudaError_t sgk_bn_fwd(const T *x, const S *rm, const S *rv, const T *w, const T *b,
                              const T *res, int relu, T *y, T *mean_out, T *var_out,
                              typename sgk_acc<T>::type *work, long long n, long long c,
                              long long inner, int cl, float eps, int training,
                              const SgBnRunning<S> &run, cudaStream_t stream)
{
	if (n * c * inner <= 0)
		return cudaSuccess;
	cudaError_t e = sgk_bn_stats<T, S, 2>(x, (const T *)NULL, rm, rv, (const T *)NULL, work,
	                                      (T *)NULL, (T *)NULL, mean_out, var_out, n, c, inner,
	                                      cl, eps, training, run, SgBnSgd<T>(), stream);
	if (e != cudaSuccess)
		return e;
	const int v = sgk_bn_vec<T>(cl ? c : inner, x, y, res);
	if (cl && v > 1) {
		const int ctl = sgk_bn_ctl(c / v);
		const dim3 grid = sgk_bn_cl_grid(n * inner, c / v, ctl);
		if (v == SgkBnVec<T>::V16)
			sgk_bn_fwd_cl_k<T, SgkBnVec<T>::V16><<<grid, 256, 0, stream>>>(
				x, w, b, res, y, work, n * inner, c, ctl, relu);
		else
			sgk_bn_fwd_cl_k<T, SgkBnVec<T>::V8><<<grid, 256, 0, stream>>>(
				x, w, b, res, y, work, n * inner, c, ctl, relu);
		return sgk_launched();
	}
	if (cl) {   /* [m, c] walked as [m, c, 1] */
		n *= inner;
		inner = 1;
	}
	const unsigned grid = sgk_conv_grid(n * c * inner / v);
	if (v == SgkBnVec<T>::V16)
		sgk_bn_fwd_k<T, SgkBnVec<T>::V16><<<grid, 256, 0, stream>>>(x, w, b, res, y, work, n,
		                                                           c, inner, relu);
	else if (v == SgkBnVec<T>::V8)
		sgk_bn_fwd_k<T, SgkBnVec<T>::V8><<<grid, 256, 0, stream>>>(x, w, b, res, y, work, n,
		                                                          c, inner, relu);
	else
		sgk_bn_fwd_k<T, 1><<<grid, 256, 0, stream>>>(x, w, b, res, y, work, n, c, inner,
		                                              relu);
	return sgk_launched();
}

template <class T, class S>
static cudaError_t sg_launch_batch_norm_fwd(const T *x, const S *rm, const S *rv, const T *w,
                                            const T *b, T *y, T *mean_out, T *var_out,
                                            typename sgk_acc<T>::type *work, long long n,
                                            long long c, long long inner, int cl, float eps,
                                            int training, cudaStream_t stream,
                                            const SgBnRunning<S> &run = SgBnRunning<S>())
{
	return sgk_bn_fwd<T, S>(x, rm, rv, w, b, (const T *)NULL, 0, y, mean_out, var_out, work,
	                        n, c, inner, cl, eps, training, run, stream);
}

/* The forward with its epilogue: y = relu(bn(x) + res) as the three ops
 * would compute it (res NULL: relu(bn(x))). */
template <class T, class S>
static cudaError_t sg_launch_batch_norm_fwd_relu(const T *x, const S *rm, const S *rv,
                                                 const T *w, const T *b, const T *res, T *y,
                                                 T *mean_out, T *var_out,
                                                 typename sgk_acc<T>::type *work, long long n,
                                                 long long c, long long inner, int cl,
                                                 float eps, int training, cudaStream_t stream,
                                                 const SgBnRunning<S> &run = SgBnRunning<S>())
{
	return sgk_bn_fwd<T, S>(x, rm, rv, w, b, res, 1, y, mean_out, var_out, work, n, c, inner,
	                        cl, eps, training, run, stream);
}

template <class T, class S>
static cudaError_t sg_launch_batch_norm_bwd(const T *dy, const T *x, const S *rm, const S *rv,
                                            const T *w, T *dx, T *dw, T *db,
                                            typename sgk_acc<T>::type *work, long long n,
                                            long long c, long long inner, int cl, float eps,
                                            int training, cudaStream_t stream,
                                            const SgBnSgd<T> &sgd = SgBnSgd<T>())
{
	if (n * c * inner <= 0)
		return cudaSuccess;
	cudaError_t e = sgk_bn_stats<T, S, 4>(x, dy, rm, rv, w, work, dw, db, (T *)NULL, (T *)NULL,
	                                      n, c, inner, cl, eps, training, SgBnRunning<S>(), sgd,
	                                      stream);
	if (e != cudaSuccess)
		return e;
	const int v = sgk_bn_vec<T>(cl ? c : inner, dy, x, dx);
	if (cl && v > 1) {
		const int ctl = sgk_bn_ctl(c / v);
		const dim3 grid = sgk_bn_cl_grid(n * inner, c / v, ctl);
		if (v == SgkBnVec<T>::V16)
			sgk_bn_bwd_dx_cl_k<T, SgkBnVec<T>::V16><<<grid, 256, 0, stream>>>(
				dy, x, dx, work, n * inner, c, ctl, training);
		else
			sgk_bn_bwd_dx_cl_k<T, SgkBnVec<T>::V8><<<grid, 256, 0, stream>>>(
				dy, x, dx, work, n * inner, c, ctl, training);
		return sgk_launched();
	}
	if (cl) {   /* [m, c] walked as [m, c, 1] */
		n *= inner;
		inner = 1;
	}
	const unsigned grid = sgk_conv_grid(n * c * inner / v);
	if (v == SgkBnVec<T>::V16)
		sgk_bn_bwd_dx_k<T, SgkBnVec<T>::V16><<<grid, 256, 0, stream>>>(dy, x, dx, work, n, c,
		                                                              inner, training);
	else if (v == SgkBnVec<T>::V8)
		sgk_bn_bwd_dx_k<T, SgkBnVec<T>::V8><<<grid, 256, 0, stream>>>(dy, x, dx, work, n, c,
		                                                             inner, training);
	else
		sgk_bn_bwd_dx_k<T, 1><<<grid, 256, 0, stream>>>(dy, x, dx, work, n, c, inner,
		                                                training);
	return sgk_launched();
}
#endif

#pragma nv_diag_default 177
#endif /* SGK_CONV_CUH */
