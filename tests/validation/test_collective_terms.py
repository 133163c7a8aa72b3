"""validation/collective_cases.py --terms: which term of the twin's model each case misses,
and what the measurement itself says about that term (hand-worked numbers)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import validation_script
from twin.core.collectives import collective_cost, dispatch_stages
from twin.core.moe_routing import domains_per_token
from twin.reference import collective_setup


def _script():
    return validation_script("collective_cases")


def _case(cid: str, op: str, points: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Two DGX H100-like nodes (8 GPUs, 8 x 400 Gb/s InfiniBand each)."""
    return {"id": cid, "op": op, "algorithm": None, "points": points, **extra,
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 16, "gpus_per_node": 8,
                        "scale_up": {"fabric": "nvlink4", "domain_gpus": 8},
                        "scale_out": {"fabric": "infiniband", "gbps_per_gpu": 400, "nics_per_node": 8}}}


def test_alpha_beta_fit_recovers_intercept_and_slope():
    cc = _script()
    # time = 1 ms + size / 100 GB/s, at 1, 2 and 4 GB
    sizes = [1e9, 2e9, 4e9]
    icpt, slope = cc.fit_alpha_beta(sizes, [1e-3 + s / 100e9 for s in sizes])
    assert icpt == pytest.approx(1e-3)
    assert slope == pytest.approx(100e9)
    assert cc.fit_alpha_beta([1e9], [1e-3]) is None           # one size: nothing to fit
    assert cc.fit_alpha_beta([1e9, 2e9], [2e-3, 1e-3]) is None  # time falling with size


def test_a_curve_reports_the_measured_intercept_and_asymptote(engine):
    """A curve measured as time = 500 us + size x 2(n-1)/n / 150 GB/s gives back 500 us and
    150 GB/s; the twin's fit is its own times at the same sizes, so its slope is its
    incremental busbw between them."""
    cc = _script()
    factor = 2 * 15 / 16
    sizes = [2**28, 2**29, 2**30, 2**31]
    points = [{"bytes": s, "busbw_GBps": s * factor / (500e-6 + s * factor / 150e9) / 1e9} for s in sizes]
    case = _case("curve", "all_reduce", points)
    got = cc.case_terms(engine, case)
    assert got.regime == "bandwidth"
    assert got.nodes == 2
    assert got.measured_fit[0] == pytest.approx(500e-6, rel=1e-6)
    assert got.measured_fit[1] == pytest.approx(150e9, rel=1e-6)
    setup = collective_setup(engine, case)
    t_lo = float(collective_cost("all_reduce", 2**30, setup.span, setup.hierarchy).time_s)
    t_hi = float(collective_cost("all_reduce", 2**31, setup.span, setup.hierarchy).time_s)
    # same algorithm and protocol at 1-2 GiB: the least-squares slope is the two-point one
    assert got.twin_fit[1] == pytest.approx(2**30 * factor / (t_hi - t_lo), rel=0.05)


def test_a_small_message_is_latency_bound(engine):
    cc = _script()
    got = cc.case_terms(engine, _case("tiny", "all_gather", [{"bytes": 1024, "busbw_GBps": None, "time_us": 30.0}]))
    assert got.regime == "latency"
    assert got.latency_share > 0.95
    assert got.measured_fit is None  # one size


def test_an_expert_dispatch_reports_its_two_stages(engine):
    """EP16 over two domains, 4096 tokens of 7168 x 2 B, top-8, unlimited routing: the RDMA
    stage carries each token to the remote domain with probability (m-1)/m of the
    2 (1 - (1/2)^8) = 1.9921875 domains it reaches, at the cross-domain bandwidth."""
    cc = _script()
    case = _case("ep", "ep_dispatch", [{"bytes": None, "busbw_GBps": 40.0}],
                 workload={"tokens_per_rank": 4096, "hidden": 7168, "top_k": 8, "dispatch_dtype": "bf16"})
    got = cc.case_terms(engine, case)
    assert domains_per_token(2, 8) == pytest.approx(1.9921875)
    setup = collective_setup(engine, case)
    st = dispatch_stages(7168 * 2.0, 4096.0, 8, setup.span, setup.hierarchy)
    assert got.stages[0] == pytest.approx(4096 * 7168 * 2.0 * 1.9921875 / 2 / float(st.rdma_bw_Bps))
    # NVLink stage: each token to its 8 destination ranks, 7 of 8 of them off the receiving GPU
    assert got.stages[1] == pytest.approx(4096 * 7168 * 2.0 * 8 * 7 / 8 / float(st.nvlink_bw_Bps))
    # the figure is (token, node) pairs x token bytes / time, so the implied time is that over 40 GB/s
    assert got.measured_s == pytest.approx(4096 * 1.9921875 * 7168 * 2.0 / 40e9)


def test_an_unscored_case_gives_the_readers_reason(engine):
    cc = _script()
    got = cc.case_terms(engine, _case("none", "all_reduce", []))
    assert isinstance(got, str)
    assert "no bus bandwidth" in got
