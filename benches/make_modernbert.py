"""A ModernBERT-base-sized sentence-transformers folder with random weights, for
benches/encoder_vs_pytorch.py --model: no ModernBERT checkpoint ships on PyPI, and speed does
not depend on what the weights say.

transformers writes the model (ModernBertModel at ModernBERT-base's sizes: 22 layers, 768
wide, 12 heads, 1152 intermediate, a 128-token window, its config in transformers' own
current form) and all-MiniLM-L6-v2's folder gives the tokenizer (its WordPiece vocabulary of
30,522, so texts tokenize as real text does), mean pooling and normalisation; the sequence
limit is 256, as the benchmark truncates, unless --max-seq-length says otherwise (ModernBERT
itself takes up to 8,192).

    BENCH_PYTHON benches/make_modernbert.py OUT_DIR [MINILM_DIR] [--max-seq-length N]

BENCH_PYTHON needs torch and transformers (the benchmark environment of
encoder_vs_pytorch.py); MINILM_DIR defaults to scripts/fetch-models.sh's cache.
"""

import argparse
import os
import sys
from pathlib import Path

import torch
from st_folder import write_around_model
from transformers import ModernBertConfig, ModernBertModel


def main(out, minilm, max_seq_length):
    out, minilm = Path(out), Path(minilm)
    torch.manual_seed(0)
    config = ModernBertConfig(
        vocab_size=30522, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
        num_attention_heads=12, pad_token_id=0, bos_token_id=101, cls_token_id=101,
        eos_token_id=102, sep_token_id=102,
    )
    ModernBertModel(config).eval().save_pretrained(out, safe_serialization=True)
    write_around_model(out, minilm, config.hidden_size, max_seq_length)


if __name__ == "__main__":
    cache = Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache/tandem"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("minilm", nargs="?", default=cache / "models/all-minilm-l6-v2")
    parser.add_argument("--max-seq-length", type=int, default=256)
    args = parser.parse_args()
    if not 1 <= args.max_seq_length <= 8192:
        sys.exit("--max-seq-length: 1 to 8192")
    main(args.out, args.minilm, args.max_seq_length)
