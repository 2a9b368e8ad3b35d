"""tritonclient.grpc (and the raw gRPC stubs it ships) against a running tandem, checked
against numpy and against the same requests over HTTP.

    python tests/python/grpc_check.py --grpc 127.0.0.1:8001 --http 127.0.0.1:8000 \
        --mlp m --weights PATH --slow slow --text text [--onnx]

Exits non-zero (with the assertion) on any mismatch; prints "all checks passed".
"""

import argparse
import concurrent.futures
import queue

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tritonclient_check import load_mlp, reference, check_close


def grpc_input(name, value, datatype):
    i = grpcclient.InferInput(name, list(value.shape), datatype)
    i.set_data_from_numpy(value)
    return i


def http_input(name, value, datatype):
    i = httpclient.InferInput(name, list(value.shape), datatype)
    i.set_data_from_numpy(value, binary_data=True)
    return i


def expect_error(call, code, *says):
    try:
        call()
    except InferenceServerException as e:
        assert e.status() == f"StatusCode.{code}", f"{e.status()}: {e.message()}"
        for s in says:
            assert s in e.message(), f"{s!r} not in {e.message()!r}"
        return e
    raise AssertionError(f"expected {code}")


def check_server(client, args):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(args.mlp)
    assert not client.is_model_ready("no-such-model")
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "tandem" and "model_repository" in meta["extensions"], meta


def check_metadata(client, http, models):
    for m in models:
        got = client.get_model_metadata(m, as_json=True)
        want = http.get_model_metadata(m)
        for key in ("inputs", "outputs"):
            g = [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in got[key]]
            w = [(t["name"], t["datatype"], t["shape"]) for t in want[key]]
            assert g == w, f"{m} {key}: gRPC {g} vs HTTP {w}"
        config = client.get_model_config(m, as_json=True)["config"]
        assert config["name"] == m, config


def check_mlp(client, http, stub, args):
    layers = load_mlp(args.weights)
    width = layers[0][0].shape[1]
    x = np.random.default_rng(3).standard_normal((3, width)).astype(np.float32)
    want = reference(layers, x)
    # Raw contents, tritonclient's default.
    got = client.infer(args.mlp, [grpc_input("input-0", x, "FP32")])
    out = got.as_numpy("output-0")
    check_close(out, want, "gRPC raw")
    # The same over HTTP's binary extension: the same bits.
    over_http = http.infer(args.mlp, [http_input("input-0", x, "FP32")]).as_numpy("output-0")
    assert out.tobytes() == over_http.tobytes(), "gRPC and HTTP disagree"
    # Typed contents, through the stub tritonclient ships.
    req = service_pb2.ModelInferRequest(model_name=args.mlp, id="typed-1")
    t = req.inputs.add(name="input-0", datatype="FP32", shape=list(x.shape))
    t.contents.fp32_contents.extend(x.flatten().tolist())
    resp = stub.ModelInfer(req)
    assert resp.id == "typed-1" and resp.model_name == args.mlp, resp
    typed = np.frombuffer(resp.raw_output_contents[0], np.float32).reshape(3, -1)
    assert typed.tobytes() == out.tobytes(), "typed and raw contents disagree"
    # Typed contents in another type's field, a wrong shape, a wrong datatype.
    bad = service_pb2.ModelInferRequest(model_name=args.mlp)
    t = bad.inputs.add(name="input-0", datatype="FP32", shape=[1, width])
    t.contents.int_contents.extend([1] * width)
    try:
        stub.ModelInfer(bad)
        raise AssertionError("int_contents for FP32 accepted")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        assert "input-0" in e.details() and "fp32_contents" in e.details(), e.details()
    wrong = np.zeros((1, width + 1), np.float32)
    expect_error(lambda: client.infer(args.mlp, [grpc_input("input-0", wrong, "FP32")]),
                 "INVALID_ARGUMENT", "input-0")
    texts = np.array([[b"x"] * width], dtype=np.object_)
    expect_error(lambda: client.infer(args.mlp, [grpc_input("input-0", texts, "BYTES")]),
                 "INVALID_ARGUMENT", "input-0")
    expect_error(lambda: client.infer("no-such-model", [grpc_input("input-0", x, "FP32")]),
                 "NOT_FOUND", "no-such-model")
    # A message over limits.max_body_bytes (16 MiB by default).
    huge = service_pb2.ModelInferRequest(model_name=args.mlp)
    huge.inputs.add(name="input-0", datatype="FP32", shape=[1, width])
    huge.raw_input_contents.append(bytes(17 << 20))
    try:
        stub.ModelInfer(huge)
        raise AssertionError("a 17 MiB message was accepted")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (e.code(), e.details())
        assert "max_body_bytes" in e.details(), e.details()
    # The request's own timeout, one microsecond: the server refuses it as late.
    expect_error(lambda: client.infer(args.mlp, [grpc_input("input-0", x, "FP32")], timeout=1),
                 "DEADLINE_EXCEEDED")
    return x, out


