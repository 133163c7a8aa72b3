"""The example pipeline alternative's own test: selected, it conforms on one scenario and a batch."""

from twin_example_dragonfly.compressed_pp import CompressedPipeline

from twin.testing import assert_strategy_conforms

SCENARIO = {"cluster": {"system": "DGX-H100", "num_gpus": 1024}, "model": "llama3.1-70b",
            "plan": {"tp": 8, "pp": 4, "vp": 5, "gbs": 1024}}


def test_compressed_pipeline_conforms() -> None:
    assert_strategy_conforms(CompressedPipeline(), SCENARIO, config={"forward_bits": 4, "backward_bits": 8})
