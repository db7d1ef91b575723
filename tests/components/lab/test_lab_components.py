"""Each component built from its typed args under the recording mocks: what it registers, where
each child hangs, what it depends on and which inputs stay secret."""

from __future__ import annotations

import pulumi
import pytest
import yaml
from pulumi.runtime import rpc

from components import versions
from components.cni import Cni, CniArgs
from components.dev.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.device_plugin import NvidiaDevicePlugin
from components.lab.control_plane import ControlPlane, ControlPlaneArgs
from components.lab.node_join import NodeJoin, NodeJoinArgs
from components.lab.node_prep import NodePrep, NodePrepArgs
from components.scheduling_contract import GPU_NODE_LABEL
from config.lab import Cni as CniKind
from render.program import SECRET_MARKER, Plan, RecordingMonitor, Registration
from stacks.lab import host_software, kubeadm_settings, upgrade_policy
from tests.conftest import ED25519, host, lab_config

BASTION_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKq7Zb2xN4mP9sV1cR6tY3uW8eL5oJ0hG2fD7aQ1kB9z"
PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"
COMMAND = "command:remote:Command"

GPU_STEPS = ("kernel", "kube-packages", "nvidia-driver", "driver-ready", "nvidia-toolkit", "containerd")
CPU_STEPS = ("kernel", "kube-packages", "containerd")


# ---------------------------------------------------------------------------------------------
# helpers


def short(urn: str) -> str:
    return urn.split("::")[-1]


def one(plan: Plan, name: str, type_: str | None = None) -> Registration:
    found = [r for r in plan.resources if r.name == name and (type_ is None or r.type == type_)]
    assert len(found) == 1, f"{name}: {len(found)} registrations"
    return found[0]


def deps(reg: Registration) -> set[str]:
    return {short(u) for u in reg.dependencies}


def children(plan: Plan, parent: Registration) -> list[Registration]:
    return [r for r in plan.resources if r.parent == parent.urn]


def closure(plan: Plan, reg: Registration) -> set[str]:
    """Names of everything `reg` depends on, transitively."""
    by_urn = {r.urn: r for r in plan.resources}
    seen: set[str] = set()
    todo = list(reg.dependencies)
    while todo:
        urn = todo.pop()
        if urn in seen:
            continue
        seen.add(urn)
        if urn in by_urn:
            todo += by_urn[urn].dependencies
    return {short(u) for u in seen}


def revealed(value):
    """A value as the mocks receive it (secret-wrapped), unwrapped: to check what a masked input holds."""
    if isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig:
        return value["value"]
    return value


def recording_inputs(mocks) -> dict[str, dict]:
    """Every resource's inputs as the mocks see them, by name (secrets still wrapped)."""
    seen: dict[str, dict] = {}
    new_resource = mocks.new_resource

    def recording(args):
        seen[args.name] = args.inputs
        return new_resource(args)

    mocks.new_resource = recording
    return seen


def build(fn) -> None:
    """Run `fn` as a Pulumi program under the test's mocks and wait for every registration."""
    pulumi.runtime.test(fn)()


def key() -> pulumi.Output[str]:
    return pulumi.Output.secret(PRIVATE_KEY)


def prep(cfg, name: str) -> NodePrep:
    h = next(h for h in cfg.hosts if h.name == name)
    return NodePrep(name, NodePrepArgs(host=h, software=host_software(cfg), private_key=key(), bastion=cfg.bastion))


# ---------------------------------------------------------------------------------------------
# NodePrep


