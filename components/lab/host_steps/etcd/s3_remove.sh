#!/usr/bin/env bash
# etcdBackup.s3 off on one control plane (delete): the client and its config (the credentials and
# the encryption key) removed from the host. The objects in the bucket are kept.
# Filled in: __CLIENT_PATH__, __CONFIG_PATH__.

rm -f __CLIENT_PATH__ __CONFIG_PATH__
echo "etcd snapshots no longer shipped to S3 from this host; the bucket's objects are kept"
