"""A dev node's GPUs in the check's model are the count gpuNodeGpus declares: the device plugin
advertises that many, and kube-scheduler binds a pod only where they fit (held to it by
tests/e2e/test_scheduler_differential.py's dev scenarios). Where the count is not declared the node
keeps "at least one", unbounded."""

from __future__ import annotations

from pathlib import Path

from render import cluster, program
from tests.conftest import stack_config_with


def _report(upstream: Path, **overrides: object) -> cluster.Report:
    plan = program.run("dev", config=stack_config_with("dev", **overrides))
    return cluster.check(plan, plan.config, upstream)


def test_declared_counts_are_the_nodes_gpus(upstream_dir: Path) -> None:
    report = _report(upstream_dir, gpuNodes=["minikube", "gpu-b"], gpuNodeGpus={"gpu-b": 2})
    gpus = {n.name: n.extended.get("nvidia.com/gpu") for n in report.scheduled}
    assert gpus == {"minikube": 1.0, "gpu-b": 2.0}


def test_a_pod_of_two_gpus_goes_to_the_node_that_has_two(upstream_dir: Path) -> None:
    """The old model gave every dev node unbounded GPUs and put the pod on the first node, minikube,
    where the real scheduler finds 1 nvidia.com/gpu and refuses it."""
    report = _report(upstream_dir, gpuNodes=["minikube", "gpu-b"], gpuNodeGpus={"gpu-b": 2},
                     training={"gpusPerNode": 2, "nodes": 1})
    train = next(p for p in report.placements if p.workload.ref == "Job training/train")
    assert train.nodes == ["gpu-b"]


def test_an_undeclared_count_stays_unbounded(upstream_dir: Path) -> None:
    report = _report(upstream_dir, gpuNodes=["minikube", "gpu-b"], gpuNodeGpus=None)
    assert {n.name: n.gpus_known for n in report.scheduled} == {"minikube": False, "gpu-b": False}
    assert all(n.extended["nvidia.com/gpu"] == float("inf") for n in report.scheduled)