def test_node_prep_gpu_host_steps_parented_and_ordered(mocks):
    cfg = lab_config()
    build(lambda: prep(cfg, "gpu-1"))
    plan = mocks.plan

    component = one(plan, "gpu-1", "gpucluster:lab:NodePrep")
    steps = children(plan, component)
    assert sorted(r.name for r in steps) == sorted(f"gpu-1-{s}" for s in GPU_STEPS)
    assert all(r.type == COMMAND for r in steps)
    assert len(plan.of_type(COMMAND)) == len(GPU_STEPS)  # nothing outside the component

    step = {s: one(plan, f"gpu-1-{s}") for s in GPU_STEPS}
    # One chain: no two steps on the host run at once (apt/dpkg lock, the driver's reboot).
    assert deps(step["kernel"]) == set()
    assert deps(step["nvidia-driver"]) == {"gpu-1-kernel"}
    assert deps(step["driver-ready"]) == {"gpu-1-nvidia-driver"}
    assert deps(step["nvidia-toolkit"]) == {"gpu-1-driver-ready"}
    assert deps(step["containerd"]) == {"gpu-1-nvidia-toolkit"}
    assert deps(step["kube-packages"]) == {"gpu-1-containerd"}
    # The runtime is configured only once the driver is up, and the kube packages come last.
    assert closure(plan, step["kube-packages"]) == {
        "gpu-1-kernel", "gpu-1-nvidia-driver", "gpu-1-driver-ready", "gpu-1-nvidia-toolkit", "gpu-1-containerd"
    }
    assert "nvidia-ctk runtime configure" in step["containerd"].inputs["create"]


def test_node_prep_cpu_host_has_no_nvidia_steps(mocks):
    cfg = lab_config()
    build(lambda: prep(cfg, "cpu-1"))
    plan = mocks.plan

    component = one(plan, "cpu-1", "gpucluster:lab:NodePrep")
    assert sorted(r.name for r in children(plan, component)) == sorted(f"cpu-1-{s}" for s in CPU_STEPS)
    assert len(plan.of_type(COMMAND)) == len(CPU_STEPS)
    containerd = one(plan, "cpu-1-containerd")
    assert deps(containerd) == {"cpu-1-kernel"}
    assert deps(one(plan, "cpu-1-kube-packages")) == {"cpu-1-containerd"}
    assert "nvidia-ctk" not in containerd.inputs["create"]


def test_node_prep_preinstalled_driver_skips_install_keeps_check(mocks):
    cfg = lab_config(nvidiaDriver={"branch": "570", "preinstalled": True})
    build(lambda: prep(cfg, "gpu-1"))
    plan = mocks.plan

    names = {r.name for r in plan.of_type(COMMAND)}
    assert "gpu-1-nvidia-driver" not in names
    assert names == {f"gpu-1-{s}" for s in GPU_STEPS if s != "nvidia-driver"}
    assert deps(one(plan, "gpu-1-driver-ready")) == {"gpu-1-kernel"}
    assert deps(one(plan, "gpu-1-nvidia-toolkit")) == {"gpu-1-driver-ready"}
    assert deps(one(plan, "gpu-1-containerd")) == {"gpu-1-nvidia-toolkit"}
    assert deps(one(plan, "gpu-1-kube-packages")) == {"gpu-1-containerd"}


@pytest.mark.parametrize("gpu_stack", ["device-plugin", "operator"])
@pytest.mark.parametrize("name", ["cp-1", "gpu-1", "cpu-1"])
def test_node_prep_is_one_chain_ending_in_done(mocks, gpu_stack, name):
    cfg = lab_config(gpu={"stack": gpu_stack})
    component: list[NodePrep] = []
    build(lambda: component.append(prep(cfg, name)))
    plan = mocks.plan

    steps = plan.of_type(COMMAND)
    by_name = {r.name: r for r in steps}
    # Exactly one step without a predecessor, each step the only dependency of the next.
    (head,) = [r for r in steps if not r.dependencies]
    chain = [head]
    while True:
        nxt = [r for r in steps if r.dependencies == [chain[-1].urn]]
        if not nxt:
            break
        (step,) = nxt
        chain.append(step)
    assert len(chain) == len(steps), [r.name for r in chain]
    assert chain[0].name == f"{name}-kernel" and chain[-1].name == f"{name}-kube-packages"
    assert by_name[f"{name}-containerd"] is chain[-2]
    (done,) = component[0].done
    assert done is not None

    @pulumi.runtime.test
    def check():
        return done.urn.apply(lambda urn: assert_is(urn, chain[-1].urn))

    check()


