"""test_fx2sg.py - tools/fx2sg against PyTorch.

Run as `python3 test_fx2sg.py PATH/TO/sgc` (tests/meson.build does).  Four
modules (an MLP, samples/gpt.py's small GPT, a layer-norm classifier and a
pre-LN attention block) go
through the fx2sg command line, defined here and named to it as
`test_fx2sg.py:NAME`; `sgc run` of the exported graph must give what the
module gives in eager PyTorch (computed here, not by fx2sg), and with
`--loss` the gradients must match autograd's.  Then many small modules go
through fx2sg's Python API, one op family each, and the errors fx2sg
reports are checked.  With a torch that has torch.export, the three modules
are exported with --trace=export too.
"""
import contextlib
import importlib.machinery
import io
import importlib.util
import math
import os
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
FX2SG = os.path.join(HERE, "..", "..", "tools", "fx2sg")
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
HAVE_EXPORT = hasattr(torch, "export") and hasattr(getattr(torch, "export"), "export")


# ------------------------------------------------------------------ the three modules

class MLP(nn.Module):
    def __init__(self, d_in=16, d_hidden=32, d_out=8):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(self.drop(self.act(self.fc1(x))))


class LNClassifier(nn.Module):
    """Token embedding plus features, layer norm, ReLU, a classifier."""

    def __init__(self, vocab=10, d=12, classes=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes, bias=False)
        self.register_buffer("scale", torch.tensor([0.5] * d))

    def forward(self, tok, feats):
        h = self.emb(tok) + feats * self.scale
        h = F.relu(self.norm(self.proj(h)))
        return self.head(h.mean(dim=1))


class AttentionBlock(nn.Module):
    """A pre-LN causal transformer block: attention, then a GELU MLP.  It
    uses F.scaled_dot_product_attention where torch has it, else writes
    attention out with a causal mask buffer."""

    def __init__(self, d=16, heads=2, t=6):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        if not HAVE_SDPA:
            self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).tril())

    def attend(self, q, k, v):
        if HAVE_SDPA:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t = q.shape[-2]
        att = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        return att.softmax(dim=-1) @ v

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = self.attend(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))



# The small ResNet of samples/resnet_small.py (BasicBlocks with BatchNorm,
# max pooling, global average pooling, a linear classifier).
sys.path.insert(0, os.path.join(HERE, "..", "..", "samples"))
from resnet_small import resnet_small as small_resnet  # noqa: E402

# ------------------------------------------------------------------ Llama-style models

sys.path.insert(0, os.path.join(HERE, "..", "..", "samples"))
import llama as llama_sample  # noqa: E402
from llama import Llama as LlamaStyle  # noqa: E402


def llama():
    torch.manual_seed(4)
    return LlamaStyle()


def mistral():
    torch.manual_seed(5)
    return LlamaStyle(kv_heads=1, mask="window")


def qwen2():
    torch.manual_seed(6)
    return LlamaStyle(mask="float", bias=True)


def llama_eager():
    torch.manual_seed(8)
    return LlamaStyle(mask="eager")


def llama_tril():
    torch.manual_seed(7)
    return LlamaStyle(mask="tril")


def mlp():
    torch.manual_seed(1)
    return MLP()


def ln_classifier():
    torch.manual_seed(2)
    return LNClassifier()


def attention():
    torch.manual_seed(3)
    return AttentionBlock()


def gpt():
    """samples/gpt.py's small GPT (hand-written causal attention)."""
    return load_sample("gpt").gpt()


class ConvMisc(nn.Module):
    """Layers of convolutional and audio models that fx2sg decomposes into
    sgc's ops: Conv1d (conv2d over a height of 1), padding_mode other
    than zeros (F.pad before the convolution), GroupNorm and
    InstanceNorm (layer_norm over reshaped groups), F.pad in its four
    modes and with a crop, nearest upsampling, pixel_shuffle and
    pixel_unshuffle, elu, selu, celu, hardsigmoid, exp2, vector norms."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 3, padding=1)
        self.c1b = nn.Conv1d(8, 8, 3, stride=2, dilation=2, groups=2, bias=False)
        self.gn = nn.GroupNorm(4, 8)
        self.inn = nn.InstanceNorm1d(8, affine=True)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect")
        self.c1c = nn.Conv1d(4, 4, 3, padding=1, padding_mode="circular")
        self.gn2 = nn.GroupNorm(2, 8, affine=False)
        self.scale = nn.Parameter(torch.linspace(0.5, 2.0, 32).reshape(32, 1, 1))

    def forward(self, x):
        h = F.elu(self.gn(self.c1(x)), 0.5) + F.selu(self.c1c(x).repeat(1, 2, 1)) * 0.1
        h = F.celu(self.inn(h), 2.0) + F.hardsigmoid(h)
        h = F.pad(h, (2, 1)) + F.pad(h, (1, 2), mode="reflect") + \
            F.pad(h, (3, 0), mode="replicate") + F.pad(h, (-1, 4), value=0.5)
        h = self.c1b(h)                                   # [N, 8, 4]
        im = h.reshape(h.shape[0], 8, 2, 2)
        im = F.interpolate(im, scale_factor=2, mode="nearest")           # [N, 8, 4, 4]
        u = F.pixel_unshuffle(self.c2(im), 2)                           # [N, 32, 2, 2]
        im = self.gn2(F.pixel_shuffle(u * self.scale, 2))                 # [N, 8, 4, 4]
        im = F.pad(im, (1, 1, 0, 2), mode="circular")[..., 1:5, :4]
        v = im.flatten(1)
        n = torch.linalg.vector_norm(v, dim=1, keepdim=True) + v.norm(p=1, dim=-1, keepdim=True) + \
            torch.norm(v) + v.abs().norm(float("inf"), dim=1, keepdim=True)
        return torch.exp2(v * 0.1) + v / n


def conv_misc():
    torch.manual_seed(9)
    return ConvMisc()


class Interps(nn.Module):
    """F.interpolate's linear modes: bilinear by 2 and to a size, with and
    without align_corners, by a fractional scale_factor (PyTorch's
    1 / scale_factor source scale) and with recompute_scale_factor, a
    downsampling, linear over a sequence, trilinear; nearest with
    nn.Upsample, by fractional factors up and down (PyTorch's float
    source index), nearest-exact; area (adaptive average pooling) in 2-D
    and 1-D; bicubic up (by a factor, to a size with align_corners) and
    down; antialiased bilinear and bicubic, down to a size and by a
    factor, up, and with align_corners."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 3, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)

    def forward(self, x):
        h = self.c(x)                                              # [2, 3, 5, 4]
        a = self.up(h)                                             # [2, 3, 10, 8]
        b = F.interpolate(h, size=(10, 8), mode="bilinear", align_corners=True)
        c = F.interpolate(h, scale_factor=1.5, mode="bilinear")   # [2, 3, 7, 6]
        d = F.interpolate(h, scale_factor=(1.5, 1.75), mode="bilinear",
                          recompute_scale_factor=True)            # [2, 3, 7, 7]
        e = F.interpolate(a, size=(3, 5), mode="bilinear")        # down
        f = F.interpolate(h.flatten(2), scale_factor=2.5, mode="linear", align_corners=True)
        g = F.interpolate(h.unsqueeze(2), size=(2, 7, 5), mode="trilinear")
        n = F.interpolate(h, scale_factor=1.7, mode="nearest")    # [2, 3, 8, 6]
        m = F.interpolate(a, size=(7, 3), mode="nearest-exact") + \
            F.interpolate(a, size=(7, 3), mode="area")
        q = F.interpolate(h.flatten(2), size=7, mode="area") + \
            F.interpolate(h.flatten(2), scale_factor=0.6, mode="nearest-exact")[..., :7]
        return (a.mean() + b.sum((2, 3)) + c[..., :5, :4].sum((2, 3)) + d.mean((2, 3)) +
                e.amax((2, 3)) + f.sum(2) + g.mean((2, 3, 4)) + F.interpolate(
                    h, scale_factor=3, mode="nearest")[..., ::3, ::3].sum((2, 3)) +
                n.mean((2, 3)) * m.sum((2, 3)) + q.mean(2) + self.cubic(h, a))

    def cubic(self, h, a):
        u = F.interpolate(h, scale_factor=2, mode="bicubic")                # [2, 3, 10, 8]
        v = F.interpolate(h, size=(7, 6), mode="bicubic", align_corners=True)
        w = F.interpolate(a, size=(4, 3), mode="bicubic")
        return (u * a).mean((2, 3)) + v.amax((2, 3)) + w.sum((2, 3)) + self.antialiased(h, a)

    def antialiased(self, h, a):
        p = F.interpolate(a, size=(3, 5), mode="bilinear", antialias=True)
        r = F.interpolate(a, scale_factor=0.45, mode="bicubic", antialias=True)   # [2, 3, 4, 3]
        t = F.interpolate(h, scale_factor=1.6, mode="bilinear", antialias=True)   # up
        u = F.interpolate(a, size=(4, 3), mode="bilinear", antialias=True, align_corners=True)
        return p.sum((2, 3)) + r.mean((2, 3)) + t.amax((2, 3)) + u.sum((2, 3))


def interps():
    torch.manual_seed(12)
    return Interps()


class Seqs(nn.Module):
    """Sequence layers: BatchNorm1d, a depthwise Conv1d, the 1-D pools
    (as 2-D pools over a height of 1), nn.TransformerEncoder of two layers
    with a causal mask, nn.Transformer."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.dw = nn.Conv1d(4, 4, 5, padding=2, groups=4)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.tr = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True)

    def forward(self, x):
        h = self.dw(self.bn(x))                                           # [2, 4, 16]
        p = F.max_pool1d(h, 2) + F.avg_pool1d(h, 3, 2, 1) + F.adaptive_avg_pool1d(h, 1)
        causal = nn.Transformer.generate_square_subsequent_mask(4)
        e = self.enc(p, mask=causal)                                      # [2, 4, 8]
        return self.tr(p, e, tgt_mask=causal)


def seqs():
    torch.manual_seed(13)
    return Seqs()


class Recurrent(nn.Module):
    """nn.LSTM of two layers, batch first, its h_n and c_n used; a
    bidirectional nn.GRU, sequence first, from a given initial state; a
    bidirectional LSTM with proj_size and no biases; unrolled over time by
    fx2sg."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True)
        self.gru = nn.GRU(6, 5, bidirectional=True)
        self.h0 = nn.Parameter(torch.randn(2, 2, 5) * 0.5)
        self.plstm = nn.LSTM(4, 5, proj_size=3, bidirectional=True, bias=False,
                             batch_first=True)

    def forward(self, x):
        y, (h, c) = self.lstm(x)                                    # [2, 5, 6]
        z, hg = self.gru(y.transpose(0, 1), self.h0)                # [5, 2, 10]
        p, (hp, cp) = self.plstm(x)                                 # [2, 5, 6]
        return z.transpose(0, 1)[..., :6] + h[-1].unsqueeze(1) + c[0].unsqueeze(1) + \
            hg.sum(0).sum(-1)[:, None, None] + p * hp.sum((0, 2))[:, None, None] + \
            cp[1, :, :1].unsqueeze(1)


def recurrent():
    torch.manual_seed(14)
    return Recurrent()


class Einsums(nn.Module):
    """einsum as attention and linear layers write it: batched products,
    a contraction over two letters, an outer product, sums, implicit
    output order, three operands, one operand permuted."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5) * 0.3)
        self.v = nn.Parameter(torch.randn(3, 5) * 0.3)

    def forward(self, x, y):
        att = torch.einsum("bij,bkj->bik", x, x).softmax(-1)        # [2, 4, 4]
        o = torch.einsum("bik,bkj->bij", att, x)                     # [2, 4, 5]
        lin = torch.einsum("bij,kj->bik", o, self.w)                 # [2, 4, 6]
        full = torch.einsum("bij,bij->b", x, o)                      # [2]
        outer = torch.einsum("i,j->ij", y, y)                        # [3, 3]
        three = torch.einsum("bij,kj,kl->bil", x, self.v, outer)     # [2, 4, 3]
        t = torch.einsum("bij->jb", lin)                             # [6, 2]
        imp = torch.einsum("kj,bi", self.v, t)                       # implicit: [b, i, j, k]
        return (lin[..., :5] + torch.einsum("bil,lj->bij", three, self.v) +
                full[:, None, None] + imp.sum((0, 3))[:, :1, None]).mean(1)


def einsums():
    torch.manual_seed(10)
    return Einsums()


class Attentions(nn.Module):
    """nn.MultiheadAttention in its forms (self-attention with a causal
    float mask, batch first; cross-attention with kdim and vdim, seq
    first, a bool key_padding_mask and a float [N h, L, S] mask; a bool
    attn_mask with a key_padding_mask), nn.TransformerEncoderLayer
    (norm_first, GELU, a causal bool src_mask) and
    nn.TransformerDecoderLayer."""

    def __init__(self):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.cross = nn.MultiheadAttention(16, 4, kdim=8, vdim=12, bias=False)
        self.enc = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True,
                                              norm_first=True, activation="gelu")
        self.dec = nn.TransformerDecoderLayer(16, 2, 24, dropout=0.0, batch_first=True)
        self.register_buffer("pad", torch.tensor([[False] * 4 + [True] * 2,
                                                  [False] * 5 + [True]]))
        self.register_buffer("bias3", torch.randn(2 * 4, 5, 6))
        self.register_buffer("boolmask", torch.rand(5, 5) > 0.7)

    def forward(self, x, k, v):
        causal = nn.Transformer.generate_square_subsequent_mask(5)
        a = self.self_attn(x, x, x, attn_mask=causal, need_weights=False)[0]
        c, _ = self.cross(x.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                          key_padding_mask=self.pad, attn_mask=self.bias3)
        b = self.self_attn(x, x, x, attn_mask=self.boolmask & ~torch.eye(5, dtype=torch.bool),
                           key_padding_mask=self.pad[:, :5])[0]
        e = self.enc(a + b, src_mask=torch.ones(5, 5, dtype=torch.bool).triu(1))
        return self.dec(e, c.transpose(0, 1) + x, memory_key_padding_mask=self.pad[:, 1:])


def attentions():
    torch.manual_seed(11)
    return Attentions()


class Decoder(nn.Module):
    """A convolutional decoder's layers: nn.ConvTranspose2d with stride,
    output_padding and bias; grouped and dilated with padding beyond the
    kernel's reach (the stride-1 form's crop); F.conv_transpose2d with
    one int each; nn.ConvTranspose1d; torch.flip.  Strided ones run as one
    conv2d per output phase, except where a dim's kernel is below its
    stride or has both stride and dilation (`sparse`: stride 2 with a
    height 1 kernel, and with dilation 2 across); `wide` has phases of
    2 and 1 taps and padding that crops more than a phase's reach.  Pools
    with ceil_mode (windows past the input's end), count_include_pad=False
    and divisor_override, 2-D and 1-D."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.grp = nn.ConvTranspose2d(6, 4, (3, 2), stride=(1, 2), padding=(3, 0),
                                      dilation=(2, 1), groups=2, bias=False)
        self.w = nn.Parameter(torch.randn(4, 3, 2, 2) * 0.3)
        self.seq = nn.ConvTranspose1d(3, 2, 4, stride=3, padding=2)
        self.sparse = nn.ConvTranspose2d(4, 2, (1, 3), stride=2, dilation=(1, 2))
        self.wide = nn.ConvTranspose2d(2, 3, 5, stride=3, padding=(4, 2),
                                       output_padding=(2, 1))

    def forward(self, x):
        h = torch.tanh(self.up(x))                       # [N, 6, 8, 10]
        h = self.grp(h.flip(-1))                         # [N, 4, 6, 20]
        h = F.conv_transpose2d(h, self.w, stride=2)      # [N, 3, 12, 40]
        s = self.seq(h.mean(2))                          # [N, 2, 117]
        e = self.wide(torch.tanh(self.sparse(x)))       # [N, 2, 7, 13] -> [N, 3, 17, 38]
        q = F.max_pool2d(h, 3, 2, 1, ceil_mode=True) + \
            F.avg_pool2d(h, 3, 2, 1, ceil_mode=True, count_include_pad=False)   # [N, 3, 7, 21]
        d = F.avg_pool2d(e, (2, 3), ceil_mode=True, divisor_override=4)        # [N, 3, 9, 13]
        r = F.max_pool1d(s, 2, ceil_mode=True)[..., :8] + \
            F.avg_pool1d(s, 4, 3, 1, ceil_mode=True)[..., :8]
        return h.sum((1, 2))[:, :8] + s.flip(1, 2)[..., :8].mean(1) + e.mean((1, 2))[:, :8] + \
            q.mean((1, 2))[:, :8] + d.mean((1, 2))[:, :8] + r.sum(1)


def decoder():
    torch.manual_seed(13)
    return Decoder()


class Scans(nn.Module):
    """Indices and running sums: argmax and argmin (with a dim, keepdim,
    over everything, ties taking the first), max(dim)'s indices, cumsum
    of floats (the gradient through it) and of a bool mask as Hugging
    Face's position ids (mask.long().cumsum(-1) - 1), cumprod; topk as a
    mixture-of-experts router takes it (values and indices, the smallest
    too); sort (descending, with ties, the values' gradient through it)
    and argsort (stable, along dim 0); advanced indexing: a table param
    by an index buffer (a Swin block's relative position bias), a
    sequence classifier's logits at each row's last position; cummax
    (ties), cummin and logcumsumexp (of values whose exp overflows)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(9, 4)
        self.table = nn.Parameter(torch.randn(5, 2))
        self.register_buffer("rel", torch.arange(21).reshape(3, 7) % 10 - 5)

    def forward(self, x, mask):
        r = (x * 2).floor()                               # ties
        i = r.argmax(1) + torch.argmin(r, dim=-1, keepdim=True).squeeze(-1)
        vals, j = x.max(dim=1)
        pos = mask.long().cumsum(-1) - 1
        c = torch.cumsum(x * 2, dim=1) + x.cumsum(0) + torch.cumprod(x * 0.5 + 1, dim=1)
        w, e = torch.topk(F.softmax(x, -1), 2)                 # a router's top 2
        lo, le = x.topk(3, dim=0, largest=False, sorted=False)
        sv, si = torch.sort(r + x * 0.01, dim=1, descending=True)
        ss = x.sort()[0] + torch.argsort(r, dim=0, stable=True).float().mean(0)
        last = x[torch.arange(3), mask.long().sum(1) - 1]            # [3]
        cm, ci = torch.cummax(r, dim=1)                               # ties: the later index
        return (c + self.emb(pos.clamp(min=0)).sum(-1)) * vals[:, None] + \
            (i + j + r.argmax())[:, None].float() + (w * e).sum(-1, keepdim=True) + \
            lo.sum(0) * le.float().mean() + sv * ss + si.float() * 0.01 + \
            self.table[self.rel].prod(-1) + last[:, None] + cm * 0.5 + ci.float() * 0.1 + \
            torch.cummin(x, 0)[0] + torch.logcumsumexp(x * 30, dim=1) * 0.1


def scans():
    torch.manual_seed(14)
    return Scans()


class Video(nn.Module):
    """nn.Conv3d (a video model's patch embedding and a grouped, dilated
    one with depth padding) and F.conv3d with one int each; 3-D pooling:
    max with padding and a depth stride, average, adaptive average to
    windows of one size and of two."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv3d(3, 4, (2, 3, 3), stride=(2, 1, 2), padding=(0, 1, 0))
        self.grp = nn.Conv3d(4, 6, 3, padding=(2, 1, 1), dilation=(2, 1, 1), groups=2,
                             bias=False)
        self.same = nn.Conv3d(6, 6, 3, padding="same", groups=6)
        self.w = nn.Parameter(torch.randn(2, 6, 1, 2, 2) * 0.2)

    def forward(self, x):
        h = F.gelu(self.patch(x))                         # [N, 4, 3, 6, 3]
        h = self.grp(h)                                   # [N, 6, 3, 6, 3]
        h = h + self.same(h)
        m = F.max_pool3d(h, (3, 2, 3), stride=(2, 2, 1), padding=(1, 0, 1))  # [N, 6, 2, 3, 3]
        v = F.avg_pool3d(h, 2, stride=1) + F.adaptive_avg_pool3d(h, (1, 2, 1))[:, :, :, :1]
        u = F.adaptive_avg_pool3d(m, (1, 1, 1)).flatten(1) + \
            F.adaptive_avg_pool3d(h, (2, 3, 2)).mean((2, 3, 4)) + v.mean((2, 3, 4))
        return F.conv3d(h, self.w, stride=1).mean((2, 3, 4)) + h.sum((1, 2, 3))[:, :2] + \
            u[:, 2:4]


def video():
    torch.manual_seed(15)
    return Video()