def check_stream(client, args, x, want):
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    n = 12
    for i in range(n):
        client.async_stream_infer(args.mlp, [grpc_input("input-0", x, "FP32")], request_id=f"s{i}")
    client.async_stream_infer("no-such-model", [grpc_input("input-0", x, "FP32")], request_id="bad")
    seen, errors = set(), []
    for _ in range(n + 1):
        result, error = answers.get(timeout=30)
        if error is not None:
            errors.append(error)
            continue
        r = result.get_response()
        seen.add(r.id)
        # Batched with each other, rows may round differently from a batch of their own.
        check_close(result.as_numpy("output-0"), want, r.id)
    client.stop_stream()
    assert seen == {f"s{i}" for i in range(n)}, seen
    assert len(errors) == 1 and "no-such-model" in str(errors[0]), errors


def check_text(client, http, args):
    texts = np.array([b"a first text", "caf\u00e9 au lait".encode(), b"third"], dtype=np.object_)
    value = texts.reshape(3, 1)
    got = client.infer(args.text, [grpc_input("text", value, "BYTES")])
    name = client.get_model_metadata(args.text, as_json=True)["outputs"][0]["name"]
    out = got.as_numpy(name)
    assert out.shape[0] == 3, out.shape
    want = http.infer(args.text, [http_input("text", value, "BYTES")]).as_numpy(name)
    assert out.tobytes() == want.tobytes(), "text: gRPC and HTTP disagree"


def check_onnx(client, http, stub):
    rng = np.random.default_rng(5)
    cases = {
        "mixed": [("x", rng.standard_normal((2, 4)).astype(np.float32), "FP32"),
                  ("ids", np.array([[1, 2], [3, -4]], np.int64), "INT64")],
        "masks": [("pixels", np.array([[1, 2, 3, 250]], np.uint8), "UINT8"),
                  ("mask", np.array([[True, False, True, True]]), "BOOL")],
    }
    for model, feeds in cases.items():
        g = client.infer(model, [grpc_input(n, v, t) for n, v, t in feeds])
        h = http.infer(model, [http_input(n, v, t) for n, v, t in feeds])
        for o in client.get_model_metadata(model, as_json=True)["outputs"]:
            a, b = g.as_numpy(o["name"]), h.as_numpy(o["name"])
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"{model}.{o['name']}"
    # FP16 and BF16 (which numpy lacks) as raw bytes: the graph's identities give each back.
    halves = rng.standard_normal((1, 3)).astype(np.float16)
    bits = np.array([[0x3F80, 0xC000, 0x4049]], np.uint16)
    req = service_pb2.ModelInferRequest(model_name="halves")
    feeds = {"h": (halves.tobytes(), "FP16"), "b": (bits.tobytes(), "BF16")}
    for name, (raw, datatype) in feeds.items():
        req.inputs.add(name=name, datatype=datatype, shape=[1, 3])
        req.raw_input_contents.append(raw)
    resp = stub.ModelInfer(req)
    outputs = {o.name: (o.datatype, raw) for o, raw in zip(resp.outputs, resp.raw_output_contents)}
    assert outputs["h2"] == ("FP16", halves.tobytes()), outputs["h2"]
    assert outputs["b2"] == ("BF16", bits.tobytes()), outputs["b2"]


def check_shedding(client, stub, args):
    width = int(client.get_model_metadata(args.slow, as_json=True)["inputs"][0]["shape"][1])
    x = np.zeros((1, width), np.float32)
    req = service_pb2.ModelInferRequest(model_name=args.slow)
    req.inputs.add(name="input-0", datatype="FP32", shape=[1, width])
    req.raw_input_contents.append(x.tobytes())
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        calls = [pool.submit(stub.ModelInfer.with_call, req) for _ in range(64)]
        refused = []
        for c in calls:
            try:
                c.result()
            except grpc.RpcError as e:
                refused.append(e)
    assert refused, "64 requests at once on a queue of 2 were all served"
    for e in refused:
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (e.code(), e.details())
        trailers = dict(e.trailing_metadata())
        assert int(trailers["retry-after"]) >= 1, trailers
        assert int(trailers["grpc-retry-pushback-ms"]) >= 1, trailers


def check_statistics_and_repository(client, args, x):
    def count():
        stats = client.get_inference_statistics(args.mlp, as_json=True)["model_stats"][0]
        return int(stats.get("inference_count", 0))

    before = count()
    client.infer(args.mlp, [grpc_input("input-0", x, "FP32")])
    assert count() == before + x.shape[0], (before, count())
    index = client.get_model_repository_index(as_json=True)["models"]
    assert any(m["name"] == args.mlp and m["state"] == "READY" for m in index), index
    client.unload_model(args.slow)
    assert not client.is_model_ready(args.slow)
    client.load_model(args.slow)
    assert client.is_model_ready(args.slow)
    expect_error(lambda: client.load_model("no-such-model"), "NOT_FOUND")
    expect_error(lambda: client.register_system_shared_memory("r", "/k", 16), "UNIMPLEMENTED",
                 "shared-memory")


