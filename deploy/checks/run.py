#!/usr/bin/env python3
"""Offline checks of everything under deploy/: the Dockerfiles, the Kubernetes manifests
(rendered, validated against Kubernetes' and the vendored CRDs' schemas, and broken
fixtures rejected), the Prometheus rules (promtool check and unit tests), the Grafana
dashboard, and every PromQL expression among them (parsed by promtool; every metric it
reads present in a live scrape of tandem serve).

    deploy/checks/run.py [--scrape FILE] [--fresh-scrape FILE] [--cold-start-s S] [--tandem BIN]
                         [--require-tools]
    deploy/checks/run.py --write     # regenerate deploy/k8s/base/prometheusrule.yaml

--scrape is the text of GET /metrics from a running server that has served requests and
has a trainer connected (tests/operations.rs makes one); without it the metric names are
not checked. --fresh-scrape is the same text from a server that has just become ready (no
request, no trainer): every series the rules and dashboard read must be in it. --tandem
is the binary whose --help lists the flags (else src/cli/ is read). --cold-start-s is a
measured cold start (exec to the first answer): every startup probe and the scale-from-zero
wait must leave room for it. A missing external tool (promtool, kubectl or kustomize, cargo) skips the checks
that need it, unless --require-tools (or TANDEM_REQUIRE_TOOLS) is given.

Prints one line per check and a closing `N passed, N failed` line; exits 1 on a failure.
"""

import argparse
import copy
import os
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml  # noqa: E402

import dashboard  # noqa: E402
import docker  # noqa: E402
import flags as flagmod  # noqa: E402
import helm as helmchart  # noqa: E402
import kserve  # noqa: E402
import manifests  # noqa: E402
import promql  # noqa: E402
from common import DEPLOY, Missing, Report, rel, run, tool  # noqa: E402

RULES = DEPLOY / "prometheus" / "tandem.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "tests"
PROMETHEUS_RULE = DEPLOY / "k8s" / "base" / "prometheusrule.yaml"
DASHBOARD = DEPLOY / "grafana" / "tandem.json"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


class Context:
    """What the checks share: the known flags, the rendered manifests, the expressions
    collected for the PromQL check."""

    def __init__(self, args):
        self.args = args
        self.flags = None
        self.rendered = {}
        self.exprs = []
        self.recorded = set()


# -- the PrometheusRule generated from the rules file ------------------------------------


class _Literal(str):
    pass


def _literal(dumper, value):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


def prometheus_rule_text() -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]

    def lit(node):
        if isinstance(node, dict):
            return {k: lit(v) for k, v in node.items()}
        if isinstance(node, list):
            return [lit(v) for v in node]
        if isinstance(node, str) and ("\n" in node or len(node) > 80):
            return _Literal(node)
        return node

    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "tandem", "labels": {"app.kubernetes.io/name": "tandem"}},
        "spec": {"groups": lit(groups)},
    }
    dumper = yaml.SafeDumper
    dumper.add_representer(_Literal, _literal)
    body = yaml.dump(doc, Dumper=dumper, sort_keys=False, width=100)
    return (
        "# Generated from deploy/prometheus/tandem.rules.yml by `deploy/checks/run.py --write`:\n"
        "# edit that file, not this one (the checks fail while the two differ).\n" + body
    )


# -- the checks ---------------------------------------------------------------------------


def check_flags(ctx, report):
    if ctx.args.tandem:
        ctx.flags = flagmod.from_binary(ctx.args.tandem)
        report.note(f"flags from {ctx.args.tandem} --help")
    else:
        ctx.flags = flagmod.from_source()
        report.note("flags from src/cli/ (no --tandem binary given)")
    for sub in flagmod.SUBCOMMANDS:
        if not ctx.flags.get(sub):
            report.fail(f"found no flags of `tandem {sub}`")


def check_dockerfiles(ctx, report):
    docker.check(ctx.flags, report)


def check_configs(ctx, report):
    """The tandem.toml files the images and manifests ship are TOML; the Rust test
    (tests/operations.rs) starts the server with each, which checks their keys."""
    for path in sorted(DEPLOY.rglob("tandem.toml")):
        try:
            tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            report.fail(f"{rel(path)}: {e}")


