"""Who may reach the GPU health service (components/gpu_health_access.py), in the rendered stacks:

* the webhook token is one generated password, a Pulumi secret all the way: both Secrets (the
  service's in gpu-health, Alertmanager's in monitoring) take their data from it and are masked in
  the plan; the service mounts its Secret where --webhook-token-file points, the pinned chart hands
  Alertmanager's Secret to the operator (alertmanagerSpec.secrets), and the rendered receiver reads
  the token from the path the Alertmanager CRD documents for that mount; each Secret exists before
  the pod that mounts it;
* the NetworkPolicies admit Alertmanager and Prometheus (the labels the pinned chart's own
  anti-affinity selects their pods by) to the service's port, and nothing else to any pod of the
  namespace.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from components import gpu_health_access as access
from components import versions
from components.gpu_health import DIAG_LABELS, LABELS, NAME, NAMESPACE, PORT, GpuHealth, GpuHealthArgs
from components.monitoring import NAMESPACE as MONITORING_NAMESPACE
from components.monitoring import RELEASE_NAME, Monitoring, MonitoringArgs
from components.monitoring import gpu_health as health_monitoring
from config.monitoring import MonitoringConfig
from render import program
from render.__main__ import kubernetes_objects
from render.cluster.objects import chart_dir, collect
from tests.components.monitoring.test_gpu_health_alertmanager import rendered_config


@functools.cache
def _plan(stack: str) -> program.Plan:
    return program.run(stack, config=program.stack_config(stack))


def _registered(stack: str, type_: str, name: str) -> program.Registration:
    (found,) = [r for r in _plan(stack).resources if r.type == type_ and r.name == name]
    return found


# --- the token ---------------------------------------------------------------------------------------


def test_one_generated_token_feeds_both_secrets_and_stays_secret() -> None:
    (password,) = [r for r in _plan("lab").of_type("random:index/randomPassword:RandomPassword")
                   if r.name == "gpu-health-webhook-token"]
    secrets = [r for r in _plan("lab").of_type("kubernetes:core/v1:Secret")
               if r.inputs["metadata"]["name"] == access.WEBHOOK_TOKEN_SECRET]
    assert {r.inputs["metadata"]["namespace"] for r in secrets} == {NAMESPACE, MONITORING_NAMESPACE}
    for secret in secrets:
        assert secret.inputs["stringData"] == program.SECRET_MARKER  # masked: a Pulumi secret
        assert secret.property_dependencies["stringData"] == [password.urn]
    # nowhere in the plan in the clear: no output, no Helm value names more than the file
    release = _registered("lab", "kubernetes:helm.sh/v3:Release", "monitoring-kube-prometheus-stack")
    assert "credentials:" not in yaml.safe_dump(release.inputs["values"])
    assert "webhook-token" not in yaml.safe_dump(_plan("lab").outputs).replace("gpu-health-webhook-token", "")


def test_the_service_reads_the_token_where_its_secret_is_mounted() -> None:
    (deploy,) = [o for o in kubernetes_objects(_plan("lab")) if o["kind"] == "Deployment" and o["metadata"]["name"] == NAME]
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    token_file = command[command.index("--webhook-token-file") + 1]
    (volume,) = [v for v in pod["volumes"] if (v.get("secret") or {}).get("secretName") == access.WEBHOOK_TOKEN_SECRET]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert token_file == f"{mount['mountPath']}/{access.WEBHOOK_TOKEN_KEY}"
    # readable by the pod's group (fsGroup), nobody else
    assert volume["secret"]["defaultMode"] == 0o440 and pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    secret = _registered("lab", "kubernetes:core/v1:Secret", "gpu-health-webhook-token")
    assert secret.inputs["metadata"]["namespace"] == NAMESPACE
    assert secret.urn in _registered("lab", "kubernetes:apps/v1:Deployment", f"gpu-health-deployment-{NAME}").dependencies


def _crd_secrets_mount(upstream_dir: Path) -> str:
    """Where the Alertmanager CRD of the pinned chart says its `secrets` are mounted."""
    chart = chart_dir(upstream_dir, versions.KUBE_PROMETHEUS_STACK_CHART, versions.KUBE_PROMETHEUS_STACK_CHART_VERSION)
    crd = (chart / "charts" / "crds" / "crds" / "crd-alertmanagers.yaml").read_text()
    found = re.search(r"mounted into `(/etc/alertmanager/secrets)/<secret-name>`", crd)
    assert found, "the Alertmanager CRD no longer documents where secrets are mounted"
    return found.group(1)


def test_alertmanager_mounts_the_secret_and_sends_the_token_from_it(upstream_dir: Path) -> None:
    secret = _registered("lab", "kubernetes:core/v1:Secret", "monitoring-gpu-health-webhook-token")
    release = _registered("lab", "kubernetes:helm.sh/v3:Release", "monitoring-kube-prometheus-stack")
    assert secret.urn in release.dependencies  # before the Alertmanager pod that mounts it
    plan = _plan("lab")
    objs = collect(plan, upstream_dir, plan.config.kubernetes_version).objects
    (am,) = [o for o in objs if o.kind == "Alertmanager"]
    assert am.body["metadata"]["namespace"] == secret.inputs["metadata"]["namespace"] == MONITORING_NAMESPACE
    assert access.WEBHOOK_TOKEN_SECRET in am.body["spec"]["secrets"]
    config = yaml.safe_load(rendered_config("lab", upstream_dir))
    (receiver,) = [r for r in config["receivers"] if r["name"] == health_monitoring.RECEIVER]
    (webhook,) = receiver["webhook_configs"]
    mount = _crd_secrets_mount(upstream_dir)
    assert webhook["http_config"]["authorization"] == {
        "type": "Bearer", "credentials_file": f"{mount}/{access.WEBHOOK_TOKEN_SECRET}/{access.WEBHOOK_TOKEN_KEY}"}


def test_without_the_service_no_token_and_no_mount() -> None:
    gke = _plan("gke")
    assert not [r for r in gke.resources if "webhook-token" in r.name]
    release = [r for r in gke.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == RELEASE_NAME]
    assert release and "secrets" not in release[0].inputs["values"]["alertmanager"]["alertmanagerSpec"]


# --- the NetworkPolicies -----------------------------------------------------------------------------


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "this check reads matchLabels only"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def admitted(policies: list[dict[str, Any]], pod_ns: str, pod: dict[str, str], peer_ns: str,
             peer: dict[str, str], port: int) -> bool:
    """NetworkPolicy semantics (kubernetes.io/docs/concepts/services-networking/network-policies):
    a pod selected by an Ingress policy takes only what one of those policies' rules admits; a rule's
    `from` entry with both selectors needs both; no `ports` means every port."""
    ns_labels = {"kubernetes.io/metadata.name": peer_ns}  # the API server sets it on every namespace
    isolating = [p for p in policies if p["metadata"]["namespace"] == pod_ns
                 and "Ingress" in p["spec"]["policyTypes"] and _matches(p["spec"]["podSelector"], pod)]
    if not isolating:
        return True
    for policy in isolating:
        for rule in policy["spec"].get("ingress") or []:
            ports_ok = not rule.get("ports") or any(p.get("port") == port for p in rule["ports"])
            peers_ok = not rule.get("from") or any(
                _matches(f.get("namespaceSelector", {"matchLabels": {"kubernetes.io/metadata.name": pod_ns}}), ns_labels)
                and _matches(f.get("podSelector", {}), peer) for f in rule["from"])
            if ports_ok and peers_ok:
                return True
    return False


def _policies() -> list[dict[str, Any]]:
    return [o for o in kubernetes_objects(_plan("lab")) if o["kind"] == "NetworkPolicy"
            and o["metadata"].get("namespace") == NAMESPACE]


def test_the_labels_are_those_the_pinned_chart_selects_its_pods_by(upstream_dir: Path) -> None:
    plan = _plan("lab")
    objs = collect(plan, upstream_dir, plan.config.kubernetes_version).objects
    assert access.MONITORING_NAMESPACE == MONITORING_NAMESPACE
    for kind, labels in (("Alertmanager", access.ALERTMANAGER_POD_LABELS), ("Prometheus", access.PROMETHEUS_POD_LABELS)):
        (cr,) = [o for o in objs if o.kind == kind]
        assert cr.body["metadata"]["namespace"] == MONITORING_NAMESPACE
        (term,) = cr.body["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        exprs = term["podAffinityTerm"]["labelSelector"]["matchExpressions"]
        assert {e["key"]: e["values"][0] for e in exprs if e["operator"] == "In"} == labels, kind


OPERATOR_LABELS = {"app.kubernetes.io/managed-by": "prometheus-operator"}
ALERTMANAGER = {**access.ALERTMANAGER_POD_LABELS, **OPERATOR_LABELS}
PROMETHEUS = {**access.PROMETHEUS_POD_LABELS, **OPERATOR_LABELS}


def test_only_alertmanager_and_prometheus_reach_the_service() -> None:
    policies = _policies()
    assert {p["metadata"]["name"] for p in policies} == {access.DEFAULT_DENY, "gpu-health-from-monitoring"}
    service = dict(LABELS)
    assert admitted(policies, NAMESPACE, service, MONITORING_NAMESPACE, ALERTMANAGER, PORT)
    assert admitted(policies, NAMESPACE, service, MONITORING_NAMESPACE, PROMETHEUS, PORT)
    refused = [
        (MONITORING_NAMESPACE, {"app.kubernetes.io/name": "grafana"}, PORT),  # another monitoring pod
        ("training", ALERTMANAGER, PORT),  # the right labels in another namespace
        ("training", {"app": "trainer"}, PORT),
        (NAMESPACE, {**DIAG_LABELS}, PORT),  # the diagnostic's own pods
        (MONITORING_NAMESPACE, ALERTMANAGER, PORT + 1),  # another port
    ]
    for peer_ns, peer, port in refused:
        assert not admitted(policies, NAMESPACE, service, peer_ns, peer, port), (peer_ns, peer, port)


def test_every_other_pod_of_the_namespace_takes_no_ingress() -> None:
    policies = _policies()
    for pod in (dict(DIAG_LABELS), {"app": "anything"}):
        assert not admitted(policies, NAMESPACE, pod, MONITORING_NAMESPACE, ALERTMANAGER, PORT)
        assert not admitted(policies, NAMESPACE, pod, NAMESPACE, dict(LABELS), PORT)


def test_egress_is_left_open_for_the_api_server() -> None:
    # The service and the diagnostic call the API server: no policy here restricts egress.
    assert all(p["spec"]["policyTypes"] == ["Ingress"] for p in _policies())


# --- the components alone ----------------------------------------------------------------------------


def test_the_service_alone_makes_a_token_of_its_own(mocks: Any) -> None:
    """Built without the stack's token (no monitoring to share it with), the webhook still needs one."""
    from config.health import GpuHealthConfig

    args = GpuHealthArgs(health=GpuHealthConfig(), image="registry.example.com/trainer:1")
    pulumi.runtime.test(lambda: GpuHealth("gpu-health", args))()
    (password,) = mocks.plan.of_type("random:index/randomPassword:RandomPassword")
    (secret,) = [r for r in mocks.plan.of_type("kubernetes:core/v1:Secret")]
    assert password.parent.endswith("::gpu-health") and secret.property_dependencies["stringData"] == [password.urn]
    assert secret.inputs["stringData"] == program.SECRET_MARKER


def test_monitoring_refuses_the_webhook_without_its_token(mocks: Any) -> None:
    args = MonitoringArgs(monitoring=MonitoringConfig(), gpu_health_webhook="http://gpu-health.gpu-health.svc:8080/webhook")
    with pytest.raises(ValueError, match="gpu_health_webhook_token"):
        pulumi.runtime.test(lambda: Monitoring("monitoring", args))()
