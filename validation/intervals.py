"""Prediction intervals from the validation corpus: the table the twin ships, and its coverage.

    python validation/intervals.py             # residuals, the table, leave-one-family-out coverage
    python validation/intervals.py --write     # ... and write twin/presets/intervals.yaml

Residuals. Every training run of ``validation/reference/training_runs.yaml`` is predicted the way
a run the twin has never seen is: the fitted constants (``calibrate.py``: each generation's
sustained fraction and attention scale) refitted without the run's family, by the same rules
as ``calibrate.py --lofo``; the families kept out of every fit (``calibrate.HELD_OUT``) and the
runs on plugins' accelerators (profiles not fitted there) with the shipped constants. ``r = ln(measured / predicted)``.

The table (``twin.core.intervals``). Classes of runs by (GPU generation, dense or MoE, stack
family, 16-bit or low precision), then by fewer features (``LEVELS``); a class is kept where
it holds at least ``MIN_RUNS`` runs of at least ``MIN_FAMILIES`` families (fewer cannot say how
far a new family lands). A new run most likely comes from a family the corpus does not have,
so a class's distribution is that of a run of a random family: each run weighted by 1/(runs of
its family). Its 80% bounds are the split-conformal quantiles over families (Dunn, Wasserman &
Ramdas, JASA 2022, CDF pooling: the (1 - a/2)(K + 1)-th of K families' pooled weight). Twenty-odd
families are too few for a conformal 95% bound (it needs K >= 39), so the 95% bounds stretch the
80% interval from its centre by the plain weighted 97.5% and 2.5% quantiles of every run's
normalised score, (r - centre) / half-width, against the 80% interval the other families'
table gives it (``tail_ratios``): the shape of the tails, measured out of sample.

``widen`` (per feature of a scenario outside what the corpus covers): the smallest of 1, 1.25,
1.5, ... at which the runs of each GPU generation, of each stack family and of the largest
scales (> 256 GPUs), each predicted by the table of the rest, are covered at least at the
nominal 80% and 95%.

Coverage. Leave one family out again: the table built from the other families' residuals, the
family's runs checked against it (widened where the family lies outside what the others
cover, as for any scenario). Printed per family and overall: the share of runs inside the 80%
and 95% intervals, and the intervals' widths (high / low).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate

from twin.core.intervals import QUANTILES, IntervalTable, scenario_features
from twin.engine import Engine

HERE = Path(__file__).resolve().parent
TABLE = HERE.parent / "twin" / "presets" / "intervals.yaml"
# Finest first; the last level is the whole corpus.
LEVELS: tuple[tuple[str, ...], ...] = (("generation", "moe", "stack", "precision"), ("generation", "moe", "stack"),
                                       ("generation", "moe"), ("moe",), ())
MIN_RUNS = 12
MIN_FAMILIES = 3


@dataclass(frozen=True)
class Residual:
    id: str
    family: str
    features: Mapping[str, str]
    num_gpus: int
    r: float


def residuals(engine: Engine) -> list[Residual]:
    """Every run's leave-one-family-out residual (module docstring)."""
    profiles = yaml.safe_load(calibrate.PRESET.read_text())["profiles"]
    for name, prof in profiles.items():
        calibrate.BASE_ATTN[name] = (prof["attention_fwd"], prof["attention_bwd"])
    start: dict[tuple[str, str], float] = {}
    for (prof, key) in calibrate.PARAMS:
        start[(prof, key)] = 1.0 if key == "attention" else profiles[prof].get("sustained", 1.0)
    every = calibrate.load_cases(engine, fitted_only=False)
    fitted = [c for c in every if c.scenario.cluster.gpu.generation in calibrate.GENERATIONS]
    cases, held = calibrate.split_held_out(fitted)
    # The accelerators of plugins (AMD, TPU, Trainium, Gaudi): their profiles are not fitted
    # here, so their runs are predicted as shipped, like the held-out families.
    held += [c for c in every if c.scenario.cluster.gpu.generation not in calibrate.GENERATIONS]
    out = []
    for fam in sorted({c.family for c in cases}):
        params = calibrate.fold_params(engine, [c for c in cases if c.family != fam], start)
        out += [_residual(engine, c, params) for c in cases if c.family == fam]
    out += [_residual(engine, c, start) for c in held]
    return out


def _residual(engine: Engine, c: Any, params: Mapping[tuple[str, str], float]) -> Residual:
    scn = calibrate.with_params(c.scenario, dict(params))
    predicted = engine.evaluate(scn, validate=False, report=False).step_time_s
    feats = scenario_features(scn.cluster.gpu.generation, scn.model.moe is not None, scn.software.name,
                              scn.plan.precision)
    return Residual(c.id, c.family, feats, scn.cluster.num_gpus, math.log(c.measured / predicted))


