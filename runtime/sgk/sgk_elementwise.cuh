/*
 * sgk_elementwise.cuh - the skeleton of a bandwidth-bound pointwise
 * kernel: a grid-stride loop over the elements of a (broadcast) shape,
 * 128-bit loads and stores where every operand allows them, a scalar
 * tail, and the index arithmetic of broadcasting (strides of 0) with
 * 32-bit magic-number division when the shape is small enough.
 *
 * The caller supplies the body as a functor that holds its operand
 * pointers and says what to do with V consecutive elements of the
 * (collapsed) output shape:
 *
 *   struct Body {
 *       const float *x; const __nv_bfloat16 *b; float *y;   // operands
 *       template <int V>
 *       __device__ void run(const long long *off, const unsigned char *bc) const
 *       {
 *           sgk_reg<V, float> xv = sgk_ld<V>(x, off[0], bc[0]);
 *           sgk_reg<V, __nv_bfloat16> bv = sgk_ld<V>(b, off[1], bc[1]);
 *           sgk_reg<V, float> yv;
 *           #pragma unroll
 *           for (int e = 0; e < V; e++)
 *               yv.v[e] = xv.v[e] + sgk_tof(bv.v[e]);
 *           sgk_st<V>(y, off[2], yv);
 *       }
 *   };
 *
 * off[k] is the element offset of operand k's first element, bc[k] is 1
 * when operand k does not move along the innermost dim (its V elements
 * are one value).  V is the vector width or 1 (tails, and shapes that do
 * not allow vectors).  A body may also index its operands any other way.
 *
 * Host side:
 *
 *   SgEwShape<3> sh;
 *   sg_ew_shape_init(&sh, rank, sizes, strides, ptrs, esize);
 *       sizes[rank]: the output shape; strides[3][rank]: each operand's
 *       element strides over it (0 where broadcast); ptrs, esize: each
 *       operand's address and element size, for the alignment check.
 *       Dims are collapsed where every operand allows.
 *   sg_launch_elementwise<VEC>(&sh, Body{...}, stream);
 *       VEC is the number of elements per vector: 16 / the largest
 *       element size among the operands (4 for f32, 8 for bf16 alone).
 *
 * Vectors are used when, for every operand that moves along the inner
 * dim (stride 1; broadcast operands load one value), the address and all
 * outer strides are multiples of VEC elements, and the inner size is a
 * multiple of VEC (or the shape collapsed to one dim: then a scalar
 * tail handles the rest).  Otherwise every element goes through run<1>.
 */
#ifndef SGK_ELEMENTWISE_CUH
#define SGK_ELEMENTWISE_CUH
#include "sgk_common.cuh"
/* nvcc remarks on the helpers a program leaves unused: off here */
#pragma nv_diag_suppress 177

#define SGK_EW_MAXR 8

/* Division by a constant d by multiplication: n / d for n < 2^31. */
struct SgDivmod {
	unsigned d, magic, shift;
};

/* n / dm.d for n < 2^31. */
SGK_DEV unsigned sgk_div(const SgDivmod &dm, unsigned n)
{
	return (__umulhi(n, dm.magic) + n) >> dm.shift;
}

/* The collapsed iteration space of a pointwise kernel with NOP operands. */
template <int NOP>
struct SgEwShape {
	int rank;                          /* >= 1; dim rank-1 is the inner one */
	int vec_ok;                        /* vectors allowed (see above) */
	sgk_i64 n;                         /* elements in all */
	sgk_i64 size[SGK_EW_MAXR];
	SgDivmod div[SGK_EW_MAXR];         /* size[d] as a divisor (32-bit path) */
	sgk_i64 stride[NOP][SGK_EW_MAXR];  /* element strides; 0 = broadcast */
	unsigned char bc[NOP];             /* inner stride is 0 */
};

/* The offsets of element i (a multiple of V in vector mode) of every
 * operand.  I32: i < 2^31, division by magic numbers. */
template <int NOP, bool I32>
SGK_DEV void sgk_ew_offsets(const SgEwShape<NOP> &sh, sgk_i64 i, sgk_i64 *off)
{
#pragma unroll
	for (int k = 0; k < NOP; k++)
		off[k] = 0;
	for (int d = sh.rank - 1; d >= 0; d--) {
		sgk_i64 q, r;
		if (d == 0) {
			q = 0;
			r = i;
		} else if (I32) {
			q = sgk_div(sh.div[d], (unsigned)i);
			r = i - q * sh.size[d];
		} else {
			q = i / sh.size[d];
			r = i - q * sh.size[d];
		}
#pragma unroll
		for (int k = 0; k < NOP; k++)
			off[k] += r * sh.stride[k][d];
		i = q;
	}
}

/* The grid-stride loop: vectors of V while they last, then (V > 1 on a
 * one-dim shape) the scalar tail. */
template <int NOP, int V, bool I32, class Body>
__global__ void __launch_bounds__(256) sgk_ew_kernel(SgEwShape<NOP> sh, Body body)
{
	const sgk_i64 nchunk = sh.n / V, step = (sgk_i64)gridDim.x * blockDim.x;
	const sgk_i64 t0 = (sgk_i64)blockIdx.x * blockDim.x + threadIdx.x;
	sgk_i64 off[NOP];
	for (sgk_i64 c = t0; c < nchunk; c += step) {
		sgk_ew_offsets<NOP, I32>(sh, c * V, off);
		body.template run<V>(off, sh.bc);
	}
	if (V > 1) {
		for (sgk_i64 i = nchunk * V + t0; i < sh.n; i += step) {
			sgk_ew_offsets<NOP, I32>(sh, i, off);
			body.template run<1>(off, sh.bc);
		}
	}
}

