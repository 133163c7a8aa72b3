"""One side of ``bench_evaluate.py --base``: time never-seen scenarios through the twin on ``sys.path``.

    python benchmarks/evaluate_child.py SCENARIOS.json

``SCENARIOS.json``: ``{"warm": [mapping, ...], "timed": [mapping, ...]}``. Prints one JSON
line: evaluations/s of ``timed`` one by one (``Engine.evaluate``) and as one batch
(``Engine.evaluate_many``), each on a fresh engine first warmed on ``warm`` (what a
long-running service sees: caches shared only where the two sets share presets, spans or
plans), how many ``timed`` mappings that twin refused, and, one by one, the collector's time
per evaluation and the tracked objects each evaluation leaves behind (:func:`collector_cost`).
``bench_evaluate.py`` times its own passes with the same functions. Imports only what every
version of the twin since issue 9 has (``twin.engine.Engine``, ``twin.core.errors.TwinError``),
so the parent can point ``sys.path`` at an older checkout.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from twin.core.errors import TwinError
from twin.engine import Engine


def one_by_one(engine: Engine, maps: list[dict[str, Any]]) -> int:
    """Evaluate each mapping; returns how many were refused (a bad mapping is timed too)."""
    refused = 0
    for m in maps:
        try:
            engine.evaluate(m)
        except TwinError:
            refused += 1
    return refused


def batch(engine: Engine, maps: list[dict[str, Any]]) -> int:
    """Evaluate the mappings as one batch; returns how many have a reason instead of numbers."""
    res = engine.evaluate_many(maps)
    return sum(res.reason(i) is not None for i in range(len(maps)))


def fresh_rate(run: Callable[[Engine, list[dict[str, Any]]], int], warm: list[dict[str, Any]],
               timed: list[dict[str, Any]]) -> tuple[float, int]:
    """(evaluations/s of ``timed``, how many it refused) by ``run`` on a fresh engine warmed on ``warm``."""
    engine = Engine(autoload=False)
    run(engine, warm)
    gc.collect()  # not the freeing of earlier passes' garbage (cycles) inside the timed pass
    t0 = time.perf_counter()
    refused = run(engine, timed)
    return len(timed) / (time.perf_counter() - t0), refused


def collector_cost(warm: list[dict[str, Any]], timed: list[dict[str, Any]]) -> tuple[float, float]:
    """(microseconds of cyclic-collector work per evaluation, objects the collector tracks that
    each evaluation leaves behind) over ``timed`` one by one on a fresh engine warmed on ``warm``.

    Every object an evaluation keeps (a cache entry) is traversed by each later full
    collection while it lives; on a large heap that costs more than the entry saves when it is
    never used again. Collections are timed with ``gc.callbacks``.
    """
    engine = Engine(autoload=False)
    one_by_one(engine, warm)
    gc.collect()
    spent = [0.0, 0.0]

    def clock(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            spent[1] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - spent[1]

    before = len(gc.get_objects())
    gc.callbacks.append(clock)
    try:
        one_by_one(engine, timed)
    finally:
        gc.callbacks.remove(clock)
    gc.collect()
    return spent[0] / len(timed) * 1e6, (len(gc.get_objects()) - before) / len(timed)


def pin_one_core() -> None:
    """Run this process on one core (where the OS allows): the figures are per core."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def main() -> None:
    pin_one_core()
    with open(sys.argv[1], encoding="utf-8") as f:
        sets = json.load(f)
    out: dict[str, Any] = {}
    for label, run in (("one_by_one", one_by_one), ("batch", batch)):
        out[label], out[f"{label}_refused"] = fresh_rate(run, sets["warm"], sets["timed"])
    out["gc_us"], out["kept"] = collector_cost(sets["warm"], sets["timed"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
