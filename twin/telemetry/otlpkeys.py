"""A second view of an OTLP metrics request: only its data points' attributes, as wire bytes.

The decoder memoizes series ids by attribute layout. Reading each point's attributes in
Python (or clearing its times and value and serialising it) costs more than the rest of
decoding it, so the same bytes are parsed once more into :data:`Keys`, a schema that
mirrors ``ExportMetricsServiceRequest`` down to ``NumberDataPoint.attributes`` and
declares nothing else: ``DiscardUnknownFields`` then drops every time and value in C, and
a metric's ``gauge``/``sum`` message serialises to the exact attribute layout of its points
(``repeated bytes attributes = 7`` keeps each ``KeyValue`` as it came). Field numbers are
those of opentelemetry-proto's ``metrics_service.proto`` and ``metrics.proto`` (v1):
ExportMetricsServiceRequest.resource_metrics = 1, ResourceMetrics.scope_metrics = 2,
ScopeMetrics.metrics = 2, Metric.gauge = 5, Metric.sum = 7, Gauge/Sum.data_points = 1,
NumberDataPoint.attributes = 7.

Equal bytes mean equal attributes, which is all a memo key needs; a producer that
encodes the same attributes differently only misses the memo.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "twin.telemetry.otlpkeys"
_F = descriptor_pb2.FieldDescriptorProto
# (message, [(field, number, repeated, type, message type)]), innermost first.
_MESSAGES = (
    ("Point", [("attributes", 7, True, _F.TYPE_BYTES, "")]),
    ("Points", [("data_points", 1, True, _F.TYPE_MESSAGE, "Point")]),
    ("Metric", [("gauge", 5, False, _F.TYPE_MESSAGE, "Points"), ("sum", 7, False, _F.TYPE_MESSAGE, "Points")]),
    ("ScopeMetrics", [("metrics", 2, True, _F.TYPE_MESSAGE, "Metric")]),
    ("ResourceMetrics", [("scope_metrics", 2, True, _F.TYPE_MESSAGE, "ScopeMetrics")]),
    ("Request", [("resource_metrics", 1, True, _F.TYPE_MESSAGE, "ResourceMetrics")]),
)


def _build() -> Any:
    fd = descriptor_pb2.FileDescriptorProto(name="twin/telemetry/otlpkeys.proto", package=_PACKAGE, syntax="proto3")
    for name, fields in _MESSAGES:
        msg = fd.message_type.add(name=name)
        for fname, number, repeated, ftype, mtype in fields:
            f = msg.field.add(name=fname, number=number, type=ftype,
                              label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if mtype:
                f.type_name = f".{_PACKAGE}.{mtype}"
    pool = descriptor_pool.DescriptorPool()  # its own pool: nothing else can clash with these names
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Request"))


#: The attributes-only request type (``Keys.FromString(raw)``).
Keys = _build()


def layouts(raw: bytes) -> Any:
    """``raw`` (an ExportMetricsServiceRequest's wire bytes) as :data:`Keys`, times and values dropped.

    Raises ``google.protobuf.message.DecodeError`` where the request itself would not decode.
    """
    keys = Keys.FromString(raw)
    keys.DiscardUnknownFields()
    return keys
