"""Distinct destination ranks and domains of a token's expert dispatch (DeepEP sends a
token once per destination rank and domain), for random and contiguous routing, against
hand-worked counts; and what that does to the expert-parallel all-to-all."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from twin.core.moe_routing import dispatch_fanout, domains_per_token

MOE = {"cluster": {"system": "DGX-H100", "num_gpus": 8},
       "model": {"name": "m", "layers": 4, "hidden": 2048, "heads": 16, "vocab": 32000, "seq_len": 4096,
                 "gated_mlp": True, "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}},
       "plan": {"tp": 1, "ep": 8, "pp": 1, "gbs": 8, "mbs": 1, "moe_dispatcher": "deepep"}}


def test_contiguous_routing_reaches_the_ranks_its_experts_span():
    # DeepSeek-V3 on EP64 (4 experts a rank, 8 ranks a node): experts 8i..8i+7 sit on
    # ranks 2i and 2i+1 of one node.
    assert dispatch_fanout(256, 8, 64, 8, "contiguous") == (2.0, 1.0)
    # Qwen3-30B on EP8 (16 experts a rank): experts 8i..8i+7 are one rank's.
    assert dispatch_fanout(128, 8, 8, 8, "contiguous") == (1.0, 1.0)
    # Kimi K2 on EP32 (12 a rank): starts 0, 8, 16 of each 24 experts span 1, 2, 1 ranks.
    assert dispatch_fanout(384, 8, 32, 8, "contiguous") == pytest.approx((4 / 3, 1.0))
    # per point in a batch
    ranks, domains = dispatch_fanout(256, 8, np.array([64, 8]), np.array([8, 8]), "contiguous")
    assert ranks.tolist() == [2.0, 1.0] and domains.tolist() == [1.0, 1.0]


def _none_of(pool: int, held: int, k: int) -> float:
    """C(pool - held, k) / C(pool, k), by the binomial coefficients themselves."""
    return math.comb(pool - held, k) / math.comb(pool, k)


def test_random_routing_draws_k_distinct_experts():
    # DeepSeek-V3 on EP64: 256 experts, 4 a rank, 32 a node of 8 ranks; top-8 distinct experts
    # miss a given rank with probability C(252, 8) / C(256, 8), a node with C(224, 8) / C(256, 8).
    r, d = dispatch_fanout(256, 8, 64, 8, "random")
    assert r == pytest.approx(64 * (1 - _none_of(256, 4, 8)), rel=1e-12)
    assert d == pytest.approx(8 * (1 - _none_of(256, 32, 8)), rel=1e-12)
    # Drawing without replacement reaches more ranks than independent draws would (7.68 > 7.58).
    assert r > 64 * (1 - (63 / 64) ** 8)
    # Mixtral: top-2 of 8 experts, one a rank: always 2 ranks (independent draws: 1.875).
    assert dispatch_fanout(8, 2, 8, 8, "random") == (2.0, 1.0)
    # One expert a rank: every one of the k experts is its own rank.
    assert dispatch_fanout(256, 8, 256, 8, "random")[0] == pytest.approx(8.0, rel=1e-12)
    # Node-limited routing (4 of 8 nodes): the 8 experts among the 128 of those 4 nodes.
    r4, d4 = dispatch_fanout(256, 8, 64, 8, "random", groups=4)
    assert r4 == pytest.approx(32 * (1 - _none_of(128, 4, 8)), rel=1e-12)
    assert d4 == pytest.approx(4 * (1 - _none_of(128, 32, 8)), rel=1e-12)
    # per point in a batch, as one by one
    ranks, domains = dispatch_fanout(256, 8, np.array([64, 256]), np.array([8, 8]), "random")
    assert ranks.tolist() == pytest.approx([r, 8.0], rel=1e-12) and domains[0] == pytest.approx(d, rel=1e-12)
    # experts that do not split over the ranks: contiguous falls back to random
    assert dispatch_fanout(100, 8, 64, 8, "contiguous") == dispatch_fanout(100, 8, 64, 8, "random")


def test_without_an_expert_count_the_draws_are_independent():
    """A collectives case that does not state its expert count: each of the k experts on its own
    uniformly chosen domain (with replacement)."""
    assert domains_per_token(8, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8))
    assert domains_per_token(8, 8, experts=256) == pytest.approx(8 * (1 - _none_of(256, 32, 8)))


def test_a_contiguous_gate_moves_one_copy_a_token_where_random_routing_moves_five(engine):
    """EP8 in one node, 128 experts, top-8: DeepEP sends 8(1 - C(112, 8)/C(128, 8)) = 5.34 copies
    of a token under random routing and 1 under the contiguous gate; the all-to-all's time and
    bytes scale so (32K tokens a micro-batch: the per-call latency is within a few per cent)."""
    long = {**MOE, "model": {**MOE["model"], "seq_len": 32768}}
    rand = engine.evaluate(long)
    contig = engine.evaluate({**long, "model": {**long["model"], "moe": {**long["model"]["moe"],
                                                                        "routing": "contiguous"}}})
    copies = 8 * (1 - _none_of(128, 16, 8))
    assert contig.comm_issued_s["ep"] / rand.comm_issued_s["ep"] == pytest.approx(1.0 / copies, rel=0.04)
    assert contig.bytes_per_step["ep"] / rand.bytes_per_step["ep"] == pytest.approx(1.0 / copies, rel=1e-9)


def test_routing_is_the_same_on_the_batch_path(engine):
    from twin.core.scenario_io import scenario_from_dict

    scns = [scenario_from_dict(
        {**MOE, "cluster": {"system": "DGX-H100", "num_gpus": n},
         "model": {**MOE["model"], "moe": {**MOE["model"]["moe"], "routing": routing}},
         "plan": {**MOE["plan"], "ep": ep, "gbs": n}}, engine.catalog)
        for routing in ("random", "contiguous") for n, ep in ((8, 8), (16, 16), (32, 32))]
    batch = engine.evaluate_many(scns, require_fit=False)
    for i, scn in enumerate(scns):
        est = engine.evaluate(scn, report=False)
        assert batch.columns["step_time_s"][i] == est.step_time_s, dataclasses.asdict(scn.model.moe)
