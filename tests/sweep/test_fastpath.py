"""The sweep's fast evaluation gives exactly what TwinModel.evaluate gives, point by point.

Thousands of random points over models (dense, GQA, MoE, MLA), systems (HGX, NVL72, RoCE,
A100), plan degrees, batch sizes, precisions, recomputation, sharding, overlap switches
and LoRA. Each point's scenario is rebuilt independently from its axis values and
evaluated by the real model; the fast path must agree on the infeasibility reason and on
every metric, bit for bit.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pluggy
import pytest

import twin.core.evaluate as core_evaluate
from twin.core.api import Contribution, EvalContext, Strategy
from twin.core.errors import TwinError
from twin.core.scenario_io import resolve_cluster, resolve_model
from twin.core.schema import load
from twin.core.specs import Plan, Scenario
from twin.engine import Engine
from twin.hookimpl import hookimpl
from twin.plugins import make_plugin_manager
from twin.sweep.fastpath import FastEvaluator, estimate_columns
from twin.sweep.metrics import MEMORY_REASON, MODEL_COLUMNS, reason_of
from twin.sweep.points import SweepSource
from twin.sweep.spec import parse_spec

MODELS = ["llama3.1-8b", "llama3.1-70b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b", "qwen3-235b-a22b"]
SYSTEMS = ["DGX-H100", "DGX-A100", "GB200-NVL72", "Meta-RoCE-H100", "DGX-B200"]
PLAN_AXES = {
    "tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16], "vp": [1, 1, 2, 3, 4], "cp": [1, 1, 2], "ep": [1, 1, 4, 8],
    "etp": [None, None, 1], "mbs": [1, 1, 2], "gbs": [256, 512, 1024, 1536],
    "recompute": ["none", "selective", "full"], "precision": ["bf16", "bf16", "fp8"],
    "optimizer_sharding": ["distributed_optimizer", "fsdp", "zero3", "none", "zero2"],
    "fsdp_reshard_after_forward": [True, False], "grad_reduce_dtype": ["fp32", "bf16"],
    "trainable": ["full", "full", "full", "lora"], "sequence_parallel": [None, None, False],
    "recompute_layers": [None, None, 1, 4], "moe_dispatcher": ["deepep", "alltoall"],
}
OVERLAP_AXES = {"overlap.tp_comm": [None, True, False], "overlap.p2p": [True, True, False],
                "overlap.grad_reduce": [True, False], "overlap.ep_comm": [False, True]}


def random_spec(samples: int, seed: int) -> dict:
    axes = [{"path": "model", "values": MODELS}, {"path": "cluster.system", "values": SYSTEMS},
            {"path": "cluster.num_gpus", "values": [64, 256, 576, 1024, 4096]}]
    axes += [{"path": f"plan.{k}", "values": v} for k, v in PLAN_AXES.items()]
    axes += [{"path": f"plan.{k}", "values": v} for k, v in OVERLAP_AXES.items()]
    return {"name": "equivalence", "mode": "random", "samples": samples, "seed": seed, "axes": axes,
            "base": {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b", "plan": {"gbs": 256}}}


def reference(engine: Engine, values: dict) -> tuple[str | None, dict | None, int, int]:
    """The real model on a scenario built directly from one point's axis values."""
    cluster = resolve_cluster({"system": values["cluster.system"], "num_gpus": values["cluster.num_gpus"]},
                              engine.catalog)
    model = resolve_model(values["model"], engine.catalog)
    plan_data: dict = {k: values[f"plan.{k}"] for k in PLAN_AXES}
    plan_data["overlap"] = {k.split(".")[1]: values[f"plan.{k}"] for k in OVERLAP_AXES}
    scn = Scenario(cluster=cluster, model=model, plan=load(Plan, plan_data, "plan"))
    try:
        est = engine.model.evaluate(scn, report=False)
    except TwinError as err:
        return reason_of(err), None, -1, -1
    if not est.fits:
        return MEMORY_REASON, None, -1, -1
    power = cluster.gpu.tdp_w * cluster.num_gpus / 1e3
    return None, estimate_columns(est, power), est.microbatches, est.dp


def compare(engine: Engine, evaluator: FastEvaluator, samples: int, seed: int) -> dict[str, int]:
    spec = parse_spec(random_spec(samples, seed))
    batch = SweepSource(spec, engine.catalog).batch(0, samples)
    ev = evaluator.evaluate(batch)
    feasible = 0
    for i in range(samples):
        values = {a.path: batch.columns[a.column][i] for a in spec.axes}
        values = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in values.items()}
        want_reason, want, mb, dp = reference(engine, values)
        got_reason = None if ev.reason_ix[i] < 0 else ev.reasons[ev.reason_ix[i]]
        assert got_reason == want_reason, (i, values)
        if want is None:
            continue
        feasible += 1
        for name in MODEL_COLUMNS:
            assert ev.floats[name][i] == want[name], (i, name, ev.floats[name][i], want[name], values)
        assert ev.ints["microbatches"][i] == mb and ev.ints["dp"][i] == dp
    return {"feasible": feasible, **ev.stats}


