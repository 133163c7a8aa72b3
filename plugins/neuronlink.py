"""AWS NeuronLink scale-up domains (Trn1 / Trn2 instances, Trn2 UltraServers) and Trainium.

An instance's 16 Trainium chips form a 4x4 2D torus of NeuronLink ("On a single
trn1.32xlarge instance Neuron devices are connected in a 2D torus topology", AWS Neuron docs,
"Neuron Collective Communication"; "In a trn2.48xlarge or trn2u.48xlarge instance, 16
Trainium2 chips are connected using a 4x4, 2D Torus topology", AWS Neuron docs, "Amazon EC2
Trn2 Architecture"). A Trn2 UltraServer joins four trn2u instances: "Trainium2 chips with the
same coordinates in each Trn2 instance are connected in a ring topology" (same page), a third
axis of 4 that wraps round. The Neuron collective library reduces over the axes a group spans
(``twin.api.torus_tier``); its collectives run on dedicated CC-cores.

Link rates (AWS Neuron docs, Trainium2 architecture, "Inter-chip Interconnect (GB/sec/chip)":
Trainium 384, Trainium2 1,280), read as bidirectional per-chip totals (as AWS, like NVIDIA,
quotes the sum of both directions: an assumption): Trainium, 4 torus ports, 48 GB/s per port
per direction; Trainium2, 1,280 GB/s of which 1,024 intra-instance over 4 ports (128 GB/s per
port per direction) and 256 to the UltraServer ring over 2 (64 GB/s per direction) - that
split is a secondary source's (a public Trainium2 topology note: "1024 GB/s intra-instance,
256 GB/s per chip inter-instance"), labelled so. Trn1's architecture page calls the same
16-chip NeuronLink-v2 network a "4D-HyperCube"; the collectives page's 2D torus is taken.

No achieved NeuronLink bandwidth or per-hop latency is published: the NIC-class fraction
(``twin.api.NIC_EFFICIENCY`` 400G, an assumption) and the collective-library fallback's
per-step latencies (``twin.core.accelerator_generations``), unless ``scale_up.latency_us`` /
``achievable_fraction`` state them. A Trainium "GPU" of the twin is one chip: Neuron's ranks
are NeuronCores (2 per Trainium, 4 logical per Trainium2 at LNC=2), so a published degree in
cores is a chip degree times the cores per chip.
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
    reject_scale_up_fields,
    torus_tier,
)

# generation -> {domain chips: axes as (size, GB/s per port per direction, wraps)}, source.
TOPOLOGY: dict[str, tuple[dict[int, tuple[tuple[int, float, bool], ...]], str]] = {
    "trainium": ({16: ((4, 48.0, True), (4, 48.0, True))},
                 "AWS Neuron docs: trn1.32xlarge, 16 Trainium in a 2D torus; Trainium inter-chip interconnect 384 "
                 "GB/s per chip (bidirectional, 4 ports)"),
    "trainium2": ({16: ((4, 128.0, True), (4, 128.0, True)),
                   64: ((4, 128.0, True), (4, 128.0, True), (4, 64.0, True))},
                  "AWS Neuron docs: Trn2 4x4 2D torus per instance, UltraServer rings of same-coordinate chips across "
                  "4 instances; NeuronLink-v3 1,280 GB/s per chip (bidirectional), split 1,024 intra / 256 "
                  "inter-instance (secondary source)"),
}
ACHIEVABLE = (NIC_EFFICIENCY[400], "assumption: the NIC-class fraction (twin.api.NIC_EFFICIENCY 400G); no published "
                                   "achieved NeuronLink bandwidth")
UNMODELLED = {
    "generation": "the NeuronLink generation follows the Trainium (cluster.gpu.generation)",
    "nvls": "NeuronLink has no switch to reduce in",
    "link_GBps": "the per-axis port rates are the generation's (state achievable_fraction to scale them)",
}


def _axes(cluster: Cluster, path: str) -> tuple[tuple[int, float, bool], ...]:
    gen, dom = cluster.gpu.generation, cluster.scale_up.domain_gpus
    if gen not in TOPOLOGY:
        raise SpecError(f"{path}.gpu.generation", f"neuronlink joins Trainium chips ({', '.join(sorted(TOPOLOGY))}) "
                                                  f"(got {gen})")
    shapes = TOPOLOGY[gen][0]
    if dom not in shapes:
        raise SpecError(f"{path}.scale_up.domain_gpus", f"a {gen} NeuronLink domain is "
                                                        f"{' or '.join(str(d) for d in sorted(shapes))} chips "
                                                        f"(an instance{', an UltraServer' if len(shapes) > 1 else ''})"
                                                        f" (got {dom})")
    return shapes[dom]


class NeuronLinkFabric(ScaleUpFabric):
    """AWS NeuronLink: a 4x4 torus per instance, a ring across an UltraServer's instances."""

    kind = "neuronlink"
    summary = "AWS NeuronLink: 4x4 2D torus per Trn instance, 4x4x4 across a Trn2 UltraServer (Neuron collectives)"

    def validate(self, cluster: Cluster, path: str) -> None:
        """A Trainium, an instance or UltraServer domain, no parameters."""
        check_scale_up_params(cluster, path, set(), self.kind)
        reject_scale_up_fields(cluster, path, self.kind, UNMODELLED)
        _axes(cluster, path)
        if cluster.gpu.nvlink_GBps:
            raise SpecError(f"{path}.gpu.nvlink_GBps", "NVLink bandwidth does not apply to a neuronlink domain")

    def tier(self, cluster: Cluster) -> Tier:
        """The domain's torus at the achievable fraction of its ports."""
        up = cluster.scale_up
        frac = up.achievable_fraction or ACHIEVABLE[0]
        axes = [(size, gbps * 1e9 * frac, wrap) for size, gbps, wrap in _axes(cluster, "cluster")]
        return torus_tier("neuronlink", self.kind, axes, (up.latency_us or 0.0) * 1e-6)

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """The torus and its ports."""
        axes = _axes(cluster, "cluster")
        return {"kind": self.kind, "dims": [a[0] for a in axes], "port_GBps_per_direction": [a[1] for a in axes],
                "wraparound": [a[2] for a in axes], "source": TOPOLOGY[cluster.gpu.generation][1],
                "achievable_source": ACHIEVABLE[1]}


