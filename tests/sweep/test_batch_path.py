"""The sweep's batch evaluation gives exactly what TwinModel.evaluate gives, point by point.

One model, two ways of running it: a sweep batch goes through ``evaluate_points`` (numpy
arrays), a scenario through ``evaluate`` (Python numbers). Thousands of random points over
models (dense, GQA, MoE, MLA), systems (HGX, NVL72, RoCE, A100), plan degrees, batch
sizes, precisions, recomputation (and its modules), sharding, pipeline schedules, overlap switches,
offloading and LoRA; each
point's scenario is rebuilt independently from its axis values and evaluated alone. Both
must agree on the infeasibility reason and on every metric, bit for bit, and third-party
strategies (vectorised or not) and a collective-cost hook must too.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pluggy
import pytest

from twin.core import ops
from twin.core.collectives import CollectiveCost
from twin.core.errors import TwinError
from twin.core.interfaces import EvalContext, Strategy, Terms
from twin.core.scenario_io import resolve_cluster, resolve_model
from twin.core.schema import load
from twin.core.specs import Plan, Scenario
from twin.engine import Engine
from twin.hookimpl import hookimpl
from twin.plugins import make_plugin_manager
from twin.sweep.evaluator import SweepEvaluator, sweep_columns
from twin.sweep.metrics import MEMORY_REASON, MODEL_COLUMNS, reason_of
from twin.sweep.sweep_points import SweepSource
from twin.sweep.sweep_spec import parse_spec

MODELS = ["llama3.1-8b", "llama3.1-70b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b", "qwen3-235b-a22b"]
SYSTEMS = ["DGX-H100", "DGX-A100", "GB200-NVL72", "Meta-RoCE-H100", "DGX-B200"]
PLAN_AXES = {
    "tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16], "vp": [1, 1, 2, 3, 4], "cp": [1, 1, 2], "ep": [1, 1, 4, 8],
    "etp": [None, None, 1], "mbs": [1, 1, 2], "gbs": [256, 512, 1024, 1536],
    "recompute": ["none", "selective", "full"], "precision": ["bf16", "bf16", "fp8", "fp8", "fp4"],
    "recipe": ["auto", "auto", "delayed", "current", "blockwise", "mxfp8"],
    "bf16_layers_start": [0, 0, 1], "bf16_layers_end": [0, 0, 1, 2],
    "pp_first_layers": [None] * 6 + [2, 4], "pp_last_layers": [None] * 6 + [2, 6],
    "optimizer_sharding": ["distributed_optimizer", "fsdp", "zero3", "none", "zero2"],
    # (False applies with fsdp only: elsewhere the point is refused, on both paths alike)
    "fsdp_reshard_after_forward": [True] * 7 + [False], "grad_reduce_dtype": ["fp32", "bf16"],
    "trainable": ["full", "full", "full", "lora"], "sequence_parallel": [None, None, False],
    "recompute_layers": [None, None, 1, 4], "moe_dispatcher": ["deepep", "alltoall"],
    "rank_order": ["tp-cp-ep-dp-pp", "tp-cp-ep-dp-pp", "tp-cp-pp-dp"],
    "schedule": ["auto"] * 9 + ["1f1b", "interleaved", "zero_bubble_h1", "zero_bubble_h2", "zero_bubble_v",
                                "dualpipe", "dualpipev"],
    "recompute_modules": [["core_attn"]] * 12 + [["layernorm"], ["core_attn", "layernorm"], ["mla_up_proj"],
                                                ["moe_act", "layernorm", "mla_up_proj"]],
    "dp_shard": [0, 0, 0, 0, 2, 8, 16],
}
OVERLAP_AXES = {"overlap.tp_comm": [None, True, False], "overlap.p2p": [True, True, False],
                "overlap.grad_reduce": [True, False], "overlap.ep_comm": [False, True]}
# The energy model's inputs (cluster.power, cluster.prices, optics): every one changes some column.
ENERGY_AXES = {"power.gpu_busy_fraction": [1.0, 1.0, 0.8], "power.gpu_idle_w": [None, None, 90.0, 300.0],
               "power.nic_w": [None, 24.8], "power.switch_w": [[], [], [640.0]], "power.host_w": [None, 1500.0],
               "power.pue": [1.0, 1.0, 1.25], "prices.usd_per_gpu_hour": [None, None, 2.5],
               "prices.usd_per_kwh": [None, 0.08], "optics": [None, None, {"kind": "pluggable"}, {"kind": "cpo"}]}


# Energy columns that only the energy axes make non-zero: each must be reached by feasible points.
COVERED = ("energy_nic_j", "energy_switch_j", "energy_optics_j", "energy_host_j", "energy_facility_j",
           "cost_usd_per_step")


def random_spec(samples: int, seed: int) -> dict:
    axes = [{"path": "model", "values": MODELS}, {"path": "cluster.system", "values": SYSTEMS},
            {"path": "cluster.num_gpus", "values": [64, 256, 576, 1024, 4096]}]
    axes += [{"path": f"plan.{k}", "values": v} for k, v in PLAN_AXES.items()]
    axes += [{"path": f"plan.{k}", "values": v} for k, v in OVERLAP_AXES.items()]
    axes += [{"path": f"cluster.{k}", "values": v} for k, v in ENERGY_AXES.items()]
    return {"name": "equivalence", "mode": "random", "samples": samples, "seed": seed, "axes": axes,
            "base": {"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b", "plan": {"gbs": 256}}}


def reference(engine: Engine, values: dict) -> tuple[str | None, dict | None, int, int]:
    """The real model on a scenario built directly from one point's axis values."""
    data: dict[str, Any] = {"system": values["cluster.system"], "num_gpus": values["cluster.num_gpus"]}
    for key in ENERGY_AXES:
        section, _, name = key.partition(".")
        value = values[f"cluster.{key}"]
        if isinstance(value, str):  # a list or mapping value: the row column holds its JSON text
            value = json.loads(value)
        if name:
            data.setdefault(section, {})[name] = value
        elif value is not None:
            data[section] = value
    cluster = resolve_cluster(data, engine.catalog)
    model = resolve_model(values["model"], engine.catalog)
    plan_data: dict = {k: values[f"plan.{k}"] for k in PLAN_AXES}
    # a list-valued axis reads back as its JSON text
    plan_data["recompute_modules"] = json.loads(plan_data["recompute_modules"])
    plan_data["overlap"] = {k.split(".")[1]: values[f"plan.{k}"] for k in OVERLAP_AXES}
    scn = Scenario(cluster=cluster, model=model, plan=load(Plan, plan_data, "plan"))
    try:
        est = engine.evaluate(scn, report=False)
    except TwinError as err:
        return reason_of(err), None, -1, -1
    if not est.fits:
        return MEMORY_REASON, None, -1, -1
    return None, sweep_columns(est), est.microbatches, est.dp


