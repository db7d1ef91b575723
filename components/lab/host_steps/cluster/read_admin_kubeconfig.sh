#!/usr/bin/env bash
# On the first control plane: the admin kubeconfig on stdout (a Pulumi secret). Filled in: nothing.

cat /etc/kubernetes/admin.conf
