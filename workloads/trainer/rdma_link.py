"""RDMA link test between two pods' RoCE interfaces: rping, then ib_write_bw (perftest) over rdma_cm.

    python -m trainer.rdma_link --hca irdma0 --gid-index 1 --link-gbps 25 --min-fraction 0.8

Runs as an Indexed Job of two pods, one per RDMA node; the index comes from JOB_COMPLETION_INDEX.
The secondary interface's address (--interface, default net1) is assigned at run time by the IPAM,
so the client cannot know the server's in advance; the two pods meet on the PRIMARY network instead:

1. index 0 (server) reads its own IPv4 address on --interface, starts `rping -s -a <ip>` and
   `ib_write_bw -d <hca> -x <gid> --report_gbits --report-both -F -R -D <seconds>`, listens on
   $MASTER_PORT and tells the client the address (one JSON line over TCP);
2. index 1 (client) connects to $MASTER_ADDR:$MASTER_PORT, runs `rping -c -a <ip> -C <n> -v`, then
   `ib_write_bw ... <ip>`, reads "BW average[Gb/sec]" from its result table and reports back;
3. the server adds the status of its own two tools, decides, and sends the verdict to the client,
   so both pods exit with the same code and print the same one-line JSON result.

Exit codes: 0 pass (average >= --min-fraction x --link-gbps); 13 below that fraction; 14 rping or
ib_write_bw failed, or no result (no peer within --connect-timeout, no table); 3 configuration
(bad arguments, a tool missing from the image, no IPv4 address on --interface). Every wait has a
bound: the TCP exchange, each tool (--seconds plus a margin), the verdict.

Ports (for a NetworkPolicy): the exchange on $MASTER_PORT (TCP, primary network, to index 0);
rping's rdma_cm port 7174 and ib_write_bw's 18515 (both perftest/librdmacm defaults, on net1).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer import EXIT_CONFIG_ERROR, record_exit_code

EXIT_PASS = 0
EXIT_LINK_BELOW_FRACTION = 13
EXIT_LINK_TOOL_FAILED = 14

RPING_PORT = 7174  # rping's default rdma_cm port
IB_WRITE_BW_PORT = 18515  # perftest's default port
DEFAULT_EXCHANGE_PORT = 29500  # when MASTER_PORT is not set

# `ib_write_bw --report_gbits`: `#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]`.
_TABLE_HEADER = re.compile(r"^\s*#bytes\s")
_COLUMNS = re.compile(r"\S+(?: \S+)*")  # columns are separated by two or more spaces
_AVERAGE = "BW average[Gb/sec]"


def parse_bw_average(lines: Iterable[str]) -> float | None:
    """The "BW average[Gb/sec]" of the last data row of an ib_write_bw result table, None without one
    (no table, or one in MB/sec because --report_gbits was missing)."""
    column: int | None = None
    found: float | None = None
    for line in lines:
        if _TABLE_HEADER.match(line):
            names = _COLUMNS.findall(line.strip())
            column = names.index(_AVERAGE) if _AVERAGE in names else None
            continue
        if column is None:
            continue
        values = line.split()
        if len(values) > column and values[0].isdigit():
            try:
                found = float(values[column])
            except ValueError:
                pass
        elif line.strip().startswith("---"):
            continue
        else:
            column = None
    return found


def rping_pings(lines: Iterable[str]) -> int:
    """How many `ping data: rdma-ping-N: ...` lines rping -v printed (one per validated round trip)."""
    return sum(1 for line in lines if "ping data: rdma-ping-" in line)


@dataclass(frozen=True)
class Verdict:
    exit_code: int
    passed: bool
    bw_gbps: float | None
    link_gbps: float
    min_fraction: float
    fraction: float | None  # bw_gbps / link_gbps
    rping_ok: bool
    reasons: tuple[str, ...]

    def line(self, **extra: object) -> str:
        """The one-line JSON result both pods print."""
        return json.dumps({"test": "rdma_link", **asdict(self), "reasons": list(self.reasons), **extra}, sort_keys=True)


def verdict(bw_gbps: float | None, *, link_gbps: float, min_fraction: float, rping_ok: bool,
            tools_ok: bool = True, reasons: Iterable[str] = ()) -> Verdict:
    """Pass when the tools worked and bw_gbps >= min_fraction x link_gbps. A tool failure or a missing
    result is reported as such (14), not as a slow link (13): it is the root cause."""
    if link_gbps <= 0 or not 0 < min_fraction <= 1:
        raise ValueError(f"need link_gbps > 0 and min_fraction in (0, 1], got {link_gbps} and {min_fraction}")
    why = list(reasons)
    fraction = bw_gbps / link_gbps if bw_gbps is not None else None
    if not rping_ok and not why:
        why.append("rping failed")
    if bw_gbps is None:
        why.append("no BW average[Gb/sec] in ib_write_bw's output")
    if not rping_ok or not tools_ok or bw_gbps is None:
        code = EXIT_LINK_TOOL_FAILED
    elif bw_gbps < min_fraction * link_gbps:
        code = EXIT_LINK_BELOW_FRACTION
        why.append(f"BW average {bw_gbps:.2f} Gb/s < {min_fraction} x {link_gbps} Gb/s")
    else:
        code = EXIT_PASS
    return Verdict(exit_code=code, passed=code == EXIT_PASS, bw_gbps=bw_gbps, link_gbps=link_gbps,
                   min_fraction=min_fraction, fraction=round(fraction, 4) if fraction is not None else None,
                   rping_ok=rping_ok, reasons=tuple(why))


def interface_ipv4(name: str) -> str | None:
    """The (first) IPv4 address of interface `name`, None when it has none or does not exist."""
    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.rdma_link", description=__doc__.split("\n\n")[0])
    p.add_argument("--hca", required=True, help="RDMA device, e.g. irdma0 (ib_write_bw -d)")
    p.add_argument("--gid-index", type=int, required=True, help="GID index of the RoCE v2 IPv4 address (ib_write_bw -x)")
    p.add_argument("--link-gbps", type=float, required=True, help="declared link rate, Gbit/s")
    p.add_argument("--min-fraction", type=float, default=0.8, help="pass when BW average >= this x --link-gbps")
    p.add_argument("--interface", default="net1", help="the RoCE interface whose IPv4 address the tools use")
    p.add_argument("--seconds", type=int, default=10, help="ib_write_bw -D duration")
    p.add_argument("--rping-count", type=int, default=3, help="rping -C")
    p.add_argument("--index", type=int, default=None, help="default: $JOB_COMPLETION_INDEX (0 server, 1 client)")
    p.add_argument("--master-addr", default=os.environ.get("MASTER_ADDR"), help="index 0 on the primary network")
    p.add_argument("--port", type=int, default=int(os.environ.get("MASTER_PORT") or DEFAULT_EXCHANGE_PORT),
                   help="TCP port of the address exchange (default $MASTER_PORT)")
    p.add_argument("--connect-timeout", type=float, default=600.0,
                   help="seconds either side waits for the other (pods of a Job may start minutes apart)")
    p.add_argument("--tool-margin", type=float, default=30.0, help="seconds each tool may run past its own duration")
    p.add_argument("--preflight", action="store_true", help="check the configuration and exit (3 when unusable)")
    p.add_argument("--exit-code-file", help="write a failing exit code here (see launch.py)")
    args = p.parse_args(argv)
    if args.index is None and os.environ.get("JOB_COMPLETION_INDEX", "").isdigit():
        args.index = int(os.environ["JOB_COMPLETION_INDEX"])
    return args


def check_args(args: argparse.Namespace) -> str | None:
    if args.index not in (0, 1):
        return f"the index must be 0 (server) or 1 (client) (--index or JOB_COMPLETION_INDEX), got {args.index}"
    if args.link_gbps <= 0 or not 0 < args.min_fraction <= 1:
        return f"need --link-gbps > 0 and --min-fraction in (0, 1], got {args.link_gbps} and {args.min_fraction}"
    if args.gid_index < 0 or args.seconds < 1 or args.rping_count < 1:
        return "need --gid-index >= 0, --seconds >= 1 and --rping-count >= 1"
    if not 1 <= args.port <= 65535 or args.connect_timeout <= 0 or args.tool_margin <= 0:
        return "need a --port between 1 and 65535 and positive timeouts"
    if args.index == 1 and not args.master_addr:
        return "the client needs --master-addr or $MASTER_ADDR (index 0 on the primary network)"
    missing = [tool for tool in ("rping", "ib_write_bw") if shutil.which(tool) is None]
    if missing:
        return f"not on PATH: {', '.join(missing)} (rdma-core's rping and perftest in the image)"
    return None


def interface_problem(args: argparse.Namespace) -> str | None:
    """Checked by --preflight; in a run, the pod that has it also tells its peer, so both exit 3."""
    if interface_ipv4(args.interface) is None:
        return f"interface {args.interface} has no IPv4 address (is the secondary network attached?)"
    return None


@dataclass
class Tool:
    """One rping or ib_write_bw process: its command, output file and end state."""

    name: str
    command: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    rc: int | None = None
    timed_out: bool = False
    output: str = ""
    started: float = field(default_factory=time.monotonic)

    def start(self) -> Tool:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.started = time.monotonic()
        return self

    def finish(self, timeout: float) -> Tool:
        """Wait at most `timeout` seconds, killing the tool past it."""
        assert self.proc is not None
        try:
            self.rc = self.proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.proc.kill()
            self.rc = self.proc.wait(timeout=10)
        self.output = self.log.read_text(errors="replace")
        return self

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def status(self) -> str:
        state = "timed out" if self.timed_out else f"exit {self.rc}"
        tail = " | ".join(self.output.strip().splitlines()[-3:])
        return f"{self.name} {state}" + (f": {tail}" if tail and not self.ok else "")


def ib_write_bw_command(args: argparse.Namespace, server_ip: str | None) -> list[str]:
    command = ["ib_write_bw", "-d", args.hca, "-x", str(args.gid_index), "--report_gbits", "--report-both",
               "-F", "-R", "-D", str(args.seconds)]
    return command + ([server_ip] if server_ip else [])


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _receive(conn: socket.socket, timeout: float) -> dict:
    """One JSON line, within `timeout` seconds (ValueError/OSError otherwise)."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no message within {timeout:.0f} s")
        conn.settimeout(left)
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        data += chunk
        if len(data) > 1 << 20:
            raise ValueError("message too long")
    return json.loads(data.split(b"\n", 1)[0])


