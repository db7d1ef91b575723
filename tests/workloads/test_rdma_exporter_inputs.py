"""What the RDMA exporter takes as a counter and where it listens (issue 30).

- A kernel counter file holds decimal digits and a newline (`%llu\\n`), at most 2**64 - 1. Python's
  int() also takes `1_000`, `+42`, ` 7 `, non-ASCII digits and numbers of any length: such a file is
  a read error (counted in rdma_exporter_read_errors_total), never a counter value.
- On the host network the DaemonSet listens on the node's own address (status.hostIP, which for a
  hostNetwork pod is also its pod IP, the address its Service endpoint and so Prometheus use), not
  on every interface of the node.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from components import rdma_network
from tests.workloads.test_rdma_exporter import (
    WORKLOADS,
    FakeSysfs,
    names,
    rdma_exporter,
    running_exporter,
    scrape,
    value,
)

MAX_U64 = (1 << 64) - 1
NOT_COUNTERS = {
    "underscores": "1_000",
    "plus": "+42",
    "thirty-digits": "1" * 30,
    "over-64-bits": str(MAX_U64 + 1),
    "arabic-indic": "\u0663\u0664",  # int() reads 34
    "inner-space": "4 2",
    "leading-space": " 7",
    "negative": "-3",
    "empty": "",
}
COUNTERS = {"zero": "0", "max-u64": str(MAX_U64), "leading-zero": "0042"}


@pytest.mark.parametrize("text", NOT_COUNTERS.values(), ids=NOT_COUNTERS.keys())
def test_a_counter_file_that_is_not_plain_digits_is_a_read_error(text: str) -> None:
    with pytest.raises(rdma_exporter.ReadError):
        rdma_exporter.parse_counter(text + "\n")


@pytest.mark.parametrize("text", COUNTERS.values(), ids=COUNTERS.keys())
def test_plain_digits_up_to_64_bits_are_counters(text: str) -> None:
    assert rdma_exporter.parse_counter(text + "\n") == int(text)


def test_the_exporter_counts_them_as_read_errors_and_serves_the_rest(tmp_path) -> None:
    fs = FakeSysfs(tmp_path / "ib")
    fs.port("mlx5_0", hw={"out_of_sequence": 5, **{f"bad_{k}": 0 for k in NOT_COUNTERS}},
            counters={"port_xmit_data": MAX_U64})
    for k, text in NOT_COUNTERS.items():
        (fs.root / "mlx5_0" / "ports" / "1" / "hw_counters" / f"bad_{k}").write_text(text + "\n")
    with running_exporter(fs.root) as url:
        s = scrape(url)
    errors = {dict(k)["file"] for k in names(s, "rdma_exporter_read_errors_total")}
    assert errors == {f"hw_counters/bad_{k}" for k in NOT_COUNTERS}
    hw = {dict(k)["counter"] for k in names(s, "rdma_port_hw_counter_total")}
    assert hw == {"out_of_sequence"}
    assert value(s, "rdma_port_counter_total", device="mlx5_0", port="1", counter="port_xmit_data") == float(MAX_U64)


# --- where it listens ----------------------------------------------------------------------------


def test_the_daemonset_listens_on_the_host_ip_from_the_downward_api() -> None:
    pod = rdma_network.exporter_daemonset("monitoring", "img")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    (container,) = pod["containers"]
    assert "--listen-address=$(HOST_IP)" in container["command"]
    # kubelet expands $(HOST_IP) only from a variable of the container's own env
    assert {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}} in container["env"]
    # the sidecar, in the pod's own network namespace, keeps listening on all of the pod's addresses
    assert not any(a.startswith("--listen-address") for a in rdma_network.exporter_sidecar("img")["command"])


def _refused(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def test_bound_to_one_address_it_is_not_reachable_on_another(tmp_path) -> None:
    """127.0.0.2 stands for the node's address, 127.0.0.1 for its other interfaces (all of 127/8
    is loopback on Linux)."""
    fs = FakeSysfs(tmp_path / "ib")
    fs.port("irdma0", hw={"cnpSent": 1})
    with running_exporter(fs.root, "--listen-address", "127.0.0.2") as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert _refused("127.0.0.1", port)
        with socket.create_connection(("127.0.0.2", port), timeout=5) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 ") and b"\nrdma_exporter_devices 1.0\n" in answer


@pytest.mark.parametrize("address", ["$(HOST_IP)", "node-a", "", "10.0.0.300"])
def test_a_listen_address_that_is_no_ip_exits_2_naming_the_option(address: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "trainer.rdma_exporter", f"--listen-address={address}"],
                          env={"PYTHONPATH": str(WORKLOADS), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc
    assert "--listen-address must be an IPv4 or IPv6 address" in proc.stderr and "status.hostIP" in proc.stderr
