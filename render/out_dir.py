"""The `--out` directory of `python -m render`: render deletes only what it wrote there.

Every render leaves a marker file, MARKER, listing the files it wrote. The next render into the
same directory deletes exactly those files (and the directories they leave empty), then writes
again. A directory without the marker is render's only when it is empty or missing: one that holds
anything else (a checkout, `--out .`, a home directory) is refused, and so is a path that is not a
directory. A file the user added beside render's output survives the next render.

The verdict: a render deletes its predecessor's summary.md as it starts (drop_verdict), and a run
that plans nothing leaves, in a directory an earlier render wrote, only a summary.md saying why
(leave_failure): the last run's "yes" is never read as the answer of a run that failed.

Symlinks: render never writes one, so a listed path that is a symlink, or lies under one, was not
written by render and is left alone (a marker cannot point the deletion outside the directory);
a marker that is itself a symlink is no marker. The `--out` path itself may be a symlink to a
directory: the marker must then be in that directory.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

MARKER = ".gpu-cluster-render"
# The marker's first line; a file named MARKER without it is not render's.
_HEADER = "# gpu-cluster render output"
_EXPLANATION = (
    f"{_HEADER}\n"
    "# Written by `python -m render`. The next render into this directory deletes the files listed\n"
    "# below (and nothing else) before it writes again; delete this file to keep them from that.\n"
)


class OutDirError(ValueError):
    """`--out` names a directory render must not write into (exit status 2)."""


def _marker(out: Path) -> Path | None:
    marker = out / MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        text = marker.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    return marker if text.startswith(_HEADER + "\n") else None


def check(out: Path) -> None:
    """Refuse an `--out` that render may not clear; nothing is changed. Raises OutDirError."""
    if out.exists() and not out.is_dir():
        raise OutDirError(f"--out {out}: not a directory; give a directory render may write into")
    if not out.exists():
        if out.is_symlink():
            raise OutDirError(f"--out {out}: a symlink to nothing; give a directory render may write into")
        return
    if _marker(out) is not None:
        return
    try:
        empty = next(out.iterdir(), None) is None
    except OSError as err:
        raise OutDirError(f"--out {out}: cannot read it ({err.strerror})") from err
    if not empty:
        # A render from before the marker left plan.json and summary.md: say how to move on once.
        older = " (if it is the output of a render older than the marker, remove it once by hand)" \
            if (out / "plan.json").is_file() and (out / "summary.md").is_file() else ""
        raise OutDirError(
            f"--out {out}: the directory holds files render did not write (no {MARKER} in it); render clears only "
            f"its own output, so give an empty or new directory (or the --out of an earlier render){older}"
        )


def _listed(marker: Path) -> list[PurePosixPath]:
    out = []
    for line in marker.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        rel = PurePosixPath(line)
        if rel.is_absolute() or any(part in ("", ".", "..") for part in rel.parts):
            continue  # never render's: it writes relative paths below the directory only
        out.append(rel)
    return out


def _under_symlink(out: Path, rel: PurePosixPath) -> bool:
    path = out
    for part in rel.parts:
        path = path / part
        if path.is_symlink():
            return True
    return False


def clear(out: Path) -> None:
    """check(out), then delete the files the previous render listed in its marker and the
    directories they leave empty; create `out` if it is missing."""
    check(out)
    out.mkdir(parents=True, exist_ok=True)
    marker = _marker(out)
    if marker is None:
        return
    dirs: set[Path] = set()
    for rel in _listed(marker):
        if _under_symlink(out, rel):
            continue
        path = out / rel
        if path.is_file():
            path.unlink()
        for parent in list(rel.parents)[:-1]:  # every directory between the file and `out`
            dirs.add(out / parent)
    for directory in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
        if directory.is_dir() and not directory.is_symlink() and next(directory.iterdir(), None) is None:
            directory.rmdir()


def mark(out: Path, written: list[Path]) -> None:
    """Leave the marker listing `written` (paths under `out`) for the next render to delete."""
    root = out.resolve()
    names = sorted({p.resolve().relative_to(root).as_posix() for p in written})
    marker = out / MARKER
    if marker.is_symlink():
        marker.unlink()
    marker.write_text(_EXPLANATION + "".join(f"{name}\n" for name in names))


SUMMARY = "summary.md"


def _own(out: Path, name: str) -> bool:
    """Whether `out`/name is a file the previous render's marker lists (never through a symlink)."""
    marker = _marker(out) if out.is_dir() else None
    rel = PurePosixPath(name)
    return marker is not None and rel in _listed(marker) and not _under_symlink(out, rel) and (out / rel).is_file()


def drop_verdict(out: Path) -> None:
    """Delete the previous render's summary.md as this render starts, so that a run that stops early
    (a bad config, a check that cannot run, an interrupt) never leaves the last run's verdict to be
    read as its own. Only the summary.md the marker lists; the rest stays until the render clears it
    (an `--against` of the previous plan.json still reads it)."""
    if _own(out, SUMMARY):
        (out / SUMMARY).unlink()


def leave_failure(out: Path, summary: str) -> None:
    """After a run that planned nothing: an earlier render's directory is cleared (its files only) and
    holds `summary` as summary.md, saying why. A missing or empty directory stays as it is: a first
    run that fails writes nothing. check(out) has passed: `out` is not a directory of anyone else's."""
    if _marker(out) is None:
        return
    clear(out)
    target = out / SUMMARY
    if target.exists() or target.is_symlink():  # a file of the user's, not render's: left alone
        return
    target.write_text(summary)
    mark(out, [target])
