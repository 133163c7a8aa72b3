"""Jobs placed anywhere on a shared fabric (issue 36, item 2): node lists, ranges, strides and
placement policies, priced on the links the jobs really share.
"""

from __future__ import annotations

import copy

import pytest

from tests.core.test_contention import FLEET
from twin.core.errors import SpecError
from twin.core.fleet_placement import node_ranges, parse_nodes, place_nodes
from twin.core.fleet_shares import Placement, job_tier_spans
from twin.fleet_report import evaluate_fleet


def _jobs(*jobs):
    return [{"gpus": 16, **j} for j in jobs]


@pytest.mark.parametrize(("items", "nodes"), [
    ([3, 1], (1, 3)), (["0-3"], (0, 1, 2, 3)), (["0-6:2", 9], (0, 2, 4, 6, 9)), (["5"], (5,)),
    ([" 2 - 4 "], (2, 3, 4)),
])
def test_node_lists_ranges_and_strides(items, nodes):
    assert parse_nodes(items, "nodes") == nodes
    assert parse_nodes(node_ranges(nodes).split(","), "nodes") == nodes  # the printed form reads back


@pytest.mark.parametrize(("items", "field", "words"), [
    ([], "nodes", "non-empty"), ("0-3", "nodes", "list"), ([-1], "nodes[0]", "non-negative"),
    ([True], "nodes[0]", "node index"), (["4-2"], "nodes[0]", "a <= b"), (["0-4:0"], "nodes[0]", "s >= 1"),
    ([1, "0-3"], "nodes[1]", "stated twice"), (["x"], "nodes[0]", "'a-b[:s]'"),
    (["0-99999999"], "nodes[0]", "at most"),
])
def test_bad_node_lists_name_the_item(items, field, words):
    with pytest.raises(SpecError) as err:
        parse_nodes(items, "nodes")
    assert err.value.field == field and words in err.value.rule


def test_policies_place_on_free_nodes_only():
    stated = {"gpus": 32, "nodes": ["0-3"]}
    packed = place_nodes([stated, {"gpus": 16, "placement": "packed"}], 8, 16)
    assert packed == [(0, 1, 2, 3), (4, 5)]
    spread = place_nodes([stated, {"gpus": 32, "placement": "spread"}], 8, 16)
    assert spread[1] == (4, 7, 10, 13)  # evenly over the 12 free nodes
    r7 = place_nodes([stated, {"gpus": 32, "placement": {"policy": "random", "seed": 7}}], 8, 16)
    again = place_nodes([stated, {"gpus": 32, "placement": {"policy": "random", "seed": 7}}], 8, 16)
    r8 = place_nodes([stated, {"gpus": 32, "placement": {"policy": "random", "seed": 8}}], 8, 16)
    assert r7 == again and r7 != r8
    for got in (packed, spread, r7, r8):
        assert not set(got[0]) & set(got[1])


def test_a_job_stating_nothing_runs_right_after_the_previous_one():
    assert place_nodes(_jobs({"first_gpu": 32}, {}), 8, 16) == [(4, 5), (6, 7)]


@pytest.mark.parametrize(("jobs", "field", "words"), [
    (_jobs({"nodes": [0, 1, 2]}), "jobs[0].nodes", "needs 2"),
    (_jobs({"nodes": [15, 16]}), "jobs[0]", "run past"),
    (_jobs({"nodes": [0, 1]}, {"nodes": [1, 2]}), "jobs[1]", "overlaps job 0"),
    (_jobs({"nodes": [0, 1], "first_gpu": 0}), "jobs[0].nodes", "must then be absent"),
    (_jobs({"first_gpu": 0, "placement": "spread"}), "jobs[0].first_gpu", "must then be absent"),
    (_jobs({"placement": "best"}), "jobs[0].placement", "packed, spread, random"),
    (_jobs({"placement": {"policy": "spread", "seed": 3}}), "jobs[0].placement.seed", "only a random"),
    (_jobs({"placement": {"policy": "random", "seed": "x"}}), "jobs[0].placement.seed", "integer"),
    (_jobs({"placement": {"policy": "random", "sede": 1}}), "jobs[0].placement.sede", "unknown field"),
    ([{"gpus": 200, "placement": "packed"}], "jobs[0]", "run past"),
])
def test_placement_errors_name_the_job_and_field(jobs, field, words):
    with pytest.raises(SpecError) as err:
        place_nodes(jobs, 8, 16)
    assert err.value.field == field and words in err.value.rule


def _fleet(a: dict, b: dict | None) -> dict:
    fleet = copy.deepcopy(FLEET)
    fleet["jobs"][0].update(a)
    if b is None:
        fleet["jobs"] = fleet["jobs"][:1]
    else:
        fleet["jobs"][1].update(b)
    return fleet


def test_interleaved_jobs_contend_more_than_packed_ones(engine):
    """Two jobs each in their own half meet only where their halves' uplinks join; on alternate
    nodes each crosses every leaf's uplinks beside the other, so each slows the other more."""
    packed = evaluate_fleet(engine, _fleet({}, {}))
    interleaved = evaluate_fleet(engine, _fleet({"nodes": ["0-62:2"]}, {"nodes": ["1-63:2"]}))
    assert interleaved.jobs[0].placement.nodes == tuple(range(0, 64, 2))
    for p, i in zip(packed.jobs, interleaved.jobs, strict=True):
        assert i.slowdown > p.slowdown
        assert i.shared.step_time_s > p.shared.step_time_s
    # A job spread over more leaves crosses their uplinks more: never faster on its own share.
    assert interleaved.jobs[0].own_share.step_time_s >= packed.jobs[0].own_share.step_time_s


@pytest.mark.parametrize("place", [{"nodes": ["0-62:2"]}, {"placement": "spread"},
                                   {"placement": {"policy": "random", "seed": 3}}])
def test_a_jobs_answer_never_improves_when_another_job_is_added(engine, place):
    alone = evaluate_fleet(engine, _fleet(place, None)).jobs[0]
    with_b = evaluate_fleet(engine, _fleet(place, {"placement": "packed"}) if "nodes" not in place
                            else _fleet(place, {"nodes": ["1-63:2"]})).jobs[0]
    assert with_b.shared.step_time_s >= alone.shared.step_time_s * (1 - 1e-12)


def test_a_contiguous_aligned_job_keeps_the_fleets_switch_sizes(engine):
    from twin.core.scenario_io import resolve_cluster

    whole = resolve_cluster(FLEET["cluster"], engine.catalog)
    h = engine.hierarchy_of(whole)
    aligned = Placement(tuple(range(32)), 256, 8)
    assert job_tier_spans(h, aligned) == [min(t.span_gpus, 256) for t in h.tiers[1:-1]] + [256]
    spread = Placement(tuple(range(0, 64, 2)), 256, 8)
    assert all(s <= a for s, a in zip(job_tier_spans(h, spread), job_tier_spans(h, aligned), strict=True))
    assert job_tier_spans(h, spread) != job_tier_spans(h, aligned)
