"""ControlPlaneFiles: the Secrets encryption keys and, on every control plane, the files the API
server's hardening flags name (components/lab/hardening.py), written before kubeadm init or join.

  <name>-key-<key>    one 32-byte key per name in hardening.secretsEncryption.keys (pulumi_random
                      RandomBytes: its base64 output is a Pulumi secret in state)
  <name>-<host>       per control plane: the audit policy and the EncryptionConfiguration, root only
                      (scripts.control_plane_files). The EncryptionConfiguration holds the keys: it
                      travels on stdin as a Pulumi secret and the step's output is not logged.

A key rotation is a change of `keys` (docs/security/hardening.md): the step's stdin changes, the
step runs again and writes the new file; the API servers re-read it (automatic reload). Removing a
name deletes its key from the state for good: only once no Secret is encrypted with it (the update
preview, render/update_encryption.py, is loud otherwise). `writeUnencrypted` writes the same keys
after the identity provider: the step before encryption is turned off.

Does not manage: re-writing the Secrets after a rotation (`kubectl replace`, in the docs), or the
API server's flags on a cluster that was initialised before (kubeadm applies them at init and join).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_random as random
import yaml
from pulumi_command import remote

from components.lab import hardening, scripts, ssh
from config.hardening import Hardening
from config.lab import Bastion, Host


@dataclass(frozen=True)
class ControlPlaneFilesArgs:
    control_planes: tuple[Host, ...]
    settings: Hardening
    private_key: pulumi.Output[str]
    # Per control plane, what must be done there first (its NodePrep.done).
    prepared: dict[str, list[pulumi.Resource]]
    bastion: Bastion | None = None


def _yaml(doc: object) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


class ControlPlaneFiles(pulumi.ComponentResource):
    done: dict[str, list[pulumi.Resource]]  # per control plane: what kubeadm init or join waits for

    def __init__(self, name: str, args: ControlPlaneFilesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:ControlPlaneFiles", name, None, opts)
        settings = args.settings
        encryption = settings.secrets_encryption
        names = list(encryption.keys) if encryption.enabled else []
        keys = [random.RandomBytes(f"{name}-key-{key}", length=hardening.ENCRYPTION_KEY_BYTES,
                                   opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=["base64", "hex"]))
                for key in names]
        config: pulumi.Input[str] = ""
        if keys:
            plain_first = encryption.write_unencrypted
            config = pulumi.Output.secret(pulumi.Output.all(*[k.base64 for k in keys]).apply(
                lambda secrets: _yaml(hardening.encryption_config(list(zip(names, secrets, strict=True)), plain_first))))
        policy = _yaml(hardening.audit_policy()) if settings.audit_log.enabled else ""
        self.done = {}
        for host in args.control_planes:
            step = remote.Command(
                f"{name}-{host.name}",
                connection=ssh.connection(host, args.private_key, args.bastion),
                create=scripts.as_root(scripts.control_plane_files(policy)),
                delete=scripts.as_root(scripts.control_plane_files_delete()),
                stdin=config,
                logging=remote.Logging.NONE,
                # A host that changes address is a new host: its files go with the old one.
                triggers=[host.name, str(host.address)],
                opts=pulumi.ResourceOptions(parent=self, depends_on=args.prepared.get(host.name, []),
                                            additional_secret_outputs=["stdin", "stdout", "stderr"],
                                            delete_before_replace=True),
            )
            self.done[host.name] = [step]
        self.register_outputs({"controlPlanes": [h.name for h in args.control_planes], "encryptionKeys": names,
                               "auditLog": settings.audit_log.enabled})
