"""RDMA port counters for Prometheus, read from sysfs at scrape time.

    python -m trainer.rdma_exporter --port 9879 [--sysfs-root /sys/class/infiniband] [--node NAME]

Serves /metrics (any path) on --listen-address:--port, rendered by the `prometheus_client` package,
from one event loop: each connection has --client-timeout seconds in all, at most --max-connections
are open at once, and when one more comes the oldest connection still waiting for its request makes
room (trainer/scrape_server.py: clients that hold or re-open connections never delay a scrape). The
DaemonSet on the host network passes the node's own address (status.hostIP) as --listen-address:
Prometheus scrapes that address, and no other interface of the node (a storage or RDMA network, a
public one) serves the exporter. Every
scrape walks <sysfs-root>/<device>/ports/<port>/ once (no background thread, no cache), so a
device that appears or disappears between scrapes (in RDMA exclusive netns mode the device moves
into a training pod's namespace and vanishes from the host's view) simply appears in or drops out
of the next scrape. --once prints one scrape to stdout and exits (for a look on a node).

Metrics (labels `device`, `port`, plus `node` when --node is given; see "The node label" below):

  rdma_port_hw_counter_total{counter}   every ports/<p>/hw_counters/<counter> but `lifespan` (the
                                        driver's cache time in ms, a setting, not a counter);
                                        driver-specific names (irdma: cnpSent, RxECNMrkd,
                                        ip4InOctets, ...; mlx5: np_cnp_sent, out_of_sequence, ...)
  rdma_port_counter_total{counter}      every ports/<p>/counters/<counter> (the IB PMA counters:
                                        port_xmit_data, symbol_error, link_downed, ...), in the
                                        file's own unit: port_xmit_data and port_rcv_data are
                                        octets DIVIDED BY 4, as the kernel reports them
  rdma_port_transmit_bytes_total        bytes (octets) sent: 4 x counters/port_xmit_data where that
  rdma_port_receive_bytes_total         file exists (IB, mlx5), else hw_counters ip4OutOctets +
                                        ip6OutOctets / ip4InOctets + ip6InOctets (irdma, whose
                                        RoCE ports have no counters/ directory); absent if neither
  rdma_port_state                       ports/<p>/state as a number: 1 DOWN, 2 INIT, 3 ARMED,
                                        4 ACTIVE, 5 ACTIVE_DEFER
  rdma_port_physical_state              ports/<p>/phys_state as a number: 1 Sleep, 2 Polling,
                                        3 Disabled, 4 PortConfigurationTraining, 5 LinkUp,
                                        6 LinkErrorRecovery, 7 Phy Test
  rdma_port_rate_bits_per_second        ports/<p>/rate ("25 Gb/sec (1X EDR)" -> 25e9)
  rdma_port_info{link_layer,state,physical_state}   1; link_layer is "Ethernet" (RoCE) or "InfiniBand"
  rdma_exporter_read_errors_total{file} files listed but unreadable or unparsable, since start;
                                        `file` is relative to the port (hw_counters/cnpSent, rate),
                                        "ports" for the device's port list, "" for the root itself
  rdma_exporter_devices                 devices visible at this scrape (0: none, or all moved into pods)

Counter widths and wrap. Each counter is presented as a total that only increases: the first value
read, then the sum of the changes seen at each scrape. A counter whose value has ever exceeded
2**32 - 1 is 64-bit: a decrease means it was reset, and the new value is counted from 0. Any other
counter is taken as 32-bit (older kernels' and some drivers' PMA counters): a decrease from a value
of at least 2**31 is a wrap, counted as (new - old) mod 2**32; a decrease from below 2**31 is a
reset (a 32-bit counter that wrapped from its lower half advanced more than 2**31 in one scrape
interval, and no scraper could tell how many times). Limits, on purpose: a wrap is seen only if the
counter wraps at most once between scrapes (a 32-bit port_xmit_data at 25 Gbit/s wraps every ~5.5 s;
kernels use the 64-bit PortCountersExtended where the device has them, as mlx5 does); IB PMA
32-bit counters saturate at 2**32 - 1 by the IB spec instead of wrapping, and a saturated counter
just stops increasing. A device that disappears keeps its totals for RETAIN_SECONDS, so when it
comes back (from a pod's namespace) its totals continue instead of jumping.

Errors never fail a scrape: a file that cannot be read or parsed is left out of that scrape and
counted in rdma_exporter_read_errors_total, unless its whole device vanished meanwhile (a move,
not an error). A port that is not ACTIVE may refuse to report its rate (EINVAL on RoCE without a
link); a rate missing on such a port is not counted either.

The node label. Under Kubernetes leave --node out and let the ServiceMonitor / PodMonitor copy the
scraped pod's node into `node` (`__meta_kubernetes_pod_node_name`, as components/gpu_stack.py
DCGM_NODE_RELABELINGS does for DCGM): the queries in components/monitoring/rdma.py group by `node`.
--node NAME puts `node` on every series itself, for a plain Prometheus without relabeling (with
both, Prometheus keeps the target's and renames the exporter's to `exported_node`).

Does not export: device-level hw_counters (<device>/hw_counters, which some drivers add beside the
per-port ones), the netdev counters of the RoCE interface (node-exporter has those), GIDs.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainer.scrape_server import DEFAULT_MAX_CONNECTIONS, DEFAULT_TIMEOUT_SECONDS, ScrapeServer

DEFAULT_SYSFS_ROOT = "/sys/class/infiniband"
DEFAULT_PORT = 9879
WRAP_32 = 1 << 32
# How long the totals of a vanished device are kept for its return (a training pod's lifetime
# is usually longer; then the totals start again from the hardware's value, which rate() sees
# as one counter reset).
RETAIN_SECONDS = 3600.0
# hw_counters/lifespan: how long the driver caches the counters (ms); writable, not a counter.
NOT_COUNTERS = frozenset({"lifespan"})
# (metric, PMA counter in 4-octet units, irdma's hw_counters in octets)
BYTE_SOURCES = (
    ("rdma_port_transmit_bytes", "port_xmit_data", ("ip4OutOctets", "ip6OutOctets")),
    ("rdma_port_receive_bytes", "port_rcv_data", ("ip4InOctets", "ip6InOctets")),
)
ACTIVE = 4
_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)b/sec")
_RATE_UNIT = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_STATE = re.compile(r"\s*([0-9]+)\s*:\s*(.*?)\s*")
_COUNTER = re.compile(r"[0-9]{1,20}", re.ASCII)
MAX_COUNTER = (1 << 64) - 1  # the widest counter a driver keeps


class ReadError(Exception):
    """A file that was listed but could not be read or parsed."""


@dataclass
class Total:
    """One counter's running total across scrapes (see "Counter widths and wrap")."""

    raw: int
    total: int
    wide: bool
    seen: float

    @classmethod
    def first(cls, raw: int, now: float) -> Total:
        return cls(raw=raw, total=raw, wide=raw >= WRAP_32, seen=now)

    def advance(self, raw: int, now: float) -> None:
        self.wide = self.wide or raw >= WRAP_32
        if raw >= self.raw:
            delta = raw - self.raw
        elif not self.wide and self.raw >= WRAP_32 // 2:
            delta = (raw - self.raw) % WRAP_32
        else:
            delta = raw
        self.total += delta
        self.raw = raw
        self.seen = now


