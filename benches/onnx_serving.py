#!/usr/bin/env python3
"""tandem serving ONNX CNNs against ONNX Runtime in process, on the same cores.

The models are benches/onnx_models.py's ResNet-50 and MobileNetV3-Small (torchvision's layer
shapes, random weights, BatchNorm folded), in a Triton model repository (config.pbtxt,
max_batch_size 8; and mobilenet_v3_small_nobatch, max_batch_size 1, for batching off).

Contenders:
- in process: onnxruntime.InferenceSession on the CPU in this Python (intra_op threads =
  --threads, the cores), images/s at batch 1, 2, 4 and 8 back to back; "in-process best" is
  the best batch size of the round.
- served: `tandem serve --listen 127.0.0.1:0 --device cpu --model-repository REPO --p99-ms P`
  with ORT_DYLIB_PATH = the onnxruntime wheel's libonnxruntime.so, one server per budget,
  driven OPEN LOOP by this script with single-image requests over Triton's binary tensor
  extension (602,112 bytes of f32 a request): asyncio streams, HTTP/1.1 keep-alive
  connections opened before the clock starts, arrivals at fixed intervals (or Poisson,
  --poisson) scheduled by the clock, latency counted from each request's SCHEDULED send time
  (a request waiting for a free connection in the client is late, and that counts).

Scenarios (--scenarios a,b,c):
  (a) saturation: offered --overload x the pilot's in-process best, open loop, with the
      model's budget loosened (--sat-resnet-p99-ms 1000, --sat-mobilenet-p99-ms 200, through
      PUT /admin/models/{m}/slo, set back after) so that batches of 8 fit in it, and enough
      connections for that budget's worth of requests in flight; the figure is 200s answered
      per second over the run (its first quarter, at most 1 s, left out);
  (b) resnet50 goodput at p99 <= 250 ms: the offered rate stepped up (--steps, fractions of
      the pilot's in-process best) until a step fails; a step passes with >= 99% of its
      requests answered 200 and the p99 of those 200s within the budget; the figure is the
      goodput (200s within the budget per second) of the highest passing step;
  (c) the same for mobilenet_v3_small at p99 <= 20 ms, batching on (max_batch_size 8) and
      off (mobilenet_v3_small_nobatch, max_batch_size 1).
Served figures are divided by the in-process best of the same round.

Rounds alternate the contenders (in process first in even rounds, served first in odd ones)
so that drift in the host's speed falls on both; each ratio is reported as the median of its
per-round ratios with their min-max. A pilot round of the in-process runs (not counted) fixes
the offered rates, the same in every round. The load generator runs in this process on the
same cores as the server: served figures pay for the client's CPU, in-process ones do not.

    .venv/bin/python benches/onnx_serving.py [--rounds 3] [--scenarios a,b,c] [--quick]
        [--out target/bench-onnx] [--tandem target/release/tandem] [--threads N]

Each server gets --coloc-socket OUT/coloc-GROUP.sock (unless --serve-args is given), so that
it leaves the machine's default trainer socket to any other tandem. Every step's line shows
"client late p99": how late this client sent (busy, or every connection busy); when it is a
large part of the p99, the client, not the server, was the bottleneck.

Needs numpy, onnx and onnxruntime (the tests' .venv has them). Writes the model repositories,
the servers' logs and results.json under --out.
"""

import argparse
import asyncio
import glob
import json
import os
import re
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # importing onnx_models leaves no __pycache__ in benches/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

IMAGE_SHAPE = (3, 224, 224)
IMAGE_BYTES = 3 * 224 * 224 * 4
BATCHES = (1, 2, 4, 8)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ---------------------------------------------------------------- in process

def ort_dylib():
    import onnxruntime
    capi = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
    found = sorted(glob.glob(os.path.join(capi, "libonnxruntime.so.*")))
    if not found:
        found = sorted(glob.glob(os.path.join(
            ROOT, ".venv", "lib", "python*", "site-packages", "onnxruntime", "capi",
            "libonnxruntime.so.*")))
    if not found:
        sys.exit("no libonnxruntime.so.* in the onnxruntime wheel")
    return found[-1]


