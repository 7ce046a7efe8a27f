"""torch_ref.py - the PyTorch side of the sgc benchmarks (bench/README.md).

The workloads of ../shared/anchors.md, written once as plain PyTorch
functions over dicts of tensors named as in the bench/*.sg programs, and
measured as ../shared/bench/torch_baselines.py and torch_baselines2.py
measure them (median of CUDA-event-timed calls after warm-up; peak is
torch.cuda.max_memory_allocated over the timed calls).

    python3 bench/torch_ref.py [--only A,B] [--variants V,W] [--json OUT]
        on the GPU machine: PyTorch eager, torch.compile (and CUDA-graph
        replay, optimizer-in-backward, save_on_cpu) for every workload (or
        the named variants), plus the machine's limits (a device copy,
        bf16 and f32 matrix products, the pinned host link each way);
        prints a table and writes OUT as it goes (a crash keeps what ran)
    python3 bench/torch_ref.py --dry
        the same code at the --check size on the CPU (no GPU needed), to
        try it; the figures mean nothing
    python3 bench/torch_ref.py --make-inputs DIR
        writes DIR/PROGRAM.safetensors, random inputs of each benchmark
        program at full size, for the sgc drivers' --inputs
    python3 bench/torch_ref.py --programs
        one line per benchmark program: NAME SGFILE ITERS [SGC FLAGS...]
    python3 bench/torch_ref.py --table --sgc S.jsonl --torch T.json
        [--compile C.json] [--checks SMALL_CHECK.txt] [--md OUT.md]
        the one table: sgc against PyTorch, ratios, rates against limits
    python3 bench/torch_ref.py --trace-summary DIR
        where the time of each traced driver call (DIR/PROGRAM.json) went
    python3 bench/torch_ref.py --check --sgc-bin SGC [--only A,B]
        here, on the CPU: each bench program run with `sgc run` at small
        dims (-D) on the inputs and params written from here, compared
        with the PyTorch function of the same name: returned values,
        and for training steps the parameter updates.  Exit 1 on a
        mismatch.

Runs under any python3 with torch and numpy (on the CPU for --check and
--make-inputs; torch.compile and CUDA for the rest).
"""
import argparse
import gc
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_timeline import trace_slices  # noqa: E402

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------- safetensors

ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
    "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
    "BOOL": torch.bool,
}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}


def st_raw(t):
    """A numpy view of the bytes of t, row-major, on the CPU."""
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy()


def st_save(path, tensors):
    """Writes tensors (a dict) as a safetensors file."""
    header, raws, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        r = st_raw(t)
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + r.nbytes]}
        raws.append(r)
        off += r.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for r in raws:
            f.write(memoryview(r.reshape(-1)).cast("B"))


def st_load(path):
    """The tensors of a safetensors file, as a dict."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt = ST_DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + end])
        if dt in (torch.bfloat16, torch.float16):
            t = torch.frombuffer(raw, dtype=torch.int16).view(dt) if raw \
                else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if raw \
                else torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"]).clone()
    return out

# ---------------------------------------------------------------- workloads
# Each workload: dims (as the .sg file declares them, full size), small
# dims for --check, the program's float dtype, its inputs and params
# (params and consts, named as in the .sg file), the forward function
# (returning the .sg program's returned values by name), and its training
# rule (None: forward only).


def uniform(shape, dt, dev, gen, bound=None):
    """U(-b, b) with b = 1/sqrt(last dim): nn.Linear's default, and the
    distribution of sgc's own initialisation (runtime/init.h)."""
    b = bound if bound is not None else 1.0 / math.sqrt(shape[-1])
    t = torch.rand(shape, generator=gen, device=dev, dtype=torch.float32)
    return ((2 * t - 1) * b).to(dt)


def randn(shape, dt, dev, gen, scale=1.0):
    t = torch.randn(shape, generator=gen, device=dev, dtype=torch.float32)
    return (t * scale).to(dt)


def sdpa(q, k, v):
    """Causal scaled dot-product attention (the math where PyTorch is too
    old to have F.scaled_dot_product_attention)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, -1) @ v.float()).to(q.dtype)


class EwChain:
    name = "ew_chain"
    dims = {"N": 1 << 28}
    small = {"N": 1000}
    dtype = torch.float32
    train = None
    iters, warm = 20, 5

    def make(self, d, dt, dev, gen, check=False):
        n = d["N"]
        inputs = {"x": randn([n], dt, dev, gen)}
        params = {k: randn([n], dt, dev, gen) for k in ("a", "b", "c")}
        return inputs, params

    def forward(self, P, I):
        return {"y": F.gelu(I["x"] * P["a"] + P["b"]) * P["c"]}

    def work(self, d):
        return ("GB/s", 5 * 4 * d["N"])

    def io_bytes(self, d):
        return 2 * 4 * d["N"]                   # x in, y out


class Mlp:
    """x[B, D] @ w1[D, H] -> gelu -> @ w2[H, D], MSE, SGD."""
    dims = {"B": 8192, "D": 4096, "H": 16384}
    small = {"B": 8, "D": 16, "H": 32}
    train = ("sgd", 1e-3)
    iters, warm = 10, 3

    def __init__(self, dtype):
        self.dtype = dtype
        self.name = "mlp_" + {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
        if dtype == torch.bfloat16:
            self.iters, self.warm = 20, 5

    def make(self, d, dt, dev, gen, check=False):
        B, D, H = d["B"], d["D"], d["H"]
        inputs = {"x": randn([B, D], dt, dev, gen),
                  "y": randn([B, D], dt, dev, gen)}
        params = {"w1": randn([D, H], dt, dev, gen, D ** -0.5),
                  "w2": randn([H, D], dt, dev, gen, H ** -0.5)}
        return inputs, params

    def forward(self, P, I):
        h = F.gelu(I["x"] @ P["w1"])
        o, y = h @ P["w2"], I["y"]
        if o.device.type == "cpu" and o.dtype == torch.bfloat16:
            # (old CPU PyTorch has no bf16 mse_loss; the GPU path is
            # F.mse_loss, which computes in float and rounds the mean)
            return {"loss": (o.float() - y.float()).pow(2).mean().to(o.dtype)}
        return {"loss": F.mse_loss(o, y)}

    def work(self, d):
        return ("TFLOP/s", 3 * 2 * 2 * d["B"] * d["D"] * d["H"])

    def io_bytes(self, d):
        return 2 * d["B"] * d["D"] * torch.empty((), dtype=self.dtype).element_size() + 4


class Transformer:
    """8 pre-LN blocks; loss = mean(float(y)^2); SGD."""
    name = "transformer"
    L = 8
    dims = {"B": 8, "T": 2048, "D": 2048, "NH": 16, "HD": 128,
            "D3": 6144, "F": 8192}
    small = {"B": 2, "T": 8, "D": 32, "NH": 2, "HD": 16, "D3": 96, "F": 128}
    dtype = torch.bfloat16
    train = ("sgd", 1e-3)
    iters, warm = 10, 3
    offload_ref = True      # also PyTorch's save_on_cpu

    def param_bytes(self, d):
        D = d["D"]
        return self.L * (12 * D * D + 4 * D) * 2

    def make(self, d, dt, dev, gen, check=False):
        B, T, D, F4 = d["B"], d["T"], d["D"], d["F"]
        inputs = {"x": randn([B, T, D], dt, dev, gen)}
        params = {}
        for l in range(self.L):
            p = "l%d." % l
            # LayerNorm starts at weight 1, bias 0 in PyTorch; a little
            # noise makes --check see both used.
            params[p + "ln1.w"] = 1 + uniform([D], dt, dev, gen, 0.1)
            params[p + "ln1.b"] = uniform([D], dt, dev, gen, 0.1)
            params[p + "qkv.w"] = uniform([3 * D, D], dt, dev, gen)
            params[p + "proj.w"] = uniform([D, D], dt, dev, gen)
            params[p + "ln2.w"] = 1 + uniform([D], dt, dev, gen, 0.1)
            params[p + "ln2.b"] = uniform([D], dt, dev, gen, 0.1)
            params[p + "fc1.w"] = uniform([F4, D], dt, dev, gen)
            params[p + "fc2.w"] = uniform([D, F4], dt, dev, gen)
        return inputs, params

    def forward(self, P, I):
        # The Block of ../shared/bench/torch_baselines.py, functionally.
        x = I["x"]
        B, T, D = x.shape
        NH = self.nh
        for l in range(self.L):
            p = "l%d." % l
            h = F.layer_norm(x, (D,), P[p + "ln1.w"], P[p + "ln1.b"])
            q, k, v = F.linear(h, P[p + "qkv.w"]).view(
                B, T, 3, NH, D // NH).permute(2, 0, 3, 1, 4)
            a = sdpa(q, k, v).transpose(1, 2).reshape(B, T, D)
            x = x + F.linear(a, P[p + "proj.w"])
            h2 = F.layer_norm(x, (D,), P[p + "ln2.w"], P[p + "ln2.b"])
            x = x + F.linear(F.gelu(F.linear(h2, P[p + "fc1.w"])),
                             P[p + "fc2.w"])
        return {"loss": x.float().pow(2).mean()}

    def setdims(self, d):
        self.nh = d["NH"]

    def work(self, d):
        B, T, D = d["B"], d["T"], d["D"]
        fwd = 24 * B * T * D * D + 2 * B * T * T * D   # causal attention
        return ("TFLOP/s", 3 * self.L * fwd)

    def io_bytes(self, d):
        return d["B"] * d["T"] * d["D"] * 2 + 4


class Mlp8:
    """8 x (Linear(D, D, no bias), GELU), bf16, loss = mean(float(y)^2),
    AdamW (lr 1e-4, PyTorch's defaults otherwise)."""
    name = "mlp8"
    L = 8
    dims = {"B": 1024, "D": 8192}
    small = {"B": 4, "D": 32}
    dtype = torch.bfloat16
    train = ("adamw", 1e-4)
    iters, warm = 10, 3

    def make(self, d, dt, dev, gen, check=False):
        B, D = d["B"], d["D"]
        inputs = {"x": randn([B, D], dt, dev, gen)}
        # (--check: He-uniform, so that 8 small layers keep their
        # activations and gradients far above AdamW's eps, where the
        # update is well conditioned; the GPU run: nn.Linear's default)
        b = math.sqrt(6.0 / D) if check else None
        params = {"l%d.w" % l: uniform([D, D], dt, dev, gen, b)
                  for l in range(self.L)}
        return inputs, params

    def param_bytes(self, d):
        return self.L * d["D"] * d["D"] * 2

    def forward(self, P, I):
        x = I["x"]
        for l in range(self.L):
            x = F.gelu(F.linear(x, P["l%d.w" % l]))
        return {"loss": x.float().pow(2).mean()}

    def work(self, d):
        return ("TFLOP/s", 3 * 2 * d["B"] * d["D"] * d["D"] * self.L)

    def io_bytes(self, d):
        return d["B"] * d["D"] * 2 + 4


class TwoBranch:
    """Two independent branches of 16 x (x @ w, tanh), sharing w0..w15."""
    name = "two_branch"
    dims = {"B": 64, "D": 1024}
    small = {"B": 4, "D": 32}
    dtype = torch.float32
    train = None
    iters, warm = 50, 10

    def make(self, d, dt, dev, gen, check=False):
        B, D = d["B"], d["D"]
        inputs = {"xa": randn([B, D], dt, dev, gen),
                  "xb": randn([B, D], dt, dev, gen)}
        params = {"w%d" % k: uniform([D, D], dt, dev, gen) for k in range(16)}
        return inputs, params

    def branch(self, P, x):
        for k in range(16):
            x = torch.tanh(x @ P["w%d" % k])
        return x

    def forward(self, P, I):
        return {"a15": self.branch(P, I["xa"]), "b15": self.branch(P, I["xb"])}

    def work(self, d):
        return (None, 0)

    def io_bytes(self, d):
        return 4 * d["B"] * d["D"] * 4          # xa, xb in; a15, b15 out


# ---------------------------------------------------------------- real models
# The models of bench/models.py, exported to bench/NAME.sg by fx2sg with the
# batch as `dim B` (the sequence length of the language models is fixed at
# export).  The sgc side reads everything it needs from the .sg file (its
# inputs' names, dtypes and shapes); its params come from the driver's (and
# `sgc run`'s) --seed initialisation, the same on both, and its consts too
# unless bench/NAME.consts.safetensors holds them (models.py export writes
# it: a causal mask or position ids that random values would spoil).  The
# PyTorch side builds the module with the models.py factory, which imports
# transformers, torchvision or timm only then.

SG_DTYPES = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16,
             "bf16": torch.bfloat16, "i64": torch.int64, "i32": torch.int32,
             "bool": torch.bool}