def check_rules(ctx, report):
    promtool = tool("promtool", "PROMTOOL")
    out = run([promtool, "check", "rules", str(RULES)])
    if out.returncode != 0:
        report.fail(f"promtool check rules {rel(RULES)}:\n{out.stdout}{out.stderr}")
    tests = sorted(RULE_TESTS.glob("*.yml"))
    if not tests:
        report.fail(f"{rel(RULE_TESTS)}: no unit tests")
    out = run([promtool, "test", "rules", *map(str, tests)])
    if out.returncode != 0:
        report.fail(f"promtool test rules:\n{out.stdout}{out.stderr}")
    # Every alert has a unit test that expects it to fire.
    tested = set()
    for t in tests:
        for case in yaml.safe_load(t.read_text()).get("tests", []):
            for a in case.get("alert_rule_test", []):
                if a.get("exp_alerts"):
                    tested.add(a["alertname"])
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for g in groups:
        for r in g["rules"]:
            if "alert" in r and r["alert"] not in tested:
                report.fail(f"alert {r['alert']}: no unit test expects it to fire")
            if "record" in r:
                ctx.recorded.add(r["record"])
            name = r.get("record") or r.get("alert")
            ctx.exprs.append(promql.Expr(f"{rel(RULES)} {name}", r["expr"]))


def check_prometheus_rule_in_sync(ctx, report):
    want = prometheus_rule_text()
    if ctx.args.write:
        PROMETHEUS_RULE.write_text(want)
        report.note(f"wrote {rel(PROMETHEUS_RULE)}")
    elif not PROMETHEUS_RULE.exists() or PROMETHEUS_RULE.read_text() != want:
        report.fail(f"{rel(PROMETHEUS_RULE)} differs from {rel(RULES)}: run deploy/checks/run.py --write")
    if ctx.args.write:
        helmchart.write_rules_copy()
    else:
        helmchart.check_rules_copy(report)


def check_manifests(ctx, report):
    for k in manifests.KUSTOMIZATIONS:
        try:
            docs = manifests.render(DEPLOY / k)
        except RuntimeError as e:
            report.fail(f"deploy/{k} does not render:\n{e}")
            continue
        keep_validated(ctx, k, docs, report)
        report.note(f"deploy/{k}: {len(docs)} objects")


def keep_validated(ctx, key, docs, report):
    """Rendered objects, validated against their schemas and kept for the checks after."""
    ctx.rendered[key] = docs
    for doc in docs:
        for problem in manifests.validate(doc):
            report.fail(f"deploy/{key} {manifests.name_of(doc)}: {problem}")


def check_helm(ctx, report):
    """The chart: strict lint and a render for each of its ci/ values files, the rendered
    objects validated as the overlays are (and checked with them afterwards)."""
    for f in helmchart.values_files():
        key = f"helm/tandem {f.name}"
        for problem in helmchart.lint(f):
            report.fail(f"{key}: helm lint: {problem}")
        try:
            docs = helmchart.render(yaml.safe_load(f.read_text()) or {})
        except Exception as e:  # HelmError: the render's own message
            report.fail(f"{key} does not render: {e}")
            continue
        keep_validated(ctx, key, docs, report)
        report.note(f"{f.name}: {len(docs)} objects")
    if not helmchart.values_files():
        report.fail("deploy/helm/tandem/ci: no values files")


def check_helm_refusals(ctx, report):
    """Each broken values file fails to render, with its own message."""
    fixtures = list(helmchart.broken_fixtures())
    if not fixtures:
        report.fail("deploy/checks/fixtures/helm: no fixtures")
    for path, values, expect in fixtures:
        error = helmchart.rejection(values)
        if not error:
            report.fail(f"{rel(path)}: rendered, but it is broken")
        for e in expect:
            if error and e not in error:
                report.fail(f"{rel(path)}: refused, but not for {e!r}: {error}")
    report.note(f"{len(fixtures)} refused")


def _containers(doc):
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    if doc.get("kind") == "ServingRuntime":
        pod = spec
    if doc.get("kind") == "InferenceService":
        pod = spec.get("predictor", {})
    return pod.get("containers", []) + pod.get("initContainers", [])