class _ConfigProblem(Exception):
    """A configuration error found during the run (either pod's interface): both pods exit 3."""


def listen(port: int) -> socket.socket:
    """All addresses, IPv6 and IPv4 where the pod network has both (MASTER_ADDR may be either)."""
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        except OSError:
            pass
    return socket.create_server(("", port))


def serve(args: argparse.Namespace, workdir: Path) -> tuple[Verdict, dict]:
    ip = interface_ipv4(args.interface)
    extra: dict = {"role": "server", "server_address": ip, "interface": args.interface}
    with listen(args.port) as listener:
        listener.settimeout(args.connect_timeout)
        tools: list[Tool] = []
        if ip is not None:
            tools = [
                Tool("rping", ["rping", "-s", "-a", ip, "-C", str(args.rping_count), "-v"], workdir / "rping-server.log").start(),
                Tool("ib_write_bw", ib_write_bw_command(args, None), workdir / "ib_write_bw-server.log").start(),
            ]
            time.sleep(0.5)  # a server that cannot start (no such device or GID) exits at once
        early = [t.finish(0) for t in tools if t.proc is not None and t.proc.poll() is not None]
        try:
            try:
                conn, peer = listener.accept()
            except TimeoutError:
                return verdict(None, link_gbps=args.link_gbps, min_fraction=args.min_fraction, rping_ok=False,
                               reasons=[f"no client within {args.connect_timeout:.0f} s on port {args.port}"]), extra
            with conn:
                extra["client"] = peer[0].removeprefix("::ffff:")
                if ip is None:
                    reason = f"server: {interface_problem(args)}"
                    _send(conn, {"error": reason})
                    raise _ConfigProblem(reason)
                if early:
                    reasons = [f"server {t.status()} before the client came" for t in early]
                    result = verdict(None, link_gbps=args.link_gbps, min_fraction=args.min_fraction,
                                     rping_ok=False, tools_ok=False, reasons=reasons)
                    _send(conn, {"verdict": asdict(result)})
                    return result, extra
                _send(conn, {"address": ip, "rping_port": RPING_PORT, "ib_write_bw_port": IB_WRITE_BW_PORT})
                budget = 2 * args.tool_margin + args.seconds + 10
                try:
                    report = _receive(conn, budget)
                except (OSError, ValueError) as exc:
                    report = {"bw_gbps": None, "rping_ok": False, "tools_ok": False,
                              "reasons": [f"no report from the client: {exc}"]}
                if "error" in report:
                    raise _ConfigProblem(str(report["error"]))
                for tool in tools:
                    tool.finish(tool.started + args.seconds + args.tool_margin - time.monotonic()
                                if report.get("tools_ok") else 5)
                reasons = list(report.get("reasons", [])) + [f"server {t.status()}" for t in tools if not t.ok]
                result = verdict(report.get("bw_gbps"), link_gbps=args.link_gbps, min_fraction=args.min_fraction,
                                 rping_ok=bool(report.get("rping_ok")) and tools[0].ok,
                                 tools_ok=bool(report.get("tools_ok")) and all(t.ok for t in tools), reasons=reasons)
                extra["server_bw_gbps"] = parse_bw_average(tools[1].output.splitlines())
                try:
                    _send(conn, {"verdict": asdict(result)})
                except OSError as exc:
                    print(f"# rdma_link: could not send the verdict to the client: {exc}", file=sys.stderr, flush=True)
                return result, extra
        finally:
            for tool in tools:
                if tool.rc is None:
                    tool.finish(0)


