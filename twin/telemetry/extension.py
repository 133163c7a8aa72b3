"""How telemetry plugs into a gRPC server: ``register(server, ctx)`` (the server extension contract).

``ctx`` carries ``engine``, ``config`` (``state_dir``, optionally ``telemetry``: a
mapping of :class:`~twin.telemetry.telemetry_config.TelemetryConfig` fields) and ``shutdown`` (a
``threading.Event``). Registering adds the OTLP MetricsService and the
twin.rpc.v1.TelemetryService to ``server``; with ``otlp_address`` set it also serves
OTLP on that dedicated address (e.g. the standard port 4317), with the main port's token
auth and TLS (``ctx.interceptors``, ``ctx.credentials``). With ``otlp_http_port`` set
(``twin serve --otlp-http-port``) it also serves OTLP/HTTP (``POST /v1/metrics``) and
Prometheus remote write (``POST /api/v1/write``) on the server's host, with the same token
(``ctx.auth_token``), TLS (``ctx.config.tls``) and receive limit, and records it in
``ctx.listeners``. When ``ctx.shutdown`` is set, the dedicated servers stop and the service
commits what is queued and closes.
The host server must accept large requests: build it with
``twin.telemetry.otlp.server_options(config.max_receive_bytes)``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from twin.core.errors import SpecError
from twin.engine import Engine
from twin.telemetry.httpbase import server_ssl_context
from twin.telemetry.otlp import otlp_handler, server_options
from twin.telemetry.otlp_http import HttpSettings, OtlpHttpReceiver
from twin.telemetry.service import TelemetryService
from twin.telemetry.servicer import add_to_server
from twin.telemetry.telemetry_config import TelemetryConfig

log = logging.getLogger(__name__)
OTLP_WORKERS = 16
# Concurrent OTLP/HTTP requests when the server sets no bound: the gRPC port's default
# (twin.server.server_config LimitsConfig.max_concurrent_rpcs).
OTLP_HTTP_CONNECTIONS = 256


def attach(server: grpc.Server, engine: Engine, config: TelemetryConfig, meter_provider: Any = None,
           interceptors: Any = (), credentials: grpc.ServerCredentials | None = None,
           token: str | None = None, tls: Any = None,
           admitted_pool: Callable[[int, str], tuple[Any, Any]] | None = None,
           ) -> tuple[TelemetryService, grpc.Server | None]:
    """Create the service and add its handlers to ``server`` (+ the dedicated OTLP server, started,
    with the same ``interceptors`` (token auth) and TLS ``credentials`` as the main port; the
    Prometheus ``/metrics`` endpoint with the same bearer ``token`` and ``tls`` settings).
    ``admitted_pool(workers, prefix)``: the dedicated server's pool and load shedding (twin serve's
    ``ServerContext.admitted_pool``: past its bound an export is refused at once instead of queued
    without one); None: a plain pool.
    """
    service = TelemetryService(engine, config, meter_provider=meter_provider, metrics_token=token,
                               metrics_ssl=_ssl_context(tls))
    server.add_generic_rpc_handlers((otlp_handler(service),))
    add_to_server(service, server)
    dedicated = None
    if config.otlp_address:
        pool: Any = None
        shedding: list[Any] = []
        if admitted_pool is not None:
            pool, shed = admitted_pool(OTLP_WORKERS, "twin-otlp")
            shedding = [shed]  # first: a refused export costs no auth check
        else:
            pool = ThreadPoolExecutor(max_workers=OTLP_WORKERS, thread_name_prefix="twin-otlp")
        def make() -> grpc.Server:
            return grpc.server(pool, interceptors=[*shedding, *interceptors],
                               options=server_options(config.max_receive_bytes))

        # With shedding, the calls waiting in the dedicated server's core queue are counted too.
        dedicated = shedding[0].watching(make) if shedding else make()
        dedicated.add_generic_rpc_handlers((otlp_handler(service),))
        if credentials is not None:
            port = dedicated.add_secure_port(config.otlp_address, credentials)
        else:
            port = dedicated.add_insecure_port(config.otlp_address)
        dedicated.start()
        # The bound address (port 0 in the config: the one the system picked), for clients and logs.
        service.otlp_grpc_address = f"{config.otlp_address.rpartition(':')[0]}:{port}"
        log.info("OTLP metrics receiver on %s", service.otlp_grpc_address)
    return service, dedicated


def start_http(service: TelemetryService, config: TelemetryConfig, token: str | None = None, tls: Any = None,
               max_connections: int = OTLP_HTTP_CONNECTIONS, workers: int = HttpSettings.workers,
               max_queued: int = HttpSettings.max_queued) -> OtlpHttpReceiver | None:
    """The OTLP/HTTP receiver on ``config.otlp_http_host:otlp_http_port``, started (None when off),
    with the main port's bearer ``token`` and TLS settings (``tls``: cert_file, key_file,
    client_ca_file, enabled), the gRPC receive limit, and the gRPC server's bounds on connections,
    calls served at once (``workers``) and calls waiting (``max_queued``).
    """
    if config.otlp_http_port is None:
        return None
    context = _ssl_context(tls)
    settings = HttpSettings(max_receive_bytes=config.max_receive_bytes, token=token, max_connections=max_connections,
                            workers=workers, max_queued=max_queued, retry_after_s=config.retry_after_s)
    try:
        receiver = OtlpHttpReceiver(service, config.otlp_http_host, config.otlp_http_port, settings, context)
    except OSError as err:
        raise SpecError("config.otlp_http_port", f"cannot listen on {config.otlp_http_host}:"
                                                 f"{config.otlp_http_port}: {err.strerror or err}") from err
    log.info("OTLP/HTTP metrics receiver on %s, Prometheus remote write on %s", receiver.url,
             receiver.remote_write_url)
    return receiver


def _ssl_context(tls: Any) -> Any:
    """The HTTPS context of the main port's TLS settings (cert_file, key_file, client_ca_file,
    enabled); None when TLS is off.
    """
    if tls is None or not getattr(tls, "enabled", False):
        return None
    return server_ssl_context(tls.cert_file, tls.key_file, tls.client_ca_file)


def register(server: grpc.Server, ctx: Any) -> None:
    """Server extension entry point (twin/server/extensions.py lists it)."""
    config = TelemetryConfig.from_server_config(ctx.config)
    service, dedicated = attach(server, ctx.engine, config, interceptors=getattr(ctx, "interceptors", ()),
                                credentials=getattr(ctx, "credentials", None), token=getattr(ctx, "auth_token", None),
                                tls=getattr(ctx.config, "tls", None), admitted_pool=getattr(ctx, "admitted_pool", None))
    limits = getattr(ctx.config, "limits", None)
    try:
        http = start_http(service, config, token=getattr(ctx, "auth_token", None), tls=getattr(ctx.config, "tls", None),
                          max_connections=getattr(limits, "max_concurrent_rpcs", OTLP_HTTP_CONNECTIONS),
                          workers=getattr(ctx.config, "workers", HttpSettings.workers),
                          max_queued=getattr(limits, "max_queued_rpcs", HttpSettings.max_queued))
    except Exception:
        if dedicated is not None:
            dedicated.stop(0)
        service.close()
        raise
    # The in-process state, for readers in the same process that are not gRPC (the web view).
    extras = getattr(ctx, "extras", None)
    if isinstance(extras, dict):
        extras["telemetry"] = service
    listeners = getattr(ctx, "listeners", {})
    if http is not None:
        listeners["otlp_http"] = http.address
    if dedicated is not None:
        listeners["otlp_grpc"] = service.otlp_grpc_address
    if service.metrics_endpoint is not None:
        listeners["metrics"] = service.metrics_endpoint.address

    def close_on_shutdown() -> None:
        ctx.shutdown.wait()
        if http is not None:
            http.stop()
        if dedicated is not None:
            dedicated.stop(grace=2.0).wait()
        service.close()

    threading.Thread(target=close_on_shutdown, name="twin-telemetry-shutdown", daemon=True).start()
