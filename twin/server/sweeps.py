"""Sweeps run inline, point by point, in the calling thread: the service's default runner.

A sweep spec is the mapping of a sweep file (the contract shared with ``twin.sweep``)::

    name: tp-pp
    base: {cluster: {system: DGX-H100, num_gpus: 1024}, model: llama3.1-70b, plan: {gbs: 1024}}
    axes:
      - {path: plan.tp, values: [1, 2, 4, 8]}
      - {path: plan.pp, range: {start: 1, stop: 9, step: 1}}
      - {path: plan.mbs, sample: {choices: [1, 2], n: 4, seed: 0}}
    mode: grid            # grid | zip | random
    objective: {metric: step_time_s, top: 10}
    keep_rows: true

A runner is any callable ``runner(spec, should_stop) -> Iterator[SweepEvent]`` (see
:data:`SweepRunner`): it yields one :class:`Started`, then :class:`Row` and
:class:`Progress` events as points complete, then one :class:`Finished`, and checks
``should_stop()`` between points so a cancelled call stops the work. The gRPC Sweep
servicer only converts these events; a faster engine (Ray) replaces :func:`run_inline`
through ``ServerContext.sweep_runner`` without touching the servicer.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twin.core.errors import SpecError, TooLargeError, TwinError
from twin.core.estimate import Estimate
from twin.engine import Engine
from twin.server import guard

MODES = ("grid", "zip", "random")
# Estimate fields a sweep can rank by; the first set ranks highest first.
MAXIMIZE = ("mfu", "mfu_at_precision_peak", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu")
MINIMIZE = ("step_time_s",)
SCENARIO_ROOTS = ("cluster", "model", "plan", "calibration", "name")
DEFAULT_TOP = 10
PROGRESS_INTERVAL_S = 0.25


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


# -------------------------------------------------------------------------- spec
@dataclass(frozen=True, slots=True)
class Axis:
    """One swept path and the values it takes, in order."""

    path: str
    values: tuple[Any, ...]
    sampled: bool


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """A checked sweep spec."""

    name: str
    base: Mapping[str, Any]
    axes: tuple[Axis, ...]
    mode: str
    metric: str
    top: int
    keep_rows: bool

    @property
    def total(self) -> int:
        """Points this sweep evaluates."""
        if not self.axes:
            return 1
        if self.mode == "grid":
            return math.prod(len(a.values) for a in self.axes)
        return len(self.axes[0].values)


def _number(value: Any, path: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(path, f"must be a finite number (got {value!r})")
    return value


def _range_values(data: Any, path: str, max_points: int) -> tuple[Any, ...]:
    if not isinstance(data, Mapping):
        raise SpecError(path, f"must be a mapping with start, stop, step (got {data!r})")
    unknown = sorted(set(data) - {"start", "stop", "step"})
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", "unknown field; expected one of: start, step, stop")
    start = _number(data.get("start", 0), f"{path}.start")
    stop = _number(data.get("stop"), f"{path}.stop")
    step = _number(data.get("step", 1), f"{path}.step")
    if step <= 0:
        raise SpecError(f"{path}.step", f"must be > 0 (got {step})")
    span = (stop - start) / step
    count = max(0, math.ceil(span)) if math.isfinite(span) else max_points + 1  # e.g. 1e308 - -1e308
    if count > max_points:
        raise TooLargeError(path, f"has {count} values; a sweep may have at most {max_points} points "
                                  "(limits.max_sweep_points)")
    integral = all(float(x).is_integer() for x in (start, stop, step))
    values = [start + i * step for i in range(count)]
    return tuple(int(v) for v in values) if integral else tuple(float(v) for v in values)


def _sample_values(data: Any, path: str, max_points: int) -> tuple[Any, ...]:
    if not isinstance(data, Mapping):
        raise SpecError(path, f"must be a mapping (got {data!r})")
    unknown = sorted(set(data) - {"choices", "low", "high", "n", "seed"})
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", "unknown field; expected one of: choices, high, low, n, seed")
    n = data.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpecError(f"{path}.n", f"must be an integer >= 1 (got {n!r})")
    if n > max_points:
        raise TooLargeError(f"{path}.n", f"a sweep may have at most {max_points} points (limits.max_sweep_points)")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SpecError(f"{path}.seed", f"must be an integer (got {seed!r})")
    rng = random.Random(seed)
    choices = data.get("choices")
    if choices:
        if not isinstance(choices, list | tuple):
            raise SpecError(f"{path}.choices", f"must be a list (got {choices!r})")
        return tuple(rng.choice(list(choices)) for _ in range(n))
    low = _number(data.get("low"), f"{path}.low")
    high = _number(data.get("high"), f"{path}.high")
    if not high > low:
        raise SpecError(f"{path}.high", f"must be > low ({low}) (got {high})")
    if isinstance(low, int) and isinstance(high, int):
        return tuple(rng.randint(low, high) for _ in range(n))
    return tuple(rng.uniform(low, high) for _ in range(n))


def parse_spec(data: Any, *, max_points: int, path: str = "spec") -> SweepSpec:
    """Check a sweep mapping; errors name the field, sizes over ``max_points`` are TooLargeError."""
    if not isinstance(data, Mapping):
        raise SpecError(path, f"must be a mapping (got {type(data).__name__})")
    known = {"name", "base", "axes", "mode", "objective", "keep_rows"}
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", f"unknown field; expected one of: {', '.join(sorted(known))}")
    name = data.get("name", "") or ""
    if not isinstance(name, str):
        raise SpecError(f"{path}.name", f"must be a string (got {name!r})")
    base = data.get("base")
    if not isinstance(base, Mapping):
        raise SpecError(f"{path}.base", "is required: a scenario mapping")
    mode = data.get("mode") or "grid"
    if mode not in MODES:
        raise SpecError(f"{path}.mode", f"must be one of {', '.join(MODES)} (got {mode!r})")
    objective = data.get("objective") or {}
    if not isinstance(objective, Mapping):
        raise SpecError(f"{path}.objective", f"must be a mapping (got {objective!r})")
    metric = objective.get("metric") or "step_time_s"
    if metric not in MAXIMIZE + MINIMIZE:
        raise SpecError(f"{path}.objective.metric",
                        f"must be one of {', '.join(MINIMIZE + MAXIMIZE)} (got {metric!r})")
    top = objective.get("top") or DEFAULT_TOP
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise SpecError(f"{path}.objective.top", f"must be an integer >= 1 (got {top!r})")
    keep_rows = data.get("keep_rows", True)
    if not isinstance(keep_rows, bool):
        raise SpecError(f"{path}.keep_rows", f"must be a boolean (got {keep_rows!r})")
    raw_axes = data.get("axes") or []
    if not isinstance(raw_axes, list | tuple):
        raise SpecError(f"{path}.axes", f"must be a list (got {raw_axes!r})")
    axes: list[Axis] = []
    for i, raw in enumerate(raw_axes):
        apath = f"{path}.axes[{i}]"
        axes.append(_parse_axis(raw, apath, max_points))
    _check_shape(axes, mode, path, max_points)
    return SweepSpec(name=name, base=base, axes=tuple(axes), mode=mode, metric=metric, top=min(top, max_points),
                     keep_rows=keep_rows)


def _parse_axis(raw: Any, apath: str, max_points: int) -> Axis:
    if not isinstance(raw, Mapping):
        raise SpecError(apath, f"must be a mapping with path and values, range or sample (got {raw!r})")
    unknown = sorted(str(k) for k in raw if k not in ("path", "values", "range", "sample"))
    if unknown:
        raise SpecError(f"{apath}.{unknown[0]}", "unknown field; expected one of: path, range, sample, values")
    p = raw.get("path")
    if not isinstance(p, str) or not p or any(not part for part in p.split(".")):
        raise SpecError(f"{apath}.path", f"must be a dotted field path such as 'plan.tp' (got {p!r})")
    if p.split(".")[0] not in SCENARIO_ROOTS:
        raise SpecError(f"{apath}.path", f"must start with one of {', '.join(SCENARIO_ROOTS)} (got {p!r})")
    given = [k for k in ("values", "range", "sample") if raw.get(k) is not None]
    if len(given) != 1:
        raise SpecError(apath, "needs exactly one of values, range, sample")
    if given[0] == "values":
        values = raw["values"]
        if not isinstance(values, list | tuple) or not values:
            raise SpecError(f"{apath}.values", f"must be a non-empty list (got {values!r})")
        if len(values) > max_points:
            raise TooLargeError(f"{apath}.values", f"has {len(values)} values; a sweep may have at most "
                                                   f"{max_points} points (limits.max_sweep_points)")
        return Axis(p, tuple(values), sampled=False)
    if given[0] == "range":
        values = _range_values(raw["range"], f"{apath}.range", max_points)
        if not values:
            raise SpecError(f"{apath}.range", "is empty (stop must be above start)")
        return Axis(p, values, sampled=False)
    return Axis(p, _sample_values(raw["sample"], f"{apath}.sample", max_points), sampled=True)


def _check_shape(axes: Sequence[Axis], mode: str, path: str, max_points: int) -> None:
    paths = [a.path for a in axes]
    for i, p in enumerate(paths):
        if p in paths[:i]:
            raise SpecError(f"{path}.axes[{i}].path", f"{p!r} is swept twice")
    if mode in ("zip", "random") and axes:
        n = len(axes[0].values)
        for i, a in enumerate(axes):
            if mode == "random" and not a.sampled:
                raise SpecError(f"{path}.axes[{i}]", "mode random needs every axis to use sample")
            if len(a.values) != n:
                raise SpecError(f"{path}.axes[{i}]", f"has {len(a.values)} values; mode {mode} needs the same "
                                                     f"count on every axis ({n})")
    total = math.prod(len(a.values) for a in axes) if mode == "grid" else (len(axes[0].values) if axes else 1)
    if total > max_points:
        raise TooLargeError(f"{path}.axes", f"the sweep has {total} points; the server runs at most "
                                            f"{max_points} (limits.max_sweep_points)")


# ------------------------------------------------------------------------ points
def iter_points(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """Each point as {path: value}, in sweep order."""
    if not spec.axes:
        yield {}
        return
    paths = [a.path for a in spec.axes]
    combos = (itertools.product(*(a.values for a in spec.axes)) if spec.mode == "grid"
              else zip(*(a.values for a in spec.axes), strict=True))
    for combo in combos:
        yield dict(zip(paths, combo, strict=True))


_PRESET_KEYS = {("model",): "preset", ("cluster", "gpu"): "preset"}


def apply(base: Mapping[str, Any], assignment: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with each dotted path set (a preset name grows into {preset: name})."""
    out = copy.deepcopy(dict(base))
    for dotted, value in assignment.items():
        parts = dotted.split(".")
        node: dict[str, Any] = out
        for depth, key in enumerate(parts[:-1]):
            child = node.get(key)
            where = tuple(parts[: depth + 1])
            if isinstance(child, str) and where in _PRESET_KEYS:
                child = {_PRESET_KEYS[where]: child}
            elif child is None:
                child = {}
            elif not isinstance(child, Mapping):
                raise SpecError(".".join(where), f"cannot set {dotted!r}: {'.'.join(where)} is not a mapping")
            child = dict(child)
            node[key] = child
            node = child
        node[parts[-1]] = value
    return out


