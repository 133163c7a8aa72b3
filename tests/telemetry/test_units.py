"""Pure telemetry math: rates, de-duplication, resets, name mapping, health, calibration fit."""

from __future__ import annotations

import math

import pytest

from twin.core.calibration import FitSettings, Observation, fit, live_calibration
from twin.core.counter_rates import update_counter, update_gauge
from twin.core.errors import PluginError
from twin.core.health import ComponentView, assess, tier_status
from twin.core.specs import Calibration
from twin.core.telemetry_vocab import Condition, MetricMapping, normalize_name
from twin.engine import Engine
from twin.telemetry.mapping import MetricCatalog

S = 10**9


def test_counter_rate_duplicate_and_reset() -> None:
    p, out = update_counter(None, 1 * S, 10 * S, 1000.0)
    assert out == "first" and p.derived is None
    p, out = update_counter(p, 1 * S, 20 * S, 3000.0)
    assert out == "rate" and p.derived == pytest.approx(200.0)
    same, out = update_counter(p, 1 * S, 20 * S, 3000.0)  # the same point re-sent
    assert out == "duplicate" and same is p
    older, out = update_counter(p, 1 * S, 15 * S, 2000.0)  # an older point arriving late
    assert out == "duplicate" and older is p
    r, out = update_counter(p, 1 * S, 30 * S, 500.0)  # value dropped: counter restarted from 0
    assert out == "reset" and r.derived == pytest.approx(50.0)
    r2, out = update_counter(p, 25 * S, 30 * S, 500.0)  # restarted at a start time inside the interval
    assert out == "reset" and r2.derived == pytest.approx(100.0)
    r3, out = update_counter(p, 25 * S, 30 * S, 4000.0)  # exporter restarted, hardware counter kept going
    assert out == "reset" and r3.derived == pytest.approx(100.0)
    d, out = update_counter(None, 10 * S, 20 * S, 40.0, delta=True)  # delta temporality
    assert d.derived == pytest.approx(4.0)


def test_gauge_dedupe() -> None:
    g, _ = update_gauge(None, 5 * S, 1.5)
    g2, out = update_gauge(g, 5 * S, 9.0)
    assert out == "duplicate" and g2.derived == 1.5


@pytest.fixture(scope="module")
def catalog() -> MetricCatalog:
    return MetricCatalog.from_plugins(Engine(autoload=False).pm)


@pytest.mark.parametrize("name,signal", [
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "tx_Bps"),
    ("dcgm_fi_prof_nvlink_tx_bytes", "tx_Bps"),                     # the Python SDK lower-cases
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clock_event_reasons"),  # old name
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "clock_event_reasons"),    # DCGM 3.3+ name
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L7", "crc_errors_per_s"),
    ("node_infiniband_port_data_transmitted_bytes_total", "tx_Bps"),
    ("node_infiniband_port_data_transmitted_bytes", "tx_Bps"),      # _total dropped by OTLP translation
    ("node_infiniband_port_data_transmitted", "tx_Bps"),            # unit suffix dropped too
    ("node_ethtool_rx_prio3_pause_duration", "paused_fraction"),
    ("rx_prio5_pause", "pfc_rx_pause_per_s"),
    ("np_ecn_marked_roce_packets", "ecn_marked_per_s"),
    ("transceiver_rx_power_dbm", "rx_power_dbm"),
    ("fec_uncorrectable_blocks", "fec_uncorrectable_per_s"),
    ("cxl_health_status", "health_status"),
    ("twin.training.step_time", "step_time_s"),
])
def test_catalog_maps_exporter_spellings(catalog: MetricCatalog, name: str, signal: str) -> None:
    hit = catalog.lookup(name)
    assert hit is not None and hit.mapping.signal == signal


def test_catalog_captures_and_unknown(catalog: MetricCatalog) -> None:
    hit = catalog.lookup("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L12")
    assert dict(hit.captures) == {"link": "12"}
    assert catalog.lookup("node_cpu_seconds_total") is None
    assert catalog.lookup("rx_prio3_pause_durationx") is None
    assert normalize_name("Twin.Training.Step_Time") == "twin_training_step_time"


