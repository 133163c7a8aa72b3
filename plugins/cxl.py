"""CXL memory pooling: a memory tier with capacity, bandwidth and latency that plans can
offload optimizer state, parameters or activations to, plus the strategy that charges
the traffic to the step.

Bandwidth: a CXL 2.0/3.0 x16 device on PCIe Gen5 signalling carries 64 GB/s per
direction (CXL Consortium, CXL 2.0 specification); measured devices sustain ~70-80% of
it (Sun et al., MICRO 2023, "Demystifying CXL Memory with Genuine CXL-Ready Systems and
Devices"). Latency: ~170-250 ns load-to-use over local DRAM's ~100 ns (same paper).
The pool is a tier of its own: ``plan.offload.<what>: cxl`` keeps state there, ``host``
in host DRAM (``plugins/host_memory.py``) even when a pool exists.
"""

from __future__ import annotations

from typing import Any

from twin.api import (
    GIB,
    Cluster,
    ComponentGroup,
    Condition,
    EvalContext,
    FailureMode,
    Hierarchy,
    Impact,
    MemoryFabric,
    MetricMapping,
    Scenario,
    SpecError,
    Strategy,
    Terms,
    hookimpl,
    offload_terms,
    ops,
)

# Share of a pool's stated bandwidth that bulk offload DMA sustains. An assumption, not a
# measurement: PCIe/CXL framing (128b/130b, 68-byte flits carrying 64 bytes, TLP and credit
# traffic) leaves roughly 80-85% of the raw link, and CXL memory devices measure below
# their link rate (Sun et al., MICRO 2023, "Demystifying CXL Memory"); no GPU-to-CXL-pool
# training measurement is in validation/reference to fit it.
SUSTAINED_FRACTION = 0.75
DEVICE_GBPS_LIMIT = 64.0  # one x16 device, per direction


class CXLPool(MemoryFabric):
    """A CXL memory pool shared by the GPUs of a node, reached over each GPU's host link
    (``twin.api.MemoryTiers``: the pool's path is the slower of its share and the link, its
    latency the link's round trip with the pool's ``latency_ns`` in place of local DRAM's).
    """

    kind = "cxl"
    summary = "CXL memory pool: capacity, bandwidth, latency; offload target for optimizer/params/activations"

    def validate(self, cluster: Cluster, path: str) -> None:
        pool = cluster.memory_pool
        assert pool is not None
        ceiling = pool.devices_per_node * DEVICE_GBPS_LIMIT
        if pool.bandwidth_GBps_per_node > ceiling:
            raise SpecError(f"{path}.memory_pool.bandwidth_GBps_per_node",
                            f"must be <= devices_per_node x {DEVICE_GBPS_LIMIT:.0f} GB/s ({ceiling:.0f}) "
                            f"(got {pool.bandwidth_GBps_per_node})")
        if pool.params:
            raise SpecError(f"{path}.memory_pool.params.{sorted(pool.params)[0]}", "unknown parameter for cxl")

    def bandwidth_per_gpu_Bps(self, cluster: Cluster) -> float:
        pool = cluster.memory_pool
        assert pool is not None
        return pool.bandwidth_GBps_per_node * 1e9 * SUSTAINED_FRACTION / cluster.gpus_per_node

    def latency_s(self, cluster: Cluster) -> float:
        """The pool's load-to-use latency (``memory_pool.latency_ns``): charged once per copy and
        bounding the rate of reads from the pool (``twin.api.offload_terms``).
        """
        pool = cluster.memory_pool
        assert pool is not None
        return pool.latency_ns * 1e-9

    def capacity_per_gpu_bytes(self, cluster: Cluster) -> float:
        pool = cluster.memory_pool
        assert pool is not None
        return pool.capacity_gib_per_node * GIB / cluster.gpus_per_node

    def report(self, cluster: Cluster, hierarchy: Hierarchy) -> dict[str, Any]:
        pool = cluster.memory_pool
        assert pool is not None
        return {"kind": self.kind, "capacity_gib_per_gpu": self.capacity_per_gpu_bytes(cluster) / GIB,
                "bandwidth_GBps_per_gpu": self.bandwidth_per_gpu_Bps(cluster) / 1e9,
                "latency_ns": pool.latency_ns, "devices": pool.devices_per_node * cluster.num_nodes}


class OffloadStrategy(Strategy):
    """Charges offloaded state's traffic to the step, each kind on the tier its target names
    (``host``: host DRAM over PCIe or NVLink-C2C; ``cxl``: the pool): activations written out in
    the forward and read back in the backward, parameters fetched per pass, each hidden behind
    that pass's compute as far as the schedule allows; the optimizer state streamed once a step.
    The model is ``twin.api.offload_terms`` (sources there).
    """

    name = "offload"
    dimension = "offload"
    phase = "step"
    # Its traffic goes to host memory or the pool over the host link, not over the network.
    traffic = ()
    # DMA over the host link (copy engines), not SM work.
    interferes = False
    summary = "Offload of optimizer state / parameters / activations to host DRAM or a CXL pool"

    def active(self, ctx: EvalContext) -> Any:
        o = ctx.plan.offload
        return ops.logical_or(ops.logical_or(o.optimizer != "none", o.params != "none"), o.activations != "none")

    def evaluate(self, ctx: EvalContext) -> Terms:
        return offload_terms(ctx)


