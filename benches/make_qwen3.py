"""A Qwen3-Embedding-0.6B-shaped sentence-transformers folder with random weights, for
benches/encoder_vs_pytorch.py --model DIR --decoder: speed does not depend on what the
weights say. 28 layers, hidden 1024, 16 query heads of 128 over 8 key/value heads,
intermediate 3072, Qwen3-Embedding's vocabulary size (151,669 rows: its embedding table's
memory), last-token pooling, Normalize, a limit of 512 tokens; the tokenizer is the
fixtures' small byte-level BPE (tests/python/make_decoder_models.py), which appends the end
of text as Qwen3-Embedding's does.

    BENCH_PYTHON benches/make_qwen3.py OUT_DIR

BENCH_PYTHON needs torch, transformers and sentence-transformers (the benchmark
environment of encoder_vs_pytorch.py).
"""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests/python"))
from make_decoder_models import EOS, tokenizer  # noqa: E402
from sentence_transformers import SentenceTransformer, models  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3Model  # noqa: E402


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer(400), eos_token=EOS, pad_token=EOS, model_max_length=512
    )
    fast.padding_side = "left"
    config = Qwen3Config(
        vocab_size=151_669, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=32_768, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
    )
    torch.manual_seed(0)
    Qwen3Model(config).eval().save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    transformer = models.Transformer(out, max_seq_length=512)
    pooling = models.Pooling(config.hidden_size, pooling_mode="lasttoken")
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()]).save(out)
    os.remove(os.path.join(out, "README.md"))


if __name__ == "__main__":
    main()
