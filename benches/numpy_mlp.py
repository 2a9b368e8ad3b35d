#!/usr/bin/env python3
"""The same MLP forward pass in numpy (OpenBLAS), timed like `tandem-bench forward`.

Reads a tandem safetensors checkpoint with the standard library and numpy only, runs
x @ W.T + b with ReLU between layers, and prints and writes the same table. Set the BLAS
thread count with --threads (it sets OPENBLAS_NUM_THREADS before numpy loads).

    python3 benches/numpy_mlp.py --model M --batch 1,128 --threads 2 --json out.json
"""

import argparse
import json
import os
import struct
import sys
import time


def load(path, np):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    kinds = {"F32": np.float32, "F16": np.float16}
    tensors = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        if info["dtype"] == "BF16":
            raw = np.frombuffer(body[a:b], dtype=np.uint16).astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(body[a:b], dtype=kinds[info["dtype"]]).astype(np.float32)
        tensors[name] = arr.reshape(info["shape"])
    layers = []
    i = 0
    while f"layers.{i}.weight" in tensors:
        # Transposed once, contiguous, as a fair user of numpy would keep it.
        layers.append((np.ascontiguousarray(tensors[f"layers.{i}.weight"].T),
                       tensors[f"layers.{i}.bias"]))
        i += 1
    return layers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--batch", default="1,8,32,128,512")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--json")
    args = p.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np

    layers = load(args.model, np)
    dims = [layers[0][0].shape[0]] + [w.shape[1] for w, _ in layers]
    macs = sum(w.shape[0] * w.shape[1] for w, _ in layers)

    def forward(x):
        for i, (wt, b) in enumerate(layers):
            x = x @ wt
            x += b
            if i + 1 < len(layers):
                np.maximum(x, 0, out=x)
        return x

    rng = np.random.default_rng(7)
    rows = []
    for batch in [int(b) for b in args.batch.split(",")]:
        x = rng.standard_normal((batch, dims[0]), dtype=np.float32)
        warm = time.perf_counter() + min(args.seconds / 10, 0.5)
        while time.perf_counter() < warm:
            forward(x)
        lat = []
        start = time.perf_counter()
        while time.perf_counter() - start < args.seconds or len(lat) < 20:
            t = time.perf_counter()
            forward(x)
            lat.append(time.perf_counter() - t)
        total = sum(lat)
        lat.sort()
        q = lambda f: lat[max(1, min(len(lat), int(-(-f * len(lat) // 1)))) - 1]
        sps = batch * len(lat) / total
        rows.append({"batch": batch, "iterations": len(lat), "p50_us": q(0.5) * 1e6,
                     "p99_us": q(0.99) * 1e6, "samples_per_second": sps,
                     "gflops": 2 * macs * sps / 1e9})
    report = {"model": args.model, "dims": dims, "device": "cpu (numpy " + np.__version__ + ")",
              "threads": args.threads, "rows": rows}
    print(f"numpy    model {args.model} ({'→'.join(map(str, dims))})  threads {args.threads}")
    print(f"{'batch':>6} {'p50 µs':>10} {'p99 µs':>10} {'samples/s':>12} {'GFLOP/s':>9}")
    for r in rows:
        print(f"{r['batch']:>6} {r['p50_us']:>10.1f} {r['p99_us']:>10.1f} "
              f"{r['samples_per_second']:>12.0f} {r['gflops']:>9.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
