"""A long hostile run against a live ``twin serve`` with every port open (issues 15 and 39).

    python benchmarks/fuzz_server.py                                   # 100,000 requests, seed 1, 12 threads
    python benchmarks/fuzz_server.py --requests 1000000 --seconds 7200 --seed 39
    python benchmarks/fuzz_server.py --requests 20000 --threads 1     # one at a time, as before issue 39

Starts ``twin serve`` on 127.0.0.1 with the main port, the Health-only port, the dedicated
OTLP/gRPC port, OTLP/HTTP (and remote write), Prometheus ``/metrics`` and the web view (token
auth on, ``faulthandler`` on: a crash leaves every thread's stack in the log), and sends the
seeded cases of ``tests/server/fuzzcases.py`` over every method of every port from
``--threads`` threads at once (the mixed concurrent load that crashed the server in issue 39),
until ``--requests`` are answered or ``--seconds`` pass. Prints what came back per method and
port, anything not acceptable (INTERNAL, UNKNOWN, a 5xx, a dropped connection, the server
gone), the server's error log records and any crash dump, its RSS over the run (start, every
1,000 requests, end), and whether it is healthy at the end (Health SERVING and a Predict
answered). Exits 1 if anything was not acceptable, the server died or is not healthy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from tests.server import fuzzcases as fz  # noqa: E402
from tests.server.conftest import ServerProcess  # noqa: E402
from twin.rpc.v1 import twin_service_pb2, twin_service_pb2_grpc  # noqa: E402
from twin.wire.convert import scenario_from_mapping  # noqa: E402

TOKEN = "fuzz-benchmark-token"
REPORT_EVERY = 10_000  # requests between progress lines


def healthy(address: str) -> tuple[bool, str]:
    """Whether the main port answers Health SERVING and a Predict (with the token)."""
    try:
        with grpc.insecure_channel(address) as ch:
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=30).status
            est = twin_service_pb2_grpc.TwinServiceStub(ch).Predict(
                twin_service_pb2.PredictRequest(scenario=scenario_from_mapping(fz.BASE)),
                metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=30)
        ok = status == health_pb2.HealthCheckResponse.SERVING and est.estimate.step_time_s > 0
        return ok, f"Health {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}, Predict " \
                   f"{est.estimate.step_time_s:.3f} s"
    except grpc.RpcError as err:
        return False, f"{err.code()}: {err.details()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000, help="requests to send (answered)")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long even if fewer were sent")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=12, help="client threads sending at once (issue 39: 12)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="twin-fuzz-") as tmp:
        directory = Path(tmp)
        srv = ServerProcess(directory, "--config", str(fz.all_ports_config(directory)), env={fz.TOKEN_ENV: TOKEN})
        listeners = fz.listeners_of(srv.wait_log(lambda r: r.get("msg") == "serving"))
        print(f"server pid {srv.proc.pid}, ports {listeners}; seed {args.seed}, {args.threads} threads, "
              f"{args.requests:,} requests" + (f", at most {args.seconds:.0f} s" if args.seconds else ""), flush=True)
        t0 = time.perf_counter()

        def progress(done: int) -> None:
            if done % REPORT_EVERY == 0:
                wall = time.perf_counter() - t0
                print(f"  {done:,} answered, {wall:.0f} s ({done / wall:,.0f}/s), RSS "
                      f"{fz.rss_mib(srv.proc.pid):.0f} MiB", flush=True)

        try:
            report = fz.run(listeners, TOKEN, args.requests, args.seed, pid=srv.proc.pid, progress=progress,
                            threads=args.threads, seconds=args.seconds, alive=lambda: srv.proc.poll() is None)
        finally:
            wall = time.perf_counter() - t0
            alive = srv.proc.poll() is None
            health, health_text = healthy(listeners["main"]) if alive else (False, "the server is gone")
            errors = [r for r in srv.records if str(r.get("level", "")).lower() in ("error", "critical")]
            crash = [line for line in srv.lines if "Fatal Python error" in line or line.startswith(("Thread 0x",
                                                                                                    "Current thread"))]
            code = srv.stop()
            dump = srv.text() if crash or not alive else ""
    print(f"{report.sent:,} requests answered in {wall:.0f} s ({report.sent / wall:,.0f}/s), seed {args.seed}, "
          f"{args.threads} threads")
    for key, n in sorted(report.outcomes.items()):
        print(f"  {key}: {n:,}")
    codes: dict[str, int] = {}
    for key, n in report.outcomes.items():
        outcome = key.rsplit(" -> ", 1)[1]
        codes[outcome] = codes.get(outcome, 0) + n
    print("by outcome:", ", ".join(f"{c} {n:,}" for c, n in sorted(codes.items())))
    internal = sum(n for c, n in codes.items() if c in ("INTERNAL", "UNKNOWN"))
    server_errors = sum(n for c, n in codes.items() if c.isdigit() and int(c) >= 500 and c != "503")
    rss = [x for x in report.rss_mib if x == x]  # NaN once the process is gone
    if rss:
        print(f"server RSS: start {rss[0]:.0f} MiB, max {max(rss):.0f} MiB, end {rss[-1]:.0f} MiB "
              f"(samples: {', '.join(f'{x:.0f}' for x in rss[:: max(1, len(rss) // 12)])})")
    print(f"INTERNAL/UNKNOWN: {internal}; HTTP 5xx other than 503 with Retry-After: {server_errors}; "
          f"not acceptable: {len(report.failures)}; server error records: {len(errors)}; crash dumps: "
          f"{len(crash)}; alive at the end: {alive}; healthy at the end: {health} ({health_text}); "
          f"exit code after SIGTERM: {code}")
    for line in report.failures[:30]:
        print("  ", line)
    for rec in errors[:5]:
        print("  ", rec.get("msg"), str(rec.get("exc", ""))[-400:])
    if dump:
        print(dump[-8000:])
    return 0 if not report.failures and not errors and alive and health and code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
