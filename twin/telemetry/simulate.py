"""A small simulated cluster whose exporters push real OTLP through the OpenTelemetry SDK.

Each simulated node reports what its exporters would: dcgm-exporter (GPU temperature,
utilisation, XID, NVLink bandwidth and CRC errors), node_exporter InfiniBand port
counters (bytes, symbol errors, link downs, state, rate), mlx5 RoCE congestion counters
(PFC pause time, ECN marks, CNPs) and transceiver DOM/FEC; a training job reports its
step time as ``twin.training.step_time``. Metric names are the exporters' own; the SDK
lower-cases them, as it does in production. ``twin demo`` and the tests drive it.

Counters advance by rate x the real time between collections (inside the SDK's
collection, next to its timestamps), so the rates the twin derives are the simulated ones
whatever the push cadence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult, MetricsData
from opentelemetry.sdk.resources import Resource

# NDR InfiniBand: 400 Gb/s = 50 GB/s per port per direction (NVIDIA ConnectX-7 datasheet);
# a link that trains down to 2 of its 4 lanes runs at half that.
NDR_BYTES_PER_S = 50e9
# H100 SXM NVLink 4: 450 GB/s per direction (NVIDIA H100 datasheet).
NVLINK_BYTES_PER_S = 450e9
# H100 SXM maximum SM clock, 1,980 MHz (NVIDIA H100 datasheet boost clock).
SM_CLOCK_MHZ = 1980.0


@dataclass
class Port:
    """One InfiniBand/RoCE NIC port with its transceiver."""

    device: str
    state: str = "up"  # up | degraded | down
    tx_bytes: float = 0.0
    rx_bytes: float = 0.0
    symbol_errors: float = 0.0
    link_downed: float = 0.0
    pause_us: float = 0.0
    ecn_marked: float = 0.0
    fec_uncorrectable: float = 0.0

    @property
    def rate(self) -> float:
        """Negotiated rate in bytes/s."""
        return {"up": NDR_BYTES_PER_S, "degraded": NDR_BYTES_PER_S / 2, "down": 0.0}[self.state]


@dataclass
class Node:
    """A node: GPUs and one NIC port per GPU (rail design)."""

    name: str
    gpus: int = 8
    ports: list[Port] = field(default_factory=list)
    last: float = field(default_factory=time.time)
    # Per GPU index: SM clock as a fraction of SM_CLOCK_MHZ, last XID, clock event reasons bitmask.
    clock: dict[int, float] = field(default_factory=dict)
    xid: dict[int, int] = field(default_factory=dict)
    reasons: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ports:
            self.ports = [Port(f"mlx5_{i}") for i in range(self.gpus)]


class SimulatedCluster:
    """Nodes + a training job, exporting through one OTLPMetricExporter per node."""

    def __init__(self, endpoint: str, nodes: int = 2, gpus_per_node: int = 8, job: str = "demo-job",
                 step_time_s: float = 1.0, compression: Any = None, prefix: str = "node-",
                 resource: dict[str, str] | None = None) -> None:
        """``prefix``: host names are prefix + 1, 2, ...; ``resource``: more resource attributes of
        every node's exporters (a scheduler's, e.g. ``k8s.job.name``).
        """
        self.endpoint = endpoint
        self.nodes = [Node(f"{prefix}{i + 1}", gpus_per_node) for i in range(nodes)]
        self.job = job
        self.step_time_s = step_time_s
        self.utilization_busy = 0.92
        self._providers: list[tuple[MeterProvider, InMemoryMetricReader, OTLPMetricExporter]] = []
        for node in self.nodes:
            reader = InMemoryMetricReader()
            provider = MeterProvider(metric_readers=[reader], resource=Resource.create(
                {"host.name": node.name, "service.name": "node-exporters", **(resource or {})}))
            self._instruments(provider, node)
            exporter = OTLPMetricExporter(endpoint=endpoint, insecure=True, compression=compression, timeout=30)
            self._providers.append((provider, reader, exporter))
        # The job's own metric, from rank 0 of the job (on the first node).
        self._step_gauge = self._providers[0][0].get_meter("training").create_gauge(
            "twin.training.step_time", unit="s", description="seconds per optimizer step")

    # ---------------------------------------------------------------- instruments
    def _instruments(self, provider: MeterProvider, node: Node) -> None:
        meter = provider.get_meter("exporters")
        per_port = {"device": None, "port": "1"}

        def ports(fn: Any) -> Any:
            def cb(options: CallbackOptions) -> list[Observation]:
                self._advance(node)  # at collection time, so counters match the SDK's timestamps
                return [Observation(fn(p), {**per_port, "device": p.device}) for p in node.ports]
            return [cb]

        def gpus(fn: Any) -> Any:
            def cb(options: CallbackOptions) -> list[Observation]:
                return [Observation(fn(i), {"gpu": str(i), "Hostname": node.name}) for i in range(node.gpus)]
            return [cb]

        counter, gauge = meter.create_observable_counter, meter.create_observable_gauge
        # node_exporter InfiniBand
        counter("node_infiniband_port_data_transmitted_bytes_total", ports(lambda p: p.tx_bytes))
        counter("node_infiniband_port_data_received_bytes_total", ports(lambda p: p.rx_bytes))
        counter("node_infiniband_symbol_error_total", ports(lambda p: p.symbol_errors))
        counter("node_infiniband_link_downed_total", ports(lambda p: p.link_downed))
        gauge("node_infiniband_state_id", ports(lambda p: 1 if p.state == "down" else 4))
        gauge("node_infiniband_physical_state_id", ports(lambda p: 3 if p.state == "down" else 5))
        gauge("node_infiniband_rate_bytes_per_second", ports(lambda p: p.rate))
        # mlx5 RoCE congestion counters (node_exporter ethtool / hw_counters names)
        counter("node_ethtool_rx_prio3_pause_duration", [lambda o: [
            Observation(p.pause_us, {"device": p.device}) for p in node.ports]])
        counter("np_ecn_marked_roce_packets", [lambda o: [
            Observation(p.ecn_marked, {"device": p.device}) for p in node.ports]])
        # transceiver DOM / FEC
        gauge("transceiver_rx_power_dbm", [lambda o: [
            Observation(-9.0 if p.state != "up" else -1.5, {"device": p.device, "lane": "0"}) for p in node.ports]])
        gauge("transceiver_temperature_celsius", [lambda o: [
            Observation(48.0, {"device": p.device}) for p in node.ports]])
        counter("fec_uncorrectable_blocks", [lambda o: [
            Observation(p.fec_uncorrectable, {"device": p.device}) for p in node.ports]])
        # dcgm-exporter
        gauge("DCGM_FI_DEV_GPU_TEMP", gpus(lambda i: 62.0 + i))
        gauge("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpus(lambda i: self.utilization_busy))
        gauge("DCGM_FI_DEV_XID_ERRORS", gpus(lambda i: node.xid.get(i, 0)))
        gauge("DCGM_FI_DEV_SM_CLOCK", gpus(lambda i: round(SM_CLOCK_MHZ * node.clock.get(i, 1.0))))
        gauge("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpus(lambda i: node.reasons.get(i, 0)))
        gauge("DCGM_FI_PROF_NVLINK_TX_BYTES", gpus(lambda i: 0.35 * NVLINK_BYTES_PER_S))
        counter("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", gpus(lambda i: 0))

    # ---------------------------------------------------------------- driving
    def port(self, node: int, index: int) -> Port:
        """Port ``index`` of node ``node`` (0-based)."""
        return self.nodes[node].ports[index]

    def set_gpu(self, node: int, index: int, *, clock: float | None = None, xid: int | None = None,
                reasons: int | None = None) -> None:
        """Set GPU ``index`` of node ``node``: SM clock fraction, last XID, clock event reasons bitmask."""
        n = self.nodes[node]
        for table, value in ((n.clock, clock), (n.xid, xid), (n.reasons, reasons)):
            if value is not None:
                table[index] = value  # type: ignore[index]

    def set_port(self, node: int, index: int, state: str) -> None:
        """Degrade (trains down to half rate, errors, low receive power) or take down a port."""
        p = self.port(node, index)
        if state == "down" and p.state != "down":
            p.link_downed += 1
        p.state = state

    def _advance(self, node: Node) -> None:
        """Move the node's counters forward by the real time since they last moved."""
        now = time.time()
        dt = now - node.last
        if dt < 0.01:  # the same collection: every callback but the first sees dt ~ 0
            return
        node.last = now
        for p in node.ports:
            bw = 0.8 * p.rate
            p.tx_bytes += bw * dt
            p.rx_bytes += bw * dt
            if p.state == "degraded":
                p.symbol_errors += 50 * dt
                p.fec_uncorrectable += 5 * dt
            # A healthy port is paused ~0.5% of the time, a degraded one 20%; a port that is down
            # carries nothing and is paused never.
            p.pause_us += 1e6 * dt * {"up": 0.005, "degraded": 0.2, "down": 0.0}[p.state]
            p.ecn_marked += 1000 * dt

    def collect(self) -> list[tuple[OTLPMetricExporter, MetricsData]]:
        """Collect every node's metrics now (the job's step time too)."""
        self._step_gauge.set(self.step_time_s, {"job": self.job})
        return [(exp, reader.get_metrics_data()) for _, reader, exp in self._providers]

    def push(self) -> list[MetricExportResult]:
        """Collect and export every node's metrics."""
        return [exp.export(data) for exp, data in self.collect()]

    def shutdown(self) -> None:
        """Close exporters and providers."""
        for provider, _, exp in self._providers:
            exp.shutdown()
            provider.shutdown()
