#!/usr/bin/env python3
"""tandem's /v1/embeddings against Seldon MLServer 1.7.1 (adaptive batching on) serving the
same all-MiniLM-L6-v2 folder, on the same machine, one server at a time.

Goodput at p99 <= 50 ms: the most requests per second answered 200 within the budget in a
run where at least 99% of all requests sent were answered 200 within it. Unlike `tandem
bench sweep`, a refusal (429) counts as a miss here, not as load shed for free: tandem
sheds the requests it predicts will miss, which are the long texts, and a server that
answered only the short ones would otherwise pass.

The load is open-loop, from this process (asyncio over raw HTTP/1.1 keep-alive connections,
all opened before the clock starts): Poisson arrivals, one text per request drawn from the
corpus, latency counted from each request's scheduled send time, so a server that falls
behind is charged for the wait (no coordinated omission). tandem gets
`POST /v1/embeddings {"model": "minilm", "input": TEXT}`; MLServer its v2 infer with a BYTES
input `text` of shape [1] (benches/peers/mlserver-hf.sh, whose venv this script's Python
may be). Rates are found by doubling, then bisecting to --precision; a failing rate is run
once more before the search turns below it.

The corpus: every prose paragraph of the docstrings of the Python standard library this
interpreter has (modules, their public classes, functions and methods; paragraphs with code,
lists, signatures or non-ASCII dropped), deduplicated, kept at 5-256 tokens with [CLS] and
[SEP] by MiniLM's tokenizer. Their lengths are what docstrings have, mostly one or two
sentences with a tail of long paragraphs; a flatter spread over 5-256 (as many texts of
129-256 tokens as of 5-8) would put several percent of requests on texts that take about as
long as the budget to run alone on two cores, whatever the server, and no rate would pass.
It is written once to OUT/corpus.json and reused.

Rounds alternate the contenders (tandem, MLServer, tandem, MLServer, ...), each server
started for its turn and stopped after it. Before each round, with no server running,
tandem's encoder alone (models/tests/encoder_bench.rs: tokenize, pack, forward, normalise;
no HTTP) embeds the same corpus at batches of 8, 32 and 64 texts; its best texts/s is the
in-process limit. The report gives each server's goodput per round, medians, the ratio of
medians with a 90% bootstrap interval (rounds drawn in pairs), goodput over the in-process
limit, and then tandem at 80% of its median goodput for --at80-duration s: the share of
requests answered 200 within the budget. Before the rounds both servers embed the same 16
texts (6 to 249 tokens) and their cosines are checked. Writes OUT/result.json,
OUT/runs/*.json (every run, and tandem's own counts of refusals and batches) and
OUT/report.md (OUT: target/bench-text).

MLServer's worker runs torch with its default threads (one per core) unless --mls-threads
says otherwise; on two cores shared with the HTTP process and the load generator, one
thread may serve it better. --peer-pilot 0,1 sweeps only MLServer once per setting, so the
rounds can give the peer its best.

Run it with the peer's venv, which benches/peers/mlserver-hf.sh makes on its first start
(stop that server once it prints its URL):

    .venv-mlserver-hf/bin/python benches/compare_text_peers.py --peer-pilot 0,1 --duration 4
    .venv-mlserver-hf/bin/python benches/compare_text_peers.py [--rounds 4] [--duration 8]
        [--mls-threads N] [--tandem target/release/tandem] [--encoder-bench BIN] [--check-only]

Needs the model (scripts/fetch-models.sh), `tokenizers` in this Python (the peer's venv has
it), a release build of tandem, and cargo for the encoder benchmark unless --encoder-bench
names a built one (`cargo test --release -p models --test encoder_bench --no-run`).
"""

import argparse
import asyncio
import contextlib
import hashlib
import importlib
import inspect
import io
import json
import math
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))
from encoder_vs_pytorch import build_rust_bench, default_model, run_ours  # noqa: E402

TANDEM_PORT, MLSERVER_PORT = 18280, 18290
MODEL = "minilm"
MIN_TOKENS, MAX_TOKENS = 5, 256
# Length classes for the report, in tokens with [CLS] and [SEP].
CLASSES = [(5, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256)]

# ---------------------------------------------------------------------------------------
# Corpus


# Modules that act when imported (a browser, a window, a printed poem) or are not for this OS.
SKIP_MODULES = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo",
                "__main__", "pydoc_data", "lib2to3", "ensurepip", "venv", "msilib", "winreg",
                "winsound", "nt"}
NOT_PROSE_LINE = re.compile(r"^(\s|>>>|\.\.\.|[-*+|:=#]|\d+[.)]\s)")


