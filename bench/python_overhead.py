#!/usr/bin/env python3
"""bench/python_overhead.py - the overhead of a call through the sgc
package over the bare C API (run by tests/gpu/run_python_gpu.sh).

For samples/classifier.sg (small: the call's CPU cost shows) and
samples/train_mlp.sg, the microseconds per call, as the mean of N calls
after warm-up, with the stream synchronised once at the end:
  package   step(*inputs): checks, output allocation, io array, call_io
  ctypes    call_io on a prepared io array (the bare C API from Python)
  driver    the --main driver's --bench ms_median (the C API from C)
Prints one line per graph and a JSON line."""
import json
import os
import subprocess
import sys
import time

root = os.environ["SGC_SOURCE_ROOT"]
sys.path.insert(0, os.path.join(root, "python"))
import ctypes  # noqa: E402
import torch  # noqa: E402
import sgc  # noqa: E402

N = 2000
res = {}
fx = sgc._fx2sg()
for name in ("classifier", "train_mlp"):
    path = os.path.join(root, "samples", name + ".sg")
    lib = sgc.compile_file(path)
    step = lib.graph()
    x = [torch.randn(t["shape"], device="cuda").to(sgc._torch_dtype(torch, t["dtype"]))
         for t in step.inputs]
    for _ in range(50):
        step(*x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(N):
        step(*x)
    torch.cuda.synchronize()
    pkg = (time.perf_counter() - t0) / N * 1e6
    step.io_pointers(*x)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    call, m, io = step._call, step.model, step._io
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(N):
        call(m, stream, io, None)
    torch.cuda.synchronize()
    raw = (time.perf_counter() - t0) / N * 1e6
    cu = os.path.join(os.environ.get("SGC_CACHE_DIR", "/tmp"), name + "_bench.cu")
    inp = cu[:-3] + "_in.safetensors"
    with open(inp, "wb") as f:
        f.write(fx.st_dumps({t["name"]: v.cpu() for t, v in zip(step.inputs, x)}))
    subprocess.run([os.environ["SGC"], path, "--main", "-o", cu], check=True)
    subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-O2", cu, "-o", cu[:-3]] +
                   os.environ["SGC_SGRT_FLAGS"].split(), check=True)
    out = subprocess.run([cu[:-3], "--inputs", inp, "--bench", "200"], check=True, capture_output=True,
                         text=True).stdout
    drv = json.loads(out.strip().splitlines()[-1])["ms_median"] * 1e3
    res[name] = {"package_us": round(pkg, 2), "ctypes_us": round(raw, 2),
                 "driver_us": round(drv, 2), "overhead_us": round(pkg - raw, 2)}
    print("%-12s package %8.2f us/call  ctypes %8.2f  driver %8.2f  overhead %6.2f us"
          % (name, pkg, raw, drv, pkg - raw), flush=True)
print(json.dumps(res))
