"""sgc - call graphs compiled by sgc from PyTorch.

    import sgc
    lib = sgc.compile_file("model.sg")          # .sg -> shared library (cached)
    step = lib.graph("train")                   # one model of graph `train`
    loss, = step(x, y)                          # torch CUDA tensors in and out
    step.params["w1"]                           # a torch tensor, no copy
    step.save("ckpt.safetensors"); step.load("ckpt.safetensors")

    step = sgc.compile(module, [x])             # nn.Module through fx2sg
    step = sgc.compile(module, [x], loss="mse", optimizer="sgd(lr=0.1)")

compile_file runs `sgc FILE.sg -o X.cu --header X.h` and `nvcc -shared` on
it with sgrt.pc's flags; the library is cached under $SGC_CACHE_DIR
(default ~/.cache/sgc) by a hash of everything that shapes it (the .sg
text, sgc's version, the options, nvcc's version), so a second compile of
the same input loads at once.  A call passes the torch tensors' device
pointers to the generated C API (GRAPH_call_io) on the caller's current
stream: no copies; outputs are new tensors allocated by torch on that
stream.  Params, consts and optimizer state live in the model and are
exposed as torch tensors over that memory (Step.params, Step.state).

Pure Python over ctypes; torch is imported only when a step is created or
called.  docs/guide.md, "PyTorch: the sgc package", describes it.
"""
import ctypes
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile

__version__ = "0.1.0"
__all__ = ["compile", "compile_file", "compile_text", "load", "Library", "Step",
           "Error", "cache_key", "parse_tensors"]


class Error(Exception):
    """sgc, nvcc or the runtime failed; the message says why."""


# ------------------------------------------------------------------ tools

