"""Token ids from Python's `tokenizers` for the Rust tokenizer to be compared with.

stdin  {"tokenizer": "path/to/tokenizer.json", "max_len": 256,
        "cases": [{"a": "text", "b": "second text or null", "truncate": true}, ...]}
stdout [{"ids": [...], "type_ids": [...]}, ...]

Padding is off; with "truncate" the pair is cut longest-first to max_len (as
sentence-transformers asks), without it nothing is cut, so the full length shows.
"""

import json
import sys

from tokenizers import Tokenizer


def main():
    request = json.load(sys.stdin)
    whole = Tokenizer.from_file(request["tokenizer"])
    whole.no_padding()
    whole.no_truncation()
    truncating = Tokenizer.from_file(request["tokenizer"])
    truncating.no_padding()
    truncating.enable_truncation(request["max_len"], strategy="longest_first")
    out = []
    for case in request["cases"]:
        tokenizer = truncating if case["truncate"] else whole
        if case.get("b") is None:
            e = tokenizer.encode(case["a"])
        else:
            e = tokenizer.encode(case["a"], case["b"])
        out.append({"ids": e.ids, "type_ids": e.type_ids})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