def assert_is(a, b) -> None:
    assert a == b


def test_node_prep_steps_delete_before_replace(mocks):
    cfg = lab_config()
    build(lambda: (prep(cfg, "gpu-1"), prep(cfg, "cpu-1")))
    commands = mocks.plan.of_type(COMMAND)
    assert len(commands) == len(GPU_STEPS) + len(CPU_STEPS)
    for reg in commands:
        assert reg.delete_before_replace, reg.name
    for reg in mocks.plan.resources:
        if reg.type != COMMAND:
            assert not reg.delete_before_replace, reg.name


def test_node_prep_driver_ready_survives_reboot_and_only_it_has_no_delete(mocks):
    cfg = lab_config()
    build(lambda: prep(cfg, "gpu-1"))
    plan = mocks.plan

    ready = one(plan, "gpu-1-driver-ready")
    assert ready.inputs["connection"]["dialErrorLimit"] == 60
    assert "delete" not in ready.inputs or not ready.inputs["delete"]
    for reg in plan.of_type(COMMAND):
        if reg.name == "gpu-1-driver-ready":
            continue
        assert reg.inputs["connection"].get("dialErrorLimit") != 60, reg.name
        assert reg.inputs.get("delete"), f"{reg.name} has no delete"


def test_node_prep_triggers_and_pinned_connection(mocks):
    cfg = lab_config()
    build(lambda: (prep(cfg, "gpu-1"), prep(cfg, "cpu-1")))
    plan = mocks.plan

    addresses = {"gpu-1": "192.0.2.11", "cpu-1": "192.0.2.12"}
    commands = plan.of_type(COMMAND)
    assert len(commands) == len(GPU_STEPS) + len(CPU_STEPS)
    for reg in commands:
        node = "gpu-1" if reg.name.startswith("gpu-1-") else "cpu-1"
        assert node in reg.inputs["triggers"], reg.name
        assert addresses[node] in reg.inputs["triggers"], reg.name
        conn = reg.inputs["connection"]
        assert conn["host"] == addresses[node]
        assert conn["hostKey"] == ED25519
        assert conn["privateKey"] == SECRET_MARKER
        assert conn["user"] == "ubuntu"
        assert "proxy" not in conn
        assert PRIVATE_KEY not in repr(reg.inputs)


def test_node_prep_bastion_is_a_pinned_proxy(mocks):
    cfg = lab_config(bastion={"host": "bastion.lab.example", "sshUser": "jump", "hostKey": BASTION_KEY})
    build(lambda: prep(cfg, "gpu-1"))
    plan = mocks.plan

    commands = plan.of_type(COMMAND)
    assert commands
    for reg in commands:
        conn = reg.inputs["connection"]
        assert conn["hostKey"] == ED25519
        proxy = conn["proxy"]
        assert proxy["host"] == "bastion.lab.example"
        assert proxy["user"] == "jump"
        assert proxy["hostKey"] == BASTION_KEY
        assert proxy["privateKey"] == SECRET_MARKER
        assert PRIVATE_KEY not in repr(reg.inputs)


# ---------------------------------------------------------------------------------------------
# ControlPlane


def control_plane(cfg, preps: dict[str, NodePrep] | None = None) -> ControlPlane:
    first = cfg.control_planes[0].name
    preps = preps if preps is not None else {first: prep(cfg, first)}
    return ControlPlane(
        "control-plane", ControlPlaneArgs(host=cfg.control_planes[0], cluster=kubeadm_settings(cfg), private_key=key(),
                                          prepared=preps[first].done, bastion=cfg.bastion)
    )


