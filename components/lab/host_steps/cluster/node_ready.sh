#!/usr/bin/env bash
# On the joined host itself, with its own credentials (system:node:<name>; the Node authorizer lets
# a node get, list and watch Node objects): wait until its Node is Ready (needs the CNI). It runs
# on the host, not the control plane, so N hosts open N sessions on N sshds. `kubectl wait` fails
# at once with NotFound while the kubelet has not registered the Node yet, so first wait for it.
# Filled in: __NODE__ (the host's name), __TRIES__ and __INTERVAL__ (scripts.NODE_REGISTER_*).

if [ ! -f /etc/kubernetes/kubelet.conf ]; then
  echo "__NODE__ has not joined: no /etc/kubernetes/kubelet.conf" >&2
  exit 1
fi
registered=
for _ in $(seq 1 __TRIES__); do
  if kubectl --kubeconfig /etc/kubernetes/kubelet.conf get node __NODE__ >/dev/null 2>&1; then
    registered=1
    break
  fi
  sleep __INTERVAL__
done
if [ -z "$registered" ]; then
  echo "node __NODE__ did not register with the API server" >&2
  exit 1
fi
kubectl --kubeconfig /etc/kubernetes/kubelet.conf wait --for=condition=Ready node/__NODE__ --timeout=10m
