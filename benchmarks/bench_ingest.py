"""OTLP ingest throughput: data points per second from N concurrent exporters.

    python benchmarks/bench_ingest.py [--exporters 4] [--seconds 10] [--ports 250] [--sdk]

Starts the telemetry server (``python -m twin.telemetry.standalone``) on 127.0.0.1 with a
fresh state directory, then N exporter processes push for ``--seconds``:
- default: pre-encoded OTLP/gRPC ExportMetricsServiceRequests (node_exporter InfiniBand
  names, ``--ports`` ports x 8 metrics per request), ``--inflight`` requests in flight per
  exporter: the server's ingest rate (decode, map, rate, health, SQLite commit,
  acknowledgement). Each in-flight lane is a node of its own (``bench-node-C-L``) sending
  its rounds one after the other with fresh timestamps, as a node's exporter does. (Two
  requests in flight for the same series race: gRPC does not order concurrent calls, so the
  later round could be applied first and the earlier one then be an out-of-order
  duplicate, dropped: 40,000 of 698,000 points in an 8 s run when the two lanes shared one
  node's series.)
- ``--sdk``: the OpenTelemetry SDK's OTLPMetricExporter exporting SDK-collected data,
  which also pays the SDK's own encoding on the same CPUs.
Prints the server's own count (its ingest stats) of points accepted, duplicate (accepted,
changing nothing) and rejected, and the throughput of the points it applied (accepted minus
duplicate) over the exporters' wall time; the client's view (points sent) beside it; and, on
Linux, the server's CPU time per applied point (on a shared machine the throughput moves
with what else runs; the CPU per point much less).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from proccpu import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
IB = ("node_infiniband_port_data_transmitted_bytes_total", "node_infiniband_port_data_received_bytes_total",
      "node_infiniband_symbol_error_total", "node_infiniband_link_error_recovery_total",
      "node_infiniband_link_downed_total", "node_infiniband_port_transmit_wait_total")
GAUGES = ("node_infiniband_state_id", "node_infiniband_rate_bytes_per_second")


def build_requests(client: int, ports: int, rounds: int, lanes: int = 1) -> list[bytes]:
    """``rounds`` requests in sending order: request k is round k // lanes of lane k % lanes."""
    from twin.telemetry.otlpbuild import request
    start = time.time_ns() - 3600 * 10**9
    out = []
    for k in range(rounds):
        r, lane = divmod(k, lanes)
        t = start + (r + 1) * 10**9
        metrics = []
        for i, name in enumerate(IB):
            metrics.append((name, "sum", [({"device": f"mlx5_{p % 8}", "port": str(p // 8 + 1)}, start, t,
                                           float((r + 1) * 1000 * (i + 1))) for p in range(ports)]))
        metrics.append((GAUGES[0], "gauge", [({"device": f"mlx5_{p % 8}", "port": str(p // 8 + 1)}, 0, t, 4.0)
                                             for p in range(ports)]))
        metrics.append((GAUGES[1], "gauge", [({"device": f"mlx5_{p % 8}", "port": str(p // 8 + 1)}, 0, t, 5e10)
                                             for p in range(ports)]))
        out.append(request({"host.name": f"bench-node-{client}-{lane}"}, metrics).SerializeToString())
    return out


def raw_exporter(addr: str, client: int, ports: int, seconds: float, inflight: int, q: mp.Queue,
                 barrier: mp.Barrier) -> None:
    rounds = max(20, 600_000 // (ports * 8))
    # A lane's next request leaves only once its previous one is answered (the window below is
    # first in, first out), so each lane's series see their rounds in order.
    reqs = build_requests(client, ports, rounds, lanes=inflight)
    per_req = ports * (len(IB) + len(GAUGES))
    ch = grpc.insecure_channel(addr, options=[("grpc.max_send_message_length", 64 << 20)])
    call = ch.unary_unary("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                          request_serializer=None, response_deserializer=None)
    grpc.channel_ready_future(ch).result(timeout=10)
    barrier.wait()  # every exporter has built its requests: start together
    sent = 0
    i = 0
    t0 = time.perf_counter()
    pending = []
    while time.perf_counter() - t0 < seconds and i < rounds:
        while len(pending) < inflight and i < rounds:
            pending.append(call.future(reqs[i], timeout=60))
            i += 1
        pending.pop(0).result()
        sent += per_req
    for f in pending:
        f.result()
        sent += per_req
    q.put((sent, time.perf_counter() - t0))


def sdk_exporter(addr: str, client: int, ports: int, seconds: float, inflight: int, q: mp.Queue,
                 barrier: mp.Barrier) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.metrics import Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"host.name": f"sdk-node-{client}"}))
    meter = provider.get_meter("bench")
    state = {"n": 0}
    attrs = [{"device": f"mlx5_{p % 8}", "port": str(p // 8 + 1)} for p in range(ports)]
    for name in IB:
        meter.create_observable_counter(name, [lambda o, s=state: [Observation(s["n"] * 1000.0, a) for a in attrs]])
    for name in GAUGES:
        meter.create_observable_gauge(name, [lambda o: [Observation(4.0, a) for a in attrs]])
    exporter = OTLPMetricExporter(endpoint=addr, insecure=True)
    barrier.wait()
    sent = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        state["n"] += 1
        exporter.export(reader.get_metrics_data())
        sent += ports * (len(IB) + len(GAUGES))
    q.put((sent, time.perf_counter() - t0))


def server_stats(addr: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from twin.rpc.v1 import telemetry_pb2 as pb
    from twin.rpc.v1 import telemetry_pb2_grpc as pbg
    stub = pbg.TelemetryServiceStub(grpc.insecure_channel(addr))
    ing = stub.GetLiveState(pb.GetLiveStateRequest(kinds=["none"], max_events=1)).ingest
    return {"accepted": ing.points_accepted, "rejected": ing.points_rejected, "duplicate": ing.points_duplicate,
            "requests": ing.requests, "series": ing.series}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--exporters", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--ports", type=int, default=250, help="ports per exporter (x 8 metrics = points per request)")
    p.add_argument("--inflight", type=int, default=2)
    p.add_argument("--sdk", action="store_true", help="use the OpenTelemetry SDK exporter instead of raw requests")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as state:
        server = subprocess.Popen([sys.executable, "-m", "twin.telemetry.standalone", "--state-dir", state,
                                   "--port", "0", "--calibrate-interval", "0"], cwd=ROOT, stdout=subprocess.PIPE,
                                  text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            line = server.stdout.readline()
            m = re.search(r"listening on (\S+)", line)
            if not m:
                print(f"server did not start: {line!r}", file=sys.stderr)
                return 1
            addr = m.group(1)
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            barrier = ctx.Barrier(args.exporters)
            target = sdk_exporter if args.sdk else raw_exporter
            procs = [ctx.Process(target=target, args=(addr, i, args.ports, args.seconds, args.inflight, q, barrier))
                     for i in range(args.exporters)]
            before = server_stats(addr)
            cpu_before = cpu_seconds(server.pid)
            for pr in procs:
                pr.start()
            results = [q.get(timeout=args.seconds + 300) for _ in procs]
            for pr in procs:
                pr.join()
            after = server_stats(addr)
            cpu_after = cpu_seconds(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=30)
    sent = sum(r[0] for r in results)
    wall = max(r[1] for r in results)
    accepted = after["accepted"] - before["accepted"]
    duplicate = after["duplicate"] - before["duplicate"]
    rejected = after["rejected"] - before["rejected"]
    # The server counts a duplicate as accepted (it is acknowledged, and changes nothing).
    applied = accepted - duplicate
    mode = "OpenTelemetry SDK OTLPMetricExporter" if args.sdk else "pre-encoded OTLP/gRPC requests"
    print(f"mode: {mode}; exporters: {args.exporters}; in flight each: {args.inflight}; "
          f"points/request: {args.ports * 8}; cpus: {os.cpu_count()}")
    print(f"server: {accepted:,} points accepted, of them {duplicate:,} duplicate; {rejected:,} rejected; "
          f"{applied:,} applied in {wall:.2f} s, {after['requests'] - before['requests']} requests, "
          f"{after['series']:,} live series")
    print(f"ingest throughput: {applied / wall:,.0f} applied data points/s (client-side sent {sent / wall:,.0f}/s)")
    if cpu_before is not None and cpu_after is not None and cpu_after > cpu_before:
        # The server is idle while the exporters build their requests, so this is its ingest CPU.
        used = cpu_after - cpu_before
        print(f"server CPU: {used:.2f} s ({used / wall:.2f} cores on average), {used / applied * 1e6:.2f} us per "
              f"applied point: {applied / used:,.0f} points per server CPU-second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
