"""Pure maths and parsing for the NCCL acceptance test (no torch needed).

- bus bandwidth of an all-reduce, as nccl-tests defines it: busbw = algbw x 2(n-1)/n;
- rows of an nccl-tests style table (ours prints the same columns, so one parser reads both);
- NCCL_DEBUG=INFO lines: which network NCCL chose, which transport each channel uses, how many
  nodes the communicator spans;
- NCCL_DEBUG WARN lines: InfiniBand/RoCE work completions with an error status (IBV_WC_*);
- the verdict: pass, wrong results (#wrong, out-of-place or in-place), an IB completion error, too
  slow for the declared link, or (RDMA declared) fell back to TCP sockets, left no transport lines
  to tell, or never used RDMA at all (no channel over NET/IB).

Exit codes (allreduce_bench's; components/training/launch.py mirrors them, a test keeps them equal):
  0  pass
  10 EXIT_LOW_BUSBW          the largest size's busbw < min_busbw_fraction x link_gbps, or no sweep rows
  11 EXIT_SOCKET_FALLBACK    RDMA declared, NCCL used TCP sockets (NET/Socket) on some rank
  12 EXIT_NO_TRANSPORT_INFO  RDMA declared, no channel lines in NCCL's log (NCCL_DEBUG below INFO, INIT
                             not in NCCL_DEBUG_SUBSYS, or a gloo run): nothing confirms RDMA
  15 EXIT_NO_RDMA_CHANNEL    RDMA declared, channels logged but none over NET/IB: the ranks talked only
                             over P2P/SHM (NVLink, PCIe, host memory), so RDMA was never exercised. The
                             acceptance always spans nodes, and between nodes NCCL needs the network:
                             this is a run whose ranks all landed on one node (NCCL logs "nNodes 1"),
                             a communicator per node, or a multi-node NVLink domain (MNNVL 1, e.g.
                             GB200 NVL72), where the inter-node traffic is NVLink and RDMA is not tested
  16 EXIT_WRONG_RESULTS      some size's #wrong (out-of-place or in-place) is not 0: the all-reduce
                             returned wrong data. Worse than slowness, so it wins over every other code
  17 EXIT_IB_COMPLETION_ERROR an `NCCL WARN` line reports an InfiniBand/RoCE work completion with an
                             error status (`Got completion from peer ... status=IBV_WC_RETRY_EXC_ERR(12)`,
                             or the older `with error 12` / `status=12` forms): the link dropped or
                             corrupted traffic during the sweep, whatever the bandwidth looked like
  (3, the sweep's own configuration error, is trainer.EXIT_CONFIG_ERROR; 13 and 14 are trainer.rdma_link's.)
  When several fail, the first of 16, 17, 11, 12, 15, 10 is the exit code; the reasons list them all.

Units: algbw/busbw in GB/s (1e9 bytes/s, as nccl-tests prints them); link rates in Gbit/s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# Exit codes of allreduce_bench (0 = pass; 3 = its own config error, see trainer.EXIT_CONFIG_ERROR).
EXIT_PASS = 0
EXIT_LOW_BUSBW = 10
EXIT_SOCKET_FALLBACK = 11
EXIT_NO_TRANSPORT_INFO = 12
EXIT_NO_RDMA_CHANNEL = 15
EXIT_WRONG_RESULTS = 16
EXIT_IB_COMPLETION_ERROR = 17
# Which code a failing verdict exits with when several apply: data corruption first, then a broken
# link, then the transport (the root cause of a slow run), then the bandwidth.
_EXIT_PRECEDENCE = (EXIT_WRONG_RESULTS, EXIT_IB_COMPLETION_ERROR, EXIT_SOCKET_FALLBACK, EXIT_NO_TRANSPORT_INFO,
                    EXIT_NO_RDMA_CHANNEL, EXIT_LOW_BUSBW)


def bus_bandwidth(algbw: float, nranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce over `nranks` ranks: algbw x 2(n-1)/n.

    A ring all-reduce moves 2(n-1)/n of the buffer over each rank's link, so busbw is comparable
    with the link rate whatever the number of ranks.
    """
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return algbw * 2 * (nranks - 1) / nranks


