"""``twin demo``: a simulated cluster pushes real OTLP to a twin; watch it see a link degrade and fail.

Starts the telemetry server itself (a fresh state directory) unless ``--endpoint`` names a
running twin. Two nodes of dcgm-exporter, node_exporter InfiniBand, mlx5 RoCE and
transceiver metrics, pushed with the OpenTelemetry SDK's OTLPMetricExporter, plus a
training job's step time. Then a port degrades (trains down to half rate, symbol
errors, low receive power) and later fails; after each phase the demo prints what the
twin sees and its prediction "as designed" vs "as the cluster is now".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from twin.commands.cmd_render import console, table
from twin.core.extras import needs_extra
from twin.core.units import human, signal_unit

DEFAULT_SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "gpt3-175b-dgx-h100-ib.yaml"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` verb."""
    p = sub.add_parser("demo", help="simulate exporters pushing OTLP telemetry to a twin (link degrades, then fails)",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("--endpoint", help="a running twin (host:port); default: start one")
    p.add_argument("--scenario", default=str(DEFAULT_SCENARIO), help="scenario the simulated job runs")
    p.add_argument("--pushes", type=int, default=3, help="pushes per phase (default 3)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between pushes (default 0.5)")
    p.add_argument("--stay", action="store_true",
                   help="after the phases, keep the twin and its web view running (Ctrl-C ends)")
    p.set_defaults(func=run)


def _start_server(state_dir: str) -> tuple[subprocess.Popen, str, str]:
    """``twin serve`` on a free loopback port (the real service, every capability on, the web view
    on a free port too); returns it, its gRPC address and the web view's URL ("" when it has none).
    """
    from twin.server.process import start_serve

    config = Path(state_dir) / "serve.yaml"
    config.write_text(json.dumps({"host": "127.0.0.1", "port": 0, "state_dir": str(Path(state_dir) / "state"),
                                  "log_format": "json", "telemetry": {"calibrate_interval_s": 0},
                                  "web": {"address": "127.0.0.1:0"}}))
    proc, serving = start_serve(["--config", str(config)])
    web = (serving.get("listeners") or {}).get("web")
    return proc, str(serving["address"]), f"http://{web}/" if web else ""


def run(args: argparse.Namespace) -> int:
    """Run the three phases and print what the twin sees."""
    with needs_extra("server", "twin demo"):
        import grpc

        from twin.rpc.v1 import telemetry_pb2 as pb
        from twin.rpc.v1 import telemetry_pb2_grpc as pbg
    with needs_extra("telemetry", "twin demo (its simulated exporters)"):
        from twin.telemetry.simulate import SimulatedCluster

    out = console()
    tmp = tempfile.TemporaryDirectory(prefix="twin-demo-")
    proc = None
    endpoint = args.endpoint
    # SIGTERM (a service manager, `kill`) ends the demo as Ctrl-C does: through the finally below, which
    # stops the twin it started (Python's default SIGTERM ends the process at once and orphaned it).
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if endpoint is None:
            proc, endpoint, url = _start_server(tmp.name)
            out.print(f"started a twin on {endpoint} (state in {tmp.name})")
            if url:
                out.print(f"web view: {url}  (Fabric, Step, Failures, Sweeps; live as the phases run)")
        api = pbg.TelemetryServiceStub(grpc.insecure_channel(endpoint))
        # The simulated job runs on the simulator's two nodes: its placement (issue 34).
        designed = api.RegisterJob(pb.RegisterJobRequest(job="demo-job",
                                                         scenario_yaml=Path(args.scenario).read_text(),
                                                         placement=pb.JobPlacement(hosts=["node-1", "node-2"])),
                                   timeout=60).predicted_step_time_s
        out.print(f"job 'demo-job' runs {Path(args.scenario).name}: designed step {designed:.3f} s")
        sim = SimulatedCluster(endpoint, nodes=2, gpus_per_node=8, job="demo-job", step_time_s=designed * 1.08)
        try:
            phases = [("healthy cluster (the job runs 8% slower than designed)", None),
                      ("node-1 port mlx5_3 degrades: trains down to 2x width, symbol errors, low rx power",
                       (0, 3, "degraded")),
                      ("node-2 port mlx5_5 fails", (1, 5, "down"))]
            for title, change in phases:
                if change:
                    sim.set_port(*change)
                    sim.step_time_s *= 1.15 if change[2] == "degraded" else 1.05
                for _ in range(args.pushes):
                    time.sleep(args.interval)
                    sim.push()
                if change is None:
                    cal = api.Calibrate(pb.CalibrateRequest(), timeout=60)
                    for a in cal.adjustments:
                        out.print(f"  calibration: {a.factor} {a.old_value:.3f} -> {a.new_value:.3f}")
                _show(out, pb, api, title)
            if args.stay and proc is not None:
                out.print("the twin keeps running; Ctrl-C ends it")
                with contextlib.suppress(KeyboardInterrupt):
                    proc.wait()
        finally:
            sim.shutdown()
        return 0
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM during the phases
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # stuck: it must not outlive the demo
                proc.kill()
                proc.wait(timeout=10)
        tmp.cleanup()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _show(out, pb, api, title: str) -> None:  # noqa: ANN001 - generated proto modules
    st = api.GetLiveState(pb.GetLiveStateRequest(max_events=10), timeout=60)
    components = list(st.components)
    token = st.next_page_token
    while token:  # every page of components
        more = api.GetLiveState(pb.GetLiveStateRequest(max_events=1, page_token=token), timeout=60)
        components += more.components
        token = more.next_page_token
    counts: dict[str, dict[str, int]] = {}
    for c in components:
        per = counts.setdefault(c.kind, {})
        name = pb.ComponentState.Name(c.state).removeprefix("COMPONENT_STATE_").lower()
        per[name] = per.get(name, 0) + 1
    out.print(f"\n[bold]{title}[/bold]")
    t = table("", "kind", "up", "degraded", "down")
    for kind, per in sorted(counts.items()):
        t.add_row(kind, str(per.get("up", 0)), str(per.get("degraded", 0)), str(per.get("down", 0)))
    out.print(t)
    for c in st.components:
        if c.state in (pb.COMPONENT_STATE_DEGRADED, pb.COMPONENT_STATE_DOWN) and c.kind != "roce_port":
            state = pb.ComponentState.Name(c.state).removeprefix("COMPONENT_STATE_")
            out.print(f"  {state:8} {c.id} (capacity {100 * c.capacity_fraction:.0f}%)")
            for e in c.evidence:
                if e.severity != "info":
                    out.print(f"           {e.signal}={human(e.value, signal_unit(e.signal))} {e.rule}: {e.why}")
    p = api.PredictLive(pb.PredictLiveRequest(job="demo-job"), timeout=60)
    div = {j.job: j for j in api.GetDivergence(pb.GetDivergenceRequest(), timeout=60).jobs}.get("demo-job")
    out.print(f"  predicted step: as designed {p.designed_step_time_s:.3f} s, as the cluster is now "
              f"{p.now_step_time_s:.3f} s ({100 * p.slowdown:+.1f}%)")
    if div is not None and div.observations:
        out.print(f"  observed step {div.observed_step_time_s:.3f} s: divergence from 'now' "
                  f"{100 * div.divergence_now:+.1f}%, from 'designed' {100 * div.divergence_designed:+.1f}%")
    for f in p.faults:
        if f.consequence != "none":
            out.print(f"  [red]{f.consequence.upper()}[/red] {f.component} ({f.evidence}): {f.why}")
    if p.calibration_skipped:
        out.print(f"  calibration skips this job: {p.calibration_skipped}")
