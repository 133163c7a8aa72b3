"""How sure the twin is: a prediction interval around every step time, from the validation corpus.

The twin is judged on runs it has never seen. What it got wrong on the runs it has seen is the
best evidence of what it will get wrong next, provided those errors are measured the way a new
run meets the model: each residual ``r = ln(measured / predicted)`` is a leave-one-family-out
one (the model's fitted constants refitted without the run's family: ``validation/
intervals.py``), so the spread between families (a stack's overheads, a team's reporting) is in
it, not only the scatter inside one family.

An interval is the predicted step time times ``exp(q)`` for the residual quantiles ``q`` of the
runs *like* the scenario: the corpus is split by the features that set how wrong the model
tends to be (GPU generation, dense or MoE, the software stack's family, 16-bit or low
precision) and, where a class holds too few runs or too few families to say, by fewer of them
(the table's ``levels``, finest first; the coarsest is the whole corpus). A new run comes from
a new family more often than not, so the quantiles are those of a run drawn from a random
family (each family's runs weighted 1/n, so that the families count alike), with the
split-conformal correction over families (Dunn, Wasserman & Ramdas, "Distribution-Free
Prediction Sets for Two-Layer Hierarchical Models", JASA 2022: the CDF-pooling method); how
they are computed is ``validation/intervals.py``'s, which writes the table.

A scenario outside what the corpus covers (a GPU generation, a stack family, a precision or a
scale none of its runs had) falls into a coarser, wider class, and its log-width is also
multiplied by ``widen`` per such feature (the table's; ``validation/intervals.py`` measures it
by predicting each generation, each stack family and the largest scales from the rest); the
estimate says which features those were.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from twin.core.errors import SpecError
from twin.core.estimate import StepInterval

# The features a class is keyed by, and how a scenario's value of each is read.
FEATURES = ("generation", "moe", "stack", "precision")
# Software presets by stack family: their overheads and kernels are alike within a family
# (twin/presets/software.yaml); an unknown name is its own family.
STACK_FAMILIES = {"megatron-core-te": "megatron", "megatron-core-te2": "megatron",
                  "megatron-core-te-cudagraphs": "megatron", "nemo-megatron": "megatron",
                  "megatron-deepspeed": "megatron-eager", "pytorch-fsdp2": "pytorch", "nemo-automodel": "pytorch"}
LOW_PRECISIONS = ("fp8", "fp4")
QUANTILES = ("p80_low", "p80_high", "p95_low", "p95_high")


def stack_family(name: str) -> str:
    """The family of a software stack preset (``STACK_FAMILIES``; other names: their own)."""
    return STACK_FAMILIES.get(name, name or "megatron")


def scenario_features(generation: str, moe: bool, stack: str, precision: str) -> dict[str, str]:
    """A scenario's class features as the table keys them."""
    return {"generation": generation, "moe": "moe" if moe else "dense", "stack": stack_family(stack),
            "precision": "low" if precision in LOW_PRECISIONS else "16-bit"}


@dataclass(frozen=True, slots=True)
class IntervalClass:
    """The residual quantiles of one class of runs: ``q`` holds ``QUANTILES`` (log ratios)."""

    key: tuple[str, ...]
    n: int
    families: int
    q: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class IntervalFactors:
    """A scenario's interval bounds as multiples of its step time, and where they come from."""

    p80_low: float
    p80_high: float
    p95_low: float
    p95_high: float
    basis: str
    runs: int
    families: int
    widened: tuple[str, ...]

    def at(self, step_s: Any) -> StepInterval:
        """The interval around a step of ``step_s`` seconds."""
        return StepInterval(self.p80_low * step_s, self.p80_high * step_s, self.p95_low * step_s,
                            self.p95_high * step_s, self.basis, self.runs, self.families, self.widened)


