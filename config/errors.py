"""ConfigError: every bad key of a stack config, each named as `pulumi config` names it.

Keys of this program's namespace are shown as `gpu-cluster:<path>` (`gpu-cluster:hosts[1].address`);
the Google Cloud provider's own keys (`gcp:project`, `gcp:region`) as they are. Each line ends with
the docs page that explains the key (DOC_PAGES).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pulumi

NAMESPACE = "gpu-cluster"

# (key without the namespace, what is wrong with it), in the order found.
Problems = list[tuple[str, str]]

REFERENCE_PAGE = "docs/reference/config.md"
_ENDS_WITH_PAGE = re.compile(r"\(docs/[\w/.-]+\.md(#[\w-]+)?\)$")
# The page that explains each top-level key (and every key under it), from the project root, with
# the anchor (MkDocs' heading id) of its section where the page has one. A key no page explains
# better than its row in the reference links the reference's section of it; a key no model has
# (refused as unknown) the reference itself. tests/config/test_refusal_links.py holds every key of
# every platform's model, and every secret, to a page and heading that exist.
DOC_PAGES: dict[str, str] = {
    "platform": "docs/configuration.md",
    "kubernetesVersion": "docs/operations/upgrading.md",
    "gpu": "docs/gpu-software.md",
    "monitoring": "docs/monitoring.md",
    "training": "docs/training.md",
    "acceptance": "docs/training.md#nccl-acceptance",
    "network": "docs/rdma.md",
    "wandb": "docs/wandb.md",
    "wandbApiKey": "docs/wandb.md",
    "gpuHealth": "docs/gpu-health.md",
    "queues": "docs/queues.md",
    "chartsDir": "docs/getting-started/index.md#air-gapped-installs",
    # lab
    "hosts": "docs/getting-started/lab.md",
    "bastion": "docs/getting-started/lab.md",
    "sshPrivateKey": "docs/getting-started/lab.md",
    "controlPlaneEndpoint": "docs/operations/high-availability.md#one-address-for-the-api-kubevip-or-your-load-balancer",
    "kubeVip": "docs/operations/high-availability.md#one-address-for-the-api-kubevip-or-your-load-balancer",
    "podCidr": f"{REFERENCE_PAGE}#gpu-clusterpodcidr",
    "serviceCidr": f"{REFERENCE_PAGE}#gpu-clusterservicecidr",
    "cni": "docs/network-policies.md#who-enforces-them",
    "containerdVersion": f"{REFERENCE_PAGE}#gpu-clustercontainerdversion",
    "nvidiaDriver": "docs/gpu-software.md",
    "gpuTaint": "docs/scheduling.md",
    "storage": "docs/training.md#shared-storage",
    "maxUnavailable": "docs/operations/upgrading.md#nodes-at-once",
    "hardening": "docs/security/hardening.md",
    "allowRebuild": "docs/operations/rebuilding.md#rebuilding-on-purpose",
    "etcdBackup": "docs/operations/etcd-backup.md",
    "etcdBackupS3AccessKeyId": "docs/operations/etcd-backup.md#off-the-host-an-s3-bucket",
    "etcdBackupS3SecretAccessKey": "docs/operations/etcd-backup.md#off-the-host-an-s3-bucket",
    "etcdBackupEncryptionKey": "docs/operations/etcd-backup.md#off-the-host-an-s3-bucket",
    # dev
    "kubeContext": "docs/getting-started/dev.md",
    "kubeconfig": "docs/getting-started/dev.md",
    "gpuNodes": "docs/getting-started/dev.md",
    "gpuNodeGpus": f"{REFERENCE_PAGE}#gpu-clustergpunodegpus",
    "nodeCidr": f"{REFERENCE_PAGE}#gpu-clusternodecidr",
    "clusterCni": "docs/network-policies.md#who-enforces-them",
    # gke
    "gke": "docs/getting-started/gke.md",
    "gcp:project": "docs/getting-started/gke.md",
    "gcp:region": "docs/getting-started/gke.md",
}


class ConfigError(pulumi.RunError):
    """A stack config error: one line per bad key, each naming the key. Pulumi prints it without a
    traceback (it is a `pulumi.RunError`)."""

    def __init__(self, problems: Problems):
        self.problems = problems
        lines = [self.refusal(key, message) for key, message in problems]
        super().__init__("invalid stack configuration:\n  " + "\n  ".join(lines))

    @classmethod
    def refusal(cls, key: str, message: str) -> str:
        """One refusal: the key, what is wrong, and the page that explains the key, unless the
        message already ends with the page of its own case (a rebuild: docs/operations/rebuilding.md)."""
        page = "" if _ENDS_WITH_PAGE.search(message) else f" ({doc_page(key)})"
        return f"{cls.qualified_key(key)}: {message}{page}"

    @staticmethod
    def qualified_key(key: str) -> str:
        """The key as `pulumi config` names it: gcp: keys as they are, every other under gpu-cluster:."""
        return key if key.startswith("gcp:") else f"{NAMESPACE}:{key}"


def doc_page(key: str) -> str:
    """The page (and section) that explains key: its top-level key's (queues.teams[0].gpus: queues)."""
    top = re.split(r"[.\[]", key, maxsplit=1)[0]
    return DOC_PAGES.get(top, REFERENCE_PAGE)


def key_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a config key path: ('hosts', 1, 'address') -> hosts[1].address."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def describe(err: Mapping[str, Any]) -> str:
    """What a pydantic error says, in the words of a config message."""
    kind = err.get("type", "")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known key"  # the line links the reference (DOC_PAGES), which lists every key
    if kind == "enum":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"must be one of {allowed} (got {err.get('input')!r})"
    msg = str(err.get("msg", "is invalid"))
    return msg.removeprefix("Value error, ")
