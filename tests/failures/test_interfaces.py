"""The CLI, the scenario ``failures:`` section, the plugin hooks and the sweep entry point."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import twin
from tests.conftest import EXAMPLES
from twin.core.errors import PluginError, SpecError
from twin.core.failures.components import ComponentGroup, FailureMode, Impact
from twin.core.failures.failure_spec import load_failure_spec, parse_injection
from twin.engine import Engine
from twin.failure_analyzer import FailureAnalyzer, failure_metrics, monte_carlo_batches
from twin.hookimpl import hookimpl
from twin.plugins import make_plugin_manager

GPT3 = EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"
KEYS = ("expected_interruptions_per_day", "mean_time_between_interruptions_h", "effective_training_time_pct",
        "optimal_checkpoint_interval_s")


def test_cli_json_rank_and_inject():
    out = twin("failures", str(GPT3), "--json", "--rank", "--inject", "switch_down:tier=spine",
               "--inject", "link_degraded:component=link.nic-leaf,ber=1e-7")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in KEYS:
        assert isinstance(data[key], float) and data[key] > 0
    assert data["ranking"][0]["component"] == "gpu"
    assert all("expected_cost_h_per_day" in r for r in data["ranking"])
    assert [i["injection"] for i in data["injections"]] == ["switch_down tier=spine",
                                                            "link_degraded component=link.nic-leaf ber=1e-07"]
    table = twin("failures", str(GPT3), "--rank", "--monte-carlo", "5", "--horizon-days", "2")
    assert table.returncode == 0, table.stderr
    assert "effective training time" in table.stdout and "Criticality" in table.stdout
    assert "Monte-Carlo" in table.stdout


def test_cli_bad_input_names_the_field(tmp_path):
    out = twin("failures", str(GPT3), "--inject", "link_degraded:component=link.nic-leaf,lanes_fraction=2")
    assert out.returncode == 2 and "--inject[0].lanes_fraction" in out.stderr and "Traceback" not in out.stderr
    out = twin("failures", str(GPT3), "--inject", "gremlins")
    assert out.returncode == 2 and "--inject[0].kind" in out.stderr
    f = tmp_path / "s.yaml"
    f.write_text(GPT3.read_text() + "failures:\n  checkpoint: {storage_gbps: 10}\n")
    out = twin("failures", str(f))
    assert out.returncode == 2 and "failures.checkpoint.storage_gbps: unknown field" in out.stderr
    out = twin("failures", str(GPT3), "--monte-carlo", "0")
    assert out.returncode == 2 and "--monte-carlo.trials" in out.stderr


def test_scenario_files_with_a_failures_section(tmp_path, fa):
    f = tmp_path / "s.yaml"
    f.write_text(GPT3.read_text() + "failures:\n  spare_nodes: 0\n  checkpoint: {interval_s: 1800}\n"
                 "  inject:\n    - {kind: component_down, component: host}\n")
    assert twin("predict", str(f)).returncode == 0  # other verbs ignore the section
    rep = fa.analyze(f)
    assert rep.figures["checkpoint_interval_s"] == 1800
    assert rep.injections[0]["outcome"] == "restart_after_repair"
    with pytest.raises(SpecError, match=r"failures\.spare_nodes: must be >= 0"):
        load_failure_spec({"spare_nodes": -1})
    assert parse_injection("straggler:fraction=0.7,cause=slow_hbm").fraction == 0.7


class _Dragonfly:
    """A third-party plugin describing extra parts and modes (hooks without ``optical_links``,
    as written before that argument existed: called with the arguments they declare)."""

    def __init__(self, name: str = "optical_switch", effect: str = "down") -> None:
        self.name, self.effect = name, effect

    @hookimpl
    def twin_components(self, scenario, hierarchy, switch_radix):
        return [ComponentGroup(self.name, "switch", 4, "dragonfly", tier=2)]

    @hookimpl
    def twin_failure_modes(self, component, scenario, hierarchy, switch_radix):
        if component.name != self.name:
            return None
        return [FailureMode(self.name, "down", self.effect, 0.1, "test", interrupts=False,
                            degraded=Impact(tier_bw=((2, 0.5),), note="half the spine"), repair_h=1.0)]


def test_plugins_add_components_and_modes_through_the_hooks():
    fa = FailureAnalyzer(Engine(make_plugin_manager(autoload=False, extra=[_Dragonfly()])))
    rep = fa.analyze(GPT3, rank=True)
    row = next(r for r in rep.ranking if r["component"] == "optical_switch")
    assert row["events_per_day"] == pytest.approx(4 * 0.1 / 365)
    assert row["outcome"] == "continue_degraded" and row["slowdown"] >= 1.0
    with pytest.raises(PluginError, match="'nic' is described by both"):
        FailureAnalyzer(Engine(make_plugin_manager(autoload=False, extra=[_Dragonfly("nic")]))).analyze(GPT3)
    with pytest.raises(PluginError, match="has effect 'vanished'"):
        FailureAnalyzer(Engine(make_plugin_manager(autoload=False, extra=[_Dragonfly(effect="vanished")]))
                        ).analyze(GPT3)


def test_sweep_row_and_monte_carlo_tasks(engine):
    import yaml

    from twin.core.failures import montecarlo
    from twin.core.failures.failure_spec import MonteCarloSpec

    base = yaml.safe_load(GPT3.read_text())
    row = failure_metrics(engine, {**base, "failures": {"checkpoint": {"storage_GBps": 50}}})
    faster = failure_metrics(engine, {**base, "failures": {"checkpoint": {"storage_GBps": 500}}})
    assert set(KEYS) <= set(row)
    assert faster["optimal_checkpoint_interval_s"] < row["optimal_checkpoint_interval_s"]
    assert faster["effective_training_time_pct"] > row["effective_training_time_pct"]
    tasks = monte_carlo_batches(engine, GPT3, MonteCarloSpec(trials=6, horizon_days=2, batch_trials=3))
    assert len(tasks) == 2
    merged = montecarlo.merge(montecarlo.simulate(*t) for t in tasks)
    assert merged.trials == 6
