"""``twin.sweep.allocator``: the sweep processes' glibc thresholds, their switch and who sets them."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from twin.sweep import allocator

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# In a fresh process: set (or not) the thresholds, then 8 times make forty 1 MiB arrays (the
# size of a batch's columns) and free them all. By default glibc trims the 40 MiB freed at the
# top of its heap each time (its dynamic trim threshold is 2 MiB after the first 1 MiB block),
# so every round faults its 10,240 pages in again; kept, a round reuses the last one's.
PROBE = """
import json, resource
from twin.sweep.allocator import retain_freed_memory
import numpy as np
set_now = retain_freed_memory()
def batch():
    columns = [np.ones(1 << 17) for _ in range(40)]
    del columns
batch()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    batch()
print(json.dumps({"set": set_now, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}))
"""


def probe(value: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != allocator.ENV and not k.startswith("MALLOC_")}
    if value is not None:
        env[allocator.ENV] = value
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True, env=env,
                         timeout=120)
    return json.loads(out.stdout)


@pytest.mark.parametrize(("value", "on"), [(None, True), ("1", True), ("0", False), ("off", False),
                                           ("False", False), ("no", False), ("yes", True)])
def test_the_switch_reads_the_environment(value, on):
    assert allocator.enabled({} if value is None else {allocator.ENV: value}) is on


@pytest.mark.skipif(not GLIBC, reason="the thresholds are glibc's")
def test_retained_memory_is_reused_without_faults_and_the_opt_out_keeps_glibcs_behaviour():
    kept, default = probe(None), probe("0")
    assert kept["set"] is True and default["set"] is False
    # 8 rounds of 40 MiB are 8 x 10,240 pages: (nearly) all faulted in again by default
    assert default["faults"] > 8 * 10_240 * 0.9
    assert kept["faults"] < 1_000


def test_the_library_sets_nothing_on_import():
    code = ("import twin.engine, twin.sweep, twin.sweep.runner, twin.sweep.allocator as a; "
            "print(a.applied())")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_twin_sweep_sets_it_and_a_ray_batch_task_does_when_asked(monkeypatch, tmp_path):
    from twin.cli import main
    from twin.sweep import ray_exec

    calls: list[str] = []
    monkeypatch.setattr(allocator, "retain_freed_memory", lambda: calls.append("cli") or True)
    monkeypatch.setattr(ray_exec, "retain_freed_memory", lambda: calls.append("task") or True)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: t\nbase: {cluster: {system: DGX-H100, num_gpus: 64}, model: llama3.1-8b, "
                    "plan: {gbs: 256}}\naxes: [{path: plan.tp, values: [1, 2]}]\n")
    assert main(["sweep", str(spec), "--executor", "inline", "--json", "--no-plugins"]) == 0
    assert calls == ["cli"]

    class FakeWorker:
        def run(self, index, start, stop):
            return (index, start, stop)

    monkeypatch.setattr(ray_exec, "worker_for", lambda job: FakeWorker())
    assert ray_exec._run_batch(None, 3, 0, 2) == (3, 0, 2)  # a joined cluster's worker: left alone
    assert calls == ["cli"]
    assert ray_exec._run_batch(None, 3, 0, 2, True) == (3, 0, 2)  # a worker of a Ray the twin started
    assert calls == ["cli", "task"]
