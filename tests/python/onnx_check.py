"""tritonclient.http against tandem serving the repository make_onnx_models.py builds,
checked against onnxruntime in Python on the same model files.

    python tests/python/onnx_check.py --url 127.0.0.1:8000 --repo DIR

Exits non-zero (with the assertion) on any mismatch; prints "all checks passed".
"""

import argparse
import os

import numpy as np
import onnxruntime as ort
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

TOLERANCE = 1e-5


def reference(repo, model, feeds):
    session = ort.InferenceSession(os.path.join(repo, model, "1", "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def infer(client, model, feeds, binary):
    inputs = []
    for name, value in feeds.items():
        datatype = {np.float32: "FP32", np.int64: "INT64", np.uint8: "UINT8",
                    np.bool_: "BOOL"}[value.dtype.type]
        i = httpclient.InferInput(name, list(value.shape), datatype)
        i.set_data_from_numpy(value, binary_data=binary)
        inputs.append(i)
    return client.infer(model, inputs, outputs=None if binary else [
        httpclient.InferRequestedOutput(o["name"], binary_data=False)
        for o in client.get_model_metadata(model)["outputs"]
    ])


def check(client, repo, model, feeds):
    want = reference(repo, model, feeds)
    for binary in (True, False):
        result = infer(client, model, feeds, binary)
        for name, expected in want.items():
            got = result.as_numpy(name)
            assert got is not None, f"{model}: no output {name}"
            assert got.shape == expected.shape, f"{model}.{name}: {got.shape} vs {expected.shape}"
            assert got.dtype == expected.dtype, f"{model}.{name}: {got.dtype} vs {expected.dtype}"
            diff = np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)))
            assert diff <= TOLERANCE, f"{model}.{name} binary={binary}: max abs diff {diff}"


def refused(client, model, inputs, outputs=None, says=""):
    try:
        client.infer(model, inputs, outputs=outputs)
    except InferenceServerException as e:
        assert says in str(e), f"{model}: expected {says!r} in {e}"
        return
    raise AssertionError(f"{model}: a bad request was accepted ({says})")


def tensor(name, value, datatype=None):
    datatype = datatype or {np.float32: "FP32", np.int64: "INT64"}[value.dtype.type]
    i = httpclient.InferInput(name, list(value.shape), datatype)
    i.set_data_from_numpy(value)
    return i


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--repo", required=True)
    args = p.parse_args()
    client = httpclient.InferenceServerClient(url=args.url)
    rng = np.random.default_rng(0)

    for model in ("cnn", "mixed", "varlen", "nobatch", "masks", "bare"):
        assert client.is_model_ready(model), model

    check(client, args.repo, "cnn", {"image": rng.standard_normal((3, 3, 8, 8)).astype(np.float32)})
    mixed = {"x": rng.standard_normal((5, 4)).astype(np.float32),
             "ids": rng.integers(-2**40, 2**40, (5, 2)).astype(np.int64)}
    check(client, args.repo, "mixed", mixed)
    check(client, args.repo, "bare", mixed)
    for length in (1, 7, 300):
        check(client, args.repo, "varlen", {"seq": rng.standard_normal((2, length)).astype(np.float32)})
    check(client, args.repo, "nobatch", {"a": rng.standard_normal((2, 3)).astype(np.float32)})
    check(client, args.repo, "masks", {"pixels": rng.integers(0, 256, (3, 4)).astype(np.uint8),
                                       "mask": rng.integers(0, 2, (3, 4)).astype(np.bool_)})

    # Triton's reshape: clients send [n, 2, 3] and get [n, 6]; the graph takes [n, 6] and
    # gives [n, 2, 3].
    grid = rng.standard_normal((3, 2, 3)).astype(np.float32)
    want = reference(args.repo, "reshaped", {"flat": grid.reshape(3, 6)})["grid"].reshape(3, 6)
    got = client.infer("reshaped", [tensor("flat", grid)]).as_numpy("grid")
    assert got.shape == (3, 6) and np.max(np.abs(got - want)) <= TOLERANCE, (got, want)
    assert client.get_model_config("reshaped")["input"][0]["reshape"]["shape"] == [6]

    # Metadata and the served configuration, in Triton's forms.
    meta = client.get_model_metadata("mixed")
    assert [i["name"] for i in meta["inputs"]] == ["x", "ids"], meta
    assert meta["inputs"][1] == {"name": "ids", "datatype": "INT64", "shape": [-1, 2]}, meta
    config = client.get_model_config("mixed")
    assert config["max_batch_size"] == 8, config
    assert config["backend"] == "onnxruntime", config
    assert config["parameters"]["intra_op_thread_count"]["string_value"] == "1", config
    assert client.get_model_config("nobatch")["max_batch_size"] == 0
    assert client.get_model_config("nobatch")["input"][0]["dims"] == [2, 3]
    bare = client.get_model_config("bare")
    assert bare["max_batch_size"] > 0 and bare["input"][0]["dims"] == [4], bare

    # Bad inputs: 400s that name the tensor and what was expected.
    x, ids = mixed["x"], mixed["ids"]
    refused(client, "mixed", [tensor("x", x.astype(np.float64), "FP64"), tensor("ids", ids)],
            says="datatype")
    refused(client, "mixed", [tensor("x", x[:, :3]), tensor("ids", ids)], says="shape")
    refused(client, "mixed", [tensor("x", x)], says='"ids" is missing')
    refused(client, "mixed", [tensor("x", x), tensor("ids", ids), tensor("z", x)],
            says='unknown input "z"')
    refused(client, "mixed", [tensor("x", x), tensor("ids", ids)],
            outputs=[httpclient.InferRequestedOutput("nope")], says='unknown output "nope"')
    big = rng.standard_normal((9, 4)).astype(np.float32)
    refused(client, "mixed", [tensor("x", big), tensor("ids", np.zeros((9, 2), np.int64))],
            says="max_batch_size")
    refused(client, "mixed", [tensor("x", x), tensor("ids", ids[:2])], says="rows")
    refused(client, "nobatch", [tensor("a", np.zeros((1, 2, 3), np.float32))], says="shape")

    # A subset of outputs, JSON; the server is still serving afterwards.
    result = client.infer("mixed", [tensor("x", x), tensor("ids", ids)],
                          outputs=[httpclient.InferRequestedOutput("doubled", binary_data=False)])
    assert result.as_numpy("sum") is None
    assert (result.as_numpy("doubled") == ids * 2).all()
    print("all checks passed")


if __name__ == "__main__":
    main()