def connect(host: str, port: int, timeout: float) -> socket.socket:
    """Retry until index 0 listens (its pod may start later), for `timeout` seconds at most."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return socket.create_connection((host, port), timeout=min(5.0, max(0.1, deadline - time.monotonic())))
        except OSError as exc:
            last = exc
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    raise TimeoutError(f"cannot reach {host}:{port} within {timeout:.0f} s ({last})")


def run_client(args: argparse.Namespace, workdir: Path) -> tuple[Verdict, dict]:
    extra: dict = {"role": "client", "interface": args.interface, "client_address": interface_ipv4(args.interface)}

    def failed(reason: str) -> tuple[Verdict, dict]:
        return verdict(None, link_gbps=args.link_gbps, min_fraction=args.min_fraction, rping_ok=False,
                       tools_ok=False, reasons=[reason]), extra

    try:
        conn = connect(args.master_addr, args.port, args.connect_timeout)
    except TimeoutError as exc:
        return failed(str(exc))
    with conn:
        try:
            hello = _receive(conn, args.connect_timeout)
        except (OSError, ValueError) as exc:
            return failed(f"no address from the server: {exc}")
        if "error" in hello:
            raise _ConfigProblem(str(hello["error"]))
        if "verdict" in hello:
            return Verdict(**{**hello["verdict"], "reasons": tuple(hello["verdict"]["reasons"])}), extra
        problem = interface_problem(args)
        if problem is not None:
            _send(conn, {"error": f"client: {problem}"})
            raise _ConfigProblem(f"client: {problem}")
        server_ip = str(hello["address"])
        extra["server_address"] = server_ip
        rping = Tool("rping", ["rping", "-c", "-a", server_ip, "-C", str(args.rping_count), "-v"],
                     workdir / "rping-client.log").start().finish(args.tool_margin)
        pings = rping_pings(rping.output.splitlines())
        rping_ok = rping.ok and pings >= args.rping_count
        reasons = [] if rping_ok else [f"{rping.status()}, {pings}/{args.rping_count} pings"]
        bw = Tool("ib_write_bw", ib_write_bw_command(args, server_ip),
                  workdir / "ib_write_bw-client.log").start().finish(args.seconds + args.tool_margin)
        bw_gbps = parse_bw_average(bw.output.splitlines())
        if not bw.ok:
            reasons.append(bw.status())
        report = {"bw_gbps": bw_gbps, "rping_ok": rping_ok, "tools_ok": rping.ok and bw.ok, "reasons": reasons}
        try:
            _send(conn, report)
            answer = _receive(conn, 60)
            result = answer["verdict"]
            return Verdict(**{**result, "reasons": tuple(result["reasons"])}), extra
        except (OSError, ValueError, KeyError, TypeError) as exc:
            own = verdict(bw_gbps, link_gbps=args.link_gbps, min_fraction=args.min_fraction, rping_ok=rping_ok,
                          tools_ok=False, reasons=[*reasons, f"no verdict from the server: {exc}"])
            return own, extra


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="rdma-link-") as tmp:
        try:
            result, extra = (serve if args.index == 0 else run_client)(args, Path(tmp))
        except _ConfigProblem as exc:
            print(f"rdma_link: event=fatal exit={EXIT_CONFIG_ERROR} reason={json.dumps(str(exc))}", file=sys.stderr, flush=True)
            return EXIT_CONFIG_ERROR
    print(result.line(**extra), flush=True)
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    problem = check_args(args)
    if problem:
        print(f"rdma_link: event=fatal exit={EXIT_CONFIG_ERROR} reason={json.dumps(problem)}", file=sys.stderr, flush=True)
        record_exit_code(args.exit_code_file, EXIT_CONFIG_ERROR)
        return EXIT_CONFIG_ERROR
    if args.preflight:
        problem = interface_problem(args)
        if problem:
            print(f"rdma_link: event=fatal exit={EXIT_CONFIG_ERROR} reason={json.dumps(problem)}", file=sys.stderr, flush=True)
            record_exit_code(args.exit_code_file, EXIT_CONFIG_ERROR)
            return EXIT_CONFIG_ERROR
        print("rdma_link: preflight ok", flush=True)
        return 0
    code = run(args)
    record_exit_code(args.exit_code_file, code)
    return code


if __name__ == "__main__":
    sys.exit(main())
