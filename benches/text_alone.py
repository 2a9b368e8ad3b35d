#!/usr/bin/env python3
"""One text at a time: its latency through `/v1/embeddings` on an otherwise idle server, for
several tandem builds side by side.

Each build serves all-MiniLM-L6-v2 on the CPU on its own port; the script sends the same
text to each in turn (the order reversed every other pair, so a slow spell of a shared
machine falls on both), one request in flight, with a pause between requests long enough
for the server's compute threads to go idle. It reports each build's mean, median, p90 and
worst latency, how many requests took over 1.4x the fastest one, and the ratio of each build's
mean to the first's with a 90% bootstrap interval over the pairs.

    .venv/bin/python benches/text_alone.py --tandem OLD --tandem NEW [--tokens 249]
        [--pairs 100] [--gap 0.25]

The text is the corpus paragraph (benches/compare_text_peers.py's, written to
target/bench-text/corpus.json on its first run) with the most tokens up to --tokens.
"""

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))
from encoder_vs_pytorch import default_model  # noqa: E402

MODEL = "minilm"
FIRST_PORT = 18380


def start(binary, port, model, log_dir):
    log = open(log_dir / f"text-alone-{port}.log", "w")
    cmd = [binary, "serve", "--listen", f"127.0.0.1:{port}", "--device", "cpu",
           "--model", f"{MODEL}={model}", "--coloc-socket", str(log_dir / f"coloc-{port}.sock")]
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True,
                            env={**os.environ, "TANDEM_GRPC_LISTEN": ""})  # both would want 8001
    url = f"http://127.0.0.1:{port}/v2/models/{MODEL}/ready"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if urllib.request.urlopen(url, timeout=1).status == 200:
                return proc
        if proc.poll() is not None:
            sys.exit(f"{binary} exited (log: {log.name})")
        time.sleep(0.2)
    sys.exit(f"{binary} did not become ready (log: {log.name})")


def latency_ms(port, body):
    """The request's latency, or exits with the server's answer if it is not a 200."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", data=body,
                                     headers={"content-type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
    except urllib.error.HTTPError as e:
        sys.exit(f"port {port} answered {e.code}: {e.read().decode(errors='replace')}")
    return (time.perf_counter() - start) * 1e3


def mean_ratio_interval(top, bottom, level=0.9, resamples=4000, seed=7):
    """Percentile-bootstrap interval of mean(top) / mean(bottom), pairs drawn together."""
    rng = random.Random(seed)
    ratios = sorted(
        statistics.mean(top[i] for i in idx) / statistics.mean(bottom[i] for i in idx)
        for idx in ([rng.randrange(len(top)) for _ in top] for _ in range(resamples)))
    tail = int((1 - level) / 2 * resamples)
    return ratios[tail], ratios[-tail - 1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tandem", action="append", required=True, help="a build (repeat)")
    p.add_argument("--model", type=Path, default=default_model())
    p.add_argument("--tokens", type=int, default=256, help="the longest text up to this many")
    p.add_argument("--pairs", type=int, default=100)
    p.add_argument("--gap", type=float, default=0.25, help="seconds between requests")
    p.add_argument("--out", type=Path, default=ROOT / "target" / "bench-text")
    args = p.parse_args()
    corpus_path = args.out / "corpus.json"
    if not corpus_path.exists():
        subprocess.run([sys.executable, str(ROOT / "benches" / "compare_text_peers.py"),
                        "--corpus-only", "--model", str(args.model), "--out", str(args.out)],
                       check=True)
    corpus = json.loads(corpus_path.read_text())
    pick = max((i for i, n in enumerate(corpus["tokens"]) if n <= args.tokens),
               key=lambda i: corpus["tokens"][i])
    body = json.dumps({"model": MODEL, "input": corpus["texts"][pick]}).encode()
    ports = [FIRST_PORT + i for i in range(len(args.tandem))]
    procs = [start(str(Path(b).resolve()), port, args.model, args.out)
             for b, port in zip(args.tandem, ports)]
    try:
        for port in ports:  # warm-up, untimed
            for _ in range(5):
                latency_ms(port, body)
        times = {port: [] for port in ports}
        for k in range(args.pairs):
            for port in (ports if k % 2 == 0 else ports[::-1]):
                times[port].append(latency_ms(port, body))
                time.sleep(args.gap)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    print(f"one text of {corpus['tokens'][pick]} tokens, {args.pairs} requests per build, "
          f"{args.gap} s apart, builds alternated")
    fastest = min(min(v) for v in times.values())
    first = times[ports[0]]
    for binary, port in zip(args.tandem, ports):
        v = times[port]
        low, high = mean_ratio_interval(v, first)
        print(f"  {binary}: mean {statistics.mean(v):.1f} ms, median {statistics.median(v):.1f}, "
              f"p90 {statistics.quantiles(v, n=10)[8]:.1f}, max {max(v):.1f}; "
              f"over 1.4x the fastest: {sum(x > 1.4 * fastest for x in v)}; "
              f"mean / first's {statistics.mean(v) / statistics.mean(first):.2f}x "
              f"[{low:.2f}-{high:.2f}]")


if __name__ == "__main__":
    main()
