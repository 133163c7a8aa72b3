"""The ``twin`` command as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, REFERENCE

EXAMPLES_SWEEP = next(iter(sorted((EXAMPLES / "sweeps").glob("*.yaml"))))


def twin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twin.cli", *args], check=False, capture_output=True, text=True,
                          timeout=120,
                          env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"})


def test_predict_table_and_json():
    out = twin("predict", str(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"))
    assert out.returncode == 0, out.stderr
    assert "Memory per GPU" in out.stdout and "MFU" in out.stdout
    assert "Energy per step" in out.stdout and "J per token" in out.stdout and "not counted: switches" in out.stdout
    # What each strategy reports: the example's interleaved pipeline schedule.
    assert "Strategies" in out.stdout and "schedule=interleaved" in out.stdout
    assert "Likely range: 80%" in out.stdout and "held-out errors of" in out.stdout  # how sure the twin is
    js = twin("predict", str(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"), "--json")
    data = json.loads(js.stdout)
    assert data["step_time_s"] > 0 and data["memory"]["fits"] is True
    assert data["energy"]["total_j"] > data["energy"]["gpu_j"] > 0 and data["cost"] is None
    assert data["details"]["pp"] == {"schedule": "interleaved"}
    assert abs(data["breakdown"]["total_s"] - data["step_time_s"]) < 1e-9 * data["step_time_s"]
    iv = data["interval"]
    assert iv["p95_low_s"] <= iv["p80_low_s"] < iv["p80_high_s"] <= iv["p95_high_s"] and iv["runs"] > 0


def test_predict_bad_input_names_the_field(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("cluster: {system: DGX-H100, num_gpus: 64}\nmodel: llama3.1-8b\nplan: {tp: 3, gbs: 64}\n")
    out = twin("predict", str(f))
    assert out.returncode == 2
    assert "plan.tp" in out.stderr and "Traceback" not in out.stderr
    out = twin("predict", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "cannot read" in out.stderr


def test_unknown_preset_exit_code(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("cluster: {system: DGX-Z, num_gpus: 64}\nmodel: llama3.1-8b\nplan: {gbs: 64}\n")
    out = twin("predict", str(f))
    assert out.returncode == 3 and "cluster.system" in out.stderr


def test_plugins_lists_builtins():
    out = twin("plugins", "--json")
    data = json.loads(out.stdout)
    names = {p["name"] for p in data["plugins"]}
    assert {"nvlink", "infiniband", "roce", "cxl", "optics", "tensor", "pipeline"} <= names
    assert "H100-SXM-80GB" in data["presets"]["gpus"]


def test_validate_json_and_exit_codes(tmp_path):
    out = twin("validate", str(REFERENCE / "collectives.yaml"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["summary"]["n"] > 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: nope\ncases: []\n")
    assert twin("validate", str(bad)).returncode == 2


def test_sweep_out_into_a_missing_directory_fails_before_the_sweep_runs(tmp_path):
    r = twin("sweep", str(EXAMPLES_SWEEP), "--out", str(tmp_path / "missing" / "rows.csv"))
    assert r.returncode == 2 and "--out" in r.stderr and "does not exist" in r.stderr
    assert "Traceback" not in r.stderr and "points" not in r.stdout   # no sweep summary: nothing ran


@pytest.mark.parametrize("content", [b"\x00\x01\xff\xfe", "name: caf\xe9\n".encode("latin-1"),
                                     ("a: " + "[" * 20_000 + "]" * 20_000).encode(),
                                     ("cluster: {num_gpus: " + "9" * 5000 + "}").encode()])
def test_hostile_scenario_files_are_named_errors_not_tracebacks(tmp_path, content):
    f = tmp_path / "bad.yaml"
    f.write_bytes(content)
    r = twin("predict", str(f))
    assert r.returncode == 2 and str(f) in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("path", ["/dev/zero", "DIR"])
def test_endless_or_non_file_inputs_are_named_errors(tmp_path, path):
    target = str(tmp_path) if path == "DIR" else path
    r = twin("predict", target)
    assert r.returncode == 2 and target in r.stderr and "Traceback" not in r.stderr


def test_fleet_prints_each_job_and_the_links_they_share():
    res = twin("fleet", str(EXAMPLES / "fleets" / "two-jobs-roce.yaml"), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [j["name"] for j in data["jobs"]] == ["llama-70b", "llama-8b"]
    for job in data["jobs"]:
        assert job["step_time_shared_s"] >= job["step_time_alone_s"] > 0
    # Who a job shares a link class with, and how busy they keep it under the sharing: the
    # other job's own (shared) utilisation of that class.
    link = data["jobs"][0]["contended"][0]
    other = {row["tier"]: row["utilisation"] for row in data["jobs"][1]["shared"]["links"]}[link["tier"]]
    assert link["shared_with"] == {"llama-8b": pytest.approx(sum(other.values()))}
    table = twin("fleet", str(EXAMPLES / "fleets" / "two-jobs-roce.yaml"))
    assert table.returncode == 0 and "Links the jobs share" in table.stdout


def test_the_interleaved_fleet_example_shows_the_jobs_interact():
    """The shipped example of jobs on alternate nodes: the 8B job is slowed by its neighbour
    (in two-jobs-roce.yaml, packed apart, neither is), and the table prints the node ranges."""
    res = twin("fleet", str(EXAMPLES / "fleets" / "interleaved-roce.yaml"), "--json")
    assert res.returncode == 0, res.stderr
    jobs = {j["name"]: j for j in json.loads(res.stdout)["jobs"]}
    assert jobs["llama-8b"]["slowdown"] > 1.01
    assert jobs["llama-70b"]["nodes"] == list(range(0, 1152, 2))
    table = twin("fleet", str(EXAMPLES / "fleets" / "interleaved-roce.yaml"))
    assert table.returncode == 0 and "nodes 0-1150:2" in table.stdout


def test_fleet_bad_input_is_an_error_naming_the_field(tmp_path):
    bad = tmp_path / "fleet.yaml"
    bad.write_text("cluster: {system: DGX-H100, num_gpus: 16}\njobs:\n  - {gpus: 8, model: llama3.1-8b}\n")
    res = twin("fleet", str(bad))
    assert res.returncode == 2 and "jobs[0].plan: is required" in res.stderr and "Traceback" not in res.stderr
