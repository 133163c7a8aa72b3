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
    add(tree, "twin.sweep.metrics", lazy.format("from twin.sweep import sweep_spec"))  # sweep_spec imports metrics: a cycle
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

