"""What the Sweep RPC's servicer consumes: a runner and the events it yields.

A runner is any callable ``runner(spec, should_stop) -> Iterator[SweepEvent]`` (see
:data:`SweepRunner`; ``spec`` is the sweep-file mapping of the request): it yields one
:class:`Started`, then :class:`Row` and :class:`Progress` events as points complete, then
one :class:`Finished`, and checks ``should_stop()`` so a cancelled call stops the work.
The servicer (``twin.server.services.SweepServicer``) only converts these events to the
wire (rows many to a message, :mod:`twin.server.rowchunks`); a runner that pauses between
rows should yield a ``Progress`` first, which sends the rows held so far. The server's
runner is the sweep engine (``twin.server.sweep_engine.EngineRunner``); an extension may
install another through ``ServerContext.sweep_runner``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
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


@dataclass(frozen=True, slots=True)
class Finished:
    """The sweep is over (``stopped``: "" when complete, else why it stopped early)."""

    done: int
    failed: int
    elapsed_s: float
    metric: str
    best: tuple[Row, ...]
    stopped: str = ""


SweepEvent = Started | Progress | Row | Finished
SweepRunner = Callable[[Mapping[str, Any], Callable[[], bool]], Iterator[SweepEvent]]
