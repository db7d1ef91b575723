"""The Kubernetes side of distributed training, checked under mocks for both launchers:

  - every object of the training layer is valid (kubernetes-validate strict, every supported
    minor); PyTorchJobs validate against the upstream v1.9.4 CRD schema, with no field the API
    server would prune;
  - the Indexed Job: completions = parallelism = nodes, subdomain = headless Service,
    MASTER_ADDR = <job>-0.<service>, podFailurePolicy, backoffLimitPerIndex, restartPolicy Never;
  - the PyTorchJob: Master 1 + Worker nodes-1, container `pytorch`, elasticPolicy when asked;
  - both: GPUs, cpu/memory, tolerations, /dev/shm, NCCL env, the shared claim per the contract,
    the GPU-ready gate as a dependency, skipAwait on the training run (not on the acceptance Job);
  - the NetworkPolicies, by evaluating them on pods (who may talk to whom on which port);
  - shared storage per platform, the training operator pin, and `python -m render`.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pulumi
import pytest
import yaml

from components import versions
from components.lab import nfs_storage, scripts
from components.storage_contract import CLAIM_NAME, MOUNTS, TRAINING_NAMESPACE, SharedClaim
from components.training import launch, network_policy
from components.training.job import (
    TrainingJob,
    TrainingJobArgs,
    pytorchjob_manifest,
    service_name,
)
from config import ConfigError
from config.scheduling_contract import JOB_LABEL, training_job_labels
from config.training import Launcher, TrainingConfig
from render import program
from render.__main__ import kubernetes_objects
from stacks.addons import ACCEPTANCE_JOB, RDMA_LINK_JOB, TRAINING_JOB, acceptance_args
from tests.conftest import PROJECT_DIR, SEED_002_ROCE, stack_config_with
from tests.monitoring_crd_schema import is_custom_resource, validate_custom_resource

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"
JOB = "kubernetes:batch/v1:Job"
PYTORCHJOB = "kubernetes:kubeflow.org/v1:PyTorchJob"
TRAINING_JOB_TYPE = "gpucluster:training:Job"


_with = stack_config_with  # tests/conftest.py


# case -> (stack, overrides of the committed stack file)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "lab": ("lab", {}),
    "dev": ("dev", {}),
    # pytorchjob: acceptance and training in one `up` are rejected (the PyTorchJob is not awaited)
    "lab-pytorchjob": ("lab", {"training": {"launcher": "pytorchjob"}, "acceptance": {"nccl": False}}),
    "lab-pytorchjob-acceptance": ("lab", {"training": {"launcher": "pytorchjob", "enabled": False},
                                          "network": {"linkGbps": 100, "rdma": True, "roce": SEED_002_ROCE}}),
    "lab-pytorchjob-elastic": ("lab", {"training": {"launcher": "pytorchjob", "elastic": {"enabled": True, "minNodes": 1}},
                                       "acceptance": {"nccl": False},
                                       "storage": {"provision": False, "nfs": {"server": "nas.lab.example", "path": "/export/gpu"}}}),
    "dev-pytorchjob-default-class": ("dev", {"training": {"launcher": "pytorchjob"},
                                             "storage": {"hostPath": "", "useDefaultClass": True}}),
    "lab-gate-disabled": ("lab", {"gpu": {"gate": {"enabled": False, "timeoutMinutes": 30}}}),
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


def training_objects(case: str) -> list[dict[str, Any]]:
    return [
        o for o in objects(case)
        if o["metadata"].get("namespace") == TRAINING_NAMESPACE
        or o["kind"] in ("StorageClass", "PersistentVolume")
        or (o["kind"] == "Namespace" and o["metadata"]["name"] == TRAINING_NAMESPACE)
    ]


def launcher_of(case: str) -> Launcher:
    return Launcher.PYTORCHJOB if "pytorchjob" in case else Launcher.INDEXED_JOB


def job_object(case: str, name: str) -> dict[str, Any]:
    return find(case, "PyTorchJob" if launcher_of(case) is Launcher.PYTORCHJOB else "Job", name)


def pod_specs(job: dict[str, Any]) -> list[dict[str, Any]]:
    if job["kind"] == "Job":
        return [job["spec"]["template"]]
    return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def jobs_of(case: str) -> list[str]:
    """The jobs the case's config turns on (acceptance first)."""
    stack, overrides = CASES[case]
    values = _with(stack, **overrides)[0]
    t = json.loads(values.get("gpu-cluster:training", "{}"))
    acc = json.loads(values.get("gpu-cluster:acceptance", "{}"))
    return [name for name, on in ((ACCEPTANCE_JOB, acc.get("nccl")), (TRAINING_JOB, t.get("enabled"))) if on]


def rdma_case(case: str) -> bool:
    """network.roce: an RDMA link test (always an Indexed Job: tests/stacks/test_rdma_network.py)."""
    stack, overrides = CASES[case]
    return "roce" in json.loads(_with(stack, **overrides)[0].get("gpu-cluster:network", "{}"))


# ---------------------------------------------------------------------------------------------
# validity


def _training_params() -> list[Any]:
    return [
        pytest.param(case, i, id=f"{case}-{o['kind']}-{o['metadata']['name']}")
        for case in CASES
        for i, o in enumerate(training_objects(case))
    ]


