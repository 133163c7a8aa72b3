"""The OTLP/HTTP metrics receiver: ``POST /v1/metrics`` on its own port (which also serves
Prometheus remote write, ``POST /api/v1/write``: ``twin.telemetry.remote_write``).

Rules from the OTLP specification, "OTLP/HTTP" (opentelemetry.io/docs/specs/otlp/#otlphttp,
opentelemetry-proto docs/specification.md):

- the default path for metrics is ``/v1/metrics``; the default port is 4318;
- the body is an ``ExportMetricsServiceRequest``, binary protobuf
  (``Content-Type: application/x-protobuf``) or its proto3 JSON mapping
  (``application/json``), optionally ``Content-Encoding: gzip``; the response uses the
  request's encoding; unknown JSON fields are ignored ("OTLP/JSON receivers MUST ignore
  message fields with unknown names");
- success is ``200`` with an ``ExportMetricsServiceResponse`` (``partial_success`` when some
  points were refused); a bad request is ``400`` and every 4xx/5xx body is a
  ``google.rpc.Status``; throttling is ``503`` (or 429) with ``Retry-After``; 429, 502, 503
  and 504 are the retryable codes.

Decoding, the mapping and ingest are the gRPC receiver's (:func:`twin.telemetry.otlp.export`),
so both transports update the live state identically and classify errors alike. Every input
is bounded before it is expanded: the body by the gRPC receive limit (``max_receive_bytes``),
as sent and, for gzip, as it inflates (a small bomb is refused without inflating it all), in
at most ``MAX_GZIP_MEMBERS`` members and ``MAX_INFLATE_RATIO`` times what was sent; a JSON body
by ``MAX_JSON_BYTES``; the bodies held at once by ``max_inflight_bytes`` (503 with Retry-After
past it); and the work of one request by its deadline (``INGEST_TIMEOUT_S`` from its start).
Auth and TLS are the main port's: with a token configured, ``Authorization: Bearer <token>``
is required (401 otherwise, as gRPC UNAUTHENTICATED maps to HTTP 401 in
google/rpc/code.proto); with TLS configured the port speaks HTTPS (client certificates
required under mutual TLS).
"""

from __future__ import annotations

import http.server
import logging
import ssl
import threading
import time
import zlib
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2

from twin.telemetry import remote_write
from twin.telemetry.httpbase import (
    HTTP_STATUS,
    ByteBudget,
    GuardedServer,
    HttpError,
    authorize,
    linger_close,
    retry_after,
)
from twin.telemetry.ingest import DecodeSlots, Overloaded
from twin.telemetry.otlp import ExportOutcome, Request, export
from twin.telemetry.service import TelemetryService

log = logging.getLogger(__name__)

PATH = "/v1/metrics"  # OTLP spec, "OTLP/HTTP Request": the default metrics URL path
DEFAULT_PORT = 4318  # OTLP spec, "OTLP/HTTP Default Port"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"  # remote-write errors: Prometheus logs the body as text
# How long one export may wait for its commit: the OTLP exporters' default timeout
# (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s: opentelemetry-specification, protocol/exporter.md).
# Past it the client has given up anyway; it gets 504 (retryable) if it is still there.
INGEST_TIMEOUT_S = 10.0
# Idle/slow-client bound per connection: the OpenTelemetry Collector's HTTP server defaults
# (confighttp ServerConfig: ReadHeaderTimeout and IdleTimeout, 1 minute).
SOCKET_TIMEOUT_S = 60.0
MAX_HEADER_LINE = 8192  # an HTTP chunk-size line longer than this is garbage
# gzip members one body may hold. RFC 1952 allows a stream of members, but the exporters write
# one (the OpenTelemetry SDKs, the Collector's confighttp, Go's and Python's gzip writers); a few
# allow concatenated files. Each member costs a decompressor: 240,000 empty ones (4.8 MB) cost
# 47 s of CPU before this bound (issue 39).
MAX_GZIP_MEMBERS = 16
# How much more a gzip body may inflate to than it was sent as, once past RATIO_FLOOR bytes.
# OTLP protobuf gzips 9-23x and its JSON 25-68x (benchmarks/bench_ingest.py's requests, 10 to
# 2,000 ports, `gzip` level 6 and 9); 200x leaves 3x room over that, and still keeps a 64 MiB
# inflation from a body of less than 330 KB (deflate itself goes to ~1,032x).
MAX_INFLATE_RATIO = 200
RATIO_FLOOR = 1 << 20  # a small body's ratio is no threat: only past 1 MiB of output is it checked
# Input fed to a gzip member's decompressor at a time: what it keeps unconsumed past the member's
# end is copied at most this much per member (copying all the rest per member was quadratic).
INFLATE_FEED = 64 * 1024
INFLATE_FIRST_FEED = 256  # a member's first feed: small, so a tiny member copies little
# A JSON body at most: protobuf's json_format parses ~5.4 MB/s here (a 3.4 MB request of
# bench_ingest's, 2,000 ports: 0.64 s of CPU), so 8 MiB is ~1.5 s of one core; a Collector's
# default batch (batch processor send_batch_size 8192 points) is ~3.3 MB of OTLP/JSON.
MAX_JSON_BYTES = 8 * 1024 * 1024
# A refused request's body is read and dropped when at most this large, so the connection stays
# open for the retry (a reconnect costs the server an accept and a thread); a larger one is left
# unread and its connection closed. 1 MiB: the bench's and SDK exporters' requests are far below it
# (benchmarks/bench_ingest.py: 2,000 ports is 3.4 MB of JSON, a fraction of that as protobuf).
DRAIN_BYTES = 1 << 20

