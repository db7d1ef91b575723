"""The RDMA counter exporter (workloads/trainer/rdma_exporter.py), run as the image runs it
(`python -m trainer.rdma_exporter`) against a fake /sys/class/infiniband written under tmp_path, and
scraped over HTTP on 127.0.0.1 (a port the kernel picks) with the exposition parsed by
prometheus_client's own text parser: several devices and ports, 32-bit wrap and 64-bit reset,
unreadable and missing files, a device that leaves (exclusive netns mode) and comes back.

`FakeSysfs` and `running_exporter` are used by tests/components/monitoring/test_rdma_monitoring.py
too (a real Prometheus scrapes the exporter there)."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import PROJECT_DIR
from tests.processes import stop

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from trainer import rdma_exporter  # noqa: E402
from trainer.rdma_exporter import RETAIN_SECONDS, WRAP_32, RdmaCollector, Total, parse_rate, parse_state  # noqa: E402

STARTUP_SECONDS = 30.0

# Seed 002's irdma port (Intel E810, 25GbE RoCE): a few of its hw_counters, values from the seed.
IRDMA_HW = {"iwInRdmaWrites": 141075419, "iwOutRdmaWrites": 137113821, "iwInRdmaReads": 23, "cnpSent": 0,
            "cnpHandled": 0, "cnpIgnored": 0, "RxECNMrkd": 0, "ip4InOctets": 5000, "ip4OutOctets": 7000,
            "ip6InOctets": 11, "ip6OutOctets": 13, "tcpRetransSegs": 0, "lifespan": 10}
# An mlx5 RoCE port: PMA counters (port_*_data in 4-octet units) and its hw_counters.
MLX5_COUNTERS = {"port_xmit_data": 1000, "port_rcv_data": 2000, "port_xmit_packets": 30, "port_rcv_packets": 40,
                 "symbol_error": 0, "link_downed": 1}
MLX5_HW = {"out_of_sequence": 3, "packet_seq_err": 2, "local_ack_timeout_err": 0, "np_ecn_marked_roce_packets": 5,
           "np_cnp_sent": 5, "rp_cnp_handled": 7, "rp_cnp_ignored": 0, "roce_adp_retrans": 1, "lifespan": 12}


class FakeSysfs:
    """A /sys/class/infiniband tree: <root>/<device>/ports/<port>/{state,phys_state,rate,link_layer,
    hw_counters/*,counters/*}."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def port(self, device: str, port: str = "1", *, state: str = "4: ACTIVE", phys_state: str = "5: LinkUp",
             rate: str | None = "25 Gb/sec (1X EDR)", link_layer: str = "Ethernet",
             hw: dict[str, int] | None = None, counters: dict[str, int] | None = None) -> Path:
        pdir = self.root / device / "ports" / port
        pdir.mkdir(parents=True, exist_ok=True)
        (pdir / "state").write_text(state + "\n")
        (pdir / "phys_state").write_text(phys_state + "\n")
        (pdir / "link_layer").write_text(link_layer + "\n")
        if rate is not None:
            (pdir / "rate").write_text(rate + "\n")
        for group, values in (("hw_counters", hw), ("counters", counters)):
            if values is not None:
                (pdir / group).mkdir(exist_ok=True)
                for name, value in values.items():
                    self.set(device, port, group, name, value)
        return pdir

    def set(self, device: str, port: str, group: str, name: str, value: int | str) -> None:
        path = self.root / device / "ports" / port / group / name
        tmp = path.with_name(f".{name}.tmp")  # atomic, as sysfs reads are: no half-written value
        tmp.write_text(f"{value}\n")
        os.replace(tmp, path)

    def write(self, device: str, port: str, name: str, text: str) -> None:
        (self.root / device / "ports" / port / name).write_text(text + "\n")

    def remove(self, device: str) -> None:
        shutil.rmtree(self.root / device)


def seed_tree(fs: FakeSysfs) -> None:
    """Three devices, one with two ports: seed 002's irdma0 and two mlx5 devices."""
    fs.port("irdma0", "1", hw=IRDMA_HW)
    fs.port("mlx5_0", "1", rate="100 Gb/sec (4X EDR)", hw=MLX5_HW, counters=MLX5_COUNTERS)
    fs.port("mlx5_0", "2", state="1: DOWN", phys_state="3: Disabled", rate=None, hw=MLX5_HW, counters=MLX5_COUNTERS)
    fs.port("mlx5_1", "1", rate="2.5 Gb/sec (1X SDR)", link_layer="InfiniBand", counters={"port_xmit_data": 9})


@contextlib.contextmanager
def running_exporter(root: Path, *extra: str) -> Iterator[str]:
    """`python -m trainer.rdma_exporter` on 127.0.0.1 and a port of the kernel's choosing; yields
    its /metrics URL once it printed the port (bounded wait), stops it afterwards."""
    cmd = [sys.executable, "-m", "trainer.rdma_exporter", "--port", "0", "--listen-address", "127.0.0.1",
           "--sysfs-root", str(root), *extra]
    env = {**os.environ, "PYTHONPATH": str(WORKLOADS)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], STARTUP_SECONDS)
        line = proc.stdout.readline() if ready else ""
        host = extra[extra.index("--listen-address") + 1] if "--listen-address" in extra else "127.0.0.1"
        assert f"serving http://{host}:" in line, f"exporter did not start: {line!r} rc={proc.poll()}"
        url = line.split()[2]
        assert url.startswith(f"http://{host}:") and url.endswith("/metrics"), url
        yield url
    finally:
        stop(proc, grace=10)


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return parse(response.read().decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def names(samples: Samples, name: str) -> set[frozenset[tuple[str, str]]]:
    return {labels for n, labels in samples if n == name}


# ------------------------------------------------------------------------------------------------
# the command line


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainer.rdma_exporter", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(WORKLOADS)}, check=False)


def test_help() -> None:
    result = _run("--help")
    assert result.returncode == 0, result.stderr
    for option in ("--port", "--sysfs-root", "--node", "--listen-address", "--once"):
        assert option in result.stdout


@pytest.mark.parametrize("args", [["--port", "70000"], ["--port", "x"], ["--bogus"], ["--node", ""], ["--port"]])
def test_bad_arguments_exit_non_zero(args: list[str]) -> None:
    result = _run(*args)
    assert result.returncode != 0 and "usage:" in result.stderr, result


def test_a_taken_port_exits_non_zero(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        result = _run("--port", str(s.getsockname()[1]), "--listen-address", "127.0.0.1", "--sysfs-root", str(tmp_path))
    assert result.returncode == 1 and "cannot listen" in result.stderr


def test_once_prints_one_scrape(tmp_path: Path) -> None:
    seed_tree(FakeSysfs(tmp_path / "ib"))
    result = _run("--once", "--sysfs-root", str(tmp_path / "ib"))
    assert result.returncode == 0, result.stderr
    assert value(parse(result.stdout), "rdma_exporter_devices") == 3


# ------------------------------------------------------------------------------------------------
# over HTTP


def test_every_device_port_and_counter_over_http(tmp_path: Path) -> None:
    fs = FakeSysfs(tmp_path / "ib")
    seed_tree(fs)
    with running_exporter(fs.root) as url:
        s = scrape(url)
    hw = "rdma_port_hw_counter_total"
    # every hw_counters file of every port, under its own name; lifespan is a setting, not a counter
    for device, port, counters in (("irdma0", "1", IRDMA_HW), ("mlx5_0", "1", MLX5_HW), ("mlx5_0", "2", MLX5_HW)):
        for counter, v in counters.items():
            key = (hw, frozenset({"device": device, "port": port, "counter": counter}.items()))
            assert (key in s) == (counter != "lifespan"), key
            if counter != "lifespan":
                assert s[key] == v
    assert value(s, hw, device="irdma0", port="1", counter="iwInRdmaWrites") == 141075419
    # counters/ in the file's own unit
    for port in ("1", "2"):
        for counter, v in MLX5_COUNTERS.items():
            assert value(s, "rdma_port_counter_total", device="mlx5_0", port=port, counter=counter) == v
    assert value(s, "rdma_port_counter_total", device="mlx5_1", port="1", counter="port_xmit_data") == 9
    # bytes: 4 x the PMA data counters; irdma (no counters/): its IPv4 + IPv6 octets
    assert value(s, "rdma_port_transmit_bytes_total", device="mlx5_0", port="1") == 4000
    assert value(s, "rdma_port_receive_bytes_total", device="mlx5_0", port="2") == 8000
    assert value(s, "rdma_port_transmit_bytes_total", device="mlx5_1", port="1") == 36
    assert ("rdma_port_receive_bytes_total", frozenset({"device": "mlx5_1", "port": "1"}.items())) not in s
    assert value(s, "rdma_port_transmit_bytes_total", device="irdma0", port="1") == 7013
    assert value(s, "rdma_port_receive_bytes_total", device="irdma0", port="1") == 5011
    # port state, physical state, rate in bits/s, link layer
    assert value(s, "rdma_port_state", device="irdma0", port="1") == 4
    assert value(s, "rdma_port_state", device="mlx5_0", port="2") == 1
    assert value(s, "rdma_port_physical_state", device="irdma0", port="1") == 5
    assert value(s, "rdma_port_physical_state", device="mlx5_0", port="2") == 3
    assert value(s, "rdma_port_rate_bits_per_second", device="irdma0", port="1") == 25e9
    assert value(s, "rdma_port_rate_bits_per_second", device="mlx5_0", port="1") == 100e9
    assert value(s, "rdma_port_rate_bits_per_second", device="mlx5_1", port="1") == 2.5e9
    assert value(s, "rdma_port_info", device="irdma0", port="1", link_layer="Ethernet", state="ACTIVE",
                 physical_state="LinkUp") == 1
    assert value(s, "rdma_port_info", device="mlx5_1", port="1", link_layer="InfiniBand", state="ACTIVE",
                 physical_state="LinkUp") == 1
    assert value(s, "rdma_exporter_devices") == 3
    # mlx5_0/2 is DOWN without a rate: not an error; nothing else failed either
    assert names(s, "rdma_exporter_read_errors_total") == set()
    assert not any("node" in dict(labels) for _, labels in s)  # no --node: the scrape config sets it


def test_node_flag_labels_every_series(tmp_path: Path) -> None:
    fs = FakeSysfs(tmp_path / "ib")
    fs.port("irdma0", hw={"cnpSent": 1})
    with running_exporter(fs.root, "--node", "gpu-1") as url:
        s = scrape(url)
    assert s and all(dict(labels).get("node") == "gpu-1" for _, labels in s)
    assert value(s, "rdma_port_hw_counter_total", node="gpu-1", device="irdma0", port="1", counter="cnpSent") == 1


def test_wrap_and_reset_over_http(tmp_path: Path) -> None:
    """A 32-bit counter that wraps keeps increasing (by the delta modulo 2**32); a 64-bit one that
    drops was reset and counts on from its new value; so does a small 32-bit one that drops."""
    fs = FakeSysfs(tmp_path / "ib")
    fs.port("mlx5_0", counters={"port_xmit_data": WRAP_32 - 100, "link_downed": 1000},
            hw={"rp_cnp_handled": 1 << 40})
    data = ("rdma_port_counter_total", frozenset({"device": "mlx5_0", "port": "1", "counter": "port_xmit_data"}.items()))
    with running_exporter(fs.root) as url:
        first = scrape(url)
        fs.set("mlx5_0", "1", "counters", "port_xmit_data", 50)
        fs.set("mlx5_0", "1", "counters", "link_downed", 10)
        fs.set("mlx5_0", "1", "hw_counters", "rp_cnp_handled", 5)
        second = scrape(url)
        fs.set("mlx5_0", "1", "counters", "port_xmit_data", 70)
        third = scrape(url)
    assert first[data] == WRAP_32 - 100
    assert second[data] == WRAP_32 + 50  # +150 across the wrap
    assert third[data] == WRAP_32 + 70
    assert value(third, "rdma_port_transmit_bytes_total", device="mlx5_0", port="1") == 4 * (WRAP_32 + 70)
    assert value(second, "rdma_port_counter_total", device="mlx5_0", port="1", counter="link_downed") == 1010
    assert value(second, "rdma_port_hw_counter_total", device="mlx5_0", port="1", counter="rp_cnp_handled") == (
        (1 << 40) + 5)
    for earlier, later in ((first, second), (second, third)):
        for key, v in earlier.items():
            if key[0].endswith("_total"):
                assert later[key] >= v, key


def test_unreadable_and_missing_files_are_counted_never_fatal(tmp_path: Path) -> None:
    fs = FakeSysfs(tmp_path / "ib")
    pdir = fs.port("irdma0", hw={"cnpSent": 4, "RxECNMrkd": 2})
    fs.set("irdma0", "1", "hw_counters", "cnpHandled", "not-a-number")
    (pdir / "hw_counters" / "ip4InOctets").mkdir()  # listed, but reading it fails (EISDIR)
    (pdir / "rate").unlink()  # ACTIVE without a rate: an error
    fs.port("mlx5_0", hw={"out_of_sequence": 1})
    (fs.root / "mlx5_0" / "ports" / "1" / "state").unlink()
    (fs.root / "broken0").mkdir()  # a device without ports/: skipped, not counted
    with running_exporter(fs.root) as url:
        first = scrape(url)
        second = scrape(url)
    errors = "rdma_exporter_read_errors_total"
    expected = {("irdma0", "1", "hw_counters/cnpHandled"), ("irdma0", "1", "hw_counters/ip4InOctets"),
                ("irdma0", "1", "rate"), ("mlx5_0", "1", "state")}
    assert {(dict(k)["device"], dict(k)["port"], dict(k)["file"]) for k in names(second, errors)} == expected
    for device, port, file in expected:
        assert value(first, errors, device=device, port=port, file=file) == 1
        assert value(second, errors, device=device, port=port, file=file) == 2
    # the readable rest is still there
    assert value(second, "rdma_port_hw_counter_total", device="irdma0", port="1", counter="cnpSent") == 4
    assert value(second, "rdma_port_hw_counter_total", device="mlx5_0", port="1", counter="out_of_sequence") == 1
    assert value(second, "rdma_port_physical_state", device="mlx5_0", port="1") == 5
    assert ("rdma_port_state", frozenset({"device": "mlx5_0", "port": "1"}.items())) not in second
    assert value(second, "rdma_port_info", device="mlx5_0", port="1", link_layer="Ethernet", state="",
                 physical_state="LinkUp") == 1
    assert value(second, "rdma_exporter_devices") == 2


def test_a_missing_root_is_no_device_and_no_error(tmp_path: Path) -> None:
    with running_exporter(tmp_path / "absent") as url:
        s = scrape(url)
    assert value(s, "rdma_exporter_devices") == 0
    assert names(s, "rdma_exporter_read_errors_total") == set()


def test_device_leaves_and_returns(tmp_path: Path) -> None:
    """Exclusive netns mode: the device moves into a pod and vanishes from this view, then comes
    back. Its series leave with it, nothing is counted as an error, and on its return its totals
    continue from where they were (the counters ran on meanwhile)."""
    fs = FakeSysfs(tmp_path / "ib")
    fs.port("irdma0", hw={"cnpSent": 100})
    fs.port("irdma1", hw={"cnpSent": 1})
    cnp = {"port": "1", "counter": "cnpSent"}
    with running_exporter(fs.root) as url:
        before = scrape(url)
        fs.remove("irdma0")
        away = scrape(url)
        fs.port("irdma0", hw={"cnpSent": 130})
        back = scrape(url)
    assert value(before, "rdma_port_hw_counter_total", device="irdma0", **cnp) == 100
    assert not [k for k in away if dict(k[1]).get("device") == "irdma0"]
    assert value(away, "rdma_port_hw_counter_total", device="irdma1", **cnp) == 1
    assert value(away, "rdma_exporter_devices") == 1
    assert names(away, "rdma_exporter_read_errors_total") == set()
    assert value(back, "rdma_port_hw_counter_total", device="irdma0", **cnp) == 130
    assert value(back, "rdma_exporter_devices") == 2


# ------------------------------------------------------------------------------------------------
# the pieces


def test_parse_state_and_rate() -> None:
    assert parse_state("4: ACTIVE\n") == (4, "ACTIVE")
    assert parse_state("5: LinkUp") == (5, "LinkUp")
    assert parse_state("4: PortConfigurationTraining\n") == (4, "PortConfigurationTraining")
    assert parse_rate("25 Gb/sec (1X EDR)\n") == 25e9
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5e9
    assert parse_rate("400 Gb/sec (4X NDR)") == 400e9
    for bad in ("ACTIVE", "", "fast"):
        with pytest.raises(rdma_exporter.ReadError):
            parse_state(bad)
        with pytest.raises(rdma_exporter.ReadError):
            parse_rate(bad)


def test_width_detection() -> None:
    t = Total.first(WRAP_32 - 10, now=0)
    t.advance(5, now=1)  # 32-bit, upper half -> wrap
    assert (t.total, t.wide) == (WRAP_32 + 5, False)
    t.advance(WRAP_32 + 100, now=2)  # above 32 bits: 64-bit from now on
    assert t.wide and t.total == WRAP_32 + 5 + (WRAP_32 + 95)
    before = t.total
    t.advance(3, now=3)  # a 64-bit counter that drops was reset
    assert t.total == before + 3
    small = Total.first(1000, now=0)
    small.advance(7, now=1)  # a 32-bit counter dropping from its lower half: a reset, not a wrap
    assert small.total == 1007


def test_vanished_totals_are_forgotten_after_the_retention(tmp_path: Path) -> None:
    fs = FakeSysfs(tmp_path / "ib")
    fs.port("irdma0", hw={"cnpSent": WRAP_32 - 1})
    now = [0.0]
    collector = RdmaCollector(fs.root, clock=lambda: now[0])
    collector.read()
    fs.set("irdma0", "1", "hw_counters", "cnpSent", 2)
    collector.read()  # wrapped: total 2**32 + 2
    fs.remove("irdma0")
    now[0] = RETAIN_SECONDS - 1
    collector.read()
    assert collector.totals[("irdma0", "1", "hw_counters", "cnpSent")].total == WRAP_32 + 2
    now[0] = RETAIN_SECONDS + 10
    collector.read()
    assert collector.totals == {}
    fs.port("irdma0", hw={"cnpSent": 9})
    collector.read()
    assert collector.totals[("irdma0", "1", "hw_counters", "cnpSent")].total == 9


def test_scrape_time_bounded(tmp_path: Path) -> None:
    """The scrape reads sysfs synchronously: a tree of 8 devices x 2 ports x 60 counters is read in
    well under a typical 10 s scrape timeout."""
    fs = FakeSysfs(tmp_path / "ib")
    for d in range(8):
        for p in ("1", "2"):
            fs.port(f"mlx5_{d}", p, hw={f"c{i}": i for i in range(50)}, counters=MLX5_COUNTERS)
    start = time.monotonic()
    with running_exporter(fs.root) as url:
        s = scrape(url)
    assert len(names(s, "rdma_port_hw_counter_total")) == 8 * 2 * 50
    assert time.monotonic() - start < 30
