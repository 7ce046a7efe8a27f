// Microbenchmark (bench/kernels/README.md): the layer norm backward (fused, stats recomputed, with add)
// at the transformer's shape under several row configurations; since 2026-12-03 13:00 also at more
// blocks an SM (launch bounds), with and without the next row's loads ahead, the library's launcher,
// and the forward with the residual add in four configurations; since 2026-12-03 16:43 rows staged
// through shared memory by cp.async (sgk_norm_bwd_staged).
#include <cstdio>
#include <vector>
#include <cmath>
#include "sgk_rows.cuh"
typedef __nv_bfloat16 T;
typedef float A;
static const long long R = 16384; static const int C = 2048;

// Microseconds a call of once() takes on s: one call first, then iters timed.
template <class F>
float time_us(F once, int iters, cudaStream_t s)
{
	cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
	once(); cudaStreamSynchronize(s);
	cudaEventRecord(a, s);
	for (int i = 0; i < iters; i++) once();
	cudaEventRecord(b, s); cudaEventSynchronize(b);
	float ms; cudaEventElapsedTime(&ms, a, b);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess) printf("error %s\n", cudaGetErrorString(e));
	return ms / iters * 1000.0f;
}

// Times backward kernel k (configuration <VEC, TPR, NV>, ST stages when
// staged) with Pn row groups (rounded to whole blocks), then the groups'
// column sums.
template <int VEC, int TPR, int NV, int ST = 0, class K>
float time_bwd(K *k, long long Pn, const T *dy, const T *x, const T *w, const T *add, T *dx,
               T *dw, T *db, A *work, int iters, cudaStream_t s, const A *mean, const A *rstd)
{
	const int gpb = SGK_ROW_THREADS(TPR) / TPR;
	const long long P = (Pn + gpb - 1) / gpb * gpb;
	const int smem = sgk_norm_smem_bytes<A, VEC, TPR, NV, ST>();
	// (always: the static shared memory counts against the 48 KB default too)
	cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
	return time_us([&]() {
		k<<<(unsigned)(P / gpb), SGK_ROW_THREADS(TPR), smem, s>>>(dy, x, w, add, mean, rstd, dx, work, R, C, 1e-5f);
		sgk_norm_parts_sum_k<T><<<dim3((C + 31) / 32, 2), dim3(32, 16), 0, s>>>(work, (int)P, C, dw, db);
	}, iters, s);
}

// The library's kernel in configuration <VEC, TPR, NV> with loads ahead, at
// Pmul times the library's row groups.
template <int VEC, int TPR, int NV>
float run(const T *dy, const T *x, const T *w, const T *add, T *dx, T *dw, T *db, A *work, long long Pmul, int iters, cudaStream_t s, const A *mean = nullptr, const A *rstd = nullptr)
{
	return time_bwd<VEC, TPR, NV>(sgk_norm_bwd_k<T, VEC, TPR, NV, false, true>,
	                              sgk_norm_bwd_parts(R, TPR, true) * Pmul, dy, x, w, add, dx, dw, db,
	                              work, iters, s, mean, rstd);
}

// ---- 2026-12-03 afternoon: occupancy and loads ahead ------------------------

// The library's backward of rows in registers (sgk_norm_bwd_regs: since
// 2026-12-03 the variance and the two row sums in one reduction) at MINB
// blocks an SM (registers 65536 / (MINB * threads)), with the next row's
// loads ahead (PF) or not.  Commit 1934c39 of this file also timed the walk
// before that change (two reductions after the mean: `lb` rows); commit
// 54a54ba also a pair walk (two rows at once, each block sum serving both:
// 108.7 us at 3 blocks an SM against the library's 119.8, not adopted).
// Since 2026-12-03 16:43 also the staged walk (ST > 0: sgk_norm_bwd_staged,
// x, dy and add copied by cp.async into ST stages, the column sums in
// registers).
template <int VEC, int TPR, int NV, int MINB, bool PF, int ST = 0>
__global__ void __launch_bounds__(SGK_ROW_THREADS(TPR), MINB)
bwd_lb(const T *__restrict__ dy, const T *__restrict__ x, const T *__restrict__ w,
       const T *__restrict__ add, const A *__restrict__ mean, const A *__restrict__ rstd,
       T *__restrict__ dx, A *__restrict__ part, long long rows, int C, float eps)
{
	const int G = SGK_ROW_THREADS(TPR) / TPR, t = threadIdx.x % TPR;
	const long long P = (long long)gridDim.x * G, p = (long long)blockIdx.x * G + threadIdx.x / TPR;
	if constexpr (ST > 0)
		sgk_norm_bwd_staged<VEC, TPR, NV, ST, false>(dy, x, w, add, mean, rstd, dx, part, rows,
		                                             C, eps, P, p, t);
	else
		sgk_norm_bwd_regs<VEC, TPR, NV, false, PF>(dy, x, w, add, mean, rstd, dx, part, rows, C,
		                                           eps, P, p, t);
}

