#!/usr/bin/env bash
# The scheduled etcd snapshot of one control plane, installed as /usr/local/sbin/gpu-cluster-etcd-snapshot
# and run by /etc/cron.d/gpu-cluster-etcd-backup: `etcdctl snapshot save` against the local member,
# checked with `etcdutl snapshot status`, kept as etcd-<node>-<UTC time>.db (0600, root), copied to
# the shared directory when there is one, the oldest of its own files beyond the retention deleted
# (only names of that exact pattern: nothing else in the directories is touched), and the node-exporter
# textfile metrics written (etcd_backup_*: the newest snapshot's time and size, the last run's result,
# with S3 the last upload's time).
# Before it starts, a free-space guard: no snapshot when the backup directory's disk lacks room for
# one more (as large as the newest or as etcd's database file, twice with the encrypted copy for S3)
# and __RESERVE_BYTES__ besides. With etcdBackup.s3, the snapshot is then encrypted and uploaded
# (gpu-cluster-etcd-s3 upload, which applies the bucket's retention); a failed upload fails the run.
# The ETCD_* variables point a rehearsal (and the tests) at other paths; cron sets none of them.
# Filled in: __NODE__, __BACKUP_DIR__ (etcdBackup.hostPath), __SHARED_DIR__ (empty: no shared copy),
# __RETAIN__, __TEXTFILE_DIR__, __S3_CLIENT__ (empty: no S3 copy), __RESERVE_BYTES__, and
# etcd_tool's values.

set -euo pipefail
umask 077
node=__NODE__
retain=__RETAIN__
backup_dir=${ETCD_BACKUP_DIR:-__BACKUP_DIR__}
shared_dir=${ETCD_BACKUP_SHARED_DIR-__SHARED_DIR__}
s3_client=${ETCD_BACKUP_S3_CLIENT-__S3_CLIENT__}
reserve=${ETCD_BACKUP_RESERVE_BYTES:-__RESERVE_BYTES__}
textfile_dir=${ETCD_TEXTFILE_DIR:-__TEXTFILE_DIR__}
manifest=${ETCD_MANIFEST:-/etc/kubernetes/manifests/etcd.yaml}
pki=${ETCD_PKI_DIR:-/etc/kubernetes/pki/etcd}
endpoint=${ETCD_ENDPOINT:-https://127.0.0.1:2379}
# The whole save's deadline: etcdctl otherwise waits for an etcd that does not answer forever.
timeout=${ETCD_SNAPSHOT_TIMEOUT:-10m}
own="^etcd-$node-[0-9]{8}T[0-9]{6}Z\.db\$"

# @include etcd/etcd_tool.sh

# @include etcd/snapshot_status.sh

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
  local newest time=0 size=0 ok=0 tmp uploaded=0
  newest=$(own_files "$backup_dir" | tail -n 1)
  if [ -n "$newest" ]; then
    time=$(stat -c %Y "$backup_dir/$newest")
    size=$(stat -c %s "$backup_dir/$newest")
  fi
  if [ "$1" -eq 0 ]; then
    ok=1
  fi
  if [ -f "$backup_dir/.s3-last-upload" ]; then
    uploaded=$(stat -c %Y "$backup_dir/.s3-last-upload")
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
  if [ -n "$s3_client" ]; then
    cat >>"$tmp" <<METRICS
# HELP etcd_backup_s3_last_upload_timestamp_seconds When this member last uploaded a snapshot to etcdBackup.s3 (0: never).
# TYPE etcd_backup_s3_last_upload_timestamp_seconds gauge
etcd_backup_s3_last_upload_timestamp_seconds{etcd_member="$node"} $uploaded
METRICS
  fi
  chmod 0644 "$tmp"
  mv -f "$tmp" "$textfile_dir/etcd_backup.prom"
}

# require_room: exit 1, saying why, when the disk of $backup_dir lacks room for one more snapshot.
require_room() {
  local newest size=0 db data_dir copies=1 need avail
  newest=$(own_files "$backup_dir" | tail -n 1)
  if [ -n "$newest" ]; then
    size=$(stat -c %s "$backup_dir/$newest")
  fi
  data_dir=$(sed -n 's#^ *- --data-dir=\(.*\)$#\1#p' "$manifest" 2>/dev/null | head -n 1)
  db=${data_dir:-/var/lib/etcd}/member/snap/db
  if [ -f "$db" ] && [ "$(stat -c %s "$db")" -gt "$size" ]; then
    size=$(stat -c %s "$db")
  fi
  if [ -n "$s3_client" ]; then
    copies=2 # the encrypted copy is written beside it before the upload
  fi
  need=$((size * copies + reserve))
  avail=$(df -B1 --output=avail "$backup_dir" | tail -n 1 | tr -d ' ')
  if [ "$avail" -lt "$need" ]; then
    echo "no etcd snapshot: $backup_dir has $avail bytes free; one more needs $need ($copies x $size bytes" \
      "and $reserve kept free for etcd and the system). Free space or move etcdBackup.hostPath." >&2
    exit 1
  fi
}

trap 'write_metrics $?' EXIT
install -d -m 0700 "$backup_dir"
require_room
version=$(etcd_version "$manifest")
name=etcd-$node-$(date -u +%Y%m%dT%H%M%SZ).db
part=$backup_dir/.$name.part
rm -f "$backup_dir"/.etcd-"$node"-*.db.part "$backup_dir"/.etcd-"$node"-*.db.enc.part
etcd_tool "$version" "$pki:ro" "$backup_dir" -- etcdctl --endpoints="$endpoint" --cacert="$pki/ca.crt" \
  --cert="$pki/server.crt" --key="$pki/server.key" --command-timeout="$timeout" snapshot save "$part" >/dev/null
snapshot_status "$version" "$part" >/dev/null
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
if [ -n "$s3_client" ]; then
  "$s3_client" upload "$backup_dir/$name"
  touch "$backup_dir/.s3-last-upload"
fi