def algorithm_bandwidth(size_bytes: int, seconds: float) -> float:
    """GB/s (1e9) of moving `size_bytes` in `seconds`, as nccl-tests computes algbw."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return size_bytes / seconds / 1e9


@dataclass(frozen=True)
class SweepRow:
    """One size of an all-reduce sweep (out-of-place columns; in-place ones when present)."""

    size: int  # bytes
    count: int  # elements
    dtype: str
    redop: str
    time_us: float
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None  # None when validation was off ("N/A")
    inplace_time_us: float | None = None
    inplace_algbw: float | None = None
    inplace_busbw: float | None = None
    inplace_wrong: int | None = None

    @property
    def wrong_values(self) -> int:
        """Wrong elements in both columns (N/A counts as 0: validation was off)."""
        return (self.wrong or 0) + (self.inplace_wrong or 0)


# nccl-tests prints #wrong with printf's %6g: from a million wrong elements up it reads "1e+06" or
# "2.68435e+08" (exactly the runs that matter); ours prints an integer; "N/A" when validation is off.
_WRONG = re.compile(r"\d+(?:\.\d+)?(?:e\+\d+)?|N/A")
_DTYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")  # float, half, bfloat16, int8, ...
_REDOP = re.compile(r"[a-z]+")  # sum, prod, max, min, avg


def _wrong(value: str) -> int | None:
    if not _WRONG.fullmatch(value):
        raise ValueError(f"not a #wrong count: {value!r}")
    return None if value == "N/A" else int(float(value))


def parse_sweep_line(line: str) -> SweepRow | None:
    """A data row of all_reduce_perf (13 columns) or of our bench (9 columns); None otherwise."""
    parts = line.split()
    if len(parts) not in (9, 13) or line.lstrip().startswith("#"):
        return None
    if not (_DTYPE.fullmatch(parts[2]) and _REDOP.fullmatch(parts[3])):
        return None
    try:
        row = SweepRow(
            size=int(parts[0]), count=int(parts[1]), dtype=parts[2], redop=parts[3],
            time_us=float(parts[5]), algbw=float(parts[6]), busbw=float(parts[7]), wrong=_wrong(parts[8]),
        )
        if len(parts) == 13:
            row = SweepRow(**{**row.__dict__, "inplace_time_us": float(parts[9]),
                              "inplace_algbw": float(parts[10]), "inplace_busbw": float(parts[11]),
                              "inplace_wrong": _wrong(parts[12])})
        int(parts[4])  # root column: -1 for all-reduce
    except ValueError:
        return None
    return row


def parse_sweep(lines: Iterable[str]) -> list[SweepRow]:
    return [row for row in map(parse_sweep_line, lines) if row is not None]


def format_sweep_header() -> list[str]:
    return [
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
    ]


def format_sweep_row(row: SweepRow) -> str:
    wrong = "N/A" if row.wrong is None else str(row.wrong)
    # nccl-tests' 2 decimals, more below 1 GB/s so that slow (CPU, gloo) runs do not print 0.00
    bw = lambda v: f"{v:6.2f}" if v >= 1 else f"{v:6.4f}"  # noqa: E731
    return (f"{row.size:12d}  {row.count:12d}  {row.dtype:>8s}  {row.redop:>6s}  {-1:6d}  "
            f"{row.time_us:7.1f}  {bw(row.algbw)}  {bw(row.busbw)}  {wrong:>5s}")


# `... NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IBext/0`,
# `... NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC/read`, `... via SHM/direct/direct`.
_CHANNEL = re.compile(r"NCCL INFO Channel \d+(?:/\d+)? : .*? via (?P<transport>[A-Za-z0-9_]+)(?:/(?P<net>[A-Za-z0-9_]+))?")
# `NCCL INFO Using network IBext` (the net plugin or built-in transport NCCL picked).
_USING_NETWORK = re.compile(r"NCCL INFO Using (?:non-device )?network (?P<net>[A-Za-z0-9_]+)")
# `NCCL INFO NET/IB : Using [0]irdma0:1/RoCE [RO]; OOB net1:10.100.100.1<0>`, `NET/Socket : Using [0]eth0:...`
_NET_DEVICES = re.compile(r"NCCL INFO NET/(?P<net>[A-Za-z0-9_]+) ?: Using (?P<devices>.*)")
_NO_DEVICE = re.compile(r"NCCL INFO NET/(?P<net>[A-Za-z0-9_]+) ?: No device found")
# `NCCL INFO comm 0x55a7be5601c0 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0` (2.19+).
_COMM_NODES = re.compile(r"NCCL INFO comm \S+ rank \d+ nRanks \d+ nNodes (?P<nodes>\d+)(?:.*? MNNVL (?P<mnnvl>\d+))?")
# An IB/RoCE work completion with an error status, in the forms NCCL's net_ib has printed it:
#   `NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)`
#   `NCCL WARN NET/IB: Got completion from peer 10.0.0.9<51161> with status=4 opcode=0 len=0 vendor err 81 (Send) ...`
#   `NCCL WARN NET/IB: Got completion from peer 10.0.0.13<40554> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=...`
# (also NET/IB/GIN:); and any other WARN naming an error status as `status=IBV_WC_<NAME>(<n>)`.
_IB_COMPLETION = re.compile(
    r"NCCL WARN NET/IB[A-Za-z0-9_/]* ?: Got completion from peer (?P<peer>\S+) with "
    r"(?:status=(?P<name>IBV_WC_[A-Z0-9_]+)\((?P<named>\d+)\)|status=(?P<status>\d+)|error (?P<error>\d+))")
_WARN_WC_STATUS = re.compile(r"NCCL WARN .*?status=(?P<name>IBV_WC_[A-Z0-9_]+)\((?P<named>\d+)\)")
# enum ibv_wc_status (libibverbs verbs.h), to name the numeric forms.
_IBV_WC_STATUS = (
    "IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR", "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR", "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR", "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR", "IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR",
    "IBV_WC_INV_EECN_ERR", "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR", "IBV_WC_RESP_TIMEOUT_ERR",
    "IBV_WC_GENERAL_ERR", "IBV_WC_TM_ERR", "IBV_WC_TM_RNDV_INCOMPLETE",
)


def ib_completion_error(line: str) -> str | None:
    """`IBV_WC_RETRY_EXC_ERR(12) from peer 10.0.0.13<40554>` for an NCCL WARN line reporting a failed
    IB/RoCE work completion; None for any other line (and for a success status)."""
    m = _IB_COMPLETION.search(line) or _WARN_WC_STATUS.search(line)
    if m is None:
        return None
    groups = m.groupdict()
    code = int(next(v for k in ("named", "status", "error") if (v := groups.get(k)) is not None))
    if code == 0:
        return None
    name = groups.get("name") or (_IBV_WC_STATUS[code] if code < len(_IBV_WC_STATUS) else "IBV_WC status")
    return f"{name}({code})" + (f" from peer {groups['peer']}" if groups.get("peer") else "")


def _net_family(name: str) -> str:
    """IB, IBext, IBext_v8, GIN... -> "IB" (verbs: InfiniBand or RoCE); Socket -> "Socket"."""
    if name.lower().startswith("ib"):
        return "IB"
    if name.lower().startswith("socket"):
        return "Socket"
    return name


@dataclass
class NcclTransport:
    """What NCCL's INFO log says about the transports in use."""

    network: str | None = None  # "IB" (RDMA, InfiniBand or RoCE) or "Socket": the inter-node net NCCL chose
    devices: list[str] = field(default_factory=list)  # e.g. ["IB: [0]irdma0:1/RoCE [RO]; OOB net1:10.100.100.1<0>"]
    channels: dict[str, int] = field(default_factory=dict)  # "NET/IB", "NET/Socket", "P2P", "SHM" -> channel count
    nodes: int | None = None  # the most nodes a communicator spans ("nNodes"), where NCCL logs it
    mnnvl: bool = False  # a multi-node NVLink domain: nodes reach each other over NVLink, not the network
    ib_errors: int = 0  # NCCL WARN lines reporting a failed IB/RoCE work completion
    ib_error_example: str | None = None  # the first of them, e.g. "IBV_WC_RETRY_EXC_ERR(12) from peer ..."

    @property
    def uses_sockets(self) -> bool:
        return self.network == "Socket" or "NET/Socket" in self.channels

    @property
    def uses_rdma(self) -> bool:
        return not self.uses_sockets and self.rdma_channels > 0

    @property
    def rdma_channels(self) -> int:
        """Channels over RDMA (NET/IB: InfiniBand or RoCE): what proves the all-reduce used it."""
        return self.channels.get("NET/IB", 0)

    @property
    def seen(self) -> bool:
        return self.network is not None or bool(self.channels)

    def summary(self) -> str:
        if not self.seen:
            return "unknown"
        kinds = sorted(self.channels) or [f"NET/{self.network}"]
        return ",".join(kinds)

    def merge(self, other: NcclTransport) -> NcclTransport:
        """Combine the logs of several ranks: any rank on sockets makes the whole run use sockets."""
        channels = dict(self.channels)
        for k, v in other.channels.items():
            channels[k] = channels.get(k, 0) + v
        networks = {n for n in (self.network, other.network) if n}
        network = "Socket" if "Socket" in networks else (next(iter(networks)) if networks else None)
        nodes = max((n for n in (self.nodes, other.nodes) if n is not None), default=None)
        return NcclTransport(network=network, devices=self.devices + other.devices, channels=channels, nodes=nodes,
                             mnnvl=self.mnnvl or other.mnnvl, ib_errors=self.ib_errors + other.ib_errors,
                             ib_error_example=self.ib_error_example or other.ib_error_example)


