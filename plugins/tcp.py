"""Plain Ethernet with TCP: NCCL's socket transport over the kernel stack, no RDMA.

Same fat-tree topology as the RDMA fabrics (``scale_out_tiers``), different endpoints:
NCCL's socket transport (``NET/Socket``) moves host memory only (``ncclSocketPtrSupport``
returns ``NCCL_PTR_HOST``, NVIDIA/nccl src/transport/net_socket.cc), so every byte is
staged GPU -> pinned host buffer -> kernel socket -> NIC and back (a host bounce, no
GPUDirect RDMA), and each TCP socket is one CPU thread copying through the kernel.

Bandwidth of one NIC = min(line rate x wire efficiency, sockets x per-socket rate,
the node's host-copy throughput / NICs per node):

- wire efficiency (``params.mtu``): a TCP segment of an MTU-sized IP packet carries
  MTU - 52 payload bytes (IPv4 20 + TCP 20 + timestamps option 12, RFC 791 / 9293 / 7323,
  timestamps on by default in Linux) in MTU + 38 bytes of wire time (preamble+SFD 8,
  MAC header 14, FCS 4, inter-frame gap 12; IEEE 802.3): 1500 -> 0.941, 9000 -> 0.990.
  ``scale_out.achievable_fraction`` replaces it when stated;
- sockets per NIC = NCCL channels per NIC x NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD
  (``params.socket_threads``, ``params.sockets_per_thread``; defaults 1 and 1 outside AWS,
  at most 16 threads and 64 sockets: net_socket.cc MAX_THREADS, MAX_SOCKETS and its
  auto-detection; product <= 64: NCCL environment-variable docs). NCCL keeps 2 channels
  per NIC "to ensure proper overlap and no bubbles" (NVIDIA/nccl#438, maintainer);
- per-socket rate (``params.socket_gbps``): NCCL splits each message evenly over its
  sockets, so a NIC runs at "the minimum speed of the sockets multiplied by the number of
  sockets" (NVIDIA/nccl-tests#83, maintainer). Default 16.5 Gb/s: one socket per ring,
  NCCL 2.3.7 over a 32 Gb/s network, 2.06 GB/s; 8 rings reached 3.75 GB/s, 94% of the
  line, the MTU-1500 wire efficiency (NVIDIA/nccl#209). For scale: on 100 Gb/s TCP the
  defaults give 33 Gb/s, and NVIDIA/nccl#450 measured 4-6 GB/s bus bandwidth (32-48%);
  the kernel stack's single-core ceiling is ~42 Gb/s with TSO/GRO and jumbo frames
  (Cai et al., SIGCOMM 2021, "Understanding Host Network Stack Overheads");
- host-copy throughput per node (``params.host_copy_gbps``, per direction): more sockets
  stop helping once the node's CPUs and caches are busy copying (Cai et al. 2021: flows
  contend for the cache the NIC DMAs into). NVIDIA/nccl#450 (8 V100s per node, 100 GbE)
  reached at best 4-6 GB/s bus bandwidth, and more threads or sockets made it worse:
  default 48 Gb/s, its 6 GB/s. One host generation's figure: set it for yours;
- ``params.gpudirect_tcpx``: device-memory TCP (Google GPUDirect-TCPX, Linux devmem TCP)
  puts payloads straight into GPU memory: no host bounce, no per-socket copy limit; its
  authors report ~96.6% of line rate (Almasry et al., "Device Memory TCP" RFC cover
  letter, netdev 2023), which caps the wire efficiency.

Beyond the leaf each TCP connection is one ECMP flow (5-tuple hashing): a collective runs
at the pace of its most loaded uplink (balls into bins, ``ecmp_max_load``), so more
sockets also spread better. Per-message latency: an 8-byte NCCL broadcast over TCP takes
38-46 us between two nodes (NVIDIA/nccl-tests#82), several times RDMA's; it is added to
the tiers' latency, which each network step of a collective pays where it exceeds NCCL's
own per-step network latency (docs/fidelity.md, "PCIe, TCP, torus and dragonfly
fabrics").
"""

from __future__ import annotations

import dataclasses
from typing import Any

