"""Shared rendering helpers for commands: JSON output and rich tables."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from rich import box
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
    """A console for human-readable output (no colour when not a terminal): a terminal's own width
    (an 80-column one gets 80: tables wrap their cells rather than the terminal wrapping their
    lines), 100 columns when the output goes to a file or a pipe.
    """
    probe = Console()
    return Console(highlight=False, soft_wrap=False, width=probe.width if probe.is_terminal else max(100, probe.width))


def table(title: str, *columns: str, compact: bool = False) -> Table:
    """A plain table with left-aligned first column. No header is ever cut: a column is at least as
    wide as its header's longest word (headers wrap at spaces), and cells fold rather than end in "…".
    ``compact``: columns apart by two spaces rather than a rule (a wide table that must fit 80 columns).
    """
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False,
              **({"box": box.SIMPLE_HEAD, "collapse_padding": True} if compact else {}))
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i == 0 else "right", overflow="fold",
                     min_width=max((len(w) for w in col.split()), default=0))
    return t
