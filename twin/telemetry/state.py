"""The live state of the cluster as the twin sees it, built from mapped metric points.

Series (one per exporter metric x component x detail such as lane or priority) hold the
last accepted point and the rate or value derived from it (:mod:`twin.core.counter_rates`).
Components (GPU, NVLink, port, transceiver, CXL device, job) aggregate their series into
signals and are assessed by :func:`twin.core.health.assess`. Cardinality is capped: a
point that would create a series or component beyond the caps is rejected, so a flood of
unique attribute values cannot grow memory without bound.

Not thread-safe by itself: the telemetry service serialises access with one lock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from twin.core.counter_rates import SeriesPoint, update_counter
from twin.core.health import ComponentView, assess
from twin.core.telemetry_vocab import STEP_TIME_SIGNAL, Evidence, MetricMapping
from twin.telemetry.mapping import MetricCatalog, Resolved
from twin.telemetry.placement import PLACEMENT_KEYS

OBSERVATIONS_PER_JOB = 256
# A signal's value from its series' values (MetricMapping.aggregate).
Aggregate = Callable[[Iterable[float]], float]
_AGGREGATES: dict[str, Aggregate] = {"sum": sum, "max": max, "min": min}
EVENTS_KEPT = 1000
SeriesKey = tuple[str, str, tuple[str, ...]]  # (metric key, component id, detail values)


@dataclass(frozen=True, slots=True)
class SeriesId:
    """Everything about a series that its attributes determine, computed once per attribute set.

    ``key``: (metric key, component id, detail values); ``text``: the same as one string,
    which keys the live state and the store (a string caches its hash; a tuple's is worked
    out at every lookup). ``cid``, ``mapping`` and ``counter`` are parts of the others, kept
    apart because applying a point reads them for every point.
    """

    key: SeriesKey
    text: str
    resolved: Resolved
    host: str
    switch: bool
    labels: tuple[tuple[str, str], ...]
    cid: str
    mapping: MetricMapping
    counter: bool
    placement: tuple[tuple[str, str], ...] = ()


def series_id(resolved: Resolved, host: str, switch: bool, identity: tuple[str, ...],
              detail: tuple[str, ...], placement: tuple[tuple[str, str], ...] = ()) -> SeriesId:
    """The id of the series of ``resolved``'s metric for one component and detail."""
    m = resolved.mapping
    cid = f"job:{identity[0]}" if m.component == "job" else f"{host}/{m.component}:{'/'.join(identity)}"
    key = (resolved.key, cid, detail)
    labels = tuple(zip((alts[0] for alts in resolved.identity), identity, strict=False))
    return SeriesId(key, series_key_text(key), resolved, host if m.component != "job" else "", switch, labels,
                    cid, m, m.kind == "counter", placement)


def series_key_text(key: SeriesKey) -> str:
    """Series key as one string (unit/record separators cannot occur in metric names)."""
    return key[0] + _SEP + key[1] + _SEP + _RS.join(key[2])


STATES = ("up", "degraded", "down")
INT64_MAX = 2**63 - 1  # what SQLite INTEGER and protobuf int64 hold


def stored_ns(value: Any, name: str = "timestamp") -> int:
    """A stored nanosecond timestamp, checked: an integer in [0, 2^63-1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 <= value <= INT64_MAX or value != int(value):
        raise ValueError(f"{name} {value!r} is not an integer in [0, 2^63-1] ns")
    return int(value)


def stored_float(value: Any, name: str = "value", low: float = -math.inf, high: float = math.inf) -> float:
    """A stored number, checked: finite and in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ValueError(f"{name} {value!r} is not a finite number in [{low}, {high}]")
    return float(value)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} {value!r} is not text")
    return value