def test_control_plane_init_reads_kubeadm_config_on_stdin(mocks):
    cfg = lab_config(podCidr="10.50.0.0/16", serviceCidr="10.60.0.0/16", kubernetesVersion="1.33.4")
    build(lambda: control_plane(cfg))
    plan = mocks.plan

    component = one(plan, "control-plane", "gpucluster:lab:ControlPlane")
    init = one(plan, "control-plane-init")
    assert init.parent == component.urn
    stdin = init.inputs["stdin"]
    assert "kubernetesVersion: v1.33.4" in stdin
    docs = {d["kind"]: d for d in yaml.safe_load_all(stdin)}
    assert docs["ClusterConfiguration"]["kubernetesVersion"] == "v1.33.4"
    assert docs["ClusterConfiguration"]["networking"] == {
        "podSubnet": "10.50.0.0/16", "serviceSubnet": "10.60.0.0/16"
    }
    assert docs["InitConfiguration"]["localAPIEndpoint"]["advertiseAddress"] == "192.0.2.10"
    assert init.inputs["connection"]["host"] == "192.0.2.10"
    assert "kubeadm reset -f" in init.inputs["delete"]
    # kubeadm init runs once the first control plane is prepared (the end of its prep chain).
    assert deps(init) == {"cp-1-kube-packages"}
    assert {"cp-1-containerd", "cp-1-kernel"} <= closure(plan, init)
    # A changed config resets the old cluster before initialising the new one.
    assert init.delete_before_replace
    assert one(plan, "control-plane-kubeconfig").delete_before_replace


def test_control_plane_kubeconfig_is_secret(mocks):
    cfg = lab_config()

    @pulumi.runtime.test
    def check():
        cp = control_plane(cfg)

        async def verify() -> None:
            assert await cp.kubeconfig.is_secret()
            assert "kind: Config" in await cp.kubeconfig.future()

        return verify()

    check()


def test_control_plane_kubeconfig_read_not_logged_and_provider_secret(mocks):
    cfg = lab_config()
    build(lambda: control_plane(cfg))
    plan = mocks.plan

    component = one(plan, "control-plane", "gpucluster:lab:ControlPlane")
    read = one(plan, "control-plane-kubeconfig")
    assert read.parent == component.urn
    assert read.inputs["logging"] == "none"
    assert "control-plane-init" in deps(read)

    provider = one(plan, "control-plane-k8s", "pulumi:providers:kubernetes")
    assert provider.parent == component.urn
    assert provider.inputs["kubeconfig"] == SECRET_MARKER
    assert "control-plane-kubeconfig" in deps(provider)


# ---------------------------------------------------------------------------------------------
# NodeJoin


def join_all(cfg, joiner: str) -> dict[str, object]:
    """The pieces a NodeJoin needs (both hosts prepared, control plane, CNI), then the join."""
    first = cfg.control_planes[0].name
    preps = {first: prep(cfg, first), joiner: prep(cfg, joiner)}
    cp = control_plane(cfg, preps)
    cni = Cni("cni", CniArgs(kind=cfg.cni, pod_cidr=cfg.pod_cidr),
              opts=pulumi.ResourceOptions(provider=cp.provider))
    h = next(h for h in cfg.hosts if h.name == joiner)
    join = NodeJoin(joiner, NodeJoinArgs(cluster=kubeadm_settings(cfg), host=h, control_plane=cp, private_key=key(),
                                         prepared=preps[joiner].done, network=[cni], bastion=cfg.bastion))
    return {"cp": cp, "cni": cni, "join": join}


