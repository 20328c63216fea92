#!/usr/bin/env python3
"""No two modules of one room include each other, directly or around a longer
loop: the includes between the modules of a room form no cycle.

  scripts/check_include_cycles.py [--root DIR]

A room is a top folder of the product (app capi common config crf data model
options eval train settings); its sub-folders (crf/cuda/, model/cpu/, ...)
belong to it. A module is a header and its sources: the files of one folder
with one name before the extension (foo.h, foo.cuh, foo.cpp, foo.cu). Module
A includes module B when a file of A has `#include "ROOM/.../B.h"` (or .cuh)
naming one of B's headers. Between modules of different rooms the layers
already forbid a loop (scripts/check_layers.py); inside one room nothing did,
and two modules that include each other are one module in two pieces: move
what they share into a lower header, forward-declare, or move the function to
the module that owns it.

Prints every cycle (the strongly connected components of the include graph
of each room, each as the loop through its modules, a module with the file
and line of its include of the next one) and exits 1 when there is any, 0
otherwise. Only quoted includes whose first path part is a room count.
"""
import os
import re
import sys

import checklib

ROOMS = ("settings", "common", "crf", "data", "config", "model", "options", "eval", "train", "app", "capi")
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh")
HEADERS = (".h", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"(([^"/]+)/[^"]*)"')


def module_of(rel):
    """The module ("crf/cuda/reduce") of a file relative to the root ("crf/cuda/reduce.cuh")."""
    return os.path.splitext(rel)[0]


def include_graph(root):
    """{room: {module: {included module: (file, line)}}} of the includes inside each room."""
    graph = {}
    for room, path in checklib.source_files(root, ROOMS, EXTENSIONS):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        here = module_of(rel)
        edges = graph.setdefault(room, {}).setdefault(here, {})
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m or m.group(2) != room or not m.group(1).endswith(HEADERS):
                    continue
                there = module_of(m.group(1))
                if there != here:
                    edges.setdefault(there, (rel, n))
    return graph


def components(edges):
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative),
    each sorted, in the order of their first module."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def loop(edges, comp):
    """One loop through the component, from its first module back to it (a shortest one)."""
    members = set(comp)
    first = comp[0]
    prev = {first: None}
    queue = [first]
    while queue:  # breadth first from `first` until an edge returns to it
        v = queue.pop(0)
        for w in sorted(edges.get(v, {})):
            if w == first:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [first]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp + [first]  # unreachable: a component's modules reach each other


def cycles(root):
    out = []
    for room, edges in sorted(include_graph(root).items()):
        for comp in components(edges):
            path = loop(edges, comp)
            steps = [f"{a} ({edges[a][b][0]}:{edges[a][b][1]} includes {b})" for a, b in zip(path, path[1:])]
            extra = f"; the cycle's modules: {', '.join(comp)}" if len(comp) > len(path) - 1 else ""
            out.append(f"{room}/: modules include each other: " + " -> ".join(steps) + extra)
    return out


def main():
    a = checklib.arguments(__doc__).parse_args()
    bad = cycles(a.root)
    return checklib.report(bad, f"check_include_cycles: FAILED: {len(bad)} include cycle(s) among the modules of a room",
                           "check_include_cycles: PASSED: no two modules of one room include each other")


if __name__ == "__main__":
    sys.exit(main())
