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
# CollNet Direct all-reduce bandwidth (ncclTopoTuneModel, "Various model refinements"): its busBw is
# the graph's intra-node (NVLink) bandwidth ("bw = nNodes <= 2 || collnet ? bwIntra : bwInter"),
# divided by the GPU/NIC factor ("Collnet+Direct requires all GPUs to have a local NIC to work at
# full speed": factor = ppn / nChannels, "factor -= (factor-1)/2", "busBw /= factor"), times .85
# from compute capability 9.0 ("if (minCompCap >= 90) busBw *= .85"), and, as for every algorithm
# but ring and NVLS, the algorithm bandwidth is half of it ("else ratio *= .5").
COLLNET_DIRECT_BW = {"volta": 1.0, "ampere": 1.0, "hopper": 0.85, "blackwell": 0.85}
COLLNET_DIRECT_RATIO = 0.5
# src/include/device.h "#define NCCL_MAX_DIRECT_ARITY 7"; enqueue.cc updateCollCostTable: "CollNetDirect
# is only supported for up to 8 local GPUs" (maxLocalRanks > NCCL_MAX_DIRECT_ARITY+1: skipped).
COLLNET_DIRECT_MAX_LOCAL_GPUS = 7 + 1

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
# across nodes by CPU vendor ("index1 = nNodes == 1 ? compCapIndex : (cpuVendor == AMD || MIXED)
# ? 1 : 0": row 0 "Intel-N2/Intel-N4" 39.0 / 20.4, row 1 "AMD-N2/AMD-N4" 22.5 / 19.0) and 2 or more
# than 2 nodes (index2 N2, N4). Per ``Cluster.host_cpu``; not stated: the Intel/other row, as for the
# network post overhead.
LL_MAX_BW_ONE_NODE_GBPS = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 2 * 141.0}
LL_MAX_BW_MULTI_NODE_GBPS = {"intel": (39.0, 20.4), "other": (39.0, 20.4), "amd": (22.5, 19.0)}
LL_MAX_BW_TWO_NODES_GBPS, LL_MAX_BW_MORE_NODES_GBPS = LL_MAX_BW_MULTI_NODE_GBPS["intel"]

# Multi-node Simple-protocol ring all-reduce latency factor by GPU generation (tuning.cc,
# ncclTopoGetAlgoTime, 2.19 and later: "lat *= minCompCap < 80 ? 1.9 : 1.4; // Plateau effect
# of ring"; compute capability 7.0 Volta, 8.0 Ampere, 9.0 Hopper, 10.0 Blackwell: NVIDIA CUDA
# C++ Programming Guide, compute capabilities table). NCCL applies it from 64 bytes per
# channel and rank; the twin, which does not count NCCL's channels, applies it at every size.
RING_PLATEAU = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4, "blackwell": 1.4}
# tuning.cc getNetOverhead, "Network post overhead": 1 us on Intel x86 and other hosts, 2 us on
# AMD x86 (per ``Cluster.host_cpu``); not stated: NCCL's default, 1 us.
NET_OVERHEAD_US_BY_CPU = {"intel": 1.0, "other": 1.0, "amd": 2.0}
# tuning.cc treeCorrectionFactor (2.19+; these 23 entries are 2.28.3's): "Trees are not
# perfectly sticking to the model for medium sizes. Applying a static correction factor
# [...] Powers of two, 64 B to 256MB": the tree's bandwidth is multiplied by entry
# floor(log2(bytes / 64)) of its protocol's row (ncclTopoGetAlgoTime), none from 512 MiB up.
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


def ll_max_bw(nodes: Any, one_node_Bps: Any, two_nodes_Bps: Any = LL_MAX_BW_TWO_NODES_GBPS * 1e9,
              more_nodes_Bps: Any = LL_MAX_BW_MORE_NODES_GBPS * 1e9) -> Any:
    """NCCL's llMaxBw (B/s) for a communicator over ``nodes`` NCCL nodes: ``one_node_Bps``
    (the GPU generation's N1 entry, ``Hierarchy.ll_max_bw``) on one node, else the hosts' CPU
    row's N2 or N4 entry (``Hierarchy.ll_max_bw_two_nodes`` / ``_more_nodes``; by default the
    Intel/other row; ``ncclTopoTuneModel``: ``index2 = nNodes <= 2 ? nNodes-1 : 2``).
    """
    multi = ops.where(nodes <= 2, two_nodes_Bps, more_nodes_Bps)
    return ops.where(nodes <= 1, one_node_Bps, multi)