def sg_decls(path, d):
    """The inputs, params and consts of the .sg file at path, at dims d
    (over the file's own `dim` lines): {name: (kind, dtype, shape)}."""
    import re
    dims, out = {}, {}
    with open(path) as f:
        text = f.read()
    for m in re.finditer(r"^\s*dim\s+(\w+)\s*=\s*(\d+)", text, re.M):
        dims[m.group(1)] = int(m.group(2))
    dims.update(d)
    for m in re.finditer(r"^\s*(input|param|const)\s+%(\S+)\s*:\s*(\w+)\[([^\]]*)\]",
                         text, re.M):
        shape = []
        for e in (x.strip() for x in m.group(4).split(",") if x.strip()):
            if not re.fullmatch(r"[\w\s+*/()-]+", e):
                raise ValueError("%s: shape '%s' of %s" % (path, e, m.group(2)))
            shape.append(int(eval(e.replace("/", "//"), {"__builtins__": {}},
                                  dict(dims))))
        out[m.group(2)] = (m.group(1), SG_DTYPES[m.group(3)], shape)
    return out


class Model:
    """A real model of bench/models.py: cross_entropy on random targets,
    SGD at models.LR (the exported `optimizer` statement)."""
    dtype = torch.bfloat16

    def __init__(self, name, classes, small, iters, est_s, check=True):
        import models
        self.name, self.classes, self.small = name, classes, small
        self.sgfile = name + ".sg"
        self.dims = dict(models.MODELS[name][3])
        self.train = ("sgd", models.LR)
        self.iters, self.warm = iters, 3
        self.est_s = est_s          # seconds each PyTorch variant may take
        self.small_check = check    # `sgc run` at the small dims, here

    def path(self):
        return os.path.join(HERE, self.sgfile)

    def decls(self, d):
        return sg_decls(self.path(), d)

    def make(self, d, dt, dev, gen, check=False):
        """Random inputs: floats N(0, 1), integers (token ids, targets) in
        [0, classes).  No params: both sides initialise them from --seed."""
        inputs = {}
        for name, (kind, t, shape) in self.decls(d).items():
            if kind != "input":
                continue
            if t.is_floating_point:
                inputs[name] = randn(shape, t, dev, gen)
            else:
                inputs[name] = torch.randint(0, self.classes, shape,
                                             generator=gen, device=dev,
                                             dtype=t)
        return inputs, {}

    def consts(self, d):
        """bench/NAME.consts.safetensors at dims d (a const exported with
        the batch at 1, expanded along it), or {} without the file."""
        f = os.path.join(HERE, self.name + ".consts.safetensors")
        if not os.path.exists(f):
            return {}
        dec, out = self.decls(d), {}
        for k, v in st_load(f).items():
            if k in dec and list(v.shape) != dec[k][2]:
                v = v.expand(dec[k][2])
            out[k] = v.contiguous()
        return out

    def param_bytes(self, d):
        return sum(math.prod(s) * torch.empty((), dtype=t).element_size()
                   for k, t, s in self.decls(d).values() if k != "input")

    def io_bytes(self, d):
        """The inputs and what the graph returns: the loss alone (exported
        with --loss-only, as bench/models.py does), or also the logits
        (classes a target) when its return names more."""
        dec = self.decls(d)
        ins = sum(math.prod(s) * torch.empty((), dtype=t).element_size()
                  for k, t, s in dec.values() if k == "input")
        with open(self.path()) as f:
            rets = re.findall(r"^\s*return\s+(.*)$", f.read(), re.M)
        if rets and rets[-1].split() == ["%loss"]:
            return ins + 4
        n = math.prod(dec["target"][2]) if "target" in dec else 0
        return ins + 2 * n * self.classes + 4

    def work(self, d):
        return (None, 0)


def run_model(w, dry, one):
    """Eager and torch.compile of the models.py module: a step is the
    logits, cross_entropy against the target, backward, and SGD.  Returns
    why it did not run (no .sg, or the module's package missing), or
    None."""
    import copy
    import models
    if not os.path.exists(w.path()):
        return "no bench/%s (export it: python3 bench/models.py export " \
            "bench %s)" % (w.sgfile, w.name)
    try:
        cpu = models.MODELS[w.name][0]()
    except ImportError as ex:
        return "cannot build the module: %s" % ex
    dev = "cpu" if dry else "cuda"
    d = dims_of(w, dry)
    lr = w.train[1]

    def make(comp):
        m = copy.deepcopy(cpu).to(dev).train()
        gen = torch.Generator(device=dev)
        gen.manual_seed(0)
        I, _ = w.make(d, w.dtype, dev, gen)
        t = I.pop("target")
        (x,) = I.values()
        ps = [p for p in m.parameters() if p.requires_grad]

        def loss(x, t):
            return F.cross_entropy(m(x), t)
        f = torch.compile(loss) if comp else loss

        def step():
            f(x, t).backward()
            with torch.no_grad():
                for p in ps:
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-lr)
                        p.grad = None
        return step

    one("eager", lambda: make(False))
    if not dry:
        one("compile", lambda: make(True))
    del cpu
    return None


