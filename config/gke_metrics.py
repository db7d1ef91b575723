"""Who exports the GPU metrics of a gke cluster (gke.gpuMetrics): one DCGM exporter per GPU node, never two.

GKE has its own: "Collect and view DCGM metrics" (cloud.google.com/kubernetes-engine/docs/how-to/dcgm-metrics)
says that with DCGM metrics on, GKE installs DCGM-Exporter, Google-managed GPU drivers and a
ClusterPodMonitoring that sends the metrics to Google Cloud Managed Service for Prometheus (Cloud
Monitoring), and that the DCGM metrics package is on by default for new clusters created with
1.32.1-gke.1357000 or later. It is the cluster's monitoring_config: enable_components with DCGM, and
managed_prometheus enabled (Cluster Toolkit's modules/scheduler/gke-cluster/main.tf sets exactly that,
enable_dcgm_monitoring). Left unset, a new cluster would run GKE's exporter beside this program's:
two exporters reading the same GPUs, two series for each. So the cluster always says which one:

- exporter (the default, as before): this program's DCGM exporter chart (components/gpu_stack.py), its
  fields (components/dcgm_metrics.py) scraped by the in-cluster Prometheus that the GPU dashboards,
  alert rules and GPU health read; the cluster's monitoring components are SYSTEM_COMPONENTS alone,
  which switches GKE's DCGM package off.
- gkeManaged: GKE's exporter (enable_components SYSTEM_COMPONENTS and DCGM, managed Prometheus on), the
  metrics in Cloud Monitoring; this program installs no DCGM exporter.

Refused with gkeManaged, naming the key: gpu.stack operator (the operator runs its own DCGM exporter on
every GPU node); a pool whose driver is not GKE's (GKE's page: the managed package comes with
Google-managed drivers); monitoring.enabled true (the in-cluster Prometheus would get no DCGM series:
its GPU dashboards and alert rules would stay empty while looking healthy).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from config.errors import Problems

GPU_METRICS_DESCRIPTION = ("Who exports GPU metrics: exporter (this program's DCGM exporter, scraped by the in-cluster "
                           "Prometheus; GKE's DCGM package off) or gkeManaged (GKE's managed DCGM metrics in Cloud "
                           "Monitoring; needs GKE's drivers, gpu.stack device-plugin and monitoring.enabled false).")


class GkeGpuMetrics(enum.StrEnum):
    EXPORTER = "exporter"
    GKE_MANAGED = "gkeManaged"

    @property
    def monitoring_components(self) -> list[str]:
        """The cluster's monitoring_config.enable_components: DCGM only where GKE exports the GPUs."""
        return ["SYSTEM_COMPONENTS", "DCGM"] if self is GkeGpuMetrics.GKE_MANAGED else ["SYSTEM_COMPONENTS"]

    @property
    def own_exporter(self) -> bool:
        """Whether this program's DCGM exporter runs on the GPU nodes."""
        return self is GkeGpuMetrics.EXPORTER


def gpu_metrics_problems(metrics: GkeGpuMetrics, operator: bool, pool_drivers_gke_managed: Sequence[bool],
                         monitoring_enabled: bool) -> Problems:
    if metrics is not GkeGpuMetrics.GKE_MANAGED:
        return []
    key, problems = "gke.gpuMetrics", []
    if operator:
        problems.append((key, "gkeManaged with gpu.stack operator: the GPU Operator runs its own DCGM exporter on "
                              "every GPU node, and GKE's would read the same GPUs; use gpuMetrics exporter"))
    not_gke = [i for i, managed in enumerate(pool_drivers_gke_managed) if not managed]
    if not_gke and not operator:
        problems.append((key, f"gkeManaged needs GKE's own GPU drivers (gke-default or gke-latest); gke.gpuPools"
                              f"{not_gke} install theirs (GKE's DCGM metrics page)"))
    if monitoring_enabled:
        problems.append((key, "gkeManaged sends the GPU metrics to Cloud Monitoring, not to the in-cluster Prometheus: "
                              "its GPU dashboards and alert rules would stay empty; set monitoring.enabled false, or "
                              "gpuMetrics exporter"))
    return problems
