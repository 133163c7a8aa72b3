"""The live state of the cluster as the twin sees it, built from mapped metric points.

Series (one per exporter metric x component x detail such as lane or priority) hold the
last accepted point and the rate or value derived from it (:mod:`twin.core.rates`).
Components (GPU, NVLink, port, transceiver, CXL device, job) aggregate their series into
signals and are assessed by :func:`twin.core.health.assess`. Cardinality is capped: a
point that would create a series or component beyond the caps is rejected, so a flood of
unique attribute values cannot grow memory without bound.

Not thread-safe by itself: the telemetry service serialises access with one lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from twin.core.health import ComponentView, assess
from twin.core.rates import SeriesPoint, update_counter, update_gauge
from twin.core.telemetry import STEP_TIME_SIGNAL, Evidence, MetricMapping
from twin.telemetry.mapping import MetricCatalog, Resolved

OBSERVATIONS_PER_JOB = 256
EVENTS_KEPT = 1000
SeriesKey = tuple[str, str, tuple[str, ...]]  # (metric key, component id, detail values)


@dataclass(slots=True)
class Point:
    """One decoded, mapped data point, ready to apply."""

    resolved: Resolved
    host: str
    switch: bool
    identity: tuple[str, ...]
    detail: tuple[str, ...]
    start_ns: int
    time_ns: int
    value: float
    delta: bool = False


@dataclass(slots=True)
class Component:
    """One monitored thing: its identity, signals, health and the series feeding it."""

    id: str
    kind: str
    host: str
    tier: str
    labels: dict[str, str]
    switch: bool = False
    series: dict[str, dict[tuple[str, tuple[str, ...]], float]] = field(default_factory=dict)
    mappings: dict[str, MetricMapping] = field(default_factory=dict)
    signals: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    state: str = "up"
    evidence: tuple[Evidence, ...] = ()
    capacity: float = 1.0
    last_seen_ns: int = 0
    since_ns: int = 0

    def view(self) -> ComponentView:
        """What the tier roll-up needs."""
        return ComponentView(self.id, self.kind, self.tier, self.state, self.capacity)  # type: ignore[arg-type]

    def to_record(self) -> dict[str, Any]:
        """Persistent form (signals are rebuilt from series on load)."""
        return {"kind": self.kind, "host": self.host, "tier": self.tier, "labels": self.labels,
                "switch": self.switch, "peaks": self.peaks, "state": self.state,
                "evidence": [[e.signal, e.value, e.rule, e.severity, e.why, e.metric] for e in self.evidence],
                "capacity": self.capacity, "last_seen_ns": self.last_seen_ns, "since_ns": self.since_ns}

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the API."""
        errors = {k: v for k, v in self.signals.items() if k.endswith("_per_s")}
        return {"id": self.id, "kind": self.kind, "host": self.host, "tier": self.tier, "labels": dict(self.labels),
                "state": self.state, "capacity": self.capacity,
                "evidence": [{"signal": e.signal, "value": e.value, "rule": e.rule, "severity": e.severity,
                              "why": e.why, "metric": e.metric, "text": e.text()} for e in self.evidence],
                "tx_Bps": self.signals.get("tx_Bps", 0.0), "rx_Bps": self.signals.get("rx_Bps", 0.0),
                "errors_per_s": errors, "signals": dict(self.signals), "last_seen_ns": self.last_seen_ns,
                "since_ns": self.since_ns}


@dataclass
class ApplyResult:
    """What became of a batch of points."""

    accepted: int = 0
    duplicates: int = 0
    resets: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def reject(self, reason: str, n: int = 1) -> None:
        """Count ``n`` rejected points under ``reason``."""
        self.rejected += n
        self.reasons[reason] = self.reasons.get(reason, 0) + n


@dataclass
class Dirty:
    """What a batch changed, for the store to write in one transaction."""

    series: set[SeriesKey] = field(default_factory=set)
    components: set[str] = field(default_factory=set)
    observations: list[tuple[str, int, float]] = field(default_factory=list)
    events: list[tuple[int, str, str, str, str]] = field(default_factory=list)


