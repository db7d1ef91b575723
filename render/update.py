"""What `pulumi up` would do to a stack deployed from an older config or plan, offline.

`python -m render <stack> --against OLD` (OLD: an older Pulumi.<stack>.yaml, rendered here with
today's program, or a plan.json an older `python -m render` wrote). Resources are matched by URN
(type, name and the parent chain); each pair is classified create, update, replace, delete or same
by the engine's rules (here) and the provider's (update_providers.py; the inputs and their diffs:
update_inputs.py), read from their sources:

  engine      pulumi/pulumi pkg/resource/deploy/step_generator.go (a snapshot after v3.259; the SDK
              pinned is 3.272.0): generateStepsFromDiff, diff, providerChanged, processIgnoreChanges,
              applyReplaceOnChanges, calculateDependentReplacements
  command     pulumi/pulumi-command v1.2.1: provider/pkg/provider/common/inputs.go (ResourceInputs),
              remote/commandController.go (Command.Update), and pulumi/pulumi-go-provider v1.3.0
              infer/resource.go (derivedResourceController.Diff, diff)
  kubernetes  pulumi/pulumi-kubernetes (snapshot after v4.32; 4.34.2 is pinned):
              provider/pkg/provider/provider.go (kubeProvider.Diff, DiffConfig), diff.go (forceNew),
              helm_release.go (helmReleaseProvider.Diff)
  random      hashicorp/terraform-provider-random v3.8.1 internal/provider/resource_password.go,
              resource_bytes.go

An input whose value comes from a resource created or replaced in the same update is unknown at
preview (step_generator.go: the new resource's outputs are computed), so it counts as changed;
that is how a rebuilt control plane reaches every node's join (its triggers hold the init's id).
Not modelled: live state and drift, provider defaults applied by Check, secrets (never decrypted,
so a changed secret shows as no change), aliases, and the replace rules of providers whose
schema is not available offline (gcp: shown as "update?", the provider decides).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from enum import StrEnum

from render import drain_guards, program
from render.update_inputs import (
    UNKNOWN,
    Change,
    Resource,
    _same,
    contains,
    format_path,  # noqa: F401 (update.format_path: the path helpers are part of this module's interface)
    ignore_changes,
    leaf_changes,
    parse_path,
)
from render.update_providers import COMMAND_TYPES, provider_rule

# What a remote command's delete script does to a node, recognised in the script's text.
NODE_EFFECTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("resets a node (kubeadm reset)", re.compile(r"\bkubeadm\s+reset\b")),
    ("drains a node (kubectl drain)", re.compile(r"\bkubectl\b[^\n]*\sdrain\s")),
    # the upgrade scripts' helper (scripts._UPGRADE_HELPERS): a call, not its definition `drain_node() {`
    ("drains a node (kubectl drain)", re.compile(r"^\s*drain_node\s", re.MULTILINE)),
    ("deletes a node (kubectl delete node)", re.compile(r"\bkubectl\b[^\n]*\sdelete\s+(?:node|nodes|no)\b")),
    ("removes kubelet or containerd from the host",
     # `apt-get purge kubelet`, the scripts' `apt_unpin_purge containerd.io`
     re.compile(r"(?:purge|remove)\b[^\n]*\b(?:kubelet|containerd(?:\.io)?)\b")),
)
# Steps that manage cluster membership, by name: used only when the delete script is secret.
MEMBERSHIP_SUFFIXES = ("-init", "-join", "-ready")


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    SAME = "same"


@dataclass
class Step:
    action: Action
    old: Resource | None
    new: Resource | None
    changes: list[Change] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    delete_first: bool = False  # replace: the old one is deleted before the new one is created
    modelled: bool = True  # False: the provider decides, its rules are not modelled here
    runs: str = ""  # commands: which scripts run
    loud: list[str] = field(default_factory=list)  # node resets, drains, deletes; protected resources

    @property
    def resource(self) -> Resource:
        r = self.new or self.old
        assert r is not None
        return r

    @property
    def label(self) -> str:
        if self.action is Action.UPDATE and not self.modelled:
            return "update?"
        if self.action is Action.REPLACE:
            return "replace (delete first)" if self.delete_first else "replace (create first)"
        return str(self.action)


@dataclass
class UpdatePlan:
    stack: str
    against: str
    steps: list[Step]
    notes: list[str] = field(default_factory=list)
    # What `pulumi up` refuses, key by key (render/update_risks.py refusals): exit 2.
    refused: list[str] = field(default_factory=list)
    # Whole-cluster changes (CNI, GPU stack, storage backend; update_risks.whole_cluster_changes).
    risks: list[str] = field(default_factory=list)

    def of(self, action: Action) -> list[Step]:
        return [s for s in self.steps if s.action is action]

    @property
    def loud(self) -> list[str]:
        return self.risks + [line for s in self.steps for line in s.loud]

    @property
    def destructive(self) -> bool:
        """A node would be drained, reset or deleted, a protected resource replaced or deleted, or
        the pod network, GPU stack or shared storage swapped."""
        return bool(self.loud)

    def summary_line(self) -> str:
        counts = {a: len(self.of(a)) for a in Action}
        unmodelled = sum(1 for s in self.of(Action.UPDATE) if not s.modelled)
        dbr = sum(1 for s in self.of(Action.REPLACE) if s.delete_first)
        parts = [
            f"{counts[Action.CREATE]} to create",
            f"{counts[Action.UPDATE]} to update" + (f" ({unmodelled} the provider decides)" if unmodelled else ""),
            f"{counts[Action.REPLACE]} to replace" + (f" ({dbr} delete first)" if dbr else ""),
            f"{counts[Action.DELETE]} to delete",
            f"{counts[Action.SAME]} unchanged",
        ]
        tail = f"; {len(self.loud)} loud" if self.loud else ""
        tail += f"; REFUSED by pulumi up ({len(self.refused)})" if self.refused else ""
        return f"update of {self.stack} from {self.against}: " + ", ".join(parts) + tail

    def text(self) -> str:
        out = [self.summary_line()]
        out += [f"REFUSED {line}" for line in self.refused]
        out += [f"!! {line}" for line in self.loud]
        for action in (Action.CREATE, Action.UPDATE, Action.REPLACE, Action.DELETE):
            steps = self.of(action)
            if not steps:
                continue
            out += ["", f"{action} ({len(steps)}):"]
            width = max(len(s.resource.name) for s in steps)
            for s in steps:
                out.append(f"  {s.resource.name:<{width}}  {s.label:<22}  {s.resource.type}")
                detail = _detail(s)
                if detail:
                    out.append(f"  {'':<{width}}  {detail}")
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out) + "\n"

    def markdown(self) -> str:
        out = [f"## Update from `{self.against}`", "", self.summary_line() + ".", ""]
        if self.refused:
            out += [f"- **REFUSED {line}**" for line in self.refused] + [""]
        if self.loud:
            out += [f"- **!! {line}**" for line in self.loud] + [""]
        for action in (Action.CREATE, Action.UPDATE, Action.REPLACE, Action.DELETE):
            steps = self.of(action)
            if not steps:
                continue
            out += [f"### {action} ({len(steps)})", "", "| resource | type | step | why |", "|---|---|---|---|"]
            for s in steps:
                why = _detail(s).replace("|", "\\|")
                out.append(f"| `{s.resource.name}` | `{s.resource.type}` | {s.label} | {why} |")
            out.append("")
        out += [f"Note: {n}" for n in self.notes]
        return "\n".join(out).rstrip() + "\n"


def _detail(step: Step) -> str:
    parts = []
    if step.runs:
        parts.append(step.runs)
    parts += step.reasons
    if step.action in (Action.UPDATE, Action.REPLACE):
        shown = [c for c in step.changes if c.replaces] if step.action is Action.REPLACE else step.changes
        if shown:
            paths = ", ".join(c.path + (" (unknown)" if c.unknown else "") for c in shown[:6])
            more = f" and {len(shown) - 6} more" if len(shown) > 6 else ""
            parts.append(f"changed: {paths}{more}")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------------
# the engine


def _classify(old: Resource, new: Resource, replaced: set[str], created: set[str],
              providers: dict[str, Resource], old_providers: dict[str, Resource]) -> Step:
    step = Step(Action.SAME, old, new)
    if not new.custom:
        # A component has no provider: nothing of it changes but its children. One expanded by a
        # provider (remote) has children the plan does not hold.
        if new.option("remote", False) and leaf_changes(old.inputs, new.inputs):
            step.action, step.modelled = Action.UPDATE, False
            step.reasons.append("expanded by its provider: the children it changes are not in the plan")
        return step
    forced = ""
    # providerChanged (step_generator.go diff): another provider instance diffs its config. A
    # plan.json from before options were recorded has no provider either: not compared.
    if old.options_recorded and old.provider_urn != new.provider_urn:
        if old.provider_urn in old_providers and new.provider_urn in providers:
            before, after = old_providers[old.provider_urn], providers[new.provider_urn]
            config = provider_rule(after.type)(before, after, after.inputs, leaf_changes(before.inputs, after.inputs), {})
            if any(c.replaces for c in config.changes) or not config.modelled:
                forced = f"its provider changed to {after.name} (DiffConfig replaces)"
        else:
            forced = "its provider changed (assumed DiffConfig replaces)"
    elif new.provider_urn and new.provider_urn in replaced:
        forced = f"its provider {new.provider_urn.rsplit('::', 1)[-1]} is replaced (a new cluster connection)"
    deleted_with = new.option("deletedWith", "")
    if deleted_with and deleted_with in replaced:
        forced = forced or "the resource it is deletedWith is replaced"
    if any(u in replaced for u in new.option("replaceWith", [])):
        forced = forced or "a resource in its replaceWith is replaced"
    if "replacementTrigger" in new.options or "replacementTrigger" in old.options:
        trigger_old, trigger_new = old.options.get("replacementTrigger"), new.options.get("replacementTrigger")
        if trigger_old is not None and trigger_new is not None and not _same(trigger_old, trigger_new):
            forced = forced or "its replacementTrigger changed"

    inputs = copy.deepcopy(new.inputs)
    from_new = {u for deps in new.property_dependencies.values() for u in deps if u in replaced | created}
    for prop, deps in new.property_dependencies.items():
        if prop in inputs and any(u in replaced | created for u in deps):
            inputs[prop] = UNKNOWN
    inputs = ignore_changes(old.inputs, inputs, new.option("ignoreChanges", []))
    leaves = leaf_changes(old.inputs, inputs)
    diff = provider_rule(new.type)(old, new, inputs, leaves, providers)
    # applyReplaceOnChanges: the replaceOnChanges option turns a change on those paths into a replace.
    patterns = [parse_path(p) for p in new.option("replaceOnChanges", [])]
    changes = [
        c if c.replaces or not any(contains(p, parse_path(c.path)) for p in patterns if c.path)
        else Change(c.path, c.kind, "replaceOnChanges option", c.unknown)
        for c in diff.changes
    ]
    step.changes, step.modelled = changes, diff.modelled
    if from_new and changes:
        names = sorted(u.rsplit("::", 1)[-1] for u in from_new)
        step.reasons.append("inputs from " + ", ".join(names) + " (created or replaced: unknown at preview)")
    if forced or any(c.replaces for c in changes):
        step.action = Action.REPLACE
        step.modelled = True
        step.reasons = ([forced] if forced else []) + step.reasons
        step.reasons += sorted({c.replaces for c in changes if c.replaces})
        # A forced replacement never reaches the provider's Diff, so only the option can ask for
        # delete-before-replace (step_generator.go diff returns early with ReplaceKeys only).
        option = new.options.get("deleteBeforeReplace")
        hint = diff.delete_before_replace and not forced
        step.delete_first = bool(option) if option is not None else hint
        if new.type in COMMAND_TYPES:
            order = "its old delete, then create" if step.delete_first else "create, then its old delete"
            step.runs = "runs " + order if old.inputs.get("delete") else "runs create (the old has no delete)"
    elif changes:
        step.action = Action.UPDATE
        step.runs = diff.runs
        step.reasons += diff.reasons
    return step


def _cascade(steps: dict[str, Step]) -> None:
    """calculateDependentReplacements (step_generator.go): replacing a resource delete-before-replace
    first deletes every dependent that is replaced because of it (its provider, or an input from
    it), in reverse dependency order."""
    roots = [s for s in steps.values() if s.action is Action.REPLACE and s.delete_first]
    taken_by: dict[str, set[str]] = {}
    for root in roots:
        taken = {root.resource.urn}
        changed = True
        while changed:
            changed = False
            for s in steps.values():
                r = s.new
                if r is None or s.action is not Action.REPLACE or r.urn in taken:
                    continue
                inputs_from = {p for p, deps in r.property_dependencies.items() if taken & set(deps)}
                if r.provider_urn in taken or any(c.replaces and _top(c.path) in inputs_from for c in s.changes):
                    taken.add(r.urn)
                    changed = True
        taken_by[root.resource.urn] = taken - {root.resource.urn}
    # Name only the outermost root: the one no other root's replacement takes down.
    outer = [r for r in roots if not any(r.resource.urn in t for t in taken_by.values())]
    for root in outer:
        for urn in sorted(taken_by[root.resource.urn]):
            s = steps[urn]
            s.reasons.append(f"deleted before {root.resource.name} is replaced (its delete-before-replace "
                             "takes its dependents down first)")
            if not s.delete_first:
                s.delete_first = True
                if s.resource.type in COMMAND_TYPES and s.old and s.old.inputs.get("delete"):
                    s.runs = "runs its old delete, then create"


def _top(path: str) -> str:
    """The input property a change path starts in."""
    return path.split(".", 1)[0].split("[", 1)[0]


def node_effects(command: Resource) -> list[str]:
    """What a command's delete script does to a node (drain, reset, delete, removing kubelet)."""
    script = command.inputs.get("delete")
    if script == program.SECRET_MARKER:
        if command.name.endswith(MEMBERSHIP_SUFFIXES):
            return ["may drain, reset or delete a node (its delete script is secret; the step's name says so)"]
        return []
    if not isinstance(script, str):
        return []
    return list(dict.fromkeys(label for label, pattern in NODE_EFFECTS if pattern.search(script)))