def test_node_join_worker(mocks):
    cfg = lab_config()
    build(lambda: join_all(cfg, "gpu-1"))
    plan = mocks.plan

    component = one(plan, "gpu-1", "gpucluster:lab:NodeJoin")
    assert sorted(r.name for r in children(plan, component)) == ["gpu-1-join", "gpu-1-ready", "gpu-1-token"]

    token = one(plan, "gpu-1-token")
    assert token.inputs["connection"]["host"] == "192.0.2.10"
    assert token.inputs["logging"] == "none"
    assert "kubeadm token create --ttl 15m" in token.inputs["create"]
    assert "upload-certs" not in token.inputs["create"]
    assert "control-plane-init" in deps(token)

    join = one(plan, "gpu-1-join")
    assert join.inputs["connection"]["host"] == "192.0.2.11"
    assert join.inputs["connection"]["privateKey"] == SECRET_MARKER
    assert join.inputs["stdin"] == SECRET_MARKER
    assert {"gpu-1-token", "gpu-1-kube-packages"} <= deps(join)
    # ... and so, transitively, on every step of the host's NodePrep.
    prep_steps = {r.name for r in children(plan, one(plan, "gpu-1", "gpucluster:lab:NodePrep"))}
    assert prep_steps == {f"gpu-1-{s}" for s in GPU_STEPS}
    assert prep_steps <= closure(plan, join)
    assert "kubeadm reset -f" in join.inputs["delete"]

    ready = one(plan, "gpu-1-ready")
    assert ready.inputs["connection"]["host"] == "192.0.2.10"
    assert {"gpu-1-join", "cni-flannel", "cni-ns"} <= deps(ready)
    delete = ready.inputs["delete"]
    assert "kubectl" in delete
    assert "drain gpu-1" in delete
    assert "delete node gpu-1" in delete
    assert "node/gpu-1" in ready.inputs["create"]

    for reg in (token, join, ready):
        assert {"gpu-1", "192.0.2.11", "control-plane-init-id"} <= set(reg.inputs["triggers"]), reg.name
        # A rebuilt cluster (new init id) drains and resets the node before it joins again.
        assert reg.delete_before_replace, reg.name


def test_node_join_stdin_carries_token_and_join_template(mocks):
    """The stdin is masked in the plan; the mocks themselves see the unmasked value."""
    cfg = lab_config()
    seen = recording_inputs(mocks)
    build(lambda: join_all(cfg, "gpu-1"))

    stdin = revealed(seen["gpu-1-join"]["stdin"])
    first_line, template = stdin.split("\n", 1)
    assert first_line == ""  # the mocked token command prints nothing
    doc = yaml.safe_load(template)
    assert doc["kind"] == "JoinConfiguration"
    assert doc["discovery"]["bootstrapToken"]["token"] == "@TOKEN@"
    assert doc["discovery"]["bootstrapToken"]["apiServerEndpoint"] == "192.0.2.10:6443"
    assert doc["nodeRegistration"]["name"] == "gpu-1"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in doc["nodeRegistration"]["taints"]
    assert "controlPlane" not in doc


def test_node_join_control_plane_joiner_uploads_certs(mocks):
    cfg = lab_config(
        hosts=[
            host("cp-1", "192.0.2.10", "control-plane"),
            host("cp-2", "192.0.2.20", "control-plane"),
        ],
        controlPlaneEndpoint="k8s-api.lab.example:6443",
    )
    seen = recording_inputs(mocks)
    build(lambda: join_all(cfg, "cp-2"))
    plan = mocks.plan

    token = one(plan, "cp-2-token")
    assert "upload-certs" in token.inputs["create"]
    assert "certificate-key" in token.inputs["create"]
    join = one(plan, "cp-2-join")
    assert join.inputs["stdin"] == SECRET_MARKER
    doc = yaml.safe_load(revealed(seen["cp-2-join"]["stdin"]).split("\n", 1)[1])
    assert doc["controlPlane"]["certificateKey"] == "@CERT_KEY@"
    assert doc["controlPlane"]["localAPIEndpoint"]["advertiseAddress"] == "192.0.2.20"
    assert doc["discovery"]["bootstrapToken"]["apiServerEndpoint"] == "k8s-api.lab.example:6443"


# ---------------------------------------------------------------------------------------------
# Cni


