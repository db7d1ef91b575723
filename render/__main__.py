"""`python -m render <stack> [--out DIR]`: the offline plan of a stack, with no Pulumi CLI,
no cloud and no cluster.

Writes:
  DIR/plan.json               one entry per resource: type, name, parent, dependencies, inputs
                              (every secret replaced by "[secret]")
  DIR/kubernetes/*.yaml       every Kubernetes object as it would be applied
  DIR/helm/<release>.yaml     every Helm release: chart, version, repository, values
  DIR/prometheus/rules.yaml   the alert rules of every PrometheusRule, as a plain rule file
  DIR/hosts/<host>/<step>.sh  the exact command each host receives (and <step>.delete.sh,
                              <step>.stdin when stdin is not secret)
  DIR/graph.dot               parent (dashed) and dependency (solid) edges
  DIR/summary.md              what the plan contains, in short
A bad stack config exits 2 with the config error; nothing is written.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

from components.config import ConfigError
from render import program

# Releases and kustomize directories are bundles expanded by the provider, not objects themselves.
NOT_OBJECTS = ("kubernetes:helm.sh/", "pulumi:providers:", "kubernetes:kustomize/")


def _urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1] if urn else ""


def kubernetes_objects(plan: program.Plan) -> list[dict[str, Any]]:
    objects = []
    for r in plan.resources:
        if not r.type.startswith("kubernetes:") or r.type.startswith(NOT_OBJECTS):
            continue
        obj = {k: v for k, v in r.inputs.items() if k not in ("name",)}
        obj.setdefault("metadata", {}).setdefault("name", r.name)
        objects.append(obj)
    return objects


def host_steps(plan: program.Plan) -> dict[str, dict[str, dict[str, Any]]]:
    """host name -> step name -> command inputs, for every remote command."""
    by_address: dict[str, str] = {}
    hosts_cfg = json.loads(program.stack_config(plan.stack)[0].get("gpu-cluster:hosts", "[]")) if plan.stack else []
    for h in hosts_cfg:
        by_address[str(h.get("address"))] = h.get("name")
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in plan.of_type("command:remote:Command"):
        address = (r.inputs.get("connection") or {}).get("host", "unknown")
        host = by_address.get(address, address)
        step = r.name[len(host) + 1:] if r.name.startswith(f"{host}-") else r.name
        out[host][step] = r.inputs
    return out


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _dot(plan: program.Plan) -> str:
    lines = ["digraph plan {", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
    for r in plan.resources:
        lines.append(f'  "{r.urn}" [label="{r.name}\\n{r.type}"];')
        if r.parent and not r.parent.endswith("pulumi:pulumi:Stack::" + _urn_name(r.parent)):
            lines.append(f'  "{r.parent}" -> "{r.urn}" [style=dashed, arrowhead=none];')
        for dep in r.dependencies:
            lines.append(f'  "{dep}" -> "{r.urn}";')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _summary(plan: program.Plan, steps: dict, objects: list, releases: list) -> str:
    counts = Counter(r.type for r in plan.resources)
    out = [f"# Plan of stack `{plan.stack}`", "", f"{len(plan.resources)} resources.", ""]
    out += ["| type | count |", "|---|---|"] + [f"| `{t}` | {n} |" for t, n in sorted(counts.items())]
    if steps:
        out += ["", "## Host steps", ""]
        for host in sorted(steps):
            out.append(f"- **{host}**: " + ", ".join(sorted(steps[host])))
    if releases:
        out += ["", "## Helm releases", ""]
        out += [f"- `{r.inputs.get('name')}`: chart `{r.inputs.get('chart')}` {r.inputs.get('version')} "
                f"in `{r.inputs.get('namespace')}`" for r in releases]
    if objects:
        out += ["", "## Kubernetes objects", ""]
        out += [f"- {o.get('kind')} `{o['metadata'].get('namespace', '-')}/{o['metadata']['name']}`" for o in objects]
    out += ["", "## Outputs", ""] + [f"- `{k}`: {json.dumps(v)}" for k, v in sorted(plan.outputs.items())]
    return "\n".join(out) + "\n"


def write(plan: program.Plan, out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    entries = [
        {
            "type": r.type,
            "name": r.name,
            "urn": r.urn,
            "parent": r.parent,
            "dependencies": r.dependencies,
            "inputs": r.inputs,
        }
        for r in plan.resources
    ]
    _write(out / "plan.json", json.dumps({"stack": plan.stack, "resources": entries,
                                         "outputs": plan.outputs}, indent=2, sort_keys=True))
    objects = kubernetes_objects(plan)
    for obj in objects:
        md = obj["metadata"]
        fname = f"{obj.get('kind', 'Object').lower()}-{md.get('namespace', 'cluster')}-{md['name']}.yaml"
        _write(out / "kubernetes" / fname, yaml.safe_dump(obj, sort_keys=False))
    releases = plan.of_type("kubernetes:helm.sh/v3:Release")
    for r in releases:
        _write(out / "helm" / f"{r.inputs.get('name', r.name)}.yaml", yaml.safe_dump(r.inputs, sort_keys=False))
    # Every PrometheusRule's groups as one plain Prometheus rule file (for `promtool check/test rules`).
    rule_groups = [g for o in objects if o.get("kind") == "PrometheusRule" for g in o.get("spec", {}).get("groups", [])]
    if rule_groups:
        _write(out / "prometheus" / "rules.yaml", yaml.safe_dump({"groups": rule_groups}, sort_keys=False))
    steps = host_steps(plan)
    for host, host_steps_ in steps.items():
        for step, inputs in host_steps_.items():
            base = out / "hosts" / host / step
            _write(base.with_suffix(".sh"), inputs.get("create", ""), 0o755)
            if inputs.get("delete"):
                _write(base.with_name(f"{step}.delete.sh"), inputs["delete"], 0o755)
            if inputs.get("stdin") and inputs["stdin"] != program.SECRET_MARKER:
                _write(base.with_name(f"{step}.stdin"), inputs["stdin"])
    _write(out / "graph.dot", _dot(plan))
    _write(out / "summary.md", _summary(plan, steps, objects, releases))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m render", description=__doc__.split("\n")[0])
    parser.add_argument("stack", help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--out", type=Path, help="output directory (default: out/<stack>)")
    args = parser.parse_args(argv)
    out = args.out or Path("out") / args.stack
    try:
        plan = program.run(args.stack)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write(plan, out)
    print(f"{len(plan.resources)} resources -> {out}/ (summary.md, plan.json, graph.dot)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
