"""Keys set to a value that does nothing on this stack: refused, with the reason, rather than ignored.

A user who sets `gpuHealth.ncclCheck.enabled: true` on a platform where the check cannot run expects
a check; silence would leave them believing one guards the cluster. Only a value set on purpose is
refused: an unset key, or one at the default Pulumi.yaml hands every stack, never is.

What is inert where, and why (each from the wiring in stacks/ that ignores it):
* gpuHealth.ncclCheck.enabled true: the pair check runs only with the GPU health service on, no MIG
  or time-slicing (one sweep process per physical GPU), and two or more GPU nodes of equal GPU count
  known by name (stacks/addons.pair_check_nodes): gke's nodes come and go with the autoscaler; dev
  knows a node's count only where gpuNodeGpus declares it.
* gpuHealth.diagnostic on gke: the scheduled diagnostic runs on GPU nodes known by name; gke has
  none (stacks/addons.diag_nodes). Anything but its defaults (or enabled false) is refused there.
* gpu.gate.timeoutMinutes: the gate runs only when enabled and a GPU node exists after `up` (gke:
  every pool's minNodes 0 makes none).
* lab nvidiaDriver.branch/version with gpu.stack operator (not preinstalled): the operator's driver
  container installs the driver; node prep installs none (LabStack.host_installs_driver).
* lab storage.exportPath without storage.provision: only the NFS server the program sets up exports it.
* lab storage.server without storage.provision: the host of that server.
* dev kubeContext with the kubeconfig secret: the provider is given the kubeconfig alone
  (components/dev/existing_cluster.py).
* gke gke.privateNodes.masterCidr with privateNodes.enabled false: a public cluster has no private
  control-plane range.
* monitoring.* with monitoring.enabled false (stacks/addons.py builds no monitoring layer), and
  network.roce.minLinkFraction without acceptance.nccl (the RDMA link test runs before the acceptance
  sweep only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from config.errors import Problems
from config.fields import Model
from config.gpu import GpuStack, SharingMode
from config.health import GpuDiagnostic
from config.lab_hosts import Host
from config.lab_parts import LabStorage, NvidiaDriver

if TYPE_CHECKING:
    from config.addons import Addons


def _pair_check_problems(cfg: Addons, gpu_counts: Mapping[str, int] | None, unknown_why: str) -> Problems:
    """gpuHealth.ncclCheck.enabled true where no pair check would run. `gpu_counts`: GPU node ->
    its GPU count where the platform knows it; None where it knows none (`unknown_why` says why)."""
    if cfg.gpu_health.nccl_check.enabled is not True:
        return []
    key = "gpuHealth.ncclCheck.enabled"
    if not cfg.gpu_health_enabled:
        return [(key, "the NCCL pair check is part of the GPU health service, which is off (gpuHealth.enabled, or "
                      "unset on gke / without an image): turn the service on or leave ncclCheck.enabled unset")]
    if cfg.gpu.sharing.mode is not SharingMode.NONE:
        return [(key, f"no pair check runs with gpu.sharing.mode {cfg.gpu.sharing.mode.value}: it sweeps one process "
                      "per physical GPU; leave ncclCheck.enabled unset or false")]
    if gpu_counts is None:
        return [(key, f"does nothing here: {unknown_why}; leave it unset or false")]
    equal = [n for n in Counter(c for c in gpu_counts.values() if c > 0).values() if n >= 2]
    if not equal:
        counts = ", ".join(f"{node}: {c}" for node, c in sorted(gpu_counts.items())) or "none"
        return [(key, f"does nothing here: the check pairs GPU nodes of equal GPU count and there is no such pair "
                      f"({counts}); leave it unset or false")]
    return []


def _gate_problems(cfg: Addons) -> Problems:
    gate = cfg.gpu.gate
    if gate.timeout_minutes == type(gate)().timeout_minutes:
        return []
    leave = f"leave it at {type(gate)().timeout_minutes}"
    if not gate.enabled:
        return [("gpu.gate.timeoutMinutes", f"does nothing with gpu.gate.enabled false; {leave}")]
    if cfg.gpu_node_count == 0:
        return [("gpu.gate.timeoutMinutes", "does nothing: no GPU node exists after `up`, so the gate does not run "
                                            f"(gke: every pool's autoscaling.minNodes is 0); {leave}")]
    return []


def _set_fields(section: Model, prefix: str, skip: tuple[str, ...] = ()) -> list[str]:
    """The keys of `section` (as `prefix`.camelCase) whose values differ from the section's defaults."""
    default = type(section)()
    return [f"{prefix}.{f.alias or name}" for name, f in type(section).model_fields.items()
            if name not in skip and getattr(section, name) != getattr(default, name)]


