"""How long the serving process lets one thread run before another that waits gets the GIL.

A thread that blocks (a socket read, a lock) gives the GIL up; to run again it waits for the
thread running Python to give it back, which CPython forces only after the switch interval
(``sys.getswitchinterval``, 5 ms by default), and several threads may be waiting. Every call
the server answers passes through threads that block between short bursts of Python (gRPC's
accepting thread, a Health check, a refusal, an HTTP request's header parse), while the
workers past capacity run long stretches of it (the model, remote-write conversion, the
ingest writer). Each handoff then costs up to one interval per busy thread, and a Health check
takes several: past capacity its p99 was the sum (Beazley, "Understanding the Python GIL",
PyCon 2010: the convoy effect of I/O-bound threads behind CPU-bound ones).

Measured with ``benchmarks/bench_overload.py`` (2x capacity on each surface, Health probed open
loop every 20 ms; 2 shared cores, the client on the same machine; two alternating runs each):

=============================  =====================  =====================
Health p99 on the main port    5 ms (default)         1 ms
=============================  =====================  =====================
Predict                        359, 270 ms            134, 185 ms
OTLP/gRPC (dedicated port)     14, 7 ms               23, 17 ms
OTLP/HTTP                      31, 58 ms              21, 28 ms
remote write                   212, 196 ms            65, 100 ms
calls CANCELLED by gRPC core   225, 358 (Health too)  0, 2
=============================  =====================  =====================

A second run pair at 1 ms gave Predict 63 ms and remote write 62 ms. Under Predict the gain is
not clear: two later alternating pairs on Predict alone gave 144 and 227 ms at 5 ms, 211 and
106 ms at 1 ms (there Health shares gRPC's one accepting thread with the refusals; the
Health-only port stayed at 7-9 ms either way). Throughput past capacity moved within the runs'
noise (Predict served 884-1,542/s at 5 ms and 1,125-1,355/s at 1 ms; remote write 132-135/s
and 96-130/s). Only ``twin serve`` sets it (:func:`twin.server.grpc_app.serve`):
a server built in a test or a notebook leaves its host's interpreter alone.
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL_S = 0.001


def shorten_switch_interval(seconds: float = SWITCH_INTERVAL_S) -> float:
    """Set the interpreter's switch interval to ``seconds``; returns the one it had."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    return before