# (in the order the GPU run takes them: the cheap ones first, so that a
# run stopped by its time limit still has most rows)
# The real models last, cheapest first: each variant's est_s is the most
# it is given (torch.compile's compile time included); a variant that
# would not finish in the time left is skipped, named in the table.
WORKLOADS = {w.name: w for w in (
    EwChain(), TwoBranch(), Mlp(torch.float32), Mlp(torch.bfloat16), Mlp8(),
    Transformer(),
    Model("vit_tiny", 1000, {"B": 2}, 10, {"eager": 30, "compile": 60}),
    Model("resnet18", 1000, {"B": 2}, 10, {"eager": 30, "compile": 60}),
    # (the language models are exported at their table's sizes, so there
    # are no small dims: no `sgc run` check here, whose 8192 or 8192
    # tokens would take many minutes on the CPU; models_llama.py checks
    # the same exports at small configs against PyTorch)
    Model("gpt2", 50257, {}, 10, {"eager": 40, "compile": 70}, check=False),
    Model("gpt2_dropout", 50257, {}, 10, {"eager": 40, "compile": 70}, check=False),
    Model("llama", 32000, {}, 10, {"eager": 50, "compile": 70},
          check=False))}

# The benchmark programs: name, .sg file, sgc flags, workload, and the
# PyTorch figures it is compared with: eager and the reference (torch.compile,
# or CUDA-graph replay for the launch-bound rows), and its target.
PROGRAMS = [
    ("ew_chain", "ew_chain.sg", [], "ew_chain", "eager", "compile", "bw95"),
    ("two_branch_1s", "two_branch_1s.sg", [], "two_branch",
     "eager_one_stream", "graph_one_stream", "none"),
    ("two_branch", "two_branch.sg", [], "two_branch",
     "eager_two_streams", "graph_two_streams", "faster_than_1s"),
    ("two_branch_1s_cg", "two_branch_1s.sg", ["--cuda-graph"], "two_branch",
     "eager_one_stream", "graph_one_stream", "time"),
    ("two_branch_cg", "two_branch.sg", ["--cuda-graph"], "two_branch",
     "eager_two_streams", "graph_two_streams", "time"),
    ("mlp_f32", "mlp_f32.sg", [], "mlp_f32", "eager", "compile", "time"),
    ("mlp_bf16", "mlp_bf16.sg", [], "mlp_bf16", "eager", "compile", "time"),
    ("mlp8_adamw_unfused", "mlp8_adamw_unfused.sg", [], "mlp8", "eager",
     "compile", "time"),
    ("mlp8_adamw", "mlp8_adamw.sg", [], "mlp8", "eager_opt_in_bwd",
     "compile_opt_in_bwd", "fused"),
    ("transformer", "transformer.sg", [], "transformer", "eager", "compile",
     "time90_mem"),
    # --remat-budget (docs/autograd.md): the GELU outputs kept from forward
    # while the planned arena stays at or under 8.4 GB (8.32 GB: six of
    # the eight kept, %l1.g and %l0.g recomputed; 6.98 GB with every copy
    # remat makes), about 9.34 GB with params and workspaces against
    # torch.compile's 9.64 (8.98 GiB): sgc at torch.compile's memory
    ("transformer_rb", "transformer.sg", ["--remat-budget=8400000000"],
     "transformer", "eager", "compile", "time90_mem"),
    # offloading (docs/offload.md): the set of 55 values written out, and
    # --offload=auto at the largest budgets (the fewest bytes over the
    # link) whose plans lower the transformer's peak by 15% and by 20%
    # (`sgc check --memory`: device arena 6.98 GB without offloading,
    # 5.77 GB at 5 800 000 000 (13 values of the first three blocks,
    # 1.28 GB; 5 840 000 000 plans 5.91 GB), 5.37 GB at 5 400 000 000
    # (1.68 GB); docs/offload.md, "The 15% row after remat's trim");
    # each against sgc's transformer row, and PyTorch's save_on_cpu
    ("transformer_offload", "transformer_offload.sg", [], "transformer",
     "eager", "eager_save_on_cpu", "offload"),
    # --offload=auto at a budget of 0: whatever lowers the peak, which
    # here is every value backward reads but six of the last block's and
    # the loss's (66, 6.04 GB; device arena 1.21 GB), near save_on_cpu's
    # footing (it keeps them all on the host): judged against it on time
    # and peak
    ("transformer_offload_all", "transformer.sg", ["--offload-budget=0"],
     "transformer", "eager", "eager_save_on_cpu", "time_mem"),
    ("transformer_off85", "transformer.sg", ["--offload-budget=5800000000"],
     "transformer", "eager", "eager_save_on_cpu", "offload_peak15"),
    ("transformer_off80", "transformer.sg", ["--offload-budget=5400000000"],
     "transformer", "eager", "eager_save_on_cpu", "offload_peak20"),
    # the real models (bench/models.py), against torch.compile of the same
    # module
    ("vit_tiny", "vit_tiny.sg", [], "vit_tiny", "eager", "compile", "time_mem"),
    ("resnet18", "resnet18.sg", [], "resnet18", "eager", "compile", "time_mem"),
    ("gpt2", "gpt2.sg", [], "gpt2", "eager", "compile", "time_mem"),
    ("gpt2_dropout", "gpt2_dropout.sg", [], "gpt2_dropout", "eager", "compile", "time_mem"),
    ("llama", "llama.sg", [], "llama", "eager", "compile", "time_mem"),
]


def dims_of(w, small):
    d = dict(w.small if small else w.dims)
    if hasattr(w, "setdims"):
        w.setdims(d)
    return d


def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts.values())

# ---------------------------------------------------------------- timing


