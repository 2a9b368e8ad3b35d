"""tandem's CPU text encoder against sentence-transformers on PyTorch, side by side.

Both embed the same texts with all-MiniLM-L6-v2 on the same cores, end to end (tokenize,
run, mean-pool, L2-normalise), in batches of 1, 8 and 32 realistic sentences (8-30
tokens) and of 256-token passages. The contenders alternate, case by case, over several
rounds, so that a machine whose load drifts slows both alike; the table gives each one's
median tokens/s with the range over rounds, the median of the per-round ratios, and the
FLOP rate of tandem's forward pass alone, with its share of the cores' peak: the f32
multiply-add peak on the same threads, measured at the start of each round (clocks drop as
more cores run and drift with the host's load, so a peak measured another time would not
divide fairly).

`--model DIR` runs another sentence-transformers folder (pooled as it says), and with
`--trust-remote-code` one whose architecture is its own code: GTE's, from
benches/make_gte.py.

`--decoder` runs a decoder's cases instead (texts of 32, 128 and 512 tokens at batches of
1, 8 and 32) on `--model DIR`: benches/make_qwen3.py's Qwen3-Embedding-0.6B-shaped folder.

`--long 1024 2048` adds cases of texts that long, one per batch (the model's limit must
allow them: benches/make_modernbert.py --max-seq-length).

`--bf16` also runs both in bfloat16, each right after its f32 run of a case: tandem with
bf16 products (`cpu_precision = "bf16"`, a CPU with AVX-512 BF16), PyTorch under
`torch.autocast("cpu", dtype=torch.bfloat16)`. A second table gives each against the
other and against the f32 runs.

`--bf16x3` also runs tandem with bf16x3 products (`cpu_precision = "bf16x3"`, a CPU with
AMX: f32 products emulated by three bf16 ones, within f32's accuracy bar) right after its
f32 run of a case, and a third table gives it against PyTorch f32 (whose CPU matmuls have no
such mode: `torch.set_float32_matmul_precision("medium")` makes them bf16) and tandem f32.

Needs a Python with torch and sentence-transformers (a benchmark environment, not the
tests' .venv), the model (scripts/fetch-models.sh) and cargo:

    python3 -m venv /work/bench-venv
    /work/bench-venv/bin/pip install torch sentence-transformers
    /work/bench-venv/bin/python benches/encoder_vs_pytorch.py [--rounds 5] [--seconds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Sentences as people send them to an embedding endpoint: 8 to 30 tokens with [CLS] and
# [SEP] (checked at start-up).
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "How do I reset my password if I no longer have access to my email?",
    "What is the capital of Australia?",
    "The meeting has been moved to Thursday at three in the afternoon.",
    "Our quarterly revenue grew by twelve percent compared to last year.",
    "Please find attached the signed contract and the updated invoice.",
    "The new update drains my phone battery much faster than before.",
    "Can I return an item I bought online to a physical store?",
    "Heavy rain is expected across the northern region this weekend.",
    "The library will be closed for renovation until the end of March.",
    "Scientists discovered a new species of frog in the Amazon rainforest.",
    "She finished the marathon in just under four hours.",
    "Which laptop is better for programming, the thinner one or the heavier one?",
    "The train to Berlin was delayed by forty minutes because of a signal failure.",
    "Add two cups of flour and mix until the dough is smooth.",
    "The patient reported mild headaches and occasional dizziness.",
    "Is there a vegetarian option on the lunch menu today?",
    "Machine learning models need large amounts of labeled data.",
    "The museum offers free admission on the first Sunday of every month.",
    "I would like to cancel my subscription before the next billing cycle.",
    "The stock market fell sharply after the interest rate announcement.",
    "Our team is looking for a senior engineer with experience in distributed systems.",
    "Where can I find the user manual for this washing machine?",
    "The concert was sold out within minutes of tickets going on sale.",
    "After the storm knocked out power across the city, volunteers handed out water and "
    "blankets at the central station.",
    "The committee approved the budget for the new bridge, but construction will not start "
    "before the environmental review is complete.",
    "If your package has not arrived within ten business days, contact customer support "
    "with your order number.",
    "Researchers found that participants who slept at least seven hours performed better "
    "on memory tests the following day.",
    "The software update fixes a security vulnerability that allowed attackers to read "
    "private messages.",
    "Although the restaurant was fully booked, the manager found us a small table near the "
    "kitchen.",
    "Sales of electric vehicles doubled last year as battery prices continued to fall and "
    "charging networks expanded.",
    "Please make sure all applications are submitted through the online portal before "
    "midnight on Friday.",
]

PASSAGE = (
    "Retrieval-augmented generation systems split their documents into passages, embed "
    "each passage once, and at query time embed the question and look up the passages "
    "whose embeddings lie closest to it. The quality of the answers depends on how well "
    "the encoder captures meaning, and the cost of the system depends on how fast it can "
    "embed: a corpus of a few million passages must be embedded again whenever the model "
    "changes, and every query needs an embedding within the latency budget of the "
    "application. Long passages are truncated to the model's limit, so the encoder sees at "
    "most a fixed number of tokens, and attention over them costs the square of their "
    "length. Serving such a model on the CPU is attractive when the traffic is moderate: "
    "no accelerator sits idle, and the same machines that run the application can embed. "
    "Batching helps the throughput but hurts the latency, so the batch size must follow "
    "the load, and padding shorter sequences to the longest one of the batch wastes work "
    "that packing the sequences end to end avoids entirely. "
)


def passages(n):
    """n distinct passages of well over 256 tokens (truncated to 256 by both)."""
    words = PASSAGE.split()
    return [" ".join(words[i % 7 :] + words[: i % 7]) * 2 for i in range(n)]


def long_passages(n, tokens, tokenizer):
    """n distinct texts of at most `tokens` tokens with the special ones, as many as fit
    (the passage over and over), for --long: the model's limit must be at least that."""
    words = PASSAGE.split()
    texts = []
    for i in range(n):
        # Every word is at least one token, so `tokens` words are enough.
        pool = (words[i % 7 :] + words[: i % 7]) * (tokens // len(words) + 1)
        size = lambda k: len(tokenizer(" ".join(pool[:k]))["input_ids"])
        lo, hi = 1, tokens  # the largest k with size(k) <= tokens, by bisection
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if size(mid) <= tokens else (lo, mid - 1)
        texts.append(" ".join(pool[:lo]))
    return texts


# 160 texts: whole batches of 1, 8 and 32.
CORPUS = SENTENCES * 4
CASES = [
    ("sentences, batch 1", CORPUS, 1),
    ("sentences, batch 8", CORPUS, 8),
    ("sentences, batch 32", CORPUS, 32),
    ("256 tokens, batch 1", passages(8), 1),
    ("256 tokens, batch 8", passages(16), 8),
]

def decoder_cases(tokenizer):
    """Texts of 32, 128 and 512 tokens (the end of text included), two batches' worth of
    each at batches of 1, 8 and 32."""
    return [(f"{t} tokens, batch {b}", long_passages(2 * b, t, tokenizer), b)
            for t in (32, 128, 512) for b in (1, 8, 32)]


def default_model():
    cache = Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache/tandem"))
    return Path(os.environ.get("TANDEM_MINILM_DIR", cache / "models/all-minilm-l6-v2"))


def build_rust_bench():
    """Builds models/tests/encoder_bench.rs and returns the test binary's path."""
    out = subprocess.run(
        ["cargo", "test", "--release", "-p", "models", "--test", "encoder_bench",
         "--no-run", "--message-format=json"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and \
                msg["target"]["name"] == "encoder_bench":
            return msg["executable"]
    sys.exit("cargo built no encoder_bench binary")


def run_ours(binary, model, texts, batch, seconds, threads, precision="f32"):
    spec = {"model": str(model), "texts": texts, "batch": batch, "seconds": seconds,
            "threads": threads, "precision": precision}
    return run_bench(binary, "throughput", spec)


def run_peak(binary, threads, seconds):
    """The cores' f32 multiply-add peak on `threads` threads, GFLOP/s."""
    return run_bench(binary, "peak", {"threads": threads, "seconds": seconds})


def run_bench(binary, test, spec):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        out = subprocess.run(
            [binary, test, "--exact", "--ignored", "--nocapture"],
            env={**os.environ, "TANDEM_BENCH_SPEC": f.name},
            check=True, capture_output=True, text=True,
        ).stdout
    finally:
        os.unlink(f.name)
    line = next(l for l in out.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def run_torch(model, tokenizer, texts, batch, seconds, limit, bf16=False):
    import contextlib

    import torch

    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with autocast:
        return run_torch_batches(model, tokenizer, texts, batch, seconds, limit)


def run_torch_batches(model, tokenizer, texts, batch, seconds, limit):
    batches = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    tokens = [sum(len(tokenizer(t, truncation=True, max_length=limit)["input_ids"]) for t in b)
              for b in batches]
    for b in batches[:2]:  # warm-up (the model stays loaded between rounds)
        model.encode(b, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)
    done_tokens = done_texts = i = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        b = batches[i % len(batches)]
        model.encode(b, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)
        done_tokens += tokens[i % len(batches)]
        done_texts += len(b)
        i += 1
    elapsed = time.perf_counter() - start
    return {"tokens_per_s": done_tokens / elapsed, "texts_per_s": done_texts / elapsed,
            "tokens_per_batch": sum(tokens) / len(tokens)}


def spread(values):
    return f"{statistics.median(values):8.0f} [{min(values):.0f}-{max(values):.0f}]"


def percent(shares):
    """Shares of peak as a median percentage and its range over rounds."""
    return (f"{100 * statistics.median(shares):3.0f}% "
            f"[{100 * min(shares):.0f}-{100 * max(shares):.0f}]")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=default_model())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="", help="run only the cases whose name has this")
    parser.add_argument("--long", type=int, nargs="*", default=[], metavar="TOKENS",
                        help="add a case of texts this long, batch 1 (within the model's limit)")
    parser.add_argument("--bf16", action="store_true",
                        help="both in bfloat16, beside both in f32 (see above)")
    parser.add_argument("--bf16x3", action="store_true",
                        help="tandem with bf16x3 products too, against both in f32 (see above)")
    parser.add_argument("--decoder", action="store_true",
                        help="a decoder's cases instead of the sentences and passages: texts "
                             "of 32, 128 and 512 tokens at batches of 1, 8 and 32 "
                             "(benches/make_qwen3.py's model)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let sentence-transformers run the model folder's own code "
                             "(GTE's, from benches/make_gte.py)")
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(str(args.model), device="cpu",
                                trust_remote_code=args.trust_remote_code)
    tokenizer = model.tokenizer
    for tokens in args.long:
        if tokens > model.max_seq_length:
            sys.exit(f"--long {tokens}: the model's limit is {model.max_seq_length} tokens")
    long_cases = [(f"long, {t} tokens, batch 1", long_passages(4, t, tokenizer), 1) for t in args.long]
    base = decoder_cases(tokenizer) if args.decoder else CASES
    cases = [c for c in base + long_cases if args.only in c[0]]
    lengths = [len(tokenizer(s)["input_ids"]) for s in SENTENCES]
    assert args.decoder or (min(lengths) >= 8 and max(lengths) <= 30), lengths
    binary = build_rust_bench()
    limit = model.max_seq_length
    print(f"machine: {os.uname().nodename}, {os.cpu_count()} CPUs, torch {torch.__version__}"
          f" ({args.threads} threads), load average {os.getloadavg()[0]:.1f} at start")
    print(f"sentences: {min(lengths)}-{max(lengths)} tokens, mean "
          f"{statistics.mean(lengths):.1f}; {args.rounds} rounds of {args.seconds} s each")

    results = {name: {"ours": [], "torch": [], "ratio": [], "gflops": [], "core": [],
                      "share": [], "core_share": []}
               for name, _, _ in cases}
    for r in range(args.rounds):
        peak = run_peak(binary, args.threads, 1.0)
        print(f"round {r + 1} f32 FMA peak on {args.threads} threads: {peak['gflops']:.1f} "
              f"GFLOP/s, {peak['gflops_per_cpu_second']:.1f} per CPU-second", flush=True)
        for name, texts, batch in cases:
            ours = run_ours(binary, args.model, texts, batch, args.seconds, args.threads)
            theirs = run_torch(model, tokenizer, texts, batch, args.seconds, limit)
            res = results[name]
            res["ours"].append(ours["tokens_per_s"])
            res["torch"].append(theirs["tokens_per_s"])
            res["ratio"].append(ours["tokens_per_s"] / theirs["tokens_per_s"])
            res["gflops"].append(ours["forward_gflops"])
            res["core"].append(ours["forward_gflops_per_cpu_second"])
            res["share"].append(ours["forward_gflops"] / peak["gflops"])
            res["core_share"].append(
                ours["forward_gflops_per_cpu_second"] / peak["gflops_per_cpu_second"])
            print(f"round {r + 1} {name:>20}: ours {ours['tokens_per_s']:7.0f} tokens/s "
                  f"(forward {ours['forward_gflops']:5.1f} GFLOP/s, "
                  f"{ours['forward_gflops_per_cpu_second']:4.1f} per CPU-second), torch "
                  f"{theirs['tokens_per_s']:7.0f} tokens/s", flush=True)
            if args.bf16:
                run_bf16(res, binary, model, tokenizer, (texts, batch, limit), args)
            if args.bf16x3:
                run_bf16x3(res, binary, (texts, batch), args)

    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'case':>20} | {'tandem tokens/s':>22} | {'PyTorch tokens/s':>22} | ratio  "
          f"| forward GFLOP/s [% of the round's peak] | per CPU-second [% of a core's]")
    for name, _, _ in cases:
        res = results[name]
        g = statistics.median(res["gflops"])
        c = statistics.median(res["core"])
        print(f"{name:>20} | {spread(res['ours']):>22} | {spread(res['torch']):>22} | "
              f"{statistics.median(res['ratio']):4.2f}x | {g:5.1f} {percent(res['share'])}"
              f"      | {c:5.1f} {percent(res['core_share'])}")
    if args.bf16:
        print_bf16(cases, results)
    if args.bf16x3:
        print_bf16x3(cases, results)