def _restored_component(cid: str, rec: dict[str, Any]) -> Component:
    """A component from its persisted record, every field checked (KeyError/TypeError/ValueError
    name what is wrong), so a record written by another version or edited by hand cannot reach
    the API with a value it cannot encode.
    """
    state = _text(rec["state"], "state")
    if state not in STATES:
        raise ValueError(f"state {state!r} is not one of {', '.join(STATES)}")
    labels, peaks = rec["labels"], rec["peaks"]
    if not isinstance(labels, dict) or not isinstance(peaks, dict):
        raise TypeError("labels and peaks must be mappings")
    evidence = []
    for e in rec["evidence"]:
        signal, value, rule, severity, why, *metric = e  # records before 'metric' have five fields
        if len(metric) > 1:
            raise ValueError(f"evidence {e!r} has more than six fields")
        evidence.append(Evidence(_text(signal, "evidence signal"), stored_float(value, "evidence value"),
                                 _text(rule, "evidence rule"), _text(severity, "evidence severity"),  # type: ignore[arg-type]
                                 _text(why, "evidence why"), _text(metric[0] if metric else "", "evidence metric")))
    return Component(
        cid, _text(rec["kind"], "kind"), _text(rec["host"], "host"), _text(rec["tier"], "tier"),
        {_text(k, "label"): _text(v, "label value") for k, v in labels.items()}, switch=bool(rec.get("switch")),
        peaks={_text(k, "peak"): stored_float(v, "peak", 0.0) for k, v in peaks.items()}, state=state,
        evidence=tuple(evidence), capacity=stored_float(rec["capacity"], "capacity", 0.0, 1.0),
        last_seen_ns=stored_ns(rec["last_seen_ns"], "last_seen_ns"), since_ns=stored_ns(rec["since_ns"], "since_ns"),
        attrs=tuple((k, labels[k]) for k in PLACEMENT_KEYS if k in labels and k != "host.name"))


def series_key_parse(text: str) -> SeriesKey:
    """Inverse of :func:`series_key_text`."""
    metric, cid, detail = text.split(_SEP, 2)
    return metric, cid, tuple(detail.split(_RS)) if detail else ()


@dataclass(slots=True)
class Block:
    """Decoded points of one metric of one request, in order, column by column.

    Columns of numbers rather than one tuple per point: ints and floats are not tracked by
    the cyclic garbage collector, so a block costs it one list per column, not one object
    per point. ``delta``: the metric's temporality is delta (OTLP ``AGGREGATION_TEMPORALITY_DELTA``).
    """

    sids: list[SeriesId]
    starts: list[int]
    times: list[int]
    values: list[float]
    delta: bool = False

    def __len__(self) -> int:
        return len(self.times)
_SEP, _RS = "\x1f", "\x1e"


