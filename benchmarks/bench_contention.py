"""What link sharing costs an evaluation: the contention pass's share of ``Engine.evaluate``.

    python benchmarks/bench_contention.py [--scenarios 6000] [--rounds 3]

Issue 11 bounds the evaluation cost of the network model at 1.5x the model without it. Besides
the A/B against an older checkout (``bench_evaluate.py --base``), which also counts every
other change since, this one isolates the contention pass (``twin.core.contention``: link
profiles, stretches, contended strategies costed again) inside this checkout: the same
never-seen scenarios (``bench_evaluate.never_seen``: a warm-up set, then a disjoint timed set) are
evaluated one by one, in alternating rounds, by this checkout as it is and with
``TwinModel._contend`` (``twin.core.run.driver``) replaced by one that hands every strategy's terms back as costed
alone (what the step would be with every link to itself). Each round starts a fresh engine,
warmed the same way. Prints each round's microseconds per evaluation, the medians and their
ratio. One process on one core; the machine may be shared, so compare figures of one run.

Then one more pass with timers around the pass's parts (their own cost inflates the total, so
the parts are printed apart from the rounds): the flows (link profiles, stretches), the
strategies costed again with their shares (and the collective costs that missed the cache
then), and the link report of the estimate.
"""

from __future__ import annotations

import argparse
import collections
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import twin.core.run.driver as driver_module
from twin.core.run.driver import TwinModel
from twin.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_evaluate import never_seen
from evaluate_child import fresh_rate, one_by_one, pin_one_core

_CONTEND = TwinModel._contend


def _alone(self: TwinModel, ctx: Any, parts: list[Any], rehome: Any, memo: Any = None,
           groups: Any = None) -> tuple[list[Any], tuple[tuple[()], tuple[()]]]:
    """The contention pass that shares nothing: every strategy keeps its terms alone."""
    return parts, ((), ())


def us_per_evaluation(warm: list[dict[str, Any]], timed: list[dict[str, Any]], sharing: bool) -> float:
    """Microseconds per ``Engine.evaluate`` over ``timed`` on a fresh engine warmed on ``warm``."""
    TwinModel._contend = _CONTEND if sharing else _alone  # type: ignore[method-assign]
    try:
        rate, refused = fresh_rate(one_by_one, warm, timed)
        assert refused == 0, f"{refused} evaluations refused: every scenario here was checked valid"
        return 1e6 / rate
    finally:
        TwinModel._contend = _CONTEND  # type: ignore[method-assign]


def parts_us(warm: list[dict[str, Any]], timed: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per evaluation of ``timed`` (fresh engine warmed on ``warm``), each part of the contention
    pass: (microseconds, calls), measured with a timer around each call."""
    spent: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    inside = [False]
    saved = (TwinModel._contend, TwinModel._profiles, driver_module.flows, driver_module.strategy_terms,
             driver_module.collective_cost, driver_module.link_loads)

    def timed_call(label: str, fn: Callable[..., Any], only_inside: bool = False) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            if only_inside and not inside[0]:
                return fn(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - t0
                calls[label] += 1
        return run

    def contend(*args: Any, **kwargs: Any) -> Any:
        inside[0] = True
        try:
            return saved[0](*args, **kwargs)
        finally:
            inside[0] = False

    TwinModel._contend = timed_call("the contention pass", contend)  # type: ignore[method-assign]
    TwinModel._profiles = timed_call("  flows: link profiles", saved[1])  # type: ignore[method-assign]
    driver_module.flows = timed_call("  flows: stretches", saved[2])
    driver_module.strategy_terms = timed_call("  strategies costed again", saved[3], True)
    driver_module.collective_cost = timed_call("    of which collective costs missed", saved[4], True)
    driver_module.link_loads = timed_call("the link report (estimate.links)", saved[5])
    try:
        engine = Engine(autoload=False)
        for m in warm:
            engine.evaluate(m)
        spent.clear()
        calls.clear()
        gc.collect()
        t0 = time.perf_counter()
        for m in timed:
            engine.evaluate(m)
        spent["whole evaluation, under the timers"] = time.perf_counter() - t0
        calls["whole evaluation, under the timers"] = len(timed)
    finally:
        (TwinModel._contend, TwinModel._profiles, driver_module.flows, driver_module.strategy_terms,  # type: ignore[method-assign]
         driver_module.collective_cost, driver_module.link_loads) = saved
    order = ("whole evaluation, under the timers", "the contention pass", "  flows: link profiles",
             "  flows: stretches", "  strategies costed again", "    of which collective costs missed",
             "the link report (estimate.links)")
    return {k: (spent[k] / len(timed) * 1e6, calls[k] / len(timed)) for k in order}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=6000, help="warm-up scenarios (the timed set is as many)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    pin_one_core()
    warm, timed = never_seen(args.scenarios)
    print(f"{len(timed):,} never-seen scenarios after a warm-up on {len(warm):,}, one by one, one core")
    with_pass: list[float] = []
    without: list[float] = []
    for r in range(1, args.rounds + 1):
        without.append(us_per_evaluation(warm, timed, sharing=False))
        with_pass.append(us_per_evaluation(warm, timed, sharing=True))
        print(f"  round {r}: with the contention pass {with_pass[-1]:7.1f} us, without {without[-1]:7.1f} us "
              f"({with_pass[-1] / without[-1]:.2f}x)", flush=True)
    a, b = statistics.median(with_pass), statistics.median(without)
    print(f"  median: with {a:.1f} us ({1e6 / a:,.0f}/s), without {b:.1f} us ({1e6 / b:,.0f}/s): "
          f"the pass costs {a - b:.1f} us, {a / b:.2f}x the evaluation without it")
    print("  where the pass's time goes (one pass with timers, us per evaluation, calls per evaluation):")
    for label, (us, n) in parts_us(warm, timed).items():
        print(f"    {label:<40} {us:7.1f} us  {n:5.2f} calls")


if __name__ == "__main__":
    main()
