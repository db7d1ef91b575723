"""NodeJoin: one host joining the cluster. Membership: the cluster's side of every join, built once.

Membership (one per cluster, before any host joins; the token, the CA hash and the upgrader only
when a host joins):
  token-secret (pulumi_random): the secret half of the cluster's join token, kept in state
  token   a bootstrap token, the Secret kube-system/bootstrap-token-<id>, created through the
          Kubernetes API (the control plane's provider); it expires JOIN_TOKEN_TTL after the
          program ran, and every `up` replaces it with a fresh expiry
  ca-hash (on the control plane, once): the SHA-256 pin of the cluster CA's public key
  drain   (on the control plane, once per change of the host list): drains and deletes the nodes
          that left the config or changed address, and removes the etcd member of each removed
          control plane (one at a time), before any host joins or is reset
  certificate-key (pulumi_random, with control-plane members only): the cluster's certificate
          key, 32 random bytes as hex, a Pulumi secret kept in state
  certs   (on the control plane, every `up`, with control-plane members only): uploads the
          control-plane certificates encrypted with that key; kubeadm deletes the upload after 2
          hours, so the key is good for 2 hours after each `up`, as the key of `kubeadm init
          --upload-certs` is, and a control plane added later joins with the same key
  upgrader (Kubernetes API): the ServiceAccount gpu-cluster-node-upgrader, its ClusterRole and
          kube-system Role (UPGRADER_CLUSTER_RULES, UPGRADER_SLOT_RULE), and a token Secret for it;
          a joined node's upgrade steps receive the token on stdin
NodeJoin (per host):
  join    (on the host): kubeadm join with the complete JoinConfiguration on stdin (endpoint,
          token, CA hash); delete = `kubeadm reset -f`; update = the node's own upgrade
  ready   (on the host): waits for its own Node to be Ready, with the kubelet's credentials;
          update = waits for the upgraded node, uncordons it

Why: the control plane's sshd accepts at most 10 unauthenticated connections at once and refuses
more at random (sshd_config(5), MaxStartups 10:30:100); workers finish their preparation together,
so a step per worker on the control plane (as the token and Ready steps used to be) opened N
sessions there at the same moment. Now the control plane sees the same sessions whatever N is (its
own prep, init, kubeconfig and NFS steps, ca-hash, drain, and with more than one control plane
one certs step); every worker step runs on the worker's own sshd or goes through the Kubernetes API.

Upgrades (upgrade.py): a joined node upgrades itself. Its join step's update drains it (holding
one of maxUnavailable slots), runs `kubeadm upgrade node`, the kubelet and kubectl (a worker also
its new driver branch and a reboot); its ready step's update waits for it and uncordons it. Both
run on the node with the node upgrader's token (UPGRADER_*, a ServiceAccount Membership creates
through the API), so an upgrade opens no control-plane session per node either.

The token. Its id is derived from the project and stack (public by design: it names the Secret),
its secret half is random and stable, so the JoinConfiguration each host receives does not change
from one `up` to the next: an already-joined host's join step is not run again. The expiry is not
in that file; it lives only in the Secret, which every `up` replaces (replace_on_changes on its
data, delete before replace): a host added months later joins with a token that is valid for
JOIN_TOKEN_TTL after that `up` began. Replacing rather than updating matters because the
controller-manager's token cleaner deletes an expired token Secret: pulumi-kubernetes updates an
object by reading it first (and fails when it is gone), but deleting a missing object succeeds.
The token grants what kubeadm's own join tokens grant (auth-extra-groups
system:bootstrappers:kubeadm:default-node-token: TLS bootstrap of a kubelet client certificate).

Removal. A host removed from the config (or whose address changes) is drained and its Node deleted
by `drain` before its join step is deleted (`kubeadm reset`) or replaced: removed resources are
deleted after every other step, and every join waits for `drain`. `pulumi destroy` resets the
hosts without draining them: every node goes, so there is nowhere to move pods to (a drain could
only wait out PodDisruptionBudgets), and the Jobs that wait for the nodes (gate, acceptance,
training) are deleted, gracefully, before the hosts are reset.

All steps are replaced delete-before-replace; their triggers include the control plane's init, so
a rebuilt cluster re-joins every node. Changing the CIDRs, the endpoint or the first control plane
rebuilds the cluster (see control_plane.py).

Upgrading a cluster made by the earlier layout (a token and a Ready step per host on the control
plane): each host's `<host>-token` is deleted (it has no delete command), `<host>-ready` keeps its
URN and moves to the host (pulumi-command replaces only on `triggers`; a new connection is an
update, so the old delete, a drain, does not run), and `<host>-join` gets its new stdin as an
update (the script finds the node joined and does nothing).
"""

