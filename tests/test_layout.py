"""The layout's promises (docs/architecture.md), read from the code's own imports: dependencies point
one way, __main__ -> stacks -> components and config, and no component takes a platform's whole
config type."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import PROJECT_DIR

PLATFORM_TYPES = {"StackConfig", "LabStack", "DevStack", "GkeStack", "Addons"}
# What the config may import of the components: the pinned versions (defaults), nothing else. The
# facts both floors need are the config's own and the components read them downward: where each
# pinned chart lies in a charts folder (config/chart_source.py), the labels, taints and resource
# names of the GPU scheduling contract (config/scheduling_contract.py).
CONFIG_MAY_IMPORT = {"components.versions"}


def _imports(path: Path) -> list[tuple[str, set[str]]]:
    """(module, names) of every import in `path`, `import a.b` as ("a.b", set())."""
    out: list[tuple[str, set[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, {a.name for a in node.names}))
        elif isinstance(node, ast.Import):
            out += [(a.name, set()) for a in node.names]
    return out


def _modules(folder: str) -> list[tuple[str, Path]]:
    return [(p.relative_to(PROJECT_DIR).as_posix(), p) for p in sorted((PROJECT_DIR / folder).rglob("*.py"))]


def test_components_take_config_sections_not_a_platforms_stack_type() -> None:
    """Components receive the settings they use (config sections, enums, their own args
    dataclasses), never a whole LabStack / DevStack / GkeStack / Addons: stacks/ builds their args."""
    offenders = []
    for rel, path in _modules("components"):
        for module, names in _imports(path):
            root = module.split(".")[0]
            if root == "config" and (names & PLATFORM_TYPES or not names):  # `import config`: all of it
                offenders.append(f"{rel}: {module} {sorted(names)}")
            if root == "stacks":
                offenders.append(f"{rel}: imports the wiring ({module})")
    assert offenders == []


def test_config_imports_no_component_but_pure_facts() -> None:
    offenders = [
        f"{rel}: {module}"
        for rel, path in _modules("config")
        for module, names in _imports(path)
        if module.split(".")[0] in ("components", "stacks", "render")
        and not ({module} | {f"{module}.{n}" for n in names}) & CONFIG_MAY_IMPORT
    ]
    assert offenders == []


def test_only_stacks_import_stacks() -> None:
    """The wiring is the top of the house: nothing under components/ or config/ reaches back up."""
    offenders = [
        f"{rel}: {module}"
        for folder in ("components", "config")
        for rel, path in _modules(folder)
        for module, _ in _imports(path)
        if module.split(".")[0] == "stacks"
    ]
    assert offenders == []


def test_the_add_ons_never_ask_which_platform_they_run_on() -> None:
    """stacks/addons.py takes the shared Addons config and the Cluster contract only (README
    "Layout"): no platform's config module, no platform stack type, no platform's wiring."""
    platform_modules = {"config.lab", "config.dev", "config.gke", "stacks.lab", "stacks.dev", "stacks.gke"}
    offenders = [
        module for module, names in _imports(PROJECT_DIR / "stacks" / "addons.py")
        if module in platform_modules or names & (PLATFORM_TYPES - {"Addons"})
    ]
    assert offenders == []


def test_the_checks_see_imports() -> None:
    """The checks above read real imports: the wiring imports a platform type and components."""
    lab = _imports(PROJECT_DIR / "stacks" / "lab.py")
    assert any(m == "config" and "LabStack" in n for m, n in lab)
    assert any(m.startswith("components.") for m, _ in lab)
    lab_config = _imports(PROJECT_DIR / "config" / "lab.py")
    assert any(m == "components" and "versions" in n for m, n in lab_config)
