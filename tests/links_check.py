#!/usr/bin/env python3
"""Checks that the repository stands on its own.

Two halves, each reporting every offender as FILE:LINE: what:
  links    every relative link of every tracked Markdown file (inline links,
           images, reference definitions, HTML href/src) names a tracked file
           or folder inside the repository, and its #anchor, when it has one,
           is a heading (GitHub's slug of it) or an <a id/name> of that file.
  outside  no tracked text file refers to what a clone does not have: the
           team's shared notes folder, the specification by its old name and
           section numbers, absolute paths into the build machine's work
           folder, and issue numbers of a tracker no user sees.

Usage: tests/links_check.py [--root DIR] [--links-only | --outside-only] [FILE...]
FILE... restricts the check to those tracked files (paths from the root).
Exit status 0 when nothing is found, 1 when something is, 2 on misuse.
"""

import argparse
import os
import re
import subprocess
import sys
from urllib.parse import unquote

# The patterns are built from pieces so that this file does not match itself.
OUTSIDE = [
    (re.compile(r"\.\./" + "shared" + r"\b"),
     "a path into the shared notes folder outside the repository"),
    (re.compile(r"\b" + "SP" + r"EC\b"),
     "the specification by its old name: link docs/contract.md (its anchors) instead"),
    (re.compile(r"(?<![\w.~/-])/" + "work" + r"/"),
     "an absolute path into the build machine's work folder"),
    (re.compile(r"\b[Ii]" + r"ssues? #?[0-9]"),
     "an issue number of a tracker no user sees: name the thing instead"),
]
# Notes of the shared folder, cited by file name; flagged unless the
# repository has a file of that name.
OUTSIDE_NOTES = re.compile(r"\b(?:GRAM|TENSOR|DEVICE|STYLE)\.md\b")