def _switched_off_problems(cfg: Addons) -> Problems:
    """Keys of a part that is off, set anyway."""
    problems: Problems = []
    if not cfg.monitoring.enabled:
        problems += [(key, "does nothing with monitoring.enabled false; remove it")
                     for key in _set_fields(cfg.monitoring, "monitoring", ("enabled",))]
    acc, roce = cfg.acceptance, cfg.network.roce
    if roce is not None and not acc.nccl and roce.min_link_fraction != type(roce).model_fields["min_link_fraction"].default:
        problems.append(("network.roce.minLinkFraction", "does nothing without acceptance.nccl: the RDMA link test "
                                                         "runs before the acceptance sweep only"))
    return problems


def inert_lab_problems(cfg: Addons, hosts: Sequence[Host], drv: NvidiaDriver, st: LabStorage) -> Problems:
    problems = _pair_check_problems(cfg, {h.name: h.gpus for h in hosts if h.is_gpu}, "")  # lab knows every count
    problems += _gate_problems(cfg) + _switched_off_problems(cfg)
    if cfg.gpu.stack is GpuStack.OPERATOR and not drv.preinstalled:
        why = ("with gpu.stack operator the GPU Operator's driver container installs the driver, not node prep "
               "(set nvidiaDriver.preinstalled for a driver already on the hosts)")
        if drv.version is not None:
            problems.append(("nvidiaDriver.version", f"does nothing: {why}"))
        if drv.branch != type(drv)().branch:
            problems.append(("nvidiaDriver.branch", f"does nothing: {why}"))
    if not st.provision and st.export_path != type(st)().export_path:
        problems.append(("storage.exportPath", "does nothing without storage.provision: true (it is the directory the "
                                               "program's own NFS server exports)"))
    if not st.provision and st.server is not None:
        problems.append(("storage.server", "does nothing without storage.provision: true (it is the host of the "
                                           "program's own NFS server; an existing export is storage.nfs)"))
    return problems


def inert_dev_problems(cfg: Addons, counts: Mapping[str, int], kube_context: str | None,
                       secrets: frozenset[str]) -> Problems:
    problems = _pair_check_problems(
        cfg, counts if counts else None,
        "dev knows no GPU node's GPU count (declare them: gpuNodeGpus {node: count})")
    problems += _gate_problems(cfg) + _switched_off_problems(cfg)
    if "kubeconfig" in secrets and kube_context:
        problems.append(("kubeContext", "does nothing with the kubeconfig secret set (the provider is given that "
                                        "kubeconfig and its current context): remove one of them"))
    return problems


def inert_gke_problems(cfg: Addons, master_cidr_unused: bool) -> Problems:
    problems = _pair_check_problems(
        cfg, None, "gke's GPU nodes come and go with the autoscaler, so no node's GPU count is known by name")
    problems += _gate_problems(cfg) + _switched_off_problems(cfg)
    diag = cfg.gpu_health.diagnostic
    if cfg.gpu_health_enabled and diag.enabled and diag != GpuDiagnostic():
        problems.append(("gpuHealth.diagnostic", "does nothing on gke: the scheduled diagnostic runs on GPU nodes "
                                                 "known by name, and gke's come and go with the autoscaler; set "
                                                 "diagnostic.enabled false or leave it at its defaults"))
    if master_cidr_unused:
        problems.append(("gke.privateNodes.masterCidr", "does nothing with gke.privateNodes.enabled false (a public "
                                                        "cluster has no private control-plane range)"))
    return problems
