"""The live-server harness for telemetry tests: ONE fixture starts the real gRPC server.

It runs ``python -m twin.telemetry.standalone`` in a subprocess on 127.0.0.1 (port 0) with
a fresh state directory. At merge, switch :func:`start_server`'s command to ``twin serve``
(the telemetry extension registered there); nothing else in the tests depends on it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

if not (ROOT / "twin" / "rpc" / "v1" / "telemetry_pb2.py").exists():  # a checkout without generated stubs
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_protos.py")], check=True)

from twin.rpc.v1 import telemetry_pb2 as pb  # noqa: E402
from twin.rpc.v1 import telemetry_pb2_grpc as pbg  # noqa: E402


@dataclass
class Server:
    """A running telemetry server subprocess and clients for it."""

    state_dir: Path
    args: list[str]
    proc: subprocess.Popen | None = None
    address: str = ""
    channels: list[grpc.Channel] = field(default_factory=list)

    def start(self) -> Server:
        cmd = [sys.executable, "-m", "twin.telemetry.standalone", "--state-dir", str(self.state_dir),
               "--host", "127.0.0.1", "--port", "0", *self.args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1"})
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (\S+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.address = m.group(1)
        return self

    def channel(self) -> grpc.Channel:
        ch = grpc.insecure_channel(self.address)
        self.channels.append(ch)
        return ch

    def api(self) -> pbg.TelemetryServiceStub:
        return pbg.TelemetryServiceStub(self.channel())

    def state(self, **kw: object) -> pb.GetLiveStateResponse:
        return self.api().GetLiveState(pb.GetLiveStateRequest(**kw), timeout=30)

    def component(self, cid: str) -> pb.Component:
        for c in self.state().components:
            if c.id == cid:
                return c
        raise KeyError(f"{cid} not in live state")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._close_channels()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._close_channels()

    def _close_channels(self) -> None:
        for ch in self.channels:
            ch.close()
        self.channels.clear()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator:
    """Factory: ``start_server(*extra_args)`` -> a started :class:`Server` (stopped at teardown)."""
    started: list[Server] = []

    def start(*args: str, state_dir: Path | None = None) -> Server:
        srv = Server(state_dir or tmp_path / "state", list(args)).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
