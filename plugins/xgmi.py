"""AMD Infinity Fabric (xGMI) scale-up domains and the AMD Instinct accelerators.

The Instinct platform joins 8 OAM GPUs pairwise: each GPU has 7 Infinity Fabric links, one
to each peer, so the domain is a fully connected mesh (``twin.api.mesh_tier``), not a switch:
a group of k GPUs gets the k - 1 links joining it, and one send one link. RCCL (AMD's fork of
NCCL) runs its rings over those links.

Per generation (AMD data sheets, per link per direction = half the quoted bidirectional rate):

- CDNA 3 (MI300X, MI325X): 7 links x 128 GB/s bidirectional, "peak aggregate P2P Infinity
  Fabric bandwidth 896 GB/s" (AMD Instinct MI300X / MI325X data sheets): 64 GB/s per link
  per direction, 448 GB/s per GPU.
- CDNA 4 (MI350X, MI355X): 7 links x 153.6 GB/s bidirectional, 1,075.2 GB/s aggregate (AMD
  Instinct MI355X data sheet): 76.8 GB/s per link per direction, 537.6 GB/s per GPU.

Achieved: RCCL all-reduce on 8 MI300X reaches 316.82 GB/s bus bandwidth at 8 GiB (Azure
AI-benchmarking-guide, ND MI300X v5 results, RCCL 2.22.3), 0.707 of the 448 GB/s per
direction; CDNA 4 is assumed to keep that fraction (no published MI355X RCCL figure found).
No per-hop xGMI latency is published: RCCL is costed with NCCL's per-step latencies (the
collective-library fallback of ``twin.core.accelerator_generations``) unless the scenario
states one (``scale_up.latency_us``, then the floor of every ring step).

Presets: the Instinct GPUs (peaks by precision, HBM, power), their efficiency profiles (with
what each figure comes from) and 8-GPU platforms.
"""

from __future__ import annotations

from typing import Any

