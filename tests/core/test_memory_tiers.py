"""Memory tiers that obey physics (issue 38, item 4): offload traffic priced on the path it takes
and hidden only as far as the schedule allows, the pool's latency charged per access pattern,
host DRAM and the CXL pool as separate tiers, and out-of-memory verdicts naming the full tier.

The first four tests are the four bugs a new user met (each failed before the fix: offloading
21 GiB a micro-batch over a 2.4 GB/s/GPU pool cost 0 s; 250 ns and 25 us gave the same step;
``offload: host`` took the pool's bandwidth when a pool existed; a full pool was blamed on HBM).
"""

from __future__ import annotations

import copy
import dataclasses
import random

import pytest

from twin.core.errors import SpecError
from twin.core.memory import MemoryBreakdown
from twin.core.offload import (
    LOCAL_DRAM_LATENCY_S,
    READ_WINDOW_BYTES,
    TierPath,
    path_to_pool,
    read_rate,
    transfer_s,
)
from twin.core.results import MEMORY, MEMORY_HOST, MEMORY_POOL, full_tier
from twin.core.units import GIB
from twin.testing import assert_batch_matches_one_by_one

POOL = {"fabric": "cxl", "capacity_gib_per_node": 1024, "bandwidth_GBps_per_node": 256, "latency_ns": 250,
        "devices_per_node": 4}
# examples/llama3-70b-cxl-offload.yaml with its activations offloaded instead of its optimizer.
BASE = {"cluster": {"system": "HGX-H200", "num_gpus": 64, "memory_pool": POOL}, "model": "llama3.1-70b",
        "plan": {"tp": 8, "pp": 1, "mbs": 1, "gbs": 64, "precision": "bf16", "recompute": "selective",
                 "optimizer_sharding": "distributed_optimizer", "offload": {"activations": "cxl"}}}


def _scn(pool=None, offload=None, cluster=None, model=None, plan=None, no_pool=False):
    d = copy.deepcopy(BASE)
    d["cluster"]["memory_pool"].update(pool or {})
    d["cluster"].update(cluster or {})
    if no_pool:
        del d["cluster"]["memory_pool"]
    if offload is not None:
        d["plan"]["offload"] = offload
    d["plan"].update(plan or {})
    if model is not None:
        d["model"] = model
    return d


# ------------------------------------------------------------------ the four bugs
def test_activation_offload_pays_for_every_byte_the_compute_cannot_hide(engine):
    # 25.6 GB/s a node: 2.4 GB/s a GPU after the 75% sustained share over 8 GPUs.
    est = engine.evaluate(_scn(pool={"bandwidth_GBps_per_node": 25.6}))
    bw = 25.6e9 * 0.75 / 8
    m = est.microbatches
    # pp 1: one micro-batch in flight; all its layers but the last go out in the forward (what the
    # pool holds) and come back in the backward.
    moved = est.memory.offloaded
    assert est.memory.activations == pytest.approx(2 * moved / 79)  # the last layer and one in transit
    assert moved > 20 * GIB
    # The link cannot move it faster than its bandwidth, and the compute hides at most itself.
    floor = m * 2 * moved / bw - (est.breakdown.compute_s + est.breakdown.recompute_s)
    assert est.breakdown.offload_s >= floor > 100.0
    # Each direction alone: the issued link time is the bytes over the bandwidth (+ round trips).
    assert est.comm_issued_s["offload"] == pytest.approx(m * 2 * moved / bw, rel=1e-3)
    assert est.step_time_s == pytest.approx(est.breakdown.total_s, rel=1e-12)


def test_the_pools_latency_changes_the_answer(engine):
    near = engine.evaluate(_scn(pool={"bandwidth_GBps_per_node": 25.6, "latency_ns": 250}))
    far = engine.evaluate(_scn(pool={"bandwidth_GBps_per_node": 25.6, "latency_ns": 25_000}))
    assert far.step_time_s > near.step_time_s
    assert far.details["offload"]["cxl_latency_us"] == pytest.approx(1.0 - 0.1 + 25.0)


