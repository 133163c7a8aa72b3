"""What the Sweep RPC's servicer consumes: a runner and the events it yields.

A runner is any callable ``runner(spec, should_stop) -> Iterator[SweepEvent]`` (see
:data:`SweepRunner`; ``spec`` is the sweep-file mapping of the request): it yields one
:class:`Started`, then :class:`Row` (or :class:`RowBlock`) and :class:`Progress` events as
points complete, then one :class:`Finished`, and checks ``should_stop()`` so a cancelled call stops the work.
The servicer (``twin.server.services.SweepServicer``) only converts these events to the
wire (rows many to a message, :mod:`twin.server.rowchunks`); a runner that pauses between
rows should yield a ``Progress`` first, which sends the rows held so far. The server's
runner is the sweep engine (``twin.server.sweep_engine.EngineRunner``); an extension may
install another through ``ServerContext.sweep_runner``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twin.core.estimate import Estimate


# ------------------------------------------------------------------------ events
@dataclass(frozen=True, slots=True)
class Started:
    """The sweep is accepted: how many points it has."""

    name: str
    total: int
    axis_paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Progress:
    """How far the sweep is."""

    done: int
    total: int
    failed: int
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class Row:
    """One evaluated point: its estimate, or the error its scenario raised."""

    index: int
    assignment: dict[str, Any]
    estimate: Estimate | None = None
    error: BaseException | None = None


@dataclass(frozen=True)
class RowBlock:
    """Evaluated points as one block, what a runner that evaluates in batches yields instead of
    a ``Row`` per point: the servicer puts a block on the wire in one pass
    (``twin.wire.row_encoding``), exactly as it would put its rows (``rows()``).

    Per row: ``indices`` and ``errors`` (None: feasible). ``axes``: per swept path, its
    distinct values in the block and each row's index among them (``assignments`` gives each
    row's mapping). ``columns``: the rows' numbers under the sweep's column names
    (``twin.sweep.metrics``: FLOAT_COLUMNS, DETAIL_COLUMNS, INT_COLUMNS); ``estimate(i)``: row i
    as an ``Estimate``.
    """

    indices: Sequence[int]
    axes: Sequence[tuple[str, Sequence[Any], Sequence[int]]]
    errors: Sequence[BaseException | None]
    columns: Mapping[str, Any]
    estimate: Callable[[int], Estimate]

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def assignments(self) -> list[dict[str, Any]]:
        """Each row's swept paths and their values."""
        per_axis = [[values[k] for k in codes] for _, values, codes in self.axes]
        paths = [path for path, _, _ in self.axes]
        return [dict(zip(paths, row, strict=True)) for row in zip(*per_axis, strict=True)] if per_axis else \
            [{} for _ in self.indices]

    def rows(self) -> Iterator[Row]:
        """The block as one ``Row`` per point."""
        for i, (index, assignment, error) in enumerate(zip(self.indices, self.assignments, self.errors,
                                                           strict=True)):
            if error is None:
                yield Row(index, assignment, estimate=self.estimate(i))
            else:
                yield Row(index, assignment, error=error)


@dataclass(frozen=True, slots=True)
class Finished:
    """The sweep is over (``stopped``: "" when complete, else why it stopped early)."""

    done: int
    failed: int
    elapsed_s: float
    metric: str
    best: tuple[Row, ...]
    stopped: str = ""


SweepEvent = Started | Progress | Row | RowBlock | Finished
SweepRunner = Callable[[Mapping[str, Any], Callable[[], bool]], Iterator[SweepEvent]]
