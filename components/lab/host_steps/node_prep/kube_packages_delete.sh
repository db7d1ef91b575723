#!/usr/bin/env bash
# kube_packages' delete: the three unheld and purged, every minor's apt source and key removed.
# Filled in: nothing.

apt_unpin_purge kubectl kubeadm kubelet
rm -f /etc/apt/sources.list.d/kubernetes-v*.list /etc/apt/keyrings/kubernetes-v*.gpg