class ViewWrites(nn.Module):
    """In-place writes into slices of a tensor (x[a:b].zero_(), a row's
    copy_, a strided slice's mul_, a write under Ellipsis that reads the
    tensor as earlier writes left it), and a cloned param's slice zeroed
    as Swin V2 zeroes its k bias: each a new value of the whole tensor;
    the gradient flows to what the writes did not overwrite and to the
    values written."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5))
        self.bias = nn.Parameter(torch.randn(6))

    def forward(self, x):
        h = x * self.w
        h[:, 1:3].zero_()
        h[0].copy_(self.w * 3)
        h[1:, ::2].mul_(2.0)
        h[..., -1:].add_(h[..., :1])
        b = self.bias.clone()
        b[2:4].zero_()
        return h * b[:5] + b[5]


def view_writes():
    torch.manual_seed(15)
    return ViewWrites()


class Windows(nn.Module):
    """Sliding windows: F.unfold (im2col, as timm's VOLO and TNT take
    patches) with padding, stride and dilation, nn.Unfold, F.fold summing
    overlapping windows back, Tensor.unfold's windows along a dim."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 3, 7, 6))
        self.unf = nn.Unfold(2, stride=2)

    def forward(self, x):
        h = x * self.w                                                  # [N, 3, 7, 6]
        cols = F.unfold(h, (3, 2), dilation=(1, 2), padding=1, stride=(2, 1))   # [N, 18, 16]
        back = F.fold(cols * 0.5, (7, 6), (3, 2), dilation=(1, 2), padding=1, stride=(2, 1))
        seq = h.flatten(2).unfold(-1, 5, 3)                             # [N, 3, 13, 5]
        return cols.mean(1)[:, :8] + back.sum((1, 2))[:, :6].repeat(1, 2)[:, :8] + \
            seq.amax(-1)[..., :8].sum(1) + self.unf(h).sum(1)[:, :6].sum(-1, keepdim=True)


def windows():
    torch.manual_seed(16)
    return Windows()


class LongTail(nn.Module):
    """Ops fx2sg writes with sgc's pointwise, reduction and shape ops, with
    gradients: losses computed inside forward (BCE with logits and
    pos_weight, smooth L1, Huber, KL divergence, NLL), nn.PReLU,
    logsigmoid, lerp, addcmul, hypot, logaddexp, remainder, cosine
    similarity, pairwise distance, diagonal and trace, movedim, tile,
    diff."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.act = nn.PReLU(3)

    def forward(self, x):
        h = x @ self.w                                               # [N, 3, 4]
        p = self.act(h)
        y = h.flip(-1).sigmoid()
        losses = torch.stack([
            F.binary_cross_entropy_with_logits(h, y, pos_weight=torch.full((4,), 2.0)),
            F.smooth_l1_loss(h, p, beta=0.3), F.huber_loss(h, y, delta=0.5),
            F.kl_div(F.log_softmax(h, -1), F.softmax(p, -1), reduction="batchmean"),
            F.nll_loss(F.log_softmax(h, 1), torch.tensor([[0, 1, 2, 0]]).expand(x.shape[0], 4))])
        e = torch.lerp(h, p, 0.25) + torch.addcmul(h, p, y, value=0.5) + torch.hypot(h, y) + \
            torch.logaddexp(h, p) + F.logsigmoid(h) + torch.remainder(h, 0.7)
        c = F.cosine_similarity(h, p, dim=-1) + F.pairwise_distance(h, p)
        d = torch.diagonal(h[:, :, :3], dim1=1, dim2=2).sum(1) + torch.trace(self.w)
        t = torch.movedim(h, 2, 0).tile((1, 2, 1)).diff(dim=0).mean((0, 2))   # [2N]
        return e.mean((1, 2)) + c.sum(1) + d + losses.sum() + t[:x.shape[0]]


def long_tail():
    torch.manual_seed(17)
    return LongTail()


# (mode, padding_mode, align_corners): every mode and padding mode, reflection
# (whose formula depends on it) with and without align_corners
SAMPLING_CASES = [("bilinear", "zeros", False), ("bilinear", "border", True),
                  ("bilinear", "reflection", False), ("bilinear", "reflection", True),
                  ("nearest", "zeros", True), ("nearest", "reflection", False),
                  ("bicubic", "zeros", False), ("bicubic", "reflection", True)]


class Sampling(nn.Module):
    """F.grid_sample in each mode (bilinear, nearest, bicubic) and padding
    mode (zeros, border, reflection), SAMPLING_CASES, at a grid computed
    from the input (partly outside [-1, 1]; the gradient reaches it) and
    at F.affine_grid of a parameter; a 5-D (trilinear) sample."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 2, 3, padding=1)
        self.theta = nn.Parameter(torch.tensor([[[0.9, 0.2, 0.1], [-0.1, 1.1, -0.2]]]))

    def forward(self, x):                                           # [N, 3, 5, 6]
        h = self.c(x)
        g = torch.tanh(h[:, :, :4, :3].permute(0, 2, 3, 1)) * 1.4    # [N, 4, 3, 2]
        outs = []
        for mode, pad, align in SAMPLING_CASES:
            y = F.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=align)
            outs.append(y.mean((2, 3)))
        ag = F.affine_grid(self.theta.expand(x.shape[0], 2, 3), [x.shape[0], 2, 4, 5],
                           align_corners=False)
        outs.append(F.grid_sample(h, ag, align_corners=False).sum((2, 3)).repeat(1, 2)[:, :3])
        v = h.unsqueeze(2).expand(x.shape[0], 2, 3, 5, 6)               # [N, 2, 3, 5, 6]
        g3 = torch.cat([g, g[..., :1] * 0.5], -1).unsqueeze(1).expand(x.shape[0], 2, 4, 3, 3)
        outs.append(F.grid_sample(v, g3, padding_mode="border").mean((2, 3, 4)).repeat(1, 2)[:, :3])
        return torch.stack(outs, 1)


def sampling():
    torch.manual_seed(19)
    return Sampling()


class Scatters(nn.Module):
    """Writes at integer indices: index_add_ (repeated indices, alpha),
    index_copy, index_fill, scatter_add with an index smaller than the
    tensor, scatter of a src along a permutation and of a value (a one-hot
    of argmax), scatter_reduce 'sum', index_put_ with accumulate over two
    index tensors, and index_put_ at indices that may be negative;
    masked_scatter (a mask broadcast over the last dim, as a vision-language
    model puts image features into text embeddings); indices constant and
    computed at run time; gradients reach both the tensor written into and
    the values."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4))
        self.register_buffer("rows", torch.tensor([4, 0, 4, 2, 5, 0, 1]))

    def forward(self, x):                                           # [N, 7, 4]
        n = x.shape[0]
        h = self.w.unsqueeze(0) * 1.5 + x[:, :6]                     # [N, 6, 4]
        a = h.clone().index_add_(1, self.rows, x, alpha=0.5)
        top = x[:, :6].sum(2).argsort(1)[:, :3]                      # [N, 3], distinct per row
        b = torch.zeros(n, 7, 4).scatter_add(1, top.unsqueeze(2).expand(n, 3, 2), x[:, :3, :2] * 2)
        perm = x[0, :, 0].argsort()                                  # 7 distinct
        c = torch.zeros_like(x).scatter(1, perm.view(1, 7, 1).expand(n, 7, 4), x)
        hot = torch.zeros(n, 7).scatter(1, x.sum(2).argmax(1, keepdim=True), 1.0)
        d = h.index_copy(1, torch.tensor([5, 1, 3]), x[:, 4:7] * 3).index_fill(2, perm[:2] % 4, -1.0)
        e = torch.zeros(n, 7).scatter_reduce(1, top, x[:, :3, 0], "sum")
        f = self.w.clone()
        f.index_put_((self.rows[:4], top[0, :1].expand(4) % 4), x[0, :4, 0], accumulate=True)
        g = h.transpose(0, 1).clone()                               # [6, N, 4]
        g.index_put_((top[1, :2] - 1,), x[:, :2].transpose(0, 1) * 4)   # indices may be -1
        m = h.masked_scatter(x[:, :6, :1] > 0.3, x * 2)             # as image features go
        return a.sum(2)[:, :6] + b.sum(2)[:, :6] + c.sum(2)[:, :6] + hot[:, :6] + \
            d.mean(2) + e[:, :6] + f.sum(1) + g.sum(2).t() + m.mean(2)


def scatters():
    torch.manual_seed(23)
    return Scatters()


class Pools3d(nn.Module):
    """3-D pools with PyTorch's options: ceil_mode (max and avg, a last
    window that starts in the padding's reach), count_include_pad=False
    with padding, divisor_override, a dilated max pool (in depth, and in
    all three dims with ceil_mode); return_indices with the values alone
    used."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv3d(2, 3, 3, padding=1)

    def forward(self, x):                                   # [N, 2, 5, 6, 7]
        h = self.c(x)
        a = F.max_pool3d(h, 2, stride=2, ceil_mode=True)                         # [N, 3, 3, 3, 4]
        b = F.avg_pool3d(h, (3, 2, 3), stride=(2, 2, 2), padding=1, ceil_mode=True,
                         count_include_pad=False)
        c = F.avg_pool3d(h, 3, stride=1, padding=(1, 0, 1), count_include_pad=False)
        d = F.avg_pool3d(h, (2, 3, 2), stride=(1, 2, 2), divisor_override=5)
        e = F.max_pool3d(h, (2, 2, 3), stride=1, dilation=(2, 1, 1))
        f = F.max_pool3d(h, 2, stride=2, padding=1, dilation=2, ceil_mode=True)
        g, _ = F.max_pool3d(h, 3, stride=2, padding=1, return_indices=True)
        mean = lambda t: t.mean((2, 3, 4))
        return mean(a) + mean(b) + mean(c) + mean(d) + mean(e) + mean(f) + mean(g)


def pools3d():
    torch.manual_seed(6)
    return Pools3d()


class Unpool(nn.Module):
    """An encoder's max pool and a decoder's max_unpool2d at its indices
    (SegNet's), then a convolution: the gradient reaches the first
    convolution through the unpool's values."""

    def __init__(self):
        super().__init__()
        self.c, self.d = nn.Conv2d(2, 3, 3, padding=1), nn.Conv2d(3, 2, 3, padding=1)

    def forward(self, x):
        y, i = F.max_pool2d(self.c(x), 2, return_indices=True)
        return self.d(F.max_unpool2d(y * 2, i, 2, output_size=x.shape[-2:]))


def unpool():
    torch.manual_seed(6)
    return Unpool()


class ScatterReductions(nn.Module):
    """scatter_reduce with each reduction ('prod', 'mean', 'amax', 'amin',
    and 'sum' without self), with and without include_self, along a middle
    dim, at indices that repeat and leave rows unhit, a constant one and
    one computed at run time; a zero among the values multiplied;
    index_reduce of whole slices; gradients reach both the tensor written
    into and the values."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 4))
        g = torch.Generator().manual_seed(5)
        self.register_buffer("at", torch.randint(0, 4, (2, 6, 4), generator=g))
        self.register_buffer("rows", torch.tensor([4, 0, 4, 2, 0, 0]))
        self.register_buffer("keep", (torch.arange(48).view(2, 6, 4) != 13).float())

    def forward(self, x):                                           # [N, 7, 4]
        h = self.w.unsqueeze(0) * 1.5 + x[:, :5]                     # [N, 5, 4]
        src = x[:, 1:] * self.keep[:x.shape[0]]                      # [N, 6, 4], one zero
        moved = x[:, :6].argsort(1) % 5                             # computed indices
        out = h.scatter_reduce(1, self.at, src, "sum", include_self=False)
        for how in ("prod", "mean", "amax", "amin"):
            for own in (True, False):
                out = out + h.scatter_reduce(1, self.at, src, how, include_self=own)
        out = out + h.scatter_reduce(1, moved, src * 2, "amax", include_self=False)
        r = h.index_reduce(1, self.rows, x[:, 1:] * 0.5, "mean") + \
            h.index_reduce(1, self.rows, x[:, :6], "amin", include_self=False)
        return out.sum(2) + r.mean(2)


def scatter_reductions():
    torch.manual_seed(29)
    return ScatterReductions()


class TailMath(nn.Module):
    """More of PyTorch's long tail written with sgc's ops: cdist (p = 2,
    1), pdist, logit with eps, xlogy, sinc, copysign, softmin, rot90, cross, kron, block_diag, trapezoid (dx and x)
    and cumulative_trapezoid, nansum and nanmean over NaNs, std_mean,
    median and kthvalue, adaptive_max_pool2d over uneven windows,
    lp_pool2d and lp_pool1d, local_response_norm, take_along_dim,
    special.ndtr and special.entr, cartesian_prod, matrix_norm ('fro', 1,
    -inf), embedding_bag (a bag per row; bags at offsets, one empty, with
    'mean', 'max' with padding_idx, and per_sample_weights with
    include_last_offset); gradients reach the param through each."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))
        self.register_buffer("rows2d", torch.tensor([[0, 2], [3, 3], [1, 0]]))
        self.register_buffer("rows1d", torch.tensor([2, 0, 1, 3, 1, 1, 0]))
        self.register_buffer("starts", torch.tensor([0, 2, 2, 5]))
        self.register_buffer("ends", torch.tensor([0, 3, 6, 7]))

    def forward(self, x):                                   # [N, 4, 6]
        h = x * 1.5 + self.w
        pos = h.abs() + 0.1
        nan = torch.where(x > 1, torch.full_like(h, float("nan")), h)
        terms = [
            torch.cdist(h, h.flip(1)), torch.cdist(h, x, p=1.0), F.pdist(h[0]),
            torch.logit(torch.sigmoid(h), eps=0.2), torch.xlogy(h, pos), torch.sinc(h),
            torch.copysign(h, -x), F.softmin(h, -1),
            torch.rot90(h, 1, (1, 2)), torch.rot90(h, 3, (1, 2)) * 0.5,
            torch.cross(h[..., :3], x[..., 3:], dim=-1), torch.kron(self.w[:2, :2], h[0, :2, :3]),
            torch.block_diag(self.w[:2, :3], h[0, :1, :2], h[1, 0, 1]),
            torch.trapezoid(h, dim=-1), torch.trapezoid(h, x.cumsum(1), dim=1),
            torch.cumulative_trapezoid(h, dx=0.5, dim=1), torch.nansum(nan, 2),
            torch.nanmean(nan, (1, 2)), torch.std_mean(h, 1)[0], torch.std_mean(h, 2)[1],
            torch.std(h, 2, unbiased=False), torch.median(h, 1).values,
            torch.kthvalue(h, 2, -1).values, torch.median(h),
            F.adaptive_max_pool2d(h.unsqueeze(1), (3, 4)), F.lp_pool2d(h.unsqueeze(1), 2, (2, 3)),
            F.lp_pool1d(pos, 3, 2), F.local_response_norm(h.unsqueeze(-1), 3),
            torch.take_along_dim(h, x.argsort(2)[..., :3], 2), torch.special.ndtr(h),
            torch.special.entr(pos), torch.cartesian_prod(h[0, 0], h[1, 1, :2]),
            torch.linalg.matrix_norm(h), torch.linalg.matrix_norm(h, 1),
            torch.linalg.matrix_norm(h, float("-inf"), dim=(0, 2)),
            F.embedding_bag(self.rows2d, h[0], mode="sum"),
            F.embedding_bag(self.rows1d, h[1], self.starts, mode="mean"),
            F.embedding_bag(self.rows1d, h[2], self.starts, mode="max", padding_idx=1),
            F.embedding_bag(self.rows1d, h[0], self.ends, mode="sum", include_last_offset=True,
                            per_sample_weights=x[0].flatten()[:7])]
        return torch.stack([t.mean() for t in terms])


def tail_math():
    torch.manual_seed(31)
    return TailMath()


class TailLosses(nn.Module):
    """Losses computed in forward: margin_ranking, hinge_embedding,
    soft_margin, multilabel_soft_margin, cosine_embedding, poisson_nll
    (log input, and probabilities with full), triplet_margin (p = 2, and 1 with swap), multi_margin
    (p = 1, and 2 with weights and reduction='sum'); gradients reach the
    param through each.  (gaussian_nll_loss, which torch.export cannot
    trace, is GaussianNll's.)"""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 6))
        g = torch.Generator().manual_seed(3)
        self.register_buffer("sgn", torch.randn(5, 6, generator=g).sign())
        self.register_buffer("bin", (torch.rand(5, 6, generator=g) > 0.5).float())
        self.register_buffer("lab", torch.randint(0, 6, (5,), generator=g))
        self.register_buffer("cls", torch.tensor([1, -1, 1, -1, 1]))
        self.register_buffer("cw", torch.rand(6, generator=g) + 0.5)

    def forward(self, x):                                   # [5, 6]
        h = x + self.w
        return torch.stack([
            F.margin_ranking_loss(h, x * 0.5, self.sgn, margin=0.1),
            F.hinge_embedding_loss(h, self.sgn, margin=0.5),
            F.soft_margin_loss(h, self.sgn),
            F.multilabel_soft_margin_loss(h, self.bin),
            F.cosine_embedding_loss(h, x, self.cls, margin=0.2),
            F.poisson_nll_loss(h, x.abs()),
            F.poisson_nll_loss(h.abs() + 0.1, x.abs() * 3, log_input=False, full=True),
            F.triplet_margin_loss(h, x, x.flip(0)),
            F.triplet_margin_loss(h, x, h.flip(0), p=1, swap=True, margin=2.0),
            F.multi_margin_loss(h, self.lab),
            F.multi_margin_loss(h, self.lab, p=2, weight=self.cw, reduction="sum")])


def tail_losses():
    torch.manual_seed(37)
    return TailLosses()


class ComplexLayers(nn.Module):
    """Complex tensors, which fx2sg carries as their real and imaginary
    parts: rotary embeddings as Meta's Llama writes them (view_as_complex,
    a torch.polar buffer, view_as_real), an FNO spectral layer (rfft2
    with norm='ortho', a complex param through einsum, irfft2 to a given
    size: its modes put back by cat), FNet's token mixing
    (fftn(...).real), a complex magnitude, a spectrogram's (stft with
    a Hann window) and an overlap-add (F.fold, kernel 8 at stride 3)."""

    def __init__(self):
        super().__init__()
        t, f = torch.arange(6.0), 1.0 / (100 ** (torch.arange(0, 4).float() / 4))
        self.register_buffer("freqs_cis", torch.polar(torch.ones(6, 4), torch.outer(t, f)),
                             persistent=False)
        self.proj = nn.Linear(8, 8)
        self.modes = nn.Parameter(torch.randn(2, 2, 3, 3, dtype=torch.cfloat) * 0.4)
        self.out = nn.Linear(8, 8)
        self.register_buffer("window", torch.hann_window(8))

    def forward(self, x):                                   # [2, 2, 6, 8]
        h = self.proj(x)
        z = torch.view_as_complex(h.float().reshape(*h.shape[:-1], -1, 2))
        h = torch.view_as_real(z * self.freqs_cis).flatten(3).type_as(h)
        X = torch.fft.rfft2(h, norm="ortho")                # [2, 2, 6, 5]
        Y = torch.einsum("bixy,ioxy->boxy", X[:, :, :3, :3], self.modes)
        Y = torch.cat([Y, torch.zeros(2, 2, 3, 2, dtype=Y.dtype)], -1)
        Y = torch.cat([Y, torch.zeros(2, 2, 3, 5, dtype=Y.dtype)], -2)
        h = h + torch.fft.irfft2(Y, s=(6, 8), norm="ortho")
        h = h + torch.fft.fftn(h, dim=(2, 3)).real * 0.1
        spec = torch.stft(h.reshape(4, 48), 8, hop_length=4, window=self.window,
                          return_complex=True).abs()        # [4, 5, 13]
        ola = F.fold(h.reshape(4, 6, 8).transpose(1, 2), (1, 23), (1, 8), stride=(1, 3))
        return self.out(h) + torch.fft.fft(h).abs() * 0.1 + spec.mean((1, 2)).view(2, 2, 1, 1) \
            + ola.mean((1, 2, 3)).view(2, 2, 1, 1)


def complex_layers():
    torch.manual_seed(41)
    return ComplexLayers()


MODELS = [
    # name (of the factory), factory, --input flags, loss for the gradient test
    ("complex_layers", complex_layers, ["x=f32[2,2,6,8]"], "mse"),
    ("view_writes", view_writes, ["x=f32[3,5]"], "mse"),
    ("windows", windows, ["x=f32[2,3,7,6]"], "mse"),
    ("long_tail", long_tail, ["x=f32[2,3,4]"], "mse"),
    ("sampling", sampling, ["x=f32[2,3,5,6]"], "mse"),
    ("scatters", scatters, ["x=f32[2,7,4]"], "mse"),
    ("scatter_reductions", scatter_reductions, ["x=f32[2,7,4]"], "mse"),
    ("pools3d", pools3d, ["x=f32[2,2,5,6,7]"], "mse"),
    ("unpool", unpool, ["x=f32[2,2,6,7]"], "mse"),
    ("tail_math", tail_math, ["x=f32[3,4,6]"], "mse"),
    ("tail_losses", tail_losses, ["x=f32[5,6]"], "mse"),
    ("conv_misc", conv_misc, ["x=f32[2,4,8]"], "mse"),
    ("decoder", decoder, ["x=f32[2,4,4,5]"], "mse"),
    ("scans", scans, ["x=f32[3,7]", "mask=bool[3,7]"], "mse"),
    ("video", video, ["x=f32[2,3,6,6,7]"], "mse"),
    ("einsums", einsums, ["x=f32[2,4,5]", "y=f32[3]"], "mse"),
    ("interps", interps, ["x=f32[2,3,5,4]"], "mse"),
    ("seqs", seqs, ["x=f32[2,4,16]"], "mse"),
    ("recurrent", recurrent, ["x=f32[2,5,4]"], "mse"),
    ("attentions", attentions, ["x=f32[2,5,16]", "k=f32[2,6,8]", "v=f32[2,6,12]"], "mse"),
    ("mlp", mlp, ["x=f32[4,16]"], "mse"),
    ("gpt", gpt, ["idx=i64[4,16]"], "cross_entropy"),
    ("ln_classifier", ln_classifier, ["tok=i64[3,4]", "feats=f32[3,4,12]"], "cross_entropy"),
    ("attention", attention, ["x=f32[2,6,16]"], "mse"),
    ("small_resnet", small_resnet, ["x=f32[2,3,16,16]"], "cross_entropy"),
    ("llama", llama, ["tok=i64[2,6]"], "cross_entropy"),
    ("mistral", mistral, ["tok=i64[2,6]"], "cross_entropy"),
    ("qwen2", qwen2, ["tok=i64[2,6]"], "cross_entropy"),
    ("llama_tril", llama_tril, ["tok=i64[2,6]"], "cross_entropy"),
    ("llama_eager", llama_eager, ["tok=i64[2,6]"], "cross_entropy"),
]