def same(a: float, b: float) -> bool:
    """Bit for bit, NaN (a cost without prices) equal to NaN."""
    return a == b or (math.isnan(a) and math.isnan(b))


def compare(engine: Engine, evaluator: SweepEvaluator, samples: int, seed: int) -> dict[str, int]:
    spec = parse_spec(random_spec(samples, seed))
    batch = SweepSource(spec, engine.catalog).batch(0, samples)
    ev = evaluator.evaluate(batch)
    columns = batch.axis_columns(np.arange(len(batch)))
    feasible = 0
    covered = dict.fromkeys(COVERED, 0)
    for i in range(samples):
        values = {a.path: columns[a.column][i] for a in spec.axes}
        values = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in values.items()}
        want_reason, want, mb, dp = reference(engine, values)
        got_reason = None if ev.reason_ix[i] < 0 else ev.reasons[ev.reason_ix[i]]
        assert got_reason == want_reason, (i, values)
        if want is None:
            continue
        feasible += 1
        for name in MODEL_COLUMNS:
            assert same(ev.floats[name][i], want[name]), (i, name, ev.floats[name][i], want[name], values)
        assert ev.ints["microbatches"][i] == mb and ev.ints["dp"][i] == dp
        for name in COVERED:
            covered[name] += bool(want[name] > 0)    # NaN (no prices) counts as not covered
    return {"feasible": feasible, **ev.stats, **covered}


def test_batch_path_is_identical_to_the_model(engine):
    stats = compare(engine, SweepEvaluator(engine), samples=12000, seed=11)
    assert stats["feasible"] >= 200                      # enough points reach the full model
    assert all(stats[name] >= 20 for name in COVERED), stats  # and the energy inputs, each of them
    # LoRA and every built-in strategy run on the batch path; no point fell back to one-by-one
    assert stats["evaluated"] >= stats["feasible"] and stats["scalar_points"] == 0


def test_offload_and_cxl_run_on_the_batch_path(engine):
    spec = parse_spec({"name": "cxl", "base": {"cluster": {"system": "DGX-H100", "num_gpus": 64,
                                                          "memory_pool": {"capacity_gib_per_node": 2048}},
                                              "model": "llama3.1-70b", "plan": {"gbs": 128, "tp": 8, "pp": 2}},
                       "axes": [{"path": "plan.offload.optimizer", "values": ["none", "cxl", "host"]},
                                {"path": "plan.offload.activations", "values": ["none", "cxl"]},
                                {"path": "plan.vp", "values": [1, 2, 4]}]})
    batch = SweepSource(spec, engine.catalog).batch(0, 18)
    ev = SweepEvaluator(engine).evaluate(batch)
    assert ev.stats["scalar_points"] == 0
    offloaded = 0
    for i in range(18):
        scn = batch.scenario(i)
        assert scn.plan.gbs == 128
        est = engine.evaluate(scn, report=False)
        assert est.fits and ev.floats["step_time_s"][i] == est.step_time_s
        assert ev.floats["offload_s"][i] == est.breakdown.offload_s
        offloaded += est.breakdown.offload_s > 0
    assert offloaded >= 6


