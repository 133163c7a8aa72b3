"""Load shedding: beyond what the workers can serve, a call is refused at once, not queued.

gRPC's synchronous server hands every call to a thread pool whose queue has no bound
(``concurrent.futures.ThreadPoolExecutor``), so past capacity each call waits behind all
the others and latency grows with the backlog until clients time out. gRPC's own
``maximum_concurrent_rpcs`` counts running streams too and refuses without saying when to
come back. Here the pool counts the calls waiting for a worker (:class:`CountingExecutor`)
and an interceptor, which gRPC runs on its polling thread as a call arrives (before the
call is queued), refuses a unary call when ``limits.max_queued_rpcs`` calls already wait:
RESOURCE_EXHAUSTED naming that field, with ``google.rpc.RetryInfo`` (and a plain
``retry-after-s`` trailer, as the sweep stream limit sends) set to the time the backlog
takes to drain at the pool's recent service time. gRPC still runs the refusal through the
pool it was given (it reads the request and sends the status there), so the pool sends
work it recognises as a refusal to a one-thread side pool: a refusal never waits behind
the backlog it is refusing, even when every worker is held by a slow call.

Health and reflection are never refused (a busy server is not a dead one: a refused liveness
probe would get the pod restarted), and streams have their own limit
(``limits.max_sweep_streams``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import grpc

from twin.server.auth import OPEN_SERVICES
from twin.wire.errors import retry_status

# The smallest retry hint: below ~50 ms a client's retry would land in the same burst.
MIN_RETRY_AFTER_S = 0.05
# Weight of the newest run time in the pool's running mean (about the last 20 calls).
SERVICE_TIME_WEIGHT = 0.05
# The longest run time one call adds to that mean (unary calls take milliseconds).
MAX_SERVICE_SAMPLE_S = 1.0
# Marks a handler behaviour that must not wait in the pool's queue (gRPC passes the
# behaviour to ``submit`` among its arguments).
BYPASS_QUEUE = "_twin_bypass_queue"


class CountingExecutor(ThreadPoolExecutor):
    """A thread pool that knows how many submitted calls wait for a worker, and how long a call runs.

    ``queued`` rises on submit and falls when the call starts (or when its future is cancelled
    before it starts), so it is the backlog an arriving call would wait behind.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = "") -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self.workers = max_workers
        self._lock = threading.Lock()
        self._queued = 0
        self.mean_service_s = 0.0
        # Refusals take microseconds; one thread answers thousands a second.
        self._side = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{thread_name_prefix}-refusals")

    @property
    def queued(self) -> int:
        """Calls submitted and not yet started."""
        return self._queued

    def _started(self) -> None:
        with self._lock:
            self._queued -= 1

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue ``fn``, counting it until a worker takes it (a refusal goes to the side pool)."""
        if any(getattr(arg, BYPASS_QUEUE, False) for arg in args):
            return self._side.submit(fn, *args, **kwargs)
        def run() -> Any:
            self._started()
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                # A long stream (a sweep) is not what a queued unary call waits for: capped.
                took = min(time.perf_counter() - t0, MAX_SERVICE_SAMPLE_S)
                self.mean_service_s += SERVICE_TIME_WEIGHT * (took - self.mean_service_s)

        with self._lock:
            self._queued += 1
        try:
            future = super().submit(run)
        except BaseException:
            self._started()
            raise

        def uncount_if_cancelled(f: Future[Any]) -> None:
            # A future can be cancelled only before it starts, so ``run`` never uncounted it.
            if f.cancelled():
                self._started()

        future.add_done_callback(uncount_if_cancelled)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Shut down the workers and the side pool."""
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        self._side.shutdown(wait=wait, cancel_futures=cancel_futures)

    def drain_time_s(self) -> float:
        """How long the current backlog takes to start, at the recent service time."""
        return self._queued * self.mean_service_s / self.workers


def _refuse(handler: grpc.RpcMethodHandler, status: grpc.Status) -> grpc.RpcMethodHandler:
    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort_with_status(status)

    setattr(refuse, BYPASS_QUEUE, True)
    return grpc.unary_unary_rpc_method_handler(
        refuse, request_deserializer=None, response_serializer=handler.response_serializer)


class AdmissionInterceptor(grpc.ServerInterceptor):
    """Refuses unary calls while ``max_queued`` calls already wait for a worker of ``executor``."""

    def __init__(self, executor: CountingExecutor, max_queued: int,
                 open_services: tuple[str, ...] = OPEN_SERVICES) -> None:
        self._executor = executor
        self._max_queued = max_queued
        self._open = tuple(f"/{s}/" for s in open_services)
        self.refused = 0

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
                          handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        queued = self._executor.queued
        if (handler is None or queued < self._max_queued or handler.request_streaming
                or handler.response_streaming or (handler_call_details.method or "").startswith(self._open)):
            return handler
        self.refused += 1
        wait = max(MIN_RETRY_AFTER_S, self._executor.drain_time_s())
        message = (f"limits.max_queued_rpcs: {queued} calls already wait for one of {self._executor.workers} "
                   f"workers (the limit is {self._max_queued}); retry in {wait:.2f} s")
        return _refuse(handler, retry_status(grpc.StatusCode.RESOURCE_EXHAUSTED, message, wait,
                                             field="limits.max_queued_rpcs"))
