"""Arithmetic that works on one point (Python numbers) or on a batch (numpy arrays).

The step model is written once. Every quantity that varies between points (a plan
degree, a message size, a tier bandwidth) is either a Python number (one scenario) or a
numpy array with one entry per point (a batch); what points share (the model's layer
list, a collective's op, a protocol) stays plain Python. Model code uses the operators
(``+ - * / // %``, comparisons) and, where it would branch or call ``max``/``min`` on a
per-point value, the functions below, which dispatch on the argument type. So one
function body serves both, and a batch of one costs what plain Python costs (numpy's
fixed cost per call, ~1 us, would be paid for every operation otherwise).

Equality: for ``+ - * /``, comparisons, ``min``/``max`` and floor/ceil, numpy float64
and Python floats round identically (IEEE 754 binary64), so a point evaluated alone and
inside a batch gives bit-identical results. Transcendental functions (``log2``, ``**``)
are the exception: numpy may use its own SIMD implementations; :func:`log2` and
:func:`power` therefore evaluate ``math.log2`` / ``math.pow`` once per distinct value.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

ndarray = np.ndarray
Num = Any  # a Python number or a numpy array of them (one entry per point)


def is_batch(*values: Any) -> bool:
    """Whether any of ``values`` is a numpy array (a batch)."""
    for v in values:  # noqa: SIM110 - a loop, not any(genexpr): this runs on every scalar call
        if isinstance(v, ndarray):
            return True
    return False


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` holds, else ``b`` (per point)."""
    if type(cond) is ndarray:
        return np.where(cond, a, b)
    return a if cond else b


def maximum(a: Any, b: Any) -> Any:
    """Larger of ``a`` and ``b`` per point (``max(a, b)`` for scalars: ties keep ``a``)."""
    if type(a) is ndarray or type(b) is ndarray:
        return np.maximum(a, b)
    return a if a >= b else b


def minimum(a: Any, b: Any) -> Any:
    """Smaller of ``a`` and ``b`` per point (ties keep ``a``)."""
    if type(a) is ndarray or type(b) is ndarray:
        return np.minimum(a, b)
    return a if a <= b else b


def ceil(x: Any) -> Any:
    """Ceiling per point (an int for a Python number, float64 for an array)."""
    if type(x) is ndarray:
        return np.ceil(x)
    return math.ceil(x)


def trunc(x: Any) -> Any:
    """Towards zero, as ``int(x)`` (int64 for an array)."""
    if type(x) is ndarray:
        return np.trunc(x).astype(np.int64)
    return int(x)


def logical_and(a: Any, b: Any) -> Any:
    """``a and b`` per point."""
    if type(a) is ndarray or type(b) is ndarray:
        return np.logical_and(a, b)
    return bool(a) and bool(b)


def logical_or(a: Any, b: Any) -> Any:
    """``a or b`` per point."""
    if type(a) is ndarray or type(b) is ndarray:
        return np.logical_or(a, b)
    return bool(a) or bool(b)


def logical_not(a: Any) -> Any:
    """``not a`` per point."""
    if type(a) is ndarray:
        return np.logical_not(a)
    return not a


