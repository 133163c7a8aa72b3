"""Open-loop load at a multiple of capacity on every surface, with Health probed meanwhile (issue 39).

    python benchmarks/bench_overload.py                          # every surface, 2x capacity, 10 s each
    python benchmarks/bench_overload.py --surfaces predict,otlp_http --factor 3 --seconds 15

Starts ``twin serve`` on 127.0.0.1 (main port, dedicated OTLP/gRPC port, OTLP/HTTP with remote
write; no token), then for each surface:

1. **capacity**: a closed loop of ``--clients`` clients for ``--capacity-seconds``: accepted
   requests per second;
2. **overload**: an open loop at ``--factor`` times that rate for ``--seconds``: request k is
   sent at ``k / rate`` s whatever is outstanding, and timed from then (no coordinated
   omission). Accepted requests (OK, 200/204) and refusals (RESOURCE_EXHAUSTED or UNAVAILABLE;
   429 or 503) are counted and timed apart; anything else is an error;
3. meanwhile a probe of its own (another process, so the load's client does not delay it)
   sends ``grpc.health.v1.Health/Check`` to the main port and to the Health-only port
   (``health_port``, what a kubelet probes) every 20 ms each, open loop and timed the
   same way (a prober that waited for each answer before the next would fall behind whenever
   answers take longer than 20 ms, and count its own backlog as Health's latency).

Surfaces: ``predict`` (TwinService/Predict, distinct scenarios), ``otlp_grpc`` (MetricsService/
Export on the dedicated port), ``otlp_http`` (POST /v1/metrics, protobuf), ``remote_write``
(POST /api/v1/write, snappy): each OTLP/remote-write request carries ``--points`` points of
node_exporter InfiniBand counters for one of 64 hosts, with fresh timestamps. Prints per
surface: capacity, offered and served rates, p50/p99 of accepted requests, p50/p99/max of
refusals (the time to refuse), errors, and Health p50/p99/max. The client shares the machine's
cores with the server, so on 2 cores the figures include its own CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import cramjam
import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpc_health.v1 import health_pb2  # noqa: E402

from tests.server.conftest import ServerProcess  # noqa: E402
from twin.rpc.prompb import remote_pb2  # noqa: E402
from twin.rpc.v1 import twin_service_pb2  # noqa: E402
from twin.telemetry.otlpbuild import request as otlp_request  # noqa: E402
from twin.wire.convert import scenario_from_mapping  # noqa: E402

SURFACES = ("predict", "otlp_grpc", "otlp_http", "remote_write")
HOSTS = 64  # exporters the OTLP requests come from (each its own series)
HEALTH_EVERY_S = 0.02  # a Health probe every 20 ms
MAX_CONNECTIONS = 200  # HTTP connections the client opens at most (the server's bound is 256)
GRPC_REFUSED = {"RESOURCE_EXHAUSTED", "UNAVAILABLE"}
HTTP_REFUSED = {429, 503}
ERRORS: dict[str, int] = {}  # what came back that was neither accepted nor a refusal: how many, by status


def predict_bodies(n: int) -> list[bytes]:
    """``n`` distinct Predict requests (Llama 3.1 70B on 1,024 H100s, tp 8 pp 4: batch sizes vary)."""
    out = []
    for i in range(n):
        scenario = {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
                    "plan": {"tp": 8, "pp": 4, "gbs": 32 * (16 + i)}}
        out.append(twin_service_pb2.PredictRequest(scenario=scenario_from_mapping(scenario)).SerializeToString())
    return out


def otlp_bodies(n: int, points: int) -> list[bytes]:
    """``n`` Export requests of ``points`` counter points each, round-robin over HOSTS hosts."""
    start = time.time_ns() - 3600 * 10**9
    ports = max(1, points // 2)
    out = []
    for k in range(n):
        t = start + (k // HOSTS + 1) * 10**9
        attrs = [{"device": f"mlx5_{p % 8}", "port": str(p // 8 + 1)} for p in range(ports)]
        metrics = [(name, "sum", [(a, start, t, float(k * 1000 + i)) for i, a in enumerate(attrs)])
                   for name in ("node_infiniband_port_data_transmitted_bytes_total",
                                "node_infiniband_port_data_received_bytes_total")]
        out.append(otlp_request({"host.name": f"bench-{k % HOSTS}"}, metrics).SerializeToString())
    return out


def remote_write_bodies(n: int, points: int) -> list[bytes]:
    """``n`` snappy WriteRequests of ``points`` samples each, round-robin over HOSTS instances."""
    now_ms = time.time_ns() // 10**6 - 3600 * 1000
    out = []
    for k in range(n):
        req = remote_pb2.WriteRequest()
        for p in range(points):
            ts = req.timeseries.add()
            for name, value in (("__name__", "node_infiniband_port_data_transmitted_bytes_total"),
                                ("device", f"mlx5_{p % 8}"), ("port", str(p // 8 + 1)),
                                ("instance", f"bench-{k % HOSTS}:9100"), ("job", "node")):
                ts.labels.add(name=name, value=value)
            ts.samples.add(value=float(k * 1000 + p), timestamp=now_ms + (k // HOSTS + 1) * 1000)
        out.append(bytes(cramjam.snappy.compress_raw(req.SerializeToString())))
    return out


class HttpPool:
    """Keep-alive HTTP/1.1 connections to one address, opened as needed (at most MAX_CONNECTIONS)."""

    def __init__(self, address: str) -> None:
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.open = 0
        self.free = asyncio.Condition()

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        """POST ``body``: the status (0 when the connection failed)."""
        conn = None
        async with self.free:
            await self.free.wait_for(lambda: self.idle or self.open < MAX_CONNECTIONS)
            if self.idle:
                conn = self.idle.pop()
            else:
                self.open += 1
        if conn is None:
            try:
                conn = await asyncio.open_connection(self.host, self.port)
            except OSError:
                await self._closed()
                return 0
        reader, writer = conn
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n{head}\r\n"
                     .encode() + body)
        try:
            status_line = await reader.readline()
            status = int(status_line.split()[1])
            length, close = 0, False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                key, _, value = line.decode("latin-1").partition(":")
                if key.lower() == "content-length":
                    length = int(value)
                elif key.lower() == "connection" and value.strip().lower() == "close":
                    close = True
            await reader.readexactly(length)
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
            writer.close()
            await self._closed()
            return 0
        if close:
            writer.close()
            await self._closed()
        else:
            async with self.free:
                self.idle.append((reader, writer))
                self.free.notify()
        return status

    async def _closed(self) -> None:
        async with self.free:
            self.open -= 1
            self.free.notify()


def free_port() -> int:
    """A port free on 127.0.0.1 now (the Health-only port takes no 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` in ms (NaN when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def closed_loop(send: Callable[[int], Awaitable[str]], clients: int, seconds: float) -> float:
    """Accepted requests per second of ``clients`` clients sending back to back."""
    accepted = 0
    end = time.perf_counter() + seconds
    k = iter(range(10**9))

    async def client() -> None:
        nonlocal accepted
        while time.perf_counter() < end:
            if await send(next(k)) == "accepted":
                accepted += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return accepted / (time.perf_counter() - t0)


def probe(addresses: list[str], seconds: float) -> None:
    """The Health prober (its own process): a Check to each address every HEALTH_EVERY_S for
    ``seconds``, open loop (each sent at its time whatever is outstanding, so one slow answer
    does not delay the next probe), each timed from its scheduled time; prints the latencies (s)
    per address as JSON."""
    asyncio.run(_probe(addresses, seconds))


async def _probe(addresses: list[str], seconds: float) -> None:
    channels = [grpc.aio.insecure_channel(a) for a in addresses]
    checks = [ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None)
              for ch in channels]
    body = health_pb2.HealthCheckRequest().SerializeToString()
    for check in checks:
        await check(body, timeout=30)
    print("ready", flush=True)
    t0 = time.perf_counter()

    async def one(check: Any, k: int) -> float:
        scheduled = t0 + k * HEALTH_EVERY_S
        await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
        try:
            await check(body, timeout=30)
        except grpc.aio.AioRpcError as err:  # a failed probe counts as never answered
            print(f"Health probe failed: {err.code().name} {err.details()}", file=sys.stderr, flush=True)
            return math.inf
        return time.perf_counter() - scheduled

    n = int(seconds / HEALTH_EVERY_S)
    out = await asyncio.gather(*(asyncio.gather(*(one(check, k) for k in range(n))) for check in checks))
    for ch in channels:
        await ch.close()
    print(json.dumps(out), flush=True)


async def open_loop(send: Callable[[int], Awaitable[str]], rate: float, seconds: float, health: list[str]
                    ) -> dict[str, Any]:
    """Requests at ``rate``/s for ``seconds``, each timed from its scheduled time; Health probed meanwhile."""
    results: dict[str, list[float]] = {"accepted": [], "refused": [], "error": []}
    prober = subprocess.Popen([sys.executable, __file__, "--probe", str(seconds), *health], stdout=subprocess.PIPE,
                              text=True)
    assert prober.stdout is not None
    prober.stdout.readline()  # ready
    t0 = time.perf_counter()
    n = int(rate * seconds)

    async def one(k: int) -> None:
        scheduled = t0 + k / rate
        await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
        outcome = await send(k)
        results[outcome].append(time.perf_counter() - scheduled)

    await asyncio.gather(*(one(k) for k in range(n)))
    wall = time.perf_counter() - t0
    probes = json.loads(prober.stdout.readline())
    prober.wait(30)
    return {"offered_per_s": n / seconds, "served_per_s": len(results["accepted"]) / wall,
            "accepted": len(results["accepted"]), "refused": len(results["refused"]), "errors": len(results["error"]),
            "accepted_p50_ms": pct(results["accepted"], 0.5), "accepted_p99_ms": pct(results["accepted"], 0.99),
            "refused_p50_ms": pct(results["refused"], 0.5), "refused_p99_ms": pct(results["refused"], 0.99),
            "refused_max_ms": pct(results["refused"], 1.0), "accepted_max_ms": pct(results["accepted"], 1.0),
            "wall_s": wall, "health": [(pct(p, 0.5), pct(p, 0.99), pct(p, 1.0), len(p)) for p in probes]}


def grpc_sender(channel: grpc.aio.Channel, method: str, bodies: list[bytes]) -> Callable[[int], Awaitable[str]]:
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)

    async def send(k: int) -> str:
        try:
            await call(bodies[k % len(bodies)], timeout=30)
            return "accepted"
        except grpc.aio.AioRpcError as err:
            if err.code().name in GRPC_REFUSED:
                return "refused"
            ERRORS[err.code().name] = ERRORS.get(err.code().name, 0) + 1
            return "error"

    return send


def http_sender(pool: HttpPool, path: str, bodies: list[bytes], headers: dict[str, str]
                ) -> Callable[[int], Awaitable[str]]:
    async def send(k: int) -> str:
        status = await pool.post(path, bodies[k % len(bodies)], headers)
        if 200 <= status < 300:
            return "accepted"
        if status in HTTP_REFUSED:
            return "refused"
        ERRORS[str(status)] = ERRORS.get(str(status), 0) + 1
        return "error"

    return send


async def run_surface(surface: str, listeners: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    options = [("grpc.max_send_message_length", 64 << 20)]
    main = grpc.aio.insecure_channel(listeners["main"], options=options)
    channels = [main]
    if surface == "predict":
        send = grpc_sender(main, "/twin.rpc.v1.TwinService/Predict", predict_bodies(4000))
    elif surface == "otlp_grpc":
        ch = grpc.aio.insecure_channel(listeners["otlp_grpc"], options=options)
        channels.append(ch)
        send = grpc_sender(ch, "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                           otlp_bodies(2000, args.points))
    elif surface == "otlp_http":
        send = http_sender(HttpPool(listeners["otlp_http"]), "/v1/metrics", otlp_bodies(2000, args.points),
                           {"Content-Type": "application/x-protobuf"})
    else:
        send = http_sender(HttpPool(listeners["otlp_http"]), "/api/v1/write", remote_write_bodies(2000, args.points),
                           {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"})
    for k in range(20):  # warm: connections, memos
        await send(k)
    capacity = await closed_loop(send, args.clients, args.capacity_seconds)
    await asyncio.sleep(1.0)  # the queues drain
    result = await open_loop(send, max(1.0, args.factor * capacity), args.seconds,
                             [listeners["main"], listeners["health"]])
    for ch in channels:
        await ch.close()
    return {"surface": surface, "capacity_per_s": capacity, "factor": args.factor, **result}


def main() -> int:
    if sys.argv[1:2] == ["--probe"]:
        probe(sys.argv[3:], float(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--surfaces", default=",".join(SURFACES))
    ap.add_argument("--factor", type=float, default=2.0, help="offered load as a multiple of measured capacity")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each open-loop run")
    ap.add_argument("--capacity-seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=16, help="closed-loop clients measuring capacity")
    ap.add_argument("--points", type=int, default=200, help="points per OTLP / remote-write request")
    args = ap.parse_args()
    surfaces = [s for s in args.surfaces.split(",") if s]
    unknown = set(surfaces) - set(SURFACES)
    if unknown:
        ap.error(f"unknown surfaces {sorted(unknown)}; choose from {', '.join(SURFACES)}")
    with tempfile.TemporaryDirectory(prefix="twin-overload-") as tmp:
        directory = Path(tmp)
        config = directory / "serve.json"
        config.write_text(json.dumps({"host": "127.0.0.1", "otlp_http_port": 0, "log_format": "json",
                                      "health_port": free_port(),
                                      "telemetry": {"otlp_address": "127.0.0.1:0", "calibrate_interval_s": 0}}))
        srv = ServerProcess(directory, "--config", str(config), "--no-web")
        serving = srv.wait_log(lambda r: r.get("msg") == "serving")
        listeners = {"main": serving["address"], **serving["listeners"],
                     "health": f"127.0.0.1:{serving['health_port']}"}
        gc.disable()  # the client's own collector would stall its sends (as in bench_server.py)
        try:
            for surface in surfaces:
                ERRORS.clear()
                r = asyncio.run(run_surface(surface, listeners, args))
                print(f"{surface}: capacity {r['capacity_per_s']:,.0f}/s; at {r['factor']:g}x "
                      f"({r['offered_per_s']:,.0f}/s offered, {r['served_per_s']:,.0f}/s served): accepted "
                      f"{r['accepted']:,} p50 {r['accepted_p50_ms']:.1f} ms p99 {r['accepted_p99_ms']:.1f} ms "
                      f"max {r['accepted_max_ms']:.1f} ms (wall {r['wall_s']:.0f} s); "
                      f"refused {r['refused']:,} p50 {r['refused_p50_ms']:.1f} ms p99 {r['refused_p99_ms']:.1f} ms "
                      f"max {r['refused_max_ms']:.1f} ms; errors {r['errors']} {ERRORS or ''}; "
                      + "; ".join(f"Health on the {where} port p50 {p50:.1f} ms p99 {p99:.1f} ms max {top:.1f} ms "
                                  f"({n} probes)"
                                  for where, (p50, p99, top, n) in zip(("main", "health"), r["health"], strict=True)),
                      flush=True)
        finally:
            gc.enable()
            errors = [rec for rec in srv.records if str(rec.get("level", "")).lower() in ("error", "critical")]
            code = srv.stop()
    print(f"server error records: {len(errors)}; exit code after SIGTERM: {code}")
    return 0 if not errors and code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
