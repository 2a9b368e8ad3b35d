#!/usr/bin/env python3
"""Admission against a p99 budget: what is refused, and why, from a tenth of capacity to past it.

The model is the 784→1024→1024→10 f32 MLP (scripts/make_mlp.py, seed 1) served with
`tandem serve --device cpu --p99-ms B`, one server per budget and neighbour, driven open loop
by `tandem-bench load` (Poisson arrivals, single-row JSON requests, keep-alive connections
for twice a budget's worth of requests in flight (128 to 1,024), latency from each request's
scheduled send time) in steps of --step-s seconds at
fractions of the server's capacity. Capacity is measured first, alone, as the 200s per second
of a saturating run with a loose budget. Refusals are read from the server's own counters
(`tandem_requests_rejected_total` by reason, `tandem_requests_admitted_late_total`) before and
after each step.

Neighbours (--neighbours):
  none   the server and the load generator alone on the cores;
  busy   a process spinning on one core (taskset -c 1), as a noisy neighbour;
  train  `tandem train --device cpu --threads 1` beside the gateway, on its co-location socket.

Per budget and neighbour it reports each step, and two figures:
  - refused while p99 <= 0.7 x budget: refusals over requests sent, in the steps below
    capacity whose p99 of answered requests was within 0.7 of the budget (the target is at
    most 0.01%); past capacity a p99 held that low is the refusals' doing;
  - the highest rate with no refusal and the p99 within the budget.

--baseline BIN runs every configuration a second time with another tandem binary (e.g. an
earlier commit's), alternating which goes first per configuration.

    cargo build --release -p tandem -p tandem-bench
    .venv/bin/python benches/admission.py [--budgets 10,50] [--neighbours none,busy,train]
        [--steps 0.1,0.3,0.5,0.7,0.9,1.1,1.3] [--step-s 8] [--baseline BIN] [--json OUT]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TANDEM = ROOT / "target/release/tandem"
# Servers start without a gRPC listener (8001 by default); a --baseline build from before
# gRPC ignores the variable.
NO_GRPC = {**os.environ, "TANDEM_GRPC_LISTEN": ""}
TANDEM_BENCH = ROOT / "target/release/tandem-bench"


def metrics(url):
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'tandem_requests_rejected_total\{model="mlp",reason="(\w+)"\} (\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
        m = re.match(r'tandem_requests_admitted_late_total\{model="mlp"\} (\S+)', line)
        if m:
            out["admitted_late"] = float(m.group(1))
    return out


class Server:
    def __init__(self, binary, repo, budget, work):
        self.work = Path(tempfile.mkdtemp(dir=work))
        self.socket = self.work / "coloc.sock"
        config = self.work / "tandem.toml"
        config.write_text(f'[coloc]\nsocket = "{self.socket}"\n')
        self.log = open(self.work / "server.log", "w+")
        self.proc = subprocess.Popen(
            [binary, "serve", "--config", str(config), "--listen", "127.0.0.1:0",
             "--device", "cpu", "--model-repository", str(repo), "--p99-ms", str(budget)],
            stderr=self.log, stdout=subprocess.DEVNULL, env=NO_GRPC)
        self.url = None
        for _ in range(300):
            self.log.seek(0)
            m = re.search(r"listening addr=([0-9.:]+)", self.log.read())
            if m:
                self.url = f"http://{m.group(1)}"
                try:
                    urllib.request.urlopen(f"{self.url}/v2/health/ready", timeout=2)
                    return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"server did not start; see {self.work}/server.log")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def start_neighbour(kind, server):
    if kind == "none":
        return None
    if kind == "busy":
        return subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"])
    if kind == "train":
        proc = subprocess.Popen(
            [str(TANDEM), "train", "--device", "cpu", "--threads", "1", "--seconds", "100000",
             "--coloc-socket", str(server.socket)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(3)  # joined, and lent the device while serving is idle
        return proc
    raise ValueError(kind)


def connections(rate, budget_ms):
    """Enough keep-alive connections for twice a budget's worth of requests in flight: with
    fewer, requests past capacity wait in the client's pool, where the server cannot see
    (or refuse) them."""
    return max(128, min(1024, int(2 * rate * budget_ms / 1000)))


def load(url, rate, seconds, out, conns=128):
    subprocess.run(
        [str(TANDEM_BENCH), "load", "--url", url, "--model", "mlp", "--rate", str(rate),
         "--duration", str(seconds), "--shape", "poisson", "--connections", str(conns),
         "--json", str(out)],
        check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def capacity(binary, repo, work, seconds):
    server = Server(binary, repo, 1000, work)
    try:
        r = load(server.url, 20000, seconds, work / "capacity.json")
        return r["outcomes"].get("200", 0) / seconds
    finally:
        server.stop()


def run_config(binary, repo, work, budget, neighbour, rates, step_s, capacity_rps):
    server = Server(binary, repo, budget, work)
    other = start_neighbour(neighbour, server)
    steps = []
    try:
        for rate in rates:
            before = metrics(server.url)
            r = load(server.url, rate, step_s, work / "step.json", connections(rate, budget))
            after = metrics(server.url)
            delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            refused = sum(v for k, v in delta.items() if k not in ("admitted_late", "abandoned"))
            steps.append({
                "rate": rate, "sent": r["sent"], "ok": r["outcomes"].get("200", 0),
                "p99_ms": r["p99_ms"], "refused": refused,
                "by_reason": {k: v for k, v in delta.items() if v and k != "admitted_late"},
                "admitted_late": delta.get("admitted_late", 0),
            })
    finally:
        if other:
            other.kill()
            other.wait()
        server.stop()
    return summarize(steps, budget, capacity_rps)


def summarize(steps, budget, capacity_rps):
    calm = [s for s in steps if s["rate"] < capacity_rps and s["p99_ms"] <= 0.7 * budget]
    sent = sum(s["sent"] for s in calm)
    refused_calm = sum(s["refused"] for s in calm)
    clean = [s["rate"] for s in steps if s["refused"] == 0 and s["p99_ms"] <= budget]
    return {
        "steps": steps,
        "refused_while_calm": refused_calm,
        "sent_while_calm": sent,
        "refused_share_while_calm": refused_calm / sent if sent else 0.0,
        "highest_clean_rate": max(clean) if clean else None,
    }


def print_config(label, result):
    print(f"== {label}")
    print(f"{'rate':>7} {'sent':>7} {'p99 ms':>7} {'refused':>8} {'late-admitted':>14}  by reason")
    for s in result["steps"]:
        reasons = " ".join(f"{k} {int(v)}" for k, v in sorted(s["by_reason"].items()))
        print(f"{s['rate']:>7} {s['sent']:>7} {s['p99_ms']:>7.2f} {int(s['refused']):>8} "
              f"{int(s['admitted_late']):>14}  {reasons}")
    print(f"   refused while p99 <= 0.7 x budget: {int(result['refused_while_calm'])} of "
          f"{result['sent_while_calm']} ({100 * result['refused_share_while_calm']:.3f}%); "
          f"highest rate with no refusal and p99 within budget: {result['highest_clean_rate']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budgets", default="10,50")
    ap.add_argument("--neighbours", default="none,busy,train")
    ap.add_argument("--steps", default="0.1,0.3,0.5,0.7,0.9,1.1,1.3")
    ap.add_argument("--step-s", type=int, default=8)
    ap.add_argument("--baseline", help="another tandem binary, run the same way")
    ap.add_argument("--json", help="write every result here")
    args = ap.parse_args()

    work = ROOT / "target/bench-admission"
    repo = work / "repo"
    weights = repo / "mlp/1/model.safetensors"
    if not weights.exists():
        weights.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(ROOT / "scripts/make_mlp.py"), "--dims",
                        "784,1024,1024,10", "--seed", "1", str(weights)], check=True)
    cap = capacity(str(TANDEM), repo, work, 5)
    print(f"capacity (200s/s, alone, loose budget): {cap:.0f} req/s")
    rates = [int(round(f * cap, -1)) for f in map(float, args.steps.split(","))]
    binaries = [("tandem", str(TANDEM))]
    if args.baseline:
        binaries.append(("baseline", args.baseline))
    results = []
    i = 0
    for neighbour in args.neighbours.split(","):
        for budget in map(int, args.budgets.split(",")):
            order = binaries if i % 2 == 0 else list(reversed(binaries))
            i += 1
            for name, binary in order:
                r = run_config(binary, repo, work, budget, neighbour, rates, args.step_s, cap)
                label = f"{name}: --p99-ms {budget}, neighbour {neighbour}"
                print_config(label, r)
                results.append({"binary": name, "budget_ms": budget, "neighbour": neighbour,
                                "capacity_rps": cap, **r})
                sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
