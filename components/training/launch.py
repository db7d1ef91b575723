"""What a training pod runs: the container command and env, as pure functions of a LaunchSpec.

Shared by the TrainingJob component (which puts them in the rendered Job or PyTorchJob) and the
local end-to-end test (which runs them as processes on loopback), so what is tested is what ships.

The command is one POSIX shell script (`/bin/sh -c`), because the node rank comes from the
environment (`JOB_COMPLETION_INDEX` for an Indexed Job, `RANK` injected by the training operator
for a PyTorchJob):

1. `python -m <module> --preflight <args>`: the module checks its own configuration and exits with
   EXIT_CONFIG_ERROR (3) at once when it cannot work, before any rendezvous.
2. `torchrun --nnodes N --node_rank <rank> --nproc_per_node G --rdzv_backend c10d
   --rdzv_endpoint $MASTER_ADDR:$MASTER_PORT --rdzv_id <job> --max_restarts K -m <module> <args>`.
   The c10d store lives on node rank 0 (`is_host` is set from the rank rather than guessed from
   hostnames); a worker that dies is restarted in place up to K times and a replaced pod rejoins
   the same rendezvous id. torchrun runs in the background with SIGTERM/SIGINT forwarded, so the
   shell (PID 1) neither swallows a pod deletion nor loses the exit code.
3. torchrun reports any worker failure as exit code 1; the module writes its own fatal code
   (3, or the acceptance verdict 10-17) to a pod-local file and the script exits with that, so
   the Job's podFailurePolicy (FATAL_EXIT_CODES) can fail fast on it. A pod stopped by SIGTERM or
   SIGINT without such a code exits 143 (torchrun would say 1, like a failure of its own).

Does not decide: image, resources, volumes, scheduling (components/training/job.py does).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from components.storage_contract import MOUNTS

LAUNCHERS = ("indexed-job", "pytorchjob")
RDZV_PORT = 29500
TRAINER_MODULE = "trainer.train"
BENCH_MODULE = "trainer.allreduce_bench"

# Mirrors workloads/trainer (EXIT_CONFIG_ERROR, trainer.nccl's and trainer.rdma_link's verdict
# codes); a test keeps them equal. Retrying cannot change any of them, so the Job fails on them at once.
EXIT_CONFIG_ERROR = 3
EXIT_LOW_BUSBW = 10
EXIT_SOCKET_FALLBACK = 11
EXIT_NO_TRANSPORT_INFO = 12
EXIT_RDMA_BELOW_FRACTION = 13  # rdma_link: ib_write_bw's average below the link fraction
EXIT_RDMA_TOOL_FAILED = 14  # rdma_link: rping or ib_write_bw failed, or no result
EXIT_NO_RDMA_CHANNEL = 15  # nccl: RDMA declared, but no channel over NET/IB (only P2P/SHM)
EXIT_WRONG_RESULTS = 16  # nccl: #wrong not 0, the all-reduce returned wrong data
EXIT_IB_COMPLETION_ERROR = 17  # nccl: an IBV_WC_* error status in an NCCL WARN line
FATAL_EXIT_CODES = frozenset({EXIT_CONFIG_ERROR, EXIT_LOW_BUSBW, EXIT_SOCKET_FALLBACK, EXIT_NO_TRANSPORT_INFO,
                              EXIT_RDMA_BELOW_FRACTION, EXIT_RDMA_TOOL_FAILED, EXIT_NO_RDMA_CHANNEL,
                              EXIT_WRONG_RESULTS, EXIT_IB_COMPLETION_ERROR})

# The env var holding this pod's node rank, per launcher.
NODE_RANK_VAR = {"indexed-job": "JOB_COMPLETION_INDEX", "pytorchjob": "RANK"}
# Pod-local (TMPDIR, else /tmp): where the module leaves its fatal exit code for the script.
EXIT_CODE_FILE = '"${TMPDIR:-/tmp}/trainer-exit-code"'

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_NCCL_DEBUG = ("NONE", "VERSION", "WARN", "INFO", "TRACE")
# trainer.train's --dataset, --model and --augment choices (config/training.py mirrors the first two).
DATASETS = ("auto", "synthetic", "cifar10", "fashion-mnist")
MODELS = ("mlp", "resnet18")
AUGMENT = ("auto", "on", "off")

# Every library cache of a pod under the shared claim's cache mount (seed 003 mounts its NFS cache at
# ~/.cache): weights, datasets and wheels are downloaded once per cluster, not once per pod or run.
# XDG_CACHE_HOME is that ~/.cache itself; the others are named because their libraries do not all
# follow it (torch.hub reads TORCH_HOME, pip PIP_CACHE_DIR, Hugging Face HF_HOME: its datasets and
# hub caches live under it, so HF_DATASETS_CACHE and the deprecated TRANSFORMERS_CACHE stay unset).
CACHE_ROOT = MOUNTS["cache"][1]
CACHE_ENV = (
    ("XDG_CACHE_HOME", CACHE_ROOT),
    ("HF_HOME", f"{CACHE_ROOT}/huggingface"),
    ("TORCH_HOME", f"{CACHE_ROOT}/torch"),
    ("PIP_CACHE_DIR", f"{CACHE_ROOT}/pip"),
)


@dataclass(frozen=True)
class LaunchSpec:
    """One torchrun job: its identity, shape, restart budget, the module it runs and NCCL env."""

    job: str  # the Job / PyTorchJob name, also the rendezvous id
    service: str  # indexed-job: the headless Service (pods are <job>-<index>.<service>)
    namespace: str
    nodes: int  # pods, one per node
    gpus_per_node: int  # torchrun --nproc_per_node
    launcher: str = "indexed-job"
    max_restarts: int = 3  # torchrun restarts of the worker group inside a pod
    min_nodes: int | None = None  # pytorchjob elastic: --nnodes min:max
    rdzv_port: int = RDZV_PORT
    module: str = TRAINER_MODULE
    module_args: tuple[str, ...] = ()  # appended after the trainer arguments below
    # trainer.train arguments (used when module is the trainer)
    epochs: int = 10
    batch_size: int = 64  # per rank
    checkpoint_dir: str | None = None  # default: <checkpoints mount>/<job>
    checkpoint_every: int = 1  # epochs
    checkpoint_every_steps: int = 0  # also every N steps (0: off)
    data_dir: str = MOUNTS["data"][1]
    dataset: str = "auto"
    model: str = "resnet18"
    learning_rate: float = 0.05
    warmup_epochs: float | None = None  # None: constant learning rate; set: warm-up, then cosine decay
    weight_decay: float | None = None  # None: the trainer's default
    augment: str = "auto"
    # NCCL
    nccl_debug: str = "WARN"
    nccl_socket_ifname: str | None = None
    extra_env: tuple[tuple[str, str], ...] = field(default=())
    # Shell lines run first (gke GPUDirect: Google's NCCL settings sourced, components/training/gpudirect_pod.py).
    prelude: tuple[str, ...] = ()
    # c10d rendezvous: how long a pod waits for its peers (join_timeout) and to reach the store on
    # rank 0 (read_timeout). None: torch's defaults (600 s and 60 s). The NCCL pair check waits as
    # long as its Job may run: its peer may start minutes later, once that node's GPUs are free.
    rdzv_timeout_seconds: int | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.launcher not in LAUNCHERS:
            problems.append(f"launcher {self.launcher!r} is not one of {', '.join(LAUNCHERS)}")
        if not _DNS_LABEL.fullmatch(self.job) or len(self.job) > 52:
            problems.append(f"job {self.job!r} is not a DNS label of at most 52 characters")
        if not _DNS_LABEL.fullmatch(self.service):
            problems.append(f"service {self.service!r} is not a DNS label")
        if self.nodes < 1 or self.gpus_per_node < 1 or self.max_restarts < 0:
            problems.append("nodes and gpus_per_node must be >= 1, max_restarts >= 0")
        if self.min_nodes is not None and not 1 <= self.min_nodes <= self.nodes:
            problems.append(f"min_nodes {self.min_nodes} must be between 1 and nodes {self.nodes}")
        if self.rdzv_timeout_seconds is not None and not 60 <= self.rdzv_timeout_seconds <= 86400:
            problems.append(f"rdzv_timeout_seconds {self.rdzv_timeout_seconds} is not within 60..86400")
        if not 1 <= self.rdzv_port <= 65535:
            problems.append(f"rdzv_port {self.rdzv_port} is not a port")
        if not _MODULE.fullmatch(self.module):
            problems.append(f"module {self.module!r} is not a dotted Python module name")
        if self.epochs < 1 or self.batch_size < 1 or self.checkpoint_every < 0 or self.checkpoint_every_steps < 0:
            problems.append("epochs and batch_size must be >= 1, checkpoint intervals >= 0")
        if self.dataset not in DATASETS or self.model not in MODELS or self.augment not in AUGMENT:
            problems.append(f"dataset {self.dataset!r}, model {self.model!r} or augment {self.augment!r} is not one of "
                            f"{DATASETS}, {MODELS}, {AUGMENT}")
        if not 0 < self.learning_rate <= 10 or (self.warmup_epochs is not None and not self.warmup_epochs >= 0):
            problems.append("learning_rate must be in (0, 10], warmup_epochs >= 0")
        if self.weight_decay is not None and not 0 <= self.weight_decay < 1:
            problems.append("weight_decay must be in [0, 1)")
        if self.nccl_debug.upper() not in _NCCL_DEBUG:
            problems.append(f"nccl_debug {self.nccl_debug!r} is not one of {', '.join(_NCCL_DEBUG)}")
        if problems:
            raise ValueError("LaunchSpec: " + "; ".join(problems))

    @property
    def master_addr(self) -> str:
        """indexed-job: rank 0's stable DNS name (pod hostname under the headless Service)."""
        return f"{self.job}-0.{self.service}"

    @property
    def node_rank_var(self) -> str:
        return NODE_RANK_VAR[self.launcher]


