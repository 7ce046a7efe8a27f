"""make_inputs.py IR.sg OUT.safetensors [SEED] - random inputs for every
`input` of a graph printed by `sgc --emit=ir`.

Floats are normal(0, 0.5); integers are 0 or 1 (valid indices, classes and
targets for any table, class count or dim of at least two); bools are
random.  Deterministic for a seed.
"""
import re
import sys

import numpy as np

import sgtensors

DT = {"f64": "F64", "f32": "F32", "f16": "F16", "bf16": "BF16", "i64": "I64",
      "i32": "I32", "bool": "BOOL"}


def main():
    text = open(sys.argv[1]).read()
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    dims = {m.group(1): int(m.group(2))
            for m in re.finditer(r"^dim (\w+) = (\d+)", text, re.M)}
    dims.setdefault("WORLD", 1)
    rng = np.random.default_rng(seed)
    out = {}
    for m in re.finditer(r"^\s*input %([\w.]+) : (\w+)\[([^\]]*)\]", text, re.M):
        name, dt, shape = m.group(1), m.group(2), m.group(3)
        shape = [dims[d.strip()] if not d.strip().lstrip("-").isdigit()
                 else int(d) for d in shape.split(",") if d.strip()]
        if dt in ("f64", "f32", "f16", "bf16"):
            a = rng.normal(0, 0.5, size=shape)
        elif dt == "bool":
            a = rng.integers(0, 2, size=shape)
        else:
            a = rng.integers(0, 2, size=shape)
        out[name] = (DT[dt], np.asarray(a))
    sgtensors.write(sys.argv[2], out)


if __name__ == "__main__":
    main()