class Labels(np.ndarray):
    """Names per point (a batch's string fields, e.g. ``plan.recompute``) as small int codes.

    ``labels == "full"`` and ``labels != "none"`` compare codes (numpy compares strings ~30x
    slower, and sorts them ~50x slower); :func:`isin` works too. ``names()`` gives the
    strings, ``name(i)`` one of them; indexing keeps the categories.
    """

    categories: tuple[str, ...]

    def __new__(cls, codes: Any, categories: Sequence[str]) -> Labels:
        obj = np.asarray(codes, dtype=np.int16).view(cls)
        obj.categories = tuple(categories)
        return obj

    @classmethod
    def of(cls, values: Sequence[str]) -> Labels:
        """Labels of ``values`` (categories in first-seen order)."""
        # dict.fromkeys keeps the first-seen order; the codes are looked up in C (map)
        cats = {v: i for i, v in enumerate(dict.fromkeys(values))}
        return cls(np.fromiter(map(cats.__getitem__, values), np.int16, len(values)), tuple(cats))

    def __array_finalize__(self, obj: Any) -> None:
        self.categories = getattr(obj, "categories", ())

    def code(self, name: str) -> int:
        """The code of ``name`` (-1 if no point has it)."""
        try:
            return self.categories.index(name)
        except ValueError:
            return -1

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        if isinstance(other, str):
            codes, code = np.asarray(self), self.code(other)
            if codes.ndim == 1 and (code < 0 or (len(codes) and codes.strides[0] == 0)):
                # No point has the name, or one label for every point (a batch's constant
                # column, a broadcast view): the answer is one value, written, not compared
                # (a sweep's batches compare ~26 million such entries a run, measured).
                return np.full(codes.shape, code >= 0 and bool(codes[0] == code))
            return codes == code
        return np.asarray(self.names()) == np.asarray(other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return np.logical_not(self.__eq__(other))

    __hash__ = None  # type: ignore[assignment]

    def names(self) -> np.ndarray:
        """The names, one per point (a string array)."""
        return np.asarray(self.categories or ("",))[np.asarray(self)]

    def name(self, i: int) -> str:
        """The name of point ``i``."""
        return self.categories[int(np.asarray(self)[i])]


def isin(value: Any, options: Sequence[Any]) -> Any:
    """``value in options`` per point."""
    if isinstance(value, Labels):
        return _isin_codes(np.asarray(value), [value.code(o) for o in options])
    if type(value) is ndarray:
        return _isin_codes(value, list(options))
    return value in options


def _isin_codes(values: ndarray, options: list[Any]) -> ndarray:
    """``np.isin(values, options)``: for the few options a rule names, one comparison per
    option (np.isin sorts: ~15 us a call against ~2 for two options); a constant column
    is answered from its first value.
    """
    if len(options) > 8:
        return np.isin(values, options)
    if values.ndim == 1 and len(values) > 1 and values.strides[0] == 0:
        return np.full(values.shape, bool(values[0] in options))
    out = np.zeros(values.shape, bool)
    for o in options:
        out |= values == o
    return out


def any_(mask: Any) -> bool:
    """Whether any point satisfies ``mask`` (work that no point needs can be skipped)."""
    if type(mask) is ndarray:
        # count_nonzero is one C call (~0.2 us); ndarray.any goes through numpy's Python
        # reduction wrapper (~1 us), and a batch asks this a few hundred times.
        return bool(np.count_nonzero(mask))
    return bool(mask)


def all_(mask: Any) -> bool:
    """Whether every point satisfies ``mask``."""
    if type(mask) is ndarray:
        return bool(mask.all())
    return bool(mask)


# A batch's tables are points x link classes: many short rows. numpy reduces along such a
# row ~10-25x slower than it combines whole columns (measured, numpy 2.4: 15,000 x 4
# float64, ``.max(axis=1)`` 550 us against 33 us column by column), so the row reductions
# below go column by column. ``np.maximum`` propagates NaN as ``.max`` does.


def row_max(table: np.ndarray) -> np.ndarray:
    """``table.max(axis=1)`` of a 2-D table (column by column)."""
    out = np.array(table[:, 0], dtype=table.dtype)
    for j in range(1, table.shape[1]):
        np.maximum(out, table[:, j], out=out)
    return out


def row_any(mask: np.ndarray) -> np.ndarray:
    """``mask.any(axis=1)`` of a 2-D bool table (column by column)."""
    out = np.array(mask[:, 0], dtype=bool)
    for j in range(1, mask.shape[1]):
        np.logical_or(out, mask[:, j], out=out)
    return out


def unique_ints(key: np.ndarray, bound: int, first: bool = False) -> tuple[np.ndarray, ...]:
    """``np.unique(key, return_inverse=True)`` (with ``first``: ``return_index=True`` too, the
    first point of each value) of int keys in ``[0, bound)``: (values, [first,] inverse).

    A batch's keys (codes of a few small categories: clusters, axis values, work keys) mostly
    range over far fewer values than it has points; then a table of ``bound`` entries finds
    them in a few passes, without the sort np.unique makes (measured: 100,000 keys below
    1,000, 1.6 ms against 10 ms). Wider ranges go to np.unique. The same arrays either way.
    """
    key = np.asarray(key)
    n = len(key)
    if bound > 16 * n + 4096 or key.dtype.kind not in "iu":
        return np.unique(key, return_index=first, return_inverse=True)  # type: ignore[no-any-return]
    seen = np.zeros(bound, bool)
    seen[key] = True
    values = np.flatnonzero(seen).astype(key.dtype, copy=False)
    inverse = (np.cumsum(seen) - 1)[key]
    if not first:
        return values, inverse
    at = np.full(bound, n, np.intp)
    np.minimum.at(at, key, np.arange(n, dtype=np.intp))  # the smallest point index per value
    return values, at[values], inverse


def _per_distinct(fn: Callable[..., float], *args: Any) -> Any:
    """``fn`` applied with Python math once per distinct argument tuple, spread over the batch."""
    if not is_batch(*args):
        return fn(*args)
    varying = [i for i, a in enumerate(args) if type(a) is ndarray and a.size > 1]
    if len(varying) <= 1:
        # One argument varies per point (the usual case: ``power(base, k)`` with a shared k):
        # distinct values of that one, the others as they are (a 1-D unique; the row-wise
        # unique of stacked columns costs a sort of structured rows).
        i = varying[0] if varying else next(j for j, a in enumerate(args) if type(a) is ndarray)
        fixed = [float(np.asarray(a).reshape(-1)[0]) if j != i and type(a) is ndarray else a
                 for j, a in enumerate(args)]
        col = np.asarray(args[i], dtype=np.float64)
        uniq, inv = np.unique(col, return_inverse=True)

        def at(u: float) -> float:
            fixed[i] = u
            return fn(*fixed)

        vals = np.fromiter((at(float(u)) for u in uniq), np.float64, len(uniq))
        return vals[inv.reshape(col.shape)]
    arrays = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in args))
    stacked = np.stack([a.ravel() for a in arrays], axis=1)
    uniq, inv = np.unique(stacked, axis=0, return_inverse=True)
    vals = np.fromiter((fn(*map(float, row)) for row in uniq), np.float64, len(uniq))
    return vals[inv.reshape(-1)].reshape(arrays[0].shape)


