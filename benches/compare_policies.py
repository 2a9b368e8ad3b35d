#!/usr/bin/env python3
"""Adaptive batching against the static policy at three max_queue_delay settings.

For each budget (10 ms, 50 ms) and load shape (constant, poisson, burst), offers a grid of
rates and, at each rate, runs `tandem-bench load` for every policy back to back on one
server (switching policy through the admin API) — interleaved, so every policy sees the
same moment of a noisy shared machine. Reports goodput at p99 <= budget: the most requests
per second answered 200 within the budget in a run whose 200s keep their p99 within it
and where nothing failed (429s are allowed; they are not goodput). Writes
target/bench-compare/report.md and the JSON of every run.

With --rounds N (default 1) every point runs N times, the policies in a rotated order each
round, and the report takes the median goodput and the median p99 of each point: on a noisy
shared machine one run near the budget is a coin toss.

With --pin the load generator runs on core 0 and the server on the others. On two cores
that leaves the server one, where its model thread and its HTTP thread take turns in
scheduler slices of milliseconds: tails appear that neither has on two shared cores, so
the default is to share.

With --propagate-deadline every request carries what is left of its budget
(`tandem-timeout-us`), as a caller that propagates deadlines does; 504s then count as
refusals, like 429s.

    python3 benches/compare_policies.py [--duration 4] [--rates 4000,6000,...] [--rounds 3]
"""

import argparse
import json
import statistics
import os
import re
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# TANDEM_BIN: another build of the server to measure (A/B runs of two builds take turns);
# the load generator is always this checkout's.
DEFAULT_TANDEM = os.path.join(ROOT, "target", "release", "tandem")
TANDEM_BENCH = os.path.join(ROOT, "target", "release", "tandem-bench")
TANDEM = os.environ.get("TANDEM_BIN", DEFAULT_TANDEM)


def core_split(pin):
    """With --pin on a machine of two or more cores: the load generator gets core 0 and the
    server the others, so the generator never takes the server's cycles and what a client
    measures is the server, not the two fighting over the same cores."""
    cores = sorted(os.sched_getaffinity(0))
    if not pin or len(cores) < 2:
        return None, None
    return set(cores[1:]), {cores[0]}


def on_cores(cores):
    return (lambda: os.sched_setaffinity(0, cores)) if cores else None


def start_server(repo, log_path, extra, cores=None):
    log = open(log_path, "w")
    proc = subprocess.Popen([TANDEM, "serve", "--listen", "127.0.0.1:0", "--device", "cpu",
                             "--model-repository", repo] + extra, stderr=log,
                            preexec_fn=on_cores(cores),
                            # No gRPC listener (8001 by default); a TANDEM_BIN from before
                            # gRPC ignores the variable.
                            env={**os.environ, "TANDEM_GRPC_LISTEN": ""})
    deadline = time.time() + 60
    while time.time() < deadline:
        m = re.search(r"listening addr=([0-9.:]+)", open(log_path).read())
        if m:
            url = "http://" + m.group(1)
            try:
                if urllib.request.urlopen(url + "/v2/health/ready", timeout=1).status == 200:
                    return proc, url
            except Exception:
                pass
        time.sleep(0.1)
    proc.kill()
    sys.exit("server did not start: " + open(log_path).read())


def set_policy(url, model, change):
    req = urllib.request.Request(f"{url}/admin/models/{model}/slo", method="PUT",
                                 data=json.dumps(change).encode())
    with urllib.request.urlopen(req) as r:
        assert r.status == 200


def metrics_text(url):
    return urllib.request.urlopen(url + "/metrics").read().decode()


def server_p99_ms(text, model):
    """The p99 the server itself reports for the last two seconds (what its feedback loop
    reads), to set beside the client's."""
    m = re.search(r'^tandem_observed_p99_seconds\{model="%s"\} (\S+)$' % re.escape(model),
                  text, re.M)
    return float(m.group(1)) * 1e3 if m else None


def rejected_by_reason(text, model):
    """The server's count of requests it answered with an error before compute, by reason
    (shed, late, expired, ...): which of its checks turned the 429s away."""
    pattern = r'^tandem_requests_rejected_total\{([^}]*)\} (\S+)$'
    counts = {}
    for labels, value in re.findall(pattern, text, re.M):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("model") == model:
            reason = fields.get("reason", "?")
            counts[reason] = counts.get(reason, 0) + int(float(value))
    return counts


def refusals(args):
    """Answers that are not goodput but not failures either: 429 (shed), and with
    propagated deadlines 504 (the caller's deadline passed before its turn)."""
    return ("200", "429", "504") if args.propagate_deadline else ("200", "429")


