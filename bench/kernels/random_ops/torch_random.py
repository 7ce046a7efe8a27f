"""torch_random.py - PyTorch's dropout (eager, torch.compile), rand and a copy over
the shapes of the .sg programs beside it, medians of 30 by CUDA events (run on
the GPU machine; docs/performance.md, "The random ops' kernels")."""
import torch
import torch.nn.functional as F

x = torch.randn(32768, 8192, device="cuda", dtype=torch.bfloat16)


def t(f, n=30):
    """Median milliseconds of f over n calls, after 3 warm-up calls."""
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(n):
        s.record()
        f()
        e.record()
        torch.cuda.synchronize()
        ms.append(s.elapsed_time(e))
    ms.sort()
    return ms[len(ms) // 2]


print("torch dropout bf16 eager ms", t(lambda: F.dropout(x, 0.1, True)))
c = torch.compile(lambda x: F.dropout(x, 0.1, True))
print("torch dropout bf16 compiled ms", t(lambda: c(x)))
print("torch rand bf16 ms", t(lambda: torch.rand(32768, 8192, device="cuda", dtype=torch.bfloat16)))
print("torch copy ms", t(lambda: x * 1.0))
