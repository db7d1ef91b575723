"""Each component built from its typed args under the recording mocks: what it registers, where
each child hangs, what it depends on and which inputs stay secret."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pulumi
import pytest
import yaml
from pulumi.runtime import rpc
from pulumi.runtime.settings import set_root_resource

from components import versions
from components.cni import Cni, CniArgs
from components.dev.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.device_plugin import NvidiaDevicePlugin
from components.lab import kubeadm
from components.lab.control_plane import ControlPlane, ControlPlaneArgs
from components.lab.node_join import Membership, MembershipArgs, NodeJoin, NodeJoinArgs
from components.lab.node_prep import NodePrep, NodePrepArgs, RoceHost
from config.lab import Cni as CniKind
from config.scheduling_contract import GPU_NODE_LABEL
from render import program
from render.program import SECRET_MARKER, Plan, RecordingMonitor, Registration
from stacks.lab import host_software, kubeadm_settings, upgrade_policy
from tests.conftest import ED25519, SEED_002_ROCE, host, lab_config

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


# network.rdma with network.roce (seed 002's NIC): the RDMA steps on GPU hosts only
ROCE_CONFIG = {
    "network": {"rdma": True, "roce": SEED_002_ROCE},
    "training": {"image": "registry.example/trainer:1.0.0"},  # network.roce needs the workload image
}


def test_host_software_carries_network_roce_only_with_rdma():
    assert host_software(lab_config()).roce is None
    roce = host_software(lab_config(**ROCE_CONFIG)).roce
    assert roce == RoceHost(interface="ens192", pci_address="0000:3b:00.0", hca="irdma0", driver="ice")


@pytest.mark.parametrize("gpu_control_plane", [False, True], ids=["gpu-worker", "gpu-control-plane"])
def test_node_prep_rdma_steps_only_on_gpu_hosts_after_kube_packages(mocks, gpu_control_plane):
    hosts = [host("cp-1", "192.0.2.10", "control-plane", gpus=2 if gpu_control_plane else 0),
             host("gpu-1", "192.0.2.11", gpus=2), host("cpu-1", "192.0.2.12")]
    cfg = lab_config(hosts=hosts, **ROCE_CONFIG)
    preps: dict[str, NodePrep] = {}
    build(lambda: preps.update({h.name: prep(cfg, h.name) for h in cfg.hosts}))
    plan = mocks.plan

    gpu_hosts = [h.name for h in cfg.hosts if h.is_gpu]
    assert gpu_hosts == (["cp-1", "gpu-1"] if gpu_control_plane else ["gpu-1"])
    rdma = {r.name for r in plan.of_type(COMMAND) if "-rdma" in r.name}
    assert rdma == {f"{n}-{s}" for n in gpu_hosts for s in ("rdma", "rdma-ready")}
    for name in gpu_hosts:
        component = one(plan, name, "gpucluster:lab:NodePrep")
        step, ready = one(plan, f"{name}-rdma"), one(plan, f"{name}-rdma-ready")
        assert step.parent == component.urn and ready.parent == component.urn
        # The end of the host's one chain: after kube-packages (and so after every apt step).
        assert deps(step) == {f"{name}-kube-packages"}
        assert deps(ready) == {f"{name}-rdma"}
        assert {f"{name}-containerd", f"{name}-driver-ready"} <= closure(plan, step)
        assert not [r for r in plan.of_type(COMMAND) if step.urn in r.dependencies and r is not ready]
        create = step.inputs["create"]
        assert "ens192" in create and "0000:3b:00.0" in create and "irdma0" in create and "driver=ice" in create
        assert "options ib_core netns_mode=0" in create
        assert "apt_pin rdma-core=39.0-1 ibverbs-providers=39.0-1 ibverbs-utils=39.0-1 perftest=4.4+0.37-1" in create
        assert "rdma system set netns shared" in step.inputs["delete"]
        assert step.delete_before_replace and name in step.inputs["triggers"]
        # The ready step dials through the reboot and has nothing to undo.
        assert ready.inputs["connection"]["dialErrorLimit"] == 60
        assert step.inputs["connection"].get("dialErrorLimit") != 60
        assert not ready.inputs.get("delete")
        assert "netns_mode" not in one(plan, f"{name}-kube-packages").inputs["create"]

    (cpu_done,) = preps["cpu-1"].done
    (gpu_done,) = preps["gpu-1"].done

    @pulumi.runtime.test
    def check():
        return pulumi.Output.all(gpu_done.urn, cpu_done.urn).apply(
            lambda urns: (assert_is(short(urns[0]), "gpu-1-rdma-ready"), assert_is(short(urns[1]), "cpu-1-kube-packages"))
        )

    check()


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
# Membership and NodeJoin

ISSUED = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
TOKEN_ID = "q78jfy"
TOKEN_SECRET = "0123456789abcdef"  # what the mocked RandomPassword returns
CA_HASH = "sha256:" + "ab" * 32  # what the mocked ca-hash step prints
CERT_KEY = "cd" * 32  # the mocked certificate key (RandomBytes.hex)
SECRET_TYPE = "kubernetes:core/v1:Secret"
UPGRADER_JWT = "eyJhbGciOiJSUzI1NiJ9.upgrader.sig"  # what the token controller writes into data.token


class OptionsMonitor(program.RecordingMonitor):
    """Also keeps each registration's replaceOnChanges (RecordingMonitor records inputs only)."""

    def __init__(self, mocks, plan):
        super().__init__(mocks, plan)
        self.replace_on_changes: dict[str, list[str]] = {}

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        self.replace_on_changes[request.name] = list(request.replaceOnChanges)
        return super().RegisterResource(request)


