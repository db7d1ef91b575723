"""trainer.rdma_link: the ib_write_bw/rping parsers on seed 002's real output, the verdict, and the
two-pod run end to end in two network namespaces with stand-in `rping` and `ib_write_bw`.

The namespaces are the two "nodes": each has a primary veth `eth0` (10.0.0.0/24, where the client
reaches the server as MASTER_ADDR) and the RoCE stand-in `net1` (192.168.100.0/24). The client is
never told the server's net1 address: it must learn it from the exchange. The stand-in tools record
their arguments and print seed 002's output (or fail); the client's ib_write_bw also records which
interface the kernel routes the server's address through.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from components.training import launch
from tests.conftest import PROJECT_DIR

WORKLOADS = PROJECT_DIR / "workloads"
if str(WORKLOADS) not in sys.path:
    sys.path.insert(0, str(WORKLOADS))

from trainer import rdma_link  # noqa: E402

# Verbatim from seed 002 (../shared/seeds/002_8bd1413468bb1312.txt, lines 711-735): the client side of
# `ib_write_bw --report_gbits --report-both -D60 -F -R 10.100.100.1` between two A100 nodes over
# Intel E810 25GbE RoCE v2 (irdma0, GID index 1).
SEED_IB_WRITE_BW_CLIENT = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : irdma0
 Number of qps   : 1            Transport type : IB
 Connection type : RC           Using SRQ      : OFF
 PCIe relax order: ON
 ibv_wr* API     : OFF
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 1
 Max inline data : 0[B]
 rdma_cm QPs     : ON
 Data ex. method : rdma_cm
---------------------------------------------------------------------------------------
 local address: LID 0x01 QPN 0x00c3 PSN 0x19cf42
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:100:100:02
 remote address: LID 0x01 QPN 0x00c3 PSN 0x7f64d6
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:100:100:01
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      1324156          0.00               23.14              0.044138
---------------------------------------------------------------------------------------
"""

# Seed 002, lines 636-675: the client of `rping -cdvVa 10.100.100.1 -C 3` (the lines rping -v prints
# per validated round trip, with the connection setup before them).
SEED_RPING_CLIENT = """\
verbose
validate data
count 3
created cm_id 0x558db36d9270
cma_event type RDMA_CM_EVENT_ADDR_RESOLVED cma_id 0x558db36d9270 (parent)
cma_event type RDMA_CM_EVENT_ROUTE_RESOLVED cma_id 0x558db36d9270 (parent)
rdma_resolve_addr - rdma_resolve_route successful
cma_event type RDMA_CM_EVENT_ESTABLISHED cma_id 0x558db36d9270 (parent)
ESTABLISHED
rdma_connect successful
ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr
ping data: rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs
ping data: rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst
rping_free_buffers called on cb 0x558db36cd830
destroy cm_id 0x558db36d9270
"""


# --- parsing and verdict ---------------------------------------------------------------------------


def test_parses_the_seeds_bw_average():
    assert rdma_link.parse_bw_average(SEED_IB_WRITE_BW_CLIENT.splitlines()) == 23.14


def test_the_seed_file_still_holds_the_table():
    seed = PROJECT_DIR.parent / "shared" / "seeds" / "002_8bd1413468bb1312.txt"
    if not seed.is_file():
        pytest.skip(f"seed 002 not found at {seed}")
    text = seed.read_text()
    table = SEED_IB_WRITE_BW_CLIENT.splitlines()[-3:-1]
    assert all(line in text for line in table)
    # the server's table in the same post (--report-both) reads the same
    assert rdma_link.parse_bw_average(text.splitlines()[676:710]) == 23.14


def test_parser_takes_the_last_row_and_refuses_a_table_in_mb_per_second():
    rows = SEED_IB_WRITE_BW_CLIENT.replace(" 65536      1324156          0.00               23.14",
                                           " 4096       1324156          0.00               11.50\n"
                                           " 65536      1324156          0.00               23.14")
    assert rdma_link.parse_bw_average(rows.splitlines()) == 23.14
    mb = SEED_IB_WRITE_BW_CLIENT.replace("[Gb/sec]", "[MB/sec]")
    assert rdma_link.parse_bw_average(mb.splitlines()) is None
    assert rdma_link.parse_bw_average(["Couldn't connect to 192.168.100.1:18515", ""]) is None
    assert rdma_link.parse_bw_average(SEED_IB_WRITE_BW_CLIENT.splitlines()[:-2]) is None  # header, no row


