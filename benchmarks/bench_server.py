"""Predict latency and throughput of the gRPC service over loopback.

    python benchmarks/bench_server.py                        # 200, 500, 2000 req/s, closed loop
    python benchmarks/bench_server.py --rate 200 --requests 4000 --clients 16
    python benchmarks/bench_server.py --address 127.0.0.1:50051 --rate 0   # an already running server
    python benchmarks/bench_server.py --twin /work/main --rate 500         # another checkout's server, this client

Starts ``twin serve --port 0`` in a subprocess (unless --address), then sends a fixed
number of Predict requests (Llama 3.1 70B on 1,024 H100s, by preset names) over N
grpc.aio channels. gRPC shares one connection among channels to the same address with the
same options (its global subchannel pool), so by default the N clients are N streams of one
HTTP/2 connection; ``--separate-connections`` gives each channel its own (a local subchannel
pool), as N client processes would have:

- ``--rate R`` (open loop): request k is sent at ``k / R`` seconds as its own task, whatever
  is still outstanding, and its latency is measured from that scheduled time, so a stalled
  server cannot hide its queueing (no coordinated omission); past capacity the server
  should refuse the excess at once (RESOURCE_EXHAUSTED with a retry hint), which is counted
  and timed apart;
- ``--rate 0`` (closed loop): every client sends its next request when the previous one
  returns: the throughput ceiling.

The client sends pre-serialized bytes and does not decode replies, so the figures are the
server's (the client still shares the machine's cores). Once its requests are built and its
channels warm, the client turns its own cyclic garbage collector off until the run ends: a
full collection in the client (of its ~34,000 startup objects, or, with those frozen, of the
finished calls it holds) stalled its event loop for 15-32 ms once a run, and every request
due meanwhile was sent late and counted as latency. Prints p50/p90/p99/max latency
of the answered requests, requests/s, the status codes, how fast refusals came back, and
(for a server started here, on Linux) the server's CPU time per call, from ``/proc``: unlike
latency it is not inflated by other work sharing the machine's cores; and the client's own.
``--twin CHECKOUT`` serves another checkout (with its ``.venv`` when it has one) to this same
client, for A/B comparisons.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from proccpu import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twin.rpc.v1 import twin_service_pb2  # noqa: E402
from twin.server.process import start_serve  # noqa: E402
from twin.wire.convert import scenario_from_mapping  # noqa: E402

SCENARIO = {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
            "plan": {"tp": 4, "pp": 4, "vp": 5, "gbs": 1024}}
METHOD = "/twin.rpc.v1.TwinService/Predict"
# What a server answers when it sheds load (refused at once, with a retry hint).
SHED_CODES = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)


def start_server(workers: int | None, twin: Path = ROOT,
                 model_workers: int | None = None) -> tuple[subprocess.Popen, str]:
    """``twin serve`` of checkout ``twin`` (its own .venv's Python when it has one) on a free port;
    ``workers`` / ``model_workers``: its ``workers`` and ``limits.model_workers`` (None: its defaults).
    """
    env = {**os.environ, "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "TWIN_LOG_LEVEL": "INFO"}
    if workers:
        env["TWIN_WORKERS"] = str(workers)
    if model_workers:
        env["TWIN_LIMITS_MODEL_WORKERS"] = str(model_workers)
    env.pop("TWIN_AUTH_TOKEN", None)
    launcher = None
    if twin != ROOT:
        venv = twin / ".venv" / "bin" / "python"
        launcher = [str(venv) if venv.exists() else sys.executable, "-m", "twin.cli"]
        env["PYTHONPATH"] = str(twin)
    proc, serving = start_serve(["--port", "0", "--state-dir", "/tmp/twin-bench-state"], env=env, cwd=twin,
                                launcher=launcher)
    return proc, serving["address"]


def percentile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def payloads(n: int, distinct: bool) -> list[bytes]:
    """Serialized requests: all the same, or each unique (a different name: a cache miss, same work)."""
    if not distinct:
        one = twin_service_pb2.PredictRequest(scenario=scenario_from_mapping(SCENARIO)).SerializeToString()
        return [one] * n
    return [twin_service_pb2.PredictRequest(scenario=scenario_from_mapping({**SCENARIO, "name": f"bench-{i}"}))
            .SerializeToString() for i in range(n)]


async def run(address: str, clients: int, requests: int, rate: float, warmup: int, distinct: bool,
              separate: bool = False) -> dict[str, Any]:
    """One measured run (see the module docstring); ``separate``: one connection per client."""
    bodies = payloads(requests + warmup, distinct)
    payload = bodies[-1]
    options = [("grpc.use_local_subchannel_pool", 1)] if separate else None
    channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(clients)]
    calls = [ch.unary_unary(METHOD) for ch in channels]
    for call in calls:
        for _ in range(max(1, warmup // clients)):
            await call(payload, timeout=10)
    gc.collect()
    gc.disable()  # until the run ends (module docstring): the client's own pauses would count as latency
    try:
        return await _measure(calls, bodies, rate, clients, requests)
    finally:
        gc.enable()
        for ch in channels:
            await ch.close()


async def _measure(calls: list[Any], bodies: list[bytes], rate: float, clients: int, requests: int
                   ) -> dict[str, Any]:
    cpu0 = time.process_time()
    latencies: list[float] = []
    refused: list[float] = []
    codes: collections.Counter[str] = collections.Counter()
    messages: dict[str, str] = {}
    lags: list[float] = [0.0]  # how late the client itself sent (its own CPU share on a shared machine)

    async def one(call: Any, body: bytes, scheduled: float) -> None:
        try:
            await call(body, timeout=30)
        except grpc.aio.AioRpcError as err:
            codes[err.code().name] += 1
            messages.setdefault(err.code().name, err.details() or "")
            if err.code() in SHED_CODES:
                refused.append((time.perf_counter() - scheduled) * 1e3)
            return
        codes["OK"] += 1
        latencies.append((time.perf_counter() - scheduled) * 1e3)

    t0 = time.perf_counter()
    if rate > 0:
        # Open loop: request k is sent at t0 + k/rate whatever is still outstanding (each its
        # own task), so the server sees the offered load, and a backlog shows in the latency.
        tasks = []
        for k in range(requests):
            scheduled = t0 + k / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                lags.append(-delay * 1e3)
            tasks.append(asyncio.ensure_future(one(calls[k % clients], bodies[k], scheduled)))
        await asyncio.gather(*tasks)
    else:
        per_client = [requests // clients + (1 if i < requests % clients else 0) for i in range(clients)]

        async def client(i: int) -> None:
            for k in range(per_client[i]):
                await one(calls[i], bodies[k * clients + i], time.perf_counter())

        await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    client_cpu_ms = (time.process_time() - cpu0) * 1e3 / requests
    lat = sorted(latencies) or [float("nan")]
    shed = sorted(refused) or [float("nan")]
    return {"requests": len(latencies), "errors": sum(n for c, n in codes.items() if c != "OK"),
            "codes": dict(codes), "messages": messages, "wall_s": wall, "rps": len(latencies) / wall,
            "p50_ms": percentile(lat, 0.50), "p90_ms": percentile(lat, 0.90), "p99_ms": percentile(lat, 0.99),
            "max_ms": lat[-1], "mean_ms": statistics.fmean(lat), "shed": len(refused),
            "shed_p50_ms": percentile(shed, 0.50), "shed_p99_ms": percentile(shed, 0.99),
            "client_lag_p99_ms": percentile(sorted(lags), 0.99) if rate > 0 else 0.0,
            "client_cpu_ms": client_cpu_ms}


def report(label: str, r: dict[str, float]) -> None:
    print(f"{label}: {r['requests']:.0f} Predict in {r['wall_s']:.2f} s -> {r['rps']:.0f} req/s; "
          f"latency p50 {r['p50_ms']:.2f} ms, p90 {r['p90_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
          f"max {r['max_ms']:.2f} ms; errors {r['errors']:.0f} {r['codes']}")
    for code, message in r["messages"].items():
        print(f"  {code}: e.g. {message[:160]!r}")
    if r["client_lag_p99_ms"] > 1.0:
        print(f"  the client itself sent late (p99 {r['client_lag_p99_ms']:.1f} ms behind schedule): "
              "part of that latency is the client's")
    if r["shed"]:
        print(f"  refused (load shed) {r['shed']:.0f}: answered in p50 {r['shed_p50_ms']:.2f} ms, "
              f"p99 {r['shed_p99_ms']:.2f} ms")
    if "CANCELLED" in r["codes"]:
        print("  CANCELLED: calls gRPC core dropped before the server's Python code saw them (its own bound on "
              "calls waiting to be taken, grpc.server.max_pending_requests): the server fell behind even at refusing")
    if r.get("server_cpu_ms") is not None:
        print(f"  server CPU {r['server_cpu_ms']:.2f} ms per call (all {r['calls']:.0f} calls, warm-up included); "
              f"client CPU {r['client_cpu_ms']:.2f} ms per call")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", help="a running server (default: start one here)")
    ap.add_argument("--twin", type=Path, default=ROOT,
                    help="serve this checkout instead of this one (an A/B with the same client)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    ap.add_argument("--separate-connections", action="store_true",
                    help="one HTTP/2 connection per client (default: gRPC multiplexes them over one)")
    ap.add_argument("--requests", type=int, default=3000, help="Predict requests per run (default 3000)")
    ap.add_argument("--rate", type=float, default=None,
                    help="requests/s in total (open loop); 0: closed loop; "
                         "default: 200, 500, 2000 (past capacity) then 0")
    ap.add_argument("--repeat", action="store_true",
                    help="send one request over and over (the server's scenario cache hits); default: every "
                         "request distinct, so every one is resolved and checked from scratch")
    ap.add_argument("--workers", type=int, default=None,
                    help="server worker threads when started here (default 8; streams and the long calls)")
    ap.add_argument("--model-workers", type=int, default=None,
                    help="threads for Predict and Validate when started here (limits.model_workers, default 1)")
    ap.add_argument("--warmup", type=int, default=200)
    args = ap.parse_args()
    proc = None
    address = args.address
    if address is None:
        # its log is drained in the background
        proc, address = start_server(args.workers, args.twin.resolve(), args.model_workers)
    try:
        rates = [args.rate] if args.rate is not None else [200.0, 500.0, 2000.0, 0.0]
        kind = "one repeated request" if args.repeat else "distinct requests"
        print(f"server {address}, {args.clients} clients, {kind}, {os.cpu_count()} CPUs on this machine")
        for rate in rates:
            c0 = cpu_seconds(proc.pid) if proc is not None else None
            r = asyncio.run(run(address, args.clients, args.requests, rate, args.warmup, not args.repeat,
                                args.separate_connections))
            c1 = cpu_seconds(proc.pid) if proc is not None else None
            calls = args.requests + args.clients * max(1, args.warmup // args.clients)
            r["calls"] = calls
            r["server_cpu_ms"] = (c1 - c0) * 1e3 / calls if c0 is not None and c1 is not None else None
            report(f"open loop at {rate:.0f} req/s" if rate else "closed loop", r)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


if __name__ == "__main__":
    main()
