"""The tensor throughput a GPU SKU sustains under its power limit (issue 35, item 2).

Dense GEMMs on Blackwell are power-bound, not clock-bound: at its 1,000 W limit a B200 runs
large BF16, FP8 and NVFP4 GEMMs at 0.60-0.67 of the datasheet peaks (the measurements in
``twin/presets/efficiency.yaml``), while a GB300 at its 1,400 W limit reaches up to 0.87 of the
same BF16 peak (2,174 TFLOP/s of 2,500: facebookexperimental/triton PR 2023, cuBLAS GEMMs at the
locked 2,070 MHz SM clock, "~1600-2174 tflops at 1400 W", ~617 at a 500 W cap). The datasheet
peaks of one generation's SKUs are nearly equal (B200/B300 2.25 PF, GB200/GB300 2.5 PF BF16),
so a model that prices each SKU at its datasheet peak predicts them equal where the higher-power
parts run faster.

The model: the power-capped roofline of Choi, Dukhan, Liu and Vuduc ("A Roofline Model of
Energy", IPDPS 2013; "Algorithmic time, energy, and power on candidate HPC compute building
blocks", IPDPS 2014): at full tensor load a GPU spends a constant power ``static_w`` plus a
constant energy per FLOP, so the throughput its power limit allows is
``(tdp_w - static_w) / energy_per_flop``. The generation's kernel efficiencies (``gemm`` in the
efficiency profile) are measured on a reference SKU at its own limit; they fix the energy per
FLOP, and any SKU of the generation then runs its tensor cores at

    factor = (tdp_w - static_w) / (ref.tdp_w - static_w) x ref.peak16 / peak16

of its own datasheet peak times those efficiencies (the second ratio converts to the SKU's own
datasheet). The SFU runs on the same clock, so the softmax exponential rate scales with it; HBM
does not (its clock is not lowered by the power limit). ``static_w`` is 0: the published points
do not pin it down. A line through GB300 at 500 W (~617 TFLOP/s) and at 1,400 W (the middle of
its 1,600-2,174 range, 1,887) and B200 at 1,000 W (~1,465, the middle of the 1.41-1.51 PF
measured, ``efficiency.yaml``) crosses zero throughput at ~40 W; through the best-shape figures
(617, 2,174 and B200's 1,465) at ~140 W. Against the training runs the smaller value fits the
B200 and GB200 runs together better (docs/fidelity.md, "One SKU against another"), and 0, the
constant-energy-per-FLOP form (throughput proportional to the power limit), is the one no fitted
constant enters. A factor is capped where the SKU's 16-bit GEMMs would pass the best fraction of
the datasheet peak measured on the generation (``max_fraction``: GB300's 0.87 above): the clock
ceiling. A compute degradation (``twin.core.conditions.degrade_cluster`` scales the peaks: a
lower clock ceiling) slows a power-bound SKU only where it takes that ceiling below the
power-limited clock, as a clock cap above the clock the power limit allows changes nothing.

Generations without a row here (Volta, Ampere, Hopper, other vendors) take factor 1: their SKUs
of one power limit share the efficiency profile's measurements, and Hopper at its 700 W limit
is near its clock ceiling (an H200 at 700 W ran its GEMMs at ~1,740 MHz against the 1,830 MHz its
peak assumes: docs/fidelity.md, "GEMM kernels measured on an H200"), so a power term would be
unsourced there.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.core.cluster_specs import GPU


@dataclass(frozen=True, slots=True)
class PowerReference:
    """The SKU a generation's kernel efficiencies were measured on, at its power limit.

    ``tdp_w`` its power limit; ``peak16_tflops`` its dense 16-bit datasheet peak; ``static_w``
    the power spent at full load whatever the throughput (module docstring: 0);
    ``max_fraction`` the best fraction of the datasheet 16-bit peak measured on any SKU of
    the generation (the clock ceiling on the factor).
    """

    sku: str
    tdp_w: float
    peak16_tflops: float
    static_w: float
    max_fraction: float
    source: str


POWER_REFERENCES: dict[str, PowerReference] = {
    "blackwell": PowerReference(
        sku="B200-SXM-180GB", tdp_w=1000.0, peak16_tflops=2250.0, static_w=0.0, max_fraction=0.87,
        source=("B200 at its 1,000 W limit (NVIDIA HGX B200 datasheet: 'configurable up to 1,000 W'; GB200 NVL72 "
                "1,200 W; Blackwell Ultra datasheet: B300 1,100 W, GB300 1,400 W) is where the Blackwell GEMM "
                "efficiencies were measured (pytorch/ao PR 2427, openxla matmul_interpolator_data sm_100, "
                "vllm-project/vllm PR 19566); GB300 reaches 0.87 of 2.5 PF BF16 at 1,400 W (facebookexperimental/"
                "triton PR 2023)")),
}


def power_clock_factor(gpu: GPU, gemm16: float) -> float:
    """The fraction of ``gpu``'s datasheet tensor peaks, relative to its generation's reference
    SKU, that its power limit lets it sustain (module docstring); ``gemm16``: the profile's 16-bit
    GEMM efficiency (for the clock ceiling). 1 for a generation without a reference or a GPU
    without a published power limit.
    """
    ref = POWER_REFERENCES.get(gpu.generation)
    if ref is None or gpu.tdp_w is None:
        return 1.0
    half = "bf16" if "bf16" in gpu.peak_tflops else "fp16"
    peak16 = gpu.peak_tflops.get(half)
    if not peak16:
        return 1.0
    # Power-capped roofline (Choi et al. 2013): throughput = (P - P_static) / energy per FLOP,
    # the energy per FLOP fixed by the reference SKU's measured efficiencies at its own limit.
    factor = (gpu.tdp_w - ref.static_w) / (ref.tdp_w - ref.static_w) * ref.peak16_tflops / peak16
    ceiling = ref.max_fraction / gemm16 if gemm16 > 0 else factor
    return min(factor, ceiling)