def parse_state(text: str) -> tuple[int, str]:
    """'4: ACTIVE' -> (4, 'ACTIVE'); also phys_state ('5: LinkUp')."""
    m = _STATE.fullmatch(text)
    if not m:
        raise ReadError(f"not '<number>: <name>': {text!r}")
    return int(m.group(1)), m.group(2)


def parse_rate(text: str) -> float:
    """'25 Gb/sec (1X EDR)' -> 25e9 bits/s; '2.5 Gb/sec (1X SDR)' -> 2.5e9."""
    m = _RATE.match(text)
    if not m:
        raise ReadError(f"not '<number> Gb/sec ...': {text!r}")
    return float(m.group(1)) * _RATE_UNIT[m.group(2)]


def parse_counter(text: str) -> int:
    """A counter file's decimal digits (a trailing newline allowed), at most 2**64 - 1.

    Not int(): it also takes `1_000`, `+42`, ` 7 `, non-ASCII digits and numbers of any length, none
    of which a kernel counter file holds; such a file is a read error, not a counter.
    """
    digits = text.removesuffix("\n")
    if not _COUNTER.fullmatch(digits):
        raise ReadError(f"not a counter's decimal digits: {text[:40]!r}")
    value = int(digits)
    if value > MAX_COUNTER:
        raise ReadError(f"more than 64 bits: {digits[:40]}")
    return value


@dataclass
class PortReading:
    device: str
    port: str
    state: tuple[int, str] | None = None
    phys_state: tuple[int, str] | None = None
    rate: float | None = None
    link_layer: str | None = None


