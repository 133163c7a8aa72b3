"""The serving process's heap: what it holds at start is kept out of the cyclic collector's way.

A built server holds 50,000-61,000 container objects that live as long as the process
(modules, presets, plugins, the engine's tables, gRPC, the web view). CPython's cyclic
collector walks all of them again in every full (generation 2) collection, and a collection
holds the GIL: every call in flight waits for it. In a closed loop of 30,000 distinct
Predicts a server ran 2 full collections of 119-138 ms of CPU, the longest pause 72-82 ms
(``benchmarks/bench_gc.py --rate 0 --requests 30000``, 2 shared cores).

:func:`freeze_startup_heap` collects once and then moves every object alive at that moment
to the permanent generation (``gc.freeze``, Python 3.7+; the gc module's documentation
suggests it for objects a process allocates early and never frees). Those objects are still
freed by reference counting as usual; only a cycle among them that became garbage later would
never be collected, and what a built server holds stays referenced until it exits (what a
request creates is allocated after the freeze and collected as before). Frozen, the same run
had 1 full collection of 25-30 ms of CPU, the longest pause 30-37 ms (3 alternating pairs).

Only the ``twin serve`` process freezes (:func:`twin.server.grpc_app.serve`): a server built in a
test or a notebook leaves its host's collector alone.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect garbage, then exclude every object alive now from future collections.

    Returns how many objects are frozen (``gc.get_freeze_count``).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
