#!/usr/bin/env bash
# Builds the pinned real components (docs/toolchain.md) from their published Go modules into a cache
# outside the checkout: <cache>/<name>-<version>/bin, cache = $GPU_CLUSTER_TOOLCHAIN or
# ~/.cache/gpu-cluster/toolchain. Versions: components/toolchain_versions.py; what is built: the
# `tool` directives of tools/toolchain/<name>/go.mod (its go.sum pins every module).
#
#   tools/toolchain/build.sh               every component
#   tools/toolchain/build.sh kubernetes    only these (names as in toolchain_versions.py)
#
# A component is rebuilt only when its stamp (version, go.mod, go.sum, Go version, ldflags and build
# tags) changed, so a second run builds nothing. Clear one with `rm -rf <cache>/<name>-<version>`, all
# with `rm -rf <cache>`; Go's own caches (go env GOMODCACHE GOCACHE) make a rebuild faster.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${GPU_CLUSTER_TOOLCHAIN:-$HOME/.cache/gpu-cluster/toolchain}"
python="${PYTHON:-python3}"
# Static binaries as upstream releases them; go.sum must already hold every module (no edits); no
# stamp of this checkout's git state (the binaries depend on the pins only).
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
declare -A versions=()  # component -> version (components/toolchain_versions.py)
order=()

# The commit time of a module version, as the proxy reports it (RFC 3339): the build date stamped
# into binaries, so that a rebuild of the same pin gives the same bytes.
module_time() {
  go list -m -json "$1" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["Time"])'
}

# Version ldflags as each upstream's release build sets them.
ldflags() {
  local name="$1" version="$2" flags="-s -w" pkg
  case "$name" in
    kubernetes)
      # hack/lib/version.sh (kube::version::ldflags): each key for client-go and component-base.
      # gitCommit is left empty: the proxy's module zip does not say which commit it is.
      local minor="${version#v*.}"
      minor="${minor%%.*}"
      local major="${version#v}"
      major="${major%%.*}"
      local date
      date="$(module_time k8s.io/kubernetes)"
      for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
        flags+=" -X '$pkg.gitVersion=$version' -X '$pkg.gitMajor=$major' -X '$pkg.gitMinor=$minor'"
        flags+=" -X '$pkg.gitTreeState=clean' -X '$pkg.buildDate=$date' -X '$pkg.gitCommit='"
      done
      ;;
    kwok)
      # hack/releases.sh sets these; kwokctl's default Kubernetes is the one built here.
      flags+=" -X 'sigs.k8s.io/kwok/pkg/consts.Version=${version#v}'"
      flags+=" -X 'sigs.k8s.io/kwok/pkg/consts.KubeVersion=${versions[kubernetes]#v}'"
      ;;
    kueue)
      # Makefile's LD_FLAGS (version_pkg); GitCommit is left empty as for Kubernetes, the build date is
      # the module's commit time (upstream stamps the build's own date).
      pkg=sigs.k8s.io/kueue/pkg/version
      flags+=" -X '$pkg.GitVersion=$version' -X '$pkg.GitCommit=' -X '$pkg.BuildDate=$(module_time sigs.k8s.io/kueue)'"
      ;;
    pulumi | pulumi-language-python)
      # goreleaser (.goreleaser.yml) and the Makefile's PULUMI_VERSION ldflag.
      flags+=" -X 'github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$version'"
      ;;
    pulumi-kubernetes)
      # provider/Makefile's VERSION_FLAGS: the version the plugin reports (GetPluginInfo).
      flags+=" -X 'github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=${version#v}'"
      ;;
  esac
  printf '%s' "$flags"
}

# Build tags as upstream's release build passes them.
buildtags() {
  case "$1" in
    pulumi | pulumi-language-python) printf '%s' osusergo,grpcnotrace ;;
  esac
}

# The binary go build names after a module path ending in a major version (server/v3 -> server)
# gets the name upstream ships it under; files a binary needs beside it are copied from its module.
finish_binaries() {
  local name="$1" bin="$2" sdk
  case "$name" in
    etcd) mv "$bin/server" "$bin/etcd" ;;
    pulumi-language-python)
      # The host runs programs through this Python shim, found next to its own executable.
      sdk="$(go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)"
      install -m 0755 "$sdk/python/cmd/pulumi-language-python-exec" "$bin/"
      ;;
  esac
}