def test_two_plugins_mapping_one_name_is_an_error() -> None:
    a = MetricMapping(("my_metric",), "gpu", "x", plugin="a")
    b = MetricMapping(("MY_METRIC_total",), "gpu", "y", plugin="b")
    with pytest.raises(PluginError, match="'a' and 'b'"):
        MetricCatalog([a, b])


def test_health_states_and_capacity() -> None:
    m = MetricMapping(("rate",), "ib_port", "rate_Bps", capacity="ratio_to_peak")
    s = MetricMapping(("state",), "ib_port", "state", conditions=(Condition("down", "not_in", (4.0,), "not active"),))
    e = MetricMapping(("err",), "ib_port", "err", conditions=(Condition("degraded", ">", 1.0, "errors"),))
    maps = {"rate_Bps": m, "state": s, "err": e}
    up = assess({"rate_Bps": 50e9, "state": 4, "err": 0}, maps, {"rate_Bps": 50e9})
    assert up.state == "up" and up.capacity == 1.0 and not up.evidence
    half = assess({"rate_Bps": 25e9, "state": 4, "err": 3}, maps, {"rate_Bps": 50e9})
    assert half.state == "degraded" and half.capacity == pytest.approx(0.5)
    assert {ev.signal for ev in half.evidence} == {"rate_Bps", "err"}
    down = assess({"rate_Bps": 50e9, "state": 1, "err": 0}, maps, {"rate_Bps": 50e9})
    assert down.state == "down" and down.capacity == 0.0


def test_tier_status_worst_link_and_down_reported() -> None:
    tiers = tier_status([ComponentView("a", "ib_port", "scale_out", "degraded", 0.7),
                         ComponentView("b", "ib_port", "scale_out", "up", 1.0),
                         ComponentView("g", "gpu", "compute", "up", 1.0)])
    assert tiers["scale_out"].capacity == pytest.approx(0.7) and tiers["scale_out"].limited_by == "a"
    tiers = tier_status([ComponentView("a", "ib_port", "scale_out", "down", 0.0)])
    assert tiers["scale_out"].down == ("a",) and 0 < tiers["scale_out"].capacity < 1


def test_fit_is_bounded_explained_and_deadbanded() -> None:
    cal = Calibration()
    slow = Observation("j", observed_s=1.5, predicted_s=1.0,
                       sensitivity={"compute_efficiency": -0.8, "scale_out_bandwidth": -0.15})
    new, adj = fit(cal, [slow], FitSettings(max_step=0.1))
    assert new.compute_efficiency == pytest.approx(1 / 1.1)  # wanted more, held to 10%
    assert all("observed 1.5 s vs predicted 1 s" in a.reason for a in adj)
    assert "limited to 10%" in next(a for a in adj if a.factor == "compute_efficiency").reason
    assert new.scale_up_bandwidth == 1.0  # no sensitivity: the ridge keeps it
    same, none = fit(cal, [Observation("j", 1.01, 1.0, {"compute_efficiency": -0.8})])
    assert same == cal and none == []
    # Two jobs with different mixes separate the factors: only the network-bound job is slow.
    obs = [Observation("compute", 1.0, 1.0, {"compute_efficiency": -0.9, "scale_out_bandwidth": -0.05}),
           Observation("network", 1.2, 1.0, {"compute_efficiency": -0.3, "scale_out_bandwidth": -0.6})]
    new, _ = fit(cal, obs, FitSettings(max_step=1.0))
    assert new.scale_out_bandwidth < 0.85 and new.compute_efficiency > 0.95
    # Repeated fits converge toward the observation and stay in bounds.
    for _ in range(50):
        pred = 1.0 * (cal.compute_efficiency ** -0.8)
        cal, _ = fit(cal, [Observation("j", 5.0, pred, {"compute_efficiency": -0.8})])
        assert 0.25 <= cal.compute_efficiency <= 2.0
    assert cal.compute_efficiency == 0.25  # held at the bound: the model, not calibration, is off


def test_live_calibration_applies_capacity() -> None:
    cal = live_calibration(Calibration(scale_out_bandwidth=0.9), {"scale_out": 0.5})
    assert cal.scale_out_bandwidth == pytest.approx(0.45) and cal.compute_efficiency == 1.0
    assert math.isclose(live_calibration(Calibration(), {"scale_out": 0.0}).scale_out_bandwidth, 1e-3)