def stdlib_docstrings():
    docs = []
    for name in sorted(sys.stdlib_module_names):
        if name in SKIP_MODULES or name.startswith("_"):
            continue
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - a module this build lacks, or one for another OS
            continue
        objects = [module]
        for key, value in sorted(vars(module).items()):
            if key.startswith("_") or getattr(value, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(value) or inspect.isfunction(value) or inspect.isbuiltin(value):
                objects.append(value)
            if inspect.isclass(value):
                objects += [v for k, v in sorted(vars(value).items()) if not k.startswith("_")
                            and (inspect.isfunction(v) or inspect.ismethoddescriptor(v))]
        docs += [d for d in map(inspect.getdoc, objects) if d]
    return docs


def prose_paragraphs(doc):
    """The paragraphs of a docstring that read as English prose, each on one line."""
    for para in re.split(r"\n\s*\n", doc):
        lines = para.split("\n")
        if any(NOT_PROSE_LINE.match(line) for line in lines):
            continue
        text = re.sub(r"\s+", " ", " ".join(line.strip() for line in lines)).strip()
        if not text or not text[0].isupper() or not text.endswith(".") or not text.isascii():
            continue
        if "::" in text or "->" in text or re.match(r"^[\w.]+\(", text):
            continue
        if sum(c.isalpha() or c == " " for c in text) < 0.85 * len(text):
            continue
        if len(text.split()) >= 3:
            yield text


def load_tokenizer(model_dir):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    # The file truncates at 128; the served models cut at max_seq_length (256). Count all.
    tok.no_truncation()
    tok.no_padding()
    return tok


def build_corpus(model_dir, path):
    tok = load_tokenizer(model_dir)
    seen, texts = set(), []
    for doc in stdlib_docstrings():
        for p in prose_paragraphs(doc):
            if p not in seen:
                seen.add(p)
                texts.append(p)
    tokens = [len(e.ids) for e in tok.encode_batch(texts)]
    kept = [(t, n) for t, n in zip(texts, tokens) if MIN_TOKENS <= n <= MAX_TOKENS]
    corpus = {"source": f"prose paragraphs of Python {platform.python_version()}'s "
                        "standard-library docstrings (inspect.getdoc)",
              "texts": [t for t, _ in kept], "tokens": [n for _, n in kept]}
    path.write_text(json.dumps(corpus))
    return corpus


def length_summary(tokens):
    q = statistics.quantiles(tokens, n=100, method="inclusive")
    return {"texts": len(tokens), "min": min(tokens), "max": max(tokens),
            "mean": round(statistics.mean(tokens), 1), "p10": q[9], "p50": q[49],
            "p90": q[89], "p99": q[98],
            "classes": {f"{lo}-{hi}": sum(lo <= n <= hi for n in tokens) for lo, hi in CLASSES},
            "token_share_over_128": round(sum(n for n in tokens if n > 128) / sum(tokens), 3)}


# ---------------------------------------------------------------------------------------
# Servers


class Contender:
    def __init__(self, name, port, path, body, min_rate):
        self.name, self.port, self.path, self.body, self.min_rate = name, port, path, body, min_rate
        self.proc = None
        self.idle_s = 0.0  # a short text's latency on the idle server, after warm-up

    def request(self, text):
        body = self.body(text)
        return (f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode() + body


def tandem_contender():
    return Contender("tandem", TANDEM_PORT, "/v1/embeddings",
                     lambda t: json.dumps({"model": MODEL, "input": t}).encode(), 8)


def mlserver_contender():
    return Contender("mlserver", MLSERVER_PORT, f"/v2/models/{MODEL}/infer",
                     lambda t: json.dumps({"inputs": [{"name": "text", "shape": [1],
                                                       "datatype": "BYTES", "data": [t]}]}
                                          ).encode(), 2)


def start(contender, args, log_dir):
    """Starts the contender's server alone and waits until the model is ready."""
    log = open(log_dir / f"{contender.name}.log", "a")
    if contender.name == "tandem":
        cmd = [args.tandem, "serve", "--listen", f"127.0.0.1:{contender.port}", "--device",
               "cpu", "--model", f"{MODEL}={args.model}", "--p99-ms", str(args.budget_ms),
               "--coloc-socket", str(log_dir / "coloc.sock")]
        cmd += ["--cpu-precision", args.cpu_precision]
        # No gRPC listener (8001 by default); builds from before gRPC ignore the variable.
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True,
                                env={**os.environ, "TANDEM_GRPC_LISTEN": ""})
    else:
        cmd = [str(ROOT / "benches" / "peers" / "mlserver-hf.sh"), str(args.model),
               str(contender.port), str(args.mls_batch), str(args.mls_time),
               str(args.mls_threads)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True)
    contender.proc = proc
    url = f"http://127.0.0.1:{contender.port}/v2/models/{MODEL}/ready"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if urllib.request.urlopen(url, timeout=1).status == 200:
                return
        if proc.poll() is not None:
            sys.exit(f"{contender.name} exited (log: {log.name})")
        time.sleep(0.2)
    stop(contender)
    sys.exit(f"{contender.name} did not become ready (log: {log.name})")


def stop(contender):
    """Stops the server and everything it started (the peer script's MLServer workers)."""
    proc = contender.proc
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # The peer script's children (MLServer's worker processes) leave with the group; wait
    # until nothing of it holds the port before the next server starts.
    for _ in range(150):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 0)
            time.sleep(0.2)
            continue
        break
    contender.proc = None


