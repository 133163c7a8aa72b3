"""Sweep rows on the wire: many rows to a ``SweepEvent.rows`` message, bounded three ways.

One message per row cost the server ~0.2 ms of gRPC work per row, more than re-evaluating
and converting the row (2,386 rows/s to a Python client on 2 cores,
``benchmarks/bench_sweep_stream.py`` before this module), so rows go out in chunks. A chunk
is sent when it holds ``rows_per_message`` rows, before it would pass
:data:`MAX_CHUNK_BYTES`, once its first row has waited :data:`FLUSH_AFTER_S`, and before
every other event (progress, finished), so rows keep the runner's order relative to
those events and never lag the progress that counts them. ``rows_per_message`` 1 keeps
the form clients before chunks read: every row alone in a (deprecated) ``row`` event.

The time bound is checked as rows arrive: a runner that yields a row and then goes quiet
holds that chunk until its next event. The sweep engine never does (its rows of a batch
are followed at once by the batch's progress event).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from twin.core.errors import SpecError
from twin.rpc.v1 import sweep_service_pb2 as sw
from twin.wire import row_encoding

# The request's bounds. A message costs the server ~0.2 ms of CPU whatever it holds (4.27 s
# for 12,026 messages vs ~1.9 s for 50-800, 12,000 rows, benchmarks/bench_sweep_stream.py):
# spread over 256 rows that is < 1 us a row, under 1% of a row's own ~150 us (re-evaluated
# and converted), while a client still sees a fast sweep's first rows after 256 of them.
DEFAULT_ROWS_PER_MESSAGE = 256
# 4096 rows of ~300 bytes are ~1.2 MiB: beyond it the byte bound decides anyway.
MAX_ROWS_PER_MESSAGE = 4096
# A quarter of gRPC's default receive limit (GRPC_DEFAULT_MAX_RECV_MESSAGE_LENGTH, 4 MiB,
# include/grpc/impl/grpc_types.h), so a stock client in any language reads every chunk
# however wide the rows (many axes, mapping-valued axes). A single row larger than this
# goes out alone.
MAX_CHUNK_BYTES = 1024 * 1024
# Half of the engine's 0.5 s Ray heartbeat (twin.sweep.ray_exec.HEARTBEAT_S), so rows of a
# slow sweep reach the client at least as often as its progress events do.
FLUSH_AFTER_S = 0.25
FIELD = "rows_per_message"


def rows_per_message(requested: int) -> int:
    """The request's ``rows_per_message`` (0: the default), checked against its bounds."""
    if requested == 0:
        return DEFAULT_ROWS_PER_MESSAGE
    if not 1 <= requested <= MAX_ROWS_PER_MESSAGE:
        raise SpecError(FIELD, f"must be between 1 and {MAX_ROWS_PER_MESSAGE} (0 or unset: the server's default, "
                               f"{DEFAULT_ROWS_PER_MESSAGE}); got {requested}")
    return requested


class RowChunker:
    """Gathers rows into ``SweepEvent(rows=...)`` chunks (see the module doc). Rows are held as
    their encodings framed as entries of ``SweepRows.rows`` (``twin.wire.row_encoding``), from
    a message (:meth:`add`) or a block's rows encoded together (:meth:`add_encoded`); a chunk is
    parsed into its event in one go.
    """

    def __init__(self, max_rows: int, *, max_bytes: int = MAX_CHUNK_BYTES, max_wait_s: float = FLUSH_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.max_wait_s = max_wait_s
        self.clock = clock
        self._rows: list[bytes] = []
        self._bytes = 0
        self._since = 0.0

    def add(self, row: sw.SweepRow) -> Iterator[sw.SweepEvent]:
        """Take one row; yield the chunks it completes (none, one, or two when it does not fit)."""
        if self.max_rows == 1:
            yield sw.SweepEvent(row=row)
            return
        yield from self.add_encoded([row_encoding.framed(row.SerializeToString())])

    def add_encoded(self, framed_rows: Iterable[bytes]) -> Iterator[sw.SweepEvent]:
        """Take rows already encoded and framed (``row_encoding.framed``); yield the chunks they complete."""
        for framed in framed_rows:
            if self.max_rows == 1:
                yield sw.SweepEvent(row=row_encoding.event([framed]).rows.rows[0])
                continue
            size = len(framed)
            if self._rows and self._bytes + size > self.max_bytes:
                yield from self.flush()
            if not self._rows:
                self._since = self.clock()
            self._rows.append(framed)
            self._bytes += size
            if (len(self._rows) >= self.max_rows or self._bytes >= self.max_bytes
                    or self.clock() - self._since >= self.max_wait_s):
                yield from self.flush()

    def flush(self) -> Iterator[sw.SweepEvent]:
        """Yield the rows held so far as one chunk (nothing when none are held)."""
        if not self._rows:
            return
        event = row_encoding.event(self._rows)
        self._rows = []
        self._bytes = 0
        yield event
