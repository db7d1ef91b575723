"""Grafana dashboards as code: plain dicts in Grafana's dashboard JSON model (schemaVersion 39).

Two dashboards, provisioned by the Grafana sidecar from labelled ConfigMaps:
  * GPU fleet: utilization, memory used/total, power, temperature, SM clock and XID errors per node
    (`node`, set by the DCGM ServiceMonitors from the scraped pod's node) and GPU (`gpu`).
  * GPU training: the same metrics per namespace / job / pod holding the GPU (the DCGM exporter's
    pod labels: `exported_namespace`, `exported_pod` and the pod's own labels, among them the
    training job label both launchers put on their pods: JOB_METRIC_LABEL of
    config/scheduling_contract.py) and the network throughput of those pods
    (cAdvisor via the kubelet).

Seam for more exporters (RDMA counters later): a `PanelGroup` is a titled row of panels; pass extra
groups to `fleet_dashboard` / `training_dashboard` (Monitoring takes them in its args).

Does not manage: the chart's own Kubernetes dashboards, Grafana folders, alert visualisation.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from config.scheduling_contract import JOB_LABEL, JOB_METRIC_LABEL
from config.scheduling_contract import METRICS_NODE_LABEL as NODE

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Panel:
    title: str
    exprs: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    description: str = ""
    kind: str = "timeseries"  # or "stat"


@dataclass(frozen=True)
class PanelGroup:
    """A titled row of panels: the unit another exporter (e.g. RDMA counters) adds."""

    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    groups: tuple[PanelGroup, ...]
    variables: tuple[dict[str, Any], ...] = field(default=())
    tags: tuple[str, ...] = ("gpu-cluster", "gpu")


def _query_var(name: str, query: str, label: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"var-{name}"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


_DATASOURCE_VAR = {
    "name": "datasource",
    "label": "Data source",
    "type": "datasource",
    "query": "prometheus",
    "current": {"selected": True, "text": "Prometheus", "value": "prometheus"},
}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(panel.exprs)
        ],
    }
    if panel.kind == "stat":
        out["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    return out


def to_json(d: Dashboard) -> dict[str, Any]:
    """The dashboard in Grafana's JSON model: rows, each followed by its panels two per line."""
    ids = itertools.count(1)
    panels: list[dict[str, Any]] = []
    y = 0
    for group in d.groups:
        panels.append({"id": next(ids), "type": "row", "title": group.title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        y += 1
        for i, panel in enumerate(group.panels):
            panels.append(_panel_json(panel, next(ids), 12 * (i % 2), y + 8 * (i // 2)))
        y += 8 * ((len(group.panels) + 1) // 2)
    return {
        "uid": d.uid,
        "title": d.title,
        "tags": list(d.tags),
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": False,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "utc",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [_DATASOURCE_VAR, *d.variables]},
        "panels": panels,
    }


# ------------------------------------------------------------------------------------------------
# GPU fleet: per node and GPU

_SEL = f'{NODE}=~"$node", gpu=~"$gpu"'
_PER_GPU = "{{" + NODE + "}} GPU {{gpu}}"


def fleet_dashboard(extra_groups: tuple[PanelGroup, ...] = ()) -> Dashboard:
    by_gpu = f"max by ({NODE}, gpu) "
    groups = (
        PanelGroup("Fleet", (
            Panel("GPUs reporting", ((f"count(DCGM_FI_DEV_GPU_TEMP{{{_SEL}}})", "GPUs"),), kind="stat"),
            Panel("GPUs in use by a pod", ((f'count(DCGM_FI_DEV_GPU_UTIL{{{_SEL}, exported_pod!=""}})', "GPUs"),),
                  kind="stat"),
        )),
        PanelGroup("Utilization and memory", (
            Panel("GPU utilization", ((f"{by_gpu}(DCGM_FI_DEV_GPU_UTIL{{{_SEL}}})", _PER_GPU),), "percent"),
            Panel("Tensor core activity", ((f"{by_gpu}(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{_SEL}}})", _PER_GPU),),
                  "percentunit", "Ratio of cycles the tensor pipe is active (profiling metric)."),
            Panel("Framebuffer memory used", ((f"{by_gpu}(DCGM_FI_DEV_FB_USED{{{_SEL}}})", _PER_GPU),), "decmbytes"),
            Panel("Framebuffer memory used / total", ((
                f"{by_gpu}(DCGM_FI_DEV_FB_USED{{{_SEL}}} / (DCGM_FI_DEV_FB_USED{{{_SEL}}} + "
                f"DCGM_FI_DEV_FB_FREE{{{_SEL}}} + DCGM_FI_DEV_FB_RESERVED{{{_SEL}}}))", _PER_GPU),),
                  "percentunit", "Total = used + free + reserved."),
        )),
        PanelGroup("Power, temperature, clocks", (
            Panel("Power draw", ((f"{by_gpu}(DCGM_FI_DEV_POWER_USAGE{{{_SEL}}})", _PER_GPU),), "watt"),
            Panel("GPU temperature", ((f"{by_gpu}(DCGM_FI_DEV_GPU_TEMP{{{_SEL}}})", _PER_GPU),), "celsius"),
            Panel("SM clock", ((f"{by_gpu}(DCGM_FI_DEV_SM_CLOCK{{{_SEL}}})", _PER_GPU),), "MHz"),
            Panel("Memory temperature", ((f"{by_gpu}(DCGM_FI_DEV_MEMORY_TEMP{{{_SEL}}})", _PER_GPU),), "celsius"),
        )),
        PanelGroup("Errors", (
            Panel("Last XID error", ((f"{by_gpu}(DCGM_FI_DEV_XID_ERRORS{{{_SEL}}})", _PER_GPU),),
                  description="Value of the last XID the GPU reported (0: none). See the GpuXidError alerts."),
            Panel("Remapped rows (uncorrectable) and remap failures", (
                (f"{by_gpu}(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{_SEL}}})", "remapped " + _PER_GPU),
                (f"{by_gpu}(DCGM_FI_DEV_ROW_REMAP_FAILURE{{{_SEL}}})", "remap failure " + _PER_GPU),
            )),
            Panel("PCIe replays", ((f"{by_gpu}(rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{_SEL}}}[5m]))", _PER_GPU),),
                  "ops"),
            Panel("ECC errors (volatile)", (
                (f"{by_gpu}(rate(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{_SEL}}}[5m]))", "corrected " + _PER_GPU),
                (f"{by_gpu}(rate(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{_SEL}}}[5m]))", "uncorrectable " + _PER_GPU),
            ), "ops", "Single-bit (corrected) and double-bit ECC errors a second since the last driver load."),
            Panel("NVLink errors", ((
                f"{by_gpu}(rate(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{{{_SEL}}}[5m]) "
                f"+ rate(DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL{{{_SEL}}}[5m]) "
                f"+ rate(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL{{{_SEL}}}[5m]) "
                f"+ rate(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL{{{_SEL}}}[5m]))", _PER_GPU),),
                "ops", "CRC, replay and recovery errors a second, all links (empty for GPUs without NVLink)."),
            Panel("Time throttled", (
                (f"{by_gpu}(rate(DCGM_FI_DEV_POWER_VIOLATION{{{_SEL}}}[5m])) / 1e9", "power " + _PER_GPU),
                (f"{by_gpu}(rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{_SEL}}}[5m])) / 1e9", "thermal " + _PER_GPU),
            ), "percentunit", "Share of the time the GPU ran throttled by its power or thermal limit."),
        )),
    )
    return Dashboard(
        uid="gpu-cluster-gpu-fleet",
        title="GPU fleet",
        groups=groups + tuple(extra_groups),
        variables=(
            _query_var("node", f"label_values(DCGM_FI_DEV_GPU_TEMP, {NODE})", "Node"),
            _query_var("gpu", f'label_values(DCGM_FI_DEV_GPU_TEMP{{{NODE}=~"$node"}}, gpu)', "GPU"),
        ),
    )


# ------------------------------------------------------------------------------------------------
# GPU training: per namespace / job / pod holding the GPU

_POD_SEL = 'exported_namespace=~"$namespace", exported_pod=~"$pod", exported_pod!=""'
_BY_POD = "exported_namespace, exported_pod"
_PER_POD = "{{exported_namespace}}/{{exported_pod}}"
# The pods that hold a GPU, with namespace/pod labels as cAdvisor names them (for the network join).
_GPU_PODS = (
    'max by (namespace, pod) (label_replace(label_replace(DCGM_FI_DEV_GPU_UTIL{exported_namespace=~"$namespace", '
    'exported_pod=~"$pod", exported_pod!=""}, "pod", "$1", "exported_pod", "(.+)"), '
    '"namespace", "$1", "exported_namespace", "(.+)"))'
)


def _net(metric: str) -> str:
    return f"sum by (namespace, pod) (rate({metric}[5m])) and on(namespace, pod) {_GPU_PODS}"


def training_dashboard(extra_groups: tuple[PanelGroup, ...] = ()) -> Dashboard:
    groups = (
        PanelGroup("Jobs", (
            Panel("GPUs per job", ((f"count by (exported_namespace, {JOB_METRIC_LABEL}) (DCGM_FI_DEV_GPU_UTIL{{{_POD_SEL}}})",
                                    "{{exported_namespace}}/{{" + JOB_METRIC_LABEL + "}}"),),
                  description=f"By the pods' {JOB_LABEL} label (both launchers set it); GPUs of "
                              "other pods count under an empty job."),
            Panel("Mean GPU utilization per job", ((
                f"avg by (exported_namespace, {JOB_METRIC_LABEL}) (DCGM_FI_DEV_GPU_UTIL{{{_POD_SEL}}})",
                "{{exported_namespace}}/{{" + JOB_METRIC_LABEL + "}}"),), "percent"),
        )),
        PanelGroup("GPUs per pod", (
            Panel("GPU utilization", ((f"avg by ({_BY_POD}) (DCGM_FI_DEV_GPU_UTIL{{{_POD_SEL}}})", _PER_POD),),
                  "percent"),
            Panel("Framebuffer memory used", ((f"sum by ({_BY_POD}) (DCGM_FI_DEV_FB_USED{{{_POD_SEL}}})", _PER_POD),),
                  "decmbytes"),
            Panel("Power draw", ((f"sum by ({_BY_POD}) (DCGM_FI_DEV_POWER_USAGE{{{_POD_SEL}}})", _PER_POD),), "watt"),
            Panel("Hottest GPU", ((f"max by ({_BY_POD}) (DCGM_FI_DEV_GPU_TEMP{{{_POD_SEL}}})", _PER_POD),), "celsius"),
            Panel("Slowest SM clock", ((f"min by ({_BY_POD}) (DCGM_FI_DEV_SM_CLOCK{{{_POD_SEL}}})", _PER_POD),), "MHz"),
            Panel("Last XID error", ((f"max by ({_BY_POD}) (DCGM_FI_DEV_XID_ERRORS{{{_POD_SEL}}})", _PER_POD),)),
        )),
        PanelGroup("Network of GPU pods", (
            Panel("Receive", ((_net("container_network_receive_bytes_total"), "{{namespace}}/{{pod}}"),), "Bps",
                  "cAdvisor (kubelet) counters of the pod's network namespace: the pod network, not RDMA."),
            Panel("Transmit", ((_net("container_network_transmit_bytes_total"), "{{namespace}}/{{pod}}"),), "Bps"),
        )),
    )
    return Dashboard(
        uid="gpu-cluster-gpu-training",
        title="GPU training jobs",
        groups=groups + tuple(extra_groups),
        variables=(
            _query_var("namespace", 'label_values(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}, exported_namespace)',
                       "Namespace"),
            _query_var("pod", 'label_values(DCGM_FI_DEV_GPU_UTIL{exported_namespace=~"$namespace", '
                              'exported_pod!=""}, exported_pod)', "Pod"),
        ),
    )


def dashboards(extra_fleet: tuple[PanelGroup, ...] = (), extra_training: tuple[PanelGroup, ...] = ()) -> list[Dashboard]:
    return [fleet_dashboard(extra_fleet), training_dashboard(extra_training)]
