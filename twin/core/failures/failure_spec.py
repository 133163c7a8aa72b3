"""The ``failures:`` section of a scenario file: rate overrides, checkpointing, restart,
spares, redundancy, injected failures and the Monte-Carlo horizon.

    failures:
      rates: {gpu: 0.05, "switch.leaf:down": 0.01}   # per unit per year; "component" or "component:mode"
      checkpoint: {storage_GBps: 2000, bytes_per_param: 14}
      restart: {reschedule_s: 300, init_s: 120}
      spare_nodes: 4          # hot spares held by the job (null: the cluster's pool always has one)
      elastic: true           # the framework can drop data-parallel replicas and continue
      inject:
        - {kind: switch_down, tier: spine}
        - {kind: link_degraded, component: link.leaf-spine, lanes_fraction: 0.5}
      monte_carlo: {trials: 200, horizon_days: 30}

Loaded strictly (unknown keys, wrong types and out-of-range numbers name the field), like
every other spec (``twin.core.schema``). Defaults and their sources are on each field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from twin.core import schema
from twin.core.errors import SpecError
from twin.core.schema import spec_field

InjectKind = Literal["component_down", "link_degraded", "congestion", "straggler", "switch_down",
                     "cxl_device_lost", "laser_failure"]
INJECT_KINDS: tuple[str, ...] = ("component_down", "link_degraded", "congestion", "straggler", "switch_down",
                                 "cxl_device_lost", "laser_failure")
RateSet = Literal["llama3", "meta-rsc1", "meta-rsc2"]

# Checkpoint bytes per parameter: fp32 master weights + Adam m and v (12 B) + the 16-bit
# weights (2 B): BLOOM-176B's checkpoint is 2.3 TB = 14 B/param (validation/reference/
# failures.yaml: bloom-176b-checkpoint); DGX Cloud's Llama 3.1 405B checkpoint ~5.2 TB
# (dgxc-checkpoint-sizes) is 12.8 B/param, within 10 %.
CHECKPOINT_BYTES_PER_PARAM = 14.0
# Storage write bandwidth when unstated: Llama 3's 2 TB/s sustained for 16,384 GPUs
# (failures.yaml: llama3-checkpoint-storage), i.e. ~122 MB/s per GPU, scaled to the job.
STORAGE_BYTES_PER_S_PER_GPU = 2e12 / 16384
# Asynchronous checkpointing blocks only for the device-to-host copy of each GPU's shard:
# PCIe Gen5 x16 achieves ~55 GB/s of 63 per direction (85% DMA efficiency, as the host
# memory fabric plugins/host_memory.py assumes for offloading).
HOST_COPY_GBPS = 55.0


@dataclass(frozen=True, slots=True)
class CheckpointSpec:
    """How checkpoints are written. ``interval_s`` None: the optimal (Daly 2006) interval."""

    interval_s: float | None = spec_field(None, gt=0)
    bytes_per_param: float = spec_field(CHECKPOINT_BYTES_PER_PARAM, gt=0)
    size_bytes: float | None = spec_field(None, gt=0, doc="None: parameters x bytes_per_param")
    storage_GBps: float | None = spec_field(None, gt=0, doc="None: 2 TB/s per 16,384 GPUs (Llama 3), scaled")
    read_GBps: float | None = spec_field(None, gt=0, doc="None: same as storage_GBps")
    asynchronous: bool = False
    host_copy_GBps: float = spec_field(HOST_COPY_GBPS, gt=0)


@dataclass(frozen=True, slots=True)
class RestartSpec:
    """Restart time = detection + (re)scheduling + initialisation + checkpoint load.

    Defaults are modelling assumptions (no restart-time figure in validation/reference):
    ``reschedule_s`` the scheduler draining a failed node and bringing a healthy one from
    the cluster's pool (Huawei MindCluster's recovery breakdown names this step T1);
    ``hot_spare_s`` a warm spare that already holds the job's container (NVIDIA Resiliency
    Extension in-job restart with hot spares); ``init_s`` process launch, NCCL
    communicator initialisation and model construction. ``detection_s`` None: per failure
    mode (30 s for crashes, 600 s for hangs; see ``rates.py``).
    """

    detection_s: float | None = spec_field(None, ge=0)
    reschedule_s: float = spec_field(300.0, ge=0)
    hot_spare_s: float = spec_field(30.0, ge=0)
    init_s: float = spec_field(120.0, ge=0)


@dataclass(frozen=True, slots=True)
class Injection:
    """One failure or degradation to apply to the job ("what happens if ...").

    ``component_down``: a member of ``component`` (a group name from the inventory) fails
    (``mode`` picks one of its failure modes; default ``down`` or the first).
    ``switch_down``: a switch of ``tier`` (leaf, spine, core ...). ``link_degraded``: a link
    of ``component`` runs with ``lanes_fraction`` of its lanes, ``speed_fraction`` of its
    rate and/or a post-FEC bit-error rate ``ber`` (retransmissions).
    ``congestion``: ``cause`` pfc_storm or ecmp_collision keeps ``fraction`` of bandwidth for
    ``duration_s``. ``straggler``: ``cause`` thermal_throttle or slow_hbm, one GPU at
    ``fraction`` of its throughput. ``cxl_device_lost``: one CXL device of a node.
    ``laser_failure``: the laser of a link of ``component`` (a pluggable transceiver, or a
    co-packaged switch's external laser source feeding several ports).
    """

    kind: InjectKind
    component: str | None = None
    mode: str | None = None
    tier: str | None = None
    count: int = spec_field(1, ge=1)
    lanes_fraction: float = spec_field(1.0, gt=0, le=1)
    speed_fraction: float = spec_field(1.0, gt=0, le=1)
    ber: float = spec_field(0.0, ge=0, lt=1)
    cause: str | None = None
    fraction: float | None = spec_field(None, gt=0, le=1)
    duration_s: float | None = spec_field(None, gt=0)

    def label(self) -> str:
        """Short human-readable description."""
        bits = [self.kind]
        for name in ("component", "mode", "tier", "cause"):
            value = getattr(self, name)
            if value:
                bits.append(f"{name}={value}")
        if self.count != 1:
            bits.append(f"count={self.count}")
        for name in ("lanes_fraction", "speed_fraction"):
            if getattr(self, name) != 1.0:
                bits.append(f"{name}={getattr(self, name)}")
        if self.ber:
            bits.append(f"ber={self.ber:g}")
        if self.fraction is not None:
            bits.append(f"fraction={self.fraction}")
        return " ".join(bits)


@dataclass(frozen=True, slots=True)
class MonteCarloSpec:
    """Event simulation over a horizon: ``trials`` runs of ``horizon_days`` each."""

    trials: int = spec_field(200, ge=1, le=100000)
    horizon_days: float = spec_field(30.0, gt=0, le=3650)
    seed: int = spec_field(0, ge=0)
    batch_trials: int = spec_field(50, ge=1)


@dataclass(frozen=True, slots=True)
class FailureSpec:
    """The failures section of a scenario (every field optional)."""

    rates: dict[str, float] = field(default_factory=dict)
    rate_set: RateSet = "llama3"
    rate_scale: float = spec_field(1.0, ge=0)
    repair_h: dict[str, float] = field(default_factory=dict)
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    restart: RestartSpec = field(default_factory=RestartSpec)
    spare_nodes: int | None = spec_field(None, ge=0, doc="hot spares; None: the cluster pool always has a node")
    elastic: bool = False
    planned_per_day: float | None = spec_field(None, ge=0, doc="None: Llama 3's 47 planned in 54 days")
    spare_uplinks: float = spec_field(0.0, ge=0, doc="redundant uplinks per switch (an extra spine)")
    inject: tuple[Injection, ...] = ()
    monte_carlo: MonteCarloSpec | None = None


def load_failure_spec(data: Any, path: str = "failures") -> FailureSpec:
    """Strictly load a ``failures:`` mapping (``None`` gives the defaults)."""
    if data is None:
        return FailureSpec()
    spec = schema.load(FailureSpec, data, path)
    for key, value in spec.rates.items():
        if value < 0:
            raise SpecError(f"{path}.rates.{key}", f"must be >= 0 (got {value})")
    for key, value in spec.repair_h.items():
        if value < 0:
            raise SpecError(f"{path}.repair_h.{key}", f"must be >= 0 (got {value})")
    return spec


def split_scenario(data: Any) -> tuple[Any, Any]:
    """(scenario mapping without ``failures``, the ``failures`` mapping or None)."""
    if not isinstance(data, Mapping):
        return data, None
    rest = {k: v for k, v in data.items() if k != "failures"}
    return rest, data.get("failures")


def _scalar(text: str) -> Any:
    """An integer, a number (``1e-7`` too), a boolean, null or a string."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    return text


def parse_injection(text: str, index: int = 0) -> Injection:
    """``KIND[:key=value,key=value]`` (the CLI's ``--inject``) -> :class:`Injection`."""
    path = f"--inject[{index}]"
    kind, _, rest = text.strip().partition(":")
    data: dict[str, Any] = {"kind": kind.strip()}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SpecError(path, f"expected KIND:key=value,key=value (got {text!r})")
        data[key.strip()] = _scalar(value.strip())
    return schema.load(Injection, data, path)
