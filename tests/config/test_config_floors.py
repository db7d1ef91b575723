"""The platform's own type says what differs (docs/architecture.md, "The GPU inventory"): nowhere in
the program is a platform compared by its name or a stack taken as `Any`. The import circles and
function-local imports that used to need both are held by tests/test_import_graph.py."""

from __future__ import annotations

import re

from tests.conftest import PROJECT_DIR

PROGRAM_FOLDERS = ("config", "components", "stacks", "render")

# A platform named as a string: `str(cfg.platform) == "gke"`, `platform != "lab"`, `== "dev"`.
PLATFORM_BY_NAME = re.compile(r"""platform\)?\s*[!=]=|[!=]=\s*["'](lab|gke|dev)["']""")


def test_no_platform_compared_by_name_and_no_untyped_stack() -> None:
    sources = [PROJECT_DIR / "__main__.py",
               *(p for folder in PROGRAM_FOLDERS for p in sorted((PROJECT_DIR / folder).rglob("*.py")))]
    assert len(sources) > 100  # the check reads the whole program
    offenders = [f"{p.relative_to(PROJECT_DIR)}:{i}: {line.strip()}" for p in sources
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if PLATFORM_BY_NAME.search(line) or re.search(r"\bstack: Any\b", line)]
    assert offenders == []
    assert PLATFORM_BY_NAME.search('if str(cfg.platform) == "gke":') and PLATFORM_BY_NAME.search('x != "lab"')
    assert not PLATFORM_BY_NAME.search("if isinstance(cfg, GkeStack):")
