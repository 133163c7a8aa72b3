"""One memo type for everything the driver remembers: value-keyed, bounded, counted.

The step model is pure (``twin.core.step``): equal inputs give equal outputs, so the driver
(:mod:`twin.core.run.driver`) may remember any part of it by the value of its inputs. Every
such memory is a :class:`Memo`, with one policy:

- **keyed by value**: keys are tuples of plain values and :class:`SpecTokens` (a small int
  per distinct spec value), never object identities that could be reused;
- **bounded**: a memo holds at most ``limit`` entries; when full it starts afresh (a sweep's
  working set changes wholesale between its phases, so dropping everything costs one
  rebuild of what is still in use, and keeps no bookkeeping per entry on the hot path);
- **admission** (``admit_second=True``): an entry is kept on its key's second request only,
  so a scenario seen once (what a service mostly gets) leaves nothing behind. A kept entry is
  an object the cyclic collector traverses on every full collection; on a large heap that
  costs more than a one-hit entry saves (never-seen scenarios one by one: ~84 us of
  collector work per evaluation without admission on the group memo, ~26 us with it;
  ``benchmarks/bench_evaluate.py``'s collector line). This is the "doorkeeper" of TinyLFU
  (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", ACM
  Transactions on Storage 13(4), 2017);
- **counted**: hits, misses and clears, exposed per memo (``Engine.cache_stats()``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from twin.core.spec_keys import spec_key

K = TypeVar("K")
V = TypeVar("V")

# Entries per memo unless it says otherwise: about the distinct clusters a catalog keeps.
DEFAULT_LIMIT = 4096


class Memo(Generic[K, V]):
    """A bounded, value-keyed memo with hit/miss counters (see the module docstring)."""

    __slots__ = ("_data", "_seen", "admit_second", "clears", "hits", "limit", "misses", "name")

    def __init__(self, name: str, limit: int = DEFAULT_LIMIT, *, admit_second: bool = False) -> None:
        self.name = name
        self.limit = limit
        self.admit_second = admit_second
        self._data: dict[K, V] = {}
        self._seen: set[K] = set()
        self.hits = self.misses = self.clears = 0

    def get(self, key: K) -> V | None:
        """The value remembered under ``key`` (None: not remembered; counted either way)."""
        got = self._data.get(key)
        if got is None:
            self.misses += 1
        else:
            self.hits += 1
        return got

    def put(self, key: K, value: V) -> V:
        """Remember ``value`` under ``key`` (starting afresh when full) and return it."""
        data = self._data
        if len(data) >= self.limit:
            data.clear()
            self.clears += 1
        data[key] = value
        return value

    def admits(self, key: K) -> bool:
        """Whether a value for ``key`` should be kept: always without admission, else when
        ``key`` was asked for before (this call counts as asking).
        """
        if not self.admit_second:
            return True
        seen = self._seen
        if key in seen:
            return True
        if len(seen) > 16 * self.limit:
            seen.clear()
        seen.add(key)
        return False

    def get_or_build(self, key: K, build: Callable[..., V], *args: Any) -> V:
        """The value under ``key``; else ``build(*args)``, remembered if admitted."""
        got = self._data.get(key)
        if got is not None:
            self.hits += 1
            return got
        self.misses += 1
        value = build(*args)
        return self.put(key, value) if self.admits(key) else value

    def clear(self) -> None:
        """Forget every entry (counters stay)."""
        self._data.clear()
        self._seen.clear()

    def __len__(self) -> int:
        return len(self._data)

    def stats(self) -> dict[str, int]:
        """Entries, limit, hits, misses and clears."""
        return {"entries": len(self._data), "limit": self.limit, "hits": self.hits, "misses": self.misses,
                "clears": self.clears}


class SpecTokens:
    """A small int per distinct spec value (equal objects get the same one), computed once per
    object and kept alive while remembered: memos key on it instead of hashing the spec (a
    frozen dataclass re-hashes all its nested fields on every lookup).

    Bounded: :meth:`full` says when ``limit`` distinct values are known; the driver then calls
    :meth:`reset` and forgets every memo keyed by the old tokens together, between two
    evaluations (a token is reused afterwards, so never inside one).
    """

    __slots__ = ("_by_id", "_by_value", "limit", "resets", "size")

    def __init__(self, limit: int = 64 * DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.resets = 0
        self.size = 0  # distinct values with a token (kept as a number: read on every evaluation)
        self._by_id: dict[int, tuple[Any, int]] = {}
        self._by_value: dict[Any, int] = {}

    def __call__(self, obj: Any) -> int:
        hit = self._by_id.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        key = spec_key(obj)
        token = self._by_value.get(key)
        if token is None:
            token = self._by_value[key] = self.size
            self.size += 1
        if len(self._by_id) > 8 * DEFAULT_LIMIT:
            self._by_id.clear()
        self._by_id[id(obj)] = (obj, token)
        return token

    def full(self) -> bool:
        """Whether ``limit`` distinct values have tokens."""
        return self.size >= self.limit

    def reset(self) -> None:
        """Forget every token (the caller forgets what it keyed by them)."""
        self._by_id.clear()
        self._by_value.clear()
        self.size = 0
        self.resets += 1
