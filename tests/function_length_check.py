#!/usr/bin/env python3
"""No function in src/ or lua/ runs over 80 lines (tests apart), no file in src/ over 500.

Rust: every `fn` with a body, from the line of `fn` to the line of its closing
brace, outside `#[cfg(test)]` modules (comments, strings and character
literals are skipped while the braces are matched). Lua: every function
prototype LuaJIT compiles (`luajit -bl` names each with its first and last
line), the file's main chunk apart.

Files: every *.rs under src/ (tests files too) has at most 500 lines, so a
file holds one topic (split by what it holds, not by where it was cut).

    tests/function_length_check.py [--max N] [--max-file-lines N] [--root DIR] [FILE...]

Without FILEs it checks the tracked *.rs under src/ and *.lua under lua/.
Exit 1 and one line per function or file too long, naming its file and lines.
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rust_code(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and not IDENT.match(text[i - 1:i] if i else ""):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def closing_brace(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def rust_functions(text):
    """(name, first line, last line) of every fn with a body, test modules apart."""
    code = rust_code(text)
    skip = []  # character ranges of #[cfg(test)] modules
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", code):
        open_at = m.end() - 1
        skip.append((m.start(), closing_brace(code, open_at)))
    found = []
    for m in re.finditer(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)", code):
        if any(a <= m.start() <= b for a, b in skip):
            continue
        depth, j = 0, m.end()
        while j < len(code):
            ch = code[j]
            if ch in "([<":
                depth += 1
            elif ch in ")]>" and depth > 0:
                depth -= 1
            elif ch == ";" and depth == 0:
                j = -1  # a declaration without a body
                break
            elif ch == "{" and depth == 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        end = closing_brace(code, j)
        found.append((m.group(1), code.count("\n", 0, m.start()) + 1, code.count("\n", 0, end) + 1))
    return found


def lua_functions(path):
    """(name, first line, last line) of every function LuaJIT compiles in the file."""
    listing = subprocess.run(["luajit", "-bl", str(path)], capture_output=True, text=True, errors="replace")
    if listing.returncode != 0:
        raise SystemExit(f"{path}: luajit -bl failed: {listing.stderr.strip()}")
    found = []
    for first, last in re.findall(r"^-- BYTECODE -- \S+:(\d+)-(\d+)$", listing.stdout, re.M):
        if first != "0":  # the main chunk
            found.append(("function", int(first), int(last)))
    return found


def tracked(root):
    out = subprocess.run(["git", "-C", str(root), "ls-files", "src", "lua"], capture_output=True, text=True,
                         check=True).stdout.split()
    return [p for p in out if p.endswith((".rs", ".lua"))]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max", type=int, default=80)
    p.add_argument("--max-file-lines", type=int, default=500)
    p.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    p.add_argument("files", nargs="*")
    a = p.parse_args()
    root = Path(a.root)
    files = a.files or tracked(root)
    long = []
    for rel in files:
        path = root / rel
        if rel.endswith(".rs"):
            text = path.read_text(encoding="utf-8")
            lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            if lines > a.max_file_lines:
                long.append(f"{rel}: the file has {lines} lines (at most {a.max_file_lines})")
            functions = rust_functions(text)
        else:
            functions = lua_functions(path)
        for name, first, last in functions:
            if last - first + 1 > a.max:
                long.append(f"{rel}:{first}-{last}: {name} has {last - first + 1} lines (at most {a.max})")
    for line in long:
        print(line)
    print(f"function_length_check: {len(files)} file(s), {len(long)} function(s) over {a.max} lines"
          f" or file(s) over {a.max_file_lines}")
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
