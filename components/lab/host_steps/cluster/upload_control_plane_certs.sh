#!/usr/bin/env bash
# On the first control plane, every `up` of a cluster with more than one control plane (before any
# control plane joins): upload the shared certificates, encrypted with the cluster's certificate
# key read from stdin (a Pulumi secret: node_join.Membership). kubeadm deletes the upload after 2
# hours; uploading again at each `up` under the same key means a control plane added months later
# (or a join retried after a failed `up`) finds them, while no joiner's config has to change.
# Filled in: nothing.

read -r key || true
if ! [[ $key =~ ^[0-9a-f]{64}$ ]]; then
  echo "no certificate key on stdin (64 hex digits)" >&2
  exit 1
fi
if ! kubeadm init phase upload-certs --upload-certs --certificate-key "$key" >/dev/null 2>&1; then
  echo "kubeadm could not upload the control-plane certificates" >&2
  exit 1
fi
echo "control-plane certificates uploaded; kubeadm deletes them in 2 hours"
