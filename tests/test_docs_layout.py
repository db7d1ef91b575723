"""The docs site reads in a normal window, measured in a real browser: the built site (mkdocs, as
`make docs` builds it) loaded in headless Chromium at 1400x900, the layout read back from the page.

A newcomer found the reference page's key names broken mid-word ("gpu-cluster:pl" / "atform") and
the queues page's YAML cut off at the column's edge (docs/stylesheets/layout.css says what fixed
each). Chromium lays the page out with the fonts this machine has (Google's are not reachable); a
monospace fallback is as wide as Roboto Mono (0.6em), so the widths hold for readers online too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import CHROMIUM, Browser, page_url
from tests.conftest import PROJECT_DIR

WIDTH, HEIGHT = 1400, 900
# A classic scrollbar is 15 px high in Chromium; the theme's "thin" one was 10 px of light grey.
MIN_SCROLLBAR_PX = 12

# A name in a table's first column (a key, a file, an alert) wrapped onto a second line; and a
# table wider than the text column (it scrolls sideways, its last columns out of sight).
_FIRST_COLUMN_NAMES_AND_WIDE_TABLES = """
({
  wrapped: [...document.querySelectorAll('.md-typeset table td:first-child > code')]
    .filter(code => code.getClientRects().length > 1).map(code => code.textContent),
  wide: [...document.querySelectorAll('.md-typeset table')]
    .map(table => table.closest('.md-typeset__scrollwrap') || table)
    .filter(box => box.scrollWidth > box.clientWidth + 1)
    .map(box => box.querySelector('td') ? box.querySelector('td').textContent.slice(0, 60) : '?'),
})
"""

# The reference page's key column: each key on one line (one client rect of its code element).
_KEY_CELLS = """
[...document.querySelectorAll('.md-typeset table td:first-child > code')]
  .map(code => ({key: code.textContent, lines: code.getClientRects().length}))
"""

# Every code block: how wide its content is, how wide it shows, and how a wider one overflows.
_CODE_BLOCKS = """
[...document.querySelectorAll('.md-typeset pre > code')].map(code => ({
  first: code.textContent.split('\\n')[0],
  contentWidth: code.scrollWidth,
  shownWidth: code.clientWidth,
  overflowX: getComputedStyle(code).overflowX,
  scrollbarHeight: code.offsetHeight - code.clientHeight,
}))
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make docs` builds it (strict), once for this module."""
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run([str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(out)], cwd=PROJECT_DIR,
                          capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():  # under CI=true a skip fails (conftest.py): .ci/run installs it
        pytest.skip(f"{CHROMIUM} not found: apt-get install chromium")
    with Browser(WIDTH, HEIGHT) as opened:
        yield opened


def _pages(site: Path) -> list[str]:
    return sorted(p.parent.relative_to(site).as_posix() for p in site.rglob("index.html")
                  if p.parent != site and "assets" not in p.parts)


def _measure(browser: Browser, site: Path, page: str, script: str) -> Any:
    browser.open(page_url(site, page))
    return browser.evaluate(script)


def test_the_reference_key_names_stay_on_one_line(browser: Browser, site: Path) -> None:
    cells = _measure(browser, site, "reference/config", _KEY_CELLS)
    assert len(cells) > 200, "the reference page's key column was not found"
    broken = [c["key"] for c in cells if c["lines"] != 1]
    assert not broken, f"{len(broken)} key names wrap at {WIDTH} px, e.g. {broken[:5]}"


def test_table_names_stay_whole_and_tables_fit_the_column(browser: Browser, site: Path) -> None:
    pages = _pages(site)
    assert "reference/config" in pages and "queues" in pages and len(pages) > 30
    found = {page: _measure(browser, site, page, _FIRST_COLUMN_NAMES_AND_WIDE_TABLES) for page in pages}
    wrapped = {page: f["wrapped"] for page, f in found.items() if f["wrapped"]}
    wide = {page: f["wide"] for page, f in found.items() if f["wide"]}
    assert not wrapped, f"names in a table's first column wrapped at {WIDTH} px: {wrapped}"
    assert not wide, f"tables wider than the text column at {WIDTH} px (first cell): {wide}"


def test_the_queues_page_code_blocks_fit_the_column(browser: Browser, site: Path) -> None:
    blocks = _measure(browser, site, "queues", _CODE_BLOCKS)
    assert len(blocks) > 5
    cut = [(b["first"], b["contentWidth"], b["shownWidth"]) for b in blocks if b["contentWidth"] > b["shownWidth"]]
    assert not cut, f"code blocks of docs/queues.md wider than the column at {WIDTH} px (first line, px, px): {cut}"


def test_a_wider_code_block_scrolls_with_a_visible_scrollbar(browser: Browser, site: Path) -> None:
    """Elsewhere a long line may stay (a command is not rewrapped): then the block scrolls sideways
    and says so with a full-size scrollbar, never clipping the line or spilling over the sidebar."""
    clipped = {}
    for page in _pages(site):
        wide = [b for b in _measure(browser, site, page, _CODE_BLOCKS) if b["contentWidth"] > b["shownWidth"]]
        bad = [b["first"] for b in wide
               if b["overflowX"] not in ("auto", "scroll") or b["scrollbarHeight"] < MIN_SCROLLBAR_PX]
        if bad:
            clipped[page] = bad
    assert not clipped, f"code blocks wider than the column without a visible scrollbar at {WIDTH} px: {clipped}"