from __future__ import annotations

import base64
import hashlib
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pulumi_command import remote

from components import versions
from components.lab import kubeadm, scripts, ssh
from components.lab.control_plane import ControlPlane
from components.lab.gone_hosts import remove_gone_step
from components.lab.kube_vip import kube_vip_step
from components.lab.upgrade import UpgradePolicy
from config.control_planes import KubeVip
from config.lab import Bastion, Host, NvidiaDriver, Role

# How long the join token is valid after the program ran. It must cover the preparation of the
# slowest host in one `up` (driver, reboot, packages; longer on a slow mirror); a join that starts
# later fails with an expired token and the next `up` issues a fresh expiry.
JOIN_TOKEN_TTL = timedelta(hours=2)
# The group kubeadm binds to node bootstrapping (CSR creation, auto-approval, reading its config).
KUBEADM_NODE_GROUP = "system:bootstrappers:kubeadm:default-node-token"
BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"
BOOTSTRAP_TOKEN_PREFIX = "bootstrap-token-"
# The node upgrader: what a joined node's own upgrade needs from the API (upgrade.py), no more.
UPGRADER = "gpu-cluster-node-upgrader"
UPGRADER_NAMESPACE = "kube-system"
UPGRADER_CLUSTER_RULES = (
    # get/list/watch: read its Node (kubelet version, GFD driver label, boot id, GPUs), `kubectl wait`,
    # the control planes' versions; patch: cordon, uncordon, the cordoned-by annotation
    ("", "nodes", ("get", "list", "watch", "patch")),
    # kubectl drain lists the node's pods in every namespace...
    ("", "pods", ("get", "list")),
    # ... evicts them (PodDisruptionBudgets are honoured; no plain delete)...
    ("", "pods/eviction", ("create",)),
    # ... and looks up the DaemonSet of each DaemonSet pod (--ignore-daemonsets)
    ("apps", "daemonsets", ("get", "list")),
)
# The upgrade slots: ConfigMaps gpu-cluster-upgrade-slot-<i>, in kube-system only. list: who holds
# which (a Role cannot narrow create or list by name); get and delete: free a slot.
UPGRADER_SLOT_RULE = ("", "configmaps", ("create", "get", "list", "delete"))


def join_token_id(project: str, stack: str) -> str:
    """The public half of the join token, [a-z0-9]{6}: stable per stack, so the Secret's name is
    known at plan time."""
    alphabet = string.ascii_lowercase + string.digits
    digest = hashlib.sha256(f"gpu-cluster/{project}/{stack}".encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:6])


def bootstrap_token_data(token_id: str, token_secret: str, expiration: datetime) -> dict[str, str]:
    """The data of a bootstrap token Secret (kubernetes.io, Authenticating with Bootstrap Tokens)."""
    return {
        "token-id": token_id,
        "token-secret": token_secret,
        "expiration": expiration.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",  # kubeadm's discovery checks cluster-info's signature
        "auth-extra-groups": KUBEADM_NODE_GROUP,
        "description": "gpu-cluster: joins the lab's hosts; every pulumi up renews its expiry",
    }


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass(frozen=True)
class MembershipArgs:
    control_plane: ControlPlane
    members: tuple[Host, ...]  # every host that joins: all but the one kubeadm init ran on
    token_id: str  # join_token_id(project, stack)
    issued_at: datetime = field(default_factory=_now)  # the token expires JOIN_TOKEN_TTL after this
    # hosts[].gone: their etcd members and Nodes removed from the control plane (gone_hosts.py).
    gone: tuple[Host, ...] = ()
    # Control planes the last `up` deployed and this config drops (the stack output `deployed`):
    # drained and removed from etcd by name even when the drain's host list is on a new entry point.
    former: tuple[str, ...] = ()
    kubernetes_minor: str = ""  # the etcd version of the removal's etcdctl (with gone hosts)


