"""Hybrid sharding (HSDP, ``plan.dp_shard``; issue 12 item 3): states sharded over k ranks and
replicated across dp*cp/k, with the shard group's gathers / reduce-scatters and the replicas'
all-reduce, checked against hand-worked numbers."""

from __future__ import annotations

import pytest

from twin.core.errors import SpecError
from twin.core.interfaces import stride_of
from twin.core.memory import state_divisors
from twin.engine import Engine
from twin.wire.convert import scenario_from_mapping, scenario_to_mapping

BASE = {"cluster": {"system": "DGX-H100", "num_gpus": 256}, "model": "llama3.1-8b",
        "plan": {"tp": 1, "gbs": 2048, "mbs": 1, "optimizer_sharding": "fsdp"}}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(autoload=False)


def scenario(engine: Engine, **plan):
    return engine.scenario({**BASE, "plan": {**BASE["plan"], **plan}})


def test_the_shard_group_is_k_neighbouring_ranks_and_the_replicas_k_groups_apart(engine):
    plan = scenario(engine, tp=2, cp=2, dp_shard=8).plan   # dp = 256 / (2*2) = 64, dp*cp = 128
    assert stride_of(plan, 64, "dp") == (8, 2)                # 8 ranks, tp apart (tp-cp-ep-dp-pp)
    assert stride_of(plan, 64, "dpr") == (16, 16)             # 128/8 replicas, 8 shard groups apart
    full = scenario(engine, tp=2, cp=2).plan
    assert stride_of(full, 64, "dp") == (128, 2) and stride_of(full, 64, "dpr") == (1, 256)


def test_states_are_divided_by_the_shard_group_not_the_data_parallel_group(engine):
    hybrid = state_divisors(scenario(engine, dp_shard=8).plan, 256)
    assert (hybrid.weights, hybrid.gradients, hybrid.optimizer) == (8, 8, 8)
    dist_opt = state_divisors(scenario(engine, optimizer_sharding="distributed_optimizer", dp_shard=16).plan, 256)
    assert (dist_opt.weights, dist_opt.gradients, dist_opt.optimizer) == (1, 1, 16)


def test_a_shard_group_of_all_ranks_is_full_sharding(engine):
    full = engine.evaluate(scenario(engine))
    same = engine.evaluate(scenario(engine, dp_shard=256))
    assert same.step_time_s == full.step_time_s and same.memory == full.memory
    assert same.bytes_per_step == full.bytes_per_step


def test_bytes_on_the_wire_are_the_shard_collectives_plus_the_replica_all_reduce(engine):
    """Per micro-batch (8 of them): all-gather of bf16 weights twice and reduce-scatter of fp32
    gradients over the n-rank shard group, (2*2 + 4) P * (n-1)/n; per step with k = 8: the
    fp32 gradient shard 4P/8 all-reduced over 32 replicas, 2 * 31/32 of it."""
    full = engine.evaluate(scenario(engine)).bytes_per_step["dp"]
    hybrid = engine.evaluate(scenario(engine, dp_shard=8)).bytes_per_step["dp"]
    want_full = 8 * 8 * 255 / 256
    want_hybrid = 8 * 8 * 7 / 8 + 4 / 8 * 2 * 31 / 32
    assert hybrid / full == pytest.approx(want_hybrid / want_full, rel=1e-12)


def test_hybrid_sharding_in_the_node_trades_memory_for_a_slow_network(engine):
    slow = {"scale_out": {"fabric": "infiniband", "nic_gbps": 100}}

    def run(**plan):
        return engine.evaluate({**BASE, "cluster": {**BASE["cluster"], **slow}, "plan": {**BASE["plan"], **plan}})

    full, node = run(), run(dp_shard=8)
    assert node.step_time_s < full.step_time_s                  # per-micro-batch traffic stays on NVLink
    assert node.memory.total > full.memory.total                # 8-way instead of 256-way shards


@pytest.mark.parametrize(("plan", "rule"), [
    ({"dp_shard": 3}, "must divide dp*cp (256)"),
    ({"dp_shard": 8, "optimizer_sharding": "none"}, "needs a sharded optimizer_sharding"),
    ({"dp_shard": -1}, ">= 0"),
])
def test_bad_shard_sizes_are_named_errors(engine, plan, rule):
    with pytest.raises(SpecError) as err:
        engine.evaluate({**BASE, "plan": {**BASE["plan"], **plan}})
    assert err.value.field == "plan.dp_shard" and rule in str(err.value)


def test_dp_shard_travels_on_the_wire():
    mapping = {**BASE, "plan": {**BASE["plan"], "dp_shard": 8}}
    assert scenario_to_mapping(scenario_from_mapping(mapping))["plan"]["dp_shard"] == 8
