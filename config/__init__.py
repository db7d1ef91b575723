"""The config of gpu-cluster: every key, its type, default and meaning, by platform.

Stack files (Pulumi.<stack>.yaml) are parsed once, here, into the validated type of the stack's
`platform`: lab.LabStack, dev.DevStack or gke.GkeStack. Each holds the shared keys (addons.Addons:
kubernetesVersion, gpu, monitoring, training, acceptance, network, wandb, gpuHealth) and only its
own platform's; components receive that model (or a piece of it), never raw `pulumi.Config`. A user error is a
`ConfigError` naming every bad key as `gpu-cluster:<path>` (gcp: keys as they are) and what is
allowed; it is raised before any resource is registered.

Pulumi hands every stack the defaults Pulumi.yaml declares, for every key: a gke stack receives
`hosts: []` and `storage: {size: 100Gi}`. A key of another platform is therefore ignored while it
holds its declared default (or is empty), and refused, naming the platform it belongs to, once set.

Secret values (the SSH private key, a dev kubeconfig, the W&B API key) are never part of the model: they stay
`pulumi.Output` secrets in `StackSecrets`, and the model only records that they were given.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pulumi
from pydantic import TypeAdapter, ValidationError

from config.addons import Addons, Platform
from config.dev import DevStack
from config.errors import NAMESPACE, ConfigError, Problems, describe, key_path
from config.etcd_backup_s3 import SECRETS as ETCD_BACKUP_SECRETS
from config.gke import GkeStack
from config.lab import LabStack
from config.wandb import API_KEY as WANDB_API_KEY

__all__ = [
    "NAMESPACE", "SECRET_KEYS", "ConfigError", "DevStack", "GkeStack", "LabStack", "Platform", "StackConfig",
    "StackSecrets", "load", "parse",
]

StackConfig: TypeAlias = LabStack | DevStack | GkeStack

STACK_TYPES: dict[Platform, type[LabStack] | type[DevStack] | type[GkeStack]] = {
    Platform.LAB: LabStack,
    Platform.DEV: DevStack,
    Platform.GKE: GkeStack,
}
_STACK_KEYS = {platform: stack_type.keys() for platform, stack_type in STACK_TYPES.items()}

# Top-level keys holding secrets: read with get_secret, never parsed into the model. Most belong
# to one platform; the W&B API key (wandb.enabled) to every one.
SECRET_KEYS = ("sshPrivateKey", "kubeconfig", WANDB_API_KEY, *ETCD_BACKUP_SECRETS)
_SECRET_PLATFORM = {"sshPrivateKey": Platform.LAB, "kubeconfig": Platform.DEV,
                    **dict.fromkeys(ETCD_BACKUP_SECRETS, Platform.LAB)}

# The Google Cloud provider's keys gke reads (gke.GkeStack.project, .region); other platforms
# leave the gcp: namespace alone.
GCP_KEYS = tuple(sorted(key for key in GkeStack.keys() if key.startswith("gcp:")))


@dataclass(frozen=True)
class StackSecrets:
    """Secret config values, kept as Pulumi secrets; None when not set."""

    ssh_private_key: pulumi.Output[str] | None = None
    kubeconfig: pulumi.Output[str] | None = None
    wandb_api_key: pulumi.Output[str] | None = None
    # etcdBackup.s3 (lab): by key name (config/etcd_backup_s3.py SECRETS)
    etcd_backup: dict[str, pulumi.Output[str]] = field(default_factory=dict)


def parse(raw: Mapping[str, Any], secret_keys: Iterable[str] = frozenset()) -> StackConfig:
    """Validate raw config: keys without the namespace (gcp: keys with theirs), objects decoded.

    `secret_keys` names the secret keys that are set; their values never reach this function.
    """
    problems: Problems = [
        (key, "must be set as a secret (`pulumi config set --secret ...`)") for key in SECRET_KEYS if key in raw
    ]
    # Given as plaintext is reported above; the checks that need the key count it as given.
    secrets = frozenset(secret_keys) | {key for key in SECRET_KEYS if key in raw}
    stack_type = _stack_type(raw, problems)
    if stack_type is None:
        raise ConfigError(problems)
    own, foreign = _set_aside_foreign_keys(stack_type, raw, secrets)
    problems += foreign
    try:
        cfg = stack_type.model_validate(own)
    except ValidationError as exc:
        # A default that fails validation (gcp:project unset) is located by its field name.
        aliases = {name: f.alias or name for name, f in stack_type.model_fields.items()}
        for err in exc.errors():
            loc = (aliases.get(str(err["loc"][0]), err["loc"][0]), *err["loc"][1:]) if err["loc"] else ()
            problems.append((key_path(loc), describe(err)))
        raise ConfigError(problems) from None
    problems += cfg.problems(secrets)
    if problems:
        raise ConfigError(problems)
    return cfg


def _stack_type(
    raw: Mapping[str, Any], problems: Problems
) -> type[LabStack] | type[DevStack] | type[GkeStack] | None:
    """The model of the stack's platform; None (and the problem added) when platform is missing or unknown."""
    if "platform" not in raw:
        problems.append(("platform", "is required"))
        return None
    try:
        return STACK_TYPES[Platform(raw["platform"])]
    except ValueError:
        names = [f"'{p.value}'" for p in Platform]
        allowed = f"{', '.join(names[:-1])} or {names[-1]}"
        problems.append(("platform", f"must be one of {allowed} (got {raw['platform']!r})"))
        return None