def update_effects(command: Resource) -> tuple[str, list[str]]:
    """(which script, what it can do to a node) for a command updated in place: pulumi-command runs
    its `update` script, else `create` again (Command.Update, pulumi-command remote/command.go)."""
    which = "update" if isinstance(command.inputs.get("update"), str) else "create"
    script = command.inputs.get(which)
    if not isinstance(script, str) or script == program.SECRET_MARKER:
        return which, []
    return which, list(dict.fromkeys(label for label, pattern in NODE_EFFECTS if pattern.search(script)))


def _loud(step: Step, deleted_or_replaced: set[str]) -> None:
    old = step.old
    if step.action is Action.UPDATE and step.new is not None and step.new.type in COMMAND_TYPES:
        which, effects = update_effects(step.new)
        if effects:
            host = (step.new.inputs.get("connection") or {}).get("host", "?")
            # What ran on the host before: the older update script, or its create (never updated).
            before = old.inputs.get(which) if old is not None else None
            if old is not None and which == "update" and not isinstance(before, str):
                before = old.inputs.get("create")
            verdict = drain_guards.rerun(before, step.new.inputs.get(which))
            if verdict is not None and not verdict.drains:
                step.reasons.append(verdict.drains_if)
                return
            detail = f": {verdict.drains}" if verdict is not None else ""
            step.loud.append(f"UPDATE {step.new.name}: runs its {which} script again on {host}, a script that "
                             f"{', '.join(effects)}{detail}")
        return
    if old is None or step.action not in (Action.REPLACE, Action.DELETE):
        return
    verb = "REPLACE" if step.action is Action.REPLACE else "DELETE"
    protected = old.option("protect", False) and (step.new is None or step.new.option("protect", False))
    if protected:
        step.loud.append(f"PROTECTED {old.name} ({old.type}) would be {step.action}d: pulumi up stops here "
                         "(remove `protect` first)")
    if old.type not in COMMAND_TYPES:
        return
    if old.option("retainOnDelete", False):
        step.reasons.append("retainOnDelete: its delete does not run")
        return
    deleted_with = old.option("deletedWith", "")
    if deleted_with and deleted_with in deleted_or_replaced:
        step.reasons.append("deletedWith a resource deleted too: its own delete does not run")
        return
    effects = node_effects(old)
    if effects:
        host = (old.inputs.get("connection") or {}).get("host", "?")
        when = ""
        if step.action is Action.REPLACE:
            when = ", before the new one is created" if step.delete_first else ", after the new one is created"
        step.loud.append(f"{verb} {old.name}: its delete {', '.join(effects)} on {host}{when}")


