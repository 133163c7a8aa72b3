"""Sweeps started from the page, run by the gRPC service's own sweep runner, and loaded results files.

A sweep here is the same call the Sweep RPC makes (``ServerContext.sweep_runner(spec,
should_stop)``: the sweep engine, inline or on Ray), driven from a worker thread of its own, so
the web view's event loop and the gRPC workers never wait on it. Its rows are kept as table
rows (:func:`twin.web.views.row_of`); the page reads them sorted and bounded, and follows
progress over the event stream. At most ``limits.max_sweep_streams`` run at once (the bound
the RPC uses for its streams; past it: RESOURCE_EXHAUSTED naming that field). A loaded file
holds at most ``limits.max_sweep_points`` rows (the most a sweep run here can make), counted
before it is expanded, and is kept as its columns (:mod:`twin.web.loaded_rows`); the sweeps kept
hold at most ``max_kept_bytes`` together (the oldest finished ones are forgotten first, and a
file that alone is larger is refused).
"""

from __future__ import annotations

import itertools
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.core.errors import NotFoundError, SpecError, TooLargeError
from twin.server.sweep_events import Finished, Progress, Row, RowBlock, Started, SweepEvent, SweepRunner
from twin.web.loaded_rows import LoadedRows
from twin.web.views import plots, row_of

log = logging.getLogger("twin.web")
# Sweeps kept for the page (finished ones beyond this are forgotten, oldest first): each holds
# its rows, so the bound is memory's. 20: a working session's worth, a layout choice.
KEPT = 20
# Bytes the kept sweeps may hold together: an eighth of the 2 GiB the Helm chart gives the
# service's container (resources.limits.memory), the rest being the model, telemetry and gRPC.
# A loaded file's columns count what they hold (LoadedRows.nbytes); a sweep run here, ROW_BYTES
# per row (a row_of dict of ~30 values: ~2 KB measured with sys.getsizeof over keys and values).
MAX_KEPT_BYTES = 256 * 1024 * 1024
ROW_BYTES = 2048
SORTABLE = ("point_id", "step_time_s", "tokens_per_s", "mfu", "memory_gib", "power_kw", "num_gpus")


def row_error(err: Exception | None) -> str:
    """A row's "infeasible because": the field named once (an error with a ``rule`` is ``field: rule``;
    any other, an InfeasibleError among them, already names its field in its text: "memory: ...").
    """
    if err is None:
        return ""
    rule = getattr(err, "rule", None)
    if rule is None:
        return str(err)
    field = getattr(err, "field", "")
    return f"{field}: {rule}" if field else str(rule)