def test_host_offload_uses_host_memory_even_when_a_pool_exists(engine):
    slow_pool = {"bandwidth_GBps_per_node": 25.6}
    for what in ("optimizer", "activations"):
        with_pool = engine.evaluate(_scn(pool=slow_pool, offload={what: "host"}))
        without = engine.evaluate(_scn(offload={what: "host"}, no_pool=True))
        to_pool = engine.evaluate(_scn(pool=slow_pool, offload={what: "cxl"}))
        assert with_pool.step_time_s == without.step_time_s, what
        assert to_pool.breakdown.offload_s > 2 * with_pool.breakdown.offload_s > 0, what
        assert with_pool.details["offload"]["host_GBps"] == pytest.approx(63 * 0.85)  # PCIe Gen5 x16 at 85%
        # The tiers hold their own: the pool's capacity is not host DRAM's.
        assert with_pool.memory.offloaded_host == with_pool.memory.offloaded > 0
        assert with_pool.memory.host_capacity == pytest.approx(2048 * GIB / 8 * 0.9)  # HGX H200: 2 TiB, 10% kept
        assert with_pool.memory.pool_capacity == pytest.approx(1024 * GIB / 8)
        assert to_pool.memory.offloaded_host == 0 and to_pool.memory.offloaded_pool == to_pool.memory.offloaded


def test_a_full_pool_is_named_not_hbm(engine):
    est = engine.evaluate(_scn(pool={"capacity_gib_per_node": 1}))
    assert not est.fits
    verdict = [n for n in est.notes if n.startswith("does not fit")]
    assert verdict == [f"does not fit: {est.memory.offloaded / GIB:.1f} GiB needed of 0.1 GiB the CXL pool"]
    assert "HBM" not in verdict[0]
    # The batch's refusal names the pool too (require_fit: as a sweep counts it).
    res = engine.evaluate_many([engine.scenario(_scn(pool={"capacity_gib_per_node": 1}))], require_fit=True)
    assert res.refusal(0) == MEMORY_POOL


def test_full_host_dram_is_named(engine):
    # Llama 3.1 70B at 32K on one DGX A100: its activations and optimizer state need 181 GiB a GPU of
    # host DRAM, where 1 TiB a node leaves 115 GiB; HBM holds the rest.
    scn = {"cluster": {"system": "DGX-A100", "num_gpus": 8}, "model": {"preset": "llama3.1-70b", "seq_len": 32768},
           "plan": {"tp": 8, "mbs": 1, "gbs": 8, "recompute": "none", "optimizer_sharding": "distributed_optimizer",
                    "offload": {"activations": "host", "optimizer": "host"}}}
    est = engine.evaluate(scn)
    assert est.memory.total <= est.memory.capacity and not est.fits
    assert est.memory.full_tiers() == ["host DRAM"]
    assert any(n.endswith("GiB host DRAM") and n.startswith("does not fit") for n in est.notes)
    assert engine.evaluate_many([engine.scenario(scn)], require_fit=True).refusal(0) == MEMORY_HOST


def test_a_batch_names_the_full_tier_of_each_point(engine):
    hbm_full = _scn(offload={}, plan={"tp": 1, "pp": 1, "gbs": 64})
    host_full = {"cluster": {"system": "DGX-A100", "num_gpus": 8},
                 "model": {"preset": "llama3.1-70b", "seq_len": 32768},
                 "plan": {"tp": 8, "gbs": 8, "offload": {"activations": "host", "optimizer": "host"}}}
    points = [_scn(), hbm_full, host_full, _scn(pool={"capacity_gib_per_node": 1})]
    res = engine.evaluate_many([engine.scenario(p) for p in points], require_fit=True)
    assert [res.refusal(i) for i in range(4)] == [None, MEMORY, MEMORY_HOST, MEMORY_POOL]


