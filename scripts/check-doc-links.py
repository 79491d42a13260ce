#!/usr/bin/env python3
"""Fails on a broken internal link in the docs: a relative link to a file or folder that does
not exist, or to a heading anchor that the target page does not have. mdbook (0.5) builds a
book with such links without a word, so this checks them.

    scripts/check-doc-links.py            # the book (docs/src), README.md, bench/README.md, bench/reports/README.md
    scripts/check-doc-links.py FILE.md... # those files only

Also fails on a page of docs/src that SUMMARY.md does not list (the book would not show it).
Links to http(s), mailto and the like are not fetched. Links and headings inside code blocks
and code spans are ignored. Anchors are made as mdbook makes heading ids: the heading's text,
lowercased, spaces as '-', only letters, digits, '-' and '_' kept, '-1', '-2' ... on repeats.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "docs" / "src"
EXTRA = [ROOT / "README.md", ROOT / "bench" / "README.md", ROOT / "bench" / "reports" / "README.md"]

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]+(?:\([^()\s]*\))?[^()\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s:]+)")


def prose_lines(text):
    """(line number, line) outside fenced and indented code blocks, with code spans blanked."""
    fenced = indented = False
    previous = ""          # the last non-blank line: an indented line after a list item continues it
    blank_before = True
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        if not line.strip():
            blank_before = True
            continue
        is_indented = line.startswith("    ") or line.startswith("\t")
        in_list = re.match(r"^\s*([-*+]|\d+\.)\s", previous) or previous.startswith("  ")
        if is_indented and (indented or (blank_before and not in_list)):
            indented = True
            blank_before = False
            continue
        indented = False
        blank_before = False
        previous = line
        yield number, re.sub(r"`+[^`]*`+", lambda m: " " * len(m.group(0)), line)


def heading_id(text):
    text = re.sub(r"<[^>]+>", "", text)                     # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)     # links: their text
    text = text.replace("`", "").replace("*", "")
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def anchors(path, cache={}):
    if path not in cache:
        ids, seen = set(), {}
        fenced = False
        for line in path.read_text().split("\n"):
            if FENCE.match(line):
                fenced = not fenced
                continue
            m = None if fenced else HEADING.match(line)
            if m:
                base = heading_id(m.group(2))
                n = seen.get(base, 0)
                ids.add(base if n == 0 else f"{base}-{n}")
                seen[base] = n + 1
            for explicit in re.findall(r"""id=["']([^"']+)["']""", line):
                ids.add(explicit)
        cache[path] = ids
    return cache[path]


def check_file(path):
    problems = []
    text = path.read_text()
    targets = []
    for number, line in prose_lines(text):
        targets += [(number, t) for t in LINK.findall(line)]
        m = REF_DEF.match(line)
        if m:
            targets.append((number, m.group(1)))
    for m in INCLUDE.finditer(text):
        targets.append((text[: m.start()].count("\n") + 1, m.group(1)))
    for number, target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):    # http:, https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else (path.parent / file_part).resolve()
        where = f"{path.relative_to(ROOT)}:{number}: link {target!r}"
        if not dest.exists():
            problems.append(f"{where}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
            continue
        if anchor:
            if dest.is_dir() or dest.suffix != ".md":
                problems.append(f"{where}: an anchor into something that is not a markdown page")
            elif anchor not in anchors(dest):
                problems.append(f"{where}: {dest.relative_to(ROOT)} has no heading with anchor #{anchor}")
    return problems


def summary_problems():
    summary = BOOK / "SUMMARY.md"
    listed = {(BOOK / t).resolve() for _, t in
              ((n, t) for n, line in prose_lines(summary.read_text()) for t in LINK.findall(line))}
    pages = {p.resolve() for p in BOOK.rglob("*.md") if p.name != "SUMMARY.md"}
    return [f"{p.relative_to(ROOT)}: a page that docs/src/SUMMARY.md does not list"
            for p in sorted(pages - listed)]


def main():
    args = [Path(a).resolve() for a in sys.argv[1:]]
    files = args or sorted(BOOK.rglob("*.md")) + [p for p in EXTRA if p.exists()]
    problems = [p for f in files for p in check_file(f)]
    if not args:
        problems += summary_problems()
    for p in problems:
        print(p)
    if problems:
        print(f"check-doc-links: {len(problems)} broken link(s) in {len(files)} files")
        sys.exit(1)
    print(f"check-doc-links: {len(files)} files, no broken internal link")


if __name__ == "__main__":
    main()