@pytest.mark.parametrize(("case", "index"), _training_params())
def test_object_valid_for_every_supported_minor(case: str, index: int, pytorchjob_schema, upstream_dir) -> None:
    obj = training_objects(case)[index]
    if obj["kind"] == "PyTorchJob":
        errors = sorted(e.message for e in pytorchjob_schema.iter_errors(obj))
        assert errors == [], errors
        return
    if is_custom_resource(obj):  # NetworkAttachmentDefinition, ServiceMonitor, PodMonitor (network.roce)
        validate_custom_resource(obj, upstream_dir)
        return
    for minor in versions.KUBERNETES_SUPPORTED_MINORS:
        used = kubernetes_validate.validate(obj, minor, strict=True)
        assert used == minor


@pytest.fixture(scope="module")
def pytorchjob_crd(upstream_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((upstream_dir / "crds" / "kubeflow.org_pytorchjobs.yaml").read_text())


@pytest.fixture(scope="module")
def pytorchjob_schema(pytorchjob_crd) -> jsonschema.Draft7Validator:
    (version,) = [v for v in pytorchjob_crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])


def pruned_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the API server would silently drop: not declared by a structural schema."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            if props is not None and key in props:
                out += pruned_fields(value, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += pruned_fields(value, extra, f"{path}.{key}")
            elif props is not None or extra is False:
                out.append(f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            out += pruned_fields(item, schema["items"], f"{path}[{i}]")
    return out


@pytest.mark.parametrize("case", [c for c in CASES if "pytorchjob" in c])
def test_pytorchjob_has_no_field_the_crd_would_prune(case: str, pytorchjob_crd) -> None:
    (version,) = [v for v in pytorchjob_crd["spec"]["versions"] if v["name"] == "v1"]
    schema = version["schema"]["openAPIV3Schema"]
    for name in jobs_of(case):
        job = job_object(case, name)
        assert pruned_fields({k: v for k, v in job.items() if k != "metadata"}, schema) == []


def test_crd_check_has_teeth(pytorchjob_crd, pytorchjob_schema) -> None:
    job = json.loads(json.dumps(job_object("lab-pytorchjob", TRAINING_JOB)))
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    assert list(pytorchjob_schema.iter_errors(job))
    job = json.loads(json.dumps(job_object("lab-pytorchjob", TRAINING_JOB)))
    job["spec"]["elasticPolicy"] = {"minReplica": 1}
    (version,) = pytorchjob_crd["spec"]["versions"]
    assert pruned_fields(job, version["schema"]["openAPIV3Schema"]) == [".spec.elasticPolicy.minReplica"]


def test_strict_validation_rejects_a_misplaced_job_field() -> None:
    job = json.loads(json.dumps(find("lab", "Job", TRAINING_JOB)))
    job["spec"]["template"]["spec"]["backoffLimitPerIndex"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.34", strict=True)


# ---------------------------------------------------------------------------------------------
# the Indexed Job


@pytest.mark.parametrize("case", ["lab", "dev", "lab-gate-disabled"])
def test_indexed_job_shape(case: str) -> None:
    cfg_nodes = 2 if case.startswith("lab") else 1
    for name in jobs_of(case):
        job = find(case, "Job", name)
        svc = find(case, "Service", service_name(name))
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed"
        assert spec["completions"] == spec["parallelism"] == cfg_nodes
        assert spec["backoffLimitPerIndex"] == 2 and spec["maxFailedIndexes"] == 0
        assert "backoffLimit" not in spec
        pod = spec["template"]["spec"]
        assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
        assert pod["subdomain"] == svc["metadata"]["name"]
        assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
        assert svc["spec"]["ports"] == [{"name": "rdzv", "port": 29500, "targetPort": 29500, "protocol": "TCP"}]
        # the Service selects exactly this job's pods
        labels = spec["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= labels.items()
        assert labels[JOB_LABEL] == name
        (container,) = pod["containers"]
        env = env_of(container)
        assert env["MASTER_ADDR"] == f"{name}-0.{service_name(name)}"
        assert env["MASTER_PORT"] == "29500"
        script = container["command"][2]
        assert container["command"][:2] == ["/bin/sh", "-c"]
        assert '--node_rank="$JOB_COMPLETION_INDEX"' in script
        assert f"--nnodes={cfg_nodes}" in script and "--nproc_per_node=1" in script
        assert "--rdzv_backend=c10d" in script and f"--rdzv_id={name}" in script


def test_pod_failure_policy() -> None:
    job = find("lab", "Job", TRAINING_JOB)
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailJob"
    exit_codes = rules[1]["onExitCodes"]
    assert exit_codes["containerName"] == job["spec"]["template"]["spec"]["containers"][0]["name"]
    assert exit_codes["operator"] == "In"
    assert set(exit_codes["values"]) == set(launch.FATAL_EXIT_CODES)
    assert launch.EXIT_CONFIG_ERROR in exit_codes["values"]
    assert 0 not in exit_codes["values"]


def test_trainer_arguments_come_from_config() -> None:
    script = find("lab", "Job", TRAINING_JOB)["spec"]["template"]["spec"]["containers"][0]["command"][2]
    for arg in ("--epochs=10", "--batch-size=64", "--checkpoint-every=1", "--checkpoint-every-steps=0",
                "--max_restarts=3", f"--checkpoint-dir={MOUNTS['checkpoints'][1]}/{TRAINING_JOB}", "-m trainer.train"):
        assert arg in script, arg


@pytest.mark.parametrize("case", ["lab", "lab-pytorchjob"])
def test_checkpoint_every_steps_reaches_the_command(case: str) -> None:
    stack, overrides = CASES[case]
    p = program.run(stack, config=_with(stack, **{**overrides, "training": {
        **overrides.get("training", {}), "checkpointEverySteps": 250}}))
    (job,) = [o for o in kubernetes_objects(p)
              if o["kind"] in ("Job", "PyTorchJob") and o["metadata"]["name"] == TRAINING_JOB]
    for template in pod_specs(job):
        script = template["spec"]["containers"][0]["command"][2]
        assert "--checkpoint-every-steps=250" in script and "--checkpoint-every=1" in script


def test_acceptance_runs_the_bench_with_the_declared_network() -> None:
    container = find("lab", "Job", ACCEPTANCE_JOB)["spec"]["template"]["spec"]["containers"][0]
    script = container["command"][2]
    assert "-m trainer.allreduce_bench" in script
    # Pulumi.lab.yaml leaves minBusbwFraction to the socket transport's default (rdma: false)
    assert "--link-gbps 25 --min-busbw-fraction 0.25 --max-bytes 1073741824" in script
    assert "--rdma" not in script
    assert "--max_restarts=0" in script  # a measurement is not retried in place
    elastic = container_of("lab-pytorchjob-acceptance", ACCEPTANCE_JOB, "Master")["command"][2]
    assert "--link-gbps 100" in elastic and "--rdma" in elastic


def container_of(case: str, name: str, replica: str = "Master") -> dict[str, Any]:
    job = job_object(case, name)
    pod = job["spec"]["template"] if job["kind"] == "Job" else job["spec"]["pytorchReplicaSpecs"][replica]["template"]
    (container,) = pod["spec"]["containers"]
    return container


# ---------------------------------------------------------------------------------------------
# the PyTorchJob


@pytest.mark.parametrize("case", [c for c in CASES if "pytorchjob" in c])
def test_pytorchjob_shape(case: str) -> None:
    nodes = 2 if case.startswith("lab") else 1
    for name in jobs_of(case):
        job = job_object(case, name)
        assert job["apiVersion"] == "kubeflow.org/v1"
        specs = job["spec"]["pytorchReplicaSpecs"]
        assert specs["Master"]["replicas"] == 1
        assert specs.get("Worker", {"replicas": 0})["replicas"] == nodes - 1
        assert set(specs) == ({"Master", "Worker"} if nodes > 1 else {"Master"})
        assert job["spec"]["nprocPerNode"] == "1"
        assert job["spec"]["runPolicy"]["backoffLimit"] == 2 * nodes
        for replica in specs.values():
            assert replica["restartPolicy"] == "ExitCode"
            pod = replica["template"]["spec"]
            (container,) = pod["containers"]
            assert container["name"] == "pytorch"
            assert {"name": "pytorchjob-port", "containerPort": 29500, "protocol": "TCP"} in container["ports"]
            assert "subdomain" not in pod and "restartPolicy" not in pod
            env = env_of(container)
            assert "MASTER_ADDR" not in env  # the operator injects it
            assert '--node_rank="$RANK"' in container["command"][2]
        elastic = job["spec"].get("elasticPolicy")
        if case == "lab-pytorchjob-elastic":
            assert elastic == {"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "c10d", "maxRestarts": 3}
            assert "--nnodes=1:2" in container["command"][2]
        else:
            assert elastic is None


def test_training_operator_installed_once_and_pinned() -> None:
    p = plan("lab-pytorchjob")
    (operator,) = p.of_type("gpucluster:training:Operator")
    (directory,) = p.of_type("kubernetes:kustomize/v2:Directory")
    assert directory.parent == operator.urn
    assert directory.inputs["directory"] == versions.TRAINING_OPERATOR_KUSTOMIZE
    assert versions.TRAINING_OPERATOR_KUSTOMIZE.endswith(f"?ref={versions.TRAINING_OPERATOR_VERSION}")
    assert "/manifests/overlays/standalone" in versions.TRAINING_OPERATOR_KUSTOMIZE
    for job in p.of_type(TRAINING_JOB_TYPE):
        assert depends_on(p, job, operator)
    assert not plan("lab").of_type("gpucluster:training:Operator")


def test_training_operator_pin_matches_upstream_notes(upstream_dir: Path) -> None:
    sources = (upstream_dir / "SOURCES.md").read_text()
    tag = versions.TRAINING_OPERATOR_VERSION
    image, _, new_tag = versions.TRAINING_OPERATOR_IMAGE.rpartition(":")
    row = re.search(rf"^\| \*\*{re.escape(tag)}\*\* \|.*$", sources, re.MULTILINE)
    assert row, f"SOURCES.md has no overlay row for {tag}"
    assert image in row.group(0) and f"**{new_tag}**" in row.group(0)
    assert f"tag **{tag}**" in sources  # the copied CRD is that tag's


# ---------------------------------------------------------------------------------------------
# both launchers: pods


@pytest.mark.parametrize("case", list(CASES))
def test_pods_resources_shm_claim_nccl(case: str) -> None:
    stack, overrides = CASES[case]
    t = json.loads(_with(stack, **overrides)[0]["gpu-cluster:training"])
    rdma = "roce" in overrides.get("network", {})  # network.roce: the RDMA device and IPC_LOCK too
    for name in jobs_of(case):
        for template in pod_specs(job_object(case, name)):
            pod = template["spec"]
            (container,) = pod["containers"]
            assert container["image"] == IMAGE
            res = container["resources"]
            assert res["limits"] == {"nvidia.com/gpu": 1, "cpu": t["cpuLimit"], "memory": t["memoryLimit"],
                                     **({"rdma/roce": 1} if rdma else {})}
            assert res["requests"] == {"cpu": t["cpuRequest"], "memory": t["memoryRequest"]}
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
            anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert anti == [{"labelSelector": {"matchLabels": template["metadata"]["labels"]},
                             "topologyKey": "kubernetes.io/hostname"}]
            volumes = {v["name"]: v for v in pod["volumes"]}
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            shm = volumes[mounts["/dev/shm"]["name"]]
            assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": t["shmSize"]}
            for sub_path, mount_path in MOUNTS.values():
                m = mounts[mount_path]
                assert m["subPath"] == sub_path
                assert volumes[m["name"]]["persistentVolumeClaim"] == {"claimName": CLAIM_NAME}
            assert env_of(container)["NCCL_DEBUG"] == t.get("nccl", {}).get("debug", "WARN")
            assert container["securityContext"] == {"allowPrivilegeEscalation": False, **(
                {"capabilities": {"add": ["IPC_LOCK"]}} if rdma else {})}
            assert not pod.get("hostNetwork") and "privileged" not in container["securityContext"]


def test_nccl_socket_ifname_reaches_the_pods() -> None:
    p = program.run("lab", config=_with("lab", training={"nccl": {"debug": "INFO", "socketIfname": "^lo,docker"}}))
    (job,) = [o for o in kubernetes_objects(p) if o["kind"] == "Job" and o["metadata"]["name"] == TRAINING_JOB]
    env = env_of(job["spec"]["template"]["spec"]["containers"][0])
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_SOCKET_IFNAME"] == "^lo,docker"


def depends_on(p: program.Plan, reg: program.Registration, target: program.Registration) -> bool:
    """`reg` depends on `target` or (a component dependency is expanded by the SDK) a descendant."""
    deps = set(reg.dependencies)
    if target.urn in deps:
        return True
    descendants, frontier = set(), {target.urn}
    while frontier:
        frontier = {r.urn for r in p.resources if r.parent in frontier} - descendants
        descendants |= frontier
    return bool(descendants & deps)


@pytest.mark.parametrize("case", list(CASES))
def test_jobs_depend_on_gate_claim_and_policies(case: str) -> None:
    p = plan(case)
    gates = p.of_type("gpucluster:gpu:ReadyGate")
    (claim,) = [r for r in p.of_type("kubernetes:core/v1:PersistentVolumeClaim")
                if r.inputs["metadata"]["name"] == CLAIM_NAME]
    (policies,) = p.of_type("gpucluster:training:NamespacePolicies")
    jobs = {r.name: r for r in p.of_type(TRAINING_JOB_TYPE)}
    assert sorted(jobs) == sorted(jobs_of(case) + ([RDMA_LINK_JOB] if rdma_case(case) else []))
    for job in jobs.values():
        assert depends_on(p, job, policies)
        if case == "lab-gate-disabled":
            assert not gates
        else:
            (gate,) = gates
            assert depends_on(p, job, gate)
        kids = [r for r in p.resources if r.parent == job.urn and r.type in (JOB, PYTORCHJOB)]
        (kid,) = kids
        assert claim.urn in kid.dependencies
    if {ACCEPTANCE_JOB, TRAINING_JOB} <= set(jobs):
        # the run waits for the network check (same GPUs; a bad network should stop it)
        assert depends_on(p, jobs[TRAINING_JOB], jobs[ACCEPTANCE_JOB])


@pytest.mark.parametrize("case", list(CASES))
def test_skip_await_on_the_run_not_on_the_indexed_acceptance(case: str) -> None:
    for name in jobs_of(case):
        annotations = job_object(case, name)["metadata"].get("annotations", {})
        awaited = name == ACCEPTANCE_JOB and launcher_of(case) is Launcher.INDEXED_JOB
        assert annotations.get("pulumi.com/skipAwait") == (None if awaited else "true"), name


def test_acceptance_job_is_awaited_with_a_timeout(mocks) -> None:
    seen: dict[str, Any] = {}

    def record(args: pulumi.ResourceTransformationArgs):
        if args.type_ == "kubernetes:batch/v1:Job":
            seen[args.name] = args.opts.custom_timeouts
        return None

    pulumi.runtime.register_stack_transformation(record)
    claim = SharedClaim(ready=[])
    t = TrainingConfig(enabled=True, image=IMAGE, nodes=2)
    TrainingJob("acc", TrainingJobArgs(training=t, claim=claim, module=launch.BENCH_MODULE,
                                       module_args=("--link-gbps", "25"), await_minutes=30))
    TrainingJob("run", TrainingJobArgs(training=t, claim=claim))
    assert seen["acc"].create == "30m"
    assert seen["run"] is None


@pulumi.runtime.test
def test_component_outputs(mocks):
    # Only metadata is read back: the SDK cannot turn a spec holding a `values` key
    # (podFailurePolicy onExitCodes, node affinity) into its typed output class.
    t = TrainingConfig(enabled=True, image=IMAGE, nodes=3, gpus_per_node=2, backoff_limit_per_index=4)
    job = TrainingJob("demo", TrainingJobArgs(training=t, claim=SharedClaim(ready=[])))

    def check(values):
        metadata, urn = values
        assert (metadata["name"], metadata["namespace"]) == ("demo", TRAINING_NAMESPACE)
        assert metadata["annotations"] == {"pulumi.com/skipAwait": "true"}
        assert metadata["labels"] == training_job_labels("demo")
        assert urn.endswith("gpucluster:training:Job$kubernetes:batch/v1:Job::demo")

    return pulumi.Output.all(job.job.metadata, job.job.urn).apply(check)


def test_component_registers_policy_service_and_job(mocks) -> None:
    t = TrainingConfig(enabled=True, image=IMAGE, nodes=2, launcher="pytorchjob")
    TrainingJob("pj", TrainingJobArgs(training=t, claim=SharedClaim(ready=[])))
    TrainingJob("ij", TrainingJobArgs(training=t.model_copy(update={"launcher": Launcher.INDEXED_JOB}),
                                      claim=SharedClaim(ready=[])))

    @pulumi.runtime.test
    def wait():
        return pulumi.Output.from_input(1)

    wait()
    by_name = {r.name: r.type for r in mocks.plan.resources}
    assert by_name["pj"] == PYTORCHJOB and by_name["pj-peers"].endswith("NetworkPolicy")
    assert "pj-hosts" not in by_name
    assert by_name["ij"] == JOB and by_name["ij-hosts"] == "kubernetes:core/v1:Service"
    for r in mocks.plan.resources:
        if r.name.startswith(("pj", "ij")) and r.type != TRAINING_JOB_TYPE:
            parent = r.parent.rsplit("::", 1)[-1]
            assert r.name == parent or r.name.startswith(parent + "-")


def test_manifests_reject_missing_image() -> None:
    with pytest.raises(ValueError):
        TrainingJob("x", TrainingJobArgs(training=TrainingConfig(), claim=SharedClaim(ready=[])))


def test_pytorchjob_manifest_single_node_has_no_workers() -> None:
    t = TrainingConfig(enabled=True, image=IMAGE, nodes=1, launcher="pytorchjob")
    assert set(pytorchjob_manifest("one", TrainingJobArgs(training=t, claim=SharedClaim(ready=[])))["spec"]
               ["pytorchReplicaSpecs"]) == {"Master"}


def test_acceptance_args_format() -> None:
    from tests.config.test_training_k8s_config import IMAGE as CFG_IMAGE  # noqa: F401 (same example image)
    from tests.conftest import lab_config

    cfg = lab_config(
        hosts=[{"name": "cp-1", "address": "192.0.2.10", "role": "control-plane", "hostKey": _key()},
               {"name": "g1", "address": "192.0.2.11", "role": "worker", "gpus": 1, "hostKey": _key()},
               {"name": "g2", "address": "192.0.2.12", "role": "worker", "gpus": 1, "hostKey": _key()}],
        training={"image": IMAGE, "nodes": 2}, acceptance={"nccl": True, "minBusbwFraction": 0.75, "maxBytes": 2**31},
        network={"linkGbps": 12.5, "rdma": True, "roce": SEED_002_ROCE}, storage={"provision": True},
    )
    assert acceptance_args(cfg) == ("--link-gbps", "12.5", "--min-busbw-fraction", "0.75",
                                    "--max-bytes", str(2**31), "--rdma")


def _key() -> str:
    from tests.conftest import ED25519

    return ED25519


# ---------------------------------------------------------------------------------------------
# NetworkPolicy semantics, evaluated


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "the evaluator handles matchLabels only"
    return selector.get("matchLabels", {}).items() <= labels.items()


def _port_ok(rule: dict[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        low = p["port"]
        if low <= port <= p.get("endPort", low):
            return True
    return False


def _peer_ok(peers: list[dict[str, Any]] | None, policy_ns: str, other: dict[str, Any]) -> bool:
    if not peers:
        return True
    for peer in peers:
        if "ipBlock" in peer:
            assert set(peer["ipBlock"]) == {"cidr"}, "the evaluator handles cidr only"
            if "ip" in other and ipaddress.ip_address(other["ip"]) in ipaddress.ip_network(peer["ipBlock"]["cidr"]):
                return True
            continue
        ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
        ns_ok = _selects(ns_sel, other["ns_labels"]) if ns_sel is not None else other["ns"] == policy_ns
        pod_ok = _selects(pod_sel, other["labels"]) if pod_sel is not None else True
        if ns_ok and pod_ok:
            return True
    return False


def allowed(policies: list[dict[str, Any]], src: dict[str, Any], dst: dict[str, Any], port: int,
            protocol: str = "TCP") -> bool:
    def side(pod, kind, other, peer_key):
        selecting = [p for p in policies if p["metadata"]["namespace"] == pod["ns"]
                     and kind in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], pod["labels"])]
        if not selecting:
            return True
        return any(_peer_ok(rule.get(peer_key), p["metadata"]["namespace"], other) and _port_ok(rule, port, protocol)
                   for p in selecting for rule in p["spec"].get(kind.lower(), []))

    return side(src, "Egress", dst, "to") and side(dst, "Ingress", src, "from")


def _pod(ns: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"ns": ns, "labels": labels, "ns_labels": {"kubernetes.io/metadata.name": ns}}


def _address(ip: str) -> dict[str, Any]:
    """A destination that is no pod: an IP address (e.g. NodeLocal DNSCache's on the node)."""
    return {"ns": None, "labels": {}, "ns_labels": {}, "ip": ip}


@pytest.mark.parametrize("case", ["lab", "lab-pytorchjob"])
def test_network_policies_semantics(case: str) -> None:
    policies = [o for o in objects(case) if o["kind"] == "NetworkPolicy"]
    # the GPU health NCCL pair checks (components/gpu_health_pairs.py) are jobs of their own
    pair_checks = [o for o in objects(case) if o["kind"] == "CronJob" and o["metadata"]["namespace"] == TRAINING_NAMESPACE]
    # (the GPU health service's own policies live in its namespace: tests/components/health/)
    assert {p["metadata"]["name"] for p in policies if p["metadata"]["namespace"] == TRAINING_NAMESPACE} == {
        "default-deny", "allow-dns"} | {
        f"{job}-peers" for job in [*jobs_of(case), *(c["metadata"]["name"] for c in pair_checks)]}
    train = [_pod(TRAINING_NAMESPACE, t["metadata"]["labels"]) for t in pod_specs(job_object(case, TRAINING_JOB))]
    acc = _pod(TRAINING_NAMESPACE, training_job_labels(ACCEPTANCE_JOB))
    checks = [_pod(TRAINING_NAMESPACE, c["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"])
              for c in pair_checks]
    stray = _pod(TRAINING_NAMESPACE, {"app": "notebook"})
    outsider = _pod("default", training_job_labels(TRAINING_JOB))  # same labels, other namespace
    dns = _pod("kube-system", {"k8s-app": "kube-dns"})
    a, b = train[0], train[-1]
    # rendezvous and NCCL between the job's own pods
    for port in (29500, 1024, 40000, 65535):
        assert allowed(policies, a, b, port) and allowed(policies, b, a, port)
    assert not allowed(policies, a, b, 22) and not allowed(policies, a, b, 29500, "UDP")
    # nobody else reaches them, and they reach nobody else
    for other in (acc, stray, outsider, *checks):
        assert not allowed(policies, other, a, 29500)
        assert not allowed(policies, a, other, 29500)
    for check in checks:  # a check's two pods reach each other on the rendezvous and NCCL ports
        assert allowed(policies, check, check, 29500) and allowed(policies, check, check, 40000)
    assert not allowed(policies, acc, a, 40000)
    # DNS only in kube-system
    assert allowed(policies, a, dns, 53, "UDP") and allowed(policies, a, dns, 53, "TCP")
    assert allowed(policies, stray, dns, 53, "UDP")
    assert not allowed(policies, a, _pod("default", {}), 53, "UDP")
    assert not allowed(policies, a, _pod("internet", {}), 443)
    # NodeLocal DNSCache (169.254.20.10 on the node) on port 53 only; no other link-local address
    node_local = _address("169.254.20.10")
    assert allowed(policies, a, node_local, 53, "UDP") and allowed(policies, a, node_local, 53, "TCP")
    assert allowed(policies, stray, node_local, 53, "UDP")
    assert not allowed(policies, a, node_local, 8080)
    assert not allowed(policies, a, _address("169.254.169.254"), 53, "UDP")  # e.g. the metadata server
    assert not allowed(policies, a, _address("203.0.113.5"), 53, "UDP")


def test_policy_evaluator_has_teeth() -> None:
    open_policy = network_policy.job_peers("x")
    open_policy["spec"]["ingress"][0].pop("from")
    pod = _pod(TRAINING_NAMESPACE, training_job_labels("x"))
    assert allowed([open_policy], _pod(TRAINING_NAMESPACE, {}), pod, 29500)
    assert not allowed([network_policy.job_peers("x")], _pod(TRAINING_NAMESPACE, {}), pod, 29500)


# ---------------------------------------------------------------------------------------------
# shared storage


def test_lab_provisioned_nfs_storage() -> None:
    p = plan("lab")
    (server,) = [r for r in p.of_type("command:remote:Command") if r.name == "shared-storage-nfs-server"]
    values, _ = program.stack_config("lab")
    hosts = json.loads(values["gpu-cluster:hosts"])
    assert server.inputs["connection"]["host"] == hosts[0]["address"]  # the control plane
    # the etcd snapshots' shared copy beside the export, exported to the control planes only
    control_planes = [h["address"] for h in hosts if h["role"] == "control-plane"]
    assert server.inputs["create"] == scripts.as_root(nfs_storage.nfs_server(
        "/srv/gpu-cluster/shared", [h["address"] for h in hosts], "/srv/gpu-cluster/shared-etcd-backups", control_planes))
    assert server.inputs["delete"] == scripts.as_root(nfs_storage.nfs_server_delete("/srv/gpu-cluster/shared"))
    sc = find("lab", "StorageClass", "gpu-cluster-nfs")
    assert sc["provisioner"] == "nfs.csi.k8s.io"
    assert sc["parameters"] == {"server": hosts[0]["address"], "share": "/srv/gpu-cluster/shared"}
    assert sc["reclaimPolicy"] == "Retain"
    pvc = find("lab", "PersistentVolumeClaim", CLAIM_NAME)
    assert pvc["metadata"]["namespace"] == TRAINING_NAMESPACE
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and pvc["spec"]["storageClassName"] == "gpu-cluster-nfs"
    (claim,) = [r for r in p.of_type("kubernetes:core/v1:PersistentVolumeClaim")]
    (release,) = [r for r in p.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "csi-driver-nfs"]
    assert release.inputs["namespace"] == "kube-system"
    assert {server.urn, release.urn} <= set(claim.dependencies)
    assert p.outputs["sharedClaim"] == {"claim": "training/shared-data",
                                        "backend": f"nfs://{hosts[0]['address']}/srv/gpu-cluster/shared"}


def test_lab_existing_export_has_no_server_step() -> None:
    p = plan("lab-pytorchjob-elastic")
    assert not [r for r in p.of_type("command:remote:Command") if "nfs" in r.name]
    assert find("lab-pytorchjob-elastic", "StorageClass", "gpu-cluster-nfs")["parameters"] == {
        "server": "nas.lab.example", "share": "/export/gpu"}


def test_dev_host_path_and_default_class() -> None:
    pv = find("dev", "PersistentVolume", "gpu-cluster-shared-data")
    pvc = find("dev", "PersistentVolumeClaim", CLAIM_NAME)
    assert pv["spec"]["hostPath"] == {"path": "/data/gpu-cluster-shared", "type": "DirectoryOrCreate"}
    assert pv["spec"]["claimRef"] == {"namespace": TRAINING_NAMESPACE, "name": CLAIM_NAME}
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pvc["spec"]["storageClassName"] == ""
    default = find("dev-pytorchjob-default-class", "PersistentVolumeClaim", CLAIM_NAME)
    assert "storageClassName" not in default["spec"]
    assert default["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    assert not [o for o in objects("dev-pytorchjob-default-class") if o["kind"] == "PersistentVolume"]


def test_training_namespace_once_with_baseline_pod_security() -> None:
    for case in CASES:
        (ns,) = [o for o in objects(case) if o["kind"] == "Namespace" and o["metadata"]["name"] == TRAINING_NAMESPACE]
        # network.roce: IPC_LOCK is outside baseline's capabilities; privileged is the lowest that admits it
        level = "privileged" if rdma_case(case) else "baseline"
        assert ns["metadata"]["labels"] == {"pod-security.kubernetes.io/enforce": level}


def test_no_training_layer_when_nothing_is_configured() -> None:
    p = program.run("dev", config=_with("dev", training=json.dumps({"enabled": False}), storage=json.dumps({})))
    assert not [r for r in p.resources if "training" in r.type or r.type.endswith("SharedStorage")]
    assert "training" not in p.outputs and "sharedClaim" not in p.outputs


def test_storage_only_registers_the_claim_but_no_job() -> None:
    p = program.run("dev", config=_with("dev", training=json.dumps({"enabled": False})))
    assert p.outputs["sharedClaim"]["claim"] == "training/shared-data"
    assert not p.of_type(TRAINING_JOB_TYPE)


def test_addons_use_the_contracts_claim_and_namespace(mocks) -> None:
    """The add-ons mount the claim the platform's wiring made (gke: Filestore) and build no storage
    of their own: the jobs wait for that claim and live in the namespace handed to them."""
    import pulumi_kubernetes as k8s

    from components.gpu_stack import DriverSource
    from components.training_namespace import training_namespace
    from stacks import addons
    from stacks.contract import Cluster
    from tests.config.test_training_k8s_config import dev_raw, parse

    cfg = parse(dev_raw(training={"enabled": True, "image": IMAGE}, storage={"useDefaultClass": True}))
    provider = k8s.Provider("p", kubeconfig="{}")
    made = k8s.core.v1.ConfigMap("filestore-claim-stand-in", opts=pulumi.ResourceOptions(provider=provider))
    ns = training_namespace(provider)
    out = addons.deploy(cfg, Cluster(provider=provider, driver=DriverSource.HOST, gpu_nodes=("gpu-node",),
                                     gpu_node_count=1, training_namespace=ns,
                                     shared_claim=SharedClaim(ready=[made], backend="filestore")))

    @pulumi.runtime.test
    def wait():
        return pulumi.Output.from_input(1)

    wait()
    assert out["sharedClaim"] == {"claim": "training/shared-data", "backend": "filestore"}
    types = [r.type for r in mocks.plan.resources]
    assert "gpucluster:storage:SharedStorage" not in types
    assert [r.name for r in mocks.plan.resources if r.name == f"{TRAINING_NAMESPACE}-ns"] == [f"{TRAINING_NAMESPACE}-ns"]
    (job,) = [r for r in mocks.plan.resources if r.type == JOB and r.name.startswith(TRAINING_JOB)]
    assert any(d.endswith("::filestore-claim-stand-in") for d in job.dependencies)
    (component,) = [r for r in mocks.plan.resources if r.type == TRAINING_JOB_TYPE and r.name == TRAINING_JOB]
    assert any(d.endswith(f"::{TRAINING_NAMESPACE}-ns") for d in component.dependencies)


def test_a_job_without_namespace_or_claim_is_refused(mocks) -> None:
    """A platform wiring that forgets the namespace or the claim fails loudly, not with a pod that
    never mounts its volume."""
    import pulumi_kubernetes as k8s

    from components.gpu_stack import DriverSource
    from stacks import addons
    from stacks.contract import Cluster
    from tests.config.test_training_k8s_config import dev_raw, parse

    cfg = parse(dev_raw(training={"enabled": True, "image": IMAGE}, storage={"useDefaultClass": True}))
    provider = k8s.Provider("p", kubeconfig="{}")
    with pytest.raises(ValueError, match="training namespace and a shared claim"):
        addons.deploy(cfg, Cluster(provider=provider, driver=DriverSource.HOST, gpu_node_count=1))


# ---------------------------------------------------------------------------------------------
# render and rejected configs


@pytest.mark.parametrize("stack", ["lab", "dev"])
def test_render_shows_job_claim_policy_and_acceptance(tmp_path: Path, stack: str) -> None:
    out = tmp_path / stack
    result = subprocess.run([sys.executable, "-m", "render", stack, "--out", str(out)], cwd=PROJECT_DIR,
                            capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr
    written = {p.name for p in (out / "kubernetes").iterdir()}
    expected = {"job-training-train.yaml", "service-training-train-hosts.yaml",
                "persistentvolumeclaim-training-shared-data.yaml", "networkpolicy-training-default-deny.yaml",
                "networkpolicy-training-train-peers.yaml", "networkpolicy-training-allow-dns.yaml"}
    if stack == "lab":
        expected |= {"job-training-nccl-acceptance.yaml", "networkpolicy-training-nccl-acceptance-peers.yaml",
                     "storageclass-cluster-gpu-cluster-nfs.yaml"}
        assert (out / "hosts" / "cp-1" / "shared-storage-nfs-server.sh").is_file()
        assert (out / "helm" / "csi-driver-nfs.yaml").is_file()
    assert expected <= written, sorted(expected - written)
    summary = (out / "summary.md").read_text()
    assert "Job `training/train`" in summary and "PersistentVolumeClaim `training/shared-data`" in summary


def test_render_pytorchjob_lists_the_custom_resource() -> None:
    for case, name in (("lab-pytorchjob", TRAINING_JOB), ("lab-pytorchjob-acceptance", ACCEPTANCE_JOB)):
        kinds = {(o["kind"], o["metadata"]["name"]) for o in objects(case)}
        assert ("PyTorchJob", name) in kinds
        assert all(o.get("kind") for o in objects(case))  # the kustomize bundle is not an object


@pytest.mark.parametrize(
    ("stack", "overrides", "key"),
    [
        ("lab", {"training": {"image": "registry.example.com/trainer:latest"}}, "training.image"),
        ("lab", {"training": {"nodes": 3}}, "training.nodes"),
        ("lab", {"training": {"gpusPerNode": 2}}, "training.gpusPerNode"),
        ("lab", {"acceptance": {"minBusbwFraction": 1.2}}, "acceptance.minBusbwFraction"),
        ("lab", {"storage": json.dumps({})}, "storage"),
        ("dev", {"training": {"nodes": 2}}, "training.nodes"),
        ("dev", {"training": {"elastic": {"enabled": True}}}, "training.elastic.enabled"),
        # the committed lab stack runs the acceptance Job: with pytorchjob `up` could not await it
        ("lab", {"training": {"launcher": "pytorchjob"}}, "training.enabled"),
    ],
)
def test_rejected_configs_register_nothing(stack: str, overrides: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        program.run(stack, config=_with(stack, **overrides))
    assert key in [k for k, _ in info.value.problems]


def test_committed_stacks_enable_training_with_a_pinned_image() -> None:
    for stack in ("lab", "dev"):
        raw = yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())["config"]
        t = raw["gpu-cluster:training"]
        assert t["enabled"] is True and ":" in t["image"].rsplit("/", 1)[-1] and not t["image"].endswith(":latest")


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_training_namespace_pod_carries_an_api_token(case: str) -> None:
    """Nothing the training namespace runs calls the Kubernetes API (torchrun's static rendezvous, the
    trainer, the dataset download), and its egress policy lets public addresses on 443 through: a pod
    that mounted the default ServiceAccount's token would hand it to any compromised dependency."""
    templates = []
    for o in training_objects(case):
        if o["kind"] == "Job":
            templates.append((o["metadata"]["name"], o["spec"]["template"]))
        elif o["kind"] == "PyTorchJob":
            templates += [(f"{o['metadata']['name']}/{role}", r["template"])
                          for role, r in o["spec"]["pytorchReplicaSpecs"].items()]
    assert templates
    for name, template in templates:
        assert template["spec"].get("automountServiceAccountToken") is False, f"{case}: {name} mounts an API token"
