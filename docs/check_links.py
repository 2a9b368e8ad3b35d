#!/usr/bin/env python3
"""Checks that every relative link in the project's documentation resolves: the file (or folder)
exists, and an `#anchor` names a heading of the target Markdown file (GitHub's slugs).

    python3 docs/check_links.py [FILE.md ...]      # default: README.md, docs/*.md, benches/README.md

Links in fenced code blocks and inline code are not links. Absolute URLs are not checked (CI has no
network). Exits 1 and lists every broken link, as FILE:LINE: TARGET (why).
"""

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor a Markdown file defines: its headings' slugs (repeats get -1, -2, ...)."""
    seen = {}
    out = set()
    in_fence = False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = None if in_fence else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    for name in re.findall(r'<a\s+(?:name|id)="([^"]+)"', open(path, encoding="utf-8").read()):
        out.add(name)
    return out


def links(path):
    """(line number, target) of every link outside code."""
    in_fence = False
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for m in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, m.group(1)


def check(path):
    problems = []
    base = os.path.dirname(path)
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(base, file_part)) if file_part else path
        where = f"{os.path.relpath(path, ROOT)}:{number}: {target}"
        if not os.path.exists(resolved):
            problems.append(f"{where} (no such file)")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            problems.append(f"{where} (no heading with anchor #{anchor})")
    return problems


def main(argv):
    files = argv or [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "benches", "README.md")]
    if not argv:
        files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    problems = [p for f in files for p in check(os.path.abspath(f))]
    for p in problems:
        print(p)
    print(f"{len(files)} files checked, {len(problems)} broken links", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
