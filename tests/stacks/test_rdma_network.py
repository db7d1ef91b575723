"""network.rdma with network.roce (issue 14, seed 002) on lab and dev: what the cluster receives.

Every plan here also passes the whole-cluster check (tests/whole_cluster.py): the vendored Multus
manifest and whereabouts chart rendered with the program's transforms and values, the
NetworkAttachmentDefinition against Multus' CRD, Pod Security of the training namespace, and the
scheduler placing every RDMA pod on a node where the RDMA device plugin (its own ConfigMap read
for `rdmaHcaMax`) advertises `rdma/roce`. The tests below check the rest against upstream's
formats and Kubernetes' rules, and break the plan on purpose where the check must catch it.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import json
from typing import Any

import pytest

from components import rdma_network, versions
from components.storage_contract import TRAINING_NAMESPACE
from components.training import launch
from config.scheduling_contract import GPU_NODE_SELECTOR_TERMS
from render import cluster, program
from render.__main__ import kubernetes_objects
from render.cluster.objects import collect
from stacks.addons import ACCEPTANCE_JOB, RDMA_LINK_JOB, TRAINING_JOB
from tests.conftest import SEED_002_ROCE, stack_config_with

ROCE_NETWORK = {"linkGbps": 25, "rdma": True, "roce": {**SEED_002_ROCE, "ncclEnv": {"NCCL_IB_TC": "106"}}}


_with = stack_config_with  # tests/conftest.py


@functools.cache
def _plan(stack: str, monitoring: bool = True) -> program.Plan:
    overrides: dict[str, Any] = {"network": ROCE_NETWORK}
    if not monitoring:
        overrides["monitoring"] = {"enabled": False}
    if stack == "dev":  # two GPU nodes, seed 002's layout, and a claim both can mount
        overrides.update(gpuNodes=["gpu0", "gpu1"], gpuNodeGpus=None, storage={"hostPath": "", "useDefaultClass": True},
                         training={"nodes": 2}, acceptance={"nccl": True})
    return program.run(stack, config=_with(stack, **overrides))


def _objects(plan: program.Plan) -> list[dict[str, Any]]:
    return kubernetes_objects(plan)


def _one(plan: program.Plan, kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in _objects(plan) if o.get("kind") == kind and o["metadata"]["name"] == name]
    return obj


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]


@pytest.mark.parametrize("stack", ["lab", "dev"])
def test_the_attachment_moves_the_configured_nic_and_its_rdma_device(stack: str) -> None:
    nad = _one(_plan(stack), "NetworkAttachmentDefinition", rdma_network.NETWORK_NAME)
    assert nad["metadata"]["namespace"] == TRAINING_NAMESPACE  # pods name it without a namespace
    conf = json.loads(nad["spec"]["config"])  # the CRD types config as a string: it must be JSON
    host_device, rdma = conf["plugins"]
    # host-device (containernetworking plugins) takes the netdev by name; whereabouts its range
    assert host_device == {"type": "host-device", "device": "ens192",
                           "ipam": {"type": "whereabouts", "range": "192.168.100.0/24"}}
    # rdma-cni is chained (it requires a prevResult) and, for a PF, needs deviceID: the MAC lookup
    # it falls back to only finds SR-IOV VFs (pkg/utils GetVfPciDevFromMAC)
    assert rdma == {"type": "rdma", "deviceID": "0000:3b:00.0"}
    assert conf["name"] == rdma_network.NETWORK_NAME and conf["cniVersion"] == "0.3.1"


@pytest.mark.parametrize("stack", ["lab", "dev"])
def test_rdma_pods_ask_for_the_network_the_devices_and_ipc_lock_not_privilege(stack: str) -> None:
    plan = _plan(stack)
    for name in (RDMA_LINK_JOB, ACCEPTANCE_JOB, TRAINING_JOB):
        template = _pod(_one(plan, "Job", name))
        assert template["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/networks": "roce"}, name
        (main,) = template["spec"]["containers"]
        assert main["resources"]["limits"]["rdma/roce"] == 1
        sc = main["securityContext"]
        assert sc == {"allowPrivilegeEscalation": False, "capabilities": {"add": ["IPC_LOCK"]}}
        env = {e["name"]: e["value"] for e in main["env"]}
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "net1"
        assert env["NCCL_IB_HCA"] == "irdma0" and env["NCCL_IB_GID_INDEX"] == "1"
        assert env["NCCL_IB_TC"] == "106"  # network.roce.ncclEnv
        # the exporter sidecar: a native sidecar (restartPolicy Always), so the Job still completes
        (sidecar,) = template["spec"]["initContainers"]
        assert sidecar["restartPolicy"] == "Always" and sidecar["command"][:3] == ["python", "-m", "trainer.rdma_exporter"]
        assert sidecar["image"] == main["image"]
        assert "privileged" not in json.dumps(template)


def test_without_monitoring_no_exporter_runs() -> None:
    plan = _plan("lab", monitoring=False)
    assert "initContainers" not in _pod(_one(plan, "Job", TRAINING_JOB))["spec"]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in _objects(plan)}
    assert ("DaemonSet", rdma_network.EXPORTER_NAME) not in kinds
    assert not any(k in ("ServiceMonitor", "PodMonitor") for k, _ in kinds)


def test_training_namespace_is_privileged_only_with_rdma() -> None:
    def level(plan: program.Plan) -> str:
        ns = _one(plan, "Namespace", TRAINING_NAMESPACE)
        return str(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"])

    assert level(_plan("lab")) == "privileged"
    assert level(program.run("lab")) == "baseline"


@pytest.mark.would_not_come_up
def test_the_check_refuses_ipc_lock_in_a_baseline_namespace(upstream_dir) -> None:
    plan = copy.deepcopy(_plan("lab"))
    (ns,) = [r for r in plan.resources if r.type == "kubernetes:core/v1:Namespace" and r.inputs["metadata"]["name"] == TRAINING_NAMESPACE]
    labels = ns.inputs["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        if f"pod-security.kubernetes.io/{mode}" in labels:
            labels[f"pod-security.kubernetes.io/{mode}"] = "baseline"
    report = cluster.check(plan, plan.config, upstream_dir)
    assert not report.ok
    assert any("IPC_LOCK" in p and TRAINING_JOB in p for p in report.problems), report.problems


@pytest.mark.would_not_come_up
def test_the_check_finds_no_rdma_resource_without_the_device_plugin_config(upstream_dir) -> None:
    plan = copy.deepcopy(_plan("lab"))
    plan.resources = [r for r in plan.resources
                      if not (r.type == "kubernetes:core/v1:ConfigMap" and r.inputs["metadata"]["name"] == rdma_network.DEVICE_PLUGIN_CONFIG)]
    report = cluster.check(plan, plan.config, upstream_dir)
    assert any(f"Job {TRAINING_NAMESPACE}/{TRAINING_JOB}" in p and "no rdma/roce" in p for p in report.problems), report.problems


def test_one_rdma_pod_per_node_is_all_the_device_plugin_offers() -> None:
    # host-device moves the NIC into one pod: a second pod on the node could not get it
    cm = _one(_plan("lab"), "ConfigMap", rdma_network.DEVICE_PLUGIN_CONFIG)
    (entry,) = json.loads(cm["data"]["config.json"])["configList"]
    assert f"{entry['resourcePrefix']}/{entry['resourceName']}" == "rdma/roce" and entry["rdmaHcaMax"] == 1
    # selected by driver: in exclusive mode the netdev leaves the host's view while a pod holds it
    assert entry["selectors"] == {"drivers": ["ice"]}


def test_multus_runs_the_release_image_not_the_snapshot(upstream_dir) -> None:
    plan = _plan("lab")
    collected = collect(plan, upstream_dir, "1.34.2")
    (ds,) = [o.body for o in collected.objects if o.kind == "DaemonSet" and o.name == "kube-multus-ds"]
    images = {c["image"] for c in ds["spec"]["template"]["spec"]["containers"] + ds["spec"]["template"]["spec"]["initContainers"]}
    assert images == {versions.MULTUS_IMAGE}
    # the vendored manifest at the tag does name the moving tag: the transform is what pins it
    raw = (upstream_dir / "charts" / "multus-v4.3.0" / "multus-daemonset-thick.yml").read_text()
    assert rdma_network.MULTUS_SNAPSHOT_IMAGE in raw and versions.MULTUS_IMAGE not in raw
    assert versions.MULTUS_MANIFEST.split("/")[-1] == "multus-daemonset-thick.yml" and "/v4.3.0/" in versions.MULTUS_MANIFEST


def test_whereabouts_runs_release_images_and_its_reconciler_tolerates_the_control_plane(upstream_dir) -> None:
    plan = _plan("lab")
    collected = collect(plan, upstream_dir, "1.34.2")
    where = [o.body for o in collected.objects if "whereabouts" in o.source]
    workloads = [o for o in where if o["kind"] in ("DaemonSet", "Deployment")]
    assert {o["kind"] for o in workloads} == {"DaemonSet", "Deployment"}  # the node slice controller is off
    for o in workloads:
        for c in o["spec"]["template"]["spec"]["containers"]:
            assert c["image"] == f"{versions.WHEREABOUTS_IMAGE_REPOSITORY}:{versions.WHEREABOUTS_IMAGE_TAG}"
    (reconciler,) = [o for o in workloads if o["kind"] == "Deployment"]
    keys = {t.get("key") for t in reconciler["spec"]["template"]["spec"]["tolerations"]}
    assert "node-role.kubernetes.io/control-plane" in keys
    # its CRDs come from the chart's crds/ (IPPool is what whereabouts allocates from)
    assert {o["spec"]["names"]["kind"] for o in where if o["kind"] == "CustomResourceDefinition"} >= {"IPPool"}


def test_rdma_node_agents_run_on_gpu_nodes_only_and_unprivileged() -> None:
    plan = _plan("lab")
    for name in ("rdma-cni", "rdma-shared-dp", rdma_network.EXPORTER_NAME):
        pod = _one(plan, "DaemonSet", name)["spec"]["template"]["spec"]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == GPU_NODE_SELECTOR_TERMS
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert c["image"] in (versions.RDMA_CNI_IMAGE, versions.RDMA_SHARED_DEVICE_PLUGIN_IMAGE, _plan("lab").config.training.image)


def test_up_waits_for_the_network_then_link_test_then_nccl_then_training() -> None:
    plan = _plan("lab")
    by_name = {r.name: r for r in plan.resources}

    def deps(name: str) -> set[str]:
        return {u.rsplit("::", 1)[-1] for u in by_name[name].dependencies}

    rdma_ready = {"rdma-multus", "rdma-whereabouts", "rdma-rdma-cni", "rdma-device-plugin", "rdma-attachment"}
    link, nccl, train = (f"{j}" for j in (RDMA_LINK_JOB, ACCEPTANCE_JOB, TRAINING_JOB))
    assert rdma_ready <= deps(link)
    assert link in deps(nccl) and rdma_ready <= deps(nccl)
    assert {link, nccl} <= deps(train)
    # both checks are awaited (no skipAwait), so a failure stops `up` before training starts
    for job in (link, nccl):
        job_obj = _one(plan, "Job", job)
        assert "pulumi.com/skipAwait" not in job_obj["metadata"].get("annotations", {})


def test_link_test_runs_two_pods_with_the_declared_link_and_fraction() -> None:
    plan = _plan("lab")
    job = _one(plan, "Job", RDMA_LINK_JOB)
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["python", "-m", "trainer.rdma_link", "--interface=net1", "--hca=irdma0",
                            "--gid-index=1", "--link-gbps=25", "--min-fraction=0.8"]
    codes = job["spec"]["podFailurePolicy"]["rules"][1]["onExitCodes"]["values"]
    assert set(codes) == set(launch.FATAL_EXIT_CODES)
    outputs = plan.outputs
    assert outputs["rdmaLinkTest"]["job"] == f"{TRAINING_NAMESPACE}/{RDMA_LINK_JOB}"
    assert outputs["rdmaNetwork"]["range"] == "192.168.100.0/24"


def test_whereabouts_range_holds_every_pod_and_no_cluster_address() -> None:
    cfg = _plan("lab").config
    assert cfg.network.roce is not None
    rng = cfg.network.roce.range
    assert rng.num_addresses - 2 >= cfg.training.nodes
    assert not rng.overlaps(ipaddress.IPv4Network("10.96.0.0/12")) and not rng.overlaps(ipaddress.IPv4Network("10.244.0.0/16"))


def test_rdma_alerts_and_dashboard_row_come_with_the_network() -> None:
    from components.monitoring import rdma as rdma_monitoring

    def groups(plan: program.Plan) -> set[str]:
        return {g["name"] for o in _objects(plan) if o.get("kind") == "PrometheusRule" for g in o["spec"]["groups"]}

    def boards(plan: program.Plan) -> str:
        return json.dumps([o.get("data") for o in _objects(plan) if o.get("kind") == "ConfigMap"])

    assert rdma_monitoring.GROUP in groups(_plan("lab")) and rdma_monitoring.GROUP not in groups(program.run("lab"))
    assert f'"title": "{rdma_monitoring.TITLE}"' in boards(_plan("lab")).replace('\\"', '"')
    # the link-rate alert holds ports to the declared network.linkGbps (25 Gbit/s = 2.5e10 bits/s)
    (group,) = [g for o in _objects(_plan("lab")) if o.get("kind") == "PrometheusRule"
                for g in o["spec"]["groups"] if g["name"] == rdma_monitoring.GROUP]
    assert any("25000000000" in str(r.get("expr")) or "2.5e+10" in str(r.get("expr")) for r in group["rules"]), group


def test_exporters_are_scraped_with_the_node_label_the_queries_group_by() -> None:
    plan = _plan("lab")
    for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        (endpoint,) = _one(plan, kind, rdma_network.EXPORTER_NAME)["spec"][key]
        assert endpoint["port"] == rdma_network.EXPORTER_PORT_NAME
        assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"} in endpoint["relabelings"]
