"""The NCCL acceptance threshold passes healthy clusters and still fails broken links (issue 11).

The arguments the acceptance Job's pods give `python -m trainer.allreduce_bench` are read from the
rendered Job of the lab plan (the committed Pulumi.lab.yaml, and variants), parsed by the bench's
own parser and handed to the bench's own verdict, as the pod does. The measurements: seed 002's
real run (nccl-tests all_reduce_perf, 2 A100 nodes over 25GbE RoCE, busbw 2.81 GB/s = 22.48
Gbit/s, NCCL over IBext/RoCE), and sweeps of a socket-only lab over flannel's VXLAN.
"""

from __future__ import annotations

import functools
import json
import shlex
import sys
from typing import Any

import pytest

import config
from config.training import RDMA_MIN_BUSBW_FRACTION, SOCKET_MIN_BUSBW_FRACTION
from render import program
from render.__main__ import kubernetes_objects
from stacks.addons import ACCEPTANCE_JOB
from tests.conftest import PROJECT_DIR, SEED_002_ROCE, lab_raw

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from trainer import allreduce_bench, nccl  # noqa: E402

from tests.workloads.test_training_workload import SEED_NCCL_INFO, SEED_TABLE, SOCKET_INFO  # noqa: E402

GIB = 1 << 30


def _lab_config(**overrides: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config("lab")
    out = dict(values)
    for key, value in overrides.items():  # merged into the committed object
        full = f"gpu-cluster:{key}"
        out[full] = json.dumps({**json.loads(out[full]), **value})
    return out, secret_keys


@functools.cache
def _bench_argv(overrides_json: str) -> tuple[str, ...]:
    """The bench arguments in the lab plan's acceptance Job (its preflight line)."""
    p = program.run("lab", config=_lab_config(**json.loads(overrides_json)))
    (job,) = [o for o in kubernetes_objects(p) if o["kind"] == "Job" and o["metadata"]["name"] == ACCEPTANCE_JOB]
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    (line,) = [x for x in script.splitlines() if x.startswith("python -m trainer.allreduce_bench --preflight ")]
    tokens = shlex.split(line.split(" || ")[0])
    return tuple(tokens[tokens.index("--preflight") + 1:])


def bench_args(**overrides: dict[str, Any]) -> Any:
    args = allreduce_bench.parse_args(list(_bench_argv(json.dumps(overrides, sort_keys=True))))
    assert allreduce_bench.check_args(args) is None
    return args


def verdict(args: Any, rows: list[nccl.SweepRow], nccl_info: list[str]) -> nccl.Verdict:
    """What allreduce_bench decides from these rows and NCCL log lines with these arguments."""
    return nccl.verdict(rows, nccl.parse_nccl_log(nccl_info), link_gbps=args.link_gbps or None,
                        min_busbw_fraction=args.min_busbw_fraction, rdma_declared=args.rdma)


def sweep(busbw_gb_s: float, size: int = GIB) -> list[nccl.SweepRow]:
    """One all-reduce row of `size` bytes at this bus bandwidth (GB/s), 2 ranks (algbw = busbw)."""
    seconds = size / (busbw_gb_s * 1e9)
    return [nccl.SweepRow(size, size // 4, "float", "sum", seconds * 1e6, busbw_gb_s, busbw_gb_s, 0)]


def test_seed_002_numbers() -> None:
    (row,) = nccl.parse_sweep(SEED_TABLE)
    assert row.busbw == 2.81 and row.busbw * 8 == pytest.approx(22.48)  # < 0.9 x 25 = 22.5
    assert nccl.parse_nccl_log(SEED_NCCL_INFO).uses_rdma


def test_committed_lab_declares_25gbe_over_sockets() -> None:
    args = bench_args()
    assert args.link_gbps == 25 and not args.rdma


def test_seed_002_passes_the_committed_lab_threshold() -> None:
    args = bench_args()
    v = verdict(args, nccl.parse_sweep(SEED_TABLE), SEED_NCCL_INFO)
    assert v.passed, v.reasons
    assert v.busbw_gbps == pytest.approx(22.48)


def test_seed_002_passes_the_rdma_default_with_margin() -> None:
    args = bench_args(network={"rdma": True, "roce": SEED_002_ROCE})
    assert args.rdma and args.min_busbw_fraction == RDMA_MIN_BUSBW_FRACTION
    v = verdict(args, nccl.parse_sweep(SEED_TABLE), SEED_NCCL_INFO)
    assert v.passed, v.reasons
    # a healthy run may measure 10% less than seed 002's and still pass
    assert v.threshold_gbps is not None and v.threshold_gbps <= 0.9 * 22.48


@pytest.mark.parametrize("busbw", [1.6, 1.2, 0.9], ids=["12.8Gbit", "9.6Gbit", "7.2Gbit"])
def test_socket_lab_default_passes_a_realistic_vxlan_result(busbw: float) -> None:
    """NCCL's socket transport over flannel VXLAN on 25GbE: about 0.3-0.5 of the link when healthy."""
    args = bench_args()
    assert args.min_busbw_fraction == SOCKET_MIN_BUSBW_FRACTION
    v = verdict(args, sweep(busbw), SOCKET_INFO)
    assert v.passed, v.reasons


@pytest.mark.parametrize("rdma", [False, True], ids=["sockets", "rdma"])
@pytest.mark.parametrize("busbw", [0.5, 0.11], ids=["0.5GB/s", "1GbE-path"])
def test_a_broken_link_still_fails(rdma: bool, busbw: float) -> None:
    args = bench_args(network={"rdma": rdma, **({"roce": SEED_002_ROCE} if rdma else {})})
    v = verdict(args, sweep(busbw), SEED_NCCL_INFO if rdma else SOCKET_INFO)
    assert v.exit_code == nccl.EXIT_LOW_BUSBW, v


def test_rdma_declared_still_fails_a_socket_fallback_at_seed_speed() -> None:
    args = bench_args(network={"rdma": True, "roce": SEED_002_ROCE})
    v = verdict(args, nccl.parse_sweep(SEED_TABLE), SOCKET_INFO)
    assert v.exit_code == nccl.EXIT_SOCKET_FALLBACK


@pytest.mark.parametrize("rdma", [False, True])
def test_an_explicit_fraction_wins_over_both_defaults(rdma: bool) -> None:
    args = bench_args(acceptance={"minBusbwFraction": 0.95}, network={"rdma": rdma, **({"roce": SEED_002_ROCE} if rdma else {})})
    assert args.min_busbw_fraction == 0.95
    assert not verdict(args, nccl.parse_sweep(SEED_TABLE), SEED_NCCL_INFO).passed


def test_model_default_follows_the_declared_transport() -> None:
    cfg = config.parse(lab_raw(), {"sshPrivateKey"})
    assert cfg.acceptance.min_busbw_fraction is None
    assert cfg.acceptance.busbw_fraction(rdma=True) == RDMA_MIN_BUSBW_FRACTION
    assert cfg.acceptance.busbw_fraction(rdma=False) == SOCKET_MIN_BUSBW_FRACTION
    assert SOCKET_MIN_BUSBW_FRACTION < RDMA_MIN_BUSBW_FRACTION < 2.81 * 8 / 25
    explicit = config.parse(lab_raw(acceptance={"minBusbwFraction": 0.5}), {"sshPrivateKey"})
    assert explicit.acceptance.busbw_fraction(rdma=True) == explicit.acceptance.busbw_fraction(rdma=False) == 0.5
