"""Criticality ranking, pairs, redundancy variants and the Monte-Carlo path of the analysis."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES
from twin.core.failures.failure_spec import MonteCarloSpec

GPT3 = EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"
LLAMA = EXAMPLES / "llama3-405b-16k-roce.yaml"


def test_ranking_on_a_1024_gpu_infiniband_cluster_makes_sense(fa):
    rep = fa.analyze(GPT3, rank=True)
    rows = rep.ranking
    names = [r["component"] for r in rows]
    # Every component group appears once; GPUs dominate (most units, highest rate).
    assert sorted(names) == sorted(g.name for g in rep.inventory.groups if any(
        m.component == g.name for m in rep.inventory.modes))
    assert names[0] == "gpu" and rows[0]["share_pct"] > 50
    rated = [r for r in rows if r["expected_cost_h_per_day"] is not None]
    assert rated == sorted(rated, key=lambda r: -r["expected_cost_h_per_day"])
    assert sum(r["share_pct"] for r in rated) == pytest.approx(100.0)
    # With adaptive routing in a non-blocking tree a lost uplink is re-routed: far cheaper
    # per event than anything that crashes the job.
    by = {r["component"]: r for r in rows}
    assert by["link.leaf-spine"]["outcome"] == "continue_degraded"
    assert by["link.leaf-spine"]["cost_per_event_s"] < 0.01 * by["link.nic-leaf"]["cost_per_event_s"]
    assert by["link.nic-leaf"]["outcome"].startswith("restart")
    # Components without a published rate are listed with their cost per event only.
    assert by["nvswitch"]["expected_cost_h_per_day"] is None and by["nvswitch"]["cost_per_event_s"] > 0
    assert {"hot_spares", "extra_spine", "cpo"} <= {v["variant"] for v in rep.redundancy}


def test_redundancy_variants_change_what_they_should(fa):
    rep = fa.analyze(LLAMA, rank=True)
    v = {x["variant"]: x for x in rep.redundancy}
    # Hot spares remove the rescheduling wait from every node-level restart.
    assert v["hot_spares"]["delta_ett_pct_points"] > 0.5 and v["hot_spares"]["cost"]["gpus_added"] > 0
    # An extra spine absorbs the ECMP re-hash of a lost uplink.
    assert v["extra_spine"]["delta_ett_pct_points"] > 0
    # CPO cuts link failures ~10x: fewer interruptions per day.
    assert v["cpo"]["expected_interruptions_per_day"] < rep.figures["expected_interruptions_per_day"]


def test_pairs_of_concurrent_degradations(fa):
    rep = fa.analyze(LLAMA, pairs=True)
    assert rep.pairs
    top = rep.pairs[0]
    assert top["slowdown"] >= max(top["slowdowns_alone"]) - 1e-12
    assert all(p["overlaps_per_year"] > 0 for p in rep.pairs)


def test_monte_carlo_through_the_analysis_agrees_with_the_closed_form(fa):
    rep = fa.analyze(GPT3, monte_carlo=MonteCarloSpec(trials=40, horizon_days=60, seed=0))
    mc = rep.monte_carlo
    assert mc["trials"] == 40
    assert mc["effective_training_time_pct"] == pytest.approx(rep.effective_training_time_pct, abs=0.5)
    # finite hot spares that repair slowly run out on a large job
    spares = fa.analyze(LLAMA, failures={"spare_nodes": 2, "repair_h": {"gpu": 72, "host": 72}},
                        monte_carlo=MonteCarloSpec(trials=10, horizon_days=7, seed=0)).monte_carlo
    assert spares["spare_shortfalls_per_day"] > 0
    assert spares["effective_training_time_pct"] < mc["effective_training_time_pct"]
