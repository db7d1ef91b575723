"""EtcdBackup: scheduled etcd snapshots on one control plane, and the restore script for it
(docs/operations/etcd-backup.md).

How it runs, and why: a cron file on the host (/etc/cron.d/gpu-cluster-etcd-backup) runs the
snapshot script (host_steps/etcd/snapshot.sh), installed over SSH like every other host step. Not a
CronJob: a backup must not depend on the scheduler, the CNI or a node's pod network being healthy
(etcd alone suffices), the restore has to run on the host anyway (with the API server stopped), and
snapshot and restore then share one way to run the etcd tools. Not a systemd timer: cron reads
the five-field schedule exactly as config/cron.py checks it, while OnCalendar would need a
translation whose day-of-month/day-of-week rule differs (systemd requires both, cron either).

The tools: `etcdctl snapshot save` and `etcdutl snapshot status|restore` of the version the member
runs (read from its static pod manifest; versions.ETCD_KUBEADM where it names none), from the etcd
project's release image run by containerd's `ctr`: kubeadm's registry.k8s.io/etcd image has no
etcdutl, the restore tool from etcd 3.5 on.

Each run writes node-exporter textfile metrics (etcd_backup_*) into TEXTFILE_DIR, which the lab's
node-exporter reads (components/monitoring/etcd_backup.py holds the alert). The install step takes
a first snapshot and reports it: the stack output `etcdBackup` is that snapshot, as of `pulumi up`
(the metric is the live view).

Off the host: with etcdBackup.s3 each run also ships its snapshot, encrypted, to an S3-compatible
bucket (components/lab/etcd_backup_s3.py). The members run STAGGER_SECONDS apart, and a run refuses
(non-zero, its reason logged) when the backup directory's disk lacks room for one more snapshot,
its encrypted copy and RESERVE_BYTES.

Does not manage: copies on a filesystem other than the host's and, with storage.provision, the export
on the first control plane (an existing NFS export would need an NFS client on the control planes);
encryption of the files on the host (root-only files; they hold every Secret); deleting snapshots on destroy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
from pulumi_command import remote

from components.lab import scripts
from components.lab.etcd_tools import etcd_tool_values
from components.lab.host_steps import Shell, fill
from config.lab import Host

SNAPSHOT_SCRIPT = "/usr/local/sbin/gpu-cluster-etcd-snapshot"
# The install step's name under its host (render writes its stdin, the restore script, to
# hosts/<control plane>/etcd-restore.sh).
INSTALL_STEP = "etcd-backup-install"
CRON_FILE = "/etc/cron.d/gpu-cluster-etcd-backup"
# The node-exporter textfile directory on the host (host "/" is mounted at /host/root in its pod).
TEXTFILE_DIR = "/var/lib/gpu-cluster/node-exporter"
NODE_EXPORTER_TEXTFILE_DIR = "/host/root" + TEXTFILE_DIR
SHARED_SUBDIR = "etcd-backups"
# How long the restore waits for the pods to stop and etcd to answer (5 s each).
RESTORE_TRIES = 60
# How long a restored member of several waits for a quorum before it names the members still to
# restore and succeeds (5 s each): long enough for the member that completes a majority to see it.
RESTORE_QUORUM_TRIES = 4
PEER_PORT = 2380
# etcdBackup.s3's client on the host (components/lab/etcd_backup_s3.py installs it).
S3_CLIENT_PATH = "/usr/local/sbin/gpu-cluster-etcd-s3"
# The members' scheduled runs start this far apart (member index x this), so that the control planes
# do not all read their disks and upload in the same minute.
STAGGER_SECONDS = 300
# Free space the snapshot leaves on the backup directory's disk besides the new snapshot (and its
# encrypted copy): etcd's own data often shares that disk, and etcd stops on a full one.
RESERVE_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class EtcdBackupSettings:
    node: str
    schedule: str
    retain: int
    host_path: str
    kubernetes_minor: str
    members: tuple[Host, ...]  # every control plane: the restore's initial cluster
    shared_dir: str | None = None  # a local directory on the shared export, or None
    s3: bool = False  # etcdBackup.s3: each snapshot also goes, encrypted, to the bucket
    member_index: int = 0  # its place among the control planes: the schedule's offset (STAGGER_SECONDS each)


def initial_cluster(members: Sequence[Host]) -> str:
    """etcd's --initial-cluster as kubeadm writes it: member name = node name, peer URL on the
    node's advertise address."""
    return ",".join(f"{h.name}=https://{h.address}:{PEER_PORT}" for h in members)


def _tool_values(s: EtcdBackupSettings) -> dict[str, str | int]:
    return etcd_tool_values(s.kubernetes_minor)


