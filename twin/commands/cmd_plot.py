"""``twin plot FILE``: a PNG of a prediction or a sweep (breakdown, scaling or Pareto front)."""

from __future__ import annotations

import argparse

from twin.sweep.plot import KINDS, render


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``plot`` verb."""
    p = sub.add_parser("plot", help="render a prediction or a sweep result as a PNG",
                       description="FILE is sweep rows (.parquet/.csv/.jsonl from twin sweep --out), a JSON result "
                                   "(twin predict/sweep/plan --json) or a scenario (.yaml, predicted first). "
                                   "Kinds: breakdown (stacked step-time bars), scaling (throughput vs GPUs), "
                                   "pareto (throughput vs power).")
    p.add_argument("file", help="input file")
    p.add_argument("--kind", choices=KINDS, default="auto", help="chart kind (default: by input)")
    p.add_argument("--out", default=None, help="PNG path (default: next to the input)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Render and print where the PNG went."""
    path = render(args.file, args.kind, args.out)
    print(path)
    return 0
