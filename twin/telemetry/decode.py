"""OTLP metrics request -> mapped points, with every point the twin cannot use counted.

Per data point: the metric must be one the catalog maps (else "unknown metric"); its data
must be a gauge or a sum (histograms and summaries carry no signal the twin maps); the
value must be present and finite; a counter must not be negative; the point needs a
timestamp and the attributes that identify its component, and at most
``MAX_POINT_ATTRIBUTES`` attributes. Attribute keys are compared case-insensitively;
data-point attributes win over resource attributes.

A request is decoded once, with opentelemetry-proto's own classes. (A second parse of the
same bytes through a private DescriptorPool, an attributes-only view used as a memo key, sat
at every one of seven SIGSEGVs of ``twin serve`` under mixed concurrent load in issue 39; the
memo key of a point is now its own encoding by the same classes, without its times and value:
:func:`point_keys`.)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from twin.telemetry.mapping import MetricCatalog, Resolved
from twin.telemetry.placement import attributes_of
from twin.telemetry.state import Block, SeriesId, series_id

# Where the host name comes from, in order (OTel resource semantic conventions first,
# then the labels Prometheus exporters carry: dcgm-exporter "Hostname", "instance").
HOST_KEYS = ("host.name", "hostname", "k8s.node.name", "host", "node", "instance", "service.instance.id")
# Ports reported by a switch exporter name their switch.
SWITCH_KEYS = ("switch", "switch.name", "switch_name")
_DELTA = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
_NO_RECORDED_VALUE = 1  # DataPointFlags.FLAG_NO_RECORDED_VALUE
# The latest sample time a point may carry: SQLite integers are signed 64-bit, and a clock
# more than an hour ahead of the twin's is wrong, not early (NTP keeps fleets within ms).
MAX_TIME_NS = 2**63 - 1
MAX_FUTURE_NS = 3600 * 10**9
# Attributes one data point may carry: the OpenTelemetry SDKs' default attribute count limit
# (OTEL_ATTRIBUTE_COUNT_LIMIT = 128, specification "Attribute Limits"), so no SDK sends more
# by default; an exporter's point names its component with a handful (dcgm-exporter: ~10).
MAX_POINT_ATTRIBUTES = 128
TOO_MANY_ATTRIBUTES = f"more than {MAX_POINT_ATTRIBUTES} attributes on a data point"
# NumberDataPoint's 64-bit fields, by the first byte of their encoding (field number << 3 | 1,
# wire type I64: start_time_unix_nano 2, time_unix_nano 3, as_double 4, as_int 6; metrics.proto):
# each takes 9 bytes, and they come first in a point's encoding (fields in number order).
_FIXED_TAGS = frozenset((2 << 3 | 1, 3 << 3 | 1, 4 << 3 | 1, 6 << 3 | 1))
_FIXED_SIZE = 9
_ENCODE_POINT = metrics_pb2.NumberDataPoint.SerializeToString


def point_keys(dps: Any) -> tuple[bytes, ...]:
    """A memo key for each data point: its encoding without the leading 64-bit fields (times
    and value), i.e. its attributes (field 7), with its flags (8) and anything else it carries.

    Equal keys mean equal attributes, since the attributes are all in the key. Encoded by the
    same classes that parsed the request (upb writes fields in number order, so the times and
    the value lead); an encoder that put a time or value later would only make every key new
    (a memo miss), never two points' keys alike. Cheaper than encoding each attribute apart
    (one C call per point instead of one per attribute).
    """
    fixed, size, encode = _FIXED_TAGS, _FIXED_SIZE, _ENCODE_POINT
    keys = []
    for dp in dps:
        b = encode(dp)
        i, n = 0, len(b)
        while i < n and b[i] in fixed:
            i += size
        keys.append(b[i:] if i else b)
    return tuple(keys)


class DecodeDeadline(TimeoutError):
    """Decoding one request took longer than the time it was given (the caller's deadline)."""


@dataclass
class Decoded:
    """Points ready to apply (``count`` of them, by metric), and the points refused with why
    (reason -> count, example).
    """

    points: list[Block] = field(default_factory=list)
    count: int = 0
    total: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    # Metrics the twin does not read, per (name, exporter): points and why.
    ignored: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)

    def ignore(self, name: str, exporter: str, reason: str, n: int) -> None:
        """Count ``n`` points of a metric the twin does not read (``reason``)."""
        got = self.ignored.get((name, exporter))
        self.ignored[(name, exporter)] = ((got[0] if got else 0) + n, reason)

    def reject(self, reason: str, n: int, example: str) -> None:
        """Count ``n`` refused points."""
        self.rejected[reason] = self.rejected.get(reason, 0) + n
        self.examples.setdefault(reason, example)

    @property
    def rejected_count(self) -> int:
        """Points refused while decoding."""
        return sum(self.rejected.values())