def test_every_full_tier_is_named_hbm_first():
    mem = MemoryBreakdown(weights=90 * GIB, gradients=0.0, optimizer=0.0, activations=0.0, logits=0.0, runtime=0.0,
                          offloaded=30 * GIB, capacity=80 * GIB, pool_capacity=5 * GIB, offloaded_host=20 * GIB,
                          host_capacity=10 * GIB)
    assert mem.full_tiers() == ["HBM", "host DRAM", "the CXL pool"]
    assert mem.verdict() == ("does not fit: 90.0 GiB needed of 80.0 GiB HBM; 20.0 GiB needed of 10.0 GiB host DRAM; "
                             "10.0 GiB needed of 5.0 GiB the CXL pool")
    assert full_tier(mem, None) == 0
    assert full_tier(dataclasses.replace(mem, weights=10 * GIB), None) == 1
    assert full_tier(dataclasses.replace(mem, weights=10 * GIB, host_capacity=30 * GIB), None) == 2
    roomy = dataclasses.replace(mem, weights=10 * GIB, host_capacity=30 * GIB, pool_capacity=30 * GIB)
    assert roomy.fits and roomy.verdict() == "" and full_tier(roomy, None) == -1
    assert full_tier(roomy, 0.9) == 0  # HBM must leave 90% free: it does not


def test_every_memory_tier_field_changes_the_answer_or_is_refused(engine):
    # Everything offloaded to the pool, so each of its fields has something to act on.
    everything = {"optimizer": "cxl", "params": "cxl", "activations": "cxl"}
    base = engine.evaluate(_scn(offload=everything, cluster={"power": {"cxl_device_w": 20.0}}))

    def differs(**pool):
        est = engine.evaluate(_scn(offload=everything, pool=pool, cluster={"power": {"cxl_device_w": 20.0}}))
        return (est.step_time_s, est.fits, est.energy.total_j) != (base.step_time_s, base.fits, base.energy.total_j)

    assert differs(capacity_gib_per_node=16)          # what fits
    assert differs(bandwidth_GBps_per_node=64)        # the path's bandwidth
    assert differs(latency_ns=2000)                   # a round trip per copy
    assert differs(devices_per_node=8)                # the devices' power (docs/energy.md)
    with pytest.raises(SpecError) as err:             # and the bandwidth they can carry
        engine.evaluate(_scn(pool={"devices_per_node": 2, "bandwidth_GBps_per_node": 256}))
    assert err.value.field == "cluster.memory_pool.bandwidth_GBps_per_node"
    with pytest.raises(SpecError) as err:
        engine.evaluate(_scn(pool={"params": {"interleave": 2}}))
    assert err.value.field == "cluster.memory_pool.params.interleave"
    # Each state's target moves the step on its own, to either tier.
    steps = {engine.evaluate(_scn(offload={what: where})).step_time_s
             for what in ("optimizer", "params", "activations") for where in ("host", "cxl")}
    assert len(steps) == 6 and base.step_time_s not in steps


# ------------------------------------------------------------------ access patterns
def test_a_copy_pays_a_round_trip_and_reads_are_bounded_by_the_window():
    bw, lat = 24e9, 1e-6
    # Writes (posted): the round trip per copy, then the bytes at the bandwidth.
    assert transfer_s(1e9, 10, bw, lat, read=False) == pytest.approx(10 * lat + 1e9 / bw)
    # Reads: the same while the window covers the bandwidth-delay product (24 KB << 384 KiB) ...
    assert transfer_s(1e9, 10, bw, lat, read=True) == pytest.approx(10 * lat + 1e9 / bw)
    # ... and the window over the round trip beyond it (Little's law).
    far = 50e-6
    assert read_rate(bw, far) == pytest.approx(READ_WINDOW_BYTES / far)
    assert transfer_s(1e9, 1, bw, far, read=True) == pytest.approx(far + 1e9 * far / READ_WINDOW_BYTES)
    assert transfer_s(1e9, 1, bw, far, read=False) == pytest.approx(far + 1e9 / bw)