class Membership(pulumi.ComponentResource):
    token: pulumi.Output[str]  # "<id>.<secret>", a Pulumi secret
    certificate_key: pulumi.Output[str] | None  # with control-plane members: 64 hex digits, a Pulumi secret
    upgrader_token: pulumi.Output[str]  # the node upgrader's ServiceAccount token, a Pulumi secret
    ca_hash: pulumi.Output[str]  # "sha256:<hex>"
    ready: list[pulumi.Resource]  # what every join waits for

    def __init__(self, name: str, args: MembershipArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:Membership", name, None, opts)
        cp = args.control_plane
        token_id = args.token_id
        if not re.fullmatch(r"[a-z0-9]{6}", token_id):
            raise ValueError(f"join token id {token_id!r} is not [a-z0-9]{{6}}")
        # A new cluster has a new CA (and nodes to forget): read and record again.
        triggers = [cp.init.id]
        drain = _drain_removed(name, self, cp, tuple({h.name: h for h in (cp.host, *args.members)}.values()),
                               args.former, triggers)
        if args.gone:
            # Before any join: a dead member's replacement joins an etcd that no longer counts it.
            drain = remove_gone_step(name, self, cp.connection, args.gone, args.kubernetes_minor, triggers, [drain])
        self.ready = [drain]
        self.certificate_key = None
        self.token = pulumi.Output.secret("")
        self.ca_hash = pulumi.Output.from_input("")
        self.upgrader_token = pulumi.Output.secret("")
        if not args.members:
            # A single-host cluster: no join token to leave valid. The drain step stays: it
            # drains what the last `up` joined.
            self.register_outputs({"tokenId": None, "caHash": None})
            return
        self.token, token = _bootstrap_token(name, self, cp, token_id, args.issued_at + JOIN_TOKEN_TTL)
        ca_hash = remote.Command(
            f"{name}-ca-hash",
            connection=cp.connection,
            create=scripts.as_root(scripts.ca_cert_hash()),
            triggers=triggers,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cp.init], delete_before_replace=True),
        )
        self.ca_hash = ca_hash.stdout.apply(lambda out: (out or "").strip())
        self.upgrader_token = _node_upgrader(name, self, cp)
        self.ready = [token, ca_hash, drain]
        if any(h.role is Role.CONTROL_PLANE for h in args.members):
            self.certificate_key, certs = _control_plane_certs(name, self, cp, args.issued_at, [drain])
            self.ready.append(certs)
        self.register_outputs({"tokenId": token_id, "caHash": self.ca_hash})


def _drain_removed(name: str, parent: pulumi.Resource, cp: ControlPlane, hosts: tuple[Host, ...],
                   former: tuple[str, ...], triggers: Sequence[object]) -> remote.Command:
    """On the entry point: drains and deletes the nodes that left the config or changed address.
    `hosts` names the entry point too (issue 34): when it is new, the old one is not kept in it."""
    return remote.Command(
        f"{name}-drain",
        connection=cp.connection,
        create=scripts.as_root(
            scripts.drain_removed_nodes([(h.name, str(h.address)) for h in hosts], cp.host.name, former)
        ),
        triggers=triggers,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[cp.init], delete_before_replace=True),
    )


def _control_plane_certs(name: str, parent: pulumi.Resource, cp: ControlPlane, issued_at: datetime,
                         after: list[pulumi.Resource]) -> tuple[pulumi.Output[str], remote.Command]:
    """The cluster's certificate key (a Pulumi secret) and the step that uploads the control-plane
    certificates under it on the first control plane. The upload runs at every `up` (its stdin
    carries the time, hidden like the key), so the certificates are there for 2 hours after each."""
    key = random.RandomBytes(f"{name}-certificate-key", length=32, opts=pulumi.ResourceOptions(parent=parent))
    hex_key: pulumi.Output[str] = key.hex.apply(lambda h: h or "")  # unknown during a preview
    certificate_key: pulumi.Output[str] = pulumi.Output.secret(hex_key)
    stdin: pulumi.Output[str] = pulumi.Output.secret(
        pulumi.Output.concat(certificate_key, "\n# ", issued_at.isoformat(), "\n"))
    certs = remote.Command(
        f"{name}-certs",
        connection=cp.connection,
        create=scripts.as_root(scripts.upload_control_plane_certs()),
        stdin=stdin,
        # No delete: kubeadm deletes the uploaded certificates after 2 hours.
        logging=remote.Logging.STDERR,
        triggers=[cp.init.id],
        # After the drain: a removed control plane's etcd member is gone before another joins.
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[cp.init, *after], delete_before_replace=True),
    )
    return certificate_key, certs


