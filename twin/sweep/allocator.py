"""Keep a sweep process's freed memory in the process (glibc's malloc), in processes the twin
runs sweeps in: the ``twin sweep`` command, and the sweep's Ray batch task in the workers of a
Ray the twin started itself (``RayExecutor.owns_cluster``; never a joined cluster's long-lived
workers, which run other people's tasks too).

Why: a batch of the step model makes numpy temporaries of a batch's points (about 0.1-6 MB
each at the inline executor's 100,000-point batches). glibc hands freed memory back to the
kernel when a free chunk at the top of the heap passes its trim threshold, and serves blocks
above its mmap threshold with fresh mappings that are unmapped on free (both thresholds are
dynamic: at most 32 MiB and twice the largest mapping freed so far, glibc 2.36 ``malloc.c``);
each page handed back is zero-filled and faulted in again by the next batch. On the
1,036,800-point ``benchmarks/bench_sweep.py`` that was ~75,000 minor faults a warm run and
~1,000-2,000 with both thresholds at 256 MiB (measured with ``getrusage`` per run; figures in
``docs/sweeps.md``).

The thresholds are process-wide state, so the library never sets them on import, and an
embedding process (a server running sweeps inline, a notebook) keeps glibc's defaults. The
processes the twin runs sweeps in call :func:`retain_freed_memory`. Opt out with
``TWIN_SWEEP_RETAIN_MEMORY=0`` (read by ``twin sweep``, and for Ray by the driver, which asks
its own workers to keep memory or not); what stays allocated is at most a batch's peak (hundreds of MB
at the default batch sizes), which such a process holds anyway while a batch runs.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping

ENV = "TWIN_SWEEP_RETAIN_MEMORY"
# glibc malloc.h: M_TRIM_THRESHOLD -1, M_MMAP_THRESHOLD -3.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# 256 MiB: above any temporary of a default-size batch (the largest are points x link-class
# tables: 100,000-250,000 points x a few classes x 8 bytes, a few MB), so neither a free nor
# a trim hands a batch's memory back between batches (the environment variables
# MALLOC_TRIM_THRESHOLD_ / MALLOC_MMAP_THRESHOLD_ at this value measured the same).
THRESHOLD_BYTES = 256 << 20

_STATE = {"applied": False}  # once per process


def applied() -> bool:
    """Whether this process has set the thresholds (:func:`retain_freed_memory`)."""
    return _STATE["applied"]


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the switch is on (anything but ``0``, ``false``, ``no`` or ``off``; on when unset)."""
    value = (os.environ if environ is None else environ).get(ENV, "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def retain_freed_memory(environ: Mapping[str, str] | None = None) -> bool:
    """Raise glibc's trim and mmap thresholds for this process, once, unless switched off
    (:data:`ENV`) or the C library is not glibc. Whether they are set now.
    """
    if _STATE["applied"]:
        return True
    if not enabled(environ) or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; the trim threshold first, as MALLOC_TRIM_THRESHOLD_ does.
    ok = bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES)) & bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES))
    _STATE["applied"] = ok
    return ok