def embed(contender, text, refusals, v2=False):
    """One text's embedding from the running server, through its benchmarked endpoint."""
    if contender.name == "tandem" and not v2:
        body, path = json.dumps({"model": MODEL, "input": text}).encode(), contender.path
    else:
        body = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                       "data": [text]}]}).encode()
        path = f"/v2/models/{MODEL}/infer"
    req = urllib.request.Request(f"http://127.0.0.1:{contender.port}{path}", body,
                                 {"Content-Type": "application/json"})
    for attempt in range(10):
        try:
            answer = json.loads(urllib.request.urlopen(req, timeout=30).read())
            break
        except urllib.error.HTTPError as e:
            # tandem refuses (429) a text it predicts will take longer than the budget, even
            # alone on an idle server; the check asks again, and says how often it had to.
            if e.code != 429 or attempt == 9:
                raise
            refusals.append((contender.name, len(text), e.read().decode(errors="replace")[:200]))
            time.sleep(1)
    if "data" in answer:
        return answer["data"][0]["embedding"]
    out = next(o for o in answer["outputs"] if o["name"] == "embedding")
    return out["data"]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


# ---------------------------------------------------------------------------------------
# Load


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:] if line)}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            body += (await reader.readexactly(size + 2))[:size]
            if size == 0:
                break
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, body, headers.get("connection", "").lower() == "close"


def embedding_ok(contender, body):
    answer = json.loads(body)
    vec = (answer["data"][0]["embedding"] if "data" in answer
           else next(o for o in answer["outputs"] if o["name"] == "embedding")["data"])
    return len(vec) == 384 and abs(math.sqrt(sum(x * x for x in vec)) - 1) < 1e-3


async def load_run(contender, corpus, rate, duration, seed, connections, budget_s, drain_s):
    """One open-loop run: Poisson sends at `rate` for `duration` s. Returns per-request
    (latency from the scheduled send or None, status or failure name, tokens)."""
    rng = random.Random(seed)
    sched, t = [], rng.expovariate(rate)
    while t < duration:
        sched.append(t)
        t += rng.expovariate(rate)
    picks = [rng.randrange(len(corpus["texts"])) for _ in sched]
    payloads = [contender.request(corpus["texts"][i]) for i in picks]
    pool = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", contender.port))
    loop = asyncio.get_running_loop()
    results = [None] * len(sched)
    checked = [0]
    lags = []
    refusals = []  # the first few refusals' bodies, for the run's record

    async def one(i, due):
        conn = await pool.get()
        status = "error"
        try:
            if conn is not None and conn[0].at_eof():
                # The server closed it while it sat idle in the pool (tandem closes a
                # keep-alive connection after limits.header_read_timeout_ms without a
                # request): reconnect, as a client's pool does, on the request's clock.
                conn[1].close()
                conn = None
            if conn is None:
                conn = await asyncio.open_connection("127.0.0.1", contender.port)
            reader, writer = conn
            writer.write(payloads[i])
            status, body, close = await read_response(reader)
            if status == 200 and checked[0] < 3:  # a few answers per run, read in full
                checked[0] += 1
                if not embedding_ok(contender, body):
                    status = "bad_embedding"
            elif status != 200 and len(refusals) < 8:
                refusals.append(body[:300].decode(errors="replace"))
            if close:
                writer.close()
                conn = None
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            status = type(e).__name__
            if conn is not None:
                conn[1].close()
            conn = None
        finally:
            pool.put_nowait(conn)
        results[i] = (loop.time() - due, status)

    start = loop.time() + 0.05
    tasks = []
    for i, s in enumerate(sched):
        due = start + s
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(loop.time() - due)
        tasks.append(asyncio.ensure_future(one(i, due)))
    done, pending = await asyncio.wait(tasks, timeout=drain_s) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    while not pool.empty():
        conn = pool.get_nowait()
        if conn is not None:
            conn[1].close()
    out = []
    for i, r in enumerate(results):
        latency, status = r if r is not None else (None, "timeout")
        out.append((latency, status, corpus["tokens"][picks[i]]))
    return {**summarize(out, rate, duration, budget_s, lags), "refusals": refusals}


