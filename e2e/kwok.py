"""KWOK's controller (sigs.k8s.io/kwok, the toolchain's version) for the fake nodes: it manages only
the Nodes annotated kwok.x-k8s.io/node=fake, and moves them and their pods through KWOK's own
stages, read from the module the toolchain built kwok from (kustomize/stage in its module cache
folder, each folder's kustomization.yaml naming the files):

  node/fast                  node-initialize: the Node's conditions Ready, its addresses and nodeInfo
  node/heartbeat-with-lease  the Node's heartbeat, with the Lease KWOK renews (node-lease-duration)
  pod/general                pods created, init containers run, Ready; Job pods Succeeded; deletion

The kwok binary, run standalone, has no default stages (kwokctl embeds them); without them it
starts and does nothing, so they are passed through --config.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from components.toolchain_versions import KWOK, ToolchainComponent

STAGE_FOLDERS = ("node/fast", "node/heartbeat-with-lease", "pod/general")
# How long a node's Lease lasts: kwokctl's default (pkg/config/vars.go), well under the controller
# manager's node-monitor-grace-period, so the nodes stay Ready.
NODE_LEASE_SECONDS = 40
GO_ENV_TIMEOUT = 30


class StagesMissing(RuntimeError):
    pass


def module_cache() -> Path:
    """Go's module cache (`go env GOMODCACHE`), where the toolchain's build left the module."""
    go = shutil.which("go")
    if go:
        result = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True,
                                timeout=GO_ENV_TIMEOUT, check=False)
        if result.returncode == 0 and result.stdout.strip():
            return Path(result.stdout.strip())
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    return Path(gopath.split(os.pathsep)[0]) / "pkg" / "mod"


def stage_folder(component: ToolchainComponent = KWOK) -> Path:
    return module_cache() / f"{component.module}@{component.module_version}" / "kustomize" / "stage"


def stages(component: ToolchainComponent = KWOK) -> list[dict]:
    """The Stage documents of STAGE_FOLDERS, in their kustomizations' order."""
    root = stage_folder(component)
    if not root.is_dir():
        raise StagesMissing(f"KWOK's stages are not at {root}: the toolchain builds kwok from that module "
                            f"(make toolchain TOOLCHAIN=kwok)")
    docs = []
    for folder in STAGE_FOLDERS:
        kustomization = yaml.safe_load((root / folder / "kustomization.yaml").read_text())
        for name in kustomization["resources"]:
            for doc in yaml.safe_load_all((root / folder / name).read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "Stage":
                    docs.append(doc)
    return docs


def write_config(path: Path, component: ToolchainComponent = KWOK) -> Path:
    path.write_text(yaml.safe_dump_all(stages(component), sort_keys=False))
    return path


def argv(binary: Path, kubeconfig: Path, config: Path, server_port: int, annotation_selector: str) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={annotation_selector}",
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
        # its /healthz, on loopback only (plain HTTP: no certificate given)
        f"--server-address=127.0.0.1:{server_port}",
    ]
