"""NCCL's tuning-model constants, all from one release: NCCL 2.28.3-1.

Source: ``src/graph/tuning.cc`` of NCCL 2.28.3-1 (``ncclTunerConstantsDefaults``,
``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``, ``treeCorrectionFactor``, ``nvlsEfficiency``),
read from the copy of that release at zhanglin496/nccl-2.28.3-1 on GitHub (a mirror whose
comments are translated; the tables below are its numbers). The twin claims NCCL 2.28.3's cost model:
every figure below is that release's, in its units (us, GB/s), with the line it comes from.

What the twin does *not* take from it, and why: NCCL's per-channel bandwidth caps
(``perChMaxRingLL128Bws``, ``perChMaxTreeBws``, ``perChMaxTreeLL128Bws``,
``perChMaxNVLSTreeBws``) multiply NCCL's channel count, which the twin does not model (its
bandwidths are the links', not NCCL's graph search result); the tree's extra x0.85 when
``maxTreePattern`` is a plain tree depends on that search too; PAT (1 GPU per node all-gather /
reduce-scatter) is not modelled.
"""

from __future__ import annotations

from typing import Any

from twin.core import ops

NCCL_RELEASE = "2.28.3-1"

# baseLatencies[algorithm][LL, LL128, Simple], us ("Tree, Ring" rows).
BASE_LAT = {"ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
            "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4}}
# hwLatencies[NVLINK][algorithm][protocol], us: one NVLink step.
HW_LAT_NVLINK = {"ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
                 "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}}
# hwLatencies[NET][algorithm][protocol], us: one network step.
HW_LAT_NET = {"ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
              "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}}
# hwLatencies[NVLINK][NVLS][Simple] = 25 us: an NVLS all-reduce's whole latency on one node
# ("latencies = intraLat"; NVLS's base latency is 0); NVLS-tree adds 2 log2i(nNodes) network
# steps of hwLatencies[NET][NVLS_TREE][Simple] = 14 us ("intraLat + 2 * log2i(nNodes) * interLat").
NVLS_LAT_US = 25.0
NVLS_TREE_NET_LAT_US = 14.0
# CollNet Direct (SHARP with a NIC per GPU): base 0; hwLatencies[NVLINK][COLLNET_DIRECT][Simple]
# 3.7 us, [NET] 31 us; "2 * (min(1, ppn-1) * intraLat + (ppn-1) * 0.4) + interLat // Add 0.4 us
# arity serialization latency".
COLLNET_DIRECT_NVLINK_US = 3.7
COLLNET_DIRECT_NET_US = 31.0
COLLNET_ARITY_US = 0.4

# Ring bandwidth per protocol ("Various model refinements"): LL "busBw = min(llMaxBw, busBw * .5)";
# LL128 "busBw * 0.92 /*120.0/128.0*/" (2.28.3 has no ppn < 2 discount; older releases had 0.7).
RING_PROTO_BW = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
# Tree (all-reduce): "busBw = min(busBw*.92, ...)" for every protocol, then LL "* 1.0/3.8"
# (capped at llMaxBw) and LL128 "* (nNodes == 1 ? 7.0/9.0 : 120.0/128.0)" (the twin's trees
# always span nodes).
TREE_BW = 0.92
TREE_PROTO_BW = {"LL": 1.0 / 3.8, "LL128": 120.0 / 128.0, "Simple": 1.0}

# llMaxBws[index1][index2], GB/s, the LL protocol's busBw cap: one node (index2 N1) by GPU
# generation (index1 = compCapIndex: Volta 39.0, Ampere 87.7, Hopper 141.0, Blackwell 2*141.0);
# across nodes by CPU vendor (index1 0 Intel/other, 1 AMD) and 2 or more than 2 nodes
# (index2 N2, N4). The twin does not know the host CPU, so NCCL's Intel/other row (39.0, 20.4),
# as for the network post overhead.
LL_MAX_BW_ONE_NODE_GBPS = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 2 * 141.0}
LL_MAX_BW_TWO_NODES_GBPS = 39.0
LL_MAX_BW_MORE_NODES_GBPS = 20.4

# Multi-node Simple-protocol ring all-reduce latency factor by GPU generation (tuning.cc,
# ncclTopoGetAlgoTime, 2.19 and later: "lat *= minCompCap < 80 ? 1.9 : 1.4; // Plateau effect
# of ring"; compute capability 7.0 Volta, 8.0 Ampere, 9.0 Hopper, 10.0 Blackwell: NVIDIA CUDA
# C++ Programming Guide, compute capabilities table). NCCL applies it from 64 bytes per
# channel and rank; the twin, which does not count NCCL's channels, applies it at every size.
RING_PLATEAU = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4, "blackwell": 1.4}
# tuning.cc getNetOverhead, "Network post overhead": 1 us on Intel x86 and other hosts, 2 us on
# AMD x86; the twin does not know the host CPU, so NCCL's default (1 us).
NET_OVERHEAD_US = 1.0
# tuning.cc treeCorrectionFactor (2.19+; these 23 entries are 2.28.3's): "Trees are not
# perfectly sticking to the model for medium sizes. Applying a static correction factor
# [...] Powers of two, 64 B to 256MB": the tree's bandwidth is multiplied by entry
# floor(log2(bytes / 64)) of its protocol's row (ncclTopoGetAlgoTime), none from 512 MiB up.
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


def ll_max_bw(nodes: Any, one_node_Bps: Any) -> Any:
    """NCCL's llMaxBw (B/s) for a communicator over ``nodes`` NCCL nodes: ``one_node_Bps``
    (the GPU generation's N1 entry, ``Hierarchy.ll_max_bw``) on one node, else the
    Intel/other row's N2 or N4 entry (``ncclTopoTuneModel``: ``index2 = nNodes <= 2 ? nNodes-1 : 2``).
    """
    multi = ops.where(nodes <= 2, LL_MAX_BW_TWO_NODES_GBPS, LL_MAX_BW_MORE_NODES_GBPS) * 1e9
    return ops.where(nodes <= 1, one_node_Bps, multi)


def collnet_direct_latency_us(ppn: Any) -> Any:
    """CollNet Direct's latency, us, with ``ppn`` GPUs per node (formula above)."""
    local = ops.maximum(ppn - 1, 0)
    return 2.0 * (ops.minimum(1, local) * COLLNET_DIRECT_NVLINK_US + local * COLLNET_ARITY_US) + COLLNET_DIRECT_NET_US
