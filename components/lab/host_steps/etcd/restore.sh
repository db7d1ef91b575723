#!/usr/bin/env bash
# Restore this control plane's etcd member from a snapshot (docs/operations/etcd-backup.md), as root:
#   etcd-restore.sh SNAPSHOT   stop the API server and etcd (their static pod manifests moved to
#                              $parked), `etcdutl snapshot restore` into a fresh data directory with
#                              the member's name and peer URL read from the etcd manifest, swap it in
#                              (the old one kept beside it), then, on a one-member cluster, --start.
#   etcd-restore.sh --start    move the manifests back and wait until etcd and the API answer. With
#                              several control planes: run SNAPSHOT on every one first (the same
#                              file), then --start on each.
# A second run after a failure resumes: manifests already parked stay parked.
# The ETCD_* variables point a rehearsal (and the tests) at other paths.
# Filled in: __NODE__, __INITIAL_CLUSTER__ (every control plane's name=https://address:2380), __TRIES__
# (5 s each), and etcd_tool's values.

set -euo pipefail
umask 077
node=__NODE__
initial_cluster=__INITIAL_CLUSTER__
manifests=${ETCD_MANIFESTS_DIR:-/etc/kubernetes/manifests}
parked=${ETCD_PARKED_DIR:-/etc/kubernetes/etcd-restore-parked}
pki=${ETCD_PKI_DIR:-/etc/kubernetes/pki/etcd}
endpoint=${ETCD_ENDPOINT:-https://127.0.0.1:2379}
tries=${ETCD_RESTORE_TRIES:-__TRIES__}
stamp=$(date -u +%Y%m%dT%H%M%SZ)

# @include etcd/etcd_tool.sh

die() {
  echo "etcd-restore: $*" >&2
  exit 1
}

# flag NAME: the value of --NAME= in the etcd manifest (wherever it is now).
flag() {
  sed -n "s#^ *- --$1=\\(.*\\)\$#\\1#p" "$manifest" | head -n 1
}

# running NAME: the ids of running containers called NAME (crictl, from kubeadm's cri-tools).
running() {
  crictl ps -q --name "^$1\$" 2>/dev/null || true
}

# health: etcd answers on its client URL.
health() {
  etcd_tool "$version" "$pki:ro" -- etcdctl --endpoints="$endpoint" --cacert="$pki/ca.crt" \
    --cert="$pki/server.crt" --key="$pki/server.key" endpoint health >/dev/null 2>&1
}

start() {
  local i f
  for f in etcd.yaml kube-apiserver.yaml; do
    if [ -f "$parked/$f" ]; then
      mv -f "$parked/$f" "$manifests/$f"
      echo "moved $f back to $manifests"
    fi
  done
  for ((i = 0; i < tries; i++)); do
    if health; then
      echo "etcd on $node answers at $endpoint"
      return 0
    fi
    sleep 5
  done
  die "etcd on $node did not answer at $endpoint in $((tries * 5)) s (with several control planes it needs a quorum: run --start on the others); see crictl logs \$(crictl ps -a -q --name '^etcd\$')"
}

if [ -f "$manifests/etcd.yaml" ]; then
  manifest=$manifests/etcd.yaml
elif [ -f "$parked/etcd.yaml" ]; then
  manifest=$parked/etcd.yaml
else
  die "no etcd manifest in $manifests or $parked: is this a control plane?"
fi
version=$(etcd_version "$manifest")
if [ "${1:-}" = --start ]; then
  start
  exit 0
fi
snapshot=${1:?usage: etcd-restore.sh SNAPSHOT | --start}
case $snapshot in
  /*) ;;
  *) snapshot=$PWD/$snapshot ;;
esac
[ -s "$snapshot" ] || die "$snapshot is missing or empty"
name=$(flag name)
peer=$(flag initial-advertise-peer-urls)
data_dir=$(flag data-dir)
[ "$name" = "$node" ] || die "the etcd manifest names member '$name', this script was rendered for $node"
if [ -z "$peer" ] || [ -z "$data_dir" ]; then
  die "cannot read --initial-advertise-peer-urls and --data-dir from $manifest"
fi
case ",$initial_cluster," in
  *",$name=$peer,"*) ;;
  *) die "$name=$peer (from $manifest) is not in the cluster this script knows: $initial_cluster" ;;
esac
snapshot_dir=$(dirname "$snapshot")
etcd_tool "$version" "$snapshot_dir:ro" -- etcdutl snapshot status "$snapshot" -w table \
  || die "$snapshot is not a readable etcd snapshot"

# 1. Stop the API server and etcd: the kubelet stops a static pod whose manifest is gone.
install -d -m 0700 "$parked"
for f in kube-apiserver.yaml etcd.yaml; do
  if [ -f "$manifests/$f" ]; then
    mv -f "$manifests/$f" "$parked/$f"
    echo "parked $f in $parked"
  fi
done
manifest=$parked/etcd.yaml
for ((i = 0; i < tries; i++)); do
  if [ -z "$(running etcd)$(running kube-apiserver)" ]; then
    break
  fi
  sleep 5
done
[ -z "$(running etcd)$(running kube-apiserver)" ] || die "etcd or the API server still runs after $((tries * 5)) s"

# 2. Restore into a fresh directory beside the data directory (same filesystem: the swap is a rename).
# Where etcdutl has them, the revision is bumped and the old ones marked compacted, so that the API
# server's watchers and informers see no revision go back (etcd-io/etcd#16028, the restore for
# Kubernetes); older 3.5 releases lack the flags.
parent=$(dirname "$data_dir")
fresh=$data_dir.restored-$stamp
bump=()
if etcd_tool "$version" -- etcdutl snapshot restore --help 2>&1 | grep -q -- --bump-revision; then
  bump=(--bump-revision 1000000000 --mark-compacted)
fi
etcd_tool "$version" "$snapshot_dir:ro" "$parent" -- etcdutl snapshot restore "$snapshot" --name "$name" \
  --initial-cluster "$initial_cluster" --initial-advertise-peer-urls "$peer" --data-dir "$fresh" "${bump[@]}"

# 3. Swap, keeping the old data directory.
if [ -d "$data_dir" ]; then
  mv "$data_dir" "$data_dir.before-restore-$stamp"
  echo "kept the old data directory as $data_dir.before-restore-$stamp"
fi
mv "$fresh" "$data_dir"
chmod 0700 "$data_dir"
echo "restored $snapshot into $data_dir (member $name, cluster $initial_cluster)"

# 4. Start again: at once on a one-member cluster; with several, once every member is restored.
case $initial_cluster in
  *,*) echo "now run this script with the same snapshot on every other control plane, then --start on each" ;;
  *) start ;;
esac
