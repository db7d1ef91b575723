"""The certificate scripts with representative arguments, for test_host_scripts' shared cases
(shellcheck, the sandbox) and test_host_step_files (every file used)."""

from __future__ import annotations

from components.lab import certificates
from config import LabStack


def certificate_cases(cfg: LabStack) -> dict[str, str]:
    first = cfg.control_planes[0]
    return {
        "certificates_check_renew": certificates.renewal_script("2026-W48", first, cfg.control_planes),
        "certificate_expiry": certificates.expiry_script(first.name),
        "certificate_expiry_install": certificates.expiry_install_script(first.name),
        "certificate_expiry_remove": certificates.expiry_remove_script(),
    }
