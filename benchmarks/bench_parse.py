"""Mapping -> Scenario: ``Engine.scenario(mapping)`` calls per second (issue 9: >= 100,000/s).

    python benchmarks/bench_parse.py [--repeats 5] [--points 10000]

Two workloads, one process, one core (pinned where the OS allows), each the minimum time
of ``--repeats`` passes:

(a) presets, distinct plans: mappings that name a system and a model preset, every one
    with a plan mapping of its own (20,000 valid plans over 3 systems x 3 models, more
    than the plan interner keeps, so every plan is built: the sweep/server case);
(b) random: the seeded points of ``validation/equivalence.py`` (every preset model and
    system, fabric/optics/CXL overrides, every plan field; ~45% are rejected by a rule
    and raise, which is timed too).

Each runs with the section caches on, then off (``schema.set_interning(False)``: every
section is built afresh by the one loader, ``schema.load``, and every preset resolved afresh,
as before issue 9), and for (b) also cold (caches cleared before each pass). Run on code
without the switch (e.g. the commit before issue 9, via PYTHONPATH) it times that code.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

from equivalence import points  # noqa: E402

from twin.core import schema  # noqa: E402
from twin.core.errors import TwinError  # noqa: E402
from twin.engine import Engine  # noqa: E402

SYSTEMS = {"DGX-H100": 1024, "DGX-A100": 512, "GB200-NVL72": 576}
MODELS = ["llama3.1-8b", "llama3.1-70b", "llama3.1-405b"]


def preset_mappings(engine: Engine, n: int) -> list[dict[str, Any]]:
    """``n`` valid scenario mappings naming presets, each with a distinct plan mapping."""
    out: list[dict[str, Any]] = []
    combos = itertools.product(SYSTEMS.items(), MODELS, (1, 2, 4, 8), (1, 2, 4, 8), (1, 2),
                               ("none", "selective", "full"), ("bf16", "fp8"))
    for (system, gpus), model, tp, pp, mbs, recompute, precision in itertools.cycle(combos):
        if len(out) >= n:
            break
        dp = gpus // (tp * pp)
        plan = {"tp": tp, "pp": pp, "mbs": mbs, "gbs": mbs * dp * (1 + len(out) // 200),
                "recompute": recompute, "precision": precision}
        data = {"cluster": {"system": system, "num_gpus": gpus}, "model": model, "plan": plan}
        try:
            engine.scenario(data)
        except TwinError:
            continue
        out.append(data)
    return out


def one_pass(engine: Engine, mappings: list[dict[str, Any]]) -> float:
    """Seconds for ``engine.scenario`` on every mapping (errors included)."""
    scenario = engine.scenario
    t0 = time.perf_counter()
    for m in mappings:
        try:  # noqa: SIM105 - contextlib.suppress would add a context manager to every timed call
            scenario(m)
        except TwinError:
            pass
    return time.perf_counter() - t0


def rate(engine: Engine, mappings: list[dict[str, Any]], repeats: int,
         before: Callable[[], None] | None = None) -> float:
    """Calls per second: the fastest of ``repeats`` passes (``before`` runs ahead of each)."""
    best = float("inf")
    for _ in range(repeats):
        if before is not None:
            before()
        best = min(best, one_pass(engine, mappings))
    return len(mappings) / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--plans", type=int, default=20_000)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    engine = Engine(autoload=False)
    presets = preset_mappings(engine, args.plans)
    random_pts = points(args.points)
    switch = getattr(schema, "set_interning", None)
    print(f"Engine.scenario(mapping), calls/s, min of {args.repeats} passes, one core "
          f"({'section caches available' if switch else 'code without section caches'})")
    print(f"  (a) presets, {len(presets):,} distinct plans:")
    if switch:
        print(f"      caches on : {rate(engine, presets, args.repeats):>10,.0f}")
        switch(False)
        print(f"      caches off: {rate(engine, presets, args.repeats):>10,.0f}")
        switch(True)
    else:
        print(f"      as is     : {rate(engine, presets, args.repeats):>10,.0f}")
    print(f"  (b) random points, {len(random_pts):,} (validation/equivalence.py, seed 20261201):")
    if switch:
        print(f"      caches on, warm: {rate(engine, random_pts, args.repeats):>10,.0f}")
        cold = rate(engine, random_pts, args.repeats, before=schema.clear_caches)
        print(f"      caches on, cold: {cold:>10,.0f}")
        switch(False)
        print(f"      caches off     : {rate(engine, random_pts, args.repeats):>10,.0f}")
        switch(True)
    else:
        print(f"      as is          : {rate(engine, random_pts, args.repeats):>10,.0f}")


if __name__ == "__main__":
    main()