# ------------------------------------------------------------------ the tests

SAMPLES = os.path.join(HERE, "..", "..", "samples")


def load_sample(name):
    """samples/NAME.py as a module."""
    path = os.path.join(SAMPLES, name + ".py")
    spec = importlib.util.spec_from_file_location("sample_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_sample_files(S):
    """samples/gpt.sg and gpt.safetensors are what the command in
    samples/gpt.py makes (the banner's torch version aside)."""
    sg, par = S.path("sample_gpt.sg"), S.path("sample_gpt.p")
    pr = run_fx2sg(os.path.join(SAMPLES, "gpt.py") + ":gpt", "-o", sg, "--trace=fx",
                   "--graph", "gpt", "--input", "idx=i64[4,16]", "--loss", "cross_entropy",
                   "--optimizer", "adamw(lr=3e-4, weight_decay=0.1)", "--params", par)
    if pr.returncode != 0:
        S.report("samples/gpt export", "fx2sg exited %d: %s" % (pr.returncode, pr.stderr))
        return
    body = lambda text: [l for l in text.splitlines() if not l.startswith("# Generated by")]
    why = None
    if body(open(sg).read()) != body(open(os.path.join(SAMPLES, "gpt.sg")).read()):
        why = "samples/gpt.sg differs from a new export: run the command in samples/gpt.py"
    else:
        made, kept = stio.load(par), stio.load(os.path.join(SAMPLES, "gpt.safetensors"))
        if sorted(made) != sorted(kept):
            why = "samples/gpt.safetensors names %s, a new export %s" % (sorted(kept), sorted(made))
        for n in sorted(made):
            why = why or compare(kept[n], made[n], atol=0, rtol=0)
    S.report("samples/gpt.sg and gpt.safetensors up to date", why)

def load_fx2sg():
    loader = importlib.machinery.SourceFileLoader("fx2sg", FX2SG)
    spec = importlib.util.spec_from_loader("fx2sg", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def flatten(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in flatten(v)]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in flatten(v)]
    return []


def run_fx2sg(*args):
    """The fx2sg command, as a process."""
    return subprocess.run([sys.executable, FX2SG] + list(args), capture_output=True,
                          text=True, timeout=120)


class Done:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def main_fx2sg(*args):
    """The fx2sg command line run in this process (fx2sg.main): the same
    code without a second second of importing torch."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = FX.main(list(args))
    return Done(rc, out.getvalue(), err.getvalue())


def sgc_run(S, sg, params, inputs, out):
    pr = subprocess.run([S.sgc, "run", sg, "--params", params, "--inputs", inputs,
                         "--out", out], capture_output=True, text=True, timeout=120)
    if pr.returncode != 0:
        return None, "sgc run exited %d: %s" % (pr.returncode, pr.stderr.strip()[:1500])
    return stio.load(out), None


def torch_export_fails(factory, inp):
    """Why torch.export.export of the model fails on the inputs fx2sg
    saved for its torch.fx check, without fx2sg (its exception's type), or
    None."""
    if not os.path.exists(inp):
        return None
    inputs = stio.load(inp)
    try:
        torch.export.export(factory().eval(), (), inputs)
    except Exception as e:  # noqa: BLE001 - whatever torch.export raises
        return type(e).__name__
    return None


def check_model(S, name, factory, flags, loss, trace="fx"):
    """fx2sg's command line on one model, then sgc run against eager."""
    tag = "%s[%s]" % (name, trace)
    sg, par, inp = S.path(tag + ".sg"), S.path(tag + ".p"), S.path(tag + ".i")
    args = ["%s:%s" % (os.path.join(HERE, "test_fx2sg.py"), name), "-o", sg, "--params", par,
            "--save-inputs", inp, "--trace", trace, "--seed", "7"]
    for f in flags:
        args += ["--input", f]
    pr = run_fx2sg(*args)
    if pr.returncode != 0:
        own = trace == "export" and torch_export_fails(factory, S.path("%s[fx].i" % name))
        lines = pr.stderr.splitlines()
        said = any(l.startswith("fx2sg: error: torch.export failed") for l in lines)
        crashed = any(l.startswith("Traceback (most recent call last)") for l in lines)
        if own and pr.returncode == 1 and said and not crashed:
            # PyTorch's own limitation (torch.export of the module fails
            # alone): fx2sg must say so; --trace auto then uses torch.fx.
            S.report(tag + " export: torch.export's own failure (%s) reported" % own, None)
        else:
            S.report(tag + " export", "fx2sg exited %d: %s" % (pr.returncode,
                                                              pr.stderr.strip()))
        return
    text = open(sg).read()
    module = factory().eval()
    params = stio.load(par)
    # Every param and buffer is in the file, equal to the module's; params
    # are `param`, buffers `const`.
    why = None
    decls = [l.split()[:2] for l in text.splitlines()]
    for n, t in list(module.named_parameters()) + list(module.named_buffers()):
        if n.endswith("num_batches_tracked"):
            continue    # BatchNorm's counter: read only with momentum=None
        kind = "param" if isinstance(t, nn.Parameter) else "const"
        if n not in params:
            why = "'%s' is not in the params file" % n
        elif [kind, "%" + n] not in decls:
            why = "'%s' is not declared as %s:\n%s" % (n, kind, text)
        else:   # a complex param as view_as_real (fx2sg's convention)
            why = compare(params[n], torch.view_as_real(t.detach()) if t.is_complex()
                          else t.detach())
        if why:
            break
    S.report(tag + " params", why)

    inputs = stio.load(inp)
    out, why = sgc_run(S, sg, par, inp, S.path(tag + ".o"))
    if why:
        S.report(tag + " forward", why + "\n--- program:\n" + text)
        return
    with torch.no_grad():
        exp = module(**inputs)
    S.report(tag + " forward", compare(out["out"], exp, atol=1e-5, rtol=1e-4))

    # Gradients: --loss adds the loss and backward; sgc's grad.NAME must
    # match autograd's.
    lsg, linp = S.path(tag + ".loss.sg"), S.path(tag + ".loss.i")
    pr = main_fx2sg(*(args[:1] + ["-o", lsg, "--params", par, "--save-inputs", linp,
                                 "--loss", loss, "--trace", trace, "--seed", "7"] +
                     [x for f in flags for x in ("--input", f)]))
    if pr.returncode != 0:
        S.report(tag + " backward", "fx2sg --loss exited %d: %s" % (pr.returncode, pr.stderr))
        return
    linputs = stio.load(linp)
    out, why = sgc_run(S, lsg, par, linp, S.path(tag + ".loss.o"))
    if why:
        S.report(tag + " backward", why)
        return
    target = linputs.pop("target")
    module.zero_grad()
    y = module(**linputs)
    lv = (F.mse_loss if loss == "mse" else F.cross_entropy)(y, target)
    lv.backward()
    why = compare(out["loss"], lv.detach(), atol=1e-5, rtol=1e-4)
    for n, p in module.named_parameters():
        if why:
            break
        if "grad." + n not in out:
            why = "grad.%s missing from --out" % n
        else:
            want = torch.view_as_real(p.grad) if p.grad.is_complex() else p.grad
            why = compare(out["grad." + n], want, atol=1e-5, rtol=1e-4)
            why = why and "grad.%s: %s" % (n, why)
    S.report(tag + " backward", why)


class Fn(nn.Module):
    """A module around a function of (self, inputs...), with optional
    params and buffers."""

    def __init__(self, fn, params=None, buffers=None):
        super().__init__()
        self.fn = fn
        for n, t in (params or {}).items():
            self.register_parameter(n, nn.Parameter(t))
        for n, t in (buffers or {}).items():
            self.register_buffer(n, t)

    def forward(self, x, y):
        return self.fn(self, x, y)


def g(*shape):
    return torch.randn(*shape, generator=GEN)


GEN = torch.Generator().manual_seed(5)
NAN, INF = float("nan"), float("inf")

# label, function of (self, x, y), x, y, params
API_CASES = [
    ("pointwise", lambda m, x, y: torch.exp(x) + x.sin() * 2 - 1.0 / (1 + x.abs()), g(3, 4), g(4), None),
    ("activations", lambda m, x, y: torch.sigmoid(x) + torch.tanh(y) + F.silu(x) + F.relu(-x)
     + F.gelu(x, approximate="tanh") + F.leaky_relu(x, 0.2) + F.relu6(3 * y), g(3, 4), g(4), None),
    ("pow, rsqrt, clamp", lambda m, x, y: x.abs().pow(1.5) + x ** 2 + torch.rsqrt(y.abs() + 1)
     + x.clamp(min=-0.5, max=0.5) + torch.clamp(y, max=0.1), g(3, 4), g(4), None),
    ("where, masked_fill", lambda m, x, y: torch.where(x > 0, x, y) + x.masked_fill(x < y, -1.0),
     g(3, 4), g(4), None),
    # a constant strided view (RWKV's and RecurrentGemma's): fx2sg compared its bytes, and
    # crashed on a tensor whose bytes are not contiguous
    ("a strided constant", lambda m, x, y: x + torch.arange(8.0)[::2] * y, g(3, 4), g(4), None),
    ("maximum, max(x, y)", lambda m, x, y: torch.maximum(x, y) - torch.max(x, y * 2) + torch.min(x, y),
     g(3, 4), g(3, 4), None),
    ("rsub, floordiv, alpha", lambda m, x, y: 1.0 - x + torch.add(x, y, alpha=2) + (x * 3) // 1.0
     + torch.div(x, 0.5, rounding_mode="floor"), g(3, 4), g(3, 4), None),
    ("reductions", lambda m, x, y: (x.sum(-1), x.mean(dim=(0, 1), keepdim=True), x.amax(1),
                                    x.var(-1), x.var(-1, unbiased=False), x.std(0), torch.max(x),
                                    x.max(dim=1).values, torch.sum(x, 0, keepdim=True)),
     g(3, 4, 5), g(1), None),
    ("softmax family", lambda m, x, y: (x.softmax(-1), F.softmax(x, dim=0), F.log_softmax(x, dim=1),
                                        torch.log_softmax(x, -1)), g(3, 4), g(1), None),
    ("layer_norm over 2 dims", lambda m, x, y: F.layer_norm(x, x.shape[-2:], m.w, m.b, eps=1e-3),
     g(2, 3, 4), g(1), {"w": g(3, 4), "b": g(3, 4)}),
    ("layer_norm without affine", lambda m, x, y: F.layer_norm(x, (4,)), g(2, 3, 4), g(1), None),
    ("reshape family", lambda m, x, y: (x.view(-1), x.flatten(1), x.reshape(4, -1), x.permute(2, 0, 1),
                                        x.transpose(0, 2), x.unsqueeze(1).squeeze(1),
                                        x.view(2, 1, 3, 4).squeeze(), torch.flatten(x)),
     g(2, 3, 4), g(1), None),
    ("indexing", lambda m, x, y: (x[:, 1:3], x[..., None], x[0], x[:, -1], x[1, :, 2:],
                                  x.narrow(2, 1, 2), x.select(1, 0), x[0].T.contiguous(), x[:, None, 1]),
     g(2, 3, 4), g(1), None),
    ("chunk, split, unbind", lambda m, x, y: (*x.chunk(2, dim=-1), *torch.split(x, [1, 2], dim=1),
                                              *x.unbind(0)), g(2, 3, 4), g(1), None),
    ("cat, stack, expand, repeat", lambda m, x, y: (torch.cat([x, y], dim=1), torch.stack([x, y]),
                                                    x[:, :1].expand(3, 5), x.repeat(2, 1)),
     g(3, 4), g(3, 4), None),
    ("casts", lambda m, x, y: ((x > 0).float() + x.to(torch.float64), x.half(), x.bfloat16(),
                               (x * 10).long(), x.type_as(y)), g(3, 4), g(4).double(), None),
    ("constants folded", lambda m, x, y: x + torch.arange(x.shape[-1]) * torch.ones(3, 4).tril(),
     g(3, 4), g(1), None),
    ("creation like", lambda m, x, y: (torch.zeros_like(x) + 1, torch.ones_like(x) * y,
                                       torch.full_like(x, 2.5), x.new_zeros(2, 2)), g(3, 4), g(4), None),
    ("linear algebra", lambda m, x, y: (x @ m.w.t(), torch.matmul(x, m.w.T), F.linear(x, m.w),
                                        F.linear(x, m.w, m.b), torch.addmm(m.b, x, m.w.t()),
                                        torch.bmm(x.unsqueeze(0), m.w.t().unsqueeze(0)),
                                        torch.mm(x, m.w.t())),
     g(3, 4), g(1), {"w": g(5, 4), "b": g(5)}),
    ("embedding, row index", lambda m, x, y: (F.embedding(y, m.table), m.table[y], m.table[y[0]]),
     g(1), torch.tensor([[0, 3], [2, 1]]), {"table": g(4, 3)}),
    ("losses", lambda m, x, y: (F.mse_loss(x, m.t), F.cross_entropy(x, y), F.mse_loss(x, m.t, reduction="sum"),
                                F.mse_loss(x, m.t, reduction="none")),
     g(3, 4), torch.tensor([0, 3, 1]), {"t": g(3, 4)}),
    ("in-place ops", lambda m, x, y: _inplace(x, y), g(3, 4), g(4), None),
    ("clone written in place", lambda m, x, y: _clone_written(x, y), g(3, 4), g(4), None),
    ("dict outputs", lambda m, x, y: {"a": x + 1, "b": y * 2}, g(3, 4), g(4), None),
    ("returns an input and a param", lambda m, x, y: (x, m.w, x * m.w), g(3), g(1), {"w": g(3)}),
    ("frozen param is const", lambda m, x, y: x * m.w.detach() + m.buf, g(3), g(1), {"w": g(3)}),
    # advanced indexing: indices broadcast, negative ones wrapped; the
    # result's dims in place of adjacent indexed dims, else first
    ("index by tensors", lambda m, x, y: (x[y], x[:, y], x[y, :, y.flip(1)], x[..., [0, -2]],
                                          x[0, :, y], x[[1, -1], 1:3, [0, 2]], x[:, None, y],
                                          x[y[0], 1, 1:]),
     g(3, 4, 5), torch.tensor([[0, 2, -1], [1, 1, 0]]), None),
    ("rounding and remainders", lambda m, x, y: (
        torch.trunc(x * 3), torch.frac(x * 3), torch.round(x * 4), torch.round(x, decimals=1),
        torch.remainder(x * 5, 1.5), torch.fmod(x * 5, -1.5), torch.div(x * 5, 2, rounding_mode="trunc"),
        y % 3, torch.remainder(y, -3), torch.fmod(y, 3), y // -2, torch.div(y, 2, rounding_mode="trunc"),
        torch.floor_divide(y, torch.tensor([2, -3, 4, 5, -1]))),
     torch.tensor([[-1.25, -0.5, 0.5, 1.5, 2.5], [0.125, -2.5, 3.75, -0.0, 0.7]]),
     torch.tensor([-7, -6, 0, 5, 8]), None),
    ("tests of values", lambda m, x, y: (
        torch.isnan(x), torch.isinf(x), torch.isfinite(x), torch.isposinf(x), torch.isneginf(x),
        torch.nan_to_num(x), torch.nan_to_num(x, 1.0, 2.0, -3.0), x.isfinite().all(),
        (x > 0).any(1), torch.all(x > -5, dim=0, keepdim=True), torch.count_nonzero(y),
        torch.count_nonzero(x, dim=1)),
     torch.tensor([[1.0, NAN, INF, -INF, 0.0], [2.0, -1.0, 0.0, 3.0, NAN]]),
     torch.tensor([0, 3, 0, 1]), None),
    ("pointwise compositions", lambda m, x, y: (
        torch.lerp(x, y, 0.3), torch.lerp(x, y, x.sigmoid()), torch.addcmul(x, x, y, value=0.5),
        torch.addcdiv(x, x, y.abs() + 1), torch.hypot(x, y), torch.logaddexp(x, y),
        F.softsign(x), F.tanhshrink(x), F.logsigmoid(x * 30), F.threshold(x, 0.1, -2.0),
        F.one_hot(torch.tensor([[0, 2], [3, 1]]), 5), F.one_hot(torch.tensor([1, 0]))),
     g(3, 4), g(3, 4), None),
    ("losses", lambda m, x, y: (
        F.l1_loss(x, y), F.smooth_l1_loss(x, y, beta=0.5), F.huber_loss(x, y, delta=0.7),
        F.l1_loss(x, y, reduction="none"), F.smooth_l1_loss(x, y, reduction="sum"),
        F.binary_cross_entropy_with_logits(x, y.sigmoid()),
        F.binary_cross_entropy_with_logits(x, y.sigmoid(), pos_weight=torch.tensor([1., 2., 3., .5]),
                                           reduction="sum"),
        F.binary_cross_entropy(x.sigmoid(), y.sigmoid(), reduction="none"),
        F.nll_loss(F.log_softmax(x, 1), torch.tensor([1, 3, 0])),
        F.nll_loss(F.log_softmax(x, 1), torch.tensor([1, -100, 0]), reduction="sum"),
        F.kl_div(F.log_softmax(x, 1), F.softmax(y, 1), reduction="batchmean"),
        F.kl_div(F.log_softmax(x, 1), F.log_softmax(y, 1), reduction="sum", log_target=True)),
     g(3, 4), g(3, 4), None),
    ("shape compositions", lambda m, x, y: (
        torch.movedim(x, 0, -1), torch.moveaxis(x, [0, 1], [1, 0]), x.tile((2,)),
        torch.tile(x, (2, 1, 1)), torch.hstack([x, x]), torch.vstack([y, y]),
        torch.dstack([x[0], x[1]]), torch.column_stack([y, y]), torch.tensor_split(x, 2, dim=2),
        torch.tensor_split(y, [1, 3]), torch.outer(y, y[:3]), torch.diagonal(x, 1, 1, 2),
        torch.diag(x[0]), torch.diag(y), torch.diag(y, -1), torch.trace(x[1]),
        torch.diff(x, dim=1), torch.diff(y, n=2), F.cosine_similarity(x, x.flip(1), dim=2),
        F.pairwise_distance(x[0], x[1]), F.pairwise_distance(x[0], x[1], p=1, keepdim=True)),
     g(2, 3, 4), g(4), None),
    ("uniform constant is a statement", lambda m, x, y: x * torch.ones_like(x) +
     torch.full((3,), 2.0) + torch.zeros(2, 3).sum(0), g(3), g(1), None),
    ("constant filled in place", lambda m, x, y: _filled_mask(x, y), g(2, 3, 4), g(4), None),
    ("prod", lambda m, x, y: (x.prod(1), torch.prod(x), x.prod(0, keepdim=True), y.prod(-1)),
     torch.tensor([[1.5, -2.0, 0.5, 3.0, 1.0], [0.0, 4.0, -1.0, 2.0, 0.5],
                   [2.0, 2.0, 2.0, -0.5, 1.25]]), torch.tensor([[2, -3, 1], [4, 0, 5]]), None),
    ("index by a constant", lambda m, x, y: (x[:, torch.tensor([True, False, True, True])],
                                             x.t()[torch.tensor([3, 0])],
                                             torch.index_select(x, 1, torch.tensor([2, 0]))),
     g(2, 4), g(1), None),
    ("sort with NaN, inf and ties", lambda m, x, y: (
        torch.sort(x)[0], torch.sort(x)[1], torch.sort(x, stable=True, dim=0, descending=True)[0],
        torch.sort(x, stable=True, dim=0, descending=True)[1],
        torch.argsort(x[0], descending=True)),
     torch.tensor([[1.0, NAN, -INF, 2.0, 1.0, INF, NAN, 0.5],
                   [3.0, 3.0, -1.0, NAN, 0.0, 0.0, INF, -INF],
                   [0.5, 0.5, 0.5, 0.5, 2.0, NAN, 1.0, -2.0]]), g(1), None),
    ("sort of integers", lambda m, x, y: (torch.argsort(x, stable=True, dim=1, descending=True),
                                          x.sort(0), torch.sort(x[:1], 0)),
     torch.tensor([[3, 1, 3, -2, 0, 1], [1, 1, 5, 0, -7, 3]]), g(1), None),
]
def _masked_setitem(x, y):
    """x[mask] = value, as torch.export records it (index_put_): torch.fx
    cannot trace a setitem."""
    h = x * 2
    h[h > 1] = 0.5
    z = x + 1
    z[x[:, 0] < 0] = -1.0
    return h + z


if HAVE_EXPORT:
    API_CASES += [("setitem under a bool mask", lambda m, x, y: _masked_setitem(x, y),
                   g(4, 3), g(1), None)]
if HAVE_SDPA:
    API_CASES += [
        ("sdpa", lambda m, x, y: (F.scaled_dot_product_attention(x, y, y),
                                  F.scaled_dot_product_attention(x, y, y, is_causal=True)),
         g(2, 5, 8), g(2, 5, 8), None),
        ("sdpa with masks", lambda m, x, y: (
            F.scaled_dot_product_attention(x, y, y, attn_mask=m.mask),
            F.scaled_dot_product_attention(x, y, y, attn_mask=m.bias)),
         g(2, 5, 8), g(2, 5, 8), None),
    ]


def _filled_mask(x, y):
    """A constant built in forward by in-place fills of a new tensor's
    slices (a Swin block's shifted-window mask), read after the fills."""
    mask = x.new_zeros(x.shape[-2:])
    mask[:2, 1:3].fill_(1.0)
    mask[2:].fill_(-1.0)
    return x * mask + torch.roll(y, 1, 0)


def _clone_written(x, y):
    """In-place writes into a clone of an input leave the input as it was
    (a clone is other memory, though fx2sg names it with the input)."""
    z = x.clone()
    z.add_(y)
    z[0].zero_()
    return z, x


def _inplace(x, y):
    z = x.clone()
    z.add_(y)
    z.mul_(2)
    F.relu(z, inplace=True)
    return z


def api_module(label, fn, params):
    m = Fn(fn, params)
    if label == "frozen param is const":
        m.w.requires_grad_(False)
        m.register_buffer("buf", g(3))
    if label == "sdpa with masks":
        m.register_buffer("mask", torch.rand(5, 5, generator=GEN) < 0.8)
        m.mask[:, 0] = True
        m.register_buffer("bias", torch.randn(5, 5, generator=GEN))
    return m.eval()


def check_api(S, fx2sg):
    for i, (label, fn, x, y, params) in enumerate(API_CASES):
        m = api_module(label, fn, params)
        try:
            ex = fx2sg.export(m, {"x": x, "y": y}, graph="case%d" % i)
        except Exception as e:  # noqa: BLE001 - reported as a failure
            S.report("api " + label, "export raised %s: %s" % (type(e).__name__, e))
            continue
        for w in ex.warnings:      # e.g. torch.export fell back to torch.fx
            print("note: api %s: %s" % (label, w))
        sg = S.path("api%d.sg" % i)
        with open(sg, "w") as f:
            f.write(ex.sg)
        par, inp = S.path("api%d.p" % i), S.path("api%d.i" % i)
        stio.save(par, ex.params)
        stio.save(inp, ex.inputs)
        out, why = sgc_run(S, sg, par, inp, S.path("api%d.o" % i))
        if why:
            S.report("api " + label, why + "\n--- program:\n" + ex.sg)
            continue
        with torch.no_grad():
            exp = flatten(m(x, y))
        if len(exp) != len(ex.returns):
            S.report("api " + label, "%d returns for %d outputs" % (len(ex.returns), len(exp)))
            continue
        for name, e in zip(ex.returns, exp):
            why = compare(out[name], e, atol=1e-5, rtol=1e-4) if name in out else \
                "'%s' missing from --out" % name
            if why:
                why = "%s: %s\n--- program:\n%s" % (name, why, ex.sg)
                break
        if not why and label == "dict outputs" and ex.returns != ["a", "b"]:
            why = "returns %s, expected the dict's keys" % ex.returns
        if not why and label == "frozen param is const":
            decl = [l.split()[:2] for l in ex.sg.splitlines()]
            if ["const", "%w"] not in decl or ["const", "%buf"] not in decl:
                why = "frozen param and buffer are not consts:\n" + ex.sg
        if not why and label == "uniform constant is a statement" and (
                "const %" in ex.sg or "full(" not in ex.sg):
            why = "a uniform constant is not a full statement:\n" + ex.sg
        if not why and label == "constants folded" and "const %" not in ex.sg:
            why = "no const in:\n" + ex.sg
        S.report("api " + label, why)


def _histc(m, x, y):
    return torch.histc(x, bins=4) + y


def _data_dependent(m, x, y):
    if x.sum() > 0:
        return x
    return y


def check_errors(S, fx2sg):
    """What fx2sg refuses, and how it says so."""
    def expect(label, fn, exc, needle, trace="auto"):
        try:
            fx2sg.export(Fn(fn), {"x": g(3), "y": g(3)}, trace=trace)
        except Exception as e:  # noqa: BLE001
            if type(e).__name__ != exc:
                S.report(label, "raised %s (%s), expected %s" % (type(e).__name__, e, exc))
            elif needle not in str(e):
                S.report(label, "message lacks %r: %s" % (needle, e))
            else:
                S.report(label, None)
            return
        S.report(label, "exported without an error")

    expect("error: unsupported op", _histc, "Error", "histc")
    expect("error: names the user's line", _histc, "Error", "test_fx2sg.py:")
    expect("error: data-dependent control flow", _data_dependent, "Error", "cannot trace")
    expect("error: a trace failure names the user's line", _data_dependent, "Error",
           "test_fx2sg.py:")
    # an eager error while tracing is not blamed on control flow
    try:
        fx2sg.export(Fn(lambda m, x, y: x @ torch.ones(2, 2)), {"x": g(3), "y": g(3)})
        S.report("error: a shape error while tracing", "exported without an error")
    except Exception as e:  # noqa: BLE001
        why = None if "test_fx2sg.py:" in str(e) and "control flow" not in str(e) else \
            "message: %s" % e
        S.report("error: a shape error while tracing names the line, not control flow", why)
    # a bf16 module with an mse loss exports, though torch 1.13's CPU has
    # no bf16 mse_loss for the reference (a warning says so)
    try:
        lin = nn.Linear(4, 4).to(torch.bfloat16)
        ex = fx2sg.export(lin, {"input": g(2, 4).to(torch.bfloat16)}, loss="mse", trace="fx")
        why = None if "%loss = mse_loss" in ex.sg or "mse_loss(" in ex.sg else "no loss in:\n" + ex.sg
    except Exception as e:  # noqa: BLE001
        why = "raised %s: %s" % (type(e).__name__, e)
    S.report("bf16 module with --loss mse exports", why)
    expect("error: alpha dropout in training", lambda m, x, y: F.alpha_dropout(x, 0.5, True),
           "Error", "no alpha dropout")
    # (torch.export turns the legacy argument into reduction='sum' itself)
    expect("error: an argument fx2sg drops is named",
           lambda m, x, y: F.mse_loss(x, y, size_average=False), "Error", "size_average=False",
           trace="fx")
    expect("error: an out= argument is named",
           lambda m, x, y: torch.add(x, y, out=torch.empty(3)), "Error", "out=")
    if not HAVE_SDPA:
        # fx2sg's own check (a torch with the function rejects it itself);
        # the call through the module, where torch.fx finds the leaf.
        q = lambda t: t.view(1, 1, 1, 3).expand(1, 2, 2, 3)  # noqa: E731
        expect("error: attention with a mask and is_causal",
               lambda m, x, y: llama_sample.scaled_dot_product_attention(
                   q(x), q(y), q(y), attn_mask=torch.ones(2, 2, dtype=torch.bool),
                   is_causal=True), "Error", "attn_mask and is_causal=True")
    check_embedding_args(S, fx2sg)
    spec = os.path.join(HERE, "test_fx2sg.py") + ":mlp"
    cases = [
        ("cli: bad type", [spec, "-o", S.path("e.sg"), "--input", "x=f33[4]"], 2, "not a type"),
        ("cli: missing input", [spec, "-o", S.path("e.sg")], 2, "--input"),
        ("cli: unknown input", [spec, "-o", S.path("e.sg"), "--input", "z=f32[4,16]"], 2,
         "no parameter 'z'"),
        ("cli: no such file", ["nope.py:f", "-o", S.path("e.sg"), "--input", "x=f32[1]"], 3,
         "nope.py"),
        ("cli: bad spec", ["justaname", "-o", S.path("e.sg")], 2, "MODULE_SPEC"),
        ("cli: module error", [os.path.join(HERE, "test_fx2sg.py") + ":histc_model", "-o",
                               S.path("e.sg"), "--input", "x=f32[3]", "--input", "y=f32[4]"],
         1, "histc"),
    ]
    if not HAVE_EXPORT:
        cases.append(("cli: no torch.export", [spec, "-o", S.path("e.sg"), "--input", "x=f32[4,16]",
                                                "--trace", "export"], 1, "torch.export"))
    for label, args, status, needle in cases:
        pr = main_fx2sg(*args)
        if pr.returncode != status:
            S.report(label, "exit %d, expected %d: %s" % (pr.returncode, status, pr.stderr))
        elif needle not in pr.stderr:
            S.report(label, "message lacks %r: %s" % (needle, pr.stderr))
        elif os.path.exists(S.path("e.sg")):
            S.report(label, "an output was written despite the error")
        else:
            S.report(label, None)


class Emb(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.emb = nn.Embedding(6, 4, **kw)

    def forward(self, x):
        return self.emb(x)


class EmbLastPad(nn.Module):
    """F.embedding with a negative padding_idx: the table's last row."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4, generator=GEN))

    def forward(self, x):
        return F.embedding(x, self.w, padding_idx=-1) * 2


def check_embedding_args(S, fx2sg):
    """nn.Embedding's padding_idx and scale_grad_by_freq change only the
    gradient: a forward export is exact; under --loss the padding row gets
    no gradient (its values still looked up: sgc's detach), and
    scale_grad_by_freq is an Error naming it; max_norm is always an
    Error."""
    idx = {"x": torch.tensor([[0, 1, 2], [2, 0, 5]])}
    for trace in ["fx"] + (["export"] if HAVE_EXPORT else []):
        m = Emb(padding_idx=0)
        with torch.no_grad():
            m.emb.weight[0] = 3.0      # a loaded table need not have a zero row
        _check_loss_grads(S, fx2sg, m, idx, "emb_pad padding_idx=0 [%s]" % trace, 1, trace)
        _check_loss_grads(S, fx2sg, EmbLastPad(), idx, "emb_last F.embedding padding_idx=-1 "
                          "[%s]" % trace, 1, trace)
        for kw, loss, needle in (({"scale_grad_by_freq": True}, "mse", "scale_grad_by_freq"),
                                 ({"max_norm": 1.0}, None, "max_norm")):
            label = "error: embedding %s%s [%s]" % (list(kw)[0], " under --loss" if loss else "",
                                                    trace)
            try:
                fx2sg.export(Emb(**kw), idx, loss=loss, trace=trace)
                S.report(label, "exported without an error")
            except fx2sg.Error as e:
                S.report(label, None if needle in str(e) else
                         "message lacks %r: %s" % (needle, e))
    m = Emb(padding_idx=0).eval()
    with torch.no_grad():
        m.emb.weight[0] = 3.0      # a loaded table need not have a zero row
    ex = fx2sg.export(m, idx)
    out, why = run_export(S, ex, "emb")
    S.report("embedding padding_idx: forward export exact",
             why or compare(out["out"], m(idx["x"]).detach()))


class Dropouts(nn.Module):
    """Dropout in training: nn.Dropout2d of a conv's channels, F.dropout
    with training=self.training, F.dropout1d of an unbatched [C, L] value,
    nn.Dropout."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.l = nn.Linear(64, 16)
        self.d = nn.Dropout(0.25)
        self.d2 = nn.Dropout2d(0.5)

    def forward(self, x):                                   # [2, 3, 4, 4]
        h = self.d2(self.c(x)).flatten(1)                   # [2, 64]
        h = F.dropout(self.l(h), 0.1, self.training)        # [2, 16]
        u = F.dropout1d(h, 0.5, self.training)              # [C=2, L=16], unbatched
        return self.d(u)


class AttnDropouts(nn.Module):
    """Attention weights through dropout: scaled_dot_product_attention's
    dropout_p, causal and with enable_gqa (where torch has them), and
    nn.MultiheadAttention(dropout=) in training."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.mha = nn.MultiheadAttention(16, 2, dropout=0.2)

    def forward(self, x):                                   # [2, 5, 16]
        h = x
        if HAVE_SDPA:
            q, k, v = self.qkv(x).view(2, 5, 3, 2, 8).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3 if self.training else 0,
                                               is_causal=True)
            b = F.scaled_dot_product_attention(q, k[:, :1], v[:, :1], enable_gqa=True,
                                               dropout_p=0.1 if self.training else 0)
            h = (a + b).transpose(1, 2).reshape(2, 5, 16)
        t = h.transpose(0, 1)
        return self.mha(t, t, t, need_weights=False)[0]


class RandomOps(nn.Module):
    """Random draws in forward: stochastic depth as Hugging Face writes it
    (keep_prob + torch.rand, floored) and as timm does
    (new_empty().bernoulli_), Gaussian noise (randn_like), rand_like."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x):                                   # [4, 8]
        h = self.l(x)
        keep = (0.75 + torch.rand((4, 1), dtype=h.dtype)).floor()
        a = h / 0.75 * keep
        b = a * h.new_empty((4, 1)).bernoulli_(0.6) / 0.6
        return b + 0.1 * torch.randn_like(b) + torch.rand_like(b)


class RandomStats(nn.Module):
    """Draws of each distribution fx2sg writes with sgc's rand, n of each
    (x only gives the size): their means and deviations."""

    def forward(self, x):                                   # [n]
        n = x.shape[0]
        return torch.stack([torch.randn(n), torch.randint(3, 7, (n,)).float(),
                            torch.empty_like(x).exponential_(2.0),
                            torch.empty_like(x).uniform_(-1, 1),
                            torch.bernoulli(torch.full_like(x, 0.3)),
                            x.new_empty(n).normal_(1.0, 2.0), torch.rand_like(x)])


# (name, mean, standard deviation, least, greatest) of RandomStats' rows
RANDOM_STATS = [("randn", 0, 1, None, None),
                ("randint(3, 7)", 4.5, math.sqrt(1.25), 3, 6),
                ("exponential_(2)", 0.5, 0.5, 0, None),
                ("uniform_(-1, 1)", 0, 1 / math.sqrt(3), -1, 1),
                ("bernoulli(0.3)", 0.3, math.sqrt(0.21), 0, 1),
                ("normal_(1, 2)", 1, 2, None, None),
                ("rand_like", 0.5, math.sqrt(1 / 12), 0, 1)]


class RnnDropout(nn.Module):
    """nn.LSTM(num_layers=2, dropout=) in training: dropout between the
    layers; its reference (rnn_dropout_reference) runs the layers one by
    one with sgc's mask between them."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(6, 5, num_layers=2, dropout=0.4, batch_first=True)

    def forward(self, x):                                   # [2, 7, 6]
        return self.rnn(x)[0]


def rnn_dropout_reference(m, x):
    """RnnDropout's output, its layers run one at a time (single-layer
    LSTMs on m's weights) with sgc's first mask (salt 0) between them,
    drawn over the time-first [T, N, H] sequence that fx2sg unrolls."""
    h = x
    for layer in range(2):
        one = nn.LSTM(h.shape[-1], 5, batch_first=True)
        for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            setattr(one, k + "_l0", getattr(m.rnn, "%s_l%d" % (k, layer)))
        h = one(h)[0]
        if layer == 0:
            with sgc_masks():
                h = F.dropout(h.transpose(0, 1), 0.4, True).transpose(0, 1)
    return h


@contextlib.contextmanager
def sgc_masks(seed=0, offset=1):
    """PyTorch's random calls drawing sgc's numbers (runtime/sgk/sgk_random.h),
    for a reference: F.dropout and F.dropout1d/2d/3d, attention's dropout_p,
    torch.rand, torch.randn (Box-Muller of two draws), Tensor.bernoulli_
    and uniform_, the k-th draw with salt k (the front end numbers an
    exported program's random ops in order), the generator's first call
    at offset 1."""
    calls = [0]
    saved = {k: getattr(F, k) for k in ("dropout", "dropout1d", "dropout2d", "dropout3d",
                                        "scaled_dot_product_attention") if hasattr(F, k)}
    saved_torch = {k: getattr(torch, k) for k in ("rand", "randn", "rand_like", "randn_like")}
    saved_fills = (torch.Tensor.bernoulli_, torch.Tensor.uniform_)

    def words(n):
        w = philox_words(n, calls[0], seed, offset)
        calls[0] += 1
        return w

    def uniform(shape, dtype=torch.float32):
        bits = {torch.float64: 32, torch.float32: 24, torch.float16: 11,
                torch.bfloat16: 8}[dtype]
        u = [(w >> (32 - bits)) / float(1 << bits) for w in words(math.prod(shape))]
        return torch.tensor(u, dtype=torch.float64).to(dtype).reshape(tuple(shape))

    def sizes(size):
        return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (list, tuple,
                                                                         torch.Size)) \
            else tuple(size)

    def rand(*size, dtype=None, **kw):
        return uniform(sizes(size), dtype or torch.float32)

    def randn(*size, dtype=None, **kw):
        wdt = torch.float64 if dtype == torch.float64 else torch.float32
        u, v = uniform(sizes(size), wdt), uniform(sizes(size), wdt)
        z = torch.sqrt(torch.log(1 - u) * -2) * torch.cos(v * (2 * math.pi))
        return z.to(dtype or torch.float32)

    def rand_like(x, dtype=None, **kw):
        return rand(x.shape, dtype=dtype or x.dtype)

    def randn_like(x, dtype=None, **kw):
        return randn(x.shape, dtype=dtype or x.dtype)

    def bernoulli_(self, p=0.5, generator=None):
        wdt = torch.float64 if self.dtype == torch.float64 else torch.float32
        return self.copy_((uniform(self.shape, wdt) < p).to(self.dtype))

    def uniform_(self, a=0.0, b=1.0, generator=None):
        wdt = torch.float64 if self.dtype == torch.float64 else torch.float32
        return self.copy_(uniform(self.shape, wdt) * (b - a) + a)

    def mask(shape, p):
        keep = dropout_keep(math.prod(shape), p, calls[0], seed, offset).reshape(shape)
        calls[0] += 1
        scale = torch.tensor(1 / (1 - p), dtype=torch.float64).float()
        return torch.where(keep, scale, torch.zeros(()))
    def dropout(x, p=0.5, training=True, inplace=False):
        return x * mask(x.shape, p) if training and p else x

    def feature(n):
        def f(x, p=0.5, training=True, inplace=False):
            if not training or not p:
                return x
            batched = x.dim() != n + 1 or (n == 2 and x.dim() == 3)
            lead = list(x.shape[:2 if batched else 1])
            return x * mask(lead + [1] * (x.dim() - len(lead)), p)
        return f
    def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):            # PyTorch's math reference
        if enable_gqa:
            k, v = [t.repeat_interleave(q.shape[-3] // t.shape[-3], -3) for t in (k, v)]
        s = q @ k.transpose(-2, -1) * (scale or 1 / math.sqrt(q.shape[-1]))
        if is_causal:
            s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -math.inf)
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool \
                else s + attn_mask
        return dropout(s.softmax(-1), dropout_p) @ v
    F.dropout = dropout
    F.dropout1d, F.dropout2d, F.dropout3d = feature(1), feature(2), feature(3)
    F.scaled_dot_product_attention = attention
    torch.rand, torch.randn = rand, randn
    torch.Tensor.bernoulli_, torch.Tensor.uniform_ = bernoulli_, uniform_
    torch.rand_like, torch.randn_like = rand_like, randn_like
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(F, k, v)
        for k, v in saved_torch.items():
            setattr(torch, k, v)
        torch.Tensor.bernoulli_, torch.Tensor.uniform_ = saved_fills


def check_dropout(S, fx2sg):
    """Dropout exported in training (--train, --loss mse): sgc's masks
    (sgk_random.h) on every element, channel and sample as PyTorch's
    dropouts lay them, so the output, the loss and every gradient equal
    PyTorch's with those masks (sgc_masks); fx2sg's reference outputs, one
    of PyTorch's own draws, are not compared."""
    torch.manual_seed(0)
    cases = [(Dropouts(), g(2, 3, 4, 4), "dropout", 4),
             (AttnDropouts(), g(2, 5, 16), "attention dropout", 3 if HAVE_SDPA else 1),
             (RnnDropout(), g(2, 7, 6), "LSTM dropout", 1),
             (RandomOps(), g(4, 8), "random draws", 5)]
    traces = ["fx"] + (["export"] if HAVE_EXPORT else [])
    for (m, x, what, count), trace in [(c, t) for c in cases for t in traces]:
        if trace == "fx" and HAVE_SDPA and what == "attention dropout":
            continue    # torch.fx's MultiheadAttention path is torch 1.13's (CI's) alone
        label = "%s in training [%s]" % (what, trace)
        try:
            ex = fx2sg.export(m, {"x": x}, loss="mse", train=True, trace=trace)
            out, why = run_export(S, ex, "dropout_%d_%s" % (count, trace))
        except fx2sg.Error as e:
            out, why = None, "raised: %s" % e
        n = ex.sg.count(" = dropout(") + ex.sg.count(" = rand(") + \
            ex.sg.count(", dropout_p=") if not why else 0
        if not why and n != count:
            why = "%d random statements, expected %d:\n%s" % (n, count, ex.sg)
        if not why:
            m.train()
            m.zero_grad()
            if isinstance(m, RnnDropout):
                y = rnn_dropout_reference(m, x)
            else:
                with sgc_masks():
                    y = m(x)
            loss = F.mse_loss(y, ex.inputs["target"])
            loss.backward()
            exp = {"out": y.detach(), "loss": loss.detach()}
            exp.update(("grad." + k, q.grad) for k, q in m.named_parameters()
                       if q.grad is not None)
            for k, e in exp.items():
                why = compare(out[k], e, atol=1e-5, rtol=1e-4) if k in out else "%s missing" % k
                if why:
                    why = "%s: %s" % (k, why)
                    break
        S.report(label + ": output, loss and gradients with sgc's masks", why)
    n = 200000
    for trace in ["fx"] + (["export"] if HAVE_EXPORT else []):
        try:
            ex = fx2sg.export(RandomStats(), {"x": torch.zeros(n)}, trace=trace)
            out, why = run_export(S, ex, "stats_" + trace)
        except fx2sg.Error as e:
            why = "raised: %s" % e
        for k, (name, mean, sd, lo, hi) in enumerate(RANDOM_STATS):
            if not why:
                r = out["out"][k].double()
                bad = [w for w, ok in (("mean %.4f" % r.mean(), abs(r.mean() - mean) < 5 * sd /
                                        math.sqrt(n)),
                                       ("sd %.4f" % r.std(), abs(r.std() / sd - 1) < 0.02),
                                       ("least %g" % r.min(), lo is None or r.min() >= lo),
                                       ("greatest %g" % r.max(), hi is None or r.max() <= hi))
                       if not ok]
                if lo is not None and hi is not None and name.startswith(("randint", "bern")):
                    if not torch.equal(r, r.round()):
                        bad.append("not integers")
            S.report("random draws [%s]: %s, mean %g sd %g" % (trace, name, mean, sd),
                     why or (", ".join(bad) if bad else None))
    errors = [("a random fill of a constant tensor", "fx",
               lambda m, x, y: x + torch.empty(3).uniform_(), "cannot record uniform_"),
              ("randperm", "auto", lambda m, x, y: x[torch.randperm(3)],
               "randperm draws random numbers"),
              ("a torch.Generator", "auto",
               lambda m, x, y: x + torch.rand(3, generator=torch.Generator().manual_seed(0)),
               "with a generator")]
    for label, trace, fn, needle in errors:
        try:
            fx2sg.export(Fn(fn), {"x": g(3), "y": g(3)}, trace=trace)
            why = "exported without an error"
        except fx2sg.Error as e:
            why = None if needle in str(e) else "message lacks %r: %s" % (needle, e)
        S.report("error: %s [%s]" % (label, trace), why)
    for m, x, what, _ in cases[:3]:
        ex = fx2sg.export(m.eval(), {"x": x})
        S.report("%s in eval mode: no dropout statement" % what,
                 None if " dropout(" not in ex.sg and "dropout_p=" not in ex.sg
                 else "dropout in:\n" + ex.sg)


def _shift(m, x, y):
    return x[:, :-1] * 2        # the slice's end is T - 1


def _squares(m, x, y):
    return x + torch.arange(x.shape[1]) ** 2    # a const of T elements, not positions


class Positions(nn.Module):
    """Positions (arange, broadcast over the batch) and a 0 / -inf causal
    float mask over [T, T], made from the sizes alone."""

    def forward(self, x):
        t = x.shape[1]
        mask = torch.zeros(t, t).masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(),
                                             float("-inf"))
        pos = torch.arange(t).float()[None].expand(x.shape[0], t)
        return (x * pos[..., None]).softmax(1) @ x.transpose(1, 2) + mask


def positions():
    return Positions()


class LMLogits(nn.Module):
    """samples/gpt.py's GPT with its logits as [B, vocab, T] (cross_entropy's
    class dim 1): a loss target [B, T] that --dim can name (a flattened
    [B*T] one, a product of dims, it cannot)."""

    def __init__(self):
        super().__init__()
        self.m = gpt()

    def forward(self, idx):
        b, t = idx.shape
        return self.m(idx).view(b, t, -1).transpose(1, 2)


def lm_logits():
    return LMLogits()


class SizeMasked(nn.Module):
    """Attention as Hugging Face's SDPA path calls it under torch.export:
    positions broadcast over the batch and a causal mask [B, 1, T, T]
    computed from the sizes alone, bool or float (0, and the dtype's
    lowest value where a key is masked)."""

    def __init__(self, float_mask, vocab=10, d=16, heads=2, t=16):
        super().__init__()
        self.float_mask, self.heads = float_mask, heads
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, vocab)

    def forward(self, tok):
        b, t = tok.shape
        h = self.tok(tok) + self.pos(torch.arange(t)[None].expand(b, t))
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2)
                   for z in self.qkv(h).chunk(3, dim=-1))
        keep = torch.ones(t, t, dtype=torch.bool).tril()[None, None].expand(b, 1, t, t)
        mask = torch.zeros(b, 1, t, t).masked_fill(~keep, torch.finfo(torch.float32).min) \
            if self.float_mask else keep
        a = llama_sample.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(a.transpose(1, 2).reshape(b, t, -1))


def size_masked_bool():
    torch.manual_seed(9)
    return SizeMasked(False)


def size_masked_float():
    torch.manual_seed(9)
    return SizeMasked(True)


def dims_case(S, name, factory, flag, dims, at, needles, loss=None):
    """fx2sg --dim at the size of `flag`; `sgc run -D` at the sizes `at`
    must give PyTorch's outputs at those sizes (with a loss: the loss and
    the gradients), and exactly what the program fx2sg exports at those
    sizes gives."""
    here = os.path.join(HERE, "test_fx2sg.py")
    label = "--dim %s: %s" % (" ".join(dims), name)
    base = name + "." + "_".join(d.split("=")[0] for d in dims)
    sg, par = S.path(base + ".dim.sg"), S.path(base + ".dim.p")
    iname, ty = flag.split("=", 1)
    args = [here + ":" + name, "-o", sg, "--params", par, "--input", flag]
    args += [x for d in dims for x in ("--dim", d)] + (["--loss", loss] if loss else [])
    pr = main_fx2sg(*args)
    if pr.returncode != 0:
        S.report(label, "fx2sg exited %d: %s" % (pr.returncode, pr.stderr))
        return
    text = open(sg).read()
    miss = [n for n in needles if (n[1:] in text) == n.startswith("!")]
    if miss:
        S.report(label, "%s:\n%s" % ("; ".join("lacks " + n if n[0] != "!" else "has " + n[1:]
                                                for n in miss), text))
        return
    dt, shape = FX.parse_type(ty)
    shape = list(shape)
    for d in dims:
        dn, _, ax = FX.parse_dim(d)
        shape[ax] = at[dn]
    gen = torch.Generator().manual_seed(11)
    x = torch.randint(0, 10, shape, generator=gen) if dt == torch.int64 else \
        torch.randn(shape, generator=gen)
    module = factory().eval()
    ins = {iname: x}
    if loss:
        with torch.no_grad():
            y = module(x)
        ins["target"] = torch.randint(0, y.shape[1], y.shape[:1] + y.shape[2:], generator=gen)
    inp, o = S.path(base + ".dim.i"), S.path(base + ".dim.o")
    stio.save(inp, ins)
    cmd = [S.sgc, "run", sg, "--params", par, "--inputs", inp, "--out", o]
    cmd += [x for d, v in at.items() for x in ("-D", "%s=%d" % (d, v))]
    pr = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if pr.returncode != 0:
        S.report(label, "sgc run -D exited %d: %s\n%s" % (pr.returncode, pr.stderr, text))
        return
    got = stio.load(o)
    if not loss:
        with torch.no_grad():
            exp = {"out": module(x)}
    else:
        lv = F.cross_entropy(module(x), ins["target"])
        lv.backward()
        exp = {"loss": lv.detach()}
        exp.update(("grad." + n, p.grad) for n, p in module.named_parameters())
    why = None
    for n, e in exp.items():
        why = why or (compare(got[n], e, atol=1e-5, rtol=1e-4) if n in got else "no " + n)
        why = why and "%s: %s" % (n, why)
    S.report(label + " at " + " ".join("%s=%d" % kv for kv in at.items()), why)
    # The program fx2sg exports at those sizes, run by sgc: the same values.
    sg2, par2, o2 = S.path(base + ".at.sg"), S.path(base + ".at.p"), S.path(base + ".at.o")
    pr = main_fx2sg(*(args[:1] + ["-o", sg2, "--params", par2, "--input",
                                  "%s=%s" % (iname, FX.type_text(FX.SG_OF[dt], shape))] +
                      (["--loss", loss] if loss else [])))
    ran, why = (None, "fx2sg exited %d: %s" % (pr.returncode, pr.stderr)) if pr.returncode \
        else sgc_run(S, sg2, par2, inp, o2)
    for n in exp:
        # the values exactly; the gradients up to rounding (the program
        # keeps whole-dim slices and masks by where(keep, x, -inf), whose
        # backward sums in another order)
        tol = 1e-6 if n.startswith("grad.") else 0
        why = why or compare(got[n], ran[n], atol=tol, rtol=tol)
        why = why and "%s: %s" % (n, why)
    S.report(label + ": as exported at those sizes", why)


def check_dims(S):
    """--dim NAME=INPUT:AXIS: the program declares the dim, uses it where
    the size flows (and not where a literal merely equals it: the MLP's
    output size 8 and the block's head size 8 equal the batch) and
    `sgc run -D` at other sizes matches PyTorch at those sizes.  Language
    models' positions and causal masks, constants of the sizes alone,
    become statements (arange, ge) that follow the dims."""
    cases = [("mlp", mlp, "x=f32[8,16]", ["B=x:0"], {"B": 3},
              ["dim B = 8", "input %x : f32[B, 16]", "%fc2.weight : f32[8, 32]"], None),
             ("attention", attention, "x=f32[8,6,16]", ["B=x:0", "T=x:1"], {"B": 3, "T": 5},
              ["dim B = 8", "dim T = 6", "input %x : f32[B, T, 16]", "[B, T, 2, 8]"], None),
             # positions broadcast over B, a float causal mask
             ("positions", positions, "x=f32[4,6,6]", ["B=x:0", "T=x:1"], {"B": 2, "T": 5},
              ["arange(end=T, dtype=f32)", "shape=[B, T, 1]", "ge(", "!const %_tensor"], None),
             # samples/gpt.py: positions, hand-written causal attention
             ("gpt", gpt, "idx=i64[4,16]", ["B=idx:0", "T=idx:1"], {"B": 3, "T": 11},
              ["arange(end=T)", "ge(", "!const %_tensor"], None),
             ("gpt", gpt, "idx=i64[4,16]", ["T=idx:1"], {"T": 9}, ["dim T = 16", "!const %_tensor"],
              None),
             ("lm_logits", lm_logits, "idx=i64[4,16]", ["B=idx:0", "T=idx:1"], {"B": 2, "T": 7},
              ["input %target : i64[B, T]", "!const %_tensor"], "cross_entropy"),
             # SDPA with a causal mask of the sizes: causal=true, no const
             ("size_masked_bool", size_masked_bool, "tok=i64[2,6]", ["B=tok:0", "T=tok:1"],
              {"B": 3, "T": 9}, ["causal=true", "arange(end=T)", "shape=[B, T]", "!const %"],
              None),
             ("size_masked_float", size_masked_float, "tok=i64[2,6]", ["B=tok:0", "T=tok:1"],
              {"B": 1, "T": 4}, ["causal=true", "!const %"], None),
             # samples/llama.py (is_causal, or its fallback's causal mask):
             # rotary positions as floats
             ("llama", llama, "tok=i64[2,6]", ["B=tok:0", "T=tok:1"], {"B": 3, "T": 4},
              ["arange(end=T, dtype=f32)", "!const %_tensor"], None)]
    for c in cases:
        dims_case(S, *c)
    # Without --dim too, the causal mask that became causal=true is not
    # declared (nor written to the params file); the positions stay a const.
    ex = FX.export(size_masked_bool(), {"tok": torch.randint(0, 10, (2, 6))})
    consts = [l.split()[1] for l in ex.sg.splitlines() if l.strip().startswith("const ")]
    S.report("causal mask const of SDPA not declared",
             None if "causal=true" in ex.sg and len(consts) == 1 and
             sorted(ex.params) == sorted([n for n, _ in size_masked_bool().named_parameters()]
                                         + [consts[0][1:]]) else "consts %s, params %s:\n%s" % (consts, list(ex.params), ex.sg))
    for label, fn, needle in (("error: --dim, a slice end of T - 1", _shift, "end="),
                              ("error: --dim, a const of T elements", _squares, "const")):
        try:
            FX.export(Fn(fn), {"x": g(4, 6), "y": g(1)}, dims={"T": [("x", 1)]})
            S.report(label, "exported without an error")
        except FX.Error as e:
            S.report(label, None if needle in str(e) and "T" in str(e) else
                     "message lacks %r: %s" % (needle, e))
    for label, d, needle in (("cli: --dim of no input", "B=z:0", "no input 'z'"),
                             ("cli: --dim axis out of range", "B=x:2", "2 axes"),
                             ("cli: --dim syntax", "B", "NAME=INPUT:AXIS"),
                             ("cli: --dim reserved name", "f32=x:0", "cannot name a dim")):
        pr = main_fx2sg(os.path.join(HERE, "test_fx2sg.py:mlp"), "-o", S.path("e.sg"),
                        "--input", "x=f32[8,16]",
                        "--dim", d)
        S.report(label, None if pr.returncode == 2 and needle in pr.stderr else
                 "exit %d: %s" % (pr.returncode, pr.stderr))


def histc_model():
    return Fn(_histc)


def check_cli_user_code(S):
    """The user's module file failing to import (a syntax error, a missing
    import), a factory that raises or gets unknown --kwargs, a spec naming
    a number, a directory as FILE: a message naming the spec and where,
    exit 2 (3 for the directory), no Python traceback."""
    d = S.path("user")
    os.makedirs(d, exist_ok=True)
    files = {"syn.py": "import torch\ndef f(:\n", "imp.py": "import no_such_module_sgc\n",
             "fac.py": "def make(width):\n    raise ValueError('no such width')\nthree = 3\n"}
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    cases = [("a syntax error", [os.path.join(d, "syn.py") + ":f"], 2, "syn.py:2"),
             ("a missing import", [os.path.join(d, "imp.py") + ":f"], 2, "no_such_module_sgc"),
             ("no such package", ["no_such_package_sgc:f"], 2, "no_such_package_sgc"),
             ("a factory that raises", [os.path.join(d, "fac.py") + ":make", "--kwargs",
                                        '{"width": 3}'], 2, "no such width"),
             ("unknown --kwargs", [os.path.join(d, "fac.py") + ":make", "--kwargs",
                                   '{"depth": 3}'], 2, "depth"),
             ("a number", [os.path.join(d, "fac.py") + ":three"], 2, "type int"),
             ("a directory", [d + ":make"], 3, "not a file")]
    for label, args, rc, needle in cases:
        pr = main_fx2sg(*(args + ["-o", S.path("u.sg"), "--input", "x=f32[2,4]"]))
        why = None
        if pr.returncode != rc or needle not in pr.stderr or "Traceback" in pr.stderr:
            why = "exit %d, stderr: %s" % (pr.returncode, pr.stderr.strip()[:500])
        S.report("cli: the user's code, %s: exit %d" % (label, rc), why)


def check_cli_outputs(S):
    """--outputs names the returns; --save-outputs holds eager's outputs
    under those names; stdout output; the file round-trips through sgc."""
    sg = S.path("named.sg")
    outp = S.path("named.out")
    spec = os.path.join(HERE, "test_fx2sg.py") + ":mlp"
    pr = run_fx2sg(spec, "-o", sg, "--input", "x=f32[2,16]", "--outputs", "logits",
                   "--graph", "tiny", "--save-outputs", outp, "--save-inputs", S.path("named.in"),
                   "--params", S.path("named.p"))
    why = None
    if pr.returncode != 0:
        why = "fx2sg exited %d: %s" % (pr.returncode, pr.stderr)
    else:
        text = open(sg).read()
        ref = stio.load(outp)
        with torch.no_grad():
            exp = mlp().eval()(**stio.load(S.path("named.in")))
        if "graph tiny {" not in text or "return %logits" not in text:
            why = "graph name or return name not used:\n" + text
        else:
            why = compare(ref.get("logits", torch.zeros(0)), exp)
        if not why:
            pr2 = main_fx2sg(spec, "-o", "-", "--input", "x=f32[2,16]", "--outputs", "logits",
                            "--graph", "tiny", "--params", S.path("named2.p"))
            if pr2.stdout != text:
                why = "-o - differs from the file"
        if not why:
            ir = subprocess.run([S.sgc, "check", sg], capture_output=True, text=True)
            if ir.returncode != 0:
                why = "sgc check: " + ir.stderr
    S.report("cli: --outputs, --graph, --save-outputs, -o -", why)


# ------------------------------------------------------------------ convolutional models

def check_resnet_train(S, trace="fx"):
    """The small ResNet exported with --train --loss: sgc run's loss and
    gradients match a training step of the module in PyTorch, and the
    running statistics in --out are the buffers after that step."""
    tag = "small_resnet --train[%s]" % trace
    sg, par, inp = S.path("rt.sg"), S.path("rt.p"), S.path("rt.i")
    pr = main_fx2sg(os.path.join(HERE, "test_fx2sg.py") + ":small_resnet", "-o", sg,
                    "--params", par, "--save-inputs", inp, "--input", "x=f32[2,3,16,16]",
                    "--train", "--loss", "cross_entropy", "--trace", trace, "--seed", "3")
    if pr.returncode != 0:
        S.report(tag, "fx2sg exited %d: %s" % (pr.returncode, pr.stderr))
        return
    out, why = sgc_run(S, sg, par, inp, S.path("rt.o"))
    if why:
        S.report(tag, why)
        return
    m = small_resnet().train()
    ins = stio.load(inp)
    lv = F.cross_entropy(m(ins["x"]), ins["target"])
    lv.backward()
    why = compare(out["loss"], lv.detach(), atol=1e-5, rtol=1e-4)
    for n, p in m.named_parameters():
        why = why or ("grad.%s: " % n + (compare(out["grad." + n], p.grad, atol=1e-5, rtol=1e-4)
                                         or "") if "grad." + n in out else "grad.%s missing" % n)
        why = None if why and why.endswith(": ") else why
    for n, b in m.named_buffers():
        if why or "num_batches" in n:
            continue
        why = ("%s: " % n + (compare(out[n], b, atol=1e-6, rtol=1e-5) or "")) if n in out \
            else "%s missing from --out" % n
        why = None if why and why.endswith(": ") else why
    S.report(tag, why)


class ConvArgs(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        torch.manual_seed(4)
        self.conv = nn.Conv2d(4, 6, **kw)

    def forward(self, x):
        return self.conv(x)


def run_export(S, ex, tag):
    """sgc run on an Export's program, params and inputs (files named after
    tag): (--out's tensors, None) or (None, why not)."""
    sg, par, inp = S.path(tag + ".sg"), S.path(tag + ".p"), S.path(tag + ".i")
    with open(sg, "w") as f:
        f.write(ex.sg)
    stio.save(par, ex.params)
    stio.save(inp, ex.inputs)
    return sgc_run(S, sg, par, inp, S.path(tag + ".o"))


def export_and_run(S, fx2sg, m, args, train=False):
    """fx2sg's export of m on args, then sgc run: None when its output is
    m's (in the mode exported), else why not."""
    try:
        ex = fx2sg.export(m, args, train=train)
    except fx2sg.Error as e:
        return "export raised: %s" % e
    out, why = run_export(S, ex, "c")
    with torch.no_grad():
        exp = m.train(train)(*args)
    return why or compare(out["out"], exp, atol=1e-5, rtol=1e-4)


class InplaceChain(nn.Module):
    def forward(self, x):
        h = x * 1
        h.mul_(2).add_(1)      # the add_ writes h too
        y = h.sub_(0.5)
        y.div_(3)
        return h


class InplaceEma(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("ema", torch.ones(4))

    def forward(self, x):
        self.ema.mul_(0.9).add_(x.mean(0))
        return x + self.ema


class InplaceInput(nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2


class CopyInto(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("last", torch.zeros(3, 4))
        self.register_buffer("hist", torch.zeros(4, dtype=torch.float64))

    def forward(self, x):
        old = self.last * 1
        self.last.copy_(x * 2)          # a buffer: written back
        self.hist.copy_(x.sum(0))       # cast to the buffer's dtype
        b = torch.zeros(3, 4) + 1
        b.copy_(x[0])                   # broadcast
        a = x * 3
        c = a * 1
        c.copy_(b)
        a.add_(1)                       # c keeps b's values
        return old + self.last + b + c + a


class InplaceView(nn.Module):
    def forward(self, x):
        y = x * 1
        y[:, :2].mul_(10)
        return y


class InplaceNestedView(nn.Module):
    """A write into a view of a view, both read afterwards."""

    def forward(self, x):
        h = x * 1
        v = h[0:2]
        v[:, 1].zero_()
        return v * 2 + h[1:3]


class InplaceViewLater(nn.Module):
    def forward(self, x):
        y = x * 1
        v = y.view(-1)
        y.add_(1)
        return v


class ScalarAlpha(nn.Module):
    def forward(self, x):
        return (torch.rsub(x, x * 3, alpha=2) + torch.add(x, 2, alpha=3) +
                torch.sub(x, 1.5, alpha=2) + torch.rsub(x, 4, alpha=0.5))


class MaskedFillInt(nn.Module):
    def forward(self, x):
        return (x * 10).long().masked_fill(x > 0, 2.7)


class AddmmBetaZero(nn.Module):
    def forward(self, x):
        b = torch.full((3, 4), float("nan")) + x[:, :1]
        return torch.addmm(b, x, torch.ones(4, 4), beta=0) + \
            torch.addmm(b, x, torch.ones(4, 4), beta=0, alpha=2)


class DetachParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        h = self.l(x)
        return h + (h.floor() - h).detach()   # a straight-through estimator


class DetachInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        return self.l(x.detach() * 2)


class CopiedWrites(nn.Module):
    """Rows written into zeros_like in a loop (a chunked scan's output), then
    copied by .to(memory_format=contiguous_format) past a transpose and
    computed on: the copy's readers were folded into constants with their
    traced values (Qwen3-Next's gated delta rule; no gradient reached it)."""

    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.randn(2, 4, 16, 8, generator=GEN))

    def forward(self, x):                                   # x [2, 4, 16, 8]
        c = torch.zeros_like(x).reshape(2, 4, -1, 8, 8)
        h = (self.q * x).reshape(2, 4, -1, 8, 8)
        for i in range(2):
            c[:, :, i] = h[:, :, i] * (i + 1)
        c = c.reshape(2, 4, -1, 8)[:, :, :8]
        c = c.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
        return (c.reshape(-1, c.shape[-1]) * 2).reshape(c.shape[0], c.shape[1], -1)


class NoGradRegion(nn.Module):
    def __init__(self):
        super().__init__()
        self.l, self.m = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            g = self.l(x).sigmoid()
        return self.m(x) * g + self.l(x)   # l's gradient from the last term alone


class BoolLogic(nn.Module):
    def forward(self, x):
        a, b = x > 0, x < 0.5
        m = (a & b) | (~a ^ (x > 1))
        n = torch.logical_and(x, x - 0.3) | torch.logical_or(a, x > 2)
        return torch.where(m & n, x, -x) + torch.logical_xor(a, b).float()


class IgnoreIndex(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 5)

    def forward(self, x, t):
        return F.cross_entropy(self.l(x), t, ignore_index=2)


class LabelSmoothing(nn.Module):
    def __init__(self, ignore=-100):
        super().__init__()
        self.l = nn.Linear(4, 5)
        self.ignore = ignore

    def forward(self, x, t):
        return F.cross_entropy(self.l(x), t, label_smoothing=0.1, ignore_index=self.ignore)


class IndexSelect(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4, generator=GEN))

    def forward(self, x, i, j, k):
        rows = self.w.index_select(0, i)                       # embedding
        cols = torch.index_select(x, 1, i[:2])                  # gather, dim 1
        x3 = x.reshape(3, 2, 2)
        last = x3.index_select(-1, j).reshape(3, 2)            # gather, the last dim
        one = x.index_select(0, k)                             # a 0-D index
        return rows.sum() + cols.sum(1).unsqueeze(1) * last + one.sum()


class StepSlices(nn.Module):
    def forward(self, x):
        x3 = x.reshape(3, 2, 2)
        return (x[:, ::2] + x[:, 1::2] + x[::2, 1:4:2].sum() + x3[..., ::3].reshape(3, 2)
                .sum(1, keepdim=True) + x[1:, 3::-5 + 7].sum())


class MoreOps(nn.Module):
    def forward(self, x):
        y = F.softplus(x) + F.softplus(x * 30, beta=2, threshold=10) + F.hardswish(x) + F.mish(x)
        g = F.glu(torch.cat([x, x * 2], -1), -1)
        lse = torch.logsumexp(x, dim=-1, keepdim=True) + torch.logsumexp(x, 1).unsqueeze(-1)
        n = F.normalize(x, dim=-1)
        t = torch.tril(x) + torch.triu(x, diagonal=1) * 2 + torch.tril(x, -1)
        r = x.repeat_interleave(2, dim=1)[:, :4] + \
            torch.repeat_interleave(x, 3)[:12].reshape(3, 4)
        return y + g + lse + n + t + r


class ManyMasks(nn.Module):
    def forward(self, x):
        out = x * 0
        for k in range(-3, 4):    # 14 masks made by fx2sg, one after another
            out = out + torch.triu(x, k) * (k + 5) + torch.tril(x, k) * (k - 7)
        return out


class LargeActivations(nn.Module):
    """elu, selu, celu, softplus and mish of pre-activations far past
    exp's range (x 100): the branch where() drops must not overflow, or
    the gradient is NaN (softplus and mish were, before 2026-12-05)."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        h = self.l(x) * 100.0
        return F.elu(h) + F.softplus(h) + F.mish(h) + F.selu(h) + F.celu(h, 0.5)


class AutocastRegion(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.l(x)


class Dashed(nn.Module):
    """Submodules named as torchvision's RegNet names its blocks."""

    def __init__(self):
        super().__init__()
        self.add_module("block1-0", nn.Linear(3, 4))
        self.add_module("block1-1", nn.Linear(4, 2))

    def forward(self, x):
        return getattr(self, "block1-1")(torch.tanh(getattr(self, "block1-0")(x)))


def check_renamed_params(S, fx2sg):
    """A state_dict name that is not a .sg value name (block1-0.weight)
    becomes one (block1_0.weight) in the program and the params file,
    with a warning naming it."""
    m = Dashed().eval()
    x = torch.randn(5, 3, generator=GEN)
    ex = fx2sg.export(m, [x])
    why = None
    if sorted(ex.params) != ["block1_0.bias", "block1_0.weight", "block1_1.bias",
                             "block1_1.weight"]:
        why = "params file names %s" % sorted(ex.params)
    elif not any("'block1-0.weight' is %block1_0.weight" in w for w in ex.warnings):
        why = "no warning names the renaming: %s" % ex.warnings
    else:
        out, why = run_export(S, ex, "dashed")
        with torch.no_grad():
            why = why or compare(out["out"], m(x), atol=1e-5, rtol=1e-4)
    S.report("api names renamed to .sg names", why)


def check_hf_moe(S, fx2sg):
    """Hugging Face's Mixtral (transformers 5: experts behind
    config._experts_implementation) exports with its experts as batched
    products, a warning saying so, the config as it was after; logits
    against eager.  Not run where transformers 5 is missing (Debian's
    torch 1.13 in CI): a note says so."""
    try:
        import transformers
        cfg = transformers.MixtralConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=48, vocab_size=50, max_position_embeddings=32,
            num_local_experts=4, num_experts_per_tok=2)
        if not hasattr(cfg, "_experts_implementation"):
            raise ImportError("transformers %s has no _experts_implementation" %
                              transformers.__version__)
    except ImportError as e:
        print("note: api Mixtral's experts: not run (%s)" % e)
        return
    torch.manual_seed(3)
    cfg._attn_implementation = "eager"
    m = transformers.MixtralForCausalLM(cfg).eval()
    before = cfg._experts_implementation
    ids = torch.randint(0, 50, (2, 6), generator=GEN)
    w = Fn(lambda mod, x, y: m(input_ids=x).logits)
    w.m = m
    try:
        ex = fx2sg.export(w, {"x": ids, "y": torch.zeros(1)})
        why = None if any("batched_mm" in x for x in ex.warnings) or before == "batched_mm" \
            else "no warning names batched_mm: %s" % ex.warnings
        if not why and cfg._experts_implementation != before:
            why = "the config was left at %r" % cfg._experts_implementation
        out, run_why = run_export(S, ex, "mixtral")
        with torch.no_grad():
            why = why or run_why or compare(out["out"], m(input_ids=ids).logits, atol=1e-5,
                                            rtol=1e-4)
    except fx2sg.Error as e:
        why = "export raised: %s" % e
    S.report("api Mixtral's experts as batched products", why)


def check_small_ops(S, fx2sg):
    """alpha of add, sub and rsub (rsub scales its input, not other; with
    a number the product is a number), &, |, ^ and the logical_ ops,
    cross_entropy's ignore_index other than -100 and its label_smoothing (with and
    without an ignored row), index_select, slices with steps, masked_fill of an integer tensor
    with a float (stored in its dtype), addmm with beta=0 (input ignored,
    nan and all); and under --loss, detach() of what a param computes and a
    torch.no_grad() region that torch.fx cannot see: Errors, not gradients
    through them."""
    x = torch.randn(3, 4, generator=GEN)
    for label, m in (("alpha", ScalarAlpha()), ("masked_fill int", MaskedFillInt()),
                     ("addmm beta=0", AddmmBetaZero())):
        S.report("api " + label, export_and_run(S, fx2sg, m, [x.clone()]))
    S.report("api and, or, xor of bools", export_and_run(S, fx2sg, BoolLogic(), [x.clone()]))
    S.report("api softplus, hardswish, mish, glu, logsumexp, normalize, tril, triu, "
             "repeat_interleave", export_and_run(S, fx2sg, MoreOps(), [x.clone()]))
    torch.manual_seed(3)
    big = LargeActivations()
    ex = fx2sg.export(big, [x.clone()], loss="mse")
    out, why = run_export(S, ex, "large_activations")
    for k in ("loss", "grad.l.weight", "grad.l.bias"):
        if why:
            break
        why = compare(out[k], ex.outputs[k], atol=1e-4, rtol=1e-4) if k in out else \
            "%s missing" % k
        why = why and "%s: %s" % (k, why)
    S.report("api --loss through elu, selu, celu, softplus, mish of large values: "
             "autograd's gradients, no NaN", why)
    # each constant its own (a freed tensor's id, reused by the next one,
    # named the earlier constant)
    S.report("api many constants made while converting",
             export_and_run(S, fx2sg, ManyMasks(), [torch.randn(4, 5, generator=GEN)]))
    # a GraphModule of the user's (torch.fx renames forward's `input` to input_1)
    gm = torch.fx.symbolic_trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)))
    S.report("api a symbolic_trace GraphModule", export_and_run(S, fx2sg, gm, [x.clone()]))
    # its leaf modules (nn.Conv2d, nn.BatchNorm2d, pools...) traced through
    # too (they were call_module nodes without a handler)
    conv = torch.fx.symbolic_trace(nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2), nn.GELU(), nn.LayerNorm(2)))
    S.report("api a symbolic_trace GraphModule of conv, batch norm and pools",
             export_and_run(S, fx2sg, conv.eval(), [torch.randn(2, 3, 8, 8, generator=GEN)]))
    # nn.MultiheadAttention's causal masks (a float -inf mask, the encoder
    # layer's bool triu(1)) take the fused causal path, not a mask operand
    att = fx2sg.export(attentions().eval(), [torch.randn(2, 5, 16, generator=GEN),
                                             torch.randn(2, 6, 8, generator=GEN),
                                             torch.randn(2, 6, 12, generator=GEN)])
    n = att.sg.count("causal=true")
    S.report("api nn.MultiheadAttention's two causal masks as causal=true",
             None if n == 2 else "%d causal=true in:\n%s" % (n, att.sg))
    S.report("api cross_entropy ignore_index=2",
             export_and_run(S, fx2sg, IgnoreIndex(), [x.clone(), torch.tensor([2, 0, 4])]))
    S.report("api slices with steps (2, 2 from 1, 2 within, 3 past the end, 2 from 3)",
             export_and_run(S, fx2sg, StepSlices(), [x.clone()]))
    S.report("api index_select (embedding, gather on dims 1 and -1, a 0-D index)",
             export_and_run(S, fx2sg, IndexSelect(), [x.clone(), torch.tensor([3, 1, 5, 0]),
                                                        torch.tensor([1]), torch.tensor(2)]))
    for ignore in (-100, 2):
        S.report("api cross_entropy label_smoothing=0.1, ignore_index=%d" % ignore,
                 export_and_run(S, fx2sg, LabelSmoothing(ignore),
                                [x.clone(), torch.tensor([2, 0, 4])]))
    # a straight-through estimator: h's gradient, not 0 (h - h)
    for trace in ["fx"] + (["export"] if HAVE_EXPORT else []):
        _check_loss_grads(S, fx2sg, DetachParam(), [x.clone()], "detach_param of a param's "
                          "value [%s]" % trace, 2, trace)
    if HAVE_EXPORT:
        _check_loss_grads(S, fx2sg, CopiedWrites(), [torch.randn(2, 4, 16, 8, generator=GEN)],
                          "copied_writes a copy of rows written in a loop [export]", 1,
                          "export")
        # torch.export records the region: its result is detached
        _check_loss_grads(S, fx2sg, NoGradRegion(), [x.clone()], "no_grad_region reading "
                          "params [export]", 4, "export")
    for label, m, want in (("no_grad region", NoGradRegion(), "no_grad"),
                           ("detach of an input", DetachInput(), None)):
        try:
            fx2sg.export(m, [x.clone()], loss="mse", trace="fx")
            why = None if want is None else "exported"
        except fx2sg.Error as e:
            why = "raised: %s" % e if want is None or want not in str(e) else None
        S.report("api --loss, %s: %s" % (label, "an Error" if want else "exported"), why)
    try:
        fx2sg.export(AutocastRegion(), [x.clone()], trace="fx")
        why = "exported"
    except fx2sg.Error as e:
        why = None if "autocast" in str(e) else "another error: %s" % e
    S.report("api an autocast region on the fx path: an Error", why)