def check_health_and_reflection(channel, args):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "inference.GRPCInferenceService", args.mlp):
        status = health.Check(health_pb2.HealthCheckRequest(service=service)).status
        assert status == health_pb2.HealthCheckResponse.SERVING, (service, status)
    try:
        health.Check(health_pb2.HealthCheckRequest(service="no-such-model"))
        raise AssertionError("an unknown service was healthy")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    ask = reflection_pb2.ServerReflectionRequest(list_services="")
    answer = next(reflection.ServerReflectionInfo(iter([ask])))
    names = {s.name for s in answer.list_services_response.service}
    for want in ("inference.GRPCInferenceService", "grpc.health.v1.Health"):
        assert want in names, names


def check_keys(args):
    """With API keys set: liveness, readiness and the server's health open; the rest (a
    model's health, load and unload too) refused UNAUTHENTICATED without `authorization`."""
    client = grpcclient.InferenceServerClient(url=args.grpc)
    key = {"authorization": f"Bearer {args.key}"}
    assert client.is_server_live() and client.is_server_ready()
    channel = grpc.insecure_channel(args.grpc)
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest(service="")).status == \
        health_pb2.HealthCheckResponse.SERVING
    try:
        health.Check(health_pb2.HealthCheckRequest(service=args.mlp))
        raise AssertionError("a model's health answered without a key")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e
    expect_error(lambda: client.get_model_metadata(args.mlp), "UNAUTHENTICATED", "API key")
    expect_error(lambda: client.unload_model(args.mlp), "UNAUTHENTICATED")
    wrong = {"authorization": "Bearer nope"}
    expect_error(lambda: client.get_model_metadata(args.mlp, headers=wrong), "UNAUTHENTICATED")
    width = int(client.get_model_metadata(args.mlp, headers=key, as_json=True)["inputs"][0]["shape"][1])
    x = np.zeros((1, width), np.float32)
    got = client.infer(args.mlp, [grpc_input("input-0", x, "FP32")], headers=key)
    assert got.as_numpy("output-0").shape == (1, 4), got.as_numpy("output-0").shape
    print("all checks passed")


def check_drain(args):
    """SIGTERM to a server with a drain: over gRPC, readiness and the server's health go
    NOT_SERVING while requests are still served, and a health Watch says so and ends."""
    import os
    import signal
    import threading
    import time

    client = grpcclient.InferenceServerClient(url=args.grpc)
    channel = grpc.insecure_channel(args.grpc)
    health = health_pb2_grpc.HealthStub(channel)
    watched = []
    watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
    watcher = threading.Thread(target=lambda: watched.extend(r.status for r in watch))
    watcher.start()
    assert client.is_server_ready()
    width = int(client.get_model_metadata(args.mlp, as_json=True)["inputs"][0]["shape"][1])
    x = np.zeros((1, width), np.float32)
    # The watch has given its first status before the signal (the thread may start late).
    deadline = time.monotonic() + 5
    while not watched:
        assert time.monotonic() < deadline, "the health watch gave no first status"
        time.sleep(0.01)
    os.kill(args.drain_pid, signal.SIGTERM)
    deadline = time.monotonic() + 1.5
    while client.is_server_ready():
        assert time.monotonic() < deadline, "still ready 1.5 s after SIGTERM"
        time.sleep(0.05)
    # Draining: not ready, yet serving.
    assert client.infer(args.mlp, [grpc_input("input-0", x, "FP32")]).as_numpy("output-0") is not None
    watcher.join(timeout=5)
    assert not watcher.is_alive(), "the health watch outlived the drain"
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    assert watched[:1] == [serving] and watched[-1] == not_serving, watched
    print("all checks passed")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--key", help="the server's API key: check only what keys guard")
    p.add_argument("--drain-pid", type=int, help="the server's pid: check only its drain")
    for flag in ("--grpc", "--mlp"):
        p.add_argument(flag, required=True)
    for flag in ("--http", "--weights", "--slow", "--text"):
        p.add_argument(flag)
    p.add_argument("--onnx", action="store_true")
    args = p.parse_args()
    if args.key:
        return check_keys(args)
    if args.drain_pid:
        return check_drain(args)
    client = grpcclient.InferenceServerClient(url=args.grpc)
    http = httpclient.InferenceServerClient(url=args.http)
    channel = grpc.insecure_channel(args.grpc)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    models = [args.mlp, args.text] + (["mixed", "masks", "halves"] if args.onnx else [])
    check_server(client, args)
    check_metadata(client, http, models)
    x, out = check_mlp(client, http, stub, args)
    check_stream(client, args, x, out)
    check_text(client, http, args)
    if args.onnx:
        check_onnx(client, http, stub)
    check_shedding(client, stub, args)
    check_statistics_and_repository(client, args, x)
    check_health_and_reflection(channel, args)
    print("all checks passed")


if __name__ == "__main__":
    main()
