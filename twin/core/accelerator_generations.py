"""Accelerator generations: what the step model reads of a GPU's ``generation``, one row each.

Every place in the core that depends on the generation reads this table (never a test of
the generation's name): which precisions its matrix units run natively
(``GPU.supports``), the dense 16-bit matrix FLOPs per clock of one compute unit (the
softmax exponential bound, ``twin.core.compute``), whether its stacks overlap
tensor-parallel communication with the GEMMs by default, and which row of NCCL 2.28.3's
tuning tables (``twin.core.nccl_tuning``) its collective library is costed with.

NVIDIA rows carry NCCL's own figures. Other vendors' collective libraries (RCCL, XLA's ICI
collectives, the Neuron collective library, HCCL) publish no cost-model tables of their own
for these generations (RCCL's stored ``src/graph/tuning.cc``, ROCm/rccl, is a 2020 fork of
NCCL's with no rows for gfx942/gfx950), so they take NCCL 2.28.3's compute capability >= 9.0
row as a stated fallback: its per-step latencies, protocols and LL cap. Their bandwidths
are not NCCL's: they come from the scale-up fabric's own tier (link rates, topology and the
achieved fraction each fabric plugin sources).
"""

from __future__ import annotations

from dataclasses import dataclass

# NCCL generation whose tuning constants a library without its own published figures is costed
# with (module docstring): Hopper's, the compute capability >= 9.0 row of NCCL 2.28.3.
FALLBACK_TUNING = "hopper"


@dataclass(frozen=True, slots=True)
class GenerationFacts:
    """One accelerator generation as the step model sees it.

    ``precisions``: the precisions its matrix units run natively (a GPU preset also needs a
    peak for one to be usable); ``tensor_flops_per_clk_unit``: dense 16-bit matrix FLOPs per
    clock of one compute unit (SM, CU), from which the softmax exponential bound is derived
    (``GPU.sfu_exp_per_clk``), None where no transcendental rate per unit is published (the
    bound is then not modelled); ``tp_comm_overlap``: the generation's stacks overlap
    tensor-parallel communication with the GEMMs by default; ``nccl_tuning``: the NCCL
    generation whose tuning constants cost its collectives (its own, or ``FALLBACK_TUNING``).
    """

    vendor: str
    precisions: frozenset[str]
    tensor_flops_per_clk_unit: float | None
    tp_comm_overlap: bool
    collective_library: str
    nccl_tuning: str
    source: str


_NVIDIA_SOURCE = ("NVIDIA architecture whitepapers (Volta fp16 tensor cores; Ampere bf16/tf32; Hopper fp8; "
                  "Blackwell fp4); dense 16-bit tensor-core FLOPs per clock per SM: Volta 8 tensor cores x 64 FMA, "
                  "Ampere 4 x 256 FMA, Hopper 4 x 512 FMA, Blackwell twice Hopper per SM; tensor-parallel "
                  "communication overlap by default on Hopper and later (Transformer Engine userbuffers, "
                  "--tp-comm-overlap in NVIDIA's recipes)")
_FALLBACK_NOTE = (f"collectives costed with NCCL 2.28.3's {FALLBACK_TUNING} row (no published cost-model tables of "
                  "this library; twin.core.accelerator_generations)")