def parse_nccl_log(lines: Iterable[str]) -> NcclTransport:
    """The transports NCCL reports at NCCL_DEBUG=INFO (subsystems INIT and NET, NCCL's default set)."""
    result = NcclTransport()
    for line in lines:
        if error := ib_completion_error(line):
            result.ib_errors += 1
            result.ib_error_example = result.ib_error_example or error
        elif m := _CHANNEL.search(line):
            transport = m["transport"]
            key = f"NET/{_net_family(m['net'] or '')}" if transport == "NET" else transport
            result.channels[key] = result.channels.get(key, 0) + 1
        elif m := _USING_NETWORK.search(line):
            net = _net_family(m["net"])
            # several communicators may log; a Socket anywhere wins
            if result.network != "Socket":
                result.network = net
        elif m := _NET_DEVICES.search(line):
            result.devices.append(f"{_net_family(m['net'])}: {m['devices'].strip()}")
        elif m := _COMM_NODES.search(line):
            result.nodes = max(result.nodes or 0, int(m["nodes"]))
            result.mnnvl = result.mnnvl or (m["mnnvl"] or "0") != "0"
    return result


def _no_rdma_channel_reason(transport: NcclTransport) -> str:
    kinds = ", ".join(sorted(transport.channels))
    why = ""
    if transport.mnnvl:
        why = " (a multi-node NVLink domain, MNNVL 1: the nodes reached each other over NVLink)"
    elif transport.nodes == 1:
        why = " (NCCL's communicator spans 1 node: nNodes 1)"
    return (f"no channel over NET/IB: NCCL connected the ranks only via {kinds}{why}, so RDMA was never "
            "exercised while network.rdma is declared")