@dataclass
class SweepJob:
    """One sweep (running or done) or one loaded results file, as the page sees it."""

    id: str
    name: str
    source: str  # "run" | "file"
    axes: tuple[str, ...] = ()
    total: int = 0
    done: int = 0
    failed: int = 0
    state: str = "running"  # running | finished | stopped | failed | loaded
    error: str = ""
    metric: str = "step_time_s"
    started: float = field(default_factory=time.time)
    elapsed_s: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)
    loaded: LoadedRows | None = None  # a loaded file's rows, as columns (rows stays empty)
    version: int = 0
    cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def row_count(self) -> int:
        """Rows kept."""
        return len(self.loaded) if self.loaded is not None else len(self.rows)

    @property
    def nbytes(self) -> int:
        """Bytes its rows hold (counted against ``MAX_KEPT_BYTES``)."""
        return self.loaded.nbytes if self.loaded is not None else len(self.rows) * ROW_BYTES

    def progress(self) -> dict[str, Any]:
        """What the event stream and the list carry."""
        return {"id": self.id, "name": self.name, "source": self.source, "state": self.state, "total": self.total,
                "done": self.done, "failed": self.failed, "error": self.error, "elapsed_s": round(self.elapsed_s, 3),
                "metric": self.metric, "axes": list(self.axes), "rows": self.row_count}

    def table(self, sort: str, order: str, limit: int) -> dict[str, Any]:
        """``limit`` rows sorted by ``sort`` (infeasible points last), with the plots' data."""
        if sort not in SORTABLE and not sort.startswith("axis:"):
            raise SpecError("sort", f"must be one of {', '.join(SORTABLE)} or axis:<path> (got {sort!r})")
        if order not in ("asc", "desc"):
            raise SpecError("order", f"must be asc or desc (got {order!r})")
        if limit < 1:
            raise SpecError("limit", f"must be at least 1 (got {limit})")
        if self.loaded is not None:
            total, table = self.loaded.table(sort, order, limit)
            return {**self.progress(), "sort": sort, "order": order, "rows_total": total, "table": table,
                    "plots": self.loaded.plots(self.metric)}
        rows = list(self.rows)
        ranked = [r for r in rows if r.get("feasible") and r.get(sort) is not None]
        ranked.sort(key=lambda r: _key(r[sort]), reverse=order == "desc")
        rest = sorted((r for r in rows if not (r.get("feasible") and r.get(sort) is not None)),
                      key=lambda r: _key(r.get("point_id", 0)))
        known, unknown = ranked, rest
        return {**self.progress(), "sort": sort, "order": order, "rows_total": len(rows),
                "table": (known + unknown)[:limit], "plots": plots(rows, self.metric)}


def _key(v: Any) -> tuple[int, Any]:
    return (0, v) if isinstance(v, int | float) else (1, str(v))


