"""Issue 15 on every stack: the training keys reaching the pods, the shared caches, the data
preparation Job (training.prepareData) and dev's existing NFS export (seed 003), as the cluster
receives them.

Every plan here also passes the whole-cluster check (tests/whole_cluster.py): admission (the
claim the pods mount exists, every object against the API's schema), Pod Security of the training
namespace, and the scheduler placing the prepare pod and the training pods on the modelled nodes.
Objects of the data layer are further validated strictly (kubernetes-validate, every supported minor).
"""

from __future__ import annotations

import functools
import ipaddress
import posixpath
from typing import Any

import kubernetes_validate
import pytest
import yaml

import config
from components import versions
from components.dev.storage import NFS_MOUNT_OPTIONS, NFS_PV
from components.storage_contract import CLAIM_NAME, MOUNTS, TRAINING_NAMESPACE
from components.training import launch, prepare
from config.scheduling_contract import JOB_LABEL
from render import program
from render.__main__ import kubernetes_objects
from render.cluster.pod_security import violations
from stacks.addons import PREPARE_JOB, TRAINING_JOB
from tests.conftest import PROJECT_DIR, stack_config_with

SEED_003_NFS = {"server": "192.168.49.1", "path": "/srv/nfs/kubedata"}
TRAINING_KEYS = {"dataset": "cifar10", "model": "resnet18", "learningRate": 0.1, "warmupEpochs": 2,
                 "weightDecay": 0.0005, "epochs": 30}


_with = stack_config_with  # tests/conftest.py


# case -> (stack, overrides of the committed stack file)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "lab": ("lab", {}),
    "dev": ("dev", {}),
    "gke": ("gke", {}),
    "lab-prepare": ("lab", {"training": {**TRAINING_KEYS, "prepareData": True}}),
    "lab-pytorchjob-prepare": ("lab", {"training": {"launcher": "pytorchjob", "dataset": "fashion-mnist",
                                                    "prepareData": True}, "acceptance": {"nccl": False}}),
    "gke-prepare": ("gke", {"training": {"dataset": "fashion-mnist", "model": "mlp", "prepareData": True}}),
    # seed 003: minikube --gpus all and the host's NFS export; two GPU nodes may share it
    "dev-nfs": ("dev", {"storage": {"hostPath": "", "nfs": SEED_003_NFS},
                        "training": {**TRAINING_KEYS, "prepareData": True}}),
    "dev-nfs-two-nodes": ("dev", {"storage": {"hostPath": "", "nfs": SEED_003_NFS}, "gpuNodes": ["gpu0", "gpu1"],
                                  "gpuNodeGpus": None, "training": {"nodes": 2}}),
    "dev-prepare-off": ("dev", {"training": {"dataset": "cifar10", "prepareData": False}}),
}


@functools.cache
def plan(case: str) -> program.Plan:
    stack, overrides = CASES[case]
    return program.run(stack, config=_with(stack, **overrides))


def objects(case: str) -> list[dict[str, Any]]:
    return kubernetes_objects(plan(case))


