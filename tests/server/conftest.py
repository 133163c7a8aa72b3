"""The real server in a subprocess on 127.0.0.1, port 0, and real gRPC clients."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.conftest import ROOT
from twin.rpc.v1 import sweep_service_pb2_grpc, twin_service_pb2_grpc

START_TIMEOUT_S = 60


class ServerProcess:
    """``twin serve --port 0`` as a user starts it; the address comes from its JSON log."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None, autoload: bool = False) -> None:
        base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp),
                    "PYTHONUNBUFFERED": "1"}
        if not autoload:
            base_env["TWIN_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        base_env.update(env or {})
        cmd = [sys.executable, "-m", "twin.cli", "serve", "--port", "0", "--state-dir", str(tmp / "state"), *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=base_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: list[str] = []
        self.records: list[dict] = []
        self._new = queue.Queue()
        self._lock = threading.Lock()
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        serving = self.wait_log(lambda r: r.get("msg") == "serving", START_TIMEOUT_S)
        self.address: str = serving["address"]
        self.port: int = serving["port"]
        self.health_port: int = serving["health_port"]

    def _pump(self) -> None:
        for line in self.proc.stderr:
            with self._lock:
                self.lines.append(line)
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = None
                if isinstance(rec, dict):
                    self.records.append(rec)
            self._new.put(line)
        self._new.put(None)

    def wait_log(self, pred: Callable[[dict], bool], timeout: float = 10.0) -> dict:
        """The first log record matching ``pred`` (waiting for it)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                for rec in self.records:
                    if pred(rec):
                        return rec
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no such log record within {timeout}s; log:\n{self.text()}")
            try:
                if self._new.get(timeout=min(left, 0.2)) is None and self.proc.poll() is not None:
                    with self._lock:
                        for rec in self.records:
                            if pred(rec):
                                return rec
                    raise AssertionError(f"server exited ({self.proc.returncode}); log:\n{self.text()}")
            except queue.Empty:
                pass

    def text(self) -> str:
        with self._lock:
            return "".join(self.lines)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start servers with extra flags/env; every one is stopped after the test."""
    started: list[ServerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, autoload: bool = False) -> ServerProcess:
        sub = tmp_path / f"srv{len(started)}"
        sub.mkdir()
        srv = ServerProcess(sub, *args, env=env, autoload=autoload)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One plain server shared by the read-only tests."""
    srv = ServerProcess(tmp_path_factory.mktemp("server"))
    yield srv
    assert srv.stop() == 0, srv.text()


@pytest.fixture(scope="session")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        grpc.channel_ready_future(ch).result(timeout=10)
        yield ch


@pytest.fixture(scope="session")
def twin_stub(channel: grpc.Channel) -> twin_service_pb2_grpc.TwinServiceStub:
    return twin_service_pb2_grpc.TwinServiceStub(channel)


@pytest.fixture(scope="session")
def sweep_stub(channel: grpc.Channel) -> sweep_service_pb2_grpc.SweepServiceStub:
    return sweep_service_pb2_grpc.SweepServiceStub(channel)
