"""Sweep rows delivered to a Python client over loopback gRPC, and the engine's own rate.

    python benchmarks/bench_sweep_stream.py                          # server started here, default chunking
    python benchmarks/bench_sweep_stream.py --rows-per-message 1 64 256 1024
    python benchmarks/bench_sweep_stream.py --address 127.0.0.1:50051   # an already running server

Starts ``twin serve --port 0`` in a subprocess (unless --address; the inline executor, so
Ray start-up is not measured), then runs one sweep with every row kept (12,000 points:
gbs x mbs x recompute x pp on Llama 3.1 70B, 256 H100s; about 40% feasible, each of those
carrying a full estimate, the rest the reason they are infeasible) and reads the stream
with the generated stub, decoding every message like any client does. For each
``--rows-per-message`` value (0: the server's default; the field is left out when the
server's proto does not have it, so the script measures an older build too) it prints
rows/s from the request to the Finished event, messages and bytes received, and the CPU
seconds the server and this client spent. Best of ``--repeats`` runs (the machine may be
shared).

For comparison it also prints what the same sweep costs without the wire: the sweep
engine's runner in this process (rows re-evaluated, no conversion to messages), and the
engine alone with rows not kept (``keep_rows: false`` over the wire: progress and best only).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twin.rpc.v1 import sweep_service_pb2 as sw  # noqa: E402
from twin.rpc.v1 import sweep_service_pb2_grpc as sw_grpc  # noqa: E402
from twin.server.process import start_serve  # noqa: E402

BASE = {"name": "base", "cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-70b",
        "plan": {"tp": 8, "pp": 4, "gbs": 256}}
AXES = [{"path": "plan.gbs", "range": {"start": 256, "stop": 256 * 201, "step": 256}},
        {"path": "plan.mbs", "values": [1, 2]},
        {"path": "plan.recompute", "values": ["none", "selective", "full"]},
        {"path": "plan.pp", "values": [1, 2, 4, 5, 8, 10, 16, 20, 40, 80]}]  # 200 x 2 x 3 x 10 = 12,000 points
SPEC = {"name": "bench-stream", "base": BASE, "axes": AXES, "keep_rows": True}
HAS_CHUNK_FIELD = "rows_per_message" in sw.SweepRequest.DESCRIPTOR.fields_by_name
CLK_TCK = os.sysconf("SC_CLK_TCK")


def start_server() -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "TWIN_SWEEP_EXECUTOR": "inline"}
    env.pop("TWIN_AUTH_TOKEN", None)
    proc, serving = start_serve(["--port", "0", "--state-dir", "/tmp/twin-bench-stream-state"], env=env, cwd=ROOT)
    return proc, serving["address"]


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (/proc/PID/stat fields 14 and 15, proc(5))."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def request(spec: dict, rows_per_message: int) -> sw.SweepRequest:
    req = sw.SweepRequest(spec_document=json.dumps(spec))
    if rows_per_message and HAS_CHUNK_FIELD:
        req.rows_per_message = rows_per_message
    return req


def one_run(stub: sw_grpc.SweepServiceStub, spec: dict, rows_per_message: int, server_pid: int | None
            ) -> dict[str, float]:
    """Read one sweep stream to its end; rows counted from either wire form."""
    rows = messages = nbytes = 0
    last_index = -1
    in_order = True
    s0 = proc_cpu_s(server_pid) if server_pid else 0.0
    c0, t0 = self_cpu_s(), time.perf_counter()
    finished = None
    for ev in stub.Sweep(request(spec, rows_per_message), timeout=600):
        messages += 1
        nbytes += ev.ByteSize()
        kind = ev.WhichOneof("event")
        if kind == "row":
            batch = [ev.row]
        elif kind == "rows":
            batch = list(ev.rows.rows)
        else:
            batch = []
            if kind == "finished":
                finished = ev.finished
        for r in batch:
            in_order &= r.index > last_index
            last_index = r.index
        rows += len(batch)
    wall = time.perf_counter() - t0
    client_cpu = self_cpu_s() - c0
    server_cpu = proc_cpu_s(server_pid) - s0 if server_pid else float("nan")
    assert finished is not None and finished.stopped == "", "the sweep did not finish"
    return {"rows": rows, "points": finished.done_points, "messages": messages, "bytes": nbytes, "wall_s": wall,
            "client_cpu_s": client_cpu, "server_cpu_s": server_cpu, "in_order": float(in_order)}


def best_of(repeats: int, fn) -> dict[str, float]:
    runs = [fn() for _ in range(repeats)]
    return min(runs, key=lambda r: r["wall_s"])


def in_process(repeats: int) -> float:
    """Rows/s of the server's sweep runner in this process: the ceiling without the wire."""
    from twin.engine import Engine
    from twin.server.sweep_engine import EngineRunner
    from twin.server.sweep_events import Row

    runner = EngineRunner(Engine(autoload=False), max_points=1_000_000, executor="inline")
    best = float("inf")
    n = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = sum(isinstance(e, Row) for e in runner(SPEC, lambda: False))
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", help="a running server (default: start one here)")
    ap.add_argument("--rows-per-message", type=int, nargs="+", default=[0],
                    help="SweepRequest.rows_per_message values to measure (0: the server's default)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per setting; the fastest is reported")
    ap.add_argument("--no-in-process", action="store_true", help="skip the in-process runner figure")
    args = ap.parse_args()
    proc = None
    address = args.address
    if address is None:
        proc, address = start_server()
    pid = proc.pid if proc is not None else None
    channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
    try:
        stub = sw_grpc.SweepServiceStub(channel)
        print(f"server {address}; sweep of 12,000 points, every row kept; {os.cpu_count()} CPUs on this machine; "
              f"best of {args.repeats}; proto has rows_per_message: {HAS_CHUNK_FIELD}")
        one_run(stub, {**SPEC, "axes": [AXES[0], *AXES[1:3], {"path": "plan.pp", "values": [1, 2]}]}, 0, pid)  # warm
        for k in args.rows_per_message:
            r = best_of(args.repeats, lambda k=k: one_run(stub, SPEC, k, pid))
            label = f"rows_per_message {k}" if k else "server default"
            print(f"{label}: {r['rows']:,.0f} rows in {r['wall_s']:.2f} s -> {r['rows'] / r['wall_s']:,.0f} rows/s; "
                  f"{r['messages']:,.0f} messages, {r['bytes'] / r['rows']:.0f} bytes/row; CPU server "
                  f"{r['server_cpu_s']:.2f} s, client {r['client_cpu_s']:.2f} s; in order: {bool(r['in_order'])}")
        lean = best_of(args.repeats, lambda: one_run(stub, {**SPEC, "keep_rows": False}, 0, pid))
        print(f"engine alone over the wire (keep_rows false): {lean['points']:,.0f} points in {lean['wall_s']:.2f} s "
              f"-> {lean['points'] / lean['wall_s']:,.0f} points/s")
    finally:
        channel.close()
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    if not args.no_in_process:
        print(f"the server's runner in this process (rows re-evaluated, no messages): "
              f"{in_process(args.repeats):,.0f} rows/s")


if __name__ == "__main__":
    main()
