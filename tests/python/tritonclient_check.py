"""tritonclient.http's default calls against a running tandem, checked against numpy.

    python tests/python/tritonclient_check.py --url 127.0.0.1:8000 --model m --weights PATH

Exits non-zero (with the assertion) on any mismatch. Run by tests/tritonclient.rs.
"""

import argparse
import json
import struct

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def load_mlp(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    t = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        assert info["dtype"] == "F32", info["dtype"]
        t[name] = np.frombuffer(body[a:b], dtype=np.float32).reshape(info["shape"]).astype(np.float64)
    layers, i = [], 0
    while f"layers.{i}.weight" in t:
        layers.append((t[f"layers.{i}.weight"], t[f"layers.{i}.bias"]))
        i += 1
    return layers


def reference(layers, x):
    y = x.astype(np.float64)
    for i, (w, b) in enumerate(layers):
        y = y @ w.T + b
        if i + 1 < len(layers):
            y = np.maximum(y, 0)
    return y


def check_close(got, want, what):
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-6)
    assert err <= 1e-5, f"{what}: relative error {err}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--weights", required=True)
    args = p.parse_args()
    layers = load_mlp(args.weights)
    width = layers[0][0].shape[1]

    client = httpclient.InferenceServerClient(url=args.url)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(args.model)
    meta = client.get_model_metadata(args.model)
    assert meta["inputs"][0]["name"] == "input-0", meta
    assert meta["inputs"][0]["shape"] == [-1, width], meta
    config = client.get_model_config(args.model)
    assert config["max_batch_size"] > 0, config
    assert config["input"][0]["name"] == "input-0", config
    assert config["input"][0]["dims"] == [width], config
    assert config["input"][0]["data_type"] == "TYPE_FP32", config
    server_meta = client.get_server_metadata()
    assert server_meta["name"] == "tandem", server_meta

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, width)).astype(np.float32)
    want = reference(layers, x)

    # The defaults: binary input, no outputs listed (so binary outputs).
    inp = httpclient.InferInput("input-0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(args.model, [inp])
    check_close(result.as_numpy("output-0"), want, "binary in, binary out")

    # JSON both ways, with an id, priority and timeout.
    inp = httpclient.InferInput("input-0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=False)
    out = httpclient.InferRequestedOutput("output-0", binary_data=False)
    result = client.infer(args.model, [inp], outputs=[out], request_id="r-7",
                          priority=1, timeout=10_000_000)
    assert result.get_response()["id"] == "r-7"
    check_close(result.as_numpy("output-0"), want, "JSON in, JSON out")

    # FP16 input in binary.
    x16 = x.astype(np.float16)
    inp = httpclient.InferInput("input-0", list(x.shape), "FP16")
    inp.set_data_from_numpy(x16)
    result = client.infer(args.model, [inp], model_version="1")
    check_close(result.as_numpy("output-0"), reference(layers, x16.astype(np.float32)), "FP16 in")

    # Compressed request bodies (gzip, and deflate in zlib form), binary and JSON. A
    # compressed response is asked for too; answers this small come uncompressed, which
    # the client reads as HTTP allows.
    for algorithm in ("gzip", "deflate"):
        for binary in (True, False):
            inp = httpclient.InferInput("input-0", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=binary)
            result = client.infer(args.model, [inp],
                                  request_compression_algorithm=algorithm,
                                  response_compression_algorithm=algorithm)
            check_close(result.as_numpy("output-0"), want,
                        f"{algorithm}-compressed request, binary={binary}")

    # Compressed responses: 40 rows make an answer large enough to be compressed.
    big = rng.standard_normal((40, width)).astype(np.float32)
    for algorithm in ("gzip", "deflate"):
        for binary in (True, False):
            inp = httpclient.InferInput("input-0", list(big.shape), "FP32")
            inp.set_data_from_numpy(big)
            out = httpclient.InferRequestedOutput("output-0", binary_data=binary)
            result = client.infer(args.model, [inp], outputs=[out],
                                  response_compression_algorithm=algorithm)
            check_close(result.as_numpy("output-0"), reference(layers, big),
                        f"{algorithm}-compressed response, binary={binary}")

    # The statistics extension: every request above was counted.
    stats = client.get_inference_statistics(args.model)["model_stats"]
    assert sum(v["inference_count"] for v in stats) >= 3 * 6, stats
    assert all(v["name"] == args.model for v in stats), stats

    # Errors surface as InferenceServerException with the server's message.
    try:
        client.infer("no-such-model", [inp])
        raise AssertionError("unknown model accepted")
    except InferenceServerException as e:
        assert "no-such-model" in str(e), str(e)
    bad = httpclient.InferInput("input-0", [1, width + 1], "FP32")
    bad.set_data_from_numpy(np.zeros((1, width + 1), dtype=np.float32))
    try:
        client.infer(args.model, [bad])
        raise AssertionError("wrong shape accepted")
    except InferenceServerException as e:
        assert str(width) in str(e), str(e)

    # The model repository extension: index, unload, load (the server is on loopback).
    index = client.get_model_repository_index()
    assert {"name": args.model, "version": "1", "state": "READY", "reason": ""} in index, index
    client.unload_model(args.model)
    assert not client.is_model_ready(args.model)
    entry = [e for e in client.get_model_repository_index() if e["name"] == args.model]
    assert entry and entry[0]["state"] == "UNAVAILABLE", entry
    assert entry[0]["reason"] == "unloaded", entry
    client.load_model(args.model)
    assert client.is_model_ready(args.model)
    inp = httpclient.InferInput("input-0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(args.model, [inp])
    check_close(result.as_numpy("output-0"), want, "after a reload")
    try:
        client.load_model(args.model, config='{"max_batch_size": 8}')
        raise AssertionError("a load with its own config accepted")
    except InferenceServerException as e:
        assert "config" in str(e), str(e)
    try:
        client.load_model("no-such-model")
        raise AssertionError("unknown model loaded")
    except InferenceServerException as e:
        assert "no-such-model" in str(e), str(e)
    print("tritonclient: all checks passed")


if __name__ == "__main__":
    main()