def test_counts_the_seeds_rping_round_trips():
    assert rdma_link.rping_pings(SEED_RPING_CLIENT.splitlines()) == 3


@pytest.mark.parametrize(("fraction", "code"), [(0.8, rdma_link.EXIT_PASS), (0.9, rdma_link.EXIT_PASS),
                                                (0.95, rdma_link.EXIT_LINK_BELOW_FRACTION)])
def test_seed_verdict_on_25_gbps(fraction, code):
    v = rdma_link.verdict(23.14, link_gbps=25, min_fraction=fraction, rping_ok=True)
    assert v.exit_code == code and v.passed == (code == 0)
    assert v.fraction == pytest.approx(0.9256)
    if code:
        assert v.reasons == (f"BW average 23.14 Gb/s < {fraction} x 25 Gb/s",)


def test_a_tool_failure_outranks_a_slow_link():
    assert rdma_link.verdict(1.0, link_gbps=25, min_fraction=0.8, rping_ok=False).exit_code == rdma_link.EXIT_LINK_TOOL_FAILED
    assert rdma_link.verdict(23.14, link_gbps=25, min_fraction=0.8, rping_ok=True,
                             tools_ok=False).exit_code == rdma_link.EXIT_LINK_TOOL_FAILED
    none = rdma_link.verdict(None, link_gbps=25, min_fraction=0.8, rping_ok=True)
    assert none.exit_code == rdma_link.EXIT_LINK_TOOL_FAILED and "no BW average" in none.reasons[0]
    with pytest.raises(ValueError):
        rdma_link.verdict(23.14, link_gbps=0, min_fraction=0.8, rping_ok=True)


def test_exit_codes_are_fatal_for_the_job():
    assert {rdma_link.EXIT_LINK_BELOW_FRACTION, rdma_link.EXIT_LINK_TOOL_FAILED} == {13, 14}
    assert {13, 14} <= launch.FATAL_EXIT_CODES


# --- preflight -------------------------------------------------------------------------------------


