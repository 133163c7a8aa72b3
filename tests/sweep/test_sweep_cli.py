"""``twin sweep`` and ``twin plot`` as a user runs them (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES
from twin.sweep.output import read_rows, write_rows

PNG = b"\x89PNG\r\n\x1a\n"
SPEC = """
name: cli
base:
  cluster: {system: DGX-H100, num_gpus: 128}
  model: llama3.1-8b
  plan: {gbs: 256}
axes:
  - {path: cluster.num_gpus, values: [64, 128, 256]}
  - {path: cluster.scale_out.fabric, values: [infiniband, roce]}
  - {path: plan.tp, values: [1, 2, 4]}
  - {path: plan.pp, values: [1, 2]}
  - {path: plan.vp, values: [1, 2]}
  - {path: plan.mbs, values: [1, 2, 3]}
objective: {metric: tokens_per_s, top: 4}
"""


def twin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twin.cli", *args], check=False, capture_output=True, text=True,
                          timeout=300, env={"TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def sweep_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep")
    spec = d / "spec.yaml"
    spec.write_text(SPEC)
    out = twin("sweep", str(spec), "--executor", "inline", "--json", "--out", str(d / "rows.parquet"))
    assert out.returncode == 0, out.stderr
    (d / "summary.json").write_text(out.stdout)
    return d


def test_sweep_json_summary_and_rows(sweep_files):
    data = json.loads((sweep_files / "summary.json").read_text())
    assert data["total_points"] == data["evaluated_points"] == 216
    assert data["feasible_points"] + sum(data["infeasible_by_reason"].values()) == 216
    # every mbs=3 point (72), and mbs=2 with dp=256 (256 GPUs, tp=pp=1: 2 fabrics x 2 vp = 4)
    assert data["infeasible_by_reason"]["plan.gbs: must be a multiple of mbs*dp"] == 76
    top = data["top"]
    assert len(top) == 4 and top[0]["tokens_per_s"] >= top[-1]["tokens_per_s"]
    assert data["pareto"] and data["executor"] == "inline"
    rows = read_rows(sweep_files / "rows.parquet")
    assert list(rows["point_id"]) == list(range(216))
    assert int(rows["feasible"].sum()) == data["feasible_points"]
    assert set(rows["fabric"].tolist()) == {"infiniband", "roce"}
    assert set(rows["reason"][~rows["feasible"]].tolist()) == set(data["infeasible_by_reason"])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_rows_round_trip_through_text_formats(sweep_files, tmp_path, suffix):
    rows = read_rows(sweep_files / "rows.parquet")
    n = write_rows(rows, tmp_path / f"r{suffix}")
    back = read_rows(tmp_path / f"r{suffix}")
    assert n == 216 and list(back["point_id"]) == list(range(216))
    ok = rows["feasible"]
    assert list(back["step_time_s"][ok]) == pytest.approx(list(rows["step_time_s"][ok]), rel=1e-12)
    assert list(back["reason"][~ok]) == list(rows["reason"][~ok])


def test_sweep_table_output(sweep_files):
    out = twin("sweep", str(sweep_files / "spec.yaml"), "--executor", "inline", "--top", "2")
    assert out.returncode == 0, out.stderr
    assert "Infeasible points by reason" in out.stdout and "Best 2 by tokens_per_s" in out.stdout


@pytest.mark.parametrize(("args", "kind"), [(["--kind", "scaling"], "scaling"), (["--kind", "pareto"], "pareto"),
                                            (["--kind", "breakdown"], "breakdown")])
def test_plot_sweep_rows(sweep_files, tmp_path, args, kind):
    target = tmp_path / f"{kind}.png"
    out = twin("plot", str(sweep_files / "rows.parquet"), *args, "--out", str(target))
    assert out.returncode == 0, out.stderr
    data = target.read_bytes()
    assert data.startswith(PNG) and len(data) > 10_000


def test_plot_prediction_and_summary(sweep_files, tmp_path):
    pred = twin("predict", str(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml"), "--json")
    assert pred.returncode == 0
    (tmp_path / "pred.json").write_text(pred.stdout)
    out = twin("plot", str(tmp_path / "pred.json"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "pred-breakdown.png").read_bytes().startswith(PNG)
    out = twin("plot", str(sweep_files / "summary.json"), "--out", str(tmp_path / "s.png"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "s.png").read_bytes().startswith(PNG)
    bad = twin("plot", str(tmp_path / "pred.json"), "--kind", "scaling")
    assert bad.returncode == 2 and "kind" in bad.stderr


def test_bad_spec_and_bad_out_name_the_field(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.replace("plan.mbs", "plan.mbz"))
    out = twin("sweep", str(spec), "--executor", "inline")
    assert out.returncode == 2 and "axes[5].path" in out.stderr and "Traceback" not in out.stderr
    spec.write_text(SPEC)
    out = twin("sweep", str(spec), "--executor", "inline", "--out", str(tmp_path / "rows.xlsx"))
    assert out.returncode == 2 and "out" in out.stderr
    out = twin("sweep", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "cannot read" in out.stderr


@pytest.mark.parametrize(("suffix", "data", "says"), [
    (".csv", b"point_id,feasible\n1,1,7\n", "more fields than the header"),
    (".csv", b"\xff\xfe\xff", "is not UTF-8 text"),
    (".jsonl", b"[1, 2]\n", "must be a JSON object"),
    (".jsonl", b'{"a": ' + b"[" * 5000 + b"}\n", "is not valid JSON"),
    (".parquet", b"not parquet at all", "rows file twin sweep --out writes"),
])
def test_a_file_that_is_not_a_rows_file_is_an_error_naming_it(tmp_path, suffix, data, says):
    """Found by fuzzing the web view's results-file upload: these raised csv/json/pyarrow errors."""
    from twin.core.errors import SpecError

    path = tmp_path / f"rows{suffix}"
    path.write_bytes(data)
    with pytest.raises(SpecError) as err:
        read_rows(path)
    assert str(path) in err.value.field and says in str(err.value)
