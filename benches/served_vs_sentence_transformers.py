"""A running tandem's /v1/embeddings against sentence-transformers on the same folder: the
direction of every embedding, as 1 - cosine, over texts of 1 to about 2,000 tokens (the
long ones truncated alike by both, at the folder's limit).

    BENCH_PYTHON benches/served_vs_sentence_transformers.py URL MODEL_NAME FOLDER [--trust-remote-code]

URL is the server (http://127.0.0.1:8000, say) serving FOLDER as MODEL_NAME; BENCH_PYTHON
needs torch and sentence-transformers (the benchmark environment of encoder_vs_pytorch.py).
--trust-remote-code lets sentence-transformers run the folder's own code (GTE's).
"""

import json
import sys
import urllib.request

import numpy as np

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The quick brown fox jumps over the lazy dog. " * 30,
    "x",
    "Café crème brûlée — résumé 🙂",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong walked on its surface. " * 4,
    "Packed batches waste no work on padding, and attention runs per sequence. " * 140,
]


def main(url, name, folder, trust_remote_code=False):
    from sentence_transformers import SentenceTransformer

    body = json.dumps({"model": name, "input": TEXTS}).encode()
    request = urllib.request.Request(
        f"{url}/v1/embeddings", data=body, headers={"Content-Type": "application/json"}
    )
    served = [d["embedding"] for d in json.load(urllib.request.urlopen(request))["data"]]
    model = SentenceTransformer(folder, device="cpu", trust_remote_code=trust_remote_code)
    want = model.encode(TEXTS)
    for text, got, ref in zip(TEXTS, np.array(served, np.float64), want.astype(np.float64)):
        tokens = len(model.tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"])
        cosine = got @ ref / np.linalg.norm(got) / np.linalg.norm(ref)
        print(f"{tokens:4d} tokens  1 - cosine {1 - cosine:+.1e}")


if __name__ == "__main__":
    trust = "--trust-remote-code" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--trust-remote-code"]
    if len(args) != 3:
        sys.exit(__doc__)
    main(*args, trust_remote_code=trust)
