"""Start ``twin serve`` as a child process and learn its address from its JSON log."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def start_serve(args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                launcher: Sequence[str] | None = None) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """Run ``python -m twin.cli serve ARGS``; return it and its ``serving`` log record.

    ``launcher`` replaces ``python -m twin.cli`` (a command that runs ``twin`` with the
    arguments that follow it).

    The record carries ``address``, ``port`` and ``health_port`` (ask for port 0 to get a
    free one). The server must log JSON (``log_format: json``, the default). Afterwards a
    daemon thread drains its stderr so it never blocks on a full pipe. Raises
    RuntimeError with the end of the log when the server exits before serving.
    """
    twin = list(launcher) if launcher is not None else [sys.executable, "-m", "twin.cli"]
    proc = subprocess.Popen([*twin, "serve", *args], cwd=cwd,
                            env=dict(env) if env is not None else None,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = proc.stderr
    assert stderr is not None
    seen: list[str] = []
    for line in stderr:
        seen.append(line)
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("msg") == "serving":
            threading.Thread(target=stderr.read, daemon=True).start()
            return proc, rec
    code = proc.wait()
    raise RuntimeError(f"twin serve exited ({code}) before serving: {''.join(seen)[-2000:] or 'no output'}")