def compare(old: list[Resource], new: list[Resource], stack: str = "", against: str = "") -> UpdatePlan:
    """What an update from `old` to `new` does, resource by resource."""
    olds = {r.urn: r for r in old}
    news = {r.urn: r for r in new}
    providers = {r.urn: r for r in new if r.type.startswith("pulumi:providers:")}
    old_providers = {r.urn: r for r in old if r.type.startswith("pulumi:providers:")}
    created = set(news) - set(olds)
    replaced: set[str] = set()
    steps: dict[str, Step] = {}
    # Replacements reach dependents through unknown inputs; repeat until no new one appears.
    for _ in range(len(news) + 1):
        steps = {urn: _classify(olds[urn], r, replaced, created, providers, old_providers)
                 for urn, r in news.items() if urn in olds}
        now = {urn for urn, s in steps.items() if s.action is Action.REPLACE}
        if now == replaced:
            break
        replaced = now
    _cascade(steps)
    for urn in sorted(created):
        r = news[urn]
        steps[urn] = Step(Action.CREATE, None, r, runs="runs create" if r.type in COMMAND_TYPES else "")
    for urn in sorted(set(olds) - set(news)):
        r = olds[urn]
        runs = ""
        if r.type in COMMAND_TYPES:
            runs = "runs its delete" if r.inputs.get("delete") else "nothing runs (no delete command)"
        steps[urn] = Step(Action.DELETE, r, None, runs=runs)
    gone = {urn for urn, s in steps.items() if s.action in (Action.REPLACE, Action.DELETE)}
    ordered = [steps[urn] for urn in sorted(steps, key=lambda u: (steps[u].resource.name, u))]
    for s in ordered:
        _loud(s, gone)
    notes = []
    if any(not r.options_recorded for r in old):
        notes.append("the older plan records no resource options: protect and retainOnDelete of what it "
                     "deletes are taken as false")
    aliased = [news[u].name for u in sorted(created) if news[u].option("aliases", 0)]
    if aliased and set(olds) - set(news):
        notes.append(f"{', '.join(aliased)} declare aliases: if one names a deleted resource, Pulumi updates it "
                     "instead of a delete and a create (aliases are not modelled)")
    notes.append("secrets are never decrypted: a changed secret shows as no change")
    return UpdatePlan(stack=stack, against=against, steps=ordered, notes=notes)