def test_vector_path_is_identical_to_the_model(engine):
    stats = compare(engine, FastEvaluator(engine), samples=3000, seed=11)
    assert stats["feasible"] >= 200                      # enough points reach the full model
    assert stats["vector_groups"] > 0 and stats["checks"] >= 1
    # LoRA and every built-in strategy run on the vector path; nothing fell back
    assert stats["scalar_points"] == 0


def test_scalar_path_is_identical_to_the_model(engine):
    stats = compare(engine, FastEvaluator(engine, vector=False), samples=600, seed=12)
    assert stats["feasible"] >= 30 and stats["vector_groups"] == 0 and stats["scalar_points"] > 0


def test_offload_and_cxl_use_the_scalar_path(engine):
    spec = parse_spec({"name": "cxl", "base": {"cluster": {"system": "DGX-H100", "num_gpus": 64,
                                                          "memory_pool": {"capacity_gib_per_node": 2048}},
                                              "model": "llama3.1-70b", "plan": {"gbs": 128, "tp": 8, "pp": 2}},
                       "axes": [{"path": "plan.offload.optimizer", "values": ["none", "cxl"]},
                                {"path": "plan.vp", "values": [1, 2, 4]}]})
    batch = SweepSource(spec, engine.catalog).batch(0, 6)
    ev = FastEvaluator(engine).evaluate(batch)
    assert ev.stats["scalar_points"] == 3 and ev.stats["vector_groups"] == 1
    for i in range(6):
        g = batch.groups[batch.gix[i]]
        plan = dataclasses.replace(g.plan, gbs=128, vp=int(batch.vp[i]))
        est = engine.model.evaluate(Scenario(cluster=g.cluster, model=g.model, plan=plan), report=False)
        assert est.fits and ev.floats["step_time_s"][i] == est.step_time_s


class Checkpointing(Strategy):
    """A third-party strategy: saving a checkpoint every step costs 10 ms, exposed."""

    name = "checkpointing"
    phase = "step"
    summary = "test strategy"

    def evaluate(self, ctx: EvalContext) -> Contribution:
        return Contribution(dimension="checkpoint", exposed_per_step_s=0.01, comm_per_step_s=0.01)


class CheckpointPlugin:
    @hookimpl
    def twin_strategies(self) -> list[Strategy]:
        return [Checkpointing()]


def test_unknown_strategy_uses_the_scalar_path_and_matches():
    pm: pluggy.PluginManager = make_plugin_manager(autoload=False)
    pm.register(CheckpointPlugin(), name="checkpointing")
    engine = Engine(pm)
    evaluator = FastEvaluator(engine)
    assert not evaluator.vector
    stats = compare(engine, evaluator, samples=300, seed=13)
    assert stats["feasible"] > 0 and stats["scalar_points"] > 0


def test_guard_switches_to_the_scalar_path_when_the_model_changes(engine, monkeypatch):
    """If the model changes under the fast path, the self-check notices and results stay right."""
    monkeypatch.setattr(core_evaluate, "OVERLAP_INTERFERENCE", 0.5)  # TwinModel.evaluate reads it per call
    evaluator = FastEvaluator(engine, check_every=1)
    stats = compare(engine, evaluator, samples=400, seed=14)
    assert stats["feasible"] > 0
    assert not evaluator.vector and stats["scalar_points"] > 0


def test_plan_fields_with_no_axis_come_from_the_base(engine):
    spec = parse_spec({"name": "b", "base": {"cluster": {"system": "DGX-H100", "num_gpus": 128},
                                            "model": "llama3.1-70b", "plan": {"gbs": 512, "tp": 8, "pp": 4, "vp": 5}},
                       "axes": [{"path": "plan.mbs", "values": [1, 2]}]})
    batch = SweepSource(spec, engine.catalog).batch(0, 2)
    ev = FastEvaluator(engine).evaluate(batch)
    for i, mbs in enumerate((1, 2)):
        est = engine.evaluate({"cluster": {"system": "DGX-H100", "num_gpus": 128}, "model": "llama3.1-70b",
                               "plan": {"gbs": 512, "tp": 8, "pp": 4, "vp": 5, "mbs": mbs}})
        assert ev.floats["step_time_s"][i] == est.step_time_s
        assert ev.floats["memory_gib"][i] == pytest.approx(est.memory.total / 2**30, rel=0)
    assert np.all(ev.reason_ix == -1)