@dataclass(frozen=True)
class IntervalTable:
    """The classes of the corpus by level (``levels``: the features each level keys by, finest
    first, the last empty: the whole corpus), what the corpus covers (``covered``: per feature,
    the values its runs have; ``max_gpus``), and how much wider an interval is per feature
    outside it (``widen``). ``source``: how the table was made (command, corpus, model).
    """

    levels: tuple[tuple[str, ...], ...]
    classes: tuple[Mapping[tuple[str, ...], IntervalClass], ...]
    covered: Mapping[str, frozenset[str]]
    max_gpus: int
    widen: float
    source: str = ""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> IntervalTable:
        """The table as ``validation/intervals.py --write`` writes it (``twin/presets/intervals.yaml``)."""
        try:
            levels = tuple(tuple(str(f) for f in level) for level in data["levels"])
            for level in levels:
                for f in level:
                    if f not in FEATURES:
                        raise SpecError("intervals.levels", f"unknown feature {f!r}; expected one of {FEATURES}")
            classes = []
            for i, level in enumerate(levels):
                table: dict[tuple[str, ...], IntervalClass] = {}
                for row in data["classes"][i]:
                    key = tuple(str(row["key"][f]) for f in level)
                    q = {name: float(row[name]) for name in QUANTILES}
                    table[key] = IntervalClass(key, int(row["n"]), int(row["families"]), q)
                classes.append(table)
            covered = {str(f): frozenset(str(v) for v in vals) for f, vals in data["covered"].items()}
            unknown = set(covered) - set(FEATURES)
            if unknown:
                raise SpecError("intervals.covered",
                                f"unknown feature {sorted(unknown)[0]!r}; expected one of {FEATURES}")
            return cls(levels, tuple(classes), covered, int(data["max_gpus"]), float(data["widen"]),
                       str(data.get("source", "")))
        except SpecError:
            raise
        except (KeyError, TypeError, ValueError) as err:
            raise SpecError("intervals", f"malformed interval table: {type(err).__name__}: {err}") from err

    def find(self, features: Mapping[str, str]) -> IntervalClass:
        """The finest class holding ``features`` (the last level holds every run)."""
        for level, classes in zip(self.levels, self.classes, strict=True):
            hit = classes.get(tuple(features[f] for f in level))
            if hit is not None:
                return hit
        raise SpecError("intervals", "the table's last level must hold the whole corpus")

    def outside(self, features: Mapping[str, str], num_gpus: int) -> tuple[str, ...]:
        """The features of a scenario outside what the corpus covers."""
        out = [f for f in FEATURES if f in self.covered and features[f] not in self.covered[f]]
        if num_gpus > self.max_gpus:
            out.append("scale")
        return tuple(out)

    def factors(self, features: Mapping[str, str], num_gpus: int) -> IntervalFactors:
        """The bounds of a scenario of ``features`` on ``num_gpus`` GPUs, as multiples of its step time."""
        cls_ = self.find(features)
        widened = self.outside(features, num_gpus)
        factor = self.widen ** len(widened)
        # Widened about the centre of the 80% interval (a class whose bounds both lie above 0
        # must not have its lower bound pushed up by the widening).
        centre = (cls_.q["p80_low"] + cls_.q["p80_high"]) / 2
        f = tuple(math.exp(centre + (cls_.q[name] - centre) * factor) for name in QUANTILES)
        basis = ", ".join(f"{name} {features[name]}" for name in self.levels[self._level_of(cls_)]) or "all runs"
        return IntervalFactors(f[0], f[1], f[2], f[3], basis, cls_.n, cls_.families, widened)

    def interval(self, features: Mapping[str, str], num_gpus: int, step_s: float) -> StepInterval:
        """The prediction interval of a step of ``step_s`` seconds for a scenario of ``features``."""
        return self.factors(features, num_gpus).at(step_s)

    def _level_of(self, cls_: IntervalClass) -> int:
        for i, classes in enumerate(self.classes):
            if classes.get(cls_.key) is cls_:
                return i
        return len(self.levels) - 1


# Standard-normal quantiles of the two-sided 80% and 95% intervals.
Z80, Z95 = 1.2815516, 1.9599640
# Fewest observed steps that narrow an interval (their spread is estimated from them).
MIN_OBSERVED = 4
# Floor of the observed steps' log spread: a job's own step times are reported to a millisecond
# or so; a spread read as zero would make the interval a point.
MIN_SPREAD = 1e-3


def student_t(z: float, dof: int) -> float:
    """The Student-t quantile of the normal quantile ``z`` at ``dof`` degrees of freedom
    (Cornish-Fisher expansion: Abramowitz & Stegun, Handbook of Mathematical Functions, 26.7.5;
    within 1% of the exact quantile for dof >= 3 at these levels).
    """
    return (z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * dof**3))


def narrowed(interval: StepInterval, step_s: float, observed: Sequence[float]) -> StepInterval:
    """The interval of a job's next step once it has reported ``observed`` steps, around a
    prediction of ``step_s`` seconds: the live calibration's view of how sure the twin is.

    The job's own bias ``b = ln(step / step_s)`` has the table's interval as its prior (a normal
    with the 80% interval's centre and half-width / Z80); each observed step is ``b`` plus the
    job's step-to-step scatter (its log spread, by the median absolute deviation: a checkpoint
    or evaluation step does not widen it). The conjugate normal update (Gelman et al., Bayesian
    Data Analysis, 3rd ed., section 2.5) gives ``b``'s posterior; the next step's predictive
    spread is that plus the scatter, read with Student-t quantiles (the scatter is estimated
    from the few steps seen). Fewer than ``MIN_OBSERVED`` steps: the interval as it was.
    """
    logs = [math.log(o / step_s) for o in observed if o > 0 and math.isfinite(o)]
    n = len(logs)
    if n < MIN_OBSERVED or step_s <= 0:
        return interval
    lo, hi = math.log(interval.p80_low_s / step_s), math.log(interval.p80_high_s / step_s)
    prior_mean, prior_var = (lo + hi) / 2, max(((hi - lo) / (2 * Z80)) ** 2, MIN_SPREAD**2)
    centre = statistics.median(logs)
    scatter = max(1.4826 * statistics.median(abs(x - centre) for x in logs), MIN_SPREAD)
    post_var = 1 / (1 / prior_var + n / scatter**2)
    post_mean = post_var * (prior_mean / prior_var + n * centre / scatter**2)
    sd = math.sqrt(post_var + scatter**2)
    t80, t95 = student_t(Z80, n - 1), student_t(Z95, n - 1)
    bounds = [step_s * math.exp(post_mean + k * sd) for k in (-t80, t80, -t95, t95)]
    return replace(interval, p80_low_s=bounds[0], p80_high_s=bounds[1], p95_low_s=bounds[2], p95_high_s=bounds[3],
                   basis=f"{interval.basis}; narrowed by {n} observed steps")
