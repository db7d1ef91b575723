#!/usr/bin/env bash
# Undo control_plane_files (the control plane was reset before, kubeadm_reset): the policy and the
# encryption config removed, the encryption key with it. The audit logs stay, as records.
# Filled in: __CONFIG_DIR__, __AUDIT_POLICY_FILE__, __ENCRYPTION_CONFIG_FILE__.

rm -f __AUDIT_POLICY_FILE__ __ENCRYPTION_CONFIG_FILE__
rmdir __CONFIG_DIR__ 2>/dev/null || true
