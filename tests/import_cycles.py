#!/usr/bin/env python3
"""No import circle in the Rust module or the Lua driver.

Rust (--rust): every file under src/ is a module (src/a/b.rs and
src/a/b/mod.rs are `a::b`); a file imports another when its code names a
path into it: `crate::a::b…` (braces in `use` expanded) or `super::…`
(relative to the file's module). A path is taken to the longest module it
names; paths to the crate root (items of lib.rs) do not count, and neither
does `mod x;` (a declaration, not a use). Test code is left out: files named
tests.rs, test_support.rs and `#[cfg(test)]` modules (a test may build its
input with any room). The check is made twice: between files, and between
rooms, a room being the folder that holds the file (src/cache/, src/durable/,
src/durable/checkpoint/ …; the files at src/ are each a room of their own).

Lua (--lua): every file under lua/ is a module (lua/divgpu/x/y.lua is
`divgpu.x.y`, init.lua its folder's); a file imports another when it calls
`require` on that module's name anywhere (at load or inside a function: a
lazy require closes a circle as surely as an eager one); a name built at run
time from a literal prefix (`"divgpu.kernels." .. name`) is taken as a
require of every module under the prefix.

    tests/import_cycles.py [--rust] [--lua] [--root DIR]

Without --rust or --lua it checks both. Exit 1 and one line per circle,
naming it: `rust files: a -> b -> a`.
"""
import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from function_length_check import closing_brace, rust_code  # noqa: E402

TEST_FILES = {"tests.rs", "test_support.rs"}


def rust_module(rel):
    """`a::b` for src/a/b.rs or src/a/b/mod.rs ('' for lib.rs)."""
    parts = list(Path(rel).relative_to("src").with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return "::".join(parts)


def rust_room(rel):
    """The folder holding the file (a file at src/ is a room of its own)."""
    folder = Path(rel).parent
    return (rust_module(rel) or "lib") if folder == Path("src") else "/".join(folder.relative_to("src").parts)


def expand(path):
    """`a::{b, c::{d}}` -> [a::b, a::c::d] (a path without braces as is)."""
    m = re.search(r"\{", path)
    if not m:
        return [path]
    head, depth, items, cur = path[:m.start()], 0, [], ""
    for ch in path[m.start() + 1:]:
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out = []
    for item in items:
        item = re.sub(r"\s+as\s+\w+", "", item.strip())
        if item and item != "self":
            out += expand(head + item)
        elif item == "self":
            out.append(head.rstrip(":"))
    return out


def without_tests(code):
    """The code with its #[cfg(test)] items blanked."""
    for m in reversed(list(re.finditer(r"#\[cfg\(test\)\]\s*(pub(\(crate\))?\s+)?mod\s+\w+\s*(\{|;)", code))):
        end = closing_brace(code, m.end() - 1) if m.group(3) == "{" else m.end()
        code = code[:m.start()] + re.sub(r"[^\n]", " ", code[m.start():end + 1]) + code[end + 1:]
    return code


PATH = re.compile(r"\b(crate|super)((?:::(?:super|[A-Za-z_]\w*|\{[^;]*?\}(?=\s*;)|\*))+)")


def rust_graph(root):
    files = [p.relative_to(root).as_posix() for p in sorted((root / "src").rglob("*.rs"))]
    files = [f for f in files if Path(f).name not in TEST_FILES]
    modules = {rust_module(f): f for f in files}
    edges = {f: set() for f in files}
    for f in files:
        me = rust_module(f).split("::") if rust_module(f) else []
        code = without_tests(rust_code((root / f).read_text(encoding="utf-8")))
        for m in PATH.finditer(code):
            for path in expand(m.group(1) + m.group(2)):
                parts = [p for p in path.split("::") if p and p != "*"]
                if parts[0] == "crate":
                    parts = parts[1:]
                else:
                    base = list(me)
                    while parts and parts[0] == "super":
                        parts.pop(0)
                        base = base[:-1]
                    parts = base + parts
                for k in range(len(parts), 0, -1):
                    target = modules.get("::".join(parts[:k]))
                    if target:
                        if target != f:
                            edges[f].add(target)
                        break
    return edges


LUA_REQUIRE = re.compile(r"""\brequire\s*\(?\s*["']([\w.]+)["']""")
# A module name built at run time from a literal prefix ("divgpu.kernels." .. name):
# taken as a require of every module under that prefix.
LUA_PREFIX = re.compile(r"""["'](divgpu\.[\w.]*\.)["']\s*\.\.""")


def lua_module(rel):
    parts = list(Path(rel).relative_to("lua").with_suffix("").parts)
    if parts[-1] == "init":
        parts.pop()
    return ".".join(parts)


def lua_graph(root):
    files = [p.relative_to(root).as_posix() for p in sorted((root / "lua").rglob("*.lua"))]
    modules = {lua_module(f): f for f in files}
    edges = {f: set() for f in files}
    for f in files:
        text = (root / f).read_text(encoding="utf-8", errors="replace")
        text = re.sub(r"--\[(=*)\[.*?\]\1\]", "", text, flags=re.S)  # block comments
        text = re.sub(r"--[^\n]*", "", text)
        names = LUA_REQUIRE.findall(text)
        for prefix in LUA_PREFIX.findall(text):
            names += [m for m in modules if m.startswith(prefix)]
        for name in names:
            target = modules.get(name)
            if target and target != f:
                edges[f].add(target)
    return edges


def rooms(edges, room_of):
    out = {}
    for f, targets in edges.items():
        out.setdefault(room_of(f), set())
        for t in targets:
            if room_of(t) != room_of(f):
                out[room_of(f)].add(room_of(t))
            out.setdefault(room_of(t), set())
    return out


def circles(edges):
    """One circle (a list of nodes, first == last) per strongly connected component."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(set(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    found = []
    for comp in comps:
        start = min(comp)
        # breadth-first from start back to start, inside the component: a shortest circle
        prev, queue, path = {start: None}, [start], None
        while queue and path is None:
            v = queue.pop(0)
            for w in sorted(edges[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    path = list(reversed(path)) + [start]
                    break
                if w in comp and w not in prev:
                    prev[w] = v
                    queue.append(w)
        found.append(path)
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rust", action="store_true")
    p.add_argument("--lua", action="store_true")
    p.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    a = p.parse_args()
    root = Path(a.root)
    both = not (a.rust or a.lua)
    report = []
    if a.rust or both:
        files = rust_graph(root)
        report.append(("rust files", files, circles(files)))
        room_graph = rooms(files, rust_room)
        report.append(("rust rooms", room_graph, circles(room_graph)))
    if a.lua or both:
        files = lua_graph(root)
        report.append(("lua files", files, circles(files)))
    bad = 0
    for kind, graph, found in report:
        for circle in found:
            print(f"{kind}: import circle: {' -> '.join(circle)}")
        edges = sum(len(t) for t in graph.values())
        print(f"import_cycles: {kind}: {len(graph)} modules, {edges} imports, {len(found)} circle(s)")
        bad += len(found)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
