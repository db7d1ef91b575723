"""graphviz's `dot` draws cluster.svg: the front door says so next to the two commands, with the
install lines the program's own message gives (render/cluster_picture.GRAPHVIZ_HINT), and says what
`./plan` does without it; docs/commands.md says the same."""

from __future__ import annotations

from pathlib import Path

from render.cluster_picture import GRAPHVIZ_HINT, GRAPHVIZ_INSTALL

PROJECT_DIR = Path(__file__).resolve().parents[1]


def _two_commands_section() -> str:
    text = (PROJECT_DIR / "README.md").read_text()
    return text.split("\n## The two commands\n", 1)[1].split("\n## ", 1)[0]


def _first_paragraph_of_commands_page() -> str:
    text = (PROJECT_DIR / "docs" / "commands.md").read_text()
    return text.split("\n\n", 2)[1]


def test_readme_names_graphviz_beside_the_two_commands() -> None:
    section = _two_commands_section()
    intro = section.split("```bash", 1)[0]  # before the commands, where what they need is said
    assert "graphviz" in intro and "cluster.svg" in intro, intro
    for line in GRAPHVIZ_INSTALL:
        assert line in intro and line in GRAPHVIZ_HINT, line
    assert "cluster.dot" in intro and "summary.md" in intro, "what happens without graphviz"


def test_commands_page_names_graphviz_first() -> None:
    first = _first_paragraph_of_commands_page()
    assert first.startswith("Needs Python 3.11"), first[:80]
    for must in ("graphviz", *GRAPHVIZ_INSTALL, "cluster.dot", "summary.md"):
        assert must in first, must
