"""Upgrades in place: what runs when kubernetesVersion or the NVIDIA driver changes on a running lab
cluster (docs/operations/upgrading.md), and the policy that bounds it (UpgradePolicy).

How Pulumi decides, read in pulumi-command v1.2.1 (requirements.txt) and the provider framework it
is built on (pulumi-go-provider v1.3.0, its go.mod):
  - provider/pkg/provider/common/inputs.go: `triggers` is tagged `provider:"replaceOnChanges"`;
    create, update, delete (and remote/command.go: stdin, environment, logging, connection) are not;
  - pulumi-go-provider infer/resource.go, `derivedResourceController.Diff` -> `diff`: a change in a
    replaceOnChanges field is a replace (delete, then create: every step here is
    delete_before_replace), any other changed input an update;
  - provider/pkg/provider/remote/commandController.go, `Command.Update`: runs the `update` command
    if one is set, else `create` again, and the new stdout replaces the old one;
  - remote/commandOutputs.go, `run`: `environment` is sent with SSH setenv, which sshd refuses
    unless AcceptEnv allows it; so versions travel in the command text and stdin instead.
So `triggers` hold only what needs a new cluster or host: a host's name and address; for the
control plane's init also the API endpoint and the pod and service ranges (the kubeadm config with
the version is its stdin); NodeJoin's steps also the init's id, which an update keeps. A version or
driver bump changes the scripts and stdin, hence an update, never a replace: nothing on these paths
runs `kubeadm reset`.

What each step's `update` does (scripts.py), in the order Pulumi runs them (the dependencies that
first-time provisioning already has, so nothing is added to its critical path):
  every host      kube-packages: the minor's pkgs.k8s.io repository and kubeadm of the new version
                  (kubelet and kubectl stay)                                  kube_packages_stage
  a worker        nvidia-driver: nothing yet, the node is not drained          nvidia_driver_deferred
  a control plane nvidia-driver: takes an upgrade slot, drains itself, new branch, reboot;
                  driver-ready: GPUs back, uncordoned    nvidia_driver_self_upgrade, driver_ready_uncordon
  first control   init: refuses a version some joined node's kubelet would be too old for (the
  plane           version-skew policy), then etcd snapshot kept on the host, kubeadm upgrade
                  plan/apply, then this node drained for its kubelet and kubectl, uncordoned
                                                                              kubeadm_upgrade_apply
  joined node     join (ON THE NODE, stdin: its JoinConfiguration and the node upgrader's token):
                  takes an upgrade slot and drains itself if its kubelet or (worker) driver must
                  change, then kubeadm upgrade node, kubelet and kubectl; a worker's new driver
                  branch and a reboot                                         node_self_upgrade
                  ready (ON THE NODE, stdin: the token and the join's report): waits for its own
                  reboot and GPUs, uncordons itself, frees the slot           node_self_upgrade_done
A joined node's drain and uncordon need API rights its kubelet does not have (evictions, cordon,
the slot ConfigMaps). They come from the node upgrader, a ServiceAccount that Membership creates
through the Kubernetes API with only those rights (node_join.UPGRADER_*); its token reaches the node
only on those two steps' stdin, and the kubeconfig built from it lives in /run for the step. So an
upgrade, like a first `up`, opens no control-plane SSH session per node (join at scale,
node_join.py). Every joined node's steps wait for the control plane's init (through Membership), so
the first control plane is upgraded first, as kubeadm requires; a worker whose kubelet must change
also waits, in its drain, until every control plane's kubelet runs the new version (a kubelet must
never be newer than an API server it may reach).

maxUnavailable is enforced on the cluster, not in Pulumi's graph: a drain first takes one of
`max_unavailable` slots (ConfigMaps in kube-system that only one node can create) and the ready
step frees it. An edge from one group of nodes to the next would hold on every operation,
first-time provisioning included, and make `up` of a new cluster wait for the joins one group
after another (bench/critical_path.py's depth would grow with the number of hosts).

Does not manage: containerd upgrades (its step runs its create again when the pause image of the
new minor differs: config rewritten, containerd restarted; running containers survive that),
restoring an etcd snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

# How long a node waits for an upgrade slot, in 10-second tries: 24 hours, time for every other node
# to be drained, upgraded and rebooted ahead of it in a large lab. Fixed, not derived from the
# number of hosts: it is part of the scripts, and adding a host must not change every node's steps.
SLOT_TRIES = 8640


@dataclass(frozen=True)
class UpgradePolicy:
    """How in-place upgrades run (stacks/lab.py fills it from the lab config)."""

    max_unavailable: int = 1  # nodes drained at once; control planes take one at a time
    slot_tries: int = SLOT_TRIES
