"""conv_layout.py - what the memory layout costs cuDNN's convolutions at
resnet18's shapes (B = 128, bf16): each conv2d of torchvision's resnet18
timed forward, data gradient and filter gradient, with NCHW tensors (as
sgc keeps them) and with channels-last ones (what torch.compile's layout
optimisation gives cuDNN), through PyTorch's own cuDNN calls
(torch.backends.cudnn.benchmark off: heuristics, as sgc's plans).

    python3 bench/conv_layout.py             (on the GPU machine)
    python3 bench/conv_layout.py --stem-pad

Prints one line a distinct shape and the totals over the network's 20
convolutions, in ms a training step.  --stem-pad times instead the stem
(7x7, stride 2, 3 channels) with its input and weight zero-padded to 4, 8
and 16 channels, in both layouts: whether padding the colours, as pad.c
pads products, would let cuDNN run it faster (by 0.12 ms a step at 8
channels on 2026-12-03: docs/performance.md).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import bench  # noqa: E402  (the table's timing: median of timed calls)

B = 128
# (count, c_in, c_out, kernel, stride, input size): torchvision resnet18
SHAPES = [(1, 3, 64, 7, 2, 224),
          (4, 64, 64, 3, 1, 56),
          (1, 64, 128, 3, 2, 56), (1, 64, 128, 1, 2, 56), (3, 128, 128, 3, 1, 28),
          (1, 128, 256, 3, 2, 28), (1, 128, 256, 1, 2, 28), (3, 256, 256, 3, 1, 14),
          (1, 256, 512, 3, 2, 14), (1, 256, 512, 1, 2, 14), (3, 512, 512, 3, 1, 7)]


def timed(fn):
    """The median ms of 20 individually timed calls after 5 (torch_ref.bench)."""
    return bench(fn)["ms"]


def one(cin, cout, k, st, hw, fmt, used=None):
    """The three products' ms; with used, only the first `used` channels
    of x and w are nonzero (the rest zero padding)."""
    x = torch.randn(B, cin, hw, hw, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cout, cin, k, k, device="cuda", dtype=torch.bfloat16)
    if used is not None:
        x[:, used:] = 0
        w[:, used:] = 0
    x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
    pad = k // 2
    y = torch.nn.functional.conv2d(x, w, stride=st, padding=pad)
    g = torch.randn_like(y)
    conv = torch.ops.aten.convolution_backward
    f = timed(lambda: torch.nn.functional.conv2d(x, w, stride=st, padding=pad))
    d = timed(lambda: conv(g, x, w, None, [st, st], [pad, pad], [1, 1], False, [0, 0], 1,
                           [True, False, False]))
    wg = timed(lambda: conv(g, x, w, None, [st, st], [pad, pad], [1, 1], False, [0, 0], 1,
                            [False, True, False]))
    return f, d, wg


def stem_pad():
    print("%-10s %-14s %8s %8s" % ("channels", "layout", "fwd ms", "wgrad"))
    for c in (3, 4, 8, 16):
        for name, fmt in (("NCHW", torch.contiguous_format), ("channels-last", torch.channels_last)):
            f, _, wg = one(c, 64, 7, 2, 224, fmt, used=3)
            print("%-10d %-14s %8.3f %8.3f" % (c, name, f, wg))


def main():
    torch.backends.cudnn.benchmark = False
    if "--stem-pad" in sys.argv[1:]:
        stem_pad()
        return
    tot = {}
    print("%-28s %-14s %8s %8s %8s" % ("conv (count x)", "layout", "fwd ms", "dgrad", "wgrad"))
    for n, cin, cout, k, st, hw in SHAPES:
        for name, fmt in (("NCHW", torch.contiguous_format), ("channels-last", torch.channels_last)):
            f, d, wg = one(cin, cout, k, st, hw, fmt)
            t = tot.setdefault(name, [0.0, 0.0, 0.0])
            t[0] += n * f
            # (the stem's data gradient is not needed in training)
            t[1] += n * d if cin != 3 else 0
            t[2] += n * wg
            print("%-28s %-14s %8.3f %8.3f %8.3f" % ("%dx %d->%d k%d s%d @%d" % (
                n, cin, cout, k, st, hw), name, f, d, wg))
    for name, (f, d, wg) in tot.items():
        print("total %-14s fwd %.3f  dgrad %.3f  wgrad %.3f  all %.3f ms" % (
            name, f, d, wg, f + d + wg))


if __name__ == "__main__":
    main()
