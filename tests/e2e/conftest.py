"""The e2e tier: one real control plane (e2e/control_plane.py) for the whole session, made from the
lab stack's plan, shared by every test under tests/e2e (each works in a namespace of its own).

Every test here carries the `e2e` mark: `make test` leaves them out (-m "not e2e") and `make e2e`
runs them; CI runs both. Where the toolchain is not built the fixture skips, which under CI=true is
a failure (tests/conftest.py): .ci/run builds the toolchain first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.toolchain_versions import ETCD, KUBERNETES, KWOK
from e2e import api, lab_stack, processes, report
from e2e.control_plane import ControlPlane
from tests.toolchain import toolchain_binary

HERE = Path(__file__).resolve().parent
NEEDED = [(KUBERNETES, "kube-apiserver"), (KUBERNETES, "kube-controller-manager"), (KUBERNETES, "kube-scheduler"),
          (ETCD, "etcd"), (ETCD, "etcdctl"), (KWOK, "kwok")]
SERVICE_ACCOUNT_TIMEOUT = 60


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: against the real control plane on loopback (make e2e)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory, upstream_dir: Path,
                  request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    for component, binary in NEEDED:
        toolchain_binary(component, binary)
    lab = lab_stack.from_stack("lab", upstream_dir)
    plane = ControlPlane(lab, tmp_path_factory.mktemp("control-plane"))
    try:
        plane.start()
    except processes.StartFailed as err:
        pytest.fail(f"the control plane did not come up: {err}")
    groups = [c.proc.pid for c in plane.components]
    facts = request.config.stash[report.CONTROL_PLANE] = plane.summary()
    yield plane
    if request.session.testsfailed:
        print(f"\ncontrol plane logs ({plane.logs}):\n{plane.log_tails()}")
    began = time.monotonic()
    plane.stop()
    left = plane.left_behind(groups)
    facts.update(stop_seconds=round(time.monotonic() - began, 2), left_behind=left)
    assert not left, f"processes left behind after the control plane stopped: groups {left}"


@pytest.fixture(scope="session")
def client(control_plane: ControlPlane) -> api.Client:
    assert control_plane.client is not None
    return control_plane.client


@pytest.fixture
def namespace(client: api.Client) -> Iterator[str]:
    """A namespace of this test's own, with its default ServiceAccount (the controller manager makes
    it; the ServiceAccount admission plugin refuses pods until it exists)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    client.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    client.wait_for(f"ServiceAccount {name}/default", f"/api/v1/namespaces/{name}/serviceaccounts",
                    lambda body: any(sa["metadata"]["name"] == "default" for sa in body.get("items", [])),
                    SERVICE_ACCOUNT_TIMEOUT)
    yield name
    client.request("DELETE", f"/api/v1/namespaces/{name}")  # frees its pods' GPUs; not waited for


def gpu_toleration(node_taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tolerations of the GPU nodes' taints as the model gives them (what the program's GPU pods carry)."""
    return [{"key": t["key"], "operator": "Equal", "value": t.get("value", ""), "effect": t["effect"]}
            for t in node_taints]
