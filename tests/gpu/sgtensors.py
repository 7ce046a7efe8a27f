"""sgtensors.py - safetensors files with numpy alone (no torch: the GPU
test runs many comparisons and torch's import is slow).

    read(path) -> {name: numpy array}    (bf16 comes back as float32)
    write(path, {name: (dtype_name, numpy array)})

dtype names are the format's: F64 F32 F16 BF16 I64 I32 BOOL.
"""
import json
import struct

import numpy as np

_NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
       "I64": np.int64, "I32": np.int32, "BOOL": np.uint8}


def _decode(dtype, raw, shape):
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=_NP[dtype]).reshape(shape)


def read(path):
    """All tensors of a safetensors file, as numpy arrays."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        b, e = h["data_offsets"]
        out[name] = (h["dtype"], _decode(h["dtype"], body[b:e], h["shape"]))
    return out


def _encode(dtype, arr):
    if dtype == "BF16":
        f = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32)
        # round to nearest even, as torch does
        r = ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16)
        return r.tobytes()
    return np.ascontiguousarray(arr, dtype=_NP[dtype]).tobytes()


def write(path, tensors):
    """Writes {name: (dtype, array)} as a safetensors file."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        raw = _encode(dtype, arr)
        header[name] = {"dtype": dtype, "shape": list(np.shape(arr)),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
