"""Cumulative counters to rates, with de-duplication and reset handling.

Exporters send cumulative counters again and again (every collection interval, and again
on retry), so the twin keeps, per series, the last point it accepted and turns the next
one into a rate. The rules follow the Prometheus/OpenMetrics reading of counters:

- a point whose timestamp is not newer than the last accepted one is a duplicate (a
  retried request, or two collectors scraping the same target) and changes nothing;
- a value lower than the last one is a reset: the counter restarted from zero, so the
  increase since the reset is the value itself (Prometheus ``rate()``/``increase()``
  reset handling), over the interval since the new ``start_time`` when it falls inside;
- a new ``start_time`` (OTLP's start of the cumulative period) without a drop is an
  exporter restart over a counter that kept counting (hardware counters do): the
  difference is the increase;
- delta-temporality points (OTLP ``AGGREGATION_TEMPORALITY_DELTA``) already carry the
  increase over ``[start, time]``.
Negative or non-finite counter values are invalid and rejected by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Outcome = Literal["first", "rate", "reset", "duplicate"]


@dataclass(slots=True)
class SeriesPoint:
    """The last accepted point of one series and the value derived from it.

    ``value``: the raw last value (cumulative counter or gauge); ``derived``: the rate
    (per second) for counters, the value for gauges; None until a counter has two points.
    """

    start_ns: int
    time_ns: int
    value: float
    derived: float | None


def update_counter(prev: SeriesPoint | None, start_ns: int, time_ns: int, value: float,
                   delta: bool = False) -> tuple[SeriesPoint | None, Outcome]:
    """Fold one counter point into its series; returns the new state and what happened.

    The returned state is ``prev`` itself (unchanged) for a duplicate.
    """
    if prev is not None and time_ns <= prev.time_ns:
        return prev, "duplicate"
    if delta:
        span = time_ns - start_ns if 0 < start_ns < time_ns else (time_ns - prev.time_ns if prev else 0)
        rate = value / (span * 1e-9) if span > 0 else (prev.derived if prev else None)
        return SeriesPoint(start_ns, time_ns, value, rate), "rate" if prev else "first"
    if prev is None:
        # The first point only sets the baseline (as Prometheus rate() needs two samples):
        # exporters' start times are often the exporter's own start, not the counter's.
        return SeriesPoint(start_ns, time_ns, value, None), "first"
    if value < prev.value:
        # Counted from zero since the reset: since the new start time if it falls inside
        # the interval (the counter's own start), otherwise over the whole interval.
        since = start_ns if prev.time_ns < start_ns < time_ns else prev.time_ns
        rate = value / ((time_ns - since) * 1e-9)
        return SeriesPoint(start_ns, time_ns, value, rate), "reset"
    if start_ns != prev.start_ns and start_ns > 0 and prev.start_ns > 0:
        # A new start time without a drop: the exporter restarted but the counter it
        # reads (a NIC or GPU hardware counter) kept counting, so the increase is real.
        rate = (value - prev.value) / ((time_ns - prev.time_ns) * 1e-9)
        return SeriesPoint(start_ns, time_ns, value, rate), "reset"
    rate = (value - prev.value) / ((time_ns - prev.time_ns) * 1e-9)
    return SeriesPoint(start_ns, time_ns, value, rate), "rate"


def update_gauge(prev: SeriesPoint | None, time_ns: int, value: float) -> tuple[SeriesPoint | None, Outcome]:
    """Fold one gauge point: newer points replace the value, older or equal ones are duplicates."""
    if prev is not None and time_ns <= prev.time_ns:
        return prev, "duplicate"
    return SeriesPoint(0, time_ns, value, value), "first" if prev is None else "rate"