def bench(fn, iters=20, warm=5, base=0):
    """As ../shared/bench/torch_baselines.py: median and min ms of timed
    calls after warm-up, peak allocated GiB over the timed calls (less
    `base`, the bytes allocated before the workload was made: what an
    earlier variant may have left behind).  Without CUDA (--dry): host
    timing, no peak."""
    for _ in range(warm):
        fn()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    ts = []
    for _ in range(iters):
        if not cuda:
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
            continue
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 30 if cuda else 0
    if cuda and hasattr(fn, "peak_bytes"):
        # a CUDA graph's replay allocates nothing: its intermediates sit
        # in the graph's private pool, which the allocator counts as free
        # once the capture ends (graphed() gives its own peak)
        peak = fn.peak_bytes / 2 ** 30
    return {"ms": round(ts[len(ts) // 2], 4), "ms_min": round(ts[0], 4),
            "peak_gib": round(peak, 3)}


# BENCH_TORCH_PROFILE=DIR: after timing each variant, its kernels over
# two more calls (torch.profiler) into DIR/WORKLOAD.VARIANT.txt, to set
# beside the sgc drivers' traces.
PROFILE_DIR = os.environ.get("BENCH_TORCH_PROFILE")


def profile_kernels(fn, path):
    """The CUDA kernels of two calls of fn, by total time."""
    from torch.profiler import profile, ProfilerActivity
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        fn()
        torch.cuda.synchronize()
    with open(path, "w") as f:
        f.write(prof.key_averages().table(sort_by="cuda_time_total",
                                          row_limit=40, max_name_column_width=90))


def train_step(w, P, fwd, in_bwd=False, on_cpu=False):
    """A training step of workload w through fwd: backward, then the
    update (or, with in_bwd, each param's update in a post-accumulate-grad
    hook, as the anchors' optimizer-in-backward rows; with on_cpu, the
    saved activations kept in pinned host memory by
    torch.autograd.graph.save_on_cpu, as the anchors' offloading row)."""
    if on_cpu:
        inner = fwd

        def fwd():
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                return inner()
    kind, lr = w.train
    ps = list(P.values())
    for p in ps:
        p.requires_grad_(True)
    if kind == "adamw":
        if in_bwd:
            opts = {p: torch.optim.AdamW([p], lr=lr, foreach=False) for p in ps}

            def hook(p):
                opts[p].step()
                opts[p].zero_grad(set_to_none=True)
        else:
            opt = torch.optim.AdamW(ps, lr=lr)
    else:
        def hook(p):
            with torch.no_grad():
                p.add_(p.grad, alpha=-lr)
            p.grad = None
    if in_bwd:
        handles = [p.register_post_accumulate_grad_hook(hook) for p in ps]

        def step():
            fwd()["loss"].backward()
        step.handles = handles
        return step

    def step():
        fwd()["loss"].backward()
        if kind == "adamw":
            opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                for p in ps:
                    p.add_(p.grad, alpha=-lr)
                    p.grad = None
    return step


def run_workload(w, log, dry=False, only=None, t_end=None, out=None,
                 dump=lambda: None):
    """Every PyTorch variant of workload w at full size, on the GPU (dry:
    at the --check size on the CPU, to try the code where there is no
    GPU); only: the names of the variants to run (None: all); t_end: the
    time.time() by which the run must end (a variant whose w.est_s does
    not fit in what is left is skipped, and says so); out: the dict the
    results go into, dump() called after each variant."""
    dev = "cpu" if dry else "cuda"
    d = dims_of(w, dry)
    out = {} if out is None else out

    def fresh():
        gen = torch.Generator(device=dev)
        gen.manual_seed(0)
        return w.make(d, w.dtype, dev, gen)

    def one(name, make_fn, iters=None, warm=None):
        if only and name not in only:
            return
        t0 = time.time()
        need = getattr(w, "est_s", {}).get(name, 0)
        if t_end is not None and need and t0 + need > t_end:
            out[name] = {"skipped": "%.0f s left of the run's budget, the "
                         "variant may take %d s" % (t_end - t0, need)}
            log("  %-22s %s" % (name, out[name]))
            return
        if hasattr(torch, "_dynamo"):
            torch._dynamo.reset()
        gc.collect()    # hooks and optimizers of a variant make cycles
        base = 0
        if not dry:
            # cuBLAS keeps a workspace per stream from its first product
            # on; freed here, each variant's peak counts its own, as
            # sgc's counts its cuBLASLt workspaces
            if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
                torch._C._cuda_clearCublasWorkspaces()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
        try:
            fn = make_fn()
            out[name] = bench(fn, 2 if dry else iters or w.iters,
                              1 if dry else warm or w.warm, base)
            out[name]["left_gib"] = round(base / 2 ** 30, 3)
            if PROFILE_DIR and not dry:
                profile_kernels(fn, os.path.join(
                    PROFILE_DIR, "%s.%s.txt" % (w.name, name)))
        except Exception as ex:  # record and go on: one table regardless
            out[name] = {"error": repr(ex)[:300]}
        out[name]["wall_s"] = round(time.time() - t0, 1)
        log("  %-22s %s" % (name, out[name]))
        dump()
        if not dry:
            torch.cuda.synchronize()

    if w.name == "two_branch":
        if not dry:
            run_two_branch(w, fresh, one)
        return out
    if isinstance(w, Model):
        why = run_model(w, dry, one)
        if why:
            log("  " + why)
            out.update({"eager": {"skipped": why}, "compile": {"skipped": why}})
        return out
    if w.train is None:
        def eager():
            I, P = fresh()
            return lambda: w.forward(P, I)

        def compiled():
            I, P = fresh()
            f = torch.compile(w.forward)
            return lambda: f(P, I)
        one("eager", eager)
        one("compile", compiled)
        return out
    variants = [("eager", False, False, False)]
    if getattr(w, "offload_ref", False):
        variants += [("eager_save_on_cpu", False, False, True)]
    variants += [("compile", True, False, False)]
    if w.train[0] == "adamw":
        variants += [("eager_opt_in_bwd", False, True, False),
                     ("compile_opt_in_bwd", True, True, False)]
    for name, comp, in_bwd, on_cpu in variants:
        def make(comp=comp, in_bwd=in_bwd, on_cpu=on_cpu):
            I, P = fresh()
            f = torch.compile(w.forward) if comp else w.forward
            return train_step(w, P, lambda: f(P, I), in_bwd, on_cpu)
        one(name, make)
    return out


def run_two_branch(w, fresh, one):
    """One stream and two streams, eager and as CUDA-graph replay, as in
    ../shared/bench/torch_baselines2.py.  Each variant makes its own
    tensors, so that its peak counts the weights and inputs; a graph's
    peak also counts its private pool (bench: held_bytes)."""
    s1 = torch.cuda.Stream()

    def fn_one(I, P):
        def f():
            w.branch(P, I["xa"])
            w.branch(P, I["xb"])
        return f

    def fn_two(I, P):
        def f():
            cur = torch.cuda.current_stream()
            s1.wait_stream(cur)
            w.branch(P, I["xa"])
            with torch.cuda.stream(s1):
                w.branch(P, I["xb"])
            cur.wait_stream(s1)
        return f

    def graphed(mk):
        I, P = fresh()
        fn = mk(I, P)
        cs = torch.cuda.Stream()
        cs.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(cs):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(cs)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            # (host calls only: inside the capture, after it has freed
            # the cuBLAS workspaces, which the graph's pool gets again)
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            fn()

        def replay():
            g.replay()
        # the replay's memory: the weights and inputs it reads, and the
        # graph's pool, which is what the capture allocated at most (its
        # intermediates, outputs and cuBLAS workspaces)
        replay.peak_bytes = nbytes(I) + nbytes(P) + \
            torch.cuda.max_memory_allocated() - before
        return replay

    one("eager_one_stream", lambda: fn_one(*fresh()))
    one("eager_two_streams", lambda: fn_two(*fresh()))
    one("graph_one_stream", lambda: graphed(fn_one))
    one("graph_two_streams", lambda: graphed(fn_two))


def run_limits(log):
    """The machine's ceilings in this run: a device copy of 2^28 f32 (bytes
    read plus written), and matrix products on random data in bf16 and in
    f32 without TF32."""
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    r = bench(lambda: y.copy_(x), 20, 5)
    out = {"copy_ms": r["ms"], "copy_GBps": round(2 * n * 4 / r["ms"] / 1e6, 1)}
    del x, y
    # bf16: 8192^3; f32: the MLP's first product (8192x4096 @ 4096x16384):
    # on 2026-11-29 an 8192^3 f32 product ran at 50.8 TFLOP/s while both
    # MLP steps ran at 60, so the square product is no ceiling for them
    for dt, key, (m, k, n) in ((torch.bfloat16, "bf16", (8192, 8192, 8192)),
                               (torch.float32, "f32", (8192, 4096, 16384))):
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(k, n, device="cuda", dtype=dt)
        r = bench(lambda: a @ b, 10, 3)
        out[key + "_TFLOPs"] = round(2 * m * k * n / r["ms"] / 1e9, 1)
        del a, b
    # the host link (offloading's limit): 1 GiB between pinned host
    # memory and the device, each way
    h = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dv = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    for key, fn in (("h2d_GBps", lambda: dv.copy_(h, non_blocking=True)),
                    ("d2h_GBps", lambda: h.copy_(dv, non_blocking=True))):
        r = bench(fn, 5, 2)
        out[key] = round((1 << 30) / r["ms"] / 1e6, 1)
    del h, dv
    torch.cuda.empty_cache()
    log("  limits %s" % out)
    return out


def cmd_run(args):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    names = list(WORKLOADS)
    if args.only:   # workloads, or programs standing for their workloads
        pw = {p[0]: p[3] for p in PROGRAMS}
        want = {pw.get(x, x) for x in args.only.split(",")}
        names = [n for n in names if n in want]
    res = {"torch": torch.__version__,
           "gpu": "CPU (--dry)" if args.dry else torch.cuda.get_device_name(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S")}

    def log(s):
        print(s, file=sys.stderr, flush=True)

    def dump():
        if args.json:
            with open(args.json + ".tmp", "w") as f:
                json.dump(res, f, indent=1)
            os.replace(args.json + ".tmp", args.json)

    if not args.dry:
        log("limits")
        res["limits"] = run_limits(log)
        dump()
    t_end = time.time() + args.budget_s if args.budget_s else None
    for name in names:
        log(name)
        res[name] = {}
        run_workload(WORKLOADS[name], log, args.dry,
                     args.variants.split(",") if args.variants else None,
                     t_end, res[name], dump)
        dump()
    print_torch_table(res)


def print_torch_table(res):
    print("PyTorch %s on %s" % (res["torch"], res["gpu"]))
    print("| workload | variant | ms | peak GiB |")
    print("| --- | --- | --- | --- |")
    for name in WORKLOADS:
        for var, r in res.get(name, {}).items():
            print("| %s | %s | %s | %s |" % (name, var, r.get(
                "ms", r.get("error", r.get("skipped"))),
                                            r.get("peak_gib", "")))
    print("limits: %s" % res.get("limits"))

# ---------------------------------------------------------------- inputs


def cmd_make_inputs(args):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(args.make_inputs, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    for prog, _, _, wname, _, _, _ in PROGRAMS:
        if only and prog not in only:
            continue
        w = WORKLOADS[wname]
        if isinstance(w, Model):
            if not os.path.exists(w.path()):
                continue
            # (its consts, when exported: the driver's --params)
            C = w.consts(dims_of(w, False))
            if C:
                st_save(os.path.join(args.make_inputs,
                                     prog + ".params.safetensors"), C)
        gen = torch.Generator(device=dev)
        gen.manual_seed(1)
        I, P = w.make(dims_of(w, False), w.dtype, dev, gen)
        del P
        st_save(os.path.join(args.make_inputs, prog + ".safetensors"), I)
        del I
        print("wrote %s.safetensors" % prog, file=sys.stderr)

# ---------------------------------------------------------------- check


def sgc_run(sgc, src_text, dims, params, inputs, tmp, tag, timeout=None):
    """`sgc run` of the program text at dims; the returned dict of --out."""
    sg = os.path.join(tmp, tag + ".sg")
    with open(sg, "w") as f:
        f.write(src_text)
    pp, ip, op = (os.path.join(tmp, tag + s) for s in
                  (".params.safetensors", ".inputs.safetensors",
                   ".out.safetensors"))
    st_save(pp, params)
    st_save(ip, inputs)
    cmd = [sgc, "run", sg, "--params", pp, "--inputs", ip, "--out", op]
    for k, v in dims.items():
        cmd += ["-D", "%s=%d" % (k, v)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("sgc run failed (%d): %s" % (r.returncode,
                                                        r.stderr[-2000:]))
    return st_load(op)


def rel_err(a, b):
    a, b = a.double(), b.double()
    den = b.norm().item()
    return (a - b).norm().item() / (den if den > 0 else 1.0)


def check_program(sgc, prog, sgfile, wname, as_f32, tmp):
    """Runs prog with sgc run at small dims and compares with PyTorch.
    as_f32: the program's bf16 replaced by f32 (tight tolerances, and the
    parameter updates compared), else in its own dtype (the returned
    values, loose tolerances).  Returns a list of failure strings."""
    w = WORKLOADS[wname]
    d = dims_of(w, True)
    with open(os.path.join(HERE, sgfile)) as f:
        text = f.read()
    dt = w.dtype
    if as_f32:
        text = text.replace("bf16", "f32")
        dt = torch.float32
    gen = torch.Generator()
    gen.manual_seed(7)
    I, P = w.make(d, dt, "cpu", gen, check=True)
    tag = "%s_%s" % (sgfile[:-3], "f32" if as_f32 else "native")
    got = sgc_run(sgc, text, d, P, I, tmp, tag)
    fails = []
    tol = 1e-4 if dt == torch.float32 else 1e-2
    P0 = {k: v.clone() for k, v in P.items()}
    if w.train is None:
        want = w.forward(P, I)
    else:
        box = {}

        def fwd():
            box["out"] = w.forward(P, I)
            return box["out"]
        train_step(w, P, fwd)()
        want = {k: v.detach() for k, v in box["out"].items()}
    for k, v in want.items():
        if k not in got:
            fails.append("%s: no '%s' in sgc's output" % (tag, k))
            continue
        e = rel_err(got[k], v)
        if os.environ.get("TORCH_REF_VERBOSE"):
            print("     %s '%s': relative error %.3g" % (tag, k, e))
        if not (e <= tol):
            fails.append("%s: '%s' differs, relative error %.3g > %g"
                         % (tag, k, e, tol))
    if w.train is not None and as_f32:
        # The updates themselves: sgc's new param minus the old, against
        # PyTorch's (1e-3: f32 sums in another order, divided by a small
        # update).
        for k in P0:
            if k not in got:
                fails.append("%s: no param '%s' in sgc's output" % (tag, k))
                continue
            e = rel_err(got[k] - P0[k], P[k].detach() - P0[k])
            if not (e <= 1e-3):
                fails.append("%s: update of '%s' differs, relative error "
                             "%.3g" % (tag, k, e))
    return fails


def check_model(sgc, w, tmp):
    """A real model at its small dims with `sgc run` (no PyTorch module
    here to compare with: transformers, torchvision and timm are on the
    GPU machine only): its loss must be finite and near ln(classes), as a
    randomly initialised classifier's is.  Keeps, for the GPU machine's
    driver check, the inputs, the consts (the params file: params come
    from --seed on both sides) and what sgc run returned, less the params
    over 64 KiB (a language model's weights or logits would not fit in
    what is carried).  Returns (failures, what was checked)."""
    d = dims_of(w, True)
    with open(w.path()) as f:
        text = f.read()
    gen = torch.Generator()
    gen.manual_seed(7)
    I, _ = w.make(d, w.dtype, "cpu", gen)
    tag = "%s_native" % w.sgfile[:-3]
    got = sgc_run(sgc, text, d, w.consts(d), I, tmp, tag,
                  timeout=int(os.environ.get("BENCH_CHECK_TIMEOUT", "900")))
    dec = w.decls(d)
    keep = {k: v for k, v in got.items()
            if v.numel() * v.element_size() <= (64 << 10 if k in dec
                                                else 16 << 20)}
    st_save(os.path.join(tmp, tag + ".out.safetensors"), keep)
    loss = got.get("loss")
    want = math.log(w.classes)
    if loss is None:
        return ["%s: no 'loss' in sgc's output" % tag], ""
    lv = loss.float().item()
    what = "%s: loss %.4f at %s (ln %d = %.2f); %d of %d tensors kept" % (
        tag, lv, " ".join("%s=%d" % kv for kv in d.items()), w.classes, want,
        len(keep), len(got))
    if not (0.5 * want <= lv <= 1.5 * want):
        return ["%s: loss %r, not near ln(%d) = %.2f" % (tag, lv, w.classes,
                                                          want)], what
    return [], what


def cmd_check_models(args, only, tmp):
    """cmd_check's real-model rows; (checks, failures)."""
    n, fails = 0, []
    for prog, sgfile, flags, wname, _, _, _ in PROGRAMS:
        w = WORKLOADS[wname]
        if not isinstance(w, Model) or (only and prog not in only):
            continue
        if not os.path.exists(w.path()):
            print("skip %s: no bench/%s" % (prog, sgfile))
            continue
        if not w.small_check and not os.environ.get("BENCH_CHECK_ALL"):
            print("skip %s: sgc run at %s takes too long here "
                  "(BENCH_CHECK_ALL=1 runs it); no small-dims check" % (
                      prog, dims_of(w, True)))
            continue
        n += 1
        t0 = time.time()
        try:
            f, what = check_model(args.sgc_bin, w, tmp)
        except Exception as ex:
            f, what = ["%s: %s" % (prog, str(ex)[-600:])], ""
        print("%-4s %s (sgc run only, %.0f s)%s" % (
            "ok" if not f else "FAIL", prog, time.time() - t0,
            ": " + what if what else ""))
        for line in f[:6]:
            print("     " + line)
        fails += f
    return n, fails


def cmd_check(args):
    only = set(args.only.split(",")) if args.only else None
    fails, n = [], 0
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = args.keep or tmpdir
        os.makedirs(tmp, exist_ok=True)
        seen = set()
        for prog, sgfile, flags, wname, _, _, _ in PROGRAMS:
            if flags or (only and prog not in only) or sgfile in seen or \
                    isinstance(WORKLOADS[wname], Model):
                continue
            seen.add(sgfile)
            modes = [True, False] if WORKLOADS[wname].dtype == torch.bfloat16 \
                else [False]
            for as_f32 in modes:
                n += 1
                try:
                    f = check_program(args.sgc_bin, prog, sgfile, wname,
                                      as_f32, tmp)
                except Exception as ex:
                    f = ["%s: %s" % (prog, ex)]
                print("%-4s %s%s" % ("ok" if not f else "FAIL", prog,
                                     " (as f32)" if as_f32 else ""))
                for line in f[:6]:
                    print("     " + line)
                if len(f) > 6:
                    print("     ... and %d more" % (len(f) - 6))
                fails += f
        k, f = cmd_check_models(args, only, tmp)
        n += k
        fails += f
    print("%d checks, %d failures" % (n, len(fails)))
    return 1 if fails else 0

# ---------------------------------------------------------------- the table


def fmt(x, nd=2):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return ("%%.%df" % nd) % x


def load_sgc(path):
    out = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    r = json.loads(line)
                    out[r["prog"]] = r
    return out


def load_checks(path):
    """run_bench.sh's small-dims check lines: per program, "ok" when every
    check of it passed, "FAIL" when one failed."""
    out = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                w = line.split()
                if len(w) >= 2 and w[0] in ("ok", "FAIL"):
                    if out.get(w[1]) != "FAIL":
                        out[w[1]] = w[0]
    return out


# The reference columns' names in the table.
REF_NAMES = {
    "compile": "torch.compile", "eager": "eager",
    "compile_opt_in_bwd": "torch.compile, optimizer in backward",
    "eager_opt_in_bwd": "eager, optimizer in backward",
    "graph_one_stream": "CUDA graph replay, 1 stream",
    "graph_two_streams": "CUDA graph replay, 2 streams",
    "eager_save_on_cpu": "eager with save_on_cpu",
}

# What limits each row (the table's footnotes; docs/performance.md): the
# ceiling its time is held against, as far as the workload's shape says
# it; the trace summary of the same run says where the time went.
LIMITED_BY = {
    "ew_chain": "HBM bandwidth (one pass over 5 x 1 GiB; 'of limit' is "
                "against the device copy)",
    "two_branch_1s": "kernel launches: 32 products of 64x1024x1024 f32, "
                     "each too small to fill the GPU, one after another",
    "two_branch": "kernel launches, two chains overlapped on two streams",
    "two_branch_1s_cg": "the chain's latency (launches removed by the graph)",
    "two_branch_cg": "the two chains' latency, overlapped",
    "mlp_f32": "f32 matrix products without TF32 (CUDA cores)",
    "mlp_bf16": "bf16 matrix products (tensor cores)",
    "mlp8_adamw_unfused": "bf16 products; AdamW's pass over params and "
                          "state (memory)",
    "mlp8_adamw": "bf16 products; AdamW's pass fused into backward",
    "transformer": "bf16 products (92% of the FLOPs) and causal attention",
    "transformer_rb": "as transformer, two GELU outputs recomputed in "
                      "backward instead of seven",
    "transformer_offload": "the host link: 5.03 GB out during forward and "
                           "back during backward",
    "transformer_offload_all": "the host link: 6.11 GB out during forward "
                               "and back during backward",
    "transformer_off85": "the host link while copies outlast the forward; "
                         "else as transformer",
    "transformer_off80": "the host link while copies outlast the forward; "
                         "else as transformer",
    "vit_tiny": "memory traffic and launches: d = 192 products are small "
                "(197 tokens x 256 images)",
    "resnet18": "cuDNN convolutions (bf16) and batch norm's memory traffic",
    "gpt2": "bf16 products, and the 50257-wide logits' softmax and "
            "cross_entropy (memory)",
    "gpt2_dropout": "as gpt2, with the dropouts' draws: attention with dropout_p "
                    "in the kernel library's flash kernels (not cuDNN's)",
    "llama": "bf16 products (GQA attention, SiLU-gated MLP)",
}


def table_rows(sgc, tr, ct, checks, phases=None):
    """The table's rows (lists of cells) and notes on missed targets;
    phases: per program, its traced call's forward and backward (ms)."""
    lim = tr.get("limits", {})
    rows, notes = [], []
    for prog, sgfile, flags, wname, ekey, rkey, target in PROGRAMS:
        w = WORKLOADS[wname]
        d = dims_of(w, False)
        s = sgc.get(prog, {})
        t = tr.get(wname, {})
        fell = None
        if "ms" not in t.get(rkey, {}) and rkey.startswith("compile") and \
                "ms" in t.get("eager" + rkey[7:], {}):
            # a run without torch.compile, or one that skipped it (a note
            # says why): eager is the reference, and the column says so
            if rkey in t:
                fell = t[rkey].get("skipped") or t[rkey].get("error")
                notes.append("%s: PyTorch %s not measured (target not "
                             "judged): %s" % (prog, REF_NAMES[rkey], fell))
            rkey = "eager" + rkey[7:]
        eg, rf = t.get(ekey, {}), t.get(rkey, {})
        ms = s.get("ms_median")
        # sgc's peak_bytes counts what the model holds; the driver's
        # inputs and outputs are the caller's: add them, as PyTorch's
        # peak holds its inputs and outputs.
        gib = (s["peak_bytes"] + w.io_bytes(d)) / 2 ** 30 \
            if "peak_bytes" in s else None
        rms, rgib = rf.get("ms"), rf.get("peak_gib")
        ratio = ms / rms if ms and rms else None
        mratio = gib / rgib if gib and rgib else None
        unit, amount = w.work(d)
        rate = amount / (ms * 1e-3) / (1e9 if unit == "GB/s" else 1e12) \
            if unit and ms else None
        limit = {"GB/s": lim.get("copy_GBps"),
                 "TFLOP/s": lim.get("bf16_TFLOPs" if w.dtype == torch.bfloat16
                                    else "f32_TFLOPs")}.get(unit)
        pct = 100 * rate / limit if rate and limit else None
        c = ct.get(prog, {})
        cms = c.get("ms")
        met, why = judge(target, prog, ms, gib, rms, rgib, rate, limit, sgc,
                         (w, d), (lim, ct, phases or {}))
        if fell:
            met, why = "-", ""
        # (judged on CPU time where measured: the wall time of a shared
        # development machine counts its other work too)
        jms = c.get("cpu_ms", cms)
        if jms is not None and jms >= 100:
            met, why = "no", (why + "; " if why else "") + \
                "compile %.0f ms >= 100" % jms
        err = s.get("error")
        if (met != "yes" or target.startswith("offload") or
                target == "fused") and why and not err:
            notes.append("%s: %s" % (prog, why))
        if not s and not os.path.exists(os.path.join(HERE, sgfile)):
            notes.append("%s: bench/%s is missing: not run (python3 "
                         "bench/models.py export bench %s on the GPU "
                         "machine)" % (prog, sgfile, wname))
        for key in dict.fromkeys((ekey, rkey)) if ekey != rkey else ():
            why_t = t.get(key, {}).get("skipped") or t.get(key, {}).get("error")
            if why_t and os.path.exists(os.path.join(HERE, sgfile)):
                notes.append("%s: PyTorch %s not measured: %s" % (
                    prog, REF_NAMES.get(key, key), why_t))
        chk = checks.get(prog, "-")
        if chk == "FAIL":
            notes.append("%s: the driver failed the small-dims check: its "
                         "figures are not results" % prog)
        rows.append([prog, fmt(ms, 3) if not err else "error",
                     fmt(gib), fmt(eg.get("ms"), 3), fmt(eg.get("peak_gib")),
                     fmt(rms, 3), fmt(rgib), REF_NAMES.get(rkey, rkey),
                     fmt(ratio), fmt(mratio),
                     ("%s %s" % (fmt(rate, 1), unit)) if rate else "-",
                     fmt(pct, 0) + ("%" if pct else ""), met,
                     fmt(cms, 1) + (" (CPU %s)" % fmt(c.get("cpu_ms"), 1)
                                    if c.get("cpu_ms") is not None else "")
                     + (" (%s only)" % c["what"] if c.get("what") and
                        c["what"] != "cu" else ""), chk])
        if err:
            notes.append("%s: sgc failed: %s" % (prog, err))
    return rows, notes


def judge_offload(ms, sgc, prog, w, d, lim, ct, phases):
    """Offloading at 60% less activation memory (issue 18, item 4): at
    least 60% less activation memory than sgc's transformer row (peak less
    the params: activations, workspaces) in at most 1.1x the host link's
    bound (docs/offload.md, "What the host link allows"): with X bytes
    offloaded (the host arena sgc planned, prepare's host_bytes), the link
    at L (the slower way, measured in this run) and the transformer's
    traced forward F and backward B,

        step >= transformer + max(0, X/L - F) + max(0, X/L - B)."""
    base, s = sgc.get("transformer", {}), sgc.get(prog, {})
    if base.get("ms_median") is None or "peak_bytes" not in s or \
            "peak_bytes" not in base:
        return "-", "no transformer row to compare with"
    pb = w.param_bytes(d)
    act, act0 = s["peak_bytes"] - pb, base["peak_bytes"] - pb
    ar = act / act0
    x = ct.get(prog, {}).get("host_bytes")
    link = min(lim.get("h2d_GBps") or 0, lim.get("d2h_GBps") or 0)
    fb = phases.get("transformer")
    what = "activation memory %.2f -> %.2f GiB (%.0f%% less; target 60%%), " \
        "time %.3f -> %.3f ms (%+.1f%%)" % (
            act0 / 2 ** 30, act / 2 ** 30, 100 * (1 - ar), base["ms_median"], ms,
            100 * (ms / base["ms_median"] - 1))
    if not x or not link or not fb:
        return "-", what + "; the link's bound not known (no host_bytes, " \
            "link rate or transformer trace)"
    xl = x / (link * 1e9) * 1e3
    bound = base["ms_median"] + max(0.0, xl - fb[0]) + max(0.0, xl - fb[1])
    ok = ar <= 0.40 and ms <= 1.10 * bound
    return ("yes" if ok else "no"), what + \
        "; the link's bound %.1f ms (%.2f GB each way at %.1f GB/s: %.1f ms, " \
        "against a %.1f ms forward and a %.1f ms backward): %.2fx of it " \
        "(target at most 1.10x)" % (bound, x / 1e9, link, xl, fb[0], fb[1],
                                    ms / bound)


def judge_offload_peak(ms, gib, sgc, prog, pct, w, d):
    """Offloading at a budget (issue item 4): the peak (the table's: with
    params, inputs and outputs) at least pct% below sgc's transformer
    row's, in at most 3% more time.  The issue asks it at 15%; the 20%
    row is judged by the same rule, for the figures."""
    base = sgc.get("transformer", {})
    if base.get("ms_median") is None or "peak_bytes" not in base or \
            gib is None:
        return "-", "no transformer row to compare with"
    g0 = (base["peak_bytes"] + w.io_bytes(d)) / 2 ** 30
    tr, gr = ms / base["ms_median"], gib / g0
    ok = tr <= 1.03 and gr <= 1 - pct / 100.0
    return ("yes" if ok else "no"), \
        "peak %.2f -> %.2f GiB (%.1f%% less; target %d%%), time %.3f -> " \
        "%.3f ms (%+.1f%%; target at most +3%%)" % (
            g0, gib, 100 * (1 - gr), pct, base["ms_median"], ms,
            100 * (tr - 1))


def judge_fused(ms, gib, rgib, sgc, w, d):
    """Optimizer in backward (issue 7): the peak at most PyTorch's own
    optimizer-in-backward peak (its -28%), in no more time than
    fused=false (1% for noise)."""
    u = sgc.get("mlp8_adamw_unfused", {})
    if u.get("ms_median") is None or "peak_bytes" not in u or gib is None:
        return "-", "no mlp8_adamw_unfused row to compare with"
    ugib = (u["peak_bytes"] + w.io_bytes(d)) / 2 ** 30
    tr = ms / u["ms_median"]
    ok = tr <= 1.01 and (rgib is None or gib <= rgib)
    return ("yes" if ok else "no"), \
        "fused=false -> fused: %.3f -> %.3f ms (%+.1f%%), %.2f -> %.2f GiB " \
        "(%+.1f%%; PyTorch's reference peak %s GiB)" % (
            u["ms_median"], ms, 100 * (tr - 1), ugib, gib,
            100 * (gib / ugib - 1), fmt(rgib))


def judge(target, prog, ms, gib, rms, rgib, rate, limit, sgc, wd, ctx=None):
    """Whether the row meets its target (bench/README.md): yes, no, or -
    (not measured), and why not (for offload and fused, the figures)."""
    if ms is None:
        return "-", "not measured"
    if target == "offload":
        return judge_offload(ms, sgc, prog, *wd, *(ctx or ({}, {}, {})))
    if target.startswith("offload_peak"):
        return judge_offload_peak(ms, gib, sgc, prog, int(target[12:]), *wd)
    if target == "fused":
        return judge_fused(ms, gib, rgib, sgc, *wd)
    if target == "bw95":
        if rate is None or limit is None:
            return "-", "no copy bandwidth measured"
        ok = rate >= 0.95 * limit
        return ("yes" if ok else "no"), "" if ok else \
            "%.0f%% of the copy bandwidth (target 95%%)" % (100 * rate / limit)
    if target == "faster_than_1s":
        one = sgc.get("two_branch_1s", {}).get("ms_median")
        if one is None:
            return "-", "no one-stream figure"
        ok = ms < one
        return ("yes" if ok else "no"), "" if ok else \
            "two streams %.3f ms, one stream %.3f ms" % (ms, one)
    if target == "none":
        return "-", ""
    if rms is None:
        return "-", "no PyTorch reference"
    # (the transformer: at most 0.90x the reference's time, issue 18)
    most = 0.90 if target == "time90_mem" else 1.0
    ok = ms <= most * rms
    why = "" if ok else "%.2fx the reference's time (target %.2fx)" % (ms / rms, most) \
        if most != 1.0 else "%.2fx the reference's time" % (ms / rms)
    if target in ("time_mem", "time90_mem") and gib is not None and \
            rgib is not None and gib > rgib:
        ok = False
        why = (why + "; " if why else "") + \
            "%.2fx the reference's peak memory" % (gib / rgib)
    return ("yes" if ok else "no"), why


HEAD = ["program", "sgc ms", "sgc GiB", "eager ms", "eager GiB", "ref ms",
        "ref GiB", "compared with (ref)", "time / ref", "mem / ref",
        "sgc rate", "of limit", "target met", "sgc compile ms (wall, CPU)",
        "GPU check"]


def cmd_table(args):
    sgc = load_sgc(args.sgc)
    tr = {}
    if args.torch and os.path.exists(args.torch):
        with open(args.torch) as f:
            tr = json.load(f)
    ct = {}
    if args.compile and os.path.exists(args.compile):
        with open(args.compile) as f:
            ct = json.load(f)
    rows, notes = table_rows(sgc, tr, ct, load_checks(args.checks),
                             trace_phases(args.traces))
    lines = ["| " + " | ".join(HEAD) + " |",
             "| " + " | ".join("---" for _ in HEAD) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lim = tr.get("limits", {})
    lines.append("")
    lines.append("PyTorch %s on %s, %s. Limits measured in this run: copy %s "
                 "GB/s, bf16 matmul %s TFLOP/s, f32 matmul %s TFLOP/s, "
                 "pinned host to device %s GB/s, device to host %s GB/s."
                 % (tr.get("torch", "?"), tr.get("gpu", "?"),
                    tr.get("date", "?"), lim.get("copy_GBps", "?"),
                    lim.get("bf16_TFLOPs", "?"), lim.get("f32_TFLOPs", "?"),
                    lim.get("h2d_GBps", "?"), lim.get("d2h_GBps", "?")))
    if notes:
        lines.append("")
        lines += ["- " + n for n in notes]
    lines += ["", "Peaks, both with params: sgc GiB is the driver's peak_bytes "
              "(arena, params, consts, optimizer state, scratch, cuBLASLt "
              "workspaces) plus the graph's inputs and outputs; PyTorch's is "
              "max_memory_allocated above what was allocated before the "
              "variant made its params and inputs (so: params, inputs, "
              "outputs, gradients, activations, optimizer state, cuBLAS "
              "workspaces, freed before each variant); a CUDA graph's is "
              "its weights and inputs plus its private pool (the capture's "
              "peak). Pinned host memory counts on neither side.",
              "", "What limits each row:"]
    lines += ["- %s: %s" % (p[0], LIMITED_BY[p[0]]) for p in PROGRAMS
              if p[0] in LIMITED_BY]
    text = "\n".join(lines)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    return 0


def compare_files(files, say=print):
    """GOT WANT [BASE]: every float tensor of WANT (a safetensors file)
    against GOT's of the same name; an f32 tensor that BASE also holds (a
    param before the step) is compared as the change from BASE, so that
    a wrong update shows however small it is.  Returns the number of
    tensors that differ and the number compared."""
    got, want = st_load(files[0]), st_load(files[1])
    base = st_load(files[2]) if len(files) > 2 else {}
    bad = 0
    # In a program with bf16 (or f16) tensors the f32 values (the loss)
    # are computed from them: they get the bf16 bound of
    # tests/gpu/compare.py (2e-2), not f32's.
    lowp = any(t.dtype in (torch.bfloat16, torch.float16)
               for t in want.values())
    for k in sorted(want):
        w = want[k]
        if not w.is_floating_point():
            continue
        f32 = w.dtype in (torch.float32, torch.float64)
        tol = (2e-2 if lowp else 1e-4) if f32 else 1e-2
        if k not in got or got[k].shape != w.shape:
            say("  %s: missing, or another shape" % k)
            bad += 1
            continue
        g = got[k]
        if f32 and k in base:
            g, w, tol = g.double() - base[k].double(), \
                w.double() - base[k].double(), 1e-3
        e = rel_err(g, w)
        if not (e <= tol):
            say("  %s: relative error %.3g > %g" % (k, e, tol))
            bad += 1
    return bad, len(want)


def cmd_compare(args):
    bad, n = compare_files(args.compare)
    print("%d tensors compared, %d differ" % (n, bad))
    return 1 if bad else 0


def cmd_compare_list(args):
    """--compare-list FILE: lines `NAME (TAG) GOT WANT BASE`; one line of
    verdict each, `ok   NAME (TAG): ...` or `FAIL NAME (TAG): ...`."""
    fails = 0
    with open(args.compare_list) as f:
        for line in f:
            w = line.split()
            if len(w) < 4:
                continue
            label, files = " ".join(w[:2]), w[2:]
            why = []
            try:
                bad, n = compare_files(files, why.append)
            except Exception as ex:
                bad, n = 1, 0
                why.append(repr(ex)[:200])
            fails += bad > 0
            print("%-4s %s: %d tensors compared, %d differ%s" % (
                "FAIL" if bad else "ok", label, n, bad,
                ("; " + "; ".join(x.strip() for x in why[:4])) if why else ""))
    return 1 if fails else 0


def cmd_small_dims(args):
    """The -D flags of the --check size of a program's workload."""
    for prog, sgfile, flags, wname, _, _, _ in PROGRAMS:
        if prog == args.small_dims:
            d = dims_of(WORKLOADS[wname], True)
            print(" ".join("-D %s=%d" % kv for kv in d.items()))
            return 0
    return 2


def union(iv):
    """The union of intervals [(a, b)], sorted and merged."""
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def inter_len(u, v):
    """The length of the intersection of two merged interval lists."""
    i = j = 0
    n = 0.0
    while i < len(u) and j < len(v):
        a, b = max(u[i][0], v[j][0]), min(u[i][1], v[j][1])
        n += max(0.0, b - a)
        if u[i][1] < v[j][1]:
            i += 1
        else:
            j += 1
    return n


def overlap_lines(ev, t0):
    """Side-stream figures of one trace: for each copy stream (a name that
    starts with "copy"), its busy time, how much of it ran while another
    stream computed, and its transfers (to_host, to_device); for optimizer
    updates (ops named *update*), their busy time and how much of it ran
    before the last other kernel ended (inside backward, not after it)."""
    lines = []
    streams = sorted({e["tid"] for e in ev})
    for cs in (x for x in streams if str(x).startswith("copy")):
        cu = union([(e["ts"], e["ts"] + e["dur"]) for e in ev
                    if e["tid"] == cs])
        other = union([(e["ts"], e["ts"] + e["dur"]) for e in ev
                       if e["tid"] != cs])
        busy = sum(b - a for a, b in cu)
        ov = inter_len(cu, other)
        nh = sum(1 for e in ev if e["tid"] == cs and "to_host" in e["name"])
        nd = sum(1 for e in ev if e["tid"] == cs and "to_device" in e["name"])
        lines.append("  stream %s: busy %.3f ms, %.3f ms of it (%.0f%%) "
                     "while another stream computed; %d to_host, %d "
                     "to_device; active from %.3f to %.3f ms" % (
                         cs, busy / 1e3, ov / 1e3,
                         100 * ov / busy if busy else 0, nh, nd,
                         (cu[0][0] - t0) / 1e3 if cu else 0,
                         (cu[-1][1] - t0) / 1e3 if cu else 0))
    grads = [e["ts"] for e in ev if "grad" in e["name"]]
    if grads:
        lines.append("  backward from %.3f ms (the first op on a gradient)"
                     % ((min(grads) - t0) / 1e3))
    isup = [("update" in e["name"] or "adamw_step" in e["name"]) for e in ev]
    up = [e for e, u in zip(ev, isup) if u]
    rest = [e for e, u in zip(ev, isup) if not u and
            e.get("cat", "kernel") == "kernel"]
    if up and rest:
        last = max(e["ts"] + e["dur"] for e in rest)
        busy = sum(e["dur"] for e in up)
        inside = sum(max(0.0, min(e["ts"] + e["dur"], last) - e["ts"])
                     for e in up)
        lines.append("  updates: %d, busy %.3f ms, %.0f%% of it before the "
                     "last other op ended (%.3f ms); first update at %.3f "
                     "ms" % (len(up), busy / 1e3,
                             100 * inside / busy if busy else 0,
                             (last - t0) / 1e3,
                             (min(e["ts"] for e in up) - t0) / 1e3))
    return lines


TOP_OPS = int(os.environ.get("BENCH_TOP_OPS", "8"))


def trace_phases(d):
    """Per trace DIR/PROGRAM.json: (forward, backward) in ms, split at the
    first op on a gradient (as --trace-summary's "backward from")."""
    out = {}
    if not d or not os.path.isdir(d):
        return out
    for fn in os.listdir(d):
        if not fn.endswith(".json"):
            continue
        try:
            with open(os.path.join(d, fn)) as f:
                ev = trace_slices(json.load(f))
        except Exception:
            continue
        grads = [e["ts"] for e in ev if "grad" in e["name"]]
        if not ev or not grads:
            continue
        t0 = min(e["ts"] for e in ev)
        end = max(e["ts"] + e["dur"] for e in ev)
        out[fn[:-5]] = ((min(grads) - t0) / 1e3, (end - min(grads)) / 1e3)
    return out


def cmd_trace_summary(args):
    """--trace-summary DIR: for each Chrome trace DIR/PROGRAM.json (one call
    of the driver), the span of the call, the busy time of each stream,
    and the ops that took the most time, layer numbers folded (l3.x ->
    l#.x) so that a transformer's 8 layers add up."""
    import re
    for fn in sorted(os.listdir(args.trace_summary)):
        if not fn.endswith(".json"):
            continue
        try:
            with open(os.path.join(args.trace_summary, fn)) as f:
                ev = trace_slices(json.load(f))
        except Exception as ex:
            print("%s: unreadable trace (%r)" % (fn, ex))
            continue
        if not ev:
            continue
        t0 = min(e["ts"] for e in ev)
        span = max(e["ts"] + e["dur"] for e in ev) - t0
        busy, by = {}, {}
        for e in ev:
            busy[e["tid"]] = busy.get(e["tid"], 0) + e["dur"]
            k = re.sub(r"\d+", "#", e["name"])
            n, d = by.get(k, (0, 0))
            by[k] = (n + 1, d + e["dur"])
        print("%s: %d ops, span %.3f ms; busy %s" % (
            fn[:-5], len(ev), span / 1e3, ", ".join(
                "%s %.3f ms" % (t, b / 1e3) for t, b in sorted(busy.items()))))
        for line in overlap_lines(ev, t0):
            print(line)
        for k, (n, d) in sorted(by.items(), key=lambda kv: -kv[1][1])[:TOP_OPS]:
            print("  %5.1f%% %9.3f ms  %4dx  %s" % (100 * d / span, d / 1e3,
                                                   n, k))
    return 0


def program_flags(w, flags):
    """A program's sgc flags at full size: a real model's .sg has its
    export's batch, so its table sizes are -D flags (the dims it
    declares)."""
    if not isinstance(w, Model):
        return flags
    import re
    with open(w.path()) as f:
        have = set(re.findall(r"^\s*dim\s+(\w+)", f.read(), re.M))
    return ["-D %s=%d" % kv for kv in w.dims.items() if kv[0] in have] + flags


def cmd_programs(args):
    """One line a program whose .sg is here (a missing one is named on
    stderr: the language models' .sg files are exported on the GPU
    machine)."""
    for prog, sgfile, flags, wname, _, _, _ in PROGRAMS:
        w = WORKLOADS[wname]
        if not os.path.exists(os.path.join(HERE, sgfile)):
            print("%s: bench/%s is missing (python3 bench/models.py export "
                  "bench %s, where transformers is): not run" %
                  (prog, sgfile, wname), file=sys.stderr)
            continue
        it = 200 if wname == "two_branch" else max(w.iters, 10)
        print(" ".join([prog, sgfile, str(it)] + program_flags(w, flags)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated workloads (or programs)")
    ap.add_argument("--json", help="write the PyTorch results here")
    ap.add_argument("--variants", help="comma-separated PyTorch variants to "
                    "run (eager, compile, eager_opt_in_bwd, ...; default all)")
    ap.add_argument("--budget-s", type=float, help="seconds the run may "
                    "take: a variant that may not fit in what is left is "
                    "skipped (the real models' est_s)")
    ap.add_argument("--dry", action="store_true",
                    help="run the PyTorch code at small dims on the CPU")
    ap.add_argument("--make-inputs", metavar="DIR")
    ap.add_argument("--programs", action="store_true")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--sgc", help="sgc bench results, one JSON line a program")
    ap.add_argument("--torch", help="the --json file of a PyTorch run")
    ap.add_argument("--compile", help="sgc compile times (JSON)")
    ap.add_argument("--md", help="also write the table here")
    ap.add_argument("--checks", help="run_bench.sh's small-dims check output")
    ap.add_argument("--traces", help="the drivers' traces (DIR/PROGRAM.json): "
                    "each call's forward and backward, for the offloading bound")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--keep", metavar="DIR",
                    help="--check: keep its files (params, inputs, sgc run's"
                         " out) in DIR")
    ap.add_argument("--compare", nargs="+", metavar="FILE",
                    help="GOT WANT [BASE]")
    ap.add_argument("--small-dims", metavar="PROGRAM")
    ap.add_argument("--compare-list", metavar="FILE")
    ap.add_argument("--trace-summary", metavar="DIR")
    ap.add_argument("--sgc-bin", default=os.path.join(
        HERE, "..", "build-bench", "compiler", "sgc"))
    args = ap.parse_args()
    if args.make_inputs:
        return cmd_make_inputs(args)
    if args.programs:
        return cmd_programs(args)
    if args.table:
        return cmd_table(args)
    if args.check:
        return cmd_check(args)
    if args.compare:
        return cmd_compare(args)
    if args.compare_list:
        return cmd_compare_list(args)
    if args.trace_summary:
        return cmd_trace_summary(args)
    if args.small_dims:
        return cmd_small_dims(args)
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
