"""PCIe as the scale-up fabric: the GPUs of one node talking over PCI Express.

Servers of PCIe cards (H100 PCIe, A100 PCIe, L40S-class boards) have no NVLink switch:
GPU-to-GPU traffic inside the node is PCIe peer-to-peer. The domain is the node's GPUs.

Bandwidth per GPU per direction (tier 0) = raw link x protocol efficiency x path factor:

- Raw x16 per direction (PCI-SIG base specifications): Gen3 8 GT/s, Gen4 16, Gen5 32
  with 128b/130b encoding: 15.75 / 31.5 / 63.0 GB/s; Gen6 64 GT/s PAM4 in FLIT mode:
  128 GB/s (PCI-SIG's "256 GB/s bidirectional" for x16). Fewer lanes scale linearly.
- Protocol efficiency (the share left for payload). Gen3-Gen5: a memory-write TLP of
  the usual 256 B max payload carries 26 B of overhead: 4 B STP framing token (128b/130b
  framing), 2 B sequence number, 16 B 4-DW header (64-bit address), 4 B LCRC, so
  256 / 282 = 0.908 (the TLP accounting of Neugebauer et al., SIGCOMM 2018, "Understanding
  PCIe performance for end host networking", §3). ACK/NAK and flow-control DLLPs take a
  few percent more; the measured bulk-DMA share is ~0.85 (NVIDIA bandwidthTest ~26 of
  31.5 GB/s on Gen4 hosts, the figure plugins/host_memory.py uses; PCIe P2P between two
  Gen4 x16 cards 52 GB/s bidirectional, NVIDIA/nccl#1614), so the DLLP factor is taken as
  0.85 / 0.908 = 0.936. Gen6 FLIT mode: a 256 B flit carries 236 B of TLP bytes (6 B DLP,
  8 B CRC, 6 B FEC; PCIe 6.0 specification, FLIT mode) and the DLLP traffic rides in the
  DLP bytes; with the 16 B header per 256 B TLP: 236/256 x 256/272 = 0.868.
- Path (``params.p2p_path``): ``switch`` - the GPUs sit under one PCIe switch (NCCL's PIX /
  PXB levels, NCCL environment-variable docs, NCCL_P2P_LEVEL): peer writes stay in the
  switch's crossbar and each GPU's own x16 link is the limit (factor 1). ``root_complex`` -
  peer traffic crosses the CPU (PHB / SYS): one pair through an AMD EPYC root complex runs
  near link speed (A40s, 25 GB/s per direction of ~26.9, NVIDIA/nccl-tests#74), but when
  every GPU's ring flow interleaves in the CPU the node gets what the CPU and its memory
  deliver (NVIDIA/nccl#1639, maintainer: "determined by the bandwidth your CPU and memory
  can deliver"): 8 Gen5 GPUs on two Xeon 8480+ 28 GB/s all-reduce bus bandwidth, 4 GPUs
  35 GB/s, i.e. 0.52 and 0.65 of the Gen5 x16 achievable 53.7 GB/s. These are single
  platforms, not a law: set ``scale_up.achievable_fraction`` to a measured figure.

The NIC path (GPUDirect RDMA through the PCIe switch vs a bounce through host memory) is
not a parameter here: the scale-up fabric builds tier 0 only and the core gives it no way
to cap the scale-out tiers (docs/fidelity.md, "PCIe, TCP, torus and dragonfly fabrics").
The TCP fabric models its own host bounce.
"""

from __future__ import annotations

from typing import Any

from twin.api import Cluster, Hierarchy, ScaleUpFabric, SpecError, Tier, hookimpl, read_param

# generation -> GB/s per lane per direction after line encoding (PCI-SIG base specs:
# 8/16/32 GT/s x 128/130 / 8; Gen6 64 GT/s PAM4 FLIT mode, 128 GB/s per x16 direction).
GB_PER_LANE = {3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8, 5: 32 * 128 / 130 / 8, 6: 64 / 8}
# TLP payload share (module docstring): 256 B payload over 256 + 26 B (Gen3-5); FLIT mode.
MAX_PAYLOAD_B = 256
TLP_OVERHEAD_B = 26            # STP 4 + sequence 2 + 4-DW header 16 + LCRC 4
FLIT_TLP_BYTES, FLIT_BYTES = 236, 256
FLIT_TLP_HEADER_B = 16
# Measured bulk-DMA share 0.85 (bandwidthTest, nccl#1614) over the TLP arithmetic 0.908.
DLLP_FACTOR = 0.85 / (MAX_PAYLOAD_B / (MAX_PAYLOAD_B + TLP_OVERHEAD_B))
# Share of the switch path a node's ring keeps through the root complex, by GPUs per node
# (module docstring: nccl-tests#74 one pair; nccl#1639 4 and 8 GPUs). A node between two
# measured counts takes the next larger one (the more contended, conservative).
ROOT_COMPLEX_FRACTION = {2: 25.0 / 26.9, 4: 35.0 / 53.7, 8: 28.0 / 53.7}
# Host link of each GPU generation's PCIe boards (NVIDIA datasheets: V100 PCIe Gen3,
# A100 PCIe Gen4, H100 PCIe / H200 NVL Gen5, Blackwell boards Gen5).
GENERATION_OF_GPU = {"volta": 3, "ampere": 4, "hopper": 5, "blackwell": 5,
                     # AMD MI300X/MI325X/MI355X and Gaudi 3: PCIe Gen5 x16; Gaudi 2: Gen4 x16; TPU v6e:
                     # "PCIe Gen5 interface" (AMD data sheets, Intel Gaudi 3 white paper, Google Cloud TPU v6e)
                     "cdna3": 5, "cdna4": 5, "gaudi2": 4, "gaudi3": 5, "tpu_v6e": 5}