def trainer_args(spec: LaunchSpec) -> list[str]:
    """`python -m trainer.train` arguments (one `--key=value` token each)."""
    checkpoint_dir = spec.checkpoint_dir or f"{MOUNTS['checkpoints'][1]}/{spec.job}"
    # Unset: left out, so the trainer's own default applies (its schedule: a constant rate).
    warmup = [] if spec.warmup_epochs is None else [f"--warmup-epochs={spec.warmup_epochs:g}"]
    decay = [] if spec.weight_decay is None else [f"--weight-decay={spec.weight_decay:g}"]
    return [
        f"--epochs={spec.epochs}",
        f"--batch-size={spec.batch_size}",
        f"--dataset={spec.dataset}",
        f"--model={spec.model}",
        f"--lr={spec.learning_rate:g}",
        *warmup,
        *decay,
        f"--augment={spec.augment}",
        f"--data-dir={spec.data_dir}",
        f"--checkpoint-dir={checkpoint_dir}",
        f"--checkpoint-every={spec.checkpoint_every}",
        f"--checkpoint-every-steps={spec.checkpoint_every_steps}",
    ]


def module_args(spec: LaunchSpec) -> list[str]:
    base = trainer_args(spec) if spec.module == TRAINER_MODULE else []
    return base + list(spec.module_args)


