// sm_clock.h - the GPU's SM clock for the microbenchmarks that time at the
// power cap (gemm_search.cu, gemm_gelu.cu): NVML's libnvidia-ml.so.1,
// opened at run time (the toolkit here has no nvml.h); 0 without it.
#pragma once
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
	unsigned mhz()
	{
		unsigned c = 0;
		return dev && !clock(dev, 1 /* NVML_CLOCK_SM */, &c) ? c : 0;
	}
};
