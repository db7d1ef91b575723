#!/usr/bin/env bash
# Every control plane, before kubeadm init or join: the files the API server's hardening flags name
# (components/lab/hardening.py), root only. stdin: the EncryptionConfiguration, a secret (empty with
# hardening.secretsEncryption off). A file whose feature is off is left where it is: an API server
# started with the flag that names it still reads it (docs/security/hardening.md, turning one off).
# Filled in: __CONFIG_DIR__, __AUDIT_LOG_DIR__, __AUDIT_POLICY_FILE__, __ENCRYPTION_CONFIG_FILE__,
# __AUDIT_POLICY__ (the policy's YAML, '' with hardening.auditLog off).

install -d -m 0700 __CONFIG_DIR__
encryption=$(cat)
policy=__AUDIT_POLICY__
if [ -n "$policy" ]; then
  install -d -m 0700 __AUDIT_LOG_DIR__
  put_file __AUDIT_POLICY_FILE__ 0600 <<<"$policy" || true
else
  echo "audit policy not written (gpu-cluster:hardening.auditLog.enabled is false)"
fi
if [ -n "$encryption" ]; then
  # The API server re-reads it within a minute (--encryption-provider-config-automatic-reload).
  put_file __ENCRYPTION_CONFIG_FILE__ 0600 <<<"$encryption" || true
else
  echo "encryption config not written (gpu-cluster:hardening.secretsEncryption.enabled is false)"
fi
