"""Build and run the gRPC server: ``twin serve``.

:func:`build_server` assembles a ``grpc.Server`` from a :class:`ServerConfig`: the
extensions (``twin.server.extensions``), the standard grpc.health.v1 Health service and
server reflection, TLS/mTLS credentials, the bearer-token interceptor and (when asked
for) OpenTelemetry. :func:`serve` runs it until SIGTERM/SIGINT and shuts down gracefully:
health NOT_SERVING, an optional drain pause for load balancers and probes, ``stop(grace)``
so in-flight calls finish, then the shutdown hooks (executors, Ray if we started it).
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2

from twin import __version__
from twin.core.errors import SpecError, TwinError
from twin.engine import Engine
from twin.server import extensions
from twin.server.admission import HEALTH_WORKERS, AdmissionInterceptor, CountingExecutor
from twin.server.context import ServerContext
from twin.server.gil import shorten_switch_interval
from twin.server.heap import freeze_startup_heap
from twin.server.observability import Otel, TelemetryInterceptor, otel_requested, setup_otel
from twin.server.server_config import ServerConfig, TlsConfig
from twin.server.token_auth import TokenAuthInterceptor, load_token
from twin.wire.method_handlers import method_handler, refuse_malformed, safe_parser

log = logging.getLogger("twin.server")
HEALTH_DESCRIPTOR = health_pb2.DESCRIPTOR.services_by_name["Health"]
HEALTH_SERVICE = HEALTH_DESCRIPTOR.full_name


class BindError(TwinError):
    """The server could not listen on the configured address."""


@dataclass
class RunningServer:
    """A built (and possibly started) server with everything needed to stop it."""

    server: grpc.Server
    ctx: ServerContext
    health: health.HealthServicer
    port: int
    health_port: int
    health_server: grpc.Server | None
    otel: Otel | None
    auth: bool
    admission: AdmissionInterceptor | None = None  # the main port's load shedding
    frozen_objects: int = 0  # objects kept out of the cyclic collector (twin.server.heap), logged

    @property
    def address(self) -> str:
        """``host:port`` actually bound."""
        host = self.ctx.config.host
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{self.port}"


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise SpecError(key, f"cannot read {path}: {err.strerror or err}") from err


def _add_health(server: grpc.Server, servicer: health.HealthServicer) -> None:
    """grpc.health.v1 with Check decoded safely (garbage bytes: INVALID_ARGUMENT, not gRPC's
    own INTERNAL); Watch, a long-lived stream grpc_health drives itself, handed its requests as
    grpc_health's own registration would.
    """
    check = HEALTH_DESCRIPTOR.methods_by_name["Check"]

    def watch_checked(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        refuse_malformed(request, context)
        yield from servicer.Watch(request, context)

    watch = grpc.unary_stream_rpc_method_handler(
        watch_checked, request_deserializer=safe_parser(health_pb2.HealthCheckRequest),
        response_serializer=health_pb2.HealthCheckResponse.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        HEALTH_SERVICE, {"Check": method_handler(check, servicer.Check), "Watch": watch}),))


def _add_reflection(server: grpc.Server, service_names: tuple[str, ...]) -> None:
    """grpc.reflection.v1alpha as ``reflection.enable_server_reflection`` registers it, with each
    request of the stream decoded safely (garbage bytes: INVALID_ARGUMENT, not INTERNAL).
    """
    servicer = reflection.ReflectionServicer(service_names)

    def info(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        def checked() -> Iterator[Any]:
            for request in requests:
                refuse_malformed(request, context)
                yield request

        yield from servicer.ServerReflectionInfo(checked(), context)

    handler = grpc.stream_stream_rpc_method_handler(
        info, request_deserializer=safe_parser(reflection_pb2.ServerReflectionRequest),
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        reflection.SERVICE_NAME, {"ServerReflectionInfo": handler}),))


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """TLS credentials; with a client CA, clients must present a certificate it signed (mTLS)."""
    key = _read(tls.key_file, "config.tls.key_file")
    cert = _read(tls.cert_file, "config.tls.cert_file")
    client_ca = _read(tls.client_ca_file, "config.tls.client_ca_file") if tls.mutual else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                       require_client_auth=tls.mutual)


def _bind(server: grpc.Server, address: str, creds: grpc.ServerCredentials | None, key: str) -> int:
    try:
        port = server.add_secure_port(address, creds) if creds is not None else server.add_insecure_port(address)
    except RuntimeError as err:
        raise BindError(f"{key}: cannot listen on {address}: {err}") from err
    if port == 0:
        raise BindError(f"{key}: cannot listen on {address} (address in use or not local?)")
    return port


def exposure_warning(config: ServerConfig, token: str | None) -> str | None:
    """What to tell the operator when the service listens beyond loopback without a token
    or without TLS (None: nothing to say).
    """
    host = config.host.strip("[]")
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    if loopback:
        return None
    missing = [what for what, ok in (("no auth token", token is not None), ("no TLS", config.tls.enabled)) if not ok]
    if not missing:
        return None
    scope = "all interfaces" if host in ("0.0.0.0", "::", "") else host
    return (f"listening on {scope} with {' and '.join(missing)}: anyone who can reach port {config.port} can "
            "call every RPC; set auth.token_file (or TWIN_AUTH_TOKEN) and tls, or bind 127.0.0.1")


def build_server(config: ServerConfig, engine: Engine | None = None,
                 more: Sequence[extensions.Register] = ()) -> RunningServer:
    """A server ready to start, bound to its port(s); ``more``: extensions registered after the
    built-in ones (:data:`twin.server.extensions.EXTENSIONS`), such as the web view, which sits
    above the server and so is handed in by the command that starts it.
    """
    try:
        config.state_path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError("config.state_dir", f"cannot use {config.state_path}: {err.strerror or err} (pass "
                                            "--state-dir with a writable directory)") from err
    engine = engine or Engine(autoload=None if config.plugins_autoload else False)
    token = load_token(config.auth)
    ctx = ServerContext(engine=engine, config=config, auth_token=token)
    warning = exposure_warning(config, token)
    if warning:
        log.warning("UNPROTECTED: " + warning, extra={"host": config.host, "auth": token is not None,
                                                       "tls": config.tls.enabled})
    executor = CountingExecutor(max_workers=config.workers, thread_name_prefix="twin-rpc")
    ctx.on_shutdown.append(lambda: executor.shutdown(wait=False, cancel_futures=True))
    model_pool = CountingExecutor(max_workers=config.limits.model_workers, thread_name_prefix="twin-model")
    ctx.on_shutdown.append(lambda: model_pool.shutdown(wait=False, cancel_futures=True))
    health_pool = CountingExecutor(max_workers=HEALTH_WORKERS, thread_name_prefix="twin-health-check")
    ctx.on_shutdown.append(lambda: health_pool.shutdown(wait=False, cancel_futures=True))
    # Shedding comes first: a refused call costs no auth check, no span, no decode.
    admission = AdmissionInterceptor(executor, config.limits.max_queued_rpcs, model_pool=model_pool,
                                     health_pool=health_pool, stream_limits=ctx.stream_limits)
    ctx.on_shutdown.append(admission.shutdown)
    interceptors: list[grpc.ServerInterceptor] = [admission]
    otel = setup_otel(__version__) if otel_requested(config.otel.enabled) else None
    if otel is not None:
        interceptors.append(TelemetryInterceptor(otel))
    if token is not None:
        interceptors.append(TokenAuthInterceptor(token))
    limit = config.limits.max_message_bytes
    options = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        # gRPC enables SO_REUSEPORT by default: a second server on a taken port would bind
        # silently and share traffic. Off, a taken port is an error at start.
        ("grpc.so_reuseport", 0),
    ]
    concurrent = config.limits.max_concurrent_rpcs
    # Calls waiting in gRPC core count towards the bound too.
    server = admission.watching(lambda: grpc.server(
        executor, interceptors=interceptors, options=options, maximum_concurrent_rpcs=concurrent))
    # Extensions' own servers (the dedicated OTLP port) have their own pools, with auth and tracing,
    # and their own load shedding when they ask for it (ctx.admitted_pool).
    ctx.interceptors = interceptors[1:]

    def admitted_pool(workers: int, prefix: str) -> tuple[CountingExecutor, AdmissionInterceptor]:
        pool = CountingExecutor(max_workers=workers, thread_name_prefix=prefix)
        ctx.on_shutdown.append(lambda: pool.shutdown(wait=False, cancel_futures=True))
        shed = AdmissionInterceptor(pool, config.limits.max_queued_rpcs)
        ctx.on_shutdown.append(shed.shutdown)
        return pool, shed

    ctx.admitted_pool = admitted_pool
    ctx.credentials = server_credentials(config.tls) if config.tls.enabled else None
    for register in (*extensions.EXTENSIONS, *more):
        register(server, ctx)

    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    _add_health(server, health_servicer)
    for name in ("", *ctx.service_names):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    _add_reflection(server, (*ctx.service_names, HEALTH_SERVICE, reflection.SERVICE_NAME))

    port = _bind(server, config.address, ctx.credentials, "config.port")

    health_server = None
    health_port = 0
    if config.health_port:
        # A plaintext Health-only listener, so kubelet's native gRPC probes (which speak
        # no TLS) work while the main port requires TLS or mTLS.
        health_server = grpc.server(ThreadPoolExecutor(max_workers=2, thread_name_prefix="twin-health"),
                                    options=[("grpc.so_reuseport", 0)])
        _add_health(health_server, health_servicer)
        host = f"[{config.host}]" if ":" in config.host else config.host
        health_port = _bind(health_server, f"{host}:{config.health_port}", None, "config.health_port")
    return RunningServer(server=server, ctx=ctx, health=health_servicer, port=port, health_port=health_port,
                         health_server=health_server, otel=otel, auth=token is not None, admission=admission)


def start(running: RunningServer) -> None:
    """Start listening and log the bound address (one structured line tools can parse)."""
    running.server.start()
    if running.health_server is not None:
        running.health_server.start()
    cfg = running.ctx.config
    log.info("serving", extra={
        "address": running.address, "port": running.port, "health_port": running.health_port,
        "listeners": dict(running.ctx.listeners),
        "tls": cfg.tls.enabled, "mtls": cfg.tls.mutual, "auth": running.auth, "otel": running.otel is not None,
        "state_dir": str(cfg.state_path.resolve()), "services": list(running.ctx.service_names),
        "workers": cfg.workers, "gc_frozen_objects": running.frozen_objects,
        "switch_interval_s": sys.getswitchinterval(), "version": __version__})


SHUTDOWN_MARGIN_S = 1.0


def stop(running: RunningServer) -> None:
    """Shut down gracefully: NOT_SERVING, drain, stop with grace, hooks, flush telemetry."""
    ctx, cfg = running.ctx, running.ctx.config
    ctx.shutdown.set()
    running.health.enter_graceful_shutdown()
    log.info("shutting down", extra={"drain_s": cfg.drain_s, "grace_s": cfg.grace_s})
    if cfg.drain_s > 0:
        threading.Event().wait(cfg.drain_s)
    # Work still running when the grace is nearly over is cancelled, leaving it time to send
    # its last event (SHUTDOWN_MARGIN_S, or half a short grace) before the server cuts calls.
    margin = min(SHUTDOWN_MARGIN_S, cfg.grace_s / 2)
    timer = threading.Timer(max(0.0, cfg.grace_s - margin), ctx.cancel_work.set)
    timer.daemon = True
    timer.start()
    running.server.stop(cfg.grace_s).wait()
    timer.cancel()
    ctx.cancel_work.set()
    if running.health_server is not None:
        running.health_server.stop(0).wait()
    ctx.run_shutdown_hooks()
    if running.otel is not None:
        running.otel.shutdown()
    log.info("stopped")


def serve(config: ServerConfig, engine: Engine | None = None, more: Sequence[extensions.Register] = ()) -> int:
    """Run until SIGTERM or SIGINT, then shut down gracefully (``more``: as :func:`build_server`).
    Returns the exit status.
    """
    # A crash in native code (a C extension, or Python itself) leaves every thread's Python stack
    # on stderr, where the log goes, instead of a bare exit status (issue 39: the SIGSEGVs in
    # protobuf's upb were found from such dumps).
    faulthandler.enable(file=sys.stderr, all_threads=True)
    running = build_server(config, engine, more)
    # This process only serves from here on: what it holds now lives as long as it does.
    running.frozen_objects = freeze_startup_heap()
    shorten_switch_interval()  # Health and refusals past capacity (twin.server.gil)
    stop_requested = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal received", extra={"signal": signal.Signals(signum).name})
        stop_requested.set()

    previous: dict[int, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        start(running)
        while not stop_requested.wait(0.5):
            pass
    finally:
        stop(running)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
