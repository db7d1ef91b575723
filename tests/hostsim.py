"""A simulated lab host for running the real host scripts (components/lab/scripts.py, from host_steps/) safely.

`HostSim(tmp_dir)` prepares an isolated root under `tmp_dir`:

  root/etc, root/var_lib, root/var_log   bind-mounted over /etc, /var/lib, /var/log inside a
                                         private mount namespace (`unshare --mount`); /etc starts
                                         as a copy of the real /etc (minus password hashes and
                                         SSH host keys, which no script needs) with an Ubuntu
                                         22.04 os-release and, if given, a test fstab
  root/tmp                               TMPDIR of the scripts (mktemp)
  root/sys, root/opt                     with HostSim(hardware=True) only: bind-mounted over /sys
                                         and /opt, empty until a test adds a NIC (add_pci_nic)
                                         or a file (add_file); not compared by snapshot()
  sim/bin                                stand-ins for every tool that touches packages, the
                                         kernel or services (first on PATH); kubectl is
                                         tests/fake_kubectl.py, a small API server in a file
  sim/calls.log                          one record per stand-in call: its name and argv
  sim/state                              what the stand-ins remember (installed packages, holds,
                                         loaded modules, GPU count, the RDMA netns mode;
                                         k8s.json: nodes and ConfigMaps)

`root` holds the trees the scripts may write (compared by `snapshot()`); `sim` is outside them.
`run(command)` runs a command line the way the SSH session would (`bash -c <command>`), so the
`as_root()` wrapper and the `sudo` stand-in are exercised too. Nothing outside `tmp_dir` is
written: before running anything, the namespace checks that each tool resolves to its stand-in.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components import versions

TIMEOUT = 60  # seconds, per command

# Every tool the scripts call that would change packages, the kernel or services (or reach the
# network), plus `sleep` so retry loops finish at once.
STAND_INS = (
    "apt-get", "apt-mark", "dpkg-query", "dpkg", "modprobe", "sysctl", "swapoff", "swapon",
    "systemctl", "systemd-run", "update-initramfs", "nvidia-smi", "nvidia-ctk", "containerd",
    "curl", "gpg", "lsmod", "kubeadm", "kubectl", "openssl", "sudo", "reboot", "sleep", "rdma",
)

# Trees under `root` that are bind-mounted over the host's (real path -> directory name).
MOUNTS = {"/etc": "etc", "/var/lib": "var_lib", "/var/log": "var_log"}
COMPARED = ("etc", "var_lib", "var_log", "tmp")

# Files of the real /etc that are not copied: secrets no script reads.
_NOT_COPIED = ("shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "ssh_host_*_key", "*.key", "*.pem")

OS_RELEASE = 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n'

CONTAINERD_DEFAULT_CONFIG = """\
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.8"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = false
"""

NVIDIA_RUNTIME_STANZA = """\
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"""

_FAKE_KUBECTL = Path(__file__).with_name("fake_kubectl.py")

# One multi-call stand-in; each tool name in sim/bin is a symlink to it. @SIM@ is replaced by the
# absolute sim directory, so nothing depends on the environment the scripts pass on.
_STAND_IN = r"""#!/bin/bash
# Stand-in for host tools in the gpu-cluster script tests. Logs its argv, then behaves plausibly.
set -u
SIM=@SIM@
STATE=$SIM/state
PKGS=$STATE/pkgs
name=${0##*/}
# One record per call: name and arguments, each ended by US (0x1f); the record ended by RS (0x1e).
{ printf '%s\037' "$name" "$@"; printf '\036\n'; } >>"$SIM/calls.log"
mkdir -p "$PKGS"
touch "$STATE/holds"

case $name in
sudo)
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
  exec "$@"
  ;;
apt-get)
  action=
  skip=
  for a in "$@"; do
    if [ -n "$skip" ]; then skip=; continue; fi  # the value of -o / -c
    case $a in -o|-c) skip=1; continue ;; -*) continue ;; esac
    if [ -z "$action" ]; then action=$a; continue; fi
    case $action in
      install)
        pkg=${a%%=*}
        if [ "$pkg" = "$a" ]; then ver=1.0.0-sim; else ver=${a#*=}; fi
        printf '%s\n' "$ver" >"$PKGS/$pkg"
        echo "Setting up $pkg ($ver) ..."
        ;;
      purge|remove) rm -f "$PKGS/$a"; echo "Removing $a ..." ;;
    esac
  done
  ;;
