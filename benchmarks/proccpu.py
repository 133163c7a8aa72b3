"""CPU time of another process, for benchmarks that measure a server they started."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process ``pid`` has used (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # proc(5): utime and stime are fields 14 and 15, in clock ticks; the split drops pid and comm.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
