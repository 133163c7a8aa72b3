"""One job's live conditions: its own parts, their faults by kind, and what they cost it.

The parts are the components on the job's hosts (:mod:`twin.telemetry.placement`); a job
registered without a placement sees every part (fleet-wide, as before placements existed),
which its answer states and which keeps it out of the calibration. Each part's firing
evidence goes through :func:`twin.core.fault_kinds.classify`; the job's "now" is then:

- bandwidth per tier: the worst of its parts' (a NIC down leaves its node (NICs up) / NICs,
  :data:`twin.core.fault_kinds.NCCL_SRC`; a degraded link its measured capacity; an NVLink
  link down 17/18, :data:`twin.core.health.NVLINK_LINKS_PER_GPU`);
- compute: the slowest GPU's SM clock over its peers' median (a straggler), or NVML's
  factor for a HW slowdown when clocks are not reported;
- interruptions: listed with their goodput cost (:func:`interruption_cost`), never a slower step.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twin.core.failures.analysis import FALLBACK_INTERVAL_S, checkpoint_figures
from twin.core.failures.failure_rates import DETECTION_CRASH_S, DETECTION_SOURCE
from twin.core.failures.failure_spec import FailureSpec
from twin.core.fault_kinds import HW_SLOWDOWN_FACTOR, NCCL_SRC, STRAGGLER_TOLERANCE, Fault, Part, classify
from twin.core.health import NVLINK_LINKS_PER_GPU, TierStatus
from twin.core.specs import Scenario
from twin.telemetry.placement import Placement
from twin.telemetry.state import Component

CLOCK_SIGNAL = "sm_clock_hz"
_SLOWDOWN_BITS = 0x08 | 0x80  # NVML HW slowdown, HW power brake


@dataclass(frozen=True, slots=True)
class JobLive:
    """A job's parts and what they cost it now (see the module docstring)."""

    placement_known: bool
    hosts: tuple[str, ...]
    ranked_by: str
    parts: int
    outside: int
    faults: tuple[Fault, ...]
    compute: float
    bandwidth: Mapping[str, float]
    limited_by: Mapping[str, str]
    down: tuple[str, ...]
    degraded: tuple[str, ...]
    unsettled: tuple[str, ...]
    healthy_since_ns: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The tier of every part that is not up or has a fault (for the per-tier lists).
    part_tiers: Mapping[str, str] = field(default_factory=dict)

    @property
    def interruptions(self) -> tuple[Fault, ...]:
        """Faults that stop the job."""
        return tuple(f for f in self.faults if f.consequence == "interruption")

    @property
    def healthy(self) -> bool:
        """Every part up and settled, nothing priced."""
        return not self.down and not self.degraded and not self.unsettled and all(
            f.consequence == "none" for f in self.faults)

    def key(self) -> tuple[Any, ...]:
        """What the job's "now" prediction depends on (for caches)."""
        return (round(self.compute, 4), tuple(sorted((t, round(v, 4)) for t, v in self.bandwidth.items())),
                tuple(f.component for f in self.interruptions), self.healthy, self.healthy_since_ns)

    def tiers(self) -> dict[str, TierStatus]:
        """The job's tiers as :class:`TierStatus` (what "now" used), notes = the faults' whys."""
        caps = {"compute": self.compute, **self.bandwidth}
        out = {}
        for tier in sorted(set(caps) | {"compute", "scale_up", "scale_out"}):
            of = self.part_tiers.get
            notes = tuple(f.why() for f in self.faults if of(f.component) == tier)
            out[tier] = TierStatus(tier, caps.get(tier, 1.0), self.limited_by.get(tier, ""),
                                   tuple(d for d in self.down if of(d) == tier),
                                   tuple(d for d in self.degraded if of(d) == tier), notes)
        return out


@dataclass(frozen=True, slots=True)
class PartIndex:
    """The live components (jobs' own step-time components left out) grouped by host and
    placement attributes, built once per read so that placing many jobs costs a match per
    group (about one per host), not per component.
    """

    groups: Mapping[tuple[str, tuple[tuple[str, str], ...]], list[Component]]
    by_host: Mapping[str, list[tuple[str, tuple[tuple[str, str], ...]]]]
    total: int


