"""Run a sweep job on an executor: a stream of progress events, then the result.

``events(...)`` is what a service streams (one :class:`Progress` per finished batch or
heartbeat, then one :class:`Finished`); setting the ``cancel`` event stops submitting
work and cancels what is running (Ray tasks are cancelled with ``ray.cancel``), and the
stream ends with the partial result marked ``cancelled``. Closing the generator early
does the same. ``run_sweep`` drains the stream for library and CLI use.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from twin.core.errors import SpecError
from twin.sweep.job import EngineSettings, Job, Worker
from twin.sweep.reduce import BatchResult, SweepResult
from twin.sweep.sweep_spec import DEFAULT_MAX_POINTS, SweepSpec, check_values, load_spec

if TYPE_CHECKING:
    from twin.engine import Engine

EXECUTORS = ("auto", "inline", "ray")
# "auto" picks Ray above this many points when Ray is importable (and a cluster is named).
AUTO_RAY_POINTS = 2_000_000
# Parallel batches: guided (see _guided); a batch is at least MIN_GUIDED_POINTS points, below
# which numpy's per-operation cost shows. Inline batches are for progress and cancel only.
# Divisor 1 is guided self-scheduling as published (a batch is the remaining points over the
# workers). 2 (half that) made 13 batches of benchmarks/bench_sweep.py's 1,036,800 points on
# 2 CPUs against 8, each with ~5 ms of Ray between a worker's tasks and ~10 ms of per-batch model
# work that a bigger batch shares; a local 2-CPU Ray ran that sweep in 0.60-0.71 s (medians of 5-6
# interleaved runs, three sessions) with 1 against 0.69-0.84 s with 2 (docs/sweeps.md, "Measured").
GUIDED_DIVISOR = 1
MIN_GUIDED_POINTS = 20_000
MAX_BATCH_POINTS = 250_000
INLINE_BATCH_POINTS = 100_000


@dataclass(frozen=True)
class Progress:
    """Where a running sweep stands."""

    done: int
    total: int
    feasible: int
    batches_done: int
    batches_total: int
    elapsed_s: float
    best: dict[str, Any] | None
    retried: int = 0
    batch: BatchResult | None = None  # the batch merged just now (None for a heartbeat)

    @property
    def points_per_s(self) -> float:
        """Evaluated points per second so far."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class Finished:
    """The final (or, when cancelled, partial) result."""

    result: SweepResult


SweepEvent = Progress | Finished


class Executor(Protocol):
    """Runs batches of a job; yields each batch's result (or None as a heartbeat).

    ``stats`` is per call (several sweeps may share one executor): the executor counts
    ``retried`` batches and ``cancelled_tasks`` there.
    """

    name: str
    workers: int

    def map(self, job: Job, batches: list[tuple[int, int, int]], cancel: threading.Event,
            stats: dict[str, int]) -> Iterator[BatchResult | None]: ...

    def close(self) -> None: ...


class InlineExecutor:
    """In-process: the default for small sweeps and tests (no Ray needed)."""

    name = "inline"
    workers = 1

    def __init__(self, engine: Engine | None = None) -> None:
        self.engine = engine

    def map(self, job: Job, batches: list[tuple[int, int, int]], cancel: threading.Event,
            stats: dict[str, int]) -> Iterator[BatchResult | None]:
        # One worker per call (its caches live as long as the sweep); nothing shared between
        # concurrent sweeps of a server but the engine, whose evaluation is thread-safe.
        worker = Worker(job, self.engine or job.engine.build())
        for index, start, stop in batches:
            if cancel.is_set():
                return
            yield worker.run(index, start, stop)

    def close(self) -> None:
        """Nothing to release."""


