"""Intel Gaudi's on-die RoCE scale-up (HLS-Gaudi2 / HLS-Gaudi3 servers) and the Gaudi accelerators.

Every Gaudi has 24 RDMA-over-Converged-Ethernet ports on its die. In the 8-card HLS server 21
of them join the cards pairwise, 3 to each of the 7 peers, and the other 3 leave the server
for the scale-out network (Intel Gaudi 3 AI Accelerator White Paper, 2024: "24 x 200 GbE
RoCE ... 21 ports for all-to-all connectivity within the server, 3 ports per accelerator for
scale-out"; Gaudi 2: 24 x 100 GbE in the same arrangement, Intel Gaudi 2 white paper / Habana
HLS-Gaudi2 documentation). The domain is a fully connected mesh (``twin.api.mesh_tier``):
a group of k cards gets the 3 (k - 1) ports joining it, one send to one peer 3 ports.

- Gaudi 3: 3 x 200 Gb/s = 75 GB/s per peer per direction, 525 GB/s per card;
- Gaudi 2: 3 x 100 Gb/s = 37.5 GB/s per peer per direction, 262.5 GB/s per card.

The ports are Ethernet NIC ports: they run at the twin's NIC-class achieved fraction
(``twin.api.nic_efficiency`` by line rate; no published HCCL bus bandwidth figure at hand, an
assumption), and HCCL is costed with the collective-library fallback's per-step latencies
(``twin.core.accelerator_generations``) unless ``scale_up.latency_us`` states one. The 3
scale-out ports per card are the scale-out network of the system presets (one 'NIC' of 3
ports per card on a RoCE fat tree).
"""

from __future__ import annotations

from typing import Any

from twin.api import (
    NIC_EFFICIENCY,
    Cluster,
    Hierarchy,
    ScaleUpFabric,
    SpecError,
    Tier,
    check_scale_up_params,
    hookimpl,
    mesh_tier,
    reject_scale_up_fields,
)

# generation -> (Gb/s per port, ports per peer, source)
PORTS: dict[str, tuple[float, int, str]] = {
    "gaudi3": (200.0, 3, "Intel Gaudi 3 AI Accelerator White Paper: 24 x 200 GbE RoCE on die, 21 to the 7 peers of "
                         "the HLS-Gaudi3 server (3 each), 3 to the scale-out"),
    "gaudi2": (100.0, 3, "Intel Gaudi 2: 24 x 100 GbE RoCE on die, 21 to the 7 peers of the HLS-Gaudi2 server (3 "
                         "each), 3 to the scale-out"),
}
MAX_DOMAIN = 8
UNMODELLED = {
    "generation": "the port rate follows the Gaudi (cluster.gpu.generation)",
    "nvls": "the RoCE mesh has no switch to reduce in",
}


def _ports(cluster: Cluster, path: str) -> tuple[float, int]:
    """(Gb/s per port, ports per peer): the generation's, or ``scale_up.link_GBps`` (per card per
    direction over its 21 mesh ports) at 3 ports per peer.
    """
    gen, up = cluster.gpu.generation, cluster.scale_up
    if up.link_GBps:
        return up.link_GBps * 8.0 / (3 * (MAX_DOMAIN - 1)), 3
    if gen not in PORTS:
        raise SpecError(f"{path}.scale_up.link_GBps", f"is required for gaudi_roce with a {gen} accelerator (port "
                                                      f"rates are known for {', '.join(sorted(PORTS))})")
    return PORTS[gen][0], PORTS[gen][1]


def _efficiency(gbps: float) -> float:
    """NIC-class achieved fraction of a port's line rate (``NIC_EFFICIENCY``: 200G 0.96, 400G 0.94;
    slower ports the 200G figure, an assumption).
    """
    return NIC_EFFICIENCY[400] if gbps >= 400 else NIC_EFFICIENCY[200]


class GaudiRoCEFabric(ScaleUpFabric):
    """Gaudi's scale-up: 8 cards joined pairwise by 3 on-die RoCE ports each."""

    kind = "gaudi_roce"
    summary = "Intel Gaudi on-die RoCE mesh: 8 cards, 3 ports to each peer (HCCL), 3 ports per card to scale out"

    def validate(self, cluster: Cluster, path: str) -> None:
        """At most 8 cards per domain; no NVLink figures; no parameters."""
        check_scale_up_params(cluster, path, set(), self.kind)
        reject_scale_up_fields(cluster, path, self.kind, UNMODELLED)
        if cluster.scale_up.domain_gpus > MAX_DOMAIN:
            raise SpecError(f"{path}.scale_up.domain_gpus", f"the on-die RoCE mesh joins at most {MAX_DOMAIN} cards "
                                                            f"(got {cluster.scale_up.domain_gpus})")
        if cluster.gpu.nvlink_GBps:
            raise SpecError(f"{path}.gpu.nvlink_GBps", "NVLink bandwidth does not apply to a gaudi_roce domain")
        _ports(cluster, path)

    def tier(self, cluster: Cluster) -> Tier:
        """The mesh: 3 ports to each peer at the NIC-class fraction."""
        up = cluster.scale_up
        gbps, per_peer = _ports(cluster, "cluster")
        frac = up.achievable_fraction or _efficiency(gbps)
        gpus = max(1, min(up.domain_gpus, cluster.num_gpus))
        return mesh_tier("gaudi_roce", self.kind, gpus, per_peer * gbps / 8.0 * 1e9 * frac,
                         (up.latency_us or 0.0) * 1e-6)

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """Ports and the mesh."""
        gbps, per_peer = _ports(cluster, "cluster")
        return {"kind": self.kind, "topology": "fully connected", "domain_gpus": cluster.scale_up.domain_gpus,
                "ports_per_peer": per_peer, "port_gbps": gbps,
                "source": PORTS.get(cluster.gpu.generation, (0.0, 0, "scale_up.link_GBps as stated"))[2]}