def run_bf16(res, binary, model, tokenizer, case, args):
    """Both contenders in bfloat16, right after their f32 runs of the same case."""
    texts, batch, limit = case
    ours = run_ours(binary, args.model, texts, batch, args.seconds, args.threads, "bf16")
    theirs = run_torch(model, tokenizer, texts, batch, args.seconds, limit, bf16=True)
    f32_ours, f32_torch = res["ours"][-1], res["torch"][-1]
    for key, value in [
        ("ours_bf16", ours["tokens_per_s"]),
        ("torch_bf16", theirs["tokens_per_s"]),
        ("bf16_ratio", ours["tokens_per_s"] / theirs["tokens_per_s"]),
        ("ours_bf16_vs_f32", ours["tokens_per_s"] / f32_ours),
        ("ours_bf16_vs_torch_f32", ours["tokens_per_s"] / f32_torch),
        ("torch_bf16_vs_f32", theirs["tokens_per_s"] / f32_torch),
    ]:
        res.setdefault(key, []).append(value)
    print(f"{'':>29}bf16: ours {ours['tokens_per_s']:7.0f} tokens/s "
          f"(forward {ours['forward_gflops']:5.1f} GFLOP/s), torch "
          f"{theirs['tokens_per_s']:7.0f} tokens/s", flush=True)