def grid_matches(engine: Engine, spec_data: dict, field: str) -> dict[Any, int]:
    """Every point of a grid: the batch gives it the reason or the numbers the scalar path
    gives it; returns, per value of plan ``field``, how many points ran."""
    spec = parse_spec({"mode": "grid", **spec_data})
    n = math.prod(len(a["values"]) for a in spec_data["axes"])
    batch = SweepSource(spec, engine.catalog).batch(0, n)
    ev = SweepEvaluator(engine).evaluate(batch)
    assert ev.stats["scalar_points"] == 0
    ran: dict[Any, int] = {}
    for i in range(n):
        scn = batch.scenario(i)
        try:
            est = engine.evaluate(scn, report=False)
        except TwinError as err:
            assert ev.reasons[ev.reason_ix[i]] == reason_of(err), i
            continue
        if not est.fits:
            assert ev.reasons[ev.reason_ix[i]] == MEMORY_REASON, i
            continue
        assert ev.reason_ix[i] < 0, (i, ev.reasons[ev.reason_ix[i]])
        want = sweep_columns(est)
        for name in MODEL_COLUMNS:
            assert same(ev.floats[name][i], want[name]), (i, name)
        key = getattr(scn.plan, field)
        ran[key] = ran.get(key, 0) + 1
    return ran


def test_every_schedule_runs_on_the_batch_path_and_matches(engine):
    # Dense and MoE models, pipelined plans of every schedule and interleaving depth.
    names = ["auto", "1f1b", "interleaved", "zero_bubble_h1", "zero_bubble_h2", "zero_bubble_v", "dualpipe",
             "dualpipev"]
    ran = grid_matches(engine, {"name": "schedules", "base": {
        "cluster": {"system": "DGX-H100", "num_gpus": 128}, "model": "llama3.1-70b", "plan": {"tp": 8, "mbs": 1}},
        "axes": [{"path": "model", "values": ["llama3.1-70b", "mixtral-8x7b"]},
                 {"path": "plan.pp", "values": [2, 4, 8]}, {"path": "plan.vp", "values": [1, 2, 4]},
                 {"path": "plan.gbs", "values": [32, 64, 256]}, {"path": "plan.schedule", "values": names}]},
        "schedule")
    assert set(ran) == set(names), ran  # every schedule has runnable points here


def test_recompute_modules_run_on_the_batch_path_and_match(engine):
    sets = [["core_attn"], ["layernorm"], ["mla_up_proj"], ["moe_act"], ["layernorm", "mla_up_proj", "moe_act"],
            ["mlp"], ["moe"], ["layernorm", "moe"]]
    ran = grid_matches(engine, {"name": "modules", "base": {
        "cluster": {"system": "HGX-H200", "num_gpus": 512}, "model": "deepseek-v3",
        "plan": {"tp": 1, "pp": 16, "ep": 32, "gbs": 256, "mbs": 1}},
        "axes": [{"path": "plan.schedule", "values": ["auto", "dualpipe"]},
                 {"path": "plan.recompute", "values": ["none", "selective", "full"]},
                 {"path": "plan.recompute_modules", "values": sets},
                 {"path": "plan.precision", "values": ["bf16", "fp8"]},
                 {"path": "plan.recipe", "values": ["auto", "blockwise"]}]},
        "recompute_modules")
    assert len(ran) == len(sets), ran


def test_cp_comm_types_run_on_the_batch_path_and_match(engine):
    """Ring, all-gather and Ulysses context parallelism in one batch (a2a refused where cp does
    not divide a tensor-parallel rank's heads), each point as the scalar path gives it."""
    ran = grid_matches(engine, {"name": "cp-comm", "base": {
        "cluster": {"system": "DGX-H100", "num_gpus": 128}, "model": {"preset": "llama3.1-70b", "seq_len": 65536},
        "plan": {"tp": 4, "mbs": 1, "gbs": 32}},
        "axes": [{"path": "plan.cp", "values": [2, 4, 8, 16]},
                 {"path": "plan.pp", "values": [1, 2]},
                 {"path": "plan.cp_comm_type", "values": ["p2p", "all_gather", "a2a"]},
                 {"path": "plan.recompute", "values": ["none", "full"]}]},
        "cp_comm_type")
    assert set(ran) == {"p2p", "all_gather", "a2a"}, ran


