"""What a fault seen in telemetry does to a synchronous training job, by component kind and evidence.

A fault is not "bandwidth lost" by default. Each row of :data:`TABLE` says, for one kind of
component and one kind of evidence, which of four consequences follows, and why:

- ``interruption``: the job stops and restarts from its last checkpoint. It costs the work
  since that checkpoint (on average half the checkpoint interval: a failure is equally
  likely anywhere in the interval, Young 1974 / Daly 2006) plus the restart (detection,
  rescheduling on a replacement node for hardware faults, initialisation, checkpoint load:
  ``twin.core.failures.failure_spec.RestartSpec``). The step time after the restart is the
  healthy one: the interruption is a goodput cost, not a slower step.
- ``straggler``: one GPU runs slower; a synchronous step (data-parallel all-reduce, pipeline
  stages in lock-step) runs at the slowest rank's speed (Llama 3 paper §3.3.4: "one
  straggler can slow down thousands of other GPUs"). A GPU whose SM clock is a fraction f of
  its peers' runs its math at f of the rate (peak tensor throughput = SMs x FLOP/clock/SM x
  SM clock, NVIDIA H100 whitepaper), so the job's compute time becomes compute time / f;
  memory-bound kernels follow the memory clock and are left as they are.
- ``bandwidth``: a link is slower or gone and the collectives run on what is left. A NIC
  that is down leaves its node the bandwidth of its remaining NICs: NCCL spreads its
  channels over every NIC of the node (one per rail) and, with PXN (NCCL 2.12+), sends a
  GPU's traffic through a peer GPU's NIC over NVLink, so the node's scale-out bandwidth is
  (NICs up) / (NICs). A port that trained down or is paused by PFC keeps its measured
  fraction.
- ``none``: recorded, but nothing the step or goodput feels now (a corrected error, a row
  remap pending the next reset, an optics power warning on a link that still runs at rate).

XID meanings: NVIDIA XID catalog (docs.nvidia.com/deploy/xid-errors). Interruption causes:
the Llama 3 paper (arXiv 2407.21783, Table 5: 419 unexpected interruptions in 54 days, 58.7%
of them GPU faults; validation/reference/failures.yaml llama3-405b-interruptions-*).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Consequence = Literal["interruption", "straggler", "bandwidth", "none"]
XID_SRC = "NVIDIA XID catalog (docs.nvidia.com/deploy/xid-errors)"
LLAMA3_SRC = "Llama 3 paper (arXiv 2407.21783) Table 5"
NVML_SRC = "NVML nvmlClocksEventReasons (HW slowdown: clocks reduced by a factor of 2 or more)"
NCCL_SRC = "NCCL: channels spread over the node's NICs, PXN sends through a peer GPU's NIC (NCCL 2.12 release notes)"
# A GPU whose SM clock is within this fraction of its peers' median is not a straggler:
# DCGM samples clocks once per interval, and boost clocks of healthy GPUs under one power
# cap differ by a few percent (assumption; under it the calibration carries it).
STRAGGLER_TOLERANCE = 0.97
# NVML's HW slowdown (0x8) and power brake (0x80) halve the clocks or worse (NVML_SRC): the
# factor used when the GPU's SM clock is not reported.
HW_SLOWDOWN_FACTOR = 0.5


@dataclass(frozen=True, slots=True)
class Rule:
    """One row: a component kind, the evidence, the consequence, what it means, and its source.

    ``signal``: the twin signal the evidence is on; ``values``: the signal values the row
    covers (XID codes), empty for any value that fires the component's own rule;
    ``mask``: bits of a bitmask signal (throttle reasons). ``restart_in_place``: an
    interruption that needs no replacement node (an application error on a healthy GPU).
    """

    kind: str
    signal: str
    consequence: Consequence
    what: str
    source: str
    values: tuple[float, ...] = ()
    mask: int = 0
    restart_in_place: bool = False

    def applies(self, kind: str, signal: str, value: float) -> bool:
        """Whether this row covers evidence ``signal=value`` on a component of ``kind``."""
        if kind != self.kind or signal != self.signal:
            return False
        if self.values:
            return value in self.values
        if self.mask:
            return bool(int(value) & self.mask)
        return True


TABLE: tuple[Rule, ...] = (
    Rule("gpu", "xid", "interruption", "XID 79: the GPU has fallen off the bus; its process fails and the job "
         "restarts from its checkpoint on a replacement node", f"{XID_SRC}; {LLAMA3_SRC} (faulty GPU: 148 of 419)",
         values=(79.0,)),
    Rule("gpu", "xid", "interruption", "XID 48 / 95: uncorrectable (double-bit / uncontained) ECC error; the GPU "
         "needs a reset, the job restarts", f"{XID_SRC}; {LLAMA3_SRC} (GPU HBM3 memory: 72 of 419)",
         values=(48.0, 95.0)),
    Rule("gpu", "xid", "interruption", "XID 94: contained ECC error; the application using the memory is "
         "terminated, the job restarts", XID_SRC, values=(94.0,)),
    Rule("gpu", "xid", "interruption", "XID 119 / 120: GSP (GPU system processor) error; the GPU needs a reset",
         f"{XID_SRC}; {LLAMA3_SRC} (GPU system processor: 17 of 419)", values=(119.0, 120.0)),
    Rule("gpu", "xid", "interruption", "XID 74: NVLink error; the GPU needs a reset", XID_SRC, values=(74.0,)),
    Rule("gpu", "xid", "interruption", "XID 13 / 31 / 43: application error (graphics engine exception, memory "
         "page fault, stopped channel); the GPU is healthy, the job restarts in place",
         f"{XID_SRC}; {LLAMA3_SRC} (software bug: 54 of 419)", values=(13.0, 31.0, 43.0), restart_in_place=True),
    Rule("gpu", "xid", "none", "XID 63 / 64: ECC page retirement or row remap recorded (or failed to record); "
         "takes effect at the next GPU reset, service the GPU then", XID_SRC, values=(63.0, 64.0)),
    Rule("gpu", "xid", "none", "XID 92: high single-bit ECC rate (corrected)", XID_SRC, values=(92.0,)),
    Rule("gpu", "ecc_dbe_per_s", "interruption", "double-bit ECC errors: uncorrectable, the process using the "
         "memory fails (XID 48)", f"{XID_SRC}; {LLAMA3_SRC}"),
    Rule("gpu", "row_remap_failures", "none", "row remapping failed: the GPU needs service at the next restart",
         "NVIDIA A100/H100 memory error management guide"),
    Rule("gpu", "clock_event_reasons", "straggler", "clocks slowed (HW slowdown / thermal / power brake): the "
         "synchronous step runs at this GPU's speed", f"{NVML_SRC}; Llama 3 paper §3.3.4 (stragglers)",
         mask=0x08 | 0x20 | 0x40 | 0x80),
    Rule("gpu", "clock_event_reasons", "none", "clocks held at the power cap, as its peers' are (the calibration "
         "carries a uniform cap)", NVML_SRC, mask=0x04),
    Rule("ib_port", "state", "bandwidth", "the NIC is down: NCCL runs on the node's remaining NICs", NCCL_SRC),
    Rule("ib_port", "physical_state", "bandwidth", "the NIC's link is down: NCCL runs on the node's remaining NICs",
         NCCL_SRC),
    Rule("ib_port", "rate_Bps", "bandwidth", "the link trained down: its rings run at its measured rate",
         "IBTA link width/speed negotiation; the collective runs at its slowest link"),
    Rule("ib_port", "link_downed_per_s", "bandwidth", "the link flapped (went down and retrained): priced at its "
         "measured capacity; a link that stays down is priced as down", "IBTA PortCounters LinkDownedCounter"),
    Rule("roce_port", "paused_fraction", "bandwidth", "PFC storm: the port is paused this fraction of the time",
         "IEEE 802.1Qbb; mlx5 rx_prioN_pause_duration"),
    Rule("transceiver", "rx_power_dbm", "none", "receive power below the module's minimum: a warning; the link's "
         "own rate and errors price it when it degrades", "IEEE 802.3 / CMIS alarm thresholds (plugins/optics.py)"),
    Rule("nvlink", "crc_errors_per_s", "none", "NVLink CRC errors are retried by the link layer; priced when a "
         "link goes down", "DCGM NVLink health watch"),
)


@dataclass(frozen=True, slots=True)
class Part:
    """What the table needs of one live component."""

    id: str
    kind: str
    host: str
    tier: str
    state: str
    capacity: float
    signals: Mapping[str, float]
    evidence: tuple[tuple[str, float, str], ...] = ()  # (signal, value, severity) of rules that fired


@dataclass(frozen=True, slots=True)
class Fault:
    """One part's consequence for a job: ``factor`` is the clock or bandwidth fraction (1 for none/interruption)."""

    component: str
    host: str
    kind: str
    consequence: Consequence
    evidence: str
    what: str
    source: str
    factor: float = 1.0
    restart_in_place: bool = False

    def why(self) -> str:
        """One line for the estimate's notes."""
        extra = f" (x{self.factor:.2f})" if self.consequence in ("straggler", "bandwidth") else ""
        return f"{self.component}: {self.evidence} -> {self.consequence}{extra}: {self.what} [{self.source}]"


