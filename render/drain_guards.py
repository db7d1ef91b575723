"""When a lab update script that can drain a node actually drains it, read from the script's text.

A `!!` line for every update that re-runs a script containing a drain cries wolf: most of the lab's
scripts drain only when the host differs from what the script names. The scripts are the shell files
in components/lab/host_steps/ (filled by components/lab/scripts.py); what this module reads in them:

  upgrade scripts (the ones carrying host_steps/lib/upgrade_helpers.sh: kubeadm_upgrade_apply,
  node_self_upgrade, node_upgrade_drain, nvidia_driver_self_upgrade) call drain_node only when the
  host's kubelet or kubectl is not `want` (at the package revision `$want-<rev>`), or its NVIDIA
  driver is not `pkg`/`branch` (at `want_driver`); otherwise they say "nothing to upgrade" or "is
  installed" and exit. So when these values are the same in the older script and the new one, the
  host already runs them (the older config installed them) and the re-run drains nothing.
  membership drain (host_steps/cluster/drain_removed_nodes.sh) drains the members the control plane
  recorded (the older list, `want=(...)`) that are not in the new list: the hosts that left or
  changed address, none when none did.

The marks that recognise each script are taken from those files (the helpers' first line, the member
file's path), so a change there moves them too. Assumed, as in the rest of the preview: the cluster is
what the older config deployed. A script this module does not recognise (another program version's)
keeps its `!!` line. tests/render/test_drain_guards.py holds this to the scripts: it runs them in the
host sandbox.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from components.lab import host_steps, scripts

# The helpers every upgrade script carries (host_steps/lib/upgrade_helpers.sh), known by their first
# line; their drain_node is called only behind a version comparison.
UPGRADE_HELPERS_MARK = host_steps.read("lib/upgrade_helpers.sh").splitlines()[0]
_UPGRADE_SCRIPT = re.compile(f"^{re.escape(UPGRADE_HELPERS_MARK)}$", re.MULTILINE)
NODE_DRAIN = re.compile(r"^\s*drain_node\s", re.MULTILINE)
# The values the drain condition compares with the host, and the config key each comes from.
_VERSION_VALUES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("want", "kubernetesVersion", re.compile(r"^\s*want=([0-9][^\s()]*)$", re.MULTILINE)),
    ("revision", "the kube package revision (components/versions.py)", re.compile(r"\$want-([0-9][^\"\s}]*)")),
    ("branch", "nvidiaDriver.branch", re.compile(r"^\s*branch=([0-9]+)$", re.MULTILINE)),
    ("pkg", "nvidiaDriver.branch", re.compile(r"^\s*pkg=(nvidia-driver-[0-9]+-server)$", re.MULTILINE)),
    ("want_driver", "nvidiaDriver.version", re.compile(r"^\s*want_driver=(\S+)$", re.MULTILINE)),
)
# scripts.drain_removed_nodes: the member list, "name address" per host, kept in scripts.MEMBERS_FILE.
_MEMBERS_SCRIPT = re.compile(rf"^\s*members={re.escape(scripts.MEMBERS_FILE)}$", re.MULTILINE)
_MEMBERS = re.compile(r"^\s*want=\((.*)\)$", re.MULTILINE)


@dataclass(frozen=True)
class Verdict:
    """What a re-run of a recognised script does: `drains` (a `!!` line, saying why) or only
    `drains_if` (a condition the older config already meets)."""

    drains: str = ""
    drains_if: str = ""


def version_values(script: str) -> dict[str, str] | None:
    """The versions an upgrade script's drain compares with the host; None for another script."""
    if not _UPGRADE_SCRIPT.search(script) or not NODE_DRAIN.search(script):
        return None
    values = {}
    for name, _key, pattern in _VERSION_VALUES:
        found = pattern.search(script)
        if found:
            values[name] = found.group(1)
    return values


def members(script: str) -> list[str] | None:
    """The host list of a membership drain script ("name address" each); None for another script."""
    if not _MEMBERS_SCRIPT.search(script):
        return None
    found = _MEMBERS.search(script)
    return shlex.split(found.group(1)) if found else None


def _describe(values: dict[str, str]) -> str:
    parts = []
    if "want" in values:
        parts.append(f"kubelet/kubectl v{values['want']}" + (f" (package {values['want']}-{values['revision']})"
                                                             if "revision" in values else ""))
    if "pkg" in values:
        exact = values.get("want_driver", "''")
        parts.append(values["pkg"] + ("" if exact in ("''", '""') else f"={exact}"))
    return " and ".join(parts) or "the versions it names"


def rerun(old_script: object, new_script: object) -> Verdict | None:
    """The verdict on re-running `new_script` on a host the older `old_script` ran on, or None when
    either is not a script this module recognises (the caller keeps its `!!` line)."""
    if not isinstance(old_script, str) or not isinstance(new_script, str):
        return None
    before, after = version_values(old_script), version_values(new_script)
    if before is not None and after is not None:
        changed: dict[str, str] = {}  # config key -> its change (branch and pkg name one key)
        for name, key, _ in _VERSION_VALUES:
            if before.get(name) != after.get(name):
                changed.setdefault(key, f"{key} {before.get(name, '-')} -> {after.get(name, '-')}")
        if changed:
            return Verdict(drains="the node is drained for " + ", ".join(changed.values()))
        return Verdict(drains_if=f"drains if the host does not run {_describe(after)}; the older config installed "
                                 "those, so it finds nothing to upgrade")
    old_members, new_members = members(old_script), members(new_script)
    if old_members is not None and new_members is not None:
        gone = [m.split(" ", 1)[0] for m in old_members if m not in new_members]
        if gone:
            return Verdict(drains=f"drains and deletes {', '.join(gone)} (left the host list or changed address)")
        return Verdict(drains_if="drains if a host left the list or changed address; none did")
    return None