# Data, not prose: poem texts and fuzzing inputs may contain any words.
DATA_PREFIXES = ("assets/embeddings/", "fuzz/corpus/")

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_LINK = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
HTML_ANCHOR = re.compile(r"""<a\b[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)
ATX_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ID = re.compile(r"\s*\{#([\w-]+)\}\s*$")
LINE_ANCHOR = re.compile(r"^L\d+(?:-L\d+)?$")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"links_check: {root}: cannot list the tracked files with git ({e})")
    return [p for p in out.decode().split("\0") if p]


def read_text(root, path):
    """The file's text, or None for a binary or unreadable file."""
    try:
        with open(os.path.join(root, path), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def outside_fences(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield number, line


def prose_lines(text):
    """(line number, line) outside fenced code blocks, inline code removed."""
    for number, line in outside_fences(text):
        yield number, INLINE_CODE.sub("", line)


def heading_text(raw):
    """The text GitHub renders for a heading's Markdown."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)       # links -> their text
    text = re.sub(r"<[^>]+>", "", text)                         # HTML tags
    text = re.sub(r"(`+)(.+?)\1", r"\2", text)                  # code spans -> content
    return re.sub(r"(\*\*|__|\*|_(?=\W)|(?<=\W)_)", "", text)   # emphasis markers


def github_slug(text):
    slug = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return slug.replace(" ", "-")


def anchors_of(text):
    """Every anchor a link into this Markdown text may name."""
    anchors, seen = set(), {}
    for _, line in outside_fences(text):
        anchors.update(HTML_ANCHOR.findall(line))
        h = ATX_HEADING.match(line)
        if not h:
            continue
        raw = h.group(2)
        explicit = EXPLICIT_ID.search(raw)
        if explicit:
            anchors.add(explicit.group(1))
            raw = raw[:explicit.start()]
        slug = github_slug(heading_text(raw))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def link_targets(text):
    for number, line in prose_lines(text):
        for m in INLINE_LINK.finditer(line):
            yield number, m.group(1).strip("<>")
        m = REFERENCE_DEF.match(line)
        if m:
            yield number, m.group(1).strip("<>")
        for target in HTML_LINK.findall(line):
            yield number, target


def check_link(root, source, target, files, folders, anchor_cache):
    """None when the link is good, else what is wrong with it."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
        return None  # a URL (https:, mailto:, ...): not the repository's to check
    path, _, anchor = target.partition("#")
    path, anchor = unquote(path), unquote(anchor)
    if path.startswith("/"):
        return "an absolute path: links must be relative to the file"
    if path:
        resolved = os.path.normpath(os.path.join(os.path.dirname(source), path))
        if resolved == ".." or resolved.startswith("../"):
            return "leads outside the repository"
        resolved = "" if resolved == "." else resolved
    else:
        resolved = source
    if resolved and resolved not in files and resolved not in folders:
        return "no such file or folder in the repository (tracked files only)"
    if not anchor:
        return None
    if not resolved.endswith(".md"):
        return None if LINE_ANCHOR.match(anchor) else f"#{anchor}: only #L<line> anchors are checked outside Markdown"
    if resolved not in anchor_cache:
        anchor_cache[resolved] = anchors_of(read_text(root, resolved) or "")
    if anchor not in anchor_cache[resolved]:
        return f"#{anchor}: no heading or <a id> with that anchor in {resolved}"
    return None


def check_links(root, files, selected):
    file_set = set(files)
    folders = {os.path.dirname(p) for p in files}
    for p in list(folders):
        while p:
            p = os.path.dirname(p)
            folders.add(p)
    problems, anchor_cache = [], {}
    for source in selected:
        if not source.endswith(".md"):
            continue
        text = read_text(root, source)
        if text is None:
            continue
        for number, target in link_targets(text):
            why = check_link(root, source, target, file_set, folders, anchor_cache)
            if why:
                problems.append((source, number, f"link ({target}): {why}"))
    return problems


def check_outside(root, files, selected):
    basenames = {os.path.basename(p) for p in files}
    problems = []
    for path in selected:
        if path.startswith(DATA_PREFIXES):
            continue
        text = read_text(root, path)
        if text is None:
            continue
        for number, line in enumerate(text.split("\n"), 1):
            for pattern, what in OUTSIDE:
                m = pattern.search(line)
                if m:
                    problems.append((path, number, f"{what} ({line.strip()[:100]})"))
            for name in OUTSIDE_NOTES.findall(line):
                if name not in basenames:
                    problems.append((path, number, f"{name}: a note that is not in the repository"))
    return problems


def report(title, problems):
    if not problems:
        print(f"links_check: {title}: nothing found")
        return
    by_file = {}
    for path, number, what in problems:
        print(f"{path}:{number}: {what}")
        by_file[path] = by_file.get(path, 0) + 1
    print(f"links_check: {title}: {len(problems)} in {len(by_file)} file(s):")
    for path, count in sorted(by_file.items()):
        print(f"  {count:4d}  {path}")


def main():
    ap = argparse.ArgumentParser(description="Relative Markdown links resolve inside the repository; "
                                             "no tracked file refers outside it.")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the repository's root (default: this script's checkout)")
    half = ap.add_mutually_exclusive_group()
    half.add_argument("--links-only", action="store_true", help="check only the Markdown links")
    half.add_argument("--outside-only", action="store_true", help="check only references outside the repository")
    ap.add_argument("files", nargs="*", help="check only these tracked files (paths from the root)")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    files = tracked_files(root)
    selected = files
    if a.files:
        untracked = [f for f in a.files if f not in set(files)]
        if untracked:
            print(f"links_check: not tracked files of {root}: {', '.join(untracked)}", file=sys.stderr)
            return 2
        selected = a.files
    failed = False
    if not a.outside_only:
        problems = check_links(root, files, selected)
        report("links", problems)
        failed |= bool(problems)
    if not a.links_only:
        problems = check_outside(root, files, selected)
        report("references outside the repository", problems)
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
