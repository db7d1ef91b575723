"""What a human does about an alert, read from the alert's section of docs/runbook.md: the runbook is
the one home of that text, and each rule carries it as its `runbook` annotation (one line; a
Markdown link becomes its words and the repo path it points to) next to `runbook_url`, the link to the section.

The URL is repo-relative (`docs/runbook.md#<anchor>`): mkdocs.yml sets no `site_url`, so the
program knows no address the docs site is served at. The anchor is the id MkDocs' `toc` extension
gives an `## <alert>` heading: the lower-cased name (alert names are CamelCase letters and digits,
the chart's etcd alerts camelCase: components/monitoring/etcd.py);
tests/test_docs_runbook.py checks it against the page as Markdown renders it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
RUNBOOK_URL = "docs/runbook.md"
HUMAN = "**What a human does.**"
ALERT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]+")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)]*)\)")


@cache
def sections() -> dict[str, str]:
    """`## Title` -> the text up to the next `## ` heading."""
    parts = re.split(r"^## +(.+?) *$", RUNBOOK.read_text(), flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def remedy(alert: str) -> str:
    """The section's `What a human does.` paragraph, links reduced to their words, on one line."""
    body = sections().get(alert)
    if body is None or HUMAN not in body:
        raise ValueError(f"docs/runbook.md has no '## {alert}' section with a '{HUMAN}' paragraph: "
                         "every alert's remedy is written there (and only there)")
    said = body.split(HUMAN, 1)[1].split("\n\n", 1)[0]
    return " ".join(_LINK.sub(_words_and_path, said).split())


def _words_and_path(link: re.Match[str]) -> str:
    words, target = link.groups()
    if "://" not in target:  # docs/-relative, or an anchor of this page
        target = f"{RUNBOOK_URL}{target}" if target.startswith("#") else f"docs/{target}"
    return f"{words} ({target})"


def url(alert: str) -> str:
    if not ALERT_NAME.fullmatch(alert):
        raise ValueError(f"alert name {alert!r} is not camelCase letters and digits: its runbook anchor "
                         "would not be its lower-cased name")
    return f"{RUNBOOK_URL}#{alert.lower()}"
