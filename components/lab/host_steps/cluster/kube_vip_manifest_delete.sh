#!/usr/bin/env bash
# The kube-vip step's delete: the manifest removed (the kubelet stops the pod and the VIP moves to
# another control plane). Filled in: __MANIFEST__ (kube_vip.MANIFEST_PATH).

rm -f __MANIFEST__
