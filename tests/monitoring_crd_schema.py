"""Strict validation of custom resources against the CRDs in ../shared/upstream/crds/.

A CRD's openAPIV3Schema leaves `additionalProperties` open, so a typo'd field would pass plain
JSON-schema validation (and the API server would prune it silently). `strict()` closes every
object schema that lists its properties, except where the CRD says unknown fields are kept
(`x-kubernetes-preserve-unknown-fields`) or gives a map's value schema (`additionalProperties`).
`metadata` is checked by kubernetes-validate's ObjectMeta rules elsewhere; here only its presence.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import yaml


def is_custom_resource(obj: dict[str, Any]) -> bool:
    group = obj.get("apiVersion", "").rpartition("/")[0]
    return "." in group and not group.endswith(".k8s.io")


def strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
            # Go's RE2 accepts a flag group after '^'; Python wants global flags first.
            out["pattern"] = "(?i)^" + out["pattern"][len("^(?i)"):]
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@functools.cache
def _crd_schemas(crd_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict openAPIV3Schema, for every CRD file in `crd_dir`."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
                schema["properties"]["metadata"] = {"type": "object"}
                out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = strict(schema)
    return out


def validate_custom_resource(obj: dict[str, Any], upstream_dir: Path) -> None:
    """Raise jsonschema.ValidationError (or KeyError for an unknown kind) if `obj` is not valid."""
    schema = _crd_schemas(upstream_dir / "crds")[(obj["apiVersion"], obj["kind"])]
    jsonschema.validate(obj, schema, cls=jsonschema.Draft7Validator)
    assert obj["metadata"].get("name"), "metadata.name is required"