@hookimpl
def twin_fabrics() -> list[ScaleUpFabric]:
    """Register the NeuronLink domain."""
    return [NeuronLinkFabric()]


# ------------------------------------------------------------------------------ presets
# Peaks dense, TFLOP/s; HBM GiB (AWS states GiB); sm_count: NeuronCores (each one 128x128
# TensorEngine, the units GEMM tiles spread over; CUTLASS's tile model is an approximation here).
# No board power is published: tdp_w null.
GPUS: dict[str, dict[str, Any]] = {
    "Trainium": {
        "generation": "trainium", "efficiency": "trainium", "sm_count": 2, "hbm_gib": 32, "hbm_TBps": 0.8805,
        "tdp_w": None, "peak_tflops": {"fp32": 47.5, "tf32": 190.0, "fp16": 190.0, "bf16": 190.0, "fp8": 190.0},
        "source": "AWS Neuron docs, Trainium architecture: two NeuronCore-v2 delivering 190 FP16/BF16/cFP8/TF32 "
                  "TFLOPS and 47.5 FP32; 32 GiB at 820 GiB/s (0.8805 TB/s); no published power",
    },
    "Trainium2": {
        "generation": "trainium2", "efficiency": "trainium2", "sm_count": 8, "hbm_gib": 96, "hbm_TBps": 2.9,
        "tdp_w": None, "peak_tflops": {"fp32": 181.0, "tf32": 667.0, "fp16": 667.0, "bf16": 667.0, "fp8": 1299.0},
        "source": "AWS Neuron docs, Trainium2 architecture: eight NeuronCore-v3 delivering 1,299 FP8 TFLOPS, 667 "
                  "BF16/FP16/TF32, 181 FP32; 96 GiB at 2.9 TB/s; no published power",
    },
}
_NEURON_SOURCE = (
    "sustained 0.367: DERIVED from the published NxD Llama-3.1-8B run on 32 trn1.32xlarge (aws-neuron-sdk "
    "about-neuron/benchmarks/trn1/training_data_decoder.csv @7c165a3, Neuron 2.24: 47.95 seq/s = 21.356 s a step, "
    "TP=32 cores, DP=32, seq 8192), the fraction of the kernel-level figures that makes the twin's step match it "
    "(21.350 s; validation/reference/training_runs.yaml marks that run in-sample, the 70B row of the same table is "
    "out of sample); gemm / hbm / attention: ASSUMED the twin's generic defaults "
    "(twin.core.facts.DEFAULT_EFFICIENCY), no published Trainium kernel benchmark found")