@hookimpl
def twin_fabrics() -> list[MemoryFabric]:
    """Register the CXL pool."""
    return [CXLPool()]


@hookimpl
def twin_strategies() -> list[Strategy]:
    """Register the offload strategy."""
    return [OffloadStrategy()]


# ------------------------------------------------------------------ failure scenarios
@hookimpl
def twin_components(scenario: Scenario, hierarchy: Hierarchy, switch_radix: int | None) -> list[ComponentGroup] | None:
    """The CXL memory devices of every node's pool."""
    pool = scenario.cluster.memory_pool
    if pool is None or pool.fabric != CXLPool.kind:
        return None
    return [ComponentGroup("cxl_device", "cxl_device", pool.devices_per_node * scenario.cluster.num_nodes,
                           CXLPool.kind, attrs={"per_node": pool.devices_per_node,
                                                "gib_each": pool.capacity_gib_per_node / pool.devices_per_node},
                           source="cluster.memory_pool.devices_per_node x nodes")]


@hookimpl
def twin_failure_modes(component: ComponentGroup, scenario: Scenario, hierarchy: Hierarchy,
                       switch_radix: int | None) -> list[FailureMode] | None:
    """A lost CXL device: state offloaded there is gone (crash), and the pool shrinks."""
    if component.name != "cxl_device" or component.fabric != CXLPool.kind:
        return None
    pool = scenario.cluster.memory_pool
    assert pool is not None
    offload = scenario.plan.offload
    used = "cxl" in (offload.optimizer, offload.params, offload.activations)
    d = pool.devices_per_node
    # Interleaved pool memory (CXL 2.0 interleave sets span the devices): losing one
    # device loses data in the job's address range, so a job with state there crashes;
    # it can restart with the node's pool at (d-1)/d capacity and bandwidth, if its
    # offloaded state still fits (the memory model re-checks).
    impact = Impact(pool=(d - 1) / d, note=f"node pool on {d - 1} of {d} CXL devices") if d > 1 else None
    return [FailureMode("cxl_device", "down", "down", None,
                        "no published CXL device failure rate in validation/reference (set failures.rates)",
                        interrupts=used, nodes_lost=1 if used else 0,
                        degraded=impact if used else Impact(note="the job keeps nothing in the pool"),
                        detection_s=30.0, repair_h=48.0, repair_source="assumption (a device swap)",
                        description="CXL memory device lost")]


# ----------------------------------------------------------------------- telemetry
# CXL memory device health: the fields of the CXL 2.0 "Get Health Info" mailbox command
# (§8.2.9.8.3.1; Linux `cxl list -H` prints them) published as cxl_* metrics per memdev.
# Health Status bits (Table 181): 0 maintenance needed, 1 performance degraded,
# 2 hardware replacement needed. Media Status (Table 182): 0 normal.
_MEMDEV = ("memdev|device",)
CXL_MAPPINGS = [
    MetricMapping(("{*}cxl_health_status",), "cxl_device", "health_status", identity=_MEMDEV, tier="memory",
                  aggregate="max",
                  conditions=(Condition("degraded", "mask", float(0b110),
                                        "CXL health status: performance degraded or hardware replacement needed"),
                              Condition("info", "mask", float(0b001), "CXL health status: maintenance needed")),
                  source="CXL 2.0 Get Health Info, Health Status bitmask"),
    MetricMapping(("{*}cxl_media_status",), "cxl_device", "media_status", identity=_MEMDEV, tier="memory",
                  aggregate="max",
                  conditions=(Condition("down", "not_in", (0.0,), "CXL media status not normal (Table 182)"),),
                  source="CXL 2.0 Get Health Info, Media Status"),
    MetricMapping(("{*}cxl_life_used_percent", "{*}cxl_health_life_used"), "cxl_device", "life_used_pct",
                  identity=_MEMDEV, tier="memory", aggregate="max", unit="%",
                  conditions=(Condition("degraded", ">", 90.0, "over 90% of rated life used (twin threshold; "
                                        "the device also raises its own Life Used warning)"),),
                  source="CXL 2.0 Get Health Info, Life Used"),
    MetricMapping(("{*}cxl_device_temperature_celsius", "{*}cxl_health_temperature"), "cxl_device",
                  "temperature_c", identity=_MEMDEV, tier="memory", aggregate="max", unit="C",
                  source="CXL 2.0 Get Health Info, Device Temperature"),
    MetricMapping(("{*}cxl_corrected_volatile_errors", "{*}cxl_corrected_persistent_errors"), "cxl_device",
                  "corrected_errors_per_s", kind="counter", identity=_MEMDEV, tier="memory", unit="1/s",
                  conditions=(Condition("info", ">", 0.0, "corrected media errors"),),
                  source="CXL 2.0 Get Health Info, Corrected Volatile/Persistent Error Count"),
    MetricMapping(("{*}cxl_dirty_shutdowns",), "cxl_device", "dirty_shutdowns_per_s", kind="counter",
                  identity=_MEMDEV, tier="memory", unit="1/s",
                  conditions=(Condition("info", ">", 0.0, "dirty shutdown recorded"),),
                  source="CXL 2.0 Get Health Info, Dirty Shutdown Count"),
]


@hookimpl
def twin_metric_mappings() -> list[MetricMapping]:
    """CXL memory device health metrics."""
    return list(CXL_MAPPINGS)
