#!/usr/bin/env bash
# Node prep, GPU hosts: NVIDIA's container toolkit from its signed apt repository, pinned.
# Filled in: __PACKAGES__ (the toolkit's four packages as PKG=VERSION words, versions.py),
# __KEY_PINS__ (the fingerprints the repository's key must have, '' unchecked).

# @include lib/apt_repo.sh
apt_repo nvidia-container-toolkit \
  https://nvidia.github.io/libnvidia-container/gpgkey __KEY_PINS__ \
  "deb [signed-by=@KEYRING@] https://nvidia.github.io/libnvidia-container/stable/deb/$(dpkg --print-architecture) /"
apt_pin __PACKAGES__
