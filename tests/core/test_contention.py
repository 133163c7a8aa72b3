"""The network as a shared resource: taper, placement, failures and several jobs cost what
they should, and nothing where no traffic crosses (issue: link-level traffic)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from twin.core.collectives import collective_cost, link_profile
from twin.core.conditions import Conditions
from twin.core.contention import Flow, stretches
from twin.core.errors import SpecError
from twin.core.fleet_shares import capacity, place_jobs
from twin.core.topology import place_group
from twin.engine import Engine
from twin.fleet_report import evaluate_fleet

# A data-parallel ring across nodes (tp = 8: one rank per node) plus pipeline p2p, on RoCE.
BASE = {"cluster": {"system": "DGX-H100", "num_gpus": 1024,
                    "scale_out": {"fabric": "roce", "topology": "fat_tree", "switch_radix": 64}},
        "model": "llama3.1-70b", "plan": {"tp": 8, "pp": 4, "vp": 5, "gbs": 512}}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(autoload=False)


def _with(base: dict, **scale_out) -> dict:
    out = copy.deepcopy(base)
    out["cluster"]["scale_out"].update(scale_out)
    return out


def test_more_taper_is_never_faster_and_costs_where_traffic_crosses(engine):
    steps = [engine.evaluate(_with(BASE, oversubscription=[o])).step_time_s for o in (1, 2, 4, 8, 16, 32)]
    assert steps == sorted(steps)
    assert steps[-1] > 1.05 * steps[0]  # the data-parallel ring crosses the leaf uplinks


def test_taper_on_a_tier_no_traffic_reaches_costs_nothing(engine):
    # 64 GPUs under one leaf: no group leaves it, so its uplinks' taper cannot matter.
    small = {"cluster": {"system": "DGX-H100", "num_gpus": 64,
                         "scale_out": {"fabric": "roce", "tier_spans": [64, 64], "tiers": 2}},
             "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 64}}
    flat = engine.evaluate(small)
    tapered = engine.evaluate(_with(small, oversubscription=[16]))
    assert tapered.step_time_s == flat.step_time_s
    assert all(link.tier < 2 for link in tapered.links)


def test_an_intermediate_tier_taper_counts_not_only_the_top():
    # A hierarchy whose leaf uplinks are tapered 1:8 but whose top is not more tapered: a
    # group spanning the top crosses the tapered middle tier too.
    from tests.core.test_formulas import flat_hierarchy

    h = flat_hierarchy(over=1.0)
    tiers = list(h.tiers)
    tiers[1] = dataclasses.replace(tiers[1], span_gpus=16)
    mid = dataclasses.replace(tiers[2], span_gpus=256, oversubscription=8.0)
    top = dataclasses.replace(tiers[2], name="core", span_gpus=1 << 20, oversubscription=8.0)
    tapered = dataclasses.replace(h, tiers=(tiers[0], tiers[1], mid, top))
    flat = dataclasses.replace(h, tiers=(tiers[0], tiers[1], dataclasses.replace(mid, oversubscription=1.0),
                                         dataclasses.replace(top, oversubscription=1.0)))
    span = place_group(4096, 1, tapered)
    assert span.top == 3
    slow = collective_cost("all_to_all", 1e9, span, tapered).time_s
    fast = collective_cost("all_to_all", 1e9, place_group(4096, 1, flat), flat).time_s
    assert slow > 4 * fast


def test_rail_optimised_beats_fat_tree_for_rail_aligned_traffic(engine):
    for over in (1, 4, 16):
        rail = engine.evaluate(_with(BASE, topology="rail_optimized", oversubscription=[over])).step_time_s
        tree = engine.evaluate(_with(BASE, topology="fat_tree", oversubscription=[over])).step_time_s
        assert rail <= tree
    assert engine.evaluate(_with(BASE, topology="rail_optimized", oversubscription=[16])).step_time_s < \
        engine.evaluate(_with(BASE, topology="fat_tree", oversubscription=[16])).step_time_s


def test_traffic_in_flight_together_shares_the_nic(engine):
    est = engine.evaluate(BASE)
    nic = next(link for link in est.links if link.tier == 1)
    assert {"data", "pipeline"} <= set(nic.utilisation)
    assert nic.stretch["pipeline"] > 1.0  # the gradient reduction's traffic slows the p2p
    assert est.contention_s > 0
    assert "NIC links" in nic.name


def test_blocking_collectives_of_one_gpu_do_not_slow_each_other():
    a = Flow("tensor", (1.0, 0.0), 1.0, 1.0, 2.0, "microbatch", overlapped=False)
    b = Flow("expert", (1.0, 0.0), 1.0, 1.0, 2.0, "microbatch", overlapped=False)
    c = Flow("data", (1.0, 0.0), 1.0, 1.0, 2.0, "step", overlapped=True)
    sa, sb = stretches([a, b])
    assert sa == (1.0, 1.0) and sb == (1.0, 1.0)
    sa, _, sc = stretches([a, b, c])
    # The asynchronous reduction slows the blocking collectives it meets; it makes up what
    # it loses while they hold the step up, so they do not slow it.
    assert sa[0] == pytest.approx(1.5) and sc == (1.0, 1.0)


def test_a_backlogged_competitor_costs_at_most_its_fair_share():
    d = Flow("d", (1.0,), 10.0, 10.0, 10.0, "microbatch", overlapped=True)
    e = Flow("e", (1.0,), 50.0, 50.0, 10.0, "microbatch", overlapped=True)
    sd, _ = stretches([d, e])
    assert sd == (2.0,)


@pytest.mark.parametrize("nbytes", [(2.0, 3.0, 5.0), (2.0, 0.0, 5.0), (0.0, 0.0, 0.0)],
                         ids=["all-send-bytes", "one-reports-none", "none-report-bytes"])
def test_a_batch_flow_is_loaded_as_each_of_its_points_alone(nbytes):
    """Per point, a batch's link utilisation is what the point's own flow gives: by its bytes, or
    by its issued time on its busiest link where it reports no bytes (also when only some do)."""
    import numpy as np

    profiles = [(1.0, 0.5, 0.0), (0.2, 0.4, 0.1), (0.0, 3.0, 1.5)]
    issued, window = (0.5, 1.0, 4.0), (1.0, 8.0, 2.0)
    batch = Flow("data", np.array(profiles), np.array(nbytes), np.array(issued), np.array(window), "step", True)
    got = batch.utilisation()
    for i, profile in enumerate(profiles):
        alone = Flow("data", profile, nbytes[i], issued[i], window[i], "step", True).utilisation()
        assert tuple(got[i]) == alone


def test_a_failure_never_makes_a_step_faster(engine):
    from twin.failure_analyzer import FailureAnalyzer

    fa = FailureAnalyzer(engine)
    scn, _ = fa.load("examples/gpt3-175b-dgx-h100-ib.yaml")
    nominal = engine.evaluate(scn, validate=False).step_time_s
    modes = [m for m in fa.inventory(scn).modes if m.degraded is not None]
    assert modes
    for mode in modes:
        degraded = engine.evaluate(scn, validate=False, conditions=Conditions(impact=mode.degraded))
        assert degraded.step_time_s >= nominal * (1 - 1e-12), mode.name


def test_link_profile_marks_only_the_links_a_group_reaches(engine):
    scn = engine.scenario(BASE)
    h = engine.hierarchy(scn)
    inside = place_group(8, 1, h)  # one node
    assert link_profile(inside, h, "ring")[1:] == (0.0,) * (len(h.tiers) - 1)
    across = place_group(128, 8, h)
    prof = link_profile(across, h, "ring")
    assert prof[1] > 0 and max(prof) == 1.0


# --------------------------------------------------------------------------- fleets
FLEET = {"name": "t", "cluster": {"system": "DGX-H100", "num_gpus": 512,
                                  "scale_out": {"fabric": "roce", "topology": "fat_tree", "switch_radix": 32,
                                                "oversubscription": [4]}},
         "jobs": [{"name": "a", "gpus": 256, "model": "llama3.1-70b", "plan": {"tp": 8, "pp": 2, "gbs": 256}},
                  {"name": "b", "gpus": 256, "model": "llama3.1-70b", "plan": {"tp": 8, "pp": 2, "gbs": 256}}]}


def test_two_jobs_are_each_at_least_as_slow_as_alone_and_name_the_links(engine):
    report = evaluate_fleet(engine, FLEET)
    assert [j.name for j in report.jobs] == ["a", "b"]
    for job in report.jobs:
        assert job.shared.step_time_s >= job.alone.step_time_s
        assert job.alone.step_time_s <= job.own_share.step_time_s  # idle neighbours' links help
    a = report.jobs[0]
    assert a.contended and a.contended[0]["shared_with"].keys() == {"b"}
    assert a.slowdown > 1.0


def test_one_job_alone_has_nothing_to_share(engine):
    one = {**FLEET, "jobs": FLEET["jobs"][:1]}
    report = evaluate_fleet(engine, one)
    (job,) = report.jobs
    assert job.shared.step_time_s == job.alone.step_time_s and not job.contended


def test_jobs_in_disjoint_subtrees_do_not_contend(engine):
    scn = engine.scenario({**BASE, "cluster": {**BASE["cluster"], "num_gpus": 1024}})
    h = engine.hierarchy(scn)
    leaf = h.tiers[1].span_gpus
    places = place_jobs([leaf, leaf], [0, leaf], 8, 1024)
    busy = [[1.0] * len(h.tiers)] * 2
    # Each job fills one leaf: its leaf's uplinks are its own, busy neighbour or not ...
    assert capacity(h, places, 0, busy)[2] == capacity(h, places, 0)[2] == 1.0
    assert capacity(h, places, 0, busy)[1] == 1.0  # ... and NIC links are never shared
    # ... while a neighbour in the same leaf takes its half of the leaf's uplinks when busy.
    half = place_jobs([leaf // 2, leaf // 2], [0, leaf // 2], 8, 1024)
    assert capacity(h, half, 0)[2] == pytest.approx(2.0)
    assert capacity(h, half, 0, busy)[2] == pytest.approx(1.0)


def test_fleet_errors_name_the_job_and_field(engine):
    with pytest.raises(SpecError) as e:
        evaluate_fleet(engine, {**FLEET, "jobs": [{**FLEET["jobs"][0], "plan": {"tp": 3, "gbs": 8}}]})
    assert e.value.field == "jobs[0].plan.tp"
    with pytest.raises(SpecError) as e:
        evaluate_fleet(engine, {**FLEET, "jobs": [FLEET["jobs"][0], {**FLEET["jobs"][1], "first_gpu": 128}]})
    assert e.value.field == "jobs[1]" and "overlap" in e.value.rule
    with pytest.raises(SpecError) as e:
        evaluate_fleet(engine, {**FLEET, "jobs": [{**FLEET["jobs"][0], "gpus": 1024}]})
    assert "run past" in e.value.rule
    with pytest.raises(SpecError) as e:
        evaluate_fleet(engine, {**FLEET, "jobs": [{**FLEET["jobs"][0], "colour": "red"}]})
    assert e.value.field == "jobs[0].colour"
    with pytest.raises(SpecError) as e:
        evaluate_fleet(engine, {**FLEET, "jobs": []})
    assert e.value.field == "jobs"
    with pytest.raises(SpecError) as e:
        evaluate_fleet(engine, {**FLEET, "jobs": [FLEET["jobs"][0], {**FLEET["jobs"][1], "name": "a"}]})
    assert e.value.field == "jobs[1].name"


def test_a_capacity_view_is_costed_on_its_own_links_whatever_was_evaluated_before():
    # The link profiles are cached with the hierarchy, which its views (here a fleet's
    # capacity) share: a view must not get the profile of the plain hierarchy evaluated
    # first (it did: the NIC utilisation came out as the alone one's).
    scenario = {"cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-70b",
                "plan": {"tp": 8, "pp": 4, "vp": 2, "gbs": 512}}
    capacity = (1.0, 0.5, 0.5)
    cold = Engine(autoload=False)
    only_view = cold.evaluate(cold.scenario(scenario), validate=False, conditions=Conditions(capacity=capacity))
    warm = Engine(autoload=False)
    scn = warm.scenario(scenario)
    alone = warm.evaluate(scn, validate=False)
    after_alone = warm.evaluate(scn, validate=False, conditions=Conditions(capacity=capacity))
    assert after_alone.step_time_s == only_view.step_time_s
    assert [link.utilisation for link in after_alone.links] == [link.utilisation for link in only_view.links]
    assert after_alone.links[1].utilisation != alone.links[1].utilisation  # half the NIC capacity: busier


def test_a_share_view_is_the_hierarchy_with_its_shares_and_shares_its_memo():
    from tests.core.test_formulas import flat_hierarchy

    h = flat_hierarchy(over=2.0)
    h._memo["probe"] = 1
    view = h.with_shares((0.5, 0.25))
    # Equal (every field) to the hierarchy built with those shares, the original untouched.
    assert view == dataclasses.replace(h, shares=(0.5, 0.25)) and view != h and h.shares == ()
    assert view._memo is h._memo
    # Shares of a view are of what that view gives: they multiply, tier by tier.
    assert view.with_shares((0.5, 1.0, 0.5)).shares == (0.25, 0.25, 0.5)
    assert view.up_bw == 0.5 * h.up_bw
