"""Structured logs, and the service's own traces and metrics through OpenTelemetry.

Logs are one JSON object per line on stderr (``log_format: text`` for people). OpenTelemetry
is off unless ``otel.enabled`` (``TWIN_OTEL_ENABLED=1``) or a standard ``OTEL_TRACES_EXPORTER``
/ ``OTEL_METRICS_EXPORTER`` variable asks for an exporter; the exporters then read the
standard ``OTEL_EXPORTER_OTLP_*`` variables (endpoint, headers, TLS) themselves. When off,
no interceptor is installed, so it costs nothing per call.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from twin.core.extras import needs_extra

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, the record's extras, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str, fmt: str) -> None:
    """Send every log record to stderr in ``fmt`` ("json" or "text") at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


# ------------------------------------------------------------------ OpenTelemetry
def otel_requested(enabled: bool, env: Mapping[str, str] | None = None) -> bool:
    """Whether the service should export its own telemetry."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    chosen = [env.get(k, "").strip().lower() for k in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER")]
    return enabled or any(c and c != "none" for c in chosen)


@dataclass
class Otel:
    """The SDK providers of this process and the instruments the interceptor records to."""

    tracer: Any
    duration_ms: Any
    calls: Any
    shutdown: Callable[[], None]


def _exporters(kind: str, env: Mapping[str, str]) -> list[str]:
    value = env.get(f"OTEL_{kind}_EXPORTER", "otlp").strip().lower()
    return [v.strip() for v in value.split(",") if v.strip() and v.strip() != "none"]


def setup_otel(service_version: str, env: Mapping[str, str] | None = None) -> Otel:
    """Providers with the exporters the OTEL_* variables name (default otlp over gRPC).

    The SDK and its exporters are the 'telemetry' extra: without it this raises
    :class:`~twin.core.errors.MissingExtraError` naming it.
    """
    with needs_extra("telemetry", "exporting the service's own traces and metrics (otel.enabled or "
                                  "OTEL_*_EXPORTER)", field="otel"):
        return _build_otel(service_version, env)


def _build_otel(service_version: str, env: Mapping[str, str] | None) -> Otel:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    env = os.environ if env is None else env
    # Resource.create reads OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES; ours are defaults.
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "fabric-twin"),
                                "service.version": service_version})
    tracer_provider = TracerProvider(resource=resource)
    for name in _exporters("TRACES", env):
        if name == "console":
            tracer_provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    readers = []
    for name in _exporters("METRICS", env):
        if name == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    tracer = tracer_provider.get_tracer("twin.server", service_version)
    meter = meter_provider.get_meter("twin.server", service_version)
    # Names follow the OpenTelemetry RPC semantic conventions (rpc.server.duration, in ms).
    duration = meter.create_histogram("rpc.server.duration", unit="ms", description="duration of inbound RPCs")
    calls = meter.create_counter("twin.rpc.calls", unit="{call}", description="inbound RPCs by method and status")

    def shutdown() -> None:
        tracer_provider.shutdown()  # flushes pending spans
        meter_provider.shutdown()

    return Otel(tracer=tracer, duration_ms=duration, calls=calls, shutdown=shutdown)


class TelemetryInterceptor(grpc.ServerInterceptor):
    """A span and a duration/count per inbound RPC, tagged with method and status code."""

    def __init__(self, otel: Otel) -> None:
        self.otel = otel

    def _record(self, method: str, code: grpc.StatusCode, t0: float, span: Any) -> None:
        attrs = {"rpc.system": "grpc", "rpc.method": method, "rpc.grpc.status_code": code.value[0]}
        self.otel.duration_ms.record((time.perf_counter() - t0) * 1e3, attrs)
        self.otel.calls.add(1, attrs)
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code != grpc.StatusCode.OK:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, code.name))

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
                          handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method or "?"
        from opentelemetry.trace import SpanKind

        def code_of(context: grpc.ServicerContext, failed: bool) -> grpc.StatusCode:
            code = context.code()
            if isinstance(code, grpc.StatusCode):
                return code
            return grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK

        if handler.response_streaming:
            inner_stream = handler.unary_stream or handler.stream_stream

            def streaming(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                t0 = time.perf_counter()
                with self.otel.tracer.start_as_current_span(method.lstrip("/"), kind=SpanKind.SERVER) as span:
                    failed = True
                    try:
                        yield from inner_stream(request, context)
                        failed = False
                    finally:
                        self._record(method, code_of(context, failed), t0, span)

            if handler.unary_stream:
                return grpc.unary_stream_rpc_method_handler(streaming, handler.request_deserializer,
                                                            handler.response_serializer)
            return grpc.stream_stream_rpc_method_handler(streaming, handler.request_deserializer,
                                                         handler.response_serializer)
        inner = handler.unary_unary or handler.stream_unary

        def unary(request: Any, context: grpc.ServicerContext) -> Any:
            t0 = time.perf_counter()
            with self.otel.tracer.start_as_current_span(method.lstrip("/"), kind=SpanKind.SERVER) as span:
                failed = True
                try:
                    result = inner(request, context)
                    failed = False
                    return result
                finally:
                    self._record(method, code_of(context, failed), t0, span)

        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer,
                                                       handler.response_serializer)
        return grpc.stream_unary_rpc_method_handler(unary, handler.request_deserializer, handler.response_serializer)
