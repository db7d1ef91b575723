"""The configuration reference, generated from the config models so that it cannot drift from them.

`python -m config.reference --write` writes docs/reference/config.md (every key of every platform's
stack type: its path as a stack file writes it, type, default, allowed values, platforms and the
description its Field carries) and the `description:` of every key in Pulumi.yaml (the model's
description, prefixed with the platforms of a key that not every platform has). `--check` exits 1
when either committed file differs from what the models generate; tests/config/test_reference.py
runs it. Pulumi.yaml is read by the stack files' reader (config/stack_file.py); what --write would
write is read back before a rename puts it in place, and a failure is a message and exit 2, with
nothing written.
"""

from __future__ import annotations

import argparse
import enum
import ipaddress
import json
import os
import sys
import tempfile
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

import config
from config import stack_file
from config.addons import Addons, Platform
from config.errors import DOC_PAGES
from config.walk import Key, model_of, walk

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = Path("docs/reference/config.md")
PROJECT = Path("Pulumi.yaml")
COMMAND = ".venv/bin/python -m config.reference --write"

# The secret keys: never part of a model (config/__init__.py), set with `pulumi config set --secret`.
SECRETS: dict[str, tuple[tuple[Platform, ...], str]] = {
    "sshPrivateKey": ((Platform.LAB,), "The SSH private key the program logs in to every host (and the bastion) with."),
    "kubeconfig": ((Platform.DEV,), "A kubeconfig of the existing cluster, instead of kubeContext (refused beside it)."),
    "wandbApiKey": (tuple(Platform), "The W&B API key of the launch agent (wandb.enabled); it becomes a Kubernetes "
                                     "Secret, never in values, outputs or the offline plan."),
    "etcdBackupS3AccessKeyId": ((Platform.LAB,), "The access key id for etcdBackup.s3 (docs/operations/etcd-backup.md)."),
    "etcdBackupS3SecretAccessKey": ((Platform.LAB,), "The secret access key for etcdBackup.s3."),
    "etcdBackupEncryptionKey": ((Platform.LAB,), "The passphrase every snapshot is encrypted with on the host before "
                                                 "it goes to etcdBackup.s3 (openssl enc, AES-256-CBC, PBKDF2); keep a "
                                                 "copy off the cluster."),
}


@dataclass(frozen=True)
class Row:
    """One key as the reference shows it; the same key of two platforms is one row when it reads the same."""

    key: str
    type: str
    default: str
    allowed: str
    description: str


def _platform_key(key: Key) -> Key:
    # Each stack type narrows `platform` to its own value; the key the user writes takes any.
    return Key(key.path, Addons.model_fields["platform"].annotation, Addons.model_fields["platform"])


def rows() -> dict[str, dict[Row, list[Platform]]]:
    """Every key's rows (each with the platforms it reads so for), by top-level key, in model order."""
    out: dict[str, dict[Row, list[Platform]]] = {}
    declared = _project_defaults()
    for platform, stack_type in config.STACK_TYPES.items():
        for key in walk(stack_type):
            if key.path == ("platform",):
                key = _platform_key(key)
            row = Row(_shown_path(key), _type_name(key.annotation), _default(key, declared), _allowed(key),
                      _cell(key.info.description or ""))
            out.setdefault(str(key.path[0]), {}).setdefault(row, []).append(platform)
    return out


def _shown_path(key: Key) -> str:
    """The key as error messages name it: `gpu-cluster:hosts[].name`, `gcp:project`."""
    text = "".join(f".{part}" if isinstance(part, str) else "[]" for part in key.path).lstrip(".")
    return text if ":" in text else f"{config.NAMESPACE}:{text}"


def _project_defaults() -> dict[str, Any]:
    decls = stack_file.read(ROOT / PROJECT)["config"]
    return {key: decl.get("default") for key, decl in decls.items() if isinstance(decl, dict)}


# --- cells --------------------------------------------------------------------------------------

