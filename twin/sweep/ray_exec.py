"""The Ray executor: coarse batches on a Ray cluster, reduced inside each task.

Connect order (DESIGN.md): an existing Ray session in this process -> an explicit address
(``--ray-address``) -> ``RAY_ADDRESS`` -> start a local Ray (dashboard off). Only a Ray we
started is shut down; a session we joined is left alone; a cluster we connected to is
only disconnected from.

Token authentication: Ray >= 2.59 enables it by default for local clusters (a token in
``~/.ray/auth_token``), but a client given an explicit address does not turn it on by
itself. When ``RAY_AUTH_MODE`` is unset and a token is available (``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH`` or the default file), token mode is enabled before connecting,
which also works against clusters without authentication.

Work: a job that pickles below Ray's inline-argument limit (a sweep spec: ~1 KB) rides in each
task's spec; a bigger one is ``ray.put`` once (see :func:`_job_argument`). Batches of contiguous
point ids go out as tasks, at most ``2 x workers`` in flight; a ``ray.wait`` loop yields each
finished batch (and a heartbeat every half second). A task whose worker died (killed, OOM, node lost) is
resubmitted (up to ``max_retries`` times); results are merged by batch index, so every
point counts exactly once. Cancelling cancels the in-flight tasks with ``ray.cancel``: first
without force (a ``KeyboardInterrupt`` in the batch, which leaves the worker and its warm engines
alive); a task still running ``CANCEL_GRACE_S`` later (the interrupt was lost: swallowed by code that
ignores it, or raced with the task's start) is cancelled again with ``force=True``, which kills
its worker process; Ray starts a fresh one. A cancelled sweep therefore leaves no batch running.
"""

from __future__ import annotations

import collections
import logging
import os
import pickle
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from twin.core.errors import TwinError
from twin.core.extras import needs_extra
from twin.sweep.allocator import enabled as allocator_enabled
from twin.sweep.allocator import retain_freed_memory
from twin.sweep.job import EngineSettings, Job, engine_for, worker_for
from twin.sweep.reduce import BatchResult

log = logging.getLogger(__name__)

HEARTBEAT_S = 0.5
# A non-forced cancel stops a batch within milliseconds (the interrupt lands at the next bytecode);
# one still running after the grace has lost it and is force-killed, then waited for again.
CANCEL_GRACE_S = 5.0
CANCEL_FORCE_WAIT_S = 5.0
# Ray inlines a task argument below max_direct_call_object_size (100 KiB, Ray's
# src/ray/common/ray_config_def.h) in the task spec itself; a bigger one goes to the object store.
INLINE_JOB_BYTES = 100 * 1024


def _token_available() -> bool:
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                or (Path.home() / ".ray" / "auth_token").is_file())


def _enable_token_auth_if_available() -> None:
    """Client side of Ray token auth for explicit addresses (see module docstring)."""
    if os.environ.get("RAY_AUTH_MODE") is not None or not _token_available():
        return
    try:  # Ray's own switch (sets RAY_AUTH_MODE and refreshes its cached config)
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    except (ImportError, AttributeError):
        os.environ["RAY_AUTH_MODE"] = "token"


def import_ray() -> Any:
    """Import Ray (an optional dependency) with a clear error when it is missing."""
    # A precondition of the request, not a fault of the twin (FAILED_PRECONDITION over gRPC).
    with needs_extra("ray", "the Ray executor", field="executor"):
        import ray
    return ray


def _run_batch(job: Job, index: int, start: int, stop: int, retain_memory: bool = False) -> BatchResult:
    """The task: evaluate and reduce one batch in this worker process. ``retain_memory``: keep
    the batches' freed memory in this worker (``twin.sweep.allocator``); the driver asks it only
    of the workers of a Ray it started itself, never of a shared cluster's long-lived workers.
    """
    if retain_memory:
        retain_freed_memory()
    return worker_for(job).run(index, start, stop)


