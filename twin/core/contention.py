"""Traffic of different parallel dimensions sharing the same links in the same phase.

Each strategy's traffic is costed alone first (``collectives.py``, per GPU and per link
class, see ``topology``). Then, per link class, the traffic of the strategies that are in
flight at the same time shares the capacity, and each contended strategy is costed again
with the share it gets.

The sharing rule is processor sharing, i.e. max-min fair sharing among backlogged flows
(Bertsekas & Gallager, "Data Networks", §6.5.2; the fluid model of TCP/RDMA congestion
control converging to fair shares): flows that start together on a link of capacity C
finish at ``(B_d + sum_e min(B_e, B_d)) / C``. With the other traffic spread over its
window (utilisation ``rho_e`` of the link alone), the traffic ``d`` meets while it is busy
stretches it by ``1 + sum_e min(1, rho_e * overlap(e, d))`` on that link: nothing where
the others leave it idle, at most x2 per backlogged competitor (its fair share).

Which strategies are in flight together: traffic that runs asynchronously to the compute
stream (``Strategy.overlapped``: data-parallel buckets, FSDP prefetch, pipeline p2p,
context-parallel ring exchanges) is in flight all through its window, so it slows every
other flow on its links; blocking collectives of one GPU (tensor- and expert-parallel
collectives between its kernels) run one after another and slow no one: they never meet
each other, and the asynchronous traffic they share a link with keeps flowing while they
hold the step up, so what it loses then it makes up in the time their stretch adds.
Windows: micro-batch and pipeline traffic spreads over all micro-batches' compute plus the
blocking collectives' time (the step's span); step traffic (the gradient reduction) over
the last micro-batch's backward and the first one's forward.

Written once for one scenario (Python numbers, tuples per link class) and for a batch
(arrays: points x link classes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.core import ops
from twin.core.collectives import link_seconds_per_byte
from twin.core.topology import GroupSpan, Hierarchy, HierarchyBatch

# Below this stretch of every link it uses a strategy is not costed again: other traffic
# taking under 1 % of a link changes that strategy's time by under 1 % (and the step by far
# less), within the model's own error.
MIN_STRETCH = 0.01
SHARE_STEPS = 1024.0

# The link pattern of each built-in dimension's traffic (``collectives.PATTERNS``).
DEFAULT_PATTERNS = {"tp": "ring", "cp": "p2p", "ep": "a2a", "dp": "ring", "dpr": "ring", "edp": "ring",
                    "pp": "p2p"}


@dataclass(slots=True)
class Flow:
    """One strategy's traffic as the contention model sees it.

    ``profile``: seconds each link class is busy per byte it sends (see
    ``collectives.link_seconds_per_byte``); ``nbytes``: what one GPU sends per step;
    ``issued_s``: its communication time alone per step; ``window_s``: the time it is
    spread over; ``phase`` and ``overlapped`` as the strategy's.
    """

    name: str
    profile: Any
    nbytes: Any
    issued_s: Any
    window_s: Any
    phase: str
    overlapped: bool
    # utilisation(), computed once: the stretches and the link report both read it.
    _rho: Any = field(default=None, init=False, repr=False, compare=False)

    def utilisation(self) -> Any:
        """Busy fraction of each link class in its window (alone), at most 1: the time its
        bytes hold each link (a strategy that reports no bytes: its issued time, on its
        busiest link).
        """
        if self._rho is None:
            self._rho = self._utilisation()
        return self._rho

    def _utilisation(self) -> Any:
        if isinstance(self.profile, tuple):
            w = self.window_s
            window = w if w >= 1e-30 else 1e-30  # ops.maximum(w, 1e-30) without the call
            # ``u if u < 1.0 else 1.0`` is ``min(1.0, u)`` (NaN included) without the call.
            if self.nbytes > 0:
                nb = self.nbytes
                return tuple(u if (u := nb * p / window) < 1.0 else 1.0 for p in self.profile)
            worst = max(self.profile) or 1.0
            return tuple(min(1.0, self.issued_s * p / worst / window) for p in self.profile)
        window = ops.maximum(self.window_s, 1e-30)
        nbytes = np.asarray(self.nbytes)
        busy = nbytes[:, None] * self.profile
        sends = nbytes > 0
        if not sends.all():  # points whose strategy reports no bytes: by its issued time
            worst = ops.row_max(self.profile)[:, None]
            by_time = np.asarray(self.issued_s)[:, None] * self.profile / np.where(worst > 0, worst, 1.0)
            busy = np.where(sends[:, None], busy, by_time)
        return np.minimum(1.0, busy / np.asarray(window)[:, None])


ProfileFn = Callable[[GroupSpan, Any, str], Any]


def traffic_profile(traffic: Sequence[tuple[str, str]], spans: dict[str, GroupSpan],
                    hierarchy: Hierarchy | HierarchyBatch, profile_fn: ProfileFn = link_seconds_per_byte) -> Any:
    """Link profile of a strategy whose traffic is ``(dimension, pattern)`` pairs: per link
    class the largest of its groups' seconds per byte (None if it has no traffic here).
    ``profile_fn``: ``collectives.link_seconds_per_byte`` or a cached equivalent.
    """
    profile: Any = None
    for dim, pattern in traffic:
        span = spans.get(dim)
        if span is None:
            continue
        p = profile_fn(span, hierarchy, pattern)
        if profile is None:
            profile = p
        elif isinstance(p, tuple):
            profile = tuple(b if b > a else a for a, b in zip(profile, p, strict=True))  # max(a, b)
        else:
            profile = np.maximum(profile, p)
    return profile


def _overlap(other: Flow, this: Flow) -> Any:
    """Fraction of ``this`` flow's window during which ``other`` is in flight."""
    if other.phase == "step" and this.phase != "step":
        return ops.minimum(1.0, other.window_s / ops.maximum(this.window_s, 1e-30))
    return 1.0