from twin.api import (
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

# GPU generation -> (GB/s per link per direction, links per GPU, source): the module docstring.
LINKS: dict[str, tuple[float, int, str]] = {
    "cdna3": (64.0, 7, "AMD Instinct MI300X/MI325X data sheets: 7 Infinity Fabric links x 128 GB/s bidirectional "
                       "(896 GB/s peak aggregate P2P)"),
    "cdna4": (76.8, 7, "AMD Instinct MI355X data sheet: 7 Infinity Fabric links x 153.6 GB/s bidirectional "
                       "(1,075.2 GB/s aggregate)"),
}
# RCCL all-reduce bus bandwidth over the per-direction link bandwidth (module docstring).
ACHIEVABLE = {
    "cdna3": (316.82 / 448.0, "Azure AI-benchmarking-guide, ND MI300X v5: RCCL all-reduce 316.82 GB/s busbw at 8 GiB "
                              "of 448 GB/s"),
    "cdna4": (316.82 / 448.0, "assumption: the CDNA 3 fraction (no published MI355X RCCL figure found)"),
}
MAX_DOMAIN = 8  # 7 links per GPU: a fully connected mesh of at most 8 GPUs
UNMODELLED = {
    "generation": "the Infinity Fabric generation follows the GPU (cluster.gpu.generation)",
    "nvls": "xGMI has no switch to reduce in",
}


def _links(cluster: Cluster, path: str) -> tuple[float, int]:
    """Per-direction GB/s of one link and links per GPU: stated (``scale_up.link_GBps`` over the
    platform's 7 links), else the GPU generation's.
    """
    up, gen = cluster.scale_up, cluster.gpu.generation
    if up.link_GBps:
        return up.link_GBps / (MAX_DOMAIN - 1), MAX_DOMAIN - 1
    if gen not in LINKS:
        raise SpecError(f"{path}.scale_up.link_GBps", f"is required for xgmi with a {gen} GPU (link rates are known "
                                                      f"for {', '.join(sorted(LINKS))})")
    return LINKS[gen][0], LINKS[gen][1]


class XGMIFabric(ScaleUpFabric):
    """AMD Infinity Fabric: 8 GPUs fully connected, one link per pair."""

    kind = "xgmi"
    summary = "AMD Infinity Fabric (xGMI): 8 GPUs fully connected, a group gets the links joining it (RCCL rings)"

    def validate(self, cluster: Cluster, path: str) -> None:
        """At most 8 GPUs per domain; no NVLink figures; no parameters."""
        check_scale_up_params(cluster, path, set(), self.kind)
        reject_scale_up_fields(cluster, path, self.kind, UNMODELLED)
        if cluster.scale_up.domain_gpus > MAX_DOMAIN:
            raise SpecError(f"{path}.scale_up.domain_gpus", f"an Infinity Fabric mesh joins at most {MAX_DOMAIN} GPUs "
                                                            f"(7 links each) (got {cluster.scale_up.domain_gpus})")
        if cluster.gpu.nvlink_GBps:
            raise SpecError(f"{path}.gpu.nvlink_GBps", "NVLink bandwidth does not apply to an xgmi domain: state "
                                                       "scale_up.link_GBps")
        _links(cluster, path)

    def tier(self, cluster: Cluster) -> Tier:
        """The mesh: every pair joined by one link at RCCL's achieved fraction."""
        up = cluster.scale_up
        per_link, _ = _links(cluster, "cluster")
        frac = up.achievable_fraction or ACHIEVABLE.get(cluster.gpu.generation, ACHIEVABLE["cdna3"])[0]
        gpus = max(1, min(up.domain_gpus, cluster.num_gpus))
        return mesh_tier("xgmi", self.kind, gpus, per_link * 1e9 * frac, (up.latency_us or 0.0) * 1e-6)

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """Links, their rate and the mesh."""
        per_link, links = _links(cluster, "cluster")
        gen = cluster.gpu.generation
        return {"kind": self.kind, "topology": "fully connected", "domain_gpus": cluster.scale_up.domain_gpus,
                "links_per_gpu": links, "link_GBps_per_direction": per_link,
                "source": LINKS.get(gen, ("", 0, "scale_up.link_GBps as stated"))[2],
                "achievable_source": ACHIEVABLE.get(gen, ACHIEVABLE["cdna3"])[1]}


@hookimpl
def twin_fabrics() -> list[ScaleUpFabric]:
    """Register the Infinity Fabric domain."""
    return [XGMIFabric()]


# ------------------------------------------------------------------------------ presets
# Peaks are dense (no sparsity), TFLOP/s; HBM in GiB as ROCm reports it (ROCm "AMD GPU
# specifications" table: VRAM 192 / 256 / 288 GiB), bandwidth TB/s; sm_count: compute units.
GPUS: dict[str, dict[str, Any]] = {
    "MI300X": {
        "generation": "cdna3", "efficiency": "cdna3", "sm_count": 304, "hbm_gib": 192, "hbm_TBps": 5.3, "tdp_w": 750,
        "peak_tflops": {"fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9},
        "source": "AMD Instinct MI300X data sheet (amd.com): 1,307.4 TFLOPS FP16/BF16 and 2,614.9 FP8 dense, 653.7 "
                  "TF32, 163.4 FP32 matrix; 192 GB HBM3 at 5.3 TB/s; 304 CUs; 750 W; ROCm GPU specifications",
    },
    "MI325X": {
        "generation": "cdna3", "efficiency": "cdna3_mi325x", "sm_count": 304, "hbm_gib": 256, "hbm_TBps": 6.0,
        "tdp_w": 1000,
        "peak_tflops": {"fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9},
        "source": "AMD Instinct MI325X data sheet: MI300X compute (1,307.4 TFLOPS FP16/BF16, 2,614.9 FP8 dense), "
                  "256 GB HBM3E at 6.0 TB/s, 1,000 W; ROCm GPU specifications (304 CUs, 256 GiB)",
    },
    "MI355X": {
        "generation": "cdna4", "efficiency": "cdna4", "sm_count": 256, "hbm_gib": 288, "hbm_TBps": 8.0, "tdp_w": 1400,
        "peak_tflops": {"fp16": 2516.6, "bf16": 2516.6, "fp8": 5033.2, "fp4": 10066.4},
        "source": "AMD Instinct MI355X data sheet: 2,516.6 TFLOPS FP16/BF16, 5,033.2 FP8 and 10,066.4 MXFP4 dense; "
                  "288 GB HBM3E at 8 TB/s; 1,400 W; ROCm GPU specifications (256 CUs, 288 GiB)",
    },
}
# Achievable fractions (twin/presets/efficiency.yaml has the fields' meaning).
_CDNA3: dict[str, Any] = {
    "gemm": {"fp8": 0.443, "bf16": 0.443, "fp16": 0.443, "tf32": 0.443, "fp32": 0.443},
    "attention_fwd": 0.251, "attention_bwd": 0.188, "hbm": 0.775, "sustained": 0.78, "kernel_min_us": 4.0,
    "flash_attention": True,
    "source": "Azure AI-benchmarking-guide, ND MI300X v5 results (ROCm 6.2, RCCL 2.22.3): hipBLASLt FP8 GEMM "
              "1,159 TFLOPS at 8192^3 = 0.443 of 2,614.9 (BF16/FP16/TF32/FP32 not measured there: ASSUMED the "
              "same fraction); HBM copy 4.11 TB/s = 0.775 of 5.3; FlashAttention-2 forward 328.6 TFLOPS (head "
              "dim 64, 8K) = 0.251 of 1,307.4; backward ASSUMED at Hopper's fitted backward/forward ratio "
              "(0.314/0.419); sustained ASSUMED Hopper's fitted 0.78 (no AMD run in the fitted reference set); "
              "kernel_min_us ASSUMED as Hopper",
}
# The factor on the CDNA 3 kernel fractions that the MI325X profile carries (its source below).
MI325X_FACTOR = 1.476


def _scaled_kernels(profile: dict[str, Any], factor: float, source: str) -> dict[str, Any]:
    """``profile`` with its GEMM and attention fractions times ``factor`` (at most 1) and ``source``."""
    return {**profile, "gemm": {k: min(1.0, v * factor) for k, v in profile["gemm"].items()},
            "attention_fwd": min(1.0, profile["attention_fwd"] * factor),
            "attention_bwd": min(1.0, profile["attention_bwd"] * factor), "source": source}


EFFICIENCY: dict[str, dict[str, Any]] = {
    "cdna3": _CDNA3,
    "cdna3_mi325x": _scaled_kernels(_CDNA3, MI325X_FACTOR, (
        "DERIVED: the cdna3 kernel fractions (GEMM, attention) x 1.476, the one factor making the twin's step match "
        "a published MI325X run: Primus Megatron-LM, Llama 2 7B, 64 MI325X, TP1 DP64, FP8 hybrid, mbs 4, gbs 2048, "
        "seq 4096, 6,402.7 ms per iteration (hisohara/ai-scripts training/03_primus/run-llama2-7B-8N.log @4fb66ab; "
        "in-sample in validation/reference/training_runs.yaml, the 70B run of the same logs is out of sample). The "
        "MI325X runs at 1,000 W (MI300X 750 W) and the run's ROCm 7 / Primus-Turbo kernels are newer than the Azure "
        "benchmark's ROCm 6.2: both plausibly raise the fractions; which part is which is not published. hbm, "
        "sustained, kernel_min_us: as cdna3")),
    "cdna4": {
        "gemm": {"fp4": 0.443, "fp8": 0.443, "bf16": 0.443, "fp16": 0.443},
        "attention_fwd": 0.251, "attention_bwd": 0.188, "hbm": 0.775, "sustained": 0.78, "kernel_min_us": 4.0,
        "flash_attention": True,
        "source": "ASSUMED the CDNA 3 profile (measured on MI300X, Azure AI-benchmarking-guide): no published "
                  "MI355X kernel benchmark with its method found",
    },
}
SYSTEMS: dict[str, dict[str, Any]] = {
    "ND-MI300X-v5": {
        "gpu": "MI300X", "gpus_per_node": 8, "scale_up": {"fabric": "xgmi", "domain_gpus": 8},
        "scale_out": {"fabric": "infiniband", "nics_per_node": 8, "nic_gbps": 400, "topology": "rail_optimized",
                      "switch_radix": 64},
        "source": "Microsoft Azure ND MI300X v5 series: 8 MI300X on Infinity Fabric, 8x 400 Gb/s NDR InfiniBand "
                  "(one per GPU), Quantum-2 64-port switches",
    },
    "MI325X-8-RoCE": {
        "gpu": "MI325X", "gpus_per_node": 8, "scale_up": {"fabric": "xgmi", "domain_gpus": 8},
        "scale_out": {"fabric": "roce", "nics_per_node": 8, "nic_gbps": 400, "topology": "rail_optimized",
                      "switch_radix": 64},
        "source": "AMD Instinct MI325X platform: 8 GPUs on Infinity Fabric (MI325X data sheet); 8x 400 Gb/s RoCE "
                  "NICs, one per GPU (AMD Pensando Pollara 400 AI NIC, AMD Instinct cluster reference designs)",
    },
    "MI355X-8-RoCE": {
        "gpu": "MI355X", "gpus_per_node": 8, "scale_up": {"fabric": "xgmi", "domain_gpus": 8},
        "scale_out": {"fabric": "roce", "nics_per_node": 8, "nic_gbps": 400, "topology": "rail_optimized",
                      "switch_radix": 64},
        "source": "AMD Instinct MI355X platform: 8 GPUs on Infinity Fabric (MI355X data sheet) with 8x AMD Pensando "
                  "Pollara 400 Gb/s AI NICs",
    },
}


@hookimpl
def twin_presets() -> dict[str, dict[str, dict[str, Any]]]:
    """The AMD Instinct GPUs, their efficiency profiles and platforms."""
    return {"gpus": GPUS, "efficiency": EFFICIENCY, "systems": SYSTEMS}
