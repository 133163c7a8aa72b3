"""A long hostile run against a live ``twin serve`` with every port open (issue 15).

    python benchmarks/fuzz_server.py                         # 100,000 requests, seed 1
    python benchmarks/fuzz_server.py --requests 20000 --seed 7

Starts ``twin serve`` on 127.0.0.1 with the main port, the Health-only port, the dedicated
OTLP/gRPC port, OTLP/HTTP and Prometheus ``/metrics`` (token auth on), sends the seeded
cases of ``tests/server/fuzzcases.py`` spread over every method of every port, and prints
what came back per method and port, anything not acceptable (INTERNAL, UNKNOWN, a 5xx, a
dropped connection), the server's error log records, and its RSS over the run (start,
every 10,000 requests, end). Exits 1 if anything was not acceptable or the server died.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.server import fuzzcases as fz  # noqa: E402
from tests.server.conftest import ServerProcess  # noqa: E402

TOKEN = "fuzz-benchmark-token"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="twin-fuzz-") as tmp:
        directory = Path(tmp)
        srv = ServerProcess(directory, "--config", str(fz.all_ports_config(directory)), env={fz.TOKEN_ENV: TOKEN})
        listeners = fz.listeners_of(srv.wait_log(lambda r: r.get("msg") == "serving"))
        print(f"server pid {srv.proc.pid}, ports {listeners}")
        t0 = time.perf_counter()

        def progress(done: int) -> None:
            if done % 10_000 == 0:
                print(f"  {done:,} sent, {time.perf_counter() - t0:.0f} s, RSS {fz.rss_mib(srv.proc.pid):.0f} MiB",
                      flush=True)

        try:
            report = fz.run(listeners, TOKEN, args.requests, args.seed, pid=srv.proc.pid, progress=progress)
        finally:
            alive = srv.proc.poll() is None
            errors = [r for r in srv.records if str(r.get("level", "")).lower() in ("error", "critical")]
            code = srv.stop()
        wall = time.perf_counter() - t0
    print(f"{report.sent:,} requests in {wall:.0f} s ({report.sent / wall:,.0f}/s), seed {args.seed}")
    for key, n in sorted(report.outcomes.items()):
        print(f"  {key}: {n:,}")
    codes: dict[str, int] = {}
    for key, n in report.outcomes.items():
        outcome = key.rsplit(" -> ", 1)[1]
        codes[outcome] = codes.get(outcome, 0) + n
    print("by outcome:", ", ".join(f"{c} {n:,}" for c, n in sorted(codes.items())))
    rss = report.rss_mib
    print(f"server RSS: start {rss[0]:.0f} MiB, max {max(rss):.0f} MiB, end {rss[-1]:.0f} MiB "
          f"(samples every 1,000: {', '.join(f'{x:.0f}' for x in rss[:: max(1, len(rss) // 10)])})")
    print(f"not acceptable: {len(report.failures)}; server error records: {len(errors)}; "
          f"alive at the end: {alive}; exit code after SIGTERM: {code}")
    for line in report.failures[:30]:
        print("  ", line)
    for rec in errors[:5]:
        print("  ", rec.get("msg"), str(rec.get("exc", ""))[-400:])
    return 0 if not report.failures and not errors and alive and code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
