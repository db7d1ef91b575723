"""The training workload's pure parts: busbw maths and NCCL log parsing (on seed 002's real lines),
the acceptance verdict, the launch command and env (components/training/launch.py), the image pin,
and the trainer's data, checkpoint and resume logic in one process."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from components import versions
from components.training import launch
from tests.conftest import PROJECT_DIR

PROJECT = PROJECT_DIR
WORKLOADS = PROJECT / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

import trainer  # noqa: E402
from trainer import allreduce_bench, nccl, rdma_link  # noqa: E402
from trainer import train as trainer_train  # noqa: E402

SEED_002 = PROJECT.parent / "shared" / "seeds" / "002_8bd1413468bb1312.txt"

# Verbatim from seed 002: nccl-tests all_reduce_perf on 2 A100 nodes over 25GbE RoCE (E810, irdma),
# then the NCCL INFO lines of the same run (NCCL 2.18.5, HPC-X's IBext net plugin).
SEED_TABLE = [
    "#                                                              out-of-place                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    " 10737418240    2684354560     float     sum      -1  3825027    2.81    2.81      0  3825795    2.81    2.81      0",
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : 2.80687",
]
SEED_NCCL_INFO = [
    "gpu-pod0:52047:52047 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to net1",
    "gpu-pod0:52047:52047 [0] NCCL INFO Bootstrap : Using net1:10.100.100.1<0>",
    "NCCL version 2.18.5+cuda12.2",
    "gpu-pod0:52047:52056 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so",
    "gpu-pod0:52047:52056 [0] NCCL INFO P2P plugin IBext",
    "gpu-pod0:52047:52056 [0] NCCL INFO NET/IB : Using [0]irdma0:1/RoCE [RO]; OOB net1:10.100.100.1<0>",
    "gpu-pod0:52047:52056 [0] NCCL INFO Using network IBext",
    "gpu-pod0:52047:52056 [0] NCCL INFO Channel 00/02 :    0   1",
    "gpu-pod0:52047:52056 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1",
    "gpu-pod0:52047:52056 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IBext/0",
    "gpu-pod0:52047:52056 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/IBext/0",
    "gpu-pod0:52047:52056 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IBext/0",
    "gpu-pod0:52047:52056 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IBext/0",
    "gpu-pod0:52047:52056 [0] NCCL INFO Connected all rings",
]
# The same run had NCCL found no RDMA device (NCCL's wording for the socket transport), and
# intra-node transports as NCCL prints them (P2P over NVLink/PCIe, shared memory).
SOCKET_INFO = [
    "gpu-pod0:52047:52056 [0] NCCL INFO NET/IB : No device found.",
    "gpu-pod0:52047:52056 [0] NCCL INFO NET/Socket : Using [0]net1:10.100.100.1<0>",
    "gpu-pod0:52047:52056 [0] NCCL INFO Using network Socket",
    "gpu-pod0:52047:52056 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
    "gpu-pod0:52047:52056 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
]
INTRA_NODE_INFO = [
    "node:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
    "node:1:2 [0] NCCL INFO Channel 01 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "node:1:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct",
]


def test_seed_lines_are_verbatim_from_seed_002():
    if not SEED_002.exists():
        pytest.skip(f"{SEED_002} not found")
    text = SEED_002.read_text().splitlines()
    for line in SEED_TABLE + SEED_NCCL_INFO:
        assert line in text, line


# --- busbw maths ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("nranks", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_bus_bandwidth_is_algbw_times_2_n_minus_1_over_n(nranks, factor):
    assert nccl.bus_bandwidth(10.0, nranks) == pytest.approx(10.0 * factor)


def test_bus_bandwidth_rejects_no_ranks():
    with pytest.raises(ValueError):
        nccl.bus_bandwidth(1.0, 0)


def test_seed_row_parses_and_its_numbers_agree():
    rows = nccl.parse_sweep(SEED_TABLE)
    assert len(rows) == 1
    row = rows[0]
    assert (row.size, row.count, row.dtype, row.redop, row.wrong) == (10737418240, 2684354560, "float", "sum", 0)
    assert (row.time_us, row.algbw, row.busbw) == (3825027, 2.81, 2.81)
    assert (row.inplace_time_us, row.inplace_algbw, row.inplace_busbw) == (3825795, 2.81, 2.81)
    # algbw = size / time (GB/s); busbw of 2 ranks = algbw
    assert nccl.algorithm_bandwidth(row.size, row.time_us / 1e6) == pytest.approx(row.algbw, abs=0.005)
    assert nccl.bus_bandwidth(row.algbw, 2) == row.busbw


def test_our_rows_round_trip_through_the_same_parser():
    row = nccl.SweepRow(size=1 << 30, count=1 << 28, dtype="float", redop="sum", time_us=95000.0,
                        algbw=11.3, busbw=19.78, wrong=0)
    line = nccl.format_sweep_row(row)
    assert nccl.parse_sweep_line(line) == nccl.SweepRow(**{**row.__dict__, "time_us": 95000.0})
    slow = nccl.parse_sweep_line(nccl.format_sweep_row(nccl.SweepRow(4096, 1024, "float", "sum", 1444.7, 0.0028, 0.0028, 0)))
    assert slow is not None and slow.algbw == pytest.approx(0.0028)
    for header in nccl.format_sweep_header():
        assert nccl.parse_sweep_line(header) is None


def test_non_rows_are_ignored():
    assert nccl.parse_sweep_line("gpu-pod0:52047:52047 [0] NCCL INFO comm 0x564b10cb5ca0 rank 0 nranks 2 cudaDev 0 busId 14000 - Destroy COMPLETE") is None
    assert nccl.parse_sweep_line(" 1 2 3 4 5 6 7 8 9") is None  # type and redop are words
    assert nccl.parse_sweep_line(" 8  2  float  sum  -1  N/A  x  y  0") is None


# --- NCCL INFO parsing ----------------------------------------------------------------------------


def test_seed_log_is_rdma_over_the_ibext_plugin():
    t = nccl.parse_nccl_log(SEED_NCCL_INFO)
    assert t.network == "IB"
    assert t.channels == {"NET/IB": 4}
    assert t.uses_rdma and not t.uses_sockets and t.seen
    assert t.devices == ["IB: [0]irdma0:1/RoCE [RO]; OOB net1:10.100.100.1<0>"]
    assert t.summary() == "NET/IB"


def test_whole_seed_file_parses_to_the_same_transport():
    if not SEED_002.exists():
        pytest.skip(f"{SEED_002} not found")
    lines = SEED_002.read_text().splitlines()
    t = nccl.parse_nccl_log(lines)
    assert t.uses_rdma and not t.uses_sockets
    assert t.channels["NET/IB"] == 4 * 3  # the nccl-tests run and both nodes of the DDP run
    assert [r.busbw for r in nccl.parse_sweep(lines)] == [2.81]


def test_socket_fallback_is_seen_from_the_network_line_or_the_channels():
    t = nccl.parse_nccl_log(SOCKET_INFO)
    assert t.network == "Socket" and t.uses_sockets and not t.uses_rdma
    only_channels = nccl.parse_nccl_log(SOCKET_INFO[3:])
    assert only_channels.network is None and only_channels.uses_sockets


def test_intra_node_transports_are_counted():
    t = nccl.parse_nccl_log(INTRA_NODE_INFO)
    assert t.channels == {"P2P": 2, "SHM": 1}
    assert not t.uses_sockets and not t.uses_rdma


def test_merge_makes_one_socket_rank_taint_the_run():
    merged = nccl.parse_nccl_log(SEED_NCCL_INFO).merge(nccl.parse_nccl_log(SOCKET_INFO))
    assert merged.network == "Socket" and merged.uses_sockets
    assert merged.channels == {"NET/IB": 4, "NET/Socket": 2}


# --- the verdict ----------------------------------------------------------------------------------


def test_seed_run_misses_0_9_of_25gbe_by_a_hair_and_passes_at_0_85():
    rows, transport = nccl.parse_sweep(SEED_TABLE), nccl.parse_nccl_log(SEED_NCCL_INFO)
    strict = nccl.verdict(rows, transport, link_gbps=25, min_busbw_fraction=0.9, rdma_declared=True)
    assert strict.exit_code == nccl.EXIT_LOW_BUSBW and not strict.passed
    assert strict.busbw_gbps == pytest.approx(22.48) and strict.threshold_gbps == pytest.approx(22.5)
    ok = nccl.verdict(rows, transport, link_gbps=25, min_busbw_fraction=0.85, rdma_declared=True)
    assert ok.passed and ok.reasons == ()
    line = ok.line(transport, rows[-1].size)
    assert line.startswith("acceptance: verdict=PASS exit=0 transport=NET/IB largest_bytes=10737418240 busbw_gbps=22.48")


def test_sockets_with_rdma_declared_fail_even_when_fast_enough():
    rows = nccl.parse_sweep(SEED_TABLE)
    v = nccl.verdict(rows, nccl.parse_nccl_log(SOCKET_INFO), link_gbps=10, rdma_declared=True)
    assert v.exit_code == nccl.EXIT_SOCKET_FALLBACK and "TCP sockets" in v.reasons[0]
    # not declared: sockets are fine
    assert nccl.verdict(rows, nccl.parse_nccl_log(SOCKET_INFO), link_gbps=10).passed


def test_transport_failure_wins_over_low_bandwidth():
    v = nccl.verdict(nccl.parse_sweep(SEED_TABLE), nccl.parse_nccl_log(SOCKET_INFO), link_gbps=100, rdma_declared=True)
    assert v.exit_code == nccl.EXIT_SOCKET_FALLBACK and len(v.reasons) == 2


def test_rdma_declared_without_any_nccl_lines_cannot_pass():
    v = nccl.verdict(nccl.parse_sweep(SEED_TABLE), nccl.NcclTransport(), link_gbps=None, rdma_declared=True)
    assert v.exit_code == nccl.EXIT_NO_TRANSPORT_INFO and "NCCL_DEBUG=INFO" in v.reasons[0]


def test_no_link_rate_skips_the_bandwidth_check_and_empty_sweeps_fail():
    assert nccl.verdict(nccl.parse_sweep(SEED_TABLE), nccl.NcclTransport(), link_gbps=None).passed
    assert nccl.verdict([], nccl.NcclTransport(), link_gbps=None).exit_code == nccl.EXIT_LOW_BUSBW
    with pytest.raises(ValueError):
        nccl.verdict([], nccl.NcclTransport(), link_gbps=1, min_busbw_fraction=1.5)


def test_the_verdict_uses_the_largest_size():
    small_fast = nccl.SweepRow(1 << 20, 1 << 18, "float", "sum", 10.0, 100.0, 100.0, 0)
    large_slow = nccl.SweepRow(1 << 30, 1 << 28, "float", "sum", 10.0, 1.0, 1.0, 0)
    assert nccl.verdict([large_slow, small_fast], nccl.NcclTransport(), link_gbps=100).exit_code == nccl.EXIT_LOW_BUSBW


def test_bench_sizes_reach_the_maximum_and_default_to_1_gib():
    assert allreduce_bench.sizes(1 << 20, 1 << 30, 2)[-1] == 1 << 30
    assert len(allreduce_bench.sizes(1 << 20, 1 << 30, 2)) == 11
    assert allreduce_bench.sizes(4096, 65536, 4) == [4096, 16384, 65536]
    assert allreduce_bench.parse_args([]).max_bytes == 1 << 30
    assert allreduce_bench.parse_args([]).min_busbw_fraction == 0.9


def test_exit_codes_agree_between_launch_and_the_workload():
    assert launch.EXIT_CONFIG_ERROR == trainer.EXIT_CONFIG_ERROR
    assert (launch.EXIT_LOW_BUSBW, launch.EXIT_SOCKET_FALLBACK, launch.EXIT_NO_TRANSPORT_INFO,
            launch.EXIT_NO_RDMA_CHANNEL) == (nccl.EXIT_LOW_BUSBW, nccl.EXIT_SOCKET_FALLBACK,
                                             nccl.EXIT_NO_TRANSPORT_INFO, nccl.EXIT_NO_RDMA_CHANNEL)
    assert (launch.EXIT_RDMA_BELOW_FRACTION, launch.EXIT_RDMA_TOOL_FAILED) == (
        rdma_link.EXIT_LINK_BELOW_FRACTION, rdma_link.EXIT_LINK_TOOL_FAILED)
    assert launch.FATAL_EXIT_CODES == {3, 10, 11, 12, 13, 14, 15, 16, 17}
    # none is a code torchrun, a shell or a signal uses
    assert all(1 < c < 126 for c in launch.FATAL_EXIT_CODES)


# --- launch.py ------------------------------------------------------------------------------------


def _spec(**kw) -> launch.LaunchSpec:
    base = dict(job="train", service="train-hosts", namespace="training", nodes=4, gpus_per_node=8)
    return launch.LaunchSpec(**{**base, **kw})


def test_indexed_job_command():
    cmd = launch.torchrun_command(_spec(max_restarts=5))
    assert cmd[:2] == ["/bin/sh", "-c"]
    script = cmd[2]
    torchrun = next(line for line in script.splitlines() if line.startswith("torchrun "))
    for token in ("--nnodes=4", '--node_rank="$JOB_COMPLETION_INDEX"', "--nproc_per_node=8", "--rdzv_backend=c10d",
                  '--rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT"', "--rdzv_id=train", "--max_restarts=5",
                  "-m trainer.train", "--checkpoint-dir=/mnt/shared/checkpoints/train", "--data-dir=/mnt/shared/data"):
        assert token in torchrun.split() or token in torchrun, token
    assert script.splitlines()[1].startswith("python -m trainer.train --preflight --epochs=10 ")
    assert 'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then is_host=1' in script


def test_indexed_job_env_points_at_rank_0():
    env = {e["name"]: e["value"] for e in launch.pod_env(_spec(nccl_socket_ifname="^lo,docker", nccl_debug="info"))}
    assert env["MASTER_ADDR"] == "train-0.train-hosts" and env["MASTER_PORT"] == "29500"
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert all(set(e) == {"name", "value"} and isinstance(e["value"], str) for e in launch.pod_env(_spec()))


def test_pytorchjob_uses_the_operators_rank_and_address():
    spec = _spec(launcher="pytorchjob", min_nodes=2)
    script = launch.torchrun_command(spec)[2]
    assert '--node_rank="$RANK"' in script and "--nnodes=2:4" in script
    assert 'if [ "$RANK" = 0 ]' in script
    names = {e["name"] for e in launch.pod_env(spec)}
    assert not names & {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"}  # the operator injects them


def test_acceptance_sweep_never_restarts_and_gets_no_trainer_args():
    spec = _spec(module=launch.BENCH_MODULE, module_args=("--link-gbps", "25", "--expect-transport", "RDMA"), max_restarts=3)
    script = launch.torchrun_command(spec)[2]
    assert "--max_restarts=0" in script and "--epochs" not in script
    assert "-m trainer.allreduce_bench --link-gbps 25 --expect-transport RDMA --exit-code-file=" in script
    args = allreduce_bench.parse_args(["--link-gbps", "25", "--expect-transport", "RDMA"])
    assert args.rdma and args.link_gbps == 25


def test_trainer_args_parse_in_the_trainer():
    spec = _spec(epochs=7, batch_size=32, checkpoint_every=2, checkpoint_every_steps=500, model="mlp",
                 checkpoint_dir="/ckpt", data_dir="/data", dataset="fashion-mnist", learning_rate=0.0125,
                 warmup_epochs=1.5, weight_decay=0.0005)
    args = trainer_train.parse_args(launch.trainer_args(spec))
    assert (args.epochs, args.batch_size, args.checkpoint_every, args.checkpoint_every_steps, args.model,
            args.checkpoint_dir, args.data_dir) == (7, 32, 2, 500, "mlp", "/ckpt", "/data")
    assert (args.dataset, args.lr, args.warmup_epochs, args.weight_decay, args.augment) == (
        "fashion-mnist", 0.0125, 1.5, 0.0005, "auto")


def test_trainer_args_carry_the_training_keys():
    """The contract with trainer.train (issue 15): one `--flag=value` per training key; warm-up and
    weight decay only when set, so the trainer's own defaults (a constant rate) apply otherwise."""
    args = launch.trainer_args(_spec())
    assert [a for a in args if a.split("=")[0] in ("--dataset", "--model", "--lr", "--augment")] == [
        "--dataset=auto", "--model=resnet18", "--lr=0.05", "--augment=auto"]
    assert not any(a.startswith(("--weight-decay", "--warmup-epochs")) for a in args)
    args = launch.trainer_args(_spec(dataset="cifar10", learning_rate=1e-5, weight_decay=0.0, warmup_epochs=0.0))
    assert {"--dataset=cifar10", "--lr=1e-05", "--weight-decay=0", "--warmup-epochs=0"} <= set(args)


