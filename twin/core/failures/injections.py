"""Injected failures ("what if THAT fails?") -> the failure mode to evaluate.

Each injection kind maps onto a component group and one of its failure modes from the
inventory, or builds a degraded mode from the injection's parameters (a link at half its
lanes, a GPU at 70 % of its clock, a congestion episode keeping 30 % of bandwidth). Bad
injections are errors naming the field (``failures.inject[0].component: ...``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from twin.core.errors import SpecError
from twin.core.failures.components import ComponentGroup, FailureMode, Impact
from twin.core.failures.fabric import go_back_n_efficiency, link_degraded_impact
from twin.core.failures.failure_spec import Injection
from twin.core.specs import Scenario
from twin.core.topology import Hierarchy
from twin.core.units import HOUR_S, gbps_to_bytes_per_s

# RoCE/InfiniBand MTU 4096 B plus transport headers (RoCEv2: Ethernet 14 + IP 20 + UDP 8 +
# BTH 12 + ICRC 4 + FCS 4 = 62 B; IB's LRH/BTH/CRCs are similar).
PACKET_BYTES = 4096 + 62


def _known(groups: Sequence[ComponentGroup]) -> str:
    return ", ".join(g.name for g in groups)


def _group(groups: Sequence[ComponentGroup], name: str | None, path: str,
           kinds: tuple[str, ...] = ()) -> ComponentGroup:
    pool = [g for g in groups if not kinds or g.kind in kinds]
    if name is None:
        raise SpecError(path, f"is required; one of: {_known(pool)}")
    for g in pool:
        if g.name == name:
            return g
    same_kind = [g for g in pool if g.kind == name]
    if len(same_kind) == 1:
        return same_kind[0]
    raise SpecError(path, f"unknown component {name!r}; one of: {_known(pool) or 'none in this cluster'}")


def _mode(modes: Sequence[FailureMode], group: ComponentGroup, name: str | None, path: str,
          effects: tuple[str, ...] = ("down",)) -> FailureMode:
    own = [m for m in modes if m.component == group.name]
    if name is not None:
        for m in own:
            if m.name == name:
                return m
        raise SpecError(path, f"unknown failure mode {name!r} of {group.name}; one of: "
                              f"{', '.join(m.name for m in own) or 'none'}")
    for preferred in ("down", "optics"):
        for m in own:
            if m.name == preferred and m.effect in effects:
                return m
    for m in own:
        if m.effect in effects:
            return m
    raise SpecError(path, f"{group.name} has no failure mode of effect {'/'.join(effects)}")


def _times(mode: FailureMode, count: int) -> FailureMode:
    """``count`` members at once, placed where they hurt most (the same switch, the same rank).

    Nodes lost add up; uplinks lost at one switch add up; bandwidth and compute factors
    are per rank and the slowest rank decides, so they do not compound.
    """
    if count == 1:
        return mode
    impact = mode.degraded
    if impact is not None and impact.uplinks:
        impact = dataclasses.replace(impact, uplinks=tuple(
            dataclasses.replace(u, lost=min(u.uplinks, u.lost * count)) for u in impact.uplinks),
            note=f"{impact.note} (x{count} at one switch)")
    return dataclasses.replace(mode, nodes_lost=mode.nodes_lost * count, degraded=impact)


def _link_factor(inj: Injection, hierarchy: Hierarchy, group: ComponentGroup, path: str) -> float:
    factor = inj.lanes_fraction * inj.speed_fraction
    if inj.ber > 0:
        gbps = float(group.attrs.get("gbps", 400.0))
        rtt = 2.0 * hierarchy.tiers[-1].latency_s if group.kind == "link" else 2.0 * hierarchy.tiers[0].latency_s
        window = max(1.0, math.ceil(gbps_to_bytes_per_s(gbps) * rtt / PACKET_BYTES))
        factor *= go_back_n_efficiency(inj.ber, PACKET_BYTES, window)
    if factor >= 1.0:
        raise SpecError(path, "a degraded link needs lanes_fraction < 1, speed_fraction < 1 or ber > 0")
    return factor


class _Against(NamedTuple):
    """What an injection is resolved against: the cluster's component groups and failure
    modes, the scenario, its hierarchy and the repair hours per component kind.
    """

    groups: Sequence[ComponentGroup]
    modes: Sequence[FailureMode]
    scenario: Scenario
    hierarchy: Hierarchy
    repair_h: dict[str, float]


def injection_mode(inj: Injection, index: int, groups: Sequence[ComponentGroup], modes: Sequence[FailureMode],
                   scenario: Scenario, hierarchy: Hierarchy,
                   repair_h: dict[str, float]) -> tuple[ComponentGroup, FailureMode]:
    """The component and failure mode an injection means (errors name the field)."""
    path = f"failures.inject[{index}]"
    kind = inj.kind
    resolve = _BY_KIND.get(kind)
    if resolve is None:
        raise SpecError(f"{path}.kind", f"unknown injection kind {kind!r}")  # pragma: no cover - Literal-checked
    return resolve(inj, path, _Against(groups, modes, scenario, hierarchy, repair_h))


def _component_down(inj: Injection, path: str, at: _Against) -> tuple[ComponentGroup, FailureMode]:
    group = _group(at.groups, inj.component, f"{path}.component")
    mode = _mode(at.modes, group, inj.mode, f"{path}.mode", effects=("down", "degraded", "straggler", "congestion"))
    return group, _times(mode, inj.count)


def _switch_down(inj: Injection, path: str, at: _Against) -> tuple[ComponentGroup, FailureMode]:
    tier = inj.tier or "leaf"
    group = _group(at.groups, f"switch.{tier}", f"{path}.tier", kinds=("switch",))
    return group, _times(_mode(at.modes, group, inj.mode, f"{path}.mode"), inj.count)


def _cxl_device_lost(inj: Injection, path: str, at: _Against) -> tuple[ComponentGroup, FailureMode]:
    devices = [g for g in at.groups if g.kind == "cxl_device"]
    if not devices:
        raise SpecError(f"{path}.kind", "the cluster has no CXL memory pool (cluster.memory_pool)")
    return devices[0], _times(_mode(at.modes, devices[0], inj.mode, f"{path}.mode"), inj.count)


def _laser_failure(inj: Injection, path: str, at: _Against) -> tuple[ComponentGroup, FailureMode]:
    optics = at.scenario.cluster.optics
    if optics is None:
        raise SpecError(f"{path}.kind", "laser failures need an optics model (cluster.optics)")
    link = _group(at.groups, inj.component or "link.nic-leaf", f"{path}.component", kinds=("link",))
    if optics.kind == "cpo":
        # The switch end's shared laser: a leaf's down-port laser for a NIC link, the
        # lower switch's up-port laser for a switch-to-switch link.
        lower = str(link.attrs.get("lower", "leaf"))
        end, ports = (str(link.attrs.get("upper", "leaf")), "down_ports") if lower == "nic" else (lower, "up_ports")
        group = _group(at.groups, f"laser_source.{end}", f"{path}.component", kinds=("laser_source",))
        return group, _times(_mode(at.modes, group, inj.mode or ports, f"{path}.mode"), inj.count)
    return link, _times(_mode(at.modes, link, "optics", f"{path}.mode"), inj.count)


def _link_degraded(inj: Injection, path: str, at: _Against) -> tuple[ComponentGroup, FailureMode]:
    hierarchy = at.hierarchy
    group = _group(at.groups, inj.component, f"{path}.component", kinds=("link", "nvlink_link"))
    factor = _link_factor(inj, hierarchy, group, path)
    if group.kind == "nvlink_link":
        links = int(group.attrs.get("links_per_gpu", 18))
        # NVLink flow control is credit-based, so traffic shifts off a slow link: capacity model.
        impact = Impact(tier_bw=((0, (links - 1 + factor) / links),),
                        note=f"one of {links} NVLink links at {factor:.0%}")
    else:
        impact = link_degraded_impact(group, hierarchy, factor, bool(group.attrs.get("adaptive_routing", True)),
                                      float(group.attrs.get("hashed_flows_per_uplink", 0.0)))
        if impact.uplinks and inj.count > 1:
            impact = dataclasses.replace(impact, uplinks=tuple(
                dataclasses.replace(u, lost=u.lost * inj.count) for u in impact.uplinks))
    hours = inj.duration_s / HOUR_S if inj.duration_s else at.repair_h.get(group.kind, 4.0)
    return group, FailureMode(group.name, "degraded", "degraded", None, "injected", interrupts=False,
                              degraded=impact, repair_h=hours, repair_source="injection duration_s or repair_h",
                              description=f"link at {factor:.1%} of its rate")


def _congestion(inj: Injection, path: str, at: _Against) -> tuple[ComponentGroup, FailureMode]:
    modes = at.modes
    fabric = [g for g in at.groups if g.kind == "fabric"]
    cause = inj.cause or "congestion"
    declared = [m for m in modes if fabric and m.component == fabric[0].name and m.name == cause]
    tiers = tuple(range(1, len(at.hierarchy.tiers)))
    if not tiers:
        raise SpecError(f"{path}.kind", "the cluster has no scale-out network to congest")
    if declared:
        group, mode = fabric[0], declared[0]
        impact = mode.degraded or Impact()
        if inj.fraction is not None:
            impact = dataclasses.replace(impact, tier_bw=tuple((t, inj.fraction) for t, _ in impact.tier_bw))
    else:
        if inj.fraction is None:
            known = ", ".join(m.name for m in modes if fabric and m.component == fabric[0].name)
            raise SpecError(f"{path}.fraction", f"is required for cause {cause!r} (this fabric declares: "
                                                f"{known or 'no congestion modes'})")
        group = fabric[0] if fabric else ComponentGroup("scale_out", "fabric", 1, "core")
        impact = Impact(tier_bw=tuple((t, inj.fraction) for t in tiers), note=f"{cause}: {inj.fraction:.0%}")
        mode = FailureMode(group.name, cause, "congestion", None, "injected", interrupts=False, repair_h=0.1)
    hours = inj.duration_s / HOUR_S if inj.duration_s else mode.repair_h
    return group, dataclasses.replace(mode, degraded=impact, repair_h=hours)


def _straggler(inj: Injection, path: str, at: _Against) -> tuple[ComponentGroup, FailureMode]:
    gpu = _group(at.groups, "gpu", f"{path}.component")
    cause = inj.cause or "thermal_throttle"
    mode = _mode(at.modes, gpu, cause, f"{path}.cause", effects=("straggler",))
    impact = mode.degraded or Impact()
    if inj.fraction is not None:
        impact = dataclasses.replace(impact, compute=inj.fraction if impact.compute != 1.0 else 1.0,
                                     hbm=inj.fraction if impact.hbm != 1.0 else 1.0)
    hours = inj.duration_s / HOUR_S if inj.duration_s else mode.repair_h
    return gpu, dataclasses.replace(mode, degraded=impact, repair_h=hours, nodes_lost=mode.nodes_lost * inj.count)


# Each injection kind (failure_spec.Injection.kind) and what it resolves to.
_BY_KIND: dict[str, Callable[[Injection, str, _Against], tuple[ComponentGroup, FailureMode]]] = {
    "component_down": _component_down,
    "switch_down": _switch_down,
    "cxl_device_lost": _cxl_device_lost,
    "laser_failure": _laser_failure,
    "link_degraded": _link_degraded,
    "congestion": _congestion,
    "straggler": _straggler,
}


def uplink_capacity(impact: Impact | None, spare_uplinks: float = 0.0) -> float | None:
    """Up-capacity fraction of the worst-hit switch (None: no switch loses uplinks)."""
    if impact is None or not impact.uplinks:
        return None
    return min(u.capacity_fraction(spare_uplinks) for u in impact.uplinks)

