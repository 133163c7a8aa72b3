"""The import contracts in pyproject.toml are real: every module is placed, and they bite.

``lint-imports`` (run by scripts/test.sh) checks the tree as it is. These tests check the
contracts themselves: every module of ``twin`` sits in a layer (the layers contract
cannot say ``exhaustive`` because it spans two root packages), and each contract breaks
when a copy of the tree gets the kind of import it forbids — lazy ones included.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def contracts() -> dict[str, dict[str, Any]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["id"]: c for c in data["tool"]["importlinter"]["contracts"]}


def layered_modules() -> set[str]:
    names: set[str] = set()
    for layer in contracts()["layers"]["layers"]:
        names.update(part.strip().strip("()") for part in re.split(r"[|:]", layer))
    return names


def test_every_module_of_twin_is_in_a_layer():
    children = {f"twin.{p.stem}" for p in (ROOT / "twin").iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert children, "no modules found under twin/"
    assert children - layered_modules() == set(), "place each new module in the layers contract (pyproject.toml)"
    assert "twin_plugins" in layered_modules()


def lint(tree: Path) -> tuple[int, str]:
    """lint-imports on a copy of the project (its pyproject.toml), importing from that copy."""
    env = {**os.environ, "PYTHONPATH": str(tree)}  # ahead of the editable install's finder
    out = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                                                "lint_imports_command()", "--no-cache"],
                         check=False,  # a broken contract exits 1: that is what the test looks at
                         cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


def copy_tree(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyi")
    shutil.copytree(ROOT / "twin", dest / "twin", ignore=ignore)
    shutil.copytree(ROOT / "plugins", dest / "twin_plugins", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def add(tree: Path, module: str, code: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = path.with_suffix("") / "__init__.py"
    path.write_text(path.read_text() + "\n\n" + code + "\n")


def status(report: str, name: str) -> str:
    # lint-imports may wrap a long contract name over lines; the verdict ends its last line
    flat = " ".join(report.split())
    match = re.search(re.escape(" ".join(name.split())) + r" (KEPT|BROKEN)", flat)
    assert match, f"no verdict for {name!r} in:\n{report}"
    return match.group(1)


def test_the_contracts_bite(tmp_path):
    names = {cid: c["name"] for cid, c in contracts().items()}
    # a new contract needs a forbidden import below that proves it bites
    assert set(names) == {"layers", "acyclic", "client", "core-frameworks", "core-adapters", "adapters-facade",
                          "api-below-plugins", "plugins-public-api", "plugins-independent"}
    rc, clean = lint(copy_tree(tmp_path / "clean"))
    assert rc == 0, clean
    assert {cid: status(clean, name) for cid, name in names.items()} == dict.fromkeys(names, "KEPT"), clean

    tree = copy_tree(tmp_path / "broken")
    lazy = "def _lazy() -> None:\n    {}\n"
    # each a function-level import: the contracts count lazy imports as imports
    add(tree, "twin.client", lazy.format("from twin.server import guard"))       # client -> server
    add(tree, "twin.sweep.metrics", lazy.format("from twin.sweep import sweep_spec"))  # a cycle: it imports metrics
    add(tree, "twin.core.units", lazy.format("import grpc"))                     # core -> a framework
    add(tree, "twin.core.errors", lazy.format("from twin import wire"))          # core -> an adapter
    add(tree, "twin_plugins.nvlink", lazy.format("from twin.sweep import runner"))  # a plugin above its layer
    add(tree, "twin.api", lazy.format("from twin.engine import Engine"))         # the API above its layer
    add(tree, "twin_plugins.fsdp", lazy.format("from twin.core import memory"))   # a plugin past the public API
    add(tree, "twin_plugins.roce", lazy.format("from twin_plugins import infiniband"))  # a plugin importing another
    add(tree, "twin.web.views", lazy.format("from twin.core.run import driver"))  # an adapter past the facade
    rc, report = lint(tree)
    assert rc == 1, report  # scripts/test.sh (set -e) stops here
    assert {cid: status(report, name) for cid, name in names.items()} == dict.fromkeys(names, "BROKEN"), report
    for chain in ("twin.client -> twin.server.guard", "twin.core.units -> grpc", "twin.core.errors -> twin.wire",
                  "twin_plugins.nvlink -> twin.sweep.runner", "twin.api -> twin.engine",
                  "twin_plugins.fsdp -> twin.core.memory", "twin_plugins.roce -> twin_plugins.infiniband",
                  "twin.web.views -> twin.core.run.driver"):
        assert chain in report, f"{chain} not reported:\n{report}"
    # the cycle is reported by one of its imports, whichever import-linter would remove
    assert "No cycles are allowed in twin.sweep." in report
    assert ".sweep_spec -> .metrics" in report or ".metrics -> .sweep_spec" in report, report


def _modules(*roots: str) -> list[Path]:
    return [p for r in roots for p in sorted((ROOT / r).rglob("*.py"))
            if "rpc" not in p.relative_to(ROOT).parts]


def test_no_two_modules_of_twin_share_a_file_name():
    seen: dict[str, list[str]] = {}
    for path in _modules("twin"):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


MODULE_LINES = 800
CORE_FUNCTION_LINES = 80


def test_modules_stay_small_and_core_functions_short():
    import ast

    big = {str(p.relative_to(ROOT)): n for p in _modules("twin", "plugins")
           if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert big == {}, f"modules over {MODULE_LINES} lines: split them by job"
    long = {}
    for path in _modules("twin/core"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > CORE_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}, f"functions of twin/core over {CORE_FUNCTION_LINES} lines"


ADAPTERS = ("twin/server", "twin/telemetry", "twin/sweep", "twin/web", "twin/commands", "twin/failure_analyzer.py",
            "twin/fleet_report.py", "twin/reference", "twin/testing.py")


def test_adapters_reach_the_model_only_through_the_engine():
    # The import contract ("adapters-facade") stops imports of the driver; this stops the
    # attribute route to it: the engine keeps its driver private (Engine._model).
    reach = re.compile(r"\._model\b|\bengine\.model\b")
    found = []
    for root in ADAPTERS:
        path = ROOT / root
        for p in ([path] if path.suffix == ".py" else sorted(path.rglob("*.py"))):
            found += [f"{p.relative_to(ROOT)}:{n}" for n, line in enumerate(p.read_text().splitlines(), 1)
                      if reach.search(line)]
    assert found == []
