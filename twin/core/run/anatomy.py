"""One scenario's step taken apart (:class:`~twin.core.step_anatomy.StepAnatomy`), from the very
work, context and strategy terms the driver assembles the estimate from.

For each pipeline rank: its layers and its passes per micro-batch (the bottleneck stage's
formulas of ``twin.core.schedule.stage_times`` applied to each stage: the first with the
embedding, the last with the LM head, the middle ones with the send/recv host work), and each
strategy evaluated on that rank's own stage (its layers, parameters and passes), its
collectives recorded as it costs them (``issue_recipes``) and its traffic sharing links as the
driver's contention model has it. The rank the estimate's compute is of is checked to give the
estimate's step again.

Pipeline schedules written: 1F1B and interleaved (``plan.schedule`` auto, 1f1b, interleaved).
The zero-bubble and DualPipe families place their passes otherwise (a split backward, two
stages per rank): :func:`build` refuses them naming the field.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from twin.core.collective_types import CollectiveCost
from twin.core.conditions import NOMINAL
from twin.core.errors import SpecError
from twin.core.host import layer_pass_s
from twin.core.interfaces import EvalContext, StageTimes, Strategy, Terms, stride_of
from twin.core.memory import stage_layers
from twin.core.pipelines import rank0_params, resolved
from twin.core.run.driver import TwinModel
from twin.core.run.issue_recipes import RECIPES, Call, generic_issues, issues_of
from twin.core.schedule import _kept_passes, _layer_passes, _recompute_s, stage_params
from twin.core.specs import Scenario
from twin.core.step import DIMENSIONS, context, finish, strategy_terms, work
from twin.core.step_anatomy import StageClass, StepAnatomy, StrategyPart
from twin.core.topology import GroupSpan

WRITTEN_SCHEDULES = ("1f1b", "interleaved")
# How far a recipe's collectives may be from the strategy's terms and still describe them.
RECIPE_TOLERANCE = 1e-6


class _Recorder:
    """A costing that records each call with the dimension whose group it was asked about."""

    def __init__(self, inner: Any, spans: dict[str, GroupSpan]) -> None:
        self.inner = inner
        self.dims = {id(span): dim for dim, span in spans.items()}
        self.calls: list[Call] = []

    def __call__(self, op: str, size: float, span: GroupSpan, algorithm: str | None = None) -> CollectiveCost:
        got = self.inner(op, size, span, algorithm)
        self.calls.append(Call(op, float(size), self.dims.get(id(span), "?"), int(span.n), float(got.time_s),
                               str(got.algorithm or "")))
        return got


def build(model: TwinModel, scenario: Scenario) -> StepAnatomy:
    """The anatomy of ``scenario``'s step (validated before; nominal conditions)."""
    plan = scenario.plan
    schedule = resolved(plan.schedule, plan.vp) if plan.pp > 1 else "1f1b"
    if schedule not in WRITTEN_SCHEDULES:
        raise SpecError("plan.schedule", f"a step's anatomy is written for the {' and '.join(WRITTEN_SCHEDULES)} "
                                         f"schedules (got {plan.schedule})")
    est = model.evaluate(scenario, validate=False, report=False)
    facts, dev, w, stage, params, expert, act, hierarchy, spans, prec_peak, fwd_flops = model.setup(scenario, NOMINAL)
    # One span object per dimension, so a recorded call names its dimension (equal spans cost the same).
    spans = {dim: dataclasses.replace(span) for dim, span in spans.items()}
    strategies = model.strategy_set(scenario.strategies)
    notes: list[str] = []
    classes = _stage_classes(scenario, dev, w, stage)
    stages = []
    for cls in classes:
        c_stage = cls.pop("stage")
        if cls["bottleneck"]:
            c_params, c_expert = rank0_params(plan, params, expert, w)
        else:
            c_params, c_expert = stage_params(plan, w, cls["layers"])
        wk = work(plan, scenario.model, scenario.dp, dev, w, c_stage, facts, prec_peak, scenario.cluster.num_gpus,
                  fwd_flops, c_params, c_expert, act, None, scenario.software)
        recorder = _Recorder(model.cost_fn(scenario, hierarchy), spans)
        ctx = context(wk, scenario.model, scenario.cluster, scenario.calibration, hierarchy, spans, recorder, 0,
                      scenario, software=scenario.software)
        parts, recorded = _terms(strategies, ctx, recorder)
        contended, flow_set = model._contend(ctx, parts, lambda h: model.cost_fn(scenario, h), None, None)
        if cls["bottleneck"]:
            st = finish(ctx, wk, contended, flow_set)
            if not math.isclose(st.step_s, est.step_time_s, rel_tol=1e-9):
                notes.append(f"the bottleneck stage's step ({st.step_s:.6g} s) is not the estimate's "
                             f"({est.step_time_s:.6g} s)")
        described = [_part(strat, alone, terms, recorded[strat.name], ctx, notes)
                     for (strat, alone), (_, terms) in zip(parts, contended, strict=True)]
        stages.append(StageClass(**cls, parts=tuple(described)))
    bd = est.breakdown
    groups = {dim: tuple(int(v) for v in stride_of(plan, scenario.dp, dim)) for dim in DIMENSIONS}
    totals = {"step_time_s": est.step_time_s, "compute_s": bd.compute_s, "recompute_s": bd.recompute_s,
              "optimizer_s": bd.optimizer_s, "bubble_s": bd.bubble_s, "exposed_comm_s": dict(bd.exposed_comm_s),
              "comm_issued_s": dict(est.comm_issued_s), "bytes_per_step": dict(est.bytes_per_step)}
    return StepAnatomy(scenario.name, scenario.cluster.num_gpus, plan.tp, plan.cp, plan.ep, scenario.dp, plan.pp,
                       plan.vp if plan.pp > 1 else 1, est.microbatches, schedule, plan.rank_order,
                       groups, tuple(stages), bd.optimizer_s, totals, tuple(notes))  # type: ignore[arg-type]


