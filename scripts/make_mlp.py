#!/usr/bin/env python3
"""Writes a deterministic random MLP checkpoint in tandem's safetensors layout.

Tensors `layers.{i}.weight` [out, in] and `layers.{i}.bias` [out], initialised like
PyTorch's nn.Linear (uniform in +-1/sqrt(in)) from a seeded generator, so the same
command always writes the same bytes. Standard library only.

    python3 scripts/make_mlp.py --dims 784,1024,1024,10 --seed 1 /tmp/mlp.safetensors
"""

import argparse
import json
import os
import random
import struct


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    if dtype == "BF16":
        out = bytearray()
        for v in values:
            bits = struct.unpack("<I", struct.pack("<f", v))[0]
            bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
            out += struct.pack("<H", (bits >> 16) & 0xFFFF)
        return bytes(out)
    raise ValueError(dtype)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", required=True, help="widths, e.g. 64,128,10")
    parser.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("out")
    args = parser.parse_args()

    dims = [int(d) for d in args.dims.split(",")]
    dtype = args.dtype.upper()
    rng = random.Random(args.seed)
    header, blobs, offset = {}, [], 0
    for i, (fan_in, fan_out) in enumerate(zip(dims, dims[1:])):
        limit = 1.0 / fan_in ** 0.5
        for name, shape, n, tensor_dtype in (
            (f"layers.{i}.weight", [fan_out, fan_in], fan_in * fan_out, dtype),
            (f"layers.{i}.bias", [fan_out], fan_out, "F32"),
        ):
            blob = encode([rng.uniform(-limit, limit) for _ in range(n)], tensor_dtype)
            header[name] = {"dtype": tensor_dtype, "shape": shape,
                            "data_offsets": [offset, offset + len(blob)]}
            blobs.append(blob)
            offset += len(blob)
    header["__metadata__"] = {"format": "tandem-mlp", "generator": "scripts/make_mlp.py",
                              "seed": str(args.seed)}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # keep the data 8-byte aligned
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
