"""The lab stack's etcd backups (stacks/lab.py etcd_backups): one snapshot job per control plane,
after that control plane's etcd runs; the restore script each install carries is what render
writes to hosts/<control plane>/etcd-restore.sh; the shared copy only where the export is local.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.lab import etcd_backup
from render import program
from render.__main__ import write
from tests.conftest import host, stack_config_with

COMMAND = "command:remote:Command"
HA_HOSTS = [host("cp-1", "192.0.2.10", "control-plane"), host("cp-2", "192.0.2.13", "control-plane"),
            host("cp-3", "192.0.2.14", "control-plane"), host("gpu-1", "192.0.2.11", gpus=2),
            host("gpu-2", "192.0.2.12", gpus=2)]


def _installs(plan: program.Plan) -> dict[str, program.Registration]:
    return {r.name.removesuffix(f"-{etcd_backup.INSTALL_STEP}"): r for r in plan.of_type(COMMAND)
            if r.name.endswith(f"-{etcd_backup.INSTALL_STEP}")}


def _init_update(plan: program.Plan) -> str:
    """The first control plane's upgrade script (its init step's update)."""
    (init,) = [r for r in plan.of_type(COMMAND) if r.name == "control-plane-init"]
    return str(init.inputs["update"])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[program.Plan, Path]:
    plan = program.run("lab")
    out = tmp_path_factory.mktemp("render") / "lab"
    write(plan, out)
    return plan, out


def test_render_writes_each_control_planes_restore_script(rendered: tuple[program.Plan, Path]) -> None:
    plan, out = rendered
    installs = _installs(plan)
    assert list(installs) == ["cp-1"]
    script = (out / "hosts" / "cp-1" / "etcd-restore.sh")
    assert script.read_text() == installs["cp-1"].inputs["stdin"]
    assert script.stat().st_mode & 0o111
    assert "initial_cluster=cp-1=https://192.0.2.10:2380\n" in script.read_text()
    # Only control planes have one.
    assert sorted(p.parent.name for p in (out / "hosts").glob("*/etcd-restore.sh")) == ["cp-1"]


def test_the_backup_starts_once_etcd_runs(rendered: tuple[program.Plan, Path]) -> None:
    plan, _ = rendered
    (init,) = [r for r in plan.of_type(COMMAND) if r.name == "control-plane-init"]
    assert init.urn in _installs(plan)["cp-1"].dependencies


def test_the_stack_output_says_what_it_reports(rendered: tuple[program.Plan, Path]) -> None:
    plan, _ = rendered
    out = plan.outputs["etcdBackup"]
    assert out["schedule"] == "23 */6 * * *" and out["retain"] == 28
    assert "etcd-restore.sh" in out["restore"]
    assert isinstance(out["latestAtUp"], list) and len(out["latestAtUp"]) == 1


def test_every_control_plane_backs_up_and_restores_into_the_whole_cluster() -> None:
    plan = program.run("lab", config=stack_config_with(
        "lab", hosts=json.dumps(HA_HOSTS), controlPlaneEndpoint="k8s-api.lab.example:6443"))
    installs = _installs(plan)
    assert sorted(installs) == ["cp-1", "cp-2", "cp-3"]
    members = "cp-1=https://192.0.2.10:2380,cp-2=https://192.0.2.13:2380,cp-3=https://192.0.2.14:2380"
    for name, install in installs.items():
        restore = install.inputs["stdin"]
        assert f"node={name}\n" in restore and f"initial_cluster={members}\n" in restore
        # Only the first control plane serves the provisioned export: only it copies there.
        shared = "${ETCD_BACKUP_SHARED_DIR-/srv/gpu-cluster/shared-etcd-backups}"
        assert (shared in install.inputs["create"]) == (name == "cp-1")
    # A joined control plane's backup waits for its join (NodeJoin.ready).
    ready = {r.urn for r in plan.resources if r.name.startswith("cp-2-") and r.type == COMMAND
             and r.name != f"cp-2-{etcd_backup.INSTALL_STEP}"}
    assert set(installs["cp-2"].dependencies) & ready


def test_off_installs_nothing() -> None:
    plan = program.run("lab", config=stack_config_with("lab", etcdBackup=json.dumps({"enabled": False})))
    assert _installs(plan) == {}
    assert plan.outputs["etcdBackup"] == "off: etcdBackup.enabled is false"


def test_the_committed_ha_example_backs_up_every_control_plane() -> None:
    plan = program.run("lab-ha")
    installs = _installs(plan)
    planes = [h["name"] for h in json.loads(program.stack_config("lab-ha")[0]["gpu-cluster:hosts"])
              if h["role"] == "control-plane"]
    assert sorted(installs) == sorted(planes) and len(planes) == 3
    clusters = {line for r in installs.values() for line in r.inputs["stdin"].splitlines()
                if line.startswith("initial_cluster=")}
    assert len(clusters) == 1 and all(f"{p}=https://" in next(iter(clusters)) for p in planes)


S3 = {"endpoint": "https://s3.example.com", "bucket": "lab-backups", "prefix": "lab-a/etcd/"}
S3_SECRETS = ["etcdBackupS3AccessKeyId", "etcdBackupS3SecretAccessKey", "etcdBackupEncryptionKey"]


def test_s3_installs_the_client_with_its_secrets_before_each_backup() -> None:
    """etcdBackup.s3: one client step per control plane, its config (credentials, key) a secret, the
    backup after it; every member's cron entry its own offset (staggered, not all in one minute)."""
    values, secret_keys = stack_config_with("lab", hosts=json.dumps(HA_HOSTS),
                                            controlPlaneEndpoint="k8s-api.lab.example:6443",
                                            etcdBackup=json.dumps({"s3": S3}))
    values.update({f"gpu-cluster:{k}": "[secret]" for k in S3_SECRETS})
    plan = program.run("lab", config=(values, [*secret_keys, *(f"gpu-cluster:{k}" for k in S3_SECRETS)]))
    installs = _installs(plan)
    clients = {r.name.removesuffix("-etcd-backup-s3-install"): r for r in plan.of_type(COMMAND)
               if r.name.endswith("-etcd-backup-s3-install")}
    assert sorted(clients) == sorted(installs) == ["cp-1", "cp-2", "cp-3"]
    for name, client in clients.items():
        assert client.inputs["stdin"] == program.SECRET_MARKER
        assert client.inputs["logging"] == "none"
        assert client.urn in installs[name].dependencies
        assert "gpu-cluster-etcd-s3 check" in client.inputs["create"]
        assert "${ETCD_BACKUP_S3_CLIENT-/usr/local/sbin/gpu-cluster-etcd-s3}" in installs[name].inputs["create"]
    entries = {name: next(line for line in r.inputs["create"].splitlines() if line.startswith("23 */6 * * * root"))
               for name, r in installs.items()}
    assert entries["cp-1"].startswith("23 */6 * * * root flock -n ")
    assert entries["cp-2"].startswith(f"23 */6 * * * root sleep {etcd_backup.STAGGER_SECONDS} && flock -n ")
    assert entries["cp-3"].startswith(f"23 */6 * * * root sleep {2 * etcd_backup.STAGGER_SECONDS} && flock -n ")
    assert plan.outputs["etcdBackup"]["s3"] == "https://s3.example.com/lab-backups/lab-a/etcd/ (encrypted)"
    # The snapshot before an upgrade goes up too, through the same client, before kubeadm runs.
    assert f"s3_client={etcd_backup.S3_CLIENT_PATH}\n" in _init_update(plan)


