"""What the loopback control plane takes from a lab plan (e2e/lab_stack.py), without starting it: a
flag naming a host path it does not provide is refused by name, and a node the model leaves
unbounded is listed, not given an invented capacity."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from components.lab import hardening
from e2e import lab_stack
from render.cluster.nodes import Node


def _lab(args: list[tuple[str, str]], nodes: list[Node] | None = None) -> lab_stack.LabControlPlane:
    return lab_stack.LabControlPlane(stack="test", cluster_name="c", service_cidr="10.96.0.0/12",
                                     pod_cidr="10.244.0.0/16", api_server_args=args,
                                     audit_policy=hardening.audit_policy(), encryption_key_names=["k1"],
                                     nodes=nodes or [])


def test_the_rendered_files_and_flags_are_moved_into_the_folder(tmp_path: Path) -> None:
    lab = _lab([("audit-policy-file", hardening.AUDIT_POLICY_FILE), ("audit-log-maxage", "30")])
    moved = lab.write_files(tmp_path)
    flags = lab.local_api_server_args(moved)
    assert flags == [f"--audit-policy-file={tmp_path / 'gpu-cluster' / 'audit-policy.yaml'}", "--audit-log-maxage=30"]
    assert (tmp_path / "gpu-cluster" / "encryption-config.yaml").stat().st_mode & 0o077 == 0


def test_a_host_path_the_control_plane_does_not_provide_is_refused_by_flag(tmp_path: Path) -> None:
    lab = _lab([("oidc-ca-file", "/etc/kubernetes/pki/oidc.crt")])
    with pytest.raises(lab_stack.StackInputError, match="oidc-ca-file=/etc/kubernetes/pki/oidc.crt"):
        lab.local_api_server_args(lab.write_files(tmp_path))


def test_an_unbounded_resource_is_listed_not_advertised() -> None:
    node = Node("gpu-1", "worker", {}, [], gpus=1, extended={"nvidia.com/gpu": math.inf, "rdma/roce": 1.0})
    lab = _lab([], [node])
    [obj] = lab.node_objects()
    assert "nvidia.com/gpu" not in obj["status"]["allocatable"] and obj["status"]["allocatable"]["rdma/roce"] == "1"
    assert lab.unadvertised == ["gpu-1: nvidia.com/gpu (unbounded in the model)"]
    assert obj["metadata"]["annotations"] == {lab_stack.KWOK_ANNOTATION: "fake"}
