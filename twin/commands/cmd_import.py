"""``twin import trace FILE``: a real run's trace (PyTorch profiler Chrome-trace JSON, or a Chakra
trace) read in: per-kernel classes and times, communication calls and sizes; with ``--scenario``,
where the measured step differs from the twin's and the calibration that would close it.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import yaml

from twin.commands.cmd_render import console, print_json, table
from twin.core.errors import SpecError
from twin.engine import Engine
from twin.traces.chakra_import import measured_from_chakra
from twin.traces.kineto import MeasuredStep, measured_from_kineto
from twin.traces.trace_compare import Comparison, compare


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``import`` verb."""
    p = sub.add_parser("import", help="read a real run's trace (PyTorch profiler JSON or Chakra) and compare")
    p.add_argument("kind", choices=["trace"], help="what to import: trace")
    p.add_argument("file", help="a torch.profiler Chrome-trace JSON (.json, .json.gz) or a Chakra trace (.et)")
    p.add_argument("--scenario", default=None, help="the run as a scenario: compare the measured step with it")
    p.add_argument("--calibration-out", default=None,
                   help="write the calibration the trace supports (a scenario's calibration: block) to this YAML")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    p.set_defaults(func=run)


def is_json(path: Path) -> bool:
    """Whether ``path`` holds JSON (gzipped or not): its first non-blank byte is { or [."""
    try:
        with path.open("rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == b"\x1f\x8b":
                head = gzip.GzipFile(fileobj=f).read(64)
            else:
                head = f.read(64)
    except (OSError, EOFError) as err:
        raise SpecError(str(path), f"cannot read the trace: {getattr(err, 'strerror', None) or err}") from None
    return head.lstrip()[:1] in (b"{", b"[")


def measure(path: Path) -> MeasuredStep:
    """The measured step of a trace file of either format."""
    if is_json(path):
        return measured_from_kineto(path)
    return measured_from_chakra(path)


def run(args: argparse.Namespace) -> int:
    """Read the trace, print its classes; with a scenario, the comparison and the calibration."""
    path = Path(args.file)
    measured = measure(path)
    cmp: Comparison | None = None
    if args.scenario:
        engine = Engine(autoload=False if args.no_plugins else None)
        scn = engine.scenario(args.scenario)
        cal = scn.calibration
        current = {"compute_efficiency": cal.compute_efficiency, "scale_up_bandwidth": cal.scale_up_bandwidth,
                   "scale_out_bandwidth": cal.scale_out_bandwidth}
        cmp = compare(measured, engine.step_anatomy(scn), current, scn.cluster.scale_up.domain_gpus)
        if args.calibration_out and cmp.calibration:
            Path(args.calibration_out).write_text(yaml.safe_dump({"calibration": cmp.calibration}, sort_keys=False))
    elif args.calibration_out:
        raise SpecError("--calibration-out", "needs --scenario (the calibration is the twin's against the trace)")
    if args.json:
        print_json({"measured": {"source": measured.source, "kind": measured.kind, "steps": measured.steps,
                                 "step_s": measured.step_s, "world_size": measured.world_size,
                                 "classes": {k: {"count": v.count, "seconds": v.total_s}
                                             for k, v in measured.classes.items()},
                                 "communication": {k: {"count": v.count, "seconds": v.total_s,
                                                       "bytes": measured.comm_bytes.get(k, 0.0)}
                                                   for k, v in measured.comm.items()},
                                 "notes": measured.notes},
                    "comparison": cmp.to_dict() if cmp is not None else None})
        return 0
    _print(measured, cmp)
    return 0


def _print(measured: MeasuredStep, cmp: Comparison | None) -> None:
    out = console()
    out.print(f"{measured.source}: {measured.kind}, {measured.steps} step(s), {measured.step_s * 1e3:.3f} ms a step")
    t = table("Measured per step, by class", "class", "count", "ms", "share")
    total = sum(v.total_s for v in measured.classes.values()) or 1.0
    for k, v in sorted(measured.classes.items(), key=lambda kv: -kv[1].total_s):
        t.add_row(k, str(v.count), f"{v.total_s * 1e3:.3f}", f"{v.total_s / total:.1%}")
    out.print(t)
    if measured.comm:
        c = table("Communication per step", "op@group", "calls", "ms", "bytes")
        for k, v in sorted(measured.comm.items()):
            c.add_row(k, str(v.count), f"{v.total_s * 1e3:.3f}", f"{measured.comm_bytes.get(k, 0.0):,.0f}")
        out.print(c)
    if cmp is not None:
        r = table(f"Measured against the twin ({cmp.scenario}), per step", "class", "measured ms", "twin ms",
                  "measured / twin")
        for row in cmp.rows:
            r.add_row(row.name, f"{row.measured_s * 1e3:.3f}", f"{row.twin_s * 1e3:.3f}",
                      "-" if row.ratio is None else f"{row.ratio:.2f}x")
        out.print(r)
        if cmp.calibration:
            out.print("calibration it supports: " + ", ".join(f"{k}: {v:.3g}" if isinstance(v, float) else
                                                              f"{k}: {v}" for k, v in cmp.calibration.items()))
    for note in (cmp.notes if cmp is not None else measured.notes):
        out.print(f"note: {note}")
