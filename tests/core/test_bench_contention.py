"""benchmarks/bench_contention.py: the contention pass timed against every strategy costed alone."""

from __future__ import annotations

import importlib.util

import twin.core.run.driver as driver_module
from tests.conftest import ROOT
from twin.core.run.driver import TwinModel
from twin.engine import Engine

spec = importlib.util.spec_from_file_location("bench_contention", ROOT / "benchmarks" / "bench_contention.py")
assert spec is not None and spec.loader is not None
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

# Llama 3.1 70B on 1,024 H100s with DP buckets beside TP and PP traffic: strategies share links.
SHARED = {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
          "plan": {"tp": 8, "pp": 4, "gbs": 1024}}


def test_the_alone_side_shares_nothing_and_the_pass_is_put_back():
    original = TwinModel._contend
    shared = Engine(autoload=False).evaluate(SHARED)
    assert shared.contention_s > 0
    TwinModel._contend = bench._alone
    try:
        alone = Engine(autoload=False).evaluate(SHARED)
    finally:
        TwinModel._contend = original
    assert alone.contention_s == 0 and alone.step_time_s < shared.step_time_s
    warm, timed = bench.never_seen(4)
    assert timed
    assert bench.us_per_evaluation(warm, timed, sharing=False) > 0
    assert TwinModel._contend is original


def test_the_parts_are_timed_and_every_patch_is_undone():
    saved = (TwinModel._contend, TwinModel._profiles, driver_module.flows, driver_module.strategy_terms,
             driver_module.collective_cost, driver_module.link_loads)
    parts = bench.parts_us(*bench.never_seen(6))
    assert (TwinModel._contend, TwinModel._profiles, driver_module.flows, driver_module.strategy_terms,
            driver_module.collective_cost, driver_module.link_loads) == saved
    whole = parts["whole evaluation, under the timers"][0]
    assert 0 < parts["the contention pass"][0] < whole
    assert parts["  flows: link profiles"][1] > 0 and parts["  flows: stretches"][1] > 0
