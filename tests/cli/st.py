"""st.py - f32 safetensors files without torch, for the cli tests.

    python3 st.py write FILE NAME=SHAPE:v,v,... ...   (SHAPE: 2x3, or - for a scalar)
    python3 st.py write FILE NAME=SHAPE:i64:v,v,...   (an i64 tensor)
    python3 st.py read FILE            prints NAME v v ... per tensor (f32 and i64)
"""
import json
import struct
import sys


def write(path, specs):
    header, blobs, off = {}, [], 0
    for spec in sorted(specs):
        name, rest = spec.split("=", 1)
        shape, vals = rest.split(":", 1)
        dims = [] if shape == "-" else [int(d) for d in shape.split("x")]
        dtype, fmt, conv = "F32", "f", float
        if vals.startswith("i64:"):
            dtype, fmt, conv, vals = "I64", "q", int, vals[4:]
        data = struct.pack("<%d%s" % (len(vals.split(",")), fmt), *map(conv, vals.split(","))) \
            if vals else b""
        header[name] = {"dtype": dtype, "shape": dims,
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    for name in sorted(k for k in h if k != "__metadata__"):
        t = h[name]
        lo, hi = t["data_offsets"]
        raw = b[8 + n + lo:8 + n + hi]
        if t["dtype"] == "I64":
            vals = struct.unpack("<%dq" % (len(raw) // 8), raw)
        elif t["dtype"] == "F32":
            vals = struct.unpack("<%df" % (len(raw) // 4), raw)
        else:
            continue
        print(name, " ".join(repr(v) for v in vals))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3:])
    else:
        read(sys.argv[2])