def _value_codes(values: np.ndarray) -> tuple[int, np.ndarray]:
    """(how many distinct values, each point's number among them) of a 1-D array: a constant
    array is one value, whole numbers in a small range go through :func:`unique_ints` (no sort),
    anything else through ``np.unique``.
    """
    lo, hi = values.min(), values.max()
    if lo == hi:
        return 1, np.zeros(len(values), np.intp)
    if lo >= 0 and hi < 16 * len(values) + 4096:
        whole = values if values.dtype.kind in "iu" else values.astype(np.int64)
        if whole is values or np.array_equal(whole, values):
            distinct, codes = unique_ints(whole, int(hi) + 1)
            return len(distinct), codes
    distinct, codes = np.unique(values, return_inverse=True)
    return len(distinct), codes


def on_distinct_rows(fn: Callable[..., Any], *args: Any, min_points: int = 2048) -> Any:
    """``fn(*args)`` (a numpy function, point by point) computed once per distinct row of its
    array arguments and spread back over the batch: the same values, from far fewer points when
    the rows repeat (a plan search's GEMM shapes take a few dozen values over 10^5 plans).

    Scalars and batches under ``min_points`` points go straight to ``fn``. Each array's
    distinct values are numbered (``np.unique``), the numbers combined into one int key per
    point and that key's distinct values found by :func:`unique_ints`; keys that would not fit
    in 62 bits (too many distinct values at once) fall back to ``fn`` on every point.
    """
    arrays = [a for a in args if type(a) is ndarray and a.size > 1]
    if not arrays or max(a.size for a in arrays) < min_points:
        return fn(*args)
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    key = np.zeros(shape, np.int64).ravel()
    bound = 1
    for a in arrays:
        width, codes = _value_codes(np.broadcast_to(a, shape).ravel())
        if width == 1:
            continue
        if bound * width >= 1 << 62:
            return fn(*args)
        key = key * width + codes
        bound *= width
    _, first, inverse = unique_ints(key, bound, first=True)
    rows = [np.broadcast_to(a, shape).ravel()[first] if type(a) is ndarray and a.size > 1 else a for a in args]
    return np.asarray(fn(*rows))[inverse].reshape(shape)