def test_without_s3_no_client_and_no_upload() -> None:
    plan = program.run("lab")
    assert not [r for r in plan.of_type(COMMAND) if r.name.endswith("-etcd-backup-s3-install")]
    assert "s3_client=${ETCD_BACKUP_S3_CLIENT-''}" in _installs(plan)["cp-1"].inputs["create"]
    assert "s3_client=''\n" in _init_update(plan)


def _exports(create: str) -> dict[str, set[str]]:
    """The exports file the NFS server step writes (exports(5): `path client(options) ...`): path ->
    the client addresses allowed to mount it, and with it every folder below it."""
    body = create.split("/etc/exports.d/gpu-cluster.exports 0644 <<'EOF'; then\n", 1)[1].split("\nEOF\n", 1)[0]
    out: dict[str, set[str]] = {}
    for line in body.splitlines():
        path, *clients = line.split()
        out[path] = {c.split("(", 1)[0] for c in clients}
    return out


def test_the_shared_snapshot_copy_is_exported_to_the_control_planes_only() -> None:
    """storage.provision with three control planes: the export every node mounts read-write as root
    does not hold the snapshots (a parent export opens every folder below it); their folder is a
    sibling, exported to the control planes alone."""
    plan = program.run("lab-ha")
    (nfs,) = [r for r in plan.of_type(COMMAND) if r.name.endswith("-nfs-server")]
    exports = _exports(nfs.inputs["create"])
    values, _ = program.stack_config("lab-ha")
    hosts = json.loads(values["gpu-cluster:hosts"])
    planes = {h["address"] for h in hosts if h["role"] == "control-plane"}
    snapshots = next(i for n, i in _installs(plan).items() if "SHARED_DIR-/" in i.inputs["create"])
    shared = snapshots.inputs["create"].split("${ETCD_BACKUP_SHARED_DIR-", 1)[1].split("}", 1)[0]
    assert exports["/srv/gpu-cluster/shared"] == {h["address"] for h in hosts}
    assert exports[shared] == planes
    for path, clients in exports.items():
        if shared == path or shared.startswith(path.rstrip("/") + "/"):
            assert clients <= planes, f"{path} opens the snapshots to {clients - planes}"
    assert "mv -n -t" in nfs.inputs["create"]  # the old copy inside the export is moved out


@pytest.mark.parametrize(("server", "copier"), [("cp-2", "cp-2"), ("gpu-1", None)])
def test_the_shared_copy_follows_the_export_host(server: str, copier: str | None) -> None:
    """Issue 34: the snapshot copy goes where the export is local (storage.server), not to the entry
    point; an export on a worker, where no snapshot is taken, gets no snapshot folder at all."""
    plan = program.run("lab", config=stack_config_with(
        "lab", hosts=json.dumps(HA_HOSTS), controlPlaneEndpoint="k8s-api.lab.example:6443",
        storage={"server": server}))
    shared = "${ETCD_BACKUP_SHARED_DIR-/srv/gpu-cluster/shared-etcd-backups}"
    assert [n for n, i in _installs(plan).items() if shared in i.inputs["create"]] == ([copier] if copier else [])
    (nfs,) = [r for r in plan.of_type(COMMAND) if r.name.endswith("-nfs-server")]
    assert nfs.inputs["connection"]["host"] == next(h["address"] for h in HA_HOSTS if h["name"] == server)
    assert ("/srv/gpu-cluster/shared-etcd-backups" in _exports(nfs.inputs["create"])) == (copier is not None)
