"""The InferenceServices the KServe kits ship, held against the rules KServe v0.20's
validating webhook applies to it, as that release's source writes them (each rule names
its file and lines at tag v0.20.0 of github.com/kserve/kserve). A schema check cannot see
these: they are Go code, not the CRD. Each rule also gets a copy of the shipped object
broken the way the rule refuses, which must fail it, so that a rule that can never fail is
caught too.
"""

import copy
import re

VALIDATION = "pkg/apis/serving/v1beta1/inference_service_validation.go"
COMPONENT = "pkg/apis/serving/v1beta1/component.go"
CONSTANTS = "pkg/constants/constants.go"
# constants.go lines 250-254 and 276-282.
ALLOWED_CLASSES = {"hpa", "external", "keda", "none"}
# inference_service_validation.go line 46.
NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _predictor(isvc):
    return isvc.get("spec", {}).get("predictor", {})


def _annotations(isvc):
    return isvc.get("metadata", {}).get("annotations", {}) or {}


def _keda(isvc):
    """Whether the KEDA rules apply (validateAutoScalingCompExtension, lines 446-466)."""
    a = _annotations(isvc)
    return (a.get("serving.kserve.io/deploymentMode") == "Standard"
            and a.get("serving.kserve.io/autoscalerClass") == "keda")


def _knative(isvc):
    """Whether the KPA rules apply (lines 459-463: any mode but Standard, no HPA class)."""
    a = _annotations(isvc)
    mode = a.get("serving.kserve.io/deploymentMode", "Standard")
    return mode in ("Knative", "Serverless") and a.get("autoscaling.knative.dev/class") != "hpa.autoscaling.knative.dev"


def _metrics(isvc):
    return (_predictor(isvc).get("autoScaling") or {}).get("metrics") or []


def _scale_target_ok(target):
    """validateScaleTarget, lines 508-525."""
    kind = target.get("type")
    if kind == "Utilization":
        u = target.get("averageUtilization")
        return u is not None and 1 <= u <= 100
    if kind == "AverageValue":
        return target.get("averageValue") is not None
    if kind == "Value":
        return target.get("value") is not None
    return True


def _every_external(isvc, holds):
    """`holds` of every External metric's `external` (None where it is missing), under KEDA
    (lines 601-613); true where KEDA's rules do not apply."""
    externals = [m.get("external") for m in _metrics(isvc) if m.get("type") == "External"]
    return not _keda(isvc) or all(holds(e) for e in externals)


def _replicas_ok(isvc):
    """validateReplicas, component.go lines 374-388 (minReplicas defaults to 1)."""
    p = _predictor(isvc)
    lo, hi = p.get("minReplicas", 1), p.get("maxReplicas", 0)
    return lo >= 0 and hi >= 0 and (hi == 0 or lo <= hi)


def _set(path, value):
    """A breakage: the shipped object with `path` (keys and list indices) set to `value`,
    or removed where value is the marker DELETE."""

    def apply(isvc):
        node = isvc
        for key in path[:-1]:
            node = node[key]
        if value is DELETE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value

    return apply


DELETE = object()
PRED = ["spec", "predictor"]
EXTERNAL = PRED + ["autoScaling", "metrics", 0, "external"]

# (where, what, holds, a breakage the rule must refuse)
COMMON = [
    (f"{VALIDATION}:469-475", "the name is a DNS-1035 label",
     lambda i: bool(NAME.match(i["metadata"]["name"])), _set(["metadata", "name"], "MiniLM")),
    (f"{VALIDATION}:477-491, {CONSTANTS}:276-282", "the autoscaler class is hpa, external, keda or none",
     lambda i: _annotations(i).get("serving.kserve.io/autoscalerClass", "hpa") in ALLOWED_CLASSES,
     _set(["metadata", "annotations", "serving.kserve.io/autoscalerClass"], "kpa")),
    (f"{COMPONENT}:374-388", "0 <= minReplicas <= maxReplicas",
     _replicas_ok, _set(PRED + ["minReplicas"], 9)),
]

# Standard deployment mode with the keda autoscaler class.
KEDA_RULES = COMMON + [
    (f"{VALIDATION}:567-570", "no scaleMetric under KEDA",
     lambda i: not _keda(i) or "scaleMetric" not in _predictor(i), _set(PRED + ["scaleMetric"], "cpu")),
    (f"{VALIDATION}:574-630", "KEDA metrics are Resource, External or PodMetric",
     lambda i: not _keda(i) or all(m.get("type") in ("Resource", "External", "PodMetric")
                                  for m in _metrics(i)),
     _set(PRED + ["autoScaling", "metrics", 0, "type"], "Pods")),
    (f"{VALIDATION}:601-604", "an External metric has `external`",
     lambda i: _every_external(i, lambda e: e is not None), _set(EXTERNAL, DELETE)),
    (f"{VALIDATION}:605-607", "an External metric has a query",
     lambda i: _every_external(i, lambda e: bool(((e or {}).get("metric") or {}).get("query"))),
     _set(EXTERNAL + ["metric", "query"], "")),
    (f"{VALIDATION}:608-610", "an External metric's target has `value` (averageValue alone is refused)",
     lambda i: _every_external(i, lambda e: ((e or {}).get("target") or {}).get("value") is not None),
     _set(EXTERNAL + ["target"], {"type": "AverageValue", "averageValue": "1"})),
    (f"{VALIDATION}:508-525", "a target's type has its field (Utilization: averageUtilization 1-100)",
     lambda i: all(_scale_target_ok((m.get("external") or {}).get("target") or {}) for m in _metrics(i)),
     _set(EXTERNAL + ["target"], {"type": "Utilization", "value": "1"})),
]

