"""Failure scenarios through the plugins: the library API the CLI, the gRPC layer and sweeps call.

    from twin.engine import Engine
    from twin.failure_analyzer import FailureAnalyzer

    fa = FailureAnalyzer(Engine())
    report = fa.analyze("examples/llama3-405b-16k-roce.yaml", rank=True)
    print(report.figures["mean_time_between_interruptions_h"], report.effective_training_time_pct)
    report.to_dict()        # JSON-ready

The inventory comes from the core (GPUs, hosts, software) plus every plugin's
``twin_components`` hook, and failure modes from ``twin_failure_modes``
(``twin/hookspecs.py``); the analysis itself is pure core (``twin.core.failures``).

For sweeps, :func:`failure_metrics` evaluates one scenario mapping (with its
``failures:`` section, so sweep axes such as ``failures.spare_nodes`` or
``failures.checkpoint.storage_GBps`` work) to a flat row; :func:`monte_carlo_batches`
and :func:`twin.core.failures.montecarlo.simulate` split a Monte-Carlo run into
picklable tasks for an executor (inline ``map`` by default, Ray when the sweep engine
provides a mapper).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pluggy

from twin.core.errors import PluginError, SpecError
from twin.core.failures import montecarlo
from twin.core.failures.analysis import FailureReport, Inventory, analyze
from twin.core.failures.components import EFFECTS, ComponentGroup, FailureMode
from twin.core.failures.failure_spec import FailureSpec, Injection, MonteCarloSpec, load_failure_spec, split_scenario
from twin.core.failures.inventory import base_components, base_failure_modes
from twin.core.scenario_io import read_mapping
from twin.core.specs import Scenario
from twin.core.units import DAY_S
from twin.engine import Engine


def _call(impl: Any, **kwargs: Any) -> Any:
    """A hook implementation called with the arguments it declares (as pluggy calls hooks),
    so a plugin written before a hook argument existed keeps working.
    """
    return impl.function(**{name: kwargs[name] for name in impl.argnames if name in kwargs})


def _origin(pm: pluggy.PluginManager, impl: pluggy.HookImpl) -> str:
    return pm.get_name(impl.plugin) or getattr(impl.plugin, "__name__", "?")


class FailureAnalyzer:
    """Failure analysis with an engine's plugins (inventory and failure modes from the hooks)."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.engine = engine or Engine()

    # ----------------------------------------------------------------- loading
    def load(self, source: Scenario | Mapping[str, Any] | str | Path,
             failures: FailureSpec | Mapping[str, Any] | None = None) -> tuple[Scenario, FailureSpec]:
        """A validated scenario and its failures section (a file's, or ``failures``)."""
        section: Any = None
        if isinstance(source, str | Path):
            source = read_mapping(source)
        if isinstance(source, Mapping):
            source, section = split_scenario(source)
        scenario = self.engine.scenario(source)
        if isinstance(failures, FailureSpec):
            return scenario, failures
        if failures is not None:
            section = failures
        return scenario, load_failure_spec(section)

    # ----------------------------------------------------------------- inventory
    def switch_radix(self, scenario: Scenario) -> int | None:
        """The switch radix the optics model forces (as the hierarchy builder does)."""
        c = scenario.cluster
        if c.optics is None or c.scale_out is None:
            return None
        optics = self.engine.fabrics.get("optics", c.optics.kind, "cluster.optics.kind")
        return optics.switch_radix(c)  # type: ignore[attr-defined]

    def inventory(self, scenario: Scenario) -> Inventory:
        """Component groups and failure modes of ``scenario`` (core + every plugin)."""
        pm = self.engine.pm
        hierarchy = self.engine.hierarchy(scenario)
        radix = self.switch_radix(scenario)
        optical = self.engine.optical_links(scenario.cluster)
        groups = base_components(scenario, hierarchy)
        owners = {g.name: "core" for g in groups}
        for impl in pm.hook.twin_components.get_hookimpls():
            origin = _origin(pm, impl)
            for g in _call(impl, scenario=scenario, hierarchy=hierarchy, switch_radix=radix,
                                   optical_links=optical) or []:
                if not isinstance(g, ComponentGroup):
                    raise PluginError(f"plugin {origin!r} returned {g!r} from twin_components; "
                                      "expected ComponentGroup objects")
                if g.name in owners:
                    raise PluginError(f"component group {g.name!r} is described by both {owners[g.name]!r} "
                                      f"and {origin!r}")
                owners[g.name] = origin
                groups.append(g)
        modes: list[FailureMode] = []
        for g in groups:
            modes.extend(base_failure_modes(g, scenario, hierarchy))
            for impl in pm.hook.twin_failure_modes.get_hookimpls():
                origin = _origin(pm, impl)
                for m in _call(impl, component=g, scenario=scenario, hierarchy=hierarchy, switch_radix=radix,
                                       optical_links=optical) or []:
                    if not isinstance(m, FailureMode):
                        raise PluginError(f"plugin {origin!r} returned {m!r} from twin_failure_modes; "
                                          "expected FailureMode objects")
                    if m.effect not in EFFECTS:
                        raise PluginError(f"plugin {origin!r}: failure mode {m.key} has effect {m.effect!r}; "
                                          f"expected one of {', '.join(EFFECTS)}")
                    modes.append(m)
        notes: list[str] = []
        if scenario.cluster.scale_out is not None and not any(g.tier and g.tier >= 1 for g in groups):
            notes.append(f"scale-out fabric {scenario.cluster.scale_out.fabric!r} describes no components "
                         "(its plugin implements no twin_components hook)")
        return Inventory(groups=tuple(groups), modes=tuple(modes), notes=tuple(notes))

    # ----------------------------------------------------------------- analysis
    def analyze(self, source: Scenario | Mapping[str, Any] | str | Path, *,
                failures: FailureSpec | Mapping[str, Any] | None = None, inject: Iterable[Injection] = (),
                rank: bool = False, pairs: bool = False, redundancy: bool | None = None,
                monte_carlo: MonteCarloSpec | None = None, mapper: montecarlo.Mapper | None = None) -> FailureReport:
        """Analyse a scenario: goodput figures, injected failures, and optionally ranking/pairs/MC.

        ``redundancy`` None follows ``rank`` (the ranking answers "what to harden" and the
        variants "what it buys").
        """
        scenario, spec = self.load(source, failures)
        extra = tuple(inject)
        if extra:
            spec = dataclasses.replace(spec, inject=spec.inject + extra)
        return analyze(self.engine, scenario, spec, self.inventory, rank=rank, pairs=pairs,
                       redundancy=rank if redundancy is None else redundancy, monte_carlo=monte_carlo, mapper=mapper)


