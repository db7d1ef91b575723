"""The whole-cluster check's disk memo (render/cluster/memo.py): a result comes back only for exactly
the same question, a warm check says what a cold one says, a bad cache file is a miss, `off` writes
nothing, and the memo touches no file of anyone else's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from render import program
from render.cluster import check, memo
from render.cluster.admission import Admission
from render.cluster.objects import Obj, _parsed_once, parse_documents

SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"},
           "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "x"}}}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "memo"
    monkeypatch.setenv(memo.CACHE_ENV, str(folder))
    _parsed_once.cache_clear()
    return folder


def problems(body: dict) -> list[str]:
    admission = Admission([Obj(body, "urn:plan", "plan")], {}, "1.34")
    return [p.reason for p in admission.schema()]


def test_an_invalid_object_is_not_answered_with_a_valid_ones_result(cache: Path) -> None:
    assert problems(SERVICE) == []
    assert problems(SERVICE) == []  # from the memo now
    assert any(cache.glob("*.json"))
    bad = json.loads(json.dumps(SERVICE))
    bad["spec"]["ports"][0]["port"] = "eighty"
    found = problems(bad)
    assert len(found) == 1 and "spec.ports.0.port" in found[0], found
    assert problems(bad) == found  # the memo keeps the error too


def test_a_damaged_cache_file_is_a_miss(cache: Path) -> None:
    bad = json.loads(json.dumps(SERVICE))
    bad["spec"]["unknownField"] = 1
    first = problems(bad)
    assert first
    for stored in cache.glob("*.json"):
        stored.write_text("{not json")
    assert problems(bad) == first
    for stored in cache.glob("*.json"):
        stored.write_text('{"a": "dict, not a list"}')
    assert problems(bad) == first


def test_off_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memo.CACHE_ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert memo.cache_dir() is None
    assert problems(SERVICE) == []
    assert list(tmp_path.rglob("*")) == []


def test_yaml_that_json_cannot_hold_is_parsed_every_time(cache: Path) -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {when: 2024-01-01}\n---\n" \
           "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\ndata: {a: b}\n"
    assert _parsed_once(text) == tuple(parse_documents(text))
    assert not any(cache.glob("*.json"))  # a datetime would come back as a string
    plain = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\ndata: {a: 'yes', b: '1'}\n"
    assert _parsed_once(plain) == tuple(parse_documents(plain))
    _parsed_once.cache_clear()
    assert _parsed_once(plain) == tuple(parse_documents(plain))  # read back from disk
    assert len(list(cache.glob("*.json"))) == 1


def test_the_memo_leaves_other_files_alone(cache: Path) -> None:
    cache.mkdir(parents=True)
    mine = cache / "notes.txt"
    mine.write_text("the user's")
    problems(SERVICE)
    assert mine.read_text() == "the user's"
    assert {p.suffix for p in cache.iterdir()} == {".txt", ".json"}


def test_the_memo_creates_its_folder_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "fresh" / "memo"
    monkeypatch.setenv(memo.CACHE_ENV, str(folder))
    problems(SERVICE)
    assert folder.stat().st_mode & 0o777 == 0o700


def test_a_warm_check_says_what_a_cold_one_says(cache: Path, upstream_dir: Path) -> None:
    plan = program.run("lab")
    cold = check(plan, plan.config, upstream_dir)
    assert any(cache.glob("*.json"))
    _parsed_once.cache_clear()
    warm = check(plan, plan.config, upstream_dir)
    assert (warm.problems, warm.objects, warm.nodes, warm.notes) == (cold.problems, cold.objects, cold.nodes, cold.notes)
    assert [(p.workload.ref, p.nodes, p.ok) for p in warm.placements] == \
           [(p.workload.ref, p.nodes, p.ok) for p in cold.placements]
