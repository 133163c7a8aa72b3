"""Shared rendering helpers for commands: JSON output and rich tables."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def print_json(data: Any) -> None:
    """Print ``data`` as JSON (NaN/inf as null, so the output is always valid JSON)."""
    json.dump(_clean(data), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def console() -> Console:
    """A console for human-readable output (no colour when not a terminal)."""
    return Console(highlight=False, soft_wrap=False, width=max(100, Console().width))


def table(title: str, *columns: str) -> Table:
    """A plain table with left-aligned first column."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i == 0 else "right")
    return t
