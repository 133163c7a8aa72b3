"""The Ray executor against a real Ray cluster that the test starts (``ray start --head``) and stops
(by its own process group: nothing the test did not start is signalled).

- inline and Ray runs of the same sweep give identical rows;
- a Ray worker killed (SIGKILL) mid-sweep has its batch retried: every point exactly once;
- setting the cancel event stops the running tasks (ray.cancel);
- connecting to an existing cluster works and closing does not shut that cluster down;
- with no address a local Ray is started and, being ours, shut down at the end.

Ray binds to 127.0.0.1 only (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray use the loopback
address as the node address). The cluster has 2 CPUs, like CI. Slow: ~1 minute.
"""

from __future__ import annotations

import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported anywhere in this process

import dataclasses
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from twin.sweep.job import EngineSettings
from twin.sweep.plansearch import plan_job, space_for
from twin.sweep.ray_exec import RayExecutor
from twin.sweep.runner import Finished, Progress, events, run_job

pytestmark = pytest.mark.slow
RAY = str(Path(sys.executable).parent / "ray")
SETTINGS = EngineSettings(autoload=False)


def ray_env() -> dict[str, str]:
    env = dict(os.environ)
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    env.pop("RAY_ADDRESS", None)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The process group of the Ray head this module started (None before): only its workers are
# ever signalled, never a Ray process someone else runs on the machine.
HEAD_GROUP: list[int] = []


def batch_tasks(sample_s: float = 0.3) -> list[int]:
    """PIDs of processes of *our* Ray head busy evaluating: those using over half a core during
    ``sample_s`` (a sweep batch keeps its worker's core busy; an idle worker, the raylet and the
    GCS use next to none). To observe only, never to signal: the killed-worker test learns its
    victim's PID from the batch itself.

    Only the process tree under the head this module started (by its PID) is looked at, and
    processes are told apart by the CPU time ``/proc/PID/stat`` counts, not by name or title.
    """
    if not HEAD_GROUP:
        return []
    before = {pid: _cpu_s(pid) for pid in _descendants(HEAD_GROUP[0])}
    time.sleep(sample_s)
    busy = []
    for pid, was in before.items():
        now = _cpu_s(pid)
        if was is not None and now is not None and now - was > 0.5 * sample_s:
            busy.append(pid)
    return busy


