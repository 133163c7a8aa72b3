"""What the telemetry HTTP endpoints share: a refusal with its status, status mappings, the
bearer-token check, the bound on bytes held, and a threaded server with the main port's TLS and
a bound on its connections.

The OTLP/HTTP receiver (``otlp_http``) and the Prometheus remote-write receiver
(``remote_write``) answer on one listener, the Prometheus ``/metrics`` endpoint
(``promexport``) on its own; they raise :class:`HttpError` for a request they refuse and map
an ingest outcome (a ``google.rpc.Code``) to the same HTTP status.
"""

from __future__ import annotations

import contextlib
import hmac
import http.server
import logging
import math
import socket
import ssl
import threading
import time
from http import HTTPStatus
from typing import Any

from google.rpc import code_pb2

log = logging.getLogger(__name__)
UNAUTHORIZED_MESSAGE = "missing or wrong bearer token (header 'Authorization: Bearer <token>')"

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


def authorize(header: str | None, token: str | None) -> None:
    """Refuse (401, with ``WWW-Authenticate``) a request whose ``Authorization`` header is not
    exactly ``Bearer <token>``; ``token`` None: auth is off. Constant time (``hmac.compare_digest``).
    The whitespace around a field value is not part of it (RFC 9110, section 5.5), as uvicorn (the
    web view) and every HTTP stack drop it; inside the value nothing is forgiven.
    """
    if token is None:
        return
    given = (header or "").strip(" \t").encode("utf-8", "surrogateescape")
    if hmac.compare_digest(given, f"Bearer {token}".encode()):
        return
    raise HttpError(HTTPStatus.UNAUTHORIZED, UNAUTHORIZED_MESSAGE, {"WWW-Authenticate": 'Bearer realm="fabric-twin"'})


# After answering a request whose body is left unread, what the client still sends is read and
# dropped for at most this long / this much before the connection closes (see linger_close).
# 2 s: Apache httpd's SECONDS_TO_LINGER (server/connection.c, ap_lingering_close). The byte bound
# is the project's own: it keeps a refusal from reading without end (a quarter of the default
# 64 MiB receive limit, so a request refused on its own size is mostly read off).
LINGER_S = 2.0
LINGER_BYTES = 16 * 1024 * 1024


def linger_close(sock: socket.socket, seconds: float = LINGER_S, max_bytes: int = LINGER_BYTES) -> None:
    """Stop sending on ``sock`` (FIN) and read and drop what the client still sends, for at most
    ``seconds`` or ``max_bytes``, before it is closed. A socket closed with unread data in its
    receive buffer answers with a reset (RFC 1122, 4.2.2.13), and a client still sending the
    body of a refused request then loses the answer it was sent (a 503 read as "connection
    reset"); this is the lingering close of HTTP servers (Apache's lingering_close).
    """
    with contextlib.suppress(OSError, ValueError):
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + seconds
        got = 0
        while got < max_bytes:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                return
            got += len(chunk)


def server_ssl_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext:
    """The HTTPS context for the main port's TLS settings (a client CA: client certificates required)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # gRPC's own floor (grpc core: TLS 1.2)
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class GuardedServer(http.server.ThreadingHTTPServer):
    """A threaded HTTP server with TLS (the handshake in the connection's own thread) and at most
    ``max_connections`` connections: past them a connection is answered 503 with Retry-After at once.
    """

    daemon_threads = True
    block_on_close = False
    # Connections the kernel queues before they are accepted: socketserver's default is 5, and a
    # burst past it had its connections' SYNs dropped and retried 1, 2, 4 and 8 s later (a request
    # took 18.9 s at 2x load in benchmarks/bench_overload.py); SOMAXCONN is the kernel's own cap.
    request_queue_size = socket.SOMAXCONN

    def __init__(self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler],
                 max_connections: int, ssl_context: ssl.SSLContext | None) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.ssl_context = ssl_context
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        if self.ssl_context is not None:
            # The handshake runs in the connection's own thread (first read), not in accept.
            sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # beyond the bound: refuse at once, retryable
            with contextlib.suppress(OSError):
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                                b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("HTTP connection from %s ended with an error", client_address, exc_info=True)
