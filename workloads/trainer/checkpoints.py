"""Atomic checkpoints on the shared volume (temp file, fsync, os.replace), and the newest readable
one to resume from."""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainer.events import log

CHECKPOINT_RE = re.compile(r"^step-(\d{9})\.pt$")


def checkpoint_steps(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Completed checkpoints (temp files never match), newest first."""
    found = []
    for p in ckpt_dir.glob("step-*.pt"):
        if m := CHECKPOINT_RE.match(p.name):
            found.append((int(m[1]), p))
    return sorted(found, reverse=True)


def newest_valid_checkpoint(ckpt_dir: Path) -> tuple[Path, dict] | None:
    import torch

    for _, path in checkpoint_steps(ckpt_dir):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if {"model", "optimizer", "epoch", "batch_in_epoch", "global_step"} <= set(state):
                return path, state
        except Exception as exc:  # a truncated or foreign file: skip to the previous one
            log("checkpoint_skipped", path=path, error=type(exc).__name__)
    return None


def save_checkpoint(ckpt_dir: Path, state: dict, keep: int) -> Path:
    """Write to a temp file in the same directory, fsync, then rename: a reader never sees half a file."""
    import torch

    final = ckpt_dir / f"step-{state['global_step']:09d}.pt"
    tmp = ckpt_dir / f".tmp-{final.name}.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    try:
        dir_fd = os.open(ckpt_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass  # some network filesystems refuse fsync on a directory; the rename is still atomic
    for _, old in checkpoint_steps(ckpt_dir)[keep:]:
        old.unlink(missing_ok=True)
    return final
