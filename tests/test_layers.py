"""The package's import graph: no cycles, and no module imports a layer above its own.

Every ``import`` of a ``tb_perfdiag`` module counts, at the top of a file or inside a
function (a lazy import is still a dependency).  A module may import its own layer and
the layers before it in ``LAYERS``.
"""
from __future__ import annotations

import ast
import os

import pytest

from conftest import ROOT

PACKAGE = "tb_perfdiag"

# lowest first; "x.*" is every module under the package x; "" is the package's own
# __init__ (the public facade: load, diagnose, __version__ re-exported)
LAYERS = {
    "foundations": ["errors", "progress", "_version", "_native", "beside", "units"],
    "storage": ["storage"],
    "trace model and readers": ["trace", "trace.*"],
    "analyses": ["analysis", "analysis.*"],
    "renderers": ["render", "render.*"],
    "services": ["budget", "codec", "cache", "result_store", "discovery", "graph_captures",
                 "file_analysis", "pod", "service_common", "service_pod", "service_trend",
                 "service_compare", "service", "api", "params", "agent_tools",
                 "run_captures", "scalars"],
    "faces": ["plugin", "cli_common", "cli_run", "cli_compare", "cli_diagnose", "cli", "mcp_server",
              ""],
    "test support": ["testing", "testing.*"],
}

# (importer, imported) edges known to break the rules, each to be fixed: the analysis
# rewrite under way owns these.  Empty it as they go; an entry that no longer occurs fails.
ANALYSIS_VIOLATIONS_BEING_FIXED: set = set()


def _modules() -> dict:
    """Dotted name (without the package prefix) → path, for every .py of the package,
    plus the optional C extension ``_native`` (built or not)."""
    base = os.path.join(ROOT, PACKAGE)
    out = {}
    for dirpath, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(dirpath, base)
        parts = [] if rel == "." else rel.split(os.sep)
        for f in files:
            if f.endswith(".py"):
                stem = f[:-3]
                name = ".".join(parts + ([] if stem == "__init__" else [stem]))
                out[name] = os.path.join(dirpath, f)
    out["_native"] = ""
    return out


def _imports(name: str, path: str, modules: dict) -> set:
    """The package modules ``name`` imports (anywhere in the file)."""
    if not path:
        return set()
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_pkg = os.path.basename(path) == "__init__.py"
    here = name.split(".") if name else []
    pkg = here if is_pkg else here[:-1]
    out = set()

    def add(target: str):
        # the deepest known module the dotted target names (a.b.c → a.b when c is an
        # attribute of a.b)
        parts = target.split(".") if target else []
        while parts and ".".join(parts) not in modules:
            parts.pop()
        out.add(".".join(parts))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == PACKAGE or a.name.startswith(PACKAGE + "."):
                    add(a.name[len(PACKAGE) + 1:])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - node.level + 1]
                mod = ".".join(base + (node.module.split(".") if node.module else []))
            elif node.module and (node.module == PACKAGE
                                  or node.module.startswith(PACKAGE + ".")):
                mod = node.module[len(PACKAGE) + 1:]
            else:
                continue
            for a in node.names:            # from x import y: y may be a submodule
                sub = f"{mod}.{a.name}" if mod else a.name
                add(sub if sub in modules else mod)
    out.discard(name)
    return out


def _layer_of(name: str) -> int:
    for i, patterns in enumerate(LAYERS.values()):
        for p in patterns:
            if name == p or p.endswith(".*") and name.startswith(p[:-1]):
                return i
    raise AssertionError(f"{PACKAGE}.{name or '__init__'} is in no layer: add it to "
                         f"LAYERS in {__file__}")


def _graph() -> dict:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def _label(m: str) -> str:
    return f"{PACKAGE}.{m}" if m else PACKAGE


def test_every_module_has_a_layer():
    for m in _graph():
        _layer_of(m)


def test_no_upward_imports():
    names = list(LAYERS)
    found = set()
    for m, deps in _graph().items():
        for d in deps:
            if _layer_of(d) > _layer_of(m):
                found.add((m, d))
    unexpected = found - ANALYSIS_VIOLATIONS_BEING_FIXED
    assert not unexpected, "upward imports:\n" + "\n".join(
        f"  {_label(m)} ({names[_layer_of(m)]}) imports {_label(d)} ({names[_layer_of(d)]})"
        for m, d in sorted(unexpected))
    fixed = ANALYSIS_VIOLATIONS_BEING_FIXED - found
    if fixed:
        pytest.fail(f"fixed, take them out of ANALYSIS_VIOLATIONS_BEING_FIXED: {sorted(fixed)}")


def test_no_import_cycles():
    graph = _graph()
    # Tarjan's strongly connected components: any with two or more modules is a cycle
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = [c for c in cycles
              if not all((a, b) in ANALYSIS_VIOLATIONS_BEING_FIXED
                         for a in c for b in graph[a] if b in c)]
    assert not cycles, "import cycles:\n" + "\n".join(
        "  " + " ↔ ".join(_label(m) for m in c) for c in cycles)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    """The parser itself: a function-level import and ``from .. import x`` count."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from ..storage import read_bytes\n"
                   "from .. import _native\nfrom . import model\nimport tb_perfdiag.errors\n")
    modules = {"trace.m": str(src), "trace": "", "trace.model": "", "storage": "",
               "_native": "", "errors": "", "": ""}
    assert _imports("trace.m", str(src), modules) == {"storage", "_native", "trace.model",
                                                       "errors"}