# Knative deployment mode (KPA), validateScalingKPACompExtension.
KPA_RULES = COMMON + [
    (f"{VALIDATION}:646-648", "no deploymentStrategy (raw deployment mode only)",
     lambda i: not _knative(i) or "deploymentStrategy" not in _predictor(i),
     _set(PRED + ["deploymentStrategy"], {"type": "Recreate"})),
    (f"{VALIDATION}:649-657, {CONSTANTS}:290-294", "the scaleMetric is concurrency or rps",
     lambda i: not _knative(i) or _predictor(i).get("scaleMetric", "concurrency") in ("concurrency", "rps"),
     _set(PRED + ["scaleMetric"], "cpu")),
    (f"{VALIDATION}:659-665", "an rps target is at least 1",
     lambda i: not _knative(i) or _predictor(i).get("scaleMetric") != "rps"
     or _predictor(i).get("scaleTarget", 1) >= 1,
     lambda i: _predictor(i).update(scaleMetric="rps", scaleTarget=0)),
]


def check_shutdown(isvc, limits, report, where):
    """The runtime drains before it stops (readiness 503 while the endpoints drop the pod),
    and the kubelet waits past its drain and grace before it kills: in Standard mode the
    predictor's terminationGracePeriodSeconds; on Knative the revision timeout, from which
    Knative sets it (its webhook refuses the field: "must not set the field(s):
    spec.template.spec.terminationGracePeriodSeconds")."""
    drain = limits.get("shutdown_drain_ms", 0) / 1000
    grace = limits.get("shutdown_grace_ms", 30000) / 1000
    if drain <= 0:
        report.fail(f"{where}: shutdown_drain_ms must be above 0: requests would meet a closed listener")
    predictor = _predictor(isvc)
    if _knative(isvc):
        if "terminationGracePeriodSeconds" in predictor:
            report.fail(f"{where}: Knative refuses terminationGracePeriodSeconds; set the predictor's timeout")
        field, budget = "timeout", predictor.get("timeout", 300)
    else:
        field, budget = "terminationGracePeriodSeconds", predictor.get("terminationGracePeriodSeconds", 30)
    if budget <= drain + grace:
        report.fail(f"{where}: {field} {budget} leaves no margin after drain {drain:g} s + grace {grace:g} s")


def check(isvc, report, where):
    """Every rule of the InferenceService's mode holds for the shipped `isvc`, and each
    rule's breakage fails it."""
    if _keda(isvc):
        rules = KEDA_RULES
    elif _knative(isvc):
        rules = KPA_RULES
    else:
        report.fail(f"{where}: expected deploymentMode Standard with the keda autoscaler class, or Knative")
        return
    for source, what, holds, breakage in rules:
        if not holds(isvc):
            report.fail(f"{where}: KServe v0.20 would refuse it: {what} ({source})")
        broken = copy.deepcopy(isvc)
        breakage(broken)
        if holds(broken):
            report.fail(f"the rule {what!r} ({source}) passes its own breakage: it checks nothing")
    report.note(f"{where}: {len(rules)} webhook rules of KServe v0.20")


def model_path_problem(runtime) -> str:
    """Why a ServingRuntime would not serve what KServe mounts, or "": protocol v2, and
    the model at /mnt/models, as `--model {{.Name}}=/mnt/models` or `--model-repository
    /mnt/models`."""
    spec = runtime.get("spec", {})
    if "v2" not in spec.get("protocolVersions", []):
        return "must speak protocol v2"
    args = (spec.get("containers") or [{}])[0].get("args") or []
    pairs = set(zip(args, args[1:]))
    if ("--model", "{{.Name}}=/mnt/models") in pairs or ("--model-repository", "/mnt/models") in pairs:
        return ""
    return "must serve the model KServe mounts: --model {{.Name}}=/mnt/models (or --model-repository /mnt/models)"


def runtime_args(runtime, name: str, model_dir: str) -> list:
    """The serving container's args as KServe runs them for an InferenceService `name`
    whose model the storage initializer put in `model_dir` (for /mnt/models)."""
    args = runtime["spec"]["containers"][0]["args"]
    return [a.replace("{{.Name}}", name).replace("/mnt/models", model_dir) for a in args]


if __name__ == "__main__":
    # kserve.py runtime-args NAME MODEL_DIR: the shipped runtime's args, as JSON.
    import json
    import sys

    import yaml

    from common import DEPLOY

    if len(sys.argv) != 4 or sys.argv[1] != "runtime-args":
        sys.exit("usage: kserve.py runtime-args NAME MODEL_DIR")
    shipped = yaml.safe_load((DEPLOY / "k8s" / "kserve" / "runtime" / "servingruntime.yaml").read_text())
    print(json.dumps(runtime_args(shipped, sys.argv[2], sys.argv[3])))
