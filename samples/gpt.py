"""gpt.py - the PyTorch module behind samples/gpt.sg: a small GPT.

Token and position embeddings, pre-LN decoder blocks (causal self-attention
written out as models write it by hand: q @ k^T, scale, the causal mask,
softmax, @ v; a GELU MLP), a final layer norm and the language-model head
(logits flattened to [B*T, vocab]), trained on next-token cross entropy
with AdamW.  samples/gpt.sg and gpt.safetensors were made from it with
tools/fx2sg (torch.fx, so any torch from 1.13 on makes the same graph):

    tools/fx2sg samples/gpt.py:gpt -o samples/gpt.sg --trace=fx \\
        --graph gpt --input idx=i64[4,16] --loss cross_entropy \\
        --optimizer 'adamw(lr=3e-4, weight_decay=0.1)' \\
        --params samples/gpt.safetensors

gpt.safetensors holds the params (gpt()'s initialisation, seeded)
and the consts torch.fx folds (the positions and the causal masks), which
the graph needs:

    sgc run samples/gpt.sg --params samples/gpt.safetensors \\
        --inputs BATCH.safetensors --steps 3

trains it (BATCH: `idx` i64[4,16] and `target` i64[64], tokens below 64).
tests/torch/test_fx2sg.py checks that both files are still what that
command makes and that `sgc run` gives PyTorch's loss and gradients.
"""
import math

import torch
import torch.nn as nn


class Block(nn.Module):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.act = nn.GELU(approximate="tanh")
        self.fc_out = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        i = torch.arange(T, device=x.device)
        att = att.masked_fill(i.view(T, 1) < i.view(1, T), float("-inf"))
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_out(self.act(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    """A 2-layer GPT: vocab 64, d = 32, 2 heads."""

    def __init__(self, vocab=64, T=16, d=32, heads=2, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(T, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x)).flatten(0, 1)  # [B*T, vocab] logits


def gpt():
    """The exported model: GPT() initialised from torch.manual_seed(1)."""
    torch.manual_seed(1)
    return GPT()
