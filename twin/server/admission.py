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
``maximum_concurrent_rpcs`` rejection does), and one status and handler serve every refusal
of an episode: 0.25-0.27 ms of server CPU per refusal against 0.30-0.34 ms building them per
call and 0.42-0.63 ms through a pool thread (``benchmarks/bench_refusals.py``, 2 shared cores).

Far past capacity the accepting thread itself falls behind (it competes for the GIL with
the busy workers) and calls wait in gRPC core, where the pool's backlog does not see them.
:class:`twin.server.shedding.StandingQueueGate` counts those too (gRPC core's own count of
calls received, less the calls seen here) and, once the calls waiting reach the bound,
refuses every unary call until a fresh count shows the queue drained: the workers get
nothing new, the accepting thread gets the GIL, and refusals come back in milliseconds
instead of seconds.

Health and reflection are never refused (a busy server is not a dead one: a refused liveness
probe would get the pod restarted), and Health's Check runs on a pool of its own
(``health_pool``), so a probe never waits behind the server's workers: under 2-3x load its p99
reached 0.56-0.78 s on the server's pool (issue 39). Streams have their own limits
(``limits.max_sweep_streams``): a stream past its limit (``ServerContext.stream_limits``) is
refused as it arrives, on the accepting thread like a shed unary call, instead of taking a
worker to find out; 196 sweep streams refused on workers made a Predict take 3.6-4.2 s.