def load(url, model, shape, budget, rate, args, out):
    def run(duration, json_out):
        cmd = [TANDEM_BENCH, "load", "--url", url, "--model", model, "--shape", shape,
               "--budget-ms", str(budget), "--duration", str(duration), "--rate", str(rate),
               "--connections", str(args.connections), "--json", json_out]
        if args.propagate_deadline:
            cmd.append("--propagate-deadline")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                       preexec_fn=on_cores(getattr(args, "client_cores", None)))
    # Every policy first gets the same load unmeasured: what is compared is each one's
    # steady state, not the moment after a switch (a new adaptive policy starts from the
    # warm-up latency model and an empty feedback window).
    warmup = args.warmup if args.warmup is not None else (4.0 if shape == "burst" else 1.0)
    if warmup > 0:
        run(warmup, out + ".warmup.json")
    before = rejected_by_reason(metrics_text(url), model)
    run(args.duration, out)
    r = json.load(open(out))
    text = metrics_text(url)
    r["server_p99_ms"] = server_p99_ms(text, model)
    after = rejected_by_reason(text, model)
    r["rejected"] = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
    failed = sum(v for k, v in r["outcomes"].items() if k not in refusals(args))
    ok = r["outcomes"].get("200", 0)
    passed = failed == 0 and ok > 0 and r["p99_ms"] <= budget
    return passed, r["goodput_rps"], r


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=4)
    p.add_argument("--rates", default="4000,6000,8000,10000,12000,14000,16000")
    p.add_argument("--connections", type=int, default=128)
    p.add_argument("--model-dims", default="784,1024,1024,10")
    p.add_argument("--budgets", default="10,50")
    p.add_argument("--shapes", default="constant,poisson,burst")
    p.add_argument("--delays-us", default="500,2000,8000")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds of the same load, not measured, before each run (default: "
                        "1, and 4 for bursts: one burst comes a second, and each switch starts "
                        "a fresh adaptive policy whose loop takes a few bursts to settle)")
    p.add_argument("--pin", action="store_true",
                   help="the load generator on core 0, the server on the others")
    p.add_argument("--propagate-deadline", action="store_true",
                   help="requests carry what is left of the budget (tandem-timeout-us)")
    args = p.parse_args()

    out = os.path.join(ROOT, "target", "bench-compare")
    repo = os.path.join(out, "repo")
    model_file = os.path.join(repo, "mlp", "1", "model.safetensors")
    if not os.path.exists(model_file):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_mlp.py"), "--dims",
                        args.model_dims, "--seed", "1", model_file], check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    server_cores, args.client_cores = core_split(args.pin)
    if server_cores:
        print(f"server on cores {sorted(server_cores)}, load generator on {sorted(args.client_cores)}")
    server, url = start_server(repo, os.path.join(out, "server.log"), [], server_cores)
    delays = [int(d) for d in args.delays_us.split(",")]
    policies = [("adaptive", None)] + [(f"static {d / 1000:g} ms", d) for d in delays]
    rows = []
    rates = [float(r) for r in args.rates.split(",")]
    runs = []
    try:
        for budget in [float(b) for b in args.budgets.split(",")]:
            for shape in args.shapes.split(","):
                result = {name: 0.0 for name, _ in policies}
                for rate in rates:
                    point = {name: [] for name, _ in policies}
                    for round_ in range(args.rounds):
                        shift = round_ % len(policies)
                        for name, delay in policies[shift:] + policies[:shift]:
                            change = ({"policy": "adaptive", "p99_ms": budget} if delay is None
                                      else {"policy": "static", "max_queue_delay_us": delay})
                            set_policy(url, "mlp", change)
                            tag = name.replace(" ", "-")
                            passed, goodput, r = load(
                                url, "mlp", shape, budget, rate, args,
                                os.path.join(out, f"load-{shape}-{budget:g}ms-{rate:g}-{tag}.json"))
                            runs.append({"budget_ms": budget, "shape": shape, "rate": rate,
                                         "policy": name, "round": round_, "passed": passed,
                                         "goodput": goodput, "p99_ms": r["p99_ms"],
                                         "server_p99_ms": r["server_p99_ms"],
                                         "outcomes": r["outcomes"],
                                         "rejected": r["rejected"]})
                            point[name].append((passed, goodput, r["p99_ms"], r["outcomes"]))
                            time.sleep(1)
                    line = []
                    for name, _ in policies:
                        p99 = statistics.median(x[2] for x in point[name])
                        goodput = statistics.median(x[1] for x in point[name])
                        clean = all(set(x[3]) <= set(refusals(args)) for x in point[name])
                        passed = clean and p99 <= budget and goodput > 0
                        if passed:
                            result[name] = max(result[name], goodput)
                        line.append(f"{name}: {goodput:6.0f}{'' if passed else ' (fail)'} p99 {p99:.1f}")
                    print(f"budget {budget:g} ms  {shape:<8} {rate:6.0f}/s  " + "  ".join(line),
                          flush=True)
                rows.append((budget, shape, result))
    finally:
        server.terminate()
        server.wait()
    json.dump(runs, open(os.path.join(out, "runs.json"), "w"), indent=1)

    names = [n for n, _ in policies]
    lines = ["| budget | shape | " + " | ".join(names) + " | adaptive / best static |",
             "| ---: | --- | " + " | ".join("---:" for _ in names) + " | ---: |"]
    for budget, shape, result in rows:
        best_static = max(result[n] for n in names[1:])
        ratio = result["adaptive"] / best_static if best_static else float("inf")
        cells = " | ".join(f"{result[n]:,.0f}" for n in names)
        lines.append(f"| {budget:g} ms | {shape} | {cells} | {ratio:.2f}x |")
    report = "\n".join(lines)
    open(os.path.join(out, "report.md"), "w").write(report + "\n")
    print(f"\ngoodput at p99 <= budget (req/s; medians of {args.rounds} round(s)), single-row JSON "
          "requests, 784->1024->1024->10 MLP\n")
    print(report)


if __name__ == "__main__":
    main()
