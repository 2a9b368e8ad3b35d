"""The sentence-transformers files around a random-weight model the bench folders share
(benches/make_modernbert.py, benches/make_gte.py): all-MiniLM-L6-v2's tokenizer and modules,
a pooling config and the sequence limit."""

import json
import shutil
from pathlib import Path


def write_around_model(out, minilm, hidden, max_seq_length, cls=False):
    """all-MiniLM-L6-v2's tokenizer files and modules.json into `out`, its pooling at width
    `hidden` (mean, or CLS with `cls`), and `max_seq_length` as the limit."""
    out, minilm = Path(out), Path(minilm)
    for name in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "vocab.txt", "modules.json"]:
        if (minilm / name).exists():
            shutil.copy(minilm / name, out / name)
    pooling = json.loads((minilm / "1_Pooling/config.json").read_text())
    pooling["word_embedding_dimension"] = hidden
    if cls:
        pooling["pooling_mode_cls_token"], pooling["pooling_mode_mean_tokens"] = True, False
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling/config.json").write_text(json.dumps(pooling))
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False})
    )
