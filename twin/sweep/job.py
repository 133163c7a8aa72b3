"""A sweep job as plain data, and the per-process state that evaluates its batches.

The job (what to evaluate, how to rank, which plugins) is shipped to every worker (inside
each task when small, else ``ray.put`` once: ``twin.sweep.ray_exec``); a worker builds its
engine, point source and evaluator once per job and keeps them for every batch it runs, so
caches (collectives, stage times, groups) carry over between batches.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from twin.sweep.evaluator import SweepEvaluator
from twin.sweep.failmetrics import FailureColumns, wants_failures
from twin.sweep.fleetmetrics import FleetColumns
from twin.sweep.reduce import BatchResult, reduce_batch
from twin.sweep.sweep_points import PointBatch, SweepSource
from twin.sweep.sweep_spec import SweepSpec

if TYPE_CHECKING:
    from twin.engine import Engine


@dataclass(frozen=True)
class EngineSettings:
    """How to rebuild an equivalent :class:`Engine` in another process."""

    autoload: bool | None = None
    block: tuple[str, ...] = ()

    def build(self) -> Engine:
        """A fresh engine with these plugin settings."""
        from twin.engine import Engine

        return Engine(autoload=self.autoload, block=self.block)


@dataclass(frozen=True)
class Job:
    """Everything a worker needs: the point recipe (sweep spec or plan space) and the ranking."""

    recipe: Any
    total: int
    metric: str = "step_time_s"
    order: str = "min"
    top: int = 10
    keep_rows: bool = False
    engine: EngineSettings = field(default_factory=EngineSettings)
    name: str = "sweep"
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    memory_headroom: float = 0.0    # fraction of HBM a point must leave free to count as fitting
    # Branch and bound for the top points by step time (plan search): points that cannot be
    # among them are counted as pruned, not costed (only with metric step_time_s, min, no rows).
    prune: bool = False

    @property
    def prune_top(self) -> int:
        """How many best points pruning keeps exact (0: no pruning)."""
        ok = self.prune and self.metric == "step_time_s" and self.order == "min" and not self.keep_rows
        return self.top if ok else 0


class Worker:
    """Engine + point source + evaluator for one job in one process."""

    def __init__(self, job: Job, engine: Engine) -> None:
        self.job = job
        self.engine = engine
        self.source = make_source(job.recipe, engine)
        self.evaluator = SweepEvaluator(engine, memory_headroom=job.memory_headroom, prune_top=job.prune_top,
                                        details=job.keep_rows)
        self.failures = None
        if isinstance(job.recipe, SweepSpec) and wants_failures(job.recipe):
            self.failures = FailureColumns(engine, job.recipe, self.source)
        self.fleet = None
        if isinstance(job.recipe, SweepSpec) and job.recipe.fleet is not None:
            self.fleet = FleetColumns(engine, job.recipe, self.source)

    def run(self, index: int, start: int, stop: int) -> BatchResult:
        """Evaluate and reduce points ``start`` .. ``stop - 1``."""
        t0 = time.perf_counter()
        batch = self.source.batch(start, stop)
        ev = self.evaluator.evaluate(batch)
        if self.failures is not None:
            self.failures.fill(batch, ev)
        if self.fleet is not None:
            self.fleet.fill(batch, ev)
        job = self.job
        return reduce_batch(index, batch, ev, job.metric, job.order, job.top, job.keep_rows,
                            time.perf_counter() - t0)


class PointSource(Protocol):
    """The points of a job, batch by batch (``twin.sweep.sweep_points.SweepSource``, ``plansearch.PlanSource``)."""

    total: int

    def batch(self, start: int, stop: int) -> PointBatch: ...


@runtime_checkable
class Recipe(Protocol):
    """A job recipe that builds its own point source (``plansearch.PlanSpace``).

    Recipes above this module (plan search runs jobs, so it imports this one) name their
    source this way instead of this module importing them back.
    """

    def source(self, engine: Engine) -> PointSource: ...


def make_source(recipe: Any, engine: Engine) -> PointSource:
    """The point source of a recipe (a sweep spec, or a :class:`Recipe` such as a plan space)."""
    if isinstance(recipe, SweepSpec):
        return SweepSource(recipe, engine.catalog)
    if isinstance(recipe, Recipe):
        return recipe.source(engine)
    raise TypeError(f"unknown sweep recipe {type(recipe).__name__}")


# One worker per job per process; engines are shared by jobs with the same settings.
_ENGINES: dict[EngineSettings, Any] = {}
_WORKERS: dict[str, Worker] = {}


_LOCK = threading.Lock()


def engine_for(settings: EngineSettings) -> Any:
    """The engine of this (Ray worker) process for ``settings``, built once."""
    with _LOCK:
        return _engine_for(settings)


def _engine_for(settings: EngineSettings) -> Any:
    engine = _ENGINES.get(settings)
    if engine is None:
        engine = _ENGINES[settings] = settings.build()
    return engine


def worker_for(job: Job) -> Worker:
    """The worker of this (Ray worker) process for ``job``, built on its first batch."""
    with _LOCK:
        w = _WORKERS.get(job.token)
        if w is None:
            engine = _engine_for(job.engine)
            while len(_WORKERS) >= 4:  # keep the last few jobs' caches
                _WORKERS.pop(next(iter(_WORKERS)))
            w = Worker(job, engine)
            _WORKERS[job.token] = w
        return w