class RdmaCollector(Collector):
    """Reads <root>/<device>/ports/<port>/ at each collect(); keeps only the counter totals."""

    def __init__(self, root: Path, node: str | None = None, clock: Callable[[], float] = time.monotonic):
        self.root = Path(root)
        self.node = node
        self.clock = clock
        self.totals: dict[tuple[str, str, str, str], Total] = {}
        self.errors: dict[tuple[str, str, str], int] = {}
        self.devices = 0  # visible at the last read
        # Scrapes run on threads of their own: one at a time reads and advances the totals.
        self._lock = threading.Lock()

    # -- reading -----------------------------------------------------------------------------

    def _error(self, device: str, port: str, file: str) -> None:
        if device and not (self.root / device).exists():
            return  # the device left (moved into a pod's namespace) while we read it
        key = (device, port, file)
        self.errors[key] = self.errors.get(key, 0) + 1

    def _read(self, path: Path) -> str:
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                return f.read(4096)
        except OSError as e:
            raise ReadError(f"{path}: {e.strerror or e}") from e

    def _list(self, path: Path) -> list[str] | None:
        """Sorted entries; None when the directory does not exist (not an error)."""
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return None

    def _port(self, device: str, port: str, now: float, seen: set[tuple[str, str, str, str]]) -> PortReading:
        pdir = self.root / device / "ports" / port
        reading = PortReading(device, port)
        for name in ("state", "phys_state", "link_layer"):
            try:
                text = self._read(pdir / name)
                if name == "link_layer":
                    reading.link_layer = text.strip()
                else:
                    setattr(reading, name, parse_state(text))
            except ReadError:
                self._error(device, port, name)
        try:
            reading.rate = parse_rate(self._read(pdir / "rate"))
        except ReadError:
            if reading.state is not None and reading.state[0] == ACTIVE:
                self._error(device, port, "rate")
        for group in ("hw_counters", "counters"):
            try:
                names = self._list(pdir / group)
            except OSError:
                self._error(device, port, group)
                continue
            for name in names or ():
                if group == "hw_counters" and name in NOT_COUNTERS:
                    continue
                try:
                    raw = parse_counter(self._read(pdir / group / name))
                except ReadError:
                    self._error(device, port, f"{group}/{name}")
                    continue
                key = (device, port, group, name)
                if key in self.totals:
                    self.totals[key].advance(raw, now)
                else:
                    self.totals[key] = Total.first(raw, now)
                seen.add(key)
        return reading

    def read(self) -> tuple[list[PortReading], set[tuple[str, str, str, str]]]:
        """One walk of the tree: the ports' readings and the keys of the counters read now."""
        now = self.clock()
        ports: list[PortReading] = []
        seen: set[tuple[str, str, str, str]] = set()
        try:
            devices = self._list(self.root) or []
        except OSError:
            self._error("", "", "")
            devices = []
        self.devices = 0
        for device in devices:
            try:
                port_names = self._list(self.root / device / "ports")
            except OSError:
                self._error(device, "", "ports")
                continue
            if port_names is None:
                continue  # vanished between the two listings
            self.devices += 1
            for port in port_names:
                ports.append(self._port(device, port, now, seen))
        for key in [k for k, t in self.totals.items() if k not in seen and now - t.seen > RETAIN_SECONDS]:
            del self.totals[key]
        return ports, seen

    # -- exposition --------------------------------------------------------------------------

    def _labels(self, *names: str) -> list[str]:
        return (["node"] if self.node else []) + list(names)

    def _values(self, *values: str) -> list[str]:
        return ([self.node] if self.node else []) + list(values)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            metrics = list(self._collect())
        yield from metrics

    def _collect(self) -> Iterator[Metric]:
        ports, seen = self.read()
        families = {
            group: CounterMetricFamily(metric, doc, labels=self._labels("device", "port", "counter"))
            for group, metric, doc in (
                ("hw_counters", "rdma_port_hw_counter",
                 "ports/<port>/hw_counters/<counter>, as a total that survives 32-bit wraps"),
                ("counters", "rdma_port_counter",
                 "ports/<port>/counters/<counter> in the file's unit (port_xmit_data, port_rcv_data: octets / 4)"),
            )
        }
        for key in sorted(seen):
            device, port, group, name = key
            families[group].add_metric(self._values(device, port, name), self.totals[key].total)
        yield from families.values()
        yield from self._bytes(ports, seen)
        yield from self._port_gauges(ports)
        errors = CounterMetricFamily("rdma_exporter_read_errors", "sysfs files listed but unreadable or unparsable",
                                     labels=self._labels("device", "port", "file"))
        for (device, port, file), n in sorted(self.errors.items()):
            errors.add_metric(self._values(device, port, file), n)
        yield errors
        devices = GaugeMetricFamily("rdma_exporter_devices", "RDMA devices visible at this scrape",
                                    labels=self._labels())
        devices.add_metric(self._values(), self.devices)
        yield devices

    def _bytes(self, ports: Iterable[PortReading], seen: set[tuple[str, str, str, str]]) -> Iterator[Metric]:
        for metric, pma, octets in BYTE_SOURCES:
            direction = "sent" if "transmit" in metric else "received"
            family = CounterMetricFamily(metric, f"bytes {direction}: 4 x counters/{pma}, else irdma's "
                                                 f"hw_counters {' + '.join(octets)}",
                                         labels=self._labels("device", "port"))
            for p in ports:
                key = (p.device, p.port, "counters", pma)
                if key in seen:
                    family.add_metric(self._values(p.device, p.port), 4 * self.totals[key].total)
                    continue
                keys = [(p.device, p.port, "hw_counters", n) for n in octets]
                if any(k in seen for k in keys):
                    family.add_metric(self._values(p.device, p.port), sum(self.totals[k].total for k in keys if k in seen))
            yield family

    def _port_gauges(self, ports: Iterable[PortReading]) -> Iterator[Metric]:
        labels = self._labels("device", "port")
        state = GaugeMetricFamily("rdma_port_state", "ports/<port>/state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, "
                                                     "5 ACTIVE_DEFER", labels=labels)
        phys = GaugeMetricFamily("rdma_port_physical_state", "ports/<port>/phys_state: 2 Polling, 3 Disabled, "
                                                             "5 LinkUp, ...", labels=labels)
        rate = GaugeMetricFamily("rdma_port_rate_bits_per_second", "ports/<port>/rate in bits per second",
                                 labels=labels)
        info = GaugeMetricFamily("rdma_port_info", "1 per port: link layer and state names",
                                 labels=self._labels("device", "port", "link_layer", "state", "physical_state"))
        for p in ports:
            values = self._values(p.device, p.port)
            if p.state:
                state.add_metric(values, p.state[0])
            if p.phys_state:
                phys.add_metric(values, p.phys_state[0])
            if p.rate is not None:
                rate.add_metric(values, p.rate)
            info.add_metric(self._values(p.device, p.port, p.link_layer or "", p.state[1] if p.state else "",
                                         p.phys_state[1] if p.phys_state else ""), 1)
        yield from (state, phys, rate, info)