def quantile(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def summarize(requests, rate, duration, budget_s, lags):
    statuses = {}
    for _, s, _ in requests:
        statuses[str(s)] = statuses.get(str(s), 0) + 1
    ok = sorted(lat for lat, s, _ in requests if s == 200)
    # Every request sent, a non-200 as a miss: its latency is infinite for the p99.
    every = sorted(lat if s == 200 else math.inf for lat, s, _ in requests)
    good = sum(1 for lat, s, _ in requests if s == 200 and lat <= budget_s)
    ms = lambda v: None if v is None else (round(v * 1e3, 2) if v != math.inf else "inf")
    refused_tokens = [n for _, s, n in requests if s != 200]
    sent = len(requests)
    p99_all = quantile(every, 0.99)
    return {
        "offered_rps": rate, "sent": sent, "duration_s": duration, "statuses": statuses,
        "goodput_rps": good / duration, "within_budget_share": good / sent if sent else 0,
        "answered_tokens_per_s": sum(n for _, s, n in requests if s == 200) / duration,
        "p50_ms": ms(quantile(ok, 0.5)), "p90_ms": ms(quantile(ok, 0.9)),
        "p99_ms": ms(quantile(ok, 0.99)), "max_ms": ms(ok[-1] if ok else None),
        "p99_all_ms": ms(p99_all),
        "not_200_tokens": {"count": len(refused_tokens),
                           "median": statistics.median(refused_tokens) if refused_tokens else None},
        "send_lag_max_ms": ms(max(lags) if lags else 0.0),
        "passes": bool(sent and p99_all is not None and p99_all <= budget_s
                       and not any(k not in ("200", "429") for k in statuses)),
    }


def run_seconds(rate, args):
    """How long a run at `rate` lasts: --duration, or long enough to send --min-requests,
    at most --max-duration. A run passes with up to 1% of its requests late or refused, so
    at 64 req/s for 8 s (5 misses allowed) one burst of long texts decides it; with 2,000
    requests (20 allowed) the verdict is the rate's, not the burst's."""
    return min(max(args.duration, args.min_requests / rate), max(args.max_duration, args.duration))


def run_once(contender, corpus, rate, args, seed):
    seconds = run_seconds(rate, args)
    r = asyncio.run(load_run(contender, corpus, rate, seconds, seed, args.connections,
                             args.budget_ms / 1e3, args.drain))
    print(f"  {contender.name:<8} {rate:7.1f} req/s offered: goodput {r['goodput_rps']:6.1f}, "
          f"within {args.budget_ms:g} ms {100 * r['within_budget_share']:5.1f}%, p50 "
          f"{r['p50_ms']} ms, p99 {r['p99_ms']} ms (all: {r['p99_all_ms']}), "
          f"{r['statuses']}, send lag max {r['send_lag_max_ms']} ms => "
          f"{'PASSES' if r['passes'] else 'fails'}", flush=True)
    if any(k not in ("200", "429") for k in r["statuses"]):
        print(f"  !! {contender.name}: answers other than 200/429: {r['statuses']}", flush=True)
    time.sleep(args.cooldown)
    r["settle_s"] = settle(contender, corpus)
    return r


def probe(contender, corpus):
    """Seconds one short text takes alone, or None if it was not answered 200."""
    text = corpus["texts"][corpus["tokens"].index(min(corpus["tokens"]))]
    started = time.perf_counter()
    try:
        embed(contender, text, [])
    except (urllib.error.URLError, OSError):
        return None
    return time.perf_counter() - started


def settle(contender, corpus, limit_s=30):
    """Waits until the server answers a short text as fast as when idle: a server that goes
    on with requests whose clients left (MLServer does) would slow the next run. Returns the
    seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        t = probe(contender, corpus)
        if t is not None and t <= max(3 * contender.idle_s, 0.02):
            break
        time.sleep(0.2)
    return round(time.monotonic() - started, 2)


def turn(contender, corpus, args, seed):
    """Starts the contender alone, warms it up, sweeps it and stops it."""
    start(contender, args, args.out)
    try:
        asyncio.run(load_run(contender, corpus, contender.min_rate, args.warmup, 999,
                             args.connections, args.budget_ms / 1e3, args.drain))
        contender.idle_s = statistics.median(
            probe(contender, corpus) or math.inf for _ in range(7))
        goodput, runs = sweep(contender, corpus, args, seed)
        return goodput, runs, server_counters(contender)
    finally:
        stop(contender)


def probe_rates(corpus, args, rates):
    """tandem alone, warmed up, once at each rate: the run's summary, the first refusals'
    bodies and the server's own counters after each run."""
    contender = tandem_contender()
    start(contender, args, args.out)
    try:
        asyncio.run(load_run(contender, corpus, contender.min_rate, args.warmup, 999,
                             args.connections, args.budget_ms / 1e3, args.drain))
        contender.idle_s = statistics.median(
            probe(contender, corpus) or math.inf for _ in range(7))
        for i, rate in enumerate(rates):
            r = run_once(contender, corpus, rate, args, 5000 + i)
            for body in r["refusals"]:
                print(f"    refused: {body}", flush=True)
            counters = server_counters(contender)
            print("    server: " + ", ".join(f"{k} {v:g}" for k, v in sorted(counters.items())
                                             if "rejected" in k or "batches" in k), flush=True)
            gauges = server_counters(contender, ("tandem_slo_effective_budget_seconds",
                                                 "tandem_predicted_batch_spread_ratio",
                                                 "tandem_observed_p99_seconds"))
            print("    policy: " + ", ".join(f"{k.split('{')[0]} {v:.3g}"
                                             for k, v in sorted(gauges.items())), flush=True)
            print("    stages: " + stage_means(contender), flush=True)
    finally:
        stop(contender)


def stage_means(contender):
    """tandem's mean time per answered request in each stage so far (Triton's statistics):
    decoding and tokenizing, waiting, the model, and writing the response."""
    url = f"http://127.0.0.1:{contender.port}/v2/models/{MODEL}/stats"
    stats = json.loads(urllib.request.urlopen(url, timeout=5).read())["model_stats"][0]
    stages = stats["inference_stats"]
    return ", ".join(f"{name} {stages[key]['ns'] / max(stages[key]['count'], 1) / 1e6:.2f} ms"
                     for name, key in [("input", "compute_input"), ("queue", "queue"),
                                       ("model", "compute_infer"), ("output", "compute_output")])


def server_counters(contender, wanted=("tandem_requests_total", "tandem_requests_rejected_total",
                                       "tandem_batches_total")):
    """tandem's own count of answers, refusals by reason and batches by why they closed (or
    the series `wanted` names)."""
    if contender.name != "tandem":
        return {}
    text = urllib.request.urlopen(f"http://127.0.0.1:{contender.port}/metrics", timeout=5).read()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.decode().splitlines() if line.startswith(wanted)}


