"""`python -m render <stack> --out DIR` deletes only what render wrote (render/out_dir.py): a
directory that holds anything else is refused with exit status 2 naming --out, and nothing in it
changes; render's own earlier output is replaced; symlinks never lead the deletion elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from render import __main__ as render_main
from render import out_dir, program
from tests.conftest import PROJECT_DIR


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _render(out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = render_main.main(["dev", "--out", str(out), "--no-check"])
    return rc, capsys.readouterr().err


def test_a_directory_holding_a_user_file_is_refused_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.md").write_text("mine\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('mine')\n")
    before = _tree(tmp_path)
    rc, err = _render(tmp_path, capsys)
    assert rc == 2
    assert f"--out {tmp_path}" in err and out_dir.MARKER in err
    assert _tree(tmp_path) == before


def test_out_dot_in_a_checkout_is_refused(tmp_path: Path) -> None:
    """The issue's case: `--out .` in a checkout removed the checkout, .git included."""
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (checkout / "README.md").write_text("readme\n")
    result = subprocess.run([sys.executable, "-m", "render", "dev", "--out", ".", "--no-check"], cwd=checkout,
                            env={**os.environ, "PYTHONPATH": str(PROJECT_DIR)}, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert "--out ." in result.stderr
    assert (checkout / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (checkout / "README.md").exists()


def test_a_file_as_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "plan.txt"
    target.write_text("keep\n")
    rc, err = _render(target, capsys)
    assert rc == 2 and "not a directory" in err and f"--out {target}" in err
    assert target.read_text() == "keep\n"


@pytest.mark.parametrize("exists", [False, True], ids=["missing", "empty"])
def test_a_missing_or_empty_directory_is_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str], exists: bool) -> None:
    out = tmp_path / "out"
    if exists:
        out.mkdir()
    rc, err = _render(out, capsys)
    assert rc == 0, err
    assert (out / "plan.json").is_file() and (out / out_dir.MARKER).is_file()


def test_rerender_replaces_its_own_output_and_keeps_a_user_file(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert _render(out, capsys)[0] == 0
    first = _tree(out)
    listed = [line for line in (out / out_dir.MARKER).read_text().splitlines() if not line.startswith("#")]
    assert sorted(listed) == sorted(name for name in first if name != out_dir.MARKER)
    stale = out / "kubernetes" / "stale-from-an-older-render.yaml"  # listed, as an older render would have
    stale.write_text("kind: Old\n")
    (out / out_dir.MARKER).write_text((out / out_dir.MARKER).read_text() + "kubernetes/stale-from-an-older-render.yaml\n")
    (out / "my-notes.md").write_text("mine\n")  # added by the user, not listed
    assert _render(out, capsys)[0] == 0
    second = _tree(out)
    assert not stale.exists(), "a file render listed is deleted"
    assert second.pop("my-notes.md") == b"mine\n", "a file render did not write survives"
    assert second == first


def test_a_marker_never_leads_the_deletion_outside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A marker listing '../x', an absolute path, or a path through a symlinked directory: none is
    deleted, and render refuses to write through the symlink."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.yaml").write_text("keep\n")
    (tmp_path / "sibling.txt").write_text("keep\n")
    out = tmp_path / "out"
    assert _render(out, capsys)[0] == 0
    marker = out / out_dir.MARKER
    marker.write_text(marker.read_text() + "../sibling.txt\n" + f"{elsewhere / 'precious.yaml'}\n"
                      + "link/precious.yaml\n")
    (out / "link").symlink_to(elsewhere)
    assert _render(out, capsys)[0] == 0
    assert (tmp_path / "sibling.txt").read_text() == "keep\n"
    assert (elsewhere / "precious.yaml").read_text() == "keep\n"

    # A directory render writes into, replaced by a symlink to elsewhere: refused, nothing written there.
    import shutil

    shutil.rmtree(out / "kubernetes")
    (out / "kubernetes").symlink_to(elsewhere)
    rc, err = _render(out, capsys)
    assert rc == 2 and "outside" in err
    assert sorted(p.name for p in elsewhere.iterdir()) == ["precious.yaml"]


def test_a_marker_that_is_a_symlink_is_no_marker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "render-out"
    assert _render(real, capsys)[0] == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data.txt").write_text("keep\n")
    (victim / out_dir.MARKER).symlink_to(real / out_dir.MARKER)
    rc, err = _render(victim, capsys)
    assert rc == 2 and out_dir.MARKER in err
    assert (victim / "data.txt").read_text() == "keep\n"


def test_out_through_a_symlink_to_render_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real"
    assert _render(real, capsys)[0] == 0
    link = tmp_path / "link"
    link.symlink_to(real)
    assert _render(link, capsys)[0] == 0
    assert (real / "plan.json").is_file() and link.is_symlink()


def test_write_refuses_a_foreign_directory_too(tmp_path: Path) -> None:
    """write() (used by tests and tools directly) applies the same rule as the command line."""
    (tmp_path / "keep.txt").write_text("keep\n")
    with pytest.raises(out_dir.OutDirError, match="--out"):
        render_main.write(program.run("dev"), tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "keep\n"


def test_an_output_from_before_the_marker_is_refused_with_the_way_out(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A render older than the marker left plan.json and summary.md: not deleted (render cannot
    tell it from a user's files), but the message says what to do once."""
    (tmp_path / "plan.json").write_text("{}\n")
    (tmp_path / "summary.md").write_text("# Plan of stack `dev`\n")
    rc, err = _render(tmp_path, capsys)
    assert rc == 2 and "older than the marker, remove it once by hand" in err
    assert (tmp_path / "plan.json").read_text() == "{}\n"