def _terms(strategies: tuple[Strategy, ...], ctx: EvalContext,
           recorder: _Recorder) -> tuple[list[tuple[Strategy, Terms]], dict[str, list[Call]]]:
    """Each taking part strategy's terms on ``ctx`` alone, and the calls each made."""
    parts = []
    recorded: dict[str, list[Call]] = {}
    for strat in strategies:
        recorder.calls = []
        terms = strategy_terms(strat, ctx)
        if terms is not None:
            parts.append((strat, terms))
            recorded[strat.name] = recorder.calls
    return parts, recorded


def _part(strat: Strategy, alone: Terms, terms: Terms, calls: list[Call], ctx: EvalContext,
          notes: list[str]) -> StrategyPart:
    """A strategy's :class:`StrategyPart`: its recipe's collectives, their times scaled by how much
    sharing links stretched its traffic (``terms`` against ``alone``), checked against its terms.
    """
    m = ctx.microbatches
    issued = float(terms.issued_per_microbatch_s) * m + float(terms.issued_per_step_s)
    alone_issued = float(alone.issued_per_microbatch_s) * m + float(alone.issued_per_step_s)
    nbytes = float(terms.bytes_per_microbatch) * m + float(terms.bytes_per_step)
    recipe = RECIPES.get(strat.name)
    rows = recipe(ctx) if recipe is not None else None
    issues = issues_of(strat.name, strat.dimension, rows, calls) if rows is not None else []
    generic = rows is None
    if not generic:
        got_s, got_b = _sums(issues, ctx)
        if not (math.isclose(got_b, nbytes, rel_tol=RECIPE_TOLERANCE, abs_tol=1.0)
                and math.isclose(got_s, alone_issued, rel_tol=RECIPE_TOLERANCE, abs_tol=1e-12)):
            notes.append(f"strategy {strat.name!r}: its recipe's collectives ({got_b:.6g} B, {got_s:.6g} s) do not "
                         f"add up to its terms ({nbytes:.6g} B, {alone_issued:.6g} s); described generically")
            generic = True
    if generic:
        issues = generic_issues(strat.name, strat.dimension, calls, lambda d: int(ctx.spans[d].n) if d in ctx.spans
                                else 1, terms)
    elif alone_issued > 0 and issued != alone_issued:
        stretch = issued / alone_issued
        issues = [dataclasses.replace(i, time_s=i.time_s * stretch) for i in issues]
    return StrategyPart(strat.name, strat.dimension, strat.phase, strat.overlapped, tuple(issues),
                        float(terms.issued_per_microbatch_s), float(terms.issued_per_step_s),
                        float(terms.bytes_per_microbatch), float(terms.bytes_per_step),
                        float(terms.exposed_per_microbatch_s), float(terms.exposed_per_step_s), generic)


def _sums(issues: list[Any], ctx: EvalContext) -> tuple[float, float]:
    """(seconds, bytes) the issues add up to over one step of the rank ``ctx`` is of."""
    m, layers = ctx.microbatches, float(ctx.stage.layers)
    v = ctx.plan.vp if ctx.plan.pp > 1 else 1
    secs = sent = 0.0
    for i in issues:
        n = i.per * occurrences(i.at, m, v, layers)
        secs += n * i.time_s
        sent += n * i.sent_bytes
    return secs, sent