# HTTP status -> google.rpc.Code for the Status body of errors raised here.
_RPC_CODE = {HTTPStatus.BAD_REQUEST: code_pb2.INVALID_ARGUMENT, HTTPStatus.UNAUTHORIZED: code_pb2.UNAUTHENTICATED,
             HTTPStatus.FORBIDDEN: code_pb2.PERMISSION_DENIED, HTTPStatus.NOT_FOUND: code_pb2.NOT_FOUND,
             HTTPStatus.METHOD_NOT_ALLOWED: code_pb2.UNIMPLEMENTED,
             HTTPStatus.REQUEST_ENTITY_TOO_LARGE: code_pb2.RESOURCE_EXHAUSTED,
             HTTPStatus.UNSUPPORTED_MEDIA_TYPE: code_pb2.INVALID_ARGUMENT,
             HTTPStatus.LENGTH_REQUIRED: code_pb2.INVALID_ARGUMENT,
             HTTPStatus.SERVICE_UNAVAILABLE: code_pb2.UNAVAILABLE,
             HTTPStatus.GATEWAY_TIMEOUT: code_pb2.DEADLINE_EXCEEDED,
             HTTPStatus.INTERNAL_SERVER_ERROR: code_pb2.INTERNAL, HTTPStatus.NOT_IMPLEMENTED: code_pb2.UNIMPLEMENTED}


def inflate(body: bytes, limit: int) -> bytes:
    """``body`` gunzipped (every member), refusing output beyond ``limit`` bytes without making it,
    more than ``MAX_GZIP_MEMBERS`` members, or more than ``MAX_INFLATE_RATIO`` times the input.

    Linear in the body: each member's decompressor is fed a bounded window of the input (what it
    leaves unconsumed at the member's end is copied once, at most a window).
    """
    out = bytearray()
    view = memoryview(body)
    pos, end, members = 0, len(body), 0
    while pos < end:
        members += 1
        if members > MAX_GZIP_MEMBERS:
            raise HttpError(HTTPStatus.BAD_REQUEST,
                            f"body: more than {MAX_GZIP_MEMBERS} gzip members; send one gzip stream")
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip header and trailer (RFC 1952)
        feed = INFLATE_FIRST_FEED
        while not d.eof:
            if pos >= end:
                raise HttpError(HTTPStatus.BAD_REQUEST, "body: truncated gzip stream")
            chunk = view[pos:pos + feed]
            try:
                out += d.decompress(chunk, limit + 1 - len(out))
            except zlib.error as err:
                raise HttpError(HTTPStatus.BAD_REQUEST, f"body: not valid gzip ({err})") from err
            if len(out) > limit or d.unconsumed_tail:
                raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"body: inflates beyond the receive limit of {limit} bytes")
            pos += len(chunk) - len(d.unused_data)
            if len(out) > RATIO_FLOOR and len(out) > MAX_INFLATE_RATIO * pos:
                raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"body: inflates more than {MAX_INFLATE_RATIO} times its size (a gzip bomb?)")
            feed = min(2 * feed, INFLATE_FEED)
    return bytes(out)


