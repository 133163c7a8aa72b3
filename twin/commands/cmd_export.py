"""``twin export chakra SCENARIO DIR``: the scenario's training step as MLCommons Chakra execution
traces (one per pipeline rank), read back and checked against the estimate (``twin.traces``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from twin.commands.cmd_render import console, print_json, table
from twin.core.units import human
from twin.engine import Engine
from twin.traces.chakra_export import export
from twin.traces.chakra_import import load_groups, replay, trace_totals
from twin.traces.chakra_schema import read_trace


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``export`` verb."""
    p = sub.add_parser("export", help="write a scenario's step as execution traces (Chakra, for ASTRA-sim)")
    p.add_argument("format", choices=["chakra"], help="the trace format: chakra (MLCommons Chakra ET, protobuf)")
    p.add_argument("scenario", help="scenario YAML/JSON file")
    p.add_argument("out", help="directory to write the traces, comm_groups.json and manifest.json into")
    p.add_argument("--all-ranks", action="store_true",
                   help="also write ranks/NAME.RANK.et for every GPU, as ASTRA-sim loads them (at most 1,024 GPUs)")
    p.add_argument("--name", default=None, help="file name prefix (default: the scenario's name)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-plugins", action="store_true", help="do not autoload third-party plugins")
    p.set_defaults(func=run)


def check(exported: Any) -> dict[str, Any]:
    """The bottleneck class's trace read back (its schema), its totals against the estimate."""
    a = exported.anatomy
    groups = load_groups(exported.out / "comm_groups.json")
    b = a.bottleneck
    path = next(f for f in exported.files if f.name.endswith(f".stage{b.rank}.et"))
    got = trace_totals(read_trace(path), groups)
    est = a.estimate
    rows = [("compute + recompute s", got.compute_s, est["compute_s"] + est["recompute_s"]),
            ("optimizer s", got.optimizer_s, est["optimizer_s"])]
    for dim in sorted(est["comm_issued_s"]):
        rows.append((f"{dim} issued s", got.comm_s.get(dim, 0.0), est["comm_issued_s"][dim]))
        rows.append((f"{dim} bytes sent", got.bytes_sent.get(dim, 0.0), est["bytes_per_step"].get(dim, 0.0)))
    replayed = max(replay([read_trace(f) for f in exported.files]).values())
    notes = []
    if a.pp > 1 and b.rank in (0, a.pp - 1):
        notes.append(f"the bottleneck is an end stage (pipeline rank {b.rank}): it sends activations or gradients "
                     "one way only, where the estimate's pipeline term counts both (2 x chunks x micro-batches)")
    return {"file": path.name, "nodes": got.nodes, "notes": notes,
            "replay": {"step_s": replayed, "estimate_s": est["step_time_s"],
                       "diff": (replayed - est["step_time_s"]) / est["step_time_s"]},
            "totals": [{"what": w, "trace": t, "estimate": e, "diff": (t - e) / e if e else 0.0}
                       for w, t, e in rows]}


def run(args: argparse.Namespace) -> int:
    """Export the traces, read the bottleneck's back and print its totals against the estimate."""
    engine = Engine(autoload=False if args.no_plugins else None)
    exported = export(engine.step_anatomy(args.scenario), Path(args.out), all_ranks=args.all_ranks, name=args.name)
    a = exported.anatomy
    checked = check(exported)
    if args.json:
        print_json({"out": str(exported.out), "files": [f.name for f in exported.files],
                    "manifest": exported.manifest.name, "schedule": a.schedule, "microbatches": a.microbatches,
                    "check": checked, "notes": [*a.notes, *checked["notes"]]})
        return 0
    out = console()
    out.print(f"{a.scenario}: {len(exported.files)} Chakra traces (one per pipeline rank; {a.schedule}, "
              f"{a.microbatches} micro-batches, {a.vp} chunks per rank) in {exported.out}")
    t = table(f"Read back: {checked['file']} (the bottleneck stage) against the estimate", "per step", "trace",
              "estimate", "diff")
    for row in checked["totals"]:
        unit = "B" if row["what"].endswith("bytes sent") else "s"  # every other row is in seconds
        t.add_row(row["what"].removesuffix(" s"), human(row["trace"], unit, 6), human(row["estimate"], unit, 6),
                  f"{row['diff']:+.3%}")
    out.print(t)
    out.print("nodes: " + ", ".join(f"{k} {v}" for k, v in sorted(checked["nodes"].items())))
    rep = checked["replay"]
    out.print(f"replayed step (the class traces together, dependencies and the twin's durations only): "
              f"{rep['step_s']:.4f} s against the estimate's {rep['estimate_s']:.4f} s ({rep['diff']:+.1%})")
    for note in (*a.notes, *checked["notes"]):
        out.print(f"note: {note}")
    return 0