def collnet_direct_latency_us(ppn: Any) -> Any:
    """CollNet Direct's latency, us, with ``ppn`` GPUs per node (formula above)."""
    local = ops.maximum(ppn - 1, 0)
    return 2.0 * (ops.minimum(1, local) * COLLNET_DIRECT_NVLINK_US + local * COLLNET_ARITY_US) + COLLNET_DIRECT_NET_US


def collnet_direct_bw(generation: str, gpus_per_node: int, nics_per_node: int) -> float:
    """CollNet Direct's all-reduce busBw as a fraction of the intra-node bandwidth (formula above):
    NCCL's sm90 factor over its GPU/NIC factor, ``gpus_per_node / nics_per_node`` GPUs per NIC
    (at least 1: CollNet Direct runs one head per NIC, ``nChannels`` of its graph).
    """
    factor = max(1.0, gpus_per_node / max(nics_per_node, 1))
    factor -= (factor - 1.0) / 2.0
    return COLLNET_DIRECT_BW[generation] / factor


# ------------------------------------------------------------------ NVLS pipelining
# How NCCL 2.28.3 cuts an NVLS all-reduce into pipelined pieces; the twin's NVLS options pay the
# pipeline's fill from these (``collectives._nvls_fill``). Sources, all in the same mirror:
# - src/transport/nvls.cc, ncclNvlsInit: the CTAs (channels) an NVLS collective runs on,
#   "NVLS_NCHANNELS_SM90 16" below compute capability 10.0, and on Blackwell
#   "NVLS_NCHANNELS_SM100_NVL 24" for a communicator inside one NVLink domain ("Use a reduced
#   number of channels for single node/MNNVL domain on Blackwell") and "NVLS_NCHANNELS_SM100
#   32" across domains; enqueue.cc topoGetAlgoInfo runs NVLS and NVLS_TREE on all of them
#   ("nc = comm->nvlsChannels", no reduction by size). NCCL_NVLS_NCHANNELS / the nvlsCTAs config
#   override it; the twin takes the defaults. (Volta and Ampere have no NVLS: search.cc builds
#   no NVLS graph below sm90; their entry is the code's sm90 branch, never used.)
NVLS_CHANNELS = {"volta": (16, 16), "ampere": (16, 16), "hopper": (16, 16), "blackwell": (24, 32)}
# nvls.cc, ncclNvlsInit: "if (!ncclParamNvlsEnable() || gpuCount <= 2) return ncclSuccess;" (before
# nvlsSupport is set): NVLS needs at least 3 GPUs of the communicator in the NVLink domain.
NVLS_MIN_GPUS = 3
# nvls.cc: NCCL_PARAM(NvlsChunkSize, "NVLS_CHUNKSIZE", 128*1024), the largest NVLS chunk; enqueue.cc
# calcCollChunking starts from min(stepSize, nvlsChunkSize), stepSize = the Simple buffer
# (init.cc DEFAULT_BUFFSIZE, 1 << 22 = 4 MiB) / NCCL_STEPS (src/include/device.h, 8) = 512 KiB.
NVLS_CHUNK_BYTES = 128 * 1024
# enqueue.cc calcCollChunking, NCCL_ALGO_NVLS branch: with concurrentOps = nChannels x nHeads,
# "if ((nBytes < (64 * (concurrentOps * chunkSize))) && (chunkSize > 65536)) chunkSize = 65536",
# then 8x -> 32768 and 2x -> 16384; each test sees the chunk the previous one left.
NVLS_SHRINK = ((64, 65536), (8, 32768), (2, 16384))
# The NCCL_ALGO_NVLS_TREE branch: chunkSize = nvlsChunkSize, at most 65536 from 4 nodes up
# (NCCL_PARAM NvlsTreeMaxChunkSize -2: "comm->nNodes >= 4 ? 65536 : chunkSize"), then 32x ->
# 262144, 16x -> 131072, 4x -> 65536, 1x -> 32768 (the first two never bind below 128 KiB).
NVLS_TREE_SHRINK = ((32, 262144), (16, 131072), (4, 65536), (1, 32768))
NVLS_TREE_MAX_CHUNK_4_NODES = 65536
# src/device/all_reduce.h, RunWorkColl<AllReduce, NVLS, Simple>, one node: a chunk passes three
# warp groups in turn, each waiting on the previous one's step flag: scatter (the rank's data
# into the heads' buffers), reduce (multimem load-reduce, multicast store) and gather.
NVLS_STAGES = 3
# RunWorkColl<AllReduce, NVLS_TREE, Simple>: the same scatter and gather, the reduce warps
# taking the tree children's partial sums too ("Reduce, send to network" below the root, the
# root's "Reduce and Broadcast") and the broadcast warps ("Recv from network, broadcast"). A
# chunk of a leaf at tree depth d passes scatter and reduce, then per level up a network hop
# and the parent's reduce, per level down a network hop and the child's broadcast, then
# gather: 3 + 2d GPU stages and 2d network hops, d the depth of the deepest leaf of trees.cc's
# double binary tree, ceil(log2(nNodes)) (``collectives._tree_depth``: 2 for the 3-node chain);
# tuning.cc's NVLS_TREE latency counts log2i(nNodes) levels ("2 * log2i(nNodes) * interLat").
NVLS_TREE_GPU_STAGES_PER_LEVEL = 2
NVLS_TREE_NET_STAGES_PER_LEVEL = 2
# src/include/device.h "#define NCCL_MAX_NVLS_ARITY 32" (the size of struct ncclNvls's up[],
# one entry per head); src/graph/search.cc ncclTopoCompute: "NVLS and COLLNET_DIRECT search must
# have ngpus heads at most", graph->maxChannels = min(NCCL_MAX_NVLS_ARITY, GPUs): at most 32 heads.
NVLS_MAX_ARITY = 32

