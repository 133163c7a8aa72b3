"""One scenario's group memo admits a group on its key's second request
(``twin.core.evaluate._Doorkeeper``): a scenario seen once leaves no group memo behind, one
seen again is memoised, and the answers never depend on it."""

from __future__ import annotations

import dataclasses

import pytest

from twin.core import evaluate as evaluate_module
from twin.core.evaluate import _Doorkeeper
from twin.engine import Engine

SCENARIO = {"cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-70b",
            "plan": {"tp": 8, "pp": 4, "vp": 2, "gbs": 512, "mbs": 1}}


def with_gbs(gbs: int) -> dict:
    return {**SCENARIO, "plan": {**SCENARIO["plan"], "gbs": gbs}}


def test_a_key_is_admitted_on_its_second_request() -> None:
    door = _Doorkeeper()
    assert door.admit(("a", 1)) is False
    assert door.admit(("a", 1)) is True
    assert door.admit(("a", 1)) is True
    assert door.admit(("b", 1)) is False


def test_the_doorkeeper_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluate_module, "_CACHE_LIMIT", 1)  # holds at most 17 keys
    door = _Doorkeeper()
    for i in range(40):
        door.admit(i)
    assert len(door._seen) <= 17
    assert door.admit(39) is True  # the newest keys are still known


def test_a_scenario_seen_once_leaves_no_group_memo() -> None:
    engine = Engine(autoload=False)
    engine.evaluate(SCENARIO)
    assert engine.model._groups_seen == {}


def test_a_scenario_seen_again_is_memoised_and_answers_the_same() -> None:
    engine = Engine(autoload=False)
    first = engine.evaluate(SCENARIO)
    second = engine.evaluate(SCENARIO)
    assert len(engine.model._groups_seen) == 1
    third = engine.evaluate(SCENARIO)  # from the memo and the cached costs
    assert dataclasses.asdict(first) == dataclasses.asdict(second) == dataclasses.asdict(third)
    assert first.contention_s == third.contention_s and first.links == third.links


def test_points_of_a_memoised_group_answer_as_a_fresh_engine_does() -> None:
    """A second batch size reuses the group's memo (same everything but gbs) and still gives
    what an engine that never saw the group gives."""
    engine = Engine(autoload=False)
    engine.evaluate(SCENARIO)
    engine.evaluate(SCENARIO)
    memo_answer = engine.evaluate(with_gbs(1024))
    assert len(engine.model._groups_seen) == 1
    assert dataclasses.asdict(memo_answer) == dataclasses.asdict(Engine(autoload=False).evaluate(with_gbs(1024)))
