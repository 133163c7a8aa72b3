"""What one load-shedding refusal costs the server: latency and server CPU per refused call.

    python benchmarks/bench_refusals.py                      # this checkout
    python benchmarks/bench_refusals.py --twin /work/main    # another checkout's admission code (A/B)

Starts a child process serving one method through ``twin.server.admission`` (one worker,
``max_queued_rpcs`` 1), holds its worker and fills its queue, so that every further call is
refused; then sends ``--requests`` calls from ``--clients`` grpc.aio clients, closed loop
(each sends its next call when the previous answer arrives), and prints the refusals'
latency (p50/p99/max), refusals/s, and the child's CPU time per refusal (utime + stime from
``/proc``, Linux only), which unlike latency is not inflated by other work on a shared machine.
The server has no model work at all: the figures are the refusal path alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
METHOD = "/bench.Slow/Call"


def serve() -> None:
    """The child: a server whose only worker is held and whose queue is full; prints its port."""
    from twin.server.admission import AdmissionInterceptor, CountingExecutor

    release = threading.Event()
    executor = CountingExecutor(max_workers=1, thread_name_prefix="bench")
    admission = AdmissionInterceptor(executor, max_queued=1)

    def call(request: bytes, context: grpc.ServicerContext) -> bytes:
        release.wait(600)
        return request

    handler = grpc.method_handlers_generic_handler("bench.Slow", {"Call": grpc.unary_unary_rpc_method_handler(call)})
    server = grpc.server(executor, interceptors=[admission], handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    held = [channel.unary_unary(METHOD).future(b"hold", timeout=600) for _ in range(2)]
    deadline = time.monotonic() + 30
    while executor.queued < 1:  # one call runs, one waits: the queue is full
        if time.monotonic() > deadline:
            raise SystemExit("the queue did not fill")
        time.sleep(0.01)
    print(port, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    release.set()
    for f in held:
        f.result(timeout=10)
    server.stop(None)


async def refuse_many(port: int, clients: int, requests: int) -> tuple[list[float], dict[str, int], float]:
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(clients)]
    calls = [ch.unary_unary(METHOD) for ch in channels]
    latencies: list[float] = []
    codes: dict[str, int] = {}

    async def client(i: int, n: int) -> None:
        for _ in range(n):
            t0 = time.perf_counter()
            code = "OK"
            try:
                await calls[i](b"x", timeout=30)
            except grpc.aio.AioRpcError as err:
                code = err.code().name
            latencies.append((time.perf_counter() - t0) * 1e3)
            codes[code] = codes.get(code, 0) + 1

    for call in calls:  # connect every channel first
        with contextlib.suppress(grpc.aio.AioRpcError):
            await call(b"x", timeout=30)
    t0 = time.perf_counter()
    share = [requests // clients + (1 if i < requests % clients else 0) for i in range(clients)]
    await asyncio.gather(*(client(i, n) for i, n in enumerate(share)))
    wall = time.perf_counter() - t0
    for ch in channels:
        await ch.close()
    return sorted(latencies), codes, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--twin", default=str(ROOT),
                    help="checkout whose twin package the server imports (default: this one)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=1, help="runs, each with a fresh server")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve()
        return
    # Only here, in the client: bench_server puts this checkout's twin first on sys.path.
    from bench_server import percentile
    from proccpu import cpu_seconds

    # GRPC_VERBOSITY: the child's gRPC core logs the GOAWAY of its own shutdown otherwise.
    env = {**os.environ, "PYTHONPATH": args.twin, "GRPC_VERBOSITY": "ERROR"}
    for run in range(args.repeat):
        child = subprocess.Popen([sys.executable, __file__, "--serve"], env=env, cwd=args.twin,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdin is not None
            port = int(child.stdout.readline())
            c0 = cpu_seconds(child.pid)
            lat, codes, wall = asyncio.run(refuse_many(port, args.clients, args.requests))
            c1 = cpu_seconds(child.pid)
        finally:
            if child.stdin is not None:
                child.stdin.close()
            child.wait(30)
        assert c0 is not None and c1 is not None, "needs /proc (Linux)"
        print(f"run {run + 1} ({args.twin}): {len(lat)} calls in {wall:.2f} s -> {len(lat) / wall:.0f}/s, {codes}; "
              f"latency p50 {percentile(lat, 0.5):.2f} ms, p99 {percentile(lat, 0.99):.2f} ms, max {lat[-1]:.2f} ms; "
              f"server CPU {(c1 - c0) * 1e3 / len(lat):.3f} ms per call")


if __name__ == "__main__":
    main()
