"""DeepEP's kernels priced as each moves its bytes (issue 36, item 4): the normal and V2 hybrid
kernels forward over NVLink and deduplicate per node; the low-latency kernels send one message
per (token, selected expert) straight to its rank, with no per-peer latency term.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from twin.core.collective_types import bus_factor
from twin.core.collectives import dedup_dispatch_cost, direct_dispatch_cost
from twin.core.errors import SpecError
from twin.core.p2p_collectives import _P2P_BASE_US, _a2a_stages, _p2p_latency
from twin.core.scale_up_shapes import group_up_a2a_bw
from twin.core.units import US
from twin.reference import collective_setup, ep_predicted_GBps, ep_workload
from twin.reference.collective_validation import validate_collectives


def _case(num_gpus: int, **workload: Any) -> dict[str, Any]:
    return {"id": f"ep{num_gpus}", "op": "ep_dispatch",
            "cluster": {"gpu": "H800-SXM-80GB", "num_gpus": num_gpus, "gpus_per_node": 8,
                        "scale_out": {"fabric": "infiniband", "gbps_per_gpu": 400}},
            "points": [{"busbw_GBps": 50}], "workload": {"dispatch_dtype": "fp8", **workload}}


def _setup(engine, case):
    setup = collective_setup(engine, case)
    return setup.span, setup.hierarchy


def test_low_latency_defaults_are_its_benchmarks():
    """tests/test_low_latency.py: 128 tokens a rank, hidden 7168, top-8 of 288 experts."""
    wl = ep_workload(_case(16, kernel="low_latency"), "ep_dispatch")
    assert (wl.tokens, wl.top_k, wl.experts, wl.kernel) == (128, 8, 288, "low_latency")
    normal = ep_workload(_case(16), "ep_dispatch")
    assert (normal.tokens, normal.experts, normal.kernel) == (4096, 0, "normal")


def test_low_latency_sends_each_expert_copy_directly(engine):
    """Its time is the slower of the NVLink and RDMA shares of tokens x top_k copies, plus one base
    and one network step; its bandwidth is every copy's bytes over that time."""
    case = _case(32, kernel="low_latency")
    span, h = _setup(engine, case)
    wl = ep_workload(case, "ep_dispatch")
    gbps, cost = ep_predicted_GBps(wl, span, h)
    size = wl.tokens * wl.top_k * wl.token_bytes
    t_intra, t_inter, _ = _a2a_stages(size, span, h, group_up_a2a_bw(span, h))
    assert float(cost.time_s) > max(t_intra, t_inter) + _P2P_BASE_US * US
    assert gbps == pytest.approx(size / float(cost.time_s) / 1e9)
    assert float(cost.busbw_Bps) == pytest.approx(size * bus_factor("all_to_all", span.n) / float(cost.time_s))
    # Across nodes the copies a node-deduplicated dispatch would merge all cross the network.
    dedup = dedup_dispatch_cost(wl.token_bytes, wl.tokens, wl.top_k, span, h)
    assert float(cost.time_s) > float(dedup.time_s)


def test_low_latency_latency_has_no_per_peer_term(engine):
    """One token: the time is latency-bound and does not grow with the peers as NCCL-style p2p does."""
    times, p2p = [], []
    for n in (16, 64, 256):
        span, h = _setup(engine, _case(n, kernel="low_latency"))
        times.append(float(direct_dispatch_cost(7168.0, 1, 8, span, h).time_s))
        p2p.append(float(_p2p_latency(span.n, span, h)))
    assert times[-1] == pytest.approx(times[0], rel=0.05)
    assert p2p[-1] > 4 * times[-1]  # NCCL-style p2p posts 255 peers one by one


def test_more_tokens_never_make_a_low_latency_dispatch_faster(engine):
    span, h = _setup(engine, _case(64, kernel="low_latency"))
    ts = [float(direct_dispatch_cost(7168.0, t, 8, span, h).time_s) for t in (1, 16, 128, 512, 4096)]
    assert ts == sorted(ts)


@pytest.mark.parametrize("alias", ["hybrid", "v2", "HYBRID"])
def test_v2_hybrid_is_priced_as_the_normal_kernels(engine, alias):
    base = _case(32, top_k_groups=4)
    other = copy.deepcopy(base)
    other["workload"]["kernel"] = alias
    report = validate_collectives(engine, {"cases": [base, {**other, "id": "v2"}]})
    got = {r.id: r.predicted for r in report.cases}
    assert got["v2"] == got["ep32"]


def test_an_unpriced_kernel_is_refused_naming_the_field():
    with pytest.raises(SpecError) as err:
        ep_workload(_case(16, kernel="direct"), "ep_dispatch")
    assert err.value.field == "workload.kernel" and "low_latency" in err.value.rule
