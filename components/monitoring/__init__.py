"""Monitoring: kube-prometheus-stack (Prometheus operator, Prometheus, Alertmanager, Grafana,
kube-state-metrics, node-exporter) in the `monitoring` namespace, the GPU dashboards and the GPU
alert rules.

* Grafana's admin password is generated (pulumi-random), stored in a Secret the chart reads through
  `grafana.admin.existingSecret`, and exported as a secret output; the chart's default is never used.
* Prometheus selects every ServiceMonitor, PodMonitor, Probe and PrometheusRule in every namespace
  (not only the chart's own), so the DCGM exporter's ServiceMonitor (created by the GPU stack's
  charts once this layer's CRDs exist) is scraped without extra labels.
* Storage: a PVC of `storageSize` when `storageClass` is set, otherwise an emptyDir (data lost when
  the Prometheus pod moves); retention by time and by size (85% of the volume) so it never fills.
* Scheduling: every pod of the chart but node-exporter (which tolerates every NoSchedule taint) is
  a cluster add-on: it tolerates the control-plane taint and prefers a node without GPUs, the
  control plane first (config/scheduling_contract.py). On lab every node is tainted; without
  this, Grafana, the operator, Prometheus, Alertmanager and the admission-webhook Jobs stay Pending
  and the release times out.

Seam for more exporters: `MonitoringArgs.scrape_targets` adds a ServiceMonitor per target,
`fleet_panels` / `training_panels` add rows to the dashboards. `rdma` adds the RDMA row to the fleet
dashboard and the RDMA rule group to the PrometheusRule (components/monitoring/rdma.py, over the
metrics of workloads/trainer/rdma_exporter.py, whose scrape config is the RDMA layer's).

Alertmanager: with `gpu_health_webhook` (gpuHealth on), the GPU fault alerts are routed to the GPU
health service's webhook with its bearer token (a Secret here, mounted into the Alertmanager pod:
components/gpu_health_access.py), the fleet dashboard gets its row and the rules its staleness
alert (components/monitoring/gpu_health.py); every other alert goes to the chart's `null` receiver
as before.

Does not manage: other Alertmanager receivers (mail, chat), Grafana persistence (dashboards and
data sources are provisioned; UI edits are not kept), ingress.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components import versions
from components.gpu_health_access import WEBHOOK_TOKEN_SECRET, token_secret
from components.monitoring import alerts, certificates, dashboards, etcd, etcd_backup, gpu_health, kueue, rdma
from components.monitoring.dashboards import PanelGroup
from components.namespaces import pod_security_namespace
from config.chart_source import ChartSource
from config.monitoring import MonitoringConfig
from config.scheduling_contract import addon_affinity, addon_tolerations

NAMESPACE = "monitoring"
RELEASE_NAME = "monitoring"  # Helm release: objects are named monitoring-grafana, monitoring-prometheus, ...
GRAFANA_SERVICE = f"{RELEASE_NAME}-grafana"
GRAFANA_ADMIN_SECRET = "grafana-admin"
GRAFANA_ADMIN_USER = "admin"
# The label (and value) the Grafana sidecar watches for dashboard ConfigMaps; the chart default.
DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_LABEL_VALUE = "1"
RULE_NAME = "gpu-cluster-gpu-alerts"
PORT_FORWARD = f"kubectl -n {NAMESPACE} port-forward svc/{GRAFANA_SERVICE} 3000:80"


@dataclass(frozen=True)
class ScrapeTarget:
    """A Service to scrape through a ServiceMonitor (the seam for another exporter)."""

    name: str
    namespace: str
    match_labels: dict[str, str]
    port: str
    interval: str = "30s"


@dataclass(frozen=True)
class MonitoringArgs:
    monitoring: MonitoringConfig
    scrape_targets: tuple[ScrapeTarget, ...] = ()
    fleet_panels: tuple[PanelGroup, ...] = ()
    training_panels: tuple[PanelGroup, ...] = ()
    # RDMA port metrics (network.rdma): the fleet dashboard's RDMA row and the RDMA alert rules.
    rdma: bool = False
    # network.linkGbps: the rate RdmaLinkRateDegraded holds each ACTIVE RDMA port to (None: the
    # port's own best rate of the last day).
    rdma_link_gbps: float | None = None
    # gpuHealth: the service's Alertmanager webhook URL (GPU fault alerts go there) and its row.
    gpu_health_webhook: str | None = None
    # ... the bearer token it must send (required with the webhook; a Pulumi secret) and the
    # service's reconcile interval (its staleness alert).
    gpu_health_webhook_token: pulumi.Input[str] | None = None
    gpu_health_reconcile_seconds: float = 60.0
    # lab's etcd snapshots: the longest gap of their schedule (node-exporter reads their metrics and
    # EtcdBackupTooOld fires past twice it); None: no snapshots.
    etcd_backup_interval_seconds: int | None = None
    # lab's etcd serves its metrics on the node addresses: the chart's etcd alerts get this
    # program's runbook (components/monitoring/etcd.py).
    etcd_metrics: bool = False
    # lab's control planes write their certificates' expiry (components/lab/certificates.py):
    # node-exporter reads it and the certificate rule group alerts on it.
    certificate_expiry_metrics: bool = False
    # queues.enabled: the Kueue row and rule group (components/monitoring/kueue.py), alerting past
    # queues.pendingAlertMinutes; None: no queues.
    kueue_pending_minutes: int | None = None
    kueue_gpu_resource: str = "nvidia.com/gpu"  # the GPU resource the ClusterQueues cover (the quota panel's)
    charts: ChartSource = ChartSource()  # gpu-cluster:chartsDir: where the chart comes from


def _gib(size: str) -> int:
    return int(size[:-2]) * (1024 if size.endswith("Ti") else 1)


def storage_spec(cfg: MonitoringConfig) -> dict[str, Any]:
    if cfg.storage_class:
        return {"volumeClaimTemplate": {"spec": {
            "storageClassName": cfg.storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": cfg.storage_size}},
        }}}
    return {"emptyDir": {"sizeLimit": cfg.storage_size}}


def _addon() -> dict[str, Any]:
    """tolerations + affinity of one of the chart's add-on pods (see Scheduling above)."""
    return {"tolerations": addon_tolerations(), "affinity": addon_affinity()}


