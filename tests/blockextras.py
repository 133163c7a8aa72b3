"""Run ``twin`` (or Python code) as if some extras were not installed (used by tests/test_extras.py).

    python tests/blockextras.py EXTRAS ARGS...     # twin ARGS
    python tests/blockextras.py EXTRAS -c CODE     # exec CODE

EXTRAS is a comma-separated list of pyproject extras (server, telemetry, ray, plot, parquet).
Importing a module one of them installs fails with ModuleNotFoundError, as it does where the
extra is missing, and every such attempt is appended to the file ``$TWIN_BLOCKED_LOG`` (one
module name per line), so a test sees what a command tried to import, caught or not.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Sequence
from typing import Any

# The modules each extra's distributions install (pyproject.toml [project.optional-dependencies]).
# opentelemetry is a namespace shared by two extras: the server's opentelemetry-proto installs
# opentelemetry.proto; the telemetry extra's API, SDK and exporters install the rest.
PROVIDES: dict[str, tuple[str, ...]] = {
    "server": ("grpc", "grpc_health", "grpc_reflection", "grpc_status", "google", "opentelemetry.proto", "cramjam"),
    "telemetry": ("opentelemetry.*", "prometheus_client"),
    "ray": ("ray",),
    "plot": ("matplotlib",),
    "parquet": ("pyarrow",),
    "web": ("starlette", "uvicorn"),
    "traces": ("google",),
}


def blocked_by(name: str, extras: Sequence[str]) -> str | None:
    """The extra (of ``extras``) whose absence makes ``import name`` fail, or None."""
    for extra in extras:
        for pattern in PROVIDES[extra]:
            if pattern.endswith(".*"):
                base = pattern[:-2]
                if name.startswith(base + ".") and not name.startswith(base + ".proto"):
                    return extra
            elif name == pattern or name.startswith(pattern + "."):
                return extra
    return None


class Blocker(importlib.abc.MetaPathFinder):
    """A finder ahead of all others that refuses the blocked modules and logs each attempt."""

    def __init__(self, extras: Sequence[str], log_path: str | None) -> None:
        self.extras = tuple(extras)
        self.log_path = log_path

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        extra = blocked_by(name, self.extras)
        if extra is None:
            return None
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(name + "\n")
        raise ModuleNotFoundError(f"No module named {name!r} (the {extra!r} extra is not installed)", name=name)


def main(argv: Sequence[str]) -> int:
    extras = [e for e in argv[0].split(",") if e]
    unknown = sorted(set(extras) - set(PROVIDES))
    if unknown:
        raise SystemExit(f"unknown extras: {unknown}")
    sys.meta_path.insert(0, Blocker(extras, os.environ.get("TWIN_BLOCKED_LOG")))
    rest = list(argv[1:])
    if rest[:1] == ["-c"]:
        exec(compile(rest[1], "<blockextras>", "exec"), {"__name__": "__main__"})
        return 0
    from twin.cli import main as twin

    sys.argv = ["twin", *rest]
    return twin(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
