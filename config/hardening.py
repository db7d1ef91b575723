"""hardening (lab): the control plane's and the hosts' secure defaults, each one a key to turn off.

Every default is the secure choice; why each exists is one line in docs/security/hardening.md:
* auditLog: the API server writes an audit log (who did what, when) under an audit policy
  (components/lab/hardening.py), rotated by age, count and size.
* secretsEncryption: Secrets are encrypted in etcd (and so in every etcd snapshot) with a key that
  the program generates and keeps as a Pulumi secret. `keys` names the keys: the first encrypts,
  the others only decrypt, which is how a rotation goes (docs/security/hardening.md, step by step).
  `writeUnencrypted` puts the unencrypted provider first (the keys still decrypt): the step before
  `enabled: false` (Kubernetes' "Decrypt all data"). `rewrittenWith` records that every Secret was
  rewritten after a key (or `identity`) took over: the update preview (render/update_encryption.py)
  then lets older keys go quietly, and is loud without it.
* kubelet: the unauthenticated read-only port (10255) stays closed and anonymous requests to the
  kubelet's API are refused.
* verifyAptKeys: an apt repository's signing key is used only if its fingerprint is the one pinned
  in components/versions.py.

What these keys set reaches the API server through kubeadm's ClusterConfiguration, which kubeadm
applies at `kubeadm init` (and to every control plane that joins): on a cluster that already runs,
turning one on or off changes the files on the control planes but not the API server's flags
(docs/security/hardening.md says how to reconfigure one).
"""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from config.fields import DNS_LABEL, Model

# Two keys at once is what a rotation needs (the new one beside the old); a third is allowed so that
# a rotation can start before the previous one's old key is dropped.
MAX_ENCRYPTION_KEYS = 3
# The EncryptionConfiguration's unencrypted provider: what Secrets are written with under writeUnencrypted.
IDENTITY = "identity"


class AuditLog(Model):
    """The API server's audit log: kube-apiserver --audit-log-* flags."""

    enabled: bool = Field(default=True, description="Write the API server's audit log under the program's policy.")
    max_age_days: int = Field(default=30, ge=1, le=3650, description="Delete rotated audit logs older than this.")
    max_backups: int = Field(default=10, ge=1, le=1000, description="Keep at most this many rotated audit logs.")
    max_size_mb: int = Field(default=100, ge=1, le=100000,
                             description="Rotate the audit log when it reaches this size (megabytes).")


class SecretsEncryption(Model):
    """Secrets encrypted at rest in etcd (an EncryptionConfiguration, provider secretbox)."""

    enabled: bool = Field(default=True, description="Encrypt Secrets in etcd with the program's key.")
    keys: tuple[str, ...] = Field(
        default=("key-1",),
        description="Names of the encryption keys (each a 32-byte Pulumi secret the program generates): the first "
                    "encrypts, the others only decrypt. Rotate: add a new name second, up; move it first, up, "
                    "re-write every Secret; drop the old name and set rewrittenWith to the new, up.",
    )

    write_unencrypted: bool = Field(
        default=False,
        description="Write Secrets unencrypted (the identity provider first) while the keys still decrypt: the "
                    "step before enabled false. Then re-write every Secret, set rewrittenWith identity, and only "
                    "then turn encryption off.",
    )
    rewritten_with: str | None = Field(
        default=None,
        description="What every Secret was last re-written with (kubectl get secrets -A -o json | kubectl replace "
                    "-f -, run after it took over): the first key, or identity with writeUnencrypted. Changes no "
                    "resource: the update preview (--against) reads it to let the older keys go without a '!!'.",
    )

    @field_validator("keys")
    @classmethod
    def _keys(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not 1 <= len(v) <= MAX_ENCRYPTION_KEYS:
            raise ValueError(f"must name 1 to {MAX_ENCRYPTION_KEYS} keys (the first encrypts), got {len(v)}")
        for name in v:
            if not DNS_LABEL.fullmatch(name):
                raise ValueError(f"{name!r} is not a key name: a lowercase RFC 1123 label (a-z, 0-9, '-')")
            if name == IDENTITY:
                raise ValueError(f"{IDENTITY!r} names the unencrypted provider (rewrittenWith: {IDENTITY}): "
                                 "give the key another name")
        if len(set(v)) != len(v):
            raise ValueError(f"names a key twice: {list(v)}")
        return v

    @field_validator("write_unencrypted")
    @classmethod
    def _write_unencrypted(cls, v: bool, info: ValidationInfo) -> bool:
        if v and info.data.get("enabled") is False:
            raise ValueError("does nothing with enabled false (the program writes no EncryptionConfiguration "
                             "then): leave it out, or keep encryption on while Secrets are re-written")
        return v

    @field_validator("rewritten_with")
    @classmethod
    def _rewritten_with(cls, v: str | None, info: ValidationInfo) -> str | None:
        keys = info.data.get("keys")
        if v is None or keys is None:  # keys refused: that error is the one to read
            return v
        if v not in (*keys, IDENTITY):
            raise ValueError(f"{v!r} is neither one of keys {list(keys)} nor {IDENTITY!r}")
        writer = _writer(info.data.get("enabled", True), keys, info.data.get("write_unencrypted", False))
        if writer and v != writer:
            raise ValueError(f"{v!r} is not what Secrets are written with now ({writer!r}: the first key, or "
                             f"{IDENTITY!r} with writeUnencrypted): re-write every Secret after it took over, "
                             "then name it")
        return v

    @property
    def writer(self) -> str:
        """What new Secrets are written with: the first key, IDENTITY, or "" (off: the API
        server's flag is left as it was, docs/security/hardening.md)."""
        return _writer(self.enabled, self.keys, self.write_unencrypted)


def _writer(enabled: bool, keys: tuple[str, ...], write_unencrypted: bool) -> str:
    if not enabled:
        return ""
    return IDENTITY if write_unencrypted else keys[0]


class KubeletAccess(Model):
    """What the kubelet serves without credentials (KubeletConfiguration)."""

    read_only_port: bool = Field(
        default=False, description="Serve the kubelet's unauthenticated read-only port 10255 (off: readOnlyPort 0)."
    )
    anonymous_auth: bool = Field(
        default=False, description="Let anonymous requests reach the kubelet's API (off: only authenticated ones)."
    )


class Hardening(Model):
    """Secure defaults of the lab's control plane and hosts (docs/security/hardening.md)."""

    audit_log: AuditLog = Field(default_factory=AuditLog, description="The API server's audit log.")
    secrets_encryption: SecretsEncryption = Field(
        default_factory=SecretsEncryption, description="Secrets encrypted at rest in etcd."
    )
    kubelet: KubeletAccess = Field(default_factory=KubeletAccess,
                                   description="What the kubelet serves without credentials.")
    verify_apt_keys: bool = Field(
        default=True,
        description="Use an apt repository's signing key only if its fingerprint is the one pinned in "
                    "components/versions.py.",
    )
