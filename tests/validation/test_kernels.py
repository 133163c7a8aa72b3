"""validation/kernels.py: the H200 kernel measurements and the compute model's constants."""

from __future__ import annotations

import json

import pytest

from tests.conftest import validation_script


@pytest.fixture(scope="module")
def kernels():
    return validation_script("kernels")


@pytest.fixture(scope="module")
def data(kernels):
    return kernels.load()


@pytest.fixture(scope="module")
def report(kernels, data):
    return kernels.report(data)


def test_the_measurements_are_whole_and_were_checked(data):
    """Every shape in both precisions, each timed; one product per precision checked against
    an fp32 reference (bf16 rounding ~1e-3, E4M3 ~5e-2)."""
    for precision, bound in (("bf16", 1e-2), ("fp8", 1e-1)):
        rows = [r for r in data["gemm"] if r["precision"] == precision]
        assert len(rows) == 384
        assert all(r["ms"] > 0 and r["ms_stream"] > 0 and r["TFLOPs"] > 0 for r in rows)
        checked = [r["rel_error"] for r in rows if "rel_error" in r]
        assert len(checked) == 1 and checked[0] < bound
    assert data["source"] and "gpu_kernels.py" in data["source"]


def test_the_profiles_gemm_and_hbm_figures_are_what_was_measured(report):
    """Hopper's kernel-level constants (twin/presets/efficiency.yaml) stand for a large,
    well-shaped GEMM and for streaming kernels: within 5% of the best shapes measured and of
    the measured HBM bandwidth."""
    for precision in ("bf16", "fp8"):
        p = report["precisions"][precision]
        assert p["best_shape_efficiency"] == pytest.approx(p["profile_gemm"], rel=0.05)
    hbm = report["hbm"]
    assert hbm["read_fraction"] == pytest.approx(hbm["profile_hbm"], rel=0.05)
    assert hbm["copy_fraction"] == pytest.approx(hbm["profile_hbm"], rel=0.05)


def test_the_kernel_model_is_fast_on_shallow_gemms(report):
    """What the measurement shows of the model (docs/fidelity.md, "GEMM kernels measured on an
    H200"): at kernel level it is faster than measured, and the more so the shallower the GEMM;
    its median miss back to back stays where it was measured (11.9% bf16, 10.9% fp8), and
    each GEMM timed alone (a launch gap each) misses by more."""
    for precision in ("bf16", "fp8"):
        p = report["precisions"][precision]
        assert p["gemm"]["median_abs_pct"] < 15.0
        assert p["gemm_alone"]["median_abs_pct"] > p["gemm"]["median_abs_pct"]
        signed = [s["signed_median_pct"] for _, s in p["by_depth"]]
        assert all(x < 0 for x in signed)
        assert signed[0] < signed[-1]      # shallowest misses more than deepest


def test_a_bad_file_is_refused_naming_the_field(kernels, tmp_path):
    bad = tmp_path / "k.json"
    bad.write_text(json.dumps({"schema": "twin-kernel-measurements/v1", "gemm": [{"m": 1, "n": 1, "k": 1,
                                                                                  "precision": "bf16", "ms": 0}]}))
    with pytest.raises(ValueError, match=r"gemm\[0\]\.ms must be > 0"):
        kernels.load(bad)
    bad.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ValueError, match="schema"):
        kernels.load(bad)


def test_the_script_prints_the_comparison(kernels, capsys):
    assert kernels.main([]) == 0
    out = capsys.readouterr().out
    assert "bf16: 384 GEMMs back to back" in out and "fp8: 384 GEMMs back to back" in out and "HBM: read" in out
    assert "attention (cudnn)" in out
