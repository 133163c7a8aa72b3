"""Evaluations per second through the public API, one core: one by one and as a batch.

    python benchmarks/bench_evaluate.py [--scenarios 20000] [--repeats 3]
    python benchmarks/bench_evaluate.py --base OTHER_CHECKOUT [--scenarios 20000] [--rounds 3]

Each figure is over *distinct* scenarios (no scenario is evaluated twice in a pass):

- ``family``: scenario mappings as a user or a service sends them (preset names and a
  plan), drawn over 6 models x 5 systems x 6 cluster sizes x tp, pp, vp, mbs, gbs,
  recomputation, sharding and precision, keeping the valid ones (checked by another
  engine, so the timed one starts cold);
- ``random``: validation/equivalence.py's random scenarios (every preset model and
  system, fabrics, optics, CXL pools, every plan field: the least cache-friendly case).

For each: ``Engine.evaluate(mapping)`` one by one (parse, validate, evaluate, the full
``Estimate``), the first pass on a fresh engine (cold: every cache empty) and the best of
``--repeats`` later passes (warm: value caches full; each scenario is still looked up by
the value of its mapping, validated and evaluated, no result is reused); and ``Engine.evaluate_many(mappings)``,
the batch API, the same way. ``fresh``: an engine warmed on one family set, then timed on
another family set of never-seen scenarios (value caches shared only where the two sets
share presets, spans or plans: what a long-running service sees). One process pinned to
one core; the machine may be shared, so compare figures of one run. Each timed pass starts
after a full garbage collection: a pass that happens to run the collector's oldest
generation would otherwise also pay for freeing the earlier passes' engines.

``--base OTHER_CHECKOUT`` compares this checkout with another one (e.g. a worktree of the
commit before a change: ``git worktree add /tmp/base COMMIT``) on the same ``fresh``
scenarios: each side runs in its own process (``benchmarks/evaluate_child.py``, pinned to
one core) with ``sys.path`` pointing at that checkout's ``twin`` and ``plugins`` (imported as
``twin_plugins``), the sides alternating for ``--rounds`` rounds; printed: each round's
evaluations/s one by one and as a batch, the median of each side and the ratio. The other
checkout needs its generated protobuf modules only if its engine imports them.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twin.core.errors import TwinError
from twin.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import equivalence
from evaluate_child import batch, collector_cost, fresh_rate, one_by_one, pin_one_core

MODELS = ["llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "gpt3-175b", "mixtral-8x7b", "qwen3-235b-a22b"]
SYSTEMS = ["DGX-H100", "DGX-A100", "DGX-B200", "GB200-NVL72", "Meta-RoCE-H100"]
SIZES = [64, 256, 512, 1024, 2048, 4096]


def family(n: int, seed: int = 1) -> list[dict[str, Any]]:
    """``n`` distinct valid mappings of the family (see the module docstring)."""
    rng = random.Random(seed)
    check = Engine(autoload=False)
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    grid = list(itertools.product(MODELS, SYSTEMS, SIZES))
    while len(out) < n:
        model, system, gpus = rng.choice(grid)
        plan: dict[str, Any] = {"tp": rng.choice([1, 2, 4, 8]), "pp": rng.choice([1, 2, 4, 8]),
                                "mbs": rng.choice([1, 2]), "gbs": rng.choice([256, 512, 1024, 2048]),
                                "recompute": rng.choice(["none", "selective", "full"]),
                                "optimizer_sharding": rng.choice(["distributed_optimizer", "fsdp", "zero1"]),
                                "precision": rng.choice(["bf16", "fp8"])}
        if plan["pp"] > 1:
            plan["vp"] = rng.choice([1, 2, 4])
        if model in ("mixtral-8x7b", "qwen3-235b-a22b"):
            plan["ep"] = rng.choice([1, 8])
        m = {"cluster": {"system": system, "num_gpus": gpus}, "model": model, "plan": plan}
        key = repr(m)
        if key in seen:
            continue
        seen.add(key)
        try:
            check.evaluate(m)
        except TwinError:
            continue
        out.append(m)
    return out


def never_seen(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(a warm-up set of ``n`` family scenarios, a second family set less any scenario of the
    first): the never-seen scenarios the ``fresh`` figures and ``--base`` time."""
    warm = family(n)
    seen = {repr(m) for m in warm}
    return warm, [m for m in family(n, seed=2) if repr(m) not in seen]


