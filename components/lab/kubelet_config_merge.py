#!/usr/bin/env python3
"""The merge of the program's KubeletConfiguration fields into kube-system/kubelet-config, run on
the entry point by host_steps/cluster/kubelet_config_merge.sh (python3 and PyYAML: Ubuntu's
netplan depends on python3-yaml, so every Ubuntu server has both).

stdin: the ConfigMap as `kubectl get -o json` prints it; argv[1]: the fields as JSON (nested
mappings merge key by key, anything else is set). Prints a JSON merge patch for the ConfigMap, or
nothing when every field already has its value. The patch carries the resourceVersion read, so the
API server refuses it (409 Conflict) if someone changed the ConfigMap in between, rather than this
overwriting their change. Every field the document has that the program does not set is kept, as
kubeadm's "Reconfiguring a kubeadm cluster" asks of an edit of this ConfigMap.

Standalone (standard library and PyYAML only): it is copied to the host as it is.
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import yaml

DATA_KEY = "kubelet"  # kubeadm's key for the KubeletConfiguration in the kubelet-config ConfigMap
KIND = "KubeletConfiguration"


def merged(current: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """`current` with every field of `fields` set, mappings merged key by key, nothing dropped."""
    out = copy.deepcopy(current)
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def patch_for(configmap: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that brings `configmap`'s KubeletConfiguration to `fields`, or None."""
    name = configmap.get("metadata", {}).get("name", "kubelet-config")
    text = (configmap.get("data") or {}).get(DATA_KEY)
    if text is None:
        raise ValueError(f"ConfigMap kube-system/{name} has no data.{DATA_KEY}: not written by kubeadm init")
    document = yaml.safe_load(text)
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise ValueError(f"ConfigMap kube-system/{name} data.{DATA_KEY} is not a {KIND}")
    wanted = merged(document, fields)
    if wanted == document:
        return None
    return {"metadata": {"resourceVersion": configmap["metadata"]["resourceVersion"]},
            "data": {DATA_KEY: yaml.safe_dump(wanted, sort_keys=False, default_flow_style=False)}}


def main(argv: list[str]) -> int:
    try:
        patch = patch_for(json.load(sys.stdin), json.loads(argv[1]))
    except (ValueError, KeyError, yaml.YAMLError) as err:
        print(f"kubelet-config: {err}", file=sys.stderr)
        return 2
    if patch is not None:
        print(json.dumps(patch, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
