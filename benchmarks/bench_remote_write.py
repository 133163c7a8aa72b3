"""Prometheus remote-write ingest throughput: samples per second from N concurrent senders.

    python benchmarks/bench_remote_write.py [--senders 2] [--seconds 10] [--ports 250]

Starts the telemetry server (``python -m twin.telemetry.standalone --http-port 0``) on
127.0.0.1 with a fresh state directory, then N sender processes POST pre-encoded
remote-write requests to ``/api/v1/write`` over keep-alive HTTP/1.1 for ``--seconds``: what
a Prometheus forwarding node_exporter's InfiniBand collector sends (``--ports`` ports x 8
metrics, one sample each, ``job``/``instance`` labels, snappy block format), fresh
timestamps every round so nothing is a duplicate. Prints the samples/s the server accepted
(its ingest stats: all of its work per sample, snappy, protobuf, conversion to OTLP, decode,
map, state and SQLite commit, with the senders on the same CPUs) and the senders' view.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
IB = ("node_infiniband_port_data_transmitted_bytes_total", "node_infiniband_port_data_received_bytes_total",
      "node_infiniband_symbol_error_total", "node_infiniband_link_error_recovery_total",
      "node_infiniband_link_downed_total", "node_infiniband_port_transmit_wait_total")
GAUGES = ("node_infiniband_state_id", "node_infiniband_rate_bytes_per_second")


def build_bodies(sender: int, ports: int, rounds: int) -> list[bytes]:
    import cramjam

    from twin.rpc.prompb import remote_pb2
    start = time.time_ns() // 10**6 - 3600 * 1000
    out = []
    for r in range(rounds):
        t = start + (r + 1) * 1000
        req = remote_pb2.WriteRequest()
        for i, name in enumerate(IB + GAUGES):
            value = 4.0 if name == GAUGES[0] else 5e10 if name == GAUGES[1] else float((r + 1) * 1000 * (i + 1))
            for p in range(ports):
                ts = req.timeseries.add()
                for k, v in sorted({"__name__": name, "device": f"mlx5_{p % 8}", "port": str(p // 8 + 1),
                                    "instance": f"bench-node-{sender}:9100", "job": "node-exporter"}.items()):
                    ts.labels.add(name=k, value=v)
                ts.samples.add(value=value, timestamp=t)
        out.append(bytes(cramjam.snappy.compress_raw(req.SerializeToString())))
    return out


def sender(url: str, index: int, ports: int, seconds: float, q: mp.Queue, barrier: mp.Barrier) -> None:
    rounds = max(20, 400_000 // (ports * 8))
    bodies = build_bodies(index, ports, rounds)
    host, port, path = re.match(r"http://([^:/]+):(\d+)(/.*)", url).groups()
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
               "X-Prometheus-Remote-Write-Version": "0.1.0"}
    barrier.wait()
    sent, codes, i = 0, {}, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds and i < rounds:
        conn.request("POST", path, body=bodies[i], headers=headers)
        resp = conn.getresponse()
        resp.read()
        codes[resp.status] = codes.get(resp.status, 0) + 1
        sent += ports * 8
        i += 1
    q.put((sent, time.perf_counter() - t0, codes))
    conn.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--senders", type=int, default=2)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--ports", type=int, default=250, help="ports per sender (x 8 metrics = samples per request)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as state:
        server = subprocess.Popen([sys.executable, "-m", "twin.telemetry.standalone", "--state-dir", state,
                                   "--port", "0", "--http-port", "0", "--calibrate-interval", "0"], cwd=ROOT,
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            lines = [server.stdout.readline() for _ in range(3)]
            grpc_addr = re.search(r"listening on (\S+)", lines[0])
            url = re.search(r"remote write on (\S+)", lines[2])
            if not (grpc_addr and url):
                print(f"server did not start: {lines!r}", file=sys.stderr)
                return 1
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            barrier = ctx.Barrier(args.senders)
            procs = [ctx.Process(target=sender, args=(url.group(1), i, args.ports, args.seconds, q, barrier))
                     for i in range(args.senders)]
            for proc in procs:
                proc.start()
            results = [q.get(timeout=args.seconds + 300) for _ in procs]
            for proc in procs:
                proc.join()
            sys.path.insert(0, str(ROOT))
            from twin.rpc.v1 import telemetry_pb2 as pb
            from twin.rpc.v1 import telemetry_pb2_grpc as pbg
            with grpc.insecure_channel(grpc_addr.group(1)) as ch:
                ing = pbg.TelemetryServiceStub(ch).GetLiveState(pb.GetLiveStateRequest(kinds=["none"]),
                                                                timeout=30).ingest
            wall = max(r[1] for r in results)
            codes: dict[int, int] = {}
            for r in results:
                for code, n in r[2].items():
                    codes[code] = codes.get(code, 0) + n
            print(f"senders={args.senders} ports={args.ports} samples/request={args.ports * 8} "
                  f"seconds={wall:.1f} statuses={codes}")
            print(f"server accepted {ing.points_accepted:,} samples ({ing.points_accepted / wall:,.0f}/s), "
                  f"rejected {ing.points_rejected:,}, duplicate {ing.points_duplicate:,}, requests {ing.requests:,}")
            print(f"senders sent {sum(r[0] for r in results):,} samples")
        finally:
            server.terminate()
            server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