def occurrences(at: str, m: int, v: int, layers: float) -> float:
    """How many units of placement ``at`` one step of a rank has (``step_anatomy`` table): its
    ``layers`` per micro-batch, ``v`` chunks per micro-batch, ``m`` micro-batches, one step.
    A placement whose size is split over the chunks counts once per micro-batch (or step).
    """
    if at.startswith("layer_"):
        return layers * m
    if at.startswith("send_"):
        return float(v * m)
    if at.startswith("step_"):
        return 1.0
    return float(m)


def _stage_classes(scenario: Scenario, dev: Any, w: Any, stage: StageTimes) -> list[dict[str, Any]]:
    """Per pipeline rank: its layers, passes per micro-batch and StageTimes (``stage`` is the
    bottleneck's, which one of them reproduces). The passes of each stage are those
    ``schedule._piped_stage`` compares to pick the bottleneck (first: its layers + the
    embedding's ends; last: + the head's; middle: + the send/recv host work), each pass the
    larger of its device and host time.
    """
    plan, model, sw = scenario.plan, scenario.model, scenario.software
    L, p = model.layers, plan.pp
    if p == 1:
        return [{"rank": 0, "layers": L, "fwd_s": stage.fwd_s, "bwd_s": stage.bwd_s, "recompute_s": stage.recompute_s,
                 "layer_fwd_s": stage.layer_fwd_s, "layer_bwd_s": stage.layer_bwd_s,
                 "attention_s": stage.attn_fwd_s + stage.attn_bwd_s, "embedding": True, "head": True,
                 "bottleneck": True, "stage": stage}]
    frozen = plan.trainable == "lora"
    passes = _layer_passes(dev, w, frozen, plan.moe_dispatcher)
    fwd_l, bwd_l, attn_l, attn_bl, ef, eb, hf, hb = passes[:8]
    t_f, t_b = layer_pass_s(sw, w, fwd_l / L, bwd_l / L, passes[11] / L)
    d_f = d_b = 0.0
    if plan.bf16_layers_start + plan.bf16_layers_end > 0:
        k_f, k_b, k_moe = _kept_passes(dev, w, frozen, plan.moe_dispatcher)
        kept_f, kept_b = layer_pass_s(sw, w, k_f / L, k_b / L, k_moe / L)
        d_f, d_b = kept_f - t_f, kept_b - t_b
    edge_f, edge_b = sw.edge_fwd_ops * sw.dispatch_us * 1e-6, sw.edge_bwd_ops * sw.dispatch_us * 1e-6
    ends = 0.5e-6 * sw.microbatch_us + 0.5e-6 * sw.p2p_us
    first, middle, last = stage_layers(L, p, plan.pp_first_layers, plan.pp_last_layers)
    k_first, k_last = min(plan.bf16_layers_start, first), min(plan.bf16_layers_end, last)
    end_passes = {0: (first, max(ef, 0.5 * edge_f + ends) + k_first * d_f,
                      max(eb, 0.5 * edge_b + ends) + k_first * d_b),
                  p - 1: (last, max(hf, 0.5 * edge_f + ends) + k_last * d_f,
                          max(hb, 0.5 * edge_b + ends) + k_last * d_b)}
    t_attn, t_attn_b = attn_l / L, attn_bl / L
    out = []
    for r in range(p):
        layers, extra_f, extra_b = end_passes.get(r, (middle, ends, ends))
        fwd, bwd = layers * t_f + extra_f, layers * t_b + extra_b
        recompute = float(_recompute_s(plan, model, dev, w, t_attn, t_f, float(layers)))
        out.append({"rank": r, "layers": int(layers), "fwd_s": fwd, "bwd_s": bwd, "recompute_s": recompute,
                    "layer_fwd_s": t_f, "layer_bwd_s": t_b, "attention_s": (t_attn + t_attn_b) * layers,
                    "embedding": r == 0, "head": r == p - 1,
                    "bottleneck": False,
                    "stage": dataclasses.replace(stage, fwd_s=fwd, bwd_s=bwd, recompute_s=recompute,
                                                 layers=float(layers), attn_fwd_s=t_attn * layers,
                                                 attn_bwd_s=t_attn_b * layers)})
    # The bottleneck: the stage whose passes are the estimate's (the first of equals).
    best = min(out, key=lambda c: abs(c["fwd_s"] - stage.fwd_s) + abs(c["bwd_s"] - stage.bwd_s)
               + abs(c["layers"] - stage.layers))
    best["bottleneck"] = True
    best["stage"] = stage
    best["fwd_s"], best["bwd_s"], best["recompute_s"] = stage.fwd_s, stage.bwd_s, stage.recompute_s
    best["attention_s"] = stage.attn_fwd_s + stage.attn_bwd_s
    return out