def session(path, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def in_process(path, threads, seconds, batches=BATCHES):
    """Images/s per batch size, back to back, one session (made and dropped here)."""
    sess = session(path, threads)
    rng = np.random.default_rng(3)
    out = {}
    for b in batches:
        x = rng.standard_normal((b,) + IMAGE_SHAPE, dtype=np.float32)
        for _ in range(2):
            sess.run(["logits"], {"input": x})
        n, t0 = 0, time.perf_counter()
        while True:
            sess.run(["logits"], {"input": x})
            n += 1
            dt = time.perf_counter() - t0
            if dt >= seconds and n >= 3:
                break
        out[b] = n * b / dt
    del sess
    return out


# ---------------------------------------------------------------- the server

class Server:
    """`tandem serve` on a free port, its stderr copied to a log file and scanned."""

    def __init__(self, tandem, repo, p99_ms, log_path, extra=()):
        self.cmd = [tandem, "serve", "--listen", "127.0.0.1:0", "--device", "cpu",
                    "--model-repository", repo, "--p99-ms", str(p99_ms), *extra]
        # No gRPC listener (8001 by default); builds from before gRPC ignore the variable.
        self.env = dict(os.environ, ORT_DYLIB_PATH=ort_dylib(), TANDEM_GRPC_LISTEN="")
        self.log_path = log_path
        self.lines = []
        self.addr = None
        self._addr_seen = threading.Event()

    def command(self):
        return (f"ORT_DYLIB_PATH={self.env['ORT_DYLIB_PATH']} TANDEM_GRPC_LISTEN='' "
                + shlex.join(self.cmd))

    def start(self, timeout=180):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.time() + timeout
        while not self._addr_seen.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"tandem serve exited ({self.proc.returncode}); "
                                   f"see {self.log_path}")
            if time.time() > deadline:
                raise RuntimeError(f"tandem serve said no address; see {self.log_path}")
        host, port = self.addr.rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.url = f"http://{self.addr}"
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tandem serve exited ({self.proc.returncode}); "
                                   f"see {self.log_path}")
            try:
                if urllib.request.urlopen(self.url + "/v2/health/ready", timeout=2).status == 200:
                    return self
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"tandem serve not ready; see {self.log_path}")

    def _pump(self):
        for line in self.proc.stderr:
            self.log.write(line)
            self.log.flush()
            plain = ANSI.sub("", line.rstrip("\n"))
            self.lines.append(plain)
            if self.addr is None and "listening addr=" in plain:
                self.addr = plain.split("listening addr=", 1)[1].split()[0]
                self._addr_seen.set()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def complaints(self):
        """Log lines at WARN or ERROR, or that say panic."""
        return [l for l in self.lines
                if re.search(r"\b(WARN|ERROR)\b", l) or "panic" in l.lower()]


# ---------------------------------------------------------------- the load generator

