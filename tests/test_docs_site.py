"""README is the front door (at most ~250 lines) and every relative link in it resolves; every page
under docs/ is in mkdocs.yml's nav and the site builds with `mkdocs build --strict` (a broken link,
a missing anchor or a page left out of the nav fails it), as `make docs` and CI run it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import PROJECT_DIR

README = PROJECT_DIR / "README.md"
DOCS = PROJECT_DIR / "docs"
MAX_README_LINES = 250
# [text](target) outside code spans; targets with a scheme (https:) or a bare anchor are not files.
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _without_code(text: str) -> str:
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def _relative_links(text: str) -> list[str]:
    return [t for t in _LINK.findall(_without_code(text)) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def _nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def _mkdocs() -> dict[str, Any]:
    # mkdocs.yml may hold !!python tags in other projects; this one is plain YAML.
    return yaml.safe_load((PROJECT_DIR / "mkdocs.yml").read_text())


def test_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    text = README.read_text()
    for must in ("./plan", "make test", "### lab", "### gke", "### dev", "docs/"):
        assert must in text, must


def test_every_readme_link_resolves() -> None:
    links = _relative_links(README.read_text())
    assert links, "README links into docs/"
    broken = [t for t in links if not (PROJECT_DIR / t.split("#", 1)[0]).exists()]
    assert not broken, f"README.md links to missing files: {broken}"


def test_readme_links_to_every_page_in_the_nav() -> None:
    """Where to read next: each page of the site is one click from the front door."""
    linked = {t.split("#", 1)[0] for t in _relative_links(README.read_text())}
    pages = {f"docs/{p}" for p in _nav_pages(_mkdocs()["nav"])}
    assert not pages - linked - {"docs/index.md"}, sorted(pages - linked)


def test_every_docs_page_is_in_the_nav() -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    nav = _nav_pages(_mkdocs()["nav"])
    assert len(nav) == len(set(nav)), "a page is twice in the nav"
    assert pages == set(nav), {"not in nav": sorted(pages - set(nav)), "no such page": sorted(set(nav) - pages)}


def test_the_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    out = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=PROJECT_DIR,
                         capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "runbook" / "index.html").exists()
