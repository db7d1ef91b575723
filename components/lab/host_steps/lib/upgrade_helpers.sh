#!/usr/bin/env bash
# The functions every upgrade script carries after the prelude (scripts.py writes the update
# commands of the lab's steps with them): the kubectl credential, version parsing and the skew
# refusals (exit 2 naming gpu-cluster:kubernetesVersion), the upgrade slots (maxUnavailable),
# drain and uncordon, the driver switch and the reboot. Filled in: nothing.
# render/drain_guards.py recognises an upgrade script by the first line below and knows that
# drain_node is called only behind a version comparison.

readonly SLOT_PREFIX=gpu-cluster-upgrade-slot-
readonly CORDONED_BY=gpu-cluster.io/cordoned-by

# k ARGS...: kubectl as the cluster admin (on a control plane), or, on a joined node that upgrades
# itself, as the node upgrader (use_upgrader_credential).
KUBE_CREDENTIAL=/etc/kubernetes/admin.conf
k() {
  kubectl --kubeconfig "$KUBE_CREDENTIAL" "$@"
}

# use_upgrader_credential: on a joined node, k talks to the API server the kubelet uses, trusting
# the cluster CA, with the node upgrader's ServiceAccount token from stdin (a line
# `upgrader-token: <jwt>`; node_join.py). The kubeconfig lives in a 0700 directory under /run (tmpfs) and
# is removed on exit. Sets STDIN_REST: what stdin held besides the token.
use_upgrader_credential() {
  local input token server dir
  input=$(cat)
  token=$(sed -n 's/^upgrader-token: //p' <<<"$input" | tail -n 1)
  # shellcheck disable=SC2034  # read by node_self_upgrade_done (the join's report)
  STDIN_REST=$(grep -v '^upgrader-token: ' <<<"$input" || true)
  if [ -z "$token" ]; then
    echo "no node upgrader token on stdin" >&2
    exit 1
  fi
  server=$(sed -n 's/^ *server: *//p' /etc/kubernetes/kubelet.conf | head -n 1)
  if [ -z "$server" ] || [ ! -s /etc/kubernetes/pki/ca.crt ]; then
    echo "no API server in /etc/kubernetes/kubelet.conf or no /etc/kubernetes/pki/ca.crt: is this node joined?" >&2
    exit 1
  fi
  dir=$(mktemp -d -p "${TMPDIR:-/run}" gpu-cluster-upgrader.XXXXXX)
  chmod 0700 "$dir"
  # shellcheck disable=SC2064  # the directory is known now
  trap "rm -rf '$dir'" EXIT
  KUBE_CREDENTIAL=$dir/kubeconfig
  (
    umask 077
    printf '%s\n' "apiVersion: v1" "kind: Config" "clusters:" "- name: cluster" "  cluster:" \
      "    server: $server" "    certificate-authority: /etc/kubernetes/pki/ca.crt" "users:" \
      "- name: upgrader" "  user:" "    token: $token" "contexts:" "- name: upgrader" "  context:" \
      "    cluster: cluster" "    user: upgrader" "current-context: upgrader" >"$KUBE_CREDENTIAL"
  )
}

# installed PKG: the Debian version of PKG if it is installed, else nothing.
installed() {
  local out
  out=$(dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true)
  case $out in
    "install ok installed "*) printf '%s\n' "${out#install ok installed }" ;;
  esac
}

