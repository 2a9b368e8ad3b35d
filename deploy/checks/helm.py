"""The Helm chart (deploy/helm/tandem), through Helm v4's own Go code: the helm-python-sdk
wheel binds libhelm_c, Helm's SDK built as a C library, so `helm lint` and `helm template`
run here without a Go toolchain or a helm binary. Each values file under the chart's ci/
lints clean (strict) and renders; the rendered objects go through the same schema and
content checks as the kustomize overlays. Each broken values file under
fixtures/helm/ must fail with the message its `# expect:` line names.
"""

from pathlib import Path

import yaml

from common import DEPLOY, Missing, rel

CHART = DEPLOY / "helm" / "tandem"
RULES_COPY = CHART / "files" / "tandem.rules.yml"
BROKEN = Path(__file__).resolve().parent / "fixtures" / "helm"
RELEASE, NAMESPACE = "tandem", "tandem"
KUBE_VERSION = "v1.32.0"


def _helm():
    try:
        import helm_python
    except ImportError as e:
        raise Missing(f"helm-python-sdk (Helm v4's SDK) is not installed: {e}") from e
    return helm_python


def values_files():
    return sorted((CHART / "ci").glob("*-values.yaml"))


def lint(values_path: Path):
    """Helm's lint findings of warning or error severity, as text."""
    helm = _helm()
    values = yaml.safe_load(values_path.read_text()) or {}
    found = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=KUBE_VERSION)
    messages = [f"{m.get('path', '')}: {m.get('error', '')}" for m in found.get("messages") or []
                if m.get("severity", 0) >= 2]
    return messages + list(found.get("errors") or [])


def render(values: dict) -> list:
    """The objects `helm template` renders for these values (NOTES.txt left out)."""
    helm = _helm()
    chart = helm.Chart.load(CHART)
    chart.validate_schema(values)
    files = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs = []
    for path, text in sorted(files.items()):
        if path.endswith(".txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        d.setdefault("metadata", {}).setdefault("namespace", NAMESPACE)
    return docs


def rejection(values: dict) -> str:
    """The error rendering these values gives, or "" where they render."""
    helm = _helm()
    try:
        render(values)
    except helm.HelmError as e:
        return str(e)
    return ""


def broken_fixtures():
    """(path, values, [expected message parts]) of every broken values file."""
    for f in sorted(BROKEN.glob("*.yaml")):
        text = f.read_text()
        expect = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("# expect:")]
        yield f, yaml.safe_load(text) or {}, expect


def check_rules_copy(report):
    source = DEPLOY / "prometheus" / "tandem.rules.yml"
    if RULES_COPY.read_text() != source.read_text():
        report.fail(f"{rel(RULES_COPY)} differs from {rel(source)}: run deploy/checks/run.py --write")


def write_rules_copy():
    RULES_COPY.write_text((DEPLOY / "prometheus" / "tandem.rules.yml").read_text())


def serve_command(values_path: Path):
    """What the chart's Deployment runs for these values: the tandem container's args and
    the tandem.toml its ConfigMap holds."""
    docs = render(yaml.safe_load(values_path.read_text()) or {})
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    tandem = next(c for c in containers if c["name"] == "tandem")
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["tandem.toml"]
    return {"args": tandem["args"], "config": config}


if __name__ == "__main__":
    # helm.py serve-command VALUES_FILE: the rendered serve command, as JSON.
    import json
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "serve-command":
        sys.exit("usage: helm.py serve-command VALUES_FILE")
    print(json.dumps(serve_command(Path(sys.argv[2]))))