def _scalar(v: object) -> str | None:
    which = v.WhichOneof("value")  # type: ignore[attr-defined]
    if which is None or which in ("array_value", "kvlist_value", "bytes_value"):
        return None
    return str(getattr(v, which))


def _attr_items(kvs: object) -> tuple[tuple[str, str], ...]:
    """Attributes as (key, value-as-text) pairs, in order: cheap, hashable, exact."""
    out = []
    for kv in kvs:  # type: ignore[attr-defined]
        v = kv.value
        s = v.string_value
        if not s:
            s = _scalar(v)
            if s is None:
                continue
        out.append((kv.key, s))
    return tuple(out)


def _first(attrs: dict[str, str], res: dict[str, str], keys: tuple[str, ...]) -> str | None:
    for k in keys:
        v = attrs.get(k)
        if v is None:
            v = res.get(k)
        if v is not None:
            return v
    return None


class Decoder:
    """Decodes requests against a catalog, remembering the series ids of each attribute layout.

    Exporters send the same attribute sets, in the same order, every interval, so the memo
    has two levels: a metric's whole attribute layout (its points' attributes in order, each
    point's as the bytes of its ``KeyValue`` messages) -> the series id of each point, and on
    a miss one point's attributes -> its series id. Identity extraction runs once per
    (metric, resource, attributes), and a metric whose layout was seen before costs one
    lookup. Both levels are bounded (cleared when full), like the catalog's name cache.
    Safe to call from several threads (each memo write is one dict assignment).
    """

    def __init__(self, catalog: MetricCatalog, memo_limit: int = 400_000) -> None:
        self.catalog = catalog
        self.memo_limit = memo_limit
        self._memo: dict[tuple[object, ...], SeriesId | str] = {}
        self._layouts: dict[tuple[object, ...], tuple[SeriesId | str, ...]] = {}
        self._layout_points = 0  # points the layouts hold (their bound)

    def _series_id(self, resolved: Resolved, items: tuple[tuple[str, str], ...], res: dict[str, str],
                   res_host: str) -> SeriesId | str:
        attrs = {k.lower(): v for k, v in items}
        if resolved.captures:
            attrs.update(resolved.captures)
        ident = []
        for alts in resolved.identity:
            v = _first(attrs, res, alts)
            if v is None:
                return f"missing identifying attribute {'|'.join(alts)!r}"
            ident.append(v)
        detail = tuple(_first(attrs, res, alts) or "" for alts in resolved.detail)
        sw = _first(attrs, res, SWITCH_KEYS)
        host = sw or _first(attrs, {}, HOST_KEYS) or res_host
        return series_id(resolved, host, sw is not None, tuple(ident), detail, attributes_of(attrs, res))

    def decode(self, request: ExportMetricsServiceRequest, deadline: float | None = None) -> Decoded:
        """Map every data point of ``request``; refused points are counted by reason.

        ``deadline``: a ``time.monotonic()`` time past which decoding stops with
        :class:`DecodeDeadline` (looked at before each metric); None: no deadline.
        """
        out = Decoded()
        if len(self._memo) > self.memo_limit:
            self._memo.clear()
        if self._layout_points > self.memo_limit:
            self._layouts.clear()
            self._layout_points = 0
        clock = time.monotonic
        for rm in request.resource_metrics:
            res_key = rm.resource.SerializeToString()
            res = {k.lower(): v for k, v in _attr_items(rm.resource.attributes)}
            res_host = _first(res, {}, HOST_KEYS) or ""
            for sm in rm.scope_metrics:
                # Who sent it: the SDK's service, else the instrumentation scope (a Collector's receiver).
                exporter = res.get("service.name") or sm.scope.name
                for metric in sm.metrics:
                    if deadline is not None and clock() > deadline:
                        raise DecodeDeadline(f"decoding took longer than its deadline ({out.total:,} points "
                                             "read); send smaller requests")
                    self._metric(metric, res_key, res, res_host, out, exporter)
        return out

    def _metric(self, metric: metrics_pb2.Metric, res_key: bytes, res: dict[str, str],
                res_host: str, out: Decoded, exporter: str = "") -> None:
        kind = metric.WhichOneof("data")
        if kind == "gauge":
            dps, delta, monotonic = metric.gauge.data_points, False, False
        elif kind == "sum":
            dps = metric.sum.data_points
            delta = metric.sum.aggregation_temporality == _DELTA
            monotonic = metric.sum.is_monotonic
        else:
            n = len(getattr(metric, kind).data_points) if kind else 0
            out.total += n
            if n:
                out.reject("data type not gauge or sum", n, f"{metric.name} ({kind})")
                out.ignore(metric.name, exporter, f"data type {kind} (only gauge and sum are read)", n)
            return
        n = len(dps)
        out.total += n
        resolved = self.catalog.lookup(metric.name)
        if resolved is None:
            out.reject("unknown metric", n, metric.name)
            out.ignore(metric.name, exporter, "unknown metric (no mapping reads it)", n)
            return
        m = resolved.mapping
        counter = m.kind == "counter"
        if not counter and monotonic and delta:
            out.reject("delta sum for a gauge signal", n, metric.name)
            return
        sids = self._sids(resolved, dps, res_key, res, res_host)
        scale = m.scale
        latest = min(MAX_TIME_NS, time.time_ns() + MAX_FUTURE_NS)
        isfinite = math.isfinite
        block = Block([], [], [], [], delta)
        add_sid, add_start, add_time, add_value = (block.sids.append, block.starts.append, block.times.append,
                                                   block.values.append)
        for dp, sid in zip(dps, sids, strict=True):
            value = dp.as_double
            if not value:  # zero: a double 0.0, an integer point, or no value at all
                which = dp.WhichOneof("value")
                if which == "as_int":
                    value = float(dp.as_int)
                elif which is None:
                    if not dp.flags & _NO_RECORDED_VALUE:
                        out.reject("data point without a value", 1, metric.name)
                    continue
            t = dp.time_unix_nano
            start = dp.start_time_unix_nano
            # The checks in the order their reasons take precedence; a good point passes them all.
            if not isfinite(value):
                out.reject("non-finite value (NaN or infinity)", 1, metric.name)
            elif counter and value < 0:
                out.reject("negative counter value", 1, metric.name)
            elif t <= 0:
                out.reject("data point without a timestamp", 1, metric.name)
            elif t > latest or start > t:
                # 2^64-1 ns (and anything past now + MAX_FUTURE_NS) cannot be a sample time,
                # and a database integer holds at most 2^63-1: refused, never stored.
                out.reject("timestamp in the future or after its start" if t <= MAX_TIME_NS
                           else "timestamp beyond 2^63-1 ns", 1, metric.name)
            elif type(sid) is str:
                out.reject(sid, 1, metric.name)
            else:
                add_sid(sid)  # type: ignore[arg-type]
                add_start(start)
                add_time(t)
                add_value(value * scale)
        if block.times:
            out.points.append(block)
            out.count += len(block.times)

    def _sids(self, resolved: Resolved, dps: Any, res_key: bytes, res: dict[str, str],
              res_host: str) -> tuple[SeriesId | str, ...]:
        """The series id (or why there is none) of each of ``dps``."""
        name = resolved.key
        keys = point_keys(dps)
        lkey = (name, res_key, keys)
        sids = self._layouts.get(lkey)
        if sids is not None:
            return sids
        memo = self._memo
        found = []
        for dp, key in zip(dps, keys, strict=True):
            mkey = (name, res_key, key)
            sid = memo.get(mkey)
            if sid is None:
                attrs = dp.attributes
                sid = memo[mkey] = (TOO_MANY_ATTRIBUTES if len(attrs) > MAX_POINT_ATTRIBUTES else
                                    self._series_id(resolved, _attr_items(attrs), res, res_host))
            found.append(sid)
        sids = self._layouts[lkey] = tuple(found)
        self._layout_points += len(sids)
        return sids


def summarize(reasons: dict[str, int], examples: dict[str, str], limit: int = 512) -> str:
    """A one-line error message for OTLP partial success."""
    parts = [f"{n} point(s): {r}" + (f" (e.g. {examples[r]!r})" if r in examples else "")
             for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."