from twin.api import (
    Cluster,
    ComponentGroup,
    FailureMode,
    Hierarchy,
    ScaleOutFabric,
    Scenario,
    SpecError,
    Tier,
    check_scale_out_params,
    ecmp_max_load,
    fat_tree_components,
    fat_tree_failure_modes,
    fat_tree_report,
    gbps_to_bytes_per_s,
    hookimpl,
    read_param,
    reject_scale_out_fields,
    scale_out_tiers,
)

PARAMS = {"mtu", "socket_threads", "sockets_per_thread", "socket_gbps", "host_copy_gbps", "gpudirect_tcpx"}
# Bytes inside / outside the MTU per segment (module docstring: RFC 791/9293/7323, IEEE 802.3).
TCP_IP_HEADER_B = 20 + 20 + 12
ETHERNET_WIRE_B = 8 + 14 + 4 + 12
MTU_MIN, MTU_MAX = 576, 9216      # RFC 791 minimum datagram every host accepts; common jumbo limit
DEFAULT_MTU = 1500                # IEEE 802.3 Ethernet
CHANNELS_PER_NIC = 2              # NVIDIA/nccl#438 (maintainer)
MAX_THREADS, MAX_SOCKETS = 16, 64  # NVIDIA/nccl src/transport/net_socket.cc
DEFAULT_SOCKET_GBPS = 16.5        # NVIDIA/nccl#209: 2.06 GB/s per socket
DEFAULT_HOST_COPY_GBPS = 48.0     # NVIDIA/nccl#450: best 6 GB/s per 100 GbE node
TCPX_LINE_FRACTION = 0.966        # devmem TCP RFC cover letter (Almasry et al. 2023)
# Ethernet switch hop ~0.8 us (Broadcom Tomahawk-class cut-through, as plugins/roce.py)
# plus NIC; the socket stack's per-message latency on top (nccl-tests#82: 38-46 us for 8 B).
HOP_LATENCY_S = 0.9e-6
STACK_LATENCY_S = 40e-6
NOT_MODELLED = {"sharp": "SHARP reduces over RDMA (NCCL CollNet); the socket transport has none"}


def _param(cluster: Cluster, key: str, default: Any, **rule: Any) -> Any:
    so = cluster.scale_out
    assert so is not None
    return read_param(so.params, f"cluster.scale_out.params.{key}", default, **rule)


def sockets_per_nic(cluster: Cluster) -> int:
    """TCP connections one NIC carries: channels x NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD."""
    threads = _param(cluster, "socket_threads", 1, integer=True, minimum=1, maximum=MAX_THREADS)
    per_thread = _param(cluster, "sockets_per_thread", 1, integer=True, minimum=1, maximum=MAX_SOCKETS)
    return CHANNELS_PER_NIC * threads * per_thread


def efficiencies(cluster: Cluster, radix: int) -> dict[str, float]:
    """The factors between the NIC line rate and the tiers' bandwidth (module docstring)."""
    so = cluster.scale_out
    assert so is not None
    mtu = _param(cluster, "mtu", DEFAULT_MTU, integer=True, minimum=MTU_MIN, maximum=MTU_MAX)
    tcpx = bool(_param(cluster, "gpudirect_tcpx", False, choices=(True, False)))
    wire = so.achievable_fraction or (mtu - TCP_IP_HEADER_B) / (mtu + ETHERNET_WIRE_B)
    if tcpx:
        wire = min(wire, TCPX_LINE_FRACTION)
    line = gbps_to_bytes_per_s(so.nic_gbps)
    sockets = sockets_per_nic(cluster)
    socket_cap = gbps_to_bytes_per_s(_param(cluster, "socket_gbps", DEFAULT_SOCKET_GBPS, minimum=0.001)) * sockets
    host_cap = gbps_to_bytes_per_s(_param(cluster, "host_copy_gbps", DEFAULT_HOST_COPY_GBPS, minimum=0.001))
    host_cap /= cluster.nics_per_node
    nic = wire if tcpx else min(line * wire, socket_cap, host_cap) / line
    over = so.oversubscription[0] if so.oversubscription else 1.0
    uplinks = max(1, int(radix / (1 + over)))
    flows = sockets * uplinks * over
    ecmp = (flows / uplinks) / ecmp_max_load(flows, uplinks) if uplinks > 1 else 1.0
    return {"wire": wire, "nic": nic, "ecmp": ecmp, "sockets_per_nic": float(sockets)}


