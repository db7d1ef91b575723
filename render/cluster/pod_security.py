"""Pod Security Standards (baseline and restricted), as the PodSecurity admission controller
enforces them (kubernetes/pod-security-admission, policy/check_*.go; the "latest" version of each
check for each Kubernetes minor of MODELLED_MINORS).

`violations(pod_spec, pod_metadata, level)` lists what a pod template breaks at `level`;
privileged admits everything.
"""

from __future__ import annotations

from typing import Any

# The Kubernetes minors whose policy/check_*.go this model follows, declared once.
# tests/render/test_model_versions.py fails when components/versions.py supports other minors,
# until the checks are re-read for them and this is updated.
MODELLED_MINORS = ("1.31", "1.32", "1.33", "1.34", "1.35")
LEVELS = ("privileged", "baseline", "restricted")
LEVEL_LABEL = "pod-security.kubernetes.io/enforce"

# check_capabilities_baseline.go
_BASELINE_CAPS = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}
# check_sysctls.go (1.32+ adds tcp_rmem / tcp_wmem)
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
}
# check_seLinuxOptions.go
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# check_restrictedVolumes.go
_RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                       "projected", "secret", "image"}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or [])]


def _baseline(spec: dict[str, Any], metadata: dict[str, Any]) -> list[str]:
    out: list[str] = []
    psc = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"{field}=true")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("hostProcess")
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            out.append(f"hostPath volume {v.get('name')} ({v['hostPath'].get('path')})")
    if (psc.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("pod seccompProfile Unconfined")
    if (psc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append("pod appArmorProfile Unconfined")
    se = psc.get("seLinuxOptions") or {}
    if se.get("type", "") not in _SELINUX_TYPES or se.get("user") or se.get("role"):
        out.append("pod seLinuxOptions")
    for s in psc.get("sysctls") or []:
        if s.get("name") not in _SAFE_SYSCTLS:
            out.append(f"sysctl {s.get('name')}")
    for key, value in ((metadata or {}).get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or str(value).startswith("localhost/")
        ):
            out.append(f"AppArmor annotation {key}={value}")
    for c in _containers(spec):
        name = c.get("name")
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"container {name} privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"container {name} hostProcess")
        added = set((sc.get("capabilities") or {}).get("add") or []) - _BASELINE_CAPS
        if added:
            out.append(f"container {name} adds capabilities {', '.join(sorted(added))}")
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(f"container {name} hostPort {p['hostPort']}")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"container {name} procMount {sc['procMount']}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"container {name} seccompProfile Unconfined")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"container {name} appArmorProfile Unconfined")
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in _SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(f"container {name} seLinuxOptions")
    return out


def _restricted(spec: dict[str, Any]) -> list[str]:
    out: list[str] = []
    psc = spec.get("securityContext") or {}
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            out.append(f"volume {v.get('name')} of type {', '.join(sorted(kinds))}")
    pod_non_root = psc.get("runAsNonRoot")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if psc.get("runAsUser") == 0:
        out.append("pod runAsUser=0")
    containers = _containers(spec)
    for c in containers:
        name = c.get("name")
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"container {name} allowPrivilegeEscalation != false")
        non_root = sc.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            out.append(f"container {name} runAsNonRoot != true")
        if sc.get("runAsUser") == 0:
            out.append(f"container {name} runAsUser=0")
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"container {name} seccompProfile not RuntimeDefault/Localhost")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"container {name} does not drop ALL capabilities")
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            out.append(f"container {name} adds capabilities {', '.join(sorted(extra))}")
    return out


def violations(spec: dict[str, Any], metadata: dict[str, Any] | None, level: str) -> list[str]:
    """What the pod template breaks at `level` (privileged, baseline or restricted)."""
    if level == "privileged":
        return []
    found = _baseline(spec, metadata or {})
    if level == "restricted":
        found += _restricted(spec)
    return found
