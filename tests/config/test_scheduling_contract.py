"""The GPU scheduling contract (config/scheduling_contract.py) holds against the world: the
nodes each platform registers and every GPU pod the cluster would run, not the contract's constants.

The nodes are the whole-cluster check's model (render/cluster/nodes.py): lab's from the kubeadm
configs the plan sends, gke's from the plan's NodePools plus what GKE adds itself, dev's from the
plan's node patches. The pods are the plan's own and those of every Helm release rendered from its
pinned chart, plus the GPU Operator's operands. A GPU pod: a DaemonSet whose selectors pick no
CPU-only node once the add-ons have labelled the nodes, or a pod asking for a resource the device
plugin advertises.

The whole-cluster check (tests/whole_cluster.py, on every plan a test renders) already proves that
each Job places its pods (the ready gate: one on every GPU node) and that a DaemonSet reaches the
GPU nodes its selectors pick. It lets two things through, which this test adds:
- labels the add-ons set at run time count there, so a GPU label the platform itself failed to set
  would be masked by GPU Feature Discovery's nvidia.com/gpu.present; here the GPU pods must select
  every GPU node as registered, and no CPU-only node;
- a GPU DaemonSet whose selectors pick only some GPU nodes is a report line there, not a problem;
  here every GPU pod tolerates the taints of every GPU node (kubeadm's on lab GPU workers and a GPU
  control plane, the GKE pool's), not only of the nodes its selectors pick.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from config import Platform
from render import program
from render.cluster import nodes as node_model
from render.cluster.nodes import Node
from render.cluster.objects import collect
from render.cluster.scheduling import expand, pod_requests, schedule, selector_reasons, taint_reasons
from render.cluster.workloads import Workload, workloads
from tests.stacks.test_control_plane_taint import plan as lab_plan

# lab: CPU-only control plane and tainted GPU workers (the committed stack); a GPU on the tainted
# control plane under the GPU Operator; dev: an untainted listed node; gke: GPU pools.
PLANS = ("lab", "lab-gpu-control-plane-operator", "dev", "gke")


@functools.cache
def _plan(name: str) -> program.Plan:
    return lab_plan(name) if name.startswith("lab") else program.run(name)


@functools.cache
def _world(name: str, upstream_dir: Path) -> tuple[list[Node], list[tuple[Workload, str]]]:
    """The nodes as the platform registers them, and the GPU pods with how each was told apart."""
    plan = _plan(name)
    cfg = plan.config
    collected = collect(plan, upstream_dir, cfg.kubernetes_version)
    inputs: dict[str, list[dict[str, Any]]] = {}
    for r in plan.resources:
        inputs.setdefault(r.type, []).append(r.inputs)

    def registered() -> list[Node]:
        return expand(node_model.model(cfg, inputs, collected.node_patches))

    labelled = registered()  # schedule() adds the labels NFD, GFD and the operator set at run time
    placements = schedule(cfg, labelled, workloads(collected.objects), gke=cfg.platform is Platform.GKE)
    cpu_only = {n.name for n in labelled if not n.is_gpu}
    advertised = {k for n in labelled for k in n.extended}
    gpu_pods = []
    for p in placements:
        asks = sorted(advertised & set(pod_requests(p.workload.spec)))
        if p.workload.daemon and p.eligible and not cpu_only & set(p.eligible):
            gpu_pods.append((p.workload, "GPU node agent"))
        elif not p.workload.daemon and asks:
            gpu_pods.append((p.workload, f"asks for {', '.join(asks)}"))
    return registered(), gpu_pods


def _inputs(name: str, type_: str) -> list[dict[str, Any]]:
    return [r.inputs for r in _plan(name).resources if r.type == type_]


@pytest.mark.parametrize("name", PLANS)
def test_every_gpu_pod_tolerates_the_taints_of_every_gpu_node(name: str, upstream_dir: Path) -> None:
    nodes, gpu_pods = _world(name, upstream_dir)
    gpu_nodes = [n for n in nodes if n.is_gpu]
    assert gpu_nodes and any(w.daemon for w, _ in gpu_pods) and any(not w.daemon for w, _ in gpu_pods)
    if name != "dev":  # lab and gke taint GPU nodes: the check below is not vacuous
        assert all(n.taints for n in gpu_nodes), [(n.name, n.taints) for n in gpu_nodes]
    for w, why in gpu_pods:
        for n in gpu_nodes:
            reasons = taint_reasons(w.spec, n, daemon=w.daemon)
            assert not reasons, (w.ref, why, n.name, reasons)


def test_lab_and_gke_taint_gpu_nodes_alike(upstream_dir: Path) -> None:
    """The taint kubeadm puts on lab GPU workers is the one the GKE pools declare (GKE's own)."""
    lab = {tuple(sorted(t.items())) for n in _world("lab", upstream_dir)[0] if n.is_gpu for t in n.taints}
    pools = [i for i in _inputs("gke", "gcp:container/nodePool:NodePool") if i["nodeConfig"].get("guestAccelerators")]
    assert pools and all(p["nodeConfig"].get("taints") for p in pools)  # declared by the pool, not added by the model
    gke = {tuple(sorted(t.items())) for n in _world("gke", upstream_dir)[0] if n.is_gpu for t in n.taints}
    assert lab == gke and len(lab) == 1


def _pinned_names(spec: dict[str, Any]) -> set[str]:
    """The node names a pod's required node affinity pins it to (matchFields metadata.name In)."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    return {name for term in required.get("nodeSelectorTerms") or [] for f in term.get("matchFields") or []
            if f.get("key") == "metadata.name" and f.get("operator") == "In" for name in f.get("values") or []}


@pytest.mark.parametrize("name", PLANS)
def test_gpu_pods_select_the_gpu_nodes_as_the_platform_registers_them(name: str, upstream_dir: Path) -> None:
    """On the nodes before any add-on labelled them: a GPU pod whose selectors pick a node there
    picks every GPU node and no CPU-only one. Pods that select only on labels set at run time
    (the GPU Operator's operands, GFD on gke) pick none there and are left to the whole-cluster
    check; every pod asking for a GPU is checked here."""
    nodes, gpu_pods = _world(name, upstream_dir)
    gpu_nodes = {n.name for n in nodes if n.is_gpu}
    checked = []
    for w, why in gpu_pods:
        picked = {n.name for n in nodes if not selector_reasons(w.spec, n)}
        if not picked:
            assert w.daemon, f"{w.ref} ({why}) selects no node as registered"
            continue
        # A per-node pod (gpuHealth's diagnostic) is pinned by name to one GPU node, which it must pick.
        pinned = _pinned_names(w.spec)
        assert picked == (pinned if pinned and pinned <= gpu_nodes else gpu_nodes), (
            w.ref, why, sorted(picked), sorted(gpu_nodes))
        checked.append(w)
    assert any(w.daemon for w in checked)
    assert {w.ref for w, _ in gpu_pods if not w.daemon} <= {w.ref for w in checked}