@pytest.mark.parametrize("bad", [
    dict(launcher="mpijob"), dict(job="Train"), dict(nodes=0), dict(gpus_per_node=0), dict(max_restarts=-1),
    dict(min_nodes=5), dict(module="trainer train"), dict(epochs=0), dict(nccl_debug="LOUD"), dict(rdzv_port=0),
    dict(dataset="imagenet"), dict(model="vit"), dict(augment="maybe"), dict(learning_rate=0.0),
    dict(learning_rate=11.0), dict(warmup_epochs=-1.0), dict(weight_decay=1.0),
])
def test_launch_spec_rejects_bad_input(bad):
    with pytest.raises(ValueError, match="LaunchSpec"):
        _spec(**bad)


def test_launch_script_passes_shellcheck(tmp_path):
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    for spec in (_spec(), _spec(launcher="pytorchjob"), _spec(module=launch.BENCH_MODULE, module_args=("--rdma",))):
        script = tmp_path / "launch.sh"
        script.write_text(launch.launch_script(spec) + "\n")
        proc = subprocess.run(["shellcheck", "-s", "sh", str(script)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout


def test_dockerfile_pins_the_packages_versions_lists():
    text = (WORKLOADS / "Dockerfile").read_text()
    apt = dict(re.findall(r"^\s+([a-z0-9.+-]+)=([0-9][A-Za-z0-9.+~:-]*) \\$", text, flags=re.M))
    assert apt == versions.WORKLOAD_IMAGE_APT
    (pins,) = re.findall(r"pip install --no-cache-dir (.+)$", text, flags=re.M)
    assert dict(pin.split("==") for pin in pins.split()) == versions.WORKLOAD_IMAGE_PIP


def test_dockerfile_base_image_is_the_pinned_one():
    froms = re.findall(r"^FROM\s+(\S+)", (WORKLOADS / "Dockerfile").read_text(), flags=re.M)
    assert froms == [versions.TRAINING_BASE_IMAGE]
    assert re.fullmatch(r"nvcr\.io/nvidia/pytorch:\d{2}\.\d{2}-py3", versions.TRAINING_BASE_IMAGE)


# --- the trainer in one process (torch CPU) -------------------------------------------------------


def _run_trainer(capsys, *argv: str) -> tuple[int, list[dict[str, str]], str]:
    code = trainer_train.main(list(argv))
    out = capsys.readouterr()
    events = [e for e in map(trainer_train.parse_event, out.out.splitlines()) if e]
    return code, events, out.err


def test_trainer_uses_a_dataset_file_when_present_and_resumes_after_it_finished(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    data = tmp_path / "data"
    data.mkdir()
    g = torch.Generator().manual_seed(0)
    inputs = torch.randn(96, 8, generator=g)
    torch.save({"inputs": inputs, "targets": (inputs[:, 0] > 0).long()}, data / "train.pt")
    common = ("--model=mlp", "--batch-size=16", f"--data-dir={data}", f"--checkpoint-dir={tmp_path / 'ckpt'}",
              "--checkpoint-every-steps=4")
    code, events, err = _run_trainer(capsys, "--epochs=2", *common)
    assert code == 0, err
    start = next(e for e in events if e["event"] == "start")
    assert start["dataset"] == f"file:{data / 'train.pt'}" and start["steps_per_epoch"] == "6"
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == ["4", "6", "8", "12"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "step-000000006.pt", "step-000000008.pt", "step-000000012.pt"]  # the newest 3 kept
    # a third epoch: resumes from step 12 at the start of epoch 2 (0-based)
    code, events, err = _run_trainer(capsys, "--epochs=3", *common)
    assert code == 0, err
    resume = next(e for e in events if e["event"] == "resume")
    assert (resume["step"], resume["epoch"], resume["batch"]) == ("12", "2", "0")
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == ["3"]


def test_trainer_skips_a_torn_checkpoint_and_resumes_mid_epoch(tmp_path, capsys):
    pytest.importorskip("torch")
    ckpt = tmp_path / "ckpt"
    common = ("--model=mlp", "--batch-size=8", "--synthetic-samples=64", f"--data-dir={tmp_path / 'none'}",
              f"--checkpoint-dir={ckpt}", "--checkpoint-every-steps=3", "--checkpoint-every=0")
    code, _, err = _run_trainer(capsys, "--epochs=1", *common)
    assert code == 0, err
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-000000003.pt", "step-000000006.pt", "step-000000008.pt"]
    (ckpt / "step-000000008.pt").write_bytes(b"torn")  # e.g. a node lost power mid-copy
    (ckpt / ".tmp-step-000000009.pt.123").write_bytes(b"never renamed")
    code, events, err = _run_trainer(capsys, "--epochs=1", *common)
    assert code == 0, err
    assert any(e["event"] == "checkpoint_skipped" and e["path"].endswith("step-000000008.pt") for e in events)
    resume = next(e for e in events if e["event"] == "resume")
    assert (resume["step"], resume["epoch"], resume["batch"]) == ("6", "0", "6")
    assert next(e for e in events if e["event"] == "done")["step"] == "8"  # only the 2 lost steps redone


def test_trainer_rejects_a_malformed_dataset_with_exit_3(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    data = tmp_path / "data"
    data.mkdir()
    torch.save({"inputs": torch.zeros(4, 2), "targets": torch.zeros(5).long()}, data / "train.pt")
    code, _, err = _run_trainer(capsys, "--preflight", f"--data-dir={data}", f"--checkpoint-dir={tmp_path / 'c'}")
    assert code == trainer.EXIT_CONFIG_ERROR and "inputs [N, ...] and targets [N]" in err


def test_skip_sampler_drops_the_done_batches():
    sampler = trainer_train.SkipSampler(range(10), skip=4)
    assert list(sampler) == [4, 5, 6, 7, 8, 9] and len(sampler) == 6
