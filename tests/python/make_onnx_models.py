"""Builds a Triton model repository of small ONNX models with onnx.helper (no downloads).

    python tests/python/make_onnx_models.py DIR

Models (each DIR/<name>/1/model.onnx, most with a config.pbtxt):
  cnn       Conv, Relu, GlobalAveragePool, Flatten, Gemm, Softmax over [-1, 3, 8, 8] FP32
  mixed     FP32 [-1, 4] and INT64 [-1, 2] in; FP32 "sum" [-1, 4] and INT64 "doubled" [-1, 2] out
  varlen    FP32 [-1, -1]: a variable non-batch dim, each row summed to "total" [-1, 1]
  nobatch   max_batch_size 0: FP32 [2, 3] times a fixed matrix, "y" [2, 2]
  masks     UINT8 "pixels" and BOOL "mask" [-1, 4] in; FP32 "masked" [-1, 4] out
  bare      like mixed, with no config.pbtxt at all
  fragile   FP32 [-1, -1] reshaped to [n, 2, -1]: ONNX Runtime fails on an odd length
  reshaped  served as [-1, 2, 3] in and [-1, 6] out, the graph's [-1, 6] and [-1, 2, 3]
            (Triton's reshape)

    python tests/python/make_onnx_models.py DIR grpc

  mixed, masks, and halves: FP16 "h" and BF16 "b" [-1, 3] in, each as it came out ("h2", "b2")
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def save(repo, name, graph, config=None, version=1):
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="tandem-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    folder = os.path.join(repo, name, str(version))
    os.makedirs(folder, exist_ok=True)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    if config is not None:
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)


def tensor(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def cnn(repo, seed=1, version=1):
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "conv_w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "conv_b")
    fw = numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "fc_w")
    fb = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc_b")
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn",
        [tensor("image", TensorProto.FLOAT, ["n", 3, 8, 8])],
        [tensor("probs", TensorProto.FLOAT, ["n", 5])],
        [w, b, fw, fb],
    )
    config = """name: "cnn"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ 5 ] } ]
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { count: 1 kind: KIND_CPU } ]
version_policy { latest { num_versions: 1 } }
model_warmup [ {
  name: "random images"
  batch_size: 2
  inputs { key: "image" value: { data_type: TYPE_FP32 dims: [ 3, 8, 8 ] random_data: true } }
  count: 2
} ]
"""
    save(repo, "cnn", graph, config, version)


def mixed(repo, name="mixed", with_config=True):
    bias = numpy_helper.from_array(np.array([0.5, -1.0, 2.0, 0.25], np.float32), "bias")
    two = numpy_helper.from_array(np.array([2], np.int64), "two")
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["sum"]),
        helper.make_node("Mul", ["ids", "two"], ["doubled"]),
    ]
    graph = helper.make_graph(
        nodes, name,
        [tensor("x", TensorProto.FLOAT, ["n", 4]), tensor("ids", TensorProto.INT64, ["n", 2])],
        [tensor("sum", TensorProto.FLOAT, ["n", 4]), tensor("doubled", TensorProto.INT64, ["n", 2])],
        [bias, two],
    )
    config = f"""name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [
  {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "ids" data_type: TYPE_INT64 dims: [ 2 ] }}
]
output [
  {{ name: "sum" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "doubled" data_type: TYPE_INT64 dims: [ 2 ] }}
]
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "1" }} }}
"""
    save(repo, name, graph, config if with_config else None)


def varlen(repo):
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["seq", "axes"], ["total"], keepdims=1)], "varlen",
        [tensor("seq", TensorProto.FLOAT, ["n", "len"])],
        [tensor("total", TensorProto.FLOAT, ["n", 1])],
        [axes],
    )
    config = """name: "varlen"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "seq" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "total" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
    save(repo, "varlen", graph, config)


def fragile(repo):
    shape = numpy_helper.from_array(np.array([0, 2, -1], np.int64), "shape")
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [
        helper.make_node("Reshape", ["seq", "shape"], ["pairs"]),
        helper.make_node("ReduceSum", ["pairs", "axes"], ["halves"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "fragile",
        [tensor("seq", TensorProto.FLOAT, ["n", "len"])],
        [tensor("halves", TensorProto.FLOAT, ["n", 2])],
        [shape, axes],
    )
    config = """name: "fragile"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "seq" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "halves" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
    save(repo, "fragile", graph, config)


def reshaped(repo):
    shape = numpy_helper.from_array(np.array([0, 2, 3], np.int64), "shape")
    nodes = [
        helper.make_node("Reshape", ["flat", "shape"], ["r"]),
        helper.make_node("Relu", ["r"], ["grid"]),
    ]
    graph = helper.make_graph(
        nodes, "reshaped",
        [tensor("flat", TensorProto.FLOAT, ["n", 6])],
        [tensor("grid", TensorProto.FLOAT, ["n", 2, 3])],
        [shape],
    )
    config = """name: "reshaped"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "flat" data_type: TYPE_FP32 dims: [ 2, 3 ] reshape: { shape: [ 6 ] } } ]
output [ { name: "grid" data_type: TYPE_FP32 dims: [ 6 ] reshape: { shape: [ 2, 3 ] } } ]
"""
    save(repo, "reshaped", graph, config)


def nobatch(repo):
    m = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2) / 4, "m")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "m"], ["y"])], "nobatch",
        [tensor("a", TensorProto.FLOAT, [2, 3])],
        [tensor("y", TensorProto.FLOAT, [2, 2])],
        [m],
    )
    config = """name: "nobatch"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "a" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 2, 2 ] } ]
"""
    save(repo, "nobatch", graph, config)


def masks(repo):
    nodes = [
        helper.make_node("Cast", ["pixels"], ["pf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["pf", "mf"], ["masked"]),
    ]
    graph = helper.make_graph(
        nodes, "masks",
        [tensor("pixels", TensorProto.UINT8, ["n", 4]), tensor("mask", TensorProto.BOOL, ["n", 4])],
        [tensor("masked", TensorProto.FLOAT, ["n", 4])],
    )
    config = """name: "masks"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [
  { name: "pixels" data_type: TYPE_UINT8 dims: [ 4 ] },
  { name: "mask" data_type: TYPE_BOOL dims: [ 4 ] }
]
output [ { name: "masked" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
    save(repo, "masks", graph, config)


def halves(repo):
    nodes = [
        helper.make_node("Identity", ["h"], ["h2"]),
        helper.make_node("Identity", ["b"], ["b2"]),
    ]
    graph = helper.make_graph(
        nodes, "halves",
        [tensor("h", TensorProto.FLOAT16, ["n", 3]), tensor("b", TensorProto.BFLOAT16, ["n", 3])],
        [tensor("h2", TensorProto.FLOAT16, ["n", 3]), tensor("b2", TensorProto.BFLOAT16, ["n", 3])],
    )
    save(repo, "halves", graph)


def main():
    repo = sys.argv[1]
    os.makedirs(repo, exist_ok=True)
    which = sys.argv[2] if len(sys.argv) > 2 else "all"
    if which == "cnn-v2":
        cnn(repo, seed=2, version=2)
        return
    if which == "grpc":
        mixed(repo)
        masks(repo)
        halves(repo)
        return
    cnn(repo)
    mixed(repo)
    varlen(repo)
    nobatch(repo)
    masks(repo)
    mixed(repo, name="bare", with_config=False)
    fragile(repo)
    reshaped(repo)


if __name__ == "__main__":
    main()
