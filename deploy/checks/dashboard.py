"""deploy/grafana/tandem.json: a datasource variable every panel uses, unique panel ids,
panels that do not overlap on Grafana's 24-column grid, and every target's expression
(with the dashboard's variables substituted) for the PromQL checks."""

import json

from promql import Expr, substitute_grafana

GRID_COLUMNS = 24


def all_panels(dashboard):
    for p in dashboard.get("panels", []):
        yield p
        # A collapsed row holds its panels inside it.
        yield from p.get("panels", [])


def check(path, report):
    """Checks the dashboard and returns its expressions."""
    where = path.name
    dashboard = json.loads(path.read_text())
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    ds = [v for v in variables.values() if v.get("type") == "datasource"]
    if not ds or ds[0].get("query") != "prometheus":
        report.fail(f"{where}: no datasource variable of type prometheus")
    ds_ref = "${%s}" % ds[0]["name"] if ds else None
    for name in ("model",):
        if name not in variables:
            report.fail(f"{where}: no `{name}` variable")

    panels = list(all_panels(dashboard))
    ids = [p.get("id") for p in panels]
    dupes = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    if dupes or None in ids:
        report.fail(f"{where}: panel ids not unique or missing: {dupes or 'missing id'}")

    cells = {}
    for p in panels:
        g = p.get("gridPos")
        if not g:
            report.fail(f"{where}: panel {p.get('id')} has no gridPos")
            continue
        if g["x"] < 0 or g["w"] <= 0 or g["h"] <= 0 or g["x"] + g["w"] > GRID_COLUMNS:
            report.fail(f"{where}: panel {p.get('id')} lies outside the grid: {g}")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    report.fail(
                        f"{where}: panels {cells[(x, y)]} and {p.get('id')} overlap at x={x}, y={y}"
                    )
                    break
                cells[(x, y)] = p.get("id")
            else:
                continue
            break

    # Values for the substitution: multi-value variables become their allValue regex.
    values = {
        name: (v.get("allValue") or ".*")
        for name, v in variables.items()
        if v.get("type") in ("query", "custom")
    }
    exprs = []
    for p in panels:
        if p.get("type") == "row":
            continue
        title = p.get("title", "")
        if ds_ref and p.get("datasource", {}).get("uid") != ds_ref:
            report.fail(f"{where}: panel {p['id']} ({title}) does not use the datasource variable")
        if not p.get("targets"):
            report.fail(f"{where}: panel {p['id']} ({title}) has no query")
        for t in p.get("targets", []):
            if ds_ref and t.get("datasource", {}).get("uid") != ds_ref:
                report.fail(f"{where}: panel {p['id']} target {t.get('refId')}: not the datasource variable")
            exprs.append(
                Expr(f"{where} panel {p['id']} '{title}' {t.get('refId')}",
                     substitute_grafana(t["expr"], values))
            )
    # Query variables read series too: label_values(SELECTOR, label) is Grafana's, but
    # its selector is PromQL.
    for name, v in variables.items():
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and q and q.startswith("label_values("):
            selector = q[len("label_values("):].rsplit(",", 1)[0]
            exprs.append(Expr(f"{where} variable {name}", substitute_grafana(selector, values)))
    return exprs
