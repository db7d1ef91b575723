#!/usr/bin/env bash
# On the entry point, with admin.conf: bring the KubeletConfiguration in kube-system/kubelet-config
# (which kubeadm wrote at `kubeadm init` and every join and upgrade reads) to the fields the program
# sets, keeping every other field (components/lab/kubelet_config_merge.py). A cluster initialised by
# an older version of this program lacks serverTLSBootstrap and protectKernelDefaults there. Changes
# nothing when every field already has its value. A change made by someone else between the read and
# the write makes the API server refuse the write (resourceVersion): read again, bounded.
# Filled in: __MERGE__ (the merge program, in a quoted here-document), __FIELDS__ (JSON), __TRIES__.

if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import yaml' >/dev/null 2>&1; then
  echo "the kubelet-config step needs python3 with PyYAML on the control planes (Ubuntu's server images have both): apt-get install python3-yaml" >&2
  exit 1
fi
merge=$(mktemp)
trap 'rm -f "$merge"' EXIT
cat >"$merge" <<'GPU_CLUSTER_KUBELET_CONFIG_MERGE'
__MERGE__
GPU_CLUSTER_KUBELET_CONFIG_MERGE
for attempt in $(seq 1 __TRIES__); do
  current=$(kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get configmap kubelet-config -o json)
  patch=$(python3 "$merge" __FIELDS__ <<<"$current")
  if [ -z "$patch" ]; then
    echo "kubelet-config: unchanged (every field the program sets has its value)"
    exit 0
  fi
  if kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system patch configmap kubelet-config --type merge -p "$patch" >/dev/null; then
    echo "kubelet-config: merged the program's fields, every other field kept"
    exit 0
  fi
  if [ "$attempt" = __TRIES__ ]; then
    echo "kubelet-config: the ConfigMap changed under every write (__TRIES__ tries); run pulumi up again" >&2
    exit 1
  fi
  sleep 2
done
