"""Google TPU Inter-Chip Interconnect (ICI): a slice's chips in a 2D or 3D torus, and the TPUs.

Every chip of a slice links to its neighbours along each axis of the slice's topology
(``params.dims``, e.g. "8x8x8"); XLA reduces over the axes a group spans concurrently and
axis by axis (``twin.api.torus_tier``: the bucket algorithm of the TPU pods' all-reduce).

Per generation (Google Cloud TPU system architecture pages; per link per direction = the
chip's bidirectional ICI bandwidth over its ports, halved):

- TPU v5p: 6 ICI ports, 1,200 GB/s bidirectional per chip: 100 GB/s per link per direction;
  3D torus; a pod of 8,960 chips built of 4x4x4 cubes joined by optical circuit switches
  (OCS), slices up to 16x16x24. Wraparound: the OCS closes every axis of a slice made of
  whole cubes (every axis a multiple of 4); smaller slices (2x2x1 .. 2x4x4, inside one cube)
  have no wraparound (Jouppi et al., ISCA 2023, "TPU v4: An Optically Reconfigurable
  Supercomputer ...", §2: the OCS links the cubes' faces into a torus; the v5p topology
  table lists slices in cubes).
- TPU v6e (Trillium): 4 ICI ports, 800 GB/s bidirectional per chip: 100 GB/s per link per
  direction; a 2D torus of 16x16 = 256 chips per pod, no OCS: an axis wraps round only where
  it spans the pod's full 16 ("How to Scale Your Model", Austin et al., Google DeepMind 2025,
  "How to Think About TPUs": wraparounds only on full axes for v5e/v6e, on multiples of 4
  for v4/v5p).

No achieved ICI collective bandwidth is published: the links run at the NIC-class fraction
(``twin.api.NIC_EFFICIENCY`` for 400G, an assumption, as ``plugins/torus.py`` does), and no
per-hop latency: XLA's collectives take the collective-library fallback's per-step latencies
(``twin.core.accelerator_generations``) unless ``scale_up.latency_us`` states one. A slice is
one scale-up domain; slices talk over the data-center network (multislice), which a scenario
states as its ``scale_out`` (the TPU presets have none: one slice).
"""

from __future__ import annotations

import math
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

# generation -> (ICI ports per chip, GB/s per port per direction, axes of the pod's torus,
# OCS cube side (0: no OCS), the pod's side without OCS, source): the module docstring.
ICI: dict[str, tuple[int, float, int, int, int, str]] = {
    "tpu_v5p": (6, 100.0, 3, 4, 0, "Google Cloud TPU v5p: 1,200 GB/s bidirectional ICI per chip over 6 ports, 3D "
                                   "torus of 4x4x4 cubes joined by optical circuit switches, slices up to 16x16x24"),
    "tpu_v6e": (4, 100.0, 2, 0, 16, "Google Cloud TPU v6e: 800 GB/s bidirectional ICI per chip over 4 ports, 2D "
                                    "torus, 256-chip (16x16) pod"),
}
ACHIEVABLE = (NIC_EFFICIENCY[400], "assumption: the NIC-class fraction (twin.api.NIC_EFFICIENCY 400G); no published "
                                   "achieved ICI collective bandwidth")
PARAMS = {"dims"}
UNMODELLED = {
    "generation": "the ICI generation follows the TPU (cluster.gpu.generation)",
    "nvls": "ICI has no switch to reduce in",
}


def _generation(cluster: Cluster, path: str) -> tuple[int, float, int, int, int, str]:
    gen = cluster.gpu.generation
    if gen not in ICI:
        raise SpecError(f"{path}.gpu.generation", f"ici joins TPUs ({', '.join(sorted(ICI))}) (got {gen})")
    return ICI[gen]


def parse_dims(cluster: Cluster, path: str = "cluster") -> tuple[int, ...]:
    """The slice topology in chips (``params.dims``), checked against the domain and the generation."""
    field = f"{path}.scale_up.params.dims"
    raw = cluster.scale_up.params.get("dims")
    _, _, axes, _, _, _ = _generation(cluster, path)
    if raw is None:
        raise SpecError(field, f"is required for ici: the slice topology in chips, {axes} axes joined by 'x' "
                               f"(e.g. '{'x'.join(['4'] * axes)}'), multiplying to scale_up.domain_gpus")
    text = str(int(raw)) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else str(raw)
    parts = text.lower().replace(" ", "").split("x")
    if len(parts) != axes or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise SpecError(field, f"must be {axes} positive whole numbers joined by 'x' for "
                               f"{cluster.gpu.generation} (got {raw!r})")
    dims = tuple(int(p) for p in parts)
    if math.prod(dims) != cluster.scale_up.domain_gpus:
        raise SpecError(f"{path}.scale_up.domain_gpus", f"must equal the slice's chips, {'x'.join(parts)} = "
                                                        f"{math.prod(dims)} (got {cluster.scale_up.domain_gpus})")
    return dims


def wraparound(cluster: Cluster, dims: tuple[int, ...]) -> tuple[bool, ...]:
    """Which axes wrap round: all of a slice of whole OCS cubes, or the pod's full sides (module docstring)."""
    _, _, _, cube, pod_side, _ = _generation(cluster, "cluster")
    if cube:
        whole = all(d % cube == 0 for d in dims)
        return tuple(whole for _ in dims)
    return tuple(d == pod_side for d in dims)


