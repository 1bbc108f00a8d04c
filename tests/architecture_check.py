#!/usr/bin/env python3
"""docs/architecture.md names every module and shader of the tree.

A Lua module (lua/divgpu/**/*.lua) is named by its path under lua/divgpu/
(`cli/run.lua`, `methods/gram.lua`) or, for a file at the top, its file name;
a Rust file (src/**/*.rs) by its path under src/ or, inside a room, by the
room's folder and its file name (`durable/lock.rs`, or `lock.rs` in the
room's line); a shader or include (shaders/*.comp, shaders/include/*.glsl)
by its file name. `--names` prints what it looks for; `--extra NAME` adds a
name that is not in the tree (the test's twin: it must be reported).

The section between `<!-- BEGIN files -->` and `<!-- END files -->` is
rendered from the files' own first comment sentence (`--render` writes it);
the check also fails where that section differs from its rendering, so the
list cannot drift from the tree or from what each file says it holds.
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def lua_names():
    base = ROOT / "lua" / "divgpu"
    return sorted(str(p.relative_to(base)) for p in base.rglob("*.lua"))


def rust_names():
    base = ROOT / "src"
    return sorted(str(p.relative_to(base)) for p in base.rglob("*.rs")
                  if p.name not in ("tests.rs", "mod.rs") and "tests" not in p.parts)


def shader_names():
    base = ROOT / "shaders"
    return sorted([p.name for p in base.glob("*.comp")] + ["include/" + p.name for p in (base / "include").glob("*.glsl")])


BEGIN, END = "<!-- BEGIN files -->", "<!-- END files -->"
COMMENT = {".lua": "--", ".rs": "//!", ".comp": "//", ".glsl": "//"}


def first_sentence(path):
    """The file's header comment up to its first full stop (one line)."""
    mark, words = COMMENT[path.suffix], []
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not words and (not stripped or stripped.startswith("#")):
            continue  # before the comment: blank lines, #version, #extension
        if not stripped.startswith(mark) or (mark == "//" and stripped.startswith("///")):
            break
        text = stripped[len(mark):].strip()
        if not text:
            break
        words.append(text)
    sentence = " ".join(words)
    end = re.search(r"[.;](\s|$)", sentence)
    sentence = sentence[: end.start() + 1] if end else sentence
    return sentence.replace("|", "\\|") or "(no header comment)"


def render():
    rows = ["| file | what it holds (its own first sentence) |", "|---|---|"]
    files = [ROOT / "lua" / "divgpu" / n for n in lua_names()] + [ROOT / "src" / n for n in rust_names()]
    files += sorted((ROOT / "shaders").glob("*.comp")) + sorted((ROOT / "shaders" / "include").glob("*.glsl"))
    for f in files:
        rows.append(f"| `{f.relative_to(ROOT)}` | {first_sentence(f)} |")
    return "\n".join(rows)


def rendered_section(doc):
    if BEGIN not in doc or END not in doc:
        return None
    return doc[doc.index(BEGIN) + len(BEGIN):doc.index(END)].strip("\n")


def named(doc, name):
    """The doc names `name` (a relative path): whole, or its file name
    beside its folder's own mention."""
    if re.search(r"(?<![\w/.-])" + re.escape(name) + r"(?![\w-])", doc):
        return True
    parts = name.split("/")
    if len(parts) < 2:
        return False
    if parts[0] == "include" and len(parts) == 2:
        return named(doc, parts[1])
    folder, file = "/".join(parts[:-1]) + "/", parts[-1]
    for line in doc.splitlines():
        if folder in line and re.search(r"(?<![\w/.-])" + re.escape(file) + r"(?![\w-])", line):
            return True
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--doc", default=str(ROOT / "docs" / "architecture.md"))
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--names", action="store_true")
    ap.add_argument("--render", action="store_true", help="write the files section into --doc")
    a = ap.parse_args()
    doc_path = pathlib.Path(a.doc)
    doc = doc_path.read_text()
    if a.render:
        if rendered_section(doc) is None:
            print(f"{a.doc}: no {BEGIN} ... {END} section to render into", file=sys.stderr)
            return 1
        doc = doc[: doc.index(BEGIN) + len(BEGIN)] + "\n" + render() + "\n" + doc[doc.index(END):]
        doc_path.write_text(doc)
    if rendered_section(doc) != render():
        print(f"{a.doc}: the files section differs from its rendering (tests/architecture_check.py --render)",
              file=sys.stderr)
        return 1
    groups = {"lua/divgpu/": lua_names(), "src/": rust_names(), "shaders/": shader_names()}
    groups["(extra) "] = a.extra
    missing = []
    for prefix, names in groups.items():
        for name in names:
            if a.names:
                print(prefix + name)
            elif not (named(doc, prefix + name) or named(doc, name)):
                missing.append(prefix + name)
    if missing:
        print(f"{a.doc}: does not name {len(missing)} of the tree's modules and shaders:", file=sys.stderr)
        for m in missing:
            print("  " + m, file=sys.stderr)
        return 1
    print(f"architecture: {sum(len(v) for v in groups.values())} modules and shaders named")
    return 0


if __name__ == "__main__":
    sys.exit(main())