def decode(body: bytes, media_type: str) -> Request:
    """The request from its protobuf or JSON body (400 when it does not decode)."""
    request = Request()
    try:
        if media_type == JSON:
            json_format.Parse(body.decode("utf-8"), request, ignore_unknown_fields=True)
        else:
            request.ParseFromString(body)
    except Exception as err:  # DecodeError, ParseError, UnicodeDecodeError, RecursionError...: all client data
        what = "OTLP/JSON" if media_type == JSON else "OTLP protobuf"
        detail = f" ({str(err)[:200]})" if media_type == JSON else ""
        raise HttpError(HTTPStatus.BAD_REQUEST,
                        f"request: not a valid {what} ExportMetricsServiceRequest{detail}") from err
    return request


def encode(message: Message, media_type: str) -> bytes:
    """``message`` in the request's encoding."""
    if media_type == JSON:
        return json_format.MessageToJson(message, indent=None).encode("utf-8")
    return message.SerializeToString()


# Bodies of the largest size the receiver holds at once (sent, inflated or decompressed): past
# it a request is refused with 503 and Retry-After instead of being held, so memory is bounded
# by this many receive limits however many connections are open (256 at 64 MiB: 16 GiB).
INFLIGHT_BODIES = 4


@dataclass(frozen=True)
class HttpSettings:
    """What the receiver enforces: body limit, bearer token (None: open), open connections,
    bytes of requests held at once (None: ``INFLIGHT_BODIES`` receive limits), requests served
    at once (``workers``) and waiting for that (``max_queued``; more are refused with 503 at once).
    """

    max_receive_bytes: int
    token: str | None = None
    max_connections: int = 256
    max_inflight_bytes: int | None = None
    workers: int = 8
    max_queued: int = 32
    retry_after_s: float = 1.0  # the Retry-After of a request refused past workers + max_queued

    @property
    def inflight_bytes(self) -> int:
        """The in-flight bound in bytes."""
        return self.max_inflight_bytes or INFLIGHT_BODIES * self.max_receive_bytes


