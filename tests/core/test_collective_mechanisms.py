"""The collective mechanisms behind the published multi-node measurements (issue 11):
NCCL's ring-latency rules (net post overhead by host CPU, ppn=1, MNNVL as one node), tree's medium-size
correction, NVLS-tree's network steps, CollNet Direct's bandwidth model, Blackwell's NVLS
efficiency, NVLS's chunking and pipeline fill (NCCL 2.28.3's enqueue.cc, nvls.cc, all_reduce.h),
EFA through aws-ofi-nccl (Simple only, its per-step latency), node-limited expert dispatch and
DeepEP's own metric, and NCCL's p2p schedule for the all-to-all (channels per peer, LL, chunks).
Each test works the number out by hand from the source the code cites.
"""

from __future__ import annotations

import copy
import dataclasses
import typing

import numpy as np
import pytest
from twin_plugins.nvlink import NVLS_ALGBW_FRACTION
from twin_plugins.roce import EFA_STEP_LATENCY_S

from tests.core.test_formulas import GB, flat_hierarchy
from twin.core.accelerator_generations import nccl_tuning_key
from twin.core.collectives import (
    collective_cost,
    collective_options,
    dbtree_node_traffic,
    dedup_dispatch_cost,
    domains_per_token,
)
from twin.core.errors import SpecError
from twin.core.nccl_tuning import (
    COLLNET_DIRECT_BW,
    LL_MAX_BW_ONE_NODE_GBPS,
    NVLS_CHANNELS,
    P2P_NET_CHUNK,
    P2P_NVL_CHUNK,
    RING_PLATEAU,
    collnet_direct_bw,
    nvls_chunk,
    nvls_tree_chunk,
    p2p_channels,
    ring_channels,
)
from twin.core.p2p import chunk_data, fill_s, peer_channels, send_channels, step_bytes, uses_ll
from twin.core.specs import Generation
from twin.core.topology import HierarchyBatch, place_group
from twin.engine import Engine
from twin.reference import EPWorkload, ep_predicted_GBps, validate_collectives

US = 1e-6


