"""The live-server harness for telemetry tests: ONE fixture starts the real gRPC server.

It runs ``twin serve`` in a subprocess on 127.0.0.1 (port 0) with a fresh state directory
and the telemetry settings of each test in its config file.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import yaml

from twin.rpc.v1 import telemetry_pb2 as pb
from twin.rpc.v1 import telemetry_pb2_grpc as pbg
from twin.server.process import start_serve

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"



@dataclass
class Server:
    """A running telemetry server subprocess and clients for it."""

    state_dir: Path
    args: list[str]
    proc: subprocess.Popen | None = None
    address: str = ""
    channels: list[grpc.Channel] = field(default_factory=list)
    settings: dict[str, object] = field(default_factory=dict)  # top-level `twin serve` settings
    env: dict[str, str] = field(default_factory=dict)
    http_address: str = ""  # the OTLP/HTTP receiver, when settings enable it (otlp_http_port)

    def start(self) -> Server:
        """``twin serve`` as a user starts it, with the telemetry settings in its config file."""
        settings = _telemetry_settings(self.args)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = self.state_dir.parent / f"serve-{self.state_dir.name}.yaml"
        config.write_text(yaml.safe_dump({"host": "127.0.0.1", "port": 0, "state_dir": str(self.state_dir),
                                          "log_format": "json", "telemetry": settings, **self.settings}))
        self.proc, serving = start_serve(["--config", str(config)], cwd=ROOT,
                                         env={**os.environ, "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1",
                                              "PYTHONUNBUFFERED": "1", **self.env})
        self.address = serving["address"]
        self.http_address = serving.get("listeners", {}).get("otlp_http", "")
        return self

    def channel(self) -> grpc.Channel:
        ch = grpc.insecure_channel(self.address)
        self.channels.append(ch)
        return ch

    def api(self) -> pbg.TelemetryServiceStub:
        return pbg.TelemetryServiceStub(self.channel())

    def state(self, **kw: object) -> pb.GetLiveStateResponse:
        return self.api().GetLiveState(pb.GetLiveStateRequest(**kw), timeout=30)

    def component(self, cid: str) -> pb.LiveComponent:
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


_FLAGS = {"--calibrate-interval": ("calibrate_interval_s", float), "--max-series": ("max_series", int),
          "--history-interval": ("history_interval_s", float),
          "--max-receive-bytes": ("max_receive_bytes", int),
          "--max-components": ("max_components", int), "--max-pending-points": ("max_pending_points", int)}


def _telemetry_settings(args: list[str]) -> dict[str, object]:
    """The harness's shorthand flags as ``telemetry:`` settings of ``twin serve``'s config."""
    out: dict[str, object] = {}
    it = iter(args)
    for flag in it:
        key, conv = _FLAGS[flag]
        out[key] = conv(next(it))
    return out


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator:
    """Factory: ``start_server(*extra_args, **top_level_settings)`` -> a started :class:`Server`
    (stopped at teardown); ``env`` adds environment variables.
    """
    started: list[Server] = []

    def start(*args: str, state_dir: Path | None = None, env: dict[str, str] | None = None,
              **settings: object) -> Server:
        srv = Server(state_dir or tmp_path / "state", list(args), settings=settings,
                     env=env or {}).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
