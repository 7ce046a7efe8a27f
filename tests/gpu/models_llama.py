"""models_llama.py - Hugging Face decoders exported by tools/fx2sg and
trained by sgc, against PyTorch eager (run by tests/gpu/run_models.sh on
the GPU machine: torch 2.x with transformers, nvcc, no network).

  python3 tests/gpu/models_llama.py [run] WORKDIR [MODEL...]   (run_models.sh says `run`)

For each of LlamaForCausalLM (grouped-query heads: 4 query over 2
key/value), MistralForCausalLM (multi-query: 1 key/value head, a sliding
window of 4 keys shorter than the sequence, so a real mask) and
Qwen2ForCausalLM (q/k/v biases), MixtralForCausalLM (4 experts, top 2;
exported with its experts as batched products) and GPT2LMHeadModel (tied
LM head, Conv1D projections), each at a tiny config built from a config
object (no download), f32:

  1. fx2sg --trace=export --loss cross_entropy --optimizer 'adamw(lr=...)'
     of a wrapper giving the logits as [B*T, vocab], with random token ids;
  2. `sgc run --steps 3` (the CPU interpreter) and the CUDA driver that
     `sgc -O2 --main` generates, built with nvcc against libsgrt, run with
     --steps 3;
  3. PyTorch eager: 3 steps of torch.optim.AdamW with the same settings
     on the same params, inputs and targets.

Then llama_dims and gpt2_dims: Llama and GPT-2 with their logits as [B,
vocab, T] (targets [B, T]), exported as above at B=2, T=8 with `--dim
B=input_ids:0 --dim T=input_ids:1` (positions and causal masks become
statements that follow the dims), run by `sgc run -D B=3 -D T=13` and by
the CUDA that `sgc -D B=3 -D T=13` generates, against eager at B=3, T=13.

It prints how the attention was exported (grouped-query heads kept,
causal, masked) and, per model and per path (cpu, gpu), the largest
absolute error of the last step's loss and of the params after 3 steps,
with PASS or FAIL; exit 0 when all passed.  Environment: SGC (the sgc
binary), SGRT_FLAGS (nvcc flags to link libsgrt), NVCC, MODELS_RUNS (the
runs to do, space-separated; default all).

The module factories (llama, mistral, qwen2, mixtral, gpt2, llama_bvt, gpt2_bvt)
are also fx2sg's MODULE_SPEC targets: tests/gpu/models_llama.py:llama.
"""
import os
import re
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import stio  # noqa: E402
from models import Logits  # noqa: E402  (the benchmark's wrapper: logits as [B*T, vocab])

B, T, VOCAB, LR, STEPS = 2, 8, 64, 1e-3, 3
TOL = 1e-4  # f32: loss and params after 3 AdamW steps


def _make(cls_name, cfg_name, **kw):
    import transformers
    cfg = getattr(transformers, cfg_name)(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64, tie_word_embeddings=False,
        attn_implementation="sdpa", **kw)
    torch.manual_seed(0)
    m = getattr(transformers, cls_name)(cfg).float().eval()
    return Logits(m)


def llama():
    return _make("LlamaForCausalLM", "LlamaConfig", num_key_value_heads=2)


def mistral():
    return _make("MistralForCausalLM", "MistralConfig", num_key_value_heads=1, sliding_window=4)


def qwen2():
    return _make("Qwen2ForCausalLM", "Qwen2Config", num_key_value_heads=2)


def mixtral():
    """MixtralForCausalLM: 4 experts, 2 a token (top-2 router); fx2sg runs
    its experts as batched products (the eager steps keep transformers'
    default grouping: the same sums)."""
    return _make("MixtralForCausalLM", "MixtralConfig", num_key_value_heads=2,
                 num_local_experts=4, num_experts_per_tok=2)


def gpt2():
    """GPT2LMHeadModel: learned positions, Conv1D (addmm) projections,
    GELU(tanh), the LM head tied to the token embedding; dropouts at 0 so
    that the eager steps are deterministic."""
    import transformers
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                  n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, attn_implementation="sdpa")
    torch.manual_seed(0)
    return Logits(transformers.GPT2LMHeadModel(cfg).float().eval())


