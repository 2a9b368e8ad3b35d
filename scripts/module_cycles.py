#!/usr/bin/env python3
"""Finds import circles between the modules of each crate of the workspace.

A module's references (`crate::a::b`, `super::x`, `self::y`, grouped `use` lists too) are
resolved to the deepest module that exists; a reference between a module and one of its
ancestors is left out (a parent declares and re-exports its children, a child may use what
its parent defines), as are comments and test code (`#[cfg(test)]` modules and `tests`
files). Every
strongly connected set of more than one module is a circle, printed with its members; the
exit status is 1 when there is one.

    scripts/module_cycles.py [CRATE_DIR ...]   (default: every crate of the workspace)
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def crate_dirs():
    """The root crate and every workspace member with a `src/`."""
    members = re.search(r"members\s*=\s*\[([^\]]*)\]", (ROOT / "Cargo.toml").read_text())
    names = re.findall(r'"([^"]+)"', members.group(1)) if members else []
    return [ROOT] + [ROOT / n for n in names if (ROOT / n / "src").is_dir()]


def module_path(src: Path, file: Path):
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def code_of(text: str) -> str:
    """The code of a file: its comments (doc links are not imports) and its tests left out.
    Tests come last in this codebase: the text is cut at its first `#[cfg(test)]` module."""
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s*)?mod\s", text)
    text = text[: m.start()] if m else text
    lines = []
    for line in text.splitlines():
        code = line.split("//", 1)
        # A `//` after a quote may be inside a string ("http://"): kept whole.
        lines.append(line if len(code) > 1 and '"' in code[0] else code[0])
    return "\n".join(lines)


def brace_heads(body: str):
    """The first path segment of each item of a `use` group's braces, nested groups kept."""
    heads, depth, item = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            heads.append(item.strip())
            item = ""
        else:
            item += ch
    heads.append(item.strip())
    return [h for h in heads if h]


def references(text: str, here: tuple):
    """The module paths `text` (the file of module `here`) names, unresolved."""
    found = []
    pattern = re.compile(rf"\b(crate|(?:super::)*super|self)::((?:{IDENT}::)*)(\{{|{IDENT})")
    for m in pattern.finditer(text):
        anchor, middle, last = m.group(1), m.group(2), m.group(3)
        if anchor == "crate":
            base = ()
        elif anchor == "self":
            base = here
        else:
            ups = anchor.count("super")
            base = here[: len(here) - ups] if ups <= len(here) else ()
        prefix = base + tuple(p for p in middle.split("::") if p)
        if last == "{":
            depth, end = 1, m.end()
            while end < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                end += 1
            for head in brace_heads(text[m.end() : end - 1]):
                first = re.match(IDENT, head)
                if first and first.group(0) not in ("self",):
                    found.append(prefix + (first.group(0),))
                elif first:
                    found.append(prefix)
        else:
            found.append(prefix + (last,))
    return found


def resolve(path: tuple, modules: set):
    for n in range(len(path), -1, -1):
        if path[:n] in modules:
            return path[:n]
    return ()


def related(a: tuple, b: tuple) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a


def strongly_connected(graph: dict):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            out.append(group)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def circles(crate: Path):
    src = crate / "src"
    files = {}
    for file in sorted(src.rglob("*.rs")):
        if file.stem == "tests" or "tests" in file.relative_to(src).parts[:-1]:
            continue
        files[module_path(src, file)] = file
    modules = set(files)
    graph = {}
    for here, file in files.items():
        text = code_of(file.read_text())
        targets = {resolve(r, modules) for r in references(text, here)}
        graph[here] = sorted(t for t in targets if t != here and not related(t, here))
    return [sorted(g) for g in strongly_connected(graph) if len(g) > 1]


def self_test():
    """A crate with one real circle (`a` ↔ `b`, through a grouped `use` and a `super::`
    path), a reference in a comment (`c` → `a`), a test module (`a` → `c`) and a child
    using its parent: exactly `a, b` must be found."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        (src / "b").mkdir(parents=True)
        (src / "lib.rs").write_text("mod a;\nmod b;\nmod c;\n")
        (src / "a.rs").write_text("use crate::{b::{Thing, other}, c};\n"
                                  "#[cfg(test)]\nmod tests { use crate::c::X; }\n")
        (src / "b" / "mod.rs").write_text("mod child;\nfn f() { super::a::g(); }\n")
        (src / "b" / "child.rs").write_text("use super::Thing;\n")
        (src / "c.rs").write_text("// see [`crate::a`]\n/// and `super::a::g`\n")
        found = circles(Path(tmp))
    assert found == [[("a",), ("b",)]], found
    print("module_cycles self-test: ok")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    crates = [Path(a).resolve() for a in sys.argv[1:]] or crate_dirs()
    found = 0
    for crate in crates:
        for group in circles(crate):
            found += 1
            names = ", ".join("::".join(m) or "(root)" for m in group)
            print(f"{crate.relative_to(ROOT) if crate != ROOT else '.'}: {names}")
    if found:
        print(f"{found} import circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
