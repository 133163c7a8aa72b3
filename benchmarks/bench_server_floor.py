"""Where a Predict's server CPU goes: the twin's server against bare gRPC floors, same client.

    python benchmarks/bench_server_floor.py                                  # every kind, 500/s and closed loop
    python benchmarks/bench_server_floor.py --kinds sync,aio,ours --rates 500 --rounds 3
    python benchmarks/bench_server_floor.py --kinds ours,base --base /work/main   # two checkouts' servers

Each kind is a server in a child process answering ``/twin.rpc.v1.TwinService/Predict``;
``benchmarks/bench_server.py``'s client drives it (16 grpc.aio channels, distinct requests,
open loop at each ``--rates`` value, 0 for closed loop), and the child's CPU time per call
comes from ``/proc`` (utime + stime, warm-up calls included, as bench_server counts it):

- ``sync``: a bare ``grpc.server`` with a ThreadPoolExecutor of the twin's default size (8
  workers), the twin's server options, no interceptors; the handler decodes the request and
  returns the twin's reply to the bench scenario, serialized once at start (canned):
  gRPC-Python's own cost per call;
- ``sync-admission``: the same with the twin's load shedding (CountingExecutor, the admission
  interceptor and its channelz counter), still canned: what shedding adds;
- ``sync-registered``: ``sync`` with the method registered in core
  (``add_registered_method_handlers``) instead of a generic handler;
- ``aio``: a bare ``grpc.aio`` server, the handler a coroutine returning the canned reply
  inline on the event loop (no thread hand-off);
- ``sync-twin`` / ``aio-twin``: those two with the twin's real Predict (TwinServicer; the
  sync one through the twin's own handler wrapper) instead of the canned reply;
- ``sync-twin-x2``: two ``sync-twin`` processes sharing one port (``SO_REUSEPORT``: the kernel
  spreads connections over both, so run it with ``--separate-connections``; over the one
  connection gRPC otherwise shares, every call goes to one process); the CPU is both
  processes' together;
- ``ours``: ``twin serve`` of this checkout as bench_server starts it (every service, the
  web view on); ``base``: the same of the checkout given by ``--base``.

Rounds alternate the kinds (one fresh server of each per round, in order), so a change in the
machine's load touches all of them alike; the medians come last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench_server  # noqa: E402  (benchmarks/ is the script's directory, first on sys.path)
from proccpu import cpu_seconds  # noqa: E402

SERVICE = "twin.rpc.v1.TwinService"
# The twin's default worker count (twin/server/server_config.py, ServerConfig.workers).
WORKERS = 8
# The twin's default limits.max_queued_rpcs (twin/server/server_config.py).
MAX_QUEUED = 32
FLOORS = ("sync", "sync-admission", "sync-registered", "aio", "sync-twin", "aio-twin", "sync-twin-x2")
TWINS = ("ours", "base")


def _servicer() -> Any:
    from twin.engine import Engine
    from twin.server.context import ServerContext
    from twin.server.server_config import ServerConfig
    from twin.server.services import TwinServicer

    return TwinServicer(ServerContext(engine=Engine(autoload=False), config=ServerConfig()))


def _canned_reply() -> bytes:
    """The twin's PredictResponse to the bench scenario, serialized."""
    from twin.rpc.v1 import twin_service_pb2

    request = twin_service_pb2.PredictRequest.FromString(bench_server.payloads(1, distinct=False)[0])
    return _servicer().Predict(request, None).SerializeToString()  # type: ignore[no-any-return]


def _announce(port: int) -> None:
    print(json.dumps({"msg": "serving", "address": f"127.0.0.1:{port}"}), file=sys.stderr, flush=True)


