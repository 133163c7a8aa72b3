"""Memory of the most loaded pipeline stage: the first holds the most micro-batches in
flight, the last holds the logits (hand-worked against the activation terms)."""

from __future__ import annotations

import dataclasses

import pytest

from twin.core.memory import activation_terms, memory_per_gpu
from twin.core.scenario_io import resolve_model
from twin.core.specs import Plan
from twin.core.units import GIB
from twin.core.workload import build_workload


def _memory(engine, plan, vocab=None):
    model = resolve_model("llama3.1-70b", engine.catalog)
    if vocab:
        model = dataclasses.replace(model, vocab=vocab)
    w = build_workload(model, plan.tp, plan.cp, plan.mbs, plan.sp, plan.ep, plan.expert_tp)
    act = activation_terms(plan, model, w, True)
    mem = memory_per_gpu(plan, model, w, 8, 8, 1e9, 0.0, 80 * GIB, 0.0, True, act=act)
    logits = 6.0 * w.tokens * model.vocab / plan.tp
    return mem, act, logits


def test_pipelined_first_stage_holds_no_logits(engine):
    plan = Plan(gbs=512, tp=8, pp=4)
    mem, act, _ = _memory(engine, plan)
    # 1F1B: the first stage holds min(p, m) = 4 micro-batches, and the last stage's logits
    # (one micro-batch of tokens x vocab/tp) are smaller than 3 micro-batches of activations.
    assert mem.activations == pytest.approx(4 * act.per_microbatch + act.recompute_live)
    assert mem.logits == 0.0


def test_a_large_vocabulary_makes_the_last_stage_the_most_loaded(engine):
    plan = Plan(gbs=512, tp=8, pp=4)
    mem, act, logits = _memory(engine, plan, vocab=4_000_000)
    assert mem.logits == pytest.approx(logits)
    assert mem.activations == pytest.approx(act.per_microbatch + act.recompute_live)


def test_without_pipelining_one_gpu_holds_both(engine):
    plan = Plan(gbs=512, tp=8, pp=1)
    mem, act, logits = _memory(engine, plan)
    assert mem.logits == pytest.approx(logits)
    assert mem.activations == pytest.approx(act.per_microbatch + act.recompute_live)