class PutLayouts(nn.Module):
    """index_put_ with integer indices: two broadcast together, three with
    values broadcast into x[indices], and a number written."""

    def forward(self, x, i, j):                                # x [2, 5, 4, 3]
        a = x.clone()
        a.index_put_((torch.arange(2).view(2, 1), i.view(1, 3)),
                     x[:, :3, 0, 0].view(2, 3, 1, 1) * 5, accumulate=True)
        b = x.clone().transpose(0, 1).contiguous()            # [5, 2, 4, 3]
        b.index_put_((i, torch.tensor(1), j), torch.tensor([7.0, 8.0, 9.0]).view(3, 1))
        c = x.clone().transpose(0, 1).contiguous()
        c.index_put_((i[:2],), torch.tensor(-2.0))
        return a.sum() + b.sum((1, 2, 3)) + c.sum((1, 2, 3))


class PutMiddle(nn.Module):
    """Setitem at integer indices that x[indices] places in the middle
    (adjacent indexed dims after a slice) and first (not adjacent): only
    torch.export records these (as index_put with None for the dims taken
    whole); torch.fx cannot trace a setitem."""

    def forward(self, x, i, j):                                # x [2, 5, 4, 3]
        a = x.clone()
        a[:, i, j] = x[:, :3, 0] * 3                            # x[:, i, j]: [2, 3, 3]
        b = x.clone()
        b[i[:2] % 2, :, j[:2]] = torch.tensor([1.0, 2.0, 3.0])  # x[i, :, j]: [2, 5, 3]
        return a.sum((0, 2, 3)) + b.sum((0, 2, 3))