def infer_request(model, image):
    """One single-image POST in Triton's binary tensor extension, as bytes on the wire."""
    header = json.dumps({
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, *IMAGE_SHAPE],
                    "parameters": {"binary_data_size": IMAGE_BYTES}}],
        "outputs": [{"name": "logits", "parameters": {"binary_data": True}}],
    }, separators=(",", ":")).encode()
    body = header + np.ascontiguousarray(image, dtype="<f4").tobytes()
    head = (f"POST /v2/models/{model}/infer HTTP/1.1\r\n"
            "Host: 127.0.0.1\r\n"
            "Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head + body


class Conn:
    """One HTTP/1.1 keep-alive connection."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.w = None

    async def open(self):
        self.r, self.w = await asyncio.open_connection(self.host, self.port,
                                                       limit=1 << 20)
        sock = self.w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self):
        if self.w is not None:
            self.w.close()
            self.w = None

    async def request(self, data):
        """Sends `data`; returns (status, headers, body)."""
        if self.w is None:
            await self.open()
        self.w.write(data)
        await self.w.drain()
        head = await self.r.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for l in lines[1:]:
            if ":" in l:
                k, v = l.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            body = await self.r.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await self.r.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.r.readuntil(b"\r\n")
                    break
                parts.append(await self.r.readexactly(size))
                await self.r.readexactly(2)
            body = b"".join(parts)
        else:
            body = b""
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body


def parse_logits(headers, body):
    n = int(headers.get("inference-header-content-length", len(body)))
    meta = json.loads(body[:n])
    out = meta["outputs"][0]
    return out["shape"], np.frombuffer(body[n:], dtype="<f4")


async def _open_loop(host, port, requests, rate, duration, connections, poisson, seed,
                     drain_s):
    loop = asyncio.get_running_loop()
    pool = [Conn(host, port) for _ in range(connections)]
    await asyncio.gather(*(c.open() for c in pool))
    queue = asyncio.Queue()
    records = []  # (scheduled, sent, done, status)

    async def worker(conn):
        while True:
            item = await queue.get()
            if item is None:
                return
            i, t = item
            sent = loop.time()
            try:
                status, _, _ = await conn.request(requests[i % len(requests)])
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    ValueError, IndexError):
                status = -1  # connection error or unparseable response
                conn.close()
            records.append((t, sent, loop.time(), status))

    tasks = [asyncio.create_task(worker(c)) for c in pool]
    n = max(1, int(round(rate * duration)))
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, n) if poisson else np.full(n, 1.0 / rate)
    t0 = loop.time() + 0.02
    times = t0 + np.concatenate(([0.0], np.cumsum(gaps)[:-1]))
    i = 0
    while i < n:
        now = loop.time()
        while i < n and times[i] <= now:
            queue.put_nowait((i, float(times[i])))
            i += 1
        if i < n:
            await asyncio.sleep(max(0.0, times[i] - loop.time()))
    t_end = t0 + duration
    for _ in tasks:
        queue.put_nowait(None)
    _, pending = await asyncio.wait(tasks, timeout=max(0.1, t_end + drain_s - loop.time()))
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for c in pool:
        c.close()
    return t0, t_end, n, records


def open_loop(host, port, requests, rate, duration, budget_ms, connections=64, poisson=False,
              seed=1, drain_s=None):
    """Runs one open-loop step; returns its figures."""
    budget = budget_ms / 1000.0
    if drain_s is None:
        drain_s = max(2.0, 4 * budget)
    t0, t_end, n, recs = asyncio.run(_open_loop(host, port, requests, rate, duration,
                                                connections, poisson, seed, drain_s))
    statuses = {}
    for _, _, _, s in recs:
        statuses[s] = statuses.get(s, 0) + 1
    unanswered = n - len(recs)
    if unanswered:
        statuses[0] = unanswered  # 0: no answer before the drain ran out
    ok = np.array([d - t for t, _, d, s in recs if s == 200])
    # How late the client sent (a busy client, or every connection busy): part of the latency.
    late = np.array([x - t for t, x, _, _ in recs]) * 1000
    late_p99 = float(np.percentile(late, 99)) if late.size else float("nan")
    good = int((ok <= budget).sum()) if ok.size else 0
    warm = min(1.0, duration / 4)
    done_200 = sum(1 for _, _, d, s in recs if s == 200 and t0 + warm <= d <= t_end)
    p50, p99 = (np.percentile(ok, [50, 99]) * 1000).tolist() if ok.size else (float("nan"),) * 2
    share = ok.size / n
    return {
        "offered_rps": rate, "duration_s": duration, "sent": n, "statuses": statuses,
        "ok_share": share, "p50_ms": p50, "p99_ms": p99, "client_late_p99_ms": late_p99,
        "goodput_rps": good / duration,
        "throughput_rps": done_200 / (duration - warm),
        "passes": bool(share >= 0.99 and ok.size and p99 <= budget_ms),
    }


def describe(step):
    codes = " ".join(f"{k if k > 0 else ('err' if k < 0 else 'lost')}:{v}"
                     for k, v in sorted(step["statuses"].items()))
    return (f"offered {step['offered_rps']:.1f}/s x {step['duration_s']:g}s: "
            f"200s {100 * step['ok_share']:.1f}%, p50 {step['p50_ms']:.1f} ms, "
            f"p99 {step['p99_ms']:.1f} ms (client late p99 {step['client_late_p99_ms']:.1f}), "
            f"goodput {step['goodput_rps']:.1f}/s, "
            f"answered {step['throughput_rps']:.1f}/s [{codes}]"
            f"{'' if step['passes'] else '  FAIL'}")


def ladder(server, model, requests, base, fractions, budget_ms, args):
    """Steps the offered rate up (fractions of base) until a step fails; the best passing.
    If the lowest step fails, it is halved (up to three times) rather than reporting 0."""
    best, steps = None, []
    todo = list(fractions)
    halvings = 0
    while todo:
        f = todo.pop(0)
        step = open_loop(server.host, server.port, requests, f * base, args.step_seconds,
                         budget_ms, args.connections, args.poisson, seed=len(steps) + 1)
        if not step["passes"] and args.confirm:
            time.sleep(args.cooldown)
            step = open_loop(server.host, server.port, requests, f * base, args.step_seconds,
                             budget_ms, args.connections, args.poisson, seed=len(steps) + 101)
        step["fraction"] = f
        steps.append(step)
        print(f"    {model} @ {f:.3g}x: {describe(step)}", flush=True)
        time.sleep(args.cooldown)
        if not step["passes"]:
            if best is None and halvings < 3:
                halvings += 1
                todo = [f / 2]
                continue
            break
        if best is None or step["goodput_rps"] > best["goodput_rps"]:
            best = step
    return (best["goodput_rps"] if best else 0.0), best, steps


def set_slo(server, model, p99_ms):
    """PUT /admin/models/{m}/slo {"p99_ms": ...}; the answer's p99_ms."""
    req = urllib.request.Request(f"{server.url}/admin/models/{model}/slo", method="PUT",
                                 data=json.dumps({"p99_ms": p99_ms}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        got = json.load(r)
    if abs(float(got.get("p99_ms", -1)) - p99_ms) > 1e-6:
        raise RuntimeError(f"PUT /admin/models/{model}/slo answered {got}")
    return got


def spot_check(server, model, image, onnx_path, threads):
    """One request against the same image in process: shape and the largest difference."""
    async def one():
        c = Conn(server.host, server.port)
        status, headers, body = await c.request(infer_request(model, image))
        c.close()
        return status, headers, body
    status, headers, body = asyncio.run(one())
    if status != 200:
        return f"{model}: spot check answered {status}: {body[:300]!r}"
    shape, got = parse_logits(headers, body)
    (want,) = session(onnx_path, threads).run(["logits"], {"input": image[None]})
    diff = float(np.abs(got - want.ravel()).max()) if got.size == want.size else float("nan")
    return (f"{model}: spot check 200, logits shape {shape}, max |served - in process| "
            f"{diff:.3g} (logits std {want.std():.3g})")


# ---------------------------------------------------------------- the run

def med(v):
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--scenarios", default="a,b,c")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="in-process intra_op threads (the cores)")
    ap.add_argument("--tandem", default=os.path.join(ROOT, "target", "release", "tandem"))
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "bench-onnx"))
    ap.add_argument("--inproc-seconds", type=float, default=2.0, help="per batch size")
    ap.add_argument("--step-seconds", type=float, default=5.0, help="per offered rate")
    ap.add_argument("--sat-seconds", type=float, default=6.0)
    ap.add_argument("--cooldown", type=float, default=1.0, help="seconds between steps")
    ap.add_argument("--overload", type=float, default=1.25,
                    help="(a): offered rate, x the pilot's in-process best")
    ap.add_argument("--steps", default="0.4,0.55,0.7,0.8,0.9,1.0,1.1,1.25,1.4",
                    help="(b), (c): offered rates, fractions of the pilot's in-process best")
    ap.add_argument("--confirm", type=int, default=0, choices=(0, 1),
                    help="run a failed step once more before stopping")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--poisson", action="store_true", help="Poisson arrivals (else fixed)")
    ap.add_argument("--resnet-p99-ms", type=float, default=250.0)
    ap.add_argument("--mobilenet-p99-ms", type=float, default=20.0)
    ap.add_argument("--sat-resnet-p99-ms", type=float, default=1000.0,
                    help="(a): resnet50's p99 budget during the saturation run (set through "
                         "PUT /admin/models/{m}/slo, then set back), so batches may fill")
    ap.add_argument("--sat-mobilenet-p99-ms", type=float, default=200.0,
                    help="(a): the same for mobilenet_v3_small")
    ap.add_argument("--serve-args", default="",
                    help="more flags for tandem serve (default: --coloc-socket OUT/coloc-GROUP.sock, "
                         "so as not to take the machine's default trainer socket)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 1 round, tiny durations, two steps")
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
        args.inproc_seconds = 0.3
        args.step_seconds = 1.0
        args.sat_seconds = 1.5
        args.cooldown = 0.3
        args.steps = "0.5,1.0"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # many connections for (a)
    scenarios = set(s.strip() for s in args.scenarios.split(",") if s.strip())
    fractions = [float(f) for f in args.steps.split(",")]
    if not os.path.exists(args.tandem):
        sys.exit(f"{args.tandem} not found: cargo build --release")

    import onnx_models
    os.makedirs(args.out, exist_ok=True)
    repos = {"resnet": os.path.join(args.out, "repo-resnet"),
             "mobilenet": os.path.join(args.out, "repo-mobilenet")}
    need_resnet = bool(scenarios & {"a", "b"})
    need_mobile = bool(scenarios & {"a", "c"})
    paths = {}
    for model, repo, mbs, suffix, needed in (
            ("resnet50", repos["resnet"], 8, "", need_resnet),
            ("mobilenet_v3_small", repos["mobilenet"], 8, "", need_mobile),
            ("mobilenet_v3_small", repos["mobilenet"], 1, "_nobatch", need_mobile and "c" in scenarios)):
        if not needed:
            continue
        name = model + suffix
        path = os.path.join(repo, name, "1", "model.onnx")
        if not os.path.exists(path):
            onnx_models.write(repo, model, mbs, suffix, check=False)
        paths[name] = path
    inproc_models = [m for m in ("resnet50", "mobilenet_v3_small") if m in paths]

    rng = np.random.default_rng(11)
    images = [rng.standard_normal(IMAGE_SHAPE, dtype=np.float32) for _ in range(4)]
    reqs = {m: [infer_request(m, im) for im in images] for m in paths}
    sat_budgets = {"resnet50": args.sat_resnet_p99_ms,
                   "mobilenet_v3_small": args.sat_mobilenet_p99_ms}
    budgets = {"resnet50": args.resnet_p99_ms, "mobilenet_v3_small": args.mobilenet_p99_ms,
               "mobilenet_v3_small_nobatch": args.mobilenet_p99_ms}

    command = shlex.join([os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT)
                          else sys.executable, os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    print(f"$ {command}")
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"in-process threads {args.threads}; onnxruntime {ort_version()}")

    print(f"pilot (in process, not counted, {args.inproc_seconds:g} s a batch size):")
    pilot = {}
    for m in inproc_models:
        r = in_process(paths[m], args.threads, args.inproc_seconds)
        pilot[m] = max(r.values())
        print(f"  {m}: " + ", ".join(f"b{b} {v:.1f}" for b, v in r.items()) + " images/s")

    groups = []
    if need_resnet:
        groups.append(("resnet", args.resnet_p99_ms))
    if need_mobile:
        groups.append(("mobilenet", args.mobilenet_p99_ms))
    extra = shlex.split(args.serve_args)
    servers_cmd = {}
    complaints = {}
    spot = []
    rounds = []

    def saturation(srv, m, res):
        budget = sat_budgets[m]
        rate = args.overload * pilot[m]
        # Room for a budget's worth of requests in flight, so the client does not queue them.
        conns = max(args.connections, min(4000, int(rate * budget / 1000 * 1.5) + 1))
        set_slo(srv, m, budget)
        try:
            st = open_loop(srv.host, srv.port, reqs[m], rate, args.sat_seconds, budget, conns,
                           args.poisson)
        finally:
            set_slo(srv, m, budgets[m])
        st["connections"] = conns
        print(f"    (a) {m} saturation, p99 budget {budget:g} ms, {conns} connections: "
              f"{describe(st)}", flush=True)
        res["served"][f"a:{m}"] = st["throughput_rps"]
        res["detail"][f"a:{m}"] = st
        time.sleep(args.cooldown)

    def served_phase(r, res):
        for group, p99 in groups:
            log = os.path.join(args.out, f"serve-{group}-round{r}.log")
            flags = extra or ["--coloc-socket", os.path.join(args.out, f"coloc-{group}.sock")]
            srv = Server(args.tandem, repos[group], int(p99) if p99 == int(p99) else p99,
                         log, flags)
            servers_cmd[group] = srv.command()
            t = time.time()
            srv.start()
            print(f"  served ({group}, p99 {p99:g} ms): ready in {time.time() - t:.1f} s "
                  f"at {srv.url}", flush=True)
            try:
                if r == 0:
                    for m in [m for m in paths if (m == "resnet50") == (group == "resnet")]:
                        s = spot_check(srv, m, images[0], paths[m], args.threads)
                        spot.append(s)
                        print(f"    {s}")
                if group == "resnet":
                    m = "resnet50"
                    if "a" in scenarios:
                        saturation(srv, m, res)
                    if "b" in scenarios:
                        g, best, steps = ladder(srv, m, reqs[m], pilot[m], fractions,
                                                budgets[m], args)
                        res["served"][f"b:{m}"] = g
                        res["detail"][f"b:{m}"] = steps
                else:
                    m = "mobilenet_v3_small"
                    if "a" in scenarios:
                        saturation(srv, m, res)
                    if "c" in scenarios:
                        for name in (m, m + "_nobatch"):
                            g, best, steps = ladder(srv, name, reqs[name], pilot[m], fractions,
                                                    budgets[name], args)
                            res["served"][f"c:{name}"] = g
                            res["detail"][f"c:{name}"] = steps
            finally:
                srv.stop()
                c = srv.complaints()
                if c:
                    complaints[log] = c

    def inproc_phase(r, res):
        for m in inproc_models:
            v = in_process(paths[m], args.threads, args.inproc_seconds)
            res["inproc"][m] = v
            print(f"  in process {m}: " + ", ".join(f"b{b} {x:.1f}" for b, x in v.items())
                  + f" images/s (best {max(v.values()):.1f})", flush=True)

    for r in range(args.rounds):
        res = {"inproc": {}, "served": {}, "detail": {}}
        order = (inproc_phase, served_phase) if r % 2 == 0 else (served_phase, inproc_phase)
        print(f"round {r + 1}/{args.rounds} "
              f"({'in process first' if r % 2 == 0 else 'served first'}):", flush=True)
        for phase in order:
            phase(r, res)
        rounds.append(res)

    # ------------------------------------------------------------ the report
    rows = []
    labels = {
        "a:resnet50": ("(a) resnet50 saturation, 200s/s (open loop at "
                       f"{args.overload:g}x, p99 budget {args.sat_resnet_p99_ms:g} ms)",
                       "resnet50"),
        "a:mobilenet_v3_small": ("(a) mobilenet_v3_small saturation, 200s/s (open loop at "
                                 f"{args.overload:g}x, p99 budget "
                                 f"{args.sat_mobilenet_p99_ms:g} ms)",
                                 "mobilenet_v3_small"),
        "b:resnet50": (f"(b) resnet50 goodput at p99 <= {args.resnet_p99_ms:g} ms, req/s",
                       "resnet50"),
        "c:mobilenet_v3_small": (f"(c) mobilenet_v3_small goodput at p99 <= "
                                 f"{args.mobilenet_p99_ms:g} ms, batching on, req/s",
                                 "mobilenet_v3_small"),
        "c:mobilenet_v3_small_nobatch": (f"(c) mobilenet_v3_small goodput at p99 <= "
                                         f"{args.mobilenet_p99_ms:g} ms, batching off "
                                         "(max_batch_size 1), req/s", "mobilenet_v3_small"),
    }
    for key, (label, base) in labels.items():
        if key not in rounds[0]["served"]:
            continue
        served = [x["served"][key] for x in rounds]
        inp = [max(x["inproc"][base].values()) for x in rounds]
        ratios = [s / i for s, i in zip(served, inp)]
        rows.append((label, f"{med(served):.1f}", f"{med(inp):.1f} images/s (best batch)",
                     f"{med(ratios):.3f}x", len(rounds),
                     f"{min(ratios):.3f}-{max(ratios):.3f}x"))
    if "c:mobilenet_v3_small" in rounds[0]["served"]:
        on = [x["served"]["c:mobilenet_v3_small"] for x in rounds]
        off = [x["served"]["c:mobilenet_v3_small_nobatch"] for x in rounds]
        ratios = [a / b if b else float("inf") for a, b in zip(on, off)]
        rows.append(("(c) batching on / off, mobilenet_v3_small goodput", f"{med(on):.1f}",
                     f"{med(off):.1f} req/s (batching off, served)", f"{med(ratios):.3f}x",
                     len(rounds), f"{min(ratios):.3f}-{max(ratios):.3f}x"))

    print()
    print("In process, images/s by batch size: median [min-max] over rounds")
    print()
    print("| model | " + " | ".join(f"batch {b}" for b in BATCHES) + " |")
    print("| --- |" + " --- |" * len(BATCHES))
    for m in inproc_models:
        cells = []
        for b in BATCHES:
            v = [x["inproc"][m][b] for x in rounds]
            cells.append(f"{med(v):.1f} [{min(v):.1f}-{max(v):.1f}]")
        print(f"| {m} | " + " | ".join(cells) + " |")
    print()
    print("| scenario | figure | in-process figure | ratio (median of rounds) | rounds | "
          "min-max of the ratio |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print()
    print("Commands:")
    print(f"  this run:   {command}")
    for group, cmd in servers_cmd.items():
        print(f"  served ({group}): {cmd}")
    print(f"  in process: onnxruntime.InferenceSession(model.onnx, intra_op_num_threads="
          f"{args.threads}, inter_op_num_threads=1, CPUExecutionProvider), batches "
          f"{','.join(map(str, BATCHES))}, {args.inproc_seconds:g} s each")
    if complaints:
        print()
        print("tandem's log, WARN/ERROR lines:")
        for log, lines in complaints.items():
            print(f"  {log}:")
            for l in lines[:20]:
                print(f"    {l}")
            if len(lines) > 20:
                print(f"    ... {len(lines) - 20} more")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"command": command, "servers": servers_cmd, "pilot": pilot,
                   "rounds": rounds, "spot_checks": spot, "complaints": complaints,
                   "table": rows}, f, indent=1, default=str)
    print(f"\nwrote {os.path.join(args.out, 'results.json')}")


def ort_version():
    import onnxruntime
    return onnxruntime.__version__


if __name__ == "__main__":
    main()
