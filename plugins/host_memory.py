"""Host memory as an offload target: the CPU's DRAM behind the GPU's host link.

``plan.offload.*: host`` sends optimizer state, parameters or activations to host memory.
What that costs is the GPU's link to its CPU and the memory behind it:

- x86 hosts (DGX/HGX): the GPU's PCIe x16 link, per direction Gen3 15.75, Gen4 31.5,
  Gen5 63 GB/s (PCI-SIG base specifications: 8/16/32 GT/s x 16 lanes, 128b/130b); bulk DMA
  sustains ~85% of it (TLP headers and flow-control credits; NVIDIA's bandwidthTest on
  Gen4 A100 systems reports ~26 of 31.5 GB/s). The node's DRAM is shared by its GPUs: DGX-1
  512 GiB, DGX A100 1 TiB, DGX H100 and DGX B200 2 TiB (NVIDIA DGX datasheets).
- Grace superchips (GH200, GB200, GB300): NVLink-C2C, 900 GB/s total (450 per direction)
  between one Grace and its GPUs (one on GH200, two on GB200/GB300), in front of up to
  480 GB of LPDDR5X at up to 512 GB/s (NVIDIA Grace Hopper / GB200 NVL72 datasheets); a GPU
  gets the smaller of its share of the C2C direction and its share of the LPDDR5X.

Host DRAM is a tier of its own: ``offload: host`` keeps state here even when the cluster has a
CXL pool (``plugins/cxl.py``), whose traffic crosses the same host link.
"""

from __future__ import annotations

from typing import Any

from twin.api import GIB, Cluster, Hierarchy, MemoryFabric, SpecError, hookimpl

# PCIe x16 bandwidth per direction, GB/s (PCI-SIG), by the GPU generation's host link
# (V100 SXM2: Gen3; A100: Gen4; H100, H200, B200, B300 on x86 HGX: Gen5; AMD MI300X/MI325X and
# MI355X: PCIe Gen5 x16 (AMD data sheets); TPU v6e: "connects to the host through a PCIe Gen5
# interface" (Google Cloud TPU v6e); Gaudi 2: PCIe Gen4 x16, Gaudi 3: PCIe Gen5 x16 (Intel Gaudi 3
# white paper). Not published for TPU v5p and Trainium: no host-memory offload target there.
PCIE_X16_GBPS = {"volta": 15.75, "ampere": 31.5, "hopper": 63.0, "blackwell": 63.0, "cdna3": 63.0, "cdna4": 63.0,
                 "tpu_v6e": 63.0, "gaudi2": 31.5, "gaudi3": 63.0}
# Sustained share of a PCIe link for bulk DMA (see the module docstring).
PCIE_DMA_EFFICIENCY = 0.85
# Host DRAM per node by generation (DGX-1 V100, DGX A100, DGX H100, DGX B200 datasheets; Azure ND
# MI300X v5: 1,850 GiB per 8-GPU VM; TPU v6e: 1,536 GiB per 8-chip host (Google Cloud TPU v6e);
# HLS-Gaudi2 / HLS-Gaudi3: 1 TB (Intel Gaudi model-performance system configurations)).
HOST_DRAM_GIB_PER_NODE = {"volta": 512.0, "ampere": 1024.0, "hopper": 2048.0, "blackwell": 2048.0, "cdna3": 1850.0,
                          "tpu_v6e": 1536.0, "gaudi2": 1000e9 / 2**30, "gaudi3": 1000e9 / 2**30}
# Grace: NVLink-C2C per direction and LPDDR5X per Grace (datasheets above).
C2C_GBPS_PER_DIRECTION = 450.0
GRACE_LPDDR_GBPS = 512.0
GRACE_LPDDR_GB = 480.0
# GPUs per Grace: the name says which superchip a GPU sits on.
GPUS_PER_GRACE = {"GH200": 1, "GB200": 2, "GB300": 2}
# DRAM the host keeps for itself (OS, page cache, data loader workers): an assumption.
HOST_RESERVED_FRACTION = 0.1
# A device's DMA read round trip to host DRAM over PCIe: 0.5-1 us measured on Xeon servers
# (Neugebauer et al., SIGCOMM 2018, "Understanding PCIe performance for end host networking",
# pcie-bench); the upper end, as a GPU's reads cross a PCIe switch on HGX boards. Over NVLink-C2C
# half of it: an assumption (NVIDIA publishes C2C bandwidth, not its latency).
PCIE_ROUND_TRIP_S = 1.0e-6
C2C_ROUND_TRIP_S = 0.5e-6


def _grace(cluster: Cluster) -> int:
    """GPUs per Grace CPU, or 0 for an x86 host."""
    name = cluster.gpu.name.upper()
    return next((n for prefix, n in GPUS_PER_GRACE.items() if name.startswith(prefix)), 0)


class HostMemory(MemoryFabric):
    """The host's DRAM over PCIe (x86) or NVLink-C2C (Grace) as an offload target."""

    kind = "host"
    summary = "Host DRAM as an offload target: PCIe x16 (x86 hosts) or NVLink-C2C (Grace superchips)"

    def validate(self, cluster: Cluster, path: str) -> None:
        if cluster.memory_pool is not None and cluster.memory_pool.fabric == self.kind:
            raise SpecError(f"{path}.memory_pool.fabric",
                            "'host' is not a pool: offload to host memory with plan.offload.<what>: host")

    def bandwidth_per_gpu_Bps(self, cluster: Cluster) -> float:
        per_grace = _grace(cluster)
        if per_grace:
            return min(C2C_GBPS_PER_DIRECTION, GRACE_LPDDR_GBPS / 2) / per_grace * 1e9
        return PCIE_X16_GBPS.get(cluster.gpu.generation, 0.0) * PCIE_DMA_EFFICIENCY * 1e9  # 0: not published

    def latency_s(self, cluster: Cluster) -> float:
        """One DMA round trip to host DRAM: charged once per copy and bounding the rate of reads
        (``twin.api.offload_terms``).
        """
        return C2C_ROUND_TRIP_S if _grace(cluster) else PCIE_ROUND_TRIP_S

    def capacity_per_gpu_bytes(self, cluster: Cluster) -> float:
        per_grace = _grace(cluster)
        if per_grace:
            total = GRACE_LPDDR_GB * 1e9 / per_grace
        else:
            total = HOST_DRAM_GIB_PER_NODE.get(cluster.gpu.generation, 0.0) * GIB / cluster.gpus_per_node
        return total * (1.0 - HOST_RESERVED_FRACTION)

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        return {"kind": self.kind, "link": "nvlink-c2c" if _grace(cluster) else "pcie",
                "bandwidth_GBps_per_gpu": self.bandwidth_per_gpu_Bps(cluster) / 1e9,
                "capacity_gib_per_gpu": self.capacity_per_gpu_bytes(cluster) / GIB}


@hookimpl
def twin_fabrics() -> list[MemoryFabric]:
    """Register host memory."""
    return [HostMemory()]
