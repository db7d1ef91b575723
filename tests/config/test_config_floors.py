"""config/ in floors (docs/architecture.md, "The GPU inventory"): read from the modules' own imports,
no import circle among config's modules (a TYPE_CHECKING import counts: it is there because of a
circle), no function-local import of a project module dodging one (nor in the check's node model),
no `stack: Any` and no platform compared by its name: what differs is in the platform's own type
and its Inventory."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import PROJECT_DIR

PROJECT_PACKAGES = {"config", "components", "stacks", "render"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_DIR).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _config_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((PROJECT_DIR / "config").rglob("*.py"))}


def _top_level_imports(tree: ast.Module, known: set[str]) -> set[str]:
    """The modules of `known` a module imports at its top level, inside `if` blocks (TYPE_CHECKING) too."""
    out: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If | ast.Try):
            body += [*node.body, *node.orelse]
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from config import lab` runs config/__init__.py first: an edge to the package too
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return out & known


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_circles() -> None:
    """The check below can fail: a two-module circle and a three-module one are found, a chain is not."""
    assert circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle_in_config() -> None:
    modules = _config_modules()
    graph = {name: _top_level_imports(ast.parse(path.read_text()), set(modules)) - {name}
             for name, path in modules.items()}
    assert sum(len(edges) for edges in graph.values()) > 50  # the check reads real imports
    assert circles(graph) == []


def _local_project_imports(path: Path) -> list[str]:
    """Imports of a project module inside a function: each dodges a circle."""
    return _local_project_imports_at(path, PROJECT_DIR)


def _local_project_imports_at(path: Path, root: Path) -> list[str]:
    found: list[str] = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.module:
                    modules = [node.module]
                elif isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                else:
                    continue
                found += [f"{path.relative_to(root)}:{node.lineno} {m}" for m in modules
                          if m.split(".")[0] in PROJECT_PACKAGES]
    return found


def test_no_function_local_import_of_the_project_in_config_or_the_node_model(tmp_path: Path) -> None:
    paths = [*_config_modules().values(), PROJECT_DIR / "render" / "cluster" / "nodes.py"]
    assert [hit for p in paths for hit in _local_project_imports(p)] == []
    # The check sees such an import (and not a standard library one):
    probe = tmp_path / "probe.py"
    probe.write_text("import json\n\n\ndef f():\n    import json\n    from config.queues import Flavor\n")
    assert [hit.split(" ")[-1] for hit in _local_project_imports_at(probe, tmp_path)] == ["config.queues"]


# A platform named as a string: `str(cfg.platform) == "gke"`, `platform != "lab"`, `== "dev"`.
PLATFORM_BY_NAME = re.compile(r"""platform\)?\s*[!=]=|[!=]=\s*["'](lab|gke|dev)["']""")


def test_no_platform_compared_by_name_and_no_untyped_stack() -> None:
    sources = [*_config_modules().values(), PROJECT_DIR / "stacks" / "addons.py"]
    offenders = [f"{p.relative_to(PROJECT_DIR)}:{i}: {line.strip()}" for p in sources
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if PLATFORM_BY_NAME.search(line) or re.search(r"\bstack: Any\b", line)]
    assert offenders == []
    assert PLATFORM_BY_NAME.search('if str(cfg.platform) == "gke":') and PLATFORM_BY_NAME.search('x != "lab"')