def snapshot_script(s: EtcdBackupSettings) -> str:
    """The script cron runs (host_steps/etcd/snapshot.sh): complete, with its own strict mode."""
    body = fill("etcd/snapshot.sh", NODE=s.node, RETAIN=s.retain, BACKUP_DIR=s.host_path,
                SHARED_DIR=s.shared_dir or "", TEXTFILE_DIR=TEXTFILE_DIR, S3_CLIENT=S3_CLIENT_PATH if s.s3 else "",
                RESERVE_BYTES=RESERVE_BYTES, **_tool_values(s))
    return "#!/usr/bin/env bash\n# generated by gpu-cluster: the scheduled etcd snapshot\n" + body


def cron_entry(what: str, schedule: str, name: str, script: str, delay_seconds: int = 0) -> str:
    """/etc/cron.d's entry running `script`: one run at a time on this host (flock on /run/lock/`name`),
    its output to syslog tagged `name`; `delay_seconds` after each time of the schedule."""
    delay = f"sleep {delay_seconds} && " if delay_seconds else ""
    return (
        f"# generated by gpu-cluster: {what}\n"
        "SHELL=/bin/sh\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"{schedule} root {delay}flock -n /run/lock/{name} {script} 2>&1 | logger -t {name}\n"
    )


def cron_file(s: EtcdBackupSettings) -> str:
    return cron_entry("scheduled etcd snapshots (docs/operations/etcd-backup.md)", s.schedule,
                      "gpu-cluster-etcd-backup", SNAPSHOT_SCRIPT,
                      delay_seconds=s.member_index * STAGGER_SECONDS)


def here_document(text: str, end: str) -> Shell:
    """`text` as the body of a here-document that ends at the line `end` (refused inside it)."""
    if end in text.splitlines():
        raise ValueError(f"the text holds its here-document's end {end}")
    return Shell(text.rstrip("\n"))


def install_script(s: EtcdBackupSettings) -> str:
    return scripts._script(fill(  # noqa: SLF001 - the host scripts' common prelude
        "etcd/backup_install.sh", SNAPSHOT_SCRIPT=here_document(snapshot_script(s), "GPU_CLUSTER_ETCD_SNAPSHOT"),
        CRON_FILE=here_document(cron_file(s), "GPU_CLUSTER_ETCD_CRON"),
        BACKUP_DIR=s.host_path, TEXTFILE_DIR=TEXTFILE_DIR, NODE=s.node))


def remove_script() -> str:
    return scripts._script(fill("etcd/backup_remove.sh", TEXTFILE_DIR=TEXTFILE_DIR))  # noqa: SLF001


def restore_script(s: EtcdBackupSettings) -> str:
    """hosts/<node>/etcd-restore.sh (render): run by a person, as root, on that control plane."""
    body = fill("etcd/restore.sh", NODE=s.node, INITIAL_CLUSTER=initial_cluster(s.members), TRIES=RESTORE_TRIES,
                QUORUM_TRIES=RESTORE_QUORUM_TRIES, **_tool_values(s))
    return ("#!/usr/bin/env bash\n# generated by gpu-cluster: restore this control plane's etcd member "
            "(usage: sudo bash etcd-restore.sh SNAPSHOT | --verify SNAPSHOT | --start)\n" + body)


@dataclass(frozen=True)
class EtcdBackupArgs:
    settings: EtcdBackupSettings
    connection: remote.ConnectionArgs
    after: Sequence[pulumi.Resource]  # the control plane's init or join: etcd runs


class EtcdBackup(pulumi.ComponentResource):
    """Name it `<host>-etcd-backup`: its step is then INSTALL_STEP under that host."""

    latest: pulumi.Output[dict[str, object]]

    def __init__(self, name: str, args: EtcdBackupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:EtcdBackup", name, None, opts)
        s = args.settings
        self.install = remote.Command(
            f"{name}-install",
            connection=args.connection,
            create=scripts.as_root(install_script(s)),
            update=scripts.as_root(install_script(s)),
            delete=scripts.as_root(remove_script()),
            stdin=restore_script(s),
            # The host it runs on: a new one (name or address) replaces it, the old one removed first.
            triggers=[s.node, *(str(h.address) for h in s.members if h.name == s.node)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.after), delete_before_replace=True),
        )
        self.latest = self.install.stdout.apply(_latest)
        self.register_outputs({"latest": self.latest})


def _latest(stdout: str | None) -> dict[str, object]:
    """The install step's last line: the snapshot it took ({node, path, time, sizeBytes})."""
    lines = (stdout or "").strip().splitlines()
    try:
        record = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        record = {}
    return record if isinstance(record, dict) else {}


def shared_dir(export_path: str) -> str:
    """The shared copy: beside storage.exportPath (/srv/gpu-cluster/shared-etcd-backups), not in it,
    so that the export every node mounts read-write as root does not hold the snapshots; the NFS
    server exports it to the control planes only (nfs_storage.NfsServerArgs.backup_dir)."""
    return f"{export_path.rstrip('/')}-{SHARED_SUBDIR}"