class IntScatterAdd(nn.Module):
    """scatter_add and index_add of integer tensors (a product and sum
    rather than a matmul)."""

    def forward(self, x, i):                                   # x i64 [3, 5], i i64 [3, 2]
        a = torch.zeros(3, 5, dtype=torch.int64).scatter_add(1, i, x[:, :2] * 3)
        return a + x.index_add(1, i[0], x[:, 2:4])


class IntScatterReduce(nn.Module):
    """scatter_reduce of integer tensors: 'mean' rounds down (negative
    quotients too), 'amax' and 'prod' without self; scatter with
    reduce='multiply'; index_reduce 'amin'."""

    def forward(self, x, i):                                   # x i64 [3, 5], i i64 [3, 2]
        a = x.scatter_reduce(1, i, x[:, :2] * 3 - 7, "mean")
        b = x.scatter_reduce(1, i, x[:, 2:4] - 4, "amax", include_self=False)
        c = x.scatter_reduce(1, i, x[:, 1:3], "prod", include_self=False)
        d = x.scatter(1, i, x[:, 3:] + 1, reduce="multiply")
        return a + b * 100 + c * 10000 + d * 1000000 + x.index_reduce(0, i[1], x[:2], "amin")


class CheckedValues(nn.Module):
    """A runtime check of tensor values, as Hugging Face's vision-language
    models check their image tokens (torch.export records
    aten._is_all_true and an assertion on its item)."""

    def forward(self, x):
        torch._check_tensor_all((x.abs() < 100).all(), lambda: "large")
        return x * 2

