"""The whole-cluster check reads quantities by the config's own parser (config/quantities.py): a team
quota the config takes (`cpu: 1n`, an exponent, a sign) never stops the check, and one the API server
would not read is refused at config time, naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from render.cluster.scheduling import quantity
from tests.conftest import PROJECT_DIR
from tests.render_cli import render_cli

# Each written as Kubernetes' TestQuantityParse writes it (apimachinery quantity_test.go), and its value.
READ = {"1n": 1e-9, "5u": 5e-6, "100m": 0.1, "1.5": 1.5, "2Gi": 2 * 2.0**30, "1e3": 1e3, "1E-3": 1e-3,
        "0.5Ki": 512.0, "+4": 4.0, "1.3E+6": 1.3e6, ".5": 0.5, "1.G": 1e9, "3.001n": 4e-9, 8: 8.0, 0.5: 0.5}
NOT_READ = ["1x", "--1", "1e", "1Gb", "0.1mi", "1.1.M", "lots", True]


@pytest.mark.parametrize("text", list(READ), ids=str)
def test_the_check_reads_quantities_as_kubernetes_does(text: Any) -> None:
    assert quantity(text) == pytest.approx(READ[text], rel=1e-12)


def test_the_check_trims_spaces_as_the_api_server_decodes_json() -> None:
    assert quantity(" 2Gi ") == 2 * 2.0**30  # Quantity.UnmarshalJSON: strings.TrimSpace, then ParseQuantity


@pytest.mark.parametrize("text", NOT_READ, ids=str)
def test_what_kubernetes_does_not_read_the_check_does_not_read(text: Any) -> None:
    with pytest.raises(ValueError):
        quantity(text)


def _queues(**team: Any) -> dict[str, Any]:
    queues = yaml.safe_load((PROJECT_DIR / "Pulumi.lab-ha.yaml").read_text())["config"]["gpu-cluster:queues"]
    queues["teams"][0].update(team)
    return queues


def test_a_team_quota_of_one_nano_cpu_comes_through_the_check(tmp_path: Path, upstream_dir: Path) -> None:
    """Today's crash: the check's own parser knew no `n` (ValueError: not a quantity: '1n')."""
    result = render_cli(tmp_path, "lab-ha", {"queues": _queues(cpu="1n", memory="64e9")}, secrets=("sshPrivateKey",),
                        upstream=upstream_dir)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    cluster_queue = (tmp_path / "out" / "kubernetes" / "clusterqueue-cluster-vision.yaml").read_text()
    assert "nominalQuota: 1n" in cluster_queue


@pytest.mark.parametrize("cpu", ["1x", "--1", "1e"])
def test_a_quota_kubernetes_would_not_read_is_refused_naming_the_key(tmp_path: Path, cpu: str) -> None:
    result = render_cli(tmp_path, "lab-ha", {"queues": _queues(cpu=cpu)}, secrets=("sshPrivateKey",))
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "gpu-cluster:queues.teams[0].cpu" in result.stderr and "not a Kubernetes quantity" in result.stderr
