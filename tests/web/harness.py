"""A live twin with its web view and simulated exporters, and Debian's Chromium driven by Playwright.

Shared by the browser tests (tests/web), scripts/screenshots.py and benchmarks/bench_web.py.
Everything runs on 127.0.0.1 with free ports and a fresh state directory; :meth:`LiveTwin.stop`
stops exactly the ``twin serve`` process it started (by its handle) and the exporters it made.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.server.process import start_serve

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
# Flags for a headless browser that reaches nothing but the pages it is sent to.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DEFAULT_SCENARIO = ROOT / "examples" / "gpt3-175b-dgx-h100-ib.yaml"
# An event stream's slot freed and taken again: the server notices a closed stream at its next
# poll (0.5 s) and a refused page retries after 5 s (twin.web.web_app POLL_S, EVENT_RETRY_S); twelve
# times the 5 s, for a loaded machine.
STREAM_WAIT_S = 60.0
STREAM_POLL_S = 0.1  # between tries for a slot: a fifth of the server's 0.5 s poll


def launch(playwright: Any, user_data_dir: str, width: int = 1400, height: int = 1000) -> Any:
    """Debian's Chromium (``/usr/bin/chromium``) in a fresh profile; a clear error when it is missing."""
    if not os.access(CHROMIUM, os.X_OK):
        raise RuntimeError(f"{CHROMIUM} is missing: the browser tests drive Debian's Chromium. Install it with "
                           "`apt-get install chromium` (scripts/setup.sh does when run as root, as on CI)")
    return playwright.chromium.launch_persistent_context(
        user_data_dir, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
        viewport={"width": width, "height": height})


@dataclass
class LiveTwin:
    """``twin serve`` (gRPC + web view) in a subprocess, a registered job, and simulated exporters."""

    tmp: Path
    token: str | None = None
    scenario: Path = DEFAULT_SCENARIO
    job: str = "demo-job"
    proc: subprocess.Popen | None = None
    serving: dict[str, Any] = field(default_factory=dict)
    sim: Any = None
    telemetry: dict[str, Any] = field(default_factory=dict)  # more `telemetry:` settings of twin serve

    def start(self, nodes: int = 2, simulate: bool = True) -> LiveTwin:
        config = self.tmp / "serve.json"
        config.write_text(json.dumps({"host": "127.0.0.1", "port": 0, "state_dir": str(self.tmp / "state"),
                                      "web": {"address": "127.0.0.1:0"},
                                      "telemetry": {"calibrate_interval_s": 0, **self.telemetry}}))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.tmp), "PYTHONUNBUFFERED": "1",
               "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1"}
        if "PYTHONPATH" in os.environ:  # the checkout the tests import, where it is not the installed one
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        if self.token:
            env["TWIN_AUTH_TOKEN"] = self.token
        self.proc, self.serving = start_serve(["--config", str(config)], env=env, cwd=ROOT)
        if simulate:
            self.register()
            from twin.telemetry.simulate import SimulatedCluster

            self.sim = SimulatedCluster(self.address, nodes=nodes, gpus_per_node=8, job=self.job,
                                        step_time_s=self.designed * 1.08)
            self.push()
        return self

    @property
    def address(self) -> str:
        """The gRPC address."""
        return str(self.serving["address"])

    @property
    def url(self) -> str:
        """The web view's base URL (no trailing slash)."""
        return "http://" + str(self.serving["listeners"]["web"])

    def register(self) -> None:
        """Register the job over gRPC (the way ``twin demo`` does)."""
        import grpc

        from twin.rpc.v1 import telemetry_pb2 as pb
        from twin.rpc.v1 import telemetry_pb2_grpc as pbg

        metadata = (("authorization", f"Bearer {self.token}"),) if self.token else ()
        with grpc.insecure_channel(self.address) as channel:
            reply = pbg.TelemetryServiceStub(channel).RegisterJob(
                pb.RegisterJobRequest(job=self.job, scenario_yaml=self.scenario.read_text()), timeout=60,
                metadata=metadata)
        self.designed = reply.predicted_step_time_s

    def push(self, times: int = 2, interval: float = 0.3) -> None:
        """Push the simulated exporters' metrics ``times`` times (counters need two points for a rate)."""
        for i in range(times):
            if i:
                time.sleep(interval)
            self.sim.push()

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
        """GET ``path`` of the web view: (status, body, headers); errors are answers too."""
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as err:
            return err.code, err.read(), dict(err.headers)

    def stop(self) -> int | None:
        """Stop the exporters and the server this harness started (SIGTERM, then wait)."""
        if self.sim is not None:
            self.sim.shutdown()
            self.sim = None
        if self.proc is None:
            return None
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)


def fresh_dir(prefix: str) -> tempfile.TemporaryDirectory:
    """A temporary directory for a browser profile or a twin's state."""
    return tempfile.TemporaryDirectory(prefix=prefix)


def hold_event_streams(twin: LiveTwin, n: int, headers: dict[str, str] | None = None
                       ) -> list[http.client.HTTPConnection]:
    """``n`` open event streams of ``twin``'s web view: every slot when ``n`` is the server's limit.

    A stream an earlier test (or page) closed holds its slot until the server's next poll of it
    notices (twin.web.web_app._stream), later still on a loaded machine; a 429 meanwhile is retried
    until STREAM_WAIT_S, so no slot is left for another client to take. The caller closes them."""
    host, port = twin.serving["listeners"]["web"].rsplit(":", 1)
    held: list[http.client.HTTPConnection] = []
    deadline = time.monotonic() + STREAM_WAIT_S
    try:
        while len(held) < n:
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("GET", "/events", headers=headers or {})
            status = conn.getresponse().status  # the headers only: the body never ends
            if status == 200:
                held.append(conn)
                continue
            conn.close()
            assert status == 429, f"/events answered {status}"
            assert time.monotonic() < deadline, f"{len(held)} of {n} event streams after {STREAM_WAIT_S} s"
            time.sleep(STREAM_POLL_S)
    except BaseException:
        for conn in held:
            conn.close()
        raise
    return held
