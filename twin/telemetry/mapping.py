"""The metric catalog: every mapping the plugins contribute, looked up by exporter name.

Lookups are case-insensitive and spelling-tolerant (:func:`twin.core.telemetry_vocab.normalize_name`);
names with placeholders are tried after exact names. Results are cached per raw name
(bounded, so a flood of unique names cannot grow memory without limit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pluggy

from twin.core.errors import PluginError
from twin.core.telemetry_vocab import STEP_TIME_SIGNAL, MetricMapping, name_pattern, normalize_name

# The metric a training job emits so the twin can compare its prediction with reality
# (docs/telemetry.md): a gauge in seconds per optimizer step, attribute ``job`` required.
STEP_TIME_MAPPING = MetricMapping(
    ("twin.training.step_time", "twin_training_step_time_seconds"), "job", STEP_TIME_SIGNAL,
    identity=("job|job_name|twin.job",), tier="job", aggregate="max", unit="s",
    source="Fabric Twin: seconds per optimizer step, measured by the training job itself")
CACHE_LIMIT = 65_536


@dataclass(frozen=True, slots=True)
class Resolved:
    """A metric name resolved to its mapping (plus values captured from the name)."""

    mapping: MetricMapping
    key: str
    captures: tuple[tuple[str, str], ...] = ()
    identity: tuple[tuple[str, ...], ...] = ()
    detail: tuple[tuple[str, ...], ...] = ()


def _alternatives(keys: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(a.strip().lower() for a in k.split("|") if a.strip()) for k in keys)


class MetricCatalog:
    """All metric mappings, indexed for fast case-insensitive lookup."""

    def __init__(self, mappings: Iterable[MetricMapping]) -> None:
        self.mappings: list[MetricMapping] = []
        self._exact: dict[str, MetricMapping] = {}
        self._patterns: list[tuple[object, MetricMapping]] = []
        self._cache: dict[str, Resolved | None] = {}
        owners: dict[str, tuple[str, int]] = {}
        for index, m in enumerate(mappings):
            problem = m.validate()
            if problem:
                raise PluginError(f"metric mapping {m.names[:1]} from {m.plugin or '?'}: {problem}")
            self.mappings.append(m)
            for name in m.names:
                norm = normalize_name(name)
                if norm in owners:
                    if owners[norm][1] == index:  # two spellings of one name in one mapping
                        continue
                    raise PluginError(f"metric {name!r} is mapped by both {owners[norm][0]!r} and {m.plugin or '?'!r}")
                owners[norm] = (m.plugin or "?", index)
                pattern = name_pattern(name)
                if pattern is None:
                    self._exact[norm] = m
                else:
                    self._patterns.append((pattern, m))

    @classmethod
    def from_plugins(cls, pm: pluggy.PluginManager) -> MetricCatalog:
        """The built-in job metric plus every ``twin_metric_mappings`` result, tagged with its plugin."""
        found = [STEP_TIME_MAPPING]
        for impl in pm.hook.twin_metric_mappings.get_hookimpls():
            origin = pm.get_name(impl.plugin) or getattr(impl.plugin, "__name__", "?")
            for m in impl.function() or []:
                if not isinstance(m, MetricMapping):
                    raise PluginError(f"plugin {origin!r} returned {m!r} from twin_metric_mappings; "
                                      "expected MetricMapping objects")
                found.append(_tagged(m, origin))
        return cls(found)

    def lookup(self, name: str) -> Resolved | None:
        """The mapping for exporter metric ``name``, or None if the twin does not use it."""
        hit = self._cache.get(name, False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        norm = normalize_name(name)
        resolved: Resolved | None = None
        m = self._exact.get(norm)
        if m is not None:
            resolved = Resolved(m, norm, (), _alternatives(m.identity), _alternatives(m.detail))
        else:
            for pattern, pm in self._patterns:
                match = pattern.match(norm)  # type: ignore[attr-defined]
                if match:
                    resolved = Resolved(pm, norm, tuple(match.groupdict().items()), _alternatives(pm.identity),
                                        _alternatives(pm.detail))
                    break
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[name] = resolved
        return resolved

    def describe(self) -> list[dict[str, object]]:
        """Every mapping as plain data (for docs and the API)."""
        return [{"names": list(m.names), "component": m.component, "signal": m.signal, "kind": m.kind,
                 "identity": list(m.identity), "tier": m.tier, "unit": m.unit, "plugin": m.plugin,
                 "rules": [f"{c.severity}: {c.describe()} ({c.why})" for c in m.conditions],
                 "source": m.source} for m in self.mappings]


def _tagged(m: MetricMapping, plugin: str) -> MetricMapping:
    from dataclasses import replace
    return replace(m, plugin=plugin)
