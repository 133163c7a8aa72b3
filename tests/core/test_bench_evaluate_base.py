"""benchmarks/bench_evaluate.py --base: the A/B of two checkouts on the same never-seen scenarios."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("bench_evaluate", ROOT / "benchmarks" / "bench_evaluate.py")
assert spec is not None and spec.loader is not None
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench
spec.loader.exec_module(bench)


def test_each_side_imports_its_own_checkout(tmp_path: Path) -> None:
    """A side's path makes ``twin`` and ``twin_plugins`` import from that checkout; the child
    times the scenarios there and reports what it refused."""
    path = bench.checkout_path(ROOT, tmp_path / "side")
    assert (path / "twin").resolve() == (ROOT / "twin").resolve()
    assert (path / "twin_plugins").resolve() == (ROOT / "plugins").resolve()
    scenarios = tmp_path / "scenarios.json"
    good = bench.family(3)
    bad = {"cluster": {"system": "DGX-H100", "num_gpus": 7}, "model": "llama3.1-8b", "plan": {"tp": 8}}
    scenarios.write_text(bench.json.dumps({"warm": good[:1], "timed": [*good[1:], bad]}), encoding="utf-8")
    rates = bench.child_rates(path, scenarios)
    assert rates["one_by_one"] > 0 and rates["batch"] > 0
    assert rates["one_by_one_refused"] == 1 and rates["batch_refused"] == 1
    assert rates["gc_us"] >= 0 and rates["kept"] >= 0


def test_compare_prints_both_sides_and_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    bench.compare(ROOT, 4, 1)
    out = capsys.readouterr().out
    assert "round 1 base" in out and "round 1 this" in out
    assert out.count("the base per evaluation") == 2


def test_a_directory_that_is_not_a_checkout_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(SystemExit, match="not a checkout of the twin"):
        bench.checkout_path(tmp_path / "elsewhere", tmp_path / "side")