def _set_aside_foreign_keys(
    stack_type: type[Addons], raw: Mapping[str, Any], secrets: frozenset[str]
) -> tuple[dict[str, Any], Problems]:
    """(the keys `stack_type` validates, the keys of other platforms that are set)."""
    platform = Platform(stack_type.model_fields["platform"].default)
    own_keys = _STACK_KEYS[platform]
    own: dict[str, Any] = {}
    problems: Problems = []
    for key, value in raw.items():
        if key in SECRET_KEYS or (key.startswith("gcp:") and key not in own_keys):
            continue
        owners = [p for p, keys in _STACK_KEYS.items() if p is not platform and key in keys]
        if key in own_keys or not owners:
            own[key] = value  # an unknown key too: the model names it
        elif not any(_holds_default(STACK_TYPES[p], key, value) for p in owners):
            problems.append((key, _foreign(stack_type, key, owners)))
    for key in sorted(secrets):
        owner = _SECRET_PLATFORM.get(key)
        if owner is not None and owner is not platform:
            problems.append((key, _foreign(stack_type, key, [owner])))
    return own, problems


def _foreign(stack_type: type[Addons], key: str, owners: list[Platform]) -> str:
    platform = stack_type.model_fields["platform"].default
    hint = stack_type.FOREIGN_HINTS.get(key)
    return (f"is a {'/'.join(p.value for p in owners)} key; this stack's platform is {platform}"
            + (f" ({hint})" if hint else ""))


def _holds_default(stack_type: type[Addons], key: str, value: Any) -> bool:
    """Whether `value` of `stack_type`'s `key` is what Pulumi.yaml declares for it (or empty)."""
    if value in (None, "", [], {}):
        return True
    name = next(name for name, f in stack_type.model_fields.items() if (f.alias or name) == key)
    try:
        parsed = _adapter(stack_type, name).validate_python(value)
    except ValidationError:
        return False
    return bool(parsed == stack_type.model_fields[name].get_default(call_default_factory=True))


@functools.cache
def _adapter(stack_type: type[Addons], name: str) -> TypeAdapter[Any]:
    return TypeAdapter(stack_type.model_fields[name].annotation)


# Keys whose values are structured: Pulumi hands them over as JSON text. Every other value is
# a string (pydantic reads "22" or "true" as the declared int or bool), so a version such as
# "1.34" never turns into a float.
_STRUCTURED_KEYS = ("hosts", "nvidiaDriver", "bastion", "kubeVip", "gpuNodes", "gpuNodeGpus", "gpu", "training", "acceptance",
                    "network", "storage", "monitoring", "gke", "wandb", "gpuHealth", "hardening",
                    "etcdBackup", "queues")


def _decode(key: str, value: Any) -> Any:
    if key not in _STRUCTURED_KEYS or not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def load(config: pulumi.Config | None = None) -> tuple[StackConfig, StackSecrets]:
    """Read the `gpu-cluster:` namespace (and gcp:project, gcp:region) of the running stack,
    validate it, return model + secrets."""
    from pulumi.runtime import config as runtime_config

    config = config or pulumi.Config(NAMESPACE)
    prefix = f"{NAMESPACE}:"
    # The engine hands config over either through set_all_config (language host, mocks) or the
    # PULUMI_CONFIG environment variable (older hosts); read both.
    everything = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secret_names = set(runtime_config.get_config_secret_keys_env())
    raw: dict[str, Any] = {key: everything[key] for key in GCP_KEYS if key in everything}
    secret_keys: set[str] = set()
    for full_key, value in everything.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix):]
        if key in SECRET_KEYS:
            if runtime_config.is_config_secret(full_key) or full_key in secret_names:
                secret_keys.add(key)
            else:
                raw[key] = "<plaintext>"  # reported by parse(); the value itself is never echoed
            continue
        raw[key] = _decode(key, value)
    cfg = parse(raw, secret_keys)
    secrets = StackSecrets(
        ssh_private_key=config.get_secret("sshPrivateKey") if "sshPrivateKey" in secret_keys else None,
        kubeconfig=config.get_secret("kubeconfig") if "kubeconfig" in secret_keys else None,
        wandb_api_key=config.get_secret(WANDB_API_KEY) if WANDB_API_KEY in secret_keys else None,
        etcd_backup={key: value for key in ETCD_BACKUP_SECRETS if key in secret_keys
                     and (value := config.get_secret(key)) is not None},
    )
    return cfg, secrets