GENERATIONS: dict[str, GenerationFacts] = {
    "volta": GenerationFacts("nvidia", frozenset({"fp32", "fp16"}), 1024.0, False, "NCCL 2.28.3", "volta",
                             _NVIDIA_SOURCE),
    "ampere": GenerationFacts("nvidia", frozenset({"fp32", "fp16", "tf32", "bf16"}), 2048.0, False, "NCCL 2.28.3",
                              "ampere", _NVIDIA_SOURCE),
    "hopper": GenerationFacts("nvidia", frozenset({"fp32", "fp16", "tf32", "bf16", "fp8"}), 4096.0, True,
                              "NCCL 2.28.3", "hopper", _NVIDIA_SOURCE),
    "blackwell": GenerationFacts("nvidia", frozenset({"fp32", "fp16", "tf32", "bf16", "fp8", "fp4"}), 8192.0, True,
                                 "NCCL 2.28.3", "blackwell", _NVIDIA_SOURCE),
    # AMD CDNA 3 (MI300X, MI325X; gfx942): FP32/TF32/FP16/BF16/FP8 matrix cores (AMD CDNA 3
    # architecture whitepaper; ROCm "Data types and precision support": TF32 and FP8 GEMM on CDNA3).
    "cdna3": GenerationFacts("amd", frozenset({"fp32", "tf32", "fp16", "bf16", "fp8"}), None, False, "RCCL",
                             FALLBACK_TUNING, "AMD CDNA 3 architecture whitepaper (2023); ROCm data types and "
                             f"precision support; {_FALLBACK_NOTE}"),
    # AMD CDNA 4 (MI350X, MI355X; gfx950): adds MXFP6/MXFP4; no TF32 matrix rate in the MI355X
    # specifications (AMD CDNA 4 architecture whitepaper, 2025).
    "cdna4": GenerationFacts("amd", frozenset({"fp32", "fp16", "bf16", "fp8", "fp4"}), None, False, "RCCL",
                             FALLBACK_TUNING, f"AMD CDNA 4 architecture whitepaper (2025); {_FALLBACK_NOTE}"),
    # Google TPU v5p / v6e: bf16 MXUs (int8 too, not a training precision of the twin; Google
    # Cloud TPU v5p and v6e system architecture pages list bf16 and int8 peaks only).
    "tpu_v5p": GenerationFacts("google", frozenset({"bf16"}), None, False, "XLA ICI collectives", FALLBACK_TUNING,
                               f"Google Cloud TPU v5p system architecture (docs.cloud.google.com/tpu/docs/v5p); "
                               f"{_FALLBACK_NOTE}"),
    "tpu_v6e": GenerationFacts("google", frozenset({"bf16"}), None, False, "XLA ICI collectives", FALLBACK_TUNING,
                               f"Google Cloud TPU v6e system architecture (docs.cloud.google.com/tpu/docs/v6e); "
                               f"{_FALLBACK_NOTE}"),
    # AWS Trainium (Trn1) and Trainium2: FP32, BF16/FP16/TF32 and (c)FP8 matrix rates (AWS Neuron
    # documentation, "Trainium Architecture" and "Trainium2 Architecture").
    "trainium": GenerationFacts("aws", frozenset({"fp32", "tf32", "fp16", "bf16", "fp8"}), None, False,
                                "Neuron collective communication", FALLBACK_TUNING,
                                f"AWS Neuron docs, Trainium architecture; {_FALLBACK_NOTE}"),
    "trainium2": GenerationFacts("aws", frozenset({"fp32", "tf32", "fp16", "bf16", "fp8"}), None, False,
                                 "Neuron collective communication", FALLBACK_TUNING,
                                 f"AWS Neuron docs, Trainium2 architecture; {_FALLBACK_NOTE}"),
    # Intel Gaudi 2 / Gaudi 3: BF16 and FP8 matrix engines (MME) (Intel Gaudi 3 AI accelerator
    # white paper, 2024, comparison with Gaudi 2).
    "gaudi2": GenerationFacts("intel", frozenset({"bf16", "fp8"}), None, False, "HCCL", FALLBACK_TUNING,
                              f"Intel Gaudi 2 / Gaudi 3 white paper; {_FALLBACK_NOTE}"),
    "gaudi3": GenerationFacts("intel", frozenset({"bf16", "fp8"}), None, False, "HCCL", FALLBACK_TUNING,
                              f"Intel Gaudi 3 AI accelerator white paper (2024); {_FALLBACK_NOTE}"),
}


def generation_facts(generation: str) -> GenerationFacts:
    """The row of ``generation`` (every value of ``twin.core.cluster_specs.Generation`` has one)."""
    return GENERATIONS[generation]


def nccl_tuning_key(generation: str) -> str:
    """The NCCL generation whose tuning constants cost ``generation``'s collectives."""
    return GENERATIONS[generation].nccl_tuning