def _tool(name, env):
    """The program NAME: $ENV, else beside this package's prefix, else PATH."""
    p = os.environ.get(env)
    if p:
        return p
    here = os.path.dirname(os.path.abspath(__file__))
    for up in range(2, 7):  # PREFIX/lib/python3/dist-packages/sgc -> PREFIX/bin
        cand = os.path.join(here, *([".."] * up), "bin", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return os.path.normpath(cand)
    found = shutil.which(name)
    if not found and name == "nvcc" and os.path.exists("/usr/local/cuda/bin/nvcc"):
        found = "/usr/local/cuda/bin/nvcc"
    if not found:
        raise Error("%s not found (set %s)" % (name, env))
    return found


def _run(cmd, what):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode != 0:
        raise Error("%s failed (exit %d): %s\n%s" % (what, r.returncode,
                    " ".join(shlex.quote(c) for c in cmd), r.stderr.strip()))
    return r.stdout


def _sgrt_flags():
    """sgrt.pc's flags ($SGC_SGRT_FLAGS overrides them, e.g. in a build tree)."""
    f = os.environ.get("SGC_SGRT_FLAGS")
    if f is not None:
        return shlex.split(f)
    return shlex.split(_run(["pkg-config", "--cflags", "--libs", "sgrt"],
                            "pkg-config sgrt (set PKG_CONFIG_PATH or SGC_SGRT_FLAGS)"))


def cache_dir():
    d = os.environ.get("SGC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sgc")
    os.makedirs(d, exist_ok=True)
    return d


def cache_key(sg_text, options, tool_versions):
    """The content hash naming a compiled library: the .sg text, the
    options and the tools' versions, each length-prefixed."""
    h = hashlib.sha256()
    for part in [sg_text] + list(options) + list(tool_versions):
        b = part.encode() if isinstance(part, str) else bytes(part)
        h.update(b"%d:" % len(b))
        h.update(b)
    return h.hexdigest()[:32]


# ------------------------------------------------------------------ the generated interface

_ROLES = {"SGRT_ROLE_INPUT": "input", "SGRT_ROLE_PARAM": "param",
          "SGRT_ROLE_CONST": "const", "SGRT_ROLE_STATE": "state",
          "SGRT_ROLE_OUTPUT": "output"}
_DTYPES = ("F64", "F32", "F16", "BF16", "I64", "I32", "BOOL")
_TENSORS_RE = re.compile(r"static const SgrtTensorDesc (\w+)_tensors\[(\d+)\] = \{\n(.*?)\n\};",
                         re.S)
_DESC_RE = re.compile(r'\{"((?:[^"\\]|\\.)*)", (SGRT_ROLE_\w+), SGRT_(\w+), (\d+), \{([^}]*)\}, (\d+)\}')
_EXT_RE = re.compile(r"ext\[\] its (\d+) extern events")


def parse_tensors(cu_text):
    """Per graph (C identifier): (tensors, extern event count); tensors in
    io order as dicts name, role, dtype ('F32'...), shape, flags."""
    out = {}
    for m in _TENSORS_RE.finditer(cu_text):
        g, n = m.group(1), int(m.group(2))
        ts = []
        for d in _DESC_RE.finditer(m.group(3)):
            shape = [int(v) for v in d.group(5).split(",") if v.strip()]
            if d.group(3) not in _DTYPES or len(shape) != int(d.group(4)):
                raise Error("cannot read the descriptor %s" % d.group(0))
            ts.append({"name": d.group(1), "role": _ROLES[d.group(2)],
                       "dtype": d.group(3), "shape": shape, "flags": int(d.group(6))})
        if len(ts) != n:
            raise Error("graph %s: read %d of %d tensor descriptors" % (g, len(ts), n))
        call = cu_text.find("%s_call_io(" % g)
        e = _EXT_RE.search(cu_text, max(0, call - 600)) if call >= 0 else None
        out[g] = (ts, int(e.group(1)) if e else 0)
    return out


# ------------------------------------------------------------------ compiling

def compile_text(sg_text, name="model", arch="sm_90", options=(), cache=True):
    """Compiles .sg text to a shared library; returns its Library."""
    sgc_bin, nvcc = _tool("sgc", "SGC"), _tool("nvcc", "NVCC")
    flags = _sgrt_flags()
    opts = ["--arch=" + arch] + list(options)
    versions = [_run([sgc_bin, "--version"], "sgc --version"),
                _run([nvcc, "--version"], "nvcc --version")] + flags
    key = cache_key(sg_text, opts, versions)
    d = os.path.join(cache_dir(), key)
    so = os.path.join(d, name + ".so")
    cu = os.path.join(d, name + ".cu")
    if cache and os.path.exists(so) and os.path.exists(cu):
        return Library(so, cu)
    tmp = tempfile.mkdtemp(prefix=key + ".", dir=cache_dir())
    try:
        src = os.path.join(tmp, name + ".sg")
        with open(src, "w") as f:
            f.write(sg_text)
        tcu = os.path.join(tmp, name + ".cu")
        _run([sgc_bin, src, "-o", tcu, "--header", os.path.join(tmp, name + ".h")] + opts,
             "sgc")
        _run([nvcc, "-arch=" + arch, "-std=c++17", "-O2", "-shared",
              "-Xcompiler=-fPIC", tcu, "-o", os.path.join(tmp, name + ".so")] + flags,
             "nvcc")
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)
        try:
            os.rename(tmp, d)  # atomic: another process may have won
        except OSError:
            pass
        if not os.path.exists(so):
            return Library(os.path.join(tmp, name + ".so"), tcu)
    finally:
        if os.path.isdir(tmp) and os.path.exists(so):
            shutil.rmtree(tmp, ignore_errors=True)
    return Library(so, cu)


def compile_file(path, **kw):
    """compile_text on a .sg file (the library named after it)."""
    with open(path) as f:
        text = f.read()
    kw.setdefault("name", re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0]))
    return compile_text(text, **kw)


def load(so_path, cu_path):
    """A library built outside the package (its .so and the .cu it came from)."""
    return Library(so_path, cu_path)


