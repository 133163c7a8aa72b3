"""The marker plugins decorate their hook implementations with: ``@hookimpl``."""

from __future__ import annotations

import pluggy

PROJECT = "twin"
hookimpl = pluggy.HookimplMarker(PROJECT)
