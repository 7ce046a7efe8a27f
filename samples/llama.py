"""llama.py - the PyTorch module behind samples/llama.sg: a small decoder
as Hugging Face's Llama, Mistral and Qwen2 write it (rotary embeddings,
RMS norm, grouped-query attention, SiLU-gated MLP), also traced by
tests/torch/test_fx2sg.py in its variants.

samples/llama.sg was made from it with tools/fx2sg:

    tools/fx2sg samples/llama.py:sample -o samples/llama.sg --graph llama \
        --input tok=i64[4,16] --loss cross_entropy --optimizer 'adamw(lr=1e-3)'

It runs on a torch without F.scaled_dot_product_attention (Debian's 1.13)
too: then a function of that name computes PyTorch's definition, and
torch.fx records it as the call fx2sg maps to the attention op.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False):
    """F.scaled_dot_product_attention's definition (torch 2.5+, math path)
    for a torch without it: masks, is_causal, scale and enable_gqa as
    PyTorch documents them."""
    assert dropout_p == 0.0
    L, S = query.shape[-2], key.shape[-2]
    s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], -3)
        value = value.repeat_interleave(query.shape[-3] // value.shape[-3], -3)
    att = query @ key.transpose(-2, -1) * s
    if is_causal:
        att = att.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        att = att.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        att = att + attn_mask
    return torch.softmax(att, -1) @ value


if HAVE_SDPA:
    scaled_dot_product_attention = F.scaled_dot_product_attention
else:
    # A leaf that fx2sg takes for F.scaled_dot_product_attention (it knows
    # torch functions by name, from modules whose name starts with
    # "torch"), computed by its definition.  Not "torch.nn.functional"
    # itself: torch.fx would then print the wrapped call by that dotted
    # name, which it cannot find again when it traces the next module.
    _sdpa_math.__name__ = "scaled_dot_product_attention"
    _sdpa_math.__module__ = "torch_sdpa_reference"
    scaled_dot_product_attention = _sdpa_math
    torch.fx.wrap("scaled_dot_product_attention")


class RMSNorm(nn.Module):
    """Llama's RMS norm, as Hugging Face writes it (f32, then the weight)."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Llama(nn.Module):
    """A tiny decoder as Hugging Face's Llama, Mistral and Qwen2 write it:
    token embedding, per layer RMS norm, attention with rotary embeddings
    (cos/sin from an inv_freq buffer, rotate_half by slicing, cat and neg)
    and grouped-query heads (F.scaled_dot_product_attention with
    enable_gqa), a SiLU-gated MLP; a final norm and the LM head.  mask:
    'causal' (is_causal=True), 'tril' (a bool causal mask buffer: the
    exporter makes it causal=true), 'float' (0 / -inf causal float mask
    buffer, as Hugging Face builds it), 'window' (Mistral's sliding window
    of 3 keys, a bool mask: the masked path), 'eager' (the float mask, with
    attention written out after repeating the key/value heads, as Hugging
    Face's eager attention does).  bias: q/k/v biases (Qwen2)."""

    def __init__(self, vocab=10, d=32, heads=4, kv_heads=2, layers=2, t=6, mask="causal",
                 bias=False):
        super().__init__()
        self.heads, self.kv_heads, self.hd, self.mask_kind = heads, kv_heads, d // heads, mask
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            L = nn.Module()
            L.norm1, L.norm2 = RMSNorm(d), RMSNorm(d)
            L.q = nn.Linear(d, heads * self.hd, bias=bias)
            L.k = nn.Linear(d, kv_heads * self.hd, bias=bias)
            L.v = nn.Linear(d, kv_heads * self.hd, bias=bias)
            L.o = nn.Linear(heads * self.hd, d, bias=False)
            L.gate = nn.Linear(d, 2 * d, bias=False)
            L.up = nn.Linear(d, 2 * d, bias=False)
            L.down = nn.Linear(2 * d, d, bias=False)
            self.layers.append(L)
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd)))
        tri = torch.ones(t, t, dtype=torch.bool).tril()
        if mask == "tril":
            self.register_buffer("mask", tri[None, None])
        elif mask in ("float", "eager"):
            self.register_buffer("mask", torch.zeros(t, t).masked_fill(~tri, float("-inf")))
        elif mask == "window":
            self.register_buffer("mask", tri & ~torch.ones(t, t, dtype=torch.bool).tril(-3))

    def forward(self, tok):
        B, T = tok.shape
        h = self.embed(tok)
        pos = torch.arange(T).float()
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        for L in self.layers:
            x = L.norm1(h)
            q = L.q(x).view(B, T, self.heads, self.hd).transpose(1, 2)
            k = L.k(x).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
            v = L.v(x).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if self.mask_kind == "eager":
                # Hugging Face's eager attention: repeat_kv, then written out.
                n = self.heads // self.kv_heads
                k = k[:, :, None].expand(B, self.kv_heads, n, T, self.hd).reshape(B, -1, T, self.hd)
                v = v[:, :, None].expand(B, self.kv_heads, n, T, self.hd).reshape(B, -1, T, self.hd)
                w = torch.matmul(q, k.transpose(2, 3)) * self.hd ** -0.5 + self.mask
                a = torch.matmul(torch.softmax(w, dim=-1), v)
            elif self.mask_kind == "causal":
                a = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                a = scaled_dot_product_attention(q, k, v, attn_mask=self.mask, enable_gqa=True)
            h = h + L.o(a.transpose(1, 2).reshape(B, T, -1))
            x = L.norm2(h)
            h = h + L.down(F.silu(L.gate(x)) * L.up(x))
        return self.head(self.norm(h)).reshape(B * T, -1)


def sample():
    """The sample's configuration (samples/llama.sg)."""
    torch.manual_seed(0)
    return Llama(vocab=256, d=64, heads=4, kv_heads=2, layers=2, t=16)