def test_a_sequence_length_axis_is_one_batch_and_matches(engine):
    """model.seq_len as an axis: models that differ in it only are one point set (the length a
    column of the batch), each point as the scalar path gives it; cp rules see each length."""
    spec = {"name": "seq", "base": {"cluster": {"system": "DGX-H100", "num_gpus": 64},
                                    "model": {"preset": "llama3.1-8b", "seq_len": 4096},
                                    "plan": {"tp": 2, "mbs": 1, "gbs": 64}},
            "axes": [{"path": "model.seq_len", "values": [2048, 3002, 8192, 16384]},
                     {"path": "plan.cp", "values": [1, 2, 4]},
                     {"path": "plan.recompute", "values": ["none", "selective"]}]}
    ran = grid_matches(engine, spec, "cp")
    assert set(ran) == {1, 2, 4}
    batch = SweepSource(parse_spec({"mode": "grid", **spec}), engine.catalog).batch(0, 24)
    ev = SweepEvaluator(engine).evaluate(batch)
    assert len(batch.models) == 4 and ev.stats["batches"] == 1
    refused = [i for i in range(24) if ev.reason_ix[i] >= 0 and ev.reasons[ev.reason_ix[i]].startswith("plan.cp")]
    assert [batch.scenario(i).model.seq_len for i in refused] == [3002] * 4   # 2*cp of 2 and 4 must divide it


class Checkpointing(Strategy):
    """A third-party strategy: saving a checkpoint shard every step costs 10 ms plus its
    bytes over the NICs (vectorised: plain arithmetic works on numbers and arrays)."""

    name = "checkpointing"
    dimension = "checkpoint"
    phase = "step"
    summary = "test strategy"

    def evaluate(self, ctx: EvalContext) -> Terms:
        shard = ctx.params_per_gpu * 2.0
        t = 0.01 + shard / 50e9
        return Terms(exposed_per_step_s=t, issued_per_step_s=t, bytes_per_step=shard)


class ScalarOnlyCheckpointing(Checkpointing):
    """The same, written with Python branching that only works on one scenario."""

    name = "checkpointing-scalar"
    vectorized = False

    def active(self, ctx: EvalContext) -> bool:
        if ctx.batch:
            raise AssertionError("a scalar-only strategy must only see one-scenario contexts")
        return bool(ctx.plan.pp >= 1)

    def evaluate(self, ctx: EvalContext) -> Terms:
        assert not ctx.batch and ctx.scenario is not None
        t = max(0.01, 0.01 + ctx.params_per_gpu * 2.0 / 50e9) if ctx.plan.tp > 0 else 0.0
        return Terms(exposed_per_step_s=t, issued_per_step_s=t, bytes_per_step=ctx.params_per_gpu * 2.0)


class StrategyPlugin:
    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    @hookimpl
    def twin_strategies(self) -> list[Strategy]:
        return [self.strategy]


def _engine_with(*plugins: object) -> Engine:
    pm: pluggy.PluginManager = make_plugin_manager(autoload=False)
    for p in plugins:
        pm.register(p)
    return Engine(pm)


def test_a_third_party_strategy_runs_on_the_batch_path_and_matches():
    engine = _engine_with(StrategyPlugin(Checkpointing()))
    stats = compare(engine, SweepEvaluator(engine), samples=400, seed=13)
    assert stats["feasible"] > 0 and stats["scalar_points"] == 0
    scn = engine.scenario({"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": "llama3.1-8b",
                           "plan": {"tp": 8, "gbs": 64}})
    est = engine.evaluate(scn)
    assert est.breakdown.exposed_comm_s["checkpoint"] > 0.01     # it really is in the step


def test_a_scalar_only_strategy_is_evaluated_point_by_point_and_matches():
    engine = _engine_with(StrategyPlugin(ScalarOnlyCheckpointing()))
    stats = compare(engine, SweepEvaluator(engine), samples=300, seed=15)
    assert stats["feasible"] > 0


class SequenceCheckpointing(Checkpointing):
    """A third-party strategy whose cost grows with the sequence length it reads from the model."""

    name = "checkpointing-seq"

    def evaluate(self, ctx: EvalContext) -> Terms:
        t = 0.01 + ctx.model.seq_len * 1e-6
        return Terms(exposed_per_step_s=t, issued_per_step_s=t, bytes_per_step=ctx.model.seq_len * 1.0)


class ScalarSequenceCheckpointing(SequenceCheckpointing):
    name = "checkpointing-seq-scalar"
    vectorized = False

    def evaluate(self, ctx: EvalContext) -> Terms:
        assert not ctx.batch and isinstance(ctx.model.seq_len, int)
        return super().evaluate(ctx)