Predict and Validate (:data:`MODEL_METHODS`) run on a pool of their own (``limits.model_workers``
threads, default 1) rather than on the server's (``workers``, 8). Their work is Python under
one GIL with no lock or I/O to wait for, so a second thread adds no throughput, while every
runnable thread is one more for the accepting thread to wait behind for the GIL, and that wait
is what a refusal costs past capacity. Measured with ``benchmarks/bench_server.py`` (2 shared
cores, alternated): at 2,000/s, 8 threads answered refusals in 13.6-18.0 ms at p50, 2 threads in
4.3-5.3 ms and 1 thread in 1.9-3.8 ms, serving as many calls (1,290-1,760/s with 1 or 2); at
4,000/s, 2 threads in 13.5-17.3 ms and 1 thread in 2.2-2.5 ms (1,170-1,190 against 1,300-1,350
calls/s served); at 500/s, p99 3.0-4.6 ms either way. Everything else keeps the server's pool:
streams, ingest (an OTLP export waits for the group commit: more in flight make larger
commits), the long model calls (PredictFleet, EvaluateFailures, GetDivergence, Calibrate: many
evaluations each, which would hold every Predict back) and PredictLive (it waits for the
telemetry state's lock, which the ingest writer holds while it applies a batch).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import grpc

from twin.server.shedding import CoreArrivals, StandingQueueGate
from twin.server.token_auth import OPEN_SERVICES
from twin.wire.status_table import retry_status

# While shedding, calls are still served while fewer than this many are queued or running:
# with the GIL, one running call already uses what Python has; a second hides the gaps while
# a reply is sent (measured in benchmarks/bench_server.py past capacity, see the README).
KEEP_BUSY = 2
# The smallest retry hint: below ~50 ms a client's retry would land in the same burst.
MIN_RETRY_AFTER_S = 0.05
# Weight of the newest run time in the pool's running mean (about the last 20 calls).
SERVICE_TIME_WEIGHT = 0.05
# The longest run time one call adds to that mean (unary calls take milliseconds).
MAX_SERVICE_SAMPLE_S = 1.0
# Where gRPC's sync server looks for a behaviour's own pool (``grpc._server``,
# ``_select_thread_pool_for_behavior``: an attribute holding a ThreadPoolExecutor).
POOL_ATTRIBUTE = "experimental_thread_pool"
# The unary calls whose work is one evaluation of the model and nothing to wait for, the ones
# that come at a high rate (see the module docstring for the calls that stay on the server's pool).
MODEL_METHODS = frozenset({"/twin.rpc.v1.TwinService/Predict", "/twin.rpc.v1.TwinService/Validate"})
HEALTH_CHECK = "/grpc.health.v1.Health/Check"  # runs on the health pool (health_pool)
# Seconds a stream refused past its limit is told to wait (a sweep holds its slot for seconds to
# minutes; the Sweep servicer's own refusal says the same, twin.server.services.STREAM_RETRY_S).
STREAM_RETRY_S = 5
# Threads answering Health's Check: one answers in microseconds; a second covers a probe arriving
# while the first waits for the GIL.
HEALTH_WORKERS = 2


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
        self._unfinished = 0
        self.mean_service_s = 0.0

    @property
    def queued(self) -> int:
        """Calls submitted and not yet started."""
        return self._queued

    @property
    def idle(self) -> bool:
        """No call queued or running."""
        return self._unfinished == 0

    @property
    def unfinished(self) -> int:
        """Calls queued or running."""
        return self._unfinished

    def _started(self) -> None:
        with self._lock:
            self._queued -= 1

    def _finished(self) -> None:
        with self._lock:
            self._unfinished -= 1

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
                self._finished()

        with self._lock:
            self._queued += 1
            self._unfinished += 1
        try:
            future = super().submit(run)
        except BaseException:
            self._started()
            self._finished()
            raise

        def uncount_if_cancelled(f: Future[Any]) -> None:
            # A future can be cancelled only before it starts, so ``run`` never uncounted it.
            if f.cancelled():
                self._started()
                self._finished()

        future.add_done_callback(uncount_if_cancelled)
        return future

    def drain_time_s(self, waiting: int) -> float:
        """How long ``waiting`` calls take to start, at the recent service time."""
        return waiting * self.mean_service_s / self.workers


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


def _refuse(status: grpc.Status, pool: InlineRefusals) -> grpc.RpcMethodHandler:
    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort_with_status(status)

    setattr(refuse, POOL_ATTRIBUTE, pool)
    # No serializers: the request is never read and no response is ever sent.
    return grpc.unary_unary_rpc_method_handler(refuse, request_deserializer=None, response_serializer=None)


def _on_pool(handler: grpc.RpcMethodHandler, pool: CountingExecutor) -> grpc.RpcMethodHandler:
    """``handler`` run on ``pool`` instead of the server's pool (gRPC reads the behaviour's
    ``POOL_ATTRIBUTE``; a bound method cannot carry one, so a function calls it).
    """
    inner = handler.unary_unary

    def run(request: Any, context: grpc.ServicerContext) -> Any:
        return inner(request, context)

    setattr(run, POOL_ATTRIBUTE, pool)
    return grpc.unary_unary_rpc_method_handler(run, request_deserializer=handler.request_deserializer,
                                               response_serializer=handler.response_serializer)


class AdmissionInterceptor(grpc.ServerInterceptor):
    """Refuses unary calls while too many wait: ``max_queued`` for a worker of their pool, or,
    counting those still waiting in gRPC core to be accepted, as :class:`StandingQueueGate`
    decides (the gate's counter of calls in core is attached with :meth:`watch`).

    ``model_pool``: where the calls of ``model_methods`` (full method names) run (see the module
    docstring); None: every call runs on ``executor``, the server's pool.
    """

    def __init__(self, executor: CountingExecutor, max_queued: int,
                 open_services: tuple[str, ...] = OPEN_SERVICES, gate: StandingQueueGate | None = None,
                 keep_busy: int = KEEP_BUSY, model_pool: CountingExecutor | None = None,
                 model_methods: frozenset[str] = MODEL_METHODS, health_pool: CountingExecutor | None = None,
                 stream_limits: dict[str, Callable[[], str | None]] | None = None) -> None:
        self._executor = executor
        self.model_pool = model_pool
        self._model_methods = model_methods
        self.health_pool = health_pool
        self.stream_limits = stream_limits if stream_limits is not None else {}
        self._stream_refusals: dict[tuple[str, str], grpc.RpcMethodHandler] = {}
        # The last handler seen per model method and its pooled form: gRPC's generic handlers
        # hand out the same handler object every call, so it is wrapped once.
        self._pooled: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._max_queued = max_queued
        self._open = tuple(f"/{s}/" for s in open_services)
        self.refused = 0
        self.refused_streams = 0
        self.keep_busy = keep_busy
        self.kept_busy = 0  # calls served while shedding, to keep the workers busy
        self.refusals = InlineRefusals()
        # Shedding stops at a quarter of the bound: low enough that the queue has drained (the
        # accepting thread has caught up), high enough not to wait for a last straggler.
        self.gate = gate if gate is not None else StandingQueueGate(high=max_queued, low=max_queued // 4)
        self._shedding: grpc.RpcMethodHandler | None = None

    def watch(self, arrivals: Callable[[], int | None] | None) -> None:
        """Count the calls waiting in gRPC core with ``arrivals`` (:class:`CoreArrivals`)."""
        self.gate.watch(arrivals)

    def watching(self, make: Callable[[], grpc.Server]) -> grpc.Server:
        """The gRPC server ``make`` creates (the one this interceptor sheds for), with the calls
        waiting in its core queue counted (:meth:`watch`). Without that count the pool's bound
        alone is blind to the queue in core: past capacity it grew to gRPC's own bound, and at 2x
        load the dedicated OTLP port answered 852-1,606 exports CANCELLED and its refusals took
        0.26-0.69 s at p50 (issue 39, ``benchmarks/bench_overload.py``).
        """
        server, arrivals = CoreArrivals.around(make)
        self.watch(arrivals)
        return server

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
                          handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        executor = self._executor
        model_pool = self.model_pool
        self.gate.arrived(executor.idle and (model_pool is None or model_pool.idle))
        handler = continuation(handler_call_details)
        method = handler_call_details.method or ""
        if handler is None:
            return handler
        if handler.request_streaming or handler.response_streaming:
            limit = self.stream_limits.get(method)
            why = limit() if limit is not None else None
            return handler if why is None else self._refuse_stream(method, why)
        if method == HEALTH_CHECK and self.health_pool is not None:
            return self._pooled_handler(method, handler, self.health_pool)
        if method.startswith(self._open):
            return handler
        pool = executor
        if model_pool is not None and method in self._model_methods:
            pool = model_pool
            handler = self._pooled_handler(method, handler, model_pool)
        shedding = self.gate.shedding
        if not self.gate.refuse(pool.queued):
            return handler
        if pool.unfinished < self.keep_busy:
            # Shedding, yet the workers are (nearly) out of work: serve this one. Refusing
            # everything left the workers idle while the queue in core drained, and served
            # 4-20% of capacity past 2x load; a worker or two keep the throughput (Python runs
            # one thread at a time anyway) and compete with the accepting thread far less than
            # a full pool does.
            self.kept_busy += 1
            return handler
        self.refused += 1
        if shedding and self._shedding is not None:
            return self._shedding
        # A new episode: one status for every call refused until it ends (built once, not per
        # call; a refusal never sends a response, so one handler serves every method).
        waiting = self.gate.waiting
        wait = max(MIN_RETRY_AFTER_S, pool.drain_time_s(waiting))
        message = (f"limits.max_queued_rpcs: {waiting} calls wait to be accepted or for one of {pool.workers} "
                   f"workers (the limit is {self._max_queued}); unary calls are refused until that queue drains; "
                   f"retry in {wait:.2f} s")
        self._shedding = _refuse(retry_status(grpc.StatusCode.RESOURCE_EXHAUSTED, message, wait,
                                              field="limits.max_queued_rpcs"), self.refusals)
        return self._shedding

    def _pooled_handler(self, method: str, handler: grpc.RpcMethodHandler, pool: CountingExecutor
                        ) -> grpc.RpcMethodHandler:
        """``handler`` on ``pool`` (wrapped once per handler object: generic handlers reuse theirs)."""
        seen = self._pooled.get(method)
        if seen is None or seen[0] is not handler:
            seen = self._pooled[method] = (handler, _on_pool(handler, pool))
        return seen[1]

    def _refuse_stream(self, method: str, why: str) -> grpc.RpcMethodHandler:
        """A refusal of a stream past its limit, sent as it arrives (built once per message)."""
        self.refused_streams += 1
        refusal = self._stream_refusals.get((method, why))
        if refusal is None:
            refusal = self._stream_refusals[(method, why)] = _refuse(
                retry_status(grpc.StatusCode.RESOURCE_EXHAUSTED, f"limits.max_sweep_streams: {why}", STREAM_RETRY_S,
                             field="limits.max_sweep_streams"), self.refusals)
        return refusal

    def shutdown(self) -> None:
        """Stop the refusal pool's thread (started only if a refusal ever fell back to it)."""
        self.refusals.shutdown(wait=False, cancel_futures=True)
