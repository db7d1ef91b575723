#!/usr/bin/env bash
# On the control plane, for one joining control plane: upload the shared certificates under a fresh
# key (kubeadm deletes them after 2 hours, so a control plane added months later still finds them)
# and print that key on stdout (a secret: it decrypts the uploaded certificates). Filled in: nothing.

key=$(kubeadm certs certificate-key)
if ! kubeadm init phase upload-certs --upload-certs --certificate-key "$key" >/dev/null 2>&1; then
  echo "kubeadm could not upload the control-plane certificates" >&2
  exit 1
fi
printf '%s\n' "$key"
