"""Every PromQL expression the deploy artifacts hold: in the rules, in the autoscalers'
queries, in the dashboard's targets. Each must parse, and each metric it reads must be
one tandem exports (a live scrape says which) or a recording rule of ours.

Parsing: promtool 2.42 has no `promtool query`; it parses PromQL when it checks a rules
file, so each expression becomes a recording rule in a generated file, and promtool's
error names the rule, which maps back to where the expression came from.
"""

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from common import run

# What Grafana puts in place of its variables, so that the expression promtool sees is
# the one Prometheus receives: the dashboard's multi-value variables become regexes
# (their allValue), the interval variables durations.
GRAFANA_SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
}


@dataclass
class Expr:
    where: str  # file and position, for messages
    expr: str


def substitute_grafana(expr: str, variables: dict) -> str:
    for k, v in GRAFANA_SUBSTITUTIONS.items():
        expr = expr.replace(k, v)
    for name, value in variables.items():
        expr = expr.replace("${%s}" % name, value).replace("$" + name, value)
    return expr


def parse_all(promtool: str, exprs, report):
    """Runs every expression through promtool's parser; a failure names its source."""
    if not exprs:
        return
    rules = [{"record": f"check:expr_{i}", "expr": e.expr} for i, e in enumerate(exprs)]
    with tempfile.TemporaryDirectory(prefix="tandem-promql-") as tmp:
        path = Path(tmp) / "exprs.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": rules}]}))
        out = run([promtool, "check", "rules", str(path)])
    if out.returncode == 0:
        return
    text = out.stdout + out.stderr
    blamed = set()
    for m in re.finditer(r"check:expr_(\d+)", text):
        blamed.add(int(m.group(1)))
    # promtool names the rule by its position when it cannot parse the expression.
    for m in re.finditer(r"group \"check\", rule (\d+)", text):
        blamed.add(int(m.group(1)) - 1)
    for i in sorted(blamed):
        report.fail(f"{exprs[i].where}: does not parse: {exprs[i].expr}")
    if not blamed:
        report.fail("promtool check rules on the expressions failed:\n" + text.strip())
    else:
        report.note(text.strip())


STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
NAME = re.compile(r"(?<![\w:])([a-zA-Z_:][a-zA-Z0-9_:]*)")


def metric_names(expr: str):
    """The series names an expression reads: identifiers that start with tandem_ (every
    metric it exports does) or contain a colon (recording rules), outside strings and
    label matchers. Label names never start with tandem_ here."""
    bare = STRING.sub('""', expr)
    bare = re.sub(r"\{[^}]*\}", "{}", bare)
    names = set()
    for m in NAME.finditer(bare):
        word = m.group(1)
        if word.startswith("tandem_") or (":" in word and not word.startswith(":")):
            names.add(word)
    return names


def scrape_names(text: str):
    """Sample names in a Prometheus text exposition."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, 1)[0])
    return names


def check_names(exprs, recorded: set, scraped, report):
    """Every name is exported (in the scrape) or recorded by our rules. With no scrape,
    says so and checks only that recording-rule names exist."""
    missing = {}
    for e in exprs:
        for name in metric_names(e.expr):
            if ":" in name:
                if name not in recorded:
                    report.fail(f"{e.where}: reads {name}, which no recording rule records")
            elif scraped is not None and name not in scraped:
                missing.setdefault(name, []).append(e.where)
    for name, places in sorted(missing.items()):
        shown = "; ".join(places[:4]) + (f"; and {len(places) - 4} more" if len(places) > 4 else "")
        report.fail(f"{name} is not in the live scrape of tandem serve, but is read by: {shown}")


# Series born with a connected trainer (labelled by its slot): no trainer, no series.
BORN_WITH_A_TRAINER = re.compile(r"^tandem_trainer_")


def check_present_from_start(exprs, fresh, report):
    """Every series the rules and dashboard read is in the scrape of a server that has
    just started (no request served, no trainer connected), so an alert or panel never
    reads an absent series; per-trainer series excepted."""
    missing = {}
    for e in exprs:
        for name in metric_names(e.expr):
            if ":" in name or BORN_WITH_A_TRAINER.match(name):
                continue
            if name not in fresh:
                missing.setdefault(name, []).append(e.where)
    for name, places in sorted(missing.items()):
        shown = "; ".join(places[:4]) + (f"; and {len(places) - 4} more" if len(places) > 4 else "")
        report.fail(f"{name} is absent from a fresh server's scrape, but is read by: {shown}")
