"""An MLServer runtime for tandem's safetensors MLP, in numpy: the peer in the benchmarks.

Loads `layers.{i}.weight` [out, in] and `layers.{i}.bias` [out] with the standard library,
keeps the transposed weights contiguous, and runs x @ Wᵀ + b with ReLU between layers —
the same model tandem serves. MLServer's adaptive batching (max_batch_size, max_batch_time
in model-settings.json) merges requests before `predict`.
"""

import json
import struct

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


def load_layers(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    tensors = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        tensors[name] = np.frombuffer(body[a:b], dtype=np.float32).reshape(info["shape"])
    layers, i = [], 0
    while f"layers.{i}.weight" in tensors:
        layers.append((np.ascontiguousarray(tensors[f"layers.{i}.weight"].T),
                       tensors[f"layers.{i}.bias"].copy()))
        i += 1
    return layers


class MlpRuntime(MLModel):
    async def load(self) -> bool:
        self.layers = load_layers(self.settings.parameters.uri)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0]).astype(np.float32, copy=False)
        for i, (wt, b) in enumerate(self.layers):
            x = x @ wt
            x += b
            if i + 1 < len(self.layers):
                np.maximum(x, 0, out=x)
        return InferenceResponse(model_name=self.name,
                                 outputs=[NumpyCodec.encode_output("output-0", x)])