@pytest.fixture
def join_mocks() -> program.ProgramMocks:
    """The recording mocks, with what the join needs from its providers: the random token secret,
    the CA hash and the certificate key the control plane prints. `monitor.replace_on_changes` too."""
    plan = program.Plan(stack="test")
    m = program.ProgramMocks()
    new_resource = m.new_resource

    def with_outputs(args):
        urn_id, outputs = new_resource(args)
        if args.typ == "random:index/randomPassword:RandomPassword":
            outputs["result"] = TOKEN_SECRET
        elif args.name.endswith("-ca-hash"):
            outputs["stdout"] = CA_HASH + "\n"
        elif args.typ == "random:index/randomBytes:RandomBytes":
            outputs["hex"] = CERT_KEY
        elif args.name.endswith("-upgrader-token"):
            outputs["data"] = {"token": base64.b64encode(UPGRADER_JWT.encode()).decode()}
        return urn_id, outputs

    m.new_resource = with_outputs  # type: ignore[method-assign]
    monitor = OptionsMonitor(m, plan)
    set_root_resource(None)
    pulumi.runtime.set_mocks(m, project="gpu-cluster", stack="test", preview=False, monitor=monitor)
    m.plan = plan  # type: ignore[attr-defined]
    m.monitor = monitor  # type: ignore[attr-defined]
    return m


def join_all(cfg, joiners: list[str], issued_at: datetime = ISSUED) -> dict[str, object]:
    """The pieces the joins need (hosts prepared, control plane, CNI, membership), then the joins."""
    first = cfg.control_planes[0].name
    preps = {n: prep(cfg, n) for n in [first, *joiners]}
    cp = control_plane(cfg, preps)
    cni = Cni("cni", CniArgs(kind=cfg.cni, pod_cidr=cfg.pod_cidr),
              opts=pulumi.ResourceOptions(provider=cp.provider))
    hosts = {h.name: h for h in cfg.hosts}
    membership = Membership("membership", MembershipArgs(
        control_plane=cp, members=tuple(hosts[n] for n in joiners), token_id=TOKEN_ID, issued_at=issued_at))
    joins = [
        NodeJoin(n, NodeJoinArgs(cluster=kubeadm_settings(cfg), host=hosts[n], control_plane=cp, membership=membership,
                                 private_key=key(), prepared=preps[n].done, network=[cni], bastion=cfg.bastion,
                                 upgrade=upgrade_policy(cfg),
                                 driver=cfg.nvidia_driver if hosts[n].is_gpu and hosts[n].role.value == "worker" else None))
        for n in joiners
    ]
    return {"cp": cp, "cni": cni, "membership": membership, "joins": joins}


