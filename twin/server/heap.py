"""The serving process's heap: what it holds at start is kept out of the cyclic collector's way.

A built server holds ~45,000 container objects that live as long as the process (modules,
presets, plugins, the engine's tables, gRPC, the web view). CPython's cyclic collector
re-traverses all of them in every full (generation 2) collection, and a full collection
holds the GIL: 22 ms in process on a quiet core, 47-55 ms of wall time inside a server at
500 Predict/s on 2 shared cores (one per ~4,000 distinct calls, measured with
``gc.callbacks`` around ``benchmarks/bench_server.py --rate 500``). Every call in flight
waits for it, and at 500/s that one pause puts ~25 calls over 10 ms, more than half the
1% a p99 may spend.

:func:`freeze_startup_heap` collects once and then moves every object alive at that moment
to the permanent generation (``gc.freeze``, Python 3.7+, made for this: "if a process
will ... allocate objects that are never freed, freezing them ... reduces full collection
times", gc module docs). Those objects are still freed by reference counting as usual;
only a cycle among them that becomes garbage later would never be collected, and the
startup heap has none that change (what a request creates is allocated after the freeze
and collected as before). With it, no full collection over 12,000 distinct Predicts in
process, against one of 22 ms without (``benchmarks/bench_gc.py``).

Only the ``twin serve`` process freezes (:func:`twin.server.app.serve`): a server built
in a test or a notebook leaves its host's collector alone.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect garbage, then exclude every object alive now from future collections;
    returns how many objects are frozen (``gc.get_freeze_count``).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
