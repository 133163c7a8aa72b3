"""twin.api is the one module plugins import: its contents, and the import rule for plugins.

The rule (DESIGN.md, docs/plugins.md): a plugin imports from ``twin.api`` (and
``twin.hookimpl``) and nothing else of twin's, and never another plugin. Imports are read
with ``ast`` from the source, so imports inside functions and ``TYPE_CHECKING`` blocks
count too.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

import pytest

import twin.api
import twin.hookimpl
from twin.plugins import BUILTIN

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_TWIN = {"twin.api", "twin.hookimpl"}
# Every plugin module: the built-ins (each module is its own plugin, so a relative import
# between them is a plugin importing another) and the example third-party package (which
# may import its own modules).
BUILTIN_FILES = sorted([*(ROOT / "plugins").glob("*.py"), *(ROOT / "twin" / "presets").glob("*.py")])
EXAMPLE_FILES = sorted((ROOT / "tests" / "example_plugin" / "twin_example_dragonfly").glob("*.py"))


def _forbidden_module(module: str) -> bool:
    root = module.split(".")[0]
    if root == "twin_plugins":
        return True
    return root == "twin" and module not in ALLOWED_TWIN


def forbidden_imports(source: str, *, relative_ok: bool) -> set[tuple[str, str | None]]:
    """(module, name) of every import in ``source`` that breaks the rule (name None: ``import m``)."""
    out: set[tuple[str, str | None]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {(a.name, None) for a in node.names if _forbidden_module(a.name)}
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.level:
                bad = not relative_ok
            elif module == "twin":  # from twin import api / hookimpl / core ...
                out |= {(module, a.name) for a in node.names if f"twin.{a.name}" not in ALLOWED_TWIN}
                continue
            else:
                bad = _forbidden_module(module)
            if bad:
                out |= {(module, a.name) for a in node.names}
    return out


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_checker_catches_what_it_must():
    bad = """
from twin.core.specs import Cluster
import twin_plugins.roce
from twin import engine, hookimpl
import twin
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from twin.core.topology import Tier
def f():
    from twin.core.units import GIB
from .infiniband import fat_tree_report
"""
    assert forbidden_imports(bad, relative_ok=False) == {
        ("twin.core.specs", "Cluster"), ("twin_plugins.roce", None), ("twin", "engine"), ("twin", None),
        ("twin.core.topology", "Tier"), ("twin.core.units", "GIB"), (".infiniband", "fat_tree_report")}
    assert forbidden_imports("from .plugin import X\n", relative_ok=True) == set()
    good = "import math\nimport yaml\nfrom twin.api import Tier, hookimpl\nfrom twin import api, hookimpl\n" \
           "import twin.api\nfrom twin.hookimpl import hookimpl\n"
    assert forbidden_imports(good, relative_ok=False) == set()


def test_every_builtin_plugin_module_is_checked():
    checked = {p.resolve() for p in BUILTIN_FILES}
    for name, module in BUILTIN.items():
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, name
        assert Path(spec.origin).resolve() in checked, f"built-in plugin {name} ({spec.origin}) is not checked"
    assert EXAMPLE_FILES, "the example plugin package is missing"


@pytest.mark.parametrize("path", BUILTIN_FILES + EXAMPLE_FILES, ids=_rel)
def test_plugins_import_only_the_public_api(path: Path):
    found = forbidden_imports(path.read_text(encoding="utf-8"), relative_ok=path in EXAMPLE_FILES)
    assert not found, (f"{_rel(path)} imports {sorted(found, key=str)}: plugins import only twin.api and "
                       "twin.hookimpl (add what is missing to twin.api)")


def test_all_is_the_api():
    names = twin.api.__all__
    assert len(names) == len(set(names)), "a name is listed twice in twin.api.__all__"
    assert all(hasattr(twin.api, n) for n in names)
    public = {n for n, v in vars(twin.api).items() if not n.startswith("_") and n != "annotations"
              and (not inspect.ismodule(v) or n in names)}
    assert public == set(names), "twin.api binds public names outside __all__ (or lists missing ones)"


def test_the_api_re_exports_and_does_not_copy():
    """Classes and functions are the core's own objects, so isinstance and identity hold."""
    assert twin.api.hookimpl is twin.hookimpl.hookimpl
    for name in twin.api.__all__:
        obj = getattr(twin.api, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__.startswith("twin.core."), f"twin.api.{name} is defined in {obj.__module__}"
        elif inspect.ismodule(obj):
            assert obj.__name__.startswith("twin.core."), f"twin.api.{name} is the module {obj.__name__}"
