#!/usr/bin/env python3
"""tests/python/test_package.py - the sgc Python package without a GPU:
the content hash (another text, other options: another key), reading the
generated interface, and compile_file (sgc then nvcc -shared) with its
cache: the same input is not compiled again; the library loads and has
the graph's C API.  The GPU
half (calls on torch CUDA tensors) is tests/gpu/test_python.py.

Environment: SGC (the compiler), SGC_SGRT_FLAGS (libsgrt's flags in the
build tree), SGC_SOURCE_ROOT; nvcc from PATH or /usr/local/cuda."""
import os
import sys
import tempfile
import time

root = os.environ["SGC_SOURCE_ROOT"]
sys.path.insert(0, os.path.join(root, "python"))
import sgc  # noqa: E402

fails = 0


def check(cond, what):
    global fails
    print("%s %s" % ("ok" if cond else "FAIL", what))
    fails += not cond


# The key: every part counts, and parts do not run together.
k = sgc.cache_key("graph g {}", ["-O2"], ["sgc 0.1.0"])
check(k == sgc.cache_key("graph g {}", ["-O2"], ["sgc 0.1.0"]), "cache_key is deterministic")
check(k != sgc.cache_key("graph g {} ", ["-O2"], ["sgc 0.1.0"]), "cache_key: the text counts")
check(k != sgc.cache_key("graph g {}", ["-O0"], ["sgc 0.1.0"]), "cache_key: options count")
check(sgc.cache_key("ab", ["c"], []) != sgc.cache_key("a", ["bc"], []),
      "cache_key: parts are delimited")

with tempfile.TemporaryDirectory() as cache:
    os.environ["SGC_CACHE_DIR"] = cache
    path = os.path.join(root, "tests", "golden", "cg_line.sg")
    t0 = time.time()
    lib = sgc.compile_file(path)
    t1 = time.time()
    lib2 = sgc.compile_file(path)
    t2 = time.time()
    check(lib.path == lib2.path and os.path.exists(lib.path), "a second compile hits the cache")
    check(t2 - t1 < max(0.5, (t1 - t0) / 4), "the cached compile is fast (%.2fs vs %.2fs)"
          % (t2 - t1, t1 - t0))
    check(len(os.listdir(cache)) == 1, "one cache entry, no temporaries left")
    (g,) = lib.graphs
    ts, next_ = lib.interface[g]
    roles = [t["role"] for t in ts]
    check(roles == sorted(roles, key=["input", "output", "param", "const", "state"].index),
          "interface in io order: inputs, outputs, params, consts, state")
    check(next_ == 0 and any(t["role"] == "param" for t in ts), "params and no extern events")
    for sym in ("create", "destroy", "load", "save", "tensor", "call_io", "last_error"):
        check(hasattr(lib.dll, "%s_%s" % (g, sym)), "the library has %s_%s" % (g, sym))

# The descriptor reader against a literal of the generated form.
cu = '''static const SgrtTensorDesc m_tensors[3] = {
	{"x", SGRT_ROLE_INPUT, SGRT_BF16, 2, {4, 8}, 0},
	{"y", SGRT_ROLE_OUTPUT, SGRT_F32, 0, {}, 0},
	{"w\\"q", SGRT_ROLE_PARAM, SGRT_I64, 1, {3}, 1},
};
/* ... ext[] its 2 extern events.  The call */
extern "C" int
m_call_io('''
(tsm, nx) = sgc.parse_tensors(cu)["m"]
check([t["shape"] for t in tsm] == [[4, 8], [], [3]] and nx == 2 and
      tsm[0]["dtype"] == "BF16" and tsm[2]["flags"] == 1, "parse_tensors reads descriptors")
try:
    sgc.parse_tensors(cu.replace("[3] =", "[4] ="))
    check(False, "a short descriptor list is an error")
except sgc.Error:
    check(True, "a short descriptor list is an error")
print("%d failed" % fails)
sys.exit(1 if fails else 0)
