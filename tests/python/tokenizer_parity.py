"""Token ids from Python's `tokenizers` for the Rust tokenizer to be compared with.

tokenizer_parity.py
  stdin  {"tokenizer": "path/to/tokenizer.json", "max_len": 256,
          "cases": [{"a": "text", "b": "second text or null", "truncate": true}, ...]}
  stdout [{"ids": [...], "type_ids": [...]}, ...]

  Padding is off; with "truncate" true the pair is cut longest-first to max_len (as
  sentence-transformers asks), keeping the start; with "left", keeping the end; with false
  nothing is cut, so the full length shows.

tokenizer_parity.py train-roberta-bpe PATH
  stdin  {"corpus": ["text", ...], "vocab_size": 2000}
  Writes to PATH a byte-level BPE tokenizer trained on the corpus, set up as RoBERTa's
  tokenizer.json is: <s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4, no normaliser, GPT-2's
  byte-level pre-tokenizer without a prefix space, and RobertaProcessing.
"""

import json
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def train_roberta_bpe(path):
    request = json.load(sys.stdin)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=request["vocab_size"],
        special_tokens=ROBERTA_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(request["corpus"], trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.save(path)


def main():
    request = json.load(sys.stdin)
    whole = Tokenizer.from_file(request["tokenizer"])
    whole.no_padding()
    whole.no_truncation()
    truncating = {}
    for direction in ["right", "left"]:
        t = Tokenizer.from_file(request["tokenizer"])
        t.no_padding()
        t.enable_truncation(
            request["max_len"], strategy="longest_first", direction=direction
        )
        truncating[direction] = t
    out = []
    for case in request["cases"]:
        cut = case["truncate"]
        if cut is False:
            tokenizer = whole
        else:
            tokenizer = truncating["left" if cut == "left" else "right"]
        if case.get("b") is None:
            e = tokenizer.encode(case["a"])
        else:
            e = tokenizer.encode(case["a"], case["b"])
        out.append({"ids": e.ids, "type_ids": e.type_ids})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "train-roberta-bpe":
        train_roberta_bpe(sys.argv[2])
    elif len(sys.argv) == 1:
        main()
    else:
        sys.exit(__doc__)