def index_parts(components: Iterable[Component]) -> PartIndex:
    """Group ``components`` by (host, their placement attributes)."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[Component]] = {}
    by_host: dict[str, list[tuple[str, tuple[tuple[str, str], ...]]]] = {}
    total = 0
    for c in components:
        if c.kind == "job":
            continue
        key = (c.host, c.attrs)
        group = groups.get(key)
        if group is None:
            group = groups[key] = []
            by_host.setdefault(c.host, []).append(key)
        group.append(c)
        total += 1
    return PartIndex(groups, by_host, total)


def job_parts(index: PartIndex, placement: Placement | None) -> tuple[list[Component], int]:
    """The components a job owns (all, without a placement) and how many others there are."""
    if placement is None:
        return [c for group in index.groups.values() for c in group], 0
    if placement.hosts:
        keys = [k for h in placement.hosts for k in index.by_host.get(h, ())]
    else:
        keys = [k for k in index.groups if placement.matches(k[0], dict(k[1]))]
    mine = [c for k in keys for c in index.groups[k]]
    return mine, index.total - len(mine)


def host_attributes(index: PartIndex) -> dict[str, dict[str, str]]:
    """Host -> the placement attributes its components carry (the first seen of each)."""
    out: dict[str, dict[str, str]] = {}
    for host, attrs in index.groups:
        if not host:
            continue
        merged = out.setdefault(host, {})
        for k, v in attrs:
            merged.setdefault(k, v)
    return out


def job_live(parts: list[Component], outside: int, placement: Placement | None, scn: Scenario) -> JobLive:
    """The job's conditions now from its own ``parts`` (see the module docstring)."""
    faults: list[Fault] = []
    for c in parts:
        faults.extend(classify(Part(c.id, c.kind, c.host, c.tier, c.state, c.capacity, c.signals,
                                    tuple((e.signal, e.value, e.severity) for e in c.evidence))))
    faults = _priced(faults, parts, scn)
    faults.extend(_clock_stragglers(parts, faults))
    flagged = {f.component for f in faults}
    part_tiers = {c.id: c.tier for c in parts if c.state != "up" or c.id in flagged}
    compute, bandwidth, limited = 1.0, {"scale_up": 1.0, "scale_out": 1.0}, {}
    for f in faults:
        if f.consequence == "straggler" and f.factor < compute:
            compute, limited["compute"] = f.factor, f.component
        elif f.consequence == "bandwidth":
            tier = part_tiers[f.component]
            if f.factor < bandwidth.get(tier, 1.0):
                bandwidth[tier], limited[tier] = f.factor, f.component
    hosts: list[str] = []
    ranked_by = "no placement: every part the twin sees counts (register the job with a placement)"
    if placement is not None:
        attrs: dict[str, dict[str, str]] = {}
        for c in parts:
            if c.host and c.host not in attrs:
                attrs[c.host] = dict(c.attrs)
        hosts, ranked_by = placement.ranked(attrs)
    notes = [f.why() for f in faults if f.consequence != "none"]
    if placement is not None and not parts:
        notes.append(f"no telemetry yet from the job's placement ({placement.describe()})")
    return JobLive(placement is not None, tuple(hosts), ranked_by, len(parts), outside, tuple(faults), compute,
                   bandwidth, limited, tuple(sorted(c.id for c in parts if c.state == "down")),
                   tuple(sorted(c.id for c in parts if c.state == "degraded")),
                   tuple(sorted(c.id for c in parts if c.pending)),
                   max((c.since_ns for c in parts), default=0), tuple(notes), part_tiers)


