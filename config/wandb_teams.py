"""wandb.teamQueues against queues.teams: which teams get a W&B queue, and with it the cluster's W&B
API key in their namespace (components/training/wandb_launch.py says why every member of such a team
can read the key). Opt-in per team: off by default, so no team holds the key unless named."""

from __future__ import annotations

from config.errors import Problems
from config.queues import QueuesConfig
from config.wandb import WandbConfig

KEY = "wandb.teamQueues"


def wandb_team_problems(w: WandbConfig, q: QueuesConfig) -> Problems:
    if not w.team_queues:
        return []
    if not w.enabled:
        return [(KEY, "does nothing without wandb.enabled (no agent polls a queue); leave it unset")]
    if not q.enabled:
        return [(KEY, "names teams of queues.teams, which needs queues.enabled; leave it unset or enable queues")]
    teams = [t.name for t in q.teams]
    problems: Problems = []
    for name in w.team_queues:
        if name not in teams:
            problems.append((KEY, f"{name!r} is not a team; allowed: the names of queues.teams ({', '.join(teams) or 'none'})"))
    if len(set(w.team_queues)) != len(w.team_queues):
        problems.append((KEY, "names a team twice"))
    return problems
