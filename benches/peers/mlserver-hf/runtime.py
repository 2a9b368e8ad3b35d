"""An MLServer runtime for sentence embeddings with sentence-transformers: the peer in
benches/compare_text_peers.py.

Loads the sentence-transformers folder named by `parameters.uri` on the CPU and answers a
BYTES input `text` of shape [n] with an FP32 output `embedding` of shape [n, dim]: each text
tokenized (cut at the folder's max_seq_length), run, mean-pooled over its tokens and
L2-normalised, which is what tandem's /v1/embeddings answers. MLServer's adaptive batching
(max_batch_size, max_batch_time in model-settings.json) merges requests before `predict`;
`encode` then pads the batch to its longest text, as sentence-transformers does.
`parameters.extra.torch_threads`, when set and not 0, sets torch's intra-op threads.
"""

import numpy as np
import torch
from mlserver import MLModel
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.types import InferenceRequest, InferenceResponse
from sentence_transformers import SentenceTransformer


class SentenceEmbeddingRuntime(MLModel):
    async def load(self) -> bool:
        threads = (self.settings.parameters.extra or {}).get("torch_threads", 0)
        if threads:
            torch.set_num_threads(threads)
        self.model = SentenceTransformer(self.settings.parameters.uri, device="cpu")
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        texts = StringCodec.decode_input(payload.inputs[0])
        embeddings = self.model.encode(texts, batch_size=max(1, len(texts)),
                                       normalize_embeddings=True, convert_to_numpy=True,
                                       show_progress_bar=False)
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output("embedding", embeddings.astype(np.float32))])
