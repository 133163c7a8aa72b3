"""Prometheus remote-write in: ``POST /api/v1/write`` on the OTLP/HTTP listener.

An existing Prometheus (or Grafana Agent / Alloy, vmagent, any Remote-Write 1.0 sender)
forwards what it scrapes with ``remote_write: [{url: http://TWIN:4318/api/v1/write}]``.
Rules from the Prometheus Remote-Write 1.0 specification
(https://prometheus.io/docs/specs/remote_write_spec/):

- the body is a ``prometheus.WriteRequest`` (``twin.rpc.prompb``), snappy-compressed in
  the block format (no framing), with ``Content-Encoding: snappy`` and ``Content-Type:
  application/x-protobuf``; samples carry float values and millisecond timestamps;
- success is a 2xx (here ``204 No Content``); senders do not retry a 4xx other than 429 and
  retry 5xx with backoff, so a refusal of the data is ``400`` and only a transient condition
  (ingest queue full, store failure, commit timeout) is ``503``/``504``;
- Remote-Write 2.0 (``Content-Type: application/x-protobuf;proto=io.prometheus.write.v2.Request``)
  is answered ``415``, which its specification tells a sender to take as "send 1.0".

The path is the one Prometheus' own receiver serves (``--web.enable-remote-write-receiver``).
Samples are ingested like a scrape (``twin.telemetry.scrape``): turned into the OTLP request
a Collector would send (a name ending ``_total`` or mapped as a counter: a cumulative
monotonic sum; otherwise a gauge), with the series' ``job`` label as the exporter
(``service.name``) and its ``instance`` label as the host (``host.name``, the port dropped;
``service.instance.id``, as the OpenTelemetry Prometheus compatibility rules map them), and
decoded, mapped and committed by :func:`twin.telemetry.otlp.export` with the same limits and
state as OTLP. Unknown names are counted as ignored. Bounded before it is expanded: a
request holds at most ``MAX_SERIES`` series and ``MAX_SAMPLES`` samples (413 past them), a
series at most ``MAX_LABELS`` labels of ``MAX_LABEL_NAME``/``MAX_LABEL_VALUE`` characters
(its samples refused, the rest applied), and its conversion stops at the request's deadline
(504). Remote-write has no partial success: when samples the twin reads are refused (NaN or
infinity, a negative counter, a timestamp beyond 2^63-1 ns or an hour ahead, a cardinality
cap, a series without ``__name__``), the rest of the request is applied and the answer is
``400`` naming what was refused, so the sender logs it and does not resend what was applied.
A Prometheus stale marker (the NaN that ends a series) is no value: it is skipped and
counted (``ingest.stale_markers_skipped``). Native histograms are counted as ignored;
exemplars and metadata are not read.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import cramjam
from google.protobuf.message import DecodeError
from google.rpc import code_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from twin.rpc.prompb import remote_pb2
from twin.telemetry.decode import summarize
from twin.telemetry.httpbase import HTTP_STATUS, HttpError, retry_after
from twin.telemetry.ingest import Overloaded
from twin.telemetry.otlp import export
from twin.telemetry.otlpbuild import add_resource

PATH = "/api/v1/write"  # Prometheus' remote-write receiver path (web/api/v1: /api/v1/write)
PROTOBUF = "application/x-protobuf"  # Remote-Write 1.0 spec, "Protocol": the Content-Type
WRITE_REQUEST_V1 = "prometheus.WriteRequest"  # Remote-Write 2.0 spec: the 1.0 message's proto= value
# prometheus/model/value: StaleNaN, the NaN a Prometheus writes when a series goes away.
STALE_NAN_BITS = 0x7FF0000000000002
SCOPE = "twin.remote_write"  # the exporter named for series without a job label
_MS_TO_NS = 1_000_000
_MAX_U64 = 2**64 - 1
IGNORED_HISTOGRAM = "native histogram samples (the twin reads float samples only)"
# Series and samples (float and histogram) one request may hold: 25x the 2,000 samples a
# Prometheus sends at most per request by default (queue_config.max_samples_per_send) and 5x
# vmagent's 10,000 (-remoteWrite.maxRowsPerBlock); a sender tuned beyond is told so (413).
MAX_SERIES = 50_000
MAX_SAMPLES = 50_000
# Labels per series and their lengths: Grafana Mimir's default ingestion limits
# (max_label_names_per_series 30, max_label_name_length 1024, max_label_value_length 2048).
# A dcgm-exporter or node_exporter series carries about 10 labels; 152 series of 100-2,005
# labels made one 2.5 MB request cost 8.4 s of CPU before these bounds (issue 39).
MAX_LABELS = 30
MAX_LABEL_NAME = 1024
MAX_LABEL_VALUE = 2048
DEADLINE_EVERY = 1024  # series converted between looks at the clock


def check_headers(content_type: str | None, content_encoding: str | None) -> None:
    """Refuse (415) a request that is not Remote-Write 1.0: its Content-Type or Content-Encoding."""
    media, _, params = (content_type or "").partition(";")
    media = media.strip().lower()
    if media != PROTOBUF:
        raise HttpError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                        f"Content-Type {media or '(none)'!r} not supported; remote write sends {PROTOBUF}")
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "proto" and value.strip().strip('"') != WRITE_REQUEST_V1:
            raise HttpError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                            f"Content-Type proto={value.strip()[:80]!r} not supported; this receiver speaks "
                            f"Remote-Write 1.0 (proto={WRITE_REQUEST_V1})")
    encoding = (content_encoding or "").strip().lower()
    if encoding != "snappy":
        raise HttpError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                        f"Content-Encoding {encoding or '(none)'!r} not supported; remote write sends snappy")


def _uvarint(data: bytes) -> int:
    """The little-endian base-128 varint at the start of ``data`` (snappy's length preamble)."""
    value = shift = 0
    for byte in data[:5]:  # the preamble holds at most 2^32 - 1: five bytes
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    raise HttpError(HTTPStatus.BAD_REQUEST, "body: not snappy block format (bad length preamble)")


def decompress(body: bytes, limit: int) -> bytes:
    """``body`` snappy-decompressed (block format), refusing more than ``limit`` bytes unmade.

    The block format starts with the uncompressed length (Snappy format_description.txt,
    "Preamble"), so an oversized body is refused before anything is decompressed, and the
    decompressor checks that the data produces exactly that many bytes.
    """
    if not body:
        raise HttpError(HTTPStatus.BAD_REQUEST, "body: empty; send a snappy-compressed WriteRequest")
    size = _uvarint(body)
    if size > limit:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                        f"body: decompresses to {size} bytes, beyond the receive limit of {limit} bytes")
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except cramjam.DecompressionError as err:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"body: not valid snappy block data ({str(err)[:200]})") from err


