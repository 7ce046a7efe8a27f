"""models.py - the real models of the benchmark table, as fx2sg module
factories and as the PyTorch side's modules (bench/torch_ref.py).

Each factory builds its model from a config object (no download), in bf16
with dropout off (but gpt2_dropout), wrapped so that it returns what cross_entropy takes (the
exported training step returns the loss alone, `--loss-only`, as
bench/torch_ref.py's step does):

  gpt2      Hugging Face GPT2LMHeadModel, GPT-2 small (12 layers, d 768,
            12 heads, vocab 50257), SDPA attention; input_ids [B, T] ->
            logits [B*T, 50257]
  gpt2_dropout  the same with its config's dropouts (0.1 on the
            embeddings, the attention weights and the residuals), in
            training (--train): attention with dropout_p
  llama     Hugging Face LlamaForCausalLM at a 1B-like width (8 layers, d
            2048, 16 query heads over 4 key/value heads, MLP 5632, vocab
            32000); input_ids [B, T] -> logits [B*T, 32000]
  resnet18  torchvision resnet18 (1000 classes), training mode; x [B, 3,
            224, 224] -> logits [B, 1000]
  vit_tiny  timm vit_tiny_patch16_224 (1000 classes); x [B, 3, 224, 224]
            -> logits [B, 1000]

The .sg files under bench/ are these models exported on a machine with
transformers, torchvision and timm (the GPU machine).  The image models
have the batch as a dim (`--dim`), exported at a small example batch, so
that the table's batch is a `-D` value.  The language models are exported
at the table's sizes: their position ids and causal masks are computed
from B and T at export (torch.export makes them constants of that size,
which fx2sg refuses to rescale: `'const %expand : bool[1, 1, 1024, 1024]'
changes with B`).  Consts (a causal mask, position ids, rotary
frequencies, BatchNorm's running statistics) go to
OUTDIR/NAME.consts.safetensors, which the bench reads; params are
initialised from the drivers' --seed (bench/README.md gives the commands):

  python3 bench/models.py export OUTDIR [NAME...]
  python3 bench/models.py llama-consts bench/llama.consts.safetensors
"""
import os
import subprocess
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LR = 1e-4


class Logits(nn.Module):
    """A causal LM's logits as [B*T, vocab], as language-model training
    code hands them to cross_entropy."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        out = self.m(input_ids=input_ids, use_cache=False, return_dict=True)
        return out.logits.reshape(-1, out.logits.shape[-1])


def gpt2():
    import transformers
    cfg = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  attn_implementation="sdpa")
    torch.manual_seed(0)
    return Logits(transformers.GPT2LMHeadModel(cfg).to(torch.bfloat16))


def gpt2_dropout():
    """GPT-2 small as Hugging Face configures it for training: its dropouts
    (embeddings, attention weights, residuals: 0.1) on, exported with
    --train."""
    import transformers
    cfg = transformers.GPT2Config(attn_implementation="sdpa")
    torch.manual_seed(0)
    return Logits(transformers.GPT2LMHeadModel(cfg).to(torch.bfloat16))


def llama():
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                   num_hidden_layers=8, num_attention_heads=16,
                                   num_key_value_heads=4, max_position_embeddings=4096,
                                   tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(0)
    return Logits(transformers.LlamaForCausalLM(cfg).to(torch.bfloat16))


def resnet18():
    import torchvision
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=1000).to(torch.bfloat16)


def vit_tiny():
    import timm
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", num_classes=1000).to(torch.bfloat16)


# name: (factory, example input for the export, dims, bench sizes, --train)
# (the language models at their table's sizes, without dims: see above)
MODELS = {
    "gpt2": (gpt2, "input_ids=i64[8,1024]", [],
             {"B": 8, "T": 1024}, False),
    "gpt2_dropout": (gpt2_dropout, "input_ids=i64[8,1024]", [],
                     {"B": 8, "T": 1024}, True),
    "llama": (llama, "input_ids=i64[4,2048]", [],
              {"B": 4, "T": 2048}, False),
    "resnet18": (resnet18, "x=bf16[2,3,224,224]", ["B=x:0"], {"B": 128}, True),
    "vit_tiny": (vit_tiny, "x=bf16[2,3,224,224]", ["B=x:0"], {"B": 256}, False),
}


def keep_consts(sg, params, out):
    """The consts of the exported graph sg (a causal mask, position ids:
    values that the drivers' --seed initialisation would spoil) from
    fx2sg's params file, into out (bench/torch_ref.py reads it; params
    are left to --seed).  Nothing is written when there are none."""
    import re
    sys.path.insert(0, HERE)
    from torch_ref import st_load, st_save
    with open(sg) as f:
        text = f.read()
    names = set(re.findall(r"^\s*const\s+%(\S+)\s*:", text, re.M))
    # only those a statement reads (a causal mask fx2sg turned into
    # causal=true is dead: 8-17 MB left out)
    used = {n for n in names
            if re.search(r"^\s*%.*=.*%" + re.escape(n) + r"\b", text, re.M)}
    consts = {k: v for k, v in st_load(params).items() if k in used}
    size = sum(v.numel() * v.element_size() for v in consts.values())
    if consts:
        st_save(out, consts)
        print("%s: %d consts, %d bytes" % (out, len(consts), size), flush=True)


def llama_consts(out):
    """bench/llama.consts.safetensors as HF's LlamaRotaryEmbedding and
    LlamaModel compute them for llama() at the table's T (rope_theta
    10000, head dim 128; positions 0..T-1 as float, [1, 1, T]; the
    frequencies kept in bf16 like the module's buffers after .to(bf16)).
    The export's own file could not be brought back from the GPU machine
    (it held the 16.8 MB causal mask that the graph does not read)."""
    sys.path.insert(0, HERE)
    from torch_ref import st_save
    hd, T = 2048 // 16, MODELS["llama"][3]["T"]
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    st_save(out, {"m.model.rotary_emb.inv_freq": inv.to(torch.bfloat16),
                  "m.model.rotary_emb.original_inv_freq": inv.to(torch.bfloat16),
                  "to_3": torch.arange(T, dtype=torch.float32).reshape(1, 1, T)})


def export(outdir, names):
    import tempfile
    os.makedirs(outdir, exist_ok=True)
    rc = 0
    for name in names:
        _, inp, dims, _, train = MODELS[name]
        sg = os.path.join(outdir, name + ".sg")
        with tempfile.TemporaryDirectory() as tmp:
            params = os.path.join(tmp, name + ".safetensors")
            cmd = [sys.executable, os.path.join(ROOT, "tools", "fx2sg"),
                   "%s:%s" % (os.path.abspath(__file__), name), "-o", sg,
                   "--params", params, "--graph", name, "--input", inp,
                   "--trace", "export", "--loss", "cross_entropy", "--loss-only",
                   "--optimizer", "sgd(lr=%g)" % LR]
            for d in dims:
                cmd += ["--dim", d]
            if train:
                cmd.append("--train")
            print("+ " + " ".join(cmd[1:]), flush=True)
            r = subprocess.run(cmd)
            print("%s: fx2sg exited %d" % (name, r.returncode), flush=True)
            if r.returncode == 0:
                keep_consts(sg, params, os.path.join(outdir, name +
                                                     ".consts.safetensors"))
        rc = rc or r.returncode
    return rc


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "llama-consts":
        return llama_consts(sys.argv[2])
    if len(sys.argv) < 3 or sys.argv[1] != "export":
        sys.exit(__doc__)
    sys.exit(export(sys.argv[2], sys.argv[3:] or list(MODELS)))


if __name__ == "__main__":
    main()
