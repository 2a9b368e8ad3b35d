#!/usr/bin/env python3
"""Extracts one version's openAPIV3Schema from an upstream CustomResourceDefinition YAML
and writes it here as JSON, so that deploy/checks can validate our custom resources
offline. Descriptions are dropped (they do not take part in validation and are most of
the bytes); everything else is kept as upstream wrote it.

    python deploy/schemas/vendor.py CRD.yaml VERSION OUT.json

README.md beside this file names the upstream path and release of every schema.
"""

import json
import sys

import yaml


def strip_descriptions(node):
    """Removes `description` annotations from a schema, but not from `properties` maps,
    where `description` may be the name of a field."""
    if isinstance(node, list):
        return [strip_descriptions(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "description" and isinstance(value, str):
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: strip_descriptions(v) for k, v in value.items()}
        else:
            out[key] = strip_descriptions(value)
    return out


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    crd_path, version, out_path = argv[1:]
    with open(crd_path, encoding="utf-8") as f:
        crd = yaml.safe_load(f)
    matches = [v for v in crd["spec"]["versions"] if v["name"] == version]
    if not matches:
        sys.exit(f"{crd_path}: no version {version}")
    schema = strip_descriptions(matches[0]["schema"]["openAPIV3Schema"])
    document = {
        "group": crd["spec"]["group"],
        "kind": crd["spec"]["names"]["kind"],
        "version": version,
        "openAPIV3Schema": schema,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        # One line: the schemas are deep, and indenting them triples their size.
        json.dump(document, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