def weighted_quantile(res: Sequence[Residual], p: float, conformal: bool = False) -> float:
    """The ``p``-quantile of ``res`` with each run weighted 1/(runs of its family); ``conformal``:
    of the pooled weight over K families, the (K + 1)-based rank (clamped to the extremes).
    """
    sizes: dict[str, int] = {}
    for x in res:
        sizes[x.family] = sizes.get(x.family, 0) + 1
    k = len(sizes)
    upper = p >= 0.5
    pts = sorted(((x.r, 1.0 / sizes[x.family]) for x in res), reverse=not upper)
    target = (p if upper else 1.0 - p) * ((k + 1) if conformal else k)
    total = 0.0
    for r, w in pts:
        total += w
        if total >= target - 1e-12:
            return r
    return pts[-1][0]


def tail_ratios(res: Sequence[Residual], widen: float) -> tuple[float, float]:
    """(upper, lower) reach of the 95% bounds in half-widths of a run's 80% interval from its
    centre: the 97.5% and 2.5% quantiles (families weighted alike) of the normalised scores
    ``(r - centre) / half-width`` of every run against the 80% interval the table of the other
    families gives it (normalised conformity scores: Papadopoulos et al.,
    "Normalized nonconformity measures for regression conformal prediction", 2008; Lei et al.,
    JASA 2018, section 5.2).
    """
    scores = []
    for fam in sorted({x.family for x in res}):
        table = IntervalTable.from_mapping(build([x for x in res if x.family != fam], widen, (1.0, 1.0)))
        for x in (x for x in res if x.family == fam):
            f = table.factors(x.features, x.num_gpus)
            lo, hi = math.log(f.p80_low), math.log(f.p80_high)
            scores.append(dataclasses.replace(x, r=(x.r - (lo + hi) / 2) / max((hi - lo) / 2, 1e-9)))
    # Plain weighted quantiles: a conformal 95% bound needs K >= 39 families (module docstring).
    return weighted_quantile(scores, 0.975), -weighted_quantile(scores, 0.025)


def class_bounds(members: Sequence[Residual], ratios: tuple[float, float]) -> dict[str, float]:
    """A class's log bounds (module docstring). The 95% bounds are measured from the centre of
    the class's 80% interval, not its median: in a small skewed class the median can sit at one
    80% bound, and a 95% bound stretched from it would barely pass that bound.
    """
    lo80, hi80 = weighted_quantile(members, 0.1, True), weighted_quantile(members, 0.9, True)
    centre, half = (lo80 + hi80) / 2, (hi80 - lo80) / 2
    return {"p80_low": lo80, "p80_high": hi80, "p95_low": min(lo80, centre - ratios[1] * half),
            "p95_high": max(hi80, centre + ratios[0] * half)}


def build(res: Sequence[Residual], widen: float, ratios: tuple[float, float] | None = None) -> dict[str, Any]:
    """The table's plain data (``IntervalTable.from_mapping``); ``ratios``: the 95% bounds' reach
    (``tail_ratios`` of ``res`` where not given).
    """
    if ratios is None:
        ratios = tail_ratios(res, widen)
    classes = []
    for level in LEVELS:
        groups: dict[tuple[str, ...], list[Residual]] = {}
        for x in res:
            groups.setdefault(tuple(x.features[f] for f in level), []).append(x)
        rows = []
        for key, members in sorted(groups.items()):
            fams = {x.family for x in members}
            if level and (len(members) < MIN_RUNS or len(fams) < MIN_FAMILIES):
                continue
            q = class_bounds(members, ratios)
            rows.append({"key": dict(zip(level, key, strict=True)), "n": len(members), "families": len(fams),
                         **{k: round(q[k], 6) for k in QUANTILES}})
        classes.append(rows)
    covered = {f: sorted({x.features[f] for x in res}) for f in LEVELS[0]}
    return {"levels": [list(level) for level in LEVELS], "classes": classes, "covered": covered,
            "max_gpus": max(x.num_gpus for x in res), "widen": widen}


def _covered(table: IntervalTable, runs: Sequence[Residual]) -> tuple[float, float]:
    """(share inside the 80%, share inside the 95%) of ``runs`` under ``table``."""
    h80 = h95 = 0
    for x in runs:
        iv = table.interval(x.features, x.num_gpus, 1.0)
        m = math.exp(x.r)
        h80 += iv.p80_low_s <= m <= iv.p80_high_s
        h95 += iv.p95_low_s <= m <= iv.p95_high_s
    return h80 / len(runs), h95 / len(runs)


