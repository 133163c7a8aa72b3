"""Component health from its signals: up / degraded / down, with evidence and capacity.

A component (GPU, NVLink, InfiniBand or RoCE port, transceiver, CXL device) carries one
value per signal (a counter's rate or a gauge's value), each produced by a
:class:`~twin.core.telemetry_vocab.MetricMapping` whose conditions say when the value means
trouble. The state is the most severe condition that fires; every condition that fires
is kept as evidence. The usable capacity (fraction of the component's nominal bandwidth)
comes from the mappings' capacity rules; a downed component has none.

For a tier of the fabric (scale-up, scale-out, compute), the usable fraction is that of
its worst component: collectives are synchronous and run at the pace of their slowest
link (ring and tree all-reduce move the same bytes over every link; NCCL's rings are as
slow as their slowest hop), and the twin does not know which links a job's groups
cross, so it assumes the job uses every monitored link (conservative).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from twin.core.telemetry_vocab import ComponentState, Evidence, MetricMapping
from twin.core.units import human, signal_unit

_RANK = {"up": 0, "degraded": 1, "down": 2}
# The fleet view (GetLiveState tiers) of a downed scale-out port whose GPU's traffic fails
# over to a sibling NIC in the same node: that NIC carries two GPUs' traffic, half the
# per-GPU bandwidth. Modelling assumption for the fleet roll-up only: a job's "now" prices its
# own parts by kind (twin.core.fault_kinds: the node's remaining NICs).
DOWN_FAILOVER_CAPACITY = 0.5
# A downed NVLink port of an 18-link (NVLink 4/5) GPU leaves 17/18 of its bandwidth
# (NVLink links are striped; NVIDIA H100/B200 datasheets: 18 links per GPU).
NVLINK_LINKS_PER_GPU = 18


@dataclass(frozen=True, slots=True)
class Health:
    """A component's state, why, and the fraction of its bandwidth it can deliver."""

    state: ComponentState
    evidence: tuple[Evidence, ...]
    capacity: float


def assess(signals: Mapping[str, float], mappings: Mapping[str, MetricMapping],
           peaks: Mapping[str, float]) -> Health:
    """Health of one component from its signal values.

    ``mappings``: the mapping that produced each signal; ``peaks``: the highest value each
    signal has reached (for ``ratio_to_peak`` capacity).
    """
    state = "up"
    evidence: list[Evidence] = []
    capacity = 1.0
    for sig, value in signals.items():
        m = mappings.get(sig)
        if m is None:
            continue
        for cond in m.conditions:
            if cond.holds(value):
                evidence.append(Evidence(sig, value, cond.describe(), cond.severity, cond.why, m.names[0]))
                if cond.severity != "info" and _RANK[cond.severity] > _RANK[state]:
                    state = cond.severity
        if m.capacity == "ratio_to_peak":
            peak = peaks.get(sig, 0.0)
            if peak > 0 and value < peak:
                frac = max(0.0, value / peak)
                capacity = min(capacity, frac)
                if frac < 0.99:
                    shown = human(peak, m.unit or signal_unit(sig))
                    evidence.append(Evidence(sig, value, f"< peak {shown}", "degraded",
                                             f"running at {100 * frac:.0f}% of the {shown} it has shown",
                                             m.names[0]))
                    if state == "up":
                        state = "degraded"
        elif m.capacity == "one_minus":
            capacity = min(capacity, max(0.0, 1.0 - value))
    if state == "down":
        capacity = 0.0
    return Health(state=state, evidence=tuple(evidence), capacity=capacity)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class ComponentView:
    """What the tier roll-up needs from one component."""

    id: str
    kind: str
    tier: str
    state: ComponentState
    capacity: float


@dataclass(frozen=True, slots=True)
class TierStatus:
    """Usable fraction of one tier, and the components that set it."""

    tier: str
    capacity: float
    limited_by: str = ""
    down: tuple[str, ...] = ()
    degraded: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def down_capacity(kind: str) -> float:
    """Usable fraction of a tier that a downed component of ``kind`` leaves (see module doc)."""
    if kind == "nvlink":
        return (NVLINK_LINKS_PER_GPU - 1) / NVLINK_LINKS_PER_GPU
    return DOWN_FAILOVER_CAPACITY


def tier_status(components: Iterable[ComponentView]) -> dict[str, TierStatus]:
    """Per tier: the worst component's usable fraction, and the down/degraded lists."""
    acc: dict[str, _TierAcc] = {}
    for c in components:
        if not c.tier or c.tier == "job":
            continue
        t = acc.setdefault(c.tier, _TierAcc())
        cap = c.capacity
        if c.state == "down":
            t.down.append(c.id)
            if c.kind == "gpu":  # a GPU that is gone stops its job (twin.core.fault_kinds), it does not slow a tier
                cap = 1.0
                t.notes.append(f"{c.id} is down: an interruption of the job that owns it (PredictLive.faults)")
            else:
                cap = down_capacity(c.kind)
                t.notes.append(f"{c.id} is down: the fleet view counts {100 * cap:.0f}% of the tier bandwidth; "
                               "each job prices its own parts by kind (PredictLive.faults)")
        elif c.state == "degraded":
            t.degraded.append(c.id)
        if cap < t.capacity:
            t.capacity, t.by = cap, c.id
    return {tier: TierStatus(tier=tier, capacity=t.capacity, limited_by=t.by, down=tuple(sorted(t.down)),
                             degraded=tuple(sorted(t.degraded)), notes=tuple(t.notes))
            for tier, t in sorted(acc.items())}


@dataclass
class _TierAcc:
    capacity: float = 1.0
    by: str = ""
    down: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
