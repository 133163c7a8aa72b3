"""The sweep engine as the gRPC Sweep service's runner (``ServerContext.sweep_runner``).

The server (``twin/server``) calls ``runner(spec_mapping, should_stop)`` and converts the
events it yields (``twin.server.sweeps``: Started, Progress, Row, Finished) to the wire;
it checks nothing else. :class:`EngineRunner` runs the sweep here — inline, or on Ray for
large sweeps — and maps its events onto that contract:

- the spec is parsed and checked before the first event, so a bad spec is an error the
  server maps to INVALID_ARGUMENT (too many points: RESOURCE_EXHAUSTED);
- ``Progress`` after every batch (and every 0.5 s heartbeat on Ray); ``failed_points``
  counts the infeasible points (a rule broken, or out of memory);
- with ``keep_rows`` (the server's default) every point becomes a ``Row``: infeasible
  ones carry the reason as the error (SpecError for a broken rule, InfeasibleError for
  memory), feasible ones the full ``Estimate``, re-evaluated with the real model (for
  millions of points use ``twin sweep --out`` instead);
- ``Finished.best`` holds the top points with full estimates; ``stopped`` is
  "cancelled" when ``should_stop()`` turned true, which cancels the Ray tasks too.

Install it with one line in ``twin/server/extensions.py`` (after ``register_sweeps``, or
instead of the inline default)::

    from twin.sweep.service import register as register_sweep_engine
    EXTENSIONS.append(register_sweep_engine)

The executor is chosen by ``TWIN_SWEEP_EXECUTOR`` (auto | inline | ray; default auto:
Ray when ``RAY_ADDRESS`` is set or a sweep has >= 2M points). One Ray connection is made
on first use, shared by every request, and closed at server shutdown (a Ray the server
started is shut down; a cluster it joined is only disconnected from).
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from twin.core.errors import InfeasibleError, SpecError, TooLargeError, TwinError
from twin.sweep.job import EngineSettings, Job
from twin.sweep.metrics import MEMORY_REASON, as_python
from twin.sweep.reduce import Rows, nrows
from twin.sweep.runner import (
    AUTO_RAY_POINTS,
    EXECUTORS,
    Executor,
    Finished,
    InlineExecutor,
    Progress,
    events,
    sweep_job,
)
from twin.sweep.spec import SweepSpec, parse_spec, set_path

if TYPE_CHECKING:
    import grpc

    from twin.engine import Engine

EXECUTOR_ENV = "TWIN_SWEEP_EXECUTOR"
ROW_BATCH_POINTS = 500


class EngineRunner:
    """A ``SweepRunner`` (``twin.server.sweeps``) backed by :mod:`twin.sweep`."""

    def __init__(self, engine: Engine, *, max_points: int, settings: EngineSettings | None = None,
                 executor: str = "auto", ray_address: str | None = None, keep_rows_default: bool = True) -> None:
        if executor not in EXECUTORS:
            raise SpecError(EXECUTOR_ENV, f"must be one of {', '.join(EXECUTORS)} (got {executor!r})")
        self.engine = engine
        self.max_points = max_points
        self.settings = settings or EngineSettings()
        self.kind = executor
        self.ray_address = ray_address or os.environ.get("RAY_ADDRESS") or None
        self.keep_rows_default = keep_rows_default
        self._ray: Any = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ executors
    def executor_for(self, job: Job) -> Executor:
        """Inline for small sweeps, else the shared Ray executor (created on first use)."""
        use_ray = self.kind == "ray" or (self.kind == "auto" and (self.ray_address or job.total >= AUTO_RAY_POINTS))
        if not use_ray:
            return InlineExecutor(self.engine)
        with self._lock:
            if self._ray is None:
                from twin.sweep.ray_exec import RayExecutor

                self._ray = RayExecutor(address=self.ray_address)
            return self._ray

    def close(self) -> None:
        """Close the shared Ray executor (server shutdown)."""
        with self._lock:
            if self._ray is not None:
                self._ray.close()
                self._ray = None

    # ------------------------------------------------------------ the runner
    def __call__(self, data: Mapping[str, Any], should_stop: Callable[[], bool]) -> Iterator[Any]:
        from twin.server import sweeps as wire

        if isinstance(data, Mapping) and "keep_rows" not in data:
            data = {**data, "keep_rows": self.keep_rows_default}
        try:
            spec = parse_spec(data)
            job = sweep_job(spec, self.engine, self.settings, self.max_points)
        except (SpecError, TooLargeError) as err:  # fields named as the server's own parser does
            raise type(err)(f"spec.{err.field}" if err.field else "spec", err.rule) from err
        yield wire.Started(spec.name, job.total, tuple(a.path for a in spec.axes))
        cancel = threading.Event()
        t0 = time.perf_counter()
        # Kept rows are re-evaluated with the full model (~0.3 ms a point), so they go out in
        # small batches: progress stays frequent and a cancel lands within one batch.
        batch_points = ROW_BATCH_POINTS if spec.keep_rows else None
        for ev in events(job, self.executor_for(job), cancel=cancel, batch_points=batch_points):
            if should_stop():
                cancel.set()
            if isinstance(ev, Progress):
                if spec.keep_rows and ev.batch is not None and ev.batch.rows is not None:
                    yield from self._rows(spec, ev.batch.rows, wire)
                yield wire.Progress(ev.done, job.total, ev.done - ev.feasible, time.perf_counter() - t0)
            elif isinstance(ev, Finished):
                r = ev.result
                best = tuple(self._rows(spec, r.top, wire))
                elapsed = time.perf_counter() - t0
                yield wire.Finished(r.done, r.done - r.feasible, elapsed, r.metric, best,
                                    "cancelled" if r.cancelled else "")

    def _rows(self, spec: SweepSpec, rows: Rows, wire: Any) -> Iterator[Any]:
        for i in range(nrows(rows)):
            assignment = {a.path: _value(a, rows[a.column][i]) for a in spec.axes}
            index = int(rows["point_id"][i])
            if bool(rows["feasible"][i]):
                try:
                    yield wire.Row(index, assignment, estimate=self._estimate(spec, assignment))
                except TwinError as err:
                    yield wire.Row(index, assignment, error=err)
                continue
            yield wire.Row(index, assignment, error=_reason_error(str(rows["reason"][i])))

    def _estimate(self, spec: SweepSpec, assignment: Mapping[str, Any]) -> Any:
        data = copy.deepcopy(dict(spec.base))
        for path, value in assignment.items():
            set_path(data, path.split("."), value, self.engine.catalog)
        return self.engine.model.evaluate(self.engine.scenario(data), validate=False, report=False)


def _value(axis: Any, cell: Any) -> Any:
    """An axis value back from a row cell (mappings were stored as JSON text)."""
    x = as_python(cell)
    if isinstance(x, str) and any(not isinstance(v, str) for v in axis.values) and x[:1] in "{[":
        try:
            return json.loads(x)
        except json.JSONDecodeError:
            return x
    return x


def _reason_error(reason: str) -> TwinError:
    """The exception a point's infeasibility reason stands for (the server maps it to a code)."""
    if reason == MEMORY_REASON:
        return InfeasibleError("memory", "does not fit in HBM")
    field, _, rule = reason.partition(": ")
    return SpecError(field, rule) if rule else SpecError("", reason)


def register(server: grpc.Server, ctx: Any) -> None:
    """Make this engine the server's sweep runner (see module docstring)."""
    autoload = getattr(ctx.config, "plugins_autoload", None)
    runner = EngineRunner(ctx.engine, max_points=ctx.config.limits.max_sweep_points,
                          settings=EngineSettings(autoload=None if autoload else False),
                          executor=os.environ.get(EXECUTOR_ENV, "auto"))
    ctx.sweep_runner = runner
    ctx.on_shutdown.append(runner.close)