EFFICIENCY: dict[str, dict[str, Any]] = {
    "trainium": {"gemm": {"bf16": 0.75, "fp16": 0.75, "tf32": 0.7, "fp8": 0.65, "fp32": 0.9},
                 "attention_fwd": 0.55, "attention_bwd": 0.42, "hbm": 0.85, "sustained": 0.367, "kernel_min_us": 4.0,
                 "flash_attention": True, "source": _NEURON_SOURCE},
    "trainium2": {"gemm": {"bf16": 0.75, "fp16": 0.75, "tf32": 0.7, "fp8": 0.65, "fp32": 0.9},
                  "attention_fwd": 0.55, "attention_bwd": 0.42, "hbm": 0.85, "sustained": 0.367, "kernel_min_us": 4.0,
                  "flash_attention": True,
                  "source": "ASSUMED the Trainium profile (no published Trainium2 training throughput with its plan "
                            "found): " + _NEURON_SOURCE},
}
SYSTEMS: dict[str, dict[str, Any]] = {
    "trn1.32xlarge": {
        "gpu": "Trainium", "gpus_per_node": 16, "scale_up": {"fabric": "neuronlink", "domain_gpus": 16},
        "scale_out": {"fabric": "efa", "nics_per_node": 8, "nic_gbps": 100, "topology": "fat_tree"},
        "source": "AWS Neuron docs, Trn1/Trn1n architecture: 16 Trainium per trn1.32xlarge on NeuronLink-v2, 800 "
                  "Gbps EFA (8 EFA devices)",
    },
    "trn2.48xlarge": {
        "gpu": "Trainium2", "gpus_per_node": 16, "scale_up": {"fabric": "neuronlink", "domain_gpus": 16},
        "scale_out": {"fabric": "efa", "nics_per_node": 16, "nic_gbps": 200, "topology": "fat_tree"},
        "source": "AWS Neuron docs, Trn2 architecture: 16 Trainium2 per trn2.48xlarge in a 4x4 torus; AWS EC2 Trn2: "
                  "3.2 Tbps of EFAv3 per instance (16 x 200 Gbps)",
    },
    "Trn2-UltraServer": {
        "gpu": "Trainium2", "gpus_per_node": 16, "scale_up": {"fabric": "neuronlink", "domain_gpus": 64},
        "scale_out": {"fabric": "efa", "nics_per_node": 16, "nic_gbps": 200, "topology": "fat_tree"},
        "source": "AWS Neuron docs, Trn2 architecture: a Trn2 UltraServer joins 4 trn2u.48xlarge (64 Trainium2) over "
                  "NeuronLink; AWS EC2 Trn2: 12.8 Tbps of EFAv3 per UltraServer (3.2 per instance)",
    },
}


@hookimpl
def twin_presets() -> dict[str, dict[str, dict[str, Any]]]:
    """The Trainium chips, their efficiency profiles and instances."""
    return {"gpus": GPUS, "efficiency": EFFICIENCY, "systems": SYSTEMS}
