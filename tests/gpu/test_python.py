#!/usr/bin/env python3
"""tests/gpu/test_python.py - the sgc package on torch CUDA tensors (run by
tests/gpu/run_python_gpu.sh, which sets SGC, SGC_SGRT_FLAGS, SGC_SOURCE_ROOT).

1. samples/train_mlp.sg: two training steps through the package (params
   from seed 0) equal the --main driver's `--steps 2 --out` (the loss and
   every param and optimizer state), on a non-default current stream; the
   inputs are not copied (their pointers reach the call); save then load
   into a second model gives the same params.
2. sgc.compile(module, [x]): an MLP's outputs equal module(x) on the GPU;
   with loss='mse' and optimizer='sgd(lr=0.1)', the first call's loss
   equals torch's and the params move as torch's SGD step moves them."""
import os
import subprocess
import sys
import tempfile

root = os.environ["SGC_SOURCE_ROOT"]
sys.path.insert(0, os.path.join(root, "python"))
import torch  # noqa: E402
import sgc  # noqa: E402

fails = 0


def check(cond, what):
    global fails
    print("%s %s" % ("ok" if cond else "FAIL", what), flush=True)
    fails += not cond


def close(a, b, tol=1e-5):
    a, b = a.float().cpu(), b.float().cpu()
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=tol, atol=tol))


fx = sgc._fx2sg()
dev = torch.device("cuda", 0)
work = tempfile.mkdtemp()

# ---- 1. a .sg file against its driver
path = os.path.join(root, "samples", "train_mlp.sg")
cu = os.path.join(work, "drv.cu")
subprocess.run([os.environ["SGC"], path, "--main", "-o", cu], check=True)
nvcc = subprocess.Popen(["nvcc", "-arch=sm_90", "-std=c++17", "-O2", cu, "-o", cu[:-3]] +
                        os.environ["SGC_SGRT_FLAGS"].split())  # beside the package's
lib = sgc.compile_file(path)
step = lib.graph(seed=0)
g = torch.Generator().manual_seed(1)
ins = {t["name"]: torch.randn(t["shape"], generator=g).to(sgc._torch_dtype(torch, t["dtype"]))
       for t in step.inputs}
with open(os.path.join(work, "in.safetensors"), "wb") as f:
    f.write(fx.st_dumps(ins))
check(nvcc.wait() == 0, "the driver builds")
subprocess.run([cu[:-3], "--inputs", os.path.join(work, "in.safetensors"), "--steps", "2",
                "--seed", "0", "--out", os.path.join(work, "out.safetensors")], check=True)
with open(os.path.join(work, "out.safetensors"), "rb") as f:
    ref = fx.st_loads(f.read())
x = [ins[t["name"]].to(dev) for t in step.inputs]
s = torch.cuda.Stream(dev)
with torch.cuda.stream(s):
    for _ in range(2):
        outs = step(*x)
s.synchronize()
for t, y in zip(step.outputs, outs):
    check(close(y, ref[t["name"]]), "train_mlp output %s equals the driver's" % t["name"])
for name, p in list(step.params.items()) + list(step.state.items()):
    if p is not None and name in ref:
        check(close(p, ref[name]), "train_mlp %s after 2 steps equals the driver's" % name)
check(all(step._io[i] == x[k].data_ptr() for k, i in enumerate(
    i for i, t in enumerate(step.tensors) if t["role"] == "input")), "inputs passed by pointer")
ck = os.path.join(work, "ckpt.safetensors")
step.save(ck)
step2 = lib.graph(params=ck)
check(all(close(step2.params[n], p, 0) for n, p in step.params.items() if p is not None),
      "save then load gives the same params")
check(step.params[next(iter(step.params))].device == dev, "params are CUDA tensors")

# ---- 2. torch modules through fx2sg
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
xe = torch.randn(8, 32)
inf = sgc.compile(mlp, [xe])
(y,) = inf(xe.to(dev))
check(close(y, mlp.to(dev)(xe.to(dev)), 1e-4), "sgc.compile(mlp): outputs equal the module's")
mlp = mlp.cpu()
target = torch.randn(8, 16)
tr = sgc.compile(mlp, [xe], loss="mse", optimizer="sgd(lr=0.1)")
outs = tr(xe.to(dev), target.to(dev))
names_out = [t["name"] for t in tr.outputs]
ref_mlp = mlp.to(dev)
loss = torch.nn.functional.mse_loss(ref_mlp(xe.to(dev)), target.to(dev))
check("loss" in names_out and close(outs[names_out.index("loss")].reshape(()), loss, 1e-4),
      "training step: the loss equals torch's")
loss.backward()
with torch.no_grad():
    moved = [p - 0.1 * p.grad for p in ref_mlp.parameters()]
names = [n for n in tr.params]
check(len(names) == len(moved) and all(
    close(tr.params[n], m, 1e-4) for n, m in zip(names, moved)),
    "training step: the params moved as torch's SGD step")
print("%d failed" % fails)
sys.exit(1 if fails else 0)
