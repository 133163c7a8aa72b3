"""Run the telemetry service on its own gRPC server (tests, ``twin demo``, trying it out).

    python -m twin.telemetry.standalone --state-dir state --port 4317 [--http-port 4318] [--job NAME=SCENARIO.yaml]

Prints ``twin-telemetry listening on HOST:PORT`` once serving (``--port 0`` picks a free
port), stops cleanly on SIGTERM/SIGINT. ``twin serve`` hosts the same service through
:func:`twin.telemetry.extension.register`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from twin.core.errors import TwinError
from twin.engine import Engine
from twin.telemetry.extension import OTLP_WORKERS, attach, start_http
from twin.telemetry.otlp import server_options
from twin.telemetry.telemetry_config import MIB, TelemetryConfig


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m twin.telemetry.standalone",
                                description="Fabric Twin telemetry: OTLP metrics in, live state and calibration out.")
    p.add_argument("--state-dir", type=Path, required=True, help="directory of the SQLite state")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=4317, help="port (default 4317, the OTLP/gRPC port; 0: any free)")
    p.add_argument("--http-port", type=int, default=None,
                   help="also receive OTLP/HTTP (POST /v1/metrics) and Prometheus remote write (POST "
                        "/api/v1/write) on this port (4318 is the OTLP/HTTP default; 0: any free; default off)")
    p.add_argument("--job", action="append", default=[], metavar="NAME=SCENARIO",
                   help="register a job's scenario file (repeatable)")
    p.add_argument("--job-hosts", action="append", default=[], metavar="NAME=HOST[,HOST...]",
                   help="a --job's placement: its hosts in rank order (without it every host counts for it)")
    p.add_argument("--calibrate-interval", type=float, default=60.0, help="seconds between automatic fits (0: off)")
    p.add_argument("--max-series", type=int, default=200_000)
    p.add_argument("--max-components", type=int, default=50_000)
    p.add_argument("--max-pending-points", type=int, default=TelemetryConfig.max_pending_points)
    p.add_argument("--max-receive-mib", type=int, default=64)
    p.add_argument("--self-metrics-endpoint", default=None, help="OTLP endpoint for the twin's own metrics")
    p.add_argument("--log-level", default="WARNING")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = TelemetryConfig(state_dir=args.state_dir, max_series=args.max_series,
                             max_components=args.max_components, max_pending_points=args.max_pending_points,
                             max_receive_bytes=args.max_receive_mib * MIB, calibrate_interval_s=args.calibrate_interval,
                             self_metrics_endpoint=args.self_metrics_endpoint, otlp_http_host=args.host,
                             otlp_http_port=args.http_port)
    stop = threading.Event()
    try:
        config.validate()
        engine = Engine()
        server = grpc.server(ThreadPoolExecutor(max_workers=OTLP_WORKERS, thread_name_prefix="twin-otlp"),
                             options=server_options(config.max_receive_bytes))
        service, _ = attach(server, engine, config)
        http = start_http(service, config)
        hosts = dict(spec.partition("=")[::2] for spec in args.job_hosts)
        unknown = sorted(set(hosts) - {spec.partition("=")[0] for spec in args.job})
        if unknown:
            print(f"twin-telemetry: error: --job-hosts: no --job named {unknown[0]!r}", file=sys.stderr)
            return 2
        for spec in args.job:
            name, sep, path = spec.partition("=")
            if not sep:
                print(f"twin-telemetry: error: --job: expected NAME=SCENARIO (got {spec!r})", file=sys.stderr)
                return 2
            placement = {"hosts": hosts[name].split(",")} if name in hosts else None
            service.register_job(name, Path(path).read_text(), placement)
    except (TwinError, OSError) as err:
        print(f"twin-telemetry: error: {err}", file=sys.stderr)
        return 2
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    if port == 0:
        print(f"twin-telemetry: error: cannot bind {args.host}:{args.port}", file=sys.stderr)
        if http is not None:
            http.stop()
        return 2
    server.start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"twin-telemetry listening on {args.host}:{port}", flush=True)
    if http is not None:
        print(f"twin-telemetry OTLP/HTTP on {http.url}", flush=True)
        print(f"twin-telemetry remote write on {http.remote_write_url}", flush=True)
    stop.wait()
    if http is not None:
        http.stop()
    server.stop(grace=2.0).wait()
    service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
