"""One request of many texts against the same texts in requests of one batch each.

A text request past one batch (`max_batch_size` texts, `max_batch_tokens` token-units) is
run as several batches; this measures what that costs against the client cutting the
texts itself and sending them one request after another, alternating the two, on a
running server:

    tandem serve --device cpu --model minilm=$(scripts/fetch-models.sh) &
    python3 benches/split_requests.py --url http://127.0.0.1:8000 --model minilm
"""
import argparse
import json
import statistics
import time
import urllib.request

WORDS = ("retrieval augmented generation needs fast embeddings of many short passages "
         "from a corpus").split()


def post(url, model, texts):
    body = json.dumps({"model": model, "input": texts}).encode()
    req = urllib.request.Request(url + "/v1/embeddings", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        out = json.load(r)
    assert len(out["data"]) == len(texts)


def timed(work):
    t = time.perf_counter()
    work()
    return time.perf_counter() - t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="minilm")
    p.add_argument("--texts", type=int, default=1000)
    p.add_argument("--chunk", type=int, default=64, help="texts per request when cut")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    texts = [" ".join(WORDS[i % 7:i % 7 + 6 + i % 5]) for i in range(a.texts)]
    one = lambda: post(a.url, a.model, texts)
    cut = lambda: [post(a.url, a.model, texts[i:i + a.chunk])
                   for i in range(0, len(texts), a.chunk)]
    one(), cut()  # warm-up
    whole, parts = [], []
    for _ in range(a.rounds):
        whole.append(timed(one))
        parts.append(timed(cut))
    print(f"one request of {a.texts}: median {statistics.median(whole):.3f} s")
    print(f"requests of {a.chunk}:    median {statistics.median(parts):.3f} s")
    ratios = [round(p / w, 3) for w, p in zip(whole, parts)]
    print(f"cut / one, per round: {ratios}")


if __name__ == "__main__":
    main()