def nvls_chunk(per_channel: Any, heads: Any) -> Any:
    """NCCL's NVLS chunk, bytes, for ``per_channel`` bytes on one channel and ``heads`` NVLS heads
    (enqueue.cc: a one-node NVLS all-reduce is spread over the channels in equal parts and each
    part's chunk is sized with nChannels = 1, so concurrentOps = nHeads).
    """
    chunk: Any = NVLS_CHUNK_BYTES
    for times, smaller in NVLS_SHRINK:
        chunk = ops.where(ops.logical_and(per_channel < times * heads * chunk, chunk > smaller), smaller, chunk)
    return chunk


def nvls_tree_chunk(per_channel: Any, heads: Any, nodes: Any) -> Any:
    """NCCL's NVLS_TREE chunk, bytes, for ``per_channel`` bytes on one channel, ``heads`` NVLS heads
    and ``nodes`` NCCL nodes (enqueue.cc, as :func:`nvls_chunk`).
    """
    chunk: Any = ops.where(nodes >= 4, NVLS_TREE_MAX_CHUNK_4_NODES, NVLS_CHUNK_BYTES)
    for times, smaller in NVLS_TREE_SHRINK:
        chunk = ops.where(ops.logical_and(per_channel < times * heads * chunk, chunk > smaller), smaller, chunk)
    return chunk


