"""torch_random.py - PyTorch's dropout (eager, torch.compile), rand and a copy over
the shapes of the .sg programs beside it, medians of 30 by CUDA events (run on
the GPU machine; docs/performance.md, "The random ops' kernels")."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from torch_ref import bench  # noqa: E402  (bench/torch_ref.py: the table's timing)

x = torch.randn(32768, 8192, device="cuda", dtype=torch.bfloat16)


def t(f):
    """Median milliseconds of f over 30 calls, after 3 warm-up calls."""
    return bench(f, iters=30, warm=3)["ms"]


print("torch dropout bf16 eager ms", t(lambda: F.dropout(x, 0.1, True)))
c = torch.compile(lambda x: F.dropout(x, 0.1, True))
print("torch dropout bf16 compiled ms", t(lambda: c(x)))
print("torch rand bf16 ms", t(lambda: torch.rand(32768, 8192, device="cuda", dtype=torch.bfloat16)))
print("torch copy ms", t(lambda: x * 1.0))
