kernels.cu - one section per kind of kernel.  Common placeholders:
  ${comment}  "// FILE.sg:LINE: statement" lines naming what the kernel does
  ${name}     the kernel's name (k_GRAPH_LINE_OP_RESULT)
  ${params}   the parameter list; ${idx} the index type (int or sg_i64)
  ${n}        elements (grid-stride loops); ${block} threads per block
${xparams} is how a kernel reads its input: `const T *__restrict__ x`, or
at -O2 the parameters of a fused pointwise producer (elem_fn) that
computes each element where the kernel reads it.
Row kernels (reduce, softmax, norm, ce_rows) give each row ${tpr} threads
(a warp, or the whole block), ${rows} rows per block; ${base} is a row's
first element offset from `o`, ${roff} an element's offset from `r`.
Attention's row kernels (sdpa, sdpa_bwd_stats) are three sections each:
their head, then sdpa_row (the query row's online softmax over its keys,
which both compute), then their own _out section.
Sizes are compile-time constants: shapes are static in .sg.
//@ pointwise
${comment}
static __global__ void __launch_bounds__(256)
${name}(${params})
{
	for (${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x; i < ${n};
	     i += (${idx})gridDim.x * blockDim.x) {
${body}
	}
}
//@ pointwise_vec
${comment}
/* ${vec} elements a thread through aligned vector loads and stores (the
 * launch checks the alignment; ${scalar} is the fallback). */
static __global__ void __launch_bounds__(256)
${name}(${params})
{
	for (${idx} w = (${idx})blockIdx.x * blockDim.x + threadIdx.x; w < ${nvec};
	     w += (${idx})gridDim.x * blockDim.x) {
${loads}
#pragma unroll
		for (int j = 0; j < ${vec}; j++) {
			const ${idx} i = w * ${vec} + j;
			(void)i;
${body}
		}
${stores}
	}
}
//@ reduce
${comment}
static __global__ void __launch_bounds__(${block})
${name}(${xparams}, ${oparams})
{
	const sg_i64 o = (sg_i64)blockIdx.x * ${rows} + threadIdx.x / ${tpr};
	const int t = threadIdx.x % ${tpr};
	if (o >= ${nout})
		return;
	const sg_i64 base = ${base};
	${acc} acc = ${init};
	for (sg_i64 r = t; r < ${nred}; r += ${tpr})
		acc = ${op}()(acc, ${load});
	acc = sg_reduce<${tpr}>(acc, ${op}());
	if (t == 0)
		${put}
}
//@ reduce_cols
${comment}
/* A reduction whose outputs are the innermost elements: the 32 threads of
 * a warp take 32 neighbouring outputs (coalesced reads), the block's 8
 * warps split the reduced elements, then combine through shared memory. */
static __global__ void __launch_bounds__(256)
${name}(${xparams}, ${oparams})
{
	__shared__ ${acc} part[8][33];
	const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
	const sg_i64 o = (sg_i64)blockIdx.x * 32 + lane;
	${acc} acc = ${init};
	if (o < ${nout})
		for (sg_i64 r = w; r < ${nred}; r += 8)
			acc = ${op}()(acc, ${load});
	part[w][lane] = acc;
	__syncthreads();
	if (w != 0 || o >= ${nout})
		return;
	for (int k = 1; k < 8; k++)
		acc = ${op}()(acc, part[k][lane]);
	${put}
}
//@ reduce_cols_part
${comment}
/* Stage 1 of a column reduction with few columns: block (x, y) reduces
 * its 32 columns over the y-th of ${nsplit} slices of ${chunk} rows into
 * part[y][column] (the 8 warps split the slice, four rows at a time). */
static __global__ void __launch_bounds__(256)
${name}(${xparams}, ${acc} *__restrict__ part)
{
	__shared__ ${acc} sh[8][33];
	const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
	const sg_i64 o = (sg_i64)blockIdx.x * 32 + lane;
	const sg_i64 r0 = (sg_i64)blockIdx.y * ${chunk};
	const sg_i64 r1 = r0 + ${chunk} < ${nred} ? r0 + ${chunk} : ${nred};
	${acc} acc = ${init};
	if (o < ${nout}) {
		sg_i64 r = r0 + w;
		for (; r + 24 < r1; r += 32) {
			const ${acc} a0 = ${load0}, a1 = ${load1}, a2 = ${load2}, a3 = ${load3};
			acc = ${op}()(acc, ${op}()(${op}()(a0, a1), ${op}()(a2, a3)));
		}
		for (; r < r1; r += 8)
			acc = ${op}()(acc, ${load0});
	}
	sh[w][lane] = acc;
	__syncthreads();
	if (w != 0 || o >= ${nout})
		return;
	for (int k = 1; k < 8; k++)
		acc = ${op}()(acc, sh[k][lane]);
	part[(sg_i64)blockIdx.y * ${nout} + o] = acc;
}
//@ reduce_split_part
${comment}
/* Stage 1 of a reduction with few outputs over many elements: block
 * (x, y) takes output x's elements r = q * ${inner} + i in the y-th slice
 * of ${chunk} (consecutive threads read consecutive i; 32-bit index
 * arithmetic inside the slice) into part[y][x]:
 * ${what}. */
static __global__ void __launch_bounds__(256)
${name}(${xparams}, ${acc} *__restrict__ part)
{
	const sg_i64 o = blockIdx.x, base = ${base};
${?q}	const sg_i64 r0 = (sg_i64)blockIdx.y * ${chunk}, q0 = r0 / ${inner};
${?q}	const unsigned i0 = (unsigned)(r0 % ${inner});
${!q}	const sg_i64 r0 = (sg_i64)blockIdx.y * ${chunk};
	const int len = (int)(r0 + ${chunk} < ${nred} ? ${chunk} : ${nred} - r0);
	auto at = [&](int j) { /* the slice's element j */
${?q}		const unsigned k = i0 + (unsigned)j, i = k % ${inner};
${?q}		const sg_i64 q = q0 + k / ${inner};
${!q}		const sg_i64 i = r0 + j;
		return ${load};
	};
	${acc} acc = ${init};
	for (int j = threadIdx.x; j < len; j += 256)
		acc = ${op}()(acc, at(j));
	acc = sg_reduce<256>(acc, ${op}());
${!var}	if (threadIdx.x == 0)
${!var}		part[(sg_i64)blockIdx.y * ${nout} + o] = acc;
${?var}	const ${acc} mean = acc / (${acc})len;
${?var}	${acc} q = 0;
${?var}	for (int j = threadIdx.x; j < len; j += 256) {
${?var}		const ${acc} d = at(j) - mean;
${?var}		q += d * d;
${?var}	}
${?var}	q = sg_reduce<256>(q, sg_sum_op());
${?var}	if (threadIdx.x == 0) {
${?var}		part[2 * ((sg_i64)blockIdx.y * ${nout} + o)] = mean;
${?var}		part[2 * ((sg_i64)blockIdx.y * ${nout} + o) + 1] = q;
${?var}	}
}
//@ reduce_parts_final
/* Stage 2: each thread combines the ${nsplit} parts of one output in
 * order${how}. */
static __global__ void __launch_bounds__(256)
${name}(const ${acc} *__restrict__ part, ${oparams})
{
	const sg_i64 o = (sg_i64)blockIdx.x * 256 + threadIdx.x;
	if (o >= ${nout})
		return;
${!var}	${acc} acc = ${init};
${!var}	for (int k = 0; k < ${nsplit}; k++)
${!var}		acc = ${op}()(acc, part[(sg_i64)k * ${nout} + o]);
${?var}	${acc} n = 0, mean = 0, q = 0;
${?var}	for (int k = 0; k < ${nsplit}; k++) {
${?var}		const ${acc} nk = k + 1 < ${nsplit} ? (${acc})${chunk} : (${acc})(${nred} - (sg_i64)k * ${chunk});
${?var}		const ${acc} mk = part[2 * ((sg_i64)k * ${nout} + o)], d = mk - mean;
${?var}		q += part[2 * ((sg_i64)k * ${nout} + o) + 1] + d * d * (n * nk / (n + nk));
${?var}		mean += d * (nk / (n + nk));
${?var}		n += nk;
${?var}	}
	${put}
${?mean}	mean_out[o] = ${store_mean};
}
//@ reduce_var
${comment}
static __global__ void __launch_bounds__(${block})
${name}(${params})
{
	const sg_i64 o = (sg_i64)blockIdx.x * ${rows} + threadIdx.x / ${tpr};
	const int t = threadIdx.x % ${tpr};
	if (o >= ${nout})
		return;
	const sg_i64 base = ${base};
	${acc} s = 0;
	for (sg_i64 r = t; r < ${nred}; r += ${tpr})
		s += ${load};
	s = sg_reduce<${tpr}>(s, sg_sum_op());
	const ${acc} mean = ${smean};
	${acc} q = 0;
	for (sg_i64 r = t; r < ${nred}; r += ${tpr}) {
		const ${acc} d = ${load} - mean;
		q += d * d;
	}
	q = sg_reduce<${tpr}>(q, sg_sum_op());
	if (t == 0) {
		${put}
${?mean}		mean_out[o] = ${store_mean};
	}
}
//@ reduce_partial
${comment}
/* Stage 1 of ${what}: each block reduces a strided part into part[block]. */
static __global__ void __launch_bounds__(256)
${name}(${params})
{
	${acc} acc = ${init};
	for (sg_i64 r = (sg_i64)blockIdx.x * 256 + threadIdx.x; r < ${nred};
	     r += (sg_i64)gridDim.x * 256)
		acc = ${op}()(acc, ${load});
	acc = sg_reduce<256>(acc, ${op}());
	if (threadIdx.x == 0)
		part[blockIdx.x] = acc;
}
//@ reduce_final
/* Stage 2 of ${what}: one block reduces the ${nparts} parts. */
static __global__ void __launch_bounds__(256)
${name}(const ${acc} *__restrict__ part, ${oparams})
{
	${acc} acc = ${init};
	for (int r = threadIdx.x; r < ${nparts}; r += 256)
		acc = ${op}()(acc, part[r]);
	acc = sg_reduce<256>(acc, ${op}());
	if (threadIdx.x == 0)
		${put}
}
//@ softmax
${comment}
static __global__ void __launch_bounds__(${block})
${name}(${xparams}, ${oparams})
{
	const sg_i64 o = (sg_i64)blockIdx.x * ${rows} + threadIdx.x / ${tpr};
	const int t = threadIdx.x % ${tpr};
	if (o >= ${nout})
		return;
	const sg_i64 base = ${base};
	${acc} m = -${inf};
	for (sg_i64 r = t; r < ${len}; r += ${tpr})
		m = sg_max_op()(m, ${load});
	m = sg_reduce<${tpr}>(m, sg_max_op());
	${acc} s = 0;
	for (sg_i64 r = t; r < ${len}; r += ${tpr})
		s += sg_exp(${load} - m);
	s = sg_reduce<${tpr}>(s, sg_sum_op());
	const ${acc} ls = sg_log(s);
	for (sg_i64 r = t; r < ${len}; r += ${tpr}) {
		const ${acc} v = ${load} - m;
		${put}
	}
	(void)ls;
}
//@ norm
${comment}
static __global__ void __launch_bounds__(${block})
${name}(${params})
{
	const sg_i64 o = (sg_i64)blockIdx.x * ${rows} + threadIdx.x / ${tpr};
	const int t = threadIdx.x % ${tpr};
	if (o >= ${nout})
		return;
	const sg_i64 base = o * ${len};
	${acc} mean = 0;
${?layer}	for (sg_i64 r = t; r < ${len}; r += ${tpr})
${?layer}		mean += ${load};
${?layer}	mean = sg_reduce<${tpr}>(mean, sg_sum_op()) / (${acc})${len};
	${acc} q = 0;
	for (sg_i64 r = t; r < ${len}; r += ${tpr}) {
		const ${acc} d = ${load} - mean;
		q += d * d;
	}
	q = sg_reduce<${tpr}>(q, sg_sum_op());
	const ${acc} rstd = (${acc})1 / sg_sqrt(q / (${acc})${len} + ${eps});
	for (sg_i64 r = t; r < ${len}; r += ${tpr}) {
		${acc} v = (${load} - mean) * rstd;
${?w}		v *= ${opc}(sg_ld(w[r]));
${?b}		v += ${opc}(sg_ld(b[r]));
		${put}
	}
}
//@ ce_rows
${comment}
/* Stage 1 of cross_entropy: per row, the loss (part[o]) and whether it
 * counts (part[${nout} + o]; target -100 is ignored). */
static __global__ void __launch_bounds__(${block})
${name}(const ${t} *__restrict__ x, const ${tt} *__restrict__ target, ${acc} *__restrict__ part)
{
	const sg_i64 o = (sg_i64)blockIdx.x * ${rows} + threadIdx.x / ${tpr};
	const int t = threadIdx.x % ${tpr};
	if (o >= ${nout})
		return;
	const sg_i64 k = sg_ld(target[o]);
	if (k == -100) {
		if (t == 0)
			part[o] = part[${nout} + o] = 0;
		return;
	}
	SG_CHECK(k >= 0 && k < ${len}, "${file}", ${line}, "cross_entropy: target out of range");
	const sg_i64 base = ${base};
	${acc} m = -${inf};
	for (sg_i64 r = t; r < ${len}; r += ${tpr})
		m = sg_max_op()(m, ${load});
	m = sg_reduce<${tpr}>(m, sg_max_op());
	${acc} s = 0;
	for (sg_i64 r = t; r < ${len}; r += ${tpr})
		s += sg_exp(${load} - m);
	s = sg_reduce<${tpr}>(s, sg_sum_op());
	if (t == 0) {
		const sg_i64 r = k;
		part[o] = m + sg_log(s) - ${load};
		part[${nout} + o] = 1;
	}
}
//@ ce_mean
/* Stage 2 of cross_entropy: the mean over the rows that count. */
static __global__ void __launch_bounds__(256)
${name}(const ${acc} *__restrict__ part, ${oparams})
{
	${acc} s = 0, c = 0;
	for (sg_i64 r = threadIdx.x; r < ${nout}; r += 256) {
		s += part[r];
		c += part[${nout} + r];
	}
	s = sg_reduce<256>(s, sg_sum_op());
	c = sg_reduce<256>(c, sg_sum_op());
	if (threadIdx.x == 0)
		${put}
}
//@ ce_lse_loss
${comment}
/* cross_entropy, after the row logsumexps of the kernel library
 * (sg_launch_cross_entropy_lse): in one block, the count of targets that
 * are not -100 into lse[${nout}] (the library's backward reads it) and
 * the mean of lse - x[target] over them. */
static __global__ void __launch_bounds__(256)
${name}(const ${t} *__restrict__ x, const sg_i64 *__restrict__ target,
        float *__restrict__ lse${oparams})
{
${?loss}	float s = 0;
	float c = 0;
	for (sg_i64 o = threadIdx.x; o < ${nout}; o += 256) {
		const sg_i64 k = target[o];
		if (k == -100)
			continue;
		SG_CHECK(k >= 0 && k < ${len}, "${file}", ${line}, "${what}: target out of range");
${?loss}		s += lse[o] - sg_opf(sg_ld(x[o * ${len} + k]));
		c += 1;
	}
${?loss}	s = sg_reduce<256>(s, sg_sum_op());
	c = sg_reduce<256>(c, sg_sum_op());
	if (threadIdx.x == 0) {
		lse[${nout}] = c;
${?loss}		${put}
	}
	(void)x;
}
//@ sdpa
${comment}
/* One block per query row: scores for a tile of ${tile} keys (a warp per
 * key), an online softmax across tiles, and the output row; no L x S
 * matrix is ever stored. */
static __global__ void __launch_bounds__(128)
${name}(const ${t} *__restrict__ q, const ${t} *__restrict__ k,
        const ${t} *__restrict__ v,${mparam}${dparam} ${t} *__restrict__ out)
{
	extern __shared__ double sg_smem[];
	${acc} *qs = (${acc} *)sg_smem;   /* [${e}] the query row */
	${acc} *ps = qs + ${e};           /* [${tile}] scores, then weights */
	${acc} *acc = ps + ${tile};       /* [${ev}] the output row so far */
	const sg_i64 i = blockIdx.x % ${l}, b = blockIdx.x / ${l};
	const sg_i64 qoff = ${qbase} + i * ${e}, koff = ${kbase}, voff = ${vbase};
	const sg_i64 ooff = (b * ${l} + i) * ${ev};
//@ sdpa_row
${?mask}	const sg_i64 moff = ${mbase};
${?drop}	const SgkDraws dr = sgk_draws_init(rng, ${salt});
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	for (int e = threadIdx.x; e < ${e}; e += 128)
		qs[e] = ${opc}(sg_ld(q[qoff + e]));
	for (int e = threadIdx.x; e < ${ev}; e += 128)
		acc[e] = 0;
	__syncthreads();
	${acc} m = -${inf}, l = 0;
	const sg_i64 nk = ${causal} ? (i + 1 < ${s} ? i + 1 : ${s}) : ${s};
	for (sg_i64 j0 = 0; j0 < nk; j0 += ${tile}) {
		const int nt = (int)(nk - j0 < ${tile} ? nk - j0 : ${tile});
		for (int jj = warp; jj < nt; jj += 4) {
			const ${t} *kr = k + koff + (j0 + jj) * ${e};
			${acc} d = 0;
			for (int e = lane; e < ${e}; e += 32)
				d += qs[e] * ${opc}(sg_ld(kr[e]));
			d = sg_reduce<32>(d, sg_sum_op());
${?mask}			const sg_i64 jk = j0 + jj;
			if (lane == 0)
				ps[jj] = d * ${scale}${bias};
		}
		__syncthreads();
		${acc} tm = m;
		for (int jj = 0; jj < nt; jj++)
			tm = sg_max_op()(tm, ps[jj]);
${!mask}		const ${acc} corr = sg_exp(m - tm);
${?mask}		const ${acc} corr = tm == -${inf} ? (${acc})1 : sg_exp(m - tm);
		__syncthreads();
		for (int jj = threadIdx.x; jj < nt; jj += 128)
${!mask}			ps[jj] = sg_exp(ps[jj] - tm);
${?mask}			ps[jj] = tm == -${inf} ? (${acc})0 : sg_exp(ps[jj] - tm);
		__syncthreads();
		${acc} ts = 0;
		for (int jj = 0; jj < nt; jj++)
			ts += ps[jj];
		l = l * corr + ts;
${?drop}		__syncthreads(); /* every thread has its sum: the weights' dropout */
${?drop}		for (int jj = threadIdx.x; jj < nt; jj += 128)
${?drop}			ps[jj] *= sgk_keep(dr, (b * ${l} + i) * ${s} + j0 + jj, ${thresh}) ? ${dscale} : (${acc})0;
${?drop}		__syncthreads();
		for (int e = threadIdx.x; e < ${ev}; e += 128) {
			${acc} a = acc[e] * corr;
			for (int jj = 0; jj < nt; jj++)
				a += ps[jj] * ${opc}(sg_ld(v[voff + (j0 + jj) * ${ev} + e]));
			acc[e] = a;
		}
		m = tm;
		__syncthreads();
	}
//@ sdpa_out
	for (int e = threadIdx.x; e < ${ev}; e += 128)
		out[ooff + e] = ${store};
}
//@ embedding
${comment}
static __global__ void __launch_bounds__(256)
${name}(const ${ti} *__restrict__ idx, const ${t} *__restrict__ table, ${t} *__restrict__ out)
{
	for (sg_i64 i = (sg_i64)blockIdx.x * blockDim.x + threadIdx.x; i < ${n};
	     i += (sg_i64)gridDim.x * blockDim.x) {
		const sg_i64 row = i / ${width}, col = i % ${width};
		const sg_i64 k = sg_ld(idx[row]);
		SG_CHECK(k >= 0 && k < ${rows}, "${file}", ${line}, "embedding: index out of range");
		out[i] = table[k * ${width} + col];
	}
}
//@ gather
${comment}
static __global__ void __launch_bounds__(256)
${name}(const ${t} *__restrict__ x, const ${ti} *__restrict__ idx, ${t} *__restrict__ out)
{
	for (sg_i64 i = (sg_i64)blockIdx.x * blockDim.x + threadIdx.x; i < ${n};
	     i += (sg_i64)gridDim.x * blockDim.x) {
		const sg_i64 k = sg_ld(idx[i]);
		SG_CHECK(k >= 0 && k < ${size}, "${file}", ${line}, "gather: index out of range");
		out[i] = x[${xoff} + k * ${dstride}];
	}
}
//@ copy
${comment}
static __global__ void __launch_bounds__(256)
${name}(const ${tin} *__restrict__ x, ${tout} *__restrict__ out)
{
	for (${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x; i < ${n};
	     i += (${idx})gridDim.x * blockDim.x)
		out[${dst}] = ${value};
}
//@ fill
${comment}
static __global__ void __launch_bounds__(256)
${name}(${t} *__restrict__ out)
{
	for (${idx} i = (${idx})blockIdx.x * blockDim.x + threadIdx.x; i < ${n};
	     i += (${idx})gridDim.x * blockDim.x)
		out[i] = ${value};
}
//@ norm_backward
${comment}
/* dx of ${what} over the last dim: with xh the normalised x and
 * gh = g * w, rstd * (gh - mean(gh) - xh * mean(gh * xh)) (rms_norm: no
 * mean(gh) term, no centring). */
static __global__ void __launch_bounds__(${block})
${name}(${params})
{
	const sg_i64 o = (sg_i64)blockIdx.x * ${rows} + threadIdx.x / ${tpr};
	const int t = threadIdx.x % ${tpr};
	if (o >= ${nout})
		return;
	const sg_i64 base = o * ${len};
	${acc} mean = 0;
${?layer}	for (sg_i64 r = t; r < ${len}; r += ${tpr})
${?layer}		mean += ${opc}(sg_ld(x[base + r]));
${?layer}	mean = sg_reduce<${tpr}>(mean, sg_sum_op()) / (${acc})${len};
	${acc} q = 0;
	for (sg_i64 r = t; r < ${len}; r += ${tpr}) {
		const ${acc} d = ${opc}(sg_ld(x[base + r])) - mean;
		q += d * d;
	}
	q = sg_reduce<${tpr}>(q, sg_sum_op());
	const ${acc} rstd = (${acc})1 / sg_sqrt(q / (${acc})${len} + ${eps});
	${acc} mg = 0, mgx = 0;
	for (sg_i64 r = t; r < ${len}; r += ${tpr}) {
		const ${acc} xh = (${opc}(sg_ld(x[base + r])) - mean) * rstd;
		const ${acc} gh = ${opc}(sg_ld(g[base + r]))${wmul};
		mg += gh;
		mgx += gh * xh;
	}
	mg = sg_reduce<${tpr}>(mg, sg_sum_op()) / (${acc})${len};
	mgx = sg_reduce<${tpr}>(mgx, sg_sum_op()) / (${acc})${len};
${!layer}	mg = 0;
	for (sg_i64 r = t; r < ${len}; r += ${tpr}) {
		const ${acc} xh = (${opc}(sg_ld(x[base + r])) - mean) * rstd;
		const ${acc} gh = ${opc}(sg_ld(g[base + r]))${wmul};
		out[base + r] = ${store};
	}
}
//@ sdpa_bwd_stats
${comment}
/* Attention backward, stage 1, one block per query row: the softmax's
 * max m and sum l of the row, and D = g . o (o the forward's output row),
 * into stats[3 * row]. */
static __global__ void __launch_bounds__(128)
${name}(const ${t} *__restrict__ q, const ${t} *__restrict__ k,
        const ${t} *__restrict__ v, const ${t} *__restrict__ g,${mparam}${dparam} ${acc} *__restrict__ stats)
{
	extern __shared__ double sg_smem[];
	${acc} *qs = (${acc} *)sg_smem;   /* [${e}] */
	${acc} *ps = qs + ${e};           /* [${tile}] */
	${acc} *acc = ps + ${tile};       /* [${ev}] */
	const sg_i64 i = blockIdx.x % ${l}, b = blockIdx.x / ${l};
	const sg_i64 qoff = ${qbase} + i * ${e}, koff = ${kbase}, voff = ${vbase};
	const sg_i64 goff = (b * ${l} + i) * ${ev};
//@ sdpa_bwd_stats_out
	${acc} dot = 0;
	for (int e = threadIdx.x; e < ${ev}; e += 128)
${!mask}		dot += ${opc}(sg_ld(g[goff + e])) * (acc[e] / l);
${?mask}		dot += l == 0 ? 0 : ${opc}(sg_ld(g[goff + e])) * (acc[e] / l);
	dot = sg_reduce<128>(dot, sg_sum_op());
	if (threadIdx.x == 0) {
		stats[3 * blockIdx.x] = m;
		stats[3 * blockIdx.x + 1] = l;
		stats[3 * blockIdx.x + 2] = dot;
	}
}
//@ sdpa_bwd_dq
/* Attention backward, stage 2, one block per query row i:
 * dq_i = sum_j p_ij (g_i . v_j - D_i) * scale * k_j. */
static __global__ void __launch_bounds__(128)
${name}(const ${t} *__restrict__ q, const ${t} *__restrict__ k,
        const ${t} *__restrict__ v, const ${t} *__restrict__ g,
       ${mparam}${dparam} const ${acc} *__restrict__ stats, ${t} *__restrict__ dq)
{
	extern __shared__ double sg_smem[];
	${acc} *qs = (${acc} *)sg_smem;   /* [${e}] */
	${acc} *gs = qs + ${e};           /* [${ev}] */
	${acc} *ds = gs + ${ev};          /* [${tile}] */
	${acc} *acc = ds + ${tile};       /* [${e}] */
	const sg_i64 i = blockIdx.x % ${l}, b = blockIdx.x / ${l};
	const sg_i64 qoff = ${qbase} + i * ${e}, koff = ${kbase}, voff = ${vbase};
	const sg_i64 goff = (b * ${l} + i) * ${ev};
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const ${acc} m = stats[3 * blockIdx.x], l = stats[3 * blockIdx.x + 1];
	const ${acc} dd = stats[3 * blockIdx.x + 2];
${?mask}	const sg_i64 moff = ${mbase};
${?drop}	const SgkDraws dr = sgk_draws_init(rng, ${salt});
	for (int e = threadIdx.x; e < ${e}; e += 128) {
		qs[e] = ${opc}(sg_ld(q[qoff + e]));
		acc[e] = 0;
	}
	for (int e = threadIdx.x; e < ${ev}; e += 128)
		gs[e] = ${opc}(sg_ld(g[goff + e]));
	__syncthreads();
	const sg_i64 nk = ${causal} ? (i + 1 < ${s} ? i + 1 : ${s}) : ${s};
	for (sg_i64 j0 = 0; j0 < nk; j0 += ${tile}) {
		const int nt = (int)(nk - j0 < ${tile} ? nk - j0 : ${tile});
		for (int jj = warp; jj < nt; jj += 4) {
			const ${t} *kr = k + koff + (j0 + jj) * ${e};
			const ${t} *vr = v + voff + (j0 + jj) * ${ev};
			${acc} s = 0, dp = 0;
			for (int e = lane; e < ${e}; e += 32)
				s += qs[e] * ${opc}(sg_ld(kr[e]));
			for (int e = lane; e < ${ev}; e += 32)
				dp += gs[e] * ${opc}(sg_ld(vr[e]));
			s = sg_reduce<32>(s, sg_sum_op());
			dp = sg_reduce<32>(dp, sg_sum_op());
${?mask}			const sg_i64 jk = j0 + jj;
			if (lane == 0) {
${!mask}				const ${acc} p = sg_exp(s * ${scale} - m) / l;
${?mask}				const ${acc} p = l == 0 ? 0 : sg_exp(s * ${scale}${bias} - m) / l;
${?drop}				dp *= sgk_keep(dr, (b * ${l} + i) * ${s} + j0 + jj, ${thresh}) ? ${dscale} : (${acc})0;
				ds[jj] = p * (dp - dd) * ${scale};
			}
		}
		__syncthreads();
		for (int e = threadIdx.x; e < ${e}; e += 128) {
			${acc} a = acc[e];
			for (int jj = 0; jj < nt; jj++)
				a += ds[jj] * ${opc}(sg_ld(k[koff + (j0 + jj) * ${e} + e]));
			acc[e] = a;
		}
		__syncthreads();
	}
	for (int e = threadIdx.x; e < ${e}; e += 128)
		dq[(b * ${l} + i) * ${e} + e] = ${store_dq};
}
//@ sdpa_bwd_dkdv
/* Attention backward, stage 3, one block per key row j (per batch item):
 * dv_j = sum_i p_ij g_i, dk_j = sum_i p_ij (g_i . v_j - D_i) * scale * q_i. */
static __global__ void __launch_bounds__(128)
${name}(const ${t} *__restrict__ q, const ${t} *__restrict__ k,
        const ${t} *__restrict__ v, const ${t} *__restrict__ g,
       ${mparam}${dparam} const ${acc} *__restrict__ stats, ${t} *__restrict__ dk, ${t} *__restrict__ dv)
{
	extern __shared__ double sg_smem[];
	${acc} *ks = (${acc} *)sg_smem;   /* [${e}] */
	${acc} *vs = ks + ${e};           /* [${ev}] */
	${acc} *ps = vs + ${ev};          /* [${tile}] */
	${acc} *ds = ps + ${tile};        /* [${tile}] */
	${acc} *dka = ds + ${tile};       /* [${e}] */
	${acc} *dva = dka + ${e};         /* [${ev}] */
${!group}	const sg_i64 j = blockIdx.x % ${s}, b = blockIdx.x / ${s};
${!group}	const sg_i64 qoff = ${qbase}, koff = ${kbase} + j * ${e}, voff = ${vbase} + j * ${ev};
${!group}	const sg_i64 goff = b * ${l} * ${ev};
${?group}	/* Each key and value head serves ${group} query heads: their sum. */
${?group}	const sg_i64 j = blockIdx.x % ${s}, bk = blockIdx.x / ${s}, b0 = bk * ${group};
${?group}	const sg_i64 koff = ${kbase0} + j * ${e}, voff = ${vbase0} + j * ${ev};
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	for (int e = threadIdx.x; e < ${e}; e += 128) {
		ks[e] = ${opc}(sg_ld(k[koff + e]));
		dka[e] = 0;
	}
	for (int e = threadIdx.x; e < ${ev}; e += 128) {
		vs[e] = ${opc}(sg_ld(v[voff + e]));
		dva[e] = 0;
	}
	__syncthreads();
	const sg_i64 i0 = ${causal} ? j : 0;
${?drop}	const SgkDraws dr = sgk_draws_init(rng, ${salt});
${?group}	for (sg_i64 b = b0; b < b0 + ${group}; b++) {
${?group}	const sg_i64 qoff = ${qbase}, goff = b * ${l} * ${ev};
${?mask}	const sg_i64 moff = ${mbase};
	for (sg_i64 c0 = i0; c0 < ${l}; c0 += ${tile}) {
		const int nt = (int)(${l} - c0 < ${tile} ? ${l} - c0 : ${tile});
		for (int ii = warp; ii < nt; ii += 4) {
			const sg_i64 i = c0 + ii;
			const ${t} *qr = q + qoff + i * ${e};
			const ${t} *gr = g + goff + i * ${ev};
			${acc} s = 0, dp = 0;
			for (int e = lane; e < ${e}; e += 32)
				s += ks[e] * ${opc}(sg_ld(qr[e]));
			for (int e = lane; e < ${ev}; e += 32)
				dp += vs[e] * ${opc}(sg_ld(gr[e]));
			s = sg_reduce<32>(s, sg_sum_op());
			dp = sg_reduce<32>(dp, sg_sum_op());
${?mask}			const sg_i64 jk = j;
			if (lane == 0) {
				const ${acc} *st = stats + 3 * (b * ${l} + i);
${!mask}				const ${acc} p = sg_exp(s * ${scale} - st[0]) / st[1];
${?mask}				const ${acc} p = st[1] == 0 ? 0 : sg_exp(s * ${scale}${bias} - st[0]) / st[1];
${!drop}				ps[ii] = p;
${?drop}				const ${acc} z = sgk_keep(dr, (b * ${l} + i) * ${s} + j, ${thresh}) ? ${dscale} : (${acc})0;
${?drop}				ps[ii] = p * z;
${?drop}				dp *= z;
				ds[ii] = p * (dp - st[2]) * ${scale};
			}
		}
		__syncthreads();
		for (int e = threadIdx.x; e < ${e}; e += 128) {
			${acc} a = dka[e];
			for (int ii = 0; ii < nt; ii++)
				a += ds[ii] * ${opc}(sg_ld(q[qoff + (c0 + ii) * ${e} + e]));
			dka[e] = a;
		}
		for (int e = threadIdx.x; e < ${ev}; e += 128) {
			${acc} a = dva[e];
			for (int ii = 0; ii < nt; ii++)
				a += ps[ii] * ${opc}(sg_ld(g[goff + (c0 + ii) * ${ev} + e]));
			dva[e] = a;
		}
		__syncthreads();
	}
${?group}	}
	for (int e = threadIdx.x; e < ${e}; e += 128)
		dk[(${kvb} * ${s} + j) * ${e} + e] = ${store_dk};
	for (int e = threadIdx.x; e < ${ev}; e += 128)
		dv[(${kvb} * ${s} + j) * ${ev} + e] = ${store_dv};
}
//@ scatter_add
${comment}
/* acc[${dst}] += g[i], with the index checked (embedding_backward,
 * gather_backward); float atomics, so the order of the sums varies. */
static __global__ void __launch_bounds__(256)
${name}(const ${t} *__restrict__ g, const ${ti} *__restrict__ idx, ${acc} *__restrict__ acc)
{
	for (sg_i64 i = (sg_i64)blockIdx.x * blockDim.x + threadIdx.x; i < ${n};
	     i += (sg_i64)gridDim.x * blockDim.x) {
		const sg_i64 k = sg_ld(idx[${iidx}]);
		SG_CHECK(k >= 0 && k < ${size}, "${file}", ${line}, "${what}: index out of range");
		atomicAdd(&acc[${dst}], (${acc})sg_ld(g[i]));
	}
}
//@ ce_bwd_count
${comment}
/* cross_entropy backward, stage 1: w = g / (targets that are not -100). */
static __global__ void __launch_bounds__(256)
${name}(const ${t} *__restrict__ g, const ${tt} *__restrict__ target, ${acc} *__restrict__ w)
{
	${acc} c = 0;
	for (sg_i64 r = threadIdx.x; r < ${nout}; r += 256)
		c += sg_ld(target[r]) != -100;
	c = sg_reduce<256>(c, sg_sum_op());
	if (threadIdx.x == 0)
		w[0] = ${opc}(sg_ld(g[0])) / c;
}
//@ ce_bwd_rows
/* cross_entropy backward, stage 2, per row: w * (softmax - onehot(target)),
 * 0 for a target of -100. */
static __global__ void __launch_bounds__(${block})
${name}(const ${t} *__restrict__ x, const ${tt} *__restrict__ target,
        const ${acc} *__restrict__ wp, ${t} *__restrict__ out)
{
	const sg_i64 o = (sg_i64)blockIdx.x * ${rows} + threadIdx.x / ${tpr};
	const int t = threadIdx.x % ${tpr};
	if (o >= ${nout})
		return;
	const sg_i64 k = sg_ld(target[o]), base = ${base};
	SG_CHECK(k == -100 || (k >= 0 && k < ${len}), "${file}", ${line},
	         "cross_entropy_backward: target out of range");
	const ${acc} w = wp[0];
	${acc} m = -${inf};
	for (sg_i64 r = t; r < ${len}; r += ${tpr})
		m = sg_max_op()(m, ${load});
	m = sg_reduce<${tpr}>(m, sg_max_op());
	${acc} s = 0;
	for (sg_i64 r = t; r < ${len}; r += ${tpr})
		s += sg_exp(${load} - m);
	s = sg_reduce<${tpr}>(s, sg_sum_op());
	for (sg_i64 r = t; r < ${len}; r += ${tpr}) {
		const ${acc} v = k == -100 ? (${acc})0 : w * (sg_exp(${load} - m) / s - (${acc})(r == k));
		out[base + ${roff}] = ${store};
	}
}
//@ sgd
${comment}
/* torch.optim.SGD's update of one element, op by op in ${c} (each op
 * rounded to ${dt} as PyTorch's are). */
static __device__ __forceinline__ void
${name}_one(${t} &p, const ${t} g${bufref})
{
	const ${c} pi = sg_ld(p);
	${c} d = sg_ld(g);
${?wd}	d = sg_to_${dt}(d + ${w} * pi);
${?mom}	d = sg_to_${dt}(sg_to_${dt}(sg_ld(b) * ${m}) + d);
${?mom}	b = sg_st_${dt}(d);
	p = sg_st_${dt}(sg_to_${dt}(sgk_sgd_step_${fd}(pi, ${lr}, d)));
}
/* ${vec} elements a thread through 16-byte loads and stores when every
 * pointer is aligned; element by element otherwise and for the tail. */
static __global__ void __launch_bounds__(256)
${name}(${t} *__restrict__ p, const ${t} *__restrict__ g${bufparam}, const ${idx} n)
{
	typedef sg_vec<${t}, ${vec}> V;
	const ${idx} nv = ((sg_u64)p | (sg_u64)g${bufor}) % 16 == 0 ? n / ${vec} : 0;
	const ${idx} stride = (${idx})gridDim.x * blockDim.x;
	for (${idx} w = (${idx})blockIdx.x * blockDim.x + threadIdx.x; w < nv; w += stride) {
		V pv = *(const V *)(p + w * ${vec});
		const V gv = *(const V *)(g + w * ${vec});
${?mom}		V bv = *(const V *)(buf + w * ${vec});
#pragma unroll
		for (int j = 0; j < ${vec}; j++)
${?mom}			${name}_one(pv.v[j], gv.v[j], bv.v[j]);
${!mom}			${name}_one(pv.v[j], gv.v[j]);
		*(V *)(p + w * ${vec}) = pv;
${?mom}		*(V *)(buf + w * ${vec}) = bv;
	}
	for (${idx} i = nv * ${vec} + (${idx})blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		${name}_one(p[i], g[i]${bufarg});
}
//@ adamw_step
/* AdamW's step count (f32, as PyTorch keeps it) and the step's bias
 * corrections: sc[0] = -lr / (1 - beta1^step), sc[1] = sqrt(1 - beta2^step). */
static __global__ void
${name}(float *__restrict__ step, ${c} *__restrict__ sc)
{
	const float st = (float)((double)step[0] + 1);
	step[0] = st;
	sc[0] = (${c})(-(${lr} / (1 - pow(${b1}, (double)st))));
	sc[1] = (${c})sqrt(1 - pow(${b2}, (double)st));
}
//@ adamw
${comment}
/* torch.optim.AdamW's update of one element, op by op in ${c}. */
static __device__ __forceinline__ void
${name}_one(${t} &p, const ${t} g, ${t} &m, ${t} &v, const ${c} size, const ${c} bc2)
{
	const ${c} pi = sg_to_${dt}(sg_ld(p) * ${decay});
	const ${c} gi = sg_ld(g);
	const ${c} mi = sg_to_${dt}(sg_lerp(sg_ld(m), gi, ${w1}));
	/* addcmul_ and addcdiv_ are one op each, rounded once */
	const ${c} vi = sg_to_${dt}(sg_to_${dt}(sg_ld(v) * ${bb2}) + ${c2} * (gi * gi));
	const ${c} den = sg_to_${dt}(sg_to_${dt}(sg_to_${dt}(sg_sqrt(vi)) / bc2) + ${eps});
	m = sg_st_${dt}(mi);
	v = sg_st_${dt}(vi);
	p = sg_st_${dt}(sg_to_${dt}(pi + size * (mi / den)));
}
/* ${vec} elements a thread through 16-byte loads and stores when every
 * pointer is aligned; element by element otherwise and for the tail. */
static __global__ void __launch_bounds__(256)
${name}(${t} *__restrict__ p, const ${t} *__restrict__ g, ${t} *__restrict__ m,
        ${t} *__restrict__ v, const ${c} *__restrict__ sc, const ${idx} n)
{
	typedef sg_vec<${t}, ${vec}> V;
	const ${c} size = sc[0], bc2 = sc[1];
	const ${idx} nv = ((sg_u64)p | (sg_u64)g | (sg_u64)m | (sg_u64)v) % 16 == 0 ? n / ${vec} : 0;
	const ${idx} stride = (${idx})gridDim.x * blockDim.x;
	for (${idx} w = (${idx})blockIdx.x * blockDim.x + threadIdx.x; w < nv; w += stride) {
		V pv = *(const V *)(p + w * ${vec}), mv = *(const V *)(m + w * ${vec});
		V vv = *(const V *)(v + w * ${vec});
		const V gv = *(const V *)(g + w * ${vec});
#pragma unroll
		for (int j = 0; j < ${vec}; j++)
			${name}_one(pv.v[j], gv.v[j], mv.v[j], vv.v[j], size, bc2);
		*(V *)(p + w * ${vec}) = pv;
		*(V *)(m + w * ${vec}) = mv;
		*(V *)(v + w * ${vec}) = vv;
	}
	for (${idx} i = nv * ${vec} + (${idx})blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		${name}_one(p[i], g[i], m[i], v[i], size, bc2);
}
//@ ep_fn
${comment}
/* The pointwise ops after %${what}, computed where its kernel stores
 * element i (a consumer fused into a reduction or row kernel at -O2). */
static __device__ __forceinline__ __attribute__((unused)) void
${name}(${params}, sg_i64 i, const ${rtype} ${reg})
{
${body}
}
//@ elem_fn
${comment}
/* The element i of %${what}, computed where the kernel after it reads it
 * (a pointwise producer fused into its consumer at -O2). */
static __device__ __forceinline__ __attribute__((unused)) ${rtype}
${name}(${params}, sg_i64 i)
{
${body}
	return ${ret};
}
//@ gemm_epi
${comment}
/* The pointwise ops after a small product, computed where the library's
 * sgk_gemm_small (sgk/sgk_gemm.cuh) has the product's element (row, col),
 * given as ${reg} (a consumer fused into the product at -O2). */
struct ${name} {
${members}
	__device__ __forceinline__ void operator()(const float ${reg}, sg_i64 row, sg_i64 col) const
	{
		const sg_i64 i = row * ${ncols} + col;
${body}
	}
};
