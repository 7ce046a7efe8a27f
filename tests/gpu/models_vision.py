#!/usr/bin/env python3
"""models_vision.py - torchvision's resnet18, r3d_18 (video) and swin_t and timm's ViT-tiny exported
by fx2sg (--trace=export), trained 3 AdamW steps in the generated code and
in the interpreter, against PyTorch eager.

    models_vision.py build DIR    here: checks that fx2sg loads (nothing to
                                  build beyond run_models.sh's sgc)
    models_vision.py run DIR      on the GPU machine (torch 2.x with
                                  torchvision and timm; env SGC, NVCC,
                                  SGRT_FLAGS as run_models.sh sets them;
                                  MODELS="r3d18 ..." runs those alone)

Per model, at a small size (no pretrained weights, no network):
  resnet18   torchvision.models.resnet18(num_classes=10), x f32[4, 3, 64, 64],
             exported in training mode (--train: BatchNorm's batch statistics,
             running statistics as consts updated in place)
  vit_tiny   timm vit_tiny_patch16_224(img_size=64, num_classes=10), x f32[4,
             3, 64, 64] (16 patches and the class token)
  r3d18      torchvision.models.video.r3d_18(num_classes=10), x f32[4, 3, 8, 48,
             48], in training mode (Conv3d, BatchNorm3d, AdaptiveAvgPool3d:
             fx2sg writes them with the 2-D ops); one step, not three: its
             33M params fit the 4 clips in three (loss 2.39, 0.88, 0.10), and
             the few elements whose first step's sign differs from float64's
             (near-zero gradients: 7 of 33M in the CPU interpreter) move the
             3rd step's layer4 statistics by 1-2%, where the first step's are
             equal to 2e-7
  swin_t     torchvision.models.swin_t(num_classes=10), its StochasticDepth at p = 0,
             x f32[4, 3, 64, 64] (windows larger than the late stages' maps,
             so padded; the shifted windows' mask built in place and folded,
             the relative position bias an advanced index, torch.roll)
with cross_entropy against random labels and `optimizer adamw(lr=0.001)`:
  1. fx2sg's export (torch.export), the .sg and params written to DIR/NAME/;
  2. sgc -O2 --main, nvcc -arch=sm_90, the driver run with --steps 3;
  3. `sgc run --steps 3` (the CPU interpreter);
  4. PyTorch eager on the GPU (TF32 off): 3 steps of torch.optim.AdamW(lr=1e-3)
     on the same batch.
Compares the last step's loss, every param and every buffer (running
statistics) after the steps, and prints the largest error per model and
engine (GPU, CPU).  Exit 1 when an export or a run fails or an error is
over its bound (loss: 1e-3 relative; params and buffers: 5e-3 absolute,
about the movement of 3 AdamW steps of lr 1e-3, where a near-zero gradient
may flip its sign).
"""
import copy
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

LR, STEPS, OPT = 1e-3, 3, "adamw(lr=0.001)"


def load_fx2sg():
    loader = importlib.machinery.SourceFileLoader("fx2sg", os.path.join(ROOT, "tools", "fx2sg"))
    spec = importlib.util.spec_from_loader("fx2sg", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _no_stochastic_depth(m):
    """m with its StochasticDepth layers at p = 0: the eager steps train
    in training mode, where they would drop rows at random."""
    for layer in m.modules():
        if type(layer).__name__ == "StochasticDepth":
            layer.p = 0.0
    return m


def make_models():
    import torch
    out = []
    try:
        import torchvision
        torch.manual_seed(0)
        out.append(("resnet18", lambda: torchvision.models.resnet18(num_classes=10), True,
                    (4, 3, 64, 64), STEPS))
        out.append(("r3d18", lambda: torchvision.models.video.r3d_18(num_classes=10), True,
                    (4, 3, 8, 48, 48), 1))
        out.append(("swin_t", lambda: _no_stochastic_depth(torchvision.models.swin_t(
            num_classes=10)), False, (4, 3, 64, 64), STEPS))
    except ImportError as e:
        out += [(n, e, True, None, 0) for n in ("resnet18", "r3d18", "swin_t")]
    try:
        import timm
        torch.manual_seed(0)
        out.append(("vit_tiny", lambda: timm.create_model(
            "vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=10), False,
                    (4, 3, 64, 64), STEPS))
    except ImportError as e:
        out.append(("vit_tiny", e, False, None, 0))
    return out


def run_cmd(cmd, **kw):
    pr = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if pr.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (os.path.basename(cmd[0]), pr.returncode,
                                                 (pr.stderr or pr.stdout)[-2000:]))
    return pr


def eager(model, x, target, dev, steps):
    """AdamW steps in PyTorch on dev; the losses and the final state."""
    import torch
    import torch.nn.functional as F
    m = model.to(dev).train()
    opt = torch.optim.AdamW(m.parameters(), lr=LR)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x.to(dev)), target.to(dev))
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    state = {k: v.detach().cpu() for k, v in m.state_dict().items()}
    return losses, state


