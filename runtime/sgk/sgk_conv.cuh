/*
 * sgk_conv.cuh - 2-D convolution, pooling and batch norm over NCHW
 * tensors, as direct kernels: the fallback the generated code runs when
 * cuDNN is not there (or declines), and the pools and batch_norm always.
 *
 * Elements are T (float, __half, __nv_bfloat16, double); arithmetic is in
 * A = sgk_acc<T>::type (float, or double for double), each result rounded
 * once.  SgConvGeom holds the sizes: x [n, c, h, w], weight [k, c/groups,
 * r, s], y [n, k, oh, ow], stride (sh, sw), padding (ph, pw), dilation
 * (dh, dw); pools use k = c, groups = c and dilation 1.
 *
 * Host launchers (all return the launch's cudaError_t):
 *
 *   sg_launch_conv2d_fwd<T>(x, w, b, y, g, stream)    b may be NULL
 *   sg_launch_conv2d_bwd_input<T>(dy, w, dx, g, stream)
 *   sg_launch_conv2d_bwd_weight<T>(dy, x, dw, g, stream)
 *       one thread per output element (dx: per input element, gathering
 *       the taps that read it); dw: one block per weight element, summing
 *       over the batch and the output positions in a fixed order.
 *   sg_launch_pool2d_fwd<T>(x, y, g, mode, stream)
 *   sg_pool2d_bwd_workspace(g, mode)   bytes of work for:
 *   sg_launch_pool2d_bwd<T>(dy, x, dx, g, mode, work, stream)
 *       mode 0 max (the window's first maximum, NaN wins, as PyTorch's
 *       CPU kernel), 1 avg (divided by the whole kernel: PyTorch's
 *       count_include_pad), 2 adaptive avg (PyTorch's floor/ceil
 *       windows).  Backward gathers per input element (no atomics); max
 *       first records each window's argmax in work, a byte an output
 *       (windows up to 15 x 15; larger ones, with no work, find it again
 *       from x per input element).
 *   sg_batch_norm_workspace<T>(n, c, inner)   bytes of work for:
 *   sg_launch_batch_norm_fwd<T, S>(x, rm, rv, w, b, y, work, n, c, inner,
 *                                  eps, training, stream)
 *       x [n, c, inner]; rm, rv (S: the running stats' dtype) read in
 *       eval; w, b may be NULL.  Training: each channel's n * inner values
 *       split into slices (about 1024 blocks in all, sgk_bn_chunk), a
 *       block per channel and slice computing the slice's mean and sum of
 *       squared deviations in one pass (Welford), then a thread per
 *       channel merging its slices in order (Chan's formula): the mean and
 *       the biased variance.  Then y pointwise: x read twice in all.
 *   sg_launch_batch_norm_bwd<T, S>(dy, x, rm, rv, w, dx, dw, db, work, n,
 *                                  c, inner, eps, training, stream)
 *       dw, db [c] of T: one pass over x and dy split the same way gives
 *       the statistics again with sum(dy) and sum(dy * xhat) (dy's mean
 *       and its co-moment with x, merged as the variance is), then dx
 *       pointwise: x and dy read twice in all.
 *   The pointwise kernels keep each value's channel as they walk (no
 *   division a value).
 */
#ifndef SGK_CONV_CUH
#define SGK_CONV_CUH
#include "sgk_common.cuh"
/* nvcc remarks on the helpers a program leaves unused: off here */
#pragma nv_diag_suppress 177