def serve_floor(kind: str, port: int) -> None:
    """The child: a server of ``kind`` (see the module docstring) on ``port`` (0: a free one) until SIGTERM."""
    import grpc

    from twin.rpc.v1 import twin_service_pb2

    parse = twin_service_pb2.PredictRequest.FromString
    # The twin's options (twin/server/grpc_app.py): 4 MiB message limits, no SO_REUSEPORT.
    options = [("grpc.max_receive_message_length", 4 << 20), ("grpc.max_send_message_length", 4 << 20),
               ("grpc.so_reuseport", 1 if kind == "sync-twin-x2" else 0)]
    if "-twin" in kind:
        servicer = _servicer()
        answer: Callable[[Any], bytes] = lambda request: servicer.Predict(request, None).SerializeToString()  # noqa: E731
    else:
        reply = _canned_reply()
        answer = lambda request: reply  # noqa: E731

    if kind.startswith("aio"):
        async def predict_async(request: Any, context: Any) -> bytes:
            return answer(request)

        async def main() -> None:
            handler = grpc.unary_unary_rpc_method_handler(predict_async, request_deserializer=parse)
            server = grpc.aio.server(options=options, handlers=[
                grpc.method_handlers_generic_handler(SERVICE, {"Predict": handler})])
            bound = server.add_insecure_port(f"127.0.0.1:{port}")
            await server.start()
            _announce(bound)
            await server.wait_for_termination()

        asyncio.run(main())
        return

    from concurrent.futures import ThreadPoolExecutor

    if kind.startswith("sync-twin"):
        from twin.server.services import TWIN_SERVICE
        from twin.wire.method_handlers import generic_handler

        generic = generic_handler(TWIN_SERVICE, servicer)  # the twin's own wrapper: safe decoding, error table
    else:
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context: answer(request),
                                                      request_deserializer=parse)
        generic = grpc.method_handlers_generic_handler(SERVICE, {"Predict": handler})
    if kind == "sync-admission":
        from twin.server.admission import AdmissionInterceptor, CountingExecutor
        from twin.server.shedding import CoreArrivals

        executor = CountingExecutor(max_workers=WORKERS)
        admission = AdmissionInterceptor(executor, MAX_QUEUED)
        server, arrivals = CoreArrivals.around(lambda: grpc.server(
            executor, handlers=[generic], interceptors=[admission], options=options))
        admission.watch(arrivals)
    elif kind == "sync-registered":
        server = grpc.server(ThreadPoolExecutor(max_workers=WORKERS), options=options)
        server.add_registered_method_handlers(SERVICE, {"Predict": handler})
    else:
        server = grpc.server(ThreadPoolExecutor(max_workers=WORKERS), handlers=[generic], options=options)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    _announce(port)
    signal.sigwait({signal.SIGTERM})


def _start_floor(kind: str, port: int) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "GRPC_VERBOSITY": "ERROR"}
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("msg") == "serving":
            return proc, rec["address"]
    raise RuntimeError(f"floor server {kind} exited ({proc.wait()}) before serving")


def start(kind: str, base: Path | None) -> tuple[list[subprocess.Popen[str]], str]:
    """The server(s) of ``kind``, each a child process, and the address."""
    if kind == "ours":
        proc, address = bench_server.start_server(None)
        return [proc], address
    if kind == "base":
        assert base is not None
        proc, address = bench_server.start_server(None, base)
        return [proc], address
    first, address = _start_floor(kind, 0)
    if kind != "sync-twin-x2":
        return [first], address
    second, _ = _start_floor(kind, int(address.rsplit(":", 1)[1]))
    return [first, second], address


def measure(kind: str, base: Path | None, rate: float, requests: int, warmup: int, clients: int,
            separate: bool = False) -> dict[str, Any]:
    """One run of bench_server's client against a fresh server of ``kind``."""
    procs, address = start(kind, base)

    def cpu() -> float:
        seconds = [cpu_seconds(p.pid) for p in procs]
        return sum(s for s in seconds if s is not None) if None not in seconds else float("nan")

    try:
        c0 = cpu()
        r = asyncio.run(bench_server.run(address, clients, requests, rate, warmup, True, separate))
        calls = requests + clients * max(1, warmup // clients)
        r["server_cpu_ms"] = (cpu() - c0) * 1e3 / calls
        return r
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", choices=FLOORS, help=argparse.SUPPRESS)  # the child
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)  # the child's
    ap.add_argument("--kinds", default="sync,sync-admission,aio,ours", help="comma-separated (default: %(default)s)")
    ap.add_argument("--base", type=Path, help="checkout served as kind 'base'")
    ap.add_argument("--rates", default="500,0", help="requests/s, 0 for closed loop (default 500,0)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--separate-connections", action="store_true",
                    help="one connection per client (bench_server.py's option of the same name)")
    args = ap.parse_args()
    if args.serve:
        serve_floor(args.serve, args.port)
        return
    kinds = args.kinds.split(",")
    unknown = [k for k in kinds if k not in (*FLOORS, *TWINS)]
    if unknown:
        ap.error(f"--kinds: unknown {unknown} (known: {', '.join((*FLOORS, *TWINS))})")
    if "base" in kinds and args.base is None:
        ap.error("--kinds base needs --base CHECKOUT")
    rates = [float(r) for r in args.rates.split(",")]
    cpu: dict[tuple[str, float], list[float]] = {}
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    for rnd in range(args.rounds):
        for rate in rates:
            for kind in kinds:
                r = measure(kind, args.base, rate, args.requests, args.warmup, args.clients,
                            args.separate_connections)
                cpu.setdefault((kind, rate), []).append(r["server_cpu_ms"])
                label = f"{rate:.0f}/s" if rate else "closed"
                print(f"round {rnd + 1} {kind:>15} {label:>7}: server CPU {r['server_cpu_ms']:.3f} ms/call, "
                      f"{r['rps']:.0f} req/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
                      f"errors {r['errors']:.0f}, client late p99 {r['client_lag_p99_ms']:.1f} ms, "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    print("median server CPU per call (ms):")
    for (kind, rate), values in cpu.items():
        label = f"{rate:.0f}/s" if rate else "closed"
        print(f"  {kind:>15} {label:>7}: {statistics.median(values):.3f}  ({', '.join(f'{v:.3f}' for v in values)})")


if __name__ == "__main__":
    main()