def extrapolations(res: Sequence[Residual], widen: float) -> dict[str, tuple[float, float, int]]:
    """Coverage of runs of a kind the rest of the corpus lacks: each GPU generation, each stack
    family (the runs of each, by the table of the others), and the runs on > ``SMALL`` GPUs by
    the table of the smaller ones: {test: (cover80, cover95, runs)}."""
    out = {}
    for feature in ("generation", "stack"):
        runs80 = runs95 = n = 0.0
        for value in sorted({x.features[feature] for x in res}):
            train = [x for x in res if x.features[feature] != value]
            test = [x for x in res if x.features[feature] == value]
            c80, c95 = _covered(IntervalTable.from_mapping(build(train, widen)), test)
            runs80, runs95, n = runs80 + c80 * len(test), runs95 + c95 * len(test), n + len(test)
        out[f"each {feature} from the rest"] = (runs80 / n, runs95 / n, int(n))
    test = [x for x in res if x.num_gpus > SMALL]
    c80, c95 = _covered(IntervalTable.from_mapping(build([x for x in res if x.num_gpus <= SMALL], widen)), test)
    out[f"> {SMALL} GPUs from <= {SMALL}"] = (c80, c95, len(test))
    return out


# The extrapolation in scale: runs on more GPUs than these, predicted from the runs on at most these.
SMALL = 256


def smallest_widen(res: Sequence[Residual]) -> float:
    """The smallest widen (steps of 0.25) at which every extrapolation covers the nominal rates."""
    widen = 1.0
    while widen < 4.0:
        if all(c80 >= 0.8 and c95 >= 0.95 for c80, c95, _ in extrapolations(res, widen).values()):
            return widen
        widen += 0.25
    return widen


def coverage(res: Sequence[Residual], widen: float) -> dict[str, dict[str, float]]:
    """Per family (and ``all``): the share of its runs inside the 80% / 95% intervals of the
    table built without it, and the median width of those intervals (high / low)."""
    hits: dict[str, list[tuple[bool, bool, float, float]]] = {}
    for fam in sorted({x.family for x in res}):
        table = IntervalTable.from_mapping(build([x for x in res if x.family != fam], widen))
        for x in (x for x in res if x.family == fam):
            iv = table.interval(x.features, x.num_gpus, 1.0)
            m = math.exp(x.r)
            hits.setdefault(fam, []).append((iv.p80_low_s <= m <= iv.p80_high_s, iv.p95_low_s <= m <= iv.p95_high_s,
                                             iv.p80_high_s / iv.p80_low_s, iv.p95_high_s / iv.p95_low_s))
    hits["all"] = [h for v in hits.values() for h in v]
    return {fam: {"n": len(h), "cover80": sum(a for a, _, _, _ in h) / len(h),
                  "cover95": sum(b for _, b, _, _ in h) / len(h),
                  "width80": statistics.median(w for _, _, w, _ in h),
                  "width95": statistics.median(w for _, _, _, w in h)} for fam, h in hits.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(HERE.parent)}")
    args = ap.parse_args(argv)
    engine = Engine(autoload=False)
    res = residuals(engine)
    widen = smallest_widen(res)
    up, down = tail_ratios(res, widen)
    print(f"{len(res)} leave-one-family-out residuals; median |r| {statistics.median(abs(x.r) for x in res):.3f}; "
          f"95% bounds at {up:.2f} (upper) and {down:.2f} (lower) 80% half-widths from its centre")
    for test, (c80, c95, n) in extrapolations(res, widen).items():
        print(f"extrapolation, {test}: {n} runs, {100 * c80:.0f}% in the 80%, {100 * c95:.0f}% in the 95% "
              f"(widen {widen:g})")
    cov = coverage(res, widen)
    print(f"{'family (left out)':62s} {'n':>3s} {'in 80%':>7s} {'in 95%':>7s} {'w80':>5s} {'w95':>5s}")
    for fam, c in cov.items():
        print(f"{fam[:62]:62s} {c['n']:3.0f} {100 * c['cover80']:6.0f}% {100 * c['cover95']:6.0f}% "
              f"{c['width80']:5.2f} {c['width95']:5.2f}")
    if args.write:
        data = build(res, widen)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=HERE, check=False).stdout.strip()
        data["source"] = (f"validation/intervals.py --write at {commit or '?'}: {len(res)} leave-one-family-out "
                          f"residuals of validation/reference/training_runs.yaml; leaving each family out, "
                          f"{100 * cov['all']['cover80']:.1f}% of runs inside their 80% interval and "
                          f"{100 * cov['all']['cover95']:.1f}% inside their 95%")
        data["in_sample"] = in_sample_fingerprint(engine)
        TABLE.write_text("# Generated by validation/intervals.py --write: do not edit by hand.\n"
                         + yaml.safe_dump(data, sort_keys=False))
        print(f"wrote {TABLE}")
    return 0


def in_sample_fingerprint(engine: Engine) -> dict[str, float]:
    """The shipped model's errors on the corpus (``twin validate``'s summary): a test compares
    them with the model's of the day, so a model that moved has its table made again."""
    from twin.reference import validate_file

    summary = validate_file(engine, HERE / "reference" / "training_runs.yaml").summary()
    return {"n": summary["n"], "median_abs_error_pct": round(summary["median_abs_error_pct"], 6),
            "p90_abs_error_pct": round(summary["p90_abs_error_pct"], 6)}


if __name__ == "__main__":
    sys.exit(main())
