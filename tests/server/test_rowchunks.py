"""Sweep rows in chunks (twin.server.rowchunks): the count, byte and time bounds, and the checked request field."""

from __future__ import annotations

import pytest

from twin.core.errors import SpecError
from twin.rpc.v1 import sweep_service_pb2 as sw
from twin.server.rowchunks import (
    DEFAULT_ROWS_PER_MESSAGE,
    MAX_CHUNK_BYTES,
    MAX_ROWS_PER_MESSAGE,
    RowChunker,
    rows_per_message,
)
from twin.wire.convert import dict_to_struct


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def row(i: int, width: int = 0) -> sw.SweepRow:
    """Row ``i``; ``width``: characters of a wide assignment value (a long name, a mapping axis...)."""
    return sw.SweepRow(index=i, assignment=dict_to_struct({"plan.tp": i, "cluster.name": "x" * width}))


def feed(chunker: RowChunker, rows: list[sw.SweepRow]) -> list[sw.SweepEvent]:
    out = [ev for r in rows for ev in chunker.add(r)]
    return [*out, *chunker.flush()]


def indices(events: list[sw.SweepEvent]) -> list[list[int]]:
    return [[r.index for r in ev.rows.rows] for ev in events]


def test_count_bound_keeps_every_row_once_in_order():
    events = feed(RowChunker(4, clock=Clock()), [row(i) for i in range(10)])
    assert all(ev.WhichOneof("event") == "rows" for ev in events)
    assert indices(events) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_one_row_per_message_is_the_single_row_form():
    events = feed(RowChunker(1, clock=Clock()), [row(i) for i in range(3)])
    assert [ev.WhichOneof("event") for ev in events] == ["row"] * 3
    assert [ev.row.index for ev in events] == [0, 1, 2]


def test_byte_bound_is_exact_and_holds_for_wide_rows():
    rows = [row(i, width=1000) for i in range(1, 51)]  # index 0 would be 2 bytes shorter (a default is left out)
    size = rows[0].ByteSize()
    framed = 1 + 2 + size  # tag, a 2-byte varint length (size < 16,384), the row
    limit = 10 * framed     # exactly ten rows fit
    events = feed(RowChunker(4096, max_bytes=limit, clock=Clock()), rows)
    assert [len(x) for x in indices(events)] == [10] * 5
    assert all(ev.rows.ByteSize() == limit for ev in events)  # the accounting matches protobuf's encoding
    assert [i for x in indices(events) for i in x] == list(range(1, 51))


def test_default_byte_bound_keeps_chunks_under_grpcs_default_limit():
    # 4096 rows of ~40 KB each would be ~160 MiB in one message; every chunk stays <= 1 MiB.
    rows = [row(i, width=40_000) for i in range(200)]
    events = feed(RowChunker(MAX_ROWS_PER_MESSAGE, clock=Clock()), rows)
    assert len(events) > 1
    assert all(ev.rows.ByteSize() <= MAX_CHUNK_BYTES for ev in events)
    assert all(ev.ByteSize() < 4 * 1024 * 1024 for ev in events)
    assert [i for x in indices(events) for i in x] == list(range(200))


def test_a_row_over_the_byte_bound_goes_out_alone():
    small, big = row(0), row(1, width=5000)
    events = feed(RowChunker(100, max_bytes=1000, clock=Clock()), [small, big, row(2)])
    assert indices(events) == [[0], [1], [2]]


def test_time_bound_flushes_a_slow_sweeps_rows():
    clock = Clock()
    chunker = RowChunker(100, max_wait_s=0.25, clock=clock)
    assert list(chunker.add(row(0))) == []
    clock.t += 0.1
    assert list(chunker.add(row(1))) == []
    clock.t += 0.15  # the first row has now waited 0.25 s
    out = list(chunker.add(row(2)))
    assert indices(out) == [[0, 1, 2]]
    clock.t += 10.0  # the wait counts from a chunk's first row, not from the last flush
    assert list(chunker.add(row(3))) == []
    assert indices(list(chunker.flush())) == [[3]]
    assert list(chunker.flush()) == []


@pytest.mark.parametrize(("requested", "used"), [(0, DEFAULT_ROWS_PER_MESSAGE), (1, 1), (7, 7),
                                                 (MAX_ROWS_PER_MESSAGE, MAX_ROWS_PER_MESSAGE)])
def test_rows_per_message_in_bounds(requested, used):
    assert rows_per_message(requested) == used


@pytest.mark.parametrize("requested", [-1, MAX_ROWS_PER_MESSAGE + 1, 2**62])
def test_rows_per_message_out_of_bounds_names_the_field(requested):
    with pytest.raises(SpecError) as err:
        rows_per_message(requested)
    assert err.value.field == "rows_per_message"
    assert f"between 1 and {MAX_ROWS_PER_MESSAGE}" in err.value.rule
