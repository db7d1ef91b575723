"""NodeJoin: one host joining the cluster. Membership: the cluster's side of every join, built once.

Membership (one per cluster, before any host joins; the token and the CA hash only when a host joins):
  token-secret (pulumi_random): the secret half of the cluster's join token, kept in state
  token   a bootstrap token, the Secret kube-system/bootstrap-token-<id>, created through the
          Kubernetes API (the control plane's provider); it expires JOIN_TOKEN_TTL after the
          program ran, and every `up` replaces it with a fresh expiry
  ca-hash (on the control plane, once): the SHA-256 pin of the cluster CA's public key
  drain   (on the control plane, once per change of the host list): drains and deletes the nodes
          that left the config or changed address, before any host joins or is reset
NodeJoin (per host):
  certs   (control-plane joiners only, on the control plane): uploads the control-plane
          certificates under a fresh key (kubeadm deletes them after 2 hours)
  join    (on the host): kubeadm join with the complete JoinConfiguration on stdin (endpoint,
          token, CA hash); delete = `kubeadm reset -f`
  ready   (on the host): waits for its own Node to be Ready, with the kubelet's credentials

Why: the control plane's sshd accepts at most 10 unauthenticated connections at once and refuses
more at random (sshd_config(5), MaxStartups 10:30:100); workers finish their preparation together,
so a step per worker on the control plane (as the token and Ready steps used to be) opened N
sessions there at the same moment. Now the control plane sees the same sessions whatever N is (its
own prep, init, kubeconfig and NFS steps, ca-hash, drain, and a certs step per extra control
plane); every worker step runs on the worker's own sshd or goes through the Kubernetes API.

Upgrades (upgrade.py): a new kubernetesVersion upgrades the first control plane in place (its init
step) and stages kubeadm of the new version on every host (kube-packages); a joined node's kubelet
is NOT upgraded yet: that needs the node drained, and draining from the control plane would bring
back a step per node there. Its steps do not change (no version in their inputs), the kubelet stays
at the version it joined with, which Kubernetes' version-skew policy allows (kubelets up to three
minors older than the API server, other control planes one); the init's upgrade refuses a version
that would leave a joined node outside that skew, before it changes anything (README "Upgrading").

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

import hashlib
import re
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pulumi_command import remote

from components.lab import kubeadm, scripts, ssh
from components.lab.control_plane import ControlPlane
from config.lab import Bastion, Host, Role

# How long the join token is valid after the program ran. It must cover the preparation of the
# slowest host in one `up` (driver, reboot, packages; longer on a slow mirror); a join that starts
# later fails with an expired token and the next `up` issues a fresh expiry.
JOIN_TOKEN_TTL = timedelta(hours=2)
# The group kubeadm binds to node bootstrapping (CSR creation, auto-approval, reading its config).
KUBEADM_NODE_GROUP = "system:bootstrappers:kubeadm:default-node-token"
BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"
BOOTSTRAP_TOKEN_PREFIX = "bootstrap-token-"


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
    members: tuple[Host, ...]  # every host that joins: all but the first control plane
    token_id: str  # join_token_id(project, stack)
    issued_at: datetime = field(default_factory=_now)  # the token expires JOIN_TOKEN_TTL after this


class Membership(pulumi.ComponentResource):
    token: pulumi.Output[str]  # "<id>.<secret>", a Pulumi secret
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
        drain = remote.Command(
            f"{name}-drain",
            connection=cp.connection,
            create=scripts.as_root(
                scripts.drain_removed_nodes([(h.name, str(h.address)) for h in args.members])
            ),
            triggers=triggers,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cp.init], delete_before_replace=True),
        )
        self.ready = [drain]
        self.token = pulumi.Output.secret("")
        self.ca_hash = pulumi.Output.from_input("")
        if not args.members:
            # A single-host cluster: no join token to leave valid. The drain step stays: it
            # drains what the last `up` joined.
            self.register_outputs({"tokenId": None, "caHash": None})
            return
        secret = random.RandomPassword(
            f"{name}-token-secret",
            length=16,
            upper=False,
            special=False,  # [a-z0-9]{16}
            opts=pulumi.ResourceOptions(parent=self),
        )
        expiration = args.issued_at + JOIN_TOKEN_TTL
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
                parent=self,
                provider=cp.provider,
                replace_on_changes=["stringData"],
                delete_before_replace=True,
            ),
        )
        ca_hash = remote.Command(
            f"{name}-ca-hash",
            connection=cp.connection,
            create=scripts.as_root(scripts.ca_cert_hash()),
            triggers=triggers,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cp.init], delete_before_replace=True),
        )
        self.token = pulumi.Output.secret(secret.result.apply(lambda s: f"{token_id}.{s}"))
        self.ca_hash = ca_hash.stdout.apply(lambda out: (out or "").strip())
        self.ready = [token, ca_hash, drain]
        self.register_outputs({"tokenId": token_id, "caHash": self.ca_hash})


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


class NodeJoin(pulumi.ComponentResource):
    ready: remote.Command

    def __init__(self, name: str, args: NodeJoinArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:NodeJoin", name, None, opts)
        host, cp, membership = args.host, args.control_plane, args.membership
        connection = ssh.connection(host, args.private_key, args.bastion)
        # Re-join when the host or the cluster it joins is replaced.
        triggers = [host.name, str(host.address), cp.init.id]
        after = [*membership.ready, *args.prepared]
        certificate_key: pulumi.Output[str] | None = None
        if host.role is Role.CONTROL_PLANE:
            certs = remote.Command(
                f"{name}-certs",
                connection=cp.connection,
                create=scripts.as_root(scripts.upload_control_plane_certs()),
                # No delete: kubeadm deletes the uploaded certificates after 2 hours.
                logging=remote.Logging.NONE,
                triggers=triggers,
                # Uploaded only once this host is prepared, well inside the 2 hours.
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[cp.init, *args.prepared],
                    additional_secret_outputs=["stdout"],
                    delete_before_replace=True,
                ),
            )
            certificate_key = certs.stdout.apply(lambda out: (out or "").strip())
            after.append(certs)
        join_stdin: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(membership.token, membership.ca_hash, certificate_key).apply(
                lambda v: kubeadm.join_config(args.cluster, host, v[0], v[1], v[2])
            )
        )
        join = remote.Command(
            f"{name}-join",
            connection=connection,
            create=scripts.as_root(scripts.kubeadm_join()),
            delete=scripts.as_root(scripts.kubeadm_reset()),
            stdin=join_stdin,
            logging=remote.Logging.STDERR,
            triggers=triggers,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after, delete_before_replace=True),
        )
        self.ready = remote.Command(
            f"{name}-ready",
            connection=connection,
            create=scripts.as_root(scripts.node_ready(host.name)),
            triggers=triggers,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[join, *args.network], delete_before_replace=True),
        )
        self.register_outputs({"node": host.name})
