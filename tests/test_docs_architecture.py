"""docs/architecture.md stays current: every project path it names exists, every top-level folder git
tracks is described there, and each folder says what lives in it (its README.md or the docstring of
its __init__.py)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from tests.conftest import PROJECT_DIR

PAGE = PROJECT_DIR / "docs" / "architecture.md"
# docs/ is MkDocs' docs_dir: a README.md there would clash with index.md (both become the site's
# front page), so the front page is what says what lives there.
FOLDER_NOTE = {"docs": "index.md"}
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
# A path as the page writes one: words, dots, dashes, `*` globs and `<placeholder>`s joined by `/`,
# optionally followed by `:function`.
_PATH = re.compile(r"^([\w.*<>-]+(?:/[\w.*<>-]*)*)(?::\w+)?$")
_FILE_SUFFIXES = (".py", ".sh", ".md", ".yaml", ".yml", ".toml", ".txt")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=PROJECT_DIR, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def _top_level_folders(tracked: list[str]) -> set[str]:
    return {path.split("/", 1)[0] for path in tracked if "/" in path}


def _named_paths(text: str) -> list[str]:
    paths = []
    for span in _CODE_SPAN.findall(text):
        match = _PATH.match(span.strip())
        name = match[1] if match else ""
        if name not in _FILE_SUFFIXES and ("/" in name or name.endswith(_FILE_SUFFIXES)):  # not `.sh` alone
            paths.append(name)
    return paths


def _part_pattern(parts: list[str]) -> str:
    """`*` any characters within one part, `<placeholder>` one whole part or a piece of one."""
    return "/".join(re.sub(r"<[^>/]*>", "[^/]+", re.escape(part).replace(r"\*", "[^/]*")) for part in parts)


def _missing(path: str, tracked: list[str]) -> bool:
    """Whether a path the page names is absent. A path from the root (its first part a tracked
    top-level entry) must match a tracked file or folder; a bare name (`scripts.py`, `lab/`, named
    inside its folder's sentence) must be the name of some tracked file or folder."""
    top = {p.split("/", 1)[0] for p in tracked}
    parts = path.rstrip("/").split("/")
    if len(parts) == 1 and parts[0] not in top:
        bare = re.compile(rf"(^|/){_part_pattern(parts)}(/|$)")
        return not any(bare.search(p) for p in tracked)
    if parts[0] not in top:
        return False  # not a project path (`out/<stack>`, a pod path): nothing to hold
    as_file_or_folder = re.compile(rf"^{_part_pattern(parts)}(/.*)?$")
    return not any(as_file_or_folder.match(p) for p in tracked)


def _says_what_lives_there(folder: Path) -> bool:
    for note in ("README.md", FOLDER_NOTE.get(folder.name, "README.md")):
        if (folder / note).is_file() and (folder / note).read_text().strip():
            return True
    init = folder / "__init__.py"
    return init.is_file() and bool(ast.get_docstring(ast.parse(init.read_text())))


def test_every_path_the_page_names_exists() -> None:
    tracked = _tracked()
    named = _named_paths(PAGE.read_text())
    assert len(named) > 50, "the page names the files it describes"
    missing = sorted({p for p in named if _missing(p, tracked)})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_path_check_catches_a_stale_name() -> None:
    tracked = _tracked()
    assert _missing("render/no_such_module.py", tracked)
    assert _missing("no_such_module.py", tracked)
    assert _missing("components/<concern>/no_such.py", tracked)
    assert not _missing("components/<platform>/", tracked)
    assert not _missing("render/update*.py", tracked)
    assert not _missing("Pulumi.<stack>.yaml", tracked)
    assert _missing("no_such_folder/", tracked)


def test_every_top_level_folder_is_described() -> None:
    text = PAGE.read_text()
    folders = _top_level_folders(_tracked())
    assert {"components", "config", "e2e", "tools"} <= folders
    undescribed = sorted(f for f in folders if f"`{f}/`" not in text)
    assert not undescribed, f"docs/architecture.md does not describe the folders {undescribed} (as `name/`)"


def test_every_top_level_folder_says_what_lives_there() -> None:
    silent = sorted(f for f in _top_level_folders(_tracked()) if not _says_what_lives_there(PROJECT_DIR / f))
    assert not silent, f"folders with neither a README.md nor an __init__.py docstring: {silent}"