LANES = (1, 2, 4, 8, 16)
PATHS = ("switch", "root_complex")
# P2P latency over PCIe, reported only (the collective model uses NCCL's own per-step
# latencies): p2pBandwidthLatencyTest reports ~2 us GPU-to-GPU with P2P on and 12-17 us
# staged through the host (NVIDIA/cuda-samples#230, NVIDIA/nccl#1127).
P2P_LATENCY_US = 2.0
PARAMS = ("lanes", "p2p_path")


def protocol_efficiency(generation: int) -> float:
    """Share of the encoded link rate left for payload (module docstring)."""
    if generation >= 6:
        return FLIT_TLP_BYTES / FLIT_BYTES * MAX_PAYLOAD_B / (MAX_PAYLOAD_B + FLIT_TLP_HEADER_B)
    return MAX_PAYLOAD_B / (MAX_PAYLOAD_B + TLP_OVERHEAD_B) * DLLP_FACTOR


def root_complex_fraction(gpus: int) -> float:
    """Share of the switch path a ring of ``gpus`` GPUs keeps through the CPU root complex."""
    if gpus <= 1:
        return 1.0
    return next((f for n, f in sorted(ROOT_COMPLEX_FRACTION.items()) if n >= gpus), ROOT_COMPLEX_FRACTION[8])


class PCIeFabric(ScaleUpFabric):
    """PCIe peer-to-peer between the GPUs of one node, through a switch or the CPU."""

    kind = "pcie"
    summary = "PCIe scale-up (Gen3-Gen6, lanes, P2P through a PCIe switch or the CPU root complex)"

    def validate(self, cluster: Cluster, path: str) -> None:
        """Generation, lanes and path known; the domain is one node; no in-switch reduction."""
        up = cluster.scale_up
        base = f"{path}.scale_up"
        unknown = sorted(set(up.params) - set(PARAMS))
        if unknown:
            raise SpecError(f"{base}.params.{unknown[0]}", f"unknown parameter for pcie; expected: {', '.join(PARAMS)}")
        if up.generation is not None and up.generation not in GB_PER_LANE:
            raise SpecError(f"{base}.generation",
                            f"must be one of {sorted(GB_PER_LANE)} for pcie (got {up.generation})")
        if up.nvls:
            raise SpecError(f"{base}.nvls", "PCIe switches do not reduce in the switch (NVLS needs NVSwitch)")
        if up.domain_gpus != cluster.gpus_per_node:
            raise SpecError(f"{base}.domain_gpus", f"a PCIe domain is the GPUs of one node: must equal gpus_per_node "
                                                   f"({cluster.gpus_per_node}) (got {up.domain_gpus})")
        if up.generation is None and not up.link_GBps and cluster.gpu.generation not in GENERATION_OF_GPU:
            raise SpecError(f"{base}.generation", f"is required for pcie with a {cluster.gpu.generation} accelerator "
                                                  f"(its host link generation is not published)")
        read_param(up.params, f"{base}.params.lanes", 16, integer=True, choices=LANES)
        read_param(up.params, f"{base}.params.p2p_path", "switch", choices=PATHS)

    def generation(self, cluster: Cluster) -> int:
        """PCIe generation: stated, else that of the GPU generation's PCIe boards."""
        return cluster.scale_up.generation or GENERATION_OF_GPU[cluster.gpu.generation]

    def link_GBps(self, cluster: Cluster) -> float:
        """Raw per-direction bandwidth of one GPU's link: stated, else generation x lanes."""
        up = cluster.scale_up
        if up.link_GBps:
            return up.link_GBps
        lanes = int(up.params.get("lanes", 16))
        return GB_PER_LANE[self.generation(cluster)] * lanes

    def fractions(self, cluster: Cluster) -> dict[str, float]:
        """The factors between the raw link and tier 0's bandwidth."""
        up = cluster.scale_up
        gpus = max(1, min(up.domain_gpus, cluster.num_gpus))
        path = up.params.get("p2p_path", "switch")
        return {"protocol": up.achievable_fraction or protocol_efficiency(self.generation(cluster)),
                "path": root_complex_fraction(gpus) if path == "root_complex" else 1.0}

    def tier(self, cluster: Cluster) -> Tier:
        """Tier 0: the node's GPUs at their link's achievable P2P bandwidth."""
        up = cluster.scale_up
        f = self.fractions(cluster)
        return Tier(name="pcie", fabric=self.kind, span_gpus=max(1, min(up.domain_gpus, cluster.num_gpus)),
                    bw_Bps=self.link_GBps(cluster) * 1e9 * f["protocol"] * f["path"],
                    latency_s=(up.latency_us if up.latency_us is not None else P2P_LATENCY_US) * 1e-6)

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """Generation, lanes, path and the factors applied."""
        up = cluster.scale_up
        return {"kind": self.kind, "generation": self.generation(cluster), "lanes": int(up.params.get("lanes", 16)),
                "p2p_path": up.params.get("p2p_path", "switch"), "link_GBps_per_direction": self.link_GBps(cluster),
                **{f"{k}_efficiency": v for k, v in self.fractions(cluster).items()},
                "domain_gpus": hierarchy.tiers[0].span_gpus}


@hookimpl
def twin_fabrics() -> list[ScaleUpFabric]:
    """Register the PCIe scale-up fabric."""
    return [PCIeFabric()]