def _priced(faults: list[Fault], parts: list[Component], scn: Scenario) -> list[Fault]:
    """Each fault with its factor: NIC down -> the node's remaining NICs; NVLink down -> 17/18;
    a degraded link -> its measured capacity; a HW slowdown -> NVML's factor.
    """
    nics = max(1, scn.cluster.nics_per_node or 1)
    down_nics: dict[str, set[str]] = {}
    by_id = {c.id: c for c in parts}
    for f in faults:
        c = by_id[f.component]
        if f.consequence == "bandwidth" and c.state == "down" and c.kind in ("ib_port", "roce_port"):
            down_nics.setdefault(c.host, set()).add(c.id)
    out = []
    for f in faults:
        c = by_id[f.component]
        factor, what = f.factor, f.what
        if f.consequence == "bandwidth":
            if c.state == "down" and c.kind in ("ib_port", "roce_port"):
                left = nics - len(down_nics[c.host])
                if left <= 0:
                    out.append(Fault(f.component, f.host, f.kind, "interruption", f.evidence,
                                     f"every NIC of {c.host} is down: the node cannot reach the job", NCCL_SRC))
                    continue
                factor, what = left / nics, f"{f.what} ({left} of {nics} NICs of {c.host} up)"
            elif c.state == "down" and c.kind == "nvlink":
                factor = (NVLINK_LINKS_PER_GPU - 1) / NVLINK_LINKS_PER_GPU
            else:
                factor = c.capacity
        elif f.consequence == "straggler":
            reasons = int(c.signals.get("clock_event_reasons", 0))
            factor = HW_SLOWDOWN_FACTOR if reasons & _SLOWDOWN_BITS else 1.0
        out.append(Fault(f.component, f.host, f.kind, f.consequence, f.evidence, what, f.source, factor,
                         f.restart_in_place))
    # One fault per (component, consequence): the worst factor (several rules on one port).
    best: dict[tuple[str, str], Fault] = {}
    for f in out:
        k = (f.component, f.consequence)
        if k not in best or f.factor < best[k].factor:
            best[k] = f
    return list(best.values())


def _clock_stragglers(parts: list[Component], faults: list[Fault]) -> list[Fault]:
    """GPUs whose SM clock is below ``STRAGGLER_TOLERANCE`` of their peers' median: a straggler at
    that fraction (it replaces a throttle-reason fault of the same GPU, which the clock measures).
    """
    clocks = {c.id: c.signals[CLOCK_SIGNAL] for c in parts if c.kind == "gpu" and c.signals.get(CLOCK_SIGNAL, 0) > 0}
    if len(clocks) < 2:
        return []
    median = statistics.median(clocks.values())
    out = []
    for cid, clock in clocks.items():
        frac = clock / median
        if frac >= STRAGGLER_TOLERANCE:
            continue
        for i, f in enumerate(faults):
            if f.component == cid and f.consequence == "straggler":
                faults.pop(i)
                break
        c = next(p for p in parts if p.id == cid)
        out.append(Fault(cid, c.host, "gpu", "straggler",
                         f"SM clock {clock / 1e6:.0f} MHz = {100 * frac:.0f}% of its {len(clocks)} peers' median "
                         f"{median / 1e6:.0f} MHz", "the synchronous step runs at the slowest rank's speed: compute "
                         "time / clock fraction", "peak tensor FLOP/s = SMs x FLOP/clock/SM x SM clock (NVIDIA H100 "
                         "whitepaper); Llama 3 paper §3.3.4 (stragglers)", frac))
    return out


def interruption_cost(scn: Scenario, spec: FailureSpec, in_place: bool) -> dict[str, Any]:
    """What one interruption costs the job (module docstring of :mod:`twin.core.fault_kinds`).

    Lost work: half the checkpoint interval (``failures.checkpoint.interval_s``, else the
    stated one-hour fallback of the failure analysis); restart: detection + rescheduling on a
    replacement node (none for an in-place restart) + initialisation + checkpoint load.
    """
    ck = checkpoint_figures(scn, spec)
    interval = spec.checkpoint.interval_s or FALLBACK_INTERVAL_S
    r = spec.restart
    detection = r.detection_s if r.detection_s is not None else DETECTION_CRASH_S
    restart = detection + (0.0 if in_place else r.reschedule_s) + r.init_s + ck["load_s"]
    lost = interval / 2
    total = restart + lost
    gpus = scn.cluster.num_gpus
    return {"lost_work_s": lost, "restart_s": restart, "cost_s": total, "gpu_hours": total * gpus / 3600.0,
            "checkpoint_interval_s": interval, "ettr_day": max(0.0, 1.0 - total / 86400.0),
            "formula": "cost = checkpoint interval / 2 (work since the last checkpoint, Young 1974 / Daly 2006) + "
                       "restart (detection + " + ("" if in_place else "rescheduling + ") +
                       "initialisation + checkpoint load); ettr_day = 1 - cost / 24 h",
            "source": f"failures.checkpoint/restart of the job's scenario (defaults: RestartSpec; {DETECTION_SOURCE})"}