def torchrun_args(spec: LaunchSpec) -> list[str]:
    """torchrun's own arguments; `$VAR` references are expanded by the pod's shell."""
    nnodes = f"{spec.min_nodes}:{spec.nodes}" if spec.min_nodes is not None else str(spec.nodes)
    # The acceptance sweep is a measurement: a restart would only hide a failure.
    restarts = 0 if spec.module == BENCH_MODULE else spec.max_restarts
    timeout = spec.rdzv_timeout_seconds
    rdzv_timeouts = f",join_timeout={timeout},read_timeout={timeout}" if timeout else ""
    return [
        "torchrun",
        f"--nnodes={nnodes}",
        f'--node_rank="${spec.node_rank_var}"',
        f"--nproc_per_node={spec.gpus_per_node}",
        "--rdzv_backend=c10d",
        '--rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT"',
        f"--rdzv_id={spec.job}",
        f'--rdzv_conf="is_host=$is_host{rdzv_timeouts}"',
        f"--max_restarts={restarts}",
    ]


def launch_script(spec: LaunchSpec) -> str:
    """The POSIX sh script a pod runs (see the module docstring)."""
    args = " ".join(shlex.quote(a) for a in module_args(spec))
    rank = spec.node_rank_var
    return "\n".join([
        *spec.prelude,
        "set -u",
        f"python -m {spec.module} --preflight {args} || exit $?",
        f'if [ "${rank}" = 0 ]; then is_host=1; else is_host=0; fi',
        f"rm -f {EXIT_CODE_FILE}",
        f"{' '.join(torchrun_args(spec))} -m {spec.module} {args} --exit-code-file={EXIT_CODE_FILE} &",
        "child=$!",
        "signalled=0",
        "trap 'signalled=1; kill -TERM \"$child\" 2>/dev/null' TERM INT",
        'wait "$child"; rc=$?',
        # wait returns early (>128) when a trapped signal arrives; keep waiting for torchrun itself
        'while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done',
        f"if [ -s {EXIT_CODE_FILE} ]; then exit \"$(cat {EXIT_CODE_FILE})\"; fi",
        # torchrun itself exits 1 when signalled: say 143 (128 + SIGTERM), so a pod stopped from
        # outside (preemption, eviction, deletion) never reads as a failure of its own
        'if [ "$signalled" = 1 ]; then exit 143; fi',
        'exit "$rc"',
    ])


