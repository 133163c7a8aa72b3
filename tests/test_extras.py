"""Extras that match use: the base install runs the library and the local commands; every other
feature imports its extra only when it runs, and says which extra to install when it is missing.

The commands run in subprocesses under tests/blockextras.py, which makes the blocked extras'
modules fail to import (as where they are not installed) and logs every attempt.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grpc
import pytest
from packaging.requirements import Requirement

from tests.blockextras import PROVIDES, blocked_by
from tests.conftest import EXAMPLES, REFERENCE, ROOT
from twin.cli import EXIT_MISSING_EXTRA, main
from twin.core.errors import InfeasibleError, MissingExtraError
from twin.core.extras import EXTRA_MODULES, needs_extra
from twin.server.process import start_serve
from twin.wire.status_table import code_for

EVERY_EXTRA = "server,telemetry,ray,plot,parquet"
SCENARIO = str(EXAMPLES / "gpt3-175b-dgx-h100-ib.yaml")
SPEC = """name: tiny
base: {cluster: {system: DGX-H100, num_gpus: 256}, model: llama3.1-70b, plan: {gbs: 256, precision: bf16}}
axes: [{path: plan.tp, values: [2, 4, 8]}, {path: plan.pp, values: [1, 2]}]
mode: grid
objective: {metric: step_time_s, top: 3}
"""


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


Finished = subprocess.CompletedProcess[str]


def run_blocked(extras: str, args: list[str], tmp_path: Path, timeout: float = 120) -> tuple[Finished, list[str]]:
    """``tests/blockextras.py EXTRAS ARGS``: the finished process and the blocked imports it attempted."""
    log = tmp_path / "blocked.log"
    log.unlink(missing_ok=True)
    env = {"TWIN_BLOCKED_LOG": str(log), "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "blockextras.py"), extras, *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=timeout, check=False)
    return out, (log.read_text().split() if log.exists() else [])


# ------------------------------------------------------------------ the base install
def test_local_commands_and_the_library_import_no_extra(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    commands = [
        ["--help"],
        ["predict", SCENARIO, "--json"],
        ["validate", str(REFERENCE / "collectives.yaml"), "--json"],
        ["fleet", str(EXAMPLES / "fleets" / "two-jobs-roce.yaml"), "--json"],
        ["failures", SCENARIO, "--json"],
        ["catalog", "--json"],
        ["plugins", "--json"],
        ["sweep", str(spec), "--out", str(tmp_path / "rows.csv"), "--json"],
        ["plan", "--model", "llama3.1-8b", "--system", "DGX-H100", "--gpus", "64", "--gbs", "64", "--top", "1",
         "--json"],
    ]
    # One process runs them all: a module an earlier command imported would hide a later
    # command's import from the log, but blocked modules never import, so every attempt is logged.
    code = ("import json, sys\nfrom twin.cli import main\ncodes = []\n"
            f"for args in {commands!r}:\n"
            "    try:\n        codes.append(main(args))\n    except SystemExit as e:\n        codes.append(e.code)\n"
            "from twin.engine import Engine\nimport twin.sweep\n"
            f"est = Engine().evaluate({SCENARIO!r})\n"
            "print('CODES=' + json.dumps(codes + [0 if est.step_time_s > 0 else 1]))\n")
    out, attempted = run_blocked(EVERY_EXTRA, ["-c", code], tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    codes = json.loads(out.stdout.rsplit("CODES=", 1)[1])
    assert codes == [0] * (len(commands) + 1), list(zip([c[0] for c in commands] + ["library"], codes, strict=True))
    assert attempted == []  # not even a guarded import of an optional stack
    assert "Traceback" not in out.stderr
    assert (tmp_path / "rows.csv").read_text().count("\n") == 7  # the header and the 6 points


@pytest.mark.parametrize(("args", "extra", "field"), [
    (["serve", "--port", "0"], "server", ""),
    (["predict", "--server", "127.0.0.1:9", SCENARIO], "server", "--server"),
    (["catalog", "--server", "127.0.0.1:9"], "server", "--server"),
    (["telemetry", "status", "--server", "127.0.0.1:9"], "server", "--server"),
    (["demo"], "server", ""),
    (["sweep", "{spec}", "--out", "{tmp}/rows.parquet"], "parquet", "{tmp}/rows.parquet"),
    (["sweep", "{spec}", "--executor", "ray"], "ray", "executor"),
    (["failures", SCENARIO, "--monte-carlo", "10", "--ray"], "ray", "executor"),
    (["plot", "{tmp}/rows.csv"], "plot", ""),
], ids=["serve", "predict-remote", "catalog-remote", "telemetry", "demo", "parquet", "sweep-ray", "failures-ray",
        "plot"])
def test_a_missing_extra_is_named_exit_2_no_traceback(tmp_path, args, extra, field):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    (tmp_path / "rows.csv").write_text("label,step_time_s,compute_s\na,1.0,0.5\n")
    args = [a.format(spec=spec, tmp=tmp_path) for a in args]
    out, attempted = run_blocked(EVERY_EXTRA, args, tmp_path)
    assert out.returncode == EXIT_MISSING_EXTRA == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert f"needs the '{extra}' extra" in line and f"pip install 'fabric-twin[{extra}]'" in line, line
    want = field.format(tmp=tmp_path)
    assert line.startswith(f"twin: error: {want}: " if want else "twin: error: "), line
    assert attempted and {blocked_by(name, [extra]) for name in attempted} == {extra}, attempted


# ------------------------------------------------------------------ server without telemetry
def test_the_server_runs_with_the_server_extra_alone(tmp_path):
    log = tmp_path / "blocked.log"
    env = {"TWIN_BLOCKED_LOG": str(log), "TWIN_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"}
    proc, serving = start_serve(["--port", "0", "--state-dir", str(tmp_path / "state")], env=env, cwd=ROOT,
                                launcher=[sys.executable, str(ROOT / "tests" / "blockextras.py"),
                                          "telemetry,ray,plot,parquet"])
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        from twin.client import TwinClient

        with grpc.insecure_channel(serving["address"]) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with TwinClient(serving["address"]) as client:
            assert client.predict(SCENARIO).step_time_s > 0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert not log.exists(), log.read_text()  # started without trying the telemetry extra's modules


@pytest.mark.parametrize(("config", "field"), [
    ({"otel": {"enabled": True}}, "otel"),
    ({"telemetry": {"scrape": [{"url": "http://127.0.0.1:9/metrics"}]}}, "telemetry.scrape"),
    ({"telemetry": {"metrics_address": "127.0.0.1:0"}}, "telemetry.metrics_address"),
    ({"telemetry": {"self_metrics_endpoint": "127.0.0.1:9"}}, "telemetry.self_metrics_endpoint"),
], ids=["otel", "scrape", "metrics", "self-metrics"])
def test_a_setting_that_needs_the_telemetry_extra_names_it(tmp_path, config, field):
    path = tmp_path / "serve.json"
    path.write_text(json.dumps({"state_dir": str(tmp_path / "state"), **config}))
    out, _ = run_blocked("telemetry,ray,plot,parquet", ["serve", "--port", "0", "--config", str(path)], tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith(f"twin: error: {field}: ") and "pip install 'fabric-twin[telemetry]'" in line, line


# ------------------------------------------------------------------ the error and its table
def test_only_imports_of_the_extra_become_the_named_error():
    with pytest.raises(MissingExtraError) as err, needs_extra("plot", "drawing plots", field="out"):
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    assert (err.value.extra, err.value.field, err.value.missing) == ("plot", "out", "matplotlib")
    assert isinstance(err.value, InfeasibleError) and code_for(err.value) == grpc.StatusCode.FAILED_PRECONDITION
    # The twin's own module, or a module another extra provides: a bug, not a missing install.
    for extra, name in (("plot", "twin.nowhere"), ("plot", "pyarrow"), ("server", "opentelemetry.sdk")):
        with pytest.raises(ModuleNotFoundError), needs_extra(extra, "x"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    # A package of the extra, or the missing parent of one: the extra is missing.
    for name in ("opentelemetry.proto.collector", "opentelemetry", "google.protobuf"):
        with pytest.raises(MissingExtraError), needs_extra("server", "twin serve"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    with pytest.raises(ValueError, match="unknown extra"), needs_extra("plots", "x"):
        pass


def test_the_cli_exits_2_for_a_missing_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    assert main(["plot", SCENARIO, "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("twin: error: drawing plots needs the 'plot' extra") and not (tmp_path / "x.png").exists()


# ------------------------------------------------------------------ pyproject agrees
def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower().replace("_", "-") for r in requirements}


def test_each_extras_modules_come_from_that_extras_distributions():
    extras = project()["optional-dependencies"]
    providers = importlib.metadata.packages_distributions()
    assert set(EXTRA_MODULES) <= set(extras) and set(PROVIDES) == set(EXTRA_MODULES)
    for extra, modules in EXTRA_MODULES.items():
        declared = _names(extras[extra])
        for module in modules:
            dists = {d.lower().replace("_", "-") for d in providers.get(module.partition(".")[0], [])}
            assert dists & declared, f"{module} ({sorted(dists)}) comes from no distribution of [{extra}]"


def test_the_base_install_pulls_no_optional_stack():
    providers = importlib.metadata.packages_distributions()
    optional = {d.lower().replace("_", "-") for modules in EXTRA_MODULES.values() for m in modules
                for d in providers.get(m.partition(".")[0], [])}
    assert _names(project()["dependencies"]) & optional == set()


def test_the_readme_installs_real_extras_and_names_each():
    named = {e for group in re.findall(r"pip install '\.\[([a-z,]+)\]'", (ROOT / "README.md").read_text())
             for e in group.split(",")}
    assert named == set(project()["optional-dependencies"]) - {"bench", "test"}


def test_setup_installs_every_extra_the_tests_use_and_serving_only_what_it_needs():
    text = (ROOT / "scripts" / "setup.sh").read_text()
    installed = set(re.search(r"test\) VENV=\.venv; EXTRAS=([a-z,]+) ;;", text).group(1).split(","))
    assert installed == set(project()["optional-dependencies"]) - {"bench"}  # bench: a benchmark only
    serving = set(re.search(r"serve\) VENV=\.venv-serve; EXTRAS=([a-z,]+) ;;", text).group(1).split(","))
    assert serving == {"server", "telemetry", "web"}  # twin serve, its telemetry and its web view
