"""The etcd defragmentation scripts with representative settings, for the host-script checks
(shellcheck, every host step file read, no placeholder left: test_host_scripts.py, test_host_step_files.py)."""

from __future__ import annotations

from components.lab import etcd_defrag
from config import LabStack


def etcd_defrag_cases(cfg: LabStack) -> dict[str, str]:
    settings = etcd_defrag.EtcdDefragSettings(node=cfg.control_planes[0].name, kubernetes_minor=cfg.kubernetes_minor)
    return {
        "etcd_defrag": etcd_defrag.defrag_script(settings),
        "etcd_defrag_install": etcd_defrag.install_script(settings),
        "etcd_defrag_remove": etcd_defrag.remove_script(),
    }