def _bootstrap_token(name: str, parent: pulumi.Resource, cp: ControlPlane, token_id: str,
                     expiration: datetime) -> tuple[pulumi.Output[str], k8s.core.v1.Secret]:
    """The join token ("<id>.<secret>", a Pulumi secret) and its bootstrap token Secret, which every
    `up` replaces with a fresh expiry (see the module docstring)."""
    secret = random.RandomPassword(
        f"{name}-token-secret",
        length=16,
        upper=False,
        special=False,  # [a-z0-9]{16}
        opts=pulumi.ResourceOptions(parent=parent),
    )
    data: pulumi.Output[dict[str, str]] = pulumi.Output.secret(
        secret.result.apply(lambda s: bootstrap_token_data(token_id, s, expiration))
    )
    token = k8s.core.v1.Secret(
        f"{name}-token",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=BOOTSTRAP_TOKEN_PREFIX + token_id, namespace="kube-system"),
        type=BOOTSTRAP_TOKEN_TYPE,
        string_data=data,
        # A fresh expiry every `up`, by replacement (see the module docstring); the name is
        # stable, so the old Secret goes first.
        opts=pulumi.ResourceOptions(
            parent=parent,
            provider=cp.provider,
            replace_on_changes=["stringData"],
            delete_before_replace=True,
        ),
    )
    return pulumi.Output.secret(secret.result.apply(lambda s: f"{token_id}.{s}")), token


def _node_upgrader(name: str, parent: pulumi.Resource, cp: ControlPlane) -> pulumi.Output[str]:
    """The node upgrader's ServiceAccount, its rights (UPGRADER_CLUSTER_RULES, UPGRADER_SLOT_RULE)
    and a long-lived token for it, all through the Kubernetes API; the token, a Pulumi secret."""
    opts = pulumi.ResourceOptions(parent=parent, provider=cp.provider)
    meta = k8s.meta.v1.ObjectMetaArgs(name=UPGRADER, namespace=UPGRADER_NAMESPACE)
    account = k8s.core.v1.ServiceAccount(f"{name}-upgrader", metadata=meta, opts=opts)
    subject = k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=UPGRADER, namespace=UPGRADER_NAMESPACE)

    def rules(*table: tuple[str, str, tuple[str, ...]]) -> list[k8s.rbac.v1.PolicyRuleArgs]:
        return [k8s.rbac.v1.PolicyRuleArgs(api_groups=[g], resources=[r], verbs=list(v)) for g, r, v in table]

    role = k8s.rbac.v1.ClusterRole(f"{name}-upgrader", metadata=k8s.meta.v1.ObjectMetaArgs(name=UPGRADER),
                                   rules=rules(*UPGRADER_CLUSTER_RULES), opts=opts)
    binding = k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-upgrader", metadata=k8s.meta.v1.ObjectMetaArgs(name=UPGRADER), subjects=[subject],
        role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=UPGRADER),
        opts=opts)
    slots = k8s.rbac.v1.Role(f"{name}-upgrader-slots", metadata=meta, rules=rules(UPGRADER_SLOT_RULE), opts=opts)
    slots_binding = k8s.rbac.v1.RoleBinding(
        f"{name}-upgrader-slots", metadata=meta, subjects=[subject],
        role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=UPGRADER),
        opts=opts)
    # A token Secret: the token controller fills in data.token, and pulumi-kubernetes waits for it
    # (its awaiter for kubernetes.io/service-account-token Secrets, pulumi-kubernetes#2048).
    secret = k8s.core.v1.Secret(
        f"{name}-upgrader-token",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=f"{UPGRADER}-token", namespace=UPGRADER_NAMESPACE,
            annotations={"kubernetes.io/service-account.name": UPGRADER},
        ),
        type="kubernetes.io/service-account-token",
        opts=pulumi.ResourceOptions(parent=parent, provider=cp.provider,
                                    depends_on=[account, role, binding, slots, slots_binding],
                                    additional_secret_outputs=["data"]),
    )
    return pulumi.Output.secret(secret.data.apply(
        lambda data: base64.b64decode((data or {}).get("token") or "").decode()))


@dataclass(frozen=True)
class NodeJoinArgs:
    cluster: kubeadm.KubeadmSettings
    host: Host
    control_plane: ControlPlane
    membership: Membership
    private_key: pulumi.Output[str]
    prepared: list[pulumi.Resource]  # NodePrep.done of this host
    network: list[pulumi.Resource]  # the CNI: nodes are Ready only once it runs
    bastion: Bastion | None = None
    upgrade: UpgradePolicy = UpgradePolicy()
    # A worker's driver that node prep installs: upgraded here, drained (a control plane's
    # driver is upgraded by its NodePrep, which drains itself).
    driver: NvidiaDriver | None = None
    # A control plane with kubeVip: kube-vip's static pod, written after the join (kube_vip.py).
    kube_vip: KubeVip | None = None
    # What the join waits for besides the cluster and this host's prep: a control plane waits for
    # the one before it to be Ready, so etcd gains one member at a time (stacks/lab.py).
    after: list[pulumi.Resource] = field(default_factory=list)