def parse(raw: bytes) -> remote_pb2.WriteRequest:
    """The WriteRequest (400 when the bytes are not one)."""
    try:
        return remote_pb2.WriteRequest.FromString(raw)
    except (DecodeError, RecursionError) as err:
        raise HttpError(HTTPStatus.BAD_REQUEST, "body: not a valid protobuf prometheus.WriteRequest") from err


@dataclass
class Converted:
    """A WriteRequest as the OTLP request to ingest, and what was settled on the way."""

    request: ExportMetricsServiceRequest
    unknown: int = 0  # samples of names no mapping reads (the decoder counts them as ignored)
    stale: int = 0  # stale markers skipped
    rejected: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    ignored: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)

    def reject(self, reason: str, n: int, example: str) -> None:
        """Count ``n`` samples refused before decoding."""
        if n:
            self.rejected[reason] = self.rejected.get(reason, 0) + n
            self.examples.setdefault(reason, example)


def _host(instance: str) -> str:
    """The host part of a target's ``instance`` label (``node-1:9100`` -> ``node-1``)."""
    try:
        return urlsplit(f"//{instance}").hostname or instance
    except ValueError:  # "[bad" and other non-addresses: the label as it is
        return instance


def _is_counter(name: str, lookup: Callable[[str], Any]) -> bool:
    resolved = lookup(name)
    return name.lower().endswith("_total") or (resolved is not None and resolved.mapping.kind == "counter")


def _check_size(write: remote_pb2.WriteRequest) -> None:
    """Refuse (413) a request beyond ``MAX_SERIES`` series or ``MAX_SAMPLES`` samples."""
    series = len(write.timeseries)
    if series > MAX_SERIES:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                        f"{series:,} series in one request; at most {MAX_SERIES:,} (lower the sender's "
                        "queue_config.max_samples_per_send)")
    samples = sum(len(ts.samples) + len(ts.histograms) for ts in write.timeseries)
    if samples > MAX_SAMPLES:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                        f"{samples:,} samples in one request; at most {MAX_SAMPLES:,} (lower the sender's "
                        "queue_config.max_samples_per_send)")


def _label_problem(ts: Any) -> str:
    """Why a series' labels are refused ('' when they are not)."""
    if len(ts.labels) > MAX_LABELS:
        return f"series with more than {MAX_LABELS} labels"
    for label in ts.labels:
        if len(label.name) > MAX_LABEL_NAME:
            return f"label name longer than {MAX_LABEL_NAME} characters"
        if len(label.value) > MAX_LABEL_VALUE:
            return f"label value longer than {MAX_LABEL_VALUE} characters"
    return ""


