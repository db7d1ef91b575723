"""Every refusal links the docs page that explains its key (config/errors.py DOC_PAGES): every
top-level key of every platform's model, and every secret, has a page that exists, talks about the
key (in the linked section, where the link has an anchor) and, for an anchor, has that heading id
as MkDocs renders it (Python-Markdown's toc, as mkdocs.yml configures it). A real bad stack file,
read as `./plan` reads it, prints the link on each refusal and exits 2.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import markdown
import pytest
import yaml

import config
from config.errors import DOC_PAGES, REFERENCE_PAGE, doc_page
from tests.conftest import PROJECT_DIR

NS = config.NAMESPACE


def model_keys() -> set[str]:
    """Every top-level key a stack file may set on some platform, and every secret."""
    keys = {info.alias or name for stack_type in config.STACK_TYPES.values()
            for name, info in stack_type.model_fields.items()}
    return keys | set(config.SECRET_KEYS)


def sections(page: Path) -> dict[str, str]:
    """Heading id -> the text of its section (to the next heading of its level or above), as MkDocs
    renders the page; "" -> the whole page."""
    html = markdown.markdown(page.read_text(), extensions=["toc", "attr_list", "tables", "admonition"],
                             extension_configs={"toc": {"permalink": True}})
    out = {"": html}
    headings = list(re.finditer(r'<h([1-6]) id="([^"]+)"', html))
    for i, h in enumerate(headings):
        end = next((n.start() for n in headings[i + 1:] if int(n.group(1)) <= int(h.group(1))), len(html))
        out[h.group(2)] = html[h.start():end]
    return out


def test_every_key_of_every_platform_has_its_page() -> None:
    missing = model_keys() - set(DOC_PAGES)
    assert not missing, f"keys without a page in config/errors.py DOC_PAGES: {sorted(missing)}"
    stale = set(DOC_PAGES) - model_keys()
    assert not stale, f"DOC_PAGES names keys no model has: {sorted(stale)}"


@pytest.mark.parametrize("key", sorted(DOC_PAGES))
def test_the_page_exists_has_the_anchor_and_talks_about_the_key(key: str) -> None:
    path, _, anchor = DOC_PAGES[key].partition("#")
    page = PROJECT_DIR / path
    assert page.is_file(), f"{key}: {path} does not exist"
    assert path.startswith("docs/"), f"{key}: {path} is not a page of the docs site"
    text = sections(page)
    assert anchor in text, f"{key}: {path} has no heading with id {anchor!r}: {sorted(text)}"
    # The key as the page writes it: `kubeVip`, `kubeVip.address`, gpu-cluster:kubeVip (not gpu-cluster).
    assert re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", text[anchor]), \
        f"{key}: {DOC_PAGES[key]} never names the key"


def test_a_page_is_linked_for_nested_keys_and_unknown_keys() -> None:
    assert doc_page("queues.teams[0].gpus") == doc_page("queues") == "docs/queues.md"
    assert doc_page("hosts[1].address") == doc_page("hosts")
    assert doc_page("gcp:project") == DOC_PAGES["gcp:project"]
    assert doc_page("podCIDR") == REFERENCE_PAGE  # no model has it: the reference lists every key


def test_a_message_that_ends_with_its_own_page_keeps_it_alone() -> None:
    """A rebuild refusal already names docs/operations/rebuilding.md: one page, not two."""
    line = config.ConfigError.refusal("podCidr", "needs a new cluster (docs/operations/rebuilding.md)")
    assert line == f"{NS}:podCidr: needs a new cluster (docs/operations/rebuilding.md)"
    assert config.ConfigError.refusal("podCidr", "is no CIDR (a /16, say)") == \
        f"{NS}:podCidr: is no CIDR (a /16, say) ({DOC_PAGES['podCidr']})"


def test_a_refusal_through_parse_carries_the_link() -> None:
    raw: dict[str, Any] = {"platform": "lab", "podCIDR": "10.244.0.0/16",
                           "queues": {"enabled": True, "teams": [{"name": "vision", "gpus": -1}]}}
    with pytest.raises(config.ConfigError) as info:
        config.parse(raw)
    lines = str(info.value).splitlines()[1:]
    assert lines, str(info.value)
    for (key, _message), line in zip(info.value.problems, lines, strict=True):
        assert line.strip().endswith(f"({doc_page(key)})"), line
    assert f"  {NS}:queues.teams[0].gpus: " in str(info.value)
    assert any(line.strip().startswith(f"{NS}:queues.teams[0].gpus: ") and line.endswith("(docs/queues.md)")
               for line in lines), lines
    assert f"  {NS}:podCIDR: is not a known key ({REFERENCE_PAGE})" in str(info.value)


def test_plan_prints_the_link_of_each_refusal_and_exits_2(tmp_path: Path) -> None:
    """./plan on a copy of the committed lab-ha with two teams in one namespace and the VIP on a
    host's address: each refusal line names its key and ends with its page."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", "plan"):
        shutil.copy2(PROJECT_DIR / name, project / name)
    for name in ("config", "components", "stacks", "render", "workloads", ".venv"):
        (project / name).symlink_to(PROJECT_DIR / name, target_is_directory=True)
    stack = yaml.safe_load((PROJECT_DIR / "Pulumi.lab-ha.yaml").read_text())
    values = stack["config"]
    teams = values[f"{NS}:queues"]["teams"]
    teams[1]["namespace"] = teams[0]["namespace"]
    first = values[f"{NS}:hosts"][0]
    values[f"{NS}:kubeVip"]["address"] = first["address"]
    (project / "Pulumi.bad.yaml").write_text(yaml.safe_dump(stack))
    env = {k: v for k, v in os.environ.items() if k != "PULUMI_CONFIG"}
    result = subprocess.run(["./plan", "bad", "--no-check"], cwd=project, env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    refusals = [line.strip() for line in result.stderr.splitlines() if line.startswith(f"  {NS}:")]
    assert any(line.startswith(f"{NS}:queues.teams[1].namespace: ") and line.endswith("(docs/queues.md)")
               for line in refusals), result.stderr
    assert any(line.startswith(f"{NS}:kubeVip.address: {first['address']} is hosts[0].address")
               and line.endswith(f"({DOC_PAGES['kubeVip']})") for line in refusals), result.stderr
    assert all(re.search(r" \((docs/[\w/.-]+\.md(#[\w-]+)?)\)$", line) for line in refusals), refusals
    assert "Traceback" not in result.stderr