def batch_pids(busy: Path) -> set[int]:
    """PIDs of the workers that reported running a batch of a ``_reporting_pids`` recipe."""
    return {int(p.name) for p in busy.iterdir() if p.name.isdigit()}


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: its ``/proc/PID/stat`` exists and its state (field 3) is not zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (fields 14 and 15 of ``/proc/PID/stat``, proc(5));
    None once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            after_name = f.read().rsplit(")", 1)[1].split()  # the name (field 2) may hold spaces
    except (OSError, IndexError):
        return None
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(root: int) -> list[int]:
    """The PIDs under ``root`` (its children, theirs, ...), from each thread's
    ``/proc/PID/task/TID/children`` (Ray workers are the raylet's children, the raylet the head's)."""
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the Ray head did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A Ray head started the way an operator starts one (``ray start --head --block``), in its
    own session, temp dir and ports; stopped at the end by signalling exactly that session's
    process group (not Ray's own stop command, which would stop every Ray of the user)."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="twin-ray-", dir="/tmp")  # short: Ray puts sockets under it
    proc = subprocess.Popen([RAY, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
                             f"--temp-dir={temp}"], env=ray_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    HEAD_GROUP.append(proc.pid)
    try:
        _wait_for_port(port, proc, 180)
        yield f"127.0.0.1:{port}"
    finally:
        for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(proc.pid):
                break
        HEAD_GROUP.clear()
        shutil.rmtree(temp, ignore_errors=True)


def _group_alive(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    return True
            except OSError:
                continue
    return False


@pytest.fixture(autouse=True)
def no_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.fixture(scope="module")
def job(engine):
    """~270k plans of Llama 3.1 405B on 16,384 GPUs: batches long enough to kill one mid-run."""
    space = space_for(engine, "llama3.1-405b", "Meta-RoCE-H100", 16384, gbs=2048,
                      shardings=("distributed_optimizer", "fsdp-noreshard"), recompute=("none", "full"))
    return plan_job(space, top=20, settings=SETTINGS, keep_rows=True)


@pytest.fixture(scope="module")
def inline_result(engine, job):
    return run_job(job, engine=engine, executor="inline")


def assert_same(a, b) -> None:
    assert a.done == b.done == a.total and a.counts == b.counts and a.feasible == b.feasible
    for part in ("rows", "top", "pareto"):
        x, y = getattr(a, part), getattr(b, part)
        assert set(x) == set(y)
        for k in x:
            assert np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f"), (part, k)


def cluster_alive(address: str) -> bool:
    """The cluster's GCS still accepts connections (the next tests also run sweeps on it)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return True
    except OSError:
        return False


def test_without_an_address_a_local_ray_is_started_and_shut_down(engine):
    # First in the module, before the `head` fixture starts a cluster: two Ray clusters
    # starting side by side on a 2-core CI machine can time out in Ray's own start-up.
    import ray

    small = space_for(engine, "llama3.1-8b", "DGX-H100", 8, gbs=16)
    ex = RayExecutor(num_cpus=1)
    assert ex.mode == "started" and ex.owns_cluster and ex.workers == 1
    session = ray.get_runtime_context().gcs_address
    try:
        r = run_job(plan_job(small, settings=SETTINGS), engine=engine, executor=ex)
    finally:
        ex.close()
    assert r.done == small.total and not ray.is_initialized()
    assert not cluster_alive(session)    # the Ray we started is gone


def test_existing_cluster_is_used_and_not_shut_down(head, engine):
    import ray

    small = space_for(engine, "llama3.1-8b", "DGX-H100", 16, gbs=32)
    ex = RayExecutor(address=head)
    assert ex.mode == "connected" and not ex.owns_cluster and ex.workers == 2
    try:
        r = run_job(plan_job(small, settings=SETTINGS), engine=engine, executor=ex)
    finally:
        ex.close()
    ref = run_job(plan_job(small, settings=SETTINGS), engine=engine, executor="inline")
    assert r.done == small.total and r.feasible == ref.feasible and r.executor == "ray"
    assert not ray.is_initialized()      # our connection is closed ...
    assert cluster_alive(head)           # ... the cluster we joined is still up


def test_inline_and_ray_give_identical_results(head, engine, job, inline_result):
    ex = RayExecutor(address=head)
    try:
        r = run_job(job, engine=engine, executor=ex, batch_points=40_000)
    finally:
        ex.close()
    assert r.workers == 2 and r.retried == 0
    assert_same(r, inline_result)


def _reporting_pids(space: Any, busy: Path, spin_s: float = 0.0, ignore_interrupt: bool = False) -> Any:
    """A recipe evaluating ``space``'s points whose batches first write their worker's PID as a
    file in ``busy``: the killer learns which process runs a batch from the batch itself.

    With ``spin_s`` a batch then evaluates its points over and over for that many seconds: it is
    certainly running (and keeps its core busy) when a test cancels, however fast the machine,
    so only ``ray.cancel`` can stop it early. With ``ignore_interrupt`` too, it swallows the
    ``KeyboardInterrupt`` a non-forced ``ray.cancel`` raises (noting ``PID.interrupted`` in
    ``busy``) and spins on: a batch only a forced cancel stops.

    Defined in a function so that Ray pickles it by value (the workers need not import this
    test module); a job with it goes to the workers through ``ray.put``.
    """

    class Source:
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.total = inner.total

        def batch(self, start: int, stop: int) -> Any:
            (busy / str(os.getpid())).touch()
            out = self.inner.batch(start, stop)
            end = time.monotonic() + spin_s
            while time.monotonic() < end:
                try:
                    out = self.inner.batch(start, start + 1)
                except KeyboardInterrupt:
                    if not ignore_interrupt:
                        raise
                    (busy / f"{os.getpid()}.interrupted").touch()
            return out

    class Reporting:
        def source(self, engine: Any) -> Source:
            return Source(space.source(engine))

    return Reporting()


def test_killed_worker_batch_is_retried_every_point_once(head, engine, job, inline_result, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    # A token of its own: a worker that ran ``job`` keeps that job's source under its token.
    reporting = dataclasses.replace(job, recipe=_reporting_pids(job.recipe, busy), token=uuid.uuid4().hex)
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:  # SIGKILL the first worker that reports running a batch
        while not stop.is_set() and not killed:
            for pid in batch_pids(busy):
                # Only a process of the head this module started (belt and braces: the PID
                # came from our own task, and could only be reused after that worker exited).
                if pid in _descendants(HEAD_GROUP[0]):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.02)

    ex = RayExecutor(address=head)
    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        r = run_job(reporting, engine=engine, executor=ex, batch_points=70_000)
    finally:
        stop.set()
        t.join()
        ex.close()
    assert killed, "no worker reported running a batch"
    assert r.retried >= 1
    assert list(r.rows["point_id"]) == list(range(job.total))   # every point exactly once
    assert_same(r, inline_result)


def _cancel_spinning_sweep(engine: Any, head: str, busy: Path, ignore_interrupt: bool) -> dict[str, Any]:
    """Run a sweep whose batches each spin 90 s on the Ray ``head``, cancel it as soon as one
    batch reports running, and watch (20 s at most) for a reported batch worker still busy."""
    space = space_for(engine, "llama3.1-8b", "DGX-H100", 16, gbs=32)
    job = dataclasses.replace(plan_job(space, settings=SETTINGS),
                              recipe=_reporting_pids(space, busy, 90.0, ignore_interrupt), token=uuid.uuid4().hex)
    cancel = threading.Event()
    ex = RayExecutor(address=head)
    result = None
    started: set[int] = set()
    t0 = time.monotonic()
    try:
        for ev in events(job, ex, cancel=cancel, batch_points=max(1, job.total // 4)):
            if isinstance(ev, Progress) and not cancel.is_set():
                started = batch_pids(busy)
                if started:
                    cancel.set()
            if isinstance(ev, Finished):
                result = ev.result
        # Only the processes that ran a batch: the raylet or a worker Ray starts afresh may be busy too.
        deadline = time.monotonic() + 20
        still_running = set(batch_tasks()) & batch_pids(busy)
        while still_running and time.monotonic() < deadline:
            still_running = set(batch_tasks()) & batch_pids(busy)
    finally:
        ex.close()
    return {"started": started, "result": result, "total": job.total, "executor": ex,
            "still_running": still_running, "elapsed_s": time.monotonic() - t0}


def test_cancel_stops_the_ray_tasks(head, engine, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    # Each batch would run 90 s: a sweep that ends well within the 20 s watched was cancelled.
    run = _cancel_spinning_sweep(engine, head, busy, ignore_interrupt=False)
    result, ex = run["result"], run["executor"]
    assert run["started"], "no batch reported running"
    assert result is not None and result.cancelled and result.done < run["total"]
    assert ex.cancelled_tasks >= 1 and result.stats["cancelled_tasks"] >= 1
    assert run["still_running"] == set()     # no worker is still evaluating a batch
    assert run["elapsed_s"] < 60             # far less than one batch's 90 s


def test_cancel_kills_a_batch_that_ignores_the_interrupt(head, engine, tmp_path):
    """A batch that swallows the non-forced cancel's KeyboardInterrupt is force-cancelled after
    the grace: its worker is killed, and the sweep still ends long before the batch would."""
    from twin.sweep.ray_exec import CANCEL_FORCE_WAIT_S, CANCEL_GRACE_S

    busy = tmp_path / "busy"
    busy.mkdir()
    run = _cancel_spinning_sweep(engine, head, busy, ignore_interrupt=True)
    result, ex = run["result"], run["executor"]
    interrupted = {int(p.name.split(".")[0]) for p in busy.glob("*.interrupted")}
    assert run["started"], "no batch reported running"
    assert interrupted, "the non-forced cancel never reached a batch"
    assert result is not None and result.cancelled and result.done < run["total"]
    assert ex.forced_cancels >= 1
    assert run["still_running"] == set()
    assert not any(_alive(pid) for pid in interrupted)   # their workers were killed
    assert run["elapsed_s"] < CANCEL_GRACE_S + CANCEL_FORCE_WAIT_S + 50
    assert cluster_alive(head)


def test_grpc_cancel_stops_the_ray_tasks(head, engine, tmp_path, monkeypatch, caplog):
    """The Sweep RPC on the Ray executor: cancelling the call cancels the running Ray tasks."""
    import json
    import logging

    import grpc

    from tests.sweep.test_service import BIG, stopped_record
    from twin.rpc.v1 import sweep_service_pb2 as sw
    from twin.rpc.v1 import sweep_service_pb2_grpc as sw_grpc
    from twin.server import extensions, grpc_app
    from twin.server.server_config import ServerConfig
    from twin.server.sweep_engine import EngineRunner

    caplog.set_level(logging.INFO, logger="twin.server")
    runner = EngineRunner(engine, max_points=10_000_000, executor="ray", ray_address=head, settings=SETTINGS)

    def install(server, ctx) -> None:
        ctx.sweep_runner = runner
        ctx.on_shutdown.append(runner.close)

    monkeypatch.setattr(extensions, "EXTENSIONS", [*extensions.EXTENSIONS, install])
    running = grpc_app.build_server(ServerConfig(port=0, state_dir=str(tmp_path), plugins_autoload=False, grace_s=1.0),
                               engine)
    grpc_app.start(running)
    # BIG with precision and sharding axes (6x): ~6M points, several seconds on a 2-CPU Ray, so
    # the cancel, which follows a CPU sample (batch_tasks), lands mid-sweep.
    spec = {**BIG, "name": "ray-cancel", "axes": [*BIG["axes"], {"path": "plan.precision", "values": ["bf16", "fp8"]},
                                                  {"path": "plan.optimizer_sharding",
                                                   "values": ["distributed_optimizer", "fsdp", "zero1"]}]}
    try:
        with grpc.insecure_channel(running.address) as channel:
            call = sw_grpc.SweepServiceStub(channel).Sweep(sw.SweepRequest(spec_document=json.dumps(spec)),
                                                           timeout=120)
            running_at_cancel: list[int] = []
            for event in call:
                if event.HasField("progress"):
                    running_at_cancel = batch_tasks()
                    if running_at_cancel:
                        break
            call.cancel()
            rec = stopped_record(caplog, "ray-cancel")
            deadline = time.monotonic() + 20
            still = batch_tasks()
            while still and time.monotonic() < deadline:
                still = batch_tasks()
            cancelled = runner._ray.cancelled_tasks if runner._ray is not None else 0
    finally:
        grpc_app.stop(running)
    assert running_at_cancel, "no Ray task was running when the call was cancelled"
    assert rec.reason == "cancelled" and rec.done_points < rec.total_points
    assert cancelled >= 1 and still == []
    assert cluster_alive(head)  # the server joined the cluster; closing it left the cluster up


def test_failure_monte_carlo_on_ray_matches_inline(head, engine):
    """Failure Monte-Carlo batches as Ray tasks: seeded batches give the inline result exactly."""
    from tests.conftest import EXAMPLES
    from twin.core.failures.failure_spec import MonteCarloSpec
    from twin.failure_analyzer import FailureAnalyzer

    fa = FailureAnalyzer(engine)
    mc = MonteCarloSpec(trials=120, horizon_days=10.0, seed=3, batch_trials=20)
    inline = fa.analyze(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml", monte_carlo=mc).to_dict()["monte_carlo"]
    ex = RayExecutor(address=head)
    try:
        on_ray = fa.analyze(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml", monte_carlo=mc,
                            mapper=ex.mapper).to_dict()["monte_carlo"]
    finally:
        ex.close()
    inline.pop("elapsed_s")
    on_ray.pop("elapsed_s")
    assert on_ray == inline and on_ray["trials"] == 120
