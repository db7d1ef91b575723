#!/usr/bin/env bash
# storage.provision, on the first control plane: nfs-kernel-server installed (once) and the
# directory exported read-write to the cluster's nodes only (no_root_squash: the NFS CSI driver
# creates one directory per volume as root, and training images run as root).
# Filled in: __EXPORT_DIR__ (storage.exportPath, quoted), __EXPORT_PATH__ (the same, as written in
# the exports file and printed by exportfs), __EXPORTS_LINE__ (the path and one entry per node; with
# __BACKUP_DIR__, not empty, a second line: the etcd snapshots' shared copy, to the control planes only).

if ! dpkg-query -W -f='${Status}' nfs-kernel-server 2>/dev/null | grep -q 'ok installed'; then
  apt_get update -q
  apt_get install -y -q nfs-kernel-server
  touch "$STATE_DIR/nfs-server.installed-by-gpu-cluster"
fi
install -d -m 0755 __EXPORT_DIR__
backup_dir=__BACKUP_DIR__
if [ -n "$backup_dir" ]; then
  install -d -m 0700 "$backup_dir"
  # Older versions kept the shared copy inside the export, open to every node's root: moved out.
  old=__EXPORT_DIR__/etcd-backups
  if [ -d "$old" ] && [ ! -L "$old" ]; then
    find "$old" -maxdepth 1 -type f -name 'etcd-*.db' -exec mv -n -t "$backup_dir" {} +
    rmdir "$old" 2>/dev/null || echo "$old still holds files other than snapshots; left as it is" >&2
  fi
fi
if put_file /etc/exports.d/gpu-cluster.exports 0644 <<'EOF'; then
__EXPORTS_LINE__
EOF
  exportfs -ra
fi
if ! systemctl is-active --quiet nfs-server; then
  systemctl enable --now nfs-server
fi
# grep reads all of exportfs' output (no -q): an early exit would fail the pipeline.
if ! exportfs -v | grep -E '^__EXPORT_PATH__([[:space:]]|$)' >/dev/null; then
  echo "__EXPORT_PATH__ is not exported" >&2
  exit 1
fi
