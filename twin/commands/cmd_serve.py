"""``twin serve``: run the twin as a gRPC service (see ``twin.server.grpc_app``)."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from twin.core.errors import MissingExtraError
from twin.core.extras import needs_extra

if TYPE_CHECKING:
    from twin.server.extensions import Register
    from twin.server.server_config import ServerConfig


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` verb."""
    p = sub.add_parser(
        "serve", help="run the gRPC service",
        description="Run the twin as a gRPC service (Predict, Validate, GetCatalog, Sweep, Health, reflection). "
                    "Settings come from --config FILE, then TWIN_* environment variables, then these flags. "
                    "Logs the bound address as JSON on stderr; stops gracefully on SIGTERM.")
    p.add_argument("--host", help="address to bind (default 127.0.0.1; 0.0.0.0 or :: for all interfaces)")
    p.add_argument("--port", type=int, help="port to bind (default 50051; 0 picks a free port)")
    p.add_argument("--config", help="config file (YAML or JSON)")
    p.add_argument("--health-port", type=int, help="extra plaintext port serving only grpc.health.v1 (default off)")
    p.add_argument("--otlp-http-port", type=int,
                   help="also receive OTLP/HTTP metrics (POST /v1/metrics) on this port of --host; 4318 is the "
                        "OTLP default, 0 picks a free port (default off)")
    p.add_argument("--state-dir", help="local state directory (default ./state or $TWIN_STATE_DIR)")
    p.add_argument("--web-address", help="serve the web view on HOST:PORT (default: --host, port 8080; a free "
                                         "port when --port is 0; port 0 picks a free one)")
    p.add_argument("--no-web", action="store_true", help="do not serve the web view")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load the config and serve until SIGTERM."""
    with needs_extra("server", "twin serve"):
        from twin.server.grpc_app import serve
        from twin.server.observability import configure_logging
        from twin.server.process import exit_with_parent
        from twin.server.server_config import load_config

    exit_with_parent()  # started by another twin process (twin demo, a test): never outlive it

    overrides = {"host": args.host, "port": args.port, "health_port": args.health_port,
                 "otlp_http_port": args.otlp_http_port,
                 "state_dir": args.state_dir, "plugins_autoload": False if args.no_plugins else None}
    web: dict[str, object] = {}
    if args.web_address is not None:
        web.update(address=args.web_address, enabled=True)
    if args.no_web:
        web["enabled"] = False
    if web:
        overrides["web"] = web
    config = load_config(args.config, overrides=overrides)
    configure_logging(config.log_level, config.log_format)
    return serve(config, more=web_extension(config))


def web_extension(config: ServerConfig) -> list[Register]:
    """The web view's extension when it is on (``web.enabled``); without the 'web' extra a web view
    nobody asked for by address is left off with a warning, one asked for is an error naming the extra.
    """
    web = config.web
    if not web.enabled:
        return []
    try:
        with needs_extra("web", "the web view", field="config.web.address" if web.address else ""):
            from twin.web.server import register
    except MissingExtraError:
        if web.address:
            raise
        logging.getLogger("twin.web").warning(
            "web view off: it needs the 'web' extra (pip install 'fabric-twin[web]'); --no-web silences this")
        return []
    return [register]
