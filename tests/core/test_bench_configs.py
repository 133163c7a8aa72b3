"""The configurations of benchmarks/bench_vs_llm_analysis.py are valid twin scenarios
(llm-analysis itself is an optional extra and is not needed here)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import ROOT
from twin.engine import Engine

spec = importlib.util.spec_from_file_location("bench_vs_llm_analysis", ROOT / "benchmarks" / "bench_vs_llm_analysis.py")
assert spec is not None and spec.loader is not None
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up there
spec.loader.exec_module(bench)


def test_there_are_at_least_twenty_distinct_configurations() -> None:
    assert len(bench.CONFIGS) >= 20
    assert len(set(bench.CONFIGS)) == len(bench.CONFIGS)
    assert {c.gpu for c in bench.CONFIGS} == {"A100", "H100"}


@pytest.mark.parametrize("config", bench.CONFIGS, ids=lambda c: f"{c.model}-{c.gpu}-{c.gpus}-tp{c.tp}pp{c.pp}")
def test_every_configuration_evaluates_on_the_twin_as_stated(engine: Engine, config: object) -> None:
    mapping = bench.twin_mapping(config)
    scn = engine.scenario(mapping)
    # the degrees llm-analysis is given are the ones the twin runs
    assert (scn.plan.tp, scn.plan.pp, scn.dp) == (config.tp, config.pp, config.dp)
    assert scn.model.seq_len == config.seq_len and scn.plan.precision == config.precision
    est = engine.evaluate(mapping)
    assert est.step_time_s > 0
    assert bench.twin_one_by_one(engine, [mapping]) == [est.step_time_s]


def test_llm_analysis_gets_the_twin_preset_dimensions(engine: Engine) -> None:
    dims = bench.model_dims(engine, "llama3.1-70b")
    assert (dims["num_layers"], dims["hidden_dim"], dims["n_head"], dims["num_key_value_heads"]) == (80, 8192, 64, 8)
    assert dims["ffn_embed_dim"] == 28672 and dims["expansion_ratio"] == 3.5
    assert set(bench.TWIN_TIMINGS)  # the timing table the batch API joins
