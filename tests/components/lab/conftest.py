"""Fixtures shared by the lab host-script tests."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def openssl_sim(tmp_path):
    """A simulated control plane whose openssl is the real one (it only reads certificates)."""
    from tests.hostsim import HostSim, isolation_unavailable

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    why = isolation_unavailable()
    if why is not None:
        pytest.skip(f"isolated host runs: {why}")
    return HostSim(tmp_path, real_tools=("openssl",))
