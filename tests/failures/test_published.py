"""Default rates come from the published Llama 3 counts, and reproduce its interruption interval."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import EXAMPLES, REFERENCE
from twin.core.failures import failure_rates
from twin.core.failures.failure_rates import LLAMA3_CAUSES, network_rates

LLAMA = EXAMPLES / "llama3-405b-16k-roce.yaml"
PUBLISHED_MTBI_H = 54 * 24 / 419  # 3.09 h (failures.yaml: llama3-405b-54day-summary)


def _cases() -> dict[str, dict]:
    data = yaml.safe_load((REFERENCE / "failures.yaml").read_text())
    return {c["id"]: c for c in data["cases"]}


def test_rate_table_matches_the_reference_file():
    cases = _cases()
    summary = cases["llama3-405b-54day-summary"]["measured"]
    assert summary["period_days"] == failure_rates.LLAMA3_PERIOD_DAYS
    assert summary["unexpected"] == failure_rates.LLAMA3_UNEXPECTED == sum(c.count for c in LLAMA3_CAUSES)
    assert summary["planned"] == failure_rates.LLAMA3_PLANNED
    for cause in LLAMA3_CAUSES:
        assert cases[cause.case_id]["measured"]["interruption_count"] == cause.count, cause.case_id
    per_gpu = dict((m, r) for m, r, _, _ in failure_rates.llama3_modes("gpu"))
    derived = cases["llama3-405b-interruptions-faulty-gpu"]["derived"]["rate_per_gpu_per_year_at_16384"]
    assert per_gpu["faulty_gpu"] == pytest.approx(derived, rel=1e-3)
    hpn = cases["alibaba-hpn-failure-rates"]["measured"]
    assert hpn["nic_tor_link_failure_pct_per_month"] == failure_rates.ALIBABA_LINK_PCT_PER_MONTH
    assert hpn["tor_switch_critical_error_pct_per_month"] == failure_rates.ALIBABA_SWITCH_PCT_PER_MONTH


def test_network_split_uses_the_twins_own_llama3_fabric(fa):
    scn, _ = fa.load(LLAMA)
    groups = fa.inventory(scn).groups
    links = sum(g.count for g in groups if g.kind == "link")
    switches = sum(g.count for g in groups if g.kind == "switch")
    assert (links, switches) == (failure_rates.LLAMA3_LINKS, failure_rates.LLAMA3_SWITCHES)
    per_link, per_switch, _ = network_rates()
    # Cross-check between fleets: Alibaba HPN measures 0.057 %/month per NIC-ToR link.
    assert per_link == pytest.approx(0.057 * 12 / 100, rel=0.1)
    assert per_switch / per_link == pytest.approx(0.051 / 0.057)


def test_llama3_405b_interruption_interval_and_effective_training_time(fa):
    rep = fa.analyze(LLAMA)
    f = rep.figures
    # Published: 419 unexpected interruptions in 54 days (one per 3.09 h), > 90 % ETT.
    assert f["mean_time_between_interruptions_h"] == pytest.approx(PUBLISHED_MTBI_H, rel=0.10)
    assert f["effective_training_time_pct"] > 90.0
    # Why it differs: every published cause is an interruption in the twin except network
    # failures above the ToR (aggregation/core switches and cables), which the fat tree
    # re-routes around; the twin runs those degraded instead of restarting.
    per_link, per_switch, _ = network_rates()
    rerouted = (16384 + 2341) * per_link + (512 + 37) * per_switch  # per year, from the inventory
    expected = 419 / 54 - rerouted / 365
    assert f["expected_interruptions_per_day"] == pytest.approx(expected, rel=1e-9)
    assert f["degraded_events_per_day"] == pytest.approx(rerouted / 365, rel=1e-9)
    # The checkpoint interval is Daly's optimum for a 5.7 TB checkpoint at 2 TB/s.
    assert rep.checkpoint["size_tb"] == pytest.approx(405.85e9 * 14 / 1e12, rel=1e-3)
    assert rep.checkpoint["write_s"] == pytest.approx(rep.checkpoint["size_bytes"] / 2e12)
    assert f["checkpoint_interval_s"] == pytest.approx(f["optimal_checkpoint_interval_s"])


def test_other_fleets_rate_sets_scale_node_failures(fa):
    rep = fa.analyze(LLAMA, failures={"rate_set": "meta-rsc1"})
    node = sum(c.events_per_s for c in rep.classes if c.group.kind in ("gpu", "host", "software", "nic"))
    per_1000_node_days = node * 86400 / 2048 * 1000
    assert per_1000_node_days == pytest.approx(6.5, rel=1e-6)  # Kokolis et al., RSC-1


def test_rate_overrides(fa):
    rep = fa.analyze(LLAMA, failures={"rates": {"gpu": 0.2, "host:ssd": 0.5}})
    gpu = [c for c in rep.classes if c.group.name == "gpu" and c.annual_rate]
    assert sum(c.annual_rate for c in gpu) == pytest.approx(0.2)
    ssd = next(c for c in rep.classes if c.mode.key == "host:ssd")
    assert ssd.annual_rate == 0.5 and ssd.rate_source == "failures.rates.host:ssd"
    from twin.core.errors import SpecError

    with pytest.raises(SpecError, match=r"failures\.rates\.gpus: unknown component"):
        fa.analyze(LLAMA, failures={"rates": {"gpus": 0.1}})
    with pytest.raises(SpecError, match=r"failures\.rates\.gpu:melted"):
        fa.analyze(LLAMA, failures={"rates": {"gpu:melted": 0.1}})