def test_divergence_is_an_otel_metric(tmp_path) -> None:
    """The twin's own divergence metric, read through the OpenTelemetry SDK."""
    import time as _time

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from tests.telemetry.conftest import EXAMPLES
    from twin.telemetry.otlpbuild import request
    from twin.telemetry.service import TelemetryService
    from twin.telemetry.telemetry_config import TelemetryConfig

    reader = InMemoryMetricReader()
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0),
                           meter_provider=MeterProvider(metric_readers=[reader]))
    try:
        designed = svc.register_job("j", (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text())
        t = _time.time_ns()
        svc.ingest(request({}, [("twin.training.step_time", "gauge", [({"job": "j"}, 0, t, designed * 1.2)])]))
        got = {}
        for rm in reader.get_metrics_data().resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    for dp in m.data.data_points:
                        got[(m.name, tuple(sorted(dp.attributes.items())))] = dp.value
        assert got[("twin.prediction.divergence", (("basis", "designed"), ("training_job", "j")))] == pytest.approx(0.2)
        assert got[("twin.calibration.factor", (("factor", "compute_efficiency"),))] == 1.0
    finally:
        svc.close()


def test_divergence_and_fit_are_recomputed_only_when_their_inputs_change(tmp_path, monkeypatch) -> None:
    """Issue 15 hole 10: polling GetDivergence / Calibrate does not re-evaluate every job each
    call; a new job, observation, calibration or tier state does re-evaluate."""
    import time as _time

    from tests.telemetry.conftest import EXAMPLES
    from twin.telemetry import live_predict
    from twin.telemetry.otlpbuild import request
    from twin.telemetry.service import TelemetryService
    from twin.telemetry.telemetry_config import TelemetryConfig

    calls = {"views": 0, "fit": 0}
    views, fit = live_predict.job_views, live_predict.fit_inputs

    def counted_views(*a, **k):
        calls["views"] += 1
        return views(*a, **k)

    def counted_fit(*a, **k):
        calls["fit"] += 1
        return fit(*a, **k)

    monkeypatch.setattr(live_predict, "job_views", counted_views)
    monkeypatch.setattr(live_predict, "fit_inputs", counted_fit)
    svc = TelemetryService(Engine(autoload=False), TelemetryConfig(state_dir=tmp_path, calibrate_interval_s=0,
                                                                   min_observations=1))
    try:
        text = (EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml").read_text()
        designed = svc.register_job("j", text, {"hosts": ["node-1"]})
        svc.ingest(request({"host.name": "node-1"}, [
            ("DCGM_FI_DEV_GPU_TEMP", "gauge", [({"gpu": "0"}, 0, _time.time_ns(), 60.0)])]))  # its parts: healthy
        first = svc.divergence()
        first[0]["job"] = "mutated by the caller"
        assert svc.divergence()[0]["job"] == "j" and calls["views"] == 1      # cached, and a copy
        t = _time.time_ns()
        svc.ingest(request({}, [("twin.training.step_time", "gauge", [({"job": "j"}, 0, t, designed * 1.3)])]))
        assert svc.divergence()[0]["observed_step_time_s"] == pytest.approx(designed * 1.3)
        assert calls["views"] == 2                                          # a new observation
        svc.register_job("k", text)
        assert {r["job"] for r in svc.divergence()} == {"j", "k"} and calls["views"] == 3
        assert svc.calibrate()["adjustments"]                               # 30% slow: the fit moves
        svc.divergence()
        assert calls["views"] == 4                                          # the calibration moved
        for _ in range(50):                                                 # until the fit settles
            if not svc.calibrate()["adjustments"]:
                break
        before = calls["fit"]
        svc.calibrate()
        assert calls["fit"] == before                                       # nothing moved: cached
        views_before = calls["views"]
        svc.divergence()
        svc.divergence()
        assert calls["views"] == views_before + 1
        # A part of the job changes state: a NIC port of its host goes down.
        svc.ingest(request({"host.name": "node-1"}, [
            ("node_infiniband_state_id", "gauge", [({"device": "mlx5_0", "port": "1"}, 0, _time.time_ns(), 1.0)])]))
        svc.divergence()
        assert calls["views"] == views_before + 2
    finally:
        svc.close()