def stretches(flows: Sequence[Flow]) -> list[Any]:
    """Per flow, how much each link class's capacity is stretched for it (1 = alone):
    a tuple per link class for one scenario, an array (points x link classes) for a batch.
    """
    rho = [f.utilisation() for f in flows]
    out: list[Any] = []
    for i, f in enumerate(flows):
        if isinstance(f.profile, tuple):
            s = [1.0] * len(f.profile)
            used = [j for j, p in enumerate(f.profile) if p > 0]
            for k, e in enumerate(flows):
                if k == i or not e.overlapped:
                    continue
                r, ov = rho[k], _overlap(e, f)
                for j in used:
                    if r[j] > 0:
                        u = r[j] * ov
                        s[j] += u if u < 1.0 else 1.0  # min(1.0, u)
            out.append(tuple(s))
            continue
        s_arr = np.ones_like(f.profile)
        for k, e in enumerate(flows):
            if k == i or not e.overlapped:
                continue
            r, overlap = rho[k], _overlap(e, f)
            if type(overlap) is float and overlap == 1.0:
                # min(1, r * 1.0) is r itself: utilisation() is at most 1 (or NaN, kept)
                s_arr = s_arr + r
                continue
            ov = np.asarray(overlap)
            s_arr = s_arr + np.minimum(1.0, r * (ov[:, None] if ov.ndim else ov))
        out.append(np.where(f.profile > 0, s_arr, 1.0))
    return out


def shares_of(stretch: Any, hit: Any) -> Any:
    """The capacity shares a stretched flow gets (1 / stretch), rounded down to 1/1024 so
    that nearby scenarios share cached collective costs (an error under 0.1 %); points of
    a batch below the threshold (``hit`` false) keep their whole links, as one scenario does.
    """
    if isinstance(stretch, tuple):
        return tuple(math.floor(SHARE_STEPS / x) / SHARE_STEPS for x in stretch)
    return np.where(hit[:, None], np.floor(SHARE_STEPS / stretch) / SHARE_STEPS, 1.0)


def contended(stretch: Any) -> Any:
    """Whether a flow is stretched enough to be costed again (per point for a batch)."""
    if isinstance(stretch, tuple):
        return max(stretch) > 1.0 + MIN_STRETCH
    return ops.row_any(stretch > 1.0 + MIN_STRETCH)


def link_name(hierarchy: Hierarchy, tier: int) -> str:
    """What link class ``tier`` is, in words (the links entering tier ``tier`` from below)."""
    tiers = hierarchy.tiers
    if tier == 0:
        return f"{tiers[0].name} ports"
    if tier == 1:
        return f"NIC links ({tiers[0].name} domain to {tiers[1].name})"
    return f"{tiers[tier - 1].name}-{tiers[tier].name} uplinks"


def link_loads(flows: Sequence[Flow], stretch: Sequence[Any], hierarchy: Hierarchy) -> list[dict[str, Any]]:
    """One scenario's flows per link class they use: utilisation and stretch per flow."""
    out: list[dict[str, Any]] = []
    rho = [f.utilisation() for f in flows]
    for j in range(len(hierarchy.tiers)):
        used = {f.name: float(r[j]) for f, r in zip(flows, rho, strict=True) if r[j] > 0}
        if not used:
            continue
        stretched = {f.name: float(s[j]) for f, s in zip(flows, stretch, strict=True)
                     if isinstance(s, tuple) and j < len(s) and f.profile[j] > 0}
        out.append({"tier": j, "name": link_name(hierarchy, j),
                    "capacity_GBps": hierarchy.link_capacity(j) / 1e9, "utilisation": used, "stretch": stretched})
    return out
