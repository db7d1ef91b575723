"""The previous verdict (render/out_dir.py): every render deletes the summary.md its predecessor wrote
before it starts, and a run that plans nothing leaves a summary.md saying why in a directory an
earlier render wrote; never a file render did not write, never through a symlink."""

from __future__ import annotations

from pathlib import Path

import pytest

from render import __main__ as render_main
from render import out_dir


def _render(out: Path, capsys: pytest.CaptureFixture[str]) -> int:
    rc = render_main.main(["dev", "--out", str(out), "--no-check"])
    capsys.readouterr()
    return rc


def test_the_last_summary_is_gone_once_a_render_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert _render(out, capsys) == 0
    out_dir.drop_verdict(out)  # what main does before the work: a run stopped half-way leaves no answer
    assert not (out / "summary.md").exists()
    assert (out / "plan.json").is_file()  # an --against of the last plan.json still reads it


def test_a_summary_render_did_not_write_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert _render(out, capsys) == 0
    (out / "summary.md").unlink()
    outside = tmp_path / "mine.md"
    outside.write_text("mine\n")
    (out / "summary.md").symlink_to(outside)  # listed by the marker, but a symlink: never render's
    out_dir.drop_verdict(out)
    out_dir.leave_failure(out, "No\n")
    assert outside.read_text() == "mine\n" and (out / "summary.md").is_symlink()


def test_a_failure_in_a_new_directory_writes_nothing(tmp_path: Path) -> None:
    out_dir.leave_failure(tmp_path / "new", "No\n")
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    out_dir.leave_failure(tmp_path / "empty", "No\n")
    assert list((tmp_path / "empty").iterdir()) == []


def test_the_failure_summary_is_the_next_renders_to_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert _render(out, capsys) == 0
    out_dir.leave_failure(out, "# No: bad config\n")
    assert sorted(p.name for p in out.iterdir()) == [out_dir.MARKER, "summary.md"]
    assert _render(out, capsys) == 0  # the marker lists it: cleared, then written again
    assert "No: bad config" not in (out / "summary.md").read_text()