@dataclass(frozen=True)
class Verdict:
    exit_code: int
    reasons: tuple[str, ...]
    busbw_gbps: float | None  # largest size's busbw in Gbit/s
    threshold_gbps: float | None

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_PASS

    def line(self, transport: NcclTransport, largest: int | None) -> str:
        """The one line to grep for in the acceptance Job's log."""
        fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
        reason = "; ".join(self.reasons) or "ok"
        return (f"acceptance: verdict={'PASS' if self.passed else 'FAIL'} exit={self.exit_code} "
                f"transport={transport.summary()} largest_bytes={largest if largest is not None else 'n/a'} "
                f"busbw_gbps={fmt(self.busbw_gbps)} threshold_gbps={fmt(self.threshold_gbps)} reason=\"{reason}\"")


def verdict(
    rows: list[SweepRow],
    transport: NcclTransport,
    *,
    link_gbps: float | None,
    min_busbw_fraction: float = 0.9,
    rdma_declared: bool = False,
    nccl_expected: bool = True,
) -> Verdict:
    """Pass when the largest size's busbw >= min_busbw_fraction x link_gbps and, with RDMA declared,
    NCCL carried the all-reduce over RDMA: some channel over NET/IB and none over TCP sockets.

    link_gbps None skips the bandwidth check. `nccl_expected` is False for a gloo (CPU) run, where
    there is no NCCL log to read: a declared RDMA link then cannot be confirmed and fails.
    """
    if not 0 < min_busbw_fraction <= 1:
        raise ValueError(f"min_busbw_fraction must be in (0, 1], got {min_busbw_fraction}")
    reasons: list[str] = []
    codes: list[int] = []
    if wrong := [r for r in rows if r.wrong_values]:
        codes.append(EXIT_WRONG_RESULTS)
        sizes = ", ".join(f"{r.size} B: {r.wrong_values}" for r in wrong)
        reasons.append(f"the all-reduce returned wrong values (#wrong, out-of-place + in-place, at {sizes}): "
                       "data corruption, whatever the bandwidth")
    if transport.ib_errors:
        codes.append(EXIT_IB_COMPLETION_ERROR)
        reasons.append(f"{transport.ib_errors} IB completion error(s) in NCCL WARN lines"
                       + (f", first {transport.ib_error_example}" if transport.ib_error_example else "")
                       + ": the RDMA link failed during the sweep")
    largest = max(rows, key=lambda r: r.size) if rows else None
    busbw_gbps = largest.busbw * 8 if largest else None
    threshold = link_gbps * min_busbw_fraction if link_gbps else None
    if rdma_declared:
        if transport.uses_sockets:
            codes.append(EXIT_SOCKET_FALLBACK)
            reasons.append("NCCL fell back to TCP sockets (NET/Socket) while network.rdma is declared")
        elif not transport.channels:
            codes.append(EXIT_NO_TRANSPORT_INFO)
            reasons.append("no NCCL channel lines found (needs NCCL_DEBUG=INFO, with INIT in NCCL_DEBUG_SUBSYS)"
                           if nccl_expected else "not an NCCL run: RDMA cannot be confirmed")
        elif not transport.rdma_channels:
            codes.append(EXIT_NO_RDMA_CHANNEL)
            reasons.append(_no_rdma_channel_reason(transport))
    if largest is None:
        codes.append(EXIT_LOW_BUSBW)
        reasons.append("no sweep rows")
    elif threshold is not None and busbw_gbps is not None and busbw_gbps < threshold:
        codes.append(EXIT_LOW_BUSBW)
        reasons.append(f"busbw {busbw_gbps:.2f} Gbit/s at {largest.size} B < {min_busbw_fraction} x {link_gbps} Gbit/s")
    return Verdict(exit_code=min(codes, key=_EXIT_PRECEDENCE.index) if codes else EXIT_PASS,
                   reasons=tuple(reasons), busbw_gbps=busbw_gbps, threshold_gbps=threshold)
