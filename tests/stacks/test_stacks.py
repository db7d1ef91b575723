"""Smoke tests of the real program: __main__.py evaluated per committed stack (and for generated lab
configs) under the recording mocks, then checked on what it registers and how it is wired."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from functools import cache

import pytest

from render import program
from render.program import SECRET_MARKER, Plan, Registration
from tests.conftest import host

COMMAND = "command:remote:Command"
NODE_PREP = "gpucluster:lab:NodePrep"
NODE_JOIN = "gpucluster:lab:NodeJoin"


def lab_values(hosts: list[dict]) -> tuple[dict[str, str], list[str]]:
    """A generated lab config in the form render.program.stack_config returns."""
    values = {
        "gpu-cluster:platform": "lab",
        "gpu-cluster:hosts": json.dumps(hosts),
        "gpu-cluster:sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key\n",
    }
    return values, ["gpu-cluster:sshPrivateKey"]


def gpu_lab(workers: int, **changed_addresses: str) -> tuple[dict[str, str], list[str]]:
    """One control plane and `workers` GPU workers (gpu-1...); addresses overridable by name."""
    hosts = [host("cp-1", "192.0.2.10", "control-plane")]
    hosts += [host(f"gpu-{i}", f"192.0.2.{10 + i}", gpus=8) for i in range(1, workers + 1)]
    for h in hosts:
        h["address"] = changed_addresses.get(h["name"].replace("-", "_"), h["address"])
    return lab_values(hosts)


@cache
def committed(stack: str) -> Plan:
    return program.run(stack)


def short(urn: str) -> str:
    return urn.split("::")[-1]


def children(plan: Plan, parent: Registration) -> list[Registration]:
    return [r for r in plan.resources if r.parent == parent.urn]


def owned_commands(plan: Plan, type_: str, name: str) -> set[str]:
    """URNs of the remote commands of the component `name` of type `type_`."""
    (component,) = [r for r in plan.resources if r.type == type_ and r.name == name]
    return {r.urn for r in children(plan, component) if r.type == COMMAND}


# ---------------------------------------------------------------------------------------------
# The dependency graph as the engine orders it


def dependency_graph(plan: Plan) -> dict[str, set[str]]:
    """URN -> URNs it waits for. Beyond the recorded dependencies: depending on a component means
    waiting for all of its descendants; a resource waits for its explicit provider; and a child
    waits for what its parent waits for (the parent is registered only after those)."""
    by_urn = {r.urn: r for r in plan.resources}
    kids: dict[str, list[str]] = {}
    for r in plan.resources:
        kids.setdefault(r.parent, []).append(r.urn)

    def descendants(urn: str) -> set[str]:
        out: set[str] = set()
        for kid in kids.get(urn, []):
            out |= {kid} | descendants(kid)
        return out

    def own(r: Registration) -> set[str]:
        edges = set(r.dependencies)
        if r.provider:
            edges.add(r.provider.rsplit("::", 1)[0])  # "<urn>::<id>"
        for dep in list(edges):
            edges |= descendants(dep)
        return edges

    graph: dict[str, set[str]] = {}
    for r in plan.resources:
        edges = own(r)
        parent = by_urn.get(r.parent)
        while parent is not None:
            edges |= own(parent)
            parent = by_urn.get(parent.parent)
        graph[r.urn] = {e for e in edges if e in by_urn}
    return graph


def transitive(graph: dict[str, set[str]], urn: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[urn])
    while todo:
        u = todo.pop()
        if u not in seen:
            seen.add(u)
            todo += graph[u]
    return seen


def longest_chain(graph: dict[str, set[str]]) -> int:
    """Resources on the longest dependency path (fails on a cycle)."""
    depth: dict[str, int] = {}
    visiting: set[str] = set()

    def visit(urn: str) -> int:
        if urn in depth:
            return depth[urn]
        assert urn not in visiting, f"dependency cycle through {urn}"
        visiting.add(urn)
        depth[urn] = 1 + max((visit(d) for d in graph[urn]), default=0)
        visiting.discard(urn)
        return depth[urn]

    return max(visit(u) for u in graph)


# ---------------------------------------------------------------------------------------------
# the GPU layers every stack gets


def assert_gpu_layers(plan: Plan, gpu_nodes: int) -> None:
    """The device-plugin GPU stack in gpu-system and the GPU-ready gate Job waiting for it."""
    (stack,) = plan.of_type("gpucluster:gpu:SoftwareStack")
    (gate,) = plan.of_type("gpucluster:gpu:ReadyGate")
    (ds,) = plan.of_type("kubernetes:apps/v1:DaemonSet")
    assert (ds.name, ds.inputs["metadata"]["namespace"]) == ("gpu-device-plugin", "gpu-system")
    (plugin,) = plan.of_type("gpucluster:gpu:DevicePlugin")
    assert plugin.parent == stack.urn and ds.parent == plugin.urn
    releases = plan.of_type("kubernetes:helm.sh/v3:Release")
    gpu_releases = [r for r in releases if r.parent == stack.urn]
    assert {r.inputs["namespace"] for r in gpu_releases} == {"gpu-system"}
    (job,) = [j for j in plan.of_type("kubernetes:batch/v1:Job") if "gpucluster:training:Job" not in j.urn]
    assert job.parent == gate.urn
    assert (job.name, job.inputs["metadata"]["namespace"]) == ("gpu-ready", "gpu-cluster-system")
    assert job.inputs["spec"]["completions"] == gpu_nodes
    # The gate waits for everything the GPU stack installs.
    assert {ds.urn, *(r.urn for r in gpu_releases)} <= set(gate.dependencies)
    assert plan.outputs["gpuStack"] == "device-plugin"


# ---------------------------------------------------------------------------------------------
# lab


def test_lab_stack_registrations():
    plan = committed("lab")
    values, _ = program.stack_config("lab")
    hosts = json.loads(values["gpu-cluster:hosts"])
    names = [h["name"] for h in hosts]
    assert len(names) >= 2

    commands = plan.of_type(COMMAND)
    assert [r.name for r in commands if r.name.endswith("-init")] == ["control-plane-init"]
    assert sorted(r.name for r in plan.of_type(NODE_PREP)) == sorted(names)
    assert sorted(r.name for r in plan.of_type(NODE_JOIN)) == sorted(names[1:])
    for join in plan.of_type(NODE_JOIN):
        assert sorted(r.name for r in children(plan, join)) == sorted(
            f"{join.name}-{s}" for s in ("join", "ready")
        )
    for prep in plan.of_type(NODE_PREP):
        assert {f"{prep.name}-kernel", f"{prep.name}-containerd"} <= {r.name for r in children(plan, prep)}
    assert len(plan.of_type("gpucluster:k8s:Cni")) == 1
    # calico (its CRDs chart and the operator), plus the GPU stack's GFD (device plugin chart) and DCGM exporter
    assert sorted(r.inputs["chart"] for r in plan.of_type("kubernetes:helm.sh/v3:Release")) == [
        "crd.projectcalico.org.v1", "csi-driver-nfs", "dcgm-exporter", "kube-prometheus-stack",
        "nvidia-device-plugin", "tigera-operator"
    ]
    assert len(plan.of_type("kubernetes:apps/v1:DaemonSet")) == 1
    assert len(plan.of_type("gpucluster:gpu:DevicePlugin")) == 1
    assert_gpu_layers(plan, gpu_nodes=sum(1 for h in hosts if h.get("gpus", 0) > 0))
    # Every in-cluster object goes through the control plane's provider.
    (provider,) = plan.of_type("pulumi:providers:kubernetes")
    assert provider.name == "control-plane-k8s"
    for r in plan.resources:
        if r.custom and r.type.startswith("kubernetes:"):
            assert r.provider.startswith(provider.urn + "::"), r.name
    # Remote commands never carry the private key in the clear.
    for r in commands:
        assert r.inputs["connection"]["privateKey"] == SECRET_MARKER


def test_lab_stack_outputs():
    plan = committed("lab")
    values, _ = program.stack_config("lab")
    hosts = json.loads(values["gpu-cluster:hosts"])
    assert plan.outputs["kubeconfig"] == SECRET_MARKER
    assert plan.outputs["nodes"] == [h["name"] for h in hosts]
    assert plan.outputs["gpuNodes"] == {h["name"]: h["gpus"] for h in hosts if h.get("gpus", 0) > 0}
    assert plan.outputs["joinedNodes"] == [h["name"] for h in hosts[1:]]


# ---------------------------------------------------------------------------------------------
# dev


def test_dev_stack_registrations():
    plan = committed("dev")
    assert plan.of_type(COMMAND) == []
    assert plan.of_type(NODE_PREP) == [] and plan.of_type(NODE_JOIN) == []
    (provider,) = plan.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["context"] == "minikube"
    assert len(plan.of_type("gpucluster:gpu:DevicePlugin")) == 1
    (ds,) = plan.of_type("kubernetes:apps/v1:DaemonSet")
    assert ds.provider.startswith(provider.urn + "::")
    patches = plan.of_type("kubernetes:core/v1:NodePatch")
    assert [p.inputs["metadata"]["name"] for p in patches] == ["minikube"]
    assert patches[0].inputs["metadata"]["labels"] == {"nvidia.com/gpu.present": "true"}
    assert sorted(r.inputs["chart"] for r in plan.of_type("kubernetes:helm.sh/v3:Release")) == [
        "dcgm-exporter", "kube-prometheus-stack", "nvidia-device-plugin"
    ]
    assert_gpu_layers(plan, gpu_nodes=1)
    assert plan.outputs == {
        "kubeContext": "minikube",
        "gpuNodes": ["minikube"],
        "gpuStack": "device-plugin",
        "gpuReadyGate": {"job": "gpu-cluster-system/gpu-ready", "gpuNodes": 1, "passed": 0},
        "grafanaAdminPassword": SECRET_MARKER,
        "grafanaPortForward": "kubectl -n monitoring port-forward svc/monitoring-grafana 3000:80",
        "sharedClaim": {"claim": "training/shared-data", "backend": "hostPath:/data/gpu-cluster-shared"},
        "gpuHealth": {
            "namespace": "gpu-health",
            "dryRun": False,
            "circuitBreaker": {"maxNodesOut": 1, "maxPercentOut": 25},
            "alertWebhook": "http://gpu-health.gpu-health.svc:8080/webhook",
            "diagnostic": {"schedule": "17 3 * * *", "level": 1, "nodes": ["minikube"],
                           "level2": "kubectl -n gpu-health create job --from=cronjob/gpu-diag-l2-<node> "
                                     "gpu-diag-l2-<node>-$(date +%s)"},
            # no network.linkGbps on dev: the pair check is off by default
            "ncclPairCheck": "off: gpuHealth.ncclCheck.enabled is false, or unset without network.linkGbps and "
                             "training.image",
            "logs": "kubectl -n gpu-health logs deploy/gpu-health",
        },
        "training": {
            "job": "training/train",
            "launcher": "indexed-job",
            "image": "registry.example.com/gpu-cluster/trainer:0.1.0",
            "logs": "kubectl -n training logs --tail=-1 "
                    "-l gpu-cluster.io/training-job=train,batch.kubernetes.io/job-completion-index=0",
        },
    }
    assert all(r.urn.startswith("urn:pulumi:dev::") for r in plan.resources)


# ---------------------------------------------------------------------------------------------
# names


def assert_names_unique_and_derived(plan: Plan) -> None:
    urns = Counter(r.urn for r in plan.resources)
    assert [u for u, n in urns.items() if n > 1] == []
    by_urn = {r.urn: r for r in plan.resources}
    for r in plan.resources:
        parent = by_urn.get(r.parent)
        if parent is not None:
            assert r.name == parent.name or r.name.startswith(parent.name + "-"), (r.name, parent.name)
    for type_ in (NODE_PREP, NODE_JOIN):
        kids = [k.name for c in plan.of_type(type_) for k in children(plan, c)]
        assert len(kids) == len(set(kids)), type_


@pytest.mark.parametrize("stack", ["lab", "dev"])
def test_committed_stack_names(stack):
    assert_names_unique_and_derived(committed(stack))


def test_node_names_that_prefix_each_other_do_not_collide():
    # "w" + "driver-ready" and "w-driver" + "ready" give one name; types keep their URNs apart.
    plan = program.run("lab", config=lab_values([
        host("cp", "192.0.2.10", "control-plane"),
        host("w", "192.0.2.11", gpus=1),
        host("w-driver", "192.0.2.12", gpus=1),
        host("w-kube", "192.0.2.13"),
        host("cp-kernel", "192.0.2.14"),
    ]))
    assert_names_unique_and_derived(plan)
    assert len(plan.of_type(NODE_PREP)) == 5
    prep_of = {p.name: {k.name for k in children(plan, p)} for p in plan.of_type(NODE_PREP)}
    for a in prep_of:
        for b in prep_of:
            if a != b:
                assert not prep_of[a] & prep_of[b], (a, b)


# ---------------------------------------------------------------------------------------------
# parallelism


def test_workers_are_independent_and_chain_length_does_not_grow():
    plan8 = program.run("lab", config=gpu_lab(8))
    graph8 = dependency_graph(plan8)
    workers = [f"gpu-{i}" for i in range(1, 9)]
    assert sorted(r.name for r in plan8.of_type(NODE_JOIN)) == sorted(workers)

    owned = {
        w: owned_commands(plan8, NODE_PREP, w) | owned_commands(plan8, NODE_JOIN, w) for w in workers
    }
    for w in workers:
        assert len(owned[w]) == 6 + 2, w
    for a in workers:
        reach = set().union(*(transitive(graph8, c) for c in owned[a]))
        for b in workers:
            if a != b:
                assert not reach & owned[b], (
                    f"{a} waits for {b}: {sorted(short(u) for u in reach & owned[b])}"
                )

    plan2 = program.run("lab", config=gpu_lab(2))
    graph2 = dependency_graph(plan2)
    assert len(plan2.of_type(COMMAND)) < len(plan8.of_type(COMMAND))
    assert longest_chain(graph2) == longest_chain(graph8)
    # Sanity: one GPU worker's own steps are serial (kernel, driver, driver-ready, toolkit,
    # containerd, join, ready), so the graph really holds its edges.
    assert longest_chain(graph8) >= 7


def test_the_control_plane_opens_as_many_ssh_sessions_for_32_workers_as_for_2():
    """sshd refuses concurrent unauthenticated connections beyond MaxStartups (10 by default): no
    step may run on the control plane's connection once per worker. Workers' steps connect to the
    worker; the join token is a Secret through the Kubernetes API."""

    def on_control_plane(plan: Plan) -> list[str]:
        return sorted(r.name for r in plan.of_type(COMMAND) if r.inputs["connection"]["host"] == "192.0.2.10")

    two, many = program.run("lab", config=gpu_lab(2)), program.run("lab", config=gpu_lab(32))
    assert on_control_plane(two) == on_control_plane(many) == sorted([
        "control-plane-init", "control-plane-certificates", "control-plane-kubeconfig", "membership-ca-hash", "membership-drain",
        "kubelet-config-configmap", "kubelet-config-node-cp-1",
        "control-plane-init-host-reset",  # no create: a session opens only for its delete, when cp-1 leaves
        "control-plane-files-cp-1", *(f"cp-1-{s}" for s in ("kernel", "containerd", "kube-packages", "etcd-backup-install", "etcd-defrag-install",
                                              "certificates-expiry")),
    ])
    addresses = {h["name"]: h["address"] for h in json.loads(gpu_lab(32)[0]["gpu-cluster:hosts"])}
    joins = many.of_type(NODE_JOIN)
    assert len(joins) == 32
    for join in joins:
        steps = [r for r in children(many, join) if r.type == COMMAND]
        assert sorted(r.name for r in steps) == [f"{join.name}-join", f"{join.name}-ready"]
        for step in steps:
            assert step.inputs["connection"]["host"] == addresses[join.name], step.name
    # One token for every host, and it stays a secret in the plan, as does every join's stdin.
    (token,) = [r for r in many.of_type("kubernetes:core/v1:Secret") if r.inputs.get("type") == "bootstrap.kubernetes.io/token"]
    assert token.name == "membership-token"
    assert token.inputs["stringData"] == SECRET_MARKER
    assert all(r.inputs["stdin"] == SECRET_MARKER for r in many.of_type(COMMAND) if r.name.endswith("-join"))


def test_changing_one_address_changes_only_that_hosts_triggers():
    before = program.run("lab", config=gpu_lab(3))
    after = program.run("lab", config=gpu_lab(3, gpu_2="192.0.2.42"))

    def commands(plan: Plan) -> dict[str, Registration]:
        return {r.name: r for r in plan.of_type(COMMAND)}

    old, new = commands(before), commands(after)
    assert old.keys() == new.keys()
    gpu2 = {short(u) for u in owned_commands(before, NODE_PREP, "gpu-2") | owned_commands(before, NODE_JOIN, "gpu-2")}
    assert len(gpu2) == 8
    gpu2.add("kubelet-config-node-gpu-2")  # the host's kubelet-config step (components/lab/kubelet_config.py)
    for name in old:
        if name == "membership-drain":
            # The moved host is drained (and so re-joined cleanly): its entry in the member list changes.
            assert "'gpu-2 192.0.2.12'" in old[name].inputs["create"]
            assert "'gpu-2 192.0.2.42'" in new[name].inputs["create"]
            assert old[name].inputs["triggers"] == new[name].inputs["triggers"]
        elif name in gpu2:
            assert old[name].inputs["triggers"] != new[name].inputs["triggers"], name
            assert "192.0.2.12" in old[name].inputs["triggers"]
            assert "192.0.2.42" in new[name].inputs["triggers"]
        else:
            assert old[name].inputs["triggers"] == new[name].inputs["triggers"], name
            assert old[name].inputs == new[name].inputs, name


# ---------------------------------------------------------------------------------------------
# ordering on one host, and replacements that must not wipe what they just created

# The steps that install packages (apt/dpkg), in the order they must run on a host.
PACKAGE_STEPS = ("nvidia-driver", "nvidia-toolkit", "containerd", "kube-packages")


def test_each_hosts_package_steps_form_one_chain():
    plan = committed("lab")
    graph = dependency_graph(plan)
    for prep in plan.of_type(NODE_PREP):
        steps = {r.name.removeprefix(prep.name + "-"): r for r in children(plan, prep) if r.type == COMMAND}
        order = ["kernel", *(s for s in ("nvidia-driver", "driver-ready", "nvidia-toolkit") if s in steps),
                 "containerd", "kube-packages"]
        assert set(order) == set(steps), prep.name
        # Each step waits (transitively) for the one before it: no two run on the host at once.
        for before, after in itertools.pairwise(order):
            assert steps[before].urn in transitive(graph, steps[after].urn), (prep.name, before, after)
        installing = [s for s in order if s in PACKAGE_STEPS]
        assert len(installing) >= 2, prep.name
        # ...and the chain ends in kube-packages, which everything joining the cluster waits for.
        last = steps["kube-packages"].urn
        assert {s.urn for s in steps.values()} - {last} <= transitive(graph, last), prep.name


def test_nfs_server_waits_for_the_control_planes_prep():
    plan = committed("lab")
    graph = dependency_graph(plan)
    (nfs,) = [r for r in plan.of_type(COMMAND) if r.name.endswith("-nfs-server")]
    values, _ = program.stack_config("lab")
    first = next(h for h in json.loads(values["gpu-cluster:hosts"]) if h["role"] == "control-plane")
    # An explicit dependency (so it is also deleted before the host's packages on destroy).
    assert {short(u) for u in nfs.dependencies} == {f"{first['name']}-kube-packages"}
    prep = owned_commands(plan, NODE_PREP, first["name"])
    assert prep <= transitive(graph, nfs.urn)
    assert nfs.inputs["connection"]["host"] == first["address"]
    # Issue 34: never replaced (no triggers; an older version's ignored), so never deleted
    # first under running pods: a change of clients, share or host is an update.
    assert not nfs.delete_before_replace and "triggers" not in nfs.inputs


def test_cluster_membership_and_prep_commands_delete_before_replace():
    plan = committed("lab")
    commands = plan.of_type(COMMAND)
    suffixes = ("-init", "-kubeconfig", "-ca-hash", "-drain", "-certs", "-join", "-ready")
    membership = [r for r in commands if r.name.endswith(suffixes)]
    assert {r.name for r in membership} >= {"control-plane-init", "control-plane-kubeconfig"}
    assert len([r for r in membership if r.name.endswith("-join")]) == len(plan.of_type(NODE_JOIN))
    prep = [r for p in plan.of_type(NODE_PREP) for r in children(plan, p)]
    assert prep
    for r in membership + prep:
        assert r.delete_before_replace, r.name
    # Every remote command in the lab stack is replaced delete-first, but the NFS export, which is
    # never replaced (test_nfs_server_waits_for_the_control_planes_prep).
    assert [r.name for r in commands if not r.delete_before_replace] == ["shared-storage-nfs-server"]
