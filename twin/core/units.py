"""Unit constants. Field names carry their unit; these convert at the boundaries.

Conventions (as in nccl-tests and vendor datasheets):
- ``_gbps``  gigabits per second (network link rates, 1e9 bit/s)
- ``_GBps``  gigabytes per second (1e9 byte/s; bus bandwidth, memory bandwidth)
- ``_TBps``  terabytes per second (1e12 byte/s)
- ``_gib``   gibibytes (2**30 bytes; memory capacities)
- ``_tflops`` 1e12 floating-point operations per second
"""

from __future__ import annotations

GIB = float(2**30)
US = 1e-6
HOUR_S = 3600.0
DAY_S = 86400.0


def gbps_to_bytes_per_s(gbps: float) -> float:
    """Gigabits per second to bytes per second."""
    return gbps * 1e9 / 8.0


# Bytes per element of each training precision's GEMM inputs.
BYTES_PER_ELEMENT = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