@dataclass(slots=True)
class Component:
    """One monitored thing: its identity, signals, health and the series feeding it."""

    id: str
    kind: str
    host: str
    tier: str
    labels: dict[str, str]
    switch: bool = False
    # signal -> series text -> the series' derived value (the component's id is in every text).
    series: dict[str, dict[str, float]] = field(default_factory=dict)
    mappings: dict[str, MetricMapping] = field(default_factory=dict)
    signals: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    state: str = "up"
    evidence: tuple[Evidence, ...] = ()
    capacity: float = 1.0
    last_seen_ns: int = 0
    since_ns: int = 0
    ruled: tuple[tuple[str, float], ...] | None = None
    # A state the assessments point to but have not confirmed yet (hysteresis), and how
    # many consecutive assessments have pointed to it.
    pending: str = ""
    pending_n: int = 0
    # How to aggregate each signal, (signal, its series, how) in series order, and the
    # signals whose rules decide health: derived from ``series`` and ``mappings``, kept
    # because every batch needs them (None: work them out again, after a signal was added).
    plan: tuple[tuple[tuple[str, dict[str, float], Aggregate], ...], tuple[str, ...]] | None = None
    # The placement attributes (twin.telemetry.placement) last merged into ``labels``.
    attrs: tuple[tuple[str, str], ...] = ()

    def view(self) -> ComponentView:
        """What the tier roll-up needs."""
        return ComponentView(self.id, self.kind, self.tier, self.state, self.capacity)  # type: ignore[arg-type]

    def to_record(self) -> dict[str, Any]:
        """Persistent form: everything the API shows (series baselines are checkpointed apart)."""
        return {"kind": self.kind, "host": self.host, "tier": self.tier, "labels": self.labels,
                "switch": self.switch, "peaks": self.peaks, "signals": self.signals, "state": self.state,
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
    """What a batch changed, for the store to write in one transaction.

    ``components``: components whose signals or last-seen time moved (every one a point
    reached); ``records``: those whose persistent record beyond that changed too (new, or
    reassessed: state, evidence, capacity, peaks, since).
    """

    series: set[str] = field(default_factory=set)  # series texts
    components: set[str] = field(default_factory=set)
    records: set[str] = field(default_factory=set)
    observations: list[tuple[str, int, float]] = field(default_factory=list)
    events: list[tuple[int, str, str, str, str]] = field(default_factory=list)


# A component's fields a batch may reassign (their old values are kept by reference: each is
# replaced, never changed in place, apart from the dicts kept apart in Undo.dicts).
_COMPONENT_FIELDS = ("last_seen_ns", "signals", "state", "evidence", "capacity", "since_ns", "ruled", "pending",
                     "pending_n", "plan", "labels", "attrs")
_SERIES_STRIDE = 8  # Undo.series: text, slot, start_ns, time_ns, value, derived, per, comp
_COMPONENT_STRIDE = 1 + len(_COMPONENT_FIELDS)


@dataclass(slots=True)
class Undo:
    """What a batch changed in the live state, kept so that a batch whose commit fails can be
    taken back (:meth:`LiveState.rollback`): only acknowledged points are live.

    Each entry is the value before the batch's first change to it. ``series``: a known series'
    text, slot and last point, flat (``_SERIES_STRIDE`` items each), ``new_series`` the ones the
    batch created; ``components``: a known component and its fields (``_COMPONENT_STRIDE``
    items each), ``new_components`` the ones it created; ``dicts``: a component's ``peaks``,
    ``mappings`` and ``series`` dicts, copied only before the rare changes to them (a new signal,
    a new peak); ``observations``: a job's window (None: the batch started it); ``events``: the
    event log (None: untouched). Flat lists of what exists anyway, not a tuple per point: what
    a point costs is a set lookup and, the first time, one list extension, and the cyclic
    collector sees no new objects (``benchmarks/bench_ingest.py``).
    """

    seen: set[str] = field(default_factory=set)
    series: list[Any] = field(default_factory=list)
    new_series: list[str] = field(default_factory=list)
    kept: set[str] = field(default_factory=set)
    components: list[Any] = field(default_factory=list)
    new_components: list[str] = field(default_factory=list)
    dicts: dict[str, tuple[dict[str, float], dict[str, MetricMapping], dict[str, dict[str, float]]]] = \
        field(default_factory=dict)
    observations: dict[str, list[tuple[int, float]] | None] = field(default_factory=dict)
    events: list[tuple[int, str, str, str, str]] | None = None

    def keep_dicts(self, comp: Component) -> None:
        """Copy ``comp``'s peaks, mappings and series dicts before the batch changes one of them."""
        if comp.id not in self.dicts:
            self.dicts[comp.id] = (dict(comp.peaks), dict(comp.mappings), dict(comp.series))


@dataclass(slots=True)
class _Series(SeriesPoint):
    """A series' last point (:class:`~twin.core.counter_rates.SeriesPoint`), with the component and
    signal values it feeds: found with the series' first point instead of at every point.
    """

    comp: Component | None = None
    per: dict[str, float] | None = None


def _labels(sid: SeriesId) -> dict[str, str]:
    """A new component's labels: its identifying attributes first, then its placement attributes."""
    labels = dict(sid.labels)
    for k, v in sid.placement:
        labels.setdefault(k, v)
    return labels


# Which states are worse than which (hysteresis turns worse and better at different paces).
_SEVERITY = {"up": 0, "degraded": 1, "down": 2}


class LiveState:
    """Series, components, step-time observations and state-change events."""

    def __init__(self, catalog: MetricCatalog, *, max_series: int = 200_000, max_components: int = 50_000,
                 degrade_after: int = 1, recover_after: int = 3) -> None:
        self.catalog = catalog
        self.max_series = max_series
        self.max_components = max_components
        # Consecutive assessments before a state turns worse / better (TelemetryConfig).
        self.degrade_after = degrade_after
        self.recover_after = recover_after
        self.series: dict[str, _Series] = {}  # by series text
        self.components: dict[str, Component] = {}
        self.observations: dict[str, deque[tuple[int, float]]] = {}
        self.events: deque[tuple[int, str, str, str, str]] = deque(maxlen=EVENTS_KEPT)
        #: Persisted records :meth:`restore` could not use: (table, key, why).
        self.skipped: list[tuple[str, str, str]] = []
        #: Bumped whenever a component may have changed (an apply that touched one, a rollback, a
        #: restore): what readers derived from the components stays valid while it is the same.
        self.parts_version = 0

    # ---------------------------------------------------------------- ingest
    def apply(self, blocks: Iterable[Block], now_ns: int, result: ApplyResult, dirty: Dirty,
              undo: Undo | None = None) -> None:
        """Fold the points of ``blocks`` into the state, counting outcomes in ``result`` and changes in
        ``dirty``; ``undo`` (shared by the batches of one commit) records how to take them back.
        """
        touched: dict[str, Component] = {}
        undo = Undo() if undo is None else undo
        for block in blocks:
            accepted, duplicates, resets = self._apply_block(block, now_ns, result, dirty, touched, undo)
            result.accepted += accepted + duplicates  # a duplicate is accepted (and changes nothing)
            result.duplicates += duplicates
            result.resets += resets
        for comp in touched.values():
            if self._reassess(comp, now_ns, dirty, undo):
                dirty.records.add(comp.id)
        dirty.components.update(touched)
        if touched:
            self.parts_version += 1

    def _apply_block(self, block: Block, now_ns: int, result: ApplyResult, dirty: Dirty,
                     touched: dict[str, Component], undo: Undo) -> tuple[int, int, int]:
        """One block's points; returns (applied, duplicates, resets) and adds what it touched."""
        series, components = self.series, self.components
        max_series, max_components = self.max_series, self.max_components
        dirty_series = dirty.series
        delta = block.delta
        seen, saved, new_series, kept = undo.seen, undo.series, undo.new_series, undo.kept
        # Counted in locals and added once: this loop runs for every point.
        accepted = duplicates = resets = 0
        for sid, start, t, value in zip(block.sids, block.starts, block.times, block.values, strict=True):
            text = sid.text
            slot = series.get(text)
            if slot is not None:
                if text not in seen:  # its last point before this batch, to take back
                    seen.add(text)
                    saved.extend((text, slot, slot.start_ns, slot.time_ns, slot.value, slot.derived, slot.per,
                                  slot.comp))
                comp = slot.comp
            else:
                comp = None
            if comp is None:  # a new series, or one restored without its component
                if slot is None and len(series) >= max_series:
                    result.reject(f"series limit ({max_series}) reached")
                    continue
                cid = sid.cid
                comp = components.get(cid)
                if comp is None:
                    if len(components) >= max_components:
                        result.reject(f"component limit ({max_components}) reached")
                        continue
                    m = sid.mapping
                    comp = components[cid] = Component(cid, m.component, sid.host, m.tier,
                                                       _labels(sid),
                                                       switch=sid.switch, since_ns=now_ns, attrs=sid.placement)
                    undo.new_components.append(cid)
                    kept.add(cid)  # created by this batch: removed, not restored
                    dirty.records.add(cid)
                if slot is not None:
                    slot.comp = comp
            if slot is None:
                first = update_counter(None, start, t, value, delta)[0] if sid.counter else None
                slot = series[text] = (_Series(first.start_ns, first.time_ns, first.value, first.derived, comp)
                                       if first is not None else _Series(0, t, value, value, comp))
                seen.add(text)  # created by this batch: removed, not restored
                new_series.append(text)
            elif t <= slot.time_ns:  # not newer: a duplicate, counter or gauge (twin.core.counter_rates)
                duplicates += 1
                continue
            elif not sid.counter:
                slot.start_ns, slot.time_ns, slot.value, slot.derived = 0, t, value, value
            elif not delta and value >= slot.value and (start == slot.start_ns or not start or not slot.start_ns):
                # update_counter's plain case (no reset, no restart), done in place: same arithmetic.
                slot.derived = (value - slot.value) / ((t - slot.time_ns) * 1e-9)
                slot.start_ns, slot.time_ns, slot.value = start, t, value
            else:
                new, outcome = update_counter(slot, start, t, value, delta)
                if outcome == "reset":
                    resets += 1
                slot.start_ns, slot.time_ns, slot.value, slot.derived = (  # type: ignore[union-attr]
                    new.start_ns, new.time_ns, new.value, new.derived)  # type: ignore[union-attr]
            cid = comp.id
            if cid not in touched and cid not in kept:
                kept.add(cid)
                undo.components.extend((comp, *[getattr(comp, f) for f in _COMPONENT_FIELDS]))
            placed = sid.placement
            if placed and placed is not comp.attrs:
                if placed != comp.attrs:  # the host's scheduler attributes changed (a new job on it)
                    old = dict(comp.attrs)
                    comp.labels = {**{k: v for k, v in comp.labels.items() if k not in old}, **dict(placed)}
                    dirty.records.add(cid)
                comp.attrs = placed
            derived = slot.derived
            if derived is not None:
                per = slot.per
                if per is None:
                    signal = sid.mapping.signal
                    per = comp.series.get(signal)
                    if per is None:
                        undo.keep_dicts(comp)
                        per = comp.series[signal] = {}
                        comp.mappings[signal] = sid.mapping
                        comp.plan = None
                    slot.per = per
                per[text] = derived
            if t > comp.last_seen_ns:  # noqa: PLR1730 (max() costs more, and this runs for every point)
                comp.last_seen_ns = t
            dirty_series.add(text)
            touched[cid] = comp
            if sid.mapping.signal == STEP_TIME_SIGNAL:
                job = sid.labels[0][1] if sid.labels else comp.labels[next(iter(comp.labels))]
                if job not in undo.observations:
                    window = self.observations.get(job)
                    undo.observations[job] = list(window) if window is not None else None
                self.observations.setdefault(job, deque(maxlen=OBSERVATIONS_PER_JOB)).append((t, value))
                dirty.observations.append((job, t, value))
            accepted += 1
        return accepted, duplicates, resets

    def _reassess(self, comp: Component, now_ns: int, dirty: Dirty, undo: Undo) -> bool:
        """Aggregate ``comp``'s signals and assess it; True when its record beyond the signals changed."""
        plan = comp.plan
        if plan is None:
            plan = comp.plan = self._plan(comp)
        aggregates, names = plan
        comp.signals = signals = {sig: how(per.values()) for sig, per, how in aggregates if per}
        mappings = comp.mappings
        # Only signals with rules decide health: when none of them moved (byte counters
        # change every interval, error counters rarely do), the assessment cannot change.
        ruled = tuple([(sig, signals[sig]) for sig in names if sig in signals])
        if ruled == comp.ruled and comp.ruled is not None and not comp.pending:
            return False
        comp.ruled = ruled
        for sig, value in ruled:
            if mappings[sig].capacity == "ratio_to_peak" and value > comp.peaks.get(sig, 0.0):
                undo.keep_dicts(comp)
                comp.peaks[sig] = value
        health = assess(signals, mappings, comp.peaks)
        if health.state != comp.state:
            worse = _SEVERITY.get(health.state, 0) > _SEVERITY.get(comp.state, 0)
            comp.pending_n = comp.pending_n + 1 if comp.pending == health.state else 1
            comp.pending = health.state
            if comp.pending_n < (self.degrade_after if worse else self.recover_after):
                return True  # not confirmed yet: the component keeps its state and evidence (peaks may have moved)
        comp.pending, comp.pending_n = "", 0
        if health.state != comp.state:
            why = "; ".join(e.text() for e in health.evidence if e.severity != "info") or "no rule fires any more"
            event = (now_ns, comp.id, comp.state, health.state, why)
            if undo.events is None:
                undo.events = list(self.events)
            self.events.append(event)
            dirty.events.append(event)
            comp.since_ns = now_ns
        comp.state, comp.evidence, comp.capacity = health.state, health.evidence, health.capacity
        return True

    @staticmethod
    def _plan(comp: Component) -> tuple[tuple[tuple[str, dict[str, float], Aggregate], ...], tuple[str, ...]]:
        """How ``comp``'s signals aggregate, and which of them have rules (see ``Component.plan``)."""
        mappings = comp.mappings
        aggregates = tuple((sig, per, _AGGREGATES.get(mappings[sig].aggregate if sig in mappings else "sum", sum))
                           for sig, per in comp.series.items())
        names = tuple(sig for sig in comp.series if sig in mappings and (
            mappings[sig].conditions or mappings[sig].capacity))
        return aggregates, names

    def rollback(self, undo: Undo) -> None:
        """Take back everything the batches recorded in ``undo`` changed (their commit failed)."""
        self.parts_version += 1
        series = self.series
        for text in undo.new_series:
            slot = series.pop(text, None)
            if slot is not None and slot.per is not None:
                slot.per.pop(text, None)
        saved = undo.series
        for i in range(0, len(saved), _SERIES_STRIDE):
            text, slot, start, t, value, derived, per, comp = saved[i:i + _SERIES_STRIDE]
            # The signal's dict holding this series' value: the one it kept (per), or, for a series
            # restored from the store (per None), the one the batch found and wrote to (slot.per).
            target = per if per is not None else slot.per
            slot.start_ns, slot.time_ns, slot.value, slot.derived, slot.per, slot.comp = (
                start, t, value, derived, per, comp)
            if target is not None:
                if derived is None:
                    target.pop(text, None)
                else:
                    target[text] = derived
        comps = undo.components
        for i in range(0, len(comps), _COMPONENT_STRIDE):
            comp = comps[i]
            for name, old in zip(_COMPONENT_FIELDS, comps[i + 1:i + _COMPONENT_STRIDE], strict=True):
                setattr(comp, name, old)
        for cid, (peaks, mappings, by_signal) in undo.dicts.items():
            comp = self.components.get(cid)
            if comp is not None:
                comp.peaks, comp.mappings, comp.series = peaks, mappings, by_signal
        for cid in undo.new_components:
            self.components.pop(cid, None)
        for job, window in undo.observations.items():
            if window is None:
                self.observations.pop(job, None)
            else:
                self.observations[job] = deque(window, maxlen=OBSERVATIONS_PER_JOB)
        if undo.events is not None:
            self.events.clear()
            self.events.extend(undo.events)

    # ---------------------------------------------------------------- restore
    def restore(self, series: Iterable[tuple[str, SeriesPoint]],
                components: Iterable[tuple[str, dict[str, Any]]], observations: Iterable[tuple[str, int, float]],
                events: Iterable[tuple[int, str, str, str, str]]) -> None:
        """Rebuild the state from what the store persisted (no reassessment: identical state)."""
        self.parts_version += 1
        records = {}
        for cid, rec in components:
            try:
                self.components[cid] = _restored_component(cid, rec)
                records[cid] = rec
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                self.skipped.append(("components", cid[:200], f"{type(err).__name__}: {err}"[:300]))
        for text, point in series:
            key = series_key_parse(text)
            comp = self.components.get(key[1])
            self.series[text] = _Series(point.start_ns, point.time_ns, point.value, point.derived, comp)
            resolved = self.catalog.lookup(key[0])
            if comp is None or resolved is None or point.derived is None:
                continue
            m = resolved.mapping
            comp.series.setdefault(m.signal, {})[text] = point.derived
            comp.mappings[m.signal] = m
        for cid, rec in records.items():
            # As persisted with the last acknowledged batch (series may be a checkpoint older).
            signals = rec.get("signals", {})
            self.components[cid].signals = {str(k): float(v) for k, v in signals.items()
                                            if isinstance(v, int | float) and math.isfinite(v)} \
                if isinstance(signals, dict) else {}
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