def _job_argument(ray: Any, job: Job) -> Any:
    """The job as each batch task's argument: the job itself when it pickles small enough for Ray
    to inline in the task spec, else one ``ray.put`` reference for all tasks.

    An inlined argument is read from the task spec; a reference is fetched from the object store
    by each task (measured here: ~0.5-1 ms more a task on 2 CPUs, the gap between a worker's
    tasks 4.0-4.7 ms by value against 4.6-5.9 ms by reference). The size is the standard
    pickle's (what Ray's cloudpickle writes for importable classes); a job the standard pickle
    refuses (a recipe defined in a function) goes by reference.
    """
    try:
        small = len(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)) < INLINE_JOB_BYTES
    except (pickle.PicklingError, TypeError, AttributeError):
        small = False
    return job if small else ray.put(job)


def _warm_up(settings: tuple[EngineSettings, ...]) -> int:
    """The warm-up task: import the twin and build its engines in this worker process."""
    for s in settings:
        engine_for(s)
    return os.getpid()


# Ray waits a fixed 30 s for its raylet to register (ray/_private/node.py,
# raylet_start_wait_time_s); a first start on a busy 2-core machine can miss that while
# it fills its caches, and a second attempt then succeeds.
LOCAL_START_ATTEMPTS = 2


def _start_local_ray(ray: Any, num_cpus: int | None) -> None:
    """Start a Ray cluster in this process, retrying a start-up that timed out."""
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            return
        except Exception as err:  # Ray raises a bare Exception for a start-up timeout
            ray.shutdown()
            if attempt == LOCAL_START_ATTEMPTS:
                raise TwinError(f"could not start a local Ray cluster ({attempt} attempts): {err}") from err
            log.warning("local Ray start-up failed (%s); retrying", err)


