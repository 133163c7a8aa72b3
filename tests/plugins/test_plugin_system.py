"""The plugin system: built-ins by name, blocking, autoload switch, duplicates, entry points."""

from __future__ import annotations

import pytest
from twin_plugins.infiniband import InfiniBandFabric
from twin_plugins.roce import RoCEFabric

from tests.conftest import EXAMPLE_DIST, base_scenario
from twin.api import NotFoundError, PluginError, ScaleOutFabric, Strategy
from twin.engine import Engine
from twin.hookimpl import hookimpl
from twin.plugins import BUILTIN, make_plugin_manager
from twin.testing import assert_scale_out_fabric_conforms, assert_strategy_conforms, engine_with


def test_builtins_are_registered_by_name():
    pm = make_plugin_manager(autoload=False)
    names = {name for name, _ in pm.list_name_plugin()}
    assert set(BUILTIN) <= names


def test_a_blocked_builtin_is_gone(engine):
    blocked = Engine(make_plugin_manager(autoload=False, block=("roce",)))
    assert "roce" not in blocked.fabrics.kinds()["scale_out"]
    data = base_scenario()
    data["cluster"]["scale_out"] = {"fabric": "roce"}
    with pytest.raises(NotFoundError) as info:
        blocked.scenario(data)
    assert info.value.field == "cluster.scale_out.fabric"


def test_blocking_by_environment(monkeypatch):
    monkeypatch.setenv("TWIN_BLOCK_PLUGINS", "optics, cxl")
    names = {name for name, p in make_plugin_manager(autoload=False).list_name_plugin() if p is not None}
    assert "optics" not in names and "cxl" not in names and "nvlink" in names


class _Dup:
    @hookimpl
    def twin_fabrics(self):
        class Another(InfiniBandFabric):
            pass

        return [Another()]


def test_duplicate_fabric_kind_names_both_plugins():
    pm = make_plugin_manager(autoload=False, extra=[_Dup()])
    with pytest.raises(PluginError) as info:
        Engine(pm)
    msg = str(info.value)
    assert "infiniband" in msg and "registered twice" in msg


def test_a_strategy_with_a_bad_phase_is_rejected():
    class Bad(Strategy):
        name = "bad"
        phase = "whenever"

    with pytest.raises(PluginError):
        engine_with(Bad())


def test_example_third_party_plugin_is_found_through_its_entry_point(example_plugin):
    engine = Engine(autoload=True)
    infos = {i.name: i for i in engine.plugins()}
    assert infos["example-dragonfly"].distribution == EXAMPLE_DIST
    assert not infos["example-dragonfly"].builtin
    data = base_scenario()
    data["cluster"]["num_gpus"] = 1024
    data["cluster"]["scale_out"] = {"fabric": "example-dragonfly",
                                    "params": {"gpus_per_group": 256, "global_taper": 2}}
    data["plan"] = {"tp": 8, "pp": 1, "gbs": 1024}
    est = engine.evaluate(data)
    assert est.fabric["scale_out"]["groups"] == 4
    # The autoload switch turns third-party plugins off.
    assert "example-dragonfly" not in Engine(autoload=False).fabrics.kinds()["scale_out"]


@pytest.mark.parametrize("fabric", [InfiniBandFabric(), RoCEFabric()])
def test_builtin_fabrics_pass_the_conformance_kit(fabric):
    class Renamed(type(fabric)):
        kind = f"test-{fabric.kind}"

    assert_scale_out_fabric_conforms(Renamed())


def test_conformance_kit_catches_a_broken_fabric():
    class Broken(ScaleOutFabric):
        kind = "broken"

        def tiers(self, cluster, radix):
            from twin.api import Tier

            return [Tier("leaf", self.kind, 8, -1.0, 1e-6)]

    with pytest.raises(AssertionError):
        assert_scale_out_fabric_conforms(Broken())


def test_builtin_strategies_conform():
    from twin_plugins.tensor_parallel import TensorParallel

    class Tp2(TensorParallel):
        name = "tensor-copy"

    assert_strategy_conforms(Tp2(), base_scenario())