def convert(write: remote_pb2.WriteRequest, lookup: Callable[[str], Any], deadline: float | None = None
            ) -> Converted:
    """The OTLP request for ``write``: one resource per (job, instance), the other labels as
    point attributes; ``lookup`` is the metric catalog's (None: a name no mapping reads).
    ``deadline``: a ``time.monotonic()`` time past which it stops (504); None: none.
    """
    _check_size(write)
    out = Converted(ExportMetricsServiceRequest())
    groups: dict[tuple[str, str], dict[str, tuple[str, list[tuple[dict[str, str], int, int, float]]]]] = {}
    pack, stale = struct.Struct("<d").pack, struct.pack("<Q", STALE_NAN_BITS)
    for i, ts in enumerate(write.timeseries):
        if deadline is not None and i % DEADLINE_EVERY == 0 and time.monotonic() > deadline:
            raise HttpError(HTTPStatus.GATEWAY_TIMEOUT, f"converting the request took longer than its deadline "
                                                        f"({i:,} of {len(write.timeseries):,} series); retry")
        n = len(ts.samples) + len(ts.histograms)
        problem = _label_problem(ts)
        if problem:
            name = next((label.value for label in ts.labels if label.name == "__name__"), "?")
            out.reject(problem, n, name[:80])
            continue
        labels: dict[str, str] = {}
        duplicate = ""
        for label in ts.labels:
            if label.name in labels:
                duplicate = label.name
            labels[label.name] = label.value
        name = labels.pop("__name__", "")
        if duplicate:
            out.reject("duplicate label name in a series", n, f"{name or '?'}: {duplicate}")
            continue
        if not name:
            out.reject("series without a __name__ label", n, ",".join(sorted(labels))[:80])
            continue
        job = labels.get("job", "")
        instance = labels.pop("instance", "")
        if ts.histograms:
            key = (name, job or SCOPE)
            got = out.ignored.get(key, (0, IGNORED_HISTOGRAM))[0]
            out.ignored[key] = (got + len(ts.histograms), IGNORED_HISTOGRAM)
        if not ts.samples:
            continue
        points = []
        for s in ts.samples:
            if pack(s.value) == stale:
                out.stale += 1
                continue
            if s.timestamp < 0:
                out.reject("timestamp before 1970 (negative milliseconds)", 1, name)
                continue
            # Past 2^63-1 ns the decoder refuses it by its own rule ("timestamp beyond"); capped
            # only so that the OTLP field (64 unsigned bits) can hold it.
            points.append((labels, 0, min(s.timestamp * _MS_TO_NS, _MAX_U64), s.value))
        series = groups.setdefault((job, instance), {})
        if name not in series:
            series[name] = ("sum" if _is_counter(name, lookup) else "gauge", [])
        series[name][1].extend(points)
    for (job, instance), metrics in groups.items():
        resource = {"service.name": job} if job else {}
        if instance:
            resource.update({"host.name": _host(instance), "service.instance.id": instance})
        specs = [(name, kind, points) for name, (kind, points) in metrics.items() if points]
        out.unknown += sum(len(points) for name, _, points in specs if lookup(name) is None)
        add_resource(out.request, resource, specs, scope=SCOPE)
    return out


@dataclass(frozen=True)
class Answer:
    """The reply to one remote-write request: 204, or an error status with its message."""

    status: HTTPStatus
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)


def write(service: Any, raw: bytes, timeout: float | None) -> Answer:
    """Decode, convert and ingest one decompressed remote-write body (:func:`decompress`) into
    ``service`` within ``timeout`` seconds (None: no limit).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        service.queue.check_room()  # a full writer queue refuses before the conversion, as ingest does
        with service.slots.hold(deadline):
            converted = convert(parse(raw), service.catalog.lookup, deadline)
    except Overloaded as err:
        return Answer(HTTPStatus.SERVICE_UNAVAILABLE, str(err), {"Retry-After": retry_after(err.retry_after_s)})
    if converted.ignored:
        service.note_ignored(converted.ignored)
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    outcome = export(service, converted.request, left)
    local = sum(converted.rejected.values())
    summary = summarize(converted.rejected, converted.examples) if local else ""
    if outcome.code in (code_pb2.OK, code_pb2.INVALID_ARGUMENT):
        # Settled (not to be retried): only now are its stale markers and refusals counted,
        # so a request the sender retries after a 5xx is not counted twice.
        service.count("stale_markers_skipped", converted.stale)
        service.count("points_rejected", local)
    if outcome.response is None:
        headers = {} if outcome.retry_after_s is None else {"Retry-After": retry_after(outcome.retry_after_s)}
        message = "; ".join(m for m in (summary, outcome.message) if m)
        return Answer(HTTP_STATUS.get(outcome.code, HTTPStatus.INTERNAL_SERVER_ERROR), message, headers)
    partial = outcome.response.partial_success
    refused = local + partial.rejected_data_points - converted.unknown
    if refused > 0:
        detail = "; ".join(m for m in (summary, partial.error_message) if m)
        return Answer(HTTPStatus.BAD_REQUEST, f"{refused} sample(s) refused, the rest applied: {detail}")
    return Answer(HTTPStatus.NO_CONTENT)