@hookimpl
def twin_fabrics() -> list[ScaleUpFabric]:
    """Register the Gaudi RoCE mesh."""
    return [GaudiRoCEFabric()]


# ------------------------------------------------------------------------------ presets
# Peaks dense (MME), TFLOP/s; HBM as Intel states it (GB); sm_count: matrix engines (MMEs).
GPUS: dict[str, dict[str, Any]] = {
    "Gaudi2": {
        "generation": "gaudi2", "efficiency": "gaudi2", "sm_count": 2, "hbm_gib": 96, "hbm_TBps": 2.45, "tdp_w": 600,
        "peak_tflops": {"bf16": 432.0, "fp8": 865.0},
        "source": "Intel Gaudi 3 AI Accelerator White Paper (2024), Gaudi 2 column: 432 TFLOPS BF16 and 865 FP8 (MME), "
                  "96 GB HBM2E at 2.45 TB/s, 2 MMEs, 24 x 100 GbE, 600 W (HL-225H)",
    },
    "Gaudi3": {
        "generation": "gaudi3", "efficiency": "gaudi3", "sm_count": 8, "hbm_gib": 128, "hbm_TBps": 3.7, "tdp_w": 900,
        "peak_tflops": {"bf16": 1835.0, "fp8": 1835.0},
        "source": "Intel Gaudi 3 AI Accelerator White Paper (2024): 1,835 TFLOPS BF16 and FP8 (MME), 128 GB HBM2E at "
                  "3.7 TB/s, 8 MMEs and 64 TPCs, 24 x 200 GbE, 900 W (HL-325L OAM)",
    },
}
_GAUDI_SOURCE = (
    "gemm bf16: Databricks, 'LLM Training and Inference with Intel Gaudi 2 AI Accelerators' (2024): over 260 "
    "TFLOP/s per device training MPT-7B on 8 Gaudi 2 (LLM Foundry, BF16) = 0.60 of 432, an end-to-end figure taken as "
    "the GEMM fraction with sustained 1; fp8: ASSUMED bf16's times Hopper's fp8/bf16 kernel ratio (0.70/0.80); hbm, "
    "attention: ASSUMED the twin's generic defaults (twin.core.facts.DEFAULT_EFFICIENCY); kernel_min_us: the "
    "lazy-mode graph runs the layer as one compiled graph (no per-kernel launch floor)")
EFFICIENCY: dict[str, dict[str, Any]] = {
    "gaudi2": {"gemm": {"bf16": 0.60, "fp8": 0.525}, "attention_fwd": 0.55, "attention_bwd": 0.42, "hbm": 0.85,
               "sustained": 1.0, "kernel_min_us": 0.0, "flash_attention": True, "source": _GAUDI_SOURCE},
    "gaudi3": {"gemm": {"bf16": 0.60, "fp8": 0.525}, "attention_fwd": 0.55, "attention_bwd": 0.42, "hbm": 0.85,
               "sustained": 1.0, "kernel_min_us": 0.0, "flash_attention": True,
               "source": "ASSUMED the Gaudi 2 profile (no published Gaudi 3 training MFU with its plan found): "
                         + _GAUDI_SOURCE},
}
SYSTEMS: dict[str, dict[str, Any]] = {
    "HLS-Gaudi2": {
        "gpu": "Gaudi2", "gpus_per_node": 8, "scale_up": {"fabric": "gaudi_roce", "domain_gpus": 8},
        "scale_out": {"fabric": "roce", "nics_per_node": 8, "nic_gbps": 300, "topology": "rail_optimized",
                      "switch_radix": 64},
        "source": "Intel HLS-Gaudi2: 8 HL-225H cards, 21 ports each in the all-to-all mesh, 3 x 100 GbE per card "
                  "(300 Gb/s) to the scale-out (6 QSFP-DD 400 GbE per server)",
    },
    "HLS-Gaudi3": {
        "gpu": "Gaudi3", "gpus_per_node": 8, "scale_up": {"fabric": "gaudi_roce", "domain_gpus": 8},
        "scale_out": {"fabric": "roce", "nics_per_node": 8, "nic_gbps": 600, "topology": "rail_optimized",
                      "switch_radix": 64},
        "source": "Intel Gaudi 3 white paper, HLS-Gaudi3: 8 HL-325L cards, 21 ports each in the all-to-all mesh, 3 x "
                  "200 GbE per card (600 Gb/s) to the scale-out (6 OSFP 800 GbE per server)",
    },
}


@hookimpl
def twin_presets() -> dict[str, dict[str, dict[str, Any]]]:
    """The Gaudi accelerators, their efficiency profiles and servers."""
    return {"gpus": GPUS, "efficiency": EFFICIENCY, "systems": SYSTEMS}