def sweep(contender, corpus, args, seed):
    """Doubling from the contender's minimum rate, then bisection; a failing rate runs once
    more before it counts as failed. Returns (goodput, runs)."""
    runs = []

    def judge(rate):
        for attempt in range(2):
            r = run_once(contender, corpus, rate, args, seed + len(runs))
            runs.append(r)
            if r["passes"]:
                return True
        return False

    lo, hi, rate = None, None, contender.min_rate
    while rate >= contender.min_rate / 8:
        if judge(rate):
            lo = rate
            break
        hi, rate = rate, rate / 2
    if lo is not None and hi is None:
        rate = lo * 2
        while rate <= args.max_rate:
            if not judge(rate):
                hi = rate
                break
            lo, rate = rate, rate * 2
    while lo is not None and hi is not None and (hi - lo) / lo > args.precision:
        mid = (lo + hi) / 2
        if judge(mid):
            lo = mid
        else:
            hi = mid
    goodput = max((r["goodput_rps"] for r in runs if r["passes"]), default=0.0)
    return goodput, runs


# ---------------------------------------------------------------------------------------
# In-process limit


def in_process(binary, args, corpus, seed):
    """tandem's encoder alone on the corpus's texts (a sample in request order), per batch
    size: the best texts/s is the most any server of this encoder could answer."""
    rng = random.Random(seed)
    texts = [corpus["texts"][rng.randrange(len(corpus["texts"]))] for _ in range(1024)]
    rows = {}
    for batch in (8, 32, 64):
        res = run_ours(binary, args.model, texts, batch, args.inproc_seconds, args.threads,
                       args.cpu_precision)
        rows[batch] = res
        print(f"  in-process, batch {batch:>2}: {res['texts_per_s']:6.1f} texts/s, "
              f"{res['tokens_per_s']:6.0f} tokens/s, forward {res['forward_gflops']:.1f} GFLOP/s",
              flush=True)
    best = max(rows, key=lambda b: rows[b]["texts_per_s"])
    return {"best_batch": best, "texts_per_s": rows[best]["texts_per_s"],
            "tokens_per_s": rows[best]["tokens_per_s"], "by_batch": rows}


# ---------------------------------------------------------------------------------------
# Report


