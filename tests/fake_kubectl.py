#!/usr/bin/env python3
"""A stand-in for kubectl in the host sandbox (tests/hostsim.py): the few API objects the lab's host
scripts touch, kept in a JSON file, so that drain, uncordon, the upgrade slots and the etcd
snapshot can be run for real against something that remembers.

State (sim/state/k8s.json, written by HostSim.k8s_node / read by HostSim.k8s):
  nodes       name -> {kubeletVersion, unschedulable, annotations, labels, bootID, allocatable,
                       ready, deleted}; a node the file does not name exists with empty fields
  configmaps  kube-system name -> data (configmapVersions: name -> resourceVersion, 1 if unset)
  etcdMembers [{id, name, address}]: what `exec etcd-<node> -- etcdctl member list/remove` sees
  drainFails, etcdSnapshotFails   make those calls fail; etcdSnapshotDamaged: a snapshot whose SHA-256 is wrong
  etcdSnapshotFrom   a file `exec ... etcdctl snapshot save` copies (a real snapshot); without it, pages
                     of text with their right SHA-256 appended (no etcd database)
`get node X` first fails (NotFound) as many times as sim/state/kubectl-get-node-failures says, as
while a joined kubelet has not registered its Node yet.

Every call is logged to sim/calls.log exactly as the shell stand-ins log theirs. Run only inside
the sandbox (HostSim writes this file's path as sim/bin/kubectl, with the sim directory below).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

SIM = Path("@SIM@")
STATE = SIM / "state" / "k8s.json"
FAILURES = SIM / "state" / "kubectl-get-node-failures"


def log(argv: list[str]) -> None:
    with open(SIM / "calls.log", "a", encoding="utf-8") as f:
        f.write("".join(a + "\x1f" for a in ["kubectl", *argv]) + "\x1e\n")


def load() -> dict[str, Any]:
    if STATE.exists():
        state: dict[str, Any] = json.loads(STATE.read_text())
    else:
        state = {}
    state.setdefault("nodes", {})
    state.setdefault("configmaps", {})
    return state


def save(state: dict[str, Any]) -> None:
    # Replace, never rewrite in place: a concurrent reader sees the old state or the new, not half.
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, STATE)


def node_of(state: dict[str, Any], name: str) -> dict[str, Any]:
    node = state["nodes"].setdefault(name, {})
    for key in ("annotations", "labels", "allocatable"):
        node.setdefault(key, {})
    return node


def as_object(name: str, node: dict[str, Any]) -> dict[str, Any]:
    """The Node as the API shows it (only the fields the scripts read)."""
    spec = {"unschedulable": True} if node.get("unschedulable") else {}
    return {
        "metadata": {"name": name, "annotations": node["annotations"], "labels": node["labels"]},
        "spec": spec,
        "status": {
            "nodeInfo": {"kubeletVersion": node.get("kubeletVersion", ""), "bootID": node.get("bootID", "")},
            "allocatable": node["allocatable"],
        },
    }


def jsonpath(obj: dict[str, Any], expr: str) -> str:
    """`{.a.b\\.c}`: one field, dots in names escaped; '' when absent; booleans as kubectl prints them."""
    m = re.fullmatch(r"\{\.(.*)\}", expr)
    if not m:
        raise SystemExit(f"fake kubectl: unsupported jsonpath {expr!r}")
    value: Any = obj
    for part in re.split(r"(?<!\\)\.", m.group(1)):
        value = value.get(part.replace("\\.", ".")) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def fail(message: str, code: int = 1) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(code)


def main(argv: list[str]) -> None:
    log(argv)
    args: list[str] = []
    output = ""
    selector = ""
    rest: list[str] = []
    it = iter(range(len(argv)))
    for i in it:
        a = argv[i]
        if a == "--":
            rest = argv[i + 1:]
            break
        if a in ("--kubeconfig", "-n", "--namespace"):
            next(it, None)
        elif a in ("-l", "--selector"):
            selector = argv[i + 1]
            next(it, None)
        elif a.startswith(("--kubeconfig=", "--namespace=")):
            pass
        elif a in ("-o", "--output"):
            output = argv[i + 1]
            next(it, None)
        elif a.startswith("-o="):
            output = a[3:]
        else:
            args.append(a)
    flags = [a for a in args if a.startswith("-")]
    words = [a for a in args if not a.startswith("-")]
    state = load()
    verb = words[0] if words else ""

    if verb == "get" and any(f.startswith("--raw") for f in flags):
        print("ok")
    elif verb == "get" and words[1:2] == ["nodes"] and selector:
        # The listing of nodes with a label: name=kubeletVersion per line.
        for name, node in sorted(state["nodes"].items()):
            if selector in node.get("labels", {}) and not node.get("deleted"):
                print(f"{name}={node.get('kubeletVersion', '')}")
    elif verb == "get" and words[1:] == ["nodes"]:
        # Every node: name=kubeletVersion per line.
        for name, node in sorted(state["nodes"].items()):
            if not node.get("deleted"):
                print(f"{name}={node.get('kubeletVersion', '')}")
    elif verb == "get" and words[1:2] in (["node"], ["nodes"]):
        name = words[2]
        left = int(FAILURES.read_text()) if FAILURES.exists() else 0
        if left > 0:
            FAILURES.write_text(f"{left - 1}\n")
            fail(f'Error from server (NotFound): nodes "{name}" not found')
        node = node_of(state, name)
        if node.get("deleted"):
            if "--ignore-not-found" in flags:
                return
            fail(f'Error from server (NotFound): nodes "{name}" not found')
        if output == "name":
            print(f"node/{name}")
        elif output.startswith("jsonpath="):
            print(jsonpath(as_object(name, node), output[len("jsonpath="):]), end="")
        else:
            print(f"{name}   Ready   <none>   1d   {node.get('kubeletVersion', '')}")
    elif verb == "get" and words[1:2] == ["configmap"] and len(words) == 3 and output == "json":
        name = words[2]
        if name not in state["configmaps"]:
            fail(f'Error from server (NotFound): configmaps "{name}" not found')
        print(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "data": state["configmaps"][name],
                          "metadata": {"name": name, "namespace": "kube-system",
                                       "resourceVersion": str(state.get("configmapVersions", {}).get(name, 1))}}))
    elif verb == "patch" and words[1:2] == ["configmap"] and "merge" in words:
        # A JSON merge patch of data; a resourceVersion other than the stored one is a conflict.
        name, patch = words[2], json.loads(argv[argv.index("-p") + 1])
        versions = state.setdefault("configmapVersions", {})
        want = patch.get("metadata", {}).get("resourceVersion")
        if want is not None and want != str(versions.get(name, 1)):
            fail(f'Error from server (Conflict): Operation cannot be fulfilled on configmaps "{name}": '
                 "the object has been modified; please apply your changes to the latest version and try again")
        state["configmaps"][name].update(patch.get("data", {}))
        versions[name] = versions.get(name, 1) + 1
        print(f"configmap/{name} patched")
    elif verb == "get" and words[1:2] in (["configmaps"], ["configmap"], ["cm"]):
        if "range" not in output:
            fail("fake kubectl: only the configmap listing is supported")
        for name, data in sorted(state["configmaps"].items()):
            print(f"{name}={data.get('node', '')}")
    elif verb == "create" and words[1:2] == ["configmap"]:
        name = words[2]
        if name in state["configmaps"]:
            fail(f'error: failed to create configmap: configmaps "{name}" already exists')
        data = dict(f.split("=", 1)[1].split("=", 1) for f in flags if f.startswith("--from-literal="))
        state["configmaps"][name] = data
        print(f"configmap/{name} created")
    elif verb == "delete" and words[1:2] == ["configmap"]:
        if words[2] not in state["configmaps"] and "--ignore-not-found" not in flags:
            fail(f'Error from server (NotFound): configmaps "{words[2]}" not found')
        state["configmaps"].pop(words[2], None)
    elif verb == "delete" and words[1:2] == ["node"]:
        node_of(state, words[2])["deleted"] = True
    elif verb == "annotate" and words[1:2] == ["node"]:
        node = node_of(state, words[2])
        for change in words[3:]:
            if change.endswith("-"):
                node["annotations"].pop(change[:-1], None)
            else:
                key, _, value = change.partition("=")
                if key in node["annotations"] and "--overwrite" not in flags:
                    fail(f"error: '{key}' already has a value; --overwrite is false")
                node["annotations"][key] = value
    elif verb in ("cordon", "drain"):
        if verb == "drain" and state.get("drainFails"):
            fail(f"error: cannot evict pod as it would violate the pod's disruption budget (node {words[1]})")
        node_of(state, words[1])["unschedulable"] = True
        print(f"node/{words[1]} {'cordoned' if verb == 'cordon' else 'drained'}")
    elif verb == "uncordon":
        node_of(state, words[1])["unschedulable"] = False
        print(f"node/{words[1]} uncordoned")
    elif verb == "wait":
        target = words[1]
        node = node_of(state, target.split("/", 1)[1])
        if not node.get("ready", True):
            fail(f"error: timed out waiting for the condition on {target}")
        print(f"{target} condition met")
    elif verb == "exec":
        if rest[:1] == ["etcdctl"] and "snapshot" in rest and "save" in rest:
            if state.get("etcdSnapshotFails"):
                fail("Error: context deadline exceeded")
            path = Path(rest[rest.index("save") + 1])
            if state.get("etcdSnapshotFrom") and not state.get("etcdSnapshotDamaged"):
                path.write_bytes(Path(state["etcdSnapshotFrom"]).read_bytes())
            else:
                # etcdctl's file layout: a database of whole pages, then its SHA-256 (a wrong one with
                # etcdSnapshotDamaged, as after a bit flip on the way to the disk).
                database = f"fake etcd snapshot taken in {words[1]}\n".encode().ljust(4 * 4096, b"\0")
                digest = hashlib.sha256(database + (b"!" if state.get("etcdSnapshotDamaged") else b"")).digest()
                path.write_bytes(database + digest)
            print(f"Snapshot saved at {path}")
        elif rest[:1] == ["etcdctl"] and "member" in rest:
            members = state.setdefault("etcdMembers", [])
            sub = rest[rest.index("member") + 1:]
            if sub[:1] == ["list"]:  # etcdctl's simple format: id, status, name, peer URLs, client URLs, learner
                for m in members:
                    print(f"{m['id']}, started, {m['name']}, https://{m['address']}:2380, "
                          f"https://{m['address']}:2379, false")
            elif sub[:1] == ["remove"] and any(m["id"] == sub[1] for m in members):
                state["etcdMembers"] = [m for m in members if m["id"] != sub[1]]
                print(f"Member {sub[1]} removed from cluster")
            else:
                fail(f"Error: etcdserver: member not found ({sub})")
        else:
            fail(f"fake kubectl: unsupported exec {rest}")
    # Anything else (the join scripts' own kubectl calls) succeeds and prints nothing.
    save(state)


if __name__ == "__main__":
    # One request at a time, as the API server applies each atomically: the scripts run kubectl in
    # parallel (drains in the background), and a load-modify-save here must not lose an update.
    with open(SIM / "state" / "k8s.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        main(sys.argv[1:])
