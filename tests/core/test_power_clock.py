"""One SKU against another: the tensor clock a power limit sustains (issue 35, item 2).

Each test works its number out by hand from ``twin.core.power_clock``'s definition (the
power-capped roofline: throughput proportional to the power limit, relative to the SKU the
generation's GEMM figures were measured on) and checks the model against it.
"""

from __future__ import annotations

import dataclasses

import pytest

from twin.core.compute import device_for, gemm_time
from twin.core.conditions import Impact, degrade_cluster
from twin.core.power_clock import POWER_REFERENCES, power_clock_factor
from twin.core.scenario_io import resolve_gpu
from twin.testing import assert_batch_matches_one_by_one

REF = POWER_REFERENCES["blackwell"]


def _gpu(engine, name):
    return resolve_gpu(name, engine.catalog)


def _device(engine, gpu, precision="bf16"):
    return device_for(gpu, precision, gpu.efficiency, 1.0, "auto")


def _factor(tdp_w, peak16):
    """The module's formula, written out: (P - P_static) / (P_ref - P_static) x peak16_ref / peak16."""
    return (tdp_w - REF.static_w) / (REF.tdp_w - REF.static_w) * REF.peak16_tflops / peak16


@pytest.mark.parametrize(("name", "tdp_w", "peak16"), [
    ("B200-SXM-180GB", 1000.0, 2250.0),   # the reference: its measured efficiencies as they are
    ("GB200", 1200.0, 2500.0),
    ("B300-SXM-270GB", 1100.0, 2250.0),
    ("GB300", 1400.0, 2500.0),
])
def test_each_blackwell_sku_runs_at_the_clock_its_power_limit_sustains(engine, name, tdp_w, peak16):
    gpu = _gpu(engine, name)
    assert (gpu.tdp_w, gpu.peak_tflops["bf16"]) == (tdp_w, peak16)
    want = _factor(tdp_w, peak16)
    assert power_clock_factor(gpu, gpu.efficiency.gemm["bf16"]) == pytest.approx(want, rel=1e-12)
    dev = _device(engine, gpu, "fp8")
    assert dev.peak_flops == pytest.approx(gpu.peak_tflops["fp8"] * 1e12 * want, rel=1e-12)
    assert dev.attn_peak_flops == pytest.approx(peak16 * 1e12 * want, rel=1e-12)


def test_gb300_runs_the_same_plan_faster_than_gb200(engine):
    """Equal datasheet peaks, 1,400 W against 1,200 W: its GEMMs run 1400/1200 as fast, HBM as fast;
    a GEMM-bound step is faster by nearly that (without the power term the two were predicted equal)."""
    gb200, gb300 = _device(engine, _gpu(engine, "GB200")), _device(engine, _gpu(engine, "GB300"))
    assert gb300.peak_flops / gb200.peak_flops == pytest.approx(1400.0 / 1200.0, rel=1e-12)
    assert gb300.hbm_Bps == gb200.hbm_Bps
    plan = {"tp": 4, "pp": 4, "gbs": 256, "mbs": 1, "precision": "bf16"}
    steps = {}
    for system in ("GB200-NVL72", "GB300-NVL72"):
        scn = {"cluster": {"system": system, "num_gpus": 256}, "model": "llama3.1-70b", "plan": plan}
        steps[system] = engine.evaluate(scn).step_time_s
    ratio = steps["GB200-NVL72"] / steps["GB300-NVL72"]
    assert 1.10 < ratio < 1400.0 / 1200.0 + 0.02


def test_b300_runs_faster_than_b200_by_its_power_limit(engine):
    b200, b300 = _device(engine, _gpu(engine, "B200-SXM-180GB")), _device(engine, _gpu(engine, "B300-SXM-270GB"))
    assert b300.peak_flops / b200.peak_flops == pytest.approx(1100.0 / 1000.0, rel=1e-12)
    # A large GEMM is compute-bound: its time falls by the same ratio (equal SM counts aside, the
    # tile/wave utilisation of 148 and 160 SMs differs, so compare each against its own device).
    t200 = gemm_time(b200, 8192, 8192, 8192)
    t300 = gemm_time(b300, 8192, 8192, 8192)
    assert t300 < t200


def test_generations_without_a_power_reference_keep_their_datasheet(engine):
    """Hopper at 700 W is near its clock ceiling: no power term (factor 1), nor for a GPU
    without a published power limit."""
    h100 = _gpu(engine, "H100-SXM-80GB")
    assert power_clock_factor(h100, h100.efficiency.gemm["bf16"]) == 1.0
    assert _device(engine, h100).peak_flops == h100.peak_tflops["bf16"] * 1e12
    unknown = dataclasses.replace(_gpu(engine, "GB200"), tdp_w=None)
    assert power_clock_factor(unknown, unknown.efficiency.gemm["bf16"]) == 1.0


def test_the_factor_stops_at_the_clock_ceiling(engine):
    """A 5 kW Blackwell would pass the best fraction of its peak ever measured (0.87): it stops there."""
    gpu = dataclasses.replace(_gpu(engine, "GB200"), tdp_w=5000.0)
    gemm16 = gpu.efficiency.gemm["bf16"]
    assert _factor(5000.0, 2500.0) * gemm16 > REF.max_fraction
    assert power_clock_factor(gpu, gemm16) == pytest.approx(REF.max_fraction / gemm16)


def test_a_clock_cap_above_the_power_limited_clock_does_not_slow_a_power_bound_sku(engine):
    """A compute degradation scales the peaks (a lower clock ceiling). On a power-bound SKU it
    binds only below the clock the power limit allows: min(power rate, degraded ceiling)."""
    gpu = _gpu(engine, "B200-SXM-180GB")
    cluster = engine.scenario({"cluster": {"system": "DGX-B200", "num_gpus": 8}, "model": "llama3.1-8b",
                               "plan": {"gbs": 8}}).cluster
    nominal = _device(engine, gpu)
    mild = degrade_cluster(cluster, Impact(compute=0.9)).gpu
    deep = degrade_cluster(cluster, Impact(compute=0.5)).gpu
    gemm16 = gpu.efficiency.gemm["bf16"]
    ceiling = REF.max_fraction / gemm16                       # in units of the datasheet peak
    assert 0.9 * ceiling > 1.0 > 0.5 * ceiling                 # B200's power-limited factor is 1
    assert _device(engine, mild).peak_flops == pytest.approx(nominal.peak_flops, rel=1e-12)
    assert _device(engine, deep).peak_flops == pytest.approx(0.5 * ceiling * nominal.peak_flops, rel=1e-12)


def test_the_batch_path_prices_each_sku_as_one_by_one(engine):
    scns = []
    for system, gpus in (("DGX-B200", 64), ("GB200-NVL72", 64), ("GB300-NVL72", 64), ("DGX-H100", 64)):
        for precision in ("bf16", "fp8"):
            scns.append(engine.scenario({"cluster": {"system": system, "num_gpus": gpus}, "model": "llama3.1-8b",
                                         "plan": {"tp": 2, "gbs": 128, "mbs": 1, "precision": precision}}))
    assert_batch_matches_one_by_one(engine, scns)
