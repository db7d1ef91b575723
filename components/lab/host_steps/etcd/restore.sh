#!/usr/bin/env bash
# Restore this control plane's etcd member from a snapshot (docs/operations/etcd-backup.md), as root:
#   etcd-restore.sh SNAPSHOT   first, with the cluster untouched, verify the snapshot: its size, the
#                              SHA-256 etcd appended to it, `etcdutl snapshot status`, and the restore
#                              itself (`etcdutl snapshot restore`, with the member's name and peer URL
#                              read from the etcd manifest) into a scratch directory beside the data
#                              directory. Only then stop the API server and etcd (their static pod
#                              manifests moved to $parked), swap the restored directory in (the old one
#                              kept beside it) and --start. With several control planes, run it on
#                              each, one after the other, with the same file: each run returns once
#                              its own etcd runs, and the cluster answers once a majority is restored.
#   etcd-restore.sh --verify SNAPSHOT
#                              all of those checks, the restore into the scratch directory included,
#                              and no more: with several control planes, run it on every one before
#                              any is stopped.
#   etcd-restore.sh --start    move the manifests back and wait until etcd runs: on a one-member
#                              cluster until it answers; with several, until it answers or, for a
#                              short time, for the quorum the members not yet restored cannot give
#                              (then it says which they are and succeeds).
# A failure before the swap exits non-zero with the host as it was: the manifests this run parked
# moved back, the data directory untouched, the scratch directory removed. A second run after a
# failure resumes: manifests an earlier run parked stay parked.
# The ETCD_* variables point a rehearsal (and the tests) at other paths.
# Filled in: __NODE__, __INITIAL_CLUSTER__ (every control plane's name=https://address:2380), __TRIES__
# (5 s each), __QUORUM_TRIES__ (5 s each: how long a member of several waits for a quorum), and
# etcd_tool's values.

set -euo pipefail
umask 077
node=__NODE__
initial_cluster=__INITIAL_CLUSTER__
manifests=${ETCD_MANIFESTS_DIR:-/etc/kubernetes/manifests}
parked=${ETCD_PARKED_DIR:-/etc/kubernetes/etcd-restore-parked}
pki=${ETCD_PKI_DIR:-/etc/kubernetes/pki/etcd}
endpoint=${ETCD_ENDPOINT:-https://127.0.0.1:2379}
tries=${ETCD_RESTORE_TRIES:-__TRIES__}
quorum_tries=${ETCD_RESTORE_QUORUM_TRIES:-__QUORUM_TRIES__}
stamp=$(date -u +%Y%m%dT%H%M%SZ)

# @include etcd/etcd_tool.sh

# @include etcd/snapshot_status.sh
# @include etcd/snapshot_file.sh

die() {
  echo "etcd-restore: $*" >&2
  exit 1
}

# refuse WHY: a check before the stop failed; the host is as this run found it.
refuse() {
  die "$*; this run stopped and changed nothing"
}

# What this run changed, for the trap: on a failure before the swap it is put back.
scratch=""
made_parked=""
parked_here=()
kept=""
swapped=""

# undo: the manifests this run parked back where they were, the old data directory back in place.
undo() {
  local f
  if [ -n "$kept" ] && [ ! -e "$data_dir" ]; then
    mv "$kept" "$data_dir" && echo "etcd-restore: moved $kept back to $data_dir" >&2
  fi
  for f in "${parked_here[@]}"; do
    mv -f "$parked/$f" "$manifests/$f" && echo "etcd-restore: moved $f back to $manifests" >&2
  done
  if [ -n "$made_parked" ]; then
    rmdir "$parked" 2>/dev/null || true
  fi
}

on_exit() {
  local status=$?
  if [ "$status" -ne 0 ] && [ -z "$swapped" ]; then
    undo || echo "etcd-restore: could not put everything back: check $manifests, $parked and $data_dir" >&2
  fi
  if [ -n "$scratch" ]; then
    rm -rf -- "$scratch"
  fi
  exit "$status"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# flag NAME: the value of --NAME= in the etcd manifest (wherever it is now).
flag() {
  sed -n "s#^ *- --$1=\\(.*\\)\$#\\1#p" "$manifest" | head -n 1
}

# running NAME: the ids of running containers called NAME (crictl, from kubeadm's cri-tools).
running() {
  crictl ps -q --name "^$1\$" 2>/dev/null || true
}

# health: etcd answers on its client URL (a linearizable read: only with a quorum).
health() {
  etcd_tool "$version" "$pki:ro" -- etcdctl --endpoints="$endpoint" --cacert="$pki/ca.crt" \
    --cert="$pki/server.crt" --key="$pki/server.key" --dial-timeout=2s --command-timeout=3s \
    endpoint health >/dev/null 2>&1
}

# The other members' names, and how many members make a majority.
others=$(tr ',' '\n' <<<"$initial_cluster" | sed 's/=.*//' | grep -vxF -- "$node" | paste -sd ' ' -) || true
count=$(tr ',' '\n' <<<"$initial_cluster" | grep -c .)
majority=$((count / 2 + 1))

# start: the manifests back, then wait until this member's etcd runs (the kubelet started it) and
# answers. A member of several answers only with a quorum, which members still unrestored (stopped,
# or in the old cluster: the restore's own cluster token keeps them apart) cannot give: it waits
# QUORUM_TRIES for it, then names them and succeeds, so each member's run ends on its own.
start() {
  local i f id
  for f in etcd.yaml kube-apiserver.yaml; do
    if [ -f "$parked/$f" ]; then
      mv -f "$parked/$f" "$manifests/$f"
      echo "moved $f back to $manifests"
    fi
  done
  rmdir "$parked" 2>/dev/null || true
  for ((i = 0; i < tries; i++)); do
    id=$(running etcd)
    [ -z "$id" ] || break
    sleep 5
  done
  [ -n "$id" ] || die "the kubelet did not start etcd on $node in $((tries * 5)) s; see journalctl -u kubelet"
  # 5 s a try, the health check's own timeout included: by the clock.
  local waits=$tries
  [ "$count" -eq 1 ] || waits=$quorum_tries
  local until=$((SECONDS + waits * 5))
  for ((i = 0; i < waits * 5 && SECONDS < until; i++)); do
    if health; then
      echo "etcd on $node answers at $endpoint: the cluster has a quorum"
      return 0
    fi
    sleep 2
  done
  if [ "$count" -gt 1 ] && [ "$(running etcd)" = "$id" ]; then
    echo "etcd on $node runs and waits for the other members: run this script with the same snapshot on those not restored yet, of: $others (the cluster answers once $majority of its $count members are restored; \`$0 --start\` here checks again)"
    return 0
  fi
  die "etcd on $node did not answer at $endpoint in $((waits * 5)) s; see crictl logs \$(crictl ps -a -q --name '^etcd\$')"
}

if [ -f "$manifests/etcd.yaml" ]; then
  manifest=$manifests/etcd.yaml
elif [ -f "$parked/etcd.yaml" ]; then
  manifest=$parked/etcd.yaml
else
  die "no etcd manifest in $manifests or $parked: is this a control plane?"
fi
version=$(etcd_version "$manifest")
verify_only=""
case ${1:-} in
  --start)
    start
    exit 0
    ;;
  --verify)
    verify_only=1
    shift
    ;;
