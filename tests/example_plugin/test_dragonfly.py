"""The example dragonfly package's own test: the conformance kit checks the fabric end to end."""

from twin_example_dragonfly.plugin import DragonflyFabric

from twin.testing import assert_scale_out_fabric_conforms


def test_dragonfly_conforms() -> None:
    assert_scale_out_fabric_conforms(DragonflyFabric())


def test_dragonfly_conforms_with_small_groups() -> None:
    assert_scale_out_fabric_conforms(DragonflyFabric(), {"gpus_per_group": 128, "global_taper": 4})
