"""The web view as a ``twin serve`` extension: its own port, thread and event loop.

:func:`register` (a ``twin.server.extensions.Register``, handed to ``build_server`` by
``twin serve``) binds ``web.address`` while the server is built, so a taken port is an error at
start naming ``config.web.address``, and records the bound address in ``ctx.listeners["web"]``
(the ``serving`` log line carries it). uvicorn then serves the app from a thread of its own
with its own asyncio loop: nothing it does runs on a gRPC worker, and what it evaluates runs
in its own worker threads. The same bearer token (``ctx.auth_token``) and TLS files
(``config.tls``; a client CA makes it mutual TLS) as the gRPC port. On shutdown
(``ctx.shutdown``) the event streams end and uvicorn stops.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from typing import Any

import uvicorn

from twin.core.errors import SpecError
from twin.server.context import ServerContext
from twin.server.server_config import ServerConfig
from twin.sweep.output import read_rows
from twin.web.live import Live
from twin.web.sweep_pages import WebSweeps
from twin.web.web_app import build_app

log = logging.getLogger("twin.web")
# Pending connections the listening socket queues: socket.SOMAXCONN is the kernel's own cap.
BACKLOG = socket.SOMAXCONN
# Seconds uvicorn gives open connections (event streams) to close at shutdown before cutting them;
# the streams end by themselves within one poll (twin.web.web_app.POLL_S) once ctx.shutdown is set.
GRACE_S = 2.0


def listen(config: ServerConfig) -> socket.socket:
    """The web view's listening socket: ``web.address``, or by default the server's host at port
    8080. A taken default port is not worth refusing to serve for: the view moves to a free
    port (logged, and in the ``serving`` line); a taken ``web.address`` is an error naming it.
    """
    host, port = config.web_bind
    try:
        return bind(host, port)
    except SpecError:
        if config.web.address or port == 0:
            raise
        sock = bind(host, 0)
        log.warning("web view: port %d of %s is taken; serving on free port %d instead (set web.address "
                    "or --web-address to choose)", port, host, sock.getsockname()[1])
        return sock


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); SpecError naming ``config.web.address`` when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as err:
        sock.close()
        raise SpecError("config.web.address", f"cannot listen on {host}:{port}: {err.strerror or err} (set "
                                              "web.address, or turn the web view off with --no-web)") from err
    sock.set_inheritable(True)
    return sock


class WebServer:
    """uvicorn serving one app on one bound socket, in its own thread."""

    def __init__(self, app: Any, sock: socket.socket, config: ServerConfig) -> None:
        self.sock = sock
        tls = config.tls
        options: dict[str, Any] = {}
        if tls.enabled:
            options = {"ssl_certfile": tls.cert_file, "ssl_keyfile": tls.key_file}
            if tls.mutual:
                options.update(ssl_ca_certs=tls.client_ca_file, ssl_cert_reqs=ssl.CERT_REQUIRED)
        self.config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", ws="none",
                                     timeout_graceful_shutdown=GRACE_S, **options)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, name="twin-web",
                                       daemon=True)

    @property
    def address(self) -> str:
        """``host:port`` bound."""
        host, port = self.sock.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self) -> None:
        """Serve from the thread."""
        self.thread.start()

    def stop(self) -> None:
        """Stop serving and wait for the thread (at most the grace and a second)."""
        self.server.should_exit = True
        self.thread.join(GRACE_S + 1.0)
        self.sock.close()


def register(server: Any, ctx: ServerContext) -> None:
    """The web view as a server extension (``twin serve`` adds it unless ``web.enabled`` is false)."""
    config = ctx.config
    sock = listen(config)
    live = Live(ctx.engine, ctx.extras.get("telemetry"))
    # A loaded rows file holds at most as many rows as a sweep the service would run.
    sweeps = WebSweeps(ctx.sweep_runner, config.limits.max_sweep_streams, ctx.shutdown,
                       max_rows=config.limits.max_sweep_points)
    app = build_app(live, sweeps, ctx.auth_token, secure=config.tls.enabled,
                    max_body=config.limits.max_message_bytes, shutdown=ctx.shutdown, read_rows=read_rows,
                    bound_host=sock.getsockname()[0], allowed_hosts=config.web.allowed_hosts)
    web = WebServer(app, sock, config)
    ctx.listeners["web"] = web.address
    scheme = "https" if config.tls.enabled else "http"
    ctx.extras["web_url"] = f"{scheme}://{web.address}/"
    web.start()
    log.info("web view on %s", ctx.extras["web_url"])

    def stop_on_shutdown() -> None:
        ctx.shutdown.wait()
        web.stop()

    threading.Thread(target=stop_on_shutdown, name="twin-web-shutdown", daemon=True).start()