def classify(part: Part) -> list[Fault]:
    """The table's rows for every rule that fired on ``part`` (severity degraded/down).

    A part with firing evidence no row covers is priced generically: a down GPU interrupts
    the job; a scale-up/scale-out link at capacity < 1 costs bandwidth; anything else is
    recorded as ``none``.
    """
    out: list[Fault] = []
    for signal, value, severity in part.evidence:
        if severity not in ("degraded", "down"):
            continue
        row = next((r for r in TABLE if r.applies(part.kind, signal, value)), None)
        text = f"{signal}={value:g}" if signal != "clock_event_reasons" else f"{signal}={int(value):#x}"
        if row is not None:
            out.append(Fault(part.id, part.host, part.kind, row.consequence, text, row.what, row.source,
                             restart_in_place=row.restart_in_place))
        elif part.kind == "gpu" and severity == "down":
            out.append(Fault(part.id, part.host, part.kind, "interruption", text, "the GPU is down: the job "
                             "restarts from its checkpoint", LLAMA3_SRC))
        elif part.tier in ("scale_up", "scale_out") and (severity == "down" or part.capacity < 1.0):
            out.append(Fault(part.id, part.host, part.kind, "bandwidth", text, "the link runs at its measured "
                             "capacity; the collective runs at its slowest link", "twin.core.health"))
        else:
            out.append(Fault(part.id, part.host, part.kind, "none", text, "recorded; no consequence the twin prices",
                             "twin.core.fault_kinds"))
    return out


def table_rows() -> list[dict[str, object]]:
    """The table as plain data (docs, the API)."""
    return [{"kind": r.kind, "signal": r.signal, "values": list(r.values), "mask": r.mask,
             "consequence": r.consequence, "what": r.what, "source": r.source} for r in TABLE]
