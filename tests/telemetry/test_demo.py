"""``twin demo`` shows the loop in one command: it starts a twin, degrades and fails a link."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.telemetry.conftest import ROOT


def test_demo_runs_end_to_end() -> None:
    out = subprocess.run([sys.executable, "-m", "twin.cli", "demo", "--pushes", "2", "--interval", "0.2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
                         env={**os.environ, "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "DEGRADED node-1/ib_port:mlx5_3/1 (capacity 50%)" in text
    assert "DOWN     node-2/ib_port:mlx5_5/1" in text
    assert "BANDWIDTH node-2/ib_port:mlx5_5/1 (state=1): the NIC is down: NCCL runs on the node's remaining NICs" \
        in text
    assert "as the cluster is now" in text
    assert re.search(r"web view: http://127\.0\.0\.1:\d+/ ", text), text[:500]  # the twin it started serves one
