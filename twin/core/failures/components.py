"""What a cluster is made of, how each part fails, and what the job sees when it does.

Plugins describe their hardware with these plain objects (hooks ``twin_components`` and
``twin_failure_modes`` in ``twin/hookspecs.py``); the core turns them into costs.

- :class:`ComponentGroup`: identical components grouped by symmetry (all leaf switches,
  all leaf-to-spine cables, ...). One failure of any member has the same consequence, so
  one evaluation per group covers all of them (this is what keeps the ranking of a
  1,024-GPU cluster to a few dozen evaluations).
- :class:`FailureMode`: one way a member of a group fails: how often (per unit per year,
  with the source of the number), whether the job crashes, how many nodes can no longer
  run the plan at full capability, and how the job runs on the same hardware until the
  repair (an :class:`Impact`, or ``None`` when it cannot run there at all).
- :class:`Impact`: multiplicative changes to the interconnect and devices the slowest
  rank sees (synchronous training runs at the pace of its slowest rank).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from twin.core.conditions import Impact, UplinkLoss, ecmp_max_load

# Impact, UplinkLoss and ecmp_max_load are the network-change vocabulary (twin.core.conditions).
__all__ = ["EFFECTS", "ComponentGroup", "Effect", "FailureMode", "Impact", "UplinkLoss", "ecmp_max_load"]

Effect = Literal["down", "degraded", "congestion", "straggler"]
EFFECTS: tuple[str, ...] = ("down", "degraded", "congestion", "straggler")


@dataclass(frozen=True, slots=True)
class ComponentGroup:
    """Identical components of a cluster, grouped by symmetry.

    ``name`` is unique within a cluster (``gpu``, ``switch.leaf``, ``link.leaf-spine``);
    ``kind`` the component type (gpu, host, nic, nvswitch, nvlink_link, switch, link,
    transceiver, optical_engine, laser_source, cxl_device, software, fabric); ``tier``
    the hierarchy tier it belongs to (0 = scale-up domain); ``attrs`` plain facts the
    modes and reports use (ports, uplinks, packaging ...).
    """

    name: str
    kind: str
    count: int
    fabric: str = "core"
    tier: int | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"name": self.name, "kind": self.kind, "count": self.count, "fabric": self.fabric, "tier": self.tier,
                "attrs": dict(self.attrs), "source": self.source}


@dataclass(frozen=True, slots=True)
class FailureMode:
    """One way a member of a :class:`ComponentGroup` fails, and its consequence.

    ``annual_rate``: events per unit per year (``None``: no published default; a scenario
    may set one). ``interrupts``: the job crashes when it happens (it restarts from its
    last checkpoint). ``nodes_lost``: nodes that can no longer run the plan at full
    capability (replace them, run degraded, shrink, or wait for the repair).
    ``degraded``: how the job runs on the same hardware until the repair (``None``: it
    cannot). ``detection_s``: time until the failure is noticed (a crash is seen at once,
    a hang only when the collective watchdog fires). ``repair_h``: time until the
    component is back (or the episode ends). ``priority``: a mode with the same
    (component, name) from a more specific model replaces a lower-priority one.
    ``same_as``: this mode has the consequence of another mode of the same component (a
    plugin that knows a rate but not the topology, e.g. the optics plugin's transceiver
    failures of a link, which end like the fabric plugin's ``down``); ``supersedes``:
    modes of the same component whose rate this one replaces (they are dropped).
    """

    component: str
    name: str
    effect: str
    annual_rate: float | None
    rate_source: str
    interrupts: bool
    nodes_lost: float = 0.0
    degraded: Impact | None = None
    detection_s: float = 30.0
    repair_h: float = 4.0
    repair_source: str = ""
    priority: int = 0
    description: str = ""
    same_as: str | None = None
    supersedes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``component.name`` (what scenarios use to override a rate)."""
        return f"{self.component}:{self.name}"

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"component": self.component, "mode": self.name, "effect": self.effect,
                "annual_rate_per_unit": self.annual_rate, "rate_source": self.rate_source,
                "interrupts": self.interrupts, "nodes_lost": self.nodes_lost,
                "degraded": None if self.degraded is None else self.degraded.to_dict(),
                "detection_s": self.detection_s, "repair_h": self.repair_h, "description": self.description,
                "priority": self.priority, "supersedes": list(self.supersedes)}


def merge_modes(modes: list[FailureMode]) -> tuple[list[FailureMode], list[str]]:
    """Resolve ``same_as``/``supersedes``, then keep one mode per (component, name).

    The highest priority wins (ties keep the first). Returns the modes and notes about
    modes that could not be resolved (a ``same_as`` target nobody provides).
    """
    notes: list[str] = []
    by_key = {(m.component, m.name): m for m in modes if m.same_as is None}
    resolved: list[FailureMode] = []
    dropped: set[tuple[str, str]] = set()
    for mode in modes:
        final = mode
        if mode.same_as is not None:
            target = by_key.get((mode.component, mode.same_as))
            if target is None:
                notes.append(f"{mode.component}:{mode.name}: no '{mode.same_as}' mode to take its consequence from")
                continue
            final = replace(mode, interrupts=target.interrupts, nodes_lost=target.nodes_lost,
                            degraded=target.degraded, detection_s=target.detection_s, repair_h=target.repair_h,
                            repair_source=target.repair_source, same_as=None)
        dropped.update((final.component, s) for s in final.supersedes)
        resolved.append(final)
    modes = [m for m in resolved if (m.component, m.name) not in dropped or m.supersedes]
    best: dict[tuple[str, str], FailureMode] = {}
    order: list[tuple[str, str]] = []
    for mode in modes:
        k = (mode.component, mode.name)
        if k not in best:
            order.append(k)
            best[k] = mode
        elif mode.priority > best[k].priority:
            best[k] = mode
    return [best[k] for k in order], notes
