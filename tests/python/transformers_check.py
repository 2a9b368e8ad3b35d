"""The embeddings of a sentence-transformers folder as Hugging Face's own libraries compute
them: transformers' AutoModel for the transformer, then sentence-transformers' Pooling and
Dense modules as modules.json lists them (Normalize is left out: the caller compares
directions). It checks tandem's encoder and tests/python/bert_reference.py against the
libraries users run, on the synthetic folders the Rust tests write.

Not run in CI: it needs torch, transformers and sentence-transformers, which the tests'
environment does not install. `models/tests/encoder_families.rs`'s ignored test
`every_family_matches_transformers` runs it with $TANDEM_TRANSFORMERS_PYTHON.

Commands (JSON on stdin, JSON on stdout, as bert_reference.py's):

  embed DIR     stdin {"sequences": [{"ids": [...], "type_ids": [...]}, ...]}
                stdout {"embeddings": [[...], ...]}  (float64 of the float32 results)
  classify DIR  stdin as for embed, of a ...ForSequenceClassification folder
                stdout {"logits": [[...], ...]}  (AutoModelForSequenceClassification's)
  states DIR    stdin as for embed
                stdout {"states": [[[...], ...], ...]}  (AutoModel's last_hidden_state)
  sparse DIR    stdin as for embed, of a BertForMaskedLM folder with a SpladePooling module
                stdout {"weights": [[...], ...]}  (AutoModelForMaskedLM's logits through
                sentence-transformers' SpladePooling)
"""

import json
import sys
from pathlib import Path

import torch
from sentence_transformers.models import Dense, Pooling
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

# The model types whose forward takes token type ids.
TOKEN_TYPES = ("bert", "roberta", "xlm-roberta")


def modules_after_transformer(folder):
    listed = json.loads((folder / "modules.json").read_text())
    loaders = {"Pooling": Pooling.load, "Dense": Dense.load}
    out = []
    for module in listed:
        kind = module["type"].rsplit(".", 1)[-1]
        if kind in loaders:
            out.append(loaders[kind](str(folder / module["path"])))
    return out


def embed(folder):
    folder = Path(folder)
    request = json.load(sys.stdin)
    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    model_type = json.loads((folder / "config.json").read_text())["model_type"]
    modules = modules_after_transformer(folder)
    out = []
    with torch.no_grad():
        for seq in request["sequences"]:
            inputs = inputs_of(seq, model_type)
            states = model(**inputs).last_hidden_state
            features = {"token_embeddings": states, "attention_mask": inputs["attention_mask"]}
            for module in modules:
                features = module(features)
            out.append(features["sentence_embedding"][0].double().tolist())
    json.dump({"embeddings": out}, sys.stdout)


def inputs_of(seq, model_type):
    ids = torch.tensor([seq["ids"]])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if model_type in TOKEN_TYPES:
        inputs["token_type_ids"] = torch.tensor([seq["type_ids"]])
    return inputs


def classify(folder):
    folder = Path(folder)
    request = json.load(sys.stdin)
    model = AutoModelForSequenceClassification.from_pretrained(
        str(folder), attn_implementation="eager"
    ).eval()
    model_type = json.loads((folder / "config.json").read_text())["model_type"]
    with torch.no_grad():
        out = [
            model(**inputs_of(seq, model_type)).logits[0].double().tolist()
            for seq in request["sequences"]
        ]
    json.dump({"logits": out}, sys.stdout)


def states(folder):
    folder = Path(folder)
    request = json.load(sys.stdin)
    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    model_type = json.loads((folder / "config.json").read_text())["model_type"]
    with torch.no_grad():
        out = [
            model(**inputs_of(seq, model_type)).last_hidden_state[0].double().tolist()
            for seq in request["sequences"]
        ]
    json.dump({"states": out}, sys.stdout)


def sparse(folder):
    try:
        from sentence_transformers.sparse_encoder.modules import SpladePooling
    except ImportError:  # sentence-transformers 5
        from sentence_transformers.sparse_encoder.models import SpladePooling
    folder = Path(folder)
    request = json.load(sys.stdin)
    model = AutoModelForMaskedLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    listed = json.loads((folder / "modules.json").read_text())
    path = next(m["path"] for m in listed if m["type"].endswith("SpladePooling"))
    pooling = SpladePooling.load(str(folder / path))
    out = []
    with torch.no_grad():
        for seq in request["sequences"]:
            inputs = inputs_of(seq, "bert")
            features = {"token_embeddings": model(**inputs).logits,
                        "attention_mask": inputs["attention_mask"]}
            out.append(pooling(features)["sentence_embedding"][0].double().tolist())
    json.dump({"weights": out}, sys.stdout)


def main(argv):
    if len(argv) == 3 and argv[1] == "embed":
        embed(argv[2])
    elif len(argv) == 3 and argv[1] == "states":
        states(argv[2])
    elif len(argv) == 3 and argv[1] == "sparse":
        sparse(argv[2])
    elif len(argv) == 3 and argv[1] == "classify":
        classify(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
