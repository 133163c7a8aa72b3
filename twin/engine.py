"""The facade the CLI, the gRPC server and sweeps use: load scenarios, evaluate them.

An :class:`Engine` owns one plugin manager and what it resolved from it (catalog of
presets, fabric models, strategies). Building one is cheap enough to do per process;
evaluation is pure and thread-safe. Failure analysis and sweeps sit above it and take an
engine (``twin.failures.FailureAnalyzer(engine)``, ``twin.sweep``); the engine imports
neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pluggy

from twin.core.api import Fabric, Strategy
from twin.core.catalog import Catalog
from twin.core.errors import PluginError, SpecError
from twin.core.estimate import Estimate
from twin.core.evaluate import FabricSet, TwinModel
from twin.core.scenario_io import load_scenario_file, scenario_from_dict
from twin.core.specs import Scenario
from twin.plugins import PluginInfo, make_plugin_manager, plugin_infos


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
        self.model = TwinModel(self.fabrics, self.strategies, cost_override=override)

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
        """A validated scenario from a spec, a mapping or a YAML/JSON file path."""
        if isinstance(source, Scenario):
            self.model.validate(source)
            return source
        if isinstance(source, Mapping):
            scn = scenario_from_dict(source, self.catalog)
        elif isinstance(source, str | Path):
            scn = load_scenario_file(source, self.catalog)
        else:
            raise SpecError("scenario", f"must be a mapping or a file path (got {type(source).__name__})")
        self.model.validate(scn)
        return scn

    def evaluate(self, source: Scenario | Mapping[str, Any] | str | Path) -> Estimate:
        """Predict one training step."""
        return self.model.evaluate(self.scenario(source), validate=False)

    # ----------------------------------------------------------------- listings
    def plugins(self) -> list[PluginInfo]:
        """Loaded plugins with their distributions."""
        return plugin_infos(self.pm)

    def components(self) -> dict[str, list[dict[str, str]]]:
        """Fabric kinds per role and strategies, with the plugin that supplied each."""
        out: dict[str, list[dict[str, str]]] = {}
        for role, table in self.fabrics.by_role.items():
            out[role] = [{"kind": k, "plugin": self.origins.get(f"{role}:{k}", "?"), "summary": f.summary}
                         for k, f in sorted(table.items())]
        out["strategy"] = [{"kind": s.name, "plugin": self.origins.get(f"strategy:{s.name}", "?"),
                            "summary": s.summary} for s in self.strategies]
        return out
