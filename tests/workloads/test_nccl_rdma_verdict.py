"""The NCCL acceptance's verdict with `network.rdma` declared (workloads/trainer/nccl.py): the
acceptance always spans nodes, so it passes only when NCCL carried the all-reduce over NET/IB. A run
whose channels are all P2P/SHM (NVLink, PCIe, host memory) never touched RDMA, even when NCCL loaded
its IB transport and said "Using network IB"; it fails with its own exit code, 15.

The log lines below are in the formats NCCL prints at NCCL_DEBUG=INFO (hosts, pids and pointers
are made up), as found in NCCL's and nccl-tests' issue threads: NVIDIA/nccl-tests#213 and #228
(multi-node runs that stayed on one node: only P2P channels, "nNodes 1", NVLS lines; IB devices
listed all the same), NVIDIA/nccl#1232 (SHM and Socket channels, the older "Channel 00 :" form),
NVIDIA/nccl#1189 and NVIDIA/nccl-tests#252 (two nodes: P2P inside, NET/IB/<dev>/GDRDMA between),
NVIDIA/nccl#1412 (the 2.19+ "comm ... nRanks 16 nNodes 2 ... MNNVL 0" line)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_DIR

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

import trainer  # noqa: E402
from trainer import allreduce_bench, nccl, rdma_link  # noqa: E402

# Eight ranks on one node: NCCL found the IB HCAs and chose the IB network, then connected every
# rank over NVLink (P2P) with NVLS; no channel went over the network.
ONE_NODE_WITH_IB = [
    "node-a:5181:5232 [2] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_2:1/IB [RO]; OOB ibs85f0:192.168.1.10<0>",
    "node-a:5181:5232 [2] NCCL INFO Using network IB",
    "node-a:5181:5232 [2] NCCL INFO comm 0x55a7be570210 rank 2 nRanks 8 nNodes 1 localRanks 8 localRank 2 MNNVL 0",
    "node-a:5181:5232 [2] NCCL INFO Channel 00/16 :    0   1   2   3   4   5   6   7",
    "node-a:5181:5232 [2] NCCL INFO Trees [0] 3/-1/-1->2->1 [1] 3/-1/-1->2->1",
    "node-a:5181:5232 [2] NCCL INFO Channel 00/0 : 2[2] -> 3[3] via P2P/IPC/read",
    "node-a:5181:5232 [2] NCCL INFO Channel 01/0 : 2[2] -> 3[3] via P2P/CUMEM/read",
    "node-a:5181:5232 [2] NCCL INFO Channel 14/0 : 2[2] -> 1[1] via P2P/direct pointer",
    "node-a:5181:5232 [2] NCCL INFO Connected all rings",
    "node-a:5181:5232 [2] NCCL INFO NVLS comm 0x55a7be570210 headRank 2 nHeads 8 buffSize 4194304 memSize 2097152 "
    "nvlsPerRankSize 201326592 nvlsTotalSize 1610612736",
    "node-a:5181:5232 [2] NCCL INFO Connected NVLS",
    "node-a:5181:5232 [2] NCCL INFO 16 coll channels, 16 collnet channels, 16 nvls channels, 32 p2p channels, "
    "32 p2p channels per peer",
]
# NCCL before 2.19 (no nNodes line), two ranks of one node through host memory.
SHM_ONLY = [
    "node-b:13572:13572 [1] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct",
    "node-b:13572:13572 [1] NCCL INFO Channel 01 : 2[1] -> 0[0] via SHM/direct/direct",
    "node-b:13572:13572 [1] NCCL INFO Connected all rings",
]
# Two nodes of two GPUs: P2P inside each node, GPUDirect RDMA between them.
TWO_NODES_OVER_IB = [
    "gpu-05:1789224:1789735 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.5<0>",
    "gpu-05:1789224:1789735 [0] NCCL INFO Using network IB",
    "gpu-05:1789224:1789735 [0] NCCL INFO comm 0x5b41750 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0",
    "gpu-05:1789224:1789735 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    "gpu-05:1789224:1789735 [0] NCCL INFO Channel 01/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA",
    "gpu-05:1789225:1789736 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM",
    "gpu-05:1789225:1789736 [1] NCCL INFO Channel 03/0 : 1[1] -> 0[0] via P2P/CUMEM",
    "gpu-05:1789224:1789735 [0] NCCL INFO Channel 04/1 : 3[1] -> 0[0] [receive] via NET/IB/1/GDRDMA",
]
# A multi-node NVLink domain (GB200 NVL72 style): two nodes, MNNVL 1, the nodes reach each other over NVLink.
MNNVL_TWO_NODES = [
    "gb200-04:2101742:2101799 [0] NCCL INFO Using network IB",
    "gb200-04:2101742:2101799 [0] NCCL INFO comm 0x5b2e1d0 rank 0 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 1",
    "gb200-04:2101742:2101799 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] via P2P/CUMEM/read",
    "gb200-04:2101742:2101799 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
]
# The IB transport was chosen, but no channel line was logged (NCCL_DEBUG_SUBSYS without INIT).
NETWORK_LINE_ONLY = [
    "gpu-05:1789224:1789735 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.5<0>",
    "gpu-05:1789224:1789735 [0] NCCL INFO Using network IB",
]
# One rank of the two-node run fell back to sockets.
SOCKETS_BESIDE_P2P = [
    "node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
    "node0:13572:13572 [1] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct",
]
# A sweep comfortably above any threshold used here: 10 GB/s busbw = 80 Gbit/s at 1 GiB.
FAST = [nccl.SweepRow(1 << 30, 1 << 28, "float", "sum", 1e5, 10.0, 10.0, 0)]


def _verdict(lines: list[str], *, rdma: bool = True, rows: list[nccl.SweepRow] = FAST,
             link_gbps: float | None = 25) -> nccl.Verdict:
    return nccl.verdict(rows, nccl.parse_nccl_log(lines), link_gbps=link_gbps, rdma_declared=rdma)


def test_the_logs_parse_to_their_transports_and_node_counts() -> None:
    one = nccl.parse_nccl_log(ONE_NODE_WITH_IB)
    assert one.network == "IB" and one.channels == {"P2P": 3} and one.nodes == 1 and not one.mnnvl
    assert not one.uses_rdma and one.rdma_channels == 0
    two = nccl.parse_nccl_log(TWO_NODES_OVER_IB)
    assert two.channels == {"NET/IB": 3, "P2P": 2} and two.nodes == 2 and two.uses_rdma
    mnnvl = nccl.parse_nccl_log(MNNVL_TWO_NODES)
    assert mnnvl.mnnvl and mnnvl.nodes == 2 and mnnvl.channels == {"P2P": 2}
    assert nccl.parse_nccl_log(SHM_ONLY).nodes is None  # NCCL before 2.19 does not log it
    merged = nccl.parse_nccl_log(ONE_NODE_WITH_IB).merge(nccl.parse_nccl_log(TWO_NODES_OVER_IB))
    assert merged.nodes == 2 and merged.rdma_channels == 3


@pytest.mark.parametrize("lines", [ONE_NODE_WITH_IB, SHM_ONLY, MNNVL_TWO_NODES], ids=["p2p-nvls", "shm", "mnnvl"])
def test_rdma_declared_and_only_p2p_or_shm_channels_fail_with_their_own_code(lines: list[str]) -> None:
    v = _verdict(lines)
    assert v.exit_code == nccl.EXIT_NO_RDMA_CHANNEL and not v.passed, v
    (reason,) = v.reasons
    assert "no channel over NET/IB" in reason and "network.rdma" in reason and "never exercised" in reason
    kinds = sorted(nccl.parse_nccl_log(lines).channels)
    assert f"only via {', '.join(kinds)}" in reason
    line = v.line(nccl.parse_nccl_log(lines), FAST[-1].size)
    assert line.startswith(f"acceptance: verdict=FAIL exit={nccl.EXIT_NO_RDMA_CHANNEL} transport={','.join(kinds)} ")
    # without RDMA declared the same run is a plain pass: intra-node transports are fine then
    assert _verdict(lines, rdma=False).passed


def test_the_reason_says_why_no_network_was_used() -> None:
    assert "spans 1 node: nNodes 1" in _verdict(ONE_NODE_WITH_IB).reasons[0]
    assert "multi-node NVLink domain, MNNVL 1" in _verdict(MNNVL_TWO_NODES).reasons[0]
    assert "nNodes" not in _verdict(SHM_ONLY).reasons[0] and "MNNVL" not in _verdict(SHM_ONLY).reasons[0]


def test_rdma_declared_passes_only_with_net_ib_channels() -> None:
    v = _verdict(TWO_NODES_OVER_IB)
    assert v.passed and v.reasons == (), v
    # the IB network chosen but no channel line at all proves nothing either
    v = _verdict(NETWORK_LINE_ONLY)
    assert v.exit_code == nccl.EXIT_NO_TRANSPORT_INFO and "INIT in NCCL_DEBUG_SUBSYS" in v.reasons[0]
    # a socket anywhere is still the socket fallback
    assert _verdict(SOCKETS_BESIDE_P2P).exit_code == nccl.EXIT_SOCKET_FALLBACK
    assert _verdict(SOCKETS_BESIDE_P2P + TWO_NODES_OVER_IB).exit_code == nccl.EXIT_SOCKET_FALLBACK


def test_no_rdma_channel_wins_over_low_bandwidth() -> None:
    slow = [nccl.SweepRow(1 << 30, 1 << 28, "float", "sum", 1e5, 0.1, 0.1, 0)]
    v = _verdict(ONE_NODE_WITH_IB, rows=slow)
    assert v.exit_code == nccl.EXIT_NO_RDMA_CHANNEL and len(v.reasons) == 2 and "busbw" in v.reasons[1]


def test_the_new_code_is_its_own_and_documented() -> None:
    others = {trainer.EXIT_CONFIG_ERROR, nccl.EXIT_PASS, nccl.EXIT_LOW_BUSBW, nccl.EXIT_SOCKET_FALLBACK,
              nccl.EXIT_NO_TRANSPORT_INFO, rdma_link.EXIT_LINK_BELOW_FRACTION, rdma_link.EXIT_LINK_TOOL_FAILED}
    assert nccl.EXIT_NO_RDMA_CHANNEL not in others
    assert 1 < nccl.EXIT_NO_RDMA_CHANNEL < 126  # no code torchrun, a shell or a signal uses
    code = str(nccl.EXIT_NO_RDMA_CHANNEL)
    assert re.search(rf"^\s+{code} EXIT_NO_RDMA_CHANNEL\s", nccl.__doc__ or "", re.M)
    assert re.search(rf"\b{code} --rdma declared but no channel over NET/IB", " ".join((allreduce_bench.__doc__ or "").split()))
    page = " ".join((PROJECT_DIR / "docs" / "training.md").read_text().split())
    assert f"exit {code} when no channel went over NET/IB" in page


# ------------------------------------------------------------------------------------------------
# the sweep itself: two gloo ranks, each reading its own NCCL log


def _bench(tmp_path: Path, logs: list[list[str]]) -> tuple[list[int], str]:
    """allreduce_bench --rdma on len(logs) ranks (env:// init on loopback, no torchrun, so each
    rank's own exit code is seen); rank r reads logs[r] as its NCCL log."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank, lines in enumerate(logs):
        log = tmp_path / f"nccl-{rank}.log"
        log.write_text("\n".join(lines) + "\n")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(WORKLOADS), "GLOO_SOCKET_IFNAME": "lo",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(len(logs)),
               "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "HOME": str(tmp_path)}
        args = ["--min-bytes=4096", "--max-bytes=16384", "--factor=4", "--iters=2", "--warmup=1", "--rdma",
                "--link-gbps=0.000001", f"--nccl-log={log}", "--backend=gloo"]
        procs.append(subprocess.Popen([sys.executable, "-m", "trainer.allreduce_bench", *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    out = []
    try:
        for p in procs:
            out.append(p.communicate(timeout=90)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    return [p.returncode for p in procs], "\n".join(out)


def test_bench_fails_every_rank_with_15_when_no_rank_used_net_ib(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")
    codes, out = _bench(tmp_path, [ONE_NODE_WITH_IB, SHM_ONLY])
    assert codes == [nccl.EXIT_NO_RDMA_CHANNEL] * 2, out
    (line,) = [x for x in out.splitlines() if x.startswith("acceptance: ")]
    assert "verdict=FAIL exit=15 transport=P2P,SHM" in line and "no channel over NET/IB" in line, out


def test_bench_passes_when_another_rank_carried_the_net_ib_channels(tmp_path: Path) -> None:
    """In a real run only the ranks at a node's edge log NET channels: the verdict reads all ranks."""
    pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")
    codes, out = _bench(tmp_path, [ONE_NODE_WITH_IB, TWO_NODES_OVER_IB])
    assert codes == [0, 0], out
    assert "acceptance: verdict=PASS exit=0 transport=NET/IB,P2P" in out
