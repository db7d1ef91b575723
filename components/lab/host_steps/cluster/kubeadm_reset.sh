#!/usr/bin/env bash
# The delete of init and join: `kubeadm reset` and the CNI and kubeadm files removed.
# Filled in: nothing.

if command -v kubeadm >/dev/null 2>&1; then
  kubeadm reset -f >/dev/null 2>&1 || true
fi
rm -rf /etc/cni/net.d /etc/gpu-cluster/kubeadm-init.yaml /etc/gpu-cluster/kubeadm-join.yaml