def ratio_interval(top, bottom, level=0.9, resamples=4000, seed=7):
    """Percentile-bootstrap interval of median(top) / median(bottom), rounds drawn in pairs."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        idx = [rng.randrange(len(top)) for _ in top]
        b = statistics.median(bottom[i] for i in idx)
        ratios.append(statistics.median(top[i] for i in idx) / b if b else math.inf)
    ratios.sort()
    rank = lambda q: ratios[min(len(ratios), max(1, math.ceil(q * len(ratios)))) - 1]
    return rank((1 - level) / 2), rank(1 - (1 - level) / 2)


def machine():
    model = next((line.split(":", 1)[1].strip() for line in
                  subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                  if line.startswith("Model name")), "?")
    return {"nproc": os.cpu_count(), "cpu": model, "load_average_1m": os.getloadavg()[0],
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}


def fmt_ratio(a, b):
    return times(a / b) if b else "inf"


def times(x):
    return f"{x:.1f}x" if x is not None and math.isfinite(x) else "inf"


def write_report(out, result):
    g, inp, args, at = result["goodput"], result["in_process"], result["args"], result["at_80"]
    n, m0, m1 = len(g["tandem"]), result["machine_start"], result["machine_end"]
    med = {k: statistics.median(v) for k, v in g.items()}
    row = lambda label, cells: f"| {label} | " + " | ".join(cells) + " |"
    labels = {"tandem": "tandem `/v1/embeddings` (adaptive, p99 50 ms)",
              "mlserver": f"MLServer 1.7.1, sentence-transformers runtime (adaptive batching "
                          f"{args['mls_batch']} texts, {args['mls_time'] * 1e3:g} ms; torch "
                          f"threads {args['mls_threads'] or 'default'})"}
    lines = [f"# /v1/embeddings against MLServer: goodput at p99 <= {args['budget_ms']:g} ms", "",
             f"{m0['date_utc']} UTC, {m0['nproc']} CPUs ({m0['cpu']}), load average "
             f"{m0['load_average_1m']:.1f} at start, {m1['load_average_1m']:.1f} at the end. "
             f"Command: `{result['command']}`.", "",
             row("req/s", [f"round {i + 1}" for i in range(n)] + ["median"]),
             row("---", ["---:"] * (n + 1))]
    for name in ("tandem", "mlserver"):
        lines.append(row(labels[name], [f"{v:.1f}" for v in g[name]] + [f"{med[name]:.1f}"]))
    lines.append(row("ratio", [fmt_ratio(t, m) for t, m in zip(g["tandem"], g["mlserver"])]
                     + [fmt_ratio(med["tandem"], med["mlserver"])]))
    lines.append(row("tandem's encoder in-process, texts/s (best batch)",
                     [f"{r['texts_per_s']:.1f}" for r in inp["rounds"]]
                     + [f"{inp['median_texts_per_s']:.1f}"]))
    lo, hi = result["ratio_interval_90"]
    check = result["check"]
    lines += [
        "",
        f"- Ratio of medians tandem / MLServer: **{times(result['ratio'])}** (90% bootstrap "
        f"interval over {n} rounds: {times(lo)} to {times(hi)}).",
        f"- tandem's goodput over its in-process limit (medians): "
        f"**{result['in_process_ratio']:.2f}x** ({med['tandem']:.1f} against "
        f"{inp['median_texts_per_s']:.1f} texts/s).",
        f"- tandem at 80% of its median goodput ({at['offered_rps']:.1f} req/s, Poisson, "
        f"{at['duration_s']:g} s): **{100 * at['within_budget_share']:.2f}%** of {at['sent']} "
        f"requests answered 200 within {args['budget_ms']:g} ms; p50 {at['p50_ms']} ms, p99 "
        f"{at['p99_ms']} ms; answers {at['statuses']}.",
        "- Answers over every sweep run: " + "; ".join(
            f"{name} {json.dumps(result['statuses_total'][name])}" for name in g) + ".",
        f"- Embeddings agree: cosine of tandem's `/v1/embeddings` and MLServer's v2 answer on "
        f"{check['texts']} texts of {check['tokens_min']}-{check['tokens_max']} tokens: min "
        f"{check['cosine_min']:.6f}; tandem's v2 against its `/v1/embeddings`: min "
        f"{check['v2_cosine_min']:.6f}.",
        "",
        f"Corpus: {result['corpus']['source']}; tokens per text (MiniLM's tokenizer, with [CLS] "
        f"and [SEP]): {json.dumps(result['corpus']['lengths'])}.", ""]
    (out / "report.md").write_text("\n".join(lines))
    print("\n" + "\n".join(lines))


# ---------------------------------------------------------------------------------------


def check_embeddings(corpus, args, log_dir):
    """Both servers, in turn, embed the same texts; their cosines."""
    order = sorted(range(len(corpus["texts"])), key=lambda i: corpus["tokens"][i])
    picks = [order[round(k * (len(order) - 1) / 15)] for k in range(16)]
    texts = [corpus["texts"][i] for i in picks]
    got, refusals = {}, []
    for contender in (tandem_contender(), mlserver_contender()):
        start(contender, args, log_dir)
        try:
            got[contender.name] = [embed(contender, t, refusals) for t in texts]
            if contender.name == "tandem":
                got["tandem_v2"] = [embed(contender, t, refusals, v2=True) for t in texts]
        finally:
            stop(contender)
    cos = [cosine(a, b) for a, b in zip(got["tandem"], got["mlserver"])]
    cos_v2 = [cosine(a, b) for a, b in zip(got["tandem"], got["tandem_v2"])]
    tokens = [corpus["tokens"][i] for i in picks]
    print(f"embeddings: cosine tandem /v1/embeddings vs MLServer v2 over {len(texts)} texts "
          f"({min(tokens)}-{max(tokens)} tokens): min {min(cos):.6f}; tandem v2 vs /v1: "
          f"min {min(cos_v2):.6f}; answered 429 first {len(refusals)} time(s)", flush=True)
    for name, chars, error in refusals:
        print(f"  429 from {name} on a text of {chars} characters, alone: {error}", flush=True)
    return {"texts": len(texts), "tokens_min": min(tokens), "tokens_max": max(tokens),
            "cosine_min": min(cos), "cosine": cos, "v2_cosine_min": min(cos_v2),
            "refused_429_alone": [{"server": n, "chars": c, "error": e} for n, c, e in refusals]}


def self_only(corpus, args):
    """tandem's goodput against its own encoder alone, in turn, round by round."""
    binary = args.encoder_bench or build_rust_bench()
    ratios, goodputs = [], []
    for r in range(args.rounds):
        alone = in_process(binary, args, corpus, seed=r)["texts_per_s"]
        g, _, _ = turn(tandem_contender(), corpus, args, seed=1000 * (r + 1))
        goodputs.append(g)
        ratios.append(g / alone)
        print(f"round {r + 1}: goodput {g:.1f} req/s, encoder alone {alone:.1f} texts/s, "
              f"ratio {g / alone:.2f}", flush=True)
    print(f"goodput median {statistics.median(goodputs):.1f} req/s; ratio to the encoder alone "
          f"median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")