def prometheus_stack_values(cfg: MonitoringConfig, gpu_health_webhook: str | None = None,
                            etcd_backup_metrics: bool = False, etcd_metrics: bool = False) -> dict[str, Any]:
    everything: dict[str, Any] = {}
    for kind in ("serviceMonitor", "podMonitor", "rule", "probe"):
        # An empty selector then selects all objects of the kind, in every namespace.
        everything[f"{kind}SelectorNilUsesHelmValues"] = False
        everything[f"{kind}Selector"] = {}
        everything[f"{kind}NamespaceSelector"] = {}
    return {
        "grafana": {
            "admin": {"existingSecret": GRAFANA_ADMIN_SECRET, "userKey": "admin-user", "passwordKey": "admin-password"},
            "sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL, "labelValue": DASHBOARD_LABEL_VALUE,
                                       "searchNamespace": "ALL"}},
            **_addon(),
        },
        "kube-state-metrics": _addon(),
        **({"prometheus-node-exporter": etcd_backup.node_exporter_values()} if etcd_backup_metrics else {}),
        **({"defaultRules": etcd.chart_values()} if etcd_metrics else {}),
        # The operator, and the hook Jobs that create and patch its admission webhook's certificate.
        "prometheusOperator": {**_addon(), "admissionWebhooks": {"patch": _addon()}},
        # The operator copies these into the Prometheus and Alertmanager StatefulSets.
        "alertmanager": {
            # the webhook token's Secret, mounted by the operator (components/gpu_health_access.py)
            "alertmanagerSpec": {**_addon(), **({"secrets": [WEBHOOK_TOKEN_SECRET]} if gpu_health_webhook else {})},
            **({"config": gpu_health.alertmanager_values(gpu_health_webhook)} if gpu_health_webhook else {}),
        },
        "prometheus": {
            "prometheusSpec": {
                "retention": cfg.retention,
                # Prometheus' GB are GiB; keep 15% headroom for the WAL and compaction.
                "retentionSize": f"{max(1, _gib(cfg.storage_size) * 85 // 100)}GB",
                "storageSpec": storage_spec(cfg),
                **everything,
                **_addon(),
            }
        },
    }


def service_monitor(target: ScrapeTarget) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": target.name, "namespace": target.namespace},
        "spec": {
            "selector": {"matchLabels": dict(target.match_labels)},
            "namespaceSelector": {"matchNames": [target.namespace]},
            "endpoints": [{"port": target.port, "interval": target.interval}],
        },
    }


def prometheus_rule(cfg: MonitoringConfig, extra_groups: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": RULE_NAME, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/part-of": "gpu-cluster"}},
        "spec": {"groups": [*alerts.rule_groups(cfg.alerts), *extra_groups]},
    }