def torchrun_command(spec: LaunchSpec) -> list[str]:
    """The container `command`: ["/bin/sh", "-c", <launch_script>]."""
    return ["/bin/sh", "-c", launch_script(spec)]


def secondary_network_env(
    interface: str, hca: str, gid_index: int, nccl_env: tuple[tuple[str, str], ...] = ()
) -> tuple[tuple[str, str], ...]:
    """LaunchSpec.extra_env for pods with an RDMA NIC as their secondary `interface` (network.roce):
    NCCL's bootstrap and socket fallback and Gloo's collectives on it, NCCL's IB transport on the
    HCA and GID of its RoCE v2 address, then the user's further NCCL variables."""
    return (
        ("NCCL_SOCKET_IFNAME", interface),
        ("GLOO_SOCKET_IFNAME", interface),
        ("NCCL_IB_HCA", hca),
        ("NCCL_IB_GID_INDEX", str(gid_index)),
        *sorted(nccl_env),
    )


def pod_env(spec: LaunchSpec) -> list[dict[str, str]]:
    """The container `env` (name/value pairs). The Job controller adds JOB_COMPLETION_INDEX; the
    training operator adds MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE for a PyTorchJob."""
    env: list[tuple[str, str]] = []
    if spec.launcher == "indexed-job":
        env += [("MASTER_ADDR", spec.master_addr), ("MASTER_PORT", str(spec.rdzv_port))]
    # torchrun's default shares the rendezvous TCPStore with the workers, but publishes its address
    # only in rank 0's first round: a replaced pod joining a later round then waits for it forever
    # (found by the kill-and-resume test). Without sharing, rank 0 publishes a store every round.
    env += [("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")]
    env += [("PYTHONUNBUFFERED", "1"), ("NCCL_DEBUG", spec.nccl_debug.upper())]
    env += list(CACHE_ENV)
    if spec.nccl_socket_ifname:
        env.append(("NCCL_SOCKET_IFNAME", spec.nccl_socket_ifname))
    names = {name for name, _ in env}
    env += [(k, v) for k, v in spec.extra_env if k not in names]
    return [{"name": name, "value": value} for name, value in env]