class LiveState:
    """Series, components, step-time observations and state-change events."""

    def __init__(self, catalog: MetricCatalog, *, max_series: int = 200_000, max_components: int = 50_000) -> None:
        self.catalog = catalog
        self.max_series = max_series
        self.max_components = max_components
        self.series: dict[SeriesKey, SeriesPoint] = {}
        self.components: dict[str, Component] = {}
        self.observations: dict[str, deque[tuple[int, float]]] = {}
        self.events: deque[tuple[int, str, str, str, str]] = deque(maxlen=EVENTS_KEPT)

    # ---------------------------------------------------------------- ingest
    def apply(self, points: Iterable[Point], now_ns: int, result: ApplyResult, dirty: Dirty) -> None:
        """Fold ``points`` into the state, counting outcomes in ``result`` and changes in ``dirty``."""
        series, components = self.series, self.components
        touched: set[str] = set()
        for p in points:
            m = p.resolved.mapping
            cid = f"job:{p.identity[0]}" if m.component == "job" else f"{p.host}/{m.component}:{'/'.join(p.identity)}"
            skey = (p.resolved.key, cid, p.detail)
            prev = series.get(skey)
            if prev is None and len(series) >= self.max_series:
                result.reject(f"series limit ({self.max_series}) reached")
                continue
            comp = components.get(cid)
            if comp is None:
                if len(components) >= self.max_components:
                    result.reject(f"component limit ({self.max_components}) reached")
                    continue
                labels = dict(zip((alts[0] for alts in p.resolved.identity), p.identity, strict=False))
                comp = components[cid] = Component(cid, m.component, p.host if m.component != "job" else "",
                                                   m.tier, labels, switch=p.switch, since_ns=now_ns)
            if m.kind == "counter":
                new, outcome = update_counter(prev, p.start_ns, p.time_ns, p.value, p.delta)
            else:
                new, outcome = update_gauge(prev, p.time_ns, p.value)
            if outcome == "duplicate":
                result.duplicates += 1
                result.accepted += 1
                continue
            if outcome == "reset":
                result.resets += 1
            series[skey] = new  # type: ignore[assignment]
            if new is not None and new.derived is not None:
                comp.series.setdefault(m.signal, {})[(p.resolved.key, p.detail)] = new.derived
                comp.mappings[m.signal] = m
            if p.time_ns > comp.last_seen_ns:
                comp.last_seen_ns = p.time_ns
            dirty.series.add(skey)
            touched.add(cid)
            if m.signal == STEP_TIME_SIGNAL:
                job = p.identity[0]
                self.observations.setdefault(job, deque(maxlen=OBSERVATIONS_PER_JOB)).append((p.time_ns, p.value))
                dirty.observations.append((job, p.time_ns, p.value))
            result.accepted += 1
        for cid in touched:
            self._reassess(components[cid], now_ns, dirty)
        dirty.components |= touched

    def _reassess(self, comp: Component, now_ns: int, dirty: Dirty) -> None:
        comp.signals = self._aggregate(comp)
        for sig, value in comp.signals.items():
            m = comp.mappings.get(sig)
            if m is not None and m.capacity == "ratio_to_peak" and value > comp.peaks.get(sig, 0.0):
                comp.peaks[sig] = value
        health = assess(comp.signals, comp.mappings, comp.peaks)
        if health.state != comp.state:
            why = "; ".join(e.text() for e in health.evidence if e.severity != "info") or "no rule fires any more"
            event = (now_ns, comp.id, comp.state, health.state, why)
            self.events.append(event)
            dirty.events.append(event)
            comp.since_ns = now_ns
        comp.state, comp.evidence, comp.capacity = health.state, health.evidence, health.capacity

    @staticmethod
    def _aggregate(comp: Component) -> dict[str, float]:
        out: dict[str, float] = {}
        for sig, per in comp.series.items():
            values = list(per.values())
            if not values:
                continue
            how = comp.mappings[sig].aggregate if sig in comp.mappings else "sum"
            out[sig] = max(values) if how == "max" else min(values) if how == "min" else sum(values)
        return out

    # ---------------------------------------------------------------- restore
    def restore(self, series: Iterable[tuple[SeriesKey, SeriesPoint]], components: Iterable[tuple[str, dict[str, Any]]],
                observations: Iterable[tuple[str, int, float]], events: Iterable[tuple[int, str, str, str, str]]) -> None:
        """Rebuild the state from what the store persisted (no reassessment: identical state)."""
        for cid, rec in components:
            self.components[cid] = Component(
                cid, rec["kind"], rec["host"], rec["tier"], dict(rec["labels"]), switch=bool(rec.get("switch")),
                peaks=dict(rec["peaks"]), state=rec["state"], evidence=tuple(Evidence(*e) for e in rec["evidence"]),
                capacity=float(rec["capacity"]), last_seen_ns=int(rec["last_seen_ns"]), since_ns=int(rec["since_ns"]))
        for key, point in series:
            self.series[key] = point
            comp = self.components.get(key[1])
            resolved = self.catalog.lookup(key[0])
            if comp is None or resolved is None or point.derived is None:
                continue
            m = resolved.mapping
            comp.series.setdefault(m.signal, {})[(key[0], key[2])] = point.derived
            comp.mappings[m.signal] = m
        for comp in self.components.values():
            comp.signals = self._aggregate(comp)
        for job, t, v in observations:
            self.observations.setdefault(job, deque(maxlen=OBSERVATIONS_PER_JOB)).append((t, v))
        self.events.extend(events)

    # ---------------------------------------------------------------- reading
    def snapshot(self, kinds: Iterable[str] = (), states: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Components as plain data, optionally filtered by kind and state, sorted by id."""
        ks, ss = set(kinds), set(states)
        return [c.to_dict() for cid, c in sorted(self.components.items())
                if (not ks or c.kind in ks) and (not ss or c.state in ss)]

    def switches(self) -> list[dict[str, Any]]:
        """Switches (hosts named by a ``switch`` attribute), rolled up from their ports."""
        by: dict[str, list[Component]] = {}
        for c in self.components.values():
            if c.switch:
                by.setdefault(c.host, []).append(c)
        out = []
        for host, comps in sorted(by.items()):
            states = [c.state for c in comps]
            state = "down" if all(s == "down" for s in states) else (
                "degraded" if any(s != "up" for s in states) else "up")
            out.append({"id": f"{host}/switch", "kind": "switch", "host": host, "state": state,
                        "ports": len(comps), "ports_down": states.count("down"),
                        "ports_degraded": states.count("degraded")})
        return out
