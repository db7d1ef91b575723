"""RDMA (RoCE / InfiniBand) on the GPU fleet dashboard and in the alert rules, over the metrics of
workloads/trainer/rdma_exporter.py (its module docstring lists them).

Two exporters may report the same device: the node's DaemonSet, and a sidecar in the training pod
that holds the device in RDMA exclusive netns mode (the device then vanishes from the host's view,
but a shared-mode device is seen by both). Their series differ in job/namespace/pod/instance only,
so every query first takes `max by (node, device, port[, counter])` of each exporter's rate or
value, and only then sums or compares: the two copies are never added. Rates are taken per
series before the max, so two exporters that started at different times (different totals) agree.
`node` is the node as the scrape config sets it (METRICS_NODE_LABEL: the ServiceMonitor/PodMonitor
copies `__meta_kubernetes_pod_node_name` into it, as for DCGM).

Counter names are the drivers' own (hw_counters file names) and differ between drivers:
  * irdma (Intel E810, seed 002's /sys/class/infiniband/irdma0/ports/1/hw_counters listing, the
    kernel's irdma_hw_stat_names in drivers/infiniband/hw/irdma/verbs.c): RxECNMrkd (ECN-marked
    packets received), cnpSent, cnpHandled, cnpIgnored; tcpRetransSegs is iWARP's TCP (named
    RetransSegs by newer kernels). irdma has no RoCE out-of-sequence or retransmit counter, so
    those panels and alerts cover mlx5 (and iWARP) only.
  * mlx5 (NVIDIA ConnectX; drivers/infiniband/hw/mlx5/counters.c and NVIDIA's "Understanding mlx5
    Linux Counters" page): np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled,
    rp_cnp_ignored, out_of_sequence, packet_seq_err, implied_nak_seq_err, local_ack_timeout_err,
    rnr_nak_retry_err, roce_adp_retrans, roce_adp_retrans_to.

Does not manage: the exporter's DaemonSet / sidecar and their ServiceMonitor / PodMonitor (the
training and RDMA layers), per-pod RDMA panels (the exporter labels devices, not pods).
"""

from __future__ import annotations

from typing import Any

from components.monitoring.alerts import _alert
from components.monitoring.dashboards import Panel, PanelGroup
from config.scheduling_contract import METRICS_NODE_LABEL as NODE

GROUP = "gpu-cluster.rdma"
TITLE = "RDMA (RoCE / InfiniBand)"

# The exporter's metrics (workloads/trainer/rdma_exporter.py).
HW_COUNTER = "rdma_port_hw_counter_total"
TRANSMIT_BYTES = "rdma_port_transmit_bytes_total"
RECEIVE_BYTES = "rdma_port_receive_bytes_total"
PORT_STATE = "rdma_port_state"
PORT_RATE = "rdma_port_rate_bits_per_second"
READ_ERRORS = "rdma_exporter_read_errors_total"
EXPORTER_DEVICES = "rdma_exporter_devices"
ACTIVE = 4  # ports/<p>/state "4: ACTIVE"

# hw_counters names, irdma's first, then mlx5's (see the module docstring for the sources).
ECN_MARKED = ("RxECNMrkd", "np_ecn_marked_roce_packets")
CNP_SENT = ("cnpSent", "np_cnp_sent")
CNP_HANDLED = ("cnpHandled", "rp_cnp_handled")
CNP_IGNORED = ("cnpIgnored", "rp_cnp_ignored")
OUT_OF_SEQUENCE = ("out_of_sequence", "packet_seq_err", "implied_nak_seq_err")
RETRANSMITS = ("tcpRetransSegs", "RetransSegs", "local_ack_timeout_err", "rnr_nak_retry_err", "roce_adp_retrans",
               "roce_adp_retrans_to")

