"""Host memory as an offload target: PCIe on x86 hosts, NVLink-C2C on Grace superchips."""

from __future__ import annotations

import pytest
from twin_plugins.host_memory import HostMemory

from twin.core.errors import SpecError
from twin.core.scenario_io import resolve_cluster
from twin.core.units import GIB


def _cluster(engine, system, n):
    return resolve_cluster({"system": system, "num_gpus": n}, engine.catalog)


def test_the_host_link_follows_the_host(engine):
    host = HostMemory()
    h100 = _cluster(engine, "DGX-H100", 64)
    gb200 = _cluster(engine, "GB200-NVL72", 72)
    a100 = _cluster(engine, "DGX-A100", 64)
    # PCIe Gen5 x16, 63 GB/s per direction at 85% DMA efficiency; Gen4 half of it.
    assert host.bandwidth_per_gpu_Bps(h100) == pytest.approx(63e9 * 0.85)
    assert host.bandwidth_per_gpu_Bps(a100) == pytest.approx(31.5e9 * 0.85)
    # GB200: two GPUs share one Grace: min(450 GB/s C2C, 512/2 GB/s LPDDR5X) / 2.
    assert host.bandwidth_per_gpu_Bps(gb200) == pytest.approx(128e9)
    # DGX H100: 2 TiB for 8 GPUs, 10% kept by the host; Grace: 480 GB for two GPUs.
    assert host.capacity_per_gpu_bytes(h100) == pytest.approx(2048 * GIB / 8 * 0.9)
    assert host.capacity_per_gpu_bytes(gb200) == pytest.approx(480e9 / 2 * 0.9)


def test_offloading_the_optimizer_costs_its_traffic_over_the_host_link(engine):
    def offload_s(system, n, gbs):
        scn = {"cluster": {"system": system, "num_gpus": n}, "model": "llama3.1-70b",
               "plan": {"gbs": gbs, "tp": 8, "offload": {"optimizer": "host"}}}
        return engine.evaluate(scn).breakdown.offload_s

    h100, gb200 = offload_s("DGX-H100", 64, 64), offload_s("GB200-NVL72", 72, 72)
    assert h100 > 0 and gb200 > 0
    # Same bytes per GPU (dp 8 vs 9 shards the states): time goes with 1 / (link x shards), but for
    # the round trip each of the three state copies pays (1 us over PCIe, 0.5 over C2C: a few
    # microseconds on transfers of about a second).
    assert h100 / gb200 == pytest.approx((128e9 * 9) / (63e9 * 0.85 * 8), rel=1e-5)


def test_host_is_not_a_pool(engine):
    scn = {"cluster": {"system": "DGX-H100", "num_gpus": 64, "memory_pool": {"fabric": "host"}},
           "model": "llama3.1-8b", "plan": {"gbs": 64}}
    with pytest.raises(SpecError) as err:
        engine.evaluate(scn)
    assert err.value.field == "cluster.memory_pool.fabric"
