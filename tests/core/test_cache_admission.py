"""One scenario's group memo admits a group on its key's second request
(``twin.core.run.memo.Memo(admit_second=True)``): a scenario seen once leaves no group memo
behind, one seen again is memoised, and the answers never depend on it; every memo is bounded
and counts its hits and misses (``Engine.cache_stats``)."""

from __future__ import annotations

import dataclasses

from twin.core.run.memo import Memo
from twin.engine import Engine

SCENARIO = {"cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-70b",
            "plan": {"tp": 8, "pp": 4, "vp": 2, "gbs": 512, "mbs": 1}}


def with_gbs(gbs: int) -> dict:
    return {**SCENARIO, "plan": {**SCENARIO["plan"], "gbs": gbs}}


def test_a_key_is_admitted_on_its_second_request() -> None:
    door = Memo("door", admit_second=True)
    assert door.admits(("a", 1)) is False
    assert door.admits(("a", 1)) is True
    assert door.admits(("a", 1)) is True
    assert door.admits(("b", 1)) is False
    assert Memo("no admission").admits(("a", 1)) is True


def test_the_admission_is_bounded() -> None:
    door = Memo("door", limit=1, admit_second=True)  # remembers at most 17 keys asked for
    for i in range(40):
        door.admits(i)
    assert len(door._seen) <= 17
    assert door.admits(39) is True  # the newest keys are still known


def test_a_memo_is_bounded_and_counts() -> None:
    memo: Memo[int, str] = Memo("m", limit=3)
    for i in range(3):
        assert memo.get(i) is None
        memo.put(i, str(i))
    assert memo.get(2) == "2" and len(memo) == 3
    memo.put(3, "3")  # full: it starts afresh
    assert len(memo) == 1 and memo.get(0) is None and memo.get(3) == "3"
    assert memo.stats() == {"entries": 1, "limit": 3, "hits": 2, "misses": 4, "clears": 1}
    assert memo.get_or_build(9, str, 9) == "9" and memo.get_or_build(9, str, 10) == "9"


def test_the_engine_reports_its_memos() -> None:
    engine = Engine(autoload=False)
    engine.evaluate(SCENARIO)
    engine.evaluate(SCENARIO)
    stats = engine.cache_stats()
    assert stats["groups"]["entries"] == 1 and stats["groups"]["misses"] == 2
    assert stats["collective costs"]["hits"] > 0 and stats["hierarchies"]["entries"] == 1
    for name, s in stats.items():
        assert s["entries"] <= s["limit"] or name in ("group spans", "collective costs"), name


def test_a_scenario_seen_once_leaves_no_group_memo() -> None:
    engine = Engine(autoload=False)
    engine.evaluate(SCENARIO)
    assert len(engine._model.memos['groups']) == 0


def test_a_scenario_seen_again_is_memoised_and_answers_the_same() -> None:
    engine = Engine(autoload=False)
    first = engine.evaluate(SCENARIO)
    second = engine.evaluate(SCENARIO)
    assert len(engine._model.memos['groups']) == 1
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
    assert len(engine._model.memos['groups']) == 1
    assert dataclasses.asdict(memo_answer) == dataclasses.asdict(Engine(autoload=False).evaluate(with_gbs(1024)))


def test_full_spec_tokens_are_renewed_between_evaluations_with_every_memo() -> None:
    engine = Engine(autoload=False)
    fresh = Engine(autoload=False)
    model = engine._model
    model._token.limit = 8  # a handful of distinct spec values, then start afresh
    answers = [engine.evaluate(with_gbs(256 * k)).step_time_s for k in (1, 2, 4, 1, 2)]
    assert model._token.resets >= 1  # it filled up and was renewed
    assert answers == [fresh.evaluate(with_gbs(256 * k)).step_time_s for k in (1, 2, 4, 1, 2)]
    batch = engine.evaluate_many([with_gbs(256 * k) for k in (1, 2, 4)], require_fit=False)
    assert [float(v) for v in batch.columns["step_time_s"]] == answers[:3]
