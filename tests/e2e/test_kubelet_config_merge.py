"""The kubelet-config merge (components/lab/kubelet_config_merge.py, the program the entry point
runs in host_steps/cluster/kubelet_config_merge.sh) against the real API server of the e2e tier: a
ConfigMap laid out as kubeadm init writes kube-system/kubelet-config for a cluster of an earlier
version (no serverTLSBootstrap, no protectKernelDefaults, a user's own field), in a namespace of
this test's own. The program reads what the API server returns and its merge patch is sent as the
script's `kubectl patch --type merge` sends it; the real kubeadm then reads the merged document.
The sandbox runs the whole script: tests/components/lab/test_kubelet_config_rollout.py."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from components.lab import kubeadm, kubelet_config
from components.toolchain_versions import KUBERNETES
from stacks.lab import kubeadm_settings
from tests.components.lab.test_kubelet_config_rollout import OLD_DOCUMENT
from tests.conftest import lab_config
from tests.toolchain import toolchain_binary

CLUSTER = kubeadm_settings(lab_config())
TIMEOUT = 30  # seconds per run of the merge program or kubeadm
MERGE_PATCH = "application/merge-patch+json"  # what `kubectl patch --type merge` sends


def merge_patch(configmap: dict) -> str:
    result = subprocess.run([sys.executable, str(kubelet_config.MERGE_SOURCE), kubelet_config.fields_json(CLUSTER)],
                            input=json.dumps(configmap), capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_merge_against_the_real_api_server(client, namespace, tmp_path) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    client.create(path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubelet-config"},
                         "data": {"kubelet": OLD_DOCUMENT}})
    read = client.get(f"{path}/kubelet-config")
    patch = merge_patch(read)
    assert patch, "an old document needs the program's fields"
    # A write made in between the read and this patch: the API server refuses the stale patch (409).
    client.must("PATCH", f"{path}/kubelet-config", {"metadata": {"labels": {"edited": "meanwhile"}}}, MERGE_PATCH)
    stale = client.request("PATCH", f"{path}/kubelet-config", json.loads(patch), MERGE_PATCH)
    assert stale.status == 409, stale
    # Read again (as the script does) and write.
    patch = merge_patch(client.get(f"{path}/kubelet-config"))
    client.must("PATCH", f"{path}/kubelet-config", json.loads(patch), MERGE_PATCH)
    stored = client.get(f"{path}/kubelet-config")
    doc = yaml.safe_load(stored["data"]["kubelet"])
    assert doc["serverTLSBootstrap"] is True and doc["protectKernelDefaults"] is True
    assert doc["maxPods"] == 250 and doc["authentication"]["webhook"]["cacheTTL"] == "0s"  # the user's, kept
    assert stored["metadata"]["labels"] == {"edited": "meanwhile"}
    # A second run: nothing to write.
    assert merge_patch(stored) == ""
    # The real kubeadm reads the merged document beside the program's Init- and ClusterConfiguration.
    init, cluster, _ = yaml.safe_load_all(kubeadm.init_config(CLUSTER, lab_config().entry_point))
    config = tmp_path / "kubeadm.yaml"
    config.write_text(yaml.safe_dump_all([init, cluster, doc], sort_keys=False))
    validated = subprocess.run([str(toolchain_binary(KUBERNETES, "kubeadm")), "config", "validate", "--config",
                                str(config)], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert validated.returncode == 0 and validated.stdout.strip() == "ok", validated.stdout + validated.stderr
    assert validated.stderr.strip() == "", validated.stderr  # a warning (an unknown field) is a finding too