// Times bwd_lb with Pn row groups.
template <int VEC, int TPR, int NV, int MINB, bool PF, int ST = 0>
float run_lb(const T *dy, const T *x, const T *w, const T *add, T *dx, T *dw, T *db, A *work,
             long long Pn, int iters, cudaStream_t s, const A *mean = nullptr,
             const A *rstd = nullptr)
{
	return time_bwd<VEC, TPR, NV, ST>(bwd_lb<VEC, TPR, NV, MINB, PF, ST>, Pn, dy, x, w, add, dx,
	                                  dw, db, work, iters, s, mean, rstd);
}

// Times the forward with the residual add in configuration <8, TPR, NV>.
template <int TPR, int NV>
float run_fwd(const T *x, const T *res, T *sum, const T *w, const T *b, T *y, A *mean, A *rstd,
              int iters, cudaStream_t s)
{
	const dim3 g = sgk_row_grid(R, TPR);
	return time_us([&]() {
		sgk_norm_fwd_k<T, 8, TPR, NV, false><<<g, SGK_ROW_THREADS(TPR), 0, s>>>(x, res, sum, w, b, y, mean, rstd, R, C, 1e-5f);
	}, iters, s);
}

int main()
{
	size_t n = (size_t)R * C;
	std::vector<T> h(n);
	T *dy, *x, *w, *add, *dx, *dw, *db; A *work;
	cudaMalloc(&dy, n * 2); cudaMalloc(&x, n * 2); cudaMalloc(&add, n * 2); cudaMalloc(&dx, n * 2);
	cudaMalloc(&w, C * 2); cudaMalloc(&dw, C * 2); cudaMalloc(&db, C * 2);
	cudaMalloc(&work, (size_t)2 * 65536 * C * 4);
	unsigned s = 1;
	for (size_t i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; h[i] = __float2bfloat16(((s >> 8) & 0xffff) / 32768.0f - 1.0f); }
	cudaMemcpy(x, h.data(), n * 2, cudaMemcpyHostToDevice);
	cudaMemcpy(dy, h.data() + 7, (n - 7) * 2, cudaMemcpyHostToDevice);
	cudaMemcpy(add, h.data() + 13, (n - 13) * 2, cudaMemcpyHostToDevice);
	cudaMemcpy(w, h.data() + 99, C * 2, cudaMemcpyHostToDevice);
	cudaStream_t st; cudaStreamCreate(&st);
	std::vector<T> ref(n), got(n);
	// Prints a variant's time and rate (4 x 64 MiB moved) and how far its
	// output out (dx or y) is from ref.
	auto report = [&](const char *name, float us, const T *out, const char *what) {
		cudaMemcpy(got.data(), out, n * 2, cudaMemcpyDeviceToHost);
		double md = 0;
		for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)__bfloat162float(got[i]) - (double)__bfloat162float(ref[i])));
		printf("%-28s %8.1f us  %6.0f GB/s  max|%s-ref| %.3g\n", name, us, 4.0 * n * 2 / (us * 1e3), what, md);
	};
	auto check = [&](const char *name, float us) { report(name, us, dx, "dx"); };
	float us = run<8, 128, 2>(dy, x, w, add, dx, dw, db, work, 1, 20, st);
	cudaMemcpy(ref.data(), dx, n * 2, cudaMemcpyDeviceToHost);
	check("<8,128,2> P (ref)", us);
	check("<8,128,2> P (ref)", run<8, 128, 2>(dy, x, w, add, dx, dw, db, work, 1, 20, st));
	A *mean, *rstd; cudaMalloc(&mean, R * 4); cudaMalloc(&rstd, R * 4);
	sg_launch_layer_norm_fwd<T>(x, w, w, dx, mean, rstd, R, C, 1e-5f, 0, st);
	check("saved stats <8,128,2> P", run<8, 128, 2>(dy, x, w, add, dx, dw, db, work, 1, 20, st, mean, rstd));
	check("saved stats <8,256,1> P", run<8, 256, 1>(dy, x, w, add, dx, dw, db, work, 1, 20, st, mean, rstd));
	check("<8,128,2> 2P", run<8, 128, 2>(dy, x, w, add, dx, dw, db, work, 2, 20, st));
	check("<8,256,1> P", run<8, 256, 1>(dy, x, w, add, dx, dw, db, work, 1, 20, st));
	check("<8,256,1> 2P", run<8, 256, 1>(dy, x, w, add, dx, dw, db, work, 2, 20, st));
	check("<8,64,4> P", run<8, 64, 4>(dy, x, w, add, dx, dw, db, work, 1, 20, st));
	check("<8,64,4> 2P", run<8, 64, 4>(dy, x, w, add, dx, dw, db, work, 2, 20, st));
	check("<8,32,8> P", run<8, 32, 8>(dy, x, w, add, dx, dw, db, work, 1, 20, st));
	check("<8,32,8> 2P", run<8, 32, 8>(dy, x, w, add, dx, dw, db, work, 2, 20, st));
	// dw and db of <8,128,2> with loads ahead: the reference of the variants below
	std::vector<T> rw(C), rb(C), gw(C), gb(C);
	run<8, 128, 2>(dy, x, w, add, dx, dw, db, work, 1, 1, st);
	cudaMemcpy(rw.data(), dw, C * 2, cudaMemcpyDeviceToHost);
	cudaMemcpy(rb.data(), db, C * 2, cudaMemcpyDeviceToHost);
	auto check2 = [&](const char *name, float us) {
		cudaMemcpy(gw.data(), dw, C * 2, cudaMemcpyDeviceToHost);
		cudaMemcpy(gb.data(), db, C * 2, cudaMemcpyDeviceToHost);
		double mw = 0, mb = 0;
		for (int i = 0; i < C; i++) {
			mw = fmax(mw, fabs((double)__bfloat162float(gw[i]) - (double)__bfloat162float(rw[i])) / (1 + fabs((double)__bfloat162float(rw[i]))));
			mb = fmax(mb, fabs((double)__bfloat162float(gb[i]) - (double)__bfloat162float(rb[i])) / (1 + fabs((double)__bfloat162float(rb[i]))));
		}
		check(name, us);
		printf("%-28s dw %.3g db %.3g (relative)\n", "", mw, mb);
	};
	const long long S = 132;
	printf("-- blocks an SM, row groups (S: SMs), loads ahead or not\n");
	check2("library launcher", time_us([&]() {
		sg_launch_layer_norm_bwd_fused<T>(dy, x, w, add, dx, dw, db, work, R, C, 1e-5f, 0, st);
	}, 20, st));
	check2("ahead <8,128,2> 4/SM 4S", run_lb<8, 128, 2, 4, true>(dy, x, w, add, dx, dw, db, work, 4 * S, 20, st));
	check2("ahead <8,128,2> 8/SM 8S", run_lb<8, 128, 2, 8, true>(dy, x, w, add, dx, dw, db, work, 8 * S, 20, st));
	check2("ahead <8,256,1> 4/SM 4S", run_lb<8, 256, 1, 4, true>(dy, x, w, add, dx, dw, db, work, 4 * S, 20, st));
	check2("not <8,128,2> 8/SM 8S", run_lb<8, 128, 2, 8, false>(dy, x, w, add, dx, dw, db, work, 8 * S, 20, st));
	check2("not <8,256,1> 4/SM 4S", run_lb<8, 256, 1, 4, false>(dy, x, w, add, dx, dw, db, work, 4 * S, 20, st));
	check2("not <8,256,1> 6/SM 6S", run_lb<8, 256, 1, 6, false>(dy, x, w, add, dx, dw, db, work, 6 * S, 20, st));
	check2("not <8,64,4> 8/SM 16S", run_lb<8, 64, 4, 8, false>(dy, x, w, add, dx, dw, db, work, 16 * S, 20, st));
	check2("saved, not <8,256,1> 4/SM 4S", run_lb<8, 256, 1, 4, false>(dy, x, w, add, dx, dw, db, work, 4 * S, 20, st, mean, rstd));
	// staged through shared memory: against the library launcher's dx, dw and
	// db (at 256 threads a row and 512 row groups the same sums: dx equal, dw
	// within float rounding)
	printf("-- staged through shared memory (cp.async), against the library launcher\n");
	sg_launch_layer_norm_bwd_fused<T>(dy, x, w, add, dx, dw, db, work, R, C, 1e-5f, 0, st);
	cudaMemcpy(ref.data(), dx, n * 2, cudaMemcpyDeviceToHost);
	cudaMemcpy(rw.data(), dw, C * 2, cudaMemcpyDeviceToHost);
	cudaMemcpy(rb.data(), db, C * 2, cudaMemcpyDeviceToHost);
	for (int rep = 0; rep < 2; rep++) {
		check2("library launcher", time_us([&]() {
			sg_launch_layer_norm_bwd_fused<T>(dy, x, w, add, dx, dw, db, work, R, C, 1e-5f, 0, st);
		}, 20, st));
		check2("staged <8,256,1> 4/SM ST2", run_lb<8, 256, 1, 4, false, 2>(dy, x, w, add, dx, dw, db, work, 512, 20, st));
		check2("staged <8,256,1> 4/SM ST3", run_lb<8, 256, 1, 4, false, 3>(dy, x, w, add, dx, dw, db, work, 512, 20, st));
		check2("staged <8,128,2> 4/SM ST2", run_lb<8, 128, 2, 4, false, 2>(dy, x, w, add, dx, dw, db, work, 512, 20, st));
		check2("staged <8,128,2> 4/SM ST3", run_lb<8, 128, 2, 4, false, 3>(dy, x, w, add, dx, dw, db, work, 512, 20, st));
		check2("staged <8,128,2> 4/SM ST4", run_lb<8, 128, 2, 4, false, 4>(dy, x, w, add, dx, dw, db, work, 512, 20, st));
		check2("staged <8,128,2> 4/SM ST3 4S", run_lb<8, 128, 2, 4, false, 3>(dy, x, w, add, dx, dw, db, work, 528, 20, st));
		check2("staged <8,128,2> 3/SM ST4 3S", run_lb<8, 128, 2, 3, false, 4>(dy, x, w, add, dx, dw, db, work, 396, 20, st));
		check2("staged <8,128,2> 3/SM ST5 3S", run_lb<8, 128, 2, 3, false, 5>(dy, x, w, add, dx, dw, db, work, 396, 20, st));
		check2("staged <8,128,2> 5/SM ST3 5S", run_lb<8, 128, 2, 5, false, 3>(dy, x, w, add, dx, dw, db, work, 660, 20, st));
		check2("staged <8,64,4> 8/SM ST2 8S", run_lb<8, 64, 4, 8, false, 2>(dy, x, w, add, dx, dw, db, work, 1056, 20, st));
		check2("staged <8,64,4> 8/SM ST3 8S", run_lb<8, 64, 4, 8, false, 3>(dy, x, w, add, dx, dw, db, work, 1056, 20, st));
		check2("staged <8,64,4> 6/SM ST4 6S", run_lb<8, 64, 4, 6, false, 4>(dy, x, w, add, dx, dw, db, work, 792, 20, st));
		check2("staged <8,32,8> 16/SM ST2 16S", run_lb<8, 32, 8, 4, false, 2>(dy, x, w, add, dx, dw, db, work, 2112, 20, st));
		check2("staged, saved <8,128,2> ST3", run_lb<8, 128, 2, 4, false, 3>(dy, x, w, add, dx, dw, db, work, 512, 20, st, mean, rstd));
	}
	// the forward with the residual add: reads x and res, writes sum and y
	printf("-- forward with the residual add (4 x 64 MiB moved)\n");
	T *sum, *y; cudaMalloc(&sum, n * 2); cudaMalloc(&y, n * 2);
	auto fwd = [&](const char *name, float us) { report(name, us, y, "y"); };
	float fus = run_fwd<32, 8>(x, add, sum, w, w, y, mean, rstd, 20, st);
	cudaMemcpy(ref.data(), y, n * 2, cudaMemcpyDeviceToHost);
	fwd("fwd <8,32,8> (lib. before)", fus);
	fwd("fwd <8,32,8> (lib. before)", run_fwd<32, 8>(x, add, sum, w, w, y, mean, rstd, 20, st));
	fwd("fwd <8,64,4>", run_fwd<64, 4>(x, add, sum, w, w, y, mean, rstd, 20, st));
	fwd("fwd <8,128,2> (library)", run_fwd<128, 2>(x, add, sum, w, w, y, mean, rstd, 20, st));
	fwd("fwd <8,256,1>", run_fwd<256, 1>(x, add, sum, w, w, y, mean, rstd, 20, st));
	// copy-rate reference
	const float cus = time_us([&]() { cudaMemcpyAsync(dx, x, n * 2, cudaMemcpyDeviceToDevice, st); }, 20, st);
	printf("copy 64 MiB: %.1f us (%.0f GB/s)\n", cus, 2.0 * n * 2 / (cus * 1e3));
	return 0;
}
