#!/usr/bin/env python3
"""tests/diag/dot_kernels.py SGC FILE.sg... - `--emit=dot` draws each kernel
that fuses several nodes as a cluster ("kernel K: N ops fused") of those
nodes, and the clusters are the kernels the CUDA output has: for every
cluster, one kernel of `--emit=cu` (the same -O2 options) has comments
above it naming only lines of the cluster's nodes (a group fused into a
reduction's kernel is named by the reduction alone), and no kernel names
lines of two clusters.  Every
file must have at least one such cluster; dot(1), when installed, must
accept the output."""
import re
import shutil
import subprocess
import sys

sgc, files = sys.argv[1], sys.argv[2:]
fail = 0
for path in files:
    dot = subprocess.run([sgc, path, "--emit=dot", "-o", "-", "-O2"],
                         capture_output=True, text=True, check=True).stdout
    cu = subprocess.run([sgc, path, "--emit=cu", "-o", "-", "-O2", "--no-line"],
                        capture_output=True, text=True, check=True).stdout
    lines = {m.group(1): int(m.group(2)) for m in
             re.finditer(r'  (n\d+) \[.*?\\nline (\d+)', dot)}
    clusters = []
    for m in re.finditer(r'subgraph cluster_kernel(\d+) \{\n\s*label="kernel '
                         r'(\d+): (\d+) ops fused";.*?\n\s*((?:n\d+; ?)+)\n', dot,
                         re.S):
        nodes = re.findall(r"n\d+", m.group(4))
        if int(m.group(3)) != len(nodes) or m.group(1) != m.group(2):
            print("FAIL %s: cluster %s label disagrees with its %d nodes"
                  % (path, m.group(1), len(nodes)))
            fail = 1
        clusters.append(frozenset(lines[n] for n in nodes))
    # The kernels of the .cu: the comment lines just above each __global__.
    kernels, block = [], set()
    for ln in cu.splitlines():
        m = re.match(r"// [^:]+:(\d+): ", ln)
        if m:
            block.add(int(m.group(1)))
        elif ln.startswith("static __global__") or ln.startswith("__global__"):
            if block:
                kernels.append(frozenset(block))
            block = set()
        elif not ln.startswith(("/*", " *", "// (")):  # "// (x0 = %a, ...)": params
            block = set()
    if not clusters:
        print("FAIL %s: no kernel cluster" % path)
        fail = 1
    for k in kernels:
        if sum(1 for c in clusters if k & c) > 1:
            print("FAIL %s: the kernel of lines %s spans clusters" % (path, sorted(k)))
            fail = 1
    for c in clusters:
        if not any(k <= c for k in kernels):
            print("FAIL %s: cluster of lines %s is no kernel of the .cu (%s)"
                  % (path, sorted(c), [sorted(k) for k in kernels]))
            fail = 1
    if shutil.which("dot"):
        r = subprocess.run(["dot", "-Tsvg", "-o", "/dev/null"], input=dot,
                           capture_output=True, text=True)
        if r.returncode:
            print("FAIL %s: dot rejects it: %s" % (path, r.stderr[:300]))
            fail = 1
    if not fail:
        print("ok %s: %d kernel clusters" % (path, len(clusters)))
sys.exit(fail)
