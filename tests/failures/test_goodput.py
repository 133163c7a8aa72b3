"""Young/Daly closed forms by hand, and the Monte-Carlo simulation against them."""

from __future__ import annotations

import math

import pytest

from twin.core.failures import montecarlo
from twin.core.failures.goodput import cycle_breakdown, daly_efficiency, daly_interval, young_interval
from twin.core.failures.montecarlo import EventClass, SimulationSpec


def test_young_and_daly_intervals_by_hand():
    # delta = 60 s, M = 3600 s: Young sqrt(2*60*3600) = 657.27 s; Daly with
    # r = delta/(2M) = 1/120: 657.27 * (1 + sqrt(r)/3 + r/9) - 60 = 617.87 s
    assert young_interval(60, 3600) == pytest.approx(657.267, rel=1e-5)
    assert daly_interval(60, 3600) == pytest.approx(657.267 * (1 + math.sqrt(1 / 120) / 3 + 1 / 1080) - 60, rel=1e-6)
    assert daly_interval(60, 3600) == pytest.approx(617.87, abs=0.01)
    assert daly_interval(8000, 3600) == 3600  # delta >= 2M: checkpoint every M
    assert young_interval(60, math.inf) == math.inf


def test_daly_efficiency_limits_and_breakdown():
    # No failures: only the writes cost: tau / (tau + delta).
    assert daly_efficiency(600, 60, 300, math.inf) == pytest.approx(600 / 660)
    # First order: 1 - delta/tau - (tau/2 + R)/M for delta, tau, R << M.
    eff = daly_efficiency(600, 6, 300, 360000)
    assert eff == pytest.approx(1 - 6 / 606 - (303 + 300) / 360000, abs=2e-4)
    parts = cycle_breakdown(600, 6, 300, 360000)
    assert parts.useful + parts.checkpointing + parts.lost_work + parts.restart == pytest.approx(1.0)
    assert parts.restart == pytest.approx(300 / 360000, rel=0.01)


def _spec(rate_per_s, downtime, tau, delta, horizon, **kw):
    return SimulationSpec(classes=(EventClass("x", rate_per_s, True, downtime_s=downtime, **kw),),
                          interval_s=tau, write_s=delta, horizon_s=horizon)


def test_monte_carlo_matches_daly_for_poisson_interruptions():
    mtbi, delta, restart = 3 * 3600.0, 30.0, 600.0
    tau = daly_interval(delta, mtbi)
    spec = _spec(1 / mtbi, restart, tau, delta, horizon=60 * 86400.0)
    result = montecarlo.run(spec, trials=60, batch_trials=20, seed=1)
    summary = result.summary()
    closed = 100 * daly_efficiency(tau, delta, restart, mtbi)
    assert summary["effective_training_time_pct"] == pytest.approx(closed, abs=0.3)
    assert summary["expected_interruptions_per_day"] == pytest.approx(8.0, rel=0.05)


def test_monte_carlo_lost_work_is_half_an_interval():
    # Rare failures, short writes: the work lost per crash averages tau/2.
    tau = 1800.0
    spec = _spec(1 / (50 * 3600.0), 60.0, tau, 5.0, horizon=400 * 86400.0)
    summary = montecarlo.run(spec, trials=40, batch_trials=20, seed=2).summary()
    assert summary["mean_lost_work_per_interruption_s"] == pytest.approx(tau / 2, rel=0.08)


def test_batches_are_reproducible_and_merge():
    spec = _spec(1 / 3600.0, 300.0, 600.0, 10.0, horizon=5 * 86400.0)
    a = montecarlo.run(spec, trials=30, batch_trials=7, seed=5)
    b = montecarlo.run(spec, trials=30, batch_trials=7, seed=5)
    assert a.trials == 30 and (a.useful_fraction == b.useful_fraction).all()
    tasks = montecarlo.batches(spec, 30, 7, 5)
    assert [t[1] for t in tasks] == [7, 7, 7, 7, 2]
    merged = montecarlo.merge(montecarlo.simulate(*t) for t in tasks)
    assert (merged.useful_fraction == a.useful_fraction).all()


def test_spares_run_out_when_repairs_are_slow():
    # 2 node failures per day, each takes a spare for 3 days: 2 spares are not enough,
    # and without a spare the job waits 12 h for the repair.
    cls = EventClass("node", 2 / 86400.0, True, downtime_s=300.0, nodes=1, repair_s=3 * 86400.0,
                     fallback_downtime_s=12 * 3600.0)
    horizon = 30 * 86400.0
    plenty = montecarlo.run(SimulationSpec((cls,), 1800.0, 10.0, horizon, spare_nodes=20), 20, 10, 3).summary()
    few = montecarlo.run(SimulationSpec((cls,), 1800.0, 10.0, horizon, spare_nodes=2), 20, 10, 3).summary()
    assert plenty["spare_shortfalls_per_day"] == 0
    assert few["spare_shortfalls_per_day"] > 1.0
    assert few["effective_training_time_pct"] < plenty["effective_training_time_pct"] - 20


def test_degraded_periods_slow_but_do_not_roll_back():
    slow = EventClass("link", 4 / 86400.0, False, slow_s=4 * 3600.0, throughput=0.5)
    summary = montecarlo.run(SimulationSpec((slow,), 3600.0, 0.0, 20 * 86400.0), 40, 10, 4).summary()
    # Overlapping slow periods do not compound: the job runs at half speed whenever at
    # least one is active, i.e. with probability 1 - exp(-lambda D) = 1 - exp(-2/3).
    assert summary["expected_interruptions_per_day"] == 0
    expected = 100 * (1 - 0.5 * (1 - math.exp(-4 * 4 / 24)))
    assert summary["effective_training_time_pct"] == pytest.approx(expected, abs=1.5)