def check_manifest_contents(ctx, report):
    """What the schemas cannot say: flags that exist, the probes and shutdown timing that
    tandem.toml implies, the GPU request, the trainer's socket."""
    for k, docs in ctx.rendered.items():
        for doc in docs:
            where = f"deploy/{k} {manifests.name_of(doc)}"
            for c in _containers(doc):
                words = (c.get("command") or []) + (c.get("args") or [])
                if not c.get("command") and words[:1] and words[0] not in flagmod.SUBCOMMANDS:
                    continue
                for sub, used in flagmod.invocations(words):
                    flagmod.check_invocation(ctx.flags, sub, used, f"{where} container {c['name']}", report)
            if doc.get("kind") == "Deployment":
                check_deployment(k, doc, where, report)
            if doc.get("kind") == "ScaledObject":
                for t in doc["spec"]["triggers"]:
                    if t["type"] == "prometheus":
                        ctx.exprs.append(promql.Expr(f"{where} trigger", t["metadata"]["query"]))
            if doc.get("kind") == "InferenceService":
                for m in doc["spec"]["predictor"].get("autoScaling", {}).get("metrics", []):
                    q = m.get("external", {}).get("metric", {}).get("query")
                    if q:
                        ctx.exprs.append(promql.Expr(f"{where} autoScaling", q))
            if doc.get("kind") == "ServingRuntime" and kserve.model_path_problem(doc):
                report.fail(f"{where}: {kserve.model_path_problem(doc)}")