def test_membership_token_secret_is_a_bootstrap_token_through_the_api(join_mocks):
    cfg = lab_config()
    seen = recording_inputs(join_mocks)
    build(lambda: join_all(cfg, ["gpu-1", "cpu-1"]))
    plan = join_mocks.plan

    component = one(plan, "membership", "gpucluster:lab:Membership")
    assert sorted(r.name for r in children(plan, component)) == [
        "membership-ca-hash", "membership-drain", "membership-token", "membership-token-secret",
        "membership-upgrader", "membership-upgrader", "membership-upgrader", "membership-upgrader-slots",
        "membership-upgrader-slots", "membership-upgrader-token"]
    token = one(plan, "membership-token", SECRET_TYPE)
    assert token.name == "membership-token" and token.parent == component.urn
    # Through the control plane's provider (the Kubernetes API), not an SSH session.
    provider = one(plan, "control-plane-k8s", "pulumi:providers:kubernetes")
    assert token.provider.startswith(provider.urn)
    assert token.inputs["metadata"] == {"name": f"bootstrap-token-{TOKEN_ID}", "namespace": "kube-system"}
    assert token.inputs["type"] == "bootstrap.kubernetes.io/token"
    # The secret half never shows in the plan: the whole data map is a secret.
    assert token.inputs["stringData"] == SECRET_MARKER
    assert TOKEN_SECRET not in repr([r.inputs for r in plan.resources])
    secret = one(plan, "membership-token-secret", "random:index/randomPassword:RandomPassword")
    assert secret.inputs["length"] == 16 and secret.inputs["upper"] is False and secret.inputs["special"] is False

    data = revealed(seen["membership-token"]["stringData"])
    assert data == {
        "token-id": TOKEN_ID,
        "token-secret": TOKEN_SECRET,
        "expiration": "2026-11-22T12:00:00Z",  # issued_at + JOIN_TOKEN_TTL (2 h), RFC 3339 UTC
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
        "description": data["description"],
    }
    # Every `up` replaces it (a fresh expiry; the token cleaner may have deleted the old one).
    assert join_mocks.monitor.replace_on_changes["membership-token"] == ["stringData"]
    assert token.delete_before_replace


