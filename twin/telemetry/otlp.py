"""The standard OTLP/gRPC MetricsService (``opentelemetry.proto.collector.metrics.v1``).

Served as a generic handler that takes the raw request bytes, so a payload that is not
an ``ExportMetricsServiceRequest`` is answered INVALID_ARGUMENT (not an opaque INTERNAL
from the deserializer). OTLP server rules (opentelemetry-proto docs/specification.md,
"OTLP/gRPC Response" and "Throttling"):

- success, with ``partial_success`` (``rejected_data_points`` + ``error_message``) when
  some points were refused (unknown metric, NaN, negative counter, cardinality cap...);
- INVALID_ARGUMENT (not retryable) when the request is undecodable or nothing in it is
  usable because it is malformed;
- UNAVAILABLE with ``google.rpc.RetryInfo`` when the ingest queue is full, both in the
  standard ``grpc-status-details-bin`` trailer and in ``google.rpc.retryinfo-bin``,
  which the OpenTelemetry SDK exporters read.
gzip-compressed requests are decompressed by gRPC itself; the receive limit is the
server's ``grpc.max_receive_message_length`` option (see ``server_options``).
"""

from __future__ import annotations

import logging
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError
from google.rpc import code_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

from twin.telemetry.decode import DecodeDeadline
from twin.telemetry.ingest import Overloaded
from twin.telemetry.service import InvalidData, TelemetryService
from twin.wire.status_table import retry_status

log = logging.getLogger(__name__)
SERVICE_NAME = metrics_service_pb2.DESCRIPTOR.services_by_name["MetricsService"].full_name
Request = metrics_service_pb2.ExportMetricsServiceRequest
Response = metrics_service_pb2.ExportMetricsServiceResponse


def server_options(max_receive_bytes: int) -> list[tuple[str, int]]:
    """GRPC server options the OTLP receiver needs (receive limit above gRPC's 4 MiB default)."""
    return [("grpc.max_receive_message_length", max_receive_bytes)]


def unavailable(message: str, retry_after_s: float) -> grpc.Status:
    """UNAVAILABLE carrying RetryInfo(retry_after_s)."""
    return retry_status(grpc.StatusCode.UNAVAILABLE, message, retry_after_s)


@dataclass(frozen=True)
class ExportOutcome:
    """What one Export came to, in transport-neutral terms (gRPC and HTTP map it alike).

    ``code``: a ``google.rpc.Code`` (OK, INVALID_ARGUMENT, UNAVAILABLE, DEADLINE_EXCEEDED);
    ``response``: the reply on OK (with ``partial_success`` when points were refused);
    ``retry_after_s``: set when the exporter should retry later (UNAVAILABLE).
    """

    code: int
    message: str = ""
    response: Response | None = None
    retry_after_s: float | None = None


def export(service: TelemetryService, request: Request, timeout: float | None) -> ExportOutcome:
    """Ingest one decoded request within ``timeout`` seconds and classify the result (never
    raises for bad data).
    """
    try:
        rejected, message = service.ingest(request, timeout=timeout)
    except Overloaded as err:
        return ExportOutcome(code_pb2.UNAVAILABLE, str(err), retry_after_s=err.retry_after_s)
    except InvalidData as err:
        return ExportOutcome(code_pb2.INVALID_ARGUMENT, f"metrics: {err}")
    except DecodeDeadline as err:
        return ExportOutcome(code_pb2.DEADLINE_EXCEEDED, f"metrics: {err}")
    except FutureTimeout:
        return ExportOutcome(code_pb2.DEADLINE_EXCEEDED, "ingest did not commit before the deadline")
    except Exception:  # a store failure: retryable, and never a traceback to the client
        log.exception("OTLP export failed")
        return ExportOutcome(code_pb2.UNAVAILABLE, "telemetry store unavailable",
                             retry_after_s=service.config.retry_after_s)
    resp = Response()
    if rejected or message:
        resp.partial_success.rejected_data_points = rejected
        resp.partial_success.error_message = message
    return ExportOutcome(code_pb2.OK, response=resp)


_GRPC_CODES = {code_pb2.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
               code_pb2.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED}


def otlp_handler(service: TelemetryService) -> grpc.GenericRpcHandler:
    """The MetricsService/Export handler over ``service``."""

    def handle(raw: bytes, context: grpc.ServicerContext) -> Response:
        try:
            request = Request.FromString(raw)
        except DecodeError:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request: not a valid OTLP ExportMetricsServiceRequest")
        remaining = context.time_remaining()
        if remaining is None or remaining > 3600:  # no deadline: gRPC reports "forever"
            remaining = None
        outcome = export(service, request, remaining)
        if outcome.retry_after_s is not None:
            context.abort_with_status(unavailable(outcome.message, outcome.retry_after_s))
        if outcome.response is None:
            context.abort(_GRPC_CODES.get(outcome.code, grpc.StatusCode.INTERNAL), outcome.message)
        return outcome.response

    handler = grpc.unary_unary_rpc_method_handler(handle, request_deserializer=None,
                                                  response_serializer=Response.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, {"Export": handler})
