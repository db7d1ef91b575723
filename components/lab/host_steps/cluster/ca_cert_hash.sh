#!/usr/bin/env bash
# On the control plane, once per cluster: the pin every join checks the cluster's CA against.
# kubeadm's caCertHashes entry is "sha256:" and the hex SHA-256 of the CA's DER-encoded
# SubjectPublicKeyInfo (kubeadm join reference, discovery). `openssl pkey -pubin` reads any key
# type (kubeadm's CA is RSA, or ECDSA with encryptionAlgorithm ECDSA-P256). Printed on stdout;
# the hash is public (it pins, it does not authenticate). Filled in: nothing.

ca=/etc/kubernetes/pki/ca.crt
if [ ! -s "$ca" ]; then
  echo "no cluster CA at $ca: is the control plane initialised?" >&2
  exit 1
fi
der=$(mktemp)
trap 'rm -f "$der"' EXIT
openssl x509 -in "$ca" -noout -pubkey | openssl pkey -pubin -outform der >"$der"
if [ ! -s "$der" ]; then
  echo "could not read the public key of $ca" >&2
  exit 1
fi
hash=$(sha256sum "$der")
hash=${hash%% *}
if [[ ! $hash =~ ^[0-9a-f]{64}$ ]]; then
  echo "unexpected digest of $ca's public key" >&2
  exit 1
fi
printf 'sha256:%s\n' "$hash"