def _cluster(fabric: str, nodes: int = 2, **params: object) -> dict:
    so: dict = {"fabric": fabric, "nic_gbps": 400}
    if params:
        so["params"] = dict(params)
    return {"cluster": {"system": "DGX-H100", "num_gpus": 8 * nodes, "scale_out": so},
            "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 8 * nodes}}


def _hierarchy(engine: Engine, data: dict):
    return engine.hierarchy(engine.scenario(data))


def _option(op: str, size: float, span, h, algo: str, proto: str) -> float:
    return next(float(t) for t, a, p, _ in collective_options(op, size, span, h) if a == algo and p == proto)


# ----------------------------------------------------------------- NCCL ring latency
def test_inter_node_ring_steps_pay_the_net_post_overhead():
    h = flat_hierarchy()
    span = place_group(16, 1, h)  # 2 nodes x 8 GPUs
    # all-gather, LL: base 6.6 + (15 - 1) steps x max(NVLink 0.6, net overhead 1.0) + 1 x NET 2.7 us;
    # LL's bandwidth min(0.5 x 370, llMaxBw) = NCCL 2.28.3's 2-node cap, 39 GB/s
    t = _option("all_gather", 8.0, span, h, "ring", "LL")
    assert t == pytest.approx((6.6 + 14 * 1.0 + 2.7) * US + 8 * 15 / 16 / (39.0 * GB), rel=1e-6)
    # Simple: the overhead is x3 (3.0 us) but NVLink's Simple step (3.4 us) is already longer.
    single = place_group(8, 1, h)
    lat_single = _option("all_gather", 1.0, single, h, "ring", "Simple")
    assert lat_single == pytest.approx((8.4 + 7 * 3.4) * US, rel=1e-3)


def test_one_rank_per_node_rings_pay_the_tree_network_latency():
    h = flat_hierarchy()
    span = place_group(2, 8, h)  # one GPU on each of 2 nodes (nccl-tests -N 1)
    # one network step at NET tree LL latency 5.0 us (not the ring's 2.7)
    t = _option("all_gather", 1.0, span, h, "ring", "LL")
    assert t == pytest.approx((6.6 + 5.0) * US, rel=1e-3)
    eight = place_group(16, 1, h)
    assert _option("all_gather", 1.0, eight, h, "ring", "LL") == pytest.approx((6.6 + 14 * 1.0 + 2.7) * US, rel=1e-3)


def test_ring_protocol_bandwidths_are_nccl_2_28s():
    """NCCL 2.28.3 tuning.cc, ring: LL128 at 0.92 of the link whatever the ranks per node (the
    0.7 discount for ppn < 2 of older releases is gone); LL at 0.5 under llMaxBw, which is the
    GPU generation's on one node and the Intel/other row's (39.0 GB/s for 2 nodes, 20.4 beyond)
    across nodes."""
    h = flat_hierarchy()
    size = 64 * 2**20
    one = place_group(2, 8, h)  # one GPU on each of 2 nodes
    # base LL128 14.0 + one network step at NET tree LL128 8.5 us; S (n-1)/n over 0.92 x 47 GB/s
    t = _option("all_gather", size, one, h, "ring", "LL128")
    assert t == pytest.approx((14.0 + 8.5) * US + size / 2 / (0.92 * 47 * GB), rel=1e-6)
    # 8 per node: 0.92 of min(NVLink 370, 8 NICs x 47) GB/s; 14 NVLink LL128 steps (1.9 us) and
    # one at the ring's NET LL128 4.0 us
    eight = place_group(16, 1, h)
    t8 = _option("all_gather", size, eight, h, "ring", "LL128")
    assert t8 == pytest.approx((14.0 + 14 * 1.9 + 4.0) * US + size * 15 / 16 / (0.92 * 370 * GB), rel=1e-6)
    # LL on 4 nodes: min(0.5 x 370, 20.4) GB/s; 31 steps, 3 of them network steps
    four = place_group(32, 1, h)
    t4 = _option("all_gather", size, four, h, "ring", "LL")
    assert t4 == pytest.approx((6.6 + 28 * 1.0 + 3 * 2.7) * US + size * 31 / 32 / (20.4 * GB), rel=1e-6)
    # LL on one node: the hierarchy's own cap (Hopper's 141 GB/s) binds below 0.5 x 370
    node = place_group(8, 1, h)
    hopper = dataclasses.replace(h, ll_max_bw=141.0 * GB)
    t1 = _option("all_gather", size, node, hopper, "ring", "LL")
    assert t1 == pytest.approx((6.6 + 7 * 0.6) * US + size * 7 / 8 / (141.0 * GB), rel=1e-6)
    blackwell = dataclasses.replace(h, ll_max_bw=282.0 * GB)  # 2 x 141 > 0.5 x 370: the link binds
    assert _option("all_gather", size, node, blackwell, "ring", "LL") == pytest.approx(
        (6.6 + 7 * 0.6) * US + size * 7 / 8 / (0.5 * 370 * GB), rel=1e-6)


def test_the_ll_cap_follows_the_gpu_generation(engine):
    """The hierarchy of a cluster carries NCCL 2.28.3's one-node llMaxBw for its GPUs, on the
    scalar and the batch path."""
    assert {nccl_tuning_key(g) for g in typing.get_args(Generation)} <= set(LL_MAX_BW_ONE_NODE_GBPS)
    for system, want in (("DGX-2", 39.0), ("DGX-A100", 87.7), ("DGX-H100", 141.0), ("DGX-B200", 282.0)):
        plan = {"tp": 8, "gbs": 16, "precision": "fp16" if system == "DGX-2" else "bf16"}
        data = {"cluster": {"system": system, "num_gpus": 16}, "model": "llama3.1-8b", "plan": plan}
        got = _hierarchy(engine, data)
        assert got.ll_max_bw == pytest.approx(want * GB), system
        batch = HierarchyBatch([got], np.zeros(3, dtype=np.int64))
        assert list(batch.ll_max_bw) == pytest.approx([want * GB] * 3)


def test_the_ring_plateau_depends_on_the_gpus_compute_capability(engine):
    """tuning.cc: a multi-node Simple ring all-reduce's latency is x1.9 below compute
    capability 8.0 and x1.4 from it; the hierarchy of a cluster carries its GPUs' factor."""
    size = 1.0
    h = flat_hierarchy()
    span = place_group(16, 1, h)
    # base Simple 8.4 + 2 x (15 - 1) steps x max(NVLink 3.4, 3 x net overhead 1.0) + 2 x NET 14.0 us
    raw = 8.4 + 28 * 3.4 + 2 * 14.0
    volta = _option("all_reduce", size, span, h, "ring", "Simple")      # the default: 1.9
    ampere = _option("all_reduce", size, span, dataclasses.replace(h, ring_plateau=1.4), "ring", "Simple")
    assert volta == pytest.approx(raw * 1.9 * US + size * 2 * 15 / 16 / (370 * GB), rel=1e-9)
    assert ampere == pytest.approx(raw * 1.4 * US + size * 2 * 15 / 16 / (370 * GB), rel=1e-9)
    # One node: no plateau at all; all-gather: none either (NCCL applies it to all-reduce only).
    one = place_group(8, 1, h)
    assert _option("all_reduce", size, one, h, "ring", "Simple") == pytest.approx((8.4 + 14 * 3.4) * US, rel=1e-6)
    # Every generation the schema accepts has its factor (a new one must state it).
    assert {nccl_tuning_key(g) for g in typing.get_args(Generation)} <= set(RING_PLATEAU)
    # From the presets: V100 clusters get 1.9, A100 / H100 / B200 1.4, on both paths.
    for system, want in (("DGX-2", 1.9), ("DGX-A100", 1.4), ("DGX-H100", 1.4), ("DGX-B200", 1.4)):
        plan = {"tp": 8, "gbs": 16, "precision": "fp16" if system == "DGX-2" else "bf16"}
        data = {"cluster": {"system": system, "num_gpus": 16}, "model": "llama3.1-8b", "plan": plan}
        got = _hierarchy(engine, data)
        assert got.ring_plateau == want, system
        batch = HierarchyBatch([got], np.zeros(3, dtype=np.int64))
        assert list(batch.ring_plateau) == [want] * 3


def test_amd_hosts_pay_nccls_amd_network_overhead_and_ll_cap():
    """tuning.cc: getNetOverhead is 2 us on AMD x86 (1 us on Intel and others), and llMaxBws's
    AMD row caps LL across nodes at 22.5 GB/s on 2 nodes and 19.0 beyond (Intel/other 39.0, 20.4).
    flat_hierarchy: 8 GPUs per node, NVLink 370 GB/s, 8 NICs of 47 GB/s."""
    intel = flat_hierarchy()
    amd = dataclasses.replace(intel, net_overhead_us=2.0, ll_max_bw_two_nodes=22.5 * GB, ll_max_bw_more_nodes=19.0 * GB)
    span = place_group(16, 1, amd)  # 2 nodes
    size = 1024.0
    # all-gather, LL: 6.6 + 14 intra steps x max(NVLink 0.6, overhead 2.0) + 1 NET step 2.7 us; 22.5 GB/s
    t = _option("all_gather", size, span, amd, "ring", "LL")
    assert t == pytest.approx((6.6 + 14 * 2.0 + 2.7) * US + size * 15 / 16 / (22.5 * GB), rel=1e-9)
    assert _option("all_gather", size, span, intel, "ring", "LL") == pytest.approx(
        (6.6 + 14 * 1.0 + 2.7) * US + size * 15 / 16 / (39.0 * GB), rel=1e-9)
    # Simple: 3 overheads (6.0 us) now exceed NVLink's Simple step (3.4 us)
    t_simple = _option("all_gather", 1.0, span, amd, "ring", "Simple")
    assert t_simple == pytest.approx((8.4 + 14 * 6.0 + 14.0) * US + 15 / 16 / (370 * GB), rel=1e-6)
    # 4 nodes: the AMD row's N4 cap, 19.0 GB/s, binds below 0.5 x 370
    four = place_group(32, 1, amd)
    big = 64.0 * 2**20
    t4 = _option("all_gather", big, four, amd, "ring", "LL")
    assert t4 == pytest.approx((6.6 + 28 * 2.0 + 3 * 2.7) * US + big * 31 / 32 / (19.0 * GB), rel=1e-9)
    # One node: no network step, no overhead, the GPU generation's own cap: the host plays no part.
    one = place_group(8, 1, amd)
    assert _option("all_gather", size, one, amd, "ring", "LL") == _option("all_gather", size, one, intel, "ring", "LL")
    # The tree's LL takes the same cap across nodes (its latency has no post overhead).
    tree_amd = _option("all_reduce", big, four, amd, "tree", "LL")
    tree_intel = _option("all_reduce", big, four, intel, "tree", "LL")
    lat = (6.8 + 2 * (7 * 0.6 + 2 * 5.0)) * US
    assert (tree_amd - lat) / (tree_intel - lat) == pytest.approx(20.4 / 19.0, rel=1e-9)


def test_the_hosts_cpu_reaches_the_hierarchy_on_both_paths(engine):
    """cluster.host_cpu: AMD gives NCCL's AMD figures, Intel / other / unstated NCCL's default
    ones (the DGX-A100 preset states its AMD EPYC hosts); a batch of mixed hosts answers each
    point as the scalar path does; a bad value is an error naming the field."""
    a100 = _hierarchy(engine, {"cluster": {"system": "DGX-A100", "num_gpus": 16}, "model": "llama3.1-8b",
                               "plan": {"tp": 8, "gbs": 16}})
    assert (a100.net_overhead_us, a100.ll_max_bw_two_nodes) == (2.0, 22.5 * GB)
    want = {None: (1.0, 39.0, 20.4), "intel": (1.0, 39.0, 20.4), "other": (1.0, 39.0, 20.4),
            "amd": (2.0, 22.5, 19.0)}
    hs = []
    for cpu, (overhead, two, more) in want.items():
        cluster: dict = {"system": "DGX-H100", "num_gpus": 32}
        if cpu is not None:
            cluster["host_cpu"] = cpu
        h = _hierarchy(engine, {"cluster": cluster, "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 32}})
        assert (h.net_overhead_us, h.ll_max_bw_two_nodes, h.ll_max_bw_more_nodes) == (overhead, two * GB, more * GB)
        hs.append(h)
    rows = np.array([0, 3, 3, 1, 3, 0, 3, 2])
    n = np.array([16, 16, 32, 32, 8, 2, 2, 24])
    stride = np.array([1, 1, 1, 1, 1, 8, 8, 1])
    size = np.array([1024.0, 1024.0, 2.0**20, 2.0**20, 1024.0, 8.0, 2.0**26, 2.0**30])
    batch = HierarchyBatch(hs, rows)
    spans = place_group(n, stride, batch)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        got = collective_cost(op, size, spans, batch)
        for i in range(len(rows)):
            h = hs[rows[i]]
            one = collective_cost(op, float(size[i]), place_group(int(n[i]), int(stride[i]), h), h)
            assert float(got.time_s[i]) == pytest.approx(float(one.time_s), rel=1e-12), (op, i)
            assert (str(got.algorithm[i]), str(got.protocol[i])) == (str(one.algorithm), str(one.protocol)), (op, i)
    with pytest.raises(SpecError) as info:
        engine.evaluate({"cluster": {"system": "DGX-A100", "num_gpus": 16, "host_cpu": "arm"},
                         "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 16}})
    assert info.value.field == "cluster.host_cpu"


def test_a_multi_node_nvlink_domain_is_one_nccl_node(engine):
    rack = engine.hierarchy(engine.scenario({"cluster": {"system": "GB200-NVL72", "num_gpus": 72},
                                                   "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 72}}))
    span = place_group(72, 1, rack)
    assert span.nodes == 18 and span.m == 1
    # No network step, no tree (NCCL: MNNVL "treat as a single NVLink connected node").
    algos = {a for _, a, _, _ in collective_options("all_reduce", 1024.0, span, rack)}
    assert "tree" not in algos
    t = _option("all_gather", 1.0, span, rack, "ring", "LL")
    assert t == pytest.approx((6.6 + 71 * 0.6) * US, rel=1e-3)


# --------------------------------------------------------------- tree and NVLS-tree
def test_tree_bandwidth_takes_nccls_medium_size_correction():
    h = flat_hierarchy()
    span = place_group(32, 1, h)  # 4 nodes
    lat = _option("all_reduce", 64.0, span, h, "tree", "Simple") - 64 / (0.5 * 0.9 * 0.92 * 370 * GB)

    def bw_term(size: float) -> float:
        return _option("all_reduce", size, span, h, "tree", "Simple") - lat

    # 1 MiB: floor(log2(2^20 / 64)) = 14 -> Simple factor 0.5; 1 GiB (index 24 >= 23) -> none.
    assert bw_term(2**20) / 2**20 == pytest.approx(bw_term(2**30) / 2**30 / 0.5, rel=1e-6)
    # 64 MiB: index 20 -> 0.8
    assert bw_term(2**26) / 2**26 == pytest.approx(bw_term(2**30) / 2**30 / 0.8, rel=1e-6)


def test_nvls_tree_pays_two_network_steps_per_tree_level():
    h = flat_hierarchy(nvls=273.0)
    one = collective_cost("all_reduce", 8.0, place_group(8, 1, h), h, algorithm="nvls")
    two = collective_cost("all_reduce", 8.0, place_group(16, 1, h), h, algorithm="nvls")
    four = collective_cost("all_reduce", 8.0, place_group(32, 1, h), h, algorithm="nvls")
    assert one.algorithm == two.algorithm == four.algorithm == "nvls"
    # one node: NCCL 2.28.3's NVLS latency, hwLatencies[NVLINK][NVLS][Simple] = 25 us
    assert float(one.time_s) == pytest.approx(25.0 * US, rel=1e-3)
    # 2 log2i(domains) steps of max(NVLSTree NET 14 us, the tier's 1 us)
    assert float(two.time_s) - float(one.time_s) == pytest.approx(2 * 1 * 14.0 * US, rel=1e-3)
    assert float(four.time_s) - float(one.time_s) == pytest.approx(2 * 2 * 14.0 * US, rel=1e-3)
    # log2i is NCCL's integer log2: 3 domains take the steps of 2
    three = collective_cost("all_reduce", 8.0, place_group(24, 1, h), h, algorithm="nvls")
    assert float(three.time_s) - float(one.time_s) == pytest.approx(2 * 1 * 14.0 * US, rel=1e-3)


def test_nvls_tree_moves_what_nccls_double_binary_tree_moves_across_domains():
    """Across domains NVLS-tree is NCCL's double binary tree (trees.cc ncclGetBtree/ncclGetDtree):
    per byte of the buffer the busiest domain sends 1x with 2 domains, 1.5x with 3 (both trees
    chains), 2x from 4 on (rank 2: a parent and two children in one tree, a leaf in the other);
    NCCL 2.28.3's model doubles NVLS-tree's inter-node bandwidth only for <= 2 nodes alike."""
    assert [dbtree_node_traffic(m) for m in (1, 2, 3, 4, 5, 8, 64)] == [0.0, 1.0, 1.5, 2.0, 2.0, 2.0, 2.0]
    assert dbtree_node_traffic(np.array([1, 2, 3, 4, 300])).tolist() == [0.0, 1.0, 1.5, 2.0, 2.0]
    # NIC-bound: 8 GPUs x 20 GB/s = 160 GB/s per domain across, NVLS 273 GB/s inside; plus the
    # NVLS pipeline's fill (test_nvls_tree_fill_counts_gpu_stages_and_network_hops): 512 MiB per
    # channel, 128 KiB chunks (64 KiB from 4 nodes), a piece of 16 x 8 chunks through 3 + 2d GPU
    # stages and 2d hops at 160 GB/s, less the slowest (a hop); d the tree's depth (2 for the
    # 3-node chain), where the latency counts log2i(nodes) levels
    h = flat_hierarchy(nic_GBps=20.0, nvls=273.0)
    size = 8 * 2**30
    for domains, traffic, levels, d in ((2, 1.0, 1, 1), (3, 1.5, 1, 2), (4, 2.0, 2, 2), (8, 2.0, 3, 3)):
        cost = collective_cost("all_reduce", size, place_group(8 * domains, 1, h), h, algorithm="nvls")
        lat = (25.0 + 2 * levels * 14.0) * US
        piece = 16 * 8 * (128 if domains < 4 else 64) * 1024
        fill = piece * ((3 + 2 * d) / (273 * GB) + (2 * d - 1) / (160 * GB))
        assert float(cost.time_s) == pytest.approx(traffic * size / (160.0 * GB) + lat + fill, rel=1e-9)


def test_blackwell_nvls_runs_at_nccls_lower_nvls_efficiency(engine):
    def nvls_fraction(system: str) -> float:
        h = engine.hierarchy(engine.scenario({"cluster": {"system": system, "num_gpus": 8},
                                                    "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 8}}))
        up = h.scale_up
        return up.nvls_bw_Bps / (up.bw_Bps / (0.82))  # the link bandwidth before the ring fraction

    assert nvls_fraction("DGX-H100") == pytest.approx(NVLS_ALGBW_FRACTION, rel=1e-9)
    assert nvls_fraction("DGX-B200") == pytest.approx(NVLS_ALGBW_FRACTION * 0.74 / 0.85, rel=1e-9)


# ------------------------------------------------------------ NVLS chunks and fill
KIB, MIB = 1024, 1024 * 1024


def test_nvls_chunks_shrink_as_nccls_calc_coll_chunking_does():
    """enqueue.cc, calcCollChunking (NVLS, one node): from 128 KiB, 64 KiB below 64 x heads x
    128 KiB per channel, 32 KiB below 8 x heads x 64 KiB, 16 KiB below 2 x heads x 32 KiB;
    NVLS_TREE: 64 KiB at most from 4 nodes, 64 KiB below 4 x heads x chunk, 32 KiB below
    heads x chunk."""
    heads = 8
    assert nvls_chunk(64 * MIB, heads) == 128 * KIB            # not below 64 x 8 x 128 KiB = 64 MiB
    assert nvls_chunk(64 * MIB - 1, heads) == 64 * KIB
    assert nvls_chunk(4 * MIB - 1, heads) == 32 * KIB          # below 8 x 8 x 64 KiB
    assert nvls_chunk(512 * KIB, heads) == 32 * KIB            # not below 2 x 8 x 32 KiB
    assert nvls_chunk(512 * KIB - 1, heads) == 16 * KIB
    assert nvls_tree_chunk(4 * MIB, heads, 2) == 128 * KIB     # not below 4 x 8 x 128 KiB
    assert nvls_tree_chunk(4 * MIB - 1, heads, 2) == 64 * KIB
    assert nvls_tree_chunk(512 * KIB - 1, heads, 2) == 32 * KIB  # then below 1 x 8 x 64 KiB
    assert nvls_tree_chunk(1 << 30, heads, 4) == 64 * KIB      # 4 nodes: 64 KiB at most
    per_channel = np.array([64 * MIB, 64 * MIB - 1, 4 * MIB - 1, 512 * KIB, 512 * KIB - 1])
    assert list(nvls_chunk(per_channel, np.full(5, heads))) == [128 * KIB, 64 * KIB, 32 * KIB, 32 * KIB, 16 * KIB]


def test_one_node_nvls_takes_two_pieces_of_fill():
    """One node, 8 GPUs, 16 channels (Hopper), 64 MiB: 4 MiB per channel -> 64 KiB chunks, a
    piece of 16 x 8 x 64 KiB = 8 MiB; three stages, so two pieces at the NVLS rate on top of
    NCCL's 25 us and the bandwidth time."""
    h = flat_hierarchy(nvls=273.0)
    span = place_group(8, 1, h)
    size = 64.0 * MIB
    got = collective_cost("all_reduce", size, span, h, algorithm="nvls")
    assert got.algorithm == "nvls"
    assert float(got.time_s) == pytest.approx(25 * US + size / (273 * GB) + 2 * 8 * MIB / (273 * GB), rel=1e-12)
    # a buffer smaller than one piece is the piece: 1 MiB -> 2 x 1 MiB
    small = collective_cost("all_reduce", 1.0 * MIB, span, h, algorithm="nvls")
    assert float(small.time_s) == pytest.approx(25 * US + 3 * MIB / (273 * GB), rel=1e-12)


def test_nvls_tree_fill_counts_gpu_stages_and_network_hops():
    """Two domains of 8 (tree depth log2i(2) = 1): 3 + 2 GPU stages at the NVLS rate and 2
    network hops, each carrying the piece once over the domain's 8 NICs x 47 GB/s, less the
    slowest stage (NVLS). 64 MiB: 4 MiB per channel, chunk 128 KiB (not below 4 x 8 x 128
    KiB), piece 16 x 8 x 128 KiB = 16 MiB; latency 25 + 2 x 14 us."""
    h = flat_hierarchy(nvls=273.0)
    span = place_group(16, 1, h)
    size = 64.0 * MIB
    got = collective_cost("all_reduce", size, span, h, algorithm="nvls")
    fill = 16 * MIB * (4 / (273 * GB) + 2 / (8 * 47 * GB))
    assert float(got.time_s) == pytest.approx(53 * US + size / (273 * GB) + fill, rel=1e-12)
    # 4 domains (depth 2): 64 KiB chunks at most, 7 GPU stages and 4 hops. The bandwidth time
    # is now the network's (the double binary tree's 2x over 376 GB/s), but a hop carries a
    # piece once (376 GB/s), so the slowest stage is still NVLS's
    four = place_group(32, 1, h)
    got4 = collective_cost("all_reduce", size, four, h, algorithm="nvls")
    fill4 = 16 * 8 * 64 * KIB * (6 / (273 * GB) + 4 / (8 * 47 * GB))
    assert float(got4.time_s) == pytest.approx((25 + 4 * 14) * US + 2.0 * size / (8 * 47 * GB) + fill4, rel=1e-12)


def test_nvls_tree_fill_runs_to_the_deepest_leaf_of_nccls_tree():
    """trees.cc ncclGetBtree: 3 nodes are a chain 0 -> 2 -> 1, so the deepest leaf is 2 levels
    down although NCCL's latency model counts log2i(3) = 1 level: 3 + 2 x 2 GPU stages and 4
    hops; 5 nodes (0 -> 4 -> 2 -> {1, 3}) 3 levels: 9 GPU stages and 6 hops. 64 MiB on 3 domains
    of 8: chunk 128 KiB (3 nodes, not below 4 x 8 x 128 KiB per channel), piece 16 MiB; the
    network time is the chain's 1.5x over 376 GB/s; latency 25 + 2 x 1 x 14 us."""
    h = flat_hierarchy(nvls=273.0)
    size = 64.0 * MIB
    three = collective_cost("all_reduce", size, place_group(24, 1, h), h, algorithm="nvls")
    fill3 = 16 * MIB * (6 / (273 * GB) + 4 / (8 * 47 * GB))
    assert float(three.time_s) == pytest.approx(53 * US + 1.5 * size / (8 * 47 * GB) + fill3, rel=1e-12)
    five = collective_cost("all_reduce", size, place_group(40, 1, h), h, algorithm="nvls")
    fill5 = 16 * 8 * 64 * KIB * (8 / (273 * GB) + 6 / (8 * 47 * GB))
    assert float(five.time_s) == pytest.approx((25 + 4 * 14) * US + 2.0 * size / (8 * 47 * GB) + fill5, rel=1e-12)
    # the batch path counts the same levels (1 to 20 domains, powers of two and not)
    n = np.array([8, 16, 24, 32, 40, 56, 64, 160])
    batch = HierarchyBatch([h], np.zeros(len(n), dtype=np.int64))
    got = collective_cost("all_reduce", np.full(len(n), size), place_group(n, np.ones_like(n), batch), batch,
                          algorithm="nvls")
    for i, ni in enumerate(n):
        one = collective_cost("all_reduce", size, place_group(int(ni), 1, h), h, algorithm="nvls")
        assert float(got.time_s[i]) == pytest.approx(float(one.time_s), rel=1e-12), int(ni)


def test_nccl_ranks_nvls_by_its_model_and_the_fill_is_paid_after():
    """NCCL picks by tuning.cc's time (no pipeline term): 8 MiB on one node, NVLS's 25 us +
    30.7 us beats ring LL128's 40.6 + 43.2 us, so NVLS runs, and takes its fill (32 KiB
    chunks, a 4 MiB piece, two of them: 30.7 us) although LL128 would have been faster."""
    h = flat_hierarchy(nvls=273.0)
    span = place_group(8, 1, h)
    size = 8.0 * MIB
    nvls_model = 25 * US + size / (273 * GB)
    ll128 = (14.0 + 14 * 1.9) * US + size * 2 * 7 / 8 / (0.92 * 370 * GB)
    fill = 2 * 4 * MIB / (273 * GB)
    assert nvls_model < ll128 < nvls_model + fill
    got = collective_cost("all_reduce", size, span, h)
    assert (got.algorithm, got.protocol) == ("nvls", "Simple")
    assert float(got.time_s) == pytest.approx(nvls_model + fill, rel=1e-12)
    # the candidates an analysis prints carry the time taken, fill included
    assert _option("all_reduce", size, span, h, "nvls", "Simple") == pytest.approx(nvls_model + fill, rel=1e-12)


def test_nvls_heads_stop_at_nccls_nvls_arity():
    """search.cc, ncclTopoCompute: an NVLS graph has at most NCCL_MAX_NVLS_ARITY (32) heads,
    so a 72-GPU domain cuts pieces of 24 channels x 32 heads (Blackwell, one domain)."""
    h = dataclasses.replace(flat_hierarchy(nvls=473.0, domain=72), nvls_channels=24, nvls_channels_multi=32)
    span = place_group(72, 1, h)
    for gib, chunk in ((8, 128 * KIB), (4, 64 * KIB)):  # 341 / 171 MiB per channel against 64 x 32 x 128 KiB
        size = gib * 1024.0 * MIB
        got = collective_cost("all_reduce", size, span, h, algorithm="nvls")
        piece = 24 * 32 * chunk
        assert float(got.time_s) == pytest.approx(25 * US + size / (473 * GB) + 2 * piece / (473 * GB), rel=1e-12)


def test_nvls_needs_three_gpus_of_the_communicator():
    """nvls.cc, ncclNvlsInit: "gpuCount <= 2" leaves NVLS off, so a 2-GPU group has no NVLS
    candidate (a forced NVLS falls back to the fastest, here a ring) and 3 GPUs have one."""
    h = flat_hierarchy(nvls=273.0)
    two, three = place_group(2, 1, h), place_group(3, 1, h)
    assert "nvls" not in {a for _, a, _, _ in collective_options("all_reduce", 2.0 ** 30, two, h)}
    assert collective_cost("all_reduce", 2.0 ** 30, two, h, algorithm="nvls").algorithm == "ring"
    assert collective_cost("all_reduce", 2.0 ** 30, three, h, algorithm="nvls").algorithm == "nvls"


def test_nvls_time_never_falls_with_size():
    """Chunks only grow with the buffer, so a bigger all-reduce never takes less (one domain,
    2 and 4 domains)."""
    h = flat_hierarchy(nvls=273.0)
    for n in (8, 16, 32):
        span = place_group(n, 1, h)
        times = [float(collective_cost("all_reduce", 2.0 ** e, span, h, algorithm="nvls").time_s)
                 for e in range(10, 35)]
        assert times == sorted(times), n


def test_nvls_channels_follow_the_gpu_generation(engine):
    """nvls.cc: 16 NVLS channels on Hopper; Blackwell 24 inside one NVLink domain, 32 across
    domains; on the scalar and the batch path."""
    assert {nccl_tuning_key(g) for g in typing.get_args(Generation)} <= set(NVLS_CHANNELS)
    for system, want in (("DGX-H100", (16, 16)), ("DGX-B200", (24, 32)), ("GB200-NVL72", (24, 32))):
        data = {"cluster": {"system": system, "num_gpus": 144 if system == "GB200-NVL72" else 16},
                "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 144}}
        got = _hierarchy(engine, data)
        assert (got.nvls_channels, got.nvls_channels_multi) == want, system
        batch = HierarchyBatch([got], np.zeros(3, dtype=np.int64))
        assert list(batch.nvls_channels) == [want[0]] * 3 and list(batch.nvls_channels_multi) == [want[1]] * 3


def test_nvls_fill_is_one_model_on_both_paths():
    """Hopper and Blackwell channel counts, 8- and 72-GPU domains, one to four domains, sizes
    on both sides of every chunk threshold: each point of a batch as the scalar path has it."""
    base = flat_hierarchy(nvls=273.0)
    hs = [base, dataclasses.replace(base, nvls_channels=24, nvls_channels_multi=32),
          dataclasses.replace(flat_hierarchy(nvls=473.0, domain=72), nvls_channels=24, nvls_channels_multi=32)]
    rows = np.array([0, 0, 0, 1, 1, 1, 2, 2, 0, 1, 0, 2, 1, 0])
    n = np.array([8, 16, 32, 8, 16, 32, 72, 144, 24, 8, 4, 36, 64, 16])
    size = np.array([8 * MIB, 4 * MIB, 3e7, 12 * MIB, 2.0 ** 30, 5e8, 2.0 ** 32, 7e9, 64 * MIB,
                     64 * MIB - 512, 1 * MIB, 3 * MIB, 96 * MIB, 512 * KIB], dtype=float)
    batch = HierarchyBatch(hs, rows)
    spans = place_group(n, np.ones_like(n), batch)
    for algorithm in (None, "nvls"):
        got = collective_cost("all_reduce", size, spans, batch, algorithm=algorithm)
        for i in range(len(rows)):
            h = hs[rows[i]]
            one = collective_cost("all_reduce", float(size[i]), place_group(int(n[i]), 1, h), h, algorithm=algorithm)
            assert float(got.time_s[i]) == pytest.approx(float(one.time_s), rel=1e-12), (algorithm, i)
            assert (str(got.algorithm[i]), str(got.protocol[i])) == (str(one.algorithm), str(one.protocol)), i
    assert "nvls" in {str(a) for a in got.algorithm}


# ------------------------------------------------------------------------ EFA
def test_efa_runs_only_simple_across_nodes_unless_stated(engine):
    h = _hierarchy(engine, _cluster("efa"))
    span = place_group(16, 1, h)
    for size in (8.0, 4096.0, 2.0**20, 2.0**30):
        assert collective_cost("all_reduce", size, span, h).protocol in ("Simple",)
        assert collective_cost("all_gather", size, span, h).protocol == "Simple"
    ll = _hierarchy(engine, _cluster("efa", ll_protocols=True))
    assert collective_cost("all_reduce", 8.0, place_group(16, 1, ll), ll).protocol != "Simple"
    # Inside one node nothing crosses EFA: LL stays available.
    assert collective_cost("all_reduce", 8.0, place_group(8, 1, h), h).protocol == "LL"


def test_efa_network_steps_cost_the_plugins_step_latency(engine):
    h = _hierarchy(engine, _cluster("efa"))
    assert all(t.latency_s >= EFA_STEP_LATENCY_S for t in h.tiers[1:])
    span = place_group(16, 1, h)
    # tree Simple on 2 nodes: base 8.4 + 2 x ((8 - 1) x 4.0 + log2(2) x max(14, 23)) us
    t = _option("all_reduce", 1.0, span, h, "tree", "Simple")
    assert t == pytest.approx((8.4 + 2 * (7 * 4.0 + 23.0)) * US, rel=1e-3)
    # 8 bytes on EFA (Simple only): NVLS-tree, 25 us + 2 log2i(2) x max(NVLSTree NET 14, 23) us;
    # on InfiniBand: tree LL, 6.8 + 2 x ((8 - 1) x 0.6 + 1 x 5.0) us
    efa = collective_cost("all_reduce", 8.0, span, h)
    assert (efa.algorithm, float(efa.time_s)) == ("nvls", pytest.approx((25.0 + 2 * 23.0) * US, rel=1e-3))
    ib = collective_cost("all_reduce", 8.0, span, _hierarchy(engine, _cluster("infiniband")))
    assert (ib.algorithm, ib.protocol) == ("tree", "LL")
    assert float(ib.time_s) == pytest.approx((6.8 + 2 * (7 * 0.6 + 5.0)) * US, rel=1e-3)


def test_efa_rejects_a_non_boolean_ll_protocols(engine):
    with pytest.raises(SpecError) as info:
        engine.evaluate(_cluster("efa", ll_protocols="yes"))
    assert info.value.field == "cluster.scale_out.params.ll_protocols"
    with pytest.raises(SpecError) as info:
        engine.evaluate(_cluster("roce", ll_protocols=True))
    assert info.value.field == "cluster.scale_out.params.ll_protocols"


def test_efa_batch_equals_scalar(engine):
    hs = [_hierarchy(engine, _cluster("efa")), _hierarchy(engine, _cluster("efa", ll_protocols=True)),
          _hierarchy(engine, _cluster("infiniband"))]
    rows = np.array([0, 1, 2, 0, 1, 2, 0, 2])
    batch = HierarchyBatch(hs, rows)
    n = np.array([16, 16, 16, 8, 8, 2, 16, 16])
    stride = np.array([1, 1, 1, 1, 1, 8, 1, 1])
    size = np.array([8.0, 8.0, 8.0, 1e6, 1e6, 1024.0, 3e7, 2.0**30])
    spans = place_group(n, stride, batch)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):  # one-node points among two-node ones
        got = collective_cost(op, size, spans, batch)
        for i in range(len(rows)):
            one = collective_cost(op, float(size[i]), place_group(int(n[i]), int(stride[i]), hs[rows[i]]), hs[rows[i]])
            assert float(got.time_s[i]) == pytest.approx(float(one.time_s), rel=1e-12), (op, i)
            assert str(got.protocol[i]) == str(one.protocol) and str(got.algorithm[i]) == str(one.algorithm)


def test_nccl_2_28_tables_give_one_answer_on_both_paths():
    """The LL cap per GPU generation, the tree's protocol factors, NVLS and CollNet latencies:
    a batch mixing hierarchies of different generations answers each point as the scalar
    path does (the scalar and batch paths are one model)."""
    base = flat_hierarchy(nvls=273.0, sharp=True)
    hs = [dataclasses.replace(base, ll_max_bw=g * GB) for g in (39.0, 87.7, 141.0, 282.0)]
    rows = np.array([0, 1, 2, 3, 2, 1, 3, 0, 2])
    batch = HierarchyBatch(hs, rows)
    n = np.array([8, 8, 8, 8, 16, 32, 24, 2, 64])
    stride = np.array([1, 1, 1, 1, 1, 1, 1, 8, 1])
    size = np.array([4096.0, 2.0**20, 2.0**20, 2.0**20, 65536.0, 2.0**22, 8.0, 1024.0, 2.0**30])
    spans = place_group(n, stride, batch)
    # 1 MiB all-gathers on one node (points 1-3: Ampere, Hopper, Blackwell caps) run LL at
    # min(0.5 x 370, llMaxBw): each generation's cap gives its own time
    ag = collective_cost("all_gather", size, spans, batch)
    assert list(ag.protocol[1:4]) == ["LL"] * 3 and len({float(t) for t in ag.time_s[1:4]}) == 3
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        got = collective_cost(op, size, spans, batch)
        for i in range(len(rows)):
            h = hs[rows[i]]
            one = collective_cost(op, float(size[i]), place_group(int(n[i]), int(stride[i]), h), h)
            assert float(got.time_s[i]) == pytest.approx(float(one.time_s), rel=1e-12), (op, i)
            assert str(got.protocol[i]) == str(one.protocol) and str(got.algorithm[i]) == str(one.algorithm)


def test_sharp_pays_nccls_collnet_direct_latency():
    """NCCL 2.28.3, CollNet Direct: 2 (min(1, ppn-1) 3.7 + (ppn-1) 0.4) + 31 us; with 8 GPUs
    per node 2 (3.7 + 2.8) + 31 = 44 us, with one 31 us."""
    h = flat_hierarchy(sharp=True)
    eight = collective_cost("all_reduce", 1.0, place_group(32, 1, h), h, algorithm="sharp")
    one = collective_cost("all_reduce", 1.0, place_group(4, 8, h), h, algorithm="sharp")
    assert eight.algorithm == one.algorithm == "sharp"
    assert float(eight.time_s) == pytest.approx(44.0 * US, rel=1e-3)
    assert float(one.time_s) == pytest.approx(31.0 * US, rel=1e-3)


def test_collnet_direct_runs_at_nccls_model_of_its_intra_node_part():
    """NCCL 2.28.3 tuning.cc, CollNet Direct all-reduce: busBw = the intra-node bandwidth / the
    GPU/NIC factor (f = ppn / NICs, f - (f-1)/2), x.85 from sm90, and algBw = busBw x .5.
    flat_hierarchy: 370 GB/s NVLink, 8 GPUs and 8 NICs of 47 GB/s per node, no NVLS."""
    size = 2.0**31
    h = flat_hierarchy(sharp=True)
    span = place_group(32, 1, h)  # 4 nodes x 8
    # intra: 2 GiB / (0.5 x 370 GB/s) = 11.6 ms; in-network: each GPU's share up its own NIC,
    # 2 GiB / (8 x 47 GB/s) = 5.7 ms; the intra part paces it, plus CollNet's 44 us
    got = collective_cost("all_reduce", size, span, h, algorithm="sharp")
    assert got.algorithm == "sharp"
    assert float(got.time_s) == pytest.approx(size / (0.5 * 370 * GB) + 44.0 * US, rel=1e-9)
    # 4 NICs for 8 GPUs (f = 2 -> 1.5) on Hopper (x.85): 0.5 x 0.85 / 1.5 x 370 = 104.8 GB/s
    hopper_4nic = dataclasses.replace(h, collnet_direct_bw=0.85 / 1.5)
    slow = collective_cost("all_reduce", size, place_group(32, 1, hopper_4nic), hopper_4nic, algorithm="sharp")
    assert float(slow.time_s) == pytest.approx(size / (0.5 * 0.85 / 1.5 * 370 * GB) + 44.0 * US, rel=1e-9)
    # One GPU per node: nothing inside the node, the network paces it (2 GiB at 47 GB/s).
    one = collective_cost("all_reduce", size, place_group(4, 8, h), h, algorithm="sharp")
    assert float(one.time_s) == pytest.approx(size / (47 * GB) + 31.0 * US, rel=1e-9)
    # More than 8 GPUs of the communicator per node and no NVLS: CollNet Direct is not offered.
    wide = flat_hierarchy(sharp=True, domain=16)
    algos = {a for _, a, _, _ in collective_options("all_reduce", size, place_group(32, 1, wide), wide)}
    assert "sharp" not in algos and "ring" in algos


def test_collnet_direct_factor_follows_the_gpus_and_nics(engine):
    """The hierarchy of a cluster carries NCCL's CollNet Direct factor: 1 for a NIC per GPU
    before sm90, .85 from sm90, over (f + 1) / 2 with f GPUs per NIC; on both paths."""
    assert {nccl_tuning_key(g) for g in typing.get_args(Generation)} <= set(COLLNET_DIRECT_BW)
    cases = (("DGX-A100", None, 1.0), ("DGX-A100", 4, 1 / 1.5), ("DGX-A100", 2, 1 / 2.5),
             ("DGX-H100", None, 0.85), ("DGX-B200", None, 0.85), ("DGX-2", None, 1 / 1.5))  # DGX-2: 16 V100, 8 NICs
    for system, nics, want in cases:
        plan = {"tp": 8, "gbs": 16, "precision": "fp16" if system == "DGX-2" else "bf16"}
        cluster: dict = {"system": system, "num_gpus": 16}
        if nics is not None:
            cluster["scale_out"] = {"nics_per_node": nics}
        got = _hierarchy(engine, {"cluster": cluster, "model": "llama3.1-8b", "plan": plan})
        assert got.collnet_direct_bw == pytest.approx(want), (system, nics)
        batch = HierarchyBatch([got], np.zeros(3, dtype=np.int64))
        assert list(batch.collnet_direct_bw) == pytest.approx([want] * 3)
    assert collnet_direct_bw("ampere", 8, 16) == 1.0  # more NICs than GPUs: no bonus


def test_collnet_direct_is_one_model_on_both_paths():
    """SHARP all-reduce over hierarchies with different CollNet factors, with and without NVLS,
    one GPU per node and a 16-GPU domain (no CollNet Direct): each point of a batch as alone."""
    base = flat_hierarchy(sharp=True)
    hs = [base, dataclasses.replace(base, collnet_direct_bw=0.85 / 1.5), flat_hierarchy(sharp=True, nvls=273.0),
          flat_hierarchy(sharp=True, domain=16)]
    rows = np.array([0, 1, 2, 3, 0, 1, 3, 2])
    n = np.array([32, 32, 32, 32, 4, 16, 64, 16])
    stride = np.array([1, 1, 1, 1, 8, 1, 1, 1])
    size = np.array([2.0**31, 2.0**31, 2.0**31, 2.0**31, 2.0**20, 8.0, 2.0**26, 2.0**24])
    batch = HierarchyBatch(hs, rows)
    spans = place_group(n, stride, batch)
    for algorithm in (None, "sharp"):
        got = collective_cost("all_reduce", size, spans, batch, algorithm=algorithm)
        for i in range(len(rows)):
            h = hs[rows[i]]
            one = collective_cost("all_reduce", float(size[i]), place_group(int(n[i]), int(stride[i]), h), h,
                                  algorithm=algorithm)
            assert float(got.time_s[i]) == pytest.approx(float(one.time_s), rel=1e-12), (algorithm, i)
            assert str(got.algorithm[i]) == str(one.algorithm), (algorithm, i)
    assert str(got.algorithm[3]) != "sharp" and str(got.algorithm[0]) == "sharp"


# -------------------------------------------------------------- expert dispatch
def test_node_limited_routing_reaches_fewer_domains():
    assert domains_per_token(2, 8) == pytest.approx(2 * (1 - 0.5**8))
    assert domains_per_token(8, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8))
    assert domains_per_token(8, 8, 4) == pytest.approx(4 * (1 - (3 / 4) ** 8))
    assert domains_per_token(2, 8, 4) == domains_per_token(2, 8)  # the limit only bites above it


def test_node_limited_dispatch_sends_less_across_domains():
    h = flat_hierarchy(nic_GBps=47.0)
    span = place_group(64, 1, h)  # 8 nodes
    free = dedup_dispatch_cost(7392.0, 4096.0, 8, span, h)
    limited = dedup_dispatch_cost(7392.0, 4096.0, 8, span, h, groups=4)
    assert float(limited.time_s) < float(free.time_s)
    # RDMA-bound: tokens x bytes x remote domains / one GPU's NIC (47 GB/s), plus the p2p
    # latency: 8 us + 63 peers x 0.5 us + one network step (max(14, 1) us)
    remote = 7 / 8 * domains_per_token(8, 8, 4)
    expected = 4096 * 7392 * remote / (47 * GB) + (8 + 63 * 0.5 + 14) * US
    assert float(limited.time_s) == pytest.approx(expected, rel=1e-9)


def test_deepep_metric_counts_the_tokens_own_node():
    h = flat_hierarchy(up_GBps=370.0, nic_GBps=47.0)
    span = place_group(32, 1, h)  # 4 nodes
    wl = EPWorkload(tokens=4096.0, token_bytes=7168 * (1 + 4 / 128), top_k=8, groups=4)
    got, cost = ep_predicted_GBps(wl, span, h)
    pairs = 4096 * domains_per_token(4, 8, 4)  # (token, node) pairs, own node included
    assert got == pytest.approx(pairs * wl.token_bytes / float(cost.time_s) / GB, rel=1e-9)
    # RDMA-bound, so the reported figure exceeds the NIC by m/(m-1) (less the latency)
    assert 47 < got < 47 * 4 / 3


def test_ep_case_with_a_bad_dtype_is_that_cases_error(engine):
    case = {"id": "bad", "op": "ep_dispatch", "cluster": {"gpu": "H800-SXM-80GB", "num_gpus": 16, "gpus_per_node": 8,
                                                          "scale_out": {"fabric": "infiniband", "gbps_per_gpu": 400}},
            "points": [{"busbw_GBps": 43}], "workload": {"dispatch_dtype": "int4"}}
    good = copy.deepcopy(case)
    good["id"] = "good"
    good["workload"] = {"dispatch_dtype": "fp8", "top_k_groups": 4}
    report = validate_collectives(engine, {"cases": [case, good]})
    assert [r.id for r in report.cases] == ["good"]
    assert report.skipped[0]["id"] == "bad" and "workload.dispatch_dtype" in report.skipped[0]["reason"]


def test_ep_workload_fields_change_the_answer_or_are_that_cases_error(engine):
    """Every workload field is read: an unknown one, a kernel the twin does not price (V2's direct
    mode) and an expert count below top-k skip that case naming the field; the expert count changes the
    prediction (top-k draws distinct experts); ``library`` is descriptive text."""
    base = {"op": "ep_dispatch", "cluster": {"gpu": "H800-SXM-80GB", "num_gpus": 64, "gpus_per_node": 8,
                                             "scale_out": {"fabric": "infiniband", "gbps_per_gpu": 400}},
            "points": [{"busbw_GBps": 50}]}

    def case(cid: str, **workload: typing.Any) -> dict[str, typing.Any]:
        return {**copy.deepcopy(base), "id": cid, "workload": {"dispatch_dtype": "fp8", **workload}}

    report = validate_collectives(engine, {"cases": [
        case("typo", topk=8), case("ll", kernel="direct"), case("few", num_experts=4),
        case("plain", kernel="normal", library="DeepEP"), case("experts", num_experts=256)]})
    reasons = {s["id"]: s["reason"] for s in report.skipped}
    assert set(reasons) == {"typo", "ll", "few"}
    assert "workload.topk" in reasons["typo"] and "unknown field" in reasons["typo"]
    assert "workload.kernel" in reasons["ll"] and "direct mode" in reasons["ll"]
    assert "workload.num_experts" in reasons["few"] and "top_k" in reasons["few"]
    got = {r.id: r.predicted for r in report.cases}
    assert got["experts"] != got["plain"]


# ------------------------------------------------------------ NCCL p2p (all-to-all)
# NCCL 2.28.3 runs an all-to-all as grouped sends (twin.core.p2p; nccl_tuning cites each rule).
def test_ring_channels_reproduce_the_channel_counts_nccl_logs():
    # search.cc at the speed giving the most channels x speed, DupChannels, Postset's doubling:
    # Hopper 18 links (18 x 20.6 = 370.8 GB/s): 6 x 60 -> 12 -> 24; Ampere 12 x 20: 6 x 40 -> 12 -> 24;
    # H800's 8 links: 4 x 40 (no dup: sm90, < 50 GB/s, but only 4 channels) -> 8 -> 16 (nccl#892 logs 16);
    # Blackwell 18 x 40.1 = 721.8: 8 x 90 -> 16 -> 32.
    assert [ring_channels(g, links) for g, links in (("hopper", 18), ("ampere", 12), ("hopper", 8),
                                                      ("blackwell", 18))] == [24, 24, 16, 32]
    # p2pnChannels = pow2Up(nChannels); an NVLink peer asks for 2 per link
    assert p2p_channels("hopper", 18) == (32, 36)
    assert p2p_channels("hopper", 8) == (16, 16)
    assert p2p_channels("blackwell", 18) == (32, 36)
    assert p2p_channels("hopper", 0) == (0, 0)


def test_nvlink_hierarchies_carry_nccls_p2p_channels(engine):
    """The NVLink tier states its links (bandwidth over the per-link rate); the hierarchy turns
    them into NCCL's channels and half a link's bandwidth per channel (topo.h nvlBw / 2)."""
    for system, gpu, want in (("DGX-H100", None, (32, 36, 20.6 / 2)), ("GB300-NVL72", None, (32, 36, 40.1 / 2)),
                              ("DGX-H100", "H800-SXM-80GB", (16, 16, 20.6 / 2)), ("DGX-A100", None, (32, 24, 10.0))):
        cluster: dict = {"system": system, "num_gpus": 8}
        if gpu:
            cluster["gpu"] = gpu
        h = _hierarchy(engine, {"cluster": cluster, "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 8}})
        assert (h.p2p_channels, h.p2p_peer_channels, h.p2p_channel_bw / GB) == pytest.approx(want), system
        batch = HierarchyBatch([h], np.zeros(2, dtype=np.int64))
        assert list(batch.p2p_channels) == [want[0]] * 2 and list(batch.p2p_channel_bw) == [want[2] * GB] * 2
    pcie = _hierarchy(engine, {"cluster": {"gpu": "H100-PCIe-80GB", "num_gpus": 8, "gpus_per_node": 8,
                                           "scale_up": {"fabric": "pcie", "generation": 5, "domain_gpus": 8}},
                               "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 8}})
    assert (pcie.p2p_channels, pcie.p2p_channel_bw) == (0, 0.0)  # no NVLink: the flat p2p model


def test_p2p_channels_per_peer_and_the_first_split():
    # one NVLink domain, 32 channels, NVLink peers ask 36: pow2Up(min(32, 36)) = 32 per peer, and
    # nChannelsMin halves 32 until n ranks fit in 32 channels: 8 for 4 ranks, 4 for 8, 1 for 64
    for n, first in ((4, 8), (8, 4), (64, 1)):
        assert peer_channels(n, False, True, 32, 36) == (32, first)
    # across nodes a network peer asks for 2 (16 ranks: 2 x 16 <= 4 x 32), 1 from 2 x n > 128
    assert peer_channels(16, True, True, 32, 36) == (2, 2)
    assert peer_channels(128, True, True, 32, 36) == (1, 1)
    assert peer_channels(2, True, False, 32, 0) == (2, 2)  # one GPU per node: no NVLink peer


def test_a_send_doubles_its_channels_by_part_size():
    # one node: Simple step 512 KiB, parts from 64 KiB (step / 8) to 16 MiB (32 steps)
    step = P2P_NVL_CHUNK
    assert send_channels(128 * KIB, step, False, 32, 8) == 2           # divUp(128 KiB, 64 KiB)
    assert send_channels(16 * MIB, step, False, 32, 8) == 8            # parts of 2 MiB
    assert send_channels(128 * MIB, step, False, 32, 8) == 8           # 16 MiB parts: not above the cap
    assert send_channels(128 * MIB + 1, step, False, 32, 8) == 16
    assert send_channels(2 ** 30, step, False, 32, 8) == 32            # at most the per-peer channels
    # across nodes: step 128 KiB, parts 64 KiB to 128 KiB, at most 2 channels
    assert send_channels(100 * KIB, P2P_NET_CHUNK, True, 2, 1) == 1
    assert send_channels(200 * KIB, P2P_NET_CHUNK, True, 2, 1) == 2


def test_small_sends_run_ll_in_half_data_chunks():
    assert uses_ll(32 * 16 * KIB, 32) and not uses_ll(32 * 16 * KIB + 1, 32)  # nChannelsMax x 16 KiB
    assert not uses_ll(KIB, 32, ll_ok=False)                                  # a Simple-only network
    assert step_bytes(True, False) == 64 * KIB and step_bytes(False, True) == 128 * KIB
    assert chunk_data(64 * KIB, True, 100 * KIB, False) == 32 * KIB          # LL: 8 data bytes per 16
    assert chunk_data(512 * KIB, False, 4 * MIB, False) == 512 * KIB         # NVLink: the chunk
    # network Simple: / 4 below one step, / 2 below 8 steps
    assert [chunk_data(128 * KIB, False, b, True) for b in (64 * KIB, 512 * KIB, 2 * MIB)] == [
        32 * KIB, 64 * KIB, 128 * KIB]
    # fill: one chunk (at most the part) per copy stage besides the slowest: 1 over NVLink, 2 across
    assert fill_s(2 * MIB, 512 * KIB, 20 * GB, False) == pytest.approx(512 * KIB / (20 * GB))
    assert fill_s(64 * KIB, 512 * KIB, 20 * GB, True) == pytest.approx(2 * 64 * KIB / (20 * GB))


def test_an_nvlink_all_to_all_by_hand(engine):
    """4 GB300 GPUs (one tray): 32 channels, 8 per peer at first, each at half an NVLink 5 link
    (40.1 / 2 GB/s), three peers behind NVLink."""
    h = _hierarchy(engine, {"cluster": {"system": "GB300-NVL72", "num_gpus": 4}, "model": "llama3.1-8b",
                            "plan": {"tp": 4, "gbs": 4}})
    span = place_group(4, 1, h)
    lat = (8 + 3 * 0.5) * US  # the twin's p2p latency
    ch = 40.1 / 2 * GB
    # 64 MiB: 16 MiB per peer on 8 channels (2 MiB parts): 3 x 8 = 24 channels, below the links'
    # all-to-all rate; the receiver's copy of one 512 KiB chunk as fill
    got = collective_cost("all_to_all", 64 * MIB, span, h)
    assert float(got.time_s) == pytest.approx(lat + 64 * MIB * 3 / 4 / (24 * ch) + 512 * KIB / ch, rel=1e-12)
    assert float(got.bottleneck_bw_Bps) == pytest.approx(24 * ch) and str(got.protocol) == "Simple"
    # 2 MiB: 512 KiB per peer = 32 x 16 KiB, so LL: twice the bytes, 8 channels of 64 KiB,
    # 32 KiB data chunks
    got = collective_cost("all_to_all", 2 * MIB, span, h)
    assert float(got.time_s) == pytest.approx(lat + 2 * (2 * MIB * 3 / 4 / (24 * ch) + 32 * KIB / ch), rel=1e-12)
    assert str(got.protocol) == "LL"
    # 1 GiB: 256 MiB per peer on 16 channels: 48 parts on 32 channels, so the comm's 32 channels
    # (641.6 GB/s, below the links' all-to-all rate), each copying at 32/48 of its rate
    got = collective_cost("all_to_all", 2.0 ** 30, span, h)
    assert float(got.bottleneck_bw_Bps) == pytest.approx(32 * ch) and 32 * ch < h.up_a2a_bw
    assert float(got.time_s) == pytest.approx(lat + 2.0 ** 30 * 3 / 4 / (32 * ch) + 512 * KIB / (ch * 32 / 48),
                                              rel=1e-12)


def test_fabrics_without_nvlink_channels_keep_the_flat_all_to_all():
    h = flat_hierarchy()  # no NVLink links stated: p2p_channels 0
    span = place_group(8, 1, h)
    got = collective_cost("all_to_all", 2.0 ** 30, span, h)
    assert float(got.time_s) == pytest.approx(2.0 ** 30 * 7 / 8 / (370 * GB) + (8 + 7 * 0.5) * US, rel=1e-12)
    assert str(got.protocol) == "Simple"


def test_deepep_inside_a_domain_runs_its_own_kernels_at_the_link_rate(engine):
    """DeepEP's intranode kernels are not NCCL's p2p: its EP8 figure stays the NVLink all-to-all
    rate where NCCL's channels would bind (8 H800s: 16 channels, 2 per peer at first)."""
    h = _hierarchy(engine, {"cluster": {"system": "DGX-H100", "num_gpus": 8, "gpu": "H800-SXM-80GB"},
                            "model": "llama3.1-8b", "plan": {"tp": 8, "gbs": 8}})
    span = place_group(8, 1, h)
    wl = EPWorkload(tokens=1024.0, token_bytes=7168 * 2.0, top_k=8, groups=None)  # 14.7 MB per peer
    got, _ = ep_predicted_GBps(wl, span, h)
    assert got == pytest.approx(h.up_a2a_bw / GB)  # 155 GB/s: 200 x DeepEP's 155/200
    nccl = collective_cost("all_to_all", wl.dispatched_bytes, span, h)
    # NCCL: 7 peers x 2 channels (parts of 7.3 MB, below 16 MiB) x 10.3 GB/s = 144.2 GB/s
    assert float(nccl.bottleneck_bw_Bps) == pytest.approx(7 * 2 * 20.6 / 2 * GB)
    assert float(nccl.bottleneck_bw_Bps) < h.up_a2a_bw


def test_nccl_all_to_all_is_one_model_on_both_paths(engine):
    """Hopper and Blackwell domains, a flat hierarchy without channel figures, an EFA fabric
    that carries no LL, one to three domains, sizes across every LL, part and chunk threshold:
    each point of a batch as the scalar path has it."""
    def hier(system: str, gpus: int):
        return _hierarchy(engine, {"cluster": {"system": system, "num_gpus": gpus}, "model": "llama3.1-8b",
                                   "plan": {"tp": 1, "gbs": gpus}})
    hs = [hier("DGX-H100", 64), hier("GB300-NVL72", 216),
          flat_hierarchy(),
          _hierarchy(engine, _cluster("efa", nodes=4))]
    rows = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 0, 1, 3])
    n = np.array([8, 16, 64, 4, 8, 64, 144, 8, 16, 32, 8, 4, 216, 16])
    size = np.array([4 * MIB, 1 * MIB, 2.0 ** 30, 2 * MIB, 4 * MIB + 8, 32 * MIB, 2.0 ** 33, 8.0, 3e9,
                     64 * KIB, 96 * MIB, 1.0, 7e8, 2 * MIB], dtype=float)
    batch = HierarchyBatch(hs, rows)
    spans = place_group(n, np.ones_like(n), batch)
    got = collective_cost("all_to_all", size, spans, batch)
    protocols = set()
    for i in range(len(rows)):
        h = hs[rows[i]]
        one = collective_cost("all_to_all", float(size[i]), place_group(int(n[i]), 1, h), h)
        assert float(got.time_s[i]) == pytest.approx(float(one.time_s), rel=1e-12), i
        assert float(got.bottleneck_bw_Bps[i]) == pytest.approx(float(one.bottleneck_bw_Bps), rel=1e-12), i
        assert str(got.protocol[i]) == str(one.protocol), i
        protocols.add(str(one.protocol))
    assert protocols == {"LL", "Simple"}