class WebSweeps:
    """The sweeps of one web view."""

    def __init__(self, runner: SweepRunner | None, max_running: int, shutdown: threading.Event,
                 max_rows: int | None = None, max_kept_bytes: int = MAX_KEPT_BYTES) -> None:
        self.runner = runner
        self.max_running = max_running
        self.shutdown = shutdown
        self.max_rows = max_rows
        self.max_kept_bytes = max_kept_bytes
        self.jobs: dict[str, SweepJob] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._version = 0

    def version(self) -> int:
        """Changes whenever any sweep moves (the event stream's cue)."""
        with self._lock:
            return self._version

    def _touch(self, job: SweepJob) -> None:
        with self._lock:
            job.version += 1
            self._version += 1

    def _add(self, job: SweepJob) -> None:
        with self._lock:
            self.jobs[job.id] = job
            done = [j for j in self.jobs.values() if j.state != "running"]
            for old in done[:max(0, len(self.jobs) - KEPT)]:
                del self.jobs[old.id]
            # Past the byte bound, the oldest finished sweeps go (never the one just added).
            held = sum(j.nbytes for j in self.jobs.values())
            for old in [j for j in self.jobs.values() if j.state != "running" and j is not job]:
                if held <= self.max_kept_bytes:
                    break
                held -= old.nbytes
                del self.jobs[old.id]
            self._version += 1

    def get(self, job_id: str) -> SweepJob:
        """The sweep ``job_id`` (NotFoundError naming ``id`` when there is none)."""
        with self._lock:
            job = self.jobs.get(job_id)
            known = sorted(self.jobs)
        if job is None:
            raise NotFoundError("id", job_id, known)
        return job

    def listing(self) -> list[dict[str, Any]]:
        """Every kept sweep, newest first."""
        with self._lock:
            jobs = list(self.jobs.values())
        return [j.progress() for j in reversed(jobs)]

    def start(self, spec: Mapping[str, Any]) -> SweepJob:
        """Check ``spec`` and start it (blocking only until the runner accepts it: a bad spec
        raises here, as the RPC's first message would).
        """
        if self.runner is None:
            raise SpecError("spec", "this server has no sweep runner")
        with self._lock:
            running = sum(1 for j in self.jobs.values() if j.state == "running")
        if running >= self.max_running:
            raise TooLargeError("limits.max_sweep_streams",
                                f"{self.max_running} sweeps are running (the limit); wait for one or stop one")
        job = SweepJob(id=f"s{next(self._ids)}", name=str(spec.get("name") or "sweep"), source="run")
        metric = spec.get("objective", {}).get("metric") if isinstance(spec.get("objective"), Mapping) else None
        job.metric = str(metric or "step_time_s")
        events = self.runner(spec, lambda: job.cancel.is_set() or self.shutdown.is_set())
        first = next(events)  # SpecError / TooLargeError for a bad spec, before anything is kept
        self._apply(job, first)
        self._add(job)
        threading.Thread(target=self._drive, args=(job, events), name=f"twin-web-sweep-{job.id}",
                         daemon=True).start()
        return job

    def _drive(self, job: SweepJob, events: Iterator[SweepEvent]) -> None:
        try:
            for ev in events:
                self._apply(job, ev)
        except Exception as err:  # the page shows why; the log has the traceback
            log.exception("web sweep %s failed", job.id)
            job.state, job.error = "failed", f"{type(err).__name__}: {err}"
        if job.state == "running":
            job.state = "stopped"
        self._touch(job)

    def _apply(self, job: SweepJob, ev: SweepEvent) -> None:
        if isinstance(ev, Started):
            job.name, job.total, job.axes = ev.name, ev.total, ev.axis_paths
        elif isinstance(ev, RowBlock):
            for row in ev.rows():
                self._apply(job, row)
            return
        elif isinstance(ev, Row):
            job.rows.append(row_of(ev.index, ev.assignment, ev.estimate, row_error(ev.error)))
            return  # progress follows; one touch per batch
        elif isinstance(ev, Progress):
            job.done, job.failed, job.elapsed_s = ev.done, ev.failed, ev.elapsed_s
        elif isinstance(ev, Finished):
            job.done, job.failed, job.elapsed_s = ev.done, ev.failed, ev.elapsed_s
            job.metric = ev.metric or job.metric
            job.state = "stopped" if ev.stopped else "finished"
            job.error = ev.stopped
        self._touch(job)

    def cancel(self, job_id: str) -> SweepJob:
        """Ask a running sweep to stop (the runner cancels its work within a batch)."""
        job = self.get(job_id)
        job.cancel.set()
        return job

    def load(self, filename: str, data: bytes, read_rows: Callable[[Path, int | None], Mapping[str, Any]]
             ) -> SweepJob:
        """A results file (``twin sweep --out``: .parquet, .csv, .jsonl) as a finished sweep: at most
        ``max_rows`` rows (``read_rows(path, max_rows)`` counts them before expanding them) and at
        most ``max_kept_bytes`` as columns.
        """
        suffix = Path(filename).suffix.lower()
        if suffix not in (".parquet", ".csv", ".jsonl"):
            raise SpecError("file", f"must be a .parquet, .csv or .jsonl rows file of twin sweep --out "
                                    f"(got {filename!r})")
        with tempfile.TemporaryDirectory(prefix="twin-web-") as tmp:
            path = Path(tmp) / f"rows{suffix}"
            path.write_bytes(data)
            columns = read_rows(path, self.max_rows)
        if "point_id" not in columns or "feasible" not in columns:
            raise SpecError("file", "is not a twin sweep rows file (no point_id and feasible columns)")
        axes = tuple(c for c in columns if c.startswith(("plan.", "cluster.", "model.", "failures.", "software.")))
        loaded = LoadedRows(columns, axes)
        if loaded.nbytes > self.max_kept_bytes:
            raise TooLargeError("file", f"holds {loaded.nbytes:,} bytes as columns; the sweeps kept may hold "
                                        f"{self.max_kept_bytes:,} together")
        job = SweepJob(id=f"s{next(self._ids)}", name=Path(filename).name, source="file", axes=axes, state="loaded",
                       loaded=loaded)
        job.total = job.done = len(loaded)
        job.failed = loaded.failed()
        self._add(job)
        return job
