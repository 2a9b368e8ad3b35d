"""A gte-base-en-v1.5-sized sentence-transformers folder with random weights, for
benches/encoder_vs_pytorch.py --model DIR --trust-remote-code: no GTE checkpoint ships on
PyPI, and speed does not depend on what the weights say.

GTE's own code (`modeling.py` and `configuration.py` of Alibaba-NLP/new-impl, which every GTE
checkpoint loads with trust_remote_code) writes the model at gte-base-en-v1.5's sizes and
config (12 layers, 768 wide, 12 heads, 3072 intermediate, rope_theta 500,000, NTK scaling by
2, no token types) and is copied beside it, so that sentence-transformers runs it as it runs
the published model; all-MiniLM-L6-v2's folder gives the tokenizer (BERT's WordPiece, as
gte-base-en-v1.5's), and the pooling is CLS, as gte-base-en-v1.5's. The sequence limit is 256,
as the benchmark truncates, unless --max-seq-length says otherwise.

GTE's code predates transformers 5: the copied modeling.py gets transformers 4's
get_extended_attention_mask appended, and rebuilds the buffers transformers 5 leaves
unset at load (positions and rotary tables) before its first pass; config.json keeps the
scaling under rope_scaling, where GTE's code reads it.

    BENCH_PYTHON benches/make_gte.py OUT_DIR GTE_CODE_DIR [MINILM_DIR] [--max-seq-length N]

BENCH_PYTHON needs torch and transformers (the benchmark environment of
encoder_vs_pytorch.py); MINILM_DIR defaults to scripts/fetch-models.sh's cache.
"""

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from st_folder import write_around_model

MASK_SHIM = '''

# Appended by tandem's benches/make_gte.py for transformers 5, which no longer provides
# get_extended_attention_mask, and which loads a model without computing the buffers its
# modules make in __init__ and do not save (positions, rotary tables): NewModel rebuilds
# them before its first pass.
if not hasattr(NewModel, "get_extended_attention_mask"):
    def _extended_attention_mask(self, attention_mask, input_shape):
        mask = attention_mask[:, None, None, :].to(self.dtype)
        return (1.0 - mask) * torch.finfo(self.dtype).min

    NewModel.get_extended_attention_mask = _extended_attention_mask

_first_forward = NewModel.forward


def _forward_with_buffers(self, *args, **kwargs):
    if not getattr(self, "_buffers_rebuilt", False):
        embeddings = self.embeddings
        positions = torch.arange(self.config.max_position_embeddings)
        embeddings.register_buffer("position_ids", positions, persistent=False)
        if self.config.position_embedding_type == "rope":
            embeddings._init_rope(self.config)
        self._buffers_rebuilt = True
    return _first_forward(self, *args, **kwargs)


NewModel.forward = _forward_with_buffers
'''

# gte-base-en-v1.5's scaling, as its config.json has it.
SCALING = {"type": "ntk", "factor": 2.0}

CONFIG = dict(
    vocab_size=30528, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=3072, hidden_act="gelu", max_position_embeddings=8192,
    type_vocab_size=0, layer_norm_eps=1e-12, layer_norm_type="layer_norm",
    position_embedding_type="rope", rope_theta=500000.0,
    pack_qkv=True, unpad_inputs=False,
    use_memory_efficient_attention=False, logn_attention_scale=False,
    logn_attention_clip1=False, hidden_dropout_prob=0.0, pad_token_id=0,
)


def load_code(code):
    """GTE's NewConfig and NewModel, imported from `code` (modeling.py with MASK_SHIM, as
    the folder gets it) as a package in a temporary folder."""
    package = Path(tempfile.mkdtemp()) / "gte_code"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(code / "configuration.py", package / "configuration.py")
    (package / "modeling.py").write_text((code / "modeling.py").read_text() + MASK_SHIM)
    sys.path.insert(0, str(package.parent))
    modeling = importlib.import_module("gte_code.modeling")
    return importlib.import_module("gte_code.configuration").NewConfig, modeling.NewModel


def main(out, code, minilm, max_seq_length):
    out, code, minilm = Path(out), Path(code), Path(minilm)
    new_config, new_model = load_code(code)
    torch.manual_seed(0)
    config = new_config(**CONFIG, rope_scaling=dict(SCALING))
    config.auto_map = {"AutoConfig": "configuration.NewConfig", "AutoModel": "modeling.NewModel"}
    config.architectures = ["NewModel"]
    new_model(config).eval().save_pretrained(out, safe_serialization=True)
    # Transformers 5 saves the scaling as rope_parameters, which GTE's code does not read:
    # written back as the published checkpoints have it.
    saved = json.loads((out / "config.json").read_text())
    saved.pop("rope_parameters", None)
    saved["rope_scaling"] = SCALING
    (out / "config.json").write_text(json.dumps(saved, indent=2))
    shutil.copy(code / "configuration.py", out / "configuration.py")
    (out / "modeling.py").write_text((code / "modeling.py").read_text() + MASK_SHIM)
    write_around_model(out, minilm, config.hidden_size, max_seq_length, cls=True)


if __name__ == "__main__":
    cache = Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache/tandem"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("code", help="a folder with GTE's modeling.py and configuration.py")
    parser.add_argument("minilm", nargs="?", default=cache / "models/all-minilm-l6-v2")
    parser.add_argument("--max-seq-length", type=int, default=256)
    args = parser.parse_args()
    if not 1 <= args.max_seq_length <= 8192:
        sys.exit("--max-seq-length: 1 to 8192")
    if importlib.util.find_spec("transformers") is None:
        sys.exit("needs transformers and torch")
    main(args.out, args.code, args.minilm, args.max_seq_length)
