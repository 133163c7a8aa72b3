"""scripts/lowest_versions.py reads every floor pyproject.toml declares (the check itself is run
on its own: README, "Tests"); a requirement without a floor cannot be checked and is refused."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def script():
    spec = importlib.util.spec_from_file_location("lowest_versions", ROOT / "scripts" / "lowest_versions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_dependency_the_tests_use_declares_a_floor_and_each_becomes_a_pin():
    lv = script()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    runtime, build = lv.pins(pyproject, lv.TEST_EXTRAS.split(","))
    declared = [*pyproject["project"]["dependencies"],
                *(r for e in lv.TEST_EXTRAS.split(",") for r in pyproject["project"]["optional-dependencies"][e])]
    assert len(runtime) == len({lv.canonical(lv.REQUIREMENT.match(r).group(1)) for r in declared})
    assert runtime["protobuf"] == "7.35.1" and runtime["grpcio"] == "1.85.1"  # what the generated code checks
    assert build == {"setuptools": "77.0.1", "grpcio-tools": "1.85.1"}  # wheel is unversioned: not pinned
    # Every extra but the benchmark's, as scripts/setup.sh installs (tests/test_extras.py checks that side).
    assert set(lv.TEST_EXTRAS.split(",")) == set(pyproject["project"]["optional-dependencies"]) - {"bench"}


def test_requirement_forms():
    lv = script()
    assert lv.floor_pin("numpy>=1.26") == ("numpy", "1.26")
    assert lv.floor_pin("Foo_Bar[x] ~= 2.1 ; python_version < '3.13'") == ("foo-bar", "2.1")
    assert lv.floor_pin("grpcio-tools==1.85.1") == ("grpcio-tools", "1.85.1")
    assert lv.floor_pin("pyarrow>=15.0,<30") == ("pyarrow", "15.0")
    assert lv.floor_pin("fabric-twin[server]") is None  # the project's own extra
    with pytest.raises(ValueError, match="no lower bound"):
        lv.floor_pin("requests<3")
    with pytest.raises(ValueError, match="no lower bound"):
        lv.floor_pin("wheel")
    with pytest.raises(ValueError, match="no extra"):
        lv.pins({"project": {"dependencies": [], "optional-dependencies": {}}}, ["plots"])
    assert lv.release("1.5") == lv.release("1.5.0") != lv.release("1.5.1")
