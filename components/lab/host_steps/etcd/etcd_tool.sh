#!/usr/bin/env bash
# Shared by the etcd snapshot and restore scripts: which etcd version the host runs, and its tools
# (etcdctl, etcdutl) from the etcd project's release image of that version, run through containerd's
# `ctr` (on every host, works while the kubelet's pods are stopped); the image is pulled when absent.
# Filled in: __TOOLS_REPOSITORY__ (versions.ETCD_TOOLS_IMAGE_REPOSITORY), __ETCD_VERSION__ (the
# version kubeadm runs for kubernetesVersion, used when the manifest names none).

# etcd_version MANIFEST: the version of the etcd image the static pod runs (3.6.5 of etcd:3.6.5-0).
etcd_version() {
  local found
  found=$(sed -n 's#^ *image: *[^ ]*/etcd:v\{0,1\}\([0-9][0-9.]*\)\(-[0-9]*\)\{0,1\} *$#\1#p' "$1" 2>/dev/null | head -n 1)
  echo "${found:-__ETCD_VERSION__}"
}

# etcd_tool VERSION PATH[:ro]... -- TOOL ARG...: TOOL of that etcd version on the host network, each
# PATH bind-mounted at the same path (read-only with :ro), so paths in the arguments mean the same.
etcd_tool() {
  local image=__TOOLS_REPOSITORY__:v$1 mounts=() path
  shift
  while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
    path=${1%:ro}
    if [ "$path" != "$1" ]; then
      mounts+=(--mount "type=bind,src=$path,dst=$path,options=rbind:ro")
    else
      mounts+=(--mount "type=bind,src=$path,dst=$path,options=rbind:rw")
    fi
    shift
  done
  shift
  if ! ctr -n k8s.io images ls -q | grep -qxF "$image"; then
    ctr -n k8s.io images pull "$image" >/dev/null
  fi
  ctr -n k8s.io run --rm --net-host "${mounts[@]}" "$image" "gpu-cluster-etcd-$$-$RANDOM" "$@"
}