class Library:
    """A compiled .sg file: Library.graph(NAME) makes a Step."""

    def __init__(self, so_path, cu_path):
        self.path = so_path
        with open(cu_path) as f:
            self.interface = parse_tensors(f.read())
        if not self.interface:
            raise Error("%s: no graph" % cu_path)
        self.dll = ctypes.CDLL(so_path)

    @property
    def graphs(self):
        return list(self.interface)

    def graph(self, name=None, device=None, params=None, seed=0):
        if name is None:
            if len(self.interface) != 1:
                raise Error("the library has graphs %s; name one" % self.graphs)
            name = self.graphs[0]
        if name not in self.interface:
            raise Error("no graph %r (graphs: %s)" % (name, self.graphs))
        return Step(self, name, device, params, seed)


# ------------------------------------------------------------------ calls

class _CudaMemory:
    """__cuda_array_interface__ over model-owned device bytes, keeping the
    Step (and so the memory) alive while torch holds the view."""

    def __init__(self, ptr, nbytes, owner):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 2,
                                         "strides": None}


def _torch_dtype(torch, name):
    return {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
            "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
            "BOOL": torch.bool}[name]


class Step:
    """One model of a graph on a device: step(*inputs) runs one call."""

    def __init__(self, lib, graph, device, params, seed):
        import torch
        self.torch, self.lib, self.graph = torch, lib, graph
        self.tensors, self.nextern = lib.interface[graph]
        self.device = torch.device("cuda", torch.cuda.current_device()
                                   if device is None else torch.device(device).index or 0)
        dll, p = lib.dll, graph + "_"
        self._create = dll[p + "create"]
        self._create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        self._destroy = dll[p + "destroy"]
        self._destroy.argtypes = [ctypes.c_void_p]
        self._destroy.restype = None
        self._load = dll[p + "load"]
        self._load.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
        self._save = dll[p + "save"]
        self._save.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self._tensor = dll[p + "tensor"]
        self._tensor.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self._tensor.restype = ctypes.c_void_p
        self._error = dll[p + "last_error"]
        self._error.argtypes = [ctypes.c_void_p]
        self._error.restype = ctypes.c_char_p
        self._call = dll[p + "call_io"]
        self._call.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        self._peak = dll[p + "peak_bytes"]
        self._peak.argtypes = [ctypes.c_void_p]
        self._peak.restype = ctypes.c_size_t
        self.model = ctypes.c_void_p()
        torch.cuda.init()
        with torch.cuda.device(self.device):
            rc = self._create(ctypes.byref(self.model), self.device.index)
        self._check(rc, "create")
        self._io = (ctypes.c_void_p * len(self.tensors))()
        self.inputs = [t for t in self.tensors if t["role"] == "input"]
        self.outputs = [t for t in self.tensors if t["role"] == "output"]
        self.params, self.state = {}, {}
        for i, t in enumerate(self.tensors):
            if t["role"] in ("param", "const", "state"):
                ptr = self._tensor(self.model, i)
                self._io[i] = ptr
                view = self._view(ptr, t)
                (self.state if t["role"] == "state" else self.params)[t["name"]] = view
        self.load(params, seed)

    def _view(self, ptr, t):
        torch = self.torch
        dt = _torch_dtype(torch, t["dtype"])
        n = 1
        for s in t["shape"]:
            n *= s
        nbytes = n * torch.empty((), dtype=dt).element_size()
        if t["flags"] & 2 or not ptr:  # pinned host buffers: not device memory
            return None
        raw = torch.as_tensor(_CudaMemory(ptr, nbytes, self), device=self.device)
        return raw.view(dt).view(t["shape"])

    def _check(self, rc, what):
        if rc != 0:
            msg = self._error(self.model) if self.model else b"out of memory"
            raise Error("%s %s: %s" % (self.graph, what, (msg or b"").decode(errors="replace")))

    def load(self, path=None, seed=0):
        """Params, consts and state from a safetensors file (None: params
        from seed, state zeros), as the driver's --params."""
        with self.torch.cuda.device(self.device):
            self.torch.cuda.current_stream().synchronize()
            self._check(self._load(self.model, path.encode() if path else None, seed), "load")

    def save(self, path):
        """Params, consts and state to a safetensors file."""
        with self.torch.cuda.device(self.device):
            self.torch.cuda.current_stream().synchronize()
            self._check(self._save(self.model, path.encode()), "save")

    def peak_bytes(self):
        return self._peak(self.model)

    def io_pointers(self, *inputs, out=None):
        """Checks the inputs, allocates the outputs (or takes out=[...]);
        fills the io array.  Returns the output tensors."""
        torch = self.torch
        if len(inputs) != len(self.inputs):
            raise Error("%s takes %d inputs (%s), %d given" % (self.graph, len(self.inputs),
                        ", ".join(t["name"] for t in self.inputs), len(inputs)))
        k = 0
        outs = []
        for i, t in enumerate(self.tensors):
            if t["role"] == "input":
                x = inputs[k]
                k += 1
                if not isinstance(x, torch.Tensor) or x.device != self.device or \
                        x.dtype != _torch_dtype(torch, t["dtype"]) or \
                        list(x.shape) != t["shape"] or not x.is_contiguous():
                    raise Error("input %r must be a contiguous %s%s tensor on %s, not %s" %
                                (t["name"], t["dtype"].lower(), t["shape"], self.device,
                                 "%s%s on %s" % (x.dtype, list(x.shape), x.device)
                                 if isinstance(x, torch.Tensor) else type(x).__name__))
                self._io[i] = x.data_ptr()
            elif t["role"] == "output":
                y = out[len(outs)] if out is not None else torch.empty(
                    t["shape"], dtype=_torch_dtype(torch, t["dtype"]), device=self.device)
                outs.append(y)
                self._io[i] = y.data_ptr()
        return outs

    def __call__(self, *inputs, out=None):
        """One call on the current stream; returns the outputs (a list, in
        `return` order).  Inputs are not copied; the call is asynchronous,
        as any CUDA work on the stream."""
        if self.nextern:
            raise Error("%s has extern events; call it through the C API" % self.graph)
        outs = self.io_pointers(*inputs, out=out)
        stream = self.torch.cuda.current_stream(self.device).cuda_stream
        self._check(self._call(self.model, ctypes.c_void_p(stream), self._io, None), "call")
        return outs

    def close(self):
        if self.model:
            self._destroy(self.model)
            self.model = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ------------------------------------------------------------------ torch modules

def _fx2sg():
    """tools/fx2sg as a module (it has no .py suffix)."""
    import importlib.machinery
    import importlib.util
    path = os.environ.get("FX2SG") or _tool("fx2sg", "FX2SG")
    loader = importlib.machinery.SourceFileLoader("fx2sg", path)
    spec = importlib.util.spec_from_loader("fx2sg", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def compile(module, example_inputs, loss=None, optimizer=None, arch="sm_90",
            options=(), device=None):
    """An nn.Module (traced by fx2sg on example_inputs) as a Step: inference
    (outputs) or, with loss ('mse', 'cross_entropy') and optimizer
    ('sgd(lr=0.1)', 'adamw(lr=1e-3)'), one training step per call (the
    loss target as the last input).  Its params start as the module's."""
    fx = _fx2sg()
    cpu = [x.detach().cpu() if hasattr(x, "detach") else x for x in example_inputs]
    ex = fx.export(module, cpu, loss=loss, optimizer=optimizer)
    lib = compile_text(ex.sg, name="module", arch=arch, options=options)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "params.safetensors")
        with open(p, "wb") as f:
            f.write(fx.st_dumps(ex.params))
        step = lib.graph(device=device, params=p)
    step.export = ex
    return step
