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
takes to drain at the pool's recent service time.

A refusal is answered on the thread that accepts calls, as it arrives (:class:`InlineRefusals`):
gRPC's sync server hands every call to a pool, and a pool thread would first wait for the
request message (a round trip through the accepting thread) and then compete for the GIL
with the busy workers, and a side pool of its own would be one more queue without a bound.
Here the refusal sends its status at once, without reading the request (as gRPC's own
``maximum_concurrent_rpcs`` rejection does): 0.29-0.34 ms of server CPU per refusal against
0.42-0.63 ms through a pool thread (``benchmarks/bench_refusals.py``, 2 shared cores). It does
not help calls still waiting in gRPC core for the accepting thread: far past capacity (about
4x on 2 cores) refusing alone needs more GIL time than there is, and those calls wait seconds.

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
# Where gRPC's sync server looks for a behaviour's own pool (``grpc._server``,
# ``_select_thread_pool_for_behavior``: an attribute holding a ThreadPoolExecutor).
POOL_ATTRIBUTE = "experimental_thread_pool"


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

    @property
    def queued(self) -> int:
        """Calls submitted and not yet started."""
        return self._queued

    def _started(self) -> None:
        with self._lock:
            self._queued -= 1

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue ``fn``, counting it until a worker takes it."""

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

    def drain_time_s(self) -> float:
        """How long the current backlog takes to start, at the recent service time."""
        return self._queued * self.mean_service_s / self.workers


class _NoRequest:
    """Stands for the request a refusal never reads."""


_NO_REQUEST = _NoRequest()


def _no_request() -> _NoRequest:
    return _NO_REQUEST


class InlineRefusals(ThreadPoolExecutor):
    """The pool of the refusal behaviour: runs it at once on the submitting thread (gRPC's
    accepting thread), without waiting for the request message.

    gRPC submits ``(..., behaviour, request_thunk, ...)``; the thunk would block until the
    accepting thread itself delivers the message, so it is replaced by one returning a
    placeholder (the refusal ignores its request). Were the arguments ever laid out otherwise
    (a gRPC change), the call goes to this pool's one thread instead: slower, still correct.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="twin-refusals")
        self.inline = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run a refusal now (see the class); anything else on the pool's thread."""
        at = next((i for i, arg in enumerate(args) if getattr(arg, POOL_ATTRIBUTE, None) is self), -1)
        if at < 0 or at + 1 >= len(args) or not callable(args[at + 1]):
            return super().submit(fn, *args, **kwargs)
        call = (*args[:at + 1], _no_request, *args[at + 2:])
        future: Future[Any] = Future()
        self.inline += 1  # before the call: the client may see the status before it returns
        try:
            future.set_result(fn(*call, **kwargs))
        except BaseException as err:  # handed to the future, as a pool thread would
            future.set_exception(err)
        return future


def _refuse(handler: grpc.RpcMethodHandler, status: grpc.Status, pool: InlineRefusals) -> grpc.RpcMethodHandler:
    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort_with_status(status)

    setattr(refuse, POOL_ATTRIBUTE, pool)
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
        self.refusals = InlineRefusals()

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
                                             field="limits.max_queued_rpcs"), self.refusals)

    def shutdown(self) -> None:
        """Stop the refusal pool's thread (started only if a refusal ever fell back to it)."""
        self.refusals.shutdown(wait=False, cancel_futures=True)