def check_deployment(k, doc, where, report):
    pod = doc["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    tandem = containers.get("tandem")
    if not tandem:
        report.fail(f"{where}: no container named tandem")
        return
    if tandem.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/v2/health/ready":
        report.fail(f"{where}: readinessProbe must be GET /v2/health/ready")
    if tandem.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/v2/health/live":
        report.fail(f"{where}: livenessProbe must be GET /v2/health/live")
    # The shutdown budget: preStop, then tandem's drain and grace, within the kubelet's
    # terminationGracePeriodSeconds.
    config_maps = {}
    # The ConfigMap is a sibling document; find its tandem.toml through the volume.
    for v in pod.get("volumes", []):
        if "configMap" in v:
            config_maps[v["name"]] = v["configMap"]["name"]
    limits = _tandem_limits(k, config_maps.get("config"))
    pre_stop = tandem.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    tgps = pod.get("terminationGracePeriodSeconds", 30)
    need = pre_stop + (limits.get("shutdown_drain_ms", 0) + limits.get("shutdown_grace_ms", 30000)) / 1000
    if tgps <= need:
        report.fail(f"{where}: terminationGracePeriodSeconds {tgps} leaves no margin after "
                    f"preStop {pre_stop} s + drain + grace = {need:g} s")
    if not pre_stop:
        report.fail(f"{where}: no preStop sleep: Services keep routing for a few seconds after deletion")
    device = tandem["args"][tandem["args"].index("--device") + 1] if "--device" in tandem.get("args", []) else "auto"
    gpus = tandem.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if device.startswith("cuda") and not gpus:
        report.fail(f"{where}: --device {device} without an nvidia.com/gpu limit")
    if gpus and not device.startswith("cuda"):
        report.fail(f"{where}: an nvidia.com/gpu limit but --device {device}")
    trainer = containers.get("trainer")
    if trainer:
        script = " ".join((trainer.get("command") or []) + (trainer.get("args") or []))
        args = tandem.get("args", [])
        socket = args[args.index("--coloc-socket") + 1] if "--coloc-socket" in args else None
        if not socket:
            report.fail(f"{where}: the gateway names no --coloc-socket for its trainer")
        elif socket not in script:
            report.fail(f"{where}: the trainer does not use the gateway's socket {socket}")
        if not pod.get("shareProcessNamespace"):
            report.fail(f"{where}: a trainer beside the gateway needs shareProcessNamespace "
                        "(the gateway signals the trainer's pid)")


_LIMITS = {}


def _tandem_limits(k, config_map_name):
    """[limits] of the tandem.toml in the rendered ConfigMap."""
    return _LIMITS.get((k, config_map_name), {})


def collect_limits(ctx):
    for k, docs in ctx.rendered.items():
        for doc in docs:
            if doc.get("kind") == "ConfigMap" and "tandem.toml" in doc.get("data", {}):
                cfg = tomllib.loads(doc["data"]["tandem.toml"])
                _LIMITS[(k, doc["metadata"]["name"])] = cfg.get("limits", {})


KSERVE_RUNTIME = DEPLOY / "k8s" / "kserve" / "runtime"
INFERENCE_SERVICES = [DEPLOY / "k8s" / k / "inferenceservice.yaml" for k in ("kserve", "kserve-serverless")]


def check_kserve_webhook(ctx, report):
    """The InferenceServices against KServe v0.20's webhook, rule by rule, and their
    shutdown budget against the runtime's tandem.toml; the runtime serves what KServe
    mounts, and one without a model path is refused."""
    limits = tomllib.loads((KSERVE_RUNTIME / "tandem.toml").read_text()).get("limits", {})
    for path in INFERENCE_SERVICES:
        isvc = yaml.safe_load(path.read_text())
        kserve.check(isvc, report, rel(path))
        kserve.check_shutdown(isvc, limits, report, rel(path))
    knative = yaml.safe_load(INFERENCE_SERVICES[1].read_text())
    knative["spec"]["predictor"]["terminationGracePeriodSeconds"] = 30
    refused = Report("breakage")
    kserve.check_shutdown(knative, limits, refused, "breakage")
    if not refused.problems:
        report.fail("a Knative InferenceService with terminationGracePeriodSeconds passes the shutdown check")
    runtime = yaml.safe_load((KSERVE_RUNTIME / "servingruntime.yaml").read_text())
    problem = kserve.model_path_problem(runtime)
    if problem:
        report.fail(f"{rel(KSERVE_RUNTIME / 'servingruntime.yaml')}: {problem}")
    broken = copy.deepcopy(runtime)
    args = broken["spec"]["containers"][0]["args"]
    del args[args.index("--model"):args.index("--model") + 2]
    if not kserve.model_path_problem(broken):
        report.fail("a ServingRuntime without a model path passes the model-path check")


# A pod's own start before tandem's: scheduling, the image from a warm node, the container.
POD_START_S = 20
# Cold starts on a loaded node, a cold page cache or a slower CPU than the one measured.
COLD_START_MARGIN = 3


def _startup_budget(container):
    p = container.get("startupProbe") or {}
    return p.get("initialDelaySeconds", 0) + p.get("periodSeconds", 10) * p.get("failureThreshold", 3)


def check_probe_budgets(ctx, report):
    """The probes and the scale-from-zero wait leave room for the cold start measured
    (--cold-start-s): every startup probe's budget, and the HTTP add-on's conditionWait
    after a pod's start, hold COLD_START_MARGIN times it."""
    if not ctx.args.cold_start_s:
        report.note("no --cold-start-s: probe budgets not checked against a measured cold start")
        return
    need = COLD_START_MARGIN * ctx.args.cold_start_s
    for k, docs in ctx.rendered.items():
        for doc in docs:
            where = f"deploy/{k} {manifests.name_of(doc)}"
            for c in _containers(doc):
                if c["name"] in ("tandem", "kserve-container") and _startup_budget(c) < need:
                    report.fail(f"{where} container {c['name']}: the startupProbe allows "
                                f"{_startup_budget(c)} s, under {COLD_START_MARGIN} x the measured "
                                f"cold start of {ctx.args.cold_start_s:.2f} s")
            if doc.get("kind") == "HTTPScaledObject":
                wait = doc["spec"].get("timeouts", {}).get("conditionWait", "")
                seconds = _duration_s(wait)
                if seconds < POD_START_S + need:
                    report.fail(f"{where}: conditionWait {wait or 'unset'} holds the first request "
                                f"under a pod's start ({POD_START_S} s) + {COLD_START_MARGIN} x "
                                f"the cold start of {ctx.args.cold_start_s:.2f} s")
    report.note(f"cold start {ctx.args.cold_start_s:.2f} s")


def _duration_s(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in ("ms", "s", "m", "h"):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * units[unit]
    return 0


def check_dashboard(ctx, report):
    ctx.exprs.extend(dashboard.check(DASHBOARD, report))


def check_promql(ctx, report):
    promtool = tool("promtool", "PROMTOOL")
    promql.parse_all(promtool, ctx.exprs, report)
    scraped = None
    if ctx.args.scrape:
        scraped = promql.scrape_names(Path(ctx.args.scrape).read_text())
    else:
        report.note("no --scrape: metric names not checked against a live server")
    promql.check_names(ctx.exprs, ctx.recorded, scraped, report)
    if ctx.args.fresh_scrape:
        fresh = promql.scrape_names(Path(ctx.args.fresh_scrape).read_text())
        promql.check_present_from_start(ctx.exprs, fresh, report)
    report.note(f"{len(ctx.exprs)} expressions")


def check_fixtures(ctx, report):
    """Each broken manifest under fixtures/ must be rejected by the same validation, with
    the problem its `# expect:` line names."""
    fixtures = sorted(FIXTURES.glob("*.yaml"))
    if not fixtures:
        report.fail(f"{rel(FIXTURES)}: no fixtures")
    for f in fixtures:
        text = f.read_text()
        expect = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("# expect:")]
        problems = []
        for doc in yaml.safe_load_all(text):
            if doc:
                problems += manifests.validate(doc)
        if not problems:
            report.fail(f"{rel(f)}: accepted, but it is broken")
            continue
        for e in expect:
            if not any(e in p for p in problems):
                report.fail(f"{rel(f)}: rejected, but not for {e!r}: {problems}")


CHECKS = [
    ("tandem flags", check_flags),
    ("Dockerfiles", check_dockerfiles),
    ("tandem.toml files", check_configs),
    ("Prometheus rules and unit tests", check_rules),
    ("PrometheusRule in sync with the rules", check_prometheus_rule_in_sync),
    ("manifests render and validate", check_manifests),
    ("Helm chart lints, renders and validates (Helm v4 SDK)", check_helm),
    ("Helm chart refuses broken values", check_helm_refusals),
    ("manifests' flags, probes, shutdown, GPU, trainer", check_manifest_contents),
    ("broken fixtures rejected", check_fixtures),
    ("InferenceService against KServe v0.20's webhook rules; its shutdown budget", check_kserve_webhook),
    ("probes against the measured cold start", check_probe_budgets),
    ("Grafana dashboard", check_dashboard),
    ("PromQL parses; metrics exist", check_promql),
]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scrape", help="a live /metrics text of tandem serve")
    p.add_argument("--fresh-scrape", help="/metrics of a server just started (no request, no trainer)")
    p.add_argument("--cold-start-s", type=float, help="a measured exec-to-first-answer time, in seconds")
    p.add_argument("--tandem", help="the tandem binary, whose --help lists its flags")
    p.add_argument("--require-tools", action="store_true",
                   default=bool(os.environ.get("TANDEM_REQUIRE_TOOLS")))
    p.add_argument("--write", action="store_true", help="regenerate the PrometheusRule")
    args = p.parse_args(argv)
    ctx = Context(args)
    passed = failed = skipped = 0
    for name, fn in CHECKS:
        report = Report(name)
        try:
            fn(ctx, report)
        except Missing as e:
            if args.require_tools:
                report.fail(f"{e} (tools are required)")
            else:
                report.skipped = str(e)
        except Exception as e:  # a check that cannot finish has failed, and says where
            report.fail(f"{type(e).__name__}: {e}")
        if name.startswith("manifests render") or name.startswith("Helm chart lints"):
            collect_limits(ctx)
        if report.skipped:
            skipped += 1
            print(f"SKIPPED {name}: {report.skipped}")
        elif report.problems:
            failed += 1
            print(f"FAILED  {name}")
            for problem in report.problems:
                print("    " + problem.replace("\n", "\n    "))
        else:
            passed += 1
            print(f"ok      {name}" + (f"  ({'; '.join(report.notes)})" if report.notes else ""))
    print(f"checks: {passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
