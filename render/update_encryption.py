"""What an update does to the Secrets encryption keys (lab: gpu-cluster:hardening.secretsEncryption).

Kubernetes' EncryptionConfiguration (the docs' "Encrypting Confidential Data at Rest", sections
"Rotate a decryption key" and "Decrypt all data"): the first provider's first key encrypts every
write, every key of every provider is tried on a read, and a Secret stays written with whatever
was first when it was last written. A key the program drops is deleted from the stack's state
(components/lab/hardening_files.py), so what was written with it and not re-written is lost:

  a key added second                  quiet: nothing is written with it yet
  a key already there made first      note: re-write every Secret, then the older key may go
  a new key first at once             note: an API server that has not re-read the file cannot
                                      read what another wrote with it (about a minute)
  the key that writes dropped         !!: every Secret written since it took over
  an older key dropped                !! unless rewrittenWith names what the older side wrote with
  encryption off (enabled false)      !! unless the Secrets were re-written unencrypted first
                                      (writeUnencrypted, then rewrittenWith identity)
  a key replaced (new random bytes)   !!: a new key under the old name reads nothing written before

The key order comes from the config (an older stack file); an older plan.json holds the keys but
not which one writes, so what it drops is loud.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.hardening import IDENTITY
from render.update_risks import Side

KEY = "gpu-cluster:hardening.secretsEncryption"
_FILES = "gpucluster:lab:ControlPlaneFiles"
_RANDOM_BYTES = "random:index/randomBytes:RandomBytes"
REWRITE = "kubectl get secrets --all-namespaces -o json | kubectl replace -f -"
SAFE_ROTATION = (f"the safe rotation (docs/security/hardening.md): add the new key second ({KEY}.keys [old, new]), "
                 f"up; make it first ([new, old]), up; re-write every Secret ({REWRITE}); set {KEY}.rewrittenWith "
                 "to the new key and drop the old one, up")
SAFE_OFF = (f"the safe way (docs/security/hardening.md): {KEY}.writeUnencrypted true, up; re-write every Secret "
            f"({REWRITE}); {KEY}.rewrittenWith identity, up; then enabled false")


@dataclass(frozen=True)
class Keys:
    """One side's Secrets encryption: the key names it holds, what writes (a key, IDENTITY, ""
    when off, None when the side does not say), and what its config says was re-written."""

    names: tuple[str, ...]
    writer: str | None
    rewritten_with: str | None = None


def keys_of(side: Side) -> Keys | None:
    """The side's keys, from its config where it has one, else from its ControlPlaneFiles' keys;
    None when the side has no encryption settings (not lab)."""
    hardening = getattr(side.config, "hardening", None)
    if hardening is not None:
        s = hardening.secrets_encryption
        return Keys(s.keys if s.enabled else (), s.writer, s.rewritten_with)
    files = [r for r in side.resources if r.type == _FILES]
    if not files:
        return None
    names = tuple(r.name.removeprefix(f"{files[0].name}-key-") for r in side.resources
                  if r.type == _RANDOM_BYTES and r.parent == files[0].urn)
    return Keys(names, None if names else "")


def _dropped(name: str, before: Keys, after: Keys) -> tuple[str, str]:
    """("!!" or "note", the line) for a key the newer side no longer holds."""
    if before.writer is None:
        return "!!", (f"Secrets encryption key {name} dropped ({KEY}.keys): every Secret still written with it "
                      "becomes unreadable, and the older plan.json does not say which key writes (compare with the "
                      f"older stack file); {SAFE_ROTATION}")
    if name == before.writer:
        return "!!", (f"Secrets encryption key {name} dropped ({KEY}.keys) while it is the key Secrets are written "
                      f"with: every Secret written since it took over becomes unreadable; {SAFE_ROTATION}")
    if after.rewritten_with is not None and after.rewritten_with == before.writer:
        return "note", (f"Secrets encryption key {name} dropped: every Secret was re-written with {before.writer} "
                        f"after it took over ({KEY}.rewrittenWith)")
    return "!!", (f"Secrets encryption key {name} dropped ({KEY}.keys): every Secret not re-written since "
                  f"{before.writer} took over becomes unreadable, and this preview cannot see etcd. Re-write every "
                  f"Secret ({REWRITE}), then say so with {KEY}.rewrittenWith {before.writer}")


def _off(before: Keys, after: Keys) -> tuple[str, str]:
    if before.writer == IDENTITY and after.rewritten_with == IDENTITY:
        return "note", (f"Secrets encryption turned off ({KEY}.enabled) after every Secret was re-written "
                        f"unencrypted ({KEY}.rewrittenWith identity): keys {', '.join(before.names)} go; the API "
                        "server's flag stays until removed by hand (docs/security/hardening.md)")
    return "!!", (f"Secrets encryption turned off ({KEY}.enabled false) with keys {', '.join(before.names)}: they are "
                  "deleted from the stack's state; the file on the control planes keeps them only until it is "
                  "rewritten (a control plane added or rebuilt gets none, turning encryption on again makes new keys "
                  f"under the same names), and every Secret written encrypted is unreadable from then on; {SAFE_OFF}")


def _new_writer(before: Keys, after: Keys, control_planes: int) -> str:
    """The note for a change of what writes ('' for none)."""
    writer = after.writer
    if not writer or before.writer is None or writer == before.writer or not before.writer:
        return ""
    if writer == IDENTITY:
        return (f"Secrets are written unencrypted from now on ({KEY}.writeUnencrypted): re-write every Secret "
                f"({REWRITE}), then set {KEY}.rewrittenWith identity before turning encryption off")
    if writer in before.names:
        return (f"Secrets encryption key {writer} writes from now on (first in {KEY}.keys): re-write every Secret "
                f"({REWRITE}), then set {KEY}.rewrittenWith {writer} and drop the older keys")
    if control_planes > 1:
        return (f"Secrets encryption key {writer} is new and writes at once: until all {control_planes} API servers "
                "re-read the file (about a minute), one that has not cannot read a Secret another wrote with it; "
                "adding it second first avoids that")
    return ""


def _remade(steps: list[Any], after: Keys) -> list[tuple[str, str]]:
    """A key whose RandomBytes is replaced, or deleted while the newer side keeps its name (its
    resource name or parent changed): new bytes under the old name."""
    lines = []
    for step in steps:
        r, action = step.old, str(step.action)
        if r is None or action not in ("replace", "delete") or r.type != _RANDOM_BYTES:
            continue
        parent_type, parent_name = r.parent.rsplit("::", 1) if "::" in r.parent else ("", "")
        name = r.name.removeprefix(f"{parent_name}-key-")
        if not parent_type.endswith(_FILES) or (action == "delete" and name not in after.names):
            continue
        how = "replaced" if action == "replace" else "deleted and made anew under another resource name"
        lines.append(("!!", f"Secrets encryption key {name} is {how} ({r.name}): new random bytes under the old "
                            f"name read nothing written with the old ones; {SAFE_ROTATION}"))
    return lines


def changes(older: Side, newer: Side, steps: list[Any], control_planes: int) -> tuple[list[str], list[str]]:
    """(the `!!` lines, the notes) of an update's changes to the encryption keys. `steps`: the
    update's (update.Step), `control_planes`: how many the newer side has."""
    before, after = keys_of(older), keys_of(newer)
    if before is None or after is None:
        return [], []
    lines: list[tuple[str, str]] = []
    dropped = [n for n in before.names if n not in after.names]
    if dropped and not after.names:
        lines.append(_off(before, after))
    else:
        lines += [_dropped(name, before, after) for name in dropped]
    lines += _remade(steps, after)
    note = _new_writer(before, after, control_planes)
    if note:
        lines.append(("note", note))
    if after.writer and after.rewritten_with and before.writer and after.rewritten_with != before.writer:
        lines.append(("note", f"{KEY}.rewrittenWith {after.rewritten_with} is set in the update that makes it "
                              "write, so no Secret can be re-written with it yet: the next preview trusts it, so "
                              f"re-write every Secret ({REWRITE}) before the next update"))
    return [text for kind, text in lines if kind == "!!"], [text for kind, text in lines if kind == "note"]