def find(case: str, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects(case) if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{case}: {len(found)} {kind} {name}"
    return found[0]


def training_pods(case: str) -> list[dict[str, Any]]:
    job = [o for o in objects(case) if o["kind"] in ("Job", "PyTorchJob") and o["metadata"]["name"] == TRAINING_JOB]
    assert len(job) == 1, case
    if job[0]["kind"] == "Job":
        return [job[0]["spec"]["template"]]
    return [r["template"] for r in job[0]["spec"]["pytorchReplicaSpecs"].values()]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def _cache_mount(pod: dict[str, Any], container: dict[str, Any]) -> str:
    """The mount path of the shared claim's cache sub-path in this container."""
    claim_volumes = {v["name"] for v in pod["spec"]["volumes"]
                     if v.get("persistentVolumeClaim", {}).get("claimName") == CLAIM_NAME}
    (mount,) = [m for m in container["volumeMounts"]
                if m["name"] in claim_volumes and m.get("subPath") == MOUNTS["cache"][0]]
    return mount["mountPath"]


def _inside(path: str, directory: str) -> bool:
    path = posixpath.normpath(path)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


# --- the training keys and caches on every stack -----------------------------------------------


@pytest.mark.parametrize("case", ["lab", "dev", "gke", "lab-pytorchjob-prepare", "dev-nfs"])
def test_every_training_pod_keeps_its_caches_on_the_shared_claim(case: str) -> None:
    for pod in training_pods(case):
        (container,) = pod["spec"]["containers"]
        env, cache = env_of(container), _cache_mount(pod, container)
        for name in ("XDG_CACHE_HOME", "HF_HOME", "TORCH_HOME", "PIP_CACHE_DIR"):
            assert _inside(env[name], cache), (case, name, env[name], cache)
        assert env["XDG_CACHE_HOME"] == cache  # seed 003's ~/.cache is the cache mount itself
        assert len({env[n] for n in ("HF_HOME", "TORCH_HOME", "PIP_CACHE_DIR")}) == 3  # one directory each


@pytest.mark.parametrize("case", ["lab", "dev", "gke"])
def test_the_committed_stacks_keep_todays_trainer_defaults(case: str) -> None:
    (pod, *_) = training_pods(case)
    script = pod["spec"]["containers"][0]["command"][2]
    for flag in ("--dataset=auto", "--lr=0.05", "--augment=auto"):
        assert flag in script, (case, flag)
    assert "--warmup-epochs" not in script and "--weight-decay" not in script  # the trainer's defaults


@pytest.mark.parametrize("case", ["lab-prepare", "dev-nfs"])
def test_the_training_keys_reach_the_trainer(case: str) -> None:
    (pod,) = training_pods(case)
    script = pod["spec"]["containers"][0]["command"][2]
    preflight, torchrun = (line for line in script.splitlines() if line.startswith(("python -m", "torchrun")))
    for line in (preflight, torchrun):  # the preflight checks the same arguments the run gets
        for flag in ("--dataset=cifar10", "--model=resnet18", "--lr=0.1", "--warmup-epochs=2",
                     "--weight-decay=0.0005", "--epochs=30", f"--data-dir={MOUNTS['data'][1]}"):
            assert flag in line.split(), (case, flag)


# --- the data preparation Job ------------------------------------------------------------------


@pytest.mark.parametrize("case", ["lab", "dev", "gke", "dev-prepare-off", "dev-nfs-two-nodes"])
def test_no_prepare_job_unless_asked_for(case: str) -> None:
    assert not [o for o in objects(case) if o["metadata"]["name"].startswith(PREPARE_JOB)]
    assert "prepareData" not in plan(case).outputs


@pytest.mark.parametrize(("case", "dataset"), [("lab-prepare", "cifar10"), ("lab-pytorchjob-prepare", "fashion-mnist"),
                                               ("gke-prepare", "fashion-mnist"), ("dev-nfs", "cifar10")])
def test_prepare_job_downloads_the_dataset_into_the_data_mount(case: str, dataset: str) -> None:
    job = find(case, "Job", PREPARE_JOB)
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", "trainer.prepare", "--dataset", dataset,
                                    "--data-dir", MOUNTS["data"][1]]
    # the workload image, the one the training pods run
    assert container["image"] == training_pods(case)[0]["spec"]["containers"][0]["image"]
    mounts = {(m["subPath"], m["mountPath"]) for m in container["volumeMounts"]}
    assert mounts == {MOUNTS["data"], MOUNTS["cache"]}
    assert _inside(env_of(container)["TORCH_HOME"], _cache_mount(pod, container))
    # no GPU, small and bounded; one pod, few retries, a deadline; awaited by `up`
    limits = container["resources"]["limits"]
    assert not [r for r in limits if "gpu" in r or "/" in r]
    assert limits["memory"] == "1Gi" and limits["cpu"] == "1"
    spec = job["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, prepare.BACKOFF_LIMIT)
    assert 0 < spec["activeDeadlineSeconds"] <= 2 * 3600
    assert "pulumi.com/skipAwait" not in job["metadata"].get("annotations", {})
    assert pod["spec"]["restartPolicy"] == "Never"
    # Pod Security: baseline (the training namespace's level), not privileged
    assert violations(pod["spec"], pod["metadata"], "baseline") == []
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert plan(case).outputs["prepareData"]["dataset"] == dataset


@pytest.mark.parametrize("case", ["lab-prepare", "lab-pytorchjob-prepare", "gke-prepare", "dev-nfs"])
def test_training_waits_for_the_prepared_data(case: str) -> None:
    regs = plan(case).resources
    (prep,) = [r for r in regs if r.type == "gpucluster:training:PrepareData"]
    (train,) = [r for r in regs if r.type == "gpucluster:training:Job" and r.name == TRAINING_JOB]
    (prep_job,) = [r for r in regs if r.type == "kubernetes:batch/v1:Job" and r.parent == prep.urn]
    # the SDK expands a component dependency to the component's resources
    assert prep_job.urn in train.dependencies
    # awaited past the Job's own deadline, so `up` reports a failed download instead of moving on
    timeouts = prep_job.options["customTimeouts"]
    assert timeouts["create"] == f"{prepare.AWAIT_MINUTES}m"
    assert prepare.AWAIT_MINUTES * 60 > prepare.DEADLINE_SECONDS
    # it needs no GPU: not held back by the GPU-ready gate
    gate = [r.urn for r in regs if r.name == "gpu-ready"]
    assert gate and not set(gate) & set(prep.dependencies)


def _policies(case: str) -> list[dict[str, Any]]:
    return [o for o in objects(case) if o["kind"] == "NetworkPolicy"
            and o["metadata"]["namespace"] == TRAINING_NAMESPACE]


def _egress_rules_for(case: str, pod_labels: dict[str, str]) -> list[dict[str, Any]]:
    """Every egress rule of the training namespace's policies that select a pod with these labels."""
    rules: list[dict[str, Any]] = []
    for p in _policies(case):
        match = p["spec"]["podSelector"].get("matchLabels", {})
        if "Egress" in p["spec"]["policyTypes"] and all(pod_labels.get(k) == v for k, v in match.items()):
            rules += p["spec"].get("egress", [])
    return rules


@pytest.mark.parametrize("case", ["lab-prepare", "gke-prepare", "dev-nfs"])
def test_only_the_prepare_pods_reach_the_internet_and_only_on_https_and_http(case: str) -> None:
    def public_ports(rules: list[dict[str, Any]]) -> set[tuple[str, int]]:
        out: set[tuple[str, int]] = set()
        for rule in rules:
            for peer in rule.get("to", []):
                block = peer.get("ipBlock")
                if block and ipaddress.ip_address("1.1.1.1") in ipaddress.ip_network(block["cidr"]) and not any(
                        ipaddress.ip_address("1.1.1.1") in ipaddress.ip_network(e) for e in block.get("except", [])):
                    out |= {(p["protocol"], p["port"]) for p in rule["ports"]}
        return out

    prep_labels = find(case, "Job", PREPARE_JOB)["spec"]["template"]["metadata"]["labels"]
    assert public_ports(_egress_rules_for(case, prep_labels)) == {("TCP", 443), ("TCP", 80)}
    for pod in training_pods(case):
        assert public_ports(_egress_rules_for(case, pod["metadata"]["labels"])) == set()


def test_the_internet_policy_leaves_out_the_lab_clusters_own_ranges() -> None:
    cfg = plan("lab-prepare").config
    (policy,) = [p for p in _policies("lab-prepare") if p["metadata"]["name"] == f"{PREPARE_JOB}-internet"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {JOB_LABEL: PREPARE_JOB}}
    (rule,) = policy["spec"]["egress"]
    (peer,) = rule["to"]
    excepted = [ipaddress.ip_network(e) for e in peer["ipBlock"]["except"]]
    for internal in (cfg.pod_cidr, cfg.service_cidr, ipaddress.ip_network("169.254.169.254/32"),
                     ipaddress.ip_network("192.168.0.0/16")):
        assert any(internal.subnet_of(e) for e in excepted), internal


# --- dev: an existing NFS export (seed 003) ------------------------------------------------------


@pytest.mark.parametrize("case", ["dev-nfs", "dev-nfs-two-nodes"])
def test_dev_nfs_is_a_static_volume_bound_to_the_contracts_claim(case: str) -> None:
    pv = find(case, "PersistentVolume", NFS_PV)
    spec = pv["spec"]
    assert spec["nfs"] == SEED_003_NFS
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["mountOptions"] == list(NFS_MOUNT_OPTIONS)
    assert spec["storageClassName"] == ""
    assert spec["claimRef"] == {"namespace": TRAINING_NAMESPACE, "name": CLAIM_NAME}
    pvc = find(case, "PersistentVolumeClaim", CLAIM_NAME)
    assert pvc["spec"]["volumeName"] == NFS_PV
    assert pvc["spec"]["storageClassName"] == ""  # no default class takes it
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == spec["capacity"]["storage"]
    assert "pulumi.com/skipAwait" not in pvc["metadata"].get("annotations", {})  # binds at once: awaited
    assert not [o for o in objects(case) if o["kind"] == "PersistentVolume" and o["metadata"]["name"] != NFS_PV]
    assert plan(case).outputs["sharedClaim"]["backend"] == "nfs://192.168.49.1/srv/nfs/kubedata"


def test_dev_nfs_lets_two_nodes_train_on_one_claim() -> None:
    job = find("dev-nfs-two-nodes", "Job", TRAINING_JOB)
    assert job["spec"]["completions"] == 2
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert volume["persistentVolumeClaim"]["claimName"] == CLAIM_NAME


def _data_layer(case: str) -> list[dict[str, Any]]:
    return [o for o in objects(case)
            if o["kind"] in ("PersistentVolume", "PersistentVolumeClaim")
            or (o["kind"] in ("Job", "NetworkPolicy") and o["metadata"]["name"].startswith(PREPARE_JOB))]


@pytest.mark.parametrize("case", ["lab-prepare", "gke-prepare", "dev-nfs", "dev-nfs-two-nodes"])
def test_data_layer_objects_are_valid_for_every_supported_minor(case: str) -> None:
    layer = _data_layer(case)
    assert layer
    for obj in layer:
        for minor in versions.KUBERNETES_SUPPORTED_MINORS:
            try:
                used = kubernetes_validate.validate(obj, minor, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(f"{case}: {obj['kind']} {obj['metadata']['name']} is invalid for {minor}: {err}")
            assert used == minor


def test_pod_env_caches_come_from_the_storage_contract() -> None:
    spec = launch.LaunchSpec(job="train", service="train-hosts", namespace=TRAINING_NAMESPACE, nodes=1, gpus_per_node=1)
    env = {e["name"]: e["value"] for e in launch.pod_env(spec)}
    assert env["XDG_CACHE_HOME"] == MOUNTS["cache"][1]
    assert all(_inside(env[n], MOUNTS["cache"][1]) for n in ("HF_HOME", "TORCH_HOME", "PIP_CACHE_DIR"))
    # a network.roce or user variable never displaces them, nor they it
    spec = launch.LaunchSpec(job="train", service="train-hosts", namespace=TRAINING_NAMESPACE, nodes=1,
                             gpus_per_node=1, extra_env=(("HF_HOME", "/elsewhere"), ("NCCL_IB_HCA", "mlx5_0")))
    names = [e["name"] for e in launch.pod_env(spec)]
    assert names.count("HF_HOME") == 1 and "NCCL_IB_HCA" in names


def test_the_commented_dev_example_parses() -> None:
    """Pulumi.dev.yaml's commented NFS and dataset example, uncommented, is a dev stack that comes up."""
    lines = (PROJECT_DIR / "Pulumi.dev.yaml").read_text().splitlines()
    start = lines.index("  # gpu-cluster:storage:")
    storage_lines = [line.replace("  # ", "  ", 1) for line in lines[start:start + 5]]
    storage = yaml.safe_load("\n".join(storage_lines))["gpu-cluster:storage"]
    keys = lines.index("  # (add to gpu-cluster:training above):")
    training_lines = [line.replace("  #   ", "", 1) for line in lines[keys + 1:keys + 7]]
    extra = yaml.safe_load("\n".join(training_lines))
    example = program.run("dev", config=_with("dev", storage={"hostPath": "", **storage}, training=extra))
    cfg = example.config
    assert isinstance(cfg, config.DevStack)
    assert cfg.storage.nfs is not None and cfg.storage.nfs.path == "/srv/nfs/kubedata"
    assert cfg.training.prepare_data and cfg.training.dataset.value == "cifar10"
    assert example.outputs["sharedClaim"]["backend"].startswith("nfs://")
