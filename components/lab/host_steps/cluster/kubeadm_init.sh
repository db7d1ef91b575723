#!/usr/bin/env bash
# The first control plane's init step: `kubeadm init` once, with the kubeadm config read from stdin
# (InitConfiguration, ClusterConfiguration, KubeletConfiguration). Filled in: nothing.

install -d -m 0700 /etc/gpu-cluster /var/log/gpu-cluster
put_file /etc/gpu-cluster/kubeadm-init.yaml 0600 || true
if [ -f /etc/kubernetes/admin.conf ]; then
  echo "control plane already initialised"
  exit 0
fi
# kubeadm prints a bootstrap token; it goes to a root-only log, not to Pulumi's output.
if ! kubeadm init --config /etc/gpu-cluster/kubeadm-init.yaml --upload-certs \
     --skip-token-print >/var/log/gpu-cluster/kubeadm-init.log 2>&1; then
  tail -n 30 /var/log/gpu-cluster/kubeadm-init.log | grep -v -i token >&2 || true
  exit 1
fi
echo "control plane initialised"
