"""A content-addressed memo on disk for the whole-cluster check's two costliest pure steps.

Parsing a chart's rendered YAML (the monitoring chart alone renders several MB of CRDs, and PyYAML
resolves and constructs every scalar in Python) and validating an object against its JSON schema
took about half of the check at 128 GPU workers. Both are pure functions of their inputs, and from
one `./plan` to the next almost every input is the same: the memo keeps each result under the SHA-256
of everything it depends on (the text or the object, the schema, and the versions of PyYAML,
jsonschema and kubernetes-validate), so a result is reused only for exactly the same question.

Values are JSON (never pickle: nothing read back can run code) in files of their own, written to a
temporary name and renamed (parallel test workers share the directory). A file that cannot be read
or parsed is a miss. Where: $GPU_CLUSTER_CHECK_CACHE, else $XDG_CACHE_HOME/gpu-cluster/check, else
~/.cache/gpu-cluster/check (created 0700); GPU_CLUSTER_CHECK_CACHE=off turns the memo off.
The memo only ever writes and replaces its own `<key>.json` files in that directory.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

CACHE_ENV = "GPU_CLUSTER_CHECK_CACHE"
_FORMAT = "1"  # bump when what is stored for a key changes


def cache_dir() -> Path | None:
    """The memo's directory, or None when it is turned off."""
    chosen = os.environ.get(CACHE_ENV, "")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-cluster" / "check"


@functools.cache
def _salt() -> str:
    """What every result also depends on: the libraries that compute them, and this format."""
    versions = []
    for dist in ("PyYAML", "jsonschema", "kubernetes-validate", "referencing"):
        try:
            versions.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist}=none")
    return ";".join([_FORMAT, *versions])


def key(kind: str, *parts: str) -> str:
    """The SHA-256 of the salt, the kind of result and every part (NUL-separated)."""
    digest = hashlib.sha256()
    for part in (_salt(), kind, *parts):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def load(name: str) -> Any | None:
    """The value stored under `name` (a key()), or None."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        return json.loads((folder / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def store(name: str, value: Any) -> None:
    """Keep `value` (JSON-serializable) under `name`; a failure to write is only a miss next time."""
    folder = cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(value, handle, separators=(",", ":"))
            os.replace(tmp, folder / f"{name}.json")
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return
