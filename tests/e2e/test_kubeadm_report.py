"""`kubeadm config validate` (the toolchain's kubeadm) on every kubeadm config the lab stacks hand
a host, recorded for out/e2e/report.json (`kubeadm_validate`, per config). The checks themselves,
`kubeadm init --dry-run` too, live in tests/components/lab/test_kubeadm_real.py (the unit tier);
this runs the same validation and reports each verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.toolchain_versions import KUBERNETES
from e2e import report
from tests.components.lab.test_kubeadm_real import STACKS, _configs, _run
from tests.toolchain import toolchain_binary


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubeadm_config_is_valid_and_reported(stack: str, tmp_path: Path, request: pytest.FixtureRequest):
    kubeadm = toolchain_binary(KUBERNETES, "kubeadm")
    verdicts = request.config.stash.setdefault(report.KUBEADM, {})
    for name, text in _configs(stack).items():
        path = tmp_path / (name.replace(" ", "-") + ".yaml")
        path.write_text(text)
        result = _run([str(kubeadm), "config", "validate", "--config", str(path)])
        said = (result.stdout + result.stderr).strip()
        verdicts[f"{stack}: {name}"] = "ok" if result.returncode == 0 and said == "ok" else said
    refused = {k: v for k, v in verdicts.items() if k.startswith(f"{stack}: ") and v != "ok"}
    assert not refused