esac
snapshot=${1:?usage: etcd-restore.sh SNAPSHOT | --verify SNAPSHOT | --start}
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
parent=$(dirname "$data_dir")
[ -d "$parent" ] || die "the data directory's parent $parent (from $manifest) does not exist"

# Verify everything before anything is stopped. The file first (etcd/snapshot_file.sh): its size and
# the SHA-256 etcdctl snapshot save appends.
problem=$(snapshot_file_problem "$snapshot")
[ -z "$problem" ] || refuse "$problem"
size=$(stat -c %s -- "$snapshot")
expected=$(tail -c 32 -- "$snapshot" | od -An -v -tx1 | tr -d ' \n')
echo "verified $snapshot: $size bytes, its SHA-256 matches"
snapshot_status "$version" "$snapshot" || refuse "the snapshot does not verify (above)"

# The restore itself, into a scratch directory beside the data directory (same filesystem: the swap
# is a rename); the trap removes it whatever happens. Room for the database and the first WAL file
# (64 MiB, preallocated).
free_kib=$(df -Pk -- "$parent" | awk 'NR == 2 {print $4}')
need_kib=$((size / 1024 + 64 * 1024))
[ "$free_kib" -ge "$need_kib" ] \
  || refuse "$parent has $free_kib KiB free, the restore needs $need_kib KiB (the snapshot and a 64 MiB WAL file)"
scratch=$(mktemp -d -- "$data_dir.restoring-XXXXXX")
fresh=$scratch/etcd
# Where etcdutl has them, the revision is bumped and the old ones marked compacted, so that the API
# server's watchers and informers see no revision go back (etcd-io/etcd#16028, the restore for
# Kubernetes); older 3.5 releases lack the flags. The cluster token is the snapshot's own: every
# member restored from this file makes the same new cluster, whose ID no member of the old cluster
# (still running on a control plane not restored yet) or of a restore from another file shares, so
# they never exchange a message (etcd refuses a peer of another cluster ID; etcd's disaster recovery
# guide restores with a new --initial-cluster-token for this reason).
token=gpu-cluster-restore-${expected:0:16}
bump=()
if etcd_tool "$version" -- etcdutl snapshot restore --help 2>&1 | grep -q -- --bump-revision; then
  bump=(--bump-revision 1000000000 --mark-compacted)
fi
etcd_tool "$version" "$snapshot_dir:ro" "$scratch" -- etcdutl snapshot restore "$snapshot" --name "$name" \
  --initial-cluster "$initial_cluster" --initial-advertise-peer-urls "$peer" --initial-cluster-token "$token" \
  --data-dir "$fresh" "${bump[@]}" \
  || refuse "etcdutl snapshot restore of $snapshot failed (above)"
[ -s "$fresh/member/snap/db" ] || refuse "etcdutl snapshot restore left no $fresh/member/snap/db"
echo "restored $snapshot into the scratch directory $fresh"
if [ -n "$verify_only" ]; then
  echo "verified: $snapshot restores as member $name of $initial_cluster; nothing was stopped (run without --verify to restore)"
  exit 0
fi

# 1. Stop the API server and etcd: the kubelet stops a static pod whose manifest is gone. From here
# until the swap, a failure moves back what this run parked (the trap).
if [ ! -d "$parked" ]; then
  install -d -m 0700 "$parked"
  made_parked=1
fi
for f in kube-apiserver.yaml etcd.yaml; do
  if [ -f "$manifests/$f" ]; then
    mv -f "$manifests/$f" "$parked/$f"
    parked_here+=("$f")
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

# 2. Swap, keeping the old data directory.
if [ -d "$data_dir" ]; then
  mv "$data_dir" "$data_dir.before-restore-$stamp"
  kept=$data_dir.before-restore-$stamp
  echo "kept the old data directory as $kept"
fi
mv "$fresh" "$data_dir"
swapped=1
chmod 0700 "$data_dir"
echo "restored $snapshot into $data_dir (member $name, cluster $initial_cluster)"

# 3. Start again (with several members: without waiting long for those not restored yet).
start
