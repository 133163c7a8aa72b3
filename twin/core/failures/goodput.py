"""Checkpoint interval and effective training time of a job under Poisson interruptions.

- Young (1974), "A first order approximation to the optimum checkpoint interval",
  CACM 17(9): tau = sqrt(2 * delta * M) for checkpoint write time delta and mean time
  between interruptions M.
- Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart
  dumps", FGCS 22(3): tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta/(2M)) + delta/(18 M)]
  - delta for delta < 2M (else tau = M), and the expected wall time of T_s of work with
  restart time R:  T_w = M e^{R/M} (e^{(tau+delta)/M} - 1) T_s / tau  (failures may
  strike during computation, checkpoint writes and restarts alike). The effective
  training time of the checkpoint/restart cycle is T_s / T_w.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def young_interval(write_s: float, mtbi_s: float) -> float:
    """Young's first-order optimal checkpoint interval (seconds of compute)."""
    if not math.isfinite(mtbi_s):
        return math.inf
    return math.sqrt(2.0 * write_s * mtbi_s)


def daly_interval(write_s: float, mtbi_s: float) -> float:
    """Daly's higher-order optimal checkpoint interval (seconds of compute between writes)."""
    if not math.isfinite(mtbi_s):
        return math.inf
    if write_s <= 0:
        return 0.0
    if write_s >= 2.0 * mtbi_s:
        return mtbi_s
    r = write_s / (2.0 * mtbi_s)
    return math.sqrt(2.0 * write_s * mtbi_s) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - write_s


def daly_efficiency(interval_s: float, write_s: float, restart_s: float, mtbi_s: float) -> float:
    """T_s / T_w of Daly's model: the fraction of wall time that is useful work."""
    if not math.isfinite(mtbi_s):
        return interval_s / (interval_s + write_s) if math.isfinite(interval_s) and interval_s > 0 else 1.0
    if interval_s <= 0:
        return 0.0
    x = (interval_s + write_s) / mtbi_s
    y = restart_s / mtbi_s
    if x > 700 or y > 700:
        return 0.0
    return interval_s / (mtbi_s * math.exp(y) * math.expm1(x))


@dataclass(frozen=True, slots=True)
class CycleLoss:
    """Where the checkpoint/restart cycle's wall time goes (fractions of wall time)."""

    useful: float
    checkpointing: float
    lost_work: float
    restart: float


def cycle_breakdown(interval_s: float, write_s: float, restart_s: float, mtbi_s: float) -> CycleLoss:
    """Daly's useful fraction, with the loss split by first-order shares.

    First order (Young): per unit wall time, writes take delta/(tau+delta); each
    interruption loses (tau+delta)/2 of work and R of restart. The exact total loss
    (1 - Daly efficiency) is split in those proportions.
    """
    useful = daly_efficiency(interval_s, write_s, restart_s, mtbi_s)
    total = max(0.0, 1.0 - useful)
    if not math.isfinite(mtbi_s):
        return CycleLoss(useful, total, 0.0, 0.0)
    cyc = interval_s + write_s
    parts = (write_s / cyc, cyc / 2.0 / mtbi_s, restart_s / mtbi_s)
    s = sum(parts) or 1.0
    return CycleLoss(useful, total * parts[0] / s, total * parts[1] / s, total * parts[2] / s)
