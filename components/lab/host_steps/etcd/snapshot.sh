#!/usr/bin/env bash
# The scheduled etcd snapshot of one control plane, installed as /usr/local/sbin/gpu-cluster-etcd-snapshot
# and run by /etc/cron.d/gpu-cluster-etcd-backup: `etcdctl snapshot save` against the local member,
# checked with `etcdutl snapshot status`, kept as etcd-<node>-<UTC time>.db (0600, root), copied to
# the shared directory when there is one, the oldest of its own files beyond the retention deleted
# (only names of that exact pattern: nothing else in the directories is touched), and the node-exporter
# textfile metrics written (etcd_backup_*: the newest snapshot's time and size, the last run's result).
# The ETCD_* variables point a rehearsal (and the tests) at other paths; cron sets none of them.
# Filled in: __NODE__, __BACKUP_DIR__ (etcdBackup.hostPath), __SHARED_DIR__ (empty: no shared copy),
# __RETAIN__, __TEXTFILE_DIR__, and etcd_tool's values.

set -euo pipefail
umask 077
node=__NODE__
retain=__RETAIN__
backup_dir=${ETCD_BACKUP_DIR:-__BACKUP_DIR__}
shared_dir=${ETCD_BACKUP_SHARED_DIR-__SHARED_DIR__}
textfile_dir=${ETCD_TEXTFILE_DIR:-__TEXTFILE_DIR__}
manifest=${ETCD_MANIFEST:-/etc/kubernetes/manifests/etcd.yaml}
pki=${ETCD_PKI_DIR:-/etc/kubernetes/pki/etcd}
endpoint=${ETCD_ENDPOINT:-https://127.0.0.1:2379}
# The whole save's deadline: etcdctl otherwise waits for an etcd that does not answer forever.
timeout=${ETCD_SNAPSHOT_TIMEOUT:-10m}
own="^etcd-$node-[0-9]{8}T[0-9]{6}Z\.db\$"

# @include etcd/etcd_tool.sh

# own_files DIR: this job's snapshots in DIR, oldest first (the names sort by time).
own_files() {
  find "$1" -maxdepth 1 -type f -name "etcd-$node-*.db" -printf '%f\n' | grep -E "$own" | sort || true
}

# prune DIR: delete this job's oldest snapshots in DIR beyond the newest $retain.
prune() {
  local files=() i
  mapfile -t files < <(own_files "$1")
  for ((i = 0; i < ${#files[@]} - retain; i++)); do
    rm -f -- "$1/${files[i]}"
    echo "deleted $1/${files[i]}"
  done
}

# write_metrics STATUS: the textfile collector's file, replaced in one rename.
write_metrics() {
  local newest time=0 size=0 ok=0 tmp
  newest=$(own_files "$backup_dir" | tail -n 1)
  if [ -n "$newest" ]; then
    time=$(stat -c %Y "$backup_dir/$newest")
    size=$(stat -c %s "$backup_dir/$newest")
  fi
  if [ "$1" -eq 0 ]; then
    ok=1
  fi
  install -d -m 0755 "$textfile_dir"
  tmp=$(mktemp "$textfile_dir/.etcd_backup.prom.XXXXXX")
  cat >"$tmp" <<METRICS
# HELP etcd_backup_last_success_timestamp_seconds Modification time of the newest etcd snapshot this member keeps.
# TYPE etcd_backup_last_success_timestamp_seconds gauge
etcd_backup_last_success_timestamp_seconds{etcd_member="$node"} $time
# HELP etcd_backup_last_size_bytes Size of the newest etcd snapshot this member keeps.
# TYPE etcd_backup_last_size_bytes gauge
etcd_backup_last_size_bytes{etcd_member="$node"} $size
# HELP etcd_backup_last_run_success 1 if the last scheduled snapshot run succeeded, else 0.
# TYPE etcd_backup_last_run_success gauge
etcd_backup_last_run_success{etcd_member="$node"} $ok
METRICS
  chmod 0644 "$tmp"
  mv -f "$tmp" "$textfile_dir/etcd_backup.prom"
}

trap 'write_metrics $?' EXIT
install -d -m 0700 "$backup_dir"
version=$(etcd_version "$manifest")
name=etcd-$node-$(date -u +%Y%m%dT%H%M%SZ).db
part=$backup_dir/.$name.part
rm -f "$backup_dir"/.etcd-"$node"-*.db.part
etcd_tool "$version" "$pki:ro" "$backup_dir" -- etcdctl --endpoints="$endpoint" --cacert="$pki/ca.crt" \
  --cert="$pki/server.crt" --key="$pki/server.key" --command-timeout="$timeout" snapshot save "$part" >/dev/null
etcd_tool "$version" "$backup_dir" -- etcdutl snapshot status "$part" -w json >/dev/null
mv -f "$part" "$backup_dir/$name"
echo "etcd snapshot: $backup_dir/$name ($(stat -c %s "$backup_dir/$name") bytes, etcd $version)"
prune "$backup_dir"
if [ -n "$shared_dir" ]; then
  install -d -m 0700 "$shared_dir"
  rm -f "$shared_dir"/.etcd-"$node"-*.db.part
  cp "$backup_dir/$name" "$shared_dir/.$name.part"
  mv -f "$shared_dir/.$name.part" "$shared_dir/$name"
  echo "copied to $shared_dir/$name"
  prune "$shared_dir"
fi
