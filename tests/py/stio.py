"""stio.py - a tiny safetensors reader/writer on top of torch (Debian has no
safetensors package).

    save(path, {"name": tensor, ...}, metadata=None)
    load(path) -> {"name": tensor, ...}

The format: an 8-byte little-endian header length N, N bytes of JSON
mapping each name to {"dtype", "shape", "data_offsets": [begin, end]}
(offsets from the first byte after the header), an optional
"__metadata__" object of strings, then the raw little-endian data.
"""
import json
import struct

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
    "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
    "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}


def _raw(t):
    """The bytes of a tensor, row-major (bf16/f16 through int16 views)."""
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def dumps(tensors, metadata=None):
    """The bytes of a safetensors file holding tensors (a dict)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = _raw(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def save(path, tensors, metadata=None):
    with open(path, "wb") as f:
        f.write(dumps(tensors, metadata))


def loads(data):
    """A dict of tensors from the bytes of a safetensors file."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        raw = bytearray(data[base + b:base + end])
        if dt in (torch.bfloat16, torch.float16):
            t = torch.frombuffer(raw, dtype=torch.int16).view(dt) if raw else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"]).clone()
    return out


def load(path):
    with open(path, "rb") as f:
        return loads(f.read())
