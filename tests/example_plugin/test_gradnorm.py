"""The example strategy's own test: the conformance kit runs it on one scenario and a batch."""

from twin_example_dragonfly.gradnorm import GradientNormAllReduce

from twin.testing import assert_strategy_conforms

SCENARIO = {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
            "plan": {"tp": 8, "pp": 4, "vp": 5, "gbs": 1024}}


def test_gradnorm_conforms() -> None:
    assert_strategy_conforms(GradientNormAllReduce(), SCENARIO)