class _Handler(http.server.BaseHTTPRequestHandler):
    """One connection. Every OTLP answer, error or not, is a protobuf/JSON message with a
    length; remote-write answers are ``204`` or a plain-text reason (what Prometheus logs).
    """

    protocol_version = "HTTP/1.1"  # keep-alive: SDK exporters reuse their connection
    server_version = "fabric-twin-otlp"
    sys_version = ""
    timeout = SOCKET_TIMEOUT_S
    server: _Server
    media_type = PROTOBUF
    consumed = False  # whether this request's body has been read
    held = 0  # bytes of this request counted against the receiver's in-flight bound
    deadline = 0.0  # time.monotonic() by which this request's work must be done

    # -- the two routes: OTLP (PATH) and Prometheus remote write (remote_write.PATH) -------
    def do_POST(self) -> None:
        self.media_type = PROTOBUF
        self.consumed = False
        self.deadline = time.monotonic() + INGEST_TIMEOUT_S
        try:
            path = self._route("POST")
            # At most `workers` requests run at once (and `max_queued` wait, off the GIL); past
            # that a request is refused before its body is read, as a shed gRPC call is.
            with self.server.gate.hold(self.deadline):
                if path == remote_write.PATH:
                    self._remote_write()
                    return
                self.media_type = self._content_type()
                body = self._read_body()
                self.consumed = True
                if self.media_type == JSON:  # JSON parses in Python: a decoding slot, as ingest's own
                    with self.server.service.slots.hold(self.deadline):
                        request = decode(body, self.media_type)
                else:
                    request = decode(body, self.media_type)
                outcome = export(self.server.service, request, self._left())
        except Overloaded as err:
            self._discard_small_body()
            self._fail(HTTPStatus.SERVICE_UNAVAILABLE, str(err), {"Retry-After": retry_after(err.retry_after_s)})
            return
        except HttpError as err:
            self._fail(err.status, str(err), err.headers)
            return
        except Exception:  # never a traceback to the client; the server keeps serving
            log.exception("OTLP/HTTP export failed")
            self._fail(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error", close=True)
            return
        finally:
            self._release()
        self._answer(outcome)

    def _discard_small_body(self) -> None:
        """Read and drop the unread body of a refused request when it is small (at most
        ``DRAIN_BYTES``, by its Content-Length), so the connection stays open for the client's
        retry; a larger or chunked one is left unread and the connection closed after the answer.
        """
        if self.consumed or "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            return
        if 0 <= length <= DRAIN_BYTES and len(self.rfile.read(length)) == length:
            self.consumed = True

    def _left(self) -> float:
        """Seconds left of this request's time (its deadline, from when it began)."""
        return max(0.0, self.deadline - time.monotonic())

    def _hold(self, n: int) -> None:
        """Count ``n`` more bytes of this request against the receiver's in-flight bound (503 past it)."""
        if not self.server.budget.take(n):
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE,
                            f"the receiver holds {self.server.budget.limit:,} bytes of requests already "
                            "(max in flight); retry", {"Retry-After": retry_after(1.0)})
        self.held += n

    def _release(self) -> None:
        self.server.budget.give(self.held)
        self.held = 0

    def _route(self, method: str) -> str:
        """The path this request is for (checked: known, POST, authorized)."""
        path = self.path.split("?", 1)[0]
        if path == remote_write.PATH:
            self.media_type = TEXT
        elif path != PATH:
            raise HttpError(HTTPStatus.NOT_FOUND, f"no such path {path[:200]!r}; OTLP metrics are POSTed to {PATH}, "
                                                  f"Prometheus remote write to {remote_write.PATH}")
        if method != "POST":
            raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed on {path}; use POST",
                            {"Allow": "POST"})
        self._authorize()
        return path

    def _remote_write(self) -> None:
        """One Prometheus remote-write request (``twin.telemetry.remote_write``)."""
        remote_write.check_headers(self.headers.get("Content-Type"), self.headers.get("Content-Encoding"))
        limit = self.server.settings.max_receive_bytes
        body = self._read_raw(limit)
        self.consumed = True
        raw = remote_write.decompress(body, limit)
        self._hold(len(raw))
        answer = remote_write.write(self.server.service, raw, self._left())
        if answer.status == HTTPStatus.NO_CONTENT:
            self._send(answer.status, b"")
        else:
            self._fail(answer.status, answer.message, answer.headers)

    def _authorize(self) -> None:
        authorize(self.headers.get("Authorization"), self.server.settings.token)

    def _content_type(self) -> str:
        media = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if media not in (PROTOBUF, JSON):
            raise HttpError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                            f"Content-Type {media or '(none)'!r} not supported; send {PROTOBUF} or {JSON}")
        return media

    def _read_body(self) -> bytes:
        limit = self.server.settings.max_receive_bytes
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip"):
            raise HttpError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                            f"Content-Encoding {encoding!r} not supported; send gzip or identity")
        what = "the receive limit"
        if self.media_type == JSON and limit > MAX_JSON_BYTES:
            # JSON parses ~40x slower than protobuf: send protobuf for larger requests.
            limit, what = MAX_JSON_BYTES, "the OTLP/JSON limit (send application/x-protobuf beyond it)"
        raw = self._read_raw(limit, what)
        if encoding != "gzip":
            return raw
        out = inflate(raw, limit)
        self._hold(len(out))
        return out

    def _read_raw(self, limit: int, what: str = "the receive limit") -> bytes:
        """The body as sent (Content-Length or chunked), at most ``limit`` bytes (``what`` the limit is)."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            raw = self._read_chunked(limit, what)
        else:
            length_text = self.headers.get("Content-Length")
            if length_text is None:
                raise HttpError(HTTPStatus.LENGTH_REQUIRED, "Content-Length (or chunked transfer encoding) required")
            try:
                length = int(length_text)
            except ValueError:
                length = -1
            if length < 0:
                raise HttpError(HTTPStatus.BAD_REQUEST, f"Content-Length {length_text[:40]!r} is not a length")
            if length > limit:
                raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"body of {length} bytes exceeds {what} of {limit} bytes")
            self._hold(length)
            raw = self.rfile.read(length)
            if len(raw) < length:
                raise HttpError(HTTPStatus.BAD_REQUEST, "body shorter than its Content-Length")
        return raw

    def _read_chunked(self, limit: int, what: str) -> bytes:
        out = bytearray()
        while True:
            line = self.rfile.readline(MAX_HEADER_LINE + 1)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                size = -1
            if size < 0 or len(line) > MAX_HEADER_LINE:
                raise HttpError(HTTPStatus.BAD_REQUEST, "malformed chunked body")
            if size == 0:
                while self.rfile.readline(MAX_HEADER_LINE + 1) not in (b"\r\n", b"\n", b""):
                    pass  # trailers: ignored
                return bytes(out)
            if len(out) + size > limit:
                raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"body exceeds {what} of {limit} bytes")
            self._hold(size)
            chunk = self.rfile.read(size)
            if len(chunk) < size:
                raise HttpError(HTTPStatus.BAD_REQUEST, "chunked body ended early")
            out += chunk
            self.rfile.readline(MAX_HEADER_LINE + 1)

    # -- answers --------------------------------------------------------------------------
    def _answer(self, outcome: ExportOutcome) -> None:
        if outcome.response is not None:
            self._send(HTTPStatus.OK, encode(outcome.response, self.media_type))
            return
        status = HTTP_STATUS.get(outcome.code, HTTPStatus.INTERNAL_SERVER_ERROR)
        headers = {} if outcome.retry_after_s is None else {"Retry-After": retry_after(outcome.retry_after_s)}
        self._fail(status, outcome.message, headers, code=outcome.code)

    def _fail(self, status: HTTPStatus, message: str, headers: dict[str, str] | None = None, *,
              code: int | None = None, close: bool = False) -> None:
        if self.media_type == TEXT:
            body = message.encode("utf-8", "replace")
        else:
            rpc = _RPC_CODE.get(status, code_pb2.UNKNOWN) if code is None else code
            body = encode(status_pb2.Status(code=rpc, message=message), self.media_type)
        # A refused request's body may be unread: close rather than parse it as the next request.
        self._send(status, body, headers, close=close or not self.consumed)

    def _send(self, status: HTTPStatus, body: bytes, headers: dict[str, str] | None = None, *,
              close: bool = False) -> None:
        self.send_response(status)
        if status != HTTPStatus.NO_CONTENT:  # a 204 has no body, hence no length (RFC 9110 8.6)
            self.send_header("Content-Type", self.media_type)
            self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)
        if close and not self.consumed:  # the body is unread: let the client read this answer first
            linger_close(self.connection)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol errors http.server detects itself (bad request line, headers...): a Status too."""
        try:
            status = HTTPStatus(code)
        except ValueError:
            status = HTTPStatus.BAD_REQUEST
        self.media_type = PROTOBUF
        if self.request_version == "HTTP/0.9":  # an unparsable request line: still answer with a status line
            self.request_version = "HTTP/1.1"
        self._fail(status, message or status.phrase, close=True)

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("otlp/http %s: " + format, self.address_string(), *args)

    def _not_allowed(self) -> None:
        # A body we do not read (or a HEAD, whose reply must carry none): close after answering.
        self.consumed = (self.command != "HEAD" and not self.headers.get("Content-Length")
                         and not self.headers.get("Transfer-Encoding"))
        self.media_type = PROTOBUF
        method = self.command or "?"
        try:
            self._route(method)
        except HttpError as err:
            self._fail(err.status, str(err), err.headers)

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed


