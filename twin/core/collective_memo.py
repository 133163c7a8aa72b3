"""The parts of a collective's cost that no link share changes, built once per group and
kept for the hierarchy and all of its share views (``_fixed``), and a batch view's memo of
what its strategies ask of a group again (``_by_batch_view``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from twin.core import ops
from twin.core.collective_types import AnyHierarchy
from twin.core.topology import GroupSpan, Hierarchy, HierarchyBatch

# Most of a collective's cost does not depend on the shares of link capacity a view of the
# hierarchy gives its traffic (``Hierarchy.with_shares``: the contention model's views, a
# fleet's capacity views): its step latencies, protocol availability, bus factor, each link
# class's coefficient and bandwidth alone. Those parts are built once per (group, op or
# pattern) and kept for the hierarchy and all of its share views (``_fixed``); each costing
# works out only the bandwidths of its own view, with the same arithmetic in the same order
# as when it was built whole (so the times are bit-identical).
_MEMO_LIMIT = 8192
_MISSING = object()

Build = Callable[[GroupSpan, Any, str], Any]


def _fixed(kind: str, tag: str, span: GroupSpan, h: AnyHierarchy, build: Build) -> Any:
    """``build(span, h, tag)``: a part of a collective's cost that no link share changes.

    One scenario's are kept by value (``kind``, ``tag``, the group's fields) in the hierarchy's own memo,
    which its share views share (``Hierarchy._memo``; bounded: cleared when full); a batch's
    in the batch view's, which its share views share too (``HierarchyBatch._fixed_memo``).
    """
    if type(h) is HierarchyBatch:
        return _batch_fixed(tag, span, h, build)
    group = span._key
    if group is None or type(h) is not Hierarchy:
        return build(span, h, tag)
    memo = h._memo
    key = (kind, tag, group)
    hit = memo.get(key, _MISSING)
    if hit is _MISSING:
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        hit = memo[key] = build(span, h, tag)
    return hit


def _batch_fixed(tag: str, span: GroupSpan, h: HierarchyBatch, build: Build) -> Any:
    """:func:`_fixed` of a batch view: built once per group object, or, for the rows of a
    batch (``HierarchyBatch.take``) read through a group taken the same way (``ops.TakeView``
    with the same rows), the rows of what the whole batch built. A part is per point, so
    its rows are what the rows would build: where a builder takes a branch for the whole
    batch (``ops.any_``), the branches give the same values to the points they do not concern
    (a one-domain point of a multi-domain batch pays no network step).
    """
    memo = h._fixed_memo
    key = (id(span), build, tag)
    hit = memo.get(key)
    if hit is not None and hit[0] is span:
        return hit[1]
    got = _MISSING
    parent = h._fixed_from
    if parent is not None and type(span) is ops.TakeView:
        whole, rows = ops.take_view_parts(span)
        if rows is parent[1]:
            found = parent[0].get((id(whole), build, tag))
            if found is not None and found[0] is whole:
                got = _take_part(found[1], rows)
    if got is _MISSING:
        got = build(span, h, tag)
    memo[key] = (span, got)
    return got


def _take_part(value: Any, rows: np.ndarray) -> Any:
    """``value`` (a built part: arrays per point, tuples of them, plain values) for ``rows``."""
    if type(value) is np.ndarray and value.ndim:
        return ops.gather(value, rows)
    if type(value) is tuple:
        return tuple(_take_part(v, rows) for v in value)
    return value


def _by_batch_view(tag: str, span: GroupSpan, h: HierarchyBatch, build: Build,
                   memo: dict[Any, Any] | None = None) -> Any:
    """``build(span, h, tag)``, kept in the batch view's own memo (``h._net_memo``, dropped
    with the view, or ``memo``) for this group: a batch's strategies ask the same of a group
    again. Each entry holds the group, so an id is never another object's.
    """
    if memo is None:
        memo = h._net_memo
    key = (id(span), build, tag)
    hit = memo.get(key)
    if hit is not None and hit[0] is span:
        return hit[1]
    got = build(span, h, tag)
    memo[key] = (span, got)
    return got
