"""What every check shares: the repository's paths, the report of findings, and running
an external tool."""

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


class Missing(Exception):
    """An external tool the check needs is not installed."""


@dataclass
class Report:
    """The findings of one check: problems fail it; a missing tool skips it."""

    name: str
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    skipped: str = ""

    def fail(self, message: str):
        self.problems.append(message)

    def note(self, message: str):
        self.notes.append(message)


def rel(path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def tool(name: str, env_var: str = "") -> str:
    """The path of an executable, from env_var if set, else from PATH."""
    if env_var and os.environ.get(env_var):
        return os.environ[env_var]
    found = shutil.which(name)
    if not found:
        raise Missing(f"{name} not found on PATH")
    return found


def run(argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)
