#!/usr/bin/env bash
# etcdBackup.s3 on one control plane (create and update; stdin: the client's JSON config, which holds
# the S3 credentials and the encryption key, a Pulumi secret): the config written root-only, the
# client (components/lab/etcd_s3_client.py) installed as /usr/local/sbin/gpu-cluster-etcd-s3, then
# asked to list the bucket, so that a wrong endpoint, bucket or credential fails this step at
# `pulumi up`, not the first scheduled snapshot.
# Filled in: __CLIENT__ (the client, placed as it is in a quoted here-document), __CLIENT_PATH__,
# __CONFIG_PATH__.

for tool in python3 openssl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "etcdBackup.s3 needs $tool on the control planes (Ubuntu's server images have it): apt-get install $tool" >&2
    exit 1
  fi
done
umask 077
install -d -m 0700 "$(dirname __CONFIG_PATH__)"
put_file __CONFIG_PATH__ 0600 >/dev/null || true
put_file __CLIENT_PATH__ 0700 >&2 <<'GPU_CLUSTER_ETCD_S3_CLIENT' || true
__CLIENT__
GPU_CLUSTER_ETCD_S3_CLIENT
__CLIENT_PATH__ check