class WeightNormed(nn.Module):
    """Weight normalisation, as audio models (Wav2Vec2's positional
    convolution, vocoders) use it: nn.utils.weight_norm of a Conv1d over
    its kernel dim and of a Linear, and where torch has it the
    parametrization of a Linear (each torch._weight_norm(v, g, dim))."""

    def __init__(self):
        super().__init__()
        self.c = nn.utils.weight_norm(nn.Conv1d(4, 6, 3, padding=1), dim=2)
        self.l = nn.utils.weight_norm(nn.Linear(6, 5))
        para = getattr(nn.utils, "parametrizations", None)
        self.p = para.weight_norm(nn.Linear(5, 3)) if hasattr(para, "weight_norm") else \
            nn.Linear(5, 3)

    def forward(self, x):
        return self.p(self.l(self.c(x).transpose(1, 2)))


def _check_loss_grads(S, fx2sg, m, args, label, least, trace="auto"):
    """m exported under --loss mse: the output, the loss and every
    gradient (at least `least` of them) against PyTorch's."""
    try:
        ex = fx2sg.export(m, args, loss="mse", trace=trace)
        out, why = run_export(S, ex, label.split()[0])
    except fx2sg.Error as e:
        why = "raised: %s" % e
    grads = [] if why else [k for k in ex.outputs if k.startswith("grad.")]
    for k in ["out", "loss"] + grads:
        if why:
            break
        why = compare(out[k], ex.outputs[k], atol=1e-5, rtol=1e-4) if k in out else \
            "%s missing" % k
        why = why and "%s: %s" % (k, why)
    if not why and len(grads) < least:
        why = "only %d gradients: %s" % (len(grads), grads)
    S.report("api %s with --loss: output, loss and %d gradients" % (label, len(grads)), why)