@pytest.mark.parametrize("strategy", [SequenceCheckpointing(), ScalarSequenceCheckpointing()])
def test_a_strategy_reading_the_sequence_length_sees_each_points_own_in_a_mixed_batch(strategy: Strategy):
    # Models that differ in seq_len only share a batch (TwinModel.evaluate_many): a strategy
    # reads ctx.model.seq_len per point there, as it reads the plan's fields.
    engine = _engine_with(StrategyPlugin(strategy))
    points = [{"cluster": {"system": "DGX-H100", "num_gpus": 64}, "model": {"preset": "llama3.1-8b", "seq_len": s},
               "plan": {"tp": tp, "gbs": gbs}} for s in (2048, 4096, 8192) for tp in (2, 8) for gbs in (64, 128)]
    res = engine.evaluate_many(points)
    assert res.stats["batches"] == 1
    for i, p in enumerate(points):
        est = engine.evaluate(p)
        assert res.columns["exposed_checkpoint_s"][i] == est.breakdown.exposed_comm_s["checkpoint"]
        assert est.breakdown.exposed_comm_s["checkpoint"] == 0.01 + p["model"]["seq_len"] * 1e-6
        assert res.columns["step_time_s"][i] == est.step_time_s


class HalfPriceAllReduce:
    """A collective-cost hook: all-reduce at half the built-in time (e.g. an in-network engine)."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def twin_collective_cost(self, op: str, size_bytes: float, span: Any, hierarchy: Any, algorithm: Any,
                             scenario: Any) -> CollectiveCost | None:
        self.calls += 1
        assert isinstance(size_bytes, float) and isinstance(span.n, int)   # one point at a time
        if op != "all_reduce":
            return None
        from twin.core.collectives import collective_cost

        base = collective_cost(op, size_bytes, span, hierarchy, algorithm)
        return dataclasses.replace(base, time_s=base.time_s / 2, algorithm="hook")


def test_a_collective_cost_hook_is_honoured_on_the_batch_path():
    hook = HalfPriceAllReduce()
    engine = _engine_with(hook)
    stats = compare(engine, SweepEvaluator(engine), samples=300, seed=16)
    assert stats["feasible"] > 0 and hook.calls > 0


def test_plan_fields_with_no_axis_come_from_the_base(engine):
    spec = parse_spec({"name": "b", "base": {"cluster": {"system": "DGX-H100", "num_gpus": 128},
                                            "model": "llama3.1-70b", "plan": {"gbs": 512, "tp": 8, "pp": 4, "vp": 5}},
                       "axes": [{"path": "plan.mbs", "values": [1, 2]}]})
    batch = SweepSource(spec, engine.catalog).batch(0, 2)
    ev = SweepEvaluator(engine).evaluate(batch)
    for i, mbs in enumerate((1, 2)):
        est = engine.evaluate({"cluster": {"system": "DGX-H100", "num_gpus": 128}, "model": "llama3.1-70b",
                               "plan": {"gbs": 512, "tp": 8, "pp": 4, "vp": 5, "mbs": mbs}})
        assert ev.floats["step_time_s"][i] == est.step_time_s
        assert ev.floats["memory_gib"][i] == pytest.approx(est.memory.total / 2**30, rel=0)
    assert np.all(ev.reason_ix == -1)


def test_ops_dispatch_on_numbers_and_arrays():
    a = np.asarray([1.0, 5.0, 3.0])
    assert ops.maximum(2.0, 3.0) == 3.0 and ops.maximum(3, 2) == 3
    assert ops.maximum(a, 2.0).tolist() == [2.0, 5.0, 3.0]
    assert ops.where(a > 2, a, 0.0).tolist() == [0.0, 5.0, 3.0] and ops.where(False, 1, 2) == 2
    assert ops.log2(8) == 3.0 and ops.log2(np.asarray([8, 2, 8])).tolist() == [3.0, 1.0, 3.0]
    assert ops.power(np.asarray([0.5, 0.5]), 3).tolist() == [0.125, 0.125] and ops.power(0.5, 3) == 0.125
    # Per distinct value with Python's math.pow, whichever arguments vary per point.
    base, expo = np.asarray([0.3, 0.7, 0.3, 0.9]), np.asarray([3.0, 8.0, 1.5, 3.0])
    assert ops.power(base, 8).tolist() == [math.pow(b, 8) for b in base.tolist()]
    assert ops.power(2.0, expo).tolist() == [math.pow(2.0, e) for e in expo.tolist()]
    assert ops.power(np.asarray([0.3]), expo).tolist() == [math.pow(0.3, e) for e in expo.tolist()]
    assert ops.power(base, expo).tolist() == [math.pow(b, e) for b, e in zip(base.tolist(), expo.tolist(), strict=True)]
    t, name = ops.select_min([(np.asarray([3.0, 1.0]), "ring"), (np.asarray([2.0, 4.0]), "tree")])
    assert t.tolist() == [2.0, 1.0] and name.tolist() == ["tree", "ring"]


def test_select_min_chooses_per_point_as_argmin_over_the_options_does():
    """Ties keep the earlier option, a NaN time wins as np.argmin takes it (the first NaN),
    -0.0 ties with 0.0, and every entry of the winner is gathered (names, per-point values,
    scalars broadcast) with the dtype a points x options table would have.
    """
    rng = np.random.default_rng(5)
    for _ in range(500):
        n, k = int(rng.integers(1, 30)), int(rng.integers(1, 7))
        options = []
        for j in range(k):
            t = rng.choice([0.0, -0.0, 1.0, 2.0, np.inf, np.nan], size=n) if j % 2 else rng.random(n)
            bw = rng.random(n) if rng.random() < 0.7 else float(j)
            options.append((t, f"algo{j}", "Simple", bw))
        table = np.stack([o[0] for o in options])
        best = np.argmin(table, axis=0)
        t, algo, proto, bw = ops.select_min(options)
        assert np.array_equal(t, table[best, np.arange(n)], equal_nan=True)
        assert np.array_equal(np.signbit(t), np.signbit(table[best, np.arange(n)]))
        assert algo.tolist() == [f"algo{j}" for j in best.tolist()] and set(proto.tolist()) == {"Simple"}
        expected = np.stack([np.broadcast_to(np.asarray(o[3]), (n,)) for o in options])[best, np.arange(n)]
        assert bw.dtype == expected.dtype and np.array_equal(bw, expected)


def test_select_min_of_scalars_keeps_the_earliest_tie_and_any_array_makes_it_a_batch():
    """One scenario's options (all scalars): the first of the fastest, as ``min`` takes it; one
    array anywhere in any option (here the last option's bandwidth) makes every entry per point.
    """
    assert ops.select_min([(2.0, "ring", 1.0), (1.0, "tree", 2.0), (1.0, "nvls", 3.0)]) == (1.0, "tree", 2.0)
    t, algo, bw = ops.select_min([(2.0, "ring", 1.0), (1.0, "tree", np.asarray([2.0, 5.0]))])
    assert type(t) is np.ndarray and t == 1.0 and algo == "tree" and bw.tolist() == [2.0, 5.0]

def test_the_example_packages_strategy_runs_on_the_batch_path(example_plugin):
    """The third-party strategy of tests/example_plugin (installed like any plugin package, by the fixture)."""
    from twin_example_dragonfly.gradnorm import GradientNormAllReduce

    from twin.testing import engine_with

    engine = engine_with(GradientNormAllReduce())
    stats = compare(engine, SweepEvaluator(engine), samples=400, seed=17)
    assert stats["feasible"] > 0 and stats["scalar_points"] == 0
    spec = parse_spec(random_spec(200, 18))
    ev = SweepEvaluator(engine).evaluate(SweepSource(spec, engine.catalog).batch(0, 200))
    ok = np.flatnonzero(ev.reason_ix < 0)
    assert len(ok)
    batch = SweepSource(spec, engine.catalog).batch(0, 200)
    for i in ok:
        plan = batch.scenario(i).plan
        active = ev.ints["dp"][i] * plan.cp > 1 and plan.trainable == "full"
        assert (ev.floats["exposed_other_s"][i] > 0) == active, i   # its own dimension, where it takes part


def test_contended_points_of_a_group_are_costed_again_per_distinct_share_and_match(engine):
    """Points of a group (same all but gbs and vp) whose traffic shares links get shares that
    differ with their micro-batch count; a strategy that does not read the schedule is costed
    again once per distinct (group, shares) on the groups' rows, and every point still equals
    its own evaluation (contention included).
    """
    spec = parse_spec({"name": "contended-groups",
                       "base": {"cluster": {"system": "Meta-RoCE-H100", "num_gpus": 1024}, "model": "mixtral-8x7b",
                                "plan": {"gbs": 1024, "optimizer_sharding": "fsdp"}},
                       "axes": [{"path": "plan.tp", "values": [1, 2, 8]}, {"path": "plan.pp", "values": [2, 4]},
                                {"path": "plan.cp", "values": [1, 2]}, {"path": "plan.ep", "values": [1, 8]},
                                {"path": "plan.vp", "values": [1, 2, 3, 4]},
                                {"path": "plan.gbs", "values": [256, 512, 1024, 2048, 4096]}]})
    batch = SweepSource(spec, engine.catalog).batch(0, spec.total_points)
    ev = SweepEvaluator(engine).evaluate(batch)
    assert ev.stats["groups"] * 3 < ev.stats["evaluated"]
    contended = checked = 0
    for i in range(len(batch)):
        try:
            est = engine.evaluate(batch.scenario(i))
        except TwinError:
            assert ev.reason_ix[i] >= 0
            continue
        if not est.fits:
            continue
        checked += 1
        contended += est.contention_s > 0
        want = sweep_columns(est)
        for name in MODEL_COLUMNS:
            assert same(ev.floats[name][i], want[name]), (i, name)
    assert checked >= 100 and contended >= 50, (checked, contended)


def test_points_that_differ_in_gbs_and_vp_share_the_strategies_work_and_match(engine):
    """Strategies that do not read the schedule run once per group; every point still equals its own evaluation."""
    spec = parse_spec({"name": "groups", "base": {"cluster": {"system": "DGX-H100", "num_gpus": 256},
                                                  "model": "llama3.1-70b", "plan": {"gbs": 512}},
                       "axes": [{"path": "plan.tp", "values": [4, 8]}, {"path": "plan.pp", "values": [2, 4, 8]},
                                {"path": "plan.recompute", "values": ["none", "full"]},
                                {"path": "plan.overlap.p2p", "values": [True, False]},
                                {"path": "plan.vp", "values": [1, 2, 4, 5]},
                                {"path": "plan.gbs", "values": [512, 1024, 2048]}]})
    batch = SweepSource(spec, engine.catalog).batch(0, spec.total_points)
    ev = SweepEvaluator(engine).evaluate(batch)
    assert ev.stats["groups"] <= 2 * 3 * 2 * 2 < ev.stats["evaluated"]
    checked = 0
    for i in range(len(batch)):
        try:
            est = engine.evaluate(batch.scenario(i), report=False)
        except TwinError:
            assert ev.reason_ix[i] >= 0
            continue
        if not est.fits:
            assert ev.reasons[ev.reason_ix[i]] == MEMORY_REASON
            continue
        checked += 1
        want = sweep_columns(est)
        for name in MODEL_COLUMNS:
            assert same(ev.floats[name][i], want[name]), (i, name)
    assert checked >= 100


def test_row_reductions_match_numpys_along_the_rows():
    """ops.row_max / row_any (column by column) give what .max(axis=1) / .any(axis=1) give,
    NaN included, for the widths a hierarchy has (1 to 5 link classes)."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        n, w = int(rng.integers(1, 40)), int(rng.integers(1, 6))
        table = rng.choice([0.0, 0.5, 1.0, 2.0, np.inf, np.nan], size=(n, w))
        got = ops.row_max(table)
        assert got.dtype == np.float64 and np.array_equal(got, table.max(axis=1), equal_nan=True)
        mask = table > 1.0
        assert np.array_equal(ops.row_any(mask), mask.any(axis=1))


def test_gather_gives_what_indexing_gives():
    """ops.gather (ndarray.take for an int index) gives values[index]: tables of points x link
    classes and columns, negative positions, int32 and int64 positions, Labels with their
    categories, strided and broadcast views; a mask or a slice is indexed as it is; a position
    out of range raises IndexError as indexing does."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        n, w, m = int(rng.integers(1, 30)), int(rng.integers(1, 5)), int(rng.integers(0, 40))
        table = rng.choice([0.0, 0.5, 2.0, np.inf, np.nan], size=(n, w))
        index = rng.integers(-n, n, m).astype(rng.choice([np.int64, np.int32, np.intp]))
        for values in (table, table[:, 0], table.T.copy().T, np.broadcast_to(table[:1], (n, w))):
            got = ops.gather(values, index)
            want = values[index]
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got, want, equal_nan=True)
        mask = rng.random(n) < 0.5
        assert np.array_equal(ops.gather(table, mask), table[mask], equal_nan=True)
        assert np.array_equal(ops.gather(table, slice(1, None)), table[1:], equal_nan=True)
    labels = ops.Labels.of(["full", "none", "full", "selective"])
    got = ops.gather(labels, np.asarray([3, 0, -1]))
    assert isinstance(got, ops.Labels) and got.categories == labels.categories
    assert got.names().tolist() == ["selective", "full", "selective"]
    with pytest.raises(IndexError):
        ops.gather(np.zeros((3, 2)), np.asarray([3]))


def test_a_batchs_top_tier_is_each_points_hierarchys():
    """HierarchyBatch.top_tier (first tier spanning the footprint, else the last) per point as
    Hierarchy.top_tier answers it, over hierarchies of different depths (padded tables)."""
    from twin.core.topology import Hierarchy, HierarchyBatch, Tier

    def hierarchy(spans: list[int]) -> Hierarchy:
        tiers = tuple(Tier(f"t{j}", "nvlink" if j == 0 else "ib", s, 50e9, 1e-6) for j, s in enumerate(spans))
        return Hierarchy(tiers=tiers, gpus_per_node=spans[0])

    hs = [hierarchy([8, 256]), hierarchy([8, 64, 4096]), hierarchy([72, 1152, 18432, 1 << 20])]
    rng = np.random.default_rng(3)
    rows = rng.integers(0, len(hs), 300)
    footprint = rng.choice([1, 8, 9, 64, 65, 256, 257, 4096, 5000, 18432, 1 << 21], 300)
    got = HierarchyBatch(hs, rows).top_tier(footprint)
    assert got.dtype == np.int64
    assert got.tolist() == [hs[r].top_tier(int(f)) for r, f in zip(rows.tolist(), footprint.tolist(), strict=True)]


def test_unique_ints_gives_numpys_unique():
    """ops.unique_ints (a table of the key range, no sort) gives np.unique's values, first
    points and inverse, dtypes too, on narrow ranges and on wide ones (np.unique itself)."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 60))
        bound = int(rng.choice([1, 3, 50, 1000, 1 << 40]))
        key = rng.integers(0, bound, n).astype(rng.choice([np.int64, np.int32]))
        values, first, inverse = ops.unique_ints(key, bound, first=True)
        want = np.unique(key, return_index=True, return_inverse=True)
        for got, expected in zip((values, first, inverse), want, strict=True):
            assert got.dtype == expected.dtype and np.array_equal(got, expected.reshape(-1))
        values, inverse = ops.unique_ints(key, bound)
        assert np.array_equal(values, want[0]) and np.array_equal(inverse, want[2].reshape(-1))


def test_select_min_gathers_each_entry_as_np_choose_does():
    """The winner's entries: names, per-point arrays, and one array among equal numbers (the
    NVLS fill, 0.0 for every other option) come back as np.choose gives them, dtype included."""
    rng = np.random.default_rng(9)
    for _ in range(300):
        n, k = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        lone = int(rng.integers(0, k))
        zero = rng.choice([0.0, -0.0, 1.5])
        options = [(rng.random(n), ("ring", "tree", "nvls", "sharp")[j % 4], rng.random(n) if j % 3 else float(j),
                    rng.random(n) if j == lone else zero) for j in range(k)]
        best = np.argmin(np.stack([o[0] for o in options]), axis=0)
        got = ops.select_min(options)
        for e in (1, 2, 3):
            want = np.choose(best, [np.asarray(o[e]) for o in options])
            assert got[e].dtype == want.dtype and np.array_equal(got[e], want)
            assert np.array_equal(np.signbit(got[e]), np.signbit(want)) if want.dtype.kind == "f" else True


def test_a_batch_cost_zeroed_where_nothing_is_sent_is_np_wheres():
    """collectives._zero_where: points in the mask cost nothing and name "none" (names as
    np.where gives them: per-point arrays, one name for all, objects), the rest unchanged."""
    from twin.core.collectives import _zero_where

    rng = np.random.default_rng(4)
    for names in (np.asarray(["ring", "sharp", "tree"])[rng.integers(0, 3, 50)], "direct",
                  np.asarray(["LL", "Simple"], dtype=object)[rng.integers(0, 2, 50)]):
        mask = rng.random(50) < 0.3
        t = rng.random(50)
        cost = CollectiveCost(t, names, names, t * 2.0, t * 3.0)
        got = _zero_where(mask, cost)
        for have, base in ((got.algorithm, names), (got.protocol, names)):
            want = np.where(mask, "none", base)
            assert have.dtype == want.dtype and have.tolist() == want.tolist()
        assert np.array_equal(got.time_s, np.where(mask, 0.0, t))
        assert np.array_equal(got.bottleneck_bw_Bps, np.where(mask, 0.0, t * 3.0))
    assert _zero_where(np.zeros(3, bool), cost) is cost
    # a mask of one value for every point (a Python or numpy bool), as np.where takes it
    for mask in (True, np.True_):
        got = _zero_where(mask, cost)
        assert got.algorithm.tolist() == np.where(mask, "none", cost.algorithm).tolist()
        assert np.array_equal(got.time_s, np.zeros(50))


def test_labels_compare_as_their_names_do_constant_columns_and_absent_names_too():
    """Labels == / != a name give what comparing the names gives, for per-point labels, a
    constant (broadcast) column of a batch, a name no point has, and the result is writable."""
    labels = ops.Labels.of(["full", "none", "full", "selective"])
    constant = ops.take_rows(ops.Labels.of(["full"]), np.zeros(5, np.int64))
    assert constant.strides[0] == 0 and isinstance(constant, ops.Labels)
    for column in (labels, constant, labels[:0]):
        names = column.names()
        for name in ("full", "none", "selective", "offload"):
            got = column == name
            assert got.dtype == bool and got.tolist() == (names == name).tolist()
            assert (column != name).tolist() == (names != name).tolist()
            got[...] = True  # a fresh array, not a view of the column
    assert (labels == "full").tolist() == [True, False, True, False]