RATE_WINDOW = "5m"
# A lossless RoCE fabric (PFC/ECN) loses ~no packets: a steady packet a second of sequence errors
# or retransmits for 15 minutes is loss that slows every collective on that port.
LOSS_PER_SECOND = 1
# DCQCN reacting now and then is the design; a thousand ECN marks or CNPs a second for 15 minutes
# means senders are throttled most of the time (an oversubscribed or misconfigured fabric).
CONGESTION_PER_SECOND = 1000

PORT_KEY = f"{NODE}, device, port"
COUNTER_KEY = f"{PORT_KEY}, counter"
_PANEL_SEL = f'{NODE}=~"$node"'
_PER_PORT = "{{" + NODE + "}} {{device}}/{{port}}"
_PER_COUNTER = _PER_PORT + " {{counter}}"


def _sel(extra: str, panel: bool) -> str:
    parts = [p for p in (_PANEL_SEL if panel else "", extra) if p]
    return "{" + ", ".join(parts) + "}" if parts else ""


def _counters(names: tuple[str, ...]) -> str:
    return f'counter=~"{"|".join(names)}"'


def per_port_rate(metric: str, panel: bool = False) -> str:
    """One series per port: the highest of the exporters' rates."""
    return f"max by ({PORT_KEY}) (rate({metric}{_sel('', panel)}[{RATE_WINDOW}]))"


def per_counter_rate(names: tuple[str, ...], panel: bool = False) -> str:
    """One series per port and counter (of `names`), deduplicated across exporters."""
    return f"max by ({COUNTER_KEY}) (rate({HW_COUNTER}{_sel(_counters(names), panel)}[{RATE_WINDOW}]))"


def summed_rate(names: tuple[str, ...], panel: bool = False) -> str:
    """Per port, the sum over the counters of `names` (a port has one driver's names): max across
    exporters first, then the sum."""
    return f"sum by ({PORT_KEY}) ({per_counter_rate(names, panel)})"


def per_port_value(metric: str, panel: bool = False) -> str:
    return f"max by ({PORT_KEY}) ({metric}{_sel('', panel)})"


def panel_group() -> PanelGroup:
    """The fleet dashboard's RDMA row (filtered by its `node` variable)."""
    return PanelGroup(TITLE, (
        Panel("RDMA transmit", ((f"{per_port_rate(TRANSMIT_BYTES, True)} * 8", _PER_PORT),), "bps",
              "Bits per second sent by the RDMA engine (4 x port_xmit_data, or irdma's IP octets)."),
        Panel("RDMA receive", ((f"{per_port_rate(RECEIVE_BYTES, True)} * 8", _PER_PORT),), "bps",
              "Bits per second received by the RDMA engine (4 x port_rcv_data, or irdma's IP octets)."),
        Panel("ECN-marked packets received", ((summed_rate(ECN_MARKED, True), _PER_PORT),), "pps",
              f"Congestion seen on the way in: {' / '.join(ECN_MARKED)} (irdma / mlx5)."),
        Panel("Congestion notification packets (CNP)", (
            (summed_rate(CNP_SENT, True), "sent " + _PER_PORT),
            (summed_rate(CNP_HANDLED, True), "handled " + _PER_PORT),
            (summed_rate(CNP_IGNORED, True), "ignored " + _PER_PORT),
        ), "pps", "Sent: this port asked a sender to slow down; handled: this port slowed down (DCQCN). "
                  f"{' / '.join(CNP_SENT)}, {' / '.join(CNP_HANDLED)}, {' / '.join(CNP_IGNORED)}."),
        Panel("Out-of-sequence and sequence errors", ((per_counter_rate(OUT_OF_SEQUENCE, True), _PER_COUNTER),),
              "pps", "Packet loss on the fabric (mlx5; irdma has no such RoCE counter)."),
        Panel("Retransmits and timeouts", ((per_counter_rate(RETRANSMITS, True), _PER_COUNTER),), "ops",
              "mlx5 ACK timeouts, RNR retries and adaptive retransmissions; iWARP's TCP retransmitted segments."),
        Panel("Port state", ((per_port_value(PORT_STATE, True), _PER_PORT),),
              description="1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE. A device moved into a pod is reported by "
                          "the pod's sidecar exporter."),
        Panel("Link rate", ((per_port_value(PORT_RATE, True), _PER_PORT),), "bps"),
        Panel("Exporter read errors", ((f"max by ({PORT_KEY}, file) (increase({READ_ERRORS}{_sel('', True)}[10m]))",
                                        _PER_PORT + " {{file}}"),),
              description="sysfs files the RDMA exporter listed but could not read or parse."),
    ))


