"""``twin sweep SPEC.yaml``: run a scenario sweep inline or on Ray, with progress and a summary."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from rich.console import Console

from twin.commands.cmd_render import console, print_json, table
from twin.core.errors import SpecError
from twin.core.units import plain
from twin.engine import Engine
from twin.sweep.job import EngineSettings
from twin.sweep.reduce import SAME_AS_DESCRIPTOR, SweepResult, nrows, row_dict
from twin.sweep.runner import EXECUTORS, Finished, Progress, events, make_executor, sweep_job
from twin.sweep.sweep_spec import DEFAULT_MAX_POINTS, load_spec

EXIT_CANCELLED = 130


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sweep`` verb."""
    p = sub.add_parser("sweep", help="run a sweep of scenarios (grid, zip or random) inline or on Ray",
                       description="Evaluate every point of a sweep spec; infeasible points are counted by reason. "
                                   "Prints a summary and the best points; --out writes every row.")
    p.add_argument("spec", help="sweep spec (YAML or JSON)")
    p.add_argument("--executor", choices=EXECUTORS, default="auto",
                   help="inline (in-process), ray, or auto (Ray for big sweeps or when an address is given)")
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else start one)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray started for this sweep")
    p.add_argument("--out", default=None, help="write every row to FILE (.parquet, .csv or .jsonl)")
    p.add_argument("--top", type=int, default=None, help="how many best points to keep (default: the spec's)")
    p.add_argument("--batch-points", type=int, default=None, help="points per batch (default: ~4 batches per worker)")
    p.add_argument("--max-points", type=int, default=DEFAULT_MAX_POINTS, help="refuse sweeps larger than this")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the sweep and print its summary."""
    from twin.sweep.allocator import retain_freed_memory
    from twin.sweep.output import _format, write_rows

    retain_freed_memory()  # this process runs the sweep: keep its batches' memory (TWIN_SWEEP_RETAIN_MEMORY=0: not)
    settings = EngineSettings(autoload=False if args.no_plugins else None)
    engine = settings.build()
    spec = load_spec(args.spec)
    if args.out:
        out_path = Path(args.out)
        _format(out_path)  # a bad suffix fails before any work, and so does a missing directory
        parent = out_path.parent if str(out_path.parent) else Path(".")
        if not parent.is_dir():
            raise SpecError("--out", f"directory {parent} does not exist (create it first)")
        spec = dataclasses.replace(spec, keep_rows=True)
    if args.top is not None:
        spec = dataclasses.replace(spec, objective=dataclasses.replace(spec.objective, top=max(1, args.top)))
    job = sweep_job(spec, engine, settings, args.max_points)
    result = drive(job, engine, args)
    if args.out and result.rows is not None:
        n = write_rows(result.rows, args.out)
        print(f"wrote {n:,} rows to {args.out}", file=sys.stderr)
    if args.json:
        print_json(result.to_dict())
    else:
        render_summary(result)
    return EXIT_CANCELLED if result.cancelled else 0


def drive(job: Any, engine: Engine, args: argparse.Namespace) -> SweepResult:
    """Run ``job`` with a progress bar; Ctrl-C cancels and returns the partial result."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    executor = make_executor(args.executor, engine=engine, ray_address=args.ray_address,
                             num_cpus=getattr(args, "num_cpus", None), total=job.total)
    cancel = threading.Event()
    result: SweepResult | None = None
    show = not args.no_progress and sys.stderr.isatty()
    bar = Bar(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
              TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("{task.fields[best]}"),
              transient=True, disable=not show, console=Console(stderr=True))
    # Ctrl-C cancels the sweep (Ray tasks included) and still prints the partial result.
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set()) \
        if threading.current_thread() is threading.main_thread() else None
    try:
        with bar:
            task = bar.add_task(f"{job.name} [{executor.name} x{executor.workers}]", total=job.total, rate="",
                                best="")
            for ev in events(job, executor, cancel=cancel, batch_points=getattr(args, "batch_points", None)):
                if isinstance(ev, Progress):
                    best = ev.best[job.metric] if ev.best else None
                    bar.update(task, completed=ev.done, rate=f"{ev.points_per_s:,.0f} pts/s",
                               best=f"best {job.metric}={best:.4g}" if best is not None else "")
                elif isinstance(ev, Finished):
                    result = ev.result
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        executor.close()
    assert result is not None
    return result


def render_summary(result: SweepResult) -> None:
    """Human-readable tables: counts, reasons, best points."""
    out = console()
    rate = result.done / result.seconds if result.seconds > 0 else 0.0
    head = table(f"Sweep {result.name}" + (" (CANCELLED)" if result.cancelled else ""), "", "value")
    head.add_row("points", f"{result.done:,} of {result.total:,}")
    head.add_row("feasible", f"{result.feasible:,}")
    head.add_row("infeasible", f"{result.infeasible:,}")
    head.add_row("time", f"{result.seconds:.2f} s ({rate:,.0f} points/s, {result.executor} x{result.workers})")
    if result.retried:
        head.add_row("retried batches", str(result.retried))
    out.print(head)
    if result.counts:
        t = table("Infeasible points by reason", "reason", "points", "share")
        for reason, n in sorted(result.counts.items(), key=lambda kv: -kv[1]):
            t.add_row(reason, f"{n:,}", f"{100 * n / max(1, result.done):.1f}%")
        out.print(t)
    if nrows(result.top):
        out.print(top_table(result.top, result.metric, f"Best {nrows(result.top)} by {result.metric} ({result.order})"))
    else:
        out.print("no feasible point")


# Headers that wrap at spaces and read as units (the rows keep their column names: --out, --json).
HEADERS = {"step_time_s": "step s", "tokens_per_s_per_gpu": "tokens/s per GPU", "tokens_per_s": "tokens/s",
           "mfu": "MFU", "memory_gib": "GiB per GPU", "num_gpus": "GPUs", "power_kw": "kW"}


def top_table(rows: Any, metric: str, title: str) -> Any:
    """A table of ranked rows: the metric, the plan and the main throughput figures."""
    records = [row_dict(rows, i) for i in range(nrows(rows))]
    first = records[0]
    plan_cols = [c for c in ("model", "system", "num_gpus", "fabric", "tp", "pp", "vp", "dp", "cp", "ep", "etp", "mbs",
                             "gbs", "recompute", "sharding") if c in first]
    plan_cols += [c for c in first if "." in c and c not in SAME_AS_DESCRIPTOR]  # other axis columns
    # Columns equal in every row go to the caption, so the table fits a terminal.
    same = [c for c in plan_cols if len({str(r.get(c)) for r in records}) == 1]
    cols = ["#", metric, *[c for c in plan_cols if c not in same]]
    for c in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib"):
        if c != metric and c in first:
            cols.append(c)
    t = table(title, *(HEADERS.get(c, c) for c in cols), compact=True)
    if same:
        t.caption = "all: " + ", ".join(f"{c}={_fmt(first.get(c))}" for c in same)
        t.caption_justify = "left"
    for i, r in enumerate(records):
        t.add_row(str(i + 1), *[_fmt(r.get(c), c) for c in cols[1:]])
    return t


def _fmt(v: Any, column: str = "") -> str:
    if isinstance(v, float):
        if column.startswith("mfu") and math.isfinite(v):
            return f"{100 * v:.1f}%"  # a share of peak, read as a percentage
        return plain(v, 4)
    if isinstance(v, str) and v.startswith(("{", "[")):
        try:
            return json.dumps(json.loads(v), separators=(",", ":"))
        except json.JSONDecodeError:
            return v
    return "" if v is None else str(v)