# ------------------------------------------------------------------ p2p (send/recv, all-to-all)
# How NCCL 2.28.3 runs point-to-point operations (an all-to-all is a group of n sends and n
# receives), all from the same mirror; ``twin.core.p2p`` uses them. NCCL's tuning model has no
# p2p entry (p2p operations never go through ncclTopoGetAlgoTime), so these are its scheduling
# rules, not a cost model.
#
# Per-link NVLink bandwidth NCCL assumes, GB/s (src/graph/topo.h, SM70_NVLINK_BW 20.0,
# SM80_NVLINK_BW 20.0, SM90_NVLINK_BW 20.6, SM100_NVLINK_BW 40.1; ncclTopoNVLinkBw picks by
# compute capability). A GPU's NVLink path to an NVSwitch peer is links x this.
NVLINK_BW_PER_LINK_GBPS = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
# Compute capability x 10 per generation (NVIDIA CUDA C++ Programming Guide, compute capabilities:
# Volta 7.0, Ampere 8.0, Hopper 9.0, Blackwell 10.0), as search.cc's ccMin tests read it.
COMPUTE_CAPABILITY = {"volta": 70, "ampere": 80, "hopper": 90, "blackwell": 100}
# search.cc, the intra-node ring search's per-channel bandwidths, tried from the first down:
# speedArrayIntra (before sm90), sm90SpeedArrayIntra, sm100SpeedArrayIntra.
RING_SEARCH_SPEEDS_GBPS = {
    "volta": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "ampere": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
# src/include/device.h "#define MAXCHANNELS 64"; init.cc "ringGraph->maxChannels = MAXCHANNELS/2"
# (the search's channels, which connect.cc ncclTopoPostset then doubles: "nChannels =
# comm->nChannels = std::min(MAXCHANNELS,nChannels*2)").
MAX_CHANNELS = 64
RING_SEARCH_MAX_CHANNELS = MAX_CHANNELS // 2
# search.cc ncclTopoCompute, pass 1: a lower speed is tried only while it is more than .49 of the
# best found ("speedArray[speedIndex+1]/graph->bwInter > .49"); ncclTopoDupChannels doubles the
# found channels unless "graph->bwIntra < 25.0" or "ccMin > 80 && graph->bwIntra < 50.0 &&
# graph->nChannels > 4".
RING_SEARCH_NEXT_SPEED = 0.49
DUP_MIN_BW_GBPS, DUP_HOPPER_BW_GBPS, DUP_HOPPER_MAX_CHANNELS = 25.0, 50.0, 4
# paths.cc ncclTopoGetNchannels: a peer behind NVLink gets "2*std::max(1, (int)(path->bw /
# nvlBw))" channels, two per link's worth of bandwidth; a peer across the network starts "from 2
# channels per NIC" (NCCL_NCHANNELS_PER_NET_PEER unset), halved "while (nChannelsMax*comm->nRanks >
# comm->p2pnChannels*4 && nChannelsMax > 1)" ("Avoid overloading channels with 8+ operations"),
# then at least the NICs its bandwidth needs (getLocalNetCountByBw; the twin takes one).
P2P_CHANNELS_PER_NVLINK = 2
P2P_CHANNELS_PER_NET_PEER = 2
P2P_NET_OVERLOAD = 4
# enqueue.cc addP2pToPlan: a send or receive takes the LL protocol when its bytes are at most
# nChannelsMax x NCCL_P2P_LL_THRESHOLD ("NCCL_PARAM(P2pLLThreshold, "P2P_LL_THRESHOLD", 16384)";
# nChannelsMax = p2pnChannelsPerPeer); LL moves 8 data bytes in each 16-byte line (device.h, union
# ncclLLFifoLine: data1, flag1, data2, flag2), so its chunk carries half its size in data.
P2P_LL_THRESHOLD = 16384
LL_DATA_FRACTION = 0.5
# init.cc computeBuffSizes: the Simple p2p chunk: "if (comm->nNodes > 1) comm->p2pChunkSize = ratio *
# ncclParamP2pNetChunkSize()" (NCCL_P2P_NET_CHUNKSIZE 1 << 17; ratio 2 on ARM hosts with compute
# capability 10.0, which the twin cannot tell, so 1), "else if (comm->isAllNvlink)" NCCL_P2P_NVL_CHUNKSIZE
# (1 << 19). The LL step is the LL buffer over NCCL_STEPS: DEFAULT_LL_BUFFSIZE = NCCL_LL_LINES_PER_THREAD
# (8) x NCCL_LL_MAX_NTHREADS (512) x NCCL_STEPS (8) x 16 bytes, / 8 = 64 KiB (device.h).
P2P_NET_CHUNK = 1 << 17
P2P_NVL_CHUNK = 1 << 19
P2P_LL_STEP = 8 * 512 * 16
# enqueue.cc addP2pToPlan, channels per send/recv: "minPartSize = comm->nNodes > 1 ? stepSize/2 :
# stepSize/8", "maxPartSize = comm->nNodes > 1 ? stepSize : stepSize*32", start from min(nChannelsMin,
# divUp(bytes, minPartSize)) and double "while (partSize > maxPartSize && nChannels <= nChannelsMax/2)";
# a network connection's chunk is "/= 4" below one step (Simple) and "/= 2" below 8 steps.
P2P_MIN_PART = {False: 8, True: 2}   # step / this, by "across NCCL nodes"
P2P_MAX_PART = {False: 32.0, True: 1.0}  # step x this
P2P_NET_SMALL_DIV, P2P_NET_MID_DIV, P2P_NET_MID_STEPS = 4, 2, 8


def _pow2_up(x: int) -> int:
    """The smallest power of two >= ``x`` (NCCL's pow2Up)."""
    p = 1
    while p < x:
        p *= 2
    return p


def ring_channels(generation: str, links: int) -> int:
    """NCCL's collective channels on one NVSwitch domain whose GPUs have ``links`` NVLinks each
    (``comm->nChannels``): the intra-node ring search (search.cc ncclTopoCompute) at the speed
    that gives the most bandwidth (channels x speed, each channel taking its speed of the GPU's
    links x nvlBw; the first such speed wins ties), over speeds down to .49 of the best found;
    ncclTopoDupChannels' doubling; ncclTopoPostset's doubling. On NVLink 4 (18 links, Hopper) this
    gives 6 x 60 -> 12 -> 24, on 12 Ampere links 6 x 40 -> 12 -> 24, on 8 (H800) 4 x 40 -> 8 -> 16,
    on 18 Blackwell links 8 x 90 -> 16 -> 32, as NCCL logs them (24 coll channels on 8x A100 and
    8x H100; 16 on 8x H800, NVIDIA/nccl#892).
    """
    total = links * NVLINK_BW_PER_LINK_GBPS[generation]
    best_n, best_s = 0, 0.0
    for speed in RING_SEARCH_SPEEDS_GBPS[generation]:
        if best_n and speed / best_s <= RING_SEARCH_NEXT_SPEED:
            break
        n = min(int(total // speed), RING_SEARCH_MAX_CHANNELS)
        if n and n * speed > best_n * best_s:
            best_n, best_s = n, speed
        if best_n * best_s >= total:  # "graph->nChannels*graph->bwInter >= system->totalBw"
            break
    if not best_n:
        return 1
    cc = COMPUTE_CAPABILITY[generation]
    if best_s >= DUP_MIN_BW_GBPS and not (cc > 80 and best_s < DUP_HOPPER_BW_GBPS and best_n > DUP_HOPPER_MAX_CHANNELS):
        best_n = min(2 * best_n, RING_SEARCH_MAX_CHANNELS)
    return min(MAX_CHANNELS, 2 * best_n)


def p2p_channels(generation: str, links: int) -> tuple[int, int]:
    """(p2pnChannels, channels an NVLink peer asks for) on an NVSwitch domain with ``links`` NVLinks
    per GPU (paths.cc ncclTopoComputeP2pChannels: "p2pnChannels = pow2Up(min(nChannels,
    MAXCHANNELS))"; ncclTopoGetNchannels for a peer behind NVLink: 2 per link). ``(0, 0)`` without
    NVLink: the twin then keeps its flat p2p model.
    """
    if links <= 0:
        return 0, 0
    return _pow2_up(min(ring_channels(generation, links), MAX_CHANNELS)), P2P_CHANNELS_PER_NVLINK * links
