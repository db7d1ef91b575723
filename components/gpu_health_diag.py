"""Records a DCGM diagnostic's verdict on its node: the second container of the diagnostic pod
(components/gpu_health.py), run as `python record.py` from a ConfigMap in the workload image.
Python's standard library only: the workload image need not carry a Kubernetes client.

The first container (NVIDIA's DCGM image) ran `dcgmi diag -r <level> -j` and left in the shared
directory: `rc` (dcgmi's exit status, or `hostengine` when nv-hostengine did not start) and
`diag.json` (its report). The verdict:

* pass: dcgmi exited 0;
* fail: dcgmi exited non-zero and its report holds a test whose status is Fail;
* neither (the tool did not run, or failed without a failing test): nothing is written and this
  container exits 2, so the Job shows the error; a broken tool never takes a node out of service.

Written with a JSON merge patch of the node's annotations (ANNOTATION_PREFIX + `level<N>`, and its
`-time` and `-expires`, RFC 3339 UTC). A level-2 run also writes the level-1 keys: level 2 runs
every level-1 test. The pod's ServiceAccount may get and patch the GPU nodes named in its
ClusterRole, nothing else.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import ssl
import sys
import urllib.request
from pathlib import Path
from typing import Any

ANNOTATION_PREFIX = "gpu-cluster.io/diag-"
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def has_failed_test(report: Any) -> bool:
    """Whether a `dcgmi diag -j` report holds a test result with status Fail (any nesting)."""
    if isinstance(report, dict):
        status = report.get("status")
        if isinstance(status, str) and status.strip().lower() == "fail":
            return True
        return any(has_failed_test(v) for v in report.values())
    if isinstance(report, list):
        return any(has_failed_test(v) for v in report)
    return False


def verdict(results: Path) -> str | None:
    """pass, fail, or None when the diagnostic gave no verdict."""
    rc = (results / "rc").read_text().strip() if (results / "rc").is_file() else ""
    if rc == "0":
        return "pass"
    if not rc.isdigit():
        return None
    try:
        report = json.loads((results / "diag.json").read_text())
    except (OSError, ValueError):
        return None
    return "fail" if has_failed_test(report) else None


def node_annotations(level: int, result: str, now: datetime.datetime, valid_hours: int) -> dict[str, str]:
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    expires = (now + datetime.timedelta(hours=valid_hours)).astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out: dict[str, str] = {}
    for lvl in range(1, level + 1):
        key = f"{ANNOTATION_PREFIX}level{lvl}"
        out.update({key: result, f"{key}-time": stamp, f"{key}-expires": expires})
    return out


def patch_node(api: str, node: str, body: dict[str, Any], token: str, ca_file: str | None) -> int:
    request = urllib.request.Request(
        f"{api}/api/v1/nodes/{node}", data=json.dumps(body).encode(), method="PATCH",
        headers={"Content-Type": "application/merge-patch+json", "Authorization": f"Bearer {token}"},
    )
    context = ssl.create_default_context(cafile=ca_file) if api.startswith("https:") else None
    with urllib.request.urlopen(request, timeout=30, context=context) as response:  # noqa: S310 (the API server)
        return int(response.status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--level", type=int, choices=(1, 2), required=True)
    parser.add_argument("--valid-hours", type=int, required=True)
    parser.add_argument("--node", default=os.environ.get("NODE_NAME", ""))
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    parser.add_argument("--api", default=f"https://{host}:{port}" if host else "")
    parser.add_argument("--token-file", type=Path, default=SA_DIR / "token")
    parser.add_argument("--ca-file", default=str(SA_DIR / "ca.crt"))
    args = parser.parse_args(argv)
    if not args.node or not args.api:
        print("record: no node name (NODE_NAME) or API server address", file=sys.stderr)
        return 2
    result = verdict(args.results)
    if result is None:
        print(f"record: the level-{args.level} diagnostic gave no verdict on {args.node}; node left as it is",
              file=sys.stderr)
        for name in ("rc", "diag.json", "diag.err"):
            if (args.results / name).is_file():
                print(f"--- {name}\n{(args.results / name).read_text()[-4000:]}", file=sys.stderr)
        return 2
    marks = node_annotations(args.level, result, datetime.datetime.now(datetime.UTC), args.valid_hours)
    status = patch_node(args.api, args.node, {"metadata": {"annotations": marks}},
                        args.token_file.read_text().strip(), args.ca_file)
    print(f"record: {args.node} level {args.level}: {result} (HTTP {status}): {json.dumps(marks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