class LogitsBVT(torch.nn.Module):
    """A causal LM's logits as [B, vocab, T] (cross_entropy's class dim 1,
    targets [B, T]): --dim can name B and T in the loss's target, which a
    flattened [B*T] one (a product of dims) cannot."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m.m(input_ids=input_ids, use_cache=False,
                        return_dict=True).logits.transpose(1, 2)


def llama_bvt():
    return LogitsBVT(llama())


def gpt2_bvt():
    return LogitsBVT(gpt2())


MODELS = {"llama": llama, "mistral": mistral, "qwen2": qwen2, "mixtral": mixtral, "gpt2": gpt2,
          "llama_bvt": llama_bvt, "gpt2_bvt": gpt2_bvt}
# The runs: each model at B, T; NAME_dims: NAME_bvt exported with --dim
# B=input_ids:0 --dim T=input_ids:1 at B, T, run (sgc run -D, the CUDA
# compiled with -D) and compared with eager at DIMS_AT.
RUNS = ["llama", "mistral", "qwen2", "mixtral", "gpt2", "llama_dims", "gpt2_dims"]
DIMS_AT = {"B": 3, "T": 13}


def sh(cmd, log, timeout=600, env=None):
    with open(log, "w") as f:
        pr = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, env=env)
    return pr.returncode


def tail(path, n=25):
    try:
        return "".join(open(path).readlines()[-n:])
    except OSError:
        return "(no log)"


def eager(name, params, inputs):
    """3 AdamW steps in PyTorch: the last loss and the params."""
    m = MODELS[name]()
    sd = m.state_dict()
    with torch.no_grad():
        for n, t in params.items():
            if n in sd:
                sd[n].copy_(t)
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(m(inputs["input_ids"]), inputs["target"])
        loss.backward()
        opt.step()
    return loss.detach(), {n: p.detach() for n, p in m.named_parameters()}


def max_err(got, loss, params):
    """The largest |error| of the loss and of the params, and what is missing."""
    if got is None:
        return None, None, "no output"
    if "loss" not in got:
        return None, None, "no loss in --out"
    el = abs(float(got["loss"].double()) - float(loss.double()))
    ep, missing = 0.0, [n for n in params if n not in got]
    for n, p in params.items():
        if n in got:
            ep = max(ep, float((got[n].double() - p.double()).abs().max()))
    return el, ep, ("missing: " + ", ".join(missing[:5])) if missing else None


def attention_form(sg):
    text = [l for l in open(sg).read().splitlines() if l.strip().startswith("%")]
    att = [l for l in text if "= scaled_dot_product_attention(" in l]
    gqa = sum("enable_gqa=true" in l for l in att)
    causal = sum("causal=true" in l for l in att)
    masked = sum(l.split("(", 1)[1].count("%") == 4 for l in att)
    rep = sum(l.split("=", 1)[1].strip().startswith("expand(") for l in text)
    return ("%d attention ops (%d enable_gqa, %d causal, %d masked), %d expand statements"
            % (len(att), gqa, causal, masked, rep))


def run_model(name, work):
    sgc = os.environ.get("SGC", os.path.join(ROOT, "build", "compiler", "sgc"))
    nvcc = os.environ.get("NVCC", "nvcc")
    flags = os.environ.get("SGRT_FLAGS", "").split()
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    sg, par, ids, inp = (os.path.join(d, f) for f in ("m.sg", "p.safetensors",
                                                       "ids.safetensors", "in.safetensors"))
    dims = name.endswith("_dims")
    model = name[:-len("_dims")] + "_bvt" if dims else name
    gen = torch.Generator().manual_seed(1)
    stio.save(ids, {"input_ids": torch.randint(0, VOCAB, (B, T), generator=gen)})
    t0 = time.time()
    cmd = [sys.executable, os.path.join(ROOT, "tools", "fx2sg"),
           "%s:%s" % (os.path.abspath(__file__), model), "-o", sg, "--params", par,
           "--inputs-from", ids, "--save-inputs", inp, "--trace", "export",
           "--loss", "cross_entropy", "--optimizer", "adamw(lr=%g)" % LR, "--seed", "3"]
    dflags = []
    if dims:
        cmd += ["--dim", "B=input_ids:0", "--dim", "T=input_ids:1"]
        dflags = [x for k, v in DIMS_AT.items() for x in ("-D", "%s=%d" % (k, v))]
    rc = sh(cmd, os.path.join(d, "fx2sg.log"))
    if rc != 0:
        print("FAIL %s export: fx2sg exited %d\n%s" % (name, rc, tail(os.path.join(d, "fx2sg.log"))))
        return False
    print("%s: exported in %.1f s: %s" % (name, time.time() - t0, attention_form(sg)))
    params, inputs = stio.load(par), stio.load(inp)
    if dims:
        # the program at other sizes: inputs and targets of [B, T] there
        text = open(sg).read()
        print("%s: %s; %d arange statements, consts: %s" % (
            name, ", ".join(l for l in text.splitlines() if l.startswith("dim ")),
            text.count("= arange("), " ".join(re.findall(r"^\s*const\s+(%\S+)", text, re.M))
            or "none"))
        shape = (DIMS_AT["B"], DIMS_AT["T"])
        inputs = {"input_ids": torch.randint(0, VOCAB, shape, generator=gen),
                  "target": torch.randint(0, VOCAB, shape, generator=gen)}
        stio.save(inp, inputs)
    loss, want = eager(model, params, inputs)
    ok = True
    # The CPU interpreter.
    out = os.path.join(d, "cpu.safetensors")
    rc = sh([sgc, "run", sg, "--params", par, "--inputs", inp, "--out", out,
             "--steps", str(STEPS)] + dflags, os.path.join(d, "cpu.log"))
    got = stio.load(out) if rc == 0 else None
    # The generated CUDA.
    cu, exe = os.path.join(d, "m.cu"), os.path.join(d, "m")
    rc2 = sh([sgc, sg, "-O2", "--main", "-o", cu] + dflags, os.path.join(d, "sgc.log"))
    rc2 = rc2 or sh([nvcc, "-arch=sm_90", "-std=c++17", "-O2", "-cudart", "shared", cu, "-o", exe]
                    + flags, os.path.join(d, "nvcc.log"))
    gout = os.path.join(d, "gpu.safetensors")
    if rc2 == 0:
        rc2 = sh([exe, "--params", par, "--inputs", inp, "--out", gout, "--steps", str(STEPS)],
                 os.path.join(d, "gpu.log"))
    ggot = stio.load(gout) if rc2 == 0 else None
    for path, res, log in (("cpu", got, "cpu.log"), ("gpu", ggot,
                                                      "nvcc.log" if not os.path.exists(exe)
                                                      else "gpu.log")):
        el, ep, why = max_err(res, loss, want)
        if why is None and (el > TOL * max(1.0, abs(float(loss))) or ep > TOL):
            why = "beyond %g" % TOL
        print("%s %s %s: loss %.6f, max |loss error| %s, max |param error| %s%s" % (
            "PASS" if why is None else "FAIL", name, path, float(loss),
            "-" if el is None else "%.3g" % el, "-" if ep is None else "%.3g" % ep,
            "" if why is None else " (%s)\n%s" % (why, tail(os.path.join(d, log)))))
        ok &= why is None
    return ok


def main():
    args = sys.argv[1:]
    # tests/gpu/run_models.sh calls `build DIR` here (nothing to build: the
    # models are made on the GPU machine) and `run DIR`
    if args[:1] == ["build"]:
        sys.exit(0)
    if args[:1] == ["run"]:
        args = args[1:]
    if not args:
        sys.exit(__doc__)
    work = args[0]
    # MODELS_RUNS (space-separated) picks runs when the command line does not
    names = args[1:] or os.environ.get("MODELS_RUNS", "").split() or RUNS
    ok = True
    for n in names:
        try:
            ok &= run_model(n, work)
        except Exception as e:  # noqa: BLE001 - one model's failure is reported, the rest run
            print("FAIL %s: %s: %s" % (n, type(e).__name__, e))
            ok = False
    print("models: %s" % ("all passed" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