class TCPFabric(ScaleOutFabric):
    """Ethernet fat tree carrying NCCL's socket transport (kernel TCP, host bounce)."""

    kind = "tcp"
    summary = "Plain Ethernet + TCP: NCCL socket transport (host bounce, per-socket copy limit, MTU, ECMP)"

    def validate(self, cluster: Cluster, path: str) -> None:
        """Known parameters within NCCL's limits; no SHARP; no per-packet adaptive routing."""
        check_scale_out_params(cluster, path, PARAMS, self.kind)
        reject_scale_out_fields(cluster, path, self.kind, NOT_MODELLED)
        so = cluster.scale_out
        assert so is not None
        if so.adaptive_routing:
            raise SpecError(f"{path}.scale_out.adaptive_routing",
                            "does not apply to tcp: TCP flows are ECMP-hashed; per-packet adaptive routing "
                            "reorders TCP segments")
        if sockets_per_nic(cluster) // CHANNELS_PER_NIC > MAX_SOCKETS:
            raise SpecError(f"{path}.scale_out.params.sockets_per_thread",
                            f"socket_threads x sockets_per_thread must be <= {MAX_SOCKETS} (NCCL's limit)")
        efficiencies(cluster, so.switch_radix)

    def tiers(self, cluster: Cluster, radix: int | None) -> list[Tier]:
        """Fat-tree tiers at the socket-limited NIC rate, ECMP losses beyond the leaf."""
        so = cluster.scale_out
        assert so is not None
        r = radix or so.switch_radix
        f = efficiencies(cluster, r)
        tiers, _ = scale_out_tiers(cluster, r, self.kind, (f["nic"], f["nic"] * f["ecmp"]), HOP_LATENCY_S)
        return [dataclasses.replace(t, latency_s=t.latency_s + STACK_LATENCY_S) for t in tiers]

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """Switches and links of the fat tree, and the TCP factors."""
        so = cluster.scale_out
        assert so is not None
        out = fat_tree_report(cluster, so.switch_radix, self.kind)
        f = efficiencies(cluster, so.switch_radix)
        out.update({f"{k}_efficiency": v for k, v in f.items() if k != "sockets_per_nic"},
                   sockets_per_nic=int(f["sockets_per_nic"]), host_bounce=not so.params.get("gpudirect_tcpx", False))
        return out


@hookimpl
def twin_fabrics() -> list[ScaleOutFabric]:
    """Register the TCP fabric."""
    return [TCPFabric()]


# ------------------------------------------------------------------ failure scenarios
def _flows_per_uplink(cluster: Cluster, radix: int) -> float:
    """TCP flows hashed onto one leaf uplink (every socket is an ECMP flow)."""
    so = cluster.scale_out
    assert so is not None
    over = so.oversubscription[0] if so.oversubscription else 1.0
    return sockets_per_nic(cluster) * over


@hookimpl
def twin_components(scenario: Scenario, hierarchy: Hierarchy, switch_radix: int | None) -> list[ComponentGroup] | None:
    """NICs, switches and cables of the Ethernet fat tree (sized like its tiers)."""
    so = scenario.cluster.scale_out
    if so is None or so.fabric != TCPFabric.kind:
        return None
    radix = switch_radix or so.switch_radix
    per_uplink = _flows_per_uplink(scenario.cluster, radix)
    return [dataclasses.replace(g, attrs={**g.attrs, "adaptive_routing": False, "hashed_flows_per_uplink": per_uplink})
            if g.kind == "link" else g for g in fat_tree_components(scenario, hierarchy, radix, so.fabric)]


@hookimpl
def twin_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy,
                       switch_radix: int | None) -> list[FailureMode] | None:
    """Fat-tree failures; a lost uplink's TCP flows re-hash onto the others and collide.

    TCP retransmits across the re-route (its retransmission timeout, RFC 6298), so switch
    and cable failures above the NIC do not crash the job, as on the RDMA fabrics.
    """
    so = scenario.cluster.scale_out
    if so is None or component.fabric != TCPFabric.kind or so.fabric != TCPFabric.kind:
        return None
    radix = switch_radix or so.switch_radix
    return fat_tree_failure_modes(component, scenario, hierarchy, radix, _flows_per_uplink(scenario.cluster, radix))
