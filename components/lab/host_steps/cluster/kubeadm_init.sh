#!/usr/bin/env bash
# The first control plane's init step: `kubeadm init` once, with the kubeadm config read from stdin
# (InitConfiguration, ClusterConfiguration, KubeletConfiguration). With kubeVip, kube-vip's manifest
# mounts super-admin.conf during init and admin.conf again after (kube_vip_manifest.sh; kube-vip
# issue #684). Filled in: nothing.

install -d -m 0700 /etc/gpu-cluster /var/log/gpu-cluster
put_file /etc/gpu-cluster/kubeadm-init.yaml 0600 || true
# kube-vip back on admin.conf once init has bound it to cluster-admin (a no-op without kubeVip).
kube_vip_on_admin_conf() {
  local manifest=/etc/kubernetes/manifests/kube-vip.yaml text
  if [ -f "$manifest" ] && grep -q 'path: /etc/kubernetes/super-admin.conf$' "$manifest"; then
    text=$(sed 's#path: /etc/kubernetes/super-admin.conf$#path: /etc/kubernetes/admin.conf#' "$manifest")
    put_file "$manifest" 0600 <<<"$text" || true
  fi
}
if [ -f /etc/kubernetes/admin.conf ]; then
  kube_vip_on_admin_conf
  echo "control plane already initialised"
  exit 0
fi
# kubeadm prints a bootstrap token; it goes to a root-only log, not to Pulumi's output.
if ! kubeadm init --config /etc/gpu-cluster/kubeadm-init.yaml --upload-certs \
     --skip-token-print >/var/log/gpu-cluster/kubeadm-init.log 2>&1; then
  tail -n 30 /var/log/gpu-cluster/kubeadm-init.log | grep -v -i token >&2 || true
  exit 1
fi
kube_vip_on_admin_conf
echo "control plane initialised"
