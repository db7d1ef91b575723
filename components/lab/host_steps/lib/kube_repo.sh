#!/usr/bin/env bash
# Included by kube_packages and kube_packages_stage: the apt source of one minor's pkgs.k8s.io
# repository, the other minors' removed (a minor upgrade switches it).
# Filled in: __MINOR__ (the Kubernetes minor, e.g. 1.34), __KEY_PINS__ (the fingerprints its key
# must have, '' unchecked).

# @include lib/apt_repo.sh
# pkgs.k8s.io has one repository per minor; its key is fetched once per minor (one key signs all).
apt_repo kubernetes-v__MINOR__ https://pkgs.k8s.io/core:/stable:/v__MINOR__/deb/Release.key __KEY_PINS__ \
  "deb [signed-by=@KEYRING@] https://pkgs.k8s.io/core:/stable:/v__MINOR__/deb/ /"
for old in /etc/apt/sources.list.d/kubernetes-v*.list; do
  [ -e "$old" ] && [ "$old" != /etc/apt/sources.list.d/kubernetes-v__MINOR__.list ] && rm -f "$old"
done
