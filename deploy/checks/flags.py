"""Which `tandem` subcommands and flags exist, and which ones an artifact uses.

The truth is the binary's own `--help` (clap prints every long flag); without a binary,
src/cli/ is read instead (the fields of its `Args` structs become `--kebab-case` flags).
"""

import re
import shlex

from common import REPO, run

SUBCOMMANDS = ("serve", "train")
HELP_FLAG = re.compile(r"^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)", re.M)


def from_binary(binary: str) -> dict:
    flags = {}
    for sub in SUBCOMMANDS:
        out = run([binary, sub, "--help"])
        if out.returncode != 0:
            raise RuntimeError(f"{binary} {sub} --help: {out.stderr.strip()}")
        flags[sub] = set(HELP_FLAG.findall(out.stdout))
    return flags


def from_source() -> dict:
    """Long flags of ServeArgs and TrainArgs in src/cli/, those of the structs they
    flatten included."""
    text = "\n".join(p.read_text() for p in sorted((REPO / "src" / "cli").glob("*.rs")))
    return {sub: _struct_flags(text, struct) for sub, struct in (("serve", "ServeArgs"), ("train", "TrainArgs"))}


def _struct_flags(text: str, struct: str) -> set:
    body = re.search(r"pub struct %s \{(.*?)\n\}" % struct, text, re.S)
    if not body:
        raise RuntimeError(f"src/cli: no struct {struct}")
    found = {"help"}
    # Each field with #[arg(...)] attributes; `long = "x"` renames it.
    for attrs, name in re.findall(r"((?:#\[arg\([^\]]*\)\]\s*)+)pub (\w+):", body.group(1)):
        if "long" not in attrs:
            continue
        renamed = re.search(r'long\s*=\s*"([^"]+)"', attrs)
        found.add(renamed.group(1) if renamed else name.replace("_", "-"))
    for inner in re.findall(r"#\[command\(flatten\)\]\s*pub \w+: (\w+)", body.group(1)):
        found |= _struct_flags(text, inner)
    return found


def invocations(words):
    """`tandem SUB --flag ...` invocations in a command line, given as a list of words
    (an exec-form CMD, a container's command + args) or inside a shell script passed to
    `sh -c`. Yields (subcommand, [flags])."""
    words = list(words)
    if len(words) >= 3 and words[0].endswith("sh") and words[1] == "-c":
        yield from _in_script(" ".join(words[2:]))
        return
    if words and words[0] in SUBCOMMANDS:  # args of an image whose ENTRYPOINT is tandem
        words = ["tandem"] + words
    yield from _in_words(words)


def _in_script(script: str):
    for part in re.split(r";|&&|\|\||\n", script):
        yield from _in_words(shlex.split(part))


def _in_words(words):
    for i, w in enumerate(words):
        if (w == "tandem" or w.endswith("/tandem")) and i + 1 < len(words):
            sub = words[i + 1]
            used = [a.split("=", 1)[0][2:] for a in words[i + 2 :] if a.startswith("--")]
            yield sub, used


def check_invocation(known: dict, sub: str, used, where: str, report):
    if sub not in known:
        report.fail(f"{where}: `tandem {sub}` is no subcommand (known: {', '.join(sorted(known))})")
        return
    for flag in used:
        if flag not in known[sub]:
            report.fail(f"{where}: `tandem {sub} --{flag}`: no such flag")