apt-mark)
  holds=$STATE/holds
  action=${1:-}; shift || true
  case $action in
    showhold) sort "$holds" ;;
    hold) for p in "$@"; do grep -qx -- "$p" "$holds" || echo "$p" >>"$holds"; echo "$p set on hold."; done ;;
    unhold) for p in "$@"; do grep -vx -- "$p" "$holds" >"$holds.new"; mv "$holds.new" "$holds"; echo "Canceled hold on $p."; done ;;
  esac
  ;;
dpkg-query)
  fmt='${Package}\t${Version}\n'
  pkg=
  while [ $# -gt 0 ]; do
    case $1 in
      -W|--show) ;;
      -f|--showformat) shift; fmt=$1 ;;
      -f=*|--showformat=*) fmt=${1#*=} ;;
      *) pkg=$1 ;;
    esac
    shift
  done
  if [ -z "$pkg" ] || [ ! -f "$PKGS/$pkg" ]; then
    echo "dpkg-query: no packages found matching $pkg" >&2
    exit 1
  fi
  ver=$(cat "$PKGS/$pkg")
  fmt=${fmt//'${Version}'/$ver}
  fmt=${fmt//'${Status}'/install ok installed}
  fmt=${fmt//'${Package}'/$pkg}
  printf '%b' "$fmt"
  ;;
dpkg)
  case "$*" in *--print-architecture*) echo amd64 ;; esac
  if [ "${1:-}" = -S ]; then
    # The CNI plugins under /opt/cni/bin belong to kubernetes-cni once that is installed.
    case ${2:-} in
      /opt/cni/bin/*)
        if [ -f "$PKGS/kubernetes-cni" ]; then echo "kubernetes-cni: $2"; exit 0; fi ;;
    esac
    echo "dpkg-query: no path found matching pattern ${2:-}" >&2
    exit 1
  fi
  ;;
rdma)
  # iproute2's rdma: the subsystem's netns mode in state/rdma-netns; with state/rdma-netns-busy
  # the kernel refuses to change it (other network namespaces exist).
  mode=$(cat "$STATE/rdma-netns" 2>/dev/null || echo shared)
  case "$*" in
    "system show"|"system") echo "netns $mode copy-on-fork on" ;;
    "system set netns exclusive"|"system set netns shared")
      if [ -f "$STATE/rdma-netns-busy" ]; then
        echo "error: Device or resource busy" >&2
        exit 1
      fi
      echo "$4" >"$STATE/rdma-netns"
      ;;
    *) echo "rdma stand-in: unsupported: $*" >&2; exit 1 ;;
  esac
  ;;
modprobe)
  for m in "$@"; do
    case $m in
      -*) ;;
      nvidia)
        if compgen -G "$PKGS/nvidia-driver-*" >/dev/null && [ ! -f "$STATE/nouveau-loaded" ]; then
          touch "$STATE/nvidia-loaded"
        else
          echo "modprobe: ERROR: could not insert 'nvidia': No such device" >&2
          exit 1
        fi
        ;;
    esac
  done
  ;;
lsmod)
  echo "Module                  Size  Used by"
  echo "br_netfilter           32768  0"
  echo "overlay               212992  0"
  if [ -f "$STATE/nouveau-loaded" ]; then echo "nouveau              3096576  0"; fi
  ;;
nvidia-smi)
  if [ ! -f "$STATE/nvidia-loaded" ]; then
    echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    exit 9
  fi
  case " $* " in
    *" -L "*)
      n=$(cat "$STATE/gpus" 2>/dev/null || echo 2)
      i=0
      while [ "$i" -lt "$n" ]; do
        echo "GPU $i: NVIDIA A100-SXM4-80GB (UUID: GPU-0000000$i-0000-0000-0000-000000000000)"
        i=$((i + 1))
      done
      ;;
  esac
  ;;
nvidia-ctk)
  cfg=
  default=
  for a in "$@"; do
    case $a in
      --config=*) cfg=${a#--config=} ;;
      --set-as-default) default=1 ;;
    esac
  done
  if [ -n "$cfg" ]; then
    if ! grep -qF 'runtimes.nvidia]' "$cfg"; then
      cat >>"$cfg" <<'STANZA'
@NVIDIA_RUNTIME_STANZA@STANZA
    fi
    if [ -n "$default" ]; then
      sed -i 's/default_runtime_name = "runc"/default_runtime_name = "nvidia"/' "$cfg"
    fi
  fi
  ;;
containerd)
  if [ "${1:-}" = config ] && [ "${2:-}" = default ]; then
    cat <<'TOML'
@CONTAINERD_DEFAULT_CONFIG@TOML
  fi
  ;;
curl)
  # What HostSim.serve() put at the URL, else a stand-in key that carries the fingerprint its
  # publisher's real key has (state/published-keys: "<host> <fingerprint>" lines).
  url=
  for a in "$@"; do url=$a; done
  served=$SIM/http/$(printf '%s' "$url" | sha256sum | cut -c1-64)
  if [ -f "$served" ]; then cat "$served"; exit 0; fi
  site=${url#https://}
  site=${site%%/*}
  printf -- '-----BEGIN PGP PUBLIC KEY BLOCK-----\nfake key for %s\n' "$url"
  awk -v site="$site" '$1 == site { print "sim-fingerprint: " $2 }' "$STATE/published-keys" 2>/dev/null
  printf -- '-----END PGP PUBLIC KEY BLOCK-----\n'
  ;;
gpg)
  out=
  yes=
  show=
  file=
  while [ $# -gt 0 ]; do
    case $1 in
      -o|--output) shift; out=$1 ;;
      --yes) yes=1 ;;
      --show-keys) show=1 ;;
      -*) ;;
      *) file=$1 ;;
    esac
    shift
  done
  if [ -n "$show" ]; then
    # The stand-in keys' "sim-fingerprint:" lines, as gpg --with-colons lists primary keys.
    sed -n 's/^sim-fingerprint: \(.*\)$/pub:-:255:22:0:0:::u:::scSC\nfpr:::::::::\1:/p' "${file:-/dev/stdin}"
    exit 0
  fi
  if [ -z "$out" ]; then echo "gpg: no output file (stand-in)" >&2; exit 2; fi
  if [ -e "$out" ] && [ -z "$yes" ]; then echo "gpg: $out exists" >&2; exit 2; fi
  { echo "dearmored:"; cat; } >"$out"
  ;;
kubeadm)
  case ${1:-} in
    join)
      cfg=
      while [ $# -gt 0 ]; do
        case $1 in
          --config) shift; cfg=$1 ;;
          --config=*) cfg=${1#--config=} ;;
        esac
        shift
      done
      cp "$cfg" "$SIM/kubeadm-join-seen.yaml"
      stat -c %a "$cfg" >"$SIM/kubeadm-join-seen.mode"
      if [ -f "$STATE/kubeadm-join-fails" ]; then
        token=$(sed -n 's/^ *token: //p' "$cfg")
        echo "[preflight] Running pre-flight checks"
        echo "error execution phase preflight: couldn't validate the identity of the API Server: invalid token $token"
        echo "[preflight] port 10250 is in use"
        exit 3
      fi
      install -D -m 0600 /dev/null /etc/kubernetes/kubelet.conf
      ;;
    reset) rm -f /etc/kubernetes/kubelet.conf /etc/kubernetes/admin.conf ;;
    upgrade)
      # apply: refused unless the installed kubeadm is the target (as kubeadm does); on success
      # the control plane's manifest names the new version.
      case ${2:-} in
        plan) echo "[upgrade/versions] Target version: ${3:-}" ;;
        apply)
          want=${3#v}
          have=$(cat "$PKGS/kubeadm" 2>/dev/null || true)
          if [ "${have%%-*}" != "$want" ]; then
            echo "[upgrade/version] FATAL: the --version argument is invalid: kubeadm ${have%%-*} cannot upgrade to v$want"
            exit 1
          fi
          if [ -f "$STATE/kubeadm-upgrade-fails" ]; then
            echo "[upgrade/apply] FATAL: couldn't upgrade control plane. kubeadm has tried to recover everything into the earlier state."
            exit 1
          fi
          sed -i "s#/kube-apiserver:v[0-9.]*#/kube-apiserver:v$want#" /etc/kubernetes/manifests/kube-apiserver.yaml
          echo "[upgrade/successful] SUCCESS! Your cluster was upgraded to \"v$want\"."
          ;;
        node)
          # `phase kubelet-config`: the kubelet's file from the cluster's ConfigMap (state/kubelet-config).
          if [ "${3:-}" = phase ] && [ "${4:-}" = kubelet-config ] && [ -f "$STATE/kubelet-config" ]; then
            install -D -m 0644 "$STATE/kubelet-config" /var/lib/kubelet/config.yaml
          fi
          echo "[upgrade] The configuration for this node was successfully updated!"
          ;;
      esac
      ;;
    token) echo "abcdef.0123456789abcdef" ;;
    certs) echo "0000000000000000000000000000000000000000000000000000000000000000" ;;
  esac
  ;;
openssl)
  case "$*" in *dgst*) echo "SHA2-256(stdin)= 00ff" ;; esac
  ;;
sysctl)
  # `sysctl -n NAME`: the value in state/sysctl/NAME (none: the key is unknown); anything else is logged only.
  if [ "${1:-}" = -n ]; then
    cat "$STATE/sysctl/$2" 2>/dev/null || { echo "sysctl: cannot stat /proc/sys/${2//.//}: No such file or directory" >&2; exit 255; }
  fi
  ;;
*)
  # swapoff, swapon, systemctl, systemd-run, update-initramfs, reboot, sleep:
  # logging the call is all they do.
  ;;
esac
exit 0
"""

# Runs inside the new mount namespace: bind the isolated trees over the real ones, check that every
# stand-in shadows the real tool, then run the command as the SSH session would (`bash -c`).
_ENTER = r"""
set -eu
root=$1 sim=$2 line=$3
mount --bind "$root/etc" /etc
mount --bind "$root/var_lib" /var/lib
mount --bind "$root/var_log" /var/log
# A simulated machine's /sys and /opt, where the test gave it some (HostSim(hardware=True)).
for tree in sys opt; do
  if [ -d "$root/$tree" ]; then
    mount --bind "$root/$tree" "/$tree"
  fi
done
export PATH="$sim/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
hash -r
for tool in @STAND_INS@; do
  if [ "$(command -v "$tool")" != "$sim/bin/$tool" ]; then
    echo "hostsim: $tool does not resolve to its stand-in" >&2
    exit 97
  fi
done
exec env -i PATH="$PATH" TMPDIR="$root/tmp" HOME="$root/tmp" LANG=C.UTF-8 /bin/bash -c "$line"
"""


def isolation_unavailable() -> str | None:
    """Why the isolated runs cannot happen here, or None."""
    if os.geteuid() != 0:
        return "needs root (bind mounts in a private mount namespace)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"],
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )
    if probe.returncode != 0:
        return f"unshare --mount is not permitted here: {probe.stderr.strip()}"
    return None


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class FileState:
    sha256: str
    mode: int


def snapshot(*trees: Path) -> dict[str, FileState | str]:
    """Every regular file (content hash and mode) and symlink (target) under the trees."""
    out: dict[str, FileState | str] = {}
    for tree in trees:
        for dirpath, _dirs, files in os.walk(tree):
            for name in files:
                path = Path(dirpath, name)
                key = str(path.relative_to(tree.parent))
                st = path.lstat()
                if stat.S_ISLNK(st.st_mode):
                    out[key] = "-> " + os.readlink(path)
                elif stat.S_ISREG(st.st_mode):
                    out[key] = FileState(hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(st.st_mode))
    return out


def _copy_etc(dst: Path) -> None:
    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = set(shutil.ignore_patterns(*_NOT_COPIED)(directory, names))
        for name in names:
            st = os.lstat(os.path.join(directory, name))
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                skipped.add(name)  # sockets, fifos, devices
        return skipped

    shutil.copytree("/etc", dst, symlinks=True, ignore=ignore, ignore_dangling_symlinks=True)


class HostSim:
    def __init__(
        self, base: Path, fstab: str | None = None, gpus: int = 2, real_tools: tuple[str, ...] = (),
        hardware: bool = False,
    ):
        """`real_tools`: stand-ins left out, so the host's own tool runs (e.g. openssl, to hash a
        real certificate); only tools that write nothing outside the isolated trees belong here.
        `hardware`: the host gets its own, empty /sys and /opt (root/sys, root/opt), to be filled
        with add_pci_nic() and the like."""
        unknown = set(real_tools) - set(STAND_INS)
        if unknown:
            raise ValueError(f"not stand-ins: {sorted(unknown)}")
        self.stand_ins = tuple(t for t in STAND_INS if t not in real_tools)
        self.base = base
        self.root = base / "root"
        self.sim = base / "sim"
        self.bin = self.sim / "bin"
        self.state = self.sim / "state"
        self.log = self.sim / "calls.log"
        for d in (self.bin, self.state / "pkgs", self.root / "var_lib", self.root / "var_log", self.root / "tmp"):
            d.mkdir(parents=True)
        if hardware:
            (self.root / "sys").mkdir()
            (self.root / "opt").mkdir()
        self.log.touch()
        _copy_etc(self.root / "etc")
        etc = self.root / "etc"
        # The hosts run Ubuntu 22.04 whatever the test machine runs (containerd's apt source
        # names the release).
        (etc / "os-release").unlink(missing_ok=True)
        (etc / "os-release").write_text(OS_RELEASE)
        if fstab is not None:
            (etc / "fstab").write_text(fstab)
            (etc / "fstab").chmod(0o644)
        self.set_gpus(gpus)
        # The apt repositories' signing keys as their publishers serve them (versions.py pins them).
        published = {"pkgs.k8s.io": "kubernetes", "download.docker.com": "docker",
                     "nvidia.github.io": "nvidia-container-toolkit"}
        (self.state / "published-keys").write_text("".join(
            f"{site} {fpr}\n" for site, repo in published.items() for fpr in versions.APT_KEY_FINGERPRINTS[repo]))
        stand_in = (
            _STAND_IN.replace("@SIM@", shlex.quote(str(self.sim)))
            .replace("@NVIDIA_RUNTIME_STANZA@", NVIDIA_RUNTIME_STANZA)
            .replace("@CONTAINERD_DEFAULT_CONFIG@", CONTAINERD_DEFAULT_CONFIG)
        )
        multi = self.sim / "stand-in"
        multi.write_text(stand_in)
        multi.chmod(0o755)
        for tool in self.stand_ins:
            if tool != "kubectl":
                (self.bin / tool).symlink_to(multi)
        if "kubectl" in self.stand_ins:
            kubectl = self.bin / "kubectl"
            kubectl.write_text(_FAKE_KUBECTL.read_text().replace("@SIM@", str(self.sim)))
            kubectl.chmod(0o755)

    # -- state of the simulated host

    def set_gpus(self, n: int) -> None:
        (self.state / "gpus").write_text(f"{n}\n")

    def node_registers_after(self, failures: int) -> None:
        """`kubectl get node` fails this many times before it finds the node."""
        (self.state / "kubectl-get-node-failures").write_text(f"{failures}\n")

    def flag(self, name: str, on: bool = True) -> None:
        """State flags the stand-ins read: nouveau-loaded, nvidia-loaded, kubeadm-join-fails."""
        path = self.state / name
        if on:
            path.touch()
        else:
            path.unlink(missing_ok=True)

    # -- the fake API server kubectl talks to (tests/fake_kubectl.py)

    def k8s(self) -> dict[str, Any]:
        path = self.state / "k8s.json"
        state: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        state.setdefault("nodes", {})
        state.setdefault("configmaps", {})
        return state

    def _save_k8s(self, state: dict[str, Any]) -> None:
        (self.state / "k8s.json").write_text(json.dumps(state, indent=1, sort_keys=True))

    def k8s_node(self, name: str, **fields: Any) -> None:
        """Set fields of a Node: kubeletVersion, unschedulable, annotations, labels, bootID,
        allocatable, ready, deleted."""
        state = self.k8s()
        state["nodes"].setdefault(name, {}).update(fields)
        self._save_k8s(state)

    def k8s_configmap(self, name: str, **data: str) -> None:
        state = self.k8s()
        state["configmaps"][name] = data
        self._save_k8s(state)

    def etcd_members(self, *members: tuple[str, str, str]) -> None:
        """The etcd members (id, node name, address) the fake API server's etcd pod lists."""
        state = self.k8s()
        state["etcdMembers"] = [{"id": i, "name": n, "address": a} for i, n, a in members]
        self._save_k8s(state)

    def k8s_flag(self, name: str, on: bool | str = True) -> None:
        """drainFails, etcdSnapshotFails, etcdSnapshotDamaged; etcdSnapshotFrom (a path: tests/fake_kubectl.py)."""
        state = self.k8s()
        state[name] = on
        self._save_k8s(state)

    def add_pci_nic(self, interface: str | None, pci: str, driver: str | None, hca: str | None, ports: int = 1) -> None:
        """A NIC in the simulated /sys as the kernel lays it out: the PCI device under
        devices/pci0000:00/, /sys/bus/pci/devices/<pci> a link to it, its driver a link into
        bus/pci/drivers, its netdev (if any) under net/ with /sys/class/net/<if> a link to that,
        and its RDMA device (if any) under infiniband/<hca> with `ports` ports. None: left out
        (not bound, or in another network namespace)."""
        sys = self.root / "sys"
        if not sys.is_dir():
            raise ValueError("HostSim(hardware=True) has a /sys")
        dev = sys / "devices" / "pci0000:00" / pci
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x8086\n")
        bus = sys / "bus" / "pci" / "devices"
        bus.mkdir(parents=True, exist_ok=True)
        (bus / pci).symlink_to(f"../../../devices/pci0000:00/{pci}")
        if driver is not None:
            (sys / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")
        if interface is not None:
            (dev / "net" / interface).mkdir(parents=True)
            (dev / "net" / interface / "device").symlink_to("../../../" + pci)
            cls = sys / "class" / "net"
            cls.mkdir(parents=True, exist_ok=True)
            (cls / interface).symlink_to(f"../../devices/pci0000:00/{pci}/net/{interface}")
        if hca is not None:
            (dev / "infiniband" / hca / "ports").mkdir(parents=True)
            for port in range(1, ports + 1):
                (dev / "infiniband" / hca / "ports" / str(port)).mkdir()

    def add_file(self, real: str, text: str = "", mode: int = 0o755) -> None:
        """A file of the simulated /opt or /sys (HostSim(hardware=True)), e.g. a CNI plugin."""
        for tree in ("opt", "sys"):
            if real.startswith(f"/{tree}/"):
                path = self.root / tree / real[len(tree) + 2:]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                path.chmod(mode)
                return
        raise ValueError(f"{real} is not under /opt or /sys")

    def serve(self, url: str, body: str) -> None:
        """What the curl stand-in answers for `url` from now on (e.g. a real armored OpenPGP key)."""
        served = self.sim / "http" / hashlib.sha256(url.encode()).hexdigest()
        served.parent.mkdir(exist_ok=True)
        served.write_text(body)

    def installed(self) -> dict[str, str]:
        return {p.name: p.read_text().strip() for p in (self.state / "pkgs").iterdir()}

    def holds(self) -> list[str]:
        return (self.state / "holds").read_text().split() if (self.state / "holds").exists() else []

    def path(self, real: str) -> Path:
        """Where a path of the simulated host lives on the real machine."""
        for prefix, tree in MOUNTS.items():
            if real == prefix or real.startswith(prefix + "/"):
                return self.root / tree / real[len(prefix) + 1:]
        raise ValueError(f"{real} is not in an isolated tree")

    def snapshot(self) -> dict[str, FileState | str]:
        return snapshot(*(self.root / t for t in COMPARED))

    # -- running

    def calls(self) -> list[list[str]]:
        """Every stand-in call so far, as argv lists (argv[0] = the tool's name)."""
        records = self.log.read_text().split("\x1e\n")
        return [record.split("\x1f")[:-1] for record in records if record]

    def mark(self) -> int:
        """Position in the call log; calls_since(mark) gives what ran after it."""
        return len(self.calls())

    def calls_since(self, mark: int) -> list[list[str]]:
        return self.calls()[mark:]

    def run(self, command: str, stdin: str = "") -> Result:
        enter = _ENTER.replace("@STAND_INS@", " ".join(self.stand_ins))
        proc = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "/bin/bash", "-c", enter,
             "hostsim", str(self.root), str(self.sim), command],
            input=stdin, capture_output=True, text=True, timeout=TIMEOUT, check=False,
        )
        if proc.returncode == 97:
            raise RuntimeError(proc.stderr)
        return Result(proc.returncode, proc.stdout, proc.stderr)