def run_bf16x3(res, binary, case, args):
    """tandem with bf16x3 products, right after both contenders' f32 runs of the case."""
    texts, batch = case
    ours = run_ours(binary, args.model, texts, batch, args.seconds, args.threads, "bf16x3")
    res.setdefault("ours_bf16x3", []).append(ours["tokens_per_s"])
    res.setdefault("bf16x3_vs_torch_f32", []).append(ours["tokens_per_s"] / res["torch"][-1])
    res.setdefault("bf16x3_vs_f32", []).append(ours["tokens_per_s"] / res["ours"][-1])
    print(f"{'':>27}bf16x3: ours {ours['tokens_per_s']:7.0f} tokens/s "
          f"(forward {ours['forward_gflops']:5.1f} GFLOP/s)", flush=True)


def print_bf16x3(cases, results):
    print(f"\n{'case':>20} | {'tandem bf16x3 tokens/s':>22} | {'tandem bf16x3 / PyTorch f32':>27} "
          f"| {'tandem bf16x3 / f32':>21}")
    for name, _, _ in cases:
        res = results[name]
        print(f"{name:>20} | {spread(res['ours_bf16x3']):>22} | "
              f"{ratio(res['bf16x3_vs_torch_f32']):>27} | {ratio(res['bf16x3_vs_f32']):>21}")


def ratio(values):
    """Ratios over rounds as their median and range."""
    return f"{statistics.median(values):4.2f}x [{min(values):.2f}-{max(values):.2f}]"


def print_bf16(cases, results):
    print(f"\n{'case':>20} | {'tandem bf16 tokens/s':>22} | {'PyTorch bf16 tokens/s':>22} | "
          f"{'tandem / PyTorch, bf16':>22} | {'tandem bf16 / PyTorch f32':>25} | "
          f"{'tandem bf16 / f32':>19} | {'PyTorch bf16 / f32':>19}")
    for name, _, _ in cases:
        res = results[name]
        print(f"{name:>20} | {spread(res['ours_bf16']):>22} | {spread(res['torch_bf16']):>22} | "
              f"{ratio(res['bf16_ratio']):>22} | {ratio(res['ours_bf16_vs_torch_f32']):>25} | "
              f"{ratio(res['ours_bf16_vs_f32']):>19} | {ratio(res['torch_bf16_vs_f32']):>19}")


if __name__ == "__main__":
    main()
