"""What the telemetry HTTP endpoints share: a refusal with its status, and status mappings.

The OTLP/HTTP receiver (``otlp_http``) and the Prometheus remote-write receiver
(``remote_write``) answer on one listener; both raise :class:`HttpError` for a request they
refuse and map an ingest outcome (a ``google.rpc.Code``) to the same HTTP status.
"""

from __future__ import annotations

import math
from http import HTTPStatus

from google.rpc import code_pb2

# google.rpc.Code -> HTTP status, as google/rpc/code.proto's "HTTP Mapping" lines give them
# (DEADLINE_EXCEEDED: 504; UNAVAILABLE: 503; INVALID_ARGUMENT: 400).
HTTP_STATUS = {code_pb2.OK: HTTPStatus.OK, code_pb2.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
               code_pb2.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
               code_pb2.DEADLINE_EXCEEDED: HTTPStatus.GATEWAY_TIMEOUT}


class HttpError(Exception):
    """A request refused with ``status`` (the message goes to the client)."""

    def __init__(self, status: HTTPStatus, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds (delay-seconds, RFC 9110 section 10.2.3), at least 1."""
    return str(max(1, math.ceil(seconds)))