/* Loads V elements of operand p at off: one value repeated when bc (the
 * operand is broadcast along the inner dim), else a vector. */
template <int V, class T>
SGK_DEV sgk_reg<V, T> sgk_ld(const T *p, sgk_i64 off, unsigned char bc)
{
	sgk_reg<V, T> r;
	if (V == 1 || bc) {
		T x = p[off];
#pragma unroll
		for (int e = 0; e < V; e++)
			r.v[e] = x;
		return r;
	}
	return sgk_ldv<V>(p + off);
}

/* Stores V elements of an output (never broadcast) at off. */
template <int V, class T>
SGK_DEV void sgk_st(T *p, sgk_i64 off, const sgk_reg<V, T> &r)
{
	if (V == 1)
		p[off] = r.v[0];
	else
		sgk_stv<V>(p + off, r);
}

#ifndef __CUDACC_RTC__
/* Host: n / d by magic numbers for d >= 1 (valid for n < 2^31). */
static inline SgDivmod sg_divmod_init(unsigned d)
{
	SgDivmod dm;
	unsigned s = 0;
	while (s < 32 && (1ull << s) < d)
		s++;
	dm.d = d;
	dm.shift = s;
	dm.magic = (unsigned)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
	return dm;
}

/* Fills sh from the output shape and each operand's strides over it:
 * drops dims of size 1, merges neighbours that are contiguous for every
 * operand, and decides whether vectors of `vec` elements may be used. */
template <int NOP>
static void sg_ew_shape_init(SgEwShape<NOP> *sh, int rank, const long long *sizes,
                             const long long (*strides)[SGK_EW_MAXR], const void *const *ptrs,
                             const int *esize, int vec)
{
	int r = 0;
	sh->n = 1;
	for (int d = 0; d < rank; d++) {
		sh->n *= sizes[d];
		if (sizes[d] == 1)
			continue;
		int merge = r > 0;
		for (int k = 0; k < NOP && merge; k++)
			merge = sh->stride[k][r - 1] == strides[k][d] * sizes[d];
		if (merge) {
			sh->size[r - 1] *= sizes[d];
			for (int k = 0; k < NOP; k++)
				sh->stride[k][r - 1] = strides[k][d];
			continue;
		}
		sh->size[r] = sizes[d];
		for (int k = 0; k < NOP; k++)
			sh->stride[k][r] = strides[k][d];
		r++;
	}
	if (r == 0) {
		sh->size[0] = 1;
		for (int k = 0; k < NOP; k++)
			sh->stride[k][0] = 0;
		r = 1;
	}
	sh->rank = r;
	for (int d = 0; d < r; d++)
		sh->div[d] = sg_divmod_init((unsigned)(sh->size[d] < 0x7fffffff ? sh->size[d] : 1));
	int ok = vec > 1 && (r == 1 || sh->size[r - 1] % vec == 0);
	for (int k = 0; k < NOP; k++) {
		sh->bc[k] = sh->stride[k][r - 1] == 0;
		if (sh->bc[k])
			continue;
		if (sh->stride[k][r - 1] != 1 ||
		    !sgk_host_aligned(ptrs[k], (unsigned)(vec * esize[k])))
			ok = 0;
		for (int d = 0; d < r - 1; d++)
			if (sh->stride[k][d] % vec)
				ok = 0;
	}
	sh->vec_ok = ok;
}

/* Launches body over sh: vectors of VEC where sh allows, else scalars;
 * 32-bit index arithmetic when the shape has fewer than 2^31 elements. */
template <int VEC, int NOP, class Body>
static cudaError_t sg_launch_elementwise(const SgEwShape<NOP> *sh, const Body &body,
                                         cudaStream_t stream)
{
	if (sh->n <= 0)
		return cudaSuccess;
	const int threads = 256, per = sh->vec_ok ? VEC : 1;
	sgk_i64 want = (sh->n / per + threads - 1) / threads;
	sgk_i64 cap = (sgk_i64)sgk_num_sms() * (2048 / threads) * 2;
	unsigned blocks = (unsigned)(want < cap ? (want > 0 ? want : 1) : cap);
	bool i32 = sh->n < 0x7fffffffLL;
	if (sh->vec_ok && i32)
		sgk_ew_kernel<NOP, VEC, true><<<blocks, threads, 0, stream>>>(*sh, body);
	else if (sh->vec_ok)
		sgk_ew_kernel<NOP, VEC, false><<<blocks, threads, 0, stream>>>(*sh, body);
	else if (i32)
		sgk_ew_kernel<NOP, 1, true><<<blocks, threads, 0, stream>>>(*sh, body);
	else
		sgk_ew_kernel<NOP, 1, false><<<blocks, threads, 0, stream>>>(*sh, body);
	return sgk_launched();
}
#endif

#pragma nv_diag_default 177
#endif /* SGK_ELEMENTWISE_CUH */
