#!/usr/bin/env python3
"""ResNet-50 and MobileNetV3-Small as ONNX graphs in a Triton model repository, for benchmarks.

Both are built layer by layer with onnx.helper to the layer shapes torchvision defines, with
random weights (a fixed numpy seed), so that no download or torch is needed:

- resnet50: torchvision.models.resnet50, v1.5 (the stride on each bottleneck's 3x3 conv):
  7x7/2 stem conv to 64, 3x3/2 max pool, Bottleneck stages of [3, 4, 6, 3] blocks of widths
  64/128/256/512 with 4x expansion (a 1x1 projection shortcut on each stage's first block),
  global average pool and fc 2048 -> 1000.
- mobilenet_v3_small: torchvision.models.mobilenet_v3_small (width 1.0): 3x3/2 stem conv to 16
  with hardswish, torchvision's eleven inverted-residual blocks (expand 1x1, depthwise kxk,
  squeeze-excitation with squeeze = _make_divisible(expanded // 4, 8), ReLU then HardSigmoid,
  project 1x1; a residual where stride 1 and the widths match), 1x1 conv 96 -> 576 with
  hardswish, global average pool, then the classifier 576 -> 1024 (hardswish; dropout is the
  identity at inference) -> 1000. HardSwish and HardSigmoid are ONNX's own ops; HardSigmoid
  with alpha = 1/6, beta = 0.5, which is PyTorch's relu6(x + 3) / 6.

Every BatchNorm is folded into the weights and bias of the convolution before it (what ONNX
exporters and Triton deployments do at inference), so each conv has a bias and there is no
BatchNormalization node. The parameter count printed is that of the graph (folded); torchvision's
own count, which also holds each BatchNorm's scale, is printed beside it and should read
25,557,032 for ResNet-50 and 2,542,856 for MobileNetV3-Small.

Weights are He-normal (std sqrt(2 / fan_in)), biases small; the folded BN scale of the last
conv of each residual branch is 0.2 so that activations stay O(1) through the residual sums.

Graphs are opset 17, IR version 8; input "input" FP32 [batch, 3, 224, 224], output "logits"
FP32 [batch, 1000], with "batch" a dynamic dimension. Each goes to REPO/<name>/1/model.onnx
with a config.pbtxt in Triton's layout (platform onnxruntime_onnx, max_batch_size N, dims
without the batch dimension), then is checked with onnx.checker and run once with
onnxruntime.

    python benches/onnx_models.py REPO [--models resnet50,mobilenet_v3_small] \\
        [--max-batch-size 8] [--suffix _nobatch] [--seed 0] [--no-check]

`--max-batch-size 1 --suffix _nobatch --models mobilenet_v3_small` writes the "batching off"
model, REPO/mobilenet_v3_small_nobatch.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
MODELS = ("resnet50", "mobilenet_v3_small")


class Graph:
    """Collects nodes and initializers; each method appends layers and returns the output name."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.params = 0
        self.bn_channels = 0  # BatchNorm channels folded away (their scale is a parameter in torch)
        self.counter = 0

    def name(self, prefix):
        self.counter += 1
        return f"{prefix}_{self.counter}"

    def init(self, name, array):
        array = np.ascontiguousarray(array, dtype=np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        self.params += array.size
        return name

    def node(self, op, inputs, prefix=None, **attrs):
        out = self.name(prefix or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, groups=1, dilation=1, bn=True, bn_scale=1.0,
             prefix="conv"):
        """A kxk conv, torchvision's padding ((k - 1) // 2 * dilation), with its BatchNorm folded."""
        fan_in = cin // groups * k * k
        w = self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / fan_in)
        w *= bn_scale
        b = self.rng.standard_normal(cout) * 0.01
        if bn:
            self.bn_channels += cout
        wn = self.init(self.name(prefix + "_w"), w)
        bname = self.init(self.name(prefix + "_b"), b)
        pad = (k - 1) // 2 * dilation
        return self.node("Conv", [x, wn, bname], prefix, kernel_shape=[k, k],
                         strides=[stride, stride], pads=[pad] * 4, group=groups,
                         dilations=[dilation, dilation])

    def linear(self, x, cin, cout, prefix="fc"):
        """PyTorch's nn.Linear: weight [out, in], y = x W^T + b (Gemm with transB)."""
        bound = 1.0 / np.sqrt(cin)
        w = self.rng.standard_normal((cout, cin)) * np.sqrt(2.0 / cin)
        b = self.rng.uniform(-bound, bound, cout)
        wn = self.init(self.name(prefix + "_w"), w)
        bname = self.init(self.name(prefix + "_b"), b)
        return self.node("Gemm", [x, wn, bname], prefix, transB=1)

    def relu(self, x):
        return self.node("Relu", [x])

    def act(self, x, kind):
        return self.node("HardSwish", [x]) if kind == "HS" else self.relu(x)

    def model(self, name, x_in, y_out):
        inp = helper.make_tensor_value_info(x_in, TensorProto.FLOAT, ["batch", 3, 224, 224])
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])
        self.nodes.append(helper.make_node("Identity", [y_out], ["logits"], name="logits"))
        graph = helper.make_graph(self.nodes, name, [inp], [out], initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tandem benches/onnx_models.py")
        m.ir_version = IR_VERSION
        return m


def resnet50(seed=0):
    g = Graph(seed)
    x = g.conv("input", 3, 64, 7, stride=2, prefix="stem")
    x = g.relu(x)
    x = g.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        cout = planes * 4
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = g.relu(g.conv(x, cin, planes, 1, prefix="conv1x1"))
            y = g.relu(g.conv(y, planes, planes, 3, stride=s, prefix="conv3x3"))  # v1.5
            y = g.conv(y, planes, cout, 1, bn_scale=0.2, prefix="conv1x1")
            if i == 0 and (s != 1 or cin != cout):
                shortcut = g.conv(x, cin, cout, 1, stride=s, prefix="downsample")
            else:
                shortcut = x
            x = g.relu(g.node("Add", [y, shortcut]))
            cin = cout
    x = g.node("GlobalAveragePool", [x], "avgpool")
    x = g.node("Flatten", [x], "flatten", axis=1)
    x = g.linear(x, 2048, 1000)
    return g, g.model("resnet50", "input", x)


def make_divisible(v, divisor=8, min_value=None):
    """torchvision's _make_divisible."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


# torchvision's mobilenet_v3_small table: input, kernel, expanded, out, use_se, activation,
# stride, dilation.
MOBILENET_V3_SMALL = [
    (16, 3, 16, 16, True, "RE", 2, 1),
    (16, 3, 72, 24, False, "RE", 2, 1),
    (24, 3, 88, 24, False, "RE", 1, 1),
    (24, 5, 96, 40, True, "HS", 2, 1),
    (40, 5, 240, 40, True, "HS", 1, 1),
    (40, 5, 240, 40, True, "HS", 1, 1),
    (40, 5, 120, 48, True, "HS", 1, 1),
    (48, 5, 144, 48, True, "HS", 1, 1),
    (48, 5, 288, 96, True, "HS", 2, 1),
    (96, 5, 576, 96, True, "HS", 1, 1),
    (96, 5, 576, 96, True, "HS", 1, 1),
]


def squeeze_excitation(g, x, channels):
    """torchvision's SqueezeExcitation: avgpool, fc1 (1x1 conv) + ReLU, fc2 + HardSigmoid, scale."""
    squeeze = make_divisible(channels // 4, 8)
    s = g.node("GlobalAveragePool", [x], "se_pool")
    s = g.relu(g.conv(s, channels, squeeze, 1, bn=False, prefix="se_fc1"))
    s = g.conv(s, squeeze, channels, 1, bn=False, prefix="se_fc2")
    s = g.node("HardSigmoid", [s], "se_gate", alpha=1.0 / 6.0, beta=0.5)
    return g.node("Mul", [x, s], "se_scale")


def mobilenet_v3_small(seed=0):
    g = Graph(seed)
    x = g.act(g.conv("input", 3, 16, 3, stride=2, prefix="stem"), "HS")
    for cin, k, exp, cout, use_se, act, stride, dil in MOBILENET_V3_SMALL:
        cin, exp, cout = make_divisible(cin), make_divisible(exp), make_divisible(cout)
        y = x
        if exp != cin:
            y = g.act(g.conv(y, cin, exp, 1, prefix="expand"), act)
        y = g.act(g.conv(y, exp, exp, k, stride=1 if dil > 1 else stride, groups=exp,
                         dilation=dil, prefix="depthwise"), act)
        if use_se:
            y = squeeze_excitation(g, y, exp)
        residual = stride == 1 and cin == cout
        y = g.conv(y, exp, cout, 1, bn_scale=0.2 if residual else 1.0, prefix="project")
        x = g.node("Add", [y, x]) if residual else y
    x = g.act(g.conv(x, 96, 576, 1, prefix="lastconv"), "HS")
    x = g.node("GlobalAveragePool", [x], "avgpool")
    x = g.node("Flatten", [x], "flatten", axis=1)
    x = g.act(g.linear(x, 576, 1024, prefix="classifier0"), "HS")
    x = g.linear(x, 1024, 1000, prefix="classifier3")
    return g, g.model("mobilenet_v3_small", "input", x)


BUILDERS = {"resnet50": resnet50, "mobilenet_v3_small": mobilenet_v3_small}
TORCHVISION_PARAMS = {"resnet50": 25_557_032, "mobilenet_v3_small": 2_542_856}


def config_pbtxt(name, max_batch_size):
    return (f'name: "{name}"\n'
            'platform: "onnxruntime_onnx"\n'
            f"max_batch_size: {max_batch_size}\n"
            'input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n'
            'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] } ]\n')


def write(repo, model, max_batch_size=8, suffix="", seed=0, check=True, quiet=False):
    """Writes REPO/<model><suffix>/{config.pbtxt,1/model.onnx}; returns the served name."""
    say = (lambda *a: None) if quiet else print
    g, m = BUILDERS[model](seed)
    name = model + suffix
    folder = os.path.join(repo, name)
    os.makedirs(os.path.join(folder, "1"), exist_ok=True)
    path = os.path.join(folder, "1", "model.onnx")
    onnx.save_model(m, path)
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write(config_pbtxt(name, max_batch_size))
    say(f"{name}: {path}, {g.params:,} parameters (BatchNorm folded); "
        f"with BatchNorm's scale as torchvision counts: {g.params + g.bn_channels:,} "
        f"(torchvision: {TORCHVISION_PARAMS[model]:,}); max_batch_size {max_batch_size}")
    if check:
        onnx.checker.check_model(path, full_check=True)
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal((2, 3, 224, 224), dtype=np.float32)
        (y,) = sess.run(["logits"], {"input": x})
        say(f"{name}: onnx.checker ok; onnxruntime forward of {list(x.shape)} -> "
            f"{y.dtype} {list(y.shape)}, finite {bool(np.isfinite(y).all())}, std {y.std():.3g}")
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("repo", help="the model repository folder to write into")
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--max-batch-size", type=int, default=8,
                    help="config.pbtxt's max_batch_size (1: batching off)")
    ap.add_argument("--suffix", default="", help="appended to each model's name, e.g. _nobatch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-check", action="store_true",
                    help="skip onnx.checker and the onnxruntime forward")
    args = ap.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in BUILDERS:
            sys.exit(f"unknown model {m!r}: one of {', '.join(MODELS)}")
    for m in models:
        write(args.repo, m, args.max_batch_size, args.suffix, args.seed, not args.no_check)


if __name__ == "__main__":
    main()
