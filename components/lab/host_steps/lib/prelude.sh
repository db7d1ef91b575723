#!/usr/bin/env bash
# The opening of every host script (after the shebang line scripts.py writes): strict mode, the
# state directory, and the helpers every step uses (put_file, apt_get, apt_pin, apt_unpin_purge;
# apt_repo is lib/apt_repo.sh). Filled in: nothing.

set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
readonly STATE_DIR=/var/lib/gpu-cluster

# put_file PATH MODE: write stdin to PATH only if the content differs; say whether it changed.
# Callers test its status (`if put_file`, `put_file || true`), which turns off `set -e` inside it,
# so a failed write exits the script explicitly; never call it in a pipeline, where that exit
# would only end the pipeline's subshell.
put_file() {
  local path=$1 mode=$2 tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if [ -f "$path" ] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 1
  fi
  if ! install -D -m "$mode" "$tmp" "$path"; then
    rm -f "$tmp"
    echo "cannot write $path" >&2
    exit 1
  fi
  rm -f "$tmp"
  echo "updated $path"
}

# apt_get ARGS...: apt-get that waits up to 5 minutes for the dpkg lock instead of failing at
# once, so an unattended-upgrades run (or another step's install) does not fail the step.
apt_get() {
  apt-get -o DPkg::Lock::Timeout=300 "$@"
}

# apt_pin PKG=VERSION...: install exactly these versions (only when one differs) and hold them.
apt_pin() {
  local spec pkg want have missing=()
  for spec in "$@"; do
    pkg=${spec%%=*}
    want=${spec#*=}
    have=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
    if [ "$have" != "$want" ]; then
      missing+=("$spec")
    fi
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    apt_get update -q
    apt_get install -y -q --allow-downgrades --allow-change-held-packages "${missing[@]}"
  fi
  for spec in "$@"; do
    pkg=${spec%%=*}
    if ! apt-mark showhold | grep -qx "$pkg"; then
      apt-mark hold "$pkg"
    fi
  done
}

# apt_unpin_purge PKG...: release the hold and remove the packages if installed.
apt_unpin_purge() {
  local pkg
  for pkg in "$@"; do
    if dpkg-query -W "$pkg" >/dev/null 2>&1; then
      apt-mark unhold "$pkg" >/dev/null
      apt_get purge -y -q "$pkg"
    fi
  done
}

install -d -m 0755 "$STATE_DIR"