# ------------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.rdma_exporter", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--listen-address", default="0.0.0.0",
                   help="IP address to listen on (default all IPv4; the DaemonSet gives the node's own, status.hostIP)")
    p.add_argument("--sysfs-root", type=Path, default=Path(DEFAULT_SYSFS_ROOT),
                   help=f"the RDMA devices' sysfs directory (default {DEFAULT_SYSFS_ROOT})")
    p.add_argument("--node", help="put node=NAME on every series (leave out under Kubernetes: relabel instead)")
    p.add_argument("--client-timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS,
                   help=f"seconds a connection may take in all, request and answer (default {DEFAULT_TIMEOUT_SECONDS:g})")
    p.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                   help=f"connections open at once; one more closes the oldest still waiting for its request "
                        f"(default {DEFAULT_MAX_CONNECTIONS})")
    p.add_argument("--once", action="store_true", help="print one scrape to stdout and exit")
    args = p.parse_args(argv)
    if not 0 <= args.port <= 65535:
        p.error(f"--port must be in 0..65535, got {args.port}")
    if not 0 < args.client_timeout <= 3600:
        p.error(f"--client-timeout must be in (0, 3600] seconds, got {args.client_timeout:g}")
    if not 1 <= args.max_connections <= 1024:
        p.error(f"--max-connections must be in 1..1024, got {args.max_connections}")
    try:
        ipaddress.ip_address(args.listen_address)
    except ValueError:
        p.error(f"--listen-address must be an IPv4 or IPv6 address, got {args.listen_address!r} (under Kubernetes: "
                "is the HOST_IP variable from the downward API's status.hostIP set?)")
    if args.node is not None and not args.node.strip():
        p.error("--node must not be empty")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RdmaCollector(args.sysfs_root, args.node))
    if args.once:
        sys.stdout.write(generate_latest(registry).decode())
        return 0
    try:
        server = ScrapeServer((args.listen_address, args.port), registry,
                              timeout=args.client_timeout, max_connections=args.max_connections)
    except OSError as e:
        print(f"rdma_exporter: cannot listen on {args.listen_address}:{args.port}: {e}", file=sys.stderr)
        return 1
    # The tests (and a person) read the bound port here, --port 0 included.
    host = f"[{args.listen_address}]" if ":" in args.listen_address else args.listen_address
    print(f"rdma_exporter: serving http://{host}:{server.server_port}/metrics from {args.sysfs_root}",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
