"""The NCCL acceptance fails on wrong data and on a broken RDMA link, whatever the bandwidth (issue 30).

- `#wrong`: nccl-tests' all_reduce_perf prints, per size, an out-of-place and an in-place column of
  wrong elements (src/common.cu's writeBenchmarkLineBody: `%6g` of the count, so a million wrong
  elements read `1e+06`; `N/A` with -c 0). Any non-zero count is data corruption: exit 16, ahead of
  every other code.
- An IB completion error: NCCL's net_ib WARNs `Got completion from peer <addr> with ...` when a work
  completion comes back with an error status. Three forms across NCCL versions (the lines below are
  NCCL's format strings filled in as in NVIDIA/nccl issue threads; hosts and pids made up):
  `with error 12, opcode 0, ...` (2.1x), `with status=4 opcode=0 ...` (2.19-2.2x) and
  `with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RECV_RDMA_WITH_IMM(129) ...` (recent). Exit 17.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from components.training import launch
from tests.conftest import PROJECT_DIR
from tests.workloads.test_nccl_rdma_verdict import TWO_NODES_OVER_IB, _bench

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from gpuhealth import ncclpair  # noqa: E402
from trainer import allreduce_bench, nccl  # noqa: E402

HEADER = [
    "#                                                              out-of-place                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
]
# Fast enough for any link used here; the in-place run of the middle size got 3 elements wrong,
# the largest size's out-of-place run every one of its 268435456 elements (printed by %6g).
CORRUPT_TABLE = HEADER + [
    "   268435456      67108864     float     sum      -1   2701.3   99.37  186.32      0   2698.8   99.47  186.50      0",
    "   536870912     134217728     float     sum      -1   5372.9   99.92  187.35      0   5370.1   99.97  187.45      3",
    "  1073741824     268435456     float     sum      -1  10712.4  100.23  187.94  2.68435e+08  10708.9  100.27  188.00      0",
    "# Out of bounds values : 268435459 FAILED",
    "# Avg bus bandwidth    : 187.263",
]
CLEAN_TABLE = HEADER + [
    "  1073741824     268435456     float     sum      -1  10712.4  100.23  187.94      0  10708.9  100.27  188.00      0",
]
NO_CHECK_TABLE = HEADER + [  # all_reduce_perf -c 0: no validation
    "  1073741824     268435456     float     sum      -1  10712.4  100.23  187.94    N/A  10708.9  100.27  188.00    N/A",
]
IB_ERROR_FORMS = {
    "error-n": "node-a:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
               "10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
    "status-n": "[2026-03-03 12:11:38] node-b:185303:186751 [1] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got "
                "completion from peer 10.99.91.63<51161> with status=4 opcode=0 len=0 vendor err 81 (Send) localGid "
                "::ffff:10.99.92.59 remoteGids::ffff:10.99.91.63 hca mlx5_1",
    "status-name": "[2026-09-09 10:46:33] node-c:319733:319761 [1] transport/net_ib/p2p.cc:648 NCCL WARN NET/IB: Got "
                   "completion from peer 10.153.235.13<40554> with status=IBV_WC_RETRY_EXC_ERR(12) "
                   "opcode=IBV_WC_RECV_RDMA_WITH_IMM(129) vendor_err=129 localGid ::ffff:1.1.2.2 remoteGids::ffff:1.1.1.4 "
                   "hca mlx5_1",
}
EXPECTED = {"error-n": "IBV_WC_RETRY_EXC_ERR(12) from peer 10.2.0.5<33092>",
            "status-n": "IBV_WC_LOC_PROT_ERR(4) from peer 10.99.91.63<51161>",
            "status-name": "IBV_WC_RETRY_EXC_ERR(12) from peer 10.153.235.13<40554>"}


def test_wrong_counts_of_both_columns_are_read_in_nccl_tests_own_number_format() -> None:
    rows = nccl.parse_sweep(CORRUPT_TABLE)
    assert [(r.wrong, r.inplace_wrong) for r in rows] == [(0, 0), (0, 3), (268435000, 0)]  # %6g keeps 6 digits
    assert [r.wrong_values for r in nccl.parse_sweep(NO_CHECK_TABLE)] == [0]
    # a #wrong that is no count is no row (it would hide the size it belongs to)
    assert nccl.parse_sweep_line(CLEAN_TABLE[-1].replace("     0  10708.9", "  -1e3  10708.9")) is None


def test_a_fast_sweep_with_wrong_values_fails_with_its_own_code_ahead_of_everything() -> None:
    rows = nccl.parse_sweep(CORRUPT_TABLE)
    v = nccl.verdict(rows, nccl.parse_nccl_log(TWO_NODES_OVER_IB), link_gbps=100, rdma_declared=True)
    assert v.exit_code == nccl.EXIT_WRONG_RESULTS and not v.passed, v
    (reason,) = v.reasons
    assert "536870912 B: 3" in reason and "1073741824 B: 268435000" in reason and "corruption" in reason
    # still first when the transport and the bandwidth fail too
    worse = nccl.verdict(rows, nccl.NcclTransport(), link_gbps=10_000, rdma_declared=True)
    assert worse.exit_code == nccl.EXIT_WRONG_RESULTS and len(worse.reasons) == 3
    # the same sweep without wrong values passes; without validation (N/A) there is nothing to fail on
    assert nccl.verdict(nccl.parse_sweep(CLEAN_TABLE), nccl.parse_nccl_log(TWO_NODES_OVER_IB), link_gbps=100,
                        rdma_declared=True).passed
    assert nccl.verdict(nccl.parse_sweep(NO_CHECK_TABLE), nccl.NcclTransport(), link_gbps=100).passed


@pytest.mark.parametrize("form", sorted(IB_ERROR_FORMS))
def test_an_ib_completion_error_fails_a_fast_clean_rdma_sweep(form: str) -> None:
    line = IB_ERROR_FORMS[form]
    assert nccl.ib_completion_error(line) == EXPECTED[form]
    transport = nccl.parse_nccl_log(TWO_NODES_OVER_IB + [line])
    assert transport.ib_errors == 1 and transport.uses_rdma
    v = nccl.verdict(nccl.parse_sweep(CLEAN_TABLE), transport, link_gbps=100, rdma_declared=True)
    assert v.exit_code == nccl.EXIT_IB_COMPLETION_ERROR, v
    assert EXPECTED[form] in v.reasons[0]
    # RDMA not declared does not excuse it either
    assert nccl.verdict(nccl.parse_sweep(CLEAN_TABLE), transport, link_gbps=None).exit_code == 17


def test_lines_that_only_look_alike_are_not_errors() -> None:
    benign = [
        # the opcode names IBV_WC_* too, the status is what counts; a success status is no error
        "node:1:2 [0] NCCL WARN NET/IB: Got completion from peer 10.0.0.1<1> with status=IBV_WC_SUCCESS(0) "
        "opcode=IBV_WC_RECV_RDMA_WITH_IMM(129) vendor_err=0 hca mlx5_0",
        "node:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.5<0>",
        "node:1:2 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    ]
    assert [nccl.ib_completion_error(x) for x in benign] == [None] * 3
    assert nccl.parse_nccl_log(benign).ib_errors == 0


def test_precedence_and_merge_across_ranks() -> None:
    one = nccl.parse_nccl_log(TWO_NODES_OVER_IB)
    broken = nccl.parse_nccl_log([IB_ERROR_FORMS["status-name"]] * 2)
    merged = one.merge(broken)
    assert merged.ib_errors == 2 and merged.ib_error_example == EXPECTED["status-name"]
    # a broken link wins over a socket fallback and low bandwidth, wrong data over all
    sockets = nccl.parse_nccl_log(["n:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"])
    slow = nccl.verdict(nccl.parse_sweep(CLEAN_TABLE), sockets.merge(broken), link_gbps=10_000, rdma_declared=True)
    assert slow.exit_code == nccl.EXIT_IB_COMPLETION_ERROR and len(slow.reasons) == 3


def test_the_new_codes_are_their_own_fatal_and_documented() -> None:
    new = {nccl.EXIT_WRONG_RESULTS: "EXIT_WRONG_RESULTS", nccl.EXIT_IB_COMPLETION_ERROR: "EXIT_IB_COMPLETION_ERROR"}
    assert (launch.EXIT_WRONG_RESULTS, launch.EXIT_IB_COMPLETION_ERROR) == (16, 17) == tuple(new)
    assert set(new) <= launch.FATAL_EXIT_CODES and set(new) <= ncclpair.FAIL_CODES
    assert len(launch.FATAL_EXIT_CODES) == 9 and all(1 < c < 126 for c in launch.FATAL_EXIT_CODES)
    bench_doc = " ".join((allreduce_bench.__doc__ or "").split())
    for code, name in new.items():
        assert re.search(rf"^\s+{code} {name}\s", nccl.__doc__ or "", re.M)
        assert f" {code} " in bench_doc
    training = " ".join((PROJECT_DIR / "docs" / "training.md").read_text().split())
    assert "exit 16 when any size's `#wrong` is not 0" in training and "Exit 17 when an `NCCL WARN` line" in training
    trouble = (PROJECT_DIR / "docs" / "troubleshooting.md").read_text()
    assert re.search(r"^\| 16 \| acceptance: some size's `#wrong`", trouble, re.M)
    assert re.search(r"^\| 17 \| acceptance: an `NCCL WARN` line reports an IB/RoCE completion error", trouble, re.M)


def test_bench_fails_every_rank_with_17_when_one_rank_logged_an_ib_completion_error(tmp_path: Path) -> None:
    """The real sweep (two gloo ranks on loopback): rank 1's NCCL log holds the WARN, both exit 17."""
    pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")
    codes, out = _bench(tmp_path, [TWO_NODES_OVER_IB, TWO_NODES_OVER_IB + [IB_ERROR_FORMS["status-name"]]])
    assert codes == [nccl.EXIT_IB_COMPLETION_ERROR] * 2, out
    (line,) = [x for x in out.splitlines() if x.startswith("acceptance: ")]
    assert "verdict=FAIL exit=17" in line and "1 IB completion error(s)" in line, line
