"""summary.md's "Team quotas" (render/quota_table.py) on lab-ha, whose two teams share the GPUs through
Kueue: one row per queue, flavor and resource, holding what the stack file gives each team (its
namespace, GPUs, borrowing limit, CPU and memory), and "at most" as Kueue's ClusterQueue docs define
borrowing: a queue may use its nominal quota plus, up to its borrowing limit, what the other queues
of its cohort lend (all their unused nominal quota, with no lendingLimit). lab, without queues, has
no such section.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from render import __main__ as render_main
from render import program

GPU = "nvidia.com/gpu"
COLUMNS = ["queue", "namespace", "cohort", "flavor", "resource", "nominal", "borrowing limit", "lending limit",
           "at most"]


def _section(summary: str, heading: str) -> str | None:
    if f"\n## {heading}\n" not in summary:
        return None
    return summary.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def lab_ha(tmp_path_factory: pytest.TempPathFactory) -> tuple[program.Plan, list[dict[str, str]]]:
    """The plan and the rows of its summary's quota table, each {column: cell without backticks}."""
    plan = program.run("lab-ha")
    out = tmp_path_factory.mktemp("lab-ha")
    render_main.write(plan, out)
    section = _section((out / "summary.md").read_text(), "Team quotas")
    assert section is not None, "lab-ha runs queues: summary.md needs its quota table"
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert [c.strip() for c in lines[0].strip("|").split("|")] == COLUMNS
    rows = [dict(zip(COLUMNS, (c.strip().strip("`") for c in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]
    return plan, rows


def test_every_team_has_its_quota_as_the_stack_file_gives_it(lab_ha: tuple[program.Plan, list[dict[str, str]]]) -> None:
    plan, rows = lab_ha
    teams = plan.config.queues.teams
    assert len(teams) == 2
    for team in teams:
        mine = {r["resource"]: r for r in rows if r["queue"] == team.name}
        assert set(mine) == {GPU, "cpu", "memory"}, mine
        assert {r["namespace"] for r in mine.values()} == {team.namespace}
        assert {r["cohort"] for r in mine.values()} == {plan.config.queues.cohort}
        assert mine[GPU]["nominal"] == str(team.gpus)
        assert mine[GPU]["borrowing limit"] == str(team.borrowing_limit_gpus)
        assert mine["cpu"]["nominal"] == team.cpu and mine["memory"]["nominal"] == team.memory


def test_at_most_is_nominal_plus_what_the_cohort_lends_within_the_borrowing_limit(lab_ha: tuple[program.Plan, list[dict[str, str]]]) -> None:
    _, rows = lab_ha
    gpu_rows = [r for r in rows if r["resource"] == GPU]
    assert len(gpu_rows) == 3  # the two teams and the program's own queue, all in one cohort
    for row in gpu_rows:
        assert row["lending limit"] == "all it does not use"  # no lendingLimit: lends all its unused quota
        others = sum(int(r["nominal"]) for r in gpu_rows if r is not row)
        limit = others if row["borrowing limit"] == "all the cohort lends" else int(row["borrowing limit"])
        assert int(row["at most"]) == int(row["nominal"]) + min(limit, others), row


def test_lab_without_queues_has_no_quota_table(tmp_path: Path) -> None:
    render_main.write(program.run("lab"), tmp_path)
    assert _section((tmp_path / "summary.md").read_text(), "Team quotas") is None
