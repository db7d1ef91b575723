"""What a lab stack's plan gives the control plane on loopback, read from the program itself:

- the API server's own flags: ClusterConfiguration.apiServer.extraArgs of the kubeadm init config the
  plan sends to the first control plane, with the host paths they name (CONFIG_DIR, the audit log)
  moved into the test's folder;
- the files those flags read, made by the functions the program writes them with
  (components/lab/hardening.py: the audit policy, the EncryptionConfiguration with fresh keys under
  the names in hardening.secretsEncryption.keys);
- the networking kubeadm is given (service and pod CIDRs, the cluster name);
- the nodes as the whole-cluster check models them (render/cluster/nodes.py and the check's
  DaemonSet pass: names, labels, taints, and the extended resources the device plugins advertise),
  as Node objects KWOK manages.

Where the model does not size a node (lab hosts declare no CPU or memory) the Node says what KWOK
says for a node of unknown size (cpu 1k, memory 1Ti: its node-initialize stage), so nothing is
refused for a size the config never stated; an extended resource the model leaves unbounded (MIG
slices of an unnamed GPU model) cannot be advertised and is listed in `unadvertised` instead.
"""

from __future__ import annotations

import base64
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.lab import hardening
from config import LabStack
from render import cluster, program
from render.cluster.nodes import Node

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_SELECTOR = f"{KWOK_ANNOTATION}=fake"
UNSIZED_CPU, UNSIZED_MEMORY = "1k", "1Ti"  # KWOK's node-initialize stage, for a node of unknown size
PODS_PER_NODE = "110"  # the kubelet's default maxPods


class StackInputError(RuntimeError):
    """The plan asks the API server for something this control plane cannot give it."""


@dataclass
class LabControlPlane:
    stack: str
    cluster_name: str
    service_cidr: str
    pod_cidr: str
    api_server_args: list[tuple[str, str]]  # as rendered, host paths and all
    audit_policy: dict[str, Any] | None
    encryption_key_names: list[str]
    nodes: list[Node]
    unadvertised: list[str] = field(default_factory=list)

    def write_files(self, folder: Path) -> dict[str, Path]:
        """The files under CONFIG_DIR the program writes on each control plane, in `folder`; returns
        host directory -> where it lies here (the audit log's folder too)."""
        config_dir, log_dir = folder / "gpu-cluster", folder / "audit-log"
        config_dir.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        if self.audit_policy is not None:
            _write(config_dir / Path(hardening.AUDIT_POLICY_FILE).name, self.audit_policy)
        if self.encryption_key_names:
            keys = [(name, base64.b64encode(os.urandom(hardening.ENCRYPTION_KEY_BYTES)).decode())
                    for name in self.encryption_key_names]
            _write(config_dir / Path(hardening.ENCRYPTION_CONFIG_FILE).name, hardening.encryption_config(keys))
        return {hardening.CONFIG_DIR: config_dir, hardening.AUDIT_LOG_DIR: log_dir}

    def local_api_server_args(self, moved: dict[str, Path]) -> list[str]:
        """The rendered flags, each host path replaced by where `write_files` put it."""
        return [f"--{name}={local_path(moved, value, name) if value.startswith('/') else value}"
                for name, value in self.api_server_args]

    def node_objects(self) -> list[dict[str, Any]]:
        self.unadvertised = []
        return [node_object(n, self.unadvertised) for n in self.nodes]


def local_path(moved: dict[str, Path], host_path: str, flag: str = "") -> Path:
    """Where `host_path` (a file the program puts on a control plane) lies here."""
    host_dir = next((d for d in moved if host_path == d or host_path.startswith(d + "/")), None)
    if host_dir is None:
        raise StackInputError(f"apiServer.extraArgs {flag}={host_path}: a host path the loopback control "
                              f"plane does not provide (e2e/lab_stack.py knows {sorted(moved)})")
    return moved[host_dir] / host_path[len(host_dir):].lstrip("/")


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)  # root only, as scripts.control_plane_files writes them


def _quantity(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def node_object(node: Node, unadvertised: list[str]) -> dict[str, Any]:
    """A Node as KWOK manages it (annotation selector), its capacity what the model advertises."""
    resources = {
        "cpu": _quantity(node.cpu) if node.cpu is not None else UNSIZED_CPU,
        "memory": _quantity(node.memory) if node.memory is not None else UNSIZED_MEMORY,
        "pods": PODS_PER_NODE,
    }
    for resource, amount in sorted(node.extended.items()):
        if math.isinf(amount):
            unadvertised.append(f"{node.name}: {resource} (unbounded in the model)")
            continue
        resources[resource] = _quantity(amount)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": dict(node.labels), "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": {"taints": [dict(t) for t in node.taints]},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def _cluster_configuration(plan: program.Plan) -> dict[str, Any]:
    for inputs in (r.inputs for r in plan.resources if r.type == "command:remote:Command"):
        stdin = str(inputs.get("stdin", ""))
        if "InitConfiguration" in stdin:
            for doc in yaml.safe_load_all(stdin):
                if isinstance(doc, dict) and doc.get("kind") == "ClusterConfiguration":
                    return doc
    raise StackInputError(f"the {plan.stack} plan sends no kubeadm ClusterConfiguration")


def from_stack(stack: str = "lab", upstream: Path | None = None,
               config: tuple[dict[str, str], list[str]] | None = None) -> LabControlPlane:
    """Evaluate `stack` (a lab stack) under mocks and run the whole-cluster check on it: its kubeadm
    ClusterConfiguration and the check's node model are what the control plane is made from.
    `config` overrides the stack file, as program.run's does."""
    plan = program.run(stack, config=config)
    cfg = plan.config
    if not isinstance(cfg, LabStack):
        raise StackInputError(f"{stack} is not a lab stack: the loopback control plane is made from kubeadm's config")
    report = cluster.check(plan, cfg, upstream or cluster.upstream_dir())
    if not report.ok:
        raise StackInputError(f"the {stack} plan would not come up:\n  " + "\n  ".join(report.problems))
    doc = _cluster_configuration(plan)
    api_server = doc.get("apiServer") or {}
    args = [(str(a["name"]), str(a["value"])) for a in api_server.get("extraArgs") or []]
    networking = doc.get("networking") or {}
    settings = cfg.hardening
    return LabControlPlane(
        stack=stack,
        cluster_name=str(doc.get("clusterName", "kubernetes")),
        service_cidr=str(networking["serviceSubnet"]),
        pod_cidr=str(networking["podSubnet"]),
        api_server_args=args,
        audit_policy=hardening.audit_policy() if settings.audit_log.enabled else None,
        encryption_key_names=list(settings.secrets_encryption.keys) if settings.secrets_encryption.enabled else [],
        nodes=list(report.modelled),
    )
