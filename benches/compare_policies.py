#!/usr/bin/env python3
"""Adaptive batching against the static policy at three max_queue_delay settings.

For each budget (10 ms, 50 ms) and load shape (constant, poisson, burst), runs
`tandem bench sweep` for every policy back to back on one server (switching policy through
the admin API), and reports goodput at p99 <= budget: the most requests per second
answered 200 within the budget in a run whose 200s keep their p99 within it and where
nothing failed. Writes target/bench-compare/report.md, JSON and SVG for every sweep.

    python3 benches/compare_policies.py [--duration 4] [--model-dims 784,1024,1024,10]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TANDEM = os.path.join(ROOT, "target", "release", "tandem")


def start_server(repo, log_path, extra):
    log = open(log_path, "w")
    proc = subprocess.Popen([TANDEM, "serve", "--listen", "127.0.0.1:0", "--device", "cpu",
                             "--model-repository", repo] + extra, stderr=log)
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


def sweep(url, model, shape, budget, args, out):
    cmd = [TANDEM, "bench", "sweep", "--url", url, "--model", model, "--shape", shape,
           "--budget-ms", str(budget), "--duration", str(args.duration),
           "--min-rate", str(args.min_rate), "--max-rate", str(args.max_rate),
           "--connections", str(args.connections), "--cooldown", "1", "--json", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    r = json.load(open(out))
    return r.get("best_goodput_rps") or 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=4)
    p.add_argument("--min-rate", type=float, default=2000)
    p.add_argument("--max-rate", type=float, default=32000)
    p.add_argument("--connections", type=int, default=128)
    p.add_argument("--model-dims", default="784,1024,1024,10")
    p.add_argument("--budgets", default="10,50")
    p.add_argument("--shapes", default="constant,poisson,burst")
    p.add_argument("--delays-us", default="500,2000,8000")
    args = p.parse_args()

    out = os.path.join(ROOT, "target", "bench-compare")
    repo = os.path.join(out, "repo")
    model_file = os.path.join(repo, "mlp", "1", "model.safetensors")
    if not os.path.exists(model_file):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_mlp.py"), "--dims",
                        args.model_dims, "--seed", "1", model_file], check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    server, url = start_server(repo, os.path.join(out, "server.log"), [])
    delays = [int(d) for d in args.delays_us.split(",")]
    policies = [("adaptive", None)] + [(f"static {d / 1000:g} ms", d) for d in delays]
    rows = []
    try:
        for budget in [float(b) for b in args.budgets.split(",")]:
            for shape in args.shapes.split(","):
                result = {}
                for name, delay in policies:
                    change = ({"policy": "adaptive", "p99_ms": budget} if delay is None
                              else {"policy": "static", "max_queue_delay_us": delay})
                    set_policy(url, "mlp", change)
                    tag = name.replace(" ", "-")
                    g = sweep(url, "mlp", shape, budget, args,
                              os.path.join(out, f"sweep-{shape}-{budget:g}ms-{tag}.json"))
                    result[name] = g
                    print(f"budget {budget:g} ms  {shape:<8}  {name:<14} goodput {g:8.0f} req/s",
                          flush=True)
                rows.append((budget, shape, result))
    finally:
        server.terminate()
        server.wait()

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
    print("\ngoodput at p99 <= budget (req/s), single-row JSON requests, 784->1024->1024->10 MLP\n")
    print(report)


if __name__ == "__main__":
    main()
