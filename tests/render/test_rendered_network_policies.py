"""The NetworkPolicies each stack renders, run against the traffic the plan needs and the traffic
they must stop, with the evaluator of Kubernetes' semantics (render/cluster/network_policy.py,
itself held to the docs and the upstream e2e tables in test_network_policy_semantics.py).

The pods are the plan's own: every Job, CronJob, Deployment, DaemonSet and StatefulSet template the
program renders (labels, namespace, named ports), two pods of each so that a job's pods have a
peer. What the plan does not render is modelled as the cluster has it: CoreDNS in kube-system
(k8s-app=kube-dns, ports 53 UDP/TCP), NodeLocal DNSCache's address, Prometheus and Alertmanager
pods with the labels the pinned chart gives them (components/gpu_health_access.py; a test there
compares them with the chart's rendering), the API server (lab: the first control plane's address,
6443; gke: a public endpoint on 443), the metadata server and an internet address.

Needed, and so allowed: DNS from every pod of `training`; a job's pods to each other on the
rendezvous port and an NCCL port; Prometheus to every target of every rendered ServiceMonitor /
PodMonitor; Alertmanager to the webhook URL in the monitoring release's values; the data download
to the internet on 443. Stopped: another namespace (and another job) to a job's pods, training pods
to the API server, the metadata server, the internet, the GPU health service or DNS on another
port; the data download to pods and private ranges. Every rendered policy must be one this test
knows, so that a new one comes with its traffic.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
import yaml

from components.gpu_health_access import ALERTMANAGER_POD_LABELS, MONITORING_NAMESPACE, PROMETHEUS_POD_LABELS
from components.storage_contract import TRAINING_NAMESPACE
from components.training.network_policy import RDZV_PORT
from config.scheduling_contract import JOB_LABEL
from render import __main__ as render_main
from render import program
from render.cluster.network_policy import Endpoint, allowed, selector_matches
from tests.conftest import PROJECT_DIR, stack_config_with

DATA = {"dataset": "cifar10", "model": "resnet18", "learningRate": 0.1, "warmupEpochs": 2, "weightDecay": 0.0005,
        "prepareData": True}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "lab": ("lab", {}),
    "dev": ("dev", {}),
    "gke": ("gke", {}),
    "lab-prepare": ("lab", {"training": DATA}),
    "gke-prepare": ("gke", {"training": {**DATA, "dataset": "fashion-mnist", "model": "mlp"}}),
}
# Every policy a case may render, by name (<job> stands for any job's name).
KNOWN = {"default-deny", "allow-dns", "<job>-peers", "<job>-internet", "default-deny-ingress",
         "gpu-health-from-monitoring"}
NCCL_PORT = 40000  # inside the ephemeral range NCCL's bootstrap and socket transport bind
INTERNET = Endpoint("internet", "203.0.113.7")
METADATA = Endpoint("metadata-server", "169.254.169.254")
NODE_LOCAL_DNS = Endpoint("node-local-dns", "169.254.20.10")
OUTSIDER = Endpoint("default/curious", "10.244.250.9", "default", {"app": "curious"})
WORKLOAD_KINDS = ("Job", "CronJob", "Deployment", "DaemonSet", "StatefulSet")


@dataclass
class Cluster:
    stack: str
    objects: list[dict[str, Any]]
    policies: list[dict[str, Any]]
    pods: list[Endpoint]  # two per rendered workload
    namespace_labels: dict[str, dict[str, str]]
    api_server: Endpoint
    values: str  # every Helm release's values, as text
    rendezvous: set[str]  # the training jobs whose pods meet at the rendezvous port (torchrun)

    def pods_of(self, namespace: str, selector: dict[str, Any]) -> list[Endpoint]:
        return [p for p in self.pods if p.namespace == namespace and selector_matches(selector, p.labels)]

    def pod(self, name: str, namespace: str, labels: dict[str, str], ports: dict[str, tuple[int, str]] | None = None,
            ip: str = "10.244.200.1") -> Endpoint:
        return Endpoint(name, ip, namespace, labels, self.namespace_labels.get(namespace, {}), ports or {})


def _pod_template(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]


def _named_ports(template: dict[str, Any]) -> dict[str, tuple[int, str]]:
    containers = template.get("spec", {}).get("containers", [])
    return {p["name"]: (int(p["containerPort"]), p.get("protocol", "TCP"))
            for c in containers for p in c.get("ports") or [] if p.get("name")}


@cache
def cluster(case: str) -> Cluster:
    stack, overrides = CASES[case]
    plan = program.run(stack, config=stack_config_with(stack, **overrides))
    objects = render_main.kubernetes_objects(plan)
    namespace_labels = {o["metadata"]["name"]: dict(o["metadata"].get("labels") or {})
                        for o in objects if o.get("kind") == "Namespace"}
    addresses = (f"10.244.{a}.{b}" for a in range(1, 200) for b in range(1, 250))
    pods, rendezvous = [], set()
    for obj in objects:
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        template, md = _pod_template(obj), obj["metadata"]
        if JOB_LABEL in (template.get("metadata", {}).get("labels") or {}) and \
                any(int(p.get("containerPort", 0)) == RDZV_PORT for c in template["spec"]["containers"]
                    for p in c.get("ports") or []):
            rendezvous.add(template["metadata"]["labels"][JOB_LABEL])
        for i in range(2):
            pods.append(Endpoint(f"{md.get('namespace')}/{md['name']}-{i}", next(addresses), md.get("namespace"),
                                 dict(template.get("metadata", {}).get("labels") or {}),
                                 namespace_labels.get(md.get("namespace", ""), {}), _named_ports(template)))
    if stack == "lab":
        first = yaml.safe_load((PROJECT_DIR / "Pulumi.lab.yaml").read_text())["config"]["gpu-cluster:hosts"][0]
        api = Endpoint("api-server", first["address"], node=first["name"])
    else:  # gke's public endpoint; dev: minikube's API server on its node
        api = Endpoint("api-server", "203.0.113.100") if stack == "gke" else Endpoint("api-server", "192.168.49.2",
                                                                                       node="minikube")
    values = "\n".join(str(r.inputs.get("values")) for r in plan.of_type("kubernetes:helm.sh/v3:Release"))
    return Cluster(case, objects, [o for o in objects if o.get("kind") == "NetworkPolicy"], pods, namespace_labels,
                   api, values, rendezvous)


def _jobs(c: Cluster) -> dict[str, list[Endpoint]]:
    jobs: dict[str, list[Endpoint]] = {}
    for p in c.pods:
        if p.namespace == TRAINING_NAMESPACE and JOB_LABEL in p.labels:
            jobs.setdefault(p.labels[JOB_LABEL], []).append(p)
    return jobs


def _assert(c: Cluster, src: Endpoint, dst: Endpoint, port: int, want: bool, protocol: str = "TCP") -> None:
    verdict = allowed(c.policies, src, dst, port, protocol)
    assert bool(verdict) is want, f"{c.stack}: {src.name} -> {dst.name}:{port}/{protocol}: {verdict}"


def _training_pods(c: Cluster) -> list[Endpoint]:
    pods = [p for p in c.pods if p.namespace == TRAINING_NAMESPACE]
    assert pods, f"{c.stack}: no training pod rendered"
    return pods


@pytest.mark.parametrize("case", CASES)
def test_every_rendered_policy_is_one_this_test_exercises(case: str) -> None:
    c = cluster(case)
    jobs = _jobs(c)
    names = {re.sub(rf"^({'|'.join(map(re.escape, jobs))})-", "<job>-", p["metadata"]["name"]) for p in c.policies}
    assert names <= KNOWN, f"{case}: policies with no traffic case here: {sorted(names - KNOWN)}"
    assert {"default-deny", "allow-dns", "<job>-peers"} <= names


@pytest.mark.parametrize("case", CASES)
def test_dns_from_every_training_pod(case: str) -> None:
    c = cluster(case)
    coredns = c.pod("kube-system/coredns", "kube-system", {"k8s-app": "kube-dns"},
                    {"dns": (53, "UDP"), "dns-tcp": (53, "TCP")}, ip="10.244.0.2")
    for pod in _training_pods(c):
        for protocol in ("UDP", "TCP"):
            _assert(c, pod, coredns, 53, True, protocol)
            _assert(c, pod, NODE_LOCAL_DNS, 53, True, protocol)
        _assert(c, pod, coredns, 8080, False)  # DNS, not whatever else runs in kube-system


@pytest.mark.parametrize("case", CASES)
def test_each_jobs_pods_reach_each_other_and_nothing_else_reaches_them(case: str) -> None:
    c = cluster(case)
    jobs = {name: pods for name, pods in _jobs(c).items() if name in c.rendezvous}
    assert jobs, f"{case}: no job with peers"
    for name, (first, second, *_) in jobs.items():
        for port in (RDZV_PORT, NCCL_PORT):
            _assert(c, first, second, port, True)
            _assert(c, second, first, port, True)
            _assert(c, OUTSIDER, first, port, False)  # another namespace
            for other, (stranger, *_) in jobs.items():
                if other != name:
                    _assert(c, stranger, first, port, False)  # another job of the same namespace
        _assert(c, first, second, 22, False)  # below the ephemeral range: not NCCL's


@pytest.mark.parametrize("case", CASES)
def test_training_pods_reach_neither_the_api_server_nor_the_metadata_server_nor_the_internet(case: str) -> None:
    c = cluster(case)
    for pod in _training_pods(c):
        if pod.labels.get(JOB_LABEL) == "prepare-data":
            continue  # its internet policy: test_the_data_download_reaches_the_internet_only
        api_port = 443 if c.stack.startswith("gke") else 6443
        _assert(c, pod, c.api_server, api_port, False)
        _assert(c, pod, METADATA, 80, False)
        _assert(c, pod, INTERNET, 443, False)


@pytest.mark.parametrize("case", ["lab-prepare", "gke-prepare"])
def test_the_data_download_reaches_the_internet_only(case: str) -> None:
    c = cluster(case)
    (download, *_) = _jobs(c)["prepare-data"]
    _assert(c, download, INTERNET, 443, True)
    _assert(c, download, INTERNET, 80, True)
    _assert(c, download, INTERNET, 22, False)
    _assert(c, download, METADATA, 80, False)  # link-local: the node's metadata server
    for other in [p for p in c.pods if p.namespace != TRAINING_NAMESPACE][:6]:
        _assert(c, download, other, 443, False)  # pod addresses are not "the internet"
    private = Endpoint("private-mirror", "10.1.2.3")
    _assert(c, download, private, 443, False)


def _scrape_targets(c: Cluster) -> Iterator[tuple[str, Endpoint, int]]:
    """(monitor, pod, port) for every target of every rendered ServiceMonitor and PodMonitor."""
    for mon in c.objects:
        kind, spec = mon.get("kind"), mon.get("spec") or {}
        if kind not in ("ServiceMonitor", "PodMonitor"):
            continue
        namespaces = (spec.get("namespaceSelector") or {}).get("matchNames") or [mon["metadata"]["namespace"]]
        endpoints = spec.get("endpoints") or spec.get("podMetricsEndpoints") or []
        for ns in namespaces:
            if kind == "PodMonitor":
                for pod in c.pods_of(ns, spec["selector"]):
                    for e in endpoints:
                        yield mon["metadata"]["name"], pod, pod.ports[e["port"]][0]
                continue
            for svc in [o for o in c.objects if o.get("kind") == "Service" and o["metadata"].get("namespace") == ns
                        and selector_matches(spec["selector"], o["metadata"].get("labels") or {})]:
                for e in endpoints:
                    (sp,) = [p for p in svc["spec"]["ports"] if p.get("name") == e["port"]]
                    for pod in c.pods_of(ns, {"matchLabels": svc["spec"]["selector"]}):
                        target = sp.get("targetPort", sp["port"])
                        yield mon["metadata"]["name"], pod, pod.ports[target][0] if isinstance(target, str) else int(target)


@pytest.mark.parametrize("case", CASES)
def test_prometheus_scrapes_every_target_and_others_in_monitoring_do_not_get_in(case: str) -> None:
    c = cluster(case)
    prometheus = c.pod("monitoring/prometheus-0", MONITORING_NAMESPACE, PROMETHEUS_POD_LABELS)
    grafana = c.pod("monitoring/grafana", MONITORING_NAMESPACE, {"app.kubernetes.io/name": "grafana"})
    targets = list(_scrape_targets(c))
    for _monitor, pod, port in targets:
        _assert(c, prometheus, pod, port, True)
        if any(p["metadata"]["namespace"] == pod.namespace for p in c.policies):
            _assert(c, grafana, pod, port, False)
            _assert(c, OUTSIDER, pod, port, False)
    if c.stack.startswith("gke"):
        return  # gke renders no GPU health service (GKE repairs nodes itself): config/health.py
    assert any(m == "gpu-health" for m, _, _ in targets), f"{case}: the GPU health service is not scraped"


@pytest.mark.parametrize("case", ["lab", "dev", "lab-prepare"])
def test_alertmanager_reaches_the_gpu_health_webhook_and_training_pods_do_not(case: str) -> None:
    c = cluster(case)
    (url,) = set(re.findall(r"http://([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.cluster\.local)?:(\d+)/webhook", c.values))
    service, namespace, port = url
    (svc,) = [o for o in c.objects if o.get("kind") == "Service" and o["metadata"]["name"] == service
              and o["metadata"].get("namespace") == namespace]
    (sp,) = [p for p in svc["spec"]["ports"] if int(p["port"]) == int(port)]
    backends = c.pods_of(namespace, {"matchLabels": svc["spec"]["selector"]})
    assert backends, f"{case}: the webhook's Service selects no rendered pod"
    alertmanager = c.pod("monitoring/alertmanager-0", MONITORING_NAMESPACE, ALERTMANAGER_POD_LABELS)
    for pod in backends:
        target = sp["targetPort"]
        target_port = pod.ports[target][0] if isinstance(target, str) else int(target)
        _assert(c, alertmanager, pod, target_port, True)
        for trainer in _training_pods(c)[:2]:
            _assert(c, trainer, pod, target_port, False)
        # Alertmanager's pods by another release's name do not pass: the policy names this one.
        impostor = c.pod("monitoring/other-alertmanager", MONITORING_NAMESPACE,
                         {**ALERTMANAGER_POD_LABELS, "alertmanager": "other"})
        _assert(c, impostor, pod, target_port, False)


def test_the_modelled_addresses_are_what_they_stand_for() -> None:
    """The stand-ins mean what the cases say: the internet address is public, the metadata server
    link-local, the outsider's pod address inside lab's pod network."""
    # TEST-NET-3 (RFC 5737): no private, shared or link-local range holds it, as none holds the internet.
    assert not any(ipaddress.ip_address(INTERNET.ip) in ipaddress.ip_network(n)
                   for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"))
    assert ipaddress.ip_address(METADATA.ip).is_link_local
    lab = yaml.safe_load((PROJECT_DIR / "Pulumi.lab.yaml").read_text())["config"]
    assert ipaddress.ip_address(OUTSIDER.ip) in ipaddress.ip_network(lab["gpu-cluster:podCidr"])
