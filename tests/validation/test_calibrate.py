"""validation/calibrate.py: which generations a fold may fit, and what the others get."""

from __future__ import annotations

from types import SimpleNamespace

from tests.conftest import validation_script


def _script():
    return validation_script("calibrate")


def _case(cal, family: str, generation: str):
    """A Case whose scenario carries only what the rule reads (the GPU generation)."""
    scenario = SimpleNamespace(cluster=SimpleNamespace(gpu=SimpleNamespace(generation=generation)))
    return cal.Case(id=f"{family}-{generation}", family=family, scenario=scenario, measured=1.0)


def test_a_generation_needs_two_families_to_be_fitted():
    """Volta with only the 2019 run left (one family, as when Megatron-LM 2020 is left out)
    is not fitted; Ampere with two families is; Hopper with two runs of one family is not."""
    cal = _script()
    cases = [
        _case(cal, "Megatron-LM 2019", "volta"),
        _case(cal, "Korthikanti", "ampere"),
        _case(cal, "torchtitan", "ampere"),
        _case(cal, "Llama 3", "hopper"),
        _case(cal, "Llama 3", "hopper"),
    ]
    assert cal.identified(cases) == {"ampere"}


def test_the_prior_is_the_nearest_fitted_generation_predecessor_first():
    cal = _script()
    assert cal.prior_generation("blackwell", {"volta", "ampere", "hopper"}) == "hopper"
    assert cal.prior_generation("volta", {"ampere", "hopper", "blackwell"}) == "ampere"
    # Ampere between two fitted generations: its predecessor, not its successor.
    assert cal.prior_generation("ampere", {"volta", "hopper"}) == "volta"
    assert cal.prior_generation("blackwell", {"volta"}) == "volta"
    assert cal.prior_generation("hopper", set()) is None


def test_an_unfitted_generation_takes_its_priors_values_not_its_own():
    """Blackwell outside the fit: Hopper's sustained (0.78) and attention scale (0.95)
    replace whatever Blackwell had (0.72 / 1.10, fitted with the family left out)."""
    cal = _script()
    params = {
        ("volta", "sustained"): 0.84, ("ampere", "sustained"): 0.80,
        ("hopper", "sustained"): 0.78, ("blackwell", "sustained"): 0.72,
        ("hopper", "attention"): 0.95, ("blackwell", "attention"): 1.10,
    }
    out = cal.with_priors(params, {"volta", "ampere", "hopper"})
    assert out[("blackwell", "sustained")] == 0.78
    assert out[("blackwell", "attention")] == 0.95
    assert {k: v for k, v in out.items() if k[0] != "blackwell"} == {
        k: v for k, v in params.items() if k[0] != "blackwell"}
    # Hopper outside the fit, Ampere its prior: Ampere has no attention scale (its
    # attention is the kernel benchmark's), so Hopper's scale falls back to 1.0.
    out = cal.with_priors(params, {"volta", "ampere", "blackwell"})
    assert out[("hopper", "sustained")] == 0.80
    assert out[("hopper", "attention")] == 1.0


def test_a_fold_fits_only_identified_generations_and_fills_the_rest(monkeypatch):
    """fold_params hands the fit only the runs of generations with two families, then gives
    the one-family generation (Volta, the 2019 run) Ampere's fitted sustained fraction."""
    cal = _script()
    seen: list[set[str]] = []

    def fake_fit(engine, cases, start):
        seen.append({c.scenario.cluster.gpu.generation for c in cases})
        return {**start, ("ampere", "sustained"): 0.82}

    monkeypatch.setattr(cal, "fit", fake_fit)
    cases = [_case(cal, "Megatron-LM 2019", "volta"), _case(cal, "Korthikanti", "ampere"),
             _case(cal, "torchtitan", "ampere")]
    start = {k: 0.5 for k in cal.PARAMS}
    out = cal.fold_params(None, cases, start)
    assert seen == [{"ampere"}]
    assert out[("volta", "sustained")] == 0.82
    assert out[("ampere", "sustained")] == 0.82


def test_held_out_families_are_in_no_fit_and_exist_in_the_reference_set():
    """The Model Zoo runs are kept out of the fit (an out-of-sample test), and every held-out
    family name is one the reference file has: a renamed family would silently join the fit."""
    import yaml

    from tests.conftest import REFERENCE

    cal = _script()
    cases = [_case(cal, cal.HELD_OUT[0], "hopper"), _case(cal, "Llama 3", "hopper"),
             _case(cal, cal.HELD_OUT[1], "blackwell")]
    fit, held = cal.split_held_out(cases)
    assert [c.family for c in fit] == ["Llama 3"]
    assert {c.family for c in held} == set(cal.HELD_OUT)
    families = {c["family"] for c in yaml.safe_load((REFERENCE / "training_runs.yaml").read_text())["cases"]}
    assert set(cal.HELD_OUT) <= families
