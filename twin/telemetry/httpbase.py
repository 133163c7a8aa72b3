"""What the telemetry HTTP endpoints share: a refusal with its status, and status mappings.

The OTLP/HTTP receiver (``otlp_http``) and the Prometheus remote-write receiver
(``remote_write``) answer on one listener; both raise :class:`HttpError` for a request they
refuse and map an ingest outcome (a ``google.rpc.Code``) to the same HTTP status.
"""

from __future__ import annotations

import math
import threading
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


class ByteBudget:
    """Bytes of requests held at once, bounded: :meth:`take` says no past ``limit`` (the caller
    refuses the request, retryably) instead of holding more. An empty budget takes any one request,
    so a request as large as the limit itself always gets through on its own.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        """Bytes held now."""
        return self._used

    def take(self, n: int) -> bool:
        """Hold ``n`` more bytes if the bound allows."""
        with self._lock:
            if self._used and self._used + n > self.limit:
                return False
            self._used += n
            return True

    def give(self, n: int) -> None:
        """Release ``n`` bytes taken before."""
        with self._lock:
            self._used -= n
