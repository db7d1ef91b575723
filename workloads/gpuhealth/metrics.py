"""The GPU health service's Prometheus metrics (GET /metrics); the module docstring of
gpuhealth/service.py lists them with their labels."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

# The name the staleness alert (components/monitoring/gpu_health.py) reads; a test keeps them equal.
LAST_SUCCESS = "gpu_health_last_successful_reconcile_timestamp_seconds"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.actions = Counter("gpu_health_actions", "Actions and refusals by the GPU health service.",
                               ["action", "reason", "result"], registry=r)
        self.out = Gauge("gpu_health_nodes_out_of_service", "Nodes out of service by this service.", registry=r)
        self.limit = Gauge("gpu_health_nodes_out_of_service_limit", "Circuit breaker: most nodes out at once.",
                           registry=r)
        self.gpu_nodes = Gauge("gpu_health_gpu_nodes", "Nodes with the GPU resource.", registry=r)
        self.alerts = Counter("gpu_health_alerts_received", "Alerts received from Alertmanager.",
                              ["alertname", "status"], registry=r)
        self.rejected = Counter("gpu_health_alerts_rejected", "Malformed alerts refused (the others of their "
                                "batch are acted on), by the part at fault.", ["field"], registry=r)
        self.requests = Counter("gpu_health_http_requests", "HTTP requests answered, by path kind and status code.",
                                ["handler", "code"], registry=r)
        self.api_errors = Counter("gpu_health_api_errors", "Failed Kubernetes API calls.", ["call"], registry=r)
        self.reconcile_failures = Counter("gpu_health_reconcile_failures", "Reconcile passes that did not complete "
                                          "(nodes not listed, or an error).", registry=r)
        self.dry_run = Gauge("gpu_health_dry_run", "1 in dry-run mode.", registry=r)
        self.last_success = Gauge(LAST_SUCCESS, "End of the last reconcile pass that listed the nodes and ran "
                                  "to the end (Unix time; 0: none yet).", registry=r)