@pytest.mark.parametrize(
    ("kind", "namespace", "chart", "version", "repo"),
    [
        (CniKind.FLANNEL, "kube-flannel", versions.FLANNEL_CHART, versions.FLANNEL_CHART_VERSION,
         versions.FLANNEL_CHART_REPO),
        (CniKind.CALICO, "tigera-operator", versions.CALICO_CHART, versions.CALICO_CHART_VERSION,
         versions.CALICO_CHART_REPO),
    ],
)
def test_cni_release(mocks, kind, namespace, chart, version, repo):
    cfg = lab_config(cni=kind.value, podCidr="10.32.0.0/16")
    build(lambda: Cni("cni", CniArgs(kind=cfg.cni, pod_cidr=cfg.pod_cidr)))
    plan = mocks.plan

    component = one(plan, "cni", "gpucluster:k8s:Cni")
    # calico: its CRDs are a release of their own (tests/components/test_calico_crds.py checks them upstream).
    releases = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release")
                if r.inputs["chart"] != versions.CALICO_CRDS_CHART]
    assert len(releases) == 1
    release = releases[0]
    assert release.name == f"cni-{kind.value}"
    assert release.parent == component.urn
    assert release.inputs["namespace"] == namespace
    assert release.inputs["chart"] == chart
    assert release.inputs["version"] == version
    assert release.inputs["repositoryOpts"]["repo"] == repo
    values = release.inputs["values"]
    if kind is CniKind.FLANNEL:
        assert values["podCidr"] == "10.32.0.0/16"
    else:
        assert values["installation"]["calicoNetwork"]["ipPools"][0]["cidr"] == "10.32.0.0/16"

    ns = one(plan, "cni-ns", "kubernetes:core/v1:Namespace")
    assert ns.parent == component.urn
    assert ns.inputs["metadata"]["name"] == namespace
    assert ns.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert "cni-ns" in deps(release)


# ---------------------------------------------------------------------------------------------
# NvidiaDevicePlugin


def test_device_plugin_daemonset(mocks):
    build(lambda: NvidiaDevicePlugin("nvidia-device-plugin"))
    plan = mocks.plan

    component = one(plan, "nvidia-device-plugin", "gpucluster:gpu:DevicePlugin")
    ds = one(plan, "nvidia-device-plugin", "kubernetes:apps/v1:DaemonSet")
    assert ds.parent == component.urn
    pod = ds.inputs["spec"]["template"]["spec"]

    containers = pod["containers"] + pod.get("initContainers", [])
    assert [c["image"] for c in pod["containers"]] == [versions.NVIDIA_DEVICE_PLUGIN_IMAGE]
    for c in containers:
        sc = c.get("securityContext", {})
        assert not sc.get("privileged", False), c["name"]
        assert sc.get("allowPrivilegeEscalation") is False, c["name"]
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], c["name"]
        assert not sc.get("capabilities", {}).get("add"), c["name"]
    assert not pod.get("hostNetwork") and not pod.get("hostPID")

    assert any(t.get("key") == "nvidia.com/gpu" and t.get("operator") == "Exists" for t in pod["tolerations"])

    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    gpu_term = {"key": GPU_NODE_LABEL[0], "operator": "In", "values": [GPU_NODE_LABEL[1]]}
    gke_term = {"key": "cloud.google.com/gke-accelerator", "operator": "Exists"}
    # Terms are ORed, expressions within a term ANDed: every term must select GPU nodes only.
    assert terms
    for term in terms:
        assert term["matchExpressions"] in ([gpu_term], [gke_term]), term
    assert GPU_NODE_LABEL == ("nvidia.com/gpu.present", "true")


# ---------------------------------------------------------------------------------------------
# ExistingCluster (dev)


def test_existing_cluster_context_and_gpu_labels(mocks):
    build(lambda: ExistingCluster(
        "cluster", ExistingClusterArgs(context="minikube", gpu_nodes=("node-a", "node-b"))
    ))
    plan = mocks.plan

    component = one(plan, "cluster", "gpucluster:dev:ExistingCluster")
    provider = one(plan, "cluster-k8s", "pulumi:providers:kubernetes")
    assert provider.parent == component.urn
    assert provider.inputs["context"] == "minikube"
    assert "kubeconfig" not in provider.inputs

    patches = plan.of_type("kubernetes:core/v1:NodePatch")
    assert sorted(p.inputs["metadata"]["name"] for p in patches) == ["node-a", "node-b"]
    for patch in patches:
        assert patch.parent == component.urn
        assert patch.inputs["metadata"]["labels"] == {"nvidia.com/gpu.present": "true"}
        assert patch.provider.startswith(provider.urn)
    assert len({p.name for p in patches}) == 2
    assert plan.of_type(COMMAND) == []