class _Server(GuardedServer):
    def __init__(self, address: tuple[str, int], service: TelemetryService, settings: HttpSettings,
                 ssl_context: ssl.SSLContext | None) -> None:
        self.service = service
        self.settings = settings
        self.budget = ByteBudget(settings.inflight_bytes)
        self.gate = DecodeSlots(settings.workers, settings.max_queued, settings.retry_after_s,
                                waiting_for="for a receiver worker")
        super().__init__(address, _Handler, settings.max_connections, ssl_context)


class OtlpHttpReceiver:
    """A started OTLP/HTTP receiver; :meth:`stop` stops exactly what it started."""

    def __init__(self, service: TelemetryService, host: str, port: int, settings: HttpSettings,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._server = _Server((host.strip("[]"), port), service, settings, ssl_context)
        self.host = host.strip("[]")
        self.port: int = self._server.server_address[1]
        self.scheme = "https" if ssl_context is not None else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="twin-otlp-http", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``host:port`` bound (IPv6 literals bracketed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The endpoint an exporter is pointed at."""
        return f"{self.scheme}://{self.address}{PATH}"

    @property
    def remote_write_url(self) -> str:
        """The endpoint a Prometheus ``remote_write`` is pointed at."""
        return f"{self.scheme}://{self.address}{remote_write.PATH}"

    def stop(self) -> None:
        """Stop accepting, wait for the serving thread, close the socket (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
