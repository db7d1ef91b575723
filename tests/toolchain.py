"""The real components built by tools/toolchain/build.sh (`make toolchain`), found in its cache.

A test that needs one calls `toolchain_binary`: where the binary is not built it skips, which under
CI=true is a failure (conftest.py), since .ci/run builds the toolchain before the tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from components.toolchain_versions import ToolchainComponent, binary_path


def toolchain_binary(component: ToolchainComponent, binary: str) -> Path:
    path = binary_path(component, binary)
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.skip(f"{binary} {component.version} is not built at {path}: run `make toolchain` "
                    f"(tools/toolchain/build.sh {component.name}; docs/toolchain.md)")
    return path
