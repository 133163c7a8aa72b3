"""What every servicer and extension of the server shares: :class:`ServerContext`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.engine import Engine
from twin.server.server_config import ServerConfig
from twin.server.sweep_events import SweepRunner


@dataclass
class ServerContext:
    """Shared state of one running server.

    ``engine``: presets + plugins + model (thread-safe for evaluation);
    ``config``: the loaded :class:`ServerConfig` (``config.state_path`` is the state dir);
    ``shutdown``: set when the server starts shutting down (SIGTERM); long-running work
    and background threads watch it;
    ``sweep_runner``: what the Sweep RPC calls (inline by default; the Ray engine swaps in);
    ``service_names``: full names of the services registered so far (health and reflection
    cover them);
    ``on_shutdown``: callables run once, last registered first, after the listener has
    stopped (close executors; shut down Ray only if this server started it).
    """

    engine: Engine
    config: ServerConfig
    shutdown: threading.Event = field(default_factory=threading.Event)
    # Set just before the shutdown grace runs out: long-running work (sweeps) stops then and
    # ends its stream with a final event saying why, instead of being cut by the server.
    cancel_work: threading.Event = field(default_factory=threading.Event)
    sweep_runner: SweepRunner | None = None
    service_names: list[str] = field(default_factory=list)
    on_shutdown: list[Callable[[], None]] = field(default_factory=list)
    # What every other listening port must enforce too (an extension's own port included):
    # the main port's interceptors (token auth, tracing) and TLS credentials (None: plaintext).
    interceptors: list[Any] = field(default_factory=list)
    credentials: Any = None
    # The bearer token the main port requires (None: auth off), for listeners that are not
    # gRPC (the OTLP/HTTP receiver) and so cannot reuse ``interceptors``.
    auth_token: str | None = None
    # Extra listeners an extension opened, name -> "host:port" (logged with "serving").
    listeners: dict[str, str] = field(default_factory=dict)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("twin.server"))
    extras: dict[str, Any] = field(default_factory=dict)
    # Streaming methods with a bound of their own (full method name -> why a new call would be
    # refused now, or None): the admission interceptor refuses them as they arrive, without a worker.
    stream_limits: dict[str, Callable[[], str | None]] = field(default_factory=dict)
    # For an extension's own gRPC server: (workers, thread name prefix) -> its pool and the load
    # shedding interceptor over it (the main port's limits.max_queued_rpcs), set by build_server.
    admitted_pool: Callable[[int, str], tuple[Any, Any]] | None = None

    @property
    def state_dir(self) -> Path:
        """The local state directory (created when the server starts)."""
        return self.config.state_path

    def run_shutdown_hooks(self) -> None:
        """Run every ``on_shutdown`` hook once (newest first); a failing hook is logged, not fatal."""
        while self.on_shutdown:
            hook = self.on_shutdown.pop()
            try:
                hook()
            except Exception:
                self.log.exception("shutdown hook %r failed", hook)