class NodeJoin(pulumi.ComponentResource):
    host: Host
    ready: remote.Command

    def __init__(self, name: str, args: NodeJoinArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:NodeJoin", name, None, opts)
        host, cp, membership = args.host, args.control_plane, args.membership
        self.host = host
        # Re-join when the host or the cluster it joins is replaced.
        triggers = [host.name, str(host.address), cp.init.id]
        after = [*membership.ready, *args.prepared, *args.after]
        is_cp = host.role is Role.CONTROL_PLANE
        certificate_key = membership.certificate_key if is_cp else None
        driver = (args.driver.branch, args.driver.version) if args.driver is not None and not is_cp else None
        upgrader = pulumi.Output.concat("upgrader-token: ", membership.upgrader_token, "\n")
        join = _join(name, self, args, _join_stdin(args, certificate_key, upgrader), driver, triggers, after)
        self.ready = _node_ready(name, self, args, upgrader, join, driver, triggers)
        if is_cp and args.kube_vip is not None:
            # After the join: its preflight refuses a non-empty /etc/kubernetes/manifests (kube_vip.py).
            kube_vip_step(name, ssh.connection(host, args.private_key, args.bastion), args.kube_vip, self, [join])
        self.register_outputs({"node": host.name})


def _join_stdin(args: NodeJoinArgs, certificate_key: pulumi.Output[str] | None,
                upgrader: pulumi.Output[str]) -> pulumi.Output[str]:
    """The join step's stdin, a Pulumi secret: the complete JoinConfiguration, then the upgrader's
    token line for the update."""
    membership = args.membership
    return pulumi.Output.secret(pulumi.Output.concat(
        pulumi.Output.all(membership.token, membership.ca_hash, certificate_key).apply(
            lambda v: kubeadm.join_config(args.cluster, args.host, v[0], v[1], v[2]).rstrip("\n") + "\n"
        ),
        upgrader,  # for the update only: kubeadm_join drops the line
    ))


def _join(name: str, parent: pulumi.Resource, args: NodeJoinArgs, stdin: pulumi.Output[str],
          driver: tuple[str, str | None] | None, triggers: Sequence[object],
          after: list[pulumi.Resource]) -> remote.Command:
    """On the host: kubeadm join; its update is the node's own upgrade, its delete `kubeadm reset`."""
    host = args.host
    return remote.Command(
        f"{name}-join",
        connection=ssh.connection(host, args.private_key, args.bastion),
        create=scripts.as_root(scripts.kubeadm_join()),
        # An upgrade, on the node itself: slot, drain, kubeadm upgrade node, kubelet, driver, reboot.
        update=scripts.as_root(scripts.node_self_upgrade(
            host.name, args.cluster.kubernetes_version, versions.KUBE_PACKAGE_REVISION,
            control_plane=host.role is Role.CONTROL_PLANE, driver=driver,
            slots=args.upgrade.max_unavailable, slot_tries=args.upgrade.slot_tries,
        )),
        delete=scripts.as_root(scripts.kubeadm_reset()),
        stdin=stdin,
        logging=remote.Logging.STDERR,
        triggers=triggers,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=after, delete_before_replace=True),
    )


def _node_ready(name: str, parent: pulumi.Resource, args: NodeJoinArgs, upgrader: pulumi.Output[str],
                join: remote.Command, driver: tuple[str, str | None] | None,
                triggers: Sequence[object]) -> remote.Command:
    """On the host: waits for its Node to be Ready; its update waits for the upgraded node and
    uncordons it."""
    host = args.host
    return remote.Command(
        f"{name}-ready",
        # The update waits here for the node to come back from the reboot its join asked for.
        connection=ssh.connection(host, args.private_key, args.bastion, survive_reboot=True),
        create=scripts.as_root(scripts.node_ready(host.name)),
        update=scripts.as_root(scripts.node_self_upgrade_done(
            host.name, args.cluster.kubernetes_version, driver, host.gpus if driver else 0)),
        # The update's: the upgrader's token and the join's report (the reboot to wait for).
        stdin=pulumi.Output.secret(pulumi.Output.all(upgrader, join.stdout).apply(lambda v: v[0] + (v[1] or ""))),
        triggers=triggers,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[join, *args.network], delete_before_replace=True),
    )
