"""A client in another language: Node.js (@grpc/grpc-js + @grpc/proto-loader) built from proto/."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import ROOT
from twin.engine import Engine

NODE_DIR = ROOT / "tests" / "node_client"


@pytest.fixture(scope="module")
def node_modules() -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are required for the cross-language test (install Node.js >= 18)"
    if (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir() and \
            (NODE_DIR / "node_modules" / "@grpc" / "proto-loader").is_dir():
        return
    # Not there yet: install from the npm registry. A failure here fails the test (no skip).
    cmd = [npm, "ci" if (NODE_DIR / "package-lock.json").exists() else "install", "--no-audit", "--no-fund"]
    out = subprocess.run(cmd, cwd=NODE_DIR, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, f"npm failed:\n{out.stdout}\n{out.stderr}"


def test_node_client_predicts(server, node_modules):
    out = subprocess.run(["node", "predict.js", server.address], cwd=NODE_DIR, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    est = result["ok"]
    want = Engine(autoload=False).evaluate({"name": "node", "cluster": {"system": "DGX-H100", "num_gpus": 1024},
                                            "model": "llama3.1-70b",
                                            "plan": {"tp": 4, "pp": 4, "vp": 5, "gbs": 1024, "precision": "bf16"}})
    assert est["scenario_name"] == "node"
    assert est["step_time_s"] == want.step_time_s
    assert est["memory"]["fits"] is want.fits
    assert set(est["breakdown"]["exposed_comm_s"]) == set(want.breakdown.exposed_comm_s)
    assert est["fabric"]["fields"]["scale_out"]["structValue"]  # google.protobuf.Struct as proto-loader decodes it
    assert result["bad"]["code"] == 3  # INVALID_ARGUMENT
    assert "plan.tp" in result["bad"]["details"]
