"""The Kubernetes manifests: each kustomization renders (`kubectl kustomize`, or the
standalone `kustomize build`); built-in kinds validate with kubernetes-validate in strict
mode; custom resources validate against the vendored CRD schemas (deploy/schemas/) as the
API server would with strict field validation: an unknown field is an error.
"""

import copy
import json
from pathlib import Path

import jsonschema
import yaml

from common import DEPLOY, Missing, run, tool

# The oldest Kubernetes the manifests are written for: lifecycle.preStop.sleep is on by
# default from 1.30, and the KEDA and KServe releases docs/deploy.md installs support
# 1.32 and later.
KUBERNETES_VERSION = "1.32"

KUSTOMIZATIONS = ["k8s/overlays/cpu", "k8s/overlays/gpu", "k8s/kserve", "k8s/kserve-serverless"]

CUSTOM = {
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_v1alpha1_scaledobject.json",
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "serving.kserve.io_v1alpha1_servingruntime.json",
    ("serving.kserve.io/v1beta1", "InferenceService"): "serving.kserve.io_v1beta1_inferenceservice.json",
    ("http.keda.sh/v1alpha1", "HTTPScaledObject"): "http.keda.sh_v1alpha1_httpscaledobject.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_v1_podmonitor.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_v1_servicemonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_v1_prometheusrule.json",
}


def render(directory: Path) -> list:
    """The documents a kustomization renders to."""
    try:
        argv = [tool("kubectl", "KUBECTL"), "kustomize", str(directory)]
    except Missing:
        argv = [tool("kustomize", "KUSTOMIZE"), "build", str(directory)]
    out = run(argv)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or out.stdout.strip())
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def strict(schema):
    """A CRD's structural schema as the API server applies it under strict field
    validation: objects that list their properties accept no others (unless they
    preserve unknown fields), int-or-string means either, nullable admits null."""
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, list):
            for n in node:
                walk(n)
            return
        if not isinstance(node, dict):
            return
        if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
            node.pop("type", None)
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if node.get("nullable") and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        if (
            node.get("type") == "object"
            and "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for key, value in node.items():
            if key in ("properties", "patternProperties"):
                for v in value.values():
                    walk(v)
            elif isinstance(value, (dict, list)):
                walk(value)

    walk(s)
    # The root's apiVersion, kind and metadata are the API server's, not the CRD's.
    s.setdefault("properties", {})["metadata"] = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
            "namespace": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "additionalProperties": False,
    }
    return s


_SCHEMAS = {}


def custom_schema(api_version, kind):
    key = (api_version, kind)
    if key not in CUSTOM:
        return None
    if key not in _SCHEMAS:
        doc = json.loads((DEPLOY / "schemas" / CUSTOM[key]).read_text())
        _SCHEMAS[key] = strict(doc["openAPIV3Schema"])
    return _SCHEMAS[key]


def validate(doc: dict):
    """Problems with one document (empty when it is valid)."""
    api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
    schema = custom_schema(api_version, kind)
    if schema is not None:
        validator = jsonschema.Draft7Validator(schema)
        return [
            f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path)))
        ]
    if "." in api_version.split("/")[0] and not api_version.endswith(".k8s.io/v1"):
        if not api_version.startswith(("apps/", "batch/", "policy/", "autoscaling/")):
            return [f"{api_version} {kind}: no schema vendored in deploy/schemas"]
    import kubernetes_validate

    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError as e:
        return [str(e)]
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path) or "(root)"
        return [f"{path}: {e.message}"]
    return []


def name_of(doc):
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