def _custom_resource(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    return k8s.apiextensions.CustomResource(
        name,
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        metadata=k8s.meta.v1.ObjectMetaArgs(**obj["metadata"]),
        spec=obj["spec"],
        opts=opts,
    )


class Monitoring(pulumi.ComponentResource):
    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:monitoring:Stack", name, None, opts)
        cfg = args.monitoring
        child = pulumi.ResourceOptions(parent=self)
        # node-exporter (a DaemonSet of this chart) needs host network, PID and the host's root
        # filesystem read-only; nothing stricter than privileged admits it.
        ns = pod_security_namespace(f"{name}-ns", NAMESPACE, "privileged", child)
        token_secrets: list[pulumi.Resource] = []
        if args.gpu_health_webhook:
            if args.gpu_health_webhook_token is None:
                raise ValueError("Monitoring: gpu_health_webhook needs gpu_health_webhook_token (the service refuses "
                                 "a webhook call without it)")
            # Before the release: the Alertmanager pod mounts it.
            token_secrets.append(token_secret(f"{name}-gpu-health-webhook-token", NAMESPACE,
                                              args.gpu_health_webhook_token,
                                              pulumi.ResourceOptions(parent=self, depends_on=[ns])))
        password = random.RandomPassword(f"{name}-grafana-admin", length=32, special=False, opts=child)
        admin = k8s.core.v1.Secret(
            f"{name}-grafana-admin",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=GRAFANA_ADMIN_SECRET, namespace=NAMESPACE),
            # The SDK keeps data/stringData secret; the password is secret on its own as well.
            string_data={
                "admin-user": GRAFANA_ADMIN_USER,
                "admin-password": pulumi.Output.secret(password.result),  # type: ignore[arg-type]
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]),
        )
        self.release = k8s.helm.v3.Release(
            f"{name}-kube-prometheus-stack",
            name=RELEASE_NAME,
            **args.charts.args(versions.KUBE_PROMETHEUS_STACK_CHART, versions.KUBE_PROMETHEUS_STACK_CHART_VERSION,
                               versions.KUBE_PROMETHEUS_STACK_CHART_REPO),
            namespace=NAMESPACE,
            # node-exporter reads the textfile metrics of the snapshots and of the defragmentation.
            values=prometheus_stack_values(cfg, args.gpu_health_webhook,
                                           args.etcd_backup_interval_seconds is not None or args.etcd_metrics
                                           or args.certificate_expiry_metrics,
                                           args.etcd_metrics),
            timeout=900,  # the first install pulls several images and waits for the operator's webhooks
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns, admin, *token_secrets]),
        )
        # Custom resources need the chart's CRDs (and the operator) first.
        after_release = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        rule_groups = (((rdma.rule_group(args.rdma_link_gbps),) if args.rdma else ())
                       + ((gpu_health.rule_group(args.gpu_health_reconcile_seconds),) if args.gpu_health_webhook else ())
                       + ((etcd_backup.rule_group(args.etcd_backup_interval_seconds),)
                          if args.etcd_backup_interval_seconds is not None else ())
                       + ((etcd.rule_group(),) if args.etcd_metrics else ())
                       + ((certificates.rule_group(),) if args.certificate_expiry_metrics else ())
                       + ((kueue.rule_group(args.kueue_pending_minutes),) if args.kueue_pending_minutes else ()))
        self.rule = _custom_resource(f"{name}-gpu-alerts", prometheus_rule(cfg, rule_groups), after_release)
        for target in args.scrape_targets:
            _custom_resource(f"{name}-{target.name}", service_monitor(target), after_release)
        fleet_panels = (args.fleet_panels + ((rdma.panel_group(),) if args.rdma else ())
                        + ((gpu_health.panel_group(),) if args.gpu_health_webhook else ())
                        + ((kueue.panel_group(args.kueue_gpu_resource),) if args.kueue_pending_minutes else ()))
        for board in dashboards.dashboards(fleet_panels, args.training_panels):
            slug = board.uid.removeprefix("gpu-cluster-")
            k8s.core.v1.ConfigMap(
                f"{name}-dashboard-{slug}",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=board.uid, namespace=NAMESPACE, labels={DASHBOARD_LABEL: DASHBOARD_LABEL_VALUE}
                ),
                data={f"{slug}.json": json.dumps(dashboards.to_json(board), indent=1, sort_keys=True)},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]),
            )
        self.grafana_admin_password: pulumi.Output[str] = pulumi.Output.secret(password.result)
        self.grafana_port_forward = pulumi.Output.from_input(PORT_FORWARD)
        self.register_outputs({
            "namespace": NAMESPACE,
            "release": self.release.name,
            "grafanaAdminPassword": self.grafana_admin_password,
            "grafanaPortForward": self.grafana_port_forward,
        })