class DilatedPools(nn.Module):
    """Max pooling with a dilation: 2-D with padding and a stride, with
    ceil_mode, and 1-D; one over windows that hold two equal values (x 2
    beside x times a param of 2), and a 3-D one over two such frames, where
    the gradient goes to the first as PyTorch's does (the param's gradient
    0)."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(2, 3, 3, padding=1)
        self.two = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):                                   # [N, 2, 7, 8]
        h = self.c(x)
        a = F.max_pool2d(h, 3, stride=2, padding=1, dilation=2)                  # [N, 3, 3, 4]
        b = F.max_pool2d(h, 2, stride=(2, 3), dilation=(1, 2), ceil_mode=True)   # [N, 3, 4, 3]
        c = F.max_pool1d(h.flatten(2), 4, stride=3, padding=2, dilation=3, ceil_mode=True)
        twin = torch.cat([h[..., :4] * 2, h[..., :4] * self.two], -1)          # [N, 3, 7, 8]
        d = F.max_pool2d(twin, (1, 2), stride=1, dilation=(1, 4))              # ties
        frames = torch.stack([h * 2, h * self.two], 2)                          # [N, 3, 2, 7, 8]
        e = F.max_pool3d(frames, (2, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))  # ties in depth
        return a.sum((2, 3)) + b.mean((2, 3)) + c.mean(2) + d.sum((2, 3)) + e.sum((2, 3, 4))


class PoolIndices(nn.Module):
    """Max pools' indices (return_indices=True) as PyTorch gives them: 2-D
    over windows of equal values (the first wins), with padding, a stride
    and ceil_mode, and dilated; 1-D and 3-D; and max_unpool2d putting the
    values back at them."""

    def forward(self, x):                                   # [N, 2, 6, 8], a -inf in it
        t = torch.stack([x, x], -1).flatten(-2)             # [N, 2, 6, 16]: equal pairs
        y1, i1 = F.max_pool2d(t, 2, return_indices=True)
        y2, i2 = F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, return_indices=True)
        y3, i3 = F.max_pool2d(x, 2, stride=1, dilation=(2, 3), return_indices=True)
        y4, i4 = F.max_pool1d(x.flatten(2), 4, stride=3, padding=2, return_indices=True)
        y5, i5 = F.max_pool3d(x.unsqueeze(1), (2, 2, 3), stride=(1, 2, 2), padding=(0, 1, 1),
                              return_indices=True)
        u = F.max_unpool2d(y1, i1, 2)
        parts = [i1, i2, i3, i4, i5, y2, y3, y4, y5, u]
        return torch.cat([q.flatten() for q in parts]).float()


class WidePools(nn.Module):
    """ceil_mode pools whose kernel is past the padded input
    (EfficientNet's AvgPool2d(2560) over a 1x1 map): one window each."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 5, 4))

    def forward(self, x):                                   # [2, 3, 5, 4]
        h = x + self.w
        return torch.cat([
            F.avg_pool2d(h, 64, ceil_mode=True).flatten(),
            F.avg_pool2d(h, (9, 3), ceil_mode=True, padding=1).flatten(),
            F.max_pool2d(h, 50, ceil_mode=True).flatten(),
            F.avg_pool2d(h, 40, ceil_mode=True, divisor_override=7).flatten(),
            F.avg_pool2d(h, (7, 2), stride=(10, 1), ceil_mode=True, padding=(1, 0),
                         count_include_pad=False).flatten(),
            F.avg_pool1d(h[0], 30, ceil_mode=True).flatten()])


def check_pools(S, fx2sg):
    """DilatedPools under --loss (the 3-D pools' options are the pools3d
    model's, max_unpool2d's gradient the unpool model's); max pools'
    indices, and max_unpool2d at them; WidePools, whose programs must not
    pad the input to the kernel."""
    torch.manual_seed(6)
    _check_loss_grads(S, fx2sg, DilatedPools(), [torch.randn(2, 2, 7, 8, generator=GEN)],
                      "max pools with dilation (2-D, ceil_mode, 1-D, ties)", 3)
    x = torch.randn(2, 2, 6, 8, generator=GEN)
    x[0, 1, 2, 3] = float("-inf")
    S.report("api max pools' indices (2-D, ties, ceil_mode, dilation, 1-D, 3-D) and "
             "max_unpool2d", export_and_run(S, fx2sg, PoolIndices(), [x]))
    torch.manual_seed(6)
    _check_loss_grads(S, fx2sg, WidePools(), [torch.randn(2, 3, 5, 4, generator=GEN)],
                      "ceil_mode pools with a kernel past the input", 1)
    import re
    sg = fx2sg.export(WidePools(), [torch.randn(2, 3, 5, 4)]).sg
    big = [l for l in sg.splitlines() if "full(" in l and
           math.prod(int(d) for d in re.search(r"shape=\[([0-9, ]*)\]", l).group(1).split(",")
                     if d.strip()) > 120]
    S.report("wide ceil_mode pools pad nothing past the input", "\n".join(big) or None)


def check_weight_norm(S, fx2sg):
    """WeightNormed under --loss: g, v and the biases."""
    torch.manual_seed(5)
    _check_loss_grads(S, fx2sg, WeightNormed(), [torch.randn(2, 4, 7, generator=GEN)],
                      "weight_norm (torch._weight_norm)", 8)

def check_writes(S, fx2sg):
    """Writes at integer indices beyond the scatters model: index_put's
    broadcasts and, where torch.export is, the layouts of x[indices] (the
    indices' dims in the middle and first) and a runtime check of values
    (dropped with a warning); integer scatter_add and index_add, and
    integer scatter_reduce's reductions (the float ones are the
    scatter_reductions model's)."""
    x = torch.randn(2, 5, 4, 3, generator=GEN)
    ij = [torch.tensor([4, 0, 2]), torch.tensor([1, 3, 0])]
    S.report("api index_put_ with integer indices, broadcast",
             export_and_run(S, fx2sg, PutLayouts(), [x] + ij))
    if HAVE_EXPORT:
        S.report("api setitem at integer indices, their dims in the middle and first "
                 "(torch.export)", export_and_run(S, fx2sg, PutMiddle(), [x] + ij))
    if HAVE_EXPORT:
        try:
            ex = fx2sg.export(CheckedValues(), [x], trace="export")
            out, why = run_export(S, ex, "checked")
            why = why or compare(out["out"], x * 2, atol=0, rtol=0)
            if not why and not any("runtime check" in w for w in ex.warnings):
                why = "no warning names the check: %s" % ex.warnings
        except fx2sg.Error as e:
            why = "raised: %s" % e
        S.report("api torch._check_tensor_all under torch.export: not kept, with a warning",
                 why)
    xi = torch.randint(-9, 9, (3, 5), generator=GEN)
    S.report("api scatter_add and index_add of integer tensors",
             export_and_run(S, fx2sg, IntScatterAdd(), [xi, torch.tensor([[4, 4], [0, 2],
                                                                          [1, 1]])]))
    S.report("api scatter_reduce 'mean', 'amax', 'prod', scatter 'multiply' and index_reduce "
             "of integer tensors",
             export_and_run(S, fx2sg, IntScatterReduce(), [xi, torch.tensor([[4, 4], [0, 2],
                                                                             [1, 1]])]))


class TailForward(nn.Module):
    """The long tail's functions without a gradient (or whose gradient
    PyTorch lacks): heaviside, channel_shuffle, searchsorted (1-D and
    batched sequences, right, a number), bucketize (right), median's and
    kthvalue's indices, cdist with p = 0 and inf, copysign of -0.0, aminmax
    (no gradient in torch 1.13), ceil, signbit of -0.0, isclose (NaNs
    equal too), fmax over NaNs."""

    def forward(self, x, b):                                # x [3, 4, 6], b [5] sorted
        s = torch.sort(x[:, 0], -1).values                  # [3, 6]
        z = torch.where(x > 0.5, torch.zeros_like(x), x) * -1.0     # -0.0 where x > 0.5
        parts = [torch.heaviside(x, x[0, 0]), F.channel_shuffle(x.unsqueeze(-1), 2),
                 torch.searchsorted(b, x), torch.searchsorted(b, x, right=True),
                 torch.searchsorted(s, x[:, 1], side="right"), torch.searchsorted(b, 0.25),
                 torch.bucketize(x, b), torch.bucketize(x, b, right=True, out_int32=True),
                 torch.median(x, 2).indices, torch.kthvalue(x, 3, 1, keepdim=True).indices,
                 torch.cdist(x, x.flip(1), p=0.0), torch.cdist(x, x, p=float("inf")),
                 torch.cdist(x, x.flip(2), p=3.0), torch.copysign(x, z),
                 torch.aminmax(x, dim=1)[0], torch.aminmax(x)[1], torch.ceil(x * 3),
                 torch.signbit(z), torch.isclose(x, x + 1e-6), torch.isclose(x, x * 1.1),
                 torch.isclose(x / x.abs().round(), x / x.abs().round(), equal_nan=True),
                 torch.fmax(x / x.abs().round(), x)]
        return torch.cat([p.flatten().float() for p in parts])


class GaussianNll(nn.Module):
    """gaussian_nll_loss with a variance per element and per row (full,
    reduction='sum')."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 6))

    def forward(self, x):
        h = x + self.w
        return torch.stack([F.gaussian_nll_loss(h, x, h.abs() + 0.1),
                            F.gaussian_nll_loss(h, x, h[:, 0].abs() + 0.2, full=True,
                                                reduction="sum")])


class Quantiles(nn.Module):
    """quantile at a number and at a vector of q, with each interpolation
    (torch.export cannot trace it: torch.fx alone)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 6))

    def forward(self, x):
        h = x + self.w
        q = torch.tensor([0.1, 0.5, 0.95])
        return torch.cat([torch.quantile(h, 0.3, dim=1), torch.quantile(h, 0.75).reshape(1)] +
                         [torch.quantile(h, q, dim=0, interpolation=i).flatten() for i in
                          ("linear", "lower", "higher", "midpoint", "nearest")])


class Elementary(nn.Module):
    """The elementary functions sgc has no op for, from its ops: atan,
    atan2 (every quadrant, y = -0.0 at x < 0), asin, acos, tan, sinh and
    cosh, asinh, acosh, atanh, expm1 (near 0 and far), log2, log10,
    deg2rad, rad2deg; gradients through each."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))

    def forward(self, x):                                   # [4, 6]
        h = x * 2 + self.w
        u = torch.tanh(h) * 0.95                            # in (-1, 1)
        q = torch.tensor([[1.0, 1.0, -1.0, -1.0, 0.0, -0.0]]) * h.abs().clamp(min=0.1)
        return torch.stack([
            torch.atan(h * 5).mean(), torch.atan2(h, x).mean(), torch.atan2(q, -h.abs()).mean(),
            torch.atan2(-q, h.abs()).mean(), torch.asin(u).mean(), torch.acos(u).mean(),
            torch.tan(u).mean(), torch.sinh(h).mean(), torch.sinh(h * 1e-3).sum() * 1e3,
            torch.cosh(h).mean(), torch.asinh(h * 3).mean(), torch.acosh(h.abs() + 1.01).mean(),
            torch.atanh(u).mean(), torch.expm1(h).mean(), torch.expm1(h * 1e-4).sum() * 1e4,
            torch.log2(h.abs() + 0.1).mean(), torch.log10(h.abs() + 0.1).mean(),
            torch.deg2rad(h).mean(), torch.rad2deg(h).mean()])


class LinearAlgebraTail(nn.Module):
    """Products and rearrangements from sgc's ops: mv, dot, inner,
    tensordot (dims as an int and as lists), matrix_power, bilinear,
    diag_embed, diagflat at an offset, fill_diagonal_, fliplr, flipud,
    select_scatter, slice_scatter with a step, diagonal_scatter at an
    offset, take, repeat_interleave by constant repeats, msort; and
    fmax/fmin, softshrink, hardshrink, rrelu outside training, logaddexp2,
    renorm, dist, pairwise_distance (p = 3, inf), var with correction=3,
    var_mean and std_mean with correction=0, sgn, positive, float_power
    (in float64); gradients through each."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 6))
        self.bl = nn.Bilinear(6, 4, 3)

    def forward(self, x):                                   # [5, 6]
        h = x + self.w
        sq = h[:, :5]
        d = h.clone()
        d.fill_diagonal_(0.5)
        return torch.stack([t.float().mean() for t in [
            torch.mv(h, x[0]), torch.dot(h[0], x[1]), torch.inner(h, x),
            torch.tensordot(h, x, dims=([1], [1])),
            torch.tensordot(h.reshape(5, 2, 3), x.reshape(2, 3, 5), dims=2),
            torch.matrix_power(sq * 0.5, 3), torch.matrix_power(sq, 0) * h[0, 0],
            self.bl(h, x[:, :4]), torch.diag_embed(h), torch.diagflat(h[0], 2), d,
            torch.fliplr(h) * x, torch.flipud(h) * x, torch.select_scatter(h, x[0] * 2, 0, 3),
            torch.slice_scatter(h, x[:, :3], 1, 0, 6, 2), torch.diagonal_scatter(h, x[0, :4], -1),
            torch.take(h, torch.tensor([0, 7, -1, 29])) * torch.arange(4),
            h.repeat_interleave(torch.tensor([2, 0, 1, 1, 3]), dim=0) * torch.arange(7).view(7, 1),
            torch.msort(h) * x, torch.fmax(h, x), torch.fmin(h, x), F.softshrink(h, 0.5),
            F.hardshrink(h, 0.5), F.rrelu(h, training=False), torch.logaddexp2(h, x),
            torch.renorm(h, 2, 0, 1.5), torch.renorm(h, 1, 1, 2.0), torch.dist(h, x),
            torch.dist(h, x, 3), F.pairwise_distance(h, x, p=3),
            F.pairwise_distance(h, x, p=float("inf")), torch.var(h, (0, 1), correction=3),
            torch.var_mean(h, 0, correction=0)[0], torch.std_mean(h, 1, correction=0)[0],
            torch.sgn(h) * h, torch.positive(h), torch.float_power(h.abs() + 0.1, 1.5)]])


