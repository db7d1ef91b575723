"""What the trainer says: `trainer: event=<name> key=value ...` log lines (parse_event reads them
back) and, with a test split, the final `trainer: result {...}` JSON line, also written to
<checkpoint-dir>/result.json."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"


def log(event: str, **fields: Any) -> None:
    parts = [f"event={event}"]
    for key, value in fields.items():
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        parts.append(f"{key}={shlex.quote(text) if text == '' or any(c.isspace() for c in text) else text}")
    print("trainer: " + " ".join(parts), flush=True)


def parse_event(line: str) -> dict[str, str] | None:
    """A `trainer: event=...` line as a dict (None for any other line)."""
    idx = line.find("trainer: event=")
    if idx < 0:
        return None
    return dict(tok.split("=", 1) for tok in shlex.split(line[idx + len("trainer: "):]) if "=" in tok)



def write_result(ckpt_dir: Path, result: dict) -> Path:
    """The final result as one JSON line in the log and in <checkpoint-dir>/result.json (atomic)."""
    line = json.dumps(result, sort_keys=True)
    print(f"trainer: result {line}", flush=True)
    path = ckpt_dir / RESULT_FILE
    tmp = ckpt_dir / f".tmp-{RESULT_FILE}.{os.getpid()}"
    tmp.write_text(line + "\n")
    os.replace(tmp, path)
    return path


def parse_result(line: str) -> dict | None:
    idx = line.find("trainer: result ")
    return json.loads(line[idx + len("trainer: result "):]) if idx >= 0 else None