def plan_batches(total: int, workers: int, batch_points: int | None = None, *,
                 inline: bool = False) -> list[tuple[int, int, int]]:
    """(index, start, stop) of contiguous batches covering ``total`` points."""
    if total <= 0:
        return []
    if batch_points is None and not inline:
        return _guided(total, max(1, workers))
    if batch_points is None:
        batch_points = max(INLINE_BATCH_POINTS, total // 200)
    size = max(1, int(batch_points))
    return [(i, start, min(total, start + size)) for i, start in enumerate(range(0, total, size))]


def _guided(total: int, workers: int) -> list[tuple[int, int, int]]:
    """Batches for parallel workers, shrinking as the work runs out (guided self-scheduling,
    Polychronopoulos & Kuck, IEEE Trans. Computers 1987): each takes the remaining points over
    ``GUIDED_DIVISOR`` x workers, so the first are coarse (few tasks, little overhead) and the
    last are small, and batches of unequal cost still finish together.
    """
    out: list[tuple[int, int, int]] = []
    start = 0
    while start < total:
        size = math.ceil((total - start) / (GUIDED_DIVISOR * workers))
        size = min(MAX_BATCH_POINTS, max(MIN_GUIDED_POINTS, size))
        stop = min(total, start + size)
        out.append((len(out), start, stop))
        start = stop
    return out


def make_executor(kind: str = "auto", *, engine: Engine | None = None, ray_address: str | None = None,
                  num_cpus: int | None = None, total: int = 0) -> Executor:
    """An executor by name; 'auto' uses Ray for big sweeps when Ray is installed or an address is given."""
    if kind not in EXECUTORS:
        raise SpecError("executor", f"must be one of {', '.join(EXECUTORS)} (got {kind!r})")
    if kind == "auto":
        wants_ray = bool(ray_address or os.environ.get("RAY_ADDRESS")) or total >= AUTO_RAY_POINTS
        kind = "ray" if wants_ray and _ray_installed() else "inline"
    if kind == "inline":
        return InlineExecutor(engine)
    from twin.sweep.ray_exec import RayExecutor

    return RayExecutor(address=ray_address, num_cpus=num_cpus)


def _ray_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def events(job: Job, executor: Executor, *, cancel: threading.Event | None = None,
           batch_points: int | None = None, collect_rows: bool = True) -> Iterator[SweepEvent]:
    """Progress events while ``job`` runs on ``executor``, then :class:`Finished`.

    ``collect_rows=False``: a job's kept rows reach the consumer only with each batch's
    ``Progress`` (``batch.rows``), not again all together in the result (a service streams them).
    """
    cancel = cancel or threading.Event()
    batches = plan_batches(job.total, executor.workers, batch_points, inline=executor.name == "inline")
    result = SweepResult(name=job.name, total=job.total, metric=job.metric, order=job.order, top_n=job.top,
                         executor=executor.name, workers=executor.workers)
    t0 = time.perf_counter()
    stats = {"retried": 0, "cancelled_tasks": 0}
    stream = executor.map(job, batches, cancel, stats)
    try:
        for item in stream:
            if item is not None:
                result.add(item if collect_rows or item.rows is None else dataclasses.replace(item, rows=None))
            yield Progress(done=result.done, total=job.total, feasible=result.feasible,
                           batches_done=len(result.batches), batches_total=len(batches),
                           elapsed_s=time.perf_counter() - t0, best=result.best(), retried=stats["retried"],
                           batch=item)
    finally:
        stream.close()  # cancels outstanding work if the consumer stopped early
    result.retried = stats["retried"]
    result.stats["cancelled_tasks"] = stats["cancelled_tasks"]
    result.cancelled = result.done < job.total
    result.seconds = time.perf_counter() - t0
    result.finish()
    yield Finished(result)


def stream(job: Job, *, engine: Engine | None = None, executor: str | Executor = "auto",
           ray_address: str | None = None, num_cpus: int | None = None, cancel: threading.Event | None = None,
           batch_points: int | None = None) -> Iterator[SweepEvent]:
    """:func:`events` with an executor by name (created here and closed when the stream ends).

    For a service: build the job first (:func:`sweep_job` / ``plansearch.plan_job``, which
    raise :class:`SpecError` for a bad request), then iterate this; set ``cancel`` (or
    close the generator) when the client goes away. A long-lived server should pass one
    shared executor instance instead of a name, so Ray is connected once.
    """
    owned = isinstance(executor, str)
    ex = make_executor(executor, engine=engine, ray_address=ray_address, num_cpus=num_cpus,
                       total=job.total) if isinstance(executor, str) else executor
    try:
        yield from events(job, ex, cancel=cancel, batch_points=batch_points)
    finally:
        if owned:
            ex.close()


def sweep_job(spec: SweepSpec, engine: Engine, settings: EngineSettings | None = None,
              max_points: int = DEFAULT_MAX_POINTS) -> Job:
    """Check a sweep spec against the engine's presets and fabrics; the job to run it."""
    check_values(spec, engine.catalog, engine.fabrics.kinds(), max_points, strategies=engine.strategy_set)
    obj = spec.objective
    return Job(recipe=spec, total=spec.total_points, metric=obj.metric, order=obj.order, top=obj.top,
               keep_rows=spec.keep_rows, engine=settings or EngineSettings(), name=spec.name)


def run_sweep(source: Any, *, engine: Engine | None = None, executor: str | Executor = "auto",
              ray_address: str | None = None, num_cpus: int | None = None, cancel: threading.Event | None = None,
              batch_points: int | None = None, settings: EngineSettings | None = None,
              max_points: int = DEFAULT_MAX_POINTS) -> SweepResult:
    """Run a sweep (spec mapping, file or :class:`SweepSpec`) to completion; the merged result."""
    from twin.engine import Engine

    engine = engine or Engine()
    spec = load_spec(source)
    job = sweep_job(spec, engine, settings, max_points)
    return run_job(job, engine=engine, executor=executor, ray_address=ray_address, num_cpus=num_cpus,
                   cancel=cancel, batch_points=batch_points)


def run_job(job: Job, *, engine: Engine | None = None, executor: str | Executor = "auto",
            ray_address: str | None = None, num_cpus: int | None = None, cancel: threading.Event | None = None,
            batch_points: int | None = None) -> SweepResult:
    """Run a prepared job to completion (closing an executor it created)."""
    last: SweepResult | None = None
    for ev in stream(job, engine=engine, executor=executor, ray_address=ray_address, num_cpus=num_cpus,
                     cancel=cancel, batch_points=batch_points):
        if isinstance(ev, Finished):
            last = ev.result
    assert last is not None
    return last
