"""How capabilities plug into the server: a list of ``register(server, ctx)`` callables.

Each entry adds its services to the ``grpc.Server`` (use :func:`twin.server.service_registry.add_service`
so it gets safe decoding, the error table and health/reflection coverage) and may hook
into the :class:`~twin.server.context.ServerContext`: replace ``ctx.sweep_runner``, append
to ``ctx.on_shutdown``, start background threads that watch ``ctx.shutdown``. They run in
list order when the server is built, before it starts. To add a capability, append its
register function to :data:`EXTENSIONS` (one line per capability)::

    from twin.telemetry.service import register as register_telemetry
    EXTENSIONS.append(register_telemetry)
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from twin.server.context import ServerContext
from twin.server.service_registry import add_service
from twin.server.services import SWEEP_SERVICE, TWIN_SERVICE, SweepServicer, TwinServicer

Register = Callable[[grpc.Server, ServerContext], None]


def register_core(server: grpc.Server, ctx: ServerContext) -> None:
    """TwinService (Predict, Validate, GetCatalog)."""
    add_service(server, ctx, TWIN_SERVICE, TwinServicer(ctx))


def register_sweeps(server: grpc.Server, ctx: ServerContext) -> None:
    """SweepService, run by the sweep engine unless an earlier extension installed another runner."""
    if ctx.sweep_runner is None:
        from twin.server.sweep_engine import runner_for  # lazily: loading the sweep engine takes ~0.2 s

        runner = runner_for(ctx.engine, ctx.config)
        ctx.sweep_runner = runner
        ctx.on_shutdown.append(runner.close)
    add_service(server, ctx, SWEEP_SERVICE, SweepServicer(ctx))


def register_telemetry(server: grpc.Server, ctx: ServerContext) -> None:
    """The OTLP MetricsService (same port) and twin.rpc.v1.TelemetryService."""
    from twin.telemetry.extension import register

    register(server, ctx)
    for name in ("opentelemetry.proto.collector.metrics.v1.MetricsService", "twin.rpc.v1.TelemetryService"):
        if name not in ctx.service_names:
            ctx.service_names.append(name)


def register_failure_analysis(server: grpc.Server, ctx: ServerContext) -> None:
    """FailureService (failure costs, goodput, criticality ranking)."""
    from twin.server.failure_servicer import register_failures

    register_failures(server, ctx)


EXTENSIONS: list[Register] = [
    register_core,
    register_sweeps,
    register_telemetry,
    register_failure_analysis,
]