# ------------------------------------------------------------------------ runner
def _score(est: Estimate, metric: str) -> float:
    value = float(getattr(est, metric))
    if math.isnan(value):
        return -math.inf
    return value if metric in MAXIMIZE else -value


def run_inline(engine: Engine, data: Mapping[str, Any], should_stop: Callable[[], bool], *,
               max_points: int, progress_interval_s: float = PROGRESS_INTERVAL_S) -> Iterator[SweepEvent]:
    """Evaluate every point of a sweep in this thread, yielding events as points complete."""
    spec = parse_spec(data, max_points=max_points)
    total = spec.total
    yield Started(spec.name, total, tuple(a.path for a in spec.axes))
    t0 = time.perf_counter()
    last_progress = t0
    done = failed = 0
    best: list[tuple[float, int, Row]] = []
    stopped = ""
    for index, assignment in enumerate(iter_points(spec)):
        if should_stop():
            stopped = "cancelled"
            break
        try:
            scenario = engine.scenario(apply(spec.base, assignment))
            est = guard.evaluate(engine, scenario, report=False)
            row = Row(index, assignment, estimate=est)
            entry = (_score(est, spec.metric), -index, row)
            if len(best) < spec.top:
                heapq.heappush(best, entry)
            elif entry[:2] > best[0][:2]:
                heapq.heapreplace(best, entry)
        except TwinError as err:
            row = Row(index, assignment, error=err)
            failed += 1
        done += 1
        if spec.keep_rows:
            yield row
        now = time.perf_counter()
        if now - last_progress >= progress_interval_s:
            last_progress = now
            yield Progress(done, total, failed, now - t0)
    ranked = tuple(r for _, _, r in sorted(best, key=lambda e: e[:2], reverse=True))
    elapsed = time.perf_counter() - t0
    yield Progress(done, total, failed, elapsed)
    yield Finished(done, failed, elapsed, spec.metric, ranked, stopped)