def _without_none(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if type(None) in typing.get_args(annotation) and len(args) == 1:
        return args[0]
    return annotation


def _type_name(annotation: Any) -> str:
    ann = _without_none(annotation)
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is tuple:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}"
    if origin in (typing.Union, types.UnionType):  # e.g. a number or a map (queues.teams[].gpus)
        return " or ".join(_type_name(a) for a in args)
    if origin is typing.Literal or (isinstance(ann, type) and issubclass(ann, enum.Enum)):
        return "string"
    names = {bool: "boolean", int: "integer", float: "number", str: "string",
             ipaddress.IPv4Network: "IPv4 CIDR", ipaddress.IPv4Address: "IPv4 address"}
    if ann in names:
        return names[ann]
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "object"
    raise TypeError(f"config.reference has no name for the type {ann!r}: add it to _type_name")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return _value(value.value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    if value == "":
        return '""'
    return str(value)


def _default(key: Key, declared: dict[str, Any]) -> str:
    info = key.info
    if info.is_required():
        top = str(key.path[0]) if len(key.path) == 1 else None
        if top in declared:  # Pulumi.yaml gives it to every stack (platform: dev)
            return f"`{_value(declared[top])}` (Pulumi.yaml)"
        return "required"
    value = info.get_default(call_default_factory=True)
    if value == "" and info.validate_default:  # gcp:project: the empty default is refused
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "its keys' defaults"
    return f"`{_value(value)}`"


def _bounds(metadata: list[Any]) -> Iterator[str]:
    low = [(m.ge, "≥") for m in metadata if getattr(m, "ge", None) is not None]
    low += [(m.gt, ">") for m in metadata if getattr(m, "gt", None) is not None]
    high = [(m.le, "≤") for m in metadata if getattr(m, "le", None) is not None]
    high += [(m.lt, "<") for m in metadata if getattr(m, "lt", None) is not None]
    if low and high and low[0][1] == "≥" and high[0][1] == "≤":
        yield f"{low[0][0]}–{high[0][0]}"
        return
    for bound, sign in (*low, *high):
        yield f"{sign} {bound}"


def _allowed(key: Key) -> str:
    ann = _without_none(key.annotation)
    parts: list[str] = []
    if typing.get_origin(ann) is typing.Literal:
        parts += [f"`{_value(member)}`" for member in typing.get_args(ann)]
    elif isinstance(ann, type) and issubclass(ann, enum.Enum):
        parts += [f"`{_value(member)}`" for member in ann]
    parts += _bounds(key.info.metadata)
    for meta in key.info.metadata:
        if getattr(meta, "pattern", None) is not None:
            parts.append(f"matches `{meta.pattern}`")
        if getattr(meta, "max_length", None) is not None:
            parts.append(f"at most {meta.max_length} characters")
    return _cell(", ".join(parts))


def _cell(text: str) -> str:
    """Text in a Markdown table cell: one line, `|` escaped."""
    return " ".join(text.split()).replace("|", "\\|")


# --- the reference ------------------------------------------------------------------------------

_INTRO = f"""\
# Configuration reference

<!-- Generated from the config models (config/) by `{COMMAND}`; do not edit by hand. -->

Every key a stack file (`Pulumi.<stack>.yaml`) may set, generated from the config models in
`config/` (a test fails when this page differs from them). Keys are written as error messages name
them: `gpu-cluster:` is the project's namespace, a `.` goes one section down, `[]` is every element
of a list (`gpu-cluster:hosts[].name` is the `name` of each entry of `hosts`). In the stack file a
section is a YAML mapping under its top-level key:

```yaml
config:
  gpu-cluster:platform: lab
  gpu-cluster:gpu:
    sharing:
      mode: time-slicing
      replicas: 4
```

**Platforms** lists the stacks that accept a key; a key of another platform is ignored while it
holds its Pulumi.yaml default and refused once set. **Allowed** shows what the model itself
bounds (members, ranges); the checks among keys (ranges that must not overlap, jobs that must fit
the GPU nodes) are in the description and are reported, naming the key, before anything is created.
"""


# Paragraphs a key's table cannot hold, shown under it (what the key's checks refuse, and how to use it).
SECTION_NOTES: dict[str, str] = {
    "chartsDir": (
        "For clusters without internet access (docs/getting-started/index.md, *Air-gapped installs*). Set, every "
        "Helm release installs `<chartsDir>/<chart>-<version>` as a local chart with no repository: the "
        "folder name is the chart's name (an `oci://` reference's last path element, e.g. `kueue`, "
        "`whereabouts-chart`) and its pinned version from components/versions.py, e.g. `gpu-operator-v26.7.0`, "
        "`kube-prometheus-stack-88.5.3`. Only the charts the stack installs must be there. Refused, naming "
        "`gpu-cluster:chartsDir`, before anything is created: a relative path, a folder that does not exist, a "
        "chart the stack installs that is missing (the message gives the `helm pull` that fetches it), and a "
        "`Chart.yaml` whose `name` or `version` is not the pin (the message names the file and both versions). "
        "A chart copied from its git repository rather than pulled may carry a placeholder version (gpu-operator's "
        "`v1.0.0-devel`, Calico's `v0.0`): pull the published chart. The two upstream manifests the program "
        "applies from a URL come from the folder too, as `<name>-<version>/<path>`: with `network.roce`, Multus' "
        "DaemonSet `multus-<version>/multus-daemonset-thick.yml` (a yaml ConfigFile), with `training.launcher` "
        "`pytorchjob`, the training operator's repository at its tag as `training-operator-<version>/`, whose "
        "overlay `manifests/overlays/standalone` the kustomize Directory expands (versions from "
        "components/versions.py). Refused when the stack needs one and it is missing (the message gives the "
        "`curl` or `git clone` that fetches it), when the Multus file is not a Kubernetes manifest and when "
        "the overlay's folder has no kustomization file."
    ),
}


def _explained_in(top: str) -> list[str]:
    """The page a refusal of the section's keys links (config/errors.py DOC_PAGES), unless that is this page."""
    page = DOC_PAGES.get(top, str(REFERENCE))
    path, _, anchor = page.partition("#")
    if Path(path) == REFERENCE:
        return []
    link = os.path.relpath(path, REFERENCE.parent) + (f"#{anchor}" if anchor else "")
    return [f"Explained in [{page}]({link}); a refused key of this section links it.", ""]


def _section(top: str, keyed: dict[Row, list[Platform]]) -> list[str]:
    title = top if ":" in top else f"{config.NAMESPACE}:{top}"
    lines = [f"## {title}", "", *_explained_in(top), "| Key | Type | Default | Allowed | Platforms | Description |",
             "|---|---|---|---|---|---|"]
    order: dict[str, int] = {}
    for row in keyed:
        order.setdefault(row.key, len(order))
    for row, platforms in sorted(keyed.items(), key=lambda item: order[item[0].key]):
        names = ", ".join(p.value for p in platforms)
        lines.append(f"| `{row.key}` | {row.type} | {row.default} | {row.allowed} | {names} | {row.description} |")
    note = SECTION_NOTES.get(top)
    return [*lines, "", *([note, ""] if note else [])]


def reference() -> str:
    lines = [_INTRO]
    for top, keyed in rows().items():
        lines += _section(top, keyed)
    lines += ["## Secrets", "",
              "Set with `pulumi config set --secret gpu-cluster:<key> <value>`; never part of the models, and",
              "refused when set as plain text.", "",
              "| Key | Platforms | Description |", "|---|---|---|"]
    for key, (platforms, description) in SECRETS.items():
        lines.append(f"| `{config.NAMESPACE}:{key}` | {', '.join(p.value for p in platforms)} | {description} |")
    return "\n".join(lines) + "\n"


# --- Pulumi.yaml --------------------------------------------------------------------------------

def project_descriptions() -> dict[str, str]:
    """What Pulumi.yaml must say for each key it declares: the model's description, after the
    platforms of a key that not every platform has ("lab and dev: ...")."""
    described: dict[str, dict[str, list[Platform]]] = {}
    outlines: dict[str, dict[str, list[Platform]]] = {}
    for platform, stack_type in config.STACK_TYPES.items():
        for name, info in stack_type.model_fields.items():
            key = info.alias or name
            if key.startswith("gcp:"):
                continue
            described.setdefault(key, {}).setdefault(info.description or "", []).append(platform)
            sub, _, _ = model_of(info.annotation)
            if sub is not None:
                outlines.setdefault(key, {}).setdefault(_outline(sub), []).append(platform)
    out: dict[str, str] = {}
    for key, texts in described.items():
        if len(texts) != 1:
            raise ValueError(f"{key}: the platforms' models describe it differently: {sorted(texts)}")
        (text, platforms), = texts.items()
        prefix = "" if len(platforms) == len(Platform) else " and ".join(p.value for p in platforms) + ": "
        # "lab: the servers" (a word in capitals keeps them: "GPUs on each gpuNodes node")
        lowered = text[:1].lower() + text[1:] if prefix and text[1:2].islower() else text
        keys = outlines.get(key, {})
        if len(keys) == 1:
            lowered += f" Keys: {next(iter(keys))}."
        elif keys:  # storage: each platform has its own
            lowered += " Keys: " + "; ".join(f"{'/'.join(p.value for p in ps)}: {o}" for o, ps in keys.items()) + "."
        out[key] = prefix + lowered
    return out


def _outline(model: type[BaseModel]) -> str:
    """A section's keys, nested: "stack, sharing {mode, replicas}, gate {enabled}"."""
    parts = []
    for name, info in model.model_fields.items():
        sub, _, many = model_of(info.annotation)
        key = (info.alias or name) + ("[]" if many else "")
        parts.append(f"{key} {{{_outline(sub)}}}" if sub is not None else key)
    return ", ".join(parts)


def project_file(text: str, path: Path = PROJECT) -> str:
    """Pulumi.yaml's text with every config key's description set from the models: the lines of each
    `description:` (a value over several lines included) become one line of JSON text. Raises
    ValueError (a StackFileError for a Pulumi.yaml that is no plain YAML) rather than return a text
    that would not read back as the same Pulumi.yaml with only the descriptions changed."""
    wanted = project_descriptions()
    before, root = stack_file.parse(text, path)
    section = next((v for k, v in root.value if k.value == "config"), None) if root is not None else None
    lines, spans = text.split("\n"), []
    for key_node, decl in section.value if isinstance(section, yaml.MappingNode) else []:
        key = key_node.value
        if key not in wanted:
            raise ValueError(f"Pulumi.yaml declares {key}, which no platform's model has")
        found = [(k, v) for k, v in decl.value if k.value == "description"] if isinstance(decl, yaml.MappingNode) else []
        if not found:
            continue
        name, value = found[0]
        # A block scalar (`>`, `|`) ends at the start of the line after it.
        first, last = name.start_mark.line, value.end_mark.line - (value.end_mark.column == 0)
        rest = lines[last][value.end_mark.column:] if value.end_mark.column else ""
        if lines[first][:name.start_mark.column].strip() or rest.strip(" \r"):
            raise ValueError(f"{path}, line {first + 1}: {key}'s description shares its lines with other "
                             "keys; give it lines of its own (`    description: ...`)")
        spans.append((first, last, " " * name.start_mark.column, key))
    missing = sorted(set(wanted) - {key for *_, key in spans})
    if missing:
        raise ValueError(f"Pulumi.yaml has no description line for {', '.join(missing)}: declare each key "
                         "with a `description:`")
    for first, last, indent, key in sorted(spans, reverse=True):
        lines[first:last + 1] = [f"{indent}description: {json.dumps(wanted[key], ensure_ascii=False)}"]
    out = "\n".join(lines).rstrip("\n") + "\n"
    after, _ = stack_file.parse(out, path)
    for key, decl in before["config"].items():
        if isinstance(decl, dict) and "description" in decl:
            decl["description"] = wanted[key]
    if after != before:
        raise ValueError(f"{path} would read back differently with the new descriptions; it is left as it was")
    return out


# --- command line -------------------------------------------------------------------------------

def generated(root: Path = ROOT) -> dict[Path, str]:
    """Each generated file (relative to `root`) and what it must hold."""
    return {REFERENCE: reference(), PROJECT: project_file((root / PROJECT).read_text(), root / PROJECT)}


def _replace(target: Path, text: str) -> None:
    """Write `text` to `target` whole or not at all: a file beside it, then a rename over it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, target.stat().st_mode & 0o7777 if target.exists() else 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    """0 done (or, with --check, both files current); 1 with --check, a file differs; 2 it could not
    be done (a message, nothing written)."""
    parser = argparse.ArgumentParser(prog="python -m config.reference", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="write docs/reference/config.md and Pulumi.yaml")
    action.add_argument("--check", action="store_true", help="exit 1 when a committed file differs")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        files = generated(args.root)  # all of it before anything is written
        stale = []
        for path, text in files.items():
            target = args.root / path
            if args.write:
                _replace(target, text)
            elif args.check and (not target.exists() or target.read_text() != text):
                stale.append(str(path))
    except (ValueError, OSError, stack_file.StackFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not (args.write or args.check):
        sys.stdout.write(files[REFERENCE])
    if stale:
        print(f"{', '.join(stale)} differ from the config models: run `{COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
