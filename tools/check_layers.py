#!/usr/bin/env python3
"""Checks that the C core's files depend one way: a file never names (calls, reads, includes) a
symbol defined in a layer above its own, and no two source files reach each other (a cycle).

The layer order and which files belong to which layer live in c_core/src/layers.txt. Symbols come
from Universal Ctags: functions and variables with external linkage, and everything a header
declares (prototypes, externs, macros, types, enumerators, inline functions). A symbol's layer is
the layer of the file that defines it (a .c file for functions and variables, else the header).
Struct fields are not symbols here: which layer may write which field is stated in base/types.h.

usage: check_layers.py [--layers FILE] [SRC_DIR]      (default: c_core/src of this repository)
exit status 0: clean; 1: violations (listed); 2: the check itself could not run.
"""
import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def read_layers(path):
    """[(layer name, [glob, ...])] bottom first."""
    layers = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line:
                layers.append((line[0], line[1:]))
    return layers


def layer_of(rel, layers):
    for i, (_, globs) in enumerate(layers):
        if any(fnmatch.fnmatch(rel, g) for g in globs):
            return i
    return None


def strip_code(text):
    """Source without comments, string and character literals (kept line-aligned)."""
    out = re.sub(r'/\*.*?\*/', lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out = re.sub(r'//[^\n]*', "", out)
    out = re.sub(r'"(\\.|[^"\\\n])*"', '""', out)
    out = re.sub(r"'(\\.|[^'\\\n])*'", "''", out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", nargs="?", default=os.path.join(ROOT, "c_core", "src"))
    ap.add_argument("--layers", default=None, help="layer file (default: SRC/layers.txt)")
    args = ap.parse_args()
    src = os.path.abspath(args.src)
    layers = read_layers(args.layers or os.path.join(src, "layers.txt"))
    names = [n for n, _ in layers]

    files = {}
    problems = []
    for d, _, fs in os.walk(src):
        for f in fs:
            if f.endswith((".c", ".h")):
                rel = os.path.relpath(os.path.join(d, f), src)
                lay = layer_of(rel, layers)
                if lay is None:
                    problems.append(f"{rel}: in no layer of the layer file")
                else:
                    files[rel] = lay

    try:
        out = subprocess.run(
            ["ctags", "--output-format=json", "--languages=C", "--langmap=C:.c.h",
             "--kinds-C=+px-m", "--fields=+KnF", "-R", "-f", "-", "."],
            cwd=src, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"check_layers: cannot run Universal Ctags ({e}); apt-get install universal-ctags",
              file=sys.stderr)
        return 2

    # symbol -> (defining file, layer); functions/variables from .c files win over declarations
    home = {}
    for line in out.splitlines():
        try:
            t = json.loads(line)
        except ValueError:
            continue
        if t.get("_type") != "tag" or t.get("path") not in files:
            continue
        path, name, kind = t["path"], t["name"], t.get("kind")
        if kind in ("local", "parameter", "member", "label"):
            continue
        if path.endswith(".c") and (t.get("file") or kind not in ("function", "variable")):
            continue  # file-scope: a static, or a macro or type local to that .c
        if kind in ("prototype", "externvar"):
            continue  # a declaration: the definition (in a .c file) is the symbol's home
        cand = (0 if path.endswith(".c") else 1, files[path], path)
        if name not in home or cand < home[name]:
            home[name] = cand

    ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    uses = {}  # .c file -> set of .c files whose functions/variables it names
    for rel, lay in sorted(files.items()):
        with open(os.path.join(src, rel)) as f:
            text = f.read()
        for inc in include.findall(text):
            cands = [os.path.normpath(os.path.join(os.path.dirname(rel), inc)), os.path.normpath(inc)]
            target = next((c for c in cands if c in files), None)
            if target is None:
                continue  # a public or system header
            if files[target] > lay:
                problems.append(f"{rel} ({names[lay]}) includes {target} ({names[files[target]]})")
        code = strip_code(text)
        seen = set()
        for lineno, line in enumerate(code.split("\n"), 1):
            for name in ident.findall(line):
                h = home.get(name)
                if h is None or h[2] == rel:
                    continue
                _, hl, hpath = h
                if hl > lay and (name, hpath) not in seen:
                    seen.add((name, hpath))
                    problems.append(f"{rel}:{lineno} ({names[lay]}) names {name}, defined in "
                                    f"{hpath} ({names[hl]})")
                if rel.endswith(".c") and hpath.endswith(".c"):
                    uses.setdefault(rel, set()).add(hpath)

    # cycles among .c files (Tarjan's strongly connected components)
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(uses.get(v, ())):
            if w == v:
                continue
            if w not in index:
                visit(w)
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
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(uses):
        if v not in index:
            visit(v)
    for comp in sccs:
        problems.append("cycle among: " + ", ".join(comp))

    order = " -> ".join(reversed(names))
    if problems:
        print(f"layer check FAILED ({len(problems)} problems); order, top to bottom: {order}")
        for p in problems:
            print("  " + p)
        return 1
    print(f"layer check passed: {len(files)} files, order top to bottom: {order}, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