def test_membership_node_upgrader_is_a_narrow_service_account_through_the_api(join_mocks):
    """What a joined node's own upgrade may do through the API (node_join.UPGRADER_*), and nothing
    on the control plane's sshd: drain and uncordon itself, hold an upgrade slot."""
    cfg = lab_config()
    build(lambda: join_all(cfg, ["gpu-1", "cpu-1"]))
    plan = join_mocks.plan
    provider = one(plan, "control-plane-k8s", "pulumi:providers:kubernetes")
    account = one(plan, "membership-upgrader", "kubernetes:core/v1:ServiceAccount")
    role = one(plan, "membership-upgrader", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
    binding = one(plan, "membership-upgrader", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")
    slots = one(plan, "membership-upgrader-slots", "kubernetes:rbac.authorization.k8s.io/v1:Role")
    slots_binding = one(plan, "membership-upgrader-slots", "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
    secret = one(plan, "membership-upgrader-token", SECRET_TYPE)
    for reg in (account, role, binding, slots, slots_binding, secret):
        assert reg.provider.startswith(provider.urn), reg.name
    assert account.inputs["metadata"] == {"name": "gpu-cluster-node-upgrader", "namespace": "kube-system"}
    rules = {(r["apiGroups"][0], r["resources"][0]): sorted(r["verbs"]) for r in role.inputs["rules"]}
    assert rules == {
        ("", "nodes"): ["get", "list", "patch", "watch"],
        ("", "pods"): ["get", "list"],
        ("", "pods/eviction"): ["create"],
        ("apps", "daemonsets"): ["get", "list"],
    }
    assert "delete" not in repr(role.inputs["rules"]) and "secrets" not in repr(role.inputs["rules"])
    assert slots.inputs["metadata"]["namespace"] == "kube-system"
    assert [(r["resources"], sorted(r["verbs"])) for r in slots.inputs["rules"]] == [
        (["configmaps"], ["create", "delete", "get", "list"])]
    subject = {"kind": "ServiceAccount", "name": "gpu-cluster-node-upgrader", "namespace": "kube-system"}
    assert binding.inputs["subjects"] == [subject] and slots_binding.inputs["subjects"] == [subject]
    assert binding.inputs["roleRef"]["kind"] == "ClusterRole" and slots_binding.inputs["roleRef"]["kind"] == "Role"
    assert secret.inputs["type"] == "kubernetes.io/service-account-token"
    assert secret.inputs["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "gpu-cluster-node-upgrader"}
    # The token reaches each host only on its steps' stdin, a secret.
    for step in ("gpu-1-join", "gpu-1-ready"):
        assert one(plan, step).inputs["stdin"] == SECRET_MARKER


def test_node_join_updates_drain_upgrade_and_uncordon_on_the_node_itself(join_mocks):
    cfg = lab_config(maxUnavailable=3)
    build(lambda: join_all(cfg, ["gpu-1"]))
    plan = join_mocks.plan
    join, ready = one(plan, "gpu-1-join"), one(plan, "gpu-1-ready")
    for reg in (join, ready):
        assert reg.inputs["connection"]["host"] == "192.0.2.11", reg.name  # the node, never cp-1
        assert "kubeadm reset" not in reg.inputs["update"], reg.name
        assert "\nuse_upgrader_credential\n" in reg.inputs["update"], reg.name
        assert reg.inputs["triggers"] == ["gpu-1", "192.0.2.11", "control-plane-init-id"], reg.name
    body = join.inputs["update"].split("\nuse_upgrader_credential\n", 1)[1]  # after the shared helpers
    order = [body.index(w) for w in ('acquire_slot "$node" 3 8640', '\ndrain_node "$node"', "kubeadm upgrade node",
                                     'driver_switch "$pkg"')]
    assert order == sorted(order)
    assert 'uncordon_node "$node"' in ready.inputs["update"]
    assert ready.inputs["connection"]["dialErrorLimit"] == 60  # it waits out the reboot
    assert "gpu-1-join" in deps(ready)  # its stdin carries the join's report


def test_membership_reads_the_ca_hash_once_and_drains_on_the_control_plane(join_mocks):
    cfg = lab_config()
    build(lambda: join_all(cfg, ["gpu-1", "cpu-1"]))
    plan = join_mocks.plan

    ca_hash, drain = one(plan, "membership-ca-hash"), one(plan, "membership-drain")
    for step in (ca_hash, drain):
        assert step.inputs["connection"]["host"] == "192.0.2.10"
        assert deps(step) == {"control-plane-init"}
        assert step.inputs["triggers"] == ["control-plane-init-id"]
        assert step.delete_before_replace
        assert not step.inputs.get("delete"), "nothing to undo (destroy resets the hosts)"
    assert "openssl x509" in ca_hash.inputs["create"] and "/etc/kubernetes/pki/ca.crt" in ca_hash.inputs["create"]
    # the entry point too (issue 34): should another control plane take over, it is not drained
    assert "want=('cp-1 192.0.2.10' 'cpu-1 192.0.2.12' 'gpu-1 192.0.2.11')" in drain.inputs["create"]
    assert "drain" in drain.inputs["create"]


def test_membership_of_a_single_host_cluster_leaves_no_join_token(join_mocks):
    cfg = lab_config(hosts=[host("cp-1", "192.0.2.10", "control-plane")])
    build(lambda: join_all(cfg, []))
    plan = join_mocks.plan
    component = one(plan, "membership", "gpucluster:lab:Membership")
    # Only the drain step: it still drains what an earlier `up` joined.
    assert [r.name for r in children(plan, component)] == ["membership-drain"]
    assert "want=('cp-1 192.0.2.10')" in one(plan, "membership-drain").inputs["create"]
    assert not plan.of_type(SECRET_TYPE) and not plan.of_type("random:index/randomPassword:RandomPassword")


def test_node_join_worker(join_mocks):
    cfg = lab_config()
    build(lambda: join_all(cfg, ["gpu-1"]))
    plan = join_mocks.plan

    component = one(plan, "gpu-1", "gpucluster:lab:NodeJoin")
    assert sorted(r.name for r in children(plan, component)) == ["gpu-1-join", "gpu-1-ready"]

    join = one(plan, "gpu-1-join")
    assert join.inputs["connection"]["host"] == "192.0.2.11"
    assert join.inputs["connection"]["privateKey"] == SECRET_MARKER
    assert join.inputs["stdin"] == SECRET_MARKER
    assert {"membership-token", "membership-ca-hash", "membership-drain", "gpu-1-kube-packages"} <= deps(join)
    # ... and so, transitively, on every step of the host's NodePrep.
    prep_steps = {r.name for r in children(plan, one(plan, "gpu-1", "gpucluster:lab:NodePrep"))}
    assert prep_steps == {f"gpu-1-{s}" for s in GPU_STEPS}
    assert prep_steps <= closure(plan, join)
    assert "kubeadm reset -f" in join.inputs["delete"]

    # Readiness is checked on the host itself, with the kubelet's credentials.
    ready = one(plan, "gpu-1-ready")
    assert ready.inputs["connection"]["host"] == "192.0.2.11"
    assert {"gpu-1-join", "cni-calico", "cni-ns"} <= deps(ready)
    assert "--kubeconfig /etc/kubernetes/kubelet.conf" in ready.inputs["create"]
    assert "node/gpu-1" in ready.inputs["create"]
    assert not ready.inputs.get("delete"), "removed hosts are drained by membership-drain"

    for reg in (join, ready):
        assert {"gpu-1", "192.0.2.11", "control-plane-init-id"} <= set(reg.inputs["triggers"]), reg.name
        # A rebuilt cluster (new init id) resets the node before it joins again.
        assert reg.delete_before_replace, reg.name


def test_node_join_stdin_is_the_join_config_with_token_and_ca_hash(join_mocks):
    """The stdin is masked in the plan; the mocks themselves see the unmasked value."""
    cfg = lab_config()
    seen = recording_inputs(join_mocks)
    build(lambda: join_all(cfg, ["gpu-1"]))

    stdin = revealed(seen["gpu-1-join"]["stdin"])
    gpu1 = next(h for h in cfg.hosts if h.name == "gpu-1")
    # The JoinConfiguration, then the node upgrader's token for the step's update (kubeadm_join drops it).
    config, _, upgrader = stdin.partition("upgrader-token: ")
    assert config == kubeadm.join_config(kubeadm_settings(cfg), gpu1, f"{TOKEN_ID}.{TOKEN_SECRET}", CA_HASH)
    assert upgrader == f"{UPGRADER_JWT}\n"
    assert revealed(seen["gpu-1-ready"]["stdin"]) == f"upgrader-token: {UPGRADER_JWT}\n"
    stdin = config
    doc = yaml.safe_load(stdin)
    assert doc["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": "192.0.2.10:6443", "token": f"{TOKEN_ID}.{TOKEN_SECRET}", "caCertHashes": [CA_HASH]}
    assert doc["nodeRegistration"]["name"] == "gpu-1"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in doc["nodeRegistration"]["taints"]
    assert "controlPlane" not in doc


def test_a_new_token_expiry_does_not_touch_joined_hosts(join_mocks):
    """Each `up` issues the token with a new expiry: the Secret changes, no join's stdin does."""
    cfg = lab_config()
    seen = recording_inputs(join_mocks)
    build(lambda: join_all(cfg, ["gpu-1"], issued_at=ISSUED))
    first_stdin = revealed(seen["gpu-1-join"]["stdin"])
    first_data = revealed(seen["membership-token"]["stringData"])
    first_plan = {r.name: r.inputs for r in join_mocks.plan.of_type(COMMAND)}

    later = join_mocks.plan.__class__(stack="test")
    join_mocks.monitor.plan = later
    set_root_resource(None)
    build(lambda: join_all(cfg, ["gpu-1"], issued_at=ISSUED + timedelta(days=90)))
    assert revealed(seen["gpu-1-join"]["stdin"]) == first_stdin
    assert revealed(seen["membership-token"]["stringData"])["expiration"] == "2027-02-20T12:00:00Z"
    assert {k: v for k, v in revealed(seen["membership-token"]["stringData"]).items() if k != "expiration"} == \
        {k: v for k, v in first_data.items() if k != "expiration"}
    assert {r.name: r.inputs for r in later.of_type(COMMAND)} == first_plan


def test_control_plane_joiners_share_one_certificate_key_uploaded_each_up(join_mocks):
    cfg = lab_config(
        hosts=[
            host("cp-1", "192.0.2.10", "control-plane"),
            host("cp-2", "192.0.2.20", "control-plane"),
            host("cp-3", "192.0.2.30", "control-plane"),
        ],
        controlPlaneEndpoint="k8s-api.lab.example:6443",
    )
    seen = recording_inputs(join_mocks)
    build(lambda: join_all(cfg, ["cp-2", "cp-3"]))
    plan = join_mocks.plan

    # One key for the cluster (32 random bytes, a secret), one upload step on the first control plane.
    (key_resource,) = plan.of_type("random:index/randomBytes:RandomBytes")
    assert key_resource.name == "membership-certificate-key" and key_resource.inputs["length"] == 32
    (certs,) = [r for r in plan.of_type(COMMAND) if r.name.endswith("-certs")]
    assert certs.name == "membership-certs"
    assert certs.inputs["connection"]["host"] == "192.0.2.10"
    assert "upload-certs" in certs.inputs["create"] and CERT_KEY not in certs.inputs["create"]
    assert certs.inputs["stdin"] == SECRET_MARKER
    stdin = revealed(seen["membership-certs"]["stdin"])
    assert stdin.splitlines()[0] == CERT_KEY
    # the time of the `up` rides along, so each `up` uploads again (kubeadm deletes uploads after 2 h)
    assert ISSUED.isoformat() in stdin
    assert {"control-plane-init", "membership-drain"} <= deps(certs)
    for name, address in (("cp-2", "192.0.2.20"), ("cp-3", "192.0.2.30")):
        component = one(plan, name, "gpucluster:lab:NodeJoin")
        assert sorted(r.name for r in children(plan, component)) == [f"{name}-join", f"{name}-ready"]
        join = one(plan, f"{name}-join")
        assert "membership-certs" in deps(join)
        assert join.inputs["stdin"] == SECRET_MARKER
        doc = yaml.safe_load(revealed(seen[f"{name}-join"]["stdin"]).split("upgrader-token:")[0])
        assert doc["controlPlane"]["certificateKey"] == CERT_KEY
        assert doc["controlPlane"]["localAPIEndpoint"]["advertiseAddress"] == address
        assert doc["discovery"]["bootstrapToken"]["apiServerEndpoint"] == "k8s-api.lab.example:6443"
        assert doc["discovery"]["bootstrapToken"]["caCertHashes"] == [CA_HASH]


def test_a_control_plane_added_months_later_joins_with_certificates_uploaded_that_up(join_mocks):
    """kubeadm deletes uploaded certificates after 2 hours: a later `up` uploads them again (the
    certs step's stdin changes, hence it runs), under the same key, so no joined host's stdin changes."""
    cfg = lab_config(hosts=[host("cp-1", "192.0.2.10", "control-plane"), host("cp-2", "192.0.2.20", "control-plane"),
                            host("cp-3", "192.0.2.30", "control-plane")], controlPlaneEndpoint="k8s-api.lab.example:6443")
    seen = recording_inputs(join_mocks)
    build(lambda: join_all(cfg, ["cp-2", "cp-3"], issued_at=ISSUED))
    first_join, first_certs = revealed(seen["cp-2-join"]["stdin"]), revealed(seen["membership-certs"]["stdin"])

    join_mocks.monitor.plan = join_mocks.plan.__class__(stack="test")
    set_root_resource(None)
    build(lambda: join_all(cfg, ["cp-2", "cp-3"], issued_at=ISSUED + timedelta(days=90)))
    later_certs = revealed(seen["membership-certs"]["stdin"])
    assert later_certs != first_certs and later_certs.splitlines()[0] == first_certs.splitlines()[0] == CERT_KEY
    assert revealed(seen["cp-2-join"]["stdin"]) == first_join


def test_a_cluster_of_one_control_plane_uploads_no_certificates(join_mocks):
    build(lambda: join_all(lab_config(), ["gpu-1"]))
    assert not join_mocks.plan.of_type("random:index/randomBytes:RandomBytes")
    assert not [r for r in join_mocks.plan.of_type(COMMAND) if r.name.endswith("-certs")]


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
    # The kubeconfig read and the provider do not follow an update of the init (only its id, which an
    # update keeps, and the certificate check's report).
    assert one(mocks.plan, "control-plane-kubeconfig").inputs["triggers"][0] == "control-plane-init-id"
    assert "certificates" in one(mocks.plan, "control-plane-certificates").name
    assert "triggers" in one(mocks.plan, "control-plane-certificates").inputs


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