typedef struct {
	long long n, c, h, w, k, r, s, oh, ow, groups, sh, sw, ph, pw, dh, dw;
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

template <class T>
__global__ void __launch_bounds__(256)
sgk_conv2d_fwd_k(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                 T *__restrict__ y, SgConvGeom g)
{
	typedef typename sgk_acc<T>::type A;
	const long long cg = g.c / g.groups, kg = g.k / g.groups;
	SGK_CONV_LOOP(i, g.n * g.k * g.oh * g.ow) {
		long long nb, k, oh, ow;
		sgk_unflat4(i, g.k, g.oh, g.ow, nb, k, oh, ow);
		const long long c0 = k / kg * cg;
		A acc = 0;
		for (long long c = 0; c < cg; c++) {
			const T *xp = x + ((nb * g.c + c0 + c) * g.h) * g.w;
			const T *wp = w + (k * cg + c) * g.r * g.s;
			for (long long r = 0; r < g.r; r++) {
				long long ih = oh * g.sh - g.ph + r * g.dh;
				if (ih < 0 || ih >= g.h)
					continue;
				for (long long s = 0; s < g.s; s++) {
					long long iw = ow * g.sw - g.pw + s * g.dw;
					if (iw >= 0 && iw < g.w)
						acc += (A)sgk_tof(xp[ih * g.w + iw]) * (A)sgk_tof(wp[r * g.s + s]);
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
	SGK_CONV_LOOP(i, g.n * g.c * g.h * g.w) {
		long long nb, c, ih, iw;
		sgk_unflat4(i, g.c, g.h, g.w, nb, c, ih, iw);
		const long long gi = c / cg;
		A acc = 0;
		for (long long k = gi * kg; k < (gi + 1) * kg; k++) {
			const T *dyp = dy + (nb * g.k + k) * g.oh * g.ow;
			const T *wp = w + (k * cg + c - gi * cg) * g.r * g.s;
			for (long long r = 0; r < g.r; r++) {
				long long th = ih + g.ph - r * g.dh;
				if (th < 0 || th % g.sh || th / g.sh >= g.oh)
					continue;
				for (long long s = 0; s < g.s; s++) {
					long long tw = iw + g.pw - s * g.dw;
					if (tw < 0 || tw % g.sw || tw / g.sw >= g.ow)
						continue;
					acc += (A)sgk_tof(dyp[th / g.sh * g.ow + tw / g.sw]) *
					       (A)sgk_tof(wp[r * g.s + s]);
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
	for (long long e = blockIdx.x; e < g.k * cg * g.r * g.s; e += gridDim.x) {
		long long k, c, r, s;
		sgk_unflat4(e, cg, g.r, g.s, k, c, r, s);
		const long long xc = k / kg * cg + c;
		A acc = 0;
		for (long long p = threadIdx.x; p < g.n * g.oh * g.ow; p += blockDim.x) {
			long long ow = p % g.ow, q = p / g.ow, oh = q % g.oh, nb = q / g.oh;
			long long ih = oh * g.sh - g.ph + r * g.dh, iw = ow * g.sw - g.pw + s * g.dw;
			if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
				acc += (A)sgk_tof(dy[((nb * g.k + k) * g.oh + oh) * g.ow + ow]) *
				       (A)sgk_tof(x[((nb * g.c + xc) * g.h + ih) * g.w + iw]);
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
		I oh0 = 0, oh1 = g.oh, ow0 = 0, ow1 = g.ow;
		if (mode != 2) {   /* outputs with oh * sh - ph <= ih < oh * sh - ph + r */
			I a = ih + g.ph - g.r + 1, bb = iw + g.pw - g.s + 1;
			oh0 = a <= 0 ? 0 : (a + g.sh - 1) / g.sh;
			ow0 = bb <= 0 ? 0 : (bb + g.sw - 1) / g.sw;
			oh1 = (ih + g.ph) / g.sh + 1;
			ow1 = (iw + g.pw) / g.sw + 1;
			oh1 = oh1 < g.oh ? oh1 : g.oh;
			ow1 = ow1 < g.ow ? ow1 : g.ow;
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
 * them are shifts. */
template <class T, int SH, int SW>
__global__ void __launch_bounds__(256)
sgk_maxpool_arg_k(const T *__restrict__ x, unsigned char *__restrict__ arg, SgConvGeom geom)
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
				bh < 0 ? (unsigned char)255
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
		const int ih = row % g.h, pl = row / g.h, a = ih + g.ph - g.r + 1;
		const int oh0 = a <= 0 ? 0 : (a + sh - 1) / sh;
		const int oh1 = min((ih + g.ph) / sh + 1, g.oh);
		const long long pbase = (long long)pl * g.oh * g.ow;
		for (int iw = threadIdx.x; iw < g.w; iw += blockDim.x) {
			const int bb = iw + g.pw - g.s + 1;
			const int ow0 = bb <= 0 ? 0 : (bb + sw - 1) / sw;
			const int ow1 = min((iw + g.pw) / sw + 1, g.ow);
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

/* Stage 2, a thread a channel: the nsplit parts merged in order into the
 * channel's mean and rstd, work[ch] and work[c + ch] (in eval the running
 * ones); with dy also sum(dy) and sum(dy * xhat) into work[3c + ch] and
 * work[2c + ch], and db, dw. */
template <class T, class S, int NPART>
__global__ void __launch_bounds__(256)
sgk_bn_stats_final_k(const S *__restrict__ rm, const S *__restrict__ rv,
                     const typename sgk_acc<T>::type *__restrict__ part,
                     typename sgk_acc<T>::type *__restrict__ work, T *__restrict__ dw,
                     T *__restrict__ db, long long m, long long c, long long chunk, int nsplit,
                     float eps, int training)
{
	typedef typename sgk_acc<T>::type A;
	const long long ch = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (ch >= c)
		return;
	SgkMoments<A> v = {0, 0, 0, 0, 0};
	for (int k = 0; k < nsplit; k++) {
		const A *q = part + NPART * (k * c + ch);
		SgkMoments<A> u = {(A)(k + 1 < nsplit ? chunk : m - (long long)k * chunk), q[0], q[1],
		                   NPART == 4 ? q[2] : (A)0, NPART == 4 ? q[3] : (A)0};
		v.merge(u);
	}
	A mean = v.mx, var = v.m2 / (A)m;
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
		dw[ch] = sgk_cvt<T>(sgx);
		db[ch] = sgk_cvt<T>(sg);
	}
}

/* y = (x - mean) * rstd * w + b, VEC values at a time (inner a multiple
 * of VEC, x and y aligned to it): the walk is over vectors. */
template <class T, int VEC>
__global__ void __launch_bounds__(256)
sgk_bn_fwd_k(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
             T *__restrict__ y, const typename sgk_acc<T>::type *__restrict__ work, long long n,
             long long c, long long inner)
{
	typedef typename sgk_acc<T>::type A;
	for (SgkFlatWalk f(c, inner / VEC); f.i < n * c * inner / VEC; f.next()) {
		const long long ch = f.ch;
		const A sc = work[c + ch] * (w ? (A)sgk_tof(w[ch]) : (A)1), mean = work[ch];
		const A sf = b ? (A)sgk_tof(b[ch]) : (A)0;
		const sgk_reg<VEC, T> xr = sgk_ldv<VEC>(x + f.i * VEC);
		sgk_reg<VEC, T> yr;
#pragma unroll
		for (int k = 0; k < VEC; k++)
			yr.v[k] = sgk_cvt<T>(((A)sgk_tof(xr.v[k]) - mean) * sc + sf);
		sgk_stv<VEC>(y + f.i * VEC, yr);
	}
}

/* dx = w * rstd * (dy - db / M - xhat * dw / M) (training: the batch's
 * statistics depend on x), w * rstd * dy in eval; VEC values at a time as
 * sgk_bn_fwd_k. */
template <class T, int VEC>
__global__ void __launch_bounds__(256)
sgk_bn_bwd_dx_k(const T *__restrict__ dy, const T *__restrict__ x, const T *__restrict__ w,
                T *__restrict__ dx, const typename sgk_acc<T>::type *__restrict__ work,
                long long n, long long c, long long inner, int training)
{
	typedef typename sgk_acc<T>::type A;
	const A m = (A)(n * inner);
	for (SgkFlatWalk f(c, inner / VEC); f.i < n * c * inner / VEC; f.next()) {
		const long long ch = f.ch;
		const A rstd = work[c + ch], mean = work[ch];
		const A sc = (w ? (A)sgk_tof(w[ch]) : (A)1) * rstd;
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

/* 1 when a pool's flat indices (input and output, plus a grid's worth of
 * threads) fit an int. */
static inline int sgk_pool_int(const SgConvGeom &g)
{
	const long long lim = (1LL << 31) - (1LL << 24);
	return g.n * g.c * g.h * g.w < lim && g.n * g.c * g.oh * g.ow < lim;
}

template <class T>
static cudaError_t sg_launch_pool2d_fwd(const T *x, T *y, SgConvGeom g, int mode,
                                        cudaStream_t stream)
{
	long long count = g.n * g.c * g.oh * g.ow;
	if (count <= 0)
		return cudaSuccess;
	if (sgk_pool_int(g))
		sgk_pool2d_fwd_k<T, int><<<sgk_conv_grid(count), 256, 0, stream>>>(x, y, g, mode);
	else
		sgk_pool2d_fwd_k<T, long long><<<sgk_conv_grid(count), 256, 0, stream>>>(x, y, g, mode);
	return sgk_launched();
}

/* The scratch sg_launch_pool2d_bwd needs: a byte an output for
 * max_pool2d with windows of at most 15 x 15 whose rows fit an int, else
 * none. */
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
                                   unsigned char *arg, cudaStream_t stream)
{
	dim3 grid, block;
	sgk_rows_launch(g.ow, g.n * g.c * g.oh, grid, block);
	sgk_maxpool_arg_k<T, SH, SW><<<grid, block, 0, stream>>>(x, arg, g);
	cudaError_t e = sgk_launched();
	if (e != cudaSuccess)
		return e;
	sgk_rows_launch(g.w, g.n * g.c * g.h, grid, block);
	sgk_maxpool_bwd_k<T, SH, SW><<<grid, block, 0, stream>>>(dy, arg, dx, g);
	return sgk_launched();
}

/* work: sg_pool2d_bwd_workspace(g, mode) bytes (NULL when that is 0). */
template <class T>
static cudaError_t sg_launch_pool2d_bwd(const T *dy, const T *x, T *dx, SgConvGeom g, int mode,
                                        void *work, cudaStream_t stream)
{
	long long count = g.n * g.c * g.h * g.w;
	if (count <= 0)
		return cudaSuccess;
	if (sg_pool2d_bwd_workspace(g, mode) > 0) {
		unsigned char *arg = (unsigned char *)work;
		if (g.sh == 2 && g.sw == 2)
			return sgk_maxpool_bwd<T, 2, 2>(dy, x, dx, g, arg, stream);
		return sgk_maxpool_bwd<T, 0, 0>(dy, x, dx, g, arg, stream);
	}
	if (sgk_pool_int(g))
		sgk_pool2d_bwd_k<T, int><<<sgk_conv_grid(count), 256, 0, stream>>>(dy, x, dx, g, mode);
	else
		sgk_pool2d_bwd_k<T, long long><<<sgk_conv_grid(count), 256, 0, stream>>>(dy, x, dx, g,
		                                                                         mode);
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

/* How many values batch norm's kernels take at a time: 16 bytes' worth,
 * else 8 bytes' (rows, inner, of whole vectors, the pointers, NULL: none,
 * aligned to them), else 1. */
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

/* The widths sgk_bn_vec chooses from, besides 1. */
template <class T>
struct SgkBnVec {
	enum { V16 = 16 / sizeof(T), V8 = 8 / sizeof(T) };
};

template <class T>
static size_t sg_batch_norm_workspace(long long n, long long c, long long inner)
{
	const long long chunk = sgk_bn_chunk(n, c, inner), nsplit = (n * inner + chunk - 1) / chunk;
	return (size_t)(4 + 4 * nsplit) * (size_t)c * sizeof(typename sgk_acc<T>::type);
}

/* Each channel's mean and rstd into work[0..2c) (the parts after work[4c]);
 * with dy (NPART 4) also its sums and dw, db. */
template <class T, class S, int NPART>
static cudaError_t sgk_bn_stats(const T *x, const T *dy, const S *rm, const S *rv,
                                typename sgk_acc<T>::type *work, T *dw, T *db, long long n,
                                long long c, long long inner, float eps, int training,
                                cudaStream_t stream)
{
	const long long m = n * inner, chunk = sgk_bn_chunk(n, c, inner);
	const int nsplit = training || NPART == 4 ? (int)((m + chunk - 1) / chunk) : 0;
	if (nsplit > 0) {
		const dim3 grid((unsigned)c, (unsigned)nsplit);
		const int v = sgk_bn_vec<T>(inner, x, dy, (const T *)NULL);
		typename sgk_acc<T>::type *part = work + 4 * c;
		if (v == SgkBnVec<T>::V16)
			sgk_bn_moments_k<T, NPART, SgkBnVec<T>::V16><<<grid, 256, 0, stream>>>(
				x, dy, part, n, c, inner, chunk);
		else if (v == SgkBnVec<T>::V8)
			sgk_bn_moments_k<T, NPART, SgkBnVec<T>::V8><<<grid, 256, 0, stream>>>(
				x, dy, part, n, c, inner, chunk);
		else
			sgk_bn_moments_k<T, NPART, 1><<<grid, 256, 0, stream>>>(x, dy, part, n, c,
			                                                         inner, chunk);
		cudaError_t e = sgk_launched();
		if (e != cudaSuccess)
			return e;
	}
	sgk_bn_stats_final_k<T, S, NPART><<<(unsigned)((c + 255) / 256), 256, 0, stream>>>(
		rm, rv, work + 4 * c, work, dw, db, m, c, chunk, nsplit, eps, training);
	return sgk_launched();
}

template <class T, class S>
static cudaError_t sg_launch_batch_norm_fwd(const T *x, const S *rm, const S *rv, const T *w,
                                            const T *b, T *y, typename sgk_acc<T>::type *work,
                                            long long n, long long c, long long inner,
                                            float eps, int training, cudaStream_t stream)
{
	if (n * c * inner <= 0)
		return cudaSuccess;
	cudaError_t e = sgk_bn_stats<T, S, 2>(x, (const T *)NULL, rm, rv, work, (T *)NULL,
	                                      (T *)NULL, n, c, inner, eps, training, stream);
	if (e != cudaSuccess)
		return e;
	const int v = sgk_bn_vec<T>(inner, x, y, (const T *)NULL);
	const unsigned grid = sgk_conv_grid(n * c * inner / v);
	if (v == SgkBnVec<T>::V16)
		sgk_bn_fwd_k<T, SgkBnVec<T>::V16><<<grid, 256, 0, stream>>>(x, w, b, y, work, n, c,
		                                                           inner);
	else if (v == SgkBnVec<T>::V8)
		sgk_bn_fwd_k<T, SgkBnVec<T>::V8><<<grid, 256, 0, stream>>>(x, w, b, y, work, n, c,
		                                                          inner);
	else
		sgk_bn_fwd_k<T, 1><<<grid, 256, 0, stream>>>(x, w, b, y, work, n, c, inner);
	return sgk_launched();
}

template <class T, class S>
static cudaError_t sg_launch_batch_norm_bwd(const T *dy, const T *x, const S *rm, const S *rv,
                                            const T *w, T *dx, T *dw, T *db,
                                            typename sgk_acc<T>::type *work, long long n,
                                            long long c, long long inner, float eps,
                                            int training, cudaStream_t stream)
{
	if (n * c * inner <= 0)
		return cudaSuccess;
	cudaError_t e = sgk_bn_stats<T, S, 4>(x, dy, rm, rv, work, dw, db, n, c, inner, eps,
	                                      training, stream);
	if (e != cudaSuccess)
		return e;
	const int v = sgk_bn_vec<T>(inner, dy, x, dx);
	const unsigned grid = sgk_conv_grid(n * c * inner / v);
	if (v == SgkBnVec<T>::V16)
		sgk_bn_bwd_dx_k<T, SgkBnVec<T>::V16><<<grid, 256, 0, stream>>>(dy, x, w, dx, work, n,
		                                                              c, inner, training);
	else if (v == SgkBnVec<T>::V8)
		sgk_bn_bwd_dx_k<T, SgkBnVec<T>::V8><<<grid, 256, 0, stream>>>(dy, x, w, dx, work, n,
		                                                             c, inner, training);
	else
		sgk_bn_bwd_dx_k<T, 1><<<grid, 256, 0, stream>>>(dy, x, w, dx, work, n, c, inner,
		                                                training);
	return sgk_launched();
}
#endif

#pragma nv_diag_default 177
#endif /* SGK_CONV_CUH */