def at_80(corpus, args, goodput):
    """tandem alone at 80% of its goodput for --at80-duration s, after a warm-up."""
    tandem, rate = tandem_contender(), 0.8 * goodput
    start(tandem, args, args.out)
    try:
        asyncio.run(load_run(tandem, corpus, rate, args.warmup, 998, args.connections,
                             args.budget_ms / 1e3, args.drain))
        at80 = asyncio.run(load_run(tandem, corpus, rate, args.at80_duration, 4242,
                                    args.connections, args.budget_ms / 1e3, args.drain))
        at80["server"] = server_counters(tandem)
    finally:
        stop(tandem)
    print(f"tandem at 80% ({rate:.1f} req/s, {args.at80_duration:g} s): "
          f"{100 * at80['within_budget_share']:.2f}% within budget, {at80['statuses']}", flush=True)
    return at80


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=default_model())
    p.add_argument("--tandem", default=os.environ.get(
        "TANDEM_BIN", str(ROOT / "target" / "release" / "tandem")))
    p.add_argument("--encoder-bench", help="a built models/tests/encoder_bench binary")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--duration", type=float, default=8, help="seconds per load run, at least")
    p.add_argument("--min-requests", type=int, default=2000,
                   help="a load run lasts long enough to send this many requests ...")
    p.add_argument("--max-duration", type=float, default=30,
                   help="... but at most this many seconds")
    p.add_argument("--budget-ms", type=float, default=50)
    p.add_argument("--precision", type=float, default=0.05)
    p.add_argument("--max-rate", type=float, default=2000)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--cooldown", type=float, default=1)
    p.add_argument("--drain", type=float, default=5,
                   help="seconds to wait for answers after the last send")
    p.add_argument("--warmup", type=float, default=3, help="seconds of load before each sweep")
    p.add_argument("--mls-batch", type=int, default=32)
    p.add_argument("--mls-time", type=float, default=0.002)
    p.add_argument("--mls-threads", type=int, default=0,
                   help="torch threads in MLServer's worker (0: torch's default)")
    p.add_argument("--peer-pilot", default="",
                   help="only sweep MLServer once per torch thread count in this list (0,1)")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="threads of tandem's encoder in the in-process runs")
    p.add_argument("--inproc-seconds", type=float, default=3)
    p.add_argument("--at80-duration", type=float, default=20)
    p.add_argument("--out", type=Path, default=ROOT / "target" / "bench-text")
    p.add_argument("--check-only", action="store_true", help="check the embeddings and stop")
    p.add_argument("--corpus-only", action="store_true", help="write OUT/corpus.json and stop")
    p.add_argument("--probe", default="",
                   help="RATE[,RATE...]: run tandem alone once at each rate, print what it "
                        "answered and refused, and stop")
    p.add_argument("--self-only", action="store_true",
                   help="tandem against its own encoder alone, in turn, without the peer: "
                        "goodput, the in-process limit and their ratio per round")
    p.add_argument("--cpu-precision", choices=["f32", "bf16", "bf16x3"], default="f32",
                   help="tandem's and its encoder alone's (docs/api.md#precision-on-the-cpu)")
    p.add_argument("--bf16", dest="cpu_precision", action="store_const", const="bf16",
                   help="the same as --cpu-precision bf16")
    p.add_argument("--at80-only", action="store_true",
                   help="run the 80%% run again on OUT/result.json's median and rewrite the report")
    args = p.parse_args()
    args.tandem = str(Path(args.tandem).resolve())
    out, runs_dir = args.out, args.out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(ImportError):
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    corpus_path = out / "corpus.json"
    if args.corpus_only:
        build_corpus(args.model, corpus_path)
        return
    if not corpus_path.exists():
        # In a child: importing the whole standard library leaves this process alone.
        subprocess.run([sys.executable, __file__, "--corpus-only", "--model", str(args.model),
                        "--out", str(out)], check=True)
    corpus = json.loads(corpus_path.read_text())
    lengths = length_summary(corpus["tokens"])
    print(f"corpus: {corpus['source']}: {json.dumps(lengths)}", flush=True)
    machine_start = machine()
    print(f"machine: {machine_start}", flush=True)

    if args.peer_pilot:
        # The peer's torch threads, chosen on this machine before the rounds: give it its best.
        for threads in map(int, args.peer_pilot.split(",")):
            args.mls_threads = threads
            g, runs, _ = turn(mlserver_contender(), corpus, args, seed=77)
            (runs_dir / f"pilot-mlserver-threads-{threads}.json").write_text(
                json.dumps({"goodput_rps": g, "runs": runs}, indent=1))
            print(f"peer pilot: MLServer with torch threads {threads or 'default'}: goodput "
                  f"{g:.1f} req/s", flush=True)
        return
    if args.probe:
        probe_rates(corpus, args, [float(r) for r in args.probe.split(",")])
        return
    if args.self_only:
        self_only(corpus, args)
        return
    if args.at80_only:
        result = json.loads((out / "result.json").read_text())
        result["at_80_first"] = result.get("at_80_first", result["at_80"])
        result["at_80"] = at_80(corpus, args, result["median"]["tandem"])
        result["machine_end"] = machine()
        (out / "result.json").write_text(json.dumps(result, indent=1))
        write_report(out, result)
        return
    check = check_embeddings(corpus, args, out)
    if args.check_only:
        return
    binary = args.encoder_bench or build_rust_bench()

    goodput = {"tandem": [], "mlserver": []}
    all_runs = {"tandem": [], "mlserver": []}
    inproc = []
    for r in range(args.rounds):
        print(f"round {r + 1}: tandem's encoder alone", flush=True)
        inproc.append(in_process(binary, args, corpus, seed=r))
        for contender in (tandem_contender(), mlserver_contender()):
            print(f"round {r + 1}: {contender.name}", flush=True)
            g, runs, counters = turn(contender, corpus, args, seed=1000 * (r + 1))
            goodput[contender.name].append(g)
            all_runs[contender.name].append(runs)
            (runs_dir / f"sweep-{contender.name}-{r + 1}.json").write_text(
                json.dumps({"goodput_rps": g, "runs": runs, "server": counters}, indent=1))
            print(f"round {r + 1}: {contender.name} goodput at p99 <= {args.budget_ms:g} ms: "
                  f"{g:.1f} req/s", flush=True)

    at80 = at_80(corpus, args, statistics.median(goodput["tandem"]))

    totals = {}
    for name, rounds in all_runs.items():
        totals[name] = {}
        for runs in rounds:
            for r in runs:
                for k, v in r["statuses"].items():
                    totals[name][k] = totals[name].get(k, 0) + v
    med_t, med_m = statistics.median(goodput["tandem"]), statistics.median(goodput["mlserver"])
    med_inproc = statistics.median(r["texts_per_s"] for r in inproc)
    result = {
        "command": " ".join([os.path.relpath(sys.executable, ROOT)] + sys.argv),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine_start": machine_start, "machine_end": machine(),
        "tandem_binary_sha256": hashlib.sha256(Path(args.tandem).read_bytes()).hexdigest(),
        "corpus": {"source": corpus["source"], "lengths": lengths,
                   "sha256": hashlib.sha256(corpus_path.read_bytes()).hexdigest()},
        "check": check,
        "goodput": goodput, "median": {"tandem": med_t, "mlserver": med_m},
        "statuses_total": totals,
        "ratio": med_t / med_m if med_m else math.inf,
        "ratio_interval_90": list(ratio_interval(goodput["tandem"], goodput["mlserver"])),
        "in_process": {"rounds": inproc, "median_texts_per_s": med_inproc},
        "in_process_ratio": med_t / med_inproc,
        "at_80": at80,
    }
    write_report(out, result)
    finite = lambda v: v if not isinstance(v, float) or math.isfinite(v) else None
    result["ratio"] = finite(result["ratio"])
    result["ratio_interval_90"] = [finite(v) for v in result["ratio_interval_90"]]
    (out / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
