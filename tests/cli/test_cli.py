"""The ``twin`` command as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import EXAMPLES, REFERENCE


def twin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twin.cli", *args], check=False, capture_output=True, text=True,
                          timeout=120,
                          env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"})


def test_predict_table_and_json():
    out = twin("predict", str(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"))
    assert out.returncode == 0, out.stderr
    assert "Memory per GPU" in out.stdout and "MFU" in out.stdout
    js = twin("predict", str(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"), "--json")
    data = json.loads(js.stdout)
    assert data["step_time_s"] > 0 and data["memory"]["fits"] is True
    assert abs(data["breakdown"]["total_s"] - data["step_time_s"]) < 1e-9 * data["step_time_s"]


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
