"""Monte-Carlo simulation of a training job over a horizon, for what the closed form cannot do.

Daly's closed form (``goodput.py``) assumes independent Poisson interruptions with one
mean restart time. It cannot follow a finite pool of hot spares (a node failure takes a
spare away until its repair; when none is left the job must run degraded, shrink or
wait), nor overlapping degradations (a slow period still running when the next failure
strikes; a switch whose links all fail at once counts as one event with its own impact).
This simulates it event by event: failures arrive as Poisson processes per class;
the job alternates ``interval_s`` of computation and ``write_s`` of checkpoint writing;
an interruption loses the work since the last completed checkpoint and costs the
class's downtime (a failure during a restart starts the restart again, as in Daly's
model); degraded periods slow computation (the slowest of the active ones wins, since
independent failures almost always sit on different ranks).

Plain data in, plain data out, numpy only: :func:`simulate` runs one batch of trials with
its own seed and :func:`merge` reduces batches, so the same code runs inline or as tasks
on a Ray cluster (the sweep engine maps batches; see ``twin.failure_analyzer.monte_carlo``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from twin.core.units import DAY_S


@dataclass(frozen=True, slots=True)
class EventClass:
    """One kind of event: its rate and what follows it.

    ``downtime_s``: time not training after it (restart, or waiting for a repair);
    ``slow_s`` at ``throughput`` of full speed after that. ``nodes``: hot spares the
    primary outcome consumes (each back after ``repair_s``); when none is free the
    ``fallback_*`` outcome applies. ``planned``: a maintenance stop (checkpoint first,
    nothing lost).
    """

    name: str
    rate_per_s: float
    interrupts: bool
    downtime_s: float = 0.0
    slow_s: float = 0.0
    throughput: float = 1.0
    stall_s: float = 0.0
    nodes: int = 0
    repair_s: float = 0.0
    fallback_downtime_s: float = 0.0
    fallback_slow_s: float = 0.0
    fallback_throughput: float = 1.0
    planned: bool = False


@dataclass(frozen=True, slots=True)
class SimulationSpec:
    """Everything one batch of trials needs (picklable: ships to Ray workers as is)."""

    classes: tuple[EventClass, ...]
    interval_s: float
    write_s: float
    horizon_s: float
    spare_nodes: int | None = None


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """Per-trial outcomes of one or more batches."""

    useful_fraction: np.ndarray
    interruptions: np.ndarray
    lost_work_s: np.ndarray
    downtime_s: np.ndarray
    spare_shortfalls: np.ndarray
    horizon_s: float

    @property
    def trials(self) -> int:
        """Number of trials."""
        return int(self.useful_fraction.size)

    def summary(self) -> dict[str, float]:
        """Mean and spread of the figures that matter."""
        u = self.useful_fraction
        n = max(1, self.trials)
        ints = float(self.interruptions.sum())
        days = self.horizon_s / DAY_S
        return {
            "trials": self.trials,
            "horizon_days": days,
            "effective_training_time_pct": 100.0 * float(u.mean()),
            "effective_training_time_pct_p5": 100.0 * float(np.percentile(u, 5)),
            "effective_training_time_pct_p95": 100.0 * float(np.percentile(u, 95)),
            "effective_training_time_pct_stderr": 100.0 * float(u.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
            "expected_interruptions_per_day": ints / n / days,
            "mean_lost_work_per_interruption_s": float(self.lost_work_s.sum()) / ints if ints else 0.0,
            "mean_downtime_per_interruption_s": float(self.downtime_s.sum()) / ints if ints else 0.0,
            "spare_shortfalls_per_day": float(self.spare_shortfalls.sum()) / n / days,
        }


def merge(results: Iterable[SimulationResult]) -> SimulationResult:
    """Concatenate batches (the reduce step)."""
    rs = list(results)
    if not rs:
        raise ValueError("merge needs at least one result")
    return SimulationResult(
        useful_fraction=np.concatenate([r.useful_fraction for r in rs]),
        interruptions=np.concatenate([r.interruptions for r in rs]),
        lost_work_s=np.concatenate([r.lost_work_s for r in rs]),
        downtime_s=np.concatenate([r.downtime_s for r in rs]),
        spare_shortfalls=np.concatenate([r.spare_shortfalls for r in rs]),
        horizon_s=rs[0].horizon_s)


class _Job:
    """State of one simulated job: wall clock, work done, checkpoint cycle, slow periods."""

    __slots__ = ("c", "cyc", "delta", "down_until", "saved", "slow", "t", "tau", "work")

    def __init__(self, tau: float, delta: float) -> None:
        self.tau, self.delta, self.cyc = tau, delta, tau + delta
        self.t = self.work = self.saved = self.c = self.down_until = 0.0
        self.slow: list[tuple[float, float, float]] = []

    def _compute(self, length: float, thr: float) -> None:
        """Run ``length`` wall seconds of the compute/checkpoint cycle at ``thr`` of full speed."""
        tau, cyc = self.tau, self.cyc
        if self.c < tau:
            r = min(length, tau - self.c)
            self.work += r * thr
            self.c += r
            length -= r
        if length > 0 and self.c >= tau:
            r = min(length, cyc - self.c)
            self.c += r
            length -= r
            if self.c >= cyc - 1e-12:
                self.saved, self.c = self.work, 0.0
        if length > 0:
            n = math.floor(length / cyc)
            if n:
                self.work += n * tau * thr
                self.saved = self.work
                length -= n * cyc
            r = min(length, tau)
            self.work += r * thr
            self.c = r + max(0.0, length - r)

    def advance(self, until: float) -> None:
        """Move the clock to ``until``, accruing work while running."""
        while self.t < until:
            if self.t < self.down_until:
                self.t = min(until, self.down_until)
                continue
            thr, nxt = 1.0, until
            for start, end, f in self.slow:
                if start <= self.t < end:
                    thr = min(thr, f)
                    nxt = min(nxt, end)
                elif start > self.t:
                    nxt = min(nxt, start)
            self._compute(nxt - self.t, thr)
            self.t = nxt
        self.slow = [s for s in self.slow if s[1] > self.t]

    def interrupt(self, downtime: float) -> float:
        """A crash now: roll back to the last checkpoint; return the work lost."""
        if self.t < self.down_until:  # failed again while restarting: the restart starts over
            self.down_until = self.t + downtime
            return 0.0
        lost = self.work - self.saved
        self.work, self.c = self.saved, 0.0
        self.down_until = self.t + downtime
        return lost

    def planned_stop(self, downtime: float) -> None:
        """A maintenance stop: checkpoint (part of ``downtime``), then restart; nothing lost."""
        start = max(self.t, self.down_until)
        self.saved, self.c = self.work, 0.0
        self.down_until = start + downtime


def _trial(spec: SimulationSpec, rng: np.random.Generator) -> tuple[float, int, float, float, int]:
    classes = spec.classes
    rates = np.array([c.rate_per_s for c in classes], dtype=float)
    total = float(rates.sum())
    job = _Job(spec.interval_s, spec.write_s)
    if total <= 0:
        job.advance(spec.horizon_s)
        return job.work / spec.horizon_s, 0, 0.0, 0.0, 0
    n = int(rng.poisson(total * spec.horizon_s))
    times = np.sort(rng.uniform(0.0, spec.horizon_s, n))
    kinds = rng.choice(len(classes), size=n, p=rates / total)
    free = math.inf if spec.spare_nodes is None else float(spec.spare_nodes)
    returns: list[tuple[float, int]] = []
    interruptions, lost_total, down_total, shortfalls = 0, 0.0, 0.0, 0
    for te, k in zip(times.tolist(), kinds.tolist(), strict=True):
        job.advance(te)
        while returns and returns[0][0] <= te:
            free += heapq.heappop(returns)[1]
        ev = classes[k]
        if ev.planned:
            job.planned_stop(ev.downtime_s)
            continue
        downtime, slow_s, thr = ev.downtime_s, ev.slow_s, ev.throughput
        if ev.nodes and math.isfinite(free):
            if free >= ev.nodes:
                free -= ev.nodes
                heapq.heappush(returns, (te + ev.repair_s, ev.nodes))
            else:
                shortfalls += 1
                downtime, slow_s, thr = ev.fallback_downtime_s, ev.fallback_slow_s, ev.fallback_throughput
        if ev.interrupts:
            interruptions += 1
            lost_total += job.interrupt(downtime)
            down_total += downtime
            if slow_s > 0 and thr < 1.0:
                job.slow.append((job.down_until, job.down_until + slow_s, thr))
        else:
            if ev.stall_s > 0 or downtime > 0:
                job.down_until = max(job.down_until, te) + ev.stall_s + downtime
            if slow_s > 0 and thr < 1.0:
                job.slow.append((te, te + slow_s, thr))
    job.advance(spec.horizon_s)
    return job.work / spec.horizon_s, interruptions, lost_total, down_total, shortfalls


def simulate(spec: SimulationSpec, trials: int, seed: int) -> SimulationResult:
    """Run ``trials`` independent trials of ``spec`` (one batch; seeded, reproducible)."""
    rng = np.random.default_rng(seed)
    rows = [_trial(spec, rng) for _ in range(trials)]
    arr = np.array(rows, dtype=float).reshape(len(rows), 5)
    return SimulationResult(useful_fraction=arr[:, 0], interruptions=arr[:, 1], lost_work_s=arr[:, 2],
                            downtime_s=arr[:, 3], spare_shortfalls=arr[:, 4], horizon_s=spec.horizon_s)


Mapper = Callable[[Callable[[tuple[SimulationSpec, int, int]], SimulationResult],
                   Sequence[tuple[SimulationSpec, int, int]]], Iterable[SimulationResult]]


def _run_batch(args: tuple[SimulationSpec, int, int]) -> SimulationResult:
    spec, trials, seed = args
    return simulate(spec, trials, seed)


def batches(spec: SimulationSpec, trials: int, batch_trials: int, seed: int) -> list[tuple[SimulationSpec, int, int]]:
    """Split ``trials`` into independent seeded batches (the units a parallel executor maps)."""
    out = []
    seq = np.random.SeedSequence(seed)
    sizes = [batch_trials] * (trials // batch_trials) + ([trials % batch_trials] if trials % batch_trials else [])
    for size, child in zip(sizes, seq.spawn(len(sizes)), strict=True):
        out.append((spec, size, int(child.generate_state(1)[0])))
    return out


def run(spec: SimulationSpec, trials: int, batch_trials: int = 50, seed: int = 0,
        mapper: Mapper | None = None) -> SimulationResult:
    """Simulate ``trials`` trials in batches; ``mapper`` (default: the builtin ``map``) may fan out."""
    jobs = batches(spec, trials, batch_trials, seed)
    results = (mapper or map)(_run_batch, jobs)
    return merge(results)
