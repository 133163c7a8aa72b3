"""The sweep engine (``twin.sweep``) as the Sweep RPC's runner (``ServerContext.sweep_runner``).

:class:`EngineRunner` runs a sweep with the sweep engine — inline, or on Ray for large
sweeps — and maps its events onto the servicer's contract (:mod:`twin.server.sweep_events`):

- the spec is parsed by the one sweep-spec parser (:func:`twin.sweep.sweep_spec.parse_spec`, the
  same as ``twin sweep``'s) and checked before the first event, so a bad spec is an error
  the server maps to INVALID_ARGUMENT naming ``spec.<field>`` (too many points:
  RESOURCE_EXHAUSTED);
- ``Progress`` after every batch (and every 0.5 s heartbeat on Ray); ``failed_points``
  counts the infeasible points (a rule broken, or out of memory);
- with ``keep_rows`` (the server's default) every point becomes a ``Row``: infeasible
  ones carry their typed refusal's error (``twin.core.results.Refusal.error``: SpecError for
  a broken rule, InfeasibleError for memory; looked up by the row's reason, never parsed
  from it), feasible ones the ``Estimate`` built from the batch's own numbers
  (``twin.sweep.evaluator.row_estimate``: nothing is evaluated again);
- ``Finished.best`` holds the top points with their estimates (from the rows' numbers where
  rows are kept; a sweep that keeps none evaluates its few best once more); ``stopped`` is
  "cancelled" when ``should_stop()`` turned true, which cancels the Ray tasks too.

``twin.server.extensions.register_sweeps`` installs :func:`runner_for`'s runner unless an
earlier extension installed another (imported there lazily: the servicer and ``twin
catalog`` do not load the sweep engine). The executor is chosen by
``TWIN_SWEEP_EXECUTOR`` (auto | inline | ray; default auto: Ray when ``RAY_ADDRESS`` is
set or a sweep has >= 2M points). One Ray connection is made on first use, shared by
every request, and closed at server shutdown (a Ray the server started is shut down; a
cluster it joined is only disconnected from).

It lives in the server package, above ``twin.sweep``: it speaks the servicer's event
contract and the server's config, and the sweep engine knows nothing of either.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from twin.core.errors import SpecError, TooLargeError, TwinError
from twin.core.estimate import Estimate
from twin.core.results import Refusal
from twin.server.sweep_events import Finished, Progress, Row, RowBlock, Started, SweepEvent
from twin.sweep.evaluator import row_estimate
from twin.sweep.job import EngineSettings, Job
from twin.sweep.metrics import DETAIL_COLUMNS, as_python
from twin.sweep.reduce import Rows, nrows
from twin.sweep.runner import AUTO_RAY_POINTS, EXECUTORS, Executor, InlineExecutor, events, sweep_job
from twin.sweep.runner import Finished as EngineFinished
from twin.sweep.runner import Progress as EngineProgress
from twin.sweep.sweep_spec import SweepSpec, parse_spec, set_path

if TYPE_CHECKING:
    from twin.engine import Engine
    from twin.server.server_config import ServerConfig

EXECUTOR_ENV = "TWIN_SWEEP_EXECUTOR"
# Kept rows go out a batch at a time: ~0.05 s of work on one core, so progress stays frequent
# and a cancel lands within one batch (a batch's fixed cost, ~10 ms, amortised over its rows).
ROW_BATCH_POINTS = 4096


class EngineRunner:
    """A ``SweepRunner`` (:mod:`twin.server.sweep_events`) backed by :mod:`twin.sweep`."""

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
    def __call__(self, data: Mapping[str, Any], should_stop: Callable[[], bool]) -> Iterator[SweepEvent]:
        if isinstance(data, Mapping) and "keep_rows" not in data:
            data = {**data, "keep_rows": self.keep_rows_default}
        try:
            spec = parse_spec(data, max_points=self.max_points)
            job = sweep_job(spec, self.engine, self.settings, self.max_points)
        except (SpecError, TooLargeError) as err:  # the field as the request names it: spec.axes[0].path
            raise type(err)(f"spec.{err.field}" if err.field else "spec", err.rule) from err
        yield Started(spec.name, job.total, tuple(a.path for a in spec.axes))
        cancel = threading.Event()
        t0 = time.perf_counter()
        batch_points = ROW_BATCH_POINTS if spec.keep_rows else None
        for ev in events(job, self.executor_for(job), cancel=cancel, batch_points=batch_points, collect_rows=False):
            if should_stop():
                cancel.set()
            if isinstance(ev, EngineProgress):
                if spec.keep_rows and ev.batch is not None and ev.batch.rows is not None:
                    yield from self._block(spec, ev.batch.rows, ev.batch.refusals)
                yield Progress(ev.done, job.total, ev.done - ev.feasible, time.perf_counter() - t0)
            elif isinstance(ev, EngineFinished):
                r = ev.result
                best = tuple(self._rows(spec, r.top, r.refusals))
                elapsed = time.perf_counter() - t0
                yield Finished(r.done, r.done - r.feasible, elapsed, r.metric, best,
                                    "cancelled" if r.cancelled else "")

    def _block(self, spec: SweepSpec, rows: Rows, refusals: Mapping[str, Refusal]) -> Iterator[SweepEvent]:
        """Kept rows: one block of them (their numbers are whole estimates), else row by row."""
        if not all(name in rows for name in DETAIL_COLUMNS):
            yield from self._rows(spec, rows, refusals)
            return
        axes = []
        for axis in spec.axes:  # each distinct cell of a column converted once
            column = rows[axis.column]
            try:
                cells, codes = np.unique(column, return_inverse=True)
            except TypeError:  # cells that do not sort together: every row its own
                cells, codes = column, np.arange(len(column))
            axes.append((axis.path, [_value(axis, c) for c in cells.tolist()], codes.reshape(-1).tolist()))
        made: dict[str, TwinError] = {}
        errors: list[TwinError | None] = []
        for feasible, reason in zip(rows["feasible"].tolist(), rows["reason"].tolist(), strict=True):
            if feasible:
                errors.append(None)
                continue
            err = made.get(reason)
            if err is None:
                err = made[reason] = (refusals.get(reason) or Refusal("", str(reason))).error()
            errors.append(err)
        yield RowBlock(rows["point_id"].tolist(), axes, errors, rows, lambda i: row_estimate(rows, i))

    def _rows(self, spec: SweepSpec, rows: Rows, refusals: Mapping[str, Refusal]) -> Iterator[Row]:
        whole = all(name in rows for name in DETAIL_COLUMNS)  # rows kept: each is a whole estimate
        for i in range(nrows(rows)):
            assignment = {a.path: _value(a, rows[a.column][i]) for a in spec.axes}
            index = int(rows["point_id"][i])
            if not bool(rows["feasible"][i]):
                reason = str(rows["reason"][i])
                refusal = refusals.get(reason) or Refusal("", reason)
                yield Row(index, assignment, error=refusal.error())
                continue
            try:
                est = row_estimate(rows, i) if whole else self._estimate(spec, assignment)
            except TwinError as err:
                yield Row(index, assignment, error=err)
                continue
            yield Row(index, assignment, estimate=est)

    def _estimate(self, spec: SweepSpec, assignment: Mapping[str, Any]) -> Estimate:
        data = copy.deepcopy(dict(spec.base))
        for path, value in assignment.items():
            set_path(data, path.split("."), value, self.engine.catalog)
        return self.engine.evaluate(self.engine.scenario(data), validate=False, report=False)


def _value(axis: Any, cell: Any) -> Any:
    """An axis value back from a row cell (mappings were stored as JSON text)."""
    x = as_python(cell)
    if isinstance(x, str) and any(not isinstance(v, str) for v in axis.values) and x[:1] in "{[":
        try:
            return json.loads(x)
        except json.JSONDecodeError:
            return x
    return x


def runner_for(engine: Engine, config: ServerConfig) -> EngineRunner:
    """The server's sweep runner: its engine's plugin settings, its point limit, the executor from the env."""
    return EngineRunner(engine, max_points=config.limits.max_sweep_points,
                        settings=EngineSettings(autoload=None if config.plugins_autoload else False),
                        executor=os.environ.get(EXECUTOR_ENV, "auto"))
