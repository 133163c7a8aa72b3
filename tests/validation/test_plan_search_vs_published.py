"""validation/plan_search_vs_published.py searches each published run on that run's own stack."""

from __future__ import annotations

import yaml

from tests.conftest import ROOT
from tests.validation import load_script
from twin.engine import Engine


def _script():
    return load_script("plan_search_vs_published")


def test_an_old_stack_run_is_searched_on_its_own_stack(monkeypatch):
    """Megatron-LM 2021 (megatron-deepspeed: gradients reduced after the backward) is compared with
    the best plan on that stack, not on today's default, and the best re-evaluates to its figure."""
    script = _script()
    data = yaml.safe_load((ROOT / "validation" / "reference" / "training_runs.yaml").read_text())
    cases = data.get("cases", data) if isinstance(data, dict) else data
    case = next(c for c in cases if c.get("id") == "megatron-a100-weak-1.7B")
    stacks = []
    real = script.build_space

    def spy(*args, **kwargs):
        space = real(*args, **kwargs)
        stacks.append(space.software.name)
        return space

    monkeypatch.setattr(script, "build_space", spy)
    row = script.compare_case(Engine(autoload=False), case)
    assert stacks == ["megatron-deepspeed"]
    assert row["best_s"] is not None and row["published_s"] > 0 and row["ratio"] == row["published_s"] / row["best_s"]