def valid(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points that evaluate (checked by another engine)."""
    check = Engine(autoload=False)
    out = []
    for p in points:
        try:
            check.evaluate(p)
        except (TwinError, ArithmeticError):
            continue
        out.append(p)
    return out


def rates(run: Callable[[Engine, list[dict[str, Any]]], int], maps: list[dict[str, Any]],
          repeats: int) -> tuple[float, float]:
    """(cold evaluations/s on a fresh engine, best warm evaluations/s)."""
    engine = Engine(autoload=False)
    gc.collect()  # see evaluate_child.fresh_rate
    t0 = time.perf_counter()
    refused = run(engine, maps)
    cold = len(maps) / (time.perf_counter() - t0)
    best = 0.0
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        refused += run(engine, maps)
        best = max(best, len(maps) / (time.perf_counter() - t0))
    assert refused == 0, f"{refused} evaluations refused: every scenario here was checked valid"
    return cold, best


def checkout_path(checkout: Path, into: Path) -> Path:
    """A directory to put first on ``sys.path`` so that ``twin`` and ``twin_plugins`` import from
    ``checkout`` (its ``twin/`` and ``plugins/``, as the installed package maps them)."""
    into.mkdir(parents=True, exist_ok=True)
    for name, sub in (("twin", "twin"), ("twin_plugins", "plugins")):
        if not (checkout / sub / "__init__.py").is_file():
            raise SystemExit(f"--base: {checkout} is not a checkout of the twin (no {sub}/__init__.py)")
        (into / name).symlink_to((checkout / sub).resolve(), target_is_directory=True)
    return into


def child_rates(path: Path, scenarios: Path) -> dict[str, float]:
    """Run ``evaluate_child.py`` with ``path`` first on ``sys.path``; its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(path)}
    child = Path(__file__).resolve().parent / "evaluate_child.py"
    # cwd: a directory without a twin/ of its own, so that only PYTHONPATH decides what imports
    done = subprocess.run([sys.executable, str(child), str(scenarios)], env=env, cwd=path, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"evaluate_child.py under {path} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def compare(base: Path, n: int, rounds: int) -> None:
    """This checkout against ``base`` on the same never-seen scenarios (module docstring)."""
    warm, timed = never_seen(n)
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as tmp:
        scenarios = Path(tmp) / "scenarios.json"
        scenarios.write_text(json.dumps({"warm": warm, "timed": timed}), encoding="utf-8")
        sides = {}
        for name, checkout in (("base", base), ("this", Path(__file__).resolve().parents[1])):
            sides[name] = checkout_path(checkout, Path(tmp) / name)
        print(f"fresh evaluations/s, {len(timed):,} never-seen scenarios after a warm-up on {len(warm):,}, "
              f"one core; base = {base}")
        got: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
        for r in range(rounds):
            for name, path in sides.items():
                rates = child_rates(path, scenarios)
                got[name].append(rates)
                gc_part = f"; collector {rates['gc_us']:.1f} us/eval, {rates['kept']:.1f} objects kept/eval"
                print(f"  round {r + 1} {name}: one by one {rates['one_by_one']:>9,.0f}  "
                      f"batch {rates['batch']:>9,.0f}  (refused {rates['one_by_one_refused']:,} / "
                      f"{rates['batch_refused']:,}){gc_part}")
    for kind, label in (("one_by_one", "Engine.evaluate, one by one"), ("batch", "Engine.evaluate_many, batch")):
        b = statistics.median(x[kind] for x in got["base"])
        t = statistics.median(x[kind] for x in got["this"])
        print(f"  {label:29s}: median base {b:>9,.0f}  this {t:>9,.0f}  -> this costs {b / t:.2f}x the base "
              f"per evaluation")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--base", type=Path, help="another checkout to compare with (see the module docstring)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of each side with --base")
    args = ap.parse_args()
    if args.base is not None:
        compare(args.base, args.scenarios, args.rounds)
        return
    pin_one_core()
    warm_family, unseen = never_seen(args.scenarios)
    sets = {"family": warm_family,
            "random": valid(equivalence.points(max(1, args.scenarios // 2), seed=7))}
    print(f"evaluations/s on distinct scenarios, one core (cold: first pass on a fresh engine; "
          f"warm: best of {args.repeats})")
    for name, maps in sets.items():
        for label, run in (("Engine.evaluate, one by one", one_by_one), ("Engine.evaluate_many, batch", batch)):
            cold, warm = rates(run, maps, args.repeats)
            print(f"  {name:7s} ({len(maps):6,} scenarios)  {label:29s}: cold {cold:>10,.0f}   warm {warm:>10,.0f}")
    for label, run in (("Engine.evaluate, one by one", one_by_one), ("Engine.evaluate_many, batch", batch)):
        rate, refused = fresh_rate(run, sets["family"], unseen)
        assert refused == 0, f"{refused} evaluations refused: every scenario here was checked valid"
        print(f"  fresh   ({len(unseen):6,} scenarios)  {label:29s}: {rate:>10,.0f} (after warm-up on family)")
    gc_us, kept = collector_cost(sets["family"], unseen)
    print(f"  fresh, one by one: the cyclic collector {gc_us:.1f} us per evaluation; {kept:.1f} tracked objects "
          "kept per evaluation")


if __name__ == "__main__":
    main()
