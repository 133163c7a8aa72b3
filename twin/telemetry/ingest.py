"""A bounded ingest queue with one writer thread that applies and commits in batches.

Request handlers decode their OTLP request, then :meth:`IngestQueue.submit` the points
and wait for the commit. The writer takes everything queued, applies it to the live
state and commits it in one SQLite transaction (group commit: one fsync-free WAL append
for many requests), then wakes the handlers. When the points waiting exceed the bound,
``submit`` raises :class:`Overloaded` at once, so the receiver answers UNAVAILABLE with a
retry delay (OTLP's throttling rule) instead of queueing without limit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

from twin.telemetry.state import ApplyResult, Block

log = logging.getLogger(__name__)


class Overloaded(Exception):
    """The ingest queue is full (or too many requests wait to decode); retry after ``retry_after_s``."""

    def __init__(self, pending: int, retry_after_s: float, what: str = "") -> None:
        super().__init__(f"{what or f'ingest queue full ({pending} points waiting)'}; retry in {retry_after_s:g} s")
        self.retry_after_s = retry_after_s


class DecodeSlots:
    """At most ``slots`` requests decode at once; at most ``max_waiting`` more wait for a slot,
    and any beyond are refused at once with :class:`Overloaded` (as is one still waiting at its
    deadline).

    Decoding is Python under one GIL: threads decoding at once add no throughput, and each one
    runnable is one more that Health, a refusal and every other call wait behind for the GIL. A
    thread waiting on the semaphore does not compete for it. Counted per request, whatever its
    transport (OTLP/gRPC on either port, OTLP/HTTP, remote write).
    """

    def __init__(self, slots: int, max_waiting: int, retry_after_s: float, waiting_for: str = "to be decoded") -> None:
        self._sem = threading.BoundedSemaphore(slots)
        self.max_waiting = max_waiting
        self.waiting_for = waiting_for  # what a waiting request waits for, for the refusal's message
        self.retry_after_s = retry_after_s
        self._lock = threading.Lock()
        self._waiting = 0
        self.refused = 0

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot now."""
        return self._waiting

    @contextlib.contextmanager
    def hold(self, deadline: float | None = None) -> Iterator[None]:
        """A decoding slot for the ``with`` block (``deadline``: ``time.monotonic()`` to give up at)."""
        with self._lock:
            if self._waiting >= self.max_waiting:
                self.refused += 1
                raise Overloaded(0, self.retry_after_s, f"{self._waiting} requests wait {self.waiting_for}")
            self._waiting += 1
        try:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            got = self._sem.acquire(timeout=left)
        finally:
            with self._lock:
                self._waiting -= 1
        if not got:
            with self._lock:
                self.refused += 1
            raise Overloaded(0, self.retry_after_s, f"no slot freed before the request's deadline ({self.waiting_for})")
        try:
            yield
        finally:
            self._sem.release()


@dataclass
class Item:
    """One request's points (``count`` of them) and the future its handler waits on."""

    points: list[Block]
    count: int
    future: Future[ApplyResult]


class IngestQueue:
    """Bounded queue + writer thread calling ``apply_batch(items)`` (which resolves the futures)."""

    def __init__(self, apply_batch: Callable[[list[Item]], None], max_pending_points: int,
                 retry_after_s: float = 1.0, name: str = "twin-telemetry-ingest") -> None:
        self._apply = apply_batch
        self.max_pending = max_pending_points
        self.retry_after_s = retry_after_s
        self._items: list[Item] = []
        self._pending = 0
        self._cv = threading.Condition()
        self._stop = False
        self.refused = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def pending_points(self) -> int:
        """Points queued and not yet applied."""
        return self._pending

    def check_room(self) -> None:
        """Raise :class:`Overloaded` when the queue is at its bound already, so a request that
        :meth:`submit` would refuse after its decoding is refused before it, without the decoding
        (past capacity the writer is the bottleneck, and each such decode took CPU from it and
        made the refusal wait its turn for a decoding slot).
        """
        with self._cv:
            if self._stop or self._pending >= self.max_pending:
                self.refused += 1
                raise Overloaded(self._pending, self.retry_after_s)

    def submit(self, points: list[Block], count: int) -> Future[ApplyResult]:
        """Queue ``points`` (``count`` of them); raises :class:`Overloaded` when the bound would be exceeded."""
        fut: Future[ApplyResult] = Future()
        with self._cv:
            if self._stop:
                raise Overloaded(self._pending, self.retry_after_s)
            # An empty queue always takes one request, however large, so a single big
            # request cannot be refused forever.
            if self._pending and self._pending + count > self.max_pending:
                self.refused += 1
                raise Overloaded(self._pending, self.retry_after_s)
            self._items.append(Item(points, count, fut))
            self._pending += count
            self._cv.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._items and not self._stop:
                    self._cv.wait()
                if not self._items and self._stop:
                    return
                items, self._items = self._items, []
            try:
                self._apply(items)
            except Exception as err:  # the batch failed to commit: tell every waiting handler
                log.exception("telemetry ingest batch failed")
                for it in items:
                    if not it.future.done():
                        it.future.set_exception(err)
            finally:
                with self._cv:
                    self._pending -= sum(it.count for it in items)

    def close(self, timeout: float = 10.0) -> None:
        """Apply what is queued, then stop the writer."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout)
