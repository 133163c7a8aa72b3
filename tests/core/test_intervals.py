"""Prediction intervals (``twin.core.intervals``): the table's lookup, back-off and widening, the
shipped table on every estimate, the batch path equal to one by one, narrowing by a job's own
steps, and the method of ``validation/intervals.py`` on residuals whose distribution is known."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import pytest

from tests.conftest import EXAMPLES, validation_script
from twin.core.errors import SpecError
from twin.core.estimate import StepInterval
from twin.core.intervals import IntervalTable, narrowed, scenario_features, stack_family, student_t
from twin.presets import interval_table


def _row(key: dict[str, str], lo: float, hi: float, n: int = 20, fams: int = 4) -> dict[str, Any]:
    return {"key": key, "n": n, "families": fams, "p80_low": lo, "p80_high": hi, "p95_low": lo * 1.5,
            "p95_high": hi * 1.5}


TABLE: dict[str, Any] = {
    "levels": [["generation", "moe"], ["moe"], []],
    "classes": [[_row({"generation": "hopper", "moe": "dense"}, -0.05, 0.10)],
                [_row({"moe": "moe"}, -0.10, 0.30)],
                [_row({}, -0.15, 0.20, n=100, fams=20)]],
    "covered": {"generation": ["hopper", "ampere"], "moe": ["dense", "moe"]},
    "max_gpus": 4096, "widen": 1.25,
}


def _features(generation: str = "hopper", moe: bool = False) -> dict[str, str]:
    return scenario_features(generation, moe, "megatron-core-te", "bf16")


def test_the_finest_class_that_holds_the_scenario_answers():
    table = IntervalTable.from_mapping(TABLE)
    hopper = table.factors(_features(), 512)
    assert (hopper.p80_low, hopper.p80_high) == pytest.approx((math.exp(-0.05), math.exp(0.10)))
    assert hopper.basis == "generation hopper, moe dense" and hopper.runs == 20 and not hopper.widened
    # No (ampere, dense) class: backs off to the whole corpus; (ampere, moe) to the MoE class.
    assert table.factors(_features("ampere"), 512).basis == "all runs"
    assert table.factors(_features("ampere", moe=True), 512).p80_high == pytest.approx(math.exp(0.30))


def test_a_scenario_outside_the_corpus_is_widened_about_the_centre():
    table = IntervalTable.from_mapping(TABLE)
    inside = table.factors(_features("ampere"), 512)
    new_gpu = table.factors(_features("rubin"), 512)
    assert new_gpu.widened == ("generation",)
    assert new_gpu.p80_high / new_gpu.p80_low > inside.p80_high / inside.p80_low
    both = table.factors(_features("rubin"), 100_000)
    assert both.widened == ("generation", "scale")
    centre = (-0.15 + 0.20) / 2
    assert math.log(both.p80_high) == pytest.approx(centre + (0.20 - centre) * 1.25**2)
    assert math.log(both.p80_low) == pytest.approx(centre + (-0.15 - centre) * 1.25**2)
    # A class lying wholly above zero keeps its lower bound from being pushed up by the widening.
    above = copy.deepcopy(TABLE)
    above["classes"][2] = [_row({}, 0.05, 0.25)]
    wide = IntervalTable.from_mapping(above).factors(_features("rubin"), 512)
    assert wide.p80_low < math.exp(0.05) < math.exp(0.25) < wide.p80_high


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda t: t["levels"].__setitem__(0, ["gpu"]), "intervals.levels"),
    (lambda t: t["covered"].__setitem__("vendor", ["x"]), "intervals.covered"),
    (lambda t: t.pop("widen"), "intervals"),
    (lambda t: t["classes"][0][0].__setitem__("p80_low", "wide"), "intervals"),
])
def test_a_malformed_table_is_refused_naming_the_field(mutate, field):
    bad = copy.deepcopy(TABLE)
    mutate(bad)
    with pytest.raises(SpecError) as err:
        IntervalTable.from_mapping(bad)
    assert err.value.field == field


def test_a_table_without_the_whole_corpus_level_is_refused_when_asked():
    bad = copy.deepcopy(TABLE)
    bad["levels"], bad["classes"] = bad["levels"][:1], bad["classes"][:1]
    with pytest.raises(SpecError, match="whole corpus"):
        IntervalTable.from_mapping(bad).factors(_features("ampere"), 8)


def test_stack_presets_fall_into_their_families():
    assert stack_family("megatron-core-te-cudagraphs") == stack_family("nemo-megatron") == "megatron"
    assert stack_family("pytorch-fsdp2") == stack_family("nemo-automodel") == "pytorch"
    assert stack_family("my-stack") == "my-stack"


def test_every_estimate_carries_the_shipped_tables_interval(engine):
    scn = engine.scenario(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml")
    est = engine.evaluate(scn)
    iv = est.interval
    assert iv is not None
    assert iv.p95_low_s <= iv.p80_low_s < iv.p80_high_s <= iv.p95_high_s
    assert iv.p95_low_s < est.step_time_s < iv.p95_high_s
    table = IntervalTable.from_mapping(interval_table())
    want = table.interval(_features(), scn.cluster.num_gpus, est.step_time_s)
    assert (iv.p80_low_s, iv.p80_high_s, iv.basis) == (want.p80_low_s, want.p80_high_s, want.basis)
    assert est.to_dict()["interval"]["p80_high_s"] == iv.p80_high_s


def test_the_batch_path_gives_each_point_its_own_classes_interval(engine):
    base = engine.scenario(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml")
    scns = []
    for prec in ("bf16", "fp8"):
        for gpus in (64, 128):
            scns.append(engine.scenario({"name": f"{prec}-{gpus}", "cluster": {"system": "DGX-H100", "num_gpus": gpus},
                                         "model": "llama3.1-8b", "plan": {"tp": 2, "gbs": 256, "precision": prec}}))
    scns.append(base)
    batch = engine.evaluate_many(scns, require_fit=False)
    lows = set()
    for i, scn in enumerate(scns):
        iv = engine.evaluate(scn, report=False).interval
        assert iv is not None
        got = [batch.columns[f"step_time_{q}_s"][i] for q in ("p80_low", "p80_high", "p95_low", "p95_high")]
        assert got == pytest.approx([iv.p80_low_s, iv.p80_high_s, iv.p95_low_s, iv.p95_high_s], rel=1e-12)
        lows.add(round(iv.p80_low_s / batch.columns["step_time_s"][i], 9))
    assert len(lows) >= 2  # bf16 and fp8 runs are in different classes


def _interval(step: float = 10.0) -> StepInterval:
    return StepInterval(step * 0.9, step * 1.2, step * 0.8, step * 1.35, "test", 20, 4, ())


def test_a_jobs_own_steps_narrow_its_interval_onto_them():
    rng = random.Random(3)
    steps = [11.0 * (1 + rng.gauss(0, 0.01)) for _ in range(16)]
    out = narrowed(_interval(), 10.0, steps)
    assert out.p80_low_s < 11.0 < out.p80_high_s
    assert out.p80_high_s / out.p80_low_s < 1.06 < _interval().p80_high_s / _interval().p80_low_s
    assert out.p95_low_s < out.p80_low_s and out.p95_high_s > out.p80_high_s
    assert "narrowed by 16 observed steps" in out.basis
    # One checkpoint step 3x slower barely moves it (the spread is the median absolute deviation).
    slow = narrowed(_interval(), 10.0, [*steps[:-1], 33.0])
    assert slow.p80_high_s == pytest.approx(out.p80_high_s, rel=0.02)


def test_too_few_steps_leave_the_interval_as_it_was():
    iv = _interval()
    assert narrowed(iv, 10.0, [11.0, 11.1, 10.9]) is iv
    assert narrowed(iv, 10.0, [11.0, math.nan, -1.0, 0.0, 11.2]) is iv


def test_student_t_expansion_matches_the_tables():
    # Exact two-sided 80% and 95% quantiles (any t table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2).
    for dof, t90, t975 in ((3, 1.638, 3.182), (5, 1.476, 2.571), (10, 1.372, 2.228), (30, 1.310, 2.042)):
        assert student_t(1.2815516, dof) == pytest.approx(t90, rel=0.01)
        assert student_t(1.9599640, dof) == pytest.approx(t975, rel=0.01)


# ---------------------------------------------------------------- the method (validation/intervals.py)
@pytest.fixture(scope="module")
def method() -> Any:
    return validation_script("intervals")


def _synthetic(method: Any, families: int, rng: random.Random) -> list[Any]:
    """Residuals of a two-level model: each family a bias ~ N(0, 0.08), each run N(bias, 0.03)."""
    out = []
    for f in range(families):
        bias = rng.gauss(0, 0.08)
        for i in range(rng.randint(1, 12)):
            out.append(method.Residual(f"f{f}-{i}", f"f{f}", {"generation": "hopper", "moe": "dense",
                                                              "stack": "megatron", "precision": "16-bit"},
                                       64, rng.gauss(bias, 0.03)))
    return out


def test_the_weighted_quantile_counts_families_alike(method):
    one_big = [method.Residual(str(i), "big", {}, 8, 1.0) for i in range(99)]
    small = [method.Residual("s", "small", {}, 8, -1.0)]
    # 99 runs of one family and one of another: the median run is a coin toss between families.
    assert method.weighted_quantile(one_big + small, 0.25) == -1.0
    assert method.weighted_quantile(one_big + small, 0.75) == 1.0


def test_a_new_familys_runs_land_in_the_80_interval_about_80_percent_of_the_time(method):
    rng = random.Random(11)
    hits80 = hits95 = n = 0
    for _ in range(150):
        train, test = _synthetic(method, 20, rng), _synthetic(method, 1, rng)
        table = IntervalTable.from_mapping(method.build(train, 1.0))
        for x in test:
            iv = table.interval(x.features, x.num_gpus, 1.0)
            m = math.exp(x.r)
            hits80 += iv.p80_low_s <= m <= iv.p80_high_s
            hits95 += iv.p95_low_s <= m <= iv.p95_high_s
            n += 1
    # Split-conformal over 20 families is conservative by design: (K + 1) ranks.
    assert 0.75 <= hits80 / n <= 0.92
    assert 0.90 <= hits95 / n <= 0.995
    assert hits95 > hits80


def test_classes_with_too_few_families_are_not_kept(method):
    rng = random.Random(5)
    res = _synthetic(method, 2, rng)
    data = method.build(res, 1.0)
    assert all(not rows for rows in data["classes"][:-1])  # only the whole-corpus level is left
    assert data["classes"][-1][0]["families"] == 2