def test_the_pool_is_reached_over_the_host_link():
    host = TierPath(53.55e9, 1e-6, 230 * GIB)
    pool = path_to_pool(24e9, 250e-9, 128 * GIB, host)
    assert pool.bw_Bps == 24e9 and pool.latency_s == pytest.approx(1e-6 - LOCAL_DRAM_LATENCY_S + 250e-9)
    assert path_to_pool(200e9, 250e-9, 1.0, host).bw_Bps == 53.55e9  # the link is the narrower part
    assert path_to_pool(24e9, 250e-9, 1.0, TierPath(0.0, 0.0, 0.0)) == TierPath(24e9, 250e-9, 1.0)


def test_latency_matters_for_small_copies_and_not_for_streaming():
    rng = random.Random(38)
    for _ in range(200):
        bw = rng.uniform(2e9, 200e9)
        lat = rng.uniform(100e-9, 0.9 * READ_WINDOW_BYTES / bw)  # the window covers the stream
        bdp = bw * lat
        for read in (False, True):
            stream = rng.uniform(100, 1e4) * bdp      # bytes per copy >> bandwidth-delay product
            small = rng.uniform(0.01, 1.0) * bdp      # bytes per copy <= it
            def latency_share(size, bw=bw, lat=lat, read=read):
                return 1 - size / bw / transfer_s(size, 1, bw, lat, read)

            assert latency_share(stream) < 0.01
            assert latency_share(small) >= 0.5


def test_pool_latency_moves_latency_bound_offload_and_not_streaming_offload(engine):
    # Latency-bound: Llama 3.1 8B at 512 tokens, tp 8: each saved tensor ~0.5 MiB, ~20 us at 24 GB/s.
    small = {"preset": "llama3.1-8b", "seq_len": 512}
    # Streaming: the 70B example's 4 MiB+ tensors, and its optimizer state in three flat copies.
    cases = {"small activations": dict(model=small, cluster={"num_gpus": 8}, plan={"gbs": 64}),
             "large activations": {}, "optimizer": dict(offload={"optimizer": "cxl"})}

    def offload(name, ns):
        est = engine.evaluate(_scn(pool={"latency_ns": ns}, **cases[name]))
        return est.comm_issued_s["offload"], est.breakdown.offload_s

    for name in cases:
        (i0, e0), (i1, e1) = offload(name, 250), offload(name, 5000)
        assert i1 >= i0 and e1 >= e0  # never faster for a farther pool
        if name == "small activations":
            assert i1 / i0 > 1.10 and e1 / e0 > 1.25
        else:
            assert i1 / i0 < 1.005 and e1 / e0 < 1.01


# ------------------------------------------------------------------ properties
SYSTEMS = (("HGX-H200", 64), ("DGX-H100", 64), ("DGX-A100", 64), ("GB200-NVL72", 72))


def _random_case(rng):
    system, n = rng.choice(SYSTEMS)
    model, seq = rng.choice((("llama3.1-8b", 2048), ("llama3.1-8b", 8192), ("llama3.1-70b", 4096)))
    tp = rng.choice((2, 4, 8))
    pp = rng.choice((1, 2, 4))
    dp = n // (tp * pp)
    plan = {"tp": tp, "pp": pp, "mbs": rng.choice((1, 2)), "recompute": rng.choice(("none", "selective", "full")),
            "optimizer_sharding": "distributed_optimizer"}
    plan["gbs"] = dp * plan["mbs"] * rng.choice((4, 8))
    pool = {"bandwidth_GBps_per_node": rng.choice((16.0, 64.0, 256.0)), "latency_ns": rng.choice((170, 2000, 25000))}
    return dict(cluster={"system": system, "num_gpus": n}, model={"preset": model, "seq_len": seq}, plan=plan,
                pool=pool)


