"""Cyclic-collector pauses inside a serving process, with and without its startup heap frozen.

    python benchmarks/bench_gc.py                        # 500/s, 4,000 distinct Predicts, 3 rounds of each
    python benchmarks/bench_gc.py --rate 0 --requests 8000 --rounds 2

Each run is a fresh child process that builds and starts the whole server as ``twin serve``
does (``twin.server.grpc_app.build_server``: every service, telemetry, the sweep engine; no web
view), then either leaves the collector as it is (``plain``) or first freezes what it holds
(``twin.server.heap.freeze_startup_heap``, what ``twin serve`` does before it starts).
``benchmarks/bench_server.py``'s client then sends ``--requests`` distinct Predicts at
``--rate`` (0: closed loop); ``gc.callbacks`` in the child time every collection. Printed per
run: collections, their CPU and the longest pause (wall) per generation, and the client's
p50/p99. A pause holds the GIL, so every call in flight waits for it: the longest pause is
what a latency percentile feels. A fresh server's caches (answers, checked scenarios,
interned sections) fill over its first thousands of distinct calls, and while they grow the
collector runs more and promotes more. Rounds alternate the variants.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench_server  # noqa: E402  (benchmarks/ is the script's directory, first on sys.path)

VARIANTS = ("plain", "freeze")


def child(variant: str) -> None:
    """Serve until SIGTERM, timing every collection; print the address, then the figures (JSON lines)."""
    import gc

    from twin.server.grpc_app import build_server, start, stop
    from twin.server.heap import freeze_startup_heap
    from twin.server.server_config import ServerConfig

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # before any thread starts: sigwait takes it
    with tempfile.TemporaryDirectory() as state:
        running = build_server(ServerConfig(port=0, state_dir=state, plugins_autoload=False))
        frozen = freeze_startup_heap() if variant == "freeze" else 0
        seen: dict[int, list[tuple[float, float]]] = {0: [], 1: [], 2: []}
        started = [0.0, 0.0]

        def timed(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                started[:] = [time.perf_counter(), time.thread_time()]
            else:
                seen[info["generation"]].append((time.perf_counter() - started[0], time.thread_time() - started[1]))

        gc.callbacks.append(timed)
        start(running)
        print(json.dumps({"address": running.address}), flush=True)
        signal.sigwait({signal.SIGTERM})
        gc.callbacks.remove(timed)
        print(json.dumps({"frozen": frozen, "generations": {
            g: {"n": len(v), "cpu_ms": sum(c for _, c in v) * 1e3,
                "max_pause_ms": max((w for w, _ in v), default=0.0) * 1e3} for g, v in seen.items()}}), flush=True)
        stop(running)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0, help="requests/s (0: closed loop; default 500)")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    for rnd in range(args.rounds):
        for variant in VARIANTS:
            proc = subprocess.Popen([sys.executable, __file__, "--child", variant], cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert proc.stdout is not None
            address = json.loads(proc.stdout.readline())["address"]
            r = asyncio.run(bench_server.run(address, 16, args.requests, args.rate, 200, True))
            proc.send_signal(signal.SIGTERM)
            stats = json.loads(proc.stdout.readline())
            if proc.wait(60) != 0:
                raise SystemExit(f"the {variant} server exited with status {proc.returncode}")
            gens = "; ".join(f"gen{g} {v['n']}x {v['cpu_ms']:.0f} ms CPU, longest {v['max_pause_ms']:.1f} ms"
                             for g, v in stats["generations"].items())
            print(f"round {rnd + 1} {variant:>6} ({stats['frozen']} frozen): {gens} | p50 {r['p50_ms']:.2f} ms, "
                  f"p99 {r['p99_ms']:.2f} ms, errors {r['errors']}", flush=True)


if __name__ == "__main__":
    main()
