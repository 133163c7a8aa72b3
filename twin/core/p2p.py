"""How NCCL schedules a point-to-point operation: channels per peer, protocol, chunks.

An all-to-all in NCCL is a group of sends and receives, one pair per peer (nccl-tests
alltoall_perf; NCCL's device code runs them as p2p work), and NCCL 2.28.3 splits each send
or receive over channels and chunks by rules in ``src/enqueue.cc`` (addP2pToPlan,
scheduleP2pTasksToPlan) and ``src/graph/paths.cc`` (ncclTopoGetNchannels,
ncclTopoComputeP2pChannels); ``twin.core.nccl_tuning`` holds their constants with the lines
they come from. This module applies those rules; ``collectives`` turns them into time:

- a communicator has ``p2pnChannels`` channels; each peer asks for some (two per NVLink of
  its path, two per NIC across the network, fewer when many ranks share the channels), and
  the smallest ask, a power of two, is every peer's maximum (``p2pnChannelsPerPeer``);
- a send or receive starts on ``nChannelsMin`` channels (the maximum, halved until every
  rank can have its own) and doubles them while a channel's part exceeds the largest part;
- it runs LL (8 data bytes per 16-byte line) when its bytes are at most the per-peer
  channels x 16 KiB, else Simple, in chunks of the p2p chunk size (LL: its step).

Written once for one scenario and for a batch (``twin.core.ops``): every argument may hold
one value per point.
"""

from __future__ import annotations

from typing import Any

from twin.core import nccl_tuning as nccl
from twin.core import ops

# MAXCHANNELS = 2**6: a send's channels double at most six times.
_MAX_DOUBLINGS = 6


def _pow2_up(x: Any) -> Any:
    """The smallest power of two >= ``x`` (x >= 1; NCCL's pow2Up), per point."""
    return ops.power(2.0, ops.ceil(ops.log2(ops.maximum(x, 1))))


def _pow2_down(x: Any) -> Any:
    """The largest power of two <= ``x`` (x >= 1), per point."""
    return ops.power(2.0, ops.trunc(ops.log2(ops.maximum(x, 1))))


def peer_channels(n: Any, multi: Any, nvlink_peers: Any, channels: Any, nvlink_ask: Any) -> tuple[Any, Any]:
    """(p2pnChannelsPerPeer, nChannelsMin) for a communicator of ``n`` ranks with ``channels``
    p2p channels, where a peer behind NVLink asks for ``nvlink_ask`` (present when
    ``nvlink_peers``) and one across the network (present when ``multi``: the group spans NCCL
    nodes) for 2, halved while 2 x n > 4 x channels (paths.cc ncclTopoGetNchannels). The per-peer
    figure is the smallest ask as a power of two (ncclTopoComputeP2pChannels: "p2pnChannelsPerPeer
    = pow2Up(minChannels)"); nChannelsMin halves it "while (nChannelsMin*nRanks > comm->p2pnChannels
    && nChannelsMin > 1)" (enqueue.cc scheduleP2pTasksToPlan: "one channel per operation").
    """
    net = ops.where(nccl.P2P_CHANNELS_PER_NET_PEER * n > nccl.P2P_NET_OVERLOAD * channels,
                    nccl.P2P_CHANNELS_PER_NET_PEER // 2, nccl.P2P_CHANNELS_PER_NET_PEER)
    ask = ops.where(nvlink_peers, ops.minimum(channels, nvlink_ask), channels)
    ask = ops.where(multi, ops.minimum(ask, net), ask)
    per_peer = _pow2_up(ask)
    fit = _pow2_down(channels / ops.maximum(n, 1))  # the largest power of two with fit x n <= channels
    return per_peer, ops.minimum(per_peer, ops.maximum(fit, 1))


def uses_ll(bytes_per_peer: Any, per_peer: Any, ll_ok: Any = True) -> Any:
    """Whether a send of ``bytes_per_peer`` runs LL: at most nChannelsMax x NCCL_P2P_LL_THRESHOLD
    (enqueue.cc addP2pToPlan, nChannelsMax = p2pnChannelsPerPeer), where the transport carries LL.
    """
    return ops.logical_and(ll_ok, bytes_per_peer <= per_peer * nccl.P2P_LL_THRESHOLD)


def step_bytes(ll: Any, multi: Any) -> Any:
    """A send's step: the LL buffer's (64 KiB) or the Simple p2p chunk (init.cc computeBuffSizes:
    NCCL_P2P_NET_CHUNKSIZE across NCCL nodes, NCCL_P2P_NVL_CHUNKSIZE on one all-NVLink node).
    """
    return ops.where(ll, nccl.P2P_LL_STEP, ops.where(multi, nccl.P2P_NET_CHUNK, nccl.P2P_NVL_CHUNK))


def send_channels(bytes_per_peer: Any, step: Any, multi: Any, per_peer: Any, first: Any) -> Any:
    """Channels one send of ``bytes_per_peer`` runs on (enqueue.cc addP2pToPlan): min(nChannelsMin,
    divUp(bytes, minPartSize)), doubled while a part exceeds maxPartSize and the channels are at
    most half the per-peer maximum (part sizes: ``nccl_tuning.P2P_MIN_PART`` / ``P2P_MAX_PART``).
    """
    min_part = step / ops.where(multi, nccl.P2P_MIN_PART[True], nccl.P2P_MIN_PART[False])
    max_part = step * ops.where(multi, nccl.P2P_MAX_PART[True], nccl.P2P_MAX_PART[False])
    c = ops.minimum(first, ops.maximum(ops.ceil(bytes_per_peer / min_part), 1))
    if not ops.is_batch(c, bytes_per_peer, max_part, per_peer):
        while bytes_per_peer > c * max_part and c <= per_peer / 2:
            c *= 2
        return c
    for _ in range(_MAX_DOUBLINGS):
        c = ops.where(ops.logical_and(bytes_per_peer > c * max_part, c <= per_peer / 2), c * 2, c)
    return c


def chunk_data(step: Any, ll: Any, bytes_per_peer: Any, network: Any) -> Any:
    """Data bytes per chunk of a send: the step, halved for LL (8 data bytes per 16-byte line);
    on a network connection the chunk is divided by 4 below one step (Simple) and by 2 below 8
    steps (enqueue.cc addP2pToPlan, "Adjust chunk size for network").
    """
    small = ops.logical_and(ops.logical_not(ll), bytes_per_peer < step)
    net_div = ops.where(small, nccl.P2P_NET_SMALL_DIV,
                        ops.where(bytes_per_peer < nccl.P2P_NET_MID_STEPS * step, nccl.P2P_NET_MID_DIV, 1))
    chunk = step / ops.where(network, net_div, 1)
    return chunk * ops.where(ll, nccl.LL_DATA_FRACTION, 1.0)


def fill_s(part: Any, chunk: Any, copy_bw: Any, network: Any) -> Any:
    """The pipeline fill of one channel's part, s: a part moves as chunks through the sender's
    copy into a FIFO slot, the transfer and the receiver's copy out of it (NCCL_STEPS = 8 slots,
    device.h, keep the stages busy at once), so it takes the slowest stage's time plus one chunk
    in each other stage: over NVLink the sender's copy is the transfer and the receiver's copy
    adds one chunk; across the network (the NIC the slowest) both copies do. Each copy runs at
    ``copy_bw``, its channel's rate.
    """
    return ops.where(network, 2.0, 1.0) * ops.minimum(part, chunk) / copy_bw
