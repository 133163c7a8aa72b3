"""docs/plugins.md stays true: every hook and every twin.api name documented, the example
in the page is the example package the suite installs, and it passes the conformance kit.

The page's code blocks after an ``<!-- include: PATH -->`` line are copies of PATH;
after editing one of those files, refresh the page with::

    python -m tests.plugins.test_docs --write
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import types
from pathlib import Path

import yaml

import twin.api
from twin import hookspecs
from twin.testing import assert_scale_out_fabric_conforms, engine_with

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "plugins.md"
INCLUDE = re.compile(r"^<!-- include: (?P<path>\S+) -->\n```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.M | re.S)
EXAMPLE_MODULE = "tests/example_plugin/twin_example_dragonfly/plugin.py"
STRATEGY_MODULE = "tests/example_plugin/twin_example_dragonfly/gradnorm.py"
ALTERNATIVE_MODULE = "tests/example_plugin/twin_example_dragonfly/compressed_pp.py"
EXAMPLE_FILES = {EXAMPLE_MODULE, "tests/example_plugin/pyproject.toml", "tests/example_plugin/test_dragonfly.py",
                 STRATEGY_MODULE, "tests/example_plugin/test_gradnorm.py", ALTERNATIVE_MODULE,
                 "tests/example_plugin/test_compressed_pp.py"}


def _section(text: str, heading: str) -> str:
    """The body of the level-2 section ``heading`` (up to the next level-2 heading)."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _includes(text: str) -> dict[str, str]:
    return {m["path"]: m["body"] for m in INCLUDE.finditer(text)}


def synced(text: str) -> str:
    """``text`` with every included block replaced by its file's current content."""
    return INCLUDE.sub(lambda m: f"<!-- include: {m['path']} -->\n```{m['lang']}\n"
                                 f"{(ROOT / m['path']).read_text(encoding='utf-8')}```", text)


def _doc_module(path: str = EXAMPLE_MODULE) -> types.ModuleType:
    """An example module as printed in the page, executed (not the installed copy)."""
    module = types.ModuleType("docs_plugins_example")
    code = _includes(DOC.read_text(encoding="utf-8"))[path]
    exec(compile(code, f"{DOC}:{EXAMPLE_MODULE}", "exec"), module.__dict__)
    return module


def _hooks() -> set[str]:
    return {name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
            if name.startswith("twin_") and hasattr(fn, "twin_spec")}


def test_every_hook_is_documented():
    hooks = _hooks()
    assert len(hooks) >= 7, hooks  # the specs are found (guards the marker lookup itself)
    documented = set(re.findall(r"^### `(twin_\w+)`$", _section(DOC.read_text(encoding="utf-8"), "Hooks"), re.M))
    assert hooks - documented == set(), "hooks without a '### `name`' section under '## Hooks' in docs/plugins.md"
    assert documented - hooks == set(), "docs/plugins.md documents hooks that twin/hookspecs.py does not have"


def test_every_api_name_is_documented_in_the_index():
    index = _section(DOC.read_text(encoding="utf-8"), "The `twin.api` index")
    rows = re.findall(r"^\| `([^`]+)` \|", index, re.M)
    assert len(rows) == len(set(rows)), "a name is documented twice in the twin.api index"
    exported = set(twin.api.__all__)
    assert exported - set(rows) == set(), "twin.api exports names the index of docs/plugins.md does not document"
    assert set(rows) - exported == set(), "docs/plugins.md indexes names twin.api does not export"


def test_the_api_docstring_indexes_every_name():
    doc = twin.api.__doc__ or ""
    missing = [name for name in twin.api.__all__ if f"``{name}``" not in doc]
    assert not missing, f"twin.api's docstring (the index) does not mention: {missing}"


def test_the_page_shows_the_example_package_verbatim():
    text = DOC.read_text(encoding="utf-8")
    assert set(_includes(text)) == EXAMPLE_FILES
    assert text == synced(text), "docs/plugins.md is out of date: run python -m tests.plugins.test_docs --write"


def test_the_docs_example_runs_through_the_conformance_kit(example_plugin):
    """The module as printed in the page passes the kit (it imports the package's compressed_pp: the fixture)."""
    assert_scale_out_fabric_conforms(_doc_module().DragonflyFabric(), {"gpus_per_group": 128})
    # And the package's own test, as printed, uses the kit on that fabric.
    test_code = _includes(DOC.read_text(encoding="utf-8"))["tests/example_plugin/test_dragonfly.py"]
    assert "assert_scale_out_fabric_conforms(DragonflyFabric()" in test_code


def test_the_docs_strategy_runs_through_the_conformance_kit_on_the_batch_path():
    """The strategy as printed in the page passes the kit (one scenario and a batch) and is vectorised."""
    from twin.testing import assert_strategy_conforms

    strategy = _doc_module(STRATEGY_MODULE).GradientNormAllReduce()
    assert strategy.vectorized
    assert_strategy_conforms(strategy, {"cluster": {"system": "DGX-H100", "num_gpus": 1024},
                                        "model": "llama3.1-70b", "plan": {"tp": 8, "pp": 4, "vp": 5, "gbs": 1024}})


def test_the_docs_scenario_gives_the_report_the_page_shows(example_plugin):
    text = DOC.read_text(encoding="utf-8")
    after = text[text.index("a scenario selects it like any built-in"):]
    scenario = yaml.safe_load(re.search(r"```yaml\n(.*?)```", after, re.S)[1])
    est = engine_with(_doc_module().DragonflyFabric()).evaluate(scenario)
    shown = re.search(r"holds its report \(`(\{.*?\})`\)", after)[1]
    assert est.fabric["scale_out"] == json.loads(shown)


def test_readme_links_the_page():
    plugins = _section((ROOT / "README.md").read_text(encoding="utf-8"), "Plugins")
    assert "(docs/plugins.md)" in plugins


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        DOC.write_text(synced(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        sys.exit("usage: python -m tests.plugins.test_docs --write")
