#!/usr/bin/env bash
# A control plane's kube-vip step (components/lab/kube_vip.py). stdin: the kube-vip static pod
# manifest, which mounts admin.conf. On the first control plane before `kubeadm init` (no cluster
# on the host yet) the host path becomes super-admin.conf: since Kubernetes 1.29 admin.conf has no
# rights until init has created its ClusterRoleBinding through the API that kube-vip must first
# put on the VIP (kube-vip issue #684); kubeadm_init.sh switches it back once init is done.
# Filled in: __MANIFEST__ (kube_vip.MANIFEST_PATH).

manifest=__MANIFEST__
text=$(cat)
if ! grep -q '^kind: Pod$' <<<"$text"; then
  echo "no kube-vip manifest on stdin" >&2
  exit 1
fi
if [ ! -f /etc/kubernetes/admin.conf ] && [ ! -f /etc/kubernetes/kubelet.conf ]; then
  # only the host path ("path:"; the mount inside the pod, "mountPath:", stays admin.conf)
  text=${text//path: \/etc\/kubernetes\/admin.conf/path: \/etc\/kubernetes\/super-admin.conf}
fi
if [ ! -d /etc/kubernetes/manifests ]; then
  install -d -m 0700 /etc/kubernetes/manifests
fi
put_file "$manifest" 0600 <<<"$text" || true