# bare_version V: 'v1.34.2' or '1.34.2-1.1' -> 1.34.2
bare_version() {
  local v=${1#v}
  printf '%s\n' "${v%%-*}"
}

# refuse_skew HAVE WANT WHAT: exit 2 on a downgrade or a skipped minor (kubeadm upgrades one minor
# at a time and never down).
refuse_skew() {
  local have want what=$3 hmaj hmin hpat wmaj wmin wpat
  have=$(bare_version "$1")
  want=$(bare_version "$2")
  IFS=. read -r hmaj hmin hpat <<<"$have"
  IFS=. read -r wmaj wmin wpat <<<"$want"
  if ((wmaj * 1000000 + wmin * 1000 + wpat < hmaj * 1000000 + hmin * 1000 + hpat)); then
    echo "gpu-cluster:kubernetesVersion: $what runs v$have; v$want is older and kubeadm cannot downgrade (set $have or newer)" >&2
    exit 2
  fi
  if ((wmaj != hmaj || wmin > hmin + 1)); then
    echo "gpu-cluster:kubernetesVersion: $what runs v$have; v$want skips minor $hmaj.$((hmin + 1)) and kubeadm upgrades one minor at a time" >&2
    exit 2
  fi
}

# refuse_node_skew SELF WANT: exit 2 when WANT would leave another node's kubelet outside Kubernetes'
# version-skew policy (joined nodes keep their kubelet, README "Upgrading"): a control plane's at
# most one minor older than the API server, any other node's at most three.
refuse_node_skew() {
  local self=$1 wmaj wmin name ver maj min limit cps too_old=
  IFS=. read -r wmaj wmin _ <<<"$(bare_version "$2")"
  cps=$(k get nodes -l node-role.kubernetes.io/control-plane \
    -o jsonpath='{range .items[*]}{.metadata.name}={.status.nodeInfo.kubeletVersion}{"\n"}{end}')
  while IFS='=' read -r name ver; do
    if [ -z "$name" ] || [ -z "$ver" ] || [ "$name" = "$self" ]; then
      continue
    fi
    limit=3
    if grep -q "^$name=" <<<"$cps"; then
      limit=1
    fi
    IFS=. read -r maj min _ <<<"$(bare_version "$ver")"
    if ((maj != wmaj || wmin - min > limit)); then
      too_old="$too_old $name ($ver, at most $limit older)"
    fi
  done < <(k get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.nodeInfo.kubeletVersion}{"\n"}{end}')
  if [ -n "$too_old" ]; then
    echo "gpu-cluster:kubernetesVersion: v$2 would leave kubelets outside the version-skew policy:$too_old; upgrade those nodes first (kubectl drain, kubeadm upgrade node, kubelet and kubectl, kubectl uncordon; README Upgrading)" >&2
    exit 2
  fi
}

# wait_api: until the API server answers (it restarts during upgrades and after a reboot).
wait_api() {
  local n
  for ((n = 0; n < 60; n++)); do
    if k get --raw=/readyz >/dev/null 2>&1; then
      return 0
    fi
    sleep 5
  done
  echo "the API server did not answer for 5 minutes" >&2
  exit 1
}

# The upgrade slots (maxUnavailable): ConfigMaps gpu-cluster-upgrade-slot-<i> in kube-system.
# Creating one is atomic, so a node that creates one holds it until its upgrade is done.
slot_holders() {
  k -n kube-system get configmaps -o jsonpath='{range .items[*]}{.metadata.name}={.data.node}{"\n"}{end}' \
    | grep "^$SLOT_PREFIX" || true
}

# acquire_slot NODE SLOTS TRIES: hold one of slots 0..SLOTS-1, trying every 10 s (control planes
# pass 1 and so go one at a time: etcd keeps its quorum). A slot whose node has left the cluster is
# freed.
acquire_slot() {
  local node=$1 slots=$2 tries=$3 n i name holder holders gone
  for ((n = 0; n < tries; n++)); do
    holders=$(slot_holders)
    if grep -qx "${SLOT_PREFIX}[0-9]*=$node" <<<"$holders"; then
      return 0
    fi
    while IFS='=' read -r name holder; do
      if [ -n "$name" ] && gone=$(k get node "$holder" --ignore-not-found -o name) && [ -z "$gone" ]; then
        k -n kube-system delete configmap "$name" --ignore-not-found >/dev/null
      fi
    done <<<"$holders"
    for ((i = 0; i < slots; i++)); do
      if k -n kube-system create configmap "$SLOT_PREFIX$i" --from-literal=node="$node" >/dev/null 2>&1; then
        echo "$node: holds upgrade slot $i of $slots" >&2
        return 0
      fi
    done
    sleep 10
  done
  echo "$node: no upgrade slot came free after $tries tries (gpu-cluster:maxUnavailable is $slots); held: $(slot_holders | tr '\n' ' ')" >&2
  exit 1
}

# release_slots NODE: free the slots NODE holds.
release_slots() {
  local name
  for name in $(slot_holders | sed -n "s/=$1\$//p"); do
    k -n kube-system delete configmap "$name" --ignore-not-found >/dev/null
  done
}

# drain_node NODE: cordon it (noting that the upgrade did, unless it was cordoned already) and
# evict its pods; DaemonSet pods stay, emptyDir data goes.
drain_node() {
  local node=$1
  if [ "$(k get node "$node" -o jsonpath='{.spec.unschedulable}')" != true ]; then
    k annotate node "$node" --overwrite "$CORDONED_BY=upgrade" >/dev/null
  fi
  k drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout=15m >&2
}

# uncordon_node NODE: once it is Ready, uncordon it if the upgrade cordoned it, and free its slot.
uncordon_node() {
  local node=$1
  k wait --for=condition=Ready "node/$node" --timeout=10m >&2
  if [ "$(k get node "$node" -o jsonpath='{.metadata.annotations.gpu-cluster\.io/cordoned-by}')" = upgrade ]; then
    k uncordon "$node" >&2
    k annotate node "$node" "$CORDONED_BY-" >/dev/null
  fi
  release_slots "$node"
}

# driver_current PKG WANT: whether PKG is installed (at WANT; '' = any version of its branch) and
# no other driver branch is held.
driver_current() {
  local pkg=$1 want=$2 have others
  have=$(installed "$pkg")
  if [ -z "$have" ] || { [ -n "$want" ] && [ "$have" != "$want" ]; }; then
    return 1
  fi
  others=$(apt-mark showhold | grep -E '^nvidia-driver-[0-9]+-server$' | grep -vx "$pkg" || true)
  [ -z "$others" ]
}

# driver_switch PKG WANT: PKG (at WANT) installed and held; the branch held before released and
# purged. The new kernel module loads at the next boot.
driver_switch() {
  local pkg=$1 want=$2 old
  apt_get update -q
  apt_get install -y -q --no-install-recommends --allow-downgrades --allow-change-held-packages "$pkg${want:+=$want}"
  apt-mark showhold | grep -qx "$pkg" || apt-mark hold "$pkg" >/dev/null
  for old in $(apt-mark showhold | grep -E '^nvidia-driver-[0-9]+-server$' | grep -vx "$pkg" || true); do
    apt_unpin_purge "$old"
  done
}

# reboot_soon: as the driver step does: refuse new SSH sessions, reboot in 5 s. Prints the boot id
# being left (stdout), so that whoever waits can tell the next boot from this one; asked twice
# in one boot, it schedules the reboot once.
reboot_soon() {
  local boot
  boot=$(cat /proc/sys/kernel/random/boot_id)
  if [ "$(cat "$STATE_DIR/reboot-requested" 2>/dev/null || true)" != "$boot" ]; then
    printf '%s\n' "$boot" >"$STATE_DIR/reboot-requested"
    systemctl stop ssh.socket ssh.service 2>/dev/null || true
    systemd-run --on-active=5 --unit=gpu-cluster-reboot systemctl reboot >&2
  fi
  echo "gpu-cluster: reboot boot-id=$boot"
}

# reboot_pending: whether reboot_soon asked for a reboot this boot has not yet had.
reboot_pending() {
  [ "$(cat "$STATE_DIR/reboot-requested" 2>/dev/null || true)" = "$(cat /proc/sys/kernel/random/boot_id)" ]
}
