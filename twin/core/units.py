"""Unit constants. Field names carry their unit; these convert at the boundaries.

Conventions (as in nccl-tests and vendor datasheets):
- ``_gbps``  gigabits per second (network link rates, 1e9 bit/s)
- ``_GBps``  gigabytes per second (1e9 byte/s; bus bandwidth, memory bandwidth)
- ``_TBps``  terabytes per second (1e12 byte/s)
- ``_gib``   gibibytes (2**30 bytes; memory capacities)
- ``_tflops`` 1e12 floating-point operations per second
"""

from __future__ import annotations

import math

GIB = float(2**30)
US = 1e-6
HOUR_S = 3600.0
DAY_S = 86400.0


def gbps_to_bytes_per_s(gbps: float) -> float:
    """Gigabits per second to bytes per second."""
    return gbps * 1e9 / 8.0


# Bytes per element of each training precision's GEMM inputs.
BYTES_PER_ELEMENT = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "fp4": 0.5}


# Human-readable quantities for what operators read (CLI, pages, evidence): SI prefixes, never an exponent.
# Signal and field names carry their unit (the suffixes above and the telemetry vocabulary's ``_Bps``,
# ``_per_s``, ``_hz``, ``_w``, ``_dbm``, ``_c``, ``_s``); ``signal_unit`` reads it back.
_SUFFIX_UNITS = (("_Bps", "B/s"), ("_GBps", "GB/s"), ("_TBps", "TB/s"), ("_gbps", "Gb/s"), ("_per_s", "/s"),
                 ("_hz", "Hz"), ("_w", "W"), ("_dbm", "dBm"), ("_c", "°C"), ("_s", "s"), ("_gib", "GiB"))
# (unit, the base unit's multiple of 1 for each prefix, highest first): decimal prefixes, as link and
# bus rates are quoted (1 GB/s = 1e9 B/s, 1 Gb/s = 1e9 bit/s; nccl-tests and vendor datasheets).
_PREFIXED = {
    "B": ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")),
    "B/s": ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1.0, "B/s")),
    "Gb/s": ((1e3, "Tb/s"), (1.0, "Gb/s"), (1e-3, "Mb/s")),
    "GB/s": ((1e3, "TB/s"), (1.0, "GB/s"), (1e-3, "MB/s")),
    "Hz": ((1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz"), (1.0, "Hz")),
    "W": ((1e6, "MW"), (1e3, "kW"), (1.0, "W")),
    "s": ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")),
}


def signal_unit(name: str) -> str:
    """The unit a signal or field name carries by its suffix (``rx_Bps`` -> ``B/s``); ``""`` when none."""
    for suffix, unit in _SUFFIX_UNITS:
        if name.endswith(suffix):
            return unit
    return ""


def plain(value: float, digits: int = 3) -> str:
    """A number without an exponent: ``digits`` significant digits, thousands separated past 10,000."""
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    text = f"{value:.{digits}g}"
    if "e" in text:  # tiny: fixed point with the decimals that keep ``digits`` significant ones
        decimals = digits - 1 - math.floor(math.log10(abs(value)))
        text = f"{value:.{decimals}f}".rstrip("0").rstrip(".")
    return text


def human(value: float, unit: str, digits: int = 3) -> str:
    """``value`` in ``unit`` for a reader: an SI prefix that keeps it between 1 and 1000 where the unit
    takes one (``human(2.5e10, "B/s")`` -> ``25 GB/s``, ``human(0.0421, "s")`` -> ``42.1 ms``), never an
    exponent; other units as ``plain(value) unit``.
    """
    scales = _PREFIXED.get(unit)
    if scales is not None and math.isfinite(value) and value != 0.0:
        for factor, name in scales:
            if abs(value) >= factor * 0.9995:  # 999.96 MB/s rounds to 1 GB/s, not "1e+03 MB/s"
                return f"{plain(value / factor, digits)} {name}"
        factor, name = scales[-1]
        return f"{plain(value / factor, digits)} {name}"
    if not unit:
        return plain(value, digits)
    unit = "/s" if unit == "1/s" else unit
    sep = "" if unit in ("%", "°C") or unit.startswith("/") else " "
    return f"{plain(value, digits)}{sep}{unit}"
