#!/usr/bin/env bash
# Shared by the scheduled snapshot, the restore and the snapshot before an upgrade: one check of a
# snapshot file for all of them, with the etcd tools of etcd/etcd_tool.sh (included before this).
# Filled in: nothing.

# snapshot_status VERSION FILE: `etcdutl snapshot status` of FILE (its directory mounted read-only):
# bbolt's consistency check of every page, then every key read (etcdutl/snapshot/v3_snapshot.go,
# Status). Prints the status table; when FILE does not pass, says so naming FILE and returns 1.
snapshot_status() {
  if ! etcd_tool "$1" "$(dirname -- "$2"):ro" -- etcdutl snapshot status "$2" -w table; then
    echo "$2 is not a readable etcd snapshot (etcdutl snapshot status)" >&2
    return 1
  fi
}
