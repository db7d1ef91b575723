#!/usr/bin/env bash
# Node prep, every host: kubelet, kubeadm and kubectl of one version from pkgs.k8s.io, pinned.
# Filled in: __MINOR__ (the repository's minor), __PACKAGES__ (the three as PKG=VERSION-REVISION).

# @include lib/kube_repo.sh
apt_pin __PACKAGES__
systemctl enable kubelet >/dev/null 2>&1 || true
