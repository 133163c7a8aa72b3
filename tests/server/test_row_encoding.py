"""Kept sweep rows encoded from the batch's columns (``twin.wire.row_encoding``) are, byte for
byte, the rows built field by field from each row's own estimate, and a row's numbers are those
one scenario evaluated alone gives."""

from __future__ import annotations

import math

import numpy as np
import pytest
from google.protobuf.internal.encoder import _VarintBytes

from twin.engine import Engine
from twin.rpc.v1 import estimate_pb2
from twin.rpc.v1 import sweep_service_pb2 as sw
from twin.server import sweep_events
from twin.server.rowchunks import RowChunker
from twin.server.services import _row_message, block_rows
from twin.server.sweep_engine import EngineRunner
from twin.wire import row_encoding

PRICED = {"name": "priced", "cluster": {"system": "DGX-H100", "num_gpus": 256,
                                        "prices": {"usd_per_gpu_hour": 2.0, "usd_per_kwh": 0.1}},
          "model": "llama3.1-70b", "plan": {"tp": 8, "pp": 4, "gbs": 256}}
SPEC = {"name": "enc", "base": PRICED, "keep_rows": True, "axes": [
    {"path": "plan.gbs", "values": [256, 512, 1024]},
    {"path": "plan.recompute", "values": ["none", "full"]},
    {"path": "plan.pp", "values": [1, 3, 4, 8]},          # pp 3 breaks a rule; pp 1 does not fit
    {"path": "cluster.prices", "values": [{"usd_per_gpu_hour": 2.0}, {}]}]}   # with and without a cost


@pytest.fixture(scope="module")
def blocks() -> list[sweep_events.RowBlock]:
    runner = EngineRunner(Engine(autoload=False), max_points=10_000, executor="inline")
    return [e for e in runner(SPEC, lambda: False) if isinstance(e, sweep_events.RowBlock)]


def test_block_rows_are_the_rows_built_field_by_field(blocks):
    fast = [sw.SweepRows.FromString(b"".join(block_rows(b))).rows for b in blocks]
    slow = [[_row_message(r) for r in b.rows()] for b in blocks]
    got = [r.SerializeToString(deterministic=True) for rows in fast for r in rows]
    want = [r.SerializeToString(deterministic=True) for rows in slow for r in rows]
    assert len(got) == len(want) == 48 and got == want
    kinds = {r.WhichOneof("outcome") for rows in slow for r in rows}
    assert kinds == {"estimate", "error"}
    assert {r.estimate.HasField("cost") for rows in slow for r in rows if r.HasField("estimate")} == {True, False}


def test_offload_rows_carry_each_tier_byte_for_byte():
    # Host DRAM and the CXL pool as separate tiers: the host columns and the fit of each tier
    # (a pool of 64 GiB a node holds the 70B optimizer shard at pp 4, not its activations).
    pool = {"fabric": "cxl", "capacity_gib_per_node": 64, "bandwidth_GBps_per_node": 256, "latency_ns": 250,
            "devices_per_node": 4}
    spec = {"name": "tiers", "base": {**PRICED, "cluster": {**PRICED["cluster"], "memory_pool": pool}},
            "keep_rows": True, "axes": [
                {"path": "plan.offload.activations", "values": ["none", "host", "cxl"]},
                {"path": "plan.offload.optimizer", "values": ["none", "host", "cxl"]},
                {"path": "cluster.memory_pool.latency_ns", "values": [250, 25_000]}]}
    runner = EngineRunner(Engine(autoload=False), max_points=10_000, executor="inline")
    blocks = [e for e in runner(spec, lambda: False) if isinstance(e, sweep_events.RowBlock)]
    fast = [r for b in blocks for r in sw.SweepRows.FromString(b"".join(block_rows(b))).rows]
    slow = [_row_message(r) for b in blocks for r in b.rows()]
    assert len(fast) == 18 and [r.SerializeToString(deterministic=True) for r in fast] == \
        [r.SerializeToString(deterministic=True) for r in slow]
    mems = [r.estimate.memory for r in slow if r.HasField("estimate")]
    assert any(m.offloaded_host_gib > 0 for m in mems) and all(m.host_capacity_gib > 0 for m in mems)
    refused = {str(r.error) for r in slow if r.HasField("error")}
    assert refused and all("does not fit in the CXL pool" in e for e in refused), refused
    assert len(mems) == 12  # activations in the pool never fit
    steps = {r.estimate.step_time_s for r in slow if r.HasField("estimate")}
    assert len(steps) == 8  # the pool's latency moves the 4 optimizer-in-the-pool points, not the others


def test_a_row_is_what_its_scenario_gives_alone(blocks):
    engine = Engine(autoload=False)
    block = blocks[0]
    feasible = [i for i, e in enumerate(block.errors) if e is None]
    assert feasible
    for i in feasible[:4]:
        a = block.assignments[i]
        cluster = {**PRICED["cluster"], "prices": a["cluster.prices"]} if a["cluster.prices"] else \
            {k: v for k, v in PRICED["cluster"].items() if k != "prices"}
        one = engine.evaluate({**PRICED, "cluster": cluster,
                               "plan": {**PRICED["plan"], "gbs": a["plan.gbs"], "recompute": a["plan.recompute"],
                                        "pp": a["plan.pp"]}}, report=False)
        row = block.estimate(i)
        assert row.step_time_s == one.step_time_s and row.memory.total == one.memory.total
        assert row.breakdown.total_s == one.breakdown.total_s and row.fits == one.fits
        assert (row.cost is None) == (one.cost is None)
        if one.cost is not None:
            assert row.cost.usd_per_step == one.cost.usd_per_step


def test_chunks_hold_every_row_once_in_order(blocks):
    framed = [f for b in blocks for f in block_rows(b)]
    chunker = RowChunker(5, max_bytes=3_000)
    events = [e for f in framed for e in chunker.add_encoded([f])] + list(chunker.flush())
    rows = [r for e in events for r in e.rows.rows]
    assert [r.index for r in rows] == sorted(r.index for r in rows) and len(rows) == len(framed)
    assert all(len(e.rows.rows) <= 5 and e.ByteSize() <= 3_000 + 1_000 for e in events)
    single = [e for f in framed[:3] for e in RowChunker(1).add_encoded([f])]
    assert [e.WhichOneof("event") for e in single] == ["row"] * 3


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16_383, 65_535, 65_536, 2**40, 2**63 - 1])
def test_varints_are_protobufs(value):
    assert row_encoding.varint(value) == _VarintBytes(value)


def test_a_layout_writes_integers_of_any_size_doubles_and_booleans_exactly():
    est = row_encoding.Layout().integer(11, "n").double(2, "x")       # Estimate.microbatches, .step_time_s
    mem = row_encoding.Layout().boolean(10, "b")                       # MemoryPerGpu.fits
    cols = {"n": np.asarray([0, 7, 2**62]), "x": np.asarray([0.1, -0.0, math.inf]),
            "b": np.asarray([True, False, True])}
    raw, flags = est.encode(cols, 3).tobytes(), mem.encode(cols, 3).tobytes()
    msgs = [estimate_pb2.Estimate.FromString(raw[i * est.size:(i + 1) * est.size]) for i in range(3)]
    assert [m.microbatches for m in msgs] == [0, 7, 2**62]
    assert [m.step_time_s for m in msgs][:2] == [0.1, -0.0] and math.isinf(msgs[2].step_time_s)
    assert [estimate_pb2.MemoryPerGpu.FromString(flags[i * mem.size:(i + 1) * mem.size]).fits for i in range(3)] == [
        True, False, True]