class ICIFabric(ScaleUpFabric):
    """TPU ICI: the slice's chips in a torus; a group gets the axes it spans."""

    kind = "ici"
    summary = "Google TPU ICI: 2D/3D torus per slice (OCS cubes on v5p), XLA collectives over the spanned axes"

    def validate(self, cluster: Cluster, path: str) -> None:
        """A TPU, its slice topology, no NVLink figures."""
        check_scale_up_params(cluster, path, PARAMS, self.kind)
        reject_scale_up_fields(cluster, path, self.kind, UNMODELLED)
        parse_dims(cluster, path)
        if cluster.gpu.nvlink_GBps:
            raise SpecError(f"{path}.gpu.nvlink_GBps", "NVLink bandwidth does not apply to an ici domain")

    def tier(self, cluster: Cluster) -> Tier:
        """The slice's torus: per axis, one port to each neighbour."""
        up = cluster.scale_up
        ports, per_port, _, _, _, _ = _generation(cluster, "cluster")
        dims = parse_dims(cluster)
        frac = up.achievable_fraction or ACHIEVABLE[0]
        if up.link_GBps:  # per chip per direction over all its ports: each port its share
            per_port = up.link_GBps / ports
        link = per_port * 1e9 * frac
        axes = [(d, link, wrap) for d, wrap in zip(dims, wraparound(cluster, dims), strict=True)]
        return torus_tier("ici", self.kind, axes, (up.latency_us or 0.0) * 1e-6)

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        """The slice's topology, its wraparound and links."""
        ports, per_port, _, cube, _, src = _generation(cluster, "cluster")
        dims = parse_dims(cluster)
        return {"kind": self.kind, "dims": list(dims), "wraparound": list(wraparound(cluster, dims)),
                "ports_per_chip": ports, "port_GBps_per_direction": per_port, "ocs_cube": cube or None,
                "source": src, "achievable_source": ACHIEVABLE[1]}


@hookimpl
def twin_fabrics() -> list[ScaleUpFabric]:
    """Register the ICI domain."""
    return [ICIFabric()]


# ------------------------------------------------------------------------------ presets
# Peaks dense, TFLOP/s (bf16; the int8 peaks are not a training precision here). HBM as Google
# states it. sm_count: the chip's MXUs (the units GEMM tiles are spread over; the tile and wave
# model is CUTLASS's, an approximation on a TPU). No board power is published: tdp_w null.
GPUS: dict[str, dict[str, Any]] = {
    "TPU-v5p": {
        "generation": "tpu_v5p", "efficiency": "tpu_v5p", "sm_count": 8, "hbm_gib": 95, "hbm_TBps": 2.765,
        "tdp_w": None, "peak_tflops": {"bf16": 459.0},
        "source": "Google Cloud TPU v5p system architecture: 459 TFLOPs bf16 per chip, 95 GB HBM2e at 2,765 GB/s, two "
                  "TensorCores of four MXUs each; no published power",
    },
    "TPU-v6e": {
        "generation": "tpu_v6e", "efficiency": "tpu_v6e", "sm_count": 2, "hbm_gib": 32, "hbm_TBps": 1.638,
        "tdp_w": None, "peak_tflops": {"bf16": 918.0},
        "source": "Google Cloud TPU v6e system architecture: 918 TFLOPs bf16 per chip, 32 GB HBM at 1,638 GBps, one "
                  "TensorCore with two 256x256 MXUs, PCIe Gen5 to the host; no published power",
    },
}
_TPU_EFF_SOURCE = (
    "gemm: MaxText README 'Runtime Performance Results' (AI-Hypercomputer/maxtext): the best dense MFU on v5p, "
    "71.47% (32B on v5p-128, model FLOPs / bf16 peak), taken as the GEMM fraction with sustained 1 (an end-to-end "
    "figure: it already holds what a step sustains); hbm, attention_fwd/bwd: ASSUMED the twin's generic defaults "
    "(twin.core.facts.DEFAULT_EFFICIENCY: 0.85, 0.55, 0.42), no published TPU kernel figures; kernel_min_us: 0, "
    "XLA compiles the step into one program (no per-kernel launch floor)")
EFFICIENCY: dict[str, dict[str, Any]] = {
    "tpu_v5p": {"gemm": {"bf16": 0.7147}, "attention_fwd": 0.55, "attention_bwd": 0.42, "hbm": 0.85, "sustained": 1.0,
                "kernel_min_us": 0.0, "flash_attention": True, "source": _TPU_EFF_SOURCE},
    "tpu_v6e": {"gemm": {"bf16": 0.7147}, "attention_fwd": 0.55, "attention_bwd": 0.42, "hbm": 0.85, "sustained": 1.0,
                "kernel_min_us": 0.0, "flash_attention": True,
                "source": "ASSUMED the TPU v5p profile (no published v6e MFU table outside the reference runs): "
                          + _TPU_EFF_SOURCE},
}
SYSTEMS: dict[str, dict[str, Any]] = {
    "TPU-v5p-1024": {
        "gpu": "TPU-v5p", "gpus_per_node": 4, "scale_out": None,
        "scale_up": {"fabric": "ici", "domain_gpus": 512, "params": {"dims": "8x8x8"}},
        "source": "Google Cloud TPU v5p: v5p-1024 = 512 chips (1,024 TensorCores), topology 8x8x8 (8 cubes), 4 chips "
                  "per host (ct5p-hightpu-4t); one slice, no data-center network modelled",
    },
    "TPU-v6e-256": {
        "gpu": "TPU-v6e", "gpus_per_node": 8, "scale_out": None,
        "scale_up": {"fabric": "ici", "domain_gpus": 256, "params": {"dims": "16x16"}},
        "source": "Google Cloud TPU v6e: a 256-chip pod, 16x16 2D torus, 8 chips per host; one slice, no data-center "
                  "network modelled",
    },
}


@hookimpl
def twin_presets() -> dict[str, dict[str, dict[str, Any]]]:
    """The TPUs, their efficiency profiles and slices."""
    return {"gpus": GPUS, "efficiency": EFFICIENCY, "systems": SYSTEMS}
