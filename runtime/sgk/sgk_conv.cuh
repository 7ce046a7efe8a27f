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
 *   sg_launch_pool2d_bwd<T>(dy, x, dx, g, mode, stream)
 *       mode 0 max (the window's first maximum, NaN wins, as PyTorch's
 *       CPU kernel), 1 avg (divided by the whole kernel: PyTorch's
 *       count_include_pad), 2 adaptive avg (PyTorch's floor/ceil
 *       windows).  Backward gathers per input element (no atomics); max
 *       finds each window's maximum again from x.
 *   sg_batch_norm_workspace<T>(n, c, inner)   bytes of work for:
 *   sg_launch_batch_norm_fwd<T, S>(x, rm, rv, w, b, y, work, n, c, inner,
 *                                  eps, training, stream)
 *       x [n, c, inner]; rm, rv (S: the running stats' dtype) read in
 *       eval; w, b may be NULL.  Training: each channel's n * inner values
 *       split into slices (about 1024 blocks in all, sgk_bn_chunk), a
 *       block per channel and slice computing the slice's mean and sum of
 *       squared deviations (two passes), then a thread per channel
 *       combining its slices in order (Chan's formula): the mean and the
 *       biased variance.
 *   sg_launch_batch_norm_bwd<T, S>(dy, x, rm, rv, w, dx, dw, db, work, n,
 *                                  c, inner, eps, training, stream)
 *       dw, db [c] of T: the statistics again from x, then sum(dy) and
 *       sum(dy * xhat) split the same way, then dx pointwise.
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

/* Training statistics, stage 1: block (ch, y) takes channel ch's values
 * p in [y * chunk, (y + 1) * chunk) of its m = n * inner, into part[y][ch]:
 * their mean and sum of squared deviations from it (two passes). */
template <class T>
__global__ void __launch_bounds__(256)
sgk_bn_stats_part_k(const T *__restrict__ x, typename sgk_acc<T>::type *__restrict__ part,
                    long long n, long long c, long long inner, long long chunk)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ A sh[32];
	const long long ch = blockIdx.x, p0 = (long long)blockIdx.y * chunk, m = n * inner;
	const long long len = p0 + chunk < m ? chunk : m - p0;
	A s = 0;
	SgkChanWalk a(p0 + threadIdx.x, 256, ch, c, inner);
	for (long long p = threadIdx.x; p < len; p += 256, a.next())
		s += (A)sgk_tof(x[a.off]);
	const A mean = sgk_row_sum<256>(s, sh) / (A)len;
	A q = 0;
	SgkChanWalk b(p0 + threadIdx.x, 256, ch, c, inner);
	for (long long p = threadIdx.x; p < len; p += 256, b.next()) {
		const A d = (A)sgk_tof(x[b.off]) - mean;
		q += d * d;
	}
	q = sgk_row_sum<256>(q, sh);
	if (threadIdx.x == 0) {
		part[2 * ((long long)blockIdx.y * c + ch)] = mean;
		part[2 * ((long long)blockIdx.y * c + ch) + 1] = q;
	}
}

/* Stage 2, a thread a channel: its mean and rstd into work[ch], work[c +
 * ch], in training from the nsplit parts in order (Chan's formula, the
 * biased variance), in eval the running ones. */
template <class T, class S>
__global__ void __launch_bounds__(256)
sgk_bn_stats_final_k(const S *__restrict__ rm, const S *__restrict__ rv,
                     const typename sgk_acc<T>::type *__restrict__ part,
                     typename sgk_acc<T>::type *__restrict__ work, long long m, long long c,
                     long long chunk, int nsplit, float eps, int training)
{
	typedef typename sgk_acc<T>::type A;
	const long long ch = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (ch >= c)
		return;
	A mean, var;
	if (training) {
		A cnt = 0, q = 0;
		mean = 0;
		for (int k = 0; k < nsplit; k++) {
			const A nk = (A)(k + 1 < nsplit ? chunk : m - (long long)k * chunk);
			const A d = part[2 * (k * c + ch)] - mean;
			q += part[2 * (k * c + ch) + 1] + d * d * (cnt * nk / (cnt + nk));
			mean += d * (nk / (cnt + nk));
			cnt += nk;
		}
		var = q / (A)m;
	} else {
		mean = (A)sgk_tof(rm[ch]);
		var = (A)sgk_tof(rv[ch]);
	}
	work[ch] = mean;
	work[c + ch] = (A)1 / sgk_sqrt(var + (A)eps);
}

template <class T>
__global__ void __launch_bounds__(256)
sgk_bn_fwd_k(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
             T *__restrict__ y, const typename sgk_acc<T>::type *__restrict__ work, long long n,
             long long c, long long inner)
{
	typedef typename sgk_acc<T>::type A;
	for (SgkFlatWalk f(c, inner); f.i < n * c * inner; f.next()) {
		const long long ch = f.ch;
		A v = ((A)sgk_tof(x[f.i]) - work[ch]) * work[c + ch];
		if (w)
			v *= (A)sgk_tof(w[ch]);
		if (b)
			v += (A)sgk_tof(b[ch]);
		y[f.i] = sgk_cvt<T>(v);
	}
}

/* Backward, stage 1: block (ch, y) sums dy and dy * xhat over channel
 * ch's values in the y-th slice of chunk into part[y][ch]. */
template <class T>
__global__ void __launch_bounds__(256)
sgk_bn_bwd_sums_part_k(const T *__restrict__ dy, const T *__restrict__ x,
                       const typename sgk_acc<T>::type *__restrict__ work,
                       typename sgk_acc<T>::type *__restrict__ part, long long n, long long c,
                       long long inner, long long chunk)
{
	typedef typename sgk_acc<T>::type A;
	__shared__ A sh[32];
	const long long ch = blockIdx.x, p0 = (long long)blockIdx.y * chunk, m = n * inner;
	const long long len = p0 + chunk < m ? chunk : m - p0;
	const A mean = work[ch], rstd = work[c + ch];
	A sg = 0, sgx = 0;
	SgkChanWalk a(p0 + threadIdx.x, 256, ch, c, inner);
	for (long long p = threadIdx.x; p < len; p += 256, a.next()) {
		const A gv = (A)sgk_tof(dy[a.off]);
		sg += gv;
		sgx += gv * ((A)sgk_tof(x[a.off]) - mean) * rstd;
	}
	sg = sgk_row_sum<256>(sg, sh);
	sgx = sgk_row_sum<256>(sgx, sh);
	if (threadIdx.x == 0) {
		part[2 * ((long long)blockIdx.y * c + ch)] = sg;
		part[2 * ((long long)blockIdx.y * c + ch) + 1] = sgx;
	}
}

/* Stage 2, a thread a channel: db = sum(dy) and dw = sum(dy * xhat) from
 * the nsplit parts in order, into dw, db and work[2c..4c). */
template <class T>
__global__ void __launch_bounds__(256)
sgk_bn_bwd_sums_final_k(const typename sgk_acc<T>::type *__restrict__ part, T *__restrict__ dw,
                        T *__restrict__ db, typename sgk_acc<T>::type *__restrict__ work,
                        long long c, int nsplit)
{
	typedef typename sgk_acc<T>::type A;
	const long long ch = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (ch >= c)
		return;
	A sg = 0, sgx = 0;
	for (int k = 0; k < nsplit; k++) {
		sg += part[2 * (k * c + ch)];
		sgx += part[2 * (k * c + ch) + 1];
	}
	work[2 * c + ch] = sgx;
	work[3 * c + ch] = sg;
	dw[ch] = sgk_cvt<T>(sgx);
	db[ch] = sgk_cvt<T>(sg);
}

/* dx = w * rstd * (dy - db / M - xhat * dw / M) (training: the batch's
 * statistics depend on x), w * rstd * dy in eval. */
template <class T>
__global__ void __launch_bounds__(256)
sgk_bn_bwd_dx_k(const T *__restrict__ dy, const T *__restrict__ x, const T *__restrict__ w,
                T *__restrict__ dx, const typename sgk_acc<T>::type *__restrict__ work,
                long long n, long long c, long long inner, int training)
{
	typedef typename sgk_acc<T>::type A;
	const A m = (A)(n * inner);
	for (SgkFlatWalk f(c, inner); f.i < n * c * inner; f.next()) {
		const long long ch = f.ch, i = f.i;
		A rstd = work[c + ch], v = (A)sgk_tof(dy[i]);
		if (training) {
			A xh = ((A)sgk_tof(x[i]) - work[ch]) * rstd;
			v = v - work[3 * c + ch] / m - xh * work[2 * c + ch] / m;
		}
		dx[i] = sgk_cvt<T>((w ? (A)sgk_tof(w[ch]) : (A)1) * rstd * v);
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

template <class T>
static cudaError_t sg_launch_pool2d_bwd(const T *dy, const T *x, T *dx, SgConvGeom g, int mode,
                                        cudaStream_t stream)
{
	long long count = g.n * g.c * g.h * g.w;
	if (count <= 0)
		return cudaSuccess;
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
	return m > 0 ? (m + ns - 1) / ns : 1;
}

template <class T>
static size_t sg_batch_norm_workspace(long long n, long long c, long long inner)
{
	const long long chunk = sgk_bn_chunk(n, c, inner), nsplit = (n * inner + chunk - 1) / chunk;
	return (size_t)(4 + 2 * nsplit) * (size_t)c * sizeof(typename sgk_acc<T>::type);
}

/* Each channel's mean and rstd into work[0..2c) (the parts after work[4c]). */
template <class T, class S>
static cudaError_t sgk_bn_stats(const T *x, const S *rm, const S *rv,
                                typename sgk_acc<T>::type *work, long long n, long long c,
                                long long inner, float eps, int training, cudaStream_t stream)
{
	const long long m = n * inner, chunk = sgk_bn_chunk(n, c, inner);
	const int nsplit = training ? (int)((m + chunk - 1) / chunk) : 0;
	if (training) {
		sgk_bn_stats_part_k<T><<<dim3((unsigned)c, (unsigned)nsplit), 256, 0, stream>>>(
			x, work + 4 * c, n, c, inner, chunk);
		cudaError_t e = sgk_launched();
		if (e != cudaSuccess)
			return e;
	}
	sgk_bn_stats_final_k<T, S><<<(unsigned)((c + 255) / 256), 256, 0, stream>>>(
		rm, rv, work + 4 * c, work, m, c, chunk, nsplit, eps, training);
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
	cudaError_t e = sgk_bn_stats<T, S>(x, rm, rv, work, n, c, inner, eps, training, stream);
	if (e != cudaSuccess)
		return e;
	sgk_bn_fwd_k<T><<<sgk_conv_grid(n * c * inner), 256, 0, stream>>>(x, w, b, y, work, n, c,
	                                                                   inner);
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
	cudaError_t e = sgk_bn_stats<T, S>(x, rm, rv, work, n, c, inner, eps, training, stream);
	if (e != cudaSuccess)
		return e;
	const long long chunk = sgk_bn_chunk(n, c, inner);
	const int nsplit = (int)((n * inner + chunk - 1) / chunk);
	sgk_bn_bwd_sums_part_k<T><<<dim3((unsigned)c, (unsigned)nsplit), 256, 0, stream>>>(
		dy, x, work, work + 4 * c, n, c, inner, chunk);
	if ((e = sgk_launched()) != cudaSuccess)
		return e;
	sgk_bn_bwd_sums_final_k<T><<<(unsigned)((c + 255) / 256), 256, 0, stream>>>(
		work + 4 * c, dw, db, work, c, nsplit);
	if ((e = sgk_launched()) != cudaSuccess)
		return e;
	sgk_bn_bwd_dx_k<T><<<sgk_conv_grid(n * c * inner), 256, 0, stream>>>(dy, x, w, dx, work, n,
	                                                                      c, inner, training);
	return sgk_launched();
}
#endif

#pragma nv_diag_default 177
#endif /* SGK_CONV_CUH */