def _module(args: list[str], env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.rdma_link", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


BASE_ARGS = ["--hca=irdma0", "--gid-index=1", "--link-gbps=25"]


def test_preflight_needs_the_tools_and_an_address_on_the_interface(tmp_path):
    bin_dir = _fake_tools(tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(WORKLOADS), "JOB_COMPLETION_INDEX": "0"}
    ok = _module(["--preflight", "--interface=lo", *BASE_ARGS], env)
    assert ok.returncode == 0 and "preflight ok" in ok.stdout, ok.stderr
    no_address = _module(["--preflight", "--interface=nosuch0", *BASE_ARGS, f"--exit-code-file={tmp_path / 'code'}"], env)
    assert no_address.returncode == 3 and "nosuch0 has no IPv4 address" in no_address.stderr
    assert (tmp_path / "code").read_text().strip() == "3"
    no_tools = _module(["--preflight", "--interface=lo", *BASE_ARGS], {**env, "PATH": "/nonexistent"})
    assert no_tools.returncode == 3 and "rping, ib_write_bw" in no_tools.stderr
    bad_index = _module(["--preflight", "--interface=lo", *BASE_ARGS], {**env, "JOB_COMPLETION_INDEX": "2"})
    assert bad_index.returncode == 3 and "index must be 0" in bad_index.stderr
    no_master = _module(["--preflight", "--interface=lo", *BASE_ARGS], {**env, "JOB_COMPLETION_INDEX": "1"})
    assert no_master.returncode == 3 and "MASTER_ADDR" in no_master.stderr


# --- two pods in two network namespaces ------------------------------------------------------------

# FAKE_MODE: ok (seed output), rping-fail, bw-fail. Servers wait (bounded) until the client's run of
# the same tool has ended, like the real ones, so an early exit would be seen as a failure.
FAKE_TOOL = """\
#!/bin/sh
tool=$(basename "$0")
role=client
case " $* " in *" -s "*) role=server ;; esac
last=$(eval echo \\${$#})
case "$tool:$last" in ib_write_bw:*.*.*.*) ;; ib_write_bw:*) role=server ;; esac
printf '%s\\n' "$@" > "$FAKE_DIR/$tool-$role.args"
if [ "$role" = server ]; then
  i=0
  while [ ! -e "$FAKE_DIR/$tool-client.done" ] && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  [ "$tool" = ib_write_bw ] && cat "$FAKE_DIR/ib_write_bw.out"
  exit 0
fi
[ "$tool" = rping ] && last=$(sed -n 3p "$FAKE_DIR/$tool-$role.args")
ip -4 route get "$last" > "$FAKE_DIR/$tool-client.route" 2>&1
touch "$FAKE_DIR/$tool-client.done"
case "$FAKE_MODE:$tool" in
  rping-fail:rping) echo "cma event RDMA_CM_EVENT_REJECTED, error 8"; exit 1 ;;
  bw-fail:ib_write_bw) echo "Unable to perform rdma_client function"; echo "Unable to init the socket connection"; exit 1 ;;
esac
if [ "$tool" = rping ]; then cat "$FAKE_DIR/rping.out"; else cat "$FAKE_DIR/ib_write_bw.out"; fi
"""


def _fake_tools(directory: Path) -> Path:
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("rping", "ib_write_bw"):
        (bin_dir / tool).write_text(FAKE_TOOL)
        (bin_dir / tool).chmod(0o755)
    (directory / "ib_write_bw.out").write_text(SEED_IB_WRITE_BW_CLIENT)
    (directory / "rping.out").write_text(SEED_RPING_CLIENT)
    return bin_dir


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture(scope="module")
def two_nodes():
    """Namespaces n0 and n1: eth0 10.0.0.1-2/24 (primary) and net1 192.168.100.1-2/24 (RoCE stand-in)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces")
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed")
    tag = uuid.uuid4().hex[:6]
    names = [f"rdma{tag}-0", f"rdma{tag}-1"]
    try:
        for name in names:
            _ip("netns", "add", name)
    except (subprocess.CalledProcessError, OSError) as exc:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        pytest.skip(f"cannot create network namespaces: {getattr(exc, 'stderr', b'') or exc}")
    try:
        for ifname in ("eth0", "net1"):
            _ip("link", "add", "name", ifname, "netns", names[0], "type", "veth", "peer", "name", ifname, "netns", names[1])
        for i, name in enumerate(names):
            _ip("-n", name, "addr", "add", f"10.0.0.{i + 1}/24", "dev", "eth0")
            _ip("-n", name, "addr", "add", f"192.168.100.{i + 1}/24", "dev", "net1")
            for ifname in ("lo", "eth0", "net1"):
                _ip("-n", name, "link", "set", ifname, "up")
        yield names
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def _run_pair(names: list[str], tmp: Path, mode: str, extra: list[str] = ()) -> dict:
    """Server (index 0) in n0, client (index 1) in n1; both bounded by 60 s."""
    bin_dir = _fake_tools(tmp)
    port = 29400 + os.getpid() % 500
    procs = []
    for index, name in enumerate(names):
        env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(WORKLOADS),
               "JOB_COMPLETION_INDEX": str(index), "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": str(port),
               "FAKE_DIR": str(tmp), "FAKE_MODE": mode}
        args = ["--seconds=2", "--connect-timeout=20", "--tool-margin=10", "--min-fraction=0.8", *BASE_ARGS, *extra,
                f"--exit-code-file={tmp / f'code-{index}'}"]
        procs.append(subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-m", "trainer.rdma_link", *args],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        if index == 0:
            time.sleep(0.2)  # the client retries anyway; this only keeps the test fast
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=60))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    results = []
    for out, _err in outs:
        lines = [line for line in out.splitlines() if line.startswith("{")]
        results.append(json.loads(lines[-1]) if lines else None)
    args = {p.name.removesuffix(".args"): p.read_text().split("\n")[:-1] for p in tmp.glob("*.args")}
    logs = "\n".join(f"--- index {i} rc={p.returncode} ---\n{o}\n{e}" for i, (p, (o, e)) in enumerate(zip(procs, outs, strict=True)))
    return {"codes": [p.returncode for p in procs], "results": results, "args": args, "logs": logs, "tmp": tmp}


def test_pass_both_pods_exit_0_with_the_seeds_bandwidth(two_nodes, tmp_path):
    run = _run_pair(two_nodes, tmp_path, "ok")
    assert run["codes"] == [0, 0], run["logs"]
    for result in run["results"]:
        assert result["passed"] and result["exit_code"] == 0 and result["bw_gbps"] == 23.14, run["logs"]
        assert result["link_gbps"] == 25 and result["fraction"] == pytest.approx(0.9256) and result["rping_ok"]
        assert result["server_address"] == "192.168.100.1" and result["reasons"] == []
    assert [r["role"] for r in run["results"]] == ["server", "client"]
    assert run["results"][1]["client_address"] == "192.168.100.2"
    assert not (tmp_path / "code-0").exists()  # only failing codes are written


def test_the_client_learns_the_servers_net1_address_and_passes_hca_and_gid(two_nodes, tmp_path):
    run = _run_pair(two_nodes, tmp_path, "ok")
    args = run["args"]
    assert args["rping-server"] == ["-s", "-a", "192.168.100.1", "-C", "3", "-v"], run["logs"]
    assert args["rping-client"] == ["-c", "-a", "192.168.100.1", "-C", "3", "-v"]
    common = ["-d", "irdma0", "-x", "1", "--report_gbits", "--report-both", "-F", "-R", "-D", "2"]
    assert args["ib_write_bw-server"] == common
    assert args["ib_write_bw-client"] == [*common, "192.168.100.1"]
    # the client only knew MASTER_ADDR=10.0.0.1 (eth0); the address it was given is reached over net1
    for tool in ("rping", "ib_write_bw"):
        assert " dev net1 " in (tmp_path / f"{tool}-client.route").read_text()


def test_slow_link_both_pods_exit_13(two_nodes, tmp_path):
    run = _run_pair(two_nodes, tmp_path, "ok", ["--min-fraction=0.95"])
    assert run["codes"] == [13, 13], run["logs"]
    for result in run["results"]:
        assert not result["passed"] and result["bw_gbps"] == 23.14
        assert result["reasons"] == ["BW average 23.14 Gb/s < 0.95 x 25.0 Gb/s"]
    assert (tmp_path / "code-0").read_text().strip() == (tmp_path / "code-1").read_text().strip() == "13"


@pytest.mark.parametrize(("mode", "reason"), [("bw-fail", "ib_write_bw exit 1: Unable to perform rdma_client function"),
                                              ("rping-fail", "rping exit 1: cma event RDMA_CM_EVENT_REJECTED")])
def test_tool_failure_both_pods_exit_14(two_nodes, tmp_path, mode, reason):
    run = _run_pair(two_nodes, tmp_path, mode)
    assert run["codes"] == [14, 14], run["logs"]
    for result in run["results"]:
        assert not result["passed"] and result["exit_code"] == 14
        assert any(r.startswith(reason) for r in result["reasons"]), result["reasons"]


def test_no_peer_is_a_bounded_failure(two_nodes, tmp_path):
    """A client whose server never comes gives up after --connect-timeout with 14."""
    bin_dir = _fake_tools(tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(WORKLOADS), "JOB_COMPLETION_INDEX": "1",
           "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29399"}
    started = time.monotonic()
    proc = subprocess.run(["ip", "netns", "exec", two_nodes[1], sys.executable, "-m", "trainer.rdma_link", *BASE_ARGS,
                           "--connect-timeout=2"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 14, proc.stderr
    assert time.monotonic() - started < 10
    result = json.loads(proc.stdout.splitlines()[-1])
    assert "cannot reach 10.0.0.1:29399 within 2 s" in result["reasons"][0]


def test_a_client_without_net1_address_makes_both_pods_exit_3(two_nodes, tmp_path):
    """The client that lacks the secondary network tells the server: both report a config error."""
    _ip("-n", two_nodes[1], "addr", "del", "192.168.100.2/24", "dev", "net1")
    try:
        bin_dir = _fake_tools(tmp_path)
        port = 29900 + os.getpid() % 90
        procs = []
        for index, name in enumerate(two_nodes):
            env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(WORKLOADS), "FAKE_DIR": str(tmp_path),
                   "FAKE_MODE": "ok", "JOB_COMPLETION_INDEX": str(index), "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": str(port)}
            procs.append(subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-m", "trainer.rdma_link",
                                           *BASE_ARGS, "--connect-timeout=20", "--tool-margin=5"],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=40) for p in procs]
    finally:
        _ip("-n", two_nodes[1], "addr", "add", "192.168.100.2/24", "dev", "net1")
    assert [p.returncode for p in procs] == [3, 3], outs
    assert all("client: interface net1 has no IPv4 address" in err for _out, err in outs), outs
