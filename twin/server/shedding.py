"""When to refuse every unary call: a standing queue in front of gRPC's accepting thread.

gRPC's synchronous server has one thread that accepts calls (its completion-queue poller).
Past capacity that thread competes for the GIL with the busy workers and falls behind; the
calls it has not taken yet wait in gRPC core, where the worker pool's backlog does not see
them, and the pool's bound (``limits.max_queued_rpcs``) stops being hit: the workers keep up
with the trickle the starved thread hands them while the queue in core grows to gRPC's own
bound (past it core answers CANCELLED). Traced with the pool bound alone
(``benchmarks/bench_server.py --rate 2000``, 2 shared cores): it was reached 7 times in the
first 0.4 s and never after, while accepted calls and refusals were answered after 0.7-1.5 s
at p50.

gRPC core counts every call it receives (channelz ``callsStarted``, counted as a call
arrives, before the application takes it); the calls the accepting thread has handed to
Python so far are counted here, so the difference is the queue in core. :class:`CoreArrivals`
reads that count; :class:`StandingQueueGate` adds the pool's backlog and, CoDel-like (Nichols
& Jacobson, "Controlling Queue Delay", ACM Queue 10(5), 2012: a queue that does not drain is
shed until it does), refuses every unary call once the calls waiting reach the bound: at once
when the pool's own backlog does (as the pool bound always did) or within a second of the
last episode, otherwise when a queue in core has stood for ``persist_s`` without shrinking
(the backlog of a stall drains by itself). It refuses until a fresh count shows the queue
down to a low-water mark. Refusing everything leaves the workers nothing new: they drain,
the GIL goes to the accepting thread, and it refuses what waits in core at its own pace (a
server whose pool bound was forced to refuse every call answered 2,000 calls/s in 2.3-2.6 ms
at p50, ``bench_server.py --rate 2000`` against it, 2 shared cores).

Calls core ends on its own before the application takes them (a client cancels while its
call waits, core's own bound) are counted by core and never seen here, so the difference
can drift up. It is re-anchored to zero when it cannot be much else: a call arrives after
the accepting thread saw none for ``idle_s`` while the pool was empty (no worker competed
with that thread for the GIL). Were calls waiting after all (another thread held the GIL),
they show up as more calls seen than counted, and the next fresh count lowers the anchor
to match.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("twin.server")

# How often the count in core is read. Each read is one channelz query, which holds the GIL:
# 0.18 ms on a quiet machine, 0.41 ms on average under load (376 reads during
# bench_server.py --rate 2000, 2 shared cores), and ~1.3 ms in a closed loop at capacity
# (6.5% of the GIL-holding samples of py-spy --gil at 50 reads/s). Read every 5 ms, refusals
# came back in 30-120 ms at p50; every 20 ms, in 20 ms (bench_server.py --rate 2000). So: every
# 20 ms while shedding or within QUIET_AFTER_S of it, every QUIET_PROBE_S otherwise, where
# a read mostly finds nothing: 2.4% of the GIL samples in a closed loop at capacity (py-spy
# --gil, on a machine loaded by other work), against 6.5% reading every 20 ms.
PROBE_S = 0.02
QUIET_PROBE_S = 0.1
# After shedding stops, overload usually goes on: reads stay frequent this long (many
# episodes of tens of ms each, bench_server.py --rate 1300 to 3400).
QUIET_AFTER_S = 1.0
# How long a queue in core must stand before the gate trips: CoDel's interval (Nichols &
# Jacobson recommend 100 ms). A burst of 32 calls at 500 calls/s (the goal load, well under the
# ~1,000/s capacity) drains in ~64 ms by itself; a standing queue does not.
PERSIST_S = 0.1
# A quiet spell long enough to show that nothing waits in core (see the module docstring):
# longer than the ~30 ms the default ``max_queued_rpcs`` (32 calls) takes to drain at the
# measured ~1,000 Predict/s, so no call admitted under the bound can still be waiting then.
IDLE_S = 0.05
T = TypeVar("T")
_STARTED = re.compile(rb'"callsStarted":"(\d+)"')


def _channelz_server_ids() -> set[int]:
    """Ids of every gRPC server of this process, as channelz lists them (empty if unavailable)."""
    try:
        from grpc._cython import cygrpc  # gRPC's own channelz service reads these the same way
    except ImportError:  # pragma: no cover - part of every grpcio build
        return set()
    ids: set[int] = set()
    start = 0
    while True:
        try:
            page = json.loads(cygrpc.channelz_get_servers(start))
        except Exception:  # channelz off or changed: no core signal, the pool bound still holds
            return set()
        servers = page.get("server", [])
        ids.update(int(s["ref"]["serverId"]) for s in servers)
        if page.get("end", True) or not servers:
            return ids
        start = max(ids) + 1


class CoreArrivals:
    """The number of calls gRPC core has received for one server (channelz ``callsStarted``)."""

    def __init__(self, server_id: int) -> None:
        from grpc._cython import cygrpc

        self._get = cygrpc.channelz_get_server
        self.server_id = server_id

    @classmethod
    def around(cls, make: Callable[[], T]) -> tuple[T, CoreArrivals | None]:
        """Run ``make`` (which creates one gRPC server) and find that server in channelz:
        the server, and its counter (None when it cannot be told apart: channelz off, or
        another server created at the same moment).
        """
        before = _channelz_server_ids()
        made = make()
        new = _channelz_server_ids() - before
        if len(new) != 1:
            log.info("load shedding without the count of calls waiting in gRPC core (channelz: %d new servers)",
                     len(new))
            return made, None
        arrivals = cls(new.pop())
        return made, arrivals if arrivals() is not None else None

    def __call__(self) -> int | None:
        """Calls received so far, or None when channelz no longer answers."""
        try:
            found = _STARTED.search(self._get(self.server_id))
        except Exception:  # the server is gone, or channelz changed
            return None
        return int(found.group(1)) if found else None


class StandingQueueGate:
    """Refuse-everything state of the admission interceptor, driven from the accepting thread.

    ``high``: calls waiting (in core, and for a worker) at which shedding starts; ``low``: at
    or below which it stops. ``wall`` is a monotonic clock; all methods run on gRPC's accepting
    thread, one call at a time.
    """

    def __init__(self, high: int, low: int, probe_s: float = PROBE_S, idle_s: float = IDLE_S,
                 quiet_probe_s: float = QUIET_PROBE_S, quiet_after_s: float = QUIET_AFTER_S,
                 persist_s: float = PERSIST_S, wall: Callable[[], float] = time.perf_counter) -> None:
        if not 0 <= low < high:
            raise ValueError(f"need 0 <= low < high (got low {low}, high {high})")
        self.high = high
        self.low = low
        self.probe_s = probe_s
        self.quiet_probe_s = max(probe_s, quiet_probe_s)
        self.quiet_after_s = quiet_after_s
        self._last_shed = float("-inf")
        self.persist_s = persist_s
        self._over_since: float | None = None  # when a fresh read first found the bound reached
        self._over_count = 0                   # and how many calls waited then
        self.idle_s = idle_s
        self._wall = wall
        self._arrivals: Callable[[], int | None] | None = None
        self.shedding = False
        self.trips = 0           # episodes of shedding
        self.seen = 0            # calls the accepting thread has handed to Python
        self._base = 0           # calls core counted that never reached Python
        self._core_count = 0     # core's count at the last read
        self._probed = float("-inf")
        self._last_arrival = float("-inf")
        self.waiting = 0         # calls waiting, as the last decision saw them

    def watch(self, arrivals: Callable[[], int | None] | None) -> None:
        """Read the server's count of received calls from ``arrivals`` (None: the pool's backlog alone)."""
        self._arrivals = arrivals
        count = arrivals() if arrivals is not None else None
        self._core_count = count or 0
        self._base = self._core_count - self.seen

    def arrived(self, pool_idle: bool) -> None:
        """Count one call handed to Python (every call, refused or not); ``pool_idle``: no call
        queued or running in the worker pool.
        """
        now = self._wall()
        self.seen += 1
        if pool_idle and now - self._last_arrival >= self.idle_s:
            # Nothing ran and nothing was taken for idle_s: nothing can be waiting in core
            # but this call (see the module docstring); what the count says beyond is drift.
            self._probe(now)
            self._base = self._core_count - self.seen
        self._last_arrival = now

    def received(self) -> int | None:
        """Calls core has received, read now (None: no counter watched)."""
        return self._arrivals() if self._arrivals is not None else None

    def in_core(self) -> int:
        """Calls received by core and not yet handed to Python, as of the last read."""
        return max(0, self._core_count - self.seen - self._base)

    def _probe(self, now: float) -> None:
        self._probed = now
        count = self._arrivals() if self._arrivals is not None else None
        if count is None:
            return
        self._core_count = count
        # Every call handed to Python was counted by core before: a fresh count below what was
        # seen means an earlier re-anchoring forgot calls that did wait; lower the base to match.
        self._base = min(self._base, count - self.seen)

    def refuse(self, pool_backlog: int) -> bool:
        """Whether the unary call arriving now is refused; ``pool_backlog``: calls waiting for a worker."""
        now = self._wall()
        if self._arrivals is not None:
            busy = self.shedding or self._over_since is not None or now - self._last_shed < self.quiet_after_s
            if now - self._probed >= (self.probe_s if busy else self.quiet_probe_s):
                self._probe(now)
        fresh = self._arrivals is None or self._probed == now  # read for this very call
        self.waiting = self.in_core() + pool_backlog
        if self.shedding:
            # Between two reads the count in core only falls (arrivals since are not counted
            # yet): the gate reopens on a fresh count, never on a stale one.
            if not fresh or self.waiting > self.low:
                return True
            self.shedding = False
            self._last_shed = now
        if pool_backlog >= self.high:
            return self._trip()  # the workers' own backlog: refused at once, as it always was
        if self.waiting < self.high:
            if fresh:
                self._over_since = None
            return False
        if now - self._last_shed < self.quiet_after_s:
            return self._trip()  # overload goes on: at once
        if not fresh:
            return False
        if self._over_since is None:
            self._over_since, self._over_count = now, self.waiting
        if now - self._over_since < self.persist_s:
            return False
        # The queue in core stood persist_s (CoDel's interval). Shed unless it shrank meanwhile:
        # the backlog of a stall drains by itself (it is then judged again over the next interval).
        if self.waiting >= self._over_count:
            return self._trip()
        self._over_since, self._over_count = now, self.waiting
        return False

    def _trip(self) -> bool:
        self.shedding = True
        self.trips += 1
        self._over_since = None
        return True