def test_more_offload_over_a_slower_tier_is_never_faster(engine):
    rng = random.Random(4)
    ladder = ({}, {"optimizer": "T"}, {"optimizer": "T", "activations": "T"},
              {"optimizer": "T", "activations": "T", "params": "T"})
    checked = 0
    for _ in range(12):
        case = _random_case(rng)
        slow = dict(case["pool"], bandwidth_GBps_per_node=case["pool"]["bandwidth_GBps_per_node"] / 4,
                    latency_ns=case["pool"]["latency_ns"] * 4)
        for target in ("cxl", "host"):
            prev = None
            for rung in ladder:
                offload = {k: target for k in rung}
                fast_s = engine.evaluate(_scn(offload=offload, **case)).step_time_s
                if target == "cxl":
                    slow_s = engine.evaluate(_scn(offload=offload, **dict(case, pool=slow))).step_time_s
                    assert slow_s >= fast_s, (case, offload)
                if prev is not None:
                    assert fast_s >= prev, (case, offload)  # more offloaded over the same tier
                prev = fast_s
                checked += 1
        # The pool (through the host link, further away) is never faster than host DRAM.
        both = {"optimizer": "T", "activations": "T"}
        host_s = engine.evaluate(_scn(offload={k: "host" for k in both}, **case)).step_time_s
        pool_s = engine.evaluate(_scn(offload={k: "cxl" for k in both}, **case)).step_time_s
        assert pool_s >= host_s, case
    assert checked == 12 * 2 * 4


def test_each_microbatch_in_flight_keeps_its_last_layer_in_hbm(engine):
    # pp 4 under 1F1B: the first stage holds 4 micro-batches of 20 layers; each keeps its last
    # layer in HBM and one layer is in transit, the other 4 x 19 layers are in the pool.
    est = engine.evaluate(_scn(plan={"tp": 8, "pp": 4, "gbs": 64}))
    layer = est.memory.offloaded / (4 * 19)
    assert est.memory.activations == pytest.approx(5 * layer)
    kept = engine.evaluate(_scn(plan={"tp": 8, "pp": 4, "gbs": 64}, offload={}))
    assert kept.memory.activations == pytest.approx(4 * 20 * layer)
    assert est.memory.offloaded_pool == est.memory.offloaded


def test_offload_stalls_every_microbatch_and_stretches_the_pipeline(engine):
    # pp 4: the activations' stall is on the critical path of every micro-batch, so it also
    # lengthens the fill and drain (the bubble), unlike a per-step term.
    plan = {"tp": 8, "pp": 4, "gbs": 64}
    slow = {"bandwidth_GBps_per_node": 16}
    off = engine.evaluate(_scn(pool=slow, plan=plan))
    on_hbm = engine.evaluate(_scn(pool=slow, plan=plan, offload={}))
    assert off.breakdown.offload_s > 0
    assert off.breakdown.bubble_s > on_hbm.breakdown.bubble_s
    assert off.step_time_s == pytest.approx(off.breakdown.total_s, rel=1e-12)


def test_batch_equals_one_by_one_on_offload_points(engine):
    rng = random.Random(38)
    scenarios = []
    for _ in range(6):
        case = _random_case(rng)
        for offload in ({"activations": "cxl"}, {"activations": "host", "optimizer": "cxl"},
                        {"params": "host", "optimizer": "host"}, {"params": "cxl", "activations": "cxl"}):
            scenarios.append(engine.scenario(_scn(offload=offload, **case)))
    scenarios.append(engine.scenario(_scn(pool={"capacity_gib_per_node": 1})))              # pool full
    scenarios.append(engine.scenario({"cluster": {"system": "DGX-A100", "num_gpus": 8},    # host full
                                      "model": {"preset": "llama3.1-70b", "seq_len": 32768},
                                      "plan": {"tp": 8, "gbs": 8, "offload": {"activations": "host"}}}))
    assert_batch_matches_one_by_one(engine, scenarios)