# Where a component's main packages are built from, printed as "<folder> <packages>": its own
# tools/toolchain/<name> module and its `tool` lines, except where upstream's main package needs files
# that its module zip lacks. pulumi-kubernetes embeds schema-embed.json and
# terraform-mapping-embed.json, which upstream's generate.go (`go generate`) makes from schema.json
# (with .version set) and terraform-mapping.json: the package is copied out of the read-only module
# cache into <work> beside a copy of our go.mod and go.sum, and generate.go runs there.
prepare_source() {
  local name="$1" version="$2" work="$3" pkg
  case "$name" in
    pulumi-kubernetes)
      pkg="$(go list -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)/cmd/pulumi-resource-kubernetes"
      rm -rf "$work"
      mkdir -p "$work/cmd"
      cp "$here/$name/go.mod" "$here/$name/go.sum" "$work/"
      cp -r "$pkg" "$work/cmd/"
      chmod -R u+w "$work"
      (cd "$work/cmd/pulumi-resource-kubernetes" && VERSION="${version#v}" go run generate.go) >&2
      echo "$work ./cmd/pulumi-resource-kubernetes"
      ;;
    *) echo "$here/$name tool" ;;
  esac
}

# What decides the bytes of a component's binaries: its pins, Go, and the flags it is built with.
stamp_of() {
  local name="$1" version="$2" flags="$3" tags="$4"
  {
    echo "$name $version"
    go version
    echo "ldflags: $flags"
    echo "tags: $tags"
    cat "$here/$name/go.mod" "$here/$name/go.sum"
  } | sha256sum | cut -d' ' -f1
}

now() { date +%s; }

# The whole file is read before main runs: editing it during a long build cannot change what the
# running build does next.
main() {
  while read -r name version; do
    versions[$name]="$version"
    order+=("$name")
  done < <(cd "$root" && "$python" -m components.toolchain_versions)

  local wanted=("$@")
  [ "${#wanted[@]}" -gt 0 ] || wanted=("${order[@]}")
  for name in "${wanted[@]}"; do
    if [ -z "${versions[$name]:-}" ]; then
      echo "build.sh: unknown component '$name' (known: ${order[*]})" >&2
      exit 2
    fi
  done

  total_start="$(now)"
  for name in "${wanted[@]}"; do
    version="${versions[$name]}"
    dir="$cache/$name-$version"
    flags="$(cd "$here/$name" && ldflags "$name" "$version")"
    tags="$(buildtags "$name")"
    stamp="$(stamp_of "$name" "$version" "$flags" "$tags")"
    if [ -d "$dir/bin" ] && [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp" ]; then
      echo "toolchain: $name $version: up to date in $dir/bin"
      continue
    fi
    echo "toolchain: $name $version: building into $dir/bin"
    rm -rf "$dir"
    mkdir -p "$dir/bin.partial"
    start="$(now)"
    (cd "$here/$name" && go mod download)
    downloaded="$(now)"
    echo "toolchain: $name: download $((downloaded - start)) s"
    # Wall time and the CPU time it took (user + system, all cores): the CPU time says what a
    # machine with other cores or load would take.
    local TIMEFORMAT="toolchain: $name: build %0R s (CPU %0U s user, %0S s system)"
    target="$(cd "$here/$name" && prepare_source "$name" "$version" "$dir/source")"
    source="${target%% *}" packages="${target#* }"
    time (cd "$source" && go build -trimpath -tags "$tags" -ldflags "$flags" -o "$dir/bin.partial/" "$packages")
    (cd "$here/$name" && finish_binaries "$name" "$dir/bin.partial")
    mv "$dir/bin.partial" "$dir/bin"
    rm -rf "$dir/source"
    echo "$stamp" >"$dir/stamp"
    echo "toolchain: $name: $(du -sh "$dir/bin" | cut -f1) in $dir/bin"
  done
  echo "toolchain: done in $(($(now) - total_start)) s ($cache)"
}

main "$@"; exit  # on one line: nothing after it is read, even if the file changed meanwhile