def errors(out, losses, state, params):
    """(loss relative error, largest param/buffer error and its name)."""
    lv = float(losses[-1])
    lerr = abs(float(out["loss"].double().reshape(())) - lv) / max(abs(lv), 1e-12)
    worst, wname, missing = 0.0, None, []
    for name in params:
        if name.endswith("num_batches_tracked") or name not in state:
            continue
        if name not in out:
            missing.append(name)
            continue
        e = float((out[name].double() - state[name].double()).abs().max()) \
            if state[name].numel() else 0.0
        if e > worst:
            worst, wname = e, name
    return lerr, worst, wname, missing


def run(d):
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    import stio
    fx = load_fx2sg()
    sgc, nvcc = os.environ["SGC"], os.environ.get("NVCC", "nvcc")
    flags = os.environ.get("SGRT_FLAGS", "").split()
    dev = torch.device("cuda", 0)
    fails, rows = 0, []
    only = os.environ.get("MODELS", "").split()
    for name, factory, train, shape, steps in make_models():
        if only and name not in only:
            continue
        if isinstance(factory, Exception):
            print("FAIL %s: cannot import its library: %s" % (name, factory))
            fails += 1
            continue
        md = os.path.join(d, name)
        os.makedirs(md, exist_ok=True)
        try:
            model = factory()
        except Exception as e:  # noqa: BLE001 - reported; the other models still run
            print("FAIL %s: building the model: %s: %s" % (name, type(e).__name__, e))
            fails += 1
            continue
        reference = copy.deepcopy(model)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(*shape, generator=gen)
        t0 = time.time()
        try:
            ex = fx.export(model, [x], trace="export", loss="cross_entropy", optimizer=OPT,
                           train=train, graph=name)
        except Exception as e:  # noqa: BLE001 - reported
            print("FAIL %s: fx2sg: %s: %s" % (name, type(e).__name__, e))
            fails += 1
            continue
        for w in ex.warnings:
            print("note: %s: fx2sg: %s" % (name, w))
        sg, par, inp = (os.path.join(md, f) for f in ("model.sg", "params.safetensors",
                                                      "inputs.safetensors"))
        with open(sg, "w") as f:
            f.write(ex.sg)
        stio.save(par, ex.params)
        stio.save(inp, ex.inputs)
        print("%s: exported in %.1f s (%d statements, %d params and consts)" % (
            name, time.time() - t0, ex.sg.count("\n  %"), len(ex.params)))
        losses, state = eager(reference, ex.inputs[[k for k in ex.inputs if k != "target"][0]],
                              ex.inputs["target"], dev, steps)
        results = {}
        try:
            cu, exe = os.path.join(md, "model.cu"), os.path.join(md, "model")
            run_cmd([sgc, sg, "-O2", "--main", "-o", cu])
            run_cmd([nvcc, "-arch=sm_90", "-std=c++17", "-O2", cu, "-o", exe] + flags)
            t1 = time.time()
            run_cmd([exe, "--params", par, "--inputs", inp, "--steps", str(steps), "--out",
                     os.path.join(md, "gpu.safetensors"), "--trace",
                     os.path.join(md, "trace.json")])
            results["GPU"] = (stio.load(os.path.join(md, "gpu.safetensors")), time.time() - t1)
            trace = open(os.path.join(md, "trace.json")).read()
            print("%s: convolutions in the trace: %d [cudnn], %d [direct]" % (
                name, trace.count("[cudnn]"), trace.count("[direct]")))
        except RuntimeError as e:
            print("FAIL %s [GPU]: %s" % (name, e))
            fails += 1
        try:
            t1 = time.time()
            run_cmd([sgc, "run", sg, "--params", par, "--inputs", inp, "--steps", str(steps),
                     "--out", os.path.join(md, "cpu.safetensors")], timeout=3000)
            results["CPU"] = (stio.load(os.path.join(md, "cpu.safetensors")), time.time() - t1)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print("FAIL %s [CPU]: %s" % (name, e))
            fails += 1
        for engine, (out, secs) in results.items():
            lerr, perr, pname, missing = errors(out, losses, state, ex.params)
            bad = lerr > 1e-3 or perr > 5e-3 or missing
            fails += bool(bad)
            rows.append((name, engine, steps, float(losses[-1]), lerr, perr, pname, secs))
            print("%s %s [%s]: loss %.6f (torch %.6f) rel err %.2e; largest param/buffer "
                  "error %.2e (%s)%s" % ("FAIL" if bad else "ok", name, engine,
                                         float(out["loss"].reshape(())), float(losses[-1]),
                                         lerr, perr, pname,
                                         "; missing from --out: %s" % missing[:5] if missing else ""))
    print("\nmodel      engine  steps  loss after them  loss rel err  largest param err  "
          "seconds")
    for name, engine, steps, lv, lerr, perr, pname, secs in rows:
        print("%-10s %-6s  %5d  %15.6f  %12.2e  %17.2e  %7.1f   (%s)" % (
            name, engine, steps, lv, lerr, perr, secs, pname))
    print("models_vision: %d failed" % fails)
    return 1 if fails else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        load_fx2sg()
        os.makedirs(sys.argv[2], exist_ok=True)
        print("models_vision: nothing to build (fx2sg loads)")
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        return run(sys.argv[2])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
