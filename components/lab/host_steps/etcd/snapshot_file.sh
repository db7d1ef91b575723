#!/usr/bin/env bash
# Shared by the restore and the snapshot before an upgrade: whether a file is a whole etcd snapshot,
# with coreutils only. etcdctl snapshot save appends the SHA-256 of the bbolt database, and etcdutl
# tells a snapshot with it by its size, 32 bytes past a multiple of 512 (hasChecksum in etcd's
# etcdutl/snapshot/v3_snapshot.go; that file's restore compares the two unless --skip-hash-check).
# A bbolt database has at least 4 pages of 4096 bytes.
# Filled in: nothing.

# snapshot_file_problem FILE: prints why FILE is not a whole etcd snapshot, or nothing.
snapshot_file_problem() {
  local size expected actual
  size=$(stat -c %s -- "$1")
  if [ "$size" -lt $((4 * 4096 + 32)) ]; then
    echo "$1 is $size bytes: too small to be an etcd snapshot (a database of 4 pages of 4096 bytes and a 32-byte SHA-256 at least)"
  elif [ $((size % 512)) -ne 32 ]; then
    echo "$1 is $size bytes, not 32 past a multiple of 512: it was cut short, or it lacks the 32-byte SHA-256 that etcdctl snapshot save appends"
  else
    expected=$(tail -c 32 -- "$1" | od -An -v -tx1 | tr -d ' \n')
    actual=$(head -c $((size - 32)) -- "$1" | sha256sum)
    actual=${actual%% *}
    if [ "$actual" != "$expected" ]; then
      echo "$1 is damaged: the SHA-256 of its database is $actual, the one saved with it $expected"
    fi
  fi
}
