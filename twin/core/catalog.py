"""The preset catalog: named GPUs, efficiency profiles, systems, models and software stacks.

The catalog holds plain mappings (as read from YAML) and turns names into specs on demand.
Built-in presets ship as package data (``twin/presets``); plugins add more through the
``twin_presets`` hook. Names are matched case-insensitively.

It also holds the section caches of :mod:`twin.core.scenario_io` (resolved GPUs, clusters,
models by the value of their input), because what a preset name resolves to depends on
the catalog: adding presets clears them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twin.core.errors import NotFoundError, PluginError, SpecError
from twin.core.schema import Interner, thaw

KINDS = ("gpus", "efficiency", "systems", "models", "software")
# Resolved sections kept per kind of section. The 10,000 random scenarios of
# validation/equivalence.py hold 3,869 distinct cluster mappings (9 systems x 11 sizes x
# fabric, optics and CXL options), 121 distinct scale_out ones and 10 models; the
# built-in presets are a few dozen. "part": a cluster's scale_up/scale_out/optics/memory_pool.
# "scenario": whole scenarios by their mapping, as many as clusters (a batch or a client
# repeating requests hits; a stream of distinct ones churns it, first in first out).
CACHE_SIZES = {"gpu": 256, "efficiency": 256, "cluster": 4096, "part": 1024, "model": 1024, "software": 256,
               "scenario": 4096}


@dataclass
class Catalog:
    """Named presets by kind. ``origin`` records which package supplied each name."""

    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)
    efficiency: dict[str, dict[str, Any]] = field(default_factory=dict)
    systems: dict[str, dict[str, Any]] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    software: dict[str, dict[str, Any]] = field(default_factory=dict)
    origin: dict[tuple[str, str], str] = field(default_factory=dict)
    # Resolved sections by kind (scenario_io): what a preset name means depends on this catalog.
    caches: dict[str, Interner] = field(init=False, repr=False, compare=False, default_factory=lambda: {
        kind: Interner(size, f"catalog:{kind}") for kind, size in CACHE_SIZES.items()})

    def clear_caches(self) -> None:
        """Forget every resolved section (done whenever presets are added)."""
        for interner in self.caches.values():
            interner.clear()

    def add(self, kind: str, entries: Mapping[str, Mapping[str, Any]], origin: str) -> None:
        """Add presets of one kind; a name defined twice is an error naming both origins."""
        if kind not in KINDS:
            raise PluginError(f"preset kind {kind!r} from {origin} is not one of {', '.join(KINDS)}")
        table: dict[str, dict[str, Any]] = getattr(self, kind)
        for name, entry in entries.items():
            if not isinstance(entry, Mapping):
                raise PluginError(f"preset {kind}.{name} from {origin} must be a mapping")
            key = name.lower()
            existing = self.origin.get((kind, key))
            if existing is not None:
                raise PluginError(f"preset {kind}.{name} is defined by both {existing} and {origin}")
            table[key] = {"__name__": name, **copy.deepcopy(dict(entry))}
            self.origin[(kind, key)] = origin
        self.clear_caches()

    def names(self, kind: str) -> list[str]:
        """Display names of every preset of ``kind``."""
        return sorted(e["__name__"] for e in getattr(self, kind).values())

    def get(self, kind: str, name: str, field_path: str) -> dict[str, Any]:
        """A deep copy of one preset (without bookkeeping keys); NotFoundError if unknown."""
        if not isinstance(name, str):
            raise SpecError(field_path, f"must be a preset name (a string) (got {name!r})")
        entry = getattr(self, kind).get(name.lower())
        if entry is None:
            raise NotFoundError(field_path, name, self.names(kind))
        return {k: thaw(v) for k, v in entry.items() if k != "__name__"}

    def canonical(self, kind: str, name: str) -> str:
        """The display name of a preset."""
        return getattr(self, kind)[name.lower()]["__name__"]

    def describe(self, kind: str) -> Iterable[tuple[str, dict[str, Any], str]]:
        """(name, entry, origin) of every preset of ``kind``."""
        for key, entry in sorted(getattr(self, kind).items()):
            body = {k: v for k, v in entry.items() if k != "__name__"}
            yield entry["__name__"], body, self.origin[(kind, key)]
