"""ResNet's stem convolution (x [128, 3, 224, 224], w [64, 3, 7, 7], stride 2,
padding 3, bf16) through PyTorch's cuDNN: the forward and the weight
gradient, NCHW and channels last, with the input channels zero-padded to
4 and 8 (the same products: the padded channels add zeros), under
cuDNN's heuristics and under its timed choice (cudnn.benchmark).  Prints
each variant's median of 20 runs, ms.  Run on the GPU machine:
python3 bench/kernels/stem_conv.py
"""
import torch


def median_ms(fn, n=20):
    for _ in range(3):
        fn()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(n)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    return t[n // 2]


def variant(c, cl, bench):
    torch.backends.cudnn.benchmark = bench
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(128, c, 224, 224, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(64, c, 7, 7, device="cuda", dtype=torch.bfloat16, generator=g)
    if c > 3:
        x[:, 3:] = 0
        w[:, 3:] = 0
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
        w = w.contiguous(memory_format=torch.channels_last)
    y = torch.nn.functional.conv2d(x, w, stride=2, padding=3)
    dy = torch.randn_like(y)
    fwd = median_ms(lambda: torch.nn.functional.conv2d(x, w, stride=2, padding=3))
    wgrad = median_ms(lambda: torch.ops.aten.convolution_backward(
        dy, x, w, None, [2, 2], [3, 3], [1, 1], False, [0, 0], 1, [False, True, False]))
    pad = median_ms(lambda: torch.nn.functional.pad(x[:, :3], (0, 0, 0, 0, 0, 5)))
    return fwd, wgrad, pad


def main():
    print(torch.__version__, torch.backends.cudnn.version(), torch.cuda.get_device_name())
    print(f"{'variant':34} {'fwd ms':>8} {'wgrad ms':>9}")
    for bench in (False, True):
        for c, cl in ((3, False), (3, True), (4, True), (8, True), (8, False)):
            f, wg, _ = variant(c, cl, bench)
            name = f"C={c} {'NHWC' if cl else 'NCHW'} {'timed' if bench else 'heuristic'}"
            print(f"{name:34} {f:8.3f} {wg:9.3f}", flush=True)


if __name__ == "__main__":
    main()