def test_existing_cluster_kubeconfig_secret(mocks):
    build(lambda: ExistingCluster(
        "cluster",
        ExistingClusterArgs(kubeconfig=pulumi.Output.secret("apiVersion: v1\nkind: Config\n"),
                            context="ignored", gpu_nodes=()),
    ))
    plan = mocks.plan

    provider = one(plan, "cluster-k8s", "pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == SECRET_MARKER
    assert "context" not in provider.inputs
    assert plan.of_type("kubernetes:core/v1:NodePatch") == []


def test_existing_cluster_needs_kubeconfig_or_context(mocks):
    def bad():
        ExistingCluster("cluster", ExistingClusterArgs())

    with pytest.raises(ValueError, match="kubeconfig or a context"):
        build(bad)


# ---------------------------------------------------------------------------------------------
# Upgrades in place: which steps update and how (the scripts themselves: test_upgrade_scripts.py;
# whole plans before and after a bump: tests/stacks/test_upgrades.py)


def protect_flags(monkeypatch) -> dict[str, bool]:
    """The `protect` option of every registration, by name (the plan does not record it)."""
    seen: dict[str, bool] = {}
    real = RecordingMonitor.RegisterResource

    def recording(self, request):
        seen[request.name] = bool(request.protect)
        return real(self, request)

    monkeypatch.setattr(RecordingMonitor, "RegisterResource", recording)
    return seen


def test_control_plane_init_updates_in_place_and_is_replaced_only_for_a_new_cluster(mocks, monkeypatch):
    protected = protect_flags(monkeypatch)
    cfg = lab_config(kubernetesVersion="1.34.3")
    build(lambda: control_plane(cfg))
    init = one(mocks.plan, "control-plane-init")
    # What kubeadm init fixed: the first control plane, the endpoint, the ranges. Not the version.
    assert init.inputs["triggers"] == ["cp-1", "192.0.2.10", "192.0.2.10:6443", "10.244.0.0/16", "10.96.0.0/12"]
    assert "v1.34.3" not in repr(init.inputs["triggers"]) and "kubernetesVersion: v1.34.3" in init.inputs["stdin"]
    update = init.inputs["update"]
    assert 'kubeadm upgrade apply "v$want" --yes' in update and "want=1.34.3" in update
    assert update.index("snapshot save") < update.index("kubeadm upgrade apply")
    assert "kubeadm reset" not in update and "kubeadm reset" in init.inputs["delete"]
    assert protected["control-plane-init"] and not protected["control-plane-kubeconfig"]
    # The kubeconfig read and the provider do not follow an update of the init.
    assert one(mocks.plan, "control-plane-kubeconfig").inputs["triggers"] == ["control-plane-init-id"]


def test_control_plane_init_unprotected_only_when_a_rebuild_is_allowed(mocks, monkeypatch):
    protected = protect_flags(monkeypatch)
    cfg = lab_config()
    first = cfg.control_planes[0]
    build(lambda: ControlPlane("control-plane", ControlPlaneArgs(
        host=first, cluster=kubeadm_settings(cfg), private_key=key(), prepared=prep(cfg, first.name).done,
        protect=False)))
    assert protected["control-plane-init"] is False


def test_node_prep_updates_stage_kubeadm_and_leave_a_workers_driver_to_its_drained_upgrade(mocks):
    cfg = lab_config(kubernetesVersion="1.35.0", nvidiaDriver={"branch": "580"})
    build(lambda: prep(cfg, "gpu-1"))
    plan = mocks.plan
    packages = one(plan, "gpu-1-kube-packages").inputs["update"]
    assert "apt_pin kubeadm=$want-1.1" in packages and "want=1.35.0" in packages and "kubernetes-v1.35" in packages
    assert "kubelet=$want" in packages.split("if [ -z \"$have\" ]; then\n  # Not installed")[1]  # only when missing
    driver = one(plan, "gpu-1-nvidia-driver").inputs["update"]
    assert "apt-get" not in driver.split("install -d -m 0755")[-1]
    assert "nvidia-driver-580-server is installed when the node is drained for it (gpu-1-join)" in driver
    assert "update" not in one(plan, "gpu-1-driver-ready").inputs
    for step in ("kernel", "nvidia-toolkit", "containerd"):
        assert "update" not in one(plan, f"gpu-1-{step}").inputs, step  # create runs again (idempotent)


def test_a_gpu_control_plane_drains_itself_for_a_new_driver(mocks):
    cfg = lab_config(hosts=[host("cp-1", "192.0.2.10", "control-plane", gpus=1)], nvidiaDriver={"branch": "580"})
    build(lambda: prep(cfg, "cp-1"))
    driver = one(mocks.plan, "cp-1-nvidia-driver").inputs["update"]
    assert 'acquire_slot "$node" 1' in driver and 'drain_node "$node"' in driver and "reboot_soon" in driver
    ready = one(mocks.plan, "cp-1-driver-ready")
    assert 'uncordon_node "$node"' in ready.inputs["update"] and "nvidia-driver-580-server ready" in ready.inputs["update"]
    assert ready.inputs["connection"]["dialErrorLimit"] == 60  # it waits out the reboot


def test_node_join_updates_drain_upgrade_and_uncordon(mocks):
    cfg = lab_config(maxUnavailable=3)

    def program() -> None:
        first = cfg.control_planes[0].name
        preps = {first: prep(cfg, first), "gpu-1": prep(cfg, "gpu-1")}
        cp = control_plane(cfg, preps)
        h = next(h for h in cfg.hosts if h.name == "gpu-1")
        NodeJoin("gpu-1", NodeJoinArgs(
            cluster=kubeadm_settings(cfg), host=h, control_plane=cp, private_key=key(), prepared=preps["gpu-1"].done,
            network=[], upgrade=upgrade_policy(cfg), driver=cfg.nvidia_driver))

    build(program)
    plan = mocks.plan
    token, join, ready = (one(plan, f"gpu-1-{s}") for s in ("token", "join", "ready"))
    assert 'acquire_slot "$node" 3 8640' in token.inputs["update"]  # maxUnavailable 3, up to 24 hours
    assert "pkg=nvidia-driver-570-server" in token.inputs["update"] and "kubeadm token" not in token.inputs["update"]
    assert "kubeadm upgrade node" in join.inputs["update"] and 'driver_switch "$pkg"' in join.inputs["update"]
    assert 'uncordon_node "$node"' in ready.inputs["update"] and "gpus=2" in ready.inputs["update"]
    assert "gpu-1-join" in deps(ready)  # its stdin is the join's report
    for reg in (token, join, ready):
        assert "kubeadm reset" not in reg.inputs["update"], reg.name
        assert reg.inputs["triggers"] == ["gpu-1", "192.0.2.11", "control-plane-init-id"], reg.name


def test_a_joined_control_plane_waits_for_slot_zero_and_keeps_its_driver_to_node_prep(mocks):
    cfg = lab_config(hosts=[host("cp-1", "192.0.2.10", "control-plane"), host("cp-2", "192.0.2.20", "control-plane", gpus=1)],
                     controlPlaneEndpoint="k8s-api.lab.example:6443", maxUnavailable=4)

    def program() -> None:
        preps = {n: prep(cfg, n) for n in ("cp-1", "cp-2")}
        cp = control_plane(cfg, preps)
        h = cfg.hosts[1]
        NodeJoin("cp-2", NodeJoinArgs(
            cluster=kubeadm_settings(cfg), host=h, control_plane=cp, private_key=key(), prepared=preps["cp-2"].done,
            network=[], upgrade=upgrade_policy(cfg), driver=cfg.nvidia_driver))

    build(program)
    token = one(mocks.plan, "cp-2-token").inputs["update"]
    assert 'acquire_slot "$node" 1 ' in token and "pkg=nvidia-driver" not in token
    assert "waits for the control planes" not in token
    assert 'driver_switch "$pkg"' not in one(mocks.plan, "cp-2-join").inputs["update"]
    assert 'drain_node "$node"' in one(mocks.plan, "cp-2-nvidia-driver").inputs["update"]
