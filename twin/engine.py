"""The facade the CLI, the gRPC server and sweeps use: load scenarios, evaluate them.

An :class:`Engine` owns one plugin manager and what it resolved from it (catalog of
presets, fabric models, strategies) and the step model's driver (``twin.core.run.driver``),
which it keeps to itself: adapters (the server, telemetry, sweeps, the web view, commands,
failure analysis, fleets) use only the methods here, and an import contract forbids them the
model's internals (``pyproject.toml``, ``[tool.importlinter]``). Building one is cheap enough
to do per process; evaluation is pure and thread-safe. Failure analysis and sweeps sit above
it and take an engine (``twin.failure_analyzer.FailureAnalyzer(engine)``, ``twin.sweep``);
the engine imports neither.

The facade:

- :meth:`Engine.scenario` loads and validates; :meth:`Engine.validate` checks a built one;
- :meth:`Engine.evaluate` predicts one step (of a mapping, a file or a scenario; with or
  without validation; under :class:`~twin.core.conditions.Conditions`: failed or degraded
  parts, other jobs' traffic, the live calibration);
- :meth:`Engine.evaluate_many` and :meth:`Engine.evaluate_points` predict many at once on
  the batch path (one :class:`~twin.core.results.PointResults`, rows as estimates);
- :meth:`Engine.hierarchy`, :meth:`Engine.check_cluster`, :meth:`Engine.optical_links`,
  :meth:`Engine.strategy_set` answer what the fabric and the strategy selection are;
- :meth:`Engine.cache_stats` says what the driver remembers and how often it helps.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pluggy

from twin import __version__
from twin.core.catalog import Catalog
from twin.core.conditions import NOMINAL, Conditions
from twin.core.errors import PluginError, SpecError, TwinError
from twin.core.estimate import Estimate
from twin.core.facts import FabricSet
from twin.core.interfaces import Fabric, Strategy
from twin.core.interfaces import Fabric as FabricModel
from twin.core.intervals import IntervalTable
from twin.core.point_set import PointSet
from twin.core.results import PointResults, Refusal
from twin.core.run.anatomy import build as build_anatomy
from twin.core.run.driver import TwinModel
from twin.core.run.pruning import Pruner
from twin.core.scenario_io import read_mapping, scenario_from_dict
from twin.core.schema import Interner
from twin.core.specs import (
    Calibration,
    Cluster,
    Scenario,
    Strategies,
    validate_cluster,
    validate_plan,
    validate_software,
)
from twin.core.step_anatomy import StepAnatomy
from twin.core.topology import Hierarchy
from twin.plugins import PluginInfo, is_builtin, make_plugin_manager, plugin_infos
from twin.presets import interval_table

# A search for the fastest plans passes one to evaluate_points (twin.core.run.pruning).
__all__ = ["Engine", "Pruner"]

# Validated clusters and models remembered per engine: as many as the catalog keeps clusters.
VALIDATED_SIZE = 4096


@functools.lru_cache(maxsize=1)
def _interval_table() -> IntervalTable:
    """The shipped prediction-interval table (``twin/presets/intervals.yaml``), read once."""
    return IntervalTable.from_mapping(interval_table())


def _plugin_name(pm: pluggy.PluginManager, impl: pluggy.HookImpl) -> str:
    return pm.get_name(impl.plugin) or getattr(impl.plugin, "__name__", "?")


class Engine:
    """Presets + plugins + the performance model, ready to answer questions."""

    def __init__(self, pm: pluggy.PluginManager | None = None, *, autoload: bool | None = None,
                 block: tuple[str, ...] = ()) -> None:
        self.pm = pm or make_plugin_manager(autoload=autoload, block=block)
        self.catalog = self._build_catalog()
        self.fabrics = FabricSet()
        self.strategies: list[Strategy] = []
        self.origins: dict[str, str] = {}
        hook = self.pm.hook
        for impl in hook.twin_fabrics.get_hookimpls():
            origin = _plugin_name(self.pm, impl)
            for fab in impl.function() or []:
                if not isinstance(fab, Fabric):
                    raise PluginError(f"plugin {origin!r} returned {fab!r} from twin_fabrics; expected Fabric objects")
                self.fabrics.add(fab, origin)
                self.origins[f"{fab.role}:{fab.kind}"] = origin
        seen: dict[str, str] = {}
        for impl in hook.twin_strategies.get_hookimpls():
            origin = _plugin_name(self.pm, impl)
            for strat in impl.function() or []:
                if not isinstance(strat, Strategy):
                    raise PluginError(f"plugin {origin!r} returned {strat!r} from twin_strategies; "
                                      "expected Strategy objects")
                if strat.name in seen:
                    raise PluginError(f"strategy {strat.name!r} is registered by both {seen[strat.name]!r} "
                                      f"and {origin!r}")
                seen[strat.name] = origin
                self.origins[f"strategy:{strat.name}"] = origin
                self.strategies.append(strat)
        override = None
        if hook.twin_collective_cost.get_hookimpls():
            def override(op, size, span, hierarchy, algorithm, scenario):  # noqa: ANN001, ANN202
                return hook.twin_collective_cost(op=op, size_bytes=size, span=span, hierarchy=hierarchy,
                                                 algorithm=algorithm, scenario=scenario)
        # Built-in strategies are each dimension's default; a plugin's alternative runs where selected.
        builtin = [s.name for s in self.strategies if is_builtin(self.pm, self.origins[f"strategy:{s.name}"])]
        self._model = TwinModel(self.fabrics, self.strategies, cost_override=override, builtin=builtin,
                                origins={s.name: self.origins[f"strategy:{s.name}"] for s in self.strategies},
                                intervals=_interval_table())
        # Cluster and model objects (interned by the catalog) whose own rules have passed.
        self._validated_by: TwinModel | None = None
        self._valid_clusters = Interner(VALIDATED_SIZE, "engine:valid-clusters")
        self._valid_models = Interner(VALIDATED_SIZE, "engine:valid-models")
        # (plan, model, cluster) triples whose plan rules passed, by their ids (held: never reused).
        self._valid_plans = Interner(VALIDATED_SIZE, "engine:valid-plans")

    def _build_catalog(self) -> Catalog:
        catalog = Catalog()
        for impl in self.pm.hook.twin_presets.get_hookimpls():
            origin = _plugin_name(self.pm, impl)
            result = impl.function() or {}
            if not isinstance(result, Mapping):
                raise PluginError(f"plugin {origin!r} returned {type(result).__name__} from twin_presets; "
                                  "expected a mapping")
            for kind, entries in result.items():
                catalog.add(kind, entries, origin)
        return catalog

    # ----------------------------------------------------------------- scenarios
    def scenario(self, source: Scenario | Mapping[str, Any] | str | Path) -> Scenario:
        """A validated scenario from a spec, a mapping or a YAML/JSON file path.

        From a mapping, equal sections give the same spec objects (the catalog's caches);
        the mapping is not changed. Errors are those of the strict loader and the rules.
        """
        if isinstance(source, Scenario):
            self._model.validate(source)
            return source
        if type(source) is dict or isinstance(source, Mapping):  # the exact test first: ABCs cost
            scn = scenario_from_dict(source, self.catalog, validate=False)
        elif isinstance(source, str | Path):
            scn = scenario_from_dict(read_mapping(source), self.catalog, validate=False)
        else:
            raise SpecError("scenario", f"must be a mapping or a file path (got {type(source).__name__})")
        self._validate(scn)
        return scn

    def _validate(self, scn: Scenario) -> None:
        """``TwinModel.validate(scn)``, skipping what was checked before for these objects.

        ``TwinModel.validate`` runs ``validate_scenario`` (the software rule, cluster rules,
        model rules, plan rules, in that order), then each fabric's rules, which see the
        cluster only (``Fabric.validate(cluster, path)``), then the strategy selection. So once
        a cluster object and a model object have passed together, their own rules pass again
        and only the software rule, the plan rules and the selection can fail, with the error
        the full run would raise first; the plan rules are a function of plan, model and
        cluster, so a triple that passed them passes again (the specs are immutable). Held by
        strong reference, so an id is never that of another object.
        """
        if self._validated_by is not self._model:  # rules of a replaced model: start afresh
            self._validated_by = self._model
            self._valid_clusters.clear()
            self._valid_models.clear()
            self._valid_plans.clear()
        c, m, p = scn.cluster, scn.model, scn.plan
        if self._valid_clusters.get(id(c)) is c and self._valid_models.get(id(m)) is m:
            validate_software(scn.software)  # the one scenario rule outside cluster, model and plan
            key = (id(p), id(m), id(c))
            seen = self._valid_plans.get(key)
            if seen is None or seen[0] is not p or seen[1] is not m or seen[2] is not c:
                validate_plan(p, m, c)
                self._valid_plans.add(key, (p, m, c))
            self._model.strategy_set(scn.strategies)
            return
        self._model.validate(scn)
        self._valid_clusters.add(id(c), c)
        self._valid_models.add(id(m), m)
        self._valid_plans.add((id(p), id(m), id(c)), (p, m, c))

    def validate(self, scenario: Scenario) -> None:
        """Every rule of a built scenario (specs, fabrics, strategy selection); SpecError names the field."""
        self._model.validate(scenario)

    def evaluate(self, source: Scenario | Mapping[str, Any] | str | Path, *, validate: bool = True,
                 report: bool = True, conditions: Conditions = NOMINAL) -> Estimate:
        """Predict one training step of a scenario (a mapping, a YAML/JSON file or a built one).

        ``validate=False``: ``source`` is a :class:`Scenario` already validated (by
        :meth:`scenario`), so its rules are not run again. ``report=False``: no fabric report
        and link loads (what sweeps do not need). ``conditions``: the network as it differs from
        the design (failed or degraded parts, other jobs' traffic, another calibration).
        """
        if validate or not isinstance(source, Scenario):
            source = self.scenario(source)
        return self._model.evaluate(source, validate=False, report=report, conditions=conditions)

    def evaluate_points(self, points: PointSet, *, memory_headroom: float = 0.0, require_fit: bool = True,
                        validate: bool = True, prune: Pruner | None = None, sparse: bool = False,
                        conditions: Conditions = NOMINAL) -> PointResults:
        """Predict every point of a point set at once (``twin.core.run.batch.evaluate_points``):
        what a sweep evaluates, one model and strategy selection, many plans and clusters.
        """
        return self._model.evaluate_points(points, memory_headroom=memory_headroom, require_fit=require_fit,
                                           validate=validate, prune=prune, sparse=sparse, conditions=conditions)

    def evaluate_many(self, sources: Iterable[Scenario | Mapping[str, Any] | str | Path], *,
                      require_fit: bool = False, memory_headroom: float = 0.0,
                      conditions: Conditions = NOMINAL) -> PointResults:
        """Predict many training steps at once, on the step model's batch path.

        One row per source, in order: an evaluated row holds what :meth:`evaluate` gives for
        it (``columns["step_time_s"]``, the breakdown, memory, MFU, ...; ``fits[i]`` whether
        it fits in memory, as ``Estimate.fits``); a source that does not parse or breaks a
        rule holds its reason instead (``reason(i)``). ``require_fit=True`` makes a plan that
        does not fit (leaving ``memory_headroom`` of HBM free) infeasible too, as a sweep
        counts it.
        """
        scenarios: list[Scenario | None] = []
        errors: list[Refusal | None] = []
        for source in sources:
            try:
                if type(source) is dict:  # the common case first: an ABC test costs
                    scn = scenario_from_dict(source, self.catalog, validate=False)
                elif isinstance(source, Scenario):
                    scn = source
                elif isinstance(source, Mapping):
                    scn = scenario_from_dict(source, self.catalog, validate=False)
                else:
                    scn = scenario_from_dict(read_mapping(source), self.catalog, validate=False)
            except TwinError as err:
                scenarios.append(None)
                errors.append(Refusal.of(err))
                continue
            scenarios.append(scn)
            errors.append(None)
        return self._model.evaluate_many(scenarios, memory_headroom=memory_headroom, require_fit=require_fit,
                                         errors=errors, conditions=conditions)

    def step_anatomy(self, source: Scenario | Mapping[str, Any] | str | Path) -> StepAnatomy:
        """One scenario's step taken apart (``twin.core.step_anatomy``): per pipeline rank its passes
        per micro-batch, per strategy the collectives it issues, where and how often, adding up to
        the terms the estimate is assembled from. What a trace of the step is written from
        (``twin.traces``). SpecError naming ``plan.schedule`` for a schedule it does not write.
        """
        return build_anatomy(self._model, self.scenario(source))

    # ----------------------------------------------------------------- the fabric and the strategies
    def hierarchy(self, scenario: Scenario, conditions: Conditions = NOMINAL) -> Hierarchy:
        """The tier hierarchy ``scenario`` is evaluated on (under ``conditions``' failures)."""
        return self._model.hierarchy(scenario, conditions)

    def hierarchy_of(self, cluster: Cluster, calibration: Calibration | None = None) -> Hierarchy:
        """The tier hierarchy of a cluster (with ``calibration``'s bandwidth factors)."""
        return self._model.hierarchy_of(cluster, calibration or Calibration())

    def check_cluster(self, cluster: Cluster, path: str = "cluster") -> list[FabricModel]:
        """Check a cluster's own rules and each of its fabric models' (SpecError naming the field
        under ``path``); the fabric models it uses.
        """
        validate_cluster(cluster, path)
        fabrics = self._model.cluster_fabrics(cluster)
        for fab in fabrics:
            fab.validate(cluster, path)
        return fabrics

    def optical_links(self, cluster: Cluster) -> int | None:
        """Scale-out links over optics when the scale-out fabric counts them itself (None: a fat tree)."""
        return self._model.optical_links(cluster)

    def strategy_set(self, selection: Strategies) -> tuple[Strategy, ...]:
        """The strategies a scenario with ``selection`` runs, in phase order (SpecError naming
        ``strategies.<dimension>`` for one the registered strategies cannot satisfy).
        """
        return self._model.strategy_set(selection)

    def cache_stats(self) -> dict[str, dict[str, int]]:
        """Per memo of the driver: entries, limit, hits, misses, clears."""
        return self._model.cache_stats()

    # ----------------------------------------------------------------- listings
    def plugins(self) -> list[PluginInfo]:
        """Loaded plugins with their distributions."""
        return plugin_infos(self.pm)

    def components(self) -> dict[str, list[dict[str, str]]]:
        """Fabric kinds per role and strategies, with the plugin that supplied each (strategies
        also with their dimension and whether a scenario must select them: ``alternative``).
        """
        out: dict[str, list[dict[str, str]]] = {}
        for role, table in self.fabrics.by_role.items():
            out[role] = [{"kind": k, "plugin": self.origins.get(f"{role}:{k}", "?"), "summary": f.summary}
                         for k, f in sorted(table.items())]
        table = self._model.table
        out["strategy"] = [{"kind": s.name, "plugin": self.origins.get(f"strategy:{s.name}", "?"),
                            "summary": s.summary, "dimension": s.dimension, "alternative": table.alternative(s)}
                           for s in self.strategies]
        return out

    def catalog_document(self) -> dict[str, Any]:
        """Everything this engine knows as plain data, with the fields of the wire's ``Catalog``
        message (``twin.rpc.v1``): what ``twin catalog`` prints here and ``GetCatalog`` sends.
        """

        def presets(kind: str) -> list[dict[str, Any]]:
            out = []
            for name, body, origin in self.catalog.describe(kind):
                source = body.get("source", "")
                out.append({"name": name, "origin": origin, "source": source if isinstance(source, str) else "",
                            "spec": body})
            return out

        comps = self.components()
        return {"twin_version": __version__, "gpus": presets("gpus"), "systems": presets("systems"),
                "models": presets("models"), "efficiency_profiles": presets("efficiency"),
                "fabrics": [{"role": role, **row} for role, rows in comps.items() if role != "strategy"
                            for row in rows],
                "strategies": [{"role": "strategy", **row} for row in comps.get("strategy", [])],
                "plugins": [{"name": p.name, "module": p.module, "distribution": p.distribution,
                             "version": p.version, "builtin": p.builtin} for p in self.plugins()]}
