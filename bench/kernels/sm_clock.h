// sm_clock.h - timing at the GPU's power cap, for the microbenchmarks that
// do (gemm_search.cu, gemm_gelu.cu): the SM clock through NVML's
// libnvidia-ml.so.1, opened at run time (the toolkit here has no nvml.h),
// and a window of back-to-back calls timed with the clock sampled.
#pragma once
#include <cuda_runtime.h>
#include <dlfcn.h>

struct SmClock {
	void *dev = nullptr;
	int (*clock)(void *, int, unsigned *) = nullptr;
	SmClock()
	{
		void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
		auto init = h ? (int (*)(void))dlsym(h, "nvmlInit_v2") : nullptr;
		auto get = h ? (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2") : nullptr;
		clock = h ? (int (*)(void *, int, unsigned *))dlsym(h, "nvmlDeviceGetClockInfo") : nullptr;
		if (!init || !get || !clock || init() || get(0, &dev))
			dev = nullptr;
	}
	// MHz now; 0 without NVML.
	unsigned mhz()
	{
		unsigned c = 0;
		return dev && !clock(dev, 1 /* NVML_CLOCK_SM */, &c) ? c : 0;
	}
};

// n calls of launch() back to back on stream st, between events e0 and e1:
// ms a call (-1 if the events fail).  With clk, the clock is sampled until
// they have run and its mean goes to *mhz.
template <class Launch>
static float clocked_window(Launch launch, int n, cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1,
                            SmClock *clk, double *mhz)
{
	if (cudaEventRecord(e0, st))
		return -1;
	for (int i = 0; i < n; i++)
		launch();
	if (cudaEventRecord(e1, st))
		return -1;
	double sum = 0;
	int k = 0;
	while (clk && cudaEventQuery(e1) == cudaErrorNotReady)
		sum += clk->mhz(), k++;
	float ms;
	if (cudaEventSynchronize(e1) || cudaEventElapsedTime(&ms, e0, e1))
		return -1;
	if (mhz)
		*mhz = k ? sum / k : 0;
	return ms / n;
}