def _port(value: str = "") -> str:
    return "{{ $labels.device }} port {{ $labels.port }} on {{ $labels." + NODE + " }}" + value


def rule_group(link_gbps: float | None = None) -> dict[str, Any]:
    """The RDMA rule group; `link_gbps` (network.linkGbps) is the rate every ACTIVE port is held to,
    else each port is held to its own best rate of the last day."""
    active = f"on({PORT_KEY}) {per_port_value(PORT_STATE)} == {ACTIVE}"
    if link_gbps:
        expected = f"{link_gbps * 1e9:.0f}"
        rate_expr = f"{per_port_value(PORT_RATE)} < {expected} and {active}"
        rate_text = f"below the declared {link_gbps:g} Gbit/s (network.linkGbps)"
    else:
        rate_expr = (f"{per_port_value(PORT_RATE)} < on({PORT_KEY}) "
                     f"max by ({PORT_KEY}) (max_over_time({PORT_RATE}[1d])) and {active}")
        rate_text = "below its own highest rate of the last day"
    return {"name": GROUP, "rules": [
        _alert(
            "RdmaPortDown", f"{per_port_value(PORT_STATE)} < {ACTIVE}", "5m", "critical",
            "RDMA port is not active",
            f"{_port()} is in state {{{{ $value }}}} (1 DOWN, 2 INIT, 3 ARMED; 4 is ACTIVE): NCCL on this node "
            "falls back to sockets or fails.",
        ),
        _alert(
            "RdmaLinkRateDegraded", rate_expr, "10m", "warning",
            "RDMA link runs below its expected rate",
            f"{_port()} is ACTIVE at a rate {rate_text}: the link renegotiated down (cable, transceiver, "
            "switch port).",
        ),
        _alert(
            "RdmaPacketSequenceErrors", f"{summed_rate(OUT_OF_SEQUENCE)} > {LOSS_PER_SECOND}", "15m", "warning",
            "RDMA port sees sustained out-of-sequence packets",
            f"{_port()} receives over {LOSS_PER_SECOND} out-of-sequence packet or sequence NAK a second "
            f"({', '.join(OUT_OF_SEQUENCE)}) for 15 minutes: packets are lost on the fabric.",
        ),
        _alert(
            "RdmaRetransmits", f"{summed_rate(RETRANSMITS)} > {LOSS_PER_SECOND}", "15m", "warning",
            "RDMA port retransmits or times out",
            f"{_port()} retransmits or times out over {LOSS_PER_SECOND} time a second "
            f"({', '.join(RETRANSMITS)}) for 15 minutes.",
        ),
        _alert(
            "RdmaCongestionHeavy",
            f"max by ({PORT_KEY}) ({per_counter_rate(ECN_MARKED + CNP_HANDLED)}) > {CONGESTION_PER_SECOND}",
            "15m", "warning",
            "RDMA port under heavy congestion",
            f"{_port()} receives over {CONGESTION_PER_SECOND} ECN-marked packets or handles over "
            f"{CONGESTION_PER_SECOND} CNPs a second for 15 minutes: DCQCN keeps throttling its traffic.",
        ),
        _alert(
            "RdmaExporterReadErrors",
            f"sum by ({NODE}) (max by ({PORT_KEY}, file) (increase({READ_ERRORS}[10m]))) > 0", "15m", "warning",
            "RDMA exporter cannot read some counters",
            "The RDMA exporter on {{ $labels." + NODE + " }} keeps failing to read or parse sysfs files: "
            "the RDMA panels and alerts miss those counters.",
        ),
    ]}