def log2(x: Any) -> Any:
    """``math.log2`` per point (bit-identical between one point and a batch)."""
    return _per_distinct(math.log2, x)


def power(base: Any, exponent: Any) -> Any:
    """``base ** exponent`` per point with Python's ``math.pow`` (bit-identical)."""
    return _per_distinct(math.pow, base, exponent)


def select_min(options: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The option with the smallest first element, per point (ties: the earliest option).

    Each option is a tuple whose entries are scalars or arrays; for a batch every entry
    of the winning option is gathered per point. A NaN first element wins as in
    ``np.argmin`` (the first NaN), so a batch's choice is the one ``argmin`` over the
    options would make, found option by option (no points x options table).
    """
    for o in options:  # is_batch(*o) for each option, without a call per option (one scenario's hot path)
        for v in o:
            if isinstance(v, ndarray):
                break
        else:
            continue
        break
    else:
        return min(options, key=_first)
    times = np.broadcast_arrays(*(o[0] for o in options))
    best_t = times[0]
    best = np.zeros(best_t.shape, np.intp)
    for j in range(1, len(times)):
        t = times[j]
        # t < best, or t NaN where the best is not: not (t >= best), where the best is no NaN
        # (the one value not equal to itself)
        better = ~(t >= best_t) & np.equal(best_t, best_t)
        best = np.where(better, j, best)
        best_t = np.where(better, t, best_t)
    out: list[Any] = [np.array(best_t) if len(times) == 1 else best_t]
    for j in range(1, len(options[0])):
        entries = [o[j] for o in options]
        if not any(is_batch(e) for e in entries):
            out.append(_pick_names(np.asarray(entries), best))  # one value per option (a name)
        else:
            out.append(_choose(best, [np.asarray(e) for e in entries]))
    return tuple(out)


def _pick_names(table: np.ndarray, best: np.ndarray) -> np.ndarray:
    """``table[best]`` of a small table of one value per option. Strings are gathered as
    opaque fixed-size items (numpy's fancy indexing of a str array is ~2x slower, measured).
    """
    if table.dtype.kind != "U":
        return table[best]  # type: ignore[no-any-return]
    raw = table.view(np.dtype((np.void, table.dtype.itemsize)))
    return raw.take(best).view(table.dtype)  # type: ignore[no-any-return]


def _choose(best: np.ndarray, choices: list[np.ndarray]) -> np.ndarray:
    """``np.choose(best, choices)`` (per-point arrays and 0-d values), which costs 2.5x a gather
    from the stacked choices and ~13x one ``np.where`` (measured: 30,000 points, 8 options).
    The NVLS fill is the usual case of one array among equal 0-d values: a single ``where``.
    """
    if best.ndim != 1 or any(c.ndim > 1 for c in choices):
        return np.choose(best, choices)  # type: ignore[no-any-return]
    wide = [j for j, c in enumerate(choices) if c.ndim]
    rest = [c for c in choices if not c.ndim]
    if len(wide) == 1 and rest and all(c.dtype == rest[0].dtype and c.tobytes() == rest[0].tobytes() for c in rest):
        return np.where(best == wide[0], choices[wide[0]], rest[0])  # type: ignore[no-any-return]
    table = np.stack(np.broadcast_arrays(*choices))
    return table[best, np.arange(len(best))]  # type: ignore[no-any-return]


# An option's time (``select_min``'s key): itemgetter, not a Python function called per option.
_first = operator.itemgetter(0)


def gather(values: np.ndarray, index: Any) -> np.ndarray:
    """``values[index]`` along the first axis, the same array (dtype, subclass, values).

    An int index goes through ``ndarray.take``: numpy's fancy indexing walks a points x
    link-classes table entry by entry, ``take`` copies whole rows (measured, numpy 2.4: 50,000
    rows of 3 float64, 1.7 ms against 0.43 ms; a 1-D column 15-30% less). A mask, a slice or
    a scalar index is indexed as it is.
    """
    if type(index) is ndarray and index.dtype.kind in "iu" and isinstance(values, ndarray) and values.ndim:
        return values.take(index, axis=0)
    return values[index]  # type: ignore[no-any-return]


def uniform(values: Any) -> bool:
    """Whether a batch column holds one value for every point by construction: a broadcast
    view (stride 0, :func:`broadcast_rows`) of more than one row. Its first row then
    answers any question about the whole column.
    """
    return isinstance(values, ndarray) and values.ndim == 1 and len(values) > 1 and values.strides[0] == 0


def take_rows(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]``, without copying a column that holds one value for every point.

    Such a column (length 1, or a broadcast view with stride 0) comes back as a read-only
    broadcast view of the new length: a batch's constant plan fields, the fields of its one
    cluster, the rows of one distinct work key, cost nothing to subset.
    """
    if values.ndim == 1 and (len(values) == 1 or values.strides[0] == 0) and len(values):
        return broadcast_rows(values, len(index))
    return gather(values, index)


def broadcast_rows(values: np.ndarray, n: int) -> np.ndarray:
    """A length-1 column (or the first row of one) as a read-only view of ``n`` rows.

    What ``np.broadcast_to(values[:1], (n,), subok=True)`` gives, built directly as a
    stride-0 view of the first element: ``broadcast_to`` is Python code taking ~2.6 us a
    call against ~0.8 here, and a batch makes thousands of these views.
    """
    first = values[:1]
    out = ndarray((n,), first.dtype, first, 0, (0,))
    if type(values) is not ndarray:  # a subclass (Labels) keeps its type and attributes
        out = out.view(type(values))
        out.__array_finalize__(values)
    out.flags.writeable = False
    return out


class TakeView:
    """``obj`` with every array inside it indexed by ``index``, on first access.

    A batch computes some things once per distinct key (the work of each distinct plan
    shape) and reads them per point; the view reads like the per-point object (attributes,
    nested dataclasses, dicts and tuples of them) without expanding what nobody reads.
    """

    __slots__ = ("_cache", "_index", "_obj")

    def __init__(self, obj: Any, index: np.ndarray) -> None:
        self._obj = obj
        self._index = index
        self._cache: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        cache = self._cache
        if name not in cache:
            cache[name] = _take_lazy(getattr(self._obj, name), self._index)
        return cache[name]

    def __repr__(self) -> str:
        return f"TakeView({type(self._obj).__name__}, {len(self._index)} points)"

    def source(self, index: Any) -> tuple[Any, Any]:
        """(the underlying object, the rows of it that points ``index`` of this view read)."""
        return self._obj, self._index[index]


def take_view_parts(view: TakeView) -> tuple[Any, np.ndarray]:
    """(the object a :class:`TakeView` reads, its rows): the same ``index`` object it was made with."""
    return view._obj, view._index


def _take_lazy(value: Any, index: np.ndarray) -> Any:
    if isinstance(value, ndarray):
        return take_rows(value, index) if value.ndim else value
    if isinstance(value, dict):
        return {k: _take_lazy(v, index) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_take_lazy(v, index) for v in value)
    if hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
        return TakeView(value, index)
    return value


def take(values: Sequence[Any], index: Any) -> Any:
    """``values[index]`` per point from a small table (one entry per distinct object)."""
    if type(index) is ndarray:
        return np.asarray(values)[index]
    return values[index]


def fsum_in_order(values: Iterable[Any]) -> Any:
    """``sum(values)`` (left to right, starting from 0), for scalars and arrays alike."""
    total: Any = 0
    for v in values:
        total = total + v
    return total
