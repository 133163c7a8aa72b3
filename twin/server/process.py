"""Start ``twin serve`` as a child process and learn its address from its JSON log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Set in a child's environment (the parent's PID): the child asks the kernel for SIGTERM when the
# thread that started it dies (Linux prctl PR_SET_PDEATHSIG), so it never outlives a parent that was
# killed before it could stop it (SIGKILL, a crash).
PARENT_ENV = "TWIN_EXIT_WITH_PARENT"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def exit_with_parent() -> bool:
    """In a child started with ``PARENT_ENV``: SIGTERM (graceful) when its parent dies; True when armed.

    Armed by the child itself (no ``preexec_fn``, unsafe in a threaded parent); a parent that died
    before it was armed is caught by comparing ``os.getppid()`` with the PID the parent wrote.
    """
    want = os.environ.get(PARENT_ENV, "")
    if not want.isdigit() or not sys.platform.startswith("linux"):
        return False
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return False
    if os.getppid() != int(want):  # the parent is already gone
        os.kill(os.getpid(), signal.SIGTERM)
    return True


def start_serve(args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                launcher: Sequence[str] | None = None) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """Run ``python -m twin.cli serve ARGS``; return it and its ``serving`` log record.

    ``launcher`` replaces ``python -m twin.cli`` (a command that runs ``twin`` with the
    arguments that follow it). The child stops (SIGTERM) when this process dies (``PARENT_ENV``),
    so it never outlives its parent, however the parent ends.

    The record carries ``address``, ``port`` and ``health_port`` (ask for port 0 to get a
    free one). The server must log JSON (``log_format: json``, the default). Afterwards a
    daemon thread drains its stderr so it never blocks on a full pipe. Raises
    RuntimeError with the end of the log when the server exits before serving.
    """
    twin = list(launcher) if launcher is not None else [sys.executable, "-m", "twin.cli"]
    child_env = {**(dict(env) if env is not None else os.environ), PARENT_ENV: str(os.getpid())}
    proc = subprocess.Popen([*twin, "serve", *args], cwd=cwd, env=child_env,
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