def failure_metrics(engine: Engine, mapping: Mapping[str, Any]) -> dict[str, Any]:
    """One sweep row: the headline failure figures of a scenario mapping (with ``failures:``)."""
    if not isinstance(mapping, Mapping):
        raise SpecError("scenario", "must be a mapping")
    report = FailureAnalyzer(engine).analyze(mapping)
    keys = ("expected_interruptions_per_day", "mean_time_between_interruptions_h", "effective_training_time_pct",
            "optimal_checkpoint_interval_s", "checkpoint_interval_s", "mean_restart_s", "goodput_tokens_per_s")
    return {"step_time_s": report.nominal.step_time_s, **{k: report.figures[k] for k in keys}}


def monte_carlo_batches(engine: Engine, source: Scenario | Mapping[str, Any] | str | Path,
                        mc: MonteCarloSpec) -> list[tuple[montecarlo.SimulationSpec, int, int]]:
    """Picklable (spec, trials, seed) tasks of a scenario's Monte-Carlo run, for a parallel executor.

    Map :func:`twin.core.failures.montecarlo.simulate` over them (``simulate(*task)``) and
    reduce with :func:`twin.core.failures.montecarlo.merge`.
    """
    from twin.core.failures.analysis import _cost_context, simulation_spec
    from twin.core.failures.impact import ImpactEvaluator

    fa = FailureAnalyzer(engine)
    scenario, spec = fa.load(source)
    report = analyze(engine, scenario, spec, fa.inventory)
    ev = ImpactEvaluator(engine, scenario, spec.spare_uplinks)
    ctx = _cost_context(spec, report.checkpoint, report.checkpoint["interval_s"])
    sim = simulation_spec(report.classes, spec, report.checkpoint, report.checkpoint["interval_s"], ctx, ev,
                          mc.horizon_days * DAY_S)
    return montecarlo.batches(sim, mc.trials, mc.batch_trials, mc.seed)