class RayExecutor:
    """Runs sweep batches as Ray tasks (see module docstring)."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None, *, max_retries: int = 3,
                 max_in_flight: int | None = None, warm: tuple[EngineSettings, ...] = (EngineSettings(),)) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self.retried = 0            # totals over every sweep run on this executor
        self.cancelled_tasks = 0
        self.forced_cancels = 0     # cancelled tasks that outlived the grace and had their worker killed
        self.mode = ""            # "session" (joined), "connected" (explicit address) or "started"
        self._lock = threading.Lock()
        if address is None and os.environ.get("RAY_ADDRESS"):
            self.address = os.environ["RAY_ADDRESS"]
        if self.address:  # must happen before Ray is imported to take effect everywhere
            _enable_token_auth_if_available()
        ray = import_ray()
        if ray.is_initialized():
            self.mode = "session"
        elif self.address:
            try:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False)
            except Exception as err:  # ConnectionError, AuthenticationError, RuntimeError ...
                hint = ""
                text = f"{err} {err.__cause__ or ''}"
                if "uth" in text:
                    hint = ("; the cluster uses token authentication: set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH "
                            "(the head's `ray get-auth-token`)")
                raise TwinError(f"cannot connect to the Ray cluster at {self.address!r}: {err}{hint}") from err
            self.mode = "connected"
        else:
            _start_local_ray(ray, num_cpus)
            self.mode = "started"
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.max_in_flight = max_in_flight or 2 * self.workers
        self._task = ray.remote(num_cpus=1, max_retries=0)(_run_batch)
        self._ray = ray
        self.warmed = self.warm_up(warm) if warm else 0

    def warm_up(self, settings: tuple[EngineSettings, ...]) -> int:
        """Import the twin and build engines with ``settings`` in the workers (part of start-up).

        A fresh Ray worker takes ~0.4 s to import the twin and build an engine; doing it once
        per worker here, before any sweep, keeps that out of every sweep's first batches.
        One task per CPU, run together, so each lands in its own worker; returns how many
        distinct worker processes were warmed.
        """
        ray = self._ray
        task = ray.remote(num_cpus=1, max_retries=self.max_retries)(_warm_up)
        pids = ray.get([task.remote(tuple(settings)) for _ in range(self.workers)])
        return len(set(pids))

    @property
    def owns_cluster(self) -> bool:
        """Whether close() shuts the Ray cluster down (only one we started)."""
        return self.mode == "started"

    def map(self, job: Job, batches: list[tuple[int, int, int]], cancel: threading.Event,
            stats: dict[str, int] | None = None) -> Iterator[BatchResult | None]:
        ray = self._ray
        from ray.exceptions import RayTaskError, TaskCancelledError

        stats = stats if stats is not None else {}
        stats.setdefault("retried", 0)
        stats.setdefault("cancelled_tasks", 0)
        job_arg = _job_argument(ray, job)
        # Workers of a Ray this executor started serve only its sweeps: they may keep their freed
        # memory (the driver's TWIN_SWEEP_RETAIN_MEMORY decides); a joined cluster's workers are left as they are.
        retain = self.owns_cluster and allocator_enabled()
        pending: collections.deque[tuple[tuple[int, int, int], int]] = collections.deque((b, 0) for b in batches)
        in_flight: dict[Any, tuple[tuple[int, int, int], int]] = {}
        try:
            while (pending or in_flight) and not cancel.is_set():
                while pending and len(in_flight) < self.max_in_flight:
                    b, attempts = pending.popleft()
                    in_flight[self._task.remote(job_arg, *b, retain)] = (b, attempts)
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=HEARTBEAT_S)
                if not ready:
                    yield None
                    continue
                for ref in ready:
                    b, attempts = in_flight.pop(ref)
                    try:
                        result = ray.get(ref)
                    except TaskCancelledError:
                        continue
                    except RayTaskError as err:  # the task itself raised: not a lost worker
                        cause = err.cause if hasattr(err, "cause") else None
                        if isinstance(cause, TwinError):
                            raise cause from err
                        raise TwinError(f"sweep batch {b[0]} failed: {err}") from err
                    except ray.exceptions.RayError as err:  # worker died, node lost, object lost
                        if attempts >= self.max_retries:
                            raise TwinError(f"sweep batch {b[0]} lost {attempts + 1} times; last: {err}") from err
                        log.warning("sweep batch %d lost (%s); retrying", b[0], type(err).__name__)
                        with self._lock:
                            self.retried += 1
                        stats["retried"] += 1
                        pending.appendleft((b, attempts + 1))
                        continue
                    yield result
        finally:
            if in_flight:
                self._cancel(list(in_flight))
                stats["cancelled_tasks"] += len(in_flight)

    def _cancel(self, refs: list[Any]) -> None:
        """Cancel ``refs`` and wait (bounded) until they have stopped, so their CPUs are free:
        non-forced first, then forced for any still running after ``CANCEL_GRACE_S``.
        """
        ray = self._ray
        self._send_cancel(refs, force=False)
        _, running = ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
        if running:
            log.warning("%d cancelled sweep batch(es) still running after %.0f s; killing their workers",
                        len(running), CANCEL_GRACE_S)
            self._send_cancel(running, force=True)
            ray.wait(running, num_returns=len(running), timeout=CANCEL_FORCE_WAIT_S)
        with self._lock:
            self.cancelled_tasks += len(refs)
            self.forced_cancels += len(running)

    def _send_cancel(self, refs: list[Any], *, force: bool) -> None:
        for ref in refs:
            try:
                self._ray.cancel(ref, force=force, recursive=True)
            except Exception as err:  # already finished or lost: nothing to stop
                log.debug("cancel %s (force=%s): %s", ref, force, err)

    def mapper(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> list[Any]:
        """``map(fn, tasks)`` as Ray tasks, results in task order (e.g. failure Monte-Carlo
        batches: ``twin.core.failures.montecarlo.run(..., mapper=executor.mapper)``).

        Each task is retried up to ``max_retries`` times if its worker dies.
        """
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=self.max_retries)(fn)
        return ray.get([remote.remote(t) for t in tasks])

    def close(self) -> None:
        """Shut down a Ray we started; disconnect from a cluster we connected to; leave a joined session."""
        ray = self._ray
        if self.mode in ("started", "connected") and ray.is_initialized():
            ray.shutdown()
        self.mode = "closed"
