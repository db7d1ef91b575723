#!/usr/bin/env bash
# The first control plane's init step, updated (stdin: the new kubeadm config, kept for reference):
# an etcd snapshot, verified as every snapshot is (its size and SHA-256, then `etcdutl snapshot
# status`) and kept on the host; with etcdBackup.s3 also uploaded, encrypted, as
# etcd-<node>-pre-upgrade-<UTC time>-v<from>-to-v<to>.db.enc; only then `kubeadm upgrade apply`, then
# this node's kubelet and kubectl, drained. Prints `etcd snapshot: <path>` (the stack output etcdSnapshot).
# Filled in: __NODE__, __VERSION__ (kubernetesVersion), __REVISION__ (the package revision),
# __SNAPSHOT_DIR__ (scripts.ETCD_SNAPSHOT_DIR), __SLOT_TRIES__ (10 s each), __S3_CLIENT__ (etcdBackup.s3's
# client; empty: none), and etcd_tool's values.

# @include etcd/snapshot_file.sh

# @include etcd/etcd_tool.sh

# @include etcd/snapshot_status.sh

node=__NODE__
want=__VERSION__
readonly SNAPSHOT_DIR=__SNAPSHOT_DIR__
install -d -m 0700 /etc/gpu-cluster /var/log/gpu-cluster
put_file /etc/gpu-cluster/kubeadm-init.yaml 0600 || true
if [ ! -f /etc/kubernetes/admin.conf ]; then
  echo "$node has no cluster to upgrade (no /etc/kubernetes/admin.conf)" >&2
  exit 1
fi
have=$(sed -n 's#^ *image: .*/kube-apiserver:v\([0-9.]*\).*#\1#p' /etc/kubernetes/manifests/kube-apiserver.yaml)
if [ -z "$have" ]; then
  echo "cannot read the control plane's version from /etc/kubernetes/manifests/kube-apiserver.yaml" >&2
  exit 1
fi
refuse_skew "$have" "$want" "the control plane ($node)"
wait_api
# Joined nodes keep their kubelet: refuse, before anything changes, a version too new for one.
refuse_node_skew "$node" "$want"
apt_pin kubeadm=$want-__REVISION__
if [ "$have" != "$want" ]; then
  # etcd runs as a static pod and sees /var/lib/etcd: the snapshot is written there, then
  # kept (root only: it holds every Secret) in $SNAPSHOT_DIR.
  snapshot=$SNAPSHOT_DIR/etcd-v$have-before-v$want.db
  if [ ! -s "$snapshot" ]; then
    part=/var/lib/etcd/gpu-cluster-snapshot.part
    rm -f "$part"
    k -n kube-system exec "etcd-$node" -- etcdctl --endpoints=https://127.0.0.1:2379 \
      --cacert=/etc/kubernetes/pki/etcd/ca.crt --cert=/etc/kubernetes/pki/etcd/server.crt \
      --key=/etc/kubernetes/pki/etcd/server.key snapshot save "$part" >&2
    if [ ! -s "$part" ]; then
      echo "the etcd snapshot $part is missing or empty; not upgrading" >&2
      exit 1
    fi
    install -d -m 0700 "$SNAPSHOT_DIR"
    checked=$SNAPSHOT_DIR/.${snapshot##*/}.part
    install -m 0600 "$part" "$checked"
    rm -f "$part"
    # Checked as a restore checks the file (etcd/snapshot_file.sh), then as the scheduled snapshots
    # are (etcd/snapshot_status.sh): a cut or damaged file is no way back.
    problem=$(snapshot_file_problem "$checked")
    if [ -n "$problem" ] || ! snapshot_status "$(etcd_version /etc/kubernetes/manifests/etcd.yaml)" "$checked" >&2; then
      rm -f "$checked"
      echo "${problem:-the etcd snapshot $checked does not verify (above)}; removed it; not upgrading" >&2
      exit 1
    fi
    mv -f "$checked" "$snapshot"
  fi
  # etcdBackup.s3: the copy off the host exists before kubeadm changes anything. `<snapshot>.s3`
  # records the upload (a person may write it to skip one: docs/operations/upgrading.md).
  s3_client=__S3_CLIENT__
  if [ -n "$s3_client" ] && [ ! -s "$snapshot.s3" ]; then
    if [ ! -x "$s3_client" ]; then
      echo "etcdBackup.s3 is set but its client $s3_client is not on $node yet (the etcd-backup-s3 step installs" \
        "it after this one): run \`pulumi up\` once with the old kubernetesVersion, then again; not upgrading" >&2
      exit 1
    fi
    rc=0
    "$s3_client" upload-pre-upgrade "$snapshot" "$have" "$want" >"$snapshot.s3.part" || rc=$?
    if [ "$rc" -ne 0 ]; then
      rm -f "$snapshot.s3.part"
      if [ "$rc" -eq 2 ]; then
        echo "the S3 client $s3_client on $node predates pre-upgrade uploads: run \`pulumi up\` once with the" \
          "old kubernetesVersion (it installs the new client), then again" >&2
      fi
      echo "the etcd snapshot $snapshot was not uploaded to etcdBackup.s3 (above); not upgrading: the copy off" \
        "the host must exist before kubeadm changes the cluster (docs/operations/upgrading.md says how to skip it)" >&2
      exit 1
    fi
    mv -f "$snapshot.s3.part" "$snapshot.s3"
    cat "$snapshot.s3"
  fi
  log=/var/log/gpu-cluster/kubeadm-upgrade.log
  if ! { kubeadm upgrade plan "v$want" && kubeadm upgrade apply "v$want" --yes; } >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    exit 1
  fi
  echo "control plane upgraded: v$have -> v$want"
fi
if [ "$(installed kubelet)" != "$want-__REVISION__" ] || [ "$(installed kubectl)" != "$want-__REVISION__" ]; then
  acquire_slot "$node" 1 __SLOT_TRIES__
  drain_node "$node"
  apt_pin kubelet=$want-__REVISION__ kubectl=$want-__REVISION__
  systemctl daemon-reload
  systemctl restart kubelet
fi
uncordon_node "$node"
for kept in "$SNAPSHOT_DIR"/etcd-v*-before-v"$want".db; do
  if [ -s "$kept" ]; then
    echo "etcd snapshot: $kept"
  fi
done