class StatsTail(nn.Module):
    """cov (correction 1 and 0), corrcoef and combinations (with and
    without replacement): torch.export cannot trace them, torch.fx can."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))

    def forward(self, x):
        h = x + self.w
        return torch.cat([torch.cov(h).flatten(), torch.cov(h, correction=0).flatten(),
                          torch.corrcoef(h).flatten(),
                          torch.combinations(h[0], 2).prod(1),
                          torch.combinations(h[1, :3], 3, with_replacement=True).sum(1)])


class Cells(nn.Module):
    """nn.RNN (relu, two layers, batch first; tanh, bidirectional),
    nn.LSTMCell, nn.GRUCell and nn.RNNCell stepped by hand over time (a
    decoder's loop), one of them on an unbatched input."""

    def __init__(self):
        super().__init__()
        self.relu = nn.RNN(4, 5, num_layers=2, nonlinearity="relu", batch_first=True)
        self.bi = nn.RNN(4, 3, bidirectional=True)
        self.lstm, self.gru = nn.LSTMCell(4, 5), nn.GRUCell(5, 4)
        self.cell = nn.RNNCell(4, 3, nonlinearity="relu")

    def forward(self, x):                                   # [N, T, 4]
        a, ha = self.relu(x)
        b, hb = self.bi(x.transpose(0, 1))
        h = c = torch.zeros(x.shape[0], 5)
        g = torch.zeros(x.shape[0], 4)
        outs = []
        for t in range(x.shape[1]):
            h, c = self.lstm(x[:, t], (h, c))
            g = self.gru(h, g)
            outs.append(g)
        u = self.cell(x[0, 0])                              # unbatched
        return torch.cat([a.flatten(), ha.flatten(), b.flatten(), hb.flatten(),
                          torch.stack(outs).flatten(), c.flatten(), u])


class EvalNormPool(nn.Module):
    """InstanceNorm1d with running statistics in eval mode (batch_norm's
    form) and AdaptiveMaxPool3d over uneven windows."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(3, 4, 3, padding=1)
        self.norm = nn.InstanceNorm1d(4, affine=True, track_running_stats=True)
        self.norm.running_mean.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
        self.norm.running_var.copy_(torch.tensor([0.5, 2.0, 1.0, 1.5]))
        self.pool = nn.AdaptiveMaxPool3d((2, 3, 2))

    def forward(self, x):                                   # [N, 3, 6]
        h = self.norm(self.c(x))
        v = h.reshape(x.shape[0], 1, 4, 3, 2).expand(-1, 2, -1, -1, -1) * \
            torch.arange(1.0, 3.0).view(1, 2, 1, 1, 1)
        return torch.cat([h.flatten(), self.pool(torch.cat([v, v[:, :, :3]], 2)).flatten()])


class Deconv3d(nn.Module):
    """ConvTranspose3d: stride 2 with padding (a 3-D U-Net's up-sampling),
    and per-dim strides, padding, output_padding, groups and a dilation."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose3d(2, 4, 3, stride=2, padding=1)
        self.odd = nn.ConvTranspose3d(4, 2, (2, 3, 1), stride=(1, 2, 3), padding=(0, 2, 0),
                                      output_padding=(0, 1, 2), groups=2, dilation=(2, 1, 1))

    def forward(self, x):                                   # [N, 2, 3, 3, 2]
        return self.odd(self.up(x))


class Special(nn.Module):
    """lgamma (both sides of 1/2: the reflection), digamma (likewise) and
    erfinv, each elementwise with its gradient (the derivative of the
    composition: digamma, trigamma, sqrt(pi) / 2 exp(x^2))."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))

    def forward(self, x):                                   # [4, 6]
        h = x * 2 + self.w
        return torch.cat([torch.lgamma(h).flatten(), torch.lgamma(h.abs() * 5 + 0.01).flatten(),
                          torch.digamma(h).flatten(), torch.digamma(h.abs() + 0.1).flatten(),
                          torch.erfinv(torch.tanh(h) * 0.999).flatten()])


def check_tail(S, fx2sg):
    """TailForward against PyTorch (the tail's differentiable functions are
    the tail_math and tail_losses models')."""
    x = torch.randn(3, 4, 6, generator=GEN)
    x[0, 1, 2] = 0.0
    b = torch.tensor([-1.0, -0.2, 0.0, 0.25, 1.5])
    S.report("api heaviside, channel_shuffle, searchsorted, bucketize, median's and "
             "kthvalue's indices, cdist p = 0, inf, 3, copysign of -0.0, aminmax, ceil, "
             "signbit, isclose, fmax",
             export_and_run(S, fx2sg, TailForward(), [x, b]))
    torch.manual_seed(8)
    _check_loss_grads(S, fx2sg, GaussianNll(), [torch.randn(5, 6, generator=GEN)],
                      "gaussian_nll_loss (torch.fx: torch.export cannot trace it)", 1)
    torch.manual_seed(8)
    _check_loss_grads(S, fx2sg, Elementary(), [torch.randn(4, 6, generator=GEN)],
                      "atan, atan2, asin, acos, tan, sinh, cosh, asinh, acosh, atanh, expm1, "
                      "log2, log10, deg2rad, rad2deg", 1)
    torch.manual_seed(8)
    _check_loss_grads(S, fx2sg, LinearAlgebraTail(), [torch.randn(5, 6, generator=GEN)],
                      "mv, dot, inner, tensordot, matrix_power, bilinear, diag_embed, "
                      "fill_diagonal_, the scatters into views, take, msort, shrinks, renorm, "
                      "dist, corrections", 3)
    torch.manual_seed(8)
    _check_loss_grads(S, fx2sg, StatsTail(), [torch.randn(4, 6, generator=GEN)],
                      "cov, corrcoef, combinations (torch.fx)", 1)
    torch.manual_seed(8)
    _check_loss_grads(S, fx2sg, Cells(), [torch.randn(2, 3, 4, generator=GEN)],
                      "nn.RNN (relu, tanh bidirectional), LSTMCell, GRUCell, RNNCell", 20)
    torch.manual_seed(8)
    _check_loss_grads(S, fx2sg, EvalNormPool(), [torch.randn(2, 3, 6, generator=GEN)],
                      "InstanceNorm1d with running statistics (eval), AdaptiveMaxPool3d", 4)
    torch.manual_seed(8)
    _check_loss_grads(S, fx2sg, Deconv3d(), [torch.randn(2, 2, 3, 3, 2, generator=GEN)],
                      "ConvTranspose3d", 4)
    torch.manual_seed(8)
    _check_loss_grads(S, fx2sg, Special(), [torch.randn(4, 6, generator=GEN)],
                      "lgamma, digamma, erfinv", 1)
    torch.manual_seed(8)
    _check_loss_grads(S, fx2sg, Quantiles(), [torch.randn(5, 6, generator=GEN)],
                      "quantile (torch.fx: torch.export cannot trace it)", 1)


class ComplexOps(nn.Module):
    """The complex functions fx2sg has, each reduced to a real tensor:
    complex, polar, products and quotients of complex tensors and with
    a complex scalar, conj, exp, abs, angle (of real tensors too),
    .real, .imag, mT, mH, adjoint, matmul, sums, where, masked_fill, and
    the transforms
    (fft, ifft with norm='forward', rfft with n, irfft with n, fft2 with
    s, rfftn and irfftn, hfft and ihfft, fftshift and ifftshift)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 6))

    def forward(self, x):                                   # [4, 6]
        h = x + self.w
        z = torch.complex(h, x * 0.5)
        w = torch.polar(h.abs() + 0.1, x)
        terms = [(z * w).abs(), (z / w).angle(), torch.view_as_real(z.conj() * 2j - w),
                 torch.exp(z * 0.3).real, (z + 1.5).imag, (2.0 - z / 3).imag,
                 torch.fft.ifft(z, norm="forward").real,
                 torch.fft.irfft(torch.fft.rfft(h, n=10), n=7),
                 torch.fft.fftshift(torch.fft.fft(h)).abs(), torch.fft.ifftshift(h, dim=1),
                 torch.fft.rfft(h).angle(), (z - w).sum(1).real,
                 torch.fft.irfftn(torch.fft.rfftn(h), s=(4, 6)), (z @ w.mT).imag,
                 (z @ w.mH).real, z.adjoint().real, z.mH.imag,
                 torch.view_as_real(torch.fft.fft2(z, s=(3, 8))), torch.angle(h - 0.5),
                 (h / (w + 1j)).real, torch.where(h > 0, z, h * 2 + 0j).imag,
                 z.masked_fill(h < 0.5, 2.0).imag + z.masked_fill(h < 0, 0.0).abs(),
                 torch.fft.hfft(z, n=8), torch.fft.hfft(z, norm="ortho"),
                 torch.fft.ihfft(h, n=5).imag, torch.fft.ihfft(h, norm="forward").real]
        return torch.cat([t.flatten() for t in terms])


class Spectrogram(nn.Module):
    """torch.stft: a Hann window shorter than n_fft (centred), a 1-D
    signal without centring, normalized; a Hamming window with constant
    padding, two-sided; the default window of win_length 6 with replicate
    padding."""

    def __init__(self):
        super().__init__()
        self.register_buffer("win", torch.hann_window(12))
        self.lin = nn.Linear(40, 40)

    def forward(self, x):                                   # [2, 40]
        h = self.lin(x)
        return torch.cat([
            torch.stft(h, 16, hop_length=4, window=self.win, win_length=12,
                       return_complex=True).abs().flatten(),
            torch.stft(h[0], 8, return_complex=True, center=False, normalized=True)
            .real.flatten(),
            torch.stft(h, 10, hop_length=3, window=torch.hamming_window(10), pad_mode="constant",
                       onesided=False, return_complex=True).imag.flatten(),
            torch.stft(h, 8, hop_length=2, win_length=6, return_complex=True,
                       pad_mode="replicate").imag.flatten()])


class InverseSpectrogram(nn.Module):
    """torch.istft of stft's spectrograms: a Hann window, a given length,
    no centring with normalization, the default window with the result
    zero-padded to length, a window shorter than n_fft."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(40, 40)
        self.register_buffer("win", torch.hann_window(16))

    def forward(self, x):                                   # [2, 40]
        h = self.lin(x)
        z = torch.stft(h, 16, hop_length=4, window=self.win, return_complex=True)
        z2 = torch.stft(h[0], 12, hop_length=3, window=torch.hamming_window(12),
                        return_complex=True, center=False, normalized=True)
        z3 = torch.stft(h, 8, return_complex=True)
        z4 = torch.stft(h, 16, hop_length=4, win_length=12, window=torch.hamming_window(12),
                        return_complex=True)
        return torch.cat([
            torch.istft(z * 1.5, 16, hop_length=4, window=self.win).flatten(),
            torch.istft(z, 16, hop_length=4, window=self.win, length=37).flatten(),
            torch.istft(z2, 12, hop_length=3, window=torch.hamming_window(12), center=False,
                        normalized=True).flatten(),
            torch.istft(z3, 8, length=44).flatten(),
            torch.istft(z4, 16, hop_length=4, win_length=12, window=torch.hamming_window(12),
                        length=38).flatten()])


class OverlapAdd(nn.Module):
    """An inverse STFT as Vocos and WavTokenizer write it: frames from
    irfft, windowed, overlap-added by F.fold (kernel 10, stride 3) and
    divided by the window's own overlap-add; and folds whose kernel
    exceeds the stride in 2-D, with padding, a window past the last and
    an output longer than the windows reach."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):                                   # [2, 6, 9]: bins, frames
        h = self.lin(x.transpose(1, 2)).transpose(1, 2)
        spec = torch.polar(h.exp(), h * 3)
        frames = torch.fft.irfft(spec.transpose(1, 2), 10, dim=-1) * torch.hann_window(10)
        audio = F.fold(frames.transpose(1, 2), (1, 34), (1, 10), stride=(1, 3))
        env = F.fold(torch.hann_window(10).square().expand(1, 9, -1).transpose(1, 2), (1, 34),
                     (1, 10), stride=(1, 3))
        z = F.fold(h.reshape(2, 54, 1) * torch.arange(16.0), (7, 9), (3, 2), stride=(2, 3),
                   padding=1)
        w = F.fold(h[:, :, :4].reshape(2, 24, 1) * torch.arange(3.0), (5, 8), (4, 3),
                   stride=(3, 2))
        v = F.fold(h[:, :5, :6].reshape(2, 30, 1) * torch.arange(6.0), (10, 9), (3, 5),
                   stride=(4, 2))
        return torch.cat([(audio / (env + 1e-3)).flatten(1), z.flatten(1), w.flatten(1),
                          v.flatten(1)], 1)


class SpectralConv(nn.Module):
    """FNO's spectral layer as its reference implementation writes it:
    the kept modes written into a complex zeros tensor in place
    (torch.export records the copy_ into its slices)."""

    def __init__(self):
        super().__init__()
        self.lift = nn.Linear(3, 4)
        self.w1 = nn.Parameter(torch.rand(4, 4, 2, 2, dtype=torch.cfloat) / 16)
        self.w2 = nn.Parameter(torch.rand(4, 4, 2, 2, dtype=torch.cfloat) / 16)

    def forward(self, x):                                   # [2, 6, 6, 3]
        h = self.lift(x).permute(0, 3, 1, 2)
        x_ft = torch.fft.rfft2(h)
        out_ft = torch.zeros(2, 4, 6, 4, dtype=torch.cfloat)
        out_ft[:, :, :2, :2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :2, :2], self.w1)
        out_ft[:, :, -2:, :2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -2:, :2], self.w2)
        return F.gelu(torch.fft.irfft2(out_ft, s=(6, 6)) + h)


class WriteInto(nn.Module):
    """Values written into slices of a tensor forward makes."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3))

    def forward(self, x):                                   # [2, 5, 5]
        out = torch.zeros(2, 5, 5)
        out[:, :3, :3] = x[:, :3, :3] @ self.w
        out[:, -2:, 1:4] = x[:, :2, 2:] * self.w[0]
        return out * 2 + out[:, :1]


class ComplexBufferUpdate(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("phase", torch.ones(3, dtype=torch.cfloat))

    def forward(self, x):
        self.phase.mul_(1j)
        return (self.phase * x).real


def check_complex(S, fx2sg):
    """Complex tensors (docs/models.md): ComplexOps and, where
    torch.export is, FNO's in-place spectral layer against PyTorch with
    their gradients; torch.fx's setitem refused by name; complex results
    and ops fx2sg lacks refused."""
    cases = [(ComplexOps, (4, 6), "complex, polar, conj, exp, abs, angle, real, imag, mT, mH, "
              "matmul, where, masked_fill, fft, ifft, rfft, irfft, fft2, rfftn, irfftn, "
              "hfft, ihfft, fftshift", 1, "auto"),
             (Spectrogram, (2, 40), "stft (windows, centring and padding modes, onesided or "
              "not)", 2, "auto"),
             (OverlapAdd, (2, 6, 9), "irfft frames overlap-added by F.fold (an inverse STFT), "
              "folds of kernels past the stride", 2, "auto"),
             (InverseSpectrogram, (2, 40), "istft (windows, length, centring, normalized)", 2,
              "auto")]
    if HAVE_EXPORT:
        cases += [(SpectralConv, (2, 6, 6, 3), "FNO's spectral layer, modes written in place "
                   "(torch.export)", 4, "export"),
                  (WriteInto, (2, 5, 5), "writes into slices of a new tensor (torch.export)", 1,
                   "export")]
    for cls, shape, label, least, trace in cases:
        torch.manual_seed(8)
        _check_loss_grads(S, fx2sg, cls(), [torch.randn(*shape, generator=GEN)], label, least,
                          trace=trace)

    # the overlap-add of a long frame is its phases (4 blocks here), not its 64 taps
    sg = fx2sg.export(Fn(lambda m, x, y: F.fold(x, (1, 112), (1, 64), stride=(1, 16))),
                      [g(1, 64, 4), g(1)]).sg
    S.report("F.fold of kernel 64, stride 16: fewer than 60 statements",
             None if sg.count("\n") < 60 else "%d lines:\n%s" % (sg.count("\n"), sg))

    def refused(label, m, args, needle, trace="auto"):
        try:
            fx2sg.export(m, args, trace=trace)
            why = "exported without an error"
        except fx2sg.Error as e:
            why = None if needle in str(e) else "message lacks %r: %s" % (needle, e)
        S.report("error: " + label, why)
    refused("torch.fx and a write into a tensor", WriteInto(), [torch.randn(2, 5, 5)],
            "torch.fx cannot trace a write into a tensor", trace="fx")
    refused("a complex output", Fn(lambda m, x, y: torch.fft.fft(x)), [g(4), g(1)],
            "output is a complex tensor")
    refused("a complex op fx2sg lacks",
            Fn(lambda m, x, y: torch.sqrt(torch.complex(x, y)).real), [g(4), g(4)],
            "no complex form of sqrt")
    refused("a transform fx2sg lacks (hfft2)",
            Fn(lambda m, x, y: torch.fft.hfft2(torch.complex(x, y).view(2, 2))), [g(4), g(4)],
            "no complex form of fft_hfft2")
    refused("an in-place update of a complex buffer", ComplexBufferUpdate(), [g(3)],
            "in-place write to the complex const 'phase'")


def check_inplace(S, fx2sg):
    """In-place ops as PyTorch runs them: a chain of them writes the
    tensor each names (h.mul_(2).add_(1) changes h twice); a module's
    buffer and an input written in place are written back (sgc run's --out
    holds the buffer after the call and the input as changed); an in-place
    op on memory a view shares, read afterwards, is an Error, not a
    silently stale value."""
    x = torch.randn(3, 4, generator=GEN)
    for name, m, kept in (("chain", InplaceChain(), ()), ("buffer", InplaceEma(), ("ema",)),
                          ("input", InplaceInput(), ("x",)),
                          ("copy_", CopyInto(), ("last", "hist"))):
        label = "api in place: " + name
        try:
            ex = fx2sg.export(m, [x.clone()])
        except fx2sg.Error as e:
            S.report(label, "export raised: %s" % e)
            continue
        out, why = run_export(S, ex, "ip")
        xe = x.clone()
        with torch.no_grad():
            want = {"out": m.eval()(xe)}
        for b in ("ema", "last", "hist"):
            if b in kept:
                want[b] = getattr(m, b)
        if "x" in kept:
            want["x"] = xe
        for k, e in want.items():
            why = why or ("'%s' missing from --out" % k if k not in out else
                          compare(out[k], e, atol=1e-6, rtol=1e-5))
        S.report(label, why)
    # a write into a slice is a new value of the whole tensor; through
    # other views (a reshape read later) it is an Error
    S.report("api in place on a slice of it", export_and_run(S, fx2sg, InplaceView(), [x.clone()]))
    S.report("api in place on a slice of a slice, both read after",
             export_and_run(S, fx2sg, InplaceNestedView(), [x.clone()]))
    for name, m in (("a view read later", InplaceViewLater()),):
        try:
            fx2sg.export(m, [x.clone()])
            why = "exported"
        except fx2sg.Error as e:
            why = None if "in-place op on memory" in str(e) else "another error: %s" % e
        S.report("api in place on %s: an Error" % name, why)


def check_conv_args(S, fx2sg):
    """nn.Conv2d's and the pools' arguments: exported ones match PyTorch,
    the ones sgc cannot honour are Errors naming them."""
    x = {"x": torch.randn(2, 4, 9, 8, generator=GEN)}
    ok = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(3, 1), dilation=(2, 1)),
          dict(kernel_size=3, groups=2, bias=False), dict(kernel_size=3, padding="same"),
          dict(kernel_size=(2, 3), padding="valid"), dict(kernel_size=3, padding="same",
                                                          dilation=2),
          dict(kernel_size=3, padding=1, padding_mode="reflect"),
          dict(kernel_size=3, padding=(2, 1), padding_mode="replicate")]
    pools = [("maxpool", lambda: nn.MaxPool2d(3, 2, 1)), ("maxpool k2", lambda: nn.MaxPool2d(2)),
             ("avgpool", lambda: nn.AvgPool2d(3, 1, 1)),
             ("avgpool no pad count", lambda: nn.AvgPool2d(2, count_include_pad=False)),
             ("maxpool ceil_mode", lambda: nn.MaxPool2d(3, 2, ceil_mode=True)),
             ("maxpool ceil_mode padded", lambda: nn.MaxPool2d(2, 3, 1, ceil_mode=True)),
             ("avgpool ceil_mode", lambda: nn.AvgPool2d(3, 2, ceil_mode=True)),
             ("avgpool ceil_mode padded no pad count",
              lambda: nn.AvgPool2d((3, 2), (2, 3), 1, ceil_mode=True, count_include_pad=False)),
             ("avgpool padded no pad count",
              lambda: nn.AvgPool2d(3, 1, 1, count_include_pad=False)),
             ("avgpool divisor_override", lambda: nn.AvgPool2d(2, divisor_override=3)),
             ("maxpool dilation", lambda: nn.MaxPool2d(2, dilation=2)),
             ("adaptive", lambda: nn.AdaptiveAvgPool2d((2, None))),
             ("global mean", lambda: Fn(lambda m, a, b: a.mean((-2, -1), keepdim=True)))]
    mods = [("conv %s" % kw, lambda kw=kw: ConvArgs(**kw)) for kw in ok] + pools
    for label, make in mods:
        m = make().eval()
        args = [x["x"]] + ([torch.zeros(1)] if isinstance(m, Fn) else [])
        S.report("api " + label, export_and_run(S, fx2sg, m, args))
    bad = [("same even kernel", lambda: ConvArgs(kernel_size=2, padding="same"), "asymmetric"),
           ("conv3d same, even depth", lambda: nn.Conv3d(4, 4, (2, 3, 3), padding="same"),
            "symmetric"),
           ("bn momentum None", lambda: nn.BatchNorm2d(4, momentum=None), "momentum=None")]
    for label, make, needle in bad:
        m = make()
        inp = [torch.randn(2, 4, 9, 8, generator=GEN) if "3d" not in label
               else torch.randn(2, 4, 5, 5, 5, generator=GEN)]
        try:
            fx2sg.export(m, inp, train=label.startswith("bn"))
            S.report("error: " + label, "exported without an error")
        except fx2sg.Error as e:
            S.report("error: " + label, None if needle in str(e) else
                     "message lacks %r: %s" % (needle, e))
    # BatchNorm without running statistics: batch statistics in training
    m = nn.BatchNorm2d(4, track_running_stats=False)
    S.report("api BatchNorm2d track_running_stats=False",
             export_and_run(S, fx2sg, m, [torch.randn(3, 4, 2, 2, generator=GEN)], train=True))


def check_sample(S):
    """samples/resnet_small.sg is what its documented command gives."""
    sample = os.path.join(HERE, "..", "..", "samples", "resnet_small.sg")
    out = S.path("resnet_small.sg")
    pr = main_fx2sg(os.path.join(HERE, "..", "..", "samples", "resnet_small.py") +
                    ":resnet_small", "-o", out, "--graph", "resnet_small", "--input",
                    "x=f32[8,3,32,32]", "--train", "--loss", "cross_entropy", "--optimizer",
                    "adamw(lr=0.001)", "--trace", "fx")
    if pr.returncode != 0:
        S.report("samples/resnet_small.sg regenerates", "fx2sg exited %d: %s" %
                 (pr.returncode, pr.stderr))
        return
    body = lambda p: open(p).read().split("\n", 1)[1]   # the header names torch's version
    S.report("samples/resnet_small.sg regenerates", None if body(out) == body(sample) else
             "fx2sg now gives another graph than samples/resnet_small.sg")

def check_attention_forms(S):
    """The Llama-style exports use the attention op: grouped-query heads
    as enable_gqa (no repeated k/v heads), a constant causal mask (bool
    tril or 0/-inf floats) as causal=true, another mask as the operand."""
    want = {"llama": ("causal=true, enable_gqa=true)", "%mask"),
            "llama_tril": ("causal=true, enable_gqa=true)", "%mask)"),
            "qwen2": ("causal=true, enable_gqa=true)", "%mask)"),
            "mistral": ("%mask, enable_gqa=true)", "causal=true")}
    for name, (has, lacks) in want.items():
        path = S.path("%s[fx].sg" % name)
        text = open(path).read() if os.path.exists(path) else ""
        att = [l for l in text.splitlines()
               if l.strip().startswith("%") and "= scaled_dot_product_attention(" in l]
        why = None
        if len(att) != 2:
            why = "expected 2 attention statements, found %d" % len(att)
        elif not all(has in l and lacks not in l for l in att):
            why = "expected '%s' and not '%s' in:\n%s" % (has, lacks, "\n".join(att))
        S.report("%s attention form" % name, why)
    # Attention written out with repeated key/value heads (Hugging Face's
    # eager path): sgc's -O2 makes it one attention with enable_gqa.
    path = S.path("llama_eager[fx].sg")
    pr = subprocess.run([S.sgc, "check", path, "--dump-after=attention"], capture_output=True,
                        text=True, timeout=60)
    att = [l for l in pr.stderr.splitlines() if "= scaled_dot_product_attention(" in l]
    S.report("llama_eager attention form after sgc's pass",
             None if pr.returncode == 0 and len(att) == 2 and
             all("enable_gqa=true" in l and "%mask" in l for l in att) else
             "exit %d:\n%s" % (pr.returncode, "\n".join(att) or pr.stderr[-1500:]))



def _wrap_with_set_grad_enabled(enabled, sub, *args):
    """Stands for torch.export's higher-order op of that name."""
    return sub(*args)


def check_wrapped(S, fx2sg):
    """torch.export's wrap_with_set_grad_enabled regions (Hugging Face's
    rotary embeddings run under torch.no_grad()) are inlined: the graph
    computes what it did; a region reading a param is an Error naming it.
    (Built by hand here: this torch may have no torch.export.)"""
    import operator
    import torch.fx as tfx

    class Sub(nn.Module):
        def forward(self, a, b):
            return a.cos() * 2, b + 1

    class Top(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))
            self.sub = tfx.symbolic_trace(Sub())

    def build(region_reads_param):
        g = tfx.Graph()
        x = g.placeholder("x")
        w = g.get_attr("w")
        call = g.call_function(_wrap_with_set_grad_enabled,
                               (False, g.get_attr("sub"), x, w if region_reads_param else x))
        a = g.call_function(operator.getitem, (call, 0))
        b = g.call_function(operator.getitem, (call, 1))
        g.output(g.call_function(operator.mul, (g.call_function(operator.add, (a, w)), b)))
        return tfx.GraphModule(Top(), g)

    _wrap_with_set_grad_enabled.__name__ = "wrap_with_set_grad_enabled"
    gm, x = build(False), torch.randn(3, generator=GEN)
    want = gm(x)
    fx2sg.inline_wrapped(gm)
    left = [n for n in gm.graph.nodes if n.op == "call_function" and
            getattr(n.target, "__name__", "") == "wrap_with_set_grad_enabled"]
    S.report("torch.export's no_grad region inlined", "still there" if left else
             compare(gm(x), want, atol=0, rtol=0))
    gm = build(True)
    want = gm(x)
    fx2sg.inline_wrapped(gm)
    stops = [n for n in gm.graph.nodes if n.target is torch.ops.aten.detach.default]
    S.report("a no_grad region reading a param: inlined, its two results detached",
             compare(gm(x), want, atol=0, rtol=0) if len(stops) == 2 else
             "%d detach nodes:\n%s" % (len(stops), gm.graph))

def check_loss_only(S):
    """--loss-only: the training step returns the loss alone (no module
    output), the same loss and gradients as with the outputs returned;
    without --loss it is a usage error."""
    base = ["%s:mlp" % os.path.join(HERE, "test_fx2sg.py"), "--trace", "fx", "--seed", "7",
            "--input", "x=f32[4,16]", "--loss", "cross_entropy"]
    got = {}
    for tag, extra in (("both", []), ("loss", ["--loss-only"])):
        sg, par, inp = S.path("lo_%s.sg" % tag), S.path("lo_%s.p" % tag), S.path("lo_%s.i" % tag)
        pr = main_fx2sg(*(base + extra + ["-o", sg, "--params", par, "--save-inputs", inp]))
        if pr.returncode != 0:
            S.report("--loss-only export (%s)" % tag, "fx2sg exited %d: %s" % (pr.returncode,
                                                                             pr.stderr))
            return
        ret = [l.strip() for l in open(sg) if l.strip().startswith("return ")]
        want = "return %loss" if extra else "return %out, %loss"
        if ret != [want]:
            S.report("--loss-only export (%s)" % tag, "returns %s, expected '%s'" % (ret, want))
            return
        got[tag], why = sgc_run(S, sg, par, inp, S.path("lo_%s.o" % tag))
        if why:
            S.report("--loss-only run (%s)" % tag, why)
            return
    why = "out" in got["loss"] and "the module output is still returned" or None
    for n in sorted(got["both"]):
        if n != "out" and not why:
            why = n not in got["loss"] and "%s missing" % n or compare(got["loss"][n],
                                                                       got["both"][n], 0, 0)
    S.report("--loss-only: the loss and gradients alone, equal", why)
    pr = main_fx2sg(*(base[:-2] + ["--loss-only", "-o", S.path("lo_bad.sg")]))
    S.report("--loss-only without --loss: a usage error",
             None if pr.returncode == 2 and "--loss-only needs --loss" in pr.stderr else
             "exit %d: %s" % (pr.returncode, pr.stderr))


def check_optimizer_spelling(S):
    """--optimizer in PyTorch's spelling (torch.optim.AdamW with betas and
    foreach): two steps of sgc run give the params and the optimizer state
    of two steps of that optimizer in PyTorch; what sgc's optimizers do
    not compute is a usage error naming it."""
    spec = "%s:mlp" % os.path.join(HERE, "test_fx2sg.py")
    text = "torch.optim.AdamW(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05, " \
        "foreach=False)"
    sg, par, inp = S.path("opt.sg"), S.path("opt.p"), S.path("opt.i")
    pr = main_fx2sg(spec, "--trace", "fx", "--seed", "7", "--input", "x=f32[4,16]", "--loss",
                    "cross_entropy", "--optimizer", text, "-o", sg, "--params", par,
                    "--save-inputs", inp)
    why = pr.returncode and "fx2sg exited %d: %s" % (pr.returncode, pr.stderr)
    if not why:
        line = [l.strip() for l in open(sg) if l.strip().startswith("optimizer ")]
        want = "optimizer adamw(lr=1e-2, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.05)"
        why = line != [want] and "statement %s, expected %s" % (line, want)
    if not why:
        out = S.path("opt.o")
        r = subprocess.run([S.sgc, "run", sg, "--params", par, "--inputs", inp, "--out", out,
                            "--steps", "2"], capture_output=True, text=True, timeout=120)
        why = r.returncode and "sgc run exited %d: %s" % (r.returncode, r.stderr)
    if not why:
        got, ins, m = stio.load(out), stio.load(inp), mlp().eval()  # as exported
        m.load_state_dict(stio.load(par))
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, betas=(0.8, 0.99), eps=1e-6,
                                weight_decay=0.05, foreach=False)
        for _ in range(2):
            opt.zero_grad()
            F.cross_entropy(m(ins["x"]), ins["target"]).backward()
            opt.step()
        for n, p in m.named_parameters():
            st = opt.state[p]
            for key, ref in ((n, p), ("opt.%s.exp_avg" % n, st["exp_avg"]),
                             ("opt.%s.exp_avg_sq" % n, st["exp_avg_sq"])):
                why = why or (key not in got and "%s missing" % key) or \
                    compare(got[key], ref.detach(), atol=1e-5, rtol=1e-4)
    S.report("--optimizer in PyTorch's spelling: two AdamW steps as PyTorch's", why or None)
    for bad, needle in (("torch.optim.SGD(lr=0.1, nesterov=True)", "no nesterov=True"),
                        ("torch.optim.Adam(lr=0.1)", "sgd and adamw"),
                        ("adamw(lr=0.1, momentum=0.9)", "not momentum"),
                        ("sgd(0.1)", "by keyword")):
        pr = main_fx2sg(spec, "--input", "x=f32[4,16]", "--loss", "mse", "--optimizer", bad,
                        "-o", S.path("opt_bad.sg"))
        S.report("--optimizer %s: a usage error" % bad,
                 None if pr.returncode == 2 and needle in pr.stderr and
                 not os.path.exists(S.path("opt_bad.sg")) else
                 "exit %d: %s" % (pr.returncode, pr.stderr))


def main():
    global stio, compare, dropout_keep, philox_words, FX
    sys.path.insert(0, HERE)
    from _common import Suite, compare as _compare, dropout_keep as _keep, \
        philox_words as _words
    import stio as _stio
    stio, compare, dropout_keep, philox_words = _stio, _compare, _keep, _words
    S = Suite("fx2sg")
    fx2sg = FX = load_fx2sg()
    for name, factory, flags, loss in MODELS:
        check_model(S, name, factory, flags, loss)
        if HAVE_EXPORT:
            check_model(S, name, factory, flags, loss, trace="export")
    check_attention_forms(S)
    check_api(S, fx2sg)
    check_errors(S, fx2sg)
    check_cli_outputs(S)
    check_cli_user_code(S)
    check_loss_only(S)
    check_optimizer_spelling(S)
    check_dims(S)
    check_wrapped(S, fx2sg)
    check_resnet_train(S)
    if HAVE_EXPORT:
        check_resnet_train(S, "export")
    check_conv_args(S, fx2sg)
    check_inplace(S, fx2sg)
    check_small_ops(S, fx2sg)
    check_writes(S, fx2sg)
    check_weight_norm(S, fx2sg)
    check_pools(S, fx2sg)
    check_tail(S, fx2sg)
    check_complex(S, fx2sg)
    check_renamed_params(S, fx2sg)
    check_hf_moe(S, fx2sg)
    check_dropout(S, fx2sg)
    check_sample(S)
    check_sample_files(S)
    S.finish()


if __name__ == "__main__":
    main()
